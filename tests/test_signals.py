"""Issue "Nothing lost, nothing hangs, part two": SIGTERM, SIGHUP and Ctrl-C, honoured within one step.

Real signals to real processes: `minitf train` (what `timeout`, `docker stop` and systemd stop with
SIGTERM), the REPL in a pseudo-terminal (SIGHUP when the terminal goes), piped input, `:compare`,
and a torchrun launch that loses a rank. A stopped run autosaves, then minitf exits with 128 + the
signal's number. Each test fails on the code before the fix (there SIGTERM and SIGHUP killed the
process with nothing saved, and Ctrl-C reached :compare every steps/10 steps).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest
import torch
from rich.console import Console

from minitf_repl import repl
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core import train as train_module
from minitf_repl.core.compare import Contender, compare
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.session import Session

posix_only = pytest.mark.skipif(os.name == "nt" or not Path("/proc/self/stat").exists(),
                                reason="POSIX signals, and the CPU time of a process from /proc")
TINY_SET = "n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4"
SHELL_TINY = ["--data", "sort", "--set", TINY_SET]


def env_for(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MINITF_", "NO_COLOR"))}
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"), XDG_CACHE_HOME=str(tmp_path / "cache"),
               MINITF_HISTORY=str(tmp_path / "history"), MINITF_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
               OMP_NUM_THREADS="1", TERM="xterm", PROMPT_TOOLKIT_NO_CPR="1",
               # started in tmp_path: this checkout's minitf_repl first, not whichever one is installed
               PYTHONPATH=os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]),
                                                      os.environ.get("PYTHONPATH")) if p))
    (tmp_path / "home").mkdir(exist_ok=True)
    return env


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def wait_until_busy(proc, seconds: float = 6.0, timeout: float = 120.0) -> None:
    """Until `proc` has worked well past importing torch (about 2 CPU seconds): it is training."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and cpu_seconds(proc.pid) < seconds:
        time.sleep(0.2)
    assert proc.poll() is None, "the process ended before the signal"


def autosave_step(tmp_path: Path) -> int:
    return ckpt.load_checkpoint(tmp_path / "checkpoints", "autosave").step


# --- SIGTERM and SIGHUP stop training like Ctrl-C, autosave, and end the process ----------------------
@posix_only
def test_sigterm_to_a_one_shot_train_stops_it_autosaves_and_exits_143(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "minitf_repl", *SHELL_TINY, "train", "--steps", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(tmp_path), text=True)
    try:
        wait_until_busy(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "Traceback" not in err and "stopped at step" in out
    step = int(out.split("stopped at step ")[1].split()[0].replace(",", ""))
    assert autosave_step(tmp_path) == step > 0


# Slow (7 s: a process that trains 6 CPU seconds before its signal). The default run keeps both halves of the claim:
# test_sigterm_during_a_save_keeps_the_previous_checkpoint_and_ends_the_input (piped lines, repl.run_lines: SIGTERM
# stops the command, no line after it runs, 143) and test_sigterm_to_a_one_shot_train_stops_it_autosaves_and_exits_143
# (a real process: SIGTERM stops its training, which autosaves)
@pytest.mark.slow
@posix_only
def test_sigterm_in_piped_input_stops_the_command_and_the_lines_after_it(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "minitf_repl", *SHELL_TINY], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(tmp_path), text=True)
    try:
        proc.stdin.write(":train steps=100000\n:config\n")
        proc.stdin.flush()
        wait_until_busy(proc)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, (proc.returncode, err[-2000:])
    assert "stopped at step" in out and "d_model" not in out  # :config never ran
    assert autosave_step(tmp_path) > 0


def spawn(env: dict):
    return pexpect.spawn(sys.executable, ["-m", "minitf_repl", *SHELL_TINY], env=env, encoding="utf-8", timeout=90,
                         dimensions=(40, 120))


@posix_only
def test_sighup_during_train_in_the_repl_autosaves_and_exits_129(tmp_path):
    child = spawn(env_for(tmp_path))
    child.logfile_read = transcript = io.StringIO()
    try:
        child.expect_exact("minitf>")
        child.sendline(":train steps=100000")
        child.expect(r"\d+/100000")
        child.expect(r"\d+/100000")
        child.kill(signal.SIGHUP)  # as the terminal closing sends it
        child.expect(r"stopped at step ([\d,]+) of 100,000")
        step = int(child.match.group(1).replace(",", ""))
        child.expect_exact("saved checkpoint autosave")
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 129, (child.exitstatus, child.signalstatus, transcript.getvalue()[-2000:])
    assert "Traceback" not in transcript.getvalue()
    assert autosave_step(tmp_path) == step > 0


