"""Checkpoints: save a model and its training state, load it back exactly, list what is saved.

A checkpoint is a directory `DIR/NAME/` holding three files:

    checkpoint.json               the manifest, and the commit point: configs, vocabulary, data spec,
                                  run position, loss history, optimizer settings, and the size and
                                  SHA-256 of each data file; `meta_sha256` covers all of it
    model-<id>.safetensors        the weights (the tied lm_head.weight stored once, as token_embedding.weight)
    state-<id>.safetensors        the optimizer's state (`optim.<param index>.<key>`: AdamW's moments and
                                  step, Muon's momentum_buffer) and the random number generators: the
                                  trainer's batch generator (`rng.data`), torch's global CPU generator
                                  (`rng.torch`, it draws the dropout masks), `rng.cuda.<i>`

Nothing here unpickles: safetensors holds raw tensors and JSON holds the rest, so opening a
checkpoint someone sent you cannot run their code. Every file is checked before any of it is used.

Saving is atomic. A new NAME is written into a hidden temporary directory that is renamed into
place; an existing NAME gets new data files under fresh ids, then a new checkpoint.json replaces the
old one in one `os.replace`, and only then are the old data files deleted. Whatever stops a save
(a full disk, Ctrl-C, a killed process), the previous checkpoint of that name still loads, and a
half-written one is never visible: temporary names start with '.', and files that no manifest
names are ignored (the next save of that name removes them).

Saves are safe under concurrency. Every save (and every rotation of autosaves) holds the folder's
lock, `DIR/.minitf.lock`, from before it touches anything until it is done, so two sessions, two
processes or two machines saving into one folder take turns instead of deleting each other's
files. The lock is `flock` on that file where the file system has it (the kernel releases it when
its holder dies, however it dies; two containers sharing a volume share the kernel's lock too),
else an exclusive-create file `DIR/.minitf.lock.held` whose owner (a random token, the host, the
pid, the PID namespace and the boot) is written into it, so that a lock left by a dead process is
recognised on the host and in the PID namespace it came from and nowhere else. Because a save
holds the lock, whatever temporary file it finds in the folder belongs to a save that died and
is removed; no pid is ever trusted for that (two PID namespaces have the same pids). A save
waits up to LOCK_WAIT seconds for another one, then fails in one line naming who holds the lock.
Each checkpoint records who wrote it (`origin`: a save, an autosave, a model kept before a
rebuild), so that `rotate` moves and deletes only autosaves, never a checkpoint a user named
`autosave-3`. A save may share the bytes of an identical data file of another checkpoint in the
folder (a hard link: see `_write_or_link`).

Reading is bounded before it starts. Every file is opened without blocking (a FIFO cannot hang a
load) and without following a symbolic link, then checked with `fstat` on the open descriptor: only
a regular file of exactly the size its manifest records is read, and that size must fit what the
model's config can need (see `_size_limits`); the manifest itself may have `_MAX_MANIFEST_BYTES`.
A hostile or broken checkpoint therefore costs at most about the memory of the model it describes,
and what the manifest claims is checked against the bytes before any work scales with it: the
config's parameter count (arithmetic, core.sizes) must fit the model file's recorded size before
a model is built, and the sizes are read from a one-block model on the meta device, so a manifest
that claims 20,000 layers for a few kilobytes of weights is refused at once. Every field of the
manifest is validated (configs, each loss-history row, the strings a listing shows), and weights
or optimizer moments that are not finite are refused: a model holding NaN cannot generate or train.

Loading validates everything and returns a `Checkpoint`; `build_model`, `restore_trainer` and
`restore_rng` then apply it. A caller restores into a fresh model and trainer and swaps them in only
when all of that succeeded, so a bad checkpoint never leaves the session half-changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import socket
import stat
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import safetensors.torch
import torch

from . import __version__
from .config import ModelConfig, TrainConfig
from .errors import CheckpointError, ConfigError
from .paths import default_checkpoint_dir
from .model import MiniTransformerLM
from .sizes import check_trainable, parameter_count
from .optimizers import group_kind
from .train import Trainer
from .words import count

FORMAT_VERSION = 1
FORMAT_NAME = "minitf-checkpoint"
MANIFEST = "checkpoint.json"

_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")
# Every name a save writes carries 64 random bits (after the writer's pid, which only helps a person
# trace debris): two saves never pick the same name. Whether a file is debris is decided by the
# folder lock (a save holds it), never by the pid: two PID namespaces on one volume share pids.
_DATA_FILE = re.compile(r"^(model|state)-(\d+)-([0-9a-f]+)\.safetensors$")
_MANIFEST_TMP = re.compile(r"^\.checkpoint\.json\.tmp-(\d+)-([0-9a-f]+)$")
_TMP_DIR = re.compile(r"^\.(.+)\.tmp-(\d+)-([0-9a-f]+)$")
_OPTIM_KEY = re.compile(r"^optim\.(\d+)\.([A-Za-z_][A-Za-z0-9_]*)$")
_CUDA_KEY = re.compile(r"^rng\.cuda\.(\d+)$")
_PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # pickle protocol >= 2, and torch.save's zip archive


def _is_pickle(head: bytes) -> bool:
    """Whether a data file's first bytes are a pickle's or torch.save's, not safetensors'.

    A safetensors file starts with its header's length (8 bytes, little-endian) and then the JSON
    header's "{"; a length of 128 + 256 n starts with the byte 0x80, as a pickle does, so the "{"
    at offset 8 decides.
    """
    return head.startswith(_PICKLE_MAGIC) and head[8:9] != b"{"

# A manifest holds two small configs, the vocabulary and the loss history (about 300 bytes a step):
# 64 MiB is some 200,000 steps, far beyond a run in this lab, and it bounds what a hostile manifest
# can make a load read and parse. A save refuses to write a larger one (it could not be loaded).
_MAX_MANIFEST_BYTES = 64 * 2**20
# safetensors files: an 8-byte length, a JSON header (about 100 bytes a tensor, plus metadata), the data.
_HEADER_SLACK = 2**20
_TENSOR_SLACK = 512  # header bytes allowed per tensor, on top of _HEADER_SLACK
_RNG_SLACK = 2**20  # the random states: 5 KB for each CPU generator, a few bytes per CUDA device
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0) \
    | getattr(os, "O_CLOEXEC", 0)

# Who wrote a checkpoint (its manifest's `origin.kind`): rotation moves and deletes only autosaves.
ORIGINS = ("save", "autosave", "kept")
LOCK_FILE = ".minitf.lock"  # flock()ed by every save into the folder (see the module docstring)
HELD_FILE = ".minitf.lock.held"  # the exclusive-create lock, where the file system has no flock
LOCK_WAIT = 120.0  # seconds a save waits for another save into the same folder before it gives up
_PROCESS_TOKEN = secrets.token_hex(8)  # this process, wherever its pid came from
_MAX_SHOWN = 4096  # the longest data_spec a manifest may carry (a listing shows it)


@dataclass
class Checkpoint:
    """A loaded, validated checkpoint: plain values and CPU tensors, not yet applied to anything."""

    name: str
    path: Path
    model_config: ModelConfig
    model_state: dict[str, torch.Tensor]  # lm_head.weight is token_embedding.weight (the same tensor)
    trainer_state: dict  # exactly Trainer.load_state_dict's format, "optimizer" and "generator" included
    torch_rng: torch.Tensor  # torch.get_rng_state() at save time
    cuda_rng: list[torch.Tensor]  # one state per CUDA device, empty if CUDA was not in use
    vocab: str  # the tokenizer's characters, in id order
    data_spec: str  # what `load_data` was given, e.g. "pydoc" or "reverse:6"
    meta: dict  # the parsed checkpoint.json

    @property
    def step(self) -> int:
        return self.trainer_state["step"]


@dataclass
class CheckpointInfo:
    """One row of `:ls`. A broken checkpoint still gets a row, with `error` saying what is wrong."""

    name: str
    step: int | None
    val_loss: float | None  # the last evaluated validation loss, None if never evaluated
    data_spec: str | None
    size_bytes: int
    saved_at: str | None  # ISO 8601, UTC
    model_config: dict | None = None
    error: str | None = None


# --- names and places ------------------------------------------------------------------------------
def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:37] + "..."  # a pasted novel stays one line
        raise CheckpointError(
            f"{shown} is not a valid checkpoint name; use up to 100 letters, digits, '.', '_' or '-', "
            "not starting with '.' (for example run1)"
        )
    return name


def check_save_target(directory, name: str) -> Path:
    """DIR/NAME if a checkpoint can be saved there; a caller can ask before an hour of training.

    What can be known without writing is checked: no path component is a file (`afile/sub`), and
    the place a save writes into (DIR/NAME if it exists, else the nearest existing folder on the
    way to DIR, which the save creates the rest under) is a writable directory. A full disk or a
    read-only file system still shows only when the save writes; save_checkpoint says which.
    """
    check_name(name)
    directory = Path(directory).expanduser()
    target = directory / name
    try:
        if target.exists():
            if not target.is_dir():
                raise CheckpointError(f"{target} is a file, not a checkpoint directory; remove it or choose another name")
            writes_into = target
        else:
            _check_no_dangling_link(target)
            writes_into = _nearest_existing(directory)
            if not writes_into.is_dir():
                raise CheckpointError(f"{writes_into} is a file, not a directory; choose another checkpoint directory")
        if not os.access(writes_into, os.W_OK | os.X_OK):
            raise CheckpointError(
                f"cannot write in {writes_into} (permission denied); change its permissions or choose another "
                "checkpoint directory"
            )
    except OSError as e:
        raise _path_error(target, e) from None
    return target


def _path_error(path: Path, e: OSError) -> CheckpointError:
    """One line for a path the system refuses (a name over 255 bytes, a loop of links, ...)."""
    if e.errno == errno.ENAMETOOLONG:
        return CheckpointError(f"cannot use {_clip(str(path))}: a name in that path is too long for the file system; "
                               "choose a shorter checkpoint directory")
    return CheckpointError(f"cannot use {_clip(str(path))}: {e.strerror or e}; choose another checkpoint directory")


def _clip(text: str, width: int = 100) -> str:
    """A path in a message: its start and its end, when it is too long to read in one line."""
    return text if len(text) <= width else f"{text[: width // 2 - 2]}...{text[-(width // 2 - 1):]}"


def _nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (a file in the way, as in `afile/sub`, is returned)."""
    while not path.exists() and path.parent != path:  # exists() is False below a file (ENOTDIR)
        path = path.parent
    return path


