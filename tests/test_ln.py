"""`:ln` (core.inside.norm_worked): one norm at one position, worked out step by step.

Checked against torch's own F.layer_norm and a plain RMSNorm formula on the input computed here
block by block, and against what a norm promises: the centred x̂ has mean 0 and standard deviation 1,
every position comes out about sqrt(d) long, and eps decides the scale only where the spread is near 0.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import norm_worked
from minitf_repl.dispatch import json_document
from minitf_repl.render import fmt
from minitf_repl.session import Session
from test_commands import Recorder, run
from test_qkv import model_for
from test_render import plain, text_of

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def with_gains(**changes):
    """A small model whose norms have gains and biases far from 1 and 0, so that the last step shows."""
    model = model_for(**changes)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            if getattr(module, "centres", None) is not None and module.weight is not None:
                module.weight.copy_(torch.rand(module.weight.shape, generator=generator) * 1.5 + 0.5)
                if getattr(module, "bias", None) is not None:
                    module.bias.copy_(torch.randn(module.bias.shape, generator=generator))
    return model


def norm_inputs(model):
    """What ln_1 and ln_2 of every block and ln_f read at every position, computed here block by block (pre-norm)."""
    idx = torch.tensor([IDS])
    seen = {}
    with torch.no_grad():
        h = model.token_embedding(idx) + model.position_embedding(torch.arange(len(IDS)))
        for b, block in enumerate(model.blocks):
            seen[f"{b}.ln_1"] = h[0]
            h = h + block.attn(block.ln_1(h))
            seen[f"{b}.ln_2"] = h[0]
            h = h + block.ffn(block.ln_2(h))
        seen["ln_f"] = h[0]
    return seen


@pytest.mark.parametrize("which,layer", [("ln_1", 0), ("ln_2", 0), ("ln_1", 1), ("ln_2", 1), ("ln_f", 0)])
def test_layernorm_by_hand_is_torchs_layer_norm(which, layer):
    model = with_gains()
    norm = model.ln_f if which == "ln_f" else getattr(model.blocks[layer], which)
    xs = norm_inputs(model)["ln_f" if which == "ln_f" else f"{layer}.{which}"].double()
    want = F.layer_norm(xs, (32,), norm.weight.double(), norm.bias.double(), norm.eps)
    found = norm_worked(model, IDS, layer=layer, which=which, at=6, top=32)
    x = xs[6]
    assert found.centres and found.label == "LN" and found.d == 32 and found.eps == 1e-5
    assert found.layer == (None if which == "ln_f" else layer)
    assert found.mean == pytest.approx(x.mean().item(), abs=1e-6)
    assert found.var == pytest.approx(x.var(unbiased=False).item(), rel=1e-5)  # the biased variance, as LN's
    assert found.scale == pytest.approx(math.sqrt(found.var + 1e-5), rel=1e-9)
    assert found.mean_square == pytest.approx(found.var + found.mean ** 2, rel=1e-9)
    assert found.other_scale == pytest.approx(math.sqrt(found.mean_square + 1e-5), rel=1e-9)  # what RMSNorm divides by
    assert found.normalised_mean == pytest.approx(0, abs=1e-9)
    assert found.normalised_std == pytest.approx(math.sqrt(found.var / (found.var + 1e-5)), rel=1e-9)
    assert found.size_normalised == pytest.approx(math.sqrt(32) * found.normalised_std, rel=1e-9)
    assert found.size_out == pytest.approx(want[6].norm().item(), rel=1e-5)
    assert found.model_diff < 1e-5
    by_index = {f.index: f for f in found.features}
    assert [f.index for f in found.features] == x.abs().argsort(descending=True).tolist()  # largest |x_j| first
    for j in (0, 7, 31):
        f = by_index[j]
        assert f.x == pytest.approx(x[j].item(), abs=1e-5)
        assert f.centred == pytest.approx(x[j].item() - found.mean, abs=1e-5)
        assert f.gain == pytest.approx(norm.weight[j].item()) and f.bias == pytest.approx(norm.bias[j].item())
        assert f.out == pytest.approx(want[6, j].item(), abs=1e-4)
    assert found.features_share == pytest.approx(1.0)  # all 32 listed: they carry the whole spread
    assert found.gain == pytest.approx((norm.weight.min().item(), norm.weight.mean().item(), norm.weight.max().item()))
    assert found.bias_size == pytest.approx(norm.bias.norm().item(), rel=1e-6)
    assert len(found.positions) == len(IDS)
    for t in (0, 9):
        assert found.positions[t].size_in == pytest.approx(xs[t].norm().item(), rel=1e-5)
        assert found.positions[t].size_out == pytest.approx(want[t].norm().item(), rel=1e-5)


def test_rmsnorm_scales_without_centring():
    model = with_gains(norm="rmsnorm", bias=False)
    norm = model.blocks[1].ln_2
    found = norm_worked(model, IDS, layer=1, which="ln_2", at=-1, top=4)
    x = norm_inputs(model)["1.ln_2"][-1].double()
    rms = torch.sqrt(x.pow(2).mean() + norm.eps)
    assert not found.centres and found.label == "RMSNorm" and found.bias_size is None
    assert found.scale == pytest.approx(rms.item(), rel=1e-6)
    assert found.other_scale == pytest.approx(math.sqrt(found.var + norm.eps), rel=1e-9)  # LayerNorm's std
    assert found.size_centred == pytest.approx(found.size_in)  # nothing subtracted
    assert all(f.centred == f.x and f.bias is None for f in found.features)
    assert [f.out for f in found.features] == pytest.approx([(x[f.index] / rms * norm.weight[f.index]).item()
                                                            for f in found.features], abs=1e-5)
    assert found.size_normalised == pytest.approx(math.sqrt(32 * found.mean_square / (found.mean_square + norm.eps)))
    assert found.model_diff < 1e-5 and len(found.features) == 4
    assert 0 < found.features_share < 1


def test_every_position_comes_out_the_same_size_and_eps_matters_only_near_zero():
    model = model_for()  # untrained gains: 3 everywhere, biases 0 (model_for multiplies every weight by 3)
    found = norm_worked(model, IDS, which="ln_2", at=0)
    sizes = [p.size_in for p in found.positions]
    assert max(sizes) / min(sizes) > 1.05  # the norm read vectors of different sizes ...
    assert all(p.size_out == pytest.approx(3 * math.sqrt(32), rel=1e-3) for p in found.positions)  # ... one size out
    assert all(p.size_normalised == pytest.approx(math.sqrt(32), rel=1e-3) for p in found.positions)
    scales = [p.scale for p in found.positions]
    assert max(scales) / min(scales) > 1.05  # each position divided by its own s
    # A stream a thousand times smaller: its spread is below eps, so eps, not the spread, sets the scale.
    with torch.no_grad():
        model.token_embedding.weight.mul_(1e-4)
        model.position_embedding.weight.mul_(1e-4)
    tiny = norm_worked(model, IDS, which="ln_1", at=0)
    assert tiny.var < 1e-6 and tiny.scale == pytest.approx(math.sqrt(tiny.var + 1e-5))
    assert tiny.size_normalised < 0.5 * math.sqrt(32)  # eps keeps x̂ from blowing the tiny vector up to sqrt(d)
    assert tiny.positions[0].size_normalised == pytest.approx(tiny.size_normalised)


def test_each_placement_says_what_the_norm_reads_and_feeds():
    pre = norm_worked(model_for(), IDS, layer=1, which="ln_2")
    assert (pre.reads, pre.feeds) == ("the stream after block 1's attention", "the FFN of block 1")
    final = norm_worked(model_for(), IDS, which="ln_f")
    assert "last block" in final.reads and "output head" in final.feeds
    post_model = model_for(norm_placement="post")
    post = norm_worked(post_model, IDS, layer=0, which="ln_1")
    assert post.reads == "h + Attention(h) in block 0" and post.model_diff < 1e-5
    assert norm_worked(post_model, IDS, layer=1, which="ln_2").feeds == "the stream: the output head"
    with pytest.raises(UserError, match="post-norm model has no final norm.*which=ln_1"):
        norm_worked(post_model, IDS, which="ln_f")
    off = norm_worked(model_for(residual=False), IDS, layer=1, which="ln_1")
    assert "residual=off" in off.reads and off.model_diff < 1e-5
    bare = norm_worked(model_for(norm_gain=False), IDS)
    assert bare.gain is None and bare.bias_size is None and all(f.out == f.normalised for f in bare.features)
    with pytest.raises(UserError, match="which norm: one of ln_1, ln_2, ln_f"):
        norm_worked(model_for(), IDS, which="ln_3")
    with pytest.raises(UserError, match="position 10 is not in the text of 10 tokens"):
        norm_worked(model_for(), IDS, at=10)


def test_ln_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = run(session, ":ln")
    assert default.norm.at == 15 and default.norm.which == "ln_1" and default.norm.layer == 0 and default.untrained
    out = plain(default)
    sample = sample_prompt(session.data)  # pydoc's is each Python's own documentation: 'The example abov' in 3.11's
    assert f"LN ln_1 of block 0 at position 15 '{sample[15]}' of '{sample}'" in out
    assert "LN(x) = (x - mean(x)) / sqrt(var(x) + eps) * g + b, over the d = 32 features" in out
    # untrained, the embeddings are small: eps under the root already takes x̂'s std a little below 1
    assert f"x̂ = (x - mean) / s: |x̂| = {default.norm.size_normalised:.3f} (sqrt(d) = 5.657), mean +0.000" in out
    assert 0.95 < default.norm.normalised_std < 0.999 and "it matters only where the spread is near 0" in out
    assert "its output goes to the attention of block 0" in out and "RMSNorm would divide by rms(x)" in out
    assert "checked: redone here in float64, y agrees with the model's own ln_1 output" in out
    assert "|x_t|" in out and "|y_t|" in out and "this model has not trained yet" in out
    largest = max(range(16), key=lambda t: default.norm.positions[t].size_in)
    assert f"(the largest at t = {largest} " in out and "|x̂_t| varies 1.0" in out
    narrow = text_of(default, 60)
    assert "feature j" in narrow and "x̂_j" in narrow and "y_j" in narrow
    run(session, ":train steps=2")
    heard = Recorder()
    final = run(session, ":layernorm hello at=0 which=ln_f k=3 layer=1", heard)  # a layer given to ln_f: said, unused
    assert heard.notices == ["layer=1 does not apply to ln_f, the one norm after the last block; it was left out"]
    assert (final.norm.at, final.norm.which, len(final.norm.features)) == (0, "ln_f", 3)
    assert "LN ln_f (the final norm) at position 0 'h'" in plain(final)
    assert json_document(REGISTRY["ln"], final)["schema"] == "minitf.ln/1"
    with pytest.raises(UserError, match="at must be a position of the 5 characters read"):
        run(session, ":ln hello at=5")
    with pytest.raises(UserError, match="layer must be in 0..1"):
        run(session, ":ln layer=2")
    run(session, ":set norm=rmsnorm norm_gain=off")
    rms = plain(run(session, ":ln which=ln_2"))
    assert "RMSNorm(x) = x / sqrt(mean(x^2) + eps), over" in rms and "y = x̂: norm_gain=off" in rms
    assert "LayerNorm would subtract the mean first, then divide by std(x)" in rms and "g_j" not in rms


def test_a_signed_number_is_never_minus_zero():
    """x̂'s mean is 0 up to rounding, of either sign: the view writes +0.000, not -0.000."""
    assert [fmt.signed(v) for v in (-1e-17, -0.0, 0.0, -0.0004, -0.0006, 2.5)] == [
        "+0.000", "+0.000", "+0.000", "+0.000", "-0.001", "+2.500"]
    assert fmt.signed(-3.14159, 2) == "-3.14"
