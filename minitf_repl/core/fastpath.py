"""The fast path: the same model and the same parameters, computed with fewer kernels (training and decoding).

`MiniTransformerLM.forward` is written to be read: q, k and v come from three projections, every
step of the attention formula passes through a `Probe`, and the explicit formula spells out the
scores, the mask and the softmax. A training step needs none of that, so `FastPath(model)`
computes the same function the way a production model would:

    q, k, v = split(x [W_q; W_k; W_v]^T + [b_q; b_k; b_v])     one matrix product instead of three
    out     = scaled_dot_product_attention(q, k, v, causal)    one fused kernel, no T x T tensors kept
    FFN(x)  = GELU(x W_1^T + b_1) W_2^T + b_2                  a backward pass of its own, on the CPU
    (no Probe calls, no module per step of the formula)

The concatenated matrix [W_q; W_k; W_v] is built from the model's own parameters on every forward
(a copy of 3 d^2 numbers, nothing next to the product it saves), so autograd hands each of W_q,
W_k, W_v its own slice of the gradient: the optimizer, checkpoints, views and `:shapes` keep
seeing the readable model's parameters, and nothing has to be kept in sync. Norms, positions and
the feed-forward part (FFN, SwiGLU, experts) are the model's own modules, called as they are, but
for the two below: the GELU FFN's own backward, and oneDNN's products for the FFN's and SwiGLU's
plain Linear layers (each module's forward, with its products through `linear`).

`tests/test_fastpath.py` checks that the loss and every gradient equal the readable path's within
1e-5 for every variant. The trainer takes this path unless `fast_path=off`, a part is of a caller's own
class where this path would skip its code (`own_part`), or someone is listening:
a view, a shape trace or an ablation works through forward hooks on the model's modules, which
this path does not call, so any hook on the model sends the step down the readable path instead
(`listened`). Dropout draws different masks here (the fused kernel draws its own), so with dropout
on the two paths are equal in distribution, not number for number.

On a CPU the attention kernel of a bfloat16 training step runs in float32 unless bfloat16 was
measured faster at that shape: torch's CPU flash-attention backward is several times slower in
bfloat16 than in float32 at short sequences and narrow heads (forward and backward with the casts,
on a 2-core Xeon with AMX: 0.25x to 0.4x float32's speed at the default model's 16 x 4 heads x 64 x
32). At 6 x 384's 32 x 6 x 256 x 64 the same Xeon ran it 1.08x to 1.33x faster, and the whole step
1.00x to 1.06x, where an earlier Xeon with AMX (float32 peak 280 GFLOP/s against this one's 350) ran
it at 0.7x (the kernel alone). Which wins differs between CPUs and shapes, so the process measures
each training shape once (`attention_in_float32`, `bf16_attention_speedup`, some 0.1 s at the
default model). For float32, autocast is switched off around the call (it would cast q, k and v down
again). The projections around it, where the FLOPs are, stay in bfloat16.

The GELU feed-forward's backward pass on the CPU (`_GELUFeedForward`) is autograd's own, step for
step, with two fewer buffers of the hidden layer's size (tokens x d_ff):

    dW_2 = dY^T H         then H is spent, so its buffer takes      dH = dY W_2
    dA   = dH * GELU'(A)  written over dH                           dW_1 = dA^T x,  dx = dA W_1

Autograd would allocate dH and dA afresh. At 6 x 384, batch 32 x 256, each is 50 MB, past glibc's
largest mmap threshold (32 MB), so every step maps and faults in 100 MB a layer anew. Measured on a
2-core AMD EPYC Zen 4 (float32, alternated in one run, medians): 1.051x, 1.061x, 1.072x, 1.037x,
0.994x and 1.036x the step at that size (median 1.044x); at 4 x 128, where the 1.5 MB
buffers come back from the heap anyway, 0.99x, noise. So it is taken only where it was measured to
pay and is exact: on the CPU, for a hidden layer of 32 MB or more (`OWN_BACKWARD_FROM_BYTES`),
outside autocast (under bfloat16 autocast the hidden layer is half the size), with grad enabled,
not under torch.compile (which plans its own buffers), and not where the float32 products go to
oneDNN (below): there autograd's backward through oneDNN ran as fast (the own one 0.96x, Zen 5).
The backward overwrites what the forward saved, so it runs once: a second backward through the same
graph (`retain_graph=True`) raises and says to take `fast_path=off`. `bench/nanogpt.py` prints its gain (the "autograd FFN" row).

The float32 products on a CPU go through oneDNN where that is faster (`linear`). torch hands a
float32 product to MKL, whose kernels on an AMD processor are its AVX2 ones; oneDNN, also inside
torch (the library its bfloat16 products already use), runs AVX-512 where the CPU has it. On a 2-core
AMD EPYC Zen 5 a linear layer's forward and backward ran 1.26x to 1.87x faster through oneDNN at the
benchmarks' shapes (median 1.54x, `bench/onednn.py`), and the float32 training step 1.30x to 1.35x
(`bench/nanogpt.py`'s "MKL" row). Elsewhere the two may tie or MKL may win, so the process measures
once, at the first float32 product, and takes oneDNN only where it was at least
`ONEDNN_FROM_SPEEDUP` times faster (`onednn_faster`; `:device`, `:train`'s summary and JSON and
`bench/nanogpt.py` print the answer). Operands reach it contiguous or plainly transposed (`_dense`).
The numbers differ from MKL's by float32 rounding only, but a run carries that on: two processes at
threads=1, one on each kernel, gave float32 losses apart from step 3 (4.293055057 and 4.293055534),
so a run repeats exactly only with $MINITF_PRODUCTS set as well as threads=N.

Decoding with the KV cache (`core.generate`) runs this path too, with the same rule: the model's
`LayerKV` buffers, absolute positions from the cache's length, the fused kernel for the one new
query. There q, k and v come from the three projections as they are: for a single token the copy
into [W_q; W_k; W_v] would move more memory than the products read (tested: the fast path's logits
and cache equal the readable model's, every variant, prefill and token by token).

`bench/nanogpt.py` measures the step against karpathy/nanoGPT and against the readable path;
`bench/decode.py` the cached loop against the blog's naive one.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from .config import PRODUCTS_ENV
from .feedforward import SwiGLU
from .model import FeedForward, KVCache, LayerKV, MiniTransformerLM, MultiHeadSelfAttention, TransformerBlock


def listened(model: nn.Module, modules: list[nn.Module] | None = None) -> bool:
    """Whether any forward hook sits on the model (a view, a trace, an ablation): then take the readable path.

    `modules`: model.modules() listed once beforehand (walking the tree costs about a millisecond,
    some 3% of a small model's step; the tree of a built model does not change).
    """
    return any(m._forward_hooks or m._forward_pre_hooks for m in (model.modules() if modules is None else modules))


class FastPath(nn.Module):
    """forward(idx, targets) -> (logits, loss) of `model`, computed as described above.

    An nn.Module holding the model, so that DistributedDataParallel and torch.compile can wrap it
    like the model itself; its parameters are exactly the model's (state_dict keys gain "model.").
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.model_modules = list(model.modules())  # for `listened`; a plain list, not registered as submodules

    @property
    def config(self):
        return self.model.config

    @property
    def causal(self) -> bool:
        """The model's mask is on now (MiniTransformerLM.causal): what its function computes depends on it."""
        return self.model.causal

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        model = self.model
        T = idx.shape[1]
        start = cache.length if cache is not None else 0  # absolute position of the first new token
        model.check_fits(start + T)
        x = model.token_embedding(idx)
        if model.position_embedding is not None:
            x = x + model.position_embedding(torch.arange(start, start + T, device=idx.device))
        x = model.embed_dropout(x)
        for i, block in enumerate(model.blocks):
            kv = cache.layers[i] if cache is not None else None
            if block.post_norm:
                x = block.ln_1(block.add(x, attention(block.attn, x, kv)))
                if block.ffn is not None:  # ffn=off: the block is attention alone
                    x = block.ln_2(block.add(x, feed_forward(block.ffn, x)))
            else:
                x = block.add(x, attention(block.attn, block.ln_1(x), kv))
                if block.ffn is not None:
                    x = block.add(x, feed_forward(block.ffn, block.ln_2(x)))
        logits = module_linear(model.lm_head, model.ln_f(x))
        return logits, None if targets is None else model.loss(logits, targets)

    @staticmethod
    def supports(model: nn.Module, cached: bool = False) -> bool:
        """Whether this path can run `model`: it computes the model's function only from parts it knows.

        Without a cache it concatenates the q/k/v projections' weights, so they must be plain Linear
        layers. Cached decoding calls the three projections as they are, so any projection module
        will do: the int8 copy of :quantize (core.quantize.Int8Linear) decodes through here too.
        """
        if own_part(model) is not None:
            return False
        return cached or all(type(getattr(block.attn, name, None)) is nn.Linear
                             for block in model.blocks for name in ("q_proj", "k_proj", "v_proj"))


def own_part(model: nn.Module) -> str | None:
    """The first part whose forward this path would not run, as "blocks.0.attn (GatedAttention)"; None if none.

    FastPath.forward and `attention` compute the model's, the blocks' and attention's forwards again in their
    own way, so a caller's subclass of any of the three (a gate on attention, a scaled embedding), or another
    module in one's place, would be skipped: trained and sampled as a model other than the one written. Such a
    model runs its own forward instead. Every other part (norms, positions, the feed-forward, the head) is called
    as the module it is, or by exact type (`feed_forward`, `module_linear`), so any class of a caller's own there
    runs its own code on this path too.
    """
    if type(model) is not MiniTransformerLM:
        return f"the model ({type(model).__name__})"
    for i, block in enumerate(model.blocks):
        if type(block) is not TransformerBlock:
            return f"blocks.{i} ({type(block).__name__})"
        if type(block.attn) is not MultiHeadSelfAttention:
            return f"blocks.{i}.attn ({type(block.attn).__name__})"
    return None


def attention(attn: nn.Module, x: torch.Tensor, cache: LayerKV | None = None) -> torch.Tensor:
    """MultiHeadSelfAttention's forward, from one fused q/k/v product; `cache`: that layer's KV cache."""
    B, T, C = x.shape
    kv_dim = attn.n_kv_heads * attn.head_dim
    if cache is None:
        weight = torch.cat((attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight))  # (C + 2 kv_dim, C)
        bias = None
        if attn.q_proj.bias is not None:
            bias = torch.cat((attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias))
        q, k, v = linear(x, weight, bias).split((C, kv_dim, kv_dim), dim=-1)
    else:  # decoding a token or a few: copying the three matrices would cost more than the products
        q, k, v = attn.q_proj(x), attn.k_proj(x), attn.v_proj(x)
    q = q.view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2)  # (B, n_heads, T, head_dim)
    k = k.view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)  # (B, n_kv_heads, T, head_dim)
    v = v.view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if attn.rope is not None:
        q, k = attn.rope(q, k, cache.length if cache is not None else 0)
    if cache is not None:
        k, v = cache.append(k, v)  # (B, n_kv_heads, T_past + T, head_dim)
    T_k = k.shape[2]
    # Causal among the new queries; a single new query sees every cached position, so no mask at all.
    # A model without the mask (causal off) is never masked.
    causal, mask = attn.causal and T == T_k, None
    if attn.causal and T != T_k and T > 1:
        mask = attn.causal_mask[T_k - T : T_k, :T_k]  # the new queries sit at positions T_k - T .. T_k - 1
    dropout_p = attn.dropout_p if attn.training else 0.0
    dtype, in_float32 = q.dtype, attention_in_float32(q, attn.n_kv_heads)
    if in_float32:  # attention itself in float32, also under bfloat16 autocast: see the module's docstring
        q, k, v = q.float(), k.float(), v.float()
    with torch.autocast("cpu", enabled=False) if q.device.type == "cpu" else contextlib.nullcontext():
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal,
                                             enable_gqa=attn.n_kv_heads != attn.n_heads)
    out = out.to(dtype)
    return attn.resid_dropout(module_linear(attn.out_proj, out.transpose(1, 2).reshape(B, T, C)))