def _check_no_dangling_link(target: Path) -> None:
    """Refuse a symbolic link to nowhere on the way to `target`: a save could not create the folder.

    `exists()` follows links, so a dangling link looks like a folder still to be created; the save
    would then fail in mkdir ("File exists") after the training it was checked for.
    """
    path = target
    while path.parent != path:
        if os.path.lexists(path):
            if path.is_symlink() and not path.exists():
                raise CheckpointError(
                    f"{_clip(str(path))} is a symbolic link to {_clip(os.readlink(path))}, which does not exist; "
                    "create that folder or choose another checkpoint directory"
                )
            return
        path = path.parent


def _existing_names(directory: Path) -> list[str]:
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    return [e for e in entries if _NAME.match(e) and (directory / e / MANIFEST).is_file()]


def _checkpoint_path(directory, name: str) -> Path:
    directory = Path(directory).expanduser()
    check_name(name)
    path = directory / name
    try:
        return _existing_checkpoint(directory, name, path)
    except OSError as e:
        raise _path_error(path, e) from None


def _existing_checkpoint(directory: Path, name: str, path: Path) -> Path:
    if not path.exists():
        blocker = _nearest_existing(directory)
        if not blocker.is_dir():
            raise CheckpointError(f"{blocker} is a file, not a directory; choose another checkpoint directory")
        names = _existing_names(directory)
        where = f"in {directory}"
        if names:
            raise CheckpointError(f"no checkpoint named {name!r} {where}; saved ones: {', '.join(names)}")
        raise CheckpointError(f"no checkpoint named {name!r} {where} (there are none yet); save one under that name first")
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a checkpoint directory; remove it or choose another name")
    return path


# --- saving ----------------------------------------------------------------------------------------
class NameTaken(CheckpointError):
    """`exclusive=True` and DIR/NAME exists already (or appeared while this save waited for the lock)."""


def save_checkpoint(directory, name: str, model: MiniTransformerLM, trainer, vocab: str, data_spec: str, *,
                    origin: str = "save", session: str | None = None, exclusive: bool = False,
                    rotate: int | None = None, same_run: bool = False, share_from=()) -> Path:
    """Save model, trainer and random generators as DIR/NAME atomically; returns DIR/NAME.

    `origin` records who saved it (ORIGINS) and `session` which session (a random token), for
    rotation. `exclusive`: fail with NameTaken instead of replacing an existing NAME (a name picked
    to be new stays new even when another process picks it at the same moment). `rotate=K`: first
    shift an existing NAME to NAME-1 .. NAME-K (see `rotate`), unless `same_run` and NAME is this
    session's own autosave, which a continued run replaces. `share_from`: names of checkpoints in
    DIR whose identical data files this one may share (see `_write_or_link`). Everything from the
    check of NAME to the commit happens under the folder's lock.
    """
    if exclusive and os.path.lexists(Path(directory).expanduser() / check_name(name)):
        raise NameTaken(f"a checkpoint named {name!r} exists already in {directory}; choose another name")  # even a file
    target = check_save_target(directory, name)
    directory = target.parent
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {ORIGINS}, got {origin!r}")
    if len(vocab) != model.config.vocab_size:
        raise CheckpointError(
            f"the vocabulary has {count(len(vocab), 'character')} but the model has vocab_size={model.config.vocab_size}; "
            "rebuild the model for this data before saving"
        )
    # Everything is serialised in memory first: a failure here touches no file.
    model_bytes = _model_bytes(model)
    state_bytes, param_groups, scalars = _state_bytes(trainer)
    tstate = trainer.state_dict()
    trainer_json = {k: tstate[k] for k in ("step", "run_start", "run_steps", "run_elapsed", "run_constant_lr",
                                           "history", "train_config")}

    uid = f"{os.getpid()}-{secrets.token_hex(8)}"
    model_file, state_file = f"model-{uid}.safetensors", f"state-{uid}.safetensors"
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "minitf_version": __version__,
        "torch_version": torch.__version__,
        "saved_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "origin": {"kind": origin, **({"session": session} if session else {})},
        "model_config": model.config.to_dict(),
        "vocab": vocab,
        "data_spec": data_spec,
        "trainer": trainer_json,
        "optimizer": {"param_groups": param_groups, "scalars": scalars},
        "files": {
            "model": _file_entry(model_file, model_bytes),
            "state": _file_entry(state_file, state_bytes),
        },
    }
    manifest = json.loads(json.dumps(manifest))  # tuples become lists, exactly as a reader sees them
    manifest["meta_sha256"] = _meta_sha256(manifest)
    manifest_bytes = _manifest_bytes(manifest)
    if len(manifest_bytes) > _MAX_MANIFEST_BYTES:  # a load would refuse it: do not write it
        raise CheckpointError(
            f"checkpoint {name!r} would have a {len(manifest_bytes) / 2**20:,.0f} MiB manifest ({len(tstate['history'])} "
            f"steps of loss history), more than the {_MAX_MANIFEST_BYTES // 2**20} MiB a checkpoint may have; "
            "continue from a checkpoint with a shorter history"
        )

    files = {model_file: model_bytes, state_file: state_bytes}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with folder_lock(directory):
            _remove_dead_temp_dirs(directory)
            if exclusive and os.path.lexists(target):
                raise NameTaken(f"a checkpoint named {name!r} exists already in {directory}; choose another name")
            if rotate is not None and target.is_dir() and not (same_run and _is_own_autosave(target, session)):
                _rotate_locked(directory, name, rotate)
            sources = _shareable(directory, share_from, manifest["files"].values())
            if target.is_dir():
                _save_over(target, files, manifest_bytes, uid, sources)
            else:
                try:
                    _save_new(directory, name, files, manifest_bytes, uid, sources)
                except OSError as e:
                    # NAME appeared meanwhile, made by something that takes no lock (an older minitf, a
                    # person): save over it as over any existing checkpoint, once.
                    if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or exclusive or not target.is_dir():
                        raise
                    _save_over(target, files, manifest_bytes, uid, sources)
    except OSError as e:
        raise CheckpointError(f"could not save checkpoint {name!r} in {_clip(str(directory))}: {_save_failure(e)}") from e
    return target


_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NO_PERMISSION = {errno.EACCES, errno.EPERM}


