"""Saving: a checkpoint written atomically under the folder lock, and older autosaves rotated.

A new NAME is written into a hidden temporary directory that is renamed into place; an existing
NAME gets new data files under fresh ids, then a new checkpoint.json replaces the old one in one
`os.replace`, and only then are the old data files deleted. Whatever stops a save (a full disk,
Ctrl-C, a killed process), the previous checkpoint of that name still loads; a NAME trained further
is kept under a new name first, by hard links (`_save_keeping` says what a kill at each point leaves).
A save may share the bytes of an identical data file of another checkpoint in the folder (a hard
link: `write_or_link`).
"""

from __future__ import annotations

import errno
import json
import os
import platform
import secrets
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import torch

from .. import __version__
from ..bpe import kept_tokenizer_problem
from ..catalog import unkept_path
from ..device import mps_here
from ..errors import CheckpointError
from ..model import MiniTransformerLM, require_model
from ..paths import cut_middle
from ..train import Trainer
from ..words import count
from .layout import (ANOTHER_DIR, DATA_FILE, FORMAT_NAME, MANIFEST, MANIFEST_TMP, MAX_MANIFEST_BYTES, MAX_SHOWN, NAME,
                     ORIGINS, TMP_DIR, check_name, check_no_other_files, check_save_target, steps_left)
from .loading import own_parts
from .locks import folder_lock, unlink
from .manifest import (encode_manifest, encode_model, encode_state, encoded_here, file_entry, format_version_of,
                       meta_sha256)
from .reads import (holding, open_regular, origin_kind, read_manifest, read_manifest_bytes, read_open,
                    rotation_owns, same_model)
from .values import GATE_OF_ONE_STEP, TOP1_GATE, own_evaluation


def gate_of_now(model: MiniTransformerLM, trainer) -> bool:
    """Whether `model` is a mixture of one expert a token whose weights are of the gate of now, the chosen expert's
    probability: not one loaded gated_by_one with no training step since (loading.build_model marks it). Its save
    before a :train wrote the key, as format 2, for weights trained with the gate of 1 alone, and its later loads
    said nothing of the change; it stays format 1, without the key, and they say it."""
    config = model.config
    return config.is_moe and config.experts_per_token == 1 and getattr(model, GATE_OF_ONE_STEP, None) != trainer.step


class NameTaken(CheckpointError):
    """`exclusive=True` and DIR/NAME exists already (or appeared while this save waited for the lock)."""


