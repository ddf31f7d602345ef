"""Backpropagation on one text, seen from inside: the loss's gradient on its way down the residual
stream, every part's gradient, the output head's gradient worked out by hand, and backprop's answer
checked against the loss's slope measured by nudging the weights.

The loss is teacher forcing's on the text x_0..x_T (core.inside.scored_text): the model reads
x_0..x_{T-1} and L = mean over the counted t of -ln p(x_{t+1} | x_<=t), the cross-entropy :train
minimises on each row of a batch. Backprop runs the chain rule from L down:

    dL/dz_t = (softmax(z_t) - onehot(x_{t+1})) / N      the logits' gradient (N: the predictions counted)
    pre-norm  h' = h + f(LN(h)):   dL/dh = g' + J^T g'       g' = dL/dh' goes down the skip path untouched,
                                                         and J^T g' back through the sublayer adds to it
    post-norm h' = LN(h + f(h)):   g_s = J_LN^T g',  dL/dh = g_s + J_f^T g_s    the norm is on the skip path too

One forward pass in eval mode (dropout off, core.probe.listening with gradients) keeps the stream
tensors the hooks see; torch.autograd.grad then asks for the gradient of L with respect to them and to
every parameter, so nothing is written into a parameter's .grad (a stopped run keeps its own) and no
weight changes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call

from .errors import UserError
from .inside import block_at, scored_text
from .interrupts import held
from .optimizers import follow_dtype
from .precision import autocast, training_dtype
from .probe import listening

# The check runs the model on a float64 copy of its parameters (8 bytes each); above this many it is
# not made (GPT-2 small's 124M would take 1 GB and minutes on a CPU).
CHECK_LIMIT = 30_000_000
CHECK_EPSILON = 1e-4  # how far the check nudges the weights along a unit direction (float64: the slope to ~1e-9)

_PART = re.compile(r"^blocks\.(\d+)\.(attn|ffn|ln_1|ln_2)\.")
_PART_NAMES = {"attn": "attention", "ffn": "FFN", "ln_1": "norms", "ln_2": "norms"}


@dataclass
class StreamGradient:
    """The gradient passing one sublayer on its way down the stream; every size is over the whole text (T x d)."""

    block: int  # the block the sublayer is in (0: the first); the rows run from the last block down
    part: str  # "attn" or "ffn"
    arrives: float  # |g'| = |dL/dh'|: the gradient at the stream the sublayer wrote
    skip: float  # |g_s|: what the residual add hands straight down (pre-norm: g' itself; post-norm: J_LN^T g';
    #               residual=off: 0, there is no add)
    through: float  # |J^T g_s|: what goes back through the sublayer into the stream below
    cos: float  # cos(J^T g_s, g_s): > 0 the sublayer's path adds to the skip's, < 0 it takes some back
    leaves: float  # |dL/dh| = |g_s + J^T g_s|: the gradient the stream below receives
    skipped: bool = False  # `:ablate block=L`: the block is skipped, the gradient passes it untouched


@dataclass
class ParamGradient:
    """One part of the model (or one tensor) and the gradient of the loss with respect to it."""

    # a part's name ("block 0 attention", "W_E (token embedding, tied head)"), or a tensor's ("blocks.0.ln_1.weight")
    name: str
    count: int  # its parameters
    weight: float  # |W| (a part's: all its tensors together)
    grad: float  # |dL/dW|
    step: float | None = None  # |ΔW|: how far one optimizer step on this gradient moves it (None: not taken)


@dataclass
class GradientCheck:
    """Backprop against a measurement: nudge every weight by +-eps along one random unit direction u, run the
    float64 model both ways, and compare the loss's slope with the dot product g.u backprop predicts.

    The backward pass is run in float64 as well, the same code on the weights as float64: a wrong backward (a missing
    term, a wrong sign) is off by order 1 in either dtype, while float32's own rounding is not a bug. A trained task
    model's loss near 0 has a slope near 3e-8, where float32's g.u was 4% off, and the check called the backward
    wrong."""

    epsilon: float  # eps: how far the weights are nudged each way along u (CHECK_EPSILON)
    # g.u: the gradient backprop computed in float32, the weights' dtype, without autocast (a run of dtype=bfloat16,
    # or of dtype=auto on a device with bfloat16 units, trains with its products in bfloat16: not this gradient)
    backprop: float
    measured: float  # (L(theta + eps u) - L(theta - eps u)) / 2 eps, in float64
    params: int  # the weights nudged (all of them)
    relative: float  # |backprop_float64 - measured| / |measured|: what the check is judged on
    backprop_float64: float = math.nan  # g.u from the same backward pass run in float64
    relative_float32: float = math.nan  # |backprop - measured| / |measured|: float32's rounding in it too


@dataclass
class TrainingPrecision:
    """Where :train runs its products in bfloat16 (core.precision.autocast), that backward pass beside the float32 one
    the gradient check checks: the same text, and g.u along the same random direction u. bfloat16 keeps about 3
    significant digits, so its gradient is a rounded one, not a wrong one: the check judges the float32 backprop."""

    dtype: str  # what :train's forward and backward products run in here ("bfloat16")
    backprop: float  # g.u from the backward pass under autocast in `dtype`, as :train's step runs it
    relative: float  # |backprop - measured| / |measured|, against the check's float64 slope
    gradient: float  # |g_dtype - g_float32| / |g_float32| over all the weights: how far the whole gradient moves


@dataclass
class Backprop:
    token_ids: list[int]  # the text read and scored (T + 1 tokens: x_0..x_T)
    counted: list[bool]  # which of the T predictions the loss counts
    loss: float  # L
    placement: str  # "pre" or "post"
    norm_label: str  # "LN" or "RMSNorm"
    norm_scale: str  # what the norms divide by, as they say (NormPart.divides_by): "std" (LN), "rms" (RMSNorm)
    residual: bool  # the residual connections are there (off: each sublayer's output replaces the stream)
    logits: float  # |dL/dz| over the whole text
    softmax_diff: float  # max |autograd's dL/dz - (softmax(z) - onehot(y)) / N|
    top: float  # |dL/dh_L|: what reaches the last block's output through the head (and the final norm)
    stream: list[StreamGradient]  # the last block's FFN first: the order backprop visits them
    embed: float  # |dL/dh_0|: what reaches the input h_0 = x + p
    positions: list[float]  # |dL/dh_0[t]| at each input position t
    parts: list[ParamGradient]  # per part of the model, in the model's order
    tensors: list[ParamGradient]  # per parameter tensor
    tied: bool  # the output head is W_E (tie_embeddings)
    head: float  # |dL/dW_U| from the head's use: dz^T x_f (tied: W_E's share as the head)
    embedding: float  # |dL/dW_E| from the input's use: each read token's row gets dL/dx at its positions
    check: GradientCheck | None  # None: the model is too large for the float64 copy (check_skipped says)
    check_skipped: str | None = None
    optimizer: str | None = None  # the optimizer whose step the parts' `step` is ("adamw", "muon"); None: no step
    step_lr: float | None = None  # the rate that step was taken at (the peak lr)
    clip_scale: float = 1.0  # what clipping (grad_clip, as :train clips) scaled the gradient by before the step
    # mixture of experts: moe_aux_weight x the load-balancing loss, whose gradient the step adds to the
    # cross-entropy's as :train's does (None: no experts, a weight of 0, or no step)
    step_aux: float | None = None
    # the backward pass :train runs where it trains in bfloat16, against the check's slope (None: it trains in
    # float32, or the check did not run)
    training: TrainingPrecision | None = None


def part_of(name: str, tied: bool) -> str:
    """The part of the model a parameter tensor belongs to, as the views name it."""
    match = _PART.match(name)
    if match:
        return f"block {match.group(1)} {_PART_NAMES[match.group(2)]}"
    if name.startswith("token_embedding."):
        return "W_E (token embedding, tied head)" if tied else "W_E (token embedding)"
    if name.startswith("position_embedding."):
        return "W_P (positions)"
    if name.startswith("ln_f."):
        return "final norm"
    if name.startswith("lm_head."):
        return "W_U (output head)"
    return name.rsplit(".", 1)[0]


def per_block(done: Backprop) -> list[tuple[int, float, float, float]]:
    """(block, |dL/dW| of its attention, of its feed-forward part, |dL/dh| of the stream it read) for each
    block, the last first (`:train watch=grad`)."""
    sizes: dict[tuple[int, str], float] = {}
    for t in done.tensors:
        match = _PART.match(t.name)
        if match and match.group(2) in ("attn", "ffn"):
            key = (int(match.group(1)), match.group(2))
            sizes[key] = sizes.get(key, 0.0) + t.grad**2
    below = {row.block: row.leaves for row in done.stream if row.part == "attn"}  # the block's input
    return [(b, math.sqrt(sizes.get((b, "attn"), 0.0)), math.sqrt(sizes.get((b, "ffn"), 0.0)), below[b])
            for b in sorted(below, reverse=True)]


def _f64(t: torch.Tensor) -> torch.Tensor:
    """`t` in float64 on the CPU, where every float64 sum here is made (a GPU may lack float64: MPS)."""
    return t.detach().to("cpu", torch.float64)


def _size(t: torch.Tensor | None) -> float:
    return 0.0 if t is None else float(_f64(t).norm())


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = _f64(a).flatten(), _f64(b).flatten()
    if a.norm() == 0 or b.norm() == 0:
        return 0.0
    return float(F.cosine_similarity(a, b, dim=0))


def backprop(model: nn.Module, idx, counted: list[bool] | None = None, check: bool = True,
             seed: int = 0, trainer=None, dtype: str = "float32") -> Backprop:
    """Backpropagate teacher forcing's loss on one text ((T+1,) or (1, T+1) ids) and say what the gradient did.

    `counted`: which of the T predictions the loss counts (a task counts its answer's); `check`: also
    measure the loss's slope along a random direction (seeded by `seed`) against backprop's; `trainer`
    (core.train.Trainer of `model`): also take one step of its optimizer on this gradient, at the peak
    rate, and say how far it moved each part (then put everything back: `optimizer_step`); `dtype`: the run's dtype
    setting, whose training products (bfloat16 under autocast) the check's text compares with the float32 backprop
    checked (`training_precision`).
    """
    inputs, targets, counted = scored_text(model, idx, counted, "backprop view")
    block_at(model, 0)  # a model with blocks, or a UserError
    blocks = list(model.blocks)
    post = blocks[0].post_norm
    token_ids = inputs[0].tolist() + [int(targets[0, -1])]
    targets = targets.clone()
    targets[0, ~torch.tensor(counted, device=targets.device)] = -1  # not counted: no loss, no gradient there
    kept: dict[str, torch.Tensor] = {}

    def keep(key: str, side: str = "out"):
        def hook(module, args, output):
            kept[key] = args[0] if side == "in" else output

        return hook

    hooks = [(model.token_embedding, keep("x")), (model.hook_embed, keep("h0")),
             (model.lm_head, keep("xf", "in")), (model.lm_head, keep("z"))]
    for b, block in enumerate(blocks):
        # The sums the residual adds make: pre-norm, the stream itself (the probes); post-norm, the norms' input.
        sums = ((block.ln_1, "in"), (block.ln_2, "in")) if post else ((block.hook_resid_mid, "out"),
                                                                       (block.hook_resid_post, "out"))
        hooks += [(block, keep(f"{b}.in", "in")), (block.attn, keep(f"{b}.attn")),
                  (block.hook_resid_mid, keep(f"{b}.mid")), (sums[0][0], keep(f"{b}.sum_attn", sums[0][1])),
                  # registered after any ablation's hook, so this sees what the block hands on
                  (block, keep(f"{b}.out"))]
        if block.ffn is not None:  # ffn=off: attention alone, the block's output its stream after attention
            hooks += [(block.ffn, keep(f"{b}.ffn")), (sums[1][0], keep(f"{b}.sum_ffn", sums[1][1]))]
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    with listening(model, hooks, gradients=True):
        logits, _ = model(inputs)
        loss = model.loss(logits, targets)  # eval mode: the plain cross-entropy (no experts' balancing term)
        tensors = list({id(t): t for t in kept.values()}.values())  # a skipped block's output is its input
        grads = torch.autograd.grad(loss, tensors + [p for _, p in params], allow_unused=True, retain_graph=True)
        # :train's loss adds the experts' load-balancing term (moe_aux_weight x aux): the step taken below adds its
        # gradient too, so the step column is the one :train takes on this text (the rest is the cross-entropy's)
        aux = model.moe_aux_loss() if getattr(model.config, "is_moe", False) and model.config.moe_aux_weight else None
        step_aux = None if aux is None else model.config.moe_aux_weight * aux
        aux_grads = [None] * len(params)
        if step_aux is not None and trainer is not None:
            aux_grads = torch.autograd.grad(step_aux, [p for _, p in params], allow_unused=True, retain_graph=True)
        of = {id(t): g for t, g in zip(tensors, grads)}
        param_grads = list(grads[len(tensors):])

        def grad(key: str) -> torch.Tensor:
            g = of[id(kept[key])]
            return torch.zeros_like(kept[key]) if g is None else g

        stream = []
        for b in reversed(range(len(blocks))):
            skipped = kept[f"{b}.out"] is kept[f"{b}.in"]
            parts_of = (("ffn", f"{b}.mid", f"{b}.out"), ("attn", f"{b}.in", f"{b}.mid"))
            for part, below, above in parts_of if blocks[b].ffn is not None else parts_of[1:]:
                if skipped:
                    g = grad(f"{b}.in")
                    stream.append(StreamGradient(b, part, _size(g), _size(g), 0.0, 0.0, _size(g), skipped=True))
                    continue
                # The add's own gradient is the skip path's; with residual=off there is no add and no skip path.
                g_skip = grad(f"{b}.sum_{part}") if blocks[b].residual else torch.zeros_like(kept[below])
                # J^T g_s: the vector-Jacobian product of the sublayer's branch alone, from its output to h, as the
                # gradient of sum(output * g_s), the same numbers: given grad_outputs, torch imports sympy (0.7 s of
                # a session's first :grad, and of every `minitf grad`) to compare their shapes
                branch = (kept[f"{b}.{part}"] * grad(f"{b}.{part}")).sum()
                through, = torch.autograd.grad(branch, kept[below], retain_graph=True, allow_unused=True)
                through = torch.zeros_like(g_skip) if through is None else through
                stream.append(StreamGradient(b, part, _size(grad(above)), _size(g_skip), _size(through),
                                             _cos(through, g_skip), _size(grad(below))))

        dz = _f64(grad("z")[0])  # (T, V)
        dx = _f64(grad("x")[0])  # (T, d): the gradient at each read token's embedding row
        xf = _f64(kept["xf"][0])  # (T, d): what the head reads
        h0 = _f64(grad("h0")[0])
        top = grad(f"{len(blocks) - 1}.out")
        y = targets[0].cpu()
        probs = torch.softmax(_f64(logits[0]), dim=-1)
        expected = probs - F.one_hot(y.clamp(min=0), probs.shape[-1]).double()
        expected[y < 0] = 0.0
        expected /= sum(counted)

    tied = model.lm_head.weight is model.token_embedding.weight
    head = dz.T @ xf  # (V, d): dL/dW_U = sum_t dz_t x_f,t^T
    embedding = torch.zeros_like(head).index_add_(0, inputs[0].cpu(), dx)  # row of token x_t gets dL/dx_t
    n = sum(p.numel() for _, p in params)
    steps, clip_scale = [None] * len(params), 1.0
    stepping = trainer is not None and n <= CHECK_LIMIT  # the step's snapshot copies the weights and their state
    if stepping:
        step_grads = [g if a is None else a if g is None else g + a for g, a in zip(param_grads, aux_grads)]
        steps, clip_scale = optimizer_step(trainer, params, step_grads)
    tensors_out, parts = [], {}
    for (name, p), g, step in zip(params, param_grads, steps):
        tensors_out.append(ParamGradient(name, p.numel(), _size(p), _size(g), step))
        count, weight, grad_sq, step_sq = parts.get(part_of(name, tied), (0, 0.0, 0.0, 0.0))
        parts[part_of(name, tied)] = (count + p.numel(), weight + _size(p) ** 2, grad_sq + _size(g) ** 2,
                                      step_sq + (step or 0.0) ** 2)
    check_done, skipped_why, training = None, None, None
    if check:
        if n > CHECK_LIMIT:
            skipped_why = (f"the check needs a float64 copy of the {n:,} parameters, and it makes one only for a "
                           f"model of up to {CHECK_LIMIT:,}")
        else:
            check_done = gradient_check(model, inputs, targets, params, param_grads, seed)
            if training_dtype(dtype, inputs.device) != "float32":
                training = training_precision(model, inputs, targets, params, param_grads, seed, dtype,
                                              check_done.measured)
    return Backprop(
        token_ids=token_ids,
        counted=counted, loss=loss.item(), placement="post" if post else "pre",
        norm_label=getattr(blocks[0].ln_1, "label", "norm"),
        norm_scale=getattr(blocks[0].ln_1, "divides_by", "scale"), residual=blocks[0].residual,
        logits=_size(dz), softmax_diff=float((dz - expected).abs().max()), top=_size(top), stream=stream,
        embed=_size(h0), positions=h0.norm(dim=-1).tolist(),
        parts=[ParamGradient(name, c, math.sqrt(w), math.sqrt(g), math.sqrt(u) if stepping else None)
               for name, (c, w, g, u) in parts.items()],
        tensors=tensors_out, tied=tied, head=_size(head), embedding=_size(embedding),
        check=check_done, check_skipped=skipped_why,
        optimizer=trainer.config.optimizer if stepping else None,
        step_lr=trainer.config.lr if stepping else None, clip_scale=clip_scale,
        step_aux=step_aux.item() if stepping and step_aux is not None else None, training=training,
    )


def optimizer_step(trainer, params, grads) -> tuple[list[float], float]:
    """|ΔW| of each of `params` after one step of `trainer`'s optimizer on `grads`, and what clipping scaled them by.

    The step is :train's: the gradient clipped to grad_clip, every group at the peak rate, the optimizer's
    own state (AdamW's moments, Muon's momentum) as it is now. Afterwards the weights, the optimizer's
    state and the random state go back to the trainer's snapshot (Trainer.rollback, what undoes a step
    that diverged) and every .grad to what it was, so nothing of it stays: a Ctrl-C (:grad is interruptible)
    waits for that end (core.interrupts.held), as one inside the undoing would leave the step half undone.
    """
    with held():
        saved = trainer.snapshot()
        old_grads = [p.grad for _, p in params]
        before = [p.detach().clone() for _, p in params]
        try:
            for (_, p), g in zip(params, grads):
                p.grad = None if g is None else g.detach().clone()
            max_norm = trainer.config.grad_clip if trainer.config.grad_clip > 0 else float("inf")
            norm = float(torch.nn.utils.clip_grad_norm_([p for _, p in params], max_norm))
            for group in trainer.optimizer.param_groups:
                group["lr"] = trainer.config.lr
            # Newton-Schulz's precision as the dtype setting asks now, the update :train makes as each run starts: a
            # :set dtype= since the last run would otherwise step in the precision that run left (left set: :train
            # sets the same at its next start)
            follow_dtype(trainer.optimizer, trainer.config.dtype)
            try:
                trainer.optimizer.step()
            except RuntimeError as e:  # lr=1e39: the step's scale (-lr) is no float32, as :train's step says
                if "without overflow" not in str(e):
                    raise
                raise UserError(f"the step at lr={trainer.config.lr:g} cannot be taken: -lr times the optimizer's "
                                "factor does not fit a float32 (at most about 3.4e+38); lower the learning "
                                "rate") from None
            sizes = [_size(p.detach() - b) for (_, p), b in zip(params, before)]
        finally:
            trainer.rollback(saved)
            for (_, p), g in zip(params, old_grads):
                p.grad = g
    return sizes, min(1.0, max_norm / (norm + 1e-6))


def _direction(params, seed: int) -> list[torch.Tensor]:
    """The check's random unit direction u over all of `params` (float64, CPU), drawn from `seed`."""
    generator = torch.Generator().manual_seed(seed)
    directions = [torch.randn(p.shape, generator=generator, dtype=torch.float64) for _, p in params]
    length = math.sqrt(sum(float(d.pow(2).sum()) for d in directions))
    return [d / length for d in directions]


