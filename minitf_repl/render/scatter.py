"""Labelled points on a grid of characters: `:embed map=on` draws every token at its place on W_E's
two main directions.

Each point is one character, its label where the label is one character (one cell wide, or two: a
Chinese character or an emoji), else a dot (a byte-level BPE's lone bytes, shown as U+FFFD, are dots
too: a row of them would say nothing). The points a
person asked about are drawn last, whole (a subword piece as its text, up to MAX_LABEL cells) and in
bold, so that where two points share a cell the asked one shows. What hides under another is
counted, not lost silently.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text

from ..palette import visible

MAX_LABEL = 8  # the most cells an asked point's label takes
DOT = "·"  # a point whose label is not one cell wide


def asked_ids(vocab: list[str], tokens: list[str]) -> list[int]:
    """The ids of `tokens` in `vocab` (every token by id), each once, in order: the points drawn on top."""
    ids = {token: i for i, token in enumerate(vocab)}
    return list(dict.fromkeys(ids[t] for t in tokens if t in ids))


def grid_size(width: int, most_rows: int, most_columns: int = 96) -> tuple[int, int]:
    """(columns, rows) of a map in a console `width` wide: a column for the axis, rows a quarter of the columns."""
    columns = max(8, min(most_columns, width - 1))
    return columns, min(most_rows, max(6, columns // 4))


def scatter(labels: list[str], coords: list[list[float]], asked: list[int], width: int,
            height: int) -> tuple[Text, int]:
    """(the grid, how many points are hidden under others): point i, labelled `labels[i]`, at `coords[i]`
    ([x, y], x to the right and y up), on `width` x `height` cells inside a left and a bottom axis."""
    width, height = max(width, 2), max(height, 2)
    xs, ys = [c[0] for c in coords], [c[1] for c in coords]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)

    def cell_of(i: int) -> tuple[int, int]:
        col = round((xs[i] - x0) / (x1 - x0) * (width - 1)) if x1 > x0 else 0
        row = round((y1 - ys[i]) / (y1 - y0) * (height - 1)) if y1 > y0 else height - 1
        return row, col

    grid: list[list[tuple[str, str, int] | None]] = [[None] * width for _ in range(height)]

    def put(row: int, col: int, ch: str, style: str, i: int) -> None:
        """`ch` at (row, col); a character two cells wide (你, an emoji) also takes the cell after it, kept as ""
        so that the row stays `width` cells. A half of a wide one that it covers is blanked with the other half."""
        wide = cell_len(ch) == 2
        if wide and col + 1 >= width:
            col = width - 2
        for c in (col, col + 1) if wide else (col,):
            old = grid[row][c]
            if old is not None and old[0] == "":  # the right half of a wide character: its left half goes too
                grid[row][c - 1] = None
            elif old is not None and cell_len(old[0]) == 2 and c + 1 < width:
                grid[row][c + 1] = None
            grid[row][c] = (ch, style, i) if c == col else ("", style, i)

    wanted = set(asked)
    for i, label in enumerate(labels):  # everyone else first, one character each
        if i not in wanted:
            row, col = cell_of(i)
            shown = visible(label)
            # one cell (an "e" with its accent too), or one character of two (你)
            whole = shown != "\ufffd" and (cell_len(shown) == 1 or (len(shown) == 1 and cell_len(shown) == 2 <= width))
            put(row, col, shown if whole else DOT, "" if whole else "dim", i)
    taken: set[tuple[int, int]] = set()  # the cells of the asked points drawn so far

    def free_of_asked(row: int, col: int, cells: int) -> tuple[int, int]:
        """Where a label `cells` wide goes: at (row, col), else the nearest place in its row, then in the rows
        nearest it, that no asked point drawn before it holds. Two asked points in one cell ("0" and "1" of
        `:embed aeiou0123 map=on` on an untrained model) hid the first, said on top; they now lie side by side."""
        for r in sorted(range(height), key=lambda r: abs(r - row)):
            for c in sorted(range(width - cells + 1), key=lambda c: abs(c - col)):
                if not any((r, c + k) in taken for k in range(cells)):
                    return r, c
        return row, col  # more asked cells than the grid has: the later one on top

    for i in asked:  # then the asked points, whole, on top
        row, col = cell_of(i)
        shown, cells = "", 0  # its characters of one or two cells, up to MAX_LABEL cells
        for ch in visible(labels[i]):
            if 1 <= cell_len(ch) <= 2 and cells + cell_len(ch) <= min(MAX_LABEL, width):
                shown, cells = shown + ch, cells + cell_len(ch)
        shown, cells = (shown, cells) if shown else (DOT, 1)
        row, col = free_of_asked(row, min(col, width - cells), cells)
        for ch in shown:
            put(row, col, ch, "bold cyan", i)
            taken.update((row, col + k) for k in range(cell_len(ch)))
            col += cell_len(ch)
    out = Text()
    for cells in grid:
        out.append("│")
        for entry in cells:
            out.append(" " if entry is None else entry[0], style="" if entry is None else entry[1])
        out.append("\n")
    out.append("└" + "─" * width)
    seen = {entry[2] for cells in grid for entry in cells if entry is not None}
    return out, len(labels) - len(seen)
