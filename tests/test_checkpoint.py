"""Checkpoints: an exact round trip, an exact resume in a new process, atomic saves, hostile files.

The resume test is the one that matters: a run of 2N steps stopped after N, saved, loaded in a new
process and continued must end bit-identical to the same run done in one go. It is shown to be
able to fail: continuing with a fresh optimizer, or with reseeded generators, must not match.
Sizes are small and unequal (vocab 13, context 16, d_model 32, 2 heads, d_ff 48), dropout 0.1 so
that the global RNG matters.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import importlib.util
import inspect
import json
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.paths import default_checkpoint_dir
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus
from minitf_repl.core.errors import CheckpointError, UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.optimizers import AdamW, MuonWithAdamW
from minitf_repl.core.train import Trainer
from minitf_repl.dispatch import run_command
from minitf_repl.session import Session

WORKER = Path(__file__).with_name("checkpoint_worker.py")
_spec = importlib.util.spec_from_file_location("checkpoint_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

N = 5  # the resume test stops a run of 2N steps after N
TIMING = ("elapsed", "tokens_per_second")  # history fields that measure the clock, not the math


# --- helpers ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread, as in the worker: the same kernels on both sides of a resume, and no thrashing
    on a busy machine (these tensors are far too small to gain from more)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained():
    """A trainer 4 steps into a 6-step run, with an evaluation in its history. Tests must not train it."""
    trainer = worker.make_trainer(6)
    trainer.run(should_stop=lambda: trainer.step >= 4)
    assert any(h["val_loss"] is not None for h in trainer.history)
    return trainer


@pytest.fixture(scope="module")
def other():
    """A second, different trainer: what an overwrite tries to save."""
    trainer = worker.make_trainer(3, seed=5)
    trainer.run()
    return trainer


def save(directory, name, trainer) -> Path:
    return ckpt.save_checkpoint(directory, name, trainer.model, trainer, trainer.data.tokenizer.vocab, worker.DATA_SPEC)


def weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def without_timing(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in h.items() if k not in TIMING} for h in history]


def visible(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


manifest_of, rewrite_manifest = worker.manifest_of, worker.rewrite_manifest  # shared with the other checkpoint tests


def rewrite_tensors(path: Path, which: str, mutate) -> None:
    """Edit a data file and re-sign it (new size and SHA-256 in a re-signed manifest)."""
    m = manifest_of(path)
    target = path / m["files"][which]["file"]
    tensors = safetensors.torch.load(target.read_bytes())
    mutate(tensors)
    data = safetensors.torch.save(tensors)
    target.write_bytes(data)

    def fix(m):
        m["files"][which]["size"] = len(data)
        m["files"][which]["sha256"] = hashlib.sha256(data).hexdigest()

    rewrite_manifest(path, fix)


def data_file(path: Path, which: str) -> Path:
    return path / manifest_of(path)["files"][which]["file"]


@pytest.fixture
def no_unpickling(monkeypatch):
    """Loading must never unpickle: make every way to do it fail loudly."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a checkpoint load tried to unpickle")

    # A load builds a large config's reference model on the meta device, whose random initialisers import
    # torch's compiler front end, which subclasses pickle.Unpickler as it is imported: import it before the ban.
    import torch._dynamo  # noqa: F401

    monkeypatch.setattr(torch, "load", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "Unpickler", forbidden)


# --- basics ----------------------------------------------------------------------------------------
def test_default_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("MINITF_CHECKPOINT_DIR", raising=False)
    assert default_checkpoint_dir() == Path.cwd() / "checkpoints"  # absolute: the messages name the folder
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "ck"))
    assert default_checkpoint_dir() == tmp_path / "ck"


def test_layout(tmp_path, trained):
    path = save(tmp_path, "run1", trained)
    assert path == tmp_path / "run1"
    assert visible(tmp_path) == ["run1"]  # no temporary directory left
    files = visible(path)
    assert len(files) == 3 and "checkpoint.json" in files
    m = manifest_of(path)
    assert m["format_version"] == ckpt.FORMAT_VERSION == 1
    assert m["meta_sha256"] == ckpt.manifest.meta_sha256(m)
    assert m["model_config"] == trained.model.config.to_dict()
    assert m["vocab"] == trained.data.tokenizer.vocab and m["data_spec"] == worker.DATA_SPEC
    assert m["trainer"]["step"] == 4 and m["trainer"]["run_steps"] == 6
    assert m["saved_at"].endswith("Z")
    for which in ("model", "state"):
        raw = data_file(path, which).read_bytes()
        assert m["files"][which]["size"] == len(raw)
        assert m["files"][which]["sha256"] == hashlib.sha256(raw).hexdigest()
    model_tensors = safetensors.torch.load(data_file(path, "model").read_bytes())
    assert "lm_head.weight" not in model_tensors and "token_embedding.weight" in model_tensors  # tied: stored once
    state_tensors = safetensors.torch.load(data_file(path, "state").read_bytes())
    assert {"rng.data", "rng.torch", "optim.0.exp_avg", "optim.0.exp_avg_sq", "optim.0.step"} <= set(state_tensors)


