"""The output layer: how results, progress and messages reach the screen. It imports no command.

Commands return plain dataclasses; `render(result, console)` prints one, dispatching on its type
to the renderer its command family registered (commands/*.py). What several families draw with
lives here, below them:

    renderers.py   render(), after_stream(), after_lines(): the dispatch, the fallback for a result without a renderer
    words.py       the one wrapping rule (say, Words, WordStream), error lines, text from the vocabulary
    tables.py      tables that fit the width with every word whole, settings tables, named fields
    fmt.py         numbers, sizes, durations and setting values as results show them
    chart.py       the one character chart (loss, lr, grad norm, :compare), ln V
    heatmap.py     weights as coloured cells or shades (attention maps, token probabilities)
    live.py        the live reporters (progress bar, growing loss and comparison tables, streamed text)

Everything prints through a Console the caller owns, so tests pass their own
(`Console(file=io.StringIO(), width=100, color_system=None)`). Rich itself honours NO_COLOR, the
terminal width, and turns colour and animation off when the output is not a terminal.
"""

from .live import CompareTable, LossTable, QuietReporter, RichReporter
from .renderers import after_lines, after_stream, render, text_apart
from .tables import NARROW
from .words import Words, WordStream, console_for, error, internal_error, note, say, word_lines

__all__ = ["NARROW", "CompareTable", "LossTable", "QuietReporter", "RichReporter", "WordStream", "Words",
           "after_lines", "after_stream", "console_for", "error", "internal_error", "note", "render", "say",
           "text_apart",
           "word_lines"]
