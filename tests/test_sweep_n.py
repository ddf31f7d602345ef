"""What a user's-eye sweep of the session's life (interruptions, autosaves, continuing a run, leaving) found: each
test failed before its fix.

A continued run replaced "its own autosave" by asking only whether this session wrote the autosave, not whether
this run did: continuing a run that had been saved under another name (`:train save=mine`, stopped), or one loaded
back from `autosave-1`, wrote over the autosave of another run, which was then gone. A `:train` stopped by a quick
Ctrl-C before its first step still autosaved as a new run, so four such Ctrl-C pushed every earlier run out of the
rotation (and a one-shot shell that saved nothing said "minitf train continues"). A new run's autosave rotated the
older ones before writing its own, so a save that then failed (a full disk) had deleted the oldest run and moved
`autosave` away for nothing. `:quit` and Ctrl-D left at once with a trained model whose autosave had failed. A model
that could not be kept before a rebuild on a full disk was told to make the folder writable, and a read-only file
system was "permission denied; change its permissions". Piped input went on to its next long `:train` after Ctrl-C
stopped one, and exited 0. `:ls` left a checkpoint folder renamed by hand ("my model") out without a word. Ctrl-C
did nothing while a download waited on a stalled server (up to 300 s), and `:compare` stopped before its first
evaluation showed an empty table and "nothing to plot".
"""

import errno
import json
import os
import shutil
import signal
import socket
import threading
import time

import pytest

from minitf_repl import dispatch, repl
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.checkpoint import store
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from minitf_repl.syntax import SHELL, speaking
from test_cli import invoke
from test_commands import Recorder, run, tiny_session
from test_render import plain
from test_repl import TINY as TINY_REPL, consoles, ctrl_c_at_step, drive


def steps_saved(folder) -> dict:
    return {row.name: row.step for row in ckpt.list_checkpoints(folder)}


# --- a continued run replaces its own autosave only ----------------------------------------------------------
def test_a_run_saved_under_another_name_and_continued_keeps_the_previous_runs_autosave(checkpoint_dir):
    s = tiny_session()
    run(s, ":train")  # run A: the autosave at step 6
    assert run(s, ":train steps=10 save=mine", Recorder(stop_after=3)).saved == "mine"  # run B, stopped at 9
    assert run(s, ":train").saved == "mine"  # B goes on to its end into its own name (49th session); A stays
    assert steps_saved(checkpoint_dir) == {"autosave": 6, "mine": 16}


