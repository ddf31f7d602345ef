"""A shape trace: one forward pass, one record per step, in the order the steps ran.

Forward hooks on every leaf module (the Linear layers, LayerNorms, dropouts and the `Probe`
identities inside attention) see each step's input and output. The model's forward() is left
untouched; the trace only listens. The records are plain data: a UI turns them into a table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn as nn

from .errors import DataError
from .norms import RMSNorm
from .probe import Probe

# What each step computes, in the notation of model.py's docstring, keyed by the last part of the
# module path. Entries that depend on the configuration (position encoding, activation, tying)
# are filled in by `_formula`.
FORMULAS = {
    "token_embedding": "x = W_E[idx]",
    "position_embedding": "p = W_P[pos] (learned)",
    "hook_embed": "h = x + p",
    "embed_dropout": "dropout(h)",
    "ln_1": "LN(x)",
    "q_proj": "Q = HW^Q",
    "k_proj": "K = HW^K",
    "v_proj": "V = HW^V",
    "hook_q": "split heads: (B, T, d) -> (B, h, T, d_k)",
    "hook_k": "split heads: (B, T, d) -> (B, h, T, d_k)",
    "hook_v": "split heads: (B, T, d) -> (B, h, T, d_k)",
    "q_norm": "LN(q) per head",
    "k_norm": "LN(k) per head",
    "rope": "RoPE: rotate q, k by position",
    "hook_q_rot": "q rotated: pair i turned by pos * base^(-2i/d_k)",
    "hook_k_rot": "k rotated: pair i turned by pos * base^(-2i/d_k)",
    "hook_k_rep": "K, V: n_kv_heads heads, repeated to n_heads",
    "hook_v_rep": "K, V: n_kv_heads heads, repeated to n_heads",
    "hook_scores": "S = QK^T / sqrt(d_k)",
    "hook_masked_scores": "S + M (M = -inf above the diagonal)",
    "hook_weights": "A = softmax(S + M)",
    "attn_dropout": "dropout(A)",
    "hook_weighted": "O = AV",
    "hook_merged": "Concat(heads): (B, h, T, d_k) -> (B, T, d)",
    "out_proj": "Concat(heads) W^O",
    "resid_dropout": "dropout",
    "hook_resid_mid": "x + Attention(LN(x))",
    "ln_2": "LN(x)",
    "fc_in": "xW_1 + b_1",
    "act": "GELU(.)",
    "fc_out": "FFN(x) = act(xW_1 + b_1)W_2 + b_2",
    "dropout": "dropout",
    "hook_resid_post": "x + FFN(LN(x))",
    "gate_proj": "xW_g",
    "up_proj": "xW_u",
    "down_proj": "SwiGLU: (SiLU(xW_g) ⊙ xW_u) W_d",
    "router": "router logits r = xW_r",
    "hook_router": "p = softmax(r); each token to its top-k experts, gates = softmax of their r",
    "ln_f": "LN(h)",
    "lm_head": "logits z_t = LN(h) W_U",
}

_LAYER = re.compile(r"(?:^|\.)blocks\.(\d+)\.")


@dataclass
class TraceRecord:
    path: str  # module path from named_modules(), e.g. "blocks.0.attn.hook_q"
    kind: str  # class name: Linear, LayerNorm, Probe, ...
    formula: str
    input_shapes: list[tuple[int, ...]]
    output_shape: tuple[int, ...]
    dtype: str  # of the output, e.g. "float32"
    n_params: int  # parameters this module owns directly; a shared tensor counts at its first owner only
    layer: int | None  # block index, None outside the blocks


_NORMS = ("ln_1", "ln_2", "ln_f", "q_norm", "k_norm")
_GQA = {  # the key/value steps under grouped-query attention (n_kv_heads < n_heads): h_kv heads of K and V
    "k_proj": "K = HW^K (h_kv = {kv} of h = {h} heads: d -> h_kv·d_k)",
    "v_proj": "V = HW^V (h_kv = {kv} of h = {h} heads: d -> h_kv·d_k)",
    "hook_k": "split heads: (B, T, h_kv·d_k) -> (B, h_kv, T, d_k)",
    "hook_v": "split heads: (B, T, h_kv·d_k) -> (B, h_kv, T, d_k)",
    "hook_k_rep": "K: each of the h_kv heads serves {group} query heads: (B, h_kv, T, d_k) -> (B, h, T, d_k)",
    "hook_v_rep": "V: each of the h_kv heads serves {group} query heads: (B, h_kv, T, d_k) -> (B, h, T, d_k)",
}
_KV_STEPS = tuple(_GQA)
_POST = {  # norm_placement="post": the norm comes after the residual add
    "ln_1": "LN(x + Attention(x)) (post-norm)",
    "ln_2": "LN(x + FFN(x)) (post-norm)",
    "hook_resid_mid": "LN(x + Attention(x))",
    "hook_resid_post": "LN(x + FFN(x))",
}


def _formula(path: str, module: nn.Module, tied_to: str | None, config=None) -> str:
    name = path.rsplit(".", 1)[-1]
    formula = FORMULAS.get(name, "")
    post = getattr(config, "norm_placement", "pre") == "post"
    if post and name in _POST:
        formula = _POST[name]
    if name == "position_embedding" and not isinstance(module, nn.Embedding):
        formula = "p = PE(pos) (sinusoidal, fixed)"
    elif name == "hook_embed" and getattr(config, "pos_encoding", "learned") in ("rope", "none"):
        formula = "h = x (no position added: RoPE rotates q, k)" if config.pos_encoding == "rope" else \
            "h = x (no positions: only the causal mask orders tokens)"
    elif name in _NORMS and isinstance(module, nn.Identity):
        formula = "h (post-norm: the last block's output is normalised already)"
    elif name in _NORMS and isinstance(module, RMSNorm):
        gain = " * g" if module.weight is not None else ""
        rule = f"RMSNorm(x) = x / rms(x){gain}"
        formula = rule if formula in ("LN(x)", "LN(h)") else formula.replace("LN(", "RMSNorm(") + f", {rule}"
    elif name in _NORMS and isinstance(module, nn.LayerNorm) and not module.elementwise_affine:
        formula += " (no gain)"
    elif name == "rope":
        formula += f" (base {module.base:g})"
    elif name == "act":
        formula = {"GELU": "GELU(.)" if getattr(module, "approximate", "none") == "none" else "GELU(.) (tanh approx.)",
                   "ReLUSquared": "ReLU(.)^2", "SiLU": "SiLU(.) = . * sigmoid(.)"}.get(type(module).__name__,
                                                                                   f"{type(module).__name__}(.)")
    elif name == "down_proj":
        formula += f" (hidden {module.in_features} = int(2 * d_ff / 3))"
    elif name in _KV_STEPS and config is not None and config.kv_heads != config.n_heads:
        # Grouped-query attention: K and V have h_kv heads of their own (the shapes name it, as :shapes shows).
        formula = _GQA[name].format(kv=config.kv_heads, h=config.n_heads, group=config.n_heads // config.kv_heads)
    elif isinstance(module, nn.Linear) and module.bias is None and " + b_" in formula:
        formula = re.sub(r" \+ b_\d", "", formula)  # bias off
    elif name == "token_embedding" and tied_to is not None:
        formula += f" (W_E shared with {tied_to})"
    elif name == "lm_head" and tied_to is not None:
        formula = f"logits z_t = LN(h) W_E^T (weight tied to {tied_to})"
    elif name == "lm_head":
        formula = "logits z_t = LN(h) W_U (own weight, untied)"
    return formula


def _shape(value) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def parameter_owners(model: nn.Module) -> tuple[dict[str, int], dict[str, str]]:
    """Per module path: how many parameters it owns, and which module it shares a weight with.

    Walking named_modules() in registration order gives a tied tensor to its first owner (the token
    embedding, registered before lm_head), so the counts add up to `num_parameters()`.
    """
    first_owner: dict[int, str] = {}
    counts: dict[str, int] = {}
    tied: dict[str, str] = {}
    for path, module in model.named_modules():
        counts[path] = 0
        for p in module.parameters(recurse=False):
            if id(p) in first_owner:
                tied[path] = first_owner[id(p)]
                tied.setdefault(first_owner[id(p)], path)
            else:
                first_owner[id(p)] = path
                counts[path] += p.numel()
    return counts, tied


def check_token_ids(model: nn.Module, idx) -> torch.Tensor:
    if not isinstance(idx, torch.Tensor):
        raise DataError(f"trace needs a tensor of token ids, got {type(idx).__name__}; encode the text first")
    if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise DataError(f"token ids must be whole numbers, got dtype {idx.dtype}; pass a LongTensor")
    if idx.dim() == 1:
        idx = idx.unsqueeze(0)  # (1, T): a single sequence is a batch of one
    if idx.dim() != 2 or idx.numel() == 0:
        raise DataError(f"token ids must have shape (T,) or (B, T) with T >= 1, got {tuple(idx.shape)}")
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is not None and (idx.min() < 0 or idx.max() >= vocab):
        raise DataError(f"token ids must be in 0..{vocab - 1}, got {idx.min().item()}..{idx.max().item()}")
    param = next(model.parameters(), None)
    device = param.device if param is not None else idx.device
    return idx.to(device=device, dtype=torch.long)


def trace(model: nn.Module, idx: torch.Tensor) -> list[TraceRecord]:
    """Run `model` once on `idx` ((B, T) or (T,) token ids) and record every step in execution order.

    The pass runs in eval mode (dropout off, so shapes and values are those of inference) under
    no_grad; each module's training flag is restored afterwards. Hooks sit on every leaf module,
    `Probe`s included, and are removed even when the forward raises (e.g. an input longer than
    max_seq_len, which raises DataError).

    With `attention="sdpa"` the fused kernel computes scores, mask and softmax internally, so the
    hook_scores, hook_masked_scores and hook_weights probes (and attn_dropout) never fire and have
    no records; hook_q/k/v, hook_weighted and hook_merged still do.
    """
    idx = check_token_ids(model, idx)
    counts, tied = parameter_owners(model)
    records: list[TraceRecord] = []

    def make_hook(path: str, module: nn.Module):
        layer_match = _LAYER.search(path)
        layer = int(layer_match.group(1)) if layer_match else None
        formula = _formula(path, module, tied.get(path), getattr(model, "config", None))

        def hook(mod, inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            records.append(
                TraceRecord(
                    path=path,
                    kind=type(mod).__name__,
                    formula=formula,
                    input_shapes=[s for s in map(_shape, inputs) if s is not None],
                    output_shape=_shape(out) or (),
                    dtype=str(out.dtype).removeprefix("torch.") if isinstance(out, torch.Tensor) else "",
                    n_params=counts.get(path, 0),
                    layer=layer,
                )
            )

        return hook

    modes = {module: module.training for module in model.modules()}
    handles = []
    try:
        for path, module in model.named_modules():
            if module is model:
                continue
            if isinstance(module, Probe) or next(module.children(), None) is None:
                handles.append(module.register_forward_hook(make_hook(path, module)))
        model.eval()
        with torch.no_grad():
            model(idx)
    finally:
        for handle in handles:
            handle.remove()
        for module, was_training in modes.items():
            module.training = was_training
    return records
