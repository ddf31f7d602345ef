"""The versioned --json output (schema.py): every document names its schema, the fields match the
checked-in schema of that version, a field changed without a new version fails, and docs/json.md
lists what the schemas say.

The documents checked are real ones: every shell command run once with --json through the front
door, in one session of a tiny model (train first, so the views have something to show).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console

from minitf_repl import dispatch, schema
from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.dispatch import FrontDoor, FrontEnd
from minitf_repl.registry import Registry
from minitf_repl.session import Session

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)
REFERENCE = importlib.util.find_spec("transformers") is not None


# --- a small validator for the part of JSON Schema that schema.py writes ---------------------------
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def validate(value, s: dict, path: str = "$") -> list[str]:
    """Every way `value` breaks schema `s`, one line each ([] if it fits)."""
    if s is False:
        return [f"{path}: nothing is allowed here"]
    errors = []
    if "const" in s and value != s["const"]:
        errors.append(f"{path}: {value!r} is not {s['const']!r}")
    if "anyOf" in s and all(validate(value, option, path) for option in s["anyOf"]):
        errors.append(f"{path}: {value!r} fits none of {s['anyOf']}")
    kinds = s.get("type")
    if kinds is not None and not any(_is(value, k) for k in ([kinds] if isinstance(kinds, str) else kinds)):
        return errors + [f"{path}: {type(value).__name__} {value!r:.60} is not {kinds}"]
    if isinstance(value, dict):
        properties = s.get("properties", {})
        errors += [f"{path}: missing {key!r}" for key in s.get("required", []) if key not in value]
        for key, item in value.items():
            if key in properties:
                errors += validate(item, properties[key], f"{path}.{key}")
            elif s.get("additionalProperties", True) is False:
                errors.append(f"{path}: unexpected field {key!r}")
            elif isinstance(s.get("additionalProperties"), dict):
                errors += validate(item, s["additionalProperties"], f"{path}.{key}")
    if isinstance(value, list):
        prefix = s.get("prefixItems", [])
        for i, item in enumerate(value):
            rule = prefix[i] if i < len(prefix) else s.get("items", {})
            errors += validate(item, rule, f"{path}[{i}]")
    return errors


def test_the_validator_catches_what_it_should():
    s = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": ["number", "null"]}},
         "required": ["a", "b"], "additionalProperties": False}
    assert validate({"a": 1, "b": None}, s) == []
    assert validate({"a": True, "b": 1.5}, s)  # a boolean is no integer
    assert validate({"a": 1}, s) and validate({"a": 1, "b": 2, "c": 3}, s)
    assert validate([1, "x"], {"type": "array", "items": {"type": "integer"}})


# --- every document, for real ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def documents(tmp_path_factory, every_command_lines) -> dict[str, dict]:
    """{command: its --json document}, each shell command run once in one tiny session."""
    folder = tmp_path_factory.mktemp("json")
    session = Session(ModelConfig(**TINY), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=2),
                      data_spec="sort:4", device_name="cpu", checkpoint_dir=folder / "checkpoints")
    quiet = Console(file=open(folder / "stderr.txt", "w"), width=100, color_system=None)
    door = FrontDoor(session, quiet, quiet, FrontEnd(syntax="shell", json=True, live=False))
    lines = every_command_lines(folder, reference=REFERENCE)
    docs = {}
    for line in lines:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):  # FrontDoor prints the document on standard output
            status = door.run_line(line)
        assert out.getvalue().count("\n") == 1, line  # one document, one line
        doc = json.loads(out.getvalue())
        # a check that FAILs fails :checks (a script stops there), and the document says which: 3 steps overfit nothing
        failed_checks = line.startswith(":checks") and status == dispatch.FAILED and doc["failed"]
        assert status == dispatch.OK or failed_checks, (line, (folder / "stderr.txt").read_text()[-500:])
        docs[line.split()[0].lstrip(":")] = doc
    return docs


def test_every_command_that_prints_json_was_run(documents):
    expected = {c.name for c in schema.json_commands()} - (set() if REFERENCE else {"parity"})
    unrun = sorted(expected - set(documents))
    # a new command's first failure is here: say where its line goes (set comparison alone named only the set)
    assert not unrun, (f"not run: {', '.join(':' + name for name in unrun)}; add a line that runs each (as "
                       "':gen 12 n=5 seed=1') to the list `every` in every_command_lines, tests/conftest.py")
    assert set(documents) == expected


@pytest.mark.parametrize("name", sorted(c.name for c in schema.json_commands()))
def test_each_document_names_its_schema_and_fits_it(documents, name):
    if name not in documents:
        pytest.skip("transformers is not installed: :parity has nothing to compare with")
    doc = documents[name]
    command = REGISTRY[name]
    assert next(iter(doc)) == "schema" and doc["schema"] == f"minitf.{name}/{command.json_version}"
    stored = schema.checked_in(command)
    assert stored is not None and stored["$id"] == doc["schema"]
    assert validate(doc, stored) == []


# --- the checked-in schemas and the docs page --------------------------------------------------------
def test_the_checked_in_schemas_are_the_derived_ones():
    assert schema.problems() == []


def test_the_docs_page_lists_every_field():
    page = schema.DOCS_PAGE.read_text()
    assert page == schema.docs_page(), "docs/json.md is out of date: python -m minitf_repl.schema --write"
    for command in schema.json_commands():
        for field in dataclasses.fields(schema.result_type(command)):
            if field.metadata.get("view_only"):  # for the renderer alone: not in the JSON (see the next test)
                continue
            assert f"| `{field.name}` |" in page.split(f"## `{schema.schema_id(command)}`")[1].split("\n## ")[0]


def test_every_field_of_every_document_says_what_it_means():
    """A field's meaning is the comment on it in its result dataclass; 187 rows of docs/json.md had none (`load`'s
    `data_spec`, `checks`' `init.own_p`), and a script writer had to read the code to know what they held."""
    empty = []

    def walk(node, where: str) -> None:
        if isinstance(node, dict):
            for key, value in (node.get("properties") or {}).items():
                if not (isinstance(value, dict) and str(value.get("description", "")).strip()):
                    empty.append(f"{where}.{key}")
            for key, value in node.items():
                walk(value, where if key in ("properties", "items") else f"{where}/{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    for command in schema.json_commands():
        walk(schema.command_schema(command), schema.schema_id(command))
    assert empty == [], "give each field a comment in its dataclass, then python -m minitf_repl.schema --write"


def test_a_view_only_field_is_left_out_of_the_json_at_any_depth():
    """:shapes' legend and each trace record's Step are for the renderer; --json stays what the schema says."""
    s = Session(data_spec="sort:4")
    dispatch.run_command(s, "set", dict(TINY))
    result = dispatch.run_command(s, "shapes", {"prompt": "31"})
    assert result.symbols and all(r.step is not None for r in result.records)
    document = dispatch.to_json(result)
    assert "symbols" not in document and all("step" not in r for r in document["records"])
    assert set(document) == set(schema.command_schema(REGISTRY["shapes"])["properties"]) - {"schema"}


@dataclass
class TokResultRenamed:  # :tok's result with a field renamed, as a careless change would do
    text: str
    words: list[str]
    ids: list[int]
    vocab_size: int
    kind: str = "character"


def _registry_with(result_type, version: int) -> Registry:
    registry = Registry()
    tok = REGISTRY["tok"]

    def func(session, args, reporter):
        raise AssertionError("never run")

    func.__annotations__ = {"return": result_type}
    registry.add(dataclasses.replace(tok, func=func, json_version=version))
    return registry


TOK = REGISTRY["tok"].json_version  # the version :tok's fields are at now


def test_a_changed_field_without_a_new_version_fails():
    found = schema.problems(_registry_with(TokResultRenamed, version=TOK))
    assert len(found) == 1 and f"the fields of minitf.tok/{TOK} changed; raise json_version of :tok" in found[0]


def test_a_new_version_is_written_and_an_old_one_never_rewritten(tmp_path, monkeypatch):
    monkeypatch.setattr(schema, "SCHEMA_DIR", tmp_path)
    monkeypatch.setattr(schema, "DOCS_PAGE", tmp_path / "json.md")
    (tmp_path / "tok.json").write_text((Path(schema.__file__).parent / "schemas" / "tok.json").read_text())
    refused = schema.write(_registry_with(TokResultRenamed, version=TOK))
    assert refused and "raise json_version of :tok first" in refused[0]
    assert json.loads((tmp_path / "tok.json").read_text())["$id"] == f"minitf.tok/{TOK}"  # untouched
    bumped = _registry_with(TokResultRenamed, version=TOK + 1)
    assert "out of date" in schema.problems(bumped)[0]  # a new version, not yet written
    assert schema.write(bumped) == []
    written = json.loads((tmp_path / "tok.json").read_text())
    assert written["$id"] == f"minitf.tok/{TOK + 1}" and "words" in written["properties"]
    assert schema.problems(bumped) == [] and f"## `minitf.tok/{TOK + 1}`" in (tmp_path / "json.md").read_text()


def test_the_shell_prints_the_schema_first():
    from typer.testing import CliRunner

    from minitf_repl import cli

    result = CliRunner().invoke(cli.app, ["--data", "sort", "tok", "312", "--json"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f'{{"schema": "minitf.tok/{TOK}", ')
