"""One lesson, many machines: a teacher's run on a CPU with bfloat16 units, the students' on CPUs without (and the
other way round), emulated by patching the hardware probe every precision choice asks (core.device.cpu_bf16_units).
Each test failed before its fix.

A checkpoint trained with dtype=auto on a CPU with bfloat16 units recorded only "dtype": "auto": loaded on a CPU
without them, its steps went on in float32 (and the other way round, a float32 run went on in bfloat16) without a word,
and the continued losses no longer matched the teacher's numbers to the digit. The trainer now records the dtype its
steps ran in (checkpoints keep it), and `:load` says where the continuation runs in another, why, and how far apart
the numbers may be (and, from float32, the setting that goes on as it trained).
A lesson that pinned dtype=bfloat16, on a CPU without bfloat16 units: `:train` said once that bfloat16 is emulated
there and slower, but only then: `:load` showed "dtype auto -> bfloat16" among the settings the run brought, with no
word of what it costs here. The load now says it, with the fix (`:set dtype=auto`), and the first `:train` does not say
it again. And `:compare`, `:lrfind` and `:checks` (blind, overfit) trained their own models in emulated
bfloat16 without a word, their slowness read as the settings'. Each now says the same line once before it trains.
`:report`'s page said "dtype auto" alone: a teacher's page and a student's, of one lesson, differed in their losses
with nothing to say why. The page now says the dtype the latest step ran in, and the machine (the CPU's kind and
bfloat16 units, torch's threads, torch's version).
`minitf train --json` said "dtype" (documented as the setting, in fact what the steps ran in) but not the CPU nor
torch's threads, and `minitf load --json` nothing of the dtype: saved numbers could not say why another machine's
differ. train/14 adds `threads` and `cpu` (core.device.cpu_kind) and documents `dtype` as what the steps ran in;
load/7 adds `trained_dtype` (tests/test_watch.py's schema name follows). `minitf compare --json` said nothing of the
dtype its contenders ran in (dtype=auto's change shows in no `changes`): compare/9 adds `outcomes[].dtype`
(tests/test_ngram.py's schema name follows).
With dtype=bfloat16 pinned (a lesson's checkpoint brings it) on a CPU without bfloat16 units, `:device` said
"training on cpu runs in bfloat16" and nothing more, the place a student looks when a step is slow. It now says
that bfloat16 is emulated there, in :train's own words, and that `:set dtype=auto` trains in float32.
A lesson's `:compare dtype=auto dtype=float32` (what bfloat16 costs in loss), run on a CPU without bfloat16 units,
drew two identical curves as if a finding: dtype=auto is float32 there. :compare now says before the run that the
two train the very same model, and why (what dtype=auto is on this device), as it says of other settings that build
nothing; dtype=bfloat16 beside it, another run, is not said to be.
`dtype=float32`, the setting the docs give for comparing runs to the last digit, left Muon's Newton-Schulz in bfloat16
on a CPU with bfloat16 units (in float32 on one without): two float32 runs of one lesson differed by the machine
alone, and `:muon` said bfloat16 of a float32 run. A run of dtype=float32 now orthogonalises in float32 on every CPU
(core.precision.newton_schulz_dtype), a `:set dtype=float32` after a run reaches the optimizer it already has, and
`:muon` and `:params`' ledger say and count the dtype it runs in. `:device` said what dtype=auto trains in but
nothing of Newton-Schulz's dtype, which follows the machine too: it now says it (and device/5's `newton_schulz_dtype`),
the dtype the optimizer's products are then seen to run in.
On a CPU with AMX whose environment caps oneDNN below bfloat16 (ONEDNN_MAX_CPU_ISA=AVX2, a student's copied shell
profile), dtype=bfloat16's note said "this CPU has neither AMX nor AVX512-BF16", sending them to another machine: it
now names the variable that keeps the units unused, and says to unset it.
"""

import pytest

from test_commands import Recorder, run, tiny_session


@pytest.fixture
def machine(monkeypatch):
    """Switch the kind of CPU this process stands for: machine(True) has bfloat16 units (AMX), machine(False) has
    none. The probe itself answers, so every reader agrees: dtype=auto and Newton-Schulz (core.precision), :device's
    bf16 column, cpu_kind's words."""
    from minitf_repl.core import device

    def become(bf16_units: bool) -> None:
        monkeypatch.setattr(device, "cpu_bf16_units", lambda: "AMX" if bf16_units else None)
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
        device._native_bf16.cache_clear()  # asked once per process otherwise: the hardware stays put
    yield become
    device._native_bf16.cache_clear()


def notices(session, line: str) -> list[str]:
    recorder = Recorder()
    run(session, line, recorder)
    return recorder.notices


