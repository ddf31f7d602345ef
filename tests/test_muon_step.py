"""`:muon` (core.muon_step): Muon's step on one matrix, worked out.

Checked against references computed here: the gradient against autograd on the same batch, the
momentum against the optimizer's own next step, each Newton-Schulz step's singular values against
the polynomial p applied to X_0's (what makes Newton-Schulz an SVD-free orthogonalisation), the
last step against the optimizer's newton_schulz in float64, and the exact orthogonal factor from an
SVD. Nothing of the session may change: weights, .grad, the optimizer's momentum.
"""

import math

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.core import precision
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.muon_step import matrix_names, muon_step
from minitf_repl.core.optimizers import newton_schulz
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # torch.optim.Muon's quintic, the reference here
SMALL = ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def session(optimizer="muon", steps=0, **changes):
    s = Session(ModelConfig(**{**SMALL.__dict__, **changes}) if changes else SMALL,
                TrainConfig(steps=max(steps, 1), batch_size=4, optimizer=optimizer, lr=1e-2, eval_every=1000),
                data_spec="pydoc", device_name="cpu")
    if steps:
        run(s, f":train steps={steps}")
    return s


def batch_gradient(s, name, seed):
    """dL/dW of `name` on the batch muon_step draws: the same generator, autograd here."""
    x, y = s.data.get_batch("train", 4, 32, torch.Generator().manual_seed(seed))
    s.model.eval()
    logits, _ = s.model(x)
    weight = dict(s.model.named_parameters())[name]
    (g,) = torch.autograd.grad(s.model.loss(logits, y), [weight])
    return g.double()


def clipped_gradient(s, name, seed):
    """What the optimizer reads of dL/dW: :train clips the whole model's gradient to grad_clip first."""
    x, y = s.data.get_batch("train", 4, 32, torch.Generator().manual_seed(seed))
    s.model.eval()
    names, params = zip(*s.model.named_parameters())
    grads = torch.autograd.grad(s.model.loss(s.model(x)[0], y), params)
    total = torch.stack([g.norm() for g in grads]).norm()
    scale = min(1.0, s.train_config.grad_clip / (float(total) + 1e-6))  # torch.nn.utils.clip_grad_norm_'s
    return grads[names.index(name)].double() * scale


def test_the_gradient_momentum_and_update_are_the_optimizers():
    s = session(steps=3)  # a momentum to read
    weight = dict(s.model.named_parameters())["blocks.1.ffn.fc_out.weight"]
    before, grad = weight.detach().clone(), None if weight.grad is None else weight.grad.clone()
    old = s.trainer.optimizer.state[weight]["momentum_buffer"].clone()
    found = muon_step(s.model, s.data, layer=1, matrix="ffn.fc_out", batch_size=4, seed=5,
                      optimizer=s.trainer.optimizer, lr=1e-2)
    assert found.grad == pytest.approx(batch_gradient(s, "blocks.1.ffn.fc_out.weight", 5).norm().item(), rel=1e-6)
    assert found.had_momentum and found.nesterov
    G = clipped_gradient(s, "blocks.1.ffn.fc_out.weight", 5)  # the momentum reads the gradient :train clipped
    b = 0.9 * old.double() + 0.1 * G
    u = 0.1 * G + 0.9 * b
    assert found.buffer == pytest.approx(b.norm().item(), rel=1e-6)
    assert found.update == pytest.approx(u.norm().item(), rel=1e-6)
    assert found.singular == pytest.approx(torch.linalg.svdvals(u).tolist(), rel=1e-6, abs=1e-12)
    assert (found.shape, found.turned, found.tokens, found.momentum) == ((32, 64), False, 128, 0.9)
    # nothing written: the weight, its .grad and the optimizer's momentum are as they were
    assert torch.equal(weight.detach(), before)
    assert (weight.grad is None) if grad is None else torch.equal(weight.grad, grad)
    assert torch.equal(s.trainer.optimizer.state[weight]["momentum_buffer"], old)


def test_newton_schulz_is_a_polynomial_on_the_singular_values():
    s = session()
    found = muon_step(s.model, s.data, layer=0, matrix="ffn.fc_in", batch_size=4, seed=1,
                      optimizer=s.trainer.optimizer)
    assert found.turned and found.shape == (64, 32) and not found.had_momentum  # tall: orthogonalised as 32 x 64
    G = batch_gradient(s, "blocks.0.ffn.fc_in.weight", 1)
    u = (0.1 * G + 0.9 * 0.1 * G).mT  # no momentum yet: b = 0.1 G
    a, b, c = NS_COEFFICIENTS
    sigma = torch.linalg.svdvals(u / u.norm())
    for step in found.steps:  # p applied k times to X_0's singular values, sorted, is step k's
        assert step.polynomial_diff < 1e-12
        assert (step.smallest, step.largest) == pytest.approx((sigma.min().item(), sigma.max().item()), rel=1e-9)
        sigma = a * sigma + b * sigma ** 3 + c * sigma ** 5
    ours = newton_schulz(u[None], NS_COEFFICIENTS, 5, 1e-7, torch.float64)[0]  # the optimizer's, in float64
    U, _, Vh = torch.linalg.svd(u, full_matrices=False)
    assert found.steps[-1].polar_distance == pytest.approx(((ours - U @ Vh).norm() / (U @ Vh).norm()).item(), rel=1e-6)
    assert found.steps[0].polar_distance > found.steps[-1].polar_distance  # closer to U V^T step by step
    assert found.float32_diff < 1e-3 and found.steps[-1].largest < 1.25  # the quintic settles in a band, not at 1
    assert found.adamw_first and found.adamw_top_share == pytest.approx(
        float(torch.linalg.svdvals(torch.sign(G)).pow(2)[:10].sum() / G.numel()))  # sign(G): |sign(G)|^2 = A B
    assert found.o_top_share < found.adamw_top_share < found.u_top_share  # Muon spreads the step most
    assert found.orthogonal_share == 10 / 32 and found.o_top_share >= found.orthogonal_share - 1e-9
    O = ours
    assert found.step_scale == pytest.approx(1e-2 * 0.2 * math.sqrt(64))  # match_rms_adamw: 0.2 sqrt(max(A, B))
    assert found.step_rms == pytest.approx(found.step_scale * O.pow(2).mean().sqrt().item(), rel=1e-6)


