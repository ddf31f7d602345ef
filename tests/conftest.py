"""Every test runs with its own checkpoint folder, history file and data dirs: nothing a test does
lands in the repository's checkpoints/ or in the user's home. Torch uses one thread in tests: the
models are tiny, and on a 2-core machine shared with other work two threads mostly wait on each other."""

import os
import signal

import pytest

# Tests press Ctrl-C by sending this process (or a minitf they start) SIGINT, and close its terminal with SIGHUP. A
# signal ignored when minitf starts stays ignored (dispatch.handling: `nohup`, a script's `minitf train &`), and a
# suite started the same way (`pytest ... &` from a script, under nohup) passes that on: those tests then waited
# forever for a stop that never came. The suite hears both as a terminal's foreground job would.
for _signum in (signal.SIGINT, getattr(signal, "SIGHUP", None)):
    if _signum is not None and signal.getsignal(_signum) is signal.SIG_IGN:
        signal.signal(_signum, signal.default_int_handler if _signum == signal.SIGINT else signal.SIG_DFL)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: without the plugin (-p no:xdist) it is left unused
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (./dev test): a worker per CPU this process may use, at most 4. Each test holds torch to one thread
    (one_thread, below), so one process used one core; past 4 workers the suite's subprocess tests (each a minitf with
    torch loaded, some 400 MB) cost more memory than the few seconds they save. One CPU: no workers, one process."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity to ask
        cpus = os.cpu_count() or 1
    return 0 if cpus < 2 else min(cpus, 4)


def _point_user_dirs_at(home, setenv, delenv) -> None:
    setenv("MINITF_CHECKPOINT_DIR", str(home / "checkpoints"))
    setenv("MINITF_HISTORY", str(home / "history"))
    setenv("XDG_DATA_HOME", str(home / "data"))
    setenv("XDG_CACHE_HOME", str(home / "cache"))
    setenv("XDG_STATE_HOME", str(home / "state"))
    delenv("MINITF_CACHE_DIR", raising=False)  # the cache follows XDG_CACHE_HOME unless a test sets it
    delenv("MINITF_PRODUCTS", raising=False)  # a user's choice of float32 products: the tests measure or set their own


@pytest.fixture(scope="session", autouse=True)
def _isolated_user_dirs_for_shared_fixtures(tmp_path_factory):
    """The same dirs, once for the whole run, set before any module- or session-scoped fixture: such a fixture is
    made before the per-test fixture below, and a session it trained autosaved into the repository's checkpoints/
    (tests/test_report.py's, at ./checkpoints/autosave)."""
    with pytest.MonkeyPatch.context() as mp:
        _point_user_dirs_at(tmp_path_factory.mktemp("shared-home"), mp.setenv, mp.delenv)
        yield


@pytest.fixture(scope="session", autouse=True)
def _one_click_command_per_app():
    """Typer's CliRunner.invoke turns the Typer app into its Click command anew at every call: for minitf's 40
    subcommands that took 60% of a short invocation (41 of 67 ms on a loaded 2-core Zen 3), and the suite invokes
    the shell thousands of times (test_hostile.py alone 540). A process builds it once (cli.main), as this does per
    app. An app built in a test (cli.build_app(registry)) is another object, so it gets its own command. The command
    is built from what the app holds since import (its registered functions and their signatures), and each call
    still makes its own Click context: a test that patches what a command calls is heard as before."""
    import weakref

    import typer.testing

    built = weakref.WeakKeyDictionary()
    real = getattr(typer.testing, "_get_command", None)  # Typer's private helper: a Typer without it runs as it is
    if real is None:
        yield
        return

    def once_per_app(app):
        if app not in built:
            built[app] = real(app)
        return built[app]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", once_per_app)
        yield


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    _point_user_dirs_at(tmp_path_factory.mktemp("home"), monkeypatch.setenv, monkeypatch.delenv)


@pytest.fixture
def checkpoint_dir(_isolated_user_dirs):
    """The folder this test's sessions save to ($MINITF_CHECKPOINT_DIR; a save creates it)."""
    import os
    from pathlib import Path

    return Path(os.environ["MINITF_CHECKPOINT_DIR"])


@pytest.fixture(autouse=True)
def one_thread():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _hardware_answer_asked_afresh():
    """core.device keeps its answer to "bfloat16 units?" for the process (the hardware stays put), so a test that
    patched torch's probes and was its worker's first to ask left the patched answer to every later test there: a Zen
    3 then trained dtype=auto in emulated bfloat16 (tests/test_commands.py's :device test with AVX512-BF16 patched in,
    in an order CI can draw). Forgotten after every test; asking again costs microseconds."""
    yield
    from minitf_repl.core import device

    device._native_bf16.cache_clear()


