"""Sweep bu, threads=auto and the cores in a container (core/threads.py, core/cgroup.py, core.device's cores): a CPU
quota on a busy host had the host's load taken from the quota's 2 cores; the quota was read at the top of
/sys/fs/cgroup only, never in this process's own cgroup (a systemd CPUQuota, `docker --cgroupns=host`); and the cores
were counted three ways (:device's table the machine's, its threads line the affinity's, cpu_kind "1 cores" and
"None cores"). Each test failed before its fix."""

from __future__ import annotations

import pytest

from minitf_repl.core import device, memory, threads as th
from minitf_repl.core.threads import ThreadPolicy, threads_for

from test_threads import write_proc

READ_CPU = th.read_cpu  # the real reading, of a /proc given


@pytest.fixture
def auto(monkeypatch):
    """The policy's auto mode: tests run with MINITF_THREADS=1 (conftest), which would fix the count."""
    monkeypatch.delenv("MINITF_THREADS", raising=False)


def machine(monkeypatch, tmp_path, cpus: int, busy: int, quota: float | None, torch_default: int):
    """A /proc of `cpus` CPUs, all this process's, of which the first `busy` are held by other programs during
    decide()'s sample (one simulated second); a CPU quota of `quota` cores; torch's own default count."""
    monkeypatch.setattr(th, "affinity", lambda: set(range(cpus)))
    monkeypatch.setattr(th, "cgroup_quota", lambda: quota)
    monkeypatch.setattr(th, "torch_default_threads", lambda: torch_default)
    monkeypatch.setattr(th.os, "sysconf", lambda name: 100)  # 100 ticks a second
    clock = [1000.0]
    monkeypatch.setattr(th.time, "monotonic", lambda: clock[0])
    write_proc(tmp_path, {i: [0, 0, 0, 1000, 0, 0, 0, 0] for i in range(cpus)}, own=(0, 0))

    def one_second(seconds):
        clock[0] += 1.0
        write_proc(tmp_path, {i: [100 if i < busy else 0, 0, 0, 1000, 0, 0, 0, 0] for i in range(cpus)}, own=(0, 0))

    monkeypatch.setattr(th.time, "sleep", one_second)
    monkeypatch.setattr(th, "read_cpu", lambda proc=None: READ_CPU(tmp_path))


# --- 1. the load is weighed against the CPUs it was measured on ------------------------------------------------------
def test_a_quota_on_a_busy_host_keeps_its_cores_while_the_host_has_free_ones(auto, monkeypatch, tmp_path):
    """docker --cpus=2 on a 64-CPU host, 20 of its CPUs busy: 44 are free, so 2 threads (it gave 1, "2 cores, 19.9
    busy with other work": the 20 taken from the quota's 2)."""
    machine(monkeypatch, tmp_path, cpus=64, busy=20, quota=2.0, torch_default=32)
    choice = ThreadPolicy(0).decide()
    assert (choice.threads, choice.cores, choice.cpus) == (2, 2, 64)
    assert choice.describe() == "2 (auto: a CPU quota of 2 on 64 CPUs, 20.0 of them busy with other work)"


def test_the_count_is_the_fewer_of_the_cores_and_the_free_cpus(auto, monkeypatch, tmp_path):
    assert threads_for(2, 20.0, 64) == 2 and threads_for(2, 63.0, 64) == 1  # a quota: 44 free; 1 free
    assert threads_for(32, 40.0, 64) == 24 and threads_for(2, 1.0) == 1  # 24 free of torch's 32; no cpus: the cores
    # torch's default (physical cores) below the CPUs: the load is counted on all 64, with no quota to name
    machine(monkeypatch, tmp_path, cpus=64, busy=40, quota=None, torch_default=32)
    assert ThreadPolicy(0).decide().describe() == "24 (auto: 32 cores on 64 CPUs, 40.0 of them busy with other work)"
    # the load measured on the cores themselves: the words as they were
    machine(monkeypatch, tmp_path, cpus=2, busy=1, quota=None, torch_default=2)
    assert ThreadPolicy(0).decide().describe() == "1 (auto: 2 cores, 1.0 busy with other work)"


