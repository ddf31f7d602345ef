"""From text to checked arguments: a REPL line or the shell's option values become typed, validated args.

A line is split into tokens (quotes, escapes), the tokens into options and free text, and each value
is converted to its Param's type and checked against its declaration: the type, the choices, the
valid range and the limit on what a person may type (for options made from a setting, the setting's
own `check`). None of this runs a command; the front door (dispatch.py) does.

Each typed value is checked once: `parse_line` converts and checks what it parses and hands over
`CheckedArgs`, which `prepare_args` takes as they are; any other arguments (the shell's option
values, a test's or a script's dict) are converted and checked by `prepare_args`.

Whole numbers may be written the way people in this field write them: `1000`, `1e3`, `10_000`,
`10k`, `2.5M` (k = thousand, M = million, B = billion), as long as the value is whole.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from .core.errors import UsageError, UserError
from .core.numbers import whole_number  # (parsing.whole_number: where the options' readers found it)
from .registry import Command, Param, Registry, clip
from .syntax import cmd as phrase_command  # (`cmd` names a parsed Command here)
from .syntax import OWN_SWITCHES, REPL, named, option, setting_text, syntax, without_setting

# --- values ------------------------------------------------------------------------------------


class _Clear:
    """The value of `key=none` for a nullable setting: "clear it", unlike None ("not given")."""

    def __repr__(self) -> str:
        return "none"


CLEAR = _Clear()

# short names of choices, where one has them: `dtype=bf16`, as :device's bf16 column writes it
CHOICE_ALIASES = {"bf16": "bfloat16", "fp32": "float32", "f32": "float32"}
BOOL_WORDS = {"on": True, "true": True, "yes": True, "1": True, "off": False, "false": False, "no": False, "0": False}


def _one_edit(a: str, b: str) -> bool:
    """Whether a and b differ by one letter (one added, dropped or changed) or two neighbours swapped (ture, true)."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        apart = [k for k, (x, y) in enumerate(zip(a, b)) if x != y]
        return len(apart) == 1 or (len(apart) == 2 and apart[1] == apart[0] + 1
                                   and a[apart[0]] == b[apart[1]] and a[apart[1]] == b[apart[0]])
    short, long = sorted((a, b), key=len)
    return any(long[:k] + long[k + 1:] == short for k in range(len(long)))


def near_bool(flag: str, word: str, text_way: str = "") -> None:
    """UserError where the word after an on/off option written alone (`--cache of`) is one letter from an on/off word
    of three letters or more: the option was read as on, and the word joined the text (`gen hello --cache of`
    generated from "hello of", with the cache on). Another word is text, as the option alone is on. Not the
    two-letter words: "now" and "one" are a letter from "no" and "on", and often a text's first word. `text_way`:
    how the front end keeps such a word as text, said as the other fix."""
    lower = word.lower()
    close = next((w for w in BOOL_WORDS if w.isalpha() and len(w) > 2 and _one_edit(lower, w)), None)
    if close is not None:
        other = f"; {text_way}" if text_way else ""
        raise UserError(f"{flag} {word}: did you mean {flag} {close}? An on/off option takes on or off (or "
                        f"true/false, yes/no, 1/0){other}")


_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
# a key as typed, in any script: `lér=0.1` is the key lér and its value (said "unknown option 'lér=0.1'", no "did you
# mean lr"), and `:gen températur=0.5` an option misspelt, not a prompt refused for its 'é'
_ANY_KEY = re.compile(r"[^\W\d][\w-]*")
# what a shell joins commands with: here each line is one command (`:set lr=0.02; n_layers=2` read '0.02;' as lr's)
CHAINS = (";", "&&", "||", "|", "&")


def chained(first: str, op: str, last: bool = False) -> UserError:
    """The refusal of commands joined on one line by `op`; `first`: the line's first command, as typed; `last`: `op`
    ends the line (`:set lr=0.02;`), with no command after it."""
    if op == "\\":
        return UserError(f"one command a line: a \\ at its end continues none; type the command on one line: {first}")
    if last:
        return UserError(f"one command a line, and {op} ends none: {first}")
    return UserError(f"one command a line: {op} does not chain commands; type them one after the other, "
                     f"first {first}")


def show_value(value) -> str:
    """A value as a message shows it: text quoted and clipped, the rest as Python writes it."""
    return repr(clip(value)) if isinstance(value, str) else repr(value)


def convert(param: Param, raw: str):
    """Parse the text of an option value to the param's type, then check it (raises UserError)."""
    text = raw.strip()
    if param.type is not str and (more := re.fullmatch(r"([^,\s]*),\s*([A-Za-z_][\w-]*=.*)", text)):
        # `:set lr=1e-3,steps=50`: "lr must be a number, got '1e-3,steps=50'" said nothing of the comma
        raise UserError(f"{param.name}={more.group(1)} and {more.group(2)} go apart, each key=value its own word: "
                        f"{param.name}={more.group(1)} {more.group(2).replace(',', ' ')}")
    if param.type is not str and len(text) > 1 and text.endswith(","):  # `:set lr=0.001, steps=50`
        raise UserError(f"{param.name}={text} ends with a comma: settings go apart by spaces alone, "
                        f"{param.name}={text.rstrip(',')}")
    if param.nullable and text.lower() == "none":
        return CLEAR
    if not text and param.type is not str:  # `:set d_model=` and Enter: "must be a whole number, got ''" had no fix
        raise needs_a_value(param)
    if param.type is bool:
        value = BOOL_WORDS.get(text.lower())
        if value is None:
            raise UserError(f"{param.name} must be on or off (on|off|true|false|yes|no|1|0), got {show_value(raw)}")
    elif param.type is int:
        value = whole_number(param.name, text, or_none=param.nullable)
    elif param.type is float:
        try:
            value = float(text)
        except ValueError:
            kind = "a number or none" if param.nullable else "a number"
            comma = re.fullmatch(r"([+-]?\d*),(\d+)", text)  # `0,5`: a decimal comma, as much of Europe writes it
            hint = f"; with a decimal point: {comma.group(1) or '0'}.{comma.group(2)}" if comma else ""
            if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", text):  # `1,000`: a thousands separator, or a decimal comma
                hint = (f"; without commas: {text.replace(',', '')}, or with a decimal point: "
                        f"{text.replace(',', '.', 1)}")
                hint = hint if text.count(",") == 1 else f"; without commas: {text.replace(',', '')}"
            if text.lower() in ("off", "none") and "(0: off)" in param.spec.help:  # grad_clip=off: its help's word
                hint = f"; {param.name}=0 is off"
            raise UserError(f"{param.name} must be {kind}, got {show_value(raw)}{hint}") from None
        _refuse_out_of_range(param.name, text, value)
        value += 0.0  # -0 is 0: `temperature=-0` was taken as -0.0 and shown as "0.8 -> -0"
    else:
        value = shell_unescaped(raw) if param.path else raw  # `:compare data=my\ file.txt`, as :data's word is
    # a number refused as typed (`lr=0`: "got 0", not the float it became, "got 0.0")
    return check_value(param, value, typed=text if param.type is float and isinstance(value, float) else None)