def _save_failure(e: OSError) -> str:
    """`reason; fix` for an OSError of a save: the fix follows the cause (errno), not a guess."""
    reason = e.strerror or str(e)
    if e.errno in _NO_SPACE:
        return f"{reason}; free space or choose another checkpoint directory"
    if e.errno in _NO_PERMISSION:
        return f"{reason}; change the permissions of that directory or choose another checkpoint directory"
    if e.errno == errno.EROFS:
        return f"{reason} (the file system is read-only); choose another checkpoint directory"
    return f"{reason}; choose another checkpoint directory"


def _save_new(directory: Path, name: str, files: dict[str, bytes], manifest_bytes: bytes, uid: str,
              sources: dict[str, Path]) -> None:
    tmp = directory / f".{name}.tmp-{uid}"
    try:
        tmp.mkdir()
        for fname, data in files.items():
            _write_or_link(tmp / fname, data, sources.get(fname))
        _write_file(tmp / MANIFEST, manifest_bytes)
        _fsync_dir(tmp)
        os.rename(tmp, directory / name)  # the commit: NAME appears complete or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(directory, best_effort=True)


def _save_over(target: Path, files: dict[str, bytes], manifest_bytes: bytes, uid: str,
               sources: dict[str, Path]) -> None:
    old = _referenced_files(target)
    written: list[Path] = []
    tmp_manifest = target / f".{MANIFEST}.tmp-{uid}"
    try:
        for fname, data in files.items():
            written.append(target / fname)
            _write_or_link(target / fname, data, sources.get(fname))
        written.append(tmp_manifest)
        _write_file(tmp_manifest, manifest_bytes)
        os.replace(tmp_manifest, target / MANIFEST)  # the commit
    except BaseException:
        for p in written:
            _unlink(p)
        raise
    # Committed: from here on nothing may undo the new checkpoint, and clean-up is best effort.
    _fsync_dir(target, best_effort=True)
    for fname in old - set(files):
        _unlink(target / fname)
    _remove_strays(target, keep=set(files))


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:  # "x": never write through a name that already exists
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _write_or_link(path: Path, data: bytes, source: Path | None) -> None:
    """Write `data` to the new file `path`, or hard-link `source` there when it holds exactly `data`.

    Why a hard link (issue "a kept checkpoint duplicates the autosave it came from"): a model kept
    before a rebuild is usually byte for byte the autosave its run just wrote, and two copies of a
    model and its optimizer moments tripled a session's disk use. A link costs no bytes, reads as
    an ordinary file (no format change: any minitf loads it), and outlives the other name: rotation
    may delete `autosave-3` later, the kept checkpoint keeps its data. A reference from one manifest
    into another checkpoint's folder would dangle then, and writing nothing when an identical
    autosave exists would leave the kept name empty. Sharing is safe because minitf never changes a
    data file after writing it ("x" mode, new names for new data). The linked file is compared
    with `data` before it counts, so a source edited behind its manifest's back is not shared;
    where links are not possible (a file system without them), the bytes are written.
    """
    if source is not None:
        try:
            os.link(source, path, follow_symlinks=False)
        except (OSError, NotImplementedError):
            pass
        else:
            try:
                fd, size = _open_regular(path)
                same = size == len(data) and _read_open(fd, size) == data
            except (OSError, CheckpointError):
                same = False
            if same:
                return
            _unlink(path)
    _write_file(path, data)


def _fsync_dir(path: Path, best_effort: bool = False) -> None:
    if os.name == "nt":  # Windows cannot open a directory to fsync it
        return
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        if not best_effort:
            raise


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _remove_dead_temp_dirs(directory: Path) -> None:
    """Remove the temporary directories of saves that died. Called under the folder lock: any save
    still in progress would hold it, so every temporary directory found now is debris."""
    for entry in os.listdir(directory):
        if _TMP_DIR.match(entry):
            shutil.rmtree(directory / entry, ignore_errors=True)


def _remove_strays(target: Path, keep: set[str]) -> None:
    """Remove data files no manifest names, and stale temporary manifests (under the folder lock)."""
    try:
        entries = os.listdir(target)
    except OSError:
        return
    for entry in entries:
        if entry not in keep and (_DATA_FILE.match(entry) or _MANIFEST_TMP.match(entry)):
            _unlink(target / entry)  # not ours (no match): left alone


def _shareable(directory: Path, names, entries) -> dict[str, Path]:
    """{new file name: path} of data files in checkpoints `names` (in DIR) with the same bytes as the new `entries`.

    Only what a valid manifest vouches for (size and SHA-256) is offered; `_write_or_link` still
    compares the bytes before a link counts.
    """
    wanted = {(e["sha256"], e["size"]): e["file"] for e in entries}
    found: dict[str, Path] = {}
    for name in dict.fromkeys(n for n in names if isinstance(n, str) and _NAME.match(n)):
        try:
            manifest, _ = _read_manifest(directory / name)
        except (CheckpointError, OSError):
            continue
        for entry in manifest["files"].values():
            ours = wanted.get((entry["sha256"], entry["size"]))
            if ours is not None:
                found.setdefault(ours, directory / name / entry["file"])
    return found


def _referenced_files(target: Path) -> set[str]:
    """Data files the current manifest names (none if it is missing or unreadable)."""
    try:
        manifest = json.loads(_read_manifest_bytes(target / MANIFEST))
        names = {entry["file"] for entry in manifest["files"].values()}
    except Exception:
        return set()
    return {n for n in names if isinstance(n, str) and _DATA_FILE.match(n)}


# --- the folder lock --------------------------------------------------------------------------------
try:
    import fcntl
except ImportError:  # Windows: the exclusive-create lock only
    fcntl = None

# flock() errors that mean "this file system cannot lock", not "someone holds the lock".
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.ENOSYS, errno.EINVAL}


def _flock(fd: int) -> bool:
    """Try to take the flock on `fd` without waiting: True taken, False held by another; OSError else."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class folder_lock:
    """`with folder_lock(DIR):` holds DIR's save lock (waiting up to `wait` seconds for it).

    Raises CheckpointError (one line naming the holder) when another save keeps it longer, and
    OSError when the lock file cannot be made at all (the caller words it). Not re-entrant: a
    second `folder_lock` of the same folder in the same process waits for the first, as another
    process would, so code that already holds it calls the `_locked` helpers.
    """

    def __init__(self, directory, wait: float | None = None):
        self.directory = Path(directory)
        self.wait = LOCK_WAIT if wait is None else wait
        self._fd: int | None = None
        self._held: Path | None = None

    def __enter__(self):
        deadline = time.monotonic() + self.wait
        if fcntl is not None and self._enter_flock(deadline):
            return self
        self._enter_exclusive(deadline)
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            # Removed while still held, so the folder keeps no lock file between saves; a waiter that
            # then gets the lock on the removed file sees that and opens the name again (_enter_flock).
            _unlink(self.directory / LOCK_FILE)
            os.close(self._fd)  # releases the flock
            self._fd = None
        if self._held is not None:
            _unlink(self._held)
            self._held = None

    def _enter_flock(self, deadline: float) -> bool:
        """Take the flock; False when this file system has none (the caller falls back)."""
        path = self.directory / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
            | getattr(os, "O_CLOEXEC", 0)
        while True:
            fd = os.open(path, flags, 0o644)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise CheckpointError(f"{_clip(str(path))} is not a regular file; remove it, then save again")
                while not _flock(fd):
                    self._wait_or_give_up(deadline, path)
                if _same_file(fd, path):
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, _owner_bytes(), 0)  # for the message of whoever waits
                    self._fd = fd
                    return True
            except OSError as e:
                os.close(fd)
                if e.errno in _NO_LOCKS:
                    return False
                raise
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the holder before us removed that file: lock the name anew

    def _enter_exclusive(self, deadline: float) -> None:
        path = self.directory / HELD_FILE
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            except FileExistsError:
                if _is_stale(path):
                    _unlink(path)  # its owner died on this host, in this PID namespace, in this boot
                    continue
                self._wait_or_give_up(deadline, path, remove_hint=True)
                continue
            try:
                os.write(fd, _owner_bytes())
            finally:
                os.close(fd)
            self._held = path
            return

    def _wait_or_give_up(self, deadline: float, path: Path, remove_hint: bool = False) -> None:
        if time.monotonic() >= deadline:
            owner = _read_owner(path)
            who = (f"minitf on {owner.get('host', '?')} (pid {owner.get('pid', '?')})" if owner else "another minitf")
            hint = f" (if no minitf is saving there, remove {_clip(str(path), 80)})" if remove_hint else ""
            raise CheckpointError(
                f"the checkpoint folder {_clip(str(self.directory), 80)} is busy: {who} has been saving there for "
                f"more than {self.wait:.0f} s; try again when that save is done{hint}"
            )
        time.sleep(0.02)


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the open file `fd` (a lock file may be removed by its last holder)."""
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _owner() -> dict:
    """Who holds a lock: unique across hosts, PID namespaces and reboots (the token alone is unique)."""
    return {"token": _PROCESS_TOKEN, "host": socket.gethostname(), "pid": os.getpid(), "pidns": _pid_namespace(),
            "boot": _boot_id(), "since": time.time()}


