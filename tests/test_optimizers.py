"""The optimizers (core/optimizers.py): adamw as it always was, muon for the blocks' matrices and AdamW for the rest.

Each test can fail: the partition is checked against names listed here by hand, one Muon step
against the docstring's formula written out in float64 (and the reference is shown to tell a
wrong formula apart), the resumes and roll-backs against the same training done straight through.
Sizes are small and unequal (d_model 32, d_ff 48, 2 heads) so that every matrix is rectangular
where it can be, and Muon's lr adjustment, which depends on the shape, is seen.
"""

from __future__ import annotations

import math

import pytest
import torch

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core import optimizers
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.optimizers import MUON_MOMENTUM, MuonWithAdamW, hidden_matrices, make_optimizer
from minitf_repl.core.train import Trainer
from minitf_repl.dispatch import run_command
from minitf_repl.reporter import Reporter
from minitf_repl.session import Session

SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48)
# The matrices Muon trains, by the last two parts of their names: attention's projections, the FFN's
# matrices (plain, SwiGLU, and each expert's). Written out here, not derived the way the code does it.
MUON_LAYERS = {"q_proj", "k_proj", "v_proj", "out_proj", "fc_in", "fc_out", "gate_proj", "up_proj", "down_proj"}


def model_of(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**SIZES, **changes}))


def expected_muon(model) -> set[str]:
    return {name for name, _ in model.named_parameters()
            if name.startswith("blocks.") and name.endswith(".weight") and name.split(".")[-2] in MUON_LAYERS}


def names_of(model, params) -> set[str]:
    by_id = {id(p): name for name, p in model.named_parameters()}
    return {by_id[id(p)] for p in params}


# --- adamw: exactly today's optimizer ------------------------------------------------------------------
def test_adamw_splits_matrices_from_gains_and_biases():
    model = model_of()
    config = TrainConfig(optimizer="adamw")
    opt = make_optimizer(model, config)
    assert type(opt) is optimizers.AdamW and isinstance(opt, torch.optim.AdamW)
    decay, no_decay = opt.param_groups
    assert names_of(model, decay["params"]) == {n for n, p in model.named_parameters() if p.dim() >= 2}
    assert names_of(model, no_decay["params"]) == {n for n, p in model.named_parameters() if p.dim() < 2}
    assert (decay["weight_decay"], no_decay["weight_decay"]) == (config.weight_decay, 0.0)
    assert all(g["betas"] == (0.9, 0.99) and g["lr"] == config.lr for g in opt.param_groups)


def test_make_optimizer_is_still_importable_from_train():
    from minitf_repl.core import optimizers, train

    assert train.make_optimizer is optimizers.make_optimizer


# --- muon: the partition -----------------------------------------------------------------------------
VARIANTS = {
    "default": {},
    "swiglu": {"activation": "swiglu"},
    "experts": {"n_experts": 2},
    "swiglu-experts": {"activation": "swiglu", "n_experts": 3, "experts_per_token": 1},
    "untied": {"tie_embeddings": False},
    "no-bias": {"bias": False},
    "qk-norm": {"qk_norm": True},
    "modern": {"pos_encoding": "rope", "norm": "rmsnorm", "norm_gain": False, "activation": "relu2",
               "qk_norm": True, "bias": False, "tie_embeddings": False},
}