@pytest.mark.parametrize("bf16", [True, False])
def test_the_check_runs_newton_schulz_in_the_dtype_the_device_asks_for(monkeypatch, bf16):
    """A CPU with bfloat16 units runs the optimizer's Newton-Schulz in bfloat16, one without in float32."""
    monkeypatch.setattr(precision, "native_bf16", lambda device: bf16)
    s = session()
    found = muon_step(s.model, s.data, optimizer=s.trainer.optimizer)
    assert found.optimizer_dtype == ("bfloat16" if bf16 else "float32")
    if bf16:
        assert 1e-4 < found.optimizer_diff < 0.1  # bfloat16's 8 bits
    else:
        assert found.optimizer_diff == found.float32_diff < 1e-3


def test_an_adamw_sessions_own_update_is_torchs():
    """Where AdamW trains the matrix, its update is the one torch's AdamW takes next, from the session's moments."""
    s = session(optimizer="adamw", steps=3)
    weight = dict(s.model.named_parameters())["blocks.0.attn.v_proj.weight"]
    group = next(g for g in s.trainer.optimizer.param_groups if any(p is weight for p in g["params"]))
    found = muon_step(s.model, s.data, matrix="attn.v_proj", batch_size=4, seed=4, optimizer=s.trainer.optimizer)
    copy = torch.nn.Parameter(weight.detach().double().clone())
    reference = torch.optim.AdamW([copy], lr=1.0, betas=group["betas"], eps=group["eps"], weight_decay=0.0)
    reference.state[copy] = {k: v.double().clone() if v.dim() else v.clone()
                             for k, v in s.trainer.optimizer.state[weight].items()}
    copy.grad = clipped_gradient(s, "blocks.0.attn.v_proj.weight", 4)
    before = copy.detach().clone()
    reference.step()
    update = before - copy.detach()  # lr 1, no decay: the update itself
    share = torch.linalg.svdvals(update).pow(2)
    assert not found.adamw_first and found.adamw_top_share == pytest.approx(float(share[:10].sum() / share.sum()),
                                                                          rel=1e-6)
    assert found.session_optimizer == "adamw"


def test_which_matrices_and_what_an_adamw_session_gets():
    s = session(optimizer="adamw")
    assert matrix_names(s.model, 1) == ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "ffn.fc_in",
                                        "ffn.fc_out"]
    found = muon_step(s.model, s.data, optimizer=s.trainer.optimizer)
    assert found.session_optimizer == "adamw" and not found.had_momentum and found.momentum == 0.9
    with pytest.raises(UserError, match="block 0 has no matrix 'token_embedding' that Muon trains; choose one of "
                                        "attn.q_proj, "):
        muon_step(s.model, s.data, matrix="token_embedding")
    assert muon_step(s.model, s.data, matrix="fc_in").name == "blocks.0.ffn.fc_in.weight"  # the last part will do
    swiglu = session(activation="swiglu")
    assert "ffn.gate_proj" in matrix_names(swiglu.model, 0)


def test_muon_in_the_shell():
    s = session()
    default = run(s, ":muon")
    out = plain(default)
    assert default.step.name == "blocks.0.attn.q_proj.weight" and default.untrained
    assert "Muon's step on block 0's attn.q_proj (32 x 32)" in out
    assert "none yet, so M starts at 0" in out and "u = 0.1 G + 0.9 M (Nesterov" in out
    assert "each step is U p(S) V^T with p(s) = a s + b s^3 + c s^5" in out
    assert "smallest σ" in out and "|X - UV^T| / |UV^T|" in out
    assert "at the peak lr = 0.01" in out and "checked: the optimizer's own newton_schulz" in out
    narrow = text_of(default, 60)
    assert "smallest σ" in narrow and "largest σ" in narrow
    run(s, ":train steps=2")
    tall = run(s, ":muon layer=1 matrix=ffn.fc_in seed=2")
    assert tall.step.had_momentum and "(64 x 32, tall, so taken as its 32 x 64 transpose: the optimizer works on the wide form" in plain(tall)
    assert "the momentum (kept by the session)" in plain(tall)
    assert json_document(REGISTRY["muon"], tall)["schema"] == "minitf.muon/4"
    with pytest.raises(UserError, match="layer must be in 0..1"):
        run(s, ":muon layer=2")
    with pytest.raises(UserError, match="no matrix 'ffn.nope'"):
        run(s, ":muon matrix=ffn.nope")
    run(s, ":set optimizer=adamw")
    assert ":set optimizer=muon makes Muon take these steps" in plain(run(s, ":muon"))


@pytest.mark.parametrize("bf16", [True, False])
def test_the_check_line_names_the_dtype_the_device_runs(monkeypatch, bf16):
    monkeypatch.setattr(precision, "native_bf16", lambda device: bf16)
    out = plain(run(session(), ":muon"))
    if bf16:
        assert "in float32 and to " in out and " in bfloat16, the dtype it runs in on this device" in out
    else:
        assert "in float32, the dtype it runs in on this device" in out and "bfloat16" not in out
