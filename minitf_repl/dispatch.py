"""The front door: one path from a typed line (or the shell's options) to the screen.

Every front end goes through here: the interactive REPL, piped standard input and the one-shot
shell (`minitf train ...`). For one command that means, in this order: parse and check the
arguments, wait for the background torch import if the command needs torch, run it with Ctrl-C,
SIGTERM and SIGHUP turned into a stop request, then render the result (or print it as one JSON
document), and turn any failure (standard output that cannot be written included) into one line
on the error console. What differs between front ends is a `FrontEnd`
value (how to phrase a fix, JSON or not, live progress or not), not a second copy of this code.

`run_command` is the same path without a person: a Command and its arguments in, the result
dataclass out, errors raised. Tests and `--set`/`--load` use it.
"""

from __future__ import annotations

import atexit
import codecs
import contextlib
import dataclasses
import errno
import functools
import json
import math
import os
import re
import shlex
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from rich.text import Text

from .commands import REGISTRY
from .core import distributed
# at load, not in phrase(): an import there, as a process ran out of memory, failed too, and the out-of-memory error it
# was wording became a traceback (`ulimit -v`)
from .core.catalog import OTHER_DATA
from .core.checkpoint.layout import ANOTHER_DIR
from .core.errors import Interrupted, UsageError, UserError, is_out_of_memory
from .core.interrupts import held, hold_back, holding, in_the_foreground, may_cut_short
from .core.memory import release_freed
from .core.notices import telling
from .core.watch import Grid
from .parsing import (CLEAR, COPIED_PROMPT, PROMPT, parse_line, prepare_args, reads_prose, shell_unescaped,
                      undecodable, without_comment)
from .registry import Command, Param, Registry, clip
from .render import RichReporter, error, internal_error
from .render.live import same_output
from .render.words import note, say
from .reporter import Reporter
from .schema import schema_id
from .syntax import (REPL, SHELL, cmd, given_before, loaded, named, setting_text, speaking, typed_after,
                     typed_at_keyboard)

try:  # at load, as above: short_of_memory reads the memory limit where an import has just failed for want of memory
    import resource
except ImportError:  # Windows
    resource = None

OK, FAILED, QUIT, EMPTY = "ok", "failed", "quit", "empty"
AS_TEXT = "a line without ':' is text for the model to continue"  # what a command's name typed without ':' is told
PROGRAM = "minitf"  # the shell's name for it: a line copied from a shell script into a script of lines starts with it
OUT_OF_MEMORY = "out of memory; lower batch_size, max_seq_len or the model size, or use another device"
# Signals that stop a running command as Ctrl-C does (after its current step, token or save), by
# name so that a platform without one (Windows has no SIGHUP) simply lacks it. SIGTERM is what
# `timeout`, `docker stop` and systemd send; SIGHUP what a closed terminal sends. After those two
# the front end exits once the command has stopped (and saved), with the shell's status for a
# signal, 128 + its number: 143 for SIGTERM, 129 for SIGHUP (130 for Ctrl-C in the shell).
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
TERMINATING = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


def signal_status(signum: int) -> int:
    """The exit status after a signal stopped minitf: 128 + the signal's number, as a shell reports it."""
    return 128 + int(signum)


# The status after the reader of standard output left (`minitf help | head -2`): 141, a shell's for a command SIGPIPE
# ended, as `cat`, `seq` or `git log` end into `| head`. It was 1, a command's failure, so a script (pipefail) could
# not tell a normal pipe from an error; and a script piped in went on running every line after (a :train included).
READER_LEFT = signal_status(getattr(signal, "SIGPIPE", 13))  # 13 where the platform names none (Windows)


# --- running a command -----------------------------------------------------------------------------
def run_command(session, command: Command | str, args: dict | None = None, reporter: Reporter | None = None,
                registry: Registry = REGISTRY):
    """Run `command` with args {option: value} (typed, or text to parse; None: not given).

    `command` is the Command (the front door passes the one it parsed), or, for a caller that has
    none (a test, `--set`), its name, found in `registry`. Returns the command's result dataclass;
    a user's mistake raises UserError.
    """
    if not isinstance(command, Command):
        command = registry.find(command)
    values = prepare_args(command, args or {})
    _text_like_a_choice(command, args or {}, values, reporter)
    reporter = reporter if reporter is not None else Reporter()
    before = getattr(session, "on_build", None)
    if session is not None:  # a build of many seconds is said before it starts (Session._new_model)
        session.on_build = reporter.notice
    # torch's random generators are the session's own for the command's length (Session.own_random): another
    # session's commands, or a caller's draws between them, leave this one's masks as they were
    own = getattr(session, "own_random", None)
    try:
        with own() if own is not None else contextlib.nullcontext():
            return command.func(session, values, reporter)
    except (MemoryError, RuntimeError, ImportError, OSError) as e:
        if _loading(e) and (line := short_of_memory(e)) is not None:  # torch's import, which a command may do
            raise UserError(line) from None
        if is_out_of_memory(e):  # anything else is a bug
            raise UserError(OUT_OF_MEMORY) from None
        raise
    finally:
        if session is not None:
            session.on_build = before
        # What the command freed goes back to the system now, as the trainer's own end does (core.memory): glibc kept
        # a view's freed working memory until the next :train, 30 to 120 MB (:muon, :grad, :context; 65 MB after
        # :muon on the default model), so a session of views sat far above its training's peak. 1 to 12 ms a command.
        release_freed()


# What an import that found too little memory raises: the loader's "failed to map segment from shared object" of a
# library (libtorch_cpu.so), or the system's ENOMEM, said as "Cannot allocate memory"
_NO_MEMORY = re.compile(r"failed to map segment|cannot allocate memory|out of memory", re.IGNORECASE)


def short_of_memory(exc: BaseException) -> str | None:
    """The line for `exc` where it is the process running out of memory, not a bug, or None: a MemoryError, or an
    ImportError or OSError that says so. Under `ulimit -v` torch's import met them, and they were internal errors
    ("MemoryError: " with no words at all, "ImportError: libtorch_cpu.so: failed to map segment from shared object"),
    which named neither the problem nor its fix. (A command's tensors too large for the device are its own error,
    OUT_OF_MEMORY: run_command says them so, with a smaller batch or model as the fix.)"""
    said = next((line for line in str(exc).splitlines() if _NO_MEMORY.search(line)), None)
    if isinstance(exc, (ImportError, OSError)):
        if getattr(exc, "errno", None) != errno.ENOMEM and said is None:
            return None
    elif not isinstance(exc, MemoryError):
        return None
    if isinstance(exc, OSError) and exc.strerror:
        why = exc.strerror
    elif said is not None:  # numpy's ImportError is 20 lines of advice, ending "Original error was: LIB.so: failed..."
        why = clip(": ".join(said.strip().split(": ")[-2:]), 80)
    else:  # a MemoryError's own text is often empty
        why = clip(" ".join(str(exc).split()), 80) or type(exc).__name__
    # what was loading: torch was assumed, where a command's own import of another library meets the limit too
    what = f"not enough memory to load {_loaded_module(exc) or 'a library'}" if _loading(exc) else "not enough memory"
    limit = "raise the memory limit (ulimit -v) or " if _memory_limited() else ""  # advice only where one is set
    return f"{what} ({why}); {limit}close other programs"


