"""Hugging Face model folders: GPT-2 and Llama weights in and out of MiniTransformerLM.

`load_folder(path)` reads a local folder (config.json, safetensors weights, one file or shards with
their index, tokenizer.json or vocab.json + merges.txt) into a MiniTransformerLM with the settings
that make it compute the same function, and its tokenizer. `save_folder(model, tokenizer, path)`
writes a lab model whose settings have a Hugging Face equivalent as a folder `transformers` loads
with `from_pretrained`. Never the network, never a pickle.

Each architecture is one module that says everything about it, read top to bottom:
    gpt2.py    lab_config, hf_config, hf_shapes, lab_weights, hf_weights, REQUIRED
    llama.py   the same for Llama (RoPE's half-split rows reordered, grouped-query attention, SwiGLU)

Loading checks everything before it builds anything: the config against what the lab computes,
every tensor's name and shape against the config (from the safetensors headers, before a byte of
data is read), the memory the weights need against the memory free, the tokenizer against the
embedding. A failure is one CheckpointError line; nothing is half-loaded.
"""

from __future__ import annotations

import errno
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import fcntl
except ImportError:  # Windows: no flock, and no clean-up of dead saves' folders
    fcntl = None

from ..bpe import SubwordTokenizer, characters_as_tokenizer, characters_of
from ..config import ModelConfig
from ..data import CharTokenizer
from ..errors import CheckpointError, ConfigError, UserError
from ..notices import told
from ..paths import HF_PREFIX, gone_folder, hf_path  # noqa: F401 (a name of this package)
from . import gpt2, llama
from .common import get
from .folder import (CONFIG, MAX_CONFIG_BYTES, MAX_TOKENIZER_BYTES, TOKENIZER, Folder, check_memory, read_bounded,
                     read_folder, read_json)

PREFIX = HF_PREFIX  # `:load hf:PATH`, `:save hf:PATH`, `:parity hf:PATH`; hf_path reads it (core.paths)
ARCHITECTURES = {gpt2.MODEL_TYPE: gpt2, llama.MODEL_TYPE: llama}
NAMES = {gpt2.MODEL_TYPE: "GPT-2", llama.MODEL_TYPE: "Llama"}


# What a desktop's file browser leaves in a folder it has shown: macOS' Finder its view settings (.DS_Store), Windows'
# Explorer its thumbnails and icon (Thumbs.db, desktop.ini). A folder made in Finder to save into held one, and
# `:save hf:` into it was refused as "not an empty folder"; they hold nothing of anyone's and are removed with it.
DESKTOP_FILES = (".DS_Store", "Thumbs.db", "desktop.ini")


@dataclass
class HFModel:
    """A loaded folder: the lab's model with the folder's weights, its tokenizer, and where it came from."""

    model: object  # MiniTransformerLM
    tokenizer: SubwordTokenizer
    path: Path
    model_type: str  # gpt2 | llama
    context: int | None  # the folder's own context window where the lab's is shorter (RoPE models), else None


# --- in -------------------------------------------------------------------------------------------
def architecture(folder: Folder):
    model_type = get(folder.config, "model_type", str)
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise CheckpointError(f"{folder.path} holds a {model_type[:40]!r} model; the lab loads the architectures "
                              f"{' and '.join(ARCHITECTURES)} only")
    return arch


