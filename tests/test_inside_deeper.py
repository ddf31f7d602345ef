"""The numbers behind :patch, :attrib and :lens at=mid, against references, for every variant with heads.

Small unequal sizes (vocab 11, T 7, d 32, 4 heads, 3 layers) and weights pushed away from their
initialisation, so that no part is near zero and a swapped axis or a forgotten term shows.
"""

import pytest
import torch

from minitf_repl.core.attribution import direct_logit_attribution, residual_parts, attribution_probes
from minitf_repl.core.config import ModelConfig, apply_preset
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.core.inside import listening, logit_lens
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.patching import Patch, activation_patching, patched_runs, record_sites

SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=4, n_layers=3, d_ff=48)
VARIANTS = {
    "seed": {},
    "rmsnorm": {"norm": "rmsnorm"},
    "rope+gqa": {"pos_encoding": "rope", "n_kv_heads": 2},
    "mqa+qk_norm": {"n_kv_heads": 1, "qk_norm": True},
    "llama": "llama",
    "modern": "modern",
    "experts": {"n_experts": 3, "experts_per_token": 2},
    "sdpa": {"attention": "sdpa"},
    "no bias, untied": {"bias": False, "tie_embeddings": False},
}


def build(variant, seed=0) -> MiniTransformerLM:
    extra = VARIANTS[variant]
    config = ModelConfig(**SIZES)
    config = apply_preset(config, extra) if isinstance(extra, str) else config.replace(**extra)
    torch.manual_seed(seed)
    model = MiniTransformerLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # away from the initialisation: every part matters
    return model


def prompts(seed=1, T=7):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 11, (T,), generator=g), torch.randint(0, 11, (T,), generator=g)


def logits_of(model, idx):
    with listening(model, {}):
        return model(idx.view(1, -1))[0][0]  # (T, V)


# --- direct logit attribution --------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_attributions_sum_to_the_logit_minus_the_frozen_norms_offset(variant):
    model = build(variant)
    clean, _ = prompts()
    z = logits_of(model, clean)[-1]
    for target in (None, 3, 10):
        a = direct_logit_attribution(model, clean, target)
        t = int(z.argmax()) if target is None else target
        assert a.target == t and a.logit == pytest.approx(float(z[t]), abs=1e-5)
        assert a.total == pytest.approx(a.logit, abs=1e-4)  # sum of the parts + the stated offset
        assert abs(a.offset) < abs(a.logit) + 10  # a number, not a leftover
        W_U = model.lm_head.weight[t]
        bias = getattr(model.ln_f, "bias", None)
        assert a.offset == pytest.approx(float((bias @ W_U).detach()) if bias is not None else 0.0, abs=1e-5)
    kinds = [p.kind for p in a.parts]
    assert kinds.count("head") == 3 * 4 and kinds.count("ffn") == 3 and kinds[0] == "embed"
    assert ("bias" in kinds) == model.config.bias


@pytest.mark.parametrize("variant", ["seed", "rope+gqa", "experts"])
def test_the_parts_are_the_residual_stream_and_each_layers_heads_its_attention_output(variant):
    model = build(variant)
    clean, _ = prompts()
    probes = attribution_probes(model)
    outputs = {}
    hooks = [(block.attn, lambda m, i, o, k=n: outputs.__setitem__(k, o.detach())) for n, block in enumerate(model.blocks)]
    from minitf_repl.core.probe import listening as listening_pass

    with listening_pass(model, hooks), listening(model, probes) as seen:
        model(clean.view(1, -1))
        parts = residual_parts(model, seen, -1)
    total = torch.stack([v for _, v in parts]).sum(0)
    assert torch.allclose(total, seen["end"][0, -1], atol=1e-5)  # h_L, exactly their sum
    for layer in range(3):
        heads = sum(v for p, v in parts if p.layer == layer and p.kind == "head")
        bias = model.blocks[layer].attn.out_proj.bias
        assert torch.allclose(heads + (bias if bias is not None else 0), outputs[layer][0, -1], atol=1e-5)


def test_attribution_refuses_a_post_norm_model_and_a_bad_target():
    model = MiniTransformerLM(ModelConfig(**SIZES, norm_placement="post"))
    with pytest.raises(UserError, match="post-norm"):
        direct_logit_attribution(model, [1, 2, 3])
    with pytest.raises(UserError, match="with residual=off each sublayer's output replaces the stream"):
        direct_logit_attribution(MiniTransformerLM(ModelConfig(**SIZES, residual=False)), [1, 2, 3])
    with pytest.raises(UserError, match=r"target must be a token id in 0\.\.10"):
        direct_logit_attribution(build("seed"), [1, 2, 3], 11)


# --- activation patching ---------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_patching_the_whole_stream_after_the_last_block_restores_the_clean_logits_exactly(variant):
    model = build(variant)
    clean, corrupt = prompts()
    clean_logits, acts = record_sites(model, clean.view(1, -1))
    out = patched_runs(model, corrupt.view(1, -1), acts, [[Patch("resid", 2)], [Patch("embed")], []])
    assert torch.allclose(out[0], clean_logits[0], atol=1e-5)  # the last layer, every position
    assert torch.allclose(out[1], clean_logits[0], atol=1e-4)  # the embedding: everything after is the clean run
    assert torch.allclose(out[2], logits_of(model, corrupt), atol=1e-5)  # no patch: the corrupted run
    r = activation_patching(model, clean, corrupt)
    assert r.resid.shape == (4, 7) and r.heads.shape == (3, 4)
    assert r.resid[-1, -1] == pytest.approx(1.0, abs=1e-4)  # the last position after the last block
    assert torch.allclose(r.resid[-1, :-1], torch.zeros(6), atol=1e-4)  # earlier positions: the end reads only the last


