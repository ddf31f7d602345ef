"""The variant lab: every switch against the model's own properties and against the published formulas.

For each value of each switch (and the presets and a few combinations): the KV cache gives the
naive loop's tokens, the explicit attention equals the fused kernel, the future never leaks into
the past, parameter_count agrees with the built model, and a checkpoint round trip is exact.
The building blocks are checked against formulas written out here, independently of the modules:
RoPE (the paper's interleaved pairs), RMSNorm, SwiGLU, grouped-query attention and the MoE router.
Sizes are small and unequal (batch 3, length 7, vocab 11, d_model 32, 4 heads, d_ff 48).
"""

from __future__ import annotations

import gc
import math
import re

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import (
    PRESETS,
    GenConfig,
    ModelConfig,
    TrainConfig,
    apply_preset,
    ffn_hidden,
    matching_preset,
    preset_changes,
)
from minitf_repl.core.data import TextCorpus, load_data
from minitf_repl.core.errors import ConfigError
from minitf_repl.core.experts import MixtureOfExperts
from minitf_repl.core.feedforward import SwiGLU
from minitf_repl.core.generate import generate
from minitf_repl.core.ledger import cost_ledger, linear_flops_per_token
from minitf_repl.core.model import MiniTransformerLM, MultiHeadSelfAttention
from minitf_repl.core.norms import RMSNorm
from minitf_repl.core.positions import RotaryEmbedding
from minitf_repl.core.sizes import kv_cache_bytes_per_token, parameter_count
from minitf_repl.core.trace import trace
from minitf_repl.core.train import Trainer

B, T = 3, 7
SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=4, n_layers=2, d_ff=48)

# One entry per value of every switch, then the presets and some combinations.
SWITCHES = (
    [dict(pos_encoding=p) for p in ("learned", "sinusoidal", "rope", "none")]
    + [dict(norm="rmsnorm"), dict(norm_placement="post"), dict(norm="rmsnorm", norm_placement="post")]
    + [dict(residual=False), dict(residual=False, norm_placement="post")]
    + [dict(ffn=False), dict(ffn=False, norm_placement="post"), dict(ffn=False, residual=False)]
    + [dict(causal=False), dict(causal=False, pos_encoding="rope", n_kv_heads=2)]
    + [dict(qk_norm=True), dict(qk_norm=True, norm="rmsnorm"), dict(norm_gain=False), dict(norm_gain=False, norm="rmsnorm")]
    + [dict(activation=a) for a in ("gelu", "relu", "gelu_tanh", "relu2", "swiglu")]
    + [dict(n_kv_heads=k) for k in (0, 1, 2, 4)]
    + [dict(tie_embeddings=False), dict(bias=False), dict(rope_base=500.0, pos_encoding="rope")]
    + [dict(n_experts=1), dict(n_experts=4, experts_per_token=1), dict(n_experts=3, experts_per_token=2),
       dict(n_experts=4, experts_per_token=2, activation="swiglu")]
)
COMBOS = [
    dict(pos_encoding="rope", n_kv_heads=1, qk_norm=True, norm="rmsnorm"),
    dict(pos_encoding="none", norm_placement="post", bias=False, tie_embeddings=False),
    dict(pos_encoding="rope", n_kv_heads=2, n_experts=3, experts_per_token=2, activation="relu2", bias=False),
]
PRESET_CONFIGS = [preset_changes(name, ModelConfig(**SIZES)) for name in PRESETS]
ALL = SWITCHES + COMBOS + PRESET_CONFIGS


def label(changes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in changes.items()) or "seed"


variants = pytest.mark.parametrize("changes", ALL, ids=[label(c) for c in ALL])
# causal=off is the mask's counter-example: a position reads later ones, so a prefix's outputs (a cache's, a
# chunk's) are not the full text's. tests/test_causal.py tests it on its own terms.
CAUSAL = [c for c in ALL if c.get("causal", True)]
causal_variants = pytest.mark.parametrize("changes", CAUSAL, ids=[label(c) for c in CAUSAL])


def make_model(changes: dict, seed: int = 0, **more) -> MiniTransformerLM:
    torch.manual_seed(seed)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes, **more}))
    with torch.no_grad():  # wake the untrained model up: norms, experts and sampling get something to do
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.mul_(10 if name == "token_embedding.weight" else 5)
            elif name.endswith("bias"):
                p.normal_(0, 0.1)
            else:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def random_idx(b: int = B, t: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (b, t), generator=torch.Generator().manual_seed(seed))


