"""Every test runs with its own checkpoint folder, history file and data dirs: nothing a test does
lands in the repository's checkpoints/ or in the user's home."""

import pytest


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(home / "checkpoints"))
    monkeypatch.setenv("MINITF_HISTORY", str(home / "history"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))


@pytest.fixture
def checkpoint_dir(_isolated_user_dirs):
    """The folder this test's sessions save to ($MINITF_CHECKPOINT_DIR; a save creates it)."""
    import os
    from pathlib import Path

    return Path(os.environ["MINITF_CHECKPOINT_DIR"])
