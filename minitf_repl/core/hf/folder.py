"""Reading a Hugging Face model folder without trusting it: bounded reads, headers before data, no pickle.

A folder holds config.json, the weights as model.safetensors or as shards named by
model.safetensors.index.json, and the tokenizer as tokenizer.json (or GPT-2's vocab.json and
merges.txt). Every file is checked before a byte of it is read: it must be a regular file (a
symbolic link is followed, as the Hugging Face cache links snapshots to blobs, but a link to a
device such as /dev/zero is refused), small files have a size limit, and a safetensors file's
header is parsed here and checked against the file's length, so a truncated download is named as
one. Nothing is ever unpickled: a folder with only pytorch_model.bin is told to convert it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from .. import memory
from ..errors import CheckpointError
from ..paths import cache_revision, gone_folder
from ..words import count

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
TOKENIZER = "tokenizer.json"
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.ckpt")

MAX_CONFIG_BYTES = 1 * 2**20
MAX_TOKENIZER_BYTES = 64 * 2**20  # Llama 3's tokenizer.json is 9 MB
MAX_HEADER_BYTES = 100 * 2**20  # safetensors' own limit on a header
MEMORY_SHARE = 0.8  # of the memory free now, what the weights (as float32) may take

# safetensors dtype -> bytes per element; the lab computes in float32, so others are converted on load
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}


@dataclass
class TensorEntry:
    """One tensor as a safetensors header describes it (nothing read yet)."""

    file: Path
    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class Folder:
    """What a folder holds, read and checked but no tensor loaded: config, tensor headers, tokenizer files."""

    path: Path
    config: dict
    tensors: dict[str, TensorEntry]
    weight_files: list[Path] = field(default_factory=list)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def regular_size(where: Path) -> int:
    """The size of the regular file `where` (a link is followed to its target), else CheckpointError."""
    try:
        st = os.stat(where)
    except FileNotFoundError:
        if os.path.islink(where):  # a cache's link into blobs/ whose blob is gone: was an internal error where read
            raise CheckpointError(f"{where} is a link to {os.readlink(where)}, which does not exist (a download cut "
                                  "short, or a cache cleaned, leaves one); download the model again") from None
        raise
    except OSError as e:
        raise CheckpointError(f"cannot read {where}: {e.strerror or e}; check the path and its permissions") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(f"{where} is {_kind(st.st_mode)}, not a regular file; "
                              "replace it with the model's real file")
    return st.st_size


LFS_POINTER = b"version https://git-lfs.github.com/spec/"  # how a Git LFS pointer file starts


def refuse_lfs_pointer(where: Path, head: bytes) -> None:
    """A file that begins with `head` and is a Git LFS pointer (what `git clone` of a Hugging Face repository leaves
    without Git LFS: a few lines naming the real file) is refused as one: downloading "again" the same way would
    leave the same pointer."""
    if not head.startswith(LFS_POINTER):
        return
    size = next((line.split()[1] for line in head.decode("utf-8", "replace").splitlines()
                 if line.startswith("size ") and len(line.split()) == 2 and line.split()[1].isdigit()), None)
    real = f" (the real one has {count(int(size), 'byte')})" if size is not None else ""
    raise CheckpointError(f"{where} is a Git LFS pointer, not the file itself{real}: the folder was cloned without "
                          "Git LFS; run git lfs pull in it, or download the files themselves")


def read_bounded(where: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, opened without blocking and checked again open."""
    size = regular_size(where)
    if size > limit:
        raise CheckpointError(f"{where} is {count(size, 'byte')}, more than the {limit // 2**20} MiB {what} "
                              "may have; it is not a model folder's file")
    fd = os.open(where, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped for something else since the stat
            raise CheckpointError(f"{where} is not a regular file; replace it with the model's real file")
        content = f.read(limit + 1)[:limit]
    refuse_lfs_pointer(where, content)
    return content


def read_json(where: Path, limit: int, what: str) -> dict:
    raw = read_bounded(where, limit, what)
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise CheckpointError(f"{where} is not valid JSON ({str(e)[:80]}); download the model's {what} again") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{where} is not a JSON object; download the model's {what} again")
    return value


def read_header(where: Path) -> dict[str, TensorEntry]:
    """The tensors a safetensors file describes, checked against its length (truncated files are named)."""
    size = regular_size(where)
    with open(where, "rb") as f:
        refuse_lfs_pointer(where, f.read(200))
        f.seek(0)
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{where} has {count(size, 'byte')}, too few for a safetensors file "
                                  "(truncated); download it again")
        (n,) = struct.unpack("<Q", head)
        if n > MAX_HEADER_BYTES or 8 + n > size:
            raise CheckpointError(f"{where} is truncated or not a safetensors file (its header claims "
                                  f"{count(n, 'byte')}, the file has {count(size, 'byte')}); download it again")
        raw = f.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CheckpointError(f"{where} has a damaged header (not JSON); download it again") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{where} has a damaged header; download it again")
    header.pop("__metadata__", None)
    entries, end = {}, 0
    for name, info in header.items():
        try:
            dtype, shape, (start, stop) = info["dtype"], tuple(int(s) for s in info["shape"]), info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise CheckpointError(f"{where} has a damaged header entry for {name}; download it again") from None
        if dtype not in DTYPE_BYTES:
            raise CheckpointError(f"{where} holds {name} as {dtype}; the lab reads float64, float32, float16 and "
                                  "bfloat16 weights only (not quantized ones): use the unquantized model")
        if stop - start != math.prod(shape) * DTYPE_BYTES[dtype]:
            raise CheckpointError(f"{where} has a damaged header entry for {name}; download it again")
        entries[name] = TensorEntry(where, dtype, shape)
        end = max(end, stop)
    if 8 + n + end != size:
        raise CheckpointError(f"{where} is truncated: its header describes {count(8 + n + end, 'byte')}, "
                              f"the file has {count(size, 'byte')}; download it again")
    return entries