def lab_config(folder: Folder) -> ModelConfig:
    """The lab's settings for the folder, after checking every tensor's name and shape against them."""
    arch = architecture(folder)
    try:
        config = arch.lab_config(folder.config)
    except ConfigError as e:
        raise CheckpointError(f"{folder.path / CONFIG} describes a model the lab cannot build ({e})") from None
    names = set(folder.tensors)
    expected = arch.hf_shapes(config, names)
    for name, shape in expected.items():
        entry = folder.tensors.get(name)
        if entry is None and name == "lm_head.weight":  # the one tensor that the tie implies, not a size
            raise CheckpointError(f"{folder.path} has no tensor lm_head.weight, which its config.json implies with "
                                  "tie_word_embeddings=false (a head of its own); the config does not match the "
                                  "weights (check tie_word_embeddings: true where the head is the embedding)")
        if entry is None:
            raise CheckpointError(f"{folder.path} has no tensor {name}, which its config.json implies; the config does "
                                  f"not match the weights (check {arch.SIZES})")
        if entry.shape != shape:
            raise CheckpointError(f"{name} is {tuple(entry.shape)} in {entry.file.name} but config.json implies "
                                  f"{shape}; the config does not match the weights (check {arch.SIZES})")
    extra = sorted(n for n in names - set(expected) if not arch.ignored(n) and n != "lm_head.weight")
    if extra:
        raise CheckpointError(f"{folder.path} holds {len(extra)} tensor(s) its config.json does not describe (first "
                              f"{extra[0]}); the config does not match the weights (check {arch.SIZES})")
    return config


# The special tokens as a folder names them, which tokenizer.json does not (it holds the tokens, not which is which):
# tokenizer_config.json's names, and config.json's ids (transformers' generate stops at eos_token_id).
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
SPECIAL_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
SPECIAL_FILES = ("tokenizer_config.json", "special_tokens_map.json")  # the second an older folder's, read after


class FolderTokenizer(SubwordTokenizer):
    """A folder's subword tokenizer, with what the folder says of its special tokens: which token begins a text, ends
    one, stands for an unknown one and pads, and their ids in config.json. `:save hf:` writes them back: a folder
    saved without them had a tokenizer with no eos_token and a config with no eos_token_id, so transformers'
    generate never stopped at the end of a text. The lab itself reads and writes text without them (core.bpe)."""

    def __init__(self, tokenizer, vocab_size: int | None = None):
        super().__init__(tokenizer, vocab_size)
        self.special_tokens: dict[str, str] = {}  # "eos_token": "</s>", as tokenizer_config.json names them
        self.special_ids: dict[str, int | list[int]] = {}  # "eos_token_id": 2, as config.json gives them


def special_tokens(path: Path, tokenizer: SubwordTokenizer) -> dict[str, str]:
    """bos_token, eos_token, unk_token and pad_token as the folder names them: tokenizer_config.json's, and an older
    folder's special_tokens_map.json's where the first names none; each a string or an AddedToken written out
    ({"content": "<s>", ...}). A token the tokenizer lacks is left out (transformers would add it as a new token, an id
    past the embedding's rows), and so is a file that cannot be read: the model loads without them, only
    `:save hf:` writes them back."""
    found: dict[str, str] = {}
    for name in SPECIAL_FILES:
        if not (path / name).exists():
            continue
        try:
            spec = read_json(path / name, MAX_TOKENIZER_BYTES, name)
        except CheckpointError:
            continue
        for key in SPECIAL_TOKENS:
            value = spec.get(key)
            content = value.get("content") if isinstance(value, dict) else value
            if key not in found and isinstance(content, str) and tokenizer.tokenizer.token_to_id(content) is not None:
                found[key] = content
    return found


def special_ids(config: dict, vocab_size: int) -> dict[str, int | list[int]]:
    """config.json's bos_token_id, eos_token_id and pad_token_id: an id, or a list of them (Llama 3.1 ends a text at
    any of three), each a row of the embedding; another value is left out, as transformers would never produce it."""
    found: dict[str, int | list[int]] = {}
    for key in SPECIAL_IDS:
        value = config.get(key)
        ids = value if isinstance(value, list) else [value]
        if ids and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab_size for i in ids):
            found[key] = value
    return found


