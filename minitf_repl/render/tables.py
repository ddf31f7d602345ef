"""Tables that fit the console with every word whole, and the small tables several results share."""

from __future__ import annotations

import io

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..palette import terminal_safe
from . import fmt
from .words import Words, on_a_terminal, say

NARROW = 72  # below this many columns, wide tables switch to a stacked layout


def fits(console: Console, renderable, width: int | None = None) -> bool:
    """Whether a table fits the console (or `width` columns) with every word whole. Rich makes any
    table fit by folding or cutting cells ("…"); a layout for which it would has a narrower form
    instead. The test is the rule itself: laid out at this width, the table shows the same words as
    on an unbounded line."""
    width = console.width if width is None else width

    def words(columns: int) -> list[str]:
        # force_jupyter=False: in a notebook Rich displays any console's output, a file given or not, and every table
        # fitted showed two or three times (each width measured)
        scratch = Console(file=io.StringIO(), width=columns, color_system=None, force_jupyter=False)
        scratch.print(renderable)
        return sorted(scratch.file.getvalue().split())

    return words(width) == words(max(1000, 10 * width))


def fitting_table(console: Console, names: list[str], rows: list[list], left: tuple = (), optional: tuple = (),
                  wrap: tuple = (), records: bool = True, say_left_out: bool = True) -> Table:
    """The table of `names` and `rows` with every word whole: the `optional` columns are dropped, first named
    first, until it fits the console (`fits`); the ones left are those the reader cannot do without. Where even
    they do not fit, each header takes a line per word ("|dL/dh|" over "leaves"), so that a column is as wide as
    its widest cell rather than its header, which would otherwise cut the cells ("0.2…"), and the `wrap` columns
    (words: "W_E (token embedding, tied head)") break their cells at spaces. Where that still does not fit, and
    `records`, each row becomes a record, a line per column, `name  value`, every column shown.
    `shown_columns(table)` names the columns it shows; a caption under the table names those the width left out
    (`say_left_out=False`: the view says it in its own words)."""
    dropped: set[str] = set()
    for drop, stacked in ((None, False), *((name, False) for name in optional), (None, True)):
        if drop is not None:
            dropped.add(drop)
        keep = [k for k, name in enumerate(names) if name not in dropped]
        table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
        for k in keep:
            header = "\n".join(names[k].split()) if stacked else names[k]
            table.add_column(header, justify="left" if names[k] in left else "right",
                             no_wrap=not (stacked and names[k] in wrap))
        for row in rows:
            add_row(table, *(row[k] for k in keep))
        table.shown_columns = [names[k] for k in keep]
        if fits(console, table):
            # said under the table: a legend may still explain a column the width took away (:heads' "current" at
            # 70 columns), and nothing said it was gone
            if dropped and say_left_out:
                # a column without a header is a column of bars (:qkv's a_ij drawn): named so, not as an empty item
                left_out = [name or "the bars" for name in optional if name in dropped]
                it = "it" if len(left_out) == 1 else "them"
                # written to a file or a pipe there is no window to widen: the width is COLUMNS's (80 unset)
                wider = (f"a wider window shows {it}" if on_a_terminal(console) else
                         f"COLUMNS={max(2 * console.width, 160)} before minitf shows {it} in a file or a pipe")
                table.caption = Text(f"left out at {console.width} columns: {', '.join(left_out)} ({wider})",
                                     style="dim")
                table.caption_justify = "left"
            return table
    return record_table(names, rows, console) if records else table


def record_table(names: list[str], rows: list[list], console: Console | None = None) -> Table:
    """Each row as a record: its first cell in bold, then a line per other column, `name  value`, a blank line apart.
    Where even that does not fit the `console` (20 columns: "model below it" left a value 4 cells, "2.4…"), each
    value goes on the line under its name, 2 in."""
    for stacked in (False, True):
        table = Table(show_header=False, box=None, pad_edge=False)
        table.add_column("name", style="" if stacked else "dim", no_wrap=not stacked)  # stacked: values in it too
        if not stacked:
            table.add_column("value")
        for at, row in enumerate(rows):
            if at:
                add_row(table, *([""] if stacked else ["", ""]))
            first = row[0] if isinstance(row[0], Text) else Text(str(row[0]))
            if names[0] or first.plain:  # an unnamed mark column (:step's →) where it marks nothing: no line
                name, value = Text(names[0] or "", style="bold"), Text.assemble(first, style="bold")
                heading = Text.assemble(name, " ", value) if names[0] else value
                add_row(table, *([heading] if stacked else [name, value]))
            for name, cell in zip(names[1:], row[1:]):
                if stacked:
                    add_row(table, Text(name, style="dim"))
                    table.add_row(Words(cell if isinstance(cell, Text) else Text(str(cell)), indent=2))
                else:
                    add_row(table, name, cell)
        table.shown_columns = list(names)
        if console is None or fits(console, table):
            break
    return table


def fitted(console: Console, *tables: Table) -> Table:
    """The first of `tables` (widest first) that fits the console with every word whole (`fits`); where none does,
    the last as records (`record_table`): a table Rich squeezes cuts its numbers to "0.…"."""
    for table in tables:
        if fits(console, table):
            return table
    last = tables[-1]
    names = [str(column.header) for column in last.columns]
    return record_table(names, [list(row) for row in zip(*(list(column.cells) for column in last.columns))], console)


def shown_columns(table: Table) -> list[str]:
    """The names of the columns a table of `fitting_table` shows (its headers, a record's names)."""
    return getattr(table, "shown_columns", None) or [str(c.header) for c in table.columns]


def add_row(table: Table, *cells, style=None) -> None:
    """add_row with plain strings taken literally: data, prompts and help text are not Rich markup, and a character
    in them that would act on a terminal (a file name's ESC) is shown as its escape."""
    table.add_row(*(Text(terminal_safe(c)) if isinstance(c, str) else c for c in cells), style=style)


def settings_table(title: str, values: dict, marks: dict[str, str] | None = None) -> Table:
    """Named values under a title, each written as :set writes it (on/off, none, 0.001); `marks`: a dim word beside
    some of them (where a value comes from)."""
    table = Table(title=title, title_justify="left", show_header=False, pad_edge=False, box=None)
    table.add_column("setting", style="cyan", no_wrap=True)
    table.add_column("value")
    if marks:
        table.add_column("from", style="dim")
    for key, value in values.items():
        add_row(table, key, fmt.value(value), *([marks.get(key, "")] if marks else []))
    return table


def fields(console: Console, rows: list[tuple[str, str]]) -> None:
    """Named values, the names in a column. Where a value holds a word wider than its column (a long
    path), each field goes on a line of its own instead, wrapped at spaces, so that word stays whole."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="cyan", no_wrap=True)
    table.add_column("value")
    for name, value in rows:
        add_row(table, name, value)
    if fits(console, table):
        console.print(table)
        return
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        say(console, Text(name.ljust(width), style="cyan") + Text("  " + value))
