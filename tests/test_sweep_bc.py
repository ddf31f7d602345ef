"""The 45th session's own look: each test failed before its fix.

A quick quit died: `printf ':quit\\n' | minitf` exited 134 ("terminate called without an active exception") about one
time in five, when the interpreter ended while the background torch import (dispatch.preload) was still inside torch's
C++ start-up. The exit now waits for that import to end.
"""

import subprocess
import sys
import threading
import time

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
    for args in (["tok", "hi"], ["ls"], ["set", "lr=0.1"], ["data"]):  # each exited 0 without a word
        result = runner.invoke(cli.app, ["--device", "tpu", *args])
        assert (result.exit_code, result.stderr.splitlines(), result.stdout) == (1, [refused], ""), args
    config = runner.invoke(cli.app, ["--device", "tpu", "config"])  # config shows the settings and warns, as before
    assert config.exit_code == 0 and "warning: unknown device 'tpu'" in config.stdout
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
    assert cut_middle("x" * 10) == "x" * 10 and len(cut_middle("y" * 200)) == 80
    assert cut_middle("/start/" + "m" * 100 + "/end.txt").endswith("/end.txt")
