"""A tester's findings in hostile environments: -W error with compile=on, an undeletable old history, two folders."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import sys
import warnings

import pytest
import torch

from minitf_repl.core import paths, precision
from minitf_repl.core.checkpoint import layout
from minitf_repl.core.errors import CheckpointError

from test_commands import Recorder, run, tiny_session
from test_render import plain

DEPRECATED = "`torch.jit.script_method` is deprecated. Please switch to `torch.compile` or `torch.export`."


def _warning_as_error():
    """What torch.compile raised under PYTHONWARNINGS=error: a deprecation warning of torch's, made an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.warn(DEPRECATED, DeprecationWarning)


# --- 1: a warning filter that makes torch.compile fail --------------------------------------------------------------
def test_a_compile_failed_by_a_warning_filter_names_the_filter_and_its_fix(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "error")
    with pytest.raises(DeprecationWarning) as caught:
        _warning_as_error()
    line = precision.compile_failure_line(caught.value)
    wrapped = RuntimeError("backend='inductor' raised: DeprecationWarning")  # as torch may wrap it
    wrapped.__cause__ = caught.value
    assert precision.compile_failure_line(wrapped) == line
    assert line == ("torch.compile failed here: a warning filter (PYTHONWARNINGS=error) turned a DeprecationWarning "
                    f"raised while compiling into an error ({DEPRECATED}); start minitf again without "
                    "PYTHONWARNINGS=error to compile; training eagerly")
    monkeypatch.delenv("PYTHONWARNINGS")
    monkeypatch.setattr(sys, "warnoptions", ["error"])
    assert "(python -W error)" in precision.compile_failure_line(DeprecationWarning(DEPRECATED))
    assert "start minitf again without -W error to compile" in precision.compile_failure_line(
        DeprecationWarning(DEPRECATED))
    # an error of the compiler's own says what it said
    assert precision.compile_failure_line(RuntimeError("no")) == "torch.compile failed here (RuntimeError: no); " \
                                                                 "training eagerly"


def test_only_a_filter_that_makes_errors_is_blamed(monkeypatch):
    """PYTHONWARNINGS that ignores warnings was told to be unset where the program's own filter made the error."""
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::DeprecationWarning")
    monkeypatch.setattr(sys, "warnoptions", ["ignore::DeprecationWarning"])  # as Python copies it there
    assert precision.warning_filter() == ('warnings.filterwarnings("error") in this program',
                                          "leave compile warnings out of that filter")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore::UserWarning,error::DeprecationWarning")
    assert precision.warning_filter() == ("PYTHONWARNINGS=error::DeprecationWarning",
                                          "start minitf again without PYTHONWARNINGS=error::DeprecationWarning")
    monkeypatch.setenv("PYTHONWARNINGS", "ignore")
    monkeypatch.setattr(sys, "warnoptions", ["ignore", "default", "e::DeprecationWarning"])  # -W's after it
    assert precision.warning_filter() == ("python -W e::DeprecationWarning",
                                          "start minitf again without -W e::DeprecationWarning")


def test_a_run_that_could_not_compile_says_so_under_its_summary(monkeypatch):
    monkeypatch.setenv("PYTHONWARNINGS", "error")

    def broken(model, **kwargs):
        _warning_as_error()

    which = shutil.which  # a machine without a C++ compiler is told that first
    monkeypatch.setattr(shutil, "which", lambda name, *a, **kw: name if name in precision.cpp_compilers()
                        else which(name, *a, **kw))
    monkeypatch.setattr(torch, "compile", broken)
    s = tiny_session(compile=True)
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    said = [n for n in hooks.notices if "compile" in n]
    assert len(said) == 1 and "a warning filter (PYTHONWARNINGS=error)" in said[0]
    assert not result.compiled and result.compile_failed == said[0]
    text = plain(result)
    # the line said above the table scrolls away: the summary says the run did not compile, and the line why under it
    assert "not compiled (torch.compile failed: the line below says why)" in text, text
    assert text.index("not compiled") < text.index("without PYTHONWARNINGS=error to compile"), text
    again = run(s, ":train steps=1")  # the trainer stays eager without a second notice: the summary says it still
    assert again.compile_failed == said[0] and "not compiled" in plain(again)
    off = tiny_session()
    assert run(off, ":train steps=1").compile_failed is None  # compile=off: nothing failed


