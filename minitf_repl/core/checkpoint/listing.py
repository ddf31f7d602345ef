"""Listing: one row per checkpoint in a folder, a broken one with the reason it cannot be used."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import CheckpointError
from .layout import (ANOTHER_DIR, MANIFEST, NAME, CheckpointInfo, check_folder_reachable, check_not_a_checkpoint,
                     damaged, path_error, steps_left)
from .values import check_manifest_values, own_evaluation
from .reads import manifest_bytes, not_regular, read_manifest, wrong_size


def list_checkpoints(directory) -> list[CheckpointInfo]:
    """The checkpoints in DIR, newest first. A broken one is listed with `error` set, never raised."""
    directory = Path(directory).expanduser()
    try:
        if not directory.exists():
            # none yet, and a save creates the folder; unless a file stands where a folder on the way must be
            # (`:ls` said ":save NAME writes one", and the save then failed)
            check_folder_reachable(directory)  # a file, or a symbolic link to nowhere, in the way
            return []
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is a file, not a directory; {ANOTHER_DIR}")
        check_not_a_checkpoint(directory)
        # Read as one moment of the folder: another session's rotation (autosave to autosave-1, ...) between the
        # reads of two rows listed one run twice (as autosave and as autosave-1) and the new run not at all. A
        # folder whose checkpoints moved meanwhile is read again (three times at most).
        for attempt in range(3):
            seen = _names_and_inodes(directory)
            rows = _rows(directory, sorted(seen))
            if attempt == 2 or _names_and_inodes(directory) == seen:
                break
    except OSError as e:
        raise path_error(directory, e) from None
    rows.sort(key=lambda r: r.name)
    rows.sort(key=lambda r: r.saved_at or "", reverse=True)
    return rows


# Folders an archiver adds beside what it packed: a zip made on macOS holds __MACOSX, its files' resource forks. A
# lesson's checkpoints unzipped into the folder listed it as a checkpoint that cannot be read, with a note. One that
# holds a manifest is a checkpoint saved under that name, and listed.
ARCHIVERS_FOLDERS = ("__MACOSX",)


def _names_and_inodes(directory: Path) -> dict[str, int | None]:
    """{name: its inode} of the folder's entries that may be checkpoints (None: gone before it was looked at); a
    rename changes it. The lock file and a save's temporary folder, which come and go with every save, are not, nor
    an archiver's folder (ARCHIVERS_FOLDERS)."""
    found = {}
    for entry in os.listdir(directory):
        if not NAME.match(entry) or _archivers(directory / entry):
            continue
        try:
            found[entry] = os.lstat(directory / entry).st_ino
        except OSError:
            found[entry] = None
    return found


def _rows(directory: Path, entries: list[str]) -> list[CheckpointInfo]:
    rows = []
    for entry in entries:
        path = directory / entry
        try:
            if not NAME.match(entry) or not path.is_dir() or _archivers(path):
                continue  # temporary directories start with '.'; plain files are not checkpoints
        except OSError:
            continue
        row = checkpoint_info(path)
        if row.error is not None and not os.path.lexists(path):
            continue  # removed (or rotated away) by another session's save since the folder was read: gone, not broken
        rows.append(row)
    return rows


def _archivers(path: Path) -> bool:
    """Whether `path` is a folder an archiver added (ARCHIVERS_FOLDERS) rather than a checkpoint: it holds no
    manifest."""
    try:
        return path.name in ARCHIVERS_FOLDERS and not os.path.lexists(path / MANIFEST)
    except (OSError, ValueError):
        return False


def misnamed(directory) -> list[str]:
    """Folders of DIR that hold a checkpoint (a manifest) under a name :load cannot take, sorted: renamed by hand
    ("my model"), so list_checkpoints leaves them out. A name starting with '.' is hidden on purpose (and a
    save's temporary folder): not one of them."""
    directory = Path(directory).expanduser()
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    found = []
    for entry in entries:
        if NAME.match(entry) or entry.startswith("."):
            continue
        try:
            if (directory / entry).is_dir() and os.path.lexists(directory / entry / MANIFEST):
                found.append(entry)
        except (OSError, ValueError):
            continue
    return found


