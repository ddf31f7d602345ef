"""What each attention head does: its attention scored against the patterns the literature names (`:heads`).

A head's pattern A (row i: where query i looks, over keys j <= i) is read against five sets of keys
for each query i >= 1 (position 0 can only look at itself):

    previous    j = i - 1                      the token just before
    current     j = i                          the token itself
    first       j = 0                          the first position (an "attention sink")
    duplicate   j < i with t_j = t_i           earlier copies of the same token
    induction   j < i with t_{j-1} = t_i       the token that followed an earlier copy of this one

A head's score for a role is the attention it puts on that role's keys, sum_{j in S_i} A[i, j],
averaged over the queries whose set S_i is not empty. A head that spread its attention evenly over
keys 0..i would score sum |S_i| / (i + 1) averaged the same way: the `uniform` baseline, printed
beside the scores, since on short texts even a head that looks nowhere in particular scores well on
`previous`.

The induction test (Olsson et al., 2022, "In-context learning and induction heads"): a block of h
random tokens followed by the same block again. Nothing in the first copy can be predicted (the
tokens are random), and every token of the second copy can, by a model that finds the earlier copy
of the current token and reads off what came next: the loss on the repeat drops far below chance
only if some heads do that. An induction head at query i (second copy) looks at key i - h + 1, the
token after the earlier copy of t_i, which is what `induction` measures on any text.

Where a head looks is not what it carries. On the repeated tokens each head is also switched off in
turn (its output A_h V_h zeroed, as `:ablate head=L.H` does) and both copies' losses read again, from
the same pass: the copying gain (the first copy's loss minus the repeat's) it takes away is how much
of the copying goes through that head, whatever its pattern. The repeat's loss alone would not say:
a head that damages every prediction raises the first copy's loss as much as the repeat's, and
leaves the copying as it was.

Like the other views, it only listens: eval, no-grad passes with the attention probes' hooks
(core.probe), on the explicit attention path so that the weights exist as a tensor. Parts switched
off by :ablate stay off, so the losses on the two copies show what an ablated head carried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import probe
from .ablation import Ablation, Ablations
from .errors import UserError
from .inside import block_probes, listening

ROLES = ("previous", "current", "first", "duplicate", "induction")
ROLE_AT = 0.4  # a head is named for a role when its score there is its largest, at least this ...
ROLE_OVER_UNIFORM = 2.0  # ... and at least this many times what even attention would score
REPEAT_LONGEST = 64  # the random block's length: half the context window, at most this
SEQUENCES = 8  # random sequences scored together (one is noisy: a few chance repeats move its scores)
SWEEP_MOST = 64  # heads switched off one at a time only in a model with at most this many (a pass each)


@dataclass
class HeadScores:
    layer: int
    head: int
    scores: dict[str, float]  # role -> the attention on that role's keys, averaged over queries
    role: str | None  # the role the head is named for (ROLE_AT, ROLE_OVER_UNIFORM), or None
    # the copying gain it carries: (first copy's loss - the repeat's) with this head on, minus the same with it switched
    # off alone (nats a token); a head that hurts every prediction alike carries about 0. None: not swept
    carries: float | None = None


@dataclass
class HeadRoles:
    token_ids: list[list[int]]  # the sequences scored, (B, T)
    repeat: int | None  # h: each sequence is h random tokens, then the same h again; None: a given text
    heads: list[HeadScores]  # every head of every block, block by block
    uniform: dict[str, float]  # role -> the score of a head that attends evenly to keys 0..i
    queries: dict[str, int]  # role -> the query positions its score averages over (all sequences)
    losses: list[float]  # position t -> the loss (nats) of predicting token t + 1, averaged over the sequences
    first_copy: float | None  # the mean loss on the first copy's tokens 1..h-1 (None: a given text)
    second_copy: float | None  # the mean loss on the repeat's tokens h+1..2h-1, which context gives away
    chance: float  # ln(vocab_size): the loss of a uniform guess
    # the standard error of first_copy - second_copy: the same tokens read twice, so the difference is taken token
    # by token (None: a given text); a gap within about two of them is what another seed's tokens could give
    copy_gain_se: float | None = None

    def named(self, role: str) -> list[HeadScores]:
        """The heads named for `role`, highest score first."""
        return sorted((h for h in self.heads if h.role == role), key=lambda h: -h.scores[role])

    def best(self, role: str) -> HeadScores:
        return max(self.heads, key=lambda h: h.scores[role])


def role_keys(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """(B, T) token ids -> role -> (B, T, T) bool: key j is in query i's set (only j <= i, only i >= 1)."""
    B, T = tokens.shape
    i = torch.arange(T).view(T, 1)
    j = torch.arange(T).view(1, T)
    asked = (i >= 1).expand(T, T)  # position 0 sees only itself: it tells nothing about a head
    same = tokens.unsqueeze(2) == tokens.unsqueeze(1)  # (B, T, T): t_i = t_j
    after_same = torch.zeros_like(same)
    after_same[:, :, 1:] = same[:, :, :-1]  # t_i = t_{j-1}
    earlier = (j < i) & asked
    fixed = {
        "previous": (j == i - 1) & asked,
        "current": (j == i) & asked,
        "first": (j == 0) & asked,
    }
    keys = {role: mask.expand(B, T, T) for role, mask in fixed.items()}
    keys["duplicate"] = same & earlier
    keys["induction"] = after_same & earlier
    return keys