def save_checkpoint(directory, name: str, model: MiniTransformerLM, trainer, vocab: str, data_spec: str, *,
                    origin: str = "save", session: str | None = None, exclusive: bool = False,
                    rotate: int | None = None, same_run: bool = False, share_from=(),
                    tokenizer_json: str | None = None, weights_from: str | None = None,
                    data_since_step: int = 0, outcome: dict | None = None, on_wait=None, measured_since_step: int = 0,
                    data_sha256: str | None = None, continues: str | None = None, keep_trained: bool = False,
                    writer: dict | None = None, in_place: bool = False, lock_wait: float | None = None) -> Path:
    """Save model, trainer and random generators as DIR/NAME atomically; returns DIR/NAME.

    `origin` records who saved it (ORIGINS) and `session` which session (a random token), for
    rotation. `exclusive`: fail with NameTaken instead of replacing an existing NAME (a name picked
    to be new stays new even when another process picks it at the same moment). `rotate=K`: first
    shift an existing NAME to NAME-1 .. NAME-K (see `rotate`); with `same_run`, this session's own autosave of this
    run (is_own_autosave), which a continued run replaces, is replaced where it is, NAME being there: NAME saved
    over, or NAME-k (moved there by another's autosave) deleted and only the slots before it shifted. The new checkpoint is written in full
    before anything moves. `keep_trained`: a NAME trained further is kept as kept-... (_save_keeping), unless another
    checkpoint holds it (outcome "held_by"). `share_from`: names of checkpoints in
    DIR whose identical data files this one may share (see `write_or_link`). Everything from the
    check of NAME to the commit happens under the folder's lock. `tokenizer_json`: a subword
    tokenizer (core.bpe) as its JSON, stored in place of the character vocabulary (`vocab` is then "").
    `weights_from`: where weights not trained here came from (`hf:PATH`), so that a load at step 0 does not
    take them for an untrained model's. `data_since_step`: the step after which `data_spec` came in, where a switch
    to data of the same vocabulary kept the model (0: the whole history is of it), so that a listing or a load
    does not give a val loss measured on the data before as this data's. `data_sha256`: the text's digest
    (TextCorpus.digest), which a load compares with the text it reads then. `continues`: the session whose autosave
    the run was loaded from (another process: `minitf --load autosave train` going on with a stopped run), whose
    autosave of this very run counts as this session's own (it was rotated away as another's, and an older run's
    autosave dropped off the end).
    `outcome`: a dict the save sets "replaced" in (whether a checkpoint NAME
    was there when the save took the lock, and was saved over or rotated away): only the lock knows, since
    another session may save NAME between a caller's look and this save; and "replaced_meta", that checkpoint's
    (meta_sha256, step) (None if none, or unreadable); and "meta_sha256", the checksum of the checkpoint this save
    writes, set before it takes the lock: which save NAME holds is told by it, never by reading NAME back, which
    another session may have saved over meanwhile; "model_file", its model file's entry (reads.holding); "waited",
    (the seconds it waited for another save's lock, whose save in words or None where the lock was free), which a
    caller says apart from the save's own time ("10.52 s" of a save was another session's). `on_wait`:
    hears one line when the save has waited a while for another one's lock (locks.folder_lock).
    `writer`: the process that writes an autosave during its run (locks.lock_owner()), kept in the manifest as
    run_writer: a save written during a run looks exactly like a run stopped at that step, and another session took a
    run still going for a stopped one (and moved it aside as one); a reader judges the run stopped only where that
    process is gone. `in_place` (with `rotate` and `same_run`): this run's own autosave is saved over wherever it is,
    NAME-k included, and nothing rotates: a run saving during itself keeps the slot another session's rotation moved it
    to, where a rotation back to NAME put that session's newer run on the slot it had just said held this one (where
    none is found, the save rotates as a new autosave; outcome "name" says where it went). `lock_wait`: the seconds to
    wait for the folder lock (default locks.LOCK_WAIT); a lock not taken by then raises FolderBusy.
    """
    model = require_model(model, "save_checkpoint")  # torch.compile(model): its own weights, under their own names
    if not isinstance(trainer, Trainer):
        raise TypeError(f"save_checkpoint saves a model with its Trainer (optimizer, run position, history), got "
                        f"{type(trainer).__name__}; pass the one that trains it, or make one: Trainer(model, data, "
                        "TrainConfig())")
    if not isinstance(vocab, str) or not isinstance(data_spec, str):
        raise TypeError(f"save_checkpoint takes the vocabulary and the data's name as text, got "
                        f"{type(vocab).__name__} and {type(data_spec).__name__}; pass data.tokenizer.vocab and the "
                        "name load_data read (e.g. 'sort')")
    if (unkept := unkept_path(data_spec)) is not None:  # a load would refuse its manifest: do not write it
        raise CheckpointError(unkept)
    if trainer.model is not model:
        raise CheckpointError("the trainer trains another model, whose optimizer state would be saved beside these "
                              "weights; pass trainer.model as the model, or that model's own trainer")
    if exclusive and os.path.lexists(Path(directory).expanduser() / check_name(name)):
        raise NameTaken(f"a checkpoint named {name!r} exists already in {directory}; choose another name")  # even a file
    target = check_save_target(directory, name, by_name=rotate is None)
    directory = target.parent
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {ORIGINS}, got {origin!r}")
    if tokenizer_json is None and len(vocab) != model.config.vocab_size:
        raise CheckpointError(
            f"the vocabulary has {count(len(vocab), 'character')} but the model has vocab_size={model.config.vocab_size}; "
            "rebuild the model for this data before saving"
        )
    if tokenizer_json is not None and (problem := kept_tokenizer_problem(tokenizer_json)) is not None:
        # its load would refuse it (loading.stored_tokenizer): a checkpoint is not written that cannot be loaded
        raise CheckpointError(f"this model's tokenizer {problem}, and a checkpoint keeps no such tokenizer (its load "
                              "would refuse it); write the model as a Hugging Face folder instead")
    # parts of a class of the caller's own (a gate added to an attention): saved whole, but a load builds the model
    # from its config and cannot make them, so the caller says so instead of "a load restores it"
    parts = own_parts(model)
    if outcome is not None:
        outcome["own_parts"] = parts
    # Everything is serialised in memory first: a failure here touches no file.
    model_bytes = encode_model(model)
    state_bytes, param_groups, scalars = encode_state(trainer)
    tstate = trainer.state_dict()
    trainer_json = {k: tstate[k] for k in ("step", "run_start", "run_steps", "run_elapsed", "run_constant_lr",
                                           "trained_window", "trained_dtype", "trained_ns_dtype", "dtype_spans",
                                           "history", "train_config")}
    trainer_json["history"] = thinned_history(tstate["history"])
    if mps_here():
        # An Apple GPU's random stream draws a Mac run's dropout masks: without it a resumed run drew other ones. Kept
        # in the manifest, whose unknown keys an older minitf reads past; a tensor rng.mps in the state file it would
        # refuse as unexpected.
        trainer_json["mps_rng"] = torch.mps.get_rng_state().tolist()

    uid = f"{os.getpid()}-{secrets.token_hex(8)}"
    model_file, state_file = f"model-{uid}.safetensors", f"state-{uid}.safetensors"
    manifest = {
        "format": FORMAT_NAME,
        "minitf_version": __version__,
        "torch_version": torch.__version__,
        # pydoc is the documentation of the Python that runs: a pydoc model met under another Python names this one
        # (an older minitf reads past the key; a manifest without it is of before it was kept)
        "python_version": platform.python_version(),
        "saved_at": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "origin": {"kind": origin, **({"session": session} if session else {})},
        # an older minitf reads past the key (a run it lists as stopped there, as it did before the key was kept)
        **({"run_writer": writer} if writer else {}),
        "model_config": model.config.to_dict(),
        "vocab": "" if tokenizer_json is not None else vocab,
        **({"tokenizer": {"kind": "bpe", "json": tokenizer_json}} if tokenizer_json is not None else {}),
        "data_spec": data_spec,
        # a mixture of one expert a token gates by that expert's probability (core/experts.py) since this key was
        # kept; a load of one saved before, whose gate was 1, says its outputs changed (values.gated_by_one). An
        # older minitf would read past the key: the manifest is format 2 then, which it refuses (format_version_of)
        **({"moe_top1_gate": TOP1_GATE} if gate_of_now(model, trainer) else {}),
        **({"weights_from": _shown(weights_from)} if weights_from else {}),
        **({"data_since_step": data_since_step} if data_since_step else {}),
        # the step at which the model's function changed with its weights kept (causal=on/off): the losses before it
        # are of another function; an older minitf reads past the key
        **({"measured_since_step": measured_since_step} if measured_since_step else {}),
        # an older minitf reads past the key; a manifest without it is of before it was kept, or of generated data
        **({"data_sha256": data_sha256} if data_sha256 else {}),
        # kept whether empty or not: a load whose weights do not fit the config tells by it a model of parts of its
        # own (its way back is load_model(NAME, model=MODEL)) from a damaged or edited file (loading._misfit); a
        # manifest without it is of before it was kept. An older minitf reads past the key
        "own_parts": parts,
        "trainer": trainer_json,
        "optimizer": {"param_groups": param_groups, "scalars": scalars},
        "files": {
            "model": file_entry(model_file, model_bytes),
            "state": file_entry(state_file, state_bytes),
        },
    }
    # 2 for a one-expert mixture, which an older minitf would compute with the gate of 1: it refuses format 2
    # (manifest.GATE_FORMAT_VERSION says why); 1 for every other, which every minitf reads
    manifest["format_version"] = format_version_of(manifest)
    manifest = json.loads(json.dumps(manifest))  # tuples become lists, exactly as a reader sees them
    manifest["meta_sha256"] = meta_sha256(manifest)
    manifest_bytes = encode_manifest(manifest)
    encoded_here(manifest_bytes)  # made from what JSON read back: a reader after this save need not encode it again
    if len(manifest_bytes) > MAX_MANIFEST_BYTES:  # a load would refuse it: do not write it
        raise CheckpointError(
            f"checkpoint {name!r} would have a {len(manifest_bytes) / 2**20:,.0f} MiB manifest ({len(tstate['history'])} "
            f"steps of loss history), more than the {MAX_MANIFEST_BYTES // 2**20} MiB a checkpoint may have; "
            "continue from a checkpoint with a shorter history"
        )

    files = {model_file: model_bytes, state_file: state_bytes}
    if outcome is not None:
        outcome["meta_sha256"] = manifest["meta_sha256"]
        # the weights' fingerprint (reads.holding): the model is in a checkpoint while any of the folder holds them
        outcome["model_file"] = manifest["files"]["model"]
        outcome["same_model"] = same_model(manifest)  # what a holder must hold alike (reads.holding's `like`)
        # the bytes this save writes (manifest and files, as :ls counts them): read back from NAME after the save,
        # it was a full check of the manifest (0.1 s at 20k history rows), and another session's if one saved since
        outcome["size_bytes"] = len(manifest_bytes) + sum(len(data) for data in files.values())
    made = False  # whether the folder was there or made: an ENOENT before it is a folder that cannot be made
    try:
        directory.mkdir(parents=True, exist_ok=True)
        made = True
        with _taken(folder_lock(directory, wait=lock_wait, on_wait=on_wait), lock_wait is not None) as lock:
            if outcome is not None:
                outcome["waited"] = (lock.waited, lock.waited_for)
            _remove_dead_temp_dirs(directory)
            _remove_dead_strays(directory)
            if exclusive and os.path.lexists(target):
                raise NameTaken(f"a checkpoint named {name!r} exists already in {directory}; choose another name")
            if rotate is None:  # (an autosave's rotation moves a folder in its way aside, whatever it holds)
                check_no_other_files(target)
            sources = _shareable(directory, share_from, manifest["files"].values())
            held = None  # the step of a model trained further that NAME holds, and no other checkpoint: kept aside
            if keep_trained and rotate is None and target.is_dir():
                held = _more_trained(directory, target, int(manifest["trainer"]["step"]), outcome)
            written = replaced = None
            own = None if rotate is None or not same_run else _own_slot(
                directory, name, rotate, {session, continues} - {None},
                run={**manifest["trainer"], "history": tstate["history"]})
            if in_place and own:  # NAME-k: saved over there, nothing rotated (see the docstring)
                target, own = directory / f"{name}-{own}", 0
            if outcome is not None:
                outcome["name"] = target.name
                outcome["replaced"] = target.is_dir()
                outcome["replaced_meta"] = _meta_and_step(target) if outcome["replaced"] else None
            if rotate is not None and target.is_dir() and own != 0:
                # Written in full first, then the rotation (which moves NAME away) and the commit: a save
                # that fails (a full disk) has moved and deleted nothing.
                written = _write_tmp(directory, name, files, manifest_bytes, uid, sources)
                try:
                    moved, dropped, replaced = _rotate_replacing(directory, name, rotate, own, uid)
                    if outcome is not None:
                        outcome["moved_aside"], outcome["dropped"] = moved, dropped
                except BaseException:
                    shutil.rmtree(written, ignore_errors=True)
                    raise
            try:
                if held is not None:
                    kept = _save_keeping(directory, target, held, files, manifest_bytes, uid, sources)
                    if outcome is not None:
                        outcome["kept_aside"] = kept
                elif target.is_dir() and written is None:
                    _save_over(target, files, manifest_bytes, uid, sources)
                else:
                    try:
                        _save_new(directory, name, files, manifest_bytes, uid, sources, written)
                    except OSError as e:
                        # NAME appeared meanwhile, made by something that takes no lock (an older minitf, a
                        # person): save over it as over any existing checkpoint, once.
                        if e.errno not in (errno.EEXIST, errno.ENOTEMPTY) or exclusive or not target.is_dir():
                            raise
                        _save_over(target, files, manifest_bytes, uid, sources)
            except BaseException:
                if replaced is not None:  # not committed: the run's own earlier autosave comes back (a Ctrl-C or a
                    _put_back(directory, name, rotate, replaced)  # full disk lost it to the next save's clean-up)
                raise
            if replaced is not None:  # committed: the run's own earlier autosave, superseded, goes
                shutil.rmtree(replaced, ignore_errors=True)
    except OSError as e:
        if e.errno == errno.ENOENT and not made:  # /proc/x: mkdir says ENOENT of a folder no one removed
            raise CheckpointError(f"could not save checkpoint {name!r}: the folder {cut_middle(str(directory))} "
                                  f"cannot be made here ({e.strerror or e}); {ANOTHER_DIR}") from e
        if e.errno == errno.ENOENT and not os.path.lexists(directory):
            # removed under the save (`rm -rf checkpoints` in another terminal): "No such file or directory; start
            # minitf with another checkpoint directory" sent the user away from a folder that the next save makes
            raise CheckpointError(f"could not save checkpoint {name!r}: the folder {cut_middle(str(directory))} "
                                  "was removed while it was saved into (by another terminal?); save again, which "
                                  "makes the folder anew") from e
        raise CheckpointError(f"could not save checkpoint {name!r} in {cut_middle(str(directory))}: "
                              f"{_save_failure(e)}") from e
    return target


