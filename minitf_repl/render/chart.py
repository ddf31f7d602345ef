"""The one character chart: curves against the training step on a grid of plain characters.

Every chart in the terminal is drawn here: the loss curve under `:train`'s table, `:plot` (loss,
learning rate, gradient norm), `:compare`'s validation curves and `:lrfind`'s loss against the rate
(its x axis labelled with rates). Each curve has a glyph and a
colour, so the chart reads the same with and without colour, in any terminal font. Several points
in one column are averaged; a curve of sparse points (evaluations) can be `joined` by a dotted
line. An optional baseline (ln V, the loss of a uniform guess) is a dashed row, and levels (the
losses of counting models, `:ngram`) dotted rows, each kept only where it is near the
curves. `uniform_loss` is the one place ln V is computed for a view.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from rich.console import Group
from rich.text import Text

from .words import Words

# :compare's contenders, in order: a mark and a colour each (the table's columns and the chart's curves); :plot's
# curves alike (the bands of :train watch=context, 7 of them at max_seq_len=64). Each glyph once: the colours repeat
# after six, and with NO_COLOR the glyph alone tells two curves apart.
MARKS = "●▲■◆✚✖★▼○□"
STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")
LOG_ORDERS = 3  # values spanning this many orders of magnitude are charted on a log axis where the chart allows it


def mark(k: int) -> tuple[str, str]:
    """The glyph and colour of the k-th contender."""
    return MARKS[k % len(MARKS)], STYLES[k % len(STYLES)]


def uniform_loss(vocab_size: int | None) -> float | None:
    """ln V: the loss of a uniform guess over V tokens, what a model that knows nothing scores (None: unknown)."""
    return math.log(vocab_size) if vocab_size and vocab_size > 1 else None


def uniform_label(vocab_size: int | None) -> str:
    """How a chart names its ln V line: "ln(V) = 2.48, a uniform guess"."""
    baseline = uniform_loss(vocab_size)
    return "" if baseline is None else f"ln(V) = {baseline:.2f}, a uniform guess"


@dataclass
class Curve:
    name: str  # the legend's label
    steps: list[int]
    values: list[float]  # a value that is not finite is left out
    glyph: str = "•"
    style: str = "cyan"
    joined: bool = False  # a dotted line between consecutive points (sparse evaluations)


@dataclass
class Level:
    """A level a curve is read against, drawn as a dotted row starting with its mark: a counter's loss (:ngram)."""

    value: float
    mark: str  # one character, at the row's left end and in the legend
    label: str


@dataclass
class AboveTop:
    """The largest point of a chart's curves where its column's mean is drawn below it, under the axis's top."""

    value: float
    step: int
    curve: str
    most: int  # the most points one column averages


class Chart(Group):
    """A drawn chart, which knows the levels it left out (too far from its curves) and a point its columns' means
    hide above the top (`above`): a caller says so in words."""

    def __init__(self, *renderables, left_out: list[Level] = (), above: AboveTop | None = None):
        super().__init__(*renderables)
        self.left_out = list(left_out)
        self.above = above


