"""`:context`: the validation loss at each position of the window (core.context): how much of its context the
model uses.

The renderer draws the loss against the position (on a log scale: the curve changes fastest at the
start) beside a counting model's on the same windows, lists a few positions (what each reads, the
model's loss and the counter's), and says what the curve shows: the model against a bigram where
both read one token, where half of what context gives is had, from where the model beats a table of
counts, and whether the window's far half still pays. `length=` reads windows past the one the model
trained on, through a copy whose positions are worked out further, and says what that costs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ..core.errors import UserError
from ..core.words import count
from ..registry import Param
from ..render.chart import Curve, chart
from ..render import fmt
from ..render.fmt import signed
from ..render.heatmap import plain
from ..render.renderers import render
from ..render.tables import fitting_table
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again, named
from .base import ablation_note, command, data_named, switched_off
from .counting import NGRAM_DEFAULT, check_counter, default_counter
from .train import PlotSeries

if TYPE_CHECKING:  # torch-bound; schema.py resolves the name for --json
    from ..core.context import PositionLosses

FAMILY = "training"  # listed under :train's heading, beside :ngram: what the loss is made of, position by position

NOISE = 2.0  # core.context.NOISE, known here without torch (a test keeps them equal): under this many standard
# errors a difference is read as none
WINDOW_TOKENS = 2**16  # the default number of windows scores about this many positions (512 windows of 128)
WINDOWS_FEWEST, WINDOWS_MOST = 16, 100_000
EVERY_POSITION_UP_TO = 16  # the table shows every position of a window this short (a task's), else a log spread
LONGER_AT_MOST = 8  # length= reads at most this many times the window the model trained on
LENGTH_LIMIT = 1_000_000  # a typing limit; the real one is LONGER_AT_MOST x max_seq_len, said in words


@dataclass
class ContextRow:
    position: int  # i: the row's position in the window (0-based)
    loss: float  # the model's mean -ln p of the next token there (nan: not counted there)
    error: float  # its standard error over the windows
    counter_order: int | None  # the order the counter reads at with the window's tokens up to i: min(i + 2, n)
    counter_loss: float | None  # the counter's loss at i on the same windows


@dataclass
class ContextResult:
    # the session's data as results name it: a task with its size (sort:4), random tokens by spec, else its name
    data: str
    unit: str  # what one token is: character, token
    vocab_size: int  # V: tokens in the vocabulary (chance is ln V)
    chance: float  # ln V: the loss of a uniform guess
    seed: int  # the windows' seed
    # the loss at every position over the windows scored, and the counter's beside it (core.context)
    curve: PositionLosses
    rows: list[ContextRow]  # positions 0, 1, 2, 3, 7, 15, ... and the last (every one up to 16), where counted
    model_step: int  # the model's training step
    untrained: bool = False  # no training here nor weights from elsewhere: the curve is flat near ln V
    causal: bool = True  # False: each position reads the token it predicts, the loss is no language model's
    nothing_to_learn: bool = False  # random tokens: no position has anything to read
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    max_seq_len: int = 0  # the model's window setting: windows longer than it are length='s (0: the curve's)


def read_order(curve) -> int:
    """The order the counter reads at the window's last position, as the table's rows do (min(i + 2, n)): a window
    of one reads a bigram however high the counter's order (a 6-gram was named beside a table of bigrams)."""
    return min(curve.counter_order, curve.positions + 1)


def counter_label(curve) -> str:
    """The counter's curve as its legend names it: the order grows with the position, from a bigram at position 0 to
    the counter's own at the window's end (the legend said "6-gram counter" over a table of bigrams to 5-grams)."""
    n = read_order(curve)
    return f"{gram(n)} counter" if n <= 2 else f"counter (bigram to {gram(n)})"


