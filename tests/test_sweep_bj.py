"""Findings of the fifty-second session's sweep (AMD EPYC Zen 4), each test failing before its fix."""

from __future__ import annotations

import pytest
from test_sweep_bi import complete_as_bash_splits


@pytest.mark.parametrize("line, offered", [
    ("minitf --set norm=", ["layernorm", "rmsnorm"]),  # was the command names: Click read `norm` as --set's value
    ("minitf --set norm=r", ["rmsnorm"]),  # was rope, resid, report
    ("minitf --set norm=rmsnorm --set optimizer=ad", ["adamw"]),
    ("minitf --set norm=rmsnorm train --st", ["--steps"]),  # was nothing: '=' taken for a command, train's options lost
    ("minitf --set prompt=a=b gen --temp", ["--temperature"]),  # a value with '=' in it
    ("minitf set norm=rmsnorm opt", ["optimizer="]),
])
def test_bash_completes_after_the_global_set_option(line, offered):
    assert complete_as_bash_splits(line) == offered
