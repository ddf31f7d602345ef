"""Direct logit attribution: how much each part of the model writes the next token's logit.

In a pre-norm model the residual stream at the end is a sum of what every part added to it:

    h_L = h_0 + sum_l ( Attention_l + FFN_l )                          h_0 = W_E[idx] + P: token + position
    Attention_l = sum_h O_h W^O[:, h] + b^O                            one term per head (and the bias)
    z_t = W_U[t] . LN(h_L)                                             the logit of token t

LN is not linear, but with its scale frozen at the value it had on this input (FrozenNorm, as the
interpretability literature does) it is affine: LN(h) = linear(h) + offset. So the logit splits
exactly into one number per part plus the norm's own offset:

    z_t = sum_parts W_U[t] . linear(part) + W_U[t] . offset

h_0 is two parts, the token's embedding W_E[idx] and the position table's row P (learned or sinusoidal; none
where RoPE turns q and k inside attention, or pos_encoding=none): both go down the stream as they are, so each
has a direct share of its own, and the two sum to h_0's.

The parts are read by the model's own modules and probes (the token and position embeddings, each attention's
hook_merged, each block's feed-forward output) during one listening pass; nothing in the model changes. A
post-norm model renormalises the stream after every sublayer, so its end is no sum of parts: it is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .ablation import skipped_blocks
from .errors import UserError
from .inside import listening, one_sequence


@dataclass
class Part:
    name: str  # "embed (token)", "embed (position)", "head 1.2", "ffn 0", "output biases b^O"
    kind: str  # embed (token or position) | head | ffn | bias (the feed-forward, the MLP of other texts)
    layer: int | None  # the block it belongs to (None: the embeddings, or every block's biases)
    head: int | None
    logit: float  # its share of the target's logit: W_U[t] . linear(part)


@dataclass
class Attribution:
    token_ids: list[int]  # the prompt read, length T; the attribution is at its last position
    target: int  # the token whose logit is split
    logit: float  # the model's own logit z_t at the last position
    prob: float  # softmax(z)_t: the model's probability of the target
    rank: int  # 1: the likeliest next token
    offset: float  # W_U[t] . offset: what the frozen final norm adds on its own (its bias; 0 without)
    scale: float  # the final norm's scale at that position (std or rms of h_L), frozen
    parts: list[Part]  # in the model's order: token, position (where a table is added), then per block its heads
    # and its ffn, then the output biases
    norm_bias: bool = True  # the final norm has a bias (False: RMSNorm, bias=off; the offset is 0)

    @property
    def total(self) -> float:
        """The parts' sum plus the offset: the logit again (tests/test_inside_deeper.py checks it)."""
        return sum(p.logit for p in self.parts) + self.offset

    def to_dict(self) -> dict:
        return {"token_ids": self.token_ids, "target": self.target, "logit": self.logit, "prob": self.prob,
                "rank": self.rank, "offset": self.offset,
                "scale": self.scale, "parts": [vars(p).copy() for p in self.parts], "norm_bias": self.norm_bias}


def residual_parts(model: nn.Module, seen: dict, position: int) -> list[tuple[Part, torch.Tensor]]:
    """The pieces of the final residual stream at `position`, each with its (d,) vector; they sum to h_L.

    `seen` holds what the probes of `attribution_probes` recorded in one pass.
    """
    # h_0 = W_E[idx] + P read apart: one "embed" row of the two hid what the position table writes on its own
    parts = [(Part("embed (token)", "embed", None, None, 0.0), seen["token"][0, position])]
    if "position" in seen:  # a table added at the input (learned or sinusoidal); :ablate positions makes it zeros
        table = seen["position"]  # (T, d): the table's rows at positions 0..T-1, the same for every sequence
        row = (table[0] if table.dim() == 3 else table)[position]
        parts.append((Part("embed (position)", "embed", None, None, 0.0), row))
    bias = None
    skipped = skipped_blocks(model)  # `:ablate block=L`: its heads and FFN read 0, and its bias is not added
    for i, block in enumerate(model.blocks):
        attn = block.attn
        merged = seen[f"merged.{i}"][0, position]  # (d,): Concat(head_1..head_H) at this position
        W_O = attn.out_proj.weight  # (d, d): out = merged @ W_O^T + b
        d_k = attn.head_dim
        for h in range(attn.n_heads):
            piece = slice(h * d_k, (h + 1) * d_k)
            parts.append((Part(f"head {i}.{h}", "head", i, h, 0.0), merged[piece] @ W_O[:, piece].T))  # (d,)
        if attn.out_proj.bias is not None and i not in skipped:
            bias = attn.out_proj.bias if bias is None else bias + attn.out_proj.bias
        if block.ffn is not None:  # ffn=off: attention's heads and bias are all a block writes
            parts.append((Part(f"ffn {i}", "ffn", i, None, 0.0), seen[f"ffn.{i}"][0, position]))
    # W^O's bias is added whatever the heads do: one part for every block's. Attention's other biases are not in it:
    # b^V goes through A (each row sums to 1) and W^O into each head's row, b^Q and b^K move only the pattern
    if bias is not None:
        parts.append((Part("output biases b^O", "bias", None, None, 0.0), bias.detach()))
    return parts


