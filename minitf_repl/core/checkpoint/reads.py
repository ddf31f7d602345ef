"""Reading checkpoint files, bounded before a byte is read.

Every file is opened without blocking (a FIFO cannot hang a load) and without following a
symbolic link, then checked with `fstat` on the open descriptor: only a regular file of exactly the
size its manifest records is read, and no more than its caller's limit (core.checkpoint.loading's
`size_limits`); a manifest may have MAX_MANIFEST_BYTES. A data file's SHA-256 is checked before
safetensors parses it, and a pickle is recognised and refused unopened.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CheckpointError
from ..words import count
from .layout import MANIFEST, MAX_MANIFEST_BYTES, NAME, SAVE_AGAIN, damaged, is_pickle, other_files
from .manifest import parse_manifest

if TYPE_CHECKING:  # torch is imported where a data file is read, not for a manifest (:ls reads only those)
    import torch


_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0) \
    | getattr(os, "O_CLOEXEC", 0)
_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


def not_regular(where: Path, mode: int) -> CheckpointError:
    kind = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
    if stat.S_ISDIR(mode):
        return damaged(f"{where} is a directory, not a file, so this checkpoint cannot be used")
    return damaged(f"{where} is not a regular file ({kind}), so this checkpoint cannot be used")


def wrong_size(where: Path, size: int, written: int) -> CheckpointError:
    """A data file whose size is not the one written: shorter is truncated; longer was added to or replaced (the
    same words from :ls and :load)."""
    how = "truncated" if size < written else "added to or replaced"
    return damaged(f"{where} has {count(size, 'byte', grouped=False)} but {written} were written ({how})")


def open_regular(where: Path) -> tuple[int, int]:
    """(fd, size) of the regular file `where`, checked before a byte of it is read.

    `lstat` first, so that a device or FIFO in a checkpoint is never even opened; then an open that
    cannot block (O_NONBLOCK: a FIFO swapped in meanwhile) and does not follow a final symlink
    (O_NOFOLLOW), and `fstat` on the descriptor, which is what will be read. Raises OSError
    (FileNotFoundError: missing) for the caller to word, CheckpointError for anything not regular.
    """
    mode = os.lstat(where).st_mode
    if not stat.S_ISREG(mode):
        raise not_regular(where, mode)
    fd = os.open(where, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise not_regular(where, st.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_open(fd: int, size: int) -> bytes:
    """`size` bytes from the start of the open file `fd` (fewer only if it shrank meanwhile); closes it."""
    with os.fdopen(fd, "rb") as f:
        return f.read(size)  # a buffered read: loops until `size` bytes or the end of the file


def read_manifest_bytes(where: Path) -> bytes:
    """The bytes of a manifest, refused unread if it is not a regular file of at most MAX_MANIFEST_BYTES."""
    fd, size = open_regular(where)
    if size > MAX_MANIFEST_BYTES:
        os.close(fd)
        raise CheckpointError(
            f"{where} is {count(size, 'byte', grouped=False)}, more than the {MAX_MANIFEST_BYTES // 2**20} MiB a manifest may have; "
            "it is not a minitf checkpoint"
        )
    return read_open(fd, size)


def manifest_bytes(path) -> bytes | None:
    """The bytes of DIR/NAME's checkpoint.json as it is now, or None if there is none readable.

    For a caller that wants to tell whether a save committed (compare before and after): read the
    same bounded, non-blocking way as a load, so a FIFO or a huge file there cannot hang it.
    """
    try:
        return read_manifest_bytes(Path(path) / MANIFEST)
    except (OSError, CheckpointError):
        return None


def read_manifest(path: Path, exact: bool = True) -> tuple[dict, bytes]:
    """The manifest of the checkpoint at `path`, checked (parse_manifest: exact=False checks the values alone), and
    its bytes."""
    where = path / MANIFEST
    try:
        raw = read_manifest_bytes(where)
    except FileNotFoundError:
        if _is_file(path / "config.json"):  # `:save hf:checkpoints/gpt2` puts one here: never "remove that directory"
            raise CheckpointError(f"{path} is a Hugging Face folder, not a lab checkpoint; load it as "
                                  f"hf:{path}") from None
        if holds_checkpoints(path):  # the folder of checkpoints one level down (a checkpoint folder set too high)
            raise CheckpointError(f"{path} is a folder of checkpoints, not a checkpoint; use it as the checkpoint "
                                  "folder to load them") from None
        if _holds_folders(path):  # a checkpoint holds files alone: this is some other folder, never one to remove
            raise CheckpointError(f"{path} is not a checkpoint (no {MANIFEST}, and it holds folders)") from None
        try:
            others = other_files(path)
        except OSError:
            others = None
        if others:  # a user's files (notes, a dataset), which :save refuses to write among: never "remove" them
            raise CheckpointError(f"{path} is not a checkpoint (no {MANIFEST}; it holds {others})") from None
        # an interrupted copy among them: both ways on (SAVE_AGAIN), and the folder's own way out
        raise CheckpointError(f"{path} has no {MANIFEST}, so it is not a complete checkpoint; {SAVE_AGAIN}, or "
                              "remove that directory") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {where}: {e.strerror or e}; check its permissions") from None
    return parse_manifest(raw, where, exact), raw


def holds_checkpoints(path: Path, most: int = 1000) -> bool:
    """Whether one of the first `most` entries of the folder `path` is a checkpoint (holds a manifest)."""
    try:
        with os.scandir(path) as entries:
            for n, entry in enumerate(entries):
                if n >= most:
                    return False
                if entry.is_dir(follow_symlinks=False) and _is_file(Path(entry.path) / MANIFEST):
                    return True
    except OSError:
        return False
    return False


def _holds_folders(path: Path, most: int = 1000) -> bool:
    """Whether one of the first `most` entries of the folder `path` is a folder."""
    try:
        with os.scandir(path) as entries:
            return any(entry.is_dir(follow_symlinks=False) for _, entry in zip(range(most), entries))
    except OSError:
        return False


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def read_data_file(path: Path, entry: dict, limit: int) -> dict[str, torch.Tensor]:
    """The tensors of one data file; at most `limit` bytes (see size_limits) are ever read."""
    where = path / entry["file"]
    if entry["size"] > limit:
        raise damaged(f"{where} is recorded as {count(entry['size'], 'byte', grouped=False)}, more than its model "
                      f"config can need ({limit}), so this checkpoint cannot be used")
    try:
        fd, size = open_regular(where)
        if size != entry["size"]:
            with os.fdopen(fd, "rb") as f:
                head = f.read(9)  # only to say "pickle" rather than "wrong size" for a torch.save file
            if is_pickle(head):
                raise damaged(f"{where} is a pickle (torch.save) file, which minitf never opens because it can "
                              "run code")
            raise wrong_size(where, size, entry["size"])
        raw = read_open(fd, size)
    except FileNotFoundError:
        raise damaged(f"{where} is missing, so this checkpoint is incomplete") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {where}: {e.strerror or e}; check its permissions") from None
    if is_pickle(raw):
        raise damaged(f"{where} is a pickle (torch.save) file, which minitf never opens because it can run code")
    if len(raw) != entry["size"]:  # it shrank while being read
        raise wrong_size(where, len(raw), entry["size"])
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise damaged(f"{where} does not match its checksum (corrupted)")
    import safetensors.torch

    try:
        return safetensors.torch.load(raw)
    except Exception as e:  # SafetensorError and friends: a file that passed its checksum but is not safetensors
        raise damaged(f"{where} is not a readable safetensors file ({e})") from None


# Who wrote a checkpoint, read from its manifest alone (torch-free: :ls asks it of the autosave slots)
LEGACY_ORIGIN = "legacy"  # a checkpoint from before `origin` was recorded


def origin_kind(path: Path) -> str | None:
    """Who wrote the checkpoint at `path`: an ORIGINS kind, LEGACY_ORIGIN, or None (nothing there, or unreadable)."""
    try:
        manifest, _ = read_manifest(path)
    except (CheckpointError, OSError):
        return None
    origin = manifest.get("origin")
    return LEGACY_ORIGIN if origin is None else origin["kind"]


def rotation_owns(path: Path) -> bool:
    """Whether autosave rotation (store._rotate_locked) moves the checkpoint at `path` along its slots: an autosave,
    or one older than `origin`, by its manifest (its data files are not read: a damaged autosave moves on like any
    other). Any other (a save by name, a model kept before a rebuild, a manifest that does not read) holds its slot."""
    return origin_kind(path) in ("autosave", LEGACY_ORIGIN)


# What else a checkpoint must hold, beyond the same weights at the same step, to bring the same model back: the
# settings it computes with (causal=off keeps the weights and changes the function), its vocabulary and its data
SAME_MODEL = ("model_config", "vocab", "data_spec", "measured_since_step")


def same_model(manifest: dict) -> dict:
    """The fields of a manifest (SAME_MODEL) that another checkpoint must hold alike to stand for its model."""
    return {key: manifest.get(key) for key in SAME_MODEL}


def holding(directory, model: dict, step: int, besides=(), same_file: Path | None = None,
            like: dict | None = None) -> str | None:
    """The name of a checkpoint of DIR (none of `besides`) that loads the weights `model` fingerprints at `step`, else
    None. `model`: a manifest's entry of its model file (its "sha256" and "size"); `like`: same_model() of the
    model's own manifest, which the holder's must equal (its settings, vocabulary and data). An autosave never
    holds a model for keeps: rotation moves it on and deletes it four runs later (`:save best` after a :train, then
    a rebuild's `:save best`, was told the autosave held the trained best, which the fourth next run deleted).

    Why (issue "a session that only loads fills the folder with kept-* copies"): a model is in a checkpoint where one
    in the folder loads these very weights, at this step, back, whichever save wrote them. The checksum of one save's
    manifest (its time, its origin) was looked for alone, so a model loaded from `big` and saved over there by another
    session was "in no checkpoint" while `other`, which `big` had been saved from, held it: each :load kept it again
    (17 MB a time), and each :save over a further-trained `big` too. The optimizer's state file is not compared: its
    bytes follow the order its tensors were made in (a run's, or a load's), the same values in another layout. A
    candidate counts only where its model file holds the bytes its manifest says: it is `same_file` (a hard link),
    or its SHA-256 is computed, so a file changed behind its manifest's back never stands for the model.
    """
    directory = Path(directory)
    digest, size = model.get("sha256"), model.get("size")
    if not isinstance(digest, str) or not isinstance(size, int):
        return None
    try:
        names = sorted(e.name for e in os.scandir(directory) if e.name not in besides and NAME.match(e.name))
    except OSError:
        return None
    for name in names:
        try:
            raw = read_manifest_bytes(directory / name / MANIFEST)
            if digest.encode() not in raw:  # a folder of long runs' manifests is skipped unparsed
                continue
            manifest = json.loads(raw)
            entry = manifest["files"]["model"]
            if entry["sha256"] != digest or entry["size"] != size or manifest["trainer"]["step"] != step:
                continue
            origin = manifest.get("origin")
            if (LEGACY_ORIGIN if origin is None else origin.get("kind")) in ("autosave", LEGACY_ORIGIN):  # rotation's
                continue
            if like is not None and same_model(manifest) != like:
                continue
            if _holds_bytes(directory / name / entry["file"], digest, size, same_file):
                return name
        except (OSError, CheckpointError, ValueError, KeyError, TypeError):
            continue
    return None


def _holds_bytes(path: Path, digest: str, size: int, same_file: Path | None) -> bool:
    """Whether the regular file `path` holds `size` bytes of SHA-256 `digest` (read in blocks: a model of gigabytes)."""
    if same_file is not None:
        try:
            if os.path.samefile(path, same_file) and not os.path.islink(path):
                return True
        except OSError:
            pass
    fd, found = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        if found != size:
            return False
        sha = hashlib.sha256()
        while block := f.read(2**20):
            sha.update(block)
    return sha.hexdigest() == digest
