"""The commands: a registry of small functions that act on a Session and return plain dataclasses.

Each command is one function registered with `@command(name, summary, aliases, params)`. The REPL
(`:train steps=200`) and the shell (`minitf train --steps 200`) both reach it through
`run_command`, with the same option names; `:help`, tab completion and the shell's subcommands are
generated from REGISTRY, so they cannot drift from the code. Commands never print: progress and
generated text leave through `Hooks`, results are returned, and render.py decides what to show.

Every command validates all of its arguments before it changes anything, so a failed command
leaves the session as it was. Errors a user can cause are `UserError`s with a one-sentence message.

No torch at module level (see session.py): the core modules that need it are imported inside the
commands that use them.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .core.config import ACTIVATIONS, ATTENTION_IMPLS, POS_ENCODINGS, ModelConfig, TrainConfig
from .core.errors import DeviceError, TrainingDiverged, UserError
from .session import AUTOSAVE_NAME, GenSettings, Session

# --- the registry ------------------------------------------------------------------------------


@dataclass
class Param:
    name: str
    type: type  # int | float | str | bool
    default: Any = None  # None: not given (the session's setting applies)
    help: str = ""
    choices: tuple | None = None
    positional: bool = False  # the free text of a command (PROMPT, NAME, COMMAND)
    nullable: bool = False  # accepts "none" to clear the setting (`:set top_k=none`)


@dataclass
class Command:
    name: str
    func: Callable
    summary: str  # one line, ends with a period
    aliases: tuple = ()
    params: list[Param] = field(default_factory=list)
    # Ctrl-C during most commands asks them to stop at the next step or token (Hooks.should_stop).
    # An interruptible command polls nothing: the UI lets Ctrl-C raise KeyboardInterrupt inside it,
    # and the command cleans up and reports (`:save` keeps the previous checkpoint).
    interruptible: bool = False


REGISTRY: dict[str, Command] = {}


def command(name: str, summary: str, aliases: tuple = (), params: list[Param] | tuple = (),
            interruptible: bool = False):
    """Register `func(session, args, hooks) -> result` as command `name`."""

    def register(func: Callable) -> Callable:
        REGISTRY[name] = Command(name, func, summary, tuple(aliases), list(params), interruptible)
        return func

    return register


def find_command(name: str) -> Command:
    """The command called `name` (or one of its aliases; a leading ':' is ignored)."""
    key = name.strip().lstrip(":").lower()
    for cmd in REGISTRY.values():
        if key == cmd.name or key in cmd.aliases:
            return cmd
    names = [c.name for c in REGISTRY.values()] + [a for c in REGISTRY.values() for a in c.aliases]
    close = difflib.get_close_matches(key[:40], names, n=1, cutoff=0.6)
    hint = f"; did you mean :{find_command(close[0]).name}?" if close else ""
    raise UserError(f"unknown command :{_clip(key)}{hint} (:help lists commands)")


class Hooks:
    """How a running command talks to the UI. The base class does nothing; the UI subclasses it."""

    def on_train_start(self, run_steps: int, start_step: int, resumed: bool) -> None:
        """A run of run_steps steps begins (or resumes) with start_step of them already done."""

    def on_step(self, info) -> None:
        """After every optimizer step (a core.train.StepInfo; val_loss is set on eval steps)."""

    def on_token(self, text: str) -> None:
        """Generated text, as it is produced."""

    def should_stop(self) -> bool:
        """Asked between steps and between tokens; True ends the command early (Ctrl-C)."""
        return False

    def notice(self, text: str) -> None:
        """One informational line, e.g. that the weights were reset."""


def run_command(session: Session, name: str, args: dict | None = None, hooks: Hooks | None = None):
    """Run a command by name with args {option: value}. Values may be typed or strings to parse;
    a None value means "not given". Returns the command's result dataclass."""
    cmd = find_command(name)
    values = _normalize_args(cmd, args or {})
    try:
        return cmd.func(session, values, hooks if hooks is not None else Hooks())
    except MemoryError:
        raise UserError(_OUT_OF_MEMORY) from None
    except RuntimeError as e:
        # torch's OutOfMemoryError (CUDA, MPS) is a RuntimeError; anything else is a bug.
        if type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower():
            raise UserError(_OUT_OF_MEMORY) from None
        raise


_OUT_OF_MEMORY = "out of memory; lower batch_size, max_seq_len or the model size (:set), or use another :device"

# --- results -----------------------------------------------------------------------------------


@dataclass
class HelpEntry:
    name: str
    aliases: tuple
    summary: str
    usage: str  # e.g. ":train [steps=N] [lr=X] ..."


@dataclass
class HelpResult:
    entries: list[HelpEntry]
    detail: HelpEntry | None = None  # set by `:help COMMAND`
    params: list[Param] = field(default_factory=list)  # the detail's options


@dataclass
class QuitResult:
    pass


@dataclass
class TrainResult:
    steps: int  # steps done by this command
    total_steps: int  # optimizer steps done in total
    run_remaining: int  # > 0 after a stop: `:train` continues the run
    stopped: bool
    resumed: bool  # this command continued an unfinished run
    train_loss: float | None
    val_loss: float | None
    accuracy: float | None  # exact-match accuracy on held-out examples (tasks only)
    tokens_per_second: float
    seconds: float
    evals: list[dict]  # history rows (core.train.StepInfo as dicts) with a val_loss, from this command
    data: str
    saved: str | None = None  # the checkpoint written at the end (save=NAME, or autosave), if any
    save_error: str | None = None  # why that save failed; the training itself is kept


