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

Reading is bounded before it starts. Every file is opened without blocking (a FIFO cannot hang a
load) and without following a symbolic link, then checked with `fstat` on the open descriptor: only
a regular file of exactly the size its manifest records is read, and that size must fit what the
model's config can need (see `_size_limits`); the manifest itself may have `_MAX_MANIFEST_BYTES`.
A hostile or broken checkpoint therefore costs at most about the memory of the model it describes.

Loading validates everything and returns a `Checkpoint`; `build_model`, `restore_trainer` and
`restore_rng` then apply it. A caller restores into a fresh model and trainer and swaps them in only
when all of that succeeded, so a bad checkpoint never leaves the session half-changed.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import stat
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
from .optimizers import group_kind
from .train import Trainer
from .words import count

FORMAT_VERSION = 1
FORMAT_NAME = "minitf-checkpoint"
MANIFEST = "checkpoint.json"

_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")
# Every name a save writes carries the writer's pid, so a later save can tell the debris of a dead
# save (removable) from the files of a save still in progress in another process (left alone).
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
            writes_into = _nearest_existing(directory)
            if not writes_into.is_dir():
                raise CheckpointError(f"{writes_into} is a file, not a directory; choose another checkpoint directory")
        if not os.access(writes_into, os.W_OK | os.X_OK):
            raise CheckpointError(
                f"cannot write in {writes_into} (permission denied); change its permissions or choose another "
                "checkpoint directory"
            )
    except OSError as e:
        raise CheckpointError(f"cannot use {target}: {e.strerror or e}; choose another checkpoint directory") from None
    return target


