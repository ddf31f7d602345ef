"""The learning-rate range test: one short run whose rate grows every step, read as loss against rate.

What rate to train at? Before comparing whole runs (`:compare lr=a lr=b`), one run can say where the
answer lies (Smith, "Cyclical Learning Rates for Training Neural Networks", 2015; fastai's lr_find).
A fresh model with the session's settings trains `steps` steps, each at (high / low)^(1/(steps - 1)) times
the rate before, from `low` to `high`, with no warm-up and no decay:

    lr_k = low * (high / low) ** (k / (steps - 1))            k = 0 .. steps - 1

At rates too low to matter the loss stays where it started; then it falls, fastest somewhere; past
some rate each step overshoots and the loss turns back up, and past that it blows up (the test stops
once the loss is four times its lowest). The training loss of one batch a step is noisy, so the
curve read is an exponential moving average of it (debiased, as Adam's moments are):

    s_k = (beta s_(k-1) + (1 - beta) L_k) / (1 - beta^(k+1)),   beta = 0.9

Two rates are read off it: where s falls fastest per step of the rate (the steepest), and where s is
lowest. A whole run wants a peak rate between them: below the lowest, since a run keeps training at
its peak for many steps where the test spent one, and near or above the steepest, where each step
still gains the most. The session's own rate is placed on the same curve. Nothing of the session
changes: the model and optimizer are fresh ones on a trainer of their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .errors import TrainingDiverged
from .model import MiniTransformerLM
from .train import Trainer, fork_random

BETA = 0.9  # the moving average's weight on the past
BLOWN = 4.0  # the test stops once the loss is this many times its lowest so far
SETTLE = 5  # the first steps, where the average has seen too little, are not read for the steepest fall


@dataclass
class LrRange:
    optimizer: str  # the optimizer it ran with (the session's)
    rates: list[float]  # lr_k of each step run
    losses: list[float]  # the training loss of each step
    smoothed: list[float]  # s_k
    steepest: float | None  # the rate where s falls fastest (None: it never fell)
    lowest: float  # the rate at the lowest s
    lowest_loss: float  # that lowest s, in nats per token (NaN, null: no step ran)
    blown_at: float | None  # the rate at which the loss passed BLOWN x its lowest, or went non-finite; None: never
    low: float  # lr_0: the first step's rate (low=)
    high: float  # lr_(steps - 1): the last step's rate (high=), run only where the test ran all its steps
    steps: int  # asked for (more than len(rates) when the test stopped early)


class _RisingRate(Trainer):
    """A trainer whose rate is lr_k at step k of its run: the range test's schedule in place of warm-up + cosine."""

    rates: list[float]  # lr_k, set before the run

    def lr_for(self, run_step: int) -> float:
        return self.rates[min(run_step, len(self.rates) - 1)]


def smooth(losses: list[float], beta: float = BETA) -> list[float]:
    """The debiased exponential moving average s_k of the losses."""
    out, average = [], 0.0
    for k, loss in enumerate(losses):
        average = beta * average + (1 - beta) * loss
        out.append(average / (1 - beta ** (k + 1)))
    return out


def range_test(model_config, train_config, data, device, steps: int = 100, low: float = 1e-5, high: float = 1.0,
               on_step: Callable | None = None, should_stop: Callable[[], bool] | None = None,
               threads=None) -> LrRange:
    """Train a fresh model `steps` steps at rates rising geometrically from `low` to `high`; read the curve.

    `should_stop()` (Ctrl-C) ends the test early, like a blow-up: the curve so far is read."""
    config = train_config.replace(warmup_steps=0, steps=steps, eval_every=steps, compile=False)
    # The whole test in a random state of its own, from the seed: the fresh model's weights and, with dropout on,
    # its masks. The session's state is left alone (its next :train draws the masks it would have), and the same
    # test reads the same curve each time.
    with fork_random(device):
        torch.manual_seed(config.seed)
        model = MiniTransformerLM(model_config)
        return _read(_RisingRate(model.to(device), data, config, device), steps, low, high, on_step, should_stop,
                     threads)


def _read(trainer: _RisingRate, steps: int, low: float, high: float, on_step: Callable | None,
          should_stop: Callable[[], bool] | None, threads) -> LrRange:
    """Run the range test on `trainer` (a fresh model's) and read its curve."""
    config = trainer.config
    trainer.rates = [low * (high / low) ** (k / max(steps - 1, 1)) for k in range(steps)]
    trainer.threads = threads
    trainer.start_run(steps)
    lowest = [math.inf]
    blown: list[float] = []

    def stop() -> bool:
        if trainer.history:
            last = trainer.history[-1]["train_loss"]
            lowest[0] = min(lowest[0], last)
            if not math.isfinite(last) or last > BLOWN * lowest[0]:
                blown.append(trainer.history[-1]["lr"])
                return True
        return should_stop is not None and should_stop()

    try:
        # the run's last step evaluates (its weights blown up or not): a Ctrl-C then cuts that short too, as it
        # would the steps (the curve is of the training losses, which the evaluation adds nothing to)
        trainer.run(on_step=on_step, should_stop=stop, stop_evaluation=should_stop)
    except TrainingDiverged:  # a non-finite loss: the step was undone, and the test ends at its rate
        blown.append(trainer.lr_for(trainer.step - trainer.run_start))
    losses = [row["train_loss"] for row in trainer.history]
    rates = trainer.rates[: len(losses)]
    smoothed = smooth(losses)
    k_low = min(range(len(smoothed)), key=smoothed.__getitem__) if smoothed else 0
    falls = [(smoothed[k + 1] - smoothed[k - 1], k) for k in range(max(1, SETTLE), k_low)]
    steep = min(falls) if falls else None
    return LrRange(config.optimizer, rates, losses, smoothed,
                   rates[steep[1]] if steep is not None and steep[0] < 0 else None,
                   rates[k_low] if rates else low, smoothed[k_low] if smoothed else math.nan,
                   blown[0] if blown else None, low, high, steps)
