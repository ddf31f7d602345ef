"""The shell from scripts: a text piped in, one error line, empty option values, padding in a pipe, --help (s59)."""
import io
import os
import sys
import threading

import pytest
from rich.console import Console

from minitf_repl import cli, dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.commands.speed import DeviceResult
from minitf_repl.render import render
from test_cli import assert_one_error_line, invoke
from test_commands import tiny_session

PROSE = [f"the {k}th line of a text, with words and no command in it" for k in range(40)]


def words(text: str) -> str:
    """`text` as a reader sees it, wrapping and --help's box lines aside."""
    return " ".join(text.replace("│", " ").split())


# --- 1. a text piped in where a script goes --------------------------------------------------------------------------
def test_a_text_piped_in_is_refused_before_any_line_runs():
    # each of a text's lines was a prompt: 2,883 generations of 200 tokens, stderr saying "not trained yet" each time
    result = invoke("--set", "n=1", input="\n".join(PROSE[:30]) + "\n")
    line = assert_one_error_line(result, code=2)
    assert "not a script" in line and "--data FILE train" in line and "sed 's/^/:gen -- /' | minitf --set n=1" in line


def piped(monkeypatch, data: bytes) -> tuple[list[bytes], bool]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    lines, text = cli._piped_script(tiny_session(data="pydoc"))
    return list(lines), text


def test_where_a_piped_text_is_told_from_a_script_of_prompts(monkeypatch):
    below = "\n".join(PROSE[: cli.PIPED_TEXT_LINES - 1]).encode()
    assert piped(monkeypatch, below) == (below.splitlines(keepends=True), False)  # a few prompts: a script, it runs
    # blank lines and comments are no prompts; as many prompts as the rule counts are a text
    text = ("# notes\n\n" + "\n".join(PROSE[: cli.PIPED_TEXT_LINES])).encode()
    assert piped(monkeypatch, text)[1] is True
    # one command among the first lines (with ':', or a command's line without it) makes it a script
    for command in (":load run1", "train steps=5", "minitf gen hi"):
        lines = [*PROSE[:5], command, *PROSE[5:30]]
        assert piped(monkeypatch, "\n".join(lines).encode())[1] is False, command


def test_a_file_given_as_standard_input_is_read_ahead_and_comes_back_whole(monkeypatch, tmp_path):
    data = ("\ufeff" + "\r\n".join(PROSE) + "\r\nlast").encode()
    path = tmp_path / "notes.txt"
    path.write_bytes(data)
    with open(path, "rb") as f:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(f))
        lines, text = cli._piped_script(tiny_session(data="pydoc"))
        assert text is True and b"".join(lines) == data


def test_a_pipe_is_not_waited_on_past_the_lines_written(monkeypatch):
    """A program that writes a prompt and waits for its continuation: the look ahead must not wait for 20 lines."""
    if os.name == "nt":
        pytest.skip("Windows' pipes are not looked into")
    read, write = os.pipe()
    with os.fdopen(read, "rb") as r, os.fdopen(write, "wb", buffering=0) as w:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(r))
        w.write(b"once upon a time\nthere was a ")  # a line and the start of the next
        done = []
        worker = threading.Thread(target=lambda: done.append(cli._piped_script(tiny_session(data="pydoc"))))
        worker.start()
        worker.join(timeout=20)
        assert done and done[0][1] is False  # back with the lines there are: a script
        w.write(b"dragon\n:gen\n")
        w.close()
        assert list(done[0][0]) == [b"once upon a time\n", b"there was a dragon\n", b":gen\n"]  # the cut line whole


# --- 2. a failure of :device said once, on stderr ---------------------------------------------------------------------
def device_text(apart: bool) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    result = DeviceResult([], "cuda", False, problem="device 'cuda' is not available here")
    dispatch._mark_failure_said(result, apart)
    render(result, console)
    return console.file.getvalue()


def test_the_device_tables_error_line_is_left_to_the_door_where_it_says_it_on_stderr():
    assert "error: device 'cuda'" not in device_text(apart=True)
    assert "error: device 'cuda'" in device_text(apart=False)  # a terminal's output: the one place it is said


