"""Where minitf keeps files (core/paths.py): platformdirs' cache and state dirs, the variables that move
them, the history's one-time move out of the data dir, and the one table that documents them all."""

from __future__ import annotations

import re
from pathlib import Path

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from minitf_repl import repl
from minitf_repl.core import paths
from minitf_repl.session import Session

REPO = Path(__file__).resolve().parents[1]


def test_the_cache_is_platformdirs_cache_dir_unless_moved(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    assert paths.cache_dir() == tmp_path / "xdg-cache" / "minitf"
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path / "mine"))
    assert paths.cache_dir() == tmp_path / "mine"


def test_the_history_is_state_not_data(monkeypatch, tmp_path):
    monkeypatch.delenv("MINITF_HISTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert paths.history_path() == tmp_path / "state" / "minitf" / "history"
    assert paths.old_history_path() == tmp_path / "data" / "minitf" / "history"


def _old_history(monkeypatch, tmp_path) -> Path:
    monkeypatch.delenv("MINITF_HISTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    old = tmp_path / "data" / "minitf" / "history"
    old.parent.mkdir(parents=True)
    old.write_text("\n# 2026-01-01\n+:train steps=50\n")
    return old


def test_the_old_history_moves_to_the_state_dir_once(monkeypatch, tmp_path):
    old = _old_history(monkeypatch, tmp_path)
    note = paths.adopt_old_history()
    new = tmp_path / "state" / "minitf" / "history"
    assert note == f"moved the history from {old} to {new}"
    assert not old.exists() and "+:train steps=50" in new.read_text()
    assert paths.adopt_old_history() is None  # once


def test_an_existing_new_history_is_never_overwritten(monkeypatch, tmp_path):
    old = _old_history(monkeypatch, tmp_path)
    new = tmp_path / "state" / "minitf" / "history"
    new.parent.mkdir(parents=True)
    new.write_text("\n+:gen\n")
    assert paths.adopt_old_history() is None
    assert old.exists() and new.read_text() == "\n+:gen\n"


def test_a_chosen_history_file_is_left_alone(monkeypatch, tmp_path):
    old = _old_history(monkeypatch, tmp_path)
    monkeypatch.setenv("MINITF_HISTORY", str(tmp_path / "mine"))
    assert paths.adopt_old_history() is None and old.exists()


def test_the_repl_reads_the_moved_history_and_says_so(monkeypatch, tmp_path):
    _old_history(monkeypatch, tmp_path)
    out = Console(width=100, color_system=None, record=True)
    with create_pipe_input() as inp:
        inp.send_text(":q\r")
        assert repl.run_repl(Session(), out, out, input=inp, output=DummyOutput()) == 0
    assert "moved the history from" in out.export_text()
    history = (tmp_path / "state" / "minitf" / "history").read_text()
    assert "+:train steps=50" in history and "+:q" in history


def _documented_variables() -> dict[str, str]:
    """The table under "Files and environment variables" in docs/commands.md: variable -> its row."""
    text = (REPO / "docs" / "commands.md").read_text()
    section = text.split("## Files and environment variables", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name: row for row in rows for name in re.findall(r"`([A-Z_]+)`", row.split("|")[1])}


def test_every_variable_minitf_reads_is_in_the_one_table():
    read = set()
    for path in [*(REPO / "minitf_repl").rglob("*.py"), REPO / "dev"]:
        read |= set(re.findall(r"\b(MINITF_[A-Z_]+)\b", path.read_text()))
    documented = _documented_variables()
    assert read <= set(documented), sorted(read - set(documented))
    for name in ("XDG_CACHE_HOME", "XDG_STATE_HOME", "NO_COLOR"):
        assert name in documented
