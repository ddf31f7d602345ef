"""A researcher's findings on extending the model from Python (core.variants, core.norms, core.feedforward): a norm
of their own, an FFN or norm set by hand, a half-declared variant, a miscounting kind. Each test failed before its
fix."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session
from test_house import declared_scalenorm
from test_render import plain

from minitf_repl.core import feedforward, norms, variants
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.errors import ConfigError
from minitf_repl.core.model import MiniTransformerLM

DOCS = Path(__file__).resolve().parents[1] / "docs"
SMALL = dict(vocab_size=11, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16)


class DyT(norms.NormPart, nn.Module):
    """Dynamic tanh (Zhu et al., 2025): tanh(a x) * g + b, a norm with no scale to freeze and no :ln arithmetic."""

    label = "DyT"

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.tensor(0.5))
        self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))

    @classmethod
    def from_config(cls, dim, config):
        return cls(dim)

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias


@contextlib.contextmanager
def declared_norm(name: str, cls, parameters=lambda dim, config: 2 * dim + 1, kind: bool = True):
    """`norm=name` builds `cls` (and, with kind, is declared), both taken out again afterwards."""
    assert name not in variants.NORMS and name not in norms.NORM_MODULES
    if kind:
        variants.declare_norm(variants.NormKind(name, parameters))
    norms.builds(name)(cls)
    try:
        yield name
    finally:
        variants.NORMS.pop(name, None)
        norms.NORM_MODULES.pop(name, None)


class MyFFN(nn.Module):
    """A feed-forward module of a caller's own that states nothing (no steps, symbols, activation_floats)."""

    def __init__(self, d: int):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return self.lin(x)