def attribution_probes(model: nn.Module) -> dict[str, nn.Module]:
    """Where the parts are read: the token embedding, the position table where one is added at the input, each
    attention's merged heads, each feed-forward's output; and the stream at the end, which the final norm reads."""
    probes = {"token": model.token_embedding, "end": model.blocks[-1].hook_resid_post}
    if getattr(model, "position_embedding", None) is not None:  # None: RoPE or pos_encoding=none add nothing there
        probes["position"] = model.position_embedding
    for i, block in enumerate(model.blocks):
        probes[f"merged.{i}"] = block.attn.hook_merged
        if block.ffn is not None:
            probes[f"ffn.{i}"] = block.ffn
    return probes


def check_pre_norm(model: nn.Module, view: str) -> None:
    """The stream must be the sum of what every part wrote: pre-norm, with the residual connections."""
    # No fix of settings to paste: each setting rebuilds the model, so the line reset the trained weights (the REPL)
    # or was refused (the shell's --load): the way on is a model trained so
    if getattr(model, "post_norm", False):
        raise UserError(f"{view} splits the residual stream into the parts that wrote it, but a post-norm model "
                        "renormalises it after every sublayer; it needs a model trained pre-norm (norm_placement=pre, "
                        "the default, builds a new one: its weights start again)")
    if not all(getattr(block, "residual", True) for block in getattr(model, "blocks", ())):
        raise UserError(f"{view} splits the residual stream into the parts that wrote it, but with residual=off each "
                        "sublayer's output replaces the stream instead of adding to it; it needs a model trained with "
                        "the residual add (residual=on, the default, builds a new one: its weights start again)")


def direct_logit_attribution(model: nn.Module, idx, target: int | None = None) -> Attribution:
    """Split the logit of `target` (default: the model's likeliest next token) at the last position of `idx`.

    The final norm is frozen at its scale on this input (core.norms.FrozenNorm); the parts then sum
    to the logit minus the norm's offset, exactly up to rounding.
    """
    check_pre_norm(model, "direct logit attribution")
    idx = one_sequence(model, idx, "attribution")
    V = model.lm_head.weight.shape[0]
    if target is not None and (isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < V):
        raise UserError(f"target must be a token id in 0..{V - 1}, got {target!r}")
    with listening(model, attribution_probes(model)) as seen:
        logits, _ = model(idx)  # (1, T, V)
        z = logits[0, -1]  # (V,)
        target = int(z.argmax()) if target is None else target
        frozen = model.ln_f.frozen(seen["end"][0, -1])
        direction = model.lm_head.weight[target]  # (d,): W_U[t], the row that reads token t's logit
        parts = residual_parts(model, seen, -1)
        vectors = torch.stack([vector for _, vector in parts])  # (n_parts, d)
        shares = (frozen.linear(vectors) @ direction).float().cpu()  # (n_parts,)
        offset = float(frozen.offset @ direction)
    for (part, _), share in zip(parts, shares.tolist()):
        part.logit = share
    probs = torch.softmax(z.float(), dim=-1)  # (V,)
    return Attribution(token_ids=idx[0].tolist(), target=target, logit=float(z[target]), prob=float(probs[target]),
                       rank=int((probs > probs[target]).sum()) + 1, offset=offset,
                       scale=float(frozen.scale), parts=[part for part, _ in parts], norm_bias=frozen.biased)