def _owner_bytes() -> bytes:
    return json.dumps(_owner()).encode("utf-8")


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def _read_owner(path: Path) -> dict | None:
    try:
        fd, size = _open_regular(path)
        data = json.loads(_read_open(fd, min(size, 4096)))
    except (OSError, CheckpointError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_STALE_UNREADABLE = 60.0  # seconds after which a lock file without a readable owner is taken as debris


def _is_stale(path: Path) -> bool:
    """Whether an exclusive-create lock was left by a process that is gone.

    Only judged where it can be: a lock of this host, this boot and this PID namespace whose pid no
    longer exists (or of an earlier boot of this host). A lock of another machine or another PID
    namespace is waited for, never broken: its pid means nothing here.
    """
    owner = _read_owner(path)
    if owner is None:
        try:
            return time.time() - os.lstat(path).st_mtime > _STALE_UNREADABLE  # killed between create and write
        except OSError:
            return False
    me = _owner()
    if owner.get("host") != me["host"] or not me["boot"]:
        return False
    if owner.get("boot") != me["boot"]:
        return True  # this host rebooted since: nothing of that boot is running
    if owner.get("pidns") != me["pidns"] or not me["pidns"] or os.name == "nt":
        return False
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0 or owner.get("token") == _PROCESS_TOKEN:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _tied_aliases(model: torch.nn.Module) -> dict[str, str]:
    """{alias: first name} for state_dict entries that are the same tensor (lm_head.weight -> token_embedding.weight)."""
    seen: dict[int, str] = {}
    aliases = {}
    for key, value in model.state_dict(keep_vars=True).items():
        if id(value) in seen:
            aliases[key] = seen[id(value)]
        else:
            seen[id(value)] = key
    return aliases


def _model_bytes(model: MiniTransformerLM) -> bytes:
    aliases = _tied_aliases(model)
    tensors = {
        k: v.detach().to("cpu").contiguous()
        for k, v in model.state_dict().items()
        if k not in aliases
    }
    return safetensors.torch.save(tensors, metadata={"format": "pt"})


def _state_bytes(trainer) -> tuple[bytes, list, dict]:
    opt = trainer.optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict] = {}  # non-tensor per-parameter state (none for torch's AdamW, kept for safety)
    for index, entry in opt["state"].items():
        for key, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"optim.{int(index)}.{key}"] = value.detach().to("cpu").contiguous()
            else:
                scalars.setdefault(str(int(index)), {})[key] = value
    tensors["rng.data"] = trainer.generator.get_state()
    tensors["rng.torch"] = torch.get_rng_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = state.cpu()
    return safetensors.torch.save(tensors, metadata={"format": "pt"}), opt["param_groups"], scalars


def _file_entry(fname: str, data: bytes) -> dict:
    return {"file": fname, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _manifest_bytes(manifest: dict) -> bytes:
    """The one way a manifest is written; a reader insists on it byte for byte (see _read_manifest)."""
    return (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=True) + "\n").encode("ascii")