def _memory_limited() -> bool:
    """Whether this process runs under a limit of its address space (`ulimit -v`), which raising would mend."""
    if resource is None:  # Windows: no ulimit
        return False
    try:
        return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
    except (AttributeError, ValueError, OSError):  # a platform without RLIMIT_AS
        return False


def _loaded_module(exc: BaseException) -> str | None:
    """The package whose import `exc` broke (`torch` of `torch._C`): the ImportError's own name, else the first module
    that was running in its traceback (the one imported); None where neither says."""
    name = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    tb = exc.__traceback__
    while name is None and tb is not None:
        if tb.tb_frame.f_code.co_name == "<module>":
            name = tb.tb_frame.f_globals.get("__name__")
        tb = tb.tb_next
    return name.split(".")[0] if isinstance(name, str) and name else None


def _loading(exc: BaseException) -> bool:
    """Whether `exc` came from an import: an ImportError, or raised as a module ran (its `<module>` frame; Python
    drops importlib's own frames from the traceback, save where importlib itself raised)."""
    if isinstance(exc, ImportError):
        return True
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "<module>" or code.co_filename.startswith("<frozen importlib"):
            return True
        tb = tb.tb_next
    return False


def _text_like_a_choice(command: Command, given: dict, values: dict, reporter: Reporter | None) -> None:
    """`:lens mid`, `:gen probs`: a text that is one word, a choice of an option not given, is read as the text, as
    always; a notice names the option the user may have meant (`at=mid`), so that the surprise is explained."""
    text = command.positional
    # a positional with a meta names things (`:set KEY`), not free text: a choice typed there is refused, and its
    # error names the option already (Command.find_param)
    if reporter is None or text is None or text.choices or text.meta or not isinstance(values.get(text.name), str):
        return
    word = values[text.name].strip()
    chosen = [p for p in command.options_choosing(word) if p.name not in given]
    if len(word.split()) == 1 and len(chosen) == 1:
        reporter.notice(f"{word!r} is read as the {text.name}; for the option, type "
                        f"{cmd(command.name, **{chosen[0].name: word})}")


def to_json(result) -> dict:
    """The result as a JSON-able dict (tuples become lists, non-finite floats null, types their name).

    A field declared `metadata={"view_only": True}` (what a part states for the renderer alone, such
    as a trace step's symbols) is left out, at any depth: the JSON is what schema.py declares.
    """
    if not dataclasses.is_dataclass(result):
        raise TypeError(f"to_json takes a command result, got {type(result).__name__}")
    return _jsonable(result)


def json_document(command: Command, result) -> dict:
    """What `--json` prints: {"schema": "minitf.NAME/N", ...the result's fields} (schema.py declares them)."""
    return {"schema": schema_id(command), **to_json(result)}


def _jsonable(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not f.metadata.get("view_only")}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Grid):  # a watched frame's numbers, held compactly: the nested lists they stand for
        return _jsonable(value.tolist())
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is CLEAR:
        return None
    if isinstance(value, type):
        return value.__name__
    return str(value)


# --- how each front end says things ----------------------------------------------------------------
@dataclass
class FrontEnd:
    """What differs between the REPL, piped input and the one-shot shell."""

    syntax: str = "repl"  # how messages name commands (syntax.py): "repl" `:set lr=0.0003`, "shell" `--set lr=0.0003`
    json: bool = False  # print the result as one JSON document instead of rendering it
    live: bool | None = None  # animate progress (None: when the console is a terminal)
    debug: bool = False  # show the traceback of internal errors
    quiet: bool = False  # errors only: no progress, notices or result (a non-zero rank under torchrun)
    keyboard: bool = True  # lines typed at a prompt; False: a script read from a pipe or a file (syntax.at_keyboard)
    typed: str = ""  # the one-shot shell: the command's own words as typed after its name (`--steps 30`), for `phrase`
    one_shot: bool = False  # the one-shot shell: its session ends with the command (a signal cuts its start-up short)


def phrase(exc: UserError, syntax: str, command: str | None = None, typed: str = "") -> str:
    """The error's message, with the settings that would fix it in this front end's syntax: from the shell, where
    `command` names the command that failed (`typed`: its own words after its name), the whole line that runs it
    again with them (`minitf --set lr=0.01 train --steps 30`; it said "(--set lr=0.01)", a fragment where the shell's
    other messages give lines that run as pasted).

    (The message itself was phrased when it was raised, under the same front end: syntax.py.)
    """
    message = str(exc)
    # A whole line only where it runs as pasted: not after --load (a setting that rebuilds the model is refused there,
    # and --load would read a checkpoint from the new folder), not for :set's own pairs (the typed pair would
    # override the fix), not under torchrun (one process, a smaller global batch); elsewhere the fragment, as before.
    whole = (syntax == SHELL and command is not None and not loaded() and not distributed.launched()
             and not _takes_pairs(command))
    if syntax == SHELL and ANOTHER_DIR in message:  # the option by its name
        with speaking(syntax):
            again = (f": {given_before(command, '--checkpoint-dir', 'DIR')}" + (f" {typed}" if typed else "")
                     if whole else " (--checkpoint-dir DIR" + (", holding a copy of the checkpoint --load reads)"
                                                               if loaded() else ")"))
            message = message.replace(ANOTHER_DIR, f"run it with another checkpoint folder{again}")
    if message.endswith(OTHER_DATA):  # which command gives it, in this front end's words
        with speaking(syntax):
            other = (given_before(command, "--data", "NAME|PATH") + (f" {typed}" if typed else "") if whole else
                     cmd("data", "NAME|PATH") if syntax == REPL else "--data NAME|PATH")
            message = f"{message} ({other}; a vocabulary of other characters builds a new model)"
    if syntax == REPL and ANOTHER_DIR in message:
        # the core's way on from a checkpoint folder it cannot use; the REPL changes its folder, model kept (a restart,
        # as the core's words say, loses what the session trained): `:ls`, `:load`, `:train`'s check before it runs
        with speaking(syntax):
            message = message.replace(ANOTHER_DIR, f"choose another folder: {cmd('set', checkpoint_dir='DIR')}")
    fix = getattr(exc, "fix", None)
    if not fix:
        return message
    with speaking(syntax):
        if whole:
            pairs = " ".join(f"{key}={setting_text(value)}" for key, value in fix.items())
            return f"{message}: {given_before(command, '--set', pairs)}" + (f" {typed}" if typed else "")
        return f"{message} ({cmd('set', **fix)})"


