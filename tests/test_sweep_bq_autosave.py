"""Sweep bq, abrupt endings: a run's autosave written during it (save_every), and a stopped run the rotation moves."""

from __future__ import annotations

import os
import shutil
import time

import torch

from minitf_repl.commands import train as train_cmd
from minitf_repl.commands.shared import StoppedAside, stopped_run_line
from minitf_repl.core.errors import TrainingDiverged

from test_commands import Recorder, run, tiny_session
from test_render import plain


class Clock:
    """A clock that moves on 100 s each time it is read: every evaluation comes after save_every's 60."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 100.0
        return self.now


def watch_saves(monkeypatch, checkpoint_dir, copies, pause: float = 0.0):
    """Each autosave written: a copy of it as it was then (the step's name in `copies`), and `pause` seconds more."""
    saves = []
    real = train_cmd.save_session

    def save_session(session, name, *args, **kwargs):
        written = real(session, name, *args, **kwargs)
        saves.append(written.step)
        shutil.copytree(checkpoint_dir / name, copies / f"at-{written.step}", dirs_exist_ok=True)
        time.sleep(pause)
        return written

    monkeypatch.setattr(train_cmd, "save_session", save_session)
    return saves


def test_a_run_autosaves_at_its_evaluations_once_save_every_has_passed_and_continues_from_it(
        monkeypatch, checkpoint_dir, tmp_path):
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    saves = watch_saves(monkeypatch, checkpoint_dir, tmp_path, pause=0.3)
    s = tiny_session(steps=9)  # evaluations after steps 3, 6 and 9
    result = run(s, ":train")
    # written at the run's evaluations before its end, then at its end, into the one autosave of this run (a kill -9
    # at step 7 lost all of it: no checkpoint was written before the end)
    assert saves == [3, 6, 9]
    assert sorted(os.listdir(checkpoint_dir)) == ["autosave"] and result.saved == "autosave"
    # the saves' seconds are in no row's elapsed nor the tokens/s: the command's wall time holds them
    assert result.run_seconds < result.seconds - 0.6
    assert result.evals[-1]["elapsed"] < result.seconds - 0.6

    # the save at step 6 is a run stopped there, which :load then :train continues as the unbroken run went on
    shutil.copytree(tmp_path / "at-6", checkpoint_dir / "mid")
    again = tiny_session(steps=9)
    run(again, ":load mid")
    assert again.trainer.step == 6 and again.trainer.run_remaining == 3
    going_on = run(again, ":train")
    assert going_on.resumed and going_on.steps == 3 and going_on.total_steps == 9
    for (name, a), b in zip(again.model.state_dict().items(), s.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)

    # 0: at the run's end only
    saves.clear()
    run(s, ":set save_every=0")
    run(s, ":train steps=9")
    assert saves == [18]


def test_the_default_save_every_leaves_a_short_run_saving_at_its_end_alone(monkeypatch, checkpoint_dir, tmp_path):
    saves = watch_saves(monkeypatch, checkpoint_dir, tmp_path)
    s = tiny_session(steps=9)
    assert s.shell_config.save_every == 60
    run(s, ":train")
    assert saves == [9]


def test_a_run_that_fails_after_saving_during_it_says_so_and_its_session_knows_where_its_model_is(
        monkeypatch, checkpoint_dir, tmp_path):
    monkeypatch.setattr(train_cmd, "_clock", Clock())
    s = tiny_session(steps=6)
    run(s, ":set save_every=0")
    run(s, ":train")  # step 6, in autosave
    run(s, ":set save_every=60")
    real = train_cmd.save_session

    def save_session(session, name, *args, **kwargs):
        written = real(session, name, *args, **kwargs)

        def diverge(*args):
            raise TrainingDiverged("the loss became nan at step 10", step=10)

        session.trainer._forward_backward = diverge  # the steps after this save diverge
        return written

    monkeypatch.setattr(train_cmd, "save_session", save_session)
    hooks = Recorder()
    try:
        run(s, ":train steps=9 schedule=new", hooks)
    except TrainingDiverged:
        pass
    del s.trainer._forward_backward
    assert s.trainer.step == 6  # rolled back
    assert any("autosave holds this run's step 9" in line for line in hooks.notices), hooks.notices
    # the model the session went back to is autosave-1 now: :quit does not take it for a model in no checkpoint
    assert s.unsaved_step is None


def stop_a_run(steps: int = 8, at: int = 3):
    s = tiny_session(steps=steps)
    result = run(s, ":train", Recorder(stop_after=at))
    assert result.stopped and result.saved == "autosave"
    return s


def test_the_repls_start_names_a_stopped_run_in_the_autosave(checkpoint_dir):
    assert stopped_run_line(checkpoint_dir) is None  # no autosave
    s = stop_a_run()
    assert stopped_run_line(s.checkpoint_dir) == "autosave is a run stopped at step 3 of 8: :load autosave, then " \
                                                 ":train continues it"
    run(s, ":train")  # its end
    assert stopped_run_line(s.checkpoint_dir) is None


def test_a_new_run_that_moves_a_stopped_run_down_the_rotation_says_where_it_went(checkpoint_dir):
    stop_a_run()
    fresh = tiny_session(steps=8)  # a new REPL in the same folder, and a plain :train
    result = run(fresh, ":train steps=2")
    assert result.stopped_aside == StoppedAside("autosave-1", 3, 5)
    assert "autosave held an unfinished run (stopped at step 3 of 8): it is now autosave-1; :load autosave-1, " \
           "then :train continues it" in plain(result)
    # a finished run moved down is not said; nor is a stopped run its own continuation replaces
    assert run(fresh, ":train steps=2").stopped_aside is None
    s = stop_a_run()
    assert run(s, ":train").stopped_aside is None


def test_the_repl_opens_with_a_line_naming_the_stopped_run(checkpoint_dir):
    """The greeting said nothing of a run stopped with steps to go, and the first :train pushed it aside (s59)."""
    from minitf_repl.session import Session
    from test_repl import drive

    from minitf_repl.syntax import SHELL, speaking

    stop_a_run()
    with speaking(SHELL):  # as the shell's front door opens the REPL: its greeting said `minitf --load autosave train`
        code, out, err, _ = drive(":quit\r", Session(data_spec="sort:4"))
    assert "autosave is a run stopped at step 3 of 8: :load autosave, then :train continues it" in " ".join(out.split())