# The bfloat16 attention kernel replaces the float32 one under autocast only where it was measured this much
# faster (fastest of ATTENTION_ROUNDS each, after ATTENTION_WARM_ROUNDS untimed): near a tie the two steps
# differ by less than the measurement's noise, and float32 is the choice that was measured everywhere.
ATTENTION_BF16_FROM_SPEEDUP = 1.05
ATTENTION_WARM_ROUNDS, ATTENTION_ROUNDS = 2, 5
# Where one round of both takes longer than this (GPT-2 small's 16 x 12 x 1024 x 64 takes seconds on two
# cores), two timed rounds do instead of ATTENTION_ROUNDS: such a kernel's time hardly varies by noise, and a
# first step should not wait half a minute for the answer.
ATTENTION_SLOW_ROUND_S = 0.25


def attention_in_float32(q: torch.Tensor, kv_heads: int) -> bool:
    """Whether the attention kernel runs in float32 for queries `q` (B, heads, T, head_dim) on this device.

    Off the CPU, never (autocast's own choice stands). On the CPU, a float32 `q` needs nothing; a
    bfloat16 one in a training step (grad enabled, eager) runs in bfloat16 only where this CPU
    measured that kernel faster at this shape (`bf16_attention_speedup`), else in float32 (module
    docstring). Decoding and evaluation run no backward and never measure: they keep float32.
    """
    if q.device.type != "cpu":
        return False
    if (q.dtype is torch.float32 or not (torch.is_grad_enabled() and q.requires_grad)
            or torch.compiler.is_compiling()):
        return True
    B, H, T, D = q.shape
    return attention_dtype_at(B, H, kv_heads, T, D)[0] == "float32"


