"""Files gone wrong under a running session: a full disk, a data file changed, a checkpoint folder missing."""

import errno
import os
from collections import namedtuple

import pytest

from minitf_repl.core.errors import UserError
from minitf_repl.syntax import SHELL, speaking
from test_commands import run, tiny_session
from test_render import plain


def test_the_space_check_before_training_counts_the_optimizer_state(tmp_path, monkeypatch):
    from minitf_repl.core.checkpoint import layout
    from minitf_repl.core.sizes import parameter_count

    s = tiny_session()
    s.checkpoint_dir = tmp_path
    s.data  # the vocabulary, and so the count, is known
    weights = 4 * parameter_count(s.model_config)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(layout.shutil, "disk_usage", lambda path: usage(10**9, 0, weights + 1000))
    with pytest.raises(UserError, match="optimizer state"):  # was: room for the weights passed, the save then failed
        run(s, ":train steps=1 save=s1")


@pytest.mark.parametrize("settings", [{}, {"n_experts": 4, "experts_per_token": 2},
                                      {"bias": True, "activation": "swiglu", "n_kv_heads": 1}, {"ffn": False}])
def test_muon_parameters_are_the_matrices_muon_trains(settings):
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.core.model import MiniTransformerLM
    from minitf_repl.core.optimizers import hidden_matrices
    from minitf_repl.core.sizes import muon_parameters

    config = ModelConfig(d_model=32, n_heads=2, n_layers=2, d_ff=64, vocab_size=20, **settings)
    assert muon_parameters(config) == sum(p.numel() for _, p in hidden_matrices(MiniTransformerLM(config)))


def test_train_says_once_that_its_data_file_changed(tmp_path):
    from test_commands import Recorder

    path = tmp_path / "fox.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    s = tiny_session()
    s.checkpoint_dir = tmp_path / "ck"
    run(s, f":data {path}")
    run(s, ":train steps=2")

    def said() -> list[str]:
        heard = Recorder()
        run(s, ":train steps=2", heard)
        return [n for n in heard.notices if "on disk" in n]

    with path.open("a") as f:
        f.write("more")
    assert len(said()) == 1 and said() == []  # was: the same line at every :train after the change
    path.unlink()
    assert "no longer on disk" in said()[0] and said() == []  # a new change is said again, once


def test_ls_of_a_checkpoint_folder_that_does_not_exist_says_so_and_names_the_near_one(tmp_path):
    s = tiny_session()
    s.checkpoint_dir = tmp_path / "checkpoints"
    run(s, ":train steps=1 save=run1")
    s.checkpoint_dir = tmp_path / "chekpoints"
    text = plain(run(s, ":ls"))
    # was: "no checkpoints in .../chekpoints yet; :save NAME writes one"
    assert "that folder does not exist" in text and f"{tmp_path / 'checkpoints'} holds some" in text, text


def test_a_shell_save_that_fails_for_space_names_the_option_and_is_an_error(tmp_path, monkeypatch):
    from minitf_repl.core import checkpoint
    from minitf_repl.core.checkpoint.layout import ANOTHER_DIR
    from minitf_repl.core.errors import CheckpointError

    def full(*args, **kwargs):
        raise CheckpointError(f"could not save checkpoint 's1': No space left on device; free space or {ANOTHER_DIR}")

    monkeypatch.setattr(checkpoint, "save_checkpoint", full)
    s = tiny_session()
    s.checkpoint_dir = tmp_path
    with speaking(SHELL):
        result = run(s, ":train steps=1 save=s1")
        text = plain(result)
    assert "--checkpoint-dir DIR" in result.save_error and ANOTHER_DIR not in result.save_error
    assert "error: not saved:" in text and "warning" not in text  # exit status 1, as its stderr line says


def test_a_history_entry_cut_by_a_full_disk_is_taken_back(tmp_path, monkeypatch):
    from minitf_repl import repl

    path = tmp_path / "history"
    history = repl.SafeFileHistory(str(path), lambda line: None)
    history._append("ls")
    kept = path.read_bytes()
    write = os.write

    def full(fd, data):  # the first 4,096 bytes fit, then the disk is full
        if len(data) > 4096:
            return write(fd, data[:4096])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(repl.os, "write", full)
    with pytest.raises(OSError):
        history._append("x" * 6000)
    assert path.read_bytes() == kept  # was: a partial entry, which Up recalled in the next session
