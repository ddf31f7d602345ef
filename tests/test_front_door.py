"""The front door (issue "One front door"): a command is declared once and every front end follows.

A throw-away command registered in a fresh registry must appear in :help, in completion, as a
shell subcommand and in --json without touching any other module; the package must keep the
layering that makes that true (no import cycle, no private names across modules, no decisions by
command name anywhere, and none by a module's name or kind outside the model's parts: issue 17);
settings are declared once and the model's size comes from one function that equals the built
model for every setting. (tests/test_house.py adds a command and a norm from modules of their own.)
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from rich.console import Console
from typer.testing import CliRunner

import minitf_repl
from minitf_repl import cli, commands, dispatch, render
from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ACTIVATIONS, ATTENTION_IMPLS, POS_ENCODINGS, GenConfig, ModelConfig, TrainConfig
from minitf_repl.core.errors import ConfigError, UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.sizes import parameter_count
from minitf_repl.dispatch import FrontDoor, FrontEnd, phrase, run_command
from minitf_repl.parsing import parse_line, whole_number
from minitf_repl.registry import Command, Param, Registry
from minitf_repl.repl import CommandCompleter
from minitf_repl.session import Session

PACKAGE = Path(minitf_repl.__file__).parent


# --- a new command needs no change anywhere else -------------------------------------------------------
@dataclass
class EchoResult:
    words: list
    times: int


def echo(session, args, reporter) -> EchoResult:
    reporter.notice("echoing")
    return EchoResult(words=(args["text"] or "").split(), times=args["times"] or 1)


@pytest.fixture
def registry():
    """A copy of the real registry plus one throw-away command, so nothing leaks into other tests."""
    reg = Registry()
    for command in REGISTRY.values():
        reg.add(command)
    reg.add(Command("echo", echo, "Repeat some words.", aliases=("ec",), params=[
        Param("text", str, help="the words", positional=True, complete=lambda s: ["hello", "world"]),
        Param("times", int, help="how often", low=1, limit=9),
        Param("style", str, help="how", choices=("plain", "loud")),
    ], needs_torch=False))  # fmt: skip
    return reg


def test_a_new_command_is_in_help_usage_and_rejects_bad_values(registry):
    help_result = REGISTRY["help"].func(None, {"command": None}, None)
    assert "echo" not in [e.name for e in help_result.entries]  # the real registry is untouched
    cmd, args = parse_line(":ec hi there times=3 style=loud", registry)
    assert cmd.name == "echo" and args == {"text": "hi there", "times": 3, "style": "loud"}
    assert run_command(None, "echo", {"text": "a b", "times": "2"}, registry=registry) == EchoResult(["a", "b"], 2)
    assert registry["echo"].usage() == ":echo [TEXT] [times=N] [style=plain|loud]"
    with pytest.raises(UserError, match="times=10 is too large: at most 9"):
        parse_line(":echo times=10", registry)
    with pytest.raises(UserError, match="style must be one of plain, loud"):
        parse_line(":echo style=quiet", registry)


def test_a_new_command_completes(registry):
    completer = CommandCompleter(registry=registry, session=None)

    def complete(text):
        return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]

    assert ":echo" in complete(":ec")
    assert complete(":echo ") == ["times=", "style=", "hello", "world"]
    assert complete(":echo style=l") == ["loud"]
    assert complete(":echo wo") == ["world"]


def test_a_new_command_is_a_shell_subcommand_with_json(registry):
    app = cli.build_app(registry)
    runner = CliRunner()
    result = runner.invoke(app, ["echo", "a b", "--times", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"schema": "minitf.echo/1", "words": ["a", "b"], "times": 2}
    from minitf_repl import schema  # and the versioned-JSON check asks for its schema to be checked in

    assert [p for p in schema.problems(registry) if p.startswith("echo:")] == [
        "echo: no checked-in schema echo.json; run python -m minitf_repl.schema --write"]
    result = runner.invoke(app, ["echo", "--times", "abc"])
    assert result.exit_code == 1 and "times must be a whole number, got 'abc'" in result.stderr
    assert "echo" not in runner.invoke(cli.app, ["--help"]).stdout  # only the registry it was given


def test_a_new_command_renders_through_the_front_door(registry):
    out = Console(width=80, color_system=None, record=True)
    door = FrontDoor(None, out, front=FrontEnd(live=False), registry=registry)
    assert door.run_line(":echo hi times=2") == dispatch.OK
    text = out.export_text()
    assert "echoing" in text and "words" in text and "hi" in text  # the generic renderer shows its fields
    assert door.run_line(":echo times=0") == dispatch.FAILED
    assert "times must be a positive whole number, got 0" in out.export_text()


# --- the layering that makes that true -------------------------------------------------------------------
@functools.cache
def _modules() -> tuple[tuple[str, Path, ast.AST], ...]:
    """(module name, path, syntax tree) of each of the package's files. Parsed once per process: the six scans below
    read the same files, and parsing them all took 1.5 to 3.5 s a scan (the trees are only read, never changed)."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        out.append((".".join(rel.parts).removesuffix(".__init__"), path, ast.parse(path.read_text())))
    return tuple(out)


