"""Issue "Nothing lost, nothing hangs, part two": start-up and I/O edges, downloads, terminal safety.

Closed standard input, standard output on a full device, a history file that is a FIFO, names
longer than the file system allows, a report whose temporary name is taken, a download that never
ends, and generated text that carries terminal escape sequences. Each ends in one line (or, for
the text, in escapes a person can read) with a documented exit status; each test fails on the
code before the fix.
"""

from __future__ import annotations

import http.server
import io
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli, repl
from minitf_repl.commands import REGISTRY
from minitf_repl.core import data as D
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.dispatch import run_command
from minitf_repl.session import GenConfig, Session

posix_only = pytest.mark.skipif(os.name == "nt", reason="file descriptors, /dev/full and FIFOs are POSIX")
TINY_SET = "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"
LONG = "a" * 300  # one path component longer than NAME_MAX (255)


def env_for(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MINITF_", "NO_COLOR"))}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               MINITF_HISTORY=str(tmp_path / "history"), MINITF_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
               OMP_NUM_THREADS="1")
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def shell(tmp_path: Path, line: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`line` run by a real shell (for redirections such as `<&-` and `> /dev/full`)."""
    python = f"{sys.executable} -m minitf_repl"
    return subprocess.run(["bash", "-c", line.replace("MINITF", python)], capture_output=True, text=True,
                          env=env_for(tmp_path), timeout=timeout, cwd=tmp_path)


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "internal error" not in err and "Traceback" not in err
    return lines[0]


# --- standard input and output -----------------------------------------------------------------------
@posix_only
def test_closed_standard_input_is_one_line(tmp_path):
    done = shell(tmp_path, "MINITF --data sort <&-")
    assert done.returncode == 1
    assert one_error_line(done.stderr).startswith("error: standard input is closed, so there are no commands to read")
    # A one-shot command does not read standard input: it runs.
    done = shell(tmp_path, f"MINITF --data sort --set '{TINY_SET}' gen 12 --n 3 <&-")
    assert done.returncode == 0 and "error" not in done.stderr and done.stdout.startswith("12")


@posix_only
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("line", [
    f"MINITF --data sort --set '{TINY_SET}' gen 12 --n 5",  # streamed text
    f"MINITF --data sort --set '{TINY_SET}' gen 12 --n 5 --json",  # one JSON document
    "MINITF --version",  # printed by the shell itself
    # piped input: said once. Under -m slow (3 s a process): the next test, in the default run, writes a script of
    # the same kind to /dev/full and checks its whole error line, "error: line 1: cannot write the output (...)"
    pytest.param(f"printf ':config\\n:gen 12 n=3\\n' | MINITF --data sort --set '{TINY_SET}'", marks=pytest.mark.slow),
])  # fmt: skip
def test_standard_output_on_a_full_device_is_one_line(tmp_path, line):
    done = shell(tmp_path, line + " > /dev/full")
    assert done.returncode == 1, done.stderr
    where = "line 1: " if line.startswith("printf") else ""  # piped input's error names the line that failed
    assert one_error_line(done.stderr).startswith(f"error: {where}cannot write the output (No space left on device)")


@posix_only
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_piped_input_whose_output_cannot_be_written_runs_no_line_after_it(tmp_path):
    # before: the lines after ran on with nowhere to show what they did (a :train for minutes), their notices on
    # standard error after "the rest of it is lost"
    done = shell(tmp_path, f"printf ':config\\n:save after\\n:gen 12 n=3\\n' | MINITF --data sort --set '{TINY_SET}'"
                           " > /dev/full")
    assert done.returncode == 1 and done.stderr == ("error: line 1: cannot write the output (No space left on device); "
                                                    "the rest of it is lost, and the lines after this one do not run\n")
    assert not (tmp_path / "checkpoints" / "after").exists()


# --- the history file -----------------------------------------------------------------------------------
def _within(fn, timeout: float = 20.0, release=None):
    out = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        if release is not None:
            release()
        thread.join(5)
        pytest.fail(f"{fn} did not return within {timeout:.0f} s")
    return out


@posix_only
def test_a_history_file_that_is_a_fifo_does_not_block_start_up(tmp_path):
    fifo = tmp_path / "history"
    os.mkfifo(fifo)
    warnings = []

    def release():  # a blocked open(fifo, "ab") waits for a reader: give it one, so the test ends
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))

    out = _within(lambda: repl.make_history(fifo, warnings.append), release=release)
    assert "error" not in out, out
    assert type(out["value"]).__name__ == "InMemoryHistory"
    assert warnings == [f"warning: cannot use history file {fifo} (it is a FIFO, not a regular file); "
                        "history is kept in memory for this session; $MINITF_HISTORY=FILE keeps it in another file"]


@posix_only
def test_a_huge_history_file_is_not_read_at_start(tmp_path):
    huge = tmp_path / "history"
    with open(huge, "wb") as f:
        f.truncate(repl.MAX_HISTORY_BYTES + 1)  # sparse: no disk used
    warnings = []
    assert type(repl.make_history(huge, warnings.append)).__name__ == "InMemoryHistory"
    assert warnings == [f"warning: cannot use history file {huge} (it has 16,777,217 bytes, more than the 16,777,216 "
                        "read at start; shorten it); history is kept in memory for this session; "
                        "$MINITF_HISTORY=FILE keeps it in another file"]


# --- names longer than the file system allows -------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["--checkpoint-dir", "LONG", "ls"],
    ["--checkpoint-dir", "LONG", "--load", "x", "config"],
    ["--checkpoint-dir", "LONG", "--data", "sort", "--set", TINY_SET, "train", "--steps", "1"],
    ["--checkpoint-dir", "LONG", "--data", "sort", "--set", TINY_SET, "save", "x"],
    ["--data", "sort", "--set", TINY_SET, "report", "LONG.html"],
])  # fmt: skip
def test_a_300_character_name_is_one_line(tmp_path, args):
    args = [a.replace("LONG", str(tmp_path / LONG)) for a in args]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 1, result.output
    line = one_error_line(result.stderr)
    assert "too long" in line and LONG not in line and len(line) < 400, line  # the name is clipped, not repeated whole


def test_a_report_whose_temporary_name_is_a_folder_is_still_written(tmp_path):
    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                TrainConfig(batch_size=4), data_spec="sort", device_name="cpu", gen_config=GenConfig(n=10))
    (tmp_path / ".r.html.tmp").mkdir()  # where the report used to write its temporary copy
    result = run_command(s, "report", {"path": str(tmp_path / "r.html")})
    assert result.size_bytes > 1000 and (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".r.html.tmp", "r.html"]  # no temporary file left


# --- downloads capped at the expected size -----------------------------------------------------------------
class _Endless:
    """A local server that sends bytes until the client leaves (or `total` of them), counting what it sent."""

    def __init__(self, total: int = 64 * 2**20, length: int | None = None):
        state = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                if length is not None:
                    self.send_header("Content-Length", str(length))
                self.end_headers()
                chunk = b"to be or not to be\n" * 3000
                try:
                    while state.sent < total:
                        self.wfile.write(chunk)
                        state.sent += len(chunk)
                except OSError:
                    pass  # the client stopped reading

            def log_message(self, *args):
                pass

        self.sent = 0
        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/input.txt"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("length", [None, 10**12])
def test_a_download_is_capped_at_the_expected_size(tmp_path, monkeypatch, length):
    server = _Endless(length=length)
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MINITF_SHAKESPEARE_URL", server.url)
    try:
        with pytest.raises(DataError) as e:
            D.load_data("shakespeare")
    finally:
        server.close()
    cap = D.SHAKESPEARE_BYTES + D.DOWNLOAD_MARGIN
    what = f"announces {length:,} bytes" if length else f"sent more than {cap:,} bytes"
    assert str(e.value) == (f"the download from {server.url} {what}, but tiny Shakespeare is 1,115,394 bytes (at most "
                            f"{cap:,} are read); it was stopped. Check the URL (MINITF_SHAKESPEARE_URL), or use a local "
                            "file by path")
    assert server.sent < 16 * 2**20  # the client stopped reading (socket buffers aside), not at 64 MiB
    assert not list(tmp_path.iterdir())


# --- generated text never drives the terminal ------------------------------------------------------------
ESCAPES = "ab\x1b[31mc\x1b]0;t\x07 \u202e\n"  # colour, a window title, a bell, a bidi override


def escape_session(tmp_path: Path) -> Session:
    text = tmp_path / "escapes.txt"
    text.write_text(ESCAPES * 300)
    return Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                   TrainConfig(batch_size=4), data_spec=str(text), device_name="cpu", gen_config=GenConfig(n=300, gen_seed=1))


def run_on(session, lines, terminal: bool, colour: bool = False) -> tuple[str, str]:
    out = Console(file=io.StringIO(), width=100, color_system="truecolor" if colour else None, force_terminal=terminal)
    err = Console(file=io.StringIO(), width=100, color_system=None)
    assert repl.run_lines(lines, session, out, err) == 0, err.file.getvalue()
    if colour:  # Rich's own colour sequences removed: any ESC left is the model's
        return re.sub("\x1b\\[[0-9;]*m", "", out.file.getvalue()), err.file.getvalue()
    return out.file.getvalue(), err.file.getvalue()


@pytest.mark.parametrize("line", [":gen a", ":gen a show=probs", ":ablate mask"])
def test_control_characters_in_generated_text_are_shown_escaped(tmp_path, line):
    out, _ = run_on(escape_session(tmp_path), [line], terminal=True, colour=True)
    assert "\\x1b" in out  # in the prompt or generated, and shown as an escape
    assert not any(ch in out for ch in "\x1b\x07\u202e"), repr(out)


def test_raw_writes_them_only_where_the_output_is_not_a_terminal(tmp_path):
    s = escape_session(tmp_path)
    out, err = run_on(s, [":gen a raw=on"], terminal=False)
    assert "\x1b" in out and "\x07" in out and "\\x1b" not in out  # piped to a file: the exact characters
    out, err = run_on(s, [":gen a raw=on"], terminal=True)
    assert "\x1b" not in out and "\\x1b" in out
    assert "raw=on writes control characters as they are only to a file or a pipe" in out + err
    out, _ = run_on(s, [":gen a"], terminal=False)
    assert "\x1b" not in out  # without raw=on, escaped in a file too


def test_the_shell_escapes_by_default_and_raw_writes_the_characters(tmp_path):
    s = str(tmp_path / "escapes.txt")
    (tmp_path / "escapes.txt").write_text(ESCAPES * 300)
    base = ["--data", s, "--set", TINY_SET, "--set", "gen_seed=1", "gen", "a", "--n", "200"]
    escaped = CliRunner().invoke(cli.app, base)
    raw = CliRunner().invoke(cli.app, base + ["--raw"])
    assert escaped.exit_code == raw.exit_code == 0
    assert "\x1b" not in escaped.stdout and "\\x1b" in escaped.stdout and "\x1b" in raw.stdout
    doc = json.loads(CliRunner().invoke(cli.app, base + ["--json"]).stdout)
    assert "\x1b" in doc["text"]  # JSON carries the text exactly (JSON escapes it)