# --- a checkpoint taken to the other kind of CPU ----------------------------------------------------------------------
@pytest.mark.parametrize("teacher, student", [(True, False), (False, True)])
def test_a_checkpoint_continued_on_the_other_kind_of_cpu_says_its_steps_change_dtype(machine, teacher, student):
    machine(teacher)
    lesson = tiny_session()
    run(lesson, ":train steps=3")
    run(lesson, ":save lesson")
    machine(student)
    said = " ".join(notices(tiny_session(), ":load lesson"))
    was, now = ("bfloat16", "float32") if teacher else ("float32", "bfloat16")
    assert f"lesson's steps ran in {was} and go on here in {now}" in said
    assert ":set dtype=float32" in said if was == "float32" else "emulated" in said
    machine(teacher)  # the teacher's own machine: nothing changes, nothing is said
    assert not any("steps ran in" in line for line in notices(tiny_session(), ":load lesson"))


def test_the_continued_run_trains_in_the_dtype_the_load_said(machine):
    machine(True)
    lesson = tiny_session()
    run(lesson, ":train steps=3")
    run(lesson, ":save lesson")
    machine(False)
    student = tiny_session()
    run(student, ":load lesson")
    result = run(student, ":train steps=3")
    assert result.dtype == "float32" and student.trainer.trained_dtype == "float32"
    run(student, ":save again")
    machine(True)  # the student's checkpoint, back on the teacher's machine: it ran in float32 last
    said = " ".join(notices(tiny_session(), ":load again"))
    assert "again's steps ran in float32 and go on here in bfloat16" in said


# --- bfloat16 pinned on a CPU without bfloat16 units ------------------------------------------------------------------
@pytest.mark.parametrize("line", [":compare lr=0.01 lr=0.02 steps=2", ":lrfind steps=10", ":checks blind steps=2"])
def test_the_commands_that_train_models_of_their_own_say_once_that_bfloat16_is_emulated_here(machine, line):
    session = tiny_session()
    run(session, ":set dtype=bfloat16")
    machine(False)
    said = [n for n in notices(session, line) if "emulated" in n]
    assert len(said) == 1 and "dtype=auto picks float32 here" in said[0]  # once, however many models train
    machine(True)  # where the units are there, bfloat16 is what was asked for: nothing to say
    assert not any("emulated" in n for n in notices(session, line))


# --- the numbers say where they were made -----------------------------------------------------------------------------
@pytest.mark.parametrize("bf16_units", [True, False])
def test_a_report_says_the_dtype_its_steps_ran_in_and_the_machine(machine, bf16_units, tmp_path):
    from minitf_repl.core.device import cpu_kind

    machine(bf16_units)
    session = tiny_session()
    run(session, ":train steps=2")
    run(session, f":report {tmp_path / 'page.html'}")
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    dtype = "bfloat16" if bf16_units else "float32"
    assert f"The latest training step ran in {dtype} (dtype=auto). This page was made on cpu: {cpu_kind()}" in page


@pytest.mark.parametrize("bf16_units", [True, False])
def test_train_and_load_json_record_the_dtype_the_steps_ran_in_the_threads_and_the_cpu(machine, bf16_units):
    import json

    from minitf_repl.core.device import cpu_kind
    from test_cli import invoke

    machine(bf16_units)
    dtype = "bfloat16" if bf16_units else "float32"
    tiny = ["--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4 eval_batches=1",
            "--data", "sort:4"]
    doc = json.loads(invoke(*tiny, "train", "--steps", "2", "--save", "lesson", "--json").stdout)
    assert doc["dtype"] == dtype and doc["threads"] == 1 and doc["cpu"] == cpu_kind()
    loaded = json.loads(invoke(*tiny, "load", "lesson", "--json").stdout)
    assert loaded["trained_dtype"] == dtype


# --- :device says what training will do -------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["auto", "bfloat16", "float32"])
@pytest.mark.parametrize("bf16_units", [True, False])
def test_device_says_the_dtype_training_runs_in_and_that_bfloat16_without_units_is_emulated(machine, dtype,
                                                                                            bf16_units):
    from test_render import plain

    machine(bf16_units)
    session = tiny_session()
    run(session, f":set dtype={dtype}")
    words = plain(run(session, ":device"))
    runs = dtype if dtype != "auto" else ("bfloat16" if bf16_units else "float32")
    assert f"training on cpu runs in {runs}" in words
    emulated = "dtype=bfloat16: bfloat16 autocast, but this CPU has neither AMX nor AVX512-BF16: it is emulated"
    assert (emulated in words) == (runs == "bfloat16" and not bf16_units)  # :train's own line (precision_note)
    if runs == "bfloat16" and not bf16_units:
        assert ":set dtype=auto trains in float32" in words
    assert runs == run(session, ":train steps=1").dtype  # what :device said is what a step runs in
    muon = "float32" if dtype == "float32" or not bf16_units else "bfloat16"
    assert f"Muon's Newton-Schulz runs in {muon} there" in words
    run(session, ":set optimizer=adamw")
    assert "Newton-Schulz" not in plain(run(session, ":device"))  # AdamW has none


