"""`:rope` (core.inside.rope_worked): rotary positions at one query, worked out by hand.

Checked against the model's own attention scores (the explicit path's S = QK^T / sqrt(d_k)), against
what RoPE promises (moving both positions leaves every score as it was; the pairs' terms add up to
the score), and against the same vectors unrotated. GQA and qk_norm read the vectors where the
rotation does.
"""

import math
import re

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import listening, rope_worked
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_qkv import IDS, model_for
from test_render import plain, text_of


def model_scores(model, layer, head):
    """The model's own S = QK^T / sqrt(d_k) of one head, from the explicit path's probe."""
    attn = model.blocks[layer].attn
    with listening(model, {"S": attn.hook_scores}, explicit_attention=True) as seen:
        model(torch.tensor([IDS]))
    return seen["S"][0, head].double()


@pytest.mark.parametrize("changes", [{}, {"n_kv_heads": 2}, {"qk_norm": True}, {"n_kv_heads": 1, "qk_norm": True}])
def test_the_scores_are_the_models_and_depend_on_the_distance_only(changes):
    model = model_for(pos_encoding="rope", **changes)
    for layer, head, at in [(0, 0, -1), (1, 3, 6)]:
        found = rope_worked(model, IDS, layer=layer, head=head, at=at)
        i = found.at
        S = model_scores(model, layer, head)
        dots = torch.tensor([k.dot for k in found.keys], dtype=torch.float64)
        assert torch.allclose(dots / math.sqrt(found.head_dim), S[i, : i + 1], atol=1e-5)
        assert found.model_diff < 1e-5 and found.shift_diff < 1e-10
        assert found.kv_head == head // (4 // (changes.get("n_kv_heads") or 4))
        assert found.shown == int(dots[:i].argmax())  # an earlier key: at distance 0 nothing turns
        shown = found.keys[found.shown]
        assert sum(p.share for p in found.pairs) == pytest.approx(shown.dot, abs=1e-10)  # the pairs add up
        assert sum(p.unrotated for p in found.pairs) == pytest.approx(shown.unrotated, abs=1e-10)
        assert found.by_distance[i - found.shown] == pytest.approx(shown.dot, abs=1e-10)  # its own distance
        assert len(found.by_distance) == 16 and len(found.pairs) == found.head_dim // 2 == 4
        assert [p.theta for p in found.pairs] == pytest.approx([10000 ** (-2 * m / 8) for m in range(4)])
        assert found.pairs[0].wavelength == pytest.approx(2 * math.pi)
        assert found.pairs[1].angle == pytest.approx((found.shown - i) * 0.1)


def test_without_rotation_the_scores_would_differ():
    found = rope_worked(model_for(pos_encoding="rope"), IDS, layer=1, head=0)
    assert max(abs(k.dot - k.unrotated) for k in found.keys[:-1]) > 1e-3  # every key but the query's own turned
    assert found.keys[-1].dot == pytest.approx(found.keys[-1].unrotated)  # distance 0: no turn at all


def test_a_model_without_rotary_positions_is_refused():
    for pos in ("learned", "sinusoidal", "none"):
        with pytest.raises(UserError, match="no rotary positions .* set pos_encoding=rope"):
            rope_worked(model_for(pos_encoding=pos), IDS)
    with pytest.raises(UserError, match="head 4 does not exist"):
        rope_worked(model_for(pos_encoding="rope"), IDS, head=4)


def test_rope_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32, pos_encoding="rope"),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = run(session, ":rope")
    out = plain(default)
    assert default.rope.at == 15 and default.rope.layer == 0 and default.untrained
    sample = sample_prompt(session.data)  # pydoc's is each Python's own documentation: 'The example abov' in 3.11's
    assert f"RoPE in block 0, head 0, query at position 15 '{sample[15]}' of '{sample}'" in out
    assert "R(i)q · R(j)k = q · R((j - i)θ)k" in out and "checked: redone in float64" in out
    assert "key j" in out and "pair c" in out and "a turn every" in out
    # all 16 keys listed where they fit, as :qkv's (46th session: "the 14 keys ...; 2 other keys not listed")
    assert "not listed" not in out and all(f" {j} " in out for j in range(16))
    long = plain(run(session, ":rope " + "the quick brown fox " * 2))  # 32 keys: the 14 with the largest q·k
    assert "the 14 keys with the largest rotated q·k; 18 other keys not listed" in long
    some = run(session, ":rope hello at=2 layer=1 head=3")
    assert (some.rope.at, some.rope.layer, some.rope.head, len(some.rope.keys)) == (2, 1, 3, 3)
    assert json_document(REGISTRY["rope"], some)["schema"] == "minitf.rope/2"
    narrow = text_of(some, 60)
    assert "key j" in narrow and "its term" in narrow
    twins = plain(run(session, ":rope abcabc"))  # in the first block a token's key is the token's alone
    assert re.search(r"'(a|b)' stands at j = (0|1) and j = (3|4): the same key, the same q·k without rotation", twins)
    assert "the distance alone tells them apart" in twins
    assert "stands at" not in plain(run(session, ":rope abcdef"))  # no token twice
    run(session, ":set pos_encoding=learned autosave=off")
    with pytest.raises(UserError, match="no rotary positions"):
        run(session, ":rope")

