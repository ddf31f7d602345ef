"""Views inside the model on one input: `:attn`, `:lens`, `:score`, `:embed`, `:tok`, and the `:report` page.

(Which parts carry an answer, `:patch` and `:attrib`, is commands/why.py; how the next token is picked, `:step`, is
commands/generate.py, with :gen.)

The numbers come from core.inside (attention maps, the next-token microscope, the logit lens) and
core.generate; these commands pick the prompt, check the options and turn the core's tensors into
lists and plain numbers, so that every result is JSON as it stands. Colour where the console has
it; without (NO_COLOR, a pipe, a test console) the same information as characters (render.heatmap).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from rich import box
from rich.columns import Columns
from rich.console import Console, Group
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..core.errors import UserError
from ..core.variants import norm_kind
from ..core.words import count, quoted_end
from ..palette import FOLDED_PLURALS, clusters, columns, folded, piece_cell, quoted, terminal_safe, visible
from ..registry import Param, clip
from ..render import chart, fmt
from ..render.heatmap import (attention_window, before_window_note, cell, column_width, heads_note, heatmap,
                              label_width, legend, plain, reads_future, unscaled, window_note)
from ..render.scatter import grid_size, scatter
from ..render.renderers import render
from ..render.tables import NARROW, add_row, fits
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again, named, option
from .base import (BLOCK, VIEW_TEXT, ablation_note, check_layer, command, complete_head, data_named, default_prompt,
                   known_text, sample_prompt, samples_the_data, switched_off, training_length, true_next, unread_note,
                   view_prompt)
from .context import position_series
from .counting import check_counter, default_counter
from .generate import answer_line, prob_text, task_question
from .train import data_since, history_series, plot_levels
from .worked import position_dwarfs

FAMILY = "inside the model"  # the heading :help lists this module's commands under


# --- :attn ---------------------------------------------------------------------------------------
ATTN_PANELS = 16  # head=all draws at most this many maps (a map is a screen's height of lines); the rest are named
# ... and no more than fill this many lines: 12 heads' maps of a 96-token text, one a row at 100 columns, were 1,180
ATTN_LINES = 200
@dataclass
class AttnResult:
    prompt: str  # the text read (its last max_seq_len characters)
    tokens: list[str]  # what each position reads: one character, or a subword piece
    layer: int  # the block shown
    heads: list[int]  # the heads shown (one, or all)
    n_heads: int  # heads in that block
    # [head][query i][key j]: A = softmax(QK^T/sqrt(d_k) + M); 0 above the diagonal. Each weight is the shortest
    # decimal that reads back as the float32 the model computed (0.29920498, not 0.2992049753665924: a float32 holds
    # about 8 digits, and the rest made a long text's document megabytes)
    maps: list[list[list[float]]]
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    # the model has not trained a step: its q and k are random, so each row spreads its weight near evenly
    untrained: bool = False
    n_layers: int = 1  # blocks in the model: layer= picks one, 0 to n_layers - 1


@command("attn", "Show where each position looks: the attention pattern of a head, or of all heads.", params=[
    VIEW_TEXT,
    BLOCK,
    Param("head", str, help="a head number, or all (default all)", complete=complete_head, meta="N|all"),
], json_version=5, topics=("c_attn", "c_proj"))  # fmt: skip
def cmd_attn(session: Session, args: dict, reporter: Reporter) -> AttnResult:
    layer = check_layer(session, args["layer"])
    n_heads = session.model_config.n_heads
    head = (args["head"] or "all").strip().lower()
    if head == "all":
        heads = list(range(n_heads))
    else:
        try:
            heads = [int(head)]
        except ValueError:
            raise UserError(f"head must be a number in 0..{n_heads - 1} or all, got {clip(head)!r}") from None
        if not 0 <= heads[0] < n_heads:
            raise UserError(f"head must be in 0..{n_heads - 1} or all (the model has {count(n_heads, 'head')}), "
                            f"got {heads[0]}")
    text, ids, dropped = view_prompt(session, args["prompt"], reporter, noted=True)  # unread_note says it

    from ..core.inside import attention_maps

    maps = attention_maps(session.model, ids, layer=layer).maps[0]  # (n_heads, T, T)
    from ..core.bpe import shown_piece

    # a character each, or a subword piece (" the"); a byte of a longer character as its escape (\xe4)
    tokens = [shown_piece(session.data.tokenizer, i) for i in ids]
    return AttnResult(text, tokens, layer, heads, n_heads, [float32_decimals(maps[h]) for h in heads], dropped,
                      session.data.tokenizer.unit, switched_off(session), session.untrained,
                      session.model_config.n_layers)


def float32_decimals(weights) -> list:
    """A float32 tensor as nested lists of the shortest decimals that read back as its float32s (numpy's str of a
    float32): its .tolist() wrote each as the float64 it widens to, 16 or 17 digits, 8 of them noise."""
    import numpy as np

    return weights.numpy().astype(str).astype(np.float64).tolist()


@render.register(AttnResult)
def render_attn(result: AttnResult, console: Console) -> None:
    as_text = unscaled(console)
    T = len(result.tokens)
    single = len(result.heads) == 1
    width = column_width(result.tokens, 2 if single else 1)
    n = attention_window(T, console.width - (0 if single else 2), width, label_width(result.tokens))
    start = T - n
    tokens = result.tokens[start:]
    maps = [[row[start:] for row in m[start:]] for m in result.maps]
    peak = max((w for m in maps for row in m for w in row), default=1.0)
    future = reads_future(result.maps)  # causal off, or :ablate mask
    drawn, panels = result.heads, []
    if not single:  # the maps that fit, first: the heading says which heads are drawn
        shown = list(zip(result.heads, maps))[:ATTN_PANELS]
        panels = [Group(Text(f"head {h}", style="cyan"), heatmap(tokens, m, peak, width, as_text, future, start))
                  for h, m in shown]
        widest = max(Measurement.get(console, console.options, panel).maximum for panel in panels)
        side_by_side = max(1, (console.width + 2) // (widest + 2))  # Columns' padding: 2 between panels
        rows = max(1, ATTN_LINES // (n + 3))  # a panel: its label, the keys' line, n rows, a blank line
        panels = panels[: side_by_side * rows]
        drawn = result.heads[: len(panels)]
    say(console, f"attention, layer {result.layer} of {result.n_layers}, {heads_drawn(drawn, result.n_heads)}",
        "bold")
    note(console, "row i: where position i looks (every key j: nothing masks the future now)" if future
         else "row i: where position i looks (keys 0..i); blank: the masked future")
    if start:
        note(console, window_note(n, T, console.width))
    if single:
        console.print(heatmap(tokens, maps[0], peak, width, as_text, future, start), highlight=False, no_wrap=True,
                      overflow="ignore")
    else:
        console.print(Columns(panels, padding=(1, 2)))
    console.print(legend(peak, as_text, width=console.width), highlight=False)
    if (cut := before_window_note([m for m in result.maps[: len(drawn)]], start)) is not None:
        note(console, cut)
    if (heads := heads_note(tokens)) is not None:  # "012345678901" over an English text read as its characters
        note(console, heads)
    if (elsewhere := attn_elsewhere(result, drawn, n)) is not None:
        note(console, elsewhere)
    if future:
        nxt = [next_token_weight(m) for m in result.maps]
        shares = ", ".join(f"head {h} {w:.2f}" for h, w in zip(result.heads, nxt))
        say(console, f"weight on the next token (j = i+1, the one position i is to predict), averaged over the rows: "
                     f"{shares}")
        if max(nxt) >= 0.5:
            note(console, "a head that reads the next token hands the answer to the prediction: the loss falls "
                          "toward 0, and generation, which has no next token, fails")
    unread_note(console, result)
    if result.untrained:  # a one-shot `minitf attn` after `minitf train` reads a new model, not the one trained
        note(console, f"this model has not trained yet: its q and k are random, so each row spreads its weight near "
                      f"evenly; {look_again('attn', AUTOSAVE_NAME, result.prompt)}")
    head = {"head": result.heads[0]} if single else {}  # one head shown: :qkv works out that one, not head 0
    note(console, f"row i worked out by hand, q.k to softmax: {cmd('qkv', 'TEXT', at='i', layer=result.layer, **head)}")
    # A switched-off head still computes its pattern (its output A_h V_h is what is zeroed); the blocks after it,
    # and a skipped block's, read the ablated stream
    heads_off = any(a.startswith("head") for a in result.ablations)
    ablation_note(console, result.ablations, "these patterns are the ablated model's" + (
        " (a switched-off head's own pattern is still computed: its output A_h V_h is what is zeroed)"
        if heads_off else ""))


def heads_drawn(drawn: list[int], n_heads: int) -> str:
    """The heads a map draws, against the block's: "all 6 heads", "heads 0-1 of 6", "head 3 of 6". "All 12 heads"
    headed a view that drew head 0 alone (the rest did not fit)."""
    if len(drawn) == n_heads and n_heads > 1:
        return f"all {count(n_heads, 'head')}"
    if len(drawn) == 1:
        return f"head {drawn[0]} of {n_heads}"
    return f"heads {drawn[0]}-{drawn[-1]} of {n_heads}"


def attn_elsewhere(result: AttnResult, drawn: list[int], n: int) -> str | None:
    """The one line on what the map leaves out (the heads not drawn, the other layers) and the commands that show
    them, each with the text in its place (TEXT, as the :qkv hint has it: `:attn head=N` alone read the data's
    sample); None where the model has one head and one layer."""
    ways = []
    if result.n_heads > 1 and len(drawn) < result.n_heads:
        ways.append(f"{cmd('attn', 'TEXT', layer=result.layer, head='N')} draws head N (0 to {result.n_heads - 1})")
    if result.n_layers > 1:
        ways.append(f"{cmd('attn', 'TEXT', layer='N')} shows layer N (0 to {result.n_layers - 1})")
    if not ways:
        return None
    hidden = [h for h in result.heads if h not in drawn]
    if not hidden:  # all drawn, or one asked for
        return (f"the model has {count(result.n_layers, 'layer')} of {count(result.n_heads, 'head')}: "
                + "; ".join(ways))
    why = f"at most {ATTN_PANELS} maps" if len(drawn) == ATTN_PANELS else \
        f"as many maps of {n} positions as fit {ATTN_LINES} lines"
    which = f"head {hidden[0]} is" if len(hidden) == 1 else f"heads {hidden[0]}-{hidden[-1]} are"
    return (f"{which} not drawn ({why}): " + "; ".join(ways)
            + f"; {cmd('heads', 'TEXT', layer=result.layer)} says what each head does")


def next_token_weight(weights: list[list[float]]) -> float:
    """A pattern's weight on key j = i+1, averaged over the rows that have one: 0 under the causal mask."""
    T = len(weights)
    return sum(weights[i][i + 1] for i in range(T - 1)) / max(T - 1, 1)


# --- :lens ---------------------------------------------------------------------------------------
@dataclass
class LensRow:
    layer: str  # "embed", "blocks.0", ...
    guesses: list[str]  # the most likely next characters, best first
    probs: list[float]  # each guess's probability, in their order: softmax over the whole vocabulary at this layer
    target_rank: int | None = None  # of the true next token (1 = best); None when unknown
    target_prob: float | None = None  # the target's probability at this layer (as probs'); None when unknown
    skipped: bool = False  # `:ablate block=L` skips this block: it adds nothing, so its row repeats the one above


