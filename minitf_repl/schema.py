"""The versioned JSON output: what `minitf COMMAND --json` prints, declared so that scripts can rely on it.

Every document is one JSON object whose first key names its schema and version,

    {"schema": "minitf.train/1", "steps": 600, "train_loss": 1.30, ...}

followed by the fields of the command's result dataclass (`dispatch.to_json`). The fields' JSON
Schema is derived here from the dataclass's type annotations (nested dataclasses and TypedDicts
become objects with their own fields; a `dict` is a map from names to values, such as settings;
`X | None` may be null; a float is "number or null", since a non-finite float, a diverged loss,
is written as null). A field's description is its comment in the source.

The version is declared on the command (`json_version` in the registry, 1 unless raised). The
schema of each command's current version is checked in as `minitf_repl/schemas/COMMAND.json`,
shipped with the package for scripts to read, and listed in docs/json.md. tests/test_json_schema.py
fails when the derived fields differ from the checked-in ones, so a renamed, removed, added or
retyped field cannot ship under the old version number. After changing a result's fields:

    raise `json_version` on the command's registration (its @command in commands/), then
    python -m minitf_repl.schema --write   # writes the schemas and docs/json.md

`--write` refuses to change the fields of a version already checked in; a changed comment alone
rewrites the description in place. Without `--write` it checks and says what differs.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import json
import linecache
import re
import sys
import tokenize
import types
import typing
from importlib import import_module
from pathlib import Path

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
DOCS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "json.md"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

# Modules whose dataclasses a result may hold: the names its annotations use resolve against these.
CORE_MODULES = ("backprop", "checkpoint", "checks", "compare", "context", "data", "device", "inside", "ledger", "lrfind", "mistakes", "muon_step", "quantize", "trace",
                "train")


def schema_id(command) -> str:
    """"minitf.train/1": the command's name and the version of its fields."""
    return f"minitf.{command.name}/{command.json_version}"


def json_commands(registry=None) -> list:
    """The commands that print JSON: every shell subcommand (REPL-only commands have no --json)."""
    if registry is None:
        from .commands import REGISTRY as registry
    return [c for c in registry.values() if not c.repl_only]


# --- from annotations to a JSON Schema -------------------------------------------------------------
def _namespace(owner) -> dict:
    """The names an annotation of `owner` may use: its module's, and the core's dataclasses and TypedDicts."""
    return {**_core_types(), **vars(sys.modules[owner.__module__])}


@functools.cache
def _core_types() -> dict:
    """The core's dataclasses and TypedDicts by name, gathered once a process: each schema asks for them for every
    annotation it reads, and the walk over every core module's names made a third of a derivation."""
    names = {}
    for module in CORE_MODULES:
        mod = import_module(f"minitf_repl.core.{module}")
        # a package's public names too: core.checkpoint loads them on first use (its __getattr__), not into vars
        for name, obj in {**vars(mod), **{n: getattr(mod, n) for n in getattr(mod, "__all__", ())}}.items():
            if inspect.isclass(obj) and (dataclasses.is_dataclass(obj) or typing.is_typeddict(obj)):
                names[name] = obj
    return names


def _hints(owner) -> dict:
    return typing.get_type_hints(owner, globalns=_namespace(owner))


def result_type(command) -> type:
    """The result dataclass a command returns, from its function's return annotation."""
    hints = typing.get_type_hints(command.func, globalns=_namespace(command.func))
    if "return" not in hints:
        raise TypeError(f":{command.name}'s function has no return annotation; annotate it with its result dataclass")
    return hints["return"]


def field_comments(owner) -> dict[str, str]:
    """Each field's comment in the source: the one on its line, with the comment lines under it that continue it
    (indented past their `#`, to line up with it: `#        residual=off: 0, ...`), else the comment lines just above
    it. The continuation was dropped: `skip`'s description stopped at "post-norm: J_LN^T g';"."""
    return dict(_field_comments(owner))  # a copy: the cached one stays as the source says


