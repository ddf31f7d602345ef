"""The speed switches: bfloat16 autocast, torch.compile (and its fallback), int8 sampling (:quantize).

Each switch is checked in the core (the numbers) and end to end through `run_command` / the shell
(what a person sees). Sizes are small and unequal, as in the other tests.
"""

import copy
import functools
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli
from minitf_repl.commands import QuantizeResult, TrainResult
from minitf_repl.core import precision
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.quantize import quantize_for_sampling, state_dict_bytes
from minitf_repl.core.train import Trainer
from minitf_repl.dispatch import to_json
from minitf_repl.commands.train import train_summary
from minitf_repl.render import render

from test_commands import Recorder, run, tiny_session

TINY = dict(n_layers=2, d_model=48, n_heads=3, d_ff=80, max_seq_len=24)


def trainer(dtype="float32", compile=False, steps=2, seed=7, data="sort:4"):
    data = load_data(data)
    torch.manual_seed(seed)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, **TINY))
    config = TrainConfig(steps=steps, batch_size=3, eval_every=steps, eval_batches=2, seed=seed, dtype=dtype,
                         compile=compile)
    return Trainer(model, data, config)


def losses(t: Trainer) -> list[float]:
    return [h["train_loss"] for h in t.history]


def render_text(result, width=100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, console)
    return console.file.getvalue()


# --- bfloat16 --------------------------------------------------------------------------------------
def test_a_bfloat16_step_is_close_to_float32_and_really_ran_in_bfloat16():
    fp32, bf16 = trainer(), trainer("bfloat16")
    fp32.run()
    summary = bf16.run()
    a, b = losses(fp32)[0], losses(bf16)[0]  # the same weights and batch: only the precision differs
    assert all(map(torch.isfinite, map(torch.tensor, losses(bf16))))
    assert a != b, "the bfloat16 loss equals the float32 one exactly: autocast was not applied"
    assert abs(a - b) < 2e-2 * a
    assert summary.dtype == "bfloat16"


@pytest.fixture(params=[True, False], ids=["bf16-units", "no-bf16-units"])
def bf16_units(request, monkeypatch):
    """Both kinds of CPU, whichever this one is: with bfloat16 matrix units (AMX, AVX512-BF16) and without."""
    monkeypatch.setattr(precision, "native_bf16", lambda device: request.param)
    return request.param


def test_auto_trains_in_bfloat16_exactly_where_the_cpu_has_bfloat16_units(bf16_units):
    t = trainer("auto")
    notes = []
    summary = t.run(on_notice=notes.append)
    assert summary.dtype == ("bfloat16" if bf16_units else "float32")
    assert notes == []  # auto chose it: nothing to warn about
    reference = trainer("bfloat16" if bf16_units else "float32")
    reference.run()
    assert losses(t) == losses(reference)  # auto is exactly the dtype it names


def test_asking_for_bfloat16_without_bfloat16_units_says_so_once(bf16_units):
    notes = []
    t = trainer("bfloat16", steps=3)
    t.run(on_notice=notes.append, should_stop=lambda: t.step >= 1)
    t.run(on_notice=notes.append)
    if bf16_units:
        assert notes == []
    else:
        assert len(notes) == 1 and "emulated" in notes[0] and "dtype=auto picks float32" in notes[0]


def test_the_cpu_says_whether_it_has_bfloat16_units():
    """The answer read against the kernel's own list, on this machine; a oneDNN cap (bench/as_avx2.py)
    leaves the units unused, and then the answer is no whatever the list says."""
    from minitf_repl.core.device import bf16_isa_cap, cpu_has_bf16_units, describe_devices, native_bf16

    cpuinfo = Path("/proc/cpuinfo")
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.read_text().splitlines()
                  if line.startswith("flags")), None) if cpuinfo.exists() else None
    if flags is not None:  # Linux on x86: the kernel's own list of the CPU's features
        has_units = "amx_tile" in flags or "avx512_bf16" in flags
        assert cpu_has_bf16_units() == (has_units and bf16_isa_cap() is None)
    assert native_bf16("cpu") == cpu_has_bf16_units() == describe_devices()[0].bf16