def test_a_device_not_here_is_one_error_line_on_stderr_and_none_in_the_output():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a machine with a CUDA GPU has the device")
    result = invoke("--device", "cuda", "device")
    assert result.exit_code == 1
    assert "error:" not in result.stdout and "cpu" in result.stdout  # the table, without the error under it
    assert [line for line in result.stderr.splitlines() if "error:" in line] == [result.stderr.strip()]


# --- 3. an empty option value is a missing value: 2 -------------------------------------------------------------------
@pytest.mark.parametrize("args, said", [
    (["--data", "", "gen", "hi"], "--data is empty; give one of pydoc"),
    (["--data", " ", "device"], "--data is empty"),
    (["--device", "", "device"], "--device is empty; give one of auto, cpu"),
    (["--load", "", "gen", "hi"], "--load is empty"),
    (["--set", "", "config"], "--set is empty"),
    (["--checkpoint-dir", "", "ls"], "--checkpoint-dir is empty"),
    (["--set", "checkpoint_dir=", "ls"], "--set: checkpoint_dir= names no folder"),
])  # fmt: skip
def test_an_empty_value_of_any_option_exits_2_as_a_missing_value_does(tmp_path, monkeypatch, args, said):
    monkeypatch.chdir(tmp_path)  # as `minitf train --save ""` is
    line = assert_one_error_line(invoke(*args), code=2)
    assert line.startswith(f"error: {said}"), line


# --- 4. no trailing spaces where the output is no terminal ------------------------------------------------------------
class Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_a_pipe_gets_no_spaces_at_line_ends_and_streamed_text_keeps_its_spaces(monkeypatch):
    monkeypatch.setattr(sys, "stdout", Stream(tty=False))
    monkeypatch.setattr(dispatch, "_HELD_SPACES", {})
    out = dispatch._GuardedStream("stdout")
    out.write("name   pydoc     \n" + " " * 80 + "\n")
    assert sys.stdout.getvalue() == "name   pydoc\n\n"
    for token in ("once", " ", "upon ", "a", " time  "):  # :gen's tokens, each written as it comes
        out.write(token)
    assert sys.stdout.getvalue().endswith("once upon a time")  # every token there, no space lost inside the line
    out.write("\n")
    assert sys.stdout.getvalue().endswith("once upon a time\n")
    monkeypatch.setattr(sys, "stdout", Stream(tty=True))  # a terminal gets its output as written
    out.write("pydoc   \n")
    assert sys.stdout.getvalue() == "pydoc   \n"


def test_a_table_into_a_pipe_has_no_line_that_ends_in_a_space():
    result = invoke("--data", "sort", "data")
    assert result.exit_code == 0, result.output
    assert "sort" in result.stdout and not [line for line in result.stdout.splitlines() if line.endswith(" ")]


# --- 5. --help ------------------------------------------------------------------------------------------------------
def test_an_options_default_from_a_setting_gives_its_value():
    assert "(default: the temperature setting, 0.8)" in cli._help(REGISTRY["gen"].param_named("temperature"))
    assert "(default: the seed setting, 1337)" in cli._help(REGISTRY["lrfind"].param_named("seed"))
    steps = cli._help(REGISTRY["train"].param_named("steps"))  # a data's recipe sets it: the default data's
    assert "else the steps setting, 600 on pydoc)" in steps
    lr = cli._help(REGISTRY["train"].param_named("lr"))  # named, not as its default: left as it is
    assert "the lr setting, minitf --set lr=X" in lr


def test_the_top_help_names_json_and_the_exit_statuses_and_train_says_what_kept_means():
    top = words(invoke("--help").stdout)
    assert "Every command takes --json" in top and "docs/checkpoints-and-safety.md#exit-status" in top
    assert "2 a wrong command line" in top
    train = words(invoke("train", "--help").stdout)
    assert "(kept): the option changes its setting, as minitf --set does, not for this command alone" in train
    assert "(kept)" not in words(invoke("gen", "--help").stdout)  # said only where an option is kept
