"""The commands: small functions that act on a Session and return plain dataclasses.

Each command is registered here with `@command` into `REGISTRY`, with everything the front ends
need to know about it declared on the registration (registry.py): its options, what completes them,
whether it needs torch, whether it is REPL-only. Commands never print: progress and generated text
leave through a `Reporter`, results are returned, and render.py decides what to show. A new command
is a result dataclass and a function here, and a renderer in render.py; nothing else changes.

Every command validates all of its arguments before it changes anything, so a failed command
leaves the session as it was. Errors a user can cause are `UserError`s with a one-sentence message.

No torch at module level (see session.py): the core modules that need it are imported inside the
commands that use them.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .core.config import GenConfig, ModelConfig, TrainConfig
from .core.errors import DeviceError, TrainingDiverged, UserError, is_out_of_memory
from .core.sizes import check_trainable
from .parsing import CLEAR
from .registry import Command, Param, Registry, clip, param_from_setting
from .reporter import Reporter
from .session import AUTOSAVE_NAME, Session, ShellConfig

REGISTRY = Registry()
command = REGISTRY.command

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
    # The learning-rate schedule of the run: "new" (warm-up, then cosine from the peak lr) or
    # "continue" (a trained model goes on at the last run's final rate, constant_lr, so it is not shaken).
    schedule: str = "new"
    constant_lr: float | None = None
    dtype: str = "float32"  # the training forward's precision (the dtype setting)
    compiled: bool = False  # the steps ran through torch.compile (compile=on, and it worked here)
    compile_seconds: float | None = None  # the first compiled step, compilation included; not in tokens/s

    @property
    def failure(self) -> str | None:
        """What the user asked for and did not get, though the command ran (a one-shot shell exits 1)."""
        return f"not saved: {self.save_error}" if self.save_error else None


@dataclass
class GenResult:
    prompt: str  # the prompt used (the default start character if none was given)
    text: str  # the generated continuation, without the prompt
    n_tokens: int
    seconds: float
    tokens_per_second: float
    cache: bool
    stopped: bool
    default_prompt: bool = False  # no prompt was given: `prompt` is the start character chosen for it
    untrained: bool = False  # the model has not trained a step: its text is random


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
    problem: str | None = None  # the device asked for (e.g. --device cuda) cannot be used here

    @property
    def failure(self) -> str | None:
        return self.problem


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
    kept: str | None = None  # the checkpoint the trained model was saved as before the rebuild
    preset: str | None = None  # the preset the model settings now match, if any


@dataclass
class DataResult:
    info: Any  # core.data.DataInfo
    changed: bool
    rebuilt: bool
    kept: str | None = None  # the checkpoint the trained model was saved as before the rebuild


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
    data_missing: str | None = None  # the training data could not be had: only its vocabulary was restored


@dataclass
class LsResult:
    rows: list  # core.checkpoint.CheckpointInfo, newest first; a broken one has `error` set
    directory: str


def _entry(cmd: Command) -> HelpEntry:
    return HelpEntry(cmd.name, cmd.aliases, cmd.summary, cmd.usage())


# --- what completes an option's value (declared on the Param, called by the REPL's completer) -------
# The data names without importing core.data (it needs torch); a test ties them to the core's.
DATA_NAMES = ("pydoc", "shakespeare", "sort", "reverse", "add", "random")
DEVICE_NAMES = ("auto", "cpu", "cuda", "mps")


def complete_data(session) -> list[str]:
    return list(DATA_NAMES)


def complete_device(session) -> list[str]:
    return list(DEVICE_NAMES)


def complete_command(session) -> list[str]:
    return sorted(REGISTRY)


def complete_checkpoint(session) -> list[str]:
    try:
        folder = Path(session.checkpoint_dir)
        return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except (OSError, AttributeError, TypeError):
        return []


# --- the commands --------------------------------------------------------------------------------


@command("help", "List the commands, or show one command's options.", params=[
    Param("command", str, help="a command name, e.g. train", positional=True, complete=complete_command),
], needs_torch=False, repl_only=True, bare_words=("help",))  # fmt: skip  (the shell has --help)
def cmd_help(session: Session, args: dict, reporter: Reporter) -> HelpResult:
    entries = [_entry(cmd) for cmd in REGISTRY.values()]
    name = args["command"]
    if name is None or not name.strip():
        return HelpResult(entries)
    cmd = REGISTRY.find(name.split()[0])
    return HelpResult(entries, detail=_entry(cmd), params=[p for p in cmd.params if p.refusal is None])


@command("quit", "Leave minitf.", aliases=("q", "exit"), needs_torch=False, repl_only=True,
         bare_words=("exit", "quit", "exit()", "quit()"))
def cmd_quit(session: Session, args: dict, reporter: Reporter) -> QuitResult:
    return QuitResult()


SCHEDULES = ("new", "continue")


@command("train", "Train the model: continue a stopped run, or start a new run of steps.", params=[
    Param("steps", int, help="length of a new run (default: continue a stopped run, else the steps setting)",
          low=1, limit=TrainConfig.spec("steps").limit),
    param_from_setting(TrainConfig.spec("lr"), help="peak learning rate (kept, like :set lr)"),
    param_from_setting(TrainConfig.spec("batch_size"), help="sequences per step (kept, like :set batch_size)"),
    Param("data", str, help="switch data first, as :data does", complete=complete_data),
    param_from_setting(TrainConfig.spec("eval_every"), help="steps between validation evaluations (kept)"),
    param_from_setting(TrainConfig.spec("seed"), help="seed of the batch order (kept)"),
    Param("save", str, help=f"save the checkpoint NAME at the end (default: {AUTOSAVE_NAME}, unless autosave is off)",
          complete=complete_checkpoint),
    Param("schedule", str, choices=SCHEDULES,
          help="new: warm-up, then cosine from the peak lr; continue: the last run's final rate, constant "
               "(default: continue for a trained model, unless lr= is given; new otherwise)"),
])  # fmt: skip
def cmd_train(session: Session, args: dict, reporter: Reporter) -> TrainResult:
    """Train: resume a stopped run, or start a run of `steps`.

    A model that has trained already goes on at the rate its last run ended with, constant: a new
    warm-up to the peak rate would first undo much of what the cosine decay settled (a loaded sort
    model went from val 0.60 to 1.39 that way). `schedule=new`, or an explicit `lr=`, starts a fresh
    warm-up + cosine run instead.
    """
    steps = args["steps"]
    save_as = args["save"].strip() if args["save"] is not None else None
    if save_as is not None:
        from .core.checkpoint import check_save_target

        check_save_target(session.checkpoint_dir, save_as)  # a bad name fails now, not after an hour of training
    changes = {key: args[key] for key in _TRAIN_OPTIONS if args[key] is not None}
    train_config = session.train_config.replace(**changes) if changes else session.train_config
    spec = args["data"].strip() if args["data"] is not None else None
    new_data = _load_checked(session, spec) if spec is not None else None
    if new_data is None:
        session.data.check_fits(session.model_config.max_seq_len)
    model_config = session.model_config
    if new_data is not None:
        model_config = model_config.replace(vocab_size=new_data.tokenizer.vocab_size)
    check_trainable(model_config, train_config.batch_size)
    session.device  # resolve now: an unusable device fails before anything changes
    if args["schedule"] == "continue" and (new_data is not None or session.trainer.final_lr() is None):
        raise UserError("schedule=continue needs a model that has trained; this one has not (use schedule=new)")
    autosave = save_as is None and session.autosave
    if autosave:
        from .core.checkpoint import check_save_target

        check_save_target(session.checkpoint_dir, AUTOSAVE_NAME)  # e.g. a read-only folder: say so before training

    if new_data is not None:
        rebuilt, kept = _switch_data(session, spec, new_data)
        if rebuilt:
            reporter.notice(_rebuilt_line(new_data.tokenizer.vocab_size, kept))
    # A diverged run is a failed command, and a failed command loses nothing: the weights of the
    # last finite step (what the core keeps) are usually ruined already at such a learning rate, so
    # the session goes back to where this :train began, settings included.
    snapshot = session.snapshot()
    session.set_train_config(train_config)
    trainer = session.trainer
    resumed = steps is None and new_data is None and args["schedule"] is None and trainer.run_remaining > 0
    schedule, constant_lr = "new", None
    if resumed:
        schedule, constant_lr = ("continue", trainer.run_constant_lr) if trainer.run_constant_lr else ("new", None)
    else:
        wanted = args["schedule"] or ("continue" if trainer.final_lr() is not None and args["lr"] is None else "new")
        if wanted == "continue":
            schedule, constant_lr = "continue", trainer.final_lr()
        trainer.start_run(steps, constant_lr=constant_lr)
        if schedule == "continue":
            reporter.notice(f"continuing at the last run's final rate {constant_lr:.2e}, constant "
                            "(schedule=new starts a fresh warm-up + cosine)")
    reporter.on_train_start(trainer.run_steps, trainer.step - trainer.run_start, resumed)
    try:
        summary = trainer.run(on_step=reporter.on_step, should_stop=reporter.should_stop, on_notice=reporter.notice)
    except TrainingDiverged as e:
        session.rollback(snapshot)
        lr = train_config.lr
        # Suggest a rate known to work: the last one that trained here without diverging (or the
        # default, which trains the built-in data), unless that is not lower; then a tenth.
        known = session.last_good_lr if session.last_good_lr is not None else TrainConfig().lr
        suggestion = known if known < lr else lr / 10
        if suggestion != known:
            why = "is a tenth of it"
        else:
            why = "trained here without diverging" if session.last_good_lr is not None else "is the default"
        raise TrainingDiverged(
            f"the {e.what} became {e.value} at step {e.step}; the model, optimizer, run and settings are "
            f"back at step {session.trainer.step}, where this training began. Lower the learning rate "
            f"({lr:g} diverged; {suggestion:g} {why})",
            step=e.step, what=e.what, value=e.value, fix={"lr": suggestion},
        ) from None
    except UserError:
        session.rollback(snapshot)  # e.g. data that is gone (a checkpoint restored with its vocabulary only)
        raise
    except Exception as e:
        if not is_out_of_memory(e):
            raise
        # Out of memory part-way: like a divergence, the command failed, so it changes nothing.
        failed_step = session.trainer.step + 1
        session.rollback(snapshot)
        raise UserError(f"out of memory at step {failed_step}; the model, optimizer, run and settings "
                        "are back where this training began. Lower batch_size or max_seq_len, or use another "
                        "device", fix={"batch_size": max(1, train_config.batch_size // 2)}) from None
    session.note_good_lr(train_config.lr)
    done = trainer.history[-summary.steps :] if summary.steps else []
    # Saved when the run ends or is stopped; a diverged run raised above and leaves the last save alone.
    saved, save_error = None, None
    name = save_as if save_as is not None else (AUTOSAVE_NAME if autosave else None)
    if name is not None:
        try:
            if autosave and not resumed:
                rotate_autosaves(session.checkpoint_dir)  # a new run keeps the previous runs' autosaves
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
        schedule=schedule,
        constant_lr=constant_lr,
        dtype=summary.dtype, compiled=summary.compiled, compile_seconds=summary.compile_seconds,
    )


_TRAIN_OPTIONS = ("lr", "batch_size", "eval_every", "seed")  # TrainConfig fields :train sets for good


@command("gen", "Generate text from a prompt (a line without ':' is a prompt too).", params=[
    Param("prompt", str, help="text to continue (default: a newline, or the first character of the vocabulary)",
          positional=True),
    # The sampling seed is `gen_seed` everywhere; in :gen, where no other seed exists, `seed` works too.
    *(param_from_setting(spec, help=f"{spec.help} (default: the {spec.name} setting)",
                         aliases=("seed",) if spec.name == "gen_seed" else spec.aliases,
                         short="n" if spec.name == "n" else None)
      for spec in GenConfig.specs()),
], takes_plain_text=True)  # fmt: skip
def cmd_gen(session: Session, args: dict, reporter: Reporter) -> GenResult:
    given = {spec.name: args[spec.name] for spec in GenConfig.specs() if args[spec.name] is not None}
    settings = session.gen_config.replace(**{k: (None if v is CLEAR else v) for k, v in given.items()})
    tokenizer = session.data.tokenizer
    prompt = args["prompt"] or ""
    default_prompt = not prompt
    if default_prompt:
        prompt = "\n" if "\n" in tokenizer.stoi else tokenizer.itos[0]
    ids = tokenizer.encode(prompt)
    model = session.model
    window = model.config.max_seq_len
    if len(ids) > window:
        reporter.notice(f"the prompt is {len(ids):,} characters, longer than max_seq_len={window}: "
                        f"the model sees only its last {window}")

    from .core.generate import generate

    stream = generate(
        model, ids, settings.n, settings.temperature, settings.top_k, settings.top_p, settings.gen_seed, settings.cache
    )
    reporter.on_gen_start(prompt)
    pieces: list[str] = []
    stopped = False
    start = time.perf_counter()
    try:
        for token in stream:
            piece = tokenizer.decode([token])
            pieces.append(piece)
            reporter.on_token(piece)
            if reporter.should_stop() and len(pieces) < settings.n:
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
        default_prompt=default_prompt,
        untrained=session.trainer.step == 0,
    )


@command("shapes", "Trace one forward pass: every step's shape, in the order it runs.", params=[
    Param("prompt", str, help="text to trace (default: a short sample of the data)", positional=True),
    Param("layer", int, help="the block to show in full (default 0)"),
    Param("all", bool, default=False, help="show every block in full"),
])  # fmt: skip
def cmd_shapes(session: Session, args: dict, reporter: Reporter) -> ShapesResult:
    n_layers = session.model_config.n_layers
    layer = args["layer"] if args["layer"] is not None else 0
    if not 0 <= layer < n_layers:
        blocks = f"{n_layers} block{'s' if n_layers != 1 else ''}"
        raise UserError(f"layer must be in 0..{n_layers - 1} (the model has {blocks}), got {clip(str(layer))}")
    data = session.data
    prompt = args["prompt"] or sample_prompt(data)
    ids = data.tokenizer.encode(prompt)
    window = session.model_config.max_seq_len
    if len(ids) > window:
        ids = ids[-window:]
        prompt = data.tokenizer.decode(ids)
        reporter.notice(f"the prompt is longer than max_seq_len={window}; tracing its last {window} characters")
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
    Param("name", str, help="auto, cpu, cuda, cuda:N or mps", positional=True, complete=complete_device),
])  # fmt: skip
def cmd_device(session: Session, args: dict, reporter: Reporter) -> DeviceResult:
    from .core.device import ACCEPTED_FORMS, describe_devices, resolve_device

    problem = None
    try:
        current = session.device
    except DeviceError as e:
        current, problem = None, str(e)  # e.g. --device cuda on a machine without one: listing still works
    name = args["name"]
    if name is None or not name.strip():
        return DeviceResult(describe_devices(), str(current) if current is not None else session.device_name, False,
                            problem)
    if len(name.strip()) > 16:  # no device name is this long; keep the message one line
        raise DeviceError(f"unknown device {clip(name)!r}; use one of {ACCEPTED_FORMS}")
    target = resolve_device(name)
    try:
        session.move_to(target)
    except RuntimeError as e:
        if current is not None and session.has_model:
            session.move_to(current)  # never leave the model half moved
        raise DeviceError(f"could not move the model to {target}: {clip(str(e), 120)}; stay on {current}") from None
    return DeviceResult(describe_devices(), str(target), current != target)


@command("config", "Show the model, training and generation settings.", needs_torch=False)
def cmd_config(session: Session, args: dict, reporter: Reporter) -> ConfigResult:
    model = session.model_config.to_dict()
    if session.loaded_data is None:
        model["vocab_size"] = None  # set by the data, which is loaded on first use (it needs torch)
    return ConfigResult(
        model=model,
        train=session.train_config.to_dict(),
        gen=session.gen_config.to_dict(),
        data=session.data_spec,
        device=session.status().device,
        checkpoints={"dir": str(session.checkpoint_dir), "autosave": session.autosave},
    )


# `:set` takes every declared setting; the section of each says which config it changes.
SETTINGS = (ModelConfig, TrainConfig, GenConfig, ShellConfig)


def _set_params() -> list[Param]:
    return [param_from_setting(spec, help=f"{spec.section}: {spec.help}") for cls in SETTINGS for spec in cls.specs()]


@command("set", "Change settings: model architecture (resets weights), training, generation or the shell.",
         params=_set_params(), needs_torch=False, pairs=True)  # fmt: skip
def cmd_set(session: Session, args: dict, reporter: Reporter) -> SetResult:
    given = {k: (None if v is CLEAR else v) for k, v in args.items() if v is not None}
    if not given:
        keys = ", ".join(p.name for p in REGISTRY["set"].options)
        raise UserError(f"nothing to set; give key=value pairs, e.g. :set lr=1e-3 n_layers=2 (keys: {keys})")
    current = {cls: _current(session, cls) for cls in SETTINGS}
    new = {}
    for cls, config in current.items():
        changes = {spec.name: given[spec.name] for spec in cls.specs() if spec.name in given}
        new[cls] = config.replace(**changes) if changes else config
    model, train = new[ModelConfig], new[TrainConfig]
    if model.max_seq_len != session.model_config.max_seq_len:
        session.data.check_fits(model.max_seq_len)
    check_trainable(model, train.batch_size)

    changed = {}
    for cls in SETTINGS:
        for spec in cls.specs():
            old_value, new_value = getattr(current[cls], spec.name), getattr(new[cls], spec.name)
            if spec.name in given and old_value != new_value:
                changed[spec.name] = (old_value, new_value)
    kept = keep_trained_model(session, new[ShellConfig].autosave) if session.rebuild_needed(config=model) else None
    rebuilt = session.set_model_config(model)
    session.set_train_config(train)
    session.set_gen_config(new[GenConfig])
    session.set_shell_config(new[ShellConfig])
    return SetResult(changed, rebuilt, kept)


def _current(session: Session, cls):
    return {ModelConfig: session.model_config, TrainConfig: session.train_config, GenConfig: session.gen_config,
            ShellConfig: session.shell_config}[cls]


@command("data", "Show the data, or switch: pydoc, shakespeare, sort[:N], reverse[:N], add[:N], random[:V], a file.",
         params=[Param("name", str, help="pydoc|shakespeare|sort[:N]|reverse[:N]|add[:N]|random[:V]|a file path",
                       positional=True, complete=complete_data)])  # fmt: skip
def cmd_data(session: Session, args: dict, reporter: Reporter) -> DataResult:
    name = args["name"]
    if name is None or not name.strip():
        return DataResult(session.data.info(), changed=False, rebuilt=False)
    spec = name.strip()
    data = _load_checked(session, spec)
    rebuilt, kept = _switch_data(session, spec, data)
    return DataResult(data.info(), changed=True, rebuilt=rebuilt, kept=kept)


def _load_checked(session: Session, spec: str):
    """Load a dataset and check it fits the model's context, without touching the session."""
    from .core.data import load_data

    data = load_data(spec)
    data.check_fits(session.model_config.max_seq_len)
    return data