@dataclass
class LensResult:
    prompt: str  # the text read (its last max_seq_len tokens); if none was given: a sample of the data
    # the true next token, where the data knows it (the default prompt, a task's question), or the one target= named
    target: str | None
    rows: list[LensRow]  # "embed" first, then each block's middle and/or end, in the order they are computed
    at: str = "end"  # where in each block the lens reads: end (after the FFN), mid (after attention), both
    post_norm: bool = False  # norm_placement=post: each block's output is normalised already, and no ln_f reads it
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    unit: str = "character"  # what a token is: a character, or under a subword tokenizer a token (a piece)
    # the token read last, where the head is tied to the embedding and the embed row's best guess is that token
    # itself (a row of W_E tends to score highest against itself); None otherwise
    reads_back: str | None = None
    chosen: bool = field(default=False, metadata={"view_only": True})  # target= named the target: not the truth
    untrained: bool = False  # the model has not trained a step: every layer's guesses are noise
    # the final norm normalises, as its kind declares (core.variants.NormKind.normalises); norm=none: the head reads
    # the stream itself, and the header names no ln_f
    normalised: bool = field(default=True, metadata={"view_only": True})


LENS_AT = ("end", "mid", "both")  # core.inside.LENS_AT, known here before torch has loaded (a test keeps them equal)


@command("lens", "The logit lens: what the model would guess next if it stopped after each layer.", params=[
    VIEW_TEXT,
    Param("at", str, choices=LENS_AT, help="where in each block to read: end (after its FFN, the default), "
                                           "mid (after its attention, before its FFN) or both"),
    Param("target", str, blank=True, meta="CHAR",
          help="the next token whose rank each layer gives, ␣ for a space (default: a task's answer, or the true "
               "next token of the default prompt)"),
], json_version=7, guide="inside-views.md#the-lens-in-the-middle-of-each-block", topics=("lm_head",))  # fmt: skip
def cmd_lens(session: Session, args: dict, reporter: Reporter) -> LensResult:
    from ..core.bpe import shown_piece
    from .why import one_token

    data = session.data
    text, ids, _ = view_prompt(session, args["prompt"], reporter)
    # a typed question of a task has its answer too (as :attrib and :patch take it); a typed text has none unless given
    target = args["target"] if args["target"] is not None else true_next(data, text)
    targets = None
    if args["target"] is not None:
        targets = ids[1:] + [one_token(session, target)]
        target = shown_piece(data.tokenizer, targets[-1])
    elif target is not None and target in data.tokenizer.stoi:
        targets = ids[1:] + [data.tokenizer.stoi[target]]
    else:
        target = None

    from ..core.inside import logit_lens

    top = min(5, data.tokenizer.vocab_size)
    at = args["at"] or "end"
    lens = logit_lens(session.model, ids, top=top, targets=targets, at=at, last_only=True)  # the view shows the last position
    from ..core.ablation import skipped_blocks

    skipped = {f"blocks.{i}" for i in skipped_blocks(session.model)}
    rows = [
        LensRow(layer.name, [shown_piece(data.tokenizer, i) for i in layer.top_ids[-1]], layer.top_probs[-1],
                layer.target_ranks[-1] if layer.target_ranks else None,
                layer.target_probs[-1] if layer.target_probs else None,
                skipped=layer.name.removesuffix(".mid") in skipped)
        for layer in lens.layers
    ]
    last = shown_piece(data.tokenizer, ids[-1])
    first = lens.layers[0] if lens.layers else None  # the embedding's row; compared by id: two byte tokens both
    # shown "�" are two tokens
    echoed = (session.model_config.tie_embeddings and first is not None and len(first.top_ids[-1]) > 0
              and int(first.top_ids[-1][0]) == ids[-1])
    return LensResult(text, target, rows, at, post_norm=session.model_config.norm_placement == "post",
                      ablations=switched_off(session), unit=data.tokenizer.unit, reads_back=last if echoed else None,
                      chosen=args["target"] is not None, untrained=session.untrained,
                      normalised=norm_kind(session.model_config).normalises)


@render.register(LensResult)
def render_lens(result: LensResult, console: Console) -> None:
    which = "the target" if result.chosen else f"the true next {result.unit}"
    target = f"; {which} is {quoted(result.target)}" if result.target is not None else ""
    say(console, f"logit lens at the last position of {quoted_end(result.prompt, 40)}{target}", "bold")
    where = {"end": "", "mid": " (.mid: after its attention, before its FFN)",
             "both": " (.mid: after its attention; then after its FFN)"}[result.at]
    read = ("softmax(lm_head(h)) (norm=none: no norm anywhere, there is no ln_f)" if not result.normalised else
            "softmax(lm_head(h)) (post-norm: every block's output is normalised already, there is no ln_f)"
            if result.post_norm else "softmax(lm_head(ln_f(h)))")
    note(console, f"each layer's residual stream{where} read as if the model ended there: {read}")
    most = max((len(r.guesses) for r in result.rows), default=0)
    with_target = result.target is not None

    def guesses(k: int) -> Table:
        table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("after", no_wrap=True, style="cyan")
        for i in range(k):
            table.add_column(("best guess" if i == 0 else f"#{i + 1}"), no_wrap=True)
        if with_target:
            table.add_column(f"{quoted(result.target)}: rank (p)" if result.chosen else "true: rank (p)",
                             justify="right", no_wrap=True)
        for r in result.rows:
            cells = [Text(r.layer) + (Text(" (skipped)", style="yellow") if r.skipped else "")]
            for ch, p in list(zip(r.guesses, r.probs))[:k]:
                hit = with_target and ch == result.target
                cells.append(Text(f"{piece_cell(visible(ch))} {p:.2f}", style="bold green" if hit else ""))
            cells += [""] * (k - min(k, len(r.guesses)))
            if with_target:
                cells.append("-" if r.target_rank is None else f"{r.target_rank} ({r.target_prob:.2f})")
            add_row(table, *cells)
        return table

    k = most  # as many guesses as fit the width, whole (the true character's rank column says the rest)
    while k > 1 and not fits(console, guesses(k)):
        k -= 1
    console.print(guesses(k))
    more = count(most - k, "more guess", "more guesses")
    last = ("the last row is the model's own prediction" if result.at != "mid"
            else "the model's own prediction is the last block's end (at=end)")
    note(console, last + (f"; a wider terminal shows {more}" if k < most else ""))
    if result.reads_back is not None:  # a learner took the embed row's p = 1.00 for a prediction, or for a fault
        note(console, f"embed's guess is the {result.unit} just read, {quoted(result.reads_back)}: the head is the "
                      "embedding matrix itself (tie_embeddings), and a row of W_E tends to score highest against "
                      "itself, so before any block the stream reads back its own token; the blocks move it toward the "
                      "next")
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: every layer's guesses are noise; "
                      f"{look_again('lens', AUTOSAVE_NAME, result.prompt)}")


# --- :tok ----------------------------------------------------------------------------------------
@dataclass
class TokMerge:
    """One BPE merge in one piece: two tokens become one, everywhere they stand side by side."""

    # the left one of the two tokens merged, as it reads alone (a byte of a character it does not complete as its
    # escape, \\xe2)
    left: str
    right: str  # the right one, shown as left is
    rank: int  # when the merge was learned (0 first)
    tokens: list[str]  # the piece's tokens after it


@dataclass
class TokPiece:
    """One piece the pre-tokenizer cut the text into, from its bytes to its tokens."""

    start: list[str]  # its bytes, a token each (one that is no whole character as its escape, \\xe2)
    # its merges in the order applied, each the pair learned first among those side by side; empty: none applies
    merges: list[TokMerge]
    whole: bool = False  # in the vocabulary as it stands: taken as one token, no merges (Llama 3's tokenizers)
    text: str = ""  # the piece as typed: its bytes decoded together ("é"; each alone reads as U+FFFD)


@dataclass
class TokResult:
    # the text split, as given; if none was given: the data's sample, as the other views read (a task's: a whole
    # example, its answer included)
    text: str
    tokens: list[str]  # each token as it reads alone; bytes of a character it does not complete as escapes (\\xe2)
    ids: list[int]  # each token's id, in the order of `tokens`
    vocab_size: int  # V: tokens in the vocabulary; every id is below it
    kind: str = "character"  # what one token is
    pieces: list[TokPiece] | None = None  # merges=on: BPE worked out, piece by piece (None: not asked, or no BPE)
    merges_agree: bool | None = None  # the merges end on the tokenizer's own tokens (None: not worked out)
    no_merges: str | None = None  # merges=on where there is nothing to work out: why
    sampled: bool = False  # no text was given: the data's sample, as the other views read
    # no text was given, and why the data gave none (its file is gone; it is no text this tokenizer reads): a text the
    # vocabulary reads was shown, not a sample; "" where the data's sample was
    stand_in: str = field(default="", metadata={"view_only": True})
    # the text as its tokens spell it where that differs from the text given: a character the vocabulary holds in
    # Unicode's other form (é typed as one character, the data's e and a combining accent), read as that; null: the
    # same
    read_as: str | None = None
    # ids= was given (`tok ids=46,47,47`): `ids` are those, as typed, and `text` what they decode to
    from_ids: bool = False


# --- :score --------------------------------------------------------------------------------------
# A text of more positions than SCORE_FIRST + SCORE_LAST shows those and its worst (all=on: every one), with a row
# saying what is between: a window of 512 positions was a 520-line table
SCORE_FIRST, SCORE_LAST = 16, 48


@dataclass
class ScoreResult:
    text: str  # the text scored (its last max_seq_len + 1 tokens)
    tokens: list[str]  # each of its tokens as the model reads it (a BPE's lone byte as its escape, \\xe2)
    target_probs: list[float]  # position t: p(token t+1 | tokens 0..t), the true next token's probability
    losses: list[float]  # position t: -ln target_probs[t], its share of the loss
    guesses: list[str]  # position t: the model's likeliest next token
    guess_probs: list[float]  # position t: that guess's probability
    counted: list[bool]  # position t: whether training counts its loss (a task's question is given, not predicted)
    loss: float  # the mean of the counted losses: the cross-entropy training minimises, on this one text
    uniform: float  # ln(vocab_size): the loss of a uniform guess, a model that knows nothing
    dropped: int = 0  # tokens cut from the front of a text longer than max_seq_len + 1
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # the model has not trained a step: every p is near 1/V
    causal: bool = True  # the causal mask is on; off (causal=off), position t also reads t+1, the token it predicts
    # counter=N: the counting model of order N (core.ngram, as :ngram counts it) on the same positions
    counter: int | None = None  # N: it reads the N - 1 tokens before each next token
    counter_losses: list[float] | None = None  # position t: its -ln p(token t+1 | the N - 1 tokens up to t)
    counter_loss: float | None = None  # their mean over the counted positions
    counting: str | None = None  # on a task: why the counted positions are these (not a question, past the answer)
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    # the ids of tokens and guesses: a guess is right where its id is the next token's (a BPE's byte tokens all read
    # "�" on their own, so their names told a wrong byte from the right one by nothing); None: compare the names
    ids: list[int] | None = None
    guess_ids: list[int] | None = None  # position t: the best guess's id
    # the -ln p summed, in bits, over the characters the tokens after the first spell: what compares between
    # tokenizers (a BPE's loss per token does not); None where some positions are not counted (a task's question)
    bits_per_char: float | None = None
    # position t: its counted -ln p is above `uniform`, worse than a uniform guess (the view's red bar, its "!")
    above_uniform: list[bool] = field(default_factory=list)
    # position t: with counter=, the model knew the next token far better than the counter, having read further
    # back (p >= 0.2 and a -ln p 1 nat or more under the counter's, from t = N - 1 on: the view's
    # bold, its "*"); None without counter=
    beats_counter: list[bool] | None = None
    # all=on: the table has a row for every position (a long text's middle is otherwise left out: score_rows)
    show_all: bool = field(default=False, metadata={"view_only": True})

    def right(self, t: int) -> bool:
        """Whether the best guess at position t is the true next token."""
        if self.ids is not None and self.guess_ids is not None:
            return self.guess_ids[t] == self.ids[t + 1]
        return self.guesses[t] == self.tokens[t + 1]


