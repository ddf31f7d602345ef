"""The engine: torch only, never a UI library. Each module is named for what it holds."""

__version__ = "0.1.0"  # here, not in the package root, so that core modules (checkpoints) need nothing above core