# --- properties, for every switch ---------------------------------------------------------------------
@variants
@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=1.0, top_k=5)], ids=["greedy", "sampled"])
def test_cache_gives_the_naive_loops_tokens(changes, sampling):
    model = make_model(changes)
    n = 30  # 4 + 30 tokens: past max_seq_len = 16, so the window slides
    cached = list(generate(model, [1, 4, 1, 5], GenConfig(n=n, gen_seed=3, cache=True, **sampling)))
    naive = list(generate(model, [1, 4, 1, 5], GenConfig(n=n, gen_seed=3, cache=False, **sampling)))
    assert cached == naive


@causal_variants
def test_cache_in_chunks_matches_the_full_forward(changes):
    model = make_model(changes)
    idx = random_idx()
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache()
        pieces = [model(idx[:, a:b], cache=cache)[0] for a, b in [(0, 2), (2, 5), (5, 7)]]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)
    # The cache holds the key/value heads only: GQA and MQA shrink it.
    assert cache.layers[0].k.shape == (B, model.config.kv_heads, 16, model.config.head_dim)


@variants
def test_explicit_attention_matches_sdpa(changes):
    explicit = make_model(changes)
    fused = make_model(changes, seed=99, attention="sdpa")
    fused.load_state_dict(explicit.state_dict())
    idx = random_idx()
    with torch.no_grad():
        a, _ = explicit(idx)
        b, _ = fused(idx)
        cache = fused.new_cache()  # the masked (T < T_k) call of the kernel too
        c = torch.cat([fused(idx[:, :3], cache=cache)[0], fused(idx[:, 3:], cache=cache)[0]], dim=1)
        explicit_cache = explicit.new_cache()  # the explicit path's own masked call (causal=off: no mask either)
        d = torch.cat([explicit(idx[:, :3], cache=explicit_cache)[0], explicit(idx[:, 3:], cache=explicit_cache)[0]],
                      dim=1)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    torch.testing.assert_close(d, c, atol=1e-5, rtol=0)
    if changes.get("causal", True):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=0)


@causal_variants
@pytest.mark.parametrize("t", [0, 4])
def test_causality(changes, t):
    model = make_model(changes)
    idx = random_idx()
    changed = idx.clone()
    changed[:, t] = (changed[:, t] + 1) % 11
    with torch.no_grad():
        before, _ = model(idx)
        after, _ = model(changed)
    torch.testing.assert_close(after[:, :t], before[:, :t], atol=1e-6, rtol=0)
    assert not torch.allclose(after[:, t], before[:, t])


@variants
def test_parameter_count_matches_the_built_model(changes):
    model = make_model(changes)
    assert parameter_count(model.config) == model.num_parameters()
    assert (model.lm_head.weight is model.token_embedding.weight) == model.config.tie_embeddings
    assert all(p.requires_grad for p in model.parameters())


@variants
def test_checkpoint_round_trip(tmp_path, changes):
    data = TextCorpus("tiny", "the quick brown fox jumps over a lazy dog. " * 20, "test text")
    data_vocab = data.tokenizer.vocab_size
    torch.manual_seed(3)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes, "vocab_size": data_vocab}))
    trainer = Trainer(model, data, TrainConfig(steps=2, batch_size=4, eval_every=2, eval_batches=1))
    trainer.run()
    ckpt.save_checkpoint(tmp_path, "variant", model, trainer, data.tokenizer.vocab, "tiny-test-text")
    loaded = ckpt.load_checkpoint(tmp_path, "variant")
    rebuilt = ckpt.build_model(loaded)
    assert rebuilt.config == model.config
    stored = set(loaded.model_state)
    assert "lm_head.weight" in stored and not any("rope" in k or "causal_mask" in k for k in stored)
    assert (rebuilt.lm_head.weight is rebuilt.token_embedding.weight) == model.config.tie_embeddings
    x = torch.randint(data_vocab, (3, 7))
    assert torch.equal(rebuilt.eval()(x)[0], model.eval()(x)[0])
    restored, _ = ckpt.restore(loaded, data)
    assert torch.equal(restored.eval()(x)[0], model(x)[0])


@variants
def test_trace_gives_every_step_a_formula(changes):
    records = trace(make_model(changes), random_idx())
    assert all(r.formula for r in records), [r.path for r in records if not r.formula]


