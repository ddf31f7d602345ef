"""What a user's-eye sweep of two sessions sharing one checkpoint folder (two REPLs, one-shot commands beside them)
found: each test failed before its fix.

`:ls` while another session saved over a checkpoint listed it as unreadable ("model-... is missing; this checkpoint
is incomplete, save it again"), and a checkpoint another session's rotation deleted meanwhile as "has no
checkpoint.json"; `:load` of one deleted while read said "save it again" too. `:save hf:PATH` said "internal error:
OSError" when a second session wrote the same folder first, and on a full disk. A session took a checkpoint it had
saved or loaded to hold its model after another session saved its own over that name: a rebuild kept no copy and
`:quit` left without a word, and the model was gone. Two saves of one new name at once: the second said "saved", not
"replaced", and a save over a checkpoint another session had saved (`:save`, `:train save=`) never said whose it was.
Two REPLs appending long entries to one history file broke both. A checkpoint folder made read-only around a
writable autosave/ passed :train's check, and the autosave failed after the training. A folder that is a symbolic
link to nowhere, or a checkpoint itself (`--checkpoint-dir checkpoints/run1`), was "no checkpoints yet; :save NAME
writes one" (the save then failed, or nested an autosave inside run1). A save waiting for another session's lock sat
silent for up to 120 s. Saves killed (kill -9) while saving over a name left a copy of the model each in that
checkpoint, removed only by a later save of that same name.
"""

import os

import pytest

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.checkpoint import listing
from minitf_repl.core.errors import UserError
from test_commands import run, tiny_session


