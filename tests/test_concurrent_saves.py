"""Issue "Nothing lost, nothing hangs, part two": checkpoint writes that are safe under concurrency.

Real races between two processes (tests/checkpoint_worker.py `race`: each round starts when both
are ready, and writes are slowed a little so that the saves overlap), many rounds each; the lock's
owner told apart across hosts and PID namespaces; rotation that moves and deletes only autosaves;
kept checkpoints that never share a name and share the bytes of an identical autosave; a dangling
symbolic link refused before training. Each test here fails on the code before the fix.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli
from minitf_repl.commands import REGISTRY
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import CheckpointError
from minitf_repl.dispatch import run_command
from minitf_repl.parsing import parse_line
from minitf_repl.reporter import Reporter
from minitf_repl.session import Session

WORKER = Path(__file__).with_name("checkpoint_worker.py")
_spec = importlib.util.spec_from_file_location("checkpoint_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

posix_only = pytest.mark.skipif(os.name == "nt", reason="flock, PID namespaces and symbolic links are POSIX here")
ROUNDS = 12
TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)
SHELL_TINY = ["--data", "sort", "--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"]


def tiny_session(**train) -> Session:
    train = {"steps": 4, "batch_size": 4, "eval_every": 2, "eval_batches": 1, **train}
    return Session(ModelConfig(**TINY), TrainConfig(**train), data_spec="sort:4", device_name="cpu")


def run(session, line, reporter=None):
    command, args = parse_line(line, REGISTRY)
    return run_command(session, command.name, args, reporter)


def race(tmp_path: Path, kind: str, *options: str, rounds: int = ROUNDS) -> tuple[Path, list[dict]]:
    """Two worker processes saving into one folder at the same moments; their reports."""
    folder = tmp_path / "checkpoints"
    procs = [subprocess.Popen([sys.executable, str(WORKER), "race", str(folder), me, other, str(rounds), kind, *options],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for me, other in (("p0", "p1"), ("p1", "p0"))]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    return folder, reports


def assert_clean(folder: Path) -> None:
    """No temporary directory, stray data file or lock file is left in the folder or its checkpoints."""
    assert sorted(e for e in os.listdir(folder) if e.startswith(".")) == []
    for row in ckpt.list_checkpoints(folder):
        files = set(os.listdir(folder / row.name))
        named = {e["file"] for e in worker.manifest_of(folder / row.name)["files"].values()}
        assert files == named | {ckpt.MANIFEST}, (row.name, files)


# --- real races between two processes -----------------------------------------------------------------
@posix_only
def test_two_processes_autosaving_into_one_folder_lose_nothing(tmp_path):
    # Before: rotation and save were two unlocked steps, and about half the saves failed with
    # "Directory not empty" or "No such file or directory".
    folder, reports = race(tmp_path, "autosave")
    assert [r["errors"] for r in reports] == [[], []]
    assert [r["saved"] for r in reports] == [ROUNDS, ROUNDS]
    rows = ckpt.list_checkpoints(folder)
    assert sorted(r.name for r in rows) == ["autosave", "autosave-1", "autosave-2", "autosave-3"]
    assert [r.error for r in rows] == [None] * 4
    assert_clean(folder)


@posix_only
def test_two_saves_of_one_new_name_at_once_both_succeed(tmp_path):
    # Before: both wrote a temporary folder and renamed it to NAME; the second rename failed
    # ("Directory not empty"), so one of two `:save same` at once was always lost.
    folder, reports = race(tmp_path, "same")
    assert [r["errors"] for r in reports] == [[], []]
    for i in range(ROUNDS):
        assert ckpt.load_checkpoint(folder, f"same-{i}").step == 2
    assert_clean(folder)


@posix_only
def test_two_processes_with_one_pid_do_not_delete_each_others_saves(tmp_path):
    # Two containers sharing a volume: both processes are pid 4242 in their own PID namespace.
    # Before: each took the other's temporary folder for its own debris and deleted it mid-save.
    folder, reports = race(tmp_path, "own", "pid=4242")
    assert [r["errors"] for r in reports] == [[], []]
    names = {row.name for row in ckpt.list_checkpoints(folder) if row.error is None}
    assert names == {f"p{p}-{i}" for p in (0, 1) for i in range(ROUNDS)}
    assert_clean(folder)


@posix_only
def test_without_flock_the_exclusive_create_lock_keeps_saves_apart(tmp_path):
    folder, reports = race(tmp_path, "autosave", "no-flock", rounds=8)
    assert [r["errors"] for r in reports] == [[], []]
    assert [r.error for r in ckpt.list_checkpoints(folder)] == [None] * 4
    assert not (folder / ckpt.HELD_FILE).exists()


# --- the lock's owner ----------------------------------------------------------------------------------
def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@posix_only
@pytest.mark.parametrize("owner, stale", [
    ({}, True),  # this host, this boot, this PID namespace, a pid that is gone: left by a dead save
    ({"host": "another-machine"}, False),  # its pid means nothing here: waited for, never broken
    ({"pidns": "pid:[1]"}, False),  # another container on this host: the same
    ({"alive": True}, False),  # this host and namespace, a live pid (this test's own)
])  # fmt: skip
def test_an_exclusive_lock_is_broken_only_where_its_owner_is_known_dead(tmp_path, monkeypatch, owner, stale):
    def no_flock(fd):
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(ckpt.locks, "flock", no_flock)
    monkeypatch.setattr(ckpt.locks, "LOCK_WAIT", 0.3)
    trainer = worker.make_trainer(1)
    record = {**ckpt.locks.lock_owner(), "token": "0" * 16, "pid": os.getpid() if owner.pop("alive", False) else _dead_pid(),
              **owner}
    tmp_path = tmp_path / ("a_long_folder_name_" * 4)  # a path past 80 characters is named whole: one to type
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ckpt.HELD_FILE).write_text(json.dumps(record))
    save = lambda: ckpt.save_checkpoint(tmp_path, "c", trainer.model, trainer, trainer.data.tokenizer.vocab, "x")  # noqa: E731
    if stale:
        save()
        assert ckpt.load_checkpoint(tmp_path, "c").step == 0 and not (tmp_path / ckpt.HELD_FILE).exists()
    else:
        with pytest.raises(CheckpointError) as e:
            save()
        assert f"is busy: minitf on {record['host']} (pid {record['pid']})" in str(e.value)
        assert f"(if no minitf is saving there, remove {tmp_path / ckpt.HELD_FILE})" in str(e.value)
        assert not (tmp_path / "c").exists()


@posix_only
def test_the_flock_owner_is_named_and_released_with_the_holder(tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt.locks, "LOCK_WAIT", 0.2)
    with ckpt.folder_lock(tmp_path):
        record = json.loads((tmp_path / ckpt.LOCK_FILE).read_text())
        assert record["host"] == socket.gethostname() and record["pid"] == os.getpid()
        assert len(record["token"]) == 16 and record["token"] == ckpt.locks.PROCESS_TOKEN
        with pytest.raises(CheckpointError, match=f"is busy: minitf on {socket.gethostname()}"):
            with ckpt.folder_lock(tmp_path):  # a second holder waits as another process would
                pass
    assert not (tmp_path / ckpt.LOCK_FILE).exists()
    with ckpt.folder_lock(tmp_path):  # free again
        pass


@posix_only
def test_a_flock_held_without_writing_its_owner_does_not_name_the_ended_writer_before_it(tmp_path, monkeypatch):
    import fcntl

    # the lock file's owner is the last holder that could write it; this holder (another user's file, opened
    # read-only) could not, and the one named has ended: it was named as the one saving
    monkeypatch.setattr(ckpt.locks, "LOCK_WAIT", 0.2)
    dead = {**ckpt.locks.lock_owner(), "token": "0" * 16, "pid": _dead_pid()}
    (tmp_path / ckpt.LOCK_FILE).write_text(json.dumps(dead))
    fd = os.open(tmp_path / ckpt.LOCK_FILE, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(CheckpointError) as e:
            with ckpt.folder_lock(tmp_path):
                pass
    finally:
        os.close(fd)
    assert "is busy: another minitf has been saving there" in str(e.value) and str(dead["pid"]) not in str(e.value)
    (tmp_path / ckpt.LOCK_FILE).write_text(json.dumps({**dead, "pid": os.getpid(), "token": "1" * 16}))
    fd = os.open(tmp_path / ckpt.LOCK_FILE, os.O_RDONLY)  # a writer that is alive is named, as before
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(CheckpointError, match=f"is busy: minitf on {socket.gethostname()} \\(pid {os.getpid()}\\)"):
            with ckpt.folder_lock(tmp_path):
                pass
    finally:
        os.close(fd)


# --- rotation deletes only what rotation made ---------------------------------------------------------
def test_rotation_never_deletes_a_checkpoint_the_user_named(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=1 save=autosave-3")  # the user's own run, in the autosaves' series
    mine = (checkpoint_dir / "autosave-3" / ckpt.MANIFEST).read_bytes()
    for steps in (2, 3, 4, 5, 6):
        run(s, f":train steps={steps} schedule=new")
    assert (checkpoint_dir / "autosave-3" / ckpt.MANIFEST).read_bytes() == mine
    assert ckpt.load_checkpoint(checkpoint_dir, "autosave-3").step == 1
    steps = {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}
    # The autosaves step around it: the newest run and the two before it (slot 3 is the user's).
    assert steps == {"autosave": 21, "autosave-1": 15, "autosave-2": 10, "autosave-3": 1}


def test_a_checkpoint_the_user_saved_as_autosave_is_moved_aside_never_deleted(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":save autosave")  # by hand: the user's now
    for steps in (2, 3, 4, 5, 6):
        run(s, f":train steps={steps} schedule=new")
    kinds = {row.name: (row.step, ckpt.store.origin_kind(checkpoint_dir / row.name))
             for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert kinds["autosave-1"] == (1, "save")  # moved once, then skipped by every later rotation
    assert kinds["autosave"] == (21, "autosave") and len(kinds) == 4


def test_a_continued_run_replaces_only_its_own_autosave(checkpoint_dir):
    a, b = tiny_session(), tiny_session(seed=3)

    class StopAt2(Reporter):
        def should_stop(self):
            return a.trainer.step >= 2

    run(a, ":train steps=4", StopAt2())  # a stops half-way: its autosave is at step 2
    run(b, ":train steps=3")  # another session's new run, in the same folder
    run(a, ":train")  # a continues its run: it must not replace b's autosave
    steps = {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert steps == {"autosave": 4, "autosave-1": 3}  # a's own (step 2, moved to autosave-1 by b's) replaced
    assert ckpt.store.is_own_autosave(checkpoint_dir / "autosave", a.token)
    assert ckpt.store.is_own_autosave(checkpoint_dir / "autosave-1", b.token)


# --- kept checkpoints ----------------------------------------------------------------------------------
def test_two_rebuilds_in_one_second_keep_two_checkpoints(checkpoint_dir, monkeypatch):
    from minitf_repl.commands import shared

    monkeypatch.setattr(shared.time, "strftime", lambda fmt, *a: "kept-20260101-120000")  # one second
    s = tiny_session()
    run(s, ":train steps=2")
    first = run(s, ":set n_heads=1").kept
    run(s, ":train steps=3")
    second = run(s, ":set n_heads=2").kept
    assert (first, second) == ("kept-20260101-120000", "kept-20260101-120000-2")
    assert ckpt.load_checkpoint(checkpoint_dir, first).step == 2
    assert ckpt.load_checkpoint(checkpoint_dir, second).step == 3
    (checkpoint_dir / "kept-20260101-120000-3").mkdir()  # taken by something else: skipped, not replaced
    (checkpoint_dir / "kept-20260101-120000-4").write_text("a file")  # likewise
    run(s, ":train steps=1")
    assert run(s, ":set n_heads=1").kept == "kept-20260101-120000-5"


def test_a_kept_checkpoint_shares_the_bytes_of_the_autosave_it_came_from(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":gen n=5")  # sampling draws from its own generator: the state is still the autosave's
    weights = {k: v.clone() for k, v in s.model.state_dict().items()}
    kept = run(s, ":set n_heads=1").kept

    def data_files(name):
        m = worker.manifest_of(checkpoint_dir / name)
        return [checkpoint_dir / name / m["files"][w]["file"] for w in ("model", "state")]

    for a, b in zip(data_files("autosave"), data_files(kept)):
        assert os.stat(a).st_ino == os.stat(b).st_ino and os.stat(a).st_nlink == 2  # one copy on disk
    for steps in (1, 2, 3, 4):  # rotation deletes that autosave at last: the kept one keeps its data
        run(s, f":train steps={steps} schedule=new")
    assert all(os.stat(p).st_nlink == 1 for p in data_files(kept))
    restored = ckpt.load_checkpoint(checkpoint_dir, kept)
    assert restored.step == 3 and all(torch.equal(restored.model_state[k], v) for k, v in weights.items())


def test_an_edited_source_is_not_shared(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=2")
    m = worker.manifest_of(checkpoint_dir / "autosave")
    model_file = checkpoint_dir / "autosave" / m["files"]["model"]["file"]
    data = bytearray(model_file.read_bytes())
    data[-1] ^= 1  # changed behind its manifest's back (same size)
    model_file.write_bytes(bytes(data))
    run(s, ":save copy")
    c = worker.manifest_of(checkpoint_dir / "copy")
    assert os.stat(checkpoint_dir / "copy" / c["files"]["model"]["file"]).st_ino != os.stat(model_file).st_ino
    assert ckpt.load_checkpoint(checkpoint_dir, "copy").step == 2


# --- a save target that cannot work is refused before training -----------------------------------------
@posix_only
def test_a_dangling_symlink_as_the_checkpoint_folder_fails_before_training(tmp_path):
    link = tmp_path / "ck"
    link.symlink_to(tmp_path / "gone")
    start = time.perf_counter()
    result = CliRunner().invoke(cli.app, ["--checkpoint-dir", str(link), *SHELL_TINY, "train", "--steps", "300"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {link} is a symbolic link to {tmp_path / 'gone'}, which does not exist; create that folder or run it "
        "with another checkpoint folder: minitf ") and " --checkpoint-dir DIR train --steps 300; " in lines[0], \
        result.output
    assert lines[0].endswith("--set autosave=off train --steps 300"), lines[0]  # the whole lines, as pasted they run
    assert "trained" not in result.stdout and time.perf_counter() - start < 30
