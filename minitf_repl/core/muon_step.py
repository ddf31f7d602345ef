"""Muon's step on one matrix, worked out: the gradient, the momentum, Newton-Schulz step by step, the update.

Muon (core.optimizers) replaces a matrix's update u by about its nearest orthogonal matrix U V^T
(u = U S V^T), and it gets there with matrix products only. Each Newton-Schulz step

    X <- a X + (b X X^T + c (X X^T)^2) X  =  U p(S) V^T,      p(s) = a s + b s^3 + c s^5

applies the same odd polynomial p to every singular value at once, leaving U and V alone: five
steps from X_0 = u / ||u||_F (every singular value in (0, 1]) push them all into a band around 1.
So the step moves the weights by the same amount along every direction the update has, instead of
the few directions where the gradient is large taking nearly all of it.

`muon_step` takes the gradient one :train step would see (a training batch, drawn here with its own
seed, the whole gradient clipped to grad_clip as :train clips it before the optimizer reads it), the
session's momentum for that matrix where the optimizer has one, and redoes the five steps
in float64, with the singular values after each; then checks the last against the optimizer's own
`newton_schulz`, in float32 and in the dtype the optimizer runs it in on this device. Nothing is
written: no .grad, no optimizer state, no weight.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .config import TrainConfig
from .device import in_float64
from .errors import UserError
from .optimizers import adjusted_lr, group_kind, hidden_matrices, make_optimizer, newton_schulz
from .precision import DTYPES, newton_schulz_dtype
from .probe import evaluating

TOP = 10  # the share of |M|^2 in a matrix's TOP largest singular directions says how concentrated it is
# ... or in half of them, for a matrix of fewer than 2 TOP: the TOP largest of 8 hold all of |M|^2 in every matrix


@dataclass
class NewtonSchulzStep:
    """The singular values of X after one Newton-Schulz step (step 0: X_0 = u / ||u||_F)."""

    step: int  # k: the Newton-Schulz steps done (0: X_0 itself)
    smallest: float  # the smallest singular value of X_k
    median: float  # their median (torch's: the lower of the two middle ones for an even count)
    largest: float  # the largest singular value of X_k
    polar_distance: float  # ||X - U V^T||_F / ||U V^T||_F: how far X still is from u's orthogonal factor
    polynomial_diff: float  # max |sorted s(X) - sorted p(p(...p(s(X_0))))|: NS is p on every singular value


@dataclass
class MuonStep:
    """What Muon does to one matrix's update at one step: see the module docstring."""

    name: str  # the matrix, "blocks.0.attn.q_proj.weight"
    shape: tuple[int, int]  # (A, B) as the model holds it
    turned: bool  # tall (A > B): orthogonalised as its transpose, as the optimizer does
    tokens: int  # tokens in the batch whose gradient this is
    seed: int  # the batch's seed
    loss: float  # the batch's loss
    grad: float  # ||G||_F, G = dL/dW on the batch, before clipping
    # what :train's clipping scales every gradient by on this batch: grad_clip / the whole gradient's norm, at most 1;
    # the momentum reads G times it
    clip_scale: float
    total_grad: float  # the norm of the whole model's gradient on the batch, what clipping compares with grad_clip
    momentum: float  # mu
    had_momentum: bool  # the session's optimizer kept a momentum for this matrix (else it starts at 0)
    buffer: float  # ||b|| after this step's b <- mu b + (1 - mu) G
    nesterov: bool  # u = (1 - mu) G + mu b (looking one step ahead), else u = b
    update: float  # ||u||_F
    coefficients: tuple[float, float, float]  # (a, b, c) of p(s) = a s + b s^3 + c s^5
    singular: list[float]  # u's singular values, largest first
    top: int  # how many of the largest singular directions the shares below count (TOP, or half of a small one)
    u_top_share: float  # share of ||u||^2 in its `top` largest singular directions
    adamw_top_share: float  # the same for AdamW's update m^ / (sqrt(v^) + eps) on this gradient
    adamw_first: bool  # no AdamW moments for this matrix (Muon trains it, or no step yet): AdamW's first update,
    #                    G / |G| entry by entry, sign(G); else its next one from the session's moments
    steps: list[NewtonSchulzStep]  # step 0 (X_0) to the last
    o_top_share: float  # the same for O, Newton-Schulz's result
    settled: float  # share of O's singular values between 0.5 and 1.5
    orthogonal_share: float  # top / min(A, B): what an exactly orthogonal matrix has
    lr: float  # the peak rate Muon trains at: the session's, or under AdamW the one :set optimizer=muon brings
    step_scale: float  # lr * 0.2 sqrt(max(A, B)): what O is multiplied by
    step_rms: float  # the RMS of one entry's move, step_scale * rms(O)
    relative_step: float  # ||step_scale O|| / ||W||
    optimizer_dtype: str  # the dtype the optimizer runs Newton-Schulz in on this device
    float32_diff: float  # max |O - newton_schulz(u) in float32|
    optimizer_diff: float  # max |O - newton_schulz(u) in optimizer_dtype|
    session_optimizer: str  # "muon" or "adamw": what the session trains with


