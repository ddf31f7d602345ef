"""The live display at many terminal sizes: a narrowing mid-drawing, the bars' labels, a hidden table, `clear`."""

from __future__ import annotations

import functools
import io
import re

from rich import live as rich_live
from rich.cells import cell_len
from rich.console import Console, Group

from minitf_repl import dispatch, repl
from minitf_repl.core.train import StepInfo
from minitf_repl.core.watch import WatchFrame
from minitf_repl.render import live

from test_commands import tiny_session

CODES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def step(n: int, run_step: int | None = None, run_steps: int = 150, val: bool = True) -> StepInfo:
    return StepInfo(n, n if run_step is None else run_step, run_steps, 2.5196, 1e-3, 1.0, 12_345.0, n / 10,
                    val_loss=2.4 - n / 1000 if val else None, val_bpc=3.5 if val else None)


def bar_text(reporter, width: int) -> str:
    shown = Console(file=io.StringIO(), width=width, color_system=None)
    shown.print(reporter._progress.make_tasks_table(reporter._progress.tasks))
    return shown.file.getvalue()


# --- 1. a terminal narrowed while the live display lays out a drawing -------------------------------------------------
class Narrowing:
    """A part of a drawing during whose layout the terminal narrows: tmux resize-window while Live's thread draws (a
    drawing takes tens of milliseconds on a loaded machine)."""

    def __init__(self, width: int):
        self.width: int | None = width

    def __rich_console__(self, console, options):
        if self.width is not None:
            console.width, self.width = self.width, None
        yield from ()


def test_a_terminal_narrowed_while_a_drawing_is_laid_out_has_every_row_of_the_last_drawing_erased(monkeypatch):
    monkeypatch.setattr(live, "Live", functools.partial(rich_live.Live, auto_refresh=False))  # draws when told to
    console = Console(file=io.StringIO(), force_terminal=True, width=80, height=40, color_system="standard")
    reporter = live.RichReporter(console)
    reporter.on_train_start(150, 0, False)
    try:
        for n in range(10, 60, 10):
            reporter.on_step(step(n))
        start = len(console.file.getvalue())
        reporter._live.refresh()
        wide = CODES.sub("", console.file.getvalue()[start:]).split("\n")
        assert max(map(cell_len, wide)) > 60  # the bordered table, at 80 columns
        # the next drawing begins at 80 columns, and the terminal is 60 wide before it is written: the wide drawing's
        # lines now take ceil(length / 60) rows each
        reporter._live.update(reporter._shown.showing(Group(Narrowing(60), reporter.training_view())))
        start = len(console.file.getvalue())
        reporter._live.refresh()
        redraw = console.file.getvalue()[start:]
        rows = sum(max(1, -(-cell_len(line) // 60)) for line in wide)
        before = redraw[: redraw.index("step")]  # the erasing, before the drawing's first word
        # every row of the wide drawing erased, from its last up to its first (it went up len(wide) - 1: the rows of
        # the wide table's top stayed above the narrow one)
        assert before.count("\x1b[1A") == rows - 1 and before.count("\x1b[2K") == rows, (before, rows)
        drawn = CODES.sub("", redraw).split("\n")
        assert max(map(cell_len, drawn)) <= 60 and "┃" not in redraw  # laid out for the 60 columns it is drawn in
    finally:
        reporter.close()


# --- 2. the bars' numbers say what they are ---------------------------------------------------------------------------
def test_the_narrow_training_bar_names_its_loss():
    console = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None)
    reporter = live.RichReporter(console)
    reporter.on_train_start(150, 0, False)
    try:
        reporter.on_step(step(49, val=False))
        bar = bar_text(reporter, 60)
        assert "49/150 loss 2.5196" in bar and "…" not in bar, bar  # was "━━━╸━━━ 49/150 2.5196"
        console.width = 24  # too narrow for the labels: the numbers alone, whole
        reporter.on_step(step(50, val=False))
        bar = bar_text(reporter, 24)
        assert "50/150" in bar and "2.5196" in bar and "…" not in bar, bar
    finally:
        reporter._live.stop()


def test_a_continued_runs_bar_says_it_counts_the_run():
    for width in (100, 60):
        console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
        reporter = live.RichReporter(console)
        reporter.on_train_start(200, 0, False)
        try:
            reporter.on_step(step(140, run_step=80, run_steps=200))  # the table's row: step 140
            bar = bar_text(reporter, width)
            assert "run 80/200" in bar and "…" not in bar, bar  # was "80/200" beside a table at step 140
        finally:
            reporter._live.stop()
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    reporter = live.RichReporter(console)
    reporter.on_train_start(200, 0, False)
    try:
        reporter.on_step(step(80, run_steps=200))  # a first run: its count is the table's step
        assert "run " not in bar_text(reporter, 100)
    finally:
        reporter._live.stop()


def test_the_narrow_compare_bar_calls_its_time_the_time_left():
    console = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None)
    reporter = live.RichReporter(console)
    reporter.on_compare_start(["n_layers=1", "n_layers=2"], 40, 1)
    try:
        reporter.on_compare_step(19, 80)
        bar = bar_text(reporter, 60)
        assert re.search(r"19/80 eta [-0-9]:[-0-9]{2}:[-0-9]{2}", bar), bar  # was "19/80 0:00:13": spent, or left?
    finally:
        reporter._live.stop()


# --- 3. a watched view that leaves the loss table no room says so -----------------------------------------------------
def test_a_watched_view_that_hides_the_loss_table_says_so():
    console = Console(file=io.StringIO(), width=80, height=30, force_terminal=True, color_system=None)
    reporter = live.RichReporter(console, live=True)
    reporter.on_train_start(150, 0, False)
    reporter.on_train_vocab(103)  # the table's ln(V) line: with it, not one row fits beside the view
    try:
        T = 16
        maps = [[[1.0 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)] for _ in range(4)]
        frame = WatchFrame(step=0, val_loss=None, view="attn", prompt="The example abov",
                           tokens=list("The example abov"), layer=3, maps=maps)
        for n in (10, 20, 30):
            reporter.on_step(step(n))
            reporter.on_watch(frame)
        lines = console.render_lines(reporter.training_view(), pad=False)
        shown = " ".join("".join(segment.text for segment in line) for line in lines)
        assert "val loss" not in shown.split("head 0")[0]  # the table gave way to the view and the bar
        assert len(lines) <= 29 and "30/150" in shown
        assert live.TABLE_HIDDEN in " ".join(shown.split()), shown  # nothing said the table was there
    finally:
        reporter._live.stop()


# --- 4. a shell's `clear` typed at the prompt -------------------------------------------------------------------------
def test_clear_typed_alone_is_told_of_ctrl_l_after_its_text():
    for typed in ("clear", "cls"):
        out, err = (Console(file=io.StringIO(), width=200, color_system=None) for _ in "oe")
        door = dispatch.FrontDoor(tiny_session(data="pydoc"), out, err, dispatch.FrontEnd(live=False))
        repl.run_pasted(door, typed, err)
        said = err.file.getvalue()
        assert "a line without ':' is text for the model to continue; Ctrl-L clears the screen" in said, said
    assert repl.shell_habit("clear the table") is None and repl.shell_habit("exit") is None  # text; a bare word
