"""How far a float32 training step can go past nanoGPT's: the step's matrix products alone, and minitf's step
with its attention, then also its GELU, made free.

Issue #16 asks the float32 step for 1.2x nanoGPT's tokens/s at 4 x 128 (block 64, batch 12) and 1.05x at
6 x 384 (block 256, batch 32). Both steps run the same matrix products through the same kernels, so what
a faster step can save lies outside them. This script measures that room, alternated chunk by chunk in
one run as bench/nanogpt.py does, medians:

    products              the forward and backward matrix products of one step (x W^T + b, then dY W and
                          dY^T x for every linear layer and the tied head), in the step's own shapes,
                          back to back and nothing else: no float32 step can take less
    nanoGPT               nanoGPT's float32 step (../shared/anchors/nanogpt), as bench/nanogpt.py runs it
    minitf float32        `:train`'s step with dtype=float32 (the fast path, fused AdamW)
    free attention        the same step with the attention kernel replaced by "out = v" (same shapes, no
                          arithmetic, nothing to backpropagate through): what the best possible attention
                          kernel would give
    free attention+GELU   the same, with the GELU also replaced by the identity

The last two rows do not compute the model any more; they bound what faster attention and GELU kernels
(hand-written, fused or compiled) could win. The closing line says how much time 1.2x (1.05x with
--large) leaves for everything outside the products, against what each step spends there.

    python bench/float32_bound.py              # 4 x 128, block 64, batch 12
    python bench/float32_bound.py --large      # 6 x 384, block 256, batch 32
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from minitf_repl.core import device as device_info
from minitf_repl.core import fastpath

from nanogpt import ANCHOR, LARGE, SMALL, alternated, minitf_step, nanogpt_step


class _FreeAttention:
    """torch.nn.functional as the fast path sees it, except that attention hands back its values."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def scaled_dot_product_attention(q, k, v, **options):
        return v


@contextlib.contextmanager
def free(attention: bool = True, gelu: bool = False):
    """Inside: core.fastpath's attention returns v, and (gelu=True) nn.GELU is the identity. Put back after."""
    functional, gelu_forward = fastpath.F, nn.GELU.forward
    try:
        if attention:
            fastpath.F = _FreeAttention()
        if gelu:
            nn.GELU.forward = lambda self, x: x
        yield
    finally:
        fastpath.F, nn.GELU.forward = functional, gelu_forward


def products_of_a_step(size: dict):
    """steps(n): n times the matrix products of one training step of `size`, with nothing around them."""
    d, tokens = size["d"], size["B"] * size["T"]
    layer = [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d)]  # q/k/v, the attention's output, the FFN's two
    shapes = layer * size["L"] + [(d, size["V"])]  # and the head
    inputs = {n: torch.randn(tokens, n) for n in (d, 4 * d)}
    weights = [(torch.randn(m, n), torch.randn(m)) for n, m in shapes]
    grads = [torch.randn(tokens, m) for _, m in shapes]

    def steps(n: int) -> None:
        for _ in range(n):
            for (inner, _), (weight, bias), grad in zip(shapes, weights, grads):
                x = inputs[inner]
                torch.addmm(bias, x, weight.t())  # forward
                grad @ weight  # the input's gradient
                grad.t() @ x  # the weight's gradient

    return steps


def under(context, steps):
    def run(n: int) -> None:
        with context():
            steps(n)

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="steps per chunk")
    args = parser.parse_args()
    if not ANCHOR.is_file():
        print(f"skipped: nanoGPT's model is not at {ANCHOR} (a user's clone has no ../shared)")
        return
    size, target = (LARGE, 1.05) if args.large else (SMALL, 1.2)
    nanogpt, _ = nanogpt_step(size)
    rows = {
        "products": products_of_a_step(size),
        "nanoGPT": nanogpt,
        "minitf float32": minitf_step(size, dtype="float32"),
        "free attention": under(lambda: free(attention=True), minitf_step(size, dtype="float32")),
        "free attention+GELU": under(lambda: free(attention=True, gelu=True), minitf_step(size, dtype="float32")),
    }
    for run in rows.values():  # a first step apart: allocation, first-call setup
        run(1)
    per_step = alternated(rows, args.chunks, args.steps)
    ms = {name: 1000 * statistics.median(times) for name, times in per_step.items()}
    print(f"{device_info.cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; {size['L']} layers x "
          f"{size['H']} heads x {size['d']}, block {size['T']}, batch {size['B']}, float32; medians of "
          f"{args.chunks} alternated chunks of {args.steps} steps")
    for name, value in ms.items():
        print(f"{name:22s} {value:9.2f} ms a step   {ms['nanoGPT'] / value:5.2f}x nanoGPT")
    goal = ms["nanoGPT"] / target
    print(f"{target}x nanoGPT is {goal:.2f} ms a step. The products alone take {ms['products']:.2f} ms "
          f"({ms['products'] / ms['nanoGPT']:.0%} of nanoGPT's step), which leaves {goal - ms['products']:.2f} ms "
          f"for everything else; nanoGPT spends {ms['nanoGPT'] - ms['products']:.2f} ms there, minitf "
          f"{ms['minitf float32'] - ms['products']:.2f} ms, and minitf with attention and GELU free "
          f"{ms['free attention+GELU'] - ms['products']:.2f} ms")


if __name__ == "__main__":
    main()
