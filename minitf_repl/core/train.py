"""Training: AdamW or Muon (core.optimizers), linear warm-up then cosine decay, gradient clipping, evaluation.

The core never prints. Each step leaves through `on_step(StepInfo)`; the caller decides what to
show. `should_stop()` is asked between steps (the REPL maps Ctrl-C to it), so a stop never cuts a
step in half: weights, optimizer, history and run position always agree, and `run()` continues.

A run is a fixed number of steps with its own learning-rate schedule. The trainer remembers where
in the run it is, so a stopped run resumes on the same schedule (and a checkpoint restores that).
A run is either a fresh schedule (warm-up to the peak rate, then cosine decay) or, to train a
trained model further without shaking it, a constant rate: `start_run(steps, constant_lr=r)`;
`final_lr()` is the rate the last run ended at, the natural rate to continue with.

Under torchrun (core.distributed) the same loop is one rank of several: the training forward and
backward go through a DistributedDataParallel wrapper, each rank trains on its slice of the global
batch, and rank 0 alone evaluates. `self.model` stays the plain model throughout. In one process
none of that happens: every distributed branch below is skipped.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from . import distributed
from .config import TrainConfig
from .data import bits_per_char, val_tokens_per_char
from .device import resolve_device
from .errors import ConfigError, DataError, DeviceError, PeerLost, TrainingDiverged
from .fastpath import FastPath, float32_products_chosen, listened, products_kernel
from .history import History, StepInfo
from .memory import release_freed
from .model import require_model
from .optimizers import follow_dtype, make_optimizer, set_weight_decay
from .precision import (AFTER_FAILURE, AFTER_STOP, COMPILE_STOPPED, PATH_CHANGED, autocast, compile_advice,
                        compile_failure_line, compile_module, compilers_deaf_to_ctrl_c, compiling_line, forget_compiled,
                        is_compile_failure, newton_schulz_dtype, precision_note, run_compiled, tells_compiles,
                        training_dtype)
from .probe import evaluating
from .words import count


# Said once per trainer when threads=auto moves torch's thread count during a run: a product or a sum split across
# another number of threads adds in another order, and a run carries the difference on: one bfloat16 run of 100 steps
# at threads=1 and 2 gave train losses of 2.6292 and 2.6279 at step 80, not numbers apart in their last digits.
THREADS_MOVED = ("threads=auto moved torch's CPU thread count during this run (other work started or stopped on the "
                 "machine): a sum split across another number of threads adds in another order, so a run's numbers "
                 "differ from the same run's at a fixed count from about the third decimal on, more as it goes; "
                 "threads=N holds the count")


# Where good weights come from after weights broke (nan, inf, or too large to read a batch): no rate mends them.
GOOD_WEIGHTS = ("a new MiniTransformerLM(config), load_model(NAME), or trainer.rollback(saved) to a saved = "
                "trainer.snapshot() taken before the run that broke them")


@dataclass
class RunSummary:
    steps: int  # steps done by this call
    total_steps: int  # optimizer steps done in total
    run_remaining: int
    stopped: bool  # a stop request ended the call before the run did
    train_loss: float | None
    val_loss: float | None
    accuracy: float | None
    tokens_per_second: float | None  # with compile on: the steady state, the compiling steps left out; None: no step
    seconds: float
    dtype: str = "float32"  # the training forward's precision (core.precision)
    # what Muon's Newton-Schulz ran in (core.precision.newton_schulz_dtype); None: not a Muon run
    newton_schulz_dtype: str | None = None
    compiled: bool = False  # the steps ran through torch.compile
    # the steps that compiled (the first compiled step, or one torch compiled again: a batch size changed),
    # compilation included (None: none here)
    compile_seconds: float | None = None
    notes: list = dataclasses.field(default_factory=list)  # the lines given to on_notice
    threads: int = 1  # torch's CPU threads when the call ended (core.threads)
    val_bpc: float | None = None  # val_loss in bits per character (text data only)
    tokens_per_char: float | None = None  # tokens per character of the val text, what val_bpc was computed with
    # the seconds this call's steps and evaluations added to the run's elapsed, as the loss table counts them:
    # `seconds` (the call's wall time) holds what a caller does between steps too (drawing a live table)
    run_seconds: float = 0.0
    # "oneDNN", or torch's own library ("MKL" on x86: core.fastpath.products_kernel): the kernel this call's float32 CPU
    # products ran on, which each process chooses (core.fastpath: measured, or $MINITF_PRODUCTS) and which moves a
    # run's numbers; None where none ran (off the CPU, fast_path=off, a bfloat16 step's products without an evaluation)
    cpu_float32_products: str | None = None
    # the steps of this call whose gradient norm was above grad_clip, so scaled down to it (0 where grad_clip is 0)
    clipped_steps: int = 0
    # with dropout on: the last evaluation's loss of the training split in eval mode (StepInfo.train_eval_loss)
    train_eval_loss: float | None = None


def _aux_share(model, detach: bool = True) -> torch.Tensor | float:
    """What the last training forward added to the cross-entropy: moe_aux_weight x the load-balancing loss
    (0 without experts, or at weight 0; MiniTransformerLM.loss adds it). `detach=False`: with its gradient."""
    aux = model.moe_aux_loss() if hasattr(model, "moe_aux_loss") else None
    weight = model.config.moe_aux_weight if aux is not None else 0
    if not weight:
        return 0.0
    return weight * (aux.detach() if detach else aux).float()


class CompileStopped(Exception):
    """A stop request (Ctrl-C) came while a step compiled the model, and the compile failed: its C++ compilers died of
    a SIGINT that reached them all the same (precision.compilers_deaf_to_ctrl_c keeps the terminal's Ctrl-C from
    them). The step is undone and the run stops (Trainer._run)."""


class EvaluationStopped(Exception):
    """A stop request abandoned an evaluation after `done` of its `total` batches (Trainer.evaluate). `val_loss`: the
    loss of all of them, where the stop came after the last, before a task's accuracy (which it leaves unmeasured)."""

    def __init__(self, done: int, total: int, val_loss: float | None = None):
        super().__init__(f"evaluation stopped after {done} of {total} batches")
        self.done, self.total, self.val_loss = done, total, val_loss


def random_state(device) -> tuple:
    """The random states a training step draws from: the CPU's, and on a GPU that GPU's own (dropout draws its masks
    where the model is). A roll-back that put back the CPU's alone left a GPU run's next masks other ones. An Apple
    GPU's (mps) too: it was left out, and on a Mac the contenders of `:compare dropout=...` drew their masks from one
    stream in turn, each one's numbers moving with its rivals'."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.get_rng_state(), torch.cuda.get_rng_state(device)
    if device.type == "mps":
        return torch.get_rng_state(), torch.mps.get_rng_state()
    return torch.get_rng_state(), None


def fork_random(device):
    """torch.random.fork_rng for the CPU's generator and `device`'s own (a CUDA or an Apple GPU's): within the block,
    draws change nothing the session draws from afterwards. The Apple GPU's was left out (only a CUDA device was
    named), so on a Mac `:lr-find` and `:checks` moved the masks of the session's next :train with dropout on."""
    device = torch.device(device)
    if device.type in ("cuda", "mps"):
        return torch.random.fork_rng(devices=[device], device_type=device.type)
    return torch.random.fork_rng(devices=[])


def set_random_state(state: tuple, device) -> None:
    """Put back what random_state(device) gave."""
    cpu, gpu = state
    torch.set_rng_state(cpu)
    if gpu is None:
        return
    device = torch.device(device)
    if device.type == "mps":
        torch.mps.set_rng_state(gpu)
    else:
        torch.cuda.set_rng_state(gpu, device)