@command("score", "Teacher forcing: score every next token of a text in one pass: each one's loss and the guess.",
         params=[
    Param("text", str, help="the text to score (default: a sample of the data with what truly follows it)",
          positional=True),
    Param("counter", int, help="also score it with the counting model of order N (:ngram): its -ln p beside the "
                               "model's, and where the model reads further back than counting does", low=1,
          meta="N"),
    Param("all", bool, default=False, help=f"show every position (a text of more than {SCORE_FIRST + SCORE_LAST} "
                                           f"shows its first {SCORE_FIRST}, its last {SCORE_LAST} and its worst)"),
], aliases=("tf",), json_version=8, guide="inside-views.md#teacher-forcing-every-next-token-at-once-score")  # fmt: skip
def cmd_score(session: Session, args: dict, reporter: Reporter) -> ScoreResult:
    if args["counter"] is not None:
        check_counter(args["counter"], session.data.tokenizer.vocab_size)
    result = score_text(session, args["text"], reporter, counter=args["counter"])
    result.show_all = bool(args["all"])
    return result


def score_text(session: Session, text: str | None, reporter: Reporter, counter: int | None = None) -> ScoreResult:
    """`:score`'s result for `text` (None: the views' sample and what truly follows it); with `counter`, the same
    positions scored by the counting model of that order too."""
    data = session.data
    text, ids, dropped = view_prompt(session, text or known_text(data), reporter, scored=True, given=bool(text))
    if len(ids) < 2:
        raise UserError(f"teacher forcing needs at least two {data.tokenizer.unit}s, one to read and the one after it "
                        f"to predict; e.g. {cmd('score', known_text(data))}")
    from ..core.inside import teacher_forcing

    counted = getattr(data, "counted", None)  # a task counts its answer only
    counts = counted(ids) if counted and not dropped else None
    scored = teacher_forcing(session.model, ids, counts)
    from ..core.bpe import shown_piece

    def name(i: int) -> str:
        return shown_piece(data.tokenizer, i)

    result = ScoreResult(text, [name(i) for i in ids], scored.target_probs, scored.losses,
                         [name(i) for i in scored.guess_ids], scored.guess_probs, scored.counted, scored.loss,
                         math.log(data.tokenizer.vocab_size), dropped, data.tokenizer.unit,
                         untrained=session.untrained, causal=session.model.causal,
                         counting=task_counting(data, counts, ids), ablations=switched_off(session),
                         ids=list(ids), guess_ids=list(scored.guess_ids))
    predicted = len(data.tokenizer.decode(list(ids))) - len(data.tokenizer.decode(list(ids[:1])))
    if all(scored.counted) and predicted > 0:
        result.bits_per_char = sum(scored.losses) / math.log(2) / predicted
    result.above_uniform = [above_uniform(result, t) for t in range(len(scored.losses))]
    if counter is not None:
        from ..core.ngram import counter_losses

        losses = counter_losses(data, counter, session.model_config.max_seq_len, ids)
        kept = [loss for loss, counted in zip(losses, scored.counted) if counted]
        result.counter, result.counter_losses = counter, losses
        result.counter_loss = sum(kept) / len(kept) if kept else math.nan
        result.beats_counter = [beats_counter(result, t) for t in range(len(losses))]
    return result


def task_counting(data, counts: list[bool] | None, ids: list[int]) -> str | None:
    """On a task, a line where the positions counted are not one question's answer: a text that is no question
    of the task (all count, as on text), or one that runs past its answer (what follows is not counted)."""
    if not hasattr(data, "question_form"):
        return None
    if counts is None:
        return (f"not a question of {data.name} ({data.question_form}) with its answer after it: every prediction "
                "counts, as on any text (training counts an answer's only)")
    if len(ids) - 1 > data.seq_len:
        return (f"an answer of {data.name} has {count(data.answer_len, 'character')}: what follows it was never "
                "trained and is not counted")
    return None


def score_rows(n: int, worst: int | None = None, every: bool = False) -> list[int]:
    """The positions :score's table shows: every one (`every`: all=on), or the first SCORE_FIRST, the last SCORE_LAST
    and `worst`, the position the bars are scaled to (score_bars names it: "12.203 at t = 104 (not shown)" named a
    row the table left out)."""
    if every or n <= SCORE_FIRST + SCORE_LAST:
        return list(range(n))
    return sorted({*range(SCORE_FIRST), *range(n - SCORE_LAST, n), *([] if worst is None else [worst])})


def worst_position(result: ScoreResult) -> int | None:
    """The position of the text's largest counted -ln p, the one the bars are drawn against; None where every counted
    -ln p is 0 (no bar is drawn)."""
    worst = max(loss for loss, counted in zip(result.losses, result.counted) if counted)
    if not worst > 0:
        return None
    return next(t for t in range(len(result.losses)) if result.counted[t] and result.losses[t] == worst)


def shown_rows(result: ScoreResult) -> list[int]:
    """The positions the table of `result` shows (score_rows)."""
    return score_rows(len(result.losses), worst_position(result), result.show_all)


def left_out(rows: list[int], n: int) -> list[tuple[int, int]]:
    """The runs of positions 0..n-1 that `rows` skips, each as (first, last)."""
    runs, previous = [], -1
    for t in [*rows, n]:
        if t > previous + 1:
            runs.append((previous + 1, t - 1))
        previous = t
    return runs


@render.register(ScoreResult)
def render_score(result: ScoreResult, console: Console) -> None:
    n = len(result.losses)
    say(console, f"teacher forcing on {quoted_end(result.text, 60)}", "bold")
    sees = ("sees tokens 0..t only (the causal mask)" if result.causal else
            "sees the whole text, the true next token included (no causal mask now) but at the last position, whose "
            "next token lies past the text the pass reads")
    note(console, f"one forward pass reads {count(n, result.unit)} and predicts each next one at once: position t "
                  f"{sees}, and its loss is -ln p(the true next token)")
    counted = [t for t in range(n) if result.counted[t]]
    table, bars = score_table(result, console, bars=True), True
    if not fits(console, table):  # the bars go first: for the counter's column, or long tokens' pieces
        table, bars = score_table(result, console, bars=False), False
    if not fits(console, table):  # 40-odd columns: a header a line per word ("true" over "next")
        table = score_table(result, console, bars=False, stacked=True)
    if not fits(console, table):  # and with counter=, p goes too: -ln p beside it says the same
        table = score_table(result, console, bars=False, stacked=True, probability=False)
    right = sum(result.right(t) for t in counted)
    console.print(table)
    if bars and (scale := score_bars(result)) is not None:
        note(console, scale)
    note(console, score_legend(result, plain(console), bars))
    given = n - len(counted)
    which = (f"the {len(counted)} counted -ln p (the other {given} are given, not predicted: no loss there)"
             if given else f"the {n} -ln p" if n > 1 else "the one -ln p")
    say(console, f"loss {result.loss:.4f}: the mean of {which}, what {named('train')} minimises on every row of a "
                 f"batch (a uniform guess: ln(V) = {result.uniform:.2f})")
    if result.bits_per_char is not None and result.unit != "character":  # a character's is the loss / ln 2
        note(console, f"{result.bits_per_char:.4f} bits per character: the -ln p summed in bits over the characters "
                      "the tokens spell, what compares with a model of another tokenizer")
    positions = count(len(counted), "counted position" if given else "position")
    note(console, f"the best guess was the true next {result.unit} at {right} of {positions}; "
                  f"{cmd('lens')} and {cmd('step')} look at one position in depth")
    if len(rows := shown_rows(result)) < n:
        runs = " and ".join(f"{a} to {b}" if b > a else f"{a}" for a, b in left_out(rows, n))
        worst = worst_position(result)
        also = f" and the worst, t = {worst}," if worst is not None and SCORE_FIRST <= worst < n - SCORE_LAST else ""
        note(console, f"positions {runs} not shown ({n - len(rows)} of {n}: the first {SCORE_FIRST}, the last "
                      f"{SCORE_LAST}{also} are; the loss above counts them all); "
                      f"{cmd('score', 'TEXT', all=True)} shows every one")
    elif result.show_all and n <= SCORE_FIRST + SCORE_LAST:  # all=on asked, and it changed nothing: say why
        note(console, f"all=on changes nothing here: a text of at most {SCORE_FIRST + SCORE_LAST} positions shows "
                      "every one anyway")
    if result.counting:
        note(console, result.counting)
    if result.counter_losses is not None:
        say(console, counter_words(result, starred=plain(console)))
    if result.untrained:
        note(console, f"this model has not trained yet: every p is near 1/V, every loss near ln(V); "
                      f"{look_again('score', AUTOSAVE_NAME, result.text, again='score the same text again')}")
    ablation_note(console, result.ablations)


# A text's largest counted -ln p under this (p above 0.99 everywhere) is said to be tiny: its bars, scaled to it, ran
# from a quarter to a full bar over losses that all read 0.000 or 0.001
SCORE_TINY = 0.01


def score_bars(result: ScoreResult) -> str | None:
    """What :score's bars are drawn against: the text's largest counted -ln p, not a fixed scale, so that a text the
    model knows drew full bars over losses of 0.000 (said then); None where no bar is drawn (every loss 0)."""
    if (at := worst_position(result)) is None:
        return None
    worst = result.losses[at]
    top = f"{worst:.3f}" if worst >= SCORE_TINY else f"{worst:.2g}"
    counted = " counted" if not all(result.counted) else ""
    # the table shows that row however long the text (score_rows): "(not shown)" named the row the bars are scaled to
    words = (f"the bars: -ln p against the text's largest{counted} one, {top} at t = {at} (a full bar), not against "
             "a fixed scale")
    if worst < SCORE_TINY:  # the given positions' losses are not the model's guesses: of them it says nothing
        words += (f"; that is tiny (p {math.exp(-worst):.4f} there): the model was near certain at every{counted} "
                  "position, and the bars only rank how near")
    return words


def above_uniform(result: ScoreResult, t: int) -> bool:
    """Whether the model did worse at position t than a uniform guess, which knows nothing: a counted -ln p above
    ln V (a given position's is no guess of the model's)."""
    return result.counted[t] and result.losses[t] > result.uniform


def score_legend(result: ScoreResult, marked: bool, bars: bool) -> str:
    """What :score's colours say, or without colour (`marked`) the marks that say it instead: a loss worse than a
    uniform guess, a best guess that is the true next token."""
    if marked:
        return (f"! after a -ln p: above ln V = {result.uniform:.2f}, worse than a uniform guess; = after a best "
                f"guess: it is the true next {result.unit}")
    worse = (f"a bar in red: -ln p above ln V = {result.uniform:.2f}, worse than a uniform guess (yellow: under it); "
             if bars else "")
    return f"{worse}a best guess in green: it is the true next {result.unit}"


