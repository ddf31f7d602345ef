"""A linear layer's float32 forward and backward: torch's own kernels (MKL) against oneDNN's, on this CPU.

torch sends a float32 matrix product to MKL. On an AMD processor MKL takes its AVX2 kernels, while
oneDNN (also inside torch) runs AVX-512 where the CPU has it; on an Intel one both run AVX-512. So
core.fastpath measures once per process which is faster (`onednn_faster`) and sends its float32
products there. This script shows the measurement at every product shape of the two benchmark
sizes: forward x W^T + b, then dx = dY W and dW = dY^T x, each way alternated, medians, in GFLOP/s.

    python bench/onednn.py [--threads N] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from minitf_repl.core import fastpath
from minitf_repl.core.device import cpu_kind

# (tokens, in, out) of every linear layer: 4 x 128 at batch 12 x 64 and 6 x 384 at batch 32 x 256
SHAPES = {
    "4 x 128": [(768, 128, 384), (768, 128, 128), (768, 128, 512), (768, 512, 128), (768, 128, 65)],
    "6 x 384": [(8192, 384, 1152), (8192, 384, 384), (8192, 384, 1536), (8192, 1536, 384), (8192, 384, 65)],
}


def forward_and_backward(use_onednn: bool, x, w, b, dy):
    def run():
        if use_onednn:
            return (fastpath._onednn_linear(x, w, b), fastpath._onednn_linear(dy, w.t(), None),
                    fastpath._onednn_linear(dy.t(), x.t(), None))
        return F.linear(x, w, b), dy @ w, dy.t() @ x

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's own)")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    decision = "oneDNN" if fastpath.onednn_faster() else "torch's own (MKL)"
    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; the fast path takes "
          f"{decision} for float32 products here (oneDNN if {fastpath.ONEDNN_FROM_SPEEDUP}x faster or more); "
          f"medians of {args.rounds} alternated rounds")
    ratios = []
    for size, shapes in SHAPES.items():
        for tokens, n_in, n_out in shapes:
            x, w, b, dy = torch.randn(tokens, n_in), torch.randn(n_out, n_in), torch.randn(n_out), torch.randn(tokens, n_out)
            runs = {"torch": forward_and_backward(False, x, w, b, dy), "oneDNN": forward_and_backward(True, x, w, b, dy)}
            times = {name: [] for name in runs}
            for run in runs.values():
                run()
            for _ in range(args.rounds):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    times[name].append(time.perf_counter() - start)
            flops = 3 * 2 * tokens * n_in * n_out
            speed = {name: flops / statistics.median(t) / 1e9 for name, t in times.items()}
            ratios.append(speed["oneDNN"] / speed["torch"])
            print(f"  {size}: {tokens:5d} x {n_in:4d} -> {n_out:4d}   torch {speed['torch']:5.0f} GFLOP/s   "
                  f"oneDNN {speed['oneDNN']:5.0f} GFLOP/s   {ratios[-1]:.2f}x")
    print(f"oneDNN against torch's own, median over the shapes: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
