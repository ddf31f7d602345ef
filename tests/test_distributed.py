"""Past one process: torchrun with 2 CPU ranks (gloo) trains exactly as one process with the global batch.

The launches go through the real front door (`python -m torch.distributed.run ... -m minitf_repl
train`), each rank's output to its own log files (torchrun --redirects 3), so the tests also see
that rank 1 prints nothing and that only rank 0 saves. The reference runs in this process through
the same CLI with batch_size 8 = 2 ranks x 4.
"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli, dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.core import distributed
from minitf_repl.core.checkpoint import load_checkpoint
from minitf_repl.session import Session

if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
    pytest.skip("this torch has no torch.distributed with the gloo backend", allow_module_level=True)

# 1 layer, d_model 16, unequal widths; eval at step 2 and 4 so rank 0's evaluation runs mid-run too.
# float32: "equal to float tolerance" is a float32 claim (dtype=auto trains in bfloat16 on a CPU with
# AMX, where a 4-row and an 8-row batch round their products differently).
TINY = "n_layers=1 d_model=16 n_heads=2 d_ff=24 max_seq_len=16 eval_every=2 eval_batches=1 dtype=float32"
TOL = 1e-5


def torchrun(tmp_path: Path, checkpoints: Path, *args: str) -> dict:
    """Launch 2 CPU ranks; return {rank: (stdout, stderr)} from torchrun's per-rank log files."""
    logs = tmp_path / f"logs{len(list(tmp_path.glob('logs*')))}"
    # the ranks import this checkout's minitf_repl (they start in tmp_path), not whichever one is installed
    path = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "MINITF_CHECKPOINT_DIR": str(checkpoints), "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": path}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "--log-dir", str(logs), "--redirects", "3", "-m", "minitf_repl", "--device", "cpu", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    out = {}
    for rank in (0, 1):
        (folder,) = logs.glob(f"*/attempt_0/{rank}")
        out[rank] = ((folder / "stdout.log").read_text(), (folder / "stderr.log").read_text())
    assert done.returncode == 0, (done.stderr[-2000:], out)
    return out


def single(checkpoints: Path, monkeypatch, *args: str) -> dict:
    """The same command in one process (this one), as JSON."""
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(checkpoints))
    result = CliRunner().invoke(cli.app, ["--device", "cpu", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_same_training(a: Path, b: Path, name_a: str, name_b: str, weights_atol: float = TOL) -> None:
    """Two checkpoints hold the same weights, losses and batch stream (to float tolerance)."""
    ca, cb = load_checkpoint(a, name_a), load_checkpoint(b, name_b)
    assert ca.model_state.keys() == cb.model_state.keys()
    for key in ca.model_state:
        torch.testing.assert_close(ca.model_state[key], cb.model_state[key], rtol=0, atol=weights_atol, msg=key)
    ha, hb = ca.trainer_state["history"], cb.trainer_state["history"]
    assert [h["step"] for h in ha] == [h["step"] for h in hb]
    for x, y in zip(ha, hb):
        assert x["train_loss"] == pytest.approx(y["train_loss"], abs=TOL)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], abs=TOL)
        assert (x["val_loss"] is None) == (y["val_loss"] is None)
        if x["val_loss"] is not None:
            assert x["val_loss"] == pytest.approx(y["val_loss"], abs=TOL)
    assert torch.equal(ca.trainer_state["generator"], cb.trainer_state["generator"])  # the same global batches


def test_two_ranks_train_as_one_process_with_the_global_batch(tmp_path, monkeypatch):
    ddp_dir, ref_dir = tmp_path / "ddp", tmp_path / "ref"
    # AdamW: its update is elementwise, so the global batch's gradient (equal to float rounding) gives
    # weights equal to float rounding (measured 4e-6). Muon's Newton-Schulz spreads rounding over a
    # matrix: its own test below.
    out = torchrun(tmp_path, ddp_dir, "--data", "sort", "--set", TINY, "--set", "batch_size=4 optimizer=adamw",
                   "train", "--steps", "4", "--json")
    # rank 0 alone speaks: one JSON document; rank 1 prints nothing at all
    assert out[1] == ("", ""), out[1]
    lines = out[0][0].strip().splitlines()
    assert len(lines) == 1
    ddp = json.loads(lines[0])
    assert ddp["steps"] == 4 and ddp["saved"] == "autosave" and len(ddp["evals"]) == 2

    ref = single(ref_dir, monkeypatch, "--data", "sort", "--set", TINY, "--set", "batch_size=8 optimizer=adamw",
                 "train", "--steps", "4")
    assert ddp["train_loss"] == pytest.approx(ref["train_loss"], abs=TOL)  # the logged loss is the global batch's
    assert ddp["val_loss"] == pytest.approx(ref["val_loss"], abs=TOL)
    assert sorted(p.name for p in ddp_dir.iterdir() if not p.name.startswith(".")) == ["autosave"]
    assert_same_training(ddp_dir, ref_dir, "autosave", "autosave")

    # the distributed checkpoint loads in one process, with MiniTransformerLM's names, and trains on
    session = Session(data_spec="sort", device_name="cpu", checkpoint_dir=ddp_dir)
    loaded = dispatch.run_command(session, "load", {"name": "autosave"})
    assert loaded.step == 4
    assert not any(key.startswith("module.") for key in load_checkpoint(ddp_dir, "autosave").model_state)
    assert dispatch.run_command(session, "train", {"steps": "1"}).steps == 1


