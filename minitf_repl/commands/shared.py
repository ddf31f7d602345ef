"""What several command families do to the session besides their own work; no command is registered here.

`save_session` is the one way the shell writes a checkpoint (`:save`, `:train`'s autosave, the
model `keep_trained_model` keeps before a rebuild): core.checkpoint does the writing (atomic, under
the folder lock), and this turns Ctrl-C during it into one line about what is on disk now. A
trained model is kept before any command rebuilds it (`:set`, `:data`, `:train data=`), so that no
command loses it. `load_checked` and `switch_data` are how `:data`, `:train data=` and `:compare
data=` load data and switch to it.
"""

from __future__ import annotations

import json
import os
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from ..core import distributed
from ..core.errors import CheckpointError, ConfigError, DataError, Interrupted, UserError
from ..core.sizes import check_trainable, check_weights_free
from ..core.words import count
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, restore, word

AUTOSAVES_KEPT = 3  # autosave is the newest run; autosave-1 .. autosave-3 the runs before it
KEPT_NAMES = 100  # kept-<second>, kept-<second>-2 .. -100: rebuilds in one second each get their own


@dataclass
class Dropped:
    """An autosave the rotation deleted: its name, step, last val loss on its data and mask (None: not read, or
    never evaluated) and its data."""

    name: str  # the checkpoint deleted: the oldest autosave, e.g. autosave-3
    step: int | None  # its training step (None: its manifest could not be read)
    # its last val loss on its own data and mask, in nats per token (None: never evaluated so, or not read)
    val_loss: float | None
    data_spec: str | None = None  # the data it trained on, as its manifest names it (None: not read)
    # its model's vocabulary and mask, whether its loss compares with a run's (a loss per token compares only under
    # the same tokenizer; a causal=off loss is no language model's): for the summary's words
    vocab_size: int | None = field(default=None, metadata={"view_only": True})
    causal: bool | None = field(default=None, metadata={"view_only": True})
    # the steps its stopped run had still to go (0: its run ended): a stopped run deleted is said whatever its loss
    steps_left: int = field(default=0, metadata={"view_only": True})


@dataclass
class StoppedAside:
    """A run stopped with steps to go that held the autosave, which an autosave's rotation moved down (to
    autosave-1): `:load NAME`, then `:train`, still continues it."""

    name: str  # where it is now, e.g. autosave-1
    step: int  # the step it stopped at
    steps_left: int  # the steps its run had still to go


@dataclass
class SaveResult:
    """What a save wrote (`:save`'s result; commands.checkpoints renders it)."""

    name: str  # the checkpoint's name in the checkpoint folder
    path: str  # the checkpoint's directory
    step: int  # the training step of the model saved
    size_bytes: int  # the manifest and both data files
    seconds: float  # the save's wall time, in seconds (0.0 on a torchrun rank that writes nothing)
    replaced: bool  # a checkpoint of that name existed and was replaced
    architecture: str | None = None  # hf:PATH: the Hugging Face model_type written (gpt2, llama); None: a checkpoint
    # parts switched off by :ablate now: hooks, not weights, so what was written is the whole model without them
    ablations: list[str] = field(default_factory=list)
    # the step of the checkpoint replaced when this session had neither saved nor loaded it (another session's
    # work, most likely: two REPLs or a one-shot command sharing the folder); None when it was this session's or new
    replaced_unseen: int | None = None
    # where an autosave's rotation moved a checkpoint NAME that was not a run's autosave (a user's `:save autosave`):
    # kept under this name; None: nothing of the kind
    moved_aside: str | None = None
    moved_files: bool = False  # what moved aside held no checkpoint, but other files
    dropped: Dropped | None = None  # the oldest autosave, which the rotation deleted to make room; None: none
    # NAME held a model trained further than this one (a save by name of a rebuilt model over the trained one it
    # came from), which no other checkpoint holds: kept under this name before NAME was saved over; null: nothing of
    # the kind
    kept_as: str | None = None
    kept_step: int | None = None  # the step of the model kept so; null: none was
    # NAME held a model trained further than this one that another checkpoint holds too (the same weights at the same
    # step): that checkpoint's name, and nothing kept; null: nothing of the kind
    held_in: str | None = None
    held_step: int | None = None  # the step of the model held so; null: none was
    # seconds the save waited for another save's lock on the folder before writing, not in `seconds`; 0.0: none
    waited: float = 0.0
    waited_for: str | None = None  # whose save it waited for ("minitf on HOST (pid N)"); null: none, or unknown
    # the model's parts its config does not build (core.checkpoint.loading.own_parts): saved, but no :load makes them
    own_parts: list[str] = field(default_factory=list, metadata={"view_only": True})


def say_emulated(dtypes, device, reporter) -> None:
    """Before a command trains models of its own (:compare's contenders, :lrfind's, :checks'): where one of `dtypes`
    is bfloat16 on a device without bfloat16 units, the line :train says, once. Those runs went through emulated
    bfloat16 several times slower than float32 with no word, the slowness read as the model's or the setting's."""
    from ..core.precision import precision_note

    for line in dict.fromkeys(precision_note(dtype, device) for dtype in dtypes):
        if line is not None:
            reporter.notice(line)