def test_round_trip(tmp_path, trained, no_unpickling):
    rng_before = torch.get_rng_state()
    save(tmp_path, "run1", trained)
    c = ckpt.load_checkpoint(tmp_path, "run1")

    assert c.model_config == trained.model.config
    assert c.vocab == trained.data.tokenizer.vocab and c.data_spec == worker.DATA_SPEC
    assert same_tensors(c.model_state, trained.model.state_dict())
    assert c.model_state["lm_head.weight"] is c.model_state["token_embedding.weight"]
    assert torch.equal(c.torch_rng, rng_before) and c.cuda_rng == []
    expected = trained.state_dict()
    for key in ("step", "run_start", "run_steps", "run_elapsed", "history", "train_config"):
        assert c.trainer_state[key] == expected[key], key
    assert torch.equal(c.trainer_state["generator"], trained.generator.get_state())

    model, trainer = ckpt.restore(c, trained.data)
    assert model.lm_head.weight is model.token_embedding.weight
    assert same_tensors(model.state_dict(), trained.model.state_dict())
    saved_opt, restored_opt = trained.optimizer.state_dict(), trainer.optimizer.state_dict()
    assert restored_opt["param_groups"] == saved_opt["param_groups"]
    assert restored_opt["state"].keys() == saved_opt["state"].keys()
    for i, entry in saved_opt["state"].items():
        assert same_tensors(restored_opt["state"][i], entry)
    assert torch.equal(trainer.generator.get_state(), trained.generator.get_state())
    assert trainer.config == trained.config
    assert (trainer.step, trainer.run_start, trainer.run_steps, trainer.run_remaining) == (4, 0, 6, 2)
    assert trainer.history == trained.history and trainer.history is not trained.history
    # Loading and rebuilding leave the caller's random state alone; restore_rng sets it.
    assert torch.equal(torch.get_rng_state(), rng_before)
    torch.manual_seed(99)
    ckpt.restore_rng(c)
    assert torch.equal(torch.get_rng_state(), rng_before)


@pytest.mark.parametrize("changes", [dict(pos_encoding="sinusoidal", attention="sdpa"), dict(activation="relu", n_layers=1)])
def test_round_trip_of_other_architectures(tmp_path, changes):
    # A sinusoidal table is a non-persistent buffer: rebuilt from the config, never stored.
    torch.manual_seed(3)
    model = MiniTransformerLM(ModelConfig(**{**worker.SIZES, **changes}))
    trainer = Trainer(model, worker.make_data(), TrainConfig(steps=2, batch_size=4, eval_every=2, eval_batches=1))
    trainer.run()
    save(tmp_path, "arch", trainer)
    c = ckpt.load_checkpoint(tmp_path, "arch")
    rebuilt = ckpt.build_model(c)
    assert rebuilt.config == model.config
    assert same_tensors(rebuilt.state_dict(), model.state_dict())
    x = torch.randint(13, (3, 7))
    assert torch.equal(rebuilt.eval()(x)[0], model.eval()(x)[0])


def test_overwrite_replaces_the_data_files(tmp_path, trained, other):
    save(tmp_path, "run1", trained)
    old_files = set(visible(tmp_path / "run1"))
    save(tmp_path, "run1", other)
    new_files = set(visible(tmp_path / "run1"))
    assert len(new_files) == 3 and new_files & old_files == {"checkpoint.json"}
    c = ckpt.load_checkpoint(tmp_path, "run1")
    assert c.step == other.step and same_tensors(c.model_state, other.model.state_dict())


def test_save_refuses_bad_input(tmp_path, trained):
    with pytest.raises(CheckpointError, match="not a valid checkpoint name"):
        save(tmp_path, "../escape", trained)
    with pytest.raises(CheckpointError, match="vocabulary has 3 characters"):
        ckpt.save_checkpoint(tmp_path, "x", trained.model, trained, "abc", "spec")
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointError, match="is a file"):
        save(tmp_path, "afile", trained)
    with pytest.raises(CheckpointError, match="is a file"):
        save(tmp_path / "afile", "x", trained)
    assert issubclass(CheckpointError, UserError) and issubclass(CheckpointError, ValueError)


