"""Checkpoints that try to hang, exhaust or half-change the session, and messages that say the real cause.

A load reads no more than the model a checkpoint describes can need, never blocks on a FIFO, and
validates everything (random states included) before anything is applied. The tests that could
hang or eat memory on a regression run with a timeout (a thread) or a memory cap (a subprocess).
"""

from __future__ import annotations

import ast
import errno
import hashlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import safetensors.torch
import torch

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.errors import CheckpointError

WORKER = Path(__file__).with_name("checkpoint_worker.py")
_spec = importlib.util.spec_from_file_location("checkpoint_worker", WORKER)
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)

posix_only = pytest.mark.skipif(os.name == "nt", reason="FIFOs, /dev/zero and sparse files are POSIX")
HANG_TIMEOUT = 30.0  # seconds; a load that takes longer is taken to hang


# --- helpers ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    """A trainer 2 steps into a 3-step run. Tests must not train it."""
    trainer = worker.make_trainer(3)
    trainer.run(should_stop=lambda: trainer.step >= 2)
    return trainer


def save(directory, name, trainer) -> Path:
    return ckpt.save_checkpoint(directory, name, trainer.model, trainer, trainer.data.tokenizer.vocab, worker.DATA_SPEC)


manifest_of, rewrite_manifest = worker.manifest_of, worker.rewrite_manifest  # shared with the other checkpoint tests


def data_file(path: Path, which: str) -> Path:
    return path / manifest_of(path)["files"][which]["file"]


def in_thread(fn, fifo: Path | None = None, timeout: float = HANG_TIMEOUT):
    """fn()'s result or exception, failing the test if it runs past `timeout`.

    A call stuck opening or reading `fifo` is released by opening (then closing) its write end, so a
    regression fails this test instead of hanging the suite.
    """
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if fifo is not None:
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # the reader sees end of file
            except OSError:
                pass
            thread.join(5)
        pytest.fail(f"{fn} did not return within {timeout:.0f} s (blocked on a FIFO?)")
    return out


# --- item 1: files that are not what the manifest says, refused before they are read -----------------
@posix_only
@pytest.mark.parametrize("which", ["model", "state", "manifest"])
def test_a_fifo_in_a_checkpoint_fails_fast(tmp_path, trained, which):
    save(tmp_path, "c", trained)
    target = tmp_path / "c" / ckpt.MANIFEST if which == "manifest" else data_file(tmp_path / "c", which)
    target.unlink()
    os.mkfifo(target)

    out = in_thread(lambda: ckpt.load_checkpoint(tmp_path, "c"), target)
    assert isinstance(out.get("error"), CheckpointError), out
    assert str(out["error"]) == (f"{target} is not a regular file (a FIFO), so this checkpoint cannot be used; "
                                 "save the checkpoint again, or copy it again from where it came")

    for listing in (lambda: ckpt.list_checkpoints(tmp_path), lambda: [ckpt.checkpoint_info(tmp_path / "c")]):
        out = in_thread(listing, target)
        assert "error" not in out, out
        (row,) = out["value"]
        assert row.step is None and "(a FIFO)" in row.error


@posix_only
def test_a_save_over_a_fifo_manifest_does_not_hang(tmp_path, trained):
    # Saving over NAME reads its manifest (to delete the old data files afterwards).
    save(tmp_path, "c", trained)
    fifo = tmp_path / "c" / ckpt.MANIFEST
    fifo.unlink()
    os.mkfifo(fifo)
    out = in_thread(lambda: save(tmp_path, "c", trained), fifo)
    assert "error" not in out, out
    assert ckpt.load_checkpoint(tmp_path, "c").step == trained.step


# Run in a separate process under a memory cap, so that a regression (reading /dev/zero or a 2 GiB
# file whole) fails with MemoryError there instead of exhausting this machine. It prints, per case,
# the error's type and message, and how far the process's peak memory rose over all the loads.
_MEMORY_PROBE = r"""
import json, resource, sys
import torch  # before the cap: a CUDA build maps gigabytes of libraries (libcusparseLt...) as torch is imported
from minitf_repl.core import checkpoint as ckpt

def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB

with open("/proc/self/statm") as f:
    size_now = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size_now + 1536 * 2**20, resource.RLIM_INFINITY))
cases = json.loads(sys.argv[1])
start = peak_mb()
results = {}
for label, directory in cases.items():
    try:
        ckpt.load_checkpoint(directory, "c")
        results[label] = ["loaded", ""]
    except BaseException as e:
        results[label] = [type(e).__name__, str(e)[:300]]
print(json.dumps({"results": results, "peak_rise_mb": peak_mb() - start}))
"""

