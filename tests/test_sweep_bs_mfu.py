"""Sweep bs, model FLOPs utilisation (the issue "Fast on every CPU": benchmarks print the measured float32 peak and
each row's share of it, and a learner should see the same in the tool).

`:device` measures this device's speed at a square product in the training dtype (core.peak, which bench/ measures
its peak with too) and says it; `:train`'s summary gives the run's achieved GFLOP/s of the ledger's products (its
training FLOPs per token times tokens/s) and its share of that peak, "(MFU)"; both in --json, null where unknown.
"""

from __future__ import annotations

import time

import pytest
import torch

from minitf_repl.commands.base import training_length
from minitf_repl.core import peak
from minitf_repl.core.ledger import cost_ledger, training_flops_per_token
from minitf_repl.dispatch import to_json

from test_commands import Recorder, run, tiny_session
from test_render import plain


@pytest.fixture
def known_peak(monkeypatch):
    """No measurement kept from an earlier test, and every measurement 100 GFLOP/s at 512, counted."""
    calls = []

    def fake(device="cpu", dtype="float32", **_):
        calls.append((str(device), dtype))
        speed = peak.ProductSpeed(gflops=100.0, size=512, dtype=dtype, device=str(device),
                                  threads=torch.get_num_threads(), rounds=5)
        peak._LATEST[(str(device), dtype, torch.get_num_threads())] = speed  # as the real one keeps it
        return speed

    monkeypatch.setattr(peak, "_LATEST", {})
    monkeypatch.setattr(peak, "measure_product_speed", fake)
    return calls


# --- the measurement itself ------------------------------------------------------------------------------------------
def test_the_product_speed_is_measured_within_its_budget_and_leaves_the_random_stream_alone(monkeypatch):
    monkeypatch.setattr(peak, "_LATEST", {})
    state = torch.get_rng_state()
    start = time.perf_counter()
    speed = peak.measure_product_speed("cpu", "float32")
    took = time.perf_counter() - start
    assert speed.gflops > 0 and speed.size >= peak.FIRST_SIZE and speed.size & (speed.size - 1) == 0
    assert 1 <= speed.rounds <= peak.TIMED_ROUNDS and speed.threads == torch.get_num_threads()
    assert took < 1.0  # 0.25 s of budget, give or take one product on a busy machine
    assert torch.equal(torch.get_rng_state(), state)  # a run's batches after it draw as they would have
    assert peak.latest_product_speed("cpu", "float32") == speed  # kept for :train's MFU
    # the benchmarks' fixed size, as bench/nanogpt.py's matmul_peak asks for it
    assert peak.measure_product_speed("cpu", "float32", size=256, warmup=1, rounds=3, budget=None).size == 256


def test_the_ledger_gives_training_flops_per_token_as_its_step_counts_them():
    s = tiny_session(data="pydoc")
    ledger = cost_ledger(s.model, 4, seq_len=8)
    assert training_flops_per_token(s.model, 8) * 4 * 8 == ledger.training_flops_per_step


# --- :device -------------------------------------------------------------------------------------------------------
def test_device_measures_and_says_the_product_speed_in_the_training_dtype(monkeypatch):
    monkeypatch.setattr(peak, "_LATEST", {})
    result = run(tiny_session(), ":device")
    assert result.train_dtype == "float32" and result.peak_gflops > 0 and result.peak_size >= 256
    got = to_json(result)
    assert got["peak_gflops"] == result.peak_gflops and got["peak_size"] == result.peak_size
    n = result.peak_size
    assert (f"float32 products: {peak.flop_rate_words(result.peak_gflops)} (a {n} x {n} product on 1 CPU thread, "
            "measured now; :train's MFU is a run's share of it)") in plain(result, width=300)
    assert peak.latest_product_speed("cpu", "float32").gflops == result.peak_gflops  # the next :train reads it


# --- :train --------------------------------------------------------------------------------------------------------
def test_train_gives_its_flop_rate_from_the_ledger_and_its_share_of_the_peak(checkpoint_dir, known_peak):
    s = tiny_session(data="pydoc", steps=4, eval_every=4)
    result = run(s, ":train")
    # the hand count: the ledger's training FLOPs of a step over its tokens, times the run's tokens/s
    seq = training_length(s)
    ledger = cost_ledger(s.model, s.train_config.batch_size, seq_len=seq)
    per_token = ledger.training_flops_per_step / (s.train_config.batch_size * seq)
    assert result.flops_per_token == per_token
    assert result.gflops == pytest.approx(per_token * result.tokens_per_second / 1e9)
    assert result.peak_gflops == 100.0 and result.mfu == pytest.approx(result.gflops / 100.0)
    assert known_peak == [("cpu", "float32")]  # measured once, at the end of the first run
    got = to_json(result)
    assert got["mfu"] == result.mfu and got["gflops"] == result.gflops
    text = plain(result, width=400)
    share = f"{result.mfu:.0%}" if result.mfu >= 0.095 else f"{result.mfu:.1%}"
    assert (f"tokens/s, {peak.flop_rate_words(result.gflops)}, {share} of this CPU's float32 products (MFU), "
            "float32 on 1 CPU thread") in text
    # what the number counts, in the table's legend beside its tokens/s
    assert ("the summary's GFLOP/s (MFU): only the matrix products :params counts, not the optimizer's "
            "Newton-Schulz, so a lower bound of the work") in text
    run(s, ":train steps=2")
    assert known_peak == [("cpu", "float32")]  # the second run reads the kept measurement


def test_train_takes_the_peak_device_measured(checkpoint_dir, known_peak):
    s = tiny_session(data="pydoc", steps=2, eval_every=2)
    assert run(s, ":device").peak_gflops == 100.0
    assert run(s, ":train").peak_gflops == 100.0 and len(known_peak) == 1  # :device's, not measured again


def test_train_fields_are_null_where_unknown(checkpoint_dir, known_peak, monkeypatch):
    stopped = run(tiny_session(data="pydoc", steps=5), ":train", Recorder(stop_after=0))
    assert stopped.steps == 0
    got = to_json(stopped)
    assert {key: got[key] for key in ("flops_per_token", "gflops", "peak_gflops", "mfu")} == dict.fromkeys(
        ("flops_per_token", "gflops", "peak_gflops", "mfu"))
    assert known_peak == []  # no step, no rate: nothing measured

    def broken(*args, **kwargs):
        raise RuntimeError("no kernel")

    monkeypatch.setattr(peak, "measure_product_speed", broken)
    # never fails for want of a peak; three steps: of two, a first step that was mostly set-up (a new session's)
    # leaves one after it, too few for a share whatever the peak, and the summary says that instead (core.peak)
    result = run(tiny_session(data="pydoc", steps=3, eval_every=3), ":train")
    assert result.gflops > 0 and result.peak_gflops is None and result.mfu is None
    text = plain(result, width=400)
    assert f"tokens/s, {peak.flop_rate_words(result.gflops)}, float32" in text and "(MFU)" not in text
    assert "the summary's GFLOP/s: only the matrix products" in text


def test_the_rate_is_said_in_units_that_read():
    assert peak.flop_rate_words(55.4) == "55 GFLOP/s"
    assert peak.flop_rate_words(0.4123) == "0.41 GFLOP/s"  # a tiny model's
    assert peak.flop_rate_words(312_000) == "312 TFLOP/s"  # a GPU's
