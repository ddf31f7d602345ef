"""Variant combinations against the references: every pair of non-default settings (and a few triples), each test
failing before its fix where it names a bug.

`:params` said a model with RoPE or QK-norm on the fused attention path (`attention=sdpa`, as `preset=modern` with the
fast kernel) kept 8% less for the backward pass than its forward does: the fused kernel keeps its own output, laid
out as its q is, and a q that RoPE or QK-norm wrote anew is (B, h, T, d_k) in memory, so merging the heads copies
it and both stay alive. Each switch alone measured right; only the pair was off. The attention counts that copy now.
`:params` said a model with `activation=relu` kept the FFN's hidden layer twice for the backward pass, 8% more than
its forward keeps: ReLU's backward reads its own output, the very tensor W_2 reads, so it is kept once (GELU and
ReLU^2 keep two tensors, their input and output). The FFN's statement now counts one for relu, an expert's too.
`:params` said a grouped-query model (n_kv_heads below n_heads) on `attention=sdpa` with dropout kept 5% less than its
forward does (MQA at d_model 32): with dropout torch's CPU kernel falls back to its math path, which repeats K and V to
every query head as the explicit path does; the count took the fused kernel's sharing for granted. It counts the
copies there now.

The rest is the harness: for every pair of the switches below (289 models of 2 blocks, d_model 16) and five triples,
the training fast path's loss and every gradient equal the readable path's (under bfloat16 autocast, to its rounding);
the explicit attention equals the fused kernel; changing a later token leaves earlier logits alone on the readable
path, the fused kernel and the fast path; cached decoding, readable and fast, in chunks and one token at a time, equals
the full forward, and generate's cached loop gives the naive loop's greedy tokens for a short prompt and for a prompt
that fills the window exactly, on past max_seq_len, and for positions without a table, past the old window
once it is widened in place; the untrained model's loss is near ln(vocab); parameter_count (the
formula :set checks before building) equals the built model's and the ledger's; every step of `:shapes` whose stated
symbols fit its rank has the sizes the model's symbols give; and the refused combinations (sizes against a switch) say
the problem and the fix. Through the shell's own commands, for the triples: a checkpoint's round trip rebuilds the
same variant with identical logits, and `:params` totals what the model holds. The harness takes about 40 s of CPU;
the default run takes a quarter of the pairs (QUICK), `-m slow` the rest.
"""

from __future__ import annotations

import gc
import itertools
import math

import pytest
import torch

from minitf_repl.commands.anatomy import trace_dims
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import GenConfig, ModelConfig, TrainConfig
from minitf_repl.core.errors import ConfigError
from minitf_repl.core.fastpath import FastPath
from minitf_repl.core.generate import generate
from minitf_repl.core.ledger import cost_ledger
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.sizes import parameter_count
from minitf_repl.core.trace import trace
from minitf_repl.session import Session

from test_commands import run

# One non-default value per line of every setting that changes what the model computes or how (sizes aside).
SWITCHES = [
    ("pos_encoding", "sinusoidal"), ("pos_encoding", "rope"), ("pos_encoding", "none"), ("norm", "rmsnorm"),
    ("norm_placement", "post"), ("residual", False), ("ffn", False), ("causal", False), ("norm_eps", 0.5),
    ("norm_gain", False),
    ("qk_norm", True), ("activation", "relu"), ("activation", "gelu_tanh"), ("activation", "relu2"),
    ("activation", "swiglu"), ("n_kv_heads", 1), ("n_kv_heads", 2), ("tie_embeddings", False), ("bias", False),
    ("n_experts", 3), ("n_experts", 1), ("experts_per_token", 1), ("moe_aux_weight", 0.0), ("dropout", 0.2),
    ("attention", "sdpa"), ("rope_base", 50.0),
]
PAIRS = [dict((a, b)) for a, b in itertools.combinations(SWITCHES, 2) if a[0] != b[0]]
# The default run takes each switch paired with the switches 1, 5 and 11 places on in SWITCHES (every switch in at
# least four pairs, about a quarter of them) and the triples; `-m slow` takes the other pairs. The whole harness costs
# about 40 s of CPU, which the default run's ten minutes on two cores cannot spare.
QUICK = [dict((SWITCHES[i], SWITCHES[(i + k) % len(SWITCHES)])) for i in range(len(SWITCHES)) for k in (1, 5, 11)]
TRIPLES = [
    dict(pos_encoding="rope", n_kv_heads=1, qk_norm=True, attention="sdpa"),
    dict(n_experts=3, activation="swiglu", norm_placement="post", bias=False),
    dict(pos_encoding="none", causal=False, norm="rmsnorm", norm_gain=False, tie_embeddings=False),
    dict(pos_encoding="sinusoidal", n_kv_heads=2, activation="relu2", dropout=0.2, attention="sdpa"),
    dict(residual=False, qk_norm=True, n_experts=3, experts_per_token=1, pos_encoding="rope"),
]
COMBOS = PAIRS + TRIPLES
SIZES = dict(vocab_size=11, max_seq_len=8, d_model=16, n_heads=4, n_layers=2, d_ff=24)
V, T = SIZES["vocab_size"], SIZES["max_seq_len"]