class Plain(nn.Module):
    """A norm that is no NormPart."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)

    @classmethod
    def from_config(cls, dim, config):
        return cls(dim)

    def forward(self, x):
        return self.ln(x)


@contextlib.contextmanager
def session_with_norm(norm: str):
    """A tiny session whose model has test_house's ScaleNorm or the DyT above, declared for the block's length."""
    context = declared_scalenorm() if norm == "scalenorm" else declared_norm("sweep_br_dyt", DyT)
    with context as name:
        session = tiny_session()
        run(session, f":set norm={name}")
        yield session


# --- 1. :ffn lists the units for a norm that cannot be frozen, without their tokens ------------------------------
@pytest.mark.parametrize("norm", ["scalenorm", "dyt"])
def test_ffn_shows_the_units_of_a_model_whose_norm_says_no_frozen_scale(norm):
    with session_with_norm(norm) as session:
        result = run(session, ":ffn")  # was: the whole view refused, "does not say how to freeze its scale"
        assert result.units and all(u.promotes is None for u in result.units)
        assert "does not say how to freeze its scale (a frozen(x) method" in result.no_tokens
        assert "no tokens are shown" in plain(result)


# --- 2. a part of a caller's own: views say what they can, and a norm must be a NormPart --------------------------
def test_shapes_and_params_describe_a_feed_forward_set_by_hand():
    session = tiny_session()
    session.model.blocks[0].ffn = MyFFN(session.model.config.d_model)
    shapes = run(session, ":shapes")  # was: internal error, 'MyFFN' object has no attribute 'symbols'
    rows = {r.path: r for r in shapes.records}
    assert rows["blocks.0.ffn.lin"].kind == "Linear" and rows["blocks.0.ffn.lin"].n_params == 32 * 32 + 32
    assert shapes.unstated == ["blocks.0.ffn (MyFFN)"]
    assert "no formula for the steps of blocks.0.ffn (MyFFN): a part of a caller's own that states no steps()" \
        in plain(shapes, 200)
    params = run(session, ":params")
    assert "the activations count a guess for blocks.0.ffn (MyFFN)" in plain(params, 200)
    assert "guess" not in plain(run(tiny_session(), ":params"), 200)  # the package's own parts state theirs


def test_a_norm_set_by_hand_that_is_no_norm_part_is_named_by_its_class():
    session = tiny_session()
    model = session.model
    model.blocks[0].ln_2, model.ln_f = Plain(32), Plain(32)
    shapes = run(session, ":shapes")  # was: 'Plain' object has no attribute 'label'
    formulas = {r.path: r.formula for r in shapes.records}
    assert "Plain(h) W_E^T" in formulas["lm_head"]
    assert shapes.unstated == ["blocks.0.ln_2 (Plain)", "ln_f (Plain)"]
    out = plain(run(session, ":params"), 200)  # was: 'Plain' object has no attribute 'kept_floats'
    assert "a guess for blocks.0.ln_2 (Plain), ln_f (Plain)" in out


def test_a_declared_norm_that_is_no_norm_part_is_refused_naming_the_base_class():
    with declared_norm("sweep_br_plain", Plain, lambda dim, config: 2 * dim) as name:
        with pytest.raises(ConfigError, match=r"norm=sweep_br_plain's class Plain is not a norms.NormPart.*; "
                                              r"subclass it: class Plain\(norms.NormPart, nn.Module\)"):
            MiniTransformerLM(ModelConfig(**SMALL, norm=name))
        session = tiny_session()
        run(session, f":set norm={name}")
        with pytest.raises(ConfigError, match="is not a norms.NormPart"):  # was: internal error from :shapes
            run(session, ":shapes")

    class NoDim(DyT):
        def __init__(self, dim):
            super().__init__(dim)
            del self.dim

    with declared_norm("sweep_br_nodim", NoDim) as name:
        with pytest.raises(ConfigError, match="has no dim, .*set self.dim = dim in its __init__"):
            MiniTransformerLM(ModelConfig(**SMALL, norm=name))


# --- 3. registered and not declared: the refusal names the declaration ------------------------------------------------
def test_a_norm_built_but_not_declared_is_told_the_declaration():
    with declared_norm("sweep_br_onlybuilt", DyT, kind=False) as name:
        with pytest.raises(ConfigError) as e:
            ModelConfig(norm=name)
        words = str(e.value)  # was: "norm must be one of layernorm, rmsnorm, none; got ..." and no more
        assert "its module is registered (@norms.builds('sweep_br_onlybuilt'))" in words
        assert "variants.declare_norm(variants.NormKind('sweep_br_onlybuilt', lambda dim, config:" in words
        assert "\n" not in words
        line = assert_one_error_line(invoke("--set", f"norm={name}", "shapes"))
        assert "variants.declare_norm(" in line
    with pytest.raises(ConfigError) as e:
        ModelConfig(norm="sweep_br_unknown")  # nothing registered: the choices alone, as before
    assert "registered" not in str(e.value)


def test_an_activation_built_but_not_declared_is_told_the_declaration():
    feedforward.activation("sweep_br_mish", "Mish(.)", "Mish lets small negatives through")(nn.Mish)
    try:
        declaration = "variants.declare_feed_forward(variants.FeedForwardKind('sweep_br_mish'))"
        with pytest.raises(ConfigError, match=re.escape(declaration)):
            ModelConfig(activation="sweep_br_mish")
    finally:
        feedforward.ACTIVATION_MODULES.pop("sweep_br_mish")


# --- 4. the right reason, the right claim, the right count ---------------------------------------------------------
def test_a_parameter_a_part_holds_itself_is_not_called_an_expert_no_token_went_to():
    from test_sweep_br_own_parts import GatedAttention  # the gated attention of the fast path's own-part tests

    session = tiny_session()
    session.model.blocks[0].attn = GatedAttention(session.model.config)
    out = plain(run(session, ":shapes"), 200)
    assert "experts" not in out  # was: "1 parameter did not run (1 in blocks.0): experts no token was routed to"
    assert "blocks.0.attn (GatedAttention) holds 1 parameter of its own, beside its steps" in out


@pytest.mark.parametrize("norm", ["scalenorm", "dyt"])
def test_resid_says_sqrt_d_only_of_the_norms_whose_arithmetic_gives_it(norm):
    with session_with_norm(norm) as session:
        out = plain(run(session, ":resid"), 200)
    assert "takes the stream's scale away" not in out and "times the gain):" not in out  # was: said of tanh
    assert "does not state that it scales its input to a fixed size" in out
    assert "? in the scale column: it does not say what it divides by" in out
    assert "the norm takes the stream's scale away" in plain(run(tiny_session(), ":resid"), 200)  # LayerNorm: it does


def test_a_norm_kind_that_miscounts_is_refused_with_both_numbers():
    with declared_norm("sweep_br_miscounted", DyT, lambda dim, config: 2 * dim) as name:
        with pytest.raises(ConfigError, match=r"norm=sweep_br_miscounted's kind counts 32 parameters for one norm "
                                              r"over 16 features, but its module DyT has 33"):  # was: accepted
            MiniTransformerLM(ModelConfig(**SMALL, norm=name))
    with declared_norm("sweep_br_counted", DyT) as name:  # the right count builds
        assert MiniTransformerLM(ModelConfig(**SMALL, norm=name)).num_parameters() > 0


# --- the docs' example is the documented way, and works ----------------------------------------------------------
def test_the_variant_labs_own_norm_example_builds_and_shows():
    text = (DOCS / "variant-lab.md").read_text()
    section = text.split("### A variant of your own", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "NormPart" in code and "declare_norm" in code
    try:
        exec(compile(code, "variant-lab.md", "exec"), {})
        session = tiny_session()
        run(session, ":set norm=dyt")
        shapes = {r.path: r.formula for r in run(session, ":shapes").records}
        assert shapes["blocks.0.ln_1"] == "DyT(x) = tanh(a x) * g + b"
        assert run(session, ":ffn").units
    finally:
        variants.NORMS.pop("dyt", None)
        norms.NORM_MODULES.pop("dyt", None)