def read_tokenizer(path: Path, vocab_size: int, config: dict | None = None) -> SubwordTokenizer | CharTokenizer:
    """tokenizer.json, or GPT-2's vocab.json and merges.txt; its ids must fit the model's embedding. One that reads a
    character a token, as `:save hf:` writes a character model's, comes back as the character tokenizer it was.
    A subword one comes with the folder's special tokens, their ids from `config` (config.json), for `:save hf:`."""
    if (path / TOKENIZER).exists() or (path / TOKENIZER).is_symlink():
        text = read_bounded(path / TOKENIZER, MAX_TOKENIZER_BYTES, TOKENIZER).decode("utf-8", errors="replace")
        tokenizer = FolderTokenizer.from_json(text, vocab_size, where=str(path / TOKENIZER))
    elif (path / "vocab.json").exists() and (path / "merges.txt").exists():
        vocab = read_json(path / "vocab.json", MAX_TOKENIZER_BYTES, "vocab.json")
        lines = read_bounded(path / "merges.txt", MAX_TOKENIZER_BYTES, "merges.txt").decode("utf-8", "replace")
        merges = [tuple(line.split(" ")) for line in lines.splitlines() if line and not line.startswith("#version")]
        if any(len(m) != 2 for m in merges) or not all(isinstance(i, int) for i in vocab.values()):
            raise CheckpointError(f"{path}'s vocab.json or merges.txt is damaged; download them again")
        tokenizer = FolderTokenizer.from_vocab_merges(vocab, merges, vocab_size)
    else:
        raise CheckpointError(f"{path} has no {TOKENIZER} (nor vocab.json and merges.txt); copy the model's "
                              "tokenizer files into the folder")
    if tokenizer.own_size > vocab_size:
        raise CheckpointError(f"the tokenizer has {tokenizer.own_size:,} tokens but the model's embedding only "
                              f"{vocab_size:,} rows; use the tokenizer of the same model")
    chars = characters_of(tokenizer)  # a character model's folder (`:save hf:`): its tokenizer is characters
    if chars is not None and len(chars) == vocab_size:
        return CharTokenizer.from_vocab(chars)
    tokenizer.special_tokens = special_tokens(path, tokenizer)
    tokenizer.special_ids = special_ids(config or {}, vocab_size)
    return tokenizer


def load_folder(path: Path, device: torch.device | str = "cpu") -> HFModel:
    """The folder's model and tokenizer, everything checked first (see the module docstring)."""
    from safetensors import safe_open

    from ..model import MiniTransformerLM

    path = Path(path).expanduser()
    folder = read_folder(path)
    arch = architecture(folder)
    config = lab_config(folder)
    check_memory(folder)
    tokenizer = read_tokenizer(path, config.vocab_size, folder.config)
    with torch.random.fork_rng(devices=[]):  # initial weights the folder's replace: the RNG is left as it was
        model = MiniTransformerLM(config)
    params = dict(model.named_parameters())
    handles = {}
    filled = set()
    try:
        def read(name: str) -> torch.Tensor:
            file = folder.tensors[name].file
            if file not in handles:
                handles[file] = safe_open(str(file), framework="pt")
            return handles[file].get_tensor(name).float()

        with torch.no_grad():
            for name, tensor in arch.lab_weights(config, set(folder.tensors), read):
                if not torch.isfinite(tensor).all():
                    raise CheckpointError(f"{path} holds a weight that is not finite (for {name}); download the "
                                          "model again")
                params[name].copy_(tensor)
                filled.add(name)
    except UserError:
        raise
    except Exception as e:  # safetensors' own errors: a file changed or damaged since its header was read
        raise CheckpointError(f"cannot read the weights in {path} ({str(e)[:100]}); download the model again") from None
    finally:
        handles.clear()
    assert filled == set(params), f"{arch.MODEL_TYPE} mapping left {sorted(set(params) - filled)} unset"
    own = get(folder.config, "max_position_embeddings", int, config.max_seq_len)
    return HFModel(model.to(device).eval(), tokenizer, path, arch.MODEL_TYPE,
                   own if own > config.max_seq_len else None)


def read_config(path: Path) -> dict:
    """config.json alone (for :parity, which lets transformers read the rest)."""
    return read_json(Path(path) / CONFIG, MAX_CONFIG_BYTES, CONFIG)


