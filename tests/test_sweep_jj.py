"""What a sweep of things other sweeps had found and left found: each test failed before its fix.

`minitf help train steps` showed the whole of `minitf train --help` where `:help train steps` shows that option (and
`help train lr` the option's line where `:help train lr` shows the setting). `report --json`, `save hf:`, `load`
and `parity` gave paths as typed, relative, and so did `config`/`ls` of a relative --checkpoint-dir. A folder that
could not be written was "cannot write in .". `:data` did not say a leading byte-order mark was dropped. `--data
/nonexistent config` and `--device bogus config` showed the bad value without a word. `:context` after `:set
max_seq_len` widened a trained model said it trained on windows of the new length, and the notice of a second
raise named the previous setting. A file name's ESC drove the terminal from :data, :report, :ls, error lines and
the toolbar.
"""

import json

import pytest

from minitf_repl.core.errors import UserError
from test_cli import invoke
from test_commands import Recorder, run, text_file, tiny_session  # noqa: F401  (a fixture)


# --- the shell's help of one option -----------------------------------------------------------------------------
def test_shell_help_of_one_option_shows_that_option_alone():
    result = invoke("help", "train", "steps")
    assert result.exit_code == 0, result.output
    assert "--steps" in result.stdout and "length of a new run" in result.stdout
    assert "--lr" not in result.stdout and "Usage" not in result.stdout


def test_shell_help_of_an_option_a_command_lacks_says_so_in_one_line():
    result = invoke("help", "train", "bogus")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: minitf train has no option 'bogus'; minitf help train lists its options"


# --- report --json and save hf: --json give an absolute path, as save --json does ---------------------------
def test_report_and_hf_save_give_absolute_paths(tmp_path, monkeypatch, checkpoint_dir):
    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=2")
    report = run(s, ":report r.html")
    assert report.path == str(tmp_path / "r.html")
    saved = run(s, ":save hf:out")
    assert saved.path == str(tmp_path / "out")


def test_hf_save_in_a_folder_it_cannot_write_names_the_folder_by_its_path(tmp_path, monkeypatch, checkpoint_dir):
    import errno

    from minitf_repl.core import hf

    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=2")

    def refused(*a, **k):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(hf, "new_folder", refused)  # its temporary folder (root would be let write anywhere)
    with pytest.raises(UserError) as e:
        run(s, ":save hf:out")
    assert f"cannot write in {tmp_path}:" in str(e.value)


# --- a leading byte-order mark dropped is said, as line endings read as \n are --------------------------------
def test_data_says_a_leading_byte_order_mark_was_dropped(tmp_path):
    from minitf_repl.core.data import load_data

    path = tmp_path / "notepad.txt"
    path.write_bytes(b"\xef\xbb\xbf" + b"hello world, a file Notepad saved\n" * 5)
    data = load_data(str(path))
    assert "\ufeff" not in data.text
    assert "byte-order mark" in data.description
    plain_file = tmp_path / "plain.txt"
    plain_file.write_bytes(b"hello world, a file Notepad saved\n" * 5)
    assert "byte-order mark" not in load_data(str(plain_file)).description


# --- :config says a data file that is not there, or a device name that is none --------------------------
def test_config_says_a_missing_data_file_and_an_unknown_device():
    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session

    # the REPL's :config (a REPL opened on them warns and opens); the one-shot `minitf --data ... config` refuses them
    # before the command runs (46th session: tests/test_sweep_bd.py)
    problems = run_command(Session(data_spec="/nonexistent/poems.txt", device_name="bogus"), "config", {}).problems
    assert any(p.startswith("no such file: /nonexistent/poems.txt") for p in problems)
    assert any(p.startswith("unknown device 'bogus'") for p in problems)
    refused = invoke("--data", "/nonexistent/poems.txt", "--device", "bogus", "config")
    assert refused.exit_code == 1 and "unknown device 'bogus'" in refused.stderr
    doc = json.loads(invoke("--device", "cpu", "--data", "sort:3", "config", "--json").stdout)
    assert doc["schema"] == "minitf.config/6" and doc["problems"] == []


# --- :context after :set max_seq_len raised: the window the model trained at, not the new one -------------------
def test_context_after_max_seq_len_raised_reads_past_the_window_the_model_trained_at(text_file, checkpoint_dir):
    s = tiny_session(text_file)
    run(s, ":set pos_encoding=rope max_seq_len=16")
    run(s, ":train steps=2")
    run(s, ":set max_seq_len=24")  # the weights kept: they never trained on windows of 24
    result = run(s, ":context windows=16")
    assert result.curve.positions == 24 and result.curve.trained == 16
    longer = run(s, ":context length=32 windows=16")
    assert longer.curve.trained == 16  # it said "the model trained on windows of 24"
    run(s, ":save w")
    run(s, ":load w")  # the checkpoint remembers it too
    assert run(s, ":context windows=16").curve.trained == 16
    run(s, ":train steps=1")  # now it has trained at 24
    assert run(s, ":context windows=16").curve.trained == 24


