"""Sweep br, results out (a student sweeping experiments from bash with --json, collecting and plotting them): a kept
page's copy replaced without a JSON field, a rebuilt model's fix that could not load, a recipe's "to the last digit",
float32 noise in a task's accuracy, the schema tool's --help, and docs/json.md's history of its versions."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from minitf_repl import schema
from minitf_repl.commands import REGISTRY
from minitf_repl.core import data as D
from minitf_repl.syntax import SHELL, given_before, invoked_with, look_again, rebuilt_with, speaking

from test_cli import TINY, assert_one_error_line, invoke

DOCS = Path(__file__).resolve().parents[1] / "docs"


def words(text: str) -> str:
    return " ".join(text.split())


# --- 1: report --json says when the kept copy replaced an older one ----------------------------------------------
def test_report_json_says_the_kept_copy_replaced_an_older_one(tmp_path, monkeypatch):
    """Three `minitf report --json` runs of three pages: the second and third both read "replaced_unseen": true,
    "kept_as": ".../report.kept.html", and nothing said the third deleted the first page's copy (kept_over was the
    renderer's alone)."""
    monkeypatch.chdir(tmp_path)
    docs = []
    for text in ("12=12", "21=12", "31=13"):  # three different pages
        done = invoke(*TINY, "report", "--text", text, "--json")
        assert done.exit_code == 0, done.output
        docs.append(json.loads(done.stdout))
    assert all(doc["schema"] == f"minitf.report/{REGISTRY['report'].json_version}" for doc in docs)
    assert [doc["kept_over"] for doc in docs] == [False, False, True]  # the third replaced the second's copy
    assert [doc["kept_as"] is not None for doc in docs] == [False, True, True]
    described = json.loads((Path(schema.__file__).parent / "schemas" / "report.json").read_text())
    assert "kept_over" in described["required"] and "is gone" in described["properties"]["kept_over"]["description"]


# --- 2: a line that trains and then loads its autosave leaves autosave=off out ---------------------------------------
def test_ropes_fix_trains_a_model_that_autosaves_for_the_line_that_loads_it():
    """`minitf --set autosave=off rope` said "minitf --set autosave=off ... train trains one, then minitf --load
    autosave rope looks again": the train saved nothing, and the look failed or opened an older autosave."""
    line = assert_one_error_line(invoke(*TINY, "--set", "autosave=off lr=0.01", "rope"))
    train, _, look = line.partition(" trains one, then ")
    assert train.endswith(" train") and "autosave" not in train, line
    assert "lr=0.01" in train  # the other pair of that --set stays
    assert "--load autosave rope" in look, line


def test_set_causal_offs_train_line_autosaves_for_the_looks_after_it():
    done = invoke(*TINY, "--set", "autosave=off", "set", "causal=off")
    assert done.exit_code == 0, done.output
    said = words(done.stdout)
    train = said[said.index("Trained so (") + len("Trained so ("):].partition(")")[0]
    assert train.endswith("--set causal=off train") and "autosave" not in train, said
    assert "--load autosave attn" in said


def test_every_line_that_trains_then_loads_the_autosave_drops_only_the_autosave_pair():
    """_saving_train dropped a whole --set that began with autosave= (its lr too) and kept `lr=0.1 autosave=off`."""
    from minitf_repl.core.config import ModelConfig

    for given in ("autosave=off lr=0.1", "lr=0.1 autosave=off", "AUTOSAVE=off lr=0.1"):
        with speaking(SHELL), invoked_with([("--data", "sort"), ("--set", given)]):
            lines = [look_again("attn", "autosave").partition(" first, then ")[0],
                     rebuilt_with("rope", "autosave", "sort", ModelConfig(), pos_encoding="rope")
                     .partition(" trains one")[0],
                     given_before("train", "--set", "causal=off", autosaving=True)]
            kept = given_before("train", "--set", "causal=off")  # no load after it: the session's choice stays
        for line in lines:
            assert "autosave" not in line.lower() and "lr=0.1" in line, (given, line)
        assert "autosave=off" in kept.lower()


# --- 3: the recipe's transcript repeats but for its timings ----------------------------------------------------------
def test_the_same_run_again_says_the_timings_do_not_repeat_and_how_to_compare():
    part = words((DOCS / "commands.md").read_text(encoding="utf-8").split("**The same run again.**")[1]
                 .split("\n\n")[0])
    assert "prints the same transcript to the last digit" not in part
    assert "every number the model computes repeats to the last digit" in part
    assert "What the clock measures does not repeat: tokens/s and seconds" in part
    assert "diff a.txt b.txt" in part and "tokens_per_second" in part