@dataclass
class GenResult:
    prompt: str  # the prompt used (the default start character if none was given)
    text: str  # the generated continuation, without the prompt
    n_tokens: int
    seconds: float
    tokens_per_second: float
    cache: bool
    stopped: bool


@dataclass
class ShapesResult:
    prompt: str  # the text traced (after truncation to max_seq_len)
    records: list  # core.trace.TraceRecord, in execution order
    n_layers: int
    layer: int | None  # the block shown in full; None when show_all
    show_all: bool


@dataclass
class DeviceResult:
    devices: list  # core.device.DeviceInfo
    current: str
    switched: bool


@dataclass
class ConfigResult:
    model: dict
    train: dict
    gen: dict
    data: str
    device: str
    checkpoints: dict = field(default_factory=dict)  # {"dir": ..., "autosave": bool}


@dataclass
class SetResult:
    changed: dict  # key -> (old, new), only the values that changed
    rebuilt: bool  # the model was rebuilt: weights reset


@dataclass
class DataResult:
    info: Any  # core.data.DataInfo
    changed: bool
    rebuilt: bool


@dataclass
class ParamsResult:
    rows: list  # (parameter path, shape, count); the tied embedding/head matrix once
    total: int


@dataclass
class SaveResult:
    name: str
    path: str  # the checkpoint's directory
    step: int
    size_bytes: int  # the manifest and both data files
    seconds: float
    replaced: bool  # a checkpoint of that name existed and was replaced


@dataclass
class LoadResult:
    name: str
    path: str
    step: int
    data_spec: str
    val_loss: float | None  # the last evaluated validation loss, None if never evaluated
    model_config: dict
    run_remaining: int  # > 0: the run was stopped and `:train` continues it
    n_params: int
    saved_at: str | None  # ISO 8601, UTC


@dataclass
class LsResult:
    rows: list  # core.checkpoint.CheckpointInfo, newest first; a broken one has `error` set
    directory: str


# --- limits that keep a typo from exhausting memory ----------------------------------------------

LIMITS = {
    "steps": 10_000_000,
    "batch": 4096,
    "batch_size": 4096,
    "n": 100_000,
    "eval_batches": 10_000,
    "warmup_steps": 10_000_000,
    "eval_every": 10_000_000,
    "max_seq_len": 16_384,
    "seed": 2**63 - 1,
    "gen_seed": 2**63 - 1,
}
MAX_PARAMS = 500_000_000
MAX_TRAIN_BYTES = 64 * 2**30


def check_footprint(model: ModelConfig, train: TrainConfig) -> None:
    """Refuse a model or batch whose training would need more memory than any machine here has.

    A rough count: parameters (weights, gradients and two AdamW moments: 16 bytes each) plus the
    activations kept for the backward pass (about 12 d_model + 2 d_ff floats per token and layer,
    and with explicit attention three (T, T) maps per head).
    """
    d, L, T, V, F, H, B = (
        model.d_model, model.n_layers, model.max_seq_len, model.vocab_size, model.d_ff, model.n_heads,
        train.batch_size,
    )
    params = V * d + T * d + L * (4 * d * d + 2 * d * F + 9 * d + F) + 2 * d
    if params > MAX_PARAMS:
        about = f"{params / 1e6:,.0f}M" if params < 1e15 else f"{params:.1e}"  # no 60-digit numbers
        raise UserError(
            f"that model would have about {about} parameters, more than this lab's limit of "
            f"{MAX_PARAMS // 1_000_000}M; lower d_model, d_ff or n_layers"
        )
    per_token_layer = 12 * d + 2 * F + (3 * H * T if model.attention == "explicit" else 0)
    need = 16 * params + 4 * B * T * L * per_token_layer
    if need > MAX_TRAIN_BYTES:
        raise UserError(
            f"training with batch_size={B}, max_seq_len={T} and this model would need about "
            f"{need / 2**30:,.0f} GiB (the limit is {MAX_TRAIN_BYTES // 2**30} GiB); lower batch_size or max_seq_len"
        )


def check_gen_settings(gen: GenSettings) -> None:
    """The checks of core.generate.check_sampling, without importing torch (for `:set`)."""
    if isinstance(gen.n, bool) or not isinstance(gen.n, int) or gen.n < 0:
        raise UserError(f"n (tokens to generate) must be a whole number >= 0, got {gen.n!r}")
    t = gen.temperature
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
        raise UserError(f"temperature must be a finite number >= 0 (0 means greedy), got {t!r}")
    if gen.top_k is not None and (isinstance(gen.top_k, bool) or not isinstance(gen.top_k, int) or gen.top_k < 1):
        raise UserError(f"top_k must be a whole number >= 1 (or none), got {gen.top_k!r}")
    p = gen.top_p
    if p is not None and (isinstance(p, bool) or not isinstance(p, (int, float)) or math.isnan(p) or not 0 < p <= 1):
        raise UserError(f"top_p must be in (0, 1] (or none), got {p!r}")
    if gen.seed is not None and (isinstance(gen.seed, bool) or not isinstance(gen.seed, int) or gen.seed < 0):
        raise UserError(f"seed must be a whole number >= 0 (or none for a random one), got {gen.seed!r}")


# --- values ------------------------------------------------------------------------------------


class _Clear:
    """The value of `key=none` for a nullable setting: "clear it", unlike None ("not given")."""

    def __repr__(self) -> str:
        return "none"


CLEAR = _Clear()

_BOOL_WORDS = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# Option names accepted for another spelling, per command.
KEY_ALIASES = {"train": {"batch_size": "batch"}, "set": {"batch": "batch_size"}}


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _show(value) -> str:
    return repr(_clip(value)) if isinstance(value, str) else repr(value)


