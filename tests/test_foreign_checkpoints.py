"""Issue "Nothing lost, nothing hangs, part two": checkpoints someone else wrote (or edited).

Each case is a consistent, re-signed forgery (the checksums match), so only the checks behind the
checksum can catch it. What a manifest claims is checked against the bytes before any work grows
with it; every field of its history and configs is validated, and a bad one refuses that
checkpoint in one line while `:ls` goes on listing the others; weights that are not finite are
refused. Each test fails on the code before the fix.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
from rich.console import Console

from minitf_repl import repl
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.errors import CheckpointError
from minitf_repl.session import Session

_spec = importlib.util.spec_from_file_location("checkpoint_worker", Path(__file__).with_name("checkpoint_worker.py"))
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)


@pytest.fixture(scope="module")
def trained():
    trainer = worker.make_trainer(3)
    trainer.run()  # evaluates at step 3: the last row has a val_loss
    return trainer


def save(directory: Path, name: str, trainer) -> Path:
    return ckpt.save_checkpoint(directory, name, trainer.model, trainer, trainer.data.tokenizer.vocab, worker.DATA_SPEC)


def drive(folder: Path, *lines: str) -> tuple[int, str, str]:
    """Lines through the REPL's own dispatch, on a session whose checkpoint folder is `folder`."""
    out = Console(file=io.StringIO(), width=120, color_system=None, soft_wrap=True)
    err = Console(file=io.StringIO(), width=120, color_system=None, soft_wrap=True)
    session = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32), data_spec="sort",
                      device_name="cpu", checkpoint_dir=folder)
    code = repl.run_lines(list(lines), session, out, err)
    return code, out.file.getvalue(), err.file.getvalue()


def one_error_line(err: str) -> str:
    """The one error of piped input's standard error, where its notices go too (as the one-shot shell's do: a
    `:gen`'s speed line, a run's evaluations): each message there is one line."""
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert "internal error" not in err and "Traceback" not in err
    return errors[0]


# --- claims checked before work scales with them ---------------------------------------------------------
# In a separate process, under a memory cap and a timeout: before the fix, 20,000 claimed layers were
# built on the meta device (minutes, gigabytes) before any bound was checked, and a context of 100,000
# positions allocated its causal masks (10 GB a layer) when the model was built.
_PROBE = r"""
import json, resource, sys, time
import torch  # before the cap: a CUDA build maps gigabytes of libraries (libcurand...) as torch is imported
from minitf_repl.core import checkpoint as ckpt

with open("/proc/self/statm") as f:  # 2 GiB over what is mapped now (a CUDA torch maps several GiB, a CPU one 1)
    size_now = int(f.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (size_now + 2 * 2**30, resource.RLIM_INFINITY))
results = {}
for label, directory in json.loads(sys.argv[1]).items():
    start = time.perf_counter()
    try:
        c = ckpt.load_checkpoint(directory, "c")
        ckpt.build_model(c)
        results[label] = ["loaded", "", time.perf_counter() - start]
    except BaseException as e:
        results[label] = [type(e).__name__, str(e)[:400], time.perf_counter() - start]
print(json.dumps(results))
"""

