"""The optimizers, chosen by `TrainConfig.optimizer`: AdamW for every weight, or Muon for the blocks' matrices.

adamw (Loshchilov & Hutter, 2019) keeps two running averages per weight and steps each
weight by their ratio, so every entry moves by about lr whatever the size of its gradient:

    m = b1 m + (1 - b1) g            v = b2 v + (1 - b2) g^2            (b1, b2) = (0.9, 0.99)
    W = W - lr wd W - lr m^ / (sqrt(v^) + eps)                        m^, v^: m, v bias-corrected

muon (the default; Jordan et al., 2024) treats a weight matrix as a matrix. It keeps one momentum per matrix and
replaces it by the nearest orthogonal matrix before stepping: every direction the matrix maps moves
by the same amount, instead of the few directions with large gradients taking the whole step.

    b = mu b + (1 - mu) g            the momentum buffer: an average of gradients (mu = 0.9)
    u = (1 - mu) g + mu b            Nesterov: the gradient, looking one step ahead
    O = NS(u)                        about U V^T for u = U S V^T: every singular value set near 1
    W = W - lr wd W - lr 0.2 sqrt(max(A, B)) O                        for an A x B matrix W

NS is five Newton-Schulz steps, which need only matrix products: X = u / ||u||_F (transposed to be
wide), then five times X = a X + (b X X^T + c (X X^T)^2) X with (a, b, c) = (3.4445, -4.7750, 2.0315),
in bfloat16 where the device multiplies bfloat16 natively (torch.optim.Muon's choice, after Keller
Jordan's: the result need only be roughly orthogonal) and in float32 elsewhere, where bfloat16 would
be emulated and several times slower (core.precision.fast_dtype). Muon is meant for hidden matrices only; the embeddings, the output head, the MoE router
and every 1-D tensor (norm gains, biases) stay with AdamW, in today's two groups (matrices decay, 1-D
tensors do not). See `hidden_matrices` for the partition and its reasons.

mu = 0.9, AdamW's b1, where torch.optim.Muon's default is 0.95 (`MUON_MOMENTUM`). A learner's runs are
short, a few hundred steps, and 0.95 averages the gradients of the last 20 steps, 0.9 of the last 10:
measured (float32, the validation loss on 100 batches of 32 drawn apart from training's), 0.9 ended
lower on every seed tried: the default model on tiny Shakespeare's recipe as it was then (360 steps) 1.851 against
1.872 over seven seeds, on pydoc's (600 steps) 1.296 against 1.312 over three, and a 6 x 256 SwiGLU
model on tiny Shakespeare 1.853 against 1.883 over two (0.85: 1.853 on the first). A checkpoint
keeps the momentum it was trained with (torch's load_state_dict restores each group's), so a run
saved with 0.95 goes on with 0.95.

The factor 0.2 sqrt(max(A, B)) ("match_rms_adamw", Moonshot AI, "Muon is Scalable for LLM
Training", 2025): O has singular values near 1, so its entries have an RMS of about
1 / sqrt(max(A, B)); scaled by it, a Muon step has an RMS of about 0.2 per entry, which is the size
of a typical AdamW step per unit of lr. So inside a Muon run one `lr` (and one `weight_decay`) means
the same size of update for the matrices and for AdamW's part. Keller Jordan's own scaling,
sqrt(max(1, A/B)), would need an lr some ten times AdamW's. The same size of step is not the same
best rate, though: AdamW alone, over every weight, wants a lower rate and a longer warm-up than Muon's
recipes give (at lr 1e-2 and 10 warm-up steps it ends pydoc's 600 steps at val 2.44, Muon at 1.30), so
switching `optimizer` takes that optimizer's own rate and warm-up where they still held the old one's
(core.recipes.follow_optimizer).
"""

from __future__ import annotations

import math
import shlex
import sys

import torch

from .config import TrainConfig
from .errors import TorchTooOld
from .experts import MixtureOfExperts
from .precision import DTYPES, newton_schulz_dtype

TORCH_FLOOR = "2.9"  # pyproject.toml's: torch.optim.Muon, which BatchedMuon below builds on, came with it