def convert(param: Param, raw: str):
    """Parse the text of an option value to the param's type (raises UserError)."""
    text = raw.strip()
    if param.nullable and text.lower() == "none":
        return CLEAR
    if param.type is bool:
        value = _BOOL_WORDS.get(text.lower())
        if value is None:
            raise UserError(f"{param.name} must be on or off (on|off|true|false|yes|no|1|0), got {_show(raw)}")
    elif param.type is int:
        try:
            value = int(text)
        except ValueError:
            if re.fullmatch(r"[+-]?\d+", text):  # Python refuses to parse more than 4,300 digits
                raise UserError(f"{param.name} has {len(text):,} digits, far too many; use a smaller value") from None
            raise UserError(f"{param.name} must be a whole number, got {_show(raw)}") from None
    elif param.type is float:
        try:
            value = float(text)
        except ValueError:
            raise UserError(f"{param.name} must be a number, got {_show(raw)}") from None
    else:
        value = raw
    return check_value(param, value)


def check_value(param: Param, value):
    """Check an already typed value: its type, finiteness, choices and size limit."""
    name = param.name
    if value is CLEAR:
        if not param.nullable:
            raise UserError(f"{name} cannot be none; give a value")
        return value
    if param.type is bool:
        if not isinstance(value, bool):
            if isinstance(value, str):
                return convert(param, value)
            raise UserError(f"{name} must be on or off, got {_show(value)}")
    elif param.type is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise UserError(f"{name} must be a whole number, got {_show(value)}")
    elif param.type is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{name} must be a number, got {_show(value)}")
        value = float(value)
        if not math.isfinite(value):
            raise UserError(f"{name} must be a finite number, got {value}")
    elif not isinstance(value, str):
        raise UserError(f"{name} must be text, got {_show(value)}")
    elif not param.positional and not value.strip():
        raise UserError(f"{name} needs a value, e.g. {name}={param.choices[0] if param.choices else '...'}")
    if param.choices and value not in param.choices:
        raise UserError(f"{name} must be one of {', '.join(map(str, param.choices))}; got {_show(value)}")
    limit = LIMITS.get(name)
    if limit is not None and value > limit:
        raise UserError(f"{name}={_clip(f'{value:,}')} is too large: at most {limit:,}; use a smaller value")
    return value


def _find_param(cmd: Command, key: str) -> Param:
    """The option `key` of cmd (dashes and underscores alike), or a UserError naming the valid keys."""
    key = key.replace("-", "_").lower()
    key = KEY_ALIASES.get(cmd.name, {}).get(key, key)
    options = [p for p in cmd.params if not p.positional]
    for p in options:
        if p.name == key:
            return p
    if cmd.name == "set" and key == "vocab_size":
        raise UserError("vocab_size comes from the data (one token per character); switch data with :data to change it")
    if not options:
        raise UserError(f":{cmd.name} takes no options; got {_show(key)}")
    names = [p.name for p in options]
    close = difflib.get_close_matches(key[:40], names, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    raise UserError(f"unknown option {_show(key)} for :{cmd.name}{hint} (valid: {', '.join(names)})")


def _normalize_args(cmd: Command, args: dict) -> dict:
    """Every param of cmd with its default, overridden by the given (checked) values."""
    values = {p.name: p.default for p in cmd.params}
    positional = next((p for p in cmd.params if p.positional), None)
    for raw_key, value in args.items():
        key = raw_key.replace("-", "_").lower()
        if positional is not None and key == positional.name:
            param = positional
        else:
            param = _find_param(cmd, key)
        if value is None:
            continue
        if isinstance(value, str) and param.type is not str:
            value = convert(param, value)
        else:
            value = check_value(param, value)
        values[param.name] = value
    return values


# --- parsing a REPL line -----------------------------------------------------------------------


@dataclass
class _Token:
    text: str
    quoted_from: int | None  # index in text of the first character that was inside quotes


_PLAIN = re.compile(r"[^\s\"']+")
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}


def _tokenize(text: str) -> list[_Token]:
    """Split on whitespace; '...' and "..." group text and mark it quoted. In double quotes
    \\n, \\t, \\" and \\\\ are escapes; single quotes take everything literally."""
    tokens: list[_Token] = []
    buf: list[str] = []
    length = 0
    quoted_from = None
    in_token = False
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            if in_token:
                tokens.append(_Token("".join(buf), quoted_from))
                buf, length, quoted_from, in_token = [], 0, None, False
            i += 1
        elif c in "\"'":
            in_token = True
            if quoted_from is None:
                quoted_from = length
            j = i + 1
            while True:
                stop = text.find(c, j) if c == "'" else _next_special(text, j)
                if stop < 0:
                    raise UserError(f"unclosed quote {c} in the line; add the closing {c}")
                if stop > j:
                    buf.append(text[j:stop])
                    length += stop - j
                if text[stop] == c:
                    i = stop + 1
                    break
                escaped = text[stop + 1 : stop + 2]  # a backslash inside double quotes
                if escaped and escaped in _ESCAPES:
                    buf.append(_ESCAPES[escaped])
                    j = stop + 2
                else:
                    buf.append("\\")
                    j = stop + 1
                length += 1
        else:
            m = _PLAIN.match(text, i)
            chunk = m.group(0)
            buf.append(chunk)
            length += len(chunk)
            in_token = True
            i = m.end()
    if in_token:
        tokens.append(_Token("".join(buf), quoted_from))
    return tokens


def _next_special(text: str, start: int) -> int:
    """Index of the next '"' or '\\' at or after start, or -1 (a search, so a long line stays linear)."""
    m = _DQ_SPECIAL.search(text, start)
    return m.start() if m else -1


