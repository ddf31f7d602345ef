"""Names, places and the two record types of a checkpoint: what DIR/NAME/ holds and how it is named.

The format itself is described in the package's docstring (core/checkpoint/__init__.py). This
module owns the constants every other part of the package reads (the manifest's name, the
patterns of data files and temporary names, the largest manifest, who may have written one), the
`Checkpoint` a load returns and the `CheckpointInfo` a listing row is, and the checks of a name
and of the place a save would write.
"""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import ModelConfig
from ..errors import CheckpointError
from ..paths import cut_middle
from .names import DATA_FILE, MANIFEST, MANIFEST_TMP, NAME, TMP_DIR  # noqa: F401 (the folder's names, here as ever)

if TYPE_CHECKING:  # torch only names the tensors' type: :ls and the checks of a name need no torch
    import torch

FORMAT_VERSION = 1
FORMAT_NAME = "minitf-checkpoint"
# The fix where the folder cannot be used, in words, as every core message is: the one-shot shell's. The REPL, whose
# session changes folder with `:set checkpoint_dir=DIR` (the model kept), says that in its place (dispatch.phrase).
ANOTHER_DIR = "start minitf with another checkpoint directory"
# The way on from a damaged checkpoint: saving it needs its model, which the one who got a copy (a `cp` cut short by a
# full disk, a download) does not have; copying it again is theirs
SAVE_AGAIN = "save the checkpoint again, or copy it again from where it came"


def damaged(problem: str) -> CheckpointError:
    """The error of a checkpoint whose files cannot be used as they are: `problem`, then both ways on (SAVE_AGAIN).
    One place for the words: each check wrote its own "save it again", which the one who was sent a copy cannot do."""
    return CheckpointError(f"{problem}; {SAVE_AGAIN}")


def other_files(folder: Path) -> str | None:
    """The files in `folder` that no checkpoint writes, in words ("2 other files (notes.txt, data.csv)"), or None: a
    checkpoint's own data files and a save's manifest in the making are its, anything else is a user's (`:save` will
    not write among them, and no message tells to remove the folder that holds them). Raises OSError where it
    cannot be read."""
    from ..words import count

    with os.scandir(folder) as entries:
        others = sorted(e.name for e in entries if not DATA_FILE.match(e.name) and not MANIFEST_TMP.match(e.name))
    if not others:
        return None
    return f"{count(len(others), 'other file')} ({', '.join(others[:3]) + (', ...' if len(others) > 3 else '')})"


PICKLE_MAGIC = (b"\x80", b"PK\x03\x04")  # pickle protocol >= 2, and torch.save's zip archive


def is_pickle(head: bytes) -> bool:
    """Whether a data file's first bytes are a pickle's or torch.save's, not safetensors'.

    A safetensors file starts with its header's length (8 bytes, little-endian) and then the JSON
    header's "{"; a length of 128 + 256 n starts with the byte 0x80, as a pickle does, so the "{"
    at offset 8 decides.
    """
    return head.startswith(PICKLE_MAGIC) and head[8:9] != b"{"


# A manifest holds two small configs, the vocabulary and the loss history (about 375 bytes a step, at
# most store.HISTORY_SAVED rows of it: a longer run's is thinned): 64 MiB bounds what a hostile manifest
# can make a load read and parse. A save refuses to write a larger one (it could not be loaded).
MAX_MANIFEST_BYTES = 64 * 2**20

# Who wrote a checkpoint (its manifest's `origin.kind`): rotation moves and deletes only autosaves.
ORIGINS = ("save", "autosave", "kept")
MAX_SHOWN = 4096  # the longest data_spec a manifest may carry (a listing shows it)


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
    vocab: str  # the tokenizer's characters, in id order (a subword tokenizer: its JSON, as tokenizer.vocab says it)
    data_spec: str  # what `load_data` was given, e.g. "pydoc" or "reverse:6"
    meta: dict  # the parsed checkpoint.json
    tokenizer: object | None = None  # a subword tokenizer (core.bpe) the data was read with; None: characters
    mps_rng: torch.Tensor | None = None  # an Apple GPU's random state at save time (dropout's masks on a Mac)

    @property
    def step(self) -> int:
        return self.trainer_state["step"]


