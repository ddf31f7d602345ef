"""A minimal decoder-only Transformer, written to be read top to bottom like the math.

    h_0  = W_E[idx] + P                              token embedding plus position
    h'_l = h_{l-1} + Attention(LN(h_{l-1}))          pre-LN residual blocks ...
    h_l  = h'_l    + FFN(LN(h'_l))                   (a block's steps write x for h_{l-1} and x' for h'_l)
    z_t  = LN(h_L) W_E^T                             logits, head tied to the embedding

    Attention(x) = Concat(head_1, ..., head_{n_h}) W^O,  head_i = softmax(Q K^T / sqrt(d_k) + M) V

That is the seed model, and ModelConfig's defaults. Each part later models changed is one config
field, read in one place here; the variants themselves are small modules of their own:
    pos_encoding    learned | sinusoidal | rope | none       core.positions (RotaryEmbedding inside attention)
    norm            layernorm | rmsnorm                      core.norms (make_norm)
    norm_placement  pre: x + f(LN(x)) | post: LN(x + f(x))   TransformerBlock
    residual        on: x + f(.) | off: f(.) replaces x        TransformerBlock.add
    ffn             on | off: a block of attention alone       TransformerBlock
    causal          on: M hides j > i | off: M = 0             MultiHeadSelfAttention
    qk_norm         normalise q and k per head                MultiHeadSelfAttention
    activation      gelu | relu | gelu_tanh | relu2 | swiglu core.feedforward
    n_kv_heads      MHA | GQA | MQA: K, V heads shared        MultiHeadSelfAttention
    n_experts       a mixture of experts per block           core.experts
    tie_embeddings, bias

Small pieces come first (KV cache, attention, feed-forward, block), the whole model
last. `Probe` modules are identities placed at every step of the formula, so a forward hook (the
shape trace, a heatmap) can see q, k, v, the scores S, the masked scores S + M, the softmax and the
weighted values without a print in `forward` (no probe holds M alone: `causal_mask` is its pattern).

Each part also states what the views need to know about it, below its forward: `steps()` (the
formula and the symbols of each of its steps, for the shape trace), `symbols()` (what B, T, d, h,
d_k, ... stand for) and `activation_floats()` (what it keeps for the backward pass, for the cost
ledger). The views ask the parts instead of deciding by a module's name or kind.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .errors import ConfigError, DataError, DeviceError
from .experts import MixtureOfExperts, MoEStats
from .feedforward import Neurons, SwiGLU, activation_formula, below_zero, kept_hidden_layers, make_activation
from .interrupts import held
from .norms import NormPart, make_norm, stated
from .positions import RotaryEmbedding, SinusoidalPositions
from .probe import Probe, Step
from .variants import feed_forward_kind, position_kind
from .words import count

__all__ = [
    "FeedForward", "KVCache", "LayerKV", "MiniTransformerLM", "ModelConfig", "MultiHeadSelfAttention", "Probe",
    "SinusoidalPositions", "TransformerBlock", "feed_forward", "require_model",
]


def require_model(model, user: str) -> "MiniTransformerLM":
    """The MiniTransformerLM `model` is, or wraps (torch.compile's module holds it as _orig_mod), or one line refusing
    it: `user` (the function's name) reads parts only that model has (its config, embedding and blocks), which a plain
    nn.Module lacks. The model unwrapped is what a checkpoint saves: the wrapper's names all start '_orig_mod.'."""
    plain = getattr(model, "_orig_mod", model)
    if not isinstance(plain, MiniTransformerLM):
        raise TypeError(f"{user} needs a MiniTransformerLM (it reads parts only that model has: its config, "
                        f"embedding and blocks), got {type(model).__name__}; build one: "
                        "MiniTransformerLM(ModelConfig(...))")
    return plain


class LayerKV:
    """The keys and values one attention layer has already computed (the KV cache of one layer).

    The buffers are allocated once for the whole context window and filled in place, so a step
    costs one write of the new position instead of a copy of everything cached so far.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity  # max_seq_len: positions are absolute, so the cache never holds more
        self.length = 0
        self.k: torch.Tensor | None = None  # (B, n_kv_heads, capacity, head_dim): GQA/MQA store fewer heads
        self.v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, H, T, D = k.shape
        if self.k is None:
            self.k = k.new_empty(B, H, self.capacity, D)
            self.v = v.new_empty(B, H, self.capacity, D)
        end = self.length + T
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, n_kv_heads, T_past + T, head_dim)


class KVCache:
    """Per-layer keys and values, so that decoding one more token costs one position, not the prefix.

    Positions are absolute (added at the input, or RoPE's rotation of the cached keys), so the cache
    is valid only while the text fits in max_seq_len; `core.generate` starts a fresh cache when the window slides.
    """

    def __init__(self, n_layers: int, capacity: int):
        self.layers = [LayerKV(capacity) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length


class MultiHeadSelfAttention(nn.Module):
    """Causal self-attention with n_heads query heads and n_kv_heads key/value heads.

    With causal off, M is 0: every position reads the whole window, the token it is to predict included.

    n_kv_heads = n_heads is the seed's multi-head attention. With fewer (GQA; MQA at 1), each key/value
    head serves n_heads / n_kv_heads consecutive query heads: K and V are projected to fewer heads,
    cached that way, and repeated to n_heads only for the scores. Options inside: qk_norm normalises
    each head's q and k, rope rotates them by position.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.n_kv_heads = config.kv_heads
        self.head_dim = config.head_dim
        self.use_sdpa = config.attention == "sdpa"
        self.dropout_p = config.dropout
        self.causal = config.causal
        kv_dim = self.n_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d, d, bias=config.bias)
        self.k_proj = nn.Linear(d, kv_dim, bias=config.bias)
        self.v_proj = nn.Linear(d, kv_dim, bias=config.bias)
        self.out_proj = nn.Linear(d, d, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        # M: position i may look at positions j <= i only.
        mask = torch.tril(torch.ones(config.max_seq_len, config.max_seq_len, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)
        self.hook_q = Probe()
        self.hook_k = Probe()
        self.hook_v = Probe()
        # The variants' modules exist only when switched on: the seed's module tree stays the seed's.
        self.q_norm = make_norm(config, self.head_dim) if config.qk_norm else None  # over each head's features
        self.k_norm = make_norm(config, self.head_dim) if config.qk_norm else None
        rotary = position_kind(config).rotary
        self.rope = RotaryEmbedding(self.head_dim, config.max_seq_len, config.rope_base) if rotary else None
        if self.rope is not None:
            self.hook_q_rot = Probe()  # q rotated by its position
            self.hook_k_rot = Probe()
        if self.n_kv_heads != self.n_heads:
            self.hook_k_rep = Probe()  # K repeated to n_heads (what the scores see)
            self.hook_v_rep = Probe()
        self.hook_scores = Probe()  # S = QK^T / sqrt(d_k)
        self.hook_masked_scores = Probe()  # S + M
        self.hook_weights = Probe()  # A = softmax(S + M), the attention pattern
        self.hook_weighted = Probe()  # O = AV
        self.hook_merged = Probe()  # Concat(heads)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, C // self.head_dim, self.head_dim).transpose(1, 2)  # (B, heads, T, head_dim)

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q = self.hook_q(self.split_heads(self.q_proj(x)))  # (B, n_heads, T, head_dim)
        k = self.hook_k(self.split_heads(self.k_proj(x)))  # (B, n_kv_heads, T, head_dim)
        v = self.hook_v(self.split_heads(self.v_proj(x)))  # (B, n_kv_heads, T, head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)  # each head's vectors normalised: q.k stays bounded
        if self.rope is not None:
            start = cache.length if cache is not None else 0  # absolute position of the first new token
            q, k = self.rope(q, k, start)
            q, k = self.hook_q_rot(q), self.hook_k_rot(k)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, n_kv_heads, T_past + T, head_dim): the cache holds the shared heads
        T_k = k.shape[2]
        # With a cache the T new queries sit at absolute positions T_k - T .. T_k - 1. Not causal: no mask.
        mask = self.causal_mask[T_k - T : T_k, :T_k] if self.causal else None  # (T, T_k)
        grouped = self.n_kv_heads != self.n_heads

        if self.use_sdpa:
            # One fused kernel computing exactly the lines of the else-branch (enable_gqa: it shares
            # each key/value head among its query heads itself, without the copies).
            dropout_p = self.dropout_p if self.training else 0.0
            if T == T_k:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=self.causal,
                                                     enable_gqa=grouped)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, enable_gqa=grouped)
        else:
            if grouped:
                group = self.n_heads // self.n_kv_heads  # query heads per key/value head
                k = self.hook_k_rep(k.repeat_interleave(group, dim=1))  # (B, n_heads, T_k, head_dim)
                v = self.hook_v_rep(v.repeat_interleave(group, dim=1))
            scores = self.hook_scores(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim))  # (B, n_heads, T, T_k)
            if mask is not None:
                scores = scores.masked_fill(~mask, float("-inf"))
            scores = self.hook_masked_scores(scores)
            weights = self.hook_weights(F.softmax(scores, dim=-1))  # each row sums to 1
            weights = self.attn_dropout(weights)
            out = weights @ v  # (B, n_heads, T, head_dim)
        out = self.hook_weighted(out)
        merged = self.hook_merged(out.transpose(1, 2).contiguous().view(B, T, C))  # (B, T, d_model)
        return self.resid_dropout(self.out_proj(merged))

    def set_length(self, max_seq_len: int) -> None:
        """A window of max_seq_len positions: M (and rope's angles) computed as far; no weight changes."""
        T = max_seq_len
        self.causal_mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device=self.causal_mask.device))
        if self.rope is not None:
            self.rope.set_length(T)

    # --- what the views need to know ------------------------------------------------------------------
    @property
    def grouped(self) -> bool:
        """Fewer key/value heads than query heads (GQA, MQA)."""
        return self.n_kv_heads != self.n_heads

    def symbols(self) -> dict[str, tuple[int, str | None]]:
        # n_h, not h: h is the residual stream in every view (the legend said "h=4 heads" above "h the stream")
        out = {"n_h": (self.n_heads, "heads"), "d_k": (self.head_dim, "d/n_h")}
        if self.grouped:
            out["n_kv"] = (self.n_kv_heads, "key/value heads")
            out["n_kv·d_k"] = (self.n_kv_heads * self.head_dim, None)  # the width of K and V
        return out

    def steps(self) -> dict[str, Step]:
        model, heads, scores = ("B", "T", "d"), ("B", "n_h", "T", "d_k"), ("B", "n_h", "T", "T")
        kv_heads = ("B", "n_kv", "T", "d_k") if self.grouped else heads
        # With bias=on each projection adds its b (the trace wrote Q = HW^Q for a q_proj that learns one)
        b = {name: "" if getattr(self, f"{name}_proj").bias is None else f" + b^{name.upper()}" for name in "qkv"}
        b_out = "" if self.out_proj.bias is None else " + b^O"
        mask = "M = -inf above the diagonal" if self.causal else "M = 0: causal off, nothing masked"
        steps = {
            "q_proj": Step(f"Q = HW^Q{b['q']}", model),
            "k_proj": Step(f"K = HW^K{b['k']}", model),
            "v_proj": Step(f"V = HW^V{b['v']}", model),
            "hook_q": Step("split heads: (B, T, d) -> (B, n_h, T, d_k)", heads),
            "hook_k": Step("split heads: (B, T, d) -> (B, n_h, T, d_k)", heads),
            "hook_v": Step("split heads: (B, T, d) -> (B, n_h, T, d_k)", heads),
            "hook_scores": Step("S = QK^T / sqrt(d_k)", scores),
            "hook_masked_scores": Step(f"S + M ({mask})", scores),
            "hook_weights": Step("A = softmax(S + M)", scores),
            "attn_dropout": Step("dropout(A)", scores, idle=True),
            # The fused kernel computes S, M and A inside and keeps none of them: no step of theirs shows, so this
            # one says what it computed
            "hook_weighted": Step(f"O = softmax(QK^T / sqrt(d_k) + M)V ({mask}), one fused kernel (attention=sdpa: "
                                  "S and A are never stored)" if self.use_sdpa else "O = AV", heads),
            "hook_merged": Step("Concat(heads): (B, n_h, T, d_k) -> (B, T, d)", model),
            "out_proj": Step(f"Concat(heads) W^O{b_out}", model),
            "resid_dropout": Step("dropout", model, idle=True),
        }
        if self.grouped:  # K and V have n_kv heads of their own, repeated to n_h for the scores
            h, kv, group = self.n_heads, self.n_kv_heads, self.n_heads // self.n_kv_heads
            for name in ("k", "v"):
                big = name.upper()
                steps[f"{name}_proj"] = Step(f"{big} = HW^{big}{b[name]} (n_kv = {kv} of n_h = {h} heads: "
                                             "d -> n_kv·d_k)",
                                             ("B", "T", "n_kv·d_k"), model)
                steps[f"hook_{name}"] = Step("split heads: (B, T, n_kv·d_k) -> (B, n_kv, T, d_k)", kv_heads)
                steps[f"hook_{name}_rep"] = Step(f"{big}: each of the n_kv heads serves {group} query heads: "
                                                 "(B, n_kv, T, d_k) -> (B, n_h, T, d_k)", heads)
        if self.q_norm is not None:
            steps["q_norm"] = Step(stated(self.q_norm, self.head_dim).formula("q", " per head"), heads)
            steps["k_norm"] = Step(stated(self.k_norm, self.head_dim).formula("k", " per head"), kv_heads)
        if self.rope is not None:
            # the step hands on q and k; its shape column is q's, and grouped k has n_kv heads of its own
            k_shape = f" (q shown; k is (B, n_kv, T, d_k), n_kv = {self.n_kv_heads})" if self.grouped else ""
            steps["rope"] = Step(f"RoPE: rotate q, k by position (base {self.rope.base:g}){k_shape}", heads)
            steps["hook_q_rot"] = Step("q rotated: pair c turned by pos * base^(-2c/d_k)", heads)
            steps["hook_k_rot"] = Step("k rotated: pair c turned by pos * base^(-2c/d_k)", kv_heads)
        return steps

    def activation_floats(self, seq_len: int, dropout: bool) -> int:
        """Floats one position keeps for the backward pass (measured in tests/test_ledger.py and test_variants.py).

        q, k and v (their widths as built) for QK^T and AV; the pattern A, n_h * T (H below), kept by softmax
        and AV on the explicit path (the fused kernel keeps only its n_h log-sum-exps, unless dropout is on,
        where torch's CPU kernel falls back to the math path and keeps A as well); the merged heads,
        read by out_proj; with qk_norm the normalised q and k; on the explicit path under GQA (and on
        the fused one with dropout), K and V repeated to n_heads in place of the shared ones; with
        dropout, the dropped pattern and its noise (torch's CPU dropout keeps a float noise tensor).
        RoPE's rotated q and k replace the unrotated ones (a rotation's gradient needs only cos and sin).

        The fused kernel (without dropout) keeps its output O for its backward, laid out as its q is. A q
        straight from the projection is a (B, T, n_h, d_k) tensor seen as (B, n_h, T, d_k), so O's merge is
        a view of O itself; a q that RoPE or qk_norm wrote anew is (B, n_h, T, d_k) in memory, and so is O,
        which the merge then copies: O and Concat(heads) are kept apart (measured: 8% more than counted
        at d=32, T=40 for rope or qk_norm with attention=sdpa).
        """
        H, T, d = self.n_heads, seq_len, self.out_proj.in_features
        qkv = self.q_proj.out_features + self.k_proj.out_features + self.v_proj.out_features
        floats = qkv + (H * T if not self.use_sdpa or dropout else H) + d
        if self.use_sdpa and not dropout and (self.rope is not None or self.q_norm is not None):
            floats += d  # the kernel's own O beside the merged copy the out projection reads
        if self.q_norm is not None:  # each head's q and k, normalised over head_dim
            floats += (H * stated(self.q_norm, self.head_dim).kept_floats()
                       + self.n_kv_heads * stated(self.k_norm, self.head_dim).kept_floats())
        # The fused kernel shares each K and V head with enable_gqa, no copies; with dropout it falls back to the
        # math path, which repeats them to n_heads as the explicit path does (measured: 5% more than counted for
        # n_kv_heads=1, dropout=0.2, attention=sdpa at d=32, T=40)
        if self.grouped and (not self.use_sdpa or dropout):
            floats += 2 * d - self.k_proj.out_features - self.v_proj.out_features
        if dropout:
            floats += 2 * H * T
        return floats


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position on its own.

    The two-matrix FFN of every activation but swiglu, a gated FFN of three matrices (core.feedforward's SwiGLU);
    feed_forward(config) builds whichever the config's activation (and n_experts) asks for.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        if feed_forward_kind(config).gated:  # make_activation has no swiglu: torch said KeyError: 'swiglu'
            # the names a user can import: feed_forward and SwiGLU are not exported by minitf_repl
            raise ConfigError(f"FeedForward is the two-matrix FFN, and activation={config.activation} is a gated FFN "
                              "of three matrices; build it with feed_forward(config) (from minitf_repl.core.model "
                              "import feed_forward), or take a block's: TransformerBlock(config).ffn")
        self.activation = config.activation
        self.fc_in = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.act = make_activation(config.activation)
        self.fc_out = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc_out(self.act(self.fc_in(x))))  # (B, T, d_model)

    # --- what the views need to know ------------------------------------------------------------------
    def neurons(self) -> Neurons:
        pre = "xW_1" + ("" if self.fc_in.bias is None else " + b_1")
        return Neurons(pre=self.fc_in, out=self.fc_out, hidden=activation_formula(self.activation).replace(
            "(.)", f"({pre})", 1), pre_name=pre, below_zero=below_zero(self.activation))

    def symbols(self) -> dict[str, tuple[int, str | None]]:
        return {"d_ff": (self.fc_in.out_features, "FFN")}

    def steps(self) -> dict[str, Step]:
        b1, b2 = ("", "") if self.fc_in.bias is None else (" + b_1", " + b_2")
        hidden, model = ("B", "T", "d_ff"), ("B", "T", "d")
        return {
            "fc_in": Step(f"xW_1{b1}", hidden, model),
            "act": Step(activation_formula(self.activation), hidden),
            "fc_out": Step(f"FFN(x) = act(xW_1{b1})W_2{b2}", model, hidden),
            "dropout": Step("dropout", model, idle=True),
        }

    def activation_floats(self, dropout: bool = False) -> int:
        """Floats one position keeps for the backward pass: the hidden layer before and after the
        activation (relu2: relu's output and its square), or once where the two are one tensor (relu)."""
        return kept_hidden_layers(self.activation) * self.fc_in.out_features