def score_table(result: ScoreResult, console: Console, bars: bool, stacked: bool = False,
                probability: bool = True) -> Table:
    """One row a position: what it reads, the true next token, its p and -ln p (with a bar scaled to the worst),
    the best guess, and with counter= the counter's -ln p; `stacked`: each header a line per word; `probability`:
    the p column (-ln p says the same)."""
    table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
    p_column = [("p", "right")] if probability else []
    columns = [("t", "right"), ("reads", "left"), ("true next", "left"), *p_column, ("-ln p", "right"),
               *([("", "left")] if bars else []), ("best guess", "left")]
    if result.counter_losses is not None:
        columns.append((f"{result.counter}-gram -ln p", "right"))
    for name, justify in columns:
        table.add_column("\n".join(name.split()) if stacked else name, justify=justify, no_wrap=True)
    worst = max(loss for loss, counted in zip(result.losses, result.counted) if counted)
    previous = -1
    for t in shown_rows(result):
        if t > previous + 1:  # the positions left out, in one row
            add_row(table, "…", Text(f"{t - previous - 1} positions", style="dim"), *[""] * (len(columns) - 2))
        previous = t
        hit, marked = result.right(t), plain(console)  # no colour (NO_COLOR too, where Rich keeps bold): marks
        reads, comes, guess = (piece_cell(visible(token)) for token in (result.tokens[t], result.tokens[t + 1],
                                                                         result.guesses[t]))
        if not result.counted[t]:  # a task's question, repeat's first copy: given, so no loss is counted there
            add_row(table, str(t), reads, comes,
                    *([Text(prob_text(result.target_probs[t]), style="dim")] if probability else []),
                    Text(f"{result.losses[t]:.3f}", style="dim"),
                    *([Text("given", style="dim")] if bars else []),
                    Text(f"{guess} {result.guess_probs[t]:.2f}", style="dim"),
                    *counter_cell(result, t, dim=True))
            continue
        bar = chart.bar(result.losses[t] / worst, 8) if worst > 0 else ""
        worse = above_uniform(result, t)
        add_row(table, str(t), reads, comes, *([prob_text(result.target_probs[t])] if probability else []),
                f"{result.losses[t]:.3f}" + ("!" if worse and marked else ""),
                *([Text(bar, style="red" if worse else "yellow")] if bars else []),
                Text(f"{guess} {result.guess_probs[t]:.2f}" + (" =" if hit and marked else ""),
                     style="green" if hit else ""),
                *counter_cell(result, t, starred=marked))
    return table


# A position where the model knew the next token (p >= COUNTER_SURE) and the counter did not (its -ln p at least
# COUNTER_GAIN nats higher) is marked: there the model used more than the n - 1 tokens the counter reads.
COUNTER_GAIN = 1.0
COUNTER_SURE = 0.2


def beats_counter(result: ScoreResult, t: int) -> bool:
    """Whether the model knew the token after position t far better than the counter, having read further back: from
    t = n - 1 on, where the model has read more than the counter's n - 1 tokens (before it both read tokens 0..t, and
    "the model read further back" was said of t = 0, where the gap is what each made of the same token)."""
    return (result.counted[t] and t >= (result.counter or 1) - 1 and result.target_probs[t] >= COUNTER_SURE
            and result.counter_losses[t] - result.losses[t] >= COUNTER_GAIN)


def counter_cell(result: ScoreResult, t: int, dim: bool = False, starred: bool = False) -> list[Text]:
    """The counter's -ln p at position t (no cell without counter=), bold green where the model knew better;
    `starred`: the console shows no colour (a pipe, a file, NO_COLOR), so a * marks those too: bold alone is lost
    to a screen reader and to a copy, and a pipe shows none."""
    if result.counter_losses is None:
        return []
    loss, beaten = result.counter_losses[t], not dim and beats_counter(result, t)
    return [Text(f"{loss:.3f}" + ("*" if beaten and starred else ""), style="dim" if dim else
                 "bold green" if beaten else "")]


def counter_words(result: ScoreResult, starred: bool = False) -> str:
    """The model's loss against the counter's on this text, and the position where reading further back paid most."""
    n = result.counter
    ahead = [t for t in range(len(result.losses)) if beats_counter(result, t)]
    reads = (f"reads the {count(n - 1, result.unit)} before each next one" if n > 1 else
             f"reads nothing, only how often each {result.unit} came in training")
    words = (f"the {n}-gram counter, which {reads}, scores {result.counter_loss:.4f} on this text against the "
             f"model's {result.loss:.4f}")
    if not ahead:
        where = (f"at no position from t = {n - 1} on (where the model has read more than the counter)" if n > 1 else
                 "at no position")
        return words + (f"; {where} did the model give the true next {result.unit} p >= {COUNTER_SURE} "
                        f"with a -ln p {COUNTER_GAIN:.0f} nat or more under the counter's")
    best = max(ahead, key=lambda t: result.counter_losses[t] - result.losses[t])
    marked = "marked *" if starred else "in bold"  # as counter_cell shows them
    return (words + f"; at {count(len(ahead), 'position')} ({marked}) the model gave the true next {result.unit} "
            f"p >= {COUNTER_SURE} and a -ln p {COUNTER_GAIN:.0f} nat or more under the counter's, most at t = {best}, "
            f"{quoted(result.tokens[best + 1])} after {quoted(result.tokens[best])} "
            f"({result.losses[best]:.3f} against {result.counter_losses[best]:.3f}): "
            + (f"with no causal mask the model read it where it stands, at t + 1, which no counter reads"
               if not result.causal else  # not "further back": the answer was in its view
               f"what the {count(n - 1, result.unit)} before do not tell, the model read further back" if n > 1 else
               "what counting alone does not tell, the model read from the text before"))


# --- :embed --------------------------------------------------------------------------------------
EMBED_DEFAULT_TOKENS = 8  # distinct tokens of the sample shown when no text is given
EMBED_MAX_TOKENS = 24  # at most this many distinct tokens of a given text


EMBED_MAP_HEIGHT = 16  # rows of the map (fewer where the terminal is narrow)


@dataclass
class EmbedMap:
    labels: list[str]  # the tokens drawn: every token of the vocabulary, by id (untied: those the text trains)
    coords: list[list[float]]  # each token's W_E row (minus the mean row) along the two directions it varies most
    explained: list[float]  # the share of the rows' variance along each of the two
    dims: int  # d_model: the directions there are in all
    asked: list[int]  # where in `labels` the tokens asked about are (their ids, with every token drawn), on top


@dataclass
class EmbedResult:
    tokens: list[str]  # the tokens asked about (the text's distinct tokens, in order; a lone byte as \\xe2)
    neighbours: list[list[str]]  # for each, the tokens whose embedding rows are most alike, most alike first
    similarities: list[list[float]]  # their cosine similarities (1: the same direction, about 0: unrelated)
    tied: bool  # W_E is also the output head (tie_embeddings): alike rows are also alike predictions
    positions: str | None  # "learned" or "sinusoidal": the table added at the input; None: rope or none
    by_distance: list[float] | None  # d = 1, 2, ...: the mean cosine between position rows d apart
    cut: int = 0  # the text's distinct tokens past the first 24, which the view leaves out (it shows at most 24)
    untrained: bool = False  # the model has not trained a step: its rows are random directions
    map: EmbedMap | None = None  # map=on: every token placed on the two directions W_E's rows vary most
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate ("the positions": no table now)
    rotary: bool = False  # positions come from RoPE turning q and k (with positions None: no positions at all)
    causal: bool = True  # the causal mask orders the tokens (off: with no positions nothing does)
    # the learned table's rows compared, where a training row is shorter than the window (a task's); None: all
    trained_rows: int | None = None
    # untied: tokens the training text never holds, whose input rows never trained, left out of the neighbours
    untrained_tokens: int = 0
    # rank 1, 2, ...: the mean cosine of the k-th nearest among random rows (an untrained table's), as many as these
    chance: list[float] = field(default_factory=list)
    # rank 1, 2, ...: what the k-th nearest random row stays under in 99 of 100 tables (above rank 1's: not chance)
    chance_band: list[float] = field(default_factory=list)
    candidates: int = 0  # the other rows each token's neighbours are picked from
    d_model: int = 0  # the rows' width d
    head: bool = False  # head=on: the output head's rows W_U compared (tied: they are W_E's, the same table)
    # head=on, untied: each token's W_U row against its own W_E row (cosine)
    input_alike: list[float] | None = None
    token_size: float = 0.0  # |x|: the mean length of the rows of W_E compared
    position_size: float | None = None  # |p|: the mean length of the position table's rows compared (None: no table)
    nearest_next: int | None = None  # position rows whose most alike other row is next to them (distance 1)
    # positions=on: cos(p_s, p_t) for every two rows s, t of the position table compared
    position_cosines: list[list[float]] | None = None
    learned_table: bool = field(default=False, metadata={"view_only": True})  # the position table trains (its kind's)


@command("embed", "Which tokens the model treats alike: each token's nearest embeddings, and positions by distance "
                  "(map=on: every token on W_E's two main directions).",
         params=[
    Param("text", str, help="whose tokens to look up (default: a few of the data's sample)", positional=True),
    Param("k", int, help="neighbours per token (default 5)", low=1, limit=100),
    Param("map", bool, default=False, help="every token drawn at its place on the two directions in which the rows "
                                           "of W_E differ most (their first two principal components), the text's "
                                           "on top"),
    Param("head", bool, default=False, help="the rows of the output head W_U instead of W_E, where the head is "
                                            "untied (tie_embeddings=off); tied, they are the same table"),
    Param("positions", bool, default=False, help="draw cos(p_s, p_t) for every two rows of the position table, as "
                                                 "a map"),
], json_version=10, guide="inside-views.md#which-tokens-the-model-treats-alike-embed",
   topics=("embedding", "embeddings", "token_embedding", "wte", "position", "positions", "pos", "wpe",
           "position_table", "lm_head"))  # fmt: skip