@dataclass
class CheckpointInfo:
    """One row of `:ls`. A broken checkpoint still gets a row, with `error` saying what is wrong."""

    name: str  # its folder's name in the folder listed: what :load takes
    # the training step the model was saved at; None: a checkpoint that does not load (`error` says why)
    step: int | None
    val_loss: float | None  # the last evaluated validation loss, None if never evaluated
    # the data as saved: a built-in name (pydoc), a task spec (reverse:6), or a text file's path as it was when saved
    # (hf:PATH: a Hugging Face folder's tokenizer alone, no text); None: a checkpoint that does not load
    data_spec: str | None
    # bytes on disk: its manifest and the data files it names; where `error` is set, the plain files in its folder
    # (links not followed)
    size_bytes: int
    saved_at: str | None  # ISO 8601, UTC
    # every model setting by name, as a load builds the model (one a checkpoint predates: the value it was built with)
    model_config: dict | None = None
    # why the checkpoint cannot be used, in words (a file missing or of the wrong size, a manifest that does not read),
    # with the fix; None: its manifest reads, and the files it names are there at their sizes
    error: str | None = None
    # the step val_loss was measured at: before `step` where a run stopped between two evaluations
    val_step: int | None = None
    # the steps a stopped run had still to go (`:train` after loading it goes on with them); 0: its run ended; None:
    # not read, a checkpoint that does not load
    steps_left: int | None = None
    # who wrote it (ORIGINS: "save", "autosave", "kept"); None: a checkpoint of before it was recorded, or unreadable.
    # Rotation moves only autosaves, so one saved by name in an autosave slot holds that slot
    origin: str | None = None
    # the dtype its latest step ran in (float32, bfloat16): dtype=auto trains in bfloat16 on a CPU with bfloat16 units
    # and in float32 elsewhere, and the two kinds listed alike; None: not recorded (an older minitf), or unreadable
    trained_dtype: str | None = None
    # the dtypes its steps ran in, in the order they ran (["bfloat16", "float32"]: a lesson continued on a CPU without
    # bfloat16 units, or after a :set dtype=), each once for a stretch of steps; trained_dtype alone said "float32" of
    # a model ten of whose fifteen steps ran in bfloat16. None: not recorded (an older minitf), no step, or unreadable
    trained_dtypes: list[str] | None = None
    # a checkpoint of a model with a part of a kind this process has not declared (values.UndeclaredKind): that setting
    # ("norm=dyt"), which :ls shows in the row in place of "unreadable" (`error` says how to declare it); None: none
    needs: str | None = field(default=None, metadata={"view_only": True})


def steps_left(trainer: dict) -> int:
    """The steps a checkpoint's stopped run had still to go, from its manifest's trainer (0: the run ended)."""
    return max(0, trainer["run_start"] + trainer["run_steps"] - trainer["step"])


def last_own_evaluation(manifest: dict, history) -> dict | None:
    """The last row of a checkpoint's history with a val loss of its own: after the step its data came in
    (data_since_step, a switch that kept the model) and after the step causal=on/off changed what it computes
    (measured_since_step); None where there is none. What :ls, :load and a rotation's deleted autosave give."""
    since = max(manifest.get("data_since_step") or 0, manifest.get("measured_since_step") or 0)
    return next((row for row in reversed(history) if row.get("val_loss") is not None and row["step"] > since), None)


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.match(name):
        shown = repr(name) if len(repr(name)) <= 40 else repr(name)[:37] + "..."  # a pasted novel stays one line
        raise CheckpointError(
            f"{shown} is not a valid checkpoint name; use up to 100 ASCII letters, digits, '.', '_' or '-', "
            "not starting with '.' (for example run1)"
        )
    return name