def test_restore_refuses_data_with_another_vocabulary(tmp_path, trained):
    save(tmp_path, "run1", trained)
    c = ckpt.load_checkpoint(tmp_path, "run1")
    changed = TextCorpus("t", worker.make_text().replace("l", "m"), "changed")
    with pytest.raises(CheckpointError, match="different vocabulary"):
        ckpt.restore(c, changed)


def test_restore_trainer_refuses_a_mismatched_optimizer(tmp_path, trained):
    save(tmp_path, "run1", trained)
    c = ckpt.load_checkpoint(tmp_path, "run1")
    c.trainer_state["optimizer"]["param_groups"].pop()
    fresh = worker.make_trainer(6)
    before = fresh.optimizer.state_dict()
    with pytest.raises(CheckpointError, match="optimizer groups"):
        ckpt.restore_trainer(c, fresh)
    assert fresh.optimizer.state_dict() == before and fresh.step == 0  # untouched


# --- the optimizer's kind: Muon's state, and a checkpoint of one kind loaded under the other ----------
@pytest.fixture(scope="module")
def trained_muon():
    """Like `trained`, with optimizer=muon. Tests must not train it."""
    trainer = worker.make_trainer(6, optimizer="muon")
    trainer.run(should_stop=lambda: trainer.step >= 4)
    return trainer


def same_optimizer_state(a: dict, b: dict) -> bool:
    return a["param_groups"] == b["param_groups"] and a["state"].keys() == b["state"].keys() \
        and all(same_tensors(a["state"][i], b["state"][i]) for i in a["state"])


def test_round_trip_of_muon(tmp_path, trained_muon, no_unpickling):
    save(tmp_path, "m", trained_muon)
    groups = manifest_of(tmp_path / "m")["optimizer"]["param_groups"]
    assert groups[0]["ns_coefficients"] == list(trained_muon.optimizer.param_groups[0]["ns_coefficients"])  # JSON: a list
    tensors = safetensors.torch.load(data_file(tmp_path / "m", "state").read_bytes())
    assert "optim.0.momentum_buffer" in tensors and "optim.0.exp_avg" not in tensors  # parameter 0: Muon's
    assert f"optim.{len(groups[0]['params'])}.exp_avg" in tensors  # the first of AdamW's

    c = ckpt.load_checkpoint(tmp_path, "m")
    model, trainer = ckpt.restore(c, trained_muon.data)
    assert isinstance(trainer.optimizer, MuonWithAdamW) and trainer.config == trained_muon.config
    restored = trainer.optimizer.state_dict()
    assert isinstance(restored["param_groups"][0]["ns_coefficients"], tuple)  # given back as torch made it
    assert same_optimizer_state(restored, trained_muon.optimizer.state_dict())


@pytest.mark.parametrize("saved_with, settings_say", [("muon", "adamw"), ("adamw", "muon")])
def test_a_checkpoint_brings_its_own_optimizer(tmp_path, trained, trained_muon, saved_with, settings_say):
    source = trained_muon if saved_with == "muon" else trained
    save(tmp_path, "c", source)
    c = ckpt.load_checkpoint(tmp_path, "c")

    receiver = worker.make_trainer(6, optimizer=settings_say)  # built by settings that say the other kind
    ckpt.restore_trainer(c, receiver)
    assert receiver.config.optimizer == saved_with  # the checkpoint's train_config wins
    assert isinstance(receiver.optimizer, MuonWithAdamW) == (saved_with == "muon")
    assert same_optimizer_state(receiver.optimizer.state_dict(), source.optimizer.state_dict())

    # The same through :load, in a session whose settings say the other kind.
    session = Session(train_config=TrainConfig(optimizer=settings_say), checkpoint_dir=tmp_path, device_name="cpu")
    run_command(session, "load", {"name": "c"})
    assert session.train_config.optimizer == saved_with and session.trainer.config.optimizer == saved_with
    assert same_optimizer_state(session.trainer.optimizer.state_dict(), source.optimizer.state_dict())


def test_a_checkpoint_from_before_the_optimizer_setting_loads_as_adamw(tmp_path, trained):
    save(tmp_path, "old", trained)
    rewrite_manifest(tmp_path / "old", lambda m: m["trainer"]["train_config"].pop("optimizer"))
    c = ckpt.load_checkpoint(tmp_path, "old")
    assert c.trainer_state["train_config"]["optimizer"] == "adamw"  # what it trained with, not today's default
    receiver = worker.make_trainer(6, optimizer="muon")
    ckpt.restore_trainer(c, receiver)
    assert receiver.config.optimizer == "adamw" and type(receiver.optimizer) is AdamW
    assert same_optimizer_state(receiver.optimizer.state_dict(), trained.optimizer.state_dict())