_DQ_SPECIAL = re.compile(r'["\\]')


def parse_line(line: str) -> tuple[Command, dict]:
    """Parse a REPL line into (command, args). Raises UserError.

    `:name key=value --key value --key=value --flag text`. Quoted tokens are always text; an
    unquoted key=value must name an option of the command. A line that does not start with ':'
    is the prompt of `gen`, verbatim.
    """
    stripped = line.lstrip()
    if not stripped.startswith(":"):
        return REGISTRY["gen"], {"prompt": line}
    body = stripped[1:]
    name = body.split(None, 1)[0] if body.strip() else ""
    if not name:
        raise UserError("empty command after ':'; type :help to list the commands")
    cmd = find_command(name)
    rest = body.lstrip()[len(name) :]
    return cmd, _parse_args(cmd, _tokenize(rest))


def _option_key(token: _Token) -> tuple[str, str | None] | None:
    """(key, value or None) if the token is an option (`--key[=value]` or `key=value`), else None."""
    text, q = token.text, token.quoted_from
    unquoted = text if q is None else text[:q]
    if unquoted.startswith("--") and len(unquoted) > 2:
        key, eq, value = text[2:].partition("=")
        if eq and q is not None and q < 2 + len(key):
            return None  # the '=' sits inside quotes: text
        if _KEY.fullmatch(key):
            return key, (value if eq else None)
        return None
    eq_at = unquoted.find("=")
    if eq_at > 0 and _KEY.fullmatch(text[:eq_at]):
        return text[:eq_at], text[eq_at + 1 :]
    return None


def _parse_args(cmd: Command, tokens: list[_Token]) -> dict:
    args: dict = {}
    text: list[str] = []
    positional = next((p for p in cmd.params if p.positional), None)
    i = 0
    only_text = False
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if only_text:
            text.append(token.text)
            continue
        if token.text == "--" and token.quoted_from is None:
            only_text = True  # everything after a bare `--` is text
            continue
        option = _option_key(token)
        if option is None:
            text.append(token.text)
            continue
        key, value = option
        is_long = token.text.startswith("--") and (token.quoted_from is None or token.quoted_from >= 2)
        norm = key.replace("-", "_").lower()
        flag = None
        if is_long and value is None and norm.startswith("no_"):
            flag = next((p for p in cmd.params if p.name == norm[3:] and p.type is bool and not p.positional), None)
        if flag is not None:
            param, value = flag, "off"  # --no-cache
        else:
            try:
                param = _find_param(cmd, norm)
            except UserError as e:
                if positional is not None and not is_long:
                    raise UserError(f"{e}; to use it as text, quote it: :{cmd.name} \"{_clip(token.text)}\"") from None
                raise
        if value is None:  # `--key` without '='
            nxt = tokens[i] if i < len(tokens) else None
            if param.type is bool:
                value = "on"
                if nxt is not None and nxt.quoted_from is None and nxt.text.lower() in _BOOL_WORDS:
                    value, i = nxt.text, i + 1
            elif nxt is None:
                raise UserError(f"--{param.name} needs a value, e.g. --{param.name} {_example(param)}")
            else:
                value, i = nxt.text, i + 1
        if param.name in args:
            raise UserError(f"{param.name} is given twice; give it once")
        args[param.name] = convert(param, value)
    if text:
        if positional is None:
            words = " ".join(text)
            raise UserError(f":{cmd.name} takes no text; got {_show(words)} (:help {cmd.name} shows its options)")
        args[positional.name] = " ".join(text)
    return args


def _example(param: Param) -> str:
    if param.choices:
        return str(param.choices[0])
    return {int: "10", float: "0.5", bool: "on"}.get(param.type, "NAME")


def usage(cmd: Command) -> str:
    """One line such as ":train [steps=N] [lr=X] ..."."""
    if cmd.name == "set":
        return ":set key=value ..."
    parts = [f":{cmd.name}"]
    for p in cmd.params:
        if p.positional:
            parts.append(f"[{p.name.upper()}]")
        elif p.type is bool and p.default is False:
            parts.append(f"[--{p.name}]")
        else:
            meta = "|".join(p.choices) if p.choices else {int: "N", float: "X", bool: "on|off"}.get(p.type, "NAME")
            parts.append(f"[{p.name}={meta}]")
    return " ".join(parts)


def _entry(cmd: Command) -> HelpEntry:
    return HelpEntry(cmd.name, cmd.aliases, cmd.summary, usage(cmd))


# --- the commands --------------------------------------------------------------------------------


@command("help", "List the commands, or show one command's options.", params=[
    Param("command", str, help="a command name, e.g. train", positional=True),
])  # fmt: skip
def cmd_help(session: Session, args: dict, hooks: Hooks) -> HelpResult:
    entries = [_entry(cmd) for cmd in REGISTRY.values()]
    name = args["command"]
    if name is None or not name.strip():
        return HelpResult(entries)
    cmd = find_command(name.split()[0])
    return HelpResult(entries, detail=_entry(cmd), params=list(cmd.params))


@command("quit", "Leave minitf.", aliases=("q", "exit"))
def cmd_quit(session: Session, args: dict, hooks: Hooks) -> QuitResult:
    return QuitResult()