def feed_forward(config: ModelConfig) -> nn.Module:
    """The block's feed-forward part: the two-matrix FFN, SwiGLU, or a mixture of either (n_experts > 1)."""

    def one() -> nn.Module:
        return SwiGLU(config) if feed_forward_kind(config).gated else FeedForward(config)

    return MixtureOfExperts(config, one) if config.is_moe else one()


class TransformerBlock(nn.Module):
    """Pre-LN (the default): normalise, transform, add back; the residual stream x is never normalised.

    Post-LN (norm_placement="post", the original Transformer and GPT-1): transform, add, then
    normalise the sum, so the stream itself is normalised after every sublayer.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.post_norm = config.norm_placement == "post"
        self.residual = config.residual  # off: each sublayer's output replaces the stream (no skip path)
        self.d_ff = config.d_ff
        self.ln_1 = make_norm(config, config.d_model)
        self.attn = MultiHeadSelfAttention(config)
        # ffn=off: attention only, no norm before an FFN and no FFN (None: the views ask and say there is none)
        self.ln_2 = make_norm(config, config.d_model) if config.ffn else None
        self.ffn = feed_forward(config) if config.ffn else None
        self.hook_resid_mid = Probe()  # x' = x + Attention(LN(x)); post-LN: LN(x + Attention(x))
        self.hook_resid_post = Probe()  # x' + FFN(LN(x')); post-LN: LN(x' + FFN(x')), as steps() writes them

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None) -> torch.Tensor:
        if self.post_norm:
            x = self.hook_resid_mid(self.ln_1(self.add(x, self.attn(x, cache))))
            x = self.hook_resid_post(self.ln_2(self.add(x, self.ffn(x))) if self.ffn is not None else x)
            return x
        x = self.hook_resid_mid(self.add(x, self.attn(self.ln_1(x), cache)))
        # ffn=off: the block is attention alone, and hands on x' as it is
        x = self.hook_resid_post(self.add(x, self.ffn(self.ln_2(x))) if self.ffn is not None else x)
        return x

    def add(self, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        """The residual connection: x + f(.), the sublayer's output added to the stream (residual=off: f alone)."""
        return x + f if self.residual else f

    # --- what the views need to know ------------------------------------------------------------------
    def symbols(self) -> dict[str, tuple[int, str | None]]:
        # A feed-forward module of a caller's own (block.ffn = MyFFN()) may state no symbols: it adds none (was an
        # AttributeError from :shapes); its steps show their shapes in numbers
        ffn = getattr(self.ffn, "symbols", None)
        return {**self.attn.symbols(), **(ffn() if callable(ffn) else {})}

    def steps(self) -> dict[str, Step]:
        model = ("B", "T", "d")
        # x is the stream the block reads and x' the stream after attention (hook_resid_mid), which the second half
        # reads: "x + FFN(LN(x))" read as the block's input plus its FFN, attention left out
        skip, skip_mid = ("x + ", "x' + ") if self.residual else ("", "")  # residual=off: the output replaces it
        # a norm module of a caller's own set by hand says no formula: its class names it (core.norms.stated)
        d = self.attn.out_proj.in_features
        ln_1, ln_2 = stated(self.ln_1, d), stated(self.ln_2, d) if self.ln_2 is not None else None
        norm_1 = ln_1.label  # LN, RMSNorm: the norm the model has, by its own name
        if self.ffn is None:  # ffn=off: attention only, and the block hands on x', the stream after it
            post = self.post_norm
            formula = ln_1.formula(f"{skip}Attention(x)", " (post-norm)") if post else ln_1.formula("x")
            return {
                "ln_1": Step(formula, model),
                "hook_resid_mid": Step(f"{norm_1}({skip}Attention(x))" if post else f"{skip}Attention({norm_1}(x))",
                                       model),
                "hook_resid_post": Step("x', as it is (ffn=off: no FFN after attention)", model),
            }
        norm_2 = ln_2.label
        if self.post_norm:  # the norm comes after the residual add
            return {
                "ln_1": Step(ln_1.formula(f"{skip}Attention(x)", " (post-norm)"), model),
                "ln_2": Step(ln_2.formula(f"{skip_mid}FFN(x')", " (post-norm)"), model),
                "hook_resid_mid": Step(f"{norm_1}({skip}Attention(x))", model),
                "hook_resid_post": Step(f"{norm_2}({skip_mid}FFN(x'))", model),
            }
        return {
            "ln_1": Step(ln_1.formula("x"), model),
            "ln_2": Step(ln_2.formula("x'"), model),
            "hook_resid_mid": Step(f"{skip}Attention({norm_1}(x))", model),
            "hook_resid_post": Step(f"{skip_mid}FFN({norm_2}(x'))", model),
        }

    def activation_floats(self, seq_len: int, dropout: bool) -> int:
        """Floats one position keeps for the backward pass (pre-LN, GELU/ReLU FFN, as measured):

            d              the block's input, kept by ln_1 (the residual stream)
            ln_1           its output and statistics (the norm says: core.norms)
            attention      q, k, v, the pattern, the merged heads (MultiHeadSelfAttention says)
            d + ln_2       ln_2's input, its output and statistics
            ffn            its hidden layers (the feed-forward part says; with experts, per chosen expert)
            2d             with dropout: the noise of the attention-output and FFN dropouts
        """
        d = self.attn.out_proj.in_features
        ln_1 = stated(self.ln_1, d).kept_floats()  # a norm set by hand that states nothing: its output
        if self.ffn is None:  # ffn=off: the input, ln_1 and attention, the one dropout
            return d + ln_1 + self.attn.activation_floats(seq_len, dropout) + (d if dropout else 0)
        states = getattr(self.ffn, "activation_floats", None)
        # A feed-forward module of a caller's own that states nothing is taken as a two-matrix FFN of width d_ff.
        ffn = states(dropout) if callable(states) else 2 * self.d_ff
        return (d + ln_1 + self.attn.activation_floats(seq_len, dropout) + d
                + stated(self.ln_2, d).kept_floats() + ffn + (2 * d if dropout else 0))


