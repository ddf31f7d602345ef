"""What the core has to say while it works, said by the front end: the core prints nothing.

A front end runs a command inside `telling(notice)`; core code that starts something slow that no
result would show until it ends (a download) calls `told()` and, where it gets a function, says it
there. Outside any front end (a script, a test) nothing is said. Imports nothing heavy: the front
door sets it for every command, torch loaded or not.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator

_TELL: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("tell", default=None)


@contextlib.contextmanager
def telling(tell: Callable[[str], None]) -> Iterator[None]:
    """Within this block, what the core has to say goes to `tell` (a reporter's notice)."""
    token = _TELL.set(tell)
    try:
        yield
    finally:
        _TELL.reset(token)


def told() -> Callable[[str], None] | None:
    """Where to say it now, or None: no front end listens."""
    return _TELL.get()
