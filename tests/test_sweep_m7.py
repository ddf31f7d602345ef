"""What this session's own look found: each test failed before its fix.

A checkpoint folder that fills up, turns read-only or refuses this user mid-session told the REPL's user to "start
minitf with another checkpoint directory", and nothing else: the REPL could not change its folder, so following the fix
as written lost the model the session had trained. A later fix sent the weights out through `:save hf:DIR` first (the
run and the optimizer stayed behind). Now the folder is a setting: the line says `:set checkpoint_dir=DIR`, which moves
the session to another folder with everything it holds, and the next save goes there (the one-shot shell, whose
process ends anyway, says what it said).
"""

import errno
import os

import pytest
import torch

from test_commands import run, tiny_session

from minitf_repl.core.errors import UserError


def _full_disk(monkeypatch):
    from minitf_repl.core import checkpoint

    def no_space(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(checkpoint.store, "write_file", no_space)


def test_a_save_into_a_full_folder_says_how_to_go_on_in_another_folder_and_that_works(tmp_path, monkeypatch):
    s = tiny_session()
    run(s, ":train steps=2")
    _full_disk(monkeypatch)
    with pytest.raises(UserError) as e:
        run(s, ":save mine")
    line = str(e.value)
    assert line.endswith("free space or choose another folder: :set checkpoint_dir=DIR keeps this model and saves "
                         "there from now on"), line
    # the way out works: the session moves, the model and its run stay, and the save lands in the new folder
    monkeypatch.undo()
    idx = torch.tensor([[1, 2, 3, 4]])
    before, step = s.model.eval()(idx)[0], s.trainer.step
    run(s, f":set checkpoint_dir={tmp_path / 'other'}")
    run(s, ":save mine")
    assert (tmp_path / "other" / "mine").is_dir() and s.trainer.step == step
    assert torch.equal(s.model.eval()(idx)[0], before)
    back = tiny_session()
    run(back, f":set checkpoint_dir={tmp_path / 'other'}")
    run(back, ":load mine")
    assert torch.allclose(back.model.eval()(idx)[0], before, atol=1e-6) and back.trainer.step == step
    assert s.unsaved_step is None  # the model is in a checkpoint: of the folder it was saved in


def test_a_train_whose_autosave_meets_a_full_folder_says_it_too(monkeypatch):
    s = tiny_session()
    _full_disk(monkeypatch)
    result = run(s, ":train steps=2")
    assert result.save_error is not None and ":set checkpoint_dir=DIR" in result.save_error, result.save_error


def test_the_shell_says_what_it_said(monkeypatch):
    from minitf_repl.syntax import SHELL, speaking

    s = tiny_session()
    run(s, ":train steps=1")
    _full_disk(monkeypatch)
    with speaking(SHELL), pytest.raises(UserError) as e:
        run(s, ":save mine")
    assert str(e.value).endswith("free space or start minitf with another checkpoint directory"), str(e.value)


def test_a_read_only_folder_found_before_the_save_says_it_too(monkeypatch):
    from minitf_repl.core import checkpoint
    from minitf_repl.core.checkpoint.layout import ANOTHER_DIR
    from minitf_repl.core.errors import CheckpointError

    s = tiny_session()
    run(s, ":train steps=1")

    def read_only(directory, name):
        raise CheckpointError(f"cannot write in {directory}: the file system is read-only; {ANOTHER_DIR}")

    monkeypatch.setattr(checkpoint, "check_save_target", read_only)
    with pytest.raises(UserError) as e:
        run(s, ":save mine")
    assert "read-only" in str(e.value) and ":set checkpoint_dir=DIR keeps this model" in str(e.value), str(e.value)