@functools.cache
def _field_comments(owner) -> dict[str, str]:
    """field_comments, read once a process for each class: inspect.getsource parses the class's whole module to find
    it (two thirds of a derivation of every schema, which `schema --write` and the tests repeat)."""
    source = _class_source(owner)
    if source is None:
        return {}
    comments: dict[int, str] = {}
    indented: set[int] = set()  # comment lines indented past their `#`
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
            if tok.string.startswith("#  ") and tok.line.lstrip().startswith("#"):
                indented.add(tok.start[0])
    lines = source.splitlines()
    # the lines of a comment that goes on from a field's own (an indented comment above a field, `#   [name, count]`
    # under "# the rows kept, each:", is that field's description, and was dropped)
    continues: set[int] = set()
    for n in sorted(indented):
        above = lines[n - 2] if n >= 2 else ""
        if n - 1 in continues or (n - 1 in comments and not above.lstrip().startswith("#")):
            continues.add(n)
    out = {}
    for number, line in enumerate(lines, start=1):
        name = line.strip().split(":", 1)[0]
        if not name.isidentifier() or ":" not in line or line.lstrip().startswith(("def ", "class ", "#", "@")):
            continue
        if number in comments:
            below, n = [comments[number]], number + 1
            while n in continues:
                below.append(comments[n])
                n += 1
            out[name] = " ".join(below)
            continue
        above = []
        n = number - 1
        while n in comments and lines[n - 1].lstrip().startswith("#") and n not in continues:
            above.insert(0, comments[n])
            n -= 1
        if above:
            out[name] = " ".join(above)
    return out


def _class_source(owner) -> str | None:
    """The source of class `owner`, its decorators included (inspect.getsource's text), None where there is none.

    A module's classes are found by one parse of its file (_class_lines), not by inspect.getsource, which parses the
    whole module again for each class: 3.7 of a first derivation's 6.8 s on a Zen 3. A class that parse cannot name
    (one made inside a function) is left to inspect."""
    try:
        filename = inspect.getsourcefile(owner)
        spans = _class_lines(filename) if filename else {}
        if owner.__qualname__ in spans:
            first, last = spans[owner.__qualname__]
            return "".join(linecache.getlines(filename)[first - 1:last])
        return inspect.getsource(owner)
    except (OSError, TypeError, SyntaxError):
        return None


@functools.cache
def _class_lines(filename: str) -> dict[str, tuple[int, int]]:
    """Each class of the file by its qualified name (`Outer.Inner`): its first line (the first decorator's) and its
    last. A name defined twice keeps its last definition, the one the module ends up with."""
    spans: dict[str, tuple[int, int]] = {}

    def visit(node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                first = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                spans[prefix + child.name] = (first, child.end_lineno)
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse("".join(linecache.getlines(filename))), "")
    return spans


def describe(annotation, description: str | None = None) -> dict:
    """The JSON Schema of a value with this type annotation."""
    schema = _describe(annotation)
    if description:
        schema["description"] = json_words(description)
    return schema


def json_words(description: str) -> str:
    """A field's comment in the words of the document it describes: Python's None, True and False are JSON's null,
    true and false ("(None: not taken)" described a null)."""
    return re.sub(r"\b(None|True|False)\b", lambda m: {"None": "null", "True": "true", "False": "false"}[m[1]],
                  description)


def _describe(tp) -> dict:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is typing.Any or tp is object:
        return {}
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        schema = _describe(inner[0]) if len(inner) == 1 else {"anyOf": [_describe(a) for a in inner]}
        if type(None) in args:
            kind = schema.get("type")
            if isinstance(kind, str):
                schema["type"] = [kind, "null"]
            elif isinstance(kind, list):
                schema["type"] = kind if "null" in kind else [*kind, "null"]
            else:
                schema = {"anyOf": [schema, {"type": "null"}]}
        return schema
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": ["number", "null"]}  # null: not finite (dispatch.to_json)
    if tp is str or tp is type:  # a type is written as its name
        return {"type": "string"}
    if tp in (list, tuple) or origin in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return {"type": "array", "prefixItems": [_describe(a) for a in args], "items": False}
        return {"type": "array", **({"items": _describe(args[0])} if args else {})}
    if tp is dict or origin is dict:
        values = _describe(args[1]) if len(args) == 2 else {}
        return {"type": "object", "additionalProperties": values}
    if dataclasses.is_dataclass(tp):
        hints, comments = _hints(tp), field_comments(tp)
        properties = {}
        for f in dataclasses.fields(tp):
            if f.metadata.get("view_only"):  # for the renderer alone: not in the JSON (dispatch.to_json)
                continue
            spelled = f.metadata.get("json")  # the value is a dict or list of dicts of another type's fields
            annotation = eval(spelled, _namespace(tp)) if spelled else hints[f.name]  # noqa: S307 (our own source)
            properties[f.name] = describe(annotation, comments.get(f.name))
        return {"type": "object", "properties": properties, "required": list(properties),
                "additionalProperties": False}
    if typing.is_typeddict(tp):
        hints, comments = _hints(tp), field_comments(tp)
        properties = {name: describe(hint, comments.get(name)) for name, hint in hints.items()}
        return {"type": "object", "properties": properties, "required": sorted(tp.__required_keys__),
                "additionalProperties": False}
    raise TypeError(f"no JSON Schema for the annotation {tp!r}; annotate the field with a JSON-able type")