def _meta_sha256(manifest: dict) -> str:
    body = {k: v for k, v in manifest.items() if k != "meta_sha256"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- reading files, bounded -------------------------------------------------------------------------
_KINDS = (
    (stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
)


def _not_regular(where: Path, mode: int) -> CheckpointError:
    kind = next((name for test, name in _KINDS if test(mode)), "an unknown kind of file")
    if stat.S_ISDIR(mode):
        return CheckpointError(f"{where} is a directory, not a file; remove it and save again")
    return CheckpointError(f"{where} is not a regular file ({kind}); this checkpoint cannot be used, save it again")


def _open_regular(where: Path) -> tuple[int, int]:
    """(fd, size) of the regular file `where`, checked before a byte of it is read.

    `lstat` first, so that a device or FIFO in a checkpoint is never even opened; then an open that
    cannot block (O_NONBLOCK: a FIFO swapped in meanwhile) and does not follow a final symlink
    (O_NOFOLLOW), and `fstat` on the descriptor, which is what will be read. Raises OSError
    (FileNotFoundError: missing) for the caller to word, CheckpointError for anything not regular.
    """
    mode = os.lstat(where).st_mode
    if not stat.S_ISREG(mode):
        raise _not_regular(where, mode)
    fd = os.open(where, _OPEN_FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(where, st.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def _read_open(fd: int, size: int) -> bytes:
    """`size` bytes from the start of the open file `fd` (fewer only if it shrank meanwhile); closes it."""
    with os.fdopen(fd, "rb") as f:
        return f.read(size)  # a buffered read: loops until `size` bytes or the end of the file


def _read_manifest_bytes(where: Path) -> bytes:
    """The bytes of a manifest, refused unread if it is not a regular file of at most _MAX_MANIFEST_BYTES."""
    fd, size = _open_regular(where)
    if size > _MAX_MANIFEST_BYTES:
        os.close(fd)
        raise CheckpointError(
            f"{where} is {count(size, 'byte', grouped=False)}, more than the {_MAX_MANIFEST_BYTES // 2**20} MiB a manifest may have; "
            "it is not a minitf checkpoint"
        )
    return _read_open(fd, size)


def manifest_bytes(path) -> bytes | None:
    """The bytes of DIR/NAME's checkpoint.json as it is now, or None if there is none readable.

    For a caller that wants to tell whether a save committed (compare before and after): read the
    same bounded, non-blocking way as a load, so a FIFO or a huge file there cannot hang it.
    """
    try:
        return _read_manifest_bytes(Path(path) / MANIFEST)
    except (OSError, CheckpointError):
        return None


# --- reading the manifest --------------------------------------------------------------------------
def _read_manifest(path: Path) -> tuple[dict, bytes]:
    where = path / MANIFEST
    try:
        raw = _read_manifest_bytes(where)
    except FileNotFoundError:
        raise CheckpointError(
            f"{path} has no {MANIFEST}, so it is not a complete checkpoint; save it again or remove that directory"
        ) from None
    except OSError as e:
        raise CheckpointError(f"cannot read {where}: {e.strerror or e}; check its permissions") from None
    return _parse_manifest(raw, where), raw


def _parse_manifest(raw: bytes, where: Path) -> dict:
    """Check a manifest's bytes completely; `where` names it in messages."""
    if raw.startswith(_PICKLE_MAGIC):
        raise CheckpointError(
            f"{where} is a pickle (torch.save) file, which minitf never opens because it can run code; "
            "save the checkpoint again"
        )
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise CheckpointError(
            f"{where} is not valid JSON (truncated or corrupted); save the checkpoint again"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise CheckpointError(f"{where} is not a minitf checkpoint manifest; save the checkpoint again")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise CheckpointError(f"{where} has no valid format_version (corrupted); save the checkpoint again")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"{where.parent.name} was written by a newer minitf (format {version}, this one reads {FORMAT_VERSION}): upgrade minitf"
        )
    # The checksum covers the values; the exact-text comparison covers what parsing forgets (a float's
    # 17th digit, say), so that any changed byte is caught.
    if manifest.get("meta_sha256") != _meta_sha256(manifest) or raw != _manifest_bytes(manifest):
        raise CheckpointError(
            f"{where} does not match its checksum (corrupted or edited); save the checkpoint again"
        )
    _check_manifest_fields(manifest, where)
    return manifest


def _check_manifest_fields(m: dict, where: Path) -> None:
    def need(ok: bool, what: str) -> None:
        if not ok:
            raise CheckpointError(f"{where}: {what}; this file was not written by minitf, save the checkpoint again")

    def is_int(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    def is_number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    need(isinstance(m.get("model_config"), dict), "model_config is missing")
    need(isinstance(m.get("vocab"), str), "vocab is missing")
    # The strings a listing or a message shows are text a terminal prints: no control characters
    # (an ESC in a foreign manifest would otherwise drive the terminal), and of a sane length.
    need(isinstance(m.get("data_spec"), str) and 0 < len(m["data_spec"]) <= _MAX_SHOWN and m["data_spec"].isprintable(),
         "data_spec is missing or not printable text")
    for key in ("saved_at", "minitf_version", "torch_version"):
        need(key not in m or (isinstance(m[key], str) and len(m[key]) <= 64 and m[key].isprintable()),
             f"{key} is not short printable text")
    origin = m.get("origin")
    need(origin is None or (isinstance(origin, dict) and origin.get("kind") in ORIGINS
                            and set(origin) <= {"kind", "session"}
                            and (isinstance(origin.get("session", ""), str) and len(origin.get("session", "")) <= 64)),
         "origin is malformed")
    t = m.get("trainer")
    need(isinstance(t, dict), "trainer is missing")
    for key in ("step", "run_start", "run_steps"):
        need(is_int(t.get(key)) and t[key] >= 0, f"trainer.{key} is not a whole number >= 0")
    need(is_number(t.get("run_elapsed")) and t["run_elapsed"] >= 0, "trainer.run_elapsed is not a number >= 0")
    constant = t.get("run_constant_lr")
    need(constant is None or (is_number(constant) and constant > 0),
         "trainer.run_constant_lr is not a positive number")
    need(isinstance(t.get("history"), list), "trainer.history is not a list of steps")
    for i, row in enumerate(t["history"]):
        problem = _history_problem(row, t["step"])
        need(problem is None, f"trainer.history[{i}] {problem}")
    need(isinstance(t.get("train_config"), dict), "trainer.train_config is missing")
    o = m.get("optimizer")
    need(isinstance(o, dict) and isinstance(o.get("param_groups"), list)
         and all(isinstance(g, dict) and isinstance(g.get("params"), list) and all(is_int(i) for i in g["params"])
                 for g in o["param_groups"]), "optimizer.param_groups is malformed")
    need(isinstance(o.get("scalars", {}), dict), "optimizer.scalars is malformed")
    files = m.get("files")
    need(isinstance(files, dict) and set(files) == {"model", "state"}, "files must list model and state")
    for entry in files.values():
        need(isinstance(entry, dict) and isinstance(entry.get("file"), str) and bool(_DATA_FILE.match(entry["file"]))
             and is_int(entry.get("size")) and isinstance(entry.get("sha256"), str), "a files entry is malformed")


# One row of the loss history (core.train.StepInfo). Every field a row can have is checked, because
# every one is read somewhere: the continuing rate is the last row's lr, `:ls` and `:load` show the
# last val_loss, the charts plot the rest. Rows of checkpoints written before aux_loss and
# compile_seconds existed lack them; load_checkpoint fills them in as None.
_HISTORY_COUNTS = ("step", "run_step", "run_steps")  # whole numbers >= 0
_HISTORY_NUMBERS = ("train_loss", "lr", "grad_norm", "tokens_per_second", "elapsed")  # finite numbers
_HISTORY_MAYBE = ("val_loss", "accuracy")  # a finite number, or null (not evaluated at that step)
_HISTORY_LATER = ("aux_loss", "compile_seconds")  # as _HISTORY_MAYBE, and may be absent
_HISTORY_NONNEGATIVE = ("lr", "grad_norm", "tokens_per_second", "elapsed", "compile_seconds")


def _history_problem(row, last_step: int) -> str | None:
    """What is wrong with one history row (None: nothing), in words for a message."""
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not isinstance(row, dict):
        return "is not a step (a JSON object)"
    for key in _HISTORY_COUNTS:
        if not (isinstance(row.get(key), int) and not isinstance(row.get(key), bool) and row[key] >= 0):
            return f"has no whole number {key}" if key not in row else f"has a {key} that is not a whole number >= 0"
    if row["step"] > last_step:
        return f"is step {row['step']}, after the checkpoint's step {last_step}"
    for key in _HISTORY_NUMBERS:
        if key not in row:
            return f"has no {key}"
        if not number(row[key]):
            return f"has a {key} that is not a finite number ({_shown(row[key])})"
    for key in _HISTORY_MAYBE + _HISTORY_LATER:
        if key not in row and key in _HISTORY_MAYBE:
            return f"has no {key}"
        if row.get(key) is not None and not number(row[key]):
            return f"has a {key} that is neither a finite number nor null ({_shown(row[key])})"
    for key in _HISTORY_NONNEGATIVE:
        if row.get(key) is not None and row[key] < 0:
            return f"has a negative {key}"
    known = set(_HISTORY_COUNTS + _HISTORY_NUMBERS + _HISTORY_MAYBE + _HISTORY_LATER)
    for key in set(row) - known:  # a field of a newer minitf: kept only if it is a plain number or null
        if row[key] is not None and not number(row[key]):
            return f"has an unknown field {_shown(key)} that is not a number"
    return None


def _shown(value) -> str:
    """A value from a manifest, quoted for a message: short, and escaped (it may hold anything)."""
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _read_data_file(path: Path, entry: dict, limit: int) -> dict[str, torch.Tensor]:
    """The tensors of one data file; at most `limit` bytes (see _size_limits) are ever read."""
    where = path / entry["file"]
    if entry["size"] > limit:
        raise CheckpointError(
            f"{where} is recorded as {count(entry['size'], 'byte', grouped=False)}, more than its model config can need ({limit}); "
            "this checkpoint cannot be used, save it again"
        )
    try:
        fd, size = _open_regular(where)
        if size != entry["size"]:
            with os.fdopen(fd, "rb") as f:
                head = f.read(9)  # only to say "pickle" rather than "wrong size" for a torch.save file
            if _is_pickle(head):
                raise CheckpointError(
                    f"{where} is a pickle (torch.save) file, which minitf never opens because it can run code; "
                    "save the checkpoint again"
                )
            raise CheckpointError(
                f"{where} has {count(size, 'byte', grouped=False)} but {entry['size']} were written (truncated or replaced); save the checkpoint again"
            )
        raw = _read_open(fd, size)
    except FileNotFoundError:
        raise CheckpointError(f"{where} is missing; this checkpoint is incomplete, save it again") from None
    except OSError as e:
        raise CheckpointError(f"cannot read {where}: {e.strerror or e}; check its permissions") from None
    if _is_pickle(raw):
        raise CheckpointError(
            f"{where} is a pickle (torch.save) file, which minitf never opens because it can run code; "
            "save the checkpoint again"
        )
    if len(raw) != entry["size"]:  # it shrank while being read
        raise CheckpointError(
            f"{where} has {count(len(raw), 'byte', grouped=False)} but {entry['size']} were written (truncated or replaced); save the checkpoint again"
        )
    if hashlib.sha256(raw).hexdigest() != entry["sha256"]:
        raise CheckpointError(f"{where} does not match its checksum (corrupted); save the checkpoint again")
    try:
        return safetensors.torch.load(raw)
    except Exception as e:  # SafetensorError and friends: a file that passed its checksum but is not safetensors
        raise CheckpointError(f"{where} is not a readable safetensors file ({e}); save the checkpoint again") from None


# --- loading ---------------------------------------------------------------------------------------
def load_checkpoint(directory, name: str, map_location="cpu") -> Checkpoint:
    """Read and validate DIR/NAME. Changes nothing: apply it with build_model, restore_trainer, restore_rng."""
    path = _checkpoint_path(directory, name)
    for attempt in range(3):
        manifest, raw = _read_manifest(path)
        # Settings a checkpoint predates keep the value it trained with, not today's default: before
        # `optimizer` existed every run was AdamW (the default is Muon now).
        manifest["trainer"]["train_config"].setdefault("optimizer", "adamw")
        config = _check_manifest_values(path, manifest)  # before the data files: they are read within its bounds
        limits = _size_limits(config)
        _check_claims(path, config, manifest["files"]["model"], limits)
        try:
            model_tensors = _read_data_file(path, manifest["files"]["model"], limits["model"])
            state_tensors = _read_data_file(path, manifest["files"]["state"], limits["state"])
            break
        except CheckpointError:
            # A save of the same name may have replaced the manifest (and deleted the old files)
            # between our reads: if the manifest changed, read the new one.
            try:
                changed = _read_manifest_bytes(path / MANIFEST) != raw
            except (OSError, CheckpointError):
                changed = False
            if not changed or attempt == 2:
                raise

    vocab = manifest["vocab"]
    t = manifest["trainer"]
    model_state = _check_model_tensors(path, config, model_tensors, map_location)
    optimizer_state, generator, torch_rng, cuda_rng = _split_state_tensors(path, manifest["optimizer"], state_tensors)

    trainer_state = {
        "step": t["step"],
        "run_start": t["run_start"],
        "run_steps": t["run_steps"],
        "run_elapsed": float(t["run_elapsed"]),
        "run_constant_lr": t.get("run_constant_lr"),
        "history": [{**dict.fromkeys(_HISTORY_LATER), **h} for h in t["history"]],
        "train_config": dict(t["train_config"]),
        "generator": generator,
        "optimizer": optimizer_state,
    }
    return Checkpoint(
        name=name, path=path, model_config=config, model_state=model_state, trainer_state=trainer_state,
        torch_rng=torch_rng, cuda_rng=cuda_rng, vocab=vocab, data_spec=manifest["data_spec"], meta=manifest,
    )


def _check_manifest_values(path: Path, manifest: dict) -> ModelConfig:
    """The model config, once it, the vocabulary and the training config are known to be valid.

    Also that the model is one this lab would build from typed settings (their limits, and
    core.sizes.check_trainable's bound on parameters and memory): a checkpoint can ask for no more
    than a person could type. All of it is arithmetic on the config: nothing is built yet.
    """
    try:
        config = ModelConfig.from_dict(manifest["model_config"])
    except (ConfigError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise CheckpointError(f"{path}: its model config is invalid ({_reason(e)}); this checkpoint cannot be used") from None
    vocab = manifest["vocab"]
    if len(vocab) != config.vocab_size or len(set(vocab)) != len(vocab):
        raise CheckpointError(
            f"{path}: its vocabulary has {count(len(vocab), 'character')} ({len(set(vocab))} distinct) but the model has "
            f"vocab_size={config.vocab_size}; this checkpoint is inconsistent, save it again"
        )
    try:
        train = TrainConfig.from_dict(manifest["trainer"]["train_config"])
    except (ConfigError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise CheckpointError(f"{path}: its training config is invalid ({_reason(e)}); this checkpoint cannot be used") from None
    try:  # a billion eval_batches would make the next evaluation one that no stop request reaches
        config.check_limits()
        train.check_limits()
        check_trainable(config, train.batch_size)
    except ConfigError as e:
        raise CheckpointError(
            f"{path}: it asks for more than this lab builds ({_reason(e)}); this checkpoint cannot be used"
        ) from None
    return config


def _reason(e: Exception) -> str:
    """The cause part of an error's message (before its fix), short enough for one line."""
    text = str(e).split(";")[0]
    return text if len(text) <= 160 else text[:157] + "..."


def _check_claims(path: Path, config: ModelConfig, entry: dict, limits: dict) -> None:
    """Refuse a model config that claims more weights than its model file has bytes, before anything is built.

    The weights of `config` (core.sizes.parameter_count, float32) must all be in the model file;
    a manifest claiming 20,000 layers next to a file of a few kilobytes is caught here, by
    arithmetic, instead of after building 20,000 layers. From here on a load's work (reading,
    comparing tensors, building the model) grows with bytes that are really there.
    """
    weights = limits["weights"]
    # The recorded size: a file whose real size differs is refused by _read_data_file, which reads
    # nothing of it (but 9 bytes, to say "pickle" where it is one).
    if entry["size"] < weights:
        raise CheckpointError(
            f"{path}: its model config describes {parameter_count(config):,} parameters ({weights:,} bytes of weights) "
            f"but its model file holds {entry['size']:,} bytes; this checkpoint is inconsistent, save it again"
        )


def _size_limits(config: ModelConfig) -> dict[str, int]:
    """The largest model and state files a checkpoint of this config can have, in bytes ("weights": the weights alone).

    The model file holds each stored tensor once; the state file AdamW's two moments (each the
    size of its parameter) and a step count per parameter, and the random states. Both get
    generous room for safetensors' header. Reading no more than this keeps a load's memory within
    what the model itself will take, whatever sizes a manifest claims. Counted on one block and
    multiplied (every block is alike), so the cost does not grow with the layers a manifest claims.
    """
    outside, block, n_layers = _reference_parts(config)
    stored = list(outside.values()) + list(block.values())
    n_stored = len(outside) + n_layers * len(block)
    weights = sum(t.numel() * t.element_size() for t in outside.values()) \
        + n_layers * sum(t.numel() * t.element_size() for t in block.values())
    # No buffer is stored (the causal mask, position tables are derived) and each parameter is stored
    # once, so the parameters are exactly the stored tensors: AdamW keeps two moments of each.
    assert all(t.dtype.is_floating_point for t in stored)
    return {
        "weights": weights,
        "model": weights + _HEADER_SLACK + _TENSOR_SLACK * n_stored,
        "state": 2 * weights + 8 * n_stored + _RNG_SLACK + _HEADER_SLACK + _TENSOR_SLACK * 3 * n_stored,
    }


def _reference_model(config: ModelConfig) -> MiniTransformerLM:
    """The model this config builds, on the meta device: names and shapes at no cost, RNG untouched."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        return MiniTransformerLM(config)


_BLOCK = "blocks.0."


def _reference_parts(config: ModelConfig) -> tuple[dict, dict, int]:
    """(outside, block, n_layers): the stored tensors outside the blocks and those of one block, on meta.

    Read from a one-block model: every block of MiniTransformerLM is the same TransformerBlock, so
    block i holds `blocks.i.` + each name of `block`. Building the claimed model itself on the meta
    device took minutes and gigabytes for 20,000 layers.
    """
    ref = _reference_model(config.replace(n_layers=1))
    aliases = _tied_aliases(ref)
    state = {k: v for k, v in ref.state_dict().items() if k not in aliases}
    outside = {k: v for k, v in state.items() if not k.startswith(_BLOCK)}
    block = {k[len(_BLOCK):]: v for k, v in state.items() if k.startswith(_BLOCK)}
    return outside, block, config.n_layers


def _expected_tensors(config: ModelConfig) -> tuple[dict, dict[str, str], list[str]]:
    """({name: meta tensor} stored in a model file, {alias: name} of tied weights, state_dict order)."""
    ref = _reference_model(config.replace(n_layers=1))
    aliases = _tied_aliases(ref)
    if any(k.startswith(_BLOCK) for k in aliases):
        raise AssertionError("a tied weight inside a block: _expected_tensors must number its aliases too")
    state = ref.state_dict()
    keys = list(state)
    first = next((i for i, k in enumerate(keys) if k.startswith(_BLOCK)), len(keys))
    inside = [k[len(_BLOCK):] for k in keys if k.startswith(_BLOCK)]
    outside = [k for k in keys if not k.startswith(_BLOCK)]
    blocks = [(f"blocks.{i}.{k}", _BLOCK + k) for i in range(config.n_layers) for k in inside]  # layer by layer
    named = [(k, k) for k in outside[:first]] + blocks + [(k, k) for k in outside[first:]]  # (name, its one-block key)
    order = [name for name, _ in named]
    expected = {name: state[key] for name, key in named if key not in aliases}
    return expected, aliases, order


def _check_model_tensors(where: Path, config: ModelConfig, tensors: dict, map_location) -> dict[str, torch.Tensor]:
    expected, aliases, order = _expected_tensors(config)
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if extra:
            parts.append(f"unexpected {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}")
        raise CheckpointError(
            f"{where}: the weights do not fit its model config ({'; '.join(parts)}); this checkpoint cannot be used"
        )
    for key, ref_tensor in expected.items():
        got = tensors[key]
        if tuple(got.shape) != tuple(ref_tensor.shape) or got.dtype != ref_tensor.dtype:
            raise CheckpointError(
                f"{where}: {key} has shape {tuple(got.shape)} ({got.dtype}) but its model config needs "
                f"{tuple(ref_tensor.shape)} ({ref_tensor.dtype}); this checkpoint cannot be used"
            )
    for key in order:
        if key in tensors:
            _check_finite(where, f"the weight {key}", tensors[key])
    state = {k: v.to(map_location) for k, v in tensors.items()}
    for alias, original in aliases.items():
        state[alias] = state[original]  # tied: the same tensor, as in the model
    return {k: state[k] for k in order}


def _check_finite(where: Path, what: str, t: torch.Tensor) -> None:
    """Refuse NaN or infinity in weights or optimizer state (decision: refused, not loaded for study).

    minitf never saves such a model (a diverged step is not applied, a diverged run rolls back), so
    non-finite values mean a corrupted or foreign file; loaded, every `:gen` would fail in the
    sampler and every `:train` diverge at once. Refusing says so at the one place it can be fixed.
    """
    if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise CheckpointError(
            f"{where}: {what} holds {bad:,} values that are not finite (NaN or infinity), which no model can "
            "generate or train with; this checkpoint cannot be used"
        )


def _split_state_tensors(where: Path, optimizer: dict, tensors: dict):
    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"{where}: the training state {what}; this checkpoint cannot be used")

    cpu_state_size = torch.get_rng_state().numel()
    for key in ("rng.data", "rng.torch"):
        if key not in tensors:
            raise bad(f"has no {key}")
        t = tensors[key]
        if t.dtype != torch.uint8 or t.dim() != 1 or t.numel() != cpu_state_size:
            raise bad(f"has a malformed {key} ({t.dtype}, shape {tuple(t.shape)})")
        if not _valid_cpu_rng_state(t):
            raise bad(f"has an invalid random number state {key} (torch refuses it)")

    cuda: dict[int, torch.Tensor] = {}
    state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key in ("rng.data", "rng.torch"):
            continue
        m = _CUDA_KEY.match(key)
        if m:
            if value.dtype != torch.uint8 or value.dim() != 1:
                raise bad(f"has a malformed {key}")
            cuda[int(m.group(1))] = value
            continue
        m = _OPTIM_KEY.match(key)
        if m is None:
            raise bad(f"holds an unexpected tensor {key}")
        _check_finite(where, f"the optimizer state {key}", value)
        state.setdefault(int(m.group(1)), {})[m.group(2)] = value
    if sorted(cuda) != list(range(len(cuda))):
        raise bad("skips a CUDA device in rng.cuda.*")

    n_params = sum(len(g["params"]) for g in optimizer["param_groups"])
    indices = [i for g in optimizer["param_groups"] for i in g["params"]]
    if sorted(indices) != list(range(n_params)):
        raise bad("numbers its parameters wrongly (param_groups)")
    for index_str, values in optimizer.get("scalars", {}).items():
        if not index_str.isdigit() or not isinstance(values, dict):
            raise bad("has malformed optimizer scalars")
        state.setdefault(int(index_str), {}).update(values)
    if any(i >= n_params for i in state):
        raise bad("has optimizer state for a parameter that does not exist")

    for g in optimizer["param_groups"]:
        _check_group(g, bad)
    groups = []
    for g in optimizer["param_groups"]:
        # JSON turned tuples (AdamW's betas, Muon's ns_coefficients) into lists; give the optimizer back what it saved.
        groups.append({k: (tuple(v) if isinstance(v, list) and k != "params" else v) for k, v in g.items()})
    optimizer_state = {"state": {i: state[i] for i in sorted(state)}, "param_groups": groups}
    return optimizer_state, tensors["rng.data"], tensors["rng.torch"], [cuda[i] for i in sorted(cuda)]


_MUON_LR_ADJUSTMENTS = (None, "original", "match_rms_adamw")  # what torch.optim.Muon accepts


def _check_group(g: dict, bad) -> None:
    """One saved param group's settings: numbers where the optimizer computes with them (group_kind says which).

    torch checks none of these when it loads a state, and a wrong one would surface steps later (or
    never: Muon reads an unknown adjust_lr_fn as no adjustment), so they are checked here.
    """
    def is_number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def numbers(v, n: int) -> bool:
        return isinstance(v, list) and len(v) == n and all(is_number(x) for x in v)

    for key in ("lr", "eps", "weight_decay"):
        if not is_number(g.get(key, 0.0)):
            raise bad(f"has a non-numeric optimizer {key}")
    if group_kind(g) == "adamw":
        if not numbers(g.get("betas", [0.9, 0.999]), 2):
            raise bad("has malformed optimizer betas")
        return
    if not is_number(g.get("momentum")):
        raise bad("has a non-numeric Muon momentum")
    if not numbers(g["ns_coefficients"], 3):
        raise bad("has malformed Muon ns_coefficients (three numbers)")
    steps = g.get("ns_steps")
    if not (isinstance(steps, int) and not isinstance(steps, bool) and 0 <= steps < 100):
        raise bad("has a malformed Muon ns_steps (a whole number below 100)")
    if not isinstance(g.get("nesterov"), bool):
        raise bad("has a malformed Muon nesterov (true or false)")
    if g.get("adjust_lr_fn") not in _MUON_LR_ADJUSTMENTS:
        raise bad("has an unknown Muon adjust_lr_fn")


def _valid_cpu_rng_state(state: torch.Tensor) -> bool:
    """Whether torch accepts `state` for a CPU generator: tried on a throw-away one, so nothing changes.

    The right size is not enough (torch checks the mt19937 state inside); finding out only when the
    state is applied would be after the session took the checkpoint's weights.
    """
    try:
        torch.Generator().set_state(state)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


# --- applying a checkpoint -------------------------------------------------------------------------
def build_model(checkpoint: Checkpoint) -> MiniTransformerLM:
    """A new model holding the checkpoint's weights (on the tensors' device). The global RNG is untouched."""
    with torch.random.fork_rng(devices=[]):
        model = MiniTransformerLM(checkpoint.model_config)
    try:
        model.load_state_dict(checkpoint.model_state, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{checkpoint.path}: the weights do not fit the model ({e}); this checkpoint cannot be used") from None
    return model


def restore_trainer(checkpoint: Checkpoint, trainer) -> None:
    """Load optimizer, batch generator, run position and history into `trainer` (built for build_model's model).

    Everything is compared with the optimizer the state goes into first, so a mismatch raises before
    the trainer changes. That optimizer is of the checkpoint's kind (its train_config's `optimizer`;
    adamw for checkpoints older than the setting), whatever the trainer had: the checkpoint's
    settings win, as they do for every training setting.
    """
    state = checkpoint.trainer_state
    saved = state["optimizer"]
    groups = trainer.optimizer_for(TrainConfig.from_dict(state["train_config"])).param_groups
    if len(saved["param_groups"]) != len(groups) or any(
        len(s["params"]) != len(g["params"]) or group_kind(s) != group_kind(g)
        for s, g in zip(saved["param_groups"], groups)
    ):
        raise CheckpointError(
            f"{checkpoint.path}: its optimizer groups do not match this model's optimizer; "
            "this checkpoint was written by an incompatible minitf"
        )
    by_index = {}
    for s, g in zip(saved["param_groups"], groups):
        by_index.update(zip(s["params"], g["params"]))
    for index, values in saved["state"].items():
        param = by_index[index]
        for key, value in values.items():
            if isinstance(value, torch.Tensor) and value.dim() > 0 and tuple(value.shape) != tuple(param.shape):
                raise CheckpointError(
                    f"{checkpoint.path}: optimizer state {key} of parameter {index} has shape {tuple(value.shape)}, "
                    f"the parameter has {tuple(param.shape)}; this checkpoint cannot be used"
                )
    try:
        trainer.load_state_dict(state)
    except (ValueError, KeyError, RuntimeError) as e:
        raise CheckpointError(f"{checkpoint.path}: the training state does not fit ({e}); this checkpoint cannot be used") from None


def restore_rng(checkpoint: Checkpoint) -> None:
    """Set torch's global generators (dropout draws from them) to their state at save time.

    All or nothing: the CPU state is tried on a throw-away generator first, and the CUDA states the
    devices had are put back if one of the new ones is refused; the CPU state is set last.
    """
    if not _valid_cpu_rng_state(checkpoint.torch_rng):
        raise CheckpointError(
            f"{checkpoint.path}: the training state has an invalid random number state rng.torch (torch refuses it); "
            "this checkpoint cannot be used"
        )
    if checkpoint.cuda_rng and torch.cuda.is_available():
        states = checkpoint.cuda_rng[: torch.cuda.device_count()]
        before = [torch.cuda.get_rng_state(i) for i in range(len(states))]
        try:
            for i, s in enumerate(states):
                torch.cuda.set_rng_state(s, i)
        except (RuntimeError, TypeError, ValueError) as e:
            for i, s in enumerate(before):
                torch.cuda.set_rng_state(s, i)
            raise CheckpointError(
                f"{checkpoint.path}: a CUDA random number state does not fit this machine ({e}); "
                "this checkpoint cannot be used"
            ) from None
    torch.set_rng_state(checkpoint.torch_rng)  # checked above: cannot fail


def checkpoint_data(checkpoint: Checkpoint, load=None):
    """The dataset `checkpoint` was trained on, or a `VocabOnly` stand-in if it cannot be had.

    `load(spec)` loads data (default core.data.load_data). When it raises a UserError (the file is
    gone, unreadable, ...), or the data no longer has the saved vocabulary, or is now too short for
    the model's context, the result is `VocabOnly(name, checkpoint.vocab, spec, reason)`: restore()
    accepts it, generation works, and training raises DataError naming the missing data. A caller
    can tell the two apart with isinstance(data, VocabOnly) and show `data.reason` (None: not
    available) or its description.
    """
    from .data import CORPORA, TASKS, VocabOnly, load_data
    from .errors import UserError

    spec = checkpoint.data_spec
    name = Path(spec).name or spec
    try:
        data = (load or load_data)(spec)
        data.check_fits(checkpoint.model_config.max_seq_len)
    except UserError as e:
        return VocabOnly(name, checkpoint.vocab, spec, None if _is_gone(spec, CORPORA + TASKS) else str(e).split(";")[0])
    tokenizer = getattr(data, "tokenizer", None)
    if tokenizer is not None and tokenizer.vocab != checkpoint.vocab:
        return VocabOnly(name, checkpoint.vocab, spec, "its vocabulary changed since the checkpoint was saved")
    return data


def _is_gone(spec: str, builtin: tuple) -> bool:
    """Whether `spec` names a local file that does not exist (rather than built-in data, or a file that does)."""
    if spec.partition(":")[0] in builtin:
        return False
    try:
        return not os.path.lexists(Path(spec).expanduser())
    except (OSError, ValueError):
        return False


def restore(checkpoint: Checkpoint, data, device="cpu"):
    """A new (model, trainer) pair on `device`, continuing exactly where the checkpoint stopped.

    `data`: the checkpoint's dataset, or `VocabOnly(name, checkpoint.vocab, checkpoint.data_spec)`
    when that is gone (see checkpoint_data). The caller's state is untouched: swap the pair in, then
    call `restore_rng(checkpoint)`.
    """
    tokenizer = getattr(data, "tokenizer", None)
    if tokenizer is not None and tokenizer.vocab != checkpoint.vocab:
        raise CheckpointError(
            f"the data {checkpoint.data_spec!r} now has a different vocabulary than when {checkpoint.name} was saved; "
            "restore that data, or train a new model on it"
        )
    model = build_model(checkpoint).to(device)
    trainer = Trainer(model, data, TrainConfig.from_dict(checkpoint.trainer_state["train_config"]), device)
    restore_trainer(checkpoint, trainer)
    return model, trainer


# --- listing ---------------------------------------------------------------------------------------
def list_checkpoints(directory) -> list[CheckpointInfo]:
    """The checkpoints in DIR, newest first. A broken one is listed with `error` set, never raised."""
    directory = Path(directory).expanduser()
    try:
        if not directory.exists():
            return []
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is a file, not a directory; choose another checkpoint directory")
        entries = sorted(os.listdir(directory))
    except OSError as e:
        raise _path_error(directory, e) from None
    rows = []
    for entry in entries:
        path = directory / entry
        try:
            if not _NAME.match(entry) or not path.is_dir():
                continue  # temporary directories start with '.'; plain files are not checkpoints
        except OSError:
            continue
        rows.append(checkpoint_info(path))
    rows.sort(key=lambda r: r.name)
    rows.sort(key=lambda r: r.saved_at or "", reverse=True)
    return rows


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
    try:
        manifest, raw = _read_manifest(path)
        _check_manifest_values(path, manifest)
        size = len(raw)
        for entry in manifest["files"].values():
            where = path / entry["file"]
            try:
                st = os.lstat(where)  # never opened here: a FIFO or a device costs nothing
            except OSError:
                raise CheckpointError(f"{where} is missing; this checkpoint is incomplete, save it again") from None
            if not stat.S_ISREG(st.st_mode):
                raise _not_regular(where, st.st_mode)
            actual = st.st_size
            if actual != entry["size"]:
                raise CheckpointError(
                    f"{where} has {count(actual, 'byte', grouped=False)} but {entry['size']} were written (truncated); save the checkpoint again"
                )
            size += actual
    except CheckpointError as e:
        return CheckpointInfo(name=path.name, step=None, val_loss=None, data_spec=None,
                              size_bytes=_dir_size(path), saved_at=None, error=str(e))
    t = manifest["trainer"]
    evaluated = [h["val_loss"] for h in t["history"] if h.get("val_loss") is not None]
    saved_at = manifest.get("saved_at")
    return CheckpointInfo(
        name=path.name, step=t["step"], val_loss=evaluated[-1] if evaluated else None,
        data_spec=manifest["data_spec"], size_bytes=size,
        saved_at=saved_at if isinstance(saved_at, str) else None, model_config=dict(manifest["model_config"]),
    )


def _dir_size(path: Path) -> int:
    total = 0
    try:
        for entry in os.scandir(path):
            if entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
    except OSError:
        pass
    return total


# --- keeping older copies --------------------------------------------------------------------------
def rotate(directory, name: str, keep: int) -> None:
    """Shift DIR/NAME to NAME-1, NAME-1 to NAME-2, ..., keeping `keep` older copies (the oldest goes).

    Used before an autosave of a new run, so that the last few runs stay loadable. Each step is one
    rename of a whole checkpoint directory, so every name always holds a complete checkpoint. Runs
    under the folder lock; save_checkpoint(rotate=...) rotates and saves under one lock, so that two
    sessions autosaving at once keep both runs. See `_rotate_locked` for what is moved.
    """
    directory = Path(directory).expanduser()
    check_name(name)
    try:
        if not (directory / name).is_dir():
            return
        with folder_lock(directory):
            _rotate_locked(directory, name, keep)
    except OSError as e:
        raise CheckpointError(f"could not keep the previous {name} in {_clip(str(directory))} ({e.strerror}); "
                              "check that folder's permissions") from None


_LEGACY = "legacy"  # a checkpoint from before `origin` was recorded


def _origin_kind(path: Path) -> str | None:
    """Who wrote the checkpoint at `path`: an ORIGINS kind, _LEGACY, or None (nothing there, or unreadable)."""
    try:
        manifest, _ = _read_manifest(path)
    except (CheckpointError, OSError):
        return None
    origin = manifest.get("origin")
    return _LEGACY if origin is None else origin["kind"]


def _is_own_autosave(path: Path, session: str | None) -> bool:
    """Whether `path` holds an autosave written by this session (a continued run replaces only that)."""
    if not session:
        return False
    try:
        manifest, _ = _read_manifest(path)
    except (CheckpointError, OSError):
        return False
    origin = manifest.get("origin") or {}
    return origin.get("kind") == "autosave" and origin.get("session") == session


def _rotate_locked(directory: Path, name: str, keep: int) -> None:
    """Rotation, the folder lock held: it moves and deletes only what rotation made.

    The slots are NAME, NAME-1 .. NAME-keep. An autosave (or a checkpoint older than `origin`,
    which rotation made too in those releases) is rotation's own. Any other checkpoint in a slot (a
    user's `save=autosave-3`, a model kept before a rebuild, a folder that does not load) is left
    where it is, and the autosaves skip over its slot; an own checkpoint that would move past
    NAME-keep is deleted. NAME itself always moves (the new save needs the name); if it is not
    rotation's own and no slot is free, it moves to the first free NAME-k past `keep`, never deleted.
    """
    def slot(i: int) -> Path:
        return directory / (name if i == 0 else f"{name}-{i}")

    def own(i: int) -> bool:
        return _origin_kind(slot(i)) in ("autosave", _LEGACY)

    blocked = {i for i in range(1, keep + 1) if os.path.lexists(slot(i)) and not own(i)}
    for i in range(keep, -1, -1):  # oldest first: each one's destination is free or already moved on
        if i in blocked or not slot(i).is_dir() or (i > 0 and not own(i)):
            continue
        j = i + 1
        while j in blocked:
            j += 1
        if j <= keep:
            os.rename(slot(i), slot(j))
        elif i > 0 or own(0):
            shutil.rmtree(slot(i))
        else:
            while os.path.lexists(slot(j)):
                j += 1
            os.rename(slot(i), slot(j))  # someone's checkpoint named NAME: moved aside, kept
