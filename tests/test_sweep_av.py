"""Two at once: a REPL in one terminal, another REPL or a one-shot command in the other, on one checkpoint folder.
Each test failed before its fix.

Two sessions saving one name at once (`:save m` in both, or a one-shot `train save=m` beside a REPL's `:save m`): the
session whose save went first read the name back after its save to learn which checkpoint held its model, and read
the other session's, written in between. It then took the other's checkpoint for its own model: `:quit` said nothing
and left, and the model trained there was in no checkpoint. A save now knows its own checkpoint by the checksum it
wrote (core.checkpoint's `outcome["meta_sha256"]`), so the session finds its model in no checkpoint and `:quit` warns.

A `:save m` that waited for another session's save of m ("waiting for minitf on HOST (pid N) to finish saving") and
was stopped with Ctrl-C said "saved checkpoint m" when the other session's save landed meanwhile: any change of the
manifest was taken for this save's commit, and the model was taken for saved in the other session's checkpoint. Now
the save says "save interrupted; this model was not saved, and m holds a checkpoint another session saved meanwhile",
and the model counts as in no checkpoint.

With autosave off, a model saved by name (`:save m`) that the other terminal then saved over: `:quit` left without a
word, and the model went. The warning said with autosave on ("the model trained to step N is in no checkpoint (m
holds another model now, or is gone)") is said with autosave off too when the model's own checkpoint was saved over:
the user had kept it.

Two terminals in one folder each ran `:report`: the second replaced the first's report.html with "wrote report.html"
alone. A page this session had not written is now said to be replaced ("PATH held a page this session had not
written (another session's, or an earlier one's?): it is replaced"), as `:save` says it of a checkpoint; `--json`
gives it as `replaced_unseen` (minitf.report/3).

The checkpoint folder removed in the other terminal (`rm -rf checkpoints`) while a save was writing into it: "could
not save checkpoint 'm' in DIR: No such file or directory; start minitf with another checkpoint directory", which
sent the user away from a folder the next save makes again. It now says the folder was removed while it was saved
into, and to save again.

`:train`'s autosave waiting for another session's save said "waiting for minitf on HOST (pid N) to finish saving into
DIR (up to 120 s; Ctrl-C stops this save)", and a Ctrl-C then did nothing (a :train is stopped at its next step, and
its autosave is made whatever comes): the user waited, pressing Ctrl-C, for up to two minutes. The promise is now made
only where a Ctrl-C does stop the wait (`:save`); the autosave, and the model kept before a rebuild, say "(up to 120
s)".

`:ls` while the other session's `:train` ended: its autosave moved the previous run to autosave-1 between `:ls`'s
read of the folder and of its rows, and `:ls` listed the previous run as autosave and the new run not at all (or one
run twice, as autosave and autosave-1). A folder whose checkpoints moved while it was read is read again.

Weights loaded from a Hugging Face folder and saved as g, then g saved over by the other terminal: a rebuild said "the
weights loaded from hf:PATH go with the rebuild; :load g brings them back", and `:load g` brought the other session's
model. The way back is g only while g still holds them; else the folder, `:load hf:PATH`.

`:train` (its autosave) then `:save m`, and the other terminal saved over m: `:quit` warned "the model trained to step
3 is in no checkpoint (m holds another model now, or is gone)", while the autosave held that very model. The session
now remembers every save of the model as it is, and looks for each.

On a file system without flock (the exclusive-create lock), a save killed part-way left its lock; two saves that found
it at once both judged it stale, and the second removed the lock the first had just taken in its place: both saved
into the folder together. A stale lock is now moved aside and removed only if it is still the one judged; a live
one is put back, and waited for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minitf_repl.core.checkpoint import locks
from minitf_repl.core.checkpoint.locks import folder_lock
from minitf_repl.core.errors import UserError

from test_commands import Recorder, run, tiny_session


def trained(steps: int = 3, **train):
    session = tiny_session(**train)
    run(session, ":set autosave=off")  # each test's checkpoints are the ones it names
    run(session, f":train steps={steps}")
    run(session, ":set autosave=on")
    return session


# --- one name saved by two sessions at once ----------------------------------------------------------------------
def test_a_save_overtaken_by_another_sessions_save_of_that_name_is_not_taken_for_this_models(checkpoint_dir,
                                                                                              monkeypatch):
    from minitf_repl.core import checkpoint as ckpt

    mine, theirs = trained(3), trained(5)
    real = ckpt.save_checkpoint
    overtaken = []

    def then_the_other_saves(*args, **kwargs):  # the other session's save lands right after this one's
        path = real(*args, **kwargs)
        if kwargs["session"] == mine.token:
            overtaken.append(run(theirs, ":save m"))
        return path

    monkeypatch.setattr(ckpt, "save_checkpoint", then_the_other_saves)
    run(mine, ":save m")
    assert overtaken and overtaken[0].replaced_unseen == 3  # the other session was told
    assert mine.unsaved_step == 3 and mine.saved_over == "m"  # and this one knows m holds its model no more
    assert theirs.unsaved_step is None


# Two real processes: the first one's save returns, the second saves m, and only then does the first go on (its
# save_session reads what it needs); each prints what its session knows of its model.
SAVER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, "tests")
from minitf_repl.core import checkpoint as ckpt
from test_commands import run, tiny_session

me, sync, steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
def wait_for(name):
    deadline = time.monotonic() + 60
    while not (sync / name).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
session = tiny_session()
run(session, ":set autosave=off")
run(session, f":train steps={steps}")
real = ckpt.save_checkpoint
def save_checkpoint(*args, **kwargs):
    path = real(*args, **kwargs)
    if me == "first":
        (sync / "first-saved").touch()
        wait_for("second-saved")
    return path
ckpt.save_checkpoint = save_checkpoint
if me == "second":
    wait_for("first-saved")
result = run(session, ":save m")
(sync / f"{me}-saved").touch()
print(json.dumps({"unsaved": session.unsaved_step, "gone": session.saved_over, "unseen": result.replaced_unseen}))
"""