def save_session(session: Session, name: str, origin: str = "save", reporter=None, **options) -> SaveResult:
    """Write the session's model, trainer and data as checkpoint `name` (atomic: see core.checkpoint).

    Ctrl-C reaches a save as KeyboardInterrupt (the command is interruptible); the engine removes what
    it wrote and re-raises, and this turns it into one line that says what is on disk now. `origin`
    and `options` (exclusive, rotate, same_run) go to save_checkpoint; data files identical to those
    of the autosave or of the checkpoint this session last saved or loaded share their bytes. `reporter` hears
    that the save waits for another session's (the folder lock), when it does for long.
    """
    from ..core.checkpoint import MANIFEST, check_loadable, manifest_bytes, save_checkpoint
    from ..core.data import lasting_spec

    try:  # a model loaded from a Hugging Face folder may be larger than the lab trains: :load would refuse it
        check_loadable(session.model_config, session.train_config)
    except ConfigError as e:
        raise CheckpointError(f"a checkpoint of this model would not load back ({str(e).split(';')[0]}); "
                              f"{cmd('save', 'hf:PATH')} writes its weights as a folder instead") from None
    manifest = session.checkpoint_dir / name / MANIFEST
    if not distributed.is_main():  # under torchrun every rank holds the same weights: rank 0 alone writes them
        session.checkpoint_written(name)  # the ranks' sessions stay alike: what rank 0 wrote, they hold
        return SaveResult(name=name, path=os.path.abspath(manifest.parent), step=session.trainer.step, size_bytes=0,
                          seconds=0.0, replaced=False)
    tokenizer = session.data.tokenizer
    before = manifest_bytes(manifest.parent)
    start = time.perf_counter()
    outcome = {"replaced": before is not None, "replaced_meta": None, "meta_sha256": None, "moved_aside": None,
               "dropped": None, "kept_aside": None, "held_by": None, "waited": (0.0, None)}
    try:
        # the random state a checkpoint keeps (dropout's next masks) is this session's, also for a save outside a
        # command (the REPL's keep at :quit), when the process's generators are not the session's
        with session.own_random():
            path = save_checkpoint(
                session.checkpoint_dir, name, session.model, session.trainer, tokenizer.vocab,
                lasting_spec(session.data_spec, read_here=getattr(session.loaded_data, "stamp", None) is not None),
                origin=origin, session=session.token,
                share_from=(AUTOSAVE_NAME, session.last_checkpoint),
                tokenizer_json=tokenizer.vocab if tokenizer.kind != "char" else None, weights_from=session.weights_from,
                data_since_step=session.data_since_step, outcome=outcome,
                measured_since_step=session.measured_since_step,
                data_sha256=getattr(session.loaded_data, "digest", None),  # a text's (not a task's, nor a stand-in's)
                continues=session.loaded_autosave_session,
                on_wait=reporter.notice if reporter is not None else None, **options,
            )
    except CheckpointError as e:
        raise keep_meanwhile(session, e) from None
    except KeyboardInterrupt:
        # Committed only if NAME holds this save's own checkpoint now. A manifest that changed was taken for this
        # save's: a Ctrl-C while it waited for another session's save of NAME said "saved", and the session took
        # the other's checkpoint for its model's (no word at :quit, the model gone with it).
        name = outcome.get("name") or name  # an autosave saved in place (NAME-k): the one it was written over
        manifest = session.checkpoint_dir / name / MANIFEST
        now = manifest_bytes(manifest.parent)
        if outcome["meta_sha256"] is None or _meta_of(now) != outcome["meta_sha256"]:
            if now is not None and now != before:
                raise Interrupted(f"save interrupted; this model was not saved, and {name} holds a checkpoint another "
                                "session saved meanwhile") from None
            if before is None:
                raise Interrupted(f"save interrupted; no checkpoint {name} was written") from None
            raise Interrupted(f"save interrupted; the previous checkpoint {name} is unchanged") from None
        path = manifest.parent  # the interrupt came after the commit: the new checkpoint is complete
    # which save this is (its manifest's checksum, as written): another session may save over the name later, and
    # then the checkpoint no longer holds this model (Session.unsaved_step). It was read back from NAME, under no
    # lock: a save of NAME by another session in between was taken for this one's, and this model for saved.
    meta_sha = outcome["meta_sha256"]
    name = outcome.get("name") or name  # an autosave saved in place: where its run's own was (NAME-k)
    session.checkpoint_written(name, meta_sha, model_file=outcome.get("model_file"),
                               same_model=outcome.get("same_model"))
    session.save_refused_in = None  # the folder took this save: a later full disk is said by its own save
    return SaveResult(
        name=name, path=os.path.abspath(path), step=session.trainer.step,
        # the write alone: "10.52 s" counted the wait for another session's save, said apart (waited)
        size_bytes=outcome["size_bytes"], seconds=max(0.0, time.perf_counter() - start - outcome["waited"][0]),
        replaced=outcome["replaced"],  # decided under the folder lock: another session may have saved it meanwhile
        replaced_unseen=_unseen_step(session, outcome["replaced_meta"]),
        moved_aside=outcome["moved_aside"][0] if outcome["moved_aside"] else None,
        moved_files=bool(outcome["moved_aside"]) and not outcome["moved_aside"][1],
        dropped=Dropped(*outcome["dropped"]) if outcome["dropped"] is not None else None,
        kept_as=outcome["kept_aside"][0] if outcome["kept_aside"] else None,
        kept_step=outcome["kept_aside"][1] if outcome["kept_aside"] else None,
        held_in=outcome["held_by"][0] if outcome["held_by"] else None,
        held_step=outcome["held_by"][1] if outcome["held_by"] else None,
        waited=round(outcome["waited"][0], 3), waited_for=outcome["waited"][1],
        own_parts=outcome.get("own_parts") or [],
    )


