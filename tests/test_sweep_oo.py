"""What a user's-eye sweep of minitf without a person at the keyboard (piped input, a script file, paste) and of
output sent elsewhere (a file, a pipe, stderr) found: each test failed before its fix.

A script saved with a UTF-8 byte order mark (Notepad, PowerShell) failed on its first line: the mark was read as a
character of the prompt. Piped input whose output is a terminal (`printf ':gen raw=on\n' | minitf`) took that
terminal for a file: every message ran on as one line that the terminal cut inside words, and `:gen raw=on` wrote
the vocabulary's control characters to it as they are, which only a file or a pipe may get. The REPL with its output
sent to a file (`minitf > out.txt`) drew its prompt and toolbar into the file: the person at the keyboard typed
blind, and the file filled with the prompt's redraws. $MINITF_THREADS=0 or -3 fixed one thread, shown as
"$MINITF_THREADS=1" (a value the user never set); a word or 5000 was used or dropped without a word; and 99 threads
past 2 CPUs went unsaid where `threads=99` says it. The docs' table of "every variable it reads" left out six that
minitf reads: the instruction-set caps it reports and acts on, the inductor cache it sets, torchrun's
LOCAL_WORLD_SIZE and the old history's XDG_DATA_HOME. A one-shot `minitf train` whose progress went to a file (`>
run.log 2>&1`, nohup) wrote nothing there until the run's end, however long. A relative $MINITF_CHECKPOINT_DIR was
named as typed ("no checkpoints in ck yet") where --checkpoint-dir ck and the default name the folder in full.
`nohup minitf train &` stopped its run and exited 129 when the terminal closed: the SIGHUP that nohup ignores was
handled again while the command ran. A background job (`minitf train &` in an interactive shell) was stopped by the
kernel before its first step ("Stopped (tty output)"): it switched the terminal's echo off, which only the
foreground job may do. Piped input on a terminal (`printf ':train\n' | minitf`) showed nothing at all until a long
run ended. With both outputs sent to a log (`minitf > session.log 2>&1`) the prompt was drawn into the log. A
one-shot `minitf compare` logged nothing either until its end. A --load that failed suggested a line with the same
--load in it ("minitf --load ../x ls lists them"), which failed the same way. $MINITF_CHECKPOINT_DIR (or _CACHE_DIR,
_HISTORY) set to blanks made a folder named by spaces where an empty value meant the default, and a blank
$MINITF_SHAKESPEARE_URL was "unknown url type ''". `minitf --json` with no command (`printf ':config\n' | minitf
--json`) was "No such option: --json (Possible options: --version)".
"""

import io

import pytest

from minitf_repl import repl
from minitf_repl.session import Session
from test_repl import consoles


# --- a script file's byte order mark ---------------------------------------------------------------------------
def test_a_scripts_utf8_byte_order_mark_is_not_part_of_its_first_line():
    lines = list(repl.stdin_lines(io.BytesIO(b"\xef\xbb\xbf:config\r\n# \xef\xbb\xbf stays here\n")))
    assert lines == [":config\r\n", "# \ufeff stays here\n"]  # only the file's first bytes are the mark
    out, err = consoles()
    assert repl.run_lines(repl.stdin_lines(io.BytesIO(b"\xef\xbb\xbf:config\n")), Session(), out, err) == 0
    assert err.file.getvalue() == "" and "d_model" in out.file.getvalue()


# --- piped input whose output is a terminal ------------------------------------------------------------------
def _pty_console(width: int = 40):
    """The console piped input writes its results to (cli.open_shell), on a terminal of `width` columns; and what
    was written there, as a function."""
    import os

    from minitf_repl.render import console_for

    master, slave = os.openpty()
    file = os.fdopen(slave, "w", encoding="utf-8")
    console = console_for(file=file, force_terminal=False, no_color=True, width=width)

    def written() -> str:
        file.flush()
        os.set_blocking(master, False)
        chunks = []
        while True:
            try:
                chunks.append(os.read(master, 65536))
            except BlockingIOError:
                break
        return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")

    return console, written


def test_piped_input_on_a_terminal_wraps_messages_at_spaces():
    from minitf_repl.render import say

    console, written = _pty_console(40)
    message = "trained 5 steps: train loss 3.1944, val loss 2.9750, 4.292 bits per character, 24,619 tokens/s"
    say(console, message)
    lines = written().splitlines()
    assert len(lines) > 1 and all(len(line) <= 40 for line in lines), lines  # a terminal cut it inside words
    assert " ".join(lines) == message