# Names Windows keeps for its devices, whatever follows a first '.' (aux.txt is AUX) and in any case: a folder of such
# a name cannot be made there, nor copied there from a Linux or a Mac checkpoints folder (COM1 and LPT1 included).
WINDOWS_DEVICES = frozenset(["CON", "PRN", "AUX", "NUL"] + [f"{kind}{n}" for kind in ("COM", "LPT") for n in range(10)])


def check_new_name(name: str) -> str:
    """A name a new checkpoint may take: check_name's, and not starting with '-', which on a command line
    reads as an option (`minitf --load -x` cannot name it); one saved so earlier still loads.

    Nor a name that Windows refuses for a folder, though Linux and macOS take it: a device's name (CON, aux.txt) or one
    ending in '.' (which Windows drops: `run.` is `run` there). Learners move their checkpoints folder between
    machines (a lab's Linux box, their Windows laptop); there such a checkpoint failed to copy or came out under another
    name. Refused when saved, since only then is the name chosen; one saved so before still loads where it was saved
    (check_name takes it)."""
    check_name(name)
    if name.startswith("-"):
        raise CheckpointError(f"{name!r} is not a valid name for a new checkpoint: a name starting with '-' reads as "
                              f"an option on the command line; choose another, e.g. {name.lstrip('-') or 'run1'}")
    base, dot, rest = name.partition(".")
    if base.upper() in WINDOWS_DEVICES:
        raise CheckpointError(f"{name!r} is not a valid name for a new checkpoint: Windows keeps {base.upper()} for a "
                              f"device, and the checkpoint could not be copied there; choose another, e.g. "
                              f"{base}_1{dot}{rest}")
    if name.endswith("."):
        raise CheckpointError(f"{name!r} is not a valid name for a new checkpoint: Windows drops a final '.', and "
                              f"the checkpoint would not keep its name there; choose another, e.g. "
                              f"{name.rstrip('.') or 'run1'}")
    return name


def check_save_target(directory, name: str, need: int = 0, *, by_name: bool = False) -> Path:
    """DIR/NAME if a checkpoint can be saved there; a caller can ask before an hour of training.

    What can be known without writing is checked: no path component is a file (`afile/sub`), and
    the places a save writes into (DIR/NAME and DIR itself if NAME exists, else the nearest existing
    folder on the way to DIR, which the save creates the rest under) are writable directories (a
    read-only file system is said as such). DIR itself because every save writes its lock file there, and
    a new run's autosave its temporary folder: a folder made read-only around a writable autosave was
    passed, and the autosave then failed after the training. `need`: bytes the checkpoint takes at the least (its
    weights, its optimizer state and a manifest: the caller counts them), refused where the disk has less free: a
    full disk trained a one-shot run to its end, then lost it. A
    disk that fills during the run still shows only when the save writes; save_checkpoint says so. `by_name`: a save
    by name (`:save NAME`, `save=NAME`), which refuses a folder of other files at DIR/NAME (check_no_other_files):
    it was refused only after the training, and a one-shot run lost its model. An autosave's rotation moves such a
    folder aside, so it is no matter there.
    """
    check_new_name(name)
    directory = Path(directory).expanduser()
    target = directory / name
    check_not_a_checkpoint(directory)
    check_no_case_twin(directory, name)
    try:
        if target.exists():
            if not target.is_dir():
                raise CheckpointError(f"{target} is a file, not a checkpoint directory; remove it or choose another name")
            _check_not_an_alias(directory, name, target)
            if by_name:
                check_no_other_files(target)
            places = (target, directory)
        else:
            _check_no_dangling_link(target)
            places = (nearest_existing(directory),)
            if not places[0].is_dir():
                raise CheckpointError(f"{places[0]} is a file, not a directory; {ANOTHER_DIR}")
        # each place named by its path ("cannot write in ." said nothing of where), and every one that refuses: with
        # both refusing, DIR/NAME alone was named, and a person who fixed its permissions was refused again for DIR
        refused = [p.absolute() for p in places if not os.access(p, os.W_OK | os.X_OK)]
        if refused:
            if _read_only(refused[0]):  # access() fails there whatever the permissions say: not theirs to change
                raise CheckpointError(f"cannot write in {refused[0]}: the file system is read-only; {ANOTHER_DIR}")
            if len(refused) == 1:
                raise CheckpointError(f"cannot write in {refused[0]} (permission denied); change its permissions or "
                                      f"{ANOTHER_DIR}")
            raise CheckpointError(f"cannot write in {refused[0]} nor in {refused[1]} (permission denied), and a save "
                                  f"writes in both; change their permissions or {ANOTHER_DIR}")
        free = shutil.disk_usage(places[0]).free if need else need
        if free < need:
            raise CheckpointError(f"the disk of {places[0].absolute()} has {free:,} bytes free, and the checkpoint "
                                  f"needs {need:,} at the least (its weights, optimizer state and manifest); "
                                  f"free space or {ANOTHER_DIR}")
    except OSError as e:
        raise path_error(target, e) from None
    return target


