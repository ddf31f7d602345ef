"""The thread policy (core/threads.py): how many threads torch computes with, and when it looks again.

The rule is checked on numbers written here; the readings of /proc and of a cgroup quota on files
written here in the kernel's formats; the policy on readings it is handed; and once for real, with
a process spinning on a core of this machine.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from minitf_repl.core import threads as th
from minitf_repl.core.threads import CpuReading, ThreadPolicy, busy_elsewhere, threads_for


@pytest.fixture
def auto(monkeypatch):
    """The policy's auto mode: tests run with MINITF_THREADS=1 (conftest), which would fix the count."""
    monkeypatch.delenv("MINITF_THREADS", raising=False)


@pytest.mark.parametrize("cores, busy, expected", [
    (2, 0.0, 2), (2, 0.2, 2),  # a little other work: both cores still pay
    (2, 0.3, 1), (2, 1.0, 1), (2, 1.9, 1),  # a core more than a quarter busy gets no thread
    (2, 5.0, 1),  # never fewer than one
    (4, 1.2, 3), (4, 1.3, 2), (8, 0.0, 8),  # 1.2: one core held, a fifth of another
    (2, None, 2),  # nothing measurable: the cores alone
])  # fmt: skip
def test_every_core_busier_than_a_quarter_elsewhere_gets_no_thread(cores, busy, expected):
    assert threads_for(cores, busy) == expected


def write_proc(root, cpus: dict[int, list[int]], own: tuple[int, int]) -> None:
    """/proc/stat with one line per CPU (user nice system idle iowait irq softirq steal) and /proc/self/stat."""
    total = [sum(col) for col in zip(*cpus.values())]
    lines = ["cpu  " + " ".join(map(str, total + [0, 0]))]
    lines += [f"cpu{i} " + " ".join(map(str, ticks + [0, 0])) for i, ticks in cpus.items()]
    lines += ["intr 1 2 3", "ctxt 4", "btime 5"]
    (root / "stat").write_text("\n".join(lines) + "\n")
    (root / "self").mkdir(exist_ok=True)
    utime, stime = own
    # a process name with spaces and a parenthesis, as the kernel allows: the fields count from the last ")"
    fields = ["S", "1", "1", "1", "0", "-1", "4194560", "10", "0", "0", "0", str(utime), str(stime)] + ["0"] * 39
    (root / "self" / "stat").write_text("4242 (my (odd) name) " + " ".join(fields) + "\n")


def test_busy_elsewhere_is_all_busy_time_less_this_process_s_own(tmp_path, monkeypatch):
    monkeypatch.setattr(th, "affinity", lambda: {0, 1})
    monkeypatch.setattr(th.os, "sysconf", lambda name: 100)  # 100 ticks a second
    write_proc(tmp_path, {0: [100, 0, 50, 1000, 0, 0, 0, 0], 1: [10, 0, 0, 1000, 0, 0, 0, 0],
                          2: [0, 0, 0, 0, 0, 0, 0, 0]}, own=(40, 10))
    before = th.read_cpu(tmp_path)
    # one second later: cpu0 ran 100 more ticks (a whole core), cpu1 60 (20 of them steal), this
    # process 50 (user 40 + system 10); cpu2 is not ours and ran flat out: not counted
    write_proc(tmp_path, {0: [200, 0, 50, 1000, 0, 0, 0, 0], 1: [40, 0, 10, 1040, 0, 0, 0, 20],
                          2: [0, 0, 100, 0, 0, 0, 0, 0]}, own=(80, 20))
    after = th.read_cpu(tmp_path)
    after = CpuReading(before.at + 1.0, after.busy_ticks, after.own_ticks)
    assert (after.busy_ticks - before.busy_ticks, after.own_ticks - before.own_ticks) == (160, 50)
    assert busy_elsewhere(before, after) == pytest.approx(1.1)


def test_no_proc_means_no_reading(tmp_path):
    assert th.read_cpu(tmp_path / "nothing") is None


