"""The 45th session's own look: each test failed before its fix.

A quick quit died: `printf ':quit\\n' | minitf` exited 134 ("terminate called without an active exception") about one
time in five, when the interpreter ended while the background torch import (dispatch.preload) was still inside torch's
C++ start-up. The exit now waits for that import to end.
"""

import errno
import io
import signal
import subprocess
import sys
import threading
import time

import pytest

from minitf_repl import dispatch


def test_the_exit_waits_for_the_background_torch_import_to_end():
    # atexit runs its handlers last-registered first: the probe, registered before preload() registers its own, runs
    # after it and reports whether the import thread was still running when the interpreter went on to end.
    probe = (
        "import atexit, sys\n"
        "from minitf_repl import dispatch\n"
        "atexit.register(lambda: print('alive' if dispatch._preload_thread.is_alive() else 'ended',"
        " 'torch.nn' in sys.modules))\n"
        "dispatch.preload()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ended", "True"]  # was "alive False": the process left mid-import


def test_finishing_the_preload_joins_a_running_import_and_passes_over_none(monkeypatch):
    monkeypatch.setattr(dispatch, "_preload_thread", None)
    dispatch._finish_preload()  # no import started: nothing to wait for
    slow = threading.Thread(target=time.sleep, args=(0.3,), daemon=True)
    slow.start()
    monkeypatch.setattr(dispatch, "_preload_thread", slow)
    dispatch._finish_preload()
    assert not slow.is_alive()


# --- `minitf set` of several keys: the line it suggests gives them all ------------------------------------------------
def test_the_line_set_suggests_from_the_shell_keeps_every_key_and_runs_as_given():
    import shlex

    from typer.testing import CliRunner

    from minitf_repl import cli

    runner = CliRunner()
    said = runner.invoke(cli.app, ["set", "d_model=30", "n_heads=5"])
    assert said.exit_code == 0, said.output
    line = " ".join(said.stdout.split()).split("e.g. ")[1]
    assert line == "minitf --set 'd_model=30 n_heads=5' train"  # was --set d_model=30 alone, which train refused
    ran = runner.invoke(cli.app, [*shlex.split(line)[1:-1], "--set", "d_ff=8 n_layers=1 max_seq_len=8",
                                  "--data", "random:12", "config", "--json"])
    assert ran.exit_code == 0, ran.output
    sampling = runner.invoke(cli.app, ["set", "temperature=0.5", "top_k=3"])
    assert "e.g. minitf --set 'temperature=0.5 top_k=3' gen" in " ".join(sampling.stdout.split())


# --- a --device that names no device: refused by every one-shot command -------------------------------------------
def test_a_device_that_names_none_is_refused_by_commands_that_never_use_one():
    from typer.testing import CliRunner

    from minitf_repl import cli

    runner = CliRunner()
    refused = "error: unknown device 'tpu'; use one of auto, cpu, cuda, cuda:N or mps"
    # each exited 0 without a word; config (46th session) with a warning amid its table
    for args in (["tok", "hi"], ["ls"], ["set", "lr=0.1"], ["data"], ["config"]):
        result = runner.invoke(cli.app, ["--device", "tpu", *args])
        assert (result.exit_code, result.stderr.splitlines(), result.stdout) == (1, [refused], ""), args
    assert runner.invoke(cli.app, ["--device", "cpu", "tok", "hi"]).exit_code == 0


# --- a long path in a message keeps its end, the part that names the file ---------------------------------------------
def test_a_long_data_path_in_a_message_keeps_the_files_name(tmp_path):
    from minitf_repl.core.catalog import data_problem
    from minitf_repl.core.paths import cut_middle

    deep = tmp_path / ("a" * 60) / ("b" * 60) / "my\tnotes.txt"
    said = data_problem(str(deep))  # was ".../aaaa..." cut at its end: which file, and the tab, gone
    assert said is not None and "my\\tnotes.txt holds a tab" in said
    missing = tmp_path / ("c" * 90) / "poems.txt"
    assert "poems.txt" in data_problem(str(missing))
    assert cut_middle("x" * 10) == "x" * 10 and len(cut_middle("y" * 300)) == 160
    assert cut_middle("/start/" + "m" * 100 + "/end.txt").endswith("/end.txt")


# --- the terminal closed under a REPL :train: the run stops after its step and autosaves ------------------------------
class _Terminal(io.TextIOBase):
    """A terminal that goes away (its writes then fail with EIO, as a closed window's or a dropped ssh session's do)."""

    def __init__(self):
        self.gone = False

    def write(self, text):
        if self.gone:
            raise OSError(errno.EIO, "Input/output error")
        return len(text)

    def flush(self):
        if self.gone:
            raise OSError(errno.EIO, "Input/output error")

    def isatty(self):
        return True

    def fileno(self):  # never the test process's own descriptor: silence_stdout() must not point pytest's at null
        raise io.UnsupportedOperation("fileno")


