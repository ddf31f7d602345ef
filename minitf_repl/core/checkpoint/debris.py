"""What saves cut short (kill -9, a machine that went down) left in a checkpoint folder, for :ls and :load to say.

A save writes a new NAME into a temporary folder `.NAME.tmp-<pid>-<id>/` that it renames into place, and an existing
NAME's new data files beside the old ones (store.py). A save killed before its commit leaves those behind: they load
as nothing and the next save into the folder removes them, but until then `du` counted a copy of the model per
killed save that :ls never showed, and `:load NAME` of a new NAME said only that there was none ("did you mean ...").

Whether a save is still writing them is told by the folder lock (locks.held_now), never by the pid in their names
(two PID namespaces on one volume share pids): what is there before and after a moment when no save held the lock was
there at that moment too (every name a save writes is new), so no save was making it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckpointError
from .locks import held_now
from .names import DATA_FILE, MANIFEST, MANIFEST_TMP, NAME, TMP_DIR
from .reads import read_manifest_bytes


@dataclass(frozen=True)
class Leftover:
    """What saves of one name that were cut short left: the next save into the folder removes it."""

    name: str  # the checkpoint those saves were writing
    # True: data files in NAME's own folder that its manifest does not name (saves over NAME); False: temporary
    # folders beside it, of saves that never made NAME at all (a new NAME) or never committed
    inside: bool
    size_bytes: int  # what removing them frees: a file that a checkpoint shares by a hard link frees nothing
    count: int  # how many temporary folders (inside=False) or files (inside=True)


def leftovers(directory) -> list[Leftover]:
    """What cut-short saves left in DIR, by name (temporary folders first, then files inside checkpoints); none while
    a save runs there, which may be writing any of it."""
    directory = Path(directory).expanduser()
    before = _found(directory)
    if not before or held_now(directory):
        return []
    after = _found(directory)
    by_name: dict[tuple[bool, str], list[int]] = {}
    for key in sorted(before.keys() & after.keys()):
        name, inside, size = after[key]
        total = by_name.setdefault((inside, name), [0, 0])
        total[0] += size
        total[1] += 1
    return [Leftover(name=name, inside=inside, size_bytes=size, count=n)
            for (inside, name), (size, n) in sorted(by_name.items())]


def unfinished(directory, name: str) -> Leftover | None:
    """The temporary folders that saves of NAME, cut short, left in DIR (:load's word where no NAME is there)."""
    return next((found for found in leftovers(directory) if found.name == name and not found.inside), None)


def in_words(found: Leftover) -> str:
    """`found`'s size in words, as :load's error gives it (the core has no renderer: render.fmt.size's spelling)."""
    size = found.size_bytes
    return f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 2**10:.1f} KiB" if size >= 2**10 else f"{size} B"


def _found(directory: Path) -> dict[str, tuple[str, bool, int]]:
    """{path in DIR: (checkpoint name, inside, bytes freed)} of every file or folder a save writes before its commit
    that is there now: temporary folders, and the data files and temporary manifests a checkpoint's manifest does not
    name (only where it reads: what store's _remove_dead_strays removes)."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return {}
    found = {}
    for entry in entries:
        path = directory / entry
        try:
            if path.is_symlink() or not path.is_dir():
                continue
            tmp = TMP_DIR.match(entry)
            if tmp:
                found[entry] = (tmp.group(1), False, sum(_freed(path / f) for f in os.listdir(path)))
                continue
            if not NAME.match(entry):
                continue
            inside = os.listdir(path)
        except OSError:
            continue
        if sum(1 for f in inside if DATA_FILE.match(f)) <= 2 and not any(MANIFEST_TMP.match(f) for f in inside):
            continue  # a checkpoint's own two files: its manifest is not read (a listing of hundreds stays quick)
        named = _named_files(path)
        if not named:
            continue
        for f in inside:
            if f not in named and (DATA_FILE.match(f) or MANIFEST_TMP.match(f)):
                found[f"{entry}/{f}"] = (entry, True, _freed(path / f))
    return found


def _named_files(checkpoint: Path) -> set[str]:
    """The data files a checkpoint's manifest names; none where it does not read (store's _referenced_files)."""
    try:
        manifest = json.loads(read_manifest_bytes(checkpoint / MANIFEST))
        names = {entry["file"] for entry in manifest["files"].values()}
    except Exception:  # noqa: BLE001 - a manifest that does not read: nothing is judged debris, as a save judges it
        return set()
    return {n for n in names if isinstance(n, str) and DATA_FILE.match(n)}


def _freed(path: Path) -> int:
    """The bytes removing the file `path` frees: its size where no other name links to it."""
    try:
        st = os.lstat(path)
    except OSError:
        return 0
    return st.st_size if st.st_nlink <= 1 else 0


def cut_short_said(error: CheckpointError, directory, name: str) -> CheckpointError:
    """layout.checkpoint_path's "no checkpoint named NAME in DIR" with ", where a save of NAME never finished (...)"
    after DIR where saves of NAME cut short left their temporary folders there; else `error` itself. `:load big2`
    after a `:save big2` killed halfway said "no checkpoint named 'big2'; did you mean big?", as if the save had never
    run, while 17 MiB of it sat hidden in the folder. (Added here, by the callers of checkpoint_path, since layout.py
    sits under this module.)"""
    said, where = str(error), f"in {directory}"
    if not said.startswith(f"no checkpoint named {name!r} {where}") or (found := unfinished(directory, name)) is None:
        return error
    saves = "a save" if found.count == 1 else f"{found.count} saves"
    cut = (f", where {saves} of {name} never finished (a minitf killed while saving?), leaving {in_words(found)} "
           "that the next save into that folder removes")
    return CheckpointError(said.replace(where, where + cut, 1))