def _in_folder(path: Path, name: object, index: Path) -> Path:
    if not isinstance(name, str) or not name or "/" in name or "\\" in name or name in (".", ".."):
        raise CheckpointError(f"{index} names a shard outside the folder ({str(name)[:60]!r}); "
                              "download the model again")
    return path / name


def weight_files(path: Path) -> list[Path]:
    """The safetensors files of the folder: the index's shards, or model.safetensors; pickles are refused."""
    index = path / INDEX
    if index.exists() or index.is_symlink():
        weight_map = read_json(index, MAX_CONFIG_BYTES * 16, "index").get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise CheckpointError(f"{index} has no weight_map; download the model again")
        return sorted({_in_folder(path, name, index) for name in weight_map.values()})
    if (path / WEIGHTS).exists() or (path / WEIGHTS).is_symlink():
        return [path / WEIGHTS]
    pickles = [name for name in PICKLES if (path / name).exists()]
    if pickles:
        raise CheckpointError(
            f"{path} has only {pickles[0]}, a pickle, which the lab never opens because unpickling can run code; "
            f"convert it to safetensors (transformers: model.save_pretrained(dir, safe_serialization=True))")
    raise CheckpointError(f"{path} has no {WEIGHTS} (nor {INDEX}); give a Hugging Face model folder with "
                          "safetensors weights")


def folders_inside(path: Path, most: int = 1000) -> list[Path]:
    """The model folders one level inside `path`, or in its snapshots/ (the Hugging Face cache keeps a model as
    models--NAME/snapshots/REVISION/), or, in the cache's own root (~/.cache/huggingface/hub, the folder a user gives
    first), in each models--NAME/snapshots/: those that hold config.json, of the first `most` entries of each (a huge
    folder is not read through)."""
    import itertools

    found = []
    try:
        models = [Path(c.path) / "snapshots" for c in itertools.islice(os.scandir(path), most)
                  if c.name.startswith("models--") and c.is_dir()]
    except OSError:
        models = []
    for where in (path, path / "snapshots", *models):
        try:
            for child in itertools.islice(os.scandir(where), most):
                if child.is_dir() and (Path(child.path) / CONFIG).is_file():
                    found.append(Path(child.path))
        except OSError:
            continue
    return found


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")  # gpt2, openai-community/gpt2: a Hub model's id