def _nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (a file in the way, as in `afile/sub`, is returned)."""
    while not path.exists() and path.parent != path:  # exists() is False below a file (ENOTDIR)
        path = path.parent
    return path


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
def save_checkpoint(directory, name: str, model: MiniTransformerLM, trainer, vocab: str, data_spec: str) -> Path:
    """Save model, trainer and random generators as DIR/NAME atomically; returns DIR/NAME."""
    target = check_save_target(directory, name)
    directory = target.parent
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

    uid = f"{os.getpid()}-{secrets.token_hex(4)}"
    model_file, state_file = f"model-{uid}.safetensors", f"state-{uid}.safetensors"
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "minitf_version": __version__,
        "torch_version": torch.__version__,
        "saved_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
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
        _remove_dead_temp_dirs(directory)
        if target.is_dir():
            _save_over(target, files, manifest_bytes, uid)
        else:
            _save_new(directory, name, files, manifest_bytes, uid)
    except OSError as e:
        raise CheckpointError(f"could not save checkpoint {name!r} in {directory}: {_save_failure(e)}") from e
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


def _save_new(directory: Path, name: str, files: dict[str, bytes], manifest_bytes: bytes, uid: str) -> None:
    tmp = directory / f".{name}.tmp-{uid}"
    try:
        tmp.mkdir()
        for fname, data in files.items():
            _write_file(tmp / fname, data)
        _write_file(tmp / MANIFEST, manifest_bytes)
        _fsync_dir(tmp)
        os.rename(tmp, directory / name)  # the commit: NAME appears complete or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(directory, best_effort=True)


def _save_over(target: Path, files: dict[str, bytes], manifest_bytes: bytes, uid: str) -> None:
    old = _referenced_files(target)
    written: list[Path] = []
    tmp_manifest = target / f".{MANIFEST}.tmp-{uid}"
    try:
        for fname, data in files.items():
            written.append(target / fname)
            _write_file(target / fname, data)
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


def _pid_is_dead(pid: int) -> bool:
    if pid == os.getpid():
        return True  # our own leftovers: this process is not in the middle of that save any more
    if os.name == "nt":
        return False  # os.kill(pid, 0) would signal the process on Windows; keep the debris
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _remove_dead_temp_dirs(directory: Path) -> None:
    for entry in os.listdir(directory):
        m = _TMP_DIR.match(entry)
        if m and _pid_is_dead(int(m.group(2))):
            shutil.rmtree(directory / entry, ignore_errors=True)


def _remove_strays(target: Path, keep: set[str]) -> None:
    try:
        entries = os.listdir(target)
    except OSError:
        return
    for entry in entries:
        if entry in keep:
            continue
        m = _DATA_FILE.match(entry) or _MANIFEST_TMP.match(entry)
        if m is None:
            continue  # not ours: leave it
        pid = int(m.group(2) if m.re is _DATA_FILE else m.group(1))
        if _pid_is_dead(pid):
            _unlink(target / entry)


def _referenced_files(target: Path) -> set[str]:
    """Data files the current manifest names (none if it is missing or unreadable)."""
    try:
        manifest = json.loads(_read_manifest_bytes(target / MANIFEST))
        names = {entry["file"] for entry in manifest["files"].values()}
    except Exception:
        return set()
    return {n for n in names if isinstance(n, str) and _DATA_FILE.match(n)}


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

    need(isinstance(m.get("model_config"), dict), "model_config is missing")
    need(isinstance(m.get("vocab"), str), "vocab is missing")
    need(isinstance(m.get("data_spec"), str), "data_spec is missing")
    t = m.get("trainer")
    need(isinstance(t, dict), "trainer is missing")
    for key in ("step", "run_start", "run_steps"):
        need(is_int(t.get(key)) and t[key] >= 0, f"trainer.{key} is not a whole number >= 0")
    need(isinstance(t.get("run_elapsed"), (int, float)) and not isinstance(t.get("run_elapsed"), bool),
         "trainer.run_elapsed is not a number")
    constant = t.get("run_constant_lr")
    need(constant is None or (isinstance(constant, (int, float)) and not isinstance(constant, bool) and constant > 0),
         "trainer.run_constant_lr is not a positive number")
    need(isinstance(t.get("history"), list) and all(isinstance(h, dict) for h in t["history"]),
         "trainer.history is not a list of steps")
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
        "history": [dict(h) for h in t["history"]],
        "train_config": dict(t["train_config"]),
        "generator": generator,
        "optimizer": optimizer_state,
    }
    return Checkpoint(
        name=name, path=path, model_config=config, model_state=model_state, trainer_state=trainer_state,
        torch_rng=torch_rng, cuda_rng=cuda_rng, vocab=vocab, data_spec=manifest["data_spec"], meta=manifest,
    )


def _check_manifest_values(path: Path, manifest: dict) -> ModelConfig:
    """The model config, once it, the vocabulary and the training config are known to be valid."""
    try:
        config = ModelConfig.from_dict(manifest["model_config"])
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{path}: its model config is invalid ({e}); this checkpoint cannot be used") from None
    vocab = manifest["vocab"]
    if len(vocab) != config.vocab_size or len(set(vocab)) != len(vocab):
        raise CheckpointError(
            f"{path}: its vocabulary has {count(len(vocab), 'character')} ({len(set(vocab))} distinct) but the model has "
            f"vocab_size={config.vocab_size}; this checkpoint is inconsistent, save it again"
        )
    try:
        TrainConfig.from_dict(manifest["trainer"]["train_config"])
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{path}: its training config is invalid ({e}); this checkpoint cannot be used") from None
    return config


def _size_limits(config: ModelConfig) -> dict[str, int]:
    """The largest model and state files a checkpoint of this config can have, in bytes.

    The model file holds each stored tensor once; the state file AdamW's two moments (each the
    size of its parameter) and a step count per parameter, and the random states. Both get
    generous room for safetensors' header. Reading no more than this keeps a load's memory within
    what the model itself will take, whatever sizes a manifest claims.
    """
    ref = _reference_model(config)  # on the meta device: no memory for the weights themselves
    aliases = _tied_aliases(ref)
    stored = [v for k, v in ref.state_dict().items() if k not in aliases]
    params = list(ref.parameters())  # each shared parameter once
    weights = sum(t.numel() * t.element_size() for t in stored)
    moments = sum(2 * p.numel() * p.element_size() for p in params)
    return {
        "model": weights + _HEADER_SLACK + _TENSOR_SLACK * len(stored),
        "state": moments + 8 * len(params) + _RNG_SLACK + _HEADER_SLACK + _TENSOR_SLACK * 3 * len(params),
    }


def _reference_model(config: ModelConfig) -> MiniTransformerLM:
    """The model this config builds, on the meta device: names and shapes at no cost, RNG untouched."""
    with torch.random.fork_rng(devices=[]), torch.device("meta"):
        return MiniTransformerLM(config)


def _check_model_tensors(where: Path, config: ModelConfig, tensors: dict, map_location) -> dict[str, torch.Tensor]:
    ref = _reference_model(config)
    aliases = _tied_aliases(ref)
    expected = {k: v for k, v in ref.state_dict().items() if k not in aliases}
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
    state = {k: v.to(map_location) for k, v in tensors.items()}
    for alias, original in aliases.items():
        state[alias] = state[original]  # tied: the same tensor, as in the model
    order = list(ref.state_dict())
    return {k: state[k] for k in order}


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
    if not directory.exists():
        return []
    if not directory.is_dir():
        raise CheckpointError(f"{directory} is a file, not a directory; choose another checkpoint directory")
    rows = []
    for entry in sorted(os.listdir(directory)):
        path = directory / entry
        if not _NAME.match(entry) or not path.is_dir():
            continue  # temporary directories start with '.'; plain files are not checkpoints
        rows.append(checkpoint_info(path))
    rows.sort(key=lambda r: r.name)
    rows.sort(key=lambda r: r.saved_at or "", reverse=True)
    return rows


def checkpoint_info(path: Path) -> CheckpointInfo:
    """One `:ls` row for the checkpoint directory `path`: size counts the files its manifest names."""
    try:
        manifest, raw = _read_manifest(path)
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
    rename of a whole checkpoint directory, so every name always holds a complete checkpoint.
    """
    directory = Path(directory).expanduser()
    check_name(name)
    if not (directory / name).is_dir():
        return
    try:
        oldest = directory / f"{name}-{keep}"
        if oldest.is_dir():
            shutil.rmtree(oldest)
        for i in range(keep - 1, 0, -1):
            if (directory / f"{name}-{i}").is_dir():
                os.rename(directory / f"{name}-{i}", directory / f"{name}-{i + 1}")
        if keep > 0:
            os.rename(directory / name, directory / f"{name}-1")
    except OSError as e:
        raise CheckpointError(f"could not keep the previous {name} in {directory} ({e.strerror}); "
                              "check that folder's permissions") from None
