"""How far a float32 training step can go past nanoGPT's: the step's matrix products alone, and minitf's step
with its attention, then also its GELU, made free.

Issue #16 asks the float32 step for 1.2x nanoGPT's tokens/s at 4 x 128 (block 64, batch 12) and 1.05x at
6 x 384 (block 256, batch 32). Both steps run the same matrix products through the same kernels, so what
a faster step can save lies outside them. This script measures that room, alternated chunk by chunk in
one run as bench/nanogpt.py does, medians:

    products              the forward and backward matrix products of one step (x W^T + b, then dY W and
                          dY^T x for every linear layer and the tied head), in the step's own shapes,
                          back to back and nothing else: no float32 step can take less
    products, fastest     the same products with each linear shape's weight stored out x in (nn.Linear's
    layouts               layout, both models') or transposed, whichever ran faster here just before
                          (fastest_layouts): what storing weights the other way round could win
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

import contextlib
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from minitf_repl.core import device as device_info
from minitf_repl.core import fastpath

from nanogpt import ANCHOR, LARGE, SMALL, alternated, autograd_ffn, minitf_step, nanogpt_step, sized_parser, under


class _FreeAttention:
    """torch.nn.functional as the fast path sees it, except that attention hands back its values."""

    def __getattr__(self, name):
        return getattr(F, name)

    @staticmethod
    def scaled_dot_product_attention(q, k, v, **options):
        return v


@contextlib.contextmanager
def free(attention: bool = True, gelu: bool = False):
    """Inside: core.fastpath's attention returns v, and (gelu=True) nn.GELU is the identity. Put back after.

    With gelu=True the feed-forward also leaves the fast path's own backward (fastpath._GELUFeedForward,
    which calls GELU's kernels itself) for the module, whose nn.GELU is then the identity.
    """
    functional, gelu_forward = fastpath.F, nn.GELU.forward
    try:
        with autograd_ffn() if gelu else contextlib.nullcontext():
            if attention:
                fastpath.F = _FreeAttention()
            if gelu:
                nn.GELU.forward = lambda self, x: x
            yield
    finally:
        fastpath.F, nn.GELU.forward = functional, gelu_forward


LAYOUTS = ("out x in", "in x out")  # a linear layer's weight as nn.Linear stores it, or transposed (GPT-2's Conv1D)


def linear_products(x, weight, bias, grad, layout: str):
    """One linear layer's three products in a training step, its weight stored in `layout`: (y, dX, dW).

    out x in (both models): y = x W^T + b, dX = dY W, dW = dY^T x. in x out: y = x W + b, dX = dY W^T, and
    the weight's gradient x^T dY, in the weight's own layout (dW transposed). The same numbers either
    way; what differs is which operand the BLAS reads transposed, and its kernels are not equally fast
    for every shape.
    """
    if layout == LAYOUTS[0]:
        return torch.addmm(bias, x, weight.t()), grad @ weight, grad.t() @ x
    return torch.addmm(bias, x, weight), grad @ weight.t(), x.t() @ grad


def linear_shapes(size: dict) -> list[tuple[int, int]]:
    """(in, out) of one block's linear layers: q/k/v, the attention's output, the FFN's two; then the head's."""
    d = size["d"]
    return [(d, 3 * d), (d, d), (d, 4 * d), (4 * d, d), (d, size["V"])]


def products_of_a_step(size: dict, layouts: dict | None = None):
    """steps(n): n times the matrix products of one training step of `size`, with nothing around them.

    layouts: {(in, out): layout} per linear shape; every weight out x in (as both models store them) by default.
    """
    d, tokens = size["d"], size["B"] * size["T"]
    *layer, head = linear_shapes(size)
    shapes = layer * size["L"] + [head]
    layouts = layouts or {}
    chosen = [layouts.get(shape, LAYOUTS[0]) for shape in shapes]
    inputs = {n: torch.randn(tokens, n) for n in (d, 4 * d)}
    weights = [(torch.randn(m, n) if layout == LAYOUTS[0] else torch.randn(n, m), torch.randn(m))
               for (n, m), layout in zip(shapes, chosen)]
    grads = [torch.randn(tokens, m) for _, m in shapes]

    def steps(n: int) -> None:
        for _ in range(n):
            for (inner, _), (weight, bias), grad, layout in zip(shapes, weights, grads, chosen):
                linear_products(inputs[inner], weight, bias, grad, layout)

    return steps


def fastest_layouts(size: dict, rounds: int = 7, calls: int = 20) -> dict:
    """{(in, out): the layout whose three products ran fastest}, for each linear shape of `size`.

    Each shape's two layouts alternate `rounds` times, `calls` steps' worth each, and the lower median
    wins. This only chooses: the "fastest layouts" row then times the choice alternated with the other rows.
    """
    tokens = size["B"] * size["T"]
    best = {}
    for n, m in linear_shapes(size):
        x, bias, grad = torch.randn(tokens, n), torch.randn(m), torch.randn(tokens, m)
        weights = {LAYOUTS[0]: torch.randn(m, n), LAYOUTS[1]: torch.randn(n, m)}
        times = {layout: [] for layout in LAYOUTS}
        for _ in range(rounds):
            for layout, weight in weights.items():
                start = time.perf_counter()
                for _ in range(calls):
                    linear_products(x, weight, bias, grad, layout)
                times[layout].append(time.perf_counter() - start)
        best[(n, m)] = min(LAYOUTS, key=lambda layout: statistics.median(times[layout]))
    return best


def main() -> None:
    args = sized_parser(__doc__).parse_args()
    if not ANCHOR.is_file():
        print(f"skipped: nanoGPT's model is not at {ANCHOR} (a user's clone has no ../shared)")
        return
    size, target = (LARGE, 1.05) if args.large else (SMALL, 1.2)
    nanogpt, _ = nanogpt_step(size)
    layouts = fastest_layouts(size)
    rows = {
        "products": products_of_a_step(size),
        "products, fastest layouts": products_of_a_step(size, layouts),
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
    width = max(map(len, ms))
    for name, value in ms.items():
        print(f"{name:{width}s} {value:9.2f} ms a step   {ms['nanoGPT'] / value:5.2f}x nanoGPT")
    goal = ms["nanoGPT"] / target
    print(f"{target}x nanoGPT is {goal:.2f} ms a step. The products alone take {ms['products']:.2f} ms "
          f"({ms['products'] / ms['nanoGPT']:.0%} of nanoGPT's step), which leaves {goal - ms['products']:.2f} ms "
          f"for everything else; nanoGPT spends {ms['nanoGPT'] - ms['products']:.2f} ms there, minitf "
          f"{ms['minitf float32'] - ms['products']:.2f} ms, and minitf with attention and GELU free "
          f"{ms['free attention+GELU'] - ms['products']:.2f} ms")
    if fastpath.onednn_faster():
        print("The products rows run torch's own kernels (MKL), as nanoGPT's step does; minitf's fast path sends its "
              "float32 products to oneDNN's, measured faster on this CPU (core/fastpath.py), so minitf's rows take "
              "less than the products rows plus the rest, and their differences above understate what it spends there")
    turned = [f"{n} -> {m}" for (n, m), layout in layouts.items() if layout != LAYOUTS[0]]
    print(f"Weights stored in x out for {', '.join(turned) or 'no shape'} (the rest out x in, as both models "
          f"store them): the products take {ms['products, fastest layouts']:.2f} ms, "
          f"{ms['products'] - ms['products, fastest layouts']:+.2f} ms against the models' layout")


if __name__ == "__main__":
    main()