def _takes_pairs(name: str) -> bool:
    """Whether the command `name` takes its settings as KEY=VALUE pairs (:set): a fix then goes among them."""
    command = REGISTRY.names().get(name)
    return command is not None and command.pairs


class FrontDoor:
    """Runs commands for a person: results to `out`, progress and notices to `progress`, errors to `err`."""

    def __init__(self, session, out: Console, err: Console | None = None, front: FrontEnd | None = None,
                 progress: Console | None = None, registry: Registry = REGISTRY):
        self.session = session
        self.out = out
        self.err = err if err is not None else out
        self.progress = progress if progress is not None else out
        self.front = front if front is not None else FrontEnd()
        self.registry = registry
        for console in self._consoles():
            guard_stdout(console, functools.partial(self._output_lost, console))
            console.on_broken_pipe = functools.partial(self._reader_left, console)  # Rich's own raised SystemExit(1)
        self.running: Reporter | None = None  # the reporter of the command running now
        self.interrupted = False  # Ctrl-C stopped or interrupted the last command
        self.terminated: int | None = None  # SIGTERM or SIGHUP arrived: the front end exits after this command
        self.reader_left = False  # standard output's reader closed the pipe: the front end ends (READER_LEFT)
        self.usage_error = False  # the last command failed on an option or key that does not exist (UsageError)
        self.lost: str | None = None  # why the output of the command running could not be written (EIO, ENOSPC)
        self.output_failed = False  # a command's output could not be written: piped input ends there (run_lines)
        self.ends_at_lost_output = False  # piped input's: its lines after an output that failed do not run
        self._hushed: list[Console] = []  # the consoles quieted for the rest of that command
        self.where = ""  # what an error line names first: the line of a script read from a pipe or file ("line 7: ")

    def run_line(self, line: str) -> str:
        """Run one typed line. Returns OK, FAILED, QUIT or EMPTY; never raises (except SystemExit)."""
        if not line.strip():
            return EMPTY
        # (only a line holding Python's stand-ins for bytes is split: shlex took minutes over a 10-MB line)
        # (a comment's bytes are none of the command's: `:set lr=0.01 # caf\xe9` ran, the comment ignored)
        if UNDECODED.search(line) and (shown := undecodable(_words(without_comment(line, self.registry)))) is not None:
            # a terminal's UTF-8 read under a C locale: "2 characters not in the vocabulary: '\udca9' '\udcc3'"
            if not self.front.keyboard:  # a script read from a pipe or a file (repl.stdin_lines reads it as UTF-8)
                # iconv's -f too: without it iconv reads the locale's encoding, UTF-8, and refuses the same bytes;
                # Latin-1, the likeliest, reads any byte (one line in 100 columns, after "error: line N: ")
                from .core.data import NOTEPAD_TO_UTF8
                from .core.paths import on_windows

                fix = NOTEPAD_TO_UTF8 if on_windows() else "convert: iconv -f latin1 -t utf-8 FILE > FILE-utf8.txt"
                self._error(f"script not UTF-8 ({shown}); {fix}")
                return FAILED
            encoding = sys.stdin.encoding or "ascii"
            utf8 = codecs.lookup(encoding).name == "utf-8"  # then the terminal sends another encoding than UTF-8
            fix = ("set the terminal to UTF-8 (it sends another encoding)" if utf8 else
                   "start minitf under a UTF-8 locale (LC_ALL=C.UTF-8 minitf)")
            self._error(f"the line holds bytes that are not text in this terminal's encoding ({shown}, read as "
                        f"{encoding}); {fix}")
            return FAILED
        curly = curly_quotes(line, self.registry)
        try:
            with speaking(self.front.syntax):
                command, args = parse_line(line, self.registry)
        except UserError as e:
            self._error(phrase(e, self.front.syntax) + curly)
            return FAILED
        meant = self._meant_as_command(line, command)
        if not self.front.keyboard and command.takes_plain_text and (refused := self._not_text(line)) is not None:
            # a script's line is read by no one as it runs: `train steps=5` there is a command missing its ':', whose
            # 200 characters of text came with exit status 0 and the setting never applied; refused, a failed line
            self._error(f"{refused} ({self._as_text(command, line)})" + curly)
            return FAILED
        status = self.run(command, args, meant + curly)
        if status == OK and meant:  # `train` typed on a text the model reads: its text came, with no word of the
            # command (an error said it, on a task's digits alone); said after it, the line still the model's text
            note(self.progress, meant.removeprefix("; "))
        return status

    def _error(self, message: str) -> None:
        error(self.err, self.where + message)

    def echo(self, line: str) -> None:
        """A script's `line` on the output after the REPL's prompt, before what it shows (`minitf --transcript`). An
        output that fails here is said as a command's is: piped input ends there (run_lines)."""
        try:
            say(self.out, PROMPT + line)
        except OutputLost as e:
            self._output_error(str(e))

    def _not_text(self, line: str) -> str | None:
        """Why a script's `line`, read as text, is a command instead (the start of its refusal), or None where it is
        text: a shell's line (`minitf --data sort tok 12`), or a command's line without its ':' whose words are all
        that command's own (`train steps=5`, `set lr=0.02`, `help train`, `train` alone). A line that starts with a
        command's name but holds free text, or that the command refuses (`help me write a poem`, `train of thought
        is`, `Exit pursued by a bear`), is a prompt, as at the prompt: command names are everyday words."""
        if (shell := self._shell_line(line.strip())) is not None:
            return shell
        stripped = line.strip()
        if stripped.startswith(":") or not self.runs_as_command(stripped):
            return None
        return (f"a script's line that starts with a command without its ':' is not run as text for the model; "
                f":{stripped} runs it as a command")

    def reads_as_text(self, line: str) -> bool:
        """Whether a script's `line` runs as text for the model to continue (a prompt), as run_line reads it: not a
        command's line with its ':' (the README's prompt before it or not), nor a command's bare word (`exit`), nor a
        line refused as a command without its ':' or a shell's line (_not_text). A blank line or a comment is neither
        (run_lines skips both). The shell's guard against a text piped in for a script asks it (cli._piped_script)."""
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or self.registry.plain_text_command is None:
            return False
        if stripped.startswith(":") or COPIED_PROMPT.match(line) or self.registry.bare_word(line) is not None:
            return False
        return self._not_text(line) is None

    def runs_as_command(self, stripped: str) -> bool:
        """Whether a line without its ':' is a command's: its first word names one, it parses as that command's line,
        and its words are all that command's own (_a_commands_own). `train steps=5`, `help train`, `attn layer=0`
        are; `train of thought is`, `help me write a poem`, `save the day` are text, as at the prompt (a script's
        line, _not_text, and Lab's line without its ':')."""
        if command_first(stripped, self.registry) is None:
            return False
        try:
            with speaking(self.front.syntax):
                command, args = parse_line(f":{stripped}", self.registry)
        except UserError:
            return False
        return self._a_commands_own(command, args)

    def _a_commands_own(self, command: Command, args: dict) -> bool:
        """Whether a line parsed as `command` holds only that command's own words: its text (where it takes one) is
        what it declares, or, where its text is no prose, one word: a name to save or load, a page's path, a data
        spec (`save mymodel`, `report page.html`, `data sort:8` ran as prompts, the save never made, exit 0)."""
        positional = command.positional
        text = args.get(positional.name) if positional is not None else None
        if text is None:
            return True
        if not reads_prose(command) and not positional.several and len(str(text).split()) == 1:
            return True
        return self._declared(positional, text)

    def _declared(self, param: Param, text: str) -> bool:
        """Whether a command's free `text` is made of what its positional `param` declares it takes (`:help train`,
        `:data sort`, `:checks batch init`, `:compare lr=1e-2 lr=3e-3`, a file that is there), not words of a prose."""
        try:
            known = {str(word).lower() for word in param.completions(self.session)}
        except (OSError, UserError):  # (a checkpoint folder that cannot be listed: no name is known)
            known = set()
        known |= {word.lower() for word in (param.spellings() if param.spellings is not None else {})}
        keys = {name for p in (param.pairs() if param.pairs is not None else []) for name in (p.name, *p.aliases)}
        if param.path and os.path.lexists(os.path.expanduser(shell_unescaped(text))):
            return True
        words = text.split() if param.several else [text]
        joins = {"vs"}  # `compare lr=0.1 vs lr=0.2`: the word that parts contenders (lab.py), no prose
        return all(word.lower() in known | joins or word.partition("=")[0].replace("-", "_").lower() in keys
                   for word in words)

    def _shell_line(self, stripped: str) -> str | None:
        """The start of the refusal of a shell's line copied into a script (`minitf --data sort tok 12`, `minitf gen
        hi`): the script's lines that run it (--set, --data, --device and --load are the REPL's commands; the command
        the line's rest with its ':'), where each parses so; else to write it as at the prompt. None: no shell line."""
        words = [(m.group(0), m.start()) for m in re.finditer(r"\S+", stripped)]
        names = self.registry.names()
        if len(words) < 2 or words[0][0] != PROGRAM or not (words[1][0].startswith("-") or words[1][0] in names):
            return None
        said = "a script's line is written as at the prompt, not as minitf's shell line"
        lines, at = [], 1
        while at < len(words) and words[at][0].startswith("-") and words[at][0] != "--":
            option, eq, value = words[at][0].partition("=")
            if not eq and at + 1 < len(words):
                value, at = words[at + 1][0], at + 1
            at += 1
            made = self._repl_form(option, value)
            if made is None:
                return f"{said}; write it as the REPL's lines, each command with its ':' (:help lists them)"
            lines.append(made)
        if at < len(words):
            lines.append(f":{stripped[words[at][1]:]}")
        try:
            with speaking(self.front.syntax):
                for made in lines:
                    parse_line(made, self.registry)
        except UserError:
            return f"{said}; write it as the REPL's lines, each command with its ':' (:help lists them)"
        if len(lines) == 1:
            return f"{said}; {lines[0]} runs it as a command"
        return f"{said}; these lines run it, each on its own: {', then '.join(lines)}"

    def _repl_form(self, option: str, value: str) -> str | None:
        """The REPL's line for minitf's own `option` with `value`: the command of its name, whose shell form it is
        (`--data sort` is `:data sort`, `--set k=v` `:set k=v`), or a setting of its name (`--seed 3`, `--checkpoint-dir
        D`: `:set seed=3`), read off the registry as the shell reads them; None where neither is (`--debug`)."""
        if not value:
            return None
        key = option[2:].lower()
        command = self.registry.names().get(key)
        if command is not None and command.positional is not None:
            return f":{command.name} {value}"
        setter = next((c for c in self.registry.names().values() if c.pairs), None)
        param = setter.param_named(key.replace("-", "_")) if setter is not None else None
        if param is None or param.setting is None:
            return None
        return f":{setter.name} {param.name}={value}"

    def _as_text(self, command: Command, line: str) -> str:
        """How a script's refused `line` runs as text after all: the whole line after `:gen --` where the message can
        hold it as it is; else the words to put before it (a line shortened with "..." or without its outer spaces,
        pasted, generated from another prompt)."""
        with speaking(self.front.syntax):
            before = cmd(command.name, "--")
        if line == line.strip() and clip(line) == line:
            return f"{before} {line} continues it as text"
        return f"put '{before} ' before the line to continue it as text"

    def _meant_as_command(self, line: str, command: Command) -> str:
        """What to say of a line read as text whose first word names a command (`help train`, `train steps=3`): how
        to run that command. The line stays text (a prompt may start with any word): said after its text, or added
        to its error. Nothing where the line reads as prose its command refuses (`train of thought is`)."""
        stripped = line.strip()
        if not command.takes_plain_text or stripped.startswith(":"):
            return ""
        words = stripped.split(None, 2)
        if words[0] == PROGRAM and len(words) > 1 and words[1].lower() in self.registry.names():
            stripped = stripped[len(PROGRAM):].strip()  # `minitf gen hello`, a shell's line copied into a script
        named = command_first(stripped, self.registry)
        if named is None:
            return ""
        word = stripped.split(None, 1)[0].lower()
        line = f":{clip(stripped)}"  # the whole line: where it is wrong as a command, its own error says how
        if named.positional is None and not named.options:  # `quit now`: a command of no words at all (:quit
            line = f":{word}"  # refuses any text), the line cut to its name
        elif ("=" not in stripped and len(stripped.split()) > 2 and not reads_prose(named)
              and not self.runs_as_command(stripped)):
            # `train of thought is`, `help me write a poem`: prose whose first word names a command that reads none,
            # and whose line as that command is refused; the hint was a line that fails. A line with a setting (`train
            # stpes=5`) or of one word after the command's (`checks gradiant`, `ablate attn`: a typo) is still meant
            # as the command: kept whole, its own error corrects it. (`gen hello` runs.)
            return ""
        return f"; {AS_TEXT}; {line} runs it as a command"

    def run(self, command: Command, args: dict, meant: str = "") -> str:
        """Run a parsed command; the same steps for every front end. `meant`: what a user error adds."""
        # the command's messages and its rendering name commands so, and hint at what to type only to a keyboard's user
        with speaking(self.front.syntax), typed_at_keyboard(self.front.keyboard), typed_after(self.front.typed):
            reporter = self._reporter()
            self.interrupted = False
            self.lost = None
            self.running = reporter
            try:
                return self._run(command, args, reporter, meant)
            finally:
                self.running = None
                if reporter.terminate_signal is not None:
                    self.terminated = reporter.terminate_signal

    def _run(self, command: Command, args: dict, reporter, meant: str = "") -> str:
        ran = False  # the command itself returned: a Ctrl-C after it cut its output short, not the command
        try:
            with _deaf_once_stopped(reporter):
                with quiet_tty():  # from the wait for torch on: a Ctrl-C there echoed "^C" before "error: interrupted"
                    if command.needs_torch:
                        wait_for_preload(self.progress if self.front.live is not False and not self.front.json
                                         else None)
                    # a one-shot's start-up is cut short by a signal (stop_on_signals); torchrun's processes stop
                    # together at a step
                    starting = self.front.one_shot and not distributed.launched()
                    with stop_on_signals(reporter, command, starting), telling(reporter.notice):
                        result = run_command(self.session, command, args, reporter)
                        ran = True
                try:
                    if self.front.quiet:
                        pass
                    elif self.front.json:
                        self._close(reporter)  # the progress bar on stderr goes before the document comes
                        # what the summary says of files a run's autosave moved or deleted (a better run's gone) is
                        # said where notices go: the summary is not shown, and the document's fields alone said it
                        for line in getattr(result, NOTICES_BESIDE_JSON, lambda: [])():
                            reporter.notice(line)
                        print(json.dumps(json_document(command, result), default=str), flush=True)
                    else:
                        _mark_failure_said(result, self._says_failure_apart())
                        self.show(reporter, result)
                except BrokenPipeError:
                    raise
                except OSError as e:  # only output happens here (print() of the JSON document)
                    raise OutputLost(e.strerror or str(e)) from None
        except UserError as e:
            self._close(reporter)
            self.usage_error = isinstance(e, UsageError)  # an unknown option: the one-shot shell ends with 2
            self.interrupted = isinstance(e, Interrupted)  # a Ctrl-C the command said in its own words: a stop
            if self.front.quiet:  # a process other than torchrun's first: the error of a file or a device (a data
                distributed.before_error()  # file not there, a folder not writable) is every process's alike
            self._error(phrase(e, self.front.syntax, command.name, self.front.typed) + meant)
            return FAILED
        except KeyboardInterrupt:
            self._close(reporter)
            self.interrupted = True
            # which command, and that it did not finish (a bare "interrupted" said neither, where :checks, :train
            # and :gen each say what they got done)
            said = "ran to its end, but its output was not shown in full" if ran else "stopped before it finished"
            self._error(f"interrupted: {named(command.name)} {said}")
            return FAILED
        except BrokenPipeError:
            # `minitf train --json | head -c 10`: the reader left. Nothing to report, and Python must
            # not complain about the unflushed stdout at exit either.
            silence_stdout()
            self.reader_left = True
            return FAILED
        except OutputLost as e:
            # Standard output cannot be written (a full disk, /dev/full, an I/O error): what the
            # command did stands (a :train saved its checkpoint, a :gen stopped where the text could
            # not be shown). Said once; the rest of the output is dropped.
            silence_stdout()  # first: closing the display writes too
            self._close(reporter)
            self._output_error(str(e))
            return FAILED
        except Exception as e:  # a bug: say so in one line, keep the session going
            self._close(reporter)
            if (short := short_of_memory(e)) is not None and not self.front.debug:
                # no bug: the memory limit, met outside the command's own work (torch's import, as a Ctrl-C's check of
                # its modes imported it: `_torch_modes`)
                self._error(short + meant)
            elif self.front.debug:
                self.err.print(traceback.format_exc(), markup=False, highlight=False, end="", soft_wrap=True)
            else:
                internal_error(self.err, e, self.where)
            return FAILED
        if self.lost is not None:  # the command ran to its stop, its output dropped from the failed write on
            silence_stdout()
            for other in self._hushed:  # the other consoles speak again: this error, and the lines after it
                other.quiet = False
            self._output_error(self.lost)
            return FAILED
        self.interrupted = reporter.stop_requested
        if command.ends_session:
            return QUIT
        failure = getattr(result, "failure", None)  # a result says what failed, where a command can fail and still run
        if failure:
            # The rendered result shows it to a person at the terminal; JSON readers, and whoever reads the errors
            # of output sent elsewhere (`minitf train > run.log`, a pipe), get it on stderr too; not where the errors
            # go to that same file (`> run.log 2>&1`), which then read as if two saves had failed
            if self._says_failure_apart():
                self._error(failure)
            return FAILED
        return OK

    def _says_failure_apart(self) -> bool:
        """Whether a failed result's failure is said on the error console in one line of the door's, the result's
        output going elsewhere (--json; a file or a pipe apart from standard error): its renderer then leaves its own
        error line out (_mark_failure_said)."""
        return self.front.json or (not _seen(self.out) and not same_output(self.out, self.err))

    def _output_error(self, why: str) -> None:
        """Say once that the output could not be written. Piped input ends there, as at a reader that left: its lines
        after ran on with no output to show (a script's :train for minutes, with nothing written), and their notices
        on standard error contradicted "the rest of it is lost"."""
        self.output_failed = True
        after = ", and the lines after this one do not run" if self.ends_at_lost_output else ""
        self._error(f"cannot write the output ({why}); the rest of it is lost{after}")

    def _consoles(self) -> list[Console]:
        """Its consoles, each once (out, err and progress may be one console)."""
        return list({id(c): c for c in (self.out, self.err, self.progress)}.values())

    def _output_lost(self, console: Console, why: str) -> bool:
        """A write of `console` failed (the terminal closed under a running :train: EIO; a full disk): while a command
        runs, its output is dropped from then on and it stops as at SIGHUP, after its current step, so that a :train
        autosaves; the door says it after the command (_run). Before, the error rose out of the step that printed:
        the :train was rolled back as if it had failed, no autosave written, and closing the display raised the
        error again, out of the REPL as a traceback. False outside a command: the caller raises OutputLost."""
        if self.running is None:
            return False
        if console.stderr:  # progress and notices alone are lost (`2>/dev/full`): dropped, and the command goes on;
            console.quiet = True  # its result still reaches standard output
            return True
        if self.lost is None:  # the rest of the command says nothing, on any console: its output is lost
            self.lost = why
            self._hushed = [c for c in self._consoles() if c is not console and not c.quiet]
            for other in self._hushed:
                other.quiet = True
            self.running.request_stop()
        console.quiet = True
        return True

    def _reader_left(self, console: Console) -> None:
        """What a console of this door does when the reader of its output has left the pipe (`minitf train 2>&1 |
        head -3`): it writes no more, and the command running stops as SIGHUP stops it, after its current step, so
        that a :train autosaves; the front end then ends with READER_LEFT. Rich's own raised SystemExit(1) from inside
        the step, and the run was lost, no autosave written."""
        console.quiet = True
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), console.file.fileno())  # Python's flush at exit succeeds too
        except (OSError, ValueError, AttributeError):
            pass
        self.reader_left = True
        if self.running is not None:
            self.running.request_stop()

    def show(self, reporter, result) -> None:
        """Show a command's result, through the reporter its run had: a front end that keeps the result (notebook.Lab's,
        which also draws it a second time in colour) extends this."""
        reporter.finish(result)

    def _reporter(self):
        if self.front.quiet:
            return Reporter()  # shows nothing
        # Where no live display is drawn, a line per evaluation: on progress of its own (the shell's stderr), and on
        # piped input's terminal, which showed nothing for the whole of a long :train (into a file, the final table
        # says it once)
        lines = self.progress is not self.out or _seen(self.progress)
        if self.front.json:  # stdout is the document's alone: progress (where stderr is a terminal) and notices
            return RichReporter(self.progress, live=self.front.live, stream=False, lines=lines)  # go to stderr
        return RichReporter(self.progress, live=self.front.live, out=self.out, lines=lines)

    def _close(self, reporter) -> None:
        """Stop a live display, and end a line of streamed text, before an error line."""
        close = getattr(reporter, "close", None)
        if close is not None:
            close()
        if getattr(reporter, "streamed", False):
            self.out.print()