# The std of every linear and embedding matrix at the start (core.checks' init check reasons from it).
INIT_STD = 0.02


class MiniTransformerLM(nn.Module):
    """The decoder-only Transformer language model of a ModelConfig: token and position embeddings,
    config.n_layers TransformerBlocks, a final norm and the head back to the vocabulary.

        model = MiniTransformerLM(ModelConfig(vocab_size=65, max_seq_len=64))
        logits, loss = model(idx, targets)   # idx, targets: (B, T) token ids; logits (B, T, vocab_size)

    Its linear and embedding matrices start at N(0, 0.02), their biases at 0, drawn from torch's global
    generator (torch.manual_seed first for the same model twice); the head shares the embedding's
    matrix unless tie_embeddings=False. Dropout follows model.train() / model.eval() as in any
    nn.Module. The settings that change no weight (attention, causal, dropout) switch in place:
    set_attention, set_causal, set_dropout.
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"MiniTransformerLM is built from a ModelConfig, got {type(config).__name__}; "
                            "e.g. MiniTransformerLM(ModelConfig(vocab_size=65, max_seq_len=64))")
        config.validate()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = position_kind(config)  # core.variants: which table, if any, is added at the input
        if self.positions.learned:
            self.position_embedding = nn.Embedding(config.max_seq_len, config.d_model)
        elif self.positions.table is not None:
            self.position_embedding = SinusoidalPositions(config.max_seq_len, config.d_model)
        else:
            self.position_embedding = None  # rope: positions enter inside attention; none: not at all
        self.hook_embed = Probe()  # h = x + p
        self.embed_dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([TransformerBlock(config) for _ in range(config.n_layers)])
        # Post-LN blocks end with a norm already (as in GPT-1): no final norm is needed before the head.
        self.post_norm = config.norm_placement == "post"
        self.ln_f = nn.Identity() if self.post_norm else make_norm(config, config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            # Weight tying: reading a token in and writing it out share one matrix W_E.
            self.lm_head.weight = self.token_embedding.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx: (B, T) token ids. targets: (B, T) next-token ids, -1 where no loss is counted.

        Returns (logits, loss): logits (B, T, vocab_size) for every position, loss the mean cross-entropy over the
        counted targets (None without targets; NaN where every target is -1: nothing is counted). An input the
        model cannot read (one sequence without its batch dimension, float ids, ids outside the vocabulary,
        targets of another shape, a tensor on another device) raises one DataError or DeviceError naming the fix.
        """
        idx, targets = self.check_input(idx, targets)
        B, T = idx.shape
        if cache is not None:
            self.check_cache(cache, B, T)
        start = cache.length if cache is not None else 0
        self.check_fits(start + T, cached=start)
        x = self.token_embedding(idx)  # (B, T, d_model)
        if self.position_embedding is not None:
            pos = torch.arange(start, start + T, device=idx.device)  # (T,)
            x = x + self.position_embedding(pos)  # (B, T, d_model)
        x = self.hook_embed(x)
        x = self.embed_dropout(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layers[i] if cache is not None else None)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, vocab_size): z_t for every position t

        loss = None if targets is None else self.loss(logits, targets)
        return logits, loss

    @property
    def causal(self) -> bool:
        """Whether every attention layer masks the future now: causal=on, and no `:ablate mask` (core.ablation)."""
        return all(block.attn.causal for block in self.blocks)

    def check_input(self, idx, targets=None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx and targets as forward reads them ((B, T) int64 ids on the model's device), or one error saying what to
        change: torch's own errors for these (an unpacking error, "index out of range in self", a device-side
        assert on a GPU) name neither the argument nor the fix."""
        device = self.token_embedding.weight.device
        idx = self._ids("idx", idx, device, low=0)
        if targets is not None:
            targets = self._ids("targets", targets, device, low=-1)
            if targets.shape != idx.shape:
                raise DataError(f"targets have shape {tuple(targets.shape)} but idx has {tuple(idx.shape)}; give "
                                "one next-token id per input position (targets[b, t] = the id after idx[b, t])")
        return idx, targets

    def check_cache(self, cache, batch: int, length: int) -> None:
        """A KV cache this forward can extend by `length` positions of `batch` sequences, or one error saying to
        start a fresh one (model.new_cache()): torch's own errors for these are an IndexError or a size mismatch."""
        if not isinstance(cache, KVCache):
            raise DataError(f"cache must be a KVCache, got {type(cache).__name__}; start one: model.new_cache()")
        fresh = "start a fresh one for this input: model.new_cache()"
        if len(cache.layers) != len(self.blocks):
            raise DataError(f"the cache has {count(len(cache.layers), 'layer')} but the model has "
                            f"{len(self.blocks)}; {fresh}")
        room = min(layer.capacity for layer in cache.layers)
        if room < self.config.max_seq_len and cache.length + length > room:
            raise DataError(f"the cache holds {count(room, 'position')} and this input would make it "
                            f"{cache.length + length}; {fresh}")
        keys = cache.layers[0].k  # not `held`: that name is interrupts.held, imported above
        if keys is not None and keys.shape[0] != batch:
            raise DataError(f"the cache holds a batch of {keys.shape[0]} but idx has {batch}; {fresh}")

    def _ids(self, name: str, ids, device: torch.device, low: int) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor):  # an object of another kind: a TypeError, as docs/code.md says
            raise TypeError(f"{name} must be a tensor of token ids, got {type(ids).__name__}; "
                            f"wrap it: torch.tensor([[...]]) for a batch of one")
        if ids.dim() != 2:
            fix = (f"add the batch dimension: {name}.unsqueeze(0) (a batch of one)" if ids.dim() == 1
                   else "give a batch of sequences, (B, T)")
            raise DataError(f"{name} must have shape (B, T), got {tuple(ids.shape)}; {fix}")
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise DataError(f"{name} must hold whole token ids, got dtype {str(ids.dtype).removeprefix('torch.')}; "
                            f"convert it: {name}.long()")
        if ids.device != device:
            raise DeviceError(f"{name} is on {ids.device} but the model is on {device}; move it: {name}.to('{device}')")
        ids = ids.long()  # int32 and the narrower integer types hold the same ids (embedding, cross-entropy want int64)
        vocab = self.config.vocab_size
        if ids.numel() and not torch.compiler.is_compiling():
            outside = (ids < low) | (ids >= vocab)
            if outside.any():
                bad = int(ids[outside][0])
                allowed = f"ids 0..{vocab - 1}" + (", or -1 where no loss is counted" if low < 0 else "")
                raise DataError(f"{name} holds {bad}, not a token id of this model (vocab_size={vocab}: {allowed}); "
                                "encode with the tokenizer the model was built for, or build it with a larger "
                                "vocab_size")
        return ids

    def check_fits(self, length: int, cached: int = 0) -> None:
        """Positions are absolute: an input (cache included: `cached` of its `length` positions) may not be longer than
        the context window."""
        if length > self.config.max_seq_len:
            split = f" ({cached:,} cached + {length - cached:,} new)" if cached else ""  # not `held`: interrupts.held
            # a learned table has max_seq_len rows: a wider window is a new model; other positions compute as far
            wider = ("build a wider model: MiniTransformerLM(model.config.replace(max_seq_len=N))"
                     if self.positions.learned else "widen the window: model.set_length(N)")
            fresh = ", start a fresh cache (model.new_cache())" if cached else ""
            raise DataError(f"input of {count(length, 'token')}{split} is longer than max_seq_len="
                            f"{self.config.max_seq_len}; shorten it{fresh}, or {wider}")

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Teacher forcing: every position predicts its next token at once (targets of -1 are not counted)."""
        B, T, V = logits.shape
        loss = F.cross_entropy(logits.view(B * T, V), targets.reshape(B * T), ignore_index=-1)
        if self.training and self.config.is_moe and self.config.moe_aux_weight > 0:
            # Training only: validation loss stays the plain cross-entropy, comparable across variants.
            loss = loss + self.config.moe_aux_weight * self.moe_aux_loss()
        return loss

    # --- mixture of experts: what the last forward did -----------------------------------------------
    def moe_layers(self) -> list[tuple[int, MixtureOfExperts]]:
        return [(i, b.ffn) for i, b in enumerate(self.blocks) if isinstance(b.ffn, MixtureOfExperts)]

    def moe_aux_loss(self) -> torch.Tensor | None:
        """The load-balancing loss of the last forward, averaged over the MoE layers (None without them)."""
        losses = [moe.aux_loss for _, moe in self.moe_layers() if moe.aux_loss is not None]
        return torch.stack(losses).mean() if losses else None

    def forget_last_forward(self) -> None:
        """Drop what the last forward left for the loss and the views (a mixture's aux loss, which holds that
        forward's graph, and its routing counts); the next forward writes them again. core.probe.evaluating calls
        it as an eval-mode pass ends: a view's numbers are read inside it."""
        for _, moe in self.moe_layers():
            moe.aux_loss = moe.tokens_per_expert = None

    def moe_stats(self) -> MoEStats | None:
        """Per layer and expert, the share of routing choices in the last forward, and the aux loss. None: no experts."""
        layers = self.moe_layers()
        if not layers:
            return None
        aux = self.moe_aux_loss()
        tokens = [m.tokens_per_expert.tolist() if m.tokens_per_expert is not None else [0] * m.n_experts
                  for _, m in layers]
        return MoEStats(
            aux_loss=None if aux is None else aux.item(),
            aux_weight=self.config.moe_aux_weight,
            load=[[c / max(sum(row), 1) for c in row] for row in tokens],
            tokens=tokens,
            layers=[i for i, _ in layers],
        )

    # --- settings that change no weight: the model takes them in place ------------------------------
    def set_attention(self, attention: str) -> None:
        """Switch every attention layer between the explicit formula and the fused kernel (same weights)."""
        self.config = self.config.replace(attention=attention)
        for module in self.modules():
            if isinstance(module, MultiHeadSelfAttention):
                module.use_sdpa = attention == "sdpa"

    @contextlib.contextmanager
    def explicit_attention(self) -> Iterator[None]:
        """For a while, every attention layer on the fused path computes the explicit formula instead.

        Views and ablations need the tensors the fused kernel keeps to itself (the scores, the
        pattern); the weights are the same, so only the path changes, and it is restored afterwards.
        `config.attention` is not touched: a checkpoint saved meanwhile still says what the user chose.
        """
        fused = [m for m in self.modules() if isinstance(m, MultiHeadSelfAttention) and m.use_sdpa]
        try:
            with held():  # a Ctrl-C inside an interruptible view waits until every layer has switched, and back
                for module in fused:
                    module.use_sdpa = False
            yield
        finally:
            with held():
                for module in fused:
                    module.use_sdpa = True

    @contextlib.contextmanager
    def fused_attention(self) -> Iterator[None]:
        """For a while, every attention layer computes the fused kernel (same weights, within 1e-5).

        For views that run many copies of a prompt and need no attention pattern (activation
        patching): the kernel never materialises the (B, n_h, T, T) scores. Restored afterwards.
        """
        explicit = [m for m in self.modules() if isinstance(m, MultiHeadSelfAttention) and not m.use_sdpa]
        try:
            with held():  # a Ctrl-C inside an interruptible view waits until every layer has switched, and back
                for module in explicit:
                    module.use_sdpa = True
            yield
        finally:
            with held():
                for module in explicit:
                    module.use_sdpa = False

    def set_causal(self, causal: bool) -> None:
        """Put the causal mask on or take it off in every attention layer (no weight depends on it)."""
        self.config = self.config.replace(causal=causal)
        for module in self.modules():
            if isinstance(module, MultiHeadSelfAttention):
                module.causal = causal

    def take_config(self, config: ModelConfig) -> None:
        """Take a config that builds these same weights (core.config.rebuilding_changes finds no change): its
        settings that change no weight, and values that build the same model (n_kv_heads=0 for none), so that a
        checkpoint keeps the config as it was set."""
        self.set_dropout(config.dropout)
        self.set_attention(config.attention)
        self.set_causal(config.causal)
        if config.max_seq_len != self.config.max_seq_len:  # positions without a learned table (as_built)
            self.set_length(config.max_seq_len)
        for block in self.blocks:  # read by the forward pass, held by the modules that read them
            if block.attn.rope is not None and block.attn.rope.base != config.rope_base:
                block.attn.rope.set_length(config.max_seq_len, base=config.rope_base)
            if isinstance(block.ffn, MixtureOfExperts):  # its top-k
                block.ffn.k = config.experts_per_token
        for module in self.modules():
            if isinstance(module, NormPart):
                module.eps = config.norm_eps
        self.config = config  # moe_aux_weight and the rest are read from it where they are used

    def set_length(self, max_seq_len: int) -> None:
        """A new window for positions with no learned table (rope, sinusoidal, none): what depends on its length,
        the causal mask and any computed table, is computed again; the weights stay as they are."""
        if self.positions.learned:  # an assert (gone under python -O) let the config outgrow the table
            raise ConfigError(f"pos_encoding={self.config.pos_encoding} has a table of max_seq_len rows: another "
                              "window is a new model; build one with ModelConfig(max_seq_len=...)")
        config = self.config.replace(max_seq_len=max_seq_len)  # checked before anything changes
        if self.position_embedding is not None:
            self.position_embedding.set_length(max_seq_len)
        for block in self.blocks:
            block.attn.set_length(max_seq_len)
        self.config = config

    def set_dropout(self, p: float) -> None:
        """Change the dropout probability everywhere (the fused kernel reads it as dropout_p)."""
        self.config = self.config.replace(dropout=p)
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
            elif isinstance(module, MultiHeadSelfAttention):
                module.dropout_p = p

    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layers, self.config.max_seq_len)

    def num_parameters(self) -> int:
        """Parameters counted once each (a tied embedding and head are one matrix). Equals sizes.parameter_count."""
        return sum(p.numel() for p in self.parameters())

    def block_parameters(self) -> list[int]:
        """Each block's parameters, whether a forward pass ran them or not (an expert no token was routed to)."""
        return [sum(p.numel() for p in block.parameters()) for block in self.blocks]

    # --- what the views need to know ------------------------------------------------------------------
    def symbols(self, batch: int, length: int) -> dict[str, tuple[int, str | None]]:
        """What the letters of the formulas stand for, in reading order: {symbol: (size, meaning)}.

        `batch` and `length` are B and T of the input read. Every block is built alike, so the first
        one speaks for all; a symbol whose meaning is None is a product of others (n_kv·d_k).
        """
        return {"B": (batch, "batch"), "T": (length, "positions"), "d": (self.config.d_model, "width"),
                **self.blocks[0].symbols(), "V": (self.config.vocab_size, "vocab")}

    def steps(self) -> dict[str, Step]:
        model = ("B", "T", "d")
        tied = self.config.tie_embeddings
        ln_f = stated(self.ln_f, self.config.d_model)  # a norm set by hand that states nothing: its class names it
        final = "h" if self.post_norm else f"{ln_f.label}(h)"  # what the head reads: post-norm has no ln_f
        steps = {
            "token_embedding": Step("x = W_E[idx]" + (" (W_E shared with lm_head)" if tied else ""), model, ("B", "T")),
            "hook_embed": Step(self.embedding_formula(), model),
            "embed_dropout": Step("dropout(h)", model, idle=True),
            "ln_f": Step("h (post-norm: the last block's output is normalised already)" if self.post_norm
                         else ln_f.formula("h"), model),
            "lm_head": Step(f"logits z_t = {final} W_E^T (weight tied to token_embedding)" if tied
                            else f"logits z_t = {final} W_U^T (own weight, untied)", ("B", "T", "V"), model),
        }
        if self.positions.table is not None:
            steps["position_embedding"] = Step(self.positions.table, ("T", "d"), ("T",))
        return steps

    def embedding_formula(self) -> str:
        """What the embedding step computes, as the position kind says; with no positions and no causal mask
        (causal=off, :ablate mask) nothing at all tells the tokens' order: attention reads them as a set."""
        kind = self.positions
        if kind.table is None and not kind.rotary and not self.causal:
            return "h = x (no positions and no causal mask: nothing tells the tokens' order)"
        return kind.embedding

    def guessed_parts(self) -> list[str]:
        """"path (Class)" of each part set by hand (`block.ffn = MyFFN()`) whose memory for backward
        activation_floats takes on trust, as it states none: a feed-forward module without activation_floats() (a
        two-matrix FFN of width d_ff), a norm that is no NormPart (its output, norms.stated). :params says so."""
        parts = []
        for b, block in enumerate(self.blocks):
            if block.ffn is not None and not callable(getattr(block.ffn, "activation_floats", None)):
                parts.append(f"blocks.{b}.ffn ({type(block.ffn).__name__})")
            parts += [f"blocks.{b}.{name} ({type(norm).__name__})" for name, norm in (("ln_1", block.ln_1),
                      ("ln_2", block.ln_2)) if norm is not None and not isinstance(norm, NormPart)]
        if not self.post_norm and not isinstance(self.ln_f, NormPart):  # post-norm's ln_f is an identity: keeps none
            parts.append(f"ln_f ({type(self.ln_f).__name__})")
        return parts

    def activation_floats(self, seq_len: int) -> int:
        """Floats the forward pass keeps for backward, per token, in training mode (measured in the tests).

        Every block's (TransformerBlock.activation_floats), then once: with dropout, the embedding
        dropout's noise; ln_f's input, output and statistics (no ln_f after post-LN blocks); the
        logits (V, returned) and their log-softmax (V, kept by the loss). Left out: token ids and
        targets (integers), bool masks, scalars.
        """
        d, dropout = self.config.d_model, self.config.dropout > 0
        floats = sum(block.activation_floats(seq_len, dropout) for block in self.blocks)
        final_norm = 0 if self.post_norm else stated(self.ln_f, d).kept_floats()
        return floats + (d if dropout else 0) + d + final_norm + 2 * self.config.vocab_size