def label(changes: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in changes.items())




def marked(changes: dict):
    quick = changes in QUICK or changes in TRIPLES
    return pytest.param(changes, id=label(changes), marks=() if quick else pytest.mark.slow)


combos = pytest.mark.parametrize("changes", [marked(c) for c in COMBOS])


def awake(changes: dict, seed: int = 0) -> MiniTransformerLM:
    """The combination's model with weights large enough that every part matters (as tests/test_variants.py's)."""
    torch.manual_seed(seed)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.mul_(10 if name == "token_embedding.weight" else 5)
            else:
                p.add_(0.1 * torch.randn_like(p))
    return model


def ids(b: int, t: int, seed: int) -> torch.Tensor:
    return torch.randint(V, (b, t), generator=torch.Generator().manual_seed(seed))


def test_every_pair_is_built():
    """No pair of these switches is refused: each pair of settings is a model (the refusals are of sizes only)."""
    for changes in COMBOS:
        ModelConfig(**{**SIZES, **changes})


def test_a_refused_combination_says_what_to_change():
    """The combinations the config refuses are of sizes against a switch; each says the problem and the fix."""
    cases = [(dict(pos_encoding="rope", d_model=12, n_heads=4), "odd width"),
             (dict(n_kv_heads=3), "n_kv_heads could be one of 1, 2, 4"),
             (dict(n_experts=2, experts_per_token=3), "lower experts_per_token or raise n_experts"),
             (dict(n_kv_heads=2, d_model=18, n_heads=4), "n_heads could be one of 2, 6, 18")]
    for changes, fix in cases:
        with pytest.raises(ConfigError) as e:
            ModelConfig(**{**SIZES, **changes})
        assert ";" in str(e.value) and fix in str(e.value), str(e.value)


