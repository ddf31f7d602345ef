"""Counting models: the next token from the n - 1 tokens before it, counted, never learned.

Before neural networks, a language model was a table of counts. An n-gram model reads the n - 1
tokens before a position (its context h) and predicts the next token w by how often w followed h in
the training text:

    P(w | h) = c(h, w) / c(h)

It has no parameters to train and no idea of similarity: a context it never saw tells it nothing,
and the longer the context, the more contexts it never saw. So every order leans on the one below
it, Witten-Bell interpolation, with no setting to tune:

    P_k(w | h) = (c(h, w) + T(h) P_{k-1}(w | h')) / (c(h) + T(h))

where h' is h without its oldest token, T(h) the number of distinct tokens seen after h (a context
followed by many different tokens is one whose counts say little), and P_0(w) = 1 / V, the uniform
guess. A context never seen (c(h) = 0) hands on P_{k-1} unchanged.

What this is for: the loss a counter reaches is a yardstick for the model's. A model that has only
learned the frequency of each token scores the unigram's loss (n = 1), one that reads the previous
token the bigram's (n = 2); a Transformer below every counter has learned something no table of its
size holds. And the counters' own train loss, falling towards 0 as n grows while their val loss
climbs again, is memorising against generalising, measured.

Keys: a window of k tokens t_1..t_k (t_k the newest) is the integer sum of t_i V^(k-i), so the
context of a window is key // V and its shorter window key mod V^(k-1). The counts are sorted
unique keys, looked up by binary search: torch only, whatever the vocabulary, as long as V^n fits
in an int64 (n <= 10 for 65 characters, 4 for GPT-2's 50,257 tokens).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .errors import UserError

INT64_MAX = 2**63 - 1


def longest_order(vocab_size: int) -> int:
    """The largest n whose windows of n tokens still fit an int64 key: V^n <= 2^63 - 1."""
    if vocab_size < 2:  # one symbol: every window's key is 0, so any order fits; data refuses this case
        return INT64_MAX.bit_length()
    n = 1
    while vocab_size ** (n + 1) <= INT64_MAX:
        n += 1
    return n


@dataclass
class OrderCounts:
    """The counts of one order k: every window of k tokens seen, and every context of k - 1 tokens."""

    keys: torch.Tensor  # (P,) int64, sorted: each distinct window (h, w)
    counts: torch.Tensor  # (P,) c(h, w)
    contexts: torch.Tensor  # (H,) int64, sorted: each distinct context h (key // V)
    context_counts: torch.Tensor  # (H,) c(h): how often h was followed by a token
    followers: torch.Tensor  # (H,) T(h): how many distinct tokens followed h


def lookup(keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """values[i] where keys[i] == query, else 0; keys sorted."""
    if keys.numel() == 0:
        return torch.zeros_like(query)
    at = torch.searchsorted(keys, query).clamp(max=keys.numel() - 1)
    return torch.where(keys[at] == query, values[at], torch.zeros_like(query))


def window_keys(tokens: torch.Tensor, vocab_size: int, n: int) -> Iterator[torch.Tensor]:
    """For k = 1..n in turn, the key of the window of k tokens ending at every column of `tokens` (B, L):
    key_k[:, j] = sum_i tokens[:, j - i] V^i for i < k. A window that starts before column 0, or holds a
    token of -1 (unknown), is -1. One order at a time: a long text holds one order's keys, not n."""
    tokens = tokens.long()
    known = tokens >= 0
    key = torch.zeros_like(tokens)
    ok = torch.ones_like(known)
    for k in range(1, n + 1):
        shift = k - 1  # the window's oldest token, k - 1 columns back
        older = torch.zeros_like(tokens)
        older_ok = torch.zeros_like(known)
        if shift < tokens.shape[1]:  # else no window of k fits the row: every one starts before column 0
            older[:, shift:] = tokens[:, : tokens.shape[1] - shift]
            older_ok[:, shift:] = known[:, : tokens.shape[1] - shift]
        key = key + older.clamp(min=0) * vocab_size**shift
        ok = ok & older_ok
        yield torch.where(ok, key, torch.full_like(key, -1))


