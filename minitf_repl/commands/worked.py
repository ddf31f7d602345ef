"""The machinery worked out by hand on one input: `:qkv` (one query's attention, q.k to the weighted values),
`:resid` (the residual stream at one position, what each sublayer adds and what its norm reads),
`:rope` (rotary positions at one query: q and k turned pair by pair, the score a function of distance),
`:ln` (one norm at one position, step by step: centre, scale, gain and bias),
`:ffn` (a feed-forward part at one position as the sum of its hidden units' writes) and `:kv`
(decoding with the KV cache against the naive loop, step by step).

The numbers come from core.inside (query_attention, rope_worked, residual_stream, norm_worked,
feed_forward_neurons, cached_decoding), which recompute the formula from the tensors the model made
and check it against the model's own; these commands pick the prompt and the position, check the
options, and render the result as the formula's table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ..core.errors import UserError
from ..core.variants import norm_kind
from ..core.words import count, quoted_chars, quoted_end
from ..palette import quoted, visible
from ..registry import Param
from ..render import fmt
from ..render.chart import spark, spark_bins
from ..render.renderers import render
from ..render.tables import fitting_table, shown_columns
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again, named, option, rebuilt_with
from .base import (BLOCK, LAST_POSITION, QUERY_HEAD, VIEW_DEFAULT, VIEW_TEXT, ablation_note, check_head, check_layer,
                   command, sample_prompt, switched_off, typeable_prompt, unread_note, view_prompt)
from .generate import SAMPLING_TOPICS

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.inside import NormRead, NormWorked, RopeWorked, StreamWrite

FAMILY = "worked out by hand"  # the heading :help lists this module's commands under


def read_at(session: Session, name: str, args: dict, reporter: Reporter,
            default=lambda T: T - 1) -> tuple[str, list[int], int, int]:
    """The text a view reads (base.view_prompt: the prompt, or the data's sample) and the position `at` it looks
    at, checked: None is `default(T)`, a negative one counts from the end."""
    text, ids, dropped = view_prompt(session, args["prompt"], reporter, noted=True)  # closing_notes says it
    if not ids:
        raise UserError(f"give some text, e.g. {cmd(name, sample_prompt(session.data))}")
    T = len(ids)
    at = default(T) if args["at"] is None else args["at"]
    if not -T <= at < T:
        raise UserError(f"at must be a position of the {count(T, session.data.tokenizer.unit)} read: 0..{T - 1}, "
                        f"or -1..-{T} from the end (-1 the last); got {at}")
    return text, ids, dropped, at


def stream_update(norm: str, pre: bool, residual: bool) -> str:
    """What a sublayer f makes of the stream h: h + f(LN(h)) (pre-norm), LN(h + f(h)) (post-norm), and without
    the residual add f(LN(h)) or LN(f(h)); `norm` is the norm's label."""
    new = f"f({norm}(h))" if pre else "f(h)"
    if residual:
        new = f"h + {new}"
    return new if pre else f"{norm}({new})"


# How far, relative to the values' size, two float32 computations of the same numbers may differ and still be
# rounding: float32's eps (2^-23, 1.2e-7) times 1,024, for the sums of thousands of products in another order (a fused
# kernel, a cache) that lie between them. Relative, because float32 rounds each number to eps of its own size: the
# logits of weights a huge rate blew up (5,000 at lr=30, 1.5e11 at lr=1e5) agreed to 4e-03 and 7e+04, 1e-6 and 5e-7
# of their size, and an absolute 1e-4 called that "more than rounding"; at sizes up to 1 it is the 1e-4 it was.
ROUNDING = 2.0**-23 * 1024


def rounded(difference: float, size: float = 1.0) -> bool:
    """Whether `difference` is within float32's rounding of values of up to `size` (max |value|): ROUNDING x
    max(1, size)."""
    return difference < ROUNDING * max(1.0, size)


def rounding(difference: float, ablations: list[str], size: float = 1.0, of: str = "value") -> str:
    """Why two computations of the same numbers, the largest of them `size` in size (max |value|, said as "the
    largest `of`"), differ by `difference`: judged relative to that size (ROUNDING), and the relative figure said
    where the size is over 1, since there the absolute difference alone reads as large."""
    relative = f"{difference / size:.0e} of the largest {of}, {size:.2g}: " if size > 1 else ""
    if rounded(difference, size):
        return f"{relative}float32 rounding"
    return relative + ("more than rounding: an ablation changes the model's own" if ablations else "more than rounding")


def spark_scale(values: list[float], width: int, show=lambda v: f"{v:.2f}") -> str:
    """What spark(values, width)'s bars stand for: render.chart.spark draws them from 0 to the largest bar, so a label
    "20.64 to 46.29" read as their bottom and top (20.64 drew as a half-high bar); where the width averages
    neighbours into one bar, its full bar is the largest mean, not the largest value (128 singular values in 40 bars
    were labelled with a top 40% above the full bar's). A bar averages a whole number of values, 1 or 2 where the
    values are not twice the bars ("each the mean of about 1.3 values"), and the values' range is named as theirs:
    "they run from 9.93 to 13.80" beside a top of 13.59 read as the bars'."""
    means = spark_bins(values, width)
    if len(means) == len(values):
        return f"bars from 0 to {show(max(values))}, the least {show(min(values))}"
    fewest, most = len(values) // len(means), -(-len(values) // len(means))  # spark_bins' chunks are of these sizes
    each = f"{fewest}" if fewest == most else f"{fewest} or {most}"
    return (f"bars from 0 to {show(max(means))}, the largest mean: each bar averages {each} neighbouring values, and "
            f"the values themselves run from {show(min(values))} to {show(max(values))}")


def closing_notes(console: Console, result, untrained: str | None = None, name: str = "") -> None:
    """What each worked view ends with: the start of a prompt it did not read, the parts :ablate has switched off
    (the numbers are the ablated model's), and on a model that has not trained, what its numbers are (`untrained`)."""
    unread_note(console, result)
    ablation_note(console, result.ablations)
    if untrained is not None and result.untrained:
        note(console, f"this model has not trained yet: {untrained}; {look_again(name, AUTOSAVE_NAME)}")


# --- :qkv ----------------------------------------------------------------------------------------
QKV_ROWS = 16  # at most this many keys are listed one per row; the weakest others are summed up in a line


@dataclass
class QkvResult:
    prompt: str  # the text read (its last max_seq_len tokens)
    tokens: list[str]  # what each position reads
    layer: int  # the block whose attention is worked out (default 0)
    head: int  # the query head
    kv_head: int  # the key/value head it reads (itself; under GQA/MQA the one its group shares)
    n_heads: int  # query heads per attention layer
    n_kv_heads: int  # key/value heads per attention layer (n_heads; fewer under GQA, 1 under MQA)
    at: int  # the query position i
    d_model: int  # d: the residual stream's width, and Concat(heads)'s (n_heads x d_k)
    q: list[float]  # q_i as the scores see it (after qk_norm and RoPE where the model has them)
    keys: list[list[float]]  # k_j for every position j, d_k numbers each
    values: list[list[float]]  # v_j for every position j
    dots: list[float]  # q_i . k_j for every j, the future's too (QK^T computes them; the mask hides them)
    scores: list[float]  # s_ij = q_i . k_j / sqrt(d_k)
    weights: list[float]  # a_ij = softmax_j(s_ij + M_ij): exactly 0 for j > i, summing to 1
    unscaled_weights: list[float]  # the softmax without the 1/sqrt(d_k) scale, for comparison
    out: list[float]  # o_i = sum_j a_ij v_j, this head's share of Concat(heads) at position i
    model_weights_diff: float  # max |a_ij - the model's own A[i, j]| (rounding)
    model_out_diff: float  # max |o_i - the model's own AV row|
    fused_out_diff: float  # max |o_i - F.scaled_dot_product_attention's row| on the same q, k, v
    turned: list[str]  # what q and k went through before the scores: qk_norm, rope (empty for the seed)
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # the model has not trained a step: its patterns are near uniform
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    causal: bool = True  # the model's causal mask is on; off (causal=off), M = 0 and the future is read too
    around: str = ""  # the text around the query, decoded (the tokens joined would read a byte as its escape)
    # The spread the 1/sqrt(d_k) is for (the video's "why"), over the keys this query reads: for q and k of
    # independent features var(q.k) = d_k var(q) var(k), so unit-variance q and k give scores of variance d_k
    q_var: float = 0.0  # var(q_i): the variance of the query's d_k features
    k_var: float = 0.0  # var(k): the variance of the numbers of the keys it reads (d_k each)
    dot_var: float = 0.0  # var_j(q_i.k_j) over the keys it reads, before the scale
    score_var: float = 0.0  # var_j(s_ij) = var_j(q_i.k_j) / d_k: what the softmax is given


@command("qkv", "One query's attention worked out: q.k for every key, the scale, the causal mask, softmax, the "
                "weighted values.", params=[
    VIEW_TEXT,
    Param("at", int, help="the query position (default: the middle of the text, so the mask has a future to "
                          "hide; -1: the last)", meta="N"),
    BLOCK,
    QUERY_HEAD,
], json_version=4, guide="inside-views.md#one-query-worked-out-by-hand-qkv",
   topics=("c_attn",))  # fmt: skip
def cmd_qkv(session: Session, args: dict, reporter: Reporter) -> QkvResult:
    layer = check_layer(session, args["layer"])
    config = session.model_config
    head = check_head(session, args["head"])
    # The middle by default: the row then has keys it reads and a future the mask hides, the two
    # halves of causal attention (the last position, what predicts the next token, has no future).
    text, ids, dropped, at = read_at(session, "qkv", args, reporter, default=lambda T: (T - 1) // 2)
    from ..core.inside import query_attention

    worked = query_attention(session.model, ids, layer=layer, head=head, at=at)
    fields = {k: v for k, v in worked.to_dict().items() if k not in ("token_ids",)}
    from ..core.bpe import shown_pieces  # a byte of a longer character as its escape (\xe4), as :tok names it

    return QkvResult(prompt=text, tokens=shown_pieces(session.data.tokenizer, ids), n_heads=config.n_heads,
                     n_kv_heads=config.kv_heads, d_model=config.d_model, dropped=dropped,
                     unit=session.data.tokenizer.unit, untrained=session.untrained, ablations=switched_off(session),
                     around=_around(session.data.tokenizer, ids, worked.at, cut_before=bool(dropped)), **fields,
                     **_score_spread(worked.q, worked.keys, worked.dots, worked.at, worked.causal))


def _score_spread(q: list[float], keys: list[list[float]], dots: list[float], at: int, causal: bool) -> dict:
    """var(q_i), var(k) and the variance of q_i.k_j and of s_ij over the keys j that query `at` reads.
    One query's figure, not the whole layer's: the spread of this row's scores is what makes this row's softmax
    soft or peaked, the row the table shows, and it needs no second pass over every query and head."""
    read = at + 1 if causal else len(dots)
    dot_var = _variance(dots[:read])
    return {"q_var": _variance(q), "k_var": _variance([x for key in keys[:read] for x in key]), "dot_var": dot_var,
            "score_var": dot_var / len(q)}


def _variance(values: list[float]) -> float:
    """The population variance: over all of them, none held out."""
    mean = sum(values) / len(values)
    return sum((x - mean) ** 2 for x in values) / len(values)


def _around(tokenizer, ids: list[int], at: int, cut_before: bool = False) -> str:
    """The text around the query at `at`, decoded from the tokens: not the tokens' names joined, which under a
    byte-level BPE name a byte of a character as its escape (\\xe4), and read "\\xe4\\xbd\\xa0" for 你.
    `cut_before`: `ids` are a longer text's last window, marked "…" in front as :score marks it (it read as the
    text's start, "…" only after it)."""
    text = tokenizer.decode(ids)
    # where the query's token ends: its bytes of a character that a later token completes decode as one "\ufffd",
    # as long as that character is in the whole text
    end = min(len(text), len(tokenizer.decode(ids[: at + 1])))
    first, last = max(0, end - 40), min(len(text), max(end + 8, 48))
    return ("…" if first or cut_before else "") + text[first:last] + ("…" if last < len(text) else "")


def _shown_keys(weights: list[float], at: int, causal: bool = True) -> list[int]:
    """The keys listed one per row: every key read while they fit in QKV_ROWS, else the QKV_ROWS - 2 heaviest and
    the query itself; then the first future key: masked, its score replaced by -inf, or without the mask
    (causal off) the token position `at` is to predict, read like any other key."""
    T = len(weights)
    read = list(range(at + 1 if causal else T))
    nxt = [at + 1] if at + 1 < T else []
    if len(read) > QKV_ROWS - 1:
        others = [j for j in read if j != at and (causal or j != at + 1)]
        heaviest = sorted(others, key=lambda j: weights[j], reverse=True)[:QKV_ROWS - 2]
        read = sorted(heaviest + [at] + ([] if causal else nxt))
    read = read + (nxt if causal else [])
    # a gap of one key is listed as that key's own row: "… j = 5  0.037  1 key together" took the place of the row
    return sorted({*read, *(j - 1 for before, j in zip([-1, *read], read) if j - before == 2)})


# the video whose derivation of the scale :qkv measures, named once where its lines speak of "the video's"
VIDEO = "\"Let's build GPT: from scratch, in code, spelled out\""


@render.register(QkvResult)
def render_qkv(result: QkvResult, console: Console) -> None:
    i, T, d_k = result.at, len(result.tokens), len(result.q)
    # the text around the query (_around), not the prompt's last 48 characters: `at=` early in a long text showed a
    # tail without the query in it
    say(console, f"query {i} {quoted(result.tokens[i])} of {quoted_chars(result.around)}: layer {result.layer}, "
                 f"head {result.head}, d_k = {d_k}", "bold")
    mask = ("-inf for j > i: the causal mask" if result.causal
            else "0 for every j: no causal mask now, so position i reads the future too")
    note(console, f"s_ij = q_i.k_j / sqrt(d_k), then + M_ij ({mask}), a_ij = softmax over "
                  f"j, o_i = sum_j a_ij v_j; sqrt(d_k) = {math.sqrt(d_k):.2f}, |q_i| = {_norm(result.q):.2f}")
    if result.turned:
        note(console, f"q and k as the scores read them: after {' and '.join(result.turned)}")
    if result.kv_head != result.head or result.n_kv_heads != result.n_heads:
        group = result.n_heads // result.n_kv_heads
        first = result.kv_head * group
        note(console, f"keys and values from key/value head {result.kv_head} of {result.n_kv_heads}, shared by query "
                      f"heads {first}..{first + group - 1}")
    shown = _shown_keys(result.weights, i, result.causal)
    top = max(result.weights)
    rows, previous = [], -1
    for j in shown:
        if j > previous + 1 and (j <= i or not result.causal):  # keys read, left out between two listed ones
            rows.append(_skipped(result, range(previous + 1, j)))
        previous = j
        key = visible(result.tokens[j]) + (" = i" if j == i else " = i+1" if j == i + 1 and not result.causal else "")
        if j > i and result.causal:
            rows.append([str(j), Text(key, style="dim"), Text(f"{result.dots[j]:.3f}", style="dim"),
                         Text(f"{result.scores[j]:.3f}", style="dim"), Text("-inf", style="red"), Text("0", style="dim"),
                         Text("masked: the future", style="dim"), Text("0", style="dim")])
            continue
        a = result.weights[j]
        bar = "█" * max(1, round(8 * a / top)) if a >= 0.005 else ""
        rows.append([str(j), Text(key, style="cyan" if j == i else ""), f"{result.dots[j]:.3f}",
                     f"{result.scores[j]:.3f}", f"{result.scores[j]:.3f}", f"{a:.3f}", Text(bar, style="yellow"),
                     f"{a * _norm(result.values[j]):.3f}"])
    names = ["j", "key", "q.k_j", "s_ij", "+ M_ij", "a_ij", "", "|a_ij v_j|"]
    # 40-odd columns: the bars go last (a_ij says the same in numbers, and -inf under + M_ij marks the future)
    table = fitting_table(console, names, rows, left=("key", ""), optional=("|a_ij v_j|", "q.k_j", ""))
    console.print(table)
    if "" in shown_columns(table):  # scaled to the row, a near-even row (0.083 against 0.111) drew as peaked
        note(console, f"the bars: a_ij against the row's largest weight, {top:.3f} (a full bar), not against 1")
    if result.causal and T - 1 > i + 1:
        note(console, f"j = {i + 2}..{T - 1}: {count(T - i - 2, 'more future key')}, masked the same way (weight 0)")
    elif not result.causal and previous < T - 1:
        rows_left = range(previous + 1, T)
        note(console, f"j = {rows_left[0]}..{T - 1}: {count(len(rows_left), 'more key')}, weight "
                      f"{sum(result.weights[j] for j in rows_left):.3f} together")
    read = i + 1 if result.causal else T
    best = max(range(read), key=lambda j: result.weights[j])
    say(console, f"the weights sum to 1 over j = 0..{read - 1}; the largest, {result.weights[best]:.3f}, on j = {best} "
                 f"{quoted(result.tokens[best])}")
    if not result.causal and i + 1 < T:
        # Under :ablate the note below names what is switched off and the way back; else causal=off took the mask.
        back = "" if result.ablations else f" ({cmd('set', causal=True)} puts the mask back)"
        say(console, f"without the mask position {i} reads the very token it is to predict, "
                     f"{quoted(result.tokens[i + 1])} "
                     f"at j = {i + 1}, with weight {result.weights[i + 1]:.3f}; a model trained so learns to copy it, "
                     f"and at generation there is no next token to copy{back}")
    unscaled_top = max(result.unscaled_weights)
    note(console, f"without the 1/sqrt(d_k) scale the largest weight would be {unscaled_top:.3f}: scores "
                  f"{math.sqrt(d_k):.2f} times as far apart, a sharper softmax" if read > 1 else
                  f"position {i} reads only itself: its weight is 1 whatever the scores")
    if read > 1:
        # The video's why: q.k sums d_k products, so its variance is d_k var(q) var(k), d_k for unit-variance q and
        # k; small q and k (a fresh model) keep it small with or without the scale. Three short lines, not one that
        # wraps between a name and its number, after one that names the video the lines below call "the video"
        note(console, f"why the 1/sqrt(d_k), as Andrej Karpathy's video {VIDEO} works it out:")
        note(console, f"the spread over these {read} keys: var(q_i) = {result.q_var:.3g}, var(k) = {result.k_var:.3g}, "
                      f"d_k = {d_k}")
        # for this one q, keys whose features vary independently give sum_f q_f^2 var_j(k_jf): each feature's spread
        # over the keys, not var(k)'s pooled one, whose features' means (b^K among them) are the same for every key
        # and spread no q.k_j (a pooled reference read 4x the measured spread on a fresh model); the video's d_k var(q)
        # var(k) is for random q and k of zero-mean, unit-variance features
        keys = result.keys[:read]
        expected = sum(q * q * _variance([key[f] for key in keys]) for f, q in enumerate(result.q))
        note(console, f"var(q.k_j) = {result.dot_var:.3g}; keys whose features vary independently would give "
                      f"sum_f q_f^2 var_j(k_jf) = {expected:.3g} (the video's d_k var(q) var(k) = "
                      f"{d_k * result.q_var * result.k_var:.3g}, for random zero-mean q and k)")
        note(console, f"scaled: var(s_ij) = var(q.k_j) / d_k = {result.score_var:.3g} (unit-variance q and k: {d_k} "
                      f"unscaled, 1 scaled)")
    say(console, f"o_i = sum_j a_ij v_j: {d_k} numbers, |o_i| = {_norm(result.out):.3f}; this head's {d_k} of the "
                 f"{result.d_model} that Concat(heads) W^O reads at position {i}")
    diffs = (result.model_weights_diff, result.model_out_diff, result.fused_out_diff)
    # where all three agree exactly there is no difference to call rounding ("agrees exactly ... (largest
    # difference, float32 rounding)" at at=0, which reads one key)
    # judged against the outputs' size (the weights are at most 1): float32 rounds o_i to its own size
    size = max([1.0] + [abs(v) for v in result.out])
    largest = max(result.model_weights_diff, result.model_out_diff)
    why = "" if not any(diffs) else f" (largest difference, {rounding(largest, result.ablations, size, 'output')})"
    note(console, f"checked: the model's own A row {_agrees(result.model_weights_diff)}, its AV row "
                  f"{_agrees(result.model_out_diff)}, the fused F.scaled_dot_product_attention "
                  f"{_agrees(result.fused_out_diff)}{why}")
    # Random q and k give small scores and near-even weights, unless qk_norm made them sqrt(d_k) long
    even = max(result.weights[:read]) <= 1.5 / read
    untrained = ("q and k are random, so the weights are near uniform" if even else
                 "q and k are random" + (" (qk_norm makes each sqrt(d_k) long, so the scores are not small)"
                                         if "qk_norm" in result.turned else "")
                 + ", so whatever these weights pick out, nothing taught them to")
    closing_notes(console, result, untrained, "qkv")


def _agrees(difference: float) -> str:
    return "agrees exactly" if difference == 0 else f"agrees to {difference:.0e}"


def _norm(vector: list[float]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def _skipped(result: QkvResult, keys: range) -> list:
    """One row for past keys not listed: how many, and the weight they have together."""
    weight = sum(result.weights[j] for j in keys)
    where = f"j = {keys[0]}" if len(keys) == 1 else f"j = {keys[0]}..{keys[-1]}"
    return ["", Text(f"… {where}", style="dim"), "", "", "", Text(f"{weight:.3f}", style="dim"),
            Text(f"{count(len(keys), 'key')} together", style="dim"), ""]


# --- :rope ---------------------------------------------------------------------------------------
@dataclass
class RopeResult:
    prompt: str  # the text read (its last max_seq_len tokens)
    tokens: list[str]  # the text read, one token per position (a BPE's lone byte as its escape, \xe2)
    rope: RopeWorked  # the rotation redone at the query, key by key and pair by pair
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # no training here nor weights from elsewhere: its q and k are random
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    causal: bool = True  # the causal mask is on; off, the query also reads the keys after it (not listed here)


ROPE_ELSEWHERE = {  # where a model without rotary positions has its positions, as :rope's refusal says it
    "learned": "a learned table added at the input", "sinusoidal": "fixed sinusoids added at the input",
    "none": "no positions at all",
}


@command("rope", "Rotary positions worked out at one query: q and k turned pair by pair, each score depending on "
                 "the two tokens and their distance, not on where they stand.", params=[
    VIEW_TEXT,
    replace(LAST_POSITION, help="the query position (default -1: the last)"),
    BLOCK,
    QUERY_HEAD,
], json_version=2, guide="inside-views.md#rotary-positions-at-one-query-rope",
   topics=("position", "positions", "pos", "rotary", "rotary_positions", "rotary_embedding"))  # fmt: skip
def cmd_rope(session: Session, args: dict, reporter: Reporter) -> RopeResult:
    from ..core.variants import position_kind

    layer = check_layer(session, args["layer"])
    config = session.model_config
    head = check_head(session, args["head"])
    text, ids, dropped, at = read_at(session, "rope", args, reporter)
    if not position_kind(config).rotary:  # a wrong option is said first, as every view says it; then the model
        where = ROPE_ELSEWHERE.get(config.pos_encoding, "positions of its own")
        raise UserError(f"this model has no rotary positions (pos_encoding={config.pos_encoding}: {where}); "
                        f"{rebuilt_with('rope', AUTOSAVE_NAME, session.data_spec, config, pos_encoding='rope')}")
    from ..core.inside import rope_worked

    worked = rope_worked(session.model, ids, layer=layer, head=head, at=at)
    from ..core.bpe import shown_pieces  # a byte of a longer character as its escape (\xe4), as :tok names it

    return RopeResult(prompt=text, tokens=shown_pieces(session.data.tokenizer, ids), rope=worked,
                      dropped=dropped, unit=session.data.tokenizer.unit, untrained=session.untrained,
                      ablations=switched_off(session), causal=session.model.causal)


@render.register(RopeResult)
def render_rope(result: RopeResult, console: Console) -> None:
    r, i = result.rope, result.rope.at
    shared = f" (reading key head {r.kv_head})" if r.kv_head != r.head else ""
    say(console, f"RoPE in block {r.layer}, head {r.head}{shared}, query at position {i} "
                 f"{quoted(result.tokens[i])} of {quoted_end(result.prompt, 48)}", "bold")
    # the pair index is c in :shapes too; not m: M is :shapes' mask (i and j are positions here, d a distance)
    say(console, f"each pair (x_2c, x_2c+1) of q and k is turned by its position times θ_c = {r.base:g}^(-2c/"
                 f"{r.head_dim}); a turn keeps lengths and R(a)^T R(b) = R(b - a), so R(i)q · R(j)k = q · R((j - i)θ)k: "
                 "a score depends on the distance i - j, not on where the two tokens stand")
    shifts = ", ".join(f"{s:,}" for s in r.shifts)
    say(console, f"checked: redone in float64, the scores agree with the model's rotated q and k to {r.model_diff:.0e}; "
                 f"moving both positions by {shifts} changes no score by more than {r.shift_diff:.0e}")

    # every key where they fit in QKV_ROWS (16 keys: all 16 listed, no "not listed" line), as :qkv lists them;
    # past that, the QKV_ROWS - 2 with the largest rotated q·k and a line saying how many are left out
    shown = len(r.keys) if len(r.keys) <= QKV_ROWS else QKV_ROWS - 2
    listed = sorted(sorted(range(len(r.keys)), key=lambda j: r.keys[j].dot, reverse=True)[:shown])
    # fmt.signed: what rounds to 0 is +0, never "-0.000" (a pair whose angle is 0 at distance 0 showed -0.000)
    rows = [[str(j), visible(result.tokens[j]), str(i - j), fmt.signed(r.keys[j].dot, 4),
             fmt.signed(r.keys[j].unrotated, 4)] for j in listed]
    names = ["key j", "token", "i - j", "q·k rotated", "q·k without"]
    console.print(fitting_table(console, names, rows, left=("token",), optional=("q·k without",)))
    if len(listed) < len(r.keys):
        note(console, f"the {count(len(listed), 'key')} with the largest rotated q·k; "
                      f"{count(len(r.keys) - len(listed), 'other key')} not listed")
    note(console, "q·k: the dot product before the 1/sqrt(d_k) scale; without: the same q and k with no rotation, "
                  "as if position did not exist")
    later = len(result.tokens) - i - 1
    if not result.causal and later:  # the keys listed are 0..i; without the mask the query reads past them
        note(console, f"without the causal mask the query reads the {count(later, 'key')} after it too, at "
                      "negative distances i - j, turned the same way; the table lists the keys up to it")
    twins = _same_token_apart(result.tokens, r, listed)
    if twins:
        a, b = twins
        say(console, f"{quoted(result.tokens[a])} stands at j = {a} and j = {b}: the same key, the same q·k "
                     f"without rotation ({r.keys[a].unrotated:+.3f}), yet {r.keys[a].dot:+.3f} at distance {i - a} "
                     f"and {r.keys[b].dot:+.3f} at distance {i - b}: the distance alone tells them apart")

    j = r.shown
    which = "the largest before the query" if j < i else "the query's own key"
    say(console, f"{which}, key {j} {quoted(result.tokens[j])} at distance {i - j}, pair by pair:")
    window = len(r.by_distance)
    rows = [[str(p.m), f"{p.theta:.3g}", f"{p.wavelength:,.1f}", _angle(p.angle), fmt.signed(p.share, 4),
             fmt.signed(p.unrotated, 4)] for p in r.pairs]
    names = ["pair c", "θ_c", "a turn every", "angle (j-i)θ_c", "its term", "without"]
    console.print(fitting_table(console, names, rows, optional=("without", "θ_c")))
    fast = sum(p.wavelength < window for p in r.pairs)
    note(console, f"a turn every 2π/θ_c positions: {count(fast, 'pair')} of {len(r.pairs)} turn fully within the "
                  f"{window}-position context and tell near from far; the slow ones hardly turn over it and compare "
                  "what the tokens are, wherever they stand. The terms add up to the score")
    low = min(r.by_distance)
    width = max(8, min(window, console.width - 40))
    say(console, f"the same q and k_{j} at every distance d = 0..{window - 1}: "
                 f"{spark([v - low for v in r.by_distance], width)} from {low:+.3f} to {max(r.by_distance):+.3f}")
    note(console, "that is the score key j's content would get at each distance from the query: RoPE makes the "
                  "score a function of content and distance")
    closing_notes(console, result, "its q and k are random", "rope")


# --- :resid --------------------------------------------------------------------------------------
@dataclass
class ResidResult:
    prompt: str  # the text read (its last max_seq_len tokens)
    tokens: list[str]  # the text read, one token per position (a BPE's lone byte as its escape, \xe2)
    at: int  # the position shown
    placement: str  # "pre" (h + f(LN(h))) or "post" (LN(h + f(h)))
    norm_label: str  # "LN" or "RMSNorm"
    norm_scale: str  # what the norms divide by: "std" (LN), "rms" (RMSNorm)
    residual: bool  # each sublayer adds to the stream (off: its output replaces the stream)
    d_model: int  # d: the stream's width, the features at each position
    token: float  # |x|: the token's embedding row
    position: float | None  # |p|: the position table's row (None: rope or no positions)
    embed: float  # |h_0| = |x + p|
    # How the table p is read: "W_P" (learned) or "PE" (sinusoids, computed); None: nothing is added at the input
    position_table: str | None
    writes: list[StreamWrite]  # per block, attention then FFN: the stream before, the norm's reading, the write
    final: NormRead | None  # the final norm before the output head (None for post-LN)
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # no training here nor weights from elsewhere: every write is random weights'
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    norm_gain: bool = True  # the norms learn a gain g (norm_gain=off: none, and |x̂| = sqrt(d) is what they hand on)
    tied: bool = True  # the output head is W_E (tie_embeddings; off: W_U is a matrix of its own)
    # the text up to the position shown, where :attrib (which reads a text's last position) reads that position the
    # same: a causal model's stream there reads nothing after it (None: the model reads the future)
    upto: str | None = field(default=None, metadata={"view_only": True})
    # the prompt typed again reads these tokens (a prompt cut to the window may start inside a character, whose bytes
    # a BPE then reads otherwise): the :ln line carries it, else a PROMPT placeholder
    retyped: bool = field(default=True, metadata={"view_only": True})
    # the norm normalises (norm=none: the identity, which divides by 1 and hands the stream on as it is), as its kind
    # declares (core.variants.NormKind.normalises)
    normalised: bool = field(default=True, metadata={"view_only": True})
    # each block has its FFN after attention (ffn=off: attention alone, so one write a block)
    ffn: bool = field(default=True, metadata={"view_only": True})
    # the norms scale to rms 1 before their gain (core.inside.ResidualStream.unit_rms): False, the sqrt(d) is not said
    unit_rms: bool = field(default=True, metadata={"view_only": True})


@command("resid", "The residual stream at one position: its size through every block, what attention and the FFN "
                  "add, what the norms read.", params=[
    VIEW_TEXT,
    LAST_POSITION,
], json_version=5, guide="inside-views.md#the-residual-stream-and-its-norms-resid",
   topics=("position", "positions", "pos", "wpe", "embedding", "embeddings", "token_embedding", "wte", "x_plus_p",
           "residual_stream", "stream"))  # fmt: skip  (its first row: h_0 = x + p, the token's and the position's)
def cmd_resid(session: Session, args: dict, reporter: Reporter) -> ResidResult:
    text, ids, dropped, at = read_at(session, "resid", args, reporter)
    from ..core.inside import residual_stream

    stream = residual_stream(session.model, ids, at=at)
    from ..core.bpe import shown_pieces  # a byte of a longer character as its escape (\xe4), as :tok names it

    return ResidResult(prompt=text, tokens=shown_pieces(session.data.tokenizer, ids), at=stream.at,
                       placement=stream.placement, norm_label=stream.norm_label,
                       norm_scale=stream.norm_scale, residual=stream.residual, d_model=session.model_config.d_model,
                       token=stream.token, position=stream.position, embed=stream.embed,
                       position_table=position_table(session.model_config), writes=stream.writes,
                       final=stream.final, dropped=dropped, unit=session.data.tokenizer.unit,
                       untrained=session.untrained, ablations=switched_off(session),
                       norm_gain=session.model_config.norm_gain, tied=session.model_config.tie_embeddings,
                       upto=_typed_back(session.data.tokenizer, ids[:stream.at + 1]) if session.model.causal else None,
                       retyped=_typed_back(session.data.tokenizer, ids) is not None,
                       normalised=norm_kind(session.model_config).normalises, ffn=stream.ffn,
                       unit_rms=stream.unit_rms)


def _typed_back(tokenizer, ids: list[int]) -> str | None:
    """The text of `ids` where typing it gives `ids` back, else None: a stretch that ends or starts inside a
    character (a byte-level BPE's "h\xc3") decodes to U+FFFD, which typed is three other bytes, so `:attrib h�` split
    another text's logit."""
    text = tokenizer.decode(ids)
    return text if tokenizer.encode(text) == list(ids) else None


def position_table(config) -> str | None:
    """The table added at the input: "W_P" (learned, p = W_P[i]) or "PE" (the fixed sinusoids, p = PE(i)); None where
    nothing is added there (rope turns q and k inside attention; none has no positions)."""
    from ..core.variants import position_kind

    kind = position_kind(config)
    return None if kind.table is None else "W_P" if kind.learned else "PE"


# |p| this many times |x| or more: h_0 = x + p is over 90% position by squared length (|p|^2 / (|x|^2 + |p|^2))
POSITION_DWARFS = 3.0


def position_dwarfs(token: float, position: float | None, d_model: int, learned: bool) -> str | None:
    """Where the position row added at the input dwarfs the token's (|p| at least POSITION_DWARFS times |x|): by how
    much, why, and what it does; None where it does not. `learned`: the table trains (a fixed table's rows are
    sqrt(d/2) long whatever training does). :resid says it of one position's row, :embed of the rows on average."""
    if position is None or position < POSITION_DWARFS * token:
        return None
    share = position**2 / max(token**2 + position**2, 1e-30)  # as if x and p were at right angles, as random rows are
    ratio = f"|p| = {position:.2f} is {position / max(token, 1e-30):.1f} times |x| = {token:.2f}"
    if learned:
        why = "the learned position rows have grown longer than the token rows"
    else:
        from ..core.model import INIT_STD

        why = (f"the fixed table's rows are sqrt(d/2) = {math.sqrt(d_model / 2):.2f} long, while W_E's rows start "
               f"from std {INIT_STD} ({INIT_STD * math.sqrt(d_model):.2f} long) and grow only as they train; the paper "
               f"(Attention Is All You Need) multiplies the token embedding by sqrt(d_model) = "
               f"{math.sqrt(d_model):.1f} before adding, this lab adds the two as they are")
    return (f"{ratio}: {why}. So h_0 = x + p is mostly position ({fmt.share(share)} of its squared length): the "
            "first block reads where a token stands far more than which token it is")


@render.register(ResidResult)
def render_resid(result: ResidResult, console: Console) -> None:
    i, norm, pre = result.at, result.norm_label, result.placement == "pre"
    say(console, f"the residual stream at position {i} {quoted(result.tokens[i])} of {quoted_end(result.prompt, 48)}",
        "bold")
    update = stream_update(norm, pre, result.residual)
    sublayers = "attention, then the FFN" if result.ffn else "attention"
    if not result.ffn:
        note(console, f"ffn=off: each block is attention alone, one write a block; {cmd('set', ffn='on')} builds "
                      "blocks with the FFN after it (a new model)")
    if not result.normalised:  # the kind declares no norm: the formula and columns name none (no "Id", no "1")
        note(console, f"norm=none: h <- {'h + ' * result.residual}f(h) for f = {sublayers}: no norm anywhere, each "
                      "sublayer and the output head read the stream as it is")
    elif not result.residual:
        note(console, f"residual=off: h <- {update} for f = {sublayers}: each sublayer's output replaces "
                      "the stream, nothing of h passes it but what f makes of it")
    elif pre:
        note(console, f"pre-norm: h <- {update} for f = {sublayers}: the stream is never normalised, "
                      "only the copy each sublayer reads")
    else:
        note(console, f"post-norm: h <- {update}: the stream itself is normalised after every add")
    parts = [f"x = W_E[token]: |x| = {result.token:.2f}"]
    if result.position is not None:
        row = f"PE({i})" if result.position_table == "PE" else f"W_P[{i}]"  # sinusoids are computed, not looked up
        parts.append(f"p = {row}: |p| = {result.position:.2f}")
    parts.append(f"h_0 = {'x + p' if result.position is not None else 'x'}: |h_0| = {result.embed:.2f}")
    note(console, ";  ".join(parts))
    if dwarfs := position_dwarfs(result.token, result.position, result.d_model, learned=result.position_table == "W_P"):
        note(console, dwarfs)
    what = "h" if pre else "h + f(h)" if result.residual else "f(h)"  # post-norm reads the add (no add: f alone)
    divisor = result.norm_scale
    if result.normalised:
        note(console, f"mean: of the {what} that {norm} reads, over its d = {result.d_model} features; {divisor}: "
                      f"what {norm} divides it by; |{norm}|: the size of what it hands on; |f|: the size of the "
                      "sublayer's write")
    else:  # the identity divides by 1 and hands on |h|: columns of 1.000 and of |h| again said nothing
        note(console, f"mean: of the {what} each sublayer reads, over its d = {result.d_model} features; |f|: the "
                      "size of the sublayer's write")

    def spread(r: NormRead) -> str:
        return "?" if r.scale is None else f"{r.scale:.3f}"

    rows, labelled = [], None
    for w in result.writes:  # the block's number on its first row only
        rows.append([str(w.block) if w.block != labelled else "", w.part, f"{w.before:.2f}", f"{w.norm.mean:+.3f}",
                     spread(w.norm), f"{w.norm.size_out:.2f}", f"{w.write:.2f}",
                     f"{w.write / max(w.before, 1e-12):.2f}",
                     Text(f"{w.cos:+.2f}", style="green" if w.cos > 0.3 else "red" if w.cos < -0.3 else ""),
                     f"{w.after:.2f}"])
        labelled = w.block
    if result.final is not None and result.normalised:  # norm=none: no final norm, the head reads h_L itself
        r = result.final
        rows.append([Text("final", style="cyan"), f"{norm}_f", f"{r.size_in:.2f}", f"{r.mean:+.3f}",
                     spread(r), f"{r.size_out:.2f}", "", "", "", ""])
    names = ["block", "f", "|h|", "mean", divisor, f"|{norm}|", "|f|", "|f|/|h|", "cos(f, h)", "|h| after"]
    if not result.normalised:  # no norm: nothing divides, nothing is handed on but h itself
        kept = [k for k, name in enumerate(names) if name not in (divisor, f"|{norm}|")]
        names, rows = [names[k] for k in kept], [[row[k] for k in kept] for row in rows]
    # 40-odd columns: what the norm hands on goes (the note under the table gives its range), then the cosine
    table = fitting_table(console, names, rows, left=("block", "f"),
                          optional=("|f|/|h|", "mean", "|h| after", f"|{norm}|", "cos(f, h)"))
    console.print(table)
    cosine = any(c.header == "cos(f, h)" for c in table.columns)
    last = result.writes[-1].after
    if not result.residual:
        say(console, f"|h| went from {result.embed:.2f} to {last:.2f}, but nothing accumulates: without the residual "
                     "add each sublayer's write is the whole stream after it, so h_0 reaches the head only through "
                     "every sublayer")
    elif pre:
        blocks = count(len({w.block for w in result.writes}), "block")  # two writes a block, one with ffn=off
        say(console, f"|h| went from {result.embed:.2f} to {last:.2f} over {blocks}: "
                     f"each sublayer adds its write to the stream, none replaces it")
        reads = [w.norm.size_out for w in result.writes]
        shrunk = eps_bound(result)
        if not result.normalised:
            note(console, f"every sublayer read the stream itself, of size {min(reads):.2g}..{max(reads):.2g}: "
                          "with no norm its scale, however it grows, is what the next block's matrices multiply")
        elif not result.unit_rms:  # DyT's tanh, ScaleNorm: "sqrt(d) times the gain" was said of them, untrue
            unknown = "; ? in the scale column: it does not say what it divides by (core.norms.NormPart.frozen)"
            note(console, f"every sublayer read a vector of size {min(reads):.2g}..{max(reads):.2g}: {norm} does not "
                          "state that it scales its input to a fixed size, as LN and RMSNorm do (to sqrt(d) times the "
                          "gain), so these sizes alone say how much of the stream's scale it takes away"
                          + (unknown if any(w.norm.scale is None for w in result.writes) else ""))
        elif shrunk is None:
            note(console, f"yet every sublayer read a vector of size {min(reads):.1f}..{max(reads):.1f} "
                          f"(sqrt(d) = {math.sqrt(result.d_model):.1f}" + (" times the gain" if result.norm_gain else
                                                                        ": norm_gain=off, no gain scales it")
                          + "): the norm takes the stream's scale "
                          f"away, so a block's input does not grow with depth")
        else:  # a large norm_eps (or a tiny stream): s is about sqrt(eps), and the norm hands the stream on scaled
            note(console, f"every sublayer read a vector of size {min(reads):.2g}..{max(reads):.2g}, not sqrt(d) = "
                          f"{math.sqrt(result.d_model):.1f}: the eps under the norm's square root outweighs the "
                          f"stream's spread (x̂ comes out {shrunk:.2g} of sqrt(d) long at the least), so the norm "
                          f"divides by about sqrt(eps) and leaves the stream's scale in")
    elif not pre:
        note(console, "each add is normalised at once, so |h| after every sublayer is the norm's output size")
    if result.final is not None:
        head = "W_U = W_E: the head is tied" if result.tied else "W_U: the head's own matrix, tie_embeddings=off"
        if result.normalised:
            note(console, f"final: {norm}_f(h_L) is what the output head reads: logits = {norm}_f(h_L) W_U^T ({head})")
        else:
            note(console, f"final: no norm, the output head reads h_L itself: logits = h_L W_U^T ({head})")
    # each line on the same text and position, which a bare `:ln` or `:attrib` read elsewhere (the data's sample)
    prompt = (typeable_prompt(result.prompt) if result.retyped else None) or "PROMPT"
    last = result.at == len(result.tokens) - 1
    ln = cmd("ln", prompt, **({} if last else {"at": result.at}), layer=result.writes[-1].block,
             which="ln_2" if result.ffn else "ln_1")
    if result.normalised:  # norm=none has no norm for :ln to work out
        note(console, f"{ln} works one of these norms out step by step, feature by feature")
    # :attrib splits only a stream that is the sum of its writes (core.attribution.check_pre_norm refuses the rest),
    # at a text's last position: this one, or the last of the text up to it
    upto = prompt if last else typeable_prompt(result.upto or "")
    attrib = f"{cmd('attrib', upto)} shows which of these writes push the next token" if upto else ""
    split = f"; {attrib}" if attrib and pre and result.residual else ""
    if cosine:
        note(console, f"cos(f, h): along the stream (> 0), against it (< 0), or about 0: a new direction{split}")
    elif split:
        note(console, attrib)
    closing_notes(console, result, "its writes are random", "resid")


def eps_bound(result: ResidResult) -> float | None:
    """The shortest |x̂| / sqrt(d) among the norms :resid shows, where one falls short of 1 by more than 5%: the
    eps under the square root outweighs the spread (:ln says so at one norm); None where every norm scales its
    input to sqrt(d), or a norm does not say what it divided by, or there is no norm (norm=none divides by 1)."""
    if not result.normalised:
        return None
    reads = [w.norm for w in result.writes] + ([result.final] if result.final is not None else [])
    return eps_share(reads, result.d_model, result.norm_scale == "std")


def eps_share(reads: list, d_model: int, centres: bool) -> float | None:
    """eps_bound of norms' readings (core.inside.NormRead): the shortest spread / s where under 0.95, else None."""
    shares = []
    for r in reads:
        if r.scale is None or r.scale <= 0:
            return None
        square = r.size_in ** 2 / d_model  # mean(x^2); LayerNorm's variance subtracts mean^2
        spread = math.sqrt(max(square - r.mean ** 2, 0.0) if centres else square)
        shares.append(spread / r.scale)
    least = min(shares, default=1.0)
    return least if least < 0.95 else None


# --- :ln -----------------------------------------------------------------------------------------
@dataclass
class LnResult:
    prompt: str  # the text read (its last max_seq_len tokens)
    tokens: list[str]  # the text read, one token per position (a BPE's lone byte as its escape, \xe2)
    norm: NormWorked  # the norm at the position, step by step, and every position through it
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    # no training here nor weights from elsewhere: gains 1 and biases 0 as initialised, the stream it reads random
    untrained: bool = False
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran


def said_all(k: int | None, n: int, what: str, reporter: Reporter) -> None:
    """A k past the n there are lists them all: said, so that `k=500` of 128 features is not read as 500 rows."""
    if k is not None and k > n:
        reporter.notice(f"k={k:,} is more than the {count(n, what)} there are: all {n:,} are listed")


@command("ln", "One norm worked out at one position, feature by feature: a layernorm centres, divides by the spread, "
               "adds gain and bias; an rmsnorm divides by the root mean square and adds a gain; where eps is small, "
               "every position comes out about the same size.", aliases=("layernorm",), params=[
    VIEW_TEXT,
    LAST_POSITION,
    BLOCK,
    Param("which", str, choices=("ln_1", "ln_2", "ln_f"),
          help="which norm: ln_1 (before attention, the default), ln_2 (before the FFN), ln_f (the final one, "
               "before the head)"),
    Param("k", int, help="features listed, the largest |x_j| first (default 8)", low=1, limit=4096),
], guide="inside-views.md#one-norm-step-by-step-ln", topics=("ln_1", "ln_2", "ln_f"))  # fmt: skip
def cmd_ln(session: Session, args: dict, reporter: Reporter) -> LnResult:
    layer = check_layer(session, args["layer"])
    if not norm_kind(session.model_config).normalises:  # its kind declares it the identity: no arithmetic to show
        raise UserError(f"there is no norm to work out: norm={session.model_config.norm} hands the stream on as it "
                        f"is; {cmd('set', norm='layernorm')} (or rmsnorm) builds a model with one")
    text, ids, dropped, at = read_at(session, "ln", args, reporter)
    from ..core.inside import norm_worked

    worked = norm_worked(session.model, ids, layer=layer, which=args["which"] or "ln_1", at=at, top=args["k"] or 8)
    said_all(args["k"], worked.d, "feature", reporter)
    if worked.layer is None and args["layer"] is not None:  # the final norm sits in no block
        reporter.notice(f"layer={layer} does not apply to {worked.which}, the one norm after the last block; it "
                        "was left out")
    from ..core.bpe import shown_pieces  # a byte of a longer character as its escape (\xe4), as :tok names it

    return LnResult(prompt=text, tokens=shown_pieces(session.data.tokenizer, ids), norm=worked, dropped=dropped,
                    unit=session.data.tokenizer.unit, untrained=session.untrained, ablations=switched_off(session))


@render.register(LnResult)
def render_ln(result: LnResult, console: Console) -> None:
    n, i = result.norm, result.norm.at
    where = "(the final norm)" if n.layer is None else f"of block {n.layer}"
    say(console, f"{n.label} {n.which} {where} at position {i} {quoted(result.tokens[i])} of "
                 f"{quoted_end(result.prompt, 48)}", "bold")
    note(console, f"it reads {n.reads}; its output goes to {n.feeds}")
    g = " * g" if n.gain is not None else ""
    b = " + b" if n.bias_size is not None else ""
    rule = (f"(x - mean(x)) / sqrt(var(x) + eps){g}{b}" if n.centres else f"x / sqrt(mean(x^2) + eps){g}{b}")
    say(console, f"{n.label}(x) = {rule}, over the d = {n.d} features of one position")

    def step(text: str) -> None:  # the steps, two cells in: a long one wraps under its formula, 8 cells past the
        say(console, text, indent=2, hang=8)  # label (at 2 cells, at 80 columns, "std 1.000" stood under "scale")

    step(f"x       |x| = {n.size_in:.3f}   mean(x) = {n.mean:+.4f}")
    if n.centres:
        step(f"centre  x - mean(x): |x - mean| = {n.size_centred:.3f}, mean 0")
        spread = f"var(x) = mean((x - mean)^2) = {n.var:.4g}"
    else:
        spread = f"mean(x^2) = {n.mean_square:.4g} (nothing subtracted)"
    step(f"scale   {spread}; s = sqrt({'var' if n.centres else 'mean(x^2)'} + eps) = {n.scale:.4g}")
    step(f"        x̂ = {'(x - mean)' if n.centres else 'x'} / s: |x̂| = {n.size_normalised:.3f} (sqrt(d) = "
         f"{math.sqrt(n.d):.3f}), mean {fmt.signed(n.normalised_mean)}, std {n.normalised_std:.3f}")
    if n.gain is not None:
        low, mean, high = n.gain
        bias = f", |b| = {n.bias_size:.3f}" if n.bias_size is not None else ""
        step(f"gain    y = x̂ * g{b}: g from {low:.3f} to {high:.3f} (mean {mean:.3f}){bias}; "
             f"|y| = {n.size_out:.3f}")
    else:
        step(f"y = x̂: norm_gain=off, the norm learns nothing; |y| = {n.size_out:.3f}")

    names = ["feature j", "x_j", "x_j - mean" if n.centres else None, "x̂_j", "g_j" if n.gain is not None else None,
             "b_j" if n.bias_size is not None else None, "y_j"]
    keep = [k for k, name in enumerate(names) if name is not None]
    rows = [[str(f.index), f"{f.x:+.4f}", f"{f.centred:+.4f}", f"{f.normalised:+.3f}",
             "" if f.gain is None else f"{f.gain:.3f}", "" if f.bias is None else f"{f.bias:+.3f}", f"{f.out:+.3f}"]
            for f in n.features]
    console.print(fitting_table(console, [names[k] for k in keep], [[row[k] for k in keep] for row in rows],
                                optional=("x_j - mean", "b_j")))
    what = "sum_j (x_j - mean)^2" if n.centres else "sum_j x_j^2"
    if n.centres and n.d == 1:  # the share below would be 0 of 0
        say(console, "with d = 1 the mean is x itself: x - mean(x) is 0 at every position, so y = b whatever x is, and "
                     "nothing after this norm can tell one input from another", "yellow")
    else:
        these = "this 1 feature" if len(n.features) == 1 else f"these {len(n.features):,} features"
        say(console, f"{these} of {n.d} (the largest |x_j|) {'carries' if len(n.features) == 1 else 'carry'} "
                     f"{n.features_share:.0%} of {what}: the largest features set the scale s that every feature is "
                     "divided by")

    sizes = [p.size_in for p in n.positions]
    outs = [p.size_out for p in n.positions]
    width = max(8, min(len(sizes), console.width - 40))
    if len(sizes) > 1:
        say(console, f"every position t = 0..{len(sizes) - 1} through {n.which}:")
        say(console, f"  |x_t| {spark(sizes, width)} {spark_scale(sizes, width)}", hang=8)
        say(console, f"  |y_t| {spark(outs, width)} {spark_scale(outs, width)}", hang=8)
        largest = max(range(len(sizes)), key=sizes.__getitem__)
        hats = [p.size_normalised for p in n.positions]
        note(console, f"|x_t| varies {_spread(sizes):.2f}x across the positions (the largest at t = {largest} "
                      f"{quoted(result.tokens[largest])}); each is divided by its own s "
                      f"({min(p.scale for p in n.positions):.3g} to {max(p.scale for p in n.positions):.3g}), so "
                      f"|x̂_t| varies {_spread(hats):.2f}x and |y_t| {_spread(outs):.2f}x"
                      + (f" ({'the gain and bias weigh' if n.bias_size is not None else 'the gain weighs'} each "
                         "position's features differently)" if abs(_spread(outs) / _spread(hats) - 1) > 0.01 else "")
                      + (": what reads the norm never sees the stream's scale" if _spread(hats) < 1.05 else
                         ": eps keeps part of each position's scale in |x̂_t|, as the spread is not large against "
                         "it"))
    # the bracket gives what the other norm's root reads (an RMSNorm's said mean(x^2), which it had, for var); the
    # reason names mean^2 against var, the share that decides it (a mean 0.25 of the spread was said to be "small")
    other = (f"RMSNorm would divide by rms(x) = sqrt(mean(x^2) + eps) (mean(x^2) = var + mean^2 = {n.mean_square:.4g})"
             if n.centres else "LayerNorm would subtract the mean first, then divide by std(x) = sqrt(var(x) + eps) "
             f"(var(x) = mean(x^2) - mean^2 = {n.var:.4g})")
    change = abs(n.other_scale - n.scale) / max(n.scale, 1e-300)
    note(console, f"{other} = {n.other_scale:.4g}: {_percent(change)} "
                  f"{'larger' if n.other_scale >= n.scale else 'smaller'} here, as mean^2 is "
                  f"{_percent(n.mean ** 2 / max(n.var, 1e-300))} of var")
    square = n.var if n.centres else n.mean_square
    without = math.sqrt(square)
    share = (n.scale - without) / max(n.scale, 1e-300)
    # eps is small against a trained stream's spread; a large norm_eps, or a tiny stream, makes it count
    where = ("it matters only where the spread is near 0" if share < 0.05 else
             f"here it matters: the spread is not large against eps, so |x̂| comes out under sqrt(d) "
             f"({n.size_normalised:.3f} against {math.sqrt(n.d):.3f})")
    note(console, f"eps = {n.eps:.0e} sits under the square root so that s is never 0: without it s would be "
                  f"{without:.4g}, {_percent(share)} smaller; {where}")  # was "(0.00038 of s)": read as the size
    note(console, f"checked: redone here in float64, y agrees with the model's own {n.which} output to "
                  f"{n.model_diff:.0e} ({rounding(n.model_diff, result.ablations, norm_out_size(n), 'y_j')})")
    learned = ("the stream it reads is random (the norm itself learns nothing)" if n.gain is None else
               "its gains are 1 and its biases 0, so y is x̂" if n.bias_size is not None else
               "its gains are 1, so y is x̂")
    closing_notes(console, result, learned, "ln")


def _percent(share: float) -> str:
    """A share as a percentage, 2 digits where small ("0.038%"), whole from 10% ("150%": .2g wrote "1.5e+02%")."""
    return f"{100 * share:.2g}%" if 100 * share < 10 else f"{100 * share:.0f}%"


# --- :ffn ----------------------------------------------------------------------------------------
@dataclass
class FfnUnit:
    index: int  # n
    pre: float  # its pre-activation (x W_1 + b_1)_n (SwiGLU: the gate's)
    h: float  # its activation u_n (the views write u: h is the residual stream; the key keeps its name)
    write: float  # |u_n v_n|
    promotes: list[str] | None  # the tokens whose logit its write raises most (None: post-norm); a lone byte as \\xe2
    # the logit change its write makes to each of `promotes`, in order (> 0; read through the final norm frozen at this
    # input); None where promotes is None
    promote_by: list[float] | None
    demotes: list[str] | None  # the tokens whose logit it lowers most
    demote_by: list[float] | None  # the logit change to each of `demotes`, in order (< 0); None where demotes is


@dataclass
class FfnResult:
    prompt: str  # the text read (its last max_seq_len tokens)
    tokens: list[str]  # the text read, one token per position (a BPE's lone byte as its escape, \xe2)
    layer: int  # the block whose feed-forward part is shown (default 0)
    at: int  # the position shown
    hidden: str  # the formula of the hidden layer u, as the part states it
    pre_name: str  # the formula of the pre-activation: "xW_1 + b_1" (SwiGLU: its gate's, "xW_g")
    below_zero: str  # what a u_n below 0 means for this part
    width: int  # hidden units
    positive: int  # units with u_n > 0
    negative: int  # units with u_n < 0
    lowest: float  # the most negative u_n
    total_write: float  # sum_n |u_n v_n|
    out_size: float  # |FFN(x)|
    units: list[FfnUnit]  # the units with the largest writes, largest first
    out_diff: float  # max |sum_n u_n v_n + b - the block's FFN output|
    out_bias: bool  # the output matrix has a bias b (False: bias=off, FFN(x) = sum_n u_n v_n)
    no_tokens: str | None = None  # why no unit's tokens are shown (post-norm, residual=off); None: they are
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # no training here nor weights from elsewhere: its units are random
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    # the final norm normalises, as its kind declares (core.variants.NormKind.normalises); norm=none: the head reads
    # the stream itself, and the tokens' note speaks of no norm
    normalised: bool = field(default=True, metadata={"view_only": True})


@command("ffn", "The feed-forward at one position as a sum of its hidden units' writes: which fire, how much each "
                "adds, which tokens each pushes.", params=[
    VIEW_TEXT,
    LAST_POSITION,
    BLOCK,
    Param("k", int, help="hidden units listed, the largest writes first (default 8)", low=1, limit=4096),
], json_version=4, guide="inside-views.md#the-feed-forward-as-a-sum-of-its-units-ffn",
   topics=("mlp", "c_fc", "c_proj", "gelu"))  # fmt: skip
def cmd_ffn(session: Session, args: dict, reporter: Reporter) -> FfnResult:
    layer = check_layer(session, args["layer"])
    text, ids, dropped, at = read_at(session, "ffn", args, reporter)
    config = session.model_config
    if not config.ffn:  # as the config declares it: its blocks were built with no feed-forward to read
        raise UserError(f"this model has no feed-forward network: ffn=off built its blocks of attention alone; "
                        f"{cmd('set', ffn='on')} builds one into every block (a new model: its weights start again)")
    if config.is_moe:  # the core refuses any part without neurons(); this one has a view of its own to name
        raise UserError(f"block {layer}'s feed-forward is a mixture of {config.n_experts} experts, each token routed "
                        f"to {config.experts_per_token} of them, with no one set of hidden units to list; "
                        f"{cmd('experts')} shows where the tokens go")
    from ..core.inside import feed_forward_neurons

    found = feed_forward_neurons(session.model, ids, layer=layer, at=at, top=args["k"] or 8)
    said_all(args["k"], found.width, "hidden unit", reporter)
    from ..core.bpe import shown_piece

    tokenizer = session.data.tokenizer

    def names(ids: list[int] | None) -> list[str] | None:  # a BPE's lone bytes as escapes (\\xe2), not "�"
        return None if ids is None else [shown_piece(tokenizer, i) for i in ids]

    def signed(ids: list[int] | None, by: list[float] | None, sign: int) -> tuple:
        """The tokens a unit moves that way only: of 4 tokens the top 3 raised and the top 3 lowered overlap, and
        "raises" listed "d -0.00" (a token it lowers), "lowers" "b +0.00"."""
        if ids is None or by is None:
            return names(ids), by
        kept = [(i, v) for i, v in zip(ids, by) if v * sign > 0]
        return names([i for i, _ in kept]), [v for _, v in kept]

    units = [FfnUnit(n.index, n.pre, n.h, n.write, *signed(n.promotes, n.promote_by, 1),
                     *signed(n.demotes, n.demote_by, -1)) for n in found.neurons]
    return FfnResult(prompt=text, tokens=names(ids), layer=layer, at=found.at, hidden=found.hidden,
                     pre_name=found.pre_name, below_zero=found.below_zero, width=found.width, positive=found.positive,
                     negative=found.negative, lowest=found.lowest, total_write=found.total_write,
                     out_size=found.out_size, units=units, out_diff=found.out_diff, out_bias=found.out_bias,
                     no_tokens=found.no_tokens, dropped=dropped, unit=session.data.tokenizer.unit,
                     untrained=session.untrained, ablations=switched_off(session),
                     normalised=norm_kind(session.model_config).normalises)


@render.register(FfnResult)
def render_ffn(result: FfnResult, console: Console) -> None:
    i = result.at
    say(console, f"feed-forward of block {result.layer} at position {i} {quoted(result.tokens[i])} of "
                 f"{quoted_end(result.prompt, 48)}", "bold")
    rebuilt = "sum_n u_n v_n" + (" + b" if result.out_bias else "")  # no b where the output matrix has no bias
    # u, not h: h is the residual stream in every other view. b said, beside b_1 (or b_g) in u's formula: the part
    # does not state what its own formulas call the output bias (:shapes' b_2, SwiGLU's b_d), so the view names it by
    # its role
    bias = " and b its bias" if result.out_bias else ""
    note(console, f"u = {result.hidden}: {result.width} hidden units; FFN(x) = {rebuilt}, v_n the column n of "
                  f"the output matrix{bias}: each unit adds its own vector, scaled by how much it fires")
    negative = (f"{result.negative} below 0, the lowest {result.lowest:.3f}" if result.negative else "none below 0")
    # the rest are exactly 0: ReLU's for every negative input, and GELU's far left, which float32 rounds to 0 (the
    # counts summed to 511 of 512 with nothing said of the one)
    zero = result.width - result.positive - result.negative
    negative += f", {zero} at exactly 0" if zero else ""
    say(console, f"firing (u_n > 0): {result.positive} of {result.width} ({result.positive / result.width:.0%}); "
                 f"{negative} ({result.below_zero})")
    tied = result.units and result.units[0].promotes is not None
    rows = []
    for u in result.units:
        up = "  ".join(f"{visible(t)} {v:+.2f}" for t, v in zip(u.promotes, u.promote_by)) if tied else ""
        down = "  ".join(f"{visible(t)} {v:+.2f}" for t, v in zip(u.demotes, u.demote_by)) if tied else ""
        rows.append([str(u.index), f"{u.pre:+.3f}", f"{u.h:+.3f}", f"{u.write:.3f}",
                     f"{u.write / max(result.total_write, 1e-12):.1%}", Text(up, style="green"),
                     Text(down, style="red")])
    names = ["unit n", result.pre_name.replace(" ", ""), "u_n", "|u_n v_n|", "share", "raises the logit of", "lowers"]
    optional = ("share", names[1], "lowers", "raises the logit of") if tied else ("share", names[1])
    if not tied:
        names, rows = names[:5], [row[:5] for row in rows]
    # the caption names every column the width took: share and the pre-activation went at 100 columns unsaid, when
    # only the tokens' columns were said in the view's own words
    table = fitting_table(console, names, rows, left=("raises the logit of", "lowers"), optional=optional)
    console.print(table)
    shown = shown_columns(table)
    listed = sum(u.write for u in result.units)
    these = "this 1 unit writes" if len(result.units) == 1 else f"these {len(result.units):,} units write"
    say(console, f"{these} {listed / max(result.total_write, 1e-12):.0%} of "
                 f"sum_n |u_n v_n| = {result.total_write:.2f}; the sum itself has length |FFN(x)| = "
                 f"{result.out_size:.2f}" + _cancelling(result.out_size / max(result.total_write, 1e-12)))
    if "share" in shown:
        note(console, f"share: the unit's |u_n v_n| as a part of sum_n |u_n v_n| over all {result.width} units")
    if tied:  # said where the width left the tokens' columns out too (the caption names them): what they would show
        tokens = "raises/lowers" if "lowers" in shown or "raises the logit of" not in shown else "raises"
        through = "the final norm frozen at this input" if result.normalised else "the output head (no final norm)"
        note(console, f"{tokens}: the logits each write moves most, read through {through} (as {cmd('attrib')} "
                      "reads a part)")
    elif result.no_tokens:
        note(console, f"{result.no_tokens}: no tokens are shown")
    note(console, f"checked: {rebuilt} agrees with the block's FFN output to {result.out_diff:.0e}")
    closing_notes(console, result, "its units are random", "ffn")


def _angle(angle: float) -> str:
    """A pair's turn (j - i)θ_c in radians: 3 decimals, and a slow pair's turn under 0.0005 in e-notation with its
    sign (it showed "-0.000", and "+0.000" would give the turns of a key before the query the wrong sign)."""
    return fmt.signed(angle) if angle == 0 or round(angle, 3) else f"{angle:+.1e}"


def _same_token_apart(tokens: list[str], r: RopeWorked, listed: list[int]) -> tuple[int, int] | None:
    """Two of the `listed` keys with one token and the same unrotated q·k (in the first layer, always; later, where
    the two agree), the pair whose rotated scores differ most; None if there are no such two."""
    best, found = 0.0, None
    for n, a in enumerate(listed):
        for b in listed[n + 1:]:
            same = abs(r.keys[a].unrotated - r.keys[b].unrotated) < 1e-6 * max(1.0, abs(r.keys[a].unrotated))
            if tokens[a] == tokens[b] and same and abs(r.keys[a].dot - r.keys[b].dot) > best:
                best, found = abs(r.keys[a].dot - r.keys[b].dot), (a, b)
    return found


def norm_out_size(n) -> float:
    """The largest |y_j| a norm's view holds (core.inside.NormWorked): its features' (those of the largest |x_j|) and
    y's RMS, |y| / sqrt(d). At most max |y_j|, so the difference said relative to it is never understated."""
    return max([abs(f.out) for f in n.features] + [n.size_out / math.sqrt(max(n.d, 1))])


def _spread(sizes: list[float]) -> float:
    """How many times the largest of `sizes` is the smallest (1 where all are 0: d_model=1's x̂, which is 0 at every
    position, once divided 0 by 0 in :ln)."""
    return max(sizes) / max(min(sizes), 1e-300) if max(sizes) > 0 else 1.0


def _cancelling(ratio: float) -> str:
    """What |sum of the writes| / sum of |writes| says: 1 when they all point one way, near 0 when they cancel."""
    return ": the writes mostly cancel" if ratio < 0.3 else ": the writes partly cancel" if ratio < 0.7 else ""


# --- :kv -----------------------------------------------------------------------------------------
KV_HEAD, KV_TAIL = 6, 8  # a run longer than both lists its first and last steps, the middle in one line
@dataclass
class KvStep:
    token: str  # the token picked (greedy; a BPE's lone byte as its escape, \\xe2)
    cached_token: str  # the cached loop's own pick: the same unless two logits tie within rounding
    cached_positions: int  # positions the cached loop ran through the model this step
    naive_positions: int  # positions the naive loop ran
    cache_length: int  # keys and values per layer in the cache after the step
    refilled: bool  # the cache was filled from scratch: the first step, or the window slid
    logit_diff: float  # max |cached - naive logits|
    # max |naive logits| at the step: float32 rounds in proportion to it, so the difference is judged against it
    logit_size: float = 0.0


@dataclass
class KvResult:
    prompt: str  # the prompt read (its last max_seq_len tokens)
    steps: list[KvStep]  # one row per decoding step, in order (fewer than `asked` where a Ctrl-C stopped it)
    max_seq_len: int  # the model's window: past it the cached loop refills its cache from the last max_seq_len tokens
    n_layers: int  # blocks, each with its own K and V in the cache
    n_kv_heads: int  # key/value heads per layer that the cache keeps (n_heads; fewer under GQA, 1 under MQA)
    head_dim: int  # d_k: the numbers of one head's key or value (d_model / n_heads)
    cache_bytes_per_token: int  # K and V of every layer for one position
    cached_seconds: float  # the cached loop's wall time, measured in this run
    naive_seconds: float  # the naive loop's wall time, in seconds, measured in this run
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # no training here nor weights from elsewhere: the greedy picks are random weights'
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    int8: bool = False  # decoded with the int8 copy that :gen samples from (:quantize int8)
    causal: bool = True  # the causal mask is on; off, the cache is not exact and the two loops disagree
    positions: bool = True  # the model places tokens (a table, or RoPE's turn); False: none, or :ablate positions
    asked: int | None = None  # the tokens asked for (n): more than `steps` where a Ctrl-C stopped it
    rotary: bool = False  # the positions are RoPE's turns, which a score reads as distances, not where tokens stand


@command("kv", "Decode with the KV cache and without, step by step: what each step computes, what the cache holds, "
               "that both give the same logits.", params=[
    Param("prompt", str, help=f"text to continue {VIEW_DEFAULT}", positional=True),
    Param("n", int, help="tokens to decode, greedily (default 8)", low=1, limit=1024, short="n"),
], json_version=7, guide="inside-views.md#decoding-with-the-kv-cache-kv",
   # listed with :gen and :step by `:help gen`, `:help decoding`, ...: :kv stays under "worked out by hand", where
   # the other views that work a formula out step by step are
   topics=SAMPLING_TOPICS,
   # `minitf kv seed=1` was told to give the training seed with --set, which changes no pick of a loaded model
   elsewhere={"seed": lambda: f"{cmd('kv')} decodes greedily, so no seed decides its tokens; seed is the training "
                              f"seed, which makes a fresh model's first weights (a loaded checkpoint keeps its own), "
                              f"and {cmd('gen', seed=1)} seeds sampling"})  # fmt: skip
def cmd_kv(session: Session, args: dict, reporter: Reporter) -> KvResult:
    text, ids, dropped = view_prompt(session, args["prompt"], reporter, noted=True)  # closing_notes says it
    if not ids:
        raise UserError(f"give some text, e.g. {cmd('kv', sample_prompt(session.data))}")
    from ..core.inside import cached_decoding

    model = session.sampling_model  # what :gen decodes: the int8 copy while :quantize int8 is on
    asked = args["n"] or 8
    found = cached_decoding(model, ids, n=asked, should_stop=reporter.should_stop,
                            on_step=lambda done, total: reporter.on_progress("kv", done, total))
    if not found.steps:  # a stop (Ctrl-C, SIGTERM) before the first step: an interrupted command, which the front
        # end says and ends with 130 or 143, as every other (a user error ended with 1 and a hint of `--n 8`)
        raise KeyboardInterrupt
    config = session.model_config
    from ..core.variants import position_kind

    kind = position_kind(config)
    placed = (kind.table is not None or kind.rotary) and not any(a.kind == "positions" for a in session.ablations)
    from ..core.bpe import shown_piece

    def name(i: int) -> str:  # a BPE's lone bytes as escapes: "�" for two different bytes hid a disagreement
        return shown_piece(session.data.tokenizer, i)

    steps = [KvStep(name(s.token), name(s.cached_token), s.cached_positions, s.naive_positions, s.cache_length,
                    s.refilled, s.logit_diff, s.logit_size) for s in found.steps]
    return KvResult(prompt=text, steps=steps, max_seq_len=config.max_seq_len, n_layers=config.n_layers,
                    n_kv_heads=config.kv_heads, head_dim=config.head_dim,
                    cache_bytes_per_token=found.cache_bytes_per_token, cached_seconds=found.cached_seconds,
                    naive_seconds=found.naive_seconds, dropped=dropped, unit=session.data.tokenizer.unit,
                    untrained=session.untrained, ablations=switched_off(session), int8=model is not session.model,
                    causal=model.causal, positions=placed, asked=asked, rotary=placed and kind.rotary)


@render.register(KvResult)
def render_kv(result: KvResult, console: Console) -> None:
    n = len(result.steps)
    if result.asked is not None and n < result.asked:
        say(console, f"stopped after {n} of the {count(result.asked, 'token')} asked for; both loops took those "
                     "steps", "yellow")  # by Ctrl-C or a SIGTERM: not said as a key nobody may have pressed
    say(console, f"decoding {count(n, 'token')} after {quoted_end(result.prompt, 48)}, greedily, with the KV cache and "
                 "without", "bold")
    note(console, "with the cache a step feeds only the newest token: its k and v are appended to the cache and its "
                  "q reads every cached key; without, every step runs the whole text again")
    if result.int8:
        note(console, f"the int8 copy {cmd('gen')} samples from ({cmd('quantize', 'off')} goes back to the float model)")
    rows = []
    shown = {t for t in range(n) if t < KV_HEAD or t >= n - KV_TAIL}  # a long run: its middle in a line
    # but the step where the window first slides and the one before it, which a middle cut hid (`:kv n=60` showed
    # every step of its tail as a fill, its first at 49 left out)
    slide = next((t for t, s in enumerate(result.steps) if t and s.refilled), None)
    shown |= {slide - 1, slide} if slide is not None else set()
    shown |= {t for t in range(n) if t - 1 in shown and (t + 1 in shown or t + 2 in shown)}  # a cut of a step or two:
    shown |= {t for t in range(n) if t - 1 in shown and t + 1 in shown}  # the steps, not a line naming them
    for t, s in enumerate(result.steps):
        if t not in shown:
            if t == 0 or t - 1 in shown:
                end = next((u for u in range(t, n) if u + 1 in shown or u + 1 == n), n - 1)
                # under the widest header, not the tokens': there it widened their column to its own width, and
                # `:kv n=60` lost "cache holds" at 80 columns, where ten steps showed every column
                rows.append(["…", "", Text(f"steps {t}..{end}", style="dim"), "", "", ""])
            continue
        fed = Text(f"{s.cached_positions}" + (" (fill)" if s.refilled else ""), style="cyan" if s.refilled else "")
        pick = visible(s.token) + ("" if s.cached_token == s.token else f" (cached: {visible(s.cached_token)})")
        rows.append([str(t), pick, fed, str(s.naive_positions), str(s.cache_length),
                     f"{s.logit_diff:.0e}" if s.logit_diff else "0"])
    names = ["step", "token", "cached: positions run", "naive", "cache holds", "max |Δ logit|"]
    # Narrow: the sums below say how many positions each ran and how closely the logits agreed overall.
    console.print(fitting_table(console, names, rows, left=("token",), optional=("cache holds", "max |Δ logit|")))
    cached = sum(s.cached_positions for s in result.steps)
    naive = sum(s.naive_positions for s in result.steps)
    # the step whose difference is largest against its own logits' size: float32 rounds each step's logits in
    # proportion to their size, which a model a huge rate blew up puts at 1e11
    worst = max(result.steps, key=lambda s: s.logit_diff / max(1.0, s.logit_size))
    largest = worst.logit_diff
    why = ("more than rounding: without the mask the cache is not exact, below"
           if not rounded(largest, worst.logit_size) and not result.causal
           else rounding(largest, result.ablations, worst.logit_size, "logit"))
    agree = f"agree to {largest:.0e} ({why})" if largest else "agree exactly, bit for bit"
    say(console, f"positions run through the model: {cached} with the cache, {naive} without "
                 f"({naive / max(cached, 1):.1f}x); the logits {agree}")
    length = result.steps[-1].cache_length
    size = result.cache_bytes_per_token * length
    # core.model.LayerKV allocates its buffers once for the whole window: that, not what is filled, is the memory
    allocated = result.cache_bytes_per_token * result.max_seq_len
    window = (f"; its buffers take {fmt.size(allocated)}, allocated at the first step for the whole window of "
              f"{result.max_seq_len:,} positions (what {cmd('params')} counts)" if allocated > size else "")
    note(console, f"the cache holds {fmt.size(size)} after the last step: {fmt.size(result.cache_bytes_per_token)} "
                  f"a position ({count(result.n_layers, 'layer')} x K and V x "
                  f"{count(result.n_kv_heads, 'key/value head')} x {result.head_dim} numbers) x {length}{window}")
    faster = result.naive_seconds / max(result.cached_seconds, 1e-9)
    # not "a small model's": a 12 x 768 model decoding a few dozen positions is no arithmetic-bound step either
    # where the cache ran as many positions as the naive loop (a prompt past the window refills it every step), it
    # saved nothing to be slow about: "so few positions" was said of 192 positions run both ways
    same = cached >= naive
    # a cache slower than the loop without it was explained as if it had been faster ("a step over so few positions
    # costs mostly...", beside "0.4x"): where it was not faster, that is said first, and why a short run can show it
    why = (": the cache ran as many positions as the loop without it, so it saved no arithmetic, and the two times "
           "differ by its bookkeeping and the machine's noise" if same and faster < 1 else
           ": the cache was not faster in this one short run: over so few positions the time is mostly the "
           "machine's noise and costs that do not grow with them (every weight read once a step, fixed overheads). The "
           "cached loop runs one new position a step where the loop without it runs them all again, so a larger "
           f"{option('n')} shows the difference" if faster < 1 else
           ": a step over so few positions costs mostly what does not grow with them (every weight read once, "
           "fixed overheads), not arithmetic per position" if faster < 0.7 * naive / max(cached, 1) else "")
    note(console, f"measured in this run: {result.cached_seconds * 1e3:.1f} ms with the cache, "
                  f"{result.naive_seconds * 1e3:.1f} ms without, {faster:.1f}x{why}")
    if any(s.refilled for s in result.steps[1:]):
        if result.positions and not result.rotary:
            why = "positions are absolute, so every cached key would change and the cache is filled again"
        elif result.rotary and result.n_layers == 1:  # a score reads distances: the keys need not move, yet
            why = ("RoPE's scores read distances, not where tokens stand, so with one layer only the dropped token's "
                   "k and v would need to go; the cache is filled again all the same")
        elif result.n_layers > 1:  # RoPE's too: "absolute" said the opposite of what :rope shows
            first = "RoPE reads distances, not where tokens stand" if result.rotary else "there are no positions here"
            why = (f"{first}, but the token that falls out was read by every later one, so from the second layer on "
                   "every cached key and value would change and the cache is filled again")
        else:
            why = ("with no positions and one layer each cached k and v is made from its own token alone, so only "
                   "the dropped token's would need to go; the cache is filled again all the same")
        note(console, f"past max_seq_len = {result.max_seq_len} the window slides: {why} (as {named('gen')} does)")
    closing_notes(console, result)
    if not result.causal and result.n_layers == 1:
        note(console, "no causal mask, and still exact: one layer's keys and values are made from the embeddings "
                      "alone, which no later token changes")
    elif not result.causal:
        say(console, "no causal mask: the cache is not exact. Each position's k and v were cached when it was the "
                     "newest, before later tokens came; without the mask those later tokens change them (from the "
                     f"second layer on, whose keys read the layer below), so the naive loop's logits differ. {cmd('gen')} "
                     "recomputes the window every step for such a model", "yellow")
    if result.untrained:
        note(console, "this model has not trained yet: the tokens are noise, the comparison holds all the same")