@pytest.mark.parametrize("changes", VARIANTS.values(), ids=VARIANTS.keys())
def test_muon_takes_the_blocks_matrices_and_adamw_everything_else(changes):
    model = model_of(**changes)
    config = TrainConfig(optimizer="muon", weight_decay=0.05)
    opt = make_optimizer(model, config)
    assert isinstance(opt, MuonWithAdamW)
    muon, decay, no_decay = opt.param_groups  # the documented order: Muon's group, then AdamW's two

    # Every trainable parameter in exactly one group.
    ids = [id(p) for g in opt.param_groups for p in g["params"]]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}

    assert names_of(model, muon["params"]) == expected_muon(model) == {n for n, _ in hidden_matrices(model)}
    assert all(p.dim() == 2 for p in muon["params"])
    adamw = names_of(model, decay["params"])
    assert "token_embedding.weight" in adamw  # the tied head is this same tensor
    if not model.config.tie_embeddings:
        assert "lm_head.weight" in adamw
    if model.config.pos_encoding == "learned":
        assert "position_embedding.weight" in adamw
    if model.config.is_moe:
        routers = {f"blocks.{i}.ffn.router.weight" for i in range(model.config.n_layers)}
        assert routers <= adamw  # the router stays with AdamW (see hidden_matrices)
        assert any(".experts.1." in n for n in names_of(model, muon["params"]))
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    assert (muon["weight_decay"], decay["weight_decay"], no_decay["weight_decay"]) == (0.05, 0.05, 0.0)
    assert muon["adjust_lr_fn"] == "match_rms_adamw" and decay["betas"] == (0.9, 0.99)


def test_adamw_is_torch_s_adamw_step_for_step_and_state_for_state():
    """optimizers.AdamW only skips torch's torch._dynamo import: the same update, the same state_dict."""
    ours_model, theirs_model = model_of(), model_of()
    config = TrainConfig(optimizer="adamw", lr=0.01, weight_decay=0.1)
    ours = make_optimizer(ours_model, config)
    groups = [{"params": [p for p in theirs_model.parameters() if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in theirs_model.parameters() if p.dim() < 2], "weight_decay": 0.0}]
    theirs = torch.optim.AdamW(groups, lr=0.01, betas=(0.9, 0.99), fused=True)
    g = torch.Generator().manual_seed(0)
    for _ in range(3):
        for a, b in zip(ours_model.parameters(), theirs_model.parameters()):
            a.grad = torch.randn(a.shape, generator=g)
            b.grad = a.grad.clone()
        ours.step()
        theirs.step()
    for a, b in zip(ours_model.parameters(), theirs_model.parameters()):
        assert torch.equal(a, b)
    mine, torchs = ours.state_dict(), theirs.state_dict()
    assert mine["param_groups"] == torchs["param_groups"]
    assert all(torch.equal(mine["state"][i][k], torchs["state"][i][k]) for i in torchs["state"] for k in torchs["state"][i])
    theirs.load_state_dict(mine)  # and the other way: checkpoints written before load into ours
    ours.load_state_dict(torchs)


