"""`:lrfind`: the learning-rate range test (core.lrfind): where on one curve a run's peak rate belongs.

A fresh model with the session's settings trains a short run whose rate rises every step; the
renderer draws its smoothed loss against the rate, marks where it falls fastest, where it is lowest
and where the session's own rate sits, and says what that means for a run at it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console

from ..core.errors import UserError
from ..core.sizes import check_memory_free
from ..core.words import count
from ..registry import Param
from ..render.chart import Curve, chart
from ..render.renderers import render
from ..render.words import note, say
from ..reporter import Reporter
from ..session import Session
from ..syntax import REPL, cmd, given_before, syntax
from .base import command
from .shared import say_emulated

if TYPE_CHECKING:  # torch-bound; schema.py resolves the name for --json
    from ..core.lrfind import LrRange

FAMILY = "the variant lab"  # beside :compare: one curve says where the rates worth comparing lie

RATE_LIMIT = 1000  # a rate past this ruins any model here in one step (Muon blows up near 0.5, AdamW near 0.7)
SEED_LIMIT = 2**63 - 1  # the seed setting's own limit (a torch generator's seed)
WOBBLE = 0.02  # the chart goes on past the starting loss by this share of it (noise), and is cut past that
LOW, HIGH, STEPS = 1e-5, 1.0, 100  # from far too low to past where every model here blows up (Muon: 0.5)
# How far the points move with the seed (pydoc, the default model, seeds 1337, 1 and 2): Muon's steepest
# 0.0013 to 0.0021 and lowest 0.022 to 0.027; AdamW's steepest the same, its lowest 0.011 to 0.034.


def _set_lr(lr: float) -> str:
    """A rate to try: `:set lr=X` in the REPL; from the shell the train that runs at it (a bare `--set lr=X` read as
    a fragment of a line beside the whole lines around it)."""
    return cmd("set", lr=lr) if syntax() == REPL else given_before("train", "--set", f"lr={lr:g}")


def _next_seed(seed: int) -> int:
    """Another seed than `seed` that the seed option takes: the next one, or 0 after the last (SEED_LIMIT + 1 was
    suggested, and refused as too large)."""
    return seed + 1 if seed < SEED_LIMIT else 0


@dataclass
class LrfindResult:
    test: LrRange  # the range test: each step's rate and loss, the smoothed curve, the rates read off it
    data: str  # the data's name (a task's without its size: sort)
    lr: float  # the session's peak rate
    seed: int  # the fresh model's and the batches' seed
    # random tokens: no rate makes the loss fall under ln V, so the curve's marks are noise (the renderer says so)
    nothing_to_learn: bool = field(default=False, metadata={"view_only": True})
    vocab_size: int = field(default=0, metadata={"view_only": True})


@command("lrfind", "The learning-rate range test: a fresh model trained with a rate rising every step; where the "
                   "loss falls fastest, where it is lowest, and where your lr sits.",
         params=[
    Param("low", float, default=LOW, low=1e-12, limit=RATE_LIMIT, help="the first step's rate"),
    Param("high", float, default=HIGH, low=1e-12, limit=RATE_LIMIT, help="the last step's rate"),
    Param("steps", int, default=STEPS, low=10, limit=100_000, help="steps of the test, each at a higher rate"),
    Param("seed", int, low=0, limit=SEED_LIMIT, help="the fresh model's and the batches' seed (default: the seed "
                                                     "setting)", default_from="seed"),
], aliases=("lr_find",), guide="variant-lab.md#which-learning-rate-lrfind",
         # (the REPL's `:lrfind data=sort` is told `:data sort` before this: data is a command there)
         elsewhere={"data": lambda: f"the test runs on the session's data: "
                                    f"{given_before('lrfind', '--data', 'NAME')} runs it on another"})  # fmt: skip
def cmd_lrfind(session: Session, args: dict, reporter: Reporter) -> LrfindResult:
    from ..core.lrfind import range_test

    low, high, steps = args["low"], args["high"], args["steps"]
    if not low < high:
        raise UserError(f"low must be below high, got low={low:g} high={high:g}; e.g. low=1e-5 high=1")
    trainer = session.trainer
    trainer.data.check_fits(session.model_config.max_seq_len)  # data too short for the window: refused first
    if session.device.type == "cpu":
        # a fresh model trains beside the session's, on :train's batch: as :compare's contenders are, refused before
        # it is built where it cannot fit (it was let start, and the out-of-memory killer ended the whole session)
        check_memory_free(session.model_config, session.train_config.batch_size,
                          fused=session.train_config.fast_path)
    session.threads.decide()  # a fresh look at the other work on the machine before a run
    done = [0]

    def stepped(info) -> None:
        done[0] += 1
        reporter.on_progress("lrfind", done[0], steps)

    config = trainer.config if args["seed"] is None else trainer.config.replace(seed=args["seed"])
    say_emulated([config.dtype], trainer.device, reporter)
    test = range_test(session.model_config, config, trainer.data, trainer.device, steps, low, high,
                      on_step=stepped, should_stop=reporter.should_stop, threads=session.threads)
    return LrfindResult(test, trainer.data.name, config.lr, config.seed,
                        getattr(trainer.data, "nothing_to_learn", False), trainer.data.tokenizer.vocab_size)


def position(rates: list[float], rate: float) -> float | None:
    """Where `rate` falls among the test's rates, as a fractional step index (None: outside them)."""
    if not rates or not rates[0] <= rate <= rates[-1]:
        return None
    if len(rates) == 1:
        return 0.0
    return (math.log(rate) - math.log(rates[0])) / (math.log(rates[-1]) - math.log(rates[0])) * (len(rates) - 1)


