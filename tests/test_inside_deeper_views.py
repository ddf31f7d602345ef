""":patch, :attrib and :lens at=: the commands against the core, rendered at 80 columns without colour,
typed in the REPL and run once from the shell (--json)."""

import io
import json

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli
from minitf_repl import commands as C
from minitf_repl.commands import REGISTRY
from minitf_repl.commands.why import split_prompts
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.dispatch import FrontDoor, run_command, to_json
from minitf_repl.parsing import parse_line
from minitf_repl.render import render
from minitf_repl.session import Session

TINY = {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "batch_size": 4,
        "autosave": False}


def text_of(result, width=80) -> str:
    c = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, c)
    return c.file.getvalue()


def fits(out: str, width=80) -> bool:
    return all(len(line) <= width for line in out.splitlines())


@pytest.fixture(scope="module")
def trained():
    s = Session(data_spec="sort:5")  # the prompts below are its questions: only a task's own question has an answer
    run_command(s, "set", dict(TINY))
    run_command(s, "train", {"steps": 30, "eval_every": 10})
    return s


# --- :patch -----------------------------------------------------------------------------------------------
def test_patch_is_the_cores_sweep_with_the_tasks_answer(trained):
    from minitf_repl.core.patching import activation_patching

    r = run_command(trained, "patch", {"prompts": "31415= 38495="})
    assert isinstance(r, C.PatchResult) and r.answer == "1"  # sort's answer to 31415= starts with 1
    enc = trained.data.tokenizer.encode
    ref = activation_patching(trained.model, enc("31415="), enc("38495="), enc("1")[0])
    assert torch.allclose(torch.tensor(r.resid), ref.resid) and torch.allclose(torch.tensor(r.heads), ref.heads)
    assert r.stream == ["embed", "blocks.0", "blocks.1"] and r.corrupt_tokens == list("38495=")
    assert r.resid[-1][-1] == pytest.approx(1.0, abs=1e-4)
    from minitf_repl.core.patching import MIN_GAP

    weak = r.clean_diff - r.corrupt_diff < MIN_GAP  # 30 steps of training: the answer may hardly move yet
    assert r.reading.startswith("the corruption moves") if weak else r.reading.split(" ")[0] in ("most", "head", "no")
    json.dumps(to_json(r), allow_nan=False)
    vs = run_command(trained, "patch", {"prompts": "31415= vs 38495=", "target": "1"})
    assert vs.resid == r.resid


def test_patch_renders_a_heatmap_a_head_table_and_a_reading_at_80_columns(trained):
    r = run_command(trained, "patch", {"prompts": "31415= 38495="})
    out = text_of(r)
    assert fits(out)
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("         3 8 4 9 5 ="))
    grid = lines[lines.index(header) + 1: lines.index(header) + 4]
    assert [line.split()[0] for line in grid] == ["embed", "blocks.0", "blocks.1"]
    assert grid[-1].rstrip().endswith("@")  # the last position after the last block: all of it
    assert "restored: 0" in out and "head 1" in out and "differ at positions 1 and 3" in out
    assert " ".join(out.split()).endswith(r.reading)  # the reading closes the view (wrapped at 80 columns if long)


def test_patch_reading_names_the_head_that_carries_it():
    reading = C.patch_reading([[0.1, 0.05], [0.9, 0.2]], ["embed", "blocks.0", "blocks.1"],
                              [[0, 0], [0, 0.7], [0, 1]])
    assert reading == ("most of it comes back when head 1.0 is patched (0.90); the last position holds most "
                       "of the answer from blocks.0 on")
    assert C.patch_reading([[0.1, 0.3]], ["embed", "blocks.0"], [[0, 0], [0, 1]]).startswith(
        "head 0.1 brings back the most (0.30)")
    assert C.patch_reading([[0.1, -0.3]], ["embed", "blocks.0"], [[0, 0], [0, 1]]).startswith(
        "no single head brings much back")