def hub_cache() -> Path:
    """The Hugging Face cache's folder of models, as huggingface_hub (so transformers, `hf download`) finds it."""
    return Path(os.environ.get("HF_HUB_CACHE") or Path(os.environ.get("HF_HOME") or "~/.cache/huggingface") / "hub")


def download_command(name: str) -> str:
    """The line that downloads the Hub model `name` with the huggingface_hub installed here, as a message quotes it:
    `hf download NAME` where it ships the `hf` command (0.34 on), `huggingface-cli download NAME` where only that
    one, and where there is none, the install first. Read from its entry points, never imported (it takes a second):
    "`huggingface-cli download`" was told where only `hf` was installed."""
    from importlib import metadata

    try:
        commands = {e.name for e in metadata.distribution("huggingface_hub").entry_points
                    if e.group == "console_scripts"}
    except metadata.PackageNotFoundError:
        return f"`hf download {name}` (after `pip install huggingface_hub`)"
    if "hf" not in commands and "huggingface-cli" in commands:
        return f"`huggingface-cli download {name}`"
    return f"`hf download {name}`"


def _complete(snapshot: Path) -> str | None:
    """What a cache's snapshot lacks of the files a load reads first (config.json, the weights, the tokenizer), as a
    download cut short or of some files only leaves it; None where it has them all. A folder of pickles only is
    complete here: the load names that refusal itself."""
    if not (snapshot / CONFIG).is_file():
        return CONFIG
    if (snapshot / INDEX).exists() or (snapshot / WEIGHTS).exists() or (snapshot / WEIGHTS).is_symlink():
        try:
            missing = [f.name for f in weight_files(snapshot) if not f.is_file()]
        except CheckpointError:
            return None  # a damaged index: read_folder says so
        if missing:
            return f"{missing[0]}" + (f" and {len(missing) - 1} more weight file(s)" if len(missing) > 1 else "")
    elif not any((snapshot / name).exists() for name in PICKLES):
        return WEIGHTS
    if not ((snapshot / TOKENIZER).is_file() or ((snapshot / "vocab.json").is_file()
                                                 and (snapshot / "merges.txt").is_file())):
        return f"{TOKENIZER} (nor vocab.json and merges.txt)"
    return None


def hub_snapshot(path: Path) -> Path | None:
    """Where `path` is no file or folder here but reads as a Hub model's id (`hf:gpt2`, as transformers takes it): the
    snapshot of it in the local Hugging Face cache that refs/main names (the one there is, where refs/main names
    none), complete; None where it is a path, or not in the cache. CheckpointError, with the fix, where it is in the
    cache but cannot be read: several snapshots and refs/main naming none, or the snapshot incomplete. It was found
    and not loaded: "gpt2 does not exist ...; gpt2 is in the Hugging Face cache: hf:..."."""
    typed = str(path)
    if path.is_absolute() or typed.startswith(".") or not HUB_ID.fullmatch(typed) or os.path.lexists(path):
        return None
    model = hub_cache().expanduser() / f"models--{typed.replace('/', '--')}"
    try:
        snapshots = [p for p in (model / "snapshots").iterdir() if p.is_dir()]
    except OSError:
        snapshots = []
    if not snapshots:
        return None
    named = _main_snapshot(model, snapshots)
    if named is None and len(snapshots) > 1:
        newest = _cached(model, [p for p in snapshots if (p / CONFIG).is_file()] or snapshots)
        raise CheckpointError(f"{typed} is in the Hugging Face cache as {len(snapshots)} snapshots, and no refs/main "
                              f"names one of them; give the one to read, e.g. hf:{newest} (the newest)")
    snapshot = named or snapshots[0]
    if (lacks := _complete(snapshot)) is not None:
        raise CheckpointError(f"{typed} is in the Hugging Face cache, but its snapshot hf:{snapshot} has no {lacks} "
                              f"(a download cut short, or of some files only); {download_command(typed)} fetches it")
    return snapshot


