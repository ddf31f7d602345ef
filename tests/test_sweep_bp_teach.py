"""Sweep bp (teach): the scale's why in :qkv and its guide, a norm that is none, blocks without a feed-forward."""

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import plain

DOCS = Path(__file__).resolve().parent.parent / "docs"


def section(doc: str, heading: str) -> str:
    text = (DOCS / doc).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


# --- 1. the guide says when the 1/sqrt(d_k) matters ---------------------------------------------------
def test_the_qkv_guide_says_the_scale_matters_once_q_and_k_grow_not_at_initialisation():
    qkv = " ".join(section("inside-views.md", "## One query worked out by hand: `:qkv`").split())
    assert "soft enough at initialisation for gradients to reach every key" not in qkv  # false for a fresh model
    assert "var(q.k) = d_k var(q) var(k)" in qkv and "dividing by sqrt(d_k) brings them back to 1" in qkv
    assert "At initialisation it does not bite" in qkv and "After `:train steps=300`" in qkv


# --- 2. :qkv shows the spread of the scores, unscaled and scaled ---------------------------------------
def test_qkv_shows_the_variance_of_q_k_and_the_scores_as_torch_computes_them():
    torch.manual_seed(0)
    session = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    model = session.model
    with torch.no_grad():  # weights far from init, so that q and k are not small
        for p in model.parameters():
            p.mul_(3.0)
    prompt, at, head = "the quick brown fox", 9, 1
    result = run(session, f":qkv {prompt} at={at} head={head}")
    ids = session.data.tokenizer.encode(prompt)
    with torch.no_grad():  # q and k from the weights: embedding + position, ln_1, the projections; head 1 is 16..31
        x = model.token_embedding.weight[ids] + model.position_embedding.weight[: len(ids)]
        h = model.blocks[0].ln_1(x)
        q, k = model.blocks[0].attn.q_proj(h)[at, 16:].double(), model.blocks[0].attn.k_proj(h)[: at + 1, 16:].double()
    dots = k @ q
    assert result.q_var == pytest.approx(q.var(unbiased=False).item(), rel=1e-4)
    assert result.k_var == pytest.approx(k.var(unbiased=False).item(), rel=1e-4)
    assert result.dot_var == pytest.approx(dots.var(unbiased=False).item(), rel=1e-4)
    assert result.score_var == pytest.approx((dots / math.sqrt(16)).var(unbiased=False).item(), rel=1e-4)
    out = plain(result, width=200)
    assert f"the spread over these {at + 1} keys: var(q_i) = {result.q_var:.3g}, var(k) = {result.k_var:.3g}" in out
    # the reference for this one q: sum_f q_f^2 var_j(k_jf), each feature's spread over the keys (a pooled var(k)
    # counts the features' means, which spread no q.k_j)
    expected = (q * q * k.var(dim=0, unbiased=False)).sum().item()
    assert f"var(q.k_j) = {result.dot_var:.3g}; keys whose features vary independently would give sum_f q_f^2 " \
        f"var_j(k_jf) = {expected:.3g} (the video's d_k var(q) var(k) = " in out
    assert f"scaled: var(s_ij) = var(q.k_j) / d_k = {result.score_var:.3g} (unit-variance q and k: 16 unscaled" in out
    document = json_document(REGISTRY["qkv"], result)
    assert document["schema"] == "minitf.qkv/4" and document["dot_var"] == pytest.approx(result.dot_var)
    assert "the spread over" not in plain(run(session, f":qkv {prompt} at=0"))  # one key: nothing spreads


# --- 3. norm=none: blocks without a norm ----------------------------------------------------------------
def tiny(**changes) -> Session:
    torch.manual_seed(0)
    return Session(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=32, **changes),
                   TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")


def test_norm_none_builds_blocks_whose_norms_are_the_identity_and_learn_nothing():
    from minitf_repl.core.sizes import parameter_count

    session = tiny()
    run(session, ":set norm=none")  # before: "norm must be one of layernorm, rmsnorm"
    model = session.model
    norms = [model.ln_f] + [getattr(block, name) for block in model.blocks for name in ("ln_1", "ln_2")]
    x = torch.randn(3, 5, 32)
    for norm in norms:
        assert norm(x) is x and not list(norm.parameters()) and norm.by_hand() is None
        frozen = norm.frozen(x)  # exact: linear = identity, offset 0, scale 1
        assert torch.equal(frozen.linear(x), x) and not frozen.offset.any()
        assert torch.equal(frozen.scale, x.new_ones(3, 5, 1))
    assert parameter_count(session.model_config) == sum(p.numel() for p in model.parameters())
    layernorm = dataclasses.replace(session.model_config, norm="layernorm")
    assert parameter_count(session.model_config) == parameter_count(layernorm) - 5 * 2 * 32  # 5 LNs' g and b, gone
    assert "ln_1 (B, T, d) = (1, 16, 32) x, as it is (norm=none: no norm)" in plain(run(session, ":shapes"), width=200)


def test_norm_none_ln_refuses_with_the_fix_and_resid_says_there_is_no_norm():
    from minitf_repl.core.errors import UserError

    session = tiny(norm="none")
    with pytest.raises(UserError, match=r"^there is no norm to work out: norm=none hands the stream on as it is; "
                                        r":set norm=layernorm \(or rmsnorm\) builds a model with one$"):
        run(session, ":ln")
    out = plain(run(session, ":resid"), width=200)
    assert "norm=none: h <- h + f(h)" in out and "Id(h)" not in out  # no norm to write, not an identity one
    assert "every sublayer read the stream itself" in out
    assert "eps under the norm's square root" not in out and "works one of these norms out" not in out  # it has none
    assert "the norm takes the stream's scale away" in plain(run(tiny(), ":resid"), width=200)  # LN still says so


def test_the_variant_lab_explains_norm_none_with_numbers():
    lab = " ".join(section("variant-lab.md", "### Why the norm: `norm=none`").split())
    assert ":compare norm=layernorm norm=none steps=300" in lab and "val 2.04 against 1.90" in lab
