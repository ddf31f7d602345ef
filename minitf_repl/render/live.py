"""What a running command shows while it runs: a progress bar, tables that grow, streamed text.

`RichReporter` receives the progress a command reports (core's callbacks through reporter.Reporter:
training steps, comparison evaluations, generated tokens) and shows it: a live progress bar with a
loss table that grows at each evaluation, or text streamed as it is produced, wrapped at spaces.
`LossTable` and `CompareTable` grow row by row while a command runs and are drawn again by its
renderer at the end. `QuietReporter` shows notices alone, on stderr (the shell's --set, applied before a command).
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from datetime import timedelta

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..core import distributed
from ..core.interrupts import in_the_foreground, on_suspend, watching_stops
from ..palette import terminal_safe, text_for_output
from ..reporter import Reporter
from . import fmt
from .chart import mark, uniform_loss
from .renderers import after_lines, after_stream, render, text_apart
from .heatmap import unscaled
from .tables import NARROW, add_row, fits
from .watch import watch_view
from .words import Words, WordStream, is_a_terminal, on_a_terminal, say, write_raw, writes_raw

EVALUATION = "val batches"  # how a training run's evaluation is named in its progress lines ("val batches: 4/8")
PROGRESS_LINES_AFTER = 1.0  # seconds a work goes on before its quarters are said as lines (where no bar is drawn)
FRAME_LEAVES = 12  # lines a watched frame leaves the live display: the loss table's ln(V) line, headings, a few rows,
# its legend, the bar and the cursor
BAR_LEAST = 6  # cells a narrow bar keeps beside its labelled numbers; where the labels leave it fewer, they give way
# said under a watched view that left the loss table no room (80 x 30, watch=attn): the table went unseen the whole
# run, and nothing said it was there
TABLE_HIDDEN = "the loss table comes at the end: too few lines for it beside the view"

# (history key, header, narrow header, format, shown on a narrow terminal)
LOSS_COLUMNS = (
    ("step", "step", "step", fmt.whole, True),
    ("train_loss", "train loss", "train", fmt.num, True),
    # with dropout on: the training split scored in eval mode, as val is (core.train.Trainer.evaluate_train)
    ("train_eval_loss", "train (eval mode)", "train e", fmt.num, True),
    ("val_loss", "val loss", "val", fmt.num, True),
    ("val_bpc", "bits/char", "bpc", fmt.num, True),  # the val loss in bits per character (text data)
    ("accuracy", "accuracy", "acc", fmt.pct, True),
    ("aux_loss", "aux loss", "aux", fmt.num, True),  # mixture of experts: load balancing (1.0 = even)
    ("lr", "lr", "lr", fmt.lr, False),
    ("tokens_per_second", "tokens/s", "tok/s", fmt.rate, False),
    ("elapsed", "elapsed", "time", fmt.seconds, True),
)
# A narrow table's columns dropped in turn while its rows do not fit: a mixture's load balance, bits per character
# (the val loss in other units), the time, the accuracy (the summary line has both), then the train loss, so that at
# 20 columns the val loss stays whole (every number was cut to "0.…" there).
NARROW_DROPS = ("aux_loss", "val_bpc", "elapsed", "accuracy", "train_loss", "train_eval_loss")
# What a column's number is read on, said under the table: at step 100 of the first run the train loss stands
# above the val loss, which reads as a leak until one knows that the two are not measured alike.
# The speed likewise: a row's tokens/s is of the steps since the row before (one step's time is noise), the summary
# line's of every step of the command, so the last row's and the summary's differ, the first slow steps in one only.
LOSS_LEGEND = {"train_loss": "one batch, before the step's update",
               "val_loss": "eval_batches held-out batches, after it",
               # a column a newcomer met unexplained until a BPE section 300 lines further down the README
               "val_bpc": "the val loss in bits a character (/ ln 2, / characters a token), alike across tokenizers",
               "tokens_per_second": "the steps since the row above (the summary at the end: all of them)",
               # a mixture's column, met first here and explained only by :experts and the JSON docs
               "aux_loss": "the experts' load balance (1.0: even; training adds moe_aux_weight x it to the loss; "
                           "train loss is without it)",
               "train_eval_loss": "eval_batches training batches after it, dropout off, as val is scored: the one "
                                  "to compare with val"}
# A run in bfloat16 computes its train loss in bfloat16, and evaluates in float32 (core.train evaluates outside
# autocast, through the fast path's float32 products): the two columns are not computed alike, which the legend hid
IN_DTYPE = {"train_loss": "in bfloat16", "val_loss": "in float32", "train_eval_loss": "in float32"}
# The train loss's words where the table has the train (eval mode) column: its batch was read with dropout on, so it
# stands above what the weights score, and above val ("train 2.1696, val 2.0079" read as no overfitting at all)
DROPOUT_TRAIN_WORDS = "with dropout on (usually above the eval-mode loss)"
OVERFIT_RISES = 3  # rises of the validation loss in a row that earn an "overfitting?" note


def progress_line(info, compile_seconds: float = 0.0, compile_steps: int = 0) -> str:
    """One evaluation as a line of a log: "step 20 (run 20/40): train loss 3.1114, val loss 3.0005, ...", each number
    named and shown as the loss table's column of it shows it.

    The eta leaves out the `compile_steps` steps that compiled the model (compile=on) and their `compile_seconds`, as
    tokens/s leaves them out: counted, a run whose first step compiled for 19.6 s of its 29.1 said "eta 0:00:24" at
    its half-way line, where 5 s were left. (A run continued from a call that compiled counts that call's compile in
    its elapsed, which this call's reporter never saw: its eta reads high until the run ends.)"""
    values = {"train_loss": info.train_loss, "train_eval_loss": getattr(info, "train_eval_loss", None),
              "val_loss": info.val_loss, "val_bpc": info.val_bpc,
              "accuracy": info.accuracy, "aux_loss": info.aux_loss, "lr": info.lr,
              "tokens_per_second": info.tokens_per_second, "elapsed": info.elapsed}
    parts = [f"{header} {show(values[key])}" for key, header, _, show, _ in LOSS_COLUMNS
             if values.get(key) is not None]
    left = info.run_steps - info.run_step
    steady = info.run_step - compile_steps  # the steps that ran at the pace the rest will run at
    if left > 0 and steady > 0 and info.elapsed:  # the bar's eta, which a log has no bar to show
        seconds = max(info.elapsed - compile_seconds, 0.0)
        parts.append(f"eta {timedelta(seconds=round(seconds / steady * left))}")
    return f"step {info.step:,} (run {info.run_step:,}/{info.run_steps:,}): " + ", ".join(parts)


FIRST_SIGN = 5.0  # seconds of a run without an evaluation's line after which a log says the pace, once


def pace_line(step: int, run_steps: int, seconds: float, compile_seconds: float = 0.0,
              steps_timed: int | None = None, seconds_timed: float | None = None) -> str:
    """A run's pace before its first evaluation, as a log's one line: a script's :train said nothing for the 18 to 30
    s before its first evaluation's line, where a terminal's bar counts and gives an eta.

    `seconds` is this call's time; `steps_timed` the steps of it that ran at the run's pace (default `step`): a
    continued run's earlier steps are not in `seconds`, and the step that compiled the model (compile=on) is left out
    with its `compile_seconds`, as tokens/s leaves it out ("step 1 of 40 after 19.6 s: about 0:12:45 to go", of a run
    that ended 10 s later). `seconds_timed`: the seconds those steps took, where known (default `seconds` less
    `compile_seconds`)."""
    timed = step if steps_timed is None else steps_timed
    spent = seconds - compile_seconds if seconds_timed is None else seconds_timed
    left = round(max(spent, 0.0) / max(timed, 1) * (run_steps - step))
    compiling = f" ({compile_seconds:.1f} s of it compiling)" if compile_seconds else ""
    return (f"step {step:,} of {run_steps:,} after {seconds:.1f} s{compiling}: about {timedelta(seconds=left)} to go "
            "at this pace (a line at each evaluation)")


class LossTable:
    """The evaluations of a training run, one row each; rows can be added while it is on screen.

    On a narrow terminal (or one where the bordered table would cut its headers) it drops the lr
    and tokens/s columns (the summary line has the speed) and its borders, so the losses stay
    readable instead of being cut to "0.…"; where the rest still do not fit (bits/char and a
    mixture of experts' aux loss besides the losses), it drops NARROW_DROPS in turn. Laid out at
    each drawing, for the width it is drawn in.
    """

    def __init__(self, rows: list[dict] = (), with_accuracy: bool | None = None, narrow: bool = False,
                 vocab_size: int | None = None, eval_batches: int | None = None, dtype: str | None = None):
        self.vocab_size = vocab_size  # known: a first line gives ln(V), the loss of a uniform guess
        self.dtype = dtype  # the dtype the run's steps ran in: bfloat16's legend says what each loss is computed in
        self.narrow = narrow
        self.rows: list[dict] = []
        self.val_losses: list[float] = []
        self.most_rows: int | None = None  # the live display's: the last rows only, where all would not fit
        self.shown_keys: list[str] = []  # the columns the table was last laid out with (table_for)
        self.shown_short = False  # ...and whether under their short headers
        if with_accuracy is None:
            with_accuracy = any(r.get("accuracy") is not None for r in rows)
        with_aux = any(r.get("aux_loss") is not None for r in rows)
        with_bpc = any(r.get("val_bpc") is not None for r in rows)
        with_eval_train = any(r.get("train_eval_loss") is not None for r in rows)  # dropout on
        self.columns = [c for c in LOSS_COLUMNS if (c[0] != "accuracy" or with_accuracy)
                        and (c[0] != "aux_loss" or with_aux) and (c[0] != "val_bpc" or with_bpc)
                        and (c[0] != "train_eval_loss" or with_eval_train)]
        # what each column's legend says; under torchrun the train loss is the global batch's, averaged across processes
        # each row's cells, formatted once as it comes (a long run's table is laid out at each evaluation: formatting
        # every row every time grew with the run), and each column's widest cell
        self._cells: dict[str, list[str]] = {key: [] for key, *_ in self.columns}
        self._widest: dict[str, int] = {key: 0 for key, *_ in self.columns}
        self.legend_words = dict(LOSS_LEGEND)
        if distributed.launched() and (ranks := distributed.world_size()) > 1:
            self.legend_words["train_loss"] = (f"the global batch of the {ranks} processes together, before the "
                                               "step's update")
        if with_eval_train:  # on top of the words above: under torchrun the global batch's, with dropout on
            self.legend_words["train_loss"] = f"{self.legend_words['train_loss']}, {DROPOUT_TRAIN_WORDS}"
        # known: the legend gives the number of validation batches, not the setting's name
        self.eval_batches: int | None = None
        self.set_eval_batches(eval_batches)
        for r in rows:
            self.add(r)

    def set_eval_batches(self, eval_batches: int | None) -> None:
        """The validation batches an evaluation reads, said in the legend: "eval_batches held-out batches" named a
        setting where the number was known (None: the setting's name stays)."""
        self.eval_batches = eval_batches
        if eval_batches is not None:
            plural = "" if eval_batches == 1 else "es"
            self.legend_words["val_loss"] = f"{eval_batches:,} held-out batch{plural}, after it"
            self.legend_words["train_eval_loss"] = LOSS_LEGEND["train_eval_loss"].replace(
                "eval_batches training batches", f"{eval_batches:,} training batch{plural}")

    def add(self, row: dict) -> None:
        self.rows.append(row)
        for key, _, _, show, _ in self.columns:
            cell = show(row.get(key))
            self._cells[key].append(cell)
            self._widest[key] = max(self._widest[key], len(cell))
        if row.get("val_loss") is not None:
            self.val_losses.append(row["val_loss"])

    @property
    def table(self) -> Table:
        return self.table_for(None)

    def table_for(self, width: int | None) -> Table:
        """The table of the rows so far, on a narrow terminal with only the columns that fit `width` (None: all)."""
        cells, widest = self._cells, self._widest

        def needed(columns, boxed: bool) -> int:  # each column as wide as its header or widest cell, and the gaps
            if boxed:  # a border and a cell of padding each side of each column
                return sum(max(len(header), widest[key]) + 3 for key, header, *_ in columns) + 1
            return sum(max(len(short), widest[key]) + 2 for key, _, short, _, _ in columns) - 2

        # narrow: the caller's word (a terminal below NARROW), or a boxed table with cut headers ("bits/ch…")
        narrow = self.narrow or (width is not None and needed(self.columns, True) > width)
        columns = [c for c in self.columns if c[4] or not narrow]
        for key in NARROW_DROPS if narrow and width is not None else ():
            if needed(columns, False) <= width:
                break
            columns = [c for c in columns if c[0] != key]
        self.shown_keys = [key for key, *_ in columns]
        self.shown_short = narrow  # the headers are the short ones ("bpc"), which the legend then names
        table = Table(header_style="bold", box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
        for _, header, short, _, _ in columns:
            table.add_column(short if narrow else header, justify="right")
        for k in range(len(self.rows) - self.shown_rows, len(self.rows)):
            add_row(table, *(cells[key][k] for key, *_ in columns))
        return table

    @property
    def shown_rows(self) -> int:
        return len(self.rows) if self.most_rows is None else min(len(self.rows), max(1, self.most_rows))

    @property
    def version(self) -> tuple:
        """What the table's drawing depends on besides the width it is drawn at, which changes whenever the drawing
        would (a row added, the rows that fit, the legend's batches, dtype or ln(V), the narrow form): the live display
        lays the table out again only when it changes (Laid), not at each of its redraws."""
        return (len(self.rows), self.most_rows, self.narrow, self.vocab_size, self.dtype, self.eval_batches)

    @property
    def overfitting(self) -> bool:
        """The validation loss rose at each of the last OVERFIT_RISES evaluations."""
        last = self.val_losses[-(OVERFIT_RISES + 1):]
        return (len(last) == OVERFIT_RISES + 1 and all(b > a for a, b in zip(last, last[1:]))
                and not self.train_rising)

    @property
    def train_rising(self) -> bool:
        """The training loss rose over the last OVERFIT_RISES evaluations too: the validation loss's rise is then no
        overfitting (which learns the training text better as it does worse on new text) but training going wrong."""
        rows = [r for r in self.rows if r.get("val_loss") is not None][-(OVERFIT_RISES + 1):]
        # with dropout on, the eval-mode train loss: the one-batch loss with units dropped is noisier and not alike,
        # so the window reads one kind or the other, never both (a row whose scoring a stop cut has none)
        evaluated = [r.get("train_eval_loss") for r in rows]
        train = evaluated if None not in evaluated else [r.get("train_loss") for r in rows]
        return len(train) == OVERFIT_RISES + 1 and None not in train and train[-1] > train[0]

    @property
    def worsening(self) -> bool:
        """Both losses rose, the validation loss at each of the last OVERFIT_RISES evaluations."""
        last = self.val_losses[-(OVERFIT_RISES + 1):]
        return (len(last) == OVERFIT_RISES + 1 and all(b > a for a, b in zip(last, last[1:]))
                and self.train_rising)

    def __rich_console__(self, console: Console, options):
        width = options.max_width
        parts = []
        baseline = uniform_loss(self.vocab_size)
        if baseline is not None:
            parts.append(Words(Text(f"ln(V) = ln({self.vocab_size}) = {baseline:.2f}: "
                                    "the loss of a uniform guess (a model that knows nothing)", style="dim")))
        if self.shown_rows < len(self.rows):
            parts.append(Words(Text(f"{len(self.rows) - self.shown_rows} earlier evaluations above (the table after "
                                    "the run has them all)", style="dim")))
        parts.append(self.table_for(width))
        # in the long names whatever the layout: "train" over a narrow column reads as "train loss" below it; for the
        # columns shown: at 20 columns the train loss gives way, and a legend for it read as a column missing
        # narrow, the short header too: "bpc" went unexplained under a legend of "bits/char"
        words = dict(self.legend_words)
        if self.dtype == "bfloat16":
            words.update({key: f"{words[key]}, {dtype}" for key, dtype in IN_DTYPE.items() if key in words})
        legend = "; ".join(f"{header}" + (f" ({short})" if self.shown_short and short != header
                                          and not header.startswith(short) else "")
                           + f": {words[key]}" for key, header, short, *_ in self.columns
                           if key in words and key in self.shown_keys)
        if legend:
            parts.append(Words(Text(legend, style="dim")))
        if self.overfitting:
            parts.append(Words(Text(f"overfitting? the validation loss rose {OVERFIT_RISES} evaluations in a "
                                    "row while training continued (more data, dropout, or stop earlier)",
                                    style="yellow")))
        elif self.worsening:
            parts.append(Words(Text(f"the validation loss rose {OVERFIT_RISES} evaluations in a row, and the "
                                    "training loss with it: not overfitting (which goes on learning the training "
                                    "text) but training going wrong, as a rate too high for the model does (lr)",
                                    style="yellow")))
        yield Group(*parts)


def loss_cell(evaluation, bpc: bool = False, bits_only: bool = False, spreads: bool = True) -> str:
    """A contender's val loss at one evaluation, with its spread over seeds when there are several (and `spreads`),
    and (bpc) its bits per character beside it; `bits_only`: the bits per character alone."""
    if evaluation is None:
        return ""
    if bits_only:
        return f"{evaluation.bpc:.3f}" + (f" ±{evaluation.bpc_spread:.3f}"
                                          if evaluation.bpc_spread is not None and spreads else "")
    cell = f"{evaluation.val_loss:.4f}" + (f" ±{evaluation.spread:.3f}"
                                           if evaluation.spread is not None and spreads else "")
    if bpc and evaluation.bpc is not None:
        cell += f" | {evaluation.bpc:.3f}" + (f" ±{evaluation.bpc_spread:.3f}" if evaluation.bpc_spread is not None
                                              else "")
    return cell


class CompareTable:
    """One row per evaluation step, one column per contender; rows fill in as evaluations arrive.

    `by_bpc`: the contenders read the text with different tokenizers, so each cell gives the bits per
    character beside the loss per token, and the best of a row is the one with the fewest bits."""

    def __init__(self, labels: list[str], seeds: int, by_bpc: bool = False):
        self.labels = list(labels)
        self.seeds = seeds
        self.by_bpc = by_bpc
        self.rows: dict[int, dict[str, object]] = {}
        self.stopped: dict[str, int] = {}  # a contender that diverged: the step of its last evaluation
        self.version = 0  # changed at each change (add, stop): the live display lays the table out again (Laid)

    def add(self, evaluation) -> None:
        self.rows.setdefault(evaluation.step, {})[evaluation.label] = evaluation
        self.version += 1

    def stop(self, label: str) -> None:
        """`label` diverged: the rows after its last evaluation say so once, and find their best among the rest."""
        self.stopped[label] = max((step for step, row in self.rows.items() if label in row), default=0)
        self.version += 1

    def __rich_console__(self, console: Console, options):
        table = self.table(with_labels=True)
        if not fits(console, table, options.max_width):  # the marks alone; the legends name them
            table = self.table(with_labels=False)
        if self.by_bpc and not fits(console, table, options.max_width):
            # the bits alone, which the contenders are judged by: a loss | bits cell with spreads over seeds folded
            # onto two lines at 60 columns, each spread under the other number
            table = self.table(with_labels=False, bits_only=True)
        if not fits(console, table, options.max_width):
            # the means alone: six contenders' "4.4837 ±0.011" were cut to "4.48… ±0.0…" at 60 columns; without the
            # edges' padding, one seed's two losses stay whole at 24 columns (they were "2.20…")
            table = self.table(with_labels=False, bits_only=self.by_bpc, spreads=False)
        if not fits(console, table, options.max_width):  # 20 columns: no rule under the header, and no gaps for it
            table = self.table(with_labels=False, bits_only=self.by_bpc, spreads=False, bare=True)
        # the caption above the table at the terminal's width: as the table's title it wrapped at the table's, "val
        # loss per token | bits per character (the" on one line of a 100-column terminal and the rest on the next
        title, table.title = table.title, None
        yield Text(title.plain, style="italic")
        yield table

    def table(self, with_labels: bool = True, bits_only: bool = False, spreads: bool = True,
              bare: bool = False) -> Table:
        title = "val loss" + (" per token | bits per character (the tokenizers differ: compare the bits)"
                              if self.by_bpc else "")
        if bits_only:
            title = "val bits per character (the tokenizers differ: a loss per token does not compare)"
        if self.seeds > 1:
            title += (f" (mean ± std over {self.seeds} seeds)" if spreads else
                      f" (mean over {self.seeds} seeds; a wider terminal shows each spread)")
        # the means alone are the narrowest form: without the edges' padding, six contenders fit 60 columns
        table = Table(title=Text(title), title_justify="left", header_style="bold",
                      box=None if bare else box.SIMPLE_HEAD, pad_edge=spreads)
        table.add_column("step", justify="right")
        for k, label in enumerate(self.labels):
            glyph, style = mark(k)
            table.add_column(Text(f"{glyph} {label}" if with_labels else glyph, style=style), justify="right")
        for step in sorted(self.rows):
            row = self.rows[step]
            def score(e):  # as the cell shows it: losses that read alike are all the best, or none is
                value = e.bpc if self.by_bpc else e.val_loss
                return None if value is None else round(value, 3 if self.by_bpc else 4)

            running = [label for label in self.labels if self.stopped.get(label, step) >= step]
            finals = [score(row[label]) for label in running if label in row]
            best = min(finals) if finals and len(finals) == len(running) and None not in finals else None
            cells = []
            for label in self.labels:
                e = row.get(label)
                if e is None and label not in running:  # the first row after it stopped says why it is empty
                    stopped_here = step == min(s for s in self.rows if s > self.stopped[label])
                    cells.append(Text("diverged" if stopped_here else "", style="red"))
                    continue
                cells.append(Text(loss_cell(e, self.by_bpc, bits_only and e is not None and e.bpc is not None, spreads),
                                  style="bold" if e is not None and score(e) == best else ""))
            add_row(table, fmt.whole(step), *cells)
        return table


class RunCount(MofNCompleteColumn):
    """The training bar's count of the run's steps, "run 80/200" where the run goes on from steps the model took
    before it (the task's field `before`): beside it the loss table counts every step (140), and "80/200" read as
    that count gone wrong."""

    def render(self, task) -> Text:
        count = super().render(task)
        if not task.fields.get("before"):
            return count
        shown = count.plain.lstrip()  # the padding that keeps the bar still goes before the word: "run  80/200"
        return Text(" " * (len(count.plain) - len(shown)) + "run " + shown, style=count.style)


class Redrawn:
    """What a live display shows, drawn so that a terminal narrowed under it keeps no rows of the drawing before.

    Rich's Live moves up over as many rows as it last drew, and draws again. A terminal narrowed since (tmux, iTerm2,
    GNOME's, kitty: most reflow their lines) has wrapped each of those lines onto more rows, and the rows above the
    ones Live went back over stayed on screen: the wide loss table's top under the narrow one. So where the width
    shrank, this goes up over the rows the last drawing takes at the new width, erasing them, before drawing. (A
    terminal that cuts lines instead of reflowing them, as xterm does, loses that many lines of what was above.)
    """

    def __init__(self, renderable=None):
        self.renderable = renderable if renderable is not None else Group()
        # the width of the last drawing, and its lines: measured only where a narrower terminal needs their lengths
        # (each line's cells counted at every redraw cost as much as the rest of a still table's redraw)
        self._drawn: tuple[int, list] | None = None

    def forget(self) -> None:
        """The last drawing was erased (a Ctrl-Z's pause): a narrower terminal has none of its rows to go up over."""
        self._drawn = None

    def showing(self, renderable) -> "Redrawn":
        self.renderable = renderable
        return self

    def lines(self, console: Console, options) -> list:
        """The view's lines: where it begins with a still part (Laid, training_view), that part's kept lines as they
        are, and the rest laid out; laid out as a Group, the kept lines were split into lines again at each redraw."""
        parts = self.renderable.renderables if isinstance(self.renderable, Group) else []
        if parts and isinstance(parts[0], Laid):
            return parts[0].lines(console, options) + console.render_lines(Group(*parts[1:]), options, pad=False)
        return console.render_lines(self.renderable, options, pad=False)

    def __rich_console__(self, console: Console, options):
        from rich.control import Control
        from rich.segment import ControlType, Segment

        lines = self.lines(console, options)
        width = options.max_width
        for _ in range(3):
            # The terminal narrowed while these lines were laid out (a drawing takes tens of milliseconds on a loaded
            # machine): written at the old width they wrap, and the rows below would be counted at the old width, so
            # Live went back over only as many rows as it drew and the rest of the last drawing stayed above this
            # one. Laid out again for the width now. (A narrowing between this and the write is still missed.)
            now = min(width, console.width)
            if now >= width:
                break
            width, options = now, options.update_width(now)
            lines = self.lines(console, options)
        if self._drawn is not None and width < self._drawn[0]:
            lengths = [Segment.get_line_length(line) for line in self._drawn[1]]
            rows = sum(max(1, -(-length // width)) for length in lengths)  # each line's rows, reflowed
            extra = rows - len(self._drawn[1])  # Live goes up over as many rows as it drew: these are the others
            if extra > 0:
                yield Control(*((ControlType.CURSOR_UP, 1), (ControlType.ERASE_IN_LINE, 2)) * extra)
        self._drawn = (width, lines[: options.size.height])
        for k, line in enumerate(lines):
            if k:
                yield Segment.line()
            yield from line


class Laid:
    """A part of a live display that changes only now and then (the loss table and a watched frame above the bar),
    laid out once and its lines drawn as they are at each redraw, where only the bar under it moved.

    The display redraws several times a second, and each redraw laid the whole view out again: the table rebuilt with
    its legend, the frame too, 4 ms at 1 row to 26 ms at 30 (100 x 40), on the drawing thread, which holds the GIL
    while the steps run (a 15-row run's tokens/s read 13% lower in a terminal than through a pipe). The lines are
    kept for the options they were laid out with (the width and height: a terminal resized gets its own layout) and
    the `version` of what they show (LossTable.version), read before laying out, so that a change made meanwhile lays
    them out again at the next redraw. The run's table keeps one across views (training_view), each frame has its own.
    """

    def __init__(self, renderable, version=lambda: None):
        self.renderable = renderable
        self.version = version
        self._laid: tuple | None = None  # the options and version last laid out for, and the lines

    def lines(self, console: Console, options) -> list:
        version = self.version()
        # the display's redraws (console.print) give no_wrap None where console.options, which training_view fits the
        # view with, gives False: alike, so that the fit's layout is the redraws' too
        options = options.update(no_wrap=bool(options.no_wrap))
        laid = self._laid
        if laid is not None and laid[1] == version and laid[0] == options:  # ConsoleOptions compare field by field
            return laid[2]
        lines = console.render_lines(self.renderable, options, pad=False)
        self._laid = (options, version, lines)
        return lines

    def __rich_console__(self, console: Console, options):
        from rich.segment import Segment

        new_line = Segment.line()
        for line in self.lines(console, options):
            yield from line
            yield new_line


PAUSE_WAIT = 0.5  # seconds a Ctrl-Z's pause waits for a drawing under way to end: far longer than a drawing takes


def pause(display: Live) -> bool:
    """Stop a live display, erasing it (it is transient), as its stop() does; False where it was not stopped.

    Called in a signal handler, on the main thread: the display's drawing thread may hold the display's lock while it
    waits for one that the interrupted main thread holds (the bar's, the console's), which the handler would wait on
    for ever. So that lock, Rich's own (the drawing thread takes it for each drawing), is waited for a while only,
    and else the display is left as it is. Built by the module's `Live` (not a subclass of it), which tests replace."""
    lock = getattr(display, "_lock", None)
    # Rich's lock is re-entrant: where the interrupted main thread holds it (an update, a notice printed above the
    # display), it would be taken at once and the drawing the handler interrupted, already queued, would draw the
    # stale copy again after the erase; left as it is there, as where the drawing thread holds it
    owned = getattr(lock, "_is_owned", None)
    if lock is None or (owned is not None and owned()) or not lock.acquire(timeout=PAUSE_WAIT):
        return False
    try:
        display.stop()
    finally:
        lock.release()
    return True


def _foreground(console: Console) -> bool:
    """Whether minitf is the foreground job of the terminal `console` writes to (True where that cannot be asked)."""
    try:
        return in_the_foreground(console.file.fileno())
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return True


def same_output(one: Console, other: Console) -> bool:
    """Whether two consoles write to the same place: one console, or two files open on the same file or terminal
    (stderr and stdout both a terminal, or `> run.log 2>&1`)."""
    if one is other:
        return True
    try:
        a, b = os.fstat(one.file.fileno()), os.fstat(other.file.fileno())
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):  # no file, or no descriptor (a StringIO)
        return one.file is other.file
    if not a.st_ino or not b.st_ino:  # Windows gives every pipe and console 0 and 0: no identity to compare by
        return one.file is other.file
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class QuietReporter(Reporter):
    """For --json: nothing on stdout while the command runs; notices go to the error console."""

    def __init__(self, err: Console):
        super().__init__()
        self.err = err

    def notice(self, text: str) -> None:
        say(self.err, text)


class RichReporter(Reporter):
    """Shows a running command: a progress bar and a growing loss table, or streamed text.

    `live` defaults to whether the console is a terminal: a pipe or a file gets no animation (the
    final table is printed by the result's renderer). The front door turns Ctrl-C into
    `request_stop()`; the command asks `should_stop()` between steps and tokens.
    """

    def __init__(self, console: Console, live: bool | None = None, stream: bool = True, out: Console | None = None,
                 lines: bool = False):
        super().__init__()
        self.console = console  # progress, notices, the stop message
        self.out = out if out is not None else console  # generated text and the final result
        # A dumb terminal (TERM=dumb: Emacs' shell) cannot redraw, and Rich's transient Live shows nothing there, so a
        # :train showed no progress until its end. There, as where the one-shot shell's progress goes to a file
        # (`lines`: `minitf train > run.log 2>&1` said nothing until the run's end, however long the run) and on
        # piped input's terminal (a person waits there), a run prints a line per evaluation as it comes
        # (progress_line), :compare a line per contender's evaluation, and :checks, :lrfind and :context a line at
        # each quarter; no bar, which only redraws. Not where piped input's output is a file, which the final table
        # goes to as well: it says it all, once.
        # a terminal by the file, not by FORCE_COLOR (is_a_terminal): a log written with colour draws no bar in it
        dumb = live is None and is_a_terminal(console) and console.is_dumb_terminal
        self.live = (is_a_terminal(console) and not dumb) if live is None else live
        self.lines = (lines or dumb) and not self.live
        self.stream = stream
        self._announced = False
        self.training = False
        self.streamed = False
        self.gen_prompt: str | None = None
        self.gen_raw = False
        self._live: Live | None = None
        self._per_second = 4  # the live display's redraws a second (_start_live), which a Ctrl-Z's restart keeps
        self._paused = False  # a Ctrl-Z took the live display off the screen: _resume starts it again
        self._progress: Progress | None = None
        self._task = None
        self._table: LossTable | None = None
        self._table_laid: Laid | None = None  # the live display's layout of it (training_view)
        self._frame = None  # the latest frame of :train watch=, drawn under the loss table
        self._frames_printed = False  # a frame printed as it came (self.lines), the last one of them the result's last
        self._compare: CompareTable | None = None
        self._vocab_size: int | None = None  # of the run training now (on_train_vocab)
        self._words: WordStream | None = None  # streamed text, wrapped at spaces
        self._bar_form: str | None = None  # the bar's form shown (_fit_bar); None: no bar
        self._bar_columns = self._train_columns  # the columns of the bar shown, in a form (_bar_form_now)
        self._shown = Redrawn()  # what the live display shows
        # the console's size (columns, lines) the training view was last fitted for (training_view): a terminal
        # resized since is refitted between steps (_refit), not only at the next evaluation, minutes away
        self._fitted_size: tuple | None = None
        self._quarters: dict[str, int] = {}  # a dumb terminal: the quarters of each long work said (on_progress)
        self._progress_began: dict[str, float] = {}  # when each work's first on_progress came
        self._bar_label: str | None = None  # what on_progress's bar is labelled now
        self._steps_done = self._run_steps = 0  # the training bar's count and total (on_train_start, on_step)
        self._eval_batches: int | None = None  # the validation batches of the run's evaluations (on_evaluate)
        self._dtype: str | None = None  # the dtype the run's steps run in (on_train_dtype), for the table's legend
        self._held = contextlib.ExitStack()  # what the live display and the run hold until close(): signal handlers
        self._stops = None  # a core.interrupts.StopWatch from on_train_start on: the seconds minitf was stopped
        self._rows_at: list[tuple[float, int]] = []  # when each evaluated row came (time.monotonic()), and its step
        self._began, self._paced = time.monotonic(), False  # the run's start; whether a log has its pace yet
        self._first_step = 0  # the run's steps done before this call (on_train_start): not in this call's seconds
        # when this call's first step ended, and the compile's seconds and steps by then (on_step): a log's pace is
        # read from the steps after it, as the bar's eta is
        self._first_done: tuple[float, float, int] | None = None
        # the run's steps that compiled the model (compile=on) and their seconds, which a log's eta and pace leave out
        self._compile_seconds, self._compile_steps = 0.0, 0

    # Ctrl-C --------------------------------------------------------------------------------------
    def should_stop(self) -> bool:
        if self.stop_requested and self.training and not self._announced:
            self._announced = True
            say(self.console, "stopping after this step...", "yellow")
        return self.stop_requested

    # training ------------------------------------------------------------------------------------
    def on_train_start(self, run_steps: int, start_step: int, resumed: bool) -> None:
        self.training = True
        if self._stops is None:  # the run's speeds are measured on the wall clock, which a stop does not stop
            self._stops = self._held.enter_context(watching_stops())
        self._began, self._paced = time.monotonic(), False  # a log's pace line (on_step), once a run
        self._first_step = start_step if 0 <= start_step <= run_steps else 0
        self._compile_seconds, self._compile_steps = 0.0, 0
        self._first_done = None
        if not self.live:
            return
        self._bar_columns = self._train_columns
        done = start_step if 0 <= start_step <= run_steps else 0
        self._new_bar("train", total=run_steps, completed=done, loss="-", tps="-", before=0)
        # the run's steps the bar counts (on_step), which an evaluation's count goes on from
        self._steps_done, self._run_steps = done, run_steps
        self._eval_batches = None  # each run's own (on_evaluate): :set eval_batches may have changed it since
        self._dtype = None  # each run's own (on_train_dtype): :set dtype may have changed it since
        self._table = None
        self._vocab_size = None
        self._frame = None
        self._shown = Redrawn()
        # 4 redraws a second, as :compare's and the other bars' (it was 8): the bar's count, loss and tokens/s change
        # at each step, which at 8 a second passed faster than they can be read (a small model's 0.13 s steps), and
        # each redraw still writes the whole view for the terminal to parse, on the cores the steps run on
        self._start_live(4)
        self._refresh()

    def _start_live(self, per_second: int) -> None:
        """Start the live display of self._shown. Rich's hides the cursor until it stops: a Ctrl-Z meanwhile showed it
        again first (the shell's prompt had none until `fg`), and hides it on `fg` while the display runs on."""
        self._per_second = per_second
        self._open_live()
        self._held.enter_context(on_suspend(self._suspend, self._resume))

    def _open_live(self) -> None:
        self._live = Live(self._shown, console=self.console, transient=True, refresh_per_second=self._per_second)
        self._live.start()

    def _suspend(self) -> None:
        """Ctrl-Z (in the signal handler, before the stop): the display is taken off the screen, and _resume draws it
        anew below what the shell wrote meanwhile. Left on, it was drawn again on `fg` by going up as many rows as it
        had, from under the shell's "Stopped", "fg" and job lines: its top rows stayed above, a stale copy of the
        loss table's headings over the live one. Erased rather than kept as a picture of the stop: how many lines the
        shell writes before `fg` (other commands, their output) cannot be known, so a kept one could not be drawn
        over; the end's stops_line says the run was stopped. Where the display could not be stopped at once
        (pause), it stays as it was."""
        if self._live is not None and pause(self._live):
            self._live, self._paused = None, True
        self._cursor(True)  # the shell's prompt needs it (pause showed it; a display left on has it hidden)

    def _resume(self) -> None:
        """minitf goes on after a Ctrl-Z (`fg`, or `bg`): a display taken off is started anew where the cursor is now,
        under the shell's lines, with no rows of before to go up over; the cursor hidden again in the foreground.
        After `bg` it stays off while minitf runs in the background, where its redraws went over the shell's prompt
        and what one typed there (and drew over the shell's lines again at a later `fg`); the main thread's next
        step starts it once minitf is in the foreground again (_back_in_front)."""
        if self._paused and _foreground(self.console):
            self._paused = False
            self._shown.forget()  # its last drawing is gone from the screen: no rows of it to erase (Redrawn)
            self._open_live()  # drawn by its own thread: a drawing here could wait on a lock the interrupted code holds
            # not refitted here for a terminal resized while stopped: in a signal handler the view's layout could run
            # over a table or bar the interrupted step was changing; the next step or evaluation batch does (_refit)
        self._cursor(False)

    def _back_in_front(self) -> None:
        """A display a Ctrl-Z took off, then `bg` kept off, comes back once minitf is the foreground job (`fg`)."""
        if self._paused:
            self._resume()

    def _cursor(self, shown: bool) -> None:
        """Show or hide the terminal's cursor now, written past Rich's buffer (a signal handler may find it half
        full); hidden only where the display still runs and minitf is the terminal's foreground job (after `bg` it
        would hide the shell's)."""
        if not shown and (self._live is None or not _foreground(self.console)):
            return
        try:
            self.console.file.write("\x1b[?25h" if shown else "\x1b[?25l")
            self.console.file.flush()
        except (OSError, ValueError):  # a closed terminal
            pass

    def _new_bar(self, description: str, **task) -> None:
        """A bar of one task, its columns in the form for the width and the task's numbers (_fit_bar)."""
        self._progress = Progress(console=self.console, expand=True)
        self._task = self._progress.add_task(description, **task)
        self._bar_form = ""  # none yet: _fit_bar sets the columns
        self._fit_bar()

    def _train_columns(self, form: str) -> tuple:
        """The training bar's columns in `form` (_bar_form_now): narrow, the count and the loss, which matter most,
        with their labels where they fit ("━━╸━━ 49/150 2.5196" gave a loss with no name). The count is of this run's
        steps, said "run 80/200" where the model took steps before it (RunCount)."""
        if form == "bare":
            return BarColumn(bar_width=None), MofNCompleteColumn(), TextColumn("{task.fields[loss]}")
        if form == "labelled":
            return BarColumn(bar_width=None), RunCount(), TextColumn("loss {task.fields[loss]}")
        return (TextColumn("[bold]{task.description}"), BarColumn(bar_width=None), RunCount(),
                TextColumn("eta"), TimeRemainingColumn(), TextColumn("loss {task.fields[loss]}"),
                TextColumn("{task.fields[tps]} tok/s"))

    def _labelled_columns(self, label: str | None, form: str) -> tuple:
        """The bar of :compare, :checks, :context or :lrfind in `form`: narrow, the count and the time left (at 24
        columns the wide form cut the count to "35…"), that time called eta where it fits ("19/80 0:00:13" read as
        the time spent as well). `label` None: the task's description, which the work changes as it goes
        (:compare's "A val 3/20" during a contender's evaluation)."""
        if form == "bare":
            return BarColumn(bar_width=None), MofNCompleteColumn(), TimeRemainingColumn()
        if form == "labelled":
            return BarColumn(bar_width=None), MofNCompleteColumn(), TextColumn("eta"), TimeRemainingColumn()
        named = TextColumn("[bold]{task.description}") if label is None else TextColumn(f"[bold]{escape(label)}")
        return named, BarColumn(bar_width=None), MofNCompleteColumn(), TextColumn("eta"), TimeRemainingColumn()

    def _bar_form_now(self) -> str:
        """The bar's form for the width now: "wide" from NARROW columns on; below it "labelled" where the numbers
        with their labels, as the task has them now, leave the bar BAR_LEAST cells, else "bare", the numbers alone
        and whole."""
        width = self.console.width
        if width >= NARROW:
            return "wide"
        task = next(task for task in self._progress.tasks if task.id == self._task)
        texts = [column.render(task) for column in self._bar_columns("labelled") if not isinstance(column, BarColumn)]
        needed = sum(self.console.measure(text).maximum for text in texts) + len(texts)  # a cell between two columns
        return "labelled" if needed + BAR_LEAST <= width else "bare"

    def _fit_bar(self) -> None:
        """The bar in the form for the width now, asked at each step: a terminal narrowed during the run squeezed
        the wide form to "train ╸ … eta 0…", every number cut."""
        if self._progress is None or self._bar_form is None:
            return
        if (form := self._bar_form_now()) != self._bar_form:
            self._progress.columns = self._bar_columns(form)
            self._bar_form = form

    def on_train_vocab(self, vocab_size: int) -> None:
        self._vocab_size = vocab_size  # the table's ln(V) line, from its first row on (as the final table has it)
        if self._table is not None:
            self._table.vocab_size = vocab_size

    def on_train_dtype(self, dtype: str) -> None:
        """The run about to start trains in `dtype` (float32, bfloat16), for the loss table's legend; said after
        on_train_start, as on_train_vocab is."""
        self._dtype = dtype
        if self._table is not None:
            self._table.dtype = dtype

    def training_view(self) -> Group:
        """What the live display shows while training: the loss table, the watched view under it, the bar."""
        # read before the layout: a resize during it differs from this, so the next step lays out again (_refit)
        self._fitted_size = self.console.size
        self._fit_bar()
        if self._table is not None:  # the width now: a table begun on a narrowed terminal stayed narrow once widened
            self._table.narrow = self.console.width < NARROW
        table = self._table
        if table is not None and (self._table_laid is None or self._table_laid.renderable is not table):
            # one for the run's table, kept across views: the frame that comes after an evaluation's row (watch=)
            # makes a new view, and laid out again there the table took as long as at the row
            self._table_laid = Laid(table, lambda: table.version)
        parts = [self._table_laid] if table is not None else []
        frame = None
        if self._frame is not None:  # room left for the table's headings, a few rows and the bar
            # laid out once here (Laid), for the fit below, the display's redraws and the fallbacks alike
            frame = Laid(watch_view(self._frame, self.console.width, unscaled(self.console),
                                    height=self.console.height - FRAME_LEAVES, screen=self.console.height))
            parts.append(frame)
        bar = [self._progress] if self._progress is not None else []
        # what stays still between evaluations, laid out once for the display's redraws, which draw the bar anew
        still = Laid(Group(*parts), (lambda: table.version) if table is not None else (lambda: None))
        view = Group(still, *bar)
        if self._table is not None:  # the live display cuts what is below the screen: the frame, then the bar
            room = self.console.height - 1  # and the cursor
            self._fit_rows(view, room)
            if self._progress is not None and len(self.console.render_lines(view, pad=False)) > room:
                # the table and the frame do not fit together (watch=heads or embed on 80x24 showed the bar alone,
                # the whole run): the frame, which says its step and val loss, with the bar; too low for even that
                # or for one row with its headings (a pane of 8 lines): the bar alone, which the cut hid
                alone = Group(frame, self._progress) if frame is not None else None
                fits = alone is not None and len(self.console.render_lines(alone, pad=False)) <= room
                view = alone if fits else Group(self._progress)
                told = Group(Laid(Group(frame, Words(Text(TABLE_HIDDEN, style="dim")))), self._progress)
                if fits and len(self.console.render_lines(told, pad=False)) <= room:  # the table unseen, said so
                    view = told
        return view

    def _fit_rows(self, view, room: int) -> None:
        """The loss table's rows that let `view` fit `room` lines: its oldest give way.

        The lines are counted on the console's options, which the display's redraws are laid out with too (Laid), so
        that the layout that fits is the one they draw and the check after this reuses it. It begins from the rows
        of the last fit, which a new row leaves as they were where the screen did not change: a table longer than the
        screen was laid out 2 or 3 times at each evaluation, first with as many rows as the screen has lines. No more
        rows than that are laid out to begin with: all of a long run's (1,000 evaluations) took a third of a second
        at each evaluation, more than the steps between them."""
        table = self._table
        table.most_rows = room if table.most_rows is None else min(room, table.most_rows)
        fitted = None  # rows known to fit, where more were tried
        for _ in range(3):
            over = len(self.console.render_lines(view, pad=False)) - room
            hidden = len(table.rows) - table.shown_rows
            if over > 0 and fitted is not None:  # the rows added took more lines than there were: back to the fit
                table.most_rows = fitted
                break
            if over > 0:  # the oldest rows give way; then as many more as the line saying so takes
                table.most_rows = table.shown_rows - over
            elif over < 0 and hidden and fitted is None:  # lines to spare (a taller screen, a shorter frame): more
                fitted, table.most_rows = table.shown_rows, table.shown_rows + min(-over, hidden)
            else:
                break

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._shown.showing(self.training_view()))

    def on_watch(self, frame) -> None:
        self._frame = frame
        if self.lines:  # no live display to draw it under: printed as it comes, under its evaluation's line (a dumb
            # terminal showed no frame until the run's end, and a log of `minitf train --watch` none but the last)
            self.console.print(watch_view(frame, self.console.width, unscaled(self.console)))
            self._frames_printed = True
        self._refresh()

    def _refit(self) -> None:
        """The training view laid out again where the terminal was resized since it was fitted (training_view): the
        table's narrow form, its rows that fit, a watched frame's width and the bar's form followed the terminal only at
        an evaluation, so a widened one kept the narrow table and a shortened one cut the bar off ("..."), for minutes.
        Called on the training thread, between steps and evaluation batches: reading the size is a cheap ioctl, and
        once refitted the sizes match again, so the kept layouts (Laid) serve the redraws after it."""
        if self.training and self._live is not None and self.console.size != self._fitted_size:
            self._refresh()

    def on_evaluate(self, done: int, total: int) -> None:
        """The bar's label says the evaluation's progress: the step's bar stood still for a minute on a big model.
        Where no bar is drawn (a dumb terminal, a log), a long evaluation's quarters are said as lines, as other long
        work's are: a log of a big model's run was silent for that minute after a step's line."""
        if self.lines and total > 0:
            if done == 1:  # each evaluation is a work of its own: its time and quarters counted from its first batch
                self._progress_began[EVALUATION], self._quarters[EVALUATION] = time.monotonic(), 0
            self._say_quarter(EVALUATION, done, total)
        if self._table is not None:
            self._table.set_eval_batches(total)
        self._eval_batches = total
        if self._progress is not None and self.training:
            # an evaluation follows a step whose update is done: the count says that step (it said the one before,
            # "val 373/3000 ━━━ 4/5" while evaluating after step 5), until on_step gives the step's own numbers
            self._progress.update(self._task, completed=min(self._steps_done + 1, self._run_steps),
                                  description=f"val {done}/{total}" if done < total else "train")
            self._refit()  # a long evaluation (a minute on a big model) has no steps to refit at

    def on_step(self, info) -> None:
        if info.val_loss is not None:  # the row a stop before it is said of (stops_line)
            self._rows_at.append((time.monotonic(), info.step))
        if compiled := getattr(info, "compile_seconds", None):  # the step that compiled: no pace to read from it
            self._compile_seconds += compiled
            self._compile_steps += 1
        if self._first_done is None:  # this call's first step, which sets the run up (1.05 s where later ones took
            # 0.13): a pace read with it said "about 0:00:20 to go" with 16 s left
            self._first_done = (time.monotonic(), self._compile_seconds, self._compile_steps)
        if self.lines and info.val_loss is not None:
            say(self.console, progress_line(info, self._compile_seconds, self._compile_steps))
            self._paced = True  # an evaluation's line gives the pace from here on
        elif self.lines and not self._paced and 0 < info.run_step < info.run_steps:
            # FIRST_SIGN seconds of steps at the run's pace: not the compiling step alone, which said "0:12:45 to
            # go" of a run 10 s from its end (a log said "compiling the model" before it: core.precision)
            now = time.monotonic()
            seconds = now - self._began
            timed = info.run_step - self._first_step - self._compile_steps
            if timed > 0 and seconds - self._compile_seconds >= FIRST_SIGN:
                # the steps after the first where there are some, less any that compiled; else this call's steps
                at, compiled, compiling = self._first_done
                after = info.run_step - self._first_step - 1 - (self._compile_steps - compiling)
                spent = now - at - (self._compile_seconds - compiled) if after > 0 else None
                say(self.console, pace_line(info.run_step, info.run_steps, seconds, self._compile_seconds,
                                            after if after > 0 else timed, spent))
                self._paced = True
        if self._progress is None:
            return
        self._back_in_front()
        self._steps_done, self._run_steps = info.run_step, info.run_steps
        # the steps before this run, which make the bar's count "run 80/200" (a caller may give the run's alone)
        before = getattr(info, "step", info.run_step) - info.run_step
        # The bar's eta needs no compile_seconds: Rich reads its speed from the time between the updates it keeps,
        # the first of them this call's first step, so a compiling first step's seconds are never in it (the REPL's
        # bar said "eta -:--:--" through the compile, then the steady pace from the second step on)
        self._progress.update(
            self._task, completed=info.run_step, total=info.run_steps, description="train",
            loss=f"{info.train_loss:.4f}", tps=f"{info.tokens_per_second:,.0f}", before=before,
        )
        self._fit_bar()  # for the numbers now: a continued run's "run " is wider
        if info.val_loss is not None:
            row = {
                "step": info.step, "train_loss": info.train_loss, "val_loss": info.val_loss, "val_bpc": info.val_bpc,
                "train_eval_loss": getattr(info, "train_eval_loss", None),
                "accuracy": info.accuracy, "lr": info.lr, "tokens_per_second": info.tokens_per_second,
                "elapsed": info.elapsed, "aux_loss": info.aux_loss,
            }
            if self._table is None:
                self._table = LossTable([row], narrow=self.console.width < NARROW, vocab_size=self._vocab_size,
                                        eval_batches=self._eval_batches, dtype=self._dtype)
            else:
                self._table.add(row)
            self._refresh()
        else:
            self._refit()

    # comparison ----------------------------------------------------------------------------------
    def on_compare_start(self, labels: list[str], steps: int, seeds: int, by_bpc: bool = False) -> None:
        self._compare = CompareTable(labels, seeds, by_bpc)
        if not self.live:
            return
        # The bar counts every training step of every contender and seed (on_compare_step), so it
        # moves, and Rich can estimate the time left, between evaluations too: moved only at
        # evaluations it showed no ETA (fewer than two samples in Rich's speed window).
        self._bar_columns = lambda form: self._labelled_columns(None, form)  # "compare", or the evaluation under way
        self._new_bar("compare", total=len(labels) * seeds * steps, completed=0)
        self._shown = Redrawn(self._compare_view())
        self._start_live(4)

    def _compare_view(self) -> Group:
        """The comparison's table, laid out once a change (Laid: it tried up to 5 forms of it to fit, at each of the
        4 redraws a second), over its bar."""
        compare = self._compare
        return Group(Laid(compare, lambda: compare.version), self._progress)

    def on_compare_step(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._back_in_front()
            self._fit_bar()
            self._progress.update(self._task, completed=done, total=total)

    def on_compare_evaluate(self, label: str, done: int, total: int, what: str = "val") -> None:
        """The bar's label says the evaluation's progress: the steps' count stood still through it."""
        if self._progress is not None:
            self._progress.update(self._task, description=escape(f"{label} {what} {done}/{total}") if done < total
                                  else "compare")

    def on_compare_eval(self, evaluation) -> None:
        self._compare.add(evaluation)
        if self.lines:  # with seeds, the mean over them and its spread, as the table has them; a task's accuracy
            e = evaluation
            loss = fmt.num(e.val_loss) + (f" ±{e.spread:.3f}" if e.spread is not None else "")
            bpc = f", bits/char {e.bpc:.3f}" + (f" ±{e.bpc_spread:.3f}" if e.bpc_spread is not None else "") \
                if e.bpc is not None else ""
            accuracy = f", accuracy {fmt.pct(e.accuracy)}" if e.accuracy is not None else ""
            say(self.console, f"{e.label} step {e.step:,}: val loss {loss}{bpc}{accuracy}")
        if self._live is not None:
            self._live.update(self._shown.showing(self._compare_view()))

    def on_compare_diverged(self, label: str) -> None:
        self._compare.stop(label)
        if self.lines:
            going = [other for other in self._compare.labels if other not in self._compare.stopped]
            say(self.console, f"{label} diverged: it stops here" + (", the others go on" if going else ""))
        if self._live is not None:
            self._live.update(self._shown.showing(self._compare_view()))

    # other long work -----------------------------------------------------------------------------
    def _say_quarter(self, what: str, done: int, total: int) -> None:
        """A line "what: done/total" at each quarter of the way, once the work has gone on for a while: a check done
        in a blink said "causal check: 12/12" in a script's log, where a bar on a terminal would have flashed and
        gone."""
        began = self._progress_began.setdefault(what, time.monotonic())
        quarter = 4 * done // total
        if quarter > self._quarters.get(what, 0) and time.monotonic() - began >= PROGRESS_LINES_AFTER:
            self._quarters[what] = quarter
            say(self.console, f"{what}: {done:,}/{total:,}")

    def on_progress(self, what: str, done: int, total: int) -> None:
        if self.lines and total > 0:  # a dumb terminal: a line at each quarter of the way (no bar to redraw there)
            self._say_quarter(what, done, total)
        if not self.live:
            return
        if self._progress is None:  # the first call draws the bar, labelled `what`; close() takes it away
            self._bar_columns = lambda form: self._labelled_columns(what, form)
            self._new_bar(what, total=total, completed=0)
            self._bar_label = what
            self._shown = Redrawn(self._progress)
            self._start_live(4)
        elif self._bar_label not in (None, what):  # another part of the work (:checks: causal, then training)
            self._bar_label = what
            self._bar_columns = lambda form: self._labelled_columns(what, form)
            self._progress.columns = self._bar_columns(self._bar_form)
            self._progress.reset(self._task, total=total, completed=0, description=what)
        self._back_in_front()
        self._fit_bar()
        self._progress.update(self._task, completed=done, total=total)

    # generation ----------------------------------------------------------------------------------
    def on_gen_start(self, prompt: str, raw: bool = False) -> None:
        self.gen_prompt = prompt  # shown in bold before the first token
        self.gen_raw = raw
        if raw and on_a_terminal(self.out):
            self.notice("raw=on writes control characters as they are only to a file or a pipe; "
                        "in a terminal they stay escaped")

    def on_token(self, text: str) -> None:
        if not self.stream:
            return
        prompt = self.gen_prompt if not self.streamed else None
        self.streamed = True
        if writes_raw(self.out, self.gen_raw):
            write_raw(self.out, (prompt or "") + text)
            return
        if self._words is None:
            self._words = WordStream(self.out)
        if prompt:
            # the vocabulary's control characters escaped, and what the output cannot encode (text_for_output)
            self._words.write(text_for_output(terminal_safe(prompt)), "bold")
        self._words.write(text_for_output(terminal_safe(text)))

    def notice(self, text: str) -> None:
        say(self.console, text, "yellow")

    # end -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the live display and write out a held-back word (also after an error); safe to call twice."""
        if self._live is not None:
            # Live's stop draws its view once more, whole, and erases only the rows still on the screen. :train's view
            # is laid out for the terminal's size when it was made (the frame's positions, the rows that fit): a
            # terminal narrowed since the last evaluation wrapped it taller than the screen, and the top of it scrolled
            # out of reach of the erase, left above the result. So it is laid out for the size now first.
            if self.training and self._progress is not None:
                self._refresh()
            self._live.stop()
            self._live = None
        self._held.close()  # Ctrl-Z and SIGCONT as they were; the stop watch's thread ends
        if self._words is not None:
            self._words.flush()

    def finish(self, result) -> None:
        """Render the result, taking into account what was already shown while it ran (streamed text); then, where
        minitf was stopped during a run, for how long (stops_line)."""
        self._show(result)
        if (line := self.stops_line()) is not None:
            say(self.console, line, "yellow")

    def stops_line(self) -> str | None:
        """What a run's speeds and times count that was no training: minitf stopped (Ctrl-Z, kill -STOP) for a while
        during it. Measured on the wall clock (core.train), they counted the stop as steps: a row of 6,384 tokens/s
        among rows of 15,000, and a summary of 30 s for 15 s of training, unexplained. None where it was not stopped
        (for a second at least: a stop shorter reads as noise)."""
        stops = self._stops.stops if self._stops is not None else []
        seconds = sum(late for _, late in stops)
        if seconds < 1:
            return None
        rows = sorted({next((step for at, step in self._rows_at if at > when), None) for when, _ in stops} - {None})
        where = (f", before the row of step {rows[0]:,}" if len(rows) == 1 else
                 f", before the rows of steps {', '.join(f'{step:,}' for step in rows)}" if rows else "")
        return (f"minitf was stopped for {seconds:.1f} s during this run (Ctrl-Z or kill -STOP){where}: the times "
                "and speeds measured across the stop count it (a row's elapsed and tokens/s, and the summary's)")

    def _show(self, result) -> None:
        self.close()
        if self.streamed:
            self.out.print()
            after_stream(result, self.console)
            return
        if self._frames_printed and same_output(self.console, self.out):
            # the last frame stands under its evaluation's line just above the table: a dumb terminal (and a log of
            # `minitf train --watch > run.log 2>&1`) showed it twice in a row
            after_lines(result, self.out)
            return
        if not same_output(self.console, self.out) and text_apart(result, self.out):
            after_stream(result, self.console)  # the notes where a streamed text's go (`gen --show probs > out.txt`
            return  # wrote its timing and drawn seed into the file)
        render(result, self.out)
