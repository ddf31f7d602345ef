"""One frame of `:train watch=`: the view drawn under the live loss table, and again after the run.

A frame is a core.watch.WatchFrame: the attention pattern of one block's heads, the logit lens at
the prompt's last position, a greedy sample, the gradient each block receives, or every head's
role, or the token embeddings on a map. Colour where the console has it, shades without
(render.heatmap), so a log or a test reads the same information.
"""

from __future__ import annotations

import math

from rich import box
from rich.cells import cell_len
from rich.columns import Columns
from rich.console import Group
from rich.table import Table
from rich.text import Text

from ..core.watch import CONTEXT_WINDOWS
from ..core.words import count, quoted_chars
from ..palette import quoted, terminal_safe, visible
from ..syntax import cmd
from . import fmt
from .heatmap import (attention_window, column_width, heads_note, heatmap, label_width, legend, reads_future,
                      window_note)
from .scatter import asked_ids, grid_size, scatter
from .tables import NARROW, add_row
from .words import Words


def frame_title(frame, plain: bool = False) -> str:
    """`plain`: drawn without colour, where an embed frame's tokens are not in bold (see frame_subject)."""
    subject = frame_subject(frame)
    if plain and frame.coords:
        return f"{frame_when(frame)}: {subject.removesuffix(', in bold the tokens')}, the tokens " \
               f"{frame_input(frame)} drawn over any they share a cell with"
    return f"{frame_when(frame)}: {subject} {frame_input(frame)}"


def frame_when(frame) -> str:
    """"step 6, val loss 2.1164", or the frame made before a run's first step: "before training" only for a model
    at step 0 (a later run's first frame is of a model that has trained)."""
    if frame.val_loss is not None:
        return f"step {frame.step:,}, val loss {frame.val_loss:.4f}"
    return f"step {frame.step:,} " + ("(before training)" if frame.step == 0 else "(before more training)")


TITLE_PROMPT = 24  # the characters of the prompt a frame's title quotes: its end


def frame_input(frame) -> str:
    """What the frame read: `of 'the prompt'`, or the repeated random tokens of watch=heads."""
    if frame.heads and frame.repeat is not None:
        return f"on random tokens, {frame.repeat} then the same {frame.repeat} again"
    if frame.bands:
        return f"on the same {CONTEXT_WINDOWS} val windows at every frame (a band: the mean of its positions)"
    if len(frame.prompt) > TITLE_PROMPT:  # its end alone, said so: "of 'entParser(description=1)'" read as the prompt
        return f"of the prompt ending {quoted_chars(frame.prompt[-TITLE_PROMPT:])}"
    return f"of {quoted_chars(frame.prompt)}"


NO_ROLE = "·: no role stands out; the score shown is the head's largest"  # what a dot is, under a heads frame


def head_cell(head) -> Text:
    """One head of a heads frame: the role it is named for and its score, or a dot and its largest score."""
    if head.role is None:
        return Text("-" if math.isnan(head.score) else f"· {head.score:.2f}", style="dim")
    return Text(f"{head.role} {head.score:.2f}", style="bold green" if head.role == "induction" else "")


def bands_line(frame) -> Text:
    """A context frame in one line: each band of positions and its loss (- where nothing in it is counted)."""
    line = Text()
    for k, (band, loss) in enumerate(zip(frame.bands, frame.band_losses)):
        line.append(" │ " if k else "positions ", style="dim")
        line.append(f"{band} ", style="cyan")
        line.append("-" if math.isnan(loss) else f"{loss:.3f}")
    return line


COPIES_AT = 0.5  # the repeat's loss at most this share of the first copy's: the model copies from context
BEGUN_BY = 0.1  # nats the repeat's loss lies under the first copy's where copying has begun (not yet to COPIES_AT)


