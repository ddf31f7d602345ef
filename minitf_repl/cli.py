"""The `minitf` command: with no subcommand the REPL, otherwise one command and exit.

The subcommands are generated from the command registry, so the shell and the REPL cannot drift:
`:train steps=200 eval_every=50` is `minitf train --steps 200 --eval-every 50`, and `:gen once upon
a time` is `minitf gen once upon a time` (the words after a command are its text). Global options
(--debug, --device, --data, --set key=value, --load, --checkpoint-dir) come before the subcommand
and apply to the session the command runs in; one typed after it gets a line that puts it there.

Standard output carries only the result (with --json: exactly one JSON document); progress,
notices and errors go to standard error, so `minitf train --json > run.json` stays clean.
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import errno
import inspect
import io
import itertools
import os
import re
import select
import shlex
import stat
import sys
from pathlib import Path
from typing import Iterator, List, Optional

import click
import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperCommand, TyperGroup

from . import __version__, startup
from .commands import REGISTRY
from .commands.settings import rebuilding_keys, setting_help
from .core import distributed  # a light import: it loads torch only when asked to do something
from .core.catalog import spec_forms
from .core.errors import Interrupted, UsageError, UserError
from .core.paths import default_checkpoint_dir, home_variable, on_windows
from .core.words import count
from .dispatch import (FAILED, PROGRAM, READER_LEFT, FrontDoor, FrontEnd, phrase, run_command, short_of_memory,
                       signal_status)
from .palette import write_stand_ins
from .parsing import (BOOL_WORDS, COPIED_PROMPT, convert, fits_first_option, missing_value, near_bool, needs_a_value,
                      parse_line, prepare_args, reads_prose, refuse_a_setting, shell_text, undecodable)
from .registry import Registry, clip
from .render import console_for, error, fmt, internal_error, say
from .session import Session
from .syntax import SHELL, cmd, invoked_with, pair_key, restore, set_pairs, speaking, typed_after

from typer import TyperException as _UsageError  # usage errors derive from it (Typer 0.28 on: pyproject's floor)

OPTION_WORDS = "option_words"  # the KEY=VALUE words of a command that takes no text
PAIRS = "pairs"  # the KEY=VALUE words of a command that reads only pairs (set)


def _stdout() -> Console:
    return _shell_console()


def _stderr() -> Console:
    return _shell_console(stderr=True)


def _shell_console(**options) -> Console:
    """A console of the shell's. Under a Jupyter kernel's `!` (`!minitf train` in a cell) as in a pipe: the kernel
    gives the command a pseudo-terminal, where the live display wrote its cursor codes, a frame of the bar per redraw
    and the loss table three times into the cell. No colour there either, unless the user forces it (FORCE_COLOR,
    which Rich reads: force_terminal would override it); the front end draws no live display (_run_one)."""
    if not _under_a_kernels_bang():
        return console_for(**options)
    forced = os.environ.get("FORCE_COLOR", "") != ""
    console = console_for(**options, **({} if forced else {"force_terminal": False}))
    console.soft_wrap = True  # a message one line, as in a pipe: the cell wraps it to its own width
    return console


def _under_a_kernels_bang() -> bool:
    """repl.under_a_kernels_bang, asked only where the kernel's sign is set: repl (prompt_toolkit) loads slowly, and
    a one-shot command elsewhere need not load it."""
    if "JPY_PARENT_PID" not in os.environ:
        return False
    from .repl import under_a_kernels_bang

    return under_a_kernels_bang()


def _command_line_error(line: str) -> None:
    """An error of the command line itself: under torchrun, said by the first process of the machine alone (every
    process there runs the same command line: core.distributed.says_command_line_errors)."""
    if distributed.says_command_line_errors():
        error(_stderr(), line)


class _FlagsUntyped:
    """--help lists a flag (--help, --json, --install-completion...) without a `<bool>` type: a flag takes no value."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        return params


NARROW_HELP = 60  # below this many columns, --help is Click's plain text: Rich's panels cut words to "--temp…"


