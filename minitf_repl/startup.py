"""Ctrl-C while minitf starts: before a command has its own handling of the signal (dispatch.stop_on_signals).

Importing minitf and torch and setting up the session take a second or more, and Python's own handler raises
KeyboardInterrupt wherever the main thread is then. An import may swallow it: torch's C extension catches any
error of its import of numpy and goes on, and the command then ran to its end as if no key had been pressed. So
the console script (`__main__.main`) has the signal remembered as well (`watch`), and the shell asks
`interrupted()` before it runs a command or opens the REPL. This module imports nothing of the package, so that
it can be set up before anything else loads.
"""

from __future__ import annotations

import signal
import threading

STATUS = 130  # the exit status after Ctrl-C, as a shell reports a process SIGINT stopped (128 + 2)

_received: list[int] = []


def _remember(signum, frame) -> None:
    _received.append(signum)
    raise KeyboardInterrupt


def watch() -> None:
    """From now on, remember Ctrl-C as well as raise KeyboardInterrupt. Left as it is where SIGINT is ignored
    (a background job of a script: `minitf train &`) or already has a handler of its own."""
    if threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _remember)


def interrupted() -> bool:
    """Whether Ctrl-C arrived since `watch()`, even where something caught the KeyboardInterrupt it raised."""
    return bool(_received)


def ignore_late_signals() -> None:
    """Ctrl-C, SIGTERM and SIGHUP ignored from here on, at the console script's end (__main__.main; a caller's own
    process, a notebook's kernel, keeps its Ctrl-C): the command has ended, its output is flushed and its status is
    decided. Python's shutdown then puts the handlers it set back to the default, and torch's own teardown takes some
    half a second after that, in which a signal killed a process that had printed its success (`minitf save x --json`
    gave its document, then exit 130 or 143, which say the command was stopped). SIG_IGN is the one disposition the
    shutdown leaves as it is. A platform without one of them (Windows: no SIGHUP) skips it."""
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is not None:
            try:
                signal.signal(signum, signal.SIG_IGN)
            except (ValueError, OSError):  # not the main thread (a caller's thread), or not settable here
                pass