GiB = 2**30


def _dev_zero(path: Path) -> None:
    target = data_file(path, "model")
    target.unlink()
    target.symlink_to("/dev/zero")


def _sparse(which: str, record: bool):
    """Replace a data file by a 2 GiB sparse file (no disk used); `record`: re-sign the manifest to match."""

    def mutate(path: Path) -> None:
        target = data_file(path, which)
        os.truncate(target, 2 * GiB)
        if record:
            rewrite_manifest(path, lambda m: m["files"][which].update(size=2 * GiB, sha256="0" * 64))

    return mutate


def _sparse_manifest(path: Path) -> None:
    os.truncate(path / ckpt.MANIFEST, 100 * 2**20)  # within the old 512 MiB bound, over the new 64 MiB


MEMORY_CASES = {
    # label: (mutation, message)
    "model-links-to-dev-zero": (_dev_zero, r"is not a regular file \(a symbolic link\)"),
    "model-2GiB-unrecorded": (_sparse("model", record=False), "has 2147483648 bytes but .* were written"),
    "model-2GiB-recorded": (_sparse("model", record=True), r"recorded as 2147483648 bytes, more than its model config can need"),
    "state-2GiB-recorded": (_sparse("state", record=True), r"recorded as 2147483648 bytes, more than its model config can need"),
    "manifest-100MiB": (_sparse_manifest, "more than the 64 MiB a manifest may have"),
}


@posix_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and ru_maxrss in KiB")
def test_huge_or_endless_files_are_refused_unread(tmp_path, trained):
    cases = {}
    for label, (mutate, _) in MEMORY_CASES.items():
        save(tmp_path / label, "c", trained)
        mutate(tmp_path / label / "c")
        cases[label] = str(tmp_path / label)
    proc = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, json.dumps(cases)],
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for label, (_, message) in MEMORY_CASES.items():
        kind, text = report["results"][label]
        assert kind == "CheckpointError" and __import__("re").search(message, text), (label, kind, text)
    assert report["peak_rise_mb"] < 64, report  # nothing was read whole: the model here is ~100 KB


REFERENCE_VARIANTS = [{}, dict(pos_encoding="rope", n_kv_heads=2, activation="swiglu", tie_embeddings=False),
                      dict(n_experts=3, experts_per_token=2), dict(norm="rmsnorm", qk_norm=True, bias=False),
                      dict(pos_encoding="sinusoidal", norm_gain=False)]


