"""Review of sweep bq's saves during a run, stopped runs named and moved, and the save at SIGTERM at the prompt."""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from minitf_repl import repl
from minitf_repl.commands import train as train_cmd
from minitf_repl.commands.shared import AUTOSAVES_KEPT, RUNS_GOING, run_in_progress, stopped_run_line
from minitf_repl.core.checkpoint import locks, store
from minitf_repl.core.errors import Interrupted, TrainingDiverged
from minitf_repl.syntax import REPL

from test_commands import Recorder, run, tiny_session
from test_render import plain
from test_sweep_bq_autosave import Clock
from test_sweep_bq_signals import trained_in_no_checkpoint


class Stoppable(Recorder):
    """A Recorder whose request_stop is heard, as a live reporter's is."""

    stop_requested = False

    def should_stop(self):
        return self.stop_requested or super().should_stop()


def step_of(directory, name) -> tuple[int, int]:
    trainer = json.loads((directory / name / "checkpoint.json").read_bytes())["trainer"]
    return trainer["step"], trainer["run_steps"]


def saves_with(monkeypatch, at_save):
    """Each save of :train calls at_save(session, written) after writing; returns the steps written, in order."""
    steps = []
    real = train_cmd.save_session

    def save_session(session, name, *args, **kwargs):
        written = real(session, name, *args, **kwargs)
        steps.append(written.step)
        at_save(session, written)
        return written

    monkeypatch.setattr(train_cmd, "save_session", save_session)
    return steps


# --- 1. a run in progress is not a stopped run -------------------------------------------------------------------


def test_a_run_going_on_is_not_taken_for_a_stopped_one_and_keeps_the_slot_another_run_moved_it_to(
        monkeypatch, checkpoint_dir):
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    seen, other = [], {}
    real = train_cmd.save_session

    def at_save(session, written):
        seen.append((written.step, stopped_run_line(checkpoint_dir)))
        if written.step == 3:  # another session starts a plain :train in the same folder while this run goes on
            with monkeypatch.context() as m:
                m.setattr(train_cmd, "save_session", real)
                o = tiny_session(steps=3)
                run(o, ":set save_every=0")
                other["result"] = run(o, ":train")

    saves_with(monkeypatch, at_save)
    hooks = Recorder()
    result = run(tiny_session(steps=9), ":train", hooks)  # saves at steps 3, 6 and 9
    me = f"minitf (pid {os.getpid()})"
    # it said "autosave is a run stopped at step 3 of 9: :load autosave, then :train continues it"
    assert seen[0] == (3, f"autosave is a run in progress in {me}, saved at step 3 of 9 (a :train here moves it to "
                          "autosave-1, where that run goes on saving)")
    b = other["result"]
    assert b.stopped_aside is None and b.running_aside == ("autosave-1", me)
    assert (f"autosave held a run in progress in {me}: it is now autosave-1, where that run goes on saving"
            in " ".join(plain(b).split()))
    # the run goes on saving where B said it is; B's own run stays where B saved it (the run took autosave back, and
    # B's pasted `:load autosave-1` loaded B's own 3-step run)
    assert result.saved == "autosave-1"
    assert step_of(checkpoint_dir, "autosave-1") == (9, 9) and step_of(checkpoint_dir, "autosave") == (3, 3)
    assert "another session's autosave moved this run's from autosave to autosave-1: the run saves there" \
        in hooks.notices, hooks.notices
    assert not RUNS_GOING  # the run ended: none of this process's is going


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_save_during_a_run_whose_process_is_gone_is_a_stopped_run(monkeypatch, checkpoint_dir):
    # the autosave written during a run by a process killed since (kill -9): the run stopped there
    dead = {**locks.lock_owner(), "token": "0" * 16, "pid": _dead_pid()}
    monkeypatch.setattr(locks, "lock_owner", lambda: dict(dead))
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    said = []
    saves_with(monkeypatch, lambda session, written: said.append(stopped_run_line(checkpoint_dir)))
    run(tiny_session(steps=9), ":train")
    assert said[0] == "autosave is a run stopped at step 3 of 9: :load autosave, then :train continues it"
    manifest = {"run_writer": dead, "origin": {"kind": "autosave", "session": "s"}}
    assert run_in_progress(manifest) is None
    alive = {**dead, "pid": os.getpid(), "since": time.time()}  # another process's token, this pid: running
    assert run_in_progress({**manifest, "run_writer": alive}) == f"minitf (pid {os.getpid()})"
    # another host's pid tells nothing here: taken as running, as its lock is waited for
    elsewhere = {**dead, "host": "elsewhere"}
    assert run_in_progress({**manifest, "run_writer": elsewhere}) == f"minitf on elsewhere (pid {dead['pid']})"
    # this process's own: running while its session's run goes on
    mine = {**dead, "token": locks.PROCESS_TOKEN}
    assert run_in_progress({**manifest, "run_writer": mine}) is None
    RUNS_GOING.add("s")
    try:
        assert run_in_progress({**manifest, "run_writer": mine}) == f"minitf (pid {dead['pid']})"
    finally:
        RUNS_GOING.discard("s")
    assert run_in_progress({"origin": {"kind": "autosave"}}) is None  # no writer: an end's save