def smoothed_at(test: LrRange, rate: float) -> float | None:
    k = position(test.rates, rate)
    return None if k is None else test.smoothed[min(len(test.smoothed) - 1, round(k))]


def stopped_at(test: LrRange) -> float | None:
    """The last rate of a test that Ctrl-C ended before its last step (None: it ran out, or blew up)."""
    return test.rates[-1] if test.blown_at is None and 0 < len(test.rates) < test.steps else None


def still_falling(test: LrRange) -> bool:
    """A test whose lowest point is its last, stopped by Ctrl-C or run out at a `high=` the loss had not turned back
    up by: the curve's real lowest lies further on, unread."""
    return test.blown_at is None and bool(test.rates) and test.lowest >= test.rates[-1]


def where(result: LrfindResult) -> str:
    """Where the session's rate sits on the curve, and what a run at it can expect."""
    test, lr = result.test, result.lr
    yours = f"your lr {lr:g}"
    stop = stopped_at(test)
    if stop is not None and (lr > stop or still_falling(test) and lr > test.lowest):  # no rate past Ctrl-C was read
        falling = ", the loss still falling there" if still_falling(test) else ""
        return (f"{yours} lies past where the test was stopped ({stop:.2g}){falling}: "
                f"{cmd('lrfind', **again(test))} run to its end says where yours sits")
    if test.blown_at is None and (lr > test.rates[-1] or stop is None and still_falling(test) and lr >= test.lowest):
        # it ran out below your rate, or at it with the loss still falling: no rate past its last was read, and "sits
        # between where the loss falls fastest and where it is lowest" was said of a lowest never found
        falling = ", the loss still falling there" if still_falling(test) else ""
        further = cmd("lrfind", **again(test, high=_round(max(HIGH, 3 * lr))))
        if lr <= test.rates[-1]:
            return (f"{yours} is the test's last rate ({test.rates[-1]:.2g}){falling}, so where the loss is lowest "
                    f"lies past it, unread: {further} reads on past it")
        return f"{yours} lies past the test's last rate ({test.rates[-1]:.2g}){falling}: {further} reads on past it"
    if test.blown_at is not None and lr >= test.blown_at:
        return (f"{yours} is at or past where the test blew up ({test.blown_at:.2g}): a run at it will likely "
                f"diverge; try {_set_lr(_round(test.lowest / 3))}")
    if lr > test.lowest:
        return (f"{yours} is past the lowest point ({test.lowest:.2g}): a run at it spends its peak where one "
                f"step of the test already turned the loss back up; the schedule's warm-up and decay may carry "
                f"it, or {cmd('compare', f'lr={lr:g}', f'lr={_round(test.lowest / 3):g}')} shows")
    if test.steepest is not None and lr < test.steepest / 3:
        return (f"{yours} is well below where the loss falls fastest ({test.steepest:.2g}): a run at it learns "
                f"slowly; {cmd('compare', f'lr={lr:g}', f'lr={_round(test.steepest):g}')} shows how much")
    if lr < test.rates[0]:  # the test started above your rate: the curve says nothing of it
        return (f"{yours} lies below the test's first rate ({test.rates[0]:.2g}): "
                f"{cmd('lrfind', **again(test, low=_round(min(LOW, lr / 3))))} reads from below it")
    if test.steepest is not None and lr < test.steepest:  # within the factor of 3 the points are read to
        return (f"{yours} sits just below where the loss falls fastest ({test.steepest:.2g}), within the factor of "
                f"3 the points are read to, and below where it is lowest ({test.lowest:.2g}): where a run's peak "
                f"rate belongs (it spends many steps at its peak where the test spent one)")
    if test.steepest is None:  # the smoothed loss never fell before its lowest: there is no steepest to sit above
        return (f"{yours} is at or below where the loss is lowest ({test.lowest:.2g}), and the loss never fell "
                f"before it: the test read no rate where training gets going; "
                f"{cmd('lrfind', **again(test, steps=2 * test.steps))} reads the range in smaller steps")
    return (f"{yours} sits between where the loss falls fastest and where it is lowest: where a run's peak rate "
            f"belongs (it spends many steps at its peak where the test spent one)")