def allocation_stream(prof) -> int:
    """Bytes still allocated at the end of the profile (as in tests/test_ledger.py)."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    return sum(e.nbytes() for e in events)


@pytest.mark.parametrize(
    "changes",
    [dict(), dict(norm="rmsnorm"), dict(norm_placement="post"), dict(qk_norm=True), dict(pos_encoding="rope"),
     dict(n_kv_heads=2), dict(activation="relu2"), dict(activation="swiglu"), dict(n_experts=4), dict(norm_gain=False)]
    + PRESET_CONFIGS,
    ids=label,
)
def test_activation_memory_matches_what_the_forward_keeps(changes):
    from torch.profiler import ProfilerActivity, profile

    model = MiniTransformerLM(ModelConfig(**{**SIZES, "max_seq_len": 48, **changes})).train()
    x = random_idx(3, 40)
    ledger = cost_ledger(model, 3, 40)
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(x, x)  # noqa: F841 (kept alive: what stays allocated is what backward needs)
    kept = allocation_stream(prof)
    assert 0.95 < kept / ledger.activation_bytes < 1.05, (kept, ledger.activation_bytes)


# --- the building blocks against their published formulas ------------------------------------------------
def test_rope_against_a_hand_written_rotation():
    head_dim, base = 8, 10000.0
    rope = RotaryEmbedding(head_dim, 16, base)
    x = torch.randn(B, 2, T, head_dim)
    start = 5
    got = rope.rotate(x, start)
    want = torch.empty_like(x)
    for t in range(T):
        pos = start + t
        for i in range(head_dim // 2):
            a = pos * base ** (-2 * i / head_dim)
            x0, x1 = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            want[..., t, 2 * i] = x0 * math.cos(a) - x1 * math.sin(a)
            want[..., t, 2 * i + 1] = x0 * math.sin(a) + x1 * math.cos(a)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # What RoPE is for: q.k depends on the distance between the positions only.
    q, k = torch.randn(head_dim), torch.randn(head_dim)

    def dot(i, j):
        qi = rope.rotate(q.view(1, 1, 1, -1), i)
        kj = rope.rotate(k.view(1, 1, 1, -1), j)
        return (qi * kj).sum()

    torch.testing.assert_close(dot(3, 1), dot(9, 7), atol=1e-5, rtol=0)
    assert not torch.allclose(dot(3, 1), dot(3, 2))


def test_rms_norm_against_the_formula():
    norm = RMSNorm(32)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(32))
    x = torch.randn(B, T, 32) * 3 + 1
    want = x / torch.sqrt((x**2).mean(-1, keepdim=True) + 1e-5) * norm.weight
    torch.testing.assert_close(norm(x), want)
    assert RMSNorm(32, gain=False).weight is None
    assert len(list(RMSNorm(32, gain=False).parameters())) == 0


def test_swiglu_against_the_formula():
    config = ModelConfig(**SIZES, activation="swiglu")
    assert ffn_hidden(config) == int(2 * 48 / 3) == 32
    ffn = SwiGLU(config)
    x = torch.randn(B, T, 32)
    g, u, d = ffn.gate_proj, ffn.up_proj, ffn.down_proj
    want = (F.silu(x @ g.weight.T + g.bias) * (x @ u.weight.T + u.bias)) @ d.weight.T + d.bias
    torch.testing.assert_close(ffn(x), want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_query_attention_against_a_loop_over_query_heads(n_kv_heads):
    config = ModelConfig(**SIZES, n_kv_heads=n_kv_heads)
    torch.manual_seed(0)
    attn = MultiHeadSelfAttention(config).eval()
    assert attn.k_proj.out_features == n_kv_heads * 8
    x = torch.randn(B, T, 32)
    H, D = 4, 8
    q = x @ attn.q_proj.weight.T + attn.q_proj.bias  # (B, T, H*D)
    k = x @ attn.k_proj.weight.T + attn.k_proj.bias  # (B, T, n_kv*D)
    v = x @ attn.v_proj.weight.T + attn.v_proj.bias
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    heads = []
    for h in range(H):
        kv = h // (H // n_kv_heads)  # the key/value head this query head reads
        qh, kh, vh = q[..., h * D : (h + 1) * D], k[..., kv * D : (kv + 1) * D], v[..., kv * D : (kv + 1) * D]
        s = (qh @ kh.transpose(-1, -2) / math.sqrt(D)).masked_fill(~causal, float("-inf"))
        heads.append(torch.softmax(s, -1) @ vh)
    want = torch.cat(heads, dim=-1) @ attn.out_proj.weight.T + attn.out_proj.bias
    torch.testing.assert_close(attn(x), want, atol=1e-5, rtol=1e-5)
    attn.use_sdpa = True
    torch.testing.assert_close(attn(x), want, atol=1e-5, rtol=1e-5)


def test_mixture_of_experts_against_a_per_token_loop():
    config = ModelConfig(**SIZES, n_experts=4, experts_per_token=2)
    torch.manual_seed(0)
    moe = MiniTransformerLM(config).blocks[0].ffn
    assert isinstance(moe, MixtureOfExperts)
    x = torch.randn(B, T, 32)
    got = moe(x)
    flat = x.reshape(-1, 32)
    logits = flat @ moe.router.weight.T
    want = torch.zeros_like(flat)
    counts = torch.zeros(4)
    for n in range(flat.shape[0]):
        top = torch.topk(logits[n], 2)
        gates = torch.softmax(top.values, -1)  # softmax over the chosen experts' logits
        for g, e in zip(gates, top.indices):
            want[n] += g * moe.experts[int(e)](flat[n : n + 1])[0]
            counts[e] += 1
    torch.testing.assert_close(got, want.view(B, T, 32), atol=1e-5, rtol=1e-5)
    f = counts / counts.sum()
    P = torch.softmax(logits, -1).mean(0)
    torch.testing.assert_close(moe.aux_loss, 4 * (f * P).sum())
    assert moe.tokens_per_expert.tolist() == counts.long().tolist()


def test_moe_stats_and_the_aux_loss_in_training():
    model = make_model(dict(n_experts=4, experts_per_token=2))
    assert make_model({}).moe_stats() is None
    idx, targets = random_idx(), random_idx(seed=2)
    model.eval()
    _, eval_loss = model(idx, targets)
    stats = model.moe_stats()
    assert stats.layers == [0, 1] and len(stats.load) == 2 and len(stats.load[0]) == 4
    assert all(sum(row) == B * T * 2 for row in stats.tokens)
    assert all(abs(sum(row) - 1) < 1e-6 for row in stats.load)
    assert stats.aux_loss > 0 and stats.aux_weight == 0.01
    model.train()
    _, train_loss = model(idx, targets)
    torch.testing.assert_close(train_loss, eval_loss + 0.01 * model.moe_aux_loss())
    train_loss.backward()
    assert model.blocks[0].ffn.router.weight.grad.abs().sum() > 0  # the aux loss and the gates train the router


# --- sizes, FLOPs, the cache ----------------------------------------------------------------------------
def test_kv_cache_bytes_shrink_with_shared_heads():
    mha = ModelConfig(**SIZES)
    assert kv_cache_bytes_per_token(mha) == 2 * 2 * 4 * 8 * 4
    assert kv_cache_bytes_per_token(mha.replace(n_kv_heads=2)) * 2 == kv_cache_bytes_per_token(mha)
    assert kv_cache_bytes_per_token(mha.replace(n_kv_heads=1)) * 4 == kv_cache_bytes_per_token(mha)
    model = make_model(dict(n_kv_heads=2))
    cache = model.new_cache()
    with torch.no_grad():
        model(random_idx(b=1), cache=cache)
    stored = sum(layer.k[:, :, :T].numel() + layer.v[:, :, :T].numel() for layer in cache.layers) * 4
    assert stored == T * kv_cache_bytes_per_token(model.config)


def test_moe_flops_count_only_the_chosen_experts():
    dense = make_model({})
    moe = make_model(dict(n_experts=4, experts_per_token=2))
    ffn = 2 * 2 * 32 * 48  # fc_in and fc_out
    router = 2 * 32 * 4
    assert linear_flops_per_token(moe) - linear_flops_per_token(dense) == 2 * (2 * ffn - ffn + router)
    gqa = make_model(dict(n_kv_heads=1))  # K and V projections shrink; attention's products do not
    assert linear_flops_per_token(dense) - linear_flops_per_token(gqa) == 2 * 2 * (2 * 32 * 32 - 2 * 32 * 8)
    assert cost_ledger(gqa, 3).attention_flops_per_token == cost_ledger(dense, 3).attention_flops_per_token


# --- the config -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes, words",
    [
        (dict(n_kv_heads=3), "must divide n_heads"),
        (dict(n_kv_heads=8), "must divide n_heads"),
        (dict(pos_encoding="rope", d_model=36, n_heads=4), "odd width"),
        (dict(n_experts=2, experts_per_token=3), "cannot exceed n_experts"),
        (dict(norm="batchnorm"), "norm must be one of"),
        (dict(norm_placement="sandwich"), "must be one of"),
        (dict(pos_encoding="alibi"), "must be one of"),
        (dict(activation="geglu"), "must be one of"),
        (dict(rope_base=1.0), "rope_base"),
        (dict(n_kv_heads=-1), "n_kv_heads"),
        (dict(moe_aux_weight=-0.1), "moe_aux_weight"),
        (dict(qk_norm="yes"), "on or off"),
    ],
)
def test_invalid_combinations_say_what_to_do(changes, words):
    with pytest.raises(ConfigError) as info:
        ModelConfig(**{**SIZES, **changes})
    message = str(info.value)
    assert words in message
    if "must be" not in message:  # a rule between fields (check_together): "problem; fix"
        assert ";" in message
    assert ":set" not in message and not re.search(r"\w=\w", message)  # neutral words, no shell syntax


def test_defaults_are_the_seed_model():
    config = ModelConfig(**SIZES)
    assert (config.pos_encoding, config.norm, config.norm_placement, config.activation) == ("learned", "layernorm", "pre", "gelu")
    assert config.kv_heads == 4 and config.tie_embeddings and config.bias and not config.qk_norm and not config.is_moe
    assert matching_preset(config) == "seed"
    names = {name for name, _ in MiniTransformerLM(config).named_modules()}
    assert not any(n.endswith(("rope", "q_norm", "k_norm", "hook_k_rep", "hook_q_rot")) for n in names)


def test_presets():
    base = ModelConfig(**SIZES)
    assert PRESETS["seed"] == {}
    for name in PRESETS:
        config = apply_preset(base, name)
        assert matching_preset(config) == name
        assert (config.d_model, config.n_layers, config.max_seq_len) == (32, 2, 16)  # sizes untouched
        assert matching_preset(config.replace(d_model=64, n_heads=4, d_ff=100, n_layers=3)) == name
    llama = apply_preset(base, "llama")
    assert (llama.pos_encoding, llama.norm, llama.activation, llama.n_kv_heads, llama.bias, llama.tie_embeddings) == (
        "rope", "rmsnorm", "swiglu", 2, False, False)
    assert apply_preset(base.replace(n_heads=1), "llama").kv_heads == 1  # odd n_heads: plain MHA
    modern = apply_preset(base, "modern")
    assert (modern.norm_gain, modern.activation, modern.qk_norm) == (False, "relu2", True)
    assert apply_preset(base, "gpt2").activation == "gelu_tanh"
    # A preset replaces the whole architecture, so switching back undoes it.
    assert apply_preset(llama, "seed") == base
    assert matching_preset(base.replace(qk_norm=True)) is None
    assert matching_preset(llama.replace(n_experts=4)) == "llama"  # experts are orthogonal (Mixtral)
    with pytest.raises(ConfigError, match="unknown preset"):
        apply_preset(base, "gpt5")


# --- learning ---------------------------------------------------------------------------------------------
# slow (six seconds of training); the default run keeps each variant against its reference (test_sweep_al.py)
@pytest.mark.slow
def test_a_tiny_modern_model_learns_to_sort():
    """The fast learning check: a tiny model combining RoPE, RMSNorm, SwiGLU, GQA and experts."""
    data = load_data("sort")
    torch.manual_seed(1337)
    config = ModelConfig(vocab_size=data.tokenizer.vocab_size, max_seq_len=16, d_model=48, n_heads=4, n_layers=2,
                         d_ff=128, pos_encoding="rope", norm="rmsnorm", activation="swiglu", n_kv_heads=2, bias=False,
                         tie_embeddings=False, n_experts=2, experts_per_token=1)
    model = MiniTransformerLM(config)
    trainer = Trainer(model, data, TrainConfig(steps=250, batch_size=32, eval_every=250, lr=3e-3, **ADAMW_BEFORE))
    summary = trainer.run()
    assert summary.accuracy >= 0.9, summary  # 0.936 measured (seed 1337, one thread)
    assert model.moe_stats().aux_loss is not None


# The optimizer and schedule these learning checks were measured with (the defaults before Muon became
# the default, issue #11): each variant's rate below is AdamW's.
ADAMW_BEFORE = dict(optimizer="adamw", warmup_steps=30)


def _sort_lr(changes: dict) -> float:
    """The peak learning rate each variant learns sort with in the default 600 steps (measured, seed 1337).

    Learned positions take the default 3e-3: post-LN 1.000, MoE 4x2 0.998, MQA 0.996, swiglu, untied and
    no bias 1.000. Fixed or relative positions learn sort far worse at 3e-3 (sinusoidal 0.844, RoPE
    0.982, llama 0.962, modern 0.984) and fully at 1e-3 (sinusoidal 0.990, RoPE 0.994, llama 1.000,
    modern 0.996, RoPE with base 500 0.998). Without positions the model must count through causal
    attention to know which digit it writes: 0.28 at 3e-3, 0.90 at 1e-3, 0.994 at 5e-4.
    """
    positions = changes.get("pos_encoding", "learned")
    if positions == "none":
        return 5e-4
    return 3e-3 if positions == "learned" else 1e-3


# Since training takes the fast path (issue #11: the same function, other rounding), two variants fell
# just short under the AdamW settings above: sinusoidal positions 0.982 (0.992 at 2e-3) and ReLU 0.986.
# Under today's defaults (Muon, lr 1e-2, batch 16) they reach 0.998 and 1.000 in bfloat16, so they learn
# with Muon. In float32 on AVX2 kernels (a CPU without bfloat16, stood in for by an Emerald Rapids Xeon
# capped with bench/as_avx2.py's environment, one thread as here) batch 16 ended at 0.988 and 0.986 with
# seed 1337 (1.000 and 1.000 with seed 1), and the slow run failed there. At batch 32 they reach 1.000 and
# 0.996 there (seed 1: 1.000, 1.000), and 0.998 and 1.000 in bfloat16 (seed 1: 0.996, 1.000), so they
# learn with Muon's defaults at batch 32.
# The defaults do not suit every variant (no positions 0.900, post-LN 0.956, qk_norm 0.982), so the
# others keep the settings they were measured with. All figures: this check, one session each.
LEARN_WITH_MUON_AT_BATCH_32 = [dict(pos_encoding="sinusoidal"), dict(activation="relu")]


# Top-1 routing (each token to one expert) sits at the edge at batch 32: on an AMD EPYC (Zen 4) it
# ended at 0.982-0.992 depending on the dtype and the thread count (float32 0.984 with 2 threads, which
# passed on the Intel Xeons), and at 0.968-0.996 under the defaults. Its router learns from one
# expert's output per token, a noisier signal, which a larger batch averages: at batch 64 (lr 3e-3)
# it reached 0.996-1.000 under float32 and bfloat16, 1 and 2 threads (same machine, this check).
LEARN_WITH_BATCH_64 = [dict(n_experts=4, experts_per_token=1)]


def _sort_settings(changes: dict) -> dict:
    """The training settings each variant learns sort with: the defaults, or AdamW at `_sort_lr`."""
    if changes in LEARN_WITH_MUON_AT_BATCH_32:
        return dict(batch_size=32)
    batch = 64 if changes in LEARN_WITH_BATCH_64 else 32
    return dict(batch_size=batch, lr=_sort_lr(changes), **ADAMW_BEFORE)


# residual=off and causal=off are the lab's counter-examples, not variants to learn with: tests/test_grad.py shows the
# first training worse, tests/test_causal.py the second learning to copy a next token generation never has.
LEARNERS = [c for c in SWITCHES if c.get("residual", True) and c.get("causal", True)] + PRESET_CONFIGS


@pytest.mark.slow
@pytest.mark.parametrize("changes", LEARNERS, ids=[label(c) for c in LEARNERS])
def test_every_variant_learns_to_sort(changes):
    """Every switch and preset learns sort to 99% held-out exact match in the default 600 steps."""
    data = load_data("sort")
    torch.manual_seed(1337)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, **changes))
    summary = Trainer(model, data, TrainConfig(eval_every=300, **_sort_settings(changes))).run()
    assert summary.accuracy >= 0.99, summary


def test_a_safetensors_header_of_128_plus_256n_bytes_is_not_taken_for_a_pickle():
    # Found by the round trip above: a header length whose low byte is 0x80 starts like pickle protocol 2+.
    import pickle

    safetensors_like = (640).to_bytes(8, "little") + b'{"a":1}'
    assert safetensors_like.startswith(b"\x80\x02")
    assert not ckpt.layout.is_pickle(safetensors_like)
    assert ckpt.layout.is_pickle(pickle.dumps({"a": 1}, protocol=2))
    assert ckpt.layout.is_pickle(b"PK\x03\x04" + bytes(20))
