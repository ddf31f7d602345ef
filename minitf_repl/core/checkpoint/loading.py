"""Loading: read and validate a checkpoint completely, then apply it to a new model and trainer.

`load_checkpoint` changes nothing: it checks the manifest's values against what this lab would
build (the config's limits and core.sizes' bounds), checks that the model file can hold the
weights the config claims before anything is built, reads the data files within the sizes the
config allows (`size_limits`), and checks every tensor against a reference model on the meta
device. `build_model`, `restore_trainer` and `restore_rng` then apply it; `restore` builds a new
(model, trainer) pair that a caller swaps in only when all of that succeeded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import platform
import re
from pathlib import Path

import torch

from ..bpe import characters_of, learned_carriage_returns
from ..config import ModelConfig, TrainConfig
from ..device import mps_here, resolve_device
from ..errors import CheckpointError, UserError
from ..model import MiniTransformerLM
from ..optimizers import AdamW, BatchedMuon, group_kind
from ..sizes import parameter_count
from ..train import Trainer
from ..words import count
from .debris import cut_short_said
from .layout import Checkpoint, MANIFEST, checkpoint_path, damaged, held_elsewhere
from .manifest import HISTORY_LATER, tied_aliases
from .reads import read_data_file, read_manifest, read_manifest_bytes
from .values import GATE_OF_ONE_STEP
from .values import check_loadable, check_manifest_values, gated_by_one  # noqa: F401 (names of this module before)


_OPTIM_KEY = re.compile(r"^optim\.(\d+)\.([A-Za-z_][A-Za-z0-9_]*)$")
_CUDA_KEY = re.compile(r"^rng\.cuda\.(\d+)$")

# safetensors files: an 8-byte length, a JSON header (about 100 bytes a tensor, plus metadata), the data.
_HEADER_SLACK = 2**20

# Settings a checkpoint predates keep the value it trained with, not today's default: before `optimizer` existed
# every run was AdamW (the default is Muon now), and before `dtype` every run was float32 (the default is auto, which
# is bfloat16 on a CPU with AMX or AVX512-BF16: a run continued from such a checkpoint changed its arithmetic).
PREDATED_TRAINING = {"optimizer": "adamw", "dtype": "float32"}
_TENSOR_SLACK = 512  # header bytes allowed per tensor, on top of _HEADER_SLACK
_RNG_SLACK = 2**20  # the random states: 5 KB for each CPU generator, a few bytes per CUDA device


def load_checkpoint(directory, name: str, map_location="cpu", model=None) -> Checkpoint:
    """Read and validate DIR/NAME. Changes nothing: apply it with build_model, restore_trainer, restore_rng.

    `model`: a model of the caller's own making (a part of a class of their own in it: own_parts), whose stored
    tensors the weights must match, name for name, in shape and dtype, instead of those its config builds; the
    files are read within that model's sizes. load_model(NAME, model=...) loads the weights into it."""
    try:
        path = checkpoint_path(directory, name)
    except CheckpointError as e:
        raise cut_short_said(e, directory, name) from None
    for attempt in range(3):
        manifest, raw = read_manifest(path)
        for key, value in PREDATED_TRAINING.items():
            manifest["trainer"]["train_config"].setdefault(key, value)
        config = check_manifest_values(path, manifest)  # before the data files: they are read within its bounds
        limits = size_limits(config) if model is None else model_limits(model)
        _check_claims(path, config, manifest["files"]["model"], limits)
        try:
            model_tensors = read_data_file(path, manifest["files"]["model"], limits["model"])
            state_tensors = read_data_file(path, manifest["files"]["state"], limits["state"])
            break
        except CheckpointError:
            # A save of the same name may have replaced the manifest (and deleted the old files)
            # between our reads: if the manifest changed, read the new one.
            try:
                changed = read_manifest_bytes(path / MANIFEST) != raw
            except (OSError, CheckpointError):
                changed = False
            if not os.path.lexists(path):  # another session's save moved, replaced or deleted it: nothing to save again
                raise CheckpointError(f"checkpoint {name!r} was removed while it was read (another minitf's save moved "
                                      "or replaced it?); list the checkpoints again and load one that is there") \
                    from None
            if not changed or attempt == 2:
                raise

    vocab, tokenizer = manifest["vocab"], stored_tokenizer(path, manifest, config)
    chars = characters_of(tokenizer) if tokenizer is not None else None
    if chars is not None and len(chars) == config.vocab_size:
        # A character model's Hugging Face folder holds its characters as a word-level tokenizer.json, which minitf
        # read as a subword tokenizer before 61d564d, and a :save of that model stored it so. Kept as such, it read
        # any other character of a text as its unknown token ("\n") without a word: the model's characters, as a
        # load of the folder gives them now.
        vocab, tokenizer = chars, None
    elif tokenizer is not None:
        vocab = tokenizer.vocab  # the one spelling every comparison of tokenizers uses
    t = manifest["trainer"]
    model_state = _check_model_tensors(path, config, model_tensors, map_location, model, manifest.get("own_parts"))
    optimizer_state, generator, torch_rng, cuda_rng = _split_state_tensors(path, manifest["optimizer"], state_tensors)

    trainer_state = {
        "step": t["step"],
        "run_start": t["run_start"],
        "run_steps": t["run_steps"],
        "run_elapsed": float(t["run_elapsed"]),
        "run_constant_lr": t.get("run_constant_lr"),
        "trained_window": t.get("trained_window"),  # absent before it existed: the model's own window
        "trained_dtype": t.get("trained_dtype"),  # absent before it existed: not known
        "trained_ns_dtype": t.get("trained_ns_dtype"),  # absent before it existed: not known, nothing said of it
        "dtype_spans": t.get("dtype_spans") or [],  # absent before they existed: none recorded
        "history": [{**dict.fromkeys(HISTORY_LATER), **h} for h in t["history"]],
        "train_config": dict(t["train_config"]),
        "generator": generator,
        "optimizer": optimizer_state,
    }
    return Checkpoint(
        name=name, path=path, model_config=config, model_state=model_state, trainer_state=trainer_state,
        torch_rng=torch_rng, cuda_rng=cuda_rng, vocab=vocab, data_spec=manifest["data_spec"], meta=manifest,
        tokenizer=tokenizer, mps_rng=torch.tensor(t["mps_rng"], dtype=torch.uint8) if "mps_rng" in t else None,
    )