# --- :ls while another session saves the same name ---------------------------------------------------------
def test_ls_while_another_session_saves_over_a_checkpoint_lists_the_new_one_not_a_false_missing_file(
        checkpoint_dir, monkeypatch):
    a, b = tiny_session(), tiny_session(seed=3)
    run(a, ":train")
    run(a, ":save run1")
    run(b, ":train")
    lstat, saved = os.lstat, []

    def save_meanwhile(path, *args, **kwargs):  # B's save commits between :ls's read of the manifest and its files
        if not saved and os.fspath(path).endswith(".safetensors") and "run1" in os.fspath(path):
            saved.append(True)
            run(b, ":save run1")
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(listing.os, "lstat", save_meanwhile)
    rows = {row.name: row for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert saved and rows["run1"].error is None, rows["run1"].error  # was "... is missing; ... save it again"
    monkeypatch.undo()
    assert rows["run1"] == ckpt.checkpoint_info(checkpoint_dir / "run1")  # B's checkpoint, as a listing now shows it


# --- :save hf:PATH when another session writes the same folder, or the disk fills ----------------------------
def test_save_hf_to_a_folder_another_session_writes_meanwhile_is_one_line_and_leaves_no_temporary(
        tmp_path, monkeypatch):
    from minitf_repl.core import hf

    s = tiny_session()
    run(s, ":train")
    replace = os.replace

    def other_session_first(src, dst):  # the other `:save hf:out` renamed its folder into place a moment before
        if os.fspath(dst).endswith("out"):
            os.makedirs(os.path.join(dst, "sub"), exist_ok=True)
        return replace(src, dst)

    monkeypatch.setattr(hf.os, "replace", other_session_first)
    with pytest.raises(UserError) as e:  # was "internal error: OSError: [Errno 39] Directory not empty"
        run(s, f":save hf:{tmp_path}/out")
    message = str(e.value)
    assert "\n" not in message and "exists" in message and "; " in message, message
    assert sorted(os.listdir(tmp_path)) == ["out"] and os.listdir(tmp_path / "out") == ["sub"]  # theirs, untouched


def test_save_hf_on_a_full_disk_is_one_line_with_its_fix_and_leaves_no_temporary(tmp_path, monkeypatch):
    import errno

    from minitf_repl.core import hf

    s = tiny_session()
    run(s, ":train")

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(hf, "write_safetensors", full)  # the weights' file, written a tensor at a time (test_sweep_am)
    with pytest.raises(UserError) as e:  # was "internal error: OSError: [Errno 28] No space left on device"
        run(s, f":save hf:{tmp_path}/out")
    message = str(e.value)
    assert "\n" not in message and "No space left on device; free space" in message, message
    assert os.listdir(tmp_path) == []


# --- a checkpoint another session saved over no longer counts as holding this session's model ----------------
def another_session_saves_over(name: str) -> None:
    """Another session trains four new runs (its autosaves rotate this session's out of the folder) and saves its
    own model as `name`, trained further than this session's (a save by name keeps a model trained further aside)."""
    b = tiny_session(seed=3)
    for steps in (2, 2, 2, 2):
        run(b, f":train steps={steps} schedule=new")
    run(b, f":save {name}")


def test_a_rebuild_keeps_the_model_when_another_session_saved_over_the_checkpoint_that_held_it(checkpoint_dir):
    a = tiny_session()
    run(a, ":train")
    run(a, ":save run1")
    another_session_saves_over("run1")
    assert a.unsaved_step == 6  # was None: "run1" was taken to hold this model, and the rebuild kept no copy
    kept = run(a, ":set n_heads=1").kept
    assert kept is not None and kept.startswith("kept-")  # was "run1", which holds the other session's model
    assert ckpt.checkpoint_info(checkpoint_dir / kept).step == 6 and ckpt.checkpoint_info(
        checkpoint_dir / "run1").step == 8


def test_quit_warns_when_another_session_saved_over_the_only_checkpoint_of_the_model(checkpoint_dir):
    from types import SimpleNamespace

    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.syntax import REPL

    a = tiny_session()
    run(a, ":train")
    run(a, ":save run1")
    err = Console(record=True, width=200)
    door = SimpleNamespace(session=a, err=err, front=SimpleNamespace(syntax=REPL))
    assert repl.warn_unsaved(door, None) is None  # on disk: :quit leaves
    another_session_saves_over("run1")
    assert repl.warn_unsaved(door, None) == 6  # was None: :quit left, and the model trained here was lost
    said = " ".join(err.export_text().split())
    assert "the model trained to step 6 is in no checkpoint (run1 holds another model now, or is gone)" in said


def test_a_model_whose_autosave_another_session_rotated_is_still_on_disk(checkpoint_dir):
    a, b = tiny_session(), tiny_session(seed=3)
    run(a, ":train")
    run(b, ":train")  # a's autosave is autosave-1 now: still on disk, nothing to keep or warn of
    assert a.unsaved_step is None and a.saved_over is None
    assert run(a, ":set n_heads=1").kept.startswith("kept-")  # an autosave is copied all the same (as before)


# --- the history file, written by two REPLs at once -----------------------------------------------------------
def _append_history(path: str, letter: str, n: int, go) -> None:
    from minitf_repl.repl import SafeFileHistory

    history = SafeFileHistory(path, lambda msg: None)
    go.wait()
    for i in range(n):
        history.store_string(f"{letter}{i}:" + letter * 20_000)  # a long pasted prompt: past one write's buffer


def test_two_repls_appending_long_entries_to_one_history_file_keep_every_entry_whole(tmp_path):
    import multiprocessing

    from minitf_repl.repl import SafeFileHistory

    path = str(tmp_path / "history")
    context = multiprocessing.get_context("fork")
    go = context.Event()
    writers = [context.Process(target=_append_history, args=(path, letter, 40, go)) for letter in "ab"]
    for p in writers:
        p.start()
    go.set()
    for p in writers:
        p.join(20)
    entries = list(SafeFileHistory(path, lambda msg: None).load_history_strings())
    broken = [e[:12] for e in entries if e != f"{e.split(':')[0]}:" + e[0] * 20_000]
    assert len(entries) == 80 and not broken, (len(entries), broken[:5])  # were interleaved into each other


# --- two sessions saving one new name at once -----------------------------------------------------------------
def test_a_save_that_replaced_a_checkpoint_saved_a_moment_before_by_another_session_says_replaced(
        checkpoint_dir, monkeypatch):
    from minitf_repl.core.checkpoint import store
    from test_render import plain

    a, b = tiny_session(), tiny_session(seed=3)
    run(a, ":train")
    run(b, ":train")
    lock, first = store.folder_lock, []

    class other_session_first(lock):  # B's `:save run1` takes the folder lock a moment before A's
        def __enter__(self):
            if not first:
                first.append(None)
                first[0] = run(b, ":save run1")
            return super().__enter__()

    monkeypatch.setattr(store, "folder_lock", other_session_first)
    result = run(a, ":save run1")
    assert first[0].replaced is False  # B's came first: new
    assert result.replaced is True  # was False: "saved checkpoint run1", though B's run1 was gone without a word
    assert "replaced checkpoint run1" in plain(result)


# --- a checkpoint folder made read-only while a session runs ----------------------------------------------------
def read_only(monkeypatch, folder) -> None:
    """The folder (not the checkpoints in it) made read-only by another terminal's `chmod 555`: os.access says so
    (the suite may run as root, whom modes do not stop)."""
    from minitf_repl.core.checkpoint import layout

    access = os.access
    monkeypatch.setattr(layout.os, "access", lambda path, mode, **kw: False if os.fspath(path) == os.fspath(
        folder) else access(path, mode, **kw))


def test_train_refuses_before_training_when_the_folder_is_read_only_though_its_autosave_is_writable(
        checkpoint_dir, monkeypatch):
    s = tiny_session()
    run(s, ":train")
    read_only(monkeypatch, checkpoint_dir)
    with pytest.raises(UserError) as e:  # was: 6 steps trained, then "could not save checkpoint 'autosave'"
        run(s, ":train steps=6 schedule=new")
    assert f"cannot write in {checkpoint_dir} (permission denied)" in str(e.value) and s.trainer.step == 6
    with pytest.raises(UserError) as e:  # :save over an existing name writes the folder's lock file there too
        run(s, ":save autosave")
    assert f"cannot write in {checkpoint_dir} (permission denied)" in str(e.value)


# --- a checkpoint folder that is a symbolic link to a folder that is gone ---------------------------------------
def test_ls_and_load_in_a_folder_that_is_a_dangling_link_say_so_instead_of_promising_a_save(tmp_path):
    from minitf_repl.core.errors import CheckpointError

    folder = tmp_path / "ck"
    folder.symlink_to(tmp_path / "gone" / "ck")  # the folder it pointed to was removed in another terminal
    for attempt in (lambda: ckpt.list_checkpoints(folder), lambda: ckpt.load_checkpoint(folder, "run1")):
        with pytest.raises(CheckpointError) as e:  # was: "no checkpoints in ... yet; :save NAME writes one"
            attempt()
        assert str(e.value) == (f"{folder} is a symbolic link to {tmp_path / 'gone' / 'ck'}, which does not exist; "
                                "create that folder or start minitf with another checkpoint directory")
    with pytest.raises(CheckpointError) as e:  # what the save said already, and says still
        ckpt.check_save_target(folder, "run1")
    assert str(e.value).startswith(f"{folder} is a symbolic link to ")


# --- a save that waits for another session's ---------------------------------------------------------------------
def test_a_save_waiting_for_another_sessions_save_says_so_instead_of_hanging_silently(checkpoint_dir, monkeypatch):
    import threading
    import time

    from minitf_repl.core.checkpoint import locks
    from test_commands import Recorder

    monkeypatch.setattr(locks, "WAIT_NOTICE", 0.1, raising=False)
    s = tiny_session()
    run(s, ":train")
    recorder, results = Recorder(), []
    with ckpt.folder_lock(checkpoint_dir):  # the other session's save of a large model, still writing
        saver = threading.Thread(target=lambda: results.append(run(s, ":save run1", recorder)))
        saver.start()
        deadline = time.monotonic() + 3
        while not recorder.notices and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not results  # still waiting, as it should
    saver.join(10)
    assert results and results[0].name == "run1"
    assert len(recorder.notices) == 1, recorder.notices  # was: nothing at all, for up to 120 s
    said = recorder.notices[0]
    assert said.startswith("waiting for minitf on ") and f"(pid {os.getpid()}) to finish saving into " in said
    assert "(up to 120 s; Ctrl-C stops this save)" in said


# --- a checkpoint another session's rotation removes while this one reads it -------------------------------------
def test_load_of_a_checkpoint_removed_while_it_is_read_says_it_was_removed_not_save_it_again(
        checkpoint_dir, monkeypatch):
    import shutil

    from minitf_repl.core.checkpoint import loading
    from minitf_repl.core.errors import CheckpointError

    s = tiny_session()
    run(s, ":train")
    run(s, ":save old")
    read = loading.read_data_file

    def removed_meanwhile(path, entry, limit):  # another session's rotation deletes it (shutil.rmtree) mid-read
        shutil.rmtree(path, ignore_errors=True)
        return read(path, entry, limit)

    monkeypatch.setattr(loading, "read_data_file", removed_meanwhile)
    with pytest.raises(CheckpointError) as e:
        ckpt.load_checkpoint(checkpoint_dir, "old")
    said = str(e.value)  # was "... is missing; this checkpoint is incomplete, save it again": there is nothing to save
    assert "\n" not in said and said.startswith("checkpoint 'old' was removed while it was read"), said


def test_ls_leaves_out_a_checkpoint_removed_while_it_is_listed(checkpoint_dir, monkeypatch):
    import shutil

    s = tiny_session()
    run(s, ":train")
    run(s, ":save old")
    info = listing.checkpoint_info

    def removed_meanwhile(path):
        if path.name == "old":
            shutil.rmtree(path)  # after :ls read the folder's names
        return info(path)

    monkeypatch.setattr(listing, "checkpoint_info", removed_meanwhile)
    rows = ckpt.list_checkpoints(checkpoint_dir)
    assert [row.name for row in rows] == ["autosave"]  # was also "old", unreadable: "has no checkpoint.json ..."


# --- what a save killed with kill -9 leaves ------------------------------------------------------------------------
def test_the_data_files_of_saves_killed_while_saving_over_a_name_go_with_the_next_save_of_any_name(checkpoint_dir):
    import shutil

    s = tiny_session()
    run(s, ":train")
    run(s, ":save big")
    big = checkpoint_dir / "big"
    kept = sorted(os.listdir(big))
    for pid in (111, 222, 333):  # three `:save big` killed (kill -9) after their data files, before the commit
        for f in kept:
            if f.endswith(".safetensors"):
                shutil.copy(big / f, big / f.replace(f.split("-")[1], str(pid)).replace(f.split("-")[2][:16], "ab" * 8))
        (big / f".checkpoint.json.tmp-{pid}-{'cd' * 8}").write_bytes(b"{")
    assert len(os.listdir(big)) == len(kept) + 9
    run(s, ":save other")  # the next save into the folder, of another name (the learner moved on from big)
    assert sorted(os.listdir(big)) == kept  # were left until a save of big itself: 3 copies of the model, unseen
    assert ckpt.load_checkpoint(checkpoint_dir, "big").step == 6


# --- :save over another session's checkpoint says whose it was ------------------------------------------------
def test_save_over_a_checkpoint_another_session_saved_says_so_and_over_ones_own_does_not(checkpoint_dir):
    from test_render import plain

    a, b = tiny_session(), tiny_session(seed=3)
    run(a, ":train")
    run(b, ":train steps=8")  # further than A's 6: A's run1 is replaced, not kept aside as a more trained model is
    assert run(a, ":save run1").replaced_unseen is None  # new
    assert run(a, ":save run1").replaced_unseen is None  # its own, replaced
    result = run(b, ":save run1")
    assert result.replaced and result.replaced_unseen == 6  # was only "replaced checkpoint run1", as if it were B's
    said = " ".join(plain(result).split())
    assert "run1 held a model at step 6 that this session had neither saved nor loaded (another session's?): it " \
           "is replaced" in said
    run(a, ":load run1")  # B's, now; A loads it, trains on, and saves over it: A knows that one
    run(a, ":train steps=2")
    assert run(a, ":save run1").replaced_unseen is None


def test_train_save_over_a_checkpoint_another_session_saved_says_so_as_save_does(checkpoint_dir):
    from minitf_repl.dispatch import to_json
    from test_render import plain

    a, b = tiny_session(), tiny_session(seed=3)
    run(a, ":train")
    run(a, ":save run1")
    # as `minitf train --steps 8 --save run1` in another terminal (further than A's 6: a less trained model is kept
    # aside as kept-..., tests/test_sweep_bj.py)
    result = run(b, ":train steps=8 save=run1")
    assert result.replaced and result.replaced_unseen == 6  # was only "replaced checkpoint run1"
    assert "run1 held a model at step 6 that this session had neither saved nor loaded" in " ".join(
        plain(result).split())
    assert to_json(result)["replaced_unseen"] == 6
    assert run(b, ":train steps=1 save=run1").replaced_unseen is None  # its own now


# --- a checkpoint directory that is a checkpoint itself -----------------------------------------------------------
def test_a_checkpoint_directory_that_is_itself_a_checkpoint_is_refused_instead_of_nesting_saves_in_it(
        checkpoint_dir):
    from minitf_repl.core.checkpoint.layout import checkpoint_path
    from minitf_repl.core.errors import CheckpointError

    s = tiny_session()
    run(s, ":train")
    run(s, ":save run1")
    inside = checkpoint_dir / "run1"  # `--checkpoint-dir checkpoints/run1`, or $MINITF_CHECKPOINT_DIR set so
    expected = (f"{inside} is itself a checkpoint (it holds checkpoint.json), not a folder of checkpoints; start "
                f"minitf with its folder {checkpoint_dir} as the checkpoint directory, and load run1 from there")
    for attempt in (lambda: ckpt.list_checkpoints(inside),  # was "no checkpoints in .../run1 yet; ... writes one"
                    lambda: checkpoint_path(inside, "run1"),  # was "no checkpoint named 'run1' ... (none yet)"
                    lambda: ckpt.check_save_target(inside, "autosave")):  # was: an autosave saved inside run1
        with pytest.raises(CheckpointError) as e:
            attempt()
        assert str(e.value) == expected
    assert not (inside / "autosave").exists()