def test_patch_says_in_one_line_what_is_wrong(trained):
    with pytest.raises(DataError, match="same length in tokens, got 6 tokens and 5"):
        run_command(trained, "patch", {"prompts": "31415= 3141="})
    with pytest.raises(UserError, match="give two prompts"):
        run_command(trained, "patch", {"prompts": "31415="})
    with pytest.raises(UserError, match="target must be one token"):
        run_command(trained, "patch", {"prompts": "31415= 38495=", "target": "12"})
    with pytest.raises(UserError, match="the two prompts are the same"):  # said as such (a fifty-third session)
        run_command(trained, "patch", {"prompts": "31415= 31415="})


def test_patch_wide_prompts_show_their_last_positions():
    T = 90
    r = C.PatchResult("a" * T, "b" * T, ["a"] * T, ["b"] * T, "x", "y", 1.0, 0.0, ["embed", "blocks.0"],
                      [[0.0] * T, [0.0] * (T - 1) + [1.0]], [[0.5]], "most of it comes back when head 0.0 is patched")
    out = text_of(r)
    assert fits(out) and "showing the last 71 of 90 positions" in out


# --- :attrib ----------------------------------------------------------------------------------------------
def test_attrib_parts_sum_to_the_logit_and_come_largest_first(trained):
    r = run_command(trained, "attrib", {"prompt": "31415="})
    assert isinstance(r, C.AttribResult) and r.target == "1"  # the task's answer
    assert sum(p.logit for p in r.parts) + r.offset == pytest.approx(r.logit, abs=1e-4)
    sizes = [abs(p.logit) for p in r.parts]
    assert sizes == sorted(sizes, reverse=True)
    assert {p.kind for p in r.parts} == {"embed", "head", "ffn", "bias"} and len(r.parts) == 2 + 4 + 2 + 1
    ids = trained.data.tokenizer.encode("31415=")
    with torch.no_grad():
        trained.model.eval()
        z = trained.model(torch.tensor([ids]))[0][0, -1]
        trained.model.train()
    assert r.logit == pytest.approx(float(z[trained.data.tokenizer.stoi["1"]]), abs=1e-5)
    other = run_command(trained, "attrib", {"prompt": "31415=", "target": "9"})
    assert other.target == "9" and other.logit == pytest.approx(float(z[trained.data.tokenizer.stoi["9"]]), abs=1e-5)
    json.dumps(to_json(r), allow_nan=False)


def test_attrib_renders_bars_and_states_the_offset_at_80_columns(trained):
    r = run_command(trained, "attrib", {})
    out = text_of(r)
    assert fits(out)
    words = " ".join(out.split())  # notes wrap at spaces
    assert "█" in out and "the frozen norm adds" in words and f"the logit {r.logit:.2f}" in words
    first = next(line for line in out.splitlines() if line.startswith(r.parts[0].name))
    assert first.rstrip().endswith("█" * 40) or first.rstrip().endswith("░" * 40)  # the largest: the longest bar
    assert "█ adds to the logit, ░ takes away" in words
    # in colour every bar is █, green or red, and the key says so (it said ░ there too, wrongly)
    colour = Console(file=io.StringIO(), width=80, color_system="standard", force_terminal=True)
    render(r, colour)
    words = " ".join(colour.file.getvalue().split())
    assert "green adds to the logit, red takes away" in words and "░" not in words


def test_attrib_refuses_a_post_norm_model():
    s = Session(data_spec="sort")
    run_command(s, "set", {**TINY, "norm_placement": "post"})
    with pytest.raises(UserError, match="post-norm"):
        run_command(s, "attrib", {"prompt": "31415="})


