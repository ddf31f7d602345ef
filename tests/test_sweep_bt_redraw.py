"""The live display's redraws between evaluations draw the bar anew and reuse the loss table's (and a watched frame's)
layout; an evaluation lays the view out once; a log's pace leaves the first step's set-up out (sweep bt)."""

import io
from types import SimpleNamespace

import pytest
from rich.console import Console
from rich.live import Live as RichLive
from rich.text import Text

from minitf_repl.render import live


class DrawnWhenAsked(RichLive):
    """The live display without its drawing thread: the test draws (refresh) when it means to, so counts are exact."""

    def __init__(self, *args, **kwargs):
        kwargs["auto_refresh"] = False
        super().__init__(*args, **kwargs)


def step_info(step, val=None, run_steps=300, tps=15000.0):
    return SimpleNamespace(step=step, run_step=step, run_steps=run_steps, train_loss=2.5, val_loss=val, val_bpc=None,
                           train_eval_loss=None, accuracy=None, lr=1e-3, tokens_per_second=tps, elapsed=0.1 * step,
                           aux_loss=None)


@pytest.fixture
def laid(monkeypatch):
    """A training reporter on a 100 x 40 terminal, with 6 rows in its table, and a count of the table's layouts."""
    reporter, console, count = training_reporter(monkeypatch, 40, 30)
    yield reporter, console, count
    reporter.close()


def training_reporter(monkeypatch, height, steps, width=100):
    """A training reporter on a `width` x `height` terminal, evaluated every 5 of `steps` steps, and a count of the
    table's layouts from here on (test_sweep_bt_resize's too)."""
    monkeypatch.setattr(live, "Live", DrawnWhenAsked)
    count = [0]
    table_for = live.LossTable.table_for

    def counted(self, width):
        count[0] += 1
        return table_for(self, width)

    monkeypatch.setattr(live.LossTable, "table_for", counted)
    console = Console(file=io.StringIO(), width=width, height=height, force_terminal=True, color_system=None)
    reporter = live.RichReporter(console, live=True)
    reporter.on_train_start(300, 0, False)
    reporter.on_train_vocab(12)
    for step in range(1, steps + 1):
        reporter.on_step(step_info(step, 2.0 - step / 1000 if step % 5 == 0 else None))
    count[0] = 0
    return reporter, console, count


def _redraw(reporter, console) -> str:
    """One redraw of the live display, as the terminal was given it (colourless)."""
    at = len(console.file.getvalue())
    reporter._live.refresh()
    return console.file.getvalue()[at:]


def test_a_redraw_between_evaluations_lays_the_table_out_no_more_and_again_once_it_changes(laid):
    reporter, console, count = laid
    for step in range(31, 39):
        reporter.on_step(step_info(step))
        drawn = _redraw(reporter, console)
    # was 8: the whole table and its legend laid out at each of the 8 redraws a second, where only the bar moved
    assert count[0] == 0, count
    assert "┃ step ┃ train loss ┃" in drawn and "held-out" in drawn and " 38/300 " in drawn, drawn  # all still shown
    reporter.on_evaluate(1, 3)  # an evaluation begins: the legend gives its batches, without a new view (_refresh)
    drawn = _redraw(reporter, console)
    assert count[0] == 1 and "3 held-out batches, after it" in drawn and "val 1/3" in drawn, (count, drawn)
    _redraw(reporter, console)
    assert count[0] == 1, count


def test_a_resized_terminals_redraws_lay_the_table_out_once_at_its_new_width(laid):
    reporter, console, count = laid
    _redraw(reporter, console)
    console.width = 70  # narrowed between two evaluations
    for step in range(31, 35):
        reporter.on_step(step_info(step))
        drawn = _redraw(reporter, console)
    assert count[0] == 1, count  # was 5 (4 at the new width)
    widest = max(len(line) for line in drawn.replace("\r", "\n").split("\n") if "\x1b" not in line)
    assert widest <= 70 and "train loss" in drawn, drawn


def test_an_evaluation_lays_the_view_out_once(laid):
    reporter, console, count = laid
    reporter.on_step(step_info(35, 1.5))
    for _ in range(3):
        drawn = _redraw(reporter, console)
    # was 5: 2 in training_view's fit (its loop and the check after it) and 1 at each redraw
    assert count[0] == 1, count
    assert "1.5000" in drawn and " 35/300 " in drawn, drawn


def test_a_table_longer_than_the_screen_is_laid_out_once_an_evaluation_and_still_fills_it(monkeypatch):
    reporter, console, count = training_reporter(monkeypatch, 24, 150)  # 30 rows on 24 lines
    try:
        for step in (155, 160):
            reporter.on_step(step_info(step, 1.5))
            lines = console.render_lines(reporter._shown, pad=False)  # what a redraw draws, its layout reused
            # the screen's lines but the cursor's, the newest row last but for the legend, the bar under them
            drawn = ["".join(segment.text for segment in line) for line in lines]
            assert len(drawn) == 23 and "earlier evaluations above" in drawn[1], drawn
            assert drawn[-5].startswith(f"│  {step} │"), drawn  # the legend (2 lines) and the bar below it
        # was 8: 3 at each (from a screen's height of rows down, then as many as the "earlier" line took, then the
        # check), and 1 at each redraw
        assert count[0] == 2, count
        console.height = 30  # a taller terminal: more rows, to fill it (from the last fit up)
        reporter.on_step(step_info(165, 1.5))
        drawn = console.render_lines(reporter._shown, pad=False)
        assert len(drawn) == 29 and count[0] == 4, (len(drawn), count)
    finally:
        reporter.close()


def test_a_watched_frame_is_laid_out_once_a_frame_not_at_each_redraw(laid, monkeypatch):
    reporter, console, count = laid
    frames = [0]

    class Frame:  # a frame's view that counts its layouts (watch_view's, which takes tens of ms for a map)
        def __rich_console__(self, console, options):
            frames[0] += 1
            yield Text("step 30, val loss 1.7000: a watched frame")

    monkeypatch.setattr(live, "watch_view", lambda frame, width, as_text, height=None, screen=None: Frame())
    reporter.on_watch(object())
    for step in range(31, 37):
        reporter.on_step(step_info(step))
        drawn = _redraw(reporter, console)
    # were 8 and 8: both laid out again at each redraw, and the table (unchanged since its row) for the frame's view
    assert frames[0] == 1 and count[0] == 0, (frames, count)
    assert "a watched frame" in drawn and "┃ step ┃" in drawn and " 36/300 " in drawn, drawn


def test_a_logs_pace_leaves_the_first_steps_set_up_out(monkeypatch):
    """The first step set the run up for 1.05 s, later ones took 0.13 s: the pace counted it with them."""
    from test_sweep_bq_pace import fake_clock_reporter, step_info as paced

    clock, console, reporter = fake_clock_reporter(monkeypatch, width=300)
    reporter.on_train_start(150, 0, False)
    clock[0] += 1.05
    reporter.on_step(paced(1, 150, 1.05))
    step = 1
    while not console.file.getvalue():
        step += 1
        clock[0] += 0.13
        reporter.on_step(paced(step, 150, 1.05 + 0.13 * (step - 1)))
    # 31 steps after the first in 4.03 s: the 118 left take 15.3 s (it said "about 0:00:19": the 1.05 s spread over
    # all 32 steps)
    assert console.file.getvalue().splitlines() == [
        "step 32 of 150 after 5.1 s: about 0:00:15 to go at this pace (a line at each evaluation)"], \
        console.file.getvalue()