# --- 4: a task's accuracy is the count over n, exactly ---------------------------------------------------------------
def right_on_first(task, k: int, n: int = 500, seed: int = 0) -> torch.nn.Module:
    """A model that answers the first k of the n val questions `accuracy` asks right, the others wrong."""

    class FirstK(torch.nn.Module):
        def forward(self, idx):
            x, y = task.digit_examples(task.sample_digits("val", n, torch.Generator().manual_seed(seed)))
            assert torch.equal(idx, x)
            logits = torch.zeros(*idx.shape, task.tokenizer.vocab_size)
            answer = y != -1
            target = torch.where(answer, y, 0)
            target[k:] = torch.where(answer[k:], (y[k:] + 1) % task.tokenizer.vocab_size, 0)  # one off: wrong
            logits.scatter_(2, target.unsqueeze(-1), 1.0)
            return logits, None

    return FirstK()


def test_task_accuracy_is_the_count_over_n_without_float32_noise():
    """`train --json` gave accuracy 0.18799999356269836 for 94 right of 500: a float32 mean."""
    task = D.load_data("sort:4")
    assert task.accuracy(right_on_first(task, 94)) == 0.188 == 94 / 500
    assert task.accuracy(right_on_first(task, 0)) == 0.0 and task.accuracy(right_on_first(task, 500)) == 1.0


def test_repeats_accuracy_is_the_count_over_the_counted_tokens_too():
    """RepeatedTokens.accuracy took the same float32 mean: 0.3632478713989258 for 85 of 234."""
    data = D.load_data("repeat:12")
    seqs, known = data.rows(20, 33, torch.Generator().manual_seed(5))

    class FirstSeven(torch.nn.Module):  # every token of the first 7 rows right, the others wrong
        config = type("Config", (), {"max_seq_len": 32})()

        def forward(self, idx):
            logits = torch.zeros(*idx.shape, 12)
            logits.scatter_(2, seqs[:, 1:].unsqueeze(-1), 1.0)
            logits[7:] = 0.0
            logits[7:, :, :] = torch.nn.functional.one_hot((seqs[7:, 1:] + 1) % 12, 12).float()
            return logits, None

    counted = known[:, 1:]
    assert data.accuracy(FirstSeven(), n=20, seed=5) == int(counted[:7].sum()) / int(counted.sum())


# --- 5: the schema tool's --help --------------------------------------------------------------------------------------
def test_the_schema_tool_has_a_help_that_says_what_it_checks_and_writes(capsys):
    """`python -m minitf_repl.schema --help` printed its usage line alone and exited 2."""
    assert schema.main(["--help"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.startswith("usage: python -m minitf_repl.schema")
    said = words(out)
    assert "With no argument: checks" in said and "--write: writes every command's schema and docs/json.md" in said
    assert str(schema.SCHEMA_DIR) in said and str(schema.DOCS_PAGE) in said
    assert schema.main(["-h"]) == 0
    assert schema.main(["--nonsense"]) == 2
    assert "--help says what each does" in capsys.readouterr().err


# --- 6: docs/json.md tells the versions' true history -----------------------------------------------------------------
def test_json_md_names_the_versions_whose_fields_changed_under_one_number():
    """It said a field was "never renamed, removed or retyped under the same version"; lrfind/1 lost two fields
    and set/4, checks/1, grad/1 gained required ones under unchanged numbers."""
    page = (DOCS / "json.md").read_text(encoding="utf-8")
    assert "is never renamed, removed or retyped under the same version" not in page
    section = words(page.split("## Fields changed under one version")[1].split("\n## ")[0])
    assert "since the first versioned document (2026-12-01)" in section and "the last on 2026-12-04" in section
    for vid in ("lrfind/1", "set/4", "checks/1", "grad/1"):
        assert f"| `minitf.{vid}` |" in section, vid
    assert "`warmup_steps` and `run_steps` removed" in section
    # the ids said to be current are the ones whose schema ships today
    current = {schema.schema_id(c) for c in schema.json_commands()}
    named = {f"minitf.{vid}" for vid, *_ in schema.CHANGED_UNDER_ONE_VERSION}
    assert named & current == {"minitf.lrfind/1", "minitf.set/4"}
    assert "`minitf.lrfind/1` and `minitf.set/4` are still current" in section
