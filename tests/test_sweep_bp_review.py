"""The session's own review: a stop during dropout's eval-mode train scoring, :attrib under norm=none."""

from test_commands import TINY, run
from test_render import plain

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session


def _dropout_trainer():
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2}
    session = Session(ModelConfig(**TINY, dropout=0.3), TrainConfig(**train), data_spec="sort:4", device_name="cpu")
    return session.trainer


def test_a_stop_while_the_train_split_is_scored_is_said_and_measured_first_when_the_run_goes_on():
    """A stop during evaluate_train set `cut` without a word, and the continued run never measured the number."""
    trainer, said = _dropout_trainer(), []
    original = trainer.evaluate_train
    asked = {"stop": False}

    def scoring(should_stop=None):  # the person's stop arrives while the train split is scored
        asked["stop"] = True
        return original(should_stop=should_stop)

    trainer.evaluate_train = scoring
    summary = trainer.run(stop_evaluation=lambda: asked["stop"], on_notice=said.append)
    trainer.evaluate_train = original
    assert summary.steps == 3 and trainer.history[-1]["val_loss"] is not None
    assert trainer.history[-1]["train_eval_loss"] is None
    assert said == ["the eval-mode train loss after step 3 (dropout on) was stopped unmeasured; continuing the run "
                    "measures it first"], said
    again = []
    trainer.run(on_notice=again.append)
    row = next(r for r in trainer.history if r["step"] == 3)
    assert row["train_eval_loss"] is not None and trainer.step == 6
    assert any("is measured now: train loss in eval mode" in line and "val loss" not in line for line in again), again
    unbroken = _dropout_trainer()  # the number the unbroken run measured there
    unbroken.run()
    assert row["train_eval_loss"] == next(r for r in unbroken.history if r["step"] == 3)["train_eval_loss"]


def test_attrib_under_norm_none_speaks_of_no_final_norm():
    session = Session(ModelConfig(**TINY, norm="none"), data_spec="sort:4", device_name="cpu")
    text = " ".join(plain(run(session, ":attrib 3141=")).split())
    assert "final norm frozen" not in text and "frozen norm" not in text and "the final norm has no bias" not in text
    assert "norm=none has no final norm" in text and "with no final norm the head reads the stream as it is" in text
    normed = " ".join(plain(run(Session(ModelConfig(**TINY), data_spec="sort:4", device_name="cpu"),
                                ":attrib 3141=")).split())
    assert "read through the final norm frozen at this input's scale" in normed


def test_a_setting_an_ffn_off_model_does_not_read_names_ffn_on():
    from test_commands import Recorder

    session = Session(ModelConfig(**TINY, ffn=False), data_spec="sort:4", device_name="cpu")
    recorder = Recorder()
    run(session, ":set d_ff=96", recorder)
    assert any("d_ff does nothing while ffn=off; it applies with ffn=on" in n for n in recorder.notices), \
        recorder.notices


def test_grad_of_an_ffn_off_model_walks_attention_alone_on_both_placements():
    """:grad hooked block.ffn and block.ln_2, None with ffn=off: an AttributeError as an internal error."""
    for placement in ("pre", "post"):
        session = Session(ModelConfig(**TINY, ffn=False, norm_placement=placement), data_spec="sort:4",
                          device_name="cpu")
        result = run(session, ":grad 3141=")
        assert [row.part for row in result.stream] == ["attn"] * TINY["n_layers"], result.stream
        assert result.check.relative < 1e-6, result.check  # backprop along u as the float64 loss moves


def test_the_pip_line_for_torch_quotes_a_python_whose_path_has_a_space(monkeypatch):
    """Pasted into bash, `/tmp/sp ace/python -m pip ...` ran /tmp/sp."""
    import shlex
    import sys

    from minitf_repl.render.words import missing_torch

    monkeypatch.setattr(sys, "executable", "/tmp/sp ace/python")
    line = missing_torch(ModuleNotFoundError("No module named 'torch'", name="torch"))
    install = line.split("install it: ", 1)[1].split(" (the CPU build", 1)[0]
    assert shlex.split(install)[:4] == ["/tmp/sp ace/python", "-m", "pip", "install"], install


def test_a_lab_given_a_model_refuses_settings_that_would_build_another_and_its_error_is_the_lines_own(tmp_path):
    import pytest

    from minitf_repl import Lab, MiniTransformerLM, load_data
    from minitf_repl.core.errors import UserError

    data = load_data("sort:4")
    model = MiniTransformerLM(ModelConfig(**TINY, vocab_size=data.tokenizer.vocab_size))
    with pytest.raises(UserError, match="would build another model than the one given"):
        Lab(model=model, data=data, settings={"n_layers": 3}, checkpoint_dir=tmp_path)
    with pytest.raises(UserError, match="'n_embd'"):  # nanoGPT's name for d_model too
        Lab(model=model, data=data, settings={"n_embd": 64}, checkpoint_dir=tmp_path)
    lab = Lab(model=model, data=data, settings={"lr": 0.001, "dropout": 0.1}, checkpoint_dir=tmp_path)
    assert lab.session.train_config.lr == 0.001 and lab.model is model
    # a notice of the settings (d_ff stays ...) is not the first failing line's error
    noisy = Lab(data="sort:4", settings={"d_model": 64, "n_layers": 1}, checkpoint_dir=tmp_path)
    failed = noisy("attn layer=9")
    assert not failed.ok and failed.error.startswith("error: layer must be in 0..0"), failed.error


def test_the_torch_range_the_messages_give_is_pyprojects():
    """Written by hand in render.words (TORCH_RANGE) and pyproject.toml: kept in step."""
    from pathlib import Path

    from minitf_repl.render.words import TORCH_RANGE

    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert f'"{TORCH_RANGE}",' in pyproject, TORCH_RANGE


def test_a_row_evaluated_with_dropout_off_is_not_taken_for_a_cut_train_scoring():
    """:set dropout=0.1 after a run stopped at an evaluated step said "which the stop cut short" of no stop."""
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2}
    session = Session(ModelConfig(**TINY, dropout=0.0), TrainConfig(**train), data_spec="sort:4", device_name="cpu")
    trainer = session.trainer
    trainer.run(should_stop=lambda: trainer.step >= 3)
    assert trainer.step == 3 and trainer.history[-1]["val_loss"] is not None
    run(session, ":set dropout=0.1")
    said = []
    session.trainer.run(on_notice=said.append)
    assert not any("cut short" in line for line in said), said


def test_a_dropout_runs_loss_chart_draws_the_eval_mode_train_loss_beside_the_one_batch_one():
    from minitf_repl.commands.train import history_series

    train = {"steps": 40, "batch_size": 4, "eval_every": 10, "eval_batches": 1}  # enough rows for a chart
    session = Session(ModelConfig(**TINY, dropout=0.3), TrainConfig(**train), data_spec="sort:4", device_name="cpu")
    result = run(session, ":train")
    series = {s.name: s for s in history_series(session.trainer.history)}
    assert list(series) == ["train", "train (eval mode)", "val"]
    assert series["train (eval mode)"].values == [row["train_eval_loss"] for row in result.evals]
    assert "◦ train (eval mode)" in plain(result)
    plain_run = Session(ModelConfig(**TINY), TrainConfig(**train), data_spec="sort:4", device_name="cpu")
    run(plain_run, ":train")
    assert [s.name for s in history_series(plain_run.trainer.history)] == ["train", "val"]