# a result's method that gives the lines `--json` says on standard error beside the document (TrainResult's: what its
# autosave rotation moved or deleted, which its summary says where there is one)
NOTICES_BESIDE_JSON = "notices_beside_json"


FAILURE_SAID = "failure_said"  # a result's field (view only) that its renderer reads: the door says its failure


def _mark_failure_said(result, apart: bool) -> None:
    """Where the door says a result's failure on standard error itself (`apart`), tell a result that declares the
    field FAILURE_SAID, whose renderer shows the failure as an error line of its own (:device's), to leave it out:
    errors are one message, and `minitf --device cuda device > o.txt 2> e.txt` wrote it into o.txt under the table as
    well as into e.txt."""
    if apart and getattr(result, "failure", None) and hasattr(result, FAILURE_SAID):
        setattr(result, FAILURE_SAID, True)


def command_first(line: str, registry: Registry) -> Command | None:
    """The command that the first word of a line without its ':' names (`train steps=3`, `Help`), else None: the
    REPL's rule for a line read as text that may be meant as a command (FrontDoor._meant_as_command, _not_text), and
    Lab's for a line that runs a command with its ':' left out."""
    words = line.split(None, 1)
    return registry.names().get(words[0].lower()) if words and not words[0].startswith(":") else None


# Curly quotes, as docs and blogs typeset a line (`:set lr=“0.06”`), are characters, not quotes: a value that held them
# was refused as it was ("lr must be a number, got '“0.06”'", "no such file"), with no word of them. A prompt's are its
# text; an option's value's (after `=`) are said, and any in a line of a command that reads no prose.
CURLY = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'"})
_CURLY_VALUE = re.compile(r"=[“”„‘’]")
_CURLY_EDGE = re.compile(r"(?:^|\s|=)[“”„‘’]|[“”‘’](?:\s|$)")