def _convert_as_typed(param: Param, raw: str, typed: str, whole: str | None = None):
    """convert, with a refusal naming the option as the user typed it and the setting it stands for: `:step
    seed=-3` says "seed (gen_seed) must be ...", where the bare name gen_seed was a word the user never typed.
    `whole`: the line without a chain's operator after the value, where words follow it (`:gen n=3; hi`)."""
    try:
        return convert(param, raw)
    except UserError as e:
        stem = raw.rstrip().rstrip(";&|")
        if stem != raw.rstrip() and stem:  # `steps=5;`: the rest of a chain, not of the value
            try:
                convert(param, stem)
            except UserError:
                pass
            else:
                op = raw.rstrip()[len(stem):]
                line = f"; the line: {whole}" if whole else ""  # `the value is n=3` alone gave no line to run
                raise UserError(f"{typed}={raw.rstrip()} ends with {op}: one command a line, {op} does not chain "
                                f"commands; the value is {typed}={stem}{line}") from None
        if typed == param.name or typed not in param.aliases or not str(e).startswith(param.name):
            raise
        raise type(e)(f"{typed} ({param.name}){str(e)[len(param.name):]}") from None


def _refuse_out_of_range(name: str, text: str, value: float) -> None:
    """`1e309` and `1e-400` as typed: a float reads them as inf and 0.0, which the checks after would name instead
    of what was typed ("lr must be positive, got 0.0"). Typed `inf`, `nan` and zeros go on to be refused there."""
    mantissa = re.split(r"[eE]", text, maxsplit=1)[0]
    if not math.isfinite(value) and re.search(r"\d", mantissa):
        raise UserError(f"{name} is far too large ({show_value(text)}); use a smaller value")
    if value == 0 and re.search(r"[1-9]", mantissa):
        raise UserError(f"{name} is too small to tell from 0 ({show_value(text)}); use a larger value")


def needs_a_value(param: Param, pairs: bool = False) -> UserError:
    """The refusal of an option given an empty value (`:set d_model=`), with values it takes: its first choice, or
    the first two Tab offers for it (tokenizer: char, bpe:512), or its setting's default, else its placeholder (save:
    --save NAME; it said "--save ..."), in the front end's own spelling (`--prompt ""` from the shell was told "e.g.
    prompt=..."); `pairs`: the option is a pair of a command that takes KEY=VALUE pairs (:set), in the shell too
    (`--set d_model=` was told "e.g. --d-model 128")."""
    suggested = param.setting.suggestions[:2] if param.setting is not None else ()
    default = param.setting.default if param.setting is not None and param.type is not str else None
    examples = (param.choices[:1] if param.choices else suggested or ((default,) if default is not None else ())
                or ((_example(param),) if param.type is not str else (param.metavar,)))
    spelled = (lambda v: f"{param.name}={setting_text(v)}") if pairs else (lambda v: option(param.name, v))
    return UserError(f"{param.name} needs a value, e.g. " + " or ".join(map(spelled, examples)))


def check_value(param: Param, value, typed: str | None = None):
    """Check an already typed value against the param's declaration (core.config.SettingSpec.check):
    its type, finiteness, choices, range and typing limit. One implementation for every option. `typed`: the
    value as typed, which a refusal quotes."""
    if value is CLEAR:
        if not param.nullable:
            raise UserError(f"{param.name} cannot be none; give a value")
        return value
    if param.type is bool and isinstance(value, str):
        return convert(param, value)  # `--cache off` from the shell arrives as text
    if param.type is str and isinstance(value, str) and not param.positional and not param.blank and not value.strip():
        raise needs_a_value(param)
    if param.choices and isinstance(value, str) and value not in param.choices:  # RMSNorm, AdamW: as papers write them
        value = next((c for c in param.choices if isinstance(c, str) and c.lower() == value.strip().lower()), value)
        # a choice's short name, as :device's bf16 column writes it (`dtype=bf16` was refused beside it)
        alias = CHOICE_ALIASES.get(value.strip().lower())
        if alias is not None and alias in param.choices:
            value = alias
    spec = param.spec
    value = spec.check(value, typed)
    spec.check_limit(value)
    return float(value) if param.type is float and value is not None else value


def refuse_a_setting(command: Command, key: str, value: str | None, registry: Registry | None,
                     rest: list[str] | tuple = ()) -> None:
    """A setting's name given to a command that takes no such option (`:train n_layers=2`, `minitf train
    dropout=0.1`): said to be a setting, with how to give it, `:set KEY=VALUE` then the command (the REPL) or the
    command with `--set KEY=VALUE` (or the shell's own option for it, `--checkpoint-dir`) before it (the shell);
    `rest`: the rest of the command's words as typed, which the line keeps (`steps=2` went missing), but for those
    that are settings too and no options of the command, which go into the same :set (the line given for one such
    word was refused again for the next). "Did you mean layer?" sent such a user to watch='s layer, and "prompt"
    answered dropout. Nothing where the key is no setting, no value was typed, or the command takes no options at
    all (:load, whose checkpoint brings its settings)."""
    from .syntax import SHELL, given_before, syntax

    setter = registry.names().get("set") if registry is not None else None
    param = (setter.param_named(key) if setter is not None and setter is not command and command.options
             and value else None)  # (a command of no options, :load NAME, says so: its words are no settings)
    if param is None or param.setting is None or param.refusal is not None:
        return
    if key in command.elsewhere:  # `minitf kv seed=1` was told `--set seed=1 kv`, where seed decides none of its tokens
        with without_setting(key):
            raise UsageError(f"{key} is not an option of {named(command.name)}: {command.elsewhere[key]()}")
    _refuse_a_setting_of_another(command, key, param, value, registry, rest)
    typed, pairs, kept = [key], {param.name: value}, []
    for word in rest:
        other_key, eq, other_value = word.partition("=")
        other = (setter.param_named(other_key) if eq and other_value and _KEY.fullmatch(other_key)
                 and command.param_named(other_key) is None and param.setting.shell_option is None else None)
        if (other is None or other.setting is None or other.refusal is not None or other.name in pairs
                or other.setting.shell_option is not None):  # (the shell's own option: a line of its own)
            kept.append(word)
            continue
        typed.append(other_key)
        pairs[other.name] = other_value
    after = " " + " ".join(kept) if kept else ""
    if syntax() == SHELL:
        option = param.setting.shell_option
        first = (given_before(command.name, option, value) if option else
                 given_before(command.name, "--set", " ".join(f"{k}={v}" for k, v in pairs.items()))) + after
    else:
        first = f"{phrase_command('set', **pairs)}, then :{command.name}{after}"
    # the command by its name: "not an option of minitf --checkpoint-dir D --set d_model=64 lrfind" named a line
    what = (f"{key} is a setting, not an option" if len(typed) == 1 else
            f"{', '.join(typed[:-1])} and {typed[-1]} are settings, not options")
    raise UsageError(f"{what} of {named(command.name)}: {first}")