def _imports(name: str, tree: ast.AST):
    """(imported module, [names]) for every import inside the package, module-level or not."""
    package = name if name.endswith("minitf_repl") or name.count(".") == 0 else name.rsplit(".", 1)[0]
    is_package = (PACKAGE.parent / name.replace(".", "/") / "__init__.py").exists()  # its own imports are relative to it
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = (name if is_package else package).split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                yield (sub if (PACKAGE.parent / (sub.replace(".", "/") + ".py")).exists() else target), alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minitf_repl"):
            for alias in node.names:
                yield node.module, alias.name


def test_no_import_cycle_and_registry_imports_no_other_shell_module():
    graph = {name: {t for t, _ in _imports(name, tree) if t != name} for name, _, tree in _modules()}
    # The registry sits under every other shell module: it imports the core, and syntax.py, with which
    # its errors name commands in the front end's syntax; syntax.py itself imports nothing of the package.
    assert not {t for t in graph["minitf_repl.registry"] if not t.startswith("minitf_repl.core")} - {"minitf_repl.syntax"}
    assert not {t for t in graph["minitf_repl.syntax"] if t.startswith("minitf_repl")}
    for name, targets in graph.items():
        if name.startswith("minitf_repl.core"):  # the core never imports the UI
            assert all(t.startswith("minitf_repl.core") for t in targets), (name, targets)
        if name.startswith("minitf_repl.render"):  # the output layer sits below the commands: docs/code.md's list
            allowed = ("minitf_repl.core", "minitf_repl.render", "minitf_repl.palette", "minitf_repl.reporter",
                       "minitf_repl.syntax")
            assert all(t.startswith(allowed) for t in targets if t.startswith("minitf_repl")), (name, targets)
    assert any(t.startswith("minitf_repl.render") for t in graph["minitf_repl.commands.train"])  # the scan sees them

    def reachable(start):  # every module a chain of imports from start reaches, each visited once (the walk
        found, todo = set(), list(graph.get(start, ()))  # of every path through the graph took 2 to 4 s a run)
        while todo:
            target = todo.pop()
            if target not in found:
                found.add(target)
                todo.extend(graph.get(target, ()))
        return found

    cycles = [name for name in graph if name in reachable(name)]
    assert not cycles, cycles


def test_no_private_name_is_imported_across_modules():
    crossing = [(name, imported) for name, _, tree in _modules() for _, imported in _imports(name, tree)
                if imported.startswith("_") and imported != "__version__"]
    assert not crossing, crossing


def test_no_private_module_of_another_package_is_imported():
    """`typer._click` and the like change without notice between releases; only public modules are used."""
    private = []
    for name, path, tree in _modules():
        for node in ast.walk(tree):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module or ""]
            private += [f"{path.name}: {m}" for m in modules
                        if not m.startswith("minitf_repl") and m != "__future__"
                        and any(part.startswith("_") for part in m.split("."))]
    assert not private, private