def _switch_data(session: Session, spec: str, data) -> tuple[bool, str | None]:
    """Switch to checked data: (whether the model was rebuilt, the checkpoint a trained model was kept as)."""
    kept = keep_trained_model(session) if session.rebuild_needed(data=data) else None
    return session.use_data(spec, data), kept


def _rebuilt_line(vocab_size: int, kept: str | None) -> str:
    line = f"the data has another vocabulary ({vocab_size} characters): the model was rebuilt, weights reset (step 0)"
    return line + (f"; the trained model was kept as checkpoint {kept} (:load {kept} brings it back)" if kept else "")


@command("params", "List the parameter tensors, their shapes and the total.")
def cmd_params(session: Session, args: dict, reporter: Reporter) -> ParamsResult:
    model = session.model
    rows = [(name, tuple(p.shape), p.numel()) for name, p in model.named_parameters()]
    return ParamsResult(rows, model.num_parameters())


# --- checkpoints -----------------------------------------------------------------------------------

DEFAULT_SAVE_NAME = "last"


@command("save", "Save the model, optimizer, training run and random state as a checkpoint.", params=[
    Param("name", str, help="checkpoint name: letters, digits, '.', '_', '-' (default last)", positional=True,
          complete=complete_checkpoint),
], interruptible=True)  # fmt: skip
def cmd_save(session: Session, args: dict, reporter: Reporter) -> SaveResult:
    name = (args["name"] or "").strip() or DEFAULT_SAVE_NAME
    from .core.checkpoint import check_save_target

    check_save_target(session.checkpoint_dir, name)
    if not session.has_model:
        raise UserError("there is no model to save yet; :train one first, then :save")
    return save_session(session, name)


