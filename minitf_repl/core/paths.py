"""Where minitf keeps files: checkpoints and downloads. Torch-free, so the shell can ask early."""

from __future__ import annotations

import os
from pathlib import Path

CHECKPOINT_ENV = "MINITF_CHECKPOINT_DIR"
CACHE_ENV = "MINITF_CACHE_DIR"


def default_checkpoint_dir() -> Path:
    """`$MINITF_CHECKPOINT_DIR` if set, else `./checkpoints` under the current directory."""
    env = os.environ.get(CHECKPOINT_ENV)
    return Path(env).expanduser() if env else Path("checkpoints")


def cache_dir() -> Path:
    """`$MINITF_CACHE_DIR`, else `$XDG_CACHE_HOME/minitf`, else `~/.cache/minitf`: downloaded corpora."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "minitf"