def check_no_other_files(target: Path) -> None:
    """Refuse to save into a folder that holds files but no checkpoint: the save wrote its files among them and said
    "replaced checkpoint NAME", where there had been none, and the user's files then lived inside a model's folder."""
    try:
        if not target.is_dir() or (target / MANIFEST).exists():
            return
        # a checkpoint's own files without its manifest (an interrupted copy, a deleted checkpoint.json), which :load
        # tells to save again, are not another's: the save writes over them
        others = other_files(target)
    except OSError:  # unreadable: the save says what it finds
        return
    if others:
        raise CheckpointError(f"{cut_middle(str(target))} is a folder that holds no checkpoint but {others}; save "
                              "under another name, or move them out")


def _check_not_an_alias(directory: Path, name: str, target: Path) -> None:
    """Refuse to save under NAME where NAME is a symbolic link to another checkpoint of the same folder: the save wrote
    through the link and replaced that checkpoint, while it said "replaced checkpoint NAME", and both names then listed
    the new model. A link to a folder elsewhere (checkpoints kept on another disk) is saved through, as asked."""
    if not target.is_symlink():
        return
    real = target.resolve()
    if real.parent == directory.resolve() and real.name != name:
        raise CheckpointError(f"{name} is a symbolic link to {real.name}, another checkpoint in this folder, which a "
                              f"save under {name} would replace; save as {real.name}, or remove the link: rm "
                              f"{shlex.quote(str(target))}")


def check_no_case_twin(directory: Path, name: str) -> None:
    """Refuse NAME where DIR holds the same name in another case (run1 for Run1). macOS and Windows take the two for one
    folder: there `:save Run1` replaced run1 (another model's checkpoint, saved under its name), and a Linux folder
    holding both could not be copied to them whole."""
    try:
        entries = os.listdir(directory)
    except OSError:  # no folder yet (the save makes it), or one that cannot be listed: the checks after say so
        return
    if name in entries:  # saved over as it is (a pair made before this check: each name still saves)
        return
    twin = next((e for e in sorted(entries) if e.lower() == name.lower()), None)
    if twin is not None:
        raise CheckpointError(f"{twin!r} is in {directory} already, and on macOS and Windows {name!r} is the same "
                              f"folder; save under {twin} to replace it, or choose another name")


def _read_only(path: Path) -> bool:
    """Whether `path` lies on a file system mounted read-only (False where that cannot be asked)."""
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # Windows has no statvfs
        return False


def path_error(path: Path, e: OSError) -> CheckpointError:
    """One line for a path the system refuses (a name over 255 bytes, a loop of links, ...)."""
    if e.errno == errno.ENAMETOOLONG:
        return CheckpointError(f"cannot use {cut_middle(str(path))}: a name in that path is too long for the file "
                               "system; choose a shorter checkpoint directory")
    return CheckpointError(f"cannot use {cut_middle(str(path))}: {e.strerror or e}; {ANOTHER_DIR}")


def nearest_existing(path: Path) -> Path:
    """`path` or its closest ancestor that exists (a file in the way, as in `afile/sub`, is returned)."""
    while not path.exists() and path.parent != path:  # exists() is False below a file (ENOTDIR)
        path = path.parent
    return path