# The sessions of this process whose run is going now (their session tokens): an autosave this process wrote during a
# run (run_writer) is of a run in progress only while that run goes on, which no pid tells within the process
RUNS_GOING: set[str] = set()


def run_in_progress(manifest: dict) -> str | None:
    """Who trains the run of an autosave written during it (its manifest's run_writer), in words ("minitf (pid 7)"),
    where that run may still be going: its process runs (in this process: its session's run is going, RUNS_GOING), or
    is of another host, boot or PID namespace, whose pid tells nothing here (as a lock of one is waited for, never
    broken: core.checkpoint.locks). None where no run wrote it during itself, or the process that did is gone (a kill
    -9, a crash, a power cut): the run stopped there, and `:load` then `:train` continues it."""
    from ..core.checkpoint.locks import PROCESS_TOKEN, lock_owner, owner_gone

    writer = manifest.get("run_writer")
    if not isinstance(writer, dict):
        return None
    pid, host = writer.get("pid"), writer.get("host")
    me = lock_owner()
    who = f"minitf (pid {pid})" if host == me["host"] else f"minitf on {host} (pid {pid})"
    if writer.get("token") == PROCESS_TOKEN:
        return who if (manifest.get("origin") or {}).get("session") in RUNS_GOING else None
    return None if owner_gone(writer) else who



def stopped_autosave(directory: Path) -> tuple[str, int, int, str | None] | None:
    """(its meta_sha256, its step, the steps left, who trains it where its run is in progress: run_in_progress) where
    the folder's autosave is a run with steps to go: stopped, or saved during a run that may still be going; None where
    there is none, its run ended, or its manifest cannot be read. Torch-free: the REPL asks at its start."""
    from ..core.checkpoint.layout import steps_left
    from ..core.checkpoint.reads import manifest_bytes

    try:
        manifest = json.loads(manifest_bytes(Path(directory) / AUTOSAVE_NAME) or b"null")
        trainer, meta = manifest["trainer"], manifest["meta_sha256"]
        left, step = int(steps_left(trainer)), int(trainer["step"])
    except (ValueError, TypeError, KeyError, AttributeError, OSError):
        return None
    return (meta, step, left, run_in_progress(manifest)) if left > 0 and isinstance(meta, str) else None


def moved_to(directory: Path, meta_sha256: str, keep: int) -> str | None:
    """The autosave slot (autosave-1 .. autosave-`keep`) whose checkpoint is the save of `meta_sha256`, after a
    rotation; None where none is (it was replaced, or deleted)."""
    from ..core.checkpoint.reads import manifest_bytes

    for k in range(1, keep + 1):
        name = f"{AUTOSAVE_NAME}-{k}"
        if _meta_of(manifest_bytes(Path(directory) / name)) == meta_sha256:
            return name
    return None


def continues_line(name: str) -> str:
    """What continues the stopped run of checkpoint `name`: `:load NAME, then :train`, or the shell's one line."""
    from ..syntax import REPL, syntax

    if syntax() == REPL:
        return f"{restore(name)}, then {cmd('train')} continues it"
    return f"{cmd('train', load=name)} continues it"


def stopped_run_line(directory: Path) -> str | None:
    """Said as the REPL starts where the folder's autosave is a run stopped with steps to go: nothing pointed to it,
    and the first plain :train built a fresh model and pushed it down the rotation without a word. None otherwise."""
    stopped = stopped_autosave(directory)
    if stopped is None:
        return None
    _, step, left, running = stopped
    if running is not None:  # saved during a run that goes on: no stopped run to continue (a :train here moves it
        # down the rotation, where that run goes on saving)
        return (f"{AUTOSAVE_NAME} is a run in progress in {running}, saved at step {step:,} of {step + left:,} (a "
                f"{cmd('train')} here moves it to {AUTOSAVE_NAME}-1, where that run goes on saving)")
    return f"{AUTOSAVE_NAME} is a run stopped at step {step:,} of {step + left:,}: {continues_line(AUTOSAVE_NAME)}"


def held_line(name: str, held_in: str, held_step: int) -> str:
    """Said where NAME held a model trained further that another checkpoint holds too, so nothing was kept: that a
    further-trained model was there, and where it still is (the rule never to lose one to a command, met by that)."""
    return (f"{name} held a model trained further (step {held_step:,}), which {held_in} holds too: nothing kept "
            f"({restore(held_in)} brings it back)")


def unseen_by() -> str:
    """Whose the replaced model was not, in the front end's words: from the shell each command is a session of its own,
    and "this session" of the second of two `minitf --load mine save mine3` named the user's own earlier command."""
    from ..syntax import SHELL, syntax

    if syntax() == SHELL:
        return "that this command had neither saved nor loaded (an earlier command's, or another session's?)"
    return "that this session had neither saved nor loaded (another session's?)"


def keep_meanwhile(session: Session, e: CheckpointError) -> CheckpointError:
    """A save refused because the checkpoint folder cannot be used (full, read-only, not this user's), with the REPL's
    way on: the core's fix is to start minitf on another folder, which in the REPL would lose the model it trained
    (before the checkpoint_dir setting, the line sent the weights out through `:save hf:DIR` first). The session
    changes folder instead and keeps the model, its optimizer and its run. The one-shot shell's process ends with the
    command, so it says what the core said (--checkpoint-dir next time)."""
    from ..core.checkpoint.layout import ANOTHER_DIR
    from ..syntax import REPL, syntax

    if str(e).endswith(ANOTHER_DIR):
        session.save_refused_in = session.checkpoint_dir
    if syntax() != REPL or not str(e).endswith(ANOTHER_DIR):
        return e
    kept = " keeps this model and" if session.has_model else ""
    said = CheckpointError(f"{str(e)[: -len(ANOTHER_DIR)]}choose another folder: {cmd('set', checkpoint_dir='DIR')}"
                           f"{kept} saves there from now on")
    # the words before the way on, for a save during a run, whose :set waits for the run's end (RunAutosave)
    said.before_way = str(e)[: -len(ANOTHER_DIR)]
    return said


