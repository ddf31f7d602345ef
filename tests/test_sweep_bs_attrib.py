"""Sweep bs, a tester's findings on a live run's Ctrl-Z, :attrib's embedding row and a stale :patch sample in the
docs. Each test failed before its fix."""

from __future__ import annotations

import io
import json
import os
import re
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from minitf_repl.render.live import RichReporter

from test_cli import invoke, TINY
from test_commands import run, tiny_session
from test_render import plain

POSIX = pytest.mark.skipif(not hasattr(signal, "SIGTSTP"), reason="no SIGTSTP on Windows")
CONTROL = re.compile(r"\x1b\[(\??)(\d*)([A-Za-z])")


def screen(written: str) -> list[str]:
    """What a terminal shows of `written`: text, newlines, carriage returns, the cursor moved up and a line erased
    (the codes Rich's live display draws with); other codes (the cursor shown or hidden) change nothing seen."""
    rows, row, col = [""], 0, 0
    k = 0
    while k < len(written):
        if (code := CONTROL.match(written, k)) is not None:
            private, number, letter = code.groups()
            if not private and letter == "A":
                row = max(0, row - int(number or 1))
            elif not private and letter == "K":
                rows[row] = ""
            k = code.end()
            continue
        char = written[k]
        k += 1
        if char == "\n":
            row, col = row + 1, 0
            rows.extend([""] * (row + 1 - len(rows)))
        elif char == "\r":
            col = 0
        else:
            line = rows[row].ljust(col)
            rows[row] = line[:col] + char + line[col + 1:]
            col += 1
    return [line.rstrip() for line in rows]


def evaluation(step: int) -> SimpleNamespace:
    return SimpleNamespace(step=step, run_step=step, run_steps=400, train_loss=2.5, val_loss=2.0, val_bpc=3.0,
                           train_eval_loss=None, accuracy=None, lr=1e-3, tokens_per_second=5000.0, elapsed=1.0,
                           aux_loss=None)


@POSIX
def test_ctrl_z_then_fg_during_a_live_run_leaves_no_stale_copy_of_the_loss_tables_top(monkeypatch):
    """Ctrl-Z, then `fg`, during :train steps=400 in tmux: the live display went up as many rows as it had from under
    the shell's "Stopped", "fg" and job lines, so the loss table's headings stood twice, the stale copy above."""
    file = io.StringIO()
    console = Console(file=file, width=100, height=40, force_terminal=True, color_system=None)
    reporter = RichReporter(console, live=True)
    try:
        reporter.on_train_start(400, 0, False)
        reporter.on_step(evaluation(100))
        reporter._live.refresh()  # the drawing the stop comes after (the display's thread draws it 8 times a second)
        handler = signal.getsignal(signal.SIGTSTP)
        if not callable(handler):
            pytest.skip("SIGTSTP is ignored here: no handler is set (an orphaned job's)")

        def stopped(pid, signum):  # the stop and what the shell writes meanwhile, and at `fg`
            file.write("^Z\n[1]+  Stopped                 minitf\n$ fg\nminitf\n")

        monkeypatch.setattr(os, "kill", stopped)
        handler(signal.SIGTSTP, None)
        monkeypatch.undo()
        reporter.on_step(evaluation(110))
        reporter._live.refresh()
        shown = screen(file.getvalue())
    finally:
        reporter.close()
    headings = [line for line in shown if line.startswith("┃ step ┃")]
    assert len(headings) == 1, "\n".join(shown)
    # what the shell wrote stays, the display below it
    fg = shown.index("$ fg")
    assert "[1]+  Stopped                 minitf" in shown and shown.index(headings[0]) > fg, "\n".join(shown)


# --- 2. :attrib splits the embedding row into the token's and the position's -----------------------------------------
def by_hand(model, ids: list[int], target: int) -> dict[str, float]:
    """The direct shares of W_E[token], P[position] and their sum h_0 at the last position, worked by hand: each read
    through the final LayerNorm frozen at the stream's std there, (v - mean(v)) / std(h_L) * g, then W_U's row."""
    seen = {}
    hook = model.blocks[-1].register_forward_hook(lambda module, inputs, output: seen.__setitem__("end", output))
    try:
        with torch.no_grad():
            model.eval()
            model(torch.tensor([ids]))
    finally:
        hook.remove()
    end = seen["end"][0, -1].detach()
    std = torch.sqrt(end.var(unbiased=False) + model.ln_f.eps)
    token = model.token_embedding.weight[ids[-1]].detach()
    position = model.position_embedding.weight[len(ids) - 1].detach()

    def share(v):
        return float(((v - v.mean()) / std * model.ln_f.weight.detach()) @ model.lm_head.weight[target].detach())

    return {"embed (token)": share(token), "embed (position)": share(position), "h_0": share(token + position)}