@posix_only
def test_sigterm_at_the_prompt_leaves_with_143(tmp_path):
    child = spawn(env_for(tmp_path))
    child.logfile_read = transcript = io.StringIO()
    try:
        child.expect_exact("minitf>")
        child.sendline(":config")
        child.expect_exact("d_model")
        child.expect_exact("minitf>")
        time.sleep(0.3)
        child.kill(signal.SIGTERM)
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)
    assert child.exitstatus == 143, (child.exitstatus, child.signalstatus)
    assert "Traceback" not in transcript.getvalue() and "Unhandled exception" not in transcript.getvalue()


def test_sigterm_during_a_save_keeps_the_previous_checkpoint_and_ends_the_input(checkpoint_dir, monkeypatch):
    """As Ctrl-C does during a save; and then, SIGTERM being a request to end, no further line runs."""
    received = []
    previous = signal.signal(signal.SIGTERM, lambda *a: received.append("the test's handler"))  # never kill pytest
    try:
        s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32),
                    TrainConfig(steps=2, batch_size=4, eval_every=2, eval_batches=1), data_spec="sort", device_name="cpu")
        out, err = (Console(file=io.StringIO(), width=120, color_system=None) for _ in range(2))
        assert repl.run_lines([":train steps=2 save=keep"], s, out, err) == 0
        first = (checkpoint_dir / "keep" / ckpt.MANIFEST).read_bytes()
        real, files = ckpt.store.write_file, []

        def write_then_sigterm(path, data):
            files.append(path)
            if len(files) == 2:
                os.kill(os.getpid(), signal.SIGTERM)
            real(path, data)

        monkeypatch.setattr(ckpt.store, "write_file", write_then_sigterm)
        monkeypatch.setattr(ckpt.store, "write_or_link", lambda path, data, source: write_then_sigterm(path, data),
                            raising=False)
        code = repl.run_lines([":set autosave=off", ":train steps=1", ":save keep", ":config"], s, out, err)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert received == [] and code == 143
    said = [line for line in err.file.getvalue().splitlines() if not line.startswith("step ")]  # the evaluations
    assert said == ["error: line 3: save interrupted; the previous checkpoint keep is unchanged"]
    assert "trained 1 step" in out.file.getvalue() and "d_model" not in out.file.getvalue()  # :config did not run
    assert (checkpoint_dir / "keep" / ckpt.MANIFEST).read_bytes() == first


# --- every stop honoured within one training step ------------------------------------------------------
def test_a_stop_during_compare_is_honoured_within_one_step(monkeypatch):
    """Before: the stop request was asked once per evaluation segment (steps / 10 steps)."""
    steps_done = []
    real = train_module.Trainer._forward_backward

    def counted(self, *args, **kwargs):
        steps_done.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(train_module.Trainer, "_forward_backward", counted)
    data = load_data("sort:4")
    model = ModelConfig(vocab_size=data.tokenizer.vocab_size, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16)
    train = TrainConfig(batch_size=4, eval_every=100, eval_batches=1)
    contenders = [Contender("current", model, train), Contender("n_layers=2", model.replace(n_layers=2), train)]
    outcomes = compare(contenders, data, 1000, [0], "cpu", should_stop=lambda: len(steps_done) >= 3)
    assert len(steps_done) == 3  # the stop came after step 3 and was heard before step 4
    assert all(o.curve == [] for o in outcomes)  # no evaluation of a half-trained contender


def test_ctrl_c_to_a_one_shot_compare_stops_it_within_a_step_with_130(monkeypatch):
    """The next test's claim in this process (0.5 s, not its 7 s): Ctrl-C, pressed as the third training step of
    `minitf compare` begins, is heard through the front door's handler and the command's should_stop after that
    step."""
    from test_cli import invoke

    steps_done = []
    real = train_module.Trainer._forward_backward

    def pressed(self, *args, **kwargs):
        steps_done.append(1)
        if len(steps_done) == 3:
            signal.raise_signal(signal.SIGINT)
        if len(steps_done) > 100:  # not heard: fail now, not after 200,000 steps (the process test's 30 s timeout)
            raise RuntimeError("the Ctrl-C was not heard")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(train_module.Trainer, "_forward_backward", pressed)
    result = invoke(*SHELL_TINY, "compare", "current n_layers=2", "--steps", "200000", "--eval-every", "100000")
    assert result.exit_code == 130 and "Traceback" not in result.output, result.output
    assert len(steps_done) == 3  # the step under way when the key came, then no other