def test_gen_raw_in_piped_input_on_a_terminal_stays_escaped():
    from minitf_repl.render import RichReporter

    console, written = _pty_console(100)
    reporter = RichReporter(console, live=False, out=console)
    reporter.on_gen_start("", raw=True)
    reporter.on_token("a\x1b[31mred")
    reporter.close()
    text = written()
    assert "\x1b" not in text and "\\x1b[31mred" in text  # the escape drove the terminal
    assert "in a terminal they stay escaped" in " ".join(text.split())  # and said so


# --- the REPL with its output sent to a file ------------------------------------------------------------------
def test_the_prompt_is_drawn_on_stderr_when_only_stderr_is_a_terminal(monkeypatch):
    import os
    import sys

    from prompt_toolkit.history import InMemoryHistory

    drawn_on = []

    class Prompt:  # records where the REPL draws its prompt; Ctrl-D at once
        def __init__(self, **options):
            drawn_on.append(options["output"])

        def prompt(self, *args, **kwargs):
            raise EOFError

    monkeypatch.setattr(repl, "PromptSession", Prompt)
    master, slave = os.openpty()
    with os.fdopen(slave, "w") as terminal:
        monkeypatch.setattr(sys, "stdout", io.StringIO())  # `minitf > out.txt`
        monkeypatch.setattr(sys, "stderr", terminal)
        out, err = consoles()
        assert repl.run_repl(Session(), out, err, history=InMemoryHistory()) == 0
        assert getattr(drawn_on[0], "stdout", None) is terminal  # the prompt and its toolbar went into out.txt
    os.close(master)


# --- $MINITF_THREADS -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["0", "-3", "abc", "5000"])
def test_minitf_threads_that_is_no_count_is_auto_and_said_so(monkeypatch, value):
    from minitf_repl.core.threads import ThreadPolicy

    monkeypatch.setenv("MINITF_THREADS", value)
    choice = ThreadPolicy(0).decide(sample=0)
    assert choice.how == "auto"  # 0 and -3 fixed one thread, shown as "$MINITF_THREADS=1"
    if value == "0":  # auto, as the setting's 0 is
        assert "MINITF_THREADS" not in choice.why()
    else:  # a word, a negative or a count past the setting's limit was used or dropped without a word
        assert f"$MINITF_THREADS={value}" in choice.why().replace("'", "") and "ignored" in choice.why()


def test_minitf_threads_past_the_cpus_is_said_as_threads_n_is(monkeypatch):
    from minitf_repl.core.threads import ThreadPolicy, available_cpus

    many = available_cpus() + 1
    monkeypatch.setenv("MINITF_THREADS", str(many))
    policy = ThreadPolicy(0)
    assert policy.decide(sample=0).why() == f"$MINITF_THREADS={many}, more than the {available_cpus()} " + (
        "CPU" if available_cpus() == 1 else "CPUs") + " this process may use"
    policy.set(1)  # put torch back at one thread before the next test


# --- every environment variable read is documented ---------------------------------------------------------------
def test_every_environment_variable_minitf_reads_is_in_the_docs_table():
    import re
    from pathlib import Path

    from minitf_repl.core import device, distributed, paths, threads

    root = Path(__file__).resolve().parent.parent
    read = set()
    for source in (root / "minitf_repl").rglob("*.py"):
        read |= set(re.findall(r'environ(?:\.get)?[\[(]"([A-Z_]+)"', source.read_text()))
    read |= {*device.ISA_CAPS, *distributed.TORCHRUN_ENV, paths.CHECKPOINT_ENV, paths.CACHE_ENV, paths.HISTORY_ENV,
             threads.ENV, "XDG_CACHE_HOME", "XDG_STATE_HOME", "XDG_DATA_HOME"}  # the last three: platformdirs
    docs = (root / "docs" / "commands.md").read_text()
    table = docs[docs.index("## Files and environment variables"):]
    table = table[: table.index("\n\n", table.index("| variable |"))]
    missing = sorted(name for name in read if f"`{name}`" not in table)
    assert not missing, missing  # "Every variable it reads" left out the instruction-set caps, the inductor cache...


