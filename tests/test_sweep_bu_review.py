"""Sweep bu, the reviewer's findings on the session's compile and ARM changes. Each test failed before its fix.

- run_compiled took any error of its first try (the step run under torch's "fail_on_recompile" stance) for torch
  asking to compile: an out-of-memory step or a bad index said "compiling the model again", ran a second time and
  was timed as a compile.
- A Ctrl-C held back during a compiled step and heard as the block ended (a script's default handler) threw away a
  compile that had ended, and the next compile said the last one "was stopped before it ended".
- cpu_kind, the CPU's line in :train's JSON and every benchmark's header, called an ARM CPU with BF16 instructions
  "no native bfloat16" where :device names the instructions.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from minitf_repl.core import device, precision
from minitf_repl.core import train as core_train

from test_commands import Recorder, run, tiny_session


def test_an_error_that_is_no_recompile_raises_at_once_and_says_no_compile():
    calls, said = [], []

    def step():
        calls.append(1)
        raise IndexError("index out of range in self")

    with pytest.raises(IndexError):
        precision.run_compiled(step, lambda: said.append("compiling"))
    assert calls == [1] and said == []  # was: two calls, and "compiling the model again" said between them


def test_torchs_recompile_error_is_still_heard_as_a_compile():
    calls, said = [], []

    def step():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("Detected recompile when torch.compile stance is 'fail_on_recompile'. filename: 'x'")
        return "done"

    assert precision.run_compiled(step, lambda: said.append("compiling")) == ("done", True)
    assert calls == [1, 1] and said == ["compiling"]


def test_a_ctrl_c_heard_as_a_compiled_step_ends_keeps_its_compile(monkeypatch):
    """The held-back SIGINT of compilers_deaf_to_ctrl_c is delivered as its block ends: after the compile and the
    backward. Stood in for by a block that raises KeyboardInterrupt as it ends."""
    forgotten = []
    monkeypatch.setattr(core_train, "forget_compiled", lambda: forgotten.append(1), raising=False)

    @contextlib.contextmanager
    def ctrl_c_at_the_end():
        yield
        raise KeyboardInterrupt

    made = []

    def compile_module(module):
        def wrapper(*args, **kwargs):  # not torch's: its first step is taken to compile (precision.tells_compiles)
            return module(*args, **kwargs)

        made.append(wrapper)
        return wrapper, None

    monkeypatch.setattr(core_train, "compile_module", compile_module)
    monkeypatch.setattr(core_train, "compilers_deaf_to_ctrl_c", ctrl_c_at_the_end)
    s = tiny_session()
    run(s, ":set compile=on autosave=off")
    trainer = s.trainer
    trainer.start_run(steps=1)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    assert made and forgotten == []  # was: [1], the whole compile dropped
    assert trainer._compile_again is None  # was: "as the last compile was stopped before it ended"


def test_an_arm_cpu_with_bf16_instructions_is_named_so_in_its_kind(monkeypatch):
    monkeypatch.setattr(device.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(device, "cpu_bf16_instructions", lambda: "ARM BF16")
    monkeypatch.setattr(device, "cpu_has_bf16_units", lambda: False)
    kind = device.cpu_kind()
    assert "no native bfloat16" not in kind and "ARM BF16 instructions" in kind and "float32" in kind, kind
