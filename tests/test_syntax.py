"""syntax.py: a message names a command in the syntax of the front end that shows it.

`minitf experts` from the shell said ":set n_experts=4 experts_per_token=2 adds them", REPL syntax a
shell cannot run. Every message that names a command goes through syntax.cmd (restore, train_first),
and each front end says which syntax it speaks; these tests run the same messages through both.
"""

import io
import re

import pytest
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli
from minitf_repl.commands import REGISTRY, SetResult
from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import FrontDoor, FrontEnd, phrase, run_command
from minitf_repl.render import render
from minitf_repl.session import Session
from minitf_repl.syntax import SHELL, cmd, restore, speaking, syntax, train_first

TINY = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64",
        "--set", "max_seq_len=32", "--set", "batch_size=4", "--data", "sort"]
# A command in REPL syntax: a colon and a command's name, at the start or after a space or '('.
_NAMES = "|".join(map(re.escape, sorted(REGISTRY.names(), key=len, reverse=True)))  # `:?` is one
REPL_COMMAND = re.compile(r"(?:^|[\s(]):(" + _NAMES + r")(?!\w)")


def test_each_syntax_phrases_a_command():
    assert syntax() == "repl"  # outside any front end
    assert cmd("set", n_experts=4, experts_per_token=2) == ":set n_experts=4 experts_per_token=2"
    assert cmd("set", "lr") == ":set lr"
    assert cmd("params", all=True) == ":params all=on" and cmd("load", "run1") == ":load run1"
    assert cmd("train", load="autosave") == ":train"  # the REPL session has its model already
    assert restore("kept-1") == ":load kept-1" and train_first("plot", "autosave") == ":train first, then :plot"
    with speaking(SHELL):
        assert cmd("set", n_experts=4, experts_per_token=2) == "--set n_experts=4 --set experts_per_token=2"
        assert cmd("set", "key=value") == "--set key=value"
        assert cmd("set", "lr") == "minitf set lr"  # a name alone shows the setting: a command of its own
        assert cmd("params", all=True) == "minitf params --all" and cmd("gen", cache=False) == "minitf gen --no-cache"
        assert cmd("train", eval_every=50) == "minitf train --eval-every 50"
        assert cmd("gen", "PROMPT", n=1, seed=3) == "minitf gen PROMPT --n 1 --seed 3"
        assert cmd("compare", "current n_layers=2") == "minitf compare 'current n_layers=2'"
        assert cmd("help") == "minitf --help" and cmd("help", "set") == "minitf set --help"
        assert cmd("train", load="autosave") == "minitf --load autosave train"
        assert restore("kept-1") == "minitf --load kept-1"
        assert train_first("plot", "autosave") == "minitf train first, then minitf --load autosave plot"
    assert syntax() == "repl"  # and back


def test_a_fix_is_phrased_in_the_front_ends_syntax():
    e = UserError("the loss became nan", fix={"lr": 3e-4, "compile": False})
    assert phrase(e, "repl") == "the loss became nan (:set lr=0.0003 compile=off)"
    assert phrase(e, "shell") == "the loss became nan (--set lr=0.0003 --set compile=off)"


def test_minitf_experts_from_the_shell_says_the_fix_in_shell_syntax():
    result = CliRunner().invoke(cli.app, [*TINY, "experts"])
    assert result.exit_code == 1
    assert "--set 'n_experts=4 experts_per_token=2' train trains one, then minitf --load autosave experts looks " \
           "again" in result.stderr
    assert not REPL_COMMAND.search(result.stderr), result.stderr
    out = io.StringIO()
    door = FrontDoor(Session(data_spec="sort"), Console(file=out, width=200, color_system=None))
    door.run_line(":experts")
    assert ":set n_experts=4 experts_per_token=2 builds one (weights reset), then :train and look again" \
        in out.getvalue()  # the REPL keeps its own


@pytest.mark.parametrize("args", [
    ["experts"], ["plot"], ["save"], ["load"], ["tok"], ["ls"], ["params"], ["device"], ["config"],
    ["set", "nope=1"], ["train", "--steps", "2"], ["compare", "current"], ["quantize"],
])  # fmt: skip
def test_no_shell_message_names_a_command_in_repl_syntax(tmp_path, args):
    """Errors and notes alike: whatever a one-shot command prints reads as something a shell runs."""
    result = CliRunner().invoke(cli.app, ["--checkpoint-dir", str(tmp_path), *TINY, *args])
    text = result.stdout + result.stderr
    assert "Traceback" not in text
    assert not REPL_COMMAND.search(text), text


def test_the_shell_help_an_unknown_key_points_to_lists_the_keys():
    result = CliRunner().invoke(cli.app, ["set", "--help"])
    assert result.exit_code == 0 and "n_experts" in result.stdout and "experts_per_token" in result.stdout


def test_notes_in_results_follow_the_syntax(tmp_path):
    kept = SetResult({"n_layers": (2, 1)}, rebuilt=True, kept="kept-20261201-033731")
    for front, want in (("repl", ":load kept-20261201-033731 brings it back"),
                        ("shell", "minitf --load kept-20261201-033731 brings it back")):
        console = Console(file=io.StringIO(), width=200, color_system=None)
        with speaking(front):
            render(kept, console)
        assert want in console.file.getvalue()
    session = Session(data_spec="sort", checkpoint_dir=tmp_path)
    with speaking(SHELL):
        with pytest.raises(UserError, match=re.escape("minitf train first, then minitf --load autosave plot")):
            run_command(session, "plot", {})
    with pytest.raises(UserError, match=re.escape(":train first, then :plot")):
        run_command(session, "plot", {})