def test_two_ranks_train_with_muon_as_one_process(tmp_path, monkeypatch):
    """Muon orthogonalises each matrix's momentum after DDP has averaged the gradients, so every rank
    makes the update one process makes with the global batch, but for rounding. On a CPU with
    bfloat16 units Newton-Schulz runs in bfloat16, and a gradient that differs in its last float32 bit
    (DDP sums in another order) can round an entry one bfloat16 step (2^-8 of it) the other way, and
    the five NS steps spread it over the matrix: up to about 4e-5 on a weight here (Xeon with AMX).
    Elsewhere NS runs in float32 (core.precision.fast_dtype): 7e-6 here (Xeon without bfloat16
    units). So the weights get 1e-4, below what one step
    moves an entry at the peak lr (lr * 0.2 sqrt(24) / sqrt(24), about 6e-4), let alone a rank that
    trained on its own slice; the losses keep TOL."""
    ddp_dir, ref_dir = tmp_path / "ddp", tmp_path / "ref"
    torchrun(tmp_path, ddp_dir, "--data", "sort", "--set", TINY, "--set", "batch_size=4 optimizer=muon",
             "train", "--steps", "4", "--json")
    single(ref_dir, monkeypatch, "--data", "sort", "--set", TINY, "--set", "batch_size=8 optimizer=muon",
           "train", "--steps", "4")
    for folder in (ddp_dir, ref_dir):
        assert load_checkpoint(folder, "autosave").trainer_state["train_config"]["optimizer"] == "muon"
    assert_same_training(ddp_dir, ref_dir, "autosave", "autosave", weights_atol=1e-4)


def test_two_ranks_train_in_bfloat16_close_to_one_process(tmp_path, monkeypatch):
    """dtype=auto is bfloat16 on a CPU with AMX: DDP under autocast trains as one process does, to
    bfloat16's precision. The losses agree closely (measured: 2e-5 relative; a 4-row and an 8-row
    product round differently). The weights are compared through the losses and not entry by entry:
    Muon orthogonalises the momentum, which turns its smallest directions, where bfloat16's rounding
    lives, into full-sized steps (up to 0.02 on an entry here, against 4e-5 in float32)."""
    ddp_dir, ref_dir = tmp_path / "ddp", tmp_path / "ref"
    tiny = TINY.replace("dtype=float32", "dtype=bfloat16")
    torchrun(tmp_path, ddp_dir, "--data", "sort", "--set", tiny, "--set", "batch_size=4", "train", "--steps", "4",
             "--json")
    single(ref_dir, monkeypatch, "--data", "sort", "--set", tiny, "--set", "batch_size=8", "train", "--steps", "4")
    ca, cb = load_checkpoint(ddp_dir, "autosave"), load_checkpoint(ref_dir, "autosave")
    assert ca.trainer_state["train_config"]["dtype"] == cb.trainer_state["train_config"]["dtype"] == "bfloat16"
    ha, hb = ca.trainer_state["history"], cb.trainer_state["history"]
    for key in ("train_loss", "val_loss"):
        a, b = [[h[key] for h in hist if h[key] is not None] for hist in (ha, hb)]
        assert len(a) == len(b) > 0 and a == pytest.approx(b, rel=1e-3), key
    assert torch.equal(ca.trainer_state["generator"], cb.trainer_state["generator"])  # the same global batches


def test_a_single_process_checkpoint_continues_under_two_ranks(tmp_path, monkeypatch):
    start = tmp_path / "start"
    single(start, monkeypatch, "--data", "sort", "--set", TINY, "--set", "batch_size=8", "train", "--steps", "2",
           "--save", "begun")
    out = torchrun(tmp_path, start, "--load", "begun", "--set", "batch_size=4", "train", "--steps", "2",
                   "--save", "ddp", "--json")
    assert out[1] == ("", "")
    assert json.loads(out[0][0])["total_steps"] == 4
    single(start, monkeypatch, "--load", "begun", "train", "--steps", "2", "--save", "ref")
    assert_same_training(start, start, "ddp", "ref")


def test_a_non_zero_rank_neither_saves_nor_prints(checkpoint_dir, monkeypatch, capsys):
    """What rank 1 does, without launching it: no checkpoint written, nothing on stdout or stderr."""
    monkeypatch.setattr(distributed, "is_main", lambda: False)
    session = Session(data_spec="sort", device_name="cpu")
    cli.apply_settings(session, [TINY, "batch_size=4"])
    out, err = io.StringIO(), io.StringIO()
    door = dispatch.FrontDoor(session, Console(file=out), Console(file=err),
                              dispatch.FrontEnd(syntax="shell", json=True, quiet=True))
    assert door.run(REGISTRY.find("train"), {"steps": "2"}) == dispatch.OK
    assert session.trainer.step == 2
    assert out.getvalue() == err.getvalue() == "" and capsys.readouterr().out == ""
    assert not checkpoint_dir.exists() or not any(checkpoint_dir.iterdir())