def test_no_code_decides_by_a_command_name():
    """Not even a command family: what a command needs is declared on it (registry.Command)."""
    names = {n for c in REGISTRY.values() for n in (c.name, *c.aliases)}
    offenders = []
    for name, path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                parts = [node.left, *node.comparators]
                consts = [p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)]
                consts += [e.value for p in parts if isinstance(p, (ast.Tuple, ast.List, ast.Set))
                           for e in p.elts if isinstance(e, ast.Constant)]
                named = any(isinstance(p, ast.Attribute) and p.attr == "name" for p in parts)
                if named and set(consts) & names:
                    offenders.append(f"{path.name}:{node.lineno}")
    assert not offenders, offenders


# The parts of the model are the only place that names their modules (core/model.py and the variant
# modules): the shell and the views that read a model (trace, ledger, sizes) ask the parts instead.
PART_MODULES = ("minitf_repl.core.model", "minitf_repl.core.norms", "minitf_repl.core.feedforward",
                "minitf_repl.core.experts", "minitf_repl.core.positions")
VIEWS_OF_A_MODEL = ("minitf_repl.core.trace", "minitf_repl.core.ledger", "minitf_repl.core.sizes")


def _names_of_built_models() -> tuple[set[str], set[str]]:
    """(module names, class names) of models built with every value of every setting, on the meta device."""
    modules, kinds = set(), set()
    configs = [dict(SIZES[0])] + [{**SIZES[0], **changes} for changes in _variations()]
    for values in configs:
        try:
            config = ModelConfig(**values)
        except ConfigError:
            continue
        with torch.device("meta"):
            model = MiniTransformerLM(config)
        for path, module in model.named_modules():
            modules.update(part for part in path.split(".") if part and not part.isdigit())
            kinds.add(type(module).__name__)
    return modules, kinds


def test_no_shell_module_or_view_decides_by_a_module_name_or_kind():
    """`name == "fc_in"`, `r.kind == "Dropout"`, `hasattr(ffn, "gate_proj")`, a table keyed by module names,
    `isinstance(norm, RMSNorm)`: each is a decision about a part made outside it. The shell (everything
    outside core/) and trace/ledger/sizes must ask the part (its steps(), symbols(), activation_floats(),
    its kind in core.variants) instead, so that a new variant needs no change there."""
    modules, kinds = _names_of_built_models()
    assert {"fc_in", "gate_proj", "hook_q", "ln_1", "lm_head", "router"} <= modules  # the scan sees the variants
    assert {"Dropout", "LayerNorm", "RMSNorm", "SwiGLU", "MixtureOfExperts"} <= kinds
    names = modules | kinds
    offenders = []
    for name, path, tree in _modules():
        if name.startswith("minitf_repl.core") and name not in VIEWS_OF_A_MODEL:
            continue
        part_classes = {alias for target, alias in _imports(name, tree) if target in PART_MODULES}
        where = f"{path.relative_to(PACKAGE)}"

        offenders += _decisions_by_a_module_name(tree, where, names, modules, part_classes)
    assert not offenders, offenders


# str methods that decide by the end or start of a module's path: `path.endswith((".ln_1", ".ln_2"))`
PATH_TESTS = ("endswith", "startswith")


