"""The numbers behind the "look inside" views: attention maps, one query's attention worked out by
hand, rotary positions at one query, the residual stream at one position, one norm worked out step
by step, a feed-forward part as the sum of its hidden units, decoding with the KV cache against the
naive loop, the next-token microscope, the logit lens, teacher forcing (every next token of a text
scored at once), the embeddings' neighbours, and the probability each generated token had
(`:gen show=probs`).

Each view runs the model once on one sequence and only listens, like `core.trace`: forward hooks
on the `Probe` identities read the tensors during one core.probe.listening pass (eval mode, no
gradients, hooks removed and training flags restored afterwards). The results are plain
dataclasses holding CPU tensors; `to_dict()` turns one into lists and numbers for JSON.

(The module is named `inside`, not `inspect`, so that it never shadows the standard library's
`inspect`, which torch imports, when a script runs from this folder.)
"""

from __future__ import annotations

import contextlib
import math
import re
import time
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from .ablation import rotation_dropped
from .config import GenConfig
from .device import in_float64
from .errors import DataError, UserError
from .generate import SamplingStages, check_sampling, pick, sampling_stages
from .model import require_model
from .probe import evaluating
from .probe import listening as listening_pass
from .trace import check_token_ids

_BLOCK_PROBE = re.compile(r"^blocks\.(\d+)\.(?:.*\.)?(hook_\w+)$")


def one_sequence(model: nn.Module, idx, view: str) -> torch.Tensor:
    """(T,) or (1, T) token ids as a (1, T) LongTensor on the model's device, or a DataError."""
    if isinstance(idx, (list, tuple)):
        idx = torch.tensor(idx, dtype=torch.long) if len(idx) else torch.empty(0, dtype=torch.long)
    if not isinstance(idx, torch.Tensor):
        raise DataError(f"the {view} needs token ids, got {type(idx).__name__}; encode the text first")
    idx = check_token_ids(model, idx)
    if idx.shape[0] != 1:
        raise DataError(f"the {view} shows one sequence, got a batch of {idx.shape[0]}; pass a single row of ids")
    return idx


def block_probes(model: nn.Module, name: str) -> dict[int, nn.Module]:
    """Block index -> the probe called `name` inside that block (found by path, so variants keep working)."""
    found = {}
    for path, module in model.named_modules():
        match = _BLOCK_PROBE.match(path)
        if match and match.group(2) == name:
            found[int(match.group(1))] = module
    return dict(sorted(found.items()))


@contextlib.contextmanager
def listening(model: nn.Module, probes: dict[str, nn.Module], explicit_attention: bool = False) -> Iterator[dict]:
    """Record the output of each probe (key -> detached tensor) during one eval, no_grad pass (core.probe.listening).

    With explicit_attention, the model computes the explicit formula for the pass, so that the
    score and weight probes fire; the weights are the same.
    """
    seen: dict[str, torch.Tensor] = {}

    def make_hook(key: str):
        def hook(module, inputs, output):
            seen[key] = output.detach()

        return hook

    with listening_pass(model, [(probe, make_hook(key)) for key, probe in probes.items()], explicit_attention):
        yield seen


# --- attention maps --------------------------------------------------------------------------


@dataclass
class AttentionMaps:
    token_ids: list[int]  # the sequence, length T
    layers: list[int]  # block index of each map, in order
    n_heads: int
    maps: torch.Tensor  # (len(layers), n_heads, T, T) float32 on the CPU: A = softmax(QK^T/sqrt(d_k) + M)

    def to_dict(self) -> dict:
        return {
            "token_ids": self.token_ids,
            "layers": self.layers,
            "n_heads": self.n_heads,
            "maps": self.maps.tolist(),  # [layer][head][query position][key position]
        }


def attention_maps(model: nn.Module, idx, layer: int | None = None) -> AttentionMaps:
    """The attention pattern of every head, for every block or for block `layer`, on one sequence.

    Row i of a map is the distribution position i spreads over positions 0..i: each row sums to 1
    and everything above the diagonal is exactly 0 (causal=off: over every position). A model on the
    fused path (attention="sdpa") is run on the explicit path for this pass, because the fused kernel
    never materialises A.
    """
    idx = one_sequence(model, idx, "attention view")
    probes = block_probes(model, "hook_weights")
    if not probes:
        raise UserError("this model has no attention weight probes (hook_weights); use a model built by minitf")
    if layer is not None:
        if isinstance(layer, bool) or not isinstance(layer, int) or layer not in probes:
            raise UserError(f"layer {layer!r} does not exist; choose one of 0..{max(probes)}")
        probes = {layer: probes[layer]}
    with listening(model, {str(i): p for i, p in probes.items()}, explicit_attention=True) as seen:
        model(idx)
    maps = torch.stack([seen[str(i)][0] for i in probes]).float().cpu()  # (L, n_heads, T, T)
    return AttentionMaps(
        token_ids=idx[0].tolist(),
        layers=list(probes),
        n_heads=maps.shape[1],
        maps=maps,
    )


def block_at(model: nn.Module, layer) -> nn.Module:
    """Block `layer` of the model, or a UserError naming the blocks it has."""
    blocks = getattr(model, "blocks", None)
    if blocks is None or not len(blocks):
        raise UserError("this model has no blocks to look into; use a model built by minitf")
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(blocks):
        raise UserError(f"layer {layer!r} does not exist; choose one of 0..{len(blocks) - 1}")
    return blocks[layer]


def position(at, T: int) -> int:
    """Position `at` of a sequence of T tokens (negative: from the end) as 0..T-1, or a UserError."""
    if isinstance(at, bool) or not isinstance(at, int) or not -T <= at < T:
        raise UserError(f"position {at!r} is not in the text of {T} tokens; choose one of 0..{T - 1} "
                        f"(or -1..-{T} from the end: -1 the last)")
    return at % T