def _narrow(formatter) -> bool:
    """Whether --help goes to a terminal too narrow for Typer's panels; `formatter` then wraps at its width."""
    import shutil

    columns = shutil.get_terminal_size().columns
    if columns >= NARROW_HELP:
        return False
    formatter.width = max(columns - 1, 20)
    write_dl = formatter.write_dl

    def narrow_dl(rows, col_max: int = 30, col_spacing: int = 2) -> None:
        # an option's name longer than a quarter of the width goes on a line of its own and its help under it
        # (Click's 30 columns of names would leave the help 10, and cut its words)
        write_dl(rows, col_max=min(col_max, formatter.width // 4), col_spacing=col_spacing)

    formatter.write_dl = narrow_dl
    return True


# The words of this command line, as the group reads them: a fix that rewrites the line (--set checkpoint_dir) keeps
# the rest of it as typed.
_TYPED: contextvars.ContextVar[list] = contextvars.ContextVar("minitf_typed", default=[])
_ROOT_OPTIONS: list = [()]  # minitf's own options (the group's params), set as it starts: `_words_after` steps over


def _folder_as_option(settings: list[str], folder_now: str | Path) -> str | None:
    """Where a --set names a setting the shell gives as an option of its own (SettingSpec.shell_option: checkpoint_dir
    is --checkpoint-dir): the refusal, with the line as typed and that option in the pair's place (given no value: a
    UsageError). The folder is read before --load: --set applies after it, and `minitf --set checkpoint_dir=D --load
    K` looked for K before D. So where the line loads a checkpoint by name, the line copies it from `folder_now` (the
    session's folder) first: `minitf --checkpoint-dir D --load K` alone found no K in D."""
    options = {p.name: p.setting.shell_option for p in REGISTRY["set"].options
               if p.setting is not None and p.setting.shell_option is not None}
    given = next(((pair_key(p), p.partition("=")[2]) for value in settings for p in set_pairs(value)
                  if pair_key(p) in options), None)
    if given is None:
        return None
    name, folder = given
    if not folder.strip():  # the line with '' in it would be refused in turn ("--checkpoint-dir is empty")
        # a missing value: a wrong command line (status 2), as --checkpoint-dir "" is
        raise UsageError(f"{name}= names no folder; give one as minitf's own option, e.g. minitf {options[name]} DIR "
                         "ls")
    words, line, i = _TYPED.get(), [], 0
    while i < len(words):
        word, eq, inline = words[i].partition("=")
        if word in ("--set", options[name]):
            value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            i += 1 if eq else 2
            kept = " ".join(p for p in set_pairs(value) if pair_key(p) != name) if word == "--set" else ""
            line += ["--set", shlex.quote(kept)] if kept else []
            continue
        line.append(shlex.quote(words[i]))
        i += 1
    from .core.checkpoint.layout import NAME
    from .core.paths import on_windows

    folder = folder.strip()
    said = f"from the shell {name} is minitf's own option, read before --load"
    run = " ".join(["minitf", options[name], shlex.quote(folder), *line])
    loads = next((w.partition("=")[2] or (words[k + 1] if k + 1 < len(words) else "") for k, w in enumerate(words)
                  if w.partition("=")[0] == "--load"), "")
    try:
        there = Path(folder).expanduser().absolute()  # as minitf reads it: the shell's quoting kept `~` from cp
    except RuntimeError:  # `~` with no home folder: the option itself says so when given
        there = None
    if not loads or not NAME.match(loads) or there is None:  # no checkpoint by name (none, or hf:PATH)
        return f"{said}: {run}"
    if (there / loads).exists():
        return f"{said}, which then loads {there}'s own {loads}: {run}"
    if not on_windows() and (Path(folder_now) / loads).is_dir():  # copied first (into one there, cp -r merged two)
        into = shlex.quote(str(there))
        return (f"{said}, which then loads from that folder: copy {loads} there first, e.g. mkdir -p {into} && "
                f"cp -r {shlex.quote(str(Path(folder_now) / loads))} {into}/ && {run}")
    return f"{said}: {run}"


_PAIR_START = re.compile(r",\s*(?=[A-Za-z_][\w-]*=)")  # `lr=0.1,steps=5`: where a second pair starts


def _comma_parts(pair: str) -> list[str]:
    """The pairs a KEY=VALUE word joins with commas (`lr=0.1,steps=5`: two), or [pair] itself: only where the key
    is a setting whose value is no text (a text may hold `,x=1`), as :set reads the comma (parsing.convert)."""
    param = REGISTRY["set"].param_named(pair.partition("=")[0])
    if param is None or param.setting is None or param.type is str:
        return [pair]
    return [part for part in _PAIR_START.split(pair) if part]


def _set_joined(settings: list[str]) -> str | None:
    """For a --set whose pair holds two with a comma (`--set lr=0.1,steps=5`): each in a --set of its own, in the
    line as typed. Only the pairs typed after the --set (`lr=0.1 steps=5`) were said, and pasted after it the second
    was taken for the command ("unknown command 'steps=5'")."""
    for value in settings:
        for pair in set_pairs(value):
            parts = _comma_parts(pair)
            if len(parts) > 1:
                break
        else:
            continue
        words, line, i = _TYPED.get(), [], 0
        at = _command_at(words, _ROOT_OPTIONS[0])
        while i < len(words):
            word, eq, inline = words[i].partition("=")
            if word != "--set" or (at is not None and i >= at):
                line.append(words[i])
                i += 1
                continue
            given = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
            i += 1 if eq else 2
            if given != value:
                line += ["--set", given]
            elif set_pairs(given) == [pair]:  # one pair a --set: one --set each
                line += [w for part in parts for w in ("--set", part)]
            else:  # with others in one --set (`--set 'lr=0.1,steps=5 n_layers=2'`): apart in it
                line += ["--set", " ".join(shlex.quote(p) for q in set_pairs(given)
                                           for p in (parts if q == pair else [q]))]
        return (f"{pair} joins {' and '.join(parts)} with a comma; each goes with --set: "
                f"{shlex.join(['minitf', *line])}")
    return None


def _pairs_as_typed(command, words: list[str]) -> None:
    """A UsageError for the words of a command that reads pairs (`minitf set`) that the shell got apart or together
    where they go as one word each: `set lr 0.01` (or `lr = 0.01`), `set lr=0.1,steps=5`, and a pair with no value
    (`set lr=`). The REPL's own words gave a fragment (`--set lr=0.01`), not the line that runs."""
    for i, word in enumerate(words):
        parts = _comma_parts(word) if "=" in word else [word]
        if len(parts) > 1:
            raise UsageError(f"{word} joins {' and '.join(parts)} with a comma; settings go apart by spaces: "
                             f"{_typed_replacing(command, words[i:i + 1], parts)}")
        key, eq, given = word.partition("=")
        param = command.param_named(key) if i + 1 < len(words) and not given else None
        if param is None or param.setting is None or param.refusal is not None:
            continue
        nxt = words[i + 1]
        if eq:  # `set lr= 0.01`: a value it takes, else the pair has none (_missing_pair_value)
            value, span = nxt, 2
            if "=" in nxt or nxt.startswith("-") or not _takes(param, nxt):
                continue
        elif nxt == "=" and i + 2 < len(words):  # `set lr = 0.01`
            value, span = words[i + 2], 3
        elif nxt.startswith("=") and len(nxt) > 1:  # `set lr =0.01`
            value, span = nxt[1:], 2
        elif "=" not in nxt and not nxt.startswith("-") and command.param_named(nxt) is None:  # not `set lr d_model`
            value, span = nxt, 2
        else:
            continue
        try:  # the line suggested must work as typed: a value the setting cannot take is said with it
            convert(param, value)
        except UserError as bad:
            raise UsageError(f"a setting and its value go as one word (minitf {command.name} {param.name}="
                             f"{param.metavar}), and {bad}") from None
        raise UsageError(f"a setting and its value go as one word{', with no space after =' if eq else ''}: "
                         f"{_typed_replacing(command, words[i:i + span], [f'{key}={value}'])}")
    _missing_pair_value(command, words)


def _takes(param, value: str) -> bool:
    """Whether `param` takes `value`, as typed."""
    try:
        convert(param, value)
    except UserError:
        return False
    return True


def _missing_pair_value(command, pairs: list[str]) -> None:
    """A UsageError for a pair typed with no value (`set lr=`, `--set lr=`): a missing value is a wrong command line
    (status 2, docs: exit status), as `--set lr` and `gen --n` with none are, where it ended with 1. Not where the
    value follows after a space (`lr= 0.01`), which :set says as it is."""
    for i, pair in enumerate(pairs):
        key, eq, value = pair.partition("=")
        param = command.param_named(key) if eq and not value.strip() else None
        if param is None or param.refusal is not None or param.blank:
            continue
        nxt = pairs[i + 1] if i + 1 < len(pairs) else None
        if nxt is not None and "=" not in nxt and not nxt.startswith("-") and _takes(param, nxt):
            continue  # `--set 'lr= 0.01'`: "no space after '='", said as the REPL says it
        raise UsageError(*needs_a_value(param, command.pairs).args)


def _refuse_empty(command, args: dict) -> None:
    """A UsageError for an option of `command` given an empty value (`train steps=`, `--steps ""`): a missing value,
    a wrong command line (status 2, docs: exit status), as `--steps` with none is; the message is the one the value's
    check gives (parsing.needs_a_value), which ended with 1."""
    for key, value in args.items():
        param = command.param_named(key) if isinstance(value, str) and not value.strip() else None
        if param is not None and not param.positional and not param.blank and param.refusal is None:
            raise UsageError(*needs_a_value(param).args)


def _typed_replacing(command, old: list[str], new: list[str]) -> str:
    """The command line as typed, with the words `old` after `command` given as `new`, quoted for the shell."""
    typed = _TYPED.get()
    at = _command_at(typed, _ROOT_OPTIONS[0])
    start = next((k for k in range((at or 0) + 1, len(typed)) if typed[k:k + len(old)] == old), None)
    if start is None:  # (not as typed: the command's words alone)
        return shlex.join(["minitf", command.name, *new])
    return shlex.join(["minitf", *typed[:start], *new, *typed[start + len(old):]])


def _words_after(command, left_out: str) -> str:
    """The words typed after `command`'s name on this command line, but `left_out`, quoted for the shell again."""
    return " ".join(_typed_after(command, left_out))


def _typed_after(command, left_out: str) -> list[str]:
    """The words typed after `command`'s name on this command line, but `left_out`, each quoted for the shell again."""
    typed = _TYPED.get()
    # where Click finds it, after minitf's own options and their values: the first word spelt as the command named it
    # in `--checkpoint-dir train ... train --steps 40`, and the line given back held the options twice
    at = _command_at(typed, _ROOT_OPTIONS[0])  # minitf's own options: which of them are flags
    if at is None or typed[at] not in (command.name, *command.aliases):
        return []
    after = list(typed[at + 1:])
    if left_out and left_out in after:  # (an empty word the user typed is not "nothing to leave out")
        after.remove(left_out)
    return [shlex.quote(word) for word in after]


COMPLETION_SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")  # what Typer writes completion scripts for
_COMPLETION_OPTIONS = ("--show-completion", "--install-completion")


def _completion_for(words: list[str]) -> int | None:
    """`minitf --show-completion zsh` (or `--install-completion fish`, `=zsh`): the script of the shell named, printed
    or installed, and the exit status; None where no shell is named (Typer's own option finds the shell it runs in).
    With shellingham installed, Typer's options take no value: the name was dropped, and a zsh user running bash got
    bash's script written into ~/.bashrc, without a word. A word that names no shell is refused."""
    # minitf's own options only: before `--` and before the command (`minitf tok -- --install-completion=bash` is
    # text to tokenize, and wrote into ~/.bashrc)
    before = _before_dashes(words)
    at = _first_command(before)
    for k, word in enumerate(before[: len(before) if at is None else at]):
        option, eq, value = word.partition("=")
        if option not in _COMPLETION_OPTIONS:
            continue
        if not eq:
            value = before[k + 1] if k + 1 < len(before) else ""
        if not value or value.startswith("-") or (not eq and value in REGISTRY.names()):
            # the shell it runs in: Typer's own finds it, and its install is ours too, for its errors' sake
            return _install_completion(None) if option == "--install-completion" else None
        if value.lower() not in COMPLETION_SHELLS:
            _command_line_error(f"{option} takes a shell's name, one of {', '.join(COMPLETION_SHELLS[:4])}, or none "
                                f"for the shell it runs in; got {clip(value)!r}")
            return 2
        from typer.completion import get_completion_script

        shell = value.lower()
        if option == "--show-completion":
            print(get_completion_script(prog_name="minitf", complete_var="_MINITF_COMPLETE", shell=shell))
            return 0
        return _install_completion(shell)
    return None


def _install_completion(shell: str | None) -> int:
    """Typer's install of `shell`'s completion (None: the shell it runs in), and the exit status. What stops it is one
    line that gives the script to install by hand: a home folder read-only or not there, and none at all ($HOME unset,
    a uid with no passwd entry), were tracebacks. ~/.bashrc is left as it was where it sources the script already:
    Typer's install_bash adds a blank line to it each time."""
    from typer.completion import install

    by_hand = f"minitf --show-completion{f' {shell}' if shell else ''} prints the script to install by hand"
    rcs: dict[Path, str | None] = {}
    try:
        bashrc = Path.home() / ".bashrc"
        # Typer writes the shell's start-up file before the script: where the script then fails, the file is put back
        # (a `source` line of a script that is not there printed "No such file" in every new bash)
        for rc in (bashrc, Path.home() / ".zshrc"):
            if not rc.exists() or (text := _read_if_there(rc)) is not None:  # (one it cannot read: left alone)
                rcs[rc] = None if not rc.exists() else text
        before = rcs.get(bashrc)
        shell, path = install(shell=shell, prog_name="minitf", complete_var="_MINITF_COMPLETE")
        if shell == "bash" and before is not None and f"source '{path}'" in before:
            bashrc.write_text(before)
    except typer.Exit as e:  # a shell Typer writes no script for: its own line said which
        return e.exit_code
    except RuntimeError:  # Path.home() with no home folder to name
        _command_line_error(f"there is no home folder to install completion in ({home_variable()} is not set); set "
                            f"{home_variable()}, or {by_hand}")
        return 1
    except OSError as e:
        _put_back(rcs)
        # PowerShell's install runs the shell itself, which may not be there
        verb = "run" if shell is not None and e.filename == shell else "write"
        if e.errno in (errno.EEXIST, errno.ENOTDIR) and e.filename:  # a file where Typer makes a folder
            _command_line_error(f"cannot write the completion script: a file is in the way: {e.filename}; {by_hand}")
        else:
            _command_line_error(f"cannot {verb} {e.filename or 'the completion script'} ({e.strerror or e}); "
                                f"{by_hand}")
        return 1
    print(f"{shell} completion installed in {path}\nCompletion will take effect once you restart the terminal")
    return 0


def _put_back(rcs: dict[Path, str | None]) -> None:
    """Each start-up file as it was before an install that failed: its text (None: it was not there)."""
    for rc, text in rcs.items():
        with contextlib.suppress(OSError):
            if text is None:
                rc.unlink(missing_ok=True)
            elif _read_if_there(rc) != text:
                rc.write_text(text)


def _read_if_there(path: Path) -> str | None:
    """`path`'s text, or None where it cannot be read (no such file: Typer's install then says what is wrong)."""
    try:
        return path.read_text() if path.is_file() else None
    except (OSError, ValueError):
        return None


def _rebuilds(param) -> bool:
    """Whether a new value of the setting `param` gives would rebuild a model (weights reset), as its declaration
    says: a model's or the data's setting not declared in_place (commands.settings.rebuilding_keys, which --load's
    --set asks, compares the values too)."""
    from .core.config import DataConfig, ModelConfig

    spec = param.setting
    return spec is not None and spec.section in (ModelConfig.kind, DataConfig.kind) and not spec.in_place


def _reads_as_script(path: str, lines: int = 5) -> bool:
    """Whether the file at `path` reads as a script of minitf's lines: of its first `lines` lines that are neither
    blank nor a comment, more than half start with ':' (or with `minitf`, copied from a shell or from the prompt). A
    lesson with a line that lacks its ':' (`train steps=5`, which the script then refuses with its fix) is a script
    still: one such line among five made it "a text to train on". A text rarely starts a line with ':'."""
    commands = counted = 0
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in itertools.islice(f, 1000):
                line = line.lstrip("\ufeff").strip()
                if not line or line.startswith("#"):
                    continue
                counted += 1
                commands += line.startswith(":") or line.startswith(f"{PROGRAM} ") or bool(COPIED_PROMPT.match(line))
                if counted == lines:
                    break
    except OSError:
        return False
    return 2 * commands > counted


def _before_dashes(words: list[str]) -> list[str]:
    """The words before a bare `--`, after which every word is a command's text."""
    return words[: words.index("--")] if "--" in words else words


def _first_command(words: list[str]) -> int | None:
    """Where the first word that names a command stands (`--data sort help train`: after minitf's own options and
    their values), or None."""
    return next((k for k, word in enumerate(words) if word == "help" or word in REGISTRY.names()), None)


def _prints_only(words: list[str]) -> bool:
    """Whether the command line asks only for text (a help, the version, a completion script) or to install
    completion: nothing a process under torchrun other than the first has to do."""
    before = _before_dashes(words)
    # `--show-completion=fish` too: every process of a torchrun launch printed it (or rewrote ~/.zshrc)
    printing = {"--version", "--help", "-h", "--show-completion", "--install-completion"}
    if printing & {word.partition("=")[0] for word in before}:
        return True
    at = _first_command(before)
    return at is not None and before[at] == "help"


class _Group(_FlagsUntyped, TyperGroup):
    """Usage errors (a misspelt option, a bad number) print one `error:` line, like every other error."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        for stream in (sys.stdout, sys.stderr):  # Typer's help prints through consoles of its own ("…" in a help)
            write_stand_ins(stream)
        forget_zero_size()  # here too, not in main() alone: a caller of the app itself (a test's CliRunner)
        typed = _dashes(sys.argv[1:] if args is None else list(args))
        if "bash" in os.environ.get(complete_var or "_MINITF_COMPLETE", ""):  # Tab in bash: complete_bash (Typer's)
            _join_bash_words()
        if (bad := _undecodable(typed)) is not None:  # Python's stand-ins for bytes that are no UTF-8: said as bytes
            _command_line_error(bad)
            if standalone_mode:
                sys.exit(2)
            return 2
        if not distributed.first_process() and _prints_only(typed):
            # torchrun runs the line in every process: --version, a help and the completion scripts are the first
            # one's to print (they printed once a process) and --install-completion's to write (each wrote ~/.bashrc)
            if standalone_mode:
                sys.exit(0)
            return 0
        if (code := _completion_for(typed)) is not None:  # `--show-completion zsh`: the shell named, not the one found
            if standalone_mode:
                sys.exit(code)
            return code
        option = self._option_help(typed)
        if option is not None:  # `minitf help train steps`: that option alone, as `:help train steps` shows it
            typer.echo(option)
            if standalone_mode:
                sys.exit(0)
            return 0
        topic = self._help_topic(typed)
        if topic is not None:  # `minitf help position`: what shows it, as `:help position` lists it (not an error)
            from .dispatch import guard_stdout
            from .render.renderers import render

            console = _stdout()
            guard_stdout(console)  # in a pipe without a table's padding, as a command's output goes
            with speaking(SHELL):
                render(topic, console)
            if standalone_mode:
                sys.exit(0)
            return 0
        args = _other_name(_help_word(typed, self.commands, self.params), self.commands, self.params)
        try:
            args = _flag_words(args, self.commands, self.params)
        except UserError as e:  # `--cache of`: a line refused before the command runs, said as Click's errors are
            _command_line_error(str(e))
            if standalone_mode:
                sys.exit(2)
            return 2
        _TYPED.set(list(args))
        _ROOT_OPTIONS[0] = self.params
        try:
            code = super().main(args=args, prog_name=prog_name, complete_var=complete_var,
                                standalone_mode=False, **extra)
        except _UsageError as e:
            what = "commands" if e.format_message().startswith("No such command") else "options"
            path = e.ctx.command_path if getattr(e, "ctx", None) else self._command_path(e, args)
            # Click's "No such command 'trian'. Did you mean 'train'?" is a problem and its fix already: one
            # sentence, the list after it in brackets ("?; minitf --help ..." read as two fixes)
            problem, asked, guess = e.format_message().rstrip(".").partition(". Did you mean")
            # in the REPL's words ("unknown command :trian"), not Click's capitalised "No such command"
            problem = problem.replace("No such command", "unknown command", 1)
            hint = f" ({path} --help lists the {what})" if asked else f"; {path} --help lists the {what}"
            _command_line_error(self._one_dash(e, args) or self._set_apart(e, args) or self._misplaced(e, args)
                                or self._setting_as_command(e, args) or self._other_case(e, args)
                                or self._a_script(e, args) or self._early(e, args) or self._setting_as_option(e, args)
                                or self._near_own(e, args)
                                or self._repl_only(e, args)
                                or self._help_of_neither(e, typed) or self._nothing_taken(e) or self._bad_switch(e)
                                or problem + (f"; did you mean{guess}" if asked else "") + hint
                                + self._dashed_text(e, args))
            code = e.exit_code
        except typer.Abort:
            code = 130
        code = code if isinstance(code, int) else 0
        # Typer turns a KeyboardInterrupt into exit 130 without a word: one that startup's handler heard came before a
        # command took the signal over (a command's own stop says its own line, under its own handler)
        if code == startup.STATUS and startup.interrupted():
            code = _stopped_before_it_began().exit_code
        if standalone_mode:
            sys.exit(code)
        return code

    def shell_complete(self, ctx, incomplete: str):
        """The commands and options Typer completes, and `help`: a word main() turns into --help (_help_word), which
        is no Typer command, so `minitf he<Tab>` offered heads alone."""
        from typer.core import CompletionItem  # the click Typer runs on (its own copy in Typer 0.2x)

        items = super().shell_complete(ctx, incomplete)
        if "help".startswith(incomplete):
            items.append(CompletionItem("help", help="Show the commands, or a command's options: minitf help CMD."))
        return items

    def parse_args(self, ctx, args):
        if not ctx.resilient_parsing:  # Tab completion parses what is typed so far: it offers, it never refuses
            at = _command_at(args, self.params)
            _refuse_twice(self.params, args if at is None else args[:at], own=True)  # the command checks its own
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter):
        if _narrow(formatter):
            return super(TyperGroup, self).format_help(ctx, formatter)  # Click's own: words wrap, none are cut
        return super().format_help(ctx, formatter)

    def _repl_only(self, e: Exception, args: list[str]) -> str | None:
        """For a command of the interactive shell alone (`minitf quit`): what it is, not "No such command"."""
        at = _command_at(args, self.params)
        unknown = at is not None and e.format_message().startswith("No such command")
        command = REGISTRY.names().get(args[at]) if unknown else None  # `minitf q`, `minitf exit`: quit's names too
        if command is None or not command.repl_only:
            return None
        return (f"{args[at]} is a command of minitf's interactive shell (minitf with no command, then :{args[at]}); "
                f"a one-shot command ends on its own, and minitf --help lists the commands")

    def _bad_switch(self, e: Exception) -> str | None:
        """`minitf ls --all=maybe`: an on/off option given a value it does not take, said as the REPL says it (`:ls
        all=maybe`), where Click's "Option '--all' does not take a value" was false of `--all=on`, which it takes."""
        typed = _TYPED.get()
        at = _command_at(typed, self.params)  # Click's error carries no context here: the command as typed
        command = REGISTRY.get(typed[at]) if at is not None else None
        named = re.match(r"Option '--([\w-]+)' does not take a value", e.format_message())
        param = command.param_named(named.group(1)) if command is not None and named is not None else None
        given = next((a.partition("=")[2] for a in typed if named and a.startswith(f"--{named.group(1)}=")), None)
        if param is None or param.type is not bool or given is None:
            return None
        try:
            convert(param, given)  # the REPL's refusal, word for word
        except UserError as refused:
            return str(refused)
        return None

    def _nothing_taken(self, e: Exception) -> str | None:
        """For words after a command that takes no text and no options (`minitf ls DIR`, `minitf config x`): that,
        not Click's "Got unexpected extra argument(s)" sent to a --help that lists no options of its own."""
        ctx = getattr(e, "ctx", None)
        command = REGISTRY.get(ctx.info_name) if ctx is not None and ctx.parent is not None else None
        extra = re.match(r"Got unexpected extra arguments? ?(?:\(s\))? \((.*)\)$", e.format_message())
        if command is None or command.positional is not None or any(p.refusal is None for p in command.params) \
                or extra is None:
            return None
        return (f"minitf {command.name} takes no text and no options (but --json), got {clip(extra.group(1))!r}; "
                "leave the words after it out")

    def _option_help(self, typed: list[str]) -> str | None:
        """For `minitf help CMD KEY` of one of the command's options (not a setting, which `minitf set KEY`
        shows): its line of `minitf CMD --help`, as `:help CMD KEY` shows that option alone. None otherwise."""
        at = _command_at(typed, self.params)
        if at is None or typed[at] != "help" or len(typed) < at + 3:
            return None
        name = _named(typed[at + 1].removeprefix(":"), self.commands)
        command = self.commands.get(name)
        if command is None or (REGISTRY[name].pairs and _setting(typed[at + 2].split("=")[0])):
            return None
        key = typed[at + 2].split("=")[0].lstrip("-").replace("_", "-").lower()
        param = REGISTRY[name].param_named(key.replace("-", "_"))
        if param is not None and param.refusal is None and param.setting is not None:
            return None  # `help train lr`: the setting lr, as `minitf set lr` shows it (_help_word)
        ctx = click.Context(command, info_name=name)
        for param in command.params:
            opts = [o.lstrip("-") for o in (*param.opts, *param.secondary_opts)]
            if param.param_type_name == "argument" and param.name not in (OPTION_WORDS, PAIRS):
                opts = [param.name.replace("_", "-").lower()]  # the command's text, as `:help checks which`
            if key in opts:
                record = param.get_help_record(ctx) if param.param_type_name == "option" else None
                flag, meaning = record or (key.upper(), getattr(param, "help", "") or "")
                return f"minitf {name} {flag}\n  {meaning}".rstrip()
        _command_line_error(f"minitf {name} has no option {clip(typed[at + 2])!r}; minitf help {name} lists its "
                            "options")
        sys.exit(2)

    def _help_topic(self, typed: list[str]):
        """For `minitf help WORDS` of a topic that no command or setting is named (`help position`, `help token
        embedding`): what covers it (commands.help.shell_topic's HelpResult), listed as `:help` lists it. None
        otherwise: a command's help, a setting's, a topic that is one setting alone (_help_word makes them lines)."""
        at = _command_at(typed, self.params)
        if at is None or typed[at] != "help":
            return None
        words = [w.removeprefix(":") for w in typed[at + 1 :] if not w.startswith("-")]
        if not words or words[0] == "help" or _named(words[0], self.commands) in self.commands:
            return None
        key = words[0].split("=")[0] or words[0]
        if _setting(key) or _shown_by_set(key) or (len(words) > 1 and _setting("_".join(words))):
            return None
        from .commands.help import shell_topic

        topic = shell_topic(words)
        return None if isinstance(topic, str) else topic

    def _help_of_neither(self, e: Exception, typed: list[str]) -> str | None:
        """For `minitf help WORD` of a word that names no command and no setting: what `:help WORD` says, in the
        shell's words ("No such command" left settings out, which help also explains)."""
        at = _command_at(typed, self.params)
        if at is None or typed[at] != "help" or at + 1 >= len(typed) \
                or not e.format_message().startswith("No such command"):
            return None
        from .commands.help import no_such_help

        with speaking(SHELL):
            return str(no_such_help(typed[at + 1]))

    def _command_path(self, e: Exception, args: list[str]) -> str:
        """`minitf` or `minitf CMD`: whose option a usage error without a context names (an option given no value)."""
        at, name = _command_at(args, self.params), getattr(e, "option_name", None)
        after = at is not None and args[at] in self.commands and name is not None \
            and any(a == name or a.startswith(f"{name}=") for a in args[at + 1 :])  # `--n`, `--cache=maybe`
        return f"minitf {args[at]}" if after else "minitf"

    def _dashed_text(self, e: Exception, args: list[str]) -> str:
        """For a text that starts with a dash (`minitf tok -5`, a script's `minitf gen "$PROMPT"`), which Click reads
        as an option: after `--` it is the command's text. Empty where the command takes no text, or the word looks
        like a misspelt long option (`--temp`)."""
        name, ctx = getattr(e, "option_name", None), getattr(e, "ctx", None)
        if not name or ctx is None or ctx.parent is None or ctx.info_name not in args:
            return ""
        if not any(p.param_type_name == "argument" and p.name not in (OPTION_WORDS, PAIRS) for p in ctx.command.params):
            return ""
        command_at = args.index(ctx.info_name)
        words = args[command_at + 1 :]
        at = next((i for i, w in enumerate(words) if w.startswith(name) and not w.startswith("--")), None)
        if at is None:
            return ""
        positional = REGISTRY[ctx.info_name].positional if ctx.info_name in REGISTRY else None
        if positional is not None and not positional.dash:  # after --, it is refused all the same (`minitf save -x`)
            return (f"; a new checkpoint's name cannot start with '-' (it reads as an option): choose another, "
                    f"e.g. {words[at].lstrip('-') or 'run1'}")
        options, text, i = [], [words[at]], at + 1  # the command's options after the text stay options
        while i < len(words):
            option = next((p for p in ctx.command.params if p.param_type_name == "option"
                           and words[i].split("=", 1)[0] in (*p.opts, *p.secondary_opts)), None)
            take = 0 if option is None else 1 if option.is_flag or "=" in words[i] else 2
            (options if take else text).extend(words[i : i + (take or 1)])
            i += take or 1
        line = shlex.join(["minitf", *args[: command_at + 1], *words[:at], *options, "--", *text])
        return f"; a text that starts with - goes after --: {line}"

    def _set_apart(self, e: Exception, args: list[str]) -> str | None:
        """For `minitf --set lr 0.1 train`, where Click takes the value for the command ("No such command '0.1'"):
        what `:set lr 0.1` says in the REPL, with the line written with the pair as one word."""
        asked = re.match(r"No such command '(.*)'", e.format_message())
        at = next((i for i in range(2, len(args)) if asked and args[i] == asked.group(1) and args[i - 2] == "--set"
                   and "=" not in args[i - 1]), None)
        param = REGISTRY["set"].param_named(args[at - 1]) if at is not None else None
        if param is None:
            return None
        from .parsing import convert

        try:  # the line suggested must work as typed: a value the setting cannot take is said with it
            convert(param, args[at])
        except UserError as bad:
            return f"a setting and its value go as one word (--set {param.name}={param.metavar}), and {bad}"
        fixed = [*args[: at - 1], f"{args[at - 1]}={args[at]}", *args[at + 1:]]
        return f"a setting and its value go as one word: {shlex.join(['minitf', *fixed])}"

    def _setting_as_command(self, e: Exception, args: list[str]) -> str | None:
        """For a setting's KEY=VALUE where the command goes (`minitf --set lr=0.1 steps=5 config`, a --set's second
        pair pasted after it): a setting, which goes in a --set of its own, not "did you mean 'step'?". A key a
        letter or so from a setting's (`stepz=5`) is that setting misspelt."""
        asked = re.match(r"No such command '(.*?)'", e.format_message())
        at = _command_at(args, self.params) if asked else None
        key, eq, value = args[at].partition("=") if at is not None and args[at] == asked.group(1) else ("", "", "")
        meant = _setting_meant(key) if eq and key.isidentifier() else None
        if meant is None:
            return None
        param, exact = meant
        said = f"{args[at]} is a setting, not a command; a setting" if exact else \
            f"{args[at]} is no command; did you mean the setting {param.name}? A setting"
        # every pair up to the command gets its own --set: nanoGPT's `--set n_embd=384 n_head=6 n_layer=6 ...` was
        # given a line that set n_head alone, and each paste failed on the next pair, five times over
        pairs, end = [], at
        while end < len(args):
            key, eq, value = args[end].partition("=")
            meant = _setting_meant(key) if eq and key.isidentifier() else None
            if meant is None:
                break
            each, named = meant
            try:  # the line suggested must work as typed: a value the setting cannot take is said with it
                convert(each, value)
            except UserError as bad:
                return f"{said} goes with --set before the command (--set {each.name}={each.metavar}), and {bad}"
            pairs += ["--set", f"{key if named else each.name}={value}"]
            end += 1
        fixed = [*args[:at], *pairs, *args[end:]]
        return f"{said} goes with --set: {shlex.join(['minitf', *fixed])}"

    def _other_case(self, e: Exception, args: list[str]) -> str | None:
        """For a command typed in another case (`minitf TRAIN`), which Click's guess misses: the name it is. Said, not
        run as the REPL runs `:TRAIN`: a line typed in the shell goes into scripts and notes, where one spelling of a
        command, the one --help and Tab completion give, is the one to keep."""
        asked = re.match(r"No such command '(.*?)'", e.format_message())
        at = _command_at(args, self.params) if asked else None
        if at is None or args[at] != asked.group(1):
            return None
        if _named(args[at].lower(), self.commands) not in self.commands:  # `TF`: tf, score's other name
            return None
        fixed = [*args[:at], args[at].lower(), *args[at + 1:]]
        return f"unknown command {args[at]!r}; commands are lower case: {shlex.join(['minitf', *fixed])}"

    def _a_script(self, e: Exception, args: list[str]) -> str | None:
        """For a file where the command goes: a script of lines (`minitf lesson.txt`), which minitf reads from
        standard input, or a text to train on (`minitf notes.txt train`, where --data was meant), not "unknown
        command". Which, its first lines say (_reads_as_script): a training text run as a script was every line a
        prompt."""
        asked = re.match(r"No such command '(.*?)'", e.format_message())
        at = _command_at(args, self.params) if asked else None
        if at is None or args[at] != asked.group(1) or not os.path.isfile(args[at]):
            return None
        file = args[at]
        if _reads_as_script(file):
            line = shlex.join(["minitf", *args[:at]])
            told = any(a == "--transcript" for a in args[:at])
            return (f"{file} is a file, not a command; to run its lines as a script: {line} < {shlex.quote(file)}"
                    + ("" if told else " (--transcript prints each line before its output)"))
        if any(a == "--data" or a.startswith("--data=") for a in args[:at]):
            return None  # a --data given already: the file is no data meant for it
        line = shlex.join(["minitf", *args[:at], "--data", file, *args[at + 1:]])
        return f"{file} is a file, not a command; to train on its text, give it with --data: {line}"

    def _setting_as_option(self, e: Exception, args: list[str]) -> str | None:
        """For a setting typed as an option (`minitf --seed 3 tok a`, `minitf train --threads 1`), which no command
        and not minitf takes: the line that gives it with --set before the command, its value the word after it.
        Click guessed an option of another name (`--set 3`, which failed again, or `--fresh` for --threads)."""
        name = getattr(e, "option_name", None)
        if not name or not name.startswith("--") or not e.format_message().startswith("No such"):
            return None
        key = name[2:]
        param = REGISTRY["set"].param_named(key)
        spelled = param is not None and key.replace("-", "_").lower() in (param.name, *param.aliases)
        if not spelled or param.setting is None or param.refusal is not None:
            return None
        at = next((i for i, a in enumerate(args) if a == name or a.startswith(f"{name}=")), None)
        if at is None:
            return None
        given, eq, value = args[at].partition("=")
        end = at + 1
        if not eq and at + 1 < len(args) and not args[at + 1].startswith("-") and args[at + 1] not in self.commands:
            value, end = args[at + 1], at + 2
        elif not eq and param.type is bool:  # `--compile tok a`: an on/off setting named alone is on
            value = "on"
        said = f"{name} is a setting, not an option; a setting goes with --set before the command"
        try:  # the line suggested must work as typed: a value the setting cannot take is said with it
            convert(param, value)
        except UserError as bad:
            return f"{said} (--set {param.name}={param.metavar}), and {bad}"
        rest = [*args[:at], *args[end:]]
        command_at = next((i for i, a in enumerate(rest) if a in self.commands), None)
        before = at if command_at is None else min(at, command_at)
        fixed = [*rest[:before], "--set", f"{param.name}={value}", *rest[before:]]
        load = next((i for i, a in enumerate(rest[:before]) if a == "--load" or a.startswith("--load=")), None)
        if load is not None and _rebuilds(param):
            # the --set line fails there (apply_settings: "would rebuild the model loaded from ..."): its refusal, with
            # the two lines its fix names
            source = rest[load].partition("=")[2] or (rest[load + 1] if load + 1 < len(rest) else "")
            unloaded = [*fixed[:load], *fixed[load + (1 if "=" in rest[load] else 2):]]
            return (f"{said}, and {param.name} would rebuild the model loaded from {source} and reset its weights; "
                    f"leave it out to use its weights ({shlex.join(['minitf', *rest])}), or leave out --load to "
                    f"start a new model ({shlex.join(['minitf', *unloaded])})")
        return f"{said}: {shlex.join(['minitf', *fixed])}"

    def _near_own(self, e: Exception, args: list[str]) -> str | None:
        """For an option before the command that names none (`minitf --jsn config`, `--JSON`, `-v`), where Click's
        guess looked among minitf's own options alone ("Possible options: --set"): the option meant, minitf's own
        or the command's (which goes after it), in the line that runs."""
        name, ctx = getattr(e, "option_name", None), getattr(e, "ctx", None)
        if not name or (ctx is not None and ctx.parent is not None) or not e.format_message().startswith("No such"):
            return None
        at = next((i for i, a in enumerate(args) if a == name or a.startswith(f"{name}=")), None)
        if at is None:
            return None
        command_at = next((i for i in range(at + 1, len(args)) if args[i] in self.commands), None)
        commands = [self.commands[args[command_at]]] if command_at is not None else \
            [c for c in self.commands.values() if not c.hidden]
        own = {o for p in self.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")} | {"--help"}
        theirs = {o for c in commands for p in c.params
                  for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())) if o.startswith("--")}
        names = sorted(own | theirs)
        folded = [o for o in names if o.lower() == name.lower()]  # `--JSON`
        # `-v`, `-V`: the one long option of minitf's own its letter begins (--version); a command's short options are
        # the command's to say, after it
        lettered = [o for o in sorted(own) if o[2:3] == name[1:].lower()] if len(name) == 2 else []
        meant = folded or (lettered if len(lettered) == 1 else []) or \
            difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.7)
        if not meant:
            return None
        best = meant[0]
        fixed = [*args[:at], best + args[at][len(name):], *args[at + 1:]]
        if best in own:
            return f"no such option {name}; did you mean {best}? {shlex.join(['minitf', *fixed])}"
        moved = self._moved_after(best, fixed)
        return f"no such option {name}; did you mean {best}? {moved}" if moved else None

    def _one_dash(self, e: Exception, args: list[str]) -> str | None:
        """For a long option typed with one dash (`minitf train -steps 3`, Go's and Java's way), which Click reads as
        -s and refuses as "No such option: -s": what the REPL says of `:train -steps 3`, with the line written with
        two dashes. A word that names no option of the command (`minitf tok -5`) is left to the others."""
        name, ctx = getattr(e, "option_name", None), getattr(e, "ctx", None)
        if not name or name.startswith("--") or ctx is None:
            return None
        longs = {o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
        start = args.index(ctx.info_name) + 1 if ctx.parent is not None and ctx.info_name in args else 0
        for i in range(start, len(args)):
            word = args[i]
            if word == "--":
                break
            key = word.split("=", 1)[0]
            if word.startswith(name) and not word.startswith("--") and "-" + key.replace("_", "-") in longs:
                fixed = [*args[:i], "-" + word, *args[i + 1:]]
                return f"{clip(key)} has one dash: an option takes two, {shlex.join(['minitf', *fixed])}"
        return None

    def _misplaced(self, e: Exception, args: list[str]) -> str | None:
        """For an option of `minitf` itself typed after the command (`minitf train --set lr=0.02`): where it goes.

        Typer reads --set, --data, --device, --load, --checkpoint-dir and --debug only before the
        command, as git and docker read theirs; the message gives the line with the option moved there.
        """
        name, ctx = getattr(e, "option_name", None), getattr(e, "ctx", None)
        option = next((p for p in self.params if name in p.opts), None) if name else None
        if option is None or ctx is None or ctx.parent is None or ctx.info_name not in args:
            return None
        command_at = args.index(ctx.info_name)
        if not any(i > command_at and (a == name or a.startswith(name + "=")) for i, a in enumerate(args)):
            return None
        # every option of minitf's after the command moves, not the one Click stopped at alone: the line given for
        # `minitf train --set n_layers=1 --set d_model=16` failed again on the second --set
        own = {o for p in ctx.command.params for o in (*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ()))}
        before, after, i = [], [], command_at + 1
        while i < len(args):
            word = args[i]
            if word == "--":  # the text after it stays as it is
                after.extend(args[i:])
                break
            mine = next((p for p in self.params if word.split("=", 1)[0] in p.opts), None)
            if mine is None or word.split("=", 1)[0] in own:
                after.append(word)
                i += 1
                continue
            end = i + 1 if mine.is_flag or "=" in word else min(i + 2, len(args))
            before.extend(args[i:end])
            i = end
        if option.is_eager:  # `train --version`: the version alone, which runs no command (_show_version)
            return f"{name} is an option of minitf itself, which runs no command: minitf {name}"
        moved = args[:command_at] + before + [args[command_at]] + after
        return f"{name} is an option of minitf itself, so it goes before the command: {shlex.join(['minitf', *moved])}"

    def _early(self, e: Exception, args: list[str]) -> str | None:
        """For an option of a command typed before it (`minitf --json config`): it goes after the command."""
        return self._moved_after(getattr(e, "option_name", None), args)

    def _moved_after(self, name: str | None, args: list[str]) -> str | None:
        """Where option `name` of a command, typed before the command in `args`, goes: the line with it after."""
        if any(name in p.opts for p in self.params):  # minitf's own (`minitf --data` with no value): Click's word
            return None  # stands ("requires an argument"); it was told to go after a command, where it fails again
        at = next((i for i, a in enumerate(args) if a == name or a.startswith(f"{name}=")), None) if name else None
        if at is None:
            return None
        command_at = next((i for i in range(at + 1, len(args)) if args[i] in self.commands), None)
        if command_at is None:  # `minitf --json`, `printf ':config\n' | minitf --json`: no command after it at all
            if any(a in self.commands for a in args[:at]):  # `minitf gen --n`: after its command, where it belongs
                return None
            return self._no_command_after(name, args[at:])
        command = self.commands[args[command_at]]
        option = next((p for p in command.params if name in getattr(p, "opts", ())), None)
        if option is None:
            return None
        end = at + 1 if option.is_flag or "=" in args[at] else min(at + 2, command_at)
        moved = args[:at] + args[end:command_at + 1] + args[at:end] + args[command_at + 1:]
        return (f"{name} is an option of {args[command_at]}, so it goes after the command: "
                f"{shlex.join(['minitf', *moved])}")


    def _no_command_after(self, name: str, typed: list[str]) -> str | None:
        """For an option of commands typed with no command after it: which commands take it, where it goes. Click said
        "No such option: --json (Possible options: --version)", as if --version were what was meant."""
        having = [c for c, command in self.commands.items()
                  if any(name in getattr(p, "opts", ()) for p in command.params) and not command.hidden]
        if not having:
            return None
        if len(having) == 1:
            return (f"{name} is an option of {having[0]}, so it goes after the command: "
                    f"{shlex.join(['minitf', having[0], *typed])}")
        every = len(having) == sum(not command.hidden for command in self.commands.values())
        shown = "every command" if every else "commands (" + ", ".join(having[:4]) + (", ...)" if len(having) > 4
                                                                                    else ")")
        return f"{name} is an option of {shown}, so it goes after one: minitf COMMAND {shlex.join(typed)}"


