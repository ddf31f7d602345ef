"""A script's :train says its pace before its first evaluation, and each evaluation's line an eta (s59)."""
import io
from types import SimpleNamespace

from rich.console import Console

from minitf_repl.render import live


def step_info(step, run_steps, elapsed, val=None):
    return SimpleNamespace(step=step, run_step=step, run_steps=run_steps, train_loss=2.0, train_eval_loss=None,
                           val_loss=val, val_bpc=None, accuracy=None, aux_loss=None, lr=1e-3,
                           tokens_per_second=1000.0, elapsed=elapsed)


def fake_clock_reporter(monkeypatch, width=200):
    """(clock, console, reporter): `clock` a one-item list whose time the reporter's monotonic() reads, and a
    line-by-line reporter on a console of `width` (tests/test_sweep_bt_redraw.py's pace test shares them)."""
    clock = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    console = Console(file=io.StringIO(), width=width, color_system=None)
    return clock, console, live.RichReporter(console, live=False, lines=True)


def test_a_log_says_the_runs_pace_once_before_its_first_evaluation_and_an_eta_after(monkeypatch):
    # was: with input piped, the first sign of life was the first evaluation's line, 18 to 30 s into a 150-step run
    clock, console, reporter = fake_clock_reporter(monkeypatch)
    reporter.on_train_start(150, 0, False)
    for step in range(1, 21):
        clock[0] += 0.5
        reporter.on_step(step_info(step, 150, 0.5 * step))
    lines = console.file.getvalue().splitlines()
    assert lines == ["step 10 of 150 after 5.0 s: about 0:01:10 to go at this pace (a line at each evaluation)"], lines
    reporter.on_step(step_info(30, 150, 15.0, val=1.9))
    assert console.file.getvalue().splitlines()[-1].endswith(", eta 0:01:00"), console.file.getvalue()
