"""From text to checked arguments: a REPL line or the shell's option values become typed, validated args.

A line is split into tokens (quotes, escapes), the tokens into options and free text, and each value
is converted to its Param's type and checked against its choices and size limits; the limits that
keep a typo from exhausting memory live here too. None of this runs a command, so it is kept apart
from the registry (registry.py) and from the commands themselves (commands.py).
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass

from .core.config import ModelConfig, TrainConfig
from .core.errors import UserError
from .registry import REGISTRY, Command, Param, _clip, find_command
from .session import GenSettings

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
