"""Sweep bs, the review of the session's changes: the MFU's peak timed through the call training's products go
through, no share over 100%, none for a run whose one step compiled, `minitf device` saying a one-shot's measurement
ends with it, `:params` not saying "more, far less at long T", and Ctrl-Z's pause leaving a display alone where the
interrupted thread itself holds its lock."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest
import torch

from minitf_repl.commands import train as train_command
from minitf_repl.core import peak
from minitf_repl.render import live

from test_cli import invoke
from test_commands import run, tiny_session
from test_render import plain


def test_the_peak_is_timed_through_a_linears_call_not_through_matmul(monkeypatch):
    """aten's bfloat16 mm on a CPU without bfloat16 units is a slow fallback (1.2 GFLOP/s against F.linear's 9.7 on a
    Zen 3 thread): the peak timed through `a @ b` put a bfloat16 run at 267% of it."""
    calls = []
    real = torch.nn.functional.linear
    monkeypatch.setattr(peak.F, "linear", lambda a, b: calls.append(a.shape) or real(a, b))
    monkeypatch.setattr(peak, "_LATEST", {})
    speed = peak.measure_product_speed("cpu", "float32", size=64, warmup=1, rounds=2, budget=None)
    assert speed.size == 64 and len(calls) == 1 + 1 + 2  # one before the clock, the warm-up, the timed rounds


def test_a_run_faster_than_the_peak_says_no_share(checkpoint_dir, monkeypatch):
    """A measured peak below what the run reached is a misread one: no MFU, rather than one over 100%."""
    slow = peak.ProductSpeed(gflops=1e-6, size=256, dtype="float32", device="cpu", threads=1, rounds=1)
    monkeypatch.setattr(peak, "product_speed_or_none", lambda *a, **k: slow)
    result = run(tiny_session(data="pydoc", steps=2, eval_every=2), ":train")
    assert result.gflops > 1e-6 and result.peak_gflops is None and result.mfu is None
    assert "(MFU)" not in plain(result, width=400)


def test_a_run_whose_one_step_compiled_gives_no_flop_rate():
    """Its tokens/s is the compiling step's (core.train: no other step ran), the compiler's time, not the products'."""
    result = SimpleNamespace(steps=1, tokens_per_second=12.0, compile_seconds=30.0, flops_per_token=None,
                             gflops=None, peak_gflops=None, mfu=None, launch=None, dtype="float32")
    train_command._utilisation(None, result)  # the session is not read before the rate would be
    assert result.gflops is None and result.mfu is None


def test_the_shells_device_says_train_measures_its_own(monkeypatch):
    """A one-shot's measurement ends with its process, so `minitf device` cannot be what a later `minitf train`'s
    MFU is a share of (the two read 35% and 46% of each other's on a busy machine)."""
    fixed = peak.ProductSpeed(gflops=90.0, size=512, dtype="float32", device="cpu", threads=1, rounds=5)
    monkeypatch.setattr(peak, "measure_product_speed", lambda *a, **k: fixed)
    done = invoke("device")
    out = done.stdout + done.stderr
    assert "float32 products: 90 GFLOP/s" in out and "train measures its own at the end of a run" in out
    assert "MFU is a run's share of it" not in out


def test_params_at_a_small_batch_says_more_and_never_far_less(tmp_path):
    """At batch 2 the fast path's copy of [W_q; W_k; W_v] outweighs the maps it does not keep: "248 KiB more, far less
    at long T" contradicted itself; the maps grow with T^2, so it turns to less at a longer T."""
    s = tiny_session(data="pydoc")
    run(s, ":set d_model=128 n_heads=4 n_layers=4 d_ff=512 max_seq_len=64 batch_size=2")
    said = plain(run(s, ":params"), 400)
    assert " more, less at a longer T" in said and "more, far less" not in said, said


def test_pause_leaves_the_display_where_the_interrupted_thread_holds_its_lock():
    """Rich's lock is re-entrant: taken at once by a handler on the thread that holds it, the stop ran inside the
    drawing it had interrupted, which then drew the stale copy again."""
    stopped = []
    display = SimpleNamespace(_lock=threading.RLock(), stop=lambda: stopped.append(True))
    with display._lock:  # the main thread mid-update, where SIGTSTP lands
        assert live.pause(display) is False
    assert stopped == []
    assert live.pause(display) is True and stopped == [True]  # not held: stopped as before
