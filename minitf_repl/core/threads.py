"""How many threads torch computes with on a CPU: the cores this process may use, as far as other work leaves them free.

torch starts with one thread per core and keeps them all. Its threads meet at a barrier after every
parallel piece of an operation, so one thread that has no core (because another program holds it)
stalls the others: on a 2-core AMD EPYC with another program running, a float32 product took 15.5 ms
with 2 threads against 0.27 ms with 1, and the first `:train` showed an ETA of 45 minutes. On an idle
machine the second thread is worth having (the matrix products split across both cores).

So the `threads` setting (ShellConfig; 0 means auto) decides:
    N > 0                    exactly N threads; where N is more than the CPUs this process may use,
                             `:set` and `:device` say so (`oversubscribed`): the same kind of stall
    0 (auto)                 $MINITF_THREADS if set to a count (1 to 1024; 0 is auto, as the setting's 0 is,
                             and anything else is named as ignored where the choice is shown); else
                             cpus   = the CPUs this process may run on (os.sched_getaffinity);
                             cores  = cpus, capped by a cgroup CPU quota (docker --cpus, a Kubernetes CPU
                                      limit, systemd's CPUQuota: the tightest on the way down to this
                                      process's own cgroup, core/cgroup.py) and by torch's own default
                                      (physical cores, or OMP_NUM_THREADS where a launcher such as
                                      torchrun set it);
                             busy   = how many CPUs' worth of those cpus other processes kept busy,
                                      from /proc/stat minus this process's own time (/proc/self/stat);
                             free   = cpus less every one that is more than a quarter busy;
                             threads = the fewer of cores and free, at least 1.
A wrong guess costs little one way (a second idle core left unused: up to ~1.6x slower) and a lot
the other (an oversubscribed core: tens of times slower), hence the quarter.

The load is weighed against the CPUs it was measured on, not against the quota: a quota pins the
process to no core (the kernel lets it run on any of its cpus for so much time a period), so a
`docker --cpus=2` container on a 64-CPU host with 20 of them busy has 44 free and 2 threads. (It
took the 20 from the quota's 2 and said "1 (auto: 2 cores, 19.9 busy with other work)".) Other
processes in the same cgroup, which spend the quota too, are not taken from it either: when the
quota runs out the kernel stops the cgroup's threads, all of them, until the next period, so
torch's threads share the quota rather than wait at the barrier for one that has no core.

Auto looks once when the session first needs torch, again at the start of each training run (a
fresh sample of 0.2 s), and every few seconds while training (over the time since the last look,
which costs no waiting), so a program that starts or stops beside a long run moves the count.
Where /proc is not there (macOS, Windows) auto uses the cores alone.

This module imports torch only when it sets the count, so the shell can import it early.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from .cgroup import OWN, ROOT, folders as cgroup_folders
from .words import count

BUSY_SHARE = 0.25  # a core that other processes keep more than this busy does not get a thread
SAMPLE_SECONDS = 0.2  # a fresh look at the start of a run
REVISIT_SECONDS = 3.0  # while training: look again after this long, over the time since the last look
ENV = "MINITF_THREADS"


@dataclass(frozen=True)
class ThreadChoice:
    threads: int  # what torch computes with now
    how: str  # "auto", "setting" (threads=N) or "MINITF_THREADS"
    cores: int | None = None  # auto: the most threads it takes: cpus, capped by a CPU quota and by torch's default
    busy: float | None = None  # auto: CPUs' worth of the cpus that other processes used (None: not measurable here)
    ignored: str | None = None  # auto: a $MINITF_THREADS that is no count of threads, and why (env_threads)
    refused: str | None = None  # the count chosen, which torch would not take, and why (ThreadPolicy._apply)
    cpus: int | None = None  # auto: the CPUs busy was measured over, those this process may run on (None: unknown)
    quota: float | None = None  # auto: the cgroup CPU quota in cores (None: none)

    def describe(self) -> str:
        """e.g. "2 (auto: 2 cores, 0.0 busy with other work)", "1 (threads=1)"."""
        return f"{self.threads} ({self.why()})"

    def why(self) -> str:
        """e.g. "auto: 2 cores, 0.0 busy with other work", "threads=1", "$MINITF_THREADS=1"."""
        if self.refused:
            return self.refused
        if self.how in ("setting", ENV):
            cpus = available_cpus()
            named = f"threads={self.threads}" if self.how == "setting" else f"${ENV}={self.threads}"
            return named + (f", more than the {_cpus(cpus)} this process may use" if self.threads > cpus else "")
        if self.cpus is None or self.cpus == self.cores:  # the load was measured on the cores themselves
            cores, of = count(self.cores, "core"), ""
        else:
            # the load is counted on more CPUs than the count may use (a quota, torch's physical cores): say both,
            # and which caps the count ("2 cores, 19.9 busy" read as 19.9 of the 2 being busy)
            quota_caps = self.quota is not None and max(1, math.floor(self.quota)) == self.cores
            cap = f"a CPU quota of {self.quota:g}" if quota_caps else count(self.cores, "core")
            cores, of = f"{cap} on {count(self.cpus, 'CPU')}", " of them"
        busy = "load not measurable here" if self.busy is None else f"{self.busy:.1f}{of} busy with other work"
        return f"auto: {cores}, {busy}" + (f"; {self.ignored}" if self.ignored else "")


MAX_THREADS = 1024  # the `threads` setting's limit (session.ShellConfig), for $MINITF_THREADS too


def env_threads() -> tuple[int | None, str | None]:
    """$MINITF_THREADS read: (the count it fixes, None), or (None, why it is ignored) where it is set to no count of
    threads, or (None, None) where it is unset, blank or 0 (auto, as the setting's 0). It was read as max(1, int):
    0 and -3 fixed one thread, shown as "$MINITF_THREADS=1", and a word was ignored without a word."""
    text = os.environ.get(ENV, "").strip()
    if not text:
        return None, None
    try:
        value = int(text)
    except ValueError:
        return None, f"${ENV}={text!r} ignored: not a whole number of threads"
    if value == 0:
        return None, None
    if not 1 <= value <= MAX_THREADS:
        return None, f"${ENV}={text} ignored: a count of threads is 1 to {MAX_THREADS:,}, or 0 for auto"
    return value, None


# --- what this process may use ------------------------------------------------------------------------
_TORCH_DEFAULT: int | None = None


def torch_default_threads() -> int:
    """torch's own thread count as it started (physical cores, or OMP_NUM_THREADS), read once."""
    global _TORCH_DEFAULT
    if _TORCH_DEFAULT is None:
        import torch

        _TORCH_DEFAULT = torch.get_num_threads()
    return _TORCH_DEFAULT


@contextlib.contextmanager
def threads_kept():
    """torch's thread count as it was before the block, put back after it: for the shell run from Python (a
    notebook's or a script's main([...])), whose sessions set the count (ThreadPolicy) for a process that is its
    caller's; `threads=1` left the caller computing with 1 thread. Torch not imported before the block: the count
    it started with (torch_default_threads) where the block imported it."""
    import sys

    before = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    try:
        yield
    finally:
        if "torch" in sys.modules:
            torch = sys.modules["torch"]
            wanted = before if before is not None else torch_default_threads()
            if torch.get_num_threads() != wanted:
                try:
                    torch.set_num_threads(wanted)
                except (RuntimeError, ValueError):  # a runtime that keeps its count (ThreadPolicy._apply): as it is
                    pass


def affinity() -> set[int] | None:
    """The CPUs this process may run on (None where the platform cannot say)."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cgroup_quota(root: Path = ROOT, own: Path = OWN) -> float | None:
    """This process's CPU quota in cores, None if unlimited: the tightest of its own cgroup's and those above it (a
    quota holds for everything under it). It was read at the top of `root` alone, where a container with its own
    cgroup namespace has it; a systemd unit's CPUQuota or a `docker --cgroupns=host` container's sits lower down,
    in the folder /proc/self/cgroup (`own`) names, and auto gave every core a thread against a quota of 2."""
    quotas = [q for folder in cgroup_folders("cpu", root, own) if (q := _quota_in(folder)) is not None]
    return min(quotas) if quotas else None


def _quota_in(folder: Path) -> float | None:
    """The CPU quota set in one cgroup folder, in cores: cgroup v2's cpu.max or v1's cfs quota and period."""
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota = int((folder / "cpu.cfs_quota_us").read_text())
        period = int((folder / "cpu.cfs_period_us").read_text())
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def available_cpus() -> int:
    """The CPUs this process may run on, capped by a container's quota: more threads than this always
    wait for one another (no torch needed, so the shell can say so before torch has loaded)."""
    cpus = affinity()
    cores = len(cpus) if cpus else (os.cpu_count() or 1)
    quota = cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.floor(quota)))
    return max(1, cores)


def _cpus(n: int) -> str:
    return count(n, "CPU")


def cores_in_words() -> str:
    """The cores as :device's table and core.device.cpu_kind say them: "2 cores", or "64 cores, this process may use 2"
    where it may use fewer than the machine has (taskset, a cpuset, a CPU quota). available_cpus is the one count of
    what it may use, as the thread count and `oversubscribed` go by: the table said the machine's 2 cores beside
    "CPU threads: 1 (auto: 1 core, ...)" under `taskset -c 0`, and cpu_kind "None cores" where Python could not
    count them."""
    usable = available_cpus()
    machine = os.cpu_count() or usable  # the machine's CPUs (a container's cpuset does not hide them)
    if machine <= usable:
        return count(usable, "core")
    return f"{count(machine, 'core')}, this process may use {usable}"


def usable_cores() -> int:
    """available_cpus(), capped by torch's own default (physical cores: a second hyperthread adds little)."""
    return max(1, min(available_cpus(), torch_default_threads()))


def oversubscribed(threads: int) -> str | None:
    """None, or a line saying that `threads` fixed by hand is more than this process's CPUs and what that costs.

    Measured on a 2-core Xeon (`minitf --set threads=N train --steps 30`, bfloat16): 2 threads (auto)
    34,626 tokens/s, 4 threads 15,405 (2.2x slower), 99 threads 3,115 (11x slower).
    """
    cpus = available_cpus()
    if threads <= cpus:
        return None
    return (f"threads={threads} is more than the {_cpus(cpus)} this process may use: the extra "
            "threads wait for a core at every step, and training runs several times slower (threads=0 picks the "
            "count for you)")


# --- what other processes use --------------------------------------------------------------------
@dataclass(frozen=True)
class CpuReading:
    at: float  # time.monotonic()
    busy_ticks: int  # non-idle ticks of the CPUs this process may use, all processes together
    own_ticks: int  # this process's user + system ticks, all its threads
    cpus: int | None = None  # how many CPUs busy_ticks is summed over (None: not counted)


def read_cpu(proc: Path = Path("/proc")) -> CpuReading | None:
    """One reading of /proc/stat and /proc/self/stat (None where there is no such file)."""
    try:
        stat = (proc / "stat").read_text().splitlines()
        own = (proc / "self" / "stat").read_text()
    except OSError:
        return None
    cpus = affinity()
    busy = counted = 0
    for line in stat:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu":
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
        busy += ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]  # steal: another VM has the core
        counted += 1
    if not counted:  # none of this process's CPUs listed: no load to weigh them by
        return None
    fields = own[own.rindex(")") + 2 :].split()  # after "pid (comm) "; utime and stime are fields 14, 15
    return CpuReading(time.monotonic(), busy, int(fields[11]) + int(fields[12]), counted)