class FolderBusy(CheckpointError):
    """A save given a short wait for the folder lock (save_checkpoint's `lock_wait`) that did not get it: another save
    holds the folder (or a holder stopped with Ctrl-Z); nothing was written."""


class _taken:
    """`with _taken(folder_lock(...), short)`: the lock, where a CheckpointError in taking it (not in the body) is
    FolderBusy when `short` (a caller that gives up at once, and tries again later)."""

    def __init__(self, lock, short: bool):
        self.lock, self.short = lock, short

    def __enter__(self):
        try:
            return self.lock.__enter__()
        except CheckpointError as e:
            if self.short and not isinstance(e, FolderBusy):
                raise FolderBusy(str(e)) from None
            raise

    def __exit__(self, *exc):
        return self.lock.__exit__(*exc)


def _more_trained(directory: Path, target: Path, step: int, outcome: dict | None) -> int | None:
    """The folder lock held: the step of the model `target` holds where it is trained further than the `step` about to
    replace it and no other checkpoint of DIR holds it (reads.holding), else None. `:load best`, a setting that rebuilt
    the model, then `:save best` replaced the trained best with step 0, right after being told best brings the
    trained model back. Where another checkpoint holds it, `outcome` hears ("held_by": (its name, the step)):
    alternating saves of `big` from two loaded models made a kept-* copy of the one `other` held every second save."""
    held = _meta_and_step(target)
    if held is None or held[1] <= step:
        return None
    try:
        manifest = json.loads(read_manifest_bytes(target / MANIFEST))
        entry = manifest["files"]["model"]
        holder = holding(directory, entry, held[1], besides={target.name}, same_file=target / entry["file"],
                         like=same_model(manifest))
    except Exception:  # noqa: BLE001 - read just now by _meta_and_step: kept, as any checkpoint trained further
        holder = None
    if holder is None:
        return held[1]
    if outcome is not None:
        outcome["held_by"] = (holder, held[1])
    return None