def test_train_in_bfloat16_end_to_end(bf16_units):
    s = tiny_session()
    assert s.train_config.dtype == "auto"
    default = run(s, ":train steps=1")
    assert default.dtype == ("bfloat16" if bf16_units else "float32")
    assert ("bfloat16" in train_summary(default)) == bf16_units  # the summary names what auto picked
    at_set = Recorder()
    run(s, ":set dtype=bfloat16", at_set)
    assert s.train_config.dtype == "bfloat16"
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    assert isinstance(result, TrainResult) and result.dtype == "bfloat16"
    # emulated bfloat16 is said once, where it was chosen (test_sweep_as), and not again by the :train; the :train
    # says the model's step before ran in float32 there (a precision moved by the setting, as by another machine)
    assert sum("bfloat16" in n for n in at_set.notices) == (0 if bf16_units else 1)
    moved = [n for n in hooks.notices if "bfloat16" in n]
    assert len(moved) == (0 if bf16_units else 1), moved
    assert all("ran in float32 and go on here in bfloat16" in n for n in moved), moved
    assert "bfloat16" in train_summary(result)
    again = Recorder()
    run(s, ":train steps=1", again)
    assert not any("bfloat16" in n for n in again.notices), "the note is said once, not at every :train"
    assert to_json(result)["dtype"] == "bfloat16"
    run(s, ":set dtype=float32")
    summary = train_summary(run(s, ":train steps=1"))  # this run's float32, and the step before it, bfloat16's
    assert "float32" in summary and "bfloat16 at step 4, the step before these" in summary, summary


def test_device_says_which_dtype_training_runs_in(bf16_units):
    s = tiny_session()
    result = run(s, ":device")
    assert (result.dtype, result.train_dtype) == ("auto", "bfloat16" if bf16_units else "float32")
    assert f"runs in {result.train_dtype} (dtype=auto" in render_text(result)
    run(s, ":set dtype=float32")
    result = run(s, ":device")
    assert result.train_dtype == "float32" and "runs in float32 (dtype=float32)" in render_text(result)
    assert to_json(result)["train_dtype"] == "float32"


def test_an_unknown_dtype_is_one_line_naming_the_choices():
    s = tiny_session()
    with pytest.raises(UserError) as e:
        run(s, ":set dtype=float16")
    assert "\n" not in str(e.value) and "auto, float32, bfloat16" in str(e.value)
    assert s.train_config.dtype == "auto"


# --- torch.compile ---------------------------------------------------------------------------------
@pytest.fixture
def fast_compile(monkeypatch):
    """torch.compile with the aot_eager backend: dynamo and AOT autograd as with inductor, no C++ build."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))


def test_a_capped_aten_compiles_into_a_cache_of_its_own(monkeypatch):
    """Inductor's cache key leaves ATEN_CPU_CAPABILITY out, and mixed kernels gave NaN or a crash."""
    from minitf_repl.core.precision import keep_capped_kernels_apart

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert keep_capped_kernels_apart() is None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", " AVX2 ")
    chosen = keep_capped_kernels_apart()
    assert chosen.endswith("_avx2") and os.environ["TORCHINDUCTOR_CACHE_DIR"] == chosen
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/mine")  # a person's own choice stays
    assert keep_capped_kernels_apart() is None and os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/somewhere/mine"


def test_compile_trains_the_same_losses_and_times_the_compile_apart(fast_compile):
    eager, compiled = trainer(steps=3), trainer(compile=True, steps=3)
    eager.run()
    summary = compiled.run()
    assert losses(compiled) == pytest.approx(losses(eager), abs=1e-4)
    assert compiled.evaluate() == pytest.approx(eager.evaluate(), abs=1e-4)
    assert summary.compiled and summary.compile_seconds is not None and summary.compile_seconds > 0
    assert [h["compile_seconds"] is not None for h in compiled.history] == [True, False, False]
    # Steady state: the two later steps only, so the compile does not drag the speed down.
    assert summary.tokens_per_second > 2 * 3 * 24 / summary.seconds
    compiled.start_run(2)
    second = compiled.run()
    assert second.compile_seconds is None and second.compiled  # compiled once per trainer


