"""The numbers `:embed` sets its cosines against: how alike random rows come out by chance, the head's own rows
where it is untied, the sizes of the token and position rows, and the position table's rows compared pair by pair.

(core.inside.embedding_neighbours finds W_E's neighbours and the mean cosine by distance; this module adds what a
reader needs to judge them. Everything is computed on the CPU in float64 or float32 and only read.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .errors import DataError
from .inside import check_neighbours_asked
from .model import require_model

CHANCE_DRAWS = 2000  # random tables drawn for the chance level: its mean moves by under 0.005 between seeds
CHANCE_GRID = 1 << 16  # points of the cosine's distribution function, on (-1, 1)
CHANCE_BAND = 0.99  # "above chance": more alike than the k-th nearest of random rows is in this share of draws (rank 1:
# computed exactly, the others from the draws)


@dataclass
class ChanceLevel:
    """What the k-th nearest neighbour's cosine is where the rows are random directions (an untrained table): for
    rank 1, 2, ..., its mean over CHANCE_DRAWS draws and the value it stays under in CHANCE_BAND of them."""

    mean: list[float]
    band: list[float]
    rows: int  # the other rows a token's neighbours are picked from
    dims: int  # the rows' width d


def chance_level(rows: int, dims: int, k: int, seed: int = 0) -> ChanceLevel:
    """The k nearest neighbours' cosines among `rows` random directions in `dims` dimensions, by rank.

    The cosine t between a fixed direction and a random one in d dimensions has density proportional to
    (1 - t^2)^((d - 3) / 2), and the rows are drawn independently, so the k nearest are the k largest of `rows`
    independent draws of t. Those are drawn directly (the top order statistics of uniforms, then t's inverse
    distribution function), not by drawing rows: the cost does not grow with d nor with a BPE's 50,000 rows."""
    if rows < 1 or dims < 1 or k < 1:
        raise DataError(f"a chance level needs rows, width and k of 1 or more, got {rows}, {dims}, {k}")
    k = min(k, rows)
    if dims == 1:  # every direction is +1 or -1: some row points the same way as soon as there are a few
        return ChanceLevel([1.0] * k, [1.0] * k, rows, dims)
    t = torch.linspace(-1, 1, CHANCE_GRID + 1, dtype=torch.float64)
    t = (t[1:] + t[:-1]) / 2  # midpoints: the density is infinite at the ends for d = 2
    log_density = (dims - 3) / 2 * torch.log1p(-t * t)
    density = (log_density - log_density.max()).exp()
    upper = density.flip(0).cumsum(0).flip(0)  # the share above each point: the tail the nearest rows lie in
    upper = upper / upper[0]
    generator = torch.Generator().manual_seed(seed)
    # the j-th largest of n uniforms: log U_(n-j+1) = -(E_1 / n + ... + E_j / (n - j + 1)), each E_i ~ Exp(1)
    # drawn rank by rank (k rows of draws, turned): rank 1's draws, and so its level, are the same whatever k is
    gaps = -torch.rand(k, CHANCE_DRAWS, generator=generator, dtype=torch.float64).log().T
    log_u = -(gaps / torch.arange(rows, rows - k, -1, dtype=torch.float64)).cumsum(dim=1)
    tail = -torch.expm1(log_u)  # 1 - U: the share of t above the j-th largest, kept exact where it is tiny
    # upper falls from 1 to 0 along t: find each tail's place on the reversed (rising) curve and interpolate
    rising, points = upper.flip(0).contiguous(), t.flip(0)
    at = torch.searchsorted(rising, tail.contiguous()).clamp(1, len(rising) - 1)
    low, high = rising[at - 1], rising[at]
    share = ((tail - low) / (high - low).clamp(min=1e-300)).clamp(0, 1)
    cosines = points[at - 1] + share * (points[at] - points[at - 1])
    band = cosines.quantile(CHANCE_BAND, dim=0)
    # rank 1's bar, the one the view marks by, exactly: the nearest of n independent rows stays under t with chance
    # F(t)^n, so the bar is where the share above t is 1 - CHANCE_BAND^(1/n). 2,000 draws put it 0.007 off (0.329 for
    # 0.322 at 102 rows of d = 128): a 0.325 was left unmarked
    top = torch.tensor([-math.expm1(math.log(CHANCE_BAND) / rows)], dtype=torch.float64)
    at = torch.searchsorted(rising, top).clamp(1, len(rising) - 1)
    share = ((top - rising[at - 1]) / (rising[at] - rising[at - 1]).clamp(min=1e-300)).clamp(0, 1)
    band[0] = (points[at - 1] + share * (points[at] - points[at - 1]))[0]
    return ChanceLevel(cosines.mean(dim=0).tolist(), band.tolist(), rows, dims)


