"""Weights as a grid of coloured cells (attention maps, per-token probabilities), or of shades without colour.

Colour where the console has its scale; without (NO_COLOR, a pipe, a test console, 16 colours) the same information
as characters: a shade per weight (palette.SHADES), so nothing is lost in a log or a test.
"""

from __future__ import annotations

from rich.color import Color
from rich.console import Console
from rich.style import Style
from rich.text import Text

from ..palette import (SCALE, SHADES, clusters, columns, fit_columns, heads_tell_apart, piece_cell, scale_rgb, shade,
                       visible)


def plain(console: Console) -> bool:
    """No colour on this console: draw with characters instead."""
    return bool(console.no_color) or console.color_system is None


def unscaled(console: Console) -> bool:
    """No colour scale on this console: weights as shade characters. A terminal of 16 colours (TERM=xterm, the Linux
    console) has colours to say yes and no, but not the scale: its ten colours fall to four there, every weight from
    0 to 0.4 one grey, so a map of attention read as blank."""
    return plain(console) or console.color_system in ("standard", "windows")


def cell(frac: float, width: int, as_text: bool, text: str = "") -> Text:
    """One cell for a weight `frac` in [0, 1]: a shade character, or `text` on the scale's colour."""
    if as_text:
        return Text((text or shade(frac)).ljust(width))
    r, g, b = scale_rgb(frac)
    fg = "black" if frac > 0.55 else "white"
    return Text(text.ljust(width) if text else " " * width, style=Style(bgcolor=Color.from_rgb(r, g, b), color=fg))


def legend(peak: float, as_text: bool, what: str = "weight", width: int | None = None) -> Text:
    """The scale from 0 to `peak`, as shades or colours. Where the line is wider than `width` (a narrow terminal),
    `what` goes on a line of its own, so that the scale is not broken with its top value under it."""
    line = Text(f"{what}: 0 ", style="dim")
    if as_text:
        line.append(" ".join(SHADES))
    else:
        for i in range(len(SCALE) * 2):
            line.append_text(cell(i / (len(SCALE) * 2 - 1), 1, False))
    line.append(f" {peak:.2f}", style="dim")
    if width is not None and line.cell_len > width:
        head = Text(f"{what}:\n", style="dim")
        return head + line[len(what) + 2:]
    return line


MAX_LABEL = 8  # the widest row label: a longer subword piece is cut to it, its end as "…"


HEAD_CHARACTERS = (1, 2)  # a column's head: its token's first character, else its first two, else its position


def column_heads(tokens: list[str]) -> list[str] | None:
    """The least of each column's token that names it (palette.clusters of `visible`): its first character where those
    tell the tokens apart, else its first two (a BPE's pieces of English, "␣cat" and "␣sat", all start with "␣": every
    head read "␣", and any English text was headed by positions), else None: the columns are headed by their positions
    (by_index; a BPE's byte tokens all start with "\\x")."""
    shown = [clusters(visible(t)) for t in tokens]
    for n in HEAD_CHARACTERS:
        heads = ["".join(c[:n]) for c in shown]
        if heads_tell_apart(heads, tokens):
            return heads
    return None


def by_index(tokens: list[str]) -> bool:
    """Whether the columns are headed by their positions (0 to 9, over again), each row label by its position too:
    where neither the first characters of the tokens nor their first two tell them apart (column_heads), a column
    headed by its token's was not to be told from the others."""
    return column_heads(tokens) is None


def heads_note(tokens: list[str]) -> str | None:
    """What a map of `tokens` heads its columns with, where that is not each token's first character: a line of
    digits ("012345678901" over an English text) read as the text's own characters."""
    heads = column_heads(tokens)
    if heads is None:
        return ("each column is headed by its position's last digit (0 to 9, then 0 again), and each row starts "
                "with its position: the tokens' first two characters do not tell them apart")
    if any(len(clusters(head)) > 1 for head in heads):
        return "each column is headed by its token's first two characters: the first alone does not tell them apart"
    return None


def label_width(tokens: list[str], start: int = 0) -> int:
    """Columns of the row labels: 2 for characters (as always), a subword piece's columns and a space, at most
    MAX_LABEL + 1, after its position and a space where the columns are headed by position (by_index). Columns
    (palette.columns), not characters: a Chinese character or an emoji takes two. `start`: the position of the first
    of `tokens` (a map cut to a text's last positions), whose positions label the rows."""
    longest = max((columns(visible(t)) for t in tokens), default=1)
    piece = 2 if longest <= 1 else min(longest, MAX_LABEL) + 1
    return piece + (len(str(start + len(tokens) - 1)) + 1 if by_index(tokens) else 0)