def again(test: LrRange, **changes) -> dict:
    """The test's range and length where not the defaults, with `changes`: a hint's :lrfind reads what this one did
    but for them (':lrfind seed=1338' after ':lrfind steps=40 low=1e-4 high=2' read 100 steps from 1e-5 to 1)."""
    options = {"low": test.low if test.low != LOW else None, "high": test.high if test.high != HIGH else None,
               "steps": test.steps if test.steps != STEPS else None}
    options.update(changes)
    return {key: value for key, value in options.items() if value is not None}


def _round(rate: float) -> float:
    """A rate to type: two significant figures."""
    return float(f"{rate:.2g}")


def distinct(low: float, high: float) -> tuple[str, str]:
    """Two rates of the chart's axis, with the fewest digits that tell them apart (a test that blew up after 2
    steps from 100 drew 100 and 129 both as "1e+02")."""
    for digits in range(4):
        a, b = f"{low:.{digits}e}", f"{high:.{digits}e}"
        if a != b:
            break
    return a, b


@render.register(LrfindResult)
def render_lrfind(result: LrfindResult, console: Console) -> None:
    test = result.test
    factor = (test.high / test.low) ** (1 / max(test.steps - 1, 1))
    say(console, f"learning-rate range test on {result.data}: a fresh model, {test.optimizer}, no warm-up, the rate "
                 f"x{factor:.3f} every step from {test.low:g} to {test.high:g}; the loss smoothed (moving average "
                 f"0.9)", "bold")
    if len(test.rates) < 2:
        say(console, "the test stopped before two steps: nothing to read")
        return
    # drawn up to where the loss climbs back past where it started: the blow-up after it would squash the rest.
    # Past it by more than a wobble: at rates too low to matter the loss stays where it started, give or take a
    # little, and a test stopped there was cut at its lowest wobble (2 of 12 steps drawn)
    k_low = test.smoothed.index(min(test.smoothed))
    start = test.smoothed[0]
    end = next((k - 1 for k in range(k_low + 1, len(test.smoothed))
                if test.smoothed[k] > start + WOBBLE * abs(start)), len(test.smoothed) - 1)
    if end < 2:  # it rose from its first steps: a point or two would draw nothing, the whole rise is the curve
        end = len(test.smoothed) - 1
    steps = list(range(end + 1))
    curves = [Curve("smoothed loss", steps, test.smoothed[: end + 1], "•", "cyan")]
    marks = [("steepest", test.steepest, "▼", "green"), ("lowest", test.lowest, "■", "yellow"),
             ("your lr", result.lr, "◆", "magenta")]
    for name, rate, glyph, style in marks:
        k = position(test.rates[: end + 1], rate) if rate is not None else None
        if k is not None:
            curves.append(Curve(f"{name} {rate:.2g}", [round(k)], [test.smoothed[min(len(steps) - 1, round(k))]],
                                glyph, style))
    width = min(console.width, 80)
    first, last = distinct(test.rates[0], test.rates[end])
    console.print(chart(curves, width, 10, x_labels=(f"lr {first}", last)))
    if end < len(test.smoothed) - 1:  # the points cut off were left out without a word: the axis stopped short of
        # the rates the first line names
        cut = len(test.smoothed) - 1 - end
        note(console, f"drawn to {test.rates[end]:.2g}: past it the loss climbs back above where it started "
                      f"({count(cut, 'more step')}, to {test.rates[-1]:.2g}, left out so that the rise does not squash "
                      "the rest)")
    parts = []
    if test.steepest is not None:
        parts.append(f"falls fastest at {test.steepest:.2g}")
    parts.append(f"{'' if parts else 'is '}lowest{' so far' if still_falling(test) else ''} at {test.lowest:.2g} "
                 f"({test.lowest_loss:.3f})")
    if stopped_at(test) is not None:
        parts.append(f"stopped after {len(test.rates)} of {count(test.steps, 'step')}, at {stopped_at(test):.2g}")
    if test.blown_at is not None:
        # the test stops at a loss BLOWN times its lowest, or at one not finite (that step undone: not in the losses)
        from ..core.lrfind import BLOWN  # here: the shell draws without importing torch until a result needs it

        finite = all(map(math.isfinite, test.losses))
        # raw losses, not the smoothed curve the chart draws and "lowest at" reads: said so
        how = ("one batch's loss four times the lowest batch's" if finite and test.losses
               and test.losses[-1] > BLOWN * min(test.losses) else "the loss no longer finite")
        parts.append(f"blew up at {test.blown_at:.2g} ({how}), after {count(len(test.rates), 'step')}")
    say(console, "the smoothed loss " + "; ".join(parts))
    said = where(result)
    if result.nothing_to_learn and not (test.blown_at is not None and result.lr >= test.blown_at):
        # the lowest of a loss that cannot fall under ln V is where the noise of one batch a step dipped
        said = (f"these tokens are random: no rate takes the loss under ln({result.vocab_size:,}) = "
                f"{math.log(result.vocab_size):.3f}, a uniform guess, so where it falls fastest and is lowest is "
                f"the noise of one batch a step, not a rate to train at; the test reads a rate on data with "
                f"something to learn")
    say(console, said, "yellow" if test.blown_at is not None and result.lr >= test.blown_at else "")
    # an example of its own only where the line above gave none (it names the rates worth comparing when it does)
    # toward where the test points: a rate under the steepest fall is compared with 3x it (the example tried only a
    # third of it, the other way), unless 3x reaches where the loss blew up
    up = (test.steepest is not None and result.lr < test.steepest
          and (test.blown_at is None or 3 * result.lr < test.blown_at))
    blown = test.blown_at is not None and result.lr >= test.blown_at  # your rate against the one the line above
    # offers (a third of it was still past the lowest point: two bad rates compared)
    other = test.lowest / 3 if blown else result.lr * 3 if up else result.lr / 3
    example = "" if cmd("compare") in said else \
        f" ({cmd('compare', f'lr={_round(result.lr):g}', f'lr={_round(other):g}')})"
    note(console, f"read the points to a factor of about 3: the loss is one batch a step, and another seed moves "
                  f"them ({cmd('lrfind', **again(test, seed=_next_seed(result.seed)))}); {cmd('compare')} trains whole "
                  f"runs side by side{example}")