def stored_tokenizer(path: Path, manifest: dict, config: ModelConfig):
    """The subword tokenizer a checkpoint stores (JSON, never a pickle), None for a character vocabulary."""
    entry = manifest.get("tokenizer")
    if entry is None:
        return None
    from ..bpe import SubwordTokenizer, kept_tokenizer_problem

    # before the library builds it or reads a text with it: a hostile regex made it panic, which ended the session
    if (problem := kept_tokenizer_problem(entry["json"])) is not None:
        raise CheckpointError(f"{path}: its tokenizer {problem}; this checkpoint cannot be used (minitf keeps no "
                              "such tokenizer: the file was edited, or an older minitf saved a Hugging Face folder's, "
                              "which loads as that folder)")
    try:
        tokenizer = SubwordTokenizer.from_json(entry["json"], config.vocab_size, where=f"{path}'s tokenizer")
    except UserError as e:
        raise CheckpointError(f"{e}; this checkpoint cannot be used") from None
    if tokenizer.own_size > config.vocab_size:
        raise damaged(f"{path}: its tokenizer has {tokenizer.own_size:,} tokens but the model has "
                      f"vocab_size={config.vocab_size}, so this checkpoint is inconsistent")
    return tokenizer


def _check_claims(path: Path, config: ModelConfig, entry: dict, limits: dict) -> None:
    """Refuse a model config that claims more weights than its model file has bytes, before anything is built.

    The weights of `config` (core.sizes.parameter_count, float32) must all be in the model file;
    a manifest claiming 20,000 layers next to a file of a few kilobytes is caught here, by
    arithmetic, instead of after building 20,000 layers. From here on a load's work (reading,
    comparing tensors, building the model) grows with bytes that are really there.
    """
    weights = limits["weights"]
    # The recorded size: a file whose real size differs is refused by read_data_file, which reads
    # nothing of it (but 9 bytes, to say "pickle" where it is one).
    if entry["size"] < weights:
        raise damaged(f"{path}: its model config describes {parameter_count(config):,} parameters ({weights:,} bytes "
                      f"of weights) but its model file holds {entry['size']:,} bytes; this checkpoint is inconsistent")


def size_limits(config: ModelConfig) -> dict[str, int]:
    """The largest model and state files a checkpoint of this config can have, in bytes ("weights": the weights alone).

    The model file holds each stored tensor once; the state file AdamW's two moments (each the
    size of its parameter) and a step count per parameter, and the random states. Both get
    generous room for safetensors' header. Reading no more than this keeps a load's memory within
    what the model itself will take, whatever sizes a manifest claims. Counted on one block and
    multiplied (every block is alike), so the cost does not grow with the layers a manifest claims.
    """
    outside, block, n_layers = _reference_parts(config)
    n_stored = len(outside) + n_layers * len(block)
    weights = _bytes(outside) + n_layers * _bytes(block)
    # No buffer is stored (the causal mask, position tables are derived) and each parameter is stored
    # once, so the parameters are exactly the stored tensors: AdamW keeps two moments of each.
    assert all(t.dtype.is_floating_point for t in list(outside.values()) + list(block.values()))
    return _limits(weights, n_stored)


def _limits(weights: int, n_stored: int) -> dict[str, int]:
    """size_limits' bytes for `n_stored` tensors of `weights` bytes in all."""
    return {
        "weights": weights,
        "model": weights + _HEADER_SLACK + _TENSOR_SLACK * n_stored,
        "state": 2 * weights + 8 * n_stored + _RNG_SLACK + _HEADER_SLACK + _TENSOR_SLACK * 3 * n_stored,
    }


def _bytes(tensors: dict) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


