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
from typing import TYPE_CHECKING, TypedDict

from .core.config import GenConfig, ModelConfig, TrainConfig
from .core.errors import DeviceError, PeerLost, TrainingDiverged, UserError, is_out_of_memory
from .core.sizes import check_trainable
from .core.words import count
from .parsing import CLEAR, convert
from .registry import Command, Param, Registry, clip, param_from_setting
from .reporter import Reporter
from .session import AUTOSAVE_NAME, Session, ShellConfig
from .syntax import cmd, restore, train_first

if TYPE_CHECKING:  # the core types results hold (torch-bound, so imported here for readers; schema.py resolves them)
    from .core.checkpoint import CheckpointInfo
    from .core.compare import Outcome
    from .core.data import DataInfo
    from .core.device import DeviceInfo
    from .core.ledger import Ledger
    from .core.quantize import QuantizeMeasure
    from .core.trace import TraceRecord
    from .core.train import StepInfo

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
    stopped: bool  # Ctrl-C (a stop request) ended it before the run did
    resumed: bool  # this command continued an unfinished run
    train_loss: float | None  # of the last step
    val_loss: float | None  # of the last evaluation, None if none ran
    accuracy: float | None  # exact-match accuracy on held-out examples (tasks only)
    tokens_per_second: float  # training tokens per second, evaluation excluded
    seconds: float  # wall time of the command
    evals: list[dict] = field(metadata={"json": "list[StepInfo]"})  # history rows with a val_loss, from this command
    data: str  # what it trained on (the :data spec)
    saved: str | None = None  # the checkpoint written at the end (save=NAME, or autosave), if any
    save_error: str | None = None  # why that save failed; the training itself is kept
    # The learning-rate schedule of the run: "new" (warm-up, then cosine from the peak lr) or
    # "continue" (a trained model goes on at the last run's final rate, constant_lr, so it is not shaken).
    schedule: str = "new"
    constant_lr: float | None = None
    vocab_size: int | None = None  # V, for the loss table's ln(V) line (the loss of a uniform guess)
    # this command's history rows, thinned to at most 200, for a chart
    curve: list[dict] = field(default_factory=list, metadata={"json": "list[StepInfo]"})
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
    n_tokens: int  # tokens generated
    seconds: float
    tokens_per_second: float
    cache: bool  # decoded with the KV cache (cache=on)
    stopped: bool  # Ctrl-C ended it early
    default_prompt: bool = False  # no prompt was given: `prompt` is the start character chosen for it
    untrained: bool = False  # the model has not trained a step: its text is random
    first_token_seconds: float | None = None  # time to the first token: the prompt's prefill and one sample
    probs: list[float] | None = None  # show=probs: each token's probability when it was picked
    raw: bool = False  # raw=on: control characters written as they are where the output is not a terminal
    answered: bool = False  # a task's answer was complete: generation ended there, before n tokens


@dataclass
class ShapesResult:
    prompt: str  # the text traced (after truncation to max_seq_len)
    records: list[TraceRecord]  # one per module and probe, in execution order
    n_layers: int  # blocks in the model
    layer: int | None  # the block shown in full; None when show_all
    show_all: bool


@dataclass
class DeviceResult:
    devices: list[DeviceInfo]  # every device minitf can see, usable or not
    current: str  # the device the model is on now
    switched: bool  # this command moved the model
    problem: str | None = None  # the device asked for (e.g. --device cuda) cannot be used here
    dtype: str = "auto"  # the dtype setting, and what a training step runs in on the current device
    train_dtype: str | None = None  # what dtype=auto means here: float32 or bfloat16
    threads: int | None = None  # the CPU threads torch computes with (core/threads.py)
    threads_why: str | None = None  # how that count was chosen, e.g. "auto: 2 cores, 0.0 busy with other work"

    @property
    def failure(self) -> str | None:
        return self.problem


@dataclass
class ConfigResult:
    model: dict  # the model settings by name (:set and docs/variant-lab.md)
    train: dict  # the training settings by name
    gen: dict  # the generation settings by name
    data: str  # the :data spec
    device: str  # the device setting (auto, cpu, cuda:N, mps)
    checkpoints: dict = field(default_factory=dict)  # {"dir": ..., "autosave": bool}
    preset: str | None = None  # the preset the model settings match (sizes aside), if any


@dataclass
class SetResult:
    changed: dict[str, tuple]  # key -> [old, new], only the values that changed
    rebuilt: bool  # the model was rebuilt: weights reset
    kept: str | None = None  # the checkpoint the trained model was saved as before the rebuild
    preset: str | None = None  # the preset the model settings now match, if any


@dataclass
class DataResult:
    info: DataInfo  # the data now in use
    changed: bool  # this command switched the data
    rebuilt: bool  # the model was rebuilt for another vocabulary: weights reset
    kept: str | None = None  # the checkpoint the trained model was saved as before the rebuild
    recipe: dict[str, tuple] = field(default_factory=dict)  # core.recipes: {setting: [before, after]} that followed the data


class KVCacheSize(TypedDict):
    """What :params says about the KV cache (a dict: the renderer reads it by key)."""

    bytes_per_token: int  # K and V of every layer for one token, float32
    kv_heads: int  # key/value heads kept per layer (fewer than n_heads with grouped or multi-query attention)
    n_heads: int
    window_bytes: int  # the cache for a full window of max_seq_len tokens
    window: int  # max_seq_len
    mha_bytes_per_token: int  # what the cache would take with one key/value head per query head


@dataclass
class ParamsResult:
    rows: list[tuple[str, tuple[int, ...], int]]  # [parameter path, shape, count]; the tied embedding/head matrix once
    total: int
    # core.ledger.Ledger.to_dict(): components, FLOPs, memory; shown unless show_all
    ledger: dict | None = field(default=None, metadata={"json": "Ledger | None"})
    show_all: bool = False  # all=on: the per-tensor list instead of the ledger
    kv_cache: KVCacheSize | None = None  # the KV cache for sampling: bytes per token, heads kept, and the full-window size


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
    model_config: dict  # the checkpoint's model settings by name
    run_remaining: int  # > 0: the run was stopped and `:train` continues it
    n_params: int  # parameters of the loaded model
    saved_at: str | None  # ISO 8601, UTC
    data_missing: str | None = None  # the training data could not be had: only its vocabulary was restored