def _save_keeping(directory: Path, target: Path, step: int, files: dict[str, bytes], manifest_bytes: bytes, uid: str,
                  sources: dict[str, Path]) -> tuple[str, int] | None:
    """Save over `target`, which holds a model trained to `step` (further), keeping that one as a free
    `kept-<date>-<time>[-n]`; returns (that name, `step`), None where a hundred are taken (saved over as before).

    Issue "a failed :save over a checkpoint trained further leaves none of that name": NAME was renamed away first
    and the new one written after, so a full disk or a kill left no NAME, and another session's load of NAME found
    none meanwhile. Now the kept name is made of hard links to NAME's files (no bytes), in a temporary directory
    renamed into place, and NAME is then saved over as any checkpoint (_save_over: one os.replace of its manifest).
    Every instant, NAME loads (the old model until that commit, the new one after it):
    - the links fail (a full disk: mkdir, a directory entry): nothing moved, the temporary directory goes;
    - a kill while linking: the temporary directory is debris, which the next save removes; NAME is untouched;
    - the save over NAME fails (a full disk, Ctrl-C): the kept copy goes again (names only), NAME is as it was;
    - a kill between the kept copy and the commit: the old model is in NAME and in the kept name, sharing its files.
    Where the file system has no hard links, the new checkpoint is written in full first (_write_tmp), then NAME
    moves to the kept name and the new one to NAME: a failed write moves nothing; a failed second rename moves the
    old one back, or says where it is; only a kill between the two renames leaves no NAME for the next load (the
    old model is under the kept name, which that load's error lists, and the new one debris).
    """
    stamp = time.strftime("kept-%Y%m%d-%H%M%S")
    kept = next((n for n in (stamp if k == 1 else f"{stamp}-{k}" for k in range(1, 101))
                 if not os.path.lexists(directory / n)), None)
    if kept is None:  # a hundred in one second
        _save_over(target, files, manifest_bytes, uid, sources)
        return None
    try:
        _link_copy(target, directory / kept, uid)
    except (OSError, NotImplementedError) as e:
        if not isinstance(e, NotImplementedError) and e.errno not in _NO_LINKS:
            raise
        written = _write_tmp(directory, target.name, files, manifest_bytes, uid, sources)
        try:
            os.rename(target, directory / kept)
        except BaseException:
            shutil.rmtree(written, ignore_errors=True)
            raise
        try:
            os.rename(written, target)  # the commit
        except BaseException:
            shutil.rmtree(written, ignore_errors=True)
            try:
                os.rename(directory / kept, target)
            except OSError as back:
                raise CheckpointError(f"could not save checkpoint {target.name!r} ({back.strerror or back}), and the "
                                      f"model it held (step {step:,}) is now {kept}; load it by that name") from None
            raise
        _fsync_dir(directory, best_effort=True)
        return kept, step
    old = _meta_and_step(target)
    try:
        _save_over(target, files, manifest_bytes, uid, sources)
    except BaseException:
        if _meta_and_step(target) == old:  # not committed: the old model is NAME's still, the copy goes
            shutil.rmtree(directory / kept, ignore_errors=True)
        raise
    return kept, step