# --- one query's attention, worked by hand --------------------------------------------------------
@dataclass
class QueryAttention:
    """Row i of one head's attention, recomputed step by step from the q, k and v the model made.

        s_ij = q_i . k_j / sqrt(d_k)      every j: the product QK^T computes the future's scores too
        a_ij = softmax_j(s_ij + M_ij)     M_ij = -inf for j > i: the future gets weight exactly 0
        o_i  = sum_j a_ij v_j             this head's d_k numbers of the output at position i

    A model with causal off has no mask (M = 0): the softmax runs over every j, the future's included.

    The sums are done here in float64 from the model's own q, k and v, and compared with what the
    model computed (its explicit path's A and O = AV) and with the fused kernel
    (F.scaled_dot_product_attention) on the same q, k and v: the differences are rounding.
    """

    token_ids: list[int]  # the sequence, length T
    layer: int
    head: int  # the query head
    kv_head: int  # the key/value head it reads: `head` itself, or under GQA/MQA the one its group shares
    at: int  # the query position i
    q: list[float]  # q_i as the scores see it (after qk_norm and RoPE where the model has them), d_k numbers
    keys: list[list[float]]  # k_j for every position j (T x d_k), likewise
    values: list[list[float]]  # v_j for every position j (T x d_k)
    dots: list[float]  # q_i . k_j for every j, the future's included
    scores: list[float]  # s_ij = dots / sqrt(d_k)
    weights: list[float]  # a_ij: softmax over j <= i, exactly 0 for j > i (causal off: over every j); they sum to 1
    unscaled_weights: list[float]  # softmax(q_i . k_j + M_ij) without the 1/sqrt(d_k): what the scale prevents
    out: list[float]  # o_i = sum_j a_ij v_j
    model_weights_diff: float  # max |a_ij - the model's own A[i, j]|
    model_out_diff: float  # max |o_i - the model's own (AV)[i]|
    fused_out_diff: float  # max |o_i - F.scaled_dot_product_attention(q, k, v, is_causal=causal)[i]|
    turned: list[str]  # what q and k went through before the scores: "qk_norm", "rope" (none for the seed)
    causal: bool = True  # the model's mask is on (ModelConfig.causal); off, M = 0 and the future is read too

    @property
    def head_dim(self) -> int:
        return len(self.q)

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def query_attention(model: nn.Module, idx, layer: int = 0, head: int = 0, at: int = -1) -> QueryAttention:
    """Head `head` of block `layer` at query position `at` (negative: from the end) of one sequence, by hand.

    One listening pass on the explicit path records the head's q, k and v where the scores read them,
    and the model's own pattern A and output AV; the rest is the formula of QueryAttention.
    """
    idx = one_sequence(model, idx, "query view")
    attn = block_at(model, layer).attn
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < attn.n_heads:
        raise UserError(f"head {head!r} does not exist; choose one of 0..{attn.n_heads - 1}")
    T = idx.shape[1]
    i = position(at, T)
    # Where the scores read q and k: after qk_norm and RoPE when the model has them. K and V are read
    # before GQA's repeat: the key/value head this query head shares is picked below.
    q_at = attn.hook_q_rot if attn.rope is not None else attn.q_norm if attn.q_norm is not None else attn.hook_q
    k_at = attn.hook_k_rot if attn.rope is not None else attn.k_norm if attn.k_norm is not None else attn.hook_k
    probes = {"q": q_at, "k": k_at, "v": attn.hook_v, "A": attn.hook_weights, "O": attn.hook_weighted}
    with listening(model, probes, explicit_attention=True) as seen:
        model(idx)
    group = attn.n_heads // attn.n_kv_heads
    kv_head = head // group
    q_all, k_all, v_all = (seen[name][0].float().cpu() for name in ("q", "k", "v"))  # (heads, T, d_k)
    q, k, v = in_float64(q_all[head, i]), in_float64(k_all[kv_head]), in_float64(v_all[kv_head])

    dots = k @ q  # (T,): q_i . k_j for every j
    scores = dots / math.sqrt(q.shape[0])
    future = (torch.arange(T) > i) & attn.causal  # M_ij = -inf there (causal off: nowhere)
    weights = torch.softmax(scores.masked_fill(future, -math.inf), dim=0)
    unscaled = torch.softmax(dots.masked_fill(future, -math.inf), dim=0)
    out = weights @ v  # (d_k,): sum_j a_ij v_j

    model_A = in_float64(seen["A"][0, head, i]).cpu()
    model_O = in_float64(seen["O"][0, head, i]).cpu()
    fused = F.scaled_dot_product_attention(q_all[None], k_all.repeat_interleave(group, dim=0)[None],
                                           v_all.repeat_interleave(group, dim=0)[None],
                                           is_causal=attn.causal)[0, head, i]
    return QueryAttention(
        token_ids=idx[0].tolist(), layer=layer, head=head, kv_head=kv_head, at=i,
        q=q.tolist(), keys=k.tolist(), values=v.tolist(),
        dots=dots.tolist(), scores=scores.tolist(), weights=weights.tolist(), unscaled_weights=unscaled.tolist(),
        out=out.tolist(),
        model_weights_diff=float((weights - model_A).abs().max()),
        model_out_diff=float((out - model_O).abs().max()),
        fused_out_diff=float((out - in_float64(fused)).abs().max()),
        turned=[name for name, on in (("qk_norm", attn.q_norm is not None),
                                      ("rope", attn.rope is not None and not rotation_dropped(attn))) if on],
        causal=attn.causal,
    )


# --- RoPE at one query, worked by hand ---------------------------------------------------------------
@dataclass
class RopeKey:
    """One key position j the query reads: its score with RoPE, and without any rotation."""

    j: int  # the key position j, 0 .. i
    dot: float  # R(i) q . R(j) k_j = q . R((j - i) theta) k_j: what the scores see (before 1/sqrt(d_k))
    unrotated: float  # q . k_j: the same vectors with no position at all


@dataclass
class RopePair:
    """One pair (2c, 2c+1) of the head's features: its frequency, and its share of q . k for the key shown."""

    m: int  # the pair's index c (the views write c: m read as the mask M beside it in :shapes)
    theta: float  # the angle it turns a position: base^(-2c / head_dim)
    wavelength: float  # 2 pi / theta: positions for a full turn
    angle: float  # (j - i) theta for the key shown, in radians
    share: float  # its term of R(i) q . R(j) k (the terms add up to the score)
    unrotated: float  # its term of q . k


@dataclass
class RopeWorked:
    """RoPE in one head at one query position i, worked out by hand in float64.

    RoPE rotates each pair (x_2c, x_2c+1) of a head's q and k by pos * theta_c. A rotation keeps
    lengths, and R(a)^T R(b) = R(b - a), so R(i) q . R(j) k = q . R((j - i) theta) k: the score
    depends on the distance i - j only. The view reads q and k as the rotation receives them (after
    qk_norm where the model has it) and redoes the rotation; `model_diff` checks it against the
    model's rotated vectors, `shift_diff` moves both positions by several amounts and checks that
    no score changes.
    """

    token_ids: list[int]  # the ids read, one per position
    layer: int  # the block
    head: int  # the query head
    kv_head: int  # the key head this query head reads (itself; under GQA/MQA its group's)
    at: int  # the query position i
    head_dim: int  # D: the features of one head's q and k, turned in D / 2 pairs
    base: float  # theta_c = base^(-2c / head_dim)
    keys: list[RopeKey]  # every key j <= i
    shown: int  # the key whose pairs are listed: the earlier key with the largest rotated score (at 0: itself)
    pairs: list[RopePair]  # each pair c = 0 .. D/2 - 1, its term of the score for the key shown
    by_distance: list[float]  # q . R(-d theta) k_shown for d = 0 .. max_seq_len - 1: the same vectors at every distance
    shifts: list[int]  # how far both positions were moved for the check
    shift_diff: float  # max change of any score under those shifts (rounding)
    model_diff: float  # max |R(i) q . R(j) k here - the model's own rotated q . k|