def _decisions_by_a_module_name(tree: ast.AST, where: str, names: set[str], modules: set[str],
                                part_classes: set[str]) -> list[str]:
    """`where:line: 'name'` for each decision in `tree` by a module name or kind in `names` (see the test above).

    A name counts bare or with the dots that join it to a path ("ln_1", ".ln_1", "blocks."), alone or in a tuple,
    in a comparison, a hasattr/getattr, an isinstance with a part's class, a table's key, or a str method that tests
    a path (PATH_TESTS). A longer path ("k_proj.bias") does not count: no module's name alone decides there."""

    def constants(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        return []

    def named(value: str, among: set[str] = names) -> bool:  # a module's name, bare or with a path's dots
        return value.strip(".") in among

    offenders = []
    for node in ast.walk(tree):
        found = []
        if isinstance(node, ast.Compare):
            found = [c for part in (node.left, *node.comparators) for c in constants(part)]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("hasattr", "getattr") and len(node.args) >= 2:
                found = constants(node.args[1])
            elif node.func.id == "isinstance" and len(node.args) == 2:
                classes = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                found = [c.id for c in classes if isinstance(c, ast.Name) and c.id in part_classes]
                offenders += [f"{where}:{node.lineno}: isinstance(..., {c})" for c in found]
                continue
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in PATH_TESTS:
            found = [c for arg in node.args[:1] for c in constants(arg)]
        elif isinstance(node, ast.Dict):  # a table keyed by module names (minitf_repl's export table names classes)
            found = [c for key in node.keys if key is not None for c in constants(key) if named(c, modules)]
        offenders += [f"{where}:{node.lineno}: {value!r}" for value in found if named(value)]
    return offenders


CORE_MESSAGE_SYNTAX = (":set", ":train", ":save", ":load", ":data", ":gen", "--set", "--checkpoint-dir", "--data")


def test_core_error_messages_carry_no_front_end_syntax():
    found = []
    for name, path, tree in _modules():
        if not name.startswith("minitf_repl.core"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        if any(s in sub.value for s in CORE_MESSAGE_SYNTAX):
                            found.append(f"{path.name}:{node.lineno}: {sub.value}")
    assert not found, found


# --- errors phrased by each front end ---------------------------------------------------------------------
def test_a_fix_is_phrased_in_each_front_ends_syntax():
    e = UserError("the loss diverged; lower the learning rate", fix={"lr": 3e-4})
    assert phrase(e, "repl") == "the loss diverged; lower the learning rate (:set lr=0.0003)"
    assert phrase(e, "shell") == "the loss diverged; lower the learning rate (--set lr=0.0003)"
    assert phrase(UserError("no fix"), "shell") == "no fix"


def test_the_shell_suggests_shell_syntax_after_a_divergence(tmp_path):
    result = CliRunner().invoke(cli.app, ["--data", "sort", "--checkpoint-dir", str(tmp_path), "--set",
                                          "n_layers=1 d_model=16 n_heads=2 d_ff=32 batch_size=4", "train",
                                          "--steps", "3", "--lr", "1e9"])
    assert result.exit_code == 1
    # train's own --lr diverged: its own option is the way on (a --set under it would not take), in shell syntax
    assert result.stderr.rstrip().endswith(f"train --lr {TrainConfig().lr:g}") and ":set" not in result.stderr
    assert "minitf --checkpoint-dir" in result.stderr


# --- settings declared once -------------------------------------------------------------------------------
def test_every_setting_is_a_set_key_with_its_help_choices_and_limit():
    params = {p.name: p for p in REGISTRY["set"].options}
    for cls in (ModelConfig, TrainConfig, GenConfig):
        for spec in cls.specs():
            if spec.derived_from is not None:
                assert spec.name not in params
                with pytest.raises(UserError, match=f"{spec.name} comes from"):
                    parse_line(f":set {spec.name}=3", REGISTRY)
                continue
            p = params[spec.name]
            assert p.setting == spec and p.choices == spec.choices and p.limit == spec.limit
            assert spec.help and spec.help in p.help, spec.name
    assert params["batch_size"].aliases == ("batch",)
    assert {p.name for p in REGISTRY["gen"].options} >= {s.name for s in GenConfig.specs()}  # each overridable


def test_limits_and_ranges_come_from_the_declarations():
    limit = TrainConfig.spec("steps").limit
    with pytest.raises(UserError, match=f"at most {limit:,}"):
        parse_line(f":set steps={limit + 1}", REGISTRY)
    with pytest.raises(UserError, match=f"at most {limit:,}"):
        parse_line(f":train steps={limit + 1}", REGISTRY)
    with pytest.raises(ConfigError, match=r"top_p must be in \(0, 1\]"):
        GenConfig(top_p=1.5)
    with pytest.raises(ConfigError, match=r"dropout must be in \[0, 1\)"):
        ModelConfig(dropout=1.0)
    with pytest.raises(UserError, match=r"top_p must be in \(0, 1\]"):
        parse_line(":gen top_p=0", REGISTRY)
    ModelConfig(max_seq_len=20_000)  # a Python caller may go past what a person may type
    with pytest.raises(ConfigError, match="at most 16,384"):
        ModelConfig(max_seq_len=20_000).check_limits()


@pytest.mark.parametrize("text, value", [
    ("1000", 1000), ("1e3", 1000), ("10_000", 10_000), ("10k", 10_000), ("10K", 10_000), ("2.5k", 2500),
    ("1M", 1_000_000), ("1.5m", 1_500_000), ("3b", 3 * 10**9), ("+7", 7), ("-3", -3), ("0", 0), ("1E2", 100),
])  # fmt: skip
def test_whole_numbers_as_people_write_them(text, value):
    assert whole_number("steps", text) == value


@pytest.mark.parametrize("text", ["1.5", "2.5e0", "1e-3", "k", "10kk", "1_", "1__0", "abc", "1e400", "0x10", "nan"])
def test_not_whole_numbers(text):
    with pytest.raises(UserError, match="steps"):
        whole_number("steps", text)


def test_whole_numbers_reach_every_int_option():
    cmd, args = parse_line(":train steps=2k batch=1_6 eval_every=1e2", REGISTRY)
    assert args == {"steps": 2000, "batch_size": 16, "eval_every": 100}
    assert parse_line(":set n_layers=1e1 top_k=5k", REGISTRY)[1] == {"n_layers": 10, "top_k": 5000}


# --- the model's size: one function, equal to the built model for every setting -----------------------------
SIZES = [dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=4, n_layers=2, d_ff=48),
         dict(vocab_size=7, max_seq_len=5, d_model=12, n_heads=2, n_layers=1, d_ff=20)]
# Settings that are sizes (varied through SIZES) or change no parameter (checked to change none below).
SIZE_FIELDS = {"vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers", "d_ff"}
OTHER_VALUES = {"dropout": [0.1], "rope_base": [500.0], "n_kv_heads": [1, 2], "n_experts": [2, 3],
                "experts_per_token": [1], "moe_aux_weight": [0.5], "norm_eps": [1e-6]}


def _variations():
    """Every value of every setting, one at a time (plus MoE routing, which needs experts)."""
    for spec in ModelConfig.specs():
        if spec.name in SIZE_FIELDS:
            continue
        values = spec.choices or ([True, False] if spec.type is bool else OTHER_VALUES.get(spec.name))
        assert values, f"{spec.name}: add its values to OTHER_VALUES so its parameter count is tested"
        for value in values:
            changes = {spec.name: value}
            if spec.name == "pos_encoding" and value == "rope":
                changes["n_heads"] = 2  # rope needs an even head width
            if spec.name == "experts_per_token":
                changes["n_experts"] = 3
            yield changes


@pytest.mark.parametrize("sizes", SIZES)
@pytest.mark.parametrize("changes", list(_variations()), ids=repr)
def test_parameter_count_equals_the_built_model(sizes, changes):
    try:
        config = ModelConfig(**{**sizes, **changes})
    except ConfigError:
        pytest.skip("not a valid combination at this size")
    with torch.device("meta"):
        model = MiniTransformerLM(config)
    assert parameter_count(config) == model.num_parameters()


def test_every_model_setting_is_covered_by_the_parameter_count_test():
    varied = {name for changes in _variations() for name in changes}
    assert {s.name for s in ModelConfig.specs()} <= varied | SIZE_FIELDS


# --- the session changes state through its own methods -------------------------------------------------------
def test_in_place_settings_go_through_the_model():
    s = Session(data_spec="sort", model_config=ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32))
    model = s.model
    run_command(s, "set", {"attention": "sdpa", "dropout": 0.2})
    assert s.model is model  # no rebuild: the weights are kept
    assert model.config.attention == "sdpa" and model.config.dropout == 0.2
    assert all(m.use_sdpa for m in model.modules() if hasattr(m, "use_sdpa"))
    assert all(m.p == 0.2 for m in model.modules() if isinstance(m, torch.nn.Dropout))
    run_command(s, "set", {"weight_decay": 0.5, "lr": 0.02})
    for group in s.trainer.optimizer.param_groups:  # matrices decay; gains and biases never do
        assert group["weight_decay"] == (0.5 if group["params"][0].dim() == 2 else 0.0)
    assert s.trainer.config.lr == 0.02
