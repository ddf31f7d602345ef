"""The commands: small functions that act on a Session and return plain dataclasses.

Each command here is registered with `@command` (registry.py) when this module is imported; the
parsing of its options is in parsing.py. Commands never print: progress and generated text leave
through `Hooks`, results are returned, and render.py decides what to show.

Every command validates all of its arguments before it changes anything, so a failed command
leaves the session as it was. Errors a user can cause are `UserError`s with a one-sentence message.

No torch at module level (see session.py): the core modules that need it are imported inside the
commands that use them.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core.config import ACTIVATIONS, ATTENTION_IMPLS, POS_ENCODINGS, ModelConfig, TrainConfig
from .core.errors import DeviceError, TrainingDiverged, UserError
from .parsing import (
    CLEAR,
    KEY_ALIASES,
    LIMITS,
    MAX_PARAMS,
    MAX_TRAIN_BYTES,
    _show,
    check_footprint,
    check_gen_settings,
    check_value,
    convert,
    parse_line,
    usage,
)
from .registry import REGISTRY, Command, Hooks, Param, _clip, command, find_command, run_command
from .session import AUTOSAVE_NAME, Session

# The names other modules import from here: the registry and the parsing are re-exported, so
# `from minitf_repl.commands import REGISTRY, parse_line, run_command` keeps working.
__all__ = [
    # registry.py
    "REGISTRY", "Command", "Hooks", "Param", "command", "find_command", "run_command",
    # parsing.py
    "CLEAR", "KEY_ALIASES", "LIMITS", "MAX_PARAMS", "MAX_TRAIN_BYTES", "check_footprint", "check_gen_settings",
    "check_value", "convert", "parse_line", "usage",
    # this module
    "HelpEntry", "HelpResult", "QuitResult", "TrainResult", "GenResult", "ShapesResult", "DeviceResult",
    "ConfigResult", "SetResult", "DataResult", "ParamsResult", "SaveResult", "LoadResult", "LsResult",
    "GEN_KEYS", "SESSION_KEYS", "DEFAULT_SAVE_NAME", "sample_prompt", "save_session", "to_json",
]  # fmt: skip

# --- results -----------------------------------------------------------------------------------


@dataclass
class HelpEntry:
    name: str
    aliases: tuple
    summary: str
    usage: str  # e.g. ":train [steps=N] [lr=X] ..."


@dataclass
class HelpResult:
    entries: list[HelpEntry]
    detail: HelpEntry | None = None  # set by `:help COMMAND`
    params: list[Param] = field(default_factory=list)  # the detail's options


@dataclass
class QuitResult:
    pass


@dataclass
class TrainResult:
    steps: int  # steps done by this command
    total_steps: int  # optimizer steps done in total
    run_remaining: int  # > 0 after a stop: `:train` continues the run
    stopped: bool
    resumed: bool  # this command continued an unfinished run
    train_loss: float | None
    val_loss: float | None
    accuracy: float | None  # exact-match accuracy on held-out examples (tasks only)
    tokens_per_second: float
    seconds: float
    evals: list[dict]  # history rows (core.train.StepInfo as dicts) with a val_loss, from this command
    data: str
    saved: str | None = None  # the checkpoint written at the end (save=NAME, or autosave), if any
    save_error: str | None = None  # why that save failed; the training itself is kept


@dataclass
class GenResult:
    prompt: str  # the prompt used (the default start character if none was given)
    text: str  # the generated continuation, without the prompt
    n_tokens: int
    seconds: float
    tokens_per_second: float
    cache: bool
    stopped: bool


@dataclass
class ShapesResult:
    prompt: str  # the text traced (after truncation to max_seq_len)
    records: list  # core.trace.TraceRecord, in execution order
    n_layers: int
    layer: int | None  # the block shown in full; None when show_all
    show_all: bool


@dataclass
class DeviceResult:
    devices: list  # core.device.DeviceInfo
    current: str
    switched: bool


@dataclass
class ConfigResult:
    model: dict
    train: dict
    gen: dict
    data: str
    device: str
    checkpoints: dict = field(default_factory=dict)  # {"dir": ..., "autosave": bool}


@dataclass
class SetResult:
    changed: dict  # key -> (old, new), only the values that changed
    rebuilt: bool  # the model was rebuilt: weights reset


@dataclass
class DataResult:
    info: Any  # core.data.DataInfo
    changed: bool
    rebuilt: bool


@dataclass
class ParamsResult:
    rows: list  # (parameter path, shape, count); the tied embedding/head matrix once
    total: int


@dataclass
class SaveResult:
    name: str
    path: str  # the checkpoint's directory
    step: int
    size_bytes: int  # the manifest and both data files
    seconds: float
    replaced: bool  # a checkpoint of that name existed and was replaced


@dataclass
class LoadResult:
    name: str
    path: str
    step: int
    data_spec: str
    val_loss: float | None  # the last evaluated validation loss, None if never evaluated
    model_config: dict
    run_remaining: int  # > 0: the run was stopped and `:train` continues it
    n_params: int
    saved_at: str | None  # ISO 8601, UTC


@dataclass
class LsResult:
    rows: list  # core.checkpoint.CheckpointInfo, newest first; a broken one has `error` set
    directory: str


def _entry(cmd: Command) -> HelpEntry:
    return HelpEntry(cmd.name, cmd.aliases, cmd.summary, usage(cmd))


# --- the commands --------------------------------------------------------------------------------


@command("help", "List the commands, or show one command's options.", params=[
    Param("command", str, help="a command name, e.g. train", positional=True),
])  # fmt: skip
def cmd_help(session: Session, args: dict, hooks: Hooks) -> HelpResult:
    entries = [_entry(cmd) for cmd in REGISTRY.values()]
    name = args["command"]
    if name is None or not name.strip():
        return HelpResult(entries)
    cmd = find_command(name.split()[0])
    return HelpResult(entries, detail=_entry(cmd), params=list(cmd.params))


@command("quit", "Leave minitf.", aliases=("q", "exit"))
def cmd_quit(session: Session, args: dict, hooks: Hooks) -> QuitResult:
    return QuitResult()


@command("train", "Train the model: continue a stopped run, or start a new run of steps.", params=[
    Param("steps", int, help="length of a new run (default: continue a stopped run, else the steps setting)"),
    Param("lr", float, help="peak learning rate (kept, like :set lr)"),
    Param("batch", int, help="sequences per step (kept, like :set batch_size)"),
    Param("data", str, help="switch data first, as :data does"),
    Param("eval_every", int, help="steps between validation evaluations (kept)"),
    Param("seed", int, help="seed of the batch order (kept)"),
    Param("save", str, help=f"save the checkpoint NAME at the end (default: {AUTOSAVE_NAME}, unless autosave is off)"),
])  # fmt: skip
def cmd_train(session: Session, args: dict, hooks: Hooks) -> TrainResult:
    steps = args["steps"]
    if steps is not None and steps <= 0:
        raise UserError(f"steps must be a positive whole number, got {steps}")
    save_as = args["save"].strip() if args["save"] is not None else None
    if save_as is not None:
        from .core.checkpoint import check_save_target

        check_save_target(session.checkpoint_dir, save_as)  # a bad name fails now, not after an hour of training
    changes = {field: args[key] for key, field in _TRAIN_OPTIONS.items() if args[key] is not None}
    train_config = session.train_config.replace(**changes) if changes else session.train_config
    spec = args["data"].strip() if args["data"] is not None else None
    new_data = _load_checked(session, spec) if spec is not None else None
    if new_data is None:
        session.data.check_block_size(session.model_config.max_seq_len)
    model_config = session.model_config
    if new_data is not None:
        model_config = model_config.replace(vocab_size=new_data.tokenizer.vocab_size)
    check_footprint(model_config, train_config)
    session.device  # resolve now: an unusable device fails before anything changes

    if new_data is not None:
        _switch_data(session, spec, new_data, hooks)
    # A diverged run is a failed command, and a failed command loses nothing: the weights of the
    # last finite step (what the core keeps) are usually ruined already at such a learning rate, so
    # the session goes back to where this :train began, settings included.
    snapshot = session.trainer.snapshot()
    session.set_train_config(train_config)
    trainer = session.trainer
    resumed = steps is None and new_data is None and trainer.run_remaining > 0
    if not resumed:
        trainer.start_run(steps)
    hooks.on_train_start(trainer.run_steps, trainer.step - trainer.run_start, resumed)
    try:
        summary = trainer.run(on_step=hooks.on_step, should_stop=hooks.should_stop)
    except TrainingDiverged as e:
        trainer.rollback(snapshot)
        session.train_config = trainer.config
        lr = train_config.lr
        raise TrainingDiverged(
            f"the {e.what} became {e.value} at step {e.step}; the model, optimizer, run and settings are "
            f"back at step {trainer.step}, where this :train began. Lower the learning rate "
            f"({lr:g} diverged; try :train lr={lr / 10:g})",
            step=e.step, what=e.what, value=e.value,
        ) from None
    done = trainer.history[-summary.steps :] if summary.steps else []
    # Saved when the run ends or is stopped; a diverged run raised above and leaves the last save alone.
    saved, save_error = None, None
    name = save_as if save_as is not None else (AUTOSAVE_NAME if session.autosave else None)
    if name is not None:
        try:
            saved = save_session(session, name).name
        except UserError as e:
            save_error = str(e)
    return TrainResult(
        steps=summary.steps,
        total_steps=summary.total_steps,
        run_remaining=summary.run_remaining,
        stopped=summary.stopped,
        resumed=resumed,
        train_loss=summary.train_loss,
        val_loss=summary.val_loss,
        accuracy=summary.accuracy,
        tokens_per_second=summary.tokens_per_second,
        seconds=summary.seconds,
        evals=[dict(row) for row in done if row["val_loss"] is not None],
        data=session.data_spec,
        saved=saved,
        save_error=save_error,
    )


_TRAIN_OPTIONS = {"lr": "lr", "batch": "batch_size", "eval_every": "eval_every", "seed": "seed"}


@command("gen", "Generate text from a prompt (a line without ':' is a prompt too).", params=[
    Param("prompt", str, help="text to continue (default: a newline, or the first character of the vocabulary)",
          positional=True),
    Param("n", int, help="tokens to generate (default: the n setting)"),
    Param("temperature", float, help="0 is greedy; higher is more random (default: the temperature setting)"),
    Param("top_k", int, help="sample from the k most likely tokens only"),
    Param("top_p", float, help="sample from the smallest set of tokens whose probability reaches p"),
    Param("seed", int, help="seed for the sampling (default: random)"),
    Param("cache", bool, help="use the KV cache (on) or recompute the prefix every token (off)"),
])  # fmt: skip
def cmd_gen(session: Session, args: dict, hooks: Hooks) -> GenResult:
    given = {k: args[k] for k in ("n", "temperature", "top_k", "top_p", "seed", "cache") if args[k] is not None}
    settings = dataclasses.replace(session.gen, **given)
    check_gen_settings(settings)
    tokenizer = session.data.tokenizer
    prompt = args["prompt"] or ""
    if not prompt:
        prompt = "\n" if "\n" in tokenizer.stoi else tokenizer.itos[0]
    ids = tokenizer.encode(prompt)
    model = session.model

    from .core.generate import generate

    stream = generate(
        model, ids, settings.n, settings.temperature, settings.top_k, settings.top_p, settings.seed, settings.cache
    )
    pieces: list[str] = []
    stopped = False
    start = time.perf_counter()
    try:
        for token in stream:
            piece = tokenizer.decode([token])
            pieces.append(piece)
            hooks.on_token(piece)
            if hooks.should_stop() and len(pieces) < settings.n:
                stopped = True
                break
    finally:
        stream.close()
    seconds = time.perf_counter() - start
    return GenResult(
        prompt=prompt,
        text="".join(pieces),
        n_tokens=len(pieces),
        seconds=seconds,
        tokens_per_second=len(pieces) / seconds if seconds > 0 else 0.0,
        cache=settings.cache,
        stopped=stopped,
    )


@command("shapes", "Trace one forward pass: every step's shape, in the order it runs.", params=[
    Param("prompt", str, help="text to trace (default: a short sample of the data)", positional=True),
    Param("layer", int, help="the block to show in full (default 0)"),
    Param("all", bool, default=False, help="show every block in full"),
])  # fmt: skip
def cmd_shapes(session: Session, args: dict, hooks: Hooks) -> ShapesResult:
    n_layers = session.model_config.n_layers
    layer = args["layer"] if args["layer"] is not None else 0
    if not 0 <= layer < n_layers:
        blocks = f"{n_layers} block{'s' if n_layers != 1 else ''}"
        raise UserError(f"layer must be in 0..{n_layers - 1} (the model has {blocks}), got {_clip(str(layer))}")
    data = session.data
    prompt = args["prompt"] or sample_prompt(data)
    ids = data.tokenizer.encode(prompt)
    window = session.model_config.max_seq_len
    if len(ids) > window:
        ids = ids[-window:]
        prompt = data.tokenizer.decode(ids)
        hooks.notice(f"the prompt is longer than max_seq_len={window}; tracing its last {window} characters")
    model = session.model

    import torch

    from .core.trace import trace

    records = trace(model, torch.tensor(ids, dtype=torch.long))
    show_all = bool(args["all"])
    return ShapesResult(prompt, records, n_layers, None if show_all else layer, show_all)


def sample_prompt(data) -> str:
    """A short, typical input: 16 characters of validation text, or one held-out task question."""
    splits = getattr(data, "splits", None)
    if splits is not None:
        return data.tokenizer.decode(splits["val"][:16].tolist())
    if hasattr(data, "sample_questions"):
        import torch

        return data.sample_questions("val", 1, torch.Generator().manual_seed(0))[0]
    return data.tokenizer.vocab[:16]


@command("device", "Show the devices, or move the model to one (cpu, cuda, cuda:N, mps).", params=[
    Param("name", str, help="auto, cpu, cuda, cuda:N or mps", positional=True),
])  # fmt: skip
def cmd_device(session: Session, args: dict, hooks: Hooks) -> DeviceResult:
    from .core.device import ACCEPTED_FORMS, describe_devices, resolve_device

    try:
        current = session.device
    except DeviceError:
        current = None  # e.g. --device cuda on a machine without one: listing still works
    name = args["name"]
    if name is None or not name.strip():
        return DeviceResult(describe_devices(), str(current) if current is not None else session.device_name, False)
    if len(name.strip()) > 16:  # no device name is this long; keep the message one line
        raise DeviceError(f"unknown device {_show(name)}; use one of {ACCEPTED_FORMS}")
    target = resolve_device(name)
    try:
        session.move_to(target)
    except RuntimeError as e:
        if current is not None and session.has_model:
            session.move_to(current)  # never leave the model half moved
        raise DeviceError(f"could not move the model to {target}: {_clip(str(e), 120)}; stay on {current}") from None
    return DeviceResult(describe_devices(), str(target), current != target)


@command("config", "Show the model, training and generation settings.")
def cmd_config(session: Session, args: dict, hooks: Hooks) -> ConfigResult:
    model = session.model_config.to_dict()
    if session._data is None:
        model["vocab_size"] = None  # set by the data, which is loaded on first use (it needs torch)
    return ConfigResult(
        model=model,
        train=session.train_config.to_dict(),
        gen=session.gen.to_dict(),
        data=session.data_spec,
        device=session.status().device,
        checkpoints={"dir": str(session.checkpoint_dir), "autosave": session.autosave},
    )


_MODEL_HELP = {
    "max_seq_len": "context window T: the longest input",
    "d_model": "width of the residual stream",
    "n_heads": "attention heads (must divide d_model)",
    "n_layers": "Transformer blocks",
    "d_ff": "hidden width of the feed-forward network",
    "dropout": "dropout probability in [0, 1)",
    "activation": "feed-forward activation",
    "pos_encoding": "learned or sinusoidal positions",
    "attention": "explicit formula or the fused sdpa kernel (same weights)",
}
_TRAIN_HELP = {
    "steps": "length of a run",
    "batch_size": "sequences per step",
    "lr": "peak learning rate",
    "min_lr_ratio": "the cosine decays to lr * min_lr_ratio",
    "warmup_steps": "steps of linear warm-up",
    "weight_decay": "AdamW weight decay on matrices",
    "grad_clip": "max gradient norm (0: off)",
    "eval_every": "steps between evaluations",
    "eval_batches": "validation batches per evaluation",
    "seed": "seed of the initial weights and batch order",
}
_CHOICES = {"activation": ACTIVATIONS, "pos_encoding": POS_ENCODINGS, "attention": ATTENTION_IMPLS}
# `:set` key -> GenSettings field. The training seed is `seed`, so the sampling seed is `gen_seed`.
GEN_KEYS = {"n": "n", "temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "gen_seed": "seed", "cache": "cache"}
SESSION_KEYS = ("autosave",)  # `:set` keys that are attributes of the Session itself


def _set_params() -> list[Param]:
    params = []
    for f in dataclasses.fields(ModelConfig):
        if f.name != "vocab_size":
            params.append(Param(f.name, type(f.default), help=f"model: {_MODEL_HELP.get(f.name, f.name)}",
                                choices=_CHOICES.get(f.name)))  # fmt: skip
    for f in dataclasses.fields(TrainConfig):
        params.append(Param(f.name, type(f.default), help=f"training: {_TRAIN_HELP.get(f.name, f.name)}"))
    params += [
        Param("n", int, help="gen: tokens to generate"),
        Param("temperature", float, help="gen: sampling temperature (0: greedy)"),
        Param("top_k", int, help="gen: keep the k most likely tokens (none: off)", nullable=True),
        Param("top_p", float, help="gen: nucleus probability mass (none: off)", nullable=True),
        Param("gen_seed", int, help="gen: sampling seed (none: random)", nullable=True),
        Param("cache", bool, help="gen: use the KV cache"),
        Param("autosave", bool, help=f"checkpoints: save {AUTOSAVE_NAME!r} at the end of every :train"),
    ]
    return params


@command("set", "Change settings: model architecture (resets weights), training or generation.",
         params=_set_params())  # fmt: skip
def cmd_set(session: Session, args: dict, hooks: Hooks) -> SetResult:
    given = {k: v for k, v in args.items() if v is not None}
    if not given:
        keys = ", ".join(p.name for p in REGISTRY["set"].params)
        raise UserError(f"nothing to set; give key=value pairs, e.g. :set lr=1e-3 n_layers=2 (keys: {keys})")
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    model_changes, train_changes, gen_changes = {}, {}, {}
    for key, value in given.items():
        value = None if value is CLEAR else value
        if key in SESSION_KEYS:
            continue
        if key in GEN_KEYS:
            gen_changes[GEN_KEYS[key]] = value
        elif key in model_fields:
            model_changes[key] = value
        elif key in train_fields:
            train_changes[key] = value
    old_model, old_train, old_gen = session.model_config, session.train_config, session.gen
    new_model = old_model.replace(**model_changes) if model_changes else old_model
    new_train = old_train.replace(**train_changes) if train_changes else old_train
    new_gen = dataclasses.replace(old_gen, **gen_changes)
    check_gen_settings(new_gen)
    if new_model.max_seq_len != old_model.max_seq_len:
        session.data.check_block_size(new_model.max_seq_len)
    check_footprint(new_model, new_train)

    changed = {}
    for key in given:
        if key in SESSION_KEYS:
            old, new = getattr(session, key), given[key]
        elif key in GEN_KEYS:
            old, new = getattr(old_gen, GEN_KEYS[key]), getattr(new_gen, GEN_KEYS[key])
        elif key in model_fields:
            old, new = getattr(old_model, key), getattr(new_model, key)
        else:
            old, new = getattr(old_train, key), getattr(new_train, key)
        if old != new:
            changed[key] = (old, new)
    rebuilt = session.set_model_config(new_model)
    session.set_train_config(new_train)
    session.gen = new_gen
    for key in SESSION_KEYS:
        if key in given:
            setattr(session, key, given[key])
    if rebuilt:
        hooks.notice("the architecture changed: the model was rebuilt, weights reset (step 0)")
    return SetResult(changed, rebuilt)


@command("data", "Show the data, or switch: pydoc, shakespeare, sort[:N], reverse[:N], add[:N], random[:V], a file.",
         params=[Param("name", str, help="pydoc|shakespeare|sort[:N]|reverse[:N]|add[:N]|random[:V]|a file path",
                       positional=True)])  # fmt: skip
def cmd_data(session: Session, args: dict, hooks: Hooks) -> DataResult:
    name = args["name"]
    if name is None or not name.strip():
        return DataResult(session.data.info(), changed=False, rebuilt=False)
    spec = name.strip()
    data = _load_checked(session, spec)
    rebuilt = _switch_data(session, spec, data, hooks)
    return DataResult(data.info(), changed=True, rebuilt=rebuilt)


def _load_checked(session: Session, spec: str):
    """Load a dataset and check it fits the model's context, without touching the session."""
    from .core.data import load_data

    data = load_data(spec)
    data.check_block_size(session.model_config.max_seq_len)
    return data