def chart(curves: list[Curve], width: int, height: int = 12, baseline: float | None = None,
          baseline_label: str = "", unit: str = "", levels: list[Level] = (),
          x_labels: tuple[str, str] | None = None, log_y: bool = False) -> Chart:
    """`curves` on a grid `width` columns wide and `height` rows high; `unit` names the y axis in the legend.
    The baseline and each level are drawn where they are near the curves: within half the curves' range.
    `x_labels`: what the x axis's two ends say (default "step FIRST" and "LAST"). `log_y`: the y axis on a log
    scale (a value that is not positive is left out, and a column's points are drawn at their geometric mean),
    said in the legend."""
    if log_y:
        curves = [dataclasses.replace(c, values=[math.log10(v) if v > 0 else math.nan for v in c.values])
                  for c in curves]
        baseline = math.log10(baseline) if baseline is not None and baseline > 0 else None
        levels = [dataclasses.replace(level, value=math.log10(level.value)) for level in levels if level.value > 0]
    points = [(s, v) for curve in curves for s, v in zip(curve.steps, curve.values) if math.isfinite(v)]
    if not points:
        return Chart(Text("nothing to plot", style="dim"))
    x0, x1 = min(s for s, _ in points), max(s for s, _ in points)
    # The axis spans what is drawn: the mean of each column's points (a spike averaged away in a narrow chart is
    # not on it), the baseline and the levels near them. The columns depend on the labels' width, and the labels on
    # the columns' means: settled in a few rounds (a last unsettled one keeps its columns, a cell wider or narrower).
    plot_w = max(10, width - 7)
    for attempt in range(4):
        columns = [_columns(curve, x0, x1, plot_w) for curve in curves]
        y0, y1, drawn_baseline, drawn_levels = _y_range(
            [sum(vs) / len(vs) for buckets in columns for vs in buckets.values()], baseline, levels)
        labels = axis_labels(y0, y1, log_y, rows=height)
        lw = max(len(s) for s in labels) + 1
        if max(10, width - lw - 2) == plot_w or attempt == 3:
            break
        plot_w = max(10, width - lw - 2)
    left_out = [level for level in levels if level not in drawn_levels]
    baseline, levels = drawn_baseline, drawn_levels
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * plot_w for _ in range(height)]

    def row_of(v: float) -> int:
        return min(height - 1, max(0, round((y1 - v) / (y1 - y0) * (height - 1))))

    if baseline is not None:
        grid[row_of(baseline)] = [("╌", "dim")] * plot_w
    for level in levels:
        # the mark at the left edge: a loss curve starts high (near ln V), so the first column is free there
        grid[row_of(level.value)] = [(level.mark, "bold yellow")] + [("┄", "yellow")] * (plot_w - 1)
    owner: dict[tuple[int, int], int] = {}  # the cell of each point drawn: the curve whose glyph shows there
    drawn: list[list[tuple[int, int]]] = []  # each curve's cells
    for k, (curve, buckets) in enumerate(zip(curves, columns)):
        cells = sorted((col, row_of(sum(vs) / len(vs))) for col, vs in buckets.items())
        if curve.joined:  # dots between consecutive points, where nothing else is drawn yet
            for (c0, r0), (c1, r1) in zip(cells, cells[1:]):
                for c in range(c0 + 1, c1):
                    r = round(r0 + (r1 - r0) * (c - c0) / (c1 - c0))
                    if grid[r][c][0] == " ":
                        grid[r][c] = ("·", curve.style)
        for col, row in cells:
            grid[row][col] = (curve.glyph, curve.style)
            owner[row, col] = k
        drawn.append([(row, col) for col, row in cells])
    out = Text()
    for r in range(height):
        label = labels[0] if r == 0 else labels[2] if r == height - 1 else labels[1] if r == (height - 1) // 2 else ""
        out.append(label.rjust(lw) + (" ┤" if label else " │"), style="dim")
        for ch, style in grid[r]:
            out.append(ch, style=style)
        out.append("\n")
    out.append(" " * lw + " └" + "─" * plot_w + "\n", style="dim")
    left, right = x_labels if x_labels is not None else (f"step {x0:,}", f"{x1:,}" if x1 != x0 else "")
    out.append(" " * (lw + 2) + left + " " * max(1, plot_w - len(left) - len(right)) + right, style="dim")
    entries = [Text(f"{curve.glyph} ", style=curve.style) + Text(curve.name + hidden_under(k, curves, drawn, owner))
               for k, curve in enumerate(curves)]
    lines = [("╌ ", "dim", baseline_label)] if baseline is not None else []
    lines += [(f"┄{level.mark} ", "yellow", level.label) for level in levels]
    entries += [Text(glyph, style=style) + Text(label) for glyph, style, label in lines]
    if unit or log_y:
        entries.append(Text(f"({unit}{', ' if unit and log_y else ''}{'log scale' if log_y else ''})", style="dim"))
    # under the wrapping rule (render.words): an entry wider than the line breaks after a comma, not inside a name
    return Chart(out, Words(legend_lines(entries, width)), left_out=left_out,
                 above=_above_top(curves, columns, y1, log_y))