AUTOSAVES_KEPT = 3  # autosave is the newest run; autosave-1 .. autosave-3 the runs before it


def rotate_autosaves(directory) -> None:
    from .core.checkpoint import rotate

    rotate(directory, AUTOSAVE_NAME, keep=AUTOSAVES_KEPT)


def keep_trained_model(session: Session, enabled: bool | None = None) -> str | None:
    """Before a command rebuilds the model, save a trained one so that no command loses it.

    Returns the checkpoint's name, or None when there is nothing to keep (no model, or step 0) or
    the user turned saving off (`autosave=off`). If the save fails, the command fails: nothing changes.
    """
    enabled = session.autosave if enabled is None else enabled
    if not session.has_model or session.trainer.step == 0 or not enabled:
        return None
    name = time.strftime("kept-%Y%m%d-%H%M%S")
    try:
        return save_session(session, name).name
    except UserError as e:
        raise UserError(
            f"the trained model (step {session.trainer.step}) could not be kept before the rebuild ({e}); "
            "nothing changed. Make the checkpoint folder writable, or turn autosave off to rebuild without keeping it"
        ) from None


def save_session(session: Session, name: str) -> SaveResult:
    """Write the session's model, trainer and data as checkpoint `name` (atomic: see core.checkpoint).

    Ctrl-C reaches a save as KeyboardInterrupt (the command is interruptible); the engine removes what
    it wrote and re-raises, and this turns it into one line that says what is on disk now.
    """
    from .core.checkpoint import MANIFEST, checkpoint_info, manifest_bytes, save_checkpoint

    manifest = session.checkpoint_dir / name / MANIFEST
    before = manifest_bytes(manifest.parent)
    start = time.perf_counter()
    try:
        path = save_checkpoint(
            session.checkpoint_dir, name, session.model, session.trainer, session.data.tokenizer.vocab,
            session.data_spec,
        )
    except KeyboardInterrupt:
        now = manifest_bytes(manifest.parent)
        if now is None or now == before:  # the commit did not happen
            if before is None:
                raise UserError(f"save interrupted; no checkpoint {name} was written") from None
            raise UserError(f"save interrupted; the previous checkpoint {name} is unchanged") from None
        path = manifest.parent  # the interrupt came after the commit: the new checkpoint is complete
    return SaveResult(
        name=name, path=str(path), step=session.trainer.step, size_bytes=checkpoint_info(Path(path)).size_bytes,
        seconds=time.perf_counter() - start, replaced=before is not None,
    )