@dataclass
class HeadNeighbours:
    """The rows of the output head W_U (untied: a matrix of its own) most alike each asked token's, by cosine."""

    neighbour_ids: list[list[int]]
    similarities: list[list[float]]
    input_alike: list[float]  # each token's W_U row against its own W_E row (1.00 where the head is tied)


def head_neighbours(model: nn.Module, token_ids: list[int], k: int = 5) -> HeadNeighbours:
    """The k tokens whose rows of W_U (lm_head's weight: a token's logit is h . W_U[token]) are most alike each of
    `token_ids`'s, and how alike each token's W_U row is to its W_E row. Every row of W_U trains, from every
    prediction (the softmax's gradient reaches each logit), so none is left out."""
    V = check_neighbours_asked(model, token_ids, k, "head_neighbours")
    with torch.no_grad():
        head = F.normalize(model.lm_head.weight.detach().float().cpu(), dim=-1)  # (V, d)
        embedding = F.normalize(model.token_embedding.weight.detach().float().cpu(), dim=-1)
        similar = head[token_ids] @ head.T
        similar[torch.arange(len(token_ids)), token_ids] = -math.inf  # a token is not its own neighbour
        top, ids = similar.topk(min(k, V - 1), dim=-1)
        input_alike = (head[token_ids] * embedding[token_ids]).sum(dim=-1)
    return HeadNeighbours(ids.tolist(), top.tolist(), input_alike.tolist())


@dataclass
class RowSizes:
    """How long the rows added at the input are: h_0 = x + p, x a token's W_E row and p its position's row."""

    token: float  # the mean |x| over the tokens that count (untied: those that train)
    position: float | None  # the mean |p| over the position rows that count; None: no table at the input


def row_sizes(model: nn.Module, among: list[int] | None = None, trained: int | None = None) -> RowSizes:
    """The mean length of W_E's rows (`among` only, where given) and of the position table's rows (its first
    `trained` only, where given: the learned rows no training row reaches stay at their start)."""
    require_model(model, "row_sizes")
    with torch.no_grad():
        tokens = model.token_embedding.weight.detach().float().cpu()
        if among is not None:
            tokens = tokens[list(among)]
        position = None
        table = position_rows(model, trained)
        if table is not None:
            position = float(table.norm(dim=-1).mean())
    return RowSizes(float(tokens.norm(dim=-1).mean()), position)


def position_rows(model: nn.Module, trained: int | None = None) -> torch.Tensor | None:
    """The position table's rows (T, d), float32 on the CPU, its first `trained` only where given; None where
    nothing is added at the input (rope, none)."""
    if model.position_embedding is None:
        return None
    T = model.config.max_seq_len if trained is None else max(1, min(trained, model.config.max_seq_len))
    with torch.no_grad():
        where = torch.arange(T, device=model.token_embedding.weight.device)
        return model.position_embedding(where).detach().float().cpu()


@dataclass
class PositionLikeness:
    """The position table's rows compared pair by pair: cos(p_s, p_t) for every s, t, and how many rows have their
    nearest other row next to them (at distance 1), as a smooth table has."""

    cosines: list[list[float]]  # (T, T)
    nearest_next: int  # rows whose most alike other row is at distance 1
    rows: int  # T


def position_likeness(model: nn.Module, trained: int | None = None) -> PositionLikeness | None:
    """cos(p_s, p_t) over the position table (its first `trained` rows where given); None without a table."""
    require_model(model, "position_likeness")
    table = position_rows(model, trained)
    if table is None:
        return None
    unit = F.normalize(table, dim=-1)
    cos = unit @ unit.T
    T = cos.shape[0]
    others = cos.clone()
    others.fill_diagonal_(-math.inf)
    nearest = others.argmax(dim=-1) if T > 1 else torch.zeros(0, dtype=torch.long)
    next_to = int(((nearest - torch.arange(len(nearest))).abs() == 1).sum()) if T > 1 else 0
    return PositionLikeness(cos.tolist(), next_to, T)
