"""Give memory the program has freed back to the operating system, where the C library allows it.

PyTorch allocates tensors on the CPU with the C library's malloc. glibc keeps freed blocks in the
process for later use, so after training the process still holds what the steps used at their
peak (about 60 MB at the default model, measured with malloc_trim before and after). Saving a
checkpoint, drawing the results or evaluating afterwards then grows the process beyond that peak.
`release_freed()` hands the unused part back (glibc's malloc_trim): the trainer calls it when a run
ends. Elsewhere (macOS, Windows, musl) it does nothing. bench/memory.py measures the peak.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # no glibc here
        return None


def release_freed() -> None:
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