def width_one_reads_nothing() -> str:
    """Why a model of d_model=1 under LayerNorm reads nothing, and the fix: said by :set when it is set, and by :checks
    when its logits read no input."""
    return ("the mean of one feature is the feature, so every norm outputs its bias alone whatever it reads, and the "
            f"model cannot tell one input from another; {cmd('set', d_model=2)} or more lets it read")


def folder_refused(session: Session) -> bool:
    """Whether the session's last save failed because its checkpoint folder, still the one in use, cannot be used
    (full, read-only, not this user's: keep_meanwhile), so that `:save NAME` there fails again."""
    return session.save_refused_in is not None and session.save_refused_in == session.checkpoint_dir


def _meta_of(manifest: bytes | None) -> str | None:
    """The meta_sha256 of a manifest's bytes, None where there are none or they are no manifest."""
    try:
        return json.loads(manifest).get("meta_sha256") if manifest is not None else None
    except (ValueError, AttributeError):
        return None


def _unseen_step(session: Session, replaced: tuple[str, int] | None) -> int | None:
    """The step of a checkpoint a save replaced, if this session never saved nor loaded that checkpoint."""
    return None if replaced is None or replaced[0] in session.known_saves else replaced[1]


def refuse_a_path(session: Session, name: str, hf: bool = True) -> None:
    """A place given where a checkpoint's name is asked (`:save DIR/x`, `:train save=~/x`): said where saves go, and
    how a Hugging Face folder is written at a path (`hf`: where one can be), instead of check_name's list of the
    characters a name takes."""
    from ..registry import clip

    if ("/" in name or "\\" in name or name.startswith("~")) and not hf:
        raise CheckpointError(f"{clip(name)!r} is not a valid checkpoint name but a path: checkpoints are saved by "
                              f"name in {session.checkpoint_dir}; give a name, e.g. run1")
    if "/" in name or "\\" in name or name.startswith("~"):
        raise CheckpointError(f"{clip(name)!r} is not a valid checkpoint name but a path: a checkpoint is saved by its "
                              f"name in {session.checkpoint_dir} ({_into_folder(name)}); to write a Hugging Face "
                              f"folder at that path, give {word('hf:' + clip(name, 200))}")


def _into_folder(path: str) -> str:
    """How a save goes into the folder of `path` (`:save runs/m1`): the REPL changes its folder; the one-shot shell
    names the option for the next start."""
    from pathlib import PureWindowsPath

    from ..core.checkpoint.layout import NAME
    from ..registry import clip
    from ..syntax import REPL, syntax

    if syntax() != REPL:
        return "start minitf with --checkpoint-dir DIR for another folder"
    parts = PureWindowsPath(path) if "\\" in path else Path(path)
    try:  # a folder the setting would refuse (a file, a checkpoint itself) is not offered
        usable = NAME.match(parts.name) and str(parts.parent).strip(". ") and checkpoint_folder(str(parts.parent))
    except UserError:
        usable = False
    if not usable:
        return f"{cmd('set', checkpoint_dir='DIR')} for another folder"
    return f"to save into {clip(str(parts.parent), 200)}: {cmd('set', checkpoint_dir=str(parts.parent))}, then " \
           f"{cmd('save', parts.name)}"


def checkpoint_folder(typed: str) -> Path:
    """The checkpoint_dir setting's value as the folder it names, absolute, or a UserError where no save could use it:
    a file (or a link to nowhere) on its way, or a checkpoint itself (`checkpoints/run1`: its folder is meant)."""
    from ..core.checkpoint.layout import check_folder_reachable, check_not_a_checkpoint, path_error
    from ..core.paths import expand
    from ..registry import clip

    if typed.strip().lower() == "none":  # none is "off" for other settings: here it would be a folder of that name
        raise UserError(f"checkpoint_dir=none would be a folder named none; give a folder "
                        f"({cmd('set', checkpoint_dir='./none')} for one of that name), or "
                        f"{cmd('set', autosave=False)} to train without saving")
    if "\0" in typed:  # piped input can hold one; every use of the path raised ValueError (an internal error)
        raise UserError("checkpoint_dir holds a NUL character; give a folder's path")
    folder = Path(os.path.normpath(expand(typed.strip(), f"checkpoint_dir={typed}").absolute()))  # `a/../b` is b
    try:
        folder.exists()  # a name too long for the file system, a NUL, a loop of links: refused before it is used
        check_folder_reachable(folder)
    except CheckpointError as e:  # the core's fix is to start minitf on another folder: here, another value
        raise UserError(f"{str(e).rpartition('; ')[0] or e}; give checkpoint_dir another folder") from None
    except OSError as e:
        raise UserError(f"{str(path_error(folder, e)).rpartition('; ')[0]}; give checkpoint_dir another folder"
                        ) from None
    try:
        check_not_a_checkpoint(folder)
    except CheckpointError:
        raise UserError(f"{clip(str(folder), 200)} is itself a checkpoint, not a folder of checkpoints; "
                        f"{cmd('set', checkpoint_dir=str(folder.parent))} then {cmd('load', folder.name)} loads it"
                        ) from None
    return folder