def command_schema(command) -> dict:
    """The whole document's schema: the "schema" key, then the result's fields."""
    body = describe(result_type(command))
    properties = {"schema": {"const": schema_id(command), "description": "this document's schema and version"},
                  **body["properties"]}
    return {
        "$schema": DIALECT,
        "$id": schema_id(command),
        "title": f"minitf {command.name} --json",
        "description": command.summary,
        "type": "object",
        "properties": properties,
        "required": ["schema", *body["required"]],
        "additionalProperties": False,
    }


def fields_only(schema):
    """The schema without descriptions and titles: what a script depends on, and what a version fixes."""
    if isinstance(schema, dict):
        return {k: fields_only(v) for k, v in schema.items() if k not in ("description", "title")}
    if isinstance(schema, list):
        return [fields_only(v) for v in schema]
    return schema


# --- checked-in files ------------------------------------------------------------------------------
def schema_path(command) -> Path:
    return SCHEMA_DIR / f"{command.name}.json"


def checked_in(command) -> dict | None:
    path = schema_path(command)
    return json.loads(path.read_text()) if path.is_file() else None


def problems(registry=None) -> list[str]:
    """What differs between the derived schemas and the checked-in ones, one line each; [] if nothing."""
    out = []
    for command in json_commands(registry):
        try:
            derived, stored = command_schema(command), checked_in(command)
        except TypeError as e:  # a result that no schema can describe: say which and why
            out.append(f"{command.name}: {e}")
            continue
        if stored is None:
            out.append(f"{command.name}: no checked-in schema {schema_path(command).name}; "
                       "run python -m minitf_repl.schema --write")
        elif stored.get("$id") == derived["$id"] and fields_only(stored) != fields_only(derived):
            out.append(f"{command.name}: the fields of {derived['$id']} changed; raise json_version of "
                       f":{command.name} (its @command in commands/), then run python -m minitf_repl.schema --write")
        elif stored != derived:
            out.append(f"{command.name}: {schema_path(command).name} is out of date "
                       f"({stored.get('$id')} checked in, {derived['$id']} derived); "
                       "run python -m minitf_repl.schema --write")
    return out