def check_torch() -> None:
    """Refuse a torch older than TORCH_FLOOR, in one line that says what to install.

    pip keeps to pyproject.toml's range, but a torch it was told to leave (--no-deps, a conda or system
    build) can be older: without this, every command that trains or loads a checkpoint ended in
    "internal error: AttributeError: module 'torch.optim' has no attribute 'Muon'".
    """
    if not hasattr(torch.optim, "Muon"):
        # the whole range, as pip would keep it (a bare `torch>=2.9` let in torch 3), and the CPU build's index: pip's
        # default on Linux is a CUDA build of several GB (render.words.missing_torch says the same of no torch at all)
        raise TorchTooOld(f"torch {torch.__version__} is older than the {TORCH_FLOOR} minitf needs (it has no "
                          f"torch.optim.Muon); install a newer one: {shlex.quote(sys.executable)} -m pip install --upgrade "
                          f"'torch>={TORCH_FLOOR},<3' --index-url https://download.pytorch.org/whl/cpu (the CPU "
                          "build; for a GPU, your CUDA build's index)")


check_torch()  # at import, before the classes below name torch.optim.Muon

ADAMW_BETAS = (0.9, 0.99)
# What each optimizer keeps per parameter, in words (core.ledger counts it; :params shows it).
STATE_WORDS = {
    "adamw": ("AdamW", "two moments per parameter"),
    "muon": ("Muon", "one momentum per entry of the blocks' matrices, AdamW's two moments for the rest"),
}
MUON_LR_ADJUSTMENT = "match_rms_adamw"  # see the module docstring
MUON_MOMENTUM = ADAMW_BETAS[0]  # 0.9, not torch's 0.95: see the module docstring
MUON_NS_STEPS = 5  # torch.optim.Muon's default ns_steps, which BatchedMuon keeps (the ledger counts their FLOPs)
FUSED_ADAMW = True


def _undecorated(method):
    """`method` without torch's `_disable_dynamo` wrapper (functools.wraps keeps it as __wrapped__)."""
    return getattr(method, "__wrapped__", method)


class _WithoutDynamo:
    """torch.optim.Optimizer's bookkeeping, minus a 70 MB import nobody here needs.

    torch wraps `add_param_group`, `zero_grad`, `state_dict`, `load_state_dict` and every `step` so
    that their first call imports torch._dynamo (the compiler's front end) to keep the compiler out
    of them: about 70 MB of resident memory, a fifth of a first `:train`'s peak, whether or not
    anything is ever compiled. The methods under the wrappers are plain Python, so the optimizers
    here take those (and their own steps run under no_grad, what the step wrapper does eagerly).
    `compile=on` imports torch._dynamo anyway; a torch whose methods lose `__wrapped__` keeps working,
    with the import. tests/test_optimizers.py checks that a default `:train` leaves it unimported.
    """

    add_param_group = _undecorated(torch.optim.Optimizer.add_param_group)
    zero_grad = _undecorated(torch.optim.Optimizer.zero_grad)
    state_dict = _undecorated(torch.optim.Optimizer.state_dict)
    load_state_dict = _undecorated(torch.optim.Optimizer.load_state_dict)


class AdamW(_WithoutDynamo, torch.optim.AdamW):
    """torch.optim.AdamW itself (its groups, state, checkpoint format and update), without the import."""

    @torch.no_grad()
    def step(self, closure=None):
        return _undecorated(torch.optim.AdamW.step)(self, closure)


def make_optimizer(model: torch.nn.Module, config: TrainConfig):
    """The optimizer `config.optimizer` names, over `model`'s trainable parameters, at lr = config.lr."""
    if config.optimizer == "muon":
        return MuonWithAdamW(model, config)
    return _adamw([p for p in model.parameters() if p.requires_grad], config)


def follow_dtype(optimizer, dtype: str) -> None:
    """Keep `optimizer`'s Newton-Schulz (Muon's, where it has one) in the precision the run's `dtype` setting asks."""
    muon = getattr(optimizer, "muon", None)
    if isinstance(muon, BatchedMuon):
        muon.precision = dtype


def _adamw(params: list, config: TrainConfig) -> torch.optim.AdamW:
    # Decay matrices only: biases, LayerNorm gains and 1-D tensors keep their scale.
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": config.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    # fused: one kernel updates every tensor of a group (the CPU has one since torch 2.4), instead of
    # a dozen small ops per tensor; the same update up to float rounding (bench/nanogpt.py measures it).
    return AdamW(groups, lr=config.lr, betas=ADAMW_BETAS, fused=FUSED_ADAMW)