def _switch_data(session: Session, spec: str, data, hooks: Hooks) -> bool:
    rebuilt = session.use_data(spec, data)
    if rebuilt:
        hooks.notice(
            f"{data.name} has another vocabulary ({data.tokenizer.vocab_size} characters): "
            "the model was rebuilt, weights reset (step 0)"
        )
    return rebuilt


@command("params", "List the parameter tensors, their shapes and the total.")
def cmd_params(session: Session, args: dict, hooks: Hooks) -> ParamsResult:
    model = session.model
    rows = [(name, tuple(p.shape), p.numel()) for name, p in model.named_parameters()]
    return ParamsResult(rows, model.num_parameters())


# --- checkpoints -----------------------------------------------------------------------------------

DEFAULT_SAVE_NAME = "last"


@command("save", "Save the model, optimizer, training run and random state as a checkpoint.", params=[
    Param("name", str, help="checkpoint name: letters, digits, '.', '_', '-' (default last)", positional=True),
], interruptible=True)  # fmt: skip
def cmd_save(session: Session, args: dict, hooks: Hooks) -> SaveResult:
    name = (args["name"] or "").strip() or DEFAULT_SAVE_NAME
    from .core.checkpoint import check_save_target

    check_save_target(session.checkpoint_dir, name)
    if not session.has_model:
        raise UserError("there is no model to save yet; :train one first, then :save")
    return save_session(session, name)