# --- a file name with terminal escape codes is shown escaped, never drives the terminal -------------------------
def test_a_file_name_with_escape_codes_is_shown_escaped(tmp_path, checkpoint_dir):
    import io

    from minitf_repl.render import console_for, error, render

    from minitf_repl.core.errors import DataError

    path = tmp_path / "a\x1b[31mRED\x1b]0;title\x07.txt"
    path.write_text("hello world, some text to read\n" * 20, encoding="utf-8")
    out = io.StringIO()
    console = console_for(file=out, force_terminal=True, width=100)
    # Such a name is refused where it is named (a checkpoint's manifest cannot keep it: test_sweep_am), and the
    # refusal quotes it escaped as well
    with pytest.raises(DataError) as refused:
        run(tiny_session(str(path)), ":data")
    error(console, str(refused.value))
    (tmp_path / "plain.txt").write_text("hello world, some text to read\n" * 20, encoding="utf-8")
    s = tiny_session(str(tmp_path / "plain.txt"))
    run(s, ":train steps=1")
    render(run(s, f":report {tmp_path}/r\x1b[2J.html"), console)
    error(console, f"cannot read {path}")
    shown = out.getvalue()
    plain_text = "".join(part.split("m", 1)[-1] for part in shown.split("\x1b["))  # Rich's own colour codes out
    assert "\x07" not in shown and "\x1b]" not in shown and "\x1b[2J" not in shown and "\x1b[31mRED" not in shown
    assert "\\x1b[31mRED" in plain_text and "\\x1b[2J" in plain_text


def test_load_parity_and_save_in_a_relative_checkpoint_folder_give_absolute_paths(tmp_path, monkeypatch):
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    s.checkpoint_dir = Path("ck")  # --checkpoint-dir ck
    run(s, ":train steps=2")
    assert run(s, ":save x1").path == str(tmp_path / "ck" / "x1")
    assert run(s, ":load x1").path == str(tmp_path / "ck" / "x1")
    run(s, ":save hf:out")
    assert run(s, ":parity hf:out").path == str(tmp_path / "out")
    assert run(s, ":load hf:out").path == str(tmp_path / "out")


def test_report_and_save_in_a_folder_they_cannot_write_name_it_by_its_path(tmp_path, monkeypatch, checkpoint_dir):
    import os
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=1")
    s.checkpoint_dir = Path(".")
    monkeypatch.setattr(os, "access", lambda *a, **k: False)  # a folder this user may not write (tests run as root)
    with pytest.raises(UserError) as e:
        run(s, ":report r.html")
    assert f"(in {tmp_path})" in str(e.value)
    with pytest.raises(UserError) as e:
        run(s, ":save x1")
    assert f"cannot write in {tmp_path}" in str(e.value)


def test_the_toolbar_shows_a_file_name_with_escape_codes_escaped(tmp_path):
    from minitf_repl.repl import toolbar_text

    path = tmp_path / "a\x1b[31mRED.txt"
    path.write_text("hello world, some text to read\n" * 20, encoding="utf-8")
    bar = toolbar_text(tiny_session(str(path)), 100)
    assert "\x1b" not in bar and "a\\x1b[31mRED.txt" in bar


def test_a_relative_checkpoint_dir_is_given_absolute_by_config_and_ls(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = json.loads(invoke("--checkpoint-dir", "ck", "config", "--json").stdout)
    assert config["checkpoints"]["dir"] == str(tmp_path / "ck")
    listing = json.loads(invoke("--checkpoint-dir", "ck", "ls", "--json").stdout)
    assert listing["directory"] == str(tmp_path / "ck")


def test_shell_help_of_an_option_made_from_a_setting_shows_the_setting_as_the_repl_does():
    result = invoke("help", "train", "lr")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("lr  training setting") and "default 0.01" in result.stdout


def test_raising_max_seq_len_twice_names_the_window_the_model_trained_at(text_file, checkpoint_dir):
    s = tiny_session(text_file)
    run(s, ":set pos_encoding=rope max_seq_len=16")
    run(s, ":train steps=1")
    run(s, ":set max_seq_len=20")
    recorder = Recorder()
    run(s, ":set max_seq_len=24", recorder)
    said = " ".join(str(n) for n in recorder.notices)
    assert "positions past 16" in said and "past 20" not in said


def test_context_after_max_seq_len_raised_hints_no_length_it_was_not_given(text_file, checkpoint_dir):
    import io

    from minitf_repl.render import console_for, render

    s = tiny_session(text_file)
    run(s, ":set pos_encoding=rope max_seq_len=16")
    run(s, ":train steps=1")
    run(s, ":set max_seq_len=24")
    out = io.StringIO()
    render(run(s, ":context windows=16"), console_for(file=out, width=100))
    assert "length=24" not in out.getvalue()  # it hinted `:context windows=64 length=24`: the window it has
    out = io.StringIO()
    render(run(s, ":context windows=16 length=32"), console_for(file=out, width=100))
    assert "length=32" in out.getvalue()
