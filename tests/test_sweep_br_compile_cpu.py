"""Sweep br (a learner on an AVX2-only AMD EPYC, Zen 3): compile=on's time and word, emulated bfloat16's cost, and
which kind of CPU the speed page says a bare "AMD EPYC" is. Each test failed before its fix.

`minitf --set compile=on train --steps 40 --eval-every 20` said "step 1 of 40 after 19.6 s: about 0:12:45 to go at
this pace" right after the compiling step, and "eta 0:00:24" at step 20 of a run that ended 5 s later: a log's pace
and eta counted the compile's seconds, which tokens/s leaves out. They leave them out now, and a continued run's pace
counts this call's steps alone (its seconds are this call's). The compile itself ran for up to two minutes with no
word, under a bar at "0/60 eta -:--:--": it is said now before the step that compiles, and where the run is float32
on a CPU, that compiling gains a few per cent at most there. dtype=bfloat16's warning said "likely slower than float32"
where a step ran 7x to 9x slower; docs/speed.md said a cloud machine's bare "AMD EPYC" is a Zen 4 or a Zen 5.
"""

import io
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from minitf_repl.core import precision
from minitf_repl.core import train as core_train
from minitf_repl.render import live
from test_commands import Recorder, run, tiny_session

REPO = Path(__file__).resolve().parents[1]


def _info(step, run_steps, elapsed, val=None, compile_seconds=None):
    return SimpleNamespace(step=step, run_step=step, run_steps=run_steps, train_loss=2.0, train_eval_loss=None,
                           val_loss=val, val_bpc=None, accuracy=None, aux_loss=None, lr=1e-3,
                           tokens_per_second=1000.0, elapsed=elapsed, compile_seconds=compile_seconds)


def _log(monkeypatch):
    """A reporter writing a log's lines (no bar), on a clock the test moves: (reporter, clock, its lines)."""
    clock = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    console = Console(file=io.StringIO(), width=300, color_system=None)
    reporter = live.RichReporter(console, live=False, lines=True)
    return reporter, clock, lambda: console.file.getvalue().splitlines()


# --- 1. a log's pace and eta leave the compiling step out ------------------------------------------------------------
def test_a_logs_eta_leaves_the_compiling_step_out_and_no_pace_is_read_from_it(monkeypatch):
    reporter, clock, lines = _log(monkeypatch)
    reporter.on_train_start(40, 0, False)
    clock[0] += 20.0  # the first step compiles for 20 s
    reporter.on_step(_info(1, 40, 20.0, compile_seconds=20.0))
    assert lines() == []  # was "step 1 of 40 after 20.0 s: about 0:13:00 to go at this pace", from one step
    for step in range(2, 20):  # 18 steps of 0.25 s: 4.5 s at the run's pace, not yet FIRST_SIGN
        clock[0] += 0.25
        reporter.on_step(_info(step, 40, 20.0 + 0.25 * (step - 1)))
    assert lines() == []
    reporter.on_step(_info(20, 40, 24.75, val=1.9))  # 19 steps after the compile in 4.75 s: 20 more take 5 s
    assert lines() == ["step 20 (run 20/40): train loss 2.0000, val loss 1.9000, lr 1.00e-03, tokens/s 1,000, "
                       "elapsed 24.8s, eta 0:00:05"], lines()  # was "eta 0:00:25"


def test_a_logs_pace_after_a_compile_is_read_from_the_steps_after_it_and_says_the_compile(monkeypatch):
    reporter, clock, lines = _log(monkeypatch)
    reporter.on_train_start(150, 0, False)
    clock[0] += 20.0
    reporter.on_step(_info(1, 150, 20.0, compile_seconds=20.0))
    for step in range(2, 13):
        clock[0] += 0.5
        reporter.on_step(_info(step, 150, 20.0 + 0.5 * (step - 1)))
    # 10 steps in the 5 s after the compile: 139 more take 69.5 s
    assert lines() == ["step 11 of 150 after 25.0 s (20.0 s of it compiling): about 0:01:10 to go at this pace "
                       "(a line at each evaluation)"], lines()


def test_a_continued_runs_pace_counts_this_calls_steps_only(monkeypatch):
    """The pace's seconds are this call's: a run continued at step 100 of 150 divided them by 110 steps."""
    reporter, clock, lines = _log(monkeypatch)
    reporter.on_train_start(150, 100, False)
    for step in range(101, 112):
        clock[0] += 0.5
        reporter.on_step(_info(step, 150, 50.0 + 0.5 * (step - 100)))
    assert lines() == ["step 110 of 150 after 5.0 s: about 0:00:20 to go at this pace (a line at each evaluation)"], \
        lines()  # was "about 0:00:02"