def test_a_default_train_never_imports_the_compiler():
    """torch's optimizers import torch._dynamo (70 MB resident) on their first call; ours do not, so
    a first `:train` that compiles nothing does not carry the compiler (bench/memory.py: peak RSS).
    Nor does `:load` of either optimizer's save in a new session, which read torch's defaults from a
    torch.optim constructor and so paid the import (3 to 6 s on a Zen 3) at a session's first load."""
    import subprocess
    import sys

    code = ("import sys; from minitf_repl.session import Session; from minitf_repl.dispatch import run_command; "
            "s = Session(data_spec='sort'); run_command(s, 'train', {'steps': '3'}); "
            "run_command(s, 'save', {'name': 'm'}); "
            "run_command(s, 'set', {'optimizer': 'adamw'}); run_command(s, 'train', {'steps': '2'}); "
            "run_command(s, 'save', {'name': 'x'}); "
            "print('torch._dynamo' in sys.modules); "
            "t = Session(data_spec='sort'); run_command(t, 'load', {'name': 'm'}); "
            "run_command(t, 'load', {'name': 'x'}); "
            "print('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-2:] == ["False", "False"]


# --- muon: one step against the formula ----------------------------------------------------------------
def newton_schulz(u: torch.Tensor, steps: int = 5, coefficients=(3.4445, -4.7750, 2.0315)) -> torch.Tensor:
    """NS(u) as core/optimizers.py writes it, in float64: about U V^T for u = U S V^T."""
    a, b, c = coefficients
    tall = u.shape[0] > u.shape[1]
    X = u.T if tall else u  # wide: X X^T is the smaller Gram matrix
    X = X / X.norm()
    for _ in range(steps):
        G = X @ X.T
        X = a * X + (b * G + c * G @ G) @ X
    return X.T if tall else X


def reference(W, grads, lr, wd, mu=MUON_MOMENTUM, nesterov=True, scale="match_rms_adamw", decay_lr_scaled=False):
    """W after one Muon step per gradient, from the module docstring's four lines."""
    W, b = W.double(), torch.zeros_like(W, dtype=torch.float64)
    A, B = W.shape
    adjusted = lr * (0.2 * math.sqrt(max(A, B)) if scale == "match_rms_adamw" else math.sqrt(max(1, A / B)))
    for g in grads:
        g = g.double()
        b = mu * b + (1 - mu) * g
        u = (1 - mu) * g + mu * b if nesterov else b
        W = W - (adjusted if decay_lr_scaled else lr) * wd * W - adjusted * newton_schulz(u)
    return W


@pytest.mark.parametrize("name", ["blocks.0.ffn.fc_in.weight", "blocks.0.ffn.fc_out.weight"], ids=["tall", "wide"])
def test_muon_steps_follow_the_formula(name):
    model = model_of()
    lr, wd = 0.05, 0.1  # large enough that the decay and the lr scaling are each far above the tolerance
    opt = make_optimizer(model, TrainConfig(optimizer="muon", lr=lr, weight_decay=wd))
    param = dict(model.named_parameters())[name]
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        param.copy_(torch.randn(param.shape, generator=g))  # entries of size 1, so the decay shows beside the step
    before = param.detach().clone()
    grads = [torch.randn(param.shape, generator=g) for _ in range(3)]  # unlike each other: Nesterov shows
    for grad in grads:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        param.grad = grad.clone()
        opt.step()
    got = param.detach().double()

    def error(**wrong) -> float:
        ref = reference(before, grads, **{"lr": lr, "wd": wd, **wrong})
        return ((got - ref).norm() / (ref - before.double()).norm()).item()

    # NS runs in bfloat16 where the CPU has bfloat16 units (8 bits of mantissa: the update agrees with
    # the float64 formula to about 1%) and in float32 elsewhere (far closer); either way what the
    # tolerance must separate are the wrong formulas.
    tolerance = 0.025
    assert error() < tolerance
    assert error(nesterov=False) > 2 * tolerance
    assert error(wd=0.0) > 2 * tolerance
    assert error(decay_lr_scaled=True) > 2 * tolerance  # decay uses the plain lr (torch's decoupled decay)
    assert error(mu=0.5) > 2 * tolerance
    assert error(scale="original") > 2 * tolerance  # Keller Jordan's sqrt(max(1, A/B)) instead of 0.2 sqrt(48)


def test_muon_momentum_is_adamws_beta1_and_a_checkpoint_keeps_its_own():
    """Muon's momentum is 0.9, AdamW's b1 (the module docstring says why); an optimizer state saved with
    another momentum (torch's 0.95, say) goes on with it when loaded."""
    model = model_of()
    opt = make_optimizer(model, TrainConfig(optimizer="muon"))
    assert MUON_MOMENTUM == optimizers.ADAMW_BETAS[0] == 0.9
    assert opt.muon.param_groups[0]["momentum"] == 0.9
    assert opt.adamw.param_groups[0]["betas"][0] == 0.9
    opt.muon.param_groups[0]["momentum"] = 0.95
    saved = opt.state_dict()
    fresh = make_optimizer(model, TrainConfig(optimizer="muon"))
    fresh.load_state_dict(saved)
    assert fresh.muon.param_groups[0]["momentum"] == 0.95


@pytest.fixture(params=[True, False], ids=["bf16-units", "no-bf16-units"])
def bf16_units(request, monkeypatch):
    """Both kinds of CPU, whichever this one is: the hardware answer every precision choice asks."""
    from minitf_repl.core import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: request.param)
    return request.param


