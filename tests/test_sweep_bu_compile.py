"""Sweep bu, a tester's findings on compile=on. Each test failed before its fix.

A Ctrl-C while compiling reached g++ too (the terminal signals its whole foreground group): the compile failed as
"CppCompileError: C++ compile error", compile was switched off, and every later compile of the process failed at once
(inductor kept the killed build in memory), after `:set compile=off` and `on` too, with a recompile said to be for
"the path a step runs through". torch's own recompiles (a batch size, dropout, the dtype changed between runs) ran
unsaid, up to 56 s under a bar at 0/5, and were counted as the run's speed; after :load a compile that did not happen
was said. The missing compiler's line gave no fix, an unwritable TORCHINDUCTOR_CACHE_DIR went unnamed, and the seed's
help left out that compile=on draws other dropout masks.

Most tests stand a wrapper in for torch.compile (no compile, milliseconds); the one through torch's own dynamo is slow.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import threading

import pytest
import torch

from minitf_repl.commands.train import train_summary
from minitf_repl.core import precision
from minitf_repl.core import train as core_train
from minitf_repl.core.config import TrainConfig

from test_cli import invoke
from test_commands import Recorder, run, tiny_session


class Stoppable(Recorder):
    """A reporter whose stop a test asks for (a Ctrl-C's flag: stop_requested)."""

    def __init__(self):
        super().__init__()
        self.stop_requested = False

    def should_stop(self):
        return self.stop_requested


def compiling(notices) -> list[str]:
    return [n for n in notices if n.startswith("compiling the model")]


@pytest.fixture
def forgotten(monkeypatch):
    """Counts the times the trainer forgets torch's compiles (precision.forget_compiled), not run: the tests' wrappers
    compile nothing, and a reset of dynamo would make the rest of the test run compile again."""
    calls = []
    monkeypatch.setattr(core_train, "forget_compiled", lambda: calls.append(1), raising=False)
    return calls


def failing_once(monkeypatch, hooks: Stoppable | None = None, error="InductorError: CppCompileError: C++ compile "
                 "error"):
    """compile_module's stand-in: its first wrapper's first call fails as a compile killed half-way would (asking the
    reporter's stop first, as the terminal's Ctrl-C does where it reaches the compiler); later wrappers run the module.
    Returns the list of wrappers made."""
    made = []

    def compile_module(module):
        first = not made

        def wrapper(*args, **kwargs):
            if first and not made[0][1]:
                made[0][1] = True
                if hooks is not None:
                    hooks.stop_requested = True
                raise RuntimeError(error)
            return module(*args, **kwargs)

        made.append([wrapper, False])
        return wrapper, None

    monkeypatch.setattr(core_train, "compile_module", compile_module)
    return made


# --- 1. Ctrl-C while compiling ---------------------------------------------------------------------------------------
def test_a_compile_that_failed_while_a_stop_was_asked_stops_the_run_and_compiles_again_next(monkeypatch, forgotten):
    s = tiny_session()
    run(s, ":set compile=on autosave=off")
    hooks = Stoppable()
    made = failing_once(monkeypatch, hooks)
    result = run(s, ":train steps=4", hooks)
    # stopped before the step (it was not done), the compiler not blamed, compile still on
    assert result.stopped and result.steps == 0 and s.trainer.step == 0
    assert result.compile_failed is None and s.trainer.compile_failed is None
    assert precision.COMPILE_STOPPED in hooks.notices
    assert not any(n.startswith("torch.compile failed") for n in hooks.notices), hooks.notices
    assert "not compiled" not in train_summary(result)
    assert forgotten == [1]  # dynamo's memory of the failed compile is dropped: the next one traces afresh
    again = Recorder()
    result = run(s, ":train steps=2", again)
    assert result.compiled and result.steps == 2 and len(made) == 2
    assert compiling(again.notices) == [precision.compiling_line("auto", "cpu", precision.AFTER_STOP)]
    assert "as the last compile was stopped before it ended" in compiling(again.notices)[0]


def test_a_compile_that_failed_is_forgotten_and_switched_on_again_it_says_it_tries_once_more(monkeypatch, forgotten):
    s = tiny_session()
    run(s, ":set compile=on autosave=off")
    made = failing_once(monkeypatch)
    failed = Recorder()
    result = run(s, ":train steps=2", failed)
    assert not result.compiled and s.trainer.compile_failed and forgotten == [1]
    run(s, ":set compile=off")
    run(s, ":set compile=on")
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    assert result.compiled and len(made) == 2
    # it said "as the path a step runs through changed since it was compiled", which nothing had
    said = compiling(hooks.notices)
    assert said == [precision.compiling_line("auto", "cpu", precision.AFTER_FAILURE)], said
    assert "path" not in said[0]


def test_forgetting_the_compiles_resets_torchs_compiler(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.compiler, "reset", lambda: calls.append("reset"))
    precision.forget_compiled()
    assert calls == ["reset"]


def test_a_compiled_step_holds_ctrl_c_back_from_the_compilers_it_starts(monkeypatch):
    """The terminal's SIGINT reached g++ and cc1plus, children of the process, which died of it. A signal mask blocked
    in the thread that starts them is inherited (fork and execve keep it): held back during a compiled step."""
    masks = []

    def compile_module(module):
        def wrapper(*args, **kwargs):
            masks.append(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
            return module(*args, **kwargs)

        return wrapper, None

    monkeypatch.setattr(core_train, "compile_module", compile_module)
    s = tiny_session()
    run(s, ":set compile=on autosave=off")
    run(s, ":train steps=2")
    assert masks == [True, True]
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # put back after each step


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads a child's signal mask from /proc")
def test_a_child_started_while_compiling_inherits_ctrl_c_blocked_and_the_held_signal_comes_after():
    heard = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: heard.append(signum))
    try:
        with precision.compilers_deaf_to_ctrl_c():
            status = subprocess.run([sys.executable, "-c", "print(open('/proc/self/status').read())"],
                                    capture_output=True, text=True, check=True).stdout
            # a Ctrl-C during the compile, sent to this thread alone (the terminal's goes to the process, which any
            # thread without the block may take at once; this one has no other to go to): held back
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)
            assert heard == []
        assert heard == [signal.SIGINT]  # heard as the step ends at the latest: its stop comes after it, as any step's
    finally:
        signal.signal(signal.SIGINT, previous)
    blocked = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
    assert blocked & (1 << (signal.SIGINT - 1))