def cmd_embed(session: Session, args: dict, reporter: Reporter) -> EmbedResult:
    data = session.data
    text = args["text"] or sample_prompt(data)
    distinct = list(dict.fromkeys(data.tokenizer.encode(text)))
    if not distinct:
        raise UserError(f"give some text, e.g. {cmd('embed', 'aeiou')}")
    # a tied head is W_E itself: head=on reads the same rows, and the view says so
    untied_head = args["head"] and not session.model_config.tie_embeddings
    if untied_head and args["map"]:
        raise UserError(f"map=on draws W_E's rows only; for W_U's rows drop map=on ({cmd('embed', 'TEXT', head=True)})")
    if args["map"] and args["positions"]:  # the view draws one map: the position map went undrawn without a word
        raise UserError(f"map=on and positions=on are two maps, one at a time: {cmd('embed', 'TEXT', map=True)} draws "
                        f"the tokens', {cmd('embed', 'TEXT', positions=True)} the position table's")
    shown = distinct[:EMBED_MAX_TOKENS if args["text"] else EMBED_DEFAULT_TOKENS]
    cut = len(distinct) - len(shown) if args["text"] else 0  # the sample's other tokens are no one's request
    from ..core.inside import embedding_neighbours
    from ..core.variants import position_kind

    itos, config = data.tokenizer.itos, session.model_config
    kind = position_kind(config)
    # A learned table trains only the rows a training row reaches (a task's 8 of a window of 32): the rest stay random
    length = training_length(session) if kind.learned else None
    trained_rows = length if length is not None and length < config.max_seq_len else None
    # An untied input row gets a gradient only where its token is read: those the training text never holds stay the
    # random rows they started as (a byte-level BPE's hundreds of unused bytes), whose chance cosines of 0.4 to 0.5
    # filled every token's list. A tied row also learns as the output head, from every prediction.
    from ..core.inside import trained_tokens

    among = trained_tokens(config.tie_embeddings, data)
    k = args["k"] or 5
    found = embedding_neighbours(session.model, shown, k, trained=trained_rows, among=among)
    neighbour_ids, similarities, input_alike = found.neighbour_ids, found.similarities, None
    from ..core.likeness import chance_level, head_neighbours, position_likeness, row_sizes

    # the rows a token's neighbours are picked from; `among` stays W_E's rows that trained, whose |x| is said below
    # (head=on measured it over every row of W_E, the never-trained ones too, and judged the positions by it)
    picked_from = among
    if untied_head:  # every row of W_U trains (each prediction's softmax reaches all of them): none is left out
        head = head_neighbours(session.model, shown, k)
        neighbour_ids, similarities, input_alike = head.neighbour_ids, head.similarities, head.input_alike
        picked_from = None
    # a token's neighbours come from the other rows: random rows in as many give the cosines chance alone gives
    candidates = max(1, (config.vocab_size if picked_from is None else len(picked_from)) - 1)
    chance = chance_level(candidates, config.d_model, k)
    positions = config.pos_encoding if kind.table is not None else None
    by_distance = found.by_distance
    ablated = any(a.kind == "positions" for a in session.ablations)
    if ablated:  # the table reads as zeros: no cosine to speak of
        by_distance = None
    sizes = row_sizes(session.model, among, trained_rows)
    likeness = None if ablated else position_likeness(session.model, trained_rows)
    from ..core.bpe import shown_piece

    def name(i: int) -> str:  # a byte of a longer character as its escape (\\xe2), not "�"
        return shown_piece(data.tokenizer, i)

    drawn = None
    if args["map"]:
        from ..core.inside import embedding_map

        found_map = embedding_map(session.model, among)  # untied: the rows that trained, as the neighbours
        drawn_ids = list(range(len(itos))) if among is None else among
        where = {token: k for k, token in enumerate(drawn_ids)}
        # labelled as the list under it names them: the text's byte tokens were drawn on the map as "�"
        drawn = EmbedMap([name(i) for i in drawn_ids], found_map.coords, found_map.explained, found_map.dims,
                         [where[i] for i in shown if i in where])

    return EmbedResult([name(i) for i in shown], [[name(i) for i in row] for row in neighbour_ids],
                       similarities, config.tie_embeddings, positions, by_distance, cut,
                       untrained=session.untrained, map=drawn, ablations=switched_off(session), rotary=kind.rotary,
                       causal=config.causal, trained_rows=trained_rows,
                       untrained_tokens=0 if picked_from is None else data.tokenizer.vocab_size - len(picked_from),
                       chance=chance.mean, chance_band=chance.band, candidates=candidates, d_model=config.d_model,
                       head=args["head"], input_alike=input_alike, token_size=sizes.token,
                       position_size=None if ablated else sizes.position,
                       nearest_next=None if likeness is None or likeness.rows < 2 else likeness.nearest_next,
                       position_cosines=likeness.cosines if likeness is not None and args["positions"] else None,
                       learned_table=kind.learned)


EMBED_DISTANCES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)  # the distances the positions line names


def chance_cell(value: float, band: float, marked: bool) -> tuple[str, str]:
    """A cosine's text and style: bold (or, without bold, a *) where it is above chance (over `band`: the most alike
    random row's in 99 of 100 tables, one bar for every rank, so a 0.26 is never marked beside a 0.32 that is not)."""
    above = value > band
    return f"{value:.2f}" + ("*" if above and marked else ""), "bold" if above else ""


@render.register(EmbedResult)
def render_embed(result: EmbedResult, console: Console) -> None:
    if result.map is not None:
        render_embed_map(result, result.map, console)
        return
    marked = plain(console)  # no colour (a pipe, a file, NO_COLOR): a * marks what bold marks
    head = result.head and not result.tied  # W_U's own rows
    table_name = "W_U (the output head's own matrix)" if head else "W_E"
    tied = "; W_E is also the output head, so alike rows also predict alike" if result.tied else ""
    say(console, f"token {'head rows' if head else 'embeddings'}: the rows of {table_name} most alike each "
                 "token's", "bold")
    note(console, f"cosine similarity u.v / (|u| |v|): 1 the same direction, about 0 unrelated{tied}")
    chance = result.chance

    def alike(k: int) -> Table:
        table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("token", no_wrap=True, style="cyan")
        for i in range(k):
            table.add_column("most alike" if i == 0 else f"#{i + 1}", no_wrap=True)
        for token, row, sims in zip(result.tokens, result.neighbours, result.similarities):
            cells = []
            for t, c in list(zip(row, sims))[:k]:
                text, style = chance_cell(c, result.chance_band[0], marked) if chance else (f"{c:.2f}", "")
                cells.append(Text(f"{piece_cell(visible(t))} {text}", style=style))
            add_row(table, piece_cell(visible(token)), *cells)
        if chance:  # the same ranks among random rows, under the columns they are compared with
            add_row(table, Text("chance", style="dim"), *(Text(f"  {c:.2f}", style="dim") for c in chance[:k]))
        return table

    most = k = max((len(row) for row in result.neighbours), default=0)
    while k > 1 and not fits(console, alike(k)):  # as many neighbours as fit the width, whole (as :lens does)
        k -= 1
    console.print(alike(k))
    if k < most:
        note(console, f"a wider terminal shows {count(most - k, 'more neighbour')}")
    if chance:
        cells = [c for sims in result.similarities for c in sims[:k]]
        above = sum(c > result.chance_band[0] for c in cells)
        shown = "marked *" if marked else "in bold"
        note(console, f"chance: the mean cosine at each rank among {count(result.candidates, 'random row')} of "
                      f"d = {result.d_model} (an untrained table's); {shown}: above chance, more alike than the most "
                      f"alike random row is in 99 of 100 tables ({result.chance_band[0]:.2f}): {above} of "
                      # the vowels' cosines were within chance while their nearest rows were the other vowels, which
                      # the docs read as "not set apart": the bar tests a cosine's size, not the neighbours' names
                      f"{len(cells)} here (chance says how alike, not which rows are nearest)")
    if head:
        note(console, "each token's W_U row against its own W_E row: " + "  ".join(
            f"{piece_cell(visible(t))} {c:+.2f}" for t, c in zip(result.tokens, result.input_alike or [])))
    elif result.head:
        note(console, "head=on: the head is tied (tie_embeddings=on), so W_U is W_E: the same table, these rows")
    elif not result.tied:
        note(console, f"the head is untied (tie_embeddings=off): {cmd('embed', 'TEXT', head=True)} lists the rows "
                      "of W_U, the head's own matrix, instead")
    if result.cut:
        note(console, f"{count(result.cut, 'more distinct token')} of the text not shown")
    if result.untrained_tokens:
        note(console, f"left out: the {count(result.untrained_tokens, 'token')} the training text never holds; with "
                      "the head untied, an input row learns only where its token is read, so theirs are the random "
                      "rows they started as")
    # causal=off (or :ablate mask) takes away what is left without positions: the text is a bag of tokens
    masked = result.causal and "the causal mask" not in result.ablations
    if result.by_distance is not None and not result.by_distance:  # a window of 1: no two positions to compare
        say(console, f"{result.positions} positions: the table has one row (a window of 1 token), so there is no "
                     "likeness by distance to show")
    elif result.by_distance is not None:
        shown = [d for d in EMBED_DISTANCES if d <= len(result.by_distance)]
        rows = ("" if result.trained_rows is None
                else f" (its first {result.trained_rows}, the positions a training row reaches)")
        say(console, f"{result.positions} positions: how alike the rows of the position table{rows} are, by distance: "
                     + "  ".join(f"{d}: {result.by_distance[d - 1]:.2f}" for d in shown))
        if result.nearest_next is not None:
            total = len(result.by_distance) + 1
            # "1 of 64 ..., as a smooth table has" read, of an untrained table, as if 1 were a smooth table's count
            smooth = ("as a smooth table has" if result.nearest_next == total else
                      f"where a smooth table has all {total}")
            note(console, f"{result.nearest_next} of {total} rows have their most alike other row next to them "
                          f"(distance 1), {smooth}"
                          + ("" if result.position_cosines is not None else
                             f"; {cmd('embed', positions=True)} draws every pair"))
        if result.trained_rows is not None:
            note(console, "the table's other rows never trained (no training row reaches them): they are the random "
                          "rows it started with, left out")
        dwarfs = position_dwarfs(result.token_size, result.position_size, result.d_model,
                                 learned=result.learned_table)
        if dwarfs:
            note(console, f"on average {dwarfs}")
        if result.position_cosines is not None:
            render_position_map(result.position_cosines, console)
    elif result.rotary and "the positions" in result.ablations:
        left = "but what the causal mask lets it read" if masked else "(and there is no causal mask)"
        note(console, f"RoPE is switched off ({cmd('ablate', 'positions')}): q and k go unturned, so nothing tells the "
                      f"model where a token stands {left} ({cmd('ablate', 'off')} puts it back)")
    elif result.positions is not None:
        note(console, f"{result.positions} positions are switched off ({cmd('ablate', 'positions')}): the table adds "
                      f"nothing now, so there is no likeness by distance to show ({cmd('ablate', 'off')} puts it back)")
    elif result.rotary:
        note(console, f"positions are not a table added at the input here: RoPE turns each head's q and k by their "
                      f"positions inside attention ({cmd('rope')} shows it)")
    else:
        note(console, "this model has no positions (pos_encoding=none): nothing tells it where a token stands but "
                      "what the causal mask lets each position read" if masked else
                      "this model has no positions (pos_encoding=none) and no causal mask: nothing tells it where a "
                      "token stands: each position reads the whole text as an unordered bag of tokens")
    if result.untrained:
        note(console, "this model has not trained yet: its rows are random directions, so its neighbours are alike "
                      "by chance alone, about as the chance row says, and no likeness here means anything yet; "
                      f"{look_again('embed', AUTOSAVE_NAME)}")


def render_position_map(cosines: list[list[float]], console: Console) -> None:
    """cos(p_s, p_t) of the position table as a grid of cells (render.heatmap's, as the attention maps): row s,
    column t, each headed by its position; below 0 drawn as 0. Rows past the terminal's width are left out, the first
    ones kept (the ones a short text reads)."""
    as_text = unscaled(console)
    label = len(str(len(cosines) - 1)) + 1  # a row's position and a space
    shown = attention_window(len(cosines), console.width, 1, label)
    grid = Text(" " * label)
    for t in range(shown):
        grid.append(str(t % 10), style="bold")
    for row in range(shown):
        grid.append("\n" + f"{row:>{label - 1}} ", style="bold")
        for c in cosines[row][:shown]:
            grid.append_text(cell(max(0.0, c), 1, as_text))
    say(console, "cos(p_s, p_t): row s, column t, by position (a column headed by its position's last digit)")
    console.print(grid, highlight=False, no_wrap=True, overflow="ignore")
    console.print(legend(1.0, as_text, "cosine, below 0 as 0", console.width))
    if shown < len(cosines):
        note(console, f"showing positions 0 to {shown - 1} of {len(cosines)} (the terminal is {console.width} "
                      "columns wide)")