@dataclass
class LsResult:
    rows: list[CheckpointInfo]  # newest first; a broken one has `error` set
    directory: str  # the checkpoint folder listed


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
    if session.ablations:
        raise UserError(f"parts of the model are switched off ({', '.join(map(str, session.ablations))}); "
                        f"training would learn around them: {cmd('ablate', 'off')} first")
    save_as = args["save"].strip() if args["save"] is not None else None
    if save_as is not None:
        from .core.checkpoint import check_save_target

        check_save_target(session.checkpoint_dir, save_as)  # a bad name fails now, not after an hour of training
    changes = {key: args[key] for key in _TRAIN_OPTIONS if args[key] is not None}
    spec = args["data"].strip() if args["data"] is not None else None
    new_data = _load_checked(session, spec) if spec is not None else None
    if new_data is None:  # loads the session's data now: a file that is known data brings its recipe first
        session.data.check_fits(session.model_config.max_seq_len)
    train_config = session.train_config
    if new_data is not None:  # the new data's recipe first (core.recipes), this command's options over it
        train_config, _ = session.recipe_switch(new_data)  # checked before anything changes
    train_config = train_config.replace(**changes) if changes else train_config
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
        rebuilt, kept, recipe_changes = _switch_data(session, spec, new_data)
        if rebuilt:
            reporter.notice(_rebuilt_line(new_data.tokenizer.vocab_size, kept))
        moved = {key: change for key, change in recipe_changes.items() if key not in changes}  # options win
        if moved:
            reporter.notice(recipe_line(spec, moved))
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
        trainer.start_run(steps, constant_lr=constant_lr)  # the result says which schedule it was
    session.threads.decide()  # a fresh look at the other work on the machine before a long run
    reporter.on_train_start(trainer.run_steps, trainer.step - trainer.run_start, resumed)
    try:
        summary = trainer.run(on_step=reporter.on_step, should_stop=reporter.should_stop, on_notice=reporter.notice)
    except PeerLost as e:
        # Under torchrun another rank died: the steps every rank completed are good (the one under way
        # was undone), so they are kept and saved, not rolled back; the command still fails.
        raise UserError(f"{e}; {_save_after_peer_lost(session, save_as, autosave, resumed)}") from None
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
    if name is not None and not _main_rank():
        name = None  # under torchrun every rank holds the same weights: rank 0 alone writes them
    if name is not None:
        try:
            # A new run keeps the previous runs' autosaves (rotated under the same lock as the save, so
            # two sessions autosaving at once keep both); a continued run replaces its own autosave only.
            saved = save_session(session, name, origin="autosave" if autosave else "save",
                                 rotate=AUTOSAVES_KEPT if autosave else None, same_run=resumed).name
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
        vocab_size=session.data.tokenizer.vocab_size,
        curve=_thin(done, 200),
        dtype=summary.dtype, compiled=summary.compiled, compile_seconds=summary.compile_seconds,
    )


def _save_after_peer_lost(session: Session, save_as: str | None, autosave: bool, resumed: bool) -> str:
    """Save what this rank has after another rank died (rank 0 only, as always); what to say about it."""
    name = save_as if save_as is not None else (AUTOSAVE_NAME if autosave else None)
    if name is None:
        return "nothing was saved (autosave is off)"
    if not _main_rank():
        return "process 0 saves what it has, if it is still running"
    try:
        saved = save_session(session, name, origin="autosave" if save_as is None else "save",
                             rotate=AUTOSAVES_KEPT if save_as is None else None, same_run=resumed)
    except UserError as e:
        return f"it could not be saved ({e})"
    return f"saved as checkpoint {saved.name} (step {saved.step})"


