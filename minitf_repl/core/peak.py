"""How fast this device multiplies matrices: the peak that a run's model FLOPs utilisation (MFU) is a share of.

One square product in a dtype, timed: `:device` measures it (and says it), `:train` compares a run's achieved
FLOP rate with it, and the benchmarks in bench/ measure their float32 peak through the same function, so the
tool and the benchmark tables give one number for one machine.

The size is chosen so that one product takes a few milliseconds (MIN_PRODUCT_SECONDS): a product much shorter
is mostly call overhead and the threads' start, and reads below the peak (a GPU's products reach theirs only at
thousands), one much longer costs time the command has no need to spend. A budget bounds the whole
measurement (BUDGET_SECONDS), so that on a busy or slow device (bfloat16 emulated in float32 arithmetic) fewer
timed rounds are taken rather than more seconds spent.

The inputs are drawn from a generator of their own: the measurement leaves torch's global random stream (a run's
batches draw from it where no seed restarts it) where it was.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

FIRST_SIZE = 256  # the size the adaptive measurement starts at, doubling from there
# the largest size it doubles to: a CPU's budget stops it long before (a 4096 x 4096 float32 product is 137 GFLOP);
# a GPU's products reach their peak only at thousands (an 8192 x 8192 product is 1.1 ms at an H100's dense
# bfloat16 peak, 989 TFLOP/s)
MAX_SIZE = 8192
MIN_PRODUCT_SECONDS = 0.002  # one product at the chosen size takes at least this ("a few ms")
WARMUP_ROUNDS = 2  # untimed products at the chosen size first: caches, thread pools and kernels settled
TIMED_ROUNDS = 5  # then the median of this many (fewer where the budget runs out; at least one)
# the whole measurement's time, growth included: :device's cost, and :train's where it measures at its end
# (at 170 GFLOP/s a 1024 x 1024 product takes 12.6 ms: seven of them, 0.09 s)
BUDGET_SECONDS = 0.25


@dataclass(frozen=True)
class ProductSpeed:
    gflops: float  # 2 n^3 / the median time of one n x n by n x n product, in 10^9 per second
    size: int  # n
    dtype: str  # the inputs' dtype: "float32" or "bfloat16"
    device: str  # where it ran: "cpu", "cuda:0", "mps"
    threads: int | None  # torch's CPU threads it ran on; None off the CPU
    rounds: int  # the timed products the median is of


# the latest measurement at each (device, dtype, threads): what `:train` compares a run with, where this process
# (the REPL's session, or a one-shot command) measured one at the run's device, dtype and thread count
_LATEST: dict[tuple[str, str, int | None], ProductSpeed] = {}


def _key(device: torch.device, dtype: str) -> tuple[str, str, int | None]:
    return str(device), dtype, torch.get_num_threads() if device.type == "cpu" else None


def _sync(device: torch.device) -> None:
    """Wait for the device's queued work: a GPU's product returns before it is done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measure_product_speed(device: torch.device | str = "cpu", dtype: str = "float32", size: int | None = None,
                          warmup: int = WARMUP_ROUNDS, rounds: int = TIMED_ROUNDS,
                          budget: float | None = BUDGET_SECONDS) -> ProductSpeed:
    """The speed of a square matrix product of `dtype` on `device`, measured now with torch's own kernels (`a @ b`).

    `size` None chooses n, doubling from FIRST_SIZE while one product takes under MIN_PRODUCT_SECONDS and the
    rounds at the next size fit the budget; a given size is measured as given (the benchmarks' 1024 x 1024).
    `budget` None takes every round asked for. Raises what torch raises (a dtype the device has no kernel for)."""
    device = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    # One small random tile each, drawn on the CPU from a generator of its own (not torch's global stream: the
    # module's docstring) and repeated to n x n on the device: a dense product's time does not depend on its values,
    # and drawing 8192 x 8192 normals on the CPU for a GPU's product would take longer than the whole budget.
    tiles = torch.randn(2, FIRST_SIZE, FIRST_SIZE, generator=torch.Generator().manual_seed(0)).to(device, torch_dtype)

    def operands(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        reps = -(-n // FIRST_SIZE)
        return tuple(tile.repeat(reps, reps)[:n, :n].contiguous() for tile in tiles)

    def timed(a: torch.Tensor, b: torch.Tensor) -> float:
        _sync(device)
        t0 = time.perf_counter()
        # a Linear's own call (x W^T), which training's products go through, not `a @ b`: on a CPU without bfloat16
        # units aten's bfloat16 mm is a slow fallback (1.2 GFLOP/s at 512 on a Zen 3 thread, F.linear 9.7), and a
        # bfloat16 run's MFU read 267%
        F.linear(a, b)
        _sync(device)
        return time.perf_counter() - t0

    n = size or FIRST_SIZE
    a, b = operands(n)
    # One product before the clock starts: a GPU's first creates its BLAS handle and loads kernels (hundreds of ms),
    # which counted against the budget stopped the growth at 256 and read an H100 at a few TFLOP/s
    timed(a, b)
    start = time.perf_counter()
    done = 0  # products already run at size n: the warm-up rounds they stand for
    if size is None:
        while True:
            # the quicker of two: the first at a size is a warm-up (its buffers, the kernel's choice), and one
            # timing alone, stretched by a busy machine, stopped the growth at 256 where 512 was a few ms
            took = min(timed(a, b), timed(a, b))
            done = 2
            # the next size's rounds cost about 8x this one's each (n^3): grown only where they fit the budget
            then = (time.perf_counter() - start) + 8 * took * (2 + warmup + rounds)
            if took >= MIN_PRODUCT_SECONDS or n >= MAX_SIZE or (budget is not None and then > budget):
                break
            n *= 2
            a, b = operands(n)
    for _ in range(max(warmup - done, 0)):
        timed(a, b)
    times: list[float] = []
    while len(times) < max(rounds, 1):
        # a busy or slow device: the median of the rounds taken before the next would pass the budget
        if times and budget is not None and time.perf_counter() - start + statistics.median(times) > budget:
            break
        times.append(timed(a, b))
    seconds = statistics.median(times)
    speed = ProductSpeed(gflops=2 * n**3 / max(seconds, 1e-12) / 1e9, size=n, dtype=dtype, device=str(device),
                         threads=torch.get_num_threads() if device.type == "cpu" else None, rounds=len(times))
    _LATEST[_key(device, dtype)] = speed
    return speed


def latest_product_speed(device: torch.device | str, dtype: str) -> ProductSpeed | None:
    """The last speed this process measured on `device` in `dtype` at torch's present thread count; None: none."""
    return _LATEST.get(_key(torch.device(device), dtype))


def product_speed_or_none(device: torch.device | str, dtype: str, again: bool = True) -> ProductSpeed | None:
    """The speed of `device`'s products in `dtype`: measured now (`again`), or the latest one at this thread count
    and measured only where there is none. None where it cannot be measured (a device that fails the product, a
    dtype it lacks): a command that shows it goes on without it, never fails for it."""
    try:
        if not again and (known := latest_product_speed(device, dtype)) is not None:
            return known
        return measure_product_speed(device, dtype)
    except Exception:  # RuntimeError from a device or a dtype, a fake device a test stands in: no number, no failure
        return None


def flop_rate_words(gflops: float) -> str:
    """A FLOP rate as a summary says it: "55 GFLOP/s", "0.41 GFLOP/s" (a tiny model), "312 TFLOP/s" (a GPU)."""
    if gflops >= 10_000:
        return f"{gflops / 1000:,.0f} TFLOP/s"
    if gflops >= 10:
        return f"{gflops:,.0f} GFLOP/s"
    return f"{gflops:.2g} GFLOP/s"


# --- a run's share of the peak (MFU): when it is said, and in what words (:train and :compare alike) ---------------
# A share is said only of a rate timed over two steps or more (MIN_TIMED_STEPS). One step's time holds whatever one-off
# set-up that step paid (in a new process: the choice of the float32 products' kernel, which core.fastpath times, the
# first allocations, the thread pool's start) beside a single step's noise, and nothing in it tells the two apart: a
# fresh `minitf train steps=1` at the default model timed 775 tokens/s, 11% of a 36 GFLOP/s peak, where its later
# steps ran at 3,300 tokens/s, 48% (a 2-core AMD EPYC, one process), and "11% MFU" read as the model's use of the
# CPU. The GFLOP/s is still said (the tokens/s, which the summary gives anyway, times the ledger's FLOPs), with words
# saying why no share. (:compare's one untimed warm-up step takes most of the set-up before it times a contender,
# but one step's time is still too few to state a share to the percent: the same rule.)
MIN_TIMED_STEPS = 2
# From two steps on the run's first step can be set against the rest (without_first_step): where it took at least
# WARM_UP_FACTOR times a later step's mean and leaving it out raises the run's rate by WARM_UP_WEIGHT or more, the
# caller says so beside the share, with the rate of the later steps. The run's own figures stay of all its timed steps
# (tokens/s, GFLOP/s and MFU agree with each other and with --json), the warm-up said, not hidden.
# One rule for both: a share is said only where at least MIN_TIMED_STEPS timed steps are free of that set-up. Where
# the first step was such a warm-up and fewer than MIN_TIMED_STEPS steps came after it (a run of two), the run's time
# is mostly the set-up as a one-step run's is, and neither the run's share nor the later step's is said: a fresh
# `minitf --data sort:4 train --steps 2` read 2.9% MFU where its second step ran at 12%. A run under compile=on has
# its compiling step timed apart, so its timed steps hold no such set-up; one of them is still too few (no share).
WARM_UP_FACTOR = 2.0
WARM_UP_WEIGHT = 1.2


def share_of_peak(gflops: float | None, peak_gflops: float | None, timed_steps: int) -> float | None:
    """A rate's share of the peak (its MFU, 0.32 for 32%); None where the rate or the peak is unknown, where fewer
    than MIN_TIMED_STEPS steps were timed (above), or where the rate is above the peak: a peak misread (a busy
    machine's measurement, a kernel the run does not use), so no share rather than one over 100%."""
    if gflops is None or not peak_gflops or timed_steps < MIN_TIMED_STEPS or gflops > peak_gflops:
        return None
    return gflops / peak_gflops


def share_words(mfu: float) -> str:
    """"32%", and a tiny model's "0.4%" (not "0%")."""
    return f"{mfu:.0%}" if mfu >= 0.095 else f"{mfu:.1%}"


def no_share_words(timed_steps: int, after_compile: bool = False, first_warm_up: bool = False) -> str | None:
    """Why a run's rate has no share (the rule above), in the summary's words after its GFLOP/s; None where the
    steps timed are enough for one. `after_compile`: the step that compiled was timed apart from `timed_steps`;
    `first_warm_up`: the first of them was a warm-up (without_first_step)."""
    if timed_steps < MIN_TIMED_STEPS:
        return (" (one step timed after the compile: too few for a share, no MFU)" if after_compile
                else " (one step timed, its one-off set-up in it: no MFU)")
    if first_warm_up and timed_steps - 1 < MIN_TIMED_STEPS:
        after = "one step" if timed_steps == 2 else f"{timed_steps - 1:,} steps"
        return f" (the first step timed was mostly one-off set-up, {after} after it: too few for a share, no MFU)"
    return None


def utilisation_words(gflops: float, mfu: float | None, on_cpu: bool, dtype: str, timed_steps: int,
                      after_compile: bool = False, first_warm_up: bool = False) -> str:
    """"55 GFLOP/s, 32% of this CPU's float32 products (MFU)", as a summary says a run's rate and its share; without
    a share, the rate alone, and where too few steps were timed (no_share_words) the words that say why none is
    given."""
    words = flop_rate_words(gflops)
    if mfu is not None:
        return words + f", {share_words(mfu)} of this {'CPU' if on_cpu else 'GPU'}'s {dtype} products (MFU)"
    return words + (no_share_words(timed_steps, after_compile, first_warm_up) or "")


def without_first_step(rate: float, first_rate: float, steps: int) -> float | None:
    """The rate of a run's steps after its first, where its first step was a warm-up that weighs on the run's rate
    (WARM_UP_FACTOR, WARM_UP_WEIGHT above); None where it was not, or where there is no later step to set it against.
    `rate`: the run's tokens (or FLOPs) per second over all `steps` timed steps, `first_rate`: the first step's own,
    each step of the same size (a run's batches are)."""
    if steps < 2 or rate <= 0 or first_rate <= 0:
        return None
    seconds, first = steps / rate, 1 / first_rate  # in the time one step's tokens take at a rate of 1
    rest = seconds - first
    if rest <= 0:
        return None
    later = (steps - 1) / rest
    if first < WARM_UP_FACTOR * rest / (steps - 1) or later < WARM_UP_WEIGHT * rate:
        return None
    return later


def forget_product_speeds() -> None:
    """Drop every measurement kept (a test's fresh process; the next `:train` then measures its own)."""
    _LATEST.clear()
