"""`:train` and `:plot`: training the session's model, and charting its history.

`:train` validates everything it was given before it changes anything, runs core.train's loop
(which never prints: progress leaves through the reporter), and saves the result (the autosave, or
save=NAME). A run that diverges, runs out of memory or fails is rolled back: the session is where
the command found it. Under torchrun a rank that loses a peer keeps and saves the steps every rank
completed.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

from rich.console import Console

from ..core import distributed
from ..core.catalog import TASKS
from ..core.config import PRODUCTS_ENV, TrainConfig
from ..core.errors import Interrupted, PeerLost, TrainingDiverged, UserError, is_out_of_memory
from ..core.sizes import check_memory_free, check_trainable, checkpoint_bytes, parameter_count
from ..core.watch import ONE_BLOCK, WATCH_VIEWS, WatchFrame, Watcher
from ..core.words import count
from ..registry import Param, param_from_setting
from ..render import fmt
from ..render.chart import MARKS, Curve, Level, chart, mark, spans_orders, uniform_label, uniform_loss
from ..render.live import LossTable
from ..render.renderers import after_lines, render
from ..render.heatmap import unscaled
from ..render.tables import NARROW
from ..render.watch import watch_view
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import (REPL, SHELL, at_keyboard, cmd, given_before, interactive, invoked_with, named, option, restore,
                      speaking, syntax, train_first, typed_again, watch_first)
from .base import (REGISTRY, check_layer, command, complete_checkpoint, complete_data, complete_layer, known_text,
                   training_length, true_next, view_prompt)
from .shared import (ACCUMULATION_ELSEWHERE, AUTOSAVES_KEPT, RUNS_GOING, WARM_UP_NOTE_FROM, WARMUP_ITERS_ELSEWHERE,
                     Dropped, SaveResult, StoppedAside, all_warm_up, continues_line, file_changed_once, held_line,
                     load_checked, moved_to, rebuilt_line, recipe_line, refuse_a_path, redraw_untrained, save_session,
                     seed_kept_line, start_fresh, stopped_autosave, switch_data, unseen_by)

FAMILY = "training"  # the heading :help lists this module's commands under


SCHEDULES = ("new", "continue")
CURVE_ROWS = 200  # the most history rows a result carries for its chart


@dataclass
class PlotLevel:
    n: int  # a counting model's order (:ngram): the next token from the n - 1 before it
    val_loss: float  # its val loss on this data (:ngram's), in nats per token


@dataclass
class TrainResult:
    # :train's --json fields. The first ten are core.train.RunSummary's (copied by name, `from_run`),
    # declared again because this is the command's versioned contract (schema.py): their order and
    # words are what scripts read, and RunSummary's other field (notes) is not in it.
    steps: int  # steps done by this command
    total_steps: int  # optimizer steps done in total
    run_remaining: int  # > 0 after a stop: `:train` continues the run
    stopped: bool  # Ctrl-C (a stop request) ended it before the run did
    resumed: bool  # this command continued an unfinished run
    train_loss: float | None  # of the last step
    val_loss: float | None  # of the last evaluation, None if none ran
    accuracy: float | None  # exact-match accuracy on held-out examples (tasks only)
    tokens_per_second: float | None  # training tokens per second, evaluation excluded; None: no step ran
    seconds: float  # wall time of the command
    evals: list[dict] = field(metadata={"json": "list[StepInfo]"})  # history rows with a val_loss, from this command
    data: str  # what it trained on (the :data spec)
    saved: str | None = None  # the checkpoint written at the end (save=NAME, or autosave), if any
    save_error: str | None = None  # why that save failed; the training itself is kept
    own_parts: list[str] = field(default_factory=list, metadata={"view_only": True})  # SaveResult.own_parts of it
    replaced: bool = False  # save=NAME wrote over a checkpoint NAME that was there before
    # the step of the checkpoint save=NAME replaced when this session had neither saved nor loaded it (another
    # session's work, most likely); None when it was this session's, or new
    replaced_unseen: int | None = None
    # the name the autosave's rotation moved a checkpoint `autosave` to that was not a run's autosave (a user's
    # `:save autosave`), kept; None: nothing of the kind
    moved_aside: str | None = None
    moved_files: bool = False  # what moved aside held no checkpoint, but other files
    # save=NAME found NAME holding a model trained further, which no other checkpoint holds: kept under this name
    # before NAME was saved over; null: nothing of the kind
    kept_as: str | None = None
    kept_step: int | None = None  # the step of the model kept so; null: none was
    # save=NAME found NAME holding a model trained further that another checkpoint holds too: that checkpoint's name,
    # and nothing kept; null: nothing of the kind
    held_in: str | None = None
    held_step: int | None = None  # the step of the model held so; null: none was
    # the symbols the validation data holds and the training data never does ("": none): a val loss no rate lowers
    held_out_only: str = ""
    dropped: Dropped | None = None  # the oldest autosave, deleted by this run's rotation; said where it was better
    # the run stopped with steps to go that the autosave held, which this run's rotation moved down (to autosave-1),
    # where :load NAME then :train still continues it (unsaid, it went out of the rotation four runs later); null:
    # nothing of the kind
    stopped_aside: StoppedAside | None = None
    # (where it is now, who trains it) of a run in progress in another process that held the autosave, which this run's
    # rotation moved down (to autosave-1), where that run goes on saving; None: nothing of the kind
    running_aside: tuple[str, str] | None = field(default=None, metadata={"view_only": True})
    # the val loss ended above BLOWN_UP x ln V, and the train loss did not end under ln V (the model did not learn its
    # training data by heart): training made the model worse than a uniform guess (a rate too high for it), said in
    # words; here for a script, whose exit status stays 0 (the run ran as asked)
    worse_than_uniform: bool = False
    # The learning-rate schedule of the run: "new" (warm-up, then cosine from the peak lr) or
    # "continue" (a trained model goes on at the last run's final rate, constant_lr, so it is not shaken).
    schedule: str = "new"
    constant_lr: float | None = None  # the rate a "continue" run holds at every step; None for a "new" one
    # where the constant rate came from, where no earlier run here gave it: weights trained elsewhere (hf:PATH)
    constant_from: str | None = field(default=None, metadata={"view_only": True})
    vocab_size: int | None = None  # V, for the loss table's ln(V) line (the loss of a uniform guess)
    # this command's history rows, thinned to at most 200, for a chart
    curve: list[dict] = field(default_factory=list, metadata={"json": "list[StepInfo]"})
    # what the steps' products ran in: float32 or bfloat16 (dtype=auto is bfloat16 where the device multiplies it
    # natively, float32 elsewhere: one setting, two kinds of numbers)
    dtype: str = "float32"
    # what Muon's Newton-Schulz ran in, float32 or bfloat16 (core.precision.newton_schulz_dtype): float32 in a run of
    # dtype=float32, else bfloat16 where the device multiplies it natively and float32 elsewhere, so a dtype=bfloat16
    # run's orthogonalisation differs by the machine while `dtype` does not; null: not a Muon run (optimizer=adamw)
    newton_schulz_dtype: str | None = None
    compiled: bool = False  # the steps ran through torch.compile (compile=on, and it worked here)
    # the steps that compiled: the first compiled step, or one torch compiled again (after :set batch_size, dropout,
    # dtype), compilation included; not in tokens/s
    compile_seconds: float | None = None
    # why compile=on trained eagerly here (torch.compile failed): the line said at the failure, said again under the
    # summary (the first saying scrolls away above the table); None: compiled, or compile=off
    compile_failed: str | None = None
    # watch=: the view made before the first step and at every evaluation, in order (kept in the session too)
    frames: list[WatchFrame] = field(default_factory=list)
    # watch=: the seconds its frames took to make, all together: in no row's elapsed nor tokens/s (seconds, the
    # command's wall time, holds all but the first frame's, made before the run's first step)
    watch_seconds: float | None = None
    # val_loss in bits per character of the val text: loss x tokens / characters / ln 2 (text data only).
    # Losses per token of different tokenizers do not compare; bits per character of the same text do.
    val_bpc: float | None = None
    tokens_per_char: float | None = None  # of the val text: 1 for characters, what val_bpc was computed with
    # after :ngram on this data: the bigram counter's and the best counter's val loss, which the chart draws
    counters: list[PlotLevel] = field(default_factory=list)
    learnable: bool = True  # the data has something to learn (random tokens have not: their loss stays at ln V)
    # the run that ended is the model's first (it began at step 0), though stopped and continued; None: this
    # command's own steps say (all the model's steps are its)
    first_run: bool | None = field(default=None, metadata={"view_only": True})
    # a task's question, to type after the first run (a task's model answers questions, it continues no text)
    question: str | None = field(default=None, metadata={"view_only": True})
    # causal=off: each position but the last read the token it predicts, so no counter's loss compares with its
    causal: bool = field(default=True, metadata={"view_only": True})
    # the session ends with this command (SIGTERM or SIGHUP stopped it, or piped lines stop there): a stopped run's
    # `:train continues` would go to a prompt that is not there; the line that goes on is the shell's then
    session_ends: bool = field(default=False, metadata={"view_only": True})
    # then the session's checkpoint folder, which the shell's lines must name (a `:set checkpoint_dir=` is no option
    # of the invocation's, and `--load autosave` looked in the folder minitf started with)
    folder: str | None = field(default=None, metadata={"view_only": True})
    # under torchrun: (processes, batch_size each), for the line after the save: the lines that continue a checkpoint
    # are one process's, which at the same batch_size trains on 1/N of the global batch (the checkpoint records no N)
    launch: tuple[int, int] | None = field(default=None, metadata={"view_only": True})
    # torch's threads at the end of the run: a float32 sum splits by the thread count, so a run's numbers move with
    # it, from about the third decimal on and more as the run goes (compare runs at one count)
    threads: int | None = None
    # the CPU the steps ran on, to compare the numbers with another machine's (core.device.cpu_kind: its model,
    # cores and bfloat16 units, which dtype=auto goes by); None: not run on the CPU
    cpu: str | None = None
    # "oneDNN", or torch's own library ("MKL" where torch has it, else the BLAS it was built with, such as "OpenBLAS"
    # or "Accelerate", else "torch's own": core.fastpath.torch_products): the kernel this command's float32 products
    # on the CPU ran on (a float32 run's steps, any run's evaluations), which each process chooses by timing them
    # unless $MINITF_PRODUCTS names one: the two round differently, so two processes at one thread count gave other
    # losses from step 3; null where none ran or no kernel is chosen (off the CPU, fast_path=off)
    cpu_float32_products: str | None = None
    # the matrix-product FLOPs the ledger counts for training one token at the length of the data's rows, which the
    # run's FLOP rate and its model FLOPs utilisation (mfu) are of (core.ledger.training_flops_per_token: forward and
    # backward, Linears and attention's two products; not Muon's Newton-Schulz, nor norms, softmax or the optimizer's
    # elementwise work); null where no step ran
    flops_per_token: int | None = None
    # flops_per_token x tokens_per_second / 1e9: the run's achieved rate of those products (under torchrun, of all the
    # processes together); a lower bound of the work done, which counts more than the ledger does; null: no step ran
    gflops: float | None = None
    # this device's speed at a square product in the run's dtype at its thread count (core.peak), in GFLOP/s: measured
    # by :device, or at the end of the first run without such a measurement; null under torchrun (one process's speed
    # is not the launch's), where it could not be measured, where the run went faster than it (a peak misread on a
    # busy machine: :device measures it again), or where too few steps free of one-off set-up were timed
    # (core.peak.MIN_TIMED_STEPS)
    peak_gflops: float | None = None
    # gflops / peak_gflops (0.32: 32%), of all the timed steps, a first step's warm-up included; null where either is
    mfu: float | None = None
    # the seconds this command's steps and evaluations added to the table's elapsed (a continued run's table counts
    # from the run's first step): `seconds` holds the drawing between steps as well
    run_seconds: float = 0.0
    # the validation batches each evaluation read, for the table's legend ("8 held-out batches"); None: not said
    eval_batches: int | None = field(default=None, metadata={"view_only": True})
    # (the dtype, the step) of the model's step before this command's where it is not this command's dtype (a :set
    # dtype= since, or a checkpoint of another machine's dtype=auto), which the summary says: it named float32 alone
    # for a run half bfloat16
    dtype_before: tuple[str, int] | None = field(default=None, metadata={"view_only": True})
    # (Newton-Schulz's dtype, the step) of the model's Muon step before this command's where it is not this command's
    # newton_schulz_dtype (a dtype=bfloat16 checkpoint of the other kind of CPU), which the summary says: it named the
    # products' bfloat16 alone, as the teacher's run did, for steps whose orthogonalisation had changed
    ns_dtype_before: tuple[str, int] | None = field(default=None, metadata={"view_only": True})
    # the step the model had trained to on other data where this run began on a data switch that kept the weights
    # (same vocabulary): a val loss far above ln V is then the new data's, which no rate explains; None: no switch
    switched_at: int | None = field(default=None, metadata={"view_only": True})
    # the step this run began at, where a switch kept it going (a stop, then :data of the same vocabulary): the run
    # began before switched_at, on the other data, and the message says the switch came in its middle
    run_start: int | None = field(default=None, metadata={"view_only": True})
    # the steps of this command whose gradient norm was above grad_clip, scaled down to it before the update; which
    # ones, each row's grad_norm against grad_clip says (grad_norm is before clipping)
    clipped_steps: int = 0
    grad_clip: float = 0.0  # the threshold the gradients were clipped to (0: no clipping)
    # dropout > 0: the last evaluation's loss of eval_batches training batches in eval mode, as val_loss is scored
    # (train_loss is one batch with dropout on, above what the weights score); None with dropout 0, or not evaluated
    train_eval_loss: float | None = None
    # a warm-up + cosine run shorter than its warm-up (warmup_steps >= steps - 1, under WARM_UP_NOTE_FROM steps, where
    # all_warm_up's notice is not said): (warmup_steps, the run's steps, lr), which core.train.lr_at squeezed into the
    # run, so the rate never decayed; None: nothing squeezed
    warmup_squeezed: tuple[int, int, float] | None = field(default=None, metadata={"view_only": True})
    # the lr setting far below its optimizer's usual rates (LOW_LR): (optimizer, lr, the lowest of its recipes' rates,
    # this data's recipe rate under it); None: within them
    low_lr: tuple[str, float, float, float] | None = field(default=None, metadata={"view_only": True})

    @classmethod
    def from_run(cls, summary, **more) -> TrainResult:
        """The result of a run: the fields it shares with core.train.RunSummary taken from `summary`, by name."""
        mine = {f.name for f in dataclasses.fields(cls)}
        shared = {f.name: getattr(summary, f.name) for f in dataclasses.fields(summary) if f.name in mine}
        return cls(**shared, **more)

    def notices_beside_json(self) -> list[str]:
        """What `train --json` says on standard error beside its document: the summary's lines of what the autosave
        rotation moved or deleted (a better run's gone), which the summary is not there to say and the `dropped`
        field alone said. The front door asks any result for these (FrontDoor's --json branch)."""
        return rotation_said(self) if self.saved else []

    @property
    def failure(self) -> str | None:
        """What the user asked for and did not get, though the command ran (a one-shot shell exits 1)."""
        return f"not saved: {self.save_error}" if self.save_error else None


def read_again(session: Session, reporter: Reporter) -> None:
    """The data file of a loaded checkpoint, gone (or changed) at the :load and put back since, as the refusal said to
    ("put the file back to train"): read again and trained on, where it has the model's vocabulary, as
    :data PATH would take it. :train went on saying the file was not available until the checkpoint was loaded again.
    Still gone, unreadable or of another vocabulary, the stand-in stays and its refusal says what is wrong."""
    from ..core.data import VocabOnly, load_data

    stand_in = session.loaded_data
    if type(stand_in) is not VocabOnly:  # not a TokenizerOnly either: a folder's tokenizer, whose data is not gone
        return
    tokenizer = stand_in.tokenizer if stand_in.tokenizer.kind != "char" else None
    try:
        data = load_data(stand_in.spec, tokenizer)
        data.check_fits(session.model_config.max_seq_len)
    except UserError:
        return
    if data.tokenizer.vocab != stand_in.tokenizer.vocab:
        return
    session.use_data(stand_in.spec, data)
    reporter.notice(f"read {stand_in.spec} again: the file the model was trained on is back")


@command("train", "Train the model: continue a stopped run, or start a new run of steps.", params=[
    Param("steps", int, help="length of a new run (default: continue a stopped run, else the steps setting)",
          low=1, limit=TrainConfig.spec("steps").limit, aliases=TrainConfig.spec("steps").aliases,
          default_from="steps"),
    # unlike :set lr, which a stopped run then goes on under, lr= here asks for a run at that peak: a new one (a
    # stopped run's steps left are dropped, as its notice says), said in the help, where "like :set lr" alone hid it
    # and what :set lr does to a stopped run, as the run does it: a warm-up + cosine run is redrawn from the new peak
    # (it read "goes on at that rate"), a constant one is held at the new rate where that is lower
    param_from_setting(TrainConfig.spec("lr"), help="peak learning rate of a new run (a stopped run's steps left "
                                                    "are dropped; the lr setting, :set lr=X, keeps a stopped run: its "
                                                    "warm-up and cosine drawn anew from peak X, or a constant rate "
                                                    "held at X where X is lower); kept, like :set lr", kept=True),
    param_from_setting(TrainConfig.spec("batch_size"),
                       help="sequences per step, per process under torchrun (kept, like :set batch_size)",
                       kept=True),
    Param("data", str, help="switch data first; after a load, the model goes on where the vocabulary is the same, "
                            "else it is rebuilt (the loaded one kept as a checkpoint)", complete=complete_data,
          path=True, browse="files"),
    param_from_setting(TrainConfig.spec("eval_every"), help="steps between validation evaluations (kept)", kept=True),
    # the same seed repeats a run's numbers only at the same thread count: threads=auto picks it from the machine's
    # load, and two runs of one seed differed in the fourth decimal with nothing to say why; and, for float32
    # products, on the same kernel, which each process times for itself (core.fastpath.onednn_faster); and in the same
    # dtype: dtype=auto trains in bfloat16 on a CPU with bfloat16 units, in float32 on one without (one seed's val
    # loss moved 0.005 and its train loss 0.037 in 100 steps between the two); and with dropout, compiled or not: a
    # compiled step draws its masks from inductor's own random numbers (train 3.8560 against 3.8598 after 4 steps)
    param_from_setting(TrainConfig.spec("seed"),
                       help="seed of the batch order and the validation batches, and of the weights of a model this "
                            "command builds (kept); on a CPU, float sums split across another thread count differ "
                            "from about the third decimal on, more as the run goes (the summary names the count; "
                            ":set threads=N fixes it), and so do float32 products on the other kernel (the summary "
                            f"names it; ${PRODUCTS_ENV} set to onednn or torch fixes it), and runs in another dtype: "
                            "dtype=auto trains in bfloat16 on a CPU with bfloat16 units and in float32 on one without "
                            "(the summary names it; :set dtype=float32 fixes it), and runs with dropout above 0 "
                            "compiled or not: compile=on draws other dropout masks than compile=off",
                       kept=True),
    Param("save", str, help=f"save the checkpoint NAME at the end (default: {AUTOSAVE_NAME}, unless autosave is off)",
          complete=complete_checkpoint),
    Param("schedule", str, choices=SCHEDULES,
          help="new: warm-up, then cosine from the peak lr; continue: a constant rate, the lr option's if given, else the "
               "last run's final rate, or the lr setting where that is lower (default: continue for a trained "
               "model, unless the lr option is given; new otherwise)"),
    Param("watch", str, choices=WATCH_VIEWS,
          help="at every evaluation, draw this view under the loss table: attn (one block's heads), lens (the "
               "logit lens), samples (a greedy continuation), grad (the gradient each block receives, as :grad "
               "computes it), heads (each head's role and the loss on repeated random tokens, as :heads computes "
               "them), embed (every token on W_E's two main directions, as :embed map=on draws them) or context (the "
               "val loss by position in the window, in bands, as :context measures it); a report written later in "
               "the same interactive session shows the frames in order (a checkpoint does not keep them)"),
    Param("prompt", str, help="the text watch= reads (default: a short sample of the data; for heads, random "
                              "tokens repeated; for embed, the tokens drawn on top)", meta="TEXT"),
    Param("layer", int, help="the block watch=attn shows (default: the last)", complete=complete_layer),
    # every task shares one vocabulary, so a switch of task keeps the weights, and a seed draws only a new model's:
    # this is the one way to a new model of the same settings
    Param("fresh", bool, default=False,
          help="start from new weights drawn from the seed (the trained model kept as a checkpoint first, as a "
               "rebuild keeps it); a switch of data of the same vocabulary (all tasks share one) keeps the weights "
               "without it"),
], json_version=30, elsewhere={**ACCUMULATION_ELSEWHERE, **WARMUP_ITERS_ELSEWHERE})  # fmt: skip
def cmd_train(session: Session, args: dict, reporter: Reporter) -> TrainResult:
    """Train: resume a stopped run, or start a run of `steps`.

    A model that has trained already goes on at the rate its last run ended with, constant: a new
    warm-up to the peak rate would first undo much of what the cosine decay settled (a loaded sort
    model went from val 0.60 to 1.39 that way). `schedule=new`, or an explicit `lr=`, starts a fresh
    warm-up + cosine run instead.
    """
    steps = args["steps"]
    if (changed := file_changed_once(session)) is not None:
        reporter.notice(changed)
    if session.ablations:
        raise UserError(f"parts of the model are switched off ({', '.join(map(str, session.ablations))}); "
                        f"training would learn around them: {cmd('ablate', 'off')} first")
    save_as = args["save"].strip() if args["save"] is not None else None
    if save_as is not None:
        from ..core.checkpoint import check_save_target
        from ..core.hf import PREFIX

        if save_as.startswith(PREFIX):  # a Hugging Face folder holds no run to continue: written after training
            raise UserError(f"the save option names the lab checkpoint the run ends with; a Hugging Face folder is "
                            f"written after it: {cmd('train', save='run1')}, then {cmd('save', save_as, load='run1')}")
        refuse_a_path(session, save_as, hf=False)
        if distributed.is_main():  # the one process that writes (under torchrun, the others never do)
            # a bad name fails now, not after an hour of training; the disk's space once the vocabulary is known
            check_save_target(session.checkpoint_dir, save_as, by_name=True)
        else:
            from ..core.checkpoint import check_name

            check_name(save_as)  # the name is the command line's: refused alike everywhere
    # the TrainConfig fields :train sets for good (its options marked kept), as :set does
    changes = {p.name: args[p.name] for p in TRAIN.params if p.kept and args[p.name] is not None}
    spec = args["data"].strip() if args["data"] is not None else None
    new_data = load_checked(session, spec, reporter) if spec is not None else None
    if spec is None:
        read_again(session, reporter)
    if new_data is None:  # loads the session's data now: a file that is known data brings its recipe first
        session.data.check_fits(session.model_config.max_seq_len)
    train_config = session.train_config
    if new_data is not None:  # the new data's recipe first (core.recipes), this command's options over it
        train_config, _ = session.recipe_switch(new_data)  # checked before anything changes
    train_config = train_config.replace(**changes) if changes else train_config
    model_config = session.model_config
    if new_data is not None:
        model_config = model_config.replace(vocab_size=new_data.tokenizer.vocab_size)
    if save_as is not None and distributed.is_main():  # a disk its checkpoint does not fit on fails now, too
        check_save_target(session.checkpoint_dir, save_as, _save_bytes(model_config, train_config), by_name=True)
    # the steps take the fast path, which keeps no (T, T) attention map, unless it is off or :ablate's hooks listen
    fused = train_config.fast_path and not session.ablations
    check_trainable(model_config, train_config.batch_size,
                    weights_from=session.weights_from if model_config == session.model_config else None, fused=fused)
    if session.device.type == "cpu":  # resolved now: an unusable device fails before anything changes
        # the session's model holds its weights, gradients and optimizer state: this training reuses them, or a
        # rebuild frees them
        held = 16 * parameter_count(session.model_config) if session.has_model else 0
        check_memory_free(model_config, train_config.batch_size, held=held, fused=fused)
    if (args["prompt"] is not None or args["layer"] is not None) and args["watch"] is None:
        # the views that take what was given: layer= only the one-block views, prompt= all but context's val windows
        views = [v for v in WATCH_VIEWS if (args["layer"] is None or v in ONE_BLOCK)
                 and (args["prompt"] is None or v != "context")]
        given = " and ".join(option(key) for key in ("prompt", "layer") if args[key] is not None)
        says = "says" if " and " not in given else "say"
        named = [option("watch", v) for v in views]
        raise UserError(f"{given} {says} what {option('watch')} looks at; add "
                        + (f"{', '.join(named[:-1])} or {named[-1]}" if len(named) > 1 else named[0]))
    # data= of the same vocabulary keeps the model and its run, which goes on as after :data (the default then is
    # continue too); another vocabulary rebuilds the model, which then has no run to go on from
    if args["schedule"] == "continue" and new_data is not None and session.rebuild_needed(data=new_data):
        raise UserError(f"schedule=continue goes on at the last run's rate, and {spec} has another vocabulary: the "
                        "switch rebuilds the model, which then has no run to go on from; "
                        f"{cmd('train', schedule='new')} starts one")
    if args["schedule"] == "continue" and args["fresh"]:
        raise UserError("schedule=continue goes on at the last run's rate, and fresh=on starts new weights, which "
                        f"have no run to go on from: {cmd('train', fresh=True)} starts one")
    if args["schedule"] == "continue" and session.trainer.final_lr() is None:
        raise UserError("schedule=continue needs a model that has trained; this one has not: "
                        f"{cmd('train', schedule='new')} starts a run")
    if args["schedule"] == "continue" and args["lr"] is None and session.trainer.rate_to_continue() is None:
        raise UserError("schedule=continue goes on at the last run's final rate, and that was 0 (its lr decayed "
                        f"below the smallest float): {cmd('train', schedule='new')} starts a run")
    autosave = save_as is None and session.autosave
    if autosave and distributed.is_main():  # the others never write (under torchrun): their folder is no matter
        from ..core.checkpoint import check_save_target

        try:  # e.g. a read-only folder: say so before training, and how to train without the autosave
            check_save_target(session.checkpoint_dir, AUTOSAVE_NAME, _save_bytes(model_config, train_config))
        except UserError as e:
            # from the shell the whole line: "--set autosave=off" alone was a fragment
            without = cmd("set", autosave=False)
            if syntax() == SHELL:  # the whole line, but where it would bury the error (a 300-character folder twice)
                line = distributed.relaunch(given_before("train", "--set", "autosave=off") + typed_again())
                without = line if len(line) <= 240 else without
            raise type(e)(f"{e}; or train without saving: {without}") from None

    # A model this command builds (none yet, or data of another vocabulary rebuilds it) draws its weights from the
    # seed given with it, as `:set seed=3` then `:train` would (the seed is "of the initial weights and the batch
    # order"); a model that trained keeps its weights, and the seed restarts its batch order only (an untrained one,
    # built by a view, is drawn again below). Set before the model is built (the watcher's checks below build it), and
    # kept with the model it drew, even if the run fails. The session's setting alone: what builds the model reads
    # it, and a trainer that exists (its model is to be rebuilt) keeps its own batch order untouched until then.
    seeded, had_model = None, session.has_model  # the settings before the seed went in
    if "seed" in changes and (not had_model or args["fresh"]
                              or (new_data is not None and session.rebuild_needed(data=new_data))):
        seeded = session.train_config
        session.train_config = seeded.replace(seed=changes["seed"])
    # checked before anything changes: the prompt's tokens (read as the data it will train on reads it), the layer
    try:
        watcher = _watcher(session, args, new_data if new_data is not None else session.data, reporter)
        # before a switch of data: the model kept is then saved with the data it was trained on
        fresh_kept = start_fresh(session, reporter) if args["fresh"] else None
        # a trained model that could not be kept before the rebuild fails the switch, and the command, here
        switched_data = switch_data(session, spec, new_data, reporter) if new_data is not None else None
    except UserError:
        if seeded is not None and session.has_model == had_model:  # refused before a model drew from it: as it was
            session.train_config = seeded
        raise
    if "seed" in changes and seeded is None and changes["seed"] != session.train_config.seed:
        redraw_untrained(session, changes["seed"], reporter)  # an untrained model: kept if the run fails
    switched = None  # what of a data= switch stays after a failed run (the run is rolled back, the switch is not)
    if args["fresh"]:  # the new weights stay too, and the model before them is where fresh=on kept it
        switched = "the new weights stay" + (
            f"; the model before them was kept as checkpoint {fresh_kept} ({restore(fresh_kept)} brings it back)"
            if fresh_kept else "")
    if switched_data is not None:
        rebuilt, kept, recipe_changes = switched_data
        switched = (f"{switched}, and " if switched else "") + f"the switch to {spec} stays" + (
            f"; the model before it was kept as checkpoint {kept} ({restore(kept)} brings it back)" if kept else "")
        if rebuilt:
            reporter.notice(rebuilt_line(new_data.tokenizer.vocab_size, kept))
        moved = {key: change for key, change in recipe_changes.items() if key not in changes}  # options win
        if moved:
            reporter.notice(recipe_line(spec, moved))
    # A diverged run is a failed command, and a failed command loses nothing: the weights of the
    # last finite step (what the core keeps) are usually ruined already at such a learning rate, so
    # the session goes back to where this :train began, settings included.
    snapshot = session.snapshot()
    quantized = session.sampling_copy  # :quantize's copy of the weights this run changes: gone at its first step
    if train_config.seed != session.train_config.seed:  # a model that exists: what :set seed= says, said here too
        reporter.notice(seed_kept_line(train_config.seed))
    session.set_train_config(train_config)
    trainer = session.trainer
    # A stopped run goes on where nothing new is asked; lr= asks for a fresh run at that peak (the docstring's rule)
    resumed = (steps is None and new_data is None and args["schedule"] is None and args["lr"] is None
               and trainer.run_remaining > 0)
    own_save = None  # the stopped run's save=NAME this continuation writes: its own, not one it replaces
    if resumed and save_as is None and (named := session.run_saved_as(trainer)) is not None:
        # the stopped run's save=NAME goes on with it: its end went to autosave, and NAME kept the half-trained model
        save_as, autosave, own_save = named, False, named
        if distributed.is_main():  # the folder may have changed since (:set checkpoint_dir): checked before the steps
            from ..core.checkpoint import check_save_target

            try:
                check_save_target(session.checkpoint_dir, named, _save_bytes(model_config, train_config),
                                  by_name=True)
            except UserError:
                session.rollback(snapshot)  # this command's settings go back with it
                raise
        reporter.notice(f"the run goes on into checkpoint {named}, as its {option('save')} asked")
    step_before, dtype_before, ns_before = trainer.step, trainer.trained_dtype, trainer.trained_ns_dtype
    if trainer.step:  # a :set dtype= since the model's last step moves its steps to another dtype: said as a load
        # says it of another machine's dtype=auto (a bfloat16 checkpoint went on in float32 without a word)
        from .checkpoints import say_dtype_moved

        name = session.last_checkpoint_here if session.holds_state() else None
        say_dtype_moved(name or "the model", trainer, reporter)
    schedule, constant_lr, constant_from = "new", None, None
    dropped = None  # (steps left, steps) of a stopped run this command's new run drops: a divergence brings it back
    if resumed:
        schedule, constant_lr = ("continue", trainer.run_constant_lr) if trainer.run_constant_lr else ("new", None)
        if constant_lr is not None and constant_lr > train_config.lr * (1 + 1e-6):
            # a stopped constant run goes on never above the lr setting, as a new one starts (a :set lr=1e-4 while
            # it was stopped went unread: it went on at its old rate); a warm-up + cosine run reads lr every step
            constant_lr = trainer.run_constant_lr = train_config.lr
    else:
        # Weights trained elsewhere (a Hugging Face folder, or a lab checkpoint of one) have no run here to go on from,
        # and a warm-up to the peak rate shook them as it shook a trained model of the lab's: a model of 1.7457 went
        # to 1.8848 in 10 steps where its lab checkpoint went to 1.7394. They go on at the end of a run's decay.
        elsewhere = (trainer.rate_to_continue() is None and session.weights_from is not None and trainer.step == 0
                     and args["lr"] is None and train_config.lr * train_config.min_lr_ratio > 0)
        wanted = args["schedule"] or ("continue" if (trainer.rate_to_continue() is not None or elsewhere)
                                      and args["lr"] is None else "new")
        if wanted == "continue":  # a constant rate: lr= where given with it (the user's word wins), else the last
            # run's final one, never above the lr setting (a :set lr=0.01 after a run at 50 must not go on at 50;
            # the tolerance: the schedule's rounding may leave the final rate 1 ulp above a peak it reached)
            final = trainer.rate_to_continue() or (train_config.lr * train_config.min_lr_ratio if elsewhere else
                                                   train_config.lr)  # lr= given with schedule=continue: that rate
            if elsewhere and trainer.rate_to_continue() is None:
                constant_from = session.weights_from
            capped = final if final <= train_config.lr * (1 + 1e-6) else train_config.lr
            schedule, constant_lr = "continue", args["lr"] if args["lr"] is not None else capped
        left, stopped_steps = trainer.run_remaining, trainer.run_steps
        dropped = (left, stopped_steps) if left > 0 else None
        trainer.start_run(steps, constant_lr=constant_lr)  # the result says which schedule it was
        if left > 0:  # steps=, lr=, schedule= or data= start a new run: the stopped one cannot go on after it
            # at the rate the stop left, held: a run stopped part-way had not decayed, and "a new run" read as one
            # that warms up and decays
            held = ""
            if constant_lr is not None and args["lr"] is None:
                whose = (f"the stopped run's rate of {constant_lr:.3g}" if constant_lr == final else
                         f"the lr setting's {constant_lr:.3g} (the stopped run was at {final:.3g})")
                held = (f", at {whose} held constant, not decayed "
                        f"({cmd('train', steps=trainer.run_steps, schedule='new')} warms up and decays)")
            reporter.notice(f"the stopped run's last {count(left, 'step')} of {stopped_steps:,} are dropped: this is a "
                            f"new run of {count(trainer.run_steps, 'step')}{held}; {cmd('train')} alone goes on with "
                            "a stopped run")
        if constant_lr is None and (line := all_warm_up(trainer.run_steps, train_config, "this whole run")):
            # a quarter, AdamW's recipe's share (150 of 600): over a tenth AdamW stalled at its rate (lab._say_warm_up)
            reporter.notice(f"{line}; {cmd('set', warmup_steps=max(1, trainer.run_steps // 4))} warms up over a "
                            "quarter of it")
    # a new run shorter than its warm-up, too short for all_warm_up's notice: said in one line under the summary
    squeezed = ((train_config.warmup_steps, trainer.run_steps, train_config.lr)
                if trainer.run_constant_lr is None and trainer.run_steps < WARM_UP_NOTE_FROM
                and train_config.warmup_steps >= trainer.run_steps - 1 and train_config.warmup_steps > 0 else None)
    if (line := few_val_windows(session.data, session.model_config.max_seq_len, train_config)) is not None:
        reporter.notice(line)
    session.threads.decide()  # a fresh look at the other work on the machine before a long run
    reporter.on_train_start(trainer.run_steps, trainer.step - trainer.run_start, resumed)
    reporter.on_train_vocab(session.data.tokenizer.vocab_size)
    from ..core.precision import training_dtype

    reporter.on_train_dtype(training_dtype(train_config.dtype, trainer.device))  # for a live loss table's legend
    frames: list[WatchFrame] = []
    watched = [0.0]  # the seconds the frames took: outside every step's and evaluation's timing, so said apart
    on_step = reporter.on_step
    if watcher is not None:
        def watch(step: int, val_loss: float | None) -> None:
            from ..core.fastpath import products_uncounted

            t0 = time.perf_counter()
            with products_uncounted():  # the view's products are not the run's (its result names the run's kernel)
                frame = watcher.frame(session.model, step, val_loss)
            watched[0] += time.perf_counter() - t0
            frames.append(frame)
            reporter.on_watch(frame)

        def on_step(info) -> None:
            reporter.on_step(info)
            if info.val_loss is not None:  # at each evaluation, outside the step's timing
                watch(info.step, info.val_loss)
    saver = RunAutosave(session, reporter, same_run=resumed)
    if autosave and distributed.is_main():  # the one process that writes (rank 0 alone evaluates, too)
        shown = on_step

        def on_step(info) -> None:
            shown(info)
            saver.at_step(info)  # after the step's row is whole and drawn, outside its timing (run_elapsed, tokens/s)
    saver.going(True)
    try:
        if watcher is not None:  # the frame before the first step: one that fails rolls the run back as a step would
            watch(trainer.step, None)
        summary = trainer.run(on_step=on_step, should_stop=reporter.should_stop, on_notice=reporter.notice,
                              on_evaluate=reporter.on_evaluate, stop_evaluation=reporter.should_stop)
        trainer.check_last_update()  # a stop between evaluations: weights of 1e30 must not be autosaved as a model
    except PeerLost as e:
        # Under torchrun another rank died: the steps every rank completed are good (the one under way
        # was undone), so they are kept and saved, not rolled back; the command still fails.
        trained = e.step > step_before
        raise UserError(f"{e}; {_save_after_peer_lost(session, save_as, autosave, saver.same_run, trained)}") from None
    except TrainingDiverged as e:
        # the rate the run stepped at, read before the roll-back takes the run away: a constant one where it went on
        # at one (schedule=continue), else the peak of its warm-up and cosine, the lr setting. "0.01 diverged" was
        # said of a run that went on at a constant 1.06e-03, and a tenth of 0.01 was offered, barely below it
        used = trainer.run_constant_lr or train_config.lr
        session.rollback(snapshot)
        saver.say_kept()
        raise _diverged(session, used, e, switched, train_config.optimizer,
                        train_config.weight_decay, given=args["lr"] is not None, dropped=dropped,
                        constant=used != train_config.lr) from None
    except UserError:
        session.rollback(snapshot)  # e.g. data that is gone (a checkpoint restored with its vocabulary only)
        saver.say_kept()
        raise
    except Exception as e:
        if not is_out_of_memory(e):
            session.rollback(snapshot)  # a bug part-way through a step (an internal error): the model is not left
            saver.say_kept()
            raise  # with half an update in it, nor the run counted a step ahead of its weights
        # Out of memory part-way: like a divergence, the command failed, so it changes nothing.
        failed_step = session.trainer.step + 1
        session.rollback(snapshot)
        saver.say_kept()
        smaller = train_config.batch_size // 2  # a batch of one has no smaller batch to offer: the window is left
        lower = "batch_size or max_seq_len" if smaller else "max_seq_len or the model size (batch_size is 1)"
        raise UserError(f"out of memory at step {failed_step}; the model, optimizer, run and settings "
                        f"are back where this training began. Lower {lower}, or use another device",
                        fix={"batch_size": smaller} if smaller else None) from None
    finally:
        saver.going(False)
    if quantized and not session.sampling_copy:  # as a rebuild says it (quantized_gone): it went without a word
        reporter.notice(f"the int8 copy ({cmd('quantize')}) was of the weights before this run and went with them: "
                        f"{cmd('gen')} samples the float32 model; {cmd('quantize', 'int8')} again makes one of the "
                        "new weights")
    # a stopped run gone on with the same view keeps what was watched before the stop; one stopped before its first
    # step (a quick Ctrl-C) watched no training, and leaves the frames :report and :plot show as they were
    if watcher is not None and summary.steps:
        earlier = _same_run_frames(session.watch_frames, frames[0], trainer.run_start) if resumed else []
        kept = session.watch_frames
        if resumed and not earlier and kept and kept[0].step == trainer.run_start:  # this run's, of another view:
            # replaced, as a new run's would be, but said (they went without a word, as if the stop had lost them)
            other = f"watch={kept[0].view}" + (" of another input" if kept[0].view == frames[0].view else "")
            reporter.notice(f"the {count(len(kept), 'frame')} of {other} watched before the stop "
                            f"{'is' if len(kept) == 1 else 'are'} replaced: {cmd('report')} and {cmd('plot')} show "
                            "one view of one input at a time, this command's")
        # a stop at an evaluation: its frame is there already, with the val loss the new first frame has not
        session.keep_frames(earlier + [f for f in frames if not earlier or f.step > earlier[-1].step])
        if earlier:  # the result counts this command's frames only
            reporter.notice(f"the {count(len(earlier), 'frame')} watched before the stop "
                            f"{'is' if len(earlier) == 1 else 'are'} kept: "
                            f"{cmd('report')} and {cmd('plot')} show all {len(session.watch_frames)}")
    done = trainer.history[-summary.steps :] if summary.steps else []
    # Saved when the run ends or is stopped; a diverged run raised above and leaves the last save alone. A run
    # stopped before its first step (a quick Ctrl-C) has nothing new to keep: its autosave would only push an
    # older run out of the rotation, so it writes none (save=NAME was asked for by name, and is written).
    saved, save_error, replaced, unseen, moved, files, dropped = None, None, False, None, None, False, None
    own: list[str] = []  # the model's parts its config does not build, which the save's line names
    kept = held = (None, None)  # NAME's further-trained model kept under another name (or held by another checkpoint)
    name = save_as if save_as is not None else (AUTOSAVE_NAME if autosave and summary.steps else None)
    if name is not None and not distributed.is_main():
        name = None  # under torchrun every rank holds the same weights: rank 0 alone writes them
    session.remember_run_save(trainer, save_as)
    if name is not None:
        try:
            # A new run keeps the previous runs' autosaves (rotated under the same lock as the save, so
            # two sessions autosaving at once keep both); a continued run replaces its own autosave only.
            # the autosave replaces what this run saved during it (save_every), whose first save did the rotation
            # a stop during (or just after) a save during the run: that save holds this very step, written already
            written = (saver.holds(trainer.step) or saver.save()) if autosave else save_session(
                session, name, origin="save", same_run=resumed, reporter=reporter,
                keep_trained=True)  # as :save NAME keeps a further-trained NAME
            saved, kept, held = written.name, (written.kept_as, written.kept_step), (written.held_in, written.held_step)
            own = written.own_parts
            # An autosave moves the previous one down the rotation rather than over it: not "replaced".
            replaced = written.replaced and save_as is not None and own_save is None
            unseen = written.replaced_unseen if save_as is not None else None
            moved, files, dropped = ((saver.moved_aside, saver.moved_files, saver.dropped) if autosave else
                                     (written.moved_aside, written.moved_files, written.dropped))
        except UserError as e:
            # the core's way on in this front end's words, as dispatch.phrase words a command's error (not called
            # here: dispatch imports the commands): --checkpoint-dir DIR from the shell, :set checkpoint_dir=DIR
            from ..core.checkpoint.layout import ANOTHER_DIR

            way = ("run it with another checkpoint folder (--checkpoint-dir DIR)" if syntax() == SHELL
                   else f"choose another folder: {cmd('set', checkpoint_dir='DIR')}")
            save_error = str(e).replace(ANOTHER_DIR, way)
    from ..core.device import cpu_kind

    result = TrainResult.from_run(
        summary, resumed=resumed, evals=[dict(row) for row in done if row["val_loss"] is not None],
        data=session.data_spec, saved=saved, save_error=save_error, own_parts=own, replaced=replaced,
        replaced_unseen=unseen,
        moved_aside=moved, moved_files=files, dropped=dropped, stopped_aside=saver.aside,
        running_aside=saver.running_aside, kept_as=kept[0],
        kept_step=kept[1], held_in=held[0], held_step=held[1],
        held_out_only=held_out() if (held_out := getattr(session.data, "held_out_only", None)) else "",
        schedule=schedule, constant_lr=constant_lr, constant_from=constant_from,
        vocab_size=session.data.tokenizer.vocab_size, curve=_thin(done, CURVE_ROWS), frames=frames,
        watch_seconds=watched[0] if frames else None,
        counters=plot_levels(session.counters), learnable=not getattr(session.data, "nothing_to_learn", False),
        first_run=session.trainer.run_start == 0, question=_question(session.data),
        causal=session.model_config.causal, cpu=cpu_kind() if session.trainer.device.type == "cpu" else None,
        session_ends=summary.stopped and (getattr(reporter, "terminate_signal", None) is not None
                                          or not at_keyboard()),
        folder=str(session.checkpoint_dir),
        launch=(ranks, train_config.batch_size) if (ranks := distributed.world_size()) > 1 else None,
        eval_batches=train_config.eval_batches,
        # a new run too: steps=20 after a bfloat16 checkpoint and :set dtype=float32 read as float32 throughout
        dtype_before=((dtype_before, step_before) if summary.steps and dtype_before is not None
                      and dtype_before != summary.dtype else None),
        ns_dtype_before=((ns_before, step_before) if summary.steps and ns_before is not None
                         and summary.newton_schulz_dtype is not None and ns_before != summary.newton_schulz_dtype
                         else None),
        # the run's first weights were trained on the data before the switch (the run began at it, or before)
        switched_at=(since if 0 < (since := session.data_since_step) and session.trainer.run_start <= since
                     else None),
        run_start=session.trainer.run_start,
        # the trainer keeps why it trains eagerly under compile=on for good; its notice says so once, at the failure
        compile_failed=(trainer.compile_failed if trainer.config.compile and summary.steps
                        and not summary.compiled else None),
        grad_clip=train_config.grad_clip, warmup_squeezed=squeezed,
        # not of weights trained elsewhere (a GPT-2 fine-tuned at 3e-5 was told to train at 0.01)
        low_lr=low_rate(train_config, session.recipe_data) if session.weights_from is None else None,
    )
    _utilisation(session, result)
    # a rate to suggest after a divergence: one that trained, not one whose loss ended far above a uniform guess (its
    # result calls it too high: lr=10 ends pydoc at 130 without a nan, and was then offered as "trained here")
    result.worse_than_uniform = blown_up(result)
    if not result.worse_than_uniform:
        session.note_good_lr(train_config.lr)
    return result


def _utilisation(session: Session, result: TrainResult) -> None:
    """The run's achieved FLOP rate and its share of the device's measured product speed (MFU), into `result`.

    tokens_per_second already leaves out the step that compiled (compile=on) and every evaluation, watch frame and
    save (core.train times each step alone), so the rate is of the steps. The peak is the latest this process
    measured at the run's device, dtype and thread count (:device measures it), else measured here, once: about 0.1 s
    on a 2-core CPU and 0.25 s at most (core.peak), against a run that takes seconds; a thread count auto moves to
    later measures again at its first run. Not under torchrun: each process would time its product against the
    others' steps, and one process's speed is not the launch's. Not of one timed step (core.peak.MIN_TIMED_STEPS:
    its time holds its one-off set-up, `minitf train steps=1` read 11% where the steady steps ran at 48%), nor of two
    whose first was such a warm-up (core.peak's rule: one steady step after it is as few): the rate is given, the
    share is not, and no peak is measured for a share that will not be said."""
    if not result.steps or not result.tokens_per_second:
        return
    if result.compile_seconds is not None and result.steps == 1:
        return  # the one step compiled: its tokens/s is the compiler's time (core.train), no rate of the products
    from ..core.ledger import training_flops_per_token
    from ..core.peak import MIN_TIMED_STEPS, product_speed_or_none, share_of_peak

    result.flops_per_token = training_flops_per_token(session.model, training_length(session)
                                                      or session.model_config.max_seq_len)
    result.gflops = result.flops_per_token * result.tokens_per_second / 1e9
    if result.launch is not None or timed_steps(result) < MIN_TIMED_STEPS or too_few_after_warm_up(result):
        return
    peak = product_speed_or_none(session.trainer.device, result.dtype, again=False)
    # a run faster than the peak means the peak was misread: neither is said (share_of_peak: no share over 100%)
    if (mfu := share_of_peak(result.gflops, peak.gflops if peak else None, timed_steps(result))) is not None:
        result.peak_gflops, result.mfu = peak.gflops, mfu


def timed_steps(result: TrainResult) -> int:
    """The steps the run's tokens/s is of: a compiling step is timed apart from them (core.train)."""
    return result.steps - (result.compile_seconds is not None)


# The summary's GFLOP/s and MFU in one line of the table's legend: a learner reads "32% of the peak" as all the work
# the CPU did, where the ledger leaves out Muon's Newton-Schulz (a quarter of the default model's Muon step's products:
# 1.85 of 7.16 GFLOP at batch 16), the norms, softmax and the optimizer's elementwise update
def products_counted(times: str = "") -> str:
    """What a GFLOP/s (and its MFU) counts, in the words :train's legend and :compare's note share; `times`: what
    the FLOPs are multiplied by, where the words say it (", times the tokens/s")."""
    return (f"only the matrix products {named('params')} counts{times}, not the optimizer's Newton-Schulz, so a "
            "lower bound of the work")


def flops_legend(result: TrainResult) -> str:
    """The legend's words for the summary's FLOP rate, and its MFU where the summary gives one; and where the run's
    first step was a warm-up that weighs on them (first_step_words), that."""
    words = f"the summary's GFLOP/s{' (MFU)' if result.mfu is not None else ''}: {products_counted()}"
    return words + (f"; {warm}" if (warm := first_step_words(result)) else "")


def _rate_after_warm_up(result: TrainResult) -> tuple[float, float] | None:
    """(the tokens/s of the run's steps after its first, the first's own), where its first step was a warm-up that
    pulls the run's rate down (core.peak.without_first_step); None where it was not, where this cannot be told, or
    under compile=on (its compiling step is timed apart already, and the steps after it are warm).

    The first step's own rate is its row's, read only where the curve's first row is this command's first step:
    there no evaluation has pooled it (core.train's stretch of an evaluated row starts at the command's first step,
    so that row's rate is of that step alone). A curve thinned to CURVE_ROWS (199 evaluations or more) can begin at
    a later, evaluated row, whose rate is pooled over the steps since the last evaluation: no words from it."""
    if result.compile_seconds is not None or not result.curve or not result.tokens_per_second:
        return None
    row = result.curve[0]
    if row.get("step") != result.total_steps - result.steps + 1:
        return None
    from ..core.peak import without_first_step

    first = row.get("tokens_per_second") or 0.0
    later = without_first_step(result.tokens_per_second, first, result.steps)
    return None if later is None else (later, first)


def too_few_after_warm_up(result: TrainResult) -> bool:
    """The run's first step was a warm-up and fewer than core.peak.MIN_TIMED_STEPS steps came after it: no share of
    the run's rate, nor of the later steps' (core.peak's rule), as for one timed step."""
    from ..core.peak import MIN_TIMED_STEPS

    return result.steps - 1 < MIN_TIMED_STEPS and _rate_after_warm_up(result) is not None


def first_step_words(result: TrainResult) -> str | None:
    """Where the run's first step was a warm-up that pulls its rate down (core.peak.without_first_step), what it took
    and the rate of the steps after it: "its first step, one-off set-up and all, took 74% of the steps' time: the 3
    after it ran at 15 GFLOP/s, 42% (MFU)". The run's own figures stay of all its steps (they are what tokens/s is
    of, and --json's); a few steps in a new process read far below the steady rate, and this says why and by how
    much. Not under compile=on: its compiling step is timed apart already, and the steps after it are warm. No share
    of fewer than MIN_TIMED_STEPS later steps (the run's summary then gives none either)."""
    if result.gflops is None or (rates := _rate_after_warm_up(result)) is None:
        return None
    from ..core.peak import flop_rate_words, share_of_peak, share_words

    later, first = rates
    gflops = result.flops_per_token * later / 1e9
    share = share_of_peak(gflops, result.peak_gflops, result.steps - 1)
    took = result.tokens_per_second / (result.steps * first)  # its seconds over all the steps' seconds
    after = "the step after it" if result.steps == 2 else f"the {result.steps - 1:,} after it"
    return (f"its first step, one-off set-up and all, took {took:.0%} of the steps' time: {after} ran at "
            f"{flop_rate_words(gflops)}" + (f", {share_words(share)} (MFU)" if share is not None else ""))


def utilisation_words(result: TrainResult) -> str | None:
    """"55 GFLOP/s, 32% of this CPU's float32 products (MFU)" for the summary (core.peak's words, :compare's too);
    None where no rate is known."""
    if result.gflops is None:
        return None
    from ..core.peak import utilisation_words as words

    return words(result.gflops, result.mfu, result.cpu is not None, result.dtype, timed_steps(result),
                 after_compile=result.compile_seconds is not None, first_warm_up=too_few_after_warm_up(result))


# An lr setting under this share of the lowest rate its optimizer's recipes train at is far below its usual range:
# the recipes' rates (core.recipes) span 1e-2 to 2e-2 for Muon and 3e-3 to 6e-3 for AdamW, so Muon is told from 1e-3
# down, AdamW from 3e-4 (nanoGPT's rate, said of AdamW's, stays unsaid). Muon at the video's 3e-4 reached val 2.708
# on tiny Shakespeare after 150 steps where its own rate reached 2.238 after 100, without a word.
LOW_LR = 0.1


def far_below(lr: float, optimizer: str) -> bool:
    """Whether `lr` is under LOW_LR x the lowest rate of `optimizer`'s recipes (a rounding's width spared: 0.1 x 3e-3
    is 3.0000000000000003e-4 in floats, above nanoGPT's 3e-4)."""
    return lr < LOW_LR * lowest_usual_rate(optimizer) * (1 - 1e-9)


def lowest_usual_rate(optimizer: str) -> float:
    """The lowest rate `optimizer`'s recipes train at, over every data's recipe (core.recipes)."""
    from ..core.recipes import ANY_DATA, RECIPES, recipe

    return min(recipe(name, optimizer)["lr"] for name in (*RECIPES, ANY_DATA))


def low_rate(config: TrainConfig, data_spec: str) -> tuple[str, float, float, float] | None:
    """(optimizer, lr, the lowest rate of its recipes, this data's recipe rate) where config.lr is under LOW_LR x that
    lowest rate; None where it is not."""
    from ..core.recipes import recipe

    if not far_below(config.lr, config.optimizer):
        return None
    return config.optimizer, config.lr, lowest_usual_rate(config.optimizer), recipe(data_spec, config.optimizer)["lr"]


def low_rate_line(result: TrainResult) -> str | None:
    """What to say of an lr setting far below its optimizer's usual rates (TrainResult.low_lr), with the ways out:
    the optimizer whose usual rates it is in, else this data's rate."""
    if result.low_lr is None:
        return None
    from ..core.config import OPTIMIZERS

    optimizer, lr, lowest, default = result.low_lr
    # another optimizer whose usual range holds this rate (AdamW for nanoGPT's 3e-4): its name is the way out
    others = [cmd("set", optimizer=o) for o in OPTIMIZERS if o != optimizer and not far_below(lr, o)]
    ways = [f"{' or '.join(others)} trains at a rate like it"] if others else []
    ways.append(f"{cmd('set', lr=default)} is {optimizer}'s rate for this data")
    return (f"lr = {lr:g} is far below {optimizer}'s usual rates (its recipes train at {lowest:g} and up): each step "
            f"moves the weights little and the loss falls slowly; {', or '.join(ways)}")


def few_val_windows(data, max_seq_len: int, config: TrainConfig) -> str | None:
    """What to say where the validation split holds fewer distinct windows than one evaluation reads (a file of 240
    characters at max_seq_len=23: its 24 val tokens are one window, read 8 x 16 times for a val loss that looked like
    any other); None where it holds enough, or the data draws its windows anew (a task, random tokens)."""
    window_count = getattr(data, "window_count", None)  # a text's: the windows get_batch draws from
    if window_count is None:
        return None
    try:
        windows = window_count("val", max_seq_len)
    except UserError:  # a window that does not fit: the run refuses it, after which the session is rolled back
        return None
    # under torchrun rank 0 evaluates batches of the global size (Trainer.evaluate)
    each = config.batch_size * distributed.world_size()
    read = config.eval_batches * each
    if windows >= read:
        return None
    unit = data.tokenizer.unit
    these = "that one window" if windows == 1 else f"those {windows:,} windows"
    return (f"the validation split holds {count(windows, 'distinct window')} of {count(max_seq_len + 1, unit)} "
            f"(max_seq_len + 1), and each evaluation reads {count(read, 'window')} "
            f"({count(config.eval_batches, 'batch', 'batches')} of {each:,}): the val loss is measured on {these} "
            "over and over; a longer text, or a smaller max_seq_len, holds more")


# What a save writes beside the weights and the optimizer's moments, at the least: two random states of 5,056 bytes
# on a CPU, the files' headers, and a manifest of a few KiB (11 KiB for a 20-step run of the default model; more for a
# longer history or a tokenizer, not counted)
SAVE_EXTRA_BYTES = 16 * 1024


def _save_bytes(model_config, train_config) -> int:
    """The bytes the checkpoint of a model of `model_config` trained under `train_config` takes at the least: its
    float32 weights, the optimizer's state (AdamW 2 floats a parameter, Muon 1 a matrix's) and SAVE_EXTRA_BYTES; 0
    where the vocabulary is not known. From the settings: the model is not built before the seed is set. The weights
    alone were counted, and a run on a disk that held them and not the optimizer's state trained to its end, then
    failed to save."""
    try:
        if not model_config.vocab_size:
            return 0
        return checkpoint_bytes(model_config, train_config.optimizer) + SAVE_EXTRA_BYTES
    except (TypeError, ValueError):
        return 0


def _question(data) -> str | None:
    """A task's example question ("314159=" for sort:6), from its whole example; None for a text."""
    example = getattr(data, "example", None)
    return example[: example.index("=") + 1] if isinstance(example, str) and "=" in example else None


TRAIN = REGISTRY["train"]


def _watcher(session: Session, args: dict, data, reporter: Reporter) -> Watcher | None:
    """What watch= looks at, checked: the prompt (its last max_seq_len tokens, as `data` reads it), the
    block (default: the last), the token the lens should find."""
    if args["watch"] is None:
        return None
    if args["layer"] is not None and args["watch"] not in ONE_BLOCK:  # the others read every block
        raise UserError(f"{option('layer')} picks the block {option('watch', 'attn')} shows; "
                        f"{option('watch', args['watch'])} reads every block, so leave {option('layer')} out")
    layer = check_layer(session, args["layer"], default=-1)
    if args["watch"] == "grad":  # a loss to backpropagate: a text with its next tokens, as :grad reads one
        prompt, ids, dropped = view_prompt(session, args["prompt"] or known_text(data), reporter, data, scored=True,
                                           given=bool(args["prompt"]))
        if len(ids) < 2:
            raise UserError(f"{option('watch', 'grad')} needs a loss, so a prompt of at least two "
                            f"{data.tokenizer.unit}s: one to read and the one after it to predict")
        counted = getattr(data, "counted", None)  # a task counts its answer only, as :train does
        return Watcher("grad", data.tokenizer, prompt, layer,
                       counted=counted(ids) if counted and not dropped else None)
    if args["watch"] == "context":  # what :context reads: val windows, the same at every frame
        if args["prompt"] is not None:
            raise UserError(f"{option('watch', 'context')} scores the same val windows at every evaluation, not a "
                            f"prompt; leave {option('prompt')} out")
        data.check_fits(session.model_config.max_seq_len)
        return Watcher("context", data.tokenizer, None, data=data)
    if args["watch"] == "heads":  # what :heads reads: the repeated random tokens, or the prompt given
        from .why import check_causal

        check_causal(session, option("watch", "heads"))
        if args["prompt"] is None:
            from ..core.heads import repeat_length, trained_length

            # two copies must fit, in a task's rows too: said before training starts
            window = session.model_config.max_seq_len
            repeat_length(window, trained_length(data, window))
            return Watcher("heads", data.tokenizer, None, data=data)
        prompt, ids, _ = view_prompt(session, args["prompt"], reporter, data)
        if len(ids) < 2:
            raise UserError(f"{option('watch', 'heads')} on a prompt needs at least two {data.tokenizer.unit}s: a "
                            f"head chooses between positions; leave {option('prompt')} out for the repeated random "
                            "tokens")
        return Watcher("heads", data.tokenizer, prompt)
    if args["watch"] == "embed":  # the map of the model this run trains: the new data's vocabulary
        from ..core.inside import check_map

        check_map(data.tokenizer.vocab_size, session.model_config.d_model)
    prompt, _, _ = view_prompt(session, args["prompt"], reporter, data)
    target = true_next(data, prompt) if args["watch"] == "lens" else None
    return Watcher(args["watch"], data.tokenizer, prompt, layer, target, getattr(data, "answer_complete", None),
                   data=data if args["watch"] == "embed" else None)  # embed: whose text says which rows train


def _same_run_frames(kept: list[WatchFrame], first: WatchFrame, run_start: int) -> list[WatchFrame]:
    """The frames a continued run's own frames go on from: those the session kept, where they are of this run (the
    first made at its start, the last before `first`) and of the same view of the same input; else none."""
    same = [(f.view, f.prompt, f.layer, f.target) for f in (*kept, first)]
    if kept and kept[0].step == run_start and kept[-1].step <= first.step and len(set(same)) == 1:
        return list(kept)
    return []


def _diverged(session: Session, lr: float, e: TrainingDiverged, switched: str | None = None,
              optimizer: str | None = None, weight_decay: float = 0.0, given: bool = False,
              dropped: tuple[int, int] | None = None, constant: bool = False) -> TrainingDiverged:
    """The divergence, said with a rate known to work: the last one that trained here without diverging
    (or the default of this optimizer on this data, its recipe: AdamW's is not Muon's), unless that is not
    lower; then a tenth. Where that rate times weight_decay is still 1 or more, the decay is named instead: each
    step multiplies the matrices by 1 - lr * weight_decay, so past 1 they flip sign and grow (`weight_decay=1e19`
    was told to lower the rate to 0.001, which diverged as well). `given`: the rate was this :train's own (`lr=`),
    which a setting does not override: the way on is :train's own option (`minitf --set lr=0.01 train --lr 1000`
    diverged again as told). `lr`: the rate the run stepped at; `constant`: a rate it held (schedule=continue) other
    than the lr setting, said as such, and which a lower setting caps (the continuing rate never goes above it).
    `dropped`: (steps left, steps) of the stopped run whose drop this command announced, which the roll-back brought
    back: said so, with the line that goes on with it, and what a new run's line drops
    (`:train steps=30 lr=1e6` after a stop offered `:train lr=0.01`, which dropped the stopped run again unsaid)."""
    from ..core.recipes import recipe, recipe_label

    optimizer = optimizer or session.train_config.optimizer
    default = recipe(session.recipe_data, optimizer)["lr"]  # a copy of tiny Shakespeare by path: its recipe
    known = session.last_good_lr if session.last_good_lr is not None else default
    suggestion = known if known < lr else lr / 10
    if suggestion != known:
        why = "is a tenth of it"
    else:
        why = ("trained here without diverging" if session.last_good_lr is not None else
               f"is the default of {recipe_label(session.recipe_data, optimizer)}")
    if e.broken is not None:  # weights unusable before this run's first update (a folder's weights of 1e8): no rate
        return TrainingDiverged(  # mends them, and a rate suggested would fail the same way at step 1
            f"the {e.what} is {e.value} at step {e.step}, before any update of this run: the model's weights are "
            f"broken already ({e.broken}), and no learning rate mends them; nothing changed. Train from good weights: "
            # from the shell a line that loads them and trains (`minitf --load bad load NAME` trained nothing)
            + (f"{cmd('load', 'NAME')} ({cmd('ls')} lists them)" if syntax() == REPL else cmd('train', load='NAME')),
            step=e.step, what=e.what, value=e.value, broken=e.broken)
    back = (f"the {e.what} became {e.value} at step {e.step}; the model, optimizer, run and settings are "
            f"back at step {session.trainer.step}, where this training began{f' ({switched})' if switched else ''}. ")
    again = ""  # what the suggested line drops
    if dropped is not None:
        left, steps = dropped
        back += (f"The stopped run is kept, its last {count(left, 'step')} of {steps:,} with it: {cmd('train')} alone "
                 "goes on with it. ")
        again = f" (a new run again: it drops the stopped run's last {count(left, 'step')})"
    if suggestion * weight_decay >= 1:  # the rate it would suggest diverges too: the decay is what to lower
        decay = TrainConfig.spec("weight_decay").default
        return TrainingDiverged(
            back + f"Lower weight_decay (lr * weight_decay = {lr * weight_decay:g}: each step multiplies the matrices "
            f"by 1 - {lr * weight_decay:g}, which must stay above 0; {decay:g} is the default)",
            step=e.step, what=e.what, value=e.value, fix={"weight_decay": decay},
        )
    if given:
        return TrainingDiverged(back + f"Lower the learning rate ({lr:g} diverged; {suggestion:g} {why}): "
                                f"{cmd('train', lr=suggestion)}{again}", step=e.step, what=e.what, value=e.value)
    held = ", the constant rate this run went on at," if constant else ""
    return TrainingDiverged(
        back + "Lower the learning rate "
        f"({lr:g}{held} diverged; {suggestion:g} {why})",
        step=e.step, what=e.what, value=e.value, fix={"lr": suggestion},
    )


def _clock() -> float:
    """The seconds save_every counts (a clock of its own, that a test can move on)."""
    return time.monotonic()


# Seconds a save during a run waits for the folder lock, which another session's save holds: the run is frozen while
# it waits, and a Ctrl-C during :train asks a stop, which cannot cut a wait short (LOCK_WAIT is two minutes); a save
# that does not get it is skipped, and the next evaluation tries again
SAVE_WAIT = 1.0


class RunAutosave:
    """A run's autosave: written at its end, and during it as well, at the first evaluation save_every seconds (the
    setting) after the command began or the last such save. Saved at its end alone, a run lost all of its steps to a
    kill -9, the out-of-memory killer or a power cut during it.

    What is written during the run is what a stop at that step leaves (the step whole, evaluated, the rest of the run to
    go), so `:load autosave` then `:train` continues it exactly; its manifest names this process (run_writer), so that
    no one takes the run for a stopped one while it goes on (shared.run_in_progress). The first save rotates the
    autosaves as the end's did (what it moved and deleted is kept for the summary); every later one, and the end's,
    replaces this run's own where it is (in_place): another session's rotation may have moved it down to autosave-1,
    and saying so there, that session's own run must not be moved onto autosave-1 in its place by this run's next save.
    One run takes one slot. Called from on_step, after the step's timing: none of it is in the run's elapsed or
    tokens/s."""

    def __init__(self, session: Session, reporter: Reporter, same_run: bool):
        self.session, self.reporter = session, reporter
        self.same_run = same_run  # the autosave in the folder (or in a slot it was moved to) is this run's own
        self.since = _clock()
        self.step: int | None = None  # the step of the last save during the run; None: none
        self.written: SaveResult | None = None  # that save
        self.name: str | None = None  # where this run's autosave is (autosave, or the slot it was moved to); None: none
        self.failed = False  # a save during the run failed, which was said (once)
        self.skipped = False  # a save during the run found the folder busy and was skipped, which was said (once)
        # what the rotation did, at the save that rotated: as SaveResult's fields, and a stopped run moved down
        self.moved_aside: str | None = None
        self.moved_files = False
        self.dropped: Dropped | None = None
        self.aside: StoppedAside | None = None
        self.running_aside: tuple[str, str] | None = None  # (where, who trains it): a run in progress moved down

    def going(self, on: bool) -> None:
        """The run is going (on), or has ended: its saves during it are of a run in progress while it goes."""
        (RUNS_GOING.add if on else RUNS_GOING.discard)(self.session.token)

    def at_step(self, info) -> None:
        """After a step: the autosave, where the step was evaluated, is not the run's last, and save_every has passed.
        Not where a stop was asked: the run stops after this step and saves then."""
        from ..core.checkpoint.store import FolderBusy

        every = self.session.shell_config.save_every
        if (not every or info.val_loss is None or info.run_step >= info.run_steps or self.reporter.should_stop()
                or _clock() - self.since < every):
            return
        try:
            self.save(during=True)
            self.step = info.step
        except FolderBusy:  # tried again at the next evaluation: save_every has passed already
            if not self.skipped:
                self.reporter.notice(f"the autosave at step {info.step:,} was skipped: another save held the "
                                     f"checkpoint folder for more than {SAVE_WAIT:g} s; the run goes on, and saves at "
                                     "its next evaluation")
            self.skipped = True
            return
        except UserError as e:  # a full disk: the run goes on, and its end saves or says why not
            if isinstance(e, Interrupted):  # a Ctrl-C that cut the save short asks the stop it came for
                self.reporter.request_stop()
            elif not self.failed:
                self.reporter.notice(f"the autosave at step {info.step:,} failed ({self._why(e)}); the run goes on, "
                                     "and saves at its end")
            self.failed = True
        self.since = _clock()

    def _why(self, e: UserError) -> str:
        """Why a save during the run failed, with a way on that waits for the run's end: the prompt is the run's until
        then (a `:set checkpoint_dir=DIR` was offered while the run held it)."""
        before = getattr(e, "before_way", None)  # shared.keep_meanwhile's words before its way on
        if before is None:
            return str(e)
        return (f"{before}choose another folder after the run: {cmd('set', checkpoint_dir='DIR')} keeps this model "
                "and saves there")

    def save(self, during: bool = False) -> SaveResult:
        """Write the autosave of the run as it is now (rotating the others, the first time); `during`: a save during
        the run, which names this process and waits SAVE_WAIT seconds at most for the folder."""
        from ..core.checkpoint.locks import lock_owner

        directory = self.session.checkpoint_dir
        first = self.name is None
        stopped = stopped_autosave(directory) if first else None  # read before the rotation moves it
        written = save_session(self.session, AUTOSAVE_NAME, origin="autosave", rotate=AUTOSAVES_KEPT,
                               same_run=self.same_run, reporter=None if during else self.reporter, in_place=not first,
                               writer=lock_owner() if during else None, lock_wait=SAVE_WAIT if during else None)
        self.same_run = True  # written: this run's own from now on, wherever another session's rotation moves it
        if written.moved_aside is not None or written.dropped is not None:
            self.moved_aside, self.moved_files, self.dropped = written.moved_aside, written.moved_files, written.dropped
        if stopped is not None and written.moved_aside is None:
            where = moved_to(directory, stopped[0], AUTOSAVES_KEPT)
            if where is not None and stopped[3] is not None:  # a run still going, which goes on saving there
                self.running_aside = (where, stopped[3])
            elif where is not None:
                self.aside = StoppedAside(where, stopped[1], stopped[2])
        if not first and written.name != self.name:
            # another session's autosave moved this run's down (it goes on there), or its slot went (rotated off the
            # end, or saved over): saved anew, as a new run's autosave
            self.reporter.notice(
                f"another session's autosave moved this run's from {self.name} to {written.name}: the run saves there"
                if written.name != AUTOSAVE_NAME else
                f"this run's autosave was gone from {self.name} (another session's rotation, or a save over it): "
                f"saved anew as {written.name}")
        self.name, self.written = written.name, written
        return written

    def holds(self, step: int) -> SaveResult | None:
        """The save during the run where it holds the model at `step` still (a stop during or just after it): the end
        need not write that step again (seconds of a large model, under a `docker stop`'s ten)."""
        if self.written is not None and self.step == step and self.session.unsaved_step is None:
            return self.written
        return None

    def say_kept(self) -> None:
        """After a run that failed and was rolled back: the autosave written during it stays, and says so, with what
        its rotation moved and deleted (the command changed the folder, though not the session), and where the model
        rolled back to is now."""
        if self.step is None:
            return
        self.reporter.notice(f"{self.name} holds this run's step {self.step:,}, saved during it (save_every) before it "
                             "failed; the session goes back to where this training began")
        for line in rotation_lines(self.name, self.dropped, None, self.moved_aside, self.moved_files, self.aside,
                                   self.running_aside):
            self.reporter.notice(line)
        # a continued run's save replaced the checkpoint it continued (its own run's, one slot): the rolled-back model
        # is in none now, and the further-trained one goes on as well
        if (step := self.session.unsaved_step) is not None:
            keep = cmd("save", "NAME") if syntax() == REPL else cmd("train", save="NAME")
            load = restore(self.name) if syntax() == REPL else cmd("train", load=self.name)
            self.reporter.notice(f"the model at step {step:,} is in no checkpoint now: {keep} keeps it, or {load} "
                                 f"goes on from step {self.step:,}")


def rotation_said(result: TrainResult) -> list[str]:
    """What a run's autosave rotation did that its summary says (rotation_lines). The oldest autosave deleted is said
    where it was a stopped run, or where it was the better run: the baseline a few experiments back, said where the
    two losses compare (the same data, tokens and mask; each after its own last switch of data or mask, as :ls gives
    them)."""
    gone = result.dropped
    better = (gone is not None and gone.val_loss is not None and result.val_loss is not None
              and gone.data_spec == result.data and gone.val_loss < result.val_loss
              and (gone.vocab_size, gone.causal) == (result.vocab_size, result.causal))
    return rotation_lines(result.saved, gone if gone is None or gone.steps_left or better else None,
                          "lower than this run's" if better else None, result.moved_aside, result.moved_files,
                          result.stopped_aside, result.running_aside)


def rotation_lines(saved: str | None, gone: Dropped | None, than: str | None, moved_aside: str | None,
                   moved_files: bool, aside: StoppedAside | None, running_aside: tuple[str, str] | None) -> list[str]:
    """What an autosave's rotation did that a person must hear: the oldest autosave deleted (`gone`, said as the
    caller decides: a stopped run always; `than`, how its val loss compares), a checkpoint or folder named `saved`
    that was no run's autosave moved aside, a stopped run moved down (`aside`), and a run in progress moved down
    (`running_aside`: where, who trains it). A run's summary says them, and so does a run that failed after its save
    during it (its error alone said nothing of a stopped run deleted)."""
    lines = []
    keep = cmd("save", "NAME") if syntax() == REPL else cmd("train", save="NAME")  # a new process: no model
    if gone is not None:
        what = (f"a run stopped at step {gone.step:,}, {count(gone.steps_left, 'step')} before its end"
                if gone.steps_left else f"step {gone.step:,}" if gone.step is not None else "unreadable")
        if not gone.steps_left and gone.val_loss is not None:
            what += f", val loss {gone.val_loss:.4f}" + (f", {than}" if than else "")
        lines.append(f"{gone.name} ({what}) was the oldest autosave kept and made room for this one; {keep} keeps a "
                     "run for good")
    if moved_aside is not None and moved_files:  # a folder of the user's, in the autosave's place
        lines.append(f"{saved} was a folder of other files, not a checkpoint: it is kept as {moved_aside}")
    elif moved_aside is not None:  # a checkpoint saved by name as `autosave`: kept, under another name
        lines.append(f"{saved} held a checkpoint saved by name, not a run's autosave: it is kept as {moved_aside} "
                     f"({restore(moved_aside)} restores it)")
    if aside is not None:  # unsaid, it went out of the rotation four runs later
        lines.append(f"{AUTOSAVE_NAME} held an unfinished run (stopped at step {aside.step:,} of "
                     f"{aside.step + aside.steps_left:,}): it is now {aside.name}; {continues_line(aside.name)}")
    if running_aside is not None:  # not stopped: its process saves it there as it goes on (RunAutosave in_place)
        where, who = running_aside
        lines.append(f"{AUTOSAVE_NAME} held a run in progress in {who}: it is now {where}, where that run goes on "
                     "saving")
    return lines


def _save_after_peer_lost(session: Session, save_as: str | None, autosave: bool, resumed: bool,
                          trained: bool) -> str:
    """Save what this rank has after another rank died (rank 0 only, as always); what to say about it.

    When no step of this :train finished, there is nothing new to keep, and an autosave would only
    push an older one out of the rotation: nothing is saved then.
    """
    name = save_as if save_as is not None else (AUTOSAVE_NAME if autosave else None)
    if name is None:
        return "nothing was saved (autosave is off)"
    if not trained:
        return "no step of this run finished, so nothing was saved"
    if not distributed.is_main():
        return "process 0 saves what it has, if it is still running"
    try:
        saved = save_session(session, name, origin="autosave" if save_as is None else "save",
                             rotate=AUTOSAVES_KEPT if save_as is None else None, same_run=resumed)
    except UserError as e:
        return f"it could not be saved ({e})"
    kept = (f"; the checkpoint saved by name as {saved.name} is kept as {saved.moved_aside}" if saved.moved_aside
            else "")
    # the way on, as a stopped run's line gives it: the same launch (one process would halve the global batch)
    into = {"save": saved.name} if syntax() == SHELL and saved.name != AUTOSAVE_NAME else {}
    again = distributed.relaunch(cmd("train", load=saved.name, **into))
    return f"saved as checkpoint {saved.name} (step {saved.step}){kept}; {again} continues"


def _thin(rows: list, most: int) -> list:
    """At most `most` rows (docs/json.md promises it of `curve`), the last one kept: the evaluated rows (the chart's
    validation points) first, the others evenly spread over the room they leave. Keeping every evaluated row on top of
    an even stride gave 240 rows of 200 (400 steps, eval_every=5); evaluations that fill the room alone are spread too.
    """
    if len(rows) <= most:
        return [dict(r) for r in rows]
    last = len(rows) - 1
    evaluated = [i for i, r in enumerate(rows) if r["val_loss"] is not None and i != last]
    if len(evaluated) >= most - 1:
        keep = _spread(evaluated, most - 1)
    else:
        others = [i for i, r in enumerate(rows) if r["val_loss"] is None and i != last]
        keep = evaluated + _spread(others, most - 1 - len(evaluated))
    return [dict(rows[i]) for i in sorted(keep + [last])]


def _spread(indices: list[int], room: int) -> list[int]:
    """At most `room` of `indices`, evenly spaced from the first."""
    if room <= 0:
        return []
    return indices[::-(-len(indices) // room)] if indices else []


def train_summary(result: TrainResult) -> str:
    """The line under the table: what the run did, its last losses, its speed."""
    parts = []
    if result.train_loss is not None:
        # with dropout on, a step's own loss is of a thinned model: said so, and the number that compares with val
        # beside it (a dropout run's 2.1696 above val 2.0079 read as the opposite of overfitting)
        dropped = " (one batch, dropout on)" if result.train_eval_loss is not None else ""
        parts.append(f"train loss {result.train_loss:.4f}{dropped}")
    if result.train_eval_loss is not None:
        parts.append(f"train (eval mode) {result.train_eval_loss:.4f}")
    if result.val_loss is not None:
        # a stopped run's last evaluation may lie many steps before the stop: said, beside the last step's train loss
        at = result.evals[-1]["step"] if result.evals else result.total_steps
        parts.append(f"val loss {result.val_loss:.4f}" + (f" at step {at:,}" if at != result.total_steps else ""))
    if result.val_bpc is not None:
        parts.append(bpc_words(result.val_bpc, result.tokens_per_char))
    if result.accuracy is not None:
        parts.append(f"accuracy {fmt.pct(result.accuracy)}")
    if result.clipped_steps:  # the loop's clip_grad_norm_ was silent: 35 of 200 steps clipped, unsaid
        parts.append(f"gradient clipped at {result.clipped_steps:,} of {count(result.steps, 'step')} (norm above "
                     f"grad_clip = {result.grad_clip:g})")
    if result.steps:  # no step ran (a Ctrl-C at once): no speed to state ("0 tokens/s")
        parts.append(f"{fmt.rate(result.tokens_per_second)} tokens/s")
        if (flops := utilisation_words(result)) is not None:
            parts.append(flops)
    parts.extend(speed_parts(result))
    # The time as the table's elapsed column writes it (0.61s, not 0.6 s under it). A new run's table counts from
    # this command's first step: its last row's elapsed is this command's time, and the line gives that very
    # number. A continued run's counts from the run's first step, the earlier commands' (or a saved run's) time
    # included: beside it, this command's seconds alone read as a contradiction, so the line gives both.
    # This command's part of a continued run is what it added to the table's elapsed: its wall time (seconds) holds
    # the drawing between steps too, and 26 steps "took 1.0 s" beside a table whose whole run read 1.1 s after a
    # first part of 0.57 s.
    run_elapsed = result.curve[-1].get("elapsed") if result.curve else None
    if run_elapsed is None or result.resumed:
        this_time = result.run_seconds if run_elapsed is not None and result.run_seconds else result.seconds
        parts.append(spaced_seconds(this_time))
        if run_elapsed is not None and fmt.seconds(run_elapsed) != fmt.seconds(this_time):
            # not in brackets: a stopped run's summary holds its parts in brackets, and it ended "...counts it))"
            parts[-1] += f" this time, {spaced_seconds(run_elapsed)} for the whole run as the table counts it"
    else:
        parts.append(spaced_seconds(run_elapsed))
    if result.stopped:
        end = result.total_steps + result.run_remaining
        head = f"stopped at step {result.total_steps:,} of {end:,}"
        if result.saved or syntax() == REPL:  # a one-shot shell's run goes on only from a checkpoint
            # under torchrun the same launch: batch_size is per process, one process would halve the global batch
            # a run saved by name goes on into it: the REPL's session remembers the name, a new one-shot is told it
            into = {"save": result.saved} if syntax() == SHELL and result.saved not in (None, AUTOSAVE_NAME) else {}
            # the view it watched, which a bare `:train` went on without (its frames stopped at the stop, unsaid)
            if result.frames:
                last = result.frames[-1]
                into |= {"watch": last.view, **({"layer": last.layer} if last.layer is not None else {})}
            head += f": {distributed.relaunch(cmd('train', load=result.saved, **into))} continues"
        return f"{head} ({count(result.steps, 'step')} this time; " + ", ".join(parts) + ")"
    head = f"trained {count(result.steps, 'step')}"
    if result.total_steps != result.steps:
        head += f" (step {result.total_steps:,} in total)"
    return head + ": " + ", ".join(parts)


def squeezed_line(warmup: int, steps: int, lr: float) -> str:
    """What core.train.lr_at made of a warm-up longer than a short run, in one line: all_warm_up's notice, which is
    said from WARM_UP_NOTE_FROM steps on, in brief (5 steps rose 0.0025, 0.005, ... to 0.01 without a word)."""
    # "longer than" only where it is: warmup_steps = steps - 1 or steps covers the run (all_warm_up's words)
    how = "is longer than" if warmup > steps else "covers"
    if steps <= 2:  # lr_at's warm-up of steps - 1 steps reaches the peak at the first step
        return (f"warmup_steps = {warmup} {how} this run of {count(steps, 'step')}: it trained at the peak "
                f"lr = {lr:g} from its first step, without warm-up or decay")
    return (f"warmup_steps = {warmup} {how} this run of {count(steps, 'step')}: the warm-up was squeezed into "
            f"it, the rate rising to lr = {lr:g} over its first {count(steps - 1, 'step')}, without decay")


def spaced_seconds(value: float) -> str:
    """Seconds as fmt.seconds writes them (the loss table's elapsed), with a space before the unit: "0.61 s"."""
    return fmt.seconds(value)[:-1] + " s"


def bpc_words(bpc: float, tokens_per_char: float | None) -> str:
    """The validation loss in bits per character, with the ratio it was computed with where it is not 1. To four
    decimals, as the loss table's bits/char column just above writes it (3.726 under 3.7263 read as two numbers)."""
    if tokens_per_char is None or abs(tokens_per_char - 1) < 1e-12:
        return f"{bpc:.4f} bits per character"
    return f"{bpc:.4f} bits per character ({tokens_per_char:.3f} tokens a character of the val text)"


def speed_parts(result: TrainResult) -> list[str]:
    """What the summary adds for the speed switches: the dtype the steps ran in ("float32" too: where dtype=auto
    chose it, nothing said so, and the README sends a user to this line to learn which it chose), on a CPU with
    the threads it ran on ("float32 on 2 CPU threads") and the kernel of its float32 products ("MKL for the fast
    path's linear products"), "compiled in 41.2 s"."""
    parts = [result.dtype]
    if result.cpu is not None and result.threads:
        # a float32 sum split across threads adds in another order at another count: the same seed gave 2.6415 in one
        # process and 2.6419 in the next, threads=auto having picked the count from the machine's load, unsaid
        parts[-1] += f" on {count(result.threads, 'CPU thread')}"
    if result.cpu_float32_products is not None:
        # the other thing a process picks for itself that moves a run's numbers (core.fastpath.onednn_faster): at one
        # thread count, float32 runs on MKL and oneDNN parted at step 3 with nothing said
        # the kernel the fast path chose for its linear layers' products: other products (a SwiGLU's, nn.Linear's
        # own) run on MKL whatever it chose, so "oneDNN's products" claimed more than ran on it
        evaluations = "" if result.dtype == "float32" else " float32 products in its evaluations"
        parts[-1] += f", {result.cpu_float32_products} for the fast path's linear{evaluations or ' products'}"
    if result.dtype_before is not None:  # the run's earlier steps, in another (:set dtype= while it was stopped)
        dtype, step = result.dtype_before
        parts.append(f"{dtype} at step {step:,}, the step before these")
    if result.ns_dtype_before is not None and result.newton_schulz_dtype is not None:
        dtype, step = result.ns_dtype_before  # Muon's orthogonalisation moved, the products perhaps not
        parts.append(f"Muon's Newton-Schulz in {result.newton_schulz_dtype} ({dtype} at step {step:,}, the step "
                     "before these)")
    if result.compile_seconds is not None:
        # a run of the compiling step alone (stopped at step 1) has no other step: its tokens/s is that step's
        counted = "its one step's tokens/s counts it" if result.steps == 1 else "not in tokens/s"
        parts.append(f"compiled in {result.compile_seconds:.1f} s ({counted})")
    elif result.compiled:
        parts.append("compiled")
    elif result.compile_failed:
        parts.append("not compiled (torch.compile failed: the line below says why)")
    return parts


@render.register(TrainResult)
def render_train(result: TrainResult, console: Console, frame_shown: bool = False) -> None:
    """The run's table, last frame, chart and summary; `frame_shown`: the last frame was printed already. Where the
    session ends with this command (result.session_ends), every line to go on is the shell's, in its folder."""
    if not result.session_ends or syntax() == SHELL:
        return _render_train(result, console, frame_shown)
    with speaking(SHELL), invoked_with([("--checkpoint-dir", result.folder)] if result.folder else []):
        return _render_train(result, console, frame_shown)


def _render_train(result: TrainResult, console: Console, frame_shown: bool = False) -> None:
    if result.evals:
        table = LossTable(result.evals, narrow=console.width < NARROW, vocab_size=result.vocab_size,
                          eval_batches=result.eval_batches, dtype=result.dtype)
        if result.gflops is not None:  # what the summary's FLOP rate under the table counts, beside its tokens/s
            table.legend_words["tokens_per_second"] += f"; {flops_legend(result)}"
        console.print(table)
    if result.frames and not frame_shown:  # the last frame, as it was under the live table
        console.print(watch_view(result.frames[-1], console.width, unscaled(console)))
    if len(result.curve) >= 10:  # a small chart of this run under its table
        console.print(loss_chart(result.curve, min(console.width, 80), 8, result.vocab_size, result.counters))
    say(console, train_summary(result), "yellow" if result.stopped else "green")
    if result.compile_failed:  # compile=on asked for it: why it did not happen, under the summary that says it did not
        say(console, result.compile_failed, "yellow")
    if result.val_loss is not None and not result.causal:  # as :ngram says of such a model, with or without counters
        fair = ", and no counter is a fair match" if result.counters else ""  # (said only after :ngram, it was)
        note(console, f"val {result.val_loss:.3f}: no causal mask, so every position but the last read the token it "
                      f"predicts; such a loss is no language model's{fair} ({cmd('set', causal=True)} puts the mask "
                      "back)")
    elif result.counters and result.val_loss is not None:
        note(console, against_counters(result.val_loss, result.counters))
    if result.held_out_only and result.val_loss is not None:
        # not the rate: sort:1's held-out question holds a 1 that no training question does, and the advice to lower
        # the rate then read "learned almost nothing" beside a train loss of 0.6
        shown = ", ".join(map(repr, result.held_out_only))
        say(console, f"the validation data holds {shown}, which the training data never holds: no model predicts "
                     f"what it never saw, so the val loss ({result.val_loss:.4g}) measures that, whatever the rate "
                     f"({cmd('data')} says more; data whose training part holds every symbol measures learning)",
            "yellow")
    elif memorised(result):
        task = result.data.partition(":")[0] in TASKS  # its questions, whose fix is a larger task, not a longer text
        learned = ("its training questions by heart and answers the held-out ones worse than knowing nothing; a "
                   "larger task holds more questions than it can learn so" if task else
                   "its training text by heart and reads the held-out text worse than knowing nothing; a longer "
                   "text (or a smaller model) measures learning")
        say(console, f"the val loss {result.val_loss:.4g} is far above ln(V) = {uniform_loss(result.vocab_size):.2f}, "
                     f"a uniform guess, while the train loss {result.train_loss:.4g} is under it: the model learned "
                     f"{learned}", "yellow")
    elif blown_up(result) and result.switched_at is not None:
        # not the rate: reverse:8's model, 100% accurate, then 1 step of reverse:11 at lr=1e-3 ended at 10.1, and
        # the advice read "lr=0.001 is a safe start" of the rate it ran at
        # a switch in the middle of a stopped run: the run began at its own step on the other data, not on this
        began = (f"this run switched to {result.data} at step {result.switched_at:,}, its model trained to there on "
                 "other data" if result.run_start is not None and result.run_start < result.switched_at
                 else f"this run began on {result.data} with a model trained to step {result.switched_at:,} on other "
                      "data")
        say(console, f"the val loss {result.val_loss:.4g} is far above ln(V) = {uniform_loss(result.vocab_size):.2f}, "
                     f"a uniform guess: {began} (the switch kept its weights), which it has not learned yet, whatever "
                     f"the rate; train on longer, or {cmd('train', fresh=True)} starts from new weights", "yellow")
    elif blown_up(result) and (first := began_blown_up(result)) is not None:
        # not this run's rate: a model blown up by lr=30 went from 3836.9 to 3827.4 at lr=1e-3, and the advice read
        # "lr=0.001 is a safe start" of the rate it ran at
        say(console, f"the val loss {result.val_loss:.4g} is far above ln(V) = {uniform_loss(result.vocab_size):.2f}, "
                     f"a uniform guess, and was before this run (its first step's loss {first:.4g}): the weights it "
                     f"continued were broken already, whatever its rate; {cmd('load')} a checkpoint from before they "
                     f"broke ({cmd('ls')} lists them), or {cmd('train', fresh=True)} starts from new weights", "yellow")
    elif blown_up(result):
        # its weights stay broken: a next :train at a safe rate continues them (a 1-step run at lr=3e4 left weights
        # whose gradient overflowed at once), so the advice starts afresh
        say(console, f"the val loss {result.val_loss:.4g} is far above ln(V) = {uniform_loss(result.vocab_size):.2f}, "
                     "a uniform guess: training made the model worse, which a learning rate too high for it does, and "
                     "a next run would continue these weights; "
                     f"{cmd('lrfind')} finds a rate that trains, {cmd('train', fresh=True, lr=0.001)} starts anew at a "
                     "safe one", "yellow")
    elif stalled(result) and (peak := too_low_rate(result)) is not None:
        # lr=1e-9: a step moves each weight by about lr, and :checks overfit would train at it too and fail alike
        say(console, f"the val loss is still near ln(V) = {uniform_loss(result.vocab_size):.2f}, a uniform guess, "
                     f"after {count(result.steps, 'step')}: at a peak rate of {peak:.2g} a step moves a weight by "
                     f"about that much ({result.steps * peak:.1g} in all), far too little to learn; "
                     f"{cmd('lrfind')} finds a rate that trains, {cmd('set', lr=0.001)} is a safe start", "yellow")
    elif stalled(result):
        say(console, f"the val loss is still near ln(V) = {uniform_loss(result.vocab_size):.2f}, a uniform guess, "
                     f"after {count(result.steps, 'step')}: the model has learned almost nothing. "
                     f"{cmd('checks', 'overfit')} says whether it can learn at all (one batch by heart), "
                     f"{cmd('checks')} what else may be wrong", "yellow")
    # a held rate (schedule=continue) is low by design: the end of a decay, or a fine-tuning's choice
    if (line := low_rate_line(result)) is not None and result.steps and result.schedule != "continue" \
            and not (stalled(result) and too_low_rate(result)):
        say(console, line, "yellow")  # a stalled run at such a rate was told above, with a rate that trains
    if result.warmup_squeezed is not None and result.schedule == "new" and result.steps:
        note(console, squeezed_line(*result.warmup_squeezed))
    if result.schedule == "continue" and result.constant_lr and result.constant_from:
        note(console, f"a constant rate of {result.constant_lr:.2e}, lr x min_lr_ratio, where a run's decay ends: the "
                      f"weights from {result.constant_from} were trained elsewhere, and a warm-up to the peak rate "
                      f"would shake what they learned ({cmd('train', schedule='new')} starts a warm-up + cosine)")
    elif result.schedule == "continue" and result.constant_lr:
        # the rule as the run applied it: `:set lr=` under the last run's final rate caps it, and the line said "the
        # last run's final rate" of a rate that was the setting's
        note(console, f"a constant rate of {result.constant_lr:.2e} (schedule=continue: lr= if given, else the last "
                      "run's final rate, or the lr setting where that is lower; schedule=new starts a fresh warm-up + "
                      "cosine)")
    if result.saved:
        what = "replaced checkpoint" if result.replaced else "saved checkpoint"
        # from the shell a command's session ends with it: the next `minitf train` starts a new run (and moves this
        # one down the rotation), which a script writer learned only from the numbers; the line that continues it
        goes_on = (f"; {cmd('train', load=result.saved)} continues it, a {named('train')} without --load starts anew"
                   if syntax() == SHELL and not result.stopped else "")
        if result.own_parts:  # (commands.checkpoints.own_parts_line: no :load makes them)
            from .checkpoints import own_parts_line

            say(console, f"{what} {result.saved}; {own_parts_line(result.saved, result.folder, result.own_parts)}",
                "yellow")
        else:
            note(console, f"{what} {result.saved} ({restore(result.saved)} restores it{goes_on})")
        if result.launch is not None:
            ranks, each = result.launch
            note(console, f"trained by {ranks} processes at batch_size {each} each, a global batch of {ranks * each}: "
                          f"one process continues it alike with --set batch_size={ranks * each}, and under torchrun "
                          f"the same launch does (the checkpoint does not record how many processes trained it)")
        if result.kept_as is not None:  # never a trained model lost to one command (docs/checkpoints-and-safety.md)
            say(console, f"{result.saved} held a model trained further (step {result.kept_step:,}) than this one: it "
                         f"is kept as {result.kept_as} ({restore(result.kept_as)} brings it back)", "yellow")
        elif result.held_in is not None:  # kept nowhere new: another checkpoint holds those weights at that step
            say(console, held_line(result.saved, result.held_in, result.held_step), "yellow")
        elif result.replaced_unseen is not None:  # as :save says it: another session's work went without a word
            # (not where it was kept: "it is replaced" was said of the model the line before had kept)
            say(console, f"{result.saved} held a model at step {result.replaced_unseen:,} {unseen_by()}: it is "
                         "replaced", "yellow")
        for line in rotation_said(result):
            say(console, line, "yellow")
    if result.save_error:  # an error where it fails the command (a one-shot shell exits 1), as its stderr line says
        say(console, f"{'error' if syntax() == SHELL else 'warning'}: not saved: {result.save_error}", "yellow")
    elif not result.saved and result.steps and syntax() == SHELL:  # autosave=off, no --save: ended without a word
        note(console, f"not saved (autosave is off): the trained model ends with this command; "
                      f"{cmd('train', save='NAME')} keeps the next one")
    # what the banner said comes next, said when it does: to a person at the prompt (a script's output, piped on to
    # another program or kept as a log, read "now type some text" where no one types)
    if first_run_done(result) and syntax() == REPL and at_keyboard():
        if result.question:  # typed text would be refused: a task's vocabulary is its digits and signs
            note(console, f"now type a question for the model to answer, as {result.question}, or "
                          f"{cmd('mistakes')} to see the ones it gets wrong; {cmd('help')} lists the views inside it")
        else:
            note(console, f"now type some text for the model to continue, or {cmd('gen', 'TEXT', n=80)}; "
                          f"{cmd('help')} lists the views inside it")
    if result.stopped and not result.steps and not result.saved and not result.save_error:
        # "this time": the earlier steps of a continued run are in its autosave already
        note(console, "no step finished this time, so nothing was saved")
    if result.frames and not result.steps:  # session.watch_frames was left as it was
        note(console, f"watched {count(len(result.frames), 'frame')} ({result.frames[0].view}) and no step: "
                      + (f"{cmd('report')} and {cmd('plot')} show the frames they showed before" if syntax() == REPL
                         else "nothing to show after it"))
    elif result.frames:
        more = plot_hint(result.frames)
        # the frames live in the session, which a one-shot command ends (a checkpoint does not keep them)
        then = (f"{cmd('report')} shows them in order{more}" if syntax() == REPL else
                f"the frames end with this command: in the REPL ({interactive()}), :report and :plot show them after "
                "the run")
        note(console, f"watched {count(len(result.frames), 'frame')} ({result.frames[0].view}{watch_time(result)}); "
                      f"{then}")


@after_lines.register(TrainResult)
def train_after_lines(result: TrainResult, console: Console) -> None:
    """A run whose frames were printed as they came, each under its evaluation's line: all but the last frame."""
    render_train(result, console, frame_shown=True)


def watch_time(result: TrainResult) -> str:
    """": 0.05 s a frame, 0.15 s in all, not counted in the table's time": what watching added to the run, which the
    table's elapsed, its tokens/s and the summary leave out (a context frame can take longer than the evaluation)."""
    if result.watch_seconds is None or not result.frames:
        return ""
    def said(seconds: float) -> str:  # a lens frame takes milliseconds: "0.00 s" would say it took nothing
        return spaced_seconds(seconds) if seconds >= 0.005 else f"{seconds * 1000:.1f} ms"

    each = result.watch_seconds / len(result.frames)
    return f": {said(each)} a frame, {said(result.watch_seconds)} in all, not counted in the table's time"


def plot_hint(frames: list[WatchFrame]) -> str:
    """"; :plot what=W charts ...": the charts :plot draws of these frames, only those it can draw (a lens
    prompt whose next token is unknown has no rank to chart, a prompt with no repeat no copying)."""
    charted = [what for what in WATCHED if WATCHED_SERIES[what](frames)]
    plots = " and ".join(cmd("plot", what=what) for what in charted)
    if len(charted) != 1:
        return f"; {plots} chart them" if charted else ""
    return f"; {plots} {PLOT_HINTS[charted[0]]}"


STALLED = 0.9  # a finished run whose val loss is still above this share of ln V has learned almost nothing
STALLED_STEPS = 50  # ... if it ran this many steps: a shorter one may just not have started


BLOWN_UP = 1.5  # a val loss above this many times ln V: training made the model worse than a uniform guess
MEMORISED = 0.8  # ... beside a train loss under this many times ln V: learned by heart (`memorised`)


def first_run_done(result: TrainResult) -> bool:
    """The model's first run ended as it should: it has something to show now (the runs after need no hint)."""
    first = result.steps == result.total_steps if result.first_run is None else result.first_run
    return (not result.stopped and result.run_remaining == 0 and first and result.steps > 0 and not blown_up(result)
            and not stalled(result))


def blown_up(result: TrainResult) -> bool:
    """A run whose val loss ended far above ln V, its train loss too: no learning does that; a rate too high for the
    model does (lr=50 ends pydoc's 50 steps at 672, 5 steps at 45,482, with every loss still finite)."""
    baseline = uniform_loss(result.vocab_size)
    return (baseline is not None and result.val_loss is not None and result.val_loss > BLOWN_UP * baseline
            and not memorised(result))


def memorised(result: TrainResult) -> bool:
    """A run whose val loss ended far above ln V while its train loss is well under it: the model learned its training
    text by heart (90 characters of a 100-character file, val 2.90 against ln V = 1.79 and train 1.06), which was
    blamed on the learning rate, and the rate suggested ended no better. Well under (MEMORISED): a step's train loss
    is its batch's before the update, so one step at lr=3e4 read 4.625 against ln V = 4.635, a fresh model's chance,
    beside a val loss of 1.2e10, and was called learning by heart."""
    baseline = uniform_loss(result.vocab_size)
    return (baseline is not None and result.val_loss is not None and result.train_loss is not None
            and result.val_loss > BLOWN_UP * baseline and result.train_loss < MEMORISED * baseline)


def began_blown_up(result: TrainResult) -> float | None:
    """The loss of this command's first step where it was already far above ln V (before any update of it): the
    weights were broken before it ran, so no rate it ran at explains where it ended."""
    baseline = uniform_loss(result.vocab_size)
    first = next((row["train_loss"] for row in result.curve if row.get("train_loss") is not None), None)
    return first if baseline is not None and first is not None and first > BLOWN_UP * baseline else None


TOO_LITTLE = 1e-3  # all a run's steps together at its peak rate move a weight (init std 0.02) by less than this


def too_low_rate(result: TrainResult) -> float | None:
    """The run's peak rate where its steps, all at that rate, would move a weight by less than TOO_LITTLE."""
    rates = [row["lr"] for row in result.curve if row.get("lr") is not None]
    if not rates:
        return None
    peak = max(rates)
    return peak if peak * max(result.steps, 1) < TOO_LITTLE else None


def stalled(result: TrainResult) -> bool:
    """A finished run of learnable data whose val loss is still near ln V."""
    baseline = uniform_loss(result.vocab_size)
    return (not result.stopped and result.learnable and result.steps >= STALLED_STEPS and baseline is not None
            and result.val_loss is not None and result.val_loss > STALLED * baseline)


# --- :plot ---------------------------------------------------------------------------------------
PLOT_WHAT = ("loss", "lr", "grad_norm", "lens_rank", "block_grad", "copying", "induction", "context")
WATCHED = ("lens_rank", "block_grad", "copying", "induction", "context")  # charted from watch= frames
WATCH_OF = {"lens_rank": "lens", "block_grad": "grad", "copying": "heads", "induction": "heads", "context": "context"}
INDUCTION_CURVES = 4  # :plot what=induction: the heads with the highest induction score at the last frame
PLOT_TITLES = {"loss": "loss", "lr": "learning rate", "grad_norm": "gradient norm (before clipping)",
               "lens_rank": "the logit lens: the rank of the true next token after each layer (1: the best guess)",
               "block_grad": "|dL/dW| of each block's weights, on the watched prompt",
               "copying": "the loss on random tokens (first copy) and on the same tokens again (repeat)",
               "induction": "the induction score of the heads that score highest at the end",
               "context": "the val loss of each band of positions in the window (position i reads i + 1 tokens)"}
# the curves of a loss chart; with dropout on, the eval-mode train loss too, the one to compare with val (the dots
# alone were the one-batch loss with units dropped, "train" above val)
LOSS_GLYPHS = {"train": ("•", "cyan"), "train (eval mode)": ("◦", "blue"), "val": ("×", "magenta")}


@dataclass
class PlotSeries:
    # "train" and "val" (loss), "lr", "grad_norm"; a layer (lens_rank: "embed", "blocks.0"), "block 0" (block_grad),
    # "first copy" and "repeat" (copying), "head 0.1" (induction), "positions 2-3" (context)
    name: str
    steps: list[int]  # the training step of each point (a watched view's: the step its frame was made at)
    # each point's value: a loss in nats per token (loss, copying, context), the rate (lr), the gradient's norm before
    # clipping (grad_norm), the true next token's rank, 1 the likeliest (lens_rank), the block's |dL/dW|, attention's
    # and the FFN's together (block_grad), the head's induction score (induction)
    values: list[float]


@dataclass
class PlotResult:
    what: str  # loss | lr | grad_norm | lens_rank | block_grad | copying | induction | context
    series: list[PlotSeries]  # the curves, each named with its points (loss: train, then val)
    vocab_size: int | None = None  # for the ln(V) line of a loss chart
    # the loss chart's counting models after :ngram on this data: the bigram and the best (the lowest val loss)
    counters: list[PlotLevel] = field(default_factory=list)
    # the step after which the data in use came in, where the chart has steps before it (a switch to data of the
    # same vocabulary kept the model): the curves before it are of the data before
    data_from: int | None = None
    # a chart of watched frames: the model's step where it has trained on since the last frame (an unwatched :train
    # after the watched one), so that the chart's end is not read as the model's; None: the frames reach it
    model_step: int | None = None
    # (four heads at 0.032 to 0.034 zigzagged over the whole height, with nothing to say even attention scores 0.033)
    even: float | None = None  # induction: the score of a head that attends evenly, drawn as a level
    # grad_norm: the grad_clip setting, the norm each step's gradient was scaled down to where above it (0: no
    # clipping), drawn as a level; None: another chart. The setting now: a history keeps no earlier run's
    grad_clip: float | None = None


def plot_levels(counters: list[tuple[int, float]]) -> list[PlotLevel]:
    """Which of :ngram's counters (n, val loss) a loss chart draws: the bigram (what the previous token alone
    tells) and the best one, if another."""
    if not counters:
        return []
    best = min(counters, key=lambda c: (c[1], c[0]))
    chosen = [c for c in counters if c[0] == 2 and c != best] + [best]
    return [PlotLevel(n, loss) for n, loss in sorted(chosen)]


def history_series(history: list[dict], what: str = "loss") -> list[PlotSeries]:
    """The curves of a training history: train and validation loss, or one per-step value."""
    if what == "loss":
        train, evaluated, val = [], [], []  # one walk: a long run's History makes each row as it is read
        for h in history:
            if h.get("train_loss") is not None:
                train.append((h["step"], h["train_loss"]))
            if h.get("train_eval_loss") is not None:  # dropout on: the train split scored as val is
                evaluated.append((h["step"], h["train_eval_loss"]))
            if h.get("val_loss") is not None:
                val.append((h["step"], h["val_loss"]))
        pairs = {"train": train, "train (eval mode)": evaluated, "val": val}
    else:
        pairs = {what: [(h["step"], h[what]) for h in history if h.get(what) is not None]}
    return [PlotSeries(name, [int(s) for s, _ in rows], [float(v) for _, v in rows])
            for name, rows in pairs.items() if rows]


def lens_rank_series(frames: list[WatchFrame]) -> list[PlotSeries]:
    """One curve per layer: the rank of the true next token in each lens frame of a :train watch=lens run."""
    rows: dict[str, list[tuple[int, int]]] = {}
    for frame in frames:
        for guess in frame.lens:
            if guess.target_rank is not None:
                rows.setdefault(guess.layer, []).append((frame.step, guess.target_rank))
    return [PlotSeries(layer, [s for s, _ in pairs], [float(r) for _, r in pairs]) for layer, pairs in rows.items()]


def block_grad_series(frames: list[WatchFrame]) -> list[PlotSeries]:
    """One curve per block: the size of the gradient its weights received in each frame of :train watch=grad."""
    rows: dict[int, list[tuple[int, float]]] = {}
    for frame in frames:
        for g in frame.grads:
            # a block without an FFN (ffn=off) has attention's alone (g.ffn None: no FFN, not one of gradient 0)
            rows.setdefault(g.block, []).append((frame.step, math.hypot(g.attention, g.ffn or 0.0)))
    return [PlotSeries(f"block {b}", [s for s, _ in rows[b]], [v for _, v in rows[b]]) for b in sorted(rows)]


def copying_series(frames: list[WatchFrame]) -> list[PlotSeries]:
    """Two curves from the frames of :train watch=heads on random tokens: the loss on the first copy and the repeat."""
    rows = [f for f in frames if f.heads and f.repeat is not None]
    if not rows:
        return []
    steps = [f.step for f in rows]
    return [PlotSeries("first copy", steps, [f.first_copy for f in rows]),
            PlotSeries("repeat", steps, [f.second_copy for f in rows])]


def context_series(frames: list[WatchFrame]) -> list[PlotSeries]:
    """One curve per band of positions from :train watch=context: its val loss at each frame."""
    rows = [f for f in frames if f.bands]
    if not rows:
        return []
    return [PlotSeries(f"positions {band}", [f.step for f in rows], [f.band_losses[k] for f in rows])
            for k, band in enumerate(rows[-1].bands)]


def induction_series(frames: list[WatchFrame]) -> list[PlotSeries]:
    """One curve per head (the INDUCTION_CURVES highest at the last frame) from :train watch=heads: its induction
    score at each frame."""
    rows = [f for f in frames if f.heads]
    if not rows:
        return []
    last = sorted(rows[-1].heads, key=lambda h: 0.0 if math.isnan(h.induction) else -h.induction)
    series = []
    for top in last[:INDUCTION_CURVES]:
        pairs = [(f.step, h.induction) for f in rows for h in f.heads
                 if (h.layer, h.head) == (top.layer, top.head) and not math.isnan(h.induction)]
        series.append(PlotSeries(f"head {top.layer}.{top.head}", [s for s, _ in pairs], [v for _, v in pairs]))
    return [s for s in series if s.steps]


@command("plot", "Chart the training history: train and validation loss, the learning rate, the gradient norm, "
                 "the lens's rank of the true token, each block's gradient, the heads' copying, or the loss by "
                 "position.",
         # The watched views' frames are the REPL session's (a checkpoint keeps none), said so in both help views:
         # `minitf plot --help` sent a shell user to "minitf train watch=lens", whose frames end with its process.
         params=[Param("what", str, help="what to chart (default loss; from the frames a train with watch= keeps in "
                                         "the interactive shell's session, not in a checkpoint: lens_rank from "
                                         "watch=lens, block_grad from watch=grad, copying and induction from "
                                         "watch=heads, context from watch=context)", choices=PLOT_WHAT)],
         json_version=6)  # fmt: skip
def cmd_plot(session: Session, args: dict, reporter: Reporter) -> PlotResult:
    what = args["what"] or "loss"
    if what in WATCHED:
        result = _watched_plot(session, what)
        frames, step = session.watch_frames, session.trainer.step if session.has_model else None
        if frames and step is not None and frames[-1].step < step:
            result.model_step = step
        return result
    history = session.trainer.history if session.has_model else []
    series = history_series(history, what)
    if not series:
        options = {"what": what} if what != "loss" else {}
        raise UserError(f"there is no training history yet; {_history_first(session, options)}")
    counters = plot_levels(session.counters) if what == "loss" else []
    clip = session.trainer.config.grad_clip if what == "grad_norm" else None  # the trainer's: the one it clipped to
    return PlotResult(what, series, session.data.tokenizer.vocab_size, counters, data_since(session), grad_clip=clip)


def _watched_plot(session: Session, what: str) -> PlotResult:
    """:plot what=W of the frames of :train watch=."""
    def watch_it(view: str, then: str, **options) -> str:
        # a later `:train watch=grad` keeps its own frames only: "train with :train watch=lens first" was said to
        # whoever had, a run before (the frames of the last watched run are the ones kept, core.watch)
        shown = sorted({frame.view for frame in session.watch_frames} - {view})
        replaced = (f"the frames kept are the last watched run's (watch={', '.join(shown)}), which replaced any "
                    "before; " if shown else "")
        return replaced + watch_first(view, then, **options)
    if what in ("copying", "induction"):
        series = (copying_series if what == "copying" else induction_series)(session.watch_frames)
        if not series:
            if not any(frame.heads for frame in session.watch_frames):
                raise UserError(f"there are no heads frames; {watch_it('heads', 'plot', what=what)}")
            raise UserError("the heads were watched on a prompt "
                            + ("with no repeated token, so no head has an induction score" if what == "induction"
                               else "which has no first copy and repeat")
                            + f"; {cmd('train', watch='heads')} without prompt= watches the repeated random tokens")
        evens = [f.even_induction for f in session.watch_frames if f.heads and f.even_induction is not None]
        return PlotResult(what, series, session.data.tokenizer.vocab_size if what == "copying" else None,
                          even=evens[-1] if what == "induction" and evens else None)
    if what == "context":
        series = context_series(session.watch_frames)
        if not series:
            raise UserError(f"there are no context frames; {watch_it('context', 'plot', what=what)}")
        return PlotResult(what, series, session.data.tokenizer.vocab_size)
    if what == "block_grad":
        series = block_grad_series(session.watch_frames)
        if not series:
            raise UserError(f"there are no gradient frames; {watch_it('grad', 'plot', what=what)}")
        return PlotResult(what, series)
    if what == "lens_rank":
        series = lens_rank_series(session.watch_frames)
        if not series:
            lens = any(frame.view == "lens" for frame in session.watch_frames)
            # random tokens: no text has a next token to know (its default prompt included, which was suggested)
            unknowable = getattr(session.data, "nothing_to_learn", False)
            why = (f"on {session.data.name} no token follows from those before it, so no prompt has a known next "
                   "token: the rank is charted on text, a task or repeat" if lens and unknowable else
                   "the watched prompt's next token is unknown; watch a task's question or the default prompt"
                   if lens else watch_it("lens", "plot", what=what))
            raise UserError(f"there are no lens frames with a known next token; {why}")
    return PlotResult(what, series)


def data_since(session: Session) -> int | None:
    """The step after which the data in use came in, where the history has steps before it (a switch to data of
    the same vocabulary kept the model); None where the whole history is of this data."""
    since = session.data_since_step
    history = session.trainer.history if session.has_model else []
    return since if since and any(row["step"] <= since for row in history) else None


def _history_first(session: Session, options: dict) -> str:
    """Where a history to chart comes from: in a session with no trained model of its own (a one-shot command, a REPL
    just started, or one whose model has not trained) the autosave of the last run, where one is saved; else a
    :train."""
    if not session.has_model or session.untrained:
        from ..core.checkpoint import checkpoint_info

        path = session.checkpoint_dir / AUTOSAVE_NAME
        try:  # a folder that cannot be read has no autosave to offer: the hint is train first
            info = checkpoint_info(path) if (path / "checkpoint.json").is_file() else None
        except OSError:
            info = None
        if info is not None and info.error is None and info.step:
            then = (f"{restore(AUTOSAVE_NAME)}, then {cmd('plot', **options)}" if syntax() == REPL
                    else cmd("plot", load=AUTOSAVE_NAME, **options))
            saved = f"{then} charts the last run saved (step {info.step:,})"
            # a model of its own (a :set rebuilt it, a :gen built it) may be the one to train: both ways
            return saved if not session.has_model else f"{train_first('plot', AUTOSAVE_NAME, **options)}, or {saved}"
    return train_first("plot", AUTOSAVE_NAME, **options)


# What :plot draws of the watched frames, and what the end of a watched run says of it (:plot what=W ...).
WATCHED_SERIES = {"lens_rank": lens_rank_series, "block_grad": block_grad_series, "copying": copying_series,
                  "induction": induction_series, "context": context_series}
PLOT_HINTS = {"lens_rank": "charts the true token's rank", "block_grad": "charts each block's gradient by step",
              "copying": "charts the first copy's and the repeat's loss",
              "induction": "charts the heads' induction score", "context": "charts each band by step"}


def series_chart(series: list[PlotSeries], width: int, height: int, vocab_size: int | None = None,
                 counters: list[PlotLevel] = (), joined: bool = False, log_y: bool = False, unit: str = "",
                 levels: list[Level] = ()):
    """The curves of a history on the one chart (render.chart), the loss ones against ln(V) when V is given and
    against the counters' val losses (:ngram) when there are any, and any other `levels`; `joined`: dots between
    each curve's points (a watch= view's, made at the evaluations only); `log_y`: on a log axis; `unit`: the y
    axis's, said in the legend."""
    curves = [Curve(s.name, s.steps, s.values,
                    *LOSS_GLYPHS.get(s.name, mark(k) if len(series) > 1 else ("•", "cyan")), joined=joined)
              for k, s in enumerate(series)]
    return chart(curves, width, height, uniform_loss(vocab_size), uniform_label(vocab_size), unit=unit,
                 levels=[*counter_levels(counters), *levels], log_y=log_y)


SPIKES = ("grad_norm", "block_grad")  # where one step's value matters: a spike a narrow chart averages away is said
LOG_CHARTS = ("lr", "grad_norm", "block_grad", "lens_rank")  # all positive: a log axis where they span orders


def counters_left_out(counters: list[PlotLevel], drawn, values: list[float]) -> str | None:
    """What to say of the counters a chart (render.chart.Chart) left out, too far from its curves' `values`."""
    far = [c for c in counters if c.val_loss in {level.value for level in getattr(drawn, "left_out", [])}]
    values = [v for v in values if math.isfinite(v)]
    if not far or not values:
        return None
    side = ("far below" if all(c.val_loss < min(values) for c in far) else
            "far above" if all(c.val_loss > max(values) for c in far) else "far from")
    one = len(far) == 1
    return (f"the {' and '.join(f'{c.n}-gram' for c in far)} counter{'' if one else 's'} (val "
            f"{' and '.join(f'{c.val_loss:.3f}' for c in far)}) {'lies' if one else 'lie'} {side} these curves, so "
            f"the chart leaves {'it' if one else 'them'} out; {cmd('ngram')} lists them all")


def counter_levels(counters: list[PlotLevel]) -> list[Level]:
    """The counters as a chart's levels: each a dotted row marked with its n."""
    return [Level(c.val_loss, str(c.n) if c.n < 10 else "+", f"{c.n}-gram counter {c.val_loss:.2f}")
            for c in counters]


def loss_chart(history: list[dict], width: int = 80, height: int = 10, vocab_size: int | None = None,
               counters: list[PlotLevel] = ()):
    """A train/val loss chart of a trainer's history (rows of core.train.StepInfo as dicts), `width` columns wide."""
    return series_chart(history_series(history, "loss"), width, height, vocab_size, counters)


def against_counters(val_loss: float, counters: list[PlotLevel]) -> str:
    """Where a val loss sits against the counters :plot draws (the bigram's, the best's)."""
    # as the losses are written (3 decimals): a val 1.5229 was "below the 3-gram counter's 1.523" of a 1.5231
    val = round(val_loss, 3)
    below = [c for c in counters if val < round(c.val_loss, 3)]
    above = [c for c in counters if val >= round(c.val_loss, 3)]
    said = [f"below the {c.n}-gram counter's {c.val_loss:.3f}" for c in below[-1:]]
    said += [f"{'at' if val == round(c.val_loss, 3) else 'above'} the {c.n}-gram counter's {c.val_loss:.3f}"
             for c in above[:1]]
    return f"val {val_loss:.3f}: " + ", ".join(said) + f" ({cmd('ngram')} has them all)"


@render.register(PlotResult)
def render_plot(result: PlotResult, console: Console) -> None:
    title = PLOT_TITLES[result.what]
    if result.grad_clip is not None:  # "before clipping", and clipping to what: a chart of 18.12 beside no threshold
        # the setting now, said so: the history keeps no run's own grad_clip, and a run under another one was clipped
        # at that one (a title "grad_clip = 0: not clipped" stood over steps clipped at 0.5)
        title = (f"gradient norm (before clipping; grad_clip = {result.grad_clip:g} now)" if result.grad_clip > 0
                 else "gradient norm (before clipping; grad_clip = 0 now: no clipping from here on)")
    say(console, f"{title} by step", "bold")
    series = result.series
    if len(series) > len(MARKS):  # a glyph each: the first, the last and a spread between (--json has every one)
        most = len(MARKS)
        series = [series[round(k * (len(series) - 1) / (most - 1))] for k in range(most)]
    values = [v for s in series for v in s.values]
    log_y = result.what in LOG_CHARTS and spans_orders(values)
    levels = [Level(result.even, "e", f"even attention {result.even:.3f}")] if result.even is not None else []
    if result.grad_clip:
        levels.append(Level(result.grad_clip, "c", f"grad_clip = {result.grad_clip:g}: a norm above is scaled down "
                                                   "to it"))
    drawn = series_chart(series, console.width, 12,
                         result.vocab_size if result.what in ("loss", "copying", "context") else None,
                         result.counters, joined=result.what in WATCHED, log_y=log_y,
                         unit="nats" if result.what in ("loss", "copying", "context") else "", levels=levels)
    console.print(drawn)
    if result.even is not None:
        note(console, f"head L.H is block L's head H; e┄: {result.even:.3f}, the score of a head that spreads its "
                      "attention evenly over the earlier positions: a head far above it looks at the token after an "
                      "earlier copy, as an induction head does, and curves near it are noise")
    if log_y:  # a blow-up (one gradient norm of 5e4 among 1s) flattened every other point onto one row
        finite = [v for v in values if math.isfinite(v)]
        note(console, f"the values span {math.log10(max(finite) / min(finite)):.0f} orders of magnitude "
                      f"({min(finite):.3g} to {max(finite):.3g}): the y axis is on a log scale, so the rest is not "
                      "flattened under the largest")
    if (above := getattr(drawn, "above", None)) is not None and result.what in SPIKES:
        of = f" ({above.curve})" if len(series) > 1 else ""
        note(console, f"each column is the mean of up to {above.most} steps, so the largest{of}, {above.value:.4g} at "
                      f"step {above.step:,}, lies above the top label")
    if result.grad_clip and values:  # how many the level cuts: a count the chart's averaged columns do not give
        above = sum(v > result.grad_clip for v in values)
        note(console, f"{above:,} of {count(len(values), 'step')} had a norm above grad_clip = {result.grad_clip:g}, "
                      "the setting now: each such step's gradient was scaled down to its run's grad_clip before the "
                      "update")
    if len(series) < len(result.series):
        note(console, f"{len(series)} of the {len(result.series)} curves drawn, the first, the last and a spread "
                      "between, so that each has a glyph of its own")
    if line := counters_left_out(result.counters, drawn, [v for s in result.series for v in s.values]):
        note(console, line)  # :ngram's hint said the chart draws them: where it does not, say why
    if result.model_step is not None:
        last = max(s.steps[-1] for s in result.series if s.steps)
        note(console, f"the frames end at step {last:,}; the model has trained to step {result.model_step:,} since, "
                      f"unwatched ({cmd('train', watch=WATCH_OF[result.what])} watches it from there)")
    if result.data_from is not None:
        note(console, f"the data in use came in after step {result.data_from:,}: the curves before it are of the data "
                      "before (the switch kept the model, whose vocabulary it shares)")
    if result.what == "loss" and not result.counters and syntax() == REPL:
        note(console, f"{cmd('ngram')} measures what counting alone reaches on this data; the chart then draws it")
    elif result.what == "loss" and not result.counters:  # a one-shot `minitf ngram`'s counters end with its process
        note(console, f"what counting alone reaches on this data is drawn where a session keeps :ngram's counters: "
                      f"{interactive()} opens the interactive shell, then :ngram and :plot")
