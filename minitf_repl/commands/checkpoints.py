"""`:save`, `:load`, `:ls`: the session's checkpoints.

`:save` writes through commands.shared.save_session, the one way the shell writes a checkpoint
(also `:train`'s autosave and the model kept before a rebuild); core.checkpoint does the writing,
atomically under the folder lock, and reads and validates a checkpoint before `:load` changes anything.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core import distributed
from ..core.config import ModelConfig
from ..core.errors import CheckpointError, Interrupted, UsageError, UserError
from ..core.words import count, quoted_end
from ..registry import Param, clip
from ..render import fmt
from ..render.renderers import render
from ..render.tables import add_row
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import (REPL, SHELL, cmd, given_before, look_again, restore, setting_text, syntax, train_first,
                      typed_again, writes_one)
from .base import ablation_note, command, complete_checkpoint, switched_off
from .shared import (AUTOSAVES_KEPT, SaveResult, ablations_gone, held_line, keep_meanwhile, keep_trained_model,
                     quantized_gone, refuse_a_path, save_session, unseen_by)

if TYPE_CHECKING:  # torch-bound; schema.py resolves the name for --json
    from ..core.checkpoint import CheckpointInfo, Leftover

FAMILY = "checkpoints"  # the heading :help lists this module's commands under


DEFAULT_SAVE_NAME = "last"


# --- :save ---------------------------------------------------------------------------------------
@command("save", "Save a checkpoint (model, optimizer, run, random state), or a Hugging Face folder with hf:PATH.",
         params=[
    Param("name", str, help="checkpoint name: letters, digits, '.', '_', '-' (default last), or hf:PATH for a "
          "folder transformers loads (GPT-2 or Llama settings only)", positional=True, complete=complete_checkpoint,
          dash=False, path=True, browse="hf"),
], interruptible=True, json_version=10)  # fmt: skip
def cmd_save(session: Session, args: dict, reporter: Reporter) -> SaveResult:
    name = (args["name"] or "").strip() or DEFAULT_SAVE_NAME
    from ..core.checkpoint import check_name, check_save_target
    from ..core.paths import hf_path  # torch-free: `minitf save` with no model says so without importing torch

    folder = hf_path(name)
    if folder is not None:
        return _save_hf(session, name, folder, reporter)

    refuse_a_path(session, name)  # a place, where a name is asked: say where saves go
    # under torchrun the others never write (save_session): their folder is no matter, the name is
    try:
        check_save_target(session.checkpoint_dir, name) if distributed.is_main() else check_name(name)
    except CheckpointError as e:
        raise keep_meanwhile(session, e) from None
    # A model that exists is saved, trained or not (:gen built it; a step-0 checkpoint of a Hugging Face model is
    # trained weights; an untrained export checks an architecture): refusing "untrained" refused those too. What
    # no command built yet, :save does not build: random weights the user did not make, under a name of theirs.
    if not session.has_model:
        raise _no_model(name)
    from ..core.interrupts import cut_short

    with cut_short():  # as an interruptible command, Ctrl-C raises at once: a wait for the folder's lock says so
        saved = save_session(session, name, reporter=reporter, keep_trained=True)
    if session.untrained:
        # Saved, as above, but said, as the refusal before any model is: a `:set n_layers=2` rebuilds the model after
        # a run (the trained one kept aside), and `:save a100` then wrote random weights under a name of the user's
        # without a word, where `:save` before any :train says "train first". A learner saving the initial weights on
        # purpose (to compare with after training) loses nothing; one who thought the run's model was saved learns it.
        reporter.notice(f"this model has not trained yet: {name} holds its random initial weights "
                        f"({cmd('train')} first to save a trained one)")
    if session.sampling_copy:
        reporter.notice(int8_not_saved(name, restore(name)))
    return dataclasses.replace(saved, ablations=switched_off(session))


def int8_not_saved(name: str, brought_back: str) -> str:
    """What a save with :quantize's int8 copy on holds, in one line: a save said as with an ablation on, where the
    model :gen samples is not the one written (the float32 weights are; the copy is made from them)."""
    return (f"{name} holds the float32 weights, not the int8 copy ({cmd('quantize')}) that {cmd('gen')} samples: "
            f"{cmd('quantize', 'int8')} after {brought_back} makes it again")


def _no_model(name: str) -> UserError:
    """Nothing to save: train first. From the shell, one line that trains and saves under `name` (or, for a Hugging
    Face folder, saves from the autosave that train writes): `minitf save NAME` after it would save a new model."""
    if syntax() == REPL:
        return UserError(f"there is no model to save yet; {train_first('save', AUTOSAVE_NAME)}")
    if name.startswith("hf:"):
        return UserError(f"there is no model to save yet; {look_again('save', AUTOSAVE_NAME, name)}")
    return UserError(f"there is no model to save yet; {cmd('train', save=name)} trains one and saves it as {name}")


def _save_hf(session: Session, spec: str, folder, reporter: Reporter) -> SaveResult:
    """The model and its tokenizer as a Hugging Face folder (weights only: no optimizer, no run)."""
    import time

    from ..core.hf import ARCHITECTURES, NAMES, export_type, read_back, save_folder

    if not session.has_model:
        raise _no_model(spec)
    start = time.perf_counter()
    if not distributed.is_main():  # under torchrun rank 0 alone writes (commands.shared.save_session)
        return SaveResult(name=spec, path=os.path.abspath(folder.expanduser()), step=session.trainer.step, size_bytes=0,
                          seconds=0.0, replaced=False, architecture=export_type(session.model.config),
                          ablations=switched_off(session))
    model_type = save_folder(session.model, _folder_tokenizer(session), folder, context=_folder_context(session))
    if back := read_back(session.model_config, model_type):
        changes = ", ".join(f"{k}={setting_text(new)} (for {k}={setting_text(old)})" for k, (old, new) in back.items())
        reporter.notice(f"the folder loads back with {changes}: the same model, in {NAMES[model_type]}'s terms")
    if session.untrained:  # written all the same (an architecture's check), but said: a :set that rebuilt the model
        # (the fix of a refused export) left random weights under a trained name
        reporter.notice("this model has not trained yet: the folder holds its random initial weights")
    if session.sampling_copy:
        reporter.notice(int8_not_saved("the folder", cmd("load", spec)))
    if session.model_config.dropout and not ARCHITECTURES[model_type].KEEPS_DROPOUT:  # the architecture says
        reporter.notice(f"dropout={session.model_config.dropout:g} is not in the folder: {NAMES[model_type]} drops no "
                        "sublayer's output (its attention_dropout alone), so transformers trains it without; the "
                        "weights are the same")
    size = sum(f.stat().st_size for f in folder.expanduser().iterdir())
    session.checkpoint_written(spec)  # the weights are on disk (`:load hf:PATH` brings them back)
    return SaveResult(name=spec, path=os.path.abspath(folder.expanduser()), step=session.trainer.step, size_bytes=size,
                      seconds=time.perf_counter() - start, replaced=False, architecture=model_type,
                      ablations=switched_off(session))


def _folder_tokenizer(session: Session):
    """The tokenizer a folder is written with: the session's, or, where the weights came from a folder whose tokenizer
    is the same one, that folder's, read again for which token is which (bos, eos, unk, pad). A lab checkpoint keeps
    the tokenizer but not those, so `:load hf:` -> `:save mine` -> `:load mine` -> `:save hf:` wrote a folder with no
    eos_token, whose generate in transformers never stopped."""
    from ..core.hf import FolderTokenizer, hf_path, read_config, read_tokenizer

    tokenizer = session.data.tokenizer
    if tokenizer.kind != "bpe" or isinstance(tokenizer, FolderTokenizer) or not session.weights_from:
        return tokenizer
    folder = hf_path(session.weights_from)
    try:
        theirs = read_tokenizer(folder, session.model_config.vocab_size, read_config(folder))
    except (UserError, OSError, ValueError):  # the folder gone or changed: the session's, without them
        return tokenizer
    same = isinstance(theirs, FolderTokenizer) and theirs.tokenizer.to_str() == tokenizer.tokenizer.to_str()
    return theirs if same else tokenizer


def _folder_context(session: Session) -> int | None:
    """The window of the Hugging Face folder the model's weights came from (max_position_embeddings), read again
    from the folder, a lab checkpoint keeping where the weights came from; None where none is known or the folder
    is gone (the export then writes max_seq_len)."""
    from ..core.hf import hf_path, read_config

    folder = hf_path(session.weights_from) if session.weights_from else None
    try:
        own = read_config(folder).get("max_position_embeddings") if folder is not None else None
    except (UserError, OSError, ValueError):
        return None
    return own if isinstance(own, int) and not isinstance(own, bool) and own > 0 else None


@render.register(SaveResult)
def render_save(result: SaveResult, console: Console) -> None:
    what = "replaced checkpoint" if result.replaced else "saved" if result.architecture else "saved checkpoint"
    text = Text(f"{what} {result.name}", style="green")
    # (a wait too brief to be another save's, an :ls's look at the lock, is none: core.checkpoint.locks.BRIEF_WAIT)
    waited = (f", after {result.waited:.2f} s waiting for {result.waited_for or 'another'}'s save"
              if result.waited > 0 else "")
    text.append(f" (step {result.step:,}, {fmt.size(result.size_bytes)}, {result.seconds:.2f} s{waited})")
    say(console, text)
    if result.kept_as is not None:  # never a trained model lost to one command (docs/checkpoints-and-safety.md)
        say(console, f"{result.name} held a model trained further (step {result.kept_step:,}) than this one: it is "
                     f"kept as {result.kept_as} ({restore(result.kept_as)} brings it back)", "yellow")
    elif result.held_in is not None:  # kept nowhere new: another checkpoint holds those weights at that step
        say(console, held_line(result.name, result.held_in, result.held_step), "yellow")
    # (not where it was kept: "it is replaced" was said of the model the line before had kept)
    elif result.replaced_unseen is not None:  # two sessions, one folder: the other's work went without a word
        say(console, f"{result.name} held a model at step {result.replaced_unseen:,} {unseen_by()}: it is replaced",
            "yellow")
    if result.architecture is not None:
        note(console, f"a Hugging Face {result.architecture} folder with its tokenizer: transformers' "
                      f"from_pretrained({result.path!r}) loads it; {restore(result.name)} brings it back here")
    elif result.own_parts:  # saved whole, but "restores it" was said of a checkpoint no :load could read
        say(console, f"in {result.path}; {own_parts_line(result.name, os.path.dirname(result.path), result.own_parts)}",
            "yellow")
    else:
        note(console, f"in {result.path}; {restore(result.name)} restores it")
    ablation_note(console, result.ablations, "they are not saved (hooks, not weights): it holds the whole model")


def own_parts_line(name: str, folder: str | None, parts: list[str]) -> str:
    """What a save of a model with parts of a class of the caller's own says in place of "(:load NAME restores it)":
    the parts, that a load cannot make them (it builds the model from its config), and the way back from Python.
    Decision: saved all the same (its weights are the work, kept whole), but never promised to a :load, which said
    "the weights do not fit its model config" of the checkpoint the line before said it restored."""
    shown = ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
    where = f"directory={folder!r}, " if folder else ""
    return (f"its model has parts its config does not build ({shown}), which {restore(name)} cannot make: in Python, "
            f"build that model and load_model({name!r}, {where}model=MODEL) loads the weights into it")


# --- :load ---------------------------------------------------------------------------------------
@dataclass
class LoadResult:
    # the checkpoint's name as given; a Hugging Face folder's: hf:PATH as given, or hf: and the Hugging Face cache's
    # snapshot it was read from (a Hub model's name, a cache's models--NAME)
    name: str
    path: str  # the folder read, an absolute path: the checkpoint's (DIR/NAME), or the Hugging Face folder
    step: int  # the training step the loaded model is at: the step saved; 0 for a Hugging Face folder
    # the data the session reads now: a checkpoint's as saved (a built-in name, a task spec, or a file's path as it was
    # when saved), or the absolute path of a file of the same text found beside it where the saved path names none;
    # hf:PATH: the session's data, kept, or hf:PATH itself where the folder's tokenizer reads no text of it
    data_spec: str
    val_loss: float | None  # the last evaluated validation loss, None if never evaluated
    model_config: dict  # the checkpoint's model settings by name
    run_remaining: int  # > 0: the run was stopped and `:train` continues it
    n_params: int  # parameters of the loaded model
    saved_at: str | None  # ISO 8601, UTC
    data_missing: str | None = None  # the training data could not be had: only its vocabulary was restored
    # the text read now is not the one the checkpoint was saved with (the same characters): what that means
    data_changed: str | None = None
    # the text read now could not be compared with the one the checkpoint was saved with: its manifest kept no
    # digest of it (saved by a minitf of before data_sha256); None where it was compared, or there is no text
    data_unchecked: str | None = None
    # a mixture of one expert a token saved when its gate was 1, before it gated by the chosen expert's probability:
    # its outputs differ from when it was saved, so its saved val losses are not the model's (val_loss is None until
    # a :train measures one)
    gated_by_one: bool = False
    architecture: str | None = None  # hf:PATH: the folder's model_type (gpt2, llama); None for a checkpoint
    # the tokenizer, in words, where it is not characters: hf:PATH's, or a checkpoint's BPE (a load that switched the
    # session from characters to bpe:512 did not say so)
    tokenizer: str | None = None
    context: int | None = None  # hf:PATH: the folder's own context window where the lab's max_seq_len is shorter
    # {setting: [before, after]}: the training settings the checkpoint's run brought in place of the session's
    train_changed: dict[str, tuple] = field(default_factory=dict)
    # {setting: [before, after]}: the model settings that change no weight (dropout, causal, attention,
    # moe_aux_weight) the loaded model brought in place of the session's
    model_changed: dict[str, tuple] = field(default_factory=dict)
    kept: str | None = None  # the checkpoint the session's model, trained past every save, was kept as first
    kept_step: int | None = None  # that model's step
    # why no checkpoint held it where one had: "autosave holds another model now, or is gone" (another session's
    # saves); "was in no checkpoint" alone read as false to a user whose :train had autosaved it
    kept_why: str | None = None
    # the step val_loss was measured at: before `step` where the run stopped between two evaluations
    val_step: int | None = None
    # what the checkpoint's latest step ran in (float32, bfloat16), which dtype=auto picks by the machine; None: not
    # recorded (saved before it was), or no step
    trained_dtype: str | None = None
    # saved by name (`:save`, `save=`), not an autosave: a stopped run of it goes on into that name with `save=` (a
    # plain :train continues it into autosave, where it pushed a better run out)
    named: bool = field(default=False, metadata={"view_only": True})
    # the data's path as saved, where that file is gone and data_spec names the file of the same text found beside
    # the checkpoint (_data_beside); None: read where saved. The shell's `--load NAME --data OTHER` takes the data as
    # gone then, and OTHER in its place, as before the lookup (it was refused, naming a path it never trained on)
    data_saved: str | None = field(default=None, metadata={"view_only": True})


@command("load", "Load a checkpoint, or a Hugging Face GPT-2 or Llama folder with hf:PATH.", params=[
    Param("name", str, help="the checkpoint's name (:ls lists them), or hf:PATH for a local Hugging Face model "
          "folder (safetensors)", positional=True, complete=complete_checkpoint, path=True, browse="hf",
          required=True),
], json_version=11)  # fmt: skip
def cmd_load(session: Session, args: dict, reporter: Reporter) -> LoadResult:
    from ..core import checkpoint as ckpt
    from ..core.checkpoint import values
    from ..core.checkpoint.debris import cut_short_said
    from ..core.checkpoint.layout import checkpoint_path
    from ..core.paths import HF_PREFIX, cache_revision, hf_path  # torch-free, as the checks below: a name not saved
    # is told in 0.3 s, not 1.7

    name = (args["name"] or "").strip()
    folder = hf_path(name)
    if folder is not None:
        if (cached := _from_hub_cache(folder, reporter)) != folder:  # `hf:gpt2`: a Hub model's name, no folder here
            folder, name = cached, HF_PREFIX + str(cached)  # the session's hf:PATH reads again (tokenizer, parity)
        if (revision := cache_revision(folder)) != folder:  # a cache's models--NAME: the snapshot refs/main names
            folder, name = revision, HF_PREFIX + str(revision)  # the session's hf:PATH reads again (tokenizer, parity)
        try:
            lab_checkpoint = (folder / ckpt.MANIFEST).is_file() and not (folder / "config.json").exists()
        except (OSError, ValueError):  # a path too long or with a NUL in it: load_folder names the problem
            lab_checkpoint = False
        if lab_checkpoint:  # hf: given a lab checkpoint's folder: it loads by name
            raise CheckpointError(_path_given(session, str(folder)))
        return _load_hf(session, name, folder, reporter)
    if not name:
        names = [row.name for row in ckpt.list_checkpoints(session.checkpoint_dir) if row.error is None]
        if not names:
            raise UserError(f"there are no checkpoints in {session.checkpoint_dir} yet; {writes_one()}")
        # the command line lacks its value: exit status 2 from the shell, as a missing option value's (Exit status)
        raise UsageError(f"which checkpoint? give its name, e.g. {cmd('load', names[0])} "
                         f"(saved: {clip(', '.join(names), 120)})")
    if "/" in name or "\\" in name or name.startswith("~"):
        raise CheckpointError(_path_given(session, name))
    try:
        checkpoint_path(session.checkpoint_dir, name)  # a name not saved (and a bad one), before torch is imported
    except CheckpointError as e:
        raise (_a_file_here(session, name) or cut_short_said(e, session.checkpoint_dir, name)) from None
    # Everything is read, checked and rebuilt into new objects first; the session changes only at the end. So a
    # Ctrl-C cuts the reading and the build short at once (a 300M-parameter model takes many seconds to build on a
    # CPU, which it waited for): nothing has changed yet.
    from ..core.data import VocabOnly
    from ..core.interrupts import cut_short
    from ..core.sizes import parameter_count
    from ..session import BUILD_NOTICE_PARAMETERS

    try:
        with cut_short():
            checkpoint = ckpt.load_checkpoint(session.checkpoint_dir, name)
            gated_by_one = values.gated_by_one(checkpoint.meta, checkpoint.model_config)
            if gated_by_one:
                reporter.notice(_gate_changed(name, checkpoint))
            saved_spec = checkpoint.data_spec
            checkpoint, not_taken = _data_beside(checkpoint, reporter)
            data_saved = saved_spec if checkpoint.data_spec != saved_spec else None
            data = _checkpoint_data(session, checkpoint, None if data_saved is not None else reporter.notice)
            if not_taken is not None and isinstance(data, VocabOnly):  # why the file of its name was not read
                data = VocabOnly(data.name, data.tokenizer, data.spec, *not_taken)
            data_missing = data.description if isinstance(data, VocabOnly) else None
            if data_missing is not None and not_taken is not None and not_taken[1] is not None:  # the line, at once
                data_missing += f"; {not_taken[1]}"
            data_changed = _text_changed(checkpoint, data)
            data_unchecked = _text_unchecked(checkpoint, data)
            device = session.device
            if (n := parameter_count(checkpoint.model_config)) >= BUILD_NOTICE_PARAMETERS:
                reporter.notice(f"building {name}'s model of {n / 1e6:,.0f}M parameters and putting its weights in: "
                                "this takes a while; Ctrl-C stops it and changes nothing")
            model, trainer = ckpt.restore(checkpoint, data, device)
    except KeyboardInterrupt:
        raise Interrupted(f"load of {name} interrupted; nothing changed") from None
    if reporter.should_stop():  # Ctrl-C while reading: the session is still as it was
        raise Interrupted(f"load of {name} interrupted; nothing changed")
    kept_step, kept_why, kept = session.unsaved_step, _no_longer_in(session), _keep_unsaved(session, reporter)
    before, model_before = session.train_config, session.model_config
    off = [str(a) for a in session.ablations]  # hooks on the model the load replaces, said as :set and :data say it
    quantized = session.sampling_copy  # :quantize's copy of that model, which goes with it
    # A Hugging Face model saved as a checkpoint is at step 0 with trained weights: the manifest says so.
    since = checkpoint.meta.get("data_since_step") or 0  # the model came to this data from other data of its vocabulary
    # its function changed there (causal=on/off; a one-expert mixture's gate of 1, at its step): a save before a
    # :train writes it, so the losses of that other function stay out of :ls and :load
    measured = values.measured_since(checkpoint.meta, checkpoint.model_config)
    session.adopt(checkpoint.data_spec, data, model, trainer, weights_from=ckpt.weights_from(checkpoint),
                  data_since_step=since, measured_since_step=measured)
    ckpt.restore_rng(checkpoint)
    _bpe_origin(session.tokenizer, data, since, checkpoint.meta.get("weights_from"))
    from ..core.checkpoint.reads import same_model

    session.checkpoint_written(name, checkpoint.meta.get("meta_sha256"), model_file=checkpoint.meta["files"]["model"],
                               same_model=same_model(checkpoint.meta))
    origin = checkpoint.meta.get("origin") or {}
    session.loaded_autosave_session = origin.get("session") if origin.get("kind") == "autosave" else None
    _said_gone(session, off, quantized, reporter)
    say_dtype_moved(name, trainer, reporter)
    if "dtype" in _changed(before, session.train_config):
        from ..core.precision import precision_note

        # a lesson's dtype=bfloat16, on a CPU that emulates it: said where the setting arrives, once (not again at
        # the first :train), with the fix
        if (slow := precision_note(trainer.config.dtype, trainer.device)) is not None:
            reporter.notice(f"{name} brings dtype={trainer.config.dtype}: {slow}; {cmd('set', dtype='auto')} "
                            "trains in float32")
            trainer.already_noted(slow)
    evaluated = values.own_evaluation(checkpoint.meta, checkpoint.model_config, trainer.history)
    return LoadResult(
        name=name, path=os.path.abspath(checkpoint.path), step=trainer.step, data_spec=checkpoint.data_spec,
        val_loss=evaluated["val_loss"] if evaluated else None, model_config=checkpoint.model_config.to_dict(),
        val_step=evaluated.get("step") if evaluated else None,
        run_remaining=trainer.run_remaining, n_params=model.num_parameters(),
        saved_at=checkpoint.meta.get("saved_at") if isinstance(checkpoint.meta.get("saved_at"), str) else None,
        data_missing=data_missing, data_changed=data_changed, data_unchecked=data_unchecked,
        gated_by_one=gated_by_one, train_changed=_changed(before, session.train_config),
        model_changed=_changed(model_before, session.model_config, in_place=True),
        kept=kept, kept_step=kept_step if kept else None, kept_why=kept_why if kept else None,
        trained_dtype=trainer.trained_dtype, named=origin.get("kind") == "save", data_saved=data_saved,
        tokenizer=session.data.tokenizer.describe() if session.data.tokenizer.unit != "character" else None,
    )


def _gate_changed(name: str, checkpoint) -> str:
    """The notice of a one-expert mixture saved with the gate of 1 (values.gated_by_one), with its stale val loss and
    the line that adapts the loaded model and saves it back over NAME (from the shell a bare `train` trained a new
    model into autosave)."""
    from ..core.checkpoint import last_own_evaluation

    stale = last_own_evaluation(checkpoint.meta, checkpoint.meta["trainer"]["history"])
    loss = f", and its saved val loss {stale['val_loss']:.4f} is not this model's" if stale else ""
    return (f"{name} was saved when a mixture of one expert a token gated by 1, which taught its router nothing from "
            "the loss; it now gates by the chosen expert's probability, so its outputs differ from when it was "
            f"saved{loss}: {cmd('train', steps=100, save=name, load=name)} adapts it")


def _said_gone(session: Session, off: list[str], quantized: bool, reporter: Reporter) -> None:
    """What a load did to the parts :ablate had switched off in the model it replaced (`off`) and to :quantize's int8
    copy of it (`quantized`), said as :set and :data say it of a rebuild: the copy went without a word, and :gen
    sampled the float32 model."""
    trained = not session.untrained  # a checkpoint at step 875 (or weights from elsewhere): no "once it has trained"
    if off:
        reporter.notice(ablations_gone(off, "the loaded one", trained=trained))
    if quantized:
        reporter.notice(quantized_gone("the loaded one", trained=trained))


def dtype_moved(name: str, trainer) -> str | None:
    """One line where a loaded run's steps go on in another dtype than they ran in: dtype=auto is bfloat16 on a
    CPU with bfloat16 units and float32 on one without, so a lesson saved on one kind and continued on the other
    changed precision without a word, and its losses no longer matched the saved numbers to the digit; a dtype set by
    hand (`:set dtype=float32` after a bfloat16 run) changes it as well. A Muon run's Newton-Schulz is said too where
    it moves (dtype=bfloat16 orthogonalises in bfloat16 only where that is native): with the products' move, or in a
    line of its own where the products stay. None where nothing changes, or the checkpoint did not record it."""
    from ..core.precision import newton_schulz_dtype, training_dtype

    setting = trainer.config.dtype
    was, now = trainer.trained_dtype, training_dtype(setting, trainer.device)
    # Muon's Newton-Schulz follows the machine under dtype=bfloat16 (bfloat16 where it is native, else float32) while
    # the products stay bfloat16: a lesson moved between the two kinds changed its orthogonalisation and its losses
    # in the last digits, said by nothing. Said only of Muon steps that go on as Muon steps: an AdamW run, or a
    # checkpoint of before it was recorded (None: not known), has nothing to compare
    ns_was = trainer.trained_ns_dtype if trainer.config.optimizer == "muon" else None
    ns_now = newton_schulz_dtype(setting, trainer.device)
    ns_moved = ns_was is not None and ns_was != ns_now
    if was is None or was == now:
        if not ns_moved:
            return None
        units = ("this machine multiplies bfloat16 natively" if ns_now == "bfloat16"
                 else f"this {'CPU' if trainer.device.type == 'cpu' else 'machine'} has no bfloat16 units")
        return (f"{name}'s Muon steps orthogonalised in {ns_was} and go on here in {ns_now} ({units}; under "
                f"dtype={setting} Newton-Schulz runs in bfloat16 only where it is native): the losses move in the "
                "last digits, so the saved run's numbers are not repeated to the digit")
    ns = ""
    if ns_moved and (ns_was, ns_now) != (was, now):  # the products' move alone said, Newton-Schulz's not
        ns = f", Muon's Newton-Schulz in {ns_now} where it ran in {ns_was}"
    elif ns_moved:
        ns = ", Muon's Newton-Schulz with them"
    if setting == "auto":
        here = ("dtype=auto: this machine multiplies bfloat16 natively" if now == "bfloat16"
                else "dtype=auto: this machine has no bfloat16 units")
        back = (f"; {cmd('set', dtype='float32')} goes on as it trained" if was == "float32"
                else "; bfloat16 here would be emulated, and slower")
    else:  # the setting moved it, not the machine ("this machine has no bfloat16 units" was said of one with them)
        here = f"dtype={setting} is set"
        back = f"; {cmd('set', dtype='auto' if training_dtype('auto', trainer.device) == was else was)} goes on " \
               "as it trained"
    return (f"{name}'s steps ran in {was} and go on here in {now}{ns} ({here}): the losses continue, but differ "
            f"from the saved run's numbers by rounding (about 0.01){back}")


# The dtype_moved lines said of each trainer: `:load` says one, and the `:train` after it must not say it again, while
# a `:set dtype=` between them makes another, which that :train says (a bfloat16 run went on in float32 unsaid)
_DTYPE_SAID: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def say_dtype_moved(name: str, trainer, reporter: Reporter) -> None:
    """Say dtype_moved's line for `trainer`'s next steps, once per trainer and line."""
    line = dtype_moved(name, trainer)
    said = _DTYPE_SAID.setdefault(trainer, set())
    if line is not None and line not in said:
        said.add(line)
        reporter.notice(line)


def _keep_unsaved(session: Session, reporter: Reporter) -> str | None:
    """Before a load replaces the model: one trained past every checkpoint (its autosave failed, e.g. on a full
    disk) is kept first, as before a rebuild, else the load would drop those steps without a word. With autosave
    off the user chose not to keep it: it goes, and a notice says so. A failed keep fails the load."""
    if session.unsaved_step is None:
        return None
    return keep_trained_model(session, reporter=reporter, action="load")


def _no_longer_in(session: Session) -> str | None:
    """Why the model is in no checkpoint where it was in one (as :quit says it), else None. Asked before a keep, which
    saves it anew."""
    gone = session.saved_over
    return f"{gone} holds another model now, or is gone" if gone else None


def _changed(before, after, in_place: bool = False) -> dict[str, tuple]:
    """{setting: (before, after)} of two configs, for each setting whose value differs (`in_place`: of those that
    change no weight only, which a :set before the load meant for whatever model came: the others make the model;
    and only where `before` was set, not a default: a Llama loaded into a fresh session listed its own rope_base
    and norm_eps as if they had replaced the user's; nor one the loaded model does not read, experts_per_token on a
    model without experts)."""
    return {spec.name: (getattr(before, spec.name), getattr(after, spec.name)) for spec in before.specs()
            if getattr(before, spec.name) != getattr(after, spec.name)
            and (not in_place or (spec.in_place and getattr(before, spec.name) != spec.default
                                  and spec.name not in after.unread()))}


def _path_given(session: Session, name: str) -> str:
    """What `:load PATH` says. It takes a checkpoint's name in the checkpoint folder, which "use ASCII letters, digits
    ..." did not tell a user who gave a folder's path: a checkpoint elsewhere is one option away, a Hugging Face
    folder one prefix."""
    import shlex
    from pathlib import Path

    from ..core.checkpoint import MANIFEST
    from ..core.checkpoint.layout import NAME

    path = Path(name).expanduser()
    try:
        if (path / "config.json").is_file():
            return f"{clip(name)} is a Hugging Face folder; {restore('hf:' + name)} loads it"
        if (path / MANIFEST).is_file() and NAME.match(path.name):
            if path.parent.resolve() == Path(session.checkpoint_dir).expanduser().resolve():
                return f"{clip(name)} is a path, and a checkpoint loads by its name: {restore(path.name)}"
            if syntax() == REPL:  # the session moves to that folder, the model it holds kept until the load
                return (f"{clip(name)} is a checkpoint in another folder, and checkpoints load by name from "
                        f"{session.checkpoint_dir}; {cmd('set', checkpoint_dir=str(path.parent))} then "
                        f"{cmd('load', path.name)}")
            return (f"{clip(name)} is a checkpoint in another folder, and checkpoints load by name from "
                    f"{session.checkpoint_dir}; start minitf with its folder: minitf --checkpoint-dir "
                    f"{shlex.quote(str(path.parent))} --load {path.name}")
    except (OSError, ValueError):  # a path too long or with a NUL in it, a folder that cannot be read
        pass
    return (f"{clip(name)!r} is not a valid checkpoint name but a path; give a name from {session.checkpoint_dir} "
            f"({cmd('ls')} lists them), or hf:PATH for a Hugging Face folder")


# What a file named as a checkpoint is, by its name where its bytes do not say: torch.save's older format, and the
# names it is saved under
PICKLE_SUFFIXES = (".pt", ".pth", ".ckpt", ".bin", ".pkl", ".pickle")


def _a_file_here(session: Session, name: str) -> CheckpointError | None:
    """What `:load NAME` (`minitf --load NAME`) says where NAME is no checkpoint of the folder but a file in the current
    one (`--load ckpt.pt`): "no checkpoint named 'ckpt.pt'; saved ones: ..." did not say why the file was not read,
    nor what reads it. A checkpoint's folder here (a handed-out lesson unzipped) gets the line that loads it, as
    `--load ./lesson1` does: "save one under that name first" was said of the checkpoint in front of the user. None
    where there is no such file."""
    from pathlib import Path

    from ..core.checkpoint import MANIFEST
    from ..core.checkpoint.layout import NAME, is_pickle

    path = Path(name)
    try:
        if os.path.lexists(Path(session.checkpoint_dir).expanduser() / name):
            return None
        if path.is_dir():
            return CheckpointError(_path_given(session, os.path.join(os.curdir, name))) \
                if NAME.match(name) and (path / MANIFEST).is_file() else None
        if not path.is_file():
            return None
        with open(path, "rb") as f:  # a regular file (is_file): 9 bytes, never unpickled
            head = f.read(9)
    except (OSError, ValueError):
        return None
    where = f"{clip(name)} here is a file, not a checkpoint in {session.checkpoint_dir}"
    if is_pickle(head) or path.suffix.lower() in PICKLE_SUFFIXES:
        return CheckpointError(f"{where}: minitf never opens a .pt or pickle (torch.save) file, which can run code "
                               "when read; a state dict you trust goes into MiniTransformerLM from Python "
                               "(docs/checkpoints-and-safety.md, \"A .pt file\")")
    return CheckpointError(f"{where}: a checkpoint is a folder that {cmd('save', 'NAME')} writes there, loaded by its "
                           f"name ({cmd('ls')} lists them)")


def _bpe_origin(tokenizer, data, since: int, weights_from: str | None) -> None:
    """Which text a loaded BPE (:set tokenizer=bpe:N) was trained on, as a BPE trained in this session knows it
    (shared.bpe_trained_elsewhere): its checkpoint's text where the model began on it (a BPE is trained on the text
    in use, and the model rebuilt at step 0), else another text. Unknown, a later `:data pydoc` read pydoc with a
    BPE of another text without a word, and `:set tokenizer=bpe:512` then said "nothing changed"."""
    from ..core.data import TextCorpus

    if tokenizer is None or getattr(tokenizer, "kind", None) != "bpe" or weights_from:  # a folder's: not the lab's
        return
    if getattr(tokenizer, "trained_on", None) is None and isinstance(data, TextCorpus):
        tokenizer.trained_on = (data.name, hash(data.split_text("train"))) if since == 0 else ("another", None)


def _from_hub_cache(folder, reporter: Reporter):
    """`hf:NAME` that names no file or folder here but a Hub model (`hf:gpt2`, as transformers takes it): the snapshot
    of it in the Hugging Face cache (core.hf.folder.hub_snapshot: refs/main's, complete), said in one line, which
    names it for the next time; else `folder` as given. Found, it was not loaded: "gpt2 does not exist; ...; gpt2 is
    in the Hugging Face cache"."""
    try:
        if folder.is_absolute() or str(folder).startswith((".", "~")) or os.path.lexists(folder):
            return folder  # a path, or a folder here named as a model is: that folder (torch not imported for it)
    except (OSError, ValueError):  # a name too long, a NUL: read_folder names the problem
        return folder
    from ..core.hf.folder import hub_snapshot

    snapshot = hub_snapshot(folder)
    if snapshot is None:
        return folder
    reporter.notice(f"{folder} is no folder here: read from the Hugging Face cache, hf:{snapshot}")
    return snapshot


def _load_hf(session: Session, spec: str, folder, reporter: Reporter) -> LoadResult:
    """A Hugging Face folder as the session's model: its weights, its tokenizer reading the session's text.

    The text data stays (re-read by the folder's tokenizer, so `:train` fine-tunes on it); with a
    task, or data that cannot be had, the model comes with its tokenizer only. Training starts a new
    run at step 0 under the session's training settings.
    """
    from ..core.data import TokenizerOnly
    from ..core.hf import load_folder
    from ..core.train import Trainer

    loaded = load_folder(folder)
    model, tokenizer = loaded.model, loaded.tokenizer
    data, why = _text_read_by(session, tokenizer, model.config.max_seq_len)
    data_spec, data_missing = session.data_spec, None
    if isinstance(why, tuple):  # text too short for the folder's window: kept for a shorter one, where RoPE allows it
        from ..core.variants import position_kind

        rotary = not position_kind(model.config).learned
        why = why[0] + (f"; {cmd('set', max_seq_len='N')} below it reads it" if rotary else "")
        short, data = ((session.data_spec, data) if rotary else None), None
    else:
        short = None
    if data is None:
        data = TokenizerOnly(tokenizer, spec, why, short)
        data_spec, data_missing = spec, data.description
    model = model.to(session.device)
    trainer = Trainer(model, data, session.train_config, session.device)
    if reporter.should_stop():
        raise Interrupted(f"load of {spec} interrupted; nothing changed")
    kept_step, kept_why, kept = session.unsaved_step, _no_longer_in(session), _keep_unsaved(session, reporter)
    model_before = session.model_config
    off, quantized = [str(a) for a in session.ablations], session.sampling_copy  # of the model that goes
    session.adopt(data_spec, data, model, trainer, weights_from=spec)
    session.last_checkpoint = None
    _said_gone(session, off, quantized, reporter)
    # A folder holds no random state (a lab checkpoint brings its own): its stream starts from the seed, as a model
    # built here does, so its first :train (dropout's masks) is the same whatever the session did before the load.
    import torch

    torch.manual_seed(session.train_config.seed)
    return LoadResult(
        name=spec, path=os.path.abspath(loaded.path), step=0, data_spec=data_spec, val_loss=None,
        model_config=model.config.to_dict(), run_remaining=0, n_params=model.num_parameters(), saved_at=None,
        data_missing=data_missing, architecture=loaded.model_type, tokenizer=_with_unused_rows(tokenizer),
        context=loaded.context, model_changed=_changed(model_before, session.model_config, in_place=True),
        kept=kept, kept_step=kept_step if kept else None, kept_why=kept_why if kept else None,
    )


def _with_unused_rows(tokenizer) -> str:
    """The tokenizer in words, with the embedding's rows past its own tokens where the model has more (a size rounded
    up): "400 tokens" alone hid that 100 of them are no text's, which :step then lists as <unused N>."""
    own = getattr(tokenizer, "own_size", tokenizer.vocab_size)
    if own >= tokenizer.vocab_size:
        return tokenizer.describe()
    return (f"{tokenizer.describe()}: {own:,} of the tokenizer's own, and {count(tokenizer.vocab_size - own, 'row')} "
            "of the embedding past them that no text reads (<unused N> in the views)")


def _text_read_by(session: Session, tokenizer, max_seq_len: int):
    """(the session's text data read by `tokenizer`, None), or (None, why not): None when the data is a task; else
    in words, since the data may well be text (a character the tokenizer lacks, too short a text, a file gone).
    A task whose characters are the tokenizer's is kept: a folder `:save hf:` wrote from that task's model.
    Text too short for the window: (the text read, (why not,)), for a shorter window to take up again."""
    from ..core.data import TextCorpus, load_data
    from ..core.hf import PREFIX

    current = session.loaded_data
    if session.data_spec.startswith(PREFIX) and not isinstance(current, TextCorpus):
        return None, None  # another folder's tokenizer alone (no text): not a file named hf:PATH to look for
    try:
        data = current.retokenized(tokenizer) if isinstance(current, TextCorpus) else load_data(session.data_spec, tokenizer)
        if not isinstance(data, TextCorpus) and data.tokenizer.vocab != tokenizer.vocab:
            return None, None
    except UserError as e:
        problem = str(e).split("; ")[0]  # what is wrong; the fix after it was written for another command
        return None, f"{clip(session.data_spec, 40)}: {problem}"
    try:
        data.check_fits(max_seq_len)
    except UserError as e:
        if isinstance(data, TextCorpus):
            return data, (f"{clip(session.data_spec, 40)}: {str(e).split('; ')[0]}",)
        problem = str(e).split("; ")[0]  # what is wrong; the fix after it was written for another command
        return None, f"{clip(session.data_spec, 40)}: {problem}"
    return data, None


def _data_beside(checkpoint, reporter: Reporter):
    """(the checkpoint, with its data at the file of the same text found beside it where the saved path names none,
    said in a notice; None, or (reason, fix) for the stand-in where a file of its name is there but not taken). A
    lesson handed out with its text kept the teacher's absolute path: a student's `:train` said "put the file back"
    of a path on another machine, with the very file in the current folder. A file is taken by its SHA-256 alone;
    where an older minitf kept no digest, whether it is the same text is the user's to say, and the line that reads
    it is given (the load's data line, and the stand-in's refusal to train)."""
    from ..core.checkpoint import data_found_elsewhere

    found = data_found_elsewhere(checkpoint, reporter.notice)
    if found is None:
        return checkpoint, None
    path, same = found
    shown = _shown_path(path)
    if same:
        # in the current folder itself: ./student/course 2/poem.txt, beside the checkpoints, was "found here" too
        here = "here " if os.path.dirname(shown) == os.curdir else ""
        reporter.notice(f"{checkpoint.name}'s data, {clip(checkpoint.data_spec, 200)}, found {here}as {shown} (the "
                        "same text)")
        return dataclasses.replace(checkpoint, data_spec=str(path)), None
    if same is False:
        return checkpoint, (f"not there, and {shown} holds another text", None)
    import shlex

    # --data takes the place of data gone; the shell's line runs the command typed after it again (typed_again): a
    # bare `minitf --load NAME --data FILE`, pasted, opened the REPL where `... train --steps 5` had failed
    reads = (cmd("data", shown) if syntax() == REPL
             else f"{restore(checkpoint.name)} --data {shlex.quote(shown)}{typed_again()}")
    reason = (f"not there; {shown} has its name, but an older minitf kept no digest of the text to tell whether it "
              "is the same")
    return checkpoint, (reason, f"{reads} reads it in its place (the model is kept where its characters are the same)")


def _shown_path(path) -> str:
    """A file's path as a line names it: ./NAME under the current folder, else the whole path, its `..` gone (a folder
    of checkpoints given as elsewhere/../C/ck showed .../elsewhere/../C/ck/poem.txt)."""
    path = _normal(path)
    try:
        relative = os.path.relpath(path)
    except (OSError, ValueError):  # no current folder; another drive (Windows)
        return str(path)
    return str(path) if relative.startswith(os.pardir + os.sep) else os.path.join(os.curdir, relative)


def _normal(path) -> str:
    """`path` without its `.` and `..`: as written where that names the same file, else resolved (a `..` after a
    link leads out of the folder the link points to, not back to the one it is in)."""
    normal = os.path.normpath(path)
    try:
        return normal if os.path.samefile(normal, path) else str(os.path.realpath(path))
    except (OSError, ValueError):  # gone meanwhile, a name too long: as written
        return normal


def _text_changed(checkpoint, data) -> str | None:
    """Said where the text read now differs from the one the checkpoint was saved with (its data_sha256): a file
    rewritten since with the same characters loaded without a word, and its validation split, the last tenth, could
    then hold text the model had trained on."""
    saved, now = checkpoint.meta.get("data_sha256"), getattr(data, "digest", None)
    if saved is None or now is None or saved == now:
        return None
    # a character model's vocabulary was checked against the file's before; a BPE (saved with the model) reads any
    # characters, and "the same characters" was said of a file with 8 new ones
    same = " (the same characters)" if data.tokenizer.kind == "char" else ""
    return (f"{checkpoint.data_spec} holds another text than when {checkpoint.name} was saved{same}: "
            "its validation split may hold text the model trained on, so its val loss can read too low; put the "
            "original file back, or train a new model on this text")


def _text_unchecked(checkpoint, data) -> str | None:
    """Said where the text read now cannot be compared with the one the checkpoint was saved with: a manifest of
    before data_sha256 keeps no digest, and a rewritten file loaded in silence, as an unchanged one did. None where
    it was compared, or there is no text to compare (generated data, data gone)."""
    if checkpoint.meta.get("data_sha256") is not None or getattr(data, "digest", None) is None:
        return None
    return (f"{checkpoint.data_spec} could not be checked against the text {checkpoint.name} was saved with (an "
            "older minitf kept no digest of it): if it changed since, the val loss can read too low")


def _checkpoint_data(session: Session, checkpoint, notice=None):
    """The data the checkpoint was trained on: the session's own if it is the same, else loaded, else
    (a file that is gone, say) a stand-in with the saved vocabulary, so the model still generates.

    `notice(line)` is told before a large file is read, as :data tells it (core.data.reading_notice): `:load` of a
    checkpoint of 100 MiB of text was silent for 7 s. None: said already (a file of its name found beside the
    checkpoint was said as read, for its digest: core.checkpoint.data_found_elsewhere), or no one to tell.

    The session's copy of a file is taken only while the file is as it was read (core.data.file_stamp): a file grown,
    rewritten or deleted since is read as it is now, as `minitf load` reads it, and its changed vocabulary or its
    absence said. The REPL trained on the old copy without a word, and a stand-in of a file gone at one :load kept
    saying "not available" after another file was put there."""
    from ..core.checkpoint import checkpoint_data
    from ..core.data import file_stamp, lasting_spec, reading_notice

    loaded = session.loaded_data
    same = checkpoint.data_spec in (session.data_spec, lasting_spec(session.data_spec))  # saved as lasting_spec
    # built-in data, a Hugging Face folder's tokenizer and a stand-in have no stamp, nor a file that is not there
    as_read = getattr(loaded, "stamp", None) == file_stamp(session.data_spec)
    if loaded is not None and same and as_read and loaded.tokenizer.vocab == checkpoint.vocab:
        return loaded
    if notice is not None and (said := reading_notice(checkpoint.data_spec)) is not None:
        notice(said)
    return checkpoint_data(checkpoint)


def at_step(val_step: int | None, step: int) -> str:
    """" at step 3" after a val loss measured before the step it is shown beside (a run stopped between two
    evaluations, as :train's end line says it), else nothing."""
    return f" at step {val_step:,}" if val_step is not None and val_step != step else ""


@render.register(LoadResult)
def render_load(result: LoadResult, console: Console) -> None:
    text = Text(f"loaded {result.name}", style="green")
    text.append(f": step {result.step:,}, data {result.data_spec}, {count(result.n_params, 'parameter')}")
    if result.val_loss is not None:
        text.append(f", val loss {result.val_loss:.4f}" + at_step(result.val_step, result.step))
    say(console, text)
    if result.kept:
        why = f" ({result.kept_why})" if result.kept_why else ""
        say(console, f"the model trained to step {result.kept_step:,} was in no checkpoint{why}: kept as "
                     f"{result.kept} ({restore(result.kept)} brings it back)", "yellow")
    sizes = ("n_layers", "d_model", "n_heads", "d_ff", "max_seq_len")
    shape = ", ".join(f"{k}={fmt.value(result.model_config[k])}" for k in sizes if k in result.model_config)
    # The architecture's other settings where not the defaults: a loaded rope/rmsnorm/swiglu/GQA model read as
    # "model: n_layers=2, d_model=32, ..." alone, a default model as far as the line said
    shape += "".join(f", {spec.name}={fmt.value(result.model_config[spec.name])}" for spec in ModelConfig.specs()
                     if spec.name not in sizes + ("vocab_size",) and spec.derived_from is None
                     and spec.name in result.model_config and result.model_config[spec.name] != spec.default)
    if shape:
        note(console, f"model: {shape}")
    if result.architecture is not None:
        note(console, f"architecture {result.architecture}, tokenizer: {result.tokenizer}")
    elif result.tokenizer is not None:
        note(console, f"tokenizer: {result.tokenizer}")
    if result.context is not None:
        say(console, f"context cut to max_seq_len={result.model_config['max_seq_len']:,} of the model's "
                     f"{result.context:,} positions (RoPE: the weights are the same at any length)", "yellow")
    if result.data_missing:
        say(console, f"data: {result.data_missing}", "yellow")
    if result.data_changed:
        say(console, f"data: {result.data_changed}", "yellow")
    if result.data_unchecked:
        note(console, f"data: {result.data_unchecked}")
    if result.train_changed:
        # :load restores the checkpoint's run, its settings with it: a :set before it did not last, and says so
        moved = ", ".join(f"{name} {setting_text(old)} -> {setting_text(new)}"
                          for name, (old, new) in result.train_changed.items())
        say(console, f"training settings of the checkpoint's run: {moved}; {cmd('set', 'KEY=VALUE')} changes them",
            "cyan")
    if result.model_changed:  # dropout=0.2 set before the load is not the loaded model's: said, as training's are
        moved = ", ".join(f"{name} {setting_text(old)} -> {setting_text(new)}"
                          for name, (old, new) in result.model_changed.items())
        say(console, f"model settings of the loaded model: {moved}; {cmd('set', 'KEY=VALUE')} changes them "
                     "(the weights kept)", "cyan")
    if result.run_remaining > 0:
        into = (f"{cmd('train', save=result.name, load=result.name)} continues it into {result.name} "
                f"({cmd('train', load=result.name)} alone, into {AUTOSAVE_NAME})" if result.named else
                f"{cmd('train', load=result.name)} continues it")  # as the shell's stop line names it
        if result.data_missing:  # the line above said training does not work without it
            into += " once its data is back"
        say(console, f"the run was stopped with {count(result.run_remaining, 'step')} left: {into}", "yellow")
    if result.saved_at:
        note(console, f"saved {local_minute(result.saved_at)}, from {result.path}")  # as :ls shows it: local time
    if syntax() == SHELL:  # as with :data and :set, a one-shot session and the model it loaded end here
        note(console, "loaded for this command only: a checkpoint lasts one command from the shell, so give it "
                      f"before that command, e.g. {given_before('gen', '--load', result.name)}")


# --- :parity ------------------------------------------------------------------------------------
@dataclass
class ParityLayer:
    layer: str  # "embed", "blocks.0", ...: the residual stream after it
    max_abs_diff: float  # max |lab - transformers| over every position and feature
    # max |lab - transformers| / max(1, |transformers|), feature by feature: the layer agrees where it is at most the
    # tolerance, float32's rounding growing with the value; None: not measured (max_abs_diff bounds it)
    max_rel_diff: float | None = None


@dataclass
class ParityResult:
    # the Hugging Face folder compared with, an absolute path (a Hub model's name: its snapshot in the Hugging Face
    # cache)
    path: str
    architecture: str  # the folder's model_type
    prompt: str  # the text both models read (its last max_seq_len tokens); if none was given: a sample of the data
    n_tokens: int  # tokens of the prompt, as the lab's tokenizer reads it (both models read these ids)
    max_logit_diff: float  # max |lab - transformers| over every position's logits
    tolerance: float  # the largest relative difference taken as equal (ParityLayer.max_rel_diff)
    layers: list[ParityLayer]  # one per residual stream compared: "embed", then each block in order (blocks.0, ...)
    first_diverging: str | None  # the first layer whose difference exceeds the tolerance; None: none does
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate: the lab's model is without them
    # the logits' difference relative as max_rel_diff's is; None: not measured (max_logit_diff bounds it)
    max_logit_rel_diff: float | None = None


@command("parity", "Compare the model with transformers reading a folder: logits and each layer's residual stream.",
         params=[
    Param("path", str, help="hf:PATH, the Hugging Face folder to compare with (:load hf:PATH loads it here first)",
          positional=True, path=True, browse="hf"),
    Param("prompt", str, help="the text both models read (default: a short sample of the data)", meta="TEXT"),
    Param("tolerance", float, help="the largest difference taken as equal, relative to the value (|diff| / max(1, "
          "|value|)), in (0, 1] (default 1e-4)"),
], json_version=3, guide="real-models.md#checking-against-the-reference-parity-hfpath")  # fmt: skip
def cmd_parity(session: Session, args: dict, reporter: Reporter) -> ParityResult:
    from ..core.paths import cache_revision, hf_path  # torch-free: the errors up to "no model" are one line without
    # torch
    from .base import switched_off, view_prompt

    tolerance = args["tolerance"]
    if tolerance is not None and not 0 < tolerance <= 1:  # NaN fails too; above 1 no float32 difference means nothing
        raise UserError(f"tolerance must be a number in (0, 1], e.g. 1e-4; got {clip(str(tolerance))}")
    given = (args["path"] or "").strip()
    folder = hf_path(given)
    if folder is not None:  # `hf:gpt2` from the Hugging Face cache, as :load reads it; a cache's models--NAME: the
        folder = cache_revision(_from_hub_cache(folder, reporter))  # snapshot its refs/main names
    if folder is None:  # a path typed without hf: is that folder, written as hf:PATH
        from pathlib import Path

        from ..core.checkpoint import MANIFEST

        def exists(path: Path, folder: bool) -> bool:  # a name too long, a NUL: no such file, never an error
            try:
                return path.is_dir() if folder else path.is_file()
            except (OSError, ValueError):
                return False

        # a path as typed is that folder (`:parity ~/models/gpt2`), a name a lab checkpoint's or nothing's
        there = bool(given) and (exists(Path(given).expanduser(), True) or "/" in given or given.startswith(("~", ".")))
        if given and not there and exists(Path(session.checkpoint_dir) / given / MANIFEST, False):
            # a lab checkpoint's name: "e.g. :parity hf:small" named a folder there is none of
            how = (f"{cmd('load', given)}, then {cmd('save', 'hf:PATH')} writes its model as one" if syntax() == REPL
                   else f"{cmd('save', 'hf:PATH', load=given)} writes its model as one")
            raise UserError(f"{clip(given)} is a lab checkpoint, and parity compares a model with a Hugging Face "
                            f"folder: {how}, and {cmd('parity', 'hf:PATH', load=given)} compares them")
        example = f"hf:{clip(given, 200)}" if there else "hf:~/models/gpt2"
        raise UserError(f"give the folder to compare with as hf:PATH, e.g. {cmd('parity', example)}")
    if not folder.expanduser().is_dir():  # before "no model yet", whose fix (load it) would fail the same way
        raise UserError(f"there is no folder {clip(str(folder), 200)}; give a Hugging Face model's folder (its "
                        f"config.json and weights), e.g. {cmd('parity', 'hf:~/models/gpt2')}")
    if not session.has_model:
        # the folder's own problem first (a truncated safetensors, an architecture the lab does not load): the way
        # on below loads it, which then failed on that (the checks of a load that read no tensor's data)
        from ..core.hf import architecture, lab_config, read_folder

        checked = read_folder(folder.expanduser())  # the weights' headers, no tensor's data
        architecture(checked)  # one the lab loads
        lab_config(checked)
        # from the shell one line that runs: "--load hf:X loads the folder's" was a fragment of one
        raise UserError("there is no model to compare yet; " + (
            f"{cmd('load', clip(given, 200))} loads the folder's, then {cmd('parity', clip(given, 200))} compares"
            if syntax() == REPL else f"{cmd('parity', clip(given, 200), load=clip(given, 200))} loads the folder's "
                                     "model and compares it"))
    from ..core.hf.parity import DEFAULT_TOLERANCE, NotTheFoldersModel, compare

    tolerance = DEFAULT_TOLERANCE if tolerance is None else tolerance
    prompt, ids, _ = view_prompt(session, args["prompt"], reporter)  # its last max_seq_len tokens
    try:
        result = compare(session.model, folder, ids, tolerance)
    except NotTheFoldersModel as e:
        spec = f"hf:{clip(str(folder), 200)}"  # the REPL loads it, then compares; the shell does both in one
        fix = (f"{restore(spec)} loads it, then {cmd('parity', spec)} compares them" if syntax() == REPL else
               f"{cmd('parity', spec, load=spec)} compares the folder's own model")
        raise CheckpointError(f"{e.problem}; {fix}") from None
    return ParityResult(
        path=os.path.abspath(folder.expanduser()), architecture=result.model_type, prompt=prompt, n_tokens=len(ids),
        max_logit_diff=result.max_logit_diff, max_logit_rel_diff=result.max_logit_rel_diff, tolerance=tolerance,
        layers=[ParityLayer(name, diff, size) for name, diff, size in result.layers],
        first_diverging=result.first_diverging,
        ablations=switched_off(session),
    )


@render.register(ParityResult)
def render_parity(result: ParityResult, console: Console) -> None:
    say(console, f"the lab's model against transformers ({result.architecture}, {result.path}) on "
                 f"{quoted_end(result.prompt, 40)} ({count(result.n_tokens, 'token')})", "bold")
    note(console, "max |lab - transformers| of the residual stream after each layer, every position and feature; "
                  "relative: each |diff| / max(1, |h|), as float32's rounding grows with |h|; the same: relative at "
                  f"most {result.tolerance:g}")
    table = Table(header_style="bold", box=None)
    table.add_column("after")
    table.add_column("max |diff|", justify="right")
    table.add_column("relative", justify="right")
    table.add_column("")

    def rel(measured: float | None, absolute: float) -> float:  # unmeasured: the absolute difference bounds it
        return absolute if measured is None else measured

    same = {row.layer: rel(row.max_rel_diff, row.max_abs_diff) <= result.tolerance for row in result.layers}
    for row in result.layers:
        add_row(table, row.layer, f"{row.max_abs_diff:.2e}", f"{rel(row.max_rel_diff, row.max_abs_diff):.2e}",
                Text("same" if same[row.layer] else "DIVERGES" if row.layer == result.first_diverging else "differs",
                     style="green" if same[row.layer] else "bold red"))
    console.print(table)
    logit_rel = rel(result.max_logit_rel_diff, result.max_logit_diff)
    # the relative difference only where it is another number (a largest difference in logits above 1 in size)
    relative = f", relative {logit_rel:.2e}" if logit_rel != result.max_logit_diff else ""
    logits = f"logits: max |diff| {result.max_logit_diff:.2e}{relative} (tolerance {result.tolerance:g})"
    logits_same = logit_rel <= result.tolerance
    names = [row.layer for row in result.layers]
    after = result.layers[names.index(result.first_diverging) + 1:] if result.first_diverging in names else []
    again = [row.layer for row in after if same[row.layer]]
    if result.first_diverging is None and logits_same:
        say(console, f"{logits}: the same model", "green")
    elif result.first_diverging is None:
        say(console, f"{logits}: the residual streams agree, the head does not (ln_f or lm_head differ)", "red")
    elif not again:
        say(console, f"{logits}: the models part at {result.first_diverging}; every layer after it inherits "
                     "the difference", "red")
    else:  # a difference the next layers do not carry: said as the rows show it, not as a parting for good
        agree = f"{again[0]} agrees" if len(again) == 1 else f"{len(again)} of the {len(after)} layers after it agree"
        say(console, f"{logits}: the models differ at {result.first_diverging}, but {agree} again, so the later layers "
                     "do not carry that difference on", "green" if logits_same else "red")
    ablation_note(console, result.ablations)


# --- :ls -----------------------------------------------------------------------------------------
@dataclass
class LsResult:
    rows: list[CheckpointInfo]  # newest first; a broken one has `error` set
    directory: str  # the checkpoint folder listed
    # folders there that hold a checkpoint under a name that cannot be loaded (renamed by hand), not in `rows`
    misnamed: list[str] = field(default_factory=list)
    all: bool = False  # all=on: the view lists every checkpoint, not the newest 40 (`rows` has all of them)
    # the autosave slots (autosave-1 ..) that a checkpoint not written by an autosave holds: rotation steps over them,
    # so fewer runs stay loadable, and in the list they looked like the runs before
    pinned: list[str] = field(default_factory=list)
    # why a folder given that does not exist holds none, and the folder of a near name that holds some (layout's
    # missing_folder); None where it exists or is the default one before any save
    missing: str | None = field(default=None, metadata={"view_only": True})
    # what saves cut short (a minitf killed while saving) left in the folder, which the next save there removes: `du`
    # counted a copy of the model per killed save that the listing never showed (core.checkpoint.debris)
    leftovers: list[Leftover] = field(default_factory=list, metadata={"view_only": True})


# The view lists the newest this many: a folder of 400 checkpoints was 800 lines, the newest (listed first) far
# above the prompt, and the oldest next to it
LS_SHOWN = 40


@command("ls", "List the saved checkpoints: step, val loss, data, size and date.", aliases=("checkpoints",),
         params=[Param("all", bool, default=False, help=f"list every checkpoint, not the newest {LS_SHOWN}")],
         json_version=10)  # fmt: skip
def cmd_ls(session: Session, args: dict, reporter: Reporter) -> LsResult:
    from ..core.checkpoint import leftovers, list_checkpoints, misnamed

    from ..core.checkpoint.layout import missing_folder

    rows = list_checkpoints(session.checkpoint_dir)
    return LsResult(rows=rows, directory=str(session.checkpoint_dir), misnamed=misnamed(session.checkpoint_dir),
                    all=bool(args["all"]), pinned=pinned_slots(rows, session.checkpoint_dir),
                    missing=missing_folder(session.checkpoint_dir) if not rows else None,
                    leftovers=leftovers(session.checkpoint_dir))


def pinned_slots(rows: list[CheckpointInfo], directory) -> list[str]:
    """The autosave slots rotation steps over, in the listing's order: as core.checkpoint.reads.rotation_owns reads
    them (a damaged autosave whose manifest reads moves on; it was said to be pinned)."""
    from pathlib import Path

    from ..core.checkpoint.reads import rotation_owns

    slots = {f"{AUTOSAVE_NAME}-{i}" for i in range(1, AUTOSAVES_KEPT + 1)}
    return [row.name for row in rows if row.name in slots and not rotation_owns(Path(directory) / row.name)]


def local_minute(saved_at: str | None) -> str:
    """A manifest's saved_at (ISO 8601, UTC) to the minute in the local time zone, as `ls -l` shows a file's time: the
    UTC time read as local was hours off anywhere but UTC. Text that does not parse is shown as it is, cut to the
    minute."""
    from datetime import datetime

    if not saved_at:
        return ""
    try:
        when = datetime.fromisoformat(saved_at.replace("Z", "+00:00"))
        if when.tzinfo is None:
            raise ValueError(saved_at)  # no zone given: nothing to convert from
        return when.astimezone().strftime("%Y-%m-%d %H:%M")
    except (ValueError, OverflowError, OSError):
        return saved_at.replace("T", " ")[:16]


def dtype_cell(row) -> str:
    """:ls's dtype of a checkpoint: the dtype its steps ran in, or those of each stretch in order ("bfloat16 then
    float32"); "-" where none is recorded."""
    if row.trained_dtypes and len(row.trained_dtypes) > 1:
        return " then ".join(row.trained_dtypes)
    return row.trained_dtype or "-"


@render.register(LsResult)
def render_ls(result: LsResult, console: Console) -> None:
    """A table when it fits the width, else one checkpoint per line. Names are never broken or cut
    (they are what :load takes); a broken checkpoint's reason goes on its own line below."""
    if not result.rows and result.missing:  # a folder mistyped, or removed: not one that is empty yet
        note(console, f"no checkpoints in {result.directory}: {result.missing}")
        return
    if not result.rows:
        note(console, f"no checkpoints in {result.directory} yet; {writes_one()}")
        misnamed_note(result.misnamed, console)
        leftovers_note(result.leftovers, console)
        return
    listed = result.rows if result.all else result.rows[:LS_SHOWN]  # newest first: the newest are listed
    # the dtype column where the listed checkpoints trained in both: their losses differ by rounding (about 0.01), and
    # a float32 run beside a bfloat16 one read as the better settings; a folder of one dtype keeps its columns
    dtypes = {row.trained_dtype for row in listed if row.error is None} - {None}
    # a checkpoint whose own steps ran in two (a bfloat16 lesson continued on a CPU without bfloat16 units) shows it
    # too: "trained in float32" was said of fifteen steps, ten of them bfloat16
    mixed = len(dtypes) > 1 or any(len(row.trained_dtypes or ()) > 1 for row in listed if row.error is None)
    rows = []
    for row in listed:
        saved = local_minute(row.saved_at)
        if row.error is not None:  # (a kind this process has not declared: the setting it needs, "needs norm=dyt")
            rows.append((row.name, "", "", f"needs {row.needs}" if row.needs else "unreadable",
                         fmt.size(row.size_bytes), "") + (("",) if mixed else ()))
        else:
            # a run stopped between two evaluations: its last val loss was measured before the step saved
            earlier = row.val_loss is not None and row.val_step is not None and row.val_step != row.step
            measured = f" (step {row.val_step:,})" if earlier else ""
            stopped = f" ({row.steps_left:,} to go)" if row.steps_left else ""  # :train after :load goes on with them
            rows.append((row.name, fmt.whole(row.step) + stopped, fmt.num(row.val_loss) + measured,
                         row.data_spec or "-", fmt.size(row.size_bytes), saved)
                        + ((dtype_cell(row),) if mixed else ()))
    headers = ("name", "step", "val loss", "data", "size", "saved") + (("dtype",) if mixed else ())
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    if sum(widths) + 3 * len(widths) + 1 <= console.width:
        table = Table(header_style="bold", title=Text(result.directory), title_justify="left")
        for header in headers:
            table.add_column(header, justify="right" if header in ("step", "val loss", "size") else "left",
                             no_wrap=True)
        for row, cells in zip(listed, rows):
            style = "dim" if row.error is not None else None
            add_row(table, Text(cells[0], style="bold"), *cells[1:3],
                    Text(cells[3], style="red") if row.error is not None else cells[3], *cells[4:], style=style)
        console.print(table)
    else:
        say(console, result.directory, "italic")
        for row, cells in zip(listed, rows):
            say(console, cells[0], "bold")
            detail = cells[3] if row.error is not None else (
                f"step {cells[1]}, val loss {cells[2]}, data {cells[3]}, {cells[4]}, saved {cells[5]}"
                + (f", trained in {cells[6]}" if mixed else ""))
            say(console, detail, "red" if row.error is not None else "", indent=2)  # each wrapped line under the name
    for row in listed:
        if row.error is not None:
            # an error that begins with the checkpoint's name ("NAME was written by a newer minitf") is not told it
            # again in front of it
            named = row.error.startswith(f"{row.name} ")
            say(console, Text(row.name, style="bold red") + Text(row.error[len(row.name):]) if named else
                Text(f"{row.name}: ", style="bold red") + Text(row.error))
    if len(listed) < len(result.rows):
        older = len(result.rows) - len(listed)
        note(console, f"{count(older, 'older checkpoint')} not listed (the newest {len(listed)} of "
                      f"{len(result.rows)} are): {cmd('ls', all=True)} lists every one")
    misnamed_note(result.misnamed, console)
    pinned_note(result.pinned, console)
    leftovers_note(result.leftovers, console)
    note(console, f"{restore('NAME')} restores one; {writes_one()}")


def pinned_note(names: list[str], console: Console) -> None:
    """The autosave slots a checkpoint saved by name holds, said under the list: they read as earlier runs."""
    if not names:
        return
    one = len(names) == 1
    shown = ", ".join(names[:-1]) + f" and {names[-1]}" if not one else names[0]
    say(console, f"{shown} {'is' if one else 'are'} not {'an autosave' if one else 'autosaves'} (saved by name, or "
                 f"kept, or with a manifest that does not read): rotation keeps {'it' if one else 'them'} and steps "
                 f"over {'its slot' if one else 'their slots'}, so fewer earlier runs stay loadable", "yellow")


def misnamed_note(names: list[str], console: Console) -> None:
    """Folders with a checkpoint under a name :load cannot take: named (escaped, as repr writes them), with the fix."""
    if not names:
        return
    import re

    shown = ", ".join(clip(repr(name), 60) for name in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5
                                                                    else "")
    one = len(names) == 1
    example = re.sub(r"[^A-Za-z0-9._-]+", "_", names[0]).strip("._-")[:100] if one else ""
    say(console, f"not listed: {count(len(names), 'folder')} here {'holds' if one else 'hold'} a checkpoint under a "
                 f"name that cannot be loaded ({shown}); rename {'it' if one else 'them'} with ASCII letters, "
                 "digits, '.', '_' or '-'" + (f", e.g. {example}" if example else ""), "yellow")


def leftovers_note(found: list[Leftover], console: Console) -> None:
    """What saves cut short left in the folder, in one line under the list: the sizes :ls gives are the checkpoints'
    own, and `du` counted a copy of the model per killed save besides."""
    if not found:
        return
    parts = [f"{one.name} ({fmt.size(one.size_bytes)}: "
             + (f"{count(one.count, 'file')} its checkpoint does not use)" if one.inside else
                f"{'a save' if one.count == 1 else f'{one.count} saves'} of it that never finished)")
             for one in found]
    say(console, f"saves cut short (a minitf killed while saving) left "
                 f"{fmt.size(sum(one.size_bytes for one in found))} here: {', '.join(parts)}; the next save into this "
                 f"folder removes {'it' if len(found) == 1 and found[0].count == 1 else 'them'}", "yellow")