def _refuse_a_setting_of_another(command: Command, key: str, param: Param, value: str, registry: Registry,
                                 rest: list[str] | tuple) -> None:
    """A setting of a section (generation: n, temperature) none of whose settings the command takes, and which other
    commands take as options of their own (:gen's n=): it is theirs, and `:set n=5, then :train` changed nothing of
    the run. Said with them, and with the command's first option, its main one, which was more likely meant (steps=5,
    the run's length)."""
    from .core.config import GenConfig

    section = param.setting.section
    owners = [other for other in registry.values() if other is not command and not other.pairs
              and any(p.setting is not None and p.setting.name == param.setting.name for p in other.options)]
    if (section != GenConfig.kind or not owners
            or any(p.setting is not None and p.setting.section == section for p in command.options)):
        return
    if any((eq or key.startswith("--")) and _KEY.fullmatch(key.lstrip("-"))
           and command.param_named(key.lstrip("-")) is None for key, eq, _ in (word.partition("=") for word in rest)):
        return  # `:train n=5 n_layers=2`: settings besides, which refuse_a_setting's :set takes (a line kept them)
    first = command.options[0]
    after = "".join(f" {word}" for word in rest)
    owner = owners[0].name
    theirs = f"{key} is a {section} setting, {named(owner)}'s ({phrase_command(owner, **{key: value})})"
    given = {p.name for word in rest if (p := command.param_named(word.lstrip("-").partition("=")[0])) is not None}
    what = first.help.split(" (")[0]  # its help's first words: "length of a new run"
    if first.name in given:  # (`:train steps=3 n=5`: the line without it)
        raise UsageError(f"{theirs}, not one of {named(command.name)}: {phrase_command(command.name)}{after}")
    try:
        near = convert(first, value)
    except UserError:
        raise UsageError(f"{theirs}, not one of {named(command.name)}, whose {option(first.name)} is the {what}: e.g. "
                         f"{phrase_command(command.name, **{first.name: _example(first)})}{after}") from None
    raise UsageError(f"{theirs}, not one of {named(command.name)}; did you mean "
                     f"{phrase_command(command.name, **{first.name: near})}{after}? ({first.name}: {what})")


def _where(command: Command) -> str:
    """A command as a message names it: `minitf train`, not the session's whole line; `--set`, as the shell gives
    :set's pairs (`minitf --set device=x` is "not an option of --set")."""
    return phrase_command(command.name) if command.pairs else named(command.name)


class CheckedArgs(dict):
    """{option name: value} that parse_line has converted and checked already: prepare_args takes them as they are."""


def prepare_args(command: Command, args: dict) -> dict:
    """Every param of the command with its default, overridden by the given (checked) values.

    Values may be typed or text to parse; None means "not given". CheckedArgs (from parse_line)
    are not checked again.
    """
    values = {p.name: p.default for p in command.params}
    if isinstance(args, CheckedArgs):
        values.update(args)
        return values
    positional = command.positional
    for raw_key, value in args.items():
        key = raw_key.replace("-", "_").lower()
        param = positional if positional is not None and key == positional.name else command.find_param(key)
        if value is None:
            continue
        if isinstance(value, str) and param.type is not str:
            value = _convert_as_typed(param, value, key)
        elif isinstance(value, str) and param.path:
            value = check_value(param, shell_unescaped(value))
        else:
            value = check_value(param, value)
        values[param.name] = value
    return values


# --- parsing a REPL line -----------------------------------------------------------------------


@dataclass
class _Token:
    text: str
    quoted_from: int | None  # index in text of the first character that was inside quotes
    start: int | None = None  # where the token's characters begin and end in the line as typed (None: made here)
    end: int | None = None


_PLAIN = re.compile(r"[^\s\"']+")
# A backslash before a space joins the two, as a shell's does (`my\ file.txt`, the form its Tab completion writes): an
# option's value kept only `my\` (`:compare data=my\ file.txt`); a path's value is read unescaped (shell_unescaped).
# Only where the word so joined names a file or folder (_joins): a word ending in a backslash before the next was a
# word of its own before, and stays one (`:compare data=C:\d\ steps=3`, `:save C:\ckpts\ force`); so is one before
# the line's end (`:tok a\ `), and every one on Windows, where a backslash is the path's.
_JOINED = re.compile(r"(?:\\ (?=[^\s\"'])|[^\s\"'])+")
_KEYED = re.compile(r"(?:--)?[A-Za-z_][\w-]*=")  # the `key=` or `--key=` before an option's value
_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
# A Windows path in double quotes, as Explorer's "Copy as path" puts it (C:\Users\me\new notes.txt, \\server\share\x,
# hf:C:\models\gpt2), given to a command that takes a path (Param.path): its backslashes are the path's, not escapes.
# `:data "C:\Users\me\new notes.txt"` was read with a newline for its \n ("no such file"), "C:\temp\x.txt" with a
# tab. A path cannot hold a '"', so the next one ends it. A prompt's escapes stay: `:gen "Q:\nA:"` has its newline.
WINDOWS_PATH = re.compile(r'(?:hf:)?(?:[A-Za-z]:\\|\\\\[^\\"\s]+\\)')


class UnclosedQuote(UserError):
    """A quote the line never closes, at index `at` of the text tokenized."""

    def __init__(self, message: str, at: int):
        super().__init__(message)
        self.at = at


def _tokenize(text: str, windows_paths: bool = False, literal_at: frozenset = frozenset()) -> list[_Token]:
    """Split on whitespace; '...' and "..." group text and mark it quoted. In double quotes
    \\n, \\t, \\" and \\\\ are escapes, except in a Windows path where the command takes one (`windows_paths`:
    WINDOWS_PATH); single quotes take everything literally. An apostrophe between two letters or digits (don't) opens
    no quote. `literal_at`: the indices of quotes that are characters like any other (unclosed ones). Each token
    knows its span in `text`, from which a command's prose is read as typed (_text_as_typed)."""
    tokens: list[_Token] = []
    buf: list[str] = []
    length = 0
    quoted_from = None
    in_token = False
    began = 0
    unjoined = 0  # the end of the backslash-joined pieces found to name nothing: each a word
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if not in_token and not c.isspace():
            began = i
        if c.isspace():
            if in_token:
                tokens.append(_Token("".join(buf), quoted_from, began, i))
                buf, length, quoted_from, in_token = [], 0, None, False
            i += 1
        elif c in "\"'" and i in literal_at:
            buf.append(c)
            length += 1
            in_token = True
            i += 1
        elif c == "'" and 0 < i < n - 1 and text[i - 1].isalnum() and text[i + 1].isalnum():
            # an apostrophe inside a word (`:gen don't stop`, `It's`) is a character of the text: as a quote it left
            # the line "unclosed", and closing it as told dropped the apostrophe from the prompt without a word
            buf.append(c)
            length += 1
            in_token = True
            i += 1
        elif c in "\"'":
            in_token = True
            if quoted_from is None:
                quoted_from = length
            j = i + 1
            literal = c == "'" or (windows_paths and WINDOWS_PATH.match(text, j) is not None)
            while True:
                stop = text.find(c, j) if literal else _next_special(text, j)
                if stop < 0:
                    raise UnclosedQuote(f"unclosed quote {c} in the line; add the closing {c}", i)
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
            if i >= unjoined and (joined := _JOINED.match(text, i)).end() > m.end():
                if _joins("".join(buf) + joined.group(0)):
                    m = joined
                else:  # its pieces are words of their own, tried once (a line of 10,000 `a\ ` stays linear)
                    unjoined = joined.end()
            chunk = m.group(0)
            buf.append(chunk)
            length += len(chunk)
            in_token = True
            i = m.end()
    if in_token:
        tokens.append(_Token("".join(buf), quoted_from, began, n))
    return tokens