CLAIMS = {
    "1000-layers": (dict(n_layers=1_000), r"describes [\d,]+ parameters \([\d,]+ bytes of weights\) but its model "
                                            r"file holds [\d,]+ bytes; this checkpoint is inconsistent"),
    "100000-positions": (dict(max_seq_len=100_000, pos_encoding="rope"),
                         r"it asks for more than this lab builds \(max_seq_len=100,000 is too large: at most"),
}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as a memory cap is Linux's")
def test_claims_beyond_the_bytes_are_refused_before_anything_is_built(tmp_path, trained):
    cases = {}
    for label, (changes, _) in CLAIMS.items():
        save(tmp_path / label, "c", trained)
        worker.rewrite_manifest(tmp_path / label / "c", lambda m: m["model_config"].update(changes))
        cases[label] = str(tmp_path / label)
    try:
        proc = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(cases)], capture_output=True, text=True,
                              timeout=90)
    except subprocess.TimeoutExpired:
        pytest.fail("loading the forged checkpoints ran past 90 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    for label, (_, message) in CLAIMS.items():
        kind, text, seconds = results[label]
        assert kind == "CheckpointError" and __import__("re").search(message, text), (label, kind, text)
        assert seconds < 5, (label, seconds)


def test_the_sizes_counted_on_one_block_are_those_of_the_whole_model():
    """expected_tensors and size_limits (core.checkpoint.loading) extrapolate one block: the same as the built model, for every variant."""
    for changes in [{}, dict(n_kv_heads=1), dict(pos_encoding="rope", norm="rmsnorm", activation="swiglu"),
                    dict(n_experts=4, experts_per_token=2), dict(norm_placement="post", tie_embeddings=False),
                    dict(qk_norm=True, bias=False, pos_encoding="learned")]:
        config = ModelConfig(**{**worker.SIZES, "n_layers": 3, **changes})
        ref = ckpt.loading.reference_model(config)
        aliases = ckpt.manifest.tied_aliases(ref)
        state = {k: v for k, v in ref.state_dict().items() if k not in aliases}
        expected, got_aliases, order = ckpt.loading.expected_tensors(config)
        assert order == list(ref.state_dict()) and got_aliases == aliases, changes
        assert {k: (tuple(v.shape), v.dtype) for k, v in expected.items()} == \
               {k: (tuple(v.shape), v.dtype) for k, v in state.items()}, changes
        weights = sum(v.numel() * v.element_size() for v in state.values())
        assert ckpt.loading.size_limits(config)["weights"] == weights, changes


# --- every field validated; a bad one never breaks :ls --------------------------------------------------
def _history(mutate):
    def change(m):
        mutate(m["trainer"]["history"])
    return change


FIELDS = {
    # label: (mutation of the manifest, what the one-line refusal says)
    "val_loss-is-text": (_history(lambda h: h[-1].update(val_loss="0.5")),
                         "trainer.history[2] has a val_loss that is neither a finite number nor null ('0.5')"),
    "no-lr": (_history(lambda h: h[-1].pop("lr")), "trainer.history[2] has no lr"),
    "lr-is-nan": (_history(lambda h: h[0].update(lr=float("nan"))),
                  "trainer.history[0] has a lr that is not a finite number (nan)"),
    "step-is-text": (_history(lambda h: h[1].update(step="2")), "trainer.history[1] has a step that is not a whole"),
    "step-after-the-end": (_history(lambda h: h[1].update(step=99)), "trainer.history[1] is step 99, after"),
    "row-is-a-list": (_history(lambda h: h.append([1, 2])), "trainer.history[3] is not a step"),
    "unknown-text-field": (_history(lambda h: h[0].update(note="\x1b[2J")),
                           "trainer.history[0] has an unknown field 'note' that is not a number"),
    "accuracy-is-a-list": (_history(lambda h: h[-1].update(accuracy=[1])), "has a accuracy that is neither"),
    "data_spec-escapes": (lambda m: m.update(data_spec="sort\x1b]0;pwned\x07"), "data_spec is missing or not printable"),
    "saved_at-escapes": (lambda m: m.update(saved_at="\x1b[31m2026"), "saved_at is not short printable text"),
    "origin-unknown": (lambda m: m.update(origin={"kind": "mine"}), "origin is malformed"),
    "d_model-is-text": (lambda m: m["model_config"].update(d_model="32"), "its model config is invalid"),
    "lr-setting-is-text": (lambda m: m["trainer"]["train_config"].update(lr="0.01"), "its training config is invalid"),
    "a-billion-eval-batches": (lambda m: m["trainer"]["train_config"].update(eval_batches=10**9),
                               "it asks for more than this lab builds (eval_batches=1,000,000,000 is too large"),
}


@pytest.mark.parametrize("case", list(FIELDS))
def test_a_bad_field_refuses_that_checkpoint_in_one_line_and_ls_lists_the_rest(tmp_path, trained, case):
    mutate, message = FIELDS[case]
    save(tmp_path, "good", trained)
    save(tmp_path, "bad", trained)
    worker.rewrite_manifest(tmp_path / "bad", mutate)
    with pytest.raises(CheckpointError, match=__import__("re").escape(message)):
        ckpt.load_checkpoint(tmp_path, "bad")

    code, out, err = drive(tmp_path, ":ls", ":load bad", ":load good", ":gen abc n=4")
    assert one_error_line(err).startswith(f"error: line 2: {tmp_path / 'bad'}")  # :load bad, and nothing else failed
    assert message in err
    listing = out.split("loaded good")[0]
    assert "good" in listing and "bad:" in listing and "\x1b" not in out
    assert "4 tokens in" in err  # the good one loaded and generates (its speed line: a notice, on stderr)


def test_a_row_from_before_aux_loss_loads_with_it_as_null(tmp_path, trained):
    save(tmp_path, "old", trained)
    worker.rewrite_manifest(tmp_path / "old", _history(lambda h: [(r.pop("aux_loss"), r.pop("compile_seconds")) for r in h]))
    history = ckpt.load_checkpoint(tmp_path, "old").trainer_state["history"]
    assert all(r["aux_loss"] is None and r["compile_seconds"] is None for r in history)


# --- weights that are not finite ------------------------------------------------------------------------
def _poison(path: Path, which: str, key_prefix: str) -> str:
    m = worker.manifest_of(path)
    target = path / m["files"][which]["file"]
    tensors = safetensors.torch.load(target.read_bytes())
    key = sorted(k for k in tensors if k.startswith(key_prefix))[0]
    tensors[key] = tensors[key].clone()
    tensors[key].view(-1)[:3] = torch.tensor([float("nan"), float("inf"), 1.0])
    data = safetensors.torch.save(tensors, metadata={"format": "pt"})
    target.write_bytes(data)
    worker.rewrite_manifest(path, lambda m: m["files"][which].update(size=len(data), sha256=hashlib.sha256(data).hexdigest()))
    return key


@pytest.mark.parametrize("which, prefix, what", [("model", "blocks.0.attn", "the weight"),
                                                 ("state", "optim.", "the optimizer state")])
def test_weights_that_are_not_finite_are_refused_at_load(tmp_path, trained, which, prefix, what):
    save(tmp_path, "nan", trained)
    key = _poison(tmp_path / "nan", which, prefix)
    with pytest.raises(CheckpointError) as e:
        ckpt.load_checkpoint(tmp_path, "nan")
    assert str(e.value) == (f"{tmp_path / 'nan'}: {what} {key} holds 2 values that are not finite (NaN or infinity), "
                            "which no model can generate or train with; this checkpoint cannot be used")
    # Before: the load worked, and every :gen after it was "internal error: probability tensor contains inf, nan".
    code, out, err = drive(tmp_path, ":load nan", ":gen 12 n=3")
    assert "not finite" in one_error_line(err) and "3 tokens in" in err
