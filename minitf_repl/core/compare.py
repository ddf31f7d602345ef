"""Side-by-side training: what does a change (RoPE, RMSNorm, a preset) buy on the same data?

`compare` trains every contender from the same initial seed on the same batches (the batch order
is drawn from the seed, so contenders with the same batch size, context and tokenizer see
identical batches), in step with each other: all of them reach an evaluation before any goes on, so a caller
can show one row per evaluation as it happens. With several seeds each contender is trained once
per seed and the results are the mean and the spread (sample standard deviation) over seeds, so
that run-to-run noise is not read as an effect. Each run draws its dropout masks from a random stream
of its own, from its seed: a contender trains as `:train` trains a fresh model of its settings, whatever
its rivals are.

Contenders may read the same text with different tokenizers (`tokenizer=char` against
`tokenizer=bpe:512`): each then has its own embedding size, and since a loss per token of one
tokenizer does not compare with another's, every evaluation of text also gives the loss in bits per
character of the validation text (core.data.bits_per_char), which does.

Each contender's speed is also given as `:train` gives a run's: the GFLOP/s of the products the ledger counts
(core.ledger.training_flops_per_token times its tokens/s) and their share of this device's product speed in its
dtype (core.peak, the MFU), under core.peak's rules. The contenders differ in size, and tokens/s alone reads a
bigger model as the less efficient one where it may keep the CPU busier: of the tests' tiny model, one block trained
9,658 tokens/s at 2.3% of the peak and two blocks 5,803 tokens/s at 2.5% (a 2-core AMD EPYC, one thread).

Nothing here touches a caller's model: every contender is a new model and trainer, and the global
random state is restored afterwards.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import distributed
from .config import ModelConfig, TrainConfig
from .data import bits_per_char, row_length, val_tokens_per_char
from .errors import TrainingDiverged
from .ledger import training_flops_per_token
from .model import MiniTransformerLM
from .peak import MIN_TIMED_STEPS, product_speed_or_none, share_of_peak
from .precision import newton_schulz_dtype, training_dtype
from .train import EvaluationStopped, Trainer, fork_random, random_state, set_random_state


@dataclass
class Contender:
    label: str  # what the user typed for it, e.g. "preset=modern" or "norm=rmsnorm"
    model_config: ModelConfig
    train_config: TrainConfig
    # The same text read by this contender's own tokenizer (its model_config.vocab_size is that
    # tokenizer's), and that tokenizer's setting (bpe:512); None: the data every contender shares.
    data: object = None
    tokenizer: str | None = None


@dataclass
class Evaluation:
    """One contender's validation loss at one step: the mean over seeds and its spread."""

    label: str  # the contender's label (its Outcome's)
    step: int  # the training step evaluated at: every eval_every steps, and the last
    val_loss: float  # the mean over seeds of the val loss, in nats per token
    spread: float | None  # sample standard deviation over seeds (None with one seed)
    accuracy: float | None = None  # mean task accuracy, for tasks
    # val_loss in bits per character of the val text (text data): what compares across tokenizers
    bpc: float | None = None
    bpc_spread: float | None = None  # the sample standard deviation of bpc over seeds (None with one seed, or no bpc)
    # each seed's val loss, in the comparison's order of seeds: every contender trains from the same seeds, so two
    # contenders' gaps seed by seed cancel the noise they share
    losses: list[float] = field(default_factory=list)
    bits: list[float] = field(default_factory=list)  # each seed's bits per character, in the same order