def _main_snapshot(model: Path, snapshots: list[Path]) -> Path | None:
    """Of a cache's models--NAME's `snapshots`, the one its refs/main names, config.json or not; None where it names
    none of them (no refs/main, or another revision)."""
    try:
        revision = read_bounded(model / "refs" / "main", 256, "refs/main").decode("ascii", "replace").strip()
    except (OSError, CheckpointError):
        return None
    return next((p for p in snapshots if p.name == revision), None)


def _hub_hint(path: Path) -> str:
    """Where a name that is no folder reads as a Hub model's id (`hf:gpt2`, as transformers takes it): the snapshot of
    it in the local Hugging Face cache (`:load` and `:parity` read it: this says it to a caller of read_folder), why
    that cannot be read, or that minitf downloads no model, and how to get one. It said only that gpt2 "does not
    exist"."""
    typed = str(path)
    try:
        snapshot = hub_snapshot(path)
    except CheckpointError as e:
        return f"; {e}"
    if snapshot is not None:
        return f"; {typed} is in the Hugging Face cache: hf:{snapshot}"
    if path.is_absolute() or typed.startswith(".") or not HUB_ID.fullmatch(typed):
        return ""
    return (f"; {typed} reads as a model's name on the Hugging Face Hub, and minitf never downloads one: "
            f"{download_command(typed)} downloads it into the Hugging Face cache, where hf:{typed} then finds it")


def _cached(model: Path, snapshots: list[Path]) -> Path:
    """Of a cache's models--NAME's `snapshots`, the one its refs/main names, as transformers reads the cache (and
    `hf:models--NAME` loads); the newest where refs/main names none of them. The newest file time alone offered an
    older revision touched later."""
    named = cache_revision(model)
    return named if named in snapshots else max(snapshots, key=lambda p: p.stat().st_mtime)


def read_folder(path: Path) -> Folder:
    """config.json and every tensor header of a model folder, checked; no tensor data is read."""
    if (gone := gone_folder(path)) is not None:
        raise CheckpointError(f"cannot read {path}: {gone}")
    if not path.is_dir():
        what = "does not exist" if not path.exists() else "is not a folder"
        raise CheckpointError(f"{path} {what}; give the folder that holds config.json and model.safetensors"
                              + (_hub_hint(path) if not path.exists() else ""))
    try:
        config = read_json(path / CONFIG, MAX_CONFIG_BYTES, CONFIG)
    except FileNotFoundError:
        inside = folders_inside(path)
        if inside:
            model = path.parent if path.name == "snapshots" else path  # a cache's models--NAME, or its snapshots/
            newest = _cached(model, inside)
            which = (f"{newest.relative_to(path)} in it has one" if len(inside) == 1 else
                     f"{len(inside)} folders in it have one (the "
                     f"{'one refs/main names' if newest == cache_revision(model) else 'newest'}: "
                     f"{newest.relative_to(path)})")
            raise CheckpointError(f"{path} has no {CONFIG}, but {which}; give the model's own folder, "
                                  f"e.g. hf:{newest}") from None
        raise CheckpointError(f"{path} has no {CONFIG}; give a Hugging Face model folder (config.json, "
                              "model.safetensors, tokenizer.json)") from None
    files = weight_files(path)
    tensors: dict[str, TensorEntry] = {}
    for file in files:
        try:
            tensors.update(read_header(file))
        except FileNotFoundError:
            raise CheckpointError(f"{file} is missing (named by {INDEX}); download the model again") from None
    return Folder(path, config, tensors, files)


def check_memory(folder: Folder, free: int | None = None) -> None:
    """Refuse a model whose float32 weights would not fit in the memory free now (before anything is built)."""
    need = sum(e.numel for e in folder.tensors.values()) * 4
    free = memory.available_memory() if free is None else free
    if free is not None and need > MEMORY_SHARE * free:
        raise CheckpointError(f"{folder.path} needs {need / 2**30:.1f} GiB as float32 weights, but only "
                              f"{free / 2**30:.1f} GiB of memory is free; choose a smaller model or free memory")