def _above_top(curves: list[Curve], columns: list[dict[int, list[float]]], top: float, log_y: bool):
    """A column is drawn at the mean of its points, so a narrow chart can average a spike (a gradient norm's) below
    its axis's top label, which then reads as the largest value: the largest point where it lies above the top."""
    peak = max(((v, s, c.name) for c in curves for s, v in zip(c.steps, c.values) if math.isfinite(v)), default=None)
    if peak is None or peak[0] <= top + 1e-9 * abs(top):
        return None
    value, step, name = peak
    return AboveTop(10 ** value if log_y else value, step, name, max(len(vs) for b in columns for vs in b.values()))


def spans_orders(values: list[float], orders: int = LOG_ORDERS) -> bool:
    """Whether `values` (the finite ones) are all positive and span at least `orders` orders of magnitude: on a
    linear axis one blow-up (a gradient norm of 5e4 among 1s) then flattens every other point onto one row."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) >= 10 ** orders * min(finite)


def _columns(curve: Curve, x0: int, x1: int, plot_w: int) -> dict[int, list[float]]:
    """The curve's finite values by the column they fall in (a column's are drawn as their mean)."""
    buckets: dict[int, list[float]] = {}
    for s, v in zip(curve.steps, curve.values):
        if math.isfinite(v):
            col = 0 if x1 == x0 else round((s - x0) / (x1 - x0) * (plot_w - 1))
            buckets.setdefault(col, []).append(v)
    return buckets


def _y_range(values: list[float], baseline: float | None, levels: list[Level]):
    """(y0, y1, the baseline drawn or None, the levels drawn) for the values drawn: the baseline and each level
    kept where near them, within half their range, above or below, and the range widened to take them in."""
    y0, y1 = min(values), max(values)
    reach = 0.5 * (y1 - y0 + 1e-9)
    levels = [level for level in levels if math.isfinite(level.value) and y0 - reach <= level.value <= y1 + reach]
    if baseline is not None and not (math.isfinite(baseline) and y0 - reach <= baseline <= y1 + reach):
        baseline = None
    kept = [level.value for level in levels] + ([baseline] if baseline is not None else [])
    y0, y1 = min([y0, *kept]), max([y1, *kept])
    if y1 - y0 < 1e-12:  # a flat line: a band of a tenth of its size around it (a constant rate of 1e-3 is not on 0)
        # a whole number (a rank, a count) a band of 1 each side: the lens's rank 1 throughout read 0.95 to 1.05,
        # as if a rank could lie between
        half = 1.0 if y0 == round(y0) and y0 else 0.05 * abs(y0) if y0 else 0.5
        y0, y1 = y0 - half, y1 + half
    return y0, y1, baseline, levels


def axis_labels(y0: float, y1: float, log_y: bool = False, rows: int | None = None) -> list[str]:
    """The y axis's top, middle and bottom labels: 3 significant digits, more where 3 would write two alike (a
    range of 0.1706 to 0.1720 would read 0.172, 0.171, 0.171). `log_y`: y0 and y1 are log10 of the values. `rows`:
    a grid of that many rows, whose middle label stands on row (rows - 1) // 2 and names that row's value (with
    an even number of rows, (y0 + y1) / 2 falls between two, and a point of that value was drawn a row below it)."""
    middle = (y0 + y1) / 2 if not rows or rows < 3 else y1 - (rows - 1) // 2 / (rows - 1) * (y1 - y0)
    values = (y1, middle, y0)
    if log_y:
        values = tuple(10 ** v for v in values)
    for digits in range(3, 8):
        labels = [f"{v:.{digits}g}" for v in values]
        if len(set(labels)) == len(labels):
            break
    # on a linear axis, as many decimals in each (`4.63, 3.51, 2` read the 2 as less precise than the others), as
    # many as the labels need and at most the axis's own resolution, 3 digits of its range: a loss falling from 2.48
    # to 0.000203 read "2.484907, 1.420034, 0.000203"; a log axis's labels span magnitudes, an exponent stays
    if not log_y and not any("e" in label for label in labels) and y1 > y0:
        resolution = max(0, 2 - math.floor(math.log10(y1 - y0)))
        decimals = min(max(len(label.partition(".")[2]) for label in labels), resolution)
        shown = [f"{v:.{decimals}f}" for v in values]
        if len(set(shown)) == len(shown):
            labels = shown
    return labels


def hidden_under(k: int, curves: list[Curve], cells: list[list[tuple[int, int]]],
                 owner: dict[tuple[int, int], int]) -> str:
    """What the legend adds to curve k when none of its points shows, each drawn over by a later curve's: the
    glyphs it is under (else a reader looks for a glyph the chart does not draw). A watched view's curve (joined: a
    point an evaluation) says so of some of its points too: block 0's lens rank 2 drawn on rank 1's row under ✚
    read as block 0 having the answer already. (A loss chart's hundreds of train points under val's are no news.)"""
    over = {owner[cell] for cell in cells[k]}
    if not over or (k in over and not curves[k].joined):
        return ""
    if k not in over:
        return " (hidden under " + " ".join(curves[j].glyph for j in sorted(over)) + ")"
    points = list(dict.fromkeys(cells[k]))  # each cell once, a column's points drawn there together
    under = [cell for cell in points if owner[cell] != k]
    if not under:
        return ""
    glyphs = " ".join(curves[j].glyph for j in sorted({owner[cell] for cell in under}))
    # "hidden": "1 of 10 points under ▲" on a loss chart read as lower than ▲'s, where it is drawn over by them
    return f" ({len(under)} of {len(points)} points hidden under {glyphs})"


def legend_lines(entries: list[Text], width: int) -> Text:
    """The legend's entries three spaces apart, a new line before an entry that would pass `width`: wrapped at any
    space, a glyph was left at a line's end with its name on the next ("▲" then "pos_encoding=rope,...")."""
    legend, used = Text(), 0
    for entry in entries:
        if used and used + 3 + len(entry) > width:
            legend.append("\n")
            used = 0
        elif used:
            legend.append("   ")
            used += 3
        legend.append_text(entry)
        used += len(entry)
    return legend