def keep_trained_model(session: Session, enabled: bool | None = None, reporter=None,
                       action: str = "rebuild", lost: list[str] | None = None) -> str | None:
    """Before a command rebuilds the model (or loads another: `action`), save a trained one so that no command
    loses it.

    Weights loaded from a Hugging Face folder and not trained here (step 0) are not copied: the folder
    keeps them, and `reporter` hears how to load them back. Nor is a model that, as it stands, is a checkpoint
    the user named (saved or loaded since its last step): that checkpoint keeps it, and its name is returned, so
    `minitf --load run1 --set n_layers=2 ...` in a script leaves no copy a run. An autosave is copied all the same:
    the next runs' autosaves rotate it away.

    `lost`: where given, the lines that say what goes with the model (weights not copied, a model not kept) are
    put there instead of told, for the caller to tell once the new model stands: a Ctrl-C during the build keeps
    the old one, and "the trained model was not kept" would be said of a model still there.

    Returns the checkpoint's name, or None when there is nothing to keep (no model, or step 0) or
    the user turned saving off (`autosave=off`). If the save fails, the command fails: nothing changes.
    The name is `kept-<date>-<time>`, or with `-2`, `-3`, ... when that is taken: each is claimed
    under the folder lock (exclusive), so two rebuilds in one second, in one session or two, never
    share a name. Its data files share the bytes of an identical autosave (save_session).
    """
    from ..core.checkpoint import NameTaken

    enabled = session.autosave if enabled is None else enabled
    tell = lost.append if lost is not None else reporter.notice if reporter is not None else None
    if session.has_model and session.trainer.step == 0 and session.weights_from and tell is not None:
        # a checkpoint saved or loaded since holds them too, while it is still that save: another session may have
        # saved its own model under that name since, and its load then brings that model back, not these weights
        here = session.last_checkpoint_here  # in this folder: `:load NAME` reads this folder
        back = here if here is not None and session.holds_model(here) else session.weights_from
        tell(f"the weights loaded from {session.weights_from} go with the rebuild; {restore(back)} brings them back")
    if not enabled and tell is not None and (step := session.unsaved_step) is not None:  # gone with the rebuild
        tell(f"the trained model (step {step}) was not kept: autosave is off, and no checkpoint holds it; "
             f"{cmd('save', 'NAME')} before a {action} keeps one")
    if not session.has_model or session.trainer.step == 0 or not enabled:
        return None
    named = session.last_checkpoint_here  # kept in another folder (before :set checkpoint_dir=): copied here
    # the checkpoint must still be this model's: another session may have saved its own model over that name
    if (named is not None and session.unsaved_step is None and not named.startswith(AUTOSAVE_NAME)
            and session.holds_model(named)):
        return named
    stamp = time.strftime("kept-%Y%m%d-%H%M%S")
    try:
        for n in range(1, KEPT_NAMES + 1):
            try:
                return save_session(session, stamp if n == 1 else f"{stamp}-{n}", origin="kept", exclusive=True,
                                    reporter=reporter).name
            except NameTaken:
                continue
        raise UserError(f"{KEPT_NAMES} checkpoints named {stamp}* exist already; remove some of them")
    except UserError as e:
        raise UserError(
            f"the trained model (step {session.trainer.step}) could not be kept before the {action} ({e}); "
            f"nothing changed; do as it says, or turn autosave off to {action} without keeping it: "
            f"{cmd('set', autosave=False)}"
        ) from None



def load_checked(session: Session, spec: str, reporter=None, fits: bool = True):
    """Load a dataset and check it fits the model's context (`fits`; :compare checks each contender's window
    instead), without touching the session.

    Ctrl-C stops the reading at once (core.interrupts.cut_short): nothing has changed yet, and a large file takes
    seconds to read, which no step of a stop flag would cut short. `reporter`: told first where the file is large.

    The session's own text is taken again where it is the same file as read (unread_again): `:data big.txt` a
    second time read 100 MiB again, for the same text, and peaked at the two copies (1.75 GB, where one :data
    peaked at 1.24). Any other file is read while the session's data is still held, at the peak of both: a read
    can fail at any point (a byte that is not UTF-8, Ctrl-C, a text too short for the window, the memory), and a
    failed :data leaves the session as it was, which a text dropped first could not (its file may have changed)."""
    from ..core.catalog import data_problem

    if (problem := data_problem(spec)) is not None:  # said without torch: `minitf data missing.txt` took 1.7 s
        raise DataError(problem)
    from ..core.data import load_data, reading_notice
    from ..core.interrupts import cut_short

    data = unread_again(session, spec)
    if data is None:
        if reporter is not None and (said := reading_notice(spec)) is not None:
            reporter.notice(said)
        with cut_short():
            data = load_data(spec, session.tokenizer)
    if fits:
        data.check_fits(session.model_config.max_seq_len)
    return data


def unread_again(session: Session, spec: str):
    """The session's loaded text where `spec` names the file it was read from, unchanged since (its size, time and
    inode: core.data.file_stamp), as typed the same way and read the same way (the tokenizer now, line endings as
    "\n"): what load_data would make of it again, to the character and the id. Else None."""
    from ..core.data import TextCorpus, file_stamp

    loaded = session.loaded_data
    if not isinstance(loaded, TextCorpus) or loaded.stamp is None or loaded.line_endings:
        return None
    # as typed: the description and the recipe name the path so (`local file ./big.txt`)
    if spec.strip() != session.data_spec.strip() or file_stamp(spec) != loaded.stamp:
        return None
    tokenizer = session.tokenizer  # None: characters, which a text's own characters make (TextCorpus)
    same = loaded.tokenizer.kind == "char" if tokenizer is None else loaded.tokenizer.vocab == tokenizer.vocab
    return loaded if same else None


