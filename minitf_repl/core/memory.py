"""Give memory the program has freed back to the operating system, where the C library allows it.

PyTorch allocates tensors on the CPU with the C library's malloc. glibc keeps freed blocks in the
process for later use, so after training the process still holds what the steps used at their
peak (about 60 MB at the default model, measured with malloc_trim before and after). Saving a
checkpoint, drawing the results or evaluating afterwards then grows the process beyond that peak.
`release_freed()` hands the unused part back (glibc's malloc_trim): the trainer calls it when a run
ends. Elsewhere (macOS, Windows, musl) it does nothing. bench/memory.py measures the peak.

malloc_trim is looked up among the symbols the process has already loaded (`ctypes.CDLL(None)`:
the C library the interpreter itself runs on), not through `ctypes.util.find_library`, which on
Linux starts `/sbin/ldconfig -p` in a child process to find a file the process has mapped already.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from .cgroup import OWN, ROOT, folders as cgroup_folders

CGROUP = ROOT  # the cgroup file system; which of its folders hold this process's limits: core/cgroup.py
UNLIMITED = 2**60  # cgroup v1 writes "no limit" as a number near 2**63


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library this process already runs on (module docstring)
    except (OSError, AttributeError, TypeError):  # no glibc here (musl, macOS), or no CDLL(None) (Windows)
        return None


def available_memory(meminfo: Path = Path("/proc/meminfo"), cgroup: Path | None = None) -> int | None:
    """Bytes of memory free for new allocations now, None where unknown: Linux's MemAvailable, or less where a
    container's memory limit (cgroup_memory_left) leaves less. /proc/meminfo inside a container is the host's: a
    `docker run -m 2g` on a 64 GiB host said 60 GiB free, a training that needed 5 was let start, and the kernel
    ended the whole session at the limit (its unsaved work with it) instead of the one-line refusal."""
    free = None
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    left = cgroup_memory_left(CGROUP if cgroup is None else cgroup)
    return left if free is None else free if left is None else min(free, left)


def cgroup_memory_left(root: Path, own: Path = OWN) -> int | None:
    """Bytes the memory limits of this process's cgroup leave it: the least over its cgroup and those above it (a
    limit holds for everything under it), each its limit less what is used, with the inactive file cache (which the
    kernel reclaims before it kills) counted as free; None where no limit is set or none can be read.

    cgroup v2 (memory.max, memory.current) or v1 (memory/memory.limit_in_bytes, memory.usage_in_bytes), under
    `root`. A container usually sees its own cgroup at the root; elsewhere (a systemd slice with MemoryMax, a
    container without a cgroup namespace) /proc/self/cgroup (`own`) names the folder below it."""
    lefts = [left for folder in cgroup_folders("memory", root, own) if (left := _left_in(folder)) is not None]
    return min(lefts) if lefts else None


def _left_in(folder: Path) -> int | None:
    """What the limit of one cgroup folder leaves (None: no limit there, or no files of one)."""
    for limit_file, usage_file, inactive in (("memory.max", "memory.current", "inactive_file"),
                                             ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")):
        try:
            limit_text = (folder / limit_file).read_text().strip()
            if limit_text == "max":
                return None
            limit, used = int(limit_text), int((folder / usage_file).read_text())
        except (OSError, ValueError):
            continue
        if limit >= UNLIMITED:
            return None
        return max(0, limit - used + _stat_value(folder / "memory.stat", inactive))
    return None


def _stat_value(path: Path, key: str) -> int:
    """A memory.stat line's value (0 where the file or the line is not there)."""
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def release_freed() -> None:
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