def check_not_a_checkpoint(directory: Path) -> None:
    """Refuse a checkpoint folder that is one checkpoint itself (`--checkpoint-dir checkpoints/run1`): :ls said
    "no checkpoints yet", :load "save one first", and the next autosave was written inside run1."""
    try:
        held = (directory / MANIFEST).is_file()
    except (OSError, ValueError):
        return
    if held:
        parent = cut_middle(str(directory.parent))
        raise CheckpointError(f"{cut_middle(str(directory))} is itself a checkpoint (it holds {MANIFEST}), not a "
                              f"folder of checkpoints; start minitf with its folder {parent} as the checkpoint "
                              f"directory, and load {directory.name} from there")


def check_folder_reachable(directory: Path) -> None:
    """Refuse a checkpoint folder that does not exist and that no save could create: a file or a symbolic link to
    nowhere stands on the way. `:ls` and `:load` said "none yet; :save NAME writes one" there, and the save failed."""
    blocker = next((p for p in (directory, *directory.parents) if os.path.lexists(p)), None)
    if blocker is not None and blocker.exists() and not blocker.is_dir():
        raise CheckpointError(f"{blocker} is a file, not a directory; {ANOTHER_DIR}")
    _check_no_dangling_link(directory, folder=True)


def _check_no_dangling_link(target: Path, folder: bool = False) -> None:
    """Refuse a symbolic link to nowhere on the way to `target` (`folder`: the checkpoint folder itself): a save
    could not create the folder.

    `exists()` follows links, so a dangling link looks like a folder still to be created; the save
    would then fail in mkdir ("File exists") after the training it was checked for.
    """
    path = target
    while path.parent != path:
        if os.path.lexists(path):
            if path.is_symlink() and not path.exists():
                # the checkpoint's own name is the link: the name is what to change; a folder on the way: the folder
                fix = ("remove it or choose another name" if path == target and not folder
                       else f"create that folder or {ANOTHER_DIR}")
                raise CheckpointError(
                    f"{cut_middle(str(path))} is a symbolic link to {cut_middle(os.readlink(path))}, which does not "
                    f"exist; {fix}"
                )
            return
        path = path.parent


def _existing_names(directory: Path) -> list[str]:
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return []
    return [e for e in entries if NAME.match(e) and (directory / e / MANIFEST).is_file()]


def checkpoint_path(directory, name: str) -> Path:
    directory = Path(directory).expanduser()
    try:
        check_name(name)
    except CheckpointError as e:  # a folder renamed by hand: said, with the rename that loads it (as :ls says it)
        held = isinstance(name, str) and "/" not in name and "\0" not in name and _holds_manifest(directory / name)
        if not held:
            raise
        example = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:100] or "run1"
        raise CheckpointError(f"{e}; {directory / name} holds a checkpoint under that name: rename the folder, e.g. to "
                              f"{example}, and load that") from None
    path = directory / name
    try:
        return _existing_checkpoint(directory, name, path)
    except OSError as e:
        raise path_error(path, e) from None


def _default_dir() -> Path | None:
    """The default checkpoint folder (./checkpoints, $MINITF_CHECKPOINT_DIR), or None where it cannot be used."""
    from ..errors import UserError
    from ..paths import default_checkpoint_dir

    try:
        return default_checkpoint_dir()
    except UserError:  # a $MINITF_CHECKPOINT_DIR that cannot be used (~ with no home)
        return None


def held_elsewhere(directory: Path, name: str | None) -> Path | None:
    """The folder that holds checkpoint NAME (None: any checkpoint, :ls's question) where `directory` does not exist:
    the default one (./checkpoints, $MINITF_CHECKPOINT_DIR), or a folder beside it of a name one letter or so off
    (`chekpoints`); None if none does."""
    import difflib

    try:
        beside = [e for _, e in zip(range(1000), sorted(os.listdir(directory.parent)))]  # a home folder stays quick
    except OSError:
        beside = []
    near = [directory.parent / e for e in difflib.get_close_matches(directory.name, beside, n=3, cutoff=0.75)]
    default = _default_dir()  # None: only the folders beside
    for folder in ([default] if default is not None else []) + near:
        if folder.absolute() != directory.absolute() and (_existing_names(folder) if name is None else
                                                          _holds_manifest(folder / name)):
            return folder
    return None


