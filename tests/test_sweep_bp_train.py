"""Sweep bp (training): clipping said, a squeezed warm-up said, the continue rate's docs, dropout's train loss, low lr."""

from pathlib import Path

import torch
from test_commands import TINY, run, tiny_session
from test_render import plain

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.dispatch import to_json
from minitf_repl.session import Session

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_clipped_steps_counted_said_and_in_json():
    s = tiny_session(grad_clip=1e-9)  # every step's norm is above it
    result = run(s, ":train")
    assert result.clipped_steps == 6 and result.grad_clip == 1e-9
    assert "gradient clipped at 6 of 6 steps (norm above grad_clip = 1e-09)" in plain(result)
    doc = to_json(result)
    assert doc["clipped_steps"] == 6 and doc["grad_clip"] == 1e-9
    assert REGISTRY["train"].json_version >= 28  # raised when clipped_steps came in (later fields raise it again)
    # the count is the rows' grad_norm against grad_clip: nothing per step that they do not tell already
    assert sum(row["grad_norm"] > doc["grad_clip"] for row in doc["curve"]) == 6
    off = run(tiny_session(grad_clip=0.0), ":train")
    assert off.clipped_steps == 0 and "clipped" not in plain(off)


def test_plot_grad_norm_names_and_draws_grad_clip():
    s = tiny_session(grad_clip=1e-9)
    run(s, ":train")
    s.set_train_config(s.train_config.replace(grad_clip=0.5))
    result = run(s, ":plot what=grad_norm")
    assert result.grad_clip == 0.5 and to_json(result)["grad_clip"] == 0.5
    text = plain(result)
    assert "gradient norm (before clipping; grad_clip = 0.5 now) by step" in text
    assert "steps had a norm above grad_clip = 0.5" in text


def test_short_run_squeezed_warm_up_is_said():
    s = tiny_session(warmup_steps=10)
    result = run(s, ":train steps=5")
    assert [round(row["lr"], 12) for row in result.curve][-2:] == [s.train_config.lr] * 2  # lr_at's squeeze
    assert ("warmup_steps = 10 is longer than this run of 5 steps: the warm-up was squeezed into it, the rate "
            f"rising to lr = {s.train_config.lr:g} over its first 4 steps") in plain(result)
    for warmup in (4, 5):  # steps - 1 and steps: the warm-up covers the run, and is not longer than it
        covers = plain(run(tiny_session(warmup_steps=warmup), ":train steps=5"))
        assert f"warmup_steps = {warmup} covers this run of 5 steps: the warm-up was squeezed" in covers, covers
    two = plain(run(tiny_session(warmup_steps=10), ":train steps=2"))
    assert "warmup_steps = 10 is longer than this run of 2 steps: it trained at the peak" in two, two
    fits = run(tiny_session(warmup_steps=2), ":train steps=5")
    assert "squeezed" not in plain(fits)


def test_docs_and_lr_help_say_the_rate_a_continued_run_uses():
    row = next(line for line in (DOCS / "commands.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `:train "))
    assert "the last run's final one, or the `lr` setting where that is lower" in row
    help_text = next(p.help for p in REGISTRY["train"].params if p.name == "lr")
    assert "goes on with a stopped run at that rate" not in help_text
    assert "warm-up and cosine drawn anew from peak X" in help_text


def _dropout_session(dropout: float) -> Session:
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2}
    return Session(ModelConfig(**TINY, dropout=dropout), TrainConfig(**train), data_spec="sort:4", device_name="cpu")


def test_dropout_run_scores_the_train_split_in_eval_mode():
    s = _dropout_session(0.3)
    result = run(s, ":train")
    assert all(row["train_eval_loss"] is not None for row in result.evals)
    # the last evaluation's number is the weights' own loss on training batches, dropout off, as val is scored
    assert result.train_eval_loss == result.evals[-1]["train_eval_loss"]
    text = plain(result)
    assert "train (eval mode)" in text and "with dropout on" in text and "(one batch, dropout on)" in text
    assert to_json(result)["train_eval_loss"] == result.train_eval_loss
    # the scoring draws from its own generator: the training batches go on as in a run that never scored it
    unscored = _dropout_session(0.3)
    unscored.trainer.dropout_on = lambda: False
    run(unscored, ":train")
    assert unscored.trainer.history[-1]["train_eval_loss"] is None
    assert torch.equal(unscored.trainer.generator.get_state(), s.trainer.generator.get_state())
    without = run(_dropout_session(0.0), ":train")
    assert without.train_eval_loss is None and all(r["train_eval_loss"] is None for r in without.evals)
    assert "eval mode" not in plain(without)


def test_dropout_eval_mode_train_loss_matches_a_fresh_scoring():
    s = _dropout_session(0.3)
    result = run(s, ":train")
    with torch.no_grad():
        again = s.trainer.evaluate_train()
    assert abs(again - result.train_eval_loss) < 1e-6  # eval mode: no dropout mask drawn, the same every time


def test_lr_far_below_the_optimizers_usual_rates_is_said():
    result = run(tiny_session(lr=3e-4), ":train")  # the video's rate under Muon, the default optimizer
    text = plain(result)
    assert "lr = 0.0003 is far below muon's usual rates" in text
    assert "optimizer=adamw" in text and "lr=0.01" in text
    assert "far below" not in plain(run(tiny_session(), ":train"))
    adamw = run(tiny_session(optimizer="adamw", lr=3e-4), ":train")  # nanoGPT's rate is AdamW's usual
    assert "far below" not in plain(adamw)
    held = tiny_session(lr=3e-4)  # a held rate (schedule=continue) is low by design: not told to train at 0.01
    run(held, ":train")
    assert "far below" not in plain(run(held, ":train steps=4 schedule=continue"))
    elsewhere = tiny_session(lr=3e-4)  # weights trained elsewhere (a GPT-2 fine-tuned at a small rate)
    elsewhere.weights_from = "hf:somewhere"
    assert elsewhere.weights_from is not None and "far below" not in plain(run(elsewhere, ":train"))


def test_a_checkpoint_keeps_the_eval_mode_train_loss_and_reads_older_rows_without_it(tmp_path):
    import json

    import pytest

    from minitf_repl.core.checkpoint.manifest import encode_manifest, meta_sha256
    from minitf_repl.core.errors import UserError

    s = _dropout_session(0.3)
    s.checkpoint_dir = tmp_path
    result = run(s, ":train")
    run(s, ":save d")
    path = tmp_path / "d" / "checkpoint.json"
    original = json.loads(path.read_text())

    def rewritten(edit) -> Session:
        manifest = json.loads(json.dumps(original))
        edit(manifest["trainer"]["history"])
        manifest["meta_sha256"] = meta_sha256(manifest)  # re-signed, as a hand edit that knows the format is
        path.write_bytes(encode_manifest(manifest))
        fresh = _dropout_session(0.3)
        fresh.checkpoint_dir = tmp_path
        return fresh

    loaded = rewritten(lambda rows: None)
    run(loaded, ":load d")
    assert loaded.trainer.history[-1]["train_eval_loss"] == result.train_eval_loss
    # a row of a minitf before the field: read with it as None, as the other later fields are
    older = rewritten(lambda rows: [row.pop("train_eval_loss", None) for row in rows])
    run(older, ":load d")
    assert all(row["train_eval_loss"] is None for row in older.trainer.history)
    negative = rewritten(lambda rows: rows[-1].update(train_eval_loss=-1.0))
    with pytest.raises(UserError, match="negative train_eval_loss"):
        run(negative, ":load d")
