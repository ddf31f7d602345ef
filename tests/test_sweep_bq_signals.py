"""Abrupt endings and stops: SIGHUP at the prompt, Ctrl-Z and SIGSTOP during a run, a resize, an ablation's toolbar."""

import errno
import io
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from minitf_repl import repl
from minitf_repl.core.checkpoint import store
from minitf_repl.render.live import RichReporter
from minitf_repl.syntax import REPL

from test_commands import run, tiny_session

POSIX = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP, SIGTSTP nor SIGSTOP on Windows")


def trained_in_no_checkpoint(monkeypatch):
    """A session whose :train autosave failed (a full disk), the disk then free again."""
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(store, "write_file", full)
        session = tiny_session()
        assert run(session, ":train").save_error
    assert session.unsaved_step == 6
    return session


@POSIX
def test_sighup_at_the_prompt_saves_a_model_in_no_checkpoint_before_leaving(monkeypatch, checkpoint_dir):
    session = trained_in_no_checkpoint(monkeypatch)
    out = Console(file=io.StringIO(), width=300, color_system=None)
    err = Console(file=io.StringIO(), width=300, color_system=None)
    hangup = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGHUP))  # the terminal closed, at the prompt
    with create_pipe_input() as inp:
        hangup.start()
        try:
            code = repl.run_repl(session, out, err, input=inp, output=DummyOutput(), history=InMemoryHistory())
        finally:
            hangup.cancel()
    assert code == 129
    kept = [p.name for p in checkpoint_dir.iterdir() if p.name.startswith("kept-")]
    assert len(kept) == 1, list(checkpoint_dir.iterdir())  # it exited at once, the step-6 model gone without a word
    said = " ".join(err.file.getvalue().split())
    assert (f"SIGHUP ended minitf with the model trained to step 6 in no checkpoint: saved it as {kept[0]} "
            f"(:load {kept[0]} brings it back)") in said, said
    assert session.unsaved_step is None


@POSIX
def test_the_save_at_sigterm_gives_up_after_its_time_and_says_the_model_is_lost(monkeypatch, checkpoint_dir):
    session = trained_in_no_checkpoint(monkeypatch)

    def stuck(path, data):  # another session's save holding the folder, a hung network drive
        time.sleep(30)

    monkeypatch.setattr(store, "write_file", stuck)
    monkeypatch.setattr(repl, "LAST_SAVE_SECONDS", 1.0)
    err = Console(file=io.StringIO(), width=300, color_system=None)
    door = SimpleNamespace(session=session, err=err, front=SimpleNamespace(syntax=REPL))
    began = time.monotonic()
    assert repl.save_before_leaving(door, signal.SIGTERM) is None
    assert time.monotonic() - began < 10
    said = " ".join(err.file.getvalue().split())
    assert ("error: SIGTERM ended minitf with the model trained to step 6 in no checkpoint: saving it failed (it took "
            "more than 1 s, and was given up), and it is lost") in said, said
    assert not any(p.name.startswith("kept-") for p in checkpoint_dir.iterdir())


def test_the_toolbar_says_its_losses_are_the_unablated_models(checkpoint_dir):
    session = tiny_session()
    run(session, ":train steps=3")
    assert "unablated" not in repl.toolbar_text(session, 200)
    run(session, ":ablate head=0.0")
    for width in (200, 120, 80):
        bar = repl.toolbar_text(session, width)
        # "ablated: head 0.0 | val 1.9248": the intact model's val, read as the ablated one's
        assert "| ablated: head 0.0 |" in bar and re.search(r"val (loss )?\d\.\d{4} \(unablated\) \|", bar), bar
        assert len(bar) <= width, (width, bar)
    run(session, ":ablate off")
    assert "unablated" not in repl.toolbar_text(session, 200)


def _info(step, val=2.0):
    return SimpleNamespace(step=step, run_step=step, run_steps=300, train_loss=2.5, val_loss=val, val_bpc=3.0,
                           train_eval_loss=None, accuracy=None, lr=1e-3, tokens_per_second=15000.0, elapsed=1.0,
                           aux_loss=None)


def _drawn(console, view) -> str:
    return "\n".join("".join(segment.text for segment in line) for line in console.render_lines(view, pad=False))


def test_the_live_loss_table_follows_the_terminal_back_to_its_width():
    console = Console(file=io.StringIO(), width=60, force_terminal=True, color_system=None, height=40)
    reporter = RichReporter(console, live=True)
    try:
        reporter.on_train_start(300, 0, False)
        reporter.on_step(_info(100))  # the first row came while the terminal was narrowed
        narrow = _drawn(console, reporter.training_view())
        assert "┃" not in narrow and "tokens/s" not in narrow, narrow  # the narrow layout, at 60 columns
        console.width = 140  # widened again
        wide = _drawn(console, reporter.training_view())
        # it stayed narrow until the run's end
        assert "┃ step ┃ train loss ┃" in wide and "tokens/s" in wide, wide
    finally:
        reporter.close()


SUSPENDED = textwrap.dedent("""
    import io, os, signal
    from rich.console import Console
    from minitf_repl.render.live import RichReporter

    file = io.StringIO()
    reporter = RichReporter(Console(file=file, width=100, force_terminal=True, color_system=None), live=True)
    reporter.on_train_start(300, 0, False)
    at = len(file.getvalue())
    os.kill(os.getpid(), signal.SIGTSTP)  # Ctrl-Z (a session of its own: the kernel lets it go on at once)
    written = file.getvalue()[at:]
    reporter.close()  # the live display took print()'s output until here
    print(repr(written))
    print(signal.getsignal(signal.SIGTSTP) is signal.SIG_DFL)
""")


@POSIX
def test_ctrl_z_during_a_live_display_shows_the_cursor_before_the_stop_and_hides_it_after():
    done = subprocess.run([sys.executable, "-c", SUSPENDED], capture_output=True, text=True, timeout=60,
                          start_new_session=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    written, restored = done.stdout.splitlines()[-2:]
    # the shell's prompt had no cursor until `fg`: the stop came with Rich's hidden
    assert "\\x1b[?25h" in written and written.index("\\x1b[?25h") < written.index("\\x1b[?25l"), written
    assert restored == "True"  # the handler goes with the display


STOPPED = textwrap.dedent("""
    import io, os, signal, subprocess, time
    from rich.console import Console
    from minitf_repl.render.live import RichReporter
    from types import SimpleNamespace

    reporter = RichReporter(Console(file=io.StringIO(), width=200), live=False)
    reporter.on_train_start(300, 0, False)
    time.sleep(0.5)
    subprocess.Popen(["sh", "-c", f"sleep 2; kill -CONT {os.getpid()}"])
    os.kill(os.getpid(), signal.SIGSTOP)  # kill -STOP: no handler runs, only SIGCONT's after it
    time.sleep(0.5)  # the watch's thread looks, and SIGCONT's handler runs
    reporter.on_step(SimpleNamespace(step=200, run_step=200, run_steps=300, val_loss=2.0))
    reporter.close()
    print(reporter.stops_line())
""")


@POSIX
def test_a_run_stopped_by_sigstop_says_for_how_long_beside_its_speeds():
    done = subprocess.run([sys.executable, "-c", STOPPED], capture_output=True, text=True, timeout=60,
                          start_new_session=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip().splitlines()[-1]
    # its row said 6,384 tokens/s and its summary 30.3 s for 15 s of training, with no word of the stop
    assert line.startswith("minitf was stopped for ") and "before the row of step 200" in line, line
    seconds = float(line.split("stopped for ")[1].split(" s ")[0])
    assert 1.5 <= seconds <= 2.5, line
