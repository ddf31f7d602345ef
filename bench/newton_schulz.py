"""Muon's Newton-Schulz on this CPU: the shipped float32 form, bfloat16, and the same polynomial through eigh.

Muon replaces each hidden matrix's momentum by about its nearest orthogonal matrix with five
Newton-Schulz steps (core/optimizers.py). On a CPU without bfloat16 units they run in float32 and
are most of what a Muon step costs beyond an AdamW step. Every step multiplies X on the left by a
polynomial in X X^T, so the five steps together are X_5 = Q X_0 with Q = g(G), G = X_0 X_0^T, and g
known for each eigenvalue of G (a scalar recurrence, `spectral_newton_schulz`). One symmetric
eigendecomposition (LAPACK's syevd through torch.linalg.eigh) then replaces the 30 to 34 m^3 of the
steps' products by about 9 m^3 done far less efficiently: this script times whether that pays.

Rows, for the stacks of one shape that BatchedMuon orthogonalises together (`muon_stacks`), each
timed in alternated chunks in one process, medians:
    float32      core.optimizers.newton_schulz in float32, as shipped (the Gram form for matrices at
                 least twice as wide as tall): what a CPU without bfloat16 runs
    bfloat16     the same in bfloat16: what a CPU with AMX or AVX512-BF16 runs (emulated, and slow,
                 on a CPU without them)
    eigh         spectral_newton_schulz in float32
and each row's largest difference from the float64 steps. The float32 and bfloat16 rows also say how
fast their matrix products ran: the products' FLOPs (counted by torch's FlopCounterMode on the real
calls, `product_flops`) over the row's time, against this machine's float32 matmul peak measured in
the same run (bench/nanogpt.py's `matmul_peak`). The same count at the peak is Newton-Schulz's floor:
no float32 Muon step can take less (`floor_ms`), whatever is done outside the products.

    python bench/newton_schulz.py [--large] [--threads N] [--chunks 15]
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from minitf_repl.core.config import ModelConfig
from minitf_repl.core.device import cpu_kind
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.optimizers import hidden_matrices, newton_schulz

from nanogpt import matmul_peak

# torch.optim.Muon's defaults, which core/optimizers.py's BatchedMuon keeps
_MUON = inspect.signature(torch.optim.Muon).parameters
COEFFICIENTS, STEPS, EPS = (_MUON[name].default for name in ("ns_coefficients", "ns_steps", "eps"))


def spectral_newton_schulz(X: torch.Tensor, coefficients: tuple = COEFFICIENTS, steps: int = STEPS,
                           eps: float = EPS) -> torch.Tensor:
    """newton_schulz's result for a stack of wide matrices, from one eigendecomposition of X X^T each.

    With G = X X^T = V diag(s) V^T, every step's polynomial acts on each eigenvalue alone: a step
    multiplies X by p(A) = a + b A + c A^2 with A = X X^T, and A's eigenvalue s becomes s p(s)^2. So
    the five steps multiply X by Q = V diag(g) V^T, g the product of the five p(s): the same numbers
    in exact arithmetic, without the iteration's rounding.
    """
    a, b, c = coefficients
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)
    s, V = torch.linalg.eigh(X @ X.mT)
    s = s.clamp(min=0)  # G is positive semidefinite; eigh's rounding may put a zero eigenvalue just below 0
    g = torch.ones_like(s)
    for _ in range(steps):
        p = a + b * s + c * s * s
        g, s = g * p, s * p * p
    return (V * g.unsqueeze(-2)) @ V.mT @ X


def muon_stacks(config: ModelConfig) -> list[torch.Tensor]:
    """Random momenta in the stacks BatchedMuon forms for `config`: every hidden matrix turned to be
    wide, grouped by shape."""
    torch.manual_seed(0)
    shapes: dict[tuple, int] = {}
    for _, p in hidden_matrices(MiniTransformerLM(config)):
        rows, cols = p.shape
        wide = (min(rows, cols), max(rows, cols))
        shapes[wide] = shapes.get(wide, 0) + 1
    return [torch.randn(n, *wide) for wide, n in shapes.items()]


def product_flops(stacks: list[torch.Tensor], dtype: torch.dtype = torch.float32) -> int:
    """The FLOPs of newton_schulz's matrix products for one optimizer step over `stacks`, in `dtype`,
    counted on the calls themselves (so the Gram form, taken for wide matrices in float32, is counted as
    it runs). The default model's: 1.85 GFLOP in float32."""
    with FlopCounterMode(display=False) as counter:
        for X in stacks:
            newton_schulz(X, COEFFICIENTS, STEPS, EPS, dtype)
    return counter.get_total_flops()


