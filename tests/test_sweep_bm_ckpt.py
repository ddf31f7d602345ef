"""Sweep bm, checkpoints: a save keeping a model trained further, copies of a held model, own autosaves moved."""

from __future__ import annotations

import errno
import os

import pytest
from test_commands import Reporter, run, tiny_session

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.checkpoint import loading, store
from minitf_repl.core.checkpoint.reads import holding
from minitf_repl.core.errors import CheckpointError


def _save(folder, name, session, **options):
    return ckpt.save_checkpoint(folder, name, session.model, session.trainer, session.data.tokenizer.vocab,
                                session.data_spec, keep_trained=True, **options)


def _trained(steps):
    s = tiny_session(steps=steps)
    run(s, ":set autosave=off")
    run(s, ":train")
    return s


def _names(folder):
    return sorted(n for n in os.listdir(folder) if not n.startswith("."))


def _steps(folder):
    return {row.name: row.step for row in ckpt.list_checkpoints(folder)}


# --- 1: a save over a checkpoint trained further leaves a checkpoint of that name at every instant ----------------
def test_a_full_disk_during_a_save_over_a_further_trained_checkpoint_moves_nothing(tmp_path, monkeypatch):
    _save(tmp_path, "best", _trained(3))
    less = _trained(1)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "write_file", full)
    with pytest.raises(CheckpointError, match="No space left on device"):
        _save(tmp_path, "best", less)
    # was: best renamed to kept-... first, then the write failed: `:load best` found no checkpoint of that name
    assert _names(tmp_path) == ["best"] and ckpt.load_checkpoint(tmp_path, "best").step == 3


def test_a_checkpoint_of_the_name_loads_at_every_rename_of_a_save_that_keeps_the_one_trained_further(tmp_path,
                                                                                                   monkeypatch):
    _save(tmp_path, "best", _trained(3))
    less = _trained(1)
    seen = []

    def watched(real):
        def call(src, dst, *args, **kwargs):
            seen.append(ckpt.load_checkpoint(tmp_path, "best").step)  # a kill here, or another process's load
            real(src, dst, *args, **kwargs)
            seen.append(ckpt.load_checkpoint(tmp_path, "best").step)
        return call

    monkeypatch.setattr(os, "rename", watched(os.rename))
    monkeypatch.setattr(os, "replace", watched(os.replace))
    outcome = {}
    _save(tmp_path, "best", less, outcome=outcome)  # was: "no checkpoint named 'best'" between its renames
    monkeypatch.undo()
    kept, step = outcome["kept_aside"]
    assert step == 3 and seen[0] == 3 and seen[-1] == 1 and set(seen) == {1, 3}
    assert _steps(tmp_path) == {"best": 1, kept: 3}
    assert ckpt.load_checkpoint(tmp_path, kept).step == 3