def render_embed_map(result: EmbedResult, drawn: EmbedMap, console: Console) -> None:
    """W_E's rows on their two main directions: the map, what each axis holds of the variance, what hides."""
    one, two = (fmt.share(share) for share in drawn.explained)
    say(console, "token embeddings on a map: each token at its W_E row's place along the two directions in which "
                 "the rows differ most", "bold")
    # n rows less their mean span at most n - 1 of the d directions: 12 tokens in d = 32 left 9 more, not "the other
    # 30 of d = 32", most of which hold nothing
    spanned = min(drawn.dims, len(drawn.labels) - 1)
    rest = (f"the other {spanned - 2} of d = {drawn.dims} directions hold the rest" if spanned == drawn.dims else
            f"the {count(len(drawn.labels), 'row')} span {spanned} of the d = {drawn.dims} directions, and the other "
            f"{spanned - 2} of those hold the rest")
    note(console, f"x: direction 1, {one} of the rows' variance; y: direction 2, {two}; {rest}. Near on the map: "
                  f"alike in these two directions ({cmd('embed', 'TEXT')} gives the cosine over all of them)")
    grid, hidden = scatter(drawn.labels, drawn.coords, drawn.asked, *grid_size(console.width, EMBED_MAP_HEIGHT))
    console.print(grid, highlight=False, no_wrap=True, overflow="ignore")
    asked = ", ".join(visible(t) for t in result.tokens)
    shown = "the text's tokens, drawn over any they share a cell with" if plain(console) else "in bold"  # no bold
    say(console, f"{shown}: {asked}" + (f"; {count(hidden, 'token')} hidden under others" if hidden else ""))
    if result.untrained_tokens:
        note(console, f"not drawn: the {count(result.untrained_tokens, 'token')} the training text never holds; with "
                      "the head untied, an input row learns only where its token is read, so theirs are the random "
                      "rows they started as")
    if result.untrained:
        note(console, f"this model has not trained yet: its rows are random, so the map is a cloud; "
                      f"{look_again('embed', AUTOSAVE_NAME, map=True)}")


@command("tok", "Show text as the model reads it: its tokens and their ids (merges=on: BPE's merges one by one).",
         params=[
    Param("text", str, help="the text to split into tokens (default: a sample of the data)", positional=True),
    Param("merges", bool, default=False, help="a BPE tokenizer's merges worked out, piece by piece, in the order "
                                              "they were learned"),
    # one word of digits and commas: it parses alike at the REPL's prompt and in the shell (--ids 46,47,47), and a
    # text of digits stays a text
    Param("ids", str, meta="ID,ID,...", help="token ids to decode instead of a text, separated by commas (e.g. "
                                             "ids=46,47,47): the tokens they are and the text they read as"),
], json_version=7, guide="real-models.md#characters-or-bpe-set-tokenizer")  # fmt: skip
def cmd_tok(session: Session, args: dict, reporter: Reporter) -> TokResult:
    from ..core.bpe import shown_piece

    tokenizer = session.data.tokenizer
    if args["ids"] is not None:
        typed = args["ids"]
        if args["text"]:  # `:tok ids=46, 47`: the ids after a space are the text's words
            if not _IDS.fullmatch(args["text"].strip()):
                raise UserError(f"give {named('tok')} a text or {option('ids')} to decode, not both: "
                                f"{cmd('tok', ids=typed)}")
            typed += "," + args["text"]
        ids = _ids_given(typed, tokenizer.vocab_size)
        text = tokenizer.decode(ids)
        result = TokResult(text, [shown_piece(tokenizer, i) for i in ids], ids, tokenizer.vocab_size, tokenizer.unit,
                           from_ids=True)
    else:
        result = _tok_text(session, args["text"])
        text = result.text
    if not args["merges"]:
        return result
    describe = getattr(tokenizer, "merges", None)
    worked = describe(text) if describe is not None else None
    if worked is None:
        from ..core.data import TextCorpus

        bpe = cmd("set", tokenizer="bpe:512")
        how = (f"{bpe} trains a BPE on the data" if isinstance(session.data, TextCorpus) else
               f"a BPE reads text, not {session.data.name}'s symbols: {cmd('data', 'pydoc')}, then {bpe}")
        result.no_merges = (f"a {tokenizer.unit} tokenizer merges nothing: each {tokenizer.unit} is a token; {how}"
                            if describe is None else "this tokenizer is not a plain byte-level BPE (byte fallback or "
                            "another model), so its merges cannot be replayed here")
        return result
    def name(i: int) -> str:
        return shown_piece(tokenizer, i)

    result.pieces = [TokPiece([name(i) for i in piece.start],
                              [TokMerge(name(m.left), name(m.right), m.rank, [name(i) for i in m.ids])
                               for m in piece.steps], piece.whole, tokenizer.decode(piece.start))
                     for piece in worked.pieces]
    result.merges_agree = worked.agrees
    return result


def _tok_text(session: Session, given: str | None) -> TokResult:
    """:tok of a text: `given`, or where none is given the data's sample, split into its tokens."""
    from ..core.bpe import shown_piece
    from ..core.errors import DataError

    tokenizer = session.data.tokenizer
    # no text: the data's sample, as every other view reads (its usage line said [TEXT], and it refused the default)
    text = given or sample_prompt(session.data)
    if not given and hasattr(session.data, "answer"):
        # a task's whole example, as training reads it: the views' prompt is a question alone, its answer left to guess
        text += session.data.answer(text)
    try:
        ids = tokenizer.encode(text)
    except DataError as e:  # `:tok 46 47 47`, ids typed as a text: its digits are no characters of Shakespeare's
        if not _IDS.fullmatch(text.strip()):
            raise
        typed = ",".join(w for w in re.split(r"[\s,]+", text.strip()) if w)
        raise DataError(f"{e}; to decode ids instead: {cmd('tok', ids=typed)}", fix=e.fix) from None
    spelt = tokenizer.decode(ids)  # "e\u0301" for a typed "é": the token count said nothing of the rewrite
    return TokResult(text, [shown_piece(tokenizer, i) for i in ids], ids, tokenizer.vocab_size, tokenizer.unit,
                     sampled=not given, stand_in=_no_sample(session.data) if not given else "",
                     read_as=spelt if spelt != text else None)


_IDS = re.compile(r"[\d\s,]*\d[\d\s,]*")  # token ids as typed: digits, between them commas or spaces


def _ids_given(typed: str, vocab_size: int) -> list[int]:
    """The ids of `:tok ids=46,47,47` (commas, spaces or both between them), each checked against the vocabulary."""
    words = [w for w in re.split(r"[\s,]+", typed.strip()) if w]
    bad = next((w for w in words if not w.isdigit()), None) if words else typed
    if bad is not None:
        raise UserError(f"{option('ids')} takes token ids, whole numbers from 0 separated by commas, got "
                        f"{clip(bad)!r}: e.g. {cmd('tok', ids='0,1,2')}")
    ids = [int(w) for w in words]
    if (high := next((i for i in ids if i >= vocab_size), None)) is not None:
        raise UserError(f"token id {high:,} is past the vocabulary, whose ids are 0 to {vocab_size - 1:,}; "
                        f"{cmd('data')} shows it")
    return ids


def _no_sample(data) -> str:
    """Why the data gives :tok no sample, in words, or "" where it does (base.samples_the_data)."""
    if samples_the_data(data):
        return ""
    # a loaded model's tokenizer on data it does not read (a task, too short a text): the data is here
    return "the data is no text this tokenizer reads" if hasattr(data, "why") else "the data is not here to sample"


@render.register(TokResult)
def render_tok(result: TokResult, console: Console) -> None:
    width = max(10, console.width)
    top, bottom, used = Text(), Text(), 0
    for tok, i in zip(result.tokens, result.ids):
        shown = visible(tok)
        # 2 a character for 日 or 語: its id goes under both columns. Measured as terminals do (palette.columns), not
        # by Rich's cell_len: a skin-tone modifier alone (🏽) counted 0 there, and every id after it sat 2 columns left
        cells = columns(shown)
        w = max(cells, len(str(i))) + 1
        if used + w > width and used:
            console.print(top, highlight=False, no_wrap=True)
            console.print(bottom, highlight=False, no_wrap=True)
            console.print()
            top, bottom, used = Text(), Text(), 0
        top.append(shown + " " * (w - cells), style="bold")
        bottom.append(str(i).ljust(w), style="dim")
        used += w
    console.print(top, highlight=False, no_wrap=True)
    console.print(bottom, highlight=False, no_wrap=True)
    # "4 tokens, subword pieces of 1 character" read as pieces a character long: the counts, side by side
    per = (f"one per {result.kind}" if result.kind == "character"
           else f"for {count(len(result.text), 'character')} ({count(len(result.text.encode()), 'byte')})")
    tokens = count(len(result.ids), "token")
    note(console, f"{tokens}{',' if result.kind == 'character' else ''} {per}; ids index a vocabulary of "
                  f"{result.vocab_size:,}")
    # the characters counted: the tokens' own (as the data writes them) for characters, the typed text's for BPE
    counted = (result.read_as if result.kind == "character" and result.read_as is not None else result.text)
    if (points := code_points_note(counted)) is not None:
        note(console, points)
    if result.read_as is not None:
        read = count(len(result.read_as), "character")
        typed = f"{len(result.text)} {'was' if len(result.text) == 1 else 'were'} typed"
        note(console, f"read as the data writes it, {quoted_end(result.read_as, 40)}: {read} where {typed}. Unicode "
                      "writes an accented letter as one character (é) or as the letter and a combining accent (e + "
                      "◌́), and the vocabulary holds the other form")
    if result.from_ids:  # the decoding, whole: the row above shows it a token at a time
        note(console, f"ids decoded: {quoted_end(result.text, 200)}")
    if result.stand_in:  # "a sample of the data" was said of "The quick brown", a text the data never held
        note(console, f"no text given, and {result.stand_in}: a text its vocabulary reads; "
                      f"{cmd('tok', 'TEXT')} splits your own")
    elif result.sampled:
        note(console, f"no text given: a sample of the data; {cmd('tok', 'TEXT')} splits your own")
    if result.no_merges:
        note(console, result.no_merges)
    if result.pieces is not None:
        _render_merges(result, console)


TOK_PIECES = 40  # merges=on lists at most this many pieces, then says how many more


def code_points_note(text: str) -> str | None:
    """Where `text` holds code points that show only with their neighbours (palette.clusters): that :tok's "character"
    is a code point, how many the text shows, and how many code points fold into the one before them, and which (it
    said "one per character" of 👨‍👩‍👧's five tokens); None where each code point shows as a character of its own."""
    shown = clusters(text)
    if len(shown) == len(text):
        return None
    # every code point that folds, by why: the people a joiner joins on are counted too, or "2 zero-width joiners" was
    # said of a 👨‍👩‍👧 that shows 5 code points as 1
    named = [count(n, why, FOLDED_PLURALS.get(why)) for why, n in folded(text).items()]
    listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + " and " + named[-1]
    example = next(cluster for cluster in shown if len(cluster) > 1)
    return (f"a character here is a Unicode code point, not what shows as one: these {len(text):,} show as "
            f"{len(shown):,}, since {len(text) - len(shown):,} fold into the one before them: {listed} "
            f"('{terminal_safe(example)}' is {len(example)} code points)")