def switch_data(session: Session, spec: str, data, reporter=None) -> tuple[bool, str | None, dict]:
    """Switch to checked data: (whether the model was rebuilt, the checkpoint a trained model was kept as,
    the training settings that followed the data's recipe: {setting: (before, after)})."""
    rebuild = session.rebuild_needed(data=data)
    vocab_size = data.tokenizer.vocab_size
    if vocab_size != session.model_config.vocab_size:  # a larger table: held to the lab's bounds as :set's
        # tokenizer= is, before anything changes (a 450M-parameter model took 30,000 characters' rows past 500M)
        train, _ = session.recipe_switch(data)
        check_trainable(session.model_config.replace(vocab_size=vocab_size), train.batch_size, fused=train.fast_path)
    if rebuild and session.device.type == "cpu":  # before anything changes, as :set checks: the new weights are
        # allocated beside the old, and past the memory free the out-of-memory killer ends the session
        check_weights_free(session.model_config.replace(vocab_size=data.tokenizer.vocab_size))
    lost: list[str] = []  # told once the new model stands (keep_trained_model)
    kept = keep_trained_model(session, reporter=reporter, lost=lost) if rebuild else None
    off = [str(a) for a in session.ablations]  # hooks on the model a rebuild replaces
    quantized = session.sampling_copy  # :quantize's copy of that model
    before = session.tokenizer_setting
    rebuilt, recipe_changes = session.use_data(spec, data)
    for line in lost if reporter is not None and rebuilt else []:
        reporter.notice(line)
    if reporter is not None and rebuilt and off:  # as :set says it
        reporter.notice(ablations_gone(off))
    if reporter is not None and rebuilt and quantized:
        reporter.notice(quantized_gone())
    if reporter is not None and session.tokenizer_setting != before:  # a task drops a subword tokenizer (use_data)
        reporter.notice(f"tokenizer: {before} -> {session.tokenizer_setting}: a task is questions and answers of "
                        "characters, and the next text is read by characters too")
    if reporter is not None and (elsewhere := bpe_trained_elsewhere(session.tokenizer, data)) is not None:
        reporter.notice(f"{data.name} is read by the model's tokenizer, a BPE trained on {elsewhere}'s text "
                        f"({1 / data.tokens_per_char('val'):.2f} characters a token on its validation text, as "
                        "bits per character count them); "
                        f"{cmd('set', tokenizer=session.tokenizer_setting)} trains one on {data.name}'s and rebuilds "
                        "the model")
    return rebuilt, kept, recipe_changes


def quantized_gone(new: str = "the new one", trained: bool = False) -> str:
    """What a rebuild (:set, :data) or a load (`new`: "the loaded one") did to :quantize's int8 copy of the old model,
    in one line. `trained`: the new model has trained (a loaded one may have), so a copy of it is worth making now;
    a rebuilt one is at step 0, where a copy would sample random weights."""
    when = "" if trained else " once it has trained"
    return (f"the int8 copy ({cmd('quantize')}) was of the old model and went with it: {cmd('gen')} samples {new}; "
            f"{cmd('quantize', 'int8')} makes a copy of it{when}")


def ablations_gone(off: list[str], new: str = "the new one", trained: bool = False) -> str:
    """What a rebuild (:set, :data) or a load (`new`: "the loaded one") did to the parts :ablate had switched off in
    the old model, in one line. `trained`: the new model has trained (a checkpoint at step 875), so the parts may be
    switched off in it now; "once it has trained" said of it was false."""
    when = "in it again" if trained else "again once it has trained"
    return (f"{', '.join(off)} {'was' if len(off) == 1 else 'were'} switched off in the old model; {new} has "
            f"every part on ({cmd('ablate', 'WHAT')} switches them off {when})")


def recipe_line(spec: str, changes: dict) -> str:
    """The training settings that followed the data's recipe, in one line."""
    moved = ", ".join(f"{name} {before:g} -> {after:g}" if isinstance(after, float) else f"{name} {before} -> {after}"
                      for name, (before, after) in changes.items())
    return f"training settings follow {_recipe_named(spec)} (core/recipes.py): {moved}"


def _recipe_named(spec: str) -> str:
    """The recipe a line names: the data's own (shakespeare), an optimizer's ("adamw on pydoc"), or for data that has
    none of its own (a file, a task) the default one it trains with: "the recipe for notes.txt" named one that is
    not there."""
    from ..core.recipes import RECIPES, data_name

    if " on " in spec or data_name(spec) in RECIPES:
        return f"the recipe for {spec}"
    return f"the default recipe, which {spec} trains with (it has none of its own)"


# Below this many steps a run is a smoke test (train a little, then look inside), where the schedule's shape does
# not matter and a note on it would be noise.
WARM_UP_NOTE_FROM = 20


def all_warm_up(steps: int, config, run: str) -> str | None:
    """What to say when the warm-up takes the whole run (core.train.lr_at caps it at the run's last step): the rate
    rises to its peak at the last step and never decays, as after `:set optimizer=adamw` (AdamW's recipe warms up
    over 150 steps) and `:train steps=100`. `run` names the run ("this whole run"); None when there is nothing to say."""
    # lr_at's warm-up ends at the run's last step for any warmup_steps >= steps - 1: the same schedule, said alike
    if steps < WARM_UP_NOTE_FROM or config.warmup_steps < steps - 1:
        return None
    # lr_at's warm-up of steps - 1 steps: the rate is lr at the last but one step and holds it at the last
    return (f"warm-up ({count(config.warmup_steps, 'step')}) covers {run} ({count(steps, 'step')}): the rate rises "
            f"to lr = {config.lr:g} over its first {count(steps - 1, 'step')}, holds it at the last and never decays")