def _joins(word: str) -> bool:
    r"""Whether `word`, whose backslash-spaces join its pieces, is one word: its value (after a `key=`) names a file
    or folder read as a shell reads it (shell_unescaped; never on Windows)."""
    value = word[_KEYED.match(word).end():] if _KEYED.match(word) else word
    return shell_unescaped(value) != value


def _text_as_typed(tokens: list[_Token], raw: str) -> str | None:
    """A command's prose (a prompt, a text) as typed: the line from its first word to its last, every space and
    quote kept, where its words stand together (pieces apart, around options, are joined by a space); a text wholly
    in quotes is what the quotes hold (escapes read). None where a word has no span (made by the parser). Read word
    by word, `:score say "hi" to   me` scored 'say hi to me', and `:tok a  b` one space."""
    if any(t.start is None for t in tokens):
        return None
    if len(tokens) == 1 and _wholly_quoted(tokens[0], raw):
        return tokens[0].text
    pieces, start = [], tokens[0].start
    for token, after in zip(tokens, tokens[1:] + [None]):
        if after is not None and not raw[token.end:after.start].strip():
            continue  # the next word follows this one with only spaces between
        pieces.append(raw[start:token.end])
        if after is not None:
            start = after.start
    return " ".join(pieces)


def _wholly_quoted(token: _Token, raw: str) -> bool:
    """Whether `token` is a text wholly in quotes in `raw`: its span opens and closes with one quote mark."""
    return (token.quoted_from == 0 and token.start is not None and token.end - token.start > 1
            and raw[token.start] in "\"'" and raw[token.end - 1] == raw[token.start])


def _next_special(text: str, start: int) -> int:
    """Index of the next '"' or '\\' at or after start, or -1 (a search, so a long line stays linear)."""
    m = _DQ_SPECIAL.search(text, start)
    return m.start() if m else -1


_DQ_SPECIAL = re.compile(r'["\\]')


MAX_LINE = 200_000  # characters: far above any context window here, far below what floods a terminal


PROMPT = "minitf> "  # the REPL's prompt
# The prompt before a command, as the README's and the docs' sessions show it: a line copied from them with it trained
# nothing, and was text for :gen instead (on pydoc, 200 characters generated from "minitf> :train"). Dropped, as
# IPython drops a pasted ">>> ", before a command only: text that starts with "minitf>" stays text.
COPIED_PROMPT = re.compile(r"\s*" + re.escape(PROMPT.strip()) + r"\s+(?=:)")


def parse_line(line: str, registry: Registry) -> tuple[Command, dict]:
    """Parse a REPL line into (command, args). Raises UserError.

    `:name key=value --key value --key=value --flag text`. Quoted tokens are always text; an
    unquoted key=value must name an option of the command. A line that does not start with ':'
    is the text of the registry's plain-text command (`:gen`), verbatim.
    """
    if (copied := COPIED_PROMPT.match(line)) is not None:  # `minitf> :train`, copied from the README with its prompt
        line = line[copied.end():]
    stripped = line.lstrip()
    if len(line) > MAX_LINE:
        raise UserError(f"the line is {len(line):,} characters, more than the {MAX_LINE:,} a line may have; "
                        "shorten it (a prompt longer than the context window is cut to its end anyway)")
    bare = registry.bare_word(line)
    if bare is not None:
        return bare, CheckedArgs()
    if not stripped.startswith(":"):
        command = registry.plain_text_command
        if command is None or command.positional is None:
            raise UserError("commands start with ':'; type :help to list them")
        _refuse_slash(stripped, registry, command)
        return command, CheckedArgs({command.positional.name: check_value(command.positional, line)})
    body = stripped[1:]
    name = body.split(None, 1)[0] if body.strip() else ""
    if not name:
        raise UserError("empty command after ':'; type :help to list the commands")
    asked = _help_asked(registry, name, body)
    if asked is not None:
        return asked
    try:
        cmd = registry.find(name)
    except UserError as e:  # `:param x: the value`, a docstring's line: text that starts with ':' is :gen's to take
        joined = re.match(r"([^;&|]+)([;&|]+)", name)  # `:ls; :config`: "unknown command :ls;"
        if joined is not None and joined.group(1).lower() in registry.names():
            last = name == joined.group(0) and not body.lstrip()[len(name):].strip()
            raise chained(f":{joined.group(1)}", joined.group(2), last) from None
        plain = registry.plain_text_command
        words = body.split()[1:]  # a line of text has words after its first; `:hel`, `:trian steps=5` are commands
        if plain is None or plain.positional is None or not words or any("=" in w or w[:2] == "--" for w in words):
            raise
        raise UserError(f"{e}; to continue the line as text: :{plain.name} {clip(stripped)}") from None
    rest = body.lstrip()[len(name) :]
    literal: frozenset = frozenset()
    # A quote inside a word of a prose that no quote closes is a character of the text (`:tok print("x`), as typed,
    # and so is one after a bare `--`, after which the line is the text as typed (`:gen -- say "hi`); one that opens a
    # word before it is a quote left open; quotes that close stay quotes (`temperature="0.5"`).
    while True:
        try:
            tokens = _tokenize(rest, windows_paths=cmd.takes_a_path, literal_at=literal)
            break
        except UnclosedQuote as e:
            if not reads_prose(cmd) or e.at in literal:
                raise
            if (e.at > 0 and not rest[e.at - 1].isspace()) or _after_dashes(cmd, rest, e.at, literal):
                literal |= {e.at}
                continue
            mark = rest[e.at]  # (one line, in a terminal of 100 columns)
            raise UnclosedQuote(f"unclosed quote {mark}: add the closing {mark}, or keep it as text after --: "
                                f"{clip(_kept_as_text(cmd, rest, literal | {e.at}), 200)}", e.at) from None
    if cmd.positional is None or cmd.positional.name not in PROSE:  # (a text's `;` is text: `:gen a; b`, :patch's)
        _refuse_chained(cmd, _without_comment(cmd, tokens), rest)
    helper = _helper(registry)
    if helper is not None and helper is not cmd and _asks_help(cmd, tokens):
        words = _without_comment(cmd, tokens)
        asked = next((t for t in words if t.text == "-h" and t.quoted_from is None), None)
        if asked is not None and asked.start is not None and len(words) > 1:  # `:set lr=0.1 -h`: lr=0.1 unset
            without = f"{rest[:asked.start].rstrip()} {rest[asked.end:].strip()}".rstrip()
            _refuse_more_than_help(helper, cmd, "-h", f":{cmd.name}{without}")
        return helper, CheckedArgs({helper.positional.name: check_value(helper.positional, cmd.name)})
    return cmd, _parse_args(cmd, tokens, registry, raw=rest)