def test_newton_schulz_runs_in_bfloat16_only_where_the_cpu_multiplies_it_natively(bf16_units, monkeypatch):
    """Emulated bfloat16 is several times slower than float32 (core.precision.fast_dtype): Muon's
    orthogonalisation asks the device like dtype=auto does, and the products really run in that dtype."""
    from minitf_repl.core import optimizers

    seen = []
    real_baddbmm = torch.baddbmm

    def spy(*args, **kwargs):  # every product of the five Newton-Schulz steps
        seen.append(args[1].dtype)
        return real_baddbmm(*args, **kwargs)

    monkeypatch.setattr(optimizers.torch, "baddbmm", spy)
    model = model_of()
    opt = make_optimizer(model, TrainConfig(optimizer="muon"))
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    monkeypatch.undo()
    expected = torch.bfloat16 if bf16_units else torch.float32
    assert seen and set(seen) == {expected}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32 either way


@pytest.mark.parametrize("shape", [(3, 16, 64), (2, 16, 33), (2, 16, 16)], ids=["4x-wide", "2x-wide", "square"])
def test_newton_schulz_in_float32_follows_the_float64_steps(shape):
    """The float32 steps, and the Gram form that wide matrices take (`_gram_newton_schulz`), give the
    float64 result of the five plain steps (this file's reference), down to singular values of 1e-4
    (a momentum with a few strong directions and many weak ones); in float64 the two forms agree."""
    from minitf_repl.core import optimizers

    g = torch.Generator().manual_seed(0)
    U, _, V = torch.linalg.svd(torch.randn(*shape, generator=g, dtype=torch.float64), full_matrices=False)
    X = U @ torch.diag_embed(torch.logspace(-4, 0, shape[1], dtype=torch.float64)) @ V
    exact = torch.stack([newton_schulz(x) for x in X])
    coefficients = (3.4445, -4.7750, 2.0315)
    assert torch.allclose(optimizers.newton_schulz(X, coefficients, 5, 1e-7, torch.float64), exact, atol=1e-10)
    got = optimizers.newton_schulz(X.float(), coefficients, 5, 1e-7, torch.float32).double()
    # Entries are about 1 / sqrt(columns), 0.12 to 0.25 here. The plain float32 steps land within 6e-6,
    # the Gram form within 3e-4 (it carries Q ~ 1 / sigma); bfloat16, torch's own Muon's choice, 0.13.
    assert (got - exact).abs().max() < 1e-3


def test_a_muon_update_is_roughly_orthogonal():
    """What makes Muon Muon: the step's singular values are all near 1 (NS leaves them in about [0.7, 1.2])."""
    model = model_of()
    lr = 0.01
    opt = make_optimizer(model, TrainConfig(optimizer="muon", lr=lr, weight_decay=0.0))
    param = model.blocks[0].ffn.fc_in.weight  # (48, 32)
    before = param.detach().clone()
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    # A gradient dominated by one direction: SGD would step mostly along it; Muon steps along all alike.
    g = torch.Generator().manual_seed(2)
    grad = 10 * torch.outer(torch.randn(48, generator=g), torch.randn(32, generator=g)) + torch.randn(48, 32, generator=g)
    param.grad = grad
    opt.step()
    O = (before - param.detach()) / (lr * 0.2 * math.sqrt(48))
    s = torch.linalg.svdvals(O.double())
    spread = torch.linalg.svdvals(grad.double())
    assert spread[0] / spread[-1] > 50  # the gradient: one direction far above the rest
    assert s.min() > 0.5 and s.max() < 1.5, s  # the step: every direction about alike


# --- muon in training --------------------------------------------------------------------------------
def tiny_trainer(spec: str = "pydoc", steps: int = 30, seed: int = 0, **train) -> Trainer:
    data = load_data(spec)
    torch.manual_seed(seed)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, "vocab_size": data.tokenizer.vocab_size}))
    config = TrainConfig(**{"steps": steps, "batch_size": 8, "eval_every": steps, "eval_batches": 2,
                            "warmup_steps": 3, "seed": seed, "optimizer": "muon", **train})
    return Trainer(model, data, config)