@command("train", "Train the model: continue a stopped run, or start a new run of steps.", params=[
    Param("steps", int, help="length of a new run (default: continue a stopped run, else the steps setting)"),
    Param("lr", float, help="peak learning rate (kept, like :set lr)"),
    Param("batch", int, help="sequences per step (kept, like :set batch_size)"),
    Param("data", str, help="switch data first, as :data does"),
    Param("eval_every", int, help="steps between validation evaluations (kept)"),
    Param("seed", int, help="seed of the batch order (kept)"),
    Param("save", str, help=f"save the checkpoint NAME at the end (default: {AUTOSAVE_NAME}, unless autosave is off)"),
])  # fmt: skip
def cmd_train(session: Session, args: dict, hooks: Hooks) -> TrainResult:
    steps = args["steps"]
    if steps is not None and steps <= 0:
        raise UserError(f"steps must be a positive whole number, got {steps}")
    save_as = args["save"].strip() if args["save"] is not None else None
    if save_as is not None:
        _check_save_target(session, save_as)  # a bad name fails now, not after an hour of training
    changes = {field: args[key] for key, field in _TRAIN_OPTIONS.items() if args[key] is not None}
    train_config = session.train_config.replace(**changes) if changes else session.train_config
    spec = args["data"].strip() if args["data"] is not None else None
    new_data = _load_checked(session, spec) if spec is not None else None
    if new_data is None:
        session.data.check_block_size(session.model_config.max_seq_len)
    model_config = session.model_config
    if new_data is not None:
        model_config = model_config.replace(vocab_size=new_data.tokenizer.vocab_size)
    check_footprint(model_config, train_config)
    session.device  # resolve now: an unusable device fails before anything changes

    if new_data is not None:
        _switch_data(session, spec, new_data, hooks)
    # A diverged run is a failed command, and a failed command loses nothing: the weights of the
    # last finite step (what the core keeps) are usually ruined already at such a learning rate, so
    # the session goes back to where this :train began, settings included.
    snapshot = session.trainer.snapshot()
    session.set_train_config(train_config)
    trainer = session.trainer
    resumed = steps is None and new_data is None and trainer.run_remaining > 0
    if not resumed:
        trainer.start_run(steps)
    hooks.on_train_start(trainer.run_steps, trainer.step - trainer.run_start, resumed)
    try:
        summary = trainer.run(on_step=hooks.on_step, should_stop=hooks.should_stop)
    except TrainingDiverged as e:
        trainer.rollback(snapshot)
        session.train_config = trainer.config
        lr = train_config.lr
        raise TrainingDiverged(
            f"the {e.what} became {e.value} at step {e.step}; the model, optimizer, run and settings are "
            f"back at step {trainer.step}, where this :train began. Lower the learning rate "
            f"({lr:g} diverged; try :train lr={lr / 10:g})",
            step=e.step, what=e.what, value=e.value,
        ) from None
    done = trainer.history[-summary.steps :] if summary.steps else []
    # Saved when the run ends or is stopped; a diverged run raised above and leaves the last save alone.
    saved, save_error = None, None
    name = save_as if save_as is not None else (AUTOSAVE_NAME if session.autosave else None)
    if name is not None:
        try:
            saved = save_session(session, name).name
        except UserError as e:
            save_error = str(e)
    return TrainResult(
        steps=summary.steps,
        total_steps=summary.total_steps,
        run_remaining=summary.run_remaining,
        stopped=summary.stopped,
        resumed=resumed,
        train_loss=summary.train_loss,
        val_loss=summary.val_loss,
        accuracy=summary.accuracy,
        tokens_per_second=summary.tokens_per_second,
        seconds=summary.seconds,
        evals=[dict(row) for row in done if row["val_loss"] is not None],
        data=session.data_spec,
        saved=saved,
        save_error=save_error,
    )


_TRAIN_OPTIONS = {"lr": "lr", "batch": "batch_size", "eval_every": "eval_every", "seed": "seed"}


@command("gen", "Generate text from a prompt (a line without ':' is a prompt too).", params=[
    Param("prompt", str, help="text to continue (default: a newline, or the first character of the vocabulary)",
          positional=True),
    Param("n", int, help="tokens to generate (default: the n setting)"),
    Param("temperature", float, help="0 is greedy; higher is more random (default: the temperature setting)"),
    Param("top_k", int, help="sample from the k most likely tokens only"),
    Param("top_p", float, help="sample from the smallest set of tokens whose probability reaches p"),
    Param("seed", int, help="seed for the sampling (default: random)"),
    Param("cache", bool, help="use the KV cache (on) or recompute the prefix every token (off)"),
])  # fmt: skip
def cmd_gen(session: Session, args: dict, hooks: Hooks) -> GenResult:
    given = {k: args[k] for k in ("n", "temperature", "top_k", "top_p", "seed", "cache") if args[k] is not None}
    settings = dataclasses.replace(session.gen, **given)
    check_gen_settings(settings)
    tokenizer = session.data.tokenizer
    prompt = args["prompt"] or ""
    if not prompt:
        prompt = "\n" if "\n" in tokenizer.stoi else tokenizer.itos[0]
    ids = tokenizer.encode(prompt)
    model = session.model

    from .core.generate import generate

    stream = generate(
        model, ids, settings.n, settings.temperature, settings.top_k, settings.top_p, settings.seed, settings.cache
    )
    pieces: list[str] = []
    stopped = False
    start = time.perf_counter()
    try:
        for token in stream:
            piece = tokenizer.decode([token])
            pieces.append(piece)
            hooks.on_token(piece)
            if hooks.should_stop() and len(pieces) < settings.n:
                stopped = True
                break
    finally:
        stream.close()
    seconds = time.perf_counter() - start
    return GenResult(
        prompt=prompt,
        text="".join(pieces),
        n_tokens=len(pieces),
        seconds=seconds,
        tokens_per_second=len(pieces) / seconds if seconds > 0 else 0.0,
        cache=settings.cache,
        stopped=stopped,
    )