def save_session(session: Session, name: str) -> SaveResult:
    """Write the session's model, trainer and data as checkpoint `name` (atomic: see core.checkpoint).

    Ctrl-C reaches a save as KeyboardInterrupt (the command is interruptible); the engine removes what
    it wrote and re-raises, and this turns it into one line that says what is on disk now.
    """
    from .core.checkpoint import MANIFEST, checkpoint_info, save_checkpoint

    manifest = session.checkpoint_dir / name / MANIFEST
    before = _read_bytes(manifest)
    start = time.perf_counter()
    try:
        path = save_checkpoint(
            session.checkpoint_dir, name, session.model, session.trainer, session.data.tokenizer.vocab,
            session.data_spec,
        )
    except KeyboardInterrupt:
        now = _read_bytes(manifest)
        if now is None or now == before:  # the commit did not happen
            if before is None:
                raise UserError(f"save interrupted; no checkpoint {name} was written") from None
            raise UserError(f"save interrupted; the previous checkpoint {name} is unchanged") from None
        path = manifest.parent  # the interrupt came after the commit: the new checkpoint is complete
    return SaveResult(
        name=name, path=str(path), step=session.trainer.step, size_bytes=checkpoint_info(Path(path)).size_bytes,
        seconds=time.perf_counter() - start, replaced=before is not None,
    )


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