def test_a_stopped_run_loaded_back_and_continued_keeps_the_newer_runs_autosave(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=10", Recorder(stop_after=3))  # run A, stopped: autosave at step 3
    run(s, ":train steps=5")  # run B: autosave at 8, A at autosave-1
    run(s, ":load autosave-1")
    run(s, ":train")  # A goes on: B's autosave is not A's to replace; A's own at step 3 is, where B's moved it
    assert steps_saved(checkpoint_dir) == {"autosave": 10, "autosave-1": 8}


def test_a_continued_run_still_replaces_its_own_autosave_after_a_load_of_it(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=10", Recorder(stop_after=3))
    run(s, ":load autosave")
    run(s, ":train")  # the run that wrote the autosave goes on: it replaces its own (a guard for the fix above)
    assert steps_saved(checkpoint_dir) == {"autosave": 10}


# --- a :train stopped before its first step ------------------------------------------------------------------
def test_a_train_stopped_before_its_first_step_autosaves_nothing(checkpoint_dir):
    s = tiny_session()
    for steps in (2, 3):
        run(s, f":train steps={steps} schedule=new")
    before = steps_saved(checkpoint_dir)
    for _ in range(4):  # Ctrl-C at once, four times: the rotation keeps the runs that trained
        result = run(s, ":train steps=5", Recorder(stop_after=0))
        assert result.stopped and result.steps == 0 and result.saved is None and result.save_error is None
    assert steps_saved(checkpoint_dir) == before == {"autosave": 5, "autosave-1": 2}
    assert "no step finished this time, so nothing was saved" in " ".join(plain(result).split())
    assert run(s, ":train").saved == "autosave"  # the stopped run goes on, and is then saved as a new run
    assert steps_saved(checkpoint_dir) == {"autosave": 10, "autosave-1": 5, "autosave-2": 2}


def test_a_continued_run_stopped_before_its_next_step_keeps_its_autosave_and_says_so(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=10", Recorder(stop_after=3))
    result = run(s, ":train", Recorder(stop_after=0))
    assert result.resumed and result.saved is None and steps_saved(checkpoint_dir) == {"autosave": 3}
    assert "no step finished this time, so nothing was saved" in " ".join(plain(result).split())


def test_save_name_is_written_even_when_the_run_was_stopped_before_its_first_step(checkpoint_dir):
    s = tiny_session()
    run(s, ":train")
    assert run(s, ":train steps=5 save=mine", Recorder(stop_after=0)).saved == "mine"  # asked for by name


# --- a failed autosave rotates nothing ---------------------------------------------------------------------
def test_an_autosave_that_cannot_be_written_leaves_the_rotation_as_it_was(checkpoint_dir, monkeypatch):
    s = tiny_session()
    for steps in (1, 2, 3, 4):
        run(s, f":train steps={steps} schedule=new")
    before = steps_saved(checkpoint_dir)
    assert before == {"autosave": 10, "autosave-1": 6, "autosave-2": 3, "autosave-3": 1}

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "write_file", full)
    result = run(s, ":train steps=5 schedule=new")
    assert result.saved is None and "No space left on device; free space" in result.save_error
    assert steps_saved(checkpoint_dir) == before  # the oldest run is still there, autosave still autosave
    assert not [p for p in checkpoint_dir.iterdir() if p.name.startswith(".autosave")]  # no temporary left


def test_a_one_shot_train_stopped_with_nothing_saved_does_not_say_minitf_train_continues(checkpoint_dir):
    s = tiny_session()
    run(s, ":train")
    result = run(s, ":train steps=5", Recorder(stop_after=0))
    with speaking(SHELL):  # what `minitf --load autosave train --steps 5` stopped at once says
        text = " ".join(plain(result).split())
    assert "stopped at step 6 of 11 (0 steps this time" in text and "continues" not in text
    assert "no step finished this time, so nothing was saved" in text
    with speaking(SHELL):
        saved = " ".join(plain(run(s, ":train", Recorder(stop_after=2))).split())
    assert "stopped at step 8 of 11: minitf --load autosave train continues" in saved


# --- leaving with a trained model that is in no checkpoint -------------------------------------------------
def autosaves_fail(monkeypatch):
    """Every write into an autosave fails as on a full disk; other checkpoints save."""
    write = store.write_file

    def full(path, data):
        if "autosave" in str(path):
            raise OSError(errno.ENOSPC, "No space left on device")
        write(path, data)

    monkeypatch.setattr(store, "write_file", full)


def test_quit_after_a_failed_autosave_says_so_once_and_a_second_quit_leaves(monkeypatch):
    autosaves_fail(monkeypatch)
    with speaking(SHELL):  # as `minitf` runs the REPL: the shell's syntax around it, the REPL's inside
        code, out, err, session = drive(f"{TINY_REPL}\r:data sort\r:train steps=5\r:quit\r:config\rexit\r"
                                        f"exit\r:config\r")
    assert code == 0 and session.trainer.step == 5
    assert "warning: not saved" in out
    said = " ".join(err.split())
    # a command between two quits arms the warning again (46th session): said at the :quit and at the first exit
    assert said.count("the model trained to step 5 is in no checkpoint") == 2, err
    assert ("(its save failed: the checkpoint folder is full or cannot be written); :set checkpoint_dir=DIR then "
            ":save NAME keeps it in another folder, and :quit or Ctrl-D again leaves without it") in said
    assert out.split("trained 5 steps")[1].count("d_model") == 1  # the :quit and an exit stayed, the next left


def test_ctrl_d_after_a_failed_autosave_says_so_and_a_save_lets_it_leave(monkeypatch):
    autosaves_fail(monkeypatch)
    code, out, err, session = drive(f"{TINY_REPL}\r:data sort\r:train steps=5\r\x04:save mine\r:quit\r:config\r")
    assert code == 0
    assert "in no checkpoint" in err and "saved checkpoint mine" in out
    assert "d_model" not in out.split("saved checkpoint mine")[1]  # saved: :quit left at once


def test_quit_leaves_at_once_when_the_model_is_on_disk_or_autosave_is_off(monkeypatch):
    code, out, err, _ = drive(f"{TINY_REPL}\r:data sort\r:train steps=5\r:quit\r:config\r")
    assert err == "" and "d_model" not in out.split("trained 5 steps")[1]  # autosaved
    code, out, err, _ = drive(f"{TINY_REPL}\r:data sort\r:load autosave\r:train steps=2\r:quit\r:config\r")
    assert err == "" and "d_model" not in out.split("trained 2 steps")[1]  # loaded, then trained and autosaved
    autosaves_fail(monkeypatch)
    code, out, err, _ = drive(f"{TINY_REPL} autosave=off\r:data sort\r:train steps=5\r:quit\r:config\r")
    assert err == "" and "d_model" not in out.split("trained 5 steps")[1]  # the user chose not to keep it


def test_a_model_that_cannot_be_kept_on_a_full_disk_is_not_told_to_make_the_folder_writable(monkeypatch):
    s = tiny_session()
    run(s, ":train")
    monkeypatch.setattr(store, "write_file", lambda path, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(UserError) as e:
        run(s, ":set n_heads=1")
    said = str(e.value)
    assert "full; free space or choose another folder: :set checkpoint_dir=DIR keeps this model and saves there " \
           "from now on); nothing changed" in said  # the way on (test_sweep_m7)
    assert "writable" not in said and said.endswith("or turn autosave off to rebuild without keeping it: "
                                                    ":set autosave=off")
    assert s.model_config.n_heads == 2 and s.trainer.step == 6


# --- Ctrl-C in piped input -----------------------------------------------------------------------------------
def test_ctrl_c_that_stops_a_piped_command_ends_the_input_with_130(monkeypatch):
    ctrl_c_at_step(monkeypatch, 2)
    session = Session()
    out, err = consoles()
    code = repl.run_lines([TINY_REPL, ":data sort", ":train steps=100000", ":train steps=100000", ":config"],
                          session, out, err)
    text = out.file.getvalue()
    assert code == 130, err.file.getvalue()  # as the exit status table says, piped input and the shell alike
    assert "stopped at step 2 of 100,000" in text and "autosave" in text
    assert text.count("stopped at step") == 1 and "gen_seed" not in text  # no further line ran, as after SIGTERM
    assert session.trainer.step == 2


# --- :ls and a checkpoint folder renamed by hand -------------------------------------------------------------
def test_ls_says_which_folders_hold_a_checkpoint_under_a_name_load_cannot_take(checkpoint_dir):
    s = tiny_session()
    run(s, ":train")
    for name in ("my model", "\x1b[31mred", ".hidden"):  # renamed by hand; a hidden one is meant to be unseen
        shutil.copytree(checkpoint_dir / "autosave", checkpoint_dir / name)
    (checkpoint_dir / "notes here").mkdir()  # a folder without a checkpoint is none of :ls's business
    result = run(s, ":ls")
    assert [row.name for row in result.rows] == ["autosave"] and result.misnamed == ["\x1b[31mred", "my model"]
    text = " ".join(plain(result).split())
    assert "\x1b" not in text
    assert ("not listed: 2 folders here hold a checkpoint under a name that cannot be loaded ('\\x1b[31mred', "
            "'my model'); rename them with ASCII letters, digits, '.', '_' or '-'") in text
    shutil.rmtree(checkpoint_dir / "\x1b[31mred")
    shutil.rmtree(checkpoint_dir / "autosave")
    text = " ".join(plain(run(s, ":ls")).split())  # nothing loadable left: said beside "no checkpoints yet"
    assert "no checkpoints in" in text and "not listed: 1 folder here holds a checkpoint under a name that cannot " \
        "be loaded ('my model'); rename it with ASCII letters, digits, '.', '_' or '-', e.g. my_model" in text
    doc = invoke("--checkpoint-dir", str(checkpoint_dir), "ls", "--json")
    assert doc.exit_code == 0 and json.loads(doc.stdout)["misnamed"] == ["my model"]


# --- a read-only checkpoint folder ------------------------------------------------------------------------
def test_a_read_only_file_system_is_called_so_before_training_not_permission_denied(checkpoint_dir, monkeypatch):
    checkpoint_dir.mkdir(parents=True)
    statvfs = os.statvfs

    class ReadOnly:
        def __init__(self, real):
            self.real = real
            self.f_flag = real.f_flag | os.ST_RDONLY

        def __getattr__(self, name):
            return getattr(self.real, name)

    # as on a read-only mount, where access(W_OK) fails with EROFS whatever the permissions say
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: not mode & os.W_OK)
    monkeypatch.setattr(os, "statvfs", lambda path: ReadOnly(statvfs(path)))
    s = tiny_session()
    with pytest.raises(UserError) as e:
        run(s, ":train")
    assert str(e.value) == (f"cannot write in {checkpoint_dir}: the file system is read-only; start minitf "
                            "with another checkpoint directory; or train without saving: :set autosave=off")
    assert s.trainer.step == 0


# --- Ctrl-C during a download ------------------------------------------------------------------------------
def test_ctrl_c_stops_a_download_that_hangs_at_once_and_changes_nothing(tmp_path, monkeypatch):
    with socket.socket() as silent:  # accepts the connection (the backlog), never answers: a stalled server
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path))
        monkeypatch.setenv("MINITF_SHAKESPEARE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}/input.txt")
        session = tiny_session()
        out, err = consoles()
        door = dispatch.FrontDoor(session, out, err, dispatch.FrontEnd(live=False))
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        status = door.run_line(":data shakespeare")
        assert time.monotonic() - start < 5  # not the read's 20 s timeout, nor the download's 300 s
    assert status == dispatch.FAILED and door.interrupted
    assert err.file.getvalue().strip() == "error: data shakespeare interrupted; nothing changed"
    assert session.data_spec == "sort:4" and not list(tmp_path.iterdir())  # nothing switched, nothing written
    assert door.run_line(":data") == dispatch.OK  # the session goes on


# --- :compare stopped before its first evaluation --------------------------------------------------------
def test_compare_stopped_before_its_first_evaluation_says_so_instead_of_an_empty_table_and_chart():
    class StopAfter(Recorder):
        def __init__(self, steps):
            super().__init__()
            self.done = 0
            self.after = steps

        def on_compare_step(self, done, total):
            self.done = done

        def should_stop(self):
            return self.done >= self.after

    line = ":compare lr=0.001 lr=0.01 steps=20 eval_every=5"
    result = run(tiny_session(), line, StopAfter(3))  # the first contender stopped at step 3 of its first 5
    assert result.stopped and not any(o.curve for o in result.outcomes)
    text = " ".join(plain(result).split())
    assert "nothing to plot" not in text and "the curves end where" not in text and "val loss step" not in text
    assert "stopped before the first evaluation: no losses to compare yet" in text
    later = " ".join(plain(run(tiny_session(), line, StopAfter(13))).split())  # after the evaluation at step 5
    assert "stopped early: the curves end where the stop came" in later and "val loss step" in later
