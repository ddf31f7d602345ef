"""The loss at each position of the window: how much of its context the model uses.

Training averages the next-token loss over every position of a window of T tokens. Split by
position, the same losses say what the average hides. Position i reads tokens 0..i of its window
and nothing before it, so position 0 predicts from one token, position 1 from two, and so on:

    L_i = mean over windows w of -ln p(x_w,i+1 | x_w,0 .. x_w,i)            i = 0 .. T - 1

Where L_i falls as i grows, reading further back helps; where it lies flat, what lies further back
adds nothing the model can use. The mean of L_i over every position is the validation loss
`:train` reports (there on other windows).

A counting model of order n (core.ngram) predicts the next token from the n - 1 before it. Scored
on the same windows, at the window's first positions it reads what the model reads (position i:
i + 1 tokens, the counter of order i + 2, as the counter backs off where the window holds fewer),
and from position n - 2 on its n - 1 tokens only. So position 0 sets the model against a bigram on
exactly the same token, and the first position from which the model stays under the counter is
where it reads more than the counter's n - 1 tokens to some use.

Three numbers are read off the curve:
- where the loss has fallen half of the way from position 0 to the last quarter's level;
- the first position from which the model stays below the counter to the window's end;
- the far context's worth: the mean loss over the window's second quarter minus that over its last,
  per window, so that what each window is about cancels (Olsson et al. 2022 read a model's
  in-context learning as such a difference, the loss at a late token minus an early one).

Per-position means are noisy (one token each per window), so the readings use the curve smoothed
over neighbouring positions, a span growing with the position (the curve changes fastest at the
start): position i averages positions i - i // 8 .. i + i // 8.

Past the window: a model whose positions are computed (RoPE's rotation, the sine table, or none)
can read a window longer than any it trained on. `longer_copy` makes such a reader with the same
weights, and a fourth number compares the positions past the trained window with its last quarter,
window by window: how much of what it learned carries past the distances it was trained on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from .errors import UserError
from .fastpath import FastPath, listened
from .ngram import longest_order, train_counter
from .probe import evaluating

NOISE = 2.0  # a difference under this many standard errors is read as none
LOGITS_PER_PASS = 2**25  # windows x T x V logits a forward pass holds at most (128 MiB of float32)
SCORES_PER_PASS = 2**25  # windows x heads x T x T attention scores a layer holds at most (a long window's)
# On a CPU, positions a pass scores at most: one pass of the default :context's 1,024 windows of 64 took 2.9 s of CPU
# time (fast path, one thread) against 1.7 s in passes of 4,096 positions, whose activations stay in the caches (a
# 256 x 256-position model with V = 1,024: 8.9 s against 6.6 s). A GPU takes the largest pass memory allows.
CPU_POSITIONS_PER_PASS = 4096


@dataclass
class PositionLosses:
    windows: int  # windows scored
    positions: int  # T: the window's length
    losses: list[float]  # L_i; not a number (null in JSON) where no window counts position i (a task's question)
    errors: list[float]  # the standard error of each L_i over the windows
    counted: list[int]  # how many windows count position i
    smoothed: list[float]  # L_i averaged over positions i - i // 8 .. i + i // 8
    late: float  # the smoothed curve's mean over the window's last quarter
    mean: float  # the mean loss over every counted position of every window, of the trained window's positions
    counter_order: int | None  # n of the counter scored on the same windows (None: none asked)
    counter: list[float] | None  # its loss at each position, where the model's is counted
    counter_smoothed: list[float] | None  # the counter's loss smoothed as `smoothed` is (None: no counter)
    # the first position whose smoothed loss is half of the way from L_0 to the last quarter's (None: no fall past
    # the noise)
    half_at: int | None
    below_counter_from: int | None  # the first position from which the smoothed model stays under the counter
    far_gain: float | None  # per window: the second quarter's mean loss minus the last quarter's, averaged
    far_error: float | None  # its standard error over the windows
    trained: int = 0  # the window the model trained on: the readings above are of positions 0 .. trained - 1
    # windows longer than it (a copy of the model reading further, `longer_copy`): per window, the mean loss past the
    # trained window minus that over its last quarter, averaged (> 0: worse past it), and its standard error
    past_gain: float | None = None
    past_error: float | None = None  # past_gain's standard error over the windows (None where past_gain is)
    every: bool = False  # the windows are every one of the validation text, each once (there are no more to score)

    @property
    def first_counted(self) -> int:
        """The first position a window counts: 0 on a text; on a task, the one predicting the answer's first token."""
        return first_counted(self.losses)