def _render_merges(result: TokResult, console: Console) -> None:
    """BPE worked out: each piece's bytes, then one line a merge with the piece's tokens after it."""
    say(console, "BPE, piece by piece: each piece starts as its bytes; at each step the adjacent pair learned first "
                 "(the lowest rank) becomes one token, wherever it occurs", "bold")

    def spaced(tokens: list[str]) -> str:
        return " ".join(visible(t) for t in tokens)

    for piece in result.pieces[:TOK_PIECES]:
        whole = " (in the vocabulary whole: taken as one token, no merges)" if piece.whole else ""
        say(console, f"{quoted(piece.text)}: {spaced(piece.start)}{whole}")
        for m in piece.merges:
            say(console, f"{visible(m.left)} + {visible(m.right)} (rank {m.rank}) -> {spaced(m.tokens)}", indent=2)
    if len(result.pieces) > TOK_PIECES:
        note(console, f"... and {count(len(result.pieces) - TOK_PIECES, 'more piece')}")
    merges = sum(len(p.merges) for p in result.pieces)
    rising = all(a.rank < b.rank for p in result.pieces for a, b in zip(p.merges, p.merges[1:]))
    order = "; in every piece the ranks rise: a merge needs the tokens that earlier merges made" if rising else ""
    check = ("they end on the tokenizer's own tokens (checked)" if result.merges_agree else
             "they do NOT end on the tokenizer's own tokens: its rules go beyond plain merges")
    note(console, f"{count(sum(len(p.start) for p in result.pieces), 'byte')} in {count(len(result.pieces), 'piece')}, "
                  f"{count(merges, 'merge')}, {count(len(result.ids), 'token')}: {check}{order}")


# --- :report -------------------------------------------------------------------------------------
REPORT_SAMPLES = 3  # samples on the page, seeds 0, 1, 2
REPORT_SAMPLE_TOKENS = 120  # at most this long each (the n setting, if shorter)


@dataclass
class ReportResult:
    path: str  # the page written, an absolute path: one self-contained HTML file (no script, nothing fetched)
    size_bytes: int  # its size in bytes
    sections: list[str]  # its sections' headings, in the page's order
    seconds: float  # how long writing it took, the evaluations it ran included
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate: the page is that model's
    # a page was at the path that this session had not written (another session's, or one of before): it is replaced
    replaced_unseen: bool = False
    # where that page was kept, beside it as NAME.kept.html (one copy a page name), before the new one replaced it
    # (None: no such page, the new page repeats it byte for byte, or it could not be copied)
    kept_as: str | None = None
    # a page was at the path (this session's, or one that replaced_unseen names): `:report` alone wrote over
    # ./report.html without a word
    replaced: bool = field(default=False, metadata={"view_only": True})
    # the page replaced_unseen names was the new page byte for byte (a rerun of `minitf report`): nothing kept
    same_page: bool = field(default=False, metadata={"view_only": True})
    # the copy kept_as names replaced a copy kept before it (one copy a page name): that older copy, an earlier page,
    # is gone (false: no copy was there, or nothing was kept)
    kept_over: bool = False


def complete_html(session) -> list[str]:
    return ["report.html"]


# interruptible: its parts (samples, :heads, :context's windows) poll no stop flag, so Ctrl-C went unheard and the
# page was written; they only read the model, and the page is written whole or not at all (report.write_report)
@command("report", "Write one self-contained HTML page: config, loss chart, attention maps, token embeddings, "
                   "loss by position, teacher forcing, what each head does, samples.",
         params=[
    Param("path", str, help="the .html file to write (default report.html)", positional=True, complete=complete_html,
          path=True, browse="folders"),
    # an option, not the text after the command as :attn and :score take theirs: that is the page's path; named as
    # :score and :heads name theirs, and as :attn's (prompt) too, the word a teacher typed first
    Param("text", str, aliases=("prompt",), meta="TEXT",
          help="the text the attention maps, the embedding map's bold tokens and teacher forcing read; past the "
               "model's window its start is dropped and its last max_seq_len tokens read, as :attn and :score read "
               "it (default: a sample of the data, ended where a word ends)"),
], interruptible=True, json_version=5)  # fmt: skip
def cmd_report(session: Session, args: dict, reporter: Reporter) -> ReportResult:
    from ..report import ReportData, build_report, check_report_path, shown_frames, write_report

    path = check_report_path((args["path"] or "").strip() or "report.html")  # before any work
    start = time.perf_counter()
    data = session.data
    model = session.model

    from ..core.bpe import decode_after, shown_piece
    from ..core.generate import generate
    from ..core.inside import attention_maps

    # a bar over the parts (the loss by position a step per window): a 12 x 768 model took minutes, nothing shown
    # the loss by position scores :context's own windows (as many, the same counter, the trained window): the page's
    # mean read 1.617 on 256 windows where :context said 1.634 on its 1,024, and a class asked which was right
    from .context import default_windows

    report_windows = default_windows(session.model_config.max_seq_len)
    # what the bar counts, in its own words: "report: 71/264" named no unit of the 264; the windows it scores, which
    # a short val split holds fewer of (it said 4,096 where every one of 300 was scored)
    scored_windows = _windows_scored(data, report_windows, session.model_config.max_seq_len)
    parts = 5 + REPORT_SAMPLES + scored_windows
    what = f"report ({count(REPORT_SAMPLES, 'sample')}, {scored_windows:,} val windows, 5 other parts)"
    done = [0]

    def advance(by: int = 1) -> None:
        done[0] += by
        reporter.on_progress(what, done[0], parts)

    given = args["text"] or None
    from ..core.data import VocabOnly

    # the data is not here (a checkpoint's vocabulary alone): the default text is sample_prompt's stand-in, words made
    # of the vocabulary's characters, which the page called "a sample of the data" and scored as if it were
    stand_in = given is None and isinstance(data, VocabOnly)
    prompt = given or report_text(data)
    # as :attn reads a prompt: its last max_seq_len tokens; the page says what was cut (noted), and so does a notice
    prompt, ids, dropped = view_prompt(session, prompt, reporter, given=True, noted=True)
    if dropped and given:
        reporter.notice(f"the text is longer than max_seq_len={session.model_config.max_seq_len}; the attention maps "
                        f"read its last {count(len(ids), data.tokenizer.unit)}, as the page says")
    maps = attention_maps(model, ids)
    advance()
    g = session.gen_config
    start_text = default_prompt(data.tokenizer, otherwise=sample_prompt(data))  # the samples' start: not text=
    samples, grades, asked = [], [], False
    left_out = []  # (section, why): said on the page and here (a page without its heads said they were there)
    for seed in range(REPORT_SAMPLES):
        # a task: the held-out question `:gen gen_seed=N` asks, graded as it grades it (one question for every seed
        # wrote one answer three times, ungraded)
        question = task_question(data, seed)
        asked = question is not None
        begun = question or start_text
        settings = g.replace(n=min(g.n, REPORT_SAMPLE_TOKENS), gen_seed=seed, cache=True)
        start_ids = data.tokenizer.encode(begun)
        new = list(generate(model, start_ids, settings, done=getattr(data, "answer_complete", None)))
        samples.append(begun + decode_after(data.tokenizer, start_ids, new))
        graded = data.grade(samples[-1]) if question is not None else None
        grades.append(answer_line(graded, untrained=session.untrained) if graded is not None else None)
        advance()
    how = ("greedy (temperature 0)" if g.temperature == 0 else
           f"sampled at temperature {g.temperature:g}" + (f", top_k {g.top_k}" if g.top_k else "")
           + (f", top_p {g.top_p:g}" if g.top_p is not None and g.top_p < 1 else ""))
    starts = ("each after one of the task's held-out questions" if asked else f"each from {quoted(start_text)}")
    short = (", too short to hold an answer to grade" if asked and any(grade is None for grade in grades) else "")
    # :gen gen_seed=N writes each again where it starts alike and samples this model (not :quantize's int8 copy)
    same_start = asked or start_text == default_prompt(data.tokenizer)
    again = (" (:gen gen_seed=N with the same settings writes each again)"
             if same_start and session.sampling_model is model else "")
    about = (f"{count(REPORT_SAMPLES, 'sample')} of at most {count(min(g.n, REPORT_SAMPLE_TOKENS), 'token')}{short}, "
             f"{starts}, {how}, with gen_seed 0 to {REPORT_SAMPLES - 1}{again}")
    # the same text as the maps (:score cuts a text given to max_seq_len + 1 tokens, with a notice); a task's own
    # sample (None) is its question with the answer after it, whose loss is the one training counts
    read = given or (prompt if getattr(data, "splits", None) is not None else None)
    scored = None
    if stand_in:  # a made-up text's loss measures nothing of the model on its data: left out, and why
        left_out.append(("teacher forcing", "the data is not here, and the text read is a stand-in made of the "
                                            "vocabulary's characters, whose loss says nothing of the data; give "
                                            f"{cmd('report', text='TEXT')} a text of your own to score"))
    elif given and len(data.tokenizer.encode(given)) < 2:  # no next token to score: the page goes without, says why
        left_out.append(("teacher forcing", f"it needs at least two {data.tokenizer.unit}s, one to read and the one "
                                            f"after it to predict; give {cmd('report', text='TEXT')} a longer text"))
    else:
        scored = score_text(session, read, reporter)
    advance()
    from .why import cmd_heads

    try:  # :heads's induction test; a window too short for two copies, or causal=off, has none (the page goes without)
        heads = cmd_heads(session, {"text": None, "layer": None, "seed": None}, reporter)
    except UserError as e:
        heads = None
        left_out.append(("what each head does", str(e)))
    advance()
    from ..core.inside import embedding_map, trained_tokens

    # untied: the rows that trained only, as :embed maps them (the page says how many it leaves out)
    among = trained_tokens(model.config.tie_embeddings, data)
    try:  # a table of fewer than three rows, or one column, has no two directions (the page goes without)
        embedding = embedding_map(model, among)
    except UserError as e:
        embedding = None
        left_out.append(("token embeddings", str(e)))
    advance()
    from ..core.context import position_losses

    before = done[0]

    def windows(scored: int, total: int) -> None:
        done[0] = before + scored * scored_windows // max(total, 1)
        reporter.on_progress(what, done[0], parts)

    try:  # :context's curve, its numbers; a task's question-only positions are nan, left out of the chart
        context = position_losses(model, data, session.trainer.device, report_windows,
                                  counter=default_counter(data.tokenizer.vocab_size) or None, on_progress=windows,
                                  trained=session.trainer.trained_window or session.model_config.max_seq_len,
                                  fast=session.train_config.fast_path)
    except UserError as e:
        context = None
        left_out.append(("loss by position", str(e)))
    for section, why in left_out:
        reporter.notice(f"left out of the page: {section} ({why})")
    status = session.status()  # the numbers the status bar shows, for the line under the loss chart
    done[0] = before + scored_windows
    advance()  # the page itself
    # a page is for sharing: a file's data by its file name (a task with its size), not the path it has on this
    # machine, which a teacher's page showed every student (/home/teacher/course/poem.txt)
    named = data_named(session)
    report = ReportData(
        title=f"minitf report: {named}, step {session.trainer.step}",
        config={"model": session.model_config.to_dict(), "train": session.train_config.to_dict(),
                "gen": session.gen_config.to_dict(), "data": named, "tokenizer": session.tokenizer_setting,
                "last_run": (session.trainer.run_start, session.trainer.run_steps, session.trainer.step)},
        series=history_series(session.trainer.history, "loss"), vocab_size=data.tokenizer.vocab_size,
        prompt=prompt, text_given=given is not None, stand_in=stand_in, dropped=dropped, unit=data.tokenizer.unit,
        window=session.model_config.max_seq_len, layers=maps.layers, maps=maps.maps.tolist(), samples=samples,
        sample_grades=grades, samples_about=about,
        left_out=[(section, _on_page(why, session)) for section, why in left_out],
        # a byte of a longer character by its escape (\xe4), as :attn and :embed name it, not "�"
        frames=session.watch_frames, scored=scored, heads=heads, tokens=[shown_piece(data.tokenizer, i) for i in ids],
        vocab=[shown_piece(data.tokenizer, i) for i in (range(data.tokenizer.vocab_size) if among is None else among)],
        embedding=embedding, counters=plot_levels(session.counters),
        context=context, context_series=position_series(context) if context is not None else [],
        ablations=switched_off(session), quantized=session.sampling_model is not model, causal=model.causal,
        data_from=data_since(session), weights_from=_on_page(session.weights_from, session), step=session.trainer.step,
        val_loss=status.val_loss, val_step=status.val_step, val_bpc=status.val_bpc, train_loss=status.last_loss,
        accuracy=status.accuracy,
        n_params=status.n_params,
        machine=made_on(session),
    )
    # Two terminals in one folder each wrote report.html: the second replaced the first's page without a word.
    page = build_report(report)
    there = _page_identity(path)
    unseen = there is not None and session.pages_written.get(os.path.abspath(path)) != there
    # kept before it goes, as a checkpoint another session saved is kept as kept-...: a class's lesson.html from last
    # week, or a colleague's index.html, was replaced and said so only once it was gone. Bounded: a one-shot `minitf
    # report` is a new session each run, so every rerun (a Makefile's, a class's) kept the page before it, a dated
    # copy each, byte-identical ones too. Now a page the new one repeats byte for byte is not kept (nothing is lost),
    # and a page keeps one copy, NAME.kept.html, which the next copy replaces: at most two files a page name.
    same = unseen and _holds(path, page)
    kept = _keep_page(path) if unseen and not same else None
    size = write_report(path, page)
    if (written := _page_identity(path)) is not None:
        session.pages_written[os.path.abspath(path)] = written
    sections = (["config"] + (["loss chart"] if report.series else []) + ["attention maps"]
                + (["token embeddings"] if embedding is not None else [])
                + (["loss by position"] if context is not None else []) + (["teacher forcing"] if scored else [])
                + (["what each head does"] if heads is not None else []) + ["samples"])
    if report.frames:
        shown = len(shown_frames(report.frames))
        sections.append((f"{shown} of " if shown < len(report.frames) else "")
                        + f"{count(len(report.frames), 'frame')} of watch={report.frames[0].view}")
    return ReportResult(os.path.abspath(path), size, sections, time.perf_counter() - start, report.ablations,
                        replaced_unseen=unseen, kept_as=kept[0] if kept else None, replaced=there is not None,
                        same_page=same, kept_over=kept is not None and kept[1])