@pytest.fixture(autouse=True)
def _one_thread_for_sessions(monkeypatch):
    """Sessions keep torch at one thread too: their `threads=auto` policy reads $MINITF_THREADS first
    (core/threads.py), and subprocesses inherit it. Tests of the policy itself unset it."""
    monkeypatch.setenv("MINITF_THREADS", "1")


@pytest.fixture(params=["float32-path", pytest.param("bf16-units", marks=pytest.mark.slow)])
def cpu_path(request, monkeypatch):
    """A learning check on the float32 path of a CPU without bfloat16 units (most CPUs, and the one the default
    test run must cover whatever CPU runs it) and, under `-m slow`, again on this CPU's own bfloat16 path where it
    has the units. Every precision choice (dtype=auto, Muon's Newton-Schulz) asks core.precision's native_bf16:
    answered "no", the run is float32 throughout. The bfloat16 case runs only with `-m slow` because each learning
    check takes a minute on 2 cores and the default run has a ten-minute budget; it skips on a CPU without the
    units, where it would emulate bfloat16 and crawl (the float32 case is that CPU's own path)."""
    from minitf_repl.core import precision

    if request.param == "bf16-units":
        if not precision.native_bf16("cpu"):
            pytest.skip("this CPU has no bfloat16 units: the float32-path case is its own path")
    else:
        monkeypatch.setattr(precision, "native_bf16", lambda device: False)
    return request.param


@pytest.fixture
def sentence_session(tmp_path):
    """A small model (2 blocks of 32, a window of 24) on one sentence said 200 times: it trains in a second and
    has something to learn. Called with training settings: `sentence_session(batch_size=4, eval_batches=2)`."""
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.session import Session

    path = tmp_path / "text.txt"
    path.write_text("the cat sat on the mat; a dog ran in the fog. " * 200)

    def make(**train):
        s = Session(ModelConfig(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=24), data_spec=str(path),
                    checkpoint_dir=tmp_path / "ck")
        s.trainer.set_config(s.trainer.config.replace(**train))
        return s

    return make


@pytest.fixture
def vocab_only(tmp_path, checkpoint_dir):
    """A session that loaded a checkpoint whose text file is gone: the model and its vocabulary, no text to train on."""
    from test_commands import TEXT, run, tiny_session

    path = tmp_path / "fox.txt"
    path.write_text(TEXT, encoding="utf-8")
    s = tiny_session(str(path))
    run(s, ":train steps=1")
    run(s, ":save m")
    path.unlink()
    again = tiny_session("sort:4")
    run(again, ":load m")
    return again


@pytest.fixture
def run_lines(monkeypatch):
    """The lines the shell hands the front door, in order, as each prompt reads them (a paste may make several)."""
    from minitf_repl import dispatch

    seen = []
    real = dispatch.FrontDoor.run_line

    def recording(door, line):
        seen.append(line)
        return real(door, line)

    monkeypatch.setattr(dispatch.FrontDoor, "run_line", recording)
    return seen


@pytest.fixture(scope="session")
def every_command_lines():
    """Every shell command once, in an order that works in one session of a tiny model on `sort:4` (train
    first, so the views have something to show): `every_command_lines(folder)`. tests/test_json_schema.py
    checks each one's --json document on the CPU; tests/test_gpu.py runs the same lines on a CUDA session.
    With `reference=True` (transformers is installed), `:save hf:` and `:parity` join after `:load one`."""

    def lines(folder, reference: bool = False) -> list[str]:
        every = [
            ":train", ":gen 12 n=5 seed=1", ":shapes 12", ":device", ":config", ":set temperature=0.5", ":data",
            ":params", ":ngram n=3", ":context windows=16 counter=3", ":mistakes n=50", ":checks steps=3", ":lrfind steps=12",
            ":attn 12", ":qkv 1234= at=3", ":resid 1234=", ":ln 1234= k=3", ":ffn 1234= k=3", ":kv 12 n=3",
            ":grad 1234=1234", ":muon seed=1", ":step 12 seed=1", ":lens 12", ":score 1234=1234", ":score",
            ":embed 1234= k=3", ":patch 1234= 5678=", ":attrib 12", ":heads", ":plot", ":tok 12",
            f":report {folder}/r.html", ":quantize int8", ":ablate head=0.0", ":save one", ":ls", ":load one",
            ":compare n_layers=1 vs d_ff=32 steps=2", ":set n_experts=2 autosave=off", ":train steps=2", ":experts",
            ":set n_experts=1 pos_encoding=rope", ":rope 12",
        ]
        if reference:  # the model has GPT-2's settings here
            every[every.index(":load one") + 1 : 0] = [f":save hf:{folder}/hf", f":parity hf:{folder}/hf"]
        return every

    return lines