@pytest.mark.parametrize("variant", ["seed", "rope+gqa", "llama", "sdpa"])
def test_the_batched_sweep_equals_one_run_per_patch(variant):
    model = build(variant)
    clean, corrupt = prompts(seed=4)
    r = activation_patching(model, clean, corrupt)
    _, acts = record_sites(model, clean.view(1, -1))
    z_corrupt = logits_of(model, corrupt)[-1]
    assert r.corrupt_diff == pytest.approx(float(z_corrupt[r.answer] - z_corrupt[r.foil]), abs=1e-5)
    gap = r.clean_diff - r.corrupt_diff
    for patch, got in ((Patch("resid", 0, 3), r.resid[1, 3]), (Patch("embed", None, 6), r.resid[0, 6]),
                       (Patch("head", 1, head=2), r.heads[1, 2]), (Patch("head", 2, head=0), r.heads[2, 0])):
        z = patched_runs(model, corrupt.view(1, -1), acts, [[patch]])[0, -1]
        assert float(got) == pytest.approx((float(z[r.answer] - z[r.foil]) - r.corrupt_diff) / gap, abs=1e-4)


def test_patching_a_head_changes_only_that_head():
    model = build("seed")
    clean, corrupt = prompts()
    _, clean_acts = record_sites(model, clean.view(1, -1))
    seen = {}
    # read downstream of the patch (hook_merged: the heads side by side), where the patched O_h arrives
    hook = [(model.blocks[1].attn.hook_merged, lambda m, i, o: seen.__setitem__("o", o.detach()))]
    from minitf_repl.core.probe import listening as listening_pass

    with listening_pass(model, hook):
        patched_runs(model, corrupt.view(1, -1), clean_acts, [[Patch("head", 1, head=2)]])
    _, corrupt_acts = record_sites(model, corrupt.view(1, -1))
    o = seen["o"][0].view(7, 4, 8).transpose(0, 1)  # (n_heads, T, d_k)
    assert torch.equal(o[2], clean_acts[("head", 1)][0, 2])
    assert torch.equal(o[[0, 1, 3]], corrupt_acts[("head", 1)][0, [0, 1, 3]])


def test_patching_says_what_is_wrong_in_one_line():
    model = build("seed")
    with pytest.raises(DataError, match="same length in tokens, got 3 tokens and 4"):
        activation_patching(model, [1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(UserError, match="same logit difference"):
        activation_patching(model, [1, 2, 3], [1, 2, 3])


def test_patching_many_rows_runs_in_chunks(monkeypatch):
    from minitf_repl.core import patching

    model = build("seed")
    clean, corrupt = prompts()
    whole = activation_patching(model, clean, corrupt)
    monkeypatch.setattr(patching, "ROWS_PER_RUN", 5)
    chunked = activation_patching(model, clean, corrupt)
    assert torch.allclose(whole.resid, chunked.resid, atol=1e-5) and torch.allclose(whole.heads, chunked.heads, atol=1e-5)


# --- the lens in the middle of each block -------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["seed", "rmsnorm", "rope+gqa", "modern"])
def test_the_lens_at_the_end_of_the_last_block_is_the_logits_and_mid_reads_after_attention(variant):
    model = build(variant)
    clean, _ = prompts()
    z = logits_of(model, clean)
    end = logit_lens(model, clean, at="end")
    assert [layer.name for layer in end.layers] == ["embed", "blocks.0", "blocks.1", "blocks.2"]
    assert torch.allclose(end.logits[-1], z, atol=1e-5)
    mid = logit_lens(model, clean, at="mid")
    assert [layer.name for layer in mid.layers] == ["embed", "blocks.0.mid", "blocks.1.mid", "blocks.2.mid"]
    # the reference: the blocks written out by hand, pre-norm, read after attention
    with listening(model, {}):
        h = model.hook_embed(model.token_embedding(clean.view(1, -1))
                             + (model.position_embedding(torch.arange(7)) if model.position_embedding is not None
                                else 0))
        for i, block in enumerate(model.blocks):
            h_mid = h + block.attn(block.ln_1(h))
            assert torch.allclose(mid.logits[i + 1], model.lm_head(model.ln_f(h_mid))[0], atol=1e-5)
            h = h_mid + block.ffn(block.ln_2(h_mid))
        assert torch.allclose(model.lm_head(model.ln_f(h))[0], z, atol=1e-5)
    both = logit_lens(model, clean, at="both")
    assert [layer.name for layer in both.layers][:3] == ["embed", "blocks.0.mid", "blocks.0"]
    assert torch.allclose(both.logits[1::2], mid.logits[1:], atol=1e-6)
    assert torch.allclose(both.logits[2::2], end.logits[1:], atol=1e-6)
    with pytest.raises(UserError, match="at must be one of end, mid, both"):
        logit_lens(model, clean, at="middle")