def position_losses(model, data, device, windows: int, seed: int = 0, counter: int | None = None,
                    on_progress: Callable[[int, int], None] | None = None,
                    trained: int | None = None, fast: bool = True) -> PositionLosses:
    """L_i over `windows` validation windows of the model's length (drawn from generator seed `seed`), and the
    counter of order `counter` (on `data`'s training text, as :ngram counts it) on the same windows.
    `on_progress(done, windows)` after each forward pass. `trained`: the window the model trained on, where
    `model` is a longer copy (default: its own length); the curve's readings are of the trained positions, and
    the positions past them are read against its last quarter. `fast`: score through the fast path where it can
    run the model (the `fast_path` setting; off: the readable forward)."""
    generator = torch.Generator().manual_seed(seed)
    window_count = getattr(data, "window_count", None)  # a text's: a task's and random's windows are drawn anew
    every = window_count is not None and window_count("val", model.config.max_seq_len) <= windows
    if every:  # each once: drawn at random, a short split's few windows came again and again, and a ± over 2,048
        x, y = data.every_window("val", model.config.max_seq_len)  # copies of its one window read 0.000
        windows = len(x)
    else:
        x, y = data.get_batch("val", windows, model.config.max_seq_len, generator)  # y = -1 where nothing counts
    T = x.shape[1]  # a task's window is its question and answer, maybe shorter than max_seq_len
    counted = y >= 0
    nll = torch.where(counted, _score(model, x, y, device, on_progress, fast).double(), torch.nan)
    losses, errors, numbers = _column_stats(nll, counted)
    counter_losses = counter_smoothed = None
    if counter is not None:
        counter = min(counter, longest_order(data.tokenizer.vocab_size))
        counter_nll = torch.where(counted, _counter_nll(data, x, y, counter, seed), torch.nan)
        counter_losses = _column_stats(counter_nll, counted)[0]
    W = T if trained is None else min(trained, T)  # the readings are of the positions the model trained on
    # smoothed within the trained window apart from past it: the readings of its last positions averaged in positions
    # past it (W = 64: position 63 read 56 to 70), which a longer copy reads worse
    smoothed = within_and_past(losses, W)
    if counter_losses is not None:
        counter_smoothed = within_and_past(counter_losses, W)
    gain, error = far_gain(nll[:, :W])
    past, past_error = past_gain(nll, W) if W < T else (None, None)
    return PositionLosses(
        windows=windows, every=every, positions=T, losses=losses, errors=errors, counted=numbers, smoothed=smoothed,
        late=late_level(smoothed[:W]), mean=float(nll[:, :W].nanmean()),
        counter_order=counter, counter=counter_losses, counter_smoothed=counter_smoothed,
        half_at=half_way(losses[:W], smoothed[:W], errors), trained=W,
        below_counter_from=stays_below(smoothed[:W], counter_smoothed[:W] if counter_smoothed else None),
        far_gain=gain, far_error=error, past_gain=past, past_error=past_error)


