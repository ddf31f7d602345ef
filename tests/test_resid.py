"""`:resid` (core.inside.residual_stream): the residual stream at one position, block by block.

Checked against the stream rebuilt here from the model's own parts, one formula at a time:
h_0 = W_E[x] + W_P[t], then h + f(LN(h)) for pre-norm and LN(h + f(h)) for post-norm.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import residual_stream
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of

SMALL = dict(vocab_size=20, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_seq_len=16)
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]


def model_for(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**{**SMALL, **changes}))
    with torch.no_grad():  # gains and biases away from 1 and 0, so that a norm's output size is not a given
        for name, p in model.named_parameters():
            p.add_(0.3 * torch.randn_like(p)) if "ln" in name else p.mul_(2.0)
    return model.eval()


def rebuilt(model, at):
    """[(before, norm input, norm output, write, after)] per sublayer, and the final norm's (input, output)."""
    idx = torch.tensor([IDS])
    h = model.token_embedding(idx)
    if model.position_embedding is not None:
        h = h + model.position_embedding(torch.arange(len(IDS)))
    steps = []
    with torch.no_grad():
        for block in model.blocks:
            for norm, f in ((block.ln_1, block.attn), (block.ln_2, block.ffn)):
                kept = h if block.residual else 0  # residual=off: the write replaces the stream
                if block.post_norm:
                    write = f(h)
                    after = norm(kept + write)
                    steps.append((h[0, at], (kept + write)[0, at], after[0, at], write[0, at], after[0, at]))
                else:
                    read = norm(h)
                    write = f(read)
                    after = kept + write
                    steps.append((h[0, at], h[0, at], read[0, at], write[0, at], after[0, at]))
                h = after
        final = (h[0, at], model.ln_f(h)[0, at])
    return steps, final


@pytest.mark.parametrize("changes", [
    {}, dict(norm_placement="post"), dict(norm="rmsnorm", pos_encoding="rope"), dict(pos_encoding="none"),
    dict(n_experts=2), dict(attention="sdpa", pos_encoding="sinusoidal"), dict(residual=False),
    dict(residual=False, norm_placement="post"),
])  # fmt: skip
def test_the_stream_is_the_formula_rebuilt_from_the_parts(changes):
    model = model_for(**changes)
    for at in (0, 6, -1):
        stream = residual_stream(model, IDS, at=at)
        steps, final = rebuilt(model, at % len(IDS))
        assert stream.at == at % len(IDS) and len(stream.writes) == 2 * len(model.blocks) == len(steps)
        for w, (before, read_in, read_out, write, after) in zip(stream.writes, steps):
            assert w.before == pytest.approx(before.norm().item(), rel=1e-4)
            assert w.norm.size_in == pytest.approx(read_in.norm().item(), rel=1e-4)
            assert w.norm.mean == pytest.approx(read_in.mean().item(), abs=1e-5)
            if stream.norm_scale == "std":  # LayerNorm: centre, then divide by the standard deviation
                expected = (read_in.var(unbiased=False) + 1e-5).sqrt()
            else:  # RMSNorm: divide by the root mean square, no centring
                expected = (read_in.pow(2).mean() + 1e-5).sqrt()
            assert w.norm.scale == pytest.approx(expected.item(), rel=1e-4)
            assert w.norm.size_out == pytest.approx(read_out.norm().item(), rel=1e-4)
            assert w.write == pytest.approx(write.norm().item(), rel=1e-4)
            assert w.cos == pytest.approx(F.cosine_similarity(write, before, dim=0).item(), abs=1e-4)
            assert w.after == pytest.approx(after.norm().item(), rel=1e-4)
        if stream.placement == "post":
            assert stream.final is None
        else:
            assert stream.final.size_in == pytest.approx(final[0].norm().item(), rel=1e-4)
            assert stream.final.size_out == pytest.approx(final[1].norm().item(), rel=1e-4)
    assert stream.placement == changes.get("norm_placement", "pre")
    rms = changes.get("norm") == "rmsnorm"
    assert (stream.norm_label, stream.norm_scale) == (("RMSNorm", "rms") if rms else ("LN", "std"))
    has_table = changes.get("pos_encoding", "learned") in ("learned", "sinusoidal")
    assert (stream.position is not None) == has_table
    token = model.token_embedding.weight[IDS[-1]].norm().item()
    assert stream.token == pytest.approx(token, rel=1e-5)
    if not has_table:
        assert stream.embed == pytest.approx(token, rel=1e-5)  # h_0 = x: no position is added at the input


def test_a_layer_norm_hands_on_sqrt_d_whatever_the_stream_size():
    """With gain 1 and bias 0 (a fresh model), |LN(h)| = sqrt(d) up to eps, while |h| grows block by block."""
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**SMALL))
    stream = residual_stream(model, IDS)
    for w in stream.writes:  # LN(h) = (h - mean) / sqrt(var + eps): length sqrt(d * var / (var + eps))
        variance = w.norm.scale**2 - 1e-5
        assert w.norm.size_out == pytest.approx(math.sqrt(32 * variance / (variance + 1e-5)), rel=1e-4)
    assert stream.writes[-1].after > stream.embed


def test_a_position_outside_the_text_is_one_clear_error():
    model = model_for()
    with pytest.raises(UserError, match="position 10 is not in the text of 10 tokens"):
        residual_stream(model, IDS, at=10)
    with pytest.raises(UserError, match="position -11"):
        residual_stream(model, IDS, at=-11)


def test_resid_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = run(session, ":resid")  # the views' sample 'The example abov', at its last position
    assert default.at == 15 and len(default.writes) == 4 and default.untrained and default.placement == "pre"
    out = plain(default)
    sample = sample_prompt(session.data)  # pydoc's is each Python's own documentation: 'The example abov' in 3.11's
    assert f"the residual stream at position 15 '{sample[15]}' of '{sample}'" in out
    assert "|f|/|h| cos(f, h) |h| after" in out and "final LN_f" in out and "|h| went from" in out
    narrow = text_of(default, 60)
    table, _, left_out = narrow.partition("left out at 60 columns:")
    assert "|h| after" in table and "|f|/|h|" not in table and "…" not in narrow  # a column dropped, none cut
    assert "|f|/|h|" in left_out  # and named as left out
    first = run(session, ":resid hello at=0")
    assert first.at == 0 and first.tokens == list("hello")
    assert json_document(REGISTRY["resid"], first)["schema"] == "minitf.resid/5"
    with pytest.raises(UserError, match="at must be a position of the 5 characters read: 0..4"):
        run(session, ":resid hello at=5")
    run(session, ":train steps=1")
    run(session, ":ablate block=1")  # the block runs, but its output is replaced by its input
    skipped = run(session, ":resid hi")
    assert skipped.ablations == ["block 1"] and "switched off now: block 1" in plain(skipped)
    assert skipped.writes[3].after == pytest.approx(skipped.writes[2].before)  # what block 2 reads: block 1's input
    run(session, ":ablate off")
    run(session, ":set norm_placement=post")
    post = run(session, ":resid hi")
    assert post.final is None and "post-norm: h <- LN(h + f(h))" in plain(post)
    run(session, ":set norm_placement=pre residual=off")
    replaced = run(session, ":resid hi")
    assert not replaced.residual and all(w.after == pytest.approx(w.write, rel=1e-5) for w in replaced.writes)
    assert "residual=off: h <- f(LN(h))" in plain(replaced) and "nothing accumulates" in plain(replaced)
