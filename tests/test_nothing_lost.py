"""Issue "Nothing lost, nothing hangs": what a new user and a hostile tester still broke.

Each test here failed before its fix. The checkpoint-reading failures (FIFO, /dev/zero, sparse
files, invalid RNG state) are in tests/test_checkpoint_safety.py; a checkpoint whose data file is
gone is in tests/test_checkpoint_commands.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console
from typer.testing import CliRunner

import safetensors.torch

from minitf_repl import cli, repl
from minitf_repl.commands import REGISTRY, GenResult, LsResult
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.checkpoint import CheckpointInfo
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import run_command
from minitf_repl.parsing import MAX_LINE, parse_line
from minitf_repl.render import render
from minitf_repl.reporter import Reporter
from minitf_repl.session import Session

_spec = importlib.util.spec_from_file_location("checkpoint_worker", Path(__file__).with_name("checkpoint_worker.py"))
worker = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)  # its helpers forge consistent checkpoints

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)
SHELL_TINY = ["--data", "sort", "--set", "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"]


def tiny_session(**train) -> Session:
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2, **train}
    return Session(ModelConfig(**TINY), TrainConfig(**train), data_spec="sort:4", device_name="cpu")


def run(session, line, reporter=None):
    command, args = parse_line(line, REGISTRY)
    return run_command(session, command.name, args, reporter)


class Notes(Reporter):
    def __init__(self):
        super().__init__()
        self.notices = []

    def notice(self, text):
        self.notices.append(text)


def text_of(result, width=80) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, console)
    return console.file.getvalue()


def weights(s: Session) -> dict:
    return {k: v.clone() for k, v in s.model.state_dict().items()}


# --- failures ---------------------------------------------------------------------------------------------
def test_out_of_memory_during_train_rolls_back_like_a_divergence(monkeypatch):
    s = tiny_session()
    run(s, ":train steps=3")
    before, step, history = weights(s), s.trainer.step, list(s.trainer.history)
    embedding = s.model.token_embedding  # the first thing either training path (readable, fast) computes
    real_forward = embedding.forward
    calls = {"n": 0}
    lr = s.train_config.lr

    def forward(idx):
        if s.model.training:
            calls["n"] += 1
            if calls["n"] == 3:  # two steps apply, the third runs out of memory
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_forward(idx)

    monkeypatch.setattr(embedding, "forward", forward)
    with pytest.raises(UserError, match="out of memory at step 6; the model, optimizer, run and settings are back"):
        run(s, f":train steps=10 lr={2 * lr}")
    assert s.trainer.step == step and s.trainer.history == history and s.train_config.lr == lr
    assert all(torch.equal(v, before[k]) for k, v in s.model.state_dict().items())


def test_gen_says_when_the_prompt_is_longer_than_the_context():
    s = tiny_session()
    notes = Notes()
    # 50 characters, max_seq_len 32; no '=' in them, so the question goes on (a whole answer would end it)
    result = run(s, ":gen " + "12345" * 10 + " n=2", notes)
    assert result.n_tokens == 2
    assert notes.notices == ["the prompt is 50 characters, longer than max_seq_len=32: the model sees only its last 32"]


def drive(text: str, session=None):
    session = session or tiny_session()
    out = Console(file=io.StringIO(), width=100, color_system=None)
    err = Console(file=io.StringIO(), width=100, color_system=None)
    captured = io.StringIO()
    with create_pipe_input() as inp:
        inp.send_text(text + "\x04")
        import contextlib

        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            code = repl.run_repl(session, out, err, input=inp, output=DummyOutput(), history=InMemoryHistory())
    return code, out.file.getvalue(), err.file.getvalue() + captured.getvalue()


def test_an_escape_sequence_typed_at_the_prompt_becomes_text():
    code, out, err = drive("\x1b[31m\r:q\r")
    assert "Unhandled exception" not in err and "Press ENTER" not in err
    assert "not in the vocabulary: '[' 'm'" in err  # the line reached the shell as the text typed


def test_a_line_has_a_length_limit():
    with pytest.raises(UserError, match=f"more than the {MAX_LINE:,} a line may have"):
        parse_line("1" * (MAX_LINE + 1), REGISTRY)
    code = repl.run_lines(["x" * 10_000_000 + "\n", ":config\n"], tiny_session(),
                          Console(file=io.StringIO(), width=80), err := Console(file=io.StringIO(), width=80))
    assert code == 1 and len(err.file.getvalue()) < 300  # refused in one short line, not echoed back


# --- friction ---------------------------------------------------------------------------------------------
def test_set_that_rebuilds_keeps_a_trained_model_as_a_checkpoint(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    trained = weights(s)
    result = run(s, ":set n_heads=1")
    assert result.rebuilt and result.kept and result.kept.startswith("kept-")
    assert s.trainer.step == 0
    assert "the trained model was kept as checkpoint kept-" in text_of(result, 200)
    run(s, f":load {result.kept}")
    assert s.trainer.step == 3 and all(torch.equal(v, trained[k]) for k, v in s.model.state_dict().items())
    assert run(s, ":set dropout=0.1").kept is None  # in place: nothing to keep
    assert run(s, ":set n_layers=2 autosave=off").kept is None  # autosave off: the user chose not to keep


def test_data_switch_that_rebuilds_keeps_a_trained_model(checkpoint_dir, tmp_path):
    s = tiny_session()
    run(s, ":train steps=2")
    text = tmp_path / "t.txt"
    text.write_text("hello there, general kenobi\n" * 40)
    result = run(s, f":data {text}")
    assert result.rebuilt and result.kept is not None
    assert ckpt.load_checkpoint(checkpoint_dir, result.kept).data_spec == "sort:4"


def test_autosaves_keep_the_last_runs(checkpoint_dir):
    s = tiny_session()
    for steps in (1, 2, 3, 4, 5):
        run(s, f":train steps={steps} schedule=new")
    names = {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert names == {"autosave": 15, "autosave-1": 10, "autosave-2": 6, "autosave-3": 3}
    stopped = tiny_session()
    # A stopped run that :train continues is one run: its autosave is replaced, not rotated.
    class StopAt2(Reporter):
        def on_step(self, info):
            self.stop_requested = info.run_step >= 2 and not self.done
            self.done = getattr(self, "done", False) or self.stop_requested

    run(stopped, ":train steps=4", StopAt2())
    run(stopped, ":train")
    names = {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert names["autosave"] == 4 and names["autosave-1"] == 15


def test_training_a_trained_model_continues_at_its_final_rate():
    s = tiny_session()
    first = run(s, ":train steps=6")
    final = s.trainer.history[-1]["lr"]
    assert first.schedule == "new"
    more = run(s, ":train steps=4")
    assert more.schedule == "continue" and more.constant_lr == final
    assert [h["lr"] for h in s.trainer.history[-4:]] == [final] * 4  # no warm-up back to the peak
    fresh = run(s, ":train steps=4 schedule=new")
    assert fresh.schedule == "new" and s.trainer.history[-4]["lr"] < s.trainer.history[-3]["lr"]  # warming up
    assert run(s, ":train steps=2 lr=0.001").schedule == "new"  # an explicit peak rate means a new schedule
    with pytest.raises(UserError, match="schedule=continue needs a model that has trained"):
        run(tiny_session(), ":train schedule=continue")


def test_the_continuing_rate_survives_a_checkpoint(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=6")
    final = s.trainer.history[-1]["lr"]
    run(s, ":train steps=4 save=c")  # a continuing run, saved
    other = tiny_session()
    run(other, ":load c")
    assert other.trainer.run_constant_lr == final


def test_exit_quit_and_help_without_the_colon():
    for word in ("exit", "quit", "  Exit ", "quit()"):
        assert parse_line(word, REGISTRY)[0].name == "quit"
    assert parse_line("help", REGISTRY)[0].name == "help"
    assert parse_line("exit the building", REGISTRY)[0].name == "gen"  # longer text is still a prompt
    assert parse_line(":gen exit", REGISTRY)[1] == {"prompt": "exit"}
    code, out, err = drive("help\rexit\r:config\r")
    assert code == 0 and "Leave minitf." in out and "d_model" not in out  # help listed; exit left


def test_version_flag_help_without_bool_and_a_short_n():
    runner = CliRunner()
    result = runner.invoke(cli.app, ["--version"])
    assert result.exit_code == 0 and result.stdout.strip().startswith("minitf 0.")
    for command in ("gen", "train", "shapes"):
        assert "<bool>" not in runner.invoke(cli.app, [command, "--help"], env={"COLUMNS": "120"}).stdout
    result = runner.invoke(cli.app, [*SHELL_TINY, "gen", "12", "-n", "3", "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["n_tokens"] == 3
    assert parse_line(":gen 12 -n 3", REGISTRY)[1] == {"prompt": "12", "n": 3}


def test_whitespace_only_output_and_the_default_prompt_are_visible():
    result = GenResult(prompt="\n", text="   \n  ", n_tokens=6, seconds=0.1, tokens_per_second=60.0, cache=True,
                       stopped=False, default_prompt=True, untrained=True)
    out = text_of(result)
    assert "no prompt given: started from '↵'" in out
    assert "only whitespace was generated (5 spaces, 1 newline): ␣␣␣↵␣␣" in out  # "1 newlines" was the bug
    assert "this model has not trained yet, so its text is random" in out


def test_ls_at_80_columns_never_breaks_a_name():
    long = "a-rather-long-checkpoint-name-for-the-listing"
    rows = [CheckpointInfo(long, 300, 0.125, "sort", 150_000, "2026-01-02T03:04:05Z"),
            CheckpointInfo("broken", None, None, None, 10, None, error="checkpoint.json is not valid JSON " * 3)]
    out = text_of(LsResult(rows, "/ck"), width=80)
    assert long in out.splitlines()  # whole, on its own line
    assert max(len(line) for line in out.splitlines()) <= 80  # the reason too: it wraps at spaces
    reason = out[out.index("broken: "):]  # one message of its own, after the listing
    assert " ".join(reason.split()).startswith("broken: " + " ".join(("checkpoint.json is not valid JSON " * 3).split()))


def test_one_name_per_thing_for_the_seeds():
    s = tiny_session()
    config = run(s, ":config")
    assert "gen_seed" in config.gen and "seed" not in config.gen and "seed" in config.train
    run(s, ":set seed=5")
    assert s.train_config.seed == 5 and s.gen_config.gen_seed is None
    run(s, ":set gen_seed=7")
    assert s.gen_config.gen_seed == 7 and s.train_config.seed == 5


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process's CPU time from /proc")
def test_a_one_shot_train_stopped_by_sigint_exits_130(tmp_path):
    env = {**os.environ, "MINITF_CHECKPOINT_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "minitf_repl", *SHELL_TINY, "train", "--steps", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        # Wait until it has worked well past importing torch (about 2 CPU seconds): it is training.
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and _cpu_seconds(proc.pid) < 6:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "stopped at step" in out and "Traceback" not in err


def test_a_checkpoint_target_that_cannot_be_written_fails_before_training(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    start = time.perf_counter()
    result = CliRunner().invoke(cli.app, ["--checkpoint-dir", str(afile / "sub"), *SHELL_TINY, "train", "--steps",
                                          "100000", "--save", "q"])
    assert result.exit_code == 1 and "afile" in result.stderr and "not a directory" in result.stderr
    assert time.perf_counter() - start < 30  # no training happened


def test_an_invalid_rng_state_loads_in_one_line_from_the_shell(tmp_path):
    """--load of a checkpoint whose RNG state is scrambled: one line, no traceback, exit 1."""
    result = CliRunner().invoke(cli.app, ["--checkpoint-dir", str(tmp_path), *SHELL_TINY, "train", "--steps", "1",
                                          "--save", "r"])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "r"
    state_file = folder / worker.manifest_of(folder)["files"]["state"]["file"]
    tensors = safetensors.torch.load(state_file.read_bytes())
    tensors["rng.torch"] = torch.zeros_like(tensors["rng.torch"])  # right size, not an mt19937 state
    data = safetensors.torch.save(tensors, metadata={"format": "pt"})
    state_file.write_bytes(data)
    worker.rewrite_manifest(folder, lambda m: m["files"]["state"].update(
        size=len(data), sha256=hashlib.sha256(data).hexdigest()))  # a consistent, signed forgery
    result = CliRunner().invoke(cli.app, ["--checkpoint-dir", str(tmp_path), "--load", "r", "config"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --load:"), result.stderr