def matrix_names(model: nn.Module, layer: int) -> list[str]:
    """The matrices of block `layer` that Muon trains, named inside the block: "attn.q_proj", "ffn.fc_in"."""
    prefix = f"blocks.{layer}."
    return [name[len(prefix):-len(".weight")] for name, _ in hidden_matrices(model)
            if name.startswith(prefix) and name.endswith(".weight")]


def _listed(names: list[str], most: int = 8) -> str:
    """`names` joined, or, past `most` (32 experts' fc_in made an 800-character error line), the first few, "...",
    and the last (Tab lists them all)."""
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join([*names[: most - 2], "...", names[-1]]) + f" ({len(names)} in all; Tab lists them)"


def _top(n: int) -> int:
    """How many of n singular directions the shares count: TOP, or half of them where TOP would be all or most (all
    of them would carry 100% of any matrix, and say nothing of how concentrated it is)."""
    return min(TOP, max(1, n // 2))


def _top_share(values: torch.Tensor) -> float:
    """Share of the squared singular values (largest first) in the _top(n) largest: of ||M||_F^2."""
    squares = values.pow(2)
    return float(squares[:_top(len(values))].sum() / squares.sum().clamp_min(1e-300))


def muon_step(model: nn.Module, data, layer: int = 0, matrix: str = "attn.q_proj", batch_size: int = 16,
              seed: int = 0, optimizer=None, lr: float = 1e-2, grad_clip: float = 1.0,
              dtype: str = "auto") -> MuonStep:
    """Muon's step on block `layer`'s `matrix`, for the gradient of one training batch (module docstring).

    `optimizer`: the session's (its momentum for this matrix and its Muon settings are read, never
    written); `lr`: the peak rate the step is scaled by; `grad_clip`: the largest norm of the whole
    gradient (0: no clipping), as :train clips it before the optimizer takes its step; `dtype`: the run's dtype
    setting, which Newton-Schulz's own dtype follows (core.precision.newton_schulz_dtype).
    """
    names = matrix_names(model, layer)
    ends = [n for n in names if n.endswith("." + matrix)]  # "fc_in" for "ffn.fc_in", where only one name ends so
    if matrix not in names and len(ends) == 1:
        matrix = ends[0]
    if matrix not in names and len(ends) > 1:  # "fc_in" of a mixture of experts: one per expert
        raise UserError(f"{matrix} names {len(ends)} matrices of block {layer} that Muon trains: {_listed(ends)}; "
                        f"give the whole name, e.g. matrix={ends[0]}")
    if matrix not in names:
        raise UserError(f"block {layer} has no matrix {matrix!r} that Muon trains; choose one of {_listed(names)}")
    name = f"blocks.{layer}.{matrix}.weight"
    weight = dict(model.named_parameters())[name]

    group = _group_of(optimizer, weight, "muon")
    trains = group is not None  # the session's optimizer is Muon for this matrix
    if not trains:  # the settings a Muon optimizer of this model would have (core.optimizers makes it)
        group = _group_of(make_optimizer(model, TrainConfig(optimizer="muon")), weight, "muon")
    mu, nesterov, n_steps, eps = group["momentum"], group["nesterov"], group["ns_steps"], group["eps"]
    a, b, c = coefficients = tuple(group["ns_coefficients"])
    old = optimizer.state.get(weight, {}).get("momentum_buffer") if trains else None

    generator = torch.Generator().manual_seed(seed)
    x, y = data.get_batch("train", batch_size, model.config.max_seq_len, generator)
    device = weight.device
    # Every weight's gradient: :train clips the whole gradient's norm to grad_clip before the optimizer reads it, so
    # the momentum takes this matrix's gradient scaled as the others' norms make it (by 0.54 where they add to 1.86)
    params = [p for p in model.parameters() if p.requires_grad]
    with evaluating(model):  # dropout off: the gradient of the model as it is
        with torch.enable_grad():
            logits, _ = model(x.to(device))
            loss = model.loss(logits, y.to(device))
            grads = torch.autograd.grad(loss, params, allow_unused=True)
    grad = next(g for p, g in zip(params, grads) if p is weight)
    total = float(torch.linalg.vector_norm(torch.stack([in_float64(g).norm().cpu() for g in grads if g is not None])))
    max_norm = grad_clip if grad_clip > 0 else float("inf")
    clip_scale = min(1.0, max_norm / (total + 1e-6))  # torch.nn.utils.clip_grad_norm_'s own factor
    if grad is None:  # the matrix took no part in the forward pass: `:ablate block=L` skips its block
        from .ablation import skipped_blocks

        if layer in skipped_blocks(model):
            raise UserError(f"block {layer} is skipped now (:ablate block={layer}), so its {matrix} gets no gradient; "
                            ":ablate off puts it back, or choose another layer=")
        raise UserError(f"block {layer}'s {matrix} takes no part in this batch's forward pass, so it gets no gradient; "
                        "choose another matrix= or seed=")

    G = in_float64(grad).cpu() * clip_scale  # what the optimizer reads
    adamw, adamw_first = _adamw_update(optimizer, weight, G)
    buffer = torch.zeros_like(G) if old is None else in_float64(old).cpu()
    buffer = torch.lerp(buffer, G, 1 - mu)  # b <- mu b + (1 - mu) G
    u = torch.lerp(G, buffer, mu) if nesterov else buffer  # u = (1 - mu) G + mu b
    if not bool(torch.isfinite(u).all()):  # weights a huge rate blew up: the SVD below failed as an internal error
        raise UserError(f"block {layer}'s {matrix} has no finite gradient on this batch (loss {loss.item():.4g}): "
                        "float32 overflowed in weights that have blown up, so there is no step to work out; load a "
                        "checkpoint from before the rate blew them up")
    turned = u.shape[0] > u.shape[1]
    wide = u.mT if turned else u  # the optimizer orthogonalises the wide form

    U, S, Vh = torch.linalg.svd(wide, full_matrices=False)
    polar = U @ Vh  # u's orthogonal factor: what Newton-Schulz approximates
    X = wide / wide.norm().clamp_min(eps)
    values = expected = torch.linalg.svdvals(X)
    steps = [_ns_step(0, X, values, polar, expected)]
    for k in range(1, n_steps + 1):
        A = X @ X.mT
        X = a * X + (b * A + c * A @ A) @ X
        expected = a * expected + b * expected ** 3 + c * expected ** 5  # p on each singular value
        values = torch.linalg.svdvals(X)
        steps.append(_ns_step(k, X, values, polar, expected))
    O, final = X, values  # Newton-Schulz's result and its singular values

    dtype = newton_schulz_dtype(dtype, device)
    theirs = {d: in_float64(newton_schulz(wide.to(device)[None].float(), coefficients, n_steps, eps, DTYPES[d])[0])
              .cpu() for d in {"float32", dtype}}
    shape = tuple(weight.shape)
    scale = adjusted_lr(lr, group["adjust_lr_fn"], tuple(wide.shape))
    rms = float(O.pow(2).mean().sqrt())
    return MuonStep(
        name=name, shape=shape, turned=turned, tokens=x.numel(), seed=seed, loss=float(loss.detach()),
        grad=float(in_float64(grad).norm()), clip_scale=clip_scale, total_grad=total, momentum=float(mu),
        had_momentum=old is not None, buffer=float(buffer.norm()),
        nesterov=bool(nesterov), update=float(u.norm()), coefficients=coefficients, singular=S.tolist(),
        top=_top(len(S)), u_top_share=_top_share(S),
        adamw_top_share=_top_share(torch.linalg.svdvals(adamw)), adamw_first=adamw_first, steps=steps,
        o_top_share=_top_share(final), settled=float(((final > 0.5) & (final < 1.5)).float().mean()),
        orthogonal_share=_top(len(S)) / len(S),
        lr=float(lr), step_scale=scale, step_rms=scale * rms,
        relative_step=float(scale * O.norm() / in_float64(weight).norm().cpu().clamp_min(1e-300)),
        optimizer_dtype=dtype, float32_diff=float((O - theirs["float32"]).abs().max()),
        optimizer_diff=float((O - theirs[dtype]).abs().max()),
        session_optimizer="muon" if trains else "adamw",
    )


def _group_of(optimizer, weight: torch.Tensor, kind: str) -> dict | None:
    """The param group of `optimizer` ("muon" or "adamw" kind) that trains `weight`; None if it has none."""
    if optimizer is None:
        return None
    return next((g for g in optimizer.param_groups if group_kind(g) == kind and any(p is weight for p in g["params"])),
                None)


def _adamw_update(optimizer, weight: torch.Tensor, G: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """AdamW's update direction m^ / (sqrt(v^) + eps) for gradient G: from the session's moments where AdamW
    trains `weight` and has stepped, else its first, G / |G| = sign(G) entry by entry (m^ = G, v^ = G^2)."""
    state = optimizer.state.get(weight, {}) if optimizer is not None else {}
    group = _group_of(optimizer, weight, "adamw")
    if group is None or "exp_avg" not in state:
        return torch.sign(G), True
    (beta1, beta2), eps, t = group["betas"], group["eps"], float(state["step"]) + 1
    m = torch.lerp(in_float64(state["exp_avg"]).cpu(), G, 1 - beta1)
    v = beta2 * in_float64(state["exp_avg_sq"]).cpu() + (1 - beta2) * G * G
    return (m / (1 - beta1 ** t)) / ((v / (1 - beta2 ** t)).sqrt() + eps), False


def _ns_step(k: int, X: torch.Tensor, values: torch.Tensor, polar: torch.Tensor,
             expected: torch.Tensor) -> NewtonSchulzStep:
    """Step k's record: X's singular values `values`, its distance to `polar`, and to `expected` (p^k on X_0's)."""
    return NewtonSchulzStep(
        step=k, smallest=float(values.min()), median=float(values.median()), largest=float(values.max()),
        polar_distance=float((X - polar).norm() / polar.norm()),
        polynomial_diff=float((values.sort().values - expected.sort().values).abs().max()),
    )
