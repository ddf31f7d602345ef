"""Waits that Ctrl-C cuts short where they are (torch-free).

Most commands stop when asked at their next step or token (Reporter.should_stop), so nothing is left half
done; `:save` and a few others are interruptible as a whole (registry.Command.interruptible). A wait on
something outside (a download from a stalled server) has no next step and may last minutes: inside
`cut_short()`, the front door's handler (dispatch.stop_on_signals) raises KeyboardInterrupt at once, as for
an interruptible command, and the code there must leave nothing behind (a download writes its file only
once it is whole). Inside `held()`, a part of an interruptible command that must not be left half done (a
trial step undone at its end), the KeyboardInterrupt of a Ctrl-C waits for the end of the block.
"""

from __future__ import annotations

import contextlib
import threading

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