# --- out ------------------------------------------------------------------------------------------
def unmet(config: ModelConfig, model_type: str) -> list[tuple[str, object, object]]:
    """Each setting of `config` the architecture cannot express: (name, value, a value it takes). The heads of keys
    and values count as built: n_kv_heads=n_heads is the multi-head attention GPT-2 has, as none is."""
    arch = ARCHITECTURES[model_type]
    found = []
    for name, allowed in arch.REQUIRED.items():
        allowed = allowed if isinstance(allowed, tuple) else (allowed,)
        if getattr(config, name) not in allowed:
            found.append((name, getattr(config, name), allowed[0]))
    if model_type == gpt2.MODEL_TYPE and config.kv_heads != config.n_heads:
        found.append(("n_kv_heads", config.n_kv_heads, None))
    return found


def mismatch(config: ModelConfig, model_type: str) -> tuple[str, object, object] | None:
    """The first setting of `config` the architecture cannot express: (name, value, a value it takes), or None."""
    found = unmet(config, model_type)
    return found[0] if found else None


def export_type(config: ModelConfig) -> str:
    """The architecture a lab model is saved as: the one that expresses all its settings, else refused
    naming the first setting the nearest architecture lacks."""
    found = {t: mismatch(config, t) for t in ARCHITECTURES}
    for model_type, problem in found.items():
        if problem is None:
            return model_type

    nearest = min(found, key=lambda model_type: len(unmet(config, model_type)))
    every = unmet(config, nearest)  # all of them: named one at a time, each fix cost a retrain to find the next

    def spelled(v) -> str:  # as :set takes it: on/off for a switch, none for no value
        return ("on" if v else "off") if isinstance(v, bool) else "none" if v is None else str(v)

    given = " and ".join(f"{name}={spelled(value)}" for name, value, _ in every)
    wanted = " ".join(f"{name}={spelled(w)}" for name, _, w in every)
    one = len(every) == 1
    it = "that setting" if one else "those settings"
    # a setting no weight depends on (causal) changes in place: "train a new model ... from fresh weights" sent a
    # learner to throw a trained model away, where `:set causal=on` keeps it and the save then works
    way = (f"change {it}, which keeps the weights" if all(ModelConfig.spec(name).in_place for name, _, _ in every)
           else f"train a new model with {it} changed, which starts from fresh weights")
    raise ConfigError(f"{given} {'has' if one else 'have'} no equivalent in {NAMES[nearest]}, the nearest architecture "
                      f"transformers loads ({wanted} would be); save a lab checkpoint instead, or {way}",
                      fix={name: w for name, _, w in every})


def read_back(config: ModelConfig, model_type: str) -> dict[str, tuple]:
    """{setting: (its value, the value a load of the folder gives)} where the two differ: the folder holds the same
    model in its architecture's terms (SwiGLU's hidden width for d_ff, gains of one for norm_gain=off), which read
    back as other settings, said so at the save rather than found later in :config."""
    arch = ARCHITECTURES[model_type]
    back = arch.lab_config(arch.hf_config(config))
    mine, theirs = config.as_built(), back.as_built()  # values that build the same model agree (a window of rope)
    # a setting that changes neither a weight nor the function (dropout, which the caller says apart: ARCHITECTURES'
    # KEEPS_DROPOUT) is not one; a base, an eps, the mask are
    # and one whose value reads the same (the window of sinusoidal positions builds no weight, of a learned table
    # does: "max_seq_len=64 (for max_seq_len=64)" was said)
    return {spec.name: (getattr(config, spec.name), getattr(back, spec.name)) for spec in ModelConfig.specs()
            if not (spec.in_place and not spec.new_function) and mine[spec.name] != theirs[spec.name]
            and getattr(config, spec.name) != getattr(back, spec.name)}


