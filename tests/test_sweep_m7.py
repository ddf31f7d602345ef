"""What this session's own look found: each test failed before its fix.

A checkpoint folder that fills up, turns read-only or refuses this user mid-session told the REPL's user to "start
minitf with another checkpoint directory", and nothing else: the REPL cannot change its folder, so following the fix
as written lost the model the session had trained. Where the model's settings have a Hugging Face equivalent, the line
now says how to keep it first: `:save hf:DIR` writes its weights to a folder of the user's choosing and `:load hf:DIR`
brings them back after the restart (the one-shot shell, whose process ends anyway, says what it said).
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


def test_a_save_into_a_full_folder_says_how_to_keep_the_model_before_restarting(tmp_path, monkeypatch):
    s = tiny_session()
    run(s, ":train steps=2")
    _full_disk(monkeypatch)
    with pytest.raises(UserError) as e:
        run(s, ":save mine")
    line = str(e.value)
    assert "start minitf with another checkpoint directory" in line and ":save hf:DIR" in line, line
    assert ":load hf:DIR" in line, line
    # the way out works: the weights leave through the Hugging Face folder and come back
    monkeypatch.undo()
    folder = tmp_path / "kept"
    run(s, f":save hf:{folder}")
    idx = torch.tensor([[1, 2, 3, 4]])
    before = s.model.eval()(idx)[0]
    back = tiny_session()
    run(back, f":load hf:{folder}")
    assert torch.allclose(back.model.eval()(idx)[0], before, atol=1e-5)


def test_a_train_whose_autosave_meets_a_full_folder_says_it_too(monkeypatch):
    s = tiny_session()
    _full_disk(monkeypatch)
    result = run(s, ":train steps=2")
    assert result.save_error is not None and ":save hf:DIR" in result.save_error, result.save_error


def test_a_model_without_a_hugging_face_equivalent_is_not_sent_there(monkeypatch):
    s = tiny_session()
    run(s, ":set n_experts=2")
    run(s, ":train steps=1")
    _full_disk(monkeypatch)
    with pytest.raises(UserError) as e:
        run(s, ":save mine")
    assert "another checkpoint directory" in str(e.value) and "hf:" not in str(e.value), str(e.value)


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
    assert "read-only" in str(e.value) and ":save hf:DIR" in str(e.value), str(e.value)