def curly_quotes(line: str, registry: Registry) -> str:
    """What a refusal of `line` adds where curly quotes may be why: the line with straight ones; else ''."""
    stripped = line.strip()
    if not stripped.startswith(":") or stripped.translate(CURLY) == stripped:
        return ""
    command = registry.names().get(stripped[1:].split(None, 1)[0].lower())
    prose = command is not None and reads_prose(command)
    if not (_CURLY_VALUE if prose else _CURLY_EDGE).search(stripped):
        return ""
    return f"; curly quotes (“ ”) are no quotes here: type straight ones, {clip(stripped.translate(CURLY), 200)}"


UNDECODED = re.compile("[\udc80-\udcff]")  # a byte that is no UTF-8, as Python reads it (surrogateescape)


def _words(line: str) -> list[str]:
    """A typed line's words as its quotes group them (`:data "café notes.txt"`: one file's name), else at spaces."""
    try:
        return shlex.split(line)
    except ValueError:  # an unclosed quote: the parser says so; the bytes are checked word by word
        return line.split()


def _seen(console: Console) -> bool:
    """Whether what `console` writes lands on a terminal, in front of a person (piped input's console, which is
    told it is no terminal so as to draw no animation, may still write to one)."""
    try:
        return console.file.isatty()
    except (AttributeError, ValueError, OSError):  # no file, or a closed one
        return False