@pytest.mark.parametrize("changes", REFERENCE_VARIANTS, ids=repr)
def test_the_reference_model_is_the_same_on_the_cpu_and_on_meta(changes, monkeypatch):
    """A small config's reference model is built on the CPU (fast), a large one's on meta (no memory): the same
    names, shapes and dtypes, and the random stream untouched either way."""
    from minitf_repl.core.config import ModelConfig

    config = ModelConfig(n_layers=1, **changes)

    def signature(model):
        return [(k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items()]

    state = torch.get_rng_state()
    small = ckpt.loading.reference_model(config)
    monkeypatch.setattr(ckpt.loading, "REFERENCE_ON_CPU_PARAMETERS", 0)  # as a config past the limit is built
    large = ckpt.loading.reference_model(config)
    assert torch.equal(torch.get_rng_state(), state)
    assert next(small.parameters()).device.type == "cpu" and next(large.parameters()).device.type == "meta"
    assert signature(small) == signature(large)
    monkeypatch.undo()
    wide = ckpt.loading.reference_model(config.replace(max_seq_len=ckpt.loading.REFERENCE_ON_CPU_WINDOW + 1))
    assert next(wide.parameters()).device.type == "meta"  # a long window's mask is not built in memory


def test_a_small_reference_model_does_not_import_the_compiler():
    """The meta device's first use imports torch._dynamo (0.8 s): a default checkpoint's load does without."""
    code = ("import sys\nfrom minitf_repl.core.checkpoint.loading import size_limits\n"
            "from minitf_repl.core.config import ModelConfig\n"
            "size_limits(ModelConfig(vocab_size=96))\nprint('torch._dynamo' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr[-2000:]


def test_reads_are_bounded_by_the_model_a_config_describes(tmp_path, trained):
    path = save(tmp_path, "c", trained)
    limits = ckpt.loading.size_limits(trained.model.config)
    weights = sum(p.numel() * p.element_size() for p in trained.model.parameters())
    for which in ("model", "state"):
        size = data_file(path, which).stat().st_size
        assert size <= limits[which] <= 2 * weights + 4 * 2**20 + size, (which, size, limits)
    # One byte more than the config can need is refused before the file is opened.
    rewrite_manifest(path, lambda m: m["files"]["state"].update(size=limits["state"] + 1))
    with pytest.raises(CheckpointError, match="more than its model config can need"):
        ckpt.load_checkpoint(tmp_path, "c")


def test_a_save_never_writes_a_manifest_a_load_would_refuse(tmp_path, trained, monkeypatch):
    monkeypatch.setattr(ckpt.store, "MAX_MANIFEST_BYTES", 1024)  # as a run with a very long history would meet it
    with pytest.raises(CheckpointError, match=r"manifest \(2 steps of loss history\), more than the"):
        save(tmp_path, "c", trained)
    assert not (tmp_path / "c").exists()


# --- item 5: messages that say the real cause --------------------------------------------------------
def test_a_checkpoint_directory_that_is_a_file_is_called_one(tmp_path):
    (tmp_path / "afile").write_text("x")
    for directory in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(CheckpointError) as e:
            ckpt.load_checkpoint(directory, "c")
        assert str(e.value) == (f"{tmp_path / 'afile'} is a file, not a directory; start minitf with another "
                                "checkpoint directory")


def test_check_save_target_finds_a_file_in_the_path(tmp_path, trained):
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'afile'} is a file, not a directory"):
        ckpt.check_save_target(tmp_path / "afile" / "sub" / "deeper", "x")
    assert ckpt.check_save_target(tmp_path / "new" / "sub", "x") == tmp_path / "new" / "sub" / "x"


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="root (or Windows) passes permission checks")
def test_check_save_target_finds_a_directory_it_cannot_write(tmp_path, trained):
    locked = tmp_path / "locked"
    locked.mkdir()
    save(locked, "old", trained)
    locked.chmod(0o500)
    (locked / "old").chmod(0o500)
    try:
        for directory, name, where in [(locked, "new", locked), (locked / "sub", "new", locked)]:
            with pytest.raises(CheckpointError) as e:
                ckpt.check_save_target(directory, name)
            assert str(e.value) == (f"cannot write in {where} (permission denied); change its permissions or "
                                    "start minitf with another checkpoint directory")
        with pytest.raises(CheckpointError) as e:  # both refuse: both named, as a save writes in both
            ckpt.check_save_target(locked, "old")
        assert str(e.value) == (f"cannot write in {locked / 'old'} nor in {locked} (permission denied), and a save "
                                "writes in both; change their permissions or start minitf with another checkpoint "
                                "directory")
    finally:
        (locked / "old").chmod(0o700)
        locked.chmod(0o700)


@pytest.mark.parametrize("code, fix", [
    (errno.ENOSPC, "No space left on device; free space or start minitf with another checkpoint directory"),
    (getattr(errno, "EDQUOT", errno.ENOSPC), "; free space or start minitf with another checkpoint directory"),
    (errno.EACCES, "Permission denied; change the permissions of that directory or start minitf with another "
                   "checkpoint directory"),
    (errno.EPERM, "; change the permissions of that directory or start minitf with another checkpoint directory"),
    (errno.EROFS, "Read-only file system (the file system is read-only); start minitf with another checkpoint "
                  "directory"),
    (errno.EIO, "Input/output error; start minitf with another checkpoint directory"),
])  # fmt: skip
def test_a_failed_save_names_its_real_cause(tmp_path, trained, monkeypatch, code, fix):
    def failing_write(path, data):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(ckpt.store, "write_file", failing_write)
    with pytest.raises(CheckpointError) as e:
        save(tmp_path, "c", trained)
    assert str(e.value).startswith(f"could not save checkpoint 'c' in {tmp_path}: ") and str(e.value).endswith(fix)
    if code not in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        assert "free space" not in str(e.value)


