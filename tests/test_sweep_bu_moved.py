"""Sweep bu: a lesson moved between the two kinds of CPU. Under dtype=bfloat16 Muon's Newton-Schulz runs in bfloat16
where the CPU has bfloat16 units and in float32 where it has none, while the steps' products stay bfloat16: the
continued losses moved in the last digits with nothing said (the load, the summary and :compare's JSON named bfloat16
alone). A model whose steps ran in two dtypes was listed by :ls, and described by :report, as of its latest step's
alone. And :muon called bfloat16's O "an approximation, one Muon tolerates" under a difference of 87% of a typical
entry. Each test failed before its fix. bfloat16 is emulated on the test machines: the runs are a few tiny steps."""

from __future__ import annotations

import shutil

import pytest
from checkpoint_worker import rewrite_manifest
from test_commands import Recorder, run, tiny_session
from test_render import plain
from test_sweep_aq import machine  # noqa: F401 - a fixture: machine(True) has bfloat16 units, machine(False) none

from minitf_repl.core.errors import CheckpointError
from minitf_repl.dispatch import to_json

DOCS = __import__("pathlib").Path(__file__).resolve().parent.parent / "docs"


def notices(session, line: str) -> list[str]:
    recorder = Recorder()
    run(session, line, recorder)
    return recorder.notices


def pinned(name: str, steps: int = 3):
    """A dtype=bfloat16 Muon session trained `steps` steps and saved as `name`, on the machine the caller chose."""
    session = tiny_session()
    run(session, ":set dtype=bfloat16")
    run(session, f":train steps={steps}")
    run(session, f":save {name}")
    return session


# --- 1: Newton-Schulz's dtype goes with the run -----------------------------------------------------------------------
@pytest.mark.parametrize("teacher", [True, False])
def test_a_pinned_bfloat16_muon_run_moved_to_the_other_cpu_says_newton_schulz_changed(machine, teacher,  # noqa: F811
                                                                                    checkpoint_dir):
    machine(teacher)
    lesson = pinned("pinned")
    was, now = ("bfloat16", "float32") if teacher else ("float32", "bfloat16")
    assert lesson.trainer.trained_ns_dtype == was and lesson.trainer.trained_dtype == "bfloat16"
    machine(not teacher)
    student = tiny_session()
    said = " ".join(notices(student, ":load pinned"))
    assert f"pinned's Muon steps orthogonalised in {was} and go on here in {now}" in said
    assert "the losses move in the last digits" in said
    recorder = Recorder()
    result = run(student, ":train steps=1", recorder)
    assert not any("orthogonalised" in line for line in recorder.notices)  # said once, at the load
    assert result.newton_schulz_dtype == now and to_json(result)["newton_schulz_dtype"] == now
    assert f"Muon's Newton-Schulz in {now} ({was} at step 3, the step before these)" in plain(result, 400)
    machine(teacher)  # back on the teacher's machine: nothing moved, nothing said
    assert not any("orthogonalised" in line for line in notices(tiny_session(), ":load pinned"))


def test_the_next_train_says_it_where_no_load_did(machine, checkpoint_dir):  # noqa: F811
    machine(True)
    session = pinned("pinned", steps=2)
    machine(False)  # the same trainer, its next steps on a CPU without the units (what :load's copy would see)
    said = " ".join(notices(session, ":train steps=1"))
    assert "pinned's Muon steps orthogonalised in bfloat16 and go on here in float32 (this CPU has no bfloat16 " \
           "units" in said


def test_a_checkpoint_of_before_the_newton_schulz_dtype_says_nothing_of_it(machine, checkpoint_dir):  # noqa: F811
    machine(True)
    pinned("old", steps=2)
    rewrite_manifest(checkpoint_dir / "old", lambda m: [m["trainer"].pop(k) for k in ("trained_ns_dtype",
                                                                                      "dtype_spans")])
    machine(False)
    session = tiny_session()
    assert not any("orthogonalised" in line for line in notices(session, ":load old"))
    assert session.trainer.trained_ns_dtype is None and session.trainer.dtype_spans == []


def test_an_adamw_run_has_no_newton_schulz_dtype(machine):  # noqa: F811
    machine(False)
    session = tiny_session()
    run(session, ":set optimizer=adamw")
    result = run(session, ":train steps=1")
    assert result.newton_schulz_dtype is None and session.trainer.trained_ns_dtype is None
    assert to_json(result)["newton_schulz_dtype"] is None