# --- 2. a failed run that saved during itself ----------------------------------------------------------------------


def _diverge_after_save(session, written):
    def diverge(*args):
        raise TrainingDiverged("the loss became nan at step 99", step=99)

    session.trainer._forward_backward = diverge  # the steps after this save diverge


def test_a_failed_run_says_the_stopped_run_its_rotation_deleted(monkeypatch, checkpoint_dir):
    s = tiny_session(steps=8)
    run(s, ":set save_every=0")
    run(s, ":train", Recorder(stop_after=3))  # a stopped run, 3 of 8
    for _ in range(AUTOSAVES_KEPT):
        run(s, ":train steps=2 schedule=new")
    assert step_of(checkpoint_dir, f"autosave-{AUTOSAVES_KEPT}") == (3, 8)
    run(s, ":set save_every=60")
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    saves_with(monkeypatch, _diverge_after_save)
    hooks = Recorder()
    with pytest.raises(TrainingDiverged):
        run(s, ":train steps=9 schedule=new", hooks)
    del s.trainer._forward_backward
    # deleted by the save at step 12, and only "autosave holds this run's step 12" was said
    assert (f"autosave-{AUTOSAVES_KEPT} (a run stopped at step 3, 5 steps before its end) was the oldest autosave kept "
            "and made room for this one; :save NAME keeps a run for good") in hooks.notices, hooks.notices


def test_a_failed_continued_run_says_the_model_it_went_back_to_is_in_no_checkpoint(monkeypatch, checkpoint_dir):
    s = tiny_session(steps=12)
    run(s, ":set save_every=0")
    assert run(s, ":train", Recorder(stop_after=3)).stopped
    run(s, ":set save_every=60")
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    saves_with(monkeypatch, _diverge_after_save)
    hooks = Recorder()
    with pytest.raises(TrainingDiverged):
        run(s, ":train", hooks)  # continues the run, saves at step 6 over its step-3 autosave, then diverges
    del s.trainer._forward_backward
    assert s.trainer.step == 3 and s.unsaved_step == 3 and step_of(checkpoint_dir, "autosave")[0] == 6
    assert ("the model at step 3 is in no checkpoint now: :save NAME keeps it, or :load autosave goes on from step 6"
            in hooks.notices), hooks.notices


# --- 3. a save during a run does not freeze it, nor write a step twice -----------------------------------------------


class HoldsTheFolder(Stoppable):
    """Another session's save holds the checkpoint folder from step `since` to step `until`."""

    def __init__(self, directory, since: int, until: int):
        super().__init__()
        self.lock, self.since, self.until = locks.folder_lock(directory), since, until

    def on_step(self, info):
        super().on_step(info)
        if info.step == self.since:
            self.lock.directory.mkdir(parents=True, exist_ok=True)
            self.lock.__enter__()
        elif info.step == self.until:
            self.lock.__exit__(None, None, None)


