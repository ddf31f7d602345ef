"""The cost ledger: what a model costs in parameters, FLOPs and memory, from its built modules.

Parameters are counted per component by walking `named_modules()`; a tensor shared by two modules
(the output head tied to the token embedding) is counted once, at its first owner, so the rows add
up to `num_parameters()`.

FLOPs count multiply-adds as 2 (a multiply and an add), matrix products only, as
`torch.utils.flop_counter.FlopCounterMode` does: every `nn.Linear` costs 2 * in * out per token
(read from the modules, so a wider FFN, a third SwiGLU matrix, fewer KV heads or an untied head
are counted as built), and attention's QK^T and AV cost 2 * T * n_heads * head_dim each per token
and layer (from the config). T is the full sequence: the explicit path computes the whole T x T
score matrix, masked half included. Norms, softmax, activations and embedding lookups are left out
(they are O(d) per token, not O(d^2)). Training is taken as 3 x forward (the backward pass computes
two products per forward product: the input's gradient and the weight's); "6N" (6 x parameters x
tokens) is the usual shorthand, shown for comparison: it counts the embedding table, which costs no
FLOPs as a lookup, and leaves out attention's T-dependent products.

A mixture of experts counts the router and, per token, experts_per_token experts' Linears: a token
runs only the experts it is routed to, so the parameters grow with n_experts and the FLOPs do not.
Grouped-query attention leaves attention's FLOPs as they are (every query head still scores
every key); only its K and V projections are smaller, as built.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch.nn as nn

from .errors import UserError
from .experts import MixtureOfExperts
from .norms import RMSNorm
from .optimizers import STATE_WORDS, hidden_matrices
from .trace import parameter_owners


@dataclass
class ParamRow:
    path: str  # a top-level module or a block's child: "token_embedding", "blocks.0.attn", "ln_f", "lm_head"
    kind: str  # class name: Embedding, MultiHeadSelfAttention, LayerNorm, SinusoidalPositions, ...
    params: int  # counted once: a tied tensor counts at its first owner (the token embedding)
    tied_to: str | None  # the component sharing a weight with this one, e.g. lm_head -> "token_embedding"
    block: int | None  # block index, None outside the blocks


@dataclass
class Ledger:
    batch_size: int
    seq_len: int  # T
    rows: list[ParamRow]
    n_params: int  # sum of rows = model.num_parameters()
    # FLOPs (2 per multiply-add; matrix products only)
    linear_flops_per_token: int  # every nn.Linear: 2 * in * out
    attention_flops_per_token: int  # QK^T and AV: 2 * 2 * T * n_heads * head_dim per layer; grows with T
    forward_flops_per_token: int  # the two above
    forward_flops_per_step: int  # x batch_size * seq_len tokens
    training_flops_per_step: int  # 3 x forward: forward, then backward for inputs and weights
    six_n_flops_per_step: int  # 6 * n_params * tokens, the usual rule of thumb
    # memory in bytes, at the parameters' dtype
    weight_bytes: int
    grad_bytes: int  # one gradient per trainable parameter
    optimizer_bytes: int  # the optimizer's state: AdamW's two moments per parameter, Muon's one momentum per
    # entry of the matrices it trains (its AdamW part keeps two); step counters are left out
    activation_bytes: int  # what the forward pass keeps for backward at batch_size x seq_len (see below)
    total_bytes: int  # the four above: a training step's memory, give or take transient buffers
    optimizer: str = "adamw"  # whose state optimizer_bytes counts
    optimizer_label: str = "AdamW"
    optimizer_state: str = STATE_WORDS["adamw"][1]  # what that state is, in words

    def to_dict(self) -> dict:
        return asdict(self)


def _component_rows(model: nn.Module) -> list[ParamRow]:
    """One row per top-level module, with blocks split into their children (norms, attention, FFN)."""
    counts, tied = parameter_owners(model)
    components: list[tuple[str, nn.Module, int | None]] = []
    for name, child in model.named_children():
        if isinstance(child, nn.ModuleList):
            for i, block in enumerate(child):
                components += [(f"{name}.{i}.{sub}", m, i) for sub, m in block.named_children()]
        else:
            components.append((name, child, None))
    rows = []
    for path, module, block in components:
        if _is_plumbing(module):
            continue
        params = sum(n for p, n in counts.items() if p == path or p.startswith(path + "."))
        partner = tied.get(path)
        rows.append(ParamRow(path, type(module).__name__, params, _component_of(partner, components), block))
    return rows


def _is_plumbing(module: nn.Module) -> bool:
    """Probes and dropouts hold no parameters and cost nothing: not worth a row."""
    return isinstance(module, (nn.Identity, nn.Dropout))


def _component_of(path: str | None, components) -> str | None:
    if path is None:
        return None
    for name, _, _ in components:
        if path == name or path.startswith(name + "."):
            return name
    return path


def _linear_flops(module: nn.Module) -> int:
    return sum(2 * m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def linear_flops_per_token(model: nn.Module) -> int:
    """2 * in * out for every nn.Linear a token runs through (each once per token in a decoder-only Transformer).

    In a mixture of experts a token runs the router and its experts_per_token experts, not all of them.
    """
    total, inside_experts = 0, set()
    for m in model.modules():  # pre-order: a MixtureOfExperts comes before its experts' layers
        if isinstance(m, MixtureOfExperts):
            total += _linear_flops(m.router) + m.k * max(_linear_flops(e) for e in m.experts)
            inside_experts.update(id(x) for x in m.modules())
        elif isinstance(m, nn.Linear) and id(m) not in inside_experts:
            total += 2 * m.in_features * m.out_features
    return total


def attention_flops_per_token(config, seq_len: int) -> int:
    """QK^T and AV for one query against seq_len keys, in every head of every layer."""
    return config.n_layers * 2 * (2 * seq_len * config.n_heads * config.head_dim)


def _ffn_floats(ffn: nn.Module, d_ff: int) -> int:
    """Floats one position keeps inside a feed-forward network (one expert)."""
    if hasattr(ffn, "gate_proj"):  # SwiGLU: gate, SiLU(gate), up, their product
        return 4 * ffn.gate_proj.out_features
    if not hasattr(ffn, "fc_in"):  # a module of the caller's own: taken as a two-matrix FFN of width d_ff
        return 2 * d_ff
    return 2 * ffn.fc_in.out_features  # before and after the activation (relu2: relu's output and its square)


def _norm_floats(norm: nn.Module, dim: int) -> int:
    """Floats a norm keeps beyond its input: LayerNorm its output and 2 statistics; RMSNorm x / rms
    and rms, and its output when it has a gain; nothing for the identity (no ln_f after post-LN)."""
    if isinstance(norm, RMSNorm):
        return dim + 1 + (dim if norm.weight is not None else 0)
    if isinstance(norm, nn.LayerNorm):
        return dim + 2
    return 0


def activation_floats_per_token(model: nn.Module, seq_len: int) -> int:
    """Floats the forward pass keeps for backward, per token, in training mode (measured in the tests).

    Per block (pre-LN, GELU/ReLU FFN):
        d          the block's input, kept by ln_1 (the residual stream)
        d          ln_1's output, read by the q/k/v projections
        q + k + v  the projections' outputs (their widths as built), kept for QK^T and AV
        H * T      the attention pattern A, kept by softmax and AV (explicit path); the fused
                   kernel keeps only its H log-sum-exps, unless dropout is on, where torch's CPU
                   kernel falls back to the math path and keeps A like the explicit path
        d          the merged heads, read by out_proj
        2d         ln_2's input and output
        2 d_ff     the FFN's hidden layer before and after the activation
        4          mean and 1/std of the two LayerNorms
      with dropout > 0 (torch's CPU dropout keeps a float noise tensor, 4 bytes an element):
        2 H * T    the dropped pattern (kept by AV) and its noise
        2d         the noise of the attention-output and FFN dropouts
    Once: d noise of the embedding dropout (dropout > 0); ln_f's input, output and 2 statistics
    (2d + 2); the logits (V, returned) and their log-softmax (V, kept by the loss).
    Left out: token ids and targets (integers), bool masks, scalars.

    Variants (measured in tests/test_variants.py, as the seed is in tests/test_ledger.py):
    RMSNorm keeps x / rms and rms (and its output with a gain) instead of LayerNorm's output and two
    statistics; qk_norm keeps the normalised q and k (and their statistics); RoPE's rotated q and k and
    GQA's repeated K and V (explicit path) replace the tensors they came from; SwiGLU keeps four of its width; a mixture
    of experts, per token and chosen expert, its input, hidden layers, output and gated output, plus
    the router's logits and probabilities.
    """
    c = model.config
    d, H, T = c.d_model, c.n_heads, seq_len
    dropout = c.dropout > 0
    floats = 0
    for block in model.blocks:
        attn = block.attn
        qkv_widths = [getattr(attn, n).out_features if hasattr(attn, n) else d for n in ("q_proj", "k_proj", "v_proj")]
        qkv = sum(qkv_widths)
        keeps_pattern = not getattr(attn, "use_sdpa", False) or dropout
        floats += d + _norm_floats(block.ln_1, d) + qkv + (H * T if keeps_pattern else H) + d
        floats += d + _norm_floats(block.ln_2, d)
        if getattr(attn, "q_norm", None) is not None:  # each head's q and k, normalised over head_dim
            floats += H * _norm_floats(attn.q_norm, attn.head_dim) + attn.n_kv_heads * _norm_floats(attn.k_norm, attn.head_dim)
        # RoPE: the rotated q and k replace the unrotated ones (a rotation's gradient needs only cos and sin).
        if getattr(attn, "n_kv_heads", H) != H and not getattr(attn, "use_sdpa", False):  # fused: enable_gqa, no copies
            floats += 2 * d - qkv_widths[1] - qkv_widths[2]  # K and V repeated to n_heads replace the shared ones
        ffn = block.ffn
        if isinstance(ffn, MixtureOfExperts):
            per_choice = _ffn_floats(ffn.experts[0], c.d_ff) + 3 * d + (d if dropout else 0)
            floats += ffn.k * per_choice + 2 * ffn.n_experts + 2 * ffn.k
        else:
            floats += _ffn_floats(ffn, c.d_ff)
        if dropout:
            floats += 2 * H * T + 2 * d
    floats += (d if dropout else 0) + d + _norm_floats(model.ln_f, d) + 2 * c.vocab_size
    return floats


def cost_ledger(model: nn.Module, batch_size: int, seq_len: int | None = None, optimizer: str = "adamw") -> Ledger:
    """The parameters, FLOPs and memory of training `model` on batches of batch_size x seq_len tokens.

    seq_len defaults to the context window (max_seq_len), the length training batches have;
    `optimizer` (TrainConfig.optimizer) decides how much state the optimizer keeps per parameter.
    """
    config = model.config
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size must be a whole number >= 1, got {batch_size!r}")
    if seq_len is None:
        seq_len = config.max_seq_len
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 1 <= seq_len <= config.max_seq_len:
        raise UserError(
            f"sequence length must be a whole number in 1..{config.max_seq_len} (max_seq_len), got {seq_len!r}"
        )
    rows = _component_rows(model)
    n_params = sum(r.params for r in rows)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    first = next(model.parameters())
    nbytes = first.element_size()
    tokens = batch_size * seq_len
    linear = linear_flops_per_token(model)
    attention = attention_flops_per_token(config, seq_len)
    forward = linear + attention
    weight_bytes = n_params * nbytes
    grad_bytes = trainable * nbytes
    muon_entries = sum(p.numel() for _, p in hidden_matrices(model)) if optimizer == "muon" else 0
    optimizer_bytes = (2 * trainable - muon_entries) * nbytes  # Muon: one buffer where AdamW keeps two
    activation_bytes = tokens * activation_floats_per_token(model, seq_len) * nbytes
    return Ledger(
        batch_size=batch_size,
        seq_len=seq_len,
        rows=rows,
        n_params=n_params,
        linear_flops_per_token=linear,
        attention_flops_per_token=attention,
        forward_flops_per_token=forward,
        forward_flops_per_step=forward * tokens,
        training_flops_per_step=3 * forward * tokens,
        six_n_flops_per_step=6 * n_params * tokens,
        weight_bytes=weight_bytes,
        grad_bytes=grad_bytes,
        optimizer_bytes=optimizer_bytes,
        optimizer=optimizer,
        optimizer_label=STATE_WORDS[optimizer][0],
        optimizer_state=STATE_WORDS[optimizer][1],
        activation_bytes=activation_bytes,
        total_bytes=weight_bytes + grad_bytes + optimizer_bytes + activation_bytes,
    )