def _undecodable(words: list[str]) -> str | None:
    """The refusal of a command-line word that is not UTF-8 (a file name or a text in another encoding); None where
    every word reads (parsing.undecodable)."""
    shown = undecodable(words)
    if shown is None:
        return None
    if all(_utf8_under_another_locale(word) for word in words):  # `LC_ALL=C minitf tok héllo`: the locale's doing
        return (f"a word of the command line was read in this locale's encoding, {sys.getfilesystemencoding()}, "
                f"which cannot read its bytes ({shown}); start minitf under a UTF-8 locale (LC_ALL=C.UTF-8 minitf ...)")
    return (f"a word of the command line is not UTF-8 text (bytes {shown}); give it as UTF-8 text (a terminal set to "
            "another encoding sends its characters so: set it to UTF-8)")


def _utf8_under_another_locale(word: str) -> bool:
    """Whether `word`'s bytes, as the command line gave them, are UTF-8 text: then a locale that is not UTF-8 read
    them (Python decodes argv in the locale's encoding), and the word itself is right."""
    try:
        os.fsencode(word).decode("utf-8")
    except UnicodeError:
        return False
    return True


def _help_word(args: list[str], commands, options=()) -> list[str]:
    """`minitf help` is `minitf --help`, and `minitf help train` is `minitf train --help`, as `:help train` is in
    the REPL (where `help` alone works too); `minitf help lr` of a setting is `minitf set lr`, as `:set lr` is, and
    the words after it stay (`minitf help lr n --json`; `minitf help set lr` too, `help lr=`, `help learning rate`
    and `help :train` as `:help` reads them). Of a word after help that names neither, Typer says "No such command".
    minitf's own options may come first (`minitf --data sort help lr`); `options` are they, to step over."""
    at = _command_at(args, options)
    if at is None or args[at] != "help":
        return args
    before, word = args[:at], args[at + 1 : at + 2]
    if word and word[0].startswith(":") and len(word[0]) > 1:  # `help :train`, as the REPL writes it
        word = [word[0][1:]]
    if not word or word[0] == "help" or word[0].startswith("-"):  # `minitf help help`: what help does is the list it
        return before + ["--help"]  # gives; `minitf help --json` too (help is text), not "--json goes after a command"
    after = args[at + 1 :]
    name = _named(word[0], commands)
    if name in commands:
        key = after[1].split("=")[0] if len(after) > 1 else ""
        if REGISTRY[name].pairs and _setting(key):  # `help set lr`: the setting, as `:help set lr` shows it
            return before + [name, key, *after[2:]]
        param = REGISTRY[name].param_named(key.lstrip("-").replace("-", "_")) if key else None
        if param is not None and param.refusal is None and param.setting is not None:
            return before + ["set", param.setting.name, *after[2:]]  # `help train lr`: the setting, as in the REPL
        return before + [name, "--help"]
    key = word[0].split("=")[0] or word[0]  # `help lr=`: the setting lr, as `:help lr=` and `:set lr=` spell it
    if _setting(key) or _shown_by_set(key):
        return before + ["set", key, *after[1:]]
    texts = [w for w in after if not w.startswith("-")]
    joined = "_".join(texts)  # `help learning rate`: learning_rate, its words joined, as `:help learning rate` reads
    if len(texts) > 1 and _setting(joined):
        return before + ["set", joined, *(w for w in after if w.startswith("-"))]
    from .commands.help import shell_topic

    if isinstance(key := shell_topic([w.removeprefix(":") for w in texts]), str):  # `help tied`: the one setting
        return before + ["set", key, *(w for w in after if w.startswith("-"))]  # it is, as `:help tied` shows it
    return before + word  # Typer says "No such command" of it


