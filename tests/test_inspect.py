"""The look-inside views: attention maps, the next-token microscope and the logit lens.

Small unequal sizes (T 7, vocab 11, d_model 32, 2 heads, 3 layers) so a swapped axis fails; each
view is checked against a reference computed here from the weights or from the sampler itself.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.core.errors import DataError, UserError
from minitf_repl.core.generate import generate, sample_next
from minitf_repl.core.inside import attention_maps, logit_lens, next_token_pipeline
from minitf_repl.core.config import GenConfig
from minitf_repl.core.model import MiniTransformerLM, ModelConfig

T, V, D, H, L = 7, 11, 32, 2, 3
SIZES = dict(vocab_size=V, max_seq_len=16, d_model=D, n_heads=H, n_layers=L, d_ff=48)


def make_model(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes}))
    # Sharpen the untrained model so the attention and the next-token distribution are not uniform.
    with torch.no_grad():
        for block in model.blocks:
            block.attn.q_proj.weight.mul_(8)
            block.attn.k_proj.weight.mul_(8)
        model.token_embedding.weight.mul_(10)
    return model


def ids(t: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, V, (t,), generator=torch.Generator().manual_seed(seed))


def untouched(model, sdpa: bool = False) -> bool:
    """No hooks left, every module back in training mode, the attention path as configured."""
    return (
        all(not m._forward_hooks for m in model.modules())
        and all(m.training for m in model.modules())
        and all(block.attn.use_sdpa == sdpa for block in model.blocks)
    )


# --- attention maps --------------------------------------------------------------------------


def test_rows_are_distributions_over_the_past_only():
    maps = attention_maps(make_model(), ids()).maps
    assert maps.shape == (L, H, T, T)
    assert torch.allclose(maps.sum(-1), torch.ones(L, H, T), atol=1e-6)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    assert (maps[..., future] == 0).all()
    assert (maps[..., ~future] > 0).all()  # the past is not masked by mistake


def manual_patterns(model, idx: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d_k) + M) from the q_proj/k_proj weights, block by block."""
    x = model.token_embedding.weight[idx] + model.position_embedding.weight[: len(idx)]  # (T, D)
    patterns = []
    for block in model.blocks:
        a = block.attn
        h = F.layer_norm(x, (D,), block.ln_1.weight, block.ln_1.bias)
        q = (h @ a.q_proj.weight.T + a.q_proj.bias).view(len(idx), H, D // H).transpose(0, 1)  # (H, T, d_k)
        k = (h @ a.k_proj.weight.T + a.k_proj.bias).view(len(idx), H, D // H).transpose(0, 1)
        scores = q @ k.transpose(-2, -1) / math.sqrt(D // H)  # (H, T, T)
        future = torch.triu(torch.ones(len(idx), len(idx), dtype=torch.bool), diagonal=1)
        patterns.append(torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1))
        x = block(x.unsqueeze(0))[0]  # the next block reads this block's output
    return torch.stack(patterns)  # (L, H, T, T)


def test_maps_equal_a_recomputation_from_the_weights():
    model = make_model()
    idx = ids()
    with torch.no_grad():
        expected = manual_patterns(model, idx)
    got = attention_maps(model, idx)
    assert got.layers == [0, 1, 2] and got.n_heads == H and got.token_ids == idx.tolist()
    assert torch.allclose(got.maps, expected, atol=1e-5)
    assert not torch.allclose(expected[0, 0], expected[0, 1], atol=1e-3)  # heads differ: a swap would show


def test_one_layer_and_bad_layers():
    model = make_model()
    full = attention_maps(model, ids()).maps
    one = attention_maps(model, ids(), layer=1)
    assert one.layers == [1] and torch.equal(one.maps[0], full[1])
    for bad in (3, -1, True, "1"):
        with pytest.raises(UserError, match="layer"):
            attention_maps(model, ids(), layer=bad)


def test_the_fused_path_shows_the_same_maps_and_stays_fused():
    explicit = make_model()
    fused = make_model(attention="sdpa")
    fused.load_state_dict(explicit.state_dict())
    fused.train()
    a = attention_maps(explicit, ids()).maps
    b = attention_maps(fused, ids()).maps
    assert torch.allclose(a, b, atol=1e-6)
    assert untouched(fused, sdpa=True)


def test_one_sequence_only():
    with pytest.raises(DataError, match="one sequence"):
        attention_maps(make_model(), torch.zeros(3, T, dtype=torch.long))
    assert attention_maps(make_model(), ids()[None]).maps.shape == (L, H, T, T)  # (1, T) is one sequence


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
@pytest.mark.parametrize(
    "view",
    [
        lambda m, x: attention_maps(m, x),
        lambda m, x: logit_lens(m, x),
    ],
    ids=["attention_maps", "logit_lens"],
)
def test_hooks_removed_and_modes_restored_when_the_forward_raises(view, attention):
    model = make_model(attention=attention)
    model.train()
    with pytest.raises(DataError, match="max_seq_len"):
        view(model, ids(17))  # longer than max_seq_len=16: the forward raises inside the hooks
    assert untouched(model, sdpa=attention == "sdpa")
    view(model, ids())
    assert untouched(model, sdpa=attention == "sdpa")


def test_microscope_restores_modes_when_the_forward_raises():
    model = make_model(attention="sdpa")
    model.train()

    def boom(module, inputs, output):
        raise RuntimeError("boom")

    handle = model.ln_f.register_forward_hook(boom)
    with pytest.raises(RuntimeError, match="boom"):
        next_token_pipeline(model, ids(), seed=0)
    handle.remove()
    assert untouched(model, sdpa=True)


# --- the next-token microscope ---------------------------------------------------------------

SAMPLING = [
    dict(temperature=0),
    dict(temperature=1.0),
    dict(temperature=0.5),
    dict(temperature=2.0, top_k=3),
    dict(temperature=1.0, top_p=0.6),
    dict(temperature=1.3, top_k=4, top_p=0.8),
    dict(temperature=1e-300),
]


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
@pytest.mark.parametrize("sampling", SAMPLING)
def test_same_seed_same_pick_as_generate(sampling, attention):
    model = make_model(attention=attention)
    picks, firsts = [], []
    for seed in range(12):
        prompt = ids(seed=seed).tolist()
        picks.append(next_token_pipeline(model, prompt, seed=seed, **sampling).picked)
        firsts.append(next(generate(model, prompt, GenConfig(n=1, gen_seed=seed, **sampling))))
    assert picks == firsts
    if sampling.get("temperature") == 1.0 and "top_p" not in sampling:
        assert len(set(picks)) > 1  # the seed matters: a pick that ignored the generator would fail


def test_a_prompt_longer_than_the_window_is_read_as_generate_reads_it():
    model = make_model()
    prompt = ids(40).tolist()
    result = next_token_pipeline(model, prompt, temperature=1.0, seed=5)
    assert result.token_ids == prompt[-16:]
    assert result.picked == next(generate(model, prompt, GenConfig(n=1, temperature=1.0, gen_seed=5)))


def model_last_logits(model, idx):
    with torch.no_grad():
        return model.eval()(idx[None])[0][0, -1].double()


def test_probabilities_are_the_softmax_of_the_scaled_logits():
    model = make_model()
    z = model_last_logits(model, ids())
    r = next_token_pipeline(model, ids(), temperature=0.7, seed=0, top=V)
    assert torch.allclose(r.stages.probs, torch.softmax(z / 0.7, dim=-1), atol=1e-12)
    assert [row.id for row in r.rows] == torch.argsort(z, descending=True).tolist()
    assert r.n_top_k_kept == r.n_top_p_kept == V


def test_filters_keep_the_right_tokens_and_renormalise():
    model = make_model()
    z = model_last_logits(model, ids())
    order = torch.argsort(z, descending=True)
    r = next_token_pipeline(model, ids(), temperature=1.0, top_k=4, top_p=0.7, seed=0, top=V)
    best4 = order[:4]
    assert set(r.stages.top_k_kept.nonzero().flatten().tolist()) == set(best4.tolist())
    # top-p on the renormalised top-4: keep the best until the mass before a token reaches 0.7.
    p4 = torch.softmax(z[best4], dim=-1)
    mass_before = torch.cumsum(p4, 0) - p4
    nucleus = best4[mass_before < 0.7]
    assert set(r.stages.top_p_kept.nonzero().flatten().tolist()) == set(nucleus.tolist())
    assert r.n_top_p_kept == len(nucleus) < 4  # the test only means something if top-p cut a token
    expected = torch.zeros(V, dtype=torch.float64)
    expected[nucleus] = torch.softmax(z[nucleus], dim=-1)
    assert torch.allclose(r.stages.probs, expected, atol=1e-12)
    assert r.picked in nucleus.tolist() and r.picked_prob == pytest.approx(float(expected[r.picked]))
    assert [row.top_p_kept for row in r.rows] == [i in nucleus.tolist() for i in order.tolist()]


def test_the_sampler_draws_with_the_microscopes_probabilities():
    model = make_model()
    z = model_last_logits(model, ids())
    r = next_token_pipeline(model, ids(), temperature=1.5, top_k=5, seed=0)
    g = torch.Generator().manual_seed(0)
    draws = torch.tensor([sample_next(z, 1.5, top_k=5, generator=g) for _ in range(4000)])
    freq = torch.bincount(draws, minlength=V).double() / len(draws)
    assert (freq - r.stages.probs).abs().max() < 0.03  # ~4 standard errors at n=4000


def test_greedy_picks_the_argmax_and_shows_it_as_certain():
    model = make_model()
    z = model_last_logits(model, ids())
    r = next_token_pipeline(model, ids(), temperature=0, top_k=2, top_p=0.5)
    best = int(torch.argmax(z))
    assert r.picked == best == r.rows[0].id and r.picked_rank == 1 and r.picked_prob == 1.0
    assert r.rows[0].scaled is None and r.n_top_p_kept == 1


def test_microscope_bad_settings_are_user_errors():
    model = make_model()
    for kwargs in (dict(temperature=-1), dict(top_k=0), dict(top_p=1.5), dict(top=0)):
        with pytest.raises(UserError):
            next_token_pipeline(model, ids(), **kwargs)
    with pytest.raises(DataError):
        next_token_pipeline(model, [], seed=0)
    with pytest.raises(DataError):
        next_token_pipeline(model, [V], seed=0)


def test_random_seed_is_reported_and_repeats_the_pick():
    model = make_model()
    r = next_token_pipeline(model, ids(), temperature=1.0)
    again = next_token_pipeline(model, ids(), temperature=1.0, seed=r.seed)
    assert again.seed == r.seed and again.picked == r.picked


# --- the logit lens --------------------------------------------------------------------------


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_the_last_layer_is_the_models_own_logits(attention):
    model = make_model(attention=attention)
    idx = ids()
    lens = logit_lens(model, idx)
    assert [layer.name for layer in lens.layers] == ["embed", "blocks.0", "blocks.1", "blocks.2"]
    assert lens.logits.shape == (L + 1, T, V)
    with torch.no_grad():
        logits, _ = model(idx[None])
    assert torch.allclose(lens.logits[-1], logits[0], atol=1e-6)
    assert not torch.allclose(lens.logits[-2], logits[0], atol=1e-3)  # earlier layers are not just copies


def test_the_embed_layer_reads_token_plus_position():
    model = make_model()
    idx = ids()
    with torch.no_grad():
        h0 = model.token_embedding.weight[idx] + model.position_embedding.weight[:T]
        expected = model.ln_f(h0) @ model.token_embedding.weight.T  # the head is tied to W_E
    assert torch.allclose(logit_lens(model, idx).logits[0], expected, atol=1e-5)


def test_top_tokens_and_target_ranks_agree_with_the_probabilities():
    model = make_model()
    idx = ids()
    targets = idx[1:].tolist() + [-1]
    lens = logit_lens(model, idx, top=3, targets=targets)
    assert lens.targets == targets
    probs = torch.softmax(lens.logits, dim=-1)  # (L+1, T, V)
    for l, layer in enumerate(lens.layers):
        assert len(layer.top_ids) == T and all(len(row) == 3 for row in layer.top_ids)
        for t in range(T):
            ranking = torch.argsort(probs[l, t], descending=True).tolist()
            assert layer.top_ids[t] == ranking[:3]
            assert layer.top_probs[t] == pytest.approx(probs[l, t, ranking[:3]].tolist())
            if t == T - 1:
                assert layer.target_ranks[t] is None and layer.target_probs[t] is None
            else:
                assert layer.target_ranks[t] == ranking.index(targets[t]) + 1
                assert layer.target_probs[t] == pytest.approx(float(probs[l, t, targets[t]]))
    assert {r for layer in lens.layers for r in layer.target_ranks[:-1]} != {1}  # not every rank is 1


def test_lens_of_the_last_position_alone_is_the_last_position_of_the_whole_lens():
    model = make_model()
    idx = ids()
    targets = [3] * (T - 1) + [5]  # a known target at the last position too
    whole, last = logit_lens(model, idx, top=3, targets=targets), logit_lens(model, idx, top=3, targets=targets,
                                                                           last_only=True)
    assert torch.allclose(last.logits[:, 0], whole.logits[:, -1], atol=1e-6) and last.logits.shape[1] == 1
    assert last.targets == [5] and last.token_ids == whole.token_ids
    for a, b in zip(whole.layers, last.layers):
        assert b.top_ids == [a.top_ids[-1]] and b.target_ranks == [a.target_ranks[-1]]


def test_lens_bad_targets_and_no_targets():
    model = make_model()
    assert logit_lens(model, ids()).layers[0].target_ranks is None
    for bad in (ids().tolist()[:-1], [V] * T, [-2] * T):
        with pytest.raises(DataError, match="targets"):
            logit_lens(model, ids(), targets=bad)


def test_results_are_json_ready():
    import json

    model = make_model()
    for result in (
        attention_maps(model, ids()),
        next_token_pipeline(model, ids(), top_k=3, seed=0),
        logit_lens(model, ids(), targets=ids().tolist()),
    ):
        json.dumps(result.to_dict())