def default_windows(max_seq_len: int) -> int:
    return max(WINDOWS_FEWEST, min(WINDOWS_MOST, WINDOW_TOKENS // max_seq_len))


@command("context", "The val loss at each position of the window: how much the model gains from reading further "
                    "back, beside a counting model on the same windows.",
         params=[
    Param("windows", int, low=WINDOWS_FEWEST, limit=WINDOWS_MOST,
          help=f"validation windows scored (default: about {WINDOW_TOKENS:,} positions' worth, {WINDOW_TOKENS:,} / "
               f"max_seq_len windows: {default_windows(64):,} of 64, {default_windows(32):,} of 32)"),
    Param("counter", int, low=0,
          help=f"the counting model scored beside it: the next token from the counter - 1 before it (0: none; "
               f"default {NGRAM_DEFAULT}, or the longest the vocabulary allows, as :ngram's n)"),
    Param("seed", int, default=0, low=0, limit=2**63 - 1, help="the windows' seed"),
    Param("length", int, low=1, limit=LENGTH_LIMIT,
          help=f"windows this long, past the model's max_seq_len: a copy of the model with its positions worked out "
               f"further (rope, sinusoidal or none; at most {LONGER_AT_MOST}x max_seq_len) reads them (default: "
               f"max_seq_len)"),
], interruptible=True, aliases=("positions",), json_version=3,
         guide="inside-views.md#how-much-of-its-context-the-model-uses-context")  # fmt: skip
def cmd_context(session: Session, args: dict, reporter: Reporter) -> ContextResult:
    from ..core.context import position_losses

    model, data = session.model, session.data
    T = session.model_config.max_seq_len
    data.check_fits(T)  # data too short for one window is refused before anything runs
    length = T if args["length"] is None else args["length"]
    if length != T:
        longer_than(session, length)
    windows = default_windows(length) if args["windows"] is None else args["windows"]
    counter = default_counter(data.tokenizer.vocab_size) if args["counter"] is None else args["counter"]
    check_counter(counter, data.tokenizer.vocab_size)

    def progress(done: int, total: int) -> None:
        reporter.on_progress("context", done, total)

    if length != T:  # a copy that reads further, with the same weights and the same parts switched off
        from ..core.context import longer_copy

        model = longer_copy(model, length, session.ablations)
    # the window the model trained at, which `:set max_seq_len` may have widened since (the weights kept)
    trained = session.trainer.trained_window or T
    curve = position_losses(model, data, session.trainer.device, windows, seed=args["seed"],
                            counter=counter or None, on_progress=progress, trained=trained,
                            fast=session.train_config.fast_path)
    rows = [ContextRow(i, curve.losses[i], curve.errors[i],
                       None if curve.counter is None else min(i + 2, curve.counter_order),
                       None if curve.counter is None else curve.counter[i])
            for i in shown_positions(curve.positions, curve.trained) if not math.isnan(curve.losses[i])]
    return ContextResult(data_named(session), data.tokenizer.unit, data.tokenizer.vocab_size,
                         math.log(data.tokenizer.vocab_size), args["seed"], curve, rows, session.trainer.step,
                         untrained=session.untrained, causal=getattr(model, "causal", True),
                         nothing_to_learn=getattr(data, "nothing_to_learn", False), ablations=switched_off(session),
                         max_seq_len=T)


def longer_than(session: Session, length: int) -> None:
    """length= checked before anything runs: past max_seq_len, on a text long enough, within LONGER_AT_MOST."""
    T, data = session.model_config.max_seq_len, session.data
    splits = getattr(data, "splits", None)
    if splits is None:  # first: on a task no length is one, so a bound on it would be no fix
        raise UserError(f"length= reads longer windows of a text; {data.name} makes windows of its own length")
    if length < T:
        raise UserError(f"length is for windows past max_seq_len={T}, got {length}; a shorter window is this one's "
                        f"first positions, which {cmd('context')} shows")
    if length > LONGER_AT_MOST * T:
        raise UserError(f"length={length} is more than {LONGER_AT_MOST}x max_seq_len={T}; use at most "
                        f"{LONGER_AT_MOST * T}")
    data.check_fits(length)


def shown_positions(T: int, trained: int | None = None) -> list[int]:
    """0, 1, 2, 3, then one short of each power of two (7, 15, 31, ...), the last position, and the last of the
    window the model trained on (`trained`, where the windows run past it); every position of a window of at most
    EVERY_POSITION_UP_TO (a task's: the answer's positions are its last few)."""
    if T <= EVERY_POSITION_UP_TO:
        return list(range(T))
    shown = [i for i in (0, 1, 2, 3) if i < T]
    k = 8
    while k - 1 < T - 1:
        shown.append(k - 1)
        k *= 2
    return sorted(set(shown + [T - 1] + ([trained - 1] if trained else [])))


def log_axis(T: int) -> list[int]:
    """Where positions 0 .. T - 1 lie on a chart's x axis: a log scale (most of the change is in the first ones),
    in whole numbers as the charts take them."""
    return [round(1000 * math.log2(i + 1)) for i in range(T)]


def position_series(curve: PositionLosses) -> list[PlotSeries]:
    """The model's curve and the counter's on the log scale, as :report's chart draws them."""
    at = log_axis(curve.positions)
    series = [PlotSeries("model", at, curve.losses)]
    if curve.counter is not None:
        series.append(PlotSeries(counter_label(curve), at, curve.counter))
    return series


def reads(n: int, unit: str) -> str:
    """What an n-gram counter reads before the token it predicts: "5 characters", or "no character" (a unigram)."""
    return count(n - 1, unit) if n > 1 else f"no {unit}"


def gram(n: int) -> str:
    return {1: "unigram", 2: "bigram", 3: "trigram"}.get(n, f"{n}-gram")


@render.register(ContextResult)
def render_context(result: ContextResult, console: Console) -> None:
    curve, unit = result.curve, result.unit
    T = curve.positions
    reads = (f"position i reads the i + 1 {unit}s up to it and nothing before the window" if result.causal
             else f"with no causal mask every position reads the whole window, and every one but the last the "
                  f"{unit} it predicts too (the last one's lies past the window)")
    say(console, f"the val loss at each position of the window on {result.data}: {count(curve.windows, 'window')} "
                 f"of {count(T, unit)} ({'all the validation text has' if curve.every else f'seed {result.seed}'}); "
                 f"{reads}", "bold")
    if past(curve):
        say(console, f"the model trained on windows of {curve.trained}: positions {curve.trained}-{T - 1} lie past "
                     f"it, read with the same weights and their positions worked out further"
                     + ("" if plain(console) else " (in yellow)"),  # NO_COLOR, a pipe: no yellow to point at
            "yellow")
    at = log_axis(T)
    curves = [Curve("model", at, curve.losses, "•", "cyan")]
    if curve.counter is not None:  # drawn first, so that the model's points lie on top where the two meet
        curves.insert(0, Curve(counter_label(curve), at, curve.counter, "·", "yellow"))
    console.print(chart(curves, min(console.width, 80), 10, baseline=result.chance,
                        baseline_label=f"ln V = {result.chance:.2f}", unit="nats",
                        x_labels=(f"position {curve.first_counted} (log scale)", f"{T - 1:,}")))
    names = ["position", "reads", "model", "±", "counter", "its loss", "model - it"]
    rows = []
    for row in result.rows:
        counter = row.counter_loss is not None and not math.isnan(row.counter_loss)
        known = not math.isnan(row.loss)
        rows.append([Text(f"{row.position:,}", style="yellow" if row.position >= curve.trained else ""),
                     # with no mask every position reads the whole window, the one it predicts included
                     count(row.position + 1 if result.causal else T, unit), f"{row.loss:.3f}" if known else "-",
                     f"{row.error:.3f}" if known and not math.isnan(row.error) else "-",
                     gram(row.counter_order) if row.counter_order is not None else "-",
                     f"{row.counter_loss:.3f}" if counter else "-",
                     # the difference of the two numbers as the row writes them (3 decimals), not of their 4th ones
                     Text(fmt.change(row.counter_loss, row.loss, lambda d: f"{d:.3f}", digits=3),
                          style="green" if row.loss < row.counter_loss else "")
                     if counter and known else "-"])
    if curve.counter is None:
        names, rows = names[:4], [r[:4] for r in rows]
    console.print(fitting_table(console, names, rows, left=("reads",), optional=("±", "counter", "reads")))
    for line in readings(result):
        say(console, line)
    where = "every position" if not past(curve) else f"positions 0-{curve.trained - 1}"
    say(console, f"mean over {where}: {curve.mean:.3f} nats, the val loss (as {named('train')} reports it, there "
                 "measured on other windows)")  # named, no line to run: `minitf --load K train` trains 600 steps
    notes(result, console)


def past(curve: PositionLosses) -> bool:
    """The windows run past the one the model trained on (length=, or max_seq_len raised since it trained)."""
    return curve.positions > curve.trained


def readings(result: ContextResult) -> list[str]:
    """What the curve says, a sentence each: of the positions the model trained on, then of those past them."""
    curve, unit = result.curve, result.unit
    T, lines = curve.trained, []
    if result.untrained:  # flat near ln V: its wiggles are the random weights', nothing learned to read
        return lines
    first = curve.losses[0]
    if curve.counter is not None and not math.isnan(first) and result.causal:  # unmasked, position 0 reads them all
        # counter=1 reads nothing: it was called "the bigram counter" beside a table and a legend of unigrams
        counter, counts = (("as the bigram counter does", f"what counting which {unit} follows which gets from the "
                            "same one") if read_order(curve) >= 2 else
                           ("the unigram counter none", f"how often each {unit} comes, whatever comes before it"))
        spread = "" if math.isnan(curve.errors[0]) else f" ± {curve.errors[0]:.3f}"  # one window: no spread, no "± nan"
        lines.append(f"position 0 reads one {unit}, {counter}: the model scores {first:.3f}{spread} "
                     f"there, the counter {curve.counter[0]:.3f} ({counts})")
    late = curve.late
    if not result.causal:
        # Every position reads the whole window: a position's loss says nothing of reading further back, and a model
        # that reads the token it predicts beats any counter for that reason alone. notes() says what the loss is.
        lines.append(f"with no causal mask every position reads the same {count(curve.positions, unit)}: the curve "
                     f"does not show what reading further back gives, and a counter, which reads only the past, is no "
                     f"yardstick for it")
        return lines
    if curve.positions == 1:  # max_seq_len=1: position 0 is the last quarter too, and there is no "more" to read
        lines.append(f"a window of one position: each prediction reads a single {unit}, so nothing here can show "
                     f"what reading more would give; max_seq_len=2 or more lets it read further")
    elif curve.half_at is not None:
        lines.append(f"half of the fall from position 0 ({first:.3f}) to the last quarter ({late:.3f}) is done by "
                     f"position {curve.half_at}: half of what the window gives comes from the nearest "
                     f"{count(curve.half_at + 1, unit)}")
    elif not math.isnan(first) and not math.isnan(late):
        # a loss that rose, or one window's (no noise measured), was said not to fall "by more than the noise"
        how = ("rises from" if late > first else "does not fall from" if math.isnan(curve.errors[0]) else
               "does not fall by more than the noise from")
        lines.append(f"the loss {how} position 0 ({first:.3f}) to the last quarter ({late:.3f}): reading more "
                     f"{unit}s gains this model nothing")
    if curve.counter is not None:
        n = read_order(curve)
        if result.nothing_to_learn:  # neither can read anything: a counter under the model would have memorised
            lines.append(f"against the {gram(n)} counter, which reads {reads(n, unit)}: random tokens hold "
                         f"nothing for either to read, so neither can beat ln V, and where the counter scores above "
                         f"it, it has counted noise")
        elif curve.below_counter_from is not None:
            end = "the end" if not past(curve) else f"the end of its window ({T - 1})"
            said = (f"from position {curve.below_counter_from} to {end} the model stays under the {gram(n)} "
                    f"counter, which reads {reads(n, unit)}")
            if curve.below_counter_from < n - 1:
                # position p reads p + 1 tokens: up to n - 2 the counter reads all the model does (sort:1's position
                # 1 reads '1=', the trigram's two), so the gap there is no reach: a held-out question the table never
                # counted, which the model answers from what it learned of the others
                task = not all(curve.counted)  # a task's loss counts answers alone
                beyond = (f"; from position {n - 1} on, what the model reads and a table of counts cannot use"
                          if n - 1 < T else "")
                lines.append(f"{said}; up to position {n - 2} both read the same {unit}s, so the gap there is not "
                             f"reading further back but what the model makes of them where the table has few or no "
                             f"counts{' (a held-out question: none)' if task else ''}{beyond}")
            else:
                lines.append(f"{said}: what the model reads and a table of counts cannot use")
        else:  # past its window, of the positions it trained on: the rows after them may well be under the counter
            ends = "ends" if not past(curve) else f"ends the window it trained on (position {T - 1})"
            lines.append(f"the model {ends} above the {gram(n)} counter, which reads {reads(n, unit)} (each curve "
                         "smoothed over the positions near the end: a row alone may lie either side): it does not "
                         "yet use its window better than a table of counts")
    if curve.far_gain is not None:
        lines.append(compared("the far context", f"{3 * T // 4}-{T - 1}", f"{T // 4}-{T // 2 - 1}", -curve.far_gain,
                              curve.far_error,
                              flat=f"no gain beyond the noise: what lies more than {T // 2} {unit}s back adds "
                                   f"nothing this model uses",
                              under=f"the model still gains from reading more than {T // 2} {unit}s back",
                              above=f"reading more made this model worse there "
                                    f"({cmd('context', **asked(result, seed=result.seed + 1))} scores other "
                                    "windows)"))
    if curve.past_gain is not None:
        lines.append(compared("past its window", f"{T}-{curve.positions - 1}", f"{3 * T // 4}-{T - 1}",
                              curve.past_gain, curve.past_error,
                              flat="no change beyond the noise: it reads past the window as well as within it",
                              under="reading further still helps it",
                              above=f"what it learned does not carry past the {T} positions it trained on"))
    return lines


def spans(positions: list[int]) -> str:
    """Positions as runs: [0, 1, 2, 3, 9] -> "0-3, 9"."""
    runs: list[list[int]] = []
    for i in positions:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def compared(what: str, these: str, those: str, change: float, error: float, flat: str, under: str,
             above: str) -> str:
    """One reading of two stretches of positions: `change`, these positions' mean loss minus those's (per window,
    averaged), said against its standard error `error`, with what it means when flat, under or above."""
    if abs(change) < NOISE * error:
        return f"{what}: positions {these} score {signed(change)} ± {error:.3f} nats against positions {those}, {flat}"
    side, meaning = ("under", under) if change < 0 else ("above", above)
    return f"{what}: positions {these} score {abs(change):.3f} ± {error:.3f} nats {side} positions {those}: {meaning}"


def asked(result: ContextResult, **changes) -> dict:
    """The options of this run where not the defaults, with `changes`: a hint's :context scores what this one did
    but for them (one that dropped counter=3 seed=5 scored other windows, beside the 6-gram)."""
    curve = result.curve
    options = {"windows": curve.windows if curve.windows != default_windows(curve.positions) else None,
               "counter": 0 if curve.counter is None else
               curve.counter_order if curve.counter_order != NGRAM_DEFAULT else None,
               "seed": result.seed or None,  # a window past the setting's is length='s; past the trained one alone
               "length": curve.positions if curve.positions > (result.max_seq_len or curve.positions) else None}
    options.update(changes)  # in the order :context lists its options, a changed one where it stands
    return {key: value for key, value in options.items() if value is not None}


def notes(result: ContextResult, console: Console) -> None:
    if not result.causal:
        # causal is on where :ablate mask took the mask away: the setting would change nothing there
        back = (f"the mask is switched off by {cmd('ablate', 'mask')}: {cmd('ablate', 'off')} puts it back"
                if "the causal mask" in result.ablations else cmd("set", causal="on"))
        # "near 0" only where it is: a model barely trained without the mask still scored about ln V here. The last
        # position's next token lies past the window, so it cannot copy it: its loss stays a language model's
        seen = [x for x in result.curve.losses[:-1] if math.isfinite(x)]
        mean = sum(seen) / len(seen) if seen else result.curve.mean
        last = result.curve.losses[-1] if result.curve.losses else math.nan
        low = (f"near 0 ({mean:.3f} nats)" if mean < 0.25 * result.chance else
               f"no language model's: it falls toward 0 as the model learns to copy ({mean:.3f} nats here)")
        end = f" ({last:.3f} nats)" if math.isfinite(last) else ""
        note(console, f"this model has no causal mask: each position but the last reads the token it predicts, so "
                      f"its loss is {low}; the last one's next token lies past the window{end}; {back}")
    if result.nothing_to_learn:
        note(console, "random tokens: no position has anything to read, so every position scores about ln V; "
                      f"{cmd('data', 'repeat')} is random tokens each followed by itself: the loss falls where a "
                      f"copy can be read")
    elif result.untrained:
        note(console, f"this model has not trained yet: every position scores about ln V; "
                      f"{look_again('context', AUTOSAVE_NAME)}")
    ablation_note(console, result.ablations)
    curve = result.curve
    if not all(curve.counted):
        scored = [i for i, n in enumerate(curve.counted) if n]
        unscored = [i for i, n in enumerate(curve.counted) if not n]
        one, alone = len(unscored) == 1, len(scored) == 1  # "positions 0 predict" of one position
        note(console, f"position{'' if one else 's'} {spans(unscored)} predict{'s' if one else ''} no counted token: "
                      f"a task's loss counts the answer only (the question is given), so "
                      f"position{'' if alone else 's'} {spans(scored)} {'is the one' if alone else 'are the ones'} "
                      "scored")
    if curve.counter is not None:
        reads_up_to = (f"reads the window's {result.unit}s up to it, at most "
                       f"{count(read_order(curve) - 1, result.unit)}" if read_order(curve) >= 2 else
                       f"reads none of the window's {result.unit}s: it scores how often each comes")
        note(console, f"the counter is {named('ngram')}'s, counted on the training text; at each position it "
                      f"{reads_up_to}")
    if (not result.untrained and result.causal and curve.far_gain is not None
            and curve.far_gain > NOISE * curve.far_error):
        note(console, f"the window's far end still gains: {cmd('set', max_seq_len=2 * curve.trained)}, "
                      f"{cmd('train')} and {cmd('context')} again show whether a longer window pays")
    # The ± shrinks as 1/sqrt(windows); a hint past the most windows= takes would be refused when typed
    if curve.every:  # more windows= would score the same ones again: "halves it" of a ± that could not move
        fewer = (f"these are every window of the validation text, each scored once: more windows= cannot narrow it"
                 + ("; with one window there is no ± at all" if curve.windows < 2 else ""))
    elif 4 * curve.windows <= WINDOWS_MOST:
        fewer = f"{cmd('context', **asked(result, windows=4 * curve.windows))} halves it"
    elif curve.windows < WINDOWS_MOST:
        fewer = (f"{cmd('context', **asked(result, windows=WINDOWS_MOST))} narrows it to "
                 f"{math.sqrt(curve.windows / WINDOWS_MOST):.2f} of this")
    else:
        fewer = f"{WINDOWS_MOST:,} windows are the most {cmd('context')} scores"
    note(console, f"each position's ± is the standard error over the windows; {fewer}")