def _setting(key: str) -> bool:
    """Whether `key` names a setting (or another spelling of one) that `minitf set KEY` shows."""
    param = REGISTRY["set"].param_named(key)
    return param is not None and param.setting is not None


def _shown_by_set(key: str) -> bool:
    """Whether `minitf set KEY` shows `key` though it is no setting: an action of set's that takes one of its choices
    (preset), which `minitf help preset` refused where `minitf set preset` showed it (commands.settings.shown_setting)."""
    param = REGISTRY["set"].param_named(key)
    return param is not None and not param.positional and param.refusal is None and bool(param.choices)


def _named(word: str, commands) -> str:
    """A subcommand's own name for `word`: one of a command's other names (`tf` for score, `errors` for mistakes,
    as `:tf` and `:errors` are in the REPL) is that command; any other word stays as it is."""
    command = None if word in commands else REGISTRY.names().get(word)
    return command.name if command is not None and command.name in commands else word


def _other_name(args: list[str], commands, options=()) -> list[str]:
    """The arguments with the command called by its own name: `minitf tf TEXT` is `minitf score TEXT`."""
    at = _command_at(args, options)
    return args if at is None else [*args[:at], _named(args[at], commands), *args[at + 1 :]]


def _command_at(args: list[str], options) -> int | None:
    """Where the command stands among the arguments: after minitf's own options and their values."""
    flags = {name for p in options if getattr(p, "is_flag", False) for name in p.opts}
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            return i
        if arg == "--":
            return None
        i += 1 if arg in flags or "=" in arg else 2  # `--data sort`, `--set=lr=0.02`, `--debug`
    return None


def _flag_words(args: list[str], commands, options=()) -> list[str]:
    """`minitf gen --cache off` is `--no-cache`, and `--cache on` (or `--cache=on`) `--cache`, as `:gen --cache off`
    is in the REPL: Click reads a flag alone and would take the word for the command's text. Words after `--` are
    text; `options` are minitf's own, to step over to the command."""
    at = _command_at(args, options)
    if at is None or args[at] not in commands:
        return args
    flags = {name: p for p in commands[args[at]].params if getattr(p, "is_flag", False) for name in p.opts}
    out, i = args[: at + 1], at + 1
    while i < len(args):
        if args[i] == "--":
            return out + args[i:]
        name, eq, value = args[i].partition("=")
        flag = flags.get(name)
        if flag is not None and not eq and i + 1 < len(args) and args[i + 1].lower() in BOOL_WORDS:
            eq, value, i = "=", args[i + 1], i + 1  # `--cache off`: the word after the flag is its value
        elif flag is not None and not eq and i + 1 < len(args):
            near_bool(name, args[i + 1], f"to begin the text with {args[i + 1]!r}, give the option its value: "
                      f"{name} on {args[i + 1]}")  # `--cache of`: a typo of one, not text
        if flag is not None and eq and value.lower() in BOOL_WORDS:
            if BOOL_WORDS[value.lower()] or flag.secondary_opts:  # `--fresh off` of a switch off unless given: left out
                out.append(flag.opts[0] if BOOL_WORDS[value.lower()] else flag.secondary_opts[0])
        else:
            out.append(args[i])
        i += 1
    return out


def _dashes(args: list[str]) -> list[str]:
    """`--eval_every 50` is `--eval-every 50`, as in the REPL (options are declared with dashes)."""
    out = []
    for i, arg in enumerate(args):
        if arg == "--":
            return out + args[i:]
        if arg.startswith("--") and "_" in arg.split("=", 1)[0]:
            key, eq, value = arg.partition("=")
            arg = key.replace("_", "-") + eq + value
        out.append(arg)
    return out


