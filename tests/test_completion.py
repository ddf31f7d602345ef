"""Shell completion for `minitf` in bash, zsh and fish, through Typer.

`minitf --show-completion SHELL` prints the script, `--install-completion SHELL` installs it under
$HOME; the shell then runs `minitf` with `_MINITF_COMPLETE=complete_SHELL` and the words typed so
far, and minitf answers from the command registry: the subcommands, their options, and a value's
choices or `complete` list (the checkpoint names in --checkpoint-dir), the same list Tab gives in
the REPL. bash runs the real installed script here; zsh and fish, which the machine may lack, are
driven through the same variables their scripts set.

The subprocesses name the shell through `_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION`, Typer's own
switch for tests: without it Typer asks the process tree which shell runs (pytest's parent here).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from typer.testing import CliRunner

from minitf_repl import cli
from minitf_repl.commands import REGISTRY
from minitf_repl.repl import CommandCompleter

REPO = Path(__file__).resolve().parents[1]


def minitf(*args: str, home: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """`python -m minitf_repl ARGS` as a shell would run it (the package from this checkout)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", **env}
    if home is not None:
        full["HOME"] = str(home)
    return subprocess.run([sys.executable, "-m", "minitf_repl", *args], env=full, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("shell, marker", [("bash", "complete_bash"), ("zsh", "complete_zsh"),
                                           ("fish", "complete_fish")])
def test_show_completion_prints_each_shells_script(shell, marker):
    result = minitf("--show-completion", shell)
    assert result.returncode == 0, result.stderr
    assert "_MINITF_COMPLETE" in result.stdout and marker in result.stdout and "minitf" in result.stdout


@pytest.mark.parametrize("shell, installed", [
    ("bash", ".bash_completions/minitf.sh"), ("zsh", ".zfunc/_minitf"), ("fish", ".config/fish/completions/minitf.fish"),
])  # fmt: skip
def test_install_completion_writes_the_script_under_home(tmp_path, shell, installed):
    result = minitf("--install-completion", shell, home=tmp_path)
    assert result.returncode == 0, result.stderr
    script = tmp_path / installed
    assert script.is_file() and "_MINITF_COMPLETE" in script.read_text()
    if shell == "bash":
        assert "minitf.sh" in (tmp_path / ".bashrc").read_text()  # sourced from the next shell on


def answer(**env: str) -> subprocess.CompletedProcess:
    """What `minitf` answers a shell that asks it to complete (the variables the shell's script sets), asked in this
    process: the same Typer app and Click completion the console script runs, without a Python and torch start per
    question (0.7 s each; the suite asks some 40). The console script's own process keeps its tests below (zsh and
    fish through `minitf`, bash through the installed script). An exception's traceback goes to stderr, where a
    process would print it."""
    full = {"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", **env}
    result = CliRunner().invoke(cli.app, [], env=full, prog_name="minitf")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(["minitf"], result.exit_code, result.stdout, stderr)


def complete_bash(line: str, **env: str) -> list[str]:
    words = line.split(" ")
    result = answer(_MINITF_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=str(len(words) - 1), **env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_completion_offers_commands_options_and_values(tmp_path):
    for name in ("run-a", "run-b"):  # a checkpoint is a folder with its manifest
        (tmp_path / name).mkdir()
        (tmp_path / name / "checkpoint.json").write_text("{}")
    assert complete_bash("minitf tr") == ["train"]
    assert "quit" not in complete_bash("minitf q")  # REPL-only commands are no subcommands
    options = complete_bash("minitf train --")
    assert {"--steps", "--eval-every", "--schedule", "--json"} <= set(options)
    assert complete_bash("minitf train --schedule ") == ["new", "continue"]
    assert complete_bash("minitf gen --cache ") == []  # a flag (--cache/--no-cache) takes no value
    assert complete_bash(f"minitf --checkpoint-dir {tmp_path} load ") == ["run-a", "run-b"]
    assert complete_bash("minitf load r", MINITF_CHECKPOINT_DIR=str(tmp_path)) == ["run-a", "run-b"]
    assert complete_bash("minitf data s") == ["shakespeare", "sort"]
    assert complete_bash("minitf set norm") == ["norm=", "norm_placement=", "norm_eps=", "norm_gain="]
    assert complete_bash("minitf set norm=") == ["norm=layernorm", "norm=rmsnorm", "norm=none"]
    assert complete_bash("minitf set no_such=") == []
    # a value that is no fixed choice (bpe:N) still offers its usual forms
    assert {"tokenizer=char", "tokenizer=bpe:512"} <= set(complete_bash("minitf set tokenizer="))


def test_zsh_and_fish_get_the_same_answers():
    zsh = minitf(_MINITF_COMPLETE="complete_zsh", _TYPER_COMPLETE_ARGS="minitf train --schedule ")
    assert zsh.returncode == 0 and '"new"' in zsh.stdout and '"continue"' in zsh.stdout, zsh.stderr
    fish = minitf(_MINITF_COMPLETE="complete_fish", _TYPER_COMPLETE_ARGS="minitf tr",
                  _TYPER_COMPLETE_FISH_ACTION="get-args")
    assert fish.returncode == 0 and fish.stdout.split("\t")[0].strip() == "train", fish.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_the_installed_bash_script_completes_in_bash(tmp_path):
    """The script `--install-completion bash` wrote, sourced by a real bash, calling a real `minitf`."""
    assert minitf("--install-completion", "bash", home=tmp_path).returncode == 0
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "minitf"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m minitf_repl "$@"\n')
    wrapper.chmod(0o755)
    script = tmp_path / ".bash_completions" / "minitf.sh"
    probe = (f'source "{script}"; COMP_WORDS=(minitf train --sch); COMP_CWORD=2; _minitf_completion minitf; '
             'printf "%s\\n" "${COMPREPLY[@]}"')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "HOME": str(tmp_path)}
    result = subprocess.run(["bash", "--norc", "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["--schedule"]


def test_the_shell_and_the_repl_offer_the_same_values():
    """One list per option (Param.completions): the REPL's Tab and the shell's Tab cannot drift."""
    repl = CommandCompleter(registry=REGISTRY, session=None)
    for command in REGISTRY.values():
        for p in command.params:
            if p.type is bool or p.refusal is not None or p.complete is not None:
                continue  # flags; refused keys; session-bound lists (checkpoints: tested above)
            shell = cli._shell_completion(p)
            values = repl._values(p)
            assert (shell is None) == (not values), (command.name, p.name)
            if shell is not None:
                assert shell(None, "") == values, (command.name, p.name)