def seed_kept_line(seed: int) -> str:
    """What a new seed did to a model that exists (`:set seed=`, `:train seed=`), in one line."""
    return (f"the weights are kept: a seed draws the initial weights of a new model (a setting that rebuilds it), and "
            f"this one has its own; the batch order starts again from seed {seed}, and the validation batches are "
            "others (the val loss moves with them, not with the model)")


def redraw_untrained(session: Session, seed: int, reporter) -> bool:
    """A new seed (`:set seed=`, `:train seed=`) on an untrained model (Session.redrawable): its weights are its old
    seed's draw and nothing else, so they are drawn again from `seed`, as a model built after the seed would be, and
    the session takes the seed. Otherwise a view that built the model first (`:params`, `:gen`) decided which weights
    `:train` started from, and the shell's `--set seed=7 train` and the REPL's `:params`, `:set seed=7`, `:train`
    trained different models. True where it drew them again; a model that trained, or holds weights from elsewhere
    (a checkpoint, even one saved at step 0: `:load init` then `:set seed=7` kept to compare runs from one
    initialisation), keeps its own, and the seed is left to the caller."""
    if not session.redrawable:
        return False
    off, quantized = [str(a) for a in session.ablations], session.sampling_copy  # the parts of the model that goes
    before = session.train_config
    session.set_train_config(before.replace(seed=seed))
    try:
        session.rebuild()
    except BaseException:  # a Ctrl-C cut the build short: the model stays, and the seed it was drawn from
        session.set_train_config(before)
        raise
    reporter.notice(f"the model had not trained: its weights are drawn again from seed {session.train_config.seed}, "
                    "as a model built now would be")
    if off:
        reporter.notice(ablations_gone(off))
    if quantized:
        reporter.notice(quantized_gone())
    return True


def start_fresh(session: Session, reporter) -> str | None:
    """`:train fresh=on`: new weights drawn from the session's seed, as a rebuild draws them, where every task shares
    one vocabulary and a switch of task keeps the model. A trained model is kept as a checkpoint first, as a rebuild
    by :set keeps it (keep_trained_model): its name is returned (None: nothing kept). A session with no model yet
    has nothing to draw again: the run builds one from the seed."""
    if not session.has_model:
        return None
    quantized = session.sampling_copy  # the part of the model that goes (ablations: cmd_train refused them first)
    lost: list[str] = []  # told once the new model stands (keep_trained_model)
    kept = keep_trained_model(session, reporter=reporter, action="restart", lost=lost)
    session.rebuild()
    for line in lost:
        reporter.notice(line)
    reporter.notice(f"fresh=on: new weights drawn from seed {session.train_config.seed} (step 0)"
                    + (f"; the trained model was kept as checkpoint {kept} ({restore(kept)} brings it back)"
                       if kept else ""))
    if quantized:
        reporter.notice(quantized_gone())
    return kept


def rebuilt_line(vocab_size: int, kept: str | None) -> str:
    """What a switch to data with another vocabulary did to the model, in one line."""
    line = (f"the data has another vocabulary ({count(vocab_size, 'character')}): the model was rebuilt, "
            "weights reset (step 0)")
    return line + (f"; the trained model was kept as checkpoint {kept} ({restore(kept)} brings it back)" if kept else "")


def file_changed(session: Session) -> str | None:
    """What to say where the data file in use changed on disk since the session read it (its size, time or inode,
    core.data.file_stamp); None where it has not, or the data is no file. :data and :train went on with the text as
    read without a word, its figures those of text that no longer existed."""
    from ..core.catalog import CORPORA, TASKS
    from ..core.data import file_stamp

    data = session.loaded_data
    stamp = getattr(data, "stamp", None)
    # a local copy of a built-in text, named as the built-in (notebook.Lab of load_data(PATH)): the built-in's
    # text, no file's, so no file's change to say
    if session.data_spec.strip().partition(":")[0] in CORPORA + TASKS:
        return None
    if stamp is None or (now := file_stamp(session.data_spec)) == stamp:
        return None
    if now is None:  # a file read (it has a stamp) and no longer there: deleted or moved (one that cannot be asked,
        try:  # a folder made unreadable, is no news of the file)
            os.stat(Path(session.data_spec.strip()).expanduser())
            return None
        except FileNotFoundError:
            pass
        except (OSError, RuntimeError, ValueError):
            return None
        return (f"{data.name} is no longer on disk (deleted or moved) since it was read: this session still uses "
                "the text as read")
    return (f"{data.name} has changed on disk since it was read: this session still uses the text as read "
            f"({cmd('data', session.data_spec)} reads it again)")


# the (data's spec, file's stamp) :train last said file_changed's line for, by session: said at every :train, the
# line buried each run's notices under one that had not changed since the first. By session, not by data: two Labs
# given one data object each have a user to tell (the second never heard it)
_CHANGE_SAID: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def file_changed_once(session: Session) -> str | None:
    """file_changed's line, once for each change of the file on disk (:data, asked, says it every time)."""
    from ..core.data import file_stamp

    if (line := file_changed(session)) is None:
        return None
    said = (session.data_spec, file_stamp(session.data_spec))
    if _CHANGE_SAID.get(session) == said:
        return None
    _CHANGE_SAID[session] = said
    return line