def hidden_matrices(model: torch.nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """(name, parameter) of every matrix Muon trains: the 2-D weights inside the Transformer blocks.

    That is attention's q, k, v and output projections and the feed-forward matrices (SwiGLU's three,
    each expert's). Not Muon's, by its authors' rule that Muon is for hidden layers:
    - the token and position embeddings: a lookup table, where each row is trained only by the
      tokens that use it, not a linear map of the residual stream;
    - the output head (tied to the token embedding by default; untied, still a classifier): its rows
      are the logits of separate tokens, each to be learned at its own pace;
    - the MoE router, for the same reason as the head: a small classifier whose n_experts rows are
      the logits of separate experts. Orthogonalising it would move every expert's row by the same
      amount each step, however little its gradient asks, and routing would churn;
    - 1-D tensors (norm gains, biases): Muon only knows matrices.
    """
    routers = {id(m.router.weight) for m in model.modules() if isinstance(m, MixtureOfExperts)}
    return [
        (f"blocks.{name}", p) for name, p in model.blocks.named_parameters()
        if p.requires_grad and p.dim() == 2 and id(p) not in routers
    ]


def group_kind(group: dict) -> str:
    """"muon" or "adamw": which optimizer a param group (or a saved one) belongs to, told by its keys."""
    return "muon" if "ns_coefficients" in group else "adamw"


def set_weight_decay(optimizer, weight_decay: float) -> None:
    """Write `weight_decay` into every group of matrices (make_optimizer's rule: 1-D tensors never decay).

    For adamw that is the first group; for muon, Muon's group and AdamW's first. A group is told by
    what it holds, so this cannot drift from make_optimizer's order.
    """
    for group in optimizer.param_groups:
        if any(p.dim() >= 2 for p in group["params"]):
            group["weight_decay"] = weight_decay


class BatchedMuon(_WithoutDynamo, torch.optim.Muon):
    """torch.optim.Muon's update, with the matrices of one shape orthogonalised together.

    torch's Muon runs Newton-Schulz matrix by matrix: for the default model that is 24 small
    matrices x 5 steps x 3 products, some 360 products of 128-wide matrices per step, each too small
    to keep a CPU busy (25 ms a step on this project's 2-core machine, a third of the whole training
    step at batch 32). The blocks' matrices come in a few shapes only (d x d for attention, d x d_ff
    and d_ff x d for the FFN), so here the momenta of one shape, each turned to be wide (d_ff x d is
    d x d_ff transposed, so the FFN's two matrices are one stack), are stacked and orthogonalised with
    batched products: the same arithmetic (torch's coefficients; bfloat16 where the device has
    bfloat16 units, else float32: `fast_dtype`; float32 for a run of dtype=float32), 3.5x faster on that
    machine. Everything else is
    torch's own: the groups, the state ("momentum_buffer"), state_dict and load_state_dict.
    """

    # the run's dtype setting (core.precision.newton_schulz_dtype): "float32" keeps Newton-Schulz in float32 on a
    # device with bfloat16 units too; the trainer sets it from its config (follow_dtype)
    precision = "auto"

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, momentum, wd = float(group["lr"]), group["momentum"], group["weight_decay"]
            grads = [p.grad for p in params]
            bufs = [self._momentum_buffer(p) for p in params]
            torch._foreach_lerp_(bufs, grads, 1 - momentum)  # b = mu b + (1 - mu) g
            torch._foreach_mul_(params, 1 - lr * wd)  # decoupled weight decay, at the plain lr (as torch)
            # X X^T is the smaller Gram matrix for a wide X, so a tall matrix is orthogonalised as its
            # transpose (d_ff x d is d x d_ff turned); matrices of one wide shape go as one stack.
            tall = [p.size(-2) > p.size(-1) for p in params]
            by_shape: dict[tuple, list[int]] = {}
            for i, p in enumerate(params):
                wide = (p.size(-1), p.size(-2)) if tall[i] else tuple(p.shape)
                by_shape.setdefault((wide, p.device, p.dtype), []).append(i)
            for (wide, device, dtype), members in by_shape.items():
                # Each update is written straight into its place in the stack, turned where tall:
                # u = (1 - mu) g + mu b (Nesterov), or b itself.
                stack = torch.empty((len(members), *wide), device=device, dtype=dtype)
                for place, i in zip(stack.unbind(0), members):
                    place = place.mT if tall[i] else place
                    if group["nesterov"]:
                        torch.lerp(grads[i], bufs[i], momentum, out=place)
                    else:
                        place.copy_(bufs[i])
                ortho = newton_schulz(stack, group["ns_coefficients"], group["ns_steps"], group["eps"],
                                      DTYPES[newton_schulz_dtype(self.precision, device)]).to(dtype)
                # One rate per stack: 0.2 sqrt(max(A, B)) is the same for A x B and B x A.
                torch._foreach_add_([params[i] for i in members],
                                    [o.mT if tall[i] else o for i, o in zip(members, ortho.unbind(0))],
                                    alpha=-adjusted_lr(lr, group["adjust_lr_fn"], wide))
        return loss

    def _momentum_buffer(self, p: torch.Tensor) -> torch.Tensor:
        state = self.state[p]
        if "momentum_buffer" not in state:  # torch's name and layout, so state_dict is torch's
            state["momentum_buffer"] = torch.zeros_like(p.grad, memory_format=torch.preserve_format)
        return state["momentum_buffer"]


def newton_schulz(X: torch.Tensor, coefficients: tuple, steps: int, eps: float,
                  dtype: torch.dtype) -> torch.Tensor:
    """NS for a stack of wide matrices (n, A, B), A <= B: each replaced by about its nearest orthogonal matrix.

    In `dtype`. Five times X = a X + (b X X^T + c (X X^T)^2) X, after X = X / ||X||_F. Where a matrix
    is at least twice as wide as tall and the dtype is not bfloat16, the same steps are taken on
    A x A matrices only (`_gram_newton_schulz`): for the default model's 128 x 512 FFN matrices
    that is 105 instead of 189 MFLOP each (newton_schulz_flops; tests/test_sweep_t.py checks it against
    FlopCounterMode).
    """
    a, b, c = coefficients
    X = X.to(dtype)
    X = X / X.norm(dim=(-2, -1), keepdim=True).clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    rows, cols = X.shape[-2:]
    if cols >= 2 * rows and dtype != torch.bfloat16:
        return _gram_newton_schulz(X, a, b, c, steps)
    for _ in range(steps):
        A = X @ X.mT
        B = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b A + c A^2
        X = torch.baddbmm(X, B, X, beta=a)  # a X + B X
    return X


def newton_schulz_flops(shape: tuple, steps: int, dtype: torch.dtype) -> int:
    """FLOPs (2 per multiply-add) of newton_schulz's products on one matrix of `shape`, turned wide (m x n, m <= n)
    as BatchedMuon.step turns it: 4 m^2 n + 2 m^3 a step (X X^T, its square, the product with X), or on the
    Gram matrix's path 4 m^2 n once and 8 m^3 a step after the first (2 m^3)."""
    m, n = sorted(shape[-2:])
    if n >= 2 * m and dtype != torch.bfloat16:
        return 4 * m * m * n + 2 * m**3 + (steps - 1) * 8 * m**3
    return steps * (4 * m * m * n + 2 * m**3)


def _gram_newton_schulz(X: torch.Tensor, a: float, b: float, c: float, steps: int) -> torch.Tensor:
    """newton_schulz's steps for wide X (m x n, n >= 2m), computed on m x m matrices.

    Every step multiplies X on the left by a polynomial in X X^T, so after k steps X_k = Q_k X_0 for
    an m x m matrix Q_k, and X_k X_k^T = Q_k G Q_k^T with G = X_0 X_0^T, the Gram matrix:

        A_k = Q_k G Q_k^T        Q_{k+1} = (a I + b A_k + c A_k^2) Q_k        X_5 = Q_5 X_0

    One product with X_0 at each end (4 m^2 n), 2 m^3 for the first step (A = G) and 8 m^3 for each
    after, against 4 m^2 n + 2 m^3 a step: at five steps 4 m^2 n + 34 m^3 against 20 m^2 n + 10 m^3, fewer
    FLOPs once n > 1.5 m (newton_schulz_flops). It is taken from n >= 2 m, as measured: its four m x m
    products a step run slower per FLOP than the plain steps' three wider ones, so its time crosses over
    later (eight 128 x n matrices, one thread, float32, a busy 2-core AMD EPYC: at n = 1.75 m 0.95x to
    1.14x the plain steps' time, at n = 2 m 0.78x to 0.92x, at 4 m 0.58x; an earlier measurement of
    128 x 512, 6.5 ms against 12.4 ms), and it is the less exact (below), so it waits for a clear gain.
    The same numbers in exact arithmetic (1e-10 apart in float64); in float32
    within 3e-4 of the float64 result for singular values down to 1e-4 (the plain steps: 6e-6;
    bfloat16, torch's own Muon's choice: 0.13; tests/test_optimizers.py). Not in bfloat16: Q_k grows
    like 1 / sigma for small singular values, which bfloat16's 8 bits cannot carry through.
    """
    G = X @ X.mT  # (n, m, m)
    Q = None
    for _ in range(steps):
        A = G if Q is None else Q @ G @ Q.mT
        P = torch.baddbmm(A, A, A, beta=b, alpha=c)  # b A + c A^2
        P.diagonal(dim1=-2, dim2=-1).add_(a)  # + a I
        Q = P if Q is None else P @ Q
    return Q @ X


def adjusted_lr(lr: float, how: str | None, shape: tuple) -> float:
    """torch.optim.Muon's per-shape rate: match_rms_adamw is 0.2 sqrt(max(A, B)) (module docstring)."""
    A, B = shape[:2]
    if how == "match_rms_adamw":
        return lr * 0.2 * math.sqrt(max(A, B))
    if how is None or how == "original":
        return lr * math.sqrt(max(1, A / B))
    return lr


class MuonWithAdamW:
    """Muon for the hidden matrices and AdamW for the rest, offered as one optimizer.

    It holds a torch.optim.Muon and a torch.optim.AdamW and shows what the trainer, the checkpoints and
    the device code use of a torch optimizer: `param_groups` (Muon's group first, then AdamW's two),
    `state`, `step()`, `zero_grad()`, and `state_dict()` / `load_state_dict()` in torch's own format,
    parameters numbered across both in that group order (as one torch optimizer over those groups
    would number them). So a checkpoint stores it exactly as it stores AdamW.

    It is a thin wrapper rather than a torch.optim.Optimizer subclass on purpose: a subclass would
    own param_groups and state of its own, which Optimizer.load_state_dict replaces with new dicts,
    and keeping them in step with the two optimizers that do the work would be a second truth to
    maintain. Here the two optimizers are the only truth; `param_groups` and `state` are views of
    their dicts, so writing group["lr"] or moving a state tensor reaches the optimizer that uses it.
    """

    def __init__(self, model: torch.nn.Module, config: TrainConfig):
        hidden = [p for _, p in hidden_matrices(model)]
        chosen = {id(p) for p in hidden}
        rest = [p for p in model.parameters() if p.requires_grad and id(p) not in chosen]
        self.muon = BatchedMuon(hidden, lr=config.lr, momentum=MUON_MOMENTUM, weight_decay=config.weight_decay,
                                adjust_lr_fn=MUON_LR_ADJUSTMENT)
        self.adamw = _adamw(rest, config)
        follow_dtype(self, config.dtype)

    @property
    def param_groups(self) -> list[dict]:
        """Muon's groups, then AdamW's: the groups themselves, so writing a key reaches the optimizer."""
        return self.muon.param_groups + self.adamw.param_groups

    @property
    def state(self) -> dict:
        """{parameter: its state dict} of both optimizers (a new dict; the state dicts inside are theirs)."""
        return {**self.muon.state, **self.adamw.state}

    def step(self) -> None:
        self.muon.step()
        self.adamw.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.muon.zero_grad(set_to_none=set_to_none)
        self.adamw.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        """torch's format: {"state": {index: ...}, "param_groups": [...]}, Muon's parameters numbered first."""
        muon, adamw = self.muon.state_dict(), self.adamw.state_dict()
        offset = _n_params(muon["param_groups"])
        return {
            "state": {**muon["state"], **{i + offset: s for i, s in adamw["state"].items()}},
            "param_groups": muon["param_groups"]
            + [{**g, "params": [i + offset for i in g["params"]]} for g in adamw["param_groups"]],
        }

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a state_dict() of the same model's MuonWithAdamW; checked whole before either part changes."""
        groups = state_dict["param_groups"]
        mine = self.param_groups
        if len(groups) != len(mine) or any(
            len(s["params"]) != len(g["params"]) or group_kind(s) != group_kind(g) for s, g in zip(groups, mine)
        ):
            raise ValueError("the saved optimizer groups do not match this model's Muon and AdamW groups; "
                             "load it into a model of the same architecture with optimizer=muon")
        # torch pairs saved parameter numbers with parameters group by group, in order, so each
        # part takes its own groups and the state of the numbers in them, numbered as they were.
        n_muon = len(self.muon.param_groups)
        for part, saved in ((self.muon, groups[:n_muon]), (self.adamw, groups[n_muon:])):
            ids = {i for g in saved for i in g["params"]}
            part.load_state_dict({
                "state": {i: s for i, s in state_dict["state"].items() if i in ids},
                "param_groups": saved,
            })

    def __repr__(self) -> str:
        return f"MuonWithAdamW(\n{self.muon!r},\n{self.adamw!r})"


def _n_params(groups: list[dict]) -> int:
    return sum(len(g["params"]) for g in groups)