# --- 2: the old history, moved from a data dir that cannot lose it ---------------------------------------------------
def _old_history(monkeypatch, tmp_path):
    monkeypatch.delenv("MINITF_HISTORY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    old = tmp_path / "data" / "minitf" / "history"
    old.parent.mkdir(parents=True)
    old.write_text("\n# 2026-01-01\n+:train steps=50\n")
    old.chmod(0o644)
    return old, tmp_path / "state" / "minitf" / "history"


def _other_file_system(monkeypatch, old):
    """rename fails (another file system), and a read-only data dir refuses to delete `old` (mocked: root may)."""
    rename, unlink = os.rename, os.unlink

    def no_rename(src, dst, *args, **kwargs):
        if os.fspath(src) == str(old):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        return rename(src, dst, *args, **kwargs)

    def no_unlink(path, *args, **kwargs):
        if os.fspath(path) == str(old):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(old))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "rename", no_rename)
    monkeypatch.setattr(os, "unlink", no_unlink)


def test_an_old_history_that_cannot_be_deleted_is_copied_privately_and_said(monkeypatch, tmp_path):
    old, new = _old_history(monkeypatch, tmp_path)
    _other_file_system(monkeypatch, old)
    note = paths.adopt_old_history()
    assert note == (f"copied the history from {old} to {new}, but could not delete the old file (Permission denied): "
                    f"it is in both places; delete {old} if you like")
    assert old.exists() and new.read_text() == old.read_text()
    assert stat.S_IMODE(new.stat().st_mode) == 0o600  # as a new history file is: shutil.move's copy was 0644
    assert paths.adopt_old_history() is None  # once


def test_a_copy_cut_short_leaves_nothing_in_the_new_place_and_says_so(monkeypatch, tmp_path):
    old, new = _old_history(monkeypatch, tmp_path)
    _other_file_system(monkeypatch, old)

    def full_disk(source, out, *args):
        out.write(source.read(4))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(shutil, "copyfileobj", full_disk)
    note = paths.adopt_old_history()
    assert note == (f"could not move the history from {old} to {new} (No space left on device): it stays where it "
                    f"was, and the history starts afresh; copy it to {new} to keep it")
    assert old.exists() and not new.exists()  # a partial copy would be taken for the history next time


def test_a_history_moved_by_a_rename_is_private_too(monkeypatch, tmp_path):
    old, new = _old_history(monkeypatch, tmp_path)
    assert paths.adopt_old_history() == f"moved the history from {old} to {new}"
    assert not old.exists() and stat.S_IMODE(new.stat().st_mode) == 0o600


# --- 3: every folder a save needs to write in is named -------------------------------------------------------------
def test_a_save_names_both_folders_it_cannot_write_in(monkeypatch, tmp_path):
    directory = tmp_path / "checkpoints"
    (directory / "autosave").mkdir(parents=True)
    refused = {str(directory), str(directory / "autosave")}
    access = os.access
    # as root every folder is writable: the refusal is mocked
    monkeypatch.setattr(layout.os, "access", lambda p, mode, **kw: str(p) not in refused and access(p, mode, **kw))
    with pytest.raises(CheckpointError) as e:
        layout.check_save_target(directory, "autosave")
    assert str(e.value) == (f"cannot write in {directory / 'autosave'} nor in {directory} (permission denied), and a "
                            "save writes in both; change their permissions or start minitf with another checkpoint "
                            "directory")
    refused.discard(str(directory / "autosave"))  # the folder alone: named alone, as before
    with pytest.raises(CheckpointError) as e:
        layout.check_save_target(directory, "autosave")
    assert str(e.value) == (f"cannot write in {directory} (permission denied); change its permissions or start minitf "
                            "with another checkpoint directory")
