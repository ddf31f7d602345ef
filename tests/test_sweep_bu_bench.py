"""Sweep bu, the bench/ scripts as a tester ran them: memory in MiB labelled MB, Muon's estimated least cost printed
as a bound that runs went under, --rows names dropped without a word, bad counts that ended in tracebacks (some
after minutes of runs), and the skip lines of a clone without ../shared. The scripts are run by hand, never by the
suite (they time things), so their helpers and argument handling are tried here in-process, with nothing timed.
Each test failed before its fix."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
THERE = ["--file", __file__, "--skip-nanogpt"]  # shakespeare.py's text is there: nothing but the argument stops it


@pytest.fixture
def bench(monkeypatch):
    """bench/ first on the path, as `python bench/NAME.py` has it; `import NAME` then gives the script's module."""
    monkeypatch.syspath_prepend(str(BENCH))
    import importlib

    return importlib.import_module


def run_main(module, monkeypatch, *argv: str) -> None:
    monkeypatch.setattr(sys, "argv", [f"{module.__name__}.py", *argv])
    module.main()


# --- bad arguments: one line and exit 2, before anything runs --------------------------------------------------------
@pytest.mark.parametrize("script, argv, said", [
    ("nanogpt", ["--chunks", "0"], "argument --chunks: must be at least 1, got 0; give 1 or more"),
    ("nanogpt", ["--steps", "0"], "argument --steps: must be at least 1, got 0; give 1 or more"),
    ("nanogpt", ["--threads", "-1"], "argument --threads: must be at least 1, got -1; give 1 or more"),
    ("nanogpt", ["--batch", "-3"], "argument --batch: must be at least 1, got -3; give 1 or more"),
    ("nanogpt", ["--steps", "two"], "argument --steps: 'two' is not a whole number; give one of at least 1"),
    ("nanogpt", ["--bogus"], "unrecognized arguments: --bogus; see --help"),
    ("first_train", ["--repeats", "0"], "argument --repeats: must be at least 1, got 0; give 1 or more"),
    ("memory", ["--runs", "0"], "argument --runs: must be at least 1, got 0; give 1 or more"),
    ("memory", ["--runs", "1", "--steps", "0"], "argument --steps: must be at least 1, got 0; give 1 or more"),
    # shakespeare.py: -5 was refused only after all the runs, 0 ignored (`if args.steps`)
    ("shakespeare", ["--steps", "-5", *THERE], "argument --steps: must be at least 1, got -5; give 1 or more"),
    ("shakespeare", ["--steps", "0", *THERE], "argument --steps: must be at least 1, got 0; give 1 or more"),
])
def test_a_bad_count_is_one_line_and_exit_2_before_anything_runs(bench, monkeypatch, capsys, script, argv, said):
    with pytest.raises(SystemExit) as stopped:
        run_main(bench(script), monkeypatch, *argv)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == f"{script}.py: error: {said}\n"  # one line: no usage block, no traceback


# --- nanogpt.py --rows -----------------------------------------------------------------------------------------------
def test_an_unknown_row_is_refused_with_the_rows_there_are(bench, monkeypatch, capsys):
    nanogpt = bench("nanogpt")
    with pytest.raises(SystemExit) as stopped:
        run_main(nanogpt, monkeypatch, "--rows", "minitf :train,foo", "--chunks", "1", "--steps", "1")
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("nanogpt.py: error: argument --rows: unknown row 'foo'; rows: nanoGPT, minitf :train, ")
    assert err.count("\n") == 1 and "minitf muon no-bf16" in err


def test_rows_asked_for_that_do_not_run_on_this_cpu_are_said_and_why(bench):
    nanogpt = bench("nanogpt")
    asked = nanogpt.asked_rows("minitf float32, nanoGPT bf16 autocast,minitf muon no-bf16")
    assert asked == ["minitf float32", "nanoGPT bf16 autocast", "minitf muon no-bf16"]
    # without bfloat16 units two are another row's very step (which runs), one measures nothing: said in one line
    kept, note = nanogpt.rows_here(asked, native=False)
    assert kept == ["nanoGPT", "minitf :train", "minitf muon"]
    assert note.startswith("not run on this CPU, which has no bfloat16 units: 'minitf float32' (dtype=auto trains in "
                           "float32 here: 'minitf :train' is that row, and runs); ")
    assert "'nanoGPT bf16 autocast' (bfloat16 is only emulated here" in note and "\n" not in note
    assert nanogpt.rows_here(asked, native=True) == (["nanoGPT", *asked[:1], *asked[2:], asked[1]], "")  # ROWS' order
    everything, said = nanogpt.rows_here([], native=False)  # no --rows: every row this CPU runs, nothing to say
    assert said == "" and "minitf muon" in everything and not set(everything) & set(nanogpt.BF16_ONLY)
    assert nanogpt.rows_here([], native=True)[0] == list(nanogpt.ROWS)


