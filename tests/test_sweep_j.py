"""What a user's-eye sweep of the one-shot shell (`minitf CMD ...` from a script) found wrong: each test failed
before its fix.

Ctrl-C in the first second of `minitf train` (while minitf and torch load) printed a traceback, or, where torch's
import of numpy swallowed the KeyboardInterrupt, was lost: the run trained to its end and exited 0. A command that
ran and failed (a save, a check, an absent device) exited 1 with its error line only in stdout, so `minitf train >
run.log` failed without a word on the terminal. `minitf --data "$DATA" train` with DATA unset trained on pydoc (so
--device "" and --checkpoint-dir ""). `minitf gen --cache off 12` continued "off 12" with the cache on, where the
REPL's `:gen --cache off 12` turns it off. `minitf set preset=llama` said to keep it with `--set activation=swiglu`
(llama's activation alone). `minitf load NAME` did not say its model ends with the command; a bug met
by --set was a traceback. A text that starts with a dash, an option given no value, a KEY=VALUE given twice,
`minitf help lr --json` and `minitf --help`'s `<bool>` each got a line or a result that missed what the user typed;
each named in its test.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli import assert_one_error_line, invoke

ROOT = Path(__file__).resolve().parents[1]  # the package under test, wherever the command runs from
TINY_SET = "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"
posix_only = pytest.mark.skipif(os.name == "nt", reason="POSIX signals")


def minitf_with(tmp_path: Path, prelude: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m minitf_repl ARGS` as the shell runs it, after `prelude` (Python) has set the scene."""
    code = f"import os, runpy, signal, sys\n{prelude}\nsys.argv = ['minitf', *{list(args)!r}]\n" \
           "runpy.run_module('minitf_repl', run_name='__main__', alter_sys=True)\n"
    env = {**os.environ, "MINITF_CHECKPOINT_DIR": str(tmp_path / "ck"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)


# --- Ctrl-C while minitf starts ---------------------------------------------------------------------------
@posix_only
def test_ctrl_c_while_minitf_loads_its_modules_exits_130_without_a_traceback(tmp_path):
    """Ctrl-C in the first half second, while the shell's modules load, printed a traceback of the imports."""
    prelude = ("import builtins\nreal = builtins.__import__\n"
               "def ctrl_c_at_typer(name, *args, **kwargs):  # the key pressed while the shell's modules load\n"
               "    if name == 'typer':\n"
               "        builtins.__import__ = real\n"
               "        os.kill(os.getpid(), signal.SIGINT)\n"
               "    return real(name, *args, **kwargs)\n"
               "builtins.__import__ = ctrl_c_at_typer")
    done = minitf_with(tmp_path, prelude, "--data", "sort", "--set", TINY_SET, "train", "--steps", "2")
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and done.stdout == ""


@posix_only
def test_ctrl_c_that_an_import_swallows_while_minitf_starts_still_stops_the_command(tmp_path):
    """torch's C extension catches any error of its import of numpy, a KeyboardInterrupt included: the run went on."""
    prelude = ("import minitf_repl.cli as cli\nreal = cli.apply_settings\n"
               "def swallowed(*args, **kwargs):\n"
               "    try:\n"
               "        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while --set builds the session's data...\n"
               "    except KeyboardInterrupt:\n"
               "        pass  # ...which an import catches and drops\n"
               "    return real(*args, **kwargs)\n"
               "cli.apply_settings = swallowed")
    done = minitf_with(tmp_path, prelude, "--data", "sort", "--set", TINY_SET, "train", "--steps", "2")
    assert done.returncode == 130, (done.returncode, done.stdout, done.stderr)
    assert "trained" not in done.stdout and "Traceback" not in done.stderr
    assert not (tmp_path / "ck").exists()  # the command never ran, so nothing was saved


# --- a command that ran and failed, its output sent elsewhere ----------------------------------------------
def test_a_command_that_fails_after_it_ran_says_so_on_stderr_when_its_output_goes_to_a_file():
    """`minitf --device tpu device > devices.txt` exited 1 with its `error:` line in the file and nothing on the
    terminal (so did `minitf train > run.log` whose save failed, and a `minitf checks` with a FAIL)."""
    result = invoke("--device", "tpu", "device")
    assert result.exit_code == 1 and "cpu" in result.stdout  # the listing still works, and still says it
    assert result.stderr.splitlines() == ["error: unknown device 'tpu'; use one of auto, cpu, cuda, cuda:N or mps"]
    doc = invoke("--device", "tpu", "device", "--json")  # as it already was with --json
    assert doc.exit_code == 1 and doc.stderr == result.stderr


# --- minitf --help -------------------------------------------------------------------------------------------
def test_minitf_help_names_no_python_type():
    """`minitf --help` listed --install-completion, --show-completion and --help as `<bool>` (a flag takes no value),
    and --device and --data as `<str>`, where every command's --help had none."""
    shown = invoke("--help").stdout
    assert "<bool>" not in shown and "<str>" not in shown
    rows = {line.split()[1]: line for line in shown.splitlines() if line.startswith("│ --")}
    assert " ".join(rows["--device"].split()).startswith("│ --device NAME auto, cpu")
    assert " ".join(rows["--data"].split()).startswith("│ --data NAME|PATH pydoc")


# --- an option given no value ------------------------------------------------------------------------------
@pytest.mark.parametrize("args, help_of", [
    (["gen", "--n"], "minitf gen"),
    (["train", "--steps"], "minitf train"),
    (["--data", "sort", "gen", "-n"], "minitf gen"),
    (["--set"], "minitf"),
    (["--checkpoint-dir"], "minitf"),
    (["gen", "--cache=maybe"], "minitf gen"),
])  # fmt: skip
def test_an_option_given_no_value_says_where_its_options_are_listed(args, help_of):
    """`minitf gen --n` said "Option '--n' requires an argument" and no more: the one usage error without a fix."""
    line = assert_one_error_line(invoke(*args), code=2)
    option, _, value = args[-1].partition("=")
    if value:  # an on/off option's other value: as the REPL says it (50th session), its values listed
        assert line == f"error: {option[2:]} must be on or off (on|off|true|false|yes|no|1|0), got '{value}'"
        return
    assert line == f"error: Option '{option}' requires an argument; {help_of} --help lists the options"


# --- a one-shot `minitf load NAME` ---------------------------------------------------------------------------
def test_a_one_shot_load_says_the_model_ends_with_the_command_and_where_load_goes(tmp_path):
    """`minitf load run1 && minitf gen` sampled from a fresh model: the one-shot load said "loaded run1" and
    nothing of its session ending there, where a one-shot data, set, quantize or ablate says so."""
    folder = str(tmp_path / "ck")
    made = invoke("--data", "sort", "--set", TINY_SET, "--checkpoint-dir", folder, "train", "--steps", "1",
                  "--save", "run1")
    assert made.exit_code == 0, made.output
    result = invoke("--checkpoint-dir", folder, "load", "run1")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "loaded run1" in out and "loaded for this command only: a checkpoint lasts one command from the shell, " \
           f"so give it before that command, e.g. minitf --checkpoint-dir {folder} --load run1 gen" in out
    piped = invoke("--checkpoint-dir", folder, input=":load run1\n")  # the REPL's session goes on with it
    assert piped.exit_code == 0 and "loaded run1" in piped.stdout and "this command only" not in piped.stdout


# --- a text that starts with a dash ----------------------------------------------------------------------------
@pytest.mark.parametrize("args, fixed", [
    (["tok", "-5"], "minitf tok -- -5"),
    (["--data", "pydoc", "gen", "--n", "3", "-b c"], "minitf --data pydoc gen --n 3 -- '-b c'"),
    (["gen", "-b c", "--n", "3", "--json"], "minitf gen --n 3 --json -- '-b c'"),
    (["patch", "-1", "vs", "-2"], "minitf patch -- -1 vs -2"),
])  # fmt: skip
def test_a_text_that_starts_with_a_dash_is_told_to_go_after_the_double_dash(args, fixed):
    """`minitf tok -5` (or a script's `minitf gen "$PROMPT"` where the prompt starts with -) said only "No such
    option: -5": the text reads as an option, and nothing said that after `--` it is text."""
    line = assert_one_error_line(invoke(*args), code=2)
    assert line.endswith(f"; a text that starts with - goes after --: {fixed}"), line
    said = invoke(*shlex.split(fixed)[1:])  # which works
    assert said.exit_code == 0 and "error:" not in said.stderr, said.output
    for other in (["train", "-5"], ["set", "-5"], ["gen", "--temp", "1"]):  # no text there; a misspelt option
        assert "goes after --" not in assert_one_error_line(invoke(*other), code=2)


def test_the_shell_line_that_restores_a_folder_with_a_space_quotes_it():
    """`--load hf:/my models/gpt2` in a hint read as --load hf:/my and the words "models/gpt2"."""
    from minitf_repl.syntax import SHELL, restore, speaking

    with speaking(SHELL):
        assert restore("hf:/my models/gpt2") == "minitf --load 'hf:/my models/gpt2'" and restore("run1") == "minitf --load run1"


# --- an option given twice as KEY=VALUE --------------------------------------------------------------------
def test_an_option_given_twice_as_key_value_names_the_two_words_typed():
    """`minitf gen n=3 n=4 hi` said "n is given twice (n=4 and --n)": no --n was typed."""
    line = assert_one_error_line(invoke("gen", "n=3", "n=4", "hi"), code=2)
    assert line == "error: n is given twice (n=3 and n=4); give it once"
    line = assert_one_error_line(invoke("train", "--steps", "2", "max_iters=3"), code=2)
    assert line == "error: steps is given twice (max_iters=3 and --steps 2); give it once"


# --- an option given an empty value (a script's unset variable) -----------------------------------------------
@pytest.mark.parametrize("args, said", [
    (["--data", "", "train", "--steps", "1"], "error: --data is empty; give one of pydoc, shakespeare"),
    (["--device", "", "train", "--steps", "1"], "error: --device is empty; give one of auto, cpu"),
    (["--checkpoint-dir", "", "train", "--steps", "1"], "error: --checkpoint-dir is empty; give a directory"),
])  # fmt: skip
def test_an_empty_option_is_refused_not_taken_for_the_default(tmp_path, monkeypatch, args, said):
    """`minitf --data "$DATA" train` with DATA unset trained on pydoc without a word (and --device "" on any device,
    --checkpoint-dir "" saved into ./checkpoints), where --data " " was refused."""
    monkeypatch.chdir(tmp_path)
    line = assert_one_error_line(invoke(*args), code=2)  # an empty value exits as a missing one does (s59)
    assert line.startswith(said), line
    assert not (tmp_path / "checkpoints").exists()


# --- minitf help KEY ... ---------------------------------------------------------------------------------------
def test_help_of_a_setting_keeps_the_words_after_it():
    """`minitf help lr --json` printed text (and `minitf help lr n` showed lr alone): what came after the name was
    dropped on the way to `minitf set lr`."""
    doc = invoke("help", "lr", "--json")
    assert doc.exit_code == 0, doc.output
    assert json.loads(doc.stdout)["schema"].startswith("minitf.set/")
    assert [shown["name"] for shown in json.loads(doc.stdout)["shown"]] == ["lr"]
    both = invoke("help", "lr", "n")
    assert both.exit_code == 0 and both.stdout.startswith("lr ") and "\nn " in both.stdout, both.output


def test_piped_input_on_a_terminal_says_a_failure_once():
    """Piped input's consoles are told they are no terminal (no animation) though they may write to one: there the
    rendered result shows the failure, and the same line again on stderr would say it twice."""
    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.session import Session

    class Screen(io.StringIO):
        def isatty(self) -> bool:
            return True

    out, err = (Console(file=Screen(), width=100, force_terminal=False, no_color=True) for _ in range(2))
    assert repl.run_lines([":device"], Session(device_name="tpu"), out, err) == 1
    assert "unknown device 'tpu'" in out.file.getvalue() and err.file.getvalue() == ""
    err = Console(file=io.StringIO(), width=100, force_terminal=False, no_color=True)
    out = Console(file=io.StringIO(), width=100, force_terminal=False, no_color=True)  # `... | minitf > f`
    assert repl.run_lines([":device"], Session(device_name="tpu"), out, err) == 1
    assert err.file.getvalue().startswith("error: line 1: unknown device 'tpu'")


# --- a flag followed by on or off --------------------------------------------------------------------------
def test_a_flag_followed_by_on_or_off_reads_it_as_the_repl_does():
    """`minitf gen --cache off 12` generated from "off 12" with the cache on, where `:gen --cache off 12` (which
    docs/commands.md says it is) turns the cache off and continues "12"; `minitf params --all on` was refused."""
    tiny = ["--data", "sort", "--set", TINY_SET]
    for flag, cache in ((["--cache", "off"], False), (["--cache=no"], False), (["--cache", "On"], True)):
        result = invoke(*tiny, "gen", *flag, "12", "--n", "2", "--json")
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert (doc["prompt"], doc["cache"]) == ("12", cache), flag
    doc = json.loads(invoke("--set", TINY_SET, "gen", "--n", "2", "--json", "--", "--cache", "off").stdout)
    assert (doc["prompt"], doc["cache"]) == ("--cache off", True)  # after -- it is all text, as before
    assert invoke(*tiny, "params", "--all", "on").exit_code == 0


# --- a bug met by --set -------------------------------------------------------------------------------------
def test_a_bug_met_while_set_applies_is_one_line_unless_debug(monkeypatch):
    """`--set` let an internal error out as a traceback, where --load and every command say it in one line."""
    from minitf_repl import cli

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "run_command", broken)
    line = assert_one_error_line(invoke("--set", "lr=0.1", "config"), prefix="internal error: ")
    assert line == "internal error: RuntimeError: a bug (run with --debug for the traceback)"
    assert isinstance(invoke("--debug", "--set", "lr=0.1", "config").exception, RuntimeError)  # the traceback


# --- a one-shot `minitf set preset=NAME` ---------------------------------------------------------------------
def test_a_one_shot_preset_is_shown_where_it_goes_as_the_preset_not_its_first_field():
    """`minitf set preset=llama` said "give it before that command, e.g. minitf --set activation=swiglu train": that
    line gives llama's activation alone, not llama."""
    out = " ".join(invoke("set", "preset=llama").stdout.split())
    assert "e.g. minitf --set preset=llama train" in out, out
    out = " ".join(invoke("set", "lr=0.01", "n_layers=2").stdout.split())  # lr=0.01 changed nothing
    assert "e.g. minitf --set n_layers=2 train" in out, out
