"""What a user's-eye sweep of Ctrl-C in every command found: each test failed before its fix.

`:heads` on a 6 x 256 model (two seconds of switching each head off in turn), `:quantize int8` (three seconds of
timing and evaluating both models), `:grad` (two seconds) and `:patch` (0.8 s on 8 x 512, more on a longer prompt)
polled no stop flag and were not interruptible: Ctrl-C went unheard, the whole result came after it as if nothing
had been pressed, and a Ctrl-C that did land inside `:quantize` left `:gen` sampling from an int8 copy that had
never been measured. A Ctrl-C that cut a lazy import in two (torch imports sympy in the first :grad) broke that
command for the rest of the session ("internal error: AttributeError: module 'sympy' has no attribute 'core'").
"""

import os
import signal
import sys
import time

import pytest
import torch

from minitf_repl import dispatch
from minitf_repl.commands import REGISTRY
from test_commands import Recorder, run, tiny_session


def cut(*args, **kwargs):
    raise KeyboardInterrupt


def logits_of(session) -> torch.Tensor:
    model = session.model
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(torch.arange(8).view(1, 8) % session.model_config.vocab_size)[0].clone()
    finally:
        model.train(was)


# --- :heads --------------------------------------------------------------------------------------------------
def test_heads_stops_at_ctrl_c_and_leaves_the_model_and_its_ablations_as_they_were(monkeypatch):
    assert REGISTRY["heads"].interruptible  # it polls no stop flag: Ctrl-C went unheard for the whole head sweep
    from minitf_repl.core import heads

    s = tiny_session()
    run(s, ":ablate head=0.1")
    before = logits_of(s)
    calls = []

    def cut_on_second(*args, **kwargs):  # Ctrl-C while the second head is switched off
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return 0.0

    monkeypatch.setattr(heads, "repeat_loss", cut_on_second)
    with pytest.raises(KeyboardInterrupt):
        run(s, ":heads")
    assert [str(a) for a in s.ablations] == ["head 0.1"]
    assert torch.equal(logits_of(s), before)  # the head switched off for the sweep is back on


# --- :quantize -----------------------------------------------------------------------------------------------
def test_quantize_stops_at_ctrl_c_and_switches_nothing(monkeypatch):
    assert REGISTRY["quantize"].interruptible  # it polls no stop flag: three seconds of Ctrl-C unheard
    from minitf_repl.core import quantize

    s = tiny_session()
    run(s, ":ablate head=0.1")
    before = logits_of(s)
    monkeypatch.setattr(quantize, "measure", cut)  # Ctrl-C while both models are timed and evaluated
    with pytest.raises(KeyboardInterrupt):
        run(s, ":quantize int8")
    assert not s.sampling_copy  # was: :gen sampled from the int8 copy the interrupted command never reported
    assert s.sampling_model is s.model
    assert [str(a) for a in s.ablations] == ["head 0.1"]
    assert torch.equal(logits_of(s), before)


def test_quantize_cut_short_keeps_the_int8_copy_that_was_on_before(monkeypatch):
    from minitf_repl.core import quantize

    s = tiny_session()
    run(s, ":quantize int8")
    copy = s.sampling_model
    assert copy is not s.model
    monkeypatch.setattr(quantize, "measure", cut)
    with pytest.raises(KeyboardInterrupt):
        run(s, ":quantize int8")
    assert s.sampling_model is copy