# Slow (7 s: a process that trains 6 CPU seconds before its signal). The default run keeps the claim: the test above
# (Ctrl-C during a one-shot compare: heard within a step, 130) and test_nothing_lost.py's
# test_a_one_shot_train_stopped_by_sigint_exits_130 (a real process's SIGINT)
@pytest.mark.slow
@posix_only
def test_ctrl_c_to_a_long_compare_stops_it_at_once(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "minitf_repl", *SHELL_TINY, "compare", "current n_layers=2",
                             "--steps", "200000", "--eval-every", "100000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env_for(tmp_path), text=True)
    try:
        wait_until_busy(proc)
        proc.send_signal(signal.SIGINT)
        start = time.perf_counter()
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("Ctrl-C was not honoured within 30 s")
    finally:
        proc.kill()
    assert proc.returncode == 130 and time.perf_counter() - start < 30, err[-2000:]
    assert "Traceback" not in err


# --- a torchrun rank that dies ---------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    ranks = [e.split(b"=", 1)[1] for e in env if e.startswith(b"RANK=")]
    return int(ranks[0]) if ranks else None


def _sockets(pid: int) -> set[int]:
    """The inodes of the sockets `pid` holds open."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def _connected(a: int, b: int) -> bool:
    """Whether processes a and b hold the two ends of an established TCP connection (gloo's pairs)."""
    ends = {}  # inode -> (local address, remote address) of every established connection
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if Path(table).exists():
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "01":  # ESTABLISHED
                    ends[int(fields[9])] = (fields[1], fields[2])
    mine = {ends[i] for i in _sockets(a) if i in ends}
    theirs = {ends[i] for i in _sockets(b) if i in ends}
    return any((remote, local) in theirs for local, remote in mine)


# slow (ten seconds of torchrun); test_distributed.py keeps two real ranks in the default run
@pytest.mark.slow
@posix_only
@pytest.mark.skipif(not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
                    reason="needs torch.distributed with gloo")
def test_a_dead_torchrun_rank_makes_rank_0_stop_in_one_line_and_save(tmp_path):
    """Rank 1 is killed mid-run; rank 0 says so in one line and saves what every rank finished.

    Once in many loaded runs (a ci-like run of this session, not reproduced in 8 launches beside a busy
    process after it) rank 0 left nothing in either log: torchrun, seeing rank 1 dead, sent rank 0 SIGTERM,
    and rank 0 ended without a word in either log. The likeliest cause is the race between torchrun's
    monitor and gloo noticing the dead peer, which minitf does not decide; so a launch in which rank 0
    wrote nothing at all is tried once more, and one in which it wrote anything is judged as it is."""
    if not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists():
        pytest.skip("this kernel does not list a process's children in /proc")
    for attempt in range(2):
        folder = tmp_path / f"launch{attempt}"
        folder.mkdir()
        err, out, agent_err = _kill_rank_1_mid_run(folder)
        if err.strip() or out.strip():
            break
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("step ")]  # not progress
    assert len(lines) == 1, (err[-3000:], out[-2000:], agent_err[-3000:])
    assert lines[0].startswith("error: another process of this torchrun launch stopped (")
    assert "; saved as checkpoint autosave (step " in lines[0] and "internal error" not in err
    step = int(lines[0].split("; saved as checkpoint autosave (step ")[1].split(")")[0])
    assert autosave_step(folder) == step > 0


def _kill_rank_1_mid_run(tmp_path: Path) -> tuple[str, str, str]:
    """Two ranks train under torchrun in `tmp_path`; rank 1 is killed once they train together. Rank 0's
    stderr and stdout, and torchrun's own stderr."""
    logs = tmp_path / "logs"
    env = {**env_for(tmp_path), "CUDA_VISIBLE_DEVICES": ""}
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                              "--log-dir", str(logs), "--redirects", "3", "-m", "minitf_repl", "--device", "cpu",
                              *SHELL_TINY, "train", "--steps", "100000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, cwd=tmp_path)
    try:
        deadline, ranks = time.time() + 120, {}
        while time.time() < deadline and len(ranks) < 2:
            ranks = {_rank_of(p): p for p in _children(agent.pid) if _rank_of(p) is not None}
            time.sleep(0.2)
        assert set(ranks) == {0, 1}, ranks
        # Training together: the two ranks hold a gloo connection (past the rendezvous), and rank 1 has
        # worked 3 CPU seconds since (its imports took 1 to 2 in all): killed before that, rank 0 would
        # be stopped by torchrun itself, a case of its own (see test_distributed.py for the DDP start).
        while time.time() < deadline and not _connected(ranks[0], ranks[1]):
            time.sleep(0.1)
        busy_from = cpu_seconds(ranks[1])
        while time.time() < deadline and cpu_seconds(ranks[1]) < busy_from + 3:
            time.sleep(0.2)
        assert time.time() < deadline, "the two ranks did not start training together within 120 s"
        os.kill(ranks[1], signal.SIGKILL)
        _, agent_err = agent.communicate(timeout=120)
    finally:
        agent.kill()
    (folder,) = logs.glob("*/attempt_0/0")
    return (folder / "stderr.log").read_text(), (folder / "stdout.log").read_text(), agent_err