def save_folder(model, tokenizer, path: Path, context: int | None = None) -> str:
    """Write `model` (and its tokenizer) as a Hugging Face folder; returns the architecture written.

    `context`: the window of the folder the weights came from, where the lab cut it (a RoPE model's weights
    serve any length, so max_seq_len may be shorter than what they were trained for): written back as the
    model's max_position_embeddings when longer than max_seq_len, else a round trip would shrink the model.
    The folder is written whole into a temporary sibling and renamed into place, so a failure leaves
    nothing half-written; an existing non-empty folder is refused (nothing is overwritten).
    """
    from ..variants import position_kind

    path = Path(path).expanduser()
    model_type = export_type(model.config)
    arch = ARCHITECTURES[model_type]
    if path.exists() and (not path.is_dir() or any(f.name not in DESKTOP_FILES for f in path.iterdir())):
        raise CheckpointError(f"{path} exists and is not an empty folder; choose a new path (nothing is overwritten)")
    if (gone := gone_folder(path)) is not None:
        raise CheckpointError(f"cannot write {path}: {gone}")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_dead_saves(parent)
        tmp = new_folder(parent, path.name)
    except OSError as e:
        # the folder named by its path: "cannot write in ." said nothing of where the shell stood
        raise CheckpointError(f"cannot write in {parent.absolute()}: {e.strerror or e}; "
                              "choose a writable place") from None
    held = hold(tmp)  # until it is renamed into place or removed: another save's clean-up leaves it alone
    try:
        # The files are written by Python, not by safetensors' or tokenizers' own writers: those report a full disk (or
        # a file-size limit) as their own exception, SafetensorError or a bare Exception, which was an internal error;
        # and the weights are as readable as the umask lets files be (safetensors' save_file made them 0600)
        write_safetensors(tmp / "model.safetensors", arch.hf_weights(model), {"format": "pt"})
        hf = arch.hf_config(model.config)
        if context is not None and not position_kind(model.config).learned:  # no table of positions to outgrow
            hf["max_position_embeddings"] = max(hf["max_position_embeddings"], context)
        # a folder's tokenizer brings its special tokens back (FolderTokenizer); the lab's own tokenizers have none
        folder_tokenizer = isinstance(tokenizer, FolderTokenizer)
        hf.update(special_ids(tokenizer.special_ids, model.config.vocab_size) if folder_tokenizer else {})
        (tmp / CONFIG).write_text(json.dumps(hf, indent=2) + "\n")
        tk = tokenizer.tokenizer if tokenizer.kind == "bpe" else characters_as_tokenizer(tokenizer.itos)
        (tmp / TOKENIZER).write_text(tk.to_str(pretty=True), encoding="utf-8")
        # transformers' AutoTokenizer reads tokenizer.json through the class this names, and takes which token is
        # which from the names after it
        tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast",
                            **(tokenizer.special_tokens if folder_tokenizer else {})}
        (tmp / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2) + "\n")
        unnamed = [] if folder_tokenizer or tokenizer.kind != "bpe" else [
            t.get("content") for t in json.loads(tk.to_str()).get("added_tokens", []) if t.get("special")]
        if path.exists():
            for litter in DESKTOP_FILES:
                (path / litter).unlink(missing_ok=True)
            path.rmdir()  # empty: checked above
        os.replace(tmp, path)
        if unnamed and (tell := told()) is not None:  # a lab checkpoint of a folder's model, the folder gone: its
            # special tokens went without a word, and transformers' generate then never stopped at the end token
            tell(f"its tokenizer holds the special tokens {', '.join(map(repr, unnamed))} but not which begins and "
                 "which ends a text (the folder it came from said so, and is not there now): tokenizer_config.json "
                 "names none, so transformers' generate will not stop at an end token")
    except BaseException as e:
        for child in tmp.iterdir() if tmp.exists() else ():
            child.unlink()
        if tmp.exists():
            tmp.rmdir()
        if isinstance(e, OSError):  # it was "internal error: OSError" (a full disk, or a second save of the folder)
            raise _folder_not_written(path, e) from None
        raise
    finally:
        if held is not None:
            os.close(held)  # the flock goes with it
    return model_type