def test_without_hard_links_a_failed_save_over_a_further_trained_checkpoint_moves_nothing_either(tmp_path,
                                                                                              monkeypatch):
    _save(tmp_path, "best", _trained(3))
    less = _trained(1)

    def no_links(*args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")  # what Linux answers on FAT

    monkeypatch.setattr(os, "link", no_links)
    write = store.write_file
    monkeypatch.setattr(store, "write_file", lambda path, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(CheckpointError, match="full"):
        _save(tmp_path, "best", less)
    assert _names(tmp_path) == ["best"] and ckpt.load_checkpoint(tmp_path, "best").step == 3
    monkeypatch.setattr(store, "write_file", write)
    outcome = {}
    _save(tmp_path, "best", less, outcome=outcome)  # with room: renames, the new one written in full first
    assert _steps(tmp_path) == {"best": 1, outcome["kept_aside"][0]: 3}


def test_a_load_that_finds_its_checkpoint_moved_away_blames_no_rotation(checkpoint_dir, monkeypatch):
    import shutil

    s = tiny_session()
    run(s, ":train")
    run(s, ":save old")
    read = loading.read_data_file

    def moved_meanwhile(path, entry, limit):
        shutil.rmtree(path, ignore_errors=True)
        return read(path, entry, limit)

    monkeypatch.setattr(loading, "read_data_file", moved_meanwhile)
    with pytest.raises(CheckpointError) as e:
        ckpt.load_checkpoint(checkpoint_dir, "old")
    said = str(e.value)  # was "(another minitf's save rotated it out?)" of a save that had replaced or moved it
    assert "rotated it out" not in said and "moved or replaced it" in said, said


# --- 2: a model another checkpoint of the folder holds is not kept again --------------------------------------------
def test_alternating_saves_over_a_name_keep_no_copy_of_a_model_another_checkpoint_holds(tmp_path):
    five, two = _trained(3), _trained(1)
    _save(tmp_path, "other", five)
    for _ in range(3):
        _save(tmp_path, "big", five)
        outcome = {}
        _save(tmp_path, "big", two, outcome=outcome)
        # was: a kept-... copy each time, all of them `other`'s model (58 copies, 533 MB)
        assert outcome.get("kept_aside") is None and outcome["held_by"] == ("other", 3)
    assert _steps(tmp_path) == {"other": 3, "big": 1}


def test_holding_finds_a_model_by_its_weights_and_never_by_a_file_changed_behind_its_manifest(tmp_path):
    five = _trained(3)
    outcome = {}
    _save(tmp_path, "other", five, outcome=outcome)
    model = outcome["model_file"]
    assert holding(tmp_path, model, 3) == "other"  # another save's manifest (its own checksum), the same weights
    assert holding(tmp_path, model, 2) is None and holding(tmp_path, model, 3, besides={"other"}) is None
    path = tmp_path / "other" / model["file"]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))  # the same size, other bytes: a load of `other` would refuse it
    assert holding(tmp_path, model, 3) is None
    # and the save then keeps a copy, the model being in no checkpoint that loads
    _save(tmp_path, "big", five)
    outcome = {}
    _save(tmp_path, "big", _trained(1), outcome=outcome)
    assert outcome["kept_aside"] is not None and "held_by" not in outcome


# --- 3: a continued run replaces its own autosave wherever another session's rotation moved it -------------------
def test_a_continued_run_replaces_its_own_autosave_that_another_sessions_run_rotated_on(checkpoint_dir):
    a, b, c = tiny_session(), tiny_session(seed=3), tiny_session(seed=4)

    class StopAt2(Reporter):
        def should_stop(self):
            return a.trainer.step >= 2

    run(c, ":train steps=1")  # an older run, which must stay
    run(a, ":train steps=4", StopAt2())  # a stops half-way: its autosave at step 2
    run(b, ":train steps=3")  # another session's run: a's autosave goes to autosave-1
    run(a, ":train")  # a continues
    # was: a's stale step-2 autosave rotated on to autosave-2 and held a slot; c's run pushed to autosave-3
    assert _steps(checkpoint_dir) == {"autosave": 4, "autosave-1": 3, "autosave-2": 1}
    assert ckpt.store.is_own_autosave(checkpoint_dir / "autosave", a.token)
    assert ckpt.store.is_own_autosave(checkpoint_dir / "autosave-1", b.token)
    assert ckpt.store.is_own_autosave(checkpoint_dir / "autosave-2", c.token)
    assert not [n for n in os.listdir(checkpoint_dir) if ".tmp-" in n]


def test_a_continued_runs_autosave_that_fails_to_commit_puts_its_own_earlier_one_back(checkpoint_dir, monkeypatch):
    a, b = tiny_session(), tiny_session(seed=3)

    class StopAt2(Reporter):
        def should_stop(self):
            return a.trainer.step >= 2

    run(a, ":train steps=4", StopAt2())  # a's autosave at step 2
    run(b, ":train steps=3")  # b's run: a's autosave goes to autosave-1

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ckpt.store, "_save_new", full)
    result = run(a, ":train")  # a continues; its autosave fails after the rotation moved its own earlier one aside
    monkeypatch.undo()
    assert result.save_error and result.saved is None
    # was: a's step-2 autosave left hidden as .autosave-1.tmp-..., debris the next save deleted
    steps = _steps(checkpoint_dir)
    assert 2 in steps.values() and 3 in steps.values(), steps