@command("load", "Load a checkpoint: weights, optimizer, training run, data and random state.", params=[
    Param("name", str, help="the checkpoint's name (:ls lists them)", positional=True),
])  # fmt: skip
def cmd_load(session: Session, args: dict, hooks: Hooks) -> LoadResult:
    from .core import checkpoint as ckpt

    name = (args["name"] or "").strip()
    if not name:
        names = [row.name for row in ckpt.list_checkpoints(session.checkpoint_dir) if row.error is None]
        if not names:
            raise UserError(f"there are no checkpoints in {session.checkpoint_dir} yet; :save NAME writes one")
        raise UserError(f"which checkpoint? give its name, e.g. :load {names[0]} (saved: {_clip(', '.join(names), 120)})")
    # Everything is read, checked and rebuilt into new objects first; the session changes only at the end.
    checkpoint = ckpt.load_checkpoint(session.checkpoint_dir, name)
    data = _checkpoint_data(session, checkpoint)
    device = session.device
    model, trainer = ckpt.restore(checkpoint, data, device)
    if hooks.should_stop():  # Ctrl-C while reading: the session is still as it was
        raise UserError(f"load of {name} interrupted; nothing changed")
    session.adopt(checkpoint.data_spec, data, model, trainer)
    ckpt.restore_rng(checkpoint)
    evaluated = [h["val_loss"] for h in trainer.history if h.get("val_loss") is not None]
    return LoadResult(
        name=name, path=str(checkpoint.path), step=trainer.step, data_spec=checkpoint.data_spec,
        val_loss=evaluated[-1] if evaluated else None, model_config=checkpoint.model_config.to_dict(),
        run_remaining=trainer.run_remaining, n_params=model.num_parameters(),
        saved_at=checkpoint.meta.get("saved_at") if isinstance(checkpoint.meta.get("saved_at"), str) else None,
    )