def _after_dashes(cmd: Command, rest: str, at: int, literal: frozenset) -> bool:
    """Whether index `at` of `rest` comes after a bare `--`, from which on the line is text as typed."""
    try:
        before = _tokenize(rest[:at], windows_paths=cmd.takes_a_path, literal_at=literal)
    except UserError:
        return False
    return any(t.text == "--" and t.quoted_from is None for t in before)


def _kept_as_text(cmd: Command, rest: str, literal: frozenset) -> str:
    """The line that keeps `rest`'s unclosed quotes (`literal`, and any after) in the text as typed: its options
    before `--`, the text after it (`:gen 'tis n=5` is `:gen n=5 -- 'tis`)."""
    while True:
        try:
            tokens = _tokenize(rest, windows_paths=cmd.takes_a_path, literal_at=literal)
            break
        except UnclosedQuote as e:
            literal |= {e.at}
    return _whole_line_as_text(cmd, tokens, -1, rest)


def _refuse_chained(cmd: Command, tokens: list[_Token], rest: str) -> None:
    """Commands joined on one line, as a shell joins them (`:set lr=0.02 ; :set n_layers=2`, `:train steps=5 &&
    :gen`, `:set lr=0.02; n_layers=2`, a `\\` that would continue the line): a UserError with the line's first
    command as typed. Before, `;` was read as a key to show, or as the end of a value ("got '0.02;'"). A name or a
    path may hold them (`:data Tom & Jerry.txt`, `:save a & b`): there only a command after them (`:data sort; :gen`)
    chains, and first :data Tom would load another file."""
    positional = cmd.positional
    named = positional is not None and (positional.path or positional.name in NAMES)
    for k, token in enumerate(tokens):
        if token.quoted_from is not None or token.start is None:
            continue
        text = token.text
        if text in CHAINS or (text == "\\" and k == len(tokens) - 1):
            cut, op = token.start, text
        elif len(text) > 1 and text.endswith(";") and (k < len(tokens) - 1 or _option_key(token) is not None):
            cut, op = token.end - 1, ";"
        else:
            continue
        if named and text != "\\" and not (k + 1 < len(tokens) and tokens[k + 1].text.startswith(":")):
            continue
        raise chained(f":{cmd.name}{rest[:cut].rstrip()}", op, not rest[token.end:].strip())


def _helper(registry: Registry) -> Command | None:
    """The command about the others (:help), whose text names one."""
    return next((c for c in registry.values() if c.about_commands and c.positional is not None), None)


def _help_asked(registry: Registry, name: str, body: str) -> tuple[Command, CheckedArgs] | None:
    """`:train?`: a question about the command, its help (it said "unknown command :train?; did you mean :train?")."""
    stem = name.rstrip("?")
    helper = _helper(registry)
    if helper is None or stem == name or not stem or stem.lower() not in registry.names():
        return None
    cmd = registry.find(stem)
    after = body.lstrip()[len(name):].strip()
    if after and not after.startswith("#"):  # `:train? steps=5`: the help alone, its steps=5 gone unsaid
        _refuse_more_than_help(helper, cmd, f":{name}", f":{cmd.name} {after}")
    return helper, CheckedArgs({helper.positional.name: check_value(helper.positional, cmd.name)})


def _refuse_more_than_help(helper: Command, cmd: Command, asked: str, line: str) -> None:
    """`:gen? hello world`, `:set lr=0.1 -h`: a question for the help with more words, which the help showed and
    dropped unsaid (the setting unset). A UserError with both lines: the help's, and the command's without it."""
    raise UserError(f"{asked} asks for the help and runs nothing more: {phrase_command(helper.name, cmd.name)} shows "
                    f"the help, {line} runs the command")


def _asks_help(cmd: Command, tokens: list[_Token]) -> bool:
    """Whether the line asks for the command's help with `-h`, as the shell's `minitf train -h` does: anywhere before a
    bare `--`, where no option of the command is -h, and for a command that reads text, as the whole of it (`:gen -h`;
    `:gen -- -h` generates from "-h"; a text of a pair too: `:patch the -h flag vs the -x flag` is :patch's)."""
    if any(p.short == "h" for p in cmd.options):
        return False
    if cmd.positional is not None and cmd.positional.name in PROSE:
        return len(tokens) == 1 and tokens[0].text == "-h" and tokens[0].quoted_from is None
    for token in tokens:
        if token.quoted_from is None and token.text == "--":
            return False
        if token.quoted_from is None and token.text == "-h":
            return True
    return False


def shell_text(cmd: Command, words: list[str]) -> str:
    """The text of a one-shot command from the shell's words, as the REPL reads the same text: a prose text wholly
    in quotes, one word that still holds them (`minitf gen '"Q:\nA:"'`), is what the quotes hold, escapes read;
    `minitf gen '"a\nb"'` was the text `"a\nb"`, its backslash "not in the vocabulary"."""
    if len(words) == 1 and reads_prose(cmd):
        word = words[0]
        try:
            tokens = _tokenize(word)
        except UserError:  # an unclosed quote: the word as it is
            tokens = []
        if len(tokens) == 1 and _wholly_quoted(tokens[0], word) and (tokens[0].start, tokens[0].end) == (0, len(word)):
            return tokens[0].text
    return cmd.positional.positional_text(words)


def reads_prose(cmd: Command) -> bool:
    """Whether the command's text is prose (a prompt, a text to read), taken as typed (_text_as_typed)."""
    return cmd.positional is not None and cmd.positional.name in PROSE and not cmd.positional.pair


def _refuse_slash(line: str, registry: Registry, plain: Command) -> None:
    """`/help`, `/train steps=5`, `\\q`: a command as other tools write it (ollama's and chat apps' '/', psql's '\\'),
    not a prompt: a UserError with the line as minitf reads it. A '/' before no command's name is text (`/usr`)."""
    word, _, rest = line.partition(" ")
    if line[:1] not in ("/", "\\") or len(word) < 2:
        return
    name = word[1:].lower()
    command = registry.names().get(name) or registry.bare_word(name)
    if command is None:
        return
    shown = name if name in registry.names() else command.name
    raise UserError(f"commands start with ':', not '{line[0]}': :{shown}{' ' + rest if rest else ''} "
                    f"(to continue the line as text: :{plain.name} {clip(line)})")


