"""core.memory.release_freed: what the steps freed goes back to the system, without a child process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from minitf_repl.core import memory

GLIBC = sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc"


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_malloc_trim_is_found_without_starting_a_process(monkeypatch):
    """ctypes.util.find_library would run /sbin/ldconfig in a child: the lookup must not start one."""

    def no_child(*args, **kwargs):
        raise AssertionError(f"a child process was started: {args[:1]}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_child)
    monkeypatch.setattr(os, "posix_spawn", no_child, raising=False)
    memory._malloc_trim.cache_clear()
    try:
        assert memory._malloc_trim() is not None
        memory.release_freed()
    finally:
        memory._malloc_trim.cache_clear()


@pytest.mark.skipif(not GLIBC, reason="malloc_trim is glibc's")
def test_release_freed_hands_freed_heap_back():
    """Many small tensors freed stay resident under glibc until release_freed; after it, most are gone.

    Run in a fresh interpreter so that the heap and its resident size are this test's alone."""
    script = textwrap.dedent("""
        import torch
        from minitf_repl.core.memory import release_freed

        def rss_mb():
            for line in open("/proc/self/status"):
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1024

        base = rss_mb()
        keep = [torch.ones(16 * 1024) for _ in range(4000)]  # 64 KB each, under malloc's mmap threshold: 250 MB
        grown = rss_mb()
        del keep
        freed = rss_mb()
        release_freed()
        print(base, grown, freed, rss_mb())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    base, grown, freed, released = map(float, out.split())
    assert grown - base > 200  # the tensors were resident
    assert released < freed - 150, (base, grown, freed, released)  # and release_freed gave most of them back


def test_release_freed_does_nothing_without_malloc_trim(monkeypatch):
    memory._malloc_trim.cache_clear()
    monkeypatch.setattr(memory.ctypes, "CDLL", lambda name: (_ for _ in ()).throw(OSError("no such library")))
    try:
        assert memory._malloc_trim() is None
        memory.release_freed()  # no error
    finally:
        memory._malloc_trim.cache_clear()
