"""The same checks on a CUDA GPU (marked gpu: `./dev test -m gpu`; skipped where there is none).

The CPU suite covers correctness everywhere else; these check what only a GPU exercises: the fused
attention kernels, bfloat16 autocast and torch.compile on CUDA, moving and checkpointing across
devices, and the whole shell on a CUDA session.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json

import pytest
import torch
from rich.console import Console

from minitf_repl import dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import GenConfig, ModelConfig, PRESETS, TrainConfig, preset_changes
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.watch import WATCH_VIEWS
from minitf_repl.dispatch import FrontDoor, FrontEnd, run_command
from minitf_repl.parsing import parse_line
from minitf_repl.session import Session

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=4, n_layers=2, d_ff=48)
VARIANTS = [{}, dict(pos_encoding="rope", n_kv_heads=2, activation="swiglu"), dict(n_experts=3, experts_per_token=2),
            dict(norm="rmsnorm", norm_placement="post", qk_norm=True)] + [
    preset_changes(name, ModelConfig(**SIZES)) for name in PRESETS]


def build(changes, **more):
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**SIZES, **changes, **more})).eval()


@pytest.mark.parametrize("changes", VARIANTS, ids=repr)
def test_cuda_matches_cpu_and_the_fused_path_matches_the_formula(changes):
    idx = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(1))
    cpu = build(changes)
    with torch.no_grad():
        reference, _ = cpu(idx)
        explicit, _ = build(changes).cuda()(idx.cuda())
        sdpa, _ = build(changes, attention="sdpa").cuda()(idx.cuda())
    torch.testing.assert_close(explicit.cpu(), reference, atol=1e-4, rtol=0)
    torch.testing.assert_close(sdpa.cpu(), reference, atol=1e-4, rtol=0)


@pytest.mark.parametrize("changes", VARIANTS, ids=repr)
@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_kv_cache_equals_the_naive_loop_on_cuda(changes, attention):
    model = build(changes, attention=attention).cuda()
    for temperature in (0.0, 1.0):
        cached = list(generate(model, [1, 2, 3], GenConfig(n=30, temperature=temperature, gen_seed=5, cache=True)))
        naive = list(generate(model, [1, 2, 3], GenConfig(n=30, temperature=temperature, gen_seed=5, cache=False)))
        assert cached == naive


def run(session, line):
    command, args = parse_line(line, REGISTRY)
    return run_command(session, command.name, args)


@pytest.mark.parametrize("dtype, optimizer", [("float32", "adamw"), ("bfloat16", "adamw"), ("bfloat16", "muon")])
def test_the_shell_on_a_cuda_session(dtype, optimizer, tmp_path):
    s = Session(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                TrainConfig(batch_size=16, eval_every=5, eval_batches=2, dtype=dtype, optimizer=optimizer),
                data_spec="sort:4", device_name="cuda", checkpoint_dir=tmp_path)
    result = run(s, ":train steps=10")
    assert result.steps == 10 and result.val_loss < 2.5 and result.dtype == dtype
    assert next(s.model.parameters()).device.type == "cuda"
    assert next(s.model.parameters()).dtype == torch.float32  # autocast: weights stay float32
    for line in (":gen 1234= n=5", ":attn 1234=", ":step 1234=", ":lens 1234=", ":shapes", ":params", ":plot",
                 ":ablate head=0.1", ":ablate off", ":compare current n_layers=1 steps=4"):
        run(s, line)
    run(s, ":save g")
    other = Session(data_spec="sort:4", device_name="cpu", checkpoint_dir=tmp_path)
    run(other, ":load g")
    assert other.trainer.config.optimizer == optimizer
    assert all(v.device.type == "cpu" for st in other.trainer.optimizer.state.values() for v in st.values())
    idx = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        torch.testing.assert_close(other.model(idx)[0], s.model(idx.cuda())[0].cpu(), atol=1e-5, rtol=0)
    run(s, ":device cpu")
    assert next(s.model.parameters()).device.type == "cpu" and run(s, ":train steps=2").steps == 2


@pytest.mark.parametrize("positions", ["rope", "sinusoidal", "none"])
def test_a_new_window_on_cuda_keeps_the_weights_and_its_tables_on_the_gpu(positions, tmp_path):
    s = Session(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=16, pos_encoding=positions),
                TrainConfig(batch_size=8, eval_every=5, eval_batches=2), data_spec="pydoc", device_name="cuda",
                checkpoint_dir=tmp_path)
    run(s, ":train steps=3")
    weights = {k: v.clone() for k, v in s.model.state_dict().items()}
    assert not run(s, ":set max_seq_len=40").rebuilt
    assert all(torch.equal(v, weights[k]) for k, v in s.model.state_dict().items())
    assert all(b.device.type == "cuda" for b in s.model.buffers()) and s.model.config.max_seq_len == 40
    assert run(s, ":gen a n=35 temperature=0 cache=on").text == run(s, ":gen a n=35 temperature=0 cache=off").text
    assert run(s, ":train steps=2").steps == 2


def test_compile_on_cuda_trains_like_eager(tmp_path):
    losses = {}
    for compile_ in (False, True):
        s = Session(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                    TrainConfig(batch_size=16, eval_every=5, eval_batches=2, compile=compile_, seed=3,
                                dtype="float32"),  # the same numbers to 1e-3: float32 (auto is bfloat16 there)
                    data_spec="sort:4", device_name="cuda", checkpoint_dir=tmp_path)
        result = run(s, ":train steps=5")
        assert result.compiled == compile_
        losses[compile_] = result.train_loss
    assert abs(losses[True] - losses[False]) < 1e-3


@pytest.mark.parametrize("changes", VARIANTS, ids=repr)
def test_backprop_on_cuda_matches_the_cpu_and_its_check_runs_on_the_cpu(changes):
    from minitf_repl.core.backprop import backprop

    ids = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3]
    cpu, gpu = backprop(build(changes), ids), backprop(build(changes).cuda(), ids)
    assert gpu.loss == pytest.approx(cpu.loss, rel=1e-4) and gpu.top == pytest.approx(cpu.top, rel=1e-3)
    assert [p.grad for p in gpu.parts] == pytest.approx([p.grad for p in cpu.parts], rel=1e-3, abs=1e-6)
    assert gpu.check.relative < 1e-3 and gpu.check.measured == pytest.approx(cpu.check.measured, rel=1e-6)


def front_door(session, folder, json_out: bool) -> tuple[FrontDoor, object]:
    log = open(folder / "shell.txt", "w")
    console = Console(file=log, width=100, color_system=None)
    return FrontDoor(session, console, console, FrontEnd(syntax="shell", json=json_out, live=False)), log


def on_cuda(session) -> bool:
    return all(p.device.type == "cuda" for p in session.model.parameters())


@pytest.mark.parametrize("dtype, json_out", [("float32", True), ("bfloat16", False)],
                         ids=["float32-json", "bf16-shown"])
def test_every_command_on_a_cuda_session(dtype, json_out, tmp_path, every_command_lines):
    """The lines tests/test_json_schema.py runs on the CPU, on CUDA: every view, check, training run, save and
    load through the front door, as a user types them (shown through Rich, or printed as --json documents)."""
    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=2, dtype=dtype),
                data_spec="sort:4", device_name="cuda", checkpoint_dir=tmp_path / "checkpoints")
    door, log = front_door(s, tmp_path, json_out)
    reference = importlib.util.find_spec("transformers") is not None
    for line in every_command_lines(tmp_path, reference=reference):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = door.run_line(line)
        log.flush()
        # a check that FAILs fails :checks (3 steps overfit nothing), and says so in one line
        failed_checks = line.startswith(":checks") and status == dispatch.FAILED and \
            "failed" in (tmp_path / "shell.txt").read_text()
        assert status == dispatch.OK or failed_checks, (line, (tmp_path / "shell.txt").read_text()[-800:])
        if json_out:
            assert json.loads(out.getvalue())["schema"].startswith(f"minitf.{line.split()[0].lstrip(':')}/"), line
        assert on_cuda(s), f"{line} left the model off the GPU"
    assert "Traceback" not in (tmp_path / "shell.txt").read_text()


@pytest.mark.parametrize("watch", WATCH_VIEWS)
def test_every_watch_and_the_longer_context_on_cuda(watch, tmp_path):
    """:train watch=VIEW (each view made at every evaluation on the GPU), its :plot, :context past the window
    (rope) and :report with every section, on a CUDA session over a text file."""
    path = tmp_path / "text.txt"
    path.write_text("the cat sat on the mat; a dog ran in the fog. " * 200)
    s = Session(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=24, pos_encoding="rope"),
                TrainConfig(batch_size=8, eval_every=4, eval_batches=2), data_spec=str(path), device_name="cuda",
                checkpoint_dir=tmp_path / "checkpoints")
    door, log = front_door(s, tmp_path, json_out=False)
    charts = {"lens": ["lens_rank"], "grad": ["block_grad"], "heads": ["copying", "induction"], "context": ["context"]}
    lines = [f":train steps=8 watch={watch}", ":plot", *(f":plot what={what}" for what in charts.get(watch, ["lr"])),
             ":context windows=16 length=48", f":report {tmp_path}/r.html"]
    for line in lines:
        status = door.run_line(line)
        log.flush()
        assert status == dispatch.OK, (line, (tmp_path / "shell.txt").read_text()[-800:])
    assert on_cuda(s) and (tmp_path / "r.html").stat().st_size > 10_000