def _option_key(token: _Token) -> tuple[str, str | None] | None:
    """(key, value or None) if the token is an option (`--key[=value]` or `key=value`), else None."""
    text, q = token.text, token.quoted_from
    unquoted = text if q is None else text[:q]
    if unquoted.startswith("--") and len(unquoted) > 2:
        key, eq, value = text[2:].partition("=")
        if eq and q is not None and q < 2 + len(key):
            return None  # the '=' sits inside quotes: text
        if _ANY_KEY.fullmatch(key):
            return key, (value if eq else None)
        return None
    eq_at = unquoted.find("=")
    if eq_at > 0 and _ANY_KEY.fullmatch(text[:eq_at]):
        return text[:eq_at], text[eq_at + 1 :]
    return None


# A `#` word after a command begins a comment to the end of the line (`:set lr=0.01  # faster`, in a script or
# typed), as a line starting with `#` is one, except where the command reads prose (`:gen # a heading`, `:tok #x`:
# a `#` there is text to read) and as the first word of a name or a path (`:report #3.html`), which may start with it.
PROSE = ("prompt", "text", "prompts")
NAMES = ("name", "path")


def _without_comment(cmd: Command, tokens: list[_Token]) -> list[_Token]:
    """`tokens` up to a comment's first word, if the line has one (PROSE, NAMES)."""
    positional = cmd.positional
    if positional is not None and positional.name in PROSE:
        return tokens
    for at, token in enumerate(tokens):
        if token.quoted_from is None and token.text.startswith("#"):
            first_name = positional is not None and positional.name in NAMES and not any(
                _option_key(t) is None for t in tokens[:at])
            if not first_name:
                return tokens[:at]
    return tokens


def without_comment(line: str, registry: Registry) -> str:
    """`line` less the comment that parse_line drops (`:set lr=0.01  # café note`), by the command's own rule
    (_without_comment); the line as it is where it names no command or its quotes do not close. A script's bytes
    that are not UTF-8 in a comment are no bytes of the command: it ran, the comment ignored, before they were said."""
    stripped = line.lstrip()
    body = stripped[1:]
    name = body.split(None, 1)[0] if stripped.startswith(":") and body.strip() else ""
    try:
        cmd = registry.find(name) if name else None
        rest = body.lstrip()[len(name):]
        tokens = _tokenize(rest, windows_paths=cmd.takes_a_path) if cmd is not None else []
    except UserError:
        return line
    kept = len(_without_comment(cmd, tokens)) if cmd is not None else 0
    if kept == len(tokens) or tokens[kept].start is None:
        return line
    return line[:len(line) - len(rest) + tokens[kept].start]


def in_comment(cmd: Command, words: list[str]) -> bool:
    """Whether the last of `words` (typed after `cmd`'s name, as split on spaces) sits in the line's comment, which
    the parser drops: Tab there has nothing to complete (`:train  # st<Tab>` offered steps=)."""
    tokens = [_Token(word, 0 if word[:1] in "\"'" else None) for word in words]
    return len(_without_comment(cmd, tokens)) < len(tokens)