class _Command(_FlagsUntyped, TyperCommand):
    """A subcommand whose --help lists flags without a `<bool>` type (a flag takes no value), and its
    text (a prompt, a name: any number of words) as `<text>`, not as Python's `<list[str]>`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for param in self.params:
            if param.param_type_name == "argument" and param.nargs == -1:
                param.display_type_rich = lambda ctx: "<text>"  # what Typer's rich help shows in the type column

    def parse_args(self, ctx, args):
        if not ctx.resilient_parsing:  # as minitf's own options: Tab completion never refuses
            _refuse_twice(self.params, args)
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter):
        if _narrow(formatter):
            return super(TyperCommand, self).format_help(ctx, formatter)  # Click's own: words wrap, none are cut
        return super().format_help(ctx, formatter)


def _refuse_twice(params, args: list[str], own: bool = False) -> None:
    """An option given twice (`minitf gen --n 5 --n 6`, `--cache --no-cache`, `minitf --data sort --data add
    train`) is refused, as `:gen --n 5 --n 6` and `minitf gen n=5 --n 6` are: Click would keep the last one without
    a word. A flag said twice the same way (`--json --json`) asks for one thing; --set is given once per setting.
    `own`: the options are minitf's own, named as typed (--data); a command's are named as the REPL names them (n)."""
    before_text = args[: args.index("--")] if "--" in args else args
    if any(word in ("-h", "--help") for word in before_text):  # --help shows the help, whatever else is typed
        return
    names = {name: p for p in params if p.param_type_name == "option" and not p.multiple
             for name in (*p.opts, *p.secondary_opts)}
    repeatable = {name for p in params if p.param_type_name == "option" and p.multiple for name in p.opts}
    seen: dict[str, tuple[str, bool]] = {}  # option -> (the words that gave it, a flag's on or off)
    i = 0
    while i < len(args) and args[i] != "--":  # after --, words are text
        name, eq, _ = args[i].partition("=")
        option = names.get(name) if args[i].startswith("-") else None
        if option is None:
            i += 2 if name in repeatable and not eq else 1  # --set's value is no option of its own
            continue
        takes = not option.is_flag and not eq and i + 1 < len(args)
        typed = f"{name} {args[i + 1]}" if takes else args[i]
        on = name in option.opts
        if option.name in seen and not (option.is_flag and seen[option.name][1] == on):
            _command_line_error(f"{option.opts[0] if own else option.name} is given twice "
                                f"({seen[option.name][0]} and {typed}); give it once")
            raise typer.Exit(2)  # the command line itself is wrong (docs: exit status)
        seen[option.name] = (typed, on)
        i += 2 if takes else 1


def _show_version(value: bool) -> None:
    if value:
        typed = _TYPED.get()
        at = _command_at(typed, _ROOT_OPTIONS[0])
        rest = typed[at:] if at is not None else typed[typed.index("--") + 1:] if "--" in typed else []
        if rest:  # `minitf --version train`: the version alone, and the rest of the line was dropped without a word
            _command_line_error(f"--version prints minitf's version alone and runs nothing after it (got "
                                f"{clip(shlex.join(rest))!r}): minitf --version")
            raise typer.Exit(2)  # the command line itself is wrong
        try:
            print(f"minitf {__version__}", flush=True)
        except BrokenPipeError:  # `minitf --version | head -0`: Click, which runs this, exits 1 for a closed pipe
            from .dispatch import silence_stdout

            silence_stdout()
            raise SystemExit(READER_LEFT) from None
        raise typer.Exit(0)


class _State:
    def __init__(self, session: Session, debug: bool, quiet: bool = False):
        self.session = session
        self.debug = debug
        self.quiet = quiet  # a non-zero rank under torchrun: errors only


def apply_settings(session: Session, pairs: list[str], quiet: bool = False, loaded: str | None = None) -> None:
    """`--set key=value` (repeatable): the same parsing and checks as `:set key=value`. What `:set` would
    only note (threads=N past the CPUs, a loaded model kept before a rebuild) goes to stderr, unless
    `quiet` (a non-zero rank under torchrun, which prints errors only); its usual "key: old -> new" lines
    are left out, as the command line already says them."""
    if not pairs:
        return
    from .render.live import QuietReporter
    from .reporter import Reporter

    _missing_pair_value(REGISTRY["set"], [p for value in pairs for p in set_pairs(value)])
    command, args = parse_line(":set " + " ".join(pairs), REGISTRY)
    names = args.get(command.positional.name)  # `--set lr`: a name alone, which `minitf set lr` shows, sets nothing
    if names:
        name, *rest = names.split()
        value = (rest[1] if rest[0] == "=" else rest[0][1:]) if rest and len("".join(rest[:2])) > 1 else ""
        if value and rest[0].startswith("="):  # `--set "lr = 0.02"`, `--set "lr =0.02"`
            raise UserError(f"a setting and its value go as one word: --set {name}={value}")
        param = command.find_param(name)  # `--set foo`: "unknown option 'foo' ...; did you mean ...?"
        # a setting shows its value; an action of set's with choices (preset) has no value to show, only choices
        shows = (f"minitf set {name} shows its value now" if setting_help(session, name) is not None else
                 f"one of: {', '.join(map(str, param.choices))}" if param.choices else None)
        # a missing value: a wrong command line (2), as `train --steps` with none is (a setting's name alone gave 1)
        raise UsageError(f"a setting needs a value, got {clip(name)!r} alone: --set {name}=VALUE"
                        + (f" ({shows})" if shows else ""))
    if loaded is not None and (keys := rebuilding_keys(session, args)):
        shown = " and ".join(keys)  # the line reads "error: --set: n_layers would rebuild ..."
        raise UserError(f"{shown} would rebuild the model loaded from {loaded} and reset its weights; leave "
                        f"{'it' if len(keys) == 1 else 'them'} out to use its weights, or leave out --load to "
                        "start a new model")
    from .commands.settings import followed_recipe

    reporter = Reporter() if quiet else QuietReporter(_stderr())
    if (line := followed_recipe(run_command(session, command, args, reporter))) is not None:
        reporter.notice(line)  # what :set's rendered result says, which the shell does not render


def root(
    ctx: typer.Context,
    version: bool = typer.Option(False, "--version", callback=_show_version, is_eager=True, metavar="",
                                 help="Print minitf's version and exit."),
    debug: bool = typer.Option(False, "--debug", metavar="", help="Show the traceback of internal errors."),
    transcript: bool = typer.Option(False, "--transcript", metavar="",
                                    help="A script's lines (minitf --transcript < lesson.txt): print each before "
                                         "its output."),
    device: Optional[str] = typer.Option(None, "--device", metavar="NAME", help="auto, cpu, cuda, cuda:N or mps.",
                                         autocompletion=lambda ctx, incomplete: _like("device", ctx, incomplete)),
    data: Optional[str] = typer.Option(
        None, "--data", metavar="NAME|PATH", help=escape(f"{', '.join(spec_forms())} or a file path."),
        autocompletion=lambda ctx, incomplete: _like("data", ctx, incomplete),
    ),
    settings: List[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE",
        help="A setting applied before the command, read as minitf set reads it (repeatable).",
        autocompletion=lambda ctx, incomplete: _pair_completion(REGISTRY["set"])(ctx, incomplete),
    ),
    checkpoint_dir: Optional[str] = typer.Option(
        None, "--checkpoint-dir", metavar="DIR",
        help="Where save, --load and ls keep checkpoints (default $MINITF_CHECKPOINT_DIR if set, else ./checkpoints).",
    ),
    load: Optional[str] = typer.Option(
        None, "--load", metavar="NAME",
        help="Start from a saved checkpoint (model, training run, data), or a Hugging Face folder with hf:PATH, "
             "as minitf load does; --set applies after it.",
        autocompletion=lambda ctx, incomplete: _like("load", ctx, incomplete),
    ),
) -> None:
    if _asks_help(ctx):  # `minitf --device foo train --help`: the help, whatever is wrong with the options before it
        return
    # Everything typed on this command line is shell syntax, and so is every message about it (a
    # REPL opened below speaks its own syntax for each command: dispatch.FrontDoor).
    ctx.with_resource(speaking(SHELL))
    # ...and a command line a message suggests makes this same session: it starts with these options.
    given = [("--device", device), ("--checkpoint-dir", checkpoint_dir), ("--data", data), ("--load", load)]
    ctx.with_resource(invoked_with([(o, v) for o, v in given if v is not None] + [("--set", s) for s in settings]))
    # An option given an empty value (a script's unset variable: --data "$DATA") is given, not left out: a missing
    # value, a wrong command line (status 2, docs: exit status), as `train --save ""` is; refused before anything
    # runs, never taken for the default (under torchrun `--device ""` was auto). (--load's and --set's below.)
    if (empty := _empty_option(device, data, checkpoint_dir)) is not None:
        _command_line_error(empty)
        raise typer.Exit(2)
    quiet = False
    if distributed.launched():
        if ctx.invoked_subcommand is None:
            _command_line_error("torchrun runs one command (e.g. train); the interactive shell runs in one process")
            raise typer.Exit(1)
        device = join_ranks(ctx, device or "auto")
        quiet = not distributed.is_main()
    try:  # ./checkpoints is under it, and torch's libraries fail to load without it (a fatal error, no message)
        os.getcwd()
    except FileNotFoundError:
        distributed.before_error()
        error(_stderr(), "the folder minitf was started in no longer exists (deleted or moved); cd to a folder that "
                         "exists and start minitf again")
        raise typer.Exit(1)
    try:  # a checkpoint folder under ~ with no home folder to name (core.paths.expand): one line, not a traceback
        session = Session(data_spec="pydoc" if data is None else data,
                          device_name="auto" if device is None else device, checkpoint_dir=checkpoint_dir)
    except UserError as e:
        distributed.before_error()
        error(_stderr(), phrase(e, "shell"))
        raise typer.Exit(1)
    # A --device that names no device is a mistake on the command line, refused before any command runs, as an unknown
    # --set key is: `minitf --device tpu ls` (or tok, set, data, config) exited 0. The command that reports the device
    # itself (Command.reports_device: device) runs and says it beside the devices there are, and the REPL warns and
    # opens, where :device NAME mends it. A device well named but not here (cuda without a GPU) is refused where it is
    # used. So is a --data file that is not there, refused here for every command: `minitf --data nosuch ls` exited 0
    # without a word, `config` with a warning amid its table.
    named = REGISTRY.names().get(ctx.invoked_subcommand or "")
    if device is not None and named is not None and not named.reports_device:
        from .commands.settings import device_problem
        from .core.device_names import well_formed

        if not well_formed(device):
            _command_line_error(device_problem(device))
            raise typer.Exit(1)
    if data is not None and named is not None:
        from .core.catalog import data_problem

        if (problem := data_problem(data)) is not None:
            # a file's error, which processes may meet apart (the file missing on one machine or for one process):
            # said as --load's is, the machine's first at once and another after a wait; said by the first alone,
            # a file missing for process 1 only was never said (process 0 reported a peer gone)
            distributed.before_error()
            error(_stderr(), f"--data: {problem}")
            raise typer.Exit(1)
    # --load "" and --set "" are refused before their commands run: a command's message would suggest a line with
    # the empty value in it again (`minitf --load '' load x`, `minitf --set '' set lr`).
    if load is not None and not load.strip():  # (after the session: its example names a checkpoint of its folder)
        _command_line_error(f"--load is empty; give a checkpoint's name, e.g. --load {_a_checkpoint(session)}, or "
                            "leave the option out to start a new model")
        raise typer.Exit(2)
    if any(not pair.strip() for pair in settings):
        _command_line_error("--set is empty; give KEY=VALUE, e.g. --set lr=1e-3 (minitf set --help lists the keys), "
                            "or leave the option out")
        raise typer.Exit(2)
    if (joined := _set_joined(settings)) is not None:
        _command_line_error(f"--set: {joined}")
        raise typer.Exit(2)  # the command line itself is wrong
    # before --load, which reads the folder
    try:
        refusal = _folder_as_option(settings, session.checkpoint_dir)
    except UsageError as e:
        _command_line_error(f"--set: {e}")
        raise typer.Exit(2) from None
    if refusal is not None:
        _command_line_error(f"--set: {refusal}")
        raise typer.Exit(1)
    loaded = None  # what --load brought: the REPL says it (a one-shot command's output is the command's alone)
    if load is not None:  # a line its error suggests leaves out the --load that failed (it would fail the same way)
        # the command after it, as typed: a line the load gives (a file to read in place of data gone) runs it again
        # (syntax.typed_again), where a bare `minitf --load NAME --data FILE`, pasted, opened the REPL
        command = (shlex.join([ctx.invoked_subcommand, *_command_words(ctx.command.params)])
                   if ctx.invoked_subcommand else "")
        with invoked_with([(o, v) for o, v in given if v is not None and o != "--load"]
                          + [("--set", s) for s in settings]), typed_after(command):
            loaded = load_checkpoint(session, load, data, debug, quiet)
    elif settings and data is not None:  # a setting may read the data (tokenizer=bpe:N): a bad --data is --data's
        with _one_line("--data", debug):
            # a large file is said before its seconds of reading (Session.data tells on_build), as a command says it
            from .render.live import QuietReporter

            before, session.on_build = session.on_build, None if quiet else QuietReporter(_stderr()).notice
            try:
                session.data  # noqa: B018 - read now, where its error names the option that gave it
            finally:
                session.on_build = before
    with _one_line("--set", debug):
        apply_settings(session, settings, quiet, load)
    if startup.interrupted():  # Ctrl-C while the session was set up, which an import may have swallowed
        raise _stopped_before_it_began()
    ctx.obj = _State(session, debug, quiet)
    if ctx.invoked_subcommand is None:
        raise typer.Exit(open_shell(session, debug, loaded, transcript, quiet))
    if transcript and not quiet:  # `minitf --transcript tok 3`: no script's lines to print (see _transcript_unused)
        _transcript_unused("a command given on the command line has none")


def _empty_option(device: str | None, data: str | None, checkpoint_dir: str | None) -> str | None:
    """The refusal of minitf's own --device, --data or --checkpoint-dir given an empty value, else None."""
    if device is not None and not device.strip():
        from .core.device_names import ACCEPTED_FORMS  # (not core.device, which loads torch)

        return f"--device is empty; give one of {ACCEPTED_FORMS}, or leave the option out for the default (auto)"
    if data is not None and not data.strip():
        from .core.catalog import CORPORA, TASKS

        default = inspect.signature(Session).parameters["data_spec"].default
        return (f"--data is empty; give one of {', '.join(CORPORA + TASKS)} or a file path, or leave the option out "
                f"for the default ({default})")
    if checkpoint_dir is not None and not checkpoint_dir.strip():
        return ("--checkpoint-dir is empty; give a directory, or leave the option out for the default "
                "($MINITF_CHECKPOINT_DIR if set, else ./checkpoints)")
    return None


def _asks_help(ctx: typer.Context) -> bool:
    """Whether the command's own words ask for its help (`--help`, `-h`, before any `--`): Click shows it only once
    minitf's options are through, and a bad one of them (--device foo, --load nope, --set lr=x) failed the command
    line before the help it asked for."""
    if ctx.invoked_subcommand is None or ctx.resilient_parsing:
        return False
    words = _command_words(ctx.command.params)
    words = words[: words.index("--")] if "--" in words else words
    return "--help" in words or "-h" in words


def _command_words(options) -> list[str]:
    """The words typed after the command, as typed (`--` included); `options`: minitf's own, to step over to it."""
    typed = _TYPED.get()
    at = _command_at(typed, options)
    return [] if at is None else typed[at + 1:]


def _a_checkpoint(session: Session) -> str:
    """The name of a checkpoint in the session's folder that loads (the newest first), for an example; else autosave,
    the name a first :train saves."""
    from .core import checkpoint as ckpt

    try:
        names = [row.name for row in ckpt.list_checkpoints(session.checkpoint_dir) if row.error is None]
    except (OSError, UserError):
        names = []
    return shlex.quote(names[0]) if names else "autosave"


def join_ranks(ctx: typer.Context, device: str) -> str:
    """Under torchrun: join the process group before the command and leave it after (core.distributed).

    Returns the device this rank trains on (each rank its own GPU; gloo on the CPU, nccl on CUDA).
    """
    from .core.device import resolve_device

    name = distributed.device_name_for_rank(device)
    here = int(os.environ.get("LOCAL_WORLD_SIZE") or 1)
    if here > 1 and name == device and name.strip().lower().startswith("cuda:"):  # NCCL refuses two on one GPU
        from .core.device import available_device_names

        # on a machine with no GPU, "give --device cuda" was refused in turn ("not available here")
        fix = ("give --device cuda, and each process takes its own (cuda:LOCAL_RANK)"
               if any(n.startswith("cuda") for n in available_device_names()) else
               "and this machine has no CUDA GPU: give --device cpu (gloo), or leave --device out")
        _command_line_error(f"--device {device} puts all {here} processes of this machine on one GPU; {fix}")
        raise typer.Exit(1)
    try:
        distributed.init(resolve_device(name))
    except UserError as e:
        if name != device and name.startswith("cuda:"):  # the rank's own GPU, which the user did not type
            from .core.device import available_device_names

            gpus = sum(n.startswith("cuda:") for n in available_device_names())
            error(_stderr(), f"--device {device}: process {distributed.local_rank()} of this machine takes {name} "
                             f"(one GPU per process, cuda:LOCAL_RANK), and this machine has {count(gpus, 'GPU')}; "
                             f"start at most {gpus} per machine: torchrun --nproc_per_node={gpus}")
        else:  # every process of the machine asked for the same device: the first says it is not here
            distributed.before_error()
            error(_stderr(), f"--device: {phrase(e, 'shell')}")
        raise typer.Exit(1)
    except Exception as e:
        error(_stderr(), f"torch.distributed could not start: {e}")
        raise typer.Exit(1)
    ctx.call_on_close(lambda: leave_ranks(ctx))
    return name