def test_a_listener_after_compiling_is_heard_not_bypassed(fast_compile):
    """compile=on compiled the fast path; a hook put on the model later must see the training forward."""
    t = trainer(compile=True, steps=4)
    t.run(should_stop=lambda: t.step >= 1)  # compiles the fast path
    heard = []
    handle = t.model.blocks[0].attn.hook_weights.register_forward_hook(lambda m, i, o: heard.append(m.training))
    t.run(should_stop=lambda: t.step >= 2)
    handle.remove()
    assert heard.count(True) == 1  # the one training step ran the readable model
    t.run()  # no listener: the fast path again, compiled anew
    assert heard.count(True) == 1 and t.step == 4


@pytest.mark.slow
@pytest.mark.skipif(not any(shutil.which(c) for c in precision.COMPILERS), reason="no C++ compiler for inductor")
def test_compile_with_inductor_trains_the_same_losses():
    eager, compiled = trainer(), trainer(compile=True)
    eager.run()
    summary = compiled.run()
    assert summary.compiled, summary.notes
    assert losses(compiled) == pytest.approx(losses(eager), abs=1e-4)


def test_a_compile_that_fails_at_once_trains_eagerly_with_one_line(monkeypatch):
    def broken(model, **kwargs):
        raise RuntimeError("Dynamo is not supported on this Python\nsecond line")

    monkeypatch.setattr(torch, "compile", broken)
    s, eager = tiny_session(compile=True), tiny_session()
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    expected = run(eager, ":train steps=2")
    assert [n for n in hooks.notices if "compile" in n] == [
        "torch.compile failed here (RuntimeError: Dynamo is not supported on this Python); training eagerly"]
    assert not result.compiled and result.compile_seconds is None
    assert result.train_loss == expected.train_loss
    again = Recorder()
    run(s, ":train steps=1", again)
    assert not any("compile" in n for n in again.notices)


def test_a_compile_that_fails_at_the_first_step_redoes_that_step_eagerly(monkeypatch):
    calls = []

    class Exploding(torch.nn.Module):  # what an inductor error at the first call looks like
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, *args, **kwargs):
            calls.append(1)
            raise RuntimeError("InductorError: CppCompileError: C++ compile error")

    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: Exploding(model))
    broken, eager = trainer(compile=True, steps=3, data="pydoc"), trainer(steps=3, data="pydoc")
    for t in (broken, eager):  # dropout draws from torch's RNG: the retry must draw the same masks
        t.model.set_dropout(0.2)
    torch.manual_seed(3)
    notes = []
    summary = broken.run(on_notice=notes.append)
    torch.manual_seed(3)
    eager.run()
    assert calls == [1], "after a failure the trainer stays eager"
    assert notes[0].startswith("compiling the model (compile=on)")  # said before the step that compiles (s60)
    assert len(notes) == 2 and notes[1].startswith("torch.compile failed here (RuntimeError: InductorError")
    assert losses(broken) == losses(eager)
    assert not summary.compiled and summary.steps == 3


def test_a_divergence_through_the_compiled_model_is_not_taken_for_a_compile_failure(fast_compile):
    t = trainer(compile=True)
    t.config = t.config.replace(lr=1e30, grad_clip=0.0, warmup_steps=0)
    with torch.no_grad():
        for p in t.model.parameters():
            p.mul_(1e30)
    notes = []
    with pytest.raises(UserError):
        t.run(on_notice=notes.append)
    assert not any("compile" in n for n in notes if not n.startswith("compiling the model"))  # the s60 line before


def test_no_cpp_compiler_says_so_in_one_line(monkeypatch):
    monkeypatch.setattr(precision.shutil, "which", lambda name: None)
    t = trainer(compile=True)
    notes = []
    summary = t.run(on_notice=notes.append)
    assert notes == ["torch.compile needs a C++ compiler (c++, g++ or clang++) and none was found; install one (e.g. "
                     "g++), or set compile=off; training eagerly"]
    assert not summary.compiled and summary.steps == 2


def test_compile_end_to_end_in_the_shell_summary(fast_compile):
    s = tiny_session()
    run(s, ":set compile=on")
    result = run(s, ":train steps=2")
    assert result.compiled and result.compile_seconds is not None
    assert "compiled in" in train_summary(result)
    with pytest.raises(UserError) as e:
        run(s, ":set compile=maybe")
    assert "\n" not in str(e.value)