# What os.link answers where the file system has no hard links (FAT, some network and FUSE mounts), or a file has
# as many as it may: the kept copy is then made by renames.
_NO_LINKS = {errno.EPERM, errno.EXDEV, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP,
             getattr(errno, "ENOSYS", errno.EPERM)}


def _link_copy(target: Path, dest: Path, uid: str) -> None:
    """DIR/dest, a new checkpoint of hard links to the manifest and data files of `target`, renamed into place whole."""
    tmp = dest.parent / f".{dest.name}.tmp-{uid}"
    try:
        tmp.mkdir()
        for fname in (*sorted(_referenced_files(target)), MANIFEST):
            os.link(target / fname, tmp / fname, follow_symlinks=False)
        _fsync_dir(tmp)
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(dest.parent, best_effort=True)


def _meta_and_step(path: Path) -> tuple[str, int] | None:
    """(meta_sha256, step) of the checkpoint at `path` as it is now, None where its manifest cannot be read."""
    try:
        manifest = json.loads(read_manifest_bytes(path / MANIFEST))
        return str(manifest["meta_sha256"]), int(manifest["trainer"]["step"])
    except Exception:  # noqa: BLE001 - a broken checkpoint replaced: nothing to tell of it
        return None


def _shown(text: str) -> str:
    """`text` as a manifest may carry it (printable, at most MAX_SHOWN characters), so that a load never refuses it."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:MAX_SHOWN]


_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NO_PERMISSION = {errno.EACCES, errno.EPERM}


def _save_failure(e: OSError) -> str:
    """`reason; fix` for an OSError of a save: the fix follows the cause (errno), not a guess."""
    reason = e.strerror or str(e)
    if e.errno in _NO_SPACE:
        return f"{reason}; free space or {ANOTHER_DIR}"
    if e.errno in _NO_PERMISSION:
        return f"{reason}; change the permissions of that directory or {ANOTHER_DIR}"
    if e.errno == errno.EROFS:
        return f"{reason} (the file system is read-only); {ANOTHER_DIR}"
    return f"{reason}; {ANOTHER_DIR}"


def _save_new(directory: Path, name: str, files: dict[str, bytes], manifest_bytes: bytes, uid: str,
              sources: dict[str, Path], written: Path | None = None) -> None:
    """DIR/NAME, new: from the temporary directory `written` (_write_tmp) where the caller wrote it already."""
    tmp = written if written is not None else _write_tmp(directory, name, files, manifest_bytes, uid, sources)
    try:
        os.rename(tmp, directory / name)  # the commit: NAME appears complete or not at all
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(directory, best_effort=True)


def _write_tmp(directory: Path, name: str, files: dict[str, bytes], manifest_bytes: bytes, uid: str,
               sources: dict[str, Path]) -> Path:
    """The complete checkpoint in a temporary directory of DIR (removed again if writing it fails)."""
    tmp = directory / f".{name}.tmp-{uid}"
    try:
        tmp.mkdir()
        for fname, data in files.items():
            write_or_link(tmp / fname, data, sources.get(fname))
        write_file(tmp / MANIFEST, manifest_bytes)
        _fsync_dir(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp


def _save_over(target: Path, files: dict[str, bytes], manifest_bytes: bytes, uid: str,
               sources: dict[str, Path]) -> None:
    old = _referenced_files(target)
    written: list[Path] = []
    tmp_manifest = target / f".{MANIFEST}.tmp-{uid}"
    try:
        for fname, data in files.items():
            written.append(target / fname)
            write_or_link(target / fname, data, sources.get(fname))
        written.append(tmp_manifest)
        write_file(tmp_manifest, manifest_bytes)
        os.replace(tmp_manifest, target / MANIFEST)  # the commit
    except BaseException:
        for p in written:
            unlink(p)
        raise
    # Committed: from here on nothing may undo the new checkpoint, and clean-up is best effort.
    _fsync_dir(target, best_effort=True)
    for fname in old - set(files):
        unlink(target / fname)
    _remove_strays(target, keep=set(files))


def write_file(path: Path, data: bytes) -> None:
    with open(path, "xb") as f:  # "x": never write through a name that already exists
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_or_link(path: Path, data: bytes, source: Path | None) -> None:
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
                fd, size = open_regular(path)
                same = size == len(data) and read_open(fd, size) == data
            except (OSError, CheckpointError):
                same = False
            if same:
                return
            unlink(path)
    write_file(path, data)


# What a file system answers that cannot sync a directory at all (POSIX allows it: a VirtualBox shared folder, some
# FUSE and network mounts): every save failed there ("could not save checkpoint: Invalid argument"), the autosave
# of every :train too. The files themselves are synced (write_file); the directory's entry is then the system's.
_NO_DIRECTORY_SYNC = {errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, getattr(errno, "ENOSYS", errno.EINVAL)}


def _fsync_dir(path: Path, best_effort: bool = False) -> None:
    if os.name == "nt":  # Windows cannot open a directory to fsync it
        return
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        if not best_effort and e.errno not in _NO_DIRECTORY_SYNC:
            raise


def _remove_dead_temp_dirs(directory: Path) -> None:
    """Remove the temporary directories of saves that died. Called under the folder lock: any save
    still in progress would hold it, so every temporary directory found now is debris."""
    for entry in os.listdir(directory):
        if TMP_DIR.match(entry):
            shutil.rmtree(directory / entry, ignore_errors=True)


def _remove_dead_strays(directory: Path) -> None:
    """Remove, in every checkpoint of DIR, the data files and temporary manifests of saves over it that died (kill -9
    before their commit). Called under the folder lock, as _remove_dead_temp_dirs: they went only with the next
    save of that same name, so a name given up on kept a copy of the model per killed save, which :ls never showed.
    A checkpoint holds two data files; only one with more, or with a temporary manifest, has its manifest read, and
    only one whose manifest names its files (a readable one) loses any."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return
    for entry in entries:
        target = directory / entry
        try:
            if not NAME.match(entry) or target.is_symlink() or not target.is_dir():
                continue
            inside = os.listdir(target)
        except OSError:
            continue
        if sum(1 for f in inside if DATA_FILE.match(f)) <= 2 and not any(MANIFEST_TMP.match(f) for f in inside):
            continue
        keep = _referenced_files(target)
        if keep:
            _remove_strays(target, keep)