# --- 2. the quota in this process's own cgroup, and those above it ---------------------------------------------------
def test_the_cpu_quota_is_read_along_this_process_s_own_cgroup(tmp_path):
    """cgroup v2 without a cgroup namespace (docker --cgroupns=host, a systemd unit): the quota sits in the folder
    /proc/self/cgroup names, beside the memory limit that core.memory already read there; the tightest on the way
    down holds. cgroup v1 names its cpu controller's folder on a line of its own."""
    root, own = tmp_path / "cg", tmp_path / "self_cgroup"
    scope = root / "system.slice" / "docker-abc.scope"
    scope.mkdir(parents=True)
    (scope / "cpu.max").write_text("200000 100000\n")
    (scope / "memory.max").write_text(str(2 << 30))
    (scope / "memory.current").write_text(str(1 << 30))
    own.write_text("0::/system.slice/docker-abc.scope\n")
    assert memory.cgroup_memory_left(root, own) == 1 << 30
    assert th.cgroup_quota(root, own) == 2.0
    (root / "system.slice" / "cpu.max").write_text("max 100000\n")
    assert th.cgroup_quota(root, own) == 2.0  # no quota above: the scope's
    (root / "system.slice" / "cpu.max").write_text("50000 100000\n")
    assert th.cgroup_quota(root, own) == 0.5  # the slice's, tighter, holds for the scope too
    assert th.cgroup_quota(root, tmp_path / "no such file") is None  # the top alone: none there

    v1 = tmp_path / "v1"
    job = v1 / "cpu" / "user.slice" / "job"
    job.mkdir(parents=True)
    (job / "cpu.cfs_quota_us").write_text("300000\n")
    (job / "cpu.cfs_period_us").write_text("100000\n")
    own.write_text("4:cpu,cpuacct:/user.slice/job\n3:memory:/user.slice/job\n0::/user.slice/job\n")
    assert th.cgroup_quota(v1, own) == 3.0
    own.write_text("4:cpu,cpuacct:/docker/abc\n")  # a v1 container sees its own cgroup at the top: read there
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("100000\n")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    assert th.cgroup_quota(v1, own) == 1.0

    from minitf_repl.core import cgroup  # one reading of the path, which core.memory and core.threads share

    own.write_text("0::/system.slice/docker-abc.scope\n")
    assert cgroup.folders("memory", root, own) == [root, root / "system.slice", scope]


# --- 3. one count of the cores ---------------------------------------------------------------------------------------
def test_the_table_cpu_kind_and_the_threads_count_the_cores_alike(monkeypatch):
    """`taskset -c 0` on a 2-core machine: the table said "2 cores" beside "CPU threads: 1 (auto: 1 core, ...)", and
    cpu_kind (the `cpu` of :train's --json) "1 cores"; with neither an affinity nor os.cpu_count, "None cores"."""
    monkeypatch.setattr(th, "affinity", lambda: {0})
    monkeypatch.setattr(th, "cgroup_quota", lambda: None)
    monkeypatch.setattr(device.os, "cpu_count", lambda: 2)
    assert device.describe_devices()[0].description.endswith(", 2 cores, this process may use 1")
    assert ", 2 cores, this process may use 1, " in device.cpu_kind() and "1 cores" not in device.cpu_kind()

    monkeypatch.setattr(th, "affinity", lambda: set(range(64)))  # docker --cpus=2 on a 64-CPU host
    monkeypatch.setattr(th, "cgroup_quota", lambda: 2.0)
    monkeypatch.setattr(device.os, "cpu_count", lambda: 64)
    assert ", 64 cores, this process may use 2, " in device.cpu_kind()
    assert device.describe_devices()[0].description.endswith(", 64 cores, this process may use 2")

    monkeypatch.setattr(th, "affinity", lambda: None)  # neither can say
    monkeypatch.setattr(th, "cgroup_quota", lambda: None)
    monkeypatch.setattr(device.os, "cpu_count", lambda: None)
    assert ", 1 core, " in device.cpu_kind() and "None" not in device.cpu_kind()
    monkeypatch.setattr(th, "affinity", lambda: {0, 1})  # nothing held back: the machine's count alone
    monkeypatch.setattr(device.os, "cpu_count", lambda: 2)
    assert device.describe_devices()[0].description.endswith(", 2 cores")