# --- 2 and 3. torch's own recompiles said and timed apart; a reuse not said ------------------------------------------
class StandIn(torch.nn.Module):
    """torch.compile's stand-in (it holds the module as _orig_mod, as torch's wrapper does) that compiles as torch does:
    at a batch shape it has not seen in this process (torch's code cache outlives a wrapper: after :load a new one
    reused it), and under the stance "fail_on_recompile" raises there instead, with torch's words."""

    seen: set = set()
    probing = False

    def __init__(self, module):
        super().__init__()
        self._orig_mod = module

    def forward(self, x, *args, **kwargs):
        if tuple(x.shape) not in StandIn.seen:
            if StandIn.probing:
                raise RuntimeError("Detected recompile when torch.compile stance is 'fail_on_recompile'.")
            StandIn.seen.add(tuple(x.shape))
        return self._orig_mod(x, *args, **kwargs)


@pytest.fixture
def stand_in(monkeypatch):
    """compile=on through StandIn, and torch.compiler.set_stance's stance where StandIn reads it."""
    @contextlib.contextmanager
    def set_stance(stance="default", **kwargs):
        was, StandIn.probing = StandIn.probing, stance == "fail_on_recompile"
        try:
            yield
        finally:
            StandIn.probing = was

    StandIn.seen = set()
    monkeypatch.setattr(torch.compiler, "set_stance", set_stance)
    monkeypatch.setattr(core_train, "compile_module", lambda module: (StandIn(module), None))


def test_a_recompile_of_torchs_own_is_said_with_its_cause_and_timed_apart(stand_in):
    s = tiny_session()
    run(s, ":set compile=on autosave=off")
    first = Recorder()
    result = run(s, ":train steps=2", first)
    assert compiling(first.notices) == [precision.compiling_line("auto", "cpu")]
    assert result.compile_seconds is not None
    run(s, ":set batch_size=8")
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    # was: nothing said, compile_seconds None, and the recompile's seconds counted in tokens/s
    assert compiling(hooks.notices) == [precision.compiling_line("auto", "cpu", "as the batch size (4 -> 8) changed "
                                        "since the last compiled step, and torch specialises the compiled code on it")]
    assert result.compile_seconds is not None and "compiled in" in train_summary(result)
    assert [row["compile_seconds"] is not None for row in s.trainer.history[-2:]] == [True, False]
    steady = Recorder()
    result = run(s, ":train steps=2", steady)  # the same shapes: nothing compiles, nothing is said
    assert compiling(steady.notices) == [] and result.compile_seconds is None and result.compiled