def test_attrib_gives_the_token_and_the_position_embedding_a_row_each_that_sum_to_the_old_embed_row():
    session = tiny_session()
    result = run(session, ":attrib 12")
    embeds = {p.name: p.logit for p in result.parts if p.kind == "embed"}
    assert set(embeds) == {"embed (token)", "embed (position)"}, embeds  # was one row "embed (token + position)"
    tokenizer = session.data.tokenizer
    hand = by_hand(session.model, tokenizer.encode("12"), tokenizer.stoi[result.target])
    assert embeds["embed (token)"] == pytest.approx(hand["embed (token)"], abs=1e-5)
    assert embeds["embed (position)"] == pytest.approx(hand["embed (position)"], abs=1e-5)
    # the two together are the embedding's one row of before: h_0 = W_E[token] + P[position], read whole
    assert embeds["embed (token)"] + embeds["embed (position)"] == pytest.approx(hand["h_0"], abs=1e-5)
    text = " ".join(plain(result, 200).split())
    assert "embed (token) " in text and "embed (position) " in text and "token + position" not in text, text


@pytest.mark.parametrize("encoding, row", [("sinusoidal", True), ("rope", False), ("none", False)])
def test_attrib_lists_a_position_row_only_where_a_table_is_added_and_says_why_not(encoding, row):
    session = tiny_session()
    run(session, f":set pos_encoding={encoding}")
    result = run(session, ":attrib 12")
    names = {p.name for p in result.parts if p.kind == "embed"}  # largest first: in either order
    assert names == ({"embed (token)", "embed (position)"} if row else {"embed (token)"}), names
    text = " ".join(plain(result, 200).split())
    said = f"no embed (position) row: pos_encoding={encoding} adds no position table at the input"
    assert (said in text) != row, text
    if encoding == "rope":  # where the positions act instead
        assert "it turns q and k by their positions inside attention, so what the positions do is in the heads' rows" \
            in text, text


def test_attrib_says_the_position_row_writes_nothing_once_ablate_switches_the_positions_off():
    session = tiny_session()
    run(session, ":ablate positions")
    result = run(session, ":attrib 12")
    assert {p.name: p.logit for p in result.parts}["embed (position)"] == 0.0
    text = " ".join(plain(result, 200).split())
    # the row a table switched off would show, "+0.00", goes with the parts that write nothing (an untrained model's
    # b^O among them), said as such; it was "embed (token)" alone, as with RoPE, with no word of the table
    assert re.search(r"parts? writes? exactly 0, not listed \(embed \(position\)[^;]*; a part :ablate switches off "
                     "writes nothing", text), text


def test_attrib_json_has_the_two_embedding_parts_under_a_new_version():
    done = invoke(*TINY, "attrib", "12", "--json")
    assert done.exit_code == 0, done.output
    document = json.loads(done.stdout)
    assert document["schema"] == "minitf.attrib/7"  # "embed" is a part no longer: a script reading it must know
    embeds = [p["name"] for p in document["parts"] if p["kind"] == "embed"]
    assert sorted(embeds) == ["embed (position)", "embed (token)"], document["parts"]


# --- 3. docs/inside-views.md's :patch and :attrib samples are ones this version prints ------------------------------
def sample(command: str) -> str:
    """The ```text block of docs/inside-views.md that begins with `command` typed at the prompt."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "inside-views.md").read_text(encoding="utf-8")
    start = text.index(f"```text\nminitf> {command}\n")
    return text[start:text.index("\n```", start + 8)]


def test_the_docs_patch_sample_shows_no_cell_this_version_cannot_print():
    shown = sample(":patch 654081= 654781=")
    # why.two writes what rounds to nothing as 0.00: the sample's "-0.00" cells were an older version's
    assert "-0.00" not in shown, shown
    layer, head, said = re.search(r"comes back when head (\d)\.(\d) is patched \((\S+)\)", shown).groups()
    row = next(line.split() for line in shown.splitlines() if line.split()[:1] == [layer])  # the heads table's
    assert row[1 + int(head)] == said, (row, said)  # the line's number is the table's


def test_the_docs_attrib_sample_has_the_token_and_position_rows_and_adds_up():
    shown = sample(":attrib 654081=")
    rows = dict(re.findall(r"^(embed \((?:token|position)\)|ffn \d|head \d\.\d)\s+([+-]\d+\.\d\d)", shown, re.M))
    assert {"embed (token)", "embed (position)"} <= set(rows), shown
    rest = float(re.search(r"smaller parts add ([+-]\d+\.\d\d)", shown).group(1))
    total = float(re.search(r"the parts sum to ([+-]\d+\.\d\d)", " ".join(shown.split())).group(1))
    assert sum(float(v) for v in rows.values()) + rest == pytest.approx(total, abs=0.01 * (len(rows) + 1))