# --- the fast path and the attention kernels --------------------------------------------------------------------
@combos
def test_fast_path_loss_and_every_gradient_equal_the_readable_paths(changes):
    model = awake(changes)
    model.set_dropout(0.0)  # the fused kernel draws its own masks: with dropout the two agree in distribution only
    model.train()
    idx, targets = ids(2, T, 1), ids(2, T, 2)
    targets[0, :2] = -1
    results = []
    for forward in (model, FastPath(model)):
        model.zero_grad(set_to_none=True)
        logits, loss = forward(idx, targets)
        loss.backward()
        results.append((logits.detach(), loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (logits, loss, grads), (fast_logits, fast_loss, fast_grads) = results
    torch.testing.assert_close(fast_logits, logits, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(fast_loss, loss, atol=1e-5, rtol=1e-5)
    for name, grad in grads.items():
        if grad is None:  # an expert no token was routed to
            assert fast_grads[name] is None, name
        else:
            torch.testing.assert_close(fast_grads[name], grad, atol=1e-4, rtol=1e-3, msg=name)
    # under bfloat16 autocast (dtype=bfloat16): the two paths round alike, to bfloat16's precision
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, readable = model(idx, targets)
        _, fast = FastPath(model)(idx, targets)
    assert abs(fast.item() - readable.item()) < 1e-2 and abs(readable.item() - loss.item()) < 5e-2


@combos
def test_explicit_attention_equals_the_fused_kernel_and_the_future_never_leaks(changes):
    model = awake(changes).eval()
    idx = ids(2, T, 3)
    later = idx.clone()
    later[:, 5] = (later[:, 5] + 1) % V
    with torch.no_grad():
        with model.explicit_attention():
            explicit, _ = model(idx)
        with model.fused_attention():
            fused, _ = model(idx)
        torch.testing.assert_close(fused, explicit, atol=1e-4, rtol=1e-4)
        if not model.causal:  # causal=off reads the future on purpose (tests/test_causal.py)
            return
        for name, forward in (("explicit", model.explicit_attention), ("fused", model.fused_attention)):
            with forward():
                torch.testing.assert_close(model(later)[0][:, :5], model(idx)[0][:, :5], atol=1e-5, rtol=0, msg=name)
        fast = FastPath(model)
        torch.testing.assert_close(fast(later)[0][:, :5], fast(idx)[0][:, :5], atol=1e-5, rtol=0, msg="fast path")


# --- the KV cache ------------------------------------------------------------------------------------------------
@combos
def test_cached_decoding_equals_the_full_forward_and_the_naive_loop(changes):
    model = awake(changes).eval()
    if model.causal:  # a prefix's keys and values are the full text's only under the mask
        idx = ids(2, T, 4)
        with torch.no_grad():
            full, _ = model(idx)
            for decode in (model, FastPath(model)):
                cache = model.new_cache()
                # a prefill, two tokens at once (masked among themselves), then one at a time to the window's end
                chunks = [(0, 3), (3, 5)] + [(t, t + 1) for t in range(5, T)]
                pieces = [decode(idx[:, a:b], cache=cache)[0] for a, b in chunks]
                torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-4, rtol=1e-4)
                assert cache.length == T  # filled exactly
    # short, exactly the window, and past it (the window slides): the cached loop's tokens are the naive loop's
    for prompt, n in (([1, 4, 1], T), ([(3 * i) % V for i in range(T)], 3)):
        cached = list(generate(model, prompt, GenConfig(n=n, temperature=0, cache=True)))
        naive = list(generate(model, prompt, GenConfig(n=n, temperature=0, cache=False)))
        assert cached == naive, prompt


UNLEARNED = [c for c in COMBOS if c.get("pos_encoding") in ("sinusoidal", "rope", "none")]


@pytest.mark.parametrize("changes", [marked(c) for c in UNLEARNED])
def test_a_wider_window_keeps_the_logits_and_the_cache_reads_past_the_old_one(changes):
    """Positions without a table take a new max_seq_len in place (`:set max_seq_len`): the same weights read the old
    window's positions as before, and the cache decodes past the old window as the full forward computes it."""
    model = awake(changes).eval()
    idx = ids(2, 2 * T, 6)
    with torch.no_grad():
        before, _ = model(idx[:, :T])
        model.set_length(2 * T)
        after, _ = model(idx)
        if model.causal:
            torch.testing.assert_close(after[:, :T], before, atol=1e-5, rtol=1e-5)
            for decode in (model, FastPath(model)):
                cache = model.new_cache()
                pieces = [decode(idx[:, :T], cache=cache)[0]] + [decode(idx[:, t:t + 1], cache=cache)[0]
                                                                  for t in range(T, 2 * T)]
                torch.testing.assert_close(torch.cat(pieces, dim=1), after, atol=1e-4, rtol=1e-4)
    long_prompt = [(5 * i) % V for i in range(T + 3)]  # longer than the old window, inside the new one
    cached = list(generate(model, long_prompt, GenConfig(n=T, temperature=0, cache=True)))
    assert cached == list(generate(model, long_prompt, GenConfig(n=T, temperature=0, cache=False)))


# --- sizes, the untrained loss, the shape trace ------------------------------------------------------------------
@combos
def test_parameter_counts_and_the_untrained_loss(changes):
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes, "vocab_size": 65, "d_model": 32})).eval()
    held = sum(p.numel() for p in model.parameters())
    assert parameter_count(model.config) == model.num_parameters() == held
    assert cost_ledger(model, 2, T).n_params == held
    with torch.no_grad():
        _, loss = model(torch.randint(65, (4, T)), torch.randint(65, (4, T)))
    assert abs(loss.item() - math.log(65)) < 0.3  # weights at N(0, 0.02): every token about equally likely