def kept_name(path) -> str:
    """Where the one kept copy of the page at `path` goes: beside it, NAME.kept.html."""
    stem, suffix = os.path.splitext(str(path))
    return f"{stem}.kept{suffix}"


def _holds(path, page: str) -> bool:
    """Whether the file at `path` is `page` byte for byte, as write_report writes it (UTF-8)."""
    try:
        with open(path, "rb") as there:
            return there.read() == page.encode("utf-8")
    except OSError:
        return False


def _keep_page(path) -> tuple[str, bool] | None:
    """A copy of the page at `path` beside it as kept_name names it, whole or not at all (a temporary file renamed
    over any copy kept before); its absolute path and whether it replaced an earlier copy, or None where it cannot
    be made (the page is then replaced as before, which the result says)."""
    kept = kept_name(path)
    earlier = os.path.exists(kept)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(kept)[:40]}.", suffix=".tmp",
                                   dir=os.path.dirname(os.path.abspath(kept)))
        with open(path, "rb") as page, os.fdopen(fd, "wb") as copy:
            shutil.copyfileobj(page, copy)
        shutil.copymode(path, tmp)  # the page's own permissions, not mkstemp's private 0600
        os.replace(tmp, kept)
    except OSError:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        return None
    return os.path.abspath(kept), earlier


def _windows_scored(data, windows: int, max_seq_len: int) -> int:
    """How many val windows core.context.position_losses scores when asked for `windows`: every window of a val split
    that holds no more than that, each once; `windows` where the data draws its windows anew or has none to tell."""
    window_count = getattr(data, "window_count", None)
    if window_count is None:
        return windows
    try:
        return min(windows, window_count("val", max_seq_len))
    except UserError:  # a split shorter than a window: position_losses says it, and the page goes without
        return windows


REPORT_WORD_SCAN = 24  # characters past the views' sample searched for the end of the word it ends in


def report_text(data) -> str:
    """The text the report's per-text sections read by default: the views' sample (sample_prompt), ended where a
    word ends where the data has spaces. The views' 16 characters cut the word they end in ("The example abov"),
    which the page quoted as the data's example: the word is completed from the text after it, or, where it runs
    past REPORT_WORD_SCAN more characters, left out. A text of no spaces (Chinese, a task) has no such ends."""
    from .base import SAMPLE_SCAN, sample_window

    splits = getattr(data, "splits", None)
    if splits is None:  # a task's question, random tokens: no words
        return sample_prompt(data)
    start, window = sample_window(data)  # sample_prompt's text, and where it starts
    if " " not in window.strip() or not re.search(r"\w$", window):  # no spaces, or at a word's end already
        return window
    text = data.tokenizer.decode(splits["val"][:SAMPLE_SCAN].tolist())
    after = text[start + len(window) : start + len(window) + REPORT_WORD_SCAN]
    rest = re.match(r"\w*", after).group()
    if len(rest) < len(after):  # the word ends in the text scanned: completed (nothing to add where it ended)
        return window + rest
    return window[: re.search(r"\W\w*$", window).start() + 1].rstrip() or window


def _page_identity(path) -> tuple[int, int, int] | None:
    """Which file is at `path` now (inode, size, modification time), None where there is none: a page is written
    as a new file renamed into place (report.write_report), so each page written has an identity of its own."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def made_on(session: Session) -> str:
    """Where a page's numbers were made: the dtype of the latest training step and the machine. The page showed
    "dtype auto" alone, which is bfloat16 on a CPU with bfloat16 units and float32 on one without: two pages of one
    lesson, made on a teacher's and a student's machines, differed in their losses with nothing to say why."""
    import torch

    from ..core.checkpoint.listing import dtypes_in_order
    from ..core.device import cpu_kind, describe_devices
    from ..core.precision import newton_schulz_dtype, training_dtype

    trainer, setting = session.trainer, session.train_config.dtype
    device = trainer.device
    if device.type == "cpu":
        where = cpu_kind()
    else:
        where = next((d.description for d in describe_devices() if d.name == str(device)), str(device))
    here = training_dtype(setting, device)
    would = f"one would run in {here}"
    threads = count(torch.get_num_threads(), "torch thread")
    made = f"This page was made on {device.type}: {where}; {threads}, torch {torch.__version__}."
    if trainer.trained_dtype is None:
        if trainer.step > 0:  # a checkpoint of an older minitf: "no training step ran" was said of a model at step 40
            return (f"Trained {count(trainer.step, 'step')} before minitf recorded the dtype steps ran in; {would} "
                    f"here (dtype={setting}). {made}")
        return f"No training step ran here yet; {would} (dtype={setting}). {made}"
    # "ran in bfloat16 (dtype=auto)" above "made on ... no native bfloat16" read as a contradiction: the steps ran in
    # more than one dtype, or elsewhere (a checkpoint of the other kind of CPU), and the page says which
    dtypes = dtypes_in_order(trainer.dtype_spans) or []
    ran = (f"The training steps ran in {' then '.join(dtypes)}, the latest in {trainer.trained_dtype}"
           if len(dtypes) > 1 else f"The latest training step ran in {trainer.trained_dtype}")
    ns = trainer.trained_ns_dtype if trainer.config.optimizer == "muon" else None
    ns_here = newton_schulz_dtype(setting, device)
    if ns is not None and ns != trainer.trained_dtype:  # dtype=bfloat16 without bfloat16 units: float32 there
        ran += f", Muon's Newton-Schulz in {ns}"
    ran += f" (dtype={setting})"
    if trainer.trained_dtype != here or (ns is not None and ns != ns_here):
        also = f", Newton-Schulz in {ns_here}" if ns is not None else ""
        ran += f", not what one would run in here ({here}{also}): it ran on another machine, or under another setting"
    # the page is made here; a loaded checkpoint's steps may have run on another machine, which its dtype tells of
    return f"{ran}. {made}"


def _on_page(text: str | None, session: Session) -> str | None:
    """`text` as a page for sharing says it: the data's path and a Hugging Face folder's by their last names (a file's
    data as data_named names it, hf:gpt2), not as they lie on this machine: "left out of the page: loss by position
    (the data this model was trained on (/home/teacher/course/poem.txt) ...)" showed every student the teacher's
    folders. The terminal's notices keep the whole path, for the person who can act on it."""
    if text is None:
        return None
    spec = session.data_spec
    if spec and os.sep in spec:
        text = text.replace(spec, data_named(session))
    for found in re.findall(r"hf:(\S*[/\\][^\s,;)]+)", text):  # hf:/home/me/models/gpt2 -> hf:gpt2
        last = re.split(r"[/\\]", found.rstrip("/\\"))[-1]
        text = text.replace("hf:" + found, "hf:" + last)
    return text


@render.register(ReportResult)
def render_report(result: ReportResult, console: Console) -> None:
    say(console, Text(f"wrote {result.path}", style="green") +
        Text(f" ({fmt.size(result.size_bytes)}: {', '.join(result.sections)}; {result.seconds:.2f} s)"))
    if result.replaced_unseen and result.same_page:  # a rerun wrote the same page: nothing lost, nothing kept
        note(console, f"{os.path.basename(result.path)} held this very page byte for byte (an earlier run's): "
                      "written again, no copy kept")
    elif result.replaced_unseen:  # as :save says it of a checkpoint: the other's page went without a word
        # one copy a page name, said with it: a class rerunning `minitf report` finds two files, not a folder of them
        bound = ("over the copy kept before: one copy of a page is kept" if result.kept_over else
                 "one copy of a page is kept, and the next one kept replaces it")
        kept = (f"kept as {os.path.basename(result.kept_as)} beside it, then replaced ({bound})"
                if result.kept_as is not None else "it could not be copied aside, and is replaced")
        say(console, f"{result.path} held a page this session had not written (another session's, or an earlier "
                     f"one's?): {kept}", "yellow")
    elif result.replaced:
        note(console, f"replaced the earlier {os.path.basename(result.path)} "
                      f"({cmd('report', 'NAME.html')} writes another page beside it)")
    note(console, "one self-contained file: open it in any browser, no network needed")
    if result.ablations:
        note(console, f"made with {', '.join(result.ablations)} switched off, as the page says: its attention, "
                      f"losses, heads and samples are the ablated model's ({cmd('ablate', 'off')} puts the model back)")
