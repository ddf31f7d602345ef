"""The interactive shell: a prompt-toolkit prompt over the command registry.

Typed lines and piped input both go through the front door (dispatch.FrontDoor), so
`printf ':shapes\n' | minitf` behaves like typing the line. This module holds only what is
particular to a prompt: completion generated from the registry, history, the bottom toolbar, and
the loop. Nothing here knows any command by name.

Startup must not wait for torch: nothing here imports it. Once the first prompt is on screen a
daemon thread imports torch and the core modules, so the first `:train` rarely waits.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import re
import signal
import stat
import sys
import threading
from pathlib import Path
from typing import Callable, Iterable

from prompt_toolkit import PromptSession
from prompt_toolkit.application.current import get_app
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.filters import emacs_insert_mode, vi_insert_mode
from prompt_toolkit.key_binding import KeyBindings, merge_key_bindings
from prompt_toolkit.key_binding.bindings.mouse import load_mouse_bindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.utils import is_dumb_terminal
from rich.cells import cell_len
from rich.console import Console

from . import __version__
from .commands import REGISTRY
from .commands.shared import stopped_run_line
from .core.catalog import CORPORA, TASKS, no_file_named
from .core.errors import UserError
from .core.paths import adopt_old_history, cut_middle, history_path
from .core.words import count
from .dispatch import (EMPTY, FAILED, QUIT, READER_LEFT, TERMINATING, FrontDoor, FrontEnd, handling, preload,
                       signal_status)
from .palette import terminal_safe
from .parsing import COPIED_PROMPT, PROMPT, PROSE, in_comment
from .render import error, render, say
from .render.words import on_a_terminal
from .syntax import cmd, speaking


def progress_console(out: Console, err: Console | None) -> Console:
    """Where the REPL's progress, notices and stop message go: with the results (a transcript in front of the person
    at the keyboard), except where the results go to a file and standard error is a terminal (`minitf > session.log`
    at the prompt): a :train showed nothing for the whole run, and its Ctrl-C message went to the file. There, as from
    the one-shot shell (`minitf train > run.log`), a run's evaluations come as lines or a bar on the terminal, and the
    file gets the final table."""
    return err if err is not None and on_a_terminal(err) and not on_a_terminal(out) else out


def piped_progress_console(out: Console, err: Console | None) -> Console:
    """Where piped input's progress, notices and stop message go: with the results on a terminal (`printf ... |
    minitf`), else to standard error, as the one-shot shell's go. Kept with the results in a file, as the REPL's are,
    the notices ran among the results where both went to files (`minitf < s.txt > log 2> err`, a cron job) and no
    `2>/dev/null` dropped them; and with both in one file (`> log 2>&1`) a run wrote no line until its end, its stop
    notice above its own table. As `minitf train > run.log 2>&1` does, a run writes a line per evaluation to
    standard error as it goes, and the results get the final table."""
    return err if err is not None and not on_a_terminal(out) else out


def run_lines(lines: Iterable[str], session, console: Console, err_console: Console | None = None,
              debug: bool = False, transcript: bool = False) -> int:
    """Non-interactive mode: every line through the front door. Exit status 1 if any command failed.

    `transcript` (`minitf --transcript < lesson.txt`): each line that is not blank goes to the output after the
    prompt, before what it shows, as typed at the REPL, so that the output (`> out.txt`) reads command, output,
    command, output; its comments too, a lesson's headings. Off by default: a script's output stays its results
    alone, as scripts written before it (and the programs reading their output) expect.

    SIGTERM or SIGHUP during a command stops it (a :train autosaves) and ends the input there:
    the status is then 143 or 129 (dispatch.signal_status), and the lines after it are not run.
    Ctrl-C likewise, with 130: a script's next :train must not start when Ctrl-C stopped this one
    (as a shell script ends at Ctrl-C, and the REPL drops pasted lines after it). A reader of the output that left
    (`minitf < lesson.txt | head`) ends it too, with READER_LEFT (141), and so does an output that cannot be written
    (`> /dev/full`, a full disk), with 1.
    """
    door = FrontDoor(session, console, err_console, FrontEnd(live=False, debug=debug, keyboard=False),
                     progress=piped_progress_console(console, err_console))
    door.ends_at_lost_output = True
    failed = False
    for number, line in enumerate(lines, 1):
        door.where = f"line {number}: "  # a script's error names its line, as a shell's does (`bash: line 7: ...`)
        if transcript and line.strip():
            door.echo(line.rstrip("\r\n"))
            if door.reader_left:
                return READER_LEFT
            if door.output_failed:
                return 1
        if line.lstrip().startswith("#"):  # a script's comment, as in a shell script (`:gen #...` generates from '#')
            continue
        status = door.run_line(line.rstrip("\r\n"))
        failed = failed or status == FAILED
        if door.terminated is not None:
            return signal_status(door.terminated)
        if door.reader_left:  # no one reads what the lines after would show: a shell script ends at SIGPIPE too
            return READER_LEFT
        if door.output_failed:  # nor where what they show cannot be written
            return 1
        if door.interrupted:
            return signal_status(signal.SIGINT)
        if status == QUIT:
            break
    return 1 if failed else 0


def stdin_lines(stream=None) -> Iterable[str]:
    """Lines of standard input as text; bytes that are not UTF-8 become Python's stand-ins for bytes (lone
    surrogates), never an exception, which the front door refuses as bytes (U+FFFD was blamed on the vocabulary,
    "1 character not in the vocabulary: '\ufffd'; ... train on data that contains it"). A UTF-8 byte
    order mark that starts a line (a script saved by Notepad or PowerShell; each of several such files joined, `cat
    a.txt b.txt | minitf`) is no text: it was read as the line's first character, so that `:train` there became a
    prompt the vocabulary could not read. A lone "\r" ends a line too, as in a paste (run_pasted) and a data file: a
    script with old Mac line endings was read as one line, its first command given all the others as its words
    ("`:set` ... not both: :set :set shows")."""
    stream = stream if stream is not None else sys.stdin.buffer
    for raw in stream:
        text = raw.decode("utf-8", "surrogateescape")
        yield from (line.removeprefix("\ufeff") for line in re.split(r"\r(?!\n)", text))


# --- history -----------------------------------------------------------------------------------
ELSEWHERE = "$MINITF_HISTORY=FILE keeps it in another file"  # a warning's way on: it was said at every start, no fix