@dataclass
class Outcome:
    """A contender at the end: its curve, its speed and its size."""

    label: str  # what the user typed for it (Contender.label), e.g. "norm=rmsnorm"
    n_params: int  # its model's parameters, a tied matrix once
    curve: list[Evaluation] = field(default_factory=list)  # its evaluations, in step order (none after it diverged)
    tokens_per_second: float | None = None  # mean over seeds, evaluation excluded; None: no step was timed
    # wall time of all its seeds together; after a stop, to the last evaluation every contender reached (each had
    # trained on past it by a different number of steps when the stop came)
    seconds: float = 0.0
    changes: dict = field(default_factory=dict)  # the settings that differ from the first contender
    tokens_per_char: float | None = None  # of the val text as this contender's tokenizer reads it
    # batch_size x the tokens a row holds: the tokens one of its training steps reads (a row is the window on text,
    # fewer on a task, whose rows are one question and its answer whatever the window)
    tokens_per_step: int = 0
    # at the end, the val loss by position in the window (core.context) in bands of positions doubling in width,
    # the same edges for every contender (a shorter window has fewer bands), mean over seeds; empty if stopped
    bands: list[str] = field(default_factory=list)
    # each band's val loss in nats per token, mean over seeds (NaN, null, where the band counts no position)
    band_losses: list[float] = field(default_factory=list)
    # where one of its runs diverged (a loss or gradient not finite, e.g. "step 3: loss inf"): it stopped there, and
    # the others went on; a learning-rate sweep is where one is expected to
    diverged: str | None = None
    lr: float = 0.0  # its learning rate (its schedule's peak): what a lower one for the next try starts from
    # what its steps' products ran in, float32 or bfloat16 (dtype=auto is either, by the machine): a comparison saved
    # on another kind of CPU says so where its numbers differ
    dtype: str = "float32"
    # what its Muon Newton-Schulz ran in, float32 or bfloat16 (core.precision.newton_schulz_dtype): float32 for
    # dtype=float32, else bfloat16 where the device multiplies it natively and float32 elsewhere, so a dtype=bfloat16
    # contender's `dtype` read alike on both kinds of CPU while its orthogonalisation did not; null: not a Muon run
    newton_schulz_dtype: str | None = None
    # the matrix-product FLOPs the ledger counts for training one of its tokens at its rows' length, which gflops and
    # mfu are of, as :train's (core.ledger.training_flops_per_token: forward and backward, Linears and attention's two
    # products; not Muon's Newton-Schulz, norms, softmax or the optimizer's elementwise work)
    flops_per_token: int | None = None
    # flops_per_token x tokens_per_second / 1e9: its achieved rate of those products, a lower bound of the work done
    # (which counts more than the ledger does); null where no step was timed
    gflops: float | None = None
    # this device's speed at a square product in its dtype at the thread count (core.peak), in GFLOP/s: the latest
    # this process measured (:device, a :train), else measured once at the comparison's end; null where it could not
    # be measured, under torchrun, where one step alone was timed, or where it went faster than the peak (misread)
    peak_gflops: float | None = None
    mfu: float | None = None  # gflops / peak_gflops (0.32: 32%): its model FLOPs utilisation; null where either is
    # the steps its tokens/s is of, over all its seeds (a stop, or a divergence, leaves fewer than steps x seeds): what
    # decides whether a share is said (core.peak.MIN_TIMED_STEPS), here and in the view's words for none; 0: none timed
    timed_steps: int = field(default=0, metadata={"view_only": True})

    @property
    def final(self) -> Evaluation | None:
        return self.curve[-1] if self.curve else None