def _parse_args(cmd: Command, tokens: list[_Token], registry: Registry | None = None,
                raw: str | None = None) -> CheckedArgs:
    """The arguments of `tokens`; `raw`: the line they came from, after the command's name, from which a prose is
    read as typed."""
    tokens = _without_comment(cmd, tokens)
    args = CheckedArgs()
    text: list[str] = []
    text_tokens: list[_Token] = []  # the text's words themselves, with their spans in `raw`
    loose: list[str] = []  # the words of the text that were neither quoted nor after `--`
    positional = cmd.positional
    given_as: dict[str, str] = {}  # each option given, as typed (`lr=0.02`, `--steps 5`)
    i = 0
    only_text = False
    while i < len(tokens):
        token = tokens[i]
        at_key = i
        i += 1
        if only_text:
            text.append(token.text)
            text_tokens.append(token)
            continue
        if token.text == "--" and token.quoted_from is None:
            only_text = True  # everything after a bare `--` is text
            continue
        short = next((p for p in cmd.options if p.short and token.quoted_from is None and token.text == f"-{p.short}"),
                     None)
        typed = token.text  # as a message names the option: `-n`, not the `--n` it is read as
        if short is not None:  # `-n 50` is `--n 50`
            token = _Token(f"--{short.name}", None)
        _refuse_one_dash(cmd, token, tokens[i] if i < len(tokens) else None)
        option = _option_key(token)
        if option is None:
            text.append(token.text)
            text_tokens.append(token)
            if token.quoted_from is None:
                loose.append(token.text)
            continue
        key, value = option
        is_long = token.text.startswith("--") and (token.quoted_from is None or token.quoted_from >= 2)
        norm = key.replace("-", "_").lower()
        flag = None
        if is_long and value is None and norm.startswith("no_"):
            flag = next((p for p in cmd.options if norm[3:] in (p.name, *p.aliases) and p.type is bool), None)
        if flag is not None:
            param, value = flag, "off"  # --no-cache
        else:
            try:
                param = cmd.find_param(key)
            except UserError as e:
                at = tokens[i - 1]  # the word as typed (`token` may be the `--n` that `-n` is read as)
                after = (raw[tokens[i].start:].strip() if raw is not None and i < len(tokens)
                         and tokens[i].start is not None else "")  # the line after it, as typed
                if is_long and syntax() == REPL and cmd.param_named(norm) is None:
                    _refuse_not_here(cmd, norm, value, after, tokens, i - 1, raw)
                if cmd.pairs_in_text and not is_long:
                    text.append(token.text)
                    continue
                other = registry.names().get(norm) if registry is not None else None
                if other is not None and other is not cmd:  # `:set device=cpu`: what the user wants is a command
                    # its value as that command's word where it takes one (a device's name), not as a prompt or
                    # where it takes none: `:set heads=2` offered `:heads 2`, refused as one token of text
                    takes = other.positional is not None and not reads_prose(other)
                    text_of_other = [value] if value and takes else [cmd.name] if other.about_commands else []
                    if value is None and after and not other.about_commands and (other.positional or other.options):
                        text_of_other = [after]  # `:config --set lr=0.1`: the words after it are its (said ":set")
                    if (close := cmd.close_option(norm)) is not None:  # `:set heads=2` meant n_heads, not :heads 2
                        with without_setting(norm):  # the shell's line without the --set heads=2 refused here
                            other_line = phrase_command(other.name, *text_of_other)
                        raise UsageError(f"{norm} is not an option of {_where(cmd)}; did you mean "
                                         f"{close}? (the command {norm}: {other_line})") from None
                    raise UserError(f"{norm} is not an option of {_where(cmd)} but a command: "
                                    f"{phrase_command(other.name, *text_of_other)}") from None
                # :set's text is names only, and a text of fixed values (:quantize int8, :checks blind) takes no
                # `key=value` however quoted: the hint was a line that the command then refused
                if raw is not None and reads_prose(cmd) and token.start is not None and not is_long:
                    # the whole text after `--`, the options kept before it: quoting the one word, as this said,
                    # ran on that word alone (`:tok print(a, sep=b)` was told `:tok "sep=b)"`)
                    line = _whole_line_as_text(cmd, tokens, i - 1, raw)
                    raise UserError(f"{e}; to read the whole line as text: {clip(line, 200)}") from None
                # `:train --threads 1`: the value the word after it, as the shell's `minitf train --threads 1` reads
                # it (the REPL said "unknown option" where `threads=1` and `--threads=1` were given their :set line)
                apart = (is_long and value is None and i < len(tokens) and tokens[i].quoted_from is None
                         and not tokens[i].text.startswith("-") and "=" not in tokens[i].text)
                setting_value = tokens[i].text if apart else value
                rest = [raw[t.start:t.end] if raw is not None and t.start is not None else t.text
                        for j, t in enumerate(tokens) if j != i - 1 and not (apart and j == i)]  # but those words
                refuse_a_setting(cmd, norm, setting_value, registry, rest)
                # not for a path (`:report x.html bogus=1`): quoted, the word was then refused as a page's name
                if (positional is not None and not is_long and not cmd.pairs and not positional.choices
                        and not positional.several and not positional.path):
                    raise UserError(f"{e}; to use it as text, quote it: :{cmd.name} \"{clip(token.text)}\"") from None
                raise
        if value == "" and not param.blank:  # `lr= 0.1`: the value after a space read as text ("got ''")
            _refuse_space_after_equals(cmd, param, tokens[i] if i < len(tokens) else None)
            raise needs_a_value(param, cmd.pairs)
        if value is None:  # `--key` without '='
            nxt = tokens[i] if i < len(tokens) else None
            if param.type is bool:
                value = "on"
                if nxt is not None and nxt.quoted_from is None and nxt.text.lower() in BOOL_WORDS:
                    value, i = nxt.text, i + 1
                elif nxt is not None and nxt.quoted_from is None:
                    near_bool(typed if short is not None else f"--{param.name}", nxt.text,
                              f"to begin the text with {nxt.text!r}, give the option its value: "
                              f"--{param.name}=on {nxt.text}")
            elif nxt is None:
                raise missing_value(typed if short is not None else f"--{param.name}", param)
            else:
                value, i = nxt.text, i + 1
        spelled = (raw[tokens[at_key].start:tokens[i - 1].end] if raw is not None
                   and None not in (tokens[at_key].start, tokens[i - 1].end) else f"{typed}={value}")
        if param.name in args:  # both as typed: `learning_rate=0.1 lr=0.2` was "lr is given twice", with no 0.1
            raise UsageError(f"{param.name} is given twice ({given_as[param.name]} and {spelled}); give it once")
        given_as[param.name] = spelled
        whole = None  # the line without a chain's operator after the value, for words that follow it (no command)
        if (raw is not None and i < len(tokens) and None not in (tokens[i].start, tokens[i - 1].end)
                and not tokens[i].text.startswith(":")):
            whole = (f":{cmd.name}{raw[:tokens[i - 1].end].rstrip().rstrip(';&|')} "
                     f"{raw[tokens[i].start:].strip()}")
        args[param.name] = _convert_as_typed(param, value, norm, whole)
    if text and positional is None:  # `:ls all`: a switch named alone is on, as `--all` is
        for param in filter(None, map(cmd.switch_named, text)):
            if param.name in args:
                raise UsageError(f"{param.name} is given twice; give it once")
            args[param.name] = True
        text = [w for w in text if cmd.switch_named(w) is None]
    if text:
        if positional is None:
            words = " ".join(text)
            bare = next((p for w in text if (p := cmd.param_named(w)) is not None and p.refusal is None), None)
            if bare is not None:  # `:train steps`: an option's name without its value
                raise UserError(f"{bare.name} needs a value: {phrase_command(cmd.name, **{bare.name: bare.metavar})} "
                                f"({phrase_command('help', cmd.name)} shows its options)")
            fix = (f" ({phrase_command('help', cmd.name)} shows its options)" if cmd.options else
                   f"; type {phrase_command(cmd.name)} alone")  # it has no options for its help to show
            setter = next((c for c in registry.values() if c.pairs), None) if registry is not None else None
            setting = setter.param_named(text[0]) if setter is not None and len(text) == 1 else None
            if setting is not None and setting.setting is not None and not fits_first_option(cmd, text):
                # `:config lr`: that setting was asked of (`:plot lr` is its what=lr)
                fix = f"; {text[0]} is a setting: {phrase_command(setter.name, text[0])} shows it{fix}"
            raise UserError(f"{phrase_command(cmd.name)} takes no text; got {show_value(words)}"
                            f"{fits_first_option(cmd, text)}{fix}")
        if not cmd.pairs and loose == text:
            _refuse_options_apart(cmd, text)
        typed = _text_as_typed(text_tokens, raw) if raw is not None and reads_prose(cmd) else None
        value = typed if typed is not None else positional.positional_text(text)  # a pair: quoted or not
        if cmd.about_commands and value.rstrip("?"):  # `:help train?` asks of train (it said "did you mean :train?",
            value = value.rstrip("?")  # which ran a training)
        args[positional.name] = check_value(positional, shell_unescaped(value) if positional.path else value)
    return args


def _refuse_not_here(cmd: Command, key: str, value: str | None, after: str, tokens: list[_Token], at: int,
                     raw: str | None) -> None:
    """`--KEY` typed at the REPL that is no option of `cmd` but means something elsewhere, said with the line that
    does it: --json, which one-shot commands take ("here the result is shown as text: leave --json out" was said of a
    line that showed nothing, and failed), the command's text by its name (`:load --name x`: ":load takes no options;
    got 'name'"), and minitf's own on/off options, given as it starts (`:train --debug`)."""
    typed = [raw[t.start:t.end] for j, t in enumerate(tokens) if j != at and t.start is not None] if raw else []
    if raw is not None and reads_prose(cmd) and tokens[at].start is not None and at + 1 < len(tokens):
        # a flag amid a prompt (`:gen the --json option`, `:tok a --text b`) is the prompt's word: the lines for
        # the flag said of it changed the text or dropped its words before it (`:tok b`); one that ends the line
        # (`:tok 12 --json`) was meant as a flag, said below
        line = _whole_line_as_text(cmd, tokens, at, raw)
        word = raw[tokens[at].start:tokens[at].end]
        if not line.partition(" -- ")[2].startswith(word):
            raise UserError(f"{word.partition('=')[0]} is no option of {named(cmd.name)}; to read the whole line as "
                            f"text: {clip(line, 200)}")
    if key == "json" and raw is not None:
        raise UserError(f"--json belongs to one-shot commands run from your system's shell (minitf {cmd.name} --json "
                        f"prints one JSON document); here results are shown as text: "
                        f"{' '.join([f':{cmd.name}', *typed])}")
    positional = cmd.positional
    text = value or after
    if positional is not None and key == positional.name and text:
        raise UserError(f"{key} is no option of {named(cmd.name)}: its {key} goes alone, "
                        f"{phrase_command(cmd.name, text)}")
    if (own := _own_flag(key)) is not None:
        raise UserError(f"{own} is no option of {named(cmd.name)} but minitf's own, given as it starts: minitf {own}")