# --- 2. compiling is said before the step that compiles ---------------------------------------------------------------
class Ordered(Recorder):
    """A recorder that keeps notices and steps in the order they came."""

    def __init__(self):
        super().__init__()
        self.said = []

    def notice(self, text):
        super().notice(text)
        self.said.append(text)

    def on_step(self, info):
        super().on_step(info)
        self.said.append(("step", info.run_step))


@pytest.fixture
def compiled(monkeypatch):
    """compile=on without a compiler run: "compiled" is a wrapper of the same module."""
    monkeypatch.setattr(core_train, "compile_module", lambda module: (lambda *a, **k: module(*a, **k), None))


def test_a_compiled_run_says_before_its_first_step_that_it_compiles_and_what_it_gains_in_float32_on_a_cpu(compiled):
    session = tiny_session()
    run(session, ":set compile=on")
    run(session, ":set dtype=float32")
    hooks = Ordered()
    result = run(session, ":train steps=3", hooks)
    assert result.compiled and result.compile_seconds is not None
    compiling = [n for n in hooks.said if isinstance(n, str) and n.startswith("compiling the model")]
    assert compiling == ["compiling the model (compile=on): the first step takes seconds to minutes, the steps after "
                         "it reuse the compiled code; a Ctrl-C meanwhile stops the run once the compile ends; in "
                         "float32 on a CPU the compiled steps run a few per cent "
                         "faster at most, too little to win that time back in most runs (compile=off skips the "
                         "compile)"], hooks.said
    assert hooks.said.index(compiling[0]) < hooks.said.index(("step", 1))
    again = Ordered()
    run(session, ":train steps=2", again)  # compiled already: nothing compiles, nothing is said
    assert not any(isinstance(n, str) and n.startswith("compiling") for n in again.said), again.said


def test_a_recompile_for_another_path_is_said_too(compiled):
    session = tiny_session()
    run(session, ":set compile=on")
    run(session, ":train steps=1")
    run(session, ":set fast_path=off")  # the path a step runs changes: compiled anew
    hooks = Ordered()
    run(session, ":train steps=1", hooks)
    assert any(isinstance(n, str) and n.startswith("compiling the model again") for n in hooks.said), hooks.said


def test_the_compile_line_leaves_out_the_float32_words_where_the_run_is_bfloat16():
    line = precision.compiling_line("bfloat16", "cpu")
    assert line.startswith("compiling the model (compile=on)") and "per cent" not in line
    assert "a few per cent faster at most" in precision.compiling_line("float32", "cpu")


# --- 3. emulated bfloat16 says how much slower -----------------------------------------------------------------------
def test_bfloat16_on_a_cpu_without_units_says_several_times_slower_with_a_measured_factor(monkeypatch):
    from minitf_repl.core import device

    monkeypatch.setattr(device, "cpu_bf16_units", lambda: None)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    device._native_bf16.cache_clear()
    try:
        line = precision.precision_note("bfloat16", "cpu")
    finally:
        device._native_bf16.cache_clear()
    assert "likely slower" not in line  # a step ran 7x to 9x slower on a Zen 3
    assert "several times slower than float32 (a training step ran 7x to 9x slower" in line, line
    assert line.endswith("dtype=auto picks float32 here)"), line


# --- 4. which kind of CPU a bare "AMD EPYC" is ----------------------------------------------------------------------
def test_the_speed_pages_first_section_knows_zen_3_and_avx2_only_cpus():
    text = (REPO / "docs/speed.md").read_text(encoding="utf-8")
    first = " ".join(text.split("## On a CPU: which kind you have", 1)[1].split("\n### ", 1)[0].split())
    assert 'bare "AMD EPYC" is a Zen 4' not in first
    assert 'bare "AMD EPYC" may be a Zen 3' in first and "AVX2-only CPU" in first
    assert "(#an-avx2-only-cpu-stood-in-for-by-the-same-zen-5-with-its-instruction-sets-capped-a-tenth-session)" \
        in first
    assert "(#a-zen-3-a-sixtieth-session-a-real-cpu-without-bfloat16)" in first
    assert "The third kind, an Intel Xeon with AMX" not in first  # the table's third kind is one without AMX
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(AMD Zen 2 and 3, most laptops)" not in readme and "most x86 laptops" in readme
    from minitf_repl.core.device import cpu_name

    assert "a Zen 3 has AVX2 alone" in " ".join(cpu_name.__doc__.split())
