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
names are ignored (the next save into the folder removes them; until then `:ls` says what they
take, and `:load` of a new name whose save was cut short says so: debris.py).

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
folder (a hard link: see `store.write_or_link`).

Reading is bounded before it starts. Every file is opened without blocking (a FIFO cannot hang a
load) and without following a symbolic link, then checked with `fstat` on the open descriptor: only
a regular file of exactly the size its manifest records is read, and that size must fit what the
model's config can need (see `loading.size_limits`); the manifest itself may have `MAX_MANIFEST_BYTES`.
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

The package, by concern (each module's docstring says more):

    names.py      the patterns of the folder's names: checkpoints, data files, a save's temporary ones
    layout.py     names and places, the constants of the format, Checkpoint and CheckpointInfo
    manifest.py   the bytes: tensors to safetensors, the manifest's one spelling, its checksum and checks
    reads.py      bounded reads: regular files of their recorded size only, pickles refused unopened
    locks.py      the folder lock (flock, or an exclusive-create file with its owner)
    debris.py     what saves cut short (kill -9) left, while no save runs: for :ls and :load to say
    store.py      saving atomically under the lock, sharing identical data files, rotating autosaves
    loading.py    validating a checkpoint against the model it describes, and restoring it
    listing.py    one row per checkpoint for :ls, a broken one with its reason
    values.py     a manifest's configs and vocabulary checked, arithmetic only (listing and loading share it)

The names below are the package's public interface: `from minitf_repl.core.checkpoint import ...`
and `from minitf_repl.core import checkpoint as ckpt` reach them here. They load on first use (PEP 562's
module `__getattr__`): loading and saving need torch and the model, but listing (:ls, `minitf ls`), checking
a name and the folder lock need neither, and a one-shot `minitf ls` that imported every module here waited
about a second for torch only to read a few JSON manifests. names, layout, reads, manifest, values, listing,
locks and debris import no torch at module level (tests/test_sweep_ss.py); loading and store do.
"""

import importlib

_HOMES = {
    "debris": ("Leftover", "leftovers"),
    "layout": ("FORMAT_NAME", "FORMAT_VERSION", "MANIFEST", "MAX_MANIFEST_BYTES", "ORIGINS", "Checkpoint",
               "CheckpointInfo", "check_name", "check_save_target", "last_own_evaluation"),
    "listing": ("checkpoint_info", "list_checkpoints", "misnamed"),
    "loading": ("build_model", "check_loadable", "checkpoint_data", "data_found_elsewhere", "load_checkpoint",
                "restore", "restore_rng", "restore_trainer", "weights_from"),
    "locks": ("HELD_FILE", "LOCK_FILE", "LOCK_WAIT", "folder_lock"),
    "reads": ("manifest_bytes",),
    "store": ("NameTaken", "rotate", "save_checkpoint"),
}
_MODULES = ("debris", "layout", "listing", "loading", "locks", "manifest", "names", "reads", "store", "values")
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "FORMAT_NAME", "FORMAT_VERSION", "HELD_FILE", "LOCK_FILE", "LOCK_WAIT", "MANIFEST", "MAX_MANIFEST_BYTES", "ORIGINS",
    "Checkpoint", "CheckpointInfo", "Leftover", "NameTaken", "build_model", "check_loadable", "check_name",
    "check_save_target", "checkpoint_data", "checkpoint_info", "data_found_elsewhere", "folder_lock",
    "last_own_evaluation", "leftovers", "list_checkpoints", "load_checkpoint", "manifest_bytes",
    "misnamed", "restore", "restore_rng", "restore_trainer", "rotate", "save_checkpoint", "weights_from",
]


def __getattr__(name: str):
    """A public name, imported from its module the first time it is asked for, and kept here after that; a module
    of the package by its name too (`ckpt.store`), as when this file imported them all."""
    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)  # the import sets it here
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
