"""A contributor's findings on following docs/code.md's guide: each test failed before its fix."""

from __future__ import annotations

import ast
import contextlib
import inspect
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from test_commands import run, tiny_session

from minitf_repl.core import feedforward, model as model_module, norms, variants
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.errors import ConfigError, UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.sizes import parameter_count

ROOT = Path(__file__).resolve().parents[1]
CODE_MD = ROOT / "docs" / "code.md"
TINY = dict(vocab_size=11, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16)


@contextlib.contextmanager
def declared(registries: list[dict], name: str, values: list):
    """`name` -> each value in its registry, taken out again afterwards (names no real variant takes)."""
    assert all(name not in registry for registry in registries)
    for registry, value in zip(registries, values):
        registry[name] = value
    try:
        yield name
    finally:
        for registry in registries:
            registry.pop(name, None)


def a_norm(name: str, cls: type, parameters=lambda dim, config: dim if config.norm_gain else 0):
    """`norm=name` builds `cls`, learning one gain per feature (or what `parameters` counts)."""
    kind = variants.NormKind(name, parameters)
    return declared([variants.NORMS, norms.NORM_MODULES], name, [kind, cls])


# --- 1. a new command's missing line: the test says where it goes, and the guide too ---------------------
def test_the_json_test_says_which_list_a_new_commands_line_goes_in():
    import test_json_schema
    from minitf_repl import schema

    every = {c.name for c in schema.json_commands()} - (set() if test_json_schema.REFERENCE else {"parity"})
    documents = {name: {} for name in every - {"gen"}}  # as if :gen were new and had no line yet
    with pytest.raises(AssertionError) as e:
        test_json_schema.test_every_command_that_prints_json_was_run(documents)
    words = str(e.value)
    assert ":gen" in words and "every_command_lines" in words and "tests/conftest.py" in words, words  # was: sets
    guide = " ".join(CODE_MD.read_text().split())
    assert "`every_command_lines` in `tests/conftest.py`" in guide


# --- 2. the module-name check sees a name in a tuple or with a path's dot; the guide states the rule ------------
def test_the_module_name_check_sees_names_in_a_tuple_and_with_a_leading_dot():
    from test_front_door import _decisions_by_a_module_name

    source = ('if name.endswith((".ln_1", ".ln_2")):\n    pass\n'
              'if path.startswith("blocks."):\n    pass\n'
              'if ".ln_f" in path:\n    pass\n'
              'if p.name.endswith("k_proj.bias"):\n    pass\n'  # a longer path: no module's name alone decides
              'if word == "hello":\n    pass\n')
    found = _decisions_by_a_module_name(ast.parse(source), "gains.py", {"ln_1", "ln_2", "ln_f", "blocks", "k_proj"},
                                        {"ln_1", "ln_2", "ln_f", "blocks", "k_proj"}, set())
    assert found == ["gains.py:1: '.ln_1'", "gains.py:1: '.ln_2'", "gains.py:3: 'blocks.'", "gains.py:5: '.ln_f'"]
    guide = " ".join(CODE_MD.read_text().split())
    assert "test_no_shell_module_or_view_decides_by_a_module_name_or_kind" in guide
    assert "the code that finds `ln_f` in a model goes in `core/`" in guide


# --- 3. a norm's class without from_config: a ConfigError naming the fix; the guide says where each piece goes ----
class NoFromConfig(norms.NormPart, nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return x


def test_a_norm_without_from_config_is_refused_with_the_fix():
    with a_norm("contrib_no_from_config", NoFromConfig) as name:
        with pytest.raises(ConfigError, match=r"NoFromConfig cannot be built from a config; give it a classmethod "
                                              r"from_config\(dim, config\)"):  # was: AttributeError
            MiniTransformerLM(ModelConfig(**TINY, norm=name))
    guide = " ".join(CODE_MD.read_text().split())
    assert "`from_config(dim, config)`" in guide and "in `core/variants.py`, not in `core/norms.py`" in guide


# --- 4. :ln asks the norm how it is worked out, and never shows another norm's arithmetic -------------------------
class UnitNorm(norms.NormPart, nn.Module):
    """x / ||x|| * g: it has a weight and an eps, and does not centre, yet it is not RMSNorm."""

    label = "UnitNorm"
    centres = False  # as the guide said a norm should: :ln read this, then RMSNorm's arithmetic

    def __init__(self, dim: int, gain: bool = True):
        super().__init__()
        self.dim, self.eps = dim, 1e-5
        self.weight = nn.Parameter(torch.ones(dim)) if gain else None

    @classmethod
    def from_config(cls, dim, config):
        return cls(dim, gain=config.norm_gain)

    def forward(self, x):
        y = x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return y * self.weight if self.weight is not None else y


class BareUnitNorm(UnitNorm):
    """The same without the attributes :ln read: it crashed with AttributeError on .weight."""

    def __init__(self, dim: int, gain: bool = True):
        nn.Module.__init__(self)
        self.dim = dim

    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-5)