def _muon_group(**changes):
    return lambda d: rewrite_manifest(d / "m", lambda m: m["optimizer"]["param_groups"][0].update(changes))


MUON_HOSTILE = {
    "coefficients-too-few": (_muon_group(ns_coefficients=[3.4, -4.7]), "ns_coefficients"),
    "coefficients-not-numbers": (_muon_group(ns_coefficients=["a", 1, 2]), "ns_coefficients"),
    "ns-steps-bool": (_muon_group(ns_steps=True), "ns_steps"),
    "ns-steps-too-many": (_muon_group(ns_steps=100), "ns_steps"),
    "momentum-text": (_muon_group(momentum="0.95"), "momentum"),
    "nesterov-number": (_muon_group(nesterov=1), "nesterov"),
    "adjust-lr-unknown": (_muon_group(adjust_lr_fn="bigger"), "adjust_lr_fn"),
    "lr-text": (_muon_group(lr="0.1"), "non-numeric optimizer lr"),
}


@pytest.mark.parametrize("case", list(MUON_HOSTILE))
def test_hostile_muon_groups_raise_checkpoint_error(tmp_path, trained_muon, case):
    save(tmp_path, "m", trained_muon)
    mutate, message = MUON_HOSTILE[case]
    mutate(tmp_path)
    with pytest.raises(CheckpointError, match=message):
        ckpt.load_checkpoint(tmp_path, "m")


def test_restore_trainer_refuses_a_group_of_the_other_kind(tmp_path, trained_muon):
    save(tmp_path, "m", trained_muon)
    # Without its ns_coefficients, Muon's group reads as an AdamW group: wrong in place. A manifest's is refused by the
    # load (its keys and state are no AdamW group's); one that reaches restore_trainer is refused there too.
    c = ckpt.load_checkpoint(tmp_path, "m")
    c.trainer_state["optimizer"]["param_groups"][0].pop("ns_coefficients")
    rewrite_manifest(tmp_path / "m", lambda m: m["optimizer"]["param_groups"][0].pop("ns_coefficients"))
    with pytest.raises(CheckpointError, match="optimizer setting minitf's adamw does not have"):
        ckpt.load_checkpoint(tmp_path, "m")
    fresh = worker.make_trainer(6, optimizer="muon")
    before = fresh.optimizer.state_dict()
    with pytest.raises(CheckpointError, match="optimizer groups"):
        ckpt.restore_trainer(c, fresh)
    assert fresh.optimizer.state_dict() == before and fresh.step == 0  # untouched


def test_load_follows_a_save_that_lands_mid_read(tmp_path, monkeypatch, trained, other):
    # Another process overwrites "c" after we read its manifest and before we read its data
    # files (which that save deletes): the load notices the new manifest and reads that instead.
    save(tmp_path, "c", trained)
    real_read = ckpt.loading.read_data_file
    calls = []

    def read_with_a_save_in_between(path, entry, *limit):
        if not calls:
            save(tmp_path, "c", other)
        calls.append(entry["file"])
        return real_read(path, entry, *limit)

    monkeypatch.setattr(ckpt.loading, "read_data_file", read_with_a_save_in_between)
    c = ckpt.load_checkpoint(tmp_path, "c")
    assert c.step == other.step and same_tensors(c.model_state, other.model.state_dict())
    assert len(calls) == 3  # the old model file (gone), then the new model and state files