def leave_ranks(ctx: typer.Context) -> None:
    """After the command under torchrun: drop what holds the process group, then leave it (Trainer.leave_ranks
    says why the order matters)."""
    import gc

    if isinstance(ctx.obj, _State):
        ctx.obj.session.leave_ranks()
    gc.collect()  # whatever still refers to the wrapper from a reference cycle goes now, not at exit
    distributed.destroy()


def load_checkpoint(session: Session, name: str, data: str | None, debug: bool = False, quiet: bool = False):
    """`--load NAME`: the checkpoint brings its own data, so a different --data is a contradiction. A Hugging Face
    folder brings none: what it cannot read of the session's is said on stderr, unless `quiet` (a non-zero rank).

    Like every command, it fails in one line (_one_line). Returns :load's result.
    """
    from .render.live import QuietReporter
    from .reporter import Reporter

    class Said(QuietReporter):  # its notices named as --load's, as its data's below: they went unsaid (which snapshot
        def notice(self, text: str) -> None:  # of the Hugging Face cache `--load hf:gpt2` read, with its path)
            say(self.err, f"--load: {text}")

    with _one_line("--load", debug):
        result = run_command(session, REGISTRY.find("load"), {"name": name}, Reporter() if quiet else Said(_stderr()))
        from .core.data import lasting_spec

        if result.data_changed is not None and not quiet:  # the file rewritten since: said, as :load says it
            say(_stderr(), f"--load: data: {result.data_changed}", "yellow")
        if result.architecture is not None:  # a Hugging Face folder brings no data: the session's is read by its
            if result.data_missing is not None and not quiet:  # tokenizer, or cannot be, which no output would say
                say(_stderr(), f"--load: data: {result.data_missing}", "yellow")
        # A checkpoint keeps a file's path made absolute (lasting_spec): `--data notes.txt` names that same file. One
        # of an older minitf kept it as typed, relative: `--data $PWD/notes.txt` names that file too.
        elif data is not None and not {result.data_spec, lasting_spec(result.data_spec)} \
                & {data.strip(), lasting_spec(data.strip())} and not _same_task(data, session):
            # a checkpoint saved after a switch of data that kept the model, before any step on it (a model kept
            # by a rebuild, say): its weights trained on none of its data, and "was trained on" it was false
            unread = 0 < session.trainer.step <= session.data_since_step
            # data found beside the checkpoint where its saved path names none (data_saved) is taken as gone: --data
            # takes its place, as before the lookup (it was refused, naming the path found as the one it trained on)
            if result.data_missing is None and result.data_saved is None and not unread:
                raise UserError(
                    f"checkpoint {result.name} was trained on {result.data_spec!r}, not {data.strip()!r}; drop --data "
                    f"(the checkpoint brings its data), or switch after the load with train's own: "
                    f"{restore(result.name)} train --data {shlex.quote(data.strip())}"
                )
            _data_instead(session, result, data.strip(), quiet)
    return result


def _data_instead(session: Session, result, spec: str, quiet: bool) -> None:
    """`--load NAME --data SPEC` where the checkpoint's own data is gone, or is one its model trained no step on:
    SPEC takes its place, as `:data SPEC` after the load would, when it has the model's vocabulary (a rebuild would
    throw the loaded weights away)."""
    from .commands.shared import load_checked, switch_data

    data = load_checked(session, spec)
    why = ("is not where it was saved" if result.data_saved is not None else
           "is not available" if result.data_missing is not None else "came in after its last step")
    saved = result.data_saved or result.data_spec  # the path it trained on, not the file of its text found elsewhere
    if session.rebuild_needed(data=data):
        raise UserError(f"checkpoint {result.name}'s data ({saved}) {why}, and {spec} has "
                        "another vocabulary, which would need a new model; give data of the same vocabulary, or "
                        "leave out --load to train a new model on it")
    switch_data(session, spec, data)
    if not quiet:
        # the file of its text found beside it was just said found: "is not where it was saved" read as none there
        said = ("data, found beside it, is set aside for --data" if result.data_saved is not None else
                f"data {saved} {why}")
        say(_stderr(), f"--load: {result.name}'s {said}: it goes on with {spec}", "yellow")
    # as the REPL's greeting shows it: the data is there now
    result.data_missing, result.data_spec, result.data_saved = None, spec, None


def _stopped_before_it_began() -> typer.Exit:
    """The exit (130) of a Ctrl-C that came before the command took the signal over, said in one line, as a Ctrl-C a
    moment later is ("interrupted: minitf train stopped before it finished"): `minitf --load NAME gen` spends a second
    or two in torch's import and the load, and ended with 130 and no word at all. Said once a run of the shell."""
    if not _STOP_SAID:
        _STOP_SAID.append(True)
        error(_stderr(), "interrupted: minitf stopped before its command began")
    return typer.Exit(startup.STATUS)


_STOP_SAID: list[bool] = []  # _stopped_before_it_began has said its line


@contextlib.contextmanager
def _one_line(option: str, debug: bool):
    """What minitf's own `option` (--load, --set) runs fails in one line, as every command does: a user error says
    what to do, anything else is an internal error whose traceback only --debug shows."""
    try:
        yield
    except UserError as e:
        distributed.before_error()  # under torchrun, every process met it: the machine's first says it
        error(_stderr(), f"{option}: {phrase(e, 'shell')}")
        # a Ctrl-C the load said in its words ("load of NAME interrupted; nothing changed") is a stop: 130, not 1
        if isinstance(e, Interrupted):
            _STOP_SAID.append(True)  # said: not again as "stopped before its command began"
        raise typer.Exit(startup.STATUS if isinstance(e, Interrupted) else 2 if isinstance(e, UsageError) else 1)
    except typer.Exit:
        raise
    except Exception as e:
        # a Ctrl-C during torch's first import cuts a module in half, and the import that follows fails ("cannot
        # load module more than once per process" of numpy's, as an internal error): the stop is what happened
        if startup.interrupted() and not debug:
            raise _stopped_before_it_began() from None
        if debug:
            raise
        if (short := short_of_memory(e)) is not None:  # the memory limit, not a bug (torch's import under ulimit -v)
            distributed.before_error()
            error(_stderr(), f"{option}: {short}")
        else:
            internal_error(_stderr(), e)
        raise typer.Exit(1)


def _same_task(spec: str, session: Session) -> bool:
    """Whether `spec` spells the task the loaded checkpoint trained on another way (`sort` is `sort:6`)."""
    from .core.catalog import TASKS
    from .core.data import load_data

    if spec.strip().partition(":")[0] not in TASKS:
        return False
    try:  # a task is made, not read: cheap
        return load_data(spec).info() == session.data.info()
    except UserError:
        return False


def _transcript_unused(why: str) -> None:
    """A note on standard error that --transcript, given where no script's lines are read, printed nothing: `why`.
    A note, not a refusal: the run does all it was asked, and the switch would change only what it echoes."""
    say(_stderr(), f"--transcript prints the lines of a script piped in (minitf --transcript < lesson.txt); {why}, so "
                   "it does nothing here", "yellow")


# `main([])` (or minitf's options alone) from a notebook's cell: the REPL read the kernel's stdin as an empty script
# and returned 0, having done nothing and said nothing
IN_A_KERNEL = ("main([]) with no command opens the REPL, which needs a terminal to type in, and a Jupyter kernel has "
               "none; give it a command: main(['train', '--steps', '50']) (main(['--help']) lists them), or run the "
               "lab from Python: from minitf_repl import Lab")


def open_shell(session: Session, debug: bool = False, loaded=None, transcript: bool = False,
               quiet: bool = False) -> int:
    """The REPL on a terminal; line by line (no colour, no animation) when stdin is a pipe or a file. `loaded`: what
    --load brought (:load's result), which the REPL shows under its greeting. `transcript`: a script's lines are
    printed before their output (repl.run_lines); at the prompt the line typed is on the screen already, which a
    note says. `quiet`: no such note (a process of torchrun's other than the first)."""
    from . import repl

    if sys.stdin is None:  # `minitf <&-`: Python found no file descriptor 0 at start
        error(_stderr(), "standard input is closed, so there are no commands to read; run minitf in a terminal, "
                         "pipe commands into it, or give a command (minitf train)")
        return 1
    if "ipykernel" in sys.modules:  # main([]) in a kernel: its stdin is no script and no one types there
        _command_line_error(IN_A_KERNEL)
        return 2
    if sys.stdin.isatty():
        if transcript and not quiet:
            _transcript_unused("at a terminal each line typed is on the screen already")
        return repl.run_repl(session, console_for(), console_for(stderr=True), debug, loaded=loaded)
    # Piped commands are a script: a --data or --device the command line got wrong is refused before its first line,
    # as for a command (`minitf --data nosuch < script` exited 0 without a word, a line that read the data then
    # blamed as "line 1"). At a terminal the REPL opens with a warning, where :data or :device mends it.
    from .commands.settings import device_problem
    from .core.catalog import data_problem
    from .core.device_names import well_formed

    if not well_formed(session.device_name):
        _command_line_error(device_problem(session.device_name))
        return 1
    if loaded is None and (problem := data_problem(session.data_spec)) is not None:
        _command_line_error(f"--data: {problem}")
        return 1
    try:
        lines, text = _piped_script(session)
    except KeyboardInterrupt:
        return 130
    if text:  # refused before any line runs, as a text where the command goes is (`minitf notes.txt`)
        _command_line_error(_piped_text_refusal())
        return 2
    repl.preload()
    out = console_for(force_terminal=False, no_color=True)
    # a transcript reads command, output, command, output: its errors, verdicts and drawn seeds too, in their place
    # (`minitf --transcript < lesson.txt > out.txt` showed `minitf> :trian steps=30` followed by nothing, as if it
    # ran, its error on a stderr no one kept); the exit status still says a line failed
    err = out if transcript else console_for(stderr=True, force_terminal=False, no_color=True)
    try:
        return repl.run_lines(repl.stdin_lines(lines), session, out, err, debug, transcript)
    except KeyboardInterrupt:
        return 130


PIPED_TEXT_LINES = 20  # piped input whose first this many lines hold no command is a text, not a script
_READ_AHEAD = 1 << 20  # the most bytes read to decide it: a text's lines may be whole paragraphs
_PIPE_WAIT = 0.2  # seconds a pipe's next bytes are waited for while deciding it


def _piped_script(session: Session) -> tuple[Iterator[bytes], bool]:
    """Standard input's lines (bytes, for repl.stdin_lines), and whether they read as a text, not a script: its first
    PIPED_TEXT_LINES lines that are neither blank nor a comment are all there, and none of them is a command's line
    (FrontDoor.reads_as_text: with its ':', or one the script refuses as a command missing it). `minitf < notes.txt`
    ran each of a text's thousands of lines as a prompt, 200 tokens apiece (half an hour), where `minitf notes.txt`
    is told to give it with --data. A script of prompts alone still runs below that many: one written by hand is a
    few lines, and a text's first lines hold no ':' command.

    Only what is there already is read ahead: from a pipe, bytes that do not come within _PIPE_WAIT end the look (a
    program that writes a prompt and waits for its continuation), and the lines read so far count as a script."""
    stream = sys.stdin.buffer
    try:
        fd = stream.fileno()
        waits = not stat.S_ISREG(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):  # no descriptor: bytes in memory (a test runner's input)
        fd, waits = None, False
    door = FrontDoor(session, Console(file=io.StringIO()), front=FrontEnd(keyboard=False))  # a script's reader
    taken, ended, verdict = b"", False, None
    while verdict is None and not ended and len(taken) < _READ_AHEAD:
        if fd is None:
            chunk = stream.readline()
        elif waits and (on_windows() or not select.select([fd], [], [], _PIPE_WAIT)[0]):
            break  # (Windows' select takes no pipe: a pipe there is not looked into)
        else:
            chunk = os.read(fd, 1 << 16)
        ended, taken = not chunk, taken + chunk
        verdict = _reads_as_text(door, taken, ended)
    return _joined(taken, stream), bool(verdict)


def _reads_as_text(door: FrontDoor, taken: bytes, ended: bool) -> bool | None:
    """Whether the whole lines of `taken`, the start of standard input, read as a text (_piped_script); None: too few
    yet to tell (`ended`: nothing comes after them)."""
    from .repl import stdin_lines

    whole = taken if ended else taken[: max(taken.rfind(b"\n"), taken.rfind(b"\r")) + 1]
    counted = 0
    for line in stdin_lines(io.BytesIO(whole)):
        if not line.strip() or line.lstrip().startswith("#"):  # skipped by the script (repl.run_lines)
            continue
        if not door.reads_as_text(line.rstrip("\r\n")):
            return False
        counted += 1
        if counted == PIPED_TEXT_LINES:
            return True
    return False if ended else None


def _joined(taken: bytes, rest) -> Iterator[bytes]:
    """The lines of `taken`, read ahead, then those of `rest`, the stream after it: a line the read ahead cut in two
    is one line again."""
    for raw in io.BytesIO(taken):
        yield raw if raw.endswith(b"\n") else raw + rest.readline()
    yield from rest


def _piped_text_refusal() -> str:
    """The one line that refuses a text piped in for a script (_piped_script): --data trains on it, and where each
    line is meant as a prompt, `:gen -- ` before each (a line that starts with a command's name stays text) runs it."""
    file = _stdin_file()
    named = shlex.quote(file) if file is not None else "FILE"
    typed = shlex.join(["minitf", *_TYPED.get()])  # minitf's own options as typed (--load NAME) stay
    return (f"standard input reads as a text, not a script: none of its first {PIPED_TEXT_LINES} lines is a command "
            f"(a script's lines start with ':'); to train on it, give it with --data: minitf --data {named} train; "
            f"to continue each line as a prompt: grep . {named} | sed 's/^/:gen -- /' | {typed}")


def _stdin_file() -> str | None:
    """The file standard input reads (`minitf < notes.txt`) where the system names it (Linux's /proc), relative to the
    working folder where it is under it; None for a pipe, or where it is not named."""
    try:
        path = os.readlink("/proc/self/fd/0")
    except OSError:
        return None
    if not os.path.isfile(path):  # `pipe:[1234]`, /dev/null
        return None
    relative = os.path.relpath(path)
    return path if relative.startswith(os.pardir) else relative


# --- one subcommand per registry command ---------------------------------------------------------
def _option_names(p) -> list[str]:
    dashed = p.name.replace("_", "-")
    if p.type is bool:
        # a switch that is off unless given (`--fresh`) has no `--no-` form to show: a column of its own for it alone
        # squeezed the names beside it (`--eval-every,--eval-inte…` in train --help); `--fresh off` still reads
        return [f"--{dashed}/--no-{dashed}"] if p.default is not False else [f"--{dashed}"]
    short = [f"-{p.short}"] if p.short else []
    return [f"--{dashed}"] + [f"--{alias.replace('_', '-')}" for alias in p.aliases] + short