# --- the one-shot shell's progress sent to a file ------------------------------------------------------------
def test_a_shell_train_whose_progress_goes_to_a_file_logs_a_line_per_evaluation():
    from rich.console import Console

    from minitf_repl import dispatch
    from minitf_repl.commands import REGISTRY
    from test_commands import tiny_session

    out, err, progress = (Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True) for _ in "oep")
    door = dispatch.FrontDoor(tiny_session(), out, err, dispatch.FrontEnd(syntax="shell"), progress=progress)
    assert door.run(REGISTRY.find("train"), {"steps": "6"}) == dispatch.OK
    lines = progress.file.getvalue().splitlines()  # `minitf train > run.log 2>&1`: nothing until the run's end
    history = [row for row in door.session.trainer.history if row["val_loss"] is not None]
    assert [line.split(":")[0] for line in lines] == ["step 3 (run 3/6)", "step 6 (run 6/6)"]
    for line, row in zip(lines, history):
        assert f"train loss {row['train_loss']:.4f}, val loss {row['val_loss']:.4f}" in line
    assert "trained 6 steps" in out.file.getvalue() and "step 3 (run" not in out.file.getvalue()


def test_piped_input_into_files_prints_its_progress_lines_on_stderr_and_the_table_on_stdout():
    from test_commands import tiny_session

    out, err = consoles()  # `minitf < s.txt > log 2> err`: as `minitf train > log 2> err` does
    assert repl.run_lines([":train steps=6"], tiny_session(), out, err) == 0
    assert "(run 3/6)" not in out.file.getvalue() and err.file.getvalue().count("(run 3/6)") == 1
    assert "trained 6 steps" in out.file.getvalue()


# --- $MINITF_CHECKPOINT_DIR ----------------------------------------------------------------------------------
def test_a_relative_minitf_checkpoint_dir_is_named_in_full_as_the_option_is(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "ck")
    assert Session().checkpoint_dir == Session(checkpoint_dir="ck").checkpoint_dir == tmp_path / "ck"


