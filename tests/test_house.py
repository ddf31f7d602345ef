"""A house by feature (issue 17): a new command is one module, a new norm is one module and its kind.

Both demonstrations add their piece from outside the package, as a new file would, and then look
for it where a user meets it: a command in :help, completion, the REPL, the shell and --json; a
norm in :set, :shapes, :params and the parameter count. Nothing else in the package is edited,
and each test takes its piece out again, so no other test sees it.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli, dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.core import norms, variants
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.sizes import parameter_count, training_bytes
from minitf_repl.dispatch import FrontDoor, FrontEnd, run_command
from minitf_repl.render import render
from minitf_repl.repl import CommandCompleter
from minitf_repl.session import Session

TINY = dict(n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=16)

# --- a new command: one module (its result, its function, its renderer) and one import line ---------
FOO_MODULE = '''
"""`:foo`: the words of a text, backwards (a command added from a module of its own)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console

from minitf_repl.commands.base import command
from minitf_repl.registry import Param
from minitf_repl.render import render, say


@dataclass
class FooResult:
    words: list[str]  # the text's words, last first


@command("foo", "Say the words of a text backwards.", params=[
    Param("text", str, positional=True, help="the words", complete=lambda session: ["one two three"]),
], needs_torch=False)
def cmd_foo(session, args: dict, reporter) -> FooResult:
    return FooResult(list(reversed((args["text"] or "").split())))


@render.register(FooResult)
def render_foo(result: FooResult, console: Console) -> None:
    say(console, "backwards: " + " ".join(result.words), "green")
'''


@pytest.fixture
def foo(tmp_path, monkeypatch):
    """The module minitf_foo.py, written and imported as commands/__init__.py would import a family."""
    (tmp_path / "minitf_foo.py").write_text(textwrap.dedent(FOO_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("minitf_foo")  # the one import line
    try:
        yield module
    finally:
        REGISTRY.remove("foo")
        sys.modules.pop("minitf_foo", None)


def test_a_command_from_a_new_module_runs_through_the_front_door(foo):
    assert "foo" in [entry.name for entry in run_command(None, "help", {}).entries]
    completer = CommandCompleter(registry=REGISTRY, session=None)
    assert ":foo" in [c.text for c in completer.get_completions(Document(":fo"), CompleteEvent())]

    out = Console(file=io.StringIO(), width=80, color_system=None)
    door = FrontDoor(None, out, front=FrontEnd(live=False))
    assert door.run_line(":foo one two three") == dispatch.OK
    assert out.file.getvalue() == "backwards: three two one\n"  # its own renderer, not the generic one
    assert door.run_line(":foo --times 3") == dispatch.FAILED  # its options are declared: no such one

    runner = CliRunner()
    result = runner.invoke(cli.build_app(REGISTRY), ["foo", "a b", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"schema": "minitf.foo/1", "words": ["b", "a"]}


# --- a new normalisation: its module and its kind, from a test module ----------------------------------
class ScaleNorm(norms.NormPart, nn.Module):
    """ScaleNorm (Nguyen & Salazar, 2019): g * x / ||x||, one learned scalar g (sqrt(dim) at the start)."""

    label = "ScaleNorm"

    def __init__(self, dim: int, gain: bool = True):
        super().__init__()
        self.dim = dim
        self.g = nn.Parameter(torch.tensor(float(dim) ** 0.5)) if gain else None

    @classmethod
    def from_config(cls, dim: int, config: ModelConfig) -> "ScaleNorm":
        return cls(dim, gain=config.norm_gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-5)  # (..., dim), unit length
        return y * (self.g if self.g is not None else self.dim ** 0.5)

    def rule(self) -> str:
        return "ScaleNorm(x) = g * x / ||x||"

    def kept_floats(self) -> int:
        return self.dim + 1  # x / ||x|| and ||x||


# A name no real variant takes: as "scalenorm", the fixture replaced a contributor's own ScaleNorm, then removed it
# for the rest of the session.
NORM = "house_test_scalenorm"


@contextlib.contextmanager
def declared_scalenorm():
    """The ScaleNorm above as `norm=house_test_scalenorm`, its kind and its module, taken out again afterwards."""
    assert NORM not in variants.NORMS and NORM not in norms.NORM_MODULES, f"{NORM} is declared already"
    variants.declare_norm(variants.NormKind(NORM, lambda dim, config: 1 if config.norm_gain else 0))
    norms.builds(NORM)(ScaleNorm)
    try:
        yield NORM
    finally:
        variants.NORMS.pop(NORM)
        norms.NORM_MODULES.pop(NORM)


@pytest.fixture
def scalenorm():
    with declared_scalenorm() as name:
        yield name


def test_a_new_norm_is_its_module_and_its_kind(scalenorm):
    for gain in (True, False):
        config = ModelConfig(vocab_size=11, **TINY, norm=scalenorm, norm_gain=gain)
        model = MiniTransformerLM(config)
        assert parameter_count(config) == model.num_parameters()  # core.sizes asks the kind
        assert training_bytes(config, 4) > 0
        assert sum(isinstance(m, ScaleNorm) for m in model.modules()) == 2 * 2 + 1  # ln_1, ln_2 per block; ln_f

    s = Session(data_spec="sort:4")
    run_command(s, "set", {**TINY, "norm": scalenorm, "autosave": False})  # a valid value of the setting
    shapes = run_command(s, "shapes", {"prompt": "31"})
    kinds = {r.path: (r.kind, r.formula) for r in shapes.records}
    assert kinds["blocks.0.ln_1"] == ("ScaleNorm", "ScaleNorm(x) = g * x / ||x||")
    assert kinds["ln_f"] == ("ScaleNorm", "ScaleNorm(h) = g * h / ||h||")  # over h, the stream it normalises
    out = Console(file=io.StringIO(), width=140, color_system=None)
    render(shapes, out)
    assert "ln_1" in out.file.getvalue() and "ScaleNorm(x) = g * x / ||x||" in out.file.getvalue()

    params = run_command(s, "params", {})
    rows = {row["path"]: row for row in params.ledger["rows"]}
    assert rows["ln_f"]["kind"] == "ScaleNorm" and rows["ln_f"]["params"] == 1
    assert rows["blocks.0.ln_1"]["params"] == 1
    assert params.ledger["n_params"] == params.total == parameter_count(s.model_config) == s.model.num_parameters()
    out = Console(file=io.StringIO(), width=100, color_system=None)
    render(params, out)
    assert "ScaleNorm" in out.file.getvalue()
    run_command(s, "train", {"steps": 2, "eval_every": 1})  # and it trains
    with pytest.raises(UserError, match="ScaleNorm.* does not say how it is worked out"):  # :ln asks; it does not say
        run_command(s, "ln", {})