def test_core_messages_name_no_shell_syntax():
    """The core is used by the REPL and the command line alike: its messages say what to do in words."""
    for node in ast.walk(ast.parse(inspect.getsource(ckpt))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert ":save" not in node.value and "--checkpoint-dir" not in node.value, node.value


# --- item 2: random states are validated before anything is applied ---------------------------------
def rewrite_tensors(path: Path, which: str, mutate) -> None:
    """Edit a data file and re-sign it (new size and SHA-256 in a re-signed manifest)."""
    target = data_file(path, which)
    tensors = safetensors.torch.load(target.read_bytes())
    mutate(tensors)
    data = safetensors.torch.save(tensors)
    target.write_bytes(data)
    rewrite_manifest(path, lambda m: m["files"][which].update(size=len(data), sha256=hashlib.sha256(data).hexdigest()))


def _scramble(key: str):
    """The right size and type, wrong content: torch refuses it with "Invalid mt19937 state"."""

    def mutate(tensors):
        tensors[key] = torch.full_like(tensors[key], 0xFF)

    return mutate


@pytest.mark.parametrize("key", ["rng.torch", "rng.data"])
def test_an_invalid_random_state_is_refused_by_the_load(tmp_path, trained, key):
    path = save(tmp_path, "c", trained)
    rewrite_tensors(path, "state", _scramble(key))
    rng_before = torch.get_rng_state()
    with pytest.raises(CheckpointError) as e:
        ckpt.load_checkpoint(tmp_path, "c")
    assert str(e.value) == (f"{path}: the training state has an invalid random number state {key} (torch refuses it); "
                            "this checkpoint cannot be used")
    assert torch.equal(torch.get_rng_state(), rng_before)


def test_restore_rng_applies_all_or_nothing(tmp_path, trained):
    save(tmp_path, "c", trained)
    c = ckpt.load_checkpoint(tmp_path, "c")
    c.torch_rng = torch.full_like(c.torch_rng, 0xFF)  # as a caller might be handed one
    torch.manual_seed(1234)
    rng_before = torch.get_rng_state()
    with pytest.raises(CheckpointError, match="invalid random number state rng.torch"):
        ckpt.restore_rng(c)
    assert torch.equal(torch.get_rng_state(), rng_before)


# --- item 4: a checkpoint whose data file is gone still restores (to generate) ----------------------
def test_a_checkpoint_whose_file_is_gone_restores_with_its_vocabulary(tmp_path):
    from minitf_repl.core.data import CharTokenizer, DataError, VocabOnly, load_data
    from minitf_repl.core.config import GenConfig
    from minitf_repl.core.generate import generate

    text_file = tmp_path / "notes.txt"
    text_file.write_text(worker.make_text())
    data = load_data(str(text_file))
    trainer = worker.make_trainer(2, data=data)
    trainer.run()
    ckpt.save_checkpoint(tmp_path / "ck", "c", trainer.model, trainer, data.tokenizer.vocab, str(text_file))
    text_file.unlink()

    c = ckpt.load_checkpoint(tmp_path / "ck", "c")
    stand_in = ckpt.checkpoint_data(c)
    assert isinstance(stand_in, VocabOnly) and stand_in.reason is None
    assert stand_in.tokenizer.vocab == c.vocab == data.tokenizer.vocab  # saved sorted: the same ids
    assert stand_in.tokenizer.stoi == data.tokenizer.stoi
    stand_in.check_fits(c.model_config.max_seq_len)
    assert stand_in.info().vocab_size == c.model_config.vocab_size

    model, restored = ckpt.restore(c, stand_in)
    assert restored.step == trainer.step
    generated = list(generate(model, stand_in.tokenizer.encode("abc"), GenConfig(n=8, temperature=1.0, gen_seed=0)))
    assert len(generated) == 8 and len(stand_in.tokenizer.decode(generated)) == 8

    message = (f"the data this model was trained on ({text_file}) is not available; put the file back to train or "
               "evaluate, or choose other data")
    with pytest.raises(DataError) as e:
        stand_in.get_batch("train", 4, 16, torch.Generator())
    assert str(e.value) == message
    with pytest.raises(DataError, match="is not available"):
        restored.run()

    # Ids follow the saved order even for a vocabulary minitf would have sorted differently.
    assert VocabOnly("x", "ba", "x").tokenizer.encode("ab") == [1, 0] and CharTokenizer("ba").encode("ab") == [0, 1]


def test_checkpoint_data_returns_the_data_when_it_is_there(tmp_path):
    from minitf_repl.core.data import VocabOnly

    trainer = worker.make_trainer(1)
    trainer.run()
    ckpt.save_checkpoint(tmp_path, "c", trainer.model, trainer, trainer.data.tokenizer.vocab, worker.DATA_SPEC)
    c = ckpt.load_checkpoint(tmp_path, "c")
    assert ckpt.checkpoint_data(c, lambda spec: trainer.data) is trainer.data
    changed = ckpt.checkpoint_data(c, lambda spec: worker.TextCorpus("t", worker.make_text().replace("l", "m"), "x"))
    assert isinstance(changed, VocabOnly) and "vocabulary changed" in changed.reason


# --- item 3: out of memory inside Trainer.run -------------------------------------------------------
def same_state(a, b) -> bool:
    """Equal nested dicts/lists of plain values and tensors (tensors compared exactly)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b))
    return a == b


TIMING = ("elapsed", "tokens_per_second")


def test_out_of_memory_in_a_step_leaves_the_trainer_as_it_was(monkeypatch):
    straight = worker.make_trainer(4)
    straight.run()

    trainer = worker.make_trainer(4)
    trainer.run(should_stop=lambda: trainer.step >= 2)
    snap = trainer.snapshot()

    def out_of_memory(*args, **kwargs):
        raise MemoryError("simulated: out of memory in the forward pass")

    monkeypatch.setattr(trainer.model.token_embedding, "forward", out_of_memory)  # either training path calls it
    with pytest.raises(MemoryError):
        trainer.run()
    monkeypatch.undo()
    # Nothing moved: not the batch generator, not the dropout RNG, not the learning rate, not the step.
    assert trainer.step == 2 and len(trainer.history) == 2
    assert same_state(trainer.state_dict(), snap["trainer"]) and torch.equal(torch.get_rng_state(), snap["torch_rng"])
    assert same_state(dict(trainer.model.state_dict()), snap["model"])

    trainer.run()  # and the run continues exactly as if nothing had happened
    assert same_state(dict(trainer.model.state_dict()), dict(straight.model.state_dict()))
    strip = lambda h: [{k: v for k, v in row.items() if k not in TIMING} for row in h]  # noqa: E731
    assert strip(trainer.history) == strip(straight.history)

    # rollback() returns exactly to the snapshot, whatever happened since.
    trainer.rollback(snap)
    assert same_state(trainer.state_dict(), snap["trainer"]) and torch.equal(torch.get_rng_state(), snap["torch_rng"])
    assert same_state(dict(trainer.model.state_dict()), snap["model"])


def test_out_of_memory_while_evaluating_keeps_history_and_step_together(monkeypatch):
    trainer = worker.make_trainer(4)  # evaluates every 3 steps

    def out_of_memory(**_):  # (on_batch: the progress of the evaluation's batches)
        raise MemoryError("simulated: out of memory while evaluating")

    monkeypatch.setattr(trainer, "evaluate", out_of_memory)
    with pytest.raises(MemoryError):
        trainer.run()
    assert trainer.step == 3 and len(trainer.history) == 3 and trainer.history[-1]["val_loss"] is None


@posix_only
def test_manifest_bytes_reads_the_manifest_without_blocking(tmp_path, trained):
    path = save(tmp_path, "c", trained)
    assert ckpt.manifest_bytes(path) == (path / ckpt.MANIFEST).read_bytes()
    assert ckpt.manifest_bytes(tmp_path / "none") is None
    (path / ckpt.MANIFEST).unlink()
    os.mkfifo(path / ckpt.MANIFEST)
    out = in_thread(lambda: ckpt.manifest_bytes(path), path / ckpt.MANIFEST)
    assert out == {"value": None}