# --- nohup ------------------------------------------------------------------------------------------------------
def test_a_signal_ignored_at_start_stays_ignored_while_a_command_runs():
    import os
    import signal

    from minitf_repl import dispatch
    from minitf_repl.reporter import Reporter

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)  # what `nohup minitf train &` starts with
    try:
        reporter = Reporter()
        with dispatch.stop_on_signals(reporter):
            os.kill(os.getpid(), signal.SIGHUP)  # the terminal closed: the nohup'd run stopped and exited 129
        assert not reporter.stop_requested and reporter.terminate_signal is None
        with repl.leave_on_signals():  # at the REPL's prompt too
            os.kill(os.getpid(), signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        reporter = Reporter()
        with dispatch.stop_on_signals(reporter):  # a signal not ignored still stops the command
            os.kill(os.getpid(), signal.SIGTERM)
        assert reporter.stop_requested and reporter.terminate_signal == signal.SIGTERM
    finally:
        signal.signal(signal.SIGHUP, before)


# --- a background job ------------------------------------------------------------------------------------------
def test_a_background_job_leaves_the_terminals_modes_alone(monkeypatch):
    import os
    import termios

    from minitf_repl import dispatch

    master, slave = os.openpty()
    try:
        with os.fdopen(slave, "r") as terminal:
            monkeypatch.setattr(os, "tcgetpgrp", lambda fd: os.getpgrp() + 1)  # `minitf train &`: not the foreground
            with dispatch.quiet_tty(terminal):  # its tcsetattr stopped the job: "Stopped (tty output)"
                assert termios.tcgetattr(terminal.fileno())[3] & termios.ECHO
            monkeypatch.setattr(os, "tcgetpgrp", lambda fd: os.getpgrp())  # in the foreground: no echo, as before
            with dispatch.quiet_tty(terminal):
                assert not termios.tcgetattr(terminal.fileno())[3] & termios.ECHO
    finally:
        os.close(master)


def test_piped_input_on_a_terminal_shows_a_long_trains_progress():
    from test_commands import tiny_session

    console, written = _pty_console(200)
    err = consoles()[1]
    assert repl.run_lines([":train steps=6"], tiny_session(), console, err) == 0
    text = written()  # `printf ':train\n' | minitf`: nothing on the screen until the run ended
    assert text.index("step 3 (run 3/6): train loss") < text.index("step 6 (run 6/6)") < text.index("trained 6 steps")


def test_the_prompt_is_drawn_on_the_terminal_when_stdout_and_stderr_both_go_to_files(monkeypatch):
    import os
    import sys

    master, slave = os.openpty()
    try:
        monkeypatch.setattr(repl, "TERMINAL", os.ttyname(slave))  # the keyboard's terminal (/dev/tty)
        monkeypatch.setattr(sys, "stdout", io.StringIO())  # `minitf > session.log 2>&1`: the prompt went into the log
        monkeypatch.setattr(sys, "stderr", io.StringIO())
        output = repl.prompt_output()
        assert output.stdout.isatty() and os.path.samefile(output.stdout.name, os.ttyname(slave))
        output.stdout.close()
    finally:
        os.close(master)
        os.close(slave)


# --- what the docs now say piped input does (a guard for the decision written there) -------------------------
def test_piped_input_runs_every_line_skips_comments_goes_on_after_a_failure_and_exits_1():
    out, err = consoles()
    code = repl.run_lines(["# a script\n", "\n", ":nope\n", "  # indented comment\n", ":config\n"], Session(), out, err)
    assert code == 1  # a line failed
    assert err.file.getvalue().count("error:") == 1 and "d_model" in out.file.getvalue()  # the next line ran
    assert ":config" not in out.file.getvalue() and "script" not in out.file.getvalue()  # no echo, no comment


def test_a_shell_compare_whose_progress_goes_to_a_file_logs_each_evaluation():
    from rich.console import Console

    from minitf_repl import dispatch
    from test_commands import tiny_session

    out, err, progress = (Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True) for _ in "oep")
    door = dispatch.FrontDoor(tiny_session(), out, err, dispatch.FrontEnd(syntax="shell"), progress=progress)
    assert door.run_line(":compare lr=0.01 lr=0.003 steps=6") == dispatch.OK, err.file.getvalue()
    lines = progress.file.getvalue().splitlines()  # `minitf compare ... > log 2>&1`: nothing until the end
    assert [line.split(":")[0] for line in lines[-2:]] == ["lr=0.01 step 6", "lr=0.003 step 6"], lines
    assert [line.split(" ")[0] for line in lines] == ["lr=0.01", "lr=0.003"] * (len(lines) // 2)
    assert all("val loss " in line for line in lines)


# --- a failed --load suggests no line with it again ------------------------------------------------------------
def test_a_failed_load_suggests_a_line_without_the_load_that_failed(tmp_path):
    from test_cli import invoke

    result = invoke("--checkpoint-dir", str(tmp_path), "--load", "../x", "config")
    assert result.exit_code == 1
    line = result.stderr.strip()
    assert "not a valid checkpoint name" in line and "--load ../x ls" not in line, line  # it failed the same way
    assert f"minitf --checkpoint-dir {tmp_path} ls" in line


@pytest.mark.parametrize("name", ["MINITF_CHECKPOINT_DIR", "MINITF_CACHE_DIR", "MINITF_HISTORY"])
def test_a_blank_path_variable_is_unset_as_an_empty_one_is(monkeypatch, tmp_path, name):
    from minitf_repl.core import paths

    monkeypatch.chdir(tmp_path)
    where = {"MINITF_CHECKPOINT_DIR": paths.default_checkpoint_dir, "MINITF_CACHE_DIR": paths.cache_dir,
             "MINITF_HISTORY": paths.history_path}[name]
    monkeypatch.setenv(name, "")
    default = where()
    monkeypatch.setenv(name, "  ")  # a folder named by two spaces, in the current one
    assert where() == default


def test_a_blank_minitf_shakespeare_url_downloads_from_the_default(monkeypatch, tmp_path):
    import urllib.error
    import urllib.request

    from minitf_repl.core import data

    asked = []

    def offline(url, timeout=None):
        asked.append(url)
        raise urllib.error.URLError("offline")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setenv("MINITF_SHAKESPEARE_URL", " ")  # was "could not download ... from   (unknown url type: '')"
    with pytest.raises(data.DataError, match="connect to the internet"):
        data.fetch_shakespeare(directory=tmp_path)
    assert asked == [data.SHAKESPEARE_URL]


# --- a command's option with no command after it ---------------------------------------------------------------
def test_a_commands_option_given_without_a_command_says_where_it_goes():
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("--json"), code=2)  # `printf ':config\n' | minitf --json`
    assert "Possible options: --version" not in line, line  # Click offered --version for it
    assert line == "error: --json is an option of every command, so it goes after one: minitf COMMAND --json"
    line = assert_one_error_line(invoke("--raw"), code=2)
    assert line == "error: --raw is an option of gen, so it goes after the command: minitf gen --raw"