def test_a_save_during_a_run_skips_a_busy_folder_at_once_and_saves_at_the_next_evaluation(
        monkeypatch, checkpoint_dir):
    monkeypatch.setattr(locks, "LOCK_WAIT", 8.0)  # the default's two minutes, shortened: it waited all of it
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    steps = saves_with(monkeypatch, lambda session, written: None)
    hooks = HoldsTheFolder(checkpoint_dir, since=3, until=5)
    began = time.monotonic()
    result = run(tiny_session(steps=9), ":train", hooks)
    assert time.monotonic() - began < 6
    assert steps == [6, 9] and result.saved == "autosave"
    skipped = [line for line in hooks.notices if "skipped" in line]
    assert skipped == ["the autosave at step 3 was skipped: another save held the checkpoint folder for more than "
                       "1 s; the run goes on, and saves at its next evaluation"], hooks.notices


def test_a_stop_during_a_save_during_the_run_does_not_write_that_step_again(monkeypatch, checkpoint_dir):
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    hooks = Stoppable()
    steps = saves_with(monkeypatch, lambda session, written: hooks.request_stop())  # Ctrl-C during the save
    s = tiny_session(steps=9)
    result = run(s, ":train", hooks)
    assert result.stopped and result.total_steps == 3 and result.saved == "autosave"
    assert steps == [3]  # the end wrote step 3 again: [3, 3]
    assert s.unsaved_step is None and stopped_run_line(checkpoint_dir) == (
        "autosave is a run stopped at step 3 of 9: :load autosave, then :train continues it")
    again = tiny_session(steps=9)
    run(again, ":load autosave")
    assert run(again, ":train").total_steps == 9


# --- 4. the save at SIGTERM names the folder ------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_the_save_at_sigterm_names_a_folder_other_than_the_one_minitf_began_in(monkeypatch, checkpoint_dir,
                                                                               tmp_path):
    session = trained_in_no_checkpoint(monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    run(session, f":set checkpoint_dir={elsewhere}")
    err = Console(file=io.StringIO(), width=400, color_system=None)
    door = SimpleNamespace(session=session, err=err, front=SimpleNamespace(syntax=REPL))
    name = repl.save_before_leaving(door, signal.SIGTERM)
    assert name is not None and (elsewhere / name).is_dir()
    said = " ".join(err.file.getvalue().split())
    # "(:load kept-... brings it back)": the next minitf opened the folder it began in, without it
    assert (f"saved it as {name} in {elsewhere} (minitf --checkpoint-dir {elsewhere} --load {name} brings it back)"
            in said), said


# --- 5. a save during the run that fails, or is cut short ---------------------------------------------------------


def test_a_failed_save_during_a_run_says_what_to_do_after_the_run(monkeypatch, checkpoint_dir):
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    real, calls = store.write_file, []

    def full_once(path, data):  # the save at step 3 finds the disk full; the end's does not
        calls.append(path)
        if len(calls) <= 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    monkeypatch.setattr(store, "write_file", full_once)
    hooks = Recorder()
    result = run(tiny_session(steps=9), ":train", hooks)
    assert result.saved == "autosave" and result.save_error is None
    failed = [line for line in hooks.notices if "failed" in line]
    assert len(failed) == 1, failed
    assert failed[0].startswith("the autosave at step 3 failed (could not save checkpoint "), failed
    # the prompt is the run's until its end: ":set checkpoint_dir=DIR keeps this model and saves there from now on"
    assert failed[0].endswith("No space left on device; free space or choose another folder after the run: :set "
                              "checkpoint_dir=DIR keeps this model and saves there); the run goes on, and saves at "
                              "its end"), failed


def test_a_ctrl_c_that_cuts_a_save_during_the_run_short_stops_the_run_which_saves_at_its_end(
        monkeypatch, checkpoint_dir):
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    real, steps = train_cmd.save_session, []

    def save_session(session, name, *args, **kwargs):
        steps.append(session.trainer.step)
        if len(steps) == 1:
            raise Interrupted("save interrupted; no checkpoint autosave was written")
        return real(session, name, *args, **kwargs)

    monkeypatch.setattr(train_cmd, "save_session", save_session)
    hooks = Stoppable()
    result = run(tiny_session(steps=9), ":train", hooks)
    assert result.stopped and result.total_steps == 3 and result.saved == "autosave" and steps == [3, 3]
    assert not [line for line in hooks.notices if "failed" in line], hooks.notices
    assert step_of(checkpoint_dir, "autosave") == (3, 9)