@command("shapes", "Trace one forward pass: every step's shape, in the order it runs.", params=[
    Param("prompt", str, help="text to trace (default: a short sample of the data)", positional=True),
    Param("layer", int, help="the block to show in full (default 0)"),
    Param("all", bool, default=False, help="show every block in full"),
])  # fmt: skip
def cmd_shapes(session: Session, args: dict, hooks: Hooks) -> ShapesResult:
    n_layers = session.model_config.n_layers
    layer = args["layer"] if args["layer"] is not None else 0
    if not 0 <= layer < n_layers:
        blocks = f"{n_layers} block{'s' if n_layers != 1 else ''}"
        raise UserError(f"layer must be in 0..{n_layers - 1} (the model has {blocks}), got {_clip(str(layer))}")
    data = session.data
    prompt = args["prompt"] or sample_prompt(data)
    ids = data.tokenizer.encode(prompt)
    window = session.model_config.max_seq_len
    if len(ids) > window:
        ids = ids[-window:]
        prompt = data.tokenizer.decode(ids)
        hooks.notice(f"the prompt is longer than max_seq_len={window}; tracing its last {window} characters")
    model = session.model

    import torch

    from .core.trace import trace

    records = trace(model, torch.tensor(ids, dtype=torch.long))
    show_all = bool(args["all"])
    return ShapesResult(prompt, records, n_layers, None if show_all else layer, show_all)


def sample_prompt(data) -> str:
    """A short, typical input: 16 characters of validation text, or one held-out task question."""
    splits = getattr(data, "splits", None)
    if splits is not None:
        return data.tokenizer.decode(splits["val"][:16].tolist())
    if hasattr(data, "sample_questions"):
        import torch

        return data.sample_questions("val", 1, torch.Generator().manual_seed(0))[0]
    return data.tokenizer.vocab[:16]


@command("device", "Show the devices, or move the model to one (cpu, cuda, cuda:N, mps).", params=[
    Param("name", str, help="auto, cpu, cuda, cuda:N or mps", positional=True),
])  # fmt: skip
def cmd_device(session: Session, args: dict, hooks: Hooks) -> DeviceResult:
    from .core.device import ACCEPTED_FORMS, describe_devices, resolve_device

    try:
        current = session.device
    except DeviceError:
        current = None  # e.g. --device cuda on a machine without one: listing still works
    name = args["name"]
    if name is None or not name.strip():
        return DeviceResult(describe_devices(), str(current) if current is not None else session.device_name, False)
    if len(name.strip()) > 16:  # no device name is this long; keep the message one line
        raise DeviceError(f"unknown device {_show(name)}; use one of {ACCEPTED_FORMS}")
    target = resolve_device(name)
    try:
        session.move_to(target)
    except RuntimeError as e:
        if current is not None and session.has_model:
            session.move_to(current)  # never leave the model half moved
        raise DeviceError(f"could not move the model to {target}: {_clip(str(e), 120)}; stay on {current}") from None
    return DeviceResult(describe_devices(), str(target), current != target)


@command("config", "Show the model, training and generation settings.")
def cmd_config(session: Session, args: dict, hooks: Hooks) -> ConfigResult:
    model = session.model_config.to_dict()
    if session._data is None:
        model["vocab_size"] = None  # set by the data, which is loaded on first use (it needs torch)
    return ConfigResult(
        model=model,
        train=session.train_config.to_dict(),
        gen=session.gen.to_dict(),
        data=session.data_spec,
        device=session.status().device,
        checkpoints={"dir": str(session.checkpoint_dir), "autosave": session.autosave},
    )


