"""A command's freed working memory goes back to the system when it ends, not at the next :train (a tester's finding:
glibc kept what :muon, :grad or :context freed, 30 to 120 MB, for the rest of a session of views)."""

from pathlib import Path

import pytest

from minitf_repl.core.config import ModelConfig
from minitf_repl.core.memory import release_freed
from minitf_repl.dispatch import run_command
from minitf_repl.session import Session

STATUS = Path("/proc/self/status")


def _anonymous_rss() -> int:
    """Bytes of this process's anonymous resident memory (its heap: what malloc holds), from /proc."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    pytest.skip("no RssAnon in /proc/self/status here")


@pytest.mark.skipif(not STATUS.exists(), reason="reads /proc (Linux)")
def test_a_view_gives_back_what_it_freed(tmp_path):
    """:grad on the default model works through some 30 MB (a batch's activations, every gradient); once it has ended
    the process holds at most a few MB more than before it (before: all of it, until the next :train's own trim).
    A first :muon raises glibc's mmap threshold as a session's first large frees do (its larger blocks were mapped
    and unmapped, which hid the heap's keeping), and a trim sets the level measured from."""
    session = Session(ModelConfig(), data_spec="sort", device_name="cpu", checkpoint_dir=tmp_path)
    run_command(session, "muon", {})
    release_freed()
    before = _anonymous_rss()
    run_command(session, "grad", {})
    grown = _anonymous_rss() - before
    assert grown < 12 * 2**20, f"{grown / 2**20:.1f} MB more held after :grad"
