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


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library this process already runs on (module docstring)
    except (OSError, AttributeError, TypeError):  # no glibc here (musl, macOS), or no CDLL(None) (Windows)
        return None


def available_memory() -> int | None:
    """Bytes of memory free for new allocations now (Linux's MemAvailable), None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def release_freed() -> None:
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