@pytest.mark.slow  # two processes that import torch: some 13 s on two busy cores (the in-process test above is quick)
def test_two_processes_saving_one_name_each_know_whose_model_it_holds(checkpoint_dir, tmp_path):
    sync = tmp_path / "sync"
    sync.mkdir()
    root = Path(__file__).resolve().parents[1]
    procs = {me: subprocess.Popen([sys.executable, "-c", SAVER, me, str(sync), str(steps)], cwd=root,
                                  env={**os.environ, "PYTHONPATH": str(root)}, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
             for me, steps in (("first", 3), ("second", 5))}
    said = {}
    for me, proc in procs.items():
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        said[me] = json.loads(out.strip().splitlines()[-1])
    assert said["second"] == {"unsaved": None, "gone": None, "unseen": 3}  # it holds m, and heard it replaced one
    assert said["first"] == {"unsaved": 3, "gone": "m", "unseen": None}  # was: unsaved None, its model taken for m's


def test_ctrl_c_while_waiting_for_another_sessions_save_of_that_name_does_not_say_saved(checkpoint_dir,
                                                                                        monkeypatch):
    mine, theirs = trained(3), trained(5)
    monkeypatch.setattr(locks, "WAIT_NOTICE", 0.0)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    held = folder_lock(checkpoint_dir)
    held.__enter__()  # the other session's save holds the folder

    class CtrlCWhileWaiting(Recorder):
        def notice(self, text):
            super().notice(text)
            held.__exit__(None, None, None)
            run(theirs, ":save m")  # the other session's save of m lands
            raise KeyboardInterrupt

    hooks = CtrlCWhileWaiting()
    with pytest.raises(UserError, match="save interrupted; this model was not saved, and m holds a checkpoint "
                                        "another session saved meanwhile"):
        run(mine, ":save m", hooks)
    assert hooks.notices and "waiting for" in hooks.notices[0] and "Ctrl-C stops this save" in hooks.notices[0]
    assert mine.unsaved_step == 3 and theirs.unsaved_step is None


# --- :quit with autosave off, after another session saved over this one's checkpoint -----------------------------
def test_quit_with_autosave_off_warns_when_another_session_saved_over_this_models_checkpoint(checkpoint_dir):
    from test_repl import drive

    mine, theirs = trained(3), trained(5)
    run(mine, ":set autosave=off")
    run(mine, ":save m")
    run(theirs, ":save m")  # the other terminal saves its own model as m
    code, _, err, _ = drive(":quit\r", mine)
    assert code == 0
    assert "warning: the model trained to step 3 is in no checkpoint (m holds another model now, or is gone)" in err
    run(theirs, ":set autosave=off")  # nothing of this one's was lost: it leaves without a word
    assert "warning" not in drive(":quit\r", theirs)[2]


# --- :report in two terminals, one folder --------------------------------------------------------------------------
def test_a_report_over_a_page_this_session_did_not_write_keeps_it_and_says_so(tmp_path):
    from test_render import plain

    mine, theirs = trained(3), trained(4)  # another model: another page (the same page byte for byte is not kept)
    page = str(tmp_path / "report.html")
    first = run(mine, f":report {page}")
    assert not first.replaced_unseen  # nothing was there
    again = run(mine, f":report {page}")
    assert not again.replaced_unseen  # its own page, written again
    first_page = open(page, encoding="utf-8").read()
    other = run(theirs, f":report {page}")
    assert other.replaced_unseen
    # kept beside it before it went (s59): it was said to be replaced only once it was gone
    kept = other.kept_as
    assert kept is not None and os.path.basename(kept) == "report.kept.html"  # one copy at most (s59)
    assert open(kept, encoding="utf-8").read() == first_page  # mine's page, as it was
    assert f"{page} held a page this session had not written (another session's, or an earlier one's?): kept as " \
           f"{os.path.basename(kept)} beside it, then replaced" in " ".join(plain(other, width=200).split())
    assert not again.kept_as and not first.kept_as  # a page of its own, or none: nothing to keep


# --- the folder removed under a save ---------------------------------------------------------------------------------
def test_a_folder_removed_under_a_save_says_so_and_the_next_save_makes_it_anew(checkpoint_dir, monkeypatch):
    import shutil

    from minitf_repl.core.checkpoint import store

    mine = trained(3)
    real = store.write_or_link

    def removed_meanwhile(path, data, source):  # `rm -rf checkpoints` in the other terminal, mid-save
        shutil.rmtree(checkpoint_dir, ignore_errors=True)
        return real(path, data, source)

    monkeypatch.setattr(store, "write_or_link", removed_meanwhile)
    with pytest.raises(UserError) as e:
        run(mine, ":save m")
    assert str(e.value) == (f"could not save checkpoint 'm': the folder {checkpoint_dir} was removed while it was "
                            "saved into (by another terminal?); save again, which makes the folder anew")
    monkeypatch.setattr(store, "write_or_link", real)
    assert run(mine, ":save m").step == 3  # as it says


# --- a wait for the folder's lock in :train's autosave ------------------------------------------------------------
def test_the_autosave_waiting_for_another_sessions_save_does_not_promise_that_ctrl_c_stops_it(checkpoint_dir,
                                                                                               monkeypatch):
    mine = trained(3)
    monkeypatch.setattr(locks, "WAIT_NOTICE", 0.0)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    held = folder_lock(checkpoint_dir)
    held.__enter__()

    class TheOtherSaveEnds(Recorder):
        def notice(self, text):
            super().notice(text)
            if "waiting for" in text:
                held.__exit__(None, None, None)

    hooks = TheOtherSaveEnds()
    result = run(mine, ":train steps=1", hooks)
    waits = [n for n in hooks.notices if "waiting for" in n]
    # a Ctrl-C there asks the run to stop, which it has: the autosave goes on, as it should
    assert len(waits) == 1 and waits[0].endswith("(up to 120 s)") and result.saved == "autosave"


# --- :ls while another session's autosave rotates ------------------------------------------------------------------
def test_ls_while_another_sessions_autosave_rotates_lists_each_run_once(checkpoint_dir, monkeypatch):
    from minitf_repl.core.checkpoint import listing

    mine, theirs = trained(3), trained(5)
    run(mine, ":train steps=1")  # autosave: this one's run
    real = listing.checkpoint_info
    rotated = []

    def then_the_other_autosaves(path):  # the other session's run ends right after :ls read the autosave
        row = real(path)
        if path.name == "autosave" and not rotated:
            rotated.append(run(theirs, ":train steps=1"))  # autosave -> autosave-1, its own as autosave
        return row

    monkeypatch.setattr(listing, "checkpoint_info", then_the_other_autosaves)
    rows = {row.name: row.step for row in run(mine, ":ls").rows}
    assert rotated and rows == {"autosave": 6, "autosave-1": 4}  # was {"autosave": 4}: the new run left out


# --- Hugging Face weights gone with a rebuild: where they come back from ---------------------------------------------
def test_the_way_back_to_loaded_weights_is_not_a_checkpoint_another_session_saved_over(checkpoint_dir, tmp_path):
    folder = f"hf:{tmp_path / 'gpt2-like'}"
    exported = tiny_session()
    run(exported, ":set activation=gelu_tanh n_layers=1 n_heads=4 autosave=off")
    run(exported, ":train steps=1")
    run(exported, f":save {folder}")
    mine, theirs = tiny_session(), trained(3)
    run(mine, f":load {folder}")
    run(mine, ":save g")  # the weights, step 0, kept as g too
    run(theirs, ":save g")  # the other terminal saves its own model as g
    hooks = Recorder()
    run(mine, ":set n_layers=2", hooks)
    said = [n for n in hooks.notices if n.startswith(f"the weights loaded from {folder} go with the rebuild")]
    assert said and said[0].endswith(f":load {folder} brings them back")  # was: ":load g", the other's model now


# --- one model in two checkpoints, one of them saved over ---------------------------------------------------------
def test_a_model_whose_named_checkpoint_was_saved_over_is_still_found_in_its_autosave(checkpoint_dir):
    mine, theirs = tiny_session(), trained(5)
    run(mine, ":train steps=3")  # autosave
    run(mine, ":save m")  # the same model, as m
    run(theirs, ":save m")  # the other terminal saves its own model as m
    assert mine.saved_over is None and mine.unsaved_step is None
    from test_repl import drive

    assert "warning" not in drive(":quit\r", mine)[2]  # was: "the model trained to step 3 is in no checkpoint"


# --- a dead save's lock broken by two saves at once (a file system without flock) ---------------------------------
def test_a_stale_lock_broken_by_another_save_first_is_not_broken_again(tmp_path, monkeypatch):
    from minitf_repl.core.errors import CheckpointError

    def no_flock(fd):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(locks, "flock", no_flock)
    held = tmp_path / locks.HELD_FILE
    held.write_text(json.dumps({**locks.lock_owner(), "token": "0" * 16, "pid": 2**22 + 1}))  # a save that died
    live = {**locks.lock_owner(), "token": "1" * 16}  # the other save, alive (this process's pid)
    real = locks._is_stale

    def the_other_breaks_it_first(path):
        judged = real(path)  # stale, as it is now...
        if judged and "0" * 16 in held.read_text():
            held.unlink()  # ... and the other save, which judged so too, breaks it and takes the lock
            held.write_text(json.dumps(live))
        return judged

    monkeypatch.setattr(locks, "_is_stale", the_other_breaks_it_first)
    with pytest.raises(CheckpointError, match="is busy"):
        with folder_lock(tmp_path, wait=0.3):  # was: it removed the other's lock, and both saved at once
            pass
    assert json.loads(held.read_text())["token"] == "1" * 16