def compare(
    contenders: list[Contender],
    data,
    steps: int,
    seeds: list[int],
    device: torch.device | str = "cpu",
    on_evaluation: Callable[[Evaluation], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    threads=None,
    on_step: Callable[[int, int], None] | None = None,
    on_diverged: Callable[[str], None] | None = None,
    on_evaluate: Callable[[str, int, int], None] | None = None,
) -> list[Outcome]:
    """Train each contender for `steps` steps once per seed, in step; return one Outcome each.

    `threads`: a core.threads.ThreadPolicy each trainer asks between steps (None: leave the count alone).
    `on_step(done, total)` follows every training step of every contender and seed (`total` of them
    in all), so a progress bar can move, and estimate the time left, between evaluations.
    `on_diverged(label)`: that contender diverged and stopped; it has no more evaluations.
    `on_evaluate(label, done, eval_batches, what)` after each validation batch of a contender's evaluation (what:
    "val"), and each pass of its loss by position at the end ("by position", done of the windows): the steps' count
    stands still through them (on a bigger model, many seconds), and a stop asked then ends them at once (a stop
    during the loss by position leaves it out: the comparison itself is whole).
    """
    def stop() -> bool:
        return should_stop is not None and should_stop()

    def settings(c: Contender) -> dict:
        """What a contender is: its model and training settings (its seed and length are the comparison's), and its
        tokenizer where it has its own."""
        train = {k: v for k, v in c.train_config.to_dict().items() if k not in ("seed", "steps")}
        return {**c.model_config.to_dict(), **train,
                **({"tokenizer": c.tokenizer} if c.tokenizer is not None else {})}

    base = settings(contenders[0])
    readings = [c.data if c.data is not None else data for c in contenders]  # the text as each one reads it
    outcomes = [Outcome(c.label, 0, changes={k: v for k, v in settings(c).items() if base.get(k) != v},
                        lr=c.train_config.lr, tokens_per_char=val_tokens_per_char(reading),
                        dtype=training_dtype(c.train_config.dtype, device),
                        newton_schulz_dtype=(newton_schulz_dtype(c.train_config.dtype, device)
                                             if c.train_config.optimizer == "muon" else None),
                        tokens_per_step=c.train_config.batch_size
                        * (row_length(reading, c.model_config.max_seq_len) or c.model_config.max_seq_len))
                for c, reading in zip(contenders, readings)]
    # the GPU's generator too: torch.manual_seed below seeds it, and the runs' dropout draws from it there
    with fork_random(device):
        _warm_up(contenders[0], readings[0], device)
        runs = []  # (contender index, trainer) for every contender and seed
        # each run's own random stream, as `:train` of a fresh model of its settings would draw it (dropout's masks):
        # the runs go in step, and drawing from one shared stream in turn, a contender's numbers moved with its rivals
        streams: dict[int, tuple] = {}
        for seed in seeds:
            for i, contender in enumerate(contenders):
                config = contender.train_config.replace(seed=seed, steps=steps)
                torch.manual_seed(seed)
                model = MiniTransformerLM(contender.model_config).to(device)
                trainer = Trainer(model, readings[i], config, device)
                trainer.threads = threads
                trainer.start_run(steps)
                outcomes[i].n_params = model.num_parameters()
                # at the length its rows hold (a task's are shorter than the window), as :train counts a run's
                outcomes[i].flops_per_token = training_flops_per_token(
                    model, outcomes[i].tokens_per_step // contender.train_config.batch_size)
                runs.append((i, trainer))
                streams[id(trainer)] = random_state(device)
        busy = [[0.0, 0] for _ in contenders]  # seconds and tokens of training, per contender
        every = contenders[0].train_config.eval_every
        done = 0
        total, trained = len(runs) * steps, [0]  # training steps of all runs, and done so far

        def stepped(info) -> None:
            trained[0] += 1
            if on_step is not None:
                on_step(trained[0], total)

        # each contender's time and training at the last evaluation all of them reached: what a stop reports
        reached = [(0.0, [0.0, 0]) for _ in contenders]

        def stopped() -> list[Outcome]:
            for outcome, (seconds, work) in zip(outcomes, reached):
                outcome.seconds = seconds
            return _finish(outcomes, [list(work) for _, work in reached], device)

        while done < steps:
            target = min(done + every, steps)
            results: dict[int, list[tuple[float, float | None]]] = {}
            for i, trainer in list(runs):
                if stop():
                    return stopped()
                if outcomes[i].diverged:  # another seed of it diverged this segment
                    continue
                start = time.perf_counter()
                # The caller's stop request is asked before every step, as :train asks it: a stop
                # (Ctrl-C, SIGTERM) waits for one training step, never for the rest of a segment.
                set_random_state(streams[id(trainer)], device)
                try:
                    scored = None if on_evaluate is None else \
                        (lambda done_, total_, label=outcomes[i].label: on_evaluate(label, done_, total_, "val"))
                    summary = trainer.run(on_step=stepped, should_stop=lambda t=trainer: t.step >= target or stop(),
                                          on_evaluate=scored, stop_evaluation=stop)
                    streams[id(trainer)] = random_state(device)
                except TrainingDiverged as e:  # this contender ends here, every seed of it; the others go on
                    outcomes[i].seconds += time.perf_counter() - start
                    outcomes[i].diverged = f"step {e.step}: {e.what} {e.value:g}"
                    runs = [(j, t) for j, t in runs if j != i]
                    results.pop(i, None)
                    if on_diverged is not None:
                        on_diverged(outcomes[i].label)
                    continue
                outcomes[i].seconds += time.perf_counter() - start
                if summary.tokens_per_second:
                    tokens = summary.steps * outcomes[i].tokens_per_step
                    busy[i][0] += tokens / summary.tokens_per_second
                    busy[i][1] += tokens
                if stop():  # stopped inside the segment: no evaluation of a half-trained contender
                    return stopped()
                last = trainer.history[-1]
                try:
                    val = last["val_loss"] if last["val_loss"] is not None else \
                        trainer.evaluate(on_batch=scored, should_stop=stop)[0]
                except EvaluationStopped:
                    return stopped()
                results.setdefault(i, []).append((val, last.get("accuracy")))
            done = target
            for i, values in results.items():
                losses = [v for v, _ in values]
                accuracies = [a for _, a in values if a is not None]
                bits = [bits_per_char(v, outcomes[i].tokens_per_char) for v in losses]
                bits = bits if None not in bits else []
                evaluation = Evaluation(
                    outcomes[i].label, done, statistics.fmean(losses),
                    statistics.stdev(losses) if len(losses) > 1 else None,
                    statistics.fmean(accuracies) if accuracies else None,
                    statistics.fmean(bits) if bits else None,
                    statistics.stdev(bits) if len(bits) > 1 else None,
                    losses, bits,
                )
                outcomes[i].curve.append(evaluation)
                if on_evaluation is not None:
                    on_evaluation(evaluation)
            reached = [(outcome.seconds, list(work)) for outcome, work in zip(outcomes, busy)]
        if runs and not stop():
            _by_position(outcomes, runs, readings, device, on_evaluate, stop)
    return _finish(outcomes, busy, device)


def _warm_up(contender: Contender, data, device) -> None:
    """One untimed training step of a throwaway model of `contender`, before any run is timed. A fresh process pays
    one-off costs on its first steps (the first forward and backward, the allocator's first blocks, the kernels'
    set-up): timed, they fell on the first contender alone, whose tokens/s then read 20-30% under a rival's of the
    very same model (`minitf compare current lr=0.003`). Nothing here touches a run: its own model, batches and
    random draws (the caller's fork_rng puts the random state back)."""
    torch.manual_seed(0)
    try:  # a step that fails here (a rate that diverges at once, memory) is the timed run's to report, not this one's
        trainer = Trainer(MiniTransformerLM(contender.model_config).to(device), data,
                          contender.train_config.replace(steps=2, eval_every=2, eval_batches=1), device)
        trainer.alone = True  # under torchrun each process warms up by itself: no collective for a throwaway
        trainer.start_run(2)
        trainer.run(should_stop=lambda: trainer.step >= 1)  # one step, and no run-end evaluation (a task's scores
        # them all); then one batch of evaluation, whose one-offs (its batch's shapes, no-grad kernels) fell on the
        # first contender's time too: 0.1 to 0.2 s of 0.7, whichever came first
        trainer.evaluate()
    except Exception:  # noqa: BLE001 - nothing of the comparison depends on it
        pass


BAND_WINDOWS = 256  # val windows each contender's loss by position is read on, per seed


class _BandsStopped(Exception):
    """A stop request came while the loss by position was read: it is left out."""


def _by_position(outcomes: list[Outcome], runs: list, readings: list, device, on_evaluate=None, stop=None) -> None:
    """Each outcome's val loss by position, in the same bands for all (those of the longest window), mean over
    seeds: where in the window one contender wins (positions, a longer window, a different mask). `on_evaluate`
    hears each pass (compare's); `stop()` true between passes leaves every outcome without bands."""
    from .context import position_bands, position_losses

    most = max(trainer.max_seq_len for _, trainer in runs).bit_length()  # 64: 0 | 1 | 2-3 | ... | 32-63
    per_contender: dict[int, list[list[float]]] = {}
    for i, trainer in runs:
        def passed(done: int, total: int, label=outcomes[i].label) -> None:
            if on_evaluate is not None:
                on_evaluate(label, done, total, "by position")
            if stop is not None and stop():
                raise _BandsStopped

        try:
            curve = position_losses(trainer.model, readings[i], device, BAND_WINDOWS, on_progress=passed,
                                    fast=trainer.config.fast_path)
        except _BandsStopped:
            for outcome in outcomes:
                outcome.bands, outcome.band_losses = [], []
            return
        labels, means = position_bands(curve.losses, most)
        outcomes[i].bands = labels
        per_contender.setdefault(i, []).append(means)
    for i, rows in per_contender.items():
        outcomes[i].band_losses = [statistics.fmean(column) for column in zip(*rows)]


def _finish(outcomes: list[Outcome], busy, device: torch.device | str = "cpu") -> list[Outcome]:
    for outcome, (seconds, tokens) in zip(outcomes, busy):
        outcome.tokens_per_second = tokens / seconds if seconds > 0 else None  # no step timed: no speed
        _utilisation(outcome, tokens, device)
    return outcomes


def _utilisation(outcome: Outcome, tokens: int, device) -> None:
    """A contender's GFLOP/s and its share of the peak (MFU), into `outcome`, by :train's rules (core.peak): no share
    of one timed step (here its one-off set-up is mostly the untimed _warm_up's, but one step's time is still noise),
    none where the rate passes the peak, none under torchrun (one process's speed is not the launch's). The peak is
    the cached one of the device and the contender's dtype, measured once where there is none (0.25 s at most), after
    every contender has trained: contenders of one dtype share one measurement."""
    if outcome.tokens_per_second is None or outcome.flops_per_token is None:
        return
    outcome.gflops = outcome.flops_per_token * outcome.tokens_per_second / 1e9
    # steps over all its seeds, as timed: not the planned steps x seeds, which a stop or a divergence cuts short
    outcome.timed_steps = tokens // outcome.tokens_per_step if outcome.tokens_per_step else 0
    if outcome.timed_steps < MIN_TIMED_STEPS or distributed.world_size() > 1:
        return
    peak = product_speed_or_none(device, outcome.dtype, again=False)
    if (mfu := share_of_peak(outcome.gflops, peak.gflops if peak else None, outcome.timed_steps)) is not None:
        outcome.peak_gflops, outcome.mfu = peak.gflops, mfu


# Student's t at 97.5% for n - 1 degrees of freedom (n seeds, at most 10): a two-sided test at 95%
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def differs(a: Evaluation, b: Evaluation, bpc: bool = False) -> bool | None:
    """Whether two final losses (bpc: bits per character) differ by more than the noise (None: one seed).

    With both contenders' losses seed by seed, the noise is that of their gaps over the seeds: the same seed gives
    both the same initial weights (where their shapes agree) and the same batches, so what moves both alike cancels,
    and a gap of 0.01 on every one of three seeds is a difference that each loss's own spread of 0.02 hid. The gaps'
    mean is tested against its standard error with Student's t at 95% (paired t-test): "twice the gaps' spread"
    called two identical contenders different one time in five at 2 seeds. Without the losses seed by seed (an
    Evaluation built elsewhere), the two spreads combine as for independent runs."""
    (x, sx, xs), (y, sy, ys) = ((e.bpc, e.bpc_spread, e.bits) if bpc else (e.val_loss, e.spread, e.losses)
                                for e in (a, b))
    if len(xs) == len(ys) > 1:
        gaps = [u - v for u, v in zip(xs, ys)]
        error = statistics.stdev(gaps) / math.sqrt(len(gaps))
        return abs(statistics.fmean(gaps)) > T_975.get(len(gaps) - 1, 1.96) * error
    if sx is None or sy is None:
        return None
    return abs(x - y) > 2 * math.hypot(sx, sy)
