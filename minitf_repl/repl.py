"""The interactive shell: a prompt-toolkit prompt over the command registry.

One `Shell` owns the dispatch of a line: parse it (`:train steps=200`, or plain text, which is a
prompt for `gen`), run the command with a SIGINT handler that asks it to stop, and render the
result. The interactive prompt (`run_repl`) and piped input (`run_lines`) both go through it, so
`printf ':shapes\n' | minitf` behaves like typing the line.

Startup must not wait for torch: nothing here imports it. Once the first prompt is on screen a
daemon thread imports torch and the core modules, so the first `:train` rarely waits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable, Iterable

from prompt_toolkit import PromptSession
from prompt_toolkit.application.current import get_app
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.completion import Completer, Completion
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from rich.console import Console
from rich.text import Text

from . import __version__, commands
from .commands import REGISTRY, parse_line, run_command
from .core.errors import UserError
from .render import RichHooks, error, internal_error

PROMPT = "minitf> "
OK, FAILED, QUIT, EMPTY = "ok", "failed", "quit", "empty"


# --- dispatch ----------------------------------------------------------------------------------
@contextlib.contextmanager
def stop_on_sigint(hooks: RichHooks, command=None):
    """While a command runs, Ctrl-C asks it to stop (after the current step/token) instead of raising.

    An `interruptible` command (e.g. :save) polls no stop flag: the first Ctrl-C raises
    KeyboardInterrupt inside it, and it cleans up and reports. Later ones are ignored, so a second,
    fast Ctrl-C cannot cut that clean-up short.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interruptible = getattr(command, "interruptible", False)
    raised = []

    def handler(signum, frame):
        if not interruptible:
            hooks.request_stop()
        elif not raised:
            raised.append(signum)
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def quiet_tty(stream=None):
    """No echo while a command runs: a typed key or the `^C` the terminal echoes for Ctrl-C would
    otherwise land inside the live progress display and leave a stray line behind."""
    stream = stream if stream is not None else sys.stdin
    try:
        import termios

        fd = stream.fileno()
        old = termios.tcgetattr(fd) if os.isatty(fd) else None
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


def _positional(command) -> str | None:
    for p in command.params:
        if p.positional:
            return p.name
    return None


class Shell:
    """Runs lines against one session; results go to `console`, errors (one line) to `err_console`."""

    def __init__(self, session, console: Console, err_console: Console | None = None, debug: bool = False,
                 live: bool | None = None):
        self.session = session
        self.console = console
        self.err_console = err_console if err_console is not None else console
        self.debug = debug
        self.live = live

    def parse(self, line: str):
        """(Command, args) for a line; plain text is a prompt for gen, verbatim."""
        return parse_line(line)

    def dispatch(self, line: str) -> str:
        """Run one line. Returns OK, FAILED, QUIT or EMPTY; never raises (except SystemExit)."""
        if not line.strip():
            return EMPTY
        hooks = RichHooks(self.console, live=self.live)
        try:
            command, args = self.parse(line)
            if command.name == "gen":
                hooks.gen_prompt = args.get(_positional(command) or "prompt")
            if command.name not in TORCH_FREE:
                wait_for_preload(self.console if self.live is not False else None)
            with stop_on_sigint(hooks, command), quiet_tty():
                result = run_command(self.session, command.name, args, hooks)
            hooks.finish(result)
        except UserError as e:
            hooks.close()
            if hooks.streamed:
                self.console.print()
            error(self.err_console, str(e))
            return FAILED
        except KeyboardInterrupt:
            hooks.close()
            error(self.err_console, "interrupted")
            return FAILED
        except Exception as e:  # a bug: say so in one line, keep the session going
            hooks.close()
            if hooks.streamed:
                self.console.print()
            if self.debug:
                self.err_console.print(traceback.format_exc(), markup=False, highlight=False, end="", soft_wrap=True)
            else:
                internal_error(self.err_console, e)
            return FAILED
        if isinstance(result, commands.QuitResult):
            return QUIT
        return OK


def run_lines(lines: Iterable[str], session, console: Console, err_console: Console | None = None,
              debug: bool = False) -> int:
    """Non-interactive mode: every line through the same dispatch. Exit status 1 if any command failed."""
    shell = Shell(session, console, err_console, debug, live=False)
    failed = False
    for line in lines:
        status = shell.dispatch(line.rstrip("\r\n"))
        failed = failed or status == FAILED
        if status == QUIT:
            break
    return 1 if failed else 0


def stdin_lines(stream=None) -> Iterable[str]:
    """Lines of standard input as text; bytes that are not UTF-8 become U+FFFD, never an exception."""
    stream = stream if stream is not None else sys.stdin.buffer
    for raw in stream:
        yield raw.decode("utf-8", errors="replace")


# --- background import -------------------------------------------------------------------------
_preload_thread: threading.Thread | None = None
TORCH_FREE = ("help", "quit", "config", "set")  # commands that never wait for torch


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


def wait_for_preload(console: Console | None) -> None:
    """A command that needs torch while it is still loading says so (interactively) instead of
    seeming to hang; piped input waits silently, to keep its output clean."""
    thread = _preload_thread
    if thread is not None and thread.is_alive():
        if console is not None:
            console.print(Text("loading torch...", style="dim"), highlight=False)
        thread.join()


# --- history -----------------------------------------------------------------------------------
def history_path() -> Path:
    if os.environ.get("MINITF_HISTORY"):
        return Path(os.environ["MINITF_HISTORY"]).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("minitf")) / "history"


