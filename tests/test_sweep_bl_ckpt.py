"""Sweep bl, checkpoints: a named save's folder of other files, both ways on, --load's misses, pinned slots, :save."""

from __future__ import annotations

import os

import pytest
import torch
from test_checkpoint_safety import data_file, rewrite_tensors
from test_commands import run, tiny_session
from test_render import plain

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.checkpoint.layout import SAVE_AGAIN
from minitf_repl.core.errors import CheckpointError, UserError

posix_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")


def _folder_of_notes(folder):
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "a.txt").write_text("hi")


# --- 1: a save by name into a folder of other files is refused before the training --------------------------------
def test_the_save_target_check_refuses_a_folder_of_other_files_for_a_save_by_name_only(tmp_path):
    _folder_of_notes(tmp_path)
    with pytest.raises(CheckpointError, match=r"notes is a folder that holds no checkpoint but 1 other file \(a.txt\)"):
        ckpt.check_save_target(tmp_path, "notes", by_name=True)  # was: passed, and the save failed after training
    (tmp_path / "autosave").mkdir()
    (tmp_path / "autosave" / "mine.txt").write_text("x")
    assert ckpt.check_save_target(tmp_path, "autosave") == tmp_path / "autosave"  # rotation moves it aside: fine
    (tmp_path / "empty").mkdir()
    assert ckpt.check_save_target(tmp_path, "empty", by_name=True) == tmp_path / "empty"  # no one's files


def test_save_checkpoint_refuses_a_folder_of_other_files_before_it_serialises_anything(checkpoint_dir, monkeypatch):
    from minitf_repl.core.checkpoint import store

    s = tiny_session(steps=1)
    run(s, ":train")
    _folder_of_notes(checkpoint_dir)
    monkeypatch.setattr(store, "encode_model", lambda model: pytest.fail("serialised before the check"))
    with pytest.raises(CheckpointError, match="holds no checkpoint but 1 other file"):
        ckpt.save_checkpoint(checkpoint_dir, "notes", s.model, s.trainer, s.data.tokenizer.vocab, "sort:4")
    assert sorted(p.name for p in (checkpoint_dir / "notes").iterdir()) == ["a.txt"]


def test_train_save_into_a_folder_of_other_files_is_refused_before_any_step(checkpoint_dir):
    s = tiny_session(steps=3)
    _folder_of_notes(checkpoint_dir)
    with pytest.raises(CheckpointError, match="holds no checkpoint but 1 other file"):
        run(s, ":train save=notes")  # was: three steps trained, then "not saved", and a one-shot run lost the model
    assert not s.has_model or s.trainer.step == 0


# --- 2: a checkpoint that cannot be used gives both ways on --------------------------------------------------------
def _saved(checkpoint_dir, name="c"):
    run(tiny_session(steps=1), f":train save={name}")
    return checkpoint_dir / name


def _load_error(name="c") -> str:
    with pytest.raises(UserError) as e:
        run(tiny_session(), f":load {name}")
    return str(e.value)


def test_a_missing_data_file_gives_both_ways_on(checkpoint_dir):
    data_file(_saved(checkpoint_dir), "state").unlink()
    said = _load_error()
    # was "...; this checkpoint is incomplete, save it again", which one who was sent a copy cannot do
    assert "is missing, so this checkpoint is incomplete" in said and said.endswith(SAVE_AGAIN), said


@posix_only
def test_a_data_file_that_is_a_fifo_gives_both_ways_on(checkpoint_dir):
    target = data_file(_saved(checkpoint_dir), "model")
    target.unlink()
    os.mkfifo(target)
    said = _load_error()
    assert said == f"{target} is not a regular file (a FIFO), so this checkpoint cannot be used; {SAVE_AGAIN}"


def test_a_pickle_in_place_of_the_manifest_gives_both_ways_on(checkpoint_dir):
    path = _saved(checkpoint_dir)
    torch.save({"a": 1}, path / ckpt.MANIFEST)
    said = _load_error()
    assert "is a pickle (torch.save) file" in said and said.endswith(SAVE_AGAIN), said  # was "...save it again"


def test_a_single_value_that_is_not_finite_is_said_in_the_singular(checkpoint_dir):
    path = _saved(checkpoint_dir)

    def one_nan(tensors):
        key = next(k for k in sorted(tensors) if k.startswith("blocks.0.attn"))
        tensors[key] = tensors[key].clone()
        tensors[key].view(-1)[0] = float("nan")

    rewrite_tensors(path, "model", one_nan)
    said = _load_error()
    assert "holds 1 value that is not finite (NaN or infinity)" in said, said  # was "holds 1 values that are"