def _remove_strays(target: Path, keep: set[str]) -> None:
    """Remove data files no manifest names, and stale temporary manifests (under the folder lock)."""
    try:
        entries = os.listdir(target)
    except OSError:
        return
    for entry in entries:
        if entry not in keep and (DATA_FILE.match(entry) or MANIFEST_TMP.match(entry)):
            unlink(target / entry)  # not ours (no match): left alone


def _shareable(directory: Path, names, entries) -> dict[str, Path]:
    """{new file name: path} of data files in checkpoints `names` (in DIR) with the same bytes as the new `entries`.

    Only what a valid manifest vouches for (size and SHA-256) is offered; `write_or_link` still
    compares the bytes before a link counts. So its values are checked, not its text byte for byte (parse_manifest's
    exact=False): re-encoding a manifest with indentation runs in pure Python, and a :save read two (the autosave and
    the last checkpoint), each with up to HISTORY_SAVED rows of history: a third of a second each at 20,000.
    """
    wanted = {(e["sha256"], e["size"]): e["file"] for e in entries}
    found: dict[str, Path] = {}
    for name in dict.fromkeys(n for n in names if isinstance(n, str) and NAME.match(n)):
        try:
            manifest, _ = read_manifest(directory / name, exact=False)
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
        manifest = json.loads(read_manifest_bytes(target / MANIFEST))
        names = {entry["file"] for entry in manifest["files"].values()}
    except Exception:
        return set()
    return {n for n in names if isinstance(n, str) and DATA_FILE.match(n)}


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
        raise CheckpointError(f"could not keep the previous {name} in {cut_middle(str(directory))} ({e.strerror}); "
                              "check that folder's permissions") from None