def test_after_load_a_reused_compile_is_not_said_nor_timed_as_one(stand_in, tmp_path):
    s = tiny_session()
    run(s, f":set compile=on autosave=off checkpoint_dir={tmp_path}")
    run(s, ":train steps=2")
    run(s, ":save c1")
    run(s, ":load c1")
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    # was: "compiling the model (compile=on): the first step takes seconds to minutes", then "compiled in 0.0 s"
    assert compiling(hooks.notices) == [], hooks.notices
    assert result.compiled and result.compile_seconds is None
    assert "compiled in" not in train_summary(result) and "compiled" in train_summary(result)


@pytest.mark.slow  # through torch's dynamo (its eager backend: no C++ build), about 3 s on a 2-core CPU
def test_dynamo_itself_tells_a_recompile_after_a_batch_size_and_no_compile_after_load(monkeypatch, tmp_path):
    torch.compiler.reset()  # nothing compiled by another test: this one's first step compiles
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="eager"))
    s = tiny_session(eval_every=2, eval_batches=1)
    run(s, f":set compile=on autosave=off checkpoint_dir={tmp_path}")
    first = Recorder()
    assert run(s, ":train steps=2", first).compile_seconds is not None
    assert compiling(first.notices) == [precision.compiling_line("auto", "cpu")]
    run(s, ":set batch_size=8")
    hooks = Recorder()
    result = run(s, ":train steps=2", hooks)
    assert result.compile_seconds is not None
    assert compiling(hooks.notices)[0].startswith("compiling the model again, as the batch size (4 -> 8) changed")
    run(s, ":save c1")
    run(s, ":load c1")
    loaded = Recorder()
    result = run(s, ":train steps=2", loaded)
    assert result.compiled and result.compile_seconds is None and compiling(loaded.notices) == []


# --- 4. wording -------------------------------------------------------------------------------------------------------
def test_no_compiler_says_how_to_get_one_or_to_switch_compile_off(monkeypatch):
    monkeypatch.setattr(precision.shutil, "which", lambda name: None)
    model = torch.nn.Linear(2, 2)
    assert precision.compile_module(model) == (None, "torch.compile needs a C++ compiler (c++, g++ or clang++) and "
                                               "none was found; install one (e.g. g++), or set compile=off; training "
                                               "eagerly")
    monkeypatch.setattr(precision.sys, "platform", "win32")
    monkeypatch.delenv("CXX", raising=False)
    assert "start minitf in that prompt, or set compile=off; training eagerly" in precision.compile_module(model)[1]


def test_a_cache_folder_it_cannot_write_is_named_by_its_variable(monkeypatch, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(afile / "sub"))
    error = NotADirectoryError(20, "Not a directory", str(afile / "sub"))
    line = precision.compile_failure_line(error)
    assert line.startswith(f"torch.compile failed here (NotADirectoryError: [Errno 20] Not a directory: "
                           f"'{afile / 'sub'}'): it keeps its compiled kernels in TORCHINDUCTOR_CACHE_DIR=")
    assert "start minitf again with that variable set to a folder you can write" in line
    assert line.endswith("; training eagerly")
    wrapped = RuntimeError("InductorError: a wrapper")  # torch may wrap it: the cause is read
    wrapped.__cause__ = FileExistsError(17, "File exists", str(afile))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(afile))
    assert f"TORCHINDUCTOR_CACHE_DIR={afile}" in precision.compile_failure_line(wrapped)
    # an error on a path elsewhere is no cache folder's
    other = PermissionError(13, "Permission denied", str(tmp_path / "elsewhere"))
    assert "TORCHINDUCTOR_CACHE_DIR" not in precision.compile_failure_line(other)


def test_the_seed_help_says_compile_draws_other_dropout_masks():
    assert "compile with dropout above 0" in TrainConfig.spec("seed").help
    shown = " ".join(invoke("train", "--help").output.replace("│", " ").split())  # the option table's frame out
    assert "runs with dropout above 0 compiled or not: compile=on draws other dropout masks than compile=off" in shown