class SafeFileHistory(FileHistory):
    """FileHistory that turns a read or write failure into one warning, then keeps going in memory."""

    def __init__(self, filename, warn: Callable[[str], None], read_only: bool = False):
        super().__init__(filename)
        self._warn = warn
        self._broken = read_only  # a file that can be read, not written: its entries, and this session's in memory

    def _fail(self, what: str, exc: Exception) -> None:
        if not self._broken:
            self._broken = True
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc  # not "[Errno 28] No space ..."
            self._warn(f"warning: cannot {what} history file {self.filename} ({why}); history is kept in memory; "
                       f"{ELSEWHERE}")

    def load_history_strings(self):
        try:
            return list(super().load_history_strings())
        except Exception as e:
            self._fail("read", e)
            return []

    def store_string(self, string: str) -> None:
        if self._broken:
            return
        try:
            if os.path.exists(self.filename) and not os.path.isfile(self.filename):  # swapped for a FIFO meanwhile
                raise OSError(f"{self.filename} is not a regular file any more")
            self._append(string)
        except Exception as e:
            self._fail("write", e)

    def _append(self, string: str) -> None:
        """The entry as FileHistory spells it, in one write to the end of the file. FileHistory wrote it through an
        8 KiB buffer, so a long entry (a pasted text) went out in several writes, and two REPLs sharing the file
        interleaved them: both entries came back broken. One O_APPEND write lands whole after whatever is there."""
        lines = "".join(f"+{line}\n" for line in string.split("\n"))
        data = f"\n# {datetime.datetime.now()}\n{lines}".encode("utf-8", errors="replace")
        # O_BINARY: Windows opens a descriptor from os.open in text mode unless told, and each "\n" went out as "\r\n";
        # prompt-toolkit, which reads the file as bytes, gave every entry back with a "\r" at its end
        fd = os.open(self.filename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            before, written = os.fstat(fd).st_size, 0
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
            except OSError:
                # a full disk took part of the entry: the cut entry, which Up recalled in the next session, goes. Only
                # where the file ends with this write's bytes: another REPL's entry after them is left alone
                if written and os.fstat(fd).st_size == before + written:
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, before)
                raise
        finally:
            os.close(fd)


MAX_HISTORY_BYTES = 16 * 2**20  # some 300,000 typed lines: start-up never reads an unbounded file