def copying(frame) -> str:
    """The loss on the repeat against the first copy, in one line (watch=heads on random tokens), read as :heads
    reads them (commands.why.heads_reading): "the repeat can be read off the first copy" said of a repeat that cost
    more than the first copy read as copying where :heads said "no copying from context yet"."""
    losses = f"loss on the repeat {frame.second_copy:.2f} nats a token, on the first copy {frame.first_copy:.2f}"
    if frame.second_copy <= COPIES_AT * frame.first_copy:
        return f"{losses}: the model copies from context, reading the repeat off the first copy"
    if frame.first_copy - frame.second_copy > BEGUN_BY:
        return (f"{losses}: copying from context may have begun, not yet to half the loss ({cmd('heads')} weighs the "
                "gap against the noise of these tokens)")
    return (f"{losses}: no copying from context yet (the repeat can be read off the first copy by a head that looks "
            "back, once one does)")


def frame_subject(frame) -> str:
    """What the frame shows, from what it holds (an attention map, lens rows, or a sample)."""
    if frame.maps:
        return f"attention, layer {frame.layer}"
    if frame.lens:
        return "the logit lens at the last position"
    if frame.grads:
        return "the gradient each block receives from the loss"
    if frame.heads:
        return "each head's role"
    if frame.coords:
        return "the token embeddings on W_E's two main directions, in bold the tokens"
    if frame.bands:
        return "the val loss by position in the window"
    return "a greedy sample"


MAP_LINES = 4  # an attention frame's lines besides its title and its map's rows: the note, "head h", the keys, the
# legend