def lr_at(run_step: int, run_steps: int, config: TrainConfig) -> float:
    """Linear warm-up to config.lr, then cosine decay to lr * min_lr_ratio at the end of the run."""
    warmup = min(config.warmup_steps, max(run_steps - 1, 0))
    if run_step < warmup:
        return config.lr * (run_step + 1) / warmup
    progress = (run_step - warmup) / max(run_steps - warmup, 1)
    floor = config.lr * config.min_lr_ratio
    return floor + 0.5 * (config.lr - floor) * (1.0 + math.cos(math.pi * min(progress, 1.0)))


class Trainer:
    """Owns the optimizer, the data RNG, the run position and the loss history of one model.

    `device` is where the model is already (torch.device, or a name: auto, cpu, cuda, cuda:N, mps): the
    batches go there; the model is not moved (model.to(device) first).
    """

    def __init__(self, model, data, config: TrainConfig, device: torch.device | str = "cpu"):
        model = require_model(model, "Trainer")  # torch.compile(model) trains as model (compile=True compiles steps)
        if not isinstance(config, TrainConfig):
            raise TypeError(f"Trainer trains under a TrainConfig, got {type(config).__name__}; "
                            "e.g. Trainer(model, data, TrainConfig(steps=200))")
        if not callable(getattr(data, "get_batch", None)):
            raise TypeError(f"Trainer draws its batches from a dataset, got {type(data).__name__}; "
                            "load one: Trainer(model, load_data('sort'), config)")
        # a name as the shell takes it ("auto", "cuda", "cuda:1", "mps"): one line for one that does not exist here
        device = resolve_device(device) if isinstance(device, str) else torch.device(device)
        weights = next(model.parameters()).device
        if weights.type != device.type or (device.index is not None and weights.index != device.index):
            raise DeviceError(f"the model is on {weights} but the Trainer was asked to train on {device}; move it "
                              f"first: model.to('{device}')")
        self.model = model
        self.data = data
        self.config = config
        self.device = device
        self.optimizer = make_optimizer(model, config)
        self.generator = torch.Generator().manual_seed(config.seed)  # draws the training batches
        self.step = 0
        self.run_start = 0
        self.run_steps = 0
        self.run_elapsed = 0.0
        self.run_constant_lr: float | None = None  # None: warm-up + cosine; else this rate throughout
        self.history = History()  # a row per step, as StepInfo's fields (History: compact, read as dicts)
        # the window (max_seq_len) of the latest step: `:set max_seq_len` widens a model with no table of positions
        # and keeps its weights, which never trained on the wider windows (:context reads past this); None: no step
        self.trained_window: int | None = None
        # what the latest step's products ran in (float32 or bfloat16): dtype=auto means either, by the machine, so a
        # checkpoint taken to another kind of CPU says what its numbers were made in; None: no step, or not recorded
        self.trained_dtype: str | None = None
        # what the latest step's Muon Newton-Schulz ran in (core.precision.newton_schulz_dtype): under dtype=bfloat16
        # it is bfloat16 on a device with bfloat16 units and float32 elsewhere while the products stay bfloat16, so a
        # lesson moved to the other kind of CPU changed its orthogonalisation unsaid (trained_dtype alike on both);
        # None: no step, an AdamW step, or not recorded (a checkpoint of before it was)
        self.trained_ns_dtype: str | None = None
        # [first step, dtype, Newton-Schulz dtype or None] at each step whose precision differed from the step before's
        # (a :set dtype=, a checkpoint continued on the other kind of CPU): :ls and :report say a model whose steps ran
        # in more than one ("bfloat16 then float32"), which trained_dtype, the latest step's, hid. Empty: no step
        # recorded (a checkpoint of before it was keeps none, and its earlier steps stay unknown)
        self.dtype_spans: list[list] = []
        self._compiled = None  # torch.compile(model), made on the first step with config.compile
        self._compiled_from = None  # the module _compiled wraps (the fast path or the model)
        # a wrapper torch does not say the compiles of (precision.tells_compiles: not torch.compile's): its first step
        # is taken to compile, said before it and timed apart; torch.compile's are asked (precision.run_compiled)
        self._compile_pending = False
        # why the next compile is one again (precision.AFTER_STOP, ...): said with it; None: a first, or torch's own
        self._compile_again: str | None = None
        # what the last compiled step's code was specialised on (compile_signature): a recompile of torch's own is
        # worded from what changed since; None: no compiled step yet
        self._compiled_signature: tuple | None = None
        self._compile_failed: str | None = None  # why this platform could not compile: train eagerly
        self._noted: set[str] = set()  # notes already given (each is said once per trainer)
        # True: this trainer trains in its own process alone even under torchrun (a diagnostic's private model,
        # :checks, which every process runs alike): no DDP, so no collective, and every process evaluates
        self.alone = False
        self._stop_from_peer = False  # the last stop check stopped because another rank asked
        self._unread_batch: tuple | None = None  # a run's last batch where it stopped between evaluations
        # (step, what its evaluation would have scored: _evaluated_on) where a stop cut an evaluation short: a data
        # switched since (same vocabulary, so the run goes on) would measure that row, trained on the old, on the new
        self._cut_at: tuple | None = None
        # the step whose eval-mode train scoring (dropout on) a stop cut short: held here, not in the history, whose row
        # lacks the number as well where dropout was 0 when it was evaluated (measured then, the continued run said
        # "which the stop cut short" of a stop that never came); a checkpoint saved at that stop goes on without it
        self._train_scoring_cut: int | None = None
        self._target_share = 1.0  # under DDP: this rank's share of the global batch's targets x ranks (_train_batch)
        self._ddp = None  # DistributedDataParallel(model) under torchrun (core.distributed); self.model stays plain
        self._fast = None  # FastPath(model), made on the first step that takes it
        # core.threads.ThreadPolicy: asked between steps whether other work now wants a core (None: leave
        # torch's thread count alone; the session sets its policy here)
        self.threads = None

    @property
    def max_seq_len(self) -> int:
        return self.model.config.max_seq_len

    @property
    def run_remaining(self) -> int:
        return self.run_start + self.run_steps - self.step

    @property
    def compile_failed(self) -> str | None:
        """Why compile=on trains eagerly here (compile_failure_line, said once at the failure); None: it did not fail."""
        return self._compile_failed

    def set_config(self, config: TrainConfig) -> None:
        """Follow a new training config from the next step on (lr, batch, schedule: read every step).

        Weight decay lives in the optimizer's groups, so it is written there; a new seed restarts
        the batch order from that seed. Another `optimizer` builds that optimizer over the same
        weights, and it starts with no memory: AdamW's moments and Muon's momentum are per
        optimizer and mean nothing to the other kind, so the first steps after a switch move as
        the first steps of a run do (AdamW's bias correction starts over). The weights, the run
        and the history are kept.
        """
        old, self.config = self.config, config
        if config.optimizer != old.optimizer:
            self.optimizer = make_optimizer(self.model, config)
        elif config.weight_decay != old.weight_decay:
            set_weight_decay(self.optimizer, config.weight_decay)
        if config.seed != old.seed:
            self.generator.manual_seed(config.seed)
        if config.compile and not old.compile and self._compile_failed is not None:
            self._compile_failed = None  # switched on again: try again (forget_compiled dropped dynamo's memory of it)
            self._compile_again = AFTER_FAILURE

    def start_run(self, steps: int | None = None, constant_lr: float | None = None) -> None:
        """Begin a run of `steps` (default: config.steps): a fresh schedule, or `constant_lr` throughout."""
        steps = self.config.steps if steps is None else steps
        if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
            raise ConfigError(f"steps must be a positive whole number, got {steps!r}")
        if constant_lr is not None and not (isinstance(constant_lr, (int, float)) and 0 < constant_lr < float("inf")):
            raise ConfigError(f"a constant learning rate must be a positive number, got {constant_lr!r}")
        self.data.check_fits(self.max_seq_len)
        tokens, vocab = getattr(getattr(self.data, "tokenizer", None), "vocab_size", None), self.model.config.vocab_size
        if tokens is not None and tokens > vocab:
            raise DataError(f"the data has {count(tokens, 'token')} but the model's vocab_size is {vocab}; build "
                            "the model with ModelConfig(vocab_size=data.tokenizer.vocab_size, ...)")
        self.run_start, self.run_steps, self.run_elapsed = self.step, steps, 0.0
        self.run_constant_lr = None if constant_lr is None else float(constant_lr)

    def lr_for(self, run_step: int) -> float:
        """The learning rate of step `run_step` (0-based) of the current run."""
        if self.run_constant_lr is not None:
            return self.run_constant_lr
        return lr_at(run_step, self.run_steps, self.config)

    def final_lr(self) -> float | None:
        """The rate the last step trained with (None before the first step)."""
        return self.history[-1]["lr"] if self.history else None

    def rate_to_continue(self) -> float | None:
        """The final rate, where a constant run may go on at it: None before the first step, and None where the last
        rate was 0 (a run at lr=5e-324 decays to 0.0 in floats), which no run trains at (start_run refuses it): every
        :train after such a run was refused with "a constant learning rate must be a positive number, got 0.0"."""
        final = self.final_lr()
        return final if final is not None and final > 0 else None

    # --- evaluation ------------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self, model=None, on_batch: Callable[[int, int], None] | None = None,
                 should_stop: Callable[[], bool] | None = None) -> tuple[float, float | None]:
        """Mean validation loss over config.eval_batches batches, and the task accuracy if any.

        The validation batches come from their own generator, seeded the same each time: every
        evaluation scores the same examples, and evaluating never shifts the training batches.
        `model` (default: the trainer's) scores another model of the same vocabulary on those same
        batches, on its own device: a quantized copy, say (core.quantize).

        Under torchrun rank 0 alone evaluates, on batches of the global size (batch_size x ranks),
        so its numbers are those a single process training with the global batch would report.

        The trainer's own model is scored through the fast path when training takes it (the same
        function: tests/test_fastpath.py), unless a hook listens to the model. `on_batch(done, eval_batches)`
        after each batch: a view that evaluates shows how far it is (a 12 x 768 model takes a minute).
        `should_stop()` is asked between batches: True abandons the evaluation (EvaluationStopped), so that a
        Ctrl-C during a long one stops at once rather than after all of its batches.
        """
        if model is not None:
            require_model(model, "evaluate")  # a plain module's loss of None failed as "'NoneType' has no 'item'"
        model = self.model if model is None else model
        device = self.device if model is self.model else next(model.parameters()).device
        scorer = self._plain_forward() if model is self.model else model  # the same function, maybe faster
        with evaluating(model, keep_last_forward=True):
            accuracy, val_loss = None, self._mean_loss("val", self.config.seed + 1, scorer, device, on_batch,
                                                       should_stop)
            if getattr(self.data, "accuracy", None) is not None:
                if should_stop is not None and should_stop():  # a task's accuracy answers many questions: not begun,
                    total = self.config.eval_batches  # the loss is whole
                    raise EvaluationStopped(total, total, val_loss)
                accuracy = self.data.accuracy(scorer, device=device)
            return val_loss, accuracy

    @torch.no_grad()
    def evaluate_train(self, should_stop: Callable[[], bool] | None = None) -> float:
        """The mean loss of config.eval_batches training batches in eval mode (dropout off), scored as `evaluate`
        scores the val split: with dropout on, a step's own train loss is of a thinned model and stands above what
        the weights score, so it does not compare with the val loss (nanoGPT's estimate_loss scores both splits
        so). The batches come from a generator of their own, seeded the same each time, so the training batches'
        order is untouched. `should_stop()` as in `evaluate` (EvaluationStopped)."""
        with evaluating(self.model, keep_last_forward=True):
            return self._mean_loss("train", self.config.seed + 2, self._plain_forward(), self.device, None,
                                   should_stop)

    def dropout_on(self) -> bool:
        """Whether training steps drop units (the model's dropout > 0): only then does a step's train loss differ
        from the loss its weights score, and an evaluation scores the training split too (evaluate_train)."""
        return getattr(self.model.config, "dropout", 0) > 0

    def _mean_loss(self, split: str, seed: int, scorer, device, on_batch, should_stop) -> float:
        """The mean loss of config.eval_batches batches of `split` drawn from a generator seeded `seed`; under torchrun
        of the global batch size (evaluate's docstring). The caller puts the model in eval mode."""
        g = torch.Generator().manual_seed(seed)
        losses = []
        batch_size = self.config.batch_size * (1 if self.alone else distributed.world_size())
        for _ in range(self.config.eval_batches):
            if should_stop is not None and should_stop():
                raise EvaluationStopped(len(losses), self.config.eval_batches)
            x, y = self.data.get_batch(split, batch_size, self.max_seq_len, g)
            _, loss = scorer(x.to(device), y.to(device))
            losses.append(loss.item())
            if on_batch is not None:
                on_batch(len(losses), self.config.eval_batches)
        return sum(losses) / len(losses)

    # --- the loop --------------------------------------------------------------------------------
    def run(
        self,
        on_step: Callable[[StepInfo], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_notice: Callable[[str], None] | None = None,
        on_evaluate: Callable[[int, int], None] | None = None,
        stop_evaluation: Callable[[], bool] | None = None,
    ) -> RunSummary:
        """Train until the current run ends or should_stop() says so. Starts a run if none is open.

        A step that raises before the optimizer's update (out of memory in the forward or backward
        pass, TrainingDiverged, a batch that cannot be had) leaves the trainer exactly as it was
        after the previous step, batch generator, random state and learning rate included. A step
        whose evaluation raises is done and in the history (without a validation loss). Only an
        exception inside optimizer.step() itself can leave an update half-applied: a caller that
        must survive that restores a snapshot() taken before run(). So does one that holds on to the
        weights: an update whose loss and gradient were finite can still leave them non-finite (or
        the val loss after it), and TrainingDiverged is raised then, at an evaluation or at the end.

        `on_notice(line)` hears, once per trainer, what a person should know about the speed switches and threads
        (bfloat16 on a CPU; a compile that failed, after which the steps run eagerly; a thread count auto moved).
        `on_evaluate(done, eval_batches)` after each validation batch of an evaluation (Trainer.evaluate's on_batch).
        `stop_evaluation()`, asked between an evaluation's batches (a person's stop request; not should_stop, which a
        caller running steps in chunks makes true at the step it evaluates after): True abandons the evaluation, the
        step stays unevaluated, on_notice says so, and the run stops before its next step. A call that goes on with
        that run measures that evaluation first, into the step's history row (`_measure_missing_evaluation`).
        """
        # Steps train in train mode (dropout on); the model is left in the mode it came in, as every view leaves it:
        # a script's model.eval() before a run still holds after it (it was left in train mode, dropout on)
        modes = {module: module.training for module in self.model.modules()}
        try:
            return self._run(on_step, should_stop, on_notice, on_evaluate, stop_evaluation)
        finally:
            for module, training in modes.items():
                module.training = training

    def _run(self, on_step, should_stop, on_notice, on_evaluate, stop_evaluation) -> RunSummary:
        if self.run_remaining <= 0:
            self.start_run()
        self.data.check_fits(self.max_seq_len)
        model, cfg = self.model, self.config
        model.train()
        call_start = time.perf_counter()
        elapsed_before = self.run_elapsed
        done, tokens, busy, clipped = 0, 0, 0.0, 0
        stretch_tokens, stretch_busy = 0, 0.0  # since the last evaluation: an evaluated row's speed
        last: StepInfo | None = None
        stopped = cut = False  # cut: stop_evaluation abandoned an evaluation
        notes: list[str] = []

        def note(line: str | None) -> None:
            if line is not None and line not in self._noted:
                self._noted.add(line)
                notes.append(line)
                if on_notice is not None:
                    on_notice(line)

        note(precision_note(cfg.dtype, self.device))
        follow_dtype(self.optimizer, cfg.dtype)  # a :set dtype= since the optimizer was made
        self._join_ranks()
        ranks = distributed.world_size() if self._ddp is not None else 1  # speeds count the tokens of all ranks
        compile_seconds, compiled, compile_tokens = None, False, 0
        float32_products_chosen(reset=True)
        if self._evaluation_missing():  # a stop cut the last step's evaluation short: measured before the next step
            if self._cut_at is not None and self._cut_at != (self.step, self._evaluated_on()):
                if on_notice is not None:  # a number on other batches than the unbroken run's is no number of its
                    on_notice(f"the evaluation after step {self.step:,}, which the stop cut short, stays unmeasured: "
                              "the data or the evaluation's settings (eval_batches, batch_size, seed) changed since "
                              "the stop, and its val loss would be of those, not of the data the step trained on")
            else:
                cut = self._measure_missing_evaluation(on_notice, on_evaluate, stop_evaluation)
        while self.run_remaining > 0:
            if self._peer_safe(self._stop_requested, lambda: cut or (should_stop is not None and should_stop())):
                stopped = True
                if self._stop_from_peer and on_notice is not None:
                    # this process was asked nothing: without a word, the stop would look like its own whim
                    on_notice("another process of this torchrun launch was stopped (Ctrl-C or a signal sent to it "
                              "alone); every process stops with it, at the same step")
                break
            # A look every few seconds, between steps. Not under torch.compile: its graph guards on the thread
            # count, so a change recompiles (seconds, counted in the steady state's speed); it keeps its count.
            if self.threads is not None and not (cfg.compile and self._compile_failed is None):
                if self.threads.revisit() is not None:
                    note(THREADS_MOVED)
            t0 = time.perf_counter()
            run_step = self.step - self.run_start
            lr = self.lr_for(run_step)
            before = self._step_start()
            try:
                for group in self.optimizer.param_groups:
                    group["lr"] = lr
                x, y = self._train_batch()
                x, y = x.to(self.device), y.to(self.device)
                loss, grad_norm, through_compile, compiling = self._forward_backward(x, y, before, note, should_stop)
                aux_loss = self._global_aux_loss()  # a collective under DDP: before the update, as the loss's
            except CompileStopped:  # the step is undone, and the run stops before it
                self._undo_step_start(before)
                self._noted.discard(COMPILE_STOPPED)  # said at each such stop
                note(COMPILE_STOPPED)
                stopped = True
                break
            except BaseException as e:
                self._undo_step_start(before)
                self._raise_if_peer_lost(e)
                raise
            try:
                self.optimizer.step()
            except RuntimeError as e:  # lr=1e39: torch cannot hold the step's scale (-lr) as a float32
                if "without overflow" not in str(e):
                    raise
                lower = self.config.lr / 10
                raise TrainingDiverged(
                    f"the update's scale became inf at step {self.step + 1}: -lr times the optimizer's factor does not "
                    f"fit a float, and part of the update may be in the weights already. Lower the learning rate "
                    f"(now {self.config.lr:g}, e.g. to {lower:g}) and train again",
                    step=self.step + 1, what="update's scale", value=float("inf"), fix={"lr": lower}) from None
            self.step += 1
            self.trained_window = self.max_seq_len
            self._record_precision(cfg)
            done += 1

            step_seconds = time.perf_counter() - t0
            compiled |= through_compile
            if compiling:  # compilation is a one-off (again where torch recompiles): timed apart from the steady speed
                compile_seconds = (compile_seconds or 0.0) + step_seconds
                compile_tokens += x.numel() * ranks
            else:
                tokens += x.numel() * ranks
                busy += step_seconds
                stretch_tokens += x.numel() * ranks
                stretch_busy += step_seconds
            info = StepInfo(
                step=self.step, run_step=run_step + 1, run_steps=self.run_steps,
                train_loss=loss.item(), lr=lr, grad_norm=grad_norm.item(),
                tokens_per_second=x.numel() * ranks / max(step_seconds, 1e-9), elapsed=self.run_elapsed + step_seconds,
                aux_loss=aux_loss,
                compile_seconds=step_seconds if compiling else None,
            )
            # clip_grad_norm_ scaled this step's gradient down to grad_clip: counted, as the step's row keeps only the
            # norm before (a run's summary says how many were, which its rows and grad_clip tell too)
            clipped += 0 < cfg.grad_clip < info.grad_norm
            self.history.append(asdict(info))  # the step is done: if evaluating fails, history still agrees with it
            # under DDP rank 0 alone evaluates; a trainer of its own process alone (`alone`) evaluates in each
            if (info.run_step % cfg.eval_every == 0 or info.run_step == self.run_steps) and (
                    self._ddp is None or distributed.is_main()):
                try:
                    info.val_loss, info.accuracy = self.evaluate(on_batch=on_evaluate, should_stop=stop_evaluation)
                except EvaluationStopped as e:  # the step stands, unevaluated, and the run stops before the next
                    cut = True
                    self._cut_at = (self.step, self._evaluated_on())
                    if on_notice is not None:
                        on_notice(self._evaluation_stopped_line(e))
                    info.val_loss, info.accuracy = e.val_loss, None
                # a finite loss and gradient can still make an update that ruins the weights (lr=1e39); under DDP
                # rank 0 alone evaluates, so the next step's loss, checked on every rank alike, says it there
                if info.val_loss is not None and not math.isfinite(info.val_loss) and self._ddp is None:
                    self._diverged_after("val loss", info.val_loss)
                if not cut and self.dropout_on():
                    try:
                        info.train_eval_loss = self.evaluate_train(should_stop=stop_evaluation)
                    except EvaluationStopped:  # the val loss stands; the run stops before its next step, as above,
                        cut = True  # and its continuation measures the train split first (_evaluation_missing)
                        self._cut_at = (self.step, self._evaluated_on())
                        self._train_scoring_cut = self.step
                        if on_notice is not None:
                            on_notice(self._train_scoring_stopped_line())
                if info.val_loss is not None:
                    info.val_bpc = bits_per_char(info.val_loss, val_tokens_per_char(self.data))
                    if stretch_busy > 0:  # one step's time is noise at a small batch; the stretch's is not
                        info.tokens_per_second = stretch_tokens / stretch_busy
                    stretch_tokens, stretch_busy = 0, 0.0
            self.run_elapsed += time.perf_counter() - t0
            info.elapsed = self.run_elapsed
            self.history[-1] = asdict(info)
            last = info
            if on_step is not None:
                on_step(info)

        if done and (bad := self._non_finite_weight()) is not None:  # the last update, unseen by a next step's loss
            self._diverged_after("weights", bad)
        # stopped between evaluations: finite weights of 1e30 still overflow, which check_last_update reads. Not read
        # here: a caller that runs steps in chunks (bench/nanogpt.py) would time one forward more in every chunk
        self._unread_batch = (x, y) if done and last is not None and last.val_loss is None and self._ddp is None \
            else None
        release_freed()  # what the steps freed goes back now, before a caller saves or draws (core.memory)
        evals = [h for h in self.history[-done:] if h["val_loss"] is not None] if done else []
        if not busy and compile_seconds is not None:  # only the compiling step ran: its own tokens (a task's rows
            tokens, busy = compile_tokens, compile_seconds  # are shorter than the window)
        return RunSummary(
            steps=done, total_steps=self.step, run_remaining=self.run_remaining, stopped=stopped,
            train_loss=last.train_loss if last else None,
            val_loss=evals[-1]["val_loss"] if evals else None,
            val_bpc=evals[-1].get("val_bpc") if evals else None, tokens_per_char=val_tokens_per_char(self.data),
            accuracy=evals[-1]["accuracy"] if evals else None,
            tokens_per_second=tokens / busy if busy else None,
            seconds=time.perf_counter() - call_start, run_seconds=self.run_elapsed - elapsed_before,
            dtype=training_dtype(cfg.dtype, self.device), compiled=compiled,
            compile_seconds=compile_seconds,
            newton_schulz_dtype=newton_schulz_dtype(cfg.dtype, self.device) if cfg.optimizer == "muon" else None,
            notes=notes, threads=torch.get_num_threads(),
            cpu_float32_products=products_kernel() if float32_products_chosen() else None,
            clipped_steps=clipped, train_eval_loss=evals[-1].get("train_eval_loss") if evals else None,
        )

    def _train_scoring_stopped_line(self, again: bool = False) -> str:
        """What a stop while the training split was scored in eval mode (dropout on) left unmeasured: the loss that
        compares with val; a continued run measures it first, as a cut evaluation's val loss."""
        what = f"the eval-mode train loss after step {self.step:,} (dropout on) was stopped {'again ' * again}" \
            "unmeasured"
        if self.run_remaining > 0:
            return f"{what}; continuing the run measures it first"
        return f"{what}: the run's last, it stays unmeasured"

    def _evaluation_stopped_line(self, e: EvaluationStopped, again: bool = False) -> str:
        """What a stop during the evaluation after this step left unmeasured (`again`: the one a continued run measures
        first, `_measure_missing_evaluation`), and that continuing the run measures it."""
        if e.val_loss is not None:  # every batch scored: "stopped after 8 of 8 batches: its val loss was not
            # measured" threw a whole loss away
            return (f"the evaluation after step {self.step:,} was stopped {'again ' if again else ''}before the task's "
                    "accuracy: its val loss was measured, its accuracy not")
        # a stop asked during the step itself skips its evaluation whole
        how = (f"stopped {'again ' if again else ''}after {e.done:,} of {count(e.total, 'batch', 'batches')}" if e.done
               else "skipped again (the stop came before its first batch)" if again
               else "skipped (the stop came during the step)")
        # a stopped run's point was missing for good from its history, where the unbroken run's has it; after the
        # run's last step there is no run to continue (the next :train starts a new one), so nothing measures it then
        if self.run_remaining > 0:
            return (f"the evaluation after step {self.step:,} was {how}: its val loss was not measured; continuing "
                    "the run measures it first")
        return (f"the evaluation after step {self.step:,}, the run's last, was {how}: the run's last val loss stays "
                "unmeasured (:ngram measures the model's val loss now)")

    def _evaluated_on(self) -> tuple:
        """What an evaluation now scores: the dataset (by identity, held weakly: a switched-from text of 200 MiB is not
        kept for it) and the settings that draw its batches (evaluate)."""
        return weakref.ref(self.data), self.config.eval_batches, self.config.batch_size, self.config.seed

    def _evaluation_missing(self) -> bool:
        """Whether the run goes on from a step whose evaluation a stop cut short (EvaluationStopped): the history's
        last row is this run's step self.step, where it evaluates, without a val loss (or a task's accuracy); and
        this process evaluates (under DDP, rank 0). Read from the history, so that a checkpoint saved at the stop
        (the autosave) goes on the same way."""
        if not self.history or self.run_remaining <= 0 or (self._ddp is not None and not distributed.is_main()):
            return False
        row = self.history[-1]
        run_step = row.get("run_step")
        return (row.get("step") == self.step and run_step == self.step - self.run_start
                and row.get("run_steps") == self.run_steps and run_step % self.config.eval_every == 0
                and (self._val_missing(row) or (row.get("train_eval_loss") is None and self.dropout_on()
                                                and self._train_scoring_cut == self.step)))

    def _val_missing(self, row: dict) -> bool:
        """Whether an evaluated row lacks its val loss, or a task's accuracy."""
        return row.get("val_loss") is None or (row.get("accuracy") is None
                                               and getattr(self.data, "accuracy", None) is not None)

    def _measure_missing_evaluation(self, on_notice, on_evaluate, stop_evaluation) -> bool:
        """Measure the evaluation a stop cut short (`_evaluation_missing`) into the history's last row, before the
        run's next step. The weights are that step's, bit for bit, and the validation batches come from a generator
        of their own (`evaluate`), so it is the number the unbroken run measured there. True: a stop cut it short
        again, and the run stops before its next step (what was measured, a task's val loss, is kept)."""
        t0 = time.perf_counter()
        row = self.history[-1]
        measured = []
        try:
            if self._val_missing(row):
                val_loss, accuracy = self.evaluate(on_batch=on_evaluate, should_stop=stop_evaluation)
                row["val_loss"], row["accuracy"] = val_loss, accuracy
                row["val_bpc"] = bits_per_char(val_loss, val_tokens_per_char(self.data))
                # under DDP rank 0 alone measures it: raised here, the other ranks would wait in the next step's
                # collective for good; the next step's loss, checked on every rank alike, says it there (as in the loop)
                if not math.isfinite(val_loss) and self._ddp is None:
                    self._diverged_after("val loss", val_loss)
                measured.append(f"val loss {val_loss:.4f}" + (f", accuracy {accuracy:.1%}" if accuracy is not None
                                                              else ""))
            if self.dropout_on():  # as the unbroken run's evaluation scored it, after its val loss
                try:
                    row["train_eval_loss"] = self.evaluate_train(should_stop=stop_evaluation)
                except EvaluationStopped:
                    self._cut_at = (self.step, self._evaluated_on())
                    self._train_scoring_cut = self.step
                    if on_notice is not None:  # the val loss measured first is said, and "again" only of a second cut
                        line = self._train_scoring_stopped_line(again=not measured)
                        on_notice(f"the evaluation after step {self.step:,}, which the stop cut short, is measured "
                                  f"now: {', '.join(measured)}; {line}" if measured else line)
                    return True
                self._train_scoring_cut = None
                measured.append(f"train loss in eval mode {row['train_eval_loss']:.4f}")
        except EvaluationStopped as e:
            self._cut_at = (self.step, self._evaluated_on())
            if e.val_loss is not None:
                row["val_loss"] = e.val_loss
                row["val_bpc"] = bits_per_char(e.val_loss, val_tokens_per_char(self.data))
            if on_notice is not None:
                on_notice(self._evaluation_stopped_line(e, again=True))
            return True
        finally:
            self.run_elapsed += time.perf_counter() - t0  # the run's time, as the evaluation it stands for
        if on_notice is not None:
            on_notice(f"the evaluation after step {self.step:,}, which the stop cut short, is measured now: "
                      f"{', '.join(measured)}")
        return False

    def _forward_backward(self, x, y, before: tuple, note: Callable[[str], None], should_stop=None):
        """(loss, gradient norm, whether it ran through torch.compile, whether it compiled) of one batch; gradients
        are set.

        The forward pass runs in the configured dtype (core.precision.autocast) and, with compile on,
        through the compiled model. An error of the compiler (not of the step: see
        is_compile_failure) switches this trainer to eager for good and redoes the batch eagerly;
        one while a stop was asked (`should_stop()`, Ctrl-C) stops instead (CompileStopped).
        """
        forward, eager = self._train_forward(note), self._eager_forward()
        # whether this step compiles (or began to): a stand-in wrapper's first step (_train_forward said so), or
        # torch.compile's where torch says it must (run_compiled)
        pending, self._compile_pending = self._compile_pending, False
        compiles = [pending]
        # why this wrapper compiles again, where known before its first step (after a stop, a failure, a new path)
        again = None
        if forward is not eager:
            again, self._compile_again = self._compile_again, None

        def before_compile() -> None:  # torch is about to compile in this step: said first, and timed apart
            compiles[0] = True
            set_random_state(before[1], self.device)  # what the try drew (dropout), drawn again by the compiling call
            line = compiling_line(self.config.dtype, self.device, again or self._recompile_words(x))
            self._noted.discard(line)  # said at each compile, not once a trainer as other notes are: each one waits
            note(line)

        def compiling() -> bool:
            return forward is not eager and compiles[0]

        built = False  # the step's compile ended: a Ctrl-C held back and heard as the block ends finds it whole
        try:
            with contextlib.ExitStack() as compiled_step:
                if forward is not eager:  # the compilers a step starts are kept from the terminal's Ctrl-C (its stop
                    # waits for the step's end, as any step's does), which killed them half-way
                    compiled_step.enter_context(compilers_deaf_to_ctrl_c())
                with autocast(self.config.dtype, self.device):
                    if forward is eager or pending or not tells_compiles(forward):
                        _, loss = forward(x, y)
                    else:
                        (_, loss), _ = run_compiled(lambda: forward(x, y), before_compile)
                loss = loss.float()
                # What the step reports is the cross-entropy alone, as val_loss is: a mixture of experts' step also
                # minimises moe_aux_weight x its load-balancing loss, which the loss table shows as a column of its
                # own. Under DDP each rank backpropagates its own slice's loss (DDP averages the gradients);
                # what it reports, and checks for divergence alike on every rank, is the global batch's.
                cross_entropy = loss.detach() - _aux_share(self.model)
                if self._ddp is not None and self._target_share != 1.0:
                    # a slice with more (or fewer) of the global batch's targets than its share: its mean weighs
                    # by its count, so that DDP's average of the ranks' gradients is the global batch's mean's
                    aux = _aux_share(self.model, detach=False)
                    loss = (loss - aux) * self._target_share + aux
                    cross_entropy = cross_entropy * self._target_share
                shown = cross_entropy if self._ddp is None else distributed.mean(cross_entropy)
                self._check_finite("loss", shown, (x, y))
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                max_norm = self.config.grad_clip if self.config.grad_clip > 0 else float("inf")
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                self._check_finite("gradient norm", grad_norm, (x, y))
                built = True
        except Exception as e:
            if forward is eager or not is_compile_failure(e):
                raise
            # dynamo's memory of the failed compile is dropped, so that compile=on switched on again, or the next run
            # after a stop, traces afresh (inductor's memory of a killed build it cannot reach: forget_compiled)
            self._forget_compiled()
            # A SIGINT that reached the compilers all the same (sent to the process group by `kill -INT -PGID`, or a
            # compiler started from a thread made before the Ctrl-C was held back) kills them, and the compile fails
            # as a CppCompileError. A stop asked meanwhile is taken as its cause: the compiler is not blamed, compile
            # stays on, and the run stops before this step (not redone eagerly: the person asked to stop, and it was
            # not done yet). Asked of this process alone: compile=on under torchrun was never verified
            # (docs/distributed.md).
            if compiling() and should_stop is not None and should_stop():
                self._compile_again = AFTER_STOP
                raise CompileStopped() from None
            self._compile_failed = compile_failure_line(e)
            note(self._compile_failed)
            set_random_state(before[1], self.device)  # the eager retry draws the same dropout masks
            self.optimizer.zero_grad(set_to_none=True)
            return self._forward_backward(x, y, before, note, should_stop)
        except BaseException:  # a KeyboardInterrupt inside a compile (a script's Ctrl-C) leaves it half made
            if compiling() and not built:  # (one held back to the block's end comes after a compile that ended)
                self._forget_compiled()
                self._compile_again = AFTER_STOP
            raise
        if forward is not eager:  # what the next compiled step's recompile, if torch makes one, is worded against
            self._compiled_signature = self._compile_signature(x)
        return shown, grad_norm, forward is not eager, compiling()

    def _forget_compiled(self) -> None:
        """Drop the compiled wrapper and what torch keeps of its compiles (precision.forget_compiled)."""
        self._compiled, self._compile_pending = None, False
        forget_compiled()

    def _compile_signature(self, x) -> tuple:
        """What the compiled code is specialised on, as a person sets it: (batch size, sequence length, dropout, the
        dtype the step runs in, the thread count). torch's guards check more (they name what failed under
        TORCH_LOGS=recompiles); these are what a :set changes between runs."""
        return (x.shape[0], x.shape[1], getattr(self.model.config, "dropout", 0.0),
                training_dtype(self.config.dtype, self.device), torch.get_num_threads())

    def _recompile_words(self, x) -> str | None:
        """Why torch compiles again in this step, after "compiling the model again, ": what changed since the last
        compiled step; None where no step was compiled before through this trainer (its first compile)."""
        if self._compiled_signature is None:
            return None
        names = ("the batch size", "the sequence length", "dropout", "the dtype", "the thread count")
        changed = [f"{name} ({was} -> {now})" for name, was, now in
                   zip(names, self._compiled_signature, self._compile_signature(x)) if was != now]
        if not changed:
            return ("as torch found something its compiled code is specialised on changed since the last compiled "
                    "step (TORCH_LOGS=recompiles names it)")
        what = changed[0] if len(changed) == 1 else ", ".join(changed[:-1]) + " and " + changed[-1]
        them = "it" if len(changed) == 1 else "them"
        return f"as {what} changed since the last compiled step, and torch specialises the compiled code on {them}"

    def _train_forward(self, note: Callable[[str], None]):
        """What a training step calls: the model, or torch.compile(model) when config.compile is on."""
        eager = self._eager_forward()
        if not self.config.compile or self._compile_failed is not None:
            return eager
        if self._compiled is not None and self._compiled_from is not eager:
            # The path changed since it was compiled (fast_path switched, or a hook now listens and
            # the readable model must run): compile what runs now, never the other path.
            self._compiled = None
        if self._compiled is None:
            if self._compiled_from is not None and self._compiled_from is not eager and self._compile_again is None:
                self._compile_again = PATH_CHANGED  # compiled before: the path changed, or DDP wrapped it anew
            self._compiled_from = eager
            note(compile_advice())  # before torch.compile: it filters out torch's own warning of that
            self._compiled, why = compile_module(eager)  # under DDP: compile the wrapper (torch's advice)
            if self._compiled is None:
                self._compile_failed = why
                note(why)
                return eager
            if not tells_compiles(self._compiled):
                # torch.compile is lazy: the step about to run compiles, for seconds to minutes, under a bar at 0 or
                # a log's silence. torch.compile's own wrapper is said where torch says it compiles (run_compiled):
                # after :load it reused the code compiled before, and "compiling the model" was said of 0.0 s.
                again, self._compile_again = self._compile_again, None
                line = compiling_line(self.config.dtype, self.device, again)
                self._noted.discard(line)
                note(line)
                self._compile_pending = True
        return self._compiled

    # --- one rank of several (core.distributed); in a single process these are the plain paths --------
    def _join_ranks(self) -> None:
        """Under torchrun, wrap the model in DDP for the training forward/backward (once per model)."""
        if self.alone or not distributed.active():
            return
        wrapped = None if self._ddp is None else getattr(self._ddp.module, "model", self._ddp.module)
        if wrapped is self.model:  # already wrapping this model, directly or through its fast path
            return
        self._ddp = self._compiled = None  # so that _eager_forward gives the unwrapped path to wrap
        try:  # DDP's constructor is a collective (rank 0's weights go to every rank): a rank can die in it
            self._ddp = distributed.wrap(self._eager_forward(), self.device)  # the fast path or the model
        except Exception as e:
            if not distributed.is_peer_failure(e):
                raise
            raise self._peer_lost(e, f"before step {self.step + 1} began") from None

    def _global_aux_loss(self) -> float | None:
        """A mixture's load-balancing loss of the step: under DDP averaged across ranks, as the train loss beside
        it is (every rank joins: each computes it); in one process the model's own."""
        aux = self.model.moe_aux_loss() if hasattr(self.model, "moe_aux_loss") else None
        if aux is None:
            return None
        return (aux if self._ddp is None else distributed.mean(aux.detach().float())).item()

    def leave_ranks(self) -> None:
        """Drop the DDP wrapper before the process group is destroyed (core.distributed.destroy).

        DDP's reducer holds the group: left alive past destroy_process_group, gloo's worker threads
        are torn down only during interpreter finalization, where they can abort the process
        ("terminate called without an active exception", SIGABRT; seen once on rank 1 of a 2-rank
        test run on a loaded machine, after its command had finished). Dropped here, the group goes
        while Python is whole. The next `:train` under torchrun wraps the model again."""
        self._ddp = self._compiled = None

    def _eager_forward(self):
        """The module a training step calls: the fast path (core.fastpath), or the readable model.

        The readable model when `fast_path` is off, where a part is of a caller's own class
        (core.fastpath.own_part), and whenever a hook listens to it (a view, a trace, an ablation):
        those hooks sit on modules the fast path does not call.
        """
        return self._ddp if self._ddp is not None else self._plain_forward()

    def _plain_forward(self):
        """The fast path or the readable model, in this process alone (what evaluation calls, never DDP)."""
        if not self.config.fast_path or not FastPath.supports(self.model):  # a part of a caller's own: own_part
            return self.model
        if self._fast is None or self._fast.model is not self.model:
            self._fast = FastPath(self.model)
        return self.model if listened(self.model, self._fast.model_modules) else self._fast

    def _train_batch(self):
        """This step's batch: every rank draws the global batch alike and keeps its rows (core.distributed)."""
        cfg = self.config
        if self._ddp is None:
            return self.data.get_batch("train", cfg.batch_size, self.max_seq_len, self.generator)
        x, y = self.data.get_batch("train", cfg.batch_size * distributed.world_size(), self.max_seq_len,
                                   self.generator)
        x_mine, y_mine = distributed.rank_slice(x), distributed.rank_slice(y)
        # A loss is the mean over a batch's targets (-1: none). Where rows count different numbers of targets
        # (repeat data's examples differ in length), the mean of the ranks' means is not the global batch's:
        # each rank weighs its own by its share of the targets (core.distributed: exactness)
        counted = int((y != -1).sum())
        self._target_share = (int((y_mine != -1).sum()) * distributed.world_size() / counted) if counted else 1.0
        return x_mine, y_mine

    def _peer_safe(self, fn, *args):
        """fn(*args), a collective among the ranks: a dead peer becomes PeerLost (see _raise_if_peer_lost)."""
        try:
            return fn(*args)
        except Exception as e:
            self._raise_if_peer_lost(e)
            raise

    def _raise_if_peer_lost(self, exc: BaseException) -> None:
        """Under DDP, turn "another rank is gone" into PeerLost; the step under way is undone already."""
        if self._ddp is None or not isinstance(exc, Exception) or not distributed.is_peer_failure(exc):
            return
        raise self._peer_lost(exc, f"during step {self.step + 1}") from None

    def _peer_lost(self, exc: BaseException, when: str) -> PeerLost:
        """The error for another rank gone `when` ("during step 5"): this rank holds the weights of self.step."""
        return PeerLost(f"another process of this torchrun launch stopped ({distributed.peer_failure_reason(exc)}) "
                        f"{when}; this one stopped too, with the weights of step {self.step}", step=self.step)

    def _stop_requested(self, should_stop: Callable[[], bool] | None) -> bool:
        stop = should_stop is not None and should_stop()
        agreed = stop if self._ddp is None else distributed.any_rank(stop, self.device)
        self._stop_from_peer = agreed and not stop  # another rank asked (run() says so)
        return agreed

    def _step_start(self) -> tuple:
        """What a step changes before its update: cheap to keep (a few KB), so a failed step is undone."""
        return (self.generator.get_state(), random_state(self.device),
                [g["lr"] for g in self.optimizer.param_groups])

    def _undo_step_start(self, before: tuple) -> None:
        generator, torch_rng, lrs = before
        self.generator.set_state(generator)
        set_random_state(torch_rng, self.device)  # dropout drew from it
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)

    def _check_finite(self, what: str, value: torch.Tensor, batch: tuple | None = None) -> None:
        """TrainingDiverged where the step's `what` (its loss, its gradient norm) is not finite: its update is not
        applied. Where the weights it would have updated are broken themselves (`batch`: the step's x and y, read
        again by them), that is said instead of the rate alone: a run on a model an earlier run ruined diverged "at
        step 1" and was told to lower an lr of 1e-06, which no rate mends."""
        if torch.isfinite(value).all():
            return
        self.optimizer.zero_grad(set_to_none=True)
        lower, n = self.config.lr / 10, self.step + 1
        broken = self._broken_weights(*batch) if batch is not None else None
        if broken is not None and self.step == self.run_start:  # no update of this run made them so
            raise TrainingDiverged(
                f"the {what} is {value.item()} at step {n}, before any update of this run: the model's weights are "
                f"broken already ({broken}), likely by an earlier run that diverged, and no learning rate mends them. "
                f"Train from good weights: {GOOD_WEIGHTS}", step=n, what=what, value=value.item(), broken=broken)
        if broken is not None:
            raise TrainingDiverged(
                f"the {what} became {value.item()} at step {n}; that update was not applied (the weights are those "
                f"of step {self.step}), but those are broken too ({broken}). Lower the learning rate (now "
                f"{self.config.lr:g}, e.g. to {lower:g}) and train again from good weights: {GOOD_WEIGHTS}",
                step=n, what=what, value=value.item(), fix={"lr": lower})
        raise TrainingDiverged(
            f"the {what} became {value.item()} at step {n}; that update was not applied "
            f"(the weights are those of step {self.step}). Lower the learning rate "
            f"(now {self.config.lr:g}, e.g. to {lower:g}) and train again",
            step=n, what=what, value=value.item(), fix={"lr": lower},
        )

    def _broken_weights(self, x: torch.Tensor, y: torch.Tensor) -> str | None:
        """Why the model's weights are unusable as they are, or None: a weight that is nan or inf, or a loss or gradient
        of the step's batch that is not finite computed from them in float32 and eval mode (weights of 1e8 overflow,
        every one finite). One that only the step's own bfloat16 or dropout made non-finite gives None: the weights
        are good. A failed step's check only: a forward and backward more, its gradients kept apart (autograd.grad)."""
        bad = self._non_finite_weight()
        if bad is not None:
            return f"they hold {bad}"
        params = [p for p in self.model.parameters() if p.requires_grad]
        with evaluating(self.model, keep_last_forward=True):
            _, loss = self._plain_forward()(x, y)
            what, value = "loss", loss.detach()
            if bool(torch.isfinite(value)):
                grads = [g for g in torch.autograd.grad(loss, params, allow_unused=True) if g is not None]
                what, value = "gradient norm", torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
        if bool(torch.isfinite(value)):
            return None
        largest = max(p.detach().abs().max().item() for p in self.model.parameters())
        return f"their {what} on this batch is {value.item()} in float32 without dropout; the largest weight is " \
               f"{largest:.2g}"

    def _non_finite_weight(self) -> float | None:
        """A weight that is nan or inf (the first found), or None when every weight is finite."""
        params = list(self.model.parameters())
        if bool(torch.stack([torch.isfinite(p).all() for p in params]).all()):  # one device sync, at a run's end
            return None
        for p in params:
            finite = torch.isfinite(p)
            if not bool(finite.all()):
                return p.detach()[~finite].flatten()[0].item()
        return None

    def check_last_update(self) -> None:
        """After a run() that stopped between evaluations, whether its last update left weights that still read its
        batch (a run at lr=1e30 leaves finite weights whose forward overflows): TrainingDiverged if not. What keeps
        the model afterwards (:train, before it autosaves) asks; an evaluation or the next step's loss says the same
        where there is one."""
        batch, self._unread_batch = self._unread_batch, None
        if batch is not None:
            self._check_forward(*batch)

    def _check_forward(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """The last step's batch read again by the weights after its update (eval mode, one forward): its loss must
        be finite, as a next step's would have to be. A run stopped between evaluations is checked this way."""
        with evaluating(self.model, keep_last_forward=True):
            with torch.no_grad():
                _, loss = self._plain_forward()(x, y)
        if not bool(torch.isfinite(loss)):
            self._diverged_after("loss of its batch", loss.item())

    def _record_precision(self, cfg: TrainConfig) -> None:
        """Keep what the step just taken (self.step) ran in: its products' dtype and, for Muon, Newton-Schulz's, and a
        new span in dtype_spans where either differs from the step before's."""
        before = [self.trained_dtype, self.trained_ns_dtype]
        self.trained_dtype = training_dtype(cfg.dtype, self.device)
        self.trained_ns_dtype = newton_schulz_dtype(cfg.dtype, self.device) if cfg.optimizer == "muon" else None
        # spans of steps undone since (a rollback puts back its own state; a divergence's steps are taken back by it)
        # never outlive the steps they began at
        while self.dtype_spans and self.dtype_spans[-1][0] >= self.step:
            self.dtype_spans.pop()
        if not self.dtype_spans and self.step > 1 and before[0] is not None:
            # a checkpoint of before the spans: its latest step's dtype is known (its earlier ones are not), so a
            # bfloat16 lesson continued in float32 still reads as two
            self.dtype_spans.append([self.step - 1, *before])
        now = [self.trained_dtype, self.trained_ns_dtype]
        if not self.dtype_spans or self.dtype_spans[-1][1:] != now:
            self.dtype_spans.append([self.step, *now])

    def _diverged_after(self, what: str, value: float) -> None:
        """The update of step self.step was applied, its loss and gradient finite, and left the weights or the val
        loss non-finite (lr=1e39 turns every weight to inf in one step): the run cannot go on from here. Unlike a
        loss that `_check_finite` catches before the update, this one is in the weights; a caller that keeps the
        session whole rolls back to a snapshot, as :train does."""
        lower = self.config.lr / 10
        raise TrainingDiverged(
            f"the {what} became {value} after the update of step {self.step}, whose loss and gradient were finite; "
            f"the weights are no longer usable. Lower the learning rate (now {self.config.lr:g}, e.g. to "
            f"{lower:g}) and train again from good weights: {GOOD_WEIGHTS}", step=self.step, what=what, value=value,
            fix={"lr": lower},
        )

    # --- state for checkpoints and roll-back --------------------------------------------------------
    def snapshot(self) -> dict:
        """A deep copy of the weights and of everything state_dict() holds, for `rollback`."""
        return {
            "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
            "trainer": _copied(self.state_dict()),
            "torch_rng": torch.get_rng_state(),  # draws the dropout masks
            "gpu_rng": random_state(self.device)[1],  # where the model is on a GPU: its own generator draws them
        }

    def already_noted(self, line: str) -> None:
        """Count `line` as said: a caller that said it before the run (a :load that brought dtype=bfloat16 to a CPU
        without bfloat16 units) keeps the run from saying it a second time."""
        self._noted.add(line)

    def rollback(self, snapshot: dict) -> None:
        """Return the model, optimizer, random state, run position and history to a `snapshot`."""
        self.model.load_state_dict(snapshot["model"])
        self.load_state_dict(_copied(snapshot["trainer"]))
        set_random_state((snapshot["torch_rng"], snapshot.get("gpu_rng")), self.device)

    def state_dict(self) -> dict:
        """Everything but the model weights needed to continue exactly: JSON-able plus tensors."""
        return {
            "step": self.step,
            "run_start": self.run_start,
            "run_steps": self.run_steps,
            "run_elapsed": self.run_elapsed,
            "run_constant_lr": self.run_constant_lr,
            "history": self.history,
            "trained_window": self.trained_window,
            "trained_dtype": self.trained_dtype,
            "trained_ns_dtype": self.trained_ns_dtype,
            "dtype_spans": [list(span) for span in self.dtype_spans],
            "train_config": self.config.to_dict(),
            "generator": self.generator.get_state(),
            "optimizer": self.optimizer.state_dict(),
        }

    def optimizer_for(self, config: TrainConfig):
        """The optimizer that a state saved under `config` loads into: this one, or a new one of its kind."""
        return self.optimizer if config.optimizer == self.config.optimizer else make_optimizer(self.model, config)

    def load_state_dict(self, state: dict) -> None:
        # Validate what can fail before changing anything, so a bad state leaves the trainer as it was.
        # The state's config decides the optimizer: a muon state given to an adamw trainer is loaded
        # into a new MuonWithAdamW (and the other way round), which replaces the old one only then.
        config = TrainConfig.from_dict(state["train_config"])
        probe = torch.Generator()
        probe.set_state(state["generator"])
        history = state["history"].copy() if isinstance(state["history"], History) else History(state["history"])
        optimizer = self.optimizer_for(config)
        optimizer.load_state_dict(state["optimizer"])
        self.optimizer = optimizer
        self.generator.set_state(state["generator"])
        self.config = config
        self.step = state["step"]
        self.run_start = state["run_start"]
        self.run_steps = state["run_steps"]
        self.run_elapsed = state["run_elapsed"]
        self.run_constant_lr = state.get("run_constant_lr")  # absent in checkpoints before it existed
        self.trained_window = state.get("trained_window")  # absent before it existed: the model's own window
        self.trained_dtype = state.get("trained_dtype")  # absent before it existed: not known
        self.trained_ns_dtype = state.get("trained_ns_dtype")  # absent before it existed: not known, nothing said
        self.dtype_spans = [list(span) for span in state.get("dtype_spans") or []]  # absent before: none recorded
        self.history = history


def _copied(state: dict) -> dict:
    """A trainer state's deep copy, its history copied column by column (History.copy): copy.deepcopy walked each
    value of each row, 1.7 s for the 200,000 rows of a long run at every :train (its snapshot) and again at a
    rollback; a list of dicts for the copy held another 130 MB."""
    rest = copy.deepcopy({k: v for k, v in state.items() if k != "history"})
    history = state["history"]
    return {**rest, "history": history.copy() if isinstance(history, History) else History(history)}
