"""End to end: the real program in a pseudo-terminal (pexpect) and with piped standard input.

`python -m minitf_repl` (the same entry point as the `minitf` script) runs with a fresh HOME, XDG
directories and MINITF_HISTORY, so nothing of the user's leaks in or out.
"""

import os
import subprocess
import sys

import pexpect
import pytest

TINY = ["--data", "sort", "--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"]
TINY_LINE = ":set n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"


@pytest.fixture
def env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MINITF_", "NO_COLOR"))}
    env.update(
        HOME=str(tmp_path / "home"),
        XDG_DATA_HOME=str(tmp_path / "data"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        MINITF_HISTORY=str(tmp_path / "history"),
        MINITF_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),  # :train autosaves
        TERM="xterm",
        OMP_NUM_THREADS="1",  # tiny models: one thread is fastest, and many crawl on a busy machine
        PROMPT_TOOLKIT_NO_CPR="1",  # pexpect answers no cursor-position requests
    )
    (tmp_path / "home").mkdir()
    return env


def spawn(env, *args):
    return pexpect.spawn(sys.executable, ["-m", "minitf_repl", *args], env=env, encoding="utf-8",
                         timeout=60, dimensions=(40, 120))


def test_interactive_session_with_ctrl_c_during_train(env, tmp_path):
    child = spawn(env)
    try:
        child.expect_exact("minitf>")  # prompt-toolkit draws the space after it as a cursor move
        child.sendline(":help")
        child.expect_exact(":quit, :q, :exit")
        child.expect_exact("minitf>")
        child.sendline(TINY_LINE)
        child.expect_exact("n_layers: 4 -> 1")
        child.expect_exact("minitf>")
        child.sendline(":data sort")
        child.expect_exact("sort 6 digits")
        child.expect_exact("minitf>")
        child.sendline(":train steps=20000")
        child.expect(r"\d+/20000")  # the live progress bar: steps are running
        child.expect(r"\d+/20000")
        child.sendintr()  # Ctrl-C
        child.expect_exact("stopping after this step...")
        child.expect(r"stopped at step [\d,]+ of 20,000: :train continues")
        child.expect_exact("minitf>")
        child.sendline(":gen n=20")
        child.expect(r"\d+ tokens? in")  # 20, or fewer where a sort answer ends
        child.expect_exact("minitf>")
        child.sendline(":shapes")
        child.expect_exact("attn.hook_scores")  # under the blocks.0 heading
        child.expect_exact("lm_head")
        child.expect_exact("minitf>")
        child.sendline(":quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0, child.before
    assert "Traceback" not in child.before
    history = (tmp_path / "history").read_text()
    assert "+:help" in history and "+:train steps=20000" in history


def test_ctrl_c_at_the_prompt_clears_the_line_and_ctrl_d_exits(env):
    child = spawn(env)
    try:
        child.expect_exact("minitf>")
        child.send(":conf")
        child.sendintr()
        child.sendline(":help")  # a cleared line: this is `:help`, not `:conf:help`
        child.expect_exact("Leave minitf.")
        child.expect_exact("minitf>")  # the prompt after the output: prompt-toolkit is reading again
        child.sendcontrol("d")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 0


def run_piped(env, stdin: bytes, *args):
    return subprocess.run([sys.executable, "-m", "minitf_repl", *TINY, *args], input=stdin, capture_output=True,
                          env=env, timeout=120)


def test_piped_lines_no_escape_codes_exit_0(env):
    # n=6: a sort answer (6 digits after the first '=') cannot end the text sooner, so exactly 6 tokens
    result = run_piped(env, b":train steps=3\n:gen n=6\n")
    assert result.returncode == 0, result.stderr.decode()
    assert b"trained 3 steps" in result.stdout and b"6 tokens in" in result.stderr  # a notice: on stderr
    assert b"\x1b[" not in result.stdout and b"\x1b[" not in result.stderr


def test_piped_bad_command_exit_1_and_the_rest_still_runs(env):
    result = run_piped(env, b":bogus\n\xff\xfe\n:gen n=5\n")
    assert result.returncode == 1
    errors = [line for line in result.stderr.decode().splitlines() if line.startswith("error: ")]
    assert errors[0] == "error: line 1: unknown command :bogus (:help lists commands)"
    assert "UTF-8 (\\xff \\xfe)" in errors[1] and len(errors) == 2
    assert b"5 tokens in" in result.stderr  # the :gen after them ran (its speed line: a notice, on stderr)
    assert b"Traceback" not in result.stderr


def test_a_dumb_terminal_gets_a_plain_prompt_without_cursor_moves(env):
    env["TERM"] = "dumb"  # Emacs' shell: it shows escapes as they are
    child = spawn(env, *TINY)
    try:
        child.expect_exact("minitf> ")
        child.send(":he")  # typing a command name opened a completion menu, drawn with cursor moves
        child.send("\t")
        child.sendline("lp")
        child.expect_exact("minitf> ")
        typed = child.before
        child.sendline(":quit")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert "\x1b[" not in typed, repr(typed)  # was the menu: "\x1b[?7l\x1b[0m\x1b[J ... \x1b[0;7m :help"