def test_a_cgroup_quota_caps_the_cores(tmp_path, monkeypatch):
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # docker --cpus=1.5 (cgroup v2)
    assert th.cgroup_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert th.cgroup_quota(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("300000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert th.cgroup_quota(v1) == 3.0
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    assert th.cgroup_quota(v1) is None
    monkeypatch.setattr(th, "affinity", lambda: set(range(64)))
    monkeypatch.setattr(th, "torch_default_threads", lambda: 32)
    monkeypatch.setattr(th, "cgroup_quota", lambda: 2.5)
    assert th.usable_cores() == 2  # 64 CPUs visible, 32 physical, a quota of 2.5 cores
    monkeypatch.setattr(th, "cgroup_quota", lambda: None)
    assert th.usable_cores() == 32  # torch's own default (physical cores, or OMP_NUM_THREADS) caps it


def fake_machine(monkeypatch, busy_per_second: list[float], cores: int = 2) -> list[float]:
    """read_cpu hands out readings in which other processes used busy_per_second[i] cores' worth in
    the i-th second; the clock moves only when the policy sleeps or a test advances it."""
    clock = [1000.0]
    ticks = {"busy": 0, "at": clock[0]}

    def read_cpu(proc=None):
        elapsed = clock[0] - ticks["at"]
        load = busy_per_second[0] if busy_per_second else 0.0
        ticks["busy"] += round(load * 100 * elapsed)
        ticks["at"] = clock[0]
        return CpuReading(clock[0], ticks["busy"], 0)

    monkeypatch.setattr(th, "read_cpu", read_cpu)
    monkeypatch.setattr(th.os, "sysconf", lambda name: 100)
    monkeypatch.setattr(th.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(th.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(th, "usable_cores", lambda: cores)
    return clock


def test_auto_takes_a_core_less_while_another_program_holds_one(auto, monkeypatch):
    busy = [1.0]
    fake_machine(monkeypatch, busy)
    choice = ThreadPolicy(0).decide()
    assert (choice.threads, choice.how, choice.cores) == (1, "auto", 2)
    assert choice.busy == pytest.approx(1.0)
    assert torch.get_num_threads() == 1
    assert choice.describe() == "1 (auto: 2 cores, 1.0 busy with other work)"
    busy[0] = 0.0
    assert ThreadPolicy(0).decide().threads == 2 and torch.get_num_threads() == 2


def test_while_training_the_policy_looks_again_every_few_seconds_without_waiting(auto, monkeypatch):
    busy = [0.0]
    clock = fake_machine(monkeypatch, busy)
    policy = ThreadPolicy(0)
    assert policy.decide().threads == 2
    busy[0] = 1.0  # another program starts
    clock[0] += th.REVISIT_SECONDS / 2
    assert policy.revisit() is None and torch.get_num_threads() == 2  # too soon to look
    clock[0] += th.REVISIT_SECONDS / 2
    assert policy.revisit().threads == 1 and torch.get_num_threads() == 1
    clock[0] += th.REVISIT_SECONDS
    assert policy.revisit() is None  # looked, nothing changed
    busy[0] = 0.0  # it ended
    clock[0] += th.REVISIT_SECONDS
    assert policy.revisit().threads == 2 and torch.get_num_threads() == 2


def test_a_number_or_the_environment_fixes_the_count(monkeypatch):
    monkeypatch.setattr(th, "read_cpu", lambda proc=None: pytest.fail("a fixed count measures nothing"))
    policy = ThreadPolicy(2)
    assert policy.decide().describe() == "2 (threads=2)" and torch.get_num_threads() == 2
    assert policy.revisit() is None
    policy.set(1)  # :set threads=1 on a policy already applied: at once
    assert torch.get_num_threads() == 1 and policy.choice.how == "setting"
    policy.set(0)  # auto again: $MINITF_THREADS (1, from conftest) decides
    assert policy.choice.describe() == "1 ($MINITF_THREADS=1)"


def test_the_trainer_asks_the_policy_between_steps():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.core.data import load_data
    from minitf_repl.core.model import MiniTransformerLM
    from minitf_repl.core.train import Trainer

    class Counting:
        calls = 0

        def revisit(self):
            Counting.calls += 1

    data = load_data("sort")
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1,
                                          d_ff=16, max_seq_len=16))
    trainer = Trainer(model, data, TrainConfig(steps=3, batch_size=2, eval_every=3, eval_batches=1))
    trainer.threads = Counting()
    summary = trainer.run()
    assert Counting.calls == 3 and summary.threads == torch.get_num_threads()


def test_set_threads_and_device_in_the_shell(monkeypatch):
    monkeypatch.setattr(th, "available_cpus", lambda: 4)  # threads=2 is not more than the CPUs
    from minitf_repl.commands import DeviceResult
    from minitf_repl.dispatch import run_command
    from minitf_repl.parsing import parse_line
    from minitf_repl.commands import REGISTRY
    from minitf_repl.session import Session

    s = Session(data_spec="sort")
    cmd, args = parse_line(":set threads=2", REGISTRY)
    run_command(s, cmd.name, args)
    assert s.shell_config.threads == 2
    result = run_command(s, "device", {})
    assert isinstance(result, DeviceResult) and (result.threads, result.threads_why) == (2, "threads=2")
    assert torch.get_num_threads() == 2
    cmd, args = parse_line(":set threads=0", REGISTRY)
    run_command(s, cmd.name, args)
    assert run_command(s, "device", {}).threads_why == "$MINITF_THREADS=1"


@pytest.mark.skipif(len(th.affinity() or ()) < 2 or th.read_cpu() is None, reason="needs Linux /proc and 2 CPUs")
def test_a_real_program_spinning_on_a_core_is_seen(auto):
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)  # let it start
        choice = ThreadPolicy(0).decide(sample=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert choice.busy is not None and choice.busy > 0.5, choice
    assert choice.threads == max(1, choice.cores - 1) or choice.busy > 1.25, choice


def test_more_threads_than_cpus_is_said_where_it_is_set_and_shown(monkeypatch):
    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session
    from test_commands import Recorder, run

    monkeypatch.setattr(th, "affinity", lambda: {0, 1})
    monkeypatch.setattr(th, "cgroup_quota", lambda: None)
    assert th.available_cpus() == 2 and th.oversubscribed(2) is None
    assert "threads=3 is more than the 2 CPUs this process may use" in th.oversubscribed(3)
    monkeypatch.setattr(th, "cgroup_quota", lambda: 1.0)  # docker --cpus=1
    assert th.oversubscribed(2).startswith("threads=2 is more than the 1 CPU this")

    s, heard = Session(data_spec="sort"), Recorder()
    for line in (":set threads=1", ":set threads=1", ":set threads=8", ":set threads=8"):
        run(s, line, heard)
    assert len(heard.notices) == 1 and "threads=8 is more than the 1 CPU" in heard.notices[0]  # said when it changes
    assert run_command(s, "device", {}).threads_why == "threads=8, more than the 1 CPU this process may use"
    run_command(s, "set", {"threads": 0})