# --- Muon's least cost: an estimate, and the line says when a run went under it --------------------------------------
def test_the_muon_estimate_is_worded_as_one_and_says_when_a_step_measured_below_it(bench):
    nanogpt = bench("nanogpt")
    # the tester's run: 0.87x alone against an estimate of 1.05x, which read "a Muon step costs at least 1.05x"
    line = nanogpt.muon_estimate(100.0, 5.0, 40.0, {"in the table": 1.30, "alone": 0.87})
    assert "estimated" in line and "1.05x" in line and "at least" not in line
    assert line.endswith("1.05x; measured below the estimate (0.87x alone): the peak read low, the AdamW update "
                         "Muon saves is not subtracted, or the run's noise")
    assert nanogpt.muon_estimate(100.0, 5.0, 40.0, {"in the table": 1.30, "alone": 1.28}).endswith("1.05x")


def test_the_first_train_estimate_says_when_muons_run_measured_below_it(bench):
    first_train = bench("first_train")
    # README's Xeon column: Muon's run 1.18x the adamw run's time, "floor 1.204x"
    line = first_train.muon_estimate(27.6, 32.5, 600, 9.39, 197.0)
    assert "estimated" in line and "33.2 s, 1.204x" in line and "no Muon run" not in line
    assert line.endswith("1.204x; measured below the estimate (1.18x): the peak read low, the AdamW update Muon "
                         "saves is not subtracted, or the run's noise")
    assert first_train.muon_estimate(27.6, 35.0, 600, 9.39, 197.0).endswith("1.204x")


# --- memory.py: MiB, time's report kept out of a failure, nanoGPT's row skipped aloud --------------------------------
def test_memory_prints_mib_and_the_target_in_both_units_and_says_nanogpts_row_is_skipped(bench, monkeypatch, capsys,
                                                                                        tmp_path):
    memory = bench("memory")
    monkeypatch.setattr(memory, "ANCHOR", tmp_path / "no" / "model.py")  # a user's clone: no ../shared
    measured = []
    monkeypatch.setattr(memory, "peak_mib", lambda cmd, env, name: measured.append(name) or 341.0)
    run_main(memory, monkeypatch, "--runs", "1", "--steps", "1")
    out = capsys.readouterr().out.splitlines()
    assert measured == ["threads=auto", "threads=1"]
    assert out[0] == f"skipped: nanoGPT's row: its model is not at {tmp_path / 'no' / 'model.py'} (a user's clone " \
                     "has no ../shared)"
    assert out[1].endswith("medians of 1 runs (MiB, 2^20 bytes: /usr/bin/time -v's kbytes are KiB)")
    assert out[-1] == "issue 16's target, at most 350 MB for threads=auto: 341 MiB (358 MB) here"
    assert memory.in_both_units(416.0) == "416 MiB (436 MB)"


@pytest.mark.skipif(not Path("/usr/bin/time").exists(), reason="GNU time is what bench/memory.py measures with")
def test_a_failing_child_shows_its_own_error_not_times_report(bench):
    memory = bench("memory")
    env = dict(os.environ)
    with pytest.raises(SystemExit) as stopped:
        memory.peak_mib([sys.executable, "-c", "import sys; sys.exit('error: steps must be 1 or more; give 1')"], env,
                        "threads=auto")
    assert str(stopped.value) == "threads=auto failed (exit 1): error: steps must be 1 or more; give 1"
    peak = memory.peak_mib([sys.executable, "-c", "pass"], env)
    assert 1 < peak < 1000  # a bare interpreter: some MiB


# --- shakespeare.py: what --skip-nanogpt needs, and its temporary folder ---------------------------------------------
def test_shakespeare_without_nanogpt_needs_only_the_text_and_removes_its_folder(bench, monkeypatch, capsys, tmp_path):
    shakespeare = bench("shakespeare")
    text = tmp_path / "ts.txt"
    text.write_text("To be, or not to be\n")
    monkeypatch.setattr(shakespeare, "NANOGPT", tmp_path / "shared" / "anchors" / "nanogpt" / "model.py")
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path / "cache"))  # main() points it elsewhere; put back after
    seen = []

    def compare(args):
        folder = Path(os.environ["MINITF_CACHE_DIR"])
        seen.append((folder, (folder / "tinyshakespeare.txt").read_text()))
        raise RuntimeError("a run failed")  # the folder goes even then

    monkeypatch.setattr(shakespeare, "compare", compare, raising=False)
    with pytest.raises(RuntimeError):
        run_main(shakespeare, monkeypatch, "--file", str(text), "--skip-nanogpt")
    assert [contents for _, contents in seen] == ["To be, or not to be\n"] and not seen[0][0].exists()

    run_main(shakespeare, monkeypatch, "--file", str(text))  # nanoGPT's run wanted: only its model is missing
    said = capsys.readouterr().out
    assert said.startswith(f"skipped: {shakespeare.NANOGPT} not found; --skip-nanogpt runs minitf alone")
    assert str(text) not in said and said.count("\n") == 1 and len(seen) == 1