def write_safetensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> None:
    """Write `tensors` as one safetensors file, a tensor at a time: the format's 8-byte header length, its JSON
    header (padded with spaces to 8 bytes, as safetensors pads it), then each tensor's bytes in the header's order.

    safetensors.torch.save built the whole file in memory, after a bytes copy of every tensor: writing a 6 x 384
    model's folder took 126 MiB over the 41 MiB of its weights, and a model at the lab's 500M parameters would have
    taken 6 GiB more. This writes from each tensor's own memory, so a save costs no more than the tensors given."""
    from ..checkpoint.manifest import safetensors_header, tensor_bytes  # a checkpoint's files begin so too

    start, _ = safetensors_header(tensors, metadata)
    with open(path, "wb") as f:
        f.write(start)
        for t in tensors.values():
            if t.numel():
                f.write(tensor_bytes(t))


# A save writes its folder into a temporary sibling, ".NAME.tmp-" and 8 random characters, holding a flock on it
# while it writes. One killed part-way (kill -9, a power cut) left it there for good, hidden, with a model's weights
# in it: the next save into the same folder removes those that hold nothing but what a save writes and whose writer
# is gone (no flock on them, and older than DEAD_AFTER seconds: the moment between a save's mkdir and its flock).
TMP_MARK = ".tmp-"
TMP_FOLDER = re.compile(r"^\..+\.tmp-[a-z0-9_]{8}$")
WRITTEN = frozenset({"model.safetensors", CONFIG, TOKENIZER, "tokenizer_config.json"})
DEAD_AFTER = 10.0


def new_folder(parent: Path, name: str) -> Path:
    """A new empty folder ".NAME.tmp-XXXXXXXX" in `parent`, made as mkdir makes folders (the umask's permissions):
    tempfile.mkdtemp's 0700 went with the folder into place, and a folder saved for others to load was its
    owner's alone."""
    while True:
        folder = parent / f".{name}{TMP_MARK}{secrets.token_hex(4)}"
        try:
            folder.mkdir()
        except FileExistsError:  # another save's name, drawn again: draw another
            continue
        return folder


def hold(folder: Path) -> int | None:
    """A descriptor of `folder` holding its flock (None where the system cannot lock a folder: nothing is then
    ever taken for a dead save's, see remove_dead_saves)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_dead_saves(parent: Path) -> None:
    """Remove the temporary folders of saves into `parent` that died part-way; best effort, and only what is
    surely one: a folder named as save_folder names them, holding only files it writes, older than DEAD_AFTER
    seconds, whose flock this process can take (a live save holds it, on any host that shares the lock)."""
    if fcntl is None:  # no way to tell a live save from a dead one
        return
    try:
        entries = [entry for entry in os.listdir(parent) if TMP_FOLDER.match(entry)]
    except OSError:
        return
    for entry in entries:
        folder = parent / entry
        try:
            if folder.is_symlink() or not folder.is_dir() or time.time() - folder.stat().st_mtime < DEAD_AFTER:
                continue
            inside = os.listdir(folder)
            if not set(inside) <= WRITTEN or not all((folder / name).is_file() for name in inside):
                continue
        except OSError:
            continue
        fd = hold(folder)
        if fd is None:  # a live save holds it (or the folder cannot be locked): left alone
            continue
        try:
            for name in inside:
                (folder / name).unlink(missing_ok=True)
            folder.rmdir()
        except OSError:
            pass
        finally:
            os.close(fd)


def _folder_not_written(path: Path, e: OSError) -> CheckpointError:
    """One line for a Hugging Face folder a save could not write: the fix follows the cause (errno)."""
    if e.errno in (errno.ENOTEMPTY, errno.EEXIST):  # another save (a second session) wrote it since the check above
        return CheckpointError(f"{path} exists now (written meanwhile, by another minitf?) and is not an empty "
                               "folder; choose a new path (nothing is overwritten)")
    reason = e.strerror or str(e)
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return CheckpointError(f"could not write {path}: {reason}; free space or choose another place")
    return CheckpointError(f"could not write {path}: {reason}; choose a writable place")