# --- int8 sampling (:quantize) ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    s = tiny_session("pydoc", steps=30, batch_size=8, eval_every=30)
    run(s, ":set autosave=off")
    run(s, ":train")
    return s


def test_quantize_makes_an_int8_copy_and_leaves_the_model_float():
    t = trainer()
    q = quantize_for_sampling(t.model)
    kinds = {type(m).__name__ for m in q.modules()}
    assert "Int8Linear" in kinds and "Linear" not in kinds and {p.dtype for p in t.model.parameters()} == {torch.float32}
    assert {b.dtype for name, b in q.named_buffers() if name.endswith(".weight")} == {torch.int8}
    assert type(t.model.lm_head) is torch.nn.Linear
    assert state_dict_bytes(q) < 0.6 * state_dict_bytes(t.model)


def test_quantize_int8_end_to_end(trained):
    s = trained
    result = run(s, ":quantize int8")
    assert isinstance(result, QuantizeResult) and result.mode == "int8" and result.changed
    m = result.measure
    assert m.bytes_after < 0.8 * m.bytes_before  # a tiny model: the float embedding and the format weigh more
    assert m.tokens_per_second_before > 0 and m.tokens_per_second_after > 0
    assert m.val_loss_before == pytest.approx(s.trainer.evaluate()[0])  # the float model, on the same batches
    assert m.val_loss_after != m.val_loss_before and abs(m.val_loss_after - m.val_loss_before) < 0.1
    assert m.linear_layers == 4 + 2 + 1  # one block (test_commands.TINY): q, k, v, out; fc_in, fc_out; the head
    assert s.sampling_model is not s.model and s.sampling_copy
    text = render_text(result)
    assert "int8" in text and "val loss" in text and "tokens/s" in text
    assert run(s, ":quantize").mode == "int8"
    off = run(s, ":quantize off")
    assert off.mode == "off" and off.changed and s.sampling_model is s.model and not s.sampling_copy
    assert not run(s, ":quantize off").changed


def test_the_int8_copy_is_dropped_when_the_weights_change():
    s = tiny_session()
    run(s, ":quantize int8")
    assert s.sampling_copy
    run(s, ":train steps=1")
    assert s.sampling_model is s.model, "a :train changed the weights: the old int8 copy must go"
    run(s, ":save q")
    run(s, ":quantize int8")
    run(s, ":load q")
    assert s.sampling_model is s.model, ":load brought other weights"
    run(s, ":quantize int8")
    run(s, ":set n_layers=2 autosave=off")
    assert s.sampling_model is s.model, "a rebuild reset the weights"
    run(s, ":quantize int8")
    run(s, ":set lr=1e-3 temperature=0.5")  # changes no weight
    assert s.sampling_copy


def test_gen_samples_from_the_int8_copy(trained):
    s = trained
    copy_model = copy.deepcopy(s.model)
    calls = []
    copy_model.register_forward_hook(lambda *a: calls.append(1))
    s.set_sampling_model(copy_model)
    run(s, ":gen ab n=3")
    s.set_sampling_model(None)
    assert calls


def test_quantize_errors_are_one_line():
    s = tiny_session()
    for line in (":quantize int4", ":quantize int8 extra"):
        with pytest.raises(UserError) as e:
            run(s, line)
        assert "\n" not in str(e.value)
    assert not s.has_model or not s.sampling_copy


def test_quantize_json_in_the_shell():
    runner = CliRunner()
    tiny = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32",
            "--data", "sort"]
    result = runner.invoke(cli.app, [*tiny, "quantize", "int8", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["mode"] == "int8" and doc["measure"]["bytes_after"] < doc["measure"]["bytes_before"]
    json.dumps(doc, allow_nan=False)
    bad = runner.invoke(cli.app, [*tiny, "quantize", "int4"])
    assert bad.exit_code != 0 and bad.stdout == ""
    lines = bad.stderr.splitlines()
    assert len(lines) == 1 and "int8, off" in lines[0] and "Traceback" not in bad.stderr