SPARKS = "▁▂▃▄▅▆▇█"
EIGHTHS = " ▏▎▍▌▋▊▉"  # a cell filled from the left, by eighths


def bar(fraction: float, cells: int) -> str:
    """A bar `fraction` (0 to 1) of `cells` long, in eighths of a cell. A value above 0 shows at least a sliver, not
    a whole block: :score drew a loss of 0.002 as long as one of 0.986 (one block each, the least it drew)."""
    eighths = round(max(0.0, min(1.0, fraction)) * cells * 8)
    if eighths == 0 and fraction > 0:
        eighths = 1
    full, part = divmod(eighths, 8)
    return "█" * full + (EIGHTHS[part] if part else "")


def spark_bins(values: list[float], width: int) -> list[float]:
    """What each bar of spark(values, width) stands for: the values themselves where they fit, else the means of
    neighbours, as many as the width has cells."""
    if not values or width < 1:
        return []
    bins = min(len(values), width)
    return [sum(chunk) / len(chunk) for chunk in
            (values[k * len(values) // bins:(k + 1) * len(values) // bins] for k in range(bins))]


def spark(values: list[float], width: int) -> str:
    """`values` as one line of bar glyphs at most `width` wide (neighbours averaged), scaled from 0 to the largest."""
    means = spark_bins(values, width)
    if not means:
        return ""
    bins = len(means)
    top = max(means)
    if not math.isfinite(top) or top <= 0:
        return SPARKS[0] * bins
    return "".join(SPARKS[min(len(SPARKS) - 1, int(len(SPARKS) * v / top))] if math.isfinite(v) else " "
                   for v in means)