# What the registry's help names as a REPL command (`:set lr`, `:train watch=lens`), --help says as the shell types it:
# settings, a checkpoint and the data go with minitf's own options (a one-shot command's session ends with it).
_AS_OPTION = {"set": "minitf --set", "load": "minitf --load", "data": "minitf --data"}
_REPL_COMMAND = re.compile(r"(?<![\w`:/]):([a-z]+)\b")


def shell_words(text: str, registry: Registry = REGISTRY) -> str:
    """`text` with each `:command` of `registry` written as the shell types it: `minitf train`, `minitf --set lr`; the
    REPL's own parts (a line without ':', :help) stay as they are."""
    def word(match: re.Match) -> str:
        name = match.group(1)
        command = registry.get(name)
        if command is None or command.repl_only:
            return match.group(0)
        return _AS_OPTION.get(name) or f"minitf {name}"

    return _REPL_COMMAND.sub(word, text)


def _summary(command) -> str:
    """A command's line in `minitf --help` and the head of `minitf CMD --help`, in the shell's words. (gen's summary
    names the REPL where it speaks of the REPL's plain lines: true in both.)"""
    return shell_words(command.summary)


def _help(p) -> str:
    """An option's line in --help: its help (a phrase without a final period), then its choices and default, each
    joined on as a clause of the same sentence ("... (default: a trained model continues); one of: new, continue")."""
    text = _setting_default(p, shell_words(p.help or ""))
    if p.choices:
        text += f"{'; o' if text else 'O'}ne of: {', '.join(map(str, p.choices))}"
    if p.default is not None and not p.positional:
        text += f" (default {fmt.value(p.default)})"  # a switch's as on|off, as :help and :config say it
    return escape(text)


def _setting_default(p, text: str) -> str:
    """`text`, an option's help, with the value beside the setting it names as its default ("(default: the
    temperature setting, 0.8)"): a one-shot command's session starts from the declared value, which the page never
    said. A setting a data's recipe sets (steps) is said with that of the default data. (The REPL's :help shows the
    session's own value.)"""
    name = p.default_from or (p.setting.name if p.setting is not None else None)
    # the setting as the default clause names it, not elsewhere in the help (train lr's "the lr setting ... keeps")
    said = re.compile(rf"(\(default:[^()]*\bthe {re.escape(name or '')} setting)\)")
    if p.default is not None or name is None or said.search(text) is None:
        return text
    from .core.recipes import RECIPES, recipe

    data = inspect.signature(Session).parameters["data_spec"].default
    param = REGISTRY["set"].param_named(name)
    spec = param.setting if param is not None else None
    if spec is None:
        return text
    value = fmt.value(recipe(data).get(name, spec.default))  # (a recipe holds training settings alone)
    on = f" on {data}" if any(name in own for own in RECIPES.values()) else ""
    return said.sub(lambda m: f"{m.group(1)}, {value}{on})", text, count=1)


class _ShellSession:
    """What a `complete` function may ask of a session while a shell (bash, zsh, fish) completes a line.

    No session exists then (completion must answer at once, without torch or a model): only the
    checkpoint folder and the data's spec are known, from --checkpoint-dir and --data on the line or
    their defaults, and no data is loaded. Functions that need a model (a layer's number, say) find no
    attribute and offer nothing.
    """

    def __init__(self, ctx: typer.Context):
        root = ctx.find_root().params if ctx is not None else {}
        given = root.get("checkpoint_dir")
        self.checkpoint_dir = Path(given).expanduser() if given else default_checkpoint_dir()
        self.data_spec = root.get("data") or "pydoc"
        self.loaded_data = None


def _shell_completion(p):
    """Tab in bash, zsh or fish offers what Tab offers in the REPL (Param.completions); None: nothing to offer."""
    if p.type is bool or not (p.choices or p.complete or p.nullable):
        return None  # a flag (--x/--no-x) takes no value; the shell completes its name

    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        return [v for v in p.completions(_ShellSession(ctx)) if v.startswith(incomplete)]

    return complete


def _like(name: str, ctx: typer.Context, incomplete: str) -> list[str]:
    """Tab after minitf's own --load, --data or --device offers what it does after the command of that name (`minitf
    --load <Tab>`: the checkpoints, as `minitf load <Tab>`): the option is how a one-shot session does that command."""
    complete = _shell_completion(REGISTRY[name].positional)
    return complete(ctx, incomplete) if complete is not None else []


def _pair_completion(command):
    """`minitf set n_<Tab>` offers `n_layers=`...; `minitf set norm=<Tab>` offers that key's values."""

    def complete(ctx: typer.Context, incomplete: str) -> list[str]:
        typed, replaced = _as_typed(incomplete)
        key, eq, value = typed.partition("=")
        if not eq:  # not a setting the shell gives as an option of its own (checkpoint_dir: --checkpoint-dir)
            keys = [p for p in command.options if p.setting is None or p.setting.shell_option is None]
            spelled, offered = key.replace("-", "_").lower(), []
            for p in keys:
                if p.name.startswith(key):
                    offered.append(f"{p.name}=")
                elif spelled and (alias := next((a for a in p.aliases if a.startswith(spelled)), None)):
                    # another spelling (nanoGPT's block_size), as the REPL's Tab offers it; not its key's own name,
                    # as the REPL completes it to: Typer keeps only the words that begin with the one typed. Zsh,
                    # fish and PowerShell show the name in its description, as the REPL's menu does
                    offered.append((f"{alias}=", f"{alias}= -> {p.name}="))
            return offered
        try:
            param = command.find_param(key)
        except UserError:
            return []
        return [f"{key}={v}"[len(replaced):] for v in param.completions(_ShellSession(ctx)) if v.startswith(value)]

    return complete


# The start of the word being completed that bash does not replace (`_join_bash_words`): "norm=" for `norm=r<Tab>`
_BASH_KEPT = contextvars.ContextVar("bash_kept", default="")


def _join_bash_words() -> None:
    """Give Click the words as typed where bash split them at '=' (its COMP_WORDBREAKS): for `minitf set norm=r<Tab>`
    bash hands over `norm`, `=` and `r`, and right after the '=' the word '=' itself. Read so, `norm=<Tab>` offered
    every key and `norm=res<Tab>` wrote `norm=residual=`; after minitf's own `--set norm=rmsnorm` Click took `norm` for
    the option's value and `=` for a command, so Tab offered the command names in place of the values and, once a
    command followed, that command's options went missing. COMP_WORDS and COMP_CWORD are rewritten with each
    `KEY = VALUE` run joined into one word but the one being typed, of which Click gets what follows its last '=',
    the part bash replaces (`_as_typed`). Other shells, and bash with '=' taken out of COMP_WORDBREAKS, hand over
    whole words: nothing to join."""
    words, at = os.environ.get("COMP_WORDS"), os.environ.get("COMP_CWORD", "")
    if words is None or not at.isdigit():
        return
    try:  # as Typer reads them: one word a line (its script joins them with newlines), quotes read
        words, at = shlex.split(words), int(at)
    except ValueError:  # a quote left open in the word being typed
        words, at = words.split(), int(at)
    words = words[: at + 1] + [""] * (at + 1 - len(words))  # those after the cursor: Click reads none of them
    joined: list[str] = []
    for i, word in enumerate(words):  # a '=' and the word after it belong to the word before
        if joined and (word == "=" or words[i - 1] == "=" and word != ""):  # (a space after '=': a new, empty word)
            joined[-1] += word
        else:
            joined.append(word)
    split = words[at] == "=" or at >= 1 and words[at - 1] == "=" and words[at] != ""
    kept = joined[-1][: joined[-1].rfind("=") + 1] if split else ""
    _BASH_KEPT.set(kept)
    if len(joined) == len(words):  # nothing joined: Typer reads bash's words itself (an open quote as it reads one)
        return
    joined[-1] = joined[-1][len(kept) :]  # Typer offers only what starts with the word it is given: bash's own
    os.environ["COMP_WORDS"] = "\n".join(shlex.quote(w) for w in joined)
    os.environ["COMP_CWORD"] = str(len(joined) - 1)


def _as_typed(incomplete: str) -> tuple[str, str]:
    """The word being completed as typed, and the start of it bash does not replace (`_join_bash_words`): Click is
    handed the rest, and a completion gives what follows that start."""
    kept = _BASH_KEPT.get()
    return kept + incomplete, kept


def _run_one(ctx: typer.Context, command, args: dict, as_json: bool, registry: Registry) -> None:
    """One command through the front door: results on stdout, progress and errors on stderr.

    Exit status: 0, 1 if the command failed, 130 if Ctrl-C (SIGINT) stopped it, 143 if SIGTERM and
    129 if SIGHUP did (after a stopped train has autosaved), as shells report a signal (128 + its number).
    """
    state: _State = ctx.obj
    if not distributed.says_command_line_errors():  # a bad value is the command line's: the first process says it
        try:
            prepare_args(command, args)
        except UserError:
            raise typer.Exit(1) from None
    front = FrontEnd(syntax="shell", json=as_json, debug=state.debug, quiet=state.quiet,
                     typed=_words_after(command, ""), live=False if _under_a_kernels_bang() else None, one_shot=True)
    door = FrontDoor(state.session, _stdout(), _stderr(), front,
                     progress=_stderr(), registry=registry)
    status = door.run(command, args)
    if door.terminated is not None:
        raise typer.Exit(signal_status(door.terminated))
    if door.reader_left:
        raise typer.Exit(READER_LEFT)
    if door.interrupted:
        raise typer.Exit(130)
    if status == FAILED:
        raise typer.Exit(2 if door.usage_error else 1)


def _options_among(command, words: list[str], args: dict, own=()) -> list[str]:
    """The words of the text, less those that set one of the command's options as the REPL reads them, which go
    into `args`: `minitf qkv at=3 layer=1` is `:qkv at=3 layer=1`, not the text "at=3 layer=1".

    A word is an option where it is KEY=VALUE with KEY an option of this command (any spelling); anything
    else stays text, a word with a space in it (a quoted text) included. The shell has already taken the
    quotes away, so unlike the REPL an unknown key is no error: `minitf gen x=1` continues "x=1". So a
    command that reads key=value pairs from its text keeps every other pair there, as the REPL does:
    `minitf compare lr=1e-2 lr=3e-3 steps=100` compares two rates over 100 steps. But a key a letter or two from
    an option's name is a typo, refused as the REPL refuses it: `minitf step def f temprature=0` read the typo
    as text and sampled at 0.8, an answer to another question with no word said. So is a setting's key, or a typo
    of one, which goes with --set before the command: `minitf gen lr=0.1 hi` generated from "lr=0.1 hi".
    """
    text, typed = [], {}  # typed: the word that set each option, where a word did
    for word in words:
        key, eq, value = word.partition("=")
        param = command.param_named(key) if eq and key and " " not in word else None
        meant = _setting_meant(key) if param is None and eq and key.isidentifier() and not command.pairs_in_text \
            else None
        close = command.close_option(key) if param is None and eq and key.isidentifier() \
            and not command.pairs_in_text else None
        # a near miss of a setting the command takes not (`tok step=3`: no steps there) is text, as it was; a near
        # miss of its own option is `close`'s (`gen model=gpt`: no d_model either)
        if meant is not None and not meant[1]:
            meant = None
        if meant is not None and not _takes(meant[0], value):  # `gen norm=2 hi`: its --set norm=2 was refused too
            try:
                convert(meant[0], value)
            except UserError as bad:
                raise UsageError(f"{key} is a setting, not an option of minitf {command.name}; it goes with --set "
                                 f"before the command (--set {meant[0].name}={meant[0].metavar}), and {bad}") from None
        if close or meant is not None:
            with speaking(SHELL):
                # for a command that reads prose, the other fix: the line that reads it all as text
                whole = _line_as_text(command, own) if reads_prose(command) else None
                as_text = f"; to read the whole line as text: {clip(whole, 200)}" if whole else ""
                if meant is not None and (meant[1] or not close):  # `gen d_model=64`, `gen stepz=5`: a setting's
                    setting, exact = meant
                    try:
                        refuse_a_setting(command, key.replace("-", "_").lower() if exact else setting.name, value,
                                         REGISTRY, _typed_after(command, word))
                    except UsageError as e:  # a typo of the setting's name says which name it read as
                        typo = "" if exact else f"unknown option {key!r} for minitf {command.name}; did you mean " \
                                                f"{setting.name}? "
                        raise UsageError(f"{typo}{e}{as_text}") from None
                if close:  # `train dropout=0.1` (close to prompt): a setting, said above; else the option meant
                    try:
                        command.find_param(key)  # "unknown option 'temprature' for minitf step; did you mean ...?"
                    except UserError as e:
                        raise UsageError(f"{e}{as_text}") from None
        if param is None or param.refusal is not None:
            text.append(word)
            continue
        if param.name in args or param.name in typed:
            both = f"{typed[param.name]} and {word}" if param.name in typed \
                else f"{word} and --{param.name.replace('_', '-')} {shlex.quote(str(args[param.name]))}"  # its value
            raise UsageError(f"{param.name} is given twice ({both}); give it once")
        # Kept under the key as typed, so that a bad value is refused in the user's words (`seed`, not gen_seed).
        args[key.replace("-", "_").lower()], typed[param.name] = value, word
    return text


def _setting_meant(key: str) -> tuple | None:
    """(the setting, whether named exactly) that the KEY of a command's KEY=VALUE word names under any spelling, or
    misspells by a letter or so (`stepz`: steps); None where it names none, as a prompt's `x=1` does. Only a close
    spelling: a prompt's `sep=` or `the=` is no typo of steps or threads."""
    setter = REGISTRY["set"]
    param = setter.param_named(key)
    exact = param is not None
    if param is None:
        spelled = {s: p for p in setter.options if p.setting is not None for s in (p.name, *p.aliases)}
        typed = key.replace("-", "_").lower()[:40]
        # a name that ends with the key, or holds it, first: `heads` is n_heads, where difflib guessed threads
        close = ([s for s in spelled if s.endswith("_" + typed)] or [s for s in spelled if typed in s.split("_")]
                 or difflib.get_close_matches(typed, list(spelled), n=1, cutoff=0.8))
        param = spelled[close[0]] if close else None
    if param is None or param.setting is None or param.refusal is not None:
        return None
    return param, exact