# --- :lens at= --------------------------------------------------------------------------------------------
def test_lens_at_mid_and_both(trained):
    mid = run_command(trained, "lens", {"prompt": "31415=", "at": "mid"})
    assert [row.layer for row in mid.rows] == ["embed", "blocks.0.mid", "blocks.1.mid"] and mid.at == "mid"
    both = run_command(trained, "lens", {"prompt": "31415=", "at": "both"})
    end = run_command(trained, "lens", {"prompt": "31415="})
    assert [row.layer for row in both.rows] == ["embed", "blocks.0.mid", "blocks.0", "blocks.1.mid", "blocks.1"]
    assert both.rows[-1] == end.rows[-1] and both.rows[1] == mid.rows[1]
    out = text_of(mid)
    assert fits(out) and "after its attention, before its FFN" in out and "at=end" in out
    from minitf_repl.core.inside import LENS_AT

    assert C.LENS_AT == LENS_AT  # the command's choices, known before torch, are the core's


# --- the REPL line and the one-shot shell ------------------------------------------------------------------
def test_the_repl_lines(trained):
    command, args = parse_line(":patch 31415= 38495= target=1", REGISTRY)
    assert command.name == "patch" and args == {"prompts": "31415= vs 38495=", "target": "1"}
    # two quoted prompts with spaces inside stay two prompts; typed `vs` and one word each say the same
    for line in (':patch "the cat sat" "the mat sat"', ":patch the cat sat vs the mat sat"):
        assert parse_line(line, REGISTRY)[1] == {"prompts": "the cat sat vs the mat sat"}, line
    assert split_prompts(parse_line(':patch "the cat sat" "the mat sat"', REGISTRY)[1]["prompts"]) == (
        "the cat sat", "the mat sat")
    with pytest.raises(UserError, match="give two prompts"):
        split_prompts(parse_line(":patch the cat sat", REGISTRY)[1]["prompts"])
    out = Console(file=io.StringIO(), width=80, color_system=None)
    door = FrontDoor(trained, out)
    for line in (":patch 31415= 38495= target=1", ':patch "31415=" "38495="', ":attrib 31415= target=1",
                 ":lens 31415= at=mid"):
        assert door.run_line(line) == "ok", line
    text = out.file.getvalue()
    assert "each head's output" in text and "what writes the logit of '1'" in text and "blocks.1.mid" in text
    err = Console(file=io.StringIO(), width=300, color_system=None)
    door = FrontDoor(trained, out, err)
    assert door.run_line(":patch 31415= 3141=") == "failed"
    assert err.file.getvalue().count("\n") == 1 and "same length in tokens" in err.file.getvalue()


SHELL = ["--set", "n_layers=2", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32",
         "--data", "sort:5"]


def test_the_one_shot_shell():
    runner = CliRunner()
    doc = doc_patch = json.loads(runner.invoke(cli.app, [*SHELL, "patch", "31415= 38495=", "--json"]).stdout)
    assert doc["schema"] == "minitf.patch/5" and len(doc["resid"]) == 3 and len(doc["heads"][0]) == 2
    doc = json.loads(runner.invoke(cli.app, [*SHELL, "attrib", "31415=", "--target", "3", "--json"]).stdout)
    assert doc["target"] == "3" and abs(sum(p["logit"] for p in doc["parts"]) + doc["offset"] - doc["logit"]) < 1e-4
    doc = json.loads(runner.invoke(cli.app, [*SHELL, "lens", "31415=", "--at", "mid", "--json"]).stdout)
    assert doc["schema"] == "minitf.lens/7" and doc["at"] == "mid" and doc["rows"][1]["layer"] == "blocks.0.mid"
    two = json.loads(runner.invoke(cli.app, [*SHELL, "patch", "31415=", "38495=", "--json"]).stdout)  # two arguments
    assert (two["clean"], two["corrupt"]) == ("31415=", "38495=") and two["heads"] == doc_patch["heads"]
    result = runner.invoke(cli.app, [*SHELL, "patch", "31415= 3141="])
    assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1 and result.stdout == ""
    text = runner.invoke(cli.app, [*SHELL, "attrib", "31415="])
    assert text.exit_code == 0 and "the frozen norm adds" in " ".join(text.stdout.split())
