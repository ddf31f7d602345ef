"""A terminal resized during :train gets the live view fitted to its new size at the next step or evaluation batch,
not only at the next evaluation (minutes away): the table's narrow form, the rows that fit, a watched frame's width,
the bar's form; and laid out once per resize, its layouts kept for the redraws after it (sweep bt)."""

import re

import pytest
from rich.text import Text

from minitf_repl.render import live
from test_sweep_bt_redraw import step_info, training_reporter


def _training(monkeypatch, width, height, steps=30):
    return training_reporter(monkeypatch, height, steps, width=width)


@pytest.fixture
def reporters():
    made = []
    yield made
    for reporter in made:
        reporter.close()


def _drawn(reporter, console) -> list[str]:
    """The lines of one redraw of the live display, as the terminal shows them (colourless, cursor moves left out)."""
    at = len(console.file.getvalue())
    reporter._live.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", console.file.getvalue()[at:])
    return [line for line in text.replace("\r", "\n").split("\n") if line]


def test_a_widened_terminal_gets_the_wide_table_and_bar_at_the_next_step_laid_out_once(monkeypatch, reporters):
    reporter, console, count = _training(monkeypatch, 60, 40)
    reporters.append(reporter)
    assert not any("┃ step ┃" in line for line in _drawn(reporter, console))  # narrow on 60 columns
    console.width = 110  # widened between two evaluations
    for step in range(31, 35):
        reporter.on_step(step_info(step))
        drawn = _drawn(reporter, console)
    # was the narrow table and bar until the next evaluation
    assert any("┃ step ┃ train loss ┃" in line for line in drawn), drawn
    assert any(line.startswith("train ") and " eta " in line and "tok/s" in line for line in drawn), drawn
    assert count[0] == 1, count  # once for the new size, not at each step after it


def test_a_terminal_widened_during_an_evaluation_gets_the_wide_bar_and_table_at_its_next_batch(monkeypatch,
                                                                                              reporters):
    reporter, console, count = _training(monkeypatch, 60, 40)
    reporters.append(reporter)
    reporter.on_evaluate(1, 3)
    console.width = 110
    reporter.on_evaluate(2, 3)
    drawn = _drawn(reporter, console)
    # was the narrow bar, without its label ("val 2/3"), for the whole evaluation
    assert any(line.startswith("val 2/3 ") and " eta " in line for line in drawn), drawn
    assert any("┃ step ┃ train loss ┃" in line for line in drawn), drawn
    reporter.on_evaluate(3, 3)
    _drawn(reporter, console)
    assert count[0] == 1, count


def _fits(drawn, lines, step):
    """The view fits the screen's `lines` (the cursor's line left), the bar at step `step` at its foot, none cut."""
    assert len(drawn) <= lines - 1 and f" {step}/300 " in drawn[-1], drawn
    assert not any(line.strip() == "..." for line in drawn), drawn


def test_a_shortened_terminal_keeps_the_bar_on_screen_from_the_next_step(monkeypatch, reporters):
    reporter, console, count = _training(monkeypatch, 100, 40)
    reporters.append(reporter)
    _drawn(reporter, console)
    console.height = 10  # 100 x 40 -> 100 x 10 between two evaluations
    reporter.on_step(step_info(31))
    _fits(_drawn(reporter, console), 10, 31)  # was cut ("...") above the bar until the next evaluation
    laid = count[0]
    for step in range(32, 35):
        reporter.on_step(step_info(step))
        _fits(_drawn(reporter, console), 10, step)
    assert count[0] == laid, count  # the size unchanged since: no layout more


def test_a_terminal_resized_while_stopped_is_fitted_at_the_first_step_after_fg(monkeypatch, reporters):
    reporter, console, count = _training(monkeypatch, 100, 40)
    reporters.append(reporter)
    _drawn(reporter, console)
    reporter._suspend()  # Ctrl-Z
    assert reporter._live is None
    console.size = (100, 10)  # resized while stopped
    reporter._resume()  # fg: a new display, not laid out in the signal handler
    reporter.on_step(step_info(31))
    _fits(_drawn(reporter, console), 10, 31)


def test_a_watched_frame_is_drawn_again_for_a_narrowed_terminal_once(monkeypatch, reporters):
    reporter, console, count = _training(monkeypatch, 100, 40)
    reporters.append(reporter)
    widths = []

    def frame_view(frame, width, as_text, height=None, screen=None):  # watch_view's, its widths recorded
        widths.append(width)
        return Text(f"a watched frame for {width} columns")

    monkeypatch.setattr(live, "watch_view", frame_view)
    reporter.on_watch(object())
    console.width = 50  # :train watch=embed, narrowed 100 -> 50 between two frames
    for step in range(31, 35):
        reporter.on_step(step_info(step))
        drawn = _drawn(reporter, console)
    assert widths == [100, 50], widths  # was [100]: the 100 columns' frame wrapped until the next one
    assert any("a watched frame for 50 columns" in line for line in drawn), drawn