def floor_ms(config: ModelConfig, peak_gflops: float) -> float:
    """The least time float32 Newton-Schulz can take in a Muon step of `config`'s model: its products'
    FLOPs at `peak_gflops` (a 1024 x 1024 product's speed, which the batched products at best match)."""
    return product_flops(muon_stacks(config)) / (peak_gflops * 1e9) * 1e3


def rows() -> dict:
    return {
        "float32": lambda X: newton_schulz(X, COEFFICIENTS, STEPS, EPS, torch.float32),
        "bfloat16": lambda X: newton_schulz(X, COEFFICIENTS, STEPS, EPS, torch.bfloat16),
        "eigh": spectral_newton_schulz,
    }


def measure(stacks: list[torch.Tensor], chunks: int, calls: int, names=None,
            before_each=None) -> dict[str, list[float]]:
    """Per row (all, or those named), the milliseconds of one optimizer step's Newton-Schulz (all stacks), per chunk.
    `before_each`, if given, is called (untimed) before every round of the rows."""
    runs = {name: run for name, run in rows().items() if names is None or name in names}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, run in runs.items():  # warm-up: first calls allocate and load kernels
        for X in stacks:
            run(X)
    for _ in range(chunks):
        if before_each is not None:
            before_each()
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(calls):
                for X in stacks:
                    run(X)
            times[name].append((time.perf_counter() - start) / calls * 1e3)
    return times


def errors(stacks: list[torch.Tensor]) -> dict[str, float]:
    """Per row, the largest difference from newton_schulz's own steps in float64, over every stack."""
    reference = [newton_schulz(X.double(), COEFFICIENTS, STEPS, EPS, torch.float64) for X in stacks]
    return {name: max((run(X).double() - ref).abs().max().item() for X, ref in zip(stacks, reference))
            for name, run in rows().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", action="store_true", help="6 layers x 384 (d_ff 1536) instead of the default model")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    parser.add_argument("--chunks", type=int, default=15)
    parser.add_argument("--calls", type=int, default=5, help="optimizer steps' worth of calls per chunk")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = ModelConfig(vocab_size=65, max_seq_len=256, d_model=384, n_heads=6, n_layers=6, d_ff=1536) if args.large \
        else ModelConfig(vocab_size=65)
    stacks = muon_stacks(config)
    described = ", ".join(f"{X.shape[0]} x {X.shape[1]} x {X.shape[2]}" for X in stacks)
    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; Muon's stacks for "
          f"{config.n_layers} x {config.d_model}: {described}; medians of {args.chunks} alternated chunks")
    peaks = []
    times = measure(stacks, args.chunks, args.calls, before_each=lambda: peaks.append(matmul_peak()))
    peak = statistics.median(peaks)
    error = errors(stacks)
    flops = {name: product_flops(stacks, dtype) for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16))}
    shipped = statistics.median(times["float32"])
    for name, chunk_times in times.items():
        median = statistics.median(chunk_times)
        speed = ""
        if name in flops:
            gflops = flops[name] / (median * 1e-3) / 1e9
            speed = f"   products {flops[name] / 1e9:.2f} GFLOP at {gflops:.0f} GFLOP/s, {gflops / peak:.0%} of the float32 peak"
        print(f"  {name:9s} {median:8.2f} ms a Muon step   {shipped / median:5.2f}x the shipped float32's speed"
              f"   largest difference from float64 {error[name]:.1e}{speed}")
    print(f"  the float32 matmul peak in this run: {peak:.0f} GFLOP/s (a 1024 x 1024 product, median of the "
          f"{len(peaks)} chunks), so float32 Newton-Schulz cannot take less than {floor_ms(config, peak):.2f} ms "
          f"a Muon step here")
    per_stack = []
    for X in stacks:
        one = {name: statistics.median(t) for name, t in measure([X], 5, args.calls, ("float32", "eigh")).items()}
        per_stack.append(f"{X.shape[0]} x {X.shape[1]} x {X.shape[2]}: float32 {one['float32']:.2f} ms, "
                         f"eigh {one['eigh']:.2f} ms")
    print("  by stack (5 chunks each): " + "; ".join(per_stack))


if __name__ == "__main__":
    main()
