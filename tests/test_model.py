"""The model against its own math: shapes, causality, the sdpa reference, the KV cache, the config.

Sizes are small and unequal (batch 3, length 7, vocab 11, d_model 32, 2 heads, d_ff 48) so that a
swapped axis fails instead of passing by luck.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.core.errors import ConfigError, DataError, UserError
from minitf_repl.core.model import (
    FeedForward,
    MiniTransformerLM,
    ModelConfig,
    MultiHeadSelfAttention,
    TransformerBlock,
)

B, T = 3, 7
SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48)


def make_model(seed: int = 0, **changes) -> MiniTransformerLM:
    torch.manual_seed(seed)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes}))
    return model.eval()


def random_idx(vocab: int = 11, b: int = B, t: int = T, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (b, t), generator=g)


def test_the_seed_names_are_exported_from_the_package():
    # The seed's vocabulary is the user's: `from minitf_repl import MiniTransformerLM` must give these classes.
    import minitf_repl

    for cls in (ModelConfig, MultiHeadSelfAttention, FeedForward, TransformerBlock, MiniTransformerLM):
        assert getattr(minitf_repl, cls.__name__) is cls
        assert cls.__name__ in minitf_repl.__all__
    out = make_model()(random_idx())
    assert isinstance(out, tuple) and len(out) == 2  # forward(idx, targets=None) -> (logits, loss)


def test_output_shapes():
    model = make_model()
    idx = random_idx()
    logits, loss = model(idx)
    assert logits.shape == (B, T, 11)
    assert loss is None
    logits, loss = model(idx, targets=random_idx(seed=2))
    assert logits.shape == (B, T, 11)
    assert loss.shape == ()


def test_submodule_shapes():
    config = ModelConfig(**SIZES)
    x = torch.randn(B, T, 32)
    assert MultiHeadSelfAttention(config)(x).shape == (B, T, 32)
    assert FeedForward(config)(x).shape == (B, T, 32)
    assert TransformerBlock(config)(x).shape == (B, T, 32)


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
@pytest.mark.parametrize("t", [0, 3, 6])
def test_causality(attention, t):
    model = make_model(attention=attention)
    idx = random_idx()
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % 11
    with torch.no_grad():
        before, _ = model(idx)
        after, _ = model(changed)
    # The past never sees the future ...
    torch.testing.assert_close(after[:, :t], before[:, :t], atol=1e-6, rtol=0)
    # ... and the changed position itself does see its own token.
    assert not torch.allclose(after[:, t], before[:, t])


@pytest.mark.parametrize("vocab", [11, 50])
def test_initial_loss_is_about_ln_vocab(vocab):
    # Small init means near-uniform predictions: the loss of a guess among `vocab` tokens.
    model = make_model(vocab_size=vocab)
    with torch.no_grad():
        _, loss = model(random_idx(vocab, b=8, t=16), targets=random_idx(vocab, b=8, t=16, seed=3))
    assert abs(loss.item() - math.log(vocab)) < 0.1


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal"])
@pytest.mark.parametrize("activation", ["gelu", "relu"])
@pytest.mark.parametrize("n_heads", [1, 4])
def test_explicit_attention_matches_sdpa(pos_encoding, activation, n_heads):
    explicit = make_model(pos_encoding=pos_encoding, activation=activation, n_heads=n_heads)
    sdpa = make_model(seed=99, pos_encoding=pos_encoding, activation=activation, n_heads=n_heads, attention="sdpa")
    sdpa.load_state_dict(explicit.state_dict())
    idx = random_idx()
    with torch.no_grad():
        a, _ = explicit(idx)
        b, _ = sdpa(idx)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_kv_cache_matches_full_forward(attention):
    model = make_model(attention=attention)
    idx = random_idx()
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache()
        prefill, _ = model(idx[:, : T - 1], cache=cache)
        step, _ = model(idx[:, T - 1 :], cache=cache)
    assert cache.length == T
    torch.testing.assert_close(prefill, full[:, : T - 1], atol=1e-5, rtol=0)
    torch.testing.assert_close(step, full[:, T - 1 :], atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_kv_cache_in_chunks(attention):
    # A chunk of several new tokens on top of a cache needs the offset causal mask (T < T_k).
    model = make_model(attention=attention)
    idx = random_idx()
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache()
        pieces = [model(idx[:, a:b], cache=cache)[0] for a, b in [(0, 2), (2, 5), (5, 6), (6, 7)]]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)


def test_ignored_targets():
    model = make_model()
    idx, targets = random_idx(), random_idx(seed=2)
    targets[0, :3] = -1
    targets[2, 5] = -1
    with torch.no_grad():
        logits, loss = model(idx, targets=targets)
    keep = targets != -1
    expected = F.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(loss, expected)
    # The ignored positions really were left out: counting them with any label would change the loss.
    assert not torch.allclose(loss, F.cross_entropy(logits.view(-1, 11), targets.clamp(min=0).view(-1)))


def _hand_count(c: ModelConfig) -> int:
    d, f = c.d_model, c.d_ff
    attn = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    block = 2 * d + attn + 2 * d + ffn  # ln_1, attention, ln_2, ffn
    positions = c.max_seq_len * d if c.pos_encoding == "learned" else 0
    return c.vocab_size * d + positions + c.n_layers * block + 2 * d  # lm_head adds nothing: tied


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal"])
def test_weight_tying_and_parameter_count(pos_encoding):
    model = make_model(pos_encoding=pos_encoding)
    assert model.lm_head.weight is model.token_embedding.weight
    assert model.num_parameters() == _hand_count(model.config)
    assert model.num_parameters() == sum(p.numel() for p in set(model.parameters()))


def test_init():
    model = make_model()
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            assert 0.015 < module.weight.std().item() < 0.025, name
            assert abs(module.weight.mean().item()) < 0.005, name
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            assert torch.count_nonzero(module.bias) == 0, name
        if isinstance(module, torch.nn.LayerNorm):
            assert torch.all(module.weight == 1) and torch.count_nonzero(module.bias) == 0, name


INT_FIELDS = ["vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers", "d_ff"]

BAD_CONFIGS = (
    [dict(d_model=30, n_heads=4)]
    + [{name: value} for name in INT_FIELDS for value in (0, -1)]
    + [{name: True} for name in INT_FIELDS]
    + [{name: float(SIZES[name])} for name in INT_FIELDS]
    + [dict(d_model="32")]
    + [dict(dropout=-0.1), dict(dropout=1.0), dict(dropout=float("nan")), dict(dropout=True), dict(dropout="0.1")]
    + [dict(activation="tanh"), dict(activation="GELU"), dict(pos_encoding="alibi"), dict(attention="flash")]
)


@pytest.mark.parametrize("changes", BAD_CONFIGS, ids=repr)
def test_invalid_config_raises(changes):
    with pytest.raises(ConfigError) as info:
        ModelConfig(**{**SIZES, **changes})
    assert isinstance(info.value, (UserError, ValueError))
    # The message names the setting that is wrong (a reader knows what to change), on one line.
    named = [name for name in changes if name in str(info.value)]
    assert named and "\n" not in str(info.value), str(info.value)


def test_config_mutated_after_creation_is_checked_by_model():
    config = ModelConfig(**SIZES)
    config.n_heads = 3  # 32 is not divisible by 3
    with pytest.raises(ConfigError):
        MiniTransformerLM(config)


def test_input_longer_than_context_raises():
    model = make_model()
    model(random_idx(t=16))  # exactly max_seq_len is fine
    with pytest.raises(DataError):
        model(random_idx(t=17))


def test_cache_overflow_raises():
    model = make_model()
    cache = model.new_cache()
    with torch.no_grad():
        model(random_idx(t=10), cache=cache)
        with pytest.raises(DataError):
            model(random_idx(t=7), cache=cache)
    assert cache.length == 10  # the rejected chunk left the cache as it was


def test_attention_probes_fire_with_expected_shapes():
    model = make_model()
    attn = model.blocks[0].attn
    seen = {}
    names = ["hook_q", "hook_k", "hook_v", "hook_scores", "hook_masked_scores", "hook_weights", "hook_weighted"]
    handles = [
        getattr(attn, name).register_forward_hook(lambda m, i, o, name=name: seen.__setitem__(name, o))
        for name in names + ["hook_merged"]
    ]
    try:
        with torch.no_grad():
            model(random_idx())
    finally:
        for h in handles:
            h.remove()
    h, d_k = 2, 16
    for name in ("hook_q", "hook_k", "hook_v", "hook_weighted"):
        assert seen[name].shape == (B, h, T, d_k), name
    for name in ("hook_scores", "hook_masked_scores", "hook_weights"):
        assert seen[name].shape == (B, h, T, T), name
    assert seen["hook_merged"].shape == (B, T, 32)

    torch.testing.assert_close(seen["hook_weights"].sum(-1), torch.ones(B, h, T))
    above = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    masked = seen["hook_masked_scores"]
    assert torch.equal(torch.isneginf(masked), above.expand(B, h, T, T))
    assert torch.isfinite(masked[..., ~above]).all()
    # Masking changes nothing on and below the diagonal.
    torch.testing.assert_close(masked[..., ~above], seen["hook_scores"][..., ~above])
    assert torch.all(seen["hook_weights"][..., above] == 0)