# --- a rank that dies: rank 0's one line, in this process (tests/test_signals.py kills a real rank) ---------
GLOO_GONE = ("[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer "
             "[127.0.0.1]:5030. This is typically caused by a remote worker crashing.")
GONE_LINE = "error: another process of this torchrun launch stopped (connection closed by peer) "


def _train_as_rank_0(steps: int) -> tuple[str, Session, list[str]]:
    """`train --steps N` through the front door as rank 0 would run it: (status, session, lines on stderr)."""
    session = Session(data_spec="sort", device_name="cpu")
    cli.apply_settings(session, [TINY, "batch_size=4"])
    out, err = io.StringIO(), io.StringIO()
    door = dispatch.FrontDoor(session, Console(file=out, width=1000), Console(file=err, width=1000),
                              dispatch.FrontEnd(syntax="shell", json=False, quiet=False))
    status = door.run(REGISTRY.find("train"), {"steps": str(steps)})
    return status, session, [line for line in err.getvalue().splitlines() if line.strip()]


def test_a_rank_that_dies_while_ddp_starts_gives_one_line_and_saves_nothing(checkpoint_dir, monkeypatch):
    """DDP's constructor sends rank 0's weights to every rank: a rank killed then is a peer lost, not an
    internal error (it was one, seen when a rank was killed a second after its imports)."""
    def gone(model, device):
        raise RuntimeError(GLOO_GONE)

    monkeypatch.setattr(distributed, "active", lambda: True)
    monkeypatch.setattr(distributed, "wrap", gone)
    status, session, lines = _train_as_rank_0(steps=5)
    assert status == dispatch.FAILED
    assert lines == [GONE_LINE + "before step 1 began; this one stopped too, with the weights of step 0; "
                     "no step of this run finished, so nothing was saved"]
    assert session.trainer.step == 0
    assert not checkpoint_dir.exists() or not any(checkpoint_dir.iterdir())


@pytest.mark.parametrize("dies_at_check, says, saved", [
    (1, "during step 1; this one stopped too, with the weights of step 0; no step of this run finished, so "
        "nothing was saved", None),
    (3, "during step 3; this one stopped too, with the weights of step 2; saved as checkpoint autosave (step 2); "
        "minitf --load autosave train continues", 2),  # (the same launch under a real torchrun: distributed.relaunch)
])
def test_a_rank_that_dies_mid_run_keeps_what_every_rank_finished(checkpoint_dir, monkeypatch, dies_at_check, says,
                                                                  saved):
    """The agreed stop check before each step is a collective: the rank gone there ends the run in one line."""
    checks = []

    def any_rank(flag, device):
        checks.append(flag)
        if len(checks) == dies_at_check:
            raise RuntimeError(GLOO_GONE)
        return flag

    monkeypatch.setattr(distributed, "active", lambda: True)
    monkeypatch.setattr(distributed, "wrap", lambda model, device: model)  # one process: DDP's place, no DDP
    monkeypatch.setattr(distributed, "mean", lambda value: value)
    monkeypatch.setattr(distributed, "any_rank", any_rank)
    status, session, lines = _train_as_rank_0(steps=5)
    assert status == dispatch.FAILED
    assert lines == [GONE_LINE + says]
    assert session.trainer.step == dies_at_check - 1
    if saved is None:
        assert not checkpoint_dir.exists() or not any(checkpoint_dir.iterdir())
    else:
        assert load_checkpoint(checkpoint_dir, "autosave").step == saved


def test_after_the_command_the_trainer_lets_go_of_ddp_before_the_group_is_left(monkeypatch):
    """DDP holds the process group; kept past destroy_process_group, gloo's threads end only at interpreter
    exit, which can abort the rank (Trainer.leave_ranks). cli.leave_ranks drops it, collects, then leaves."""
    import gc
    import weakref

    class Wrapper(torch.nn.Module):  # stands in for DistributedDataParallel: wraps the module a step calls
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, *args, **kwargs):
            return self.module(*args, **kwargs)

    monkeypatch.setattr(distributed, "active", lambda: True)
    monkeypatch.setattr(distributed, "wrap", lambda module, device: Wrapper(module))
    monkeypatch.setattr(distributed, "mean", lambda value: value)
    monkeypatch.setattr(distributed, "any_rank", lambda flag, device: flag)
    session = Session(data_spec="sort", device_name="cpu")
    cli.apply_settings(session, [TINY, "batch_size=4"])
    dispatch.run_command(session, "train", {"steps": "1"})
    wrapper = weakref.ref(session.trainer._ddp)
    assert isinstance(wrapper(), Wrapper)
    left = []
    monkeypatch.setattr(distributed, "destroy", lambda: left.append(wrapper() is None))

    class Context:
        obj = cli._State(session, debug=False)

    cli.leave_ranks(Context())
    assert left == [True]  # the wrapper was gone before the group was left
