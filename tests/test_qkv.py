"""`:qkv` (core.inside.query_attention): one query's attention worked out by hand.

Checked against references that do not share its code: the attention pattern `:attn` shows, q, k
and v projected here from the model's weights, F.scaled_dot_product_attention, and every variant
that changes where the scores read q and k (qk_norm, RoPE, GQA/MQA, the fused path).
"""

import math
import re

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import attention_maps, query_attention
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of

SMALL = dict(vocab_size=20, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=16)
IDS = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8]


def model_for(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**{**SMALL, **changes}))
    with torch.no_grad():  # weights far from init, so that the patterns are far from uniform
        for p in model.parameters():
            p.mul_(3.0)
    return model


def test_the_row_is_the_attention_pattern_and_the_mask_zeroes_the_future():
    model = model_for()
    maps = attention_maps(model, IDS).maps  # (layers, heads, T, T)
    for layer, head, at in [(0, 0, 0), (0, 3, 5), (1, 2, 11), (1, 1, -1)]:
        worked = query_attention(model, IDS, layer=layer, head=head, at=at)
        i = at % len(IDS)
        assert worked.at == i
        assert worked.weights == pytest.approx(maps[layer, head, i].tolist(), abs=1e-6)
        assert all(w == 0.0 for w in worked.weights[i + 1:])  # exactly 0, not small
        assert sum(worked.weights) == pytest.approx(1.0, abs=1e-9)
        assert len(worked.dots) == len(IDS)  # the future's scores are computed, then masked
        assert worked.scores == pytest.approx([d / math.sqrt(8) for d in worked.dots])
        assert max(worked.model_weights_diff, worked.model_out_diff, worked.fused_out_diff) < 1e-5
    assert query_attention(model, IDS, at=0).weights[0] == 1.0  # position 0 reads only itself


def test_q_k_v_are_the_projections_of_the_normed_stream():
    """Layer 0's q, k and v computed here from the weights: embedding + position, ln_1, the projections."""
    model = model_for()
    x = model.token_embedding.weight[IDS] + model.position_embedding.weight[: len(IDS)]
    attn = model.blocks[0].attn
    with torch.no_grad():
        h = model.blocks[0].ln_1(x)
        q, k, v = attn.q_proj(h), attn.k_proj(h), attn.v_proj(h)  # (T, d): head 2 is columns 16..23
    worked = query_attention(model, IDS, layer=0, head=2, at=7)
    assert worked.q == pytest.approx(q[7, 16:24].tolist(), abs=1e-5)
    assert torch.tensor(worked.keys).float() == pytest.approx(k[:, 16:24], abs=1e-5)
    assert torch.tensor(worked.values).float() == pytest.approx(v[:, 16:24], abs=1e-5)
    a = torch.softmax((k[:8, 16:24] @ q[7, 16:24]) / math.sqrt(8), dim=0)
    assert worked.weights[:8] == pytest.approx(a.tolist(), abs=1e-6)
    assert worked.out == pytest.approx((a @ v[:8, 16:24]).tolist(), abs=1e-5)


def test_without_the_scale_the_softmax_is_sharper():
    model = model_for()
    for at in (3, 8, 11):
        worked = query_attention(model, IDS, layer=1, head=0, at=at)
        expected = torch.softmax(torch.tensor(worked.dots[: at + 1], dtype=torch.float64), dim=0)
        assert worked.unscaled_weights[: at + 1] == pytest.approx(expected.tolist())
        assert max(worked.unscaled_weights) >= max(worked.weights)


@pytest.mark.parametrize("changes", [
    dict(qk_norm=True), dict(pos_encoding="rope"), dict(n_kv_heads=2), dict(n_kv_heads=1, pos_encoding="rope"),
    dict(attention="sdpa"), dict(norm="rmsnorm", qk_norm=True, pos_encoding="rope", n_kv_heads=2),
])  # fmt: skip
def test_every_variant_is_read_where_its_scores_read_q_and_k(changes):
    """A q read before qk_norm or RoPE, or the wrong shared key/value head, would give another row than the model's."""
    model = model_for(**changes)
    for head in range(4):
        worked = query_attention(model, IDS, layer=1, head=head, at=9)
        assert worked.kv_head == head // (4 // model.config.kv_heads)
        assert max(worked.model_weights_diff, worked.model_out_diff, worked.fused_out_diff) < 1e-5, changes
    expected = (["qk_norm"] if changes.get("qk_norm") else []) + (["rope"] if changes.get("pos_encoding") == "rope" else [])
    assert worked.turned == expected
    assert model.blocks[0].attn.use_sdpa == (changes.get("attention") == "sdpa")  # the path is restored