def role_scores(maps: torch.Tensor, keys: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], dict[str, int]]:
    """maps (..., B, H, T, T) and the role_keys -> role -> (..., H) scores, and role -> queries counted.

    The score averages, over every query with a non-empty set in every sequence, the attention the
    query puts on its set."""
    scores, queries = {}, {}
    for role, mask in keys.items():
        m = mask.to(maps.dtype).unsqueeze(-3)  # (B, 1, T, T): the same keys for every head
        counted = mask.any(-1)  # (B, T): queries whose set is not empty
        n = int(counted.sum())
        on_set = (maps * m).sum(-1)  # (..., B, H, T): the attention each query puts on its set
        total = on_set.sum(dim=(-1, -3))  # summed over positions and sequences: (..., H)
        scores[role] = total / n if n else torch.full_like(total, float("nan"))
        queries[role] = n
    return scores, queries


def uniform_scores(keys: dict[str, torch.Tensor]) -> dict[str, float]:
    """What a head that attends evenly to keys 0..i would score for each role: |S_i| / (i + 1), averaged."""
    out = {}
    for role, mask in keys.items():
        T = mask.shape[-1]
        counted = mask.any(-1)
        share = mask.sum(-1).double() / torch.arange(1, T + 1, dtype=torch.float64)  # (B, T)
        n = int(counted.sum())
        out[role] = float(share[counted].sum() / n) if n else float("nan")
    return out


def name_role(scores: dict[str, float], uniform: dict[str, float]) -> str | None:
    """The role a head is named for: its highest score, if it reaches ROLE_AT and ROLE_OVER_UNIFORM x even."""
    known = {r: s for r, s in scores.items() if not math.isnan(s)}
    if not known:
        return None
    role = max(known, key=known.get)
    if known[role] >= ROLE_AT and known[role] >= ROLE_OVER_UNIFORM * uniform[role]:
        return role
    return None


def trained_length(data, max_seq_len: int) -> int:
    """The positions a model trains on: its window, or a task's shorter rows (its question and answer: 8 of a window
    of 64 on sort:4). The copying test fits in them: past them a task's model has positions it never trained, whose
    losses would be read as copying or its absence."""
    from .data import VocabOnly

    if isinstance(data, VocabOnly):  # a vocabulary alone (a file gone, a folder's tokenizer): no rows, the window
        return max_seq_len
    x, _ = data.get_batch("train", 1, max_seq_len, torch.Generator().manual_seed(0))
    return min(max_seq_len, x.shape[1])