def checkpoint_info(path: Path) -> CheckpointInfo:
    """One `:ls` row for the checkpoint directory `path`: size counts the files its manifest names.

    Whatever is wrong with one checkpoint (a field of the wrong type, an unreadable file, even a
    bug in reading it) becomes that row's `error`: one bad checkpoint never breaks the listing.
    """
    try:
        return _checkpoint_info(path)
    except Exception as e:  # noqa: BLE001 - CheckpointError is handled inside; this is the last guard
        return CheckpointInfo(name=path.name, step=None, val_loss=None, data_spec=None,
                              size_bytes=_dir_size(path), saved_at=None,
                              error=f"{path}: cannot be read ({type(e).__name__}); this checkpoint cannot be used")


def _checkpoint_info(path: Path) -> CheckpointInfo:
    for attempt in range(3):
        raw = None
        try:
            manifest, raw = read_manifest(path, exact=False)  # every value checked; a load checks every byte too
            config = check_manifest_values(path, manifest)
            size = len(raw)
            for entry in manifest["files"].values():
                where = path / entry["file"]
                try:
                    st = os.lstat(where)  # never opened here: a FIFO or a device costs nothing
                except OSError:
                    raise damaged(f"{where} is missing, so this checkpoint is incomplete") from None
                if not stat.S_ISREG(st.st_mode):
                    raise not_regular(where, st.st_mode)
                actual = st.st_size
                if actual != entry["size"]:
                    raise wrong_size(where, actual, entry["size"])
                size += actual
            break
        except CheckpointError as e:
            # Another session may have saved over this name between the read of its manifest and of its files
            # (the old files go after the commit): :ls said "missing; save it again" of a complete checkpoint.
            # A manifest that changed meanwhile is read again, as load_checkpoint does.
            if raw is not None and attempt < 2 and manifest_bytes(path) not in (None, raw):
                continue
            return CheckpointInfo(name=path.name, step=None, val_loss=None, data_spec=None,
                                  size_bytes=_dir_size(path), saved_at=None, error=str(e),
                                  needs=getattr(e, "needs", None))  # values.UndeclaredKind's: "norm=dyt"
    t = manifest["trainer"]
    # a one-expert mixture saved with the gate of 1 computes another function now: its losses are of that one
    evaluated = own_evaluation(manifest, config, t["history"])
    saved_at = manifest.get("saved_at")
    return CheckpointInfo(
        name=path.name, step=t["step"], val_loss=evaluated["val_loss"] if evaluated else None,
        val_step=evaluated.get("step") if evaluated else None, steps_left=steps_left(t),
        data_spec=manifest["data_spec"], size_bytes=size,
        # the settings a load builds, not the manifest's own: a checkpoint of an older minitf has none of the settings
        # that came later (norm_eps, residual, causal, ...), and `ls --json` gave a script a map without them
        saved_at=saved_at if isinstance(saved_at, str) else None, model_config=config.to_dict(),
        origin=(manifest.get("origin") or {}).get("kind"),  # checked by the manifest's values: one of ORIGINS
        trained_dtype=t.get("trained_dtype"),  # checked as well: float32, bfloat16 or absent
        trained_dtypes=dtypes_in_order(t.get("dtype_spans")),
    )


def dtypes_in_order(spans: list | None) -> list[str] | None:
    """The dtypes a trainer's dtype_spans ([first step, dtype, Newton-Schulz dtype]) ran in, in order, each stretch of
    one dtype once (a span that changed Newton-Schulz's alone is no other dtype of the steps); None: none recorded."""
    if not spans:
        return None
    dtypes = [spans[0][1]]
    for span in spans[1:]:
        if span[1] != dtypes[-1]:
            dtypes.append(span[1])
    return dtypes


def _dir_size(path: Path) -> int:
    total = 0
    try:
        for entry in os.scandir(path):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total

