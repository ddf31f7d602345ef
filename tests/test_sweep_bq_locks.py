"""Sweep bq, abrupt endings: a save held up by a stopped session, the wait in a save's time, saves killed halfway."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
from test_commands import run, tiny_session
from test_render import plain

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.checkpoint import locks
from minitf_repl.core.checkpoint.layout import ANOTHER_DIR
from minitf_repl.core.errors import CheckpointError

linux_proc = pytest.mark.skipif(not os.path.exists("/proc/locks"), reason="a process's state is read in /proc")


def _holder(folder, exclusive: bool) -> subprocess.Popen:
    """Another minitf that takes the folder's lock and then stops, as Ctrl-Z stops it halfway through a save."""
    code = ("import os, signal, sys\n"
            "from minitf_repl.core.checkpoint import locks\n"
            + ("locks.fcntl = None\n" if exclusive else "")
            + f"with locks.folder_lock({str(folder)!r}):\n"
            "    print('held', flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGSTOP)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "held"
    deadline = time.monotonic() + 10
    while _state(child.pid) != "T" and time.monotonic() < deadline:
        time.sleep(0.02)
    return child


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    return text[text.rfind(")") + 2]


# --- 1: a save held up by a stopped session says so at once, with the ways on ----------------------------------------
@linux_proc
@pytest.mark.parametrize("exclusive", [False, True], ids=["flock", "exclusive-create"])
def test_a_save_waiting_on_a_stopped_holder_says_it_is_stopped_at_once_with_how_to_resume_it(tmp_path, monkeypatch,
                                                                                              exclusive):
    from minitf_repl.dispatch import phrase
    from minitf_repl.syntax import REPL

    if exclusive:
        monkeypatch.setattr(locks, "fcntl", None)  # a file system without flock: the owner written in the file tells
    child = _holder(tmp_path, exclusive)
    try:
        start = time.monotonic()
        with pytest.raises(CheckpointError) as e:
            with locks.folder_lock(tmp_path, wait=6):
                pass
        waited = time.monotonic() - start
    finally:
        child.kill()
        child.wait()
    said = str(e.value)
    # was: the whole wait, then "has been saving there for more than 120 s; try again when that save is done", which
    # failed the same way until someone typed `fg` in the stopped one's terminal
    assert waited < 3, waited
    assert f"(pid {child.pid}) is stopped (Ctrl-Z)" in said, said
    assert f"resume it (fg in its terminal, or kill -CONT {child.pid})" in said and said.endswith(ANOTHER_DIR)
    assert said.count("\n") == 0
    assert phrase(e.value, REPL).endswith(":set checkpoint_dir=DIR")  # the REPL's way to another folder


@linux_proc
def test_a_holder_that_runs_is_still_waited_for_not_called_stopped(tmp_path):
    """The guard of the one above: a save that merely takes long is waited for, as before."""
    code = ("import time\nfrom minitf_repl.core.checkpoint import locks\n"
            f"with locks.folder_lock({str(tmp_path)!r}):\n    print('held', flush=True)\n    time.sleep(30)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(CheckpointError, match="has been saving there for more than 1 s; try again"):
            with locks.folder_lock(tmp_path, wait=1):
                pass
    finally:
        child.kill()
        child.wait()


# --- 2: the wait for another save's lock, apart from the save's own time ---------------------------------------------
def test_a_save_says_how_long_it_waited_for_another_saves_lock_and_for_whose(tmp_path, monkeypatch):
    monkeypatch.setattr(locks, "WAIT_NOTICE", 0.3)
    s = tiny_session()
    run(s, ":set autosave=off")
    run(s, ":train")
    outcome, free, told = {}, {}, threading.Event()
    ckpt.save_checkpoint(tmp_path, "first", s.model, s.trainer, s.data.tokenizer.vocab, s.data_spec, outcome=free)
    assert free["waited"] == (0.0, None)  # the lock was free: nothing to say apart
    held = locks.folder_lock(tmp_path)
    held.__enter__()  # another session's save, still writing
    saver = threading.Thread(target=lambda: ckpt.save_checkpoint(
        tmp_path, "shared", s.model, s.trainer, s.data.tokenizer.vocab, s.data_spec, outcome=outcome,
        on_wait=lambda line: told.set()))
    saver.start()
    assert told.wait(30)  # it has waited 0.3 s
    time.sleep(0.3)
    held.__exit__(None, None, None)
    saver.join(30)
    # was: no "waited" at all; the caller's "10.52 s" was mostly the other session's save
    seconds, whose = outcome["waited"]
    assert 0.5 <= seconds < 10 and whose == f"minitf on {locks.lock_owner()['host']} (pid {os.getpid()})"


# --- 3: saves killed halfway: :ls says what they left, :load of the name they never wrote says so --------------------
def _killed_saves(folder):
    """What `:save big2` (a new name) and `:save big` (over big) killed with -9 before their commits leave."""
    big = folder / "big"
    shutil.copytree(big, folder / ".big2.tmp-11154-0123456789abcdef")  # written in full, never renamed into place
    for f in os.listdir(big):
        if f.endswith(".safetensors"):  # the new data files beside the old ones, never named by a manifest
            kind = f.split("-")[0]
            shutil.copy(big / f, big / f"{kind}-11347-fedcba9876543210.safetensors")
    return sum(os.path.getsize(big / f) for f in os.listdir(big) if f.endswith(".safetensors")) // 2


def test_ls_says_what_killed_saves_left_and_that_the_next_save_removes_it(checkpoint_dir):
    from minitf_repl.render import fmt

    s = tiny_session()
    run(s, ":set autosave=off")
    run(s, ":train")
    run(s, ":save big")
    data = _killed_saves(checkpoint_dir)
    whole = sum(os.path.getsize(checkpoint_dir / ".big2.tmp-11154-0123456789abcdef" / f)
                for f in os.listdir(checkpoint_dir / ".big2.tmp-11154-0123456789abcdef"))
    shown = plain(run(s, ":ls"), width=400)
    # was: big listed with its own size alone, and nothing of the copies `du` counted
    assert (f"saves cut short (a minitf killed while saving) left {fmt.size(whole + data)} here: "
            f"big2 ({fmt.size(whole)}: a save of it that never finished), "
            f"big ({fmt.size(data)}: 2 files its checkpoint does not use); "
            "the next save into this folder removes them") in shown, shown
    with ckpt.folder_lock(checkpoint_dir):  # a save running now may be writing them: nothing is said of them
        assert "saves cut short" not in plain(run(s, ":ls"), width=400)
    run(s, ":save other")
    assert "saves cut short" not in plain(run(s, ":ls"), width=400)


def test_load_of_a_name_whose_save_was_killed_says_that_save_never_finished(checkpoint_dir):
    s = tiny_session()
    run(s, ":set autosave=off")
    run(s, ":train")
    run(s, ":save big")
    _killed_saves(checkpoint_dir)
    with pytest.raises(CheckpointError) as e:
        run(s, ":load big2")
    said = str(e.value)
    # was: "no checkpoint named 'big2' in ...; did you mean big? (saved ones: big)", as if it was never saved
    assert said.startswith(f"no checkpoint named 'big2' in {checkpoint_dir}, where a save of big2 never finished "
                           "(a minitf killed while saving?), leaving "), said
    assert " that the next save into that folder removes; did you mean big? (saved ones: big)" in said
    with pytest.raises(CheckpointError) as e:
        run(s, ":load big3")  # another name: nothing of big2's save
    assert "never finished" not in str(e.value)


def test_save_says_its_wait_for_another_saves_lock_apart_from_its_own_time(tmp_path, monkeypatch):
    """"saved checkpoint shared (... 10.52 s)" counted the wait for another session's save (s59)."""
    from test_render import plain

    monkeypatch.setattr(locks, "WAIT_NOTICE", 0.2)
    s = tiny_session()
    run(s, f":set autosave=off checkpoint_dir={tmp_path}")
    run(s, ":train")
    held = locks.folder_lock(tmp_path)
    held.__enter__()  # another session's save, still writing
    done = {}
    saver = threading.Thread(target=lambda: done.setdefault("result", run(s, ":save shared")))
    saver.start()
    time.sleep(1.0)
    held.__exit__(None, None, None)
    saver.join(30)
    result = done["result"]
    assert result.waited >= 0.8 and result.seconds < result.waited, (result.waited, result.seconds)
    assert result.waited_for == f"minitf on {locks.lock_owner()['host']} (pid {os.getpid()})"
    assert f"s waiting for {result.waited_for}'s save)" in " ".join(plain(result, width=200).split())
