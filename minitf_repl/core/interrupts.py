"""Waits that Ctrl-C cuts short where they are (torch-free).

Most commands stop when asked at their next step or token (Reporter.should_stop), so nothing is left half
done; `:save` and a few others are interruptible as a whole (registry.Command.interruptible). A wait on
something outside (a download from a stalled server) has no next step and may last minutes: inside
`cut_short()`, the front door's handler (dispatch.stop_on_signals) raises KeyboardInterrupt at once, as for
an interruptible command, and the code there must leave nothing behind (a download writes its file only
once it is whole). Inside `held()`, a part of an interruptible command that must not be left half done (a
trial step undone at its end), the KeyboardInterrupt of a Ctrl-C waits for the end of the block.

A stop of the whole process is no interrupt, but a command's clock and its display meet it too: `watching_stops()`
counts the seconds minitf spent stopped (Ctrl-Z, kill -STOP), and `on_suspend()` lets a live display give the terminal
back as a shell expects before Ctrl-Z stops it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

try:
    import termios
except ImportError:  # Windows
    termios = None

_local = threading.local()  # signal handlers run in the main thread: its own depth is the one asked


@contextlib.contextmanager
def cut_short():
    """Within the block, Ctrl-C, SIGTERM and SIGHUP raise KeyboardInterrupt rather than ask for a stop."""
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1
    try:
        yield
    finally:
        _local.depth = depth


def may_cut_short() -> bool:
    """Whether this thread is inside cut_short()."""
    return getattr(_local, "depth", 0) > 0


@contextlib.contextmanager
def held():
    """Within the block, a Ctrl-C that would raise KeyboardInterrupt (cut_short, an interruptible command) is
    raised at its end instead, once the block has done all of its work (its clean-up included)."""
    depth = getattr(_local, "held", 0)
    _local.held = depth + 1
    try:
        yield
    finally:
        _local.held = depth
        pending = depth == 0 and getattr(_local, "pending", False)
        if depth == 0:
            _local.pending = False
    if pending:
        raise KeyboardInterrupt


def holding() -> bool:
    """Whether this thread is inside held(): a KeyboardInterrupt now is to wait (hold_back())."""
    return getattr(_local, "held", 0) > 0


def hold_back() -> None:
    """Raise KeyboardInterrupt at the end of the held() block this thread is in."""
    _local.pending = True


# --- a stop of the whole process: Ctrl-Z (SIGTSTP), `kill -STOP` ---------------------------------------------------
BEAT = 0.1  # seconds between the looks of watching_stops()'s thread
LATE = 1.0  # seconds late a look must be to count as a stop (with a SIGCONT after it), not as a busy machine
FORGET = 30.0  # seconds a late look waits for its SIGCONT (its handler runs once the main thread leaves a long torch
# call), after which it is taken for a machine too busy to run the thread, not for a stop


class StopWatch:
    """The seconds this process spent stopped, as watching_stops() finds them: `seconds` in all, `stops` each (when it
    went on, on time.monotonic()'s clock, and for how long). A stop is a look of its thread that came LATE while a
    SIGCONT came after it began; SIGSTOP cannot be caught, and SIGCONT alone says neither when nor for how long. At
    least the seconds said (the part of a look's sleep before the stop is not counted)."""

    def __init__(self):
        self.seconds = 0.0
        self.stops: list[tuple[float, float]] = []
        self._cont_at = float("-inf")  # when the last SIGCONT's handler ran; one assignment, read by the thread
        self._late: list[tuple[float, float]] = []  # (the look before, seconds late) waiting for their SIGCONT
        self._done = threading.Event()

    def continued(self, *_args) -> None:
        """SIGCONT's handler: the thread does the sums."""
        self._cont_at = time.monotonic()

    def watch(self) -> None:
        last = time.monotonic()
        while not self._done.wait(BEAT):
            now = time.monotonic()
            if now - last > LATE:
                self._late.append((last, now - last - BEAT))
            for since, late in list(self._late):
                if self._cont_at >= since:  # continued after that look: it was a stop
                    self._late.remove((since, late))
                    self.seconds += late
                    self.stops.append((now, late))
                elif now - since > FORGET:
                    self._late.remove((since, late))
            last = now


@contextlib.contextmanager
def watching_stops():
    """Within the block, a StopWatch counts the seconds the process is stopped (Ctrl-Z, kill -STOP, until SIGCONT):
    a speed measured over them counts that time, and what shows it can say so. Main thread only (SIGCONT's handler);
    elsewhere, and where there is no SIGCONT (Windows), it counts nothing."""
    watch = StopWatch()
    cont = getattr(signal, "SIGCONT", None)
    if cont is None or threading.current_thread() is not threading.main_thread():
        yield watch
        return
    previous = signal.signal(cont, watch.continued)  # the kernel goes on all the same: the handler only notes it
    thread = threading.Thread(target=watch.watch, name="minitf-stops", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch._done.set()
        signal.signal(cont, previous if previous is not None else signal.SIG_DFL)
        thread.join(1.0)


@contextlib.contextmanager
def on_suspend(before, after):
    """Within the block, Ctrl-Z (SIGTSTP) calls `before()`, then stops the process as Ctrl-Z does, and calls `after()`
    once it goes on (SIGCONT): a live display hides the cursor, and a stop with the default action left the shell's
    prompt without one until `fg`. Before the stop the terminal also echoes again, as a shell expects (the front door
    turns echo off while a command runs), and gets its modes back on SIGCONT where minitf is in the foreground again
    (`fg`; after `bg`, setting them would stop it again). Main thread only; a SIGTSTP ignored stays ignored (an
    orphaned job's), and Windows has none."""
    tstp = getattr(signal, "SIGTSTP", None)
    if tstp is None or threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(tstp) is signal.SIG_IGN:
        yield
        return

    def handler(signum, frame):
        modes = _echoing()
        with contextlib.suppress(Exception):
            before()
        signal.signal(tstp, signal.SIG_DFL)
        try:
            os.kill(os.getpid(), tstp)  # stopped here, until SIGCONT
        finally:
            signal.signal(tstp, handler)
        if modes is not None and in_the_foreground(modes[0]):
            with contextlib.suppress(Exception):
                termios.tcsetattr(modes[0], termios.TCSANOW, modes[1])
        with contextlib.suppress(Exception):
            after()

    previous = signal.signal(tstp, handler)
    try:
        yield
    finally:
        signal.signal(tstp, previous if previous is not None else signal.SIG_DFL)


def _echoing():
    """Turn the terminal's echo on (standard input's, where it is a terminal this process may set); returns (its fd,
    its modes before) to put back, or None."""
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or not in_the_foreground(fd):
            return None
        old = termios.tcgetattr(fd)
        new = list(old)
        new[3] |= termios.ECHO | getattr(termios, "ECHOCTL", 0)
        termios.tcsetattr(fd, termios.TCSANOW, new)
        return fd, old
    except Exception:  # no termios (Windows), no real stdin (tests)
        return None


def in_the_foreground(fd: int) -> bool:
    """Whether this process is the terminal's foreground job: it may set its modes (a background job's tcsetattr is
    answered with SIGTTOU, which stops it: `minitf train &` was "Stopped (tty output)" before its first step), and
    its cursor is the one shown. True where the terminal has no jobs to ask about (not this process's own)."""
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except (OSError, AttributeError):
        return True