def column_width(tokens: list[str], width: int) -> int:
    """The columns of a position's cell: `width`, or its widest head's (column_heads) where wider: 2 where a token
    starts with a character two columns wide (你, an emoji, a vowel sign on its circle ◌ि), which a cell of one column
    cannot head (the keys' line ran twice as wide as the rows below it); heads of two characters with a space after
    them (side by side they read as one word: "th␣cat␣sat"). Headed by position (by_index), a digit heads each."""
    heads = column_heads(tokens)
    if heads is None:  # a digit heads each
        return width
    gap = int(any(len(clusters(head)) > 1 for head in heads))
    return max([width, *(columns(head) + gap for head in heads)])


def reads_future(maps: list[list[list[float]]]) -> bool:
    """Whether any pattern of `maps` ([head][query i][key j]) puts weight on the future. Under the causal mask
    every weight above the diagonal is exactly 0 (softmax of -inf); without it (causal off, :ablate mask) none
    is, so the key just after each query (j = i + 1) tells: T - 1 numbers a map, not T^2 / 2 (a GPT-2's 1,024)."""
    return any(row[i + 1] > 0 for m in maps for i, row in enumerate(m[:-1]))


def heatmap(tokens: list[str], weights: list[list[float]], peak: float, width: int, as_text: bool,
            future: bool = False, start: int = 0) -> Text:
    """Rows are queries (where position i looks), columns keys; j > i (the future) stays blank unless
    `future` (nothing masks it: causal off, or the mask ablated). `width` columns per cell (column_width: 2 for a wide
    character, 3 for heads of two characters); a column is headed by its token's first character, or its first two
    where the first alone does not tell the tokens apart (column_heads), or by its position where neither does
    (by_index), a row by the whole token (up to MAX_LABEL columns, cut with "…"); heads_note says which, where not
    the tokens' first characters. `start`: the text's position of the first of `tokens` (a map cut to the last
    positions): the positions that head the rows and columns are the text's (146 to 250, not 0 to 104), as the
    position a reader pastes into :qkv at=i is."""
    T = len(tokens)
    heads = column_heads(tokens)
    index = heads is None
    label = label_width(tokens, start)
    width = column_width(tokens, width)
    digits = len(str(start + T - 1)) + 1 if index else 0  # a row's position and a space before its token
    out = Text(" " * label)
    for j in range(T):  # cut and padded by columns, not characters, so that the cells stay under keys
        out.append(fit_columns(str((start + j) % 10) if index else heads[j], width), style="bold")
    for i in range(T):
        out.append("\n")
        shown = label - digits - 1 if label - digits > 2 else label - digits  # a space after a subword piece
        row = f"{start + i:>{digits - 1}} " if index else ""
        out.append(row + fit_columns(piece_cell(visible(tokens[i]), shown), label - digits), style="bold")
        for j in range(T):
            if j > i and not future:
                out.append(" " * width)
            else:
                out.append_text(cell(weights[i][j] / peak if peak > 0 else 0.0, width, as_text))
    return out


def attention_window(n_tokens: int, width: int, cell_width: int, label: int = 2) -> int:
    """How many positions fit the width (`label` columns of row labels, `cell_width` columns per position)."""
    return max(1, min(n_tokens, (width - label) // cell_width))


def window_note(shown: int, total: int, width: int, height: int | None = None) -> str:
    """What a map cut to the last `shown` of `total` positions says, so a reader does not take it for the whole
    text (the rows' weights still spread over the keys cut off); `height`: the terminal's lines cut it, not its
    columns."""
    size = f"{height} lines tall" if height is not None else f"{width} columns wide"
    # where they are: a row counted from the window's top read as position 0, not as the text's position 146
    return (f"showing the last {shown} of {total} positions (the terminal is {size}): positions {total - shown} to "
            f"{total - 1}")


def before_window_note(maps: list[list[list[float]]], start: int) -> str | None:
    """What the rows of maps ([head][query i][key j]) cut to positions `start` on put on the keys before them, which
    the map leaves out: its rows, said to be where position i looks over keys 0..i, summed to well under 1 with no
    word. None where nothing is cut."""
    if not start:
        return None
    cut = [sum(row[:start]) for m in maps for row in m[start:]]
    if not cut:
        return None
    return (f"each row also puts weight on keys 0 to {start - 1}, before the window and not drawn: {min(cut):.2f} to "
            f"{max(cut):.2f} of the row ({sum(cut) / len(cut):.2f} on average), so the cells drawn sum to the rest")
