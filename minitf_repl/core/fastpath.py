"""The training fast path: the same model and the same parameters, computed with fewer kernels.

`MiniTransformerLM.forward` is written to be read: q, k and v come from three projections, every
step of the attention formula passes through a `Probe`, and the explicit formula spells out the
scores, the mask and the softmax. A training step needs none of that, so `FastPath(model)`
computes the same function the way a production model would:

    q, k, v = split(x [W_q; W_k; W_v]^T + [b_q; b_k; b_v])     one matrix product instead of three
    out     = scaled_dot_product_attention(q, k, v, causal)    one fused kernel, no T x T tensors kept
    (no Probe calls, no module per step of the formula)

The concatenated matrix [W_q; W_k; W_v] is built from the model's own parameters on every forward
(a copy of 3 d^2 numbers, nothing next to the product it saves), so autograd hands each of W_q,
W_k, W_v its own slice of the gradient: the optimizer, checkpoints, views and `:shapes` keep
seeing the readable model's parameters, and nothing has to be kept in sync. Norms, positions and
the feed-forward part (FFN, SwiGLU, experts) are the model's own modules, called as they are.

`tests/test_fastpath.py` checks that the loss and every gradient equal the readable path's within
1e-5 for every variant. The trainer takes this path unless `fast_path=off` or someone is listening:
a view, a shape trace or an ablation works through forward hooks on the model's modules, which
this path does not call, so any hook on the model sends the step down the readable path instead
(`listened`). Dropout draws different masks here (the fused kernel draws its own), so with dropout
on the two paths are equal in distribution, not number for number.

On a CPU the attention kernel runs in float32 even when the step is autocast to bfloat16: torch's
CPU flash-attention backward is several times slower in bfloat16 than in float32 (measured fwd+bwd,
2-core Xeon with AMX: 5.3 ms against 1.0 ms at batch 12 x 4 heads x 64 x 32; 98 against 70 ms at
32 x 6 x 256 x 64), and autocast would cast q, k and v down again, so it is switched off around the
call. The projections around it, where the FLOPs are, stay in bfloat16.

`bench/nanogpt.py` measures the step against karpathy/nanoGPT and against the readable path.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F


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

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        model = self.model
        T = idx.shape[1]
        model.check_fits(T)
        x = model.token_embedding(idx)
        if model.position_embedding is not None:
            x = x + model.position_embedding(torch.arange(T, device=idx.device))
        x = model.embed_dropout(x)
        for block in model.blocks:
            if block.post_norm:
                x = block.ln_1(x + attention(block.attn, x))
                x = block.ln_2(x + block.ffn(x))
            else:
                x = x + attention(block.attn, block.ln_1(x))
                x = x + block.ffn(block.ln_2(x))
        logits = model.lm_head(model.ln_f(x))
        return logits, None if targets is None else model.loss(logits, targets)


def attention(attn: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """MultiHeadSelfAttention's forward without a cache, from one fused q/k/v product."""
    B, T, C = x.shape
    kv_dim = attn.n_kv_heads * attn.head_dim
    weight = torch.cat((attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight))  # (C + 2 kv_dim, C)
    bias = None
    if attn.q_proj.bias is not None:
        bias = torch.cat((attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias))
    q, k, v = F.linear(x, weight, bias).split((C, kv_dim, kv_dim), dim=-1)
    q = q.view(B, T, attn.n_heads, attn.head_dim).transpose(1, 2)  # (B, n_heads, T, head_dim)
    k = k.view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)  # (B, n_kv_heads, T, head_dim)
    v = v.view(B, T, attn.n_kv_heads, attn.head_dim).transpose(1, 2)
    if attn.q_norm is not None:
        q, k = attn.q_norm(q), attn.k_norm(k)
    if attn.rope is not None:
        q, k = attn.rope(q, k, 0)
    dropout_p = attn.dropout_p if attn.training else 0.0
    dtype, on_cpu = q.dtype, q.device.type == "cpu"
    if on_cpu:  # attention itself in float32, also under bfloat16 autocast: see the module's docstring
        q, k, v = q.float(), k.float(), v.float()
    with torch.autocast("cpu", enabled=False) if on_cpu else contextlib.nullcontext():
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True,
                                             enable_gqa=attn.n_kv_heads != attn.n_heads)
    out = out.to(dtype)
    return attn.resid_dropout(attn.out_proj(out.transpose(1, 2).reshape(B, T, C)))