def missing_folder(directory) -> str | None:
    """Why a checkpoint folder that does not exist holds none, and the way on, as :load says it of a name there
    (_existing_checkpoint); None where it exists, or is the default one before any save (no typo, just none yet).
    :ls said "no checkpoints in chekpoints yet" of a mistyped folder, where ./checkpoints held them."""
    directory = Path(directory).expanduser()
    if os.path.lexists(directory):
        return None
    default = _default_dir()
    if default is not None and default.absolute() == directory.absolute():
        return None
    holder = held_elsewhere(directory, None)
    return "that folder does not exist; " + (
        f"{cut_middle(str(holder))} holds some: give that folder as the checkpoint directory" if holder
        else "check the folder's name")


def _holds_manifest(folder: Path) -> bool:
    try:
        return (folder / MANIFEST).is_file()
    except (OSError, ValueError):  # a name too long for the file system
        return False


LISTED = 12  # the saved names a "no checkpoint named" error lists; a folder of hundreds stays one line


def _existing_checkpoint(directory: Path, name: str, path: Path) -> Path:
    if not path.exists() and path.is_symlink():
        # a link to a checkpoint moved or deleted since (or to a drive not mounted): "no checkpoint named 'dangle'"
        # sent the user to save one, while :ls listed the name
        try:
            target = os.readlink(path)
        except OSError:
            target = "a path that cannot be read"
        raise CheckpointError(f"{cut_middle(str(path))} is a symbolic link to {cut_middle(target)!r}, which does not "
                              "exist (moved, deleted, or on a drive not mounted); point it at the checkpoint again, or "
                              "remove the link")
    if not path.exists():
        blocker = nearest_existing(directory)
        if not blocker.is_dir():
            raise CheckpointError(f"{blocker} is a file, not a directory; {ANOTHER_DIR}")
        if not directory.exists():
            check_folder_reachable(directory)  # a link to a folder that is gone: no save could write one either
            # a folder mistyped (`--checkpoint-dir chekpoints`) read as an empty one: "save one under that name first"
            holder = held_elsewhere(directory, name)
            # the default folder before any save is no typo: only a folder given is told to check its name
            default = _default_dir()
            typed = default is None or default.absolute() != directory.absolute()
            fix = (f"{cut_middle(str(holder))} holds one: give that folder as the checkpoint directory" if holder
                   else "check the folder's name, or save one under that name first" if typed
                   else "save one under that name first")
            raise CheckpointError(f"no checkpoint named {name!r} in {directory} (there are none yet: that folder does "
                                  f"not exist); {fix}")
        check_not_a_checkpoint(directory)
        names = _existing_names(directory)
        where = f"in {directory}"  # (debris.cut_short_said adds where a save of NAME never finished)
        if names:
            # a name typed in another case, or one letter off (`Foxy`, `autosav`): that one first; the list kept short
            import difflib

            guess = next((n for n in names if n.lower() == name.lower()), None) or next(
                iter(difflib.get_close_matches(name, names, n=1, cutoff=0.75)), None)
            shown = ", ".join(names[:LISTED]) + (f" and {len(names) - LISTED} more" if len(names) > LISTED else "")
            fix = f"did you mean {guess}? (saved ones: {shown})" if guess else f"saved ones: {shown}"
            raise CheckpointError(f"no checkpoint named {name!r} {where}; {fix}")
        raise CheckpointError(f"no checkpoint named {name!r} {where} (there are none yet); save one under that name first")
    if not path.is_dir():
        raise CheckpointError(f"{path} is a file, not a checkpoint directory; remove it or choose another name")
    return path