class SafeFileHistory(FileHistory):
    """FileHistory that turns a read or write failure into one warning, then keeps going in memory."""

    def __init__(self, filename, warn: Callable[[str], None]):
        super().__init__(filename)
        self._warn = warn
        self._broken = False

    def _fail(self, what: str, exc: Exception) -> None:
        if not self._broken:
            self._broken = True
            self._warn(f"warning: cannot {what} history file {self.filename} ({exc}); history is kept in memory")

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
            super().store_string(string)
        except Exception as e:
            self._fail("write", e)


def make_history(path: Path | str, warn: Callable[[str], None]) -> History:
    """A file history at `path`, or (after one warning) an in-memory one if the file cannot be used."""
    p = Path(path)
    try:
        if p.is_dir():
            raise IsADirectoryError(f"{p} is a directory")
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "ab"):
            pass
        with open(p, "rb") as f:
            f.read(1)
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        warn(f"warning: cannot use history file {p} ({reason}); history is kept in memory for this session")
        return InMemoryHistory()
    return SafeFileHistory(str(p), warn)


# --- completion --------------------------------------------------------------------------------
DATA_NAMES = ("pydoc", "shakespeare", "sort", "reverse", "add", "random")  # core.data.CORPORA + TASKS, without torch
DEVICE_NAMES = ("auto", "cpu", "cuda", "mps")


class CommandCompleter(Completer):
    """Completes `:name` (commands and aliases), then `key=` for the command's options, then values."""

    def __init__(self, registry=None, session=None):
        self.registry = registry if registry is not None else REGISTRY
        self.session = session  # for checkpoint names after :load / :save
        self.names: dict[str, object] = {}
        for command in self.registry.values():
            self.names[command.name] = command
            for alias in command.aliases:
                self.names.setdefault(alias, command)

    def _keys(self, command) -> list[str]:
        return [p.name for p in command.params if not p.positional]

    def _values(self, command, key: str) -> list[str]:
        for p in command.params:
            if p.name == key:
                values = [str(c) for c in p.choices] if p.choices else ["on", "off"] if p.type is bool else []
                return values + (["none"] if getattr(p, "nullable", False) else [])
        return []

    def _positional_values(self, command) -> list[str]:
        if command.name == "data":
            return list(DATA_NAMES)
        if command.name == "device":
            return list(DEVICE_NAMES)
        if command.name == "help":
            return sorted(c.name for c in self.registry.values())
        if command.name in ("load", "save") and self.session is not None:
            try:
                folder = Path(self.session.checkpoint_dir)
                return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except (OSError, AttributeError, TypeError):
                return []
        return []

    def get_completions(self, document, complete_event):
        text = document.text_before_cursor
        stripped = text.lstrip()
        if not stripped.startswith(":"):
            return
        if not any(ch.isspace() for ch in stripped):  # still typing the command name
            for name, command in self.names.items():
                if (":" + name).startswith(stripped):
                    yield Completion(":" + name, start_position=-len(stripped), display_meta=command.summary)
            return
        head = stripped.split()[0][1:]
        command = self.names.get(head)
        if command is None:
            return
        word = document.get_word_before_cursor(WORD=True)
        if word and text[-1:].isspace():
            word = ""
        if "=" in word:
            key, _, partial = word.partition("=")
            for value in self._values(command, key.replace("-", "_")):
                if value.startswith(partial):
                    yield Completion(value, start_position=-len(partial))
            return
        used = {tok.split("=", 1)[0].replace("-", "_") for tok in stripped.split()[1:] if "=" in tok}
        typed = word.lstrip("-").replace("-", "_")
        for key in self._keys(command):
            if key not in used and key.startswith(typed):
                yield Completion(f"{key}=", start_position=-len(word))
        if not word.startswith("-"):
            for value in self._positional_values(command):
                if value.startswith(word) and value != word:
                    yield Completion(value, start_position=-len(word))


# --- the interactive loop ----------------------------------------------------------------------
def toolbar_text(session) -> str:
    try:
        st = session.status()
    except Exception:
        return ""
    params = f"{st.n_params:,} params" if st.n_params is not None else "no model yet"
    loss = f"loss {st.last_loss:.4f}" if st.last_loss is not None else "loss -"
    return f" device {st.device} | {params} | step {st.step} | {loss} | data {st.data} "


def run_repl(session, console: Console, err_console: Console | None = None, debug: bool = False,
             input=None, output=None, history: History | None = None) -> int:
    """The interactive prompt. Returns the exit status (0) at :quit or Ctrl-D."""
    err_console = err_console if err_console is not None else console
    shell = Shell(session, console, err_console, debug)
    if history is None:
        history = make_history(history_path(), lambda msg: err_console.print(msg, style="yellow", markup=False,
                                                                               highlight=False, soft_wrap=True))
    prompt_session = PromptSession(
        history=history,
        auto_suggest=AutoSuggestFromHistory(),
        completer=CommandCompleter(session=session),
        bottom_toolbar=lambda: toolbar_text(session),
        input=input,
        output=output,
    )

    def start_preload_after_first_render():
        app = get_app()

        def once(_app):
            preload()

        app.after_render.add_handler(once)

    console.print(
        f"minitf {__version__}: build, train and look inside a small Transformer (data: {session.data_spec}). "
        "Try :train, then type some text for the model to continue; :help lists the commands.",
        style="dim", markup=False, highlight=False,
    )
    first = True
    while True:
        try:
            line = prompt_session.prompt(PROMPT, pre_run=start_preload_after_first_render if first else None)
        except KeyboardInterrupt:  # Ctrl-C at the prompt clears the line
            continue
        except EOFError:  # Ctrl-D
            break
        first = False
        try:
            if shell.dispatch(line) == QUIT:
                break
        except KeyboardInterrupt:  # a Ctrl-C between two commands: back to the prompt
            continue
    return 0