# --- the docs page ---------------------------------------------------------------------------------
def _type_text(schema: dict) -> str:
    if "const" in schema:
        return f'"{schema["const"]}"'
    if "anyOf" in schema:
        return " or ".join(_type_text(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    kinds = kind if isinstance(kind, list) else [kind]
    words = []
    for k in kinds:
        if k == "array" and "prefixItems" in schema:
            words.append("[" + ", ".join(_type_text(s) for s in schema["prefixItems"]) + "]")
        elif k == "array" and isinstance(schema.get("items"), dict) and "properties" not in schema["items"]:
            items = schema["items"]  # "(number or null)": each item may be null, not (only) the array
            several = "anyOf" in items or isinstance(items.get("type"), list) and len(items["type"]) > 1
            words.append(f"array of ({_type_text(items)})" if several else f"array of {_type_text(items)}")
        elif k == "object" and "properties" not in schema:
            values = schema.get("additionalProperties")
            words.append(f"map of {_type_text(values)}" if values else "map")
        else:
            words.append({"integer": "integer", "number": "number", "string": "string", "boolean": "boolean",
                          "null": "null", "array": "array", "object": "object"}.get(k, k))
    return " or ".join(words)


def _rows(properties: dict, prefix: str = "") -> list[str]:
    rows = []
    for name, schema in properties.items():
        path = f"{prefix}{name}"
        text = (schema.get("description") or "").replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_text(schema)} | {text} |")
        inner, suffix = _unwrap(schema)
        if "properties" in inner:  # an object's own fields, or those of an array's objects, as path[].field
            rows += _rows(inner["properties"], f"{path}{suffix}.")
    return rows


def _unwrap(schema: dict) -> tuple[dict, str]:
    """The object inside a nullable value or an array (of arrays...), and the "[]" for each array."""
    suffix = ""
    while True:
        if "anyOf" in schema:
            schema = next((s for s in schema["anyOf"] if s.get("type") != "null"), {})
        elif isinstance(schema.get("items"), dict) and schema["items"]:
            schema, suffix = schema["items"], suffix + "[]"
        else:
            return schema, suffix


def docs_page(registry=None) -> str:
    """docs/json.md: every command's fields, generated from the schemas (a test keeps it current)."""
    commands = json_commands(registry)
    # the page's example id: the command a reader runs first, at its version today (a name picked for prose only)
    by_name = {command.name: command for command in commands}
    train = schema_id(by_name["train"]) if "train" in by_name else "minitf.train/1"
    lines = [
        "# JSON output",
        "",
        "`minitf COMMAND --json` prints one JSON document on standard output, and nothing else (progress and",
        "errors go to standard error). Its first key, `schema`, names the command and the version of its",
        f'fields: `"{train}"`. A change to the fields (one added, renamed, removed or retyped) raises the',
        "version, so a script can check `schema` and refuse what it does not know. Every field of a schema",
        "is required and no other is allowed, so a document validates against its own version's schema",
        "alone. Some versions changed their fields before the guard held them, as",
        "[fields changed under one version](#fields-changed-under-one-version) says.",
        "",
        "A command that fails prints no document: standard output stays empty, one `error:` line on",
        "standard error says why, and the exit status is not 0",
        "([exit status](checkpoints-and-safety.md#exit-status)). Two commands whose result is their verdict",
        "print it and exit 1: `checks` with a check that failed, and `device` in a session whose `--device`",
        "cannot be used (`minitf --device cuda device --json`, its `problem`); `device cuda` itself asks to",
        "move there, and fails as any command does. A run stopped by Ctrl-C prints its document (`stopped`:",
        "true) and exits 130.",
        "",
        "- A number that is not finite (a diverged loss) is `null`; so is a value that does not apply.",
        "- A *map* is an object whose keys are names (settings, say) rather than fixed fields.",
        "- `a[].b` is the field `b` of each object in the array `a`.",
        "- The JSON Schema of each command (draft 2020-12) ships with the package:",
        "  `minitf_repl/schemas/COMMAND.json`, e.g.",
        "  `importlib.resources.files(\"minitf_repl\") / \"schemas\" / \"train.json\"`.",
        "",
        "This page is generated from the result types by `python -m minitf_repl.schema --write`.",
        "",
        *_changed_section(),
    ]
    for command in sorted(commands, key=lambda c: c.name):
        schema = command_schema(command)
        lines += [f"## `{schema['$id']}`", "", f"`minitf {command.name} --json`: {command.summary}", "",
                  "| field | type | meaning |", "|---|---|---|", *_rows(schema["properties"]), ""]
    return "\n".join(lines)


# Versions whose fields changed while their number did not (git log -p minitf_repl/schemas, every commit): the docs
# page said "never renamed, removed or retyped under the same version", which a script validating an older document
# found untrue. (id, the last commit that changed its fields, its date, what changed), by id.
CHANGED_UNDER_ONE_VERSION = (
    ("attrib/2", "43242c19", "2026-12-04", "`ablations` added"),
    ("checks/1", "9a0b3519", "2026-12-03", "`batch`, `position_table`, `post_norm`, `residual`, `init.reads_own`, "
     "`init.own_p`, `overfit.given`, `overfit.recited`, `overfit.recitable`, `causal.reach_half`, "
     "`causal.reach_most` and `causal.tokens` added"),
    ("context/1", "d72f8ccb", "2026-12-04", "`curve.trained`, `curve.past_error` and `curve.past_gain` added"),
    ("ffn/1", "31127615", "2026-12-03", "`pre_name`, `below_zero` and `ablations` added"),
    ("gen/1", "679556cd", "2026-12-01", "`raw` and `answered` added"),
    ("grad/1", "fe13e1c6", "2026-12-03", "`norm_scale`, `residual`, `optimizer`, `step_lr`, `clip_scale`, "
     "`parts[].step` and `tensors[].step` added"),
    ("kv/1", "42f6be3e", "2026-12-03", "`ablations` and `int8` added"),
    ("lrfind/1", "9a0b3519", "2026-12-03", "`warmup_steps` and `run_steps` removed"),
    ("muon/1", "7f26ebc8", "2026-12-03", "`step.sign_top_share` removed, `step.adamw_first` and "
     "`step.adamw_top_share` added"),
    ("ngram/1", "45f66685", "2026-12-03", "`train_total`, `val_total` and `rows[].model_below_at` added"),
    ("qkv/1", "31127615", "2026-12-03", "`ablations` added"),
    ("resid/1", "31127615", "2026-12-03", "`norm_scale` and `ablations` added; `writes[].norm.std`, "
     "`writes[].norm.rms`, `final.std` and `final.rms` replaced by `.scale`"),
    ("score/1", "08907805", "2026-12-03", "`untrained` added"),
    ("set/4", "195c5e35", "2026-12-04", "`shown[].recipe` added"),
    ("step/2", "f75f8809", "2026-12-04", "`int8` added"),
)


def _changed_section() -> list[str]:
    """The docs page's account of the versions whose fields changed under one number, and since when none has."""
    rows = [f"| `minitf.{vid}` | {commit} ({date}) | {what} |" for vid, commit, date, what in CHANGED_UNDER_ONE_VERSION]
    return [
        "## Fields changed under one version",
        "",
        "`python -m minitf_repl.schema` (run by tests/test_json_schema.py, with `--write` refusing as well) has",
        "checked since the first versioned document (2026-12-01) that no fields change under a checked-in version.",
        "It compares them with the checked-in `minitf_repl/schemas/COMMAND.json` alone, so a change that",
        "rewrote that file with them went through: 27 changes in 23 commits did, the last on 2026-12-04",
        "(f75f8809). None has since (`git log -p minitf_repl/schemas`). A document of one of the versions",
        "below, printed by a minitf older than the commit named, does not validate against the last schema",
        "of that id (a required field missing, or one no longer allowed). Of these ids, `minitf.lrfind/1` and",
        "`minitf.set/4` are still current: their older documents fail against the schema shipped today.",
        "",
        "| id | its fields last changed in | what changed |",
        "|---|---|---|",
        *rows,
        "",
    ]


def write(registry=None) -> list[str]:
    """Write every command's schema and the docs page; refuses (returns why) to change a version's fields."""
    refused = []
    SCHEMA_DIR.mkdir(exist_ok=True)
    for command in json_commands(registry):
        derived, stored = command_schema(command), checked_in(command)
        if stored is not None and stored.get("$id") == derived["$id"] and fields_only(stored) != fields_only(derived):
            refused.append(f"{command.name}: the fields of {derived['$id']} changed; raise json_version of "
                           f":{command.name} first")
            continue
        schema_path(command).write_text(json.dumps(derived, indent=2, ensure_ascii=False) + "\n")
    if not refused:
        DOCS_PAGE.write_text(docs_page(registry))
    return refused


USAGE = "usage: python -m minitf_repl.schema [--write | --help]"


def help_text() -> str:
    """What `python -m minitf_repl.schema --help` prints: what it checks, what --write does, where the files are."""
    return "\n".join([
        USAGE,
        "",
        "The JSON Schemas of `minitf COMMAND --json`, derived from each command's result dataclass.",
        "",
        "With no argument: checks that every command's derived schema is the checked-in one and that",
        "docs/json.md is current; prints what differs, one line each, to standard error (exit 1), else",
        "nothing (exit 0).",
        "",
        "--write: writes every command's schema and docs/json.md. It refuses (exit 1) to change the fields",
        "of a version already checked in: raise json_version on the command's @command in commands/ first.",
        "A changed comment (a field's description) alone is rewritten in place.",
        "",
        f"schemas:   {SCHEMA_DIR}/COMMAND.json (shipped with the package)",
        f"docs page: {DOCS_PAGE}",
    ])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # a real --help: it printed the usage line alone, to standard error, and exited 2
    if argv and argv[0] in ("--help", "-h"):
        print(help_text())
        return 0
    if argv == ["--write"]:
        refused = write()
        for line in refused:
            print(f"refused: {line}", file=sys.stderr)
        return 1 if refused else 0
    if argv:
        print(f"{USAGE}; --help says what each does", file=sys.stderr)
        return 2
    found = problems()
    if DOCS_PAGE.is_file() and DOCS_PAGE.read_text() != docs_page():
        found.append(f"{DOCS_PAGE} is out of date; run python -m minitf_repl.schema --write")
    for line in found:
        print(line, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