# --- exact resume in a new process -----------------------------------------------------------------
def run_worker(*args, timeout=120):
    proc = subprocess.run(
        [sys.executable, str(WORKER), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


# muon under -m slow (3 s, a process of its own): a new process's exact resume is kept by the adamw case, and Muon's
# exact resume through a checkpoint by test_optimizers.py's test_exact_resume_with_muon_through_a_checkpoint
@pytest.mark.parametrize("optimizer", ["adamw", pytest.param("muon", marks=pytest.mark.slow)])
def test_exact_resume_in_a_new_process(tmp_path, monkeypatch, optimizer):
    from minitf_repl.core import fastpath

    # Each process measures for itself whether oneDNN or MKL runs the float32 products (fastpath.onednn_faster); on a
    # CPU where the two are close and round differently, this process and the resuming one could pick apart and
    # their losses differ from a step on: the kernel is fixed for both, as a user repeating a run exactly is told to
    monkeypatch.setenv("MINITF_PRODUCTS", "torch")
    fastpath.onednn_faster.cache_clear()
    ckdir, out = tmp_path / "ck", tmp_path / "out"
    out.mkdir()
    worker.first(ckdir, out, N, optimizer)  # the reference run, and the first half saved, in this process
    assert manifest_of(ckdir / "half")["trainer"]["train_config"]["optimizer"] == optimizer
    run_worker("resume", ckdir, out, *worker.VARIANTS)  # the second half in a new one

    def params(tag):
        return safetensors.torch.load_file(str(out / f"{tag}.safetensors"))

    def history(tag):
        return without_timing(json.loads((out / f"{tag}.json").read_text()))

    full = params("full")
    assert len(history("full")) == 2 * N and history("first") == history("full")[:N]
    assert not same_tensors(params("first"), full)  # the first half alone is not the answer

    # Stopped, saved, loaded elsewhere, continued: bit-identical weights and the same losses.
    assert same_tensors(params("exact"), full)
    assert history("exact") == history("full")
    assert [h["val_loss"] for h in history("exact")][N:] == [h["val_loss"] for h in history("full")][N:]

    # The test can fail: each piece of state it restores is needed.
    for variant in ("fresh-optimizer", "fresh-rng", "fresh-torch-rng"):
        assert not same_tensors(params(variant), full), variant
        losses = [h["train_loss"] for h in history(variant)][N:]
        assert losses != [h["train_loss"] for h in history("full")][N:], variant


# --- atomic saves ----------------------------------------------------------------------------------
FAILURES = [
    ("model", OSError(errno.ENOSPC, "No space left on device")),
    ("state", OSError(errno.ENOSPC, "No space left on device")),
    ("manifest", OSError(errno.ENOSPC, "No space left on device")),
    ("commit", OSError(errno.ENOSPC, "No space left on device")),
    ("state", KeyboardInterrupt()),
    ("commit", KeyboardInterrupt()),
]


@pytest.mark.parametrize("existing", [True, False], ids=["overwrite", "new"])
@pytest.mark.parametrize("where, error", FAILURES, ids=[f"{w}-{type(e).__name__}" for w, e in FAILURES])
def test_a_failed_save_changes_nothing(tmp_path, monkeypatch, trained, other, existing, where, error):
    save(tmp_path, "keep", trained)
    name = "keep" if existing else "fresh"
    before_files = {p: visible(tmp_path / p) for p in visible(tmp_path)}

    real_write = ckpt.store.write_file

    def failing_write(path: Path, data: bytes):
        kind = "model" if path.name.startswith("model-") else "state" if path.name.startswith("state-") else "manifest"
        if kind == where:
            with open(path, "xb") as f:
                f.write(data[: len(data) // 2])  # a partial file, as a full disk leaves it
            raise error
        real_write(path, data)

    def failing_rename(*args):
        raise error

    monkeypatch.setattr(ckpt.store, "write_file", failing_write)
    if where == "commit":
        monkeypatch.setattr(os, "replace", failing_rename)
        monkeypatch.setattr(os, "rename", failing_rename)

    if isinstance(error, OSError):
        with pytest.raises(CheckpointError, match=r"could not save checkpoint .*No space left on device; free space"):
            save(tmp_path, name, other)
    else:
        with pytest.raises(KeyboardInterrupt):
            save(tmp_path, name, other)
    monkeypatch.undo()

    # No temporary file or directory left, the previous checkpoint loads unchanged.
    assert {p: visible(tmp_path / p) for p in visible(tmp_path)} == before_files
    c = ckpt.load_checkpoint(tmp_path, "keep")
    assert c.step == trained.step and same_tensors(c.model_state, trained.model.state_dict())
    assert [(i.name, i.step, i.error) for i in ckpt.list_checkpoints(tmp_path)] == [("keep", trained.step, None)]


def wait_for_line(proc, marker: str, timeout: float = 60.0) -> None:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if marker not in line:
        proc.kill()
        raise AssertionError(f"worker did not reach {marker!r}: {line!r} {proc.stderr.read()[-3000:]}")


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL and select on pipes are POSIX")
def test_a_killed_save_leaves_the_old_checkpoint(tmp_path, trained, other):
    overwrite, new = tmp_path / "overwrite", tmp_path / "new"
    save(overwrite, "c", trained)
    new.mkdir()
    # One worker saves "c" into both directories at once (a thread each); both stop halfway through
    # writing the model file, and the process is killed there.
    proc = subprocess.Popen([sys.executable, str(WORKER), "hang", "c", str(overwrite), str(new)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "HALF-WRITTEN")
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()

    # Overwrite: debris (a half model file) sits in c/, but the manifest still names the old files.
    referenced = {e["file"] for e in manifest_of(overwrite / "c")["files"].values()}
    debris = set(visible(overwrite / "c")) - referenced - {"checkpoint.json"}
    assert len(debris) == 1 and next(iter(debris)).startswith("model-")
    c = ckpt.load_checkpoint(overwrite, "c")
    assert c.step == trained.step and same_tensors(c.model_state, trained.model.state_dict())
    assert [(i.name, i.step, i.error) for i in ckpt.list_checkpoints(overwrite)] == [("c", trained.step, None)]
    save(overwrite, "c", other)
    assert set(visible(overwrite / "c")).isdisjoint(debris) and len(visible(overwrite / "c")) == 3

    # New name: only a hidden temporary directory exists (and the lock file the killed save held: the
    # kernel released its lock with the process); nothing is listed or loadable.
    (tmp_dir,) = [e for e in visible(new) if e != ckpt.LOCK_FILE]
    assert tmp_dir.startswith(".c.tmp-")
    assert ckpt.list_checkpoints(new) == []
    with pytest.raises(CheckpointError, match="no checkpoint named 'c'"):
        ckpt.load_checkpoint(new, "c")
    save(new, "c", other)
    assert visible(new) == ["c"]
    assert ckpt.load_checkpoint(new, "c").step == other.step


@pytest.mark.skipif(os.name == "nt", reason="SIGKILL and select on pipes are POSIX")
def test_a_save_in_progress_elsewhere_is_not_cleaned_up(tmp_path, trained, other, monkeypatch):
    # Another process is halfway through saving "c" (it holds the folder lock): this save waits for
    # it, and gives up in one line after LOCK_WAIT, touching none of its files. Once that process is
    # gone (killed), what it left is debris, and the next save removes it. No pid is consulted.
    save(tmp_path, "c", trained)
    proc = subprocess.Popen([sys.executable, str(WORKER), "hang", "c", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(proc, "HALF-WRITTEN")
        in_progress = set(visible(tmp_path / "c"))
        monkeypatch.setattr(ckpt.locks, "LOCK_WAIT", 0.5)
        with pytest.raises(CheckpointError) as e:
            save(tmp_path, "c", other)
        assert f"is busy: minitf on {socket.gethostname()} (pid {proc.pid}) has been saving there" in str(e.value)
        assert set(visible(tmp_path / "c")) == in_progress  # the other save's half-written file is untouched
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    save(tmp_path, "c", other)
    assert len(visible(tmp_path / "c")) == 3 and visible(tmp_path) == ["c"]  # debris and lock file gone
    assert ckpt.load_checkpoint(tmp_path, "c").step == other.step


# --- hostile and broken files ----------------------------------------------------------------------
def _torch_save(path: Path) -> None:
    torch.save({"token_embedding.weight": torch.zeros(2, 2)}, path)  # what a pickle checkpoint looks like


def _truncate(path: Path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


def _randomise(path: Path) -> None:
    path.write_bytes(os.urandom(max(path.stat().st_size, 64)))


def _drop_tensor(t):
    del t["blocks.0.ln_1.bias"]


def _add_tensor(t):
    t["blocks.9.extra"] = torch.zeros(3)


def _set(key, value):
    def mutate(m):
        m[key] = value
    return mutate


def _set_config(**changes):
    def mutate(m):
        m["model_config"].update(changes)
    return mutate


HOSTILE = {
    # name: (mutation of the directory holding checkpoint "c", name to load, message fragment)
    "name-traversal": (None, "../c", "not a valid checkpoint name"),
    "name-absolute": (None, "/etc/passwd", "not a valid checkpoint name"),
    "name-hidden": (None, ".c", "not a valid checkpoint name"),
    "name-with-slash": (None, "c/checkpoint.json", "not a valid checkpoint name"),
    "name-empty": (None, "", "not a valid checkpoint name"),
    "name-too-long": (None, "a" * 101, "not a valid checkpoint name"),
    "missing-name": (None, "nope", "no checkpoint named 'nope' .*; saved ones: c"),
    "name-is-a-file": (lambda d: (d / "f").write_text("x"), "f", "is a file, not a checkpoint directory"),
    "no-manifest": (lambda d: (d / "c" / "checkpoint.json").unlink(), "c", "has no checkpoint.json"),
    "no-model-file": (lambda d: data_file(d / "c", "model").unlink(), "c", "is missing"),
    "no-state-file": (lambda d: data_file(d / "c", "state").unlink(), "c", "is missing"),
    "pickled-manifest": (lambda d: _torch_save(d / "c" / "checkpoint.json"), "c", "pickle"),
    "pickle-protocol-2-manifest": (lambda d: (d / "c" / "checkpoint.json").write_bytes(pickle.dumps({"a": 1}, protocol=2)), "c", "pickle"),
    "pickled-model": (lambda d: _torch_save(data_file(d / "c", "model")), "c", "pickle"),
    "pickled-state": (lambda d: _torch_save(data_file(d / "c", "state")), "c", "pickle"),
    "truncated-manifest": (lambda d: _truncate(d / "c" / "checkpoint.json"), "c", "not valid JSON"),
    "truncated-model": (lambda d: _truncate(data_file(d / "c", "model")), "c", "truncated"),
    "truncated-state": (lambda d: _truncate(data_file(d / "c", "state")), "c", "truncated"),
    "random-manifest": (lambda d: _randomise(d / "c" / "checkpoint.json"), "c", "JSON|pickle"),
    "random-model": (lambda d: _randomise(data_file(d / "c", "model")), "c", "bytes but|checksum|pickle"),
    "empty-manifest": (lambda d: (d / "c" / "checkpoint.json").write_bytes(b""), "c", "not valid JSON"),
    "manifest-not-an-object": (lambda d: (d / "c" / "checkpoint.json").write_text("[1, 2]"), "c", "not a minitf checkpoint"),
    "manifest-is-a-directory": (lambda d: ((d / "c" / "checkpoint.json").unlink(), (d / "c" / "checkpoint.json").mkdir()), "c", "is a directory"),
    "edited-manifest": (lambda d: (d / "c" / "checkpoint.json").write_text(
        (d / "c" / "checkpoint.json").read_text().replace('"step": 4', '"step": 5')), "c", "checksum"),
    "future-format": (lambda d: rewrite_manifest(d / "c", _set("format_version", 2)), "c",
                      r"written by a newer minitf \(format 2, this one reads 1\): upgrade minitf"),
    "invalid-config": (lambda d: rewrite_manifest(d / "c", _set_config(n_heads=5)), "c", "model config is invalid"),
    "unknown-config-key": (lambda d: rewrite_manifest(d / "c", _set_config(n_wizards=4)), "c", "model config is invalid"),
    # d_ff=16: fewer weights than the file holds, so the tensors are compared and one's shape differs;
    # d_ff=64 claims more weights than the file has bytes, refused before anything is built.
    "config-shapes-differ": (lambda d: rewrite_manifest(d / "c", _set_config(d_ff=16)), "c", r"has shape \(48, 32\)"),
    "config-claims-more": (lambda d: rewrite_manifest(d / "c", _set_config(d_ff=64)), "c",
                           r"describes 18,080 parameters \(72,320 bytes of weights\) but its model file holds"),
    "vocab-too-short": (lambda d: rewrite_manifest(d / "c", _set("vocab", "abcdefghijkl")), "c", "vocabulary has 12"),
    "vocab-repeats": (lambda d: rewrite_manifest(d / "c", _set("vocab", "aacdefghijkl ")), "c", "12 distinct"),
    "invalid-train-config": (lambda d: rewrite_manifest(d / "c", lambda m: m["trainer"]["train_config"].update(lr=-1)),
                             "c", "training config is invalid"),
    "negative-step": (lambda d: rewrite_manifest(d / "c", lambda m: m["trainer"].update(step=-1)), "c", "trainer.step"),
    "file-escapes": (lambda d: rewrite_manifest(d / "c", lambda m: m["files"]["model"].update(file="../../x.safetensors")),
                     "c", "files entry is malformed"),
    "missing-tensor": (lambda d: rewrite_tensors(d / "c", "model", _drop_tensor), "c", "missing blocks.0.ln_1.bias"),
    "extra-tensor": (lambda d: rewrite_tensors(d / "c", "model", _add_tensor), "c", "unexpected blocks.9.extra"),
    "extra-state-tensor": (lambda d: rewrite_tensors(d / "c", "state", lambda t: t.update({"optim.999.exp_avg": torch.zeros(1)})),
                           "c", "parameter that does not exist"),
    "no-rng": (lambda d: rewrite_tensors(d / "c", "state", lambda t: t.pop("rng.torch")), "c", "has no rng.torch"),
    "bad-rng": (lambda d: rewrite_tensors(d / "c", "state", lambda t: t.update({"rng.data": torch.zeros(7)})),
                "c", "malformed rng.data"),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_checkpoints_raise_checkpoint_error(tmp_path, trained, no_unpickling, case):
    save(tmp_path, "c", trained)
    mutate, name, message = HOSTILE[case]
    if mutate is not None:
        mutate(tmp_path)
    with pytest.raises(CheckpointError, match=message) as info:
        ckpt.load_checkpoint(tmp_path, name)
    assert "\n" not in str(info.value)  # one line for the user
    # Listing never raises for a broken checkpoint: it marks it.
    for row in ckpt.list_checkpoints(tmp_path):
        assert row.error is None or row.step is None


@pytest.mark.parametrize("which", ["model", "state"])
def test_a_flipped_byte_in_a_data_file_is_caught(tmp_path, trained, no_unpickling, which):
    save(tmp_path, "c", trained)
    path = data_file(tmp_path / "c", which)
    original = path.read_bytes()
    for i in range(0, len(original), len(original) // 40):  # a sample: the SHA-256 covers every byte
        flipped = bytearray(original)
        flipped[i] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError, match="checksum"):
            ckpt.load_checkpoint(tmp_path, "c")
    path.write_bytes(original)
    ckpt.load_checkpoint(tmp_path, "c")


def test_every_flipped_byte_in_the_manifest_is_caught(tmp_path, trained):
    save(tmp_path, "c", trained)
    path = tmp_path / "c" / "checkpoint.json"
    original = path.read_bytes()
    assert ckpt.manifest.parse_manifest(original, path) == manifest_of(tmp_path / "c")
    # Every byte, every bit. The checksum covers the values; the exact text is checked too,
    # because a float's 17th digit can change without changing the float.
    for i in range(len(original)):
        for bit in range(8):
            flipped = bytearray(original)
            flipped[i] ^= 1 << bit
            with pytest.raises(CheckpointError):
                ckpt.manifest.parse_manifest(bytes(flipped), path)
    # And through the file system, for a sample.
    for i in range(0, len(original), len(original) // 20):
        flipped = bytearray(original)
        flipped[i] ^= 0x01
        path.write_bytes(bytes(flipped))
        with pytest.raises(CheckpointError):
            ckpt.load_checkpoint(tmp_path, "c")


def test_no_directory_yet(tmp_path):
    assert ckpt.list_checkpoints(tmp_path / "none") == []
    with pytest.raises(CheckpointError, match="there are none yet"):
        ckpt.load_checkpoint(tmp_path / "none", "c")


def test_the_module_never_unpickles():
    source = inspect.getsource(ckpt)
    tree = ast.parse(source)
    unsafe = {"pickle", "_pickle", "cPickle", "dill", "shelve", "marshal", "joblib"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert not {a.name.split(".")[0] for a in node.names} & unsafe
        if isinstance(node, ast.ImportFrom):
            assert (node.module or "").split(".")[0] not in unsafe
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load":
            if isinstance(node.func.value, ast.Name) and node.func.value.id == "torch":
                kw = {k.arg: k.value for k in node.keywords}
                assert isinstance(kw.get("weights_only"), ast.Constant) and kw["weights_only"].value is True
    assert "pickle.load" not in source and "Unpickler" not in source


# --- listing ---------------------------------------------------------------------------------------
def test_list_checkpoints(tmp_path, trained, other):
    save(tmp_path, "older", other)
    save(tmp_path, "newer", trained)
    save(tmp_path, "broken", trained)
    data_file(tmp_path / "broken", "model").unlink()
    (tmp_path / ".older.tmp-999999-ab").mkdir()  # debris of a killed save
    (tmp_path / "newer" / "model-999999-ab.safetensors").write_bytes(b"stray")  # debris inside a checkpoint
    (tmp_path / "notes.txt").write_text("not a checkpoint")

    rows = ckpt.list_checkpoints(tmp_path)
    assert [r.name for r in rows] == ["newer", "older", "broken"]  # newest first, broken ones last
    newer, older, broken = rows
    assert (newer.step, older.step) == (trained.step, other.step)
    assert newer.val_loss == [h["val_loss"] for h in trained.history if h["val_loss"] is not None][-1]
    assert newer.data_spec == worker.DATA_SPEC and newer.error is None
    assert newer.model_config == trained.model.config.to_dict()
    referenced = [tmp_path / "newer" / e["file"] for e in manifest_of(tmp_path / "newer")["files"].values()]
    assert newer.size_bytes == sum(p.stat().st_size for p in [tmp_path / "newer" / "checkpoint.json", *referenced])
    assert newer.saved_at > older.saved_at
    assert broken.error and "is missing" in broken.error and broken.step is None
