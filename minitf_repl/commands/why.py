"""Why the model answers as it does: `:patch` (activation patching), `:attrib` (direct logit attribution)
and `:heads` (what each attention head does, and what copying from context needs).

The views in commands/inside.py show what a model does on one input; these ask which of its parts
carry the answer. The numbers come from core.patching, core.attribution and core.heads; these
commands pick the prompts and the answer token, check them, and turn the core's tensors into lists
and plain numbers, so that every result is JSON as it stands. The heat map takes colour where the
console has it, characters without (render.heatmap).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from rich import box
from rich.cells import cell_len, set_cell_size
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.bpe import shown_pieces
from ..core.errors import UserError
from ..core.variants import norm_kind, position_kind
from ..core.words import count, quoted_chars, quoted_end
from ..palette import VISIBLE, quoted, visible
from ..registry import Param, clip
from ..render import fmt
from ..render.heatmap import cell, legend, plain, unscaled
from ..render.renderers import render
from ..render.chart import spark
from ..render.tables import NARROW, add_row, fits, fitting_table
from ..render.watch import BEGUN_BY, COPIES_AT
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again
from .base import (BLOCK, VIEW_DEFAULT, ablation_note, check_layer, command, sample_prompt, switched_off, true_next,
                   unread_note, view_prompt)
from .worked import spark_scale

FAMILY = "why it answers"  # the heading :help lists this module's commands under


def one_token(session: Session, text: str, what: str = "target") -> int:
    """The id of `text`, which must be exactly one token of the vocabulary."""
    tokenizer = session.data.tokenizer
    if text not in tokenizer.itos:  # the symbols the views draw whitespace with stand for it: target=␣ is a space
        text = "".join(TYPED.get(ch, ch) for ch in text)
    try:
        ids = tokenizer.encode(text)
    except UserError:  # its fix was the prompt's ("remove it: sort has +0123456789= only"), not the target's
        ids = None
    if ids is None or len(ids) != 1:
        example = next((t for t in ("4", *tokenizer.itos) if len(t) == 1 and t.isalnum() and _one_id(tokenizer, t)),
                       None)
        space = f"{what}=␣ for a space" if _one_id(tokenizer, " ") else None
        shown = (f"e.g. {what}={example}" + (f" ({space})" if space else "") if example is not None else
                 f"e.g. {space}" if space else "")
        got = "not in the vocabulary" if ids is None else count(len(ids), "token")
        raise UserError(f"{what} must be one token, got {clip(text)!r} ({got}); "
                        f"give one {tokenizer.unit}{' of the vocabulary' if ids is None else ''}"
                        f"{', ' + shown if shown else ''}")
    return ids[0]


def _one_id(tokenizer, text: str) -> bool:
    """Whether `text` is one token of this vocabulary: an example a message gives must be one (a text file of letters
    has no '4', a task's digits no space)."""
    try:
        return len(tokenizer.encode(text)) == 1
    except UserError:
        return False


TYPED = {shown: ch for ch, shown in VISIBLE.items()}  # ␣ -> " ", ↵ -> "\n": what a symbol the views draw stands for


def wide_start(tokens: list[str]) -> bool:
    """Whether a token starts with a character two columns wide, which a grid's cell of one column cannot head."""
    return any(cell_len(visible(t)[:1]) > 1 for t in tokens)


@dataclass
class PatchResult:
    clean: str  # the prompt whose answer is patched back
    corrupt: str  # the prompt it is patched into (the same length in tokens)
    clean_tokens: list[str]  # the clean prompt, one token per position (a BPE's lone byte as its escape, \xe2)
    corrupt_tokens: list[str]  # the corrupted prompt, likewise
    answer: str  # the clean answer: target=, the task's answer, or the clean run's likeliest next token
    foil: str  # the corrupted run's likeliest next token (the clean runner-up when the two agree)
    clean_diff: float  # z[answer] - z[foil] at the last position of the clean prompt
    corrupt_diff: float  # the same on the corrupted prompt
    stream: list[str]  # the rows of resid: "embed", "blocks.0", ...
    resid: list[list[float]]  # [row][position]: the fraction restored when the stream there is the clean one
    heads: list[list[float]]  # [layer][head]: the fraction restored when that head's output is the clean one
    reading: str  # one line: what the numbers say
    same_answer: bool = False  # the corrupted prompt's likeliest token is the answer too: the foil is the runner-up
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    # heads ("L.H") whose output :ablate zeroes now (their own, or their block skipped): zero in both runs, so their
    # cells restore nothing, by no merit of theirs; the reading never names them
    off_heads: list[str] = field(default_factory=list)
    untrained: bool = False  # the model has not trained: its answer and every cell are random weights' (said)


def heads_off(session: Session) -> list[str]:
    """The heads ("L.H") whose output :ablate zeroes now: those switched off, and every head of a skipped block."""
    n_heads = session.model_config.n_heads
    off = set()
    for a in session.ablations:
        if a.kind == "head":
            off.add((a.layer, a.head))
        elif a.kind == "block":
            off.update((a.layer, h) for h in range(n_heads))
    return [f"{layer}.{head}" for layer, head in sorted(off)]


def _task_pair(data, clean: str) -> str:
    """`clean` and the same question with one digit changed so that the first answer token changes: a patch that
    moves nothing measures nothing (sort's 314159= against 914159= both answer 1..., and the example was refused as
    "the corruption moves z[answer] - z[foil] by only ..."). The first such change, from the left."""
    answer = getattr(data, "answer", None)
    for at, ch in enumerate(clean):
        for digit in "0123456789" if ch.isdigit() else "":
            corrupt = clean[:at] + digit + clean[at + 1:]
            if answer is not None and answer(corrupt)[:1] != answer(clean)[:1]:
                return f"{clean} {corrupt}"
    return f"{clean} {'1' if clean[0] == '9' else '9'}{clean[1:]}"


def split_prompts(text: str | None, data=None) -> tuple[str, str]:
    """`CLEAN CORRUPT`, or `CLEAN vs CORRUPT` when a prompt has spaces, -> the two prompts. The example of the error
    is two questions of `data` where it is a task (sort:6 asks six digits), else two texts."""
    text = (text or "").strip()
    # "vs" as a word of its own parts them, at an end too: `abc vs` is a prompt and a missing one, not "abc" and "vs"
    joined = re.split(r"(?<!\S)vs(?!\S)", text)  # the REPL joins the two words `abc vs` as "abc vs vs"
    parts = [p.strip() for p in joined] if len(joined) > 1 else text.split()
    if len(parts) != 2 or not all(parts):
        pair = _example_pair(data)
        given = [p for p in parts if p]  # what was typed, said: "give two prompts" alone left `a vs b vs c` a riddle
        shown = ", ".join(repr(clip(p, 20)) for p in given[:4]) + (", ..." if len(given) > 4 else "")
        got = f"got {count(len(given), 'prompt')} ({shown}); " if given else ""
        raise UserError(f"{got}give two prompts, the clean one and the corrupted one, e.g. {cmd('patch', pair)} (a "
                        "prompt with spaces in quotes, or CLEAN vs CORRUPT)")
    if parts[0] == parts[1]:  # every fraction 0/0: it said "the same logit difference", never that they were one
        raise UserError(f"the two prompts are the same, {parts[0]!r}: patching moves parts of one run into the other, "
                        f"so they must differ, in a token or two; e.g. {cmd('patch', _example_pair(data))}")
    return parts[0], parts[1]


def _example_pair(data) -> str:
    """Two prompts for an example of :patch: a task's question and the same with one digit changed, else two texts."""
    example = getattr(data, "example", None)
    if isinstance(example, str) and "=" in example:
        return _task_pair(data, example.partition("=")[0] + "=")
    return _text_pair(data)


# Text pairs for :patch's example, tried in order: the first whose two prompts the data's tokenizer reads as the same
# number of tokens (a BPE of 512 on pydoc read "the dog sat" as 6 tokens, "the cat sat" as 5, and the example failed)
TEXT_PAIRS = ("the cat sat vs the dog sat", "the cat sat vs the hat sat", "the cat sat vs the bat sat",
              "the cat sat vs the mat sat", "a cat sat vs a dog sat")


def _text_pair(data) -> str:
    """Two prompts of the same length in `data`'s tokens for an example: the first of TEXT_PAIRS the tokenizer reads
    so, or where none (random symbols, a file of its own), four of its symbols and the same with the first one
    changed."""
    tokenizer = getattr(data, "tokenizer", None)
    if tokenizer is None:
        return TEXT_PAIRS[0]
    for pair in TEXT_PAIRS:
        if _alike(tokenizer, *pair.split(" vs ")):
            return pair
    symbols = [t for t in tokenizer.itos if len(t) == 1 and t.isprintable() and not t.isspace() and t not in "\"'\\"
               and _one_id(tokenizer, t)]
    if len(symbols) < 2:
        return TEXT_PAIRS[0]
    clean = "".join(symbols[:4])
    return f"{clean} {symbols[1]}{clean[1:]}"


def _alike(tokenizer, clean: str, corrupt: str) -> bool:
    """Whether the tokenizer reads both prompts back as written, in the same number of tokens."""
    try:
        a, b = tokenizer.encode(clean), tokenizer.encode(corrupt)
        return len(a) == len(b) and tokenizer.decode(a) == clean and tokenizer.decode(b) == corrupt
    except UserError:
        return False


def patch_reading(heads: list[list[float]], stream: list[str], resid: list[list[float]],
                  gap: float | None = None, off: list[str] = (), ablated: bool = False, shared: str | None = None,
                  example: str = "") -> str:
    """One line: the head that brings back the most, and where the stream holds the answer at the end; where the
    corruption hardly moves the logit difference (`gap` within core.patching.MIN_GAP of 0), that the fractions are
    noise; where it moves it the wrong way (the corrupted prompt favours the answer more), that they are upside
    down. The heads `off` ("L.H", switched off by :ablate) are never named: theirs is a 0 by no merit of theirs.
    `ablated`: something is switched off, which may be why the clean run no longer gives its answer (a sort model
    with block 0 skipped): the fix names `:ablate off` before other prompts or training. `shared`: the next token the
    data gives both prompts alike (sort's 889978= and 889979= both answer 7...), where it knows both: then no head
    has an answer to carry, whatever the gap (one of 0.14 read head 0.0 as "most of it comes back (7.99)");
    `example`: a pair of prompts whose answers differ, for the fix."""
    from ..core.patching import MIN_GAP

    fix = (f"{cmd('ablate', 'off')} first if the part switched off is what broke the clean answer, else choose a "
           "corrupted prompt that changes the answer" if ablated else
           "choose a corrupted prompt that changes the answer (or train first)")
    if gap is not None and -MIN_GAP < gap < MIN_GAP:
        return (f"the corruption moves z[answer] - z[foil] by only {gap:+.3f}, so these fractions are noise over a "
                f"tiny difference; {fix}")
    if shared is not None:
        instead = f", e.g. {cmd('patch', example)}" if example else ""
        return (f"the corrupted prompt does not change the answer: the data's next token after both is "
                f"{quoted(shared)}, so no head has an answer to carry across and these fractions mean nothing; "
                f"choose a corrupted prompt whose answer differs{instead}")
    if gap is not None and gap <= -MIN_GAP:
        return (f"the corrupted prompt favours the answer more than the clean one (z[answer] - z[foil] moves by "
                f"{gap:+.3f}, the wrong way), so these fractions read upside down; {fix}")
    best = max(((v, layer, h) for layer, row in enumerate(heads) for h, v in enumerate(row)
                if f"{layer}.{h}" not in off), default=None)
    if best is None and heads:
        line = f"every head is switched off ({cmd('ablate', 'off')} puts them back), so no head can bring anything back"
    elif best is None:
        return "the model has no heads to patch"
    else:  # every head that reads as the most, at the table's two decimals: not one of two equals
        tied = [f"{layer}.{h}" for layer, row in enumerate(heads) for h, v in enumerate(row)
                if f"{layer}.{h}" not in off and two(v) == two(best[0])]
        line = _best_head(best[0], tied)
    moved = next((name for name, row in zip(stream, resid) if row[-1] >= 0.5), None)
    if moved is not None and moved != stream[-1]:
        line += f"; the last position holds most of the answer from {moved} on"
    return line


def _best_head(value: float, names: list[str]) -> str:
    """What the head (or the heads, alike at two decimals) that brings back the most does."""
    one = len(names) == 1
    heads = f"head {names[0]}" if one else "heads " + ", ".join(names[:-1]) + f" and {names[-1]}"
    each = "" if one else " each"
    if value >= 0.5:
        return f"most of it comes back when {heads} {'is' if one else 'are each'} patched ({two(value)})"
    if value >= 0.2:
        return (f"{heads} {'brings' if one else 'bring'} back the most ({two(value)}{each}); no single head carries "
                "most of it")
    return f"no single head brings much back (the most: {heads}, {two(value)}{each})"


def two(value: float) -> str:
    """`value` to two decimals, never "-0.00": a head whose patch moves the difference by -0.001 restores nothing,
    as one at +0.001 does."""
    text = f"{value:.2f}"
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


@command("patch", "Activation patching: which layers, positions and heads carry the answer from one prompt "
                  "to another.", params=[
    Param("prompts", str, help="CLEAN CORRUPT: two prompts of the same length in tokens (quote one that has "
                               "spaces, or type CLEAN vs CORRUPT); needed on every data, a task's too",
          positional=True, pair=" vs ", meta="CLEAN CORRUPT", required=True),
    Param("target", str, blank=True, meta="CHAR",
          help="the clean answer's token, ␣ for a space (default: a task's answer, else the clean run's likeliest "
               "next token)"),
], interruptible=True, json_version=5,
         guide="inside-views.md#why-activation-patching-and-direct-logit-attribution")  # fmt: skip
def cmd_patch(session: Session, args: dict, reporter: Reporter) -> PatchResult:
    data = session.data
    clean, corrupt = split_prompts(args["prompts"], data)
    target = args["target"] if args["target"] is not None else true_next(data, clean)
    answer = one_token(session, target) if target is not None else None
    clean_ids, corrupt_ids = data.tokenizer.encode(clean), data.tokenizer.encode(corrupt)
    window = session.model_config.max_seq_len
    if max(len(clean_ids), len(corrupt_ids)) > window:
        raise UserError(f"the prompts are longer than max_seq_len={window}; shorten them")

    from ..core.patching import activation_patching

    r = activation_patching(session.model, clean_ids, corrupt_ids, answer)
    # where the data knows both prompts' next token, one and the same: the corruption changes no answer
    known = true_next(data, clean), true_next(data, corrupt)
    shared = known[0] if known[0] is not None and known[0] == known[1] else None
    example = (_task_pair(data, clean) if getattr(data, "answer", None) is not None else _example_pair(data)
               ) if shared is not None else ""
    from ..core.bpe import shown_piece

    def itos(i: int) -> str:  # named as :tok names it: two byte tokens both "�" read as the same, so the prompts'
        return shown_piece(data.tokenizer, i)  # differing positions went unlisted, and a byte by its escape (\xe4)
    resid, heads = r.resid.tolist(), r.heads.tolist()
    off = heads_off(session)
    ablations = switched_off(session)
    return PatchResult(
        clean=clean, corrupt=corrupt, clean_tokens=[itos(i) for i in clean_ids],
        corrupt_tokens=[itos(i) for i in corrupt_ids], answer=itos(r.answer), foil=itos(r.foil),
        clean_diff=r.clean_diff, corrupt_diff=r.corrupt_diff, stream=r.stream, resid=resid, heads=heads,
        reading=patch_reading(heads, r.stream, resid, r.clean_diff - r.corrupt_diff, off, bool(ablations), shared,
                              example),
        same_answer=r.same_answer, ablations=ablations, off_heads=off, untrained=session.untrained,
    )


def clip_pair(a: str, b: str, width: int = 30) -> tuple[str, str]:
    """Two prompts cut to `width` characters at the same place, around where they first differ (… where cut):
    cut at their ends alone, two long prompts that differ early read as the same text."""
    n = max(len(a), len(b))
    if n <= width:
        return a, b
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    start = max(0, min(first - width // 3, n - width))

    def cut(text: str) -> str:
        return ("…" if start else "") + text[start:start + width] + ("…" if start + width < len(text) else "")

    return cut(a), cut(b)


def restored_grid(rows: list[str], tokens: list[str], values: list[list[float]], width: int, as_text: bool) -> Text:
    """Rows of cells, one per position, shaded by the fraction restored (0 or less: the lowest, 1 or more: the top)."""
    label = max(len(r) for r in rows) + 1
    out = Text(" " * label)
    for ch in tokens:  # cut and padded by cells: 今 takes two, and its column must be as wide as the cells under it
        out.append(set_cell_size(visible(ch), width), style="bold")  # as :attn's keys: escapes once, " " as ␣
    for name, row in zip(rows, values):
        out.append("\n")
        out.append(name.ljust(label), style="cyan")
        for v in row:
            out.append_text(cell(min(1.0, max(0.0, v)), width, as_text))
    return out


@render.register(PatchResult)
def render_patch(result: PatchResult, console: Console) -> None:
    as_text = unscaled(console)
    answer, foil = quoted(result.answer), quoted(result.foil)  # '\x14' once, not repr's '\\x14'
    clean, corrupt = clip_pair(result.clean, result.corrupt)
    say(console, f"patching {quoted_chars(clean)} into {quoted_chars(corrupt)}: answer {answer} against {foil}", "bold")
    if result.same_answer:
        # "too" and "second choice" held only for the clean run's own answer: with target= the answer may be a token
        # the clean run does not favour, and its likeliest other token its first choice
        note(console, f"the corrupted prompt's likeliest next token is the answer {answer}, so the foil is the clean "
                      f"run's likeliest other token {foil}: the cells measure how far it moves the two apart")
    note(console, f"logit difference z[{answer}] - z[{foil}] at the last position: clean "
                  f"{two(result.clean_diff)}, corrupted {two(result.corrupt_diff)}; each cell: the fraction of the "
                  "difference that comes back when that activation is taken from the clean run (1: all of it)")
    T = len(result.corrupt_tokens)
    label = max(len(r) for r in result.stream) + 1
    # 2 columns a cell where they fit, and always where a token starts with a character two columns wide (今, an emoji)
    width = 2 if label + 2 * T <= console.width or wide_start(result.corrupt_tokens) else 1
    shown = max(1, min(T, (console.width - label) // width))
    start = T - shown
    say(console, "the residual stream, after each layer, at each position", "bold")
    if start:
        note(console, f"showing the last {shown} of {T} positions (the terminal is {console.width} columns wide)")
    tokens = result.corrupt_tokens[start:]
    console.print(restored_grid(result.stream, tokens, [row[start:] for row in result.resid], width, as_text),
                  highlight=False, no_wrap=True, overflow="ignore")
    console.print(legend(1.0, as_text, "restored", console.width), highlight=False)
    differ = [i for i, (a, b) in enumerate(zip(result.clean_tokens, result.corrupt_tokens)) if a != b]
    if differ:
        where = (f"position {differ[0]}" if len(differ) == 1 else  # "at position 9, 10" read as one place
                 "positions " + ", ".join(str(i) for i in differ[:-1]) + f" and {differ[-1]}")
        note(console, f"the prompts differ at {where} (the columns are the corrupted prompt's tokens)")
    if result.heads:
        say(console, "each head's output, at every position", "bold")
        n_heads = len(result.heads[0])
        # the most restored as the cells show it (2 decimals): heads that read alike are all in bold
        best = max((round(v, 2) for layer, row in enumerate(result.heads) for h, v in enumerate(row)
                    if f"{layer}.{h}" not in result.off_heads), default=None)

        def heads_table(first: int, last: int, short: bool, tight: bool = False) -> Table:
            """Heads first..last - 1; `short`: headed by their numbers alone, under "layer" (a narrow terminal);
            `tight`: a single space between the columns."""
            table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD,
                          pad_edge=False, collapse_padding=tight)
            table.add_column("layer" if not short else "layer\\head", style="cyan", justify="right")
            for h in range(first, last):
                table.add_column(str(h) if short else f"head {h}", justify="right")
            for layer, row in enumerate(result.heads):
                add_row(table, str(layer), *(Text("off", style="dim") if f"{layer}.{h}" in result.off_heads else
                                             Text(two(row[h]), style="bold green" if round(row[h], 2) == best
                                                  and not as_text else "") for h in range(first, last)))
            return table

        # every head under its name; where that does not fit, under its number; then as many heads a table as fit
        # (eight heads at 40 columns were cells of "…")
        tables = [heads_table(0, n_heads, False)]
        if not fits(console, tables[0]):
            tables = [heads_table(0, n_heads, True)]
        if not fits(console, tables[0]):  # 12 heads at 100 columns: one space between them keeps them in one table
            tables = [heads_table(0, n_heads, True, tight=True)]
        if not fits(console, tables[0]):
            per = next((k for k in range(n_heads, 0, -1) if fits(console, heads_table(0, k, True, True))), 1)
            tables = [heads_table(first, min(n_heads, first + per), True, True) for first in range(0, n_heads, per)]
        for table in tables:
            console.print(table)
        if result.off_heads:
            note(console, f"off: switched off by {cmd('ablate')}, its output zeroed in both runs, so patching it "
                          "brings nothing back")
    say(console, result.reading, "green")
    ablation_note(console, result.ablations)
    if result.untrained:  # from the shell `minitf patch A B` ran on a new model with no word, its grid read as a result
        note(console, f"this model has not trained yet: its answer is a guess and the cells show what random weights "
                      f"carry; {look_again('patch', AUTOSAVE_NAME, result.clean, result.corrupt)}")


@dataclass
class AttribPart:
    # "embed (token)" (W_E's row of the token), "embed (position)" (the position table's row, where pos_encoding adds
    # one at the input: learned or sinusoidal), "head 1.2", "ffn 0", "output biases b^O" (every block's W^O bias)
    name: str
    # embed (the token's or the position's: the two sum to the embedding's share) | head | ffn | bias (the
    # feed-forward, the MLP of other texts)
    kind: str
    logit: float  # its share of the target's logit


@dataclass
class AttribResult:
    prompt: str  # the text read (its last max_seq_len tokens): the target's logit is split at its last position
    target: str  # the token whose logit is split
    logit: float  # the model's logit for it at the last position
    offset: float  # what the final norm, frozen at this input's scale, adds on its own (its bias through W_U)
    scale: float  # that frozen scale: the std (LayerNorm) or rms (RMSNorm) of the final residual stream
    parts: list[AttribPart]  # largest share (by size) first; the shares plus the offset are the logit
    prob: float  # the model's probability of the target
    rank: int  # its rank among the next tokens (1: the likeliest)
    norm_bias: bool = True  # the final norm has a bias (False: RMSNorm or bias=off, and the offset is 0)
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    untrained: bool = False  # the model has not trained: the logit split is random weights' (said)
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    # the final norm normalises (norm=none: the identity, which adds nothing and divides by 1: the notes spoke of a
    # norm "frozen at this input's scale" the model does not have), as its kind declares
    normalised: bool = field(default=True, metadata={"view_only": True})
    # why there is no embed (position) row, said under the rows ("" where there is one: a table is added at the
    # input; switched off by :ablate positions it writes exactly 0, which the note of such parts says)
    no_position: str = field(default="", metadata={"view_only": True})


ATTRIB_ROWS = 12  # parts shown; the rest are summed on one line
# how :attrib and :heads read a head's name, said once in each: "head 0.0", "head 4.2" read as decimal numbers
HEAD_NAME_EXAMPLE = "1.2: layer 1's head 2"


@command("attrib", "Direct logit attribution: how much the token and position embeddings, each head and each FFN "
                   "add to the next token's logit.", params=[
    Param("prompt", str, help=f"text to continue {VIEW_DEFAULT}", positional=True),
    Param("target", str, blank=True, meta="CHAR",
          help="the token whose logit is split, ␣ for a space (default: a task's answer or the true next token "
               "of the default prompt, else the likeliest)"),
], json_version=7, guide="inside-views.md#why-activation-patching-and-direct-logit-attribution")  # fmt: skip
def cmd_attrib(session: Session, args: dict, reporter: Reporter) -> AttribResult:
    data = session.data
    text, ids, dropped = view_prompt(session, args["prompt"], reporter)
    target = args["target"]
    if target is None:
        target = true_next(data, text)
    target_id = one_token(session, target) if target is not None else None

    from ..core.attribution import direct_logit_attribution

    a = direct_logit_attribution(session.model, ids, target_id)
    parts = sorted((AttribPart(p.name, p.kind, p.logit) for p in a.parts), key=lambda p: -abs(p.logit))
    from ..core.bpe import shown_piece

    return AttribResult(prompt=text, target=shown_piece(data.tokenizer, a.target), logit=a.logit, offset=a.offset,
                        scale=a.scale, parts=parts, prob=a.prob, rank=a.rank, norm_bias=a.norm_bias,
                        ablations=switched_off(session), untrained=session.untrained, dropped=dropped,
                        unit=data.tokenizer.unit, normalised=norm_kind(session.model_config).normalises,
                        no_position=_no_position(position_kind(session.model_config)))


def _no_position(kind) -> str:
    """Why :attrib lists no embed (position) row for a model of this pos_encoding kind ("": it lists one). A learner
    looked for what the position table writes; with RoPE the positions act inside attention, in the heads' rows."""
    if kind.table is not None:
        return ""
    if kind.rotary:
        return (f"no embed (position) row: pos_encoding={kind.name} adds no position table at the input; it turns q "
                "and k by their positions inside attention, so what the positions do is in the heads' rows")
    return f"no embed (position) row: pos_encoding={kind.name} adds no position table at the input ({kind.embedding})"


@render.register(AttribResult)
def render_attrib(result: AttribResult, console: Console) -> None:
    as_text = plain(console)
    target = quoted(result.target)  # '\x14' once, not repr's '\\x14'
    say(console, f"what writes the logit of {target} after {quoted_end(result.prompt, 40)}", "bold")
    through = ("read through the final norm frozen at this input's scale" if result.normalised else
               "read straight through the head: norm=none has no final norm")
    note(console, f"{target}: logit {result.logit:.2f}, probability {result.prob:.3f}, rank {result.rank}; "
                  f"each part's share, {through}")
    # a part switched off by :ablate (a head, a skipped block's heads and FFN) writes exactly 0: such rows filled the
    # list with "+0.00" and pushed parts that write something into "smaller parts"
    silent = [p for p in result.parts if p.logit == 0.0]
    written = [p for p in result.parts if p.logit != 0.0]
    shown = written[:ATTRIB_ROWS]
    peak = max((abs(p.logit) for p in shown), default=0.0) or 1.0
    name_width = max((len(p.name) for p in shown), default=4)
    bar_width = max(4, min(40, console.width - name_width - 12))
    for p in shown:
        line = Text(p.name.ljust(name_width), style="cyan")
        line.append(f" {p.logit:+7.2f} ")
        # whole cells, to the nearest: a part under half a cell draws none, as one that shows as +0.00 never does. A
        # cell of its own for every part drew +0.00 and +0.02 the same as a cell's worth beside +11069 (276 a cell)
        # and said they wrote as much as that; the figure beside the bar still says what such a part adds
        n = 0 if f"{abs(p.logit):.2f}" == "0.00" else round(abs(p.logit) / peak * bar_width)
        if as_text:
            line.append(("█" if p.logit > 0 else "░") * n)
        else:
            line.append("█" * n, style="green" if p.logit > 0 else "red")
        console.print(line, highlight=False, no_wrap=True, overflow="ignore")
    rest = written[ATTRIB_ROWS:]
    if rest:
        # the b^O note below explains a row; where that row is summed here, say so, or the note named a missing row
        among = ", the output biases b^O among them" if any(p.kind == "bias" for p in rest) else ""
        together = fmt.signed(sum(p.logit for p in rest), 2)  # "-0.00" read as a part taking something away
        note(console, f"{count(len(rest), 'smaller part')} add {together} together{among}")
    if silent:
        names = ", ".join(p.name for p in silent[:8]) + (", ..." if len(silent) > 8 else "")
        # not each one's why: an untrained model's output biases are 0 as well
        why = f"; a part {cmd('ablate')} switches off writes nothing" if result.ablations else ""
        verb = "writes" if len(silent) == 1 else "write"
        note(console, f"{count(len(silent), 'part')} {verb} exactly 0, not listed ({names}){why}")
    total = sum(p.logit for p in result.parts)
    key = "█ adds to the logit, ░ takes away" if as_text else "green adds to the logit, red takes away"
    if not result.normalised:
        note(console, f"{key}; the parts sum to {total:+.2f} = the logit {result.logit:.2f}: with no final norm the "
                      "head reads the stream as it is, the sum of the parts")
    elif result.norm_bias:
        note(console, f"{key}; the parts sum to {total:+.2f}, and the frozen norm adds {result.offset:+.2f} of its "
                      f"own (its bias; scale {result.scale:.3g}): {total + result.offset:.2f} = the logit "
                      f"{result.logit:.2f}")
    else:
        note(console, f"{key}; the parts sum to {total:+.2f} = the logit {result.logit:.2f}: the final norm has no "
                      f"bias, so it adds nothing of its own (scale {result.scale:.3g})")
    # "attention biases" read as all of attention's: it is b^O alone (said only where its row is listed: summed with
    # the smaller parts or writing exactly 0, the note explained a row not on screen)
    if any(p.kind == "head" for p in shown):  # "head 1.2" read as a decimal number
        note(console, f"head L.H: head H of layer L ({HEAD_NAME_EXAMPLE}), as {cmd('ablate')} names it")
    # the two embedding rows are the input h_0 = W_E[token] + P[position] read apart (one "embed" row hid what the
    # position table writes on its own); said where one of them is listed, as the other rows' words are
    if any(p.kind == "embed" for p in shown) and not result.no_position:
        note(console, "embed (token) and embed (position): the token's row of W_E and the position's row of the "
                      "position table, which the input adds together, each read on its own")
    if result.no_position:  # the row a learner looks for, and why it is not there
        note(console, result.no_position)
    if any(p.kind == "bias" for p in shown):
        note(console, "output biases b^O: every block's W^O bias, added whatever the heads do; b^V is inside each "
                      "head's row (A's rows sum to 1, so AV carries it), and b^Q and b^K move only the pattern")
    unread_note(console, result)  # as the other views of one prompt say it (it was a notice on stderr alone)
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: the parts split a logit of random weights; "
                      f"{look_again('attrib', AUTOSAVE_NAME, result.prompt)}")


# --- :heads --------------------------------------------------------------------------------------
# The roles, in core.heads.ROLES's order, named here too so that the shell need not import torch to draw them
# (tests/test_heads.py checks the two agree); HeadRow's fields are these names.
HEAD_ROLES = ("previous", "current", "first", "duplicate", "induction")
HEAD_ROWS = 48  # with more heads than this (and no layer=), only the named ones are listed


@dataclass
class HeadRow:
    layer: int  # the block
    head: int  # the head in it
    previous: float  # attention on key i - 1, averaged over the queries
    current: float  # attention on key i itself
    first: float  # attention on key 0
    duplicate: float  # attention on earlier copies of the query's own token
    induction: float  # attention on the tokens that followed earlier copies of the query's token
    role: str | None  # the role the head is named for, or None (no pattern stands out)
    # the copying gain (the first copy's loss minus the repeat's, nats a token) lost with this head switched off
    # alone; None: not measured
    carries: float | None


@dataclass
class HeadsResult:
    text: str | None  # the text scored; None: random tokens, each block repeated
    tokens: list[str]  # the (first) sequence scored, token by token
    repeat: int | None  # h: each sequence is h random tokens, then the same h again
    sequences: int  # how many sequences the scores average over
    seed: int | None  # the random tokens' seed
    layer: int | None  # the block listed (None: every block)
    heads: list[HeadRow]  # the heads listed
    more: int  # heads not listed (not named, in a model with many)
    uniform: dict[str, float]  # role -> the score of a head that attends evenly to keys 0..i
    losses: list[float]  # position t -> the loss (nats) of predicting token t + 1
    first_copy: float | None  # the mean loss on the first copy's tokens (after the first)
    second_copy: float | None  # the mean loss on the repeat's tokens (after the first)
    chance: float  # ln(vocab_size): a uniform guess's loss
    reading: str  # one line: what the numbers say
    untrained: bool = False  # no training here nor weights from elsewhere: every score is random weights'
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    copy_gain_se: float | None = None  # the standard error of first_copy - second_copy, token by token
    # the data it trained on, where that is random tokens ("random" or "repeat"): why a first copy costs more than
    # ln V is then not that its text taught it something else
    random_data: str = field(default="", metadata={"view_only": True})
    # a task's name where its model was scored on repeated random tokens: a sort model writes a question's digits back
    # sorted after its '=', so a repeat's lower loss there is partly the task, not copying from context
    task: str = field(default="", metadata={"view_only": True})
    # what that task's answer is made of (core.data's Task.answer_made): add's sum is no copy of its question
    task_answer: str = field(default="", metadata={"view_only": True})


def heads_reading(roles, first: float | None, second: float | None, se: float | None = None,
                  block: int | None = None) -> str:
    """One line: whether the model copies from context, which head looks where an induction head would, and
    which head the copying needs most. `se`: the standard error of first - second; a gap within two of them is
    not called copying. (The default model after 40 steps on pydoc: gaps of 0.06 to 0.13 nats over seeds 0 to 5,
    each with a standard error near 0.03, so a small gap can be real: the test is the noise, not a fixed size.)
    `block`: the heads named are that block's, the ones listed (`:heads layer=1` named head 0.2 beside a table of
    block 1's)."""
    heads = [h for h in roles.heads if block is None or h.layer == block]
    best = max(heads, key=lambda h: h.scores["induction"])
    no_head = "no head" if block is None else f"no head of block {block}"
    if math.isnan(best.scores["induction"]):  # a given text in which no token comes back: nothing to score
        return ("no token of the text comes twice (an earlier copy with a token after it), so no head can be scored "
                "as an induction head; leave the text out for the induction test on a repeated random text")
    from ..core.heads import ROLE_OVER_UNIFORM

    score, even = best.scores["induction"], roles.uniform["induction"]
    if best.role != "induction" and score < ROLE_OVER_UNIFORM * even:
        # "head 2.3 puts 0.03 ..." named one head as if it stood out, where every head and even attention scored 0.03
        where = (f"{no_head} looks at the token after an earlier copy of the current one much more than attention "
                 f"spread evenly would (the most: head {best.layer}.{best.head}, {score:.2f}; even {even:.2f})")
    else:
        where = (f"head {best.layer}.{best.head} puts {score:.2f} of its attention on the token after an earlier "
                 f"copy of the current one")
    if first is None:
        return (f"{where}; the copying test (random tokens, then the same again: the repeat's loss against the "
                "first copy's) runs on random tokens only: leave the text out to run it")
    cost = f"the repeat costs {second:.2f} nats a token against {first:.2f} the first time"
    swept = [h for h in heads if h.carries is not None]
    needed = ""
    if swept:  # carries: the copying gain (first - second) a head takes away when switched off alone
        most = max(swept, key=lambda h: h.carries)
        change = f"{fmt.signed(most.carries, 2)} nats"  # -0.001 is +0.00, never "-0.00"
        # "of the -0.03 the repeat gains" says nothing: where there is no gain, the change alone
        of = f" a token off the {first - second:.2f} the repeat gains" if round(first - second, 2) > 0 else ""
        among = "" if block is None else f" of block {block}'s heads"
        needed = (f"; switched off, head {most.layer}.{most.head} takes the most of the copying{among} ({change}{of})"
                  if round(most.carries, 2) > 0 else  # no head's absence lowers the gain: none "takes" it
                  f"; switched off alone, {no_head} takes any copying away (the most: head {most.layer}.{most.head}, "
                  f"{change})")
    if second > COPIES_AT * first:
        noise = 2 * se if se is not None else 0.0
        if first - second > max(BEGUN_BY, noise):
            return f"copying from context has begun, not yet to half the loss: {cost}; {where}{needed}"
        if swept:  # no copying to take: "head 0.0 takes the most of the copying (+0.03 ... off the 0.01 the repeat
            # gains)" beside "no copying yet" said both; what switching a head off moves here is the noise
            most = max(swept, key=lambda h: abs(h.carries))
            within = ", within the noise of these tokens" if abs(most.carries) <= max(BEGUN_BY, noise) else ""
            needed = (f"; switched off alone, no head has copying to take (the most any moves the gain: head "
                      f"{most.layer}.{most.head}, {fmt.signed(most.carries, 2)} nats{within})")
        if first - second > BEGUN_BY:  # lower, but by no more than another draw of random tokens could be
            return (f"no clear copying from context yet: {cost}, a gap within the noise of these tokens (two "
                    f"standard errors: {noise:.2f}); {where}{needed}")
        return f"no copying from context yet: {cost}; {where}{needed}"
    if best.role == "induction":
        return f"the model copies from context: {cost}; {where}: an induction head{needed}"
    return (f"the model copies from context: {cost}; yet {no_head} does it the textbook way, by looking at the token "
            f"after an earlier copy (the most: head {best.layer}.{best.head}, {best.scores['induction']:.2f}){needed}")


def check_causal(session: Session, what: str) -> None:
    """The head roles are a causal model's: refuse them, with the way on, where the mask is off (causal=off, or
    `:ablate mask`)."""
    if session.model.causal:
        return
    why, fix = (("causal=off", cmd("set", causal=True)) if not session.model_config.causal
                else (cmd("ablate", "mask"), cmd("ablate", "off")))
    raise UserError(f"{what} scores what a causal model's heads do, and this model reads the future ({why}): any "
                    f"head may read the very token it is to predict; {cmd('attn')} shows which heads read the next "
                    f"token, {fix} puts the mask back")


@command("heads", "What each attention head does: its attention scored as previous-token, first-token, "
                  "duplicate and induction head, and the loss on a repeated random text.", params=[
    Param("text", str, help="score the heads on this text (default: random tokens, then the same tokens again)",
          positional=True),
    replace(BLOCK, help="list the heads of this block only (default: every block)"),
    Param("seed", int, help="the random tokens' seed (default 0)", low=0, limit=2**63 - 1),
], interruptible=True, json_version=3, guide="inside-views.md#what-each-head-does-heads")  # fmt: skip
def cmd_heads(session: Session, args: dict, reporter: Reporter) -> HeadsResult:
    from ..core.heads import SEQUENCES, head_roles, repeat_length, repeated_tokens, text_tokens, trained_length

    check_causal(session, cmd("heads"))
    layer = None if args["layer"] is None else check_layer(session, args["layer"])
    tokenizer = session.data.tokenizer  # first: the data, loaded now, sets the model's vocabulary
    config = session.model.config
    if args["text"]:
        if args["seed"] is not None:
            raise UserError(f"seed= picks the random tokens, and a text was given; drop one "
                            f"({cmd('heads')} runs the repeated-tokens test)")
        text, ids, _ = view_prompt(session, args["text"], reporter)
        if len(ids) < 2:
            raise UserError(f"the text is one token: a head needs at least two positions to choose between; "
                            f"give a longer text, e.g. {cmd('heads', sample_prompt(session.data))}")
        import torch

        tokens, repeat, seed = torch.tensor([ids]), None, None
    else:
        text, seed = None, args["seed"] or 0
        # within the positions the model trained on: a task's rows are its question and answer (sort:4: 8 of a
        # window of 64), and past them the position table is as it was initialised, so the copying test read the
        # repeat at untrained positions and called their difference from the first copy's "copying"
        rows = trained_length(session.data, config.max_seq_len)
        repeat_length(config.max_seq_len, rows)  # two copies within a task's rows, or the reason they do not fit
        tokens = repeated_tokens(config.vocab_size, rows, SEQUENCES, seed, among=text_tokens(session.data))
        repeat = tokens.shape[1] // 2
    roles = head_roles(session.model, tokens, repeat)
    listed = [h for h in roles.heads if layer is None or h.layer == layer]
    more = 0
    if layer is None and len(listed) > HEAD_ROWS:
        named = [h for h in listed if h.role is not None]
        more, listed = len(listed) - len(named), named
    rows = [HeadRow(h.layer, h.head, *(h.scores[r] for r in HEAD_ROLES), h.role, h.carries) for h in listed]
    return HeadsResult(text, shown_pieces(tokenizer, roles.token_ids[0]), repeat, len(roles.token_ids), seed,
                       layer, rows, more, roles.uniform, roles.losses, roles.first_copy, roles.second_copy,
                       roles.chance, heads_reading(roles, roles.first_copy, roles.second_copy, roles.copy_gain_se,
                                                   layer),
                       untrained=session.untrained, ablations=switched_off(session), copy_gain_se=roles.copy_gain_se,
                       random_data=session.data.name if session.data.name in ("random", "repeat") else "",
                       task=session.data.name if text is None and hasattr(session.data, "answer") else "",
                       task_answer=getattr(session.data, "answer_made", "") if text is None else "")


@render.register(HeadsResult)
def render_heads(result: HeadsResult, console: Console) -> None:
    from ..core.heads import ROLE_AT, ROLE_OVER_UNIFORM

    if result.repeat is not None:
        say(console, f"what each head does, on {count(result.sequences, 'sequence')} of {result.repeat} random "
                     f"tokens, each followed by the same {result.repeat} again (seed {result.seed})", "bold")
        shown = "".join(visible(t) for t in result.tokens[: min(result.repeat, 12)])
        note(console, f"the first begins {shown}...")
    else:
        say(console, f"what each head does, on {quoted_end(result.text, 60)}", "bold")
    note(console, "each score: the attention query i puts on these keys j, averaged over the queries: previous "
                  "j = i-1, current j = i, first j = 0, duplicate: earlier copies of token i, induction: the token "
                  "after an earlier copy of token i")
    swept = any(row.carries is not None for row in result.heads)
    names = ["head", *HEAD_ROLES, "named"] + (["off: copying"] if swept else [])
    most = max((row.carries for row in result.heads if row.carries is not None), default=None)
    rows = []
    for row in result.heads:
        # a head :ablate switched off still attends (its pattern is scored), but writes nothing: marked, as :patch
        # marks it, where its +0.00 read as a head the copying does not need
        off = f"head {row.layer}.{row.head}" in result.ablations or f"block {row.layer}" in result.ablations
        cells = [f"{row.layer}.{row.head}"]
        for role in HEAD_ROLES:
            value = getattr(row, role)
            text = "-" if math.isnan(value) else f"{value:.2f}"
            cells.append(Text(text, style="bold green" if role == row.role and not off else ""))
        cells.append(Text("off", style="dim") if off else row.role or "")
        if swept:
            cells.append(Text("off", style="dim") if off else
                         Text(fmt.signed(row.carries, 2), style="bold" if row.carries == most and most > 0 else ""))
        rows.append(cells)
    rows.append([Text("even", style="dim"), *(Text("-" if math.isnan(result.uniform[r]) else
                                                   f"{result.uniform[r]:.2f}", style="dim")
                                              for r in HEAD_ROLES), ""]
                + ([""] if swept else []))
    table = fitting_table(console, names, rows, left=("head", "named"), optional=("current", "first", "duplicate"))
    console.print(table)  # its caption names the columns the width left out
    note(console, f"head L.H: head H of layer L ({HEAD_NAME_EXAMPLE}), as {cmd('ablate')} names it; even: "
                  f"the scores of attention spread evenly over keys 0..i; named: the role of a head's largest "
                  f"score, when that is at least {ROLE_AT} and {ROLE_OVER_UNIFORM:g}x the even score")
    if swept:
        note(console, "off: copying: the copying gain (the first copy's loss minus the repeat's, nats a token) lost "
                      "with that head switched off alone, its output A_h V_h zeroed as :ablate does; a head that hurts "
                      "every prediction alike loses none of it")
    if any(isinstance(cell, Text) and cell.plain == "off" for cells in rows for cell in cells):
        note(console, f"off: switched off by {cmd('ablate')}: it still attends, so its scores are read, but it writes "
                      "nothing")
    if result.more:
        note(console, f"{count(result.more, 'head')} with no role not listed; "
                      f"{cmd('heads', layer=0)} lists every head of one block")
    if result.losses:
        width = max(8, min(64, console.width - 30))
        scale = spark_scale(result.losses, width, lambda v: f"{v:.2f} nats")
        say(console, f"loss by position {spark(result.losses, width)} {scale} (chance ln V = {result.chance:.2f})")
    if result.first_copy is not None:
        # above ln V: "nothing to go on" read as a contradiction beside a loss worse than guessing (6.95 against 4.63)
        # why, by what it trained on: on `:data repeat` "what its text taught it" was random tokens too
        since = {"repeat": "since a model trained on repeats bets that a token comes back, which in a first copy it "
                           "does not",
                 "random": "since what it learned of its random training tokens is noise, which costs against "
                           "even odds"}.get(
            result.random_data, "since the model is sure of what its text taught it and random tokens are not that")
        if result.untrained:  # taught nothing: its random initial weights give odds a little off even
            since = "since its random initial weights spread their bets a little unevenly"
        above = (f"; worse than a uniform guess's {result.chance:.2f}, {since}, so the repeat's gain is read against "
                 "this, not against ln V" if result.first_copy > result.chance + 0.005 else "")
        note(console, f"first copy: {result.first_copy:.2f} nats a token (random: nothing to go on{above}), the "
                      f"repeat: {result.second_copy:.2f} (each token there can be read off the first copy)")
    say(console, result.reading, "green")
    if result.task and result.first_copy is not None:
        made = f" ({result.task_answer})" if result.task_answer else ""
        note(console, f"on {result.task} the repeated tokens are the task's digits and '+' and '=', and the model "
                      f"was trained to write an answer{made} after a question's '=': a repeat's lower "
                      f"loss there is partly what the task taught, not only copying from context; "
                      f"{cmd('heads', 'TEXT')} scores the heads on a text of your own")
    carrier = max((row for row in result.heads if row.carries is not None), key=lambda r: r.carries, default=None)
    if (carrier is not None and round(carrier.carries, 2) > 0  # no head takes any: none is "needed most"
            and result.second_copy <= COPIES_AT * result.first_copy):
        note(console, f"to keep the head the copying needs most switched off for the views that follow: "
                      f"{cmd('ablate', f'head={carrier.layer}.{carrier.head}')} ({cmd('ablate', 'off')} puts it back)")
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: its attention is near even and no head has a role; "
                      f"{look_again('heads', AUTOSAVE_NAME)}")
