"""`:kv` (core.inside.cached_decoding): decoding with the KV cache against the naive loop, step by step.

Checked against core.generate (the decoding :gen runs), the window's slide past max_seq_len, and
the variants that change what the cache holds (GQA, MQA, RoPE).
"""

import pytest

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.config import GenConfig, ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.generate import generate
from minitf_repl.core.inside import cached_decoding
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_qkv import model_for  # a small model with weights far from their initial scale
from test_render import plain, text_of

PROMPT = [3, 1, 4, 1, 5]


def test_each_step_runs_one_position_and_agrees_with_the_naive_loop():
    model = model_for()
    found = cached_decoding(model, PROMPT, n=8)
    assert [s.cached_positions for s in found.steps] == [5, 1, 1, 1, 1, 1, 1, 1]
    assert [s.naive_positions for s in found.steps] == list(range(5, 13))
    assert [s.cache_length for s in found.steps] == list(range(5, 13))
    assert [s.refilled for s in found.steps] == [True] + [False] * 7
    assert all(s.logit_diff < 1e-4 for s in found.steps) and all(s.cached_token == s.token for s in found.steps)
    expected = list(generate(model, PROMPT, GenConfig(n=8, temperature=0, cache=True)))
    assert [s.token for s in found.steps] == expected  # the tokens :gen decodes, greedily
    assert found.cache_bytes_per_token == 2 * 2 * 4 * 8 * 4  # K and V x layers x heads x d_k x float32
    assert model.training  # the training flag is restored


def test_past_the_window_the_cache_is_filled_again():
    model = model_for()
    found = cached_decoding(model, list(range(14)), n=6)
    assert [s.naive_positions for s in found.steps] == [14, 15, 16, 16, 16, 16]
    assert [s.cached_positions for s in found.steps] == [14, 1, 1, 16, 16, 16]  # full at 16: positions shift
    assert [s.refilled for s in found.steps] == [True, False, False, True, True, True]
    assert all(s.logit_diff < 1e-4 for s in found.steps)
    expected = list(generate(model, list(range(14)), GenConfig(n=6, temperature=0, cache=True)))
    assert [s.token for s in found.steps] == expected


@pytest.mark.parametrize("changes, kv_heads", [(dict(n_kv_heads=2), 2), (dict(n_kv_heads=1, pos_encoding="rope"), 1),
                                               (dict(attention="sdpa", qk_norm=True), 4)])
def test_what_the_cache_holds_follows_the_key_value_heads(changes, kv_heads):
    found = cached_decoding(model_for(**changes), PROMPT, n=5)
    assert all(s.logit_diff < 1e-4 for s in found.steps)
    assert found.cache_bytes_per_token == 2 * 2 * kv_heads * 8 * 4


def test_a_broken_cache_would_be_caught():
    """The comparison is not vacuous: a cache that forgets its first key shows in the logits."""
    model = model_for()
    real = model.new_cache

    def forgetful():
        cache = real()
        for layer in cache.layers:
            append = layer.append

            def dropping(k, v, append=append, layer=layer):
                keys, values = append(k, v)
                return keys[:, :, 1:] if layer.length > 6 else keys, values[:, :, 1:] if layer.length > 6 else values

            layer.append = dropping
        return cache

    model.new_cache = forgetful
    found = cached_decoding(model, PROMPT, n=4)
    assert found.steps[0].logit_diff < 1e-4 and max(s.logit_diff for s in found.steps[2:]) > 1e-3


def test_what_it_cannot_decode_is_one_clear_error():
    with pytest.raises(UserError, match="tokens to decode must be a whole number >= 1"):
        cached_decoding(model_for(), PROMPT, n=0)


def test_kv_decodes_what_gen_samples_from(monkeypatch):
    from minitf_repl.commands import speed

    monkeypatch.setattr(speed, "QUANTIZE_TOKENS", 8)  # :quantize int8 times 8 tokens, not 64
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=1, batch_size=2, eval_batches=1), data_spec="pydoc", device_name="cpu")
    run(session, ":train")
    run(session, ":quantize int8")
    int8 = run(session, ":kv hello n=3")
    assert int8.int8 and "the int8 copy :gen samples from" in plain(int8)
    assert all(s.logit_diff < 1e-4 for s in int8.steps)  # the cache holds for the int8 copy too
    run(session, ":quantize off")
    assert not run(session, ":kv hello n=3").int8


def test_kv_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = run(session, ":kv")
    assert len(default.steps) == 8 and default.steps[0].cached_positions == 16 and default.untrained
    out = plain(default)
    sample = sample_prompt(session.data)  # pydoc's is each Python's own documentation: 'The example abov' in 3.11's
    assert f"decoding 8 tokens after '{sample}', greedily, with the KV cache and without" in out
    assert "positions run through the model: 23 with the cache, 156 without (6.8x)" in out
    assert "the cache holds 11.5 KiB after the last step: 512 B a position (2 layers x K and V x 4" in out
    short = run(session, ":kv hello -n 3")
    assert [s.cached_positions for s in short.steps] == [5, 1, 1]
    assert json_document(REGISTRY["kv"], short)["schema"] == "minitf.kv/7"
    long = run(session, ":kv hello n=40")
    listed = [line for line in text_of(long).splitlines() if line.strip()[:1].isdigit()]
    # the first and last steps, and the step where the window first slides (28) with the one before it
    assert len(listed) == 6 + 2 + 8 and "steps 6..26" in text_of(long) and "steps 29..31" in text_of(long)
    assert sum(line.split()[:1] == ["…"] for line in text_of(long).splitlines()) == 2  # each cut marked in its row
    assert "the window slides" in plain(long)  # 5 + 40 tokens pass max_seq_len=32
    with pytest.raises(UserError, match="n must be"):
        run(session, ":kv n=0")