@command("load", "Load a checkpoint: weights, optimizer, training run, data and random state.", params=[
    Param("name", str, help="the checkpoint's name (:ls lists them)", positional=True, complete=complete_checkpoint),
])  # fmt: skip
def cmd_load(session: Session, args: dict, reporter: Reporter) -> LoadResult:
    from .core import checkpoint as ckpt

    name = (args["name"] or "").strip()
    if not name:
        names = [row.name for row in ckpt.list_checkpoints(session.checkpoint_dir) if row.error is None]
        if not names:
            raise UserError(f"there are no checkpoints in {session.checkpoint_dir} yet; :save NAME writes one")
        raise UserError(f"which checkpoint? give its name, e.g. :load {names[0]} (saved: {clip(', '.join(names), 120)})")
    # Everything is read, checked and rebuilt into new objects first; the session changes only at the end.
    checkpoint = ckpt.load_checkpoint(session.checkpoint_dir, name)
    data = _checkpoint_data(session, checkpoint)
    from .core.data import VocabOnly

    data_missing = data.description if isinstance(data, VocabOnly) else None
    device = session.device
    model, trainer = ckpt.restore(checkpoint, data, device)
    if reporter.should_stop():  # Ctrl-C while reading: the session is still as it was
        raise UserError(f"load of {name} interrupted; nothing changed")
    session.adopt(checkpoint.data_spec, data, model, trainer)
    ckpt.restore_rng(checkpoint)
    evaluated = [h["val_loss"] for h in trainer.history if h.get("val_loss") is not None]
    return LoadResult(
        name=name, path=str(checkpoint.path), step=trainer.step, data_spec=checkpoint.data_spec,
        val_loss=evaluated[-1] if evaluated else None, model_config=checkpoint.model_config.to_dict(),
        run_remaining=trainer.run_remaining, n_params=model.num_parameters(),
        saved_at=checkpoint.meta.get("saved_at") if isinstance(checkpoint.meta.get("saved_at"), str) else None,
        data_missing=data_missing,
    )