def _score(model, x: torch.Tensor, y: torch.Tensor, device, on_progress=None, fast: bool = True) -> torch.Tensor:
    """-ln p of each next token, (W, T) float32 on the CPU, in passes small enough for a long window or a large
    vocabulary; the model in eval mode meanwhile (dropout off), as it was after.

    Through the fast path (core.fastpath: the same function, as evaluation scores it) unless something listens to
    the model (an ablation's hooks) or `fast` is off (the `fast_path` setting): the readable forward spells out
    every head's T x T scores and took 1.5x the fast path's time on the default :context."""
    W, T = x.shape
    config = model.config
    chunk = max(1, min(LOGITS_PER_PASS // (T * config.vocab_size), SCORES_PER_PASS // (T * T * config.n_heads)))
    if torch.device(device).type == "cpu":
        chunk = min(chunk, max(1, CPU_POSITIONS_PER_PASS // T))
    scorer = FastPath(model) if fast and FastPath.supports(model) and not listened(model) else model
    with evaluating(model):
        parts = []
        with torch.no_grad():
            for k in range(0, W, chunk):
                parts.append(_nll(scorer, x[k : k + chunk].to(device), y[k : k + chunk].to(device)))
                if on_progress is not None:
                    on_progress(min(k + chunk, W), W)
        return torch.cat(parts)


def _counter_nll(data, x: torch.Tensor, y: torch.Tensor, order: int, seed: int = 0) -> torch.Tensor:
    """-ln P of each next token under the counter of `order` on the training text, on the same windows, (W, T).

    Data made on the fly (random tokens, a repeat) draws the same tokens for "val" as for "train" from the same
    seed: the counter is counted on batches of seed `seed` + 1, never those of the windows (seed `seed`), which a
    counter counted on them would know by heart (a 6-gram's 0.22 nats on random tokens, under ln 50 = 3.91). A task
    holds its validation questions out of training whatever the seed: its counter is :ngram's own, of seed 0 (seed + 1
    counted other training questions, and its losses differed from :ngram's for the same order)."""
    own = 0 if hasattr(data, "is_val") else seed + 1
    table = train_counter(data, order, x.shape[1], seed=own)
    text = torch.cat([x, y[:, -1:]], dim=1)  # the window and the token after it (-1: not known, not counted)
    return -table.by_order(text, order)[-1][:, 1:].log()  # column j + 1: the token after position j


def _nll(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """-ln p of each next token, (B, T) float32 on the CPU (0 where y is -1)."""
    logits, _ = model(x)
    nll = F.cross_entropy(logits.float().transpose(1, 2), y.clamp(min=0), reduction="none")
    return nll.cpu()


def _column_stats(nll: torch.Tensor, counted: torch.Tensor) -> tuple[list[float], list[float], list[int]]:
    """Each column's mean over its counted rows, the mean's standard error, and how many rows count it."""
    n = counted.sum(0)
    values = torch.where(counted, nll, 0.0)
    mean = values.sum(0) / n
    var = torch.where(counted, (nll - mean) ** 2, 0.0).sum(0) / (n - 1).clamp(min=1)
    error = torch.where(n > 1, (var / n).sqrt(), torch.nan)
    mean = torch.where(n > 0, mean, torch.nan)
    return mean.tolist(), error.tolist(), n.tolist()


def within_and_past(values: list[float], trained: int) -> list[float]:
    """`values` smoothed within positions 0 .. trained - 1, and apart from them from `trained` on: neither side
    averages in the other (position 64 of a 64-window read positions 56 to 72, eight of them trained)."""
    return smooth(values[:trained]) + smooth(values, floor=trained)[trained:]


def smooth(values: list[float], floor: int = 0) -> list[float]:
    """values[i] averaged over positions i - i // 8 .. i + i // 8 (those not nan, and none before `floor`): a span
    that grows with i."""
    out = []
    for i in range(len(values)):
        span = [v for v in values[max(floor, i - i // 8) : i + i // 8 + 1] if not math.isnan(v)]
        out.append(sum(span) / len(span) if span else math.nan)
    return out


def _quarters(T: int) -> tuple[slice, slice]:
    return slice(T // 4, T // 2), slice(3 * T // 4, T)


def late_level(smoothed: list[float]) -> float:
    """The mean of the smoothed curve over the window's last quarter (nan where nothing there is counted)."""
    late = [v for v in smoothed[_quarters(len(smoothed))[1]] if not math.isnan(v)]
    return sum(late) / len(late) if late else math.nan


def half_way(losses: list[float], smoothed: list[float], errors: list[float]) -> int | None:
    """The first position whose smoothed loss is at or under half way from L_0 to the last quarter's level; None
    where position 0 is not counted or the curve does not fall by more than NOISE standard errors of L_0."""
    first, late = losses[0], late_level(smoothed)
    noise = 0.0 if math.isnan(errors[0]) else NOISE * errors[0]
    if math.isnan(first) or math.isnan(late) or not first - late > noise:
        return None
    level = (first + late) / 2
    return next((i for i, v in enumerate(smoothed) if v <= level), None)


def stays_below(model: list[float], counter: list[float] | None) -> int | None:
    """The first position from which the model's curve is under the counter's at every counted position to the end;
    None where the model is not under it at the last counted position."""
    if counter is None:
        return None
    start = None
    for i, (m, c) in enumerate(zip(model, counter)):
        if math.isnan(m) or math.isnan(c):
            continue
        if m < c:
            start = i if start is None else start
        else:
            start = None
    return start


def far_gain(nll: torch.Tensor) -> tuple[float | None, float | None]:
    """Per window, the mean loss over the second quarter minus that over the last; their mean and its standard
    error over the windows. None where a position of either quarter goes uncounted in some window (a task's
    question, a repeat's first copy: the two quarters would average different kinds of position), or for fewer
    than two windows."""
    middle, last = _quarters(nll.shape[1])
    a, b = nll[:, middle], nll[:, last]
    if a.numel() == 0 or b.numel() == 0 or a.isnan().any() or b.isnan().any() or nll.shape[0] < 2:
        return None, None
    gain = a.mean(1) - b.mean(1)
    return float(gain.mean()), float(gain.std() / math.sqrt(gain.numel()))


def past_gain(nll: torch.Tensor, trained: int) -> tuple[float | None, float | None]:
    """Per window, the mean loss over positions trained .. T - 1 minus that over the trained window's last quarter;
    their mean and its standard error over the windows (None where a position goes uncounted, or for fewer than
    two windows)."""
    last = nll[:, _quarters(trained)[1]]
    past = nll[:, trained:]
    if last.numel() == 0 or past.numel() == 0 or last.isnan().any() or past.isnan().any() or nll.shape[0] < 2:
        return None, None
    gain = past.mean(1) - last.mean(1)
    return float(gain.mean()), float(gain.std() / math.sqrt(gain.numel()))


def longer_copy(model, length: int, ablations=()):
    """A copy of `model` that reads windows of `length` tokens, for asking what happens past the window it trained
    on: the same weights and the same parts switched off (core.ablation), with its positions worked out to
    `length`, the rotation of q and k (rope) or the sine table (sinusoidal) computed as far, or none needed. A
    learned table has no row past max_seq_len: refused. The copy is in eval mode."""
    from .ablation import Ablations
    from .model import MiniTransformerLM
    from .variants import position_kind

    if position_kind(model.config).learned:
        raise UserError(f"a learned position table has rows for the {model.config.max_seq_len} positions it trained "
                        f"on only, so it cannot read a longer window; computed positions can (rope, sinusoidal or "
                        f"none): set one and train first", fix={"pos_encoding": "rope"})
    # its initial weights, overwritten at once, are drawn from a random state of its own: the session's stays where
    # it was (with dropout on, the next :train's masks depended on whether :context length= had been asked)
    with torch.random.fork_rng(devices=[]):
        longer = MiniTransformerLM(model.config.replace(max_seq_len=length))
    longer.load_state_dict(model.state_dict())
    longer.to(next(model.parameters()).device).eval()
    switched = Ablations(longer)
    for ablation in ablations:
        switched.add(ablation)
    return longer


def first_counted(losses: list[float]) -> int:
    """The first position with a loss (nan: no window counts it), 0 where there is none."""
    return next((i for i, v in enumerate(losses) if not math.isnan(v)), 0)


def position_bands(losses: list[float], most: int = 6) -> tuple[list[str], list[float]]:
    """The curve in at most `most` bands of positions doubling in width, the last taking the rest of the window
    (0 | 1 | 2-3 | 4-7 | 8-15 | 16-63 at T = 64): each band's label and its mean loss (nan where nothing in it is
    counted). The bands start at the first counted position: a task's question is not scored, so its bands are
    the answer's (6 | 7 | 8-9 | 10-11 for sort:6). What `:train watch=context` draws at each evaluation and
    `:plot what=context` charts by step."""
    T, first = len(losses), first_counted(losses)
    edges = sorted({min(T, first + edge) for edge in [0] + [2**k for k in range(most - 1)]} | {T})
    labels, means = [], []
    for lo, hi in zip(edges, edges[1:]):
        known = [v for v in losses[lo:hi] if not math.isnan(v)]
        labels.append(str(lo) if hi == lo + 1 else f"{lo}-{hi - 1}")
        means.append(sum(known) / len(known) if known else math.nan)
    return labels, means