def silence_stdout() -> None:
    """Point standard output at the null device: nothing more is written, and Python's flush at exit succeeds."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


class OutputLost(Exception):
    """Writing to standard output failed with an error other than a closed pipe (ENOSPC, EIO, ...)."""


# Spaces that end a line, and any colour codes after them (FORCE_COLOR in a pipe): Rich pads a table's rows and a blank
# line to the console's width, which in a file or a pipe broke a diff against saved output and a grep for `x$`
_LINE_END_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)(?=\n)")
_END_SPACES = re.compile(r" +((?:\x1b\[[0-9;]*m)*)\Z")
# per stream written to (the stream itself, not its name: a test runner's next sys.stdout starts afresh): the spaces
# that ended its last write, not yet written
_HELD_SPACES: dict[int, str] = {}


class _GuardedStream:
    """sys.stdout or sys.stderr (whichever it is at each call) for a Console: a failed write raises OutputLost, or,
    where the front door takes it (`on_lost` returns True), is dropped.

    A write error of standard output can happen anywhere output happens (streamed text while :gen
    runs, the result at the end); this names it at the one place all of them pass through, so it
    is never taken for a bug ("internal error: OSError") nor for a failure of the command's own files.

    Where the stream is no terminal, a line's trailing spaces are dropped here too (_unpadded).
    """

    def __init__(self, name: str = "stdout", on_lost: Callable[[str], bool] | None = None):
        self._name = name
        self._on_lost = on_lost

    def write(self, text: str) -> int:
        given = len(text)
        self._do("write", text if self._a_terminal() else self._unpadded(text))
        return given

    def _unpadded(self, text: str) -> str:
        """`text` without the spaces that end its lines. Those that end the write itself are held back, not dropped:
        a streamed :gen's token may end with its space, and the next token continues the line after it; they are
        written before the text that follows them, and dropped where a newline (or the end of the output) does."""
        stream = id(self._stream())
        text = _LINE_END_SPACES.sub(r"\1", _HELD_SPACES.pop(stream, "") + text)
        end = _END_SPACES.search(text)
        if end is None:
            return text
        _HELD_SPACES[stream] = text[end.start():end.start(1)]
        return text[:end.start()] + end.group(1)

    def _a_terminal(self) -> bool:
        try:
            return self._stream().isatty()
        except (AttributeError, ValueError, OSError):  # no stream, or a closed one
            return False

    def flush(self) -> None:
        self._do("flush")

    def _stream(self):
        """The stream itself: under a live display (:train's) sys.stdout is Rich's proxy of it, which a write to would
        send back into the console."""
        stream = getattr(sys, self._name)
        return getattr(stream, "rich_proxied_file", stream)

    def _do(self, what: str, *args):
        try:
            return getattr(self._stream(), what)(*args)
        except BrokenPipeError:
            raise
        except OSError as e:
            said = e.strerror or str(e)
            if self._on_lost is not None and self._on_lost(said):
                return len(args[0]) if args else None
            if self._name == "stderr":
                raise  # as it always was: the front end's own handling of an unwritable stderr (cli._output_lost)
            raise OutputLost(said) from None

    def __getattr__(self, name):  # isatty, fileno, encoding, ...: those of the stream
        if name == "rich_proxied_file":  # Console.file reads it: forwarded, the console wrote past this guard to the
            raise AttributeError(name)  # stream during a live display (a terminal closed under :train: a raw EIO)
        return getattr(self._stream(), name)


def guard_stdout(console: Console, on_lost: Callable[[str], bool] | None = None) -> None:
    """Let `console`'s writes to standard output or error fail as OutputLost, or go to `on_lost` (a console with a
    file of its own is left as it is)."""
    if getattr(console, "_file", None) is None:
        console.file = _GuardedStream("stderr" if console.stderr else "stdout", on_lost)


# --- Ctrl-C, SIGTERM, SIGHUP and the terminal while a command runs ---------------------------------
@contextlib.contextmanager
def stop_on_signals(reporter: Reporter, command: Command | None = None, starting: bool = False):
    """While a command runs, Ctrl-C, SIGTERM and SIGHUP ask it to stop (after the current step or
    token) instead of killing the process, so a stopped :train still autosaves.

    An `interruptible` command (e.g. :save) polls no stop flag: the first signal raises
    KeyboardInterrupt inside it, and it cleans up and reports; so does any command while it waits
    inside core.interrupts.cut_short() (a download). Later ones are ignored, so a second,
    fast Ctrl-C (or the SIGTERM a supervisor repeats) cannot cut that clean-up short. One that finds an
    import going on is raised once the import has ended (a few tenths of a second; torch's own, the
    first thing most commands do in a one-shot, takes seconds). SIGTERM and
    SIGHUP are also recorded on the reporter (`terminate_signal`): the front end exits after the
    command, with signal_status().

    `starting` (the one-shot shell, whose session ends with its one command): until the command first asks
    should_stop(), a signal cuts it short as inside cut_short(). Before that first question it has no step to stop
    after, only its start-up: `minitf train` imports torch, reads its data and builds its model (3 to 5 s on a small
    CPU), and a Ctrl-C there, asked to stop "after this step", was heard only at step 0, with three lines for a run
    that never began. Cut short, nothing is lost: the session goes with the process, and every file minitf writes is
    written whole or not at all (a save cut short cleans up, as :save's does). Not in the REPL, whose session goes on
    and must not be left half changed (a model half built); nor under torchrun, whose processes stop together at a
    step (core.train), where one cut short alone would leave the others waiting for it. An import under way is waited
    for even so: cut in two, torch's (which swallows any error of its import of numpy and goes on) failed the rest of
    the start-up ("cannot load module more than once per process") or aborted the process as it ended. A signal not
    through by the command's first question is raised there, before its first step. A one-shot command that never
    asks should_stop() (a view, :save) is therefore cut short wherever a signal finds it, its whole run long: one that
    writes files must write them so that a cut leaves nothing half written (core.checkpoint's store: a temporary
    name, renamed at the end, cleaned up on any exception).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interruptible = command is not None and command.interruptible
    caller = sys._getframe(2)  # the frame of the `with` block (1: contextlib's __enter__): the command runs above it
    raised = []
    alarm = []  # the SIGALRM handler before a KeyboardInterrupt was put off until an import ends

    def first_question() -> None:
        # A signal of the start-up not through by the command's first question (put off until an import or code run
        # from a text ended, just before it): raised here, before the first step, not heard as a stop after it (three
        # lines, for a run that never began)
        if alarm and signal.getitimer(signal.ITIMER_REAL)[0] > 0:
            signal.setitimer(signal.ITIMER_REAL, 0)
            if holding():
                hold_back()
            else:
                raise KeyboardInterrupt

    asked = _FirstQuestion(reporter, first_question) if starting else None

    def in_start_up() -> bool:  # a one-shot command that has not asked should_stop() yet
        return asked is not None and not asked.asked

    def cut() -> bool:  # whether a signal now raises KeyboardInterrupt rather than ask for a stop
        return interruptible or may_cut_short() or in_start_up()

    def ask_later() -> None:
        if not alarm:
            alarm.append(signal.signal(_ALARM, later))
        signal.setitimer(signal.ITIMER_REAL, 0.05)

    def interrupt(frame) -> None:
        if holding():  # a part that must be done whole (a trial step undone): it raises at its end
            hold_back()
        elif _ALARM is not None and (_importing(frame) or _run_from_text(frame, caller)):
            # Cut in two, an import leaves a package without its submodule for good (torch's lazy import of
            # sympy, in :grad's first gradient: every later :grad failed with "module 'sympy' has no attribute
            # 'core'"): ask again in a moment, once it has ended. So for code run from a text (_run_from_text),
            # which ends in a moment too
            ask_later()
        else:
            raise KeyboardInterrupt

    def handler(signum, frame):
        if signum in TERMINATING and reporter.terminate_signal is None:
            reporter.terminate_signal = signum
        if cut() and not raised:  # a wait with no next step (core.interrupts), or a one-shot's start-up
            raised.append(signum)
            interrupt(frame)
            return
        if not interruptible:
            reporter.request_stop()

    def later(signum, frame):
        if cut():
            interrupt(frame)
        else:  # the wait that was to be cut short has ended: stop at the next step instead
            reporter.request_stop()

    modes = None
    try:
        with handling(STOP_SIGNALS, handler):
            with held():  # read whole: autocast's level is read by going one level in and out again
                modes = _torch_modes()
            yield
    finally:
        if asked is not None:
            asked.close()
        if raised and modes is not None:
            from .core.precision import put_back_modes

            put_back_modes(modes)
        if alarm:
            pending = signal.setitimer(signal.ITIMER_REAL, 0)[0] > 0
            signal.signal(_ALARM, alarm[0])
            if pending:  # the command ended before the import did: the front end still hears of the Ctrl-C
                reporter.request_stop()


_ALARM = getattr(signal, "SIGALRM", None) if hasattr(signal, "setitimer") else None  # None on Windows


class _FirstQuestion:
    """Notes when a command first asks its reporter should_stop(): from then on it stops when asked, at its next
    step or token (stop_on_signals' `starting`), and `first()` is called at that first question. The reporter's own
    method is wrapped for the command's run, on that one reporter, and put back by close(): whatever the reporter's
    class (a live display's, a test's), a command reaches it only so (`reporter.should_stop()`, or core.train's
    `should_stop=reporter.should_stop`)."""

    def __init__(self, reporter: Reporter, first: Callable[[], None]):
        self.asked = False
        self._reporter = reporter
        self._own = "should_stop" in vars(reporter)  # an instance's own (rare): put back as it was
        self._ask = reporter.should_stop

        def should_stop() -> bool:
            if not self.asked:
                self.asked = True
                first()
            return self._ask()

        reporter.should_stop = should_stop

    def close(self) -> None:
        if self._own:
            self._reporter.should_stop = self._ask
        else:
            vars(self._reporter).pop("should_stop", None)


# A KeyboardInterrupt raised inside a command may land inside torch's own `with torch.no_grad():` or autocast block as
# it leaves: their __exit__ puts torch's global modes back in Python, so cut there gradients stayed off (every later
# :train ended in "internal error: element 0 of tensors does not require grad"; a Ctrl-C during :patch did it), or
# autocast a level deep (bfloat16 training then computed every step with the first step's weights). What the command
# found is put back once a Ctrl-C was raised in it (core.precision.put_back_modes).
def _torch_modes() -> tuple | None:
    """torch's global modes now; None before torch is imported (a command that needs it waits for it first)."""
    if "torch" not in sys.modules:
        return None
    from .core.precision import global_modes

    return global_modes()


def _run_from_text(frame, until) -> bool:
    """Whether `frame` runs inside code that exec() or eval() runs from a string (each dataclass made, a namedtuple:
    many, while torch is imported), above the frame `until` (the command's caller: `python -c` and pytest-xdist's
    workers run all of minitf so, from below it). A KeyboardInterrupt raised out of such code marks the interpreter's
    run as ended by Ctrl-C, though the front door catches it (CPython's run_eval_code_obj), and `python -m minitf_repl`
    then ended by SIGINT whatever its status: a SIGTERM in a one-shot's start-up gave -2 (130 to a shell) for 143."""
    while frame is not None and frame is not until:
        if frame.f_code.co_filename == "<string>" and frame.f_code.co_name == "<module>":
            return True
        frame = frame.f_back
    return False


def _importing(frame) -> bool:
    """Whether `frame` (where a signal found the main thread) runs inside an import."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def handling(signals, handler):
    """`handler` for each of `signals` within the block; the previous handlers afterwards (main thread only).

    A signal ignored when the block starts stays ignored, as the Unix convention has it: `nohup minitf train &` is
    started with SIGHUP ignored so that closing the terminal leaves the run going, and it stopped the run (and exited
    129) all the same; a shell's background job ignores SIGINT likewise."""
    previous = {signum: signal.signal(signum, handler) for signum in signals
                if signal.getsignal(signum) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


stop_on_sigint = stop_on_signals  # the name it had when it handled Ctrl-C alone


@contextlib.contextmanager
def _deaf_once_stopped(reporter: Reporter):
    """Around a command and the showing of its result, outside stop_on_signals (which handles Ctrl-C while it runs):
    a Ctrl-C is KeyboardInterrupt as ever, unless the command was stopped already. The Ctrl-Cs pressed after the first
    (a reflex presses several) all asked it to stop, which it did; one landing in the rendering cut a stopped :train's
    summary, its way to continue and its autosave's line short, with "error: interrupted" in their place. Main
    thread only; a Ctrl-C ignored where minitf started (a background job) stays ignored (handling)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if not reporter.stop_requested:
            raise KeyboardInterrupt

    with handling((signal.SIGINT,), handler):
        yield


@contextlib.contextmanager
def quiet_tty(stream=None):
    """No echo while a command runs: a typed key or the `^C` the terminal echoes for Ctrl-C would
    otherwise land inside the live progress display and leave a stray line behind."""
    stream = stream if stream is not None else sys.stdin
    try:
        import termios

        fd = stream.fileno()
        old = termios.tcgetattr(fd) if os.isatty(fd) and in_the_foreground(fd) else None
    except Exception:  # no termios (Windows), no real stdin (tests): nothing to do
        old = None
    if old is None:
        yield
        return
    new = list(old)
    new[3] &= ~(termios.ECHO | getattr(termios, "ECHOCTL", 0))
    try:
        termios.tcsetattr(fd, termios.TCSANOW, new)
    except Exception:
        yield
        return
    try:
        yield
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSANOW, old)
        except Exception:
            pass


# --- the background torch import ------------------------------------------------------------------
_preload_thread: threading.Thread | None = None


def preload() -> None:
    """Import torch and the core in a daemon thread (once), so the first command rarely waits."""
    global _preload_thread
    if _preload_thread is not None:
        return

    def work():
        try:
            import torch  # noqa: F401

            from .core import data, device, generate, model, trace, train  # noqa: F401
        except BaseException:  # a broken install shows up, with its message, when a command needs torch
            pass

    _preload_thread = threading.Thread(target=work, name="minitf-preload", daemon=True)
    _preload_thread.start()
    atexit.register(_finish_preload)


def _finish_preload() -> None:
    """At exit, let a torch import still under way end first. A session that quits within a second of starting
    (`printf ':quit\n' | minitf`, a quick `:q`) otherwise left the interpreter while the daemon thread was inside
    torch's C++ start-up, and the process died of `terminate called without an active exception` (exit 134, about
    one quit in five). Waiting costs such a quit the rest of the import, about a second."""
    thread = _preload_thread
    if thread is not None and thread.is_alive():
        thread.join()


def wait_for_preload(console: Console | None) -> None:
    """A command that needs torch while it is still loading says so (interactively) instead of
    seeming to hang; piped input waits silently, to keep its output clean."""
    thread = _preload_thread
    if thread is not None and thread.is_alive():
        if console is not None:
            console.print(Text("loading torch...", style="dim"), highlight=False)
        thread.join()