def training_precision(model: nn.Module, inputs, targets, params, grads, seed: int, dtype: str,
                       measured: float) -> TrainingPrecision:
    """One more forward and backward on the same text under :train's autocast (core.precision), dotted with the
    check's u (the same `seed`) and set against its measured float64 slope; `grads`: the float32 backward's."""
    with listening(model, gradients=True), autocast(dtype, inputs.device):  # eval mode, as the float32 pass
        _, loss = model(inputs, targets)
        low = torch.autograd.grad(loss.float(), [p for _, p in params], allow_unused=True)
    dot = sum(float((_f64(g) * d).sum()) for g, d in zip(low, _direction(params, seed)) if g is not None)
    pairs = [(_f64(a), _f64(b)) for a, b in zip(low, grads) if a is not None and b is not None]
    apart = math.sqrt(sum(float((a - b).pow(2).sum()) for a, b in pairs))
    size = math.sqrt(sum(float(b.pow(2).sum()) for _, b in pairs))
    return TrainingPrecision(training_dtype(dtype, inputs.device), dot,
                             abs(dot - measured) / max(abs(measured), 1e-30), apart / max(size, 1e-30))


def gradient_check(model: nn.Module, inputs, targets, params, grads, seed: int) -> GradientCheck:
    """The central difference of the float64 loss along one random unit direction u over all the weights.

    It runs on the CPU whatever the model's device (functional_call with CPU tensors for every parameter
    and buffer): float64 is slow or missing on GPUs (MPS has none), and the copy needs no device memory."""
    directions = _direction(params, seed)
    predicted = sum(float((_f64(g) * d).sum()) for g, d in zip(grads, directions) if g is not None)
    theta = {name: _f64(p) for name, p in params}
    buffers = {name: _f64(b) if b.is_floating_point() else b.cpu() for name, b in model.named_buffers()}
    inputs, targets = inputs.cpu(), targets.cpu()

    def loss_at(step: float) -> float:
        nudged = {name: theta[name] + step * d for (name, _), d in zip(params, directions)}
        with listening(model):  # eval mode, no graph; an ablation's hooks stay on, as in the backprop pass
            _, loss = functional_call(model, {**nudged, **buffers}, (inputs, targets))
        return float(loss)

    def backprop_in_float64() -> float:
        weights = {name: theta[name].clone().requires_grad_() for name, _ in params}
        with listening(model, gradients=True):
            _, loss = functional_call(model, {**weights, **buffers}, (inputs, targets))
            grads64 = torch.autograd.grad(loss, list(weights.values()), allow_unused=True)
        return sum(float((g * d).sum()) for g, d in zip(grads64, directions) if g is not None)

    measured = (loss_at(CHECK_EPSILON) - loss_at(-CHECK_EPSILON)) / (2 * CHECK_EPSILON)
    exact = backprop_in_float64()

    def off(value: float) -> float:
        return abs(value - measured) / max(abs(measured), 1e-30)

    return GradientCheck(CHECK_EPSILON, predicted, measured, sum(p.numel() for _, p in params), off(exact),
                         backprop_float64=exact, relative_float32=off(predicted))