def make_history(path: Path | str, warn: Callable[[str], None]) -> History:
    """A file history at `path`, or (after one warning) an in-memory one if the file cannot be used; in memory
    without a word where `path` is the null device (`MINITF_HISTORY=/dev/null`, as HISTFILE=/dev/null keeps a shell's
    history off the disk): it was a warning at every start that named no way to keep no history."""
    p = Path(path)
    if is_null_device(p):
        return InMemoryHistory()
    try:
        if p.is_dir():
            raise IsADirectoryError(f"{p} is a directory")
        # a file where a folder of the path should be: mkdir said "File exists" ($XDG_STATE_HOME or $HOME a file)
        blocking = next((f for f in p.parents if f.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise NotADirectoryError(f"{cut_middle(str(blocking))} is a file, not a folder")
        p.parent.mkdir(parents=True, exist_ok=True)
        # Opened without blocking and checked before use: a FIFO there would block start-up forever
        # (opening one waits for its other end), and a device is no place for a history.
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"it is {_file_kind(st.st_mode)}, not a regular file")
            kept = None
            if st.st_size > MAX_HISTORY_BYTES:  # prompt-toolkit reads the whole file at start
                kept = _newest_entries(fd, st.st_size)
                if kept is None:
                    raise ValueError(f"it has {st.st_size:,} bytes, more than the {MAX_HISTORY_BYTES:,} read at "
                                     "start; shorten it")
            os.read(fd, 1)
        finally:
            os.close(fd)
        if kept is not None:  # a history that grew over the years: its newest entries go on, not all of it lost
            _replace_with(Path(os.path.realpath(p)), kept)  # a link's target: the link (to a dotfiles repo) stays
            warn(f"warning: history file {cut_middle(str(p))} had {st.st_size:,} bytes, more than the "
                 f"{MAX_HISTORY_BYTES:,} read at start: its oldest entries were dropped, its newest {len(kept):,} bytes "
                 "kept")
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        if isinstance(e, OSError) and e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and _readable(p):
            # a read-only home or a snapshot: the entries are there to recall (Up, Ctrl-R found none of them)
            warn(f"warning: cannot write history file {cut_middle(str(p))} ({reason}); its entries are read, and "
                 f"this session's are kept in memory; {ELSEWHERE}")
            return SafeFileHistory(str(p), warn, read_only=True)
        warn(f"warning: cannot use history file {cut_middle(str(p))} ({reason}); history is kept in memory "
             f"for this session; {ELSEWHERE}")
        return InMemoryHistory()
    return SafeFileHistory(str(p), warn)


def _readable(path: Path) -> bool:
    """Whether `path` is a regular file that can be read whole at start (not past MAX_HISTORY_BYTES)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        return stat.S_ISREG(st.st_mode) and st.st_size <= MAX_HISTORY_BYTES
    finally:
        os.close(fd)


def is_null_device(path: Path) -> bool:
    """Whether `path` is the null device (os.devnull, a link to it, or another name of its device)."""
    try:
        return os.path.samefile(path, os.devnull)
    except (OSError, ValueError):  # no such file, or no null device to compare with
        return str(path) == os.devnull


def _newest_entries(fd: int, size: int) -> bytes | None:
    """The last half of MAX_HISTORY_BYTES of a history file, from the first entry that starts in it (prompt-toolkit
    writes each as "\n# TIME\n+LINE\n"); None where it holds no such entry (it is no history file)."""
    keep = MAX_HISTORY_BYTES // 2
    os.lseek(fd, size - keep, os.SEEK_SET)  # not os.pread, which Windows lacks: a long history ended the start there
    tail = b""
    while len(tail) < keep and (chunk := os.read(fd, keep - len(tail))):
        tail += chunk
    at = tail.find(b"\n# ")
    if at < 0 or b"\x00" in tail:
        return None
    return tail[at:]


def _replace_with(path: Path, data: bytes) -> None:
    """Write `data` as the file at `path`, whole or not at all (a file beside it, then renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0),
                 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "an unknown kind of file"


# --- completion --------------------------------------------------------------------------------
class CommandCompleter(Completer):
    """Completes `:name` (commands and aliases), then `key=` for the command's options, then values.

    Everything comes from the registry: option names and aliases, choices, on/off, `none` for a
    nullable option, and for free text or an option with a `complete` function, what it returns.
    """

    def __init__(self, registry=None, session=None):
        self.registry = registry if registry is not None else REGISTRY
        self.session = session  # passed to the `complete` functions (checkpoint names need its folder)

    def _values(self, param) -> list[str]:
        return param.completions(self.session)

    def get_completions(self, document, complete_event):
        # the line the cursor is on: a paste of several commands is in the buffer at once, and the menu offered
        # :set's options under `:set n_layers=1\n:config\n`, and nothing for `:tr` on its second line
        text = document.current_line_before_cursor
        stripped = text.lstrip()
        if not stripped and complete_event.completion_requested:  # Tab on an empty line: what there is to type
            for name, command in self.registry.names().items():
                yield Completion(":" + name, display_meta=command.summary)
            return
        if not stripped.startswith(":"):
            return
        names = self.registry.names()
        if not any(ch.isspace() for ch in stripped):  # still typing the command name
            for name, command in names.items():
                if (":" + name).startswith(stripped.lower()):  # names run in any case (`:TRAIN`): Tab too
                    yield Completion(":" + name, start_position=-len(stripped), display_meta=command.summary)
            return
        command = names.get(stripped.split()[0][1:].lower())
        if command is None:
            return
        word = self._last_word(stripped)
        before = stripped[: len(stripped) - len(word)].split()[1:]
        if in_comment(command, before + [word]):  # the parser drops it: an option there would do nothing
            return
        pairs = self._pairs(command)
        in_contender = bool(pairs) and "," in word
        if in_contender:  # `norm=rmsnorm,bi<Tab>`: a contender's next setting, after the comma
            word = word.rpartition(",")[2]
        if "=" in word:
            key, _, partial = word.partition("=")
            key = key[2:] if key.startswith("--") else key  # `--dtype=`, as the parser reads it (`--steps=200`)
            param = self._param(command, key) or self._pair(pairs, key)
            if param is not None:
                yield from self._value_completions(param, partial, complete_event)
            else:  # `:ablate head=<Tab>`: no option of that name; a word of the text's own has it (head=0.1)
                yield from self._positional_completions(command, before, word, complete_event)
            return
        if before and before[-1].endswith("=") and before[-1].count("=") == 1:
            # `:set optimizer= <Tab>`: the line refuses a space after '=', and offered the other options, each refused
            # there; the value comes in its place, the space taken out
            key = before[-1][:-1]
            key = key[2:] if key.startswith("--") else key
            param = self._param(command, key) or self._pair(pairs, key)
            if param is not None:
                head = stripped[: len(stripped) - len(word)]
                gap = len(head) - len(head.rstrip())
                for completion in self._value_completions(param, word, complete_event):
                    yield Completion(completion.text, start_position=completion.start_position - gap,
                                     display=completion.display)
                return
        flag = self._flag(command, before[-1]) if before else None
        if flag is not None:  # `--steps ` or `-n `: the option's value goes here, not another option
            yield from self._value_completions(flag, word, complete_event)
            return
        other = names.get(before[0].lstrip(":").lower()) if command.about_commands and len(before) == 1 else None
        if other is not None:  # `:help qkv <Tab>`: what `:help qkv KEY` explains, the options of :qkv
            for value in [p.name for p in other.params if p.positional] + [f"{p.name}=" for p in other.options]:
                if value.startswith(word.lower()) and value != word:
                    yield Completion(value, start_position=-len(word))
            typed = word.lower().replace("-", "_")
            for param in other.options:  # `:help set block<Tab>`: another spelling, as `:set block<Tab>` completes it
                if typed and not param.name.startswith(typed) and (
                        alias := next((a for a in param.aliases if a.startswith(typed)), None)):
                    yield Completion(f"{param.name}=", start_position=-len(word), display=f"{alias}= -> {param.name}=")
            return
        # the options given on the line, after the cursor too (`:train | steps=5`: steps= again was refused as given
        # twice), in any case as the parser reads them (`STEPS=5`)
        after = document.current_line_after_cursor
        rest = after.split()[0 if after[:1].isspace() else 1:]  # not the rest of the word the cursor is in
        used = {tok.split("=", 1)[0].lstrip("-").replace("-", "_").lower() for tok in before + rest if "=" in tok}
        used |= {flag.name for tok in before + rest if (flag := self._flag(command, tok, bools=True)) is not None}
        typed = word.lstrip("-").replace("-", "_")
        # after a contender's comma only its settings: :compare's own options there (data=, steps=) were refused
        offered = [param for param in (() if in_contender else command.options)
                   if param.name not in used and not any(alias in used for alias in param.aliases)]
        own = {param.name for param in command.options}
        offered += [param for param in pairs if param.name not in own]  # a contender's settings: again in the next
        for param in offered:
            if param.name.startswith(typed):
                yield Completion(f"{param.name}=", start_position=-len(word))
        # another spelling (nanoGPT's block_size) completes to the option's own name, saying why, after every own
        # name: first, `:set n_` took n_embd's d_model= for the n_heads= typed toward. Once per option, and not
        # where its own name was offered already (`:set n_la` listed n_layers= twice, once as n_layer=)
        for param in offered if typed else ():
            if param.name.startswith(typed):
                continue
            if (alias := next((a for a in param.aliases if a.startswith(typed)), None)) is not None:
                yield Completion(f"{param.name}=", start_position=-len(word), display=f"{alias}= -> {param.name}=")
        yield from self._positional_completions(command, before, word, complete_event)

    def _positional_completions(self, command, before: list[str], word: str, complete_event):
        """The words of the command's text that complete `word`. Words that share a `key=` (:ablate's head=0.0 ...
        head=3.3) are offered as that `key=` until it is typed: the menu then lists the heads the model has."""
        positional = command.positional
        given = self._positional_words(command, before)
        if positional is not None and not word.startswith("-") and (positional.several or not given):
            # `:help :tr<Tab>`: a command named with its colon, as :help reads it (it completed to nothing)
            typed = word[1:] if command.about_commands and word.startswith(":") else word
            start = -len(word)
            if positional.several:  # `:checks blind,<Tab>`: the words may be joined by commas
                given = [part for words in given for part in words.split(",")]
                if "," in typed:
                    joined, _, typed = typed.rpartition(",")
                    given, start = given + joined.split(","), -len(typed)
            values = self._values(positional)
            if positional.after_alone is not None and any(w.lower() in positional.alone for w in given):
                values = positional.after_alone(self.session)
            named = [value for value in values if value.startswith(typed) and value != typed
                     and value not in given and not (given and value in positional.alone)]
            keys = [value.partition("=")[0] + "=" for value in named if "=" in value and "=" not in typed]
            offered = []
            for value in named:
                key = value.partition("=")[0] + "="
                shown = key if keys.count(key) > 1 else value
                if shown not in offered:
                    offered.append(shown)
                    yield Completion(shown, start_position=start)
            if positional.spellings is not None and typed and not given:
                # `:help block<Tab>`: a word by another spelling (Param.spellings), to its own, saying why
                key = typed.lower().replace("-", "_")
                for alias, own in positional.spellings().items():
                    if alias.startswith(key) and alias != key and own not in offered:
                        offered.append(own)
                        yield Completion(own, start_position=start, display=f"{alias} -> {own}")
            yield from self._browsed(positional, word, named, complete_event)

    def _value_completions(self, param, partial: str, complete_event):
        """What completes `partial` as `param`'s value: its named values, then what is on the disk (Param.browse)."""
        named = [value for value in self._values(param) if self._starts(param, value, partial)]
        for value in named:
            yield Completion(value, start_position=-len(partial))
        yield from self._browsed(param, partial, named, complete_event)

    @staticmethod
    def _browsed(param, typed: str, named: list[str], complete_event):
        """The files and folders that complete `typed` where `param` takes a path: once it reads as one (`./`, `~/`,
        `/`, `hf:`), or where no name of the value's own begins it (`:data my<Tab>` for my_corpus.txt here). At Tab
        only, not at each key typed: a folder of thousands of files (a home folder, a network drive) is read then."""
        if param.browse is None or not typed or not complete_event.completion_requested:
            return
        if named and not looks_like_path(typed):
            return
        for text, shown in path_completions(typed, param.browse):
            yield Completion(text, start_position=-len(typed), display=shown)

    @staticmethod
    def _last_word(text: str) -> str:
        """The word the cursor ends: from the last space outside quotes (a quoted path's spaces are its own), "" after
        a space."""
        start, quote, escaped = 0, None, False
        for at, ch in enumerate(text):
            if escaped:  # `\"` inside double quotes is a quote of the text (parsing's escapes)
                escaped = False
            elif quote == '"' and ch == "\\":
                escaped = True
            elif quote is not None:
                quote = None if ch == quote else quote
            elif ch in "\"'":
                quote = ch
            elif ch.isspace():
                start = at + 1
        return text[start:]

    @classmethod
    def _positional_words(cls, command, tokens: list[str]) -> list[str]:
        """The words of `tokens` typed as the command's text: not an option (`key=value`, `--key VALUE`, a flag)."""
        words, skip = [], False
        for token in tokens:
            if skip:
                skip = False
            elif (flag := cls._flag(command, token, bools=True)) is not None:
                skip = flag.type is not bool  # `--name run1`: run1 is the option's value
            elif not ("=" in token and command.param_named(token.split("=", 1)[0].lstrip("-")) is not None):
                words.append(token)
        return words

    @staticmethod
    def _pairs(command) -> list:
        """The options whose key=value pairs the command's text holds (Param.pairs), refused ones left out."""
        positional = command.positional
        found = positional.pairs() if positional is not None and positional.pairs is not None else []
        return [param for param in found if param.refusal is None]

    @staticmethod
    def _pair(pairs: list, key: str):
        key = key.replace("-", "_").lower()
        return next((param for param in pairs if key == param.name or key in param.aliases), None)

    @staticmethod
    def _starts(param, value: str, typed: str) -> bool:
        """`value` completes `typed`: in any case where the value is read in any case (a choice, on/off: `RMSNorm`)."""
        if param.choices or param.type is bool:
            return value.lower().startswith(typed.lower())
        return value.startswith(typed)  # a checkpoint's or a file's name: as the disk spells it

    @classmethod
    def _flag(cls, command, token: str, bools: bool = False):
        """The option a `--key` or `-k` token names without its value (a flag too where `bools`), else None."""
        if "=" in token or not token.startswith("-"):
            return None
        if token.startswith("--"):
            param = cls._param(command, token[2:])
        else:
            param = next((p for p in command.options if p.short is not None and token == f"-{p.short}"), None)
        return param if param is not None and (bools or param.type is not bool) else None

    @staticmethod
    def _param(command, key: str):
        param = command.param_named(key)
        return param if param is not None and param.refusal is None else None


MAX_BROWSED = 200  # entries Tab lists from one folder: a folder of thousands would fill the screen and wait


def looks_like_path(typed: str) -> bool:
    """Whether a typed value reads as a file's path rather than a name: a folder in it, `~`, `.`, `hf:`, a quote."""
    body = typed.lstrip("\"'")
    return body.startswith(("~", ".", "/", "hf:")) or "/" in body or os.sep in body


def path_completions(typed: str, browse: str) -> list[tuple[str, str]]:
    """(completion, what the menu shows) for the entries of the folder `typed` names whose names begin its last part:
    folders end in "/" (Tab goes on into them); files only where `browse` is "files". "hf" completes folders after
    `hf:`. A path with a space, or one typed after a quote, comes back in double quotes, closed after a file, as the
    line's parser reads it; a hidden entry only when its "." is typed."""
    quote = typed[:1] if typed[:1] in "\"'" else ""
    body = typed[len(quote):]
    prefix = ""
    if browse == "hf":
        if not body.lower().startswith("hf:"):
            return []
        prefix, body = body[:3], body[3:]
    if body in ("~", ".."):  # the home folder, the folder above: Tab goes into them, as a shell's does
        return [(f"{quote}{prefix}{body}/", f"{body}/")]
    cut = max(body.rfind("/"), body.rfind(os.sep))
    folder, start = body[: cut + 1], body[cut + 1:]
    try:
        where = os.path.expanduser(folder) if folder else "."
        hidden = start.startswith(".")
        with os.scandir(where) as entries:
            found = sorted((entry.name, entry.is_dir()) for entry in entries
                           if entry.name.startswith(start) and (hidden or not entry.name.startswith(".")))
    except (OSError, RuntimeError, ValueError):  # no such folder, no permission; ~ with no home folder
        return []
    completions = []
    for name, is_dir in found:
        if not is_dir and browse != "files":
            continue
        path = f"{prefix}{folder}{name}{'/' if is_dir else ''}"
        mark = quote or ('"' if any(ch.isspace() or ch in "\"'" for ch in path) else "")
        if mark and mark in path:
            mark = "'" if mark == '"' else '"'
        completions.append((f"{mark}{path}{'' if is_dir or not mark else mark}", name + ("/" if is_dir else "")))
        if len(completions) == MAX_BROWSED:
            break
    return completions


# --- typed escape sequences ---------------------------------------------------------------------
def tolerant_mouse_bindings() -> KeyBindings:
    """Mouse events whose data is not a mouse report are typed text, not a crash.

    ESC typed by hand, then `[31m`, reads to the terminal parser like an SGR mouse report; prompt-
    toolkit's own handler then fails to unpack it, prints "Unhandled exception in event loop" and
    loses the line. This binding (added after the defaults, so it wins) runs the default handler and,
    when the data is malformed, puts the characters into the line as the user typed them.
    """
    default = next(b.handler for b in load_mouse_bindings().bindings if b.keys == (Keys.Vt100MouseEvent,))
    bindings = KeyBindings()

    @bindings.add(Keys.Vt100MouseEvent)
    def _(event):
        try:
            return default(event)
        except (ValueError, IndexError, KeyError):
            event.current_buffer.insert_text(event.data.replace("\x1b", ""))

    return bindings


def tab_completes(buffer) -> None:
    """Tab: prompt_toolkit's menu-complete, except that where the menu holds one completion, already in the line, Tab
    goes on from it as a shell's does (into the folder it names). A completion that quotes what was typed (`:data dir`
    to `"dir with space/`) changes the text before the cursor, so prompt_toolkit kept it as a menu of one, and the
    next Tab went back to `dir`: the folder's files were never reached."""
    state = buffer.complete_state
    if state is not None and len(state.completions) == 1 and state.complete_index == 0:
        buffer.complete_state = None
        buffer.start_completion(insert_common_part=True)
    elif state is not None:
        buffer.complete_next()
    else:
        buffer.start_completion(insert_common_part=True)


def completion_bindings() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("c-i", filter=vi_insert_mode | emacs_insert_mode)  # where menu-complete is bound
    def _(event):
        tab_completes(event.current_buffer)

    return bindings


# --- the interactive loop ----------------------------------------------------------------------
def toolbar_text(session, width: int | None = None) -> str:
    """The bottom toolbar: device, size, step, the parts ablated and the int8 copy while on, losses, data; within
    `width` columns where given.

    Each loss is named, so the toolbar's numbers compare with what :load, :ls and :train show (a
    loaded model's val loss used to sit beside the toolbar's train loss, both called "loss"). A data
    file shows as its name: the folders before it pushed the line past the screen's edge. Where the
    line is still too wide, the train loss goes first (the val loss is the one the other views
    show), then the labels shorten, then the device and size go, so that the data stays in view.
    """
    try:
        st = session.status()
    except Exception:
        return ""
    params = f"{st.n_params:,} params" if st.n_params is not None else "no model yet"
    data = st.data if "/" not in st.data and os.sep not in st.data else "…/" + Path(st.data).name
    data = terminal_safe(data)  # a file name's ESC shown as \x1b, as everywhere: its width is then what is drawn
    train = f"{st.last_loss:.4f}" if st.last_loss is not None else None
    val = f"{st.val_loss:.4f}" if st.val_loss is not None else None
    # a run stopped between two evaluations: its val loss was measured before the step shown, as :train's end line,
    # :ls and :load say (the shorter lines leave it out)
    at = f" (step {st.val_step:,})" if val and st.val_step is not None and st.val_step != st.step else ""
    # the losses are the model's without the parts ablated (its training's and evaluations'): beside "ablated: the
    # positions" the val of the whole model (1.9248) read as the ablated one's, which :ablate had just said was 2.1881.
    # Said while it fits beside the parts' names, and given up before them where it does not (60 columns, two parts
    # and the int8 copy)
    whose = " (unablated)" if st.ablated and (train or val) else ""

    def losses(whose: str) -> tuple[str, str, str, str]:
        both = " | ".join(([f"train loss {train}"] if train else []) + ([f"val loss {val}{at}"] if val else []))
        one = f"val loss {val}{at}" if val else (f"train loss {train}" if train else "loss -")
        short = f"val {val}" if val else (f"train {train}" if train else "loss -")
        # the shorter lines keep the val loss's step while they can: at 80 columns the medium line was 81 long, and
        # the next one dropped "(step 350)" where it could have dropped the labels alone
        short_at = f"val {val}{at}" if val else short
        return (both + whose if both else "loss -"), one + whose, short_at + whose, short + whose

    # Every view and :gen run on the ablated model, and :gen samples the int8 copy: the bar says so while either is
    # on, after the step (what the model is). The parts off are named while they fit (the device and the size go
    # first: :config and :device say them), then the first of them with a count, then the word alone.
    parts = list(st.ablated)
    ablated = ([f" | ablated: {', '.join(parts)}"] + ([f" | ablated: {parts[0]} +{len(parts) - 1}"] if len(parts) > 1
                                                      else []) + [" | ablated"]) if parts else [""]
    marks = [mark + (" | int8" if st.int8 else "") for mark in ablated]
    candidates = [line for mark in marks for both, one, short_at, short in map(losses, dict.fromkeys((whose, "")))
                  for line in (
        f" device {st.device} | {params} | step {st.step:,}{mark} | {both} | data {data} ",
        f" device {st.device} | {params} | step {st.step:,}{mark} | {one} | data {data} ",
        f" {st.device} | {params} | step {st.step:,}{mark} | {short_at} | {data} ",
        f" {st.device} | {params} | step {st.step:,}{mark} | {short} | {data} ",
        f" step {st.step:,}{mark} | {short_at} | {data} ",
        f" step {st.step:,}{mark} | {short} | {data} ")]  # 40-60 columns: :config and :device say the rest
    # measured in columns, not characters: a file named in Chinese takes two a character, and a line that fitted by
    # its length ran off the screen's edge, the name cut there with no sign of it
    fitting = next((c for c in candidates if width is None or cell_len(c) <= width), None)
    if fitting is not None:
        return fitting
    # Not even the shortest fits (a long file name at 40 columns): the name's end stays, marked as cut, rather than
    # prompt-toolkit cutting the line at the screen's edge mid-name with no sign of it.
    head = f" step {st.step:,}{marks[-1]} | {losses('')[3]} | "
    room = width - cell_len(head) - 1
    if room <= 1:  # no room for even "…" and a letter (40 columns, a part ablated and the int8 copy): the data goes,
        bare = head[:-2]  # then the line's end, cut where it would run past the edge, and marked so
        return bare if cell_len(bare) <= width else bare[:max(0, width - 2)] + "…"
    end = len(data)
    while end > 0 and cell_len(data[end - 1:]) <= room - 1:  # the most of the name's end that fits after "…"
        end -= 1
    return head + "…" + data[end:] + " "


def _toolbar_width() -> int | None:
    try:
        return get_app().output.get_size().columns
    except Exception:
        return None


def run_repl(session, console: Console, err_console: Console | None = None, debug: bool = False,
             input=None, output=None, history: History | None = None, loaded=None) -> int:
    """The interactive prompt. Returns the exit status (0) at :quit or Ctrl-D. `loaded`: :load's result for the
    checkpoint `--load` brought, shown under the greeting as :load shows it (it went unsaid: nothing told the user
    which run, step and data the prompt starts from, nor that a stopped run could go on)."""
    err_console = err_console if err_console is not None else console
    if input is None and under_a_kernels_bang():
        error(err_console, KERNEL_BANG)
        return 1
    if (missing := torch_missing()) is not None:  # every command needs it: said before the prompt, not at each line
        error(err_console, missing)
        return 1
    door = FrontDoor(session, console, err_console, FrontEnd(debug=debug),
                     progress=progress_console(console, err_console))
    pending: list[str] = []  # the history file's warnings, said when no prompt is drawn

    def say_pending() -> None:
        while pending:
            say(err_console, pending.pop(0), "yellow")

    if history is None:
        moved = adopt_old_history()  # earlier versions kept it in the data dir; it is state
        if moved:
            say(err_console, moved, "dim")
        try:
            # said between prompts: a line's history is written (and read, the first time) while the prompt is drawn,
            # and a warning printed then landed on the prompt's line, broken inside a word
            history = make_history(history_path(), pending.append)
        except UserError as e:  # no home folder to keep it in
            say(err_console, f"warning: {e}; history is kept in memory for this session", "yellow")
            history = InMemoryHistory()
    say_pending()
    prompt_session = PromptSession(
        history=history,
        auto_suggest=AutoSuggestFromHistory(),
        completer=CommandCompleter(session=session),
        bottom_toolbar=lambda: toolbar_text(session, _toolbar_width()),
        input=input,
        # TERM=dumb (Emacs' shell): None, for prompt_toolkit's own plain prompt, which it gives only where no output
        # is passed in; the prompt drawn with cursor moves and a completion menu filled the screen with escapes
        output=output if output is not None else None if is_dumb_terminal() else prompt_output(),
        key_bindings=merge_key_bindings([tolerant_mouse_bindings(), completion_bindings()]),
        # Ctrl-Z puts minitf in the background, as it does a shell's program (and minitf while a command runs, when
        # the terminal is the shell's): at the prompt it typed a ^Z into the line, which then ran as text
        enable_suspend=True,
    )

    def start_preload_after_first_render():
        app = get_app()

        def once(_app):
            preload()

        app.after_render.add_handler(once)

    say(console, f"minitf {__version__}: build, train and look inside a small Transformer (data: {session.data_spec}). "
                 "Try :train, then type some text for the model to continue; :help lists the commands.", "dim")
    if loaded is None and (missing := missing_data_file(session.data_spec)) is not None:
        with speaking(door.front.syntax):
            say(err_console, f"warning: {missing}; {cmd('data', 'NAME|PATH')} picks other data", "yellow")
    # a run stopped with steps to go (a terminal closed under :train): nothing pointed to it, and the first plain
    # :train pushed it down the rotation
    if loaded is None:
        with speaking(door.front.syntax):  # the line is made in the REPL's words (`:load autosave`), not the shell's
            if (stopped := stopped_run_line(session.checkpoint_dir)) is not None:
                say(console, stopped, "yellow")
    if session.device_name.strip().lower() not in ("auto", "cpu"):  # `minitf --device cuda` without CUDA: as the
        from .commands.settings import device_problem  # data file, said now, not at the first command that uses it

        if (problem := device_problem(session.device_name)) is not None:
            with speaking(door.front.syntax):
                say(err_console, f"warning: {problem}; {cmd('device', 'NAME')} switches to one that is", "yellow")
    if loaded is not None:
        with speaking(door.front.syntax):
            render(loaded, console)
    first = True
    # The unsaved step a :quit or Ctrl-D was told about: the next one leaves, if it comes next. A command between
    # them arms the warning again, as bash's "There are stopped jobs." is: a :set checkpoint_dir=DIR, which the failed
    # save's line offers, moves the folder but saves nothing, and the :quit after it left with the model in no
    # checkpoint.
    warned = None
    said: set[str] = set()  # the notes run_pasted said once this session
    while True:
        try:
            with leave_on_signals():
                line = prompt_session.prompt(PROMPT, pre_run=start_preload_after_first_render if first else None)
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line
            say_pending()
            continue
        except EOFError:  # Ctrl-D
            say_pending()
            if (warned := warn_unsaved(door, warned)) is None:
                break
            continue
        except Terminated as e:  # SIGTERM or SIGHUP at the prompt: nothing runs; a model in no checkpoint is kept
            save_before_leaving(door, e.signum)
            return signal_status(e.signum)
        say_pending()
        first = False
        if ctrl_c_typed_ahead(prompt_session.input):  # Ctrl-C pressed with Enter, before the command could start
            error(err_console, "interrupted: Ctrl-C came with Enter, so the line did not run")
            continue
        try:
            if run_pasted(door, line, err_console, said) == QUIT:
                if (warned := warn_unsaved(door, warned)) is None:
                    break
            elif line.strip():
                warned = None
        except KeyboardInterrupt:  # a Ctrl-C between two commands: back to the prompt
            warned = None
            continue
        if door.terminated is not None:  # SIGTERM or SIGHUP stopped the command (a :train autosaved)
            return signal_status(door.terminated)
    return 0


# `!minitf` in a notebook's cell: the kernel runs it on a pseudo-terminal no key reaches, so the prompt asked it for
# the cursor's position (CPR), wrote its escapes into the cell, and waited for a line for ever
KERNEL_BANG = ("the REPL needs a terminal to type in, and a Jupyter kernel's ! gives none (the cell would wait for "
               "ever); run one command at a time (!minitf train --steps 50) or the lab from Python (from minitf_repl "
               "import Lab; lab = Lab(); lab(':train'))")


def under_a_kernels_bang(environ=None) -> bool:
    """Whether minitf runs under a Jupyter kernel (a cell's `!`, subprocess, %%bash). jupyter_client gives each kernel
    JPY_PARENT_PID, which the processes it starts inherit; where /proc tells (Linux), a kernel must also be among the
    ancestors, so that a terminal opened from a process that merely inherited the variable is not refused."""
    environ = os.environ if environ is None else environ
    if "JPY_PARENT_PID" not in environ:
        return False
    lines = ancestor_command_lines()
    return lines is None or any("ipykernel" in line for line in lines)


def torch_missing() -> str | None:
    """The line to say where torch cannot be imported at all (pip told --no-deps), else None. Asked of the import
    system, not by importing torch: a REPL that opened, said "Try :train" and then failed every line the same way
    wasted the person's first minutes."""
    import importlib.util

    from .render.words import missing_torch

    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a torch module whose spec is broken: the import itself will say what
        return None
    return None if found else missing_torch(ModuleNotFoundError("No module named 'torch'", name="torch"))


def ancestor_command_lines(limit: int = 16) -> list[str] | None:
    """The command lines of this process's parent, its parent, and so on (at most `limit`); None where /proc does not
    tell (macOS, Windows)."""
    lines, pid = [], os.getppid()
    try:
        while pid > 1 and len(lines) < limit:
            lines.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            # after the name in parentheses: the state, then the parent's pid
            pid = int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return lines or None
    return lines


def prompt_output():
    """Where the prompt and its toolbar are drawn: standard output, or standard error where only that one is a
    terminal (`minitf > out.txt`, as Python's own prompt does). The prompt drawn into the file left the person at
    the keyboard typing blind, and the file full of its redraws (carriage returns, the toolbar at every key). Where
    neither is a terminal (`minitf > session.log 2>&1`), the terminal the keys come from (TERMINAL), if it opens."""
    from prompt_toolkit.output import create_output

    if not any(_a_tty(stream) for stream in (sys.stdout, sys.stderr)):
        try:
            return create_output(stdout=open(TERMINAL, "w", encoding="utf-8"))  # open while the prompt is
        except OSError:
            pass
    return create_output(always_prefer_tty=True)


TERMINAL = "/dev/tty"  # the process's controlling terminal


def _a_tty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def ctrl_c_typed_ahead(inp) -> bool:
    """Whether Ctrl-C came right after the Enter that ended the line: read in the same chunk as it, before the prompt
    gave the terminal back, it was no signal but a key kept for the next prompt, which it cleared, while the command
    ran on to its end (a :train of 50,000 steps started just as the user pressed Ctrl-C to stop it). Taken from the
    keys read ahead; any others stay there for the next prompt."""
    try:
        pending = get_typeahead(inp)
    except Exception:  # an input without a typeahead buffer
        return False
    if pending and pending[0].key == Keys.ControlC:
        store_typeahead(inp, pending[1:])
        return True
    store_typeahead(inp, pending)
    return False


def missing_data_file(spec: str) -> str | None:
    """'no such file: PATH' where the data spec names no built-in data and no file exists there, else None. Said at
    the prompt's start: the data loads (with torch) only when a command needs it, so a mistyped `--data` path went
    unsaid until the first :train, after the settings had been typed. Only what a stat tells: core.data says the
    rest, and a spec that is no file of another kind (a URL, pydoc:2, two files) as core.data says it."""
    if (problem := no_file_named(spec)) is not None:
        return problem
    name = spec.strip().partition(":")[0]
    if not spec.strip() or name in CORPORA + TASKS:
        return None
    try:
        path = Path(spec.strip()).expanduser()
        where = "" if path.is_absolute() else f" (in {cut_middle(os.getcwd())})"  # as core.data says it
        return None if os.path.lexists(path) else f"no such file: {cut_middle(spec.strip())}{where}"
    except (OSError, RuntimeError, ValueError):  # RuntimeError: ~ with no home folder (core.paths.expand)
        return None


def warn_unsaved(door: FrontDoor, warned: int | None) -> int | None:
    """Before the prompt leaves: a model trained past every checkpoint (its autosave failed, e.g. on a full
    disk) is said once, and the REPL stays. Returns the step said (stay), or None (leave): nothing to lose,
    autosave off (the user chose not to keep), or the same step said already (a second :quit or Ctrl-D).
    With autosave off, a model the user saved by name and another session then saved over (or removed) is said
    too: it was kept, by choice, and it went without a word."""
    gone = door.session.saved_over  # its checkpoint was there, and another session wrote over it (or removed it)
    step = door.session.unsaved_step if door.session.autosave or gone is not None else None
    if step is None or step == warned:
        return None
    from .commands.shared import folder_refused

    # a folder that refused the last save (full, read-only) refuses `:save NAME` too: another folder first, as the
    # save's own error says (it offered `:save NAME` alone, the fix that had just failed)
    refused = gone is None and folder_refused(door.session)
    why = (f"{gone} holds another model now, or is gone" if gone else
           "its save failed: the checkpoint folder is full or cannot be written" if refused else "its save failed")
    with speaking(door.front.syntax):
        keep = (f"{cmd('set', checkpoint_dir='DIR')} then {cmd('save', 'NAME')} keeps it in another folder" if refused
                else f"{cmd('save', 'NAME')} keeps it")
        say(door.err, f"warning: the model trained to step {step:,} is in no checkpoint ({why}); {keep}, and "
                      f"{cmd('quit')} or Ctrl-D again leaves without it", "yellow")
    return step


LAST_SAVE_SECONDS = 20.0  # the most the save at SIGTERM or SIGHUP takes: a supervisor kills soon after (docker
# stop's 10 s, systemd's 90 s), and a closed terminal has no one to wait for it; another session's save holding the
# folder's lock (its wait is up to two minutes) is given up on


def save_before_leaving(door: FrontDoor, signum: int) -> str | None:
    """SIGTERM or SIGHUP at the prompt, where a model trained here is in no checkpoint (as warn_unsaved says at
    :quit): one try to keep it as kept-DATE, a name no checkpoint has, so that nothing in the folder is replaced (the
    autosave may be another run's), bounded by LAST_SAVE_SECONDS and asking nothing, since no one may be there. It
    ended minitf at once, the model gone without a word, where :quit would have warned. Said in one line on standard
    error, which a closed terminal may no longer take. Returns the name saved, or None."""
    session = door.session
    gone = session.saved_over
    step = session.unsaved_step if session.autosave or gone is not None else None  # autosave off: the user's choice
    if step is None:
        return None
    from .commands.shared import KEPT_NAMES, save_session
    from .core.checkpoint import NameTaken

    why = f"{signal.Signals(signum).name} ended minitf with the model trained to step {step:,} in no checkpoint"
    name, problem = None, None
    timed = hasattr(signal, "setitimer")  # Windows has no timer: the save takes what it takes

    expired = []

    def too_long(_signum, _frame):  # the save removes what it wrote, as at a Ctrl-C during :save
        expired.append(True)
        raise KeyboardInterrupt

    # a supervisor repeats SIGTERM, and a closed terminal may send SIGHUP again: the save is not cut short by them
    with handling(TERMINATING, signal.SIG_IGN), handling((signal.SIGALRM,) if timed else (), too_long):
        if timed:
            signal.setitimer(signal.ITIMER_REAL, LAST_SAVE_SECONDS)
        try:
            stamp = datetime.datetime.now().strftime("kept-%Y%m%d-%H%M%S")
            for n in range(1, KEPT_NAMES + 1):
                try:
                    name = save_session(session, stamp if n == 1 else f"{stamp}-{n}", origin="kept",
                                        exclusive=True).name
                    break
                except NameTaken:
                    continue
            else:
                problem = f"{KEPT_NAMES} checkpoints named {stamp}* exist already"
        except (KeyboardInterrupt, UserError) as e:  # the save turns the interrupt into its own words (Interrupted)
            problem = (f"it took more than {LAST_SAVE_SECONDS:.0f} s, and was given up" if expired else
                       "it was interrupted" if isinstance(e, KeyboardInterrupt) else str(e))
        finally:
            if timed:
                signal.setitimer(signal.ITIMER_REAL, 0)
    with speaking(door.front.syntax), contextlib.suppress(OSError):  # a closed terminal: EIO
        folder = session.checkpoint_dir
        if name is not None and folder != session.started_in:
            # moved by :set checkpoint_dir=: the next minitf opens the folder it began in, where `:load NAME` failed
            from .syntax import SHELL, invoked_with, restore

            with speaking(SHELL), invoked_with([("--checkpoint-dir", str(folder))]):
                back = restore(name)
            say(door.err, f"{why}: saved it as {name} in {folder} ({back} brings it back)", "yellow")
        elif name is not None:
            say(door.err, f"{why}: saved it as {name} ({cmd('load', name)} brings it back)", "yellow")
        else:
            error(door.err, f"{why}: saving it failed ({problem}), and it is lost")
    return name


# Words a shell's habit types alone at the prompt that name no command here, each with the way minitf does it: read as
# text, `clear` had 200 characters generated from it with no word of why, where `train` typed so is told of :train.
SHELL_HABITS = {"clear": "Ctrl-L clears the screen", "cls": "Ctrl-L clears the screen"}


def shell_habit(line: str) -> str | None:
    """What to say after a line that is one of SHELL_HABITS alone, read as the model's text; None for any other line,
    and for a word the registry has a command or a bare word of, which the dispatcher answers itself."""
    word = line.strip().lower()
    if word not in SHELL_HABITS or word in REGISTRY.names() or REGISTRY.bare_word(word) is not None:
        return None
    return f"a line without ':' is text for the model to continue; {SHELL_HABITS[word]}"


def run_pasted(door: FrontDoor, text: str, err_console: Console, said: set[str] | None = None) -> str:
    """Run what the prompt returned: one line, or several pasted at once, each as if typed.

    A terminal's paste puts its newlines into the line, and the parser takes a newline for a space: the
    first command read the others as its text (`:set` refused `:data`). A Ctrl-C that stops one of them
    stops the rest too, as a shell drops typed-ahead lines. A line of commands that starts with `#` is a comment, as
    in a script piped in (run_lines): a terminal without bracketed paste brings a pasted script a line at a time,
    and each comment line ran as a prompt ("11 characters not in the vocabulary", or 200 characters generated).
    Text that starts with `#` (a Python comment, a Markdown title) is continued by `:gen #...`, which the first
    comment typed alone says (`said`: the notes this session said already).
    """
    lines = re.split(r"\r\n|\r|\n", text)  # not str.splitlines(): U+2028 and \f inside a prompt are text
    numbers = list(range(1, len(lines) + 1))  # each line's place in the paste, which its error names
    if not all(_a_command(line) for line in lines if line.strip()):
        # a prompt of several lines (code, verse): one text to continue, its newlines kept; after the commands that
        # come first, where none of them reads text (`:set temperature=0.5` then a story's first lines): the story
        # was given to :set, which refused it ("not both: :set Once upon a time shows")
        at = 0  # after the last of the commands that come first (with blank and comment lines between them)
        for number, line in enumerate(lines):
            if _a_command_reading_no_text(line):
                at = number + 1
            elif line.strip() and not line.lstrip().startswith("#"):
                break
        head = [k for k, line in enumerate(lines[:at]) if line.strip() and not line.lstrip().startswith("#")]
        while at < len(lines) and not lines[at].strip():  # the blank lines between: no part of the prompt
            at += 1
        numbers = [*(k + 1 for k in head), at + 1]
        lines = [*(lines[k] for k in head), "\n".join(lines[at:])] if head else [text]
    else:
        alone = sum(1 for line in lines if line.strip()) == 1
        comments = [line for line in lines if line.lstrip().startswith("#")]
        numbers = [k + 1 for k, line in enumerate(lines) if not line.lstrip().startswith("#")]
        lines = [line for line in lines if not line.lstrip().startswith("#")]
        if comments and alone and said is not None and "comment" not in said:
            said.add("comment")  # once: a script pasted a line at a time would say it at each of its comments
            with speaking(door.front.syntax):  # the REPL opened from the shell speaks the REPL's syntax here too
                say(err_console, f"a line starting with # is a comment, as in a script: nothing ran "
                                 f"({cmd('gen', '#TEXT')} continues a text that starts with #)", "dim")
    status = EMPTY
    several = sum(1 for line in lines if line.strip()) > 1
    where = door.where
    for at, line in enumerate(lines):
        if several:  # which of them failed, as piped input's errors say (run_lines): "error: ..." named none
            door.where = f"{where}pasted line {numbers[at]}: "
        try:
            status = door.run_line(line)
        finally:
            door.where = where
        if status == QUIT or door.terminated is not None:
            return status
        if not door.interrupted and (habit := shell_habit(line)) is not None:  # after its text, as `train`'s hint is
            say(err_console, habit, "dim")
        left = sum(1 for rest in lines[at + 1:] if rest.strip())
        if door.interrupted and left:
            say(err_console, f"{count(left, 'more pasted line')} not run", "dim")
            return status
    return status


def _a_command(line: str) -> bool:
    """A line that runs as a command, not as text to continue: `:name ...` (after a copied prompt too), a `#` comment
    or a bare word (exit)."""
    copied = COPIED_PROMPT.match(line)
    stripped = line[copied.end():].strip() if copied else line.strip()
    return stripped.startswith((":", "#")) or REGISTRY.bare_word(stripped) is not None


def _a_command_reading_no_text(line: str) -> bool:
    """A `:name ...` line (after a copied prompt too) whose command reads no text to continue (PROSE: :gen's prompt),
    so that the lines after it cannot be its text. A bare word is left out: a pasted verse may start with "help"."""
    copied = COPIED_PROMPT.match(line)
    stripped = line[copied.end():].strip() if copied else line.strip()
    if not stripped.startswith(":"):
        return False
    command = REGISTRY.names().get(re.match(r"\S*", stripped[1:]).group(0).lower())
    return command is None or command.positional is None or command.positional.name not in PROSE


class Terminated(Exception):
    """SIGTERM or SIGHUP arrived while the prompt waited for a line."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def leave_on_signals():
    """While the prompt waits, SIGTERM and SIGHUP end the loop through the prompt's own clean-up
    (it restores the terminal), instead of killing the process with the terminal in raw mode.
    While a command runs the front door's handlers take over (dispatch.stop_on_signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(signum)

    with handling(TERMINATING, handler):
        yield