# --- 3: --load of a file here, and of a folder that does not exist -------------------------------------------------
def test_load_of_a_torch_save_file_here_says_it_is_a_file_never_opened(checkpoint_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    torch.save({"w": torch.zeros(2)}, tmp_path / "ckpt.pt")
    _saved(checkpoint_dir, "other")
    said = _load_error("ckpt.pt")  # was: "no checkpoint named 'ckpt.pt' in ...; saved ones: other"
    assert said.startswith(f"ckpt.pt here is a file, not a checkpoint in {checkpoint_dir}: minitf never opens a .pt "
                           "or pickle (torch.save) file"), said
    assert "MiniTransformerLM" in said and "docs/checkpoints-and-safety.md" in said
    (tmp_path / "notes.txt").write_text("hi")
    assert _load_error("notes.txt").startswith("notes.txt here is a file, not a checkpoint in ")


def test_load_from_a_folder_that_does_not_exist_says_so_and_where_the_checkpoint_is(checkpoint_dir, tmp_path):
    _saved(checkpoint_dir, "straight")
    typo = checkpoint_dir.parent / "chekpoints"
    with pytest.raises(CheckpointError) as e:
        ckpt.load_checkpoint(typo, "straight")
    said = str(e.value)  # was "... (there are none yet); save one under that name first"
    assert said == (f"no checkpoint named 'straight' in {typo} (there are none yet: that folder does not exist); "
                    f"{checkpoint_dir} holds one: give that folder as the checkpoint directory"), said
    with pytest.raises(CheckpointError, match="that folder does not exist\\); check the folder's name, or save one"):
        ckpt.load_checkpoint(typo, "nowhere")


# --- 4: :ls marks the autosave slots a checkpoint saved by name holds ---------------------------------------------
def test_ls_names_the_autosave_slots_a_save_by_name_pins(checkpoint_dir):
    s = tiny_session(steps=2)
    run(s, ":train")
    run(s, ":save autosave")
    run(s, ":save autosave-2")
    for _ in range(4):
        run(s, ":train steps=2 schedule=new")
    listed = run(s, ":ls")
    assert listed.pinned == ["autosave-2", "autosave-1"], listed.pinned  # was: no field, they read as earlier runs
    assert {r.name: r.origin for r in listed.rows}["autosave-3"] == "autosave"
    words = plain(listed, width=200)
    assert ("autosave-2 and autosave-1 are not autosaves (saved by name, or kept, or with a manifest that does not "
            "read): rotation keeps them") in words


def test_ls_does_not_call_a_damaged_autosave_pinned_that_rotation_moves(checkpoint_dir):
    s = tiny_session(steps=2)
    for _ in range(3):
        run(s, ":train steps=2 schedule=new")
    for data in (checkpoint_dir / "autosave-1").glob("*.safetensors"):
        data.unlink()  # its manifest reads: rotation moves it on as an autosave
    listed = run(s, ":ls")
    assert {r.name: r.error is not None for r in listed.rows}["autosave-1"]
    assert listed.pinned == [], listed.pinned  # was ["autosave-1"]: "rotation keeps it", then it moved


# --- 5: a model that has not trained is saved, and said to be random -----------------------------------------------
def test_save_after_a_rebuild_says_the_model_has_not_trained(checkpoint_dir):
    from test_commands import Recorder

    s = tiny_session(steps=1)
    run(s, ":train")
    run(s, ":set n_layers=2")  # rebuilt: the trained model kept aside, a new one at step 0
    heard = Recorder()
    assert run(s, ":save a100", heard).step == 0
    assert any("this model has not trained yet: a100 holds its random initial weights" in n for n in heard.notices), \
        heard.notices  # was: saved without a word, where :save before any :train says "train first"
    trained = tiny_session(steps=1)
    run(trained, ":train")
    heard = Recorder()
    run(trained, ":save b", heard)
    assert not any("not trained yet" in n for n in heard.notices)


def test_a_folder_without_its_manifest_gives_both_ways_on_and_the_folders_own(checkpoint_dir):
    s = tiny_session(steps=1)
    run(s, ":train")
    run(s, ":save copied")
    (checkpoint_dir / "copied" / "checkpoint.json").unlink()  # an interrupted copy
    error = next(r.error for r in run(s, ":ls").rows if r.name == "copied")
    assert "save the checkpoint again, or copy it again from where it came, or remove that directory" in error, error


def test_the_default_folder_before_any_save_is_not_told_to_check_its_name(checkpoint_dir):
    from minitf_repl.core.errors import UserError

    with pytest.raises(UserError) as e:
        run(tiny_session(), ":load run1")  # $MINITF_CHECKPOINT_DIR: made by the first save, none yet
    assert "check the folder's name" not in str(e.value) and "save one under that name first" in str(e.value)