def test_training_with_muon_lowers_the_loss():
    trainer = tiny_trainer(steps=40)
    initial, _ = trainer.evaluate()
    summary = trainer.run()
    losses = [h["train_loss"] for h in trainer.history]
    assert initial > 3.5  # about ln V for pydoc's characters
    assert summary.val_loss < initial - 0.8, (initial, summary.val_loss)
    assert sum(losses[-5:]) / 5 < losses[0] - 0.8
    assert all(len(s) == 1 and "momentum_buffer" in s for s in trainer.optimizer.muon.state.values())


def weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_muon_state_dict_round_trips_exactly():
    trainer = tiny_trainer("sort:4", steps=6)
    trainer.run(should_stop=lambda: trainer.step >= 3)
    saved = trainer.optimizer.state_dict()
    n_muon = len(trainer.optimizer.muon.param_groups[0]["params"])
    assert saved["param_groups"][0]["params"] == list(range(n_muon))  # Muon's parameters numbered first
    assert sorted(saved["state"]) == list(range(sum(len(g["params"]) for g in saved["param_groups"])))
    other = make_optimizer(trainer.model, trainer.config)
    other.load_state_dict(saved)
    again = other.state_dict()
    assert again["param_groups"] == saved["param_groups"]
    assert again["state"].keys() == saved["state"].keys()
    assert all(same(again["state"][i], saved["state"][i]) for i in saved["state"])
    with pytest.raises(ValueError, match="do not match"):
        other.load_state_dict({**saved, "param_groups": saved["param_groups"][1:]})
    swapped = [dict(g) for g in saved["param_groups"]]
    swapped[0].pop("ns_coefficients")  # now it reads as an AdamW group
    with pytest.raises(ValueError, match="do not match"):
        other.load_state_dict({**saved, "param_groups": swapped})


def test_exact_resume_with_muon_through_a_checkpoint(tmp_path):
    n, m = 4, 3
    straight = tiny_trainer("sort:4", steps=n + m)
    straight.run()

    half = tiny_trainer("sort:4", steps=n + m)
    half.run(should_stop=lambda: half.step >= n)
    ckpt.save_checkpoint(tmp_path, "half", half.model, half, half.data.tokenizer.vocab, "sort:4")
    c = ckpt.load_checkpoint(tmp_path, "half")
    assert c.trainer_state["train_config"]["optimizer"] == "muon"
    model, trainer = ckpt.restore(c, half.data)
    ckpt.restore_rng(c)
    assert isinstance(trainer.optimizer, MuonWithAdamW)
    assert trainer.optimizer.state_dict()["param_groups"] == half.optimizer.state_dict()["param_groups"]
    trainer.run()
    assert trainer.step == n + m and same(weights(trainer), weights(straight))

    # It can fail: a fresh optimizer (no momentum) after the load does not end at the same weights.
    c = ckpt.load_checkpoint(tmp_path, "half")
    model, fresh = ckpt.restore(c, half.data)
    ckpt.restore_rng(c)
    fresh.optimizer = make_optimizer(model, fresh.config)
    fresh.run()
    assert not same(weights(fresh), weights(straight))


def test_snapshot_and_rollback_with_muon():
    trainer = tiny_trainer("sort:4", steps=8)
    trainer.run(should_stop=lambda: trainer.step >= 3)
    snap = trainer.snapshot()
    trainer.run()
    after = weights(trainer)
    trainer.rollback(snap)
    assert trainer.step == 3
    trainer.run()
    assert same(weights(trainer), after)


def test_rollback_across_a_switch_of_optimizer_brings_the_old_one_back():
    trainer = tiny_trainer("sort:4", steps=8, optimizer="adamw")
    trainer.run(should_stop=lambda: trainer.step >= 3)
    snap = trainer.snapshot()
    adamw_state = trainer.optimizer.state_dict()
    trainer.set_config(trainer.config.replace(optimizer="muon"))
    assert isinstance(trainer.optimizer, MuonWithAdamW) and not trainer.optimizer.state  # a fresh start
    trainer.run(should_stop=lambda: trainer.step >= 5)
    trainer.rollback(snap)
    assert type(trainer.optimizer) is optimizers.AdamW and trainer.config.optimizer == "adamw"
    restored = trainer.optimizer.state_dict()
    assert restored["param_groups"] == adamw_state["param_groups"]
    assert all(same(restored["state"][i], adamw_state["state"][i]) for i in adamw_state["state"])