def repeat_length(max_seq_len: int, rows: int | None = None) -> int:
    """h, the random block's length in a context window of max_seq_len, or a UserError where two do not fit.
    `rows`: the length of a task's rows where shorter than the window (trained_length): the blocks fit in them."""
    h = min(min(max_seq_len, rows or max_seq_len) // 2, REPEAT_LONGEST)
    if h < 2 and rows is not None and rows < max_seq_len:
        raise UserError(f"the repeated-tokens test needs two copies of at least 2 tokens within the rows the model "
                        f"trains on, and it reads this task's rows at {rows} positions; give a text to score instead, "
                        "or train on a task of longer questions (e.g. sort:4)")
    if h < 2:
        raise UserError(f"the repeated-tokens test needs room for two copies of at least 2 tokens, and "
                        f"max_seq_len={max_seq_len}; give a text to score instead, or raise max_seq_len")
    return h


def repeated_tokens(vocab_size: int, max_seq_len: int, sequences: int = SEQUENCES, seed: int = 0,
                    among: torch.Tensor | None = None) -> torch.Tensor:
    """(sequences, 2h) ids: h uniformly random tokens, then the same h again (h = repeat_length(max_seq_len)); drawn
    from the ids `among` where given (`text_tokens`), else from the whole vocabulary."""
    h = repeat_length(max_seq_len)
    generator = torch.Generator().manual_seed(seed)
    if among is None:
        block = torch.randint(vocab_size, (sequences, h), generator=generator)
    else:
        block = among[torch.randint(len(among), (sequences, h), generator=generator)]
    return torch.cat([block, block], dim=1)


def text_tokens(data) -> torch.Tensor | None:
    """The ids the training text holds, the pool the repeated random tokens are drawn from; None where the data has
    no text (random tokens), or holds every token of the vocabulary anyway.

    Under a byte-level BPE most of the vocabulary never occurs in a small text (bpe:280 on a page of Chinese: the
    256 bytes, most of them unused). Such a token's input row never trained (its embedding is the random one it
    started with, or for a tied model only pushed down as an output), so a repeat of it asks whether the model can
    copy tokens it has never read: the test is of induction on the text's own tokens, as a head learns it."""
    splits = getattr(data, "splits", None)
    if splits is None:
        return None
    held = torch.unique(splits["train"]).long()  # stored in the smallest dtype that holds the ids
    held = held[held >= 0]
    return None if len(held) < 2 or len(held) == data.tokenizer.vocab_size else held


def first_copy_loss(logits: torch.Tensor, tokens: torch.Tensor, repeat: int) -> float:
    """The mean loss on the first copy's tokens 1..h-1 (random: nothing to go on), as head_roles's `first_copy`."""
    return float(F.cross_entropy(logits[:, : repeat - 1].float().transpose(1, 2), tokens[:, 1:repeat]))


def repeat_loss(logits: torch.Tensor, tokens: torch.Tensor, repeat: int) -> float:
    """The mean loss on the repeat's tokens h+1..2h-1 (token h starts the repeat: nothing gives it away)."""
    return float(F.cross_entropy(logits[:, repeat:-1].float().transpose(1, 2), tokens[:, repeat + 1:]))


def switched_off_losses(model: nn.Module, idx: torch.Tensor, repeat: int,
                        heads: list[tuple[int, int]]) -> list[tuple[float, float]]:
    """(the first copy's loss, the repeat's) with each of `heads` (layer, head) switched off alone (core.ablation), in
    order; both from the one pass a head."""
    out = []
    with probe.listening(model):  # eval, no_grad, training flags restored
        for layer, head in heads:
            off = Ablations(model)
            try:
                off.add(Ablation("head", layer, head))
                logits, _ = model(idx)
            finally:
                off.clear()
            logits, tokens = logits.cpu(), idx.cpu()
            out.append((first_copy_loss(logits, tokens, repeat), repeat_loss(logits, tokens, repeat)))
    return out


def head_roles(model: nn.Module, tokens: torch.Tensor, repeat: int | None = None, sweep: bool = True) -> HeadRoles:
    """Score every head of `model` on `tokens` (B, T); `repeat`: h, when each row is h tokens twice. `sweep`:
    with a repeat, also switch each head off in turn (at most SWEEP_MOST heads) and read the copying gain it takes."""
    probes = block_probes(model, "hook_weights")
    if not probes:
        raise UserError("this model has no attention weight probes (hook_weights); use a model built by minitf")
    device = next(model.parameters()).device
    idx = tokens.to(device)
    with listening(model, {str(i): p for i, p in probes.items()}, explicit_attention=True) as seen:
        logits, _ = model(idx)
    maps = torch.stack([seen[str(i)] for i in probes]).float().cpu()  # (L, B, H, T, T)
    keys = role_keys(tokens.cpu())
    scores, queries = role_scores(maps, keys)
    uniform = uniform_scores(keys)
    heads = []
    for li, layer in enumerate(probes):
        for h in range(maps.shape[2]):
            own = {role: float(scores[role][li, h]) for role in ROLES}
            heads.append(HeadScores(layer, h, own, name_role(own, uniform)))

    # The loss of each next-token prediction: position t predicts token t + 1.
    logits = logits[:, :-1].float().cpu()
    losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:].cpu(), reduction="none")  # (B, T - 1)
    first = second = se = None
    if repeat is not None:
        first = float(losses[:, : repeat - 1].mean())  # tokens 1..h-1: random, nothing to go on
        second = float(losses[:, repeat:].mean())  # tokens h+1..2h-1 (token h starts the repeat: unguessable)
        gain = losses[:, : repeat - 1] - losses[:, repeat:]  # the same token t at t and at t + h: paired
        se = float(gain.std() / math.sqrt(gain.numel())) if gain.numel() > 1 else None
        if sweep and len(heads) <= SWEEP_MOST:
            off = switched_off_losses(model, idx, repeat, [(h.layer, h.head) for h in heads])
            for h, (first_off, second_off) in zip(heads, off):
                h.carries = (first - second) - (first_off - second_off)  # the copying gain lost with it off
    return HeadRoles(tokens.tolist(), repeat, heads, uniform, queries, losses.mean(0).tolist(), first, second,
                     math.log(logits.shape[-1]), se)