def _own_flag(key: str) -> str | None:
    """`--debug`, `--version`: an on/off option of minitf's own (syntax.OWN_SWITCHES) spelt `key`, else None."""
    flag = f"--{key.replace('_', '-')}"
    return flag if flag in OWN_SWITCHES else None


def shell_unescaped(path):
    r"""`path` with the shell's backslash escapes read (`my\ file.txt` is `my file.txt`), where it names nothing as
    typed and names a file or folder so read: the form a shell's Tab completion and a file dragged onto the terminal
    write, which the REPL's line keeps ("no such file: with space/my\ file.txt"). A file to be written (`:report
    sp\ ace/my\ page.html`) is read so where its folder exists only so read ("the folder sp\ ace does not exist;
    create it first" of a folder that did). Any other path stays as typed, and on Windows, whose backslashes are the
    path's, every one does."""
    if not isinstance(path, str) or "\\" not in path or os.name == "nt" or os.path.lexists(os.path.expanduser(path)):
        return path
    unescaped = re.sub(r"\\(.)", r"\1", path)
    if os.path.lexists(os.path.expanduser(unescaped)):
        return unescaped
    folder, typed_folder = (os.path.dirname(os.path.expanduser(p)) for p in (unescaped, path))
    return unescaped if folder and os.path.isdir(folder) and not os.path.lexists(typed_folder) else path


def _whole_line_as_text(cmd: Command, tokens: list[_Token], refused: int, raw: str) -> str:
    """The line that reads `tokens` as the command's options and, after `--`, its text: each word that sets an
    option of the command (with its value, where given apart) goes before `--`, as typed; every other word, the
    refused one (`refused`, an index) too, is the text, as typed. Options typed after the text's first word stayed
    in the line after `--`, where they read as text."""
    options, text, k = [], [], 0
    while k < len(tokens):
        token = tokens[k]
        key = _option_key(token) if k != refused and token.quoted_from is None else None
        param = cmd.param_named(key[0]) if key is not None else next(
            (p for p in cmd.options if p.short and token.quoted_from is None and token.text == f"-{p.short}"), None)
        if param is None or param.refusal is not None or token.start is None:
            text.append(token)
            k += 1
            continue
        apart = (key is None or key[1] is None) and param.type is not bool and k + 1 < len(tokens)
        end = tokens[k + 1 if apart else k].end
        options.append(raw[token.start:end])
        k += 2 if apart else 1
    typed = _text_as_typed(text, raw) if text else ""
    return " ".join(w for w in (f":{cmd.name}", *options, "--", typed or "") if w)


def _refuse_one_dash(cmd: Command, token: _Token, nxt: _Token | None) -> None:
    """`-steps=5` or `-steps 5` (Go's and Java's way), where the word names an option: a UserError with the fix.
    A word that names none (`:gen -x`) stays text, and a short option (`-n 50`) was read before."""
    text = token.text
    if token.quoted_from is not None or not text.startswith("-") or text.startswith("--"):
        return
    key, eq, value = text[1:].partition("=")
    param = cmd.param_named(key) if _KEY.fullmatch(key) else None
    if param is None or param.refusal is not None:
        return
    if not eq and nxt is not None and nxt.quoted_from is None and _option_key(nxt) is None:
        value = nxt.text  # `-steps 5`
    raise UserError(f"{clip(text)} has one dash: an option takes two or none, "
                    f"{phrase_command(cmd.name, **{param.name: value or param.metavar})}")


def _refuse_space_after_equals(cmd: Command, param: Param, nxt: _Token | None) -> None:
    """`:set lr= 0.1`: where the word after an empty `key=` is a value the option takes, a UserError with the line
    written as one word; anything else goes on to the usual error ("lr must be a number, got ''")."""
    if nxt is None or nxt.quoted_from is not None or _option_key(nxt) is not None or nxt.text.startswith("-"):
        return
    try:
        value = convert(param, nxt.text)
    except UserError:
        return
    raise UserError(f"an option and its value go as one word, with no space after '=': "
                    f"{phrase_command(cmd.name, **{param.name: value})}")


def _refuse_options_apart(cmd: Command, words: list[str]) -> None:
    """`:gen temperature 0.5`: a text that is nothing but options' names, each followed by a value it takes, was
    meant as those options (as `:set lr 0.1` is refused). A text with one word more is a prompt (`:gen the n 50`)."""
    if len(words) % 2:
        return
    pairs = {}
    for name, value in zip(words[::2], words[1::2]):
        param = cmd.param_named(name)
        if param is None or param.refusal is not None or param.name in pairs:
            return
        try:
            pairs[param.name] = convert(param, value)
        except UserError:
            return
    text = " ".join(words)
    raise UserError(f"an option and its value go as one word: {phrase_command(cmd.name, **pairs)} (to continue "
                    f"{show_value(text)} as text, quote it: {phrase_command(cmd.name)} \"{clip(text)}\")")


def fits_first_option(cmd: Command, text: list[str]) -> str:
    """`:train 100`, `:plot lr`: one value that the command's first option (its main one, first in its usage) takes,
    as "; did you mean :train steps=100?"; else ''. A free-text option would take any word: no guess then."""
    first = cmd.options[0] if cmd.options and len(text) == 1 else None
    if first is None or (first.type is str and not first.choices):
        return ""
    try:
        value = convert(first, text[0])  # as it is read: `LR` is lr, `1e3` is 1000
    except UserError:
        return ""
    return f"; did you mean {phrase_command(cmd.name, **{first.name: value})}?"


def missing_value(spelled: str, param: Param) -> UsageError:
    """The refusal of an option typed without its value (`--n` at the line's end, or followed by another option)."""
    return UsageError(f"{spelled} needs a value, e.g. {spelled} {_example(param)}")


def _example(param: Param) -> str:
    if param.choices:
        return str(param.choices[0])
    return {int: "10", float: "0.5", bool: "on"}.get(param.type, "NAME")


def undecodable(words: list[str]) -> str | None:
    """The bytes (written \\xNN, in the order typed) of the first word that is not UTF-8 text, or None where every
    word reads. Python reads each such byte as a lone surrogate (a terminal in another encoding, a C locale), which
    the vocabulary then listed as '\\udcff': "not in the vocabulary", sorted, so in the reverse of the order typed. A
    word that names a file as it is (a file's own name in another encoding) is a name all the same: it opens."""
    for word in words:
        raw = [ord(c) - 0xDC00 for c in word if 0xDC80 <= ord(c) <= 0xDCFF]
        if raw and not any(os.path.lexists(w) for w in (word, word.partition("=")[2]) if w):
            return " ".join(f"\\x{b:02x}" for b in raw[:8]) + (" ..." if len(raw) > 8 else "")
    return None