@combos
def test_every_traced_step_has_the_sizes_its_symbols_say(changes):
    model = awake(changes)
    records = trace(model, ids(1, 6, 5))
    symbols = {name: size for name, (size, _) in model.symbols(1, 6).items()}
    assert all(symbols[name] == size for name, size in trace_dims(records).items() if name in symbols)
    for r in records:
        stated = r.step.shape if r.step is not None else ()
        if stated and len(stated) == len(r.output_shape) and all(s in symbols for s in stated):
            if ".experts." in r.path:  # an expert runs on the tokens routed to it: (n_e, d_ff), not (B, T, d_ff)
                continue
            assert tuple(symbols[s] for s in stated) == r.output_shape, (r.path, stated, r.output_shape)


# --- the cost ledger's activations against what the forward keeps -----------------------------------------------
def kept_for_backward(model: MiniTransformerLM, x: torch.Tensor) -> int:
    """Bytes a training forward leaves allocated for its backward (as tests/test_variants.py measures them)."""
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(x, x)  # noqa: F841 (kept alive: what stays allocated is what backward needs)
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    return sum(e.nbytes() for e in events)


MEASURED = dict(vocab_size=11, max_seq_len=48, d_model=32, n_heads=4, n_layers=2, d_ff=48)


@pytest.mark.parametrize("changes", [
    dict(pos_encoding="rope", attention="sdpa"), dict(qk_norm=True, attention="sdpa"),
    dict(pos_encoding="rope", n_kv_heads=2, qk_norm=True, attention="sdpa"),
    dict(activation="relu"), dict(activation="relu", n_experts=3), dict(activation="relu", attention="sdpa"),
    dict(activation="relu", pos_encoding="rope", attention="sdpa"),
    dict(dropout=0.2, n_kv_heads=1, attention="sdpa"), dict(dropout=0.2, n_kv_heads=2, attention="sdpa"),
    dict(dropout=0.2, n_kv_heads=2), dict(n_kv_heads=1, attention="sdpa"),
], ids=label)
def test_the_ledger_counts_what_the_forward_keeps_for_these_pairs(changes):
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**{**MEASURED, **changes})).train()
    x = torch.randint(11, (3, 40), generator=torch.Generator().manual_seed(1))
    counted = cost_ledger(model, 3, 40).activation_bytes
    kept = kept_for_backward(model, x)
    assert 0.97 < kept / counted < 1.03, (kept, counted)


# --- through the shell: checkpoints and :params, a few triples ---------------------------------------------------
SHELL = dict(n_layers=2, d_model=16, n_heads=4, d_ff=32, max_seq_len=16)


@pytest.mark.parametrize("changes", TRIPLES, ids=label)
def test_a_checkpoint_rebuilds_the_same_variant_with_the_same_logits(tmp_path, changes):
    session = Session(ModelConfig(**{**SHELL, **changes}), TrainConfig(steps=2, batch_size=4, eval_every=2,
                                                                       eval_batches=1),
                      data_spec="sort:4", device_name="cpu", checkpoint_dir=str(tmp_path))
    run(session, ":train steps=2")
    run(session, ":save variant")
    loaded = ckpt.load_checkpoint(tmp_path, "variant")
    rebuilt = ckpt.build_model(loaded).eval()
    model = session.model.eval()
    assert rebuilt.config == model.config
    assert ModelConfig.from_dict(loaded.model_config.to_dict()).as_built() == model.config.as_built()
    x = torch.randint(model.config.vocab_size, (2, 16))
    with torch.no_grad():
        assert torch.equal(rebuilt(x)[0], model(x)[0])
    params = run(session, ":params")
    assert params.total == parameter_count(model.config) == sum(n for _, _, n in params.rows)