def _rotate(x: torch.Tensor, positions: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """x (..., D) at `positions` (...,): each pair (x_2c, x_2c+1) turned by position * theta_c (the paper's pairs)."""
    angle = in_float64(positions[..., None]) * theta  # (..., D/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * angle.cos() - odd * angle.sin()
    out[..., 1::2] = even * angle.sin() + odd * angle.cos()
    return out


def rope_worked(model: nn.Module, idx, layer: int = 0, head: int = 0, at: int = -1) -> RopeWorked:
    """Head `head` of block `layer` at query position `at`: RoPE's rotation redone by hand (see RopeWorked)."""
    idx = one_sequence(model, idx, "RoPE view")
    attn = block_at(model, layer).attn
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < attn.n_heads:
        raise UserError(f"head {head!r} does not exist; choose one of 0..{attn.n_heads - 1}")
    if attn.rope is None:
        raise UserError("this model has no rotary positions (pos_encoding is not rope): its positions are added at "
                        "the input, or absent; set pos_encoding=rope (or the llama preset), then look again")
    if rotation_dropped(attn):
        raise UserError("RoPE's rotation is switched off now (:ablate positions): the model's q and k are not turned; "
                        ":ablate off puts it back")
    T = idx.shape[1]
    i = position(at, T)
    seen: dict[str, torch.Tensor] = {}

    def keep(module, inputs, output):  # the rotation's input (q, k) and output (rotated q, k)
        seen["q"], seen["k"] = in_float64(inputs[0][0]).cpu(), in_float64(inputs[1][0]).cpu()
        seen["q_rot"], seen["k_rot"] = in_float64(output[0][0]).cpu(), in_float64(output[1][0]).cpu()

    with listening_pass(model, [(attn.rope, keep)]):
        model(idx)
    kv_head = head // (attn.n_heads // attn.n_kv_heads)
    q, k = seen["q"][head, i], seen["k"][kv_head, : i + 1]  # (D,), (i+1, D)
    D = q.shape[0]
    theta = attn.rope.base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,)
    positions = torch.arange(i + 1)

    def scores(shift: int) -> torch.Tensor:
        return _rotate(k, positions + shift, theta) @ _rotate(q, torch.tensor(i + shift), theta)  # (i+1,)

    dots = scores(0)
    shifts = [s for s in (1, 7, 100, 10_000) if s]
    model_dots = seen["k_rot"][kv_head, : i + 1] @ seen["q_rot"][head, i]
    j = int(dots[:i].argmax()) if i else 0  # the query's own key is at distance 0, where nothing turns
    turned = _rotate(k[j], torch.tensor(j - i), theta)  # R((j - i) theta) k_j
    shares = (q.view(-1, 2) * turned.view(-1, 2)).sum(-1)  # each pair's term of q . R((j - i) theta) k_j
    plain = (q.view(-1, 2) * k[j].view(-1, 2)).sum(-1)
    window = attn.rope.cos.shape[0]
    by_distance = _rotate(k[j].expand(window, D), -torch.arange(window), theta) @ q
    return RopeWorked(
        token_ids=idx[0].tolist(), layer=layer, head=head, kv_head=kv_head, at=i, head_dim=D,
        base=float(attn.rope.base),
        keys=[RopeKey(jj, float(dots[jj]), float(k[jj] @ q)) for jj in range(i + 1)],
        shown=j,
        pairs=[RopePair(m, float(theta[m]), float(2 * math.pi / theta[m]), float((j - i) * theta[m]),
                        float(shares[m]), float(plain[m])) for m in range(D // 2)],
        by_distance=by_distance.tolist(), shifts=shifts,
        shift_diff=max(float((scores(s) - dots).abs().max()) for s in shifts),
        model_diff=float((dots - model_dots).abs().max()),
    )


# --- the residual stream at one position ----------------------------------------------------------
@dataclass
class NormRead:
    """What a norm read and wrote at one position: the vector's mean and size, and the scale it divided by."""

    mean: float  # over the d features: LayerNorm subtracts it, RMSNorm does not
    scale: float | None  # what the norm divided by, as the norm itself says (LN: std, RMSNorm: rms; eps included)
    size_in: float  # |h|, the Euclidean length of what it read
    size_out: float  # |LN(h)|: about sqrt(d) times the gain, whatever |h| was


@dataclass
class StreamWrite:
    """One sublayer at one position: the stream it found, what it added, what the stream became."""

    block: int  # the block (0: the first); its attention row, then its FFN's
    part: str  # "attn" or "ffn"
    before: float  # |h| the block (or its second half) started from
    norm: NormRead  # pre-LN: the norm of the stream, the sublayer's input; post-LN: the norm of h + f(h)
    write: float  # |f(.)|: the sublayer's output, what it adds to the stream
    cos: float  # cos(f(.), h): > 0 writes along the stream, < 0 against it, about 0 a new direction
    after: float  # |h| after: h + f(LN(h)) (pre-LN), LN(h + f(h)) (post-LN)


@dataclass
class ResidualStream:
    """The residual stream h at one position, from the embedding through every block to the final norm.

    Pre-LN (the seed): h_l = h + Attention(LN(h)), then + FFN(LN(.)); the stream itself is never
    normalised, only each sublayer's copy of it, so |h| may grow while every sublayer reads a vector
    of the same size. Post-LN: the stream is normalised after each add.
    """

    token_ids: list[int]
    at: int  # the position
    placement: str  # "pre" or "post"
    norm_label: str  # "LN" or "RMSNorm"
    norm_scale: str  # what the norms divide by: "std" (LN), "rms" (RMSNorm)
    residual: bool  # each sublayer adds to the stream (off: its output replaces the stream)
    token: float  # |x|: the token's embedding row
    position: float | None  # |p|: the position table's row (None: rope or no positions)
    embed: float  # |h_0| = |x + p|
    writes: list[StreamWrite]  # two per block, in order (one with ffn=off: attention's)
    final: NormRead | None  # the final norm before the output head (None for post-LN, which has none)
    ffn: bool = True  # each block has its FFN after attention (ffn=off: attention alone, one write a block)
    # the norms scale what they read to rms 1 before their gain (LayerNorm, RMSNorm: the arithmetic their by_hand()
    # states), so a sublayer reads sqrt(d) times the gain whatever the stream's size. False: a norm of a caller's own
    # (DyT's tanh, ScaleNorm's g * x / |x|) that says no such thing, and the view does not claim it
    unit_rms: bool = True


def unit_rms(norm: nn.Module) -> bool:
    """Whether `norm` states the arithmetic of LayerNorm and RMSNorm (core.norms.ByHand): x / rms(x) before a gain."""
    by_hand = getattr(norm, "by_hand", None)
    return callable(by_hand) and by_hand() is not None


def _norm_read(norm: nn.Module, h_in: torch.Tensor, h_out: torch.Tensor) -> NormRead:
    try:
        scale = float(norm.frozen(h_in.to(next(norm.parameters(), h_in).device)).scale.squeeze())
    except (AttributeError, UserError):  # a norm of a caller's own that does not say how it scales
        scale = None
    h = h_in.double()
    return NormRead(mean=float(h.mean()), scale=scale, size_in=float(h.norm()), size_out=float(h_out.double().norm()))


def residual_stream(model: nn.Module, idx, at: int = -1) -> ResidualStream:
    """The residual stream of one sequence at position `at` (negative: from the end), read by one listening pass."""
    idx = one_sequence(model, idx, "residual stream view")
    T = idx.shape[1]
    i = position(at, T)
    block_at(model, 0)  # a model with blocks, or a UserError
    blocks = list(model.blocks)
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(key: str):
        def hook(module, inputs, output):
            seen[key] = (inputs[0][0, i].detach().float().cpu(), output[0, i].detach().float().cpu())

        return hook

    # A block's "post" is the block's own output, what the next block reads (the same as its
    # hook_resid_post, unless an ablation's hook replaces the block's output: `:ablate block=L`).
    modules = {"token": model.token_embedding, "embed": model.hook_embed, "ln_f": model.ln_f}
    for b, block in enumerate(blocks):
        modules.update({f"{b}.ln_1": block.ln_1, f"{b}.attn": block.attn, f"{b}.mid": block.hook_resid_mid,
                        f"{b}.ln_2": block.ln_2, f"{b}.ffn": block.ffn, f"{b}.post": block})
    # ffn=off: a block has no ln_2 and no FFN to listen to (None), and attention's write is its last
    with listening_pass(model, [(module, keep(key)) for key, module in modules.items() if module is not None]):
        model(idx)

    token = float(seen["token"][1].double().norm())
    h = seen["embed"][1]
    p = None
    if model.position_embedding is not None:
        p = float((h.double() - seen["token"][1].double()).norm())  # h_0 - x = p
    post = blocks[0].post_norm
    writes = []
    for b in range(len(blocks)):
        halves = (("attn", "ln_1", "mid"), ("ffn", "ln_2", "post")) if blocks[b].ffn is not None else \
            (("attn", "ln_1", "post"),)  # the block's output: the stream after attention, or an ablation's
        for part, norm, out in halves:
            write = seen[f"{b}.{part}"][1]
            after = seen[f"{b}.{out}"][1]
            writes.append(StreamWrite(
                block=b, part=part, before=float(h.double().norm()),
                norm=_norm_read(getattr(blocks[b], norm), *seen[f"{b}.{norm}"]),
                write=float(write.double().norm()),
                cos=float(F.cosine_similarity(write.double(), h.double(), dim=0)),
                after=float(after.double().norm()),
            ))
            h = after
    final = None if post else _norm_read(model.ln_f, *seen["ln_f"])
    norm = blocks[0].ln_1
    return ResidualStream(idx[0].tolist(), i, "post" if post else "pre", getattr(norm, "label", "norm"),
                          getattr(norm, "divides_by", "scale"), blocks[0].residual, token, p,
                          float(seen["embed"][1].double().norm()), writes, final,
                          all(block.ffn is not None for block in blocks), unit_rms(norm))


# --- one norm at one position, worked by hand ----------------------------------------------------
NORMS = ("ln_1", "ln_2", "ln_f")  # before attention, before the FFN (after it, post-norm), before the head


@dataclass
class NormFeature:
    """One feature j of the vector a norm read, through each step of the norm."""

    index: int  # j
    x: float  # x_j, what the norm read
    centred: float  # x_j - mean(x) (RMSNorm: x_j, nothing subtracted)
    normalised: float  # x̂_j = centred / scale
    gain: float | None  # g_j (None: the norm learns no gain)
    bias: float | None  # b_j (None: no bias)
    out: float  # y_j = x̂_j g_j + b_j, what the norm hands on


@dataclass
class NormAtPosition:
    """The same norm at one position of the text: how big its input was, what it divided by, how big its output."""

    size_in: float  # |x|
    scale: float  # sqrt(var(x) + eps) (LN) or sqrt(mean(x^2) + eps) (RMSNorm)
    size_normalised: float  # |x̂|: sqrt(d) at every position, eps aside
    size_out: float  # |y|


@dataclass
class NormWorked:
    """One norm at one position, step by step: centre, scale, gain and bias; recomputed in float64 from what it read.

    LayerNorm: y = (x - mean(x)) / sqrt(var(x) + eps) * g + b, var over the d features (not unbiased);
    RMSNorm: y = x / sqrt(mean(x^2) + eps) * g. Each step's vector is summed up by its size, and the
    features with the largest |x_j| are shown one by one: they set the scale every feature is divided by.
    """

    token_ids: list[int]  # the text read
    at: int  # the position worked out
    which: str  # "ln_1", "ln_2" or "ln_f"
    layer: int | None  # the block (None: ln_f)
    label: str  # "LN" or "RMSNorm"
    centres: bool  # subtracts the mean first (LN) or not (RMSNorm)
    reads: str  # what the norm reads, in the model's own words
    feeds: str  # what reads its output
    d: int  # the features of one position (d_model)
    eps: float  # the norm's own, under the square root
    mean: float  # mean(x) over the d features
    var: float  # var(x) = mean((x - mean)^2)
    mean_square: float  # mean(x^2) = var + mean^2
    scale: float  # what the norm divides by: sqrt(var + eps) (LN), sqrt(mean(x^2) + eps) (RMSNorm)
    other_scale: float  # what the other kind would divide by: rms for LN, std for RMSNorm
    size_in: float  # |x|
    size_centred: float  # |x - mean| (RMSNorm: |x|)
    size_normalised: float  # |x̂|: sqrt(d) for either kind, eps aside
    normalised_mean: float  # mean(x̂): 0 after centring
    normalised_std: float  # std(x̂): 1 for LN, eps aside (RMSNorm: below 1 by as much as x's mean)
    size_out: float  # |y|
    gain: tuple[float, float, float] | None  # min, mean, max of g (None: no gain)
    bias_size: float | None  # |b| (None: no bias)
    features: list[NormFeature]  # the k features with the largest |x_j|, largest first
    features_share: float  # their share of sum_j (x_j - mean)^2 (RMSNorm: of sum_j x_j^2), what sets the scale
    positions: list[NormAtPosition]  # every position of the text through the same norm
    model_diff: float  # max_j |y_j - the model's own output| at this position


def _which_norm(model: nn.Module, which: str, layer: int) -> tuple[nn.Module, str, str]:
    """The norm `which` of block `layer` (ln_f: the final one), with what it reads and what reads its output."""
    if which not in NORMS:
        raise UserError(f"which norm: one of {', '.join(NORMS)}, got {which!r}")
    block = block_at(model, layer)
    post, residual = block.post_norm, block.residual
    if which == "ln_2" and block.ln_2 is None:
        raise UserError(f"block {layer} has no ln_2: with ffn=off it has no FFN, nor the norm "
                        f"{'after' if post else 'before'} it; choose which=ln_1, or ffn=on (a new model)",
                        fix={"ffn": True})
    if which == "ln_f":
        if post:  # the block says which norm ends it: ln_2 after its FFN, ln_1 where it has none (ffn=off)
            last, choose = ("ln_2", "which=ln_1 or which=ln_2") if block.ln_2 is not None else ("ln_1", "which=ln_1")
            raise UserError(f"a post-norm model has no final norm (each block's {last} normalises its output already); "
                            f"choose {choose}")
        return model.ln_f, "the stream after the last block", "the output head: logits = ln_f(h) W_U^T"
    add = "h + " if residual else ""
    first = which == "ln_1"
    part = "Attention" if first else "FFN"
    if post:  # the norm comes after the add: it reads the sum, and its output is the stream itself
        return (getattr(block, which), f"{add}{part}(h) in block {layer}",
                "the stream: " + ("the FFN of the same block" if first and block.ffn is not None else "the next block"
                                  if layer + 1 < len(model.blocks) else "the output head"))
    where = f"the stream entering block {layer}" if first else f"the stream after block {layer}'s attention"
    if not residual:
        where += " (with residual=off: the last sublayer's output)" if (layer or not first) else ""
    return getattr(block, which), where, f"the {part.lower() if first else part} of block {layer}"


def norm_worked(model: nn.Module, idx, layer: int = 0, which: str = "ln_1", at: int = -1, top: int = 8) -> NormWorked:
    """Norm `which` (ln_1, ln_2, ln_f) of block `layer` at position `at`, worked out step by step in float64.

    One listening pass reads what the norm read and wrote at every position; the steps are redone
    here from the norm's own eps, gain and bias (as its by_hand() states them) and checked against its output.
    """
    idx = one_sequence(model, idx, "norm view")
    T = idx.shape[1]
    i = position(at, T)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UserError(f"the number of features to list must be a whole number >= 1, got {top!r}")
    norm, reads, feeds = _which_norm(model, which, layer)
    # the norm says how it is worked out (norms.ByHand): reading its .eps, .weight and .bias and trusting `centres`
    # crashed on a norm without them, and showed one with them RMSNorm's or LayerNorm's arithmetic, not its own
    declared = getattr(norm, "by_hand", None)
    arithmetic = declared() if callable(declared) else None
    if arithmetic is None:
        raise UserError(f"this norm ({type(norm).__name__}) does not say how it is worked out by hand (by_hand(), "
                        "core/norms.py), so its arithmetic cannot be shown; use norm=layernorm or norm=rmsnorm")
    centres, eps = arithmetic.centres, float(arithmetic.eps)
    seen: dict[str, torch.Tensor] = {}

    def keep(module, inputs, output):
        seen["x"], seen["y"] = in_float64(inputs[0][0]).cpu(), in_float64(output[0]).cpu()

    with listening_pass(model, [(norm, keep)]):
        model(idx)
    xs = seen["x"]  # (T, d): every position
    means = xs.mean(dim=-1, keepdim=True)
    centred = xs - means if centres else xs
    squares = centred.pow(2).mean(dim=-1, keepdim=True)  # var (LN) or mean(x^2) (RMSNorm)
    scales = torch.sqrt(squares + eps)
    normalised = centred / scales
    weight, bias = arithmetic.gain, arithmetic.bias
    gain = None if weight is None else in_float64(weight).cpu()
    shift = None if bias is None else in_float64(bias).cpu()
    ys = normalised * (1.0 if gain is None else gain) + (0.0 if shift is None else shift)

    x, c, n, y = xs[i], centred[i], normalised[i], ys[i]
    mean, var, mean_square = float(means[i]), float(xs[i].var(unbiased=False)), float(xs[i].pow(2).mean())
    other = math.sqrt((var if not centres else mean_square) + eps)
    chosen = x.abs().argsort(descending=True)[: min(top, len(x))].tolist()
    features = [NormFeature(j, float(x[j]), float(c[j]), float(n[j]), None if gain is None else float(gain[j]),
                            None if shift is None else float(shift[j]), float(y[j])) for j in chosen]
    spread = c.pow(2)
    return NormWorked(
        token_ids=idx[0].tolist(), at=i, which=which, layer=None if which == "ln_f" else layer,
        label=getattr(norm, "label", "norm"), centres=centres, reads=reads, feeds=feeds, d=len(x), eps=eps,
        mean=mean, var=var, mean_square=mean_square, scale=float(scales[i]), other_scale=other,
        size_in=float(x.norm()), size_centred=float(c.norm()), size_normalised=float(n.norm()),
        normalised_mean=float(n.mean()), normalised_std=float(n.std(unbiased=False)), size_out=float(y.norm()),
        gain=None if gain is None else (float(gain.min()), float(gain.mean()), float(gain.max())),
        bias_size=None if shift is None else float(shift.norm()), features=features,
        features_share=float(spread[chosen].sum() / spread.sum().clamp_min(1e-300)),
        positions=[NormAtPosition(float(xs[t].norm()), float(scales[t]), float(normalised[t].norm()),
                                  float(ys[t].norm())) for t in range(T)],
        model_diff=float((y - seen["y"][i]).abs().max()),
    )


# --- the feed-forward's hidden units at one position -------------------------------------------------
@dataclass
class Neuron:
    """One hidden unit n of a feed-forward part at one position: FFN(x) = sum_n u_n v_n + b_out."""

    index: int
    pre: float  # its pre-activation (x W_1 + b_1)_n (SwiGLU: the gate's, (x W_g)_n)
    h: float  # its activation u_n (the views' u: h is the stream), what the output projection reads
    write: float  # |u_n v_n|: the length of what it adds to the residual stream
    promotes: list[int] | None  # the tokens whose logit u_n v_n raises most (None: a post-norm model)
    promote_by: list[float] | None  # by how much, read through the final norm frozen at this input
    demotes: list[int] | None  # the tokens whose logit it lowers most
    demote_by: list[float] | None


@dataclass
class FeedForwardNeurons:
    token_ids: list[int]
    layer: int
    at: int
    hidden: str  # the formula of the units u, as the part states it: "GELU(xW_1 + b_1)"
    pre_name: str  # the formula of the pre-activation: "xW_1 + b_1" (SwiGLU: "xW_g", its gate's)
    below_zero: str  # what a u_n below 0 means for this part, as it states it
    width: int  # hidden units
    positive: int  # units with u_n > 0
    negative: int  # units with u_n < 0 (GELU and SiLU let small negatives through; ReLU never)
    lowest: float  # the most negative u_n
    total_write: float  # sum_n |u_n v_n|
    out_size: float  # |FFN(x)| = |sum_n u_n v_n + b_out|: below total_write where the writes cancel
    neurons: list[Neuron]  # the `top` units with the largest |u_n v_n|, largest first
    out_diff: float  # max |sum_n u_n v_n + b_out - the block's FFN output|: rounding
    out_bias: bool  # the output matrix has a bias b_out (False: bias=off, FFN(x) = sum_n u_n v_n)
    no_tokens: str | None = None  # why the units' tokens are not read (post-norm, residual=off): None when they are


def feed_forward_neurons(model: nn.Module, idx, layer: int = 0, at: int = -1, top: int = 8,
                         tokens: int = 3) -> FeedForwardNeurons:
    """Block `layer`'s feed-forward part at position `at`, as a sum of its hidden units' writes.

    The part says which of its modules make the pre-activation and the output (`neurons()`), one
    listening pass reads them, and the output is rebuilt as sum_n u_n v_n + b_out. What a unit's
    write does to the logits is read as :attrib reads a part: through the final norm frozen at this
    input's scale, then the output head (pre-norm models only).
    """
    idx = one_sequence(model, idx, "feed-forward view")
    T = idx.shape[1]
    block = block_at(model, layer)
    i = position(at, T)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UserError(f"the number of units to list must be a whole number >= 1, got {top!r}")
    if block.ffn is None:
        raise UserError(f"block {layer} has no feed-forward network: this model was built with ffn=off, attention "
                        "only; ffn=on builds one into every block (a new model: its weights start again)",
                        fix={"ffn": True})
    from .ablation import skipped_blocks

    if layer in skipped_blocks(model):  # its FFN output is zeroed after fc_out, which the units below are read from
        raise UserError(f"block {layer} is skipped now (:ablate block={layer}), so its feed-forward writes nothing to "
                        "the stream; :ablate off puts it back, or choose another layer=")
    ffn = block.ffn
    describe = getattr(ffn, "neurons", None)
    if describe is None:
        raise UserError(f"block {layer}'s feed-forward part ({type(ffn).__name__}) does not say what its hidden units "
                        "are (neurons()), so there are no units to list")
    parts = describe()
    seen: dict[str, torch.Tensor] = {}

    def keep(key: str, read_input: bool):
        def hook(module, inputs, output):
            seen[key] = in_float64((inputs[0] if read_input else output)[0, i]).cpu()

        return hook

    hooks = [(parts.pre, keep("pre", False)), (parts.out, keep("h", True)), (parts.out, keep("out", False)),
             (model.ln_f, keep("end", True))]
    with listening_pass(model, hooks):
        model(idx)
    pre, h, out = seen["pre"], seen["h"], seen["out"]
    values = in_float64(parts.out.weight).cpu()  # (d, hidden): column n is v_n
    bias = in_float64(parts.out.bias).cpu() if parts.out.bias is not None else torch.zeros(values.shape[0])
    writes = h[None, :] * values  # (d, hidden): column n is u_n v_n
    sizes = writes.norm(dim=0)
    rebuilt = writes.sum(dim=1) + bias
    chosen = sizes.argsort(descending=True)[: min(top, len(sizes))]

    frozen = getattr(model.ln_f, "frozen", None)
    no_tokens = None  # why a write's own effect on the logits cannot be read here
    if block.post_norm:
        no_tokens = ("a post-norm model renormalises the stream after every sublayer, so a write's effect on the "
                     "logits is not its own")
    elif not block.residual and block is not model.blocks[-1]:
        no_tokens = ("with residual=off the next sublayer's output replaces this one's, so its writes reach the "
                     "head only through every later block")
    through = None  # the final norm frozen at this input's scale (core.norms.FrozenNorm)
    if no_tokens is None:
        end = seen["end"].float().to(model.lm_head.weight.device)
        try:
            through = frozen(end) if callable(frozen) else None
        except UserError:  # NormPart.frozen's default says "cannot be frozen" by raising (as _norm_read's reading)
            through = None
        if through is None:  # a norm of a caller's own (ScaleNorm, DyT): the units are still listed, without tokens
            no_tokens = (f"the final norm ({getattr(model.ln_f, 'label', type(model.ln_f).__name__)}) does not say "
                         "how to freeze its scale (a frozen(x) method, core.norms.NormPart), so a write cannot be read "
                         "through it")
    logits = None
    if through is not None:
        read = through.linear(writes[:, chosen].T.float().to(end.device))  # (k, d): each write through the norm
        logits = in_float64(read @ model.lm_head.weight.detach().T).cpu()  # (k, V)
    neurons = []
    for row, n in enumerate(chosen.tolist()):
        up = down = None
        if logits is not None:
            k = min(tokens, logits.shape[1])
            up, down = logits[row].topk(k), (-logits[row]).topk(k)
        neurons.append(Neuron(
            index=n, pre=float(pre[n]), h=float(h[n]), write=float(sizes[n]),
            promotes=None if up is None else up.indices.tolist(), promote_by=None if up is None else up.values.tolist(),
            demotes=None if down is None else down.indices.tolist(),
            demote_by=None if down is None else (-down.values).tolist(),
        ))
    return FeedForwardNeurons(
        token_ids=idx[0].tolist(), layer=layer, at=i, hidden=parts.hidden, pre_name=parts.pre_name,
        below_zero=parts.below_zero, width=len(h),
        positive=int((h > 0).sum()), negative=int((h < 0).sum()), lowest=float(h.min()),
        total_write=float(sizes.sum()), out_size=float(out.norm()), neurons=neurons,
        out_diff=float((rebuilt - out).abs().max()), out_bias=parts.out.bias is not None, no_tokens=no_tokens,
    )


# --- decoding with the KV cache and without ---------------------------------------------------------
@dataclass
class DecodeStep:
    token: int  # the naive loop's pick (greedy: its largest logit); both loops then read it
    cached_token: int  # the cached loop's largest logit: the same token unless two logits tie within rounding
    cached_positions: int  # positions the cached loop ran through the model this step (1, or the prefill)
    naive_positions: int  # positions the naive loop ran: the whole text so far, up to max_seq_len
    cache_length: int  # keys and values per layer the cache holds after this step
    refilled: bool  # the cache was (re)filled: the first step, or the window slid past max_seq_len
    logit_diff: float  # max |cached logits - naive logits| at the step's last position: rounding
    logit_size: float = 0.0  # max |naive logits| there: float32 rounds in proportion to it (1e11: differences of 7e4)


@dataclass
class CachedDecoding:
    """Greedy decoding of one prompt twice, step by step: with the KV cache (each step feeds the newest
    token only; its k and v are appended, its q reads every cached key) and with the naive loop
    (each step runs the whole text again). Both are the readable model (core.model)."""

    prompt_ids: list[int]
    steps: list[DecodeStep]
    cache_bytes_per_token: int  # K and V of every layer for one position, as the cache stores them
    cached_seconds: float  # wall time of the cached loop, measured here
    naive_seconds: float


@torch.inference_mode()
def cached_decoding(model: nn.Module, prompt_ids: list[int], n: int = 8, should_stop=None,
                    on_step=None) -> CachedDecoding:
    """Decode `n` tokens after `prompt_ids` greedily with the KV cache and with the naive loop, and compare.
    `should_stop()`, asked before each step of the naive loop, ends it there (a Ctrl-C: 1,024 steps of a large model
    are a long wait), and the cached loop, the cheap one, then takes the same steps; `on_step(done, total)` hears
    each step of the two loops (2n)."""
    require_model(model, "cached_decoding")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise UserError(f"the number of tokens to decode must be a whole number >= 1, got {n!r}")
    ids = one_sequence(model, list(prompt_ids), "decoding view")[0].tolist()
    device = next(model.parameters()).device
    window = model.config.max_seq_len
    with evaluating(model):
        model(torch.tensor([ids[-window:]], device=device))  # untimed: the first pass pays for the kernels' set-up
        start = time.perf_counter()
        naive, text = [], list(ids)
        for _ in range(n):  # the seed's loop: the whole text (its last max_seq_len tokens) every step
            if should_stop is not None and should_stop():
                break
            if on_step is not None:
                on_step(len(naive), 2 * n)
            logits, _ = model(torch.tensor([text[-window:]], device=device))
            naive.append((min(len(text), window), in_float64(logits[0, -1]).cpu()))
            text.append(int(naive[-1][1].argmax()))
        naive_seconds = time.perf_counter() - start

        start = time.perf_counter()
        cached, kv, text = [], None, list(ids)
        for _, naive_logits in naive:  # no stop asked here: a stop that came during the naive loop stays asked
            if on_step is not None:
                on_step(n + len(cached), 2 * n)
            refill = kv is None or kv.length >= window  # as core.generate: past the window, start again
            if refill:
                kv = model.new_cache()
            fed = text[-window:] if refill else text[-1:]  # the whole window once, then the newest token only
            logits, _ = model(torch.tensor([fed], device=device), cache=kv)
            cached.append((len(fed), kv.length, refill, in_float64(logits[0, -1]).cpu()))
            text.append(int(naive_logits.argmax()))  # the naive loop's pick: both loops read the same text
        cached_seconds = time.perf_counter() - start
    steps = [DecodeStep(token=int(n_logits.argmax()), cached_token=int(c_logits.argmax()), cached_positions=fed,
                        naive_positions=n_fed, cache_length=length, refilled=refill,
                        logit_diff=float((c_logits - n_logits).abs().max()), logit_size=float(n_logits.abs().max()))
             for (fed, length, refill, c_logits), (n_fed, n_logits) in zip(cached, naive)]
    block = model.blocks[0].attn
    per_token = 2 * len(model.blocks) * block.n_kv_heads * block.head_dim * next(model.parameters()).element_size()
    return CachedDecoding(ids, steps, per_token, cached_seconds, naive_seconds)


# --- the next-token microscope -------------------------------------------------------------


@dataclass
class TokenStage:
    """One token's way through the sampler (a row of the microscope)."""

    id: int
    logit: float
    scaled: float | None  # (z - max z) / temperature; None when greedy
    top_k_kept: bool
    top_p_kept: bool  # survived both filters
    prob: float  # the renormalised probability that this token is picked


@dataclass
class NextTokenPipeline:
    token_ids: list[int]  # the context the model read: the prompt's last max_seq_len ids, as generate reads it
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int  # the generator's seed (drawn at random when none was given), so the pick can be repeated
    rows: list[TokenStage]  # the `top` highest logits, best first
    n_top_k_kept: int
    n_top_p_kept: int  # survivors of both filters: the tokens that can be picked
    picked: int
    picked_prob: float
    picked_rank: int  # 1 = the highest logit
    stages: SamplingStages  # the whole vocabulary, stage by stage (CPU float64 tensors)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("rows", "stages")}
        d["rows"] = [vars(r).copy() for r in self.rows]
        return d


def next_token_pipeline(
    model: nn.Module,
    idx,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    top: int = 10,
) -> NextTokenPipeline:
    """What happens to the logits of the last position before one token is picked.

    The stages come from `core.generate.sampling_stages` and the pick from `core.generate.pick`,
    the same code `generate` runs, and the model reads the prompt the way `generate` does (its
    last max_seq_len ids, one prefill into a fresh KV cache), so with the same seed the pick is
    the first token `generate(model, prompt, GenConfig(n=1, temperature=temperature, top_k=top_k, top_p=top_p,
    gen_seed=seed))` yields.
    """
    require_model(model, "next_token_pipeline")
    check_sampling(temperature, top_k, top_p, 1)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UserError(f"top (rows to show) must be a whole number >= 1, got {top!r}")
    if isinstance(idx, torch.Tensor) and idx.dim() == 2 and idx.shape[0] == 1:
        idx = idx[0]
    if isinstance(idx, torch.Tensor) and idx.dim() == 1:
        idx = idx[-model.config.max_seq_len :]
    elif isinstance(idx, (list, tuple)):
        idx = list(idx)[-model.config.max_seq_len :]
    idx = one_sequence(model, idx, "next-token view")
    if seed is None:  # a fresh one, within what gen_seed= takes, so that the `:gen ... seed=` a view offers runs
        seed = torch.Generator().seed() % (GenConfig.spec("gen_seed").limit + 1)
    generator = torch.Generator()
    generator.manual_seed(seed)
    with listening(model, {}):
        logits, _ = model(idx, cache=model.new_cache())  # (1, T, V)
    stages = sampling_stages(logits[0, -1], temperature, top_k, top_p)
    picked = pick(stages, generator)
    order = torch.argsort(stages.logits, descending=True, stable=True)  # (V,) best first
    rows = [
        TokenStage(
            id=i,
            logit=float(stages.logits[i]),
            scaled=None if stages.scaled is None else float(stages.scaled[i]),
            top_k_kept=bool(stages.top_k_kept[i]),
            top_p_kept=bool(stages.top_p_kept[i]),
            prob=float(stages.probs[i]),
        )
        for i in order[:top].tolist()
    ]
    return NextTokenPipeline(
        token_ids=idx[0].tolist(),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=generator.initial_seed(),
        rows=rows,
        n_top_k_kept=int(stages.top_k_kept.sum()),
        n_top_p_kept=int(stages.top_p_kept.sum()),
        picked=picked,
        picked_prob=float(stages.probs[picked]),
        picked_rank=int((order == picked).nonzero()[0, 0]) + 1,
        stages=stages,
    )


# --- the logit lens -------------------------------------------------------------------------


@dataclass
class LensLayer:
    # "embed" (h_0, the embedding output), then "blocks.0", "blocks.1", ... (after each block, its FFN
    # included); at="mid" reads "blocks.0.mid", ... (after each block's attention, before its FFN)
    name: str
    top_ids: list[list[int]]  # [position][k]: the `top` most likely next tokens, best first
    top_probs: list[list[float]]  # [position][k]
    target_ranks: list[int | None] | None  # [position]: 1 = the most likely; None where the target is -1
    target_probs: list[float | None] | None


@dataclass
class LogitLens:
    token_ids: list[int]  # the sequence, length T
    targets: list[int] | None  # [position]: the true next token, -1 where unknown
    layers: list[LensLayer]  # "embed" first, the last block last
    logits: torch.Tensor  # (len(layers), T, V) float32 on the CPU: lm_head(ln_f(h_l)); the last row is the model's

    def to_dict(self) -> dict:
        return {
            "token_ids": self.token_ids,
            "targets": self.targets,
            "layers": [vars(layer).copy() for layer in self.layers],
        }


LENS_AT = ("end", "mid", "both")  # where in each block the lens reads: after the FFN, after attention, or both


def lens_probes(model: nn.Module, at: str = "end") -> dict[str, nn.Module]:
    """Name -> the probe the lens reads there: "embed", then per block "blocks.L.mid" and/or "blocks.L"."""
    if at not in LENS_AT:
        raise UserError(f"at must be one of {', '.join(LENS_AT)}, got {at!r}")
    probes = {"embed": model.hook_embed}
    mids, ends = block_probes(model, "hook_resid_mid"), block_probes(model, "hook_resid_post")
    for layer, end in ends.items():
        if at in ("mid", "both"):
            probes[f"blocks.{layer}.mid"] = mids[layer]  # x + Attention(LN(x)): the FFN still to come
        if at in ("end", "both"):
            probes[f"blocks.{layer}"] = end
    return probes


def logit_lens(model: nn.Module, idx, top: int = 5, targets=None, at: str = "end",
               last_only: bool = False) -> LogitLens:
    """Read the residual stream as if the model ended there: lm_head(ln_f(h)) after the embedding and each block.

    `at`: "end" reads each block's output (after its FFN), "mid" each block's middle (after its
    attention, before its FFN), "both" the two in order.

    Every position is read (a view may show the whole sequence or only its last position), or with
    `last_only` the last one alone: the head costs T * V * d per layer, which with a real vocabulary
    (GPT-2's 50,257) is several times the forward pass itself. The last layer's logits are the
    model's own. `targets` ((T,) ids, -1 where unknown) adds each layer's rank and probability of
    the target; for "the true next token" pass idx[1:] followed by -1. With `last_only` every
    per-position list (and `logits`, `targets`) has one entry, the last position's.
    """
    require_model(model, "logit_lens")
    idx = one_sequence(model, idx, "logit lens")
    T = idx.shape[1]
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise UserError(f"top (tokens per layer) must be a whole number >= 1, got {top!r}")
    target_list = None
    if targets is not None:
        target_list = (targets.flatten() if isinstance(targets, torch.Tensor) else torch.tensor(list(targets))).tolist()
        V = model.config.vocab_size
        if len(target_list) != T or any(not isinstance(t, int) or not -1 <= t < V for t in target_list):
            raise DataError(
                f"targets must be {T} token ids in 0..{V - 1}, one per position (-1 where unknown); "
                "give the next token of each position"
            )
    probes = lens_probes(model, at)
    read = slice(T - 1, T) if last_only else slice(0, T)
    if target_list is not None:
        target_list = target_list[read]
    with listening(model, probes) as seen:
        model(idx)
        logits = torch.stack([model.lm_head(model.ln_f(seen[name][:, read]))[0] for name in probes])  # (L+1, T, V)
    logits = logits.float().cpu()
    probs = torch.softmax(logits, dim=-1)  # (L+1, T, V)
    k = min(top, probs.shape[-1])
    top_probs, top_ids = torch.topk(probs, k, dim=-1)  # (L+1, T, k)
    layers = []
    for layer, name in enumerate(probes):
        ranks = target_probs = None
        if target_list is not None:
            ranks, target_probs = [], []
            for t, target in enumerate(target_list):
                if target < 0:
                    ranks.append(None)
                    target_probs.append(None)
                    continue
                p = probs[layer, t]
                ranks.append(int((p > p[target]).sum()) + 1)
                target_probs.append(float(p[target]))
        layers.append(LensLayer(name, top_ids[layer].tolist(), top_probs[layer].tolist(), ranks, target_probs))
    return LogitLens(token_ids=idx[0].tolist(), targets=target_list, layers=layers, logits=logits)


# --- teacher forcing -----------------------------------------------------------------------------
@dataclass
class TeacherForcing:
    """Every next token of one text, scored by one forward pass: what training does to each row of a batch.

    The model reads tokens 0..T-2 and, at every position t at once, predicts token t+1 from tokens
    0..t only (the causal mask); the loss is the mean of the T-1 surprises -ln p(x_{t+1} | x_<=t).
    """

    token_ids: list[int]  # the text's T tokens
    target_probs: list[float]  # p(x_{t+1} | x_0..x_t) for t = 0..T-2: the true next token's probability
    losses: list[float]  # -ln target_probs: each position's share of the loss
    guess_ids: list[int]  # the likeliest next token at each position
    guess_probs: list[float]  # its probability
    counted: list[bool]  # the predictions the loss counts (a task's answer; every one in a text)
    loss: float  # the mean of the counted `losses`: the forward's own cross-entropy on this text


def scored_text(model: nn.Module, idx, counted: list[bool] | None, view: str
                ) -> tuple[torch.Tensor, torch.Tensor, list[bool]]:
    """A text as teacher forcing reads it: the (1, T-1) inputs, the (1, T-1) targets (the text shifted by one:
    each position's answer) and the T-1 flags saying which predictions the loss counts (default all)."""
    idx = one_sequence(model, idx, view)
    window = model.config.max_seq_len
    if idx.shape[1] > window + 1:
        raise UserError(f"teacher forcing reads at most max_seq_len + 1 = {window + 1} tokens (the model sees "
                        f"{window} and predicts the one after each), got {idx.shape[1]}; give a shorter text")
    if idx.shape[1] < 2:
        raise UserError("teacher forcing needs at least two tokens, one to read and the one after it to predict; "
                        "give a longer text")
    n = idx.shape[1] - 1
    counted = [True] * n if counted is None else list(counted)
    if len(counted) != n or not any(counted):
        raise UserError(f"counted must flag the {n} predictions, at least one of them True; "
                        "leave it out to count every one")
    return idx[:, :-1], idx[:, 1:], counted


def teacher_forcing(model: nn.Module, idx, counted: list[bool] | None = None) -> TeacherForcing:
    """Score every next token of `idx` ((T,) or (1, T) ids, T <= max_seq_len + 1) in one forward pass.

    `counted` (T - 1 flags, default all): which predictions the loss counts, as a task's batches count
    only the answer's (core.data: targets -1 elsewhere)."""
    require_model(model, "teacher_forcing")
    inputs, targets, counted = scored_text(model, idx, counted, "teacher-forcing view")
    with listening_pass(model):
        logits, _ = model(inputs)
    log_probs = torch.log_softmax(logits[0].float().cpu(), dim=-1)  # (T - 1, V)
    # -ln p(x_{t+1} | x_<=t); + 0.0 turns the -0.0 of a certain pick (ln 1 = 0) into 0.0, which :score printed as -0.000
    surprise = -log_probs.gather(1, targets[0].cpu()[:, None])[:, 0] + 0.0
    best, guess = log_probs.max(dim=-1)
    ids = inputs[0].tolist() + [int(targets[0, -1])]
    return TeacherForcing(ids, surprise.neg().exp().tolist(), surprise.tolist(), guess.tolist(),
                          best.exp().tolist(), counted, float(surprise[torch.tensor(counted)].mean()))


# --- the embeddings' neighbours ----------------------------------------------------------------------
@dataclass
class EmbeddingNeighbours:
    """Which tokens the model treats alike: the rows of W_E nearest each asked token's, and how alike the
    position table's rows are by distance. Similarity is the cosine, u.v / (|u| |v|): 1 for the same
    direction, about 0 for unrelated rows (an untrained model's random ones)."""

    token_ids: list[int]  # the tokens asked about
    neighbour_ids: list[list[int]]  # for each, the k other tokens whose W_E rows are most alike, most alike first
    similarities: list[list[float]]  # their cosine similarities to it
    by_distance: list[float] | None  # d = 1, 2, ...: the mean cosine between position rows d apart (None: no table)


def check_neighbours_asked(model: nn.Module, token_ids: list[int], k, who: str) -> int:
    """A model, k and token ids a neighbours' question can be asked with (embedding_neighbours, and likeness's of the
    head's rows); the vocabulary's size V."""
    require_model(model, who)
    V = model.config.vocab_size
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise UserError(f"k (neighbours per token) must be a whole number >= 1, got {k!r}")
    if not token_ids or any(not isinstance(i, int) or not 0 <= i < V for i in token_ids):
        raise DataError(f"token ids must be in 0..{V - 1}, at least one; encode the text first")
    return V


def embedding_neighbours(model: nn.Module, token_ids: list[int], k: int = 5,
                         trained: int | None = None, among: list[int] | None = None) -> EmbeddingNeighbours:
    """The k nearest tokens (cosine similarity of W_E rows) to each of `token_ids`, and the position table's
    mean similarity by distance where the model adds positions at its input (learned or sinusoidal).

    `trained`: the position table's first rows only, where a model trains on rows shorter than its window (a task's
    8 of 32): a learned table's rows past them never get a gradient and stay the random rows they started as,
    whose cosines near 0 would be averaged in with the trained ones (0.12 at distance 1 where the 8 read 0.53).
    `among`: the only ids a neighbour may be (default: any), such as the tokens a text holds where the rows of the
    others never trained."""
    V = check_neighbours_asked(model, token_ids, k, "embedding_neighbours")
    with torch.no_grad():
        rows = F.normalize(model.token_embedding.weight.detach().float().cpu(), dim=-1)  # (V, d), unit length
        similar = rows[token_ids] @ rows.T  # (n, V): cosines
        similar[torch.arange(len(token_ids)), token_ids] = -math.inf  # a token is not its own neighbour
        candidates = V - 1
        if among is not None:
            allowed = torch.zeros(V, dtype=torch.bool)
            allowed[list(among)] = True
            similar[:, ~allowed] = -math.inf
            candidates = max(1, int(allowed.sum()) - 1)  # the asked token among them is not its own neighbour
        top, ids = similar.topk(min(k, candidates), dim=-1)
        by_distance = None
        if model.position_embedding is not None:
            T = model.config.max_seq_len if trained is None else max(1, min(trained, model.config.max_seq_len))
            table = F.normalize(model.position_embedding(torch.arange(T, device=model.token_embedding.weight.device))
                                .detach().float().cpu(), dim=-1)  # (T, d)
            cos = table @ table.T
            by_distance = [float(cos.diagonal(d).mean()) for d in range(1, T)]
    finite = top.isfinite()  # fewer candidates than k (a short `among`): the rest are none
    return EmbeddingNeighbours(list(token_ids), [row[keep].tolist() for row, keep in zip(ids, finite)],
                               [row[keep].tolist() for row, keep in zip(top, finite)], by_distance)


@dataclass
class EmbeddingMap:
    """The rows of W_E seen along the two directions in which they differ most: their first two principal
    components. With X the rows minus their mean row and X = U S V^T its SVD, direction k is row k of V^T and a
    token's coordinate on it is its centred row's projection, x . v_k; the share of the rows' variance along it
    is s_k^2 / sum s^2. Tokens near each other on the map have rows alike in those two directions (the
    rest of the d dimensions are left out, so close here is not close everywhere: `:embed`'s cosines are)."""

    coords: list[list[float]]  # token id (or the k-th of `among`) -> [x . v_1, x . v_2]
    explained: list[float]  # the share of the variance along v_1 and along v_2
    dims: int  # d_model: how many directions there are in all


def check_map(V: int, d: int) -> None:
    """A UserError where a table of V rows of width d has no two directions to map (`:train watch=embed` asks
    before it changes anything)."""
    if min(V - 1, d) < 2:
        raise UserError(f"a map needs two directions in which the rows differ, and {V} rows of width {d} have "
                        f"{min(V - 1, d)}; use a model with d_model >= 2 and data of three or more tokens")


def trained_tokens(tied: bool, data) -> list[int] | None:
    """The rows of W_E that train, in order, for a map or a list of neighbours: the tokens the training text holds,
    where the table is untied (an input row gets a gradient only where its token is read: a byte-level BPE's hundreds
    of bytes a text never holds stay the random rows they started as); None, every row, where it is tied (a row also
    learns as the output head, from every prediction) or the data has no text."""
    splits = getattr(data, "splits", None)
    if tied or splits is None:
        return None
    return sorted(set(splits["train"].tolist()))


def embedding_map(model: nn.Module, among: list[int] | None = None) -> EmbeddingMap:
    """The first two principal components of the token embedding table W_E (float64 SVD of its centred rows).

    A direction's sign is arbitrary (v and -v are the same axis), so each is turned to give its farthest
    token a positive coordinate: the same table draws the same map every time. `among`: those rows only, in that
    order (coords[k] is row among[k]'s), such as the tokens a text holds where the others' rows never trained."""
    require_model(model, "embedding_map")
    with torch.no_grad():
        rows = in_float64(model.token_embedding.weight).cpu()  # (V, d)
    if among is not None:
        rows = rows[list(among)]
    V, d = rows.shape
    check_map(V, d)
    centred = rows - rows.mean(dim=0)
    _, S, Vh = torch.linalg.svd(centred, full_matrices=False)
    coords = centred @ Vh[:2].T  # (V, 2)
    far = coords.abs().argmax(dim=0)  # per direction, the token farthest along it
    coords = coords * coords[far, torch.arange(2)].sign()
    variance = S.pow(2)
    return EmbeddingMap(coords.tolist(), (variance[:2] / variance.sum()).tolist(), d)


# --- the probability of each generated token --------------------------------------------------------


PROB_LOGITS = 2**22  # logits a batch of token_probs' windows holds at most (16 MiB of float32)


def token_probs(model: nn.Module, prompt_ids: list[int], new_ids: list[int], settings: GenConfig) -> list[float]:
    """The probability each generated token had when it was picked (`:gen show=probs`).

    Recomputed from the model with `core.generate.sampling_stages`, the sampler's own rules under
    `settings` (temperature, top_k, top_p), on the context generate read: the last max_seq_len tokens
    before each new one. While the text fits the window one pass reads them all; past it each token's
    context is a window of its own, and those windows go through the model as batches
    (PROB_LOGITS a pass): a pass each took as long as the generating had, and 3,000 tokens
    showed nothing for 20 s. Without the causal mask a position also reads the tokens after it,
    which did not exist when it was the newest, so there every token reads a window of its own.
    """
    require_model(model, "token_probs")
    if not new_ids:
        return []
    window = model.config.max_seq_len
    device = next(model.parameters()).device
    tokens = list(prompt_ids) + list(new_ids)
    contexts = [tokens[max(0, len(prompt_ids) + i - window) : len(prompt_ids) + i] for i in range(len(new_ids))]
    rows: list[torch.Tensor] = []
    per_pass = max(1, PROB_LOGITS // (window * model.config.vocab_size))
    with listening(model, {}):
        done = 0
        if model.causal:  # the tokens whose context starts the text, within the window: one pass over them all
            done = max(0, min(len(new_ids), window - len(prompt_ids) + 1))
            if done:
                logits, _ = model(torch.tensor([tokens[: len(prompt_ids) + done - 1]], device=device))
                rows += [logits[0, len(prompt_ids) - 1 + i] for i in range(done)]
        while done < len(contexts):  # the others: contexts of one length (a full window), per_pass at a time
            end = done + 1
            while end < len(contexts) and end - done < per_pass and len(contexts[end]) == len(contexts[done]):
                end += 1
            logits, _ = model(torch.tensor(contexts[done:end], device=device))
            rows += list(logits[:, -1])
            done = end
        out = []
        for z, token in zip(rows, new_ids):
            stages = sampling_stages(z, settings.temperature, settings.top_k, settings.top_p)
            out.append(float(stages.probs[token]))
    return out