@pytest.mark.parametrize("units", [True, False])
def test_compare_outcomes_give_the_dtype_newton_schulz_ran_in(machine, units):  # noqa: F811
    machine(units)
    result = run(tiny_session(), ":compare dtype=float32 dtype=bfloat16 steps=1")
    got = [o["newton_schulz_dtype"] for o in to_json(result)["outcomes"]]
    assert got == ["float32", "bfloat16" if units else "float32"]
    assert [o["dtype"] for o in to_json(result)["outcomes"]] == ["float32", "bfloat16"]


# --- 2: a model whose steps ran in two dtypes -------------------------------------------------------------------------
def test_ls_and_the_report_say_a_model_whose_steps_ran_in_two_dtypes(machine, checkpoint_dir, tmp_path):  # noqa: F811
    from minitf_repl.commands.inside import made_on

    machine(True)
    teacher = tiny_session()
    run(teacher, ":train steps=2")
    run(teacher, ":save lesson")
    machine(False)
    student = tiny_session()
    run(student, ":load lesson")
    run(student, ":train steps=1")
    run(student, ":save lesson2")
    assert student.trainer.dtype_spans == [[1, "bfloat16", "bfloat16"], [3, "float32", "float32"]]
    listed = run(student, ":ls")
    rows = {row.name: row for row in listed.rows}
    assert rows["lesson2"].trained_dtypes == ["bfloat16", "float32"] and rows["lesson"].trained_dtypes == ["bfloat16"]
    assert {r["name"]: r["trained_dtypes"] for r in to_json(listed)["rows"]}["lesson2"] == ["bfloat16", "float32"]
    assert "lesson2 step 3" in plain(listed, 60) and "trained in bfloat16 then float32" in plain(listed, 60)
    page = made_on(student)
    assert page.startswith("The training steps ran in bfloat16 then float32, the latest in float32 (dtype=auto).")
    machine(True)  # the student's checkpoint read where its first steps ran: the latest ran elsewhere, said so
    again = tiny_session()
    run(again, ":load lesson2")
    assert "not what one would run in here (bfloat16, Newton-Schulz in bfloat16): it ran on another machine" \
        in made_on(again)


def test_a_folder_of_one_dtype_whose_checkpoint_changed_dtype_shows_the_column(machine, checkpoint_dir):  # noqa: F811
    machine(True)
    session = tiny_session()
    run(session, ":train steps=1")
    run(session, ":set dtype=float32")
    run(session, ":train steps=1")
    run(session, ":save both")
    for autosave in checkpoint_dir.glob("autosave*"):  # the runs' autosaves, one of them bfloat16's: "both" alone
        shutil.rmtree(autosave)
    listed = run(session, ":ls")
    assert [row.trained_dtype for row in listed.rows] == ["float32"]  # the latest step's alone: one dtype
    assert "bfloat16 then float32" in plain(listed, 200)


def test_a_malformed_dtype_spans_is_refused_in_one_line(machine, checkpoint_dir):  # noqa: F811
    machine(False)
    session = tiny_session()
    run(session, ":train steps=1")
    run(session, ":save odd")
    rewrite_manifest(checkpoint_dir / "odd", lambda m: m["trainer"].__setitem__("dtype_spans", [[5, "int8", None]]))
    with pytest.raises(CheckpointError, match="dtype_spans"):
        run(tiny_session(), ":load odd")


# --- 3: :muon's words for bfloat16's O --------------------------------------------------------------------------------
def test_muon_does_not_understate_bfloat16s_difference(monkeypatch):
    from minitf_repl.core import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    words = plain(run(tiny_session(), ":muon"), 140)
    assert "one Muon tolerates" not in words
    assert "its O can be off by as much as a typical entry: how far depends on u's spectrum" in words
    assert "0.03 to 0.11 at the largest entry against entries of RMS 0.1 to 0.18" in words
    doc = " ".join((DOCS / "inside-views.md").read_text(encoding="utf-8").split())
    assert "one Muon tolerates" not in doc and "approximation Muon tolerates" not in doc
    assert "bfloat16's error depends on the spectrum of u" in doc and "0.03 to 0.11" in doc
