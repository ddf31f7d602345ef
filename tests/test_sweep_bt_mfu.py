"""Sweep bt, the last session's "known, not fixed": the fast path's memory rules moved into core (beside the fast
path, where :params reads them), :compare's contenders given :train's GFLOP/s and MFU (tokens/s alone read a bigger
model as the less efficient one), and a one-step :train's MFU that was mostly its first step's set-up. Each test
failed before its fix."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from minitf_repl.core import peak
from minitf_repl.core.ledger import training_flops_per_token
from minitf_repl.dispatch import to_json

from test_commands import run, tiny_session
from test_render import plain
from test_sweep_bs_mfu import known_peak  # noqa: F401 - a fixture: every measurement 100 GFLOP/s, counted


# --- the fast path's memory rules, in core ---------------------------------------------------------------------------
def test_core_gives_the_fast_path_memory_params_shows():
    """The rules of what training's fast path keeps for backward are core knowledge (core.fastpath's): they lived in
    commands/anatomy.py, which core may not import. A rope model at batch 2 has every part of the sum: the maps, the
    copy of [W_q; W_k; W_v] a layer and the unrotated q and k."""
    from minitf_repl.core.fastpath_memory import FastPathMemory, fast_path_memory

    s = tiny_session(data="pydoc", batch_size=2)
    run(s, ":set pos_encoding=rope")
    shown = run(s, ":params")
    got = fast_path_memory(s.model, shown.ledger)
    assert isinstance(got, FastPathMemory) and got == shown.fast_path
    assert got.unrotated and got.maps_left and not got.maps_kept


# --- :compare: each contender's GFLOP/s and MFU ----------------------------------------------------------------------
def test_compare_gives_each_contenders_flop_rate_and_share_of_the_peak(known_peak):  # noqa: F811
    s = tiny_session(data="pydoc")
    result = run(s, ":compare current n_layers=2 steps=2")
    assert known_peak == [("cpu", "float32")]  # one measurement for the device and dtype, both contenders' share
    for outcome, layers in zip(result.outcomes, (1, 2)):
        # the ledger's training FLOPs of a token of its model at the rows' length, as :train counts a run's
        model = type(s.model)(s.model_config.replace(n_layers=layers))
        assert outcome.flops_per_token == training_flops_per_token(model, s.model_config.max_seq_len)
        assert outcome.gflops == pytest.approx(outcome.flops_per_token * outcome.tokens_per_second / 1e9)
        assert outcome.peak_gflops == 100.0 and outcome.mfu == pytest.approx(outcome.gflops / 100.0)
    got = to_json(result)["outcomes"]
    assert [o["mfu"] for o in got] == [o.mfu for o in result.outcomes]
    assert all(o["gflops"] > 0 and o["flops_per_token"] > 0 and o["peak_gflops"] == 100.0 for o in got)
    wide = plain(result, width=300)
    assert "tokens/s GFLOP/s MFU time" in wide
    assert "a bigger model's fewer tokens/s can be a better use of the CPU" in wide
    # where the table does not fit, each contender's line in :train's words
    narrow = plain(result, width=60)
    first = result.outcomes[0]
    assert (f"tokens/s, {peak.flop_rate_words(first.gflops)}, {peak.share_words(first.mfu)} of this CPU's float32 "
            "products (MFU)") in narrow


def test_compare_of_one_step_gives_its_rate_and_no_share(known_peak):  # noqa: F811
    """One timed step a contender: no share (core.peak.MIN_TIMED_STEPS), as :train gives none, and none measured."""
    result = run(tiny_session(data="pydoc"), ":compare current n_layers=2 steps=1")
    assert all(o.gflops > 0 and o.mfu is None and o.peak_gflops is None for o in result.outcomes)
    assert known_peak == []
    assert "no MFU of one timed step" in plain(result, width=300)


# --- :train: a run of one step -------------------------------------------------------------------------------------
def test_a_one_step_train_gives_no_share_of_its_set_up(checkpoint_dir, known_peak):  # noqa: F811
    """`minitf train steps=1` read 11% MFU where its later steps would run at 48%: its one step's time holds the
    process's one-off set-up. Its rate is given, with why there is no share; no peak is measured for it."""
    result = run(tiny_session(data="pydoc", steps=1, eval_every=1), ":train")
    assert result.gflops > 0 and result.mfu is None and result.peak_gflops is None and known_peak == []
    assert to_json(result)["mfu"] is None
    text = plain(result, width=400)
    assert f"{peak.flop_rate_words(result.gflops)} (one step timed, its one-off set-up in it: no MFU)" in text
    assert "(MFU)" not in text


def test_a_first_step_that_was_a_warm_up_is_said_with_the_rate_after_it():
    """A few steps in a new process: the first one's set-up pulled the run's MFU far below the steady one, unsaid. The
    run's figures stay of all its steps; the legend says what the first took and the rate of the steps after it."""
    from minitf_repl.commands.train import first_step_words, flops_legend

    # 4 steps of 1,000 tokens: the first at 100 tokens/s (10 s), the 3 after it at 1,000 (3 s): 4,000 in 13 s
    result = SimpleNamespace(steps=4, total_steps=4, tokens_per_second=4000 / 13, compile_seconds=None,
                             flops_per_token=10**6, curve=[{"step": 1, "tokens_per_second": 100.0}], mfu=None,
                             peak_gflops=10.0)
    result.gflops = result.flops_per_token * result.tokens_per_second / 1e9
    said = first_step_words(result)
    assert said == "its first step, one-off set-up and all, took 77% of the steps' time: the 3 after it ran at " \
                   "1 GFLOP/s, 10% (MFU)"
    assert flops_legend(result).endswith(f"lower bound of the work; {said}")
    # a first step no slower than the rest, or a compiled run (its compiling step timed apart): nothing said
    steady = SimpleNamespace(**{**vars(result), "tokens_per_second": 1000.0,
                                "curve": [{"step": 1, "tokens_per_second": 900.0}]})
    assert first_step_words(steady) is None
    assert first_step_words(SimpleNamespace(**{**vars(result), "compile_seconds": 20.0})) is None
    assert peak.without_first_step(100.0, 100.0, 1) is None  # no later step to set it against