def stored_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a save of `model` stores: its state_dict, a tied weight once (manifest.encode_model's)."""
    aliases = tied_aliases(model)
    return {k: v for k, v in model.state_dict().items() if k not in aliases}


def model_limits(model: torch.nn.Module) -> dict[str, int]:
    """size_limits of a model of the caller's own making: its stored tensors as they are, not its config's."""
    stored = stored_tensors(model)
    return _limits(_bytes(stored), len(stored))


# A reference model this small is built on the CPU: milliseconds, where the meta device's first use costs 0.8 s
# (torch's Python kernels for meta tensors, tril's and normal_'s among them, import torch._dynamo on their first
# call: a third of a `minitf --load NAME gen` process). What a manifest claims beyond it is built on meta, at no
# memory whatever it claims. The same names, shapes and dtypes either way (tests/test_checkpoint_safety.py).
REFERENCE_ON_CPU_PARAMETERS = 2**22  # 16 MB of float32 weights
REFERENCE_ON_CPU_WINDOW = 2**11  # the causal mask: 4 MB of booleans


def reference_model(config: ModelConfig) -> MiniTransformerLM:
    """The model this config builds, with its names, shapes and dtypes, RNG untouched: on the CPU where it is
    small, else on the meta device (no memory)."""
    small = parameter_count(config) <= REFERENCE_ON_CPU_PARAMETERS and config.max_seq_len <= REFERENCE_ON_CPU_WINDOW
    with torch.random.fork_rng(devices=[]), torch.device("cpu" if small else "meta"):
        return MiniTransformerLM(config)


_BLOCK = "blocks.0."


def _reference_parts(config: ModelConfig) -> tuple[dict, dict, int]:
    """(outside, block, n_layers): the stored tensors outside the blocks and those of one block, on meta.

    Read from a one-block model: every block of MiniTransformerLM is the same TransformerBlock, so
    block i holds `blocks.i.` + each name of `block`. Building the claimed model itself on the meta
    device took minutes and gigabytes for 20,000 layers.
    """
    ref = reference_model(config.replace(n_layers=1))
    aliases = tied_aliases(ref)
    state = {k: v for k, v in ref.state_dict().items() if k not in aliases}
    outside = {k: v for k, v in state.items() if not k.startswith(_BLOCK)}
    block = {k[len(_BLOCK):]: v for k, v in state.items() if k.startswith(_BLOCK)}
    return outside, block, config.n_layers


def expected_tensors(config: ModelConfig) -> tuple[dict, dict[str, str], list[str]]:
    """({name: meta tensor} stored in a model file, {alias: name} of tied weights, state_dict order)."""
    ref = reference_model(config.replace(n_layers=1))
    aliases = tied_aliases(ref)
    if any(k.startswith(_BLOCK) for k in aliases):
        raise AssertionError("a tied weight inside a block: expected_tensors must number its aliases too")
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


def own_parts(model: torch.nn.Module) -> list[str]:
    """The stored tensors of `model` that its config does not build as they are, each named with how it differs:
    "blocks.0.attn.gate" (added), "no ln_f.bias", "ln_f.weight of 16 float32, not 32 float32". Empty for a model the
    config built. Such a model is saved whole, and `:load` cannot build it again (load_model(NAME, model=...) can):
    a save says so rather than promise a load (store.save_checkpoint's outcome "own_parts"). Compared with a
    one-block reference (expected_tensors): milliseconds, on the meta device for a large config."""
    config = getattr(model, "config", None)
    if not isinstance(config, ModelConfig):
        return []
    expected, _, _ = expected_tensors(config)
    have = stored_tensors(model)
    parts = [k for k in have if k not in expected]  # a part added (the config builds none)
    parts += [f"no {k}" for k in expected if k not in have]
    parts += [f"{k} of {_shown_tensor(have[k])}, not {_shown_tensor(t)}" for k, t in expected.items()
              if k in have and (tuple(have[k].shape) != tuple(t.shape) or have[k].dtype != t.dtype)]
    return parts


def _shown_tensor(t: torch.Tensor) -> str:
    """A tensor's shape and dtype in own_parts' words: "16x32 float32", "a scalar float32"."""
    return f"{'x'.join(map(str, t.shape)) or 'a scalar'} {str(t.dtype).removeprefix('torch.')}"


def _check_model_tensors(where: Path, config: ModelConfig, tensors: dict, map_location,
                         model: torch.nn.Module | None = None, recorded: list | None = None) -> dict[str, torch.Tensor]:
    """The checkpoint's weights, each checked against the one its config builds (or `model`'s: load_checkpoint).
    `recorded`: the manifest's own_parts, None where it keeps none (_misfit)."""
    if model is None:
        expected, aliases, order = expected_tensors(config)
        against = "its model config"
    else:
        aliases, order = tied_aliases(model), list(model.state_dict())
        expected, against = stored_tensors(model), "the model given"
    if (problem := _misfit(where, against, tensors, expected, model is None, recorded)) is not None:
        raise problem
    for key in order:
        if key in tensors:
            _check_finite(where, f"the weight {key}", tensors[key])
    state = {k: v.to(map_location) for k, v in tensors.items()}
    for alias, original in aliases.items():
        state[alias] = state[original]  # tied: the same tensor, as in the model
    return {k: state[k] for k in order}


def _misfit(where: Path, against: str, tensors: dict, expected: dict, by_config: bool,
            recorded: list | None) -> CheckpointError | None:
    """The refusal of weights that do not fit `expected` (those of `against`), or None where they fit: what is missing,
    unexpected, or of another shape or dtype, and the way on.

    A model with a part of a class of its own (a gate added to an attention) gets its weights back in Python, into
    a model built so (load_model's `model`), and is told so with its name and folder. Any other misfit is a damaged
    or edited file, for which that route is no way on: it gets the docs' fix, save it again or copy it again
    (layout.damaged). Which it is, the save said: the manifest's own_parts (`recorded`), the parts the model had
    that its config does not build, none for a model minitf built. The tensors alone cannot say it: a manifest's
    `bias` flipped to false, or its n_layers lowered, leaves weights the config does not build and none missing,
    as an added part does. Decision: a manifest of before own_parts was kept is judged by its tensors, the Python
    route given only where they look like added parts (unexpected ones, none missing or shaped otherwise)."""
    missing = sorted(set(expected) - set(tensors))
    extra = sorted(set(tensors) - set(expected))
    differing = [k for k, t in expected.items()
                 if k in tensors and (tuple(tensors[k].shape) != tuple(t.shape) or tensors[k].dtype != t.dtype)]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
        if extra:
            parts.append(f"unexpected {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}")
        problem = f"{where}: the weights do not fit {against} ({'; '.join(parts)})"
    elif differing:
        got, wanted = tensors[differing[0]], expected[differing[0]]
        problem = (f"{where}: {differing[0]} has shape {tuple(got.shape)} ({got.dtype}) but {against} needs "
                   f"{tuple(wanted.shape)} ({wanted.dtype})")
    else:
        return None
    if not by_config:  # the caller's own model: it is theirs to build as the checkpoint's was
        return CheckpointError(f"{problem}; this checkpoint cannot be used")
    own = bool(recorded) if recorded is not None else bool(extra and not missing and not differing)
    if own:
        return CheckpointError(f"{problem}, which builds no part of a class of your own; this checkpoint cannot be "
                               f"used here: in Python, build the model that saved it and {_load_model_call(where)} "
                               "loads the weights into it")
    return damaged(f"{problem}, so this checkpoint cannot be used")


def _load_model_call(where: Path) -> str:
    """load_model's call for the checkpoint at `where`, its name and folder filled in (as the save's line gives it:
    commands.checkpoints.own_parts_line), so that it reads the same checkpoint from a script run anywhere."""
    return f"load_model({where.name!r}, directory={str(where.parent)!r}, model=MODEL)"


def _check_finite(where: Path, what: str, t: torch.Tensor) -> None:
    """Refuse NaN or infinity in weights or optimizer state (decision: refused, not loaded for study).

    minitf never saves such a model (a diverged step is not applied, a diverged run rolls back), so
    non-finite values mean a corrupted or foreign file; loaded, every `:gen` would fail in the
    sampler and every `:train` diverge at once. Refusing says so at the one place it can be fixed.
    """
    if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        raise CheckpointError(
            f"{where}: {what} holds {count(bad, 'value')} that {'is' if bad == 1 else 'are'} not finite (NaN or "
            "infinity), which no model can generate or train with; this checkpoint cannot be used"
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
        if not valid_cpu_rng_state(t):
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
        for key, value in values.items():
            state.setdefault(int(index_str), {})[key] = _scalar_state(index_str, key, value, bad)
    if any(i >= n_params for i in state):
        raise bad("has optimizer state for a parameter that does not exist")

    for g in optimizer["param_groups"]:
        _check_group(g, bad)
    kind_of = {i: group_kind(g) for g in optimizer["param_groups"] for i in g["params"]}
    for index in sorted(state):
        _check_parameter_state(index, kind_of[index], state[index], bad)
    groups = [_optimizer_group(g) for g in optimizer["param_groups"]]
    optimizer_state = {"state": {i: state[i] for i in sorted(state)}, "param_groups": groups}
    return optimizer_state, tensors["rng.data"], tensors["rng.torch"], [cuda[i] for i in sorted(cuda)]


_MUON_LR_ADJUSTMENTS = (None, "original", "match_rms_adamw")  # what torch.optim.Muon accepts

# The flags of AdamW's groups as minitf makes them (optimizers._adamw), each with the values a save may hold. A load
# gives the optimizer the saved group's every key (torch's load_state_dict), so a flag edited into a manifest took
# effect: amsgrad=true read a state it never kept (KeyError max_exp_avg_sq: "internal error" at :train),
# differentiable=true refused the fused kernel (RuntimeError), maximize=true trained towards a higher loss without a
# word. fused: null was written before c82d954b (torch's own choice then), true since (optimizers.FUSED_ADAMW).
# decoupled_weight_decay: torch's AdamW sets it true at every load (its __setstate__; AdamW has been Adam with it
# since torch 2.7), so whatever a save holds the update is AdamW's: a false is harmless, and accepted.
_ADAMW_FLAGS = {"amsgrad": (False,), "maximize": (False,), "differentiable": (False,), "capturable": (False,),
                "foreach": (None,), "fused": (True, None), "decoupled_weight_decay": (True, False)}
# The settings of each optimizer's groups under the torch minitf supports, as torch 2.13 has them (AdamW's since 2.7,
# Muon's since it came, in 2.9), fixed here rather than read from the torch installed: a later torch that adds a
# default to its groups (as 2.7 added AdamW's decoupled_weight_decay) writes it into every checkpoint, and an
# earlier one must still load those. A key not listed is checked by _check_unknown_setting.
_GROUP_KEYS = {
    "adamw": frozenset({"lr", "betas", "eps", "weight_decay", *_ADAMW_FLAGS}),
    "muon": frozenset({"lr", "momentum", "nesterov", "ns_steps", "ns_coefficients", "eps", "weight_decay",
                       "adjust_lr_fn"}),
}
# The settings each update reads that no load fills in where a group lacks them: torch's AdamW sets its flags then
# (its __setstate__), nothing sets Muon's, every one of which BatchedMuon.step reads. A group without lr loaded,
# and the next :train ended in "internal error: KeyError 'lr'".
_NEEDED_KEYS = {"adamw": frozenset({"lr", "betas", "eps", "weight_decay"}), "muon": _GROUP_KEYS["muon"]}
# The other optimizer's settings that mark a group of the wrong kind: a Muon group that lost its ns_coefficients
# reads as AdamW's (group_kind) with Muon's momentum still in it. AdamW's flags are no such mark: a later Muon may
# well have a maximize or a foreach of its own.
_OTHER_KINDS = {"adamw": _GROUP_KEYS["muon"] - _GROUP_KEYS["adamw"], "muon": frozenset({"betas"})}
_SHORT_TEXT = 40  # the longest text a setting minitf does not know may hold (a mode's name, as adjust_lr_fn's)
# What each optimizer keeps per parameter, all of it once the parameter has taken a step (none before): torch reads
# each key at every step, and a state missing one ended :train in "internal error: KeyError"
_STATE_KEYS = {"adamw": {"step", "exp_avg", "exp_avg_sq"}, "muon": {"momentum_buffer"}}


@functools.cache
def _torch_defaults(kind: str) -> dict:
    """The settings a group of `kind` has under the torch installed, each at its default: the keys its update may
    read, and the value of each where minitf sets none (optimizers.make_optimizer sets lr, betas, weight_decay and
    fused, and Muon's momentum and adjust_lr_fn, none of them taken from here).

    Asked of minitf's own optimizer classes, whose defaults are torch's (they subclass torch's and change no
    default): torch.optim's own constructors import torch._dynamo on their first call (3 to 6 s on a 2-core Zen 3,
    once a process), which made the first `:load` of a session, and every `minitf --load NAME ...`, take seconds
    where reading the files takes 0.1 s."""
    holder = [torch.nn.Parameter(torch.zeros(2, 2))]
    made = AdamW(holder) if kind == "adamw" else BatchedMuon(holder)
    return dict(made.defaults)


def _optimizer_group(g: dict) -> dict:
    """A saved group, checked (_check_group), as the optimizer of the torch installed takes it: JSON's lists back to
    the tuples it saved (AdamW's betas, Muon's ns_coefficients), and the keys this torch's update has, no other.

    Decision: a key this torch does not have (a later torch's setting) is dropped, not handed on. Nothing here
    reads it, and kept, a save of the run continued here would tell a later torch that these steps ran with it. A
    key this torch has that an earlier torch's save lacks takes this torch's default, which a group minitf makes
    here holds too; the keys no load may fill in (_NEEDED_KEYS) were refused where missing."""
    defaults = _torch_defaults(group_kind(g))
    kept = {k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k in defaults}
    return {**defaults, **kept, "params": g["params"]}


def _check_group(g: dict, bad) -> None:
    """One saved param group's settings, as minitf makes them: every setting its update reads (_NEEDED_KEYS), no
    setting of the other optimizer's, one minitf does not know only as _check_unknown_setting allows, its flags
    minitf's (_ADAMW_FLAGS), its numbers in the ranges the update is defined in (group_kind says which).

    torch checks none of these when it loads a state, and a wrong one would surface steps later (or
    never: Muon reads an unknown adjust_lr_fn as no adjustment), so they are checked here. Each range is where
    the update means what it says: betas and momentum in [0, 1) (betas of [5, -3] diverged at once), eps > 0 (it
    keeps a division from zero), weight_decay >= 0 (a negative one grows the weights each step), lr >= 0.
    """
    def is_number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    def numbers(v, n: int) -> bool:
        return isinstance(v, list) and len(v) == n and all(is_number(x) for x in v)

    kind = group_kind(g)
    for key in sorted(set(g) - _GROUP_KEYS[kind] - {"params"}):
        _check_unknown_setting(kind, key, g[key], bad)
    missing = sorted(_NEEDED_KEYS[kind] - set(g))
    if missing:
        raise bad(f"has no optimizer setting {missing[0]}, which minitf's {kind} reads at every step")
    for key, low, above in (("lr", 0.0, False), ("eps", 0.0, True), ("weight_decay", 0.0, False)):
        value = g[key]
        if not is_number(value):
            raise bad(f"has a non-numeric optimizer {key}")
        if value < low or (above and value == low):
            raise bad(f"has an optimizer {key} of {value!r}, which must be {'above' if above else 'at least'} {low:g}")
    if kind == "adamw":
        betas = g["betas"]
        if not numbers(betas, 2):
            raise bad("has malformed optimizer betas")
        if not all(0 <= b < 1 for b in betas):
            raise bad(f"has optimizer betas of {betas!r}, which must each be in [0, 1)")
        for flag, allowed in _ADAMW_FLAGS.items():
            if flag in g and not any(g[flag] is value for value in allowed):  # `is`: 0 is no False, 1 no True
                raise bad(f"has the optimizer flag {flag}={_shown_value(g[flag])}, which minitf never sets "
                          f"(it sets {' or '.join(_shown_value(v) for v in allowed)})")
        return
    if not is_number(g.get("momentum")):
        raise bad("has a non-numeric Muon momentum")
    if not 0 <= g["momentum"] < 1:
        raise bad(f"has a Muon momentum of {g['momentum']!r}, which must be in [0, 1)")
    if not numbers(g.get("ns_coefficients"), 3):
        raise bad("has malformed Muon ns_coefficients (three numbers)")
    steps = g.get("ns_steps")
    if not (isinstance(steps, int) and not isinstance(steps, bool) and 0 <= steps < 100):
        raise bad("has a malformed Muon ns_steps (a whole number below 100)")
    if not isinstance(g.get("nesterov"), bool):
        raise bad("has a malformed Muon nesterov (true or false)")
    if g.get("adjust_lr_fn") not in _MUON_LR_ADJUSTMENTS:
        raise bad("has an unknown Muon adjust_lr_fn")


def _check_unknown_setting(kind: str, key, value, bad) -> None:
    """A key of a saved `kind` group that minitf's list of its settings (_GROUP_KEYS) lacks.

    One of the other optimizer's settings (_OTHER_KINDS) is refused: the group is of no kind minitf makes. Any other
    is taken for a setting a later torch added to its groups (decision: accepted, so that torch's checkpoints load
    here), where it holds what a setting holds: true, false, null, a number or a short text; a list or an object
    is no setting's. Where the torch installed has the key, its update reads it: the value must then be this torch's
    default, the one a run of minitf (which sets no such key) ran with, since what another value does is not known
    here. Where it does not, the key is dropped before the optimizer gets the group (_optimizer_group)."""
    if key in _OTHER_KINDS[kind]:
        raise bad(f"has an optimizer setting minitf's {kind} does not have ({_shown_key(key)})")
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    text = isinstance(value, str) and len(value) <= _SHORT_TEXT
    if not (value is None or isinstance(value, bool) or number or text):
        raise bad(f"has an optimizer setting minitf's {kind} does not have ({_shown_key(key)}), holding no plain "
                  "value (true, false, null, a number or a short text)")
    defaults = _torch_defaults(kind)
    if key in defaults and not _same_setting(value, defaults[key]):
        raise bad(f"has the optimizer setting {_shown_key(key)}={_shown_value(value)}, which minitf never sets "
                  f"(this torch's {kind} reads it, at {_shown_value(defaults[key])})")


def _same_setting(saved, default) -> bool:
    """Whether a saved setting is `default`: true, false and null by identity (JSON's 0 is no false), the rest by
    value (a saved 0 is a default 0.0)."""
    if isinstance(saved, (bool, type(None))) or isinstance(default, (bool, type(None))):
        return saved is default
    return saved == default


def _scalar_state(index: str, key, value, bad) -> torch.Tensor:
    """A parameter's state that a manifest keeps as a number (`optimizer.scalars`), as the tensor torch keeps it.

    A save writes there what of a state is no tensor (manifest.encode_state). Under the torch minitf supports that
    is nothing, but torch's AdamW kept its `step` as a number before torch 1.12 and still reads one (its
    __setstate__ makes it a float32 tensor, as here), so such a step is no damaged file: it loads, its range checked
    as a stored step's (_check_parameter_state). Anything else there is no state an optimizer keeps as a number."""
    if key != "step" or not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
        raise bad(f"has an optimizer scalar {_shown_key(key)} of parameter {index} that is no step count (a number)")
    return torch.tensor(float(value), dtype=torch.float32)


def _check_parameter_state(index: int, kind: str, values: dict, bad) -> None:
    """The optimizer's state of one parameter: nothing (it never took a step), or every key its optimizer keeps
    (_STATE_KEYS), each a tensor, with AdamW's second moment >= 0 and its step a whole number >= 0 (a negative
    step or moment made the bias correction or the square root diverge)."""
    if not values:
        return
    missing, extra = sorted(_STATE_KEYS[kind] - set(values)), sorted(set(values) - _STATE_KEYS[kind])
    if missing:
        raise bad(f"has no optimizer state {missing[0]} of parameter {index} ({kind} keeps "
                  f"{', '.join(sorted(_STATE_KEYS[kind]))} for each parameter that took a step)")
    if extra:
        raise bad(f"holds an optimizer state {_shown_key(extra[0])} of parameter {index} that minitf's {kind} "
                  "never keeps")
    for key, value in values.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise bad(f"has an optimizer state {key} of parameter {index} that is not a tensor of floats")
    if kind != "adamw":
        return
    step = values["step"]
    if step.numel() != 1 or not bool(step >= 0) or not bool(step == step.round()):
        raise bad(f"has an optimizer step of parameter {index} that is not one whole number >= 0")
    if bool((values["exp_avg_sq"] < 0).any()):
        raise bad(f"has a negative second moment (exp_avg_sq) of parameter {index}, a mean of squares")


def _shown_key(key) -> str:
    """A key from a manifest, quoted for a message: short, and escaped (it may hold anything)."""
    text = ascii(key)
    return text if len(text) <= 40 else text[:37] + "..."


def _shown_value(value) -> str:
    """A flag's value as the manifest's JSON writes it (true, false, null), or quoted as _shown_key."""
    return json.dumps(value) if isinstance(value, (bool, type(None))) else _shown_key(value)


def valid_cpu_rng_state(state: torch.Tensor) -> bool:
    """Whether torch accepts `state` for a CPU generator: tried on a throw-away one, so nothing changes.

    The right size is not enough (torch checks the mt19937 state inside); finding out only when the
    state is applied would be after the session took the checkpoint's weights.
    """
    try:
        torch.Generator().set_state(state)
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


def build_model(checkpoint: Checkpoint) -> MiniTransformerLM:
    """A new model holding the checkpoint's weights (on the tensors' device). The global RNG is untouched."""
    with torch.random.fork_rng(devices=[]):
        model = MiniTransformerLM(checkpoint.model_config)
    try:
        model.load_state_dict(checkpoint.model_state, strict=True)
    except RuntimeError as e:
        raise CheckpointError(f"{checkpoint.path}: the weights do not fit the model ({e}); this checkpoint cannot be used") from None
    if gated_by_one(checkpoint.meta, checkpoint.model_config):  # a save before a step keeps saying so (store)
        setattr(model, GATE_OF_ONE_STEP, checkpoint.trainer_state["step"])
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
            # a moment of another dtype than its parameter's: the fused update refuses it at the first step
            if isinstance(value, torch.Tensor) and value.dim() > 0 and value.dtype != param.dtype:
                raise CheckpointError(
                    f"{checkpoint.path}: optimizer state {key} of parameter {index} is {value.dtype}, the parameter "
                    f"{param.dtype}; this checkpoint cannot be used"
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
    if not valid_cpu_rng_state(checkpoint.torch_rng):
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
    if checkpoint.mps_rng is not None and mps_here():
        try:
            torch.mps.set_rng_state(checkpoint.mps_rng)
        except (RuntimeError, TypeError, ValueError) as e:
            raise CheckpointError(f"{checkpoint.path}: the Apple GPU's random number state does not fit this machine "
                                  f"({e}); this checkpoint cannot be used") from None
    torch.set_rng_state(checkpoint.torch_rng)  # checked above: cannot fail


def weights_from(checkpoint: Checkpoint) -> str | None:
    """Where the checkpoint's weights were trained, if not by its own run: its manifest's `weights_from` (`hf:PATH`),
    else, for a checkpoint at step 0 whose weights are not those its seed builds, `checkpoint NAME`.

    A Hugging Face model kept with a save sits at step 0 with trained weights. Since 7421795 the manifest says where
    they came from; a checkpoint of an older minitf does not, and loaded as "not trained yet, so its text is random".
    Its weights tell: an untrained model saved at step 0 holds exactly what its seed builds (the session builds a
    model so). Only a manifest of before `trained_window` is asked so. A model too large to build a second time for
    the comparison is taken as trained elsewhere: a lab model that large is not saved before its first step, a
    Hugging Face one is.
    """
    saved = checkpoint.meta.get("weights_from")
    # A manifest with trained_window (2a8bcea, after 7421795) was written by a minitf that records weights_from: its
    # word is the whole story, and a large model saved untrained is not taken for trained elsewhere.
    if saved is not None or checkpoint.trainer_state["step"] > 0 or "trained_window" in checkpoint.meta["trainer"]:
        return saved
    config = checkpoint.model_config
    if parameter_count(config) <= REFERENCE_ON_CPU_PARAMETERS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(checkpoint.trainer_state["train_config"]["seed"])
            initial = MiniTransformerLM(config).state_dict()
        if all(torch.equal(value, checkpoint.model_state[key].cpu()) for key, value in initial.items()):
            return None
    return f"checkpoint {checkpoint.name}"


def checkpoint_data(checkpoint: Checkpoint, load=None):
    """The dataset `checkpoint` was trained on, or a `VocabOnly` stand-in if it cannot be had.

    `load(spec)` loads data (default core.data.load_data). When it raises a UserError (the file is
    gone, unreadable, ...), or the data no longer has the saved vocabulary, or is now too short for
    the model's context, the result is `VocabOnly(name, checkpoint.vocab, spec, reason)`: restore()
    accepts it, generation works, and training raises DataError naming the missing data. A caller
    can tell the two apart with isinstance(data, VocabOnly) and show `data.reason` (None: not
    available) or its description.
    """
    from ..data import CORPORA, TASKS, TokenizerOnly, VocabOnly, load_data
    from ..hf import PREFIX

    spec = checkpoint.data_spec
    name = Path(spec).name or spec
    vocab = checkpoint.tokenizer if checkpoint.tokenizer is not None else checkpoint.vocab
    if spec.startswith(PREFIX):  # a Hugging Face folder's model saved on a task: it had its tokenizer only, no data
        return TokenizerOnly(vocab, spec)
    try:
        data = load(spec) if load is not None else load_data(spec, checkpoint.tokenizer)
        data.check_fits(checkpoint.model_config.max_seq_len)
    except UserError as e:
        if spec in CORPORA:  # tiny Shakespeare not downloaded (offline): the download's own way on, where "put the
            reason, _, fix = str(e).partition("; ")  # original file back" named a file there never was
            return VocabOnly(name, vocab, spec, reason, fix or None)
        if not _is_gone(spec, CORPORA + TASKS):
            return VocabOnly(name, vocab, spec, str(e).split(";")[0])
        if not _is_absolute(spec):
            # Before core.data.lasting_spec a checkpoint kept a file's path as typed: relative to the folder that
            # minitf ran in then, and read from this one now. "Put the file back" sent a person to restore a file
            # that was never moved.
            return VocabOnly(name, vocab, spec, f"an older minitf saved it as a path relative to the folder it ran "
                             f"in, and there is no {spec} in {os.getcwd()}",
                             "start minitf in the folder it trained in, or switch the data to that file by its full "
                             "path (the model is kept where its characters are the same)")
        return VocabOnly(name, vocab, spec)
    tokenizer = getattr(data, "tokenizer", None)
    if load is None and tokenizer is not None and (
            tokenizer.vocab != checkpoint.vocab and "\r" in checkpoint.vocab and "\r" not in tokenizer.vocab
            or checkpoint.tokenizer is not None and "trained_window" not in checkpoint.meta["trainer"]
            and learned_carriage_returns(checkpoint.tokenizer)):
        # trained on a file whose "\r\n" was read as two characters, before core.data read every line ending as
        # "\n": the same file, read as it was then. A character vocabulary says so by its "\r"; a BPE reads any
        # text, so it trained on the "\n" text without a word, unless its merges tell of the "\r" it learned from.
        # Only a manifest of before trained_window (2a8bcea, after b1bba63) is asked: a tokenizer of today may hold
        # such merges from elsewhere (GPT-2's has "\r\n") and was trained here on the "\n" text all the same.
        try:
            again = load_data(spec, checkpoint.tokenizer, line_endings=True)
            again.check_fits(checkpoint.model_config.max_seq_len)
            data, tokenizer = again, again.tokenizer
        except UserError:
            pass
    if tokenizer is not None and tokenizer.vocab != checkpoint.vocab:
        if spec.partition(":")[0] in CORPORA:
            # no file to put back: pydoc is this Python's documentation, and what an older minitf saved as a Hugging
            # Face model's data was the session's corpus, never its own. Each Python release ships another text:
            # 3.10's, 3.11's, 3.12's and 3.13's have different characters (one more or one fewer)
            elsewhere = weights_from(checkpoint)
            if elsewhere is not None:  # it never trained on the corpus named: say so, not "trained on pydoc"
                return VocabOnly(name, vocab, spec, f"an older minitf recorded the session's {spec} with this model, "
                                 f"whose weights came from elsewhere and never trained on {spec}, and its text has "
                                 "other characters than the model's", "choose data with the model's characters",
                                 trained_on=False)
            reason = f"{spec} is built in, and its text here has other characters than the model's"
            fix = "train a new model on it, or choose data with the model's characters"
            if spec == "pydoc":
                trained_under = checkpoint.meta.get("python_version")  # None: saved before the manifest kept it
                under = f"Python {trained_under}" if trained_under else "the Python the model was trained under"
                if trained_under == platform.python_version():  # "3.11.7 differs from that of Python 3.11.7" was said
                    # one version, two texts: a build that patches its documentation, or a vocabulary edited by hand
                    reason += (f", though this is the Python {trained_under} it was trained under (another build of "
                               "it, whose documentation differs, or a checkpoint edited since)")
                else:
                    reason += (f": the documentation of this Python, {platform.python_version()}, differs from that "
                               f"of {under}")
                    fix = f"train it under {f'Python {trained_under}' if trained_under else 'that Python'}, or " + fix
            return VocabOnly(name, vocab, spec, reason, fix)
        return VocabOnly(name, vocab, spec, "its vocabulary changed since the checkpoint was saved")
    return data


def data_found_elsewhere(checkpoint: Checkpoint, notice=None) -> tuple[Path, bool | None] | None:
    """Where the file a checkpoint's data names is not there: a file of its name in the current folder, in the folder
    of checkpoints that holds it, or in the folder above that, as (its absolute path, whether it holds the text the
    model trained on). A lesson handed out with its text beside it named the teacher's absolute path, which no
    student can put a file back at: "put the file back" was said of the file in front of them.

    True: the text's SHA-256 is the manifest's data_sha256; None: the manifest keeps no digest (an older minitf's), so
    whether it is the same text is the user's to say; False: each such file holds another text. None where the saved
    path names a file, or is no file's (built-in data, a Hugging Face folder), or no file of its name is there.

    Each candidate's text is read and hashed alone, with no corpus built (a tenth of load_data's time: a 190 MiB file
    of another text took 10 s more, for nothing); the one found is then read once, by checkpoint_data. `notice(text)`
    is told before a large file is read (data.reading_notice): the load was silent for those seconds. No size rules a
    candidate out before it is read: the manifest keeps no length of the text, and a file's bytes do not give the
    text's (its line endings read as "\n", a byte-order mark dropped, UTF-16)."""
    from ..data import CORPORA, TASKS, reading_notice, text_file_digest
    from ..hf import PREFIX

    spec = checkpoint.data_spec
    if spec.startswith(PREFIX) or not _is_gone(spec, CORPORA + TASKS) or not Path(spec).name:
        return None
    saved, seen, other = checkpoint.meta.get("data_sha256"), set(), None
    try:
        folders = [Path.cwd(), Path(checkpoint.path).absolute().parent, Path(checkpoint.path).absolute().parent.parent]
    except OSError:  # the current folder deleted under this process
        folders = [Path(checkpoint.path).absolute().parent, Path(checkpoint.path).absolute().parent.parent]
    for folder in folders:
        candidate = folder / Path(spec).name
        try:
            if not candidate.is_file() or candidate.resolve() in seen:  # is_file: never a FIFO, whose read would block
                continue
            seen.add(candidate.resolve())
        except (OSError, RuntimeError, ValueError):
            continue
        if saved is None:
            return candidate, None
        if notice is not None and (said := reading_notice(str(candidate))) is not None:
            notice(f"{checkpoint.name}'s data is not where it was saved; {said}")
        try:
            # the digest a corpus keeps (data.TextCorpus.digest): of the text as load_data reads it, from the file's
            # bytes (its text encoded again was one more copy of a file of 100 MiB)
            if text_file_digest(candidate) == saved:
                return candidate, True
        except UserError:  # not text, unreadable: not the file it trained on
            continue
        other = other or candidate
    return (other, False) if other is not None else None


def _is_absolute(spec: str) -> bool:
    """Whether the file path `spec` names the same file from any folder (~ included)."""
    try:
        return Path(spec).expanduser().is_absolute()
    except (OSError, RuntimeError, ValueError):  # RuntimeError: ~ with no home folder (core.paths.expand)
        return True


def _is_gone(spec: str, builtin: tuple) -> bool:
    """Whether `spec` names a local file that does not exist (rather than built-in data, or a file that does)."""
    if spec.partition(":")[0] in builtin:
        return False
    try:
        return not os.path.lexists(Path(spec).expanduser())
    except (OSError, RuntimeError, ValueError):  # RuntimeError: ~ with no home folder (core.paths.expand)
        return False


def load_model(name: str, directory=None, device="cpu", model=None):
    """(model, data) of the checkpoint NAME in `directory` (None: where the shell saves, $MINITF_CHECKPOINT_DIR or
    ./checkpoints), for a script or a notebook: the weights `:load NAME`
    loads, in eval mode, and the data it trained on (its tokenizer at `data.tokenizer`), or a `VocabOnly` stand-in
    that reads and writes text where that data is gone (checkpoint_data). A model trained in the shell is then
    one line away from Python (`model, data = load_model("autosave")`), which needed three of this module's names.

    `model`: a model you built yourself, of parts of your own classes (an attention with a gate added), into which
    the weights are loaded in place of a model built from the checkpoint's config: every stored tensor of it must be
    in the checkpoint, of the same shape and dtype, and nothing else (a config builds no part of a class of yours,
    so a checkpoint of such a model loads this way only). It is returned, moved to `device`, in eval mode."""
    from ..paths import default_checkpoint_dir

    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(f"load_model's model is the torch module to load the weights into, got "
                        f"{type(model).__name__}; build it first (the model with your own parts), then pass it")
    folder = default_checkpoint_dir() if directory is None else directory
    if isinstance(name, str):
        _check_python_name(name, directory)
        _check_folder_exists(Path(folder).expanduser(), name)
    own = getattr(model, "_orig_mod", model)  # torch.compile's wrapper: the module's own names (a save's)
    checkpoint = load_checkpoint(folder, name, model=own)
    if (found := data_found_elsewhere(checkpoint)) is not None and found[1]:  # the same text, beside it: its data
        checkpoint = dataclasses.replace(checkpoint, data_spec=str(found[0]))
    if gated_by_one(checkpoint.meta, checkpoint.model_config):  # the shell's :load says it; a script heard nothing
        import shlex
        import warnings

        where = "" if directory is None else f"--checkpoint-dir {shlex.quote(str(directory))} "
        warnings.warn(f"{name} was saved when a mixture of one expert a token gated by 1; it now gates by the chosen "
                      "expert's probability, so its outputs and losses differ from when it was saved: minitf "
                      f"{where}--load {name} train --steps 100 --save {name} adapts it", stacklevel=2)
    device = resolve_device(device) if isinstance(device, str) else torch.device(device)
    if own is None:
        return build_model(checkpoint).to(device).eval(), checkpoint_data(checkpoint)
    # every name, shape and dtype was checked against this very model (load_checkpoint), so nothing fails half-way
    own.load_state_dict(checkpoint.model_state, strict=True)
    return model.to(device).eval(), checkpoint_data(checkpoint)


def _check_python_name(name: str, directory) -> None:
    """load_model's refusal of a path or an hf: folder given as a checkpoint's name, in a script's words: the
    shell's ("not a valid checkpoint name; use up to 100 ASCII letters...") named neither directory= nor a way on."""
    if name.startswith("hf:"):
        raise _hugging_face_folder(name, name[3:])
    if "/" not in name and not (os.sep in name or (os.altsep and os.altsep in name)):
        return
    path = Path(name).expanduser()  # (Path drops a trailing slash: "run1/" is run1, not a folder "." holds)
    if _is_file(path / "config.json"):
        raise _hugging_face_folder(name, name)
    if path.name == MANIFEST:  # the checkpoint's own manifest named: its folder is the checkpoint
        path = path.parent
    parent = path.parent if directory is None else Path(directory) / path.parent
    raise CheckpointError(f"{name!r} is a path, and load_model takes a checkpoint's name and its folder apart: "
                          f"load_model({path.name!r}, directory={str(parent)!r})")


def _hugging_face_folder(name: str, path: str) -> CheckpointError:
    """A Hugging Face folder given to load_model: what reads one from Python (core.hf; the shell's :load hf:PATH)."""
    return CheckpointError(f"{name!r} is a Hugging Face folder, and load_model reads this lab's checkpoints by name; "
                           f"load the folder with: from minitf_repl.core.hf import load_folder; "
                           f"loaded = load_folder({path!r}) (loaded.model, loaded.tokenizer)")


def _check_folder_exists(folder: Path, name: str) -> None:
    """load_model's refusal of a checkpoint folder that does not exist, naming directory= (the shell's words say
    "give that folder as the checkpoint directory"): the default one, or a folder beside it spelled alike, holding the
    name is offered."""
    if os.path.lexists(folder):  # a link to a folder gone is load_checkpoint's to say
        return
    holder = held_elsewhere(folder, name)
    fix = (f"{holder} holds one: load_model({name!r}, directory={str(holder)!r})" if holder is not None else
           f"check the folder's name (load_model({name!r}, directory=FOLDER)), or save one under that name first")
    raise CheckpointError(f"no checkpoint named {name!r} in {folder} (that folder does not exist); {fix}")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # a name too long for the file system
        return False


def restore(checkpoint: Checkpoint, data, device="cpu"):
    """A new (model, trainer) pair on `device`, continuing exactly where the checkpoint stopped.

    `data`: the checkpoint's dataset, or `VocabOnly(name, checkpoint.vocab, checkpoint.data_spec)`
    when that is gone (see checkpoint_data). The caller's state is untouched: swap the pair in, then
    call `restore_rng(checkpoint)`. `device`: a torch.device or a name (auto, cpu, cuda, cuda:N, mps).
    """
    device = resolve_device(device) if isinstance(device, str) else torch.device(device)
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