def test_reading_q_and_k_before_the_rotation_would_be_caught():
    """The check is not vacuous: under RoPE, the row from q and k before their rotation is not the model's."""
    model = model_for(pos_encoding="rope")
    attn = model.blocks[0].attn
    seen = {}

    def keep(name, rows):
        def hook(module, inputs, output):
            seen[name] = output[0, 0, rows].clone()  # returns None: the output goes on unchanged

        return hook

    hooks = [attn.hook_q.register_forward_hook(keep("q", 9)), attn.hook_k.register_forward_hook(keep("k", slice(0, 10)))]
    worked = query_attention(model, IDS, layer=0, head=0, at=9)
    for hook in hooks:
        hook.remove()
    unrotated = torch.softmax(seen["k"] @ seen["q"] / math.sqrt(8), dim=0)
    assert (unrotated - torch.tensor(worked.weights[:10])).abs().max() > 1e-3
    assert worked.model_weights_diff < 1e-5


def test_what_it_cannot_look_at_is_one_clear_error():
    model = model_for()
    with pytest.raises(UserError, match="layer 2 does not exist; choose one of 0..1"):
        query_attention(model, IDS, layer=2)
    with pytest.raises(UserError, match="head 4 does not exist; choose one of 0..3"):
        query_attention(model, IDS, head=4)
    with pytest.raises(UserError, match="position 12 is not in the text of 12 tokens"):
        query_attention(model, IDS, at=12)
    with pytest.raises(UserError, match="position -13"):
        query_attention(model, IDS, at=-13)


def test_qkv_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = run(session, ":qkv")  # the views' sample 'The example abov': 16 characters, query 7 by default
    assert default.at == 7 and default.head == 0 and default.layer == 0 and default.untrained
    out = plain(default)
    sample = sample_prompt(session.data)  # pydoc's is each Python's own documentation: 'The example abov' in 3.11's
    assert f"query 7 '{sample[7]}' of '{sample}'" in out and f"{sample[7]} = i" in out
    assert "-inf 0 masked: the future" in out and "j = 9..15: 7 more future keys" in out
    assert "checked: the model's own A row agrees" in out and "this model has not trained yet" in out
    last = run(session, ":qkv hello at=-1 layer=1 head=3")
    assert (last.at, last.layer, last.head, last.tokens) == (4, 1, 3, list("hello"))
    assert "masked: the future" not in plain(last)
    assert json_document(REGISTRY["qkv"], last)["schema"] == "minitf.qkv/4"
    for line, message in [(":qkv hello at=5", "at must be a position of the 5 characters read: 0..4"),
                          (":qkv head=4", "head must be in 0..3"), (":qkv layer=2", "layer must be in 0..1")]:
        with pytest.raises(UserError, match=message):
            run(session, line)
    run(session, ":train steps=1")
    assert not run(session, ":qkv").untrained
    run(session, ":ablate head=0.0")  # head 0 of block 0 zeroed after AV: the model's own row is no longer o_i
    ablated = run(session, ":qkv")
    assert ablated.ablations == ["head 0.0"] and ablated.model_out_diff > 1e-3 and ablated.model_weights_diff < 1e-5
    out = plain(ablated)
    assert "more than rounding: an ablation changes the model's own" in out and "switched off now: head 0.0" in out
    run(session, ":ablate off")
    assert "float32 rounding" in plain(run(session, ":qkv"))


def test_a_long_text_lists_the_heaviest_keys_and_sums_the_rest():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=1, d_ff=64, max_seq_len=64),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    result = run(session, ":qkv " + "the quick brown fox jumps over the lazy dog, " * 2 + " at=-1")
    assert result.dropped and len(result.tokens) == 64 and result.at == 63
    out = text_of(result, 120)
    listed = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    together = [float(m.group(1)) for m in re.finditer(r"(\d\.\d{3})\s+\d+ keys? together", out)]
    # the 14 heaviest keys, then the query itself; a single key between two of them is listed in its own row, in the
    # place of a line that would sum it alone (46th session), so the rows are as many as before
    assert len(listed) + len(together) <= 15 + 14 and "= i" in listed[-1] and "1 key together" not in out
    js = [int(line.split()[0]) for line in listed]
    heaviest = sorted(range(63), key=lambda j: result.weights[j], reverse=True)[:14]
    assert set(heaviest) <= set(js) and len(js) >= 15
    assert together and sum(together) == pytest.approx(1 - sum(result.weights[j] for j in js),
                                                       abs=0.0006 * len(together))