def attention_dtype_at(batch: int, heads: int, kv_heads: int, T: int, head_dim: int) -> tuple[str, float]:
    """("bfloat16" or "float32", bfloat16's measured speed against float32's): what a bfloat16 CPU training
    step's attention kernel runs in at this shape, and why (`bf16_attention_speedup`, measured once)."""
    speedup = bf16_attention_speedup(batch, heads, kv_heads, T, head_dim)
    return ("bfloat16" if speedup >= ATTENTION_BF16_FROM_SPEEDUP else "float32"), speedup


def flash_kernels():
    """(forward, backward): the CPU flash-attention ops that F.scaled_dot_product_attention runs for a
    training step on the CPU (tests/test_fastpath.py checks that it still does)."""
    return (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu,
            torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward)


@functools.lru_cache(maxsize=None)
def bf16_attention_speedup(batch: int, heads: int, kv_heads: int, T: int, head_dim: int) -> float:
    """How much faster a causal attention's forward and backward runs in bfloat16 than in float32, on this CPU.

    Measured once per process and shape, the way a training step takes either: bfloat16 q, k, v
    straight into the kernel, against q, k, v cast to float32, the kernel, its output cast back (and
    the casts' backward). Fastest of ATTENTION_ROUNDS each, alternated, after ATTENTION_WARM_ROUNDS:
    interference only ever adds time. Some 0.1 s at the default model's shape, about 1 s at 6 x 384
    with block 256; where a round is slower than ATTENTION_SLOW_ROUND_S, two timed rounds only.

    The kernel alone, forward and backward, in ms, on two 2-core Xeons with AMX (with the casts, the
    second Xeon measured 0.25x to 0.38x at 16 x 4 x 64 x 32 and 1.17x to 1.33x at 32 x 6 x 256 x 64,
    three processes each):

        batch x heads x T x head_dim    12 x 4 x 64 x 32    16 x 4 x 256 x 32    32 x 6 x 256 x 64    8 x 6 x 512 x 64
        float32 (first Xeon)            1.0                                      70
        bfloat16 (first Xeon)           5.3                                      98
        float32 (second Xeon)           1.1                 10.9                 67                   52
        bfloat16 (second Xeon)          4.3                 16.3                 61                   41

    torch's CPU flash-attention backward in bfloat16 loses wherever the sequence is short or the heads
    narrow, and on the second Xeon wins at long sequences with 64-wide heads: it differs between CPUs
    of one kind, so the process asks its own CPU. Any error answers 0 (float32).

    The kernels are called as ops (`flash_kernels`), outside autograd: the same forward and backward
    that F.scaled_dot_product_attention and its backward run on the CPU, without a graph. Through
    autograd's `.backward()` the measurement had raised a first `:train`'s peak resident memory by 35
    to 40 MB for good (bench/memory.py on the second Xeon: 376 MB against 344 MB this way, the issue's
    ceiling 350); the answers are the same (three processes each: 0.30-0.31x at 16 x 4 x 64 x 32 against
    0.31-0.38x, 1.17-1.28x at 32 x 6 x 256 x 64 against 1.21-1.28x).
    """
    try:
        numbers = torch.Generator().manual_seed(0)  # its own: a run's random stream must not depend on this
        q = torch.randn(batch, heads, T, head_dim, generator=numbers).bfloat16()
        k, v = (torch.randn(batch, kv_heads, T, head_dim, generator=numbers).bfloat16() for _ in range(2))
        dout = torch.randn(batch, heads, T, head_dim, generator=numbers).bfloat16()
        forward, backward = flash_kernels()

        def in_bfloat16():
            out, logsumexp = forward(q, k, v, 0.0, True)
            backward(dout, q, k, v, out, logsumexp, 0.0, True)

        def in_float32():  # the casts a training step adds around the kernel, both ways, included
            q32, k32, v32 = q.float(), k.float(), v.float()
            out, logsumexp = forward(q32, k32, v32, 0.0, True)
            out.bfloat16()
            for grad in backward(dout.float(), q32, k32, v32, out, logsumexp, 0.0, True):
                grad.bfloat16()

        with torch.autocast("cpu", enabled=False), torch.no_grad():
            for _ in range(ATTENTION_WARM_ROUNDS):
                start = time.perf_counter()
                in_float32(), in_bfloat16()
            slow = time.perf_counter() - start > ATTENTION_SLOW_ROUND_S
            times: dict = {in_float32: [], in_bfloat16: []}
            for _ in range(2 if slow else ATTENTION_ROUNDS):
                for run, seen in times.items():
                    start = time.perf_counter()
                    run()
                    seen.append(time.perf_counter() - start)
        return min(times[in_float32]) / min(times[in_bfloat16])
    except Exception:  # a torch whose CPU kernel lacks bfloat16, or any other trouble: keep float32
        return 0.0


