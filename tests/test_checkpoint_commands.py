""":save, :load, :ls and autosave through the command surface (run_command) and the shell (CliRunner).

The engine (core/checkpoint.py) has its own tests; these check what a user does with it: the names,
the defaults, what `:load` brings back (model, optimizer, run, data, settings, random state), and that
a checkpoint that cannot be used is one UserError with the session's model left as it was.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from minitf_repl.commands import (
    REGISTRY,
    LoadResult,
    LsResult,
    SaveResult,
    TrainResult,
)
from minitf_repl.dispatch import run_command, to_json
from minitf_repl.parsing import parse_line
from minitf_repl.reporter import Reporter
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.paths import default_checkpoint_dir
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import CheckpointError, DeviceError, UserError
from minitf_repl.session import Session

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)
TEXT = "the quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs!\n" * 12


def tiny_session(data: str = "sort:4", checkpoint_dir=None, dropout: float = 0.0, **train) -> Session:
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2, **train}
    return Session(ModelConfig(**TINY, dropout=dropout), TrainConfig(**train), data_spec=data, device_name="cpu",
                   checkpoint_dir=checkpoint_dir)  # fmt: skip


class StopAfter(Reporter):
    def __init__(self, n: int):
        self.n, self.seen = n, 0

    def on_step(self, info):
        self.seen += 1

    def should_stop(self):
        return self.seen >= self.n


def run(session, line, hooks=None):
    command, args = parse_line(line, REGISTRY)
    return run_command(session, command.name, args, hooks)


def weights(session) -> dict:
    return {k: v.detach().clone() for k, v in session.model.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def snapshot(s: Session) -> dict:
    return {
        "configs": (s.model_config, s.train_config, s.gen_config.to_dict(), s.data_spec, s.device_name, s.autosave),
        "objects": (s._model, s._trainer, s._data),
        "weights": weights(s),
        "trainer": (s.trainer.step, s.trainer.run_start, s.trainer.run_steps, len(s.trainer.history), s.trainer.config),
        "optimizer": {k: v.clone() for k, v in s.trainer.optimizer.state_dict()["state"][0].items()},
        "rng": torch.get_rng_state(),
    }


def assert_unchanged(s: Session, before: dict) -> None:
    after = snapshot(s)
    assert after["configs"] == before["configs"]
    assert all(a is b for a, b in zip(after["objects"], before["objects"]))
    assert after["trainer"] == before["trainer"]
    assert same_weights(after["weights"], before["weights"])
    assert all(torch.equal(before["optimizer"][k], after["optimizer"][k]) for k in before["optimizer"])
    assert torch.equal(after["rng"], before["rng"])


# --- save, ls ----------------------------------------------------------------------------------------
def test_save_ls_and_replace(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=4")
    result = run(s, ":save run1")
    assert isinstance(result, SaveResult)
    assert (result.name, result.step, result.replaced) == ("run1", 4, False)
    assert result.path == str(checkpoint_dir / "run1") and os.path.isdir(result.path)
    on_disk = sum(f.stat().st_size for f in (checkpoint_dir / "run1").iterdir())
    assert result.size_bytes == on_disk and result.seconds >= 0
    run(s, ":train steps=2")
    again = run(s, ":save run1")
    assert again.replaced and again.step == 6

    listing = run(s, ":ls")
    assert isinstance(listing, LsResult) and listing.directory == str(checkpoint_dir)
    by_name = {row.name: row for row in listing.rows}
    assert set(by_name) == {"run1", "autosave", "autosave-1"}  # the second run's autosave kept the first's
    row = by_name["run1"]
    assert (row.step, row.data_spec, row.error) == (6, "sort:4", None)
    assert row.val_loss == s.trainer.history[-1]["val_loss"] and row.size_bytes == again.size_bytes
    assert run(s, ":checkpoints").rows == listing.rows  # the alias


def test_save_default_name_and_no_model_yet(checkpoint_dir):
    s = tiny_session()
    with pytest.raises(UserError, match="no model to save yet"):
        run(s, ":save")
    assert not s.has_model and not (checkpoint_dir / "last").exists()
    run(s, ":train steps=1")
    assert run(s, ":save").name == "last"
    assert (checkpoint_dir / "last" / "checkpoint.json").is_file()


def test_ls_of_a_folder_that_does_not_exist_yet(tmp_path):
    s = tiny_session(checkpoint_dir=tmp_path / "none")
    result = run(s, ":ls")
    assert result.rows == [] and result.directory == str(tmp_path / "none")
    assert not (tmp_path / "none").exists()  # listing creates nothing


def test_ls_lists_a_broken_checkpoint_with_its_error(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=1 save=good")
    (checkpoint_dir / "broken").mkdir()
    rows = {row.name: row for row in run(s, ":ls").rows}
    assert rows["good"].error is None and "no checkpoint.json" in rows["broken"].error


def test_checkpoint_dir_env_and_argument(monkeypatch, tmp_path):
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "env"))
    assert Session().checkpoint_dir == tmp_path / "env" == default_checkpoint_dir()
    assert Session(checkpoint_dir=tmp_path / "arg").checkpoint_dir == tmp_path / "arg"
    monkeypatch.delenv("MINITF_CHECKPOINT_DIR")
    assert Session().checkpoint_dir == default_checkpoint_dir() == Path.cwd() / "checkpoints"


# --- autosave ----------------------------------------------------------------------------------------
def test_train_autosaves_at_the_end_and_when_stopped(checkpoint_dir):
    s = tiny_session()
    result = run(s, ":train steps=3")
    assert isinstance(result, TrainResult) and result.saved == "autosave" and result.save_error is None
    assert ckpt.load_checkpoint(checkpoint_dir, "autosave").step == 3
    stopped = run(s, ":train steps=10", StopAfter(2))
    assert stopped.stopped and stopped.saved == "autosave"
    c = ckpt.load_checkpoint(checkpoint_dir, "autosave")
    assert c.step == 5 and c.trainer_state["run_steps"] == 10  # the stopped run continues after :load


def test_autosave_off_and_an_explicit_save(checkpoint_dir):
    s = tiny_session()
    result = run(s, ":set autosave=off")
    assert result.changed == {"autosave": (True, False)} and not s.autosave
    assert run(s, ":config").checkpoints == {"dir": str(checkpoint_dir), "autosave": False}
    assert run(s, ":train steps=2").saved is None
    assert not (checkpoint_dir / "autosave").exists()
    assert run(s, ":train steps=2 save=mine").saved == "mine"  # save= works with autosave off
    assert ckpt.load_checkpoint(checkpoint_dir, "mine").step == 4 and not (checkpoint_dir / "autosave").exists()
    run(s, ":set autosave=on")
    assert run(s, ":train steps=1 save=other").saved == "other"  # save= replaces the autosave
    assert not (checkpoint_dir / "autosave").exists()


@pytest.mark.parametrize("name", ["../x", ".hidden", "a b", "x" * 101, "", "/etc/passwd"])
def test_a_bad_save_name_fails_before_training(checkpoint_dir, name):
    s = tiny_session()
    run(s, ":train steps=2")
    before = snapshot(s)
    with pytest.raises(UserError) as e:
        run_command(s, "train", {"steps": 3, "save": name})
    assert len(str(e.value)) < 200
    assert_unchanged(s, before)
    assert not (checkpoint_dir.parent / "x").exists()


def test_a_checkpoint_dir_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    s = tiny_session(checkpoint_dir=blocker)
    run(s, ":set autosave=off")
    assert run(s, ":train steps=2").steps == 2  # nothing to save: trains
    run(s, ":set autosave=on")
    before = snapshot(s)
    with pytest.raises(CheckpointError, match="is a file, not a directory"):
        run(s, ":train steps=2")  # refused before training: the autosave could not be written
    with pytest.raises(CheckpointError, match="is a file, not a directory"):
        run(s, ":train steps=2 save=x")
    with pytest.raises(CheckpointError, match="is a file, not a directory"):
        run(s, ":save x")
    with pytest.raises(CheckpointError, match="is a file, not a directory"):
        run(s, ":ls")
    assert_unchanged(s, before)
    assert blocker.read_text() == "not a folder"


# --- load ----------------------------------------------------------------------------------------------
def test_load_restores_everything(checkpoint_dir, tmp_path):
    corpus = tmp_path / "fox.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    a = tiny_session(data=str(corpus))
    run(a, ":train steps=6 lr=0.01", StopAfter(4))
    run(a, ":save fox")

    b = tiny_session(data="reverse:5")
    run(b, ":set n_layers=2 d_model=64 lr=0.02")
    run(b, ":train steps=1")
    result = run(b, ":load fox")
    assert isinstance(result, LoadResult)
    assert (result.name, result.step, result.run_remaining, result.data_spec) == ("fox", 4, 2, str(corpus))
    assert result.model_config == a.model_config.to_dict() and result.n_params == a.model.num_parameters()
    assert result.val_loss == [h for h in a.trainer.history if h["val_loss"] is not None][-1]["val_loss"]
    assert result.saved_at and result.path == str(checkpoint_dir / "fox")
    # the session is the saved one: model, data, settings, run and history
    assert b.model_config == a.model_config and b.train_config == a.train_config and b.train_config.lr == 0.01
    assert b.data_spec == str(corpus) and b.data.tokenizer.vocab == a.data.tokenizer.vocab
    assert b.model is b.trainer.model and b.trainer.data is b.data and b.model.config == b.model_config
    assert same_weights(weights(a), weights(b))
    assert b.trainer.history == a.trainer.history and b.trainer.step == 4 and b.trainer.run_remaining == 2
    assert b.status().step == 4 and b.status().data == str(corpus)
    assert run(b, ":config").model["n_layers"] == 1


def test_load_then_train_equals_never_having_saved(checkpoint_dir):
    """Continuing after :load gives bit-for-bit the parameters of continuing without it (dropout on,
    so the global random state matters too)."""
    a = tiny_session(dropout=0.1)
    run(a, ":train steps=6", StopAfter(3))
    run(a, ":save mid")
    run(a, ":train")  # continues the stopped run: steps 4..6
    reference = weights(a)

    b = tiny_session(data="reverse:4", dropout=0.2, seed=7)
    run(b, ":train steps=2")  # other weights, other random state
    torch.rand(100)
    run(b, ":load mid")
    result = run(b, ":train")
    assert result.resumed and result.total_steps == 6
    assert same_weights(reference, weights(b))
    losses = [[(h["step"], h["train_loss"], h["val_loss"], h["lr"]) for h in x.trainer.history] for x in (a, b)]
    assert losses[0] == losses[1]


def test_load_without_a_name_lists_the_choices(checkpoint_dir):
    s = tiny_session()
    with pytest.raises(UserError, match="no checkpoints in .* yet; :save NAME"):
        run(s, ":load")
    run(s, ":train steps=1 save=first")
    with pytest.raises(UserError, match=r"which checkpoint\? .*:load first"):
        run(s, ":load")


def test_load_interrupted_changes_nothing(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=2 save=x")
    run(s, ":train steps=2")
    before = snapshot(s)

    class Stopped(Reporter):
        def should_stop(self):
            return True

    with pytest.raises(UserError, match="load of x interrupted; nothing changed"):
        run(s, ":load x", Stopped())
    assert_unchanged(s, before)


# --- checkpoints that cannot be used: one error, the session untouched -------------------------------
def _flip_byte(path):
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x20
    path.write_bytes(bytes(raw))


def _data_file(folder, kind):
    return next(folder.glob(f"{kind}-*.safetensors"))


def _future_version(folder):
    manifest = folder / "checkpoint.json"
    doc = json.loads(manifest.read_text())
    doc["format_version"] = 99
    manifest.write_text(json.dumps(doc))


def _pickled_weights(folder):
    torch.save({"token_embedding.weight": torch.zeros(3)}, _data_file(folder, "model"))


def _pickled_manifest(folder):
    import pickle

    (folder / "checkpoint.json").write_bytes(pickle.dumps({"format": "minitf-checkpoint"}))


def _truncated(folder):
    path = _data_file(folder, "state")
    path.write_bytes(path.read_bytes()[:100])


def _missing_weights(folder):
    _data_file(folder, "model").unlink()


def _manifest_is_a_folder(folder):
    (folder / "checkpoint.json").unlink()
    (folder / "checkpoint.json").mkdir()


def _empty_folder(folder):
    shutil.rmtree(folder)
    folder.mkdir()


def _a_plain_file(folder):
    shutil.rmtree(folder)
    folder.write_text("hello")


BAD = [
    ("corrupt manifest", lambda f: _flip_byte(f / "checkpoint.json"), "checksum|not valid JSON"),
    ("corrupt weights", lambda f: _flip_byte(_data_file(f, "model")), "does not match its checksum"),
    ("truncated state", _truncated, "truncated"),
    ("pickled weights", _pickled_weights, "pickle"),
    ("pickled manifest", _pickled_manifest, "pickle"),
    ("future version", _future_version, "newer minitf"),
    ("missing weights", _missing_weights, "is missing"),
    ("manifest is a folder", _manifest_is_a_folder, "is a directory"),
    ("empty folder", _empty_folder, "no checkpoint.json"),
    ("a plain file", _a_plain_file, "is a file"),
]


@pytest.mark.parametrize("what, damage, message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_checkpoint_is_one_error_and_the_session_is_untouched(checkpoint_dir, no_unpickling, what, damage,
                                                                     message):  # fmt: skip
    s = tiny_session()
    run(s, ":train steps=3 save=victim")
    damage(checkpoint_dir / "victim")
    run(s, ":train steps=2", StopAfter(1))  # a different state than the checkpoint's, mid-run
    before = snapshot(s)
    with pytest.raises(CheckpointError) as e:
        run(s, ":load victim")
    assert __import__("re").search(message, str(e.value)), str(e.value)
    assert "\n" not in str(e.value) and len(str(e.value)) < 400
    assert_unchanged(s, before)


@pytest.mark.parametrize("name, message", [
    ("nothing", "no checkpoint named 'nothing'"),
    ("../x", "not a valid checkpoint name"),
    ("/etc/passwd", "not a valid checkpoint name"),
    ("a" * 100_000, "not a valid checkpoint name"),
])  # fmt: skip
def test_loading_a_missing_or_bad_name(checkpoint_dir, name, message):
    s = tiny_session()
    run(s, ":train steps=2 save=present")
    before = snapshot(s)
    with pytest.raises(CheckpointError) as e:
        run_command(s, "load", {"name": name})
    assert message in str(e.value) and len(str(e.value)) < 300
    if name == "nothing":
        assert "saved ones: autosave, present" in str(e.value) or "saved ones: present" in str(e.value)
    assert_unchanged(s, before)


@pytest.mark.parametrize("change", ["gone", "other vocabulary"])
def test_a_checkpoint_whose_data_is_gone_still_loads_to_generate(checkpoint_dir, tmp_path, change):
    """The vocabulary is in the checkpoint: only training needs the file (issue: "Nothing lost")."""
    corpus = tmp_path / "fox.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    run(tiny_session(data=str(corpus)), ":train steps=2 save=fox")
    if change == "gone":
        corpus.unlink()
    else:
        corpus.write_text(TEXT + "XYZ", encoding="utf-8")
    s = tiny_session()
    loaded = run(s, ":load fox")
    assert loaded.step == 2 and "generation works, training does not" in loaded.data_missing
    assert ("not available" if change == "gone" else "vocabulary changed") in loaded.data_missing
    text = run(s, ":gen the n=10 seed=1").text
    assert len(text) == 10 and set(text) <= set(TEXT)
    before = snapshot(s)
    with pytest.raises(UserError, match=r"the data this model was trained on \(.*fox.txt\)"):
        run(s, ":train steps=1")
    assert_unchanged(s, before)  # the failed :train changed nothing


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_load_onto_an_absent_device_changes_nothing(checkpoint_dir):
    run(tiny_session(), ":train steps=2 save=x")
    s = Session(ModelConfig(**TINY), data_spec="sort:4", device_name="cuda")
    with pytest.raises(DeviceError):
        run(s, ":load x")
    assert not s.has_model and s.data_spec == "sort:4" and s._data is None


@pytest.fixture
def no_unpickling(monkeypatch):
    """Any attempt to unpickle fails the test."""
    import pickle

    def refuse(*args, **kwargs):
        raise AssertionError("something tried to unpickle")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(torch, "load", refuse)


# --- Ctrl-C during a save ------------------------------------------------------------------------
def interrupt_write_number(monkeypatch, n: int):
    """The n-th file of a save (data files written or linked, then the manifest) raises KeyboardInterrupt,
    as Ctrl-C would there."""
    real_write, real_write_or_link = ckpt.store.write_file, ckpt.store.write_or_link
    calls = []

    def count(path):
        calls.append(path)
        if len(calls) == n:
            raise KeyboardInterrupt

    def write_or_link(path, data, source):  # a data file (it may share an identical autosave's bytes)
        count(path)
        monkeypatch.setattr(ckpt.store, "write_file", real_write)  # counted once, however it is made
        try:
            real_write_or_link(path, data, source)
        finally:
            monkeypatch.setattr(ckpt.store, "write_file", write)

    def write(path, data):  # the manifest
        count(path)
        real_write(path, data)

    monkeypatch.setattr(ckpt.store, "write_file", write)
    monkeypatch.setattr(ckpt.store, "write_or_link", write_or_link)
    return calls


@pytest.mark.parametrize("n", [1, 2, 3])
def test_an_interrupted_save_keeps_the_previous_checkpoint(checkpoint_dir, monkeypatch, n):
    s = tiny_session()
    run(s, ":train steps=2 save=keep")
    run(s, ":train steps=3")
    interrupt_write_number(monkeypatch, n)
    with pytest.raises(UserError) as e:
        run(s, ":save keep")
    assert str(e.value) == "save interrupted; the previous checkpoint keep is unchanged"
    monkeypatch.undo()
    assert ckpt.load_checkpoint(checkpoint_dir, "keep").step == 2
    assert sorted(p.name for p in (checkpoint_dir / "keep").iterdir() if not p.name.startswith(".")) == sorted(
        [ckpt.MANIFEST] + [p.name for p in (checkpoint_dir / "keep").glob("*.safetensors")])
    assert len(list((checkpoint_dir / "keep").glob("*.safetensors"))) == 2  # the interrupted files are gone
    with pytest.raises(UserError) as e:
        interrupt_write_number(monkeypatch, n)
        run(s, ":save fresh")
    assert str(e.value) == "save interrupted; no checkpoint fresh was written"
    monkeypatch.undo()
    assert [row.name for row in run(s, ":ls").rows if row.name == "fresh"] == []
    assert run(s, ":save keep").step == 5  # and the next save works


def test_save_results_are_json(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=2")
    for line in (":save x", ":ls", ":load x", ":train steps=1"):
        doc = to_json(run(s, line))
        json.dumps(doc, allow_nan=False)
    assert set(to_json(run(s, ":save x"))) == {"name", "path", "step", "size_bytes", "seconds", "replaced",
                                                  "architecture", "ablations", "replaced_unseen", "moved_aside",
                                                  "dropped", "moved_files", "kept_as", "kept_step", "held_in",
                                                  "held_step", "waited", "waited_for"}
    assert to_json(run(s, ":ls"))["rows"][0]["name"] in ("x", "autosave")
    assert to_json(run(s, ":train steps=1"))["saved"] == "autosave"


def test_registered_with_summaries():
    for name in ("save", "load", "ls"):
        assert REGISTRY[name].summary.endswith(".")
    assert REGISTRY["save"].interruptible and not REGISTRY["train"].interruptible
    assert REGISTRY["ls"].aliases == ("checkpoints",)


# --- the shell: minitf train --save, --load, --checkpoint-dir, save/load/ls subcommands ------------------
SHELL_TINY = ["--data", "sort", "--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"]


def shell(*args):
    from typer.testing import CliRunner

    from minitf_repl import cli

    return CliRunner().invoke(cli.app, [str(a) for a in args])


def test_shell_train_save_json_then_ls_load_and_one_shots_from_a_checkpoint(tmp_path):
    folder = tmp_path / "elsewhere"
    result = shell("--checkpoint-dir", folder, *SHELL_TINY, "train", "--steps", "3", "--save", "run1", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # one JSON document and nothing else
    assert doc["saved"] == "run1" and doc["save_error"] is None and doc["total_steps"] == 3
    assert ckpt.load_checkpoint(folder, "run1").step == 3 and not (folder / "autosave").exists()

    listing = json.loads(shell("--checkpoint-dir", folder, "ls", "--json").stdout)
    assert listing["directory"] == str(folder) and [r["name"] for r in listing["rows"]] == ["run1"]
    assert listing["rows"][0]["step"] == 3 and listing["rows"][0]["data_spec"] == "sort"
    text = shell("--checkpoint-dir", folder, "ls")
    assert text.exit_code == 0 and "run1" in text.stdout and "val loss" in text.stdout

    loaded = json.loads(shell("--checkpoint-dir", folder, "load", "run1", "--json").stdout)
    assert loaded["step"] == 3 and loaded["data_spec"] == "sort" and loaded["model_config"]["d_model"] == 32

    gen = shell("--checkpoint-dir", folder, "--load", "run1", "gen", "--n", "5", "--seed", "1", "--json")
    assert gen.exit_code == 0 and json.loads(gen.stdout)["n_tokens"] == 5
    shapes = shell("--checkpoint-dir", folder, "--load", "run1", "shapes")
    assert shapes.exit_code == 0 and "1 layer, 10,016 parameters" in shapes.stdout  # the loaded tiny model

    more = shell("--checkpoint-dir", folder, "--load", "run1", "--set", "lr=0.01", "train", "--steps", "2", "--json")
    assert json.loads(more.stdout)["total_steps"] == 5 and json.loads(more.stdout)["saved"] == "autosave"
    assert ckpt.load_checkpoint(folder, "autosave").trainer_state["train_config"]["lr"] == 0.01

    copy = shell("--checkpoint-dir", folder, "--load", "run1", "save", "copy")
    assert copy.exit_code == 0 and "saved checkpoint copy (step 3" in copy.stdout


def test_shell_uses_the_environment_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "from-env"))
    result = shell(*SHELL_TINY, "train", "--steps", "1")
    assert result.exit_code == 0 and "saved checkpoint autosave" in result.stdout
    assert (tmp_path / "from-env" / "autosave" / "checkpoint.json").is_file()
    off = shell(*SHELL_TINY, "--set", "autosave=off", "train", "--steps", "1", "--save", "")
    assert off.exit_code == 2 and off.stderr.startswith("error: save needs a value")


@pytest.mark.parametrize("args, message", [
    (["--load", "nope", "gen"], "error: --load: no checkpoint named 'nope'"),
    (["--load", "../x", "gen"], "error: --load: '../x' is not a valid checkpoint name"),
    (["--load", "run1", "--data", "reverse", "gen"], "error: --load: checkpoint run1 was trained on 'sort', not 'reverse'"),
    (["save"], "error: there is no model to save yet"),
    # shell syntax from the shell, with the options that made this session (where its checkpoints are)
    (["load"], "error: which checkpoint? give its name, e.g. minitf --checkpoint-dir {ck} load run1"),
    (["train", "--steps", "1", "--save", "a/b"], "error: 'a/b' is not a valid checkpoint name"),
])  # fmt: skip
def test_shell_checkpoint_errors_are_one_line(tmp_path, args, message):
    folder = tmp_path / "c"
    assert shell("--checkpoint-dir", folder, *SHELL_TINY, "train", "--steps", "1", "--save", "run1").exit_code == 0
    before = sorted(p.name for p in folder.iterdir())
    result = shell("--checkpoint-dir", folder, *args)
    assert result.exit_code == (2 if args == ["load"] else 1) and result.stdout == ""  # a name missing: the line's
    assert result.stderr.startswith(message.format(ck=folder)) and result.stderr.count("\n") == 1, result.stderr
    assert sorted(p.name for p in folder.iterdir()) == before


def test_shell_train_whose_save_fails_exits_1(tmp_path, monkeypatch):
    def disk_full(*args, **kwargs):
        raise CheckpointError("could not save checkpoint 'autosave': No space left on device; free space")

    monkeypatch.setattr(ckpt, "save_checkpoint", disk_full)  # the target is fine; the write fails
    result = shell("--checkpoint-dir", tmp_path / "ok", *SHELL_TINY, "train", "--steps", "1")
    assert result.exit_code == 1 and "trained 1 step" in result.stdout
    assert "error: not saved:" in result.stdout and "No space left" in result.stdout
    result = shell("--checkpoint-dir", tmp_path / "ok", *SHELL_TINY, "train", "--steps", "1", "--json")
    assert result.exit_code == 1 and "No space left" in json.loads(result.stdout)["save_error"]
    assert [line for line in result.stderr.splitlines() if not line.startswith("step ")][0].startswith(
        "error: not saved:")  # after the run's progress, a line per evaluation
    monkeypatch.undo()
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a target that cannot be written: refused before a minute of training
    result = shell("--checkpoint-dir", blocker, *SHELL_TINY, "train", "--steps", "1")
    assert result.exit_code == 1 and result.stdout == "" and "is a file, not a directory" in result.stderr
    result = shell("--checkpoint-dir", blocker, *SHELL_TINY, "train", "--steps", "1", "--save", "x")
    assert result.exit_code == 1 and result.stdout == "" and "is a file, not a directory" in result.stderr