def test_weight_decay_reaches_every_group_of_matrices():
    trainer = tiny_trainer("sort:4", steps=4)
    trainer.set_config(trainer.config.replace(weight_decay=0.3))
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [0.3, 0.3, 0.0]
    trainer.set_config(trainer.config.replace(optimizer="adamw", weight_decay=0.2))
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [0.2, 0.0]


# --- the shell: :set optimizer=muon on a trained model ----------------------------------------------------
class Notices(Reporter):
    def __init__(self):
        self.lines = []

    def notice(self, text):
        self.lines.append(text)


def test_set_optimizer_on_a_trained_model_takes_effect_and_keeps_the_weights():
    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=48, max_seq_len=16),
                TrainConfig(steps=4, batch_size=4, eval_every=4, eval_batches=1, optimizer="adamw"), data_spec="sort:4",
                device_name="cpu")
    run_command(s, "train", {"steps": "3"})
    model, trainer, kept = s.model, s.trainer, weights(s.trainer)
    notices = Notices()
    result = run_command(s, "set", {"optimizer": "muon"}, notices)
    assert result.changed == {"optimizer": ("adamw", "muon")} and not result.rebuilt
    assert s.model is model and s.trainer is trainer and trainer.step == 3 and same(weights(trainer), kept)
    assert isinstance(trainer.optimizer, MuonWithAdamW) and trainer.config.optimizer == "muon"
    assert len(notices.lines) == 1 and "starts afresh" in notices.lines[0]
    assert run_command(s, "config", {}).train["optimizer"] == "muon"
    run_command(s, "train", {"steps": "2"})
    assert trainer.step == 5 and trainer.optimizer.muon.state  # Muon did those steps
    run_command(s, "set", {"weight_decay": "0.4"})
    assert [g["weight_decay"] for g in trainer.optimizer.param_groups] == [0.4, 0.4, 0.0]
    assert run_command(s, "set", {"optimizer": "muon"}, notices).changed == {} and len(notices.lines) == 1


def test_set_optimizer_rejects_an_unknown_name():
    from minitf_repl.core.errors import UserError
    from minitf_repl.commands import REGISTRY
    from minitf_repl.parsing import parse_line

    with pytest.raises(UserError, match="optimizer must be one of adamw, muon"):
        parse_line(":set optimizer=sgd", REGISTRY)


@pytest.mark.parametrize("nesterov", [True, False], ids=["nesterov", "plain-momentum"])
def test_batched_muon_takes_torch_muons_steps(bf16_units, nesterov):
    """BatchedMuon orthogonalises same-shaped matrices together; the update must stay torch.optim.Muon's.

    torch's Muon always runs Newton-Schulz in bfloat16; BatchedMuon does so only where the CPU has
    bfloat16 units (else float32, closer to the exact formula), so both cases differ from torch's by
    bfloat16's rounding at most."""
    from minitf_repl.core.optimizers import BatchedMuon

    torch.manual_seed(0)
    shapes = [(16, 16), (16, 16), (64, 16), (16, 64), (64, 16)]
    ours = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    theirs = [torch.nn.Parameter(p.detach().clone()) for p in ours]
    kw = dict(lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw", nesterov=nesterov)
    a, b = BatchedMuon(ours, **kw), torch.optim.Muon(theirs, **kw)
    for _ in range(3):
        grads = [torch.randn(s) for s in shapes]
        for p, q, g in zip(ours, theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        a.step(), b.step()
    for p, q in zip(ours, theirs):
        torch.testing.assert_close(a.state[p]["momentum_buffer"], b.state[q]["momentum_buffer"])
        # bfloat16 Newton-Schulz: batched and single products round differently, by far less than a step
        torch.testing.assert_close(p, q, atol=2e-3, rtol=0)
    assert a.state_dict()["param_groups"][0].keys() == b.state_dict()["param_groups"][0].keys()