# --- the reviewer's findings on the MFU code (sweep bt, F4) ----------------------------------------------------------
def _run(steps, first, later, **more):
    """A fake TrainResult of `steps` steps of 1,000 tokens at 10^6 FLOPs a token: the first at `first` tokens/s, the
    rest at `later`; its curve's first row is this command's first step (the model at step 10 before it)."""
    seconds = 1000 / first + (steps - 1) * 1000 / later
    result = SimpleNamespace(steps=steps, total_steps=10 + steps, tokens_per_second=steps * 1000 / seconds,
                             compile_seconds=None, flops_per_token=10**6, mfu=None, peak_gflops=None, launch=None,
                             curve=[{"step": 11, "tokens_per_second": float(first), "val_loss": None}],
                             cpu="a CPU", dtype="float32")
    for key, value in more.items():
        setattr(result, key, value)
    result.gflops = result.flops_per_token * result.tokens_per_second / 1e9
    return result


def test_two_steps_whose_first_was_a_warm_up_give_no_share():
    """`minitf --data sort:4 train --steps 2` said 2.9% MFU, its legend that the first step took 88% of the time and
    the step after it ran at 9.9 GFLOP/s (12%): one steady step is as few as a one-step run's. The words say why
    there is no share; the legend's rate of the later step stays, with no share either."""
    from minitf_repl.commands import train

    result = _run(2, 100, 1000, peak_gflops=100.0)
    assert train.too_few_after_warm_up(result)
    said = train.utilisation_words(result)
    assert said == f"{peak.flop_rate_words(result.gflops)} (the first step timed was mostly one-off set-up, one " \
                   "step after it: too few for a share, no MFU)"
    assert train.first_step_words(result).endswith("the step after it ran at 1 GFLOP/s")
    # two steady steps: a share, as before
    steady = _run(2, 1000, 1000)
    assert not train.too_few_after_warm_up(steady) and "one-off" not in train.utilisation_words(steady)


def test_two_steps_whose_first_was_a_warm_up_give_no_share_in_a_real_run(checkpoint_dir, monkeypatch,
                                                                         known_peak):  # noqa: F811
    """The same through :train and --json: the first step's row made ten times slower than the second's."""
    from minitf_repl.commands import train

    real = train.TrainResult.from_run

    def slow_first(summary, **more):
        result = real(summary, **more)
        first, second = result.curve[0]["tokens_per_second"], result.curve[1]["tokens_per_second"]
        result.curve[0]["tokens_per_second"] = second / 10
        result.tokens_per_second = 2 / (1 / result.curve[0]["tokens_per_second"] + 1 / second)
        assert first > 0
        return result

    monkeypatch.setattr(train.TrainResult, "from_run", slow_first)
    result = run(tiny_session(data="pydoc", steps=2, eval_every=5), ":train")
    assert result.gflops > 0 and result.mfu is None and to_json(result)["mfu"] is None and known_peak == []
    assert "mostly one-off set-up, one step after it: too few for a share, no MFU" in plain(result, width=400)


def test_one_step_timed_after_the_compile_is_not_said_to_hold_set_up():
    """compile=on, steps=2: the compiling step is timed apart, so the one timed step holds no set-up; the words said
    it did."""
    words = peak.utilisation_words(5.0, None, True, "float32", 1, after_compile=True)
    assert words == "5 GFLOP/s (one step timed after the compile: too few for a share, no MFU)"
    from minitf_repl.commands.train import utilisation_words

    compiled = _run(2, 1000, 1000, compile_seconds=20.0)
    assert utilisation_words(compiled).endswith("(one step timed after the compile: too few for a share, no MFU)")


def test_compare_decides_and_says_its_share_on_the_steps_it_timed():
    """A contender that diverged after one timed step (or a stopped comparison) has GFLOP/s and no MFU: the words
    said nothing of why, as they and flops_note read the planned steps x seeds."""
    from minitf_repl.commands.lab import flops_note, utilisation
    from minitf_repl.core.compare import Outcome, _finish

    outcomes = [Outcome("a", 10, tokens_per_step=100, flops_per_token=10**6),
                Outcome("b", 10, tokens_per_step=100, flops_per_token=10**6)]
    _finish(outcomes, [(0.1, 100), (0.2, 200)])  # a: one step timed (diverged), b: two; the peak is not read for a
    assert [o.timed_steps for o in outcomes] == [1, 2]
    assert outcomes[0].gflops > 0 and outcomes[0].mfu is None
    assert utilisation(outcomes[0], True).endswith("(one step timed, its one-off set-up in it: no MFU)")
    result = SimpleNamespace(outcomes=outcomes, steps=50, seeds=1, on_cpu=True)
    assert "no MFU of a: one timed step" in flops_note(result)


def test_first_step_words_are_never_of_a_pooled_rate():
    """A curve thinned to 200 rows (eval_every=2 over 400+ steps) begins at step 2's evaluated row, whose rate is
    pooled over steps 1 and 2: read as step 1's own, it made up a warm-up (or hid one)."""
    from minitf_repl.commands.train import first_step_words

    result = _run(400, 1, 1000)
    assert first_step_words(result) is not None  # the first row is step 1's: said
    result.curve = [{"step": 12, "tokens_per_second": 1.0, "val_loss": 2.0}]  # thinned: step 2's, pooled
    assert first_step_words(result) is None