def _thin(rows: list, most: int) -> list:
    """At most `most` rows, evenly spread; every evaluated row kept (the chart's validation points)."""
    if len(rows) <= most:
        return [dict(r) for r in rows]
    stride = -(-len(rows) // most)
    return [dict(r) for i, r in enumerate(rows) if i % stride == 0 or r["val_loss"] is not None or i == len(rows) - 1]


_TRAIN_OPTIONS = ("lr", "batch_size", "eval_every", "seed")  # TrainConfig fields :train sets for good


@command("gen", "Generate text from a prompt (a line without ':' is a prompt too).", params=[
    Param("prompt", str, help="text to continue (default: a newline, or the first character of the vocabulary)",
          positional=True),
    # The sampling seed is `gen_seed` everywhere; in :gen, where no other seed exists, `seed` works too.
    *(param_from_setting(spec, help=f"{spec.help} (default: the {spec.name} setting)",
                         aliases=("seed",) if spec.name == "gen_seed" else spec.aliases,
                         short="n" if spec.name == "n" else None)
      for spec in GenConfig.specs()),
    Param("show", str, help="probs: colour each character by its probability when picked (default text)",
          choices=("text", "probs")),
    Param("raw", bool, default=False,
          help="write control characters (ESC, ...) as they are, when the output is a file or a pipe; "
               "by default, and always in a terminal, they are shown escaped (\\x1b)"),
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
    model = session.sampling_model  # the int8 copy while :quantize int8 is on, else the model
    window = model.config.max_seq_len
    if len(ids) > window:
        reporter.notice(f"the prompt is {count(len(ids), 'character')}, longer than max_seq_len={window}: "
                        f"the model sees only its last {window}")

    from .core.generate import generate

    done = getattr(session.data, "answer_complete", None)  # a task's answers end (core.data)
    stream = generate(
        model, ids, settings.n, settings.temperature, settings.top_k, settings.top_p, settings.gen_seed, settings.cache,
        done=done,
    )
    reporter.on_gen_start(prompt, raw=args["raw"])
    pieces: list[str] = []
    new_ids: list[int] = []
    stopped = False
    start = time.perf_counter()
    first_token_seconds = None
    try:
        for token in stream:
            if first_token_seconds is None:
                first_token_seconds = time.perf_counter() - start
            piece = tokenizer.decode([token])
            pieces.append(piece)
            new_ids.append(token)
            if args["show"] != "probs":  # with show=probs the text is shown once, coloured, at the end
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
        first_token_seconds=first_token_seconds,
        probs=token_probs(model, ids, new_ids, settings) if args["show"] == "probs" else None,
        raw=args["raw"],
        answered=done is not None and not stopped and done(ids + new_ids),
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
        blocks = count(n_layers, "block")
        raise UserError(f"layer must be in 0..{n_layers - 1} (the model has {blocks}), got {clip(str(layer))}")
    data = session.data
    prompt = args["prompt"] or sample_prompt(data)
    ids = data.tokenizer.encode(prompt)
    window = session.model_config.max_seq_len
    if len(ids) > window:
        ids = ids[-window:]
        prompt = data.tokenizer.decode(ids)
        reporter.notice(f"the prompt is longer than max_seq_len={window}; tracing its last {count(window, 'character')}")
    model = session.model

    import torch

    from .core.trace import trace

    records = trace(model, torch.tensor(ids, dtype=torch.long))
    show_all = bool(args["all"])
    return ShapesResult(prompt, records, n_layers, None if show_all else layer, show_all)


SAMPLE_CHARS = 16  # the length of a corpus's default prompt for the views
SAMPLE_SCAN = 20_000  # characters of validation text searched for it


def sample_window(data) -> tuple[int, str]:
    """Where in a corpus's validation text the default prompt starts, and its text.

    The first SAMPLE_CHARS characters of the split were often mostly whitespace (pydoc's start
    with ` Counter()` and an indent), which shows a view nothing. The prompt is the first window
    that reads like a sentence: a capital letter after whitespace, then words: no line break, no
    run of spaces, at least three quarters letters. Text with no such window (code, numbers) gives
    its first characters, as before.
    """
    text = data.tokenizer.decode(data.splits["val"][:SAMPLE_SCAN].tolist())
    for start in range(1, max(1, len(text) - SAMPLE_CHARS)):
        window = text[start : start + SAMPLE_CHARS]
        if (window[0].isupper() and text[start - 1].isspace() and "\n" not in window and "  " not in window
                and sum(ch.isalpha() for ch in window) >= 0.75 * SAMPLE_CHARS):
            return start, window
    return 0, text[:SAMPLE_CHARS]


def sample_prompt(data) -> str:
    """A short, typical input: a sentence's start from the validation text, or one held-out task question."""
    if getattr(data, "splits", None) is not None:
        return sample_window(data)[1]
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
                            problem, **_train_dtype(session, current))
    if len(name.strip()) > 16:  # no device name is this long; keep the message one line
        raise DeviceError(f"unknown device {clip(name)!r}; use one of {ACCEPTED_FORMS}")
    target = resolve_device(name)
    try:
        session.move_to(target)
    except RuntimeError as e:
        if current is not None and session.has_model:
            session.move_to(current)  # never leave the model half moved
        raise DeviceError(f"could not move the model to {target}: {clip(str(e), 120)}; stay on {current}") from None
    return DeviceResult(describe_devices(), str(target), current != target, **_train_dtype(session, target))


def _train_dtype(session: Session, device) -> dict:
    """The dtype setting and what it means on `device` (dtype=auto depends on the device's bfloat16 units),
    and torch's CPU threads (chosen now if nothing has chosen them yet)."""
    from .core.precision import training_dtype

    setting = session.train_config.dtype
    choice = session.threads.choice or session.threads.decide()
    return {"dtype": setting, "train_dtype": None if device is None else training_dtype(setting, device),
            "threads": choice.threads, "threads_why": choice.why()}


@command("config", "Show the model, training and generation settings.", needs_torch=False)
def cmd_config(session: Session, args: dict, reporter: Reporter) -> ConfigResult:
    from .core.config import matching_preset

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
        preset=matching_preset(session.model_config),
    )


# `:set` takes every declared setting; the section of each says which config it changes.
SETTINGS = (ModelConfig, TrainConfig, GenConfig, ShellConfig)


def _set_params() -> list[Param]:
    from .core.config import PRESETS

    preset = Param("preset", str, choices=tuple(PRESETS),
                   help="model: the architecture of a known model (sizes kept): " + ", ".join(PRESETS))
    return [preset] + [param_from_setting(spec, help=f"{spec.section}: {spec.help}") for cls in SETTINGS
                       for spec in cls.specs()]


@command("set", "Change settings: model architecture (resets weights), training, generation or the shell.",
         params=_set_params(), needs_torch=False, pairs=True)  # fmt: skip
def cmd_set(session: Session, args: dict, reporter: Reporter) -> SetResult:
    given = {k: (None if v is CLEAR else v) for k, v in args.items() if v is not None}
    if not given:
        keys = ", ".join(p.name for p in REGISTRY["set"].options)
        raise UserError(f"nothing to set; give key=value pairs, e.g. {cmd('set', lr='1e-3', n_layers=2)} (keys: {keys})")
    current = {cls: _current(session, cls) for cls in SETTINGS}
    new = {}
    for cls, config in current.items():
        if cls is ModelConfig and "preset" in given:  # the preset first: keys given with it override it
            from .core.config import preset_changes

            config = config.replace(**preset_changes(given["preset"], config))
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
            if old_value != new_value and (spec.name in given or "preset" in given):  # a preset sets several
                changed[spec.name] = (old_value, new_value)
    kept = keep_trained_model(session, new[ShellConfig].autosave) if session.rebuild_needed(config=model) else None
    rebuilt = session.set_model_config(model)
    if session.has_model and not rebuilt and train.optimizer != current[TrainConfig].optimizer:
        reporter.notice(f"the optimizer is now {train.optimizer}: the weights are kept, its memory "
                        "(moments, momentum) starts afresh")
    session.set_train_config(train)
    session.set_gen_config(new[GenConfig])
    session.set_shell_config(new[ShellConfig])
    from .core.config import matching_preset

    return SetResult(changed, rebuilt, kept, matching_preset(model) if "preset" in given or rebuilt else None)


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
    rebuilt, kept, recipe_changes = _switch_data(session, spec, data)
    return DataResult(data.info(), changed=True, rebuilt=rebuilt, kept=kept, recipe=recipe_changes)


def _load_checked(session: Session, spec: str):
    """Load a dataset and check it fits the model's context, without touching the session."""
    from .core.data import load_data

    data = load_data(spec)
    data.check_fits(session.model_config.max_seq_len)
    return data


def _switch_data(session: Session, spec: str, data) -> tuple[bool, str | None, dict]:
    """Switch to checked data: (whether the model was rebuilt, the checkpoint a trained model was kept as,
    the training settings that followed the data's recipe: {setting: (before, after)})."""
    kept = keep_trained_model(session) if session.rebuild_needed(data=data) else None
    rebuilt, recipe_changes = session.use_data(spec, data)
    return rebuilt, kept, recipe_changes


def recipe_line(spec: str, changes: dict) -> str:
    """The training settings that followed the data's recipe, in one line."""
    moved = ", ".join(f"{name} {before:g} -> {after:g}" if isinstance(after, float) else f"{name} {before} -> {after}"
                      for name, (before, after) in changes.items())
    return f"training settings follow the recipe for {spec} (core/recipes.py): {moved}"


def _rebuilt_line(vocab_size: int, kept: str | None) -> str:
    line = (f"the data has another vocabulary ({count(vocab_size, 'character')}): the model was rebuilt, "
            "weights reset (step 0)")
    return line + (f"; the trained model was kept as checkpoint {kept} ({restore(kept)} brings it back)" if kept else "")


@command("params", "What the model costs: parameters per component, FLOPs and memory (all=on: every tensor).",
         params=[Param("all", bool, default=False, help="list every parameter tensor instead")])  # fmt: skip
def cmd_params(session: Session, args: dict, reporter: Reporter) -> ParamsResult:
    from .core.ledger import cost_ledger

    model = session.model
    rows = [(name, tuple(p.shape), p.numel()) for name, p in model.named_parameters()]
    from .core.sizes import kv_cache_bytes_per_token

    ledger = cost_ledger(model, batch_size=session.train_config.batch_size,
                         optimizer=session.train_config.optimizer).to_dict()
    config = model.config
    per_token = kv_cache_bytes_per_token(config)
    kv_cache = {"bytes_per_token": per_token, "kv_heads": config.kv_heads, "n_heads": config.n_heads,
                "window_bytes": per_token * config.max_seq_len, "window": config.max_seq_len,
                "mha_bytes_per_token": kv_cache_bytes_per_token(config.replace(n_kv_heads=None))}
    return ParamsResult(rows, model.num_parameters(), ledger, bool(args["all"]), kv_cache)


# --- the variant lab: comparing settings, switching parts off ----------------------------------------
@dataclass
class CompareResult:
    outcomes: list[Outcome]  # one per contender: curve (mean, spread per evaluation), speed, size
    steps: int  # training steps per contender and seed
    seeds: int  # seeds per contender
    data: str  # what they trained on
    stopped: bool  # Ctrl-C ended it early: the curves stop where it did
    verdict: str | None = None  # with several seeds: whether the best beats the rest by more than the noise


MAX_CONTENDERS = 6


@command("compare", "Train settings side by side from the same seed on the same batches: A vs B vs ...", params=[
    Param("contenders", str, positional=True,
          help="contenders: `current`, a preset (`preset=modern`) or settings (`norm=rmsnorm,bias=off`); "
               "separate them with spaces, or with `vs` when one has several settings"),
    Param("steps", int, help="training steps per contender (default 300)", low=1, limit=TrainConfig.spec("steps").limit),
    Param("data", str, help="the data to compare on (default: the session's)", complete=complete_data),
    Param("seeds", int, help="train each contender with this many seeds: mean and spread (default 1)", low=1, limit=10),
    param_from_setting(TrainConfig.spec("eval_every"), help="steps between evaluations (default: steps / 10)"),
], pairs_in_text=True)  # fmt: skip
def cmd_compare(session: Session, args: dict, reporter: Reporter) -> CompareResult:
    """Never touches the session's model: every contender is a new model, and the RNG is restored."""
    from .core.compare import Contender, compare, differs

    spec = args["data"].strip() if args["data"] is not None else None
    data = _load_checked(session, spec) if spec is not None else session.data
    steps = args["steps"] or 300
    seeds = args["seeds"] or 1
    every = args["eval_every"] or max(1, steps // 10)
    groups = _contender_groups(args["contenders"] or "")
    if len(groups) < 2:
        raise UserError(f"compare needs at least two contenders, e.g. {cmd('compare', 'current n_layers=2')} "
                        f"(or {cmd('compare', 'preset=seed vs preset=modern')})")
    if len(groups) > MAX_CONTENDERS:
        raise UserError(f"compare takes at most {count(MAX_CONTENDERS, 'contender')} at once, got {len(groups)}")
    contenders = []
    for label, pairs in groups:
        model, train = _contender_configs(session, pairs, data)
        train = train.replace(eval_every=every)
        data.check_fits(model.max_seq_len)
        check_trainable(model, train.batch_size)
        contenders.append(Contender(label, model, train))
    base_seed = session.train_config.seed
    session.threads.decide()  # a fresh look at the other work on the machine before a long run
    reporter.on_compare_start([c.label for c in contenders], steps, seeds)
    outcomes = compare(contenders, data, steps, [base_seed + i for i in range(seeds)], session.device,
                       on_evaluation=reporter.on_compare_eval, should_stop=reporter.should_stop,
                       threads=session.threads, on_step=reporter.on_compare_step)
    finals = [(o.final, o) for o in outcomes if o.final is not None]
    stopped = any(o.final is None or o.final.step < steps for o in outcomes)
    verdict = None
    if finals and seeds > 1 and not stopped:
        best, best_outcome = min(finals, key=lambda f: f[0].val_loss)
        beaten = [o.label for e, o in finals if o is not best_outcome and differs(best, e)]
        close = [o.label for e, o in finals if o is not best_outcome and not differs(best, e)]
        verdict = f"{best_outcome.label} has the lowest val loss"
        if beaten:
            verdict += f"; it beats {', '.join(beaten)} by more than twice the spread over {seeds} seeds"
        if close:
            verdict += f"; against {', '.join(close)} the gap is within the noise of {seeds} seeds"
    return CompareResult(outcomes, steps, seeds, spec or session.data_spec, stopped, verdict)


def _contender_groups(text: str) -> list[tuple[str, list[str]]]:
    """`a=1 b=2` -> two contenders; `a=1 b=2 vs c=3` -> two; `a=1,b=2` is one with two settings."""
    tokens = text.split()
    if "vs" in tokens:
        groups, current = [], []
        for token in tokens + ["vs"]:
            if token == "vs":
                if current:
                    groups.append(current)
                current = []
            else:
                current.append(token)
    else:
        groups = [[token] for token in tokens]
    out = []
    for group in groups:
        pairs = [pair for token in group for pair in token.split(",") if pair]
        out.append((" ".join(group), pairs))
    return out


def _contender_configs(session: Session, pairs: list[str], data):
    """The session's model and training settings with a contender's changes, read as `:set` reads them."""
    from .core.config import preset_changes

    changes = {ModelConfig.kind: {}, TrainConfig.kind: {}}
    for pair in pairs:
        if pair.lower() in ("current", "base"):
            continue
        key, eq, raw = pair.partition("=")
        if not eq:
            raise UserError(f"{pair!r} is not a setting; write key=value (e.g. n_layers=2), preset=NAME or current")
        param = REGISTRY["set"].find_param(key.strip())  # the same keys, aliases and refusals as :set
        value = convert(param, raw)
        if param.setting is None:  # the preset: a whole architecture for the sizes so far
            model = session.model_config.replace(**changes[ModelConfig.kind])
            changes[ModelConfig.kind].update(preset_changes(value, model))
        elif param.setting.section in changes:
            changes[param.setting.section][param.name] = None if value is CLEAR else value
        else:
            raise UserError(f"{param.name} is a {param.setting.section} setting; a contender differs in model or "
                            "training settings")
    model = session.model_config.replace(**changes[ModelConfig.kind], vocab_size=data.tokenizer.vocab_size)
    train = session.train_config.replace(**changes[TrainConfig.kind])
    return model, train


@dataclass
class ExpertsResult:
    layers: list[int]  # block index of each MoE layer
    load: list[list[float]]  # per layer, per expert: share of the routing choices on a validation batch (rows sum to 1)
    tokens: list[list[int]]  # per layer, per expert: routing choices
    aux_loss: float | None  # the load-balancing loss on that batch (1.0 = perfectly even)
    experts_per_token: int


@command("experts", "Show how a mixture-of-experts model routes tokens: each expert's share, per layer.")
def cmd_experts(session: Session, args: dict, reporter: Reporter) -> ExpertsResult:
    """Routes one validation batch (no training) and reads the model's routing counts."""
    config = session.model_config
    if config.n_experts <= 1:
        raise UserError(f"this model has no experts (n_experts is 0); {cmd('set', n_experts=4, experts_per_token=2)} "
                        "adds them")
    import torch

    trainer = session.trainer
    model = session.model
    x, _ = session.data.get_batch("val", trainer.config.batch_size, config.max_seq_len,
                                  torch.Generator().manual_seed(trainer.config.seed + 1))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(x.to(session.device))
    finally:
        model.train(was_training)
    stats = model.moe_stats()
    return ExpertsResult(stats.layers, stats.load, stats.tokens, stats.aux_loss, config.experts_per_token)


@dataclass
class AblateResult:
    active: list[str]  # what is switched off now (text), empty after `:ablate off`
    val_loss_before: float | None  # validation loss without any ablation
    val_loss_after: float | None  # with the ablations now active
    sample: str  # a short greedy continuation of `prompt` with the ablations on
    prompt: str


@command("ablate", "Switch part of the trained model off (a head, the mask, positions, a block) and re-evaluate.",
         params=[Param("what", str, positional=True, complete=lambda s: ["head=0.0", "mask", "positions", "block=0", "off"],
                       help="head=L.H | mask | positions | block=L | off (undo all)")],
         pairs_in_text=True)  # fmt: skip
def cmd_ablate(session: Session, args: dict, reporter: Reporter) -> AblateResult:
    """Adds one ablation (they stack) and shows val loss with and without them; `off` removes them all."""
    from .core.ablation import parse_ablation

    what = (args["what"] or "").strip()
    if not what:
        raise UserError("what to switch off? head=L.H, mask, positions, block=L (or off to undo)")
    config = session.model_config
    ablation = None if what.lower() == "off" else parse_ablation(what, config.n_layers, config.n_heads)
    trainer = session.trainer
    previous = list(session.ablations)
    session.set_ablations([])
    before = trainer.evaluate()[0]
    session.set_ablations([*previous, ablation] if ablation is not None else [])
    after = trainer.evaluate()[0] if session.ablations else before
    prompt = sample_prompt(session.data)[:8]
    from .core.generate import generate

    ids = session.data.tokenizer.encode(prompt)
    done = getattr(session.data, "answer_complete", None)  # a task's sample ends with its answer
    text = session.data.tokenizer.decode(list(generate(session.model, ids, 24, temperature=0.0, done=done)))
    return AblateResult([str(a) for a in session.ablations], before, after, text, prompt)


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
        raise UserError(f"there is no model to save yet; {train_first('save', AUTOSAVE_NAME)}")
    return save_session(session, name)


AUTOSAVES_KEPT = 3  # autosave is the newest run; autosave-1 .. autosave-3 the runs before it
KEPT_NAMES = 100  # kept-<second>, kept-<second>-2 .. -100: rebuilds in one second each get their own


def keep_trained_model(session: Session, enabled: bool | None = None) -> str | None:
    """Before a command rebuilds the model, save a trained one so that no command loses it.

    Returns the checkpoint's name, or None when there is nothing to keep (no model, or step 0) or
    the user turned saving off (`autosave=off`). If the save fails, the command fails: nothing changes.
    The name is `kept-<date>-<time>`, or with `-2`, `-3`, ... when that is taken: each is claimed
    under the folder lock (exclusive), so two rebuilds in one second, in one session or two, never
    share a name. Its data files share the bytes of an identical autosave (save_session).
    """
    from .core.checkpoint import NameTaken

    enabled = session.autosave if enabled is None else enabled
    if not session.has_model or session.trainer.step == 0 or not enabled:
        return None
    stamp = time.strftime("kept-%Y%m%d-%H%M%S")
    try:
        for n in range(1, KEPT_NAMES + 1):
            try:
                return save_session(session, stamp if n == 1 else f"{stamp}-{n}", origin="kept", exclusive=True).name
            except NameTaken:
                continue
        raise UserError(f"{KEPT_NAMES} checkpoints named {stamp}* exist already")
    except UserError as e:
        raise UserError(
            f"the trained model (step {session.trainer.step}) could not be kept before the rebuild ({e}); "
            "nothing changed. Make the checkpoint folder writable, or turn autosave off to rebuild without keeping it"
        ) from None


def _main_rank() -> bool:
    """Rank 0 of a torchrun launch, or the one process of an ordinary run."""
    from .core import distributed

    return distributed.is_main()


def save_session(session: Session, name: str, origin: str = "save", **options) -> SaveResult:
    """Write the session's model, trainer and data as checkpoint `name` (atomic: see core.checkpoint).

    Ctrl-C reaches a save as KeyboardInterrupt (the command is interruptible); the engine removes what
    it wrote and re-raises, and this turns it into one line that says what is on disk now. `origin`
    and `options` (exclusive, rotate, same_run) go to save_checkpoint; data files identical to those
    of the autosave or of the checkpoint this session last saved or loaded share their bytes.
    """
    from .core.checkpoint import MANIFEST, checkpoint_info, manifest_bytes, save_checkpoint

    manifest = session.checkpoint_dir / name / MANIFEST
    before = manifest_bytes(manifest.parent)
    start = time.perf_counter()
    try:
        path = save_checkpoint(
            session.checkpoint_dir, name, session.model, session.trainer, session.data.tokenizer.vocab,
            session.data_spec, origin=origin, session=session.token,
            share_from=(AUTOSAVE_NAME, session.last_checkpoint), **options,
        )
    except KeyboardInterrupt:
        now = manifest_bytes(manifest.parent)
        if now is None or now == before:  # the commit did not happen
            if before is None:
                raise UserError(f"save interrupted; no checkpoint {name} was written") from None
            raise UserError(f"save interrupted; the previous checkpoint {name} is unchanged") from None
        path = manifest.parent  # the interrupt came after the commit: the new checkpoint is complete
    session.last_checkpoint = name
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
            raise UserError(f"there are no checkpoints in {session.checkpoint_dir} yet; {cmd('save', 'NAME')} "
                            "writes one")
        raise UserError(f"which checkpoint? give its name, e.g. {cmd('load', names[0])} "
                        f"(saved: {clip(', '.join(names), 120)})")
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
    session.last_checkpoint = name
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


# --- views: look inside the model (:attn, :step, :lens, :plot, :tok, :report) ----------------------
# The numbers come from core.inside, core.generate and the trainer's history; these commands only
# pick the prompt, check the options and turn the core's tensors into lists and plain numbers, so
# that every result is JSON as it stands. render.py draws them.


@dataclass
class AttnResult:
    prompt: str  # the text read (its last max_seq_len characters)
    tokens: list[str]  # one character per position
    layer: int  # the block shown
    heads: list[int]  # the heads shown (one, or all)
    n_heads: int  # heads in that block
    maps: list[list[list[float]]]  # [head][query i][key j]: A = softmax(QK^T/sqrt(d_k) + M); 0 above the diagonal
    dropped: int = 0  # characters cut from the front of a prompt longer than max_seq_len


@dataclass
class StepRow:
    id: int
    token: str
    logit: float
    scaled: float | None  # (z - max z) / temperature; None when greedy (temperature 0)
    top_k_kept: bool
    kept: bool  # survived top-k and top-p: can be picked
    prob: float  # renormalised: the probability of being picked
    picked: bool


@dataclass
class StepResult:
    prompt: str
    temperature: float
    top_k: int | None
    top_p: float | None
    seed: int  # the generator's seed: `:gen PROMPT n=1 seed=SEED` picks the same token
    rows: list[StepRow]  # the highest logits, best first (the pick is added if it ranks lower)
    vocab_size: int
    n_top_k_kept: int
    n_kept: int  # survivors of both filters
    picked: str
    picked_id: int
    picked_prob: float
    picked_rank: int  # 1 = the highest logit


@dataclass
class LensRow:
    layer: str  # "embed", "blocks.0", ...
    guesses: list[str]  # the most likely next characters, best first
    probs: list[float]
    target_rank: int | None = None  # of the true next character (1 = best); None when unknown
    target_prob: float | None = None


@dataclass
class LensResult:
    prompt: str
    target: str | None  # the true next character, when the prompt was taken from the data
    rows: list[LensRow]  # "embed" first, the last block last (the model's own prediction)


@dataclass
class PlotSeries:
    name: str  # "train", "val", "lr", "grad_norm"
    steps: list[int]
    values: list[float]


@dataclass
class PlotResult:
    what: str  # loss | lr | grad_norm
    series: list[PlotSeries]
    vocab_size: int | None = None  # for the ln(V) line of a loss chart


@dataclass
class TokResult:
    text: str
    tokens: list[str]
    ids: list[int]
    vocab_size: int
    kind: str = "character"  # what one token is


@dataclass
class ReportResult:
    path: str
    size_bytes: int
    sections: list[str]
    seconds: float


_VIEW_DEFAULT = "(default: a short sample of the data)"


def _view_prompt(session: Session, prompt: str | None, reporter: Reporter) -> tuple[str, list[int], int]:
    """The prompt's text and ids (its last max_seq_len characters), and how many characters were cut."""
    data = session.data
    text = prompt or sample_prompt(data)
    ids = data.tokenizer.encode(text)
    window = session.model_config.max_seq_len
    dropped = max(0, len(ids) - window)
    if dropped:
        ids = ids[-window:]
        text = data.tokenizer.decode(ids)
        reporter.notice(f"the prompt is longer than max_seq_len={window}; reading its last {count(window, 'character')}")
    return text, ids, dropped


def _check_layer(session: Session, layer: int | None) -> int:
    n_layers = session.model_config.n_layers
    layer = 0 if layer is None else layer
    if not 0 <= layer < n_layers:
        raise UserError(f"layer must be in 0..{n_layers - 1} (the model has {count(n_layers, 'block')}), "
                        f"got {clip(str(layer))}")
    return layer


def complete_layer(session) -> list[str]:
    try:
        return [str(i) for i in range(session.model_config.n_layers)]
    except AttributeError:
        return []


def complete_head(session) -> list[str]:
    try:
        return ["all"] + [str(i) for i in range(session.model_config.n_heads)]
    except AttributeError:
        return ["all"]


@command("attn", "Show where each position looks: the attention pattern of a head, or of all heads.", params=[
    Param("prompt", str, help=f"text to read {_VIEW_DEFAULT}", positional=True),
    Param("layer", int, help="the block (default 0)", complete=complete_layer),
    Param("head", str, help="a head number, or all (default all)", complete=complete_head, meta="N|all"),
])  # fmt: skip
def cmd_attn(session: Session, args: dict, reporter: Reporter) -> AttnResult:
    layer = _check_layer(session, args["layer"])
    n_heads = session.model_config.n_heads
    head = (args["head"] or "all").strip().lower()
    if head == "all":
        heads = list(range(n_heads))
    else:
        try:
            heads = [int(head)]
        except ValueError:
            raise UserError(f"head must be a number in 0..{n_heads - 1} or all, got {clip(head)!r}") from None
        if not 0 <= heads[0] < n_heads:
            raise UserError(f"head must be in 0..{n_heads - 1} or all (the model has {count(n_heads, 'head')}), "
                            f"got {heads[0]}")
    text, ids, dropped = _view_prompt(session, args["prompt"], reporter)

    from .core.inside import attention_maps

    maps = attention_maps(session.model, ids, layer=layer).maps[0]  # (n_heads, T, T)
    return AttnResult(text, list(text), layer, heads, n_heads, [maps[h].tolist() for h in heads], dropped)


def _sampling_params(help_suffix: str) -> list[Param]:
    return [param_from_setting(spec, help=f"{spec.help} {help_suffix.format(name=spec.name)}",
                               aliases=("seed",) if spec.name == "gen_seed" else spec.aliases)
            for spec in GenConfig.specs() if spec.name in ("temperature", "top_k", "top_p", "gen_seed")]


@command("step", "Pick one next token and show each stage: logits, temperature, top-k/top-p, probabilities.",
         params=[Param("prompt", str, help=f"text to continue {_VIEW_DEFAULT}", positional=True),
                 *_sampling_params("(default: the {name} setting)")])  # fmt: skip
def cmd_step(session: Session, args: dict, reporter: Reporter) -> StepResult:
    given = {k: args[k] for k in ("temperature", "top_k", "top_p", "gen_seed") if args[k] is not None}
    settings = session.gen_config.replace(**{k: (None if v is CLEAR else v) for k, v in given.items()})
    data = session.data
    prompt = args["prompt"] or sample_prompt(data)
    ids = data.tokenizer.encode(prompt)  # the whole prompt: the pipeline reads its last window, as generate does

    from .core.inside import next_token_pipeline

    top = min(10, data.tokenizer.vocab_size)
    p = next_token_pipeline(session.model, ids, settings.temperature, settings.top_k, settings.top_p,
                            settings.gen_seed, top=top)
    itos = data.tokenizer.itos
    rows = [StepRow(r.id, itos[r.id], r.logit, r.scaled, r.top_k_kept, r.top_p_kept, r.prob, r.id == p.picked)
            for r in p.rows]
    if not any(r.picked for r in rows):  # a low-ranked pick still gets its row
        s = p.stages
        i = p.picked
        rows.append(StepRow(i, itos[i], float(s.logits[i]), None if s.scaled is None else float(s.scaled[i]),
                            bool(s.top_k_kept[i]), bool(s.top_p_kept[i]), float(s.probs[i]), True))
    return StepResult(
        prompt=prompt, temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, seed=p.seed,
        rows=rows, vocab_size=data.tokenizer.vocab_size, n_top_k_kept=p.n_top_k_kept, n_kept=p.n_top_p_kept,
        picked=itos[p.picked], picked_id=p.picked, picked_prob=p.picked_prob, picked_rank=p.picked_rank,
    )


def token_probs(model, prompt_ids: list[int], new_ids: list[int], settings) -> list[float]:
    """The probability each generated token had when it was picked (`:gen show=probs`).

    Recomputed from the model with `core.generate.sampling_stages`, the sampler's own rules, on the
    context generate read: the last max_seq_len tokens before each new one (one pass while the text
    fits the window, one per token after).
    """
    import torch

    from .core.generate import sampling_stages
    from .core.inside import listening

    if not new_ids:
        return []
    window = model.config.max_seq_len
    device = next(model.parameters()).device
    tokens = list(prompt_ids) + list(new_ids)
    out = []
    with listening(model, {}):
        if len(tokens) - 1 <= window:
            logits, _ = model(torch.tensor([tokens[:-1]], device=device))  # (1, T, V)
            rows = [logits[0, len(prompt_ids) - 1 + i] for i in range(len(new_ids))]
        else:
            rows = []
            for i in range(len(new_ids)):
                context = tokens[: len(prompt_ids) + i][-window:]
                logits, _ = model(torch.tensor([context], device=device))
                rows.append(logits[0, -1])
        for z, token in zip(rows, new_ids):
            stages = sampling_stages(z, settings.temperature, settings.top_k, settings.top_p)
            out.append(float(stages.probs[token]))
    return out


def _true_next(data, prompt: str) -> str | None:
    """The character that follows the default prompt in the data (None for random tokens)."""
    splits = getattr(data, "splits", None)
    if splits is not None:
        start, window = sample_window(data)
        if prompt != window:
            return None
        end = start + len(window)
        return data.tokenizer.decode(splits["val"][end : end + 1].tolist()) or None
    if hasattr(data, "answer") and prompt.endswith("="):
        return data.answer(prompt)[:1] or None
    return None


@command("lens", "The logit lens: what the model would guess next if it stopped after each layer.", params=[
    Param("prompt", str, help=f"text to read {_VIEW_DEFAULT}", positional=True),
])  # fmt: skip
def cmd_lens(session: Session, args: dict, reporter: Reporter) -> LensResult:
    data = session.data
    from_data = not args["prompt"]
    text, ids, _ = _view_prompt(session, args["prompt"], reporter)
    target = _true_next(data, text) if from_data else None
    targets = None
    if target is not None and target in data.tokenizer.stoi:
        targets = ids[1:] + [data.tokenizer.stoi[target]]
    else:
        target = None

    from .core.inside import logit_lens

    top = min(5, data.tokenizer.vocab_size)
    lens = logit_lens(session.model, ids, top=top, targets=targets)
    itos = data.tokenizer.itos
    rows = [
        LensRow(layer.name, [itos[i] for i in layer.top_ids[-1]], layer.top_probs[-1],
                layer.target_ranks[-1] if layer.target_ranks else None,
                layer.target_probs[-1] if layer.target_probs else None)
        for layer in lens.layers
    ]
    return LensResult(text, target, rows)


PLOT_WHAT = ("loss", "lr", "grad_norm")


def history_series(history: list[dict], what: str = "loss") -> list[PlotSeries]:
    """The curves of a training history: train and validation loss, or one per-step value."""
    if what == "loss":
        train = [(h["step"], h["train_loss"]) for h in history if h.get("train_loss") is not None]
        val = [(h["step"], h["val_loss"]) for h in history if h.get("val_loss") is not None]
        pairs = {"train": train, "val": val}
    else:
        pairs = {what: [(h["step"], h[what]) for h in history if h.get(what) is not None]}
    return [PlotSeries(name, [int(s) for s, _ in rows], [float(v) for _, v in rows])
            for name, rows in pairs.items() if rows]


@command("plot", "Chart the training history: train and validation loss, the learning rate or the gradient norm.",
         params=[Param("what", str, help="what to chart (default loss)", choices=PLOT_WHAT)])  # fmt: skip
def cmd_plot(session: Session, args: dict, reporter: Reporter) -> PlotResult:
    what = args["what"] or "loss"
    history = session.trainer.history if session.has_model else []
    series = history_series(history, what)
    if not series:
        raise UserError(f"there is no training history yet; {train_first('plot', AUTOSAVE_NAME)}")
    return PlotResult(what, series, session.data.tokenizer.vocab_size)


@command("tok", "Show text as the model reads it: its tokens and their ids.", params=[
    Param("text", str, help="the text to split into tokens", positional=True),
])  # fmt: skip
def cmd_tok(session: Session, args: dict, reporter: Reporter) -> TokResult:
    text = args["text"] or ""
    if not text:
        raise UserError(f"give some text, e.g. {cmd('tok', 'hello')}")
    tokenizer = session.data.tokenizer
    ids = tokenizer.encode(text)
    return TokResult(text, [tokenizer.itos[i] for i in ids], ids, tokenizer.vocab_size)


def complete_html(session) -> list[str]:
    return ["report.html"]


@command("report", "Write one self-contained HTML page: config, loss chart, attention maps and samples.", params=[
    Param("path", str, help="the .html file to write (default report.html)", positional=True, complete=complete_html),
])  # fmt: skip
def cmd_report(session: Session, args: dict, reporter: Reporter) -> ReportResult:
    import os

    path = Path((args["path"] or "").strip() or "report.html").expanduser()
    if path.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"the report is an HTML file; give a name ending in .html, e.g. {clip(path.stem)}.html")
    folder = path.parent if str(path.parent) else Path(".")
    try:  # a name longer than the file system allows (ENAMETOOLONG) is refused here, in one line
        if path.is_dir():
            raise UserError(f"{clip(str(path), 80)} is a folder; give a file name ending in .html")
        if not folder.is_dir():
            raise UserError(f"cannot write {clip(str(path), 80)}: the folder {clip(str(folder), 60)} does not exist")
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            raise UserError(f"cannot write {clip(str(path), 80)}: permission denied")
    except OSError as e:
        raise UserError(f"cannot write {clip(str(path), 80)}: {e.strerror or e}; choose a shorter or other path") from None
    start = time.perf_counter()
    data = session.data
    model = session.model

    from .core.generate import generate
    from .core.inside import attention_maps
    from .report import ReportData, build_report

    prompt = sample_prompt(data)
    ids = data.tokenizer.encode(prompt)[-session.model_config.max_seq_len :]
    maps = attention_maps(model, ids)
    g = session.gen_config
    start_text = "\n" if "\n" in data.tokenizer.stoi else prompt
    samples = []
    for seed in range(3):
        new = list(generate(model, data.tokenizer.encode(start_text), min(g.n, 120), g.temperature, g.top_k, g.top_p,
                            seed, cache=True, done=getattr(data, "answer_complete", None)))
        samples.append(start_text + data.tokenizer.decode(new))
    history = session.trainer.history
    report = ReportData(
        title=f"minitf report: {session.data_spec}, step {session.trainer.step}",
        config={"model": session.model_config.to_dict(), "train": session.train_config.to_dict(),
                "gen": session.gen_config.to_dict(), "data": session.data_spec},
        series=history_series(history, "loss"), vocab_size=data.tokenizer.vocab_size,
        prompt=data.tokenizer.decode(ids), layers=maps.layers, maps=maps.maps.tolist(), samples=samples,
    )
    html = build_report(report)
    import tempfile

    # A temporary name of its own (mkstemp: created new, never an existing file or folder), renamed
    # over the report when complete: a report is replaced whole or not at all.
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(html)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make the page private; a page is for sharing
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise UserError(f"cannot write {clip(str(path), 80)}: {e.strerror or e}") from None
    sections = ["config"] + (["loss chart"] if report.series else []) + ["attention maps", "samples"]
    return ReportResult(str(path), path.stat().st_size, sections, time.perf_counter() - start)
# --- speed: precision, compile, quantization (dtype and compile are TrainConfig settings; :quantize here) ---
QUANTIZE_MODES = ("int8", "off")
QUANTIZE_TOKENS = 64  # tokens generated (greedy) for each timing of :quantize int8


@dataclass
class QuantizeResult:
    mode: str  # "int8": :gen samples from the int8 copy; "off": from the float model
    changed: bool  # this command switched int8 sampling on or off (False: only shown, or already so)
    measure: QuantizeMeasure | None = None  # for :quantize int8
    device: str | None = None  # the device the float model trains on (the int8 copy runs on the CPU)


@command("quantize", "Sample with an int8 copy of the Linear layers (per-channel weights), or off again.", params=[
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