def is_own_autosave(path: Path, session: str | None, run: dict | None = None) -> bool:
    """Whether `path` holds an autosave written by this session (a continued run replaces only that).

    `run`: a trainer's state as a manifest holds it; then the autosave must also be of that very run (the
    same start and length, its history the beginning of `run`'s). The session alone does not say so: a
    run continued after its own save went elsewhere (`save=NAME`), or after a `:load` of an older
    autosave, would replace the autosave of another run.
    """
    if not session:
        return False
    try:
        manifest, _ = read_manifest(path)
    except (CheckpointError, OSError):
        return False
    origin = manifest.get("origin") or {}
    if origin.get("kind") != "autosave" or origin.get("session") != session:
        return False
    if run is None:
        return True
    saved = manifest.get("trainer") or {}
    history = saved.get("history")
    if not isinstance(history, list):
        return False
    # its rows are rows of `run`'s history, step for step: a long run's saved history is thinned (thinned_history)
    by_step = {row["step"]: row for row in run["history"]}
    return (saved.get("run_start") == run["run_start"] and saved.get("run_steps") == run["run_steps"]
            and all(isinstance(row, dict) and _same_row(row, by_step.get(row.get("step"))) for row in history))


# what a continued run measures into a row its stop left unevaluated (core.train: _measure_missing_evaluation)
_MEASURED_LATER = ("val_loss", "val_bpc", "accuracy")


def _same_row(saved: dict, now: dict | None) -> bool:
    """Whether the saved history row is the run's row `now`: the same, but where the saved one's evaluation was cut
    short by a stop (None) and the continued run has measured it since; that run's own autosave was left in place as
    another's ("autosave-2"), a slot of the runs kept taken by a stale partial one."""
    if now is None:
        return False
    if saved == now:
        return True
    later = [key for key in _MEASURED_LATER if saved.get(key) is None and now.get(key) is not None]
    return bool(later) and {k: v for k, v in saved.items() if k not in later} == {
        k: v for k, v in now.items() if k not in later}


# The most loss-history rows a checkpoint keeps (some 375 bytes each): a run of 200,000 steps (13 minutes of a
# small model on a CPU) had a manifest of 72 MiB, past MAX_MANIFEST_BYTES, and could not be saved at all.
HISTORY_SAVED = 20_000