@pytest.mark.parametrize("hangup", [True, False])
def test_a_terminal_that_closes_under_a_live_train_leaves_an_autosave_and_one_line(hangup, checkpoint_dir, monkeypatch):
    from rich.console import Console

    from minitf_repl.core import checkpoint as ckpt
    from minitf_repl.render import live

    from test_commands import tiny_session

    terminal = _Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    steps = live.RichReporter.on_step

    def closing_after_the_first_evaluation(self, info):
        steps(self, info)
        if info.val_loss is not None and not terminal.gone:
            terminal.gone = True  # the window closes while the live display is up (Rich's proxy is sys.stdout)
            if hangup:  # and SIGHUP comes, as stop_on_signals' handler takes it
                self.terminate_signal = signal.SIGHUP
                self.request_stop()

    monkeypatch.setattr(live.RichReporter, "on_step", closing_after_the_first_evaluation)
    errors = io.StringIO()
    door = dispatch.FrontDoor(tiny_session(steps=400, eval_every=5), Console(force_terminal=True, width=100),
                              Console(file=errors, width=200), dispatch.FrontEnd(live=True))
    status = door.run_line(":train")
    # was: the EIO rose out of the step that printed "stopping after this step...", the :train was rolled back as a
    # failed one (step 0, no autosave), and closing the display raised it again, out of the REPL as a traceback
    assert status == dispatch.FAILED
    assert errors.getvalue().splitlines() == ["error: cannot write the output (Input/output error); the rest of it is "
                                              "lost"]
    trained = door.session.trainer.step
    assert 5 <= trained < 400  # stopped soon after the terminal went, its steps kept
    assert ckpt.load_checkpoint(checkpoint_dir, "autosave").step == trained
    assert door.terminated == (signal.SIGHUP if hangup else None)  # the REPL then ends with 129
    assert door.run_line(":config") == dispatch.OK  # the next command runs, its output dropped


# --- a learner's first hour: words that said the opposite of the numbers -----------------------------------------------
def test_the_d_ff_notice_says_narrows_where_four_times_d_model_is_fewer():
    from test_commands import Recorder, run, tiny_session

    for d_model, verb in [(8, "narrows"), (64, "widens")]:  # TINY's d_ff is 64
        hooks = Recorder()
        run(tiny_session(), f":set d_model={d_model}", hooks)
        said = " ".join(hooks.notices)
        assert f"--set d_ff={4 * d_model} {verb} the FFN to that" in said or f":set d_ff={4 * d_model} {verb}" in said, said


def test_a_number_and_its_label_stay_on_one_line():
    from rich.text import Text

    from minitf_repl.render.words import word_lines

    text = Text("how alike the rows are, by distance: 1: 0.71  2: 0.55  4: 0.28  8: 0.07  16: 0.07  32: -0.13")
    for width in range(30, 100):
        for line in word_lines(text, width):  # "16:" ended a line and "0.07" began the next
            assert not line.plain.rstrip().endswith(("1:", "2:", "4:", "8:", "16:", "32:")), (width, line.plain)


# --- the shell: --help into a pipe cuts no word; a misnamed option is named; a value given twice is shown ------------
def test_no_commands_help_into_a_pipe_cuts_a_word_short():
    from typer.testing import CliRunner

    from minitf_repl import cli
    from minitf_repl.commands import REGISTRY

    runner = CliRunner()
    for name in sorted(REGISTRY.commands):
        shown = runner.invoke(cli.app, [name, "--help"], env={"COLUMNS": "80"})
        if shown.exit_code == 2 and "interactive shell" in shown.output:  # the REPL's own (:quit)
            continue
        assert shown.exit_code == 0 and "…" not in shown.stdout, (name, shown.stdout)  # data's NAME lost repeat[:V]


def test_the_shell_names_a_misnamed_option_and_both_values_given():
    from typer.testing import CliRunner

    from minitf_repl import cli

    runner = CliRunner()
    said = runner.invoke(cli.app, ["train", "step=3"])  # was: "minitf train takes no text, got 'step=3'"
    assert said.exit_code == 2 and said.stderr.startswith("error: unknown option 'step' for minitf train; did you "
                                                          "mean steps?")
    twice = runner.invoke(cli.app, ["train", "steps=2", "--steps", "3"])
    assert twice.stderr.strip() == "error: steps is given twice (steps=2 and --steps 3); give it once"
    assert "takes no text, got 'foo'" in runner.invoke(cli.app, ["ls", "foo"]).stderr  # a word, not an option


