"""`:ffn` (core.inside.feed_forward_neurons): a feed-forward part at one position as the sum of its units' writes.

Checked against the hidden layer computed here from the weights, the block's own output, and direct
logit attribution (core.attribution), whose FFN part the units' logit shares must add up to.
"""

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.attribution import direct_logit_attribution
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import feed_forward_neurons
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_qkv import SMALL, model_for  # a small model with weights far from their initial scale
from test_render import plain, text_of

IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def ffn_input(model, layer, at):
    """What block `layer`'s feed-forward reads at `at`, computed here block by block (pre-norm)."""
    idx = torch.tensor([IDS])
    with torch.no_grad():
        h = model.token_embedding(idx) + model.position_embedding(torch.arange(len(IDS)))
        for block in model.blocks[:layer]:
            h = block(h)
        block = model.blocks[layer]
        h = h + block.attn(block.ln_1(h))
        return block.ln_2(h)[0, at]


@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu", "relu2"])
def test_the_units_are_the_hidden_layer_and_sum_to_the_output(activation):
    model = model_for(activation=activation)
    ffn = model.blocks[1].ffn
    x = ffn_input(model, 1, 6)
    with torch.no_grad():
        pre = ffn.fc_in(x)
        h = ffn.act(pre)
        sizes = h.abs() * ffn.fc_out.weight.norm(dim=0)  # |h_n v_n| = |h_n| |v_n|
    found = feed_forward_neurons(model, IDS, layer=1, at=6, top=64)
    assert found.width == 64 and len(found.neurons) == 64
    assert [n.index for n in found.neurons[:5]] == sizes.argsort(descending=True)[:5].tolist()
    for n in found.neurons:
        assert (n.pre, n.h, n.write) == pytest.approx((pre[n.index].item(), h[n.index].item(),
                                                       sizes[n.index].item()), rel=1e-4, abs=1e-5)
    assert (found.positive, found.negative) == (int((h > 0).sum()), int((h < 0).sum()))
    if activation.startswith("relu"):
        assert found.negative == 0 and "exactly 0 below its kink" in found.below_zero  # ReLU never goes below 0
    else:
        assert found.lowest >= -0.1701 and "GELU lets small negatives through" in found.below_zero
    assert found.total_write == pytest.approx(sizes.sum().item(), rel=1e-4)
    assert found.out_diff < 1e-4 and found.out_size == pytest.approx(ffn(x).norm().item(), rel=1e-4)


@pytest.mark.parametrize("changes", [dict(activation="swiglu"), dict(bias=False), dict(activation="swiglu", bias=False)])
def test_every_feed_forward_kind_says_where_its_units_are(changes):
    model = model_for(**changes)
    found = feed_forward_neurons(model, IDS, layer=0, at=-1, top=3)
    assert found.out_diff < 1e-4 and len(found.neurons) == 3
    swiglu = changes.get("activation") == "swiglu"
    biased = changes.get("bias", True)
    gate = "xW_g + b_g" if biased else "xW_g"  # the gate's pre-activation: a b only with biases
    assert found.hidden == (f"SiLU({gate}) ⊙ " + ("(xW_u + b_u)" if biased else "xW_u") if swiglu else "GELU(xW_1)")
    assert found.pre_name == (gate if swiglu else "xW_1")  # no b_1 without biases
    assert ("either sign" if swiglu else "down to -0.17") in found.below_zero
    assert found.neurons[0].write >= found.neurons[1].write >= found.neurons[2].write


def test_the_units_logit_shares_add_up_to_the_blocks_share_in_attribution():
    """Direct logit attribution splits a logit into parts, one per block's FFN; its units split that part again."""
    model = model_for()
    V = SMALL["vocab_size"]
    for layer in (0, 1):
        found = feed_forward_neurons(model, IDS, layer=layer, at=-1, top=64, tokens=V)
        for target in (0, 7, 19):
            dla = direct_logit_attribution(model, IDS, target=target)
            mlp = next(p.logit for p in dla.parts if p.name == f"ffn {layer}")
            units = sum(dict(zip(n.promotes, n.promote_by))[target] for n in found.neurons)
            ffn = model.blocks[layer].ffn
            with torch.no_grad():
                end = model.blocks[-1](model.blocks[0](model.hook_embed(
                    model.token_embedding(torch.tensor([IDS])) + model.position_embedding(torch.arange(10)))))
                bias = model.ln_f.frozen(end[0, -1]).linear(ffn.fc_out.bias) @ model.lm_head.weight[target]
            assert units + bias.item() == pytest.approx(mlp, abs=1e-3)
        assert all(n.promote_by == sorted(n.promote_by, reverse=True) for n in found.neurons)
        assert all(n.demotes[0] == n.promotes[-1] for n in found.neurons)  # the most lowered: the last of all raised


def test_where_the_view_cannot_split_it_says_so():
    post = feed_forward_neurons(model_for(norm_placement="post"), IDS, layer=1)
    assert post.out_diff < 1e-4 and all(n.promotes is None for n in post.neurons)  # no logit reading after post-norm
    assert "post-norm" in post.no_tokens
    # residual=off: only the last block's output is what the head reads; an earlier block's writes never reach it
    replaced = model_for(residual=False)
    early, last = (feed_forward_neurons(replaced, IDS, layer=layer) for layer in (0, len(replaced.blocks) - 1))
    assert "residual=off" in early.no_tokens and all(n.promotes is None for n in early.neurons)
    assert last.no_tokens is None and all(n.promotes is not None for n in last.neurons)
    with pytest.raises(UserError, match=r"\(MixtureOfExperts\) does not say what its hidden units are"):
        feed_forward_neurons(model_for(n_experts=2), IDS)
    with pytest.raises(UserError, match="position 10 is not in the text of 10 tokens"):
        feed_forward_neurons(model_for(), IDS, at=10)
    with pytest.raises(UserError, match="layer 2 does not exist"):
        feed_forward_neurons(model_for(), IDS, layer=2)


def test_ffn_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = run(session, ":ffn")
    assert default.at == 15 and default.layer == 0 and len(default.units) == 8 and default.untrained
    out = plain(default)
    sample = sample_prompt(session.data)  # 'The example abov' in Python 3.11's documentation, another in 3.10's
    assert f"feed-forward of block 0 at position 15 '{sample[15]}' of '{sample}'" in out
    assert "u = GELU(xW_1 + b_1): 64 hidden units" in out and "raises the logit of" in out
    assert "checked: sum_n u_n v_n + b agrees with the block's FFN output" in out
    narrow = text_of(default, 60)
    assert "raises the logit of" in narrow and "lowers" not in narrow.split("raises the logit of")[1].split("\n")[0]
    some = run(session, ":ffn hello at=0 layer=1 k=3")
    assert (some.at, some.layer, len(some.units)) == (0, 1, 3)
    assert json_document(REGISTRY["ffn"], some)["schema"] == "minitf.ffn/4"
    with pytest.raises(UserError, match="at must be a position of the 5 characters read"):
        run(session, ":ffn hello at=5")
    run(session, ":set n_experts=2")
    with pytest.raises(UserError, match=":experts shows where the tokens go"):
        run(session, ":ffn")