# --- :grad ---------------------------------------------------------------------------------------------------
@pytest.fixture
def sigint_default():
    """Python's own SIGINT handler for the test (a test process started in the background inherits it ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_grad_stops_at_ctrl_c_and_a_ctrl_c_as_its_trial_step_is_undone_waits_for_the_end(sigint_default, monkeypatch):
    assert REGISTRY["grad"].interruptible  # it polled no stop flag: two seconds unheard, the whole page after it
    s = tiny_session()
    run(s, ":train steps=2")
    trainer = s.trainer
    weights = {k: v.clone() for k, v in s.model.state_dict().items()}
    moments = [{k: v.clone() for k, v in st.items() if torch.is_tensor(v)}
               for st in trainer.optimizer.state.values()]
    grads = [p.grad for p in s.model.parameters()]
    rollback = trainer.rollback

    def ctrl_c_in_the_undoing(*args, **kwargs):  # Ctrl-C lands as the optimizer's trial step is being undone
        os.kill(os.getpid(), signal.SIGINT)
        return rollback(*args, **kwargs)

    monkeypatch.setattr(trainer, "rollback", ctrl_c_in_the_undoing)
    hooks = Recorder()
    with pytest.raises(KeyboardInterrupt):
        with dispatch.stop_on_signals(hooks, REGISTRY["grad"]):
            run(s, ":grad", hooks)
    state = s.model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in weights.items())  # the trial step was undone
    assert len(trainer.optimizer.state) == len(moments)
    for st, before in zip(trainer.optimizer.state.values(), moments):
        assert all(torch.equal(st[k], v) for k, v in before.items())
    assert all(p.grad is g for p, g in zip(s.model.parameters(), grads))
    monkeypatch.undo()
    assert run(s, ":train steps=1").steps == 1  # the session goes on


# --- Ctrl-C during an import ---------------------------------------------------------------------------------
def test_ctrl_c_during_a_lazy_import_waits_for_the_import_so_the_next_command_still_works(sigint_default, tmp_path,
                                                                                           monkeypatch):
    # torch imports sympy (500 modules, half a second) the first time :grad asks autograd for a gradient with
    # grad_outputs: a Ctrl-C then cut the import in two, and every later :grad said "internal error: AttributeError:
    # module 'sympy' has no attribute 'core'" until the shell was restarted
    package = tmp_path / "halfpkg"
    package.mkdir()
    (package / "__init__.py").write_text("import halfpkg.done\nimport halfpkg.slow\nVALUE = halfpkg.done.VALUE\n")
    (package / "done.py").write_text("VALUE = 7\n")
    sent = tmp_path / "sent"  # one Ctrl-C, in the first try of the import
    (package / "slow.py").write_text(f"import os, pathlib, signal, time\nsent = pathlib.Path({str(sent)!r})\n"
                                     "if not sent.exists():\n    sent.touch()\n"
                                     "    os.kill(os.getpid(), signal.SIGINT)\ntime.sleep(0.2)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        hooks = Recorder()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            with dispatch.stop_on_signals(hooks, REGISTRY["grad"]):
                import halfpkg  # noqa: F401
                while time.monotonic() - started < 5:  # the command's work after the import: Ctrl-C stops it
                    time.sleep(0.01)
        assert time.monotonic() - started < 2
        import halfpkg

        assert halfpkg.VALUE == 7  # the import was whole
    finally:
        for name in [n for n in sys.modules if n == "halfpkg" or n.startswith("halfpkg.")]:
            del sys.modules[name]


# --- :patch --------------------------------------------------------------------------------------------------
def test_patch_stops_at_ctrl_c_and_leaves_the_model_as_it_was():
    # on an 8 x 512 model a short pair of prompts took 0.8 s, a longer one seconds, and Ctrl-C went unheard
    assert REGISTRY["patch"].interruptible
    s = tiny_session()
    model = s.model
    before = logits_of(s)
    modes = [m.training for m in model.modules()]
    kernels = [getattr(m, "use_sdpa", None) for m in model.modules()]
    calls = []

    def ctrl_c_in_the_sweep(module, inputs):  # Ctrl-C while one of the head patches runs
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt

    handle = model.blocks[-1].register_forward_pre_hook(ctrl_c_in_the_sweep)
    try:
        with pytest.raises(KeyboardInterrupt):
            run(s, ":patch 3141= 9141=")
    finally:
        handle.remove()
    assert [m.training for m in model.modules()] == modes
    assert [getattr(m, "use_sdpa", None) for m in model.modules()] == kernels
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert torch.equal(logits_of(s), before)