@pytest.mark.parametrize("cls", [UnitNorm, BareUnitNorm])
def test_ln_refuses_a_norm_that_does_not_say_how_it_is_worked_out(cls):
    learns = cls is UnitNorm  # BareUnitNorm learns nothing, and its kind says so (make_norm refuses a miscount)
    with a_norm("contrib_unitnorm", cls, lambda dim, config: dim if config.norm_gain and learns else 0) as name:
        s = tiny_session()
        run(s, f":set norm={name} autosave=off")
        with pytest.raises(UserError, match=rf"this norm \({cls.__name__}\) does not say how it is worked out by "
                                            r"hand \(by_hand\(\)"):
            run(s, ":ln 1234=")


def test_ln_works_out_a_norm_by_what_its_by_hand_gives():
    """A guard (it passed before too): a norm that inherits by_hand() is worked out with its own numbers."""
    class PlainRMS(norms.RMSNorm):  # declares RMSNorm's arithmetic with its own numbers
        label = "PlainRMS"

    with a_norm("contrib_plainrms", PlainRMS) as name:
        s = tiny_session()
        run(s, f":set norm={name} autosave=off")
        result = run(s, ":ln 1234=")
    assert result.norm.label == "PlainRMS" and not result.norm.centres and result.norm.model_diff < 1e-6


# --- 6. TrainingDiverged, which the guide says a run raises, is exported -------------------------------------------
def test_training_diverged_is_exported():
    import minitf_repl
    from minitf_repl.core.errors import TrainingDiverged

    assert "TrainingDiverged" in minitf_repl.__all__
    from minitf_repl import TrainingDiverged as exported  # was: ImportError

    assert exported is TrainingDiverged


# --- 7. an activation is registered in public, and an unknown one is a ConfigError naming how ---------------------
def test_a_new_activation_is_its_module_and_its_kind():
    kind = variants.FeedForwardKind("contrib_silu")
    with declared([variants.FEED_FORWARDS], kind.name, [kind]):
        config = ModelConfig(**TINY, activation=kind.name)
        with pytest.raises(ConfigError, match=r"activation=contrib_silu has no module; register its class with "
                                              r"@feedforward.activation\('contrib_silu'"):  # was: KeyError
            MiniTransformerLM(config)
        feedforward.activation(kind.name, "SiLU(.)", "SiLU lets small negatives through, down to -0.28")(nn.SiLU)
        try:
            model = MiniTransformerLM(config)
            assert isinstance(model.blocks[0].ffn.act, nn.SiLU)
            assert parameter_count(config) == model.num_parameters()
            assert model.blocks[0].ffn.steps()["act"].formula == "SiLU(.)"
        finally:
            feedforward.ACTIVATION_MODULES.pop(kind.name)
    guide = " ".join(CODE_MD.read_text().split())
    assert '`@activation("name", formula, below_zero)`' in guide


def test_how_much_an_activation_keeps_is_declared_on_its_kind_not_decided_by_its_name():
    kind = variants.FeedForwardKind("contrib_relu6", backward_reads_output=True)  # was: no such field, "relu" decided
    with declared([variants.FEED_FORWARDS], kind.name, [kind]):
        assert variants.kept_hidden_layers(kind.name) == 1
        assert kind.kept_floats(ModelConfig(**TINY)) == TINY["d_ff"]
    assert variants.kept_hidden_layers("relu") == 1 and variants.kept_hidden_layers("gelu") == 2


# --- 9. core/model.py's docstring in the views' notation, and no local shadowing an import -------------------------
def test_model_docstring_writes_the_stream_and_heads_as_the_views_do():
    doc = model_module.__doc__
    assert "h'_l = h_{l-1} + Attention" in doc and "h_l  = h'_l    + FFN(LN(h'_l))" in doc  # was: h_l = h_l + ...
    assert "W_E[idx]" in doc and "x W_E" not in doc
    assert "head_{n_h}" in doc and "head_H" not in doc
    assert "the scores, the mask, the softmax" not in " ".join(doc.split())  # no probe holds M alone


def test_no_function_in_core_model_shadows_a_name_it_imports():
    tree = ast.parse(inspect.getsource(model_module))
    imported = {alias.asname or alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                for alias in node.names}
    shadowed = [f"{node.name}: {name.id}" for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
                for name in ast.walk(node) if isinstance(name, ast.Name) and isinstance(name.ctx, ast.Store)
                and name.id in imported]
    assert not shadowed, shadowed  # was: check_cache: held, check_fits: held (interrupts.held)


# --- 12. the house test's own ScaleNorm leaves a real one alone -----------------------------------------------------
def test_the_house_tests_scalenorm_leaves_a_contributors_own_alone():
    from test_house import declared_scalenorm

    class RealScaleNorm(NoFromConfig):
        pass

    kind = variants.NormKind("scalenorm", lambda dim, config: 1)
    with declared([variants.NORMS, norms.NORM_MODULES], "scalenorm", [kind, RealScaleNorm]):
        with declared_scalenorm() as name:
            assert name != "scalenorm"
        assert variants.NORMS.get("scalenorm") is kind and norms.NORM_MODULES.get("scalenorm") is RealScaleNorm