def _checkpoint_data(session: Session, checkpoint):
    """The dataset the checkpoint was trained on: the session's own if it is the same, else loaded."""
    from .core.data import load_data
    from .core.errors import CheckpointError

    spec = checkpoint.data_spec
    if session._data is not None and session.data_spec == spec:
        return session._data  # restore() still checks that the vocabulary is the saved one
    try:
        data = load_data(spec)
        data.check_block_size(checkpoint.model_config.max_seq_len)
    except UserError as e:
        reason = str(e).split(";")[0]
        raise CheckpointError(
            f"checkpoint {checkpoint.name} was trained on {_clip(spec, 80)!r}, which cannot be loaded now "
            f"({_clip(reason, 120)}); put that data back to load it"
        ) from None
    return data


@command("ls", "List the saved checkpoints: step, val loss, data, size and date.", aliases=("checkpoints",))
def cmd_ls(session: Session, args: dict, hooks: Hooks) -> LsResult:
    from .core.checkpoint import list_checkpoints

    return LsResult(rows=list_checkpoints(session.checkpoint_dir), directory=str(session.checkpoint_dir))


# --- JSON for the shell's --json -------------------------------------------------------------------


def to_json(result) -> dict:
    """The result as a JSON-able dict (tuples become lists, non-finite floats null, types their name)."""
    if not dataclasses.is_dataclass(result):
        raise TypeError(f"to_json takes a command result, got {type(result).__name__}")
    return _jsonable(dataclasses.asdict(result))


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is CLEAR:
        return None
    if isinstance(value, type):
        return value.__name__
    if dataclasses.is_dataclass(value):
        return _jsonable(dataclasses.asdict(value))
    return str(value)