def bpe_trained_elsewhere(tokenizer, data) -> str | None:
    """The name of the text a BPE of :set tokenizer=bpe:N was trained on, where `data` (a text it now reads, the
    switch of data having kept it for the model's embedding) is another; else None (characters, a Hugging Face
    model's tokenizer, a BPE reading its own text)."""
    trained_on = getattr(tokenizer, "trained_on", None)
    split_text = getattr(data, "split_text", None)
    if trained_on is None or split_text is None or trained_on == (data.name, hash(split_text("train"))):
        return None
    return trained_on[0]


def read_with(data, value: str, reporter, fix: str):
    """(tokenizer, `data`'s text read by it) for the tokenizer setting `value` (the tokenizer None: characters).

    Only text can be read again (else the error ends with `fix`, how to give text there). bpe:N trains a
    byte-level BPE on the training text alone, so the validation text stays unseen. :set tokenizer= and
    :compare's contenders both read through here."""
    from ..core.bpe import tokenizer_for
    from ..core.config import parse_tokenizer
    from ..core.data import TextCorpus, TokenizerOnly
    from ..core.interrupts import cut_short

    if not isinstance(data, TextCorpus):
        spec = getattr(data, "spec", data.name)
        if data.info().kind == "task":
            what = f"{data.name} is a task of characters (its loss counts the answer's symbols)"
        elif isinstance(data, TokenizerOnly):  # a loaded folder's tokenizer, with no text it reads: not "unavailable"
            what = f"the data is {spec}'s tokenizer alone, with no text"
        else:  # a checkpoint's vocabulary: its text gone, or there but changed
            reason = getattr(data, "reason", None)
            what = f"{spec} cannot be used ({reason})" if reason else f"{spec} is not available"
        raise UserError(f"tokenizer={value} reads text, but {what}; {fix}")
    n = parse_tokenizer(value)
    if n is not None and len(data.split_text("train")) < 2:
        raise UserError(f"{data.name} has too little training text to train a tokenizer on; choose a longer text")
    # Ctrl-C stops the training and the reading at once (core.interrupts.cut_short): they change nothing of the
    # session, and on a text of 10 MB they take seconds, which no stop flag polled (the switch went on after them)
    with cut_short():
        tokenizer = tokenizer_for(value, data.split_text("train"), reporter.notice, data.readings.trained)
    if tokenizer is not None:  # the text it was trained on: a switch of data keeps it (bpe_trained_elsewhere)
        tokenizer.trained_on = (data.name, hash(data.split_text("train")))
    if tokenizer is not None and tokenizer.own_size < n:
        reporter.notice(f"the training text has pairs enough for {count(tokenizer.own_size, 'token')} only, "
                        f"not {n:,}: the tokenizer has {tokenizer.own_size:,}")
    if tokenizer is not None and len(data.text) > SLOW_READ_CHARS:  # 10 MB of text: some 15 s, without a word
        reporter.notice(f"reading {data.name}'s {count(len(data.text), 'character')} with it: a while; Ctrl-C stops "
                        f"it and keeps the tokenizer in use")
    with cut_short():
        return tokenizer, data.retokenized(tokenizer)


SLOW_READ_CHARS = 5_000_000  # a subword tokenizer reads a text this long in seconds: read_with says so first


def _accumulation_elsewhere(session: Session | None = None) -> str:
    # nanoGPT's gradient_accumulation_steps was a bare "unknown key": the step it takes is a batch here, in one pass
    return ("minitf has no micro-batches: a step is one forward and backward pass over batch_size sequences, so "
            "nanoGPT's batch_size x gradient_accumulation_steps is batch_size here where memory allows (its 12 x 40 "
            f"is {cmd('set', batch_size=480)}: the same sequences and the same mean gradient per step, in one pass); "
            f"where memory does not, a smaller batch_size takes noisier steps ({cmd('set', 'batch_size')} shows it)")


# gradient accumulation's names, nanoGPT's and the common short ones, for :set and :train, whose batch_size= this is
# too (`train steps=5 grad_accum=4` was a bare "unknown option"); here, as commands/settings imported by train would
# register its family before train's, first in :help
ACCUMULATION_ELSEWHERE = dict.fromkeys(("gradient_accumulation_steps", "grad_accum", "grad_accum_steps", "accum_steps",
                                        "gradient_accumulation", "accumulation_steps"), _accumulation_elsewhere)


def _warmup_iters_elsewhere(session: Session | None = None) -> str:
    # No alias, though it reads as one: nanoGPT's get_lr ramps lr x (it + 1) / (warmup_iters + 1), its peak at step
    # warmup_iters, where core.train.lr_at ramps lr x (s + 1) / warmup_steps, its peak one step earlier. An alias that
    # set W + 1 for a W typed would show a value nobody typed in :config, and TrainConfig(warmup_iters=W) could not
    # say so: the line below says the rule and the value to type instead.
    return ("nanoGPT's warmup_iters=W ramps lr x (it + 1) / (W + 1), the peak at step W; warmup_steps=W ramps lr x "
            "(s + 1) / W, the peak a step earlier: warmup_iters=W is warmup_steps=W+1 here, e.g. warmup_iters=100 is "
            f"{cmd('set', warmup_steps=101)}")


WARMUP_ITERS_ELSEWHERE = {"warmup_iters": _warmup_iters_elsewhere}  # :set's and :train's