def test_tab_offers_the_head_counts_the_model_takes_and_set_takes_each():
    from test_commands import run, tiny_session
    from test_sweep_aw import completions

    offered = completions(":set n_heads=", tiny_session())  # TINY: d_model 32
    assert offered == ["1", "2", "4", "8", "16", "32"]  # was nothing, where :set n_heads=3 listed them
    for value in offered:
        run(tiny_session(), f":set n_heads={value}")
    assert completions(":set n_kv_heads=", tiny_session()) == ["1", "2", "none"]  # TINY: 2 heads


# --- a column the width leaves out is named under its table ------------------------------------------------------------
def test_a_table_names_the_columns_a_narrow_window_leaves_out():
    from test_commands import run, tiny_session
    from test_render import plain

    result = run(tiny_session(), ":grad 12+34")
    wide, narrow = plain(result, 160), plain(result, 56)
    assert "left out at" not in wide and "|g'| arrives" in wide
    assert "left out at 56 columns: cos" in narrow  # :grad dropped cos and |g'| arrives without a word
    assert "(COLUMNS=160 before minitf shows" in narrow  # a test's console writes to no terminal: a file's fix


def test_a_bar_of_a_tiny_value_is_a_sliver_not_a_block():
    from minitf_repl.palette import ascii_stand_in
    from minitf_repl.render.chart import bar

    assert bar(0.002 / 8, 8) == "▏" and bar(0.986 / 8, 8) == "█"  # :score drew both as one block
    assert bar(0.0, 8) == "" and bar(1.0, 8) == "█" * 8 and bar(0.5 + 1 / 16, 8) == "████▌"
    assert bar(3e-4, 10) == "▏" and bar(0.25, 10) == "██▌"
    assert all(len(ascii_stand_in(ch)) == 1 for ch in "▏▎▍▌▋▊▉")  # an ASCII output keeps the columns


def test_a_standard_error_that_cannot_be_written_drops_the_progress_and_the_command_goes_on(checkpoint_dir,
                                                                                             monkeypatch):
    from rich.console import Console

    from test_commands import tiny_session

    dead = _Terminal()
    dead.gone = True
    monkeypatch.setattr(sys, "stderr", dead)  # `minitf train 2>/dev/full > run.log`
    results = io.StringIO()
    progress = Console(stderr=True, width=100)
    door = dispatch.FrontDoor(tiny_session(steps=6), Console(file=results, width=100), progress, dispatch.FrontEnd(),
                              progress=progress)
    assert door.run_line(":train") == dispatch.OK  # not stopped after its first step: its result still has a reader
    assert door.session.trainer.step == 6 and "trained 6 steps" in results.getvalue()


def test_parity_with_a_folder_that_is_not_there_says_so_first(tmp_path):
    from typer.testing import CliRunner

    from minitf_repl import cli

    said = CliRunner().invoke(cli.app, ["parity", f"hf:{tmp_path / 'nope'}"])
    assert said.exit_code == 1  # it said "no model to compare yet; --load hf:... loads the folder's", which failed
    assert said.stderr.startswith(f"error: there is no folder {tmp_path / 'nope'}; give a Hugging Face model's folder")


def test_context_names_its_counter_curve_by_the_orders_its_positions_read(tmp_path):
    from test_commands import TEXT, run, tiny_session
    from test_render import text_of

    text_file = tmp_path / "fox.txt"
    text_file.write_text(TEXT * 4, encoding="utf-8")
    session = tiny_session(str(text_file))
    run(session, ":train steps=2")
    shown = text_of(run(session, ":context windows=16"), 100)
    legend = next(line for line in shown.splitlines() if "• model" in line)
    assert "· counter (bigram to 6-gram)" in legend, legend  # it read "6-gram counter" over bigrams to 5-grams


def test_ngrams_counters_stand_after_a_load_on_the_same_data(tmp_path, checkpoint_dir):
    from test_commands import TEXT, run, tiny_session

    text_file = tmp_path / "fox.txt"
    text_file.write_text(TEXT * 4, encoding="utf-8")
    session = tiny_session(str(text_file))
    run(session, ":train steps=2")
    run(session, ":ngram")
    counted = session.counters
    assert counted
    other = tiny_session(str(text_file))  # a checkpoint of another session on the same text (the kept- of a rebuild)
    run(other, ":train steps=3")
    run(other, ":save there")
    run(session, ":load there")
    assert session.counters == counted  # :plot's reference lines stay (a helper saw them go once; not repeated)
    run(session, ":data sort:4")  # other data: they go, as before
    assert session.counters == []