_MODEL_HELP = {
    "max_seq_len": "context window T: the longest input",
    "d_model": "width of the residual stream",
    "n_heads": "attention heads (must divide d_model)",
    "n_layers": "Transformer blocks",
    "d_ff": "hidden width of the feed-forward network",
    "dropout": "dropout probability in [0, 1)",
    "activation": "feed-forward activation",
    "pos_encoding": "learned or sinusoidal positions",
    "attention": "explicit formula or the fused sdpa kernel (same weights)",
}
_TRAIN_HELP = {
    "steps": "length of a run",
    "batch_size": "sequences per step",
    "lr": "peak learning rate",
    "min_lr_ratio": "the cosine decays to lr * min_lr_ratio",
    "warmup_steps": "steps of linear warm-up",
    "weight_decay": "AdamW weight decay on matrices",
    "grad_clip": "max gradient norm (0: off)",
    "eval_every": "steps between evaluations",
    "eval_batches": "validation batches per evaluation",
    "seed": "seed of the initial weights and batch order",
}
_CHOICES = {"activation": ACTIVATIONS, "pos_encoding": POS_ENCODINGS, "attention": ATTENTION_IMPLS}
# `:set` key -> GenSettings field. The training seed is `seed`, so the sampling seed is `gen_seed`.
GEN_KEYS = {"n": "n", "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "gen_seed": "seed", "cache": "cache"}
SESSION_KEYS = ("autosave",)  # `:set` keys that are attributes of the Session itself


def _set_params() -> list[Param]:
    params = []
    for f in dataclasses.fields(ModelConfig):
        if f.name != "vocab_size":
            params.append(Param(f.name, type(f.default), help=f"model: {_MODEL_HELP.get(f.name, f.name)}",
                                choices=_CHOICES.get(f.name)))  # fmt: skip
    for f in dataclasses.fields(TrainConfig):
        params.append(Param(f.name, type(f.default), help=f"training: {_TRAIN_HELP.get(f.name, f.name)}"))
    params += [
        Param("n", int, help="gen: tokens to generate"),
        Param("temperature", float, help="gen: sampling temperature (0: greedy)"),
        Param("top_k", int, help="gen: keep the k most likely tokens (none: off)", nullable=True),
        Param("top_p", float, help="gen: nucleus probability mass (none: off)", nullable=True),
        Param("gen_seed", int, help="gen: sampling seed (none: random)", nullable=True),
        Param("cache", bool, help="gen: use the KV cache"),
        Param("autosave", bool, help=f"checkpoints: save {AUTOSAVE_NAME!r} at the end of every :train"),
    ]
    return params


@command("set", "Change settings: model architecture (resets weights), training or generation.",
         params=_set_params())  # fmt: skip
def cmd_set(session: Session, args: dict, hooks: Hooks) -> SetResult:
    given = {k: v for k, v in args.items() if v is not None}
    if not given:
        keys = ", ".join(p.name for p in REGISTRY["set"].params)
        raise UserError(f"nothing to set; give key=value pairs, e.g. :set lr=1e-3 n_layers=2 (keys: {keys})")
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    model_changes, train_changes, gen_changes = {}, {}, {}
    for key, value in given.items():
        value = None if value is CLEAR else value
        if key in SESSION_KEYS:
            continue
        if key in GEN_KEYS:
            gen_changes[GEN_KEYS[key]] = value
        elif key in model_fields:
            model_changes[key] = value
        elif key in train_fields:
            train_changes[key] = value
    old_model, old_train, old_gen = session.model_config, session.train_config, session.gen
    new_model = old_model.replace(**model_changes) if model_changes else old_model
    new_train = old_train.replace(**train_changes) if train_changes else old_train
    new_gen = dataclasses.replace(old_gen, **gen_changes)
    check_gen_settings(new_gen)
    if new_model.max_seq_len != old_model.max_seq_len:
        session.data.check_block_size(new_model.max_seq_len)
    check_footprint(new_model, new_train)

    changed = {}
    for key in given:
        if key in SESSION_KEYS:
            old, new = getattr(session, key), given[key]
        elif key in GEN_KEYS:
            old, new = getattr(old_gen, GEN_KEYS[key]), getattr(new_gen, GEN_KEYS[key])
        elif key in model_fields:
            old, new = getattr(old_model, key), getattr(new_model, key)
        else:
            old, new = getattr(old_train, key), getattr(new_train, key)
        if old != new:
            changed[key] = (old, new)
    rebuilt = session.set_model_config(new_model)
    session.set_train_config(new_train)
    session.gen = new_gen
    for key in SESSION_KEYS:
        if key in given:
            setattr(session, key, given[key])
    if rebuilt:
        hooks.notice("the architecture changed: the model was rebuilt, weights reset (step 0)")
    return SetResult(changed, rebuilt)


@command("data", "Show the data, or switch: pydoc, shakespeare, sort[:N], reverse[:N], add[:N], random[:V], a file.",
         params=[Param("name", str, help="pydoc|shakespeare|sort[:N]|reverse[:N]|add[:N]|random[:V]|a file path",
                       positional=True)])  # fmt: skip
def cmd_data(session: Session, args: dict, hooks: Hooks) -> DataResult:
    name = args["name"]
    if name is None or not name.strip():
        return DataResult(session.data.info(), changed=False, rebuilt=False)
    spec = name.strip()
    data = _load_checked(session, spec)
    rebuilt = _switch_data(session, spec, data, hooks)
    return DataResult(data.info(), changed=True, rebuilt=rebuilt)


def _load_checked(session: Session, spec: str):
    """Load a dataset and check it fits the model's context, without touching the session."""
    from .core.data import load_data

    data = load_data(spec)
    data.check_block_size(session.model_config.max_seq_len)
    return data


def _switch_data(session: Session, spec: str, data, hooks: Hooks) -> bool:
    rebuilt = session.use_data(spec, data)
    if rebuilt:
        hooks.notice(
            f"{data.name} has another vocabulary ({data.tokenizer.vocab_size} characters): "
            "the model was rebuilt, weights reset (step 0)"
        )
    return rebuilt


@command("params", "List the parameter tensors, their shapes and the total.")
def cmd_params(session: Session, args: dict, hooks: Hooks) -> ParamsResult:
    model = session.model
    rows = [(name, tuple(p.shape), p.numel()) for name, p in model.named_parameters()]
    return ParamsResult(rows, model.num_parameters())


# --- checkpoints -----------------------------------------------------------------------------------

DEFAULT_SAVE_NAME = "last"


@command("save", "Save the model, optimizer, training run and random state as a checkpoint.", params=[
    Param("name", str, help="checkpoint name: letters, digits, '.', '_', '-' (default last)", positional=True),
], interruptible=True)  # fmt: skip
def cmd_save(session: Session, args: dict, hooks: Hooks) -> SaveResult:
    name = (args["name"] or "").strip() or DEFAULT_SAVE_NAME
    _check_save_target(session, name)
    if not session.has_model:
        raise UserError("there is no model to save yet; :train one first, then :save")
    return save_session(session, name)


def _check_name(name: str) -> str:
    """core.checkpoint.check_name, with the name clipped so that a pasted novel stays one short line."""
    from .core.checkpoint import check_name
    from .core.errors import CheckpointError

    try:
        return check_name(name)
    except CheckpointError:
        raise CheckpointError(
            f"{_show(name)} is not a valid checkpoint name; use up to 100 letters, digits, '.', '_' or '-', "
            "not starting with '.' (for example run1)"
        ) from None


def _check_save_target(session: Session, name: str) -> None:
    from .core.errors import CheckpointError

    _check_name(name)
    directory = session.checkpoint_dir
    target = directory / name
    try:
        if directory.exists() and not directory.is_dir():
            raise CheckpointError(f"{directory} is a file, not a directory; choose another --checkpoint-dir")
        if target.exists() and not target.is_dir():
            raise CheckpointError(f"{target} is a file, not a checkpoint directory; remove it or choose another name")
    except OSError as e:
        raise CheckpointError(f"cannot use {_clip(str(target), 80)}: {e.strerror}; choose another --checkpoint-dir") from None


def save_session(session: Session, name: str) -> SaveResult:
    """Write the session's model, trainer and data as checkpoint `name` (atomic: see core.checkpoint).

    Ctrl-C reaches a save as KeyboardInterrupt (the command is interruptible); the engine removes what
    it wrote and re-raises, and this turns it into one line that says what is on disk now.
    """
    from .core.checkpoint import MANIFEST, save_checkpoint

    manifest = session.checkpoint_dir / name / MANIFEST
    before = _read_bytes(manifest)
    start = time.perf_counter()
    try:
        path = save_checkpoint(
            session.checkpoint_dir, name, session.model, session.trainer, session.data.tokenizer.vocab,
            session.data_spec,
        )
    except KeyboardInterrupt:
        now = _read_bytes(manifest)
        if now is None or now == before:  # the commit did not happen
            if before is None:
                raise UserError(f"save interrupted; no checkpoint {name} was written") from None
            raise UserError(f"save interrupted; the previous checkpoint {name} is unchanged") from None
        path = manifest.parent  # the interrupt came after the commit: the new checkpoint is complete
    return SaveResult(
        name=name, path=str(path), step=session.trainer.step, size_bytes=_checkpoint_size(path),
        seconds=time.perf_counter() - start, replaced=before is not None,
    )


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _checkpoint_size(path: Path) -> int:
    """The manifest plus the data files it names (old files a save is still removing do not count)."""
    from .core.checkpoint import MANIFEST

    raw = _read_bytes(path / MANIFEST) or b""
    try:
        files = json.loads(raw)["files"].values()
        return len(raw) + sum(int(entry["size"]) for entry in files)
    except (ValueError, KeyError, TypeError, AttributeError):
        return len(raw)


@command("load", "Load a checkpoint: weights, optimizer, training run, data and random state.", params=[
    Param("name", str, help="the checkpoint's name (:ls lists them)", positional=True),
])  # fmt: skip
def cmd_load(session: Session, args: dict, hooks: Hooks) -> LoadResult:
    from .core import checkpoint as ckpt

    name = (args["name"] or "").strip()
    if not name:
        names = [row.name for row in ckpt.list_checkpoints(session.checkpoint_dir) if row.error is None]
        if not names:
            raise UserError(f"there are no checkpoints in {session.checkpoint_dir} yet; :save NAME writes one")
        raise UserError(f"which checkpoint? give its name, e.g. :load {names[0]} (saved: {_clip(', '.join(names), 120)})")
    # Everything is read, checked and rebuilt into new objects first; the session changes only at the end.
    _check_name(name)
    checkpoint = ckpt.load_checkpoint(session.checkpoint_dir, name)
    data = _checkpoint_data(session, checkpoint)
    device = session.device
    model, trainer = ckpt.restore(checkpoint, data, device)
    if hooks.should_stop():  # Ctrl-C while reading: the session is still as it was
        raise UserError(f"load of {name} interrupted; nothing changed")
    session.adopt(checkpoint.data_spec, data, model, trainer)
    ckpt.restore_rng(checkpoint)
    evaluated = [h["val_loss"] for h in trainer.history if h.get("val_loss") is not None]
    return LoadResult(
        name=name, path=str(checkpoint.path), step=trainer.step, data_spec=checkpoint.data_spec,
        val_loss=evaluated[-1] if evaluated else None, model_config=checkpoint.model_config.to_dict(),
        run_remaining=trainer.run_remaining, n_params=model.num_parameters(),
        saved_at=checkpoint.meta.get("saved_at") if isinstance(checkpoint.meta.get("saved_at"), str) else None,
    )


def _checkpoint_data(session: Session, checkpoint):
    """The dataset the checkpoint was trained on: the session's own if it is the same, else loaded."""
    from .core.data import load_data
    from .core.errors import CheckpointError

    spec = checkpoint.data_spec
    if session._data is not None and session.data_spec == spec:
        return session._data  # restore() still checks that the vocabulary is the saved one
    try:
        data = load_data(spec)
        data.check_block_size(checkpoint.model_config.max_seq_len)
    except UserError as e:
        reason = str(e).split(";")[0]
        raise CheckpointError(
            f"checkpoint {checkpoint.name} was trained on {_clip(spec, 80)!r}, which cannot be loaded now "
            f"({_clip(reason, 120)}); put that data back to load it"
        ) from None
    return data


@command("ls", "List the saved checkpoints: step, val loss, data, size and date.", aliases=("checkpoints",))
def cmd_ls(session: Session, args: dict, hooks: Hooks) -> LsResult:
    from .core.checkpoint import list_checkpoints

    return LsResult(rows=list_checkpoints(session.checkpoint_dir), directory=str(session.checkpoint_dir))


# --- JSON for the shell's --json -------------------------------------------------------------------


def to_json(result) -> dict:
    """The result as a JSON-able dict (tuples become lists, non-finite floats null, types their name)."""
    if not dataclasses.is_dataclass(result):
        raise TypeError(f"to_json takes a command result, got {type(result).__name__}")
    return _jsonable(dataclasses.asdict(result))


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is CLEAR:
        return None
    if isinstance(value, type):
        return value.__name__
    if dataclasses.is_dataclass(value):
        return _jsonable(dataclasses.asdict(value))
    return str(value)