# From this size of the hidden layer (tokens x d_ff numbers) on, glibc hands out fresh mmapped pages for
# each buffer (32 MB: its largest mmap threshold on 64-bit), so saving two buffers saves page faults.
# Below it, buffers come back from the heap and autograd's own backward is as fast (measured at 4 x 128:
# 0.99x, noise), so the step stays autograd's.
OWN_BACKWARD_FROM_BYTES = 32 * 2**20


def feed_forward(ffn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The block's feed-forward part: the module itself, or a GELU FFN's function with the backward above."""
    if not _own_backward_pays(ffn, x):
        if type(ffn) is FeedForward and onednn_pays(x, ffn.fc_in.weight):  # FeedForward.forward, through `linear`
            return ffn.dropout(module_linear(ffn.fc_out, ffn.act(module_linear(ffn.fc_in, x))))
        if type(ffn) is SwiGLU and onednn_pays(x, ffn.gate_proj.weight):  # SwiGLU.forward, through `linear`
            gate = ffn.act(module_linear(ffn.gate_proj, x))
            return ffn.dropout(module_linear(ffn.down_proj, gate * module_linear(ffn.up_proj, x)))
        return ffn(x)
    shape = x.shape
    y = _GELUFeedForward.apply(x.reshape(-1, shape[-1]), ffn.fc_in.weight, ffn.fc_in.bias, ffn.fc_out.weight,
                               ffn.fc_out.bias, ffn.act.approximate)
    return ffn.dropout(y.view(*shape[:-1], y.shape[-1]))


def _own_backward_pays(ffn: nn.Module, x: torch.Tensor) -> bool:
    """Where _GELUFeedForward was measured to pay and computes what the module does (module docstring)."""
    return (type(ffn) is FeedForward and type(ffn.act) is nn.GELU  # exact or tanh: its `approximate` says which
            and type(ffn.fc_in) is nn.Linear and type(ffn.fc_out) is nn.Linear
            and x.device.type == "cpu" and x.dtype == ffn.fc_in.weight.dtype
            and x.numel() // x.shape[-1] * ffn.fc_in.out_features * x.element_size() >= OWN_BACKWARD_FROM_BYTES
            and torch.is_grad_enabled() and not torch.is_autocast_enabled("cpu")
            and not torch.compiler.is_compiling()
            and not onednn_pays(x, ffn.fc_in.weight))  # there autograd's backward through oneDNN is as fast: 0.96x


class _GELUFeedForward(torch.autograd.Function):
    """y = GELU(x W_1^T + b_1) W_2^T + b_2 for x of (tokens, d), with the buffer-saving backward above."""

    @staticmethod
    def forward(ctx, x, w1, b1, w2, b2, approximate: str):
        a = F.linear(x, w1, b1)  # (tokens, d_ff)
        h = F.gelu(a, approximate=approximate)
        ctx.save_for_backward(x, w1, w2, a, h)
        ctx.approximate, ctx.spent = approximate, False
        return F.linear(h, w2, b2)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        if ctx.spent:
            raise RuntimeError("the fast path's feed-forward backward reuses its saved activations, so it runs once "
                               "per forward; for retain_graph=True train with fast_path=off")
        ctx.spent = True
        x, w1, w2, a, h = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dw2 = dy.t() @ h if needs[3] else None
        db2 = dy.sum(0) if needs[4] else None
        dh = torch.mm(dy, w2, out=h)  # H is spent: its buffer takes dL/dH
        da = torch.ops.aten.gelu_backward.grad_input(dh, a, approximate=ctx.approximate, grad_input=dh)  # over dH
        dx = da @ w1 if needs[0] else None
        dw1 = da.t() @ x if needs[1] else None
        db1 = da.sum(0) if needs[2] else None
        return dx, dw1, db1, dw2, db2, None


# oneDNN's float32 products replace MKL's only where they were measured this much faster (`onednn_pays`):
# at a tie the choice would follow the noise of one measurement.
ONEDNN_FROM_SPEEDUP = 1.15
ONEDNN_WARM_ROUNDS, ONEDNN_ROUNDS, ONEDNN_ATTEMPTS = 5, 15, 3  # onednn_faster: untimed rounds, timed, attempts
ONEDNN_PASSES = 2  # attempts that must show the speedup: one was a coin toss on a busy machine
# $MINITF_PRODUCTS (PRODUCTS_ENV): onednn (mkldnn, torch's name for it), or torch (mkl: the same, MKL being torch's
# own), decides without measuring; unset or any other value: measured (onednn_faster)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias), through oneDNN where that is faster (module docstring), with autograd."""
    if onednn_pays(x, weight):
        return _OneDNNLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


def module_linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """module(x) for a plain nn.Linear, through `linear`; any other module (int8, LoRA...) called as it is."""
    if type(module) is nn.Linear and not module._forward_hooks and not module._forward_pre_hooks:
        return linear(x, module.weight, module.bias)
    return module(x)


def product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x weight^T + bias, no autograd: oneDNN's kernel where it pays, else torch's (MKL's). Any strides."""
    if onednn_pays(x, weight):
        return _onednn_linear(_dense(x), _dense(weight), bias)
    return F.linear(x, weight, bias)


def _dense(t: torch.Tensor) -> torch.Tensor:
    """t itself if contiguous or the transpose of a contiguous matrix, else a contiguous copy. oneDNN takes
    other strides too, but through a reference kernel: a (768, 128) matrix whose rows lie 384 apart, read
    transposed, took 175 ms against 0.24 ms for its copy (Zen 5)."""
    if t.is_contiguous() or (t.dim() == 2 and t.t().is_contiguous()):
        return t
    return t.contiguous()


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear inside torch (the op torch.compile's CPU backend fuses into): x weight^T + bias."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def choose_products(model: nn.Module) -> None:
    """Make the fast path's one-time choice of float32 product kernels for `model` now (`onednn_faster`, a measurement
    of some 100 ms on a CPU, else made at the first product), where a caller times what follows: the first token
    of :gen read 120 ms with the KV cache against 2 ms without it, the cache looking 50 times slower than it is."""
    weight = next((p for p in model.parameters() if p.dim() == 2), None)
    if weight is not None:
        onednn_pays(weight[:1], weight)


# Whether a product went through the choice of kernel since `float32_products_chosen(reset=True)`: a training run
# records the kernel its float32 products ran on only where some did (a bfloat16 step's products are autocast's, an
# evaluation's are float32), since the two kernels round differently and so tell two processes' runs apart.
_chosen = [False]


def onednn_pays(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether this product goes to oneDNN: float32 on the CPU, outside autocast and torch.compile, and this
    CPU measured faster with oneDNN (`onednn_faster`). A product that the choice decides is counted
    (`float32_products_chosen`)."""
    if not (x.device.type == "cpu" and x.dtype is torch.float32 and weight.dtype is torch.float32
            and not torch.is_autocast_enabled("cpu") and not torch.compiler.is_compiling()):
        return False
    _chosen[0] = True
    return onednn_faster()


def float32_products_chosen(reset: bool = False) -> bool:
    """Whether a float32 CPU product took the kernel `onednn_faster` chose since the last reset; `reset`: start
    counting again (answers False)."""
    if reset:
        _chosen[0] = False
    return _chosen[0]


@contextlib.contextmanager
def products_uncounted():
    """Products inside are not counted by `float32_products_chosen`: a view's forwards between a run's steps (:train
    watch=), whose products are not the run's, marked a bfloat16 run's result as one of float32 products."""
    before = _chosen[0]
    try:
        yield
    finally:
        _chosen[0] = before


def products_kernel() -> str:
    """"oneDNN", or torch's own library (`torch_products`: "MKL" on x86): the kernel the fast path's float32 CPU
    products run on in this process (`onednn_faster`, or $MINITF_PRODUCTS), as :device and :train name it."""
    return "oneDNN" if onednn_faster() else torch_products()


# torch's build settings' BLAS_INFO (its cmake's names) and the library each names; "generic" (a libblas of any make)
# and names not listed here name none
BLAS_NAMES = {"open": "OpenBLAS", "openblas": "OpenBLAS", "accelerate": "Accelerate", "veclib": "vecLib",
              "blis": "BLIS", "flexi": "FlexiBLAS", "atlas": "ATLAS", "eigen": "Eigen", "nvpl": "NVPL",
              "apl": "Arm Performance Libraries", "armpl": "Arm Performance Libraries", "ssl2": "Fujitsu SSL2"}
TORCH_OWN = "torch's own"  # torch_products where the build names no library minitf knows


def torch_products() -> str:
    """The library torch's own float32 CPU products (F.linear, matmul) run on: "MKL" where this torch has MKL (the x86
    wheels), else the BLAS its build settings name ("OpenBLAS" in the ARM Linux wheels, "Accelerate" in the macOS
    ones), else TORCH_OWN. Every float32 product used to be credited to MKL, on a Mac too, which has none."""
    try:
        if torch.backends.mkl.is_available():
            return "MKL"
        settings = torch.__config__.show()
    except Exception:  # a torch that cannot say: claim no library
        return TORCH_OWN
    match = re.search(r"BLAS_INFO=([\w.+-]+)", settings)
    return BLAS_NAMES.get(match.group(1).lower(), TORCH_OWN) if match else TORCH_OWN


def products_choice() -> str | None:
    """"onednn" or "torch" where $MINITF_PRODUCTS decides the float32 products, else None: measured."""
    value = os.environ.get(PRODUCTS_ENV, "").strip().lower()
    return "onednn" if value in ("onednn", "mkldnn") else "torch" if value in ("torch", "mkl") else None


def products_fixed() -> bool:
    """Whether $MINITF_PRODUCTS decides the float32 products, not a measurement."""
    return products_choice() is not None


def onednn_faster() -> bool:
    """Whether the fast path's float32 products go to oneDNN: $MINITF_PRODUCTS as it is now (products_choice), else
    `_onednn_faster_given`'s measurement, made once. The variable was read inside the cached answer: changed in a
    process (a notebook), :device said "set by $MINITF_PRODUCTS" beside the kernel of its old value, which
    training kept using. `cache_clear` and `__wrapped__` (the measurement made afresh) are the cached one's."""
    return _onednn_faster_given(products_choice())


@functools.lru_cache(maxsize=None)
def _onednn_faster_given(chosen: str | None) -> bool:
    """Whether oneDNN's float32 linear beats torch's own on this CPU by ONEDNN_FROM_SPEEDUP, measured once.

    A forward and backward's three products at the default model's feed-forward shape (768 tokens,
    128 -> 512), each way alternated: 5 rounds to warm up, then attempts of the fastest of 15 of each,
    about 60 ms an attempt; a yes takes two attempts that show the speedup (about 120 ms), a no stops
    once the attempts left cannot make two (two or three attempts). The fastest, not the median:
    interference only ever adds time. (The Zen 5 figures below were measured when one attempt of three
    sufficed; where oneDNN is 1.3x to 1.8x faster, two of three show it as surely.)
    Why so many: a REPL's first `:device` after seconds idle at the prompt ran both kernels up to
    twice as slowly for its first rounds, and 7 rounds' medians picked MKL in 2 of 3 fresh sessions
    on a Zen 5 where oneDNN is 1.8x faster (a one-shot `minitf device` never did); with warm-up and
    the fastest of 15, 1 of 5, in a session where both kernels ran slowly for all 20 rounds (the
    other core busy for a moment); with the further attempts, 0 of 6. A torch without oneDNN, or any
    error, answers no.

    Yes takes ONEDNN_PASSES attempts that show the speedup, not one: on a Zen 4 where oneDNN is 0.91x to 1.03x
    MKL's, with four other programs busy on its two cores, single attempts read 0.2x to 8x, and one of three
    sufficed for a yes in 6 of 8 fresh processes; `:device` then named another kernel each run.
    $MINITF_PRODUCTS=onednn or =torch (`chosen`) decides without measuring (a machine whose load tips it either way).
    """
    if chosen == "torch":
        return False
    forced = chosen == "onednn"
    try:
        numbers = torch.Generator().manual_seed(0)  # its own: a run's random stream must not depend on this
        x, w, dy = (torch.randn(*shape, generator=numbers) for shape in ((768, 128), (512, 128), (768, 512)))

        def with_torch():
            return F.linear(x, w), dy @ w, dy.t() @ x

        def with_onednn():
            return _onednn_linear(x, w, None), _onednn_linear(dy, w.t(), None), _onednn_linear(dy.t(), x.t(), None)

        if not all(torch.allclose(a, b, atol=1e-3) for a, b in zip(with_torch(), with_onednn())):
            return False
        if forced:  # asked for and checked: its products run and agree with torch's (else every linear failed)
            return True
        for _ in range(ONEDNN_WARM_ROUNDS):
            with_torch(), with_onednn()
        passes = 0
        for attempt in range(ONEDNN_ATTEMPTS):
            if passes + ONEDNN_ATTEMPTS - attempt < ONEDNN_PASSES:  # the attempts left cannot make a yes
                break
            times: dict = {with_torch: [], with_onednn: []}
            for _ in range(ONEDNN_ROUNDS):
                for run, seen in times.items():
                    start = time.perf_counter()
                    run()
                    seen.append(time.perf_counter() - start)
            passes += min(times[with_torch]) >= ONEDNN_FROM_SPEEDUP * min(times[with_onednn])
            if passes >= ONEDNN_PASSES:
                return True
        return False
    except Exception:  # no mkldnn ops in this build, or a CPU oneDNN cannot serve: stay with torch's own
        return False


# the cache's handles on the name callers know: a fresh measurement (tests) clears it or asks the uncached one
onednn_faster.cache_clear = _onednn_faster_given.cache_clear
onednn_faster.__wrapped__ = lambda: _onednn_faster_given.__wrapped__(products_choice())


class _OneDNNLinear(torch.autograd.Function):
    """y = x W^T + b with oneDNN's kernels forward and backward (`product`); x of any leading shape."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return product(x, weight, bias)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dy = dy.contiguous()  # an expanded gradient (from y.sum()) has zero strides, which oneDNN does not take
        dy2 = dy.view(-1, dy.shape[-1])
        dx = product(dy, weight.t()) if needs[0] else None  # dY W
        dw = product(dy2.t(), x.reshape(-1, x.shape[-1]).t()) if needs[1] else None  # dY^T x
        db = dy2.sum(0) if ctx.has_bias and needs[2] else None
        return dx, dw, db