class NgramModel:
    """Counts of every order up to n over a training stream, and the Witten-Bell probabilities they give."""

    def __init__(self, tokens: torch.Tensor, vocab_size: int, n: int):
        """tokens: (B, L) ids of the training text, one row per independent stretch (a corpus is one row);
        -1 marks a token not known (a window holding one is not counted)."""
        if n < 1:
            raise UserError(f"n must be at least 1 (the unigram), got {n}")
        longest = longest_order(vocab_size)
        if n > longest:
            raise UserError(f"a counter of order {n} is too long for a vocabulary of {vocab_size:,}: a window's key "
                            f"would not fit an int64; the longest is {longest}")
        self.vocab_size, self.n = vocab_size, n
        self.orders = [self._count(keys[keys >= 0]) for keys in window_keys(tokens, vocab_size, n)]

    def nbytes(self) -> int:
        """The memory its counts take."""
        return sum(t.nbytes for o in self.orders
                   for t in (o.keys, o.counts, o.contexts, o.context_counts, o.followers))

    def _count(self, keys: torch.Tensor) -> OrderCounts:
        keys, counts = torch.unique(keys, return_counts=True)  # sorted
        contexts, followers = torch.unique_consecutive(keys // self.vocab_size, return_counts=True)
        context_counts = torch.zeros_like(contexts).index_add_(
            0, torch.repeat_interleave(torch.arange(len(contexts)), followers), counts)
        return OrderCounts(keys, counts, contexts, context_counts, followers)

    def by_order(self, tokens: torch.Tensor, up_to: int | None = None) -> list[torch.Tensor]:
        """For order k = 1..up_to: P_k(tokens[:, j] | the k - 1 tokens before it) at every column j, (B, L) float64.

        The orders come out of one pass, each from the one below it. A column with fewer than k - 1 tokens
        before it keeps the highest order its window allows (column 0: the unigram), as the model's first
        positions read what they have."""
        up_to = self.n if up_to is None else up_to
        p = torch.full(tokens.shape, 1.0 / self.vocab_size, dtype=torch.float64)  # P_0: uniform
        out = []
        for counts, key in zip(self.orders, window_keys(tokens, self.vocab_size, up_to)):
            context = key // self.vocab_size
            c_hw = lookup(counts.keys, counts.counts, key).double()
            c_h = lookup(counts.contexts, counts.context_counts, context).double()
            t_h = lookup(counts.contexts, counts.followers, context).double()
            interpolated = (c_hw + t_h * p) / (c_h + t_h).clamp(min=1)
            p = torch.where((key >= 0) & (c_h > 0), interpolated, p)
            out.append(p)
        return out

    def probabilities(self, tokens: torch.Tensor, order: int | None = None) -> torch.Tensor:
        """P(tokens[:, j] | the order - 1 tokens before it) for the predicted columns j = 1..L-1, (B, L - 1)."""
        return self.by_order(tokens, order)[-1][:, 1:]

    def losses(self, tokens: torch.Tensor, counted: torch.Tensor | None = None,
               up_to: int | None = None) -> list[float]:
        """The mean -ln P of every order 1..up_to (default n) over the predicted columns 1..L-1 (where `counted`,
        (B, L - 1))."""
        out = []
        for p in self.by_order(tokens, up_to):
            nll = -p[:, 1:].log()
            nll = nll[counted] if counted is not None else nll
            out.append(float(nll.mean()) if nll.numel() else math.nan)
        return out

    def contexts_seen(self, tokens: torch.Tensor, order: int, counted: torch.Tensor | None = None) -> float:
        """The share of predicted positions with a whole context of order - 1 tokens whose context was seen in
        training; nan where none has one. A position nearer a window's start has no whole context to have seen (it
        backs off to a shorter one): counted as unseen, every context of random:2 counted read "val seen 94%"."""
        if order <= 1:
            return 1.0
        *_, key = window_keys(tokens, self.vocab_size, order)
        key = key[:, 1:]
        context = key // self.vocab_size
        counts = self.orders[order - 1]
        whole = key >= 0
        seen = whole & (lookup(counts.contexts, counts.context_counts, context) > 0)
        if counted is not None:
            seen, whole = seen[counted], whole[counted]
        return float(seen.sum() / whole.sum()) if whole.any() else math.nan

    def next_distribution(self, context: list[int], order: int | None = None) -> torch.Tensor:
        """P(w | the last order - 1 tokens of `context`) for every token w, (V,) float64, summing to 1."""
        order = self.n if order is None else order
        recent = context[max(0, len(context) - (order - 1)):] if order > 1 else []
        rows = torch.tensor(recent, dtype=torch.long).expand(self.vocab_size, len(recent))
        rows = torch.cat([rows, torch.arange(self.vocab_size)[:, None]], dim=1)  # (V, order): the context, then w
        return self.by_order(rows, order)[-1][:, -1]

    def sample(self, prompt: list[int], n_tokens: int, generator: torch.Generator,
               order: int | None = None) -> list[int]:
        """n_tokens drawn one at a time from P(w | the tokens before it), after `prompt`."""
        ids = list(prompt)
        for _ in range(n_tokens):
            p = self.next_distribution(ids, order)
            ids.append(int(torch.multinomial(p, 1, generator=generator)))
        return ids[len(prompt):]


# --- the counters a loss is measured against -----------------------------------------------------------
GENERATED_TOKENS = 2**18  # data made on the fly (a task, random tokens) is counted on this many tokens a split
COUNTED = 2**23  # a longer training text is counted on its first 8,388,608 tokens (about 2 s an order on 2 cores)
VAL_SCORED = 2**20  # a longer validation text is scored on its first 1,048,576 positions
TRAIN_SCORED = 2**18  # the counters' own train loss is read on at most this many training positions


def split_tokens(data, split: str, max_seq_len: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The text of one split as (B, L) ids, and which of its next-token positions (B, L - 1) the model's loss
    counts (None: all).

    A corpus is one row, its whole split (at most its first COUNTED tokens to count, VAL_SCORED + 1 to score:
    a text of 200 MiB would take minutes and gigabytes). Data made on the fly is batches drawn from a fixed
    seed, as training draws them: each row a window (a task's question and answer, random tokens), and only
    the positions the model's loss counts are scored (a task's answer, a repeat's copy), so the counters' loss
    and the model's are the same average. A repeat's last token, masked in its batch, is not known: it is -1
    and counted in no window."""
    splits = getattr(data, "splits", None)
    if splits is not None:
        return splits[split][None, : (COUNTED if split == "train" else VAL_SCORED + 1)].long(), None
    generator = torch.Generator().manual_seed(seed + (split == "val"))
    x, y = data.get_batch(split, 1, max_seq_len, generator)  # the row length, and a DataError for data that is gone
    rows = max(1, GENERATED_TOKENS // (x.shape[1] + 1))
    x, y = data.get_batch(split, rows, max_seq_len, generator)
    return torch.cat([x, y[:, -1:]], dim=1), y >= 0


# The last counter of a corpus's training text, kept for the next command that asks for it: its text does not
# change, and counting a text file of 20 MiB to order 5 took 5 s of every `:context` (which scores a counter beside
# the model), `:ngram` and `:score`, each time. (a weak reference to the data, its counter): a switch of data or
# tokenizer (a new data object) leaves it behind, and it goes with that data. Only one, of at most KEPT_BYTES.
_kept: tuple = (None, None)
KEPT_BYTES = 2**29


def _forget(ref) -> None:
    """The data a kept counter was counted on is gone: its memory goes too."""
    global _kept
    if _kept[0] is ref:
        _kept = (None, None)


def train_counter(data, n: int, max_seq_len: int, seed: int = 0) -> NgramModel:
    """A counter holding every order up to at least n, on `data`'s training text as split_tokens reads it (its
    `max_seq_len` and `seed`: data made on the fly). A corpus's last one is kept and served again while it holds
    order n; data made on the fly (a quarter of a million tokens, counted in a blink) is counted each time."""
    global _kept
    corpus = getattr(data, "splits", None) is not None
    if corpus:
        kept_data, kept = _kept
        if kept_data is not None and kept_data() is data and kept.n >= n:
            return kept
    train, _ = split_tokens(data, "train", max_seq_len, seed=seed)
    model = NgramModel(train, data.tokenizer.vocab_size, n)
    if corpus and model.nbytes() <= KEPT_BYTES:
        _kept = (weakref.ref(data, _forget), model)
    return model


def counter_losses(data, n: int, max_seq_len: int, ids: list[int]) -> list[float]:
    """-ln P(ids[t + 1] | the n - 1 tokens up to ids[t]) for every t, under the counter of order n on `data`'s
    training text (as :ngram counts it): :score's positions, a counter's loss beside the model's."""
    model = train_counter(data, n, max_seq_len)
    return (-model.probabilities(torch.tensor([ids]), n)[0].log()).tolist()


@dataclass
class Counter:
    """One counting model: the next token from the n - 1 before it (n = 0: a uniform guess, nothing counted)."""

    n: int
    contexts: int  # distinct contexts of n - 1 tokens seen in training (1 for the unigram's empty one)
    seen: float  # the share of scored validation positions whose context was seen in training (nan: no context)
    train_loss: float  # on the text it counted (memory: falls towards 0 as n grows)
    val_loss: float  # on the validation text (what it generalises)
    sample: list[int] | None = None  # ids it wrote after the prompt, when asked


@dataclass
class Counting:
    counters: list[Counter]  # n = 0, 1, ..., the longest asked
    train_tokens: int  # tokens counted
    train_total: int  # tokens in the training split (more than counted where it is longer than COUNTED)
    val_positions: int  # next-token positions scored
    val_total: int  # next-token positions in the validation split (more than scored past VAL_SCORED)
    generated: bool  # the data is made on the fly: counted on batches of it
    train_scored: int = 0  # next-token positions the train loss is read on (at most about TRAIN_SCORED)


def count_and_score(data, n: int, max_seq_len: int, prompt: list[int] | None = None, sample_len: int = 0,
                    seed: int = 0, on_progress: Callable[[int, int], None] | None = None) -> Counting:
    """Counters of order 0..n on `data`'s training text, each scored on its validation text (and on what it
    counted); with `prompt`, each order >= 1 writes `sample_len` tokens after it, from seed `seed`.
    `on_progress(done, total)` after each part: the count, the two scorings, each order's sample (8 MB of text
    takes seconds, which a bar full from the model's evaluation before it showed as done)."""
    vocab = data.tokenizer.vocab_size
    parts = 3 + n

    def done(part: int) -> None:
        if on_progress is not None:
            on_progress(part, parts)

    done(0)
    train, train_counted = split_tokens(data, "train", max_seq_len)
    val, val_counted = split_tokens(data, "val", max_seq_len)
    model = train_counter(data, n, max_seq_len)
    done(1)
    train_tokens = int((train >= 0).sum())
    if train.shape[0] == 1 and train.shape[1] > TRAIN_SCORED + 1:  # a slice of a long text: the same average
        train = train[:, : TRAIN_SCORED + 1]
    elif train.shape[0] > 1 and train.numel() > TRAIN_SCORED:
        rows = max(1, TRAIN_SCORED // train.shape[1])
        train, train_counted = train[:rows], train_counted[:rows] if train_counted is not None else None
    train_scored = int(train_counted.sum()) if train_counted is not None else train.shape[0] * (train.shape[1] - 1)
    uniform = math.log(vocab)
    counters = [Counter(0, 0, math.nan, uniform, uniform)]  # the uniform guess reads no context: none to have seen
    on_train = model.losses(train, train_counted, n)
    done(2)
    on_val = model.losses(val, val_counted, n)
    done(3)
    for k in range(1, n + 1):
        sample = None
        if prompt is not None and sample_len > 0:
            sample = model.sample(prompt, sample_len, torch.Generator().manual_seed(seed), order=k)
        counters.append(Counter(k, len(model.orders[k - 1].contexts), model.contexts_seen(val, k, val_counted),
                                on_train[k - 1], on_val[k - 1], sample))
        done(3 + k)
    val_positions = val.shape[0] * (val.shape[1] - 1) if val_counted is None else int(val_counted.sum())
    splits = getattr(data, "splits", None)
    if splits is None:
        return Counting(counters, train_tokens, train_tokens, val_positions, val_positions, True, train_scored)
    return Counting(counters, train_tokens, len(splits["train"]), val_positions, len(splits["val"]) - 1, False,
                    train_scored)
