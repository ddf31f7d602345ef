"""`render(result, console)`: the one place a command's result becomes output, chosen by its type.

Each command family registers its renderers here, as named functions beside its result types
(`@render.register(TrainResult)` in commands/train.py), so a traceback names the renderer that
failed. A result type without a renderer of its own still shows: its fields, one a line.
`after_stream` is what remains to show of a result whose text was streamed while it ran (the live
reporter wrote `:gen`'s tokens already): by default all of it. `after_lines` likewise for a result whose progress
was printed as lines where the result goes too (a dumb terminal: :train's watched frames, each under its line).
`text_apart` shows only a result's text, where the rest (`after_stream`'s) goes elsewhere: the one-shot shell's
notes go to standard error, as a streamed text's do.
"""

from __future__ import annotations

import dataclasses
import functools

from rich.console import Console

from .tables import settings_table
from .words import say


@functools.singledispatch
def render(result, console: Console) -> None:
    """Print one command result on `console`.

    A result type without its own renderer (a command added later) still shows: its fields, one a line.
    """
    if dataclasses.is_dataclass(result):
        values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        console.print(settings_table(type(result).__name__, values))
    else:
        say(console, repr(result))


@render.register(type(None))
def render_nothing(result, console: Console) -> None:
    pass


@functools.singledispatch
def after_stream(result, console: Console) -> None:
    """What is left to show of `result` once its text was streamed while the command ran: by default, all of it."""
    render(result, console)


@functools.singledispatch
def after_lines(result, console: Console) -> None:
    """What is left to show of `result` once its progress was printed as lines on `console` while it ran (a terminal
    that cannot redraw): by default all of it."""
    render(result, console)


@functools.singledispatch
def text_apart(result, console: Console) -> bool:
    """Show only the text of `result` (what a script keeps from standard output) on `console`, and return True; the
    rest is `after_stream`'s. False, showing nothing: the result has no text apart from its notes (the default)."""
    return False
