"""One lesson, many machines: a teacher's run on a CPU with bfloat16 units, the students' on CPUs without (and the
other way round), emulated by patching the hardware answer every precision choice asks (core.precision.native_bf16).
Each test failed before its fix.

A checkpoint trained with dtype=auto on a CPU with bfloat16 units recorded only "dtype": "auto": loaded on a CPU
without them, its steps went on in float32 (and the other way round, a float32 run went on in bfloat16) without a word,
and the continued losses no longer matched the teacher's numbers to the digit. The trainer now records the dtype its
steps ran in (checkpoints keep it), and `:load` says where the continuation runs in another, why, and how far apart
the numbers may be (and, from float32, the setting that goes on as it trained).
A lesson that pinned dtype=bfloat16, on a CPU without bfloat16 units: `:train` said once that bfloat16 is emulated
there and slower, but `:compare`, `:lrfind` and `:checks` (blind, overfit) trained their own models in emulated
bfloat16 without a word, their slowness read as the settings'. Each now says the same line once before it trains.
`:report`'s page said "dtype auto" alone: a teacher's page and a student's, of one lesson, differed in their losses
with nothing to say why. The page now says the dtype the latest step ran in, and the machine (the CPU's kind and
bfloat16 units, torch's threads, torch's version).
"""

import pytest

from test_commands import Recorder, run, tiny_session


@pytest.fixture
def machine(monkeypatch):
    """Switch the kind of CPU this process stands for: machine(True) has bfloat16 units, machine(False) has none."""
    from minitf_repl.core import precision

    def become(bf16_units: bool) -> None:
        monkeypatch.setattr(precision, "native_bf16", lambda device: bf16_units)
    return become


def notices(session, line: str) -> list[str]:
    recorder = Recorder()
    run(session, line, recorder)
    return recorder.notices


# --- a checkpoint taken to the other kind of CPU -----------------------------------------------------------------------
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


# --- bfloat16 pinned on a CPU without bfloat16 units -------------------------------------------------------------------
@pytest.mark.parametrize("line", [":compare lr=0.01 lr=0.02 steps=2", ":lrfind steps=10", ":checks blind steps=2"])
def test_the_commands_that_train_models_of_their_own_say_once_that_bfloat16_is_emulated_here(machine, line):
    session = tiny_session()
    run(session, ":set dtype=bfloat16")
    machine(False)
    said = [n for n in notices(session, line) if "emulated" in n]
    assert len(said) == 1 and "dtype=auto picks float32 here" in said[0]  # once, however many models train
    machine(True)  # where the units are there, bfloat16 is what was asked for: nothing to say
    assert not any("emulated" in n for n in notices(session, line))


# --- the numbers say where they were made --------------------------------------------------------------------------------
@pytest.mark.parametrize("bf16_units", [True, False])
def test_a_report_says_the_dtype_its_steps_ran_in_and_the_machine(machine, bf16_units, tmp_path):
    from minitf_repl.core.device import cpu_kind

    machine(bf16_units)
    session = tiny_session()
    run(session, ":train steps=2")
    run(session, f":report {tmp_path / 'page.html'}")
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    dtype = "bfloat16" if bf16_units else "float32"
    assert f"The latest training step ran in {dtype} (dtype=auto), on cpu: {cpu_kind()}" in page