def thinned_history(history: list[dict], most: int | None = None) -> list[dict]:
    """`history` with at most about `most` rows (HISTORY_SAVED): every evaluation (the val loss :ls, :load and the
    charts read; every k-th of them if they alone are more than half), the first and the last row (the rate a run
    continues at), and of the other steps those whose number is a multiple of k, spread evenly. A chart draws a
    column's points as their mean, so it draws the thinned history as it drew the whole one."""
    most = HISTORY_SAVED if most is None else most
    if len(history) <= most:
        return list(history)  # the rows as dicts, for the manifest's JSON (Trainer.history is a History)
    steps, evals = [], []  # one walk of the rows: a long run's History makes each row as it is read
    for i, row in enumerate(history):
        steps.append(row["step"])
        if row.get("val_loss") is not None:
            evals.append(i)
    last_eval = evals[-1:]  # the last val loss, which :ls and :load give as the run's, stays whatever the stride
    if len(evals) > most // 2:
        evals = evals[::-(-2 * len(evals) // most)]
    keep = {0, len(history) - 1, *evals, *last_eval}
    every = -(-len(history) // max(1, most - len(keep)))  # ceil
    keep.update(i for i, step in enumerate(steps) if step % every == 0)
    return [history[i] for i in sorted(keep)]


def _own_slot(directory: Path, name: str, keep: int, tokens: set, run: dict) -> int | None:
    """The slot (0: NAME, k: NAME-k, up to `keep`) of this run's own autosave (is_own_autosave of a session in
    `tokens`), which a continued run replaces wherever rotation moved it; None where there is none. Only NAME was
    asked: a run stopped, another session's run autosaved (this one's went to NAME-1), and the continued run rotated
    its own stale partial run on to NAME-2, where it took a slot of the runs kept."""
    marks = [token.encode() for token in tokens]
    for k in range(keep + 1):
        slot = directory / (name if k == 0 else f"{name}-{k}")
        try:  # the manifest parsed only where one of the sessions is named in its bytes: parsed under the lock, a
            raw = read_manifest_bytes(slot / MANIFEST)  # long run's loss history takes 0.3 s a manifest
        except (OSError, CheckpointError):
            continue
        if any(mark in raw for mark in marks) and any(is_own_autosave(slot, token, run=run) for token in tokens):
            return k
    return None


def _rotate_replacing(directory: Path, name: str, keep: int, own: int | None,
                      uid: str) -> tuple[tuple | None, tuple | None, Path | None]:
    """The rotation before an autosave, the folder lock held and the new checkpoint written: as _rotate_locked, except
    that the run's own earlier autosave at NAME-`own` (_own_slot) makes way, so that only the slots before it shift
    (into its place: nothing is dropped). It goes to a hidden name, returned for the caller to delete once the new
    one is committed: a kill before then loses it with the new one, as the rotation's oldest autosave is lost (both
    debris the next save removes), and another run's or session's autosave is never moved past its slot."""
    if own is None:
        return (*_rotate_locked(directory, name, keep), None)
    slot = directory / f"{name}-{own}"
    replaced = directory / f".{slot.name}.tmp-{uid}"
    os.rename(slot, replaced)
    try:
        moved, dropped = _rotate_locked(directory, name, own)
    except BaseException:
        if not os.path.lexists(slot):  # put back where nothing moved into its place yet
            os.rename(replaced, slot)
        raise
    return moved, dropped, replaced


def _put_back(directory: Path, name: str, keep: int, hidden: Path) -> None:
    """A save that rotated and then failed to commit: the run's own earlier autosave that _rotate_replacing moved to
    `hidden` goes to NAME, which the failed commit left free, else to the first free NAME-k (k up to keep + 1), so
    it loads; where every one is taken it stays hidden, debris the next save removes, as a kill would leave it."""
    for slot in (name, *(f"{name}-{k}" for k in range(1, keep + 2))):
        if not os.path.lexists(directory / slot):
            try:
                os.rename(hidden, directory / slot)
            except OSError:
                continue
            return


def _rotate_locked(directory: Path, name: str, keep: int) -> tuple[str | None, tuple | None]:
    """Rotation, the folder lock held: it moves and deletes only what rotation made.

    The slots are NAME, NAME-1 .. NAME-keep. An autosave (or a checkpoint older than `origin`,
    which rotation made too in those releases) is rotation's own. Any other checkpoint in a slot (a
    user's `save=autosave-3`, a model kept before a rebuild, a folder that does not load) is left
    where it is, and the autosaves skip over its slot; an own checkpoint that would move past
    NAME-keep is deleted. NAME itself always moves (the new save needs the name); if it is not
    rotation's own and no slot is free, it moves to the first free NAME-k past `keep`, never deleted.
    Returns where NAME went when it was not rotation's own, with whether it held a checkpoint (a user's `:save
    autosave`) or other files, for the save to say it: it moved without a word, and `:load autosave` then loaded
    another model (None otherwise); and the autosave deleted, as (name, step, its last val loss of its own data and
    mask or None, its data), or None: a run's summary says when it was the better model.
    """
    def slot(i: int) -> Path:
        return directory / (name if i == 0 else f"{name}-{i}")

    def own(i: int) -> bool:
        return rotation_owns(slot(i))

    blocked = {i for i in range(1, keep + 1) if os.path.lexists(slot(i)) and not own(i)}
    someones = slot(0).is_dir() and not own(0)  # NAME holds a checkpoint (or a folder) rotation did not make
    a_checkpoint = someones and origin_kind(slot(0)) is not None
    moved = dropped = None
    for i in range(keep, -1, -1):  # oldest first: each one's destination is free or already moved on
        if i in blocked or not slot(i).is_dir() or (i > 0 and not own(i)):
            continue
        j = i + 1
        while j in blocked:
            j += 1
        if j <= keep:
            os.rename(slot(i), slot(j))
        elif i > 0 or own(0):
            dropped = (slot(i).name, *_step_and_val(slot(i)))
            shutil.rmtree(slot(i))
        else:
            while os.path.lexists(slot(j)):
                j += 1
            os.rename(slot(i), slot(j))  # someone's checkpoint named NAME: moved aside, kept
        if i == 0 and someones:
            moved = (slot(j).name, a_checkpoint)
    return moved, dropped


def _step_and_val(path: Path) -> tuple:
    """(step, the last val loss of its history on its data and mask, its data, its vocabulary's size, whether it reads
    with the causal mask) of the checkpoint at `path`, as :ls gives them (after data_since_step and
    measured_since_step); Nones where its manifest cannot be read. The last two say whether its loss compares with a
    run's: a causal=off run's 0.0375, or a loss per token of another tokenizer, was called lower than a BPE run's.
    Last, the steps its stopped run had still to go (0: it ended): a stopped run deleted is said whatever its loss."""
    try:
        manifest = json.loads(read_manifest_bytes(path / MANIFEST))
        model = manifest["model_config"]
        # a one-expert mixture of the gate of 1: no loss of the model as it computes now (values.measured_since).
        # The settings as read, not a ModelConfig: one of a newer minitf's holds a setting it refuses
        evaluated = own_evaluation(manifest, model, manifest["trainer"]["history"])
        return (int(manifest["trainer"]["step"]), float(evaluated["val_loss"]) if evaluated else None,
                str(manifest["data_spec"]), int(model["vocab_size"]), bool(model.get("causal", True)),
                int(steps_left(manifest["trainer"])))
    except Exception:  # noqa: BLE001 - a broken autosave deleted: nothing to tell of it
        return None, None, None, None, None, 0