def watch_view(frame, width: int, as_text: bool, height: int | None = None, screen: int | None = None):
    """The renderable of one frame, `width` columns wide at most; an attention frame `height` lines tall at most
    where given (under the live loss table of a terminal `screen` lines tall: a wide terminal fitted a map of 46
    positions, taller than the screen, and the live display then showed the bar alone, neither table nor frame)."""
    title = Words(Text(frame_title(frame, as_text), style="bold"))
    if frame.maps:
        T = len(frame.tokens)
        n_heads = len(frame.maps)
        # heads side by side, each 2 columns of labels + one per position, 2 columns apart
        per_head = max(1, (width - 2 * (n_heads - 1)) // max(1, n_heads))
        n = attention_window(T, per_head, column_width(frame.tokens, 1), label_width(frame.tokens))
        tall = None
        if height is not None:
            rows = height - MAP_LINES - -(-cell_len(frame_title(frame)) // max(1, width))
            if rows < n:
                n, tall = max(1, rows), screen if screen is not None else height
        start = T - n
        maps = [[row[start:] for row in m[start:]] for m in frame.maps]
        peak = max((w for m in maps for row in m for w in row), default=1.0) or 1.0
        future = reads_future(frame.maps)  # causal off: the future is drawn, not left blank
        # start: rows and columns carry the text's positions, as the window note's "positions X to Y" and :attn do
        panels = [Group(Text(f"head {h}", style="cyan"),
                        heatmap(frame.tokens[start:], m, peak, 1, as_text, future, start)) for h, m in enumerate(maps)]
        cut = [Text(window_note(n, T, width, tall), style="dim")] if start else []
        # what heads the columns where a token's first character does not (position digits, two characters)
        heads = [Text(line, style="dim")] if (line := heads_note(frame.tokens[start:])) else []
        return Group(title, *cut, Columns(panels, padding=(0, 2)), *heads, legend(peak, as_text, width=width))
    if frame.lens:
        table = Table(header_style="bold", box=None if width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("after", style="cyan", no_wrap=True)
        table.add_column("best guess", no_wrap=True)
        if frame.target is not None:
            table.add_column(f"rank of {quoted(frame.target)}", justify="right")
        for row in frame.lens:
            hit = frame.target is not None and row.guess == frame.target
            cells = [row.layer, Text(f"{visible(row.guess)} {row.prob:.2f}", style="bold green" if hit else "")]
            if frame.target is not None:
                cells.append("-" if row.target_rank is None else str(row.target_rank))
            add_row(table, *cells)
        return Group(title, table)
    if frame.grads:
        table = Table(header_style="bold", box=None if width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("block", style="cyan", no_wrap=True)
        ffn = has_ffn(frame.grads)  # ffn=off: no FFN column, not one of 0.0000s read as an FFN that learns nothing
        for name in ("attention |dL/dW|", *(["FFN |dL/dW|"] if ffn else []), "|dL/dh| below"):
            # narrow: each on two lines, not cut
            table.add_column(name if width >= NARROW else name.replace(" ", "\n"), justify="right", no_wrap=True)
        add_row(table, "top", "", *([""] if ffn else []), fmt.gradient(frame.top))
        for row in frame.grads:
            add_row(table, str(row.block), fmt.gradient(row.attention), *([ffn_gradient(row)] if ffn else []),
                    fmt.gradient(row.below))
        return Group(title, table)
    if frame.heads:
        parts = [title, *heads_tables(frame.heads, width)]
        if any(h.role is None for h in frame.heads):  # what a dot is: without this, "· 0.14" reads as nothing
            parts.append(Words(Text(NO_ROLE, style="dim")))
        if frame.repeat is not None:
            parts.append(Words(Text(copying(frame))))
        return Group(*parts)
    if frame.coords:
        return Group(title, *embedding_view(frame, width))
    if frame.bands:
        return Group(title, Words(bands_line(frame)))
    text = Text(terminal_safe(frame.prompt), style="bold")
    text.append(terminal_safe(frame.sample or ""))
    return Group(title, Words(text))


def has_ffn(grads) -> bool:
    """Whether any block of a grad frame has an FFN (ffn=off: none has, and the frame shows no FFN column)."""
    return any(g.ffn is not None for g in grads)


def ffn_gradient(g) -> str:
    """A grad row's FFN |dL/dW|; "-" for a block without an FFN."""
    return "-" if g.ffn is None else fmt.gradient(g.ffn)


def heads_tables(heads, width: int) -> list[Table]:
    """A heads frame's table, a column per head and a row per block; where the heads do not all fit `width` side
    by side, as several tables of as many heads as fit (one table squeezed to the width would show '· …' in every
    cell)."""
    n_heads = max(h.head for h in heads) + 1
    cells = {(h.layer, h.head): head_cell(h) for h in heads}
    layers = sorted({h.layer for h in heads})
    boxed = width >= NARROW  # a boxed table pads each column a cell more, and its edges
    gap = 3 if boxed else 2
    column = max(cell_len(f"head {n_heads - 1}"), *(c.cell_len for c in cells.values())) + gap
    per_table = max(1, (width - len("block") - gap - (2 if boxed else 0)) // column)
    tables = []
    for first in range(0, n_heads, per_table):
        shown = range(first, min(n_heads, first + per_table))
        table = Table(header_style="bold", box=box.SIMPLE_HEAD if boxed else None, pad_edge=False)
        table.add_column("block", style="cyan", no_wrap=True)
        for h in shown:
            table.add_column(f"head {h}", no_wrap=True)
        for layer in layers:
            add_row(table, str(layer), *(cells.get((layer, h), "") for h in shown))
        tables.append(table)
    return tables


WATCH_MAP_HEIGHT = 12  # rows of an embed frame's map, drawn under the loss table at every evaluation


def embedding_view(frame, width: int) -> list:
    """An embed frame: the map (the prompt's tokens on top) and what each direction holds of the variance."""
    grid, hidden = scatter(frame.vocab, frame.coords, asked_ids(frame.vocab, frame.tokens),
                           *grid_size(width, WATCH_MAP_HEIGHT))
    one, two = (fmt.share(share) for share in frame.explained)
    line = f"x: direction 1, {one} of the variance; y: direction 2, {two}" + (
        f"; {hidden} hidden under others" if hidden else "") + (
        f"; not drawn: the {count(frame.left_out, 'token')} the training text never holds (untrained rows)"
        if frame.left_out else "")
    return [grid, Words(Text(line, style="dim"))]