def _line_as_text(command, own) -> str | None:
    """The command line typed, with its options before `--` and every other word after it, as text: a word that
    reads as KEY=VALUE of none of its options (a typo) included. The options typed stay (`gen 12 row=1 -n 1` lost
    its `-n 1`), and a word that set one goes before `--` too. `own`: minitf's own options, to step over to the
    command. None where the words typed cannot be told apart."""
    flags = {name: p for p in command.params for spelled in _option_names(p) for name in spelled.split("/")}
    typed = _command_words(own)
    if not typed or "--" in typed:
        return None
    options, text, k = [], [], 0
    while k < len(typed):
        word = typed[k]
        flag = flags.get(word.partition("=")[0]) if word.startswith("-") else None
        if word == "--json" or flag is not None:
            takes = flag is not None and flag.type is not bool and "=" not in word and k + 1 < len(typed)
            options += typed[k:k + 1 + takes]
            k += 1 + takes
            continue
        key, eq, _ = word.partition("=")
        (options if eq and command.param_named(key) is not None else text).append(word)
        k += 1
    return " ".join([cmd(command.name), *map(shlex.quote, options), "--", *map(shlex.quote, text)])


def _words_after_dashes(options) -> int:
    """How many words the command line has after the `--` that follows its command (0: no `--`); `options`: minitf's
    own, to step over to the command."""
    words = _command_words(options)
    return len(words) - words.index("--") - 1 if "--" in words else 0


def _switches_among(command, words: list[str], args: dict) -> list[str]:
    """The words left, less those that name one of the command's on/off options alone, which go into `args` as on:
    `minitf ls all` is `minitf ls --all`, as `:ls all` is in the REPL. Only for a command that takes no text."""
    text, typed = [], {}
    for word in words:
        param = command.switch_named(word)
        if param is None:
            text.append(word)
            continue
        if param.name in typed or args.get(param.name) not in (None, False, param.default):
            both = typed.get(param.name) or f"--{param.name.replace('_', '-')}"
            raise UsageError(f"{param.name} is given twice ({both} and {word}); give it once")
        args[param.name], typed[param.name] = "on", word
    return text


def _metavar(p) -> str:
    """What an option's value is called in --help: N, X, the option's own name for it, or as the REPL's usage line
    calls it (Param.metavar): NAME (a checkpoint, the data); TEXT for a choice, which the help lists."""
    return p.meta or {int: "N", float: "X"}.get(p.type) or ("TEXT" if p.choices else "NAME")


def _make_subcommand(command, registry: Registry):
    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)]
    annotations = {"ctx": typer.Context}
    if command.pairs:
        # The keys listed here: an unknown key's error sends a shell user to this help (`minitf set --help`).
        # each with its other spellings, as :help set lists them (`max_seq_len (block_size)`)
        # (not a setting the shell gives as an option of its own: checkpoint_dir is --checkpoint-dir here)
        keys = ", ".join(p.name + (f" ({', '.join(p.aliases)})" if p.aliases else "") for p in command.options
                         if p.setting is None or p.setting.shell_option is None)
        info = typer.Argument(None, metavar="KEY=VALUE", show_default=False,
                              help=escape(f"Settings to change, e.g. n_layers=2 lr=1e-3. Keys: {keys}."
                                          + (f" A key alone shows that setting: minitf {command.name} lr."
                                             if command.positional is not None else "")),
                              autocompletion=_pair_completion(command))
        params.append(inspect.Parameter(PAIRS, inspect.Parameter.KEYWORD_ONLY, default=info,
                                        annotation=Optional[List[str]]))
        annotations[PAIRS] = Optional[List[str]]
    else:
        for p in command.params:
            if p.refusal is not None:
                continue
            if p.positional:
                # Any number of words, read as the REPL reads the text after a command (Param.positional_text):
                # `minitf gen once upon a time` is `:gen once upon a time`, and a quoted text is one word.
                info = typer.Argument(None, metavar=p.meta or p.name.upper(), help=_help(p), show_default=False,
                                      autocompletion=_shell_completion(p))
            else:
                # Values travel as text and are parsed by the registry, so a bad value gets the same
                # message as in the REPL ("steps must be a whole number, got 'abc'").
                metavar = _metavar(p)
                info = typer.Option(None, *_option_names(p), help=_help(p), show_default=False,
                                    metavar="" if p.type is bool else metavar, autocompletion=_shell_completion(p))
            annotation = Optional[bool] if p.type is bool else Optional[List[str]] if p.positional else Optional[str]
            params.append(
                inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=annotation)
            )
            annotations[p.name] = annotation
        if command.positional is None and any(p.refusal is None for p in command.params):
            # A command that takes no text still takes its options as the REPL writes them: `minitf train
            # steps=200` is `minitf train --steps 200`, as `:train steps=200` is in the REPL.
            # A command whose options are all on/off (params) has its example too: all=on is --all
            usable = [p for p in command.params if p.refusal is None]
            example = next((p for p in usable if p.type is not bool), usable[0] if usable else None)
            dashed = example.name.replace("_", "-") if example is not None else ""
            said = "" if example is None else f": {example.name}=on is --{dashed}" if example.type is bool else (
                f": {example.name}={_metavar(example)} is --{dashed} {_metavar(example)}")
            info = typer.Argument(None, metavar="KEY=VALUE", show_default=False,
                                  help=f"Options as the REPL writes them{said}.")
            params.append(inspect.Parameter(OPTION_WORDS, inspect.Parameter.KEYWORD_ONLY, default=info,
                                            annotation=Optional[List[str]]))
            annotations[OPTION_WORDS] = Optional[List[str]]
    info = typer.Option(False, "--json", metavar="", help="Print the result as one JSON document on stdout.")
    params.append(inspect.Parameter("as_json", inspect.Parameter.KEYWORD_ONLY, default=info, annotation=bool))
    annotations["as_json"] = bool

    def subcommand(ctx: typer.Context, **kwargs) -> None:
        as_json = kwargs.pop("as_json", False)
        if command.pairs:
            try:
                with speaking(SHELL):
                    _pairs_as_typed(command, kwargs.get(PAIRS) or [])
                _, args = parse_line(f":{command.name} " + " ".join(kwargs.get(PAIRS) or []), registry)
            except UserError as e:
                _command_line_error(phrase(e, "shell"))
                raise typer.Exit(2 if isinstance(e, UsageError) else 1)
        else:
            args = {k: v for k, v in kwargs.items() if v is not None}
            positional = command.positional
            words = args.pop(positional.name if positional is not None else OPTION_WORDS, None)
            try:
                # an option's value that is another option of the command (`gen hi --n --json`, $N empty in a
                # script): the option has no value, a mistake in the command line (status 2), as `gen --n` is
                # ("n must be a whole number, got '--json'", status 1, where the JSON was also asked for)
                names = {"--json", "--help", *(part for q in command.params for n in _option_names(q)
                                               for part in n.split("/"))}  # --cache and --no-cache alike
                for param in command.params:
                    value = args.get(param.name)
                    if isinstance(value, str) and value.split("=")[0] in names and param.type is not bool:
                        raise missing_value(f"--{param.name.replace('_', '-')}", param)
                # the words typed after `--` are text whatever they read as: `minitf gen -- n=5` continues "n=5"
                # (it read as the option n and said "n is given twice" beside -n 3); Click hands them over last
                words = words or []
                own = ctx.parent.command.params if ctx.parent else ()
                after = min(_words_after_dashes(own), len(words))
                words = _options_among(command, words[: len(words) - after], args, own) + words[len(words) - after:]
                if positional is None:
                    words = _switches_among(command, words, args)
                _refuse_empty(command, args)
                if words and positional is None:
                    key, eq, value = words[0].partition("=")
                    if eq and key.replace("-", "_").isidentifier():  # `minitf train bogus=1`: an option misnamed,
                        with speaking(SHELL):  # or a setting (`train dropout=0.1`): --set before the command
                            refuse_a_setting(command, key.replace("-", "_").lower(), value, REGISTRY,
                                             _typed_after(command, words[0]))
                        command.find_param(key)  # said as the REPL says it (it read "takes no text, got 'bogus=1'")
                    got = f"minitf {command.name} takes no text, got {clip(' '.join(words))!r}"
                    if guess := fits_first_option(command, words):  # `minitf plot lr`: the REPL's guess too
                        raise UsageError(f"{got}{guess} (minitf {command.name} --help lists its options)")
                    raise UsageError(f"{got}; its options go as KEY=VALUE or --KEY VALUE (minitf {command.name} "
                                    "--help lists them)")
            except UserError as e:
                _command_line_error(phrase(e, "shell"))
                raise typer.Exit(2 if isinstance(e, UsageError) else 1)
            if len(words) > 1 and positional.path:
                # a name or a path is one word of the shell's, which has read its quotes: `minitf data sort:3 pydoc`
                # was the one path "sort:3 pydoc" ("the size after ':' must be a whole number"), `minitf load a b`
                # "'a b' is not a valid checkpoint name"
                spaced = next((w for w in words if " " in w and (p := command.param_named(w.partition("=")[0]))
                               is not None and not p.positional and "=" in w), None)
                # a quoted KEY=VALUE with a space is text on purpose (_options_among): its option named, as --KEY
                fix = (f"{shlex.quote(spaced)} has a space, so it reads as text; give it as --"
                       f"{spaced.partition('=')[0].replace('_', '-')} {shlex.quote(spaced.partition('=')[2])}"
                       if spaced else "give one (a path that has spaces goes in quotes)")
                _command_line_error(f"minitf {command.name} takes one {positional.name.upper()}, got {len(words)} "
                                    f"words: {clip(' '.join(map(shlex.quote, words)))}; {fix}")
                raise typer.Exit(2)  # the command line itself is wrong
            if words:  # no words at all: the text is not given (the command's default), as in the REPL
                args[positional.name] = shell_text(command, words)
        _run_one(ctx, command, args, as_json, registry)

    subcommand.__name__ = command.name
    subcommand.__doc__ = _summary(command)
    subcommand.__signature__ = inspect.Signature(params)
    subcommand.__annotations__ = annotations
    return subcommand


def add_subcommands(app: typer.Typer, registry: Registry) -> None:
    """One shell subcommand per command of the registry, except the REPL-only ones."""
    for command in registry.values():
        if not command.repl_only:
            # the docs section that works its output through, under the options, as :help NAME names it
            epilog = (f"Worked through, with what each term means: docs/{command.guide} in minitf's repository."
                      if command.guide else None)
            if any(p.kept and p.refusal is None for p in command.params):  # its help's "(kept)", said once here
                kept = ("(kept): the option changes its setting, as minitf --set does, not for this command alone: "
                        f"the checkpoint it saves keeps the value, and minitf --load NAME {command.name} goes on with "
                        "it.")
                epilog = f"{kept} {epilog}" if epilog else kept
            app.command(name=command.name, help=escape(_summary(command)), cls=_Command,
                        epilog=escape(epilog) if epilog else None)(_make_subcommand(command, registry))


def build_app(registry: Registry = REGISTRY) -> typer.Typer:
    """The `minitf` application for a registry: the REPL with no subcommand, else one command."""
    app = typer.Typer(
        cls=_Group,
        name="minitf",
        help="A terminal lab for building, training and looking inside a decoder-only Transformer. "
        "With no command: the interactive shell (:help lists its commands); lines piped in run as a script, "
        "each as typed there: minitf --transcript < lesson.txt.",
        # what a script needs of every command: its output as data, and what its exit status means
        epilog="Every command takes --json: its result as one JSON document on stdout (minitf config --json), "
        "progress and errors on stderr. Exit status: 0 success, 1 a command failed, 2 a wrong command line (an "
        "unknown option, a missing value), 130 Ctrl-C; all of them in docs/checkpoints-and-safety.md#exit-status "
        "in minitf's repository.",
        add_completion=True,  # --install-completion and --show-completion for bash, zsh, fish, PowerShell
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback(invoke_without_command=True)(root)
    add_subcommands(app, registry)
    return app


app = build_app()


def main() -> None:
    """The shell behind the console script `minitf` (__main__.main). Its exit statuses are listed in
    docs/checkpoints-and-safety.md ("Exit status").

    Output that cannot be written (a reader that left the pipe, a full disk behind `> file`) ends
    in one line, never in Python's "Exception ignored ... flush" at exit: anything still buffered
    is flushed here, where an error can be said.
    """
    forget_zero_size()
    _STOP_SAID.clear()  # once a run of the shell: main(argv) called again in one process (a notebook) says it again
    Console.on_broken_pipe = _reader_left  # every console's, Typer's --help ones too: this process is the shell's
    if sys.stdout is None:  # `minitf >&-`
        error(_stderr(), "standard output is closed; run minitf with its output going to a terminal, a file or a pipe")
        sys.exit(1)
    try:
        app(prog_name="minitf")
    except SystemExit as e:
        code = e.code
    except KeyboardInterrupt:  # Ctrl-C before a command took the signal over (dispatch.stop_on_signals)
        code = _stopped_before_it_began().exit_code
    except OSError as e:  # only output can end here (commands report their own errors in one line)
        if e.errno not in _OUTPUT_ERRORS or e.filename is not None:
            raise
        code = _output_lost(e)
    else:
        code = 0
    try:
        sys.stdout.flush()
    except OSError as e:
        code = _output_lost(e) if e.errno in _OUTPUT_ERRORS else 1
    sys.exit(code)


def _reader_left(console: Console) -> None:
    """What a Rich console does when the reader of its output has left (`minitf help | head -2`): stop writing, and
    end with the status of a pipe SIGPIPE ended, READER_LEFT (141), as `cat` and `git log` do. Rich's own ends with
    status 1, a failure a script could not tell from a command's, when the output outgrew the pipe."""
    from .dispatch import silence_stdout

    console.quiet = True
    silence_stdout()
    raise SystemExit(READER_LEFT)


def forget_zero_size() -> None:
    """Drop a $COLUMNS or $LINES of 0 (a terminal that reports no size, passed on by a script or a container's
    environment), which means no size known. Rich took COLUMNS=0 for a width of 0 and printed nothing at all: every
    result, and every error too, so that `minitf --data missing.txt tok hi` ended with status 1 and not a word.
    Without it, the terminal's own size, or 80 columns, as where neither is set."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) == 0:
            del os.environ[name]


_OUTPUT_ERRORS = {errno.EPIPE, errno.ENOSPC, errno.EIO, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EBADF}


def _output_lost(e: OSError) -> int:
    """Stop writing to standard output after `e`; one line unless the reader simply left (EPIPE). Returns the exit
    status: READER_LEFT where the reader left (`minitf help | head -2`), as a shell's pipe ends, else 1."""
    from .dispatch import silence_stdout

    silence_stdout()
    if e.errno == errno.EPIPE:
        return READER_LEFT
    error(_stderr(), f"cannot write the output ({e.strerror or e}); it is lost")
    return 1