def _checkpoint_data(session: Session, checkpoint):
    """The data the checkpoint was trained on: the session's own if it is the same, else loaded, else
    (a file that is gone, say) a stand-in with the saved vocabulary, so the model still generates."""
    from .core.checkpoint import checkpoint_data

    loaded = session.loaded_data
    if loaded is not None and session.data_spec == checkpoint.data_spec and loaded.tokenizer.vocab == checkpoint.vocab:
        return loaded
    return checkpoint_data(checkpoint)


@command("ls", "List the saved checkpoints: step, val loss, data, size and date.", aliases=("checkpoints",))
def cmd_ls(session: Session, args: dict, reporter: Reporter) -> LsResult:
    from .core.checkpoint import list_checkpoints

    return LsResult(rows=list_checkpoints(session.checkpoint_dir), directory=str(session.checkpoint_dir))


# --- speed: precision, compile, quantization (dtype and compile are TrainConfig settings; :quantize here) ---
QUANTIZE_MODES = ("int8", "off")
QUANTIZE_TOKENS = 64  # tokens generated (greedy) for each timing of :quantize int8


@dataclass
class QuantizeResult:
    mode: str  # "int8": :gen samples from the int8 copy; "off": from the float model
    changed: bool  # this command switched int8 sampling on or off (False: only shown, or already so)
    measure: Any = None  # core.quantize.QuantizeMeasure, for :quantize int8
    device: str | None = None  # the device the float model trains on (the int8 copy runs on the CPU)


@command("quantize", "Sample with an int8 copy of the Linear layers (dynamic quantization), or off again.", params=[
    Param("mode", str, positional=True, choices=QUANTIZE_MODES,
          help="int8: quantize a copy for :gen and measure size, speed and val loss; off: the float model "
               "(default: show which is on)"),
])  # fmt: skip
def cmd_quantize(session: Session, args: dict, reporter: Reporter) -> QuantizeResult:
    mode = (args["mode"] or "").strip()
    on = session.has_model and session.sampling_copy
    if not mode:
        return QuantizeResult("int8" if on else "off", changed=False)
    if mode == "off":
        session.set_sampling_model(None)
        return QuantizeResult("off", changed=on)
    from .core.quantize import measure, quantize_for_sampling

    tokenizer = session.data.tokenizer
    model, trainer = session.model, session.trainer
    qmodel = quantize_for_sampling(model)
    prompt = "\n" if "\n" in tokenizer.stoi else tokenizer.itos[0]  # :gen's default prompt
    result = measure(model, qmodel, trainer, tokenizer.encode(prompt), n_tokens=QUANTIZE_TOKENS)
    session.set_sampling_model(qmodel)
    return QuantizeResult("int8", changed=not on, measure=result, device=str(session.device))