def busy_elsewhere(before: CpuReading, after: CpuReading) -> float | None:
    """CPUs' worth of time that other processes used between two readings, on the CPUs they were summed over."""
    seconds = after.at - before.at
    if seconds <= 0 or (None not in (before.cpus, after.cpus) and before.cpus != after.cpus):
        return None  # no time between them, or the affinity changed: the ticks of other CPUs
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    others = (after.busy_ticks - before.busy_ticks) - (after.own_ticks - before.own_ticks)
    return max(0.0, others / hz / seconds)


def threads_for(cores: int, busy: float | None, cpus: int | None = None) -> int:
    """The rule of the module docstring: of the `cpus` the load `busy` was measured on (the cores themselves where
    not given), every one more than BUSY_SHARE busy elsewhere is left out; the count is the fewer of `cores` and the
    CPUs left free. The load is taken from the CPUs it was measured on, never from a quota (module docstring)."""
    if busy is None:
        return cores
    taken = max(0, math.ceil(busy - BUSY_SHARE))
    free = (cores if cpus is None else cpus) - taken
    return max(1, min(cores, free))


# --- the policy ----------------------------------------------------------------------------------
class ThreadPolicy:
    """The `threads` setting carried out: `decide()` at a start, `revisit()` while a run goes on."""

    def __init__(self, setting: int = 0):
        self.setting = setting
        self.choice: ThreadChoice | None = None
        self._last: CpuReading | None = None

    def set(self, setting: int) -> None:
        """A new value of the setting, carried out at once if the policy has already been applied."""
        changed, self.setting = setting != self.setting, setting
        if changed and self.choice is not None:
            self.decide()

    def decide(self, sample: float = SAMPLE_SECONDS) -> ThreadChoice:
        """Choose and apply now; auto measures the other processes over a fresh `sample` of seconds."""
        fixed = self._fixed()
        if fixed is not None:
            return self._apply(fixed)
        before = read_cpu()
        if before is not None and sample > 0:
            time.sleep(sample)
        return self._auto(before)

    def revisit(self) -> ThreadChoice | None:
        """While training: look again if REVISIT_SECONDS have passed (no waiting); the new choice or None."""
        if self._fixed() is not None or self._last is None:
            return None
        if time.monotonic() - self._last.at < REVISIT_SECONDS:
            return None
        before = self.choice
        choice = self._auto(self._last)
        return choice if before is None or choice.threads != before.threads else None

    def _fixed(self) -> ThreadChoice | None:
        if self.setting:
            return ThreadChoice(self.setting, "setting")
        value, _ = env_threads()
        return ThreadChoice(value, ENV) if value is not None else None

    def _auto(self, before: CpuReading | None) -> ThreadChoice:
        after = read_cpu()
        busy = busy_elsewhere(before, after) if before is not None and after is not None else None
        self._last = after
        cores = usable_cores()
        cpus = after.cpus if after is not None else None
        choice = ThreadChoice(threads_for(cores, busy, cpus), "auto", cores, busy, env_threads()[1], cpus=cpus,
                              quota=cgroup_quota())
        return self._apply(choice)

    def _apply(self, choice: ThreadChoice) -> ThreadChoice:
        import torch

        torch_default_threads()  # read before the first change
        why = None
        if torch.get_num_threads() != choice.threads:
            # A torch built without OpenMP, or a runtime that a host program fixed, refuses a change (RuntimeError)
            # or keeps its count without a word: that was an internal error in every command that needed torch
            # (:train, :device, :gen), the session unusable, where torch computes as well with the count it has.
            try:
                torch.set_num_threads(choice.threads)
            except (RuntimeError, ValueError) as e:
                why = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
        have = torch.get_num_threads()
        if have != choice.threads:
            asked = {"setting": f"threads={choice.threads}", ENV: f"${ENV}={choice.threads}"}.get(
                choice.how, f"auto's {choice.threads}")
            refused = f": {why}" if why else ""
            refused = f"{asked} not taken by torch{refused}; it computes with the {have} it has"
            choice = dataclasses.replace(choice, threads=have, refused=refused)
        self.choice = choice
        return choice