# --- :compare of dtype=auto against the dtype it means here -----------------------------------------------------------
@pytest.mark.parametrize("bf16_units", [True, False])
def test_compare_says_dtype_auto_against_the_dtype_it_means_here_is_one_run(machine, bf16_units):
    machine(bf16_units)
    same, other = ("bfloat16", "float32") if bf16_units else ("float32", "bfloat16")
    recorder = Recorder()
    result = run(tiny_session(), f":compare dtype=auto dtype={same} dtype={other} steps=2", recorder)
    said = " ".join(recorder.notices)
    assert f"dtype={same} builds and trains the very model dtype=auto does: dtype changes nothing in it " \
           f"(dtype=auto is {same} on cpu" in said
    assert f"dtype={other} builds" not in said  # the other dtype is another run
    auto, pinned, _ = result.outcomes
    assert auto.curve[-1].val_loss == pinned.curve[-1].val_loss  # one run indeed


# --- dtype=float32 is float32 throughout, on either kind of CPU -------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "auto"])
@pytest.mark.parametrize("bf16_units", [True, False])
def test_newton_schulz_runs_in_float32_in_a_float32_run_on_either_kind_of_cpu(machine, monkeypatch, dtype,
                                                                              bf16_units):
    import torch

    from minitf_repl.core import optimizers

    machine(bf16_units)
    seen = []
    real_baddbmm = torch.baddbmm

    def spy(*args, **kwargs):  # every product of Newton-Schulz's steps
        seen.append(args[1].dtype)
        return real_baddbmm(*args, **kwargs)

    session = tiny_session()
    run(session, f":set dtype={dtype}")
    monkeypatch.setattr(optimizers.torch, "baddbmm", spy)
    run(session, ":train steps=1")
    expected = torch.bfloat16 if dtype == "auto" and bf16_units else torch.float32
    assert seen and set(seen) == {expected}
    monkeypatch.setattr(optimizers.torch, "baddbmm", real_baddbmm)
    assert run(session, ":muon").step.optimizer_dtype == str(expected).removeprefix("torch.")  # as :muon says


def test_a_set_dtype_float32_after_a_run_reaches_the_optimizer_it_already_has(machine, monkeypatch):
    import torch

    from minitf_repl.core import optimizers

    machine(True)
    session = tiny_session()
    run(session, ":train steps=1")  # the optimizer is made, under dtype=auto: bfloat16 here
    run(session, ":set dtype=float32")
    seen = []
    real = optimizers.newton_schulz
    monkeypatch.setattr(optimizers, "newton_schulz", lambda *a: seen.append(a[-1]) or real(*a))
    run(session, ":train steps=1")
    assert seen and set(seen) == {torch.float32}


def test_a_checkpoint_that_pinned_bfloat16_says_at_load_once_that_it_is_emulated_here_with_the_fix(machine):
    machine(True)
    lesson = tiny_session()
    run(lesson, ":set dtype=bfloat16")
    run(lesson, ":train steps=2")
    run(lesson, ":save lesson")
    machine(False)
    student = tiny_session()
    said = [n for n in notices(student, ":load lesson") if "emulated" in n]
    assert len(said) == 1 and "lesson brings dtype=bfloat16" in said[0] and said[0].endswith(
        ":set dtype=auto trains in float32")
    assert not any("emulated" in n for n in notices(student, ":train steps=1"))  # said once: not again here
    machine(True)  # on a CPU with the units, bfloat16 is what it asks for: nothing to say
    assert not any("emulated" in n for n in notices(tiny_session(), ":load lesson"))


def test_bfloat16_capped_off_by_the_environment_is_said_as_such_not_as_a_cpu_without_units(machine, monkeypatch):
    from minitf_repl.core.precision import precision_note

    from minitf_repl.core import device

    machine(True)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    device._native_bf16.cache_clear()  # the cap, read with the units: this process has none of them now
    line = precision_note("bfloat16", "cpu")
    assert "ONEDNN_MAX_CPU_ISA=AVX2 keeps oneDNN off this CPU's AMX units (unset it to use them)" in line
    assert "neither AMX nor AVX512-BF16" not in line
    machine(False)  # no units at all: the plain words
    assert "this CPU has neither AMX nor AVX512-BF16" in precision_note("bfloat16", "cpu")


@pytest.mark.parametrize("bf16_units", [True, False])
def test_compare_json_records_the_dtype_each_contender_ran_in(machine, bf16_units):
    import json

    from test_cli import invoke

    machine(bf16_units)
    tiny = ["--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4 eval_batches=1",
            "--data", "sort:4"]
    doc = json.loads(invoke(*tiny, "compare", "dtype=auto", "dtype=float32", "--steps", "2", "--json").stdout)
    assert [o["dtype"] for o in doc["outcomes"]] == ["bfloat16" if bf16_units else "float32", "float32"]
