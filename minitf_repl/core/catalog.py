"""The built-in data by name, without torch: what `core.data.load_data` accepts besides a file path.

The shell completes these names, and its help and messages list them, before torch has loaded
(core.data imports it), so they are written here once and core.data reads them from here too.
"""

from __future__ import annotations

CORPORA = ("pydoc", "shakespeare")  # text: a 90/10 train/validation split of one document
# Synthetic tasks, each with the letter its spec's size argument goes by: `sort:8`, `random:20`.
TASK_ARGUMENTS = {"sort": "N", "reverse": "N", "add": "N", "random": "V", "repeat": "V"}
TASKS = tuple(TASK_ARGUMENTS)


def spec_forms() -> tuple[str, ...]:
    """How each built-in data spec is written: pydoc, shakespeare, sort[:N], ..., random[:V]."""
    return CORPORA + tuple(f"{task}[:{letter}]" for task, letter in TASK_ARGUMENTS.items())
