"""Turn command results into Rich renderables, and show a running command live.

Commands return plain dataclasses (commands.py); this is the one place that formats them.
`render(result, console)` dispatches on the result's type. `RichReporter` receives the progress a
command reports while it runs (training steps, generated tokens) and shows it: a live progress bar
with a loss table that grows at each evaluation, or text streamed as it is produced.

Everything prints through a Console the caller owns, so tests pass their own
(`Console(file=io.StringIO(), width=100, color_system=None)`). Rich itself honours NO_COLOR, the
terminal width, and turns colour and animation off when the output is not a terminal.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import math
import re

from rich import box
from rich.cells import cell_len
from rich.color import Color
from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text

from . import commands
from .core.words import count
from .palette import SCALE, SHADES, VISIBLE, is_active, scale_hex, scale_rgb, shade, terminal_safe, visible
from .reporter import Reporter
from .syntax import cmd, restore, train_first

NARROW = 72  # below this many columns, wide tables switch to a stacked layout


# --- small formatters --------------------------------------------------------------------------
def _num(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _int(value) -> str:
    return "-" if value is None else f"{value:,}"


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _rate(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.1f}s" if value >= 1 or value == 0 else f"{value:.2f}s"


def _shape(shape) -> str:
    return str(tuple(shape))


def _bytes(n) -> str:
    if n is None:
        return "?"
    if n >= 2**30:
        return f"{n / 2**30:.1f} GiB"
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB"


def _value(v) -> str:
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


# --- the one wrapping rule for every message -------------------------------------------------------
# A message wraps at spaces to the console's width and never inside a word, number or name: a break
# inside `kept-20261201-033731` or `1,234` misleads a reader and breaks copy and paste. A single word
# wider than the whole console goes on a line of its own, whole, for the terminal to wrap (which
# keeps its characters one line for copy and paste). Rich cannot say this by itself: its wrapping
# folds such a word ("fold") or cuts it ("crop", "ellipsis"), and overflow="ignore" turns wrapping
# off altogether. soft_wrap=True, which messages used before, handed every line to the terminal,
# and a terminal breaks a line at its last column, wherever that falls in a word. So Words (below)
# places the breaks itself, and every sentence is printed through it: say() and the notes inside
# tables' groups. Tables and charts lay themselves out to the width (NARROW, _fits).
# Output to a file or a pipe has no width to wrap at: the front ends make those consoles with
# `console_for` (soft_wrap), and a message stays one line there (for grep, a log, a script).
_WORD = re.compile(r"\s*\S+\s*")  # a word with the spaces before and after it


def word_lines(text: Text, width: int) -> list[Text]:
    """`text` cut into lines of at most `width` cells at spaces, never inside a word; a word wider
    than `width` is a line of its own, whole. Line breaks in the text stay; trailing spaces go."""
    lines = []
    for paragraph in text.split("\n", allow_blank=True):
        breaks, column = [], 0
        for match in _WORD.finditer(paragraph.plain):
            word = match.group()
            if column and column + cell_len(word.rstrip()) > width:
                breaks.append(match.start() + len(word) - len(word.lstrip()))  # the new line starts at the word
                column = cell_len(word.lstrip())
            else:
                column += cell_len(word)
        for line in paragraph.divide(breaks):
            line.rstrip()
            lines.append(line)
    return lines


class Words:
    """A renderable sentence (or several lines): wrapped by word_lines to the width it is given,
    `indent` cells in on every line; one line per paragraph where the console does not wrap."""

    def __init__(self, text: Text, indent: int = 0):
        self.text = text
        self.indent = indent

    def __rich_console__(self, console: Console, options):
        width = max(1, options.max_width - self.indent)
        lines = self.text.split("\n", allow_blank=True) if options.no_wrap else word_lines(self.text, width)
        for line in lines:
            if self.indent:
                yield Segment(" " * self.indent)
            yield from line.render(console, end="")
            yield Segment.line()

    def __rich_measure__(self, console: Console, options) -> Measurement:
        words = self.text.plain.split()
        longest = max((cell_len(w) for w in words), default=0)
        widest = max((cell_len(line) for line in self.text.plain.split("\n")), default=0)
        return Measurement(longest + self.indent, widest + self.indent)


def console_for(**options) -> Console:
    """A front end's Console: messages wrap at spaces on a terminal, and stay one line each in a file
    or a pipe (soft_wrap: nothing to wrap at there; Rich would otherwise assume 80 columns)."""
    console = Console(**options)
    console.soft_wrap = not console.is_terminal
    return console


def say(console: Console, message, style: str = "", indent: int = 0) -> None:
    """Print one message (a str, taken literally, or a Text) under the wrapping rule above, `indent`
    cells in. crop=False: a word wider than the console is printed whole, for the terminal to wrap."""
    text = message if isinstance(message, Text) else Text(str(message), style=style)
    console.print(Words(text, indent), highlight=False, crop=False)


def error(console: Console, message: str) -> None:
    """`error: <message>` (the console is the stderr one): one message, never markup, wrapped at spaces."""
    line = " ".join(str(message).split("\n"))
    say(console, f"error: {line}", "bold red")


def internal_error(console: Console, exc: BaseException) -> None:
    line = " ".join(str(exc).split("\n"))
    say(console, f"internal error: {type(exc).__name__}: {line} (run with --debug for the traceback)", "bold red")


def _dim(console: Console, text: str) -> None:
    say(console, text, "dim")


def _fits(console: Console, renderable, width: int | None = None) -> bool:
    """Whether a table fits the console (or `width` columns) with every word whole. Rich makes any
    table fit by folding or cutting cells ("…"); a layout for which it would has a narrower form
    instead. The test is the rule itself: laid out at this width, the table shows the same words as
    on an unbounded line."""
    width = console.width if width is None else width

    def words(columns: int) -> list[str]:
        scratch = Console(file=io.StringIO(), width=columns, color_system=None)
        scratch.print(renderable)
        return sorted(scratch.file.getvalue().split())

    return words(width) == words(max(1000, 10 * width))


def _add(table: Table, *cells, style=None) -> None:
    """add_row with plain strings taken literally: data, prompts and help text are not Rich markup."""
    table.add_row(*(Text(c) if isinstance(c, str) else c for c in cells), style=style)


# --- results -----------------------------------------------------------------------------------
@functools.singledispatch
def render(result, console: Console) -> None:
    """Print one command result on `console`.

    A result type without its own renderer (a command added later) still shows: its fields, one a line.
    """
    if dataclasses.is_dataclass(result):
        values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result)}
        console.print(_settings_table(type(result).__name__, values))
    else:
        say(console, repr(result))


@render.register(type(None))
def _(result, console: Console) -> None:
    pass


@render.register(commands.QuitResult)
def _(result, console: Console) -> None:
    pass


@render.register(commands.HelpResult)
def _(result, console: Console) -> None:
    if result.detail is not None:
        entry = result.detail
        names = ", ".join(":" + n for n in (entry.name, *entry.aliases))
        say(console, Text(names, style="bold") + Text(f"  {entry.summary}"))
        say(console, Text("usage: ", style="dim") + Text(entry.usage))
        if result.params:
            with_default = any(p.default is not None for p in result.params)
            table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
            table.add_column("option", no_wrap=True)
            table.add_column("type")
            if with_default:
                table.add_column("default")
            table.add_column("meaning", ratio=1)
            for p in result.params:
                name = p.name.upper() if p.positional else f"{p.name}="
                kind = "|".join(map(str, p.choices)) if p.choices else getattr(p.type, "__name__", str(p.type))
                if p.type is bool and not p.choices:
                    kind = "on|off"
                if p.nullable:
                    kind += "|none"
                default = [_value(p.default) if p.default is not None else ""] if with_default else []
                _add(table, name, kind, *default, p.help)
            console.print(table)
        return
    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column("command", style="bold", no_wrap=True)
    table.add_column("summary", ratio=1)
    for entry in result.entries:
        names = ", ".join(":" + n for n in (entry.name, *entry.aliases))
        _add(table, names, entry.summary)
    console.print(table)
    _dim(console, "A line without ':' is a prompt: the model continues it (like :gen PROMPT).")
    _dim(console, ":help COMMAND shows its options; Tab completes; Ctrl-C stops a running command.")


def _lr(value) -> str:
    return "-" if value is None else f"{value:.2e}"


# (history key, header, narrow header, format, shown on a narrow terminal)
_LOSS_COLUMNS = (
    ("step", "step", "step", _int, True),
    ("train_loss", "train loss", "train", _num, True),
    ("val_loss", "val loss", "val", _num, True),
    ("accuracy", "accuracy", "acc", _pct, True),
    ("aux_loss", "aux loss", "aux", _num, True),  # mixture of experts: load balancing (1.0 = even)
    ("lr", "lr", "lr", _lr, False),
    ("tokens_per_second", "tokens/s", "tok/s", _rate, False),
    ("elapsed", "elapsed", "time", _seconds, True),
)


OVERFIT_RISES = 3  # rises of the validation loss in a row that earn an "overfitting?" note


class LossTable:
    """The evaluations of a training run, one row each; rows can be added while it is on screen.

    On a narrow terminal it drops the lr and tokens/s columns (the summary line has the speed)
    and its borders, so the losses stay readable instead of being cut to "0.…".
    """

    def __init__(self, rows: list[dict] = (), with_accuracy: bool | None = None, narrow: bool = False,
                 vocab_size: int | None = None):
        self.vocab_size = vocab_size  # known: a first line gives ln(V), the loss of a uniform guess
        self.val_losses: list[float] = []
        if with_accuracy is None:
            with_accuracy = any(r.get("accuracy") is not None for r in rows)
        with_aux = any(r.get("aux_loss") is not None for r in rows)
        self.columns = [c for c in _LOSS_COLUMNS if (c[0] != "accuracy" or with_accuracy)
                        and (c[0] != "aux_loss" or with_aux) and (c[4] or not narrow)]
        self.table = Table(header_style="bold", box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
        for _, header, short, _, _ in self.columns:
            self.table.add_column(short if narrow else header, justify="right")
        for r in rows:
            self.add(r)

    def add(self, row: dict) -> None:
        _add(self.table, *(fmt(row.get(key)) for key, _, _, fmt, _ in self.columns))
        if row.get("val_loss") is not None:
            self.val_losses.append(row["val_loss"])

    @property
    def overfitting(self) -> bool:
        """The validation loss rose at each of the last OVERFIT_RISES evaluations."""
        last = self.val_losses[-(OVERFIT_RISES + 1):]
        return len(last) == OVERFIT_RISES + 1 and all(b > a for a, b in zip(last, last[1:]))

    def __rich__(self):
        parts = []
        if self.vocab_size and self.vocab_size > 1:
            parts.append(Words(Text(f"ln(V) = ln({self.vocab_size}) = {math.log(self.vocab_size):.2f}: "
                                    "the loss of a uniform guess (a model that knows nothing)", style="dim")))
        parts.append(self.table)
        if self.overfitting:
            parts.append(Words(Text(f"overfitting? the validation loss rose {OVERFIT_RISES} evaluations in a "
                                    "row while training continued (more data, dropout, or stop earlier)",
                                    style="yellow")))
        return Group(*parts) if len(parts) > 1 else self.table


def train_summary(result) -> str:
    parts = []
    if result.train_loss is not None:
        parts.append(f"train loss {result.train_loss:.4f}")
    if result.val_loss is not None:
        parts.append(f"val loss {result.val_loss:.4f}")
    if result.accuracy is not None:
        parts.append(f"accuracy {_pct(result.accuracy)}")
    parts.append(f"{_rate(result.tokens_per_second)} tokens/s")
    parts.extend(speed_parts(result))
    parts.append(f"{result.seconds:.1f} s")
    if result.stopped:
        end = result.total_steps + result.run_remaining
        head = f"stopped at step {result.total_steps:,} of {end:,}: {cmd('train', load=result.saved)} continues"
        return f"{head} ({count(result.steps, 'step')} this time; " + ", ".join(parts) + ")"
    head = f"trained {count(result.steps, 'step')}"
    if result.total_steps != result.steps:
        head += f" (step {result.total_steps:,} in total)"
    return head + ": " + ", ".join(parts)


@render.register(commands.TrainResult)
def _(result, console: Console) -> None:
    if result.evals:
        console.print(LossTable(result.evals, narrow=console.width < NARROW,
                                vocab_size=getattr(result, "vocab_size", None)))
    if len(getattr(result, "curve", None) or []) >= 10:  # a small chart of this run under its table
        console.print(render_loss_chart(result.curve, min(console.width, 80), 8, getattr(result, "vocab_size", None)))
    style = "yellow" if result.stopped else "green"
    say(console, train_summary(result), style)
    if getattr(result, "schedule", "new") == "continue" and result.constant_lr:
        _dim(console, f"continued at the last run's final rate {result.constant_lr:.2e} (schedule=new starts a "
                      "fresh warm-up + cosine)")
    if getattr(result, "saved", None):
        _dim(console, f"saved checkpoint {result.saved} ({restore(result.saved)} restores it)")
    if getattr(result, "save_error", None):
        say(console, f"warning: not saved: {result.save_error}", "yellow")


def gen_stats(result) -> str:
    rate = f"{result.tokens_per_second:,.0f} tokens/s" if result.tokens_per_second else "- tokens/s"
    text = f"{count(result.n_tokens, 'token')} in {result.seconds:.2f} s, {rate}, cache {'on' if result.cache else 'off'}"
    first = getattr(result, "first_token_seconds", None)
    if first is not None and result.n_tokens > 1:
        text += f", first token after {first * 1000:.0f} ms"
    return text + (" (stopped)" if result.stopped else "")


def visible_text(text: str) -> str:
    """Whitespace as symbols (␣ ↵ ⇥), for text that would otherwise look like nothing."""
    return "".join(visible(ch) for ch in text)


def gen_notes(console: Console, result) -> None:
    """What a reader needs to make sense of generated text: the default prompt, whitespace, no training."""
    if getattr(result, "default_prompt", False):
        _dim(console, f"no prompt given: started from {visible_text(result.prompt)!r}")
    if result.text and not result.text.strip():
        counts = ", ".join(count(result.text.count(ch), name) for ch, name in
                           ((" ", "space"), ("\n", "newline"), ("\t", "tab")) if ch in result.text)
        say(console, f"only whitespace was generated ({counts}): {visible_text(result.text[:80])}", "yellow")
    if getattr(result, "answered", False):
        _dim(console, "the prompt already holds a whole answer: nothing to add" if not result.n_tokens else
                      "stopped at the end of the answer (a task's answers have a fixed length)")
    if getattr(result, "untrained", False):
        _dim(console, f"this model has not trained yet, so its text is random: "
                      f"{train_first('gen', commands.AUTOSAVE_NAME)}")
    _dim(console, gen_stats(result))


def model_text(text: str, console: Console, style: str = "") -> Text:
    """Text from the model's vocabulary, safe for a terminal: each character that would act on one
    (ESC, other controls, bidi overrides) shown as its escape, dimmed (palette.terminal_safe)."""
    out = Text(style=style)
    for ch in text:
        out.append(terminal_safe(ch), style="dim" if is_active(ch) else "")
    return out


def writes_raw(console: Console, raw: bool) -> bool:
    """:gen raw=on, on a console that is not a terminal (a file, a pipe): the exact characters."""
    return raw and not console.is_terminal


def write_raw(console: Console, text: str) -> None:
    """`text` exactly, past Rich (whose Text drops BEL, backspace and carriage return even unstyled)."""
    console.file.write(text)
    console.file.flush()


@render.register(commands.GenResult)
def _(result, console: Console) -> None:
    if getattr(result, "probs", None):
        gen_probs(result, console)
        gen_notes(console, result)
        return
    if writes_raw(console, getattr(result, "raw", False)):
        write_raw(console, result.prompt + result.text + "\n")
    else:
        say(console, model_text(result.prompt, console, "bold") + model_text(result.text, console))
    gen_notes(console, result)


# The symbols of the formulas (model.py's docstring), read back from the trace's own shapes.
_SYMBOL_NAMES = (("B", "batch"), ("T", "positions"), ("d", "width"), ("h", "heads"), ("d_k", "d/h"),
                 ("h_kv", "key/value heads"), ("d_ff", "FFN"), ("V", "vocab"))
# Steps that carry K or V before they are repeated to h heads: under grouped-query attention their
# shapes read with h_kv (and a projection's width as h_kv·d_k) before any other symbol.
_KV_SHAPES = ("k_proj", "v_proj", "hook_k", "hook_v", "k_norm", "hook_k_rot")
_SCORE_STEPS = ("hook_scores", "hook_masked_scores", "hook_weights", "attn_dropout")


def _trace_dims(records) -> dict[str, int]:
    """B, T, d, h, d_k, d_ff and V as this trace shows them (a symbol the model lacks is left out)."""
    dims: dict[str, int] = {}
    for r in records:
        name = r.path.rsplit(".", 1)[-1]
        out = r.output_shape
        if name == "token_embedding" and r.input_shapes:
            dims["B"], dims["T"] = r.input_shapes[0][0], r.input_shapes[0][-1]
            dims["d"] = out[-1]
        elif name == "hook_q" and len(out) == 4 and "h" not in dims:
            dims["h"], dims["d_k"] = out[1], out[3]
        elif name == "hook_k" and len(out) == 4 and "h_kv" not in dims and out[1] != dims.get("h"):
            dims["h_kv"] = out[1]  # grouped-query attention: fewer K/V heads than query heads
            dims["h_kv·d_k"] = out[1] * out[3]
        elif name == "fc_in" and "d_ff" not in dims:
            dims["d_ff"] = out[-1]
        elif name == "lm_head":
            dims["V"] = out[-1]
    return dims


def _symbols(shape, dims: dict[str, int], scores: bool = False, kv: bool = False) -> str | None:
    """`(B, h, T, d_k)` for a shape whose sizes match those symbols, else None.

    `scores`: the step holds attention scores, (B, h, T, T) first. `kv`: it holds K or V before
    their repetition, so under grouped-query attention (B, h_kv, T, d_k) and (B, T, h_kv·d_k) first.
    """
    candidates = {
        1: [("T",)],
        2: [("B", "T"), ("T", "d")],
        3: [("B", "T", "d"), ("B", "T", "d_ff"), ("B", "T", "V")],
        4: [("B", "h", "T", "d_k"), ("B", "h", "T", "T")],
    }.get(len(shape), [])
    if scores:
        candidates = candidates[::-1]
    grouped = {3: [("B", "T", "h_kv·d_k")], 4: [("B", "h_kv", "T", "d_k")]}.get(len(shape), [])
    candidates = grouped + candidates if kv else candidates + grouped
    for names in candidates:
        if all(dims.get(n) == size for n, size in zip(names, shape)):
            return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    return None


def _shape_cell(r, dims: dict[str, int]) -> str:
    """`(B, T, d) -> (B, T, d_ff) = (1, 5, 64)`: the symbols, then the output's numbers."""
    name = r.path.rsplit(".", 1)[-1]
    scores, kv = name in _SCORE_STEPS, name in _KV_SHAPES
    out = _symbols(r.output_shape, dims, scores, kv)
    numbers = _shape(r.output_shape)
    if out is None:
        inputs = ", ".join(_shape(s) for s in r.input_shapes)
        return f"{inputs} -> {numbers}" if inputs and inputs != numbers else numbers
    kv_input = kv and name not in ("k_proj", "v_proj")  # a projection reads (B, T, d)
    inp = _symbols(r.input_shapes[0], dims, scores, kv_input) if r.input_shapes else None
    if inp is None and r.input_shapes:
        inp = _shape(r.input_shapes[0])
    head = out if inp in (None, out) else f"{inp} -> {out}"
    return f"{head} = {numbers}"


def _trace_rows(result):
    """(section heading, [(name, kind, shape, formula, params) or a folded-block line]) in execution order."""
    records = result.records
    dims = _trace_dims(records)
    shown = result.layer if result.layer is not None else 0
    by_layer: dict[int, list] = {}
    for r in records:
        if r.layer is not None:
            by_layer.setdefault(r.layer, []).append(r)
    sections: list[tuple[Text, list]] = []
    dropped = 0
    after_blocks = False
    for r in records:
        if r.layer is not None:
            after_blocks = True
            heading_name = f"blocks.{r.layer}"
            if sections and sections[-1][0].plain.startswith(heading_name + " "):
                pass
            elif not result.show_all and r.layer != shown:
                block = by_layer[r.layer]
                heading = Text(f"blocks.{r.layer}", style="bold cyan") + Text(" TransformerBlock", style="dim")
                folded = (f"same {count(len(block), 'step')} as blocks.{shown}", _io(block[0], block[-1]),
                          _int(sum(b.n_params for b in block)))
                sections.append((heading, [folded]))
                continue
            else:
                sections.append((Text(heading_name, style="bold cyan") + Text(" TransformerBlock", style="dim"), []))
            if not result.show_all and r.layer != shown:
                continue
            name = r.path[len(heading_name) + 1:]
        else:
            title = "output" if after_blocks else "embedding"
            if not sections or sections[-1][0].plain.split(" ")[0] != title:
                sections.append((Text(title, style="bold cyan"), []))
            name = r.path
        if r.kind == "Dropout":  # identity at inference: folded into one note
            dropped += 1
            continue
        sections[-1][1].append((name, r.kind, _shape_cell(r, dims), r.formula, _int(r.n_params) if r.n_params else ""))
    return dims, sections, dropped


def _io(record_in, record_out) -> str:
    inputs = ", ".join(_shape(s) for s in record_in.input_shapes) or "-"
    return f"{inputs} -> {_shape(record_out.output_shape)}"


@render.register(commands.ShapesResult)
def _(result, console: Console) -> None:
    """Every step of one forward pass in order, grouped by block; one block in full, the others one line each.

    Laid out by hand rather than as a Table, so that a shape is never broken mid-tuple: the formula
    gets its own column when the terminal is wide, its own line under the shape when not, and on a
    very narrow terminal each step takes three short lines.
    """
    dims, sections, dropped = _trace_rows(result)
    width = console.width
    steps = [s for _, rows in sections for s in rows if len(s) == 5]
    nw = max([2 + len(s[0]) for s in steps] + [10])
    sw = max([len(s[2]) for s in steps] + [5])
    pw = max([len(s[4]) for s in steps] + [6])
    fw = max([len(s[3]) for s in steps] + [7])
    one_line = nw + 2 + sw + 2 + pw + 2 + fw <= width
    two_lines = not one_line and nw + 2 + sw + 2 + pw <= width
    say(console, f"shape trace of {result.prompt!r}", "bold")
    legend = ", ".join(f"{k}={dims[k]} {meaning}" for k, meaning in _SYMBOL_NAMES if k in dims)
    _dim(console, legend)
    for heading, rows in sections:
        console.print(heading, highlight=False)
        for row in rows:
            if len(row) == 3:  # a folded block
                line = Text("  " + row[0], style="dim")
                if one_line or two_lines:
                    line.append(f"   {row[1]}   {row[2]} params", style="dim")
                say(console, line)
                continue
            name, kind, shape, formula, params = row
            if one_line or two_lines:
                line = Text(f"  {name}".ljust(nw) + "  " + shape.ljust(sw) + "  " + params.rjust(pw))
                line.stylize("dim", nw + 2 + sw + 2)
                if one_line:
                    line.append("  " + formula, style="italic")
                console.print(line, highlight=False, no_wrap=True, overflow="ignore")
                if two_lines and formula:
                    say(console, formula, "italic dim", indent=nw + 2)
            else:
                line = Text(f"  {name}", style="bold")
                line.append(f" {kind}", style="dim")
                if params:
                    line.append(f"  {params} params", style="dim")
                say(console, line)
                say(console, shape, indent=4)
                if formula:
                    say(console, formula, "italic dim", indent=4)
    total = sum(r.n_params for r in result.records)
    note = f"{count(len(result.records), 'step')}, {count(result.n_layers, 'layer')}, {count(total, 'parameter')}"
    if any(len(r) == 3 for _, rows in sections for r in rows):
        shown = result.layer if result.layer is not None else 0
        note += f"; blocks.{shown} in full, the others one line each (all=on shows every block, layer=N picks one)"
    if dropped:
        _dim(console, f"{count(dropped, 'dropout step')} not shown: dropout does nothing at inference (eval mode)")
    _dim(console, note)


@render.register(commands.DeviceResult)
def _(result, console: Console) -> None:
    narrow = console.width < NARROW
    table = Table(header_style="bold", box=None if narrow else box.HEAVY_HEAD, show_header=not narrow,
                  pad_edge=not narrow)
    table.add_column("", no_wrap=True)
    if narrow:  # name, memory and bf16 on one line, the description under them
        table.add_column("device")
    else:
        for header in ("name", "kind", "description", "memory", "bf16"):
            table.add_column(header, justify="right" if header == "memory" else "left")
    for d in result.devices:
        current = d.name == result.current
        name = Text(d.name, style="bold green" if current else "")
        description = Text(d.description, style="" if d.available else "red")
        bf16 = "yes" if d.bf16 else "no"
        style = None if d.available else "dim"
        if narrow:
            cell = name + Text(f"  {_bytes(d.memory_bytes)}  bf16 {bf16}\n") + description
            _add(table, "*" if current else "", cell, style=style)
        else:
            _add(table, "*" if current else "", name, d.kind, description, _bytes(d.memory_bytes), bf16, style=style)
    console.print(table)
    if getattr(result, "problem", None):
        say(console, f"error: {result.problem}", "bold red")
    elif result.switched:
        say(console, f"now using {result.current}", "green")
    else:
        _dim(console, f"* current device: {result.current}; {cmd('device', 'NAME')} switches")
    if getattr(result, "train_dtype", None) is not None and not getattr(result, "problem", None):
        why = (" (dtype=auto: bfloat16 where the bf16 column says yes)" if result.dtype == "auto"
               else f" (dtype={result.dtype})")
        _dim(console, f"training on {result.current} runs in {result.train_dtype}{why}")
    if getattr(result, "threads", None) is not None:
        _dim(console, f"CPU threads: {result.threads} ({result.threads_why}); {cmd('set', threads='N')} fixes the "
                      f"count, {cmd('set', threads=0)} is auto")


def _settings_table(title: str, values: dict) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, pad_edge=False, box=None)
    table.add_column("setting", style="cyan", no_wrap=True)
    table.add_column("value")
    for key, value in values.items():
        _add(table, key, _value(value))
    return table


def _fields(console: Console, rows: list[tuple[str, str]]) -> None:
    """Named values, the names in a column. Where a value holds a word wider than its column (a long
    path), each field goes on a line of its own instead, wrapped at spaces, so that word stays whole."""
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="cyan", no_wrap=True)
    table.add_column("value")
    for name, value in rows:
        _add(table, name, value)
    if _fits(console, table):
        console.print(table)
        return
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        say(console, Text(name.ljust(width), style="cyan") + Text("  " + value))


@render.register(commands.ConfigResult)
def _(result, console: Console) -> None:
    console.print(_settings_table("model", result.model))
    console.print()
    console.print(_settings_table("training", result.train))
    console.print()
    console.print(_settings_table("generation", result.gen))
    console.print()
    where = Text("data ", style="cyan") + Text(result.data) + Text("   device ", style="cyan") + Text(result.device)
    checkpoints = getattr(result, "checkpoints", None) or {}
    if "dir" in checkpoints:
        where += Text("   checkpoints ", style="cyan") + Text(str(checkpoints["dir"]))
    if "autosave" in checkpoints:
        where += Text("   autosave ", style="cyan") + Text(_value(checkpoints["autosave"]))
    console.print(where)
    preset = getattr(result, "preset", None)
    _dim(console, (f"the model settings match the preset {preset}" if preset else
                   "the model settings match no preset") + f"; {cmd('set', 'key=value')} or "
                                                            f"{cmd('set', 'preset=NAME')} changes them")


@render.register(commands.SetResult)
def _(result, console: Console) -> None:
    if not result.changed:
        _dim(console, "nothing changed")
    for key, (old, new) in result.changed.items():
        say(console, Text(f"{key}: ", style="cyan") + Text(f"{_value(old)} -> {_value(new)}"))
    if result.rebuilt:
        say(console, "the architecture changed: the model was rebuilt, weights reset (step 0)", "yellow")
        _kept(console, getattr(result, "kept", None))
    if getattr(result, "preset", None):
        _dim(console, f"the model settings now match the preset {result.preset}")


def _kept(console: Console, kept: str | None) -> None:
    if kept:
        say(console, f"the trained model was kept as checkpoint {kept}: {restore(kept)} brings it back", "green")


@render.register(commands.DataResult)
def _(result, console: Console) -> None:
    info = result.info
    rows = [("name", info.name), ("kind", info.kind), ("description", info.description)]
    if info.kind == "corpus":
        rows.append(("characters", _int(info.chars)))
    elif info.chars:
        rows.append(("characters", f"{info.chars} per example"))
    rows.append(("vocabulary", count(info.vocab_size, "symbol")))
    if info.train_tokens is not None and info.val_tokens is not None:
        total = info.train_tokens + info.val_tokens
        share = round(100 * info.train_tokens / total) if total else 0
        rows.append(("train/val", f"{info.train_tokens:,} / {info.val_tokens:,} tokens ({share}/{100 - share})"))
    elif info.chars:
        rows.append(("train/val", "about 10% of the questions are held out for validation"))
    else:
        rows.append(("train/val", "fresh random tokens in every batch"))
    _fields(console, rows)
    if result.recipe:
        say(console, commands.recipe_line(info.name, result.recipe), "cyan")
    if result.rebuilt:
        message = f"the model was rebuilt for a vocabulary of {info.vocab_size}: weights reset (step 0)"
        say(console, message, "yellow")
        _kept(console, getattr(result, "kept", None))
    elif result.changed:
        say(console, f"data is now {info.name}", "green")


@render.register(commands.ParamsResult)
def _(result, console: Console) -> None:
    ledger = getattr(result, "ledger", None)
    if ledger is not None and not getattr(result, "show_all", False):
        _ledger(ledger, console, getattr(result, "kv_cache", None))
        return
    table = Table(header_style="bold", show_footer=True)
    table.add_column("module", footer="total", overflow="fold")
    table.add_column("shape", footer="")
    table.add_column("parameters", justify="right", footer=_int(result.total))
    for path, shape, n in result.rows:
        _add(table, path, _shape(shape), _int(n))
    console.print(table)
    _dim(console, "the token embedding and lm_head share one matrix (weight tying); it is counted once")


def _flops(n) -> str:
    for unit, size in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} FLOP"


def _ledger(ledger: dict, console: Console, kv: dict | None = None) -> None:
    """core.ledger's numbers: parameters per component (later blocks folded), then compute and memory."""
    total = ledger["n_params"] or 1
    blocks: dict[int, list[dict]] = {}
    for row in ledger["rows"]:
        if row["block"] is not None:
            blocks.setdefault(row["block"], []).append(row)
    rows = []  # (component, kind, parameters, share)
    folded = False
    for row in ledger["rows"]:
        block = row["block"]
        if block is not None and block > 0:
            if not folded:
                rest = [r for b, rows_ in blocks.items() if b > 0 for r in rows_]
                each = sum(r["params"] for r in blocks[1])
                last = max(blocks)
                name = "blocks.1" if last == 1 else f"blocks.1-{last}"
                rows.append((name, f"same as blocks.0, {_int(each)} each", _int(sum(r["params"] for r in rest)),
                             _pct(sum(r["params"] for r in rest) / total)))
                folded = True
            continue
        name = row["path"] if block is None else "  " + row["path"].split(".", 2)[2]
        if block == 0 and row is blocks[0][0]:
            rows.append((Text("blocks.0", style="cyan"), "", _int(sum(r["params"] for r in blocks[0])),
                         _pct(sum(r["params"] for r in blocks[0]) / total)))
        kind = row["kind"] + (f" (tied to {row['tied_to']})" if row["tied_to"] and not row["params"] else "")
        rows.append((name, kind, _int(row["params"]), _pct(row["params"] / total)))

    def parameters(with_share: bool) -> Table:
        table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, show_footer=True,
                      title=Text("parameters", style="bold"), title_justify="left", pad_edge=False)
        table.add_column("component", footer="total", no_wrap=True)
        table.add_column("kind", style="dim", footer="")
        table.add_column("parameters", justify="right", footer=_int(ledger["n_params"]), no_wrap=True)
        if with_share:
            table.add_column("share", justify="right", footer="100%", no_wrap=True)
        for row in rows:
            _add(table, *(row if with_share else row[:3]))
        return table

    table = parameters(with_share=True)
    if not _fits(console, table):  # the share goes first: it follows from the counts
        table = parameters(with_share=False)
    console.print(table)
    B, T = ledger["batch_size"], ledger["seq_len"]
    costs = Table(show_header=False, box=None, pad_edge=False, title=Text("compute and memory", style="bold"),
                  title_justify="left")
    costs.add_column("what", style="cyan", no_wrap=True)
    costs.add_column("value", justify="right", no_wrap=True)
    costs.add_column("how", style="dim")
    _add(costs, "forward, per token", _flops(ledger["forward_flops_per_token"]),
         f"matmuls: {_flops(ledger['linear_flops_per_token'])} in Linear layers + "
         f"{_flops(ledger['attention_flops_per_token'])} in QK^T and AV at T={T}")
    _add(costs, "training, per step", _flops(ledger["training_flops_per_step"]),
         f"3 x forward x {B}x{T} tokens (6N rule: {_flops(ledger['six_n_flops_per_step'])})")
    _add(costs, "weights", _bytes(ledger["weight_bytes"]), "")
    _add(costs, "gradients", _bytes(ledger["grad_bytes"]), "one per trainable parameter")
    _add(costs, f"{ledger['optimizer_label']} state", _bytes(ledger["optimizer_bytes"]), ledger["optimizer_state"])
    # The ledger counts the readable forward in float32 (tested within 10%); measured for the default
    # model at batch 16: the fast path keeps 34.3 MiB, under bfloat16 autocast 25.8 MiB, against 37.9.
    _add(costs, "activations", _bytes(ledger["activation_bytes"]),
         f"kept for backward at batch {B} x {T} by the readable forward in float32")
    _add(costs, "training total", _bytes(ledger["total_bytes"]), "the four above")
    if kv:
        saving = (f"; {count(kv['n_heads'], 'head')} would need {_bytes(kv['mha_bytes_per_token'])} "
                  f"({kv['n_heads'] // kv['kv_heads']}x)" if kv["kv_heads"] != kv["n_heads"] else "")
        _add(costs, "KV cache, sampling", _bytes(kv["window_bytes"]),
             f"{_bytes(kv['bytes_per_token'])} a token x {kv['window']}: K and V of "
             f"{count(kv['kv_heads'], 'key/value head')} per layer{saving}")
    console.print(costs)
    _dim(console, f"tied weights are counted once; {cmd('params', all=True)} lists every tensor")


@render.register(commands.SaveResult)
def _(result, console: Console) -> None:
    what = "replaced checkpoint" if result.replaced else "saved checkpoint"
    text = Text(f"{what} {result.name}", style="green")
    text.append(f" (step {result.step:,}, {_bytes(result.size_bytes)}, {result.seconds:.2f} s)")
    say(console, text)
    _dim(console, f"in {result.path}; {restore(result.name)} restores it")


@render.register(commands.LoadResult)
def _(result, console: Console) -> None:
    text = Text(f"loaded {result.name}", style="green")
    text.append(f": step {result.step:,}, data {result.data_spec}, {count(result.n_params, 'parameter')}")
    if result.val_loss is not None:
        text.append(f", val loss {result.val_loss:.4f}")
    say(console, text)
    shape = ", ".join(f"{k}={_value(result.model_config[k])}" for k in
                      ("n_layers", "d_model", "n_heads", "d_ff", "max_seq_len") if k in result.model_config)
    if shape:
        _dim(console, f"model: {shape}")
    if getattr(result, "data_missing", None):
        say(console, f"data: {result.data_missing}", "yellow")
    if result.run_remaining > 0:
        say(console, f"the run was stopped with {count(result.run_remaining, 'step')} left: "
                     f"{cmd('train', load=result.name)} continues it", "yellow")
    if result.saved_at:
        _dim(console, f"saved {result.saved_at}, from {result.path}")


@render.register(commands.LsResult)
def _(result, console: Console) -> None:
    """A table when it fits the width, else one checkpoint per line. Names are never broken or cut
    (they are what :load takes); a broken checkpoint's reason goes on its own line below."""
    if not result.rows:
        _dim(console, f"no checkpoints in {result.directory} yet; {cmd('save', 'NAME')} writes one")
        return
    rows = []
    for row in result.rows:
        saved = (row.saved_at or "").replace("T", " ")[:16]
        if row.error is not None:
            rows.append((row.name, "", "", "unreadable", _bytes(row.size_bytes), ""))
        else:
            rows.append((row.name, _int(row.step), _num(row.val_loss), row.data_spec or "-", _bytes(row.size_bytes),
                         saved))
    headers = ("name", "step", "val loss", "data", "size", "saved")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    if sum(widths) + 3 * len(widths) + 1 <= console.width:
        table = Table(header_style="bold", title=Text(result.directory), title_justify="left")
        for header in headers:
            table.add_column(header, justify="right" if header in ("step", "val loss", "size") else "left",
                             no_wrap=True)
        for row, cells in zip(result.rows, rows):
            style = "dim" if row.error is not None else None
            _add(table, Text(cells[0], style="bold"), *cells[1:3],
                 Text(cells[3], style="red") if row.error is not None else cells[3], *cells[4:], style=style)
        console.print(table)
    else:
        say(console, result.directory, "italic")
        for row, cells in zip(result.rows, rows):
            say(console, cells[0], "bold")
            detail = "unreadable" if row.error is not None else (
                f"step {cells[1]}, val loss {cells[2]}, data {cells[3]}, {cells[4]}, saved {cells[5]}")
            say(console, "  " + detail, "red" if row.error is not None else "")
    for row in result.rows:
        if row.error is not None:
            say(console, Text(f"{row.name}: ", style="bold red") + Text(row.error))
    _dim(console, f"{restore('NAME')} restores one; {cmd('save', 'NAME')} writes one")


# --- the variant lab ------------------------------------------------------------------------------------
_SERIES_STYLES = ("cyan", "magenta", "green", "yellow", "blue", "red")
_MARKS = "●▲■◆✚✖"


def curve_chart(series: dict[str, list[tuple[float, float]]], width: int = 60, height: int = 12,
                y_label: str = "val loss") -> Text:
    """Lines as marks on a character grid: x = step, y = value; one mark and colour per series.

    Plain characters, so it reads the same with and without colour and in any terminal font.
    """
    points = [(x, y) for values in series.values() for x, y in values if y is not None]
    if not points:
        return Text("(nothing to plot yet)", style="dim")
    x_lo, x_hi = min(x for x, _ in points), max(x for x, _ in points)
    y_lo, y_hi = min(y for _, y in points), max(y for _, y in points)
    if y_hi == y_lo:
        y_hi = y_lo + 1e-9
    axis = 8
    cols = max(10, width - axis - 1)
    grid = [[" "] * cols for _ in range(height)]
    styles = [[""] * cols for _ in range(height)]
    def cell(x, y):
        c = 0 if x_hi == x_lo else round((x - x_lo) / (x_hi - x_lo) * (cols - 1))
        return height - 1 - round((y - y_lo) / (y_hi - y_lo) * (height - 1)), c

    for k, (label, values) in enumerate(series.items()):
        mark, style = _MARKS[k % len(_MARKS)], _SERIES_STYLES[k % len(_SERIES_STYLES)]
        values = [(x, y) for x, y in values if y is not None]
        for (x0, y0), (x1, y1) in zip(values, values[1:]):  # a dotted line between evaluations
            (r0, c0), (r1, c1) = cell(x0, y0), cell(x1, y1)
            for c in range(c0 + 1, c1):
                r = round(r0 + (r1 - r0) * (c - c0) / (c1 - c0))
                if grid[r][c] == " ":
                    grid[r][c], styles[r][c] = "·", style
        for x, y in values:
            r, c = cell(x, y)
            grid[r][c], styles[r][c] = mark, style
    text = Text()
    for r in range(height):
        value = y_hi - (y_hi - y_lo) * r / (height - 1)
        label = f"{value:7.3f} " if r in (0, height // 2, height - 1) else " " * axis
        text.append(label + "│", style="dim")
        for c in range(cols):
            text.append(grid[r][c], style=styles[r][c])
        text.append("\n")
    text.append(" " * axis + "└" + "─" * cols + "\n", style="dim")
    left, right = f"{x_lo:g}", f"step {x_hi:g}"
    text.append(" " * (axis + 1) + left + " " * max(1, cols - len(left) - len(right)) + right + "\n", style="dim")
    legend = Text(" " * (axis + 1))
    for k, label in enumerate(series):
        legend.append(f"{_MARKS[k % len(_MARKS)]} {label}  ", style=_SERIES_STYLES[k % len(_SERIES_STYLES)])
    text.append(legend)
    text.append(f"   ({y_label})", style="dim")
    return text


def _loss_cell(e) -> str:
    if e is None:
        return ""
    return f"{e.val_loss:.4f}" + (f" ±{e.spread:.3f}" if e.spread is not None else "")


class CompareTable:
    """One row per evaluation step, one column per contender; rows fill in as evaluations arrive."""

    def __init__(self, labels: list[str], seeds: int):
        self.labels = list(labels)
        self.seeds = seeds
        self.rows: dict[int, dict[str, object]] = {}

    def add(self, evaluation) -> None:
        self.rows.setdefault(evaluation.step, {})[evaluation.label] = evaluation

    def __rich_console__(self, console: Console, options):
        table = self.table(with_labels=True)
        if not _fits(console, table, options.max_width):  # the marks alone; the legends name them
            table = self.table(with_labels=False)
        yield table

    def table(self, with_labels: bool = True) -> Table:
        title = "val loss" + (f" (mean ± std over {self.seeds} seeds)" if self.seeds > 1 else "")
        table = Table(title=Text(title), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
        table.add_column("step", justify="right")
        for k, label in enumerate(self.labels):
            header = f"{_MARKS[k % len(_MARKS)]} {label}" if with_labels else _MARKS[k % len(_MARKS)]
            table.add_column(Text(header, style=_SERIES_STYLES[k % len(_SERIES_STYLES)]), justify="right")
        for step in sorted(self.rows):
            row = self.rows[step]
            finals = [row[label].val_loss for label in self.labels if label in row]
            best = min(finals) if len(finals) == len(self.labels) else None
            cells = []
            for label in self.labels:
                e = row.get(label)
                cells.append(Text(_loss_cell(e), style="bold" if e is not None and e.val_loss == best else ""))
            _add(table, _int(step), *cells)
        return table


@render.register(commands.CompareResult)
def _(result, console: Console) -> None:
    table = CompareTable([o.label for o in result.outcomes], result.seeds)
    for outcome in result.outcomes:
        for evaluation in outcome.curve:
            table.add(evaluation)
    console.print(table)
    facts = Table(box=None, pad_edge=False, header_style="bold")
    facts.add_column("", no_wrap=True)
    for column in ("parameters", "tokens/s", "time", "differs from the first in"):
        facts.add_column(column, justify="left" if column.startswith("differs") else "right")
    lines = []  # the same facts, one contender a line, where the table does not fit
    for k, o in enumerate(result.outcomes):
        changes = ", ".join(f"{key}={_value(v)}" for key, v in o.changes.items()) or "-"
        label = Text(f"{_MARKS[k % len(_MARKS)]} {o.label}", style=_SERIES_STYLES[k % len(_SERIES_STYLES)])
        _add(facts, label, _int(o.n_params), _rate(o.tokens_per_second), _seconds(o.seconds), changes)
        lines.append(label + Text(f": {count(o.n_params, 'parameter')}, {_rate(o.tokens_per_second)} tokens/s, "
                                  f"{_seconds(o.seconds)}" + (f"; differs in {changes}" if k else "")))
    if _fits(console, facts):
        console.print(facts)
    else:
        for line in lines:
            say(console, line)
    series = {o.label: [(e.step, e.val_loss) for e in o.curve] for o in result.outcomes}
    console.print(curve_chart(series, width=min(console.width, 100)))
    if result.stopped:
        say(console, "stopped early: the curves end where Ctrl-C stopped them", "yellow")
    if result.verdict:
        say(console, result.verdict, "green")
    elif result.seeds == 1 and not result.stopped:
        _dim(console, f"one seed each on {result.data}: seeds=3 shows whether a gap is more than noise")


@render.register(commands.ExpertsResult)
def _(result, console: Console) -> None:
    """One row per expert, one column per MoE block: the share, then a bar in a fixed-width field, so
    the numbers and the bars line up (bars of their natural lengths, right-aligned, were ragged)."""
    n = len(result.load[0]) if result.load else 0
    if not n:
        _dim(console, "no routing was recorded")
        return
    peak = max(max(row) for row in result.load) or 1.0

    def shares(bar: int) -> Table:
        table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("", no_wrap=True)
        for layer in result.layers:
            table.add_column(f"block {layer}", no_wrap=True)
        for e in range(n):
            cells = []
            for row in result.load:
                cell = Text(f"{row[e]:6.1%}")
                if bar:
                    cell.append(" " + ("█" * round(row[e] / peak * bar)).ljust(bar), style="cyan")
                cells.append(cell)
            _add(table, f"expert {e}", *cells)
        return table

    bar = 12  # the busiest expert's bar; narrower (or none) where the terminal is
    while bar and not _fits(console, shares(bar)):
        bar -= 2
    say(console, f"share of routing choices per expert ({result.experts_per_token} per token); "
                 f"even would be {1 / n:.0%} each", "bold")
    console.print(shares(bar))
    if bar:
        _dim(console, f"a full bar is the busiest expert's share ({peak:.1%})")
    if result.aux_loss is not None:
        _dim(console, f"load-balancing loss {result.aux_loss:.3f} (1.0 = perfectly even; training adds it, weighted)")


@render.register(commands.AblateResult)
def _(result, console: Console) -> None:
    if not result.active:
        say(console, f"nothing switched off: val loss {_num(result.val_loss_before)}", "green")
    else:
        delta = result.val_loss_after - result.val_loss_before
        say(console, Text("switched off: ", style="yellow") + Text(", ".join(result.active)))
        say(console, f"val loss {_num(result.val_loss_before)} -> {_num(result.val_loss_after)} ({delta:+.4f})", "bold")
    sample = Text("sample: ", style="dim") + model_text(result.prompt, console, "bold") + model_text(result.sample, console)
    say(console, sample)
    if result.active:
        _dim(console, f"{cmd('ablate', 'off')} puts the model back (the weights never changed)")


# --- live progress -----------------------------------------------------------------------------
class WordStream:
    """Text written piece by piece (generated tokens), wrapped like say(): at spaces, never in a word.

    Whether a word fits on the current line is known only once it ends, so the word being written
    is held back until a space or a newline comes (or `flush`). A word that cannot fit even a line
    of its own goes out whole as it grows, for the terminal to wrap; a space that would end a full
    line becomes the line break, as in Rich's own wrapping.
    """

    def __init__(self, console: Console):
        self.console = console
        self.column = 0  # cells written on the current line
        self.word = Text()  # the word held back

    def write(self, text: str, style: str = "") -> None:
        if self.console.soft_wrap:  # a file or a pipe (console_for): the text exactly as generated
            self._put(Text(text, style=style))
            return
        width = max(1, self.console.width)
        for ch in text:
            if ch == "\n":
                self.flush()
                self._put(Text("\n"))
                self.column = 0
            elif ch.isspace():
                self.flush()
                step = 8 - self.column % 8 if ch == "\t" else 1
                if self.column + step > width:
                    self._put(Text("\n"))
                    self.column = 0
                else:
                    self._put(Text(ch, style=style))
                    self.column += step
            else:
                self.word.append(ch, style=style)
                if self.column and self.column + self.word.cell_len > width:
                    self._put(Text("\n"))  # the word will not fit here: it starts the next line
                    self.column = 0
                if self.word.cell_len >= width:
                    self.flush()  # wider than any line: no reason to wait

    def flush(self) -> None:
        """Write the held-back word."""
        if self.word.plain:
            self._put(self.word)
            self.column += self.word.cell_len
            self.word = Text()

    def _put(self, text: Text) -> None:
        # The lines are cut here already: Rich must print them as they are (soft_wrap).
        self.console.print(text, end="", soft_wrap=True, highlight=False)


class QuietReporter(Reporter):
    """For --json: nothing on stdout while the command runs; notices go to the error console."""

    def __init__(self, err: Console):
        super().__init__()
        self.err = err

    def notice(self, text: str) -> None:
        say(self.err, text)


class RichReporter(Reporter):
    """Shows a running command: a progress bar and a growing loss table, or streamed text.

    `live` defaults to whether the console is a terminal: a pipe or a file gets no animation (the
    final table is printed by `render(TrainResult)`). The REPL's SIGINT handler calls
    `request_stop()`; the command asks `should_stop()` between steps and tokens.
    """

    def __init__(self, console: Console, live: bool | None = None, stream: bool = True, out: Console | None = None):
        super().__init__()
        self.console = console  # progress, notices, the stop message
        self.out = out if out is not None else console  # generated text and the final result
        self.live = console.is_terminal if live is None else live
        self.stream = stream
        self._announced = False
        self.training = False
        self.streamed = False
        self.gen_prompt: str | None = None
        self._live: Live | None = None
        self._progress: Progress | None = None
        self._task = None
        self._table: LossTable | None = None
        self._words: WordStream | None = None  # streamed text, wrapped at spaces

    # Ctrl-C --------------------------------------------------------------------------------------
    def should_stop(self) -> bool:
        if self.stop_requested and self.training and not self._announced:
            self._announced = True
            say(self.console, "stopping after this step...", "yellow")
        return self.stop_requested

    # training ------------------------------------------------------------------------------------
    def on_train_start(self, run_steps: int, start_step: int, resumed: bool) -> None:
        self.training = True
        if not self.live:
            return
        if self.console.width < NARROW:  # the counter and the loss matter most
            columns = (BarColumn(bar_width=None), MofNCompleteColumn(), TextColumn("{task.fields[loss]}"))
        else:
            columns = (
                TextColumn("[bold]train"), BarColumn(bar_width=None), MofNCompleteColumn(), TextColumn("eta"),
                TimeRemainingColumn(), TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[tps]} tok/s"),
            )
        self._progress = Progress(*columns, console=self.console, expand=True)
        done = start_step if 0 <= start_step <= run_steps else 0
        self._task = self._progress.add_task("train", total=run_steps, completed=done, loss="-", tps="-")
        self._table = None
        self._live = Live(Group(), console=self.console, transient=True, refresh_per_second=8)
        self._live.start()
        self._refresh()

    def _refresh(self) -> None:
        if self._live is not None:
            parts = ([self._table] if self._table is not None else []) + [self._progress]
            self._live.update(Group(*parts))

    def on_step(self, info) -> None:
        if self._progress is None:
            return
        self._progress.update(
            self._task, completed=info.run_step, total=info.run_steps,
            loss=f"{info.train_loss:.4f}", tps=f"{info.tokens_per_second:,.0f}",
        )
        if info.val_loss is not None:
            row = {
                "step": info.step, "train_loss": info.train_loss, "val_loss": info.val_loss,
                "accuracy": info.accuracy, "lr": info.lr, "tokens_per_second": info.tokens_per_second,
                "elapsed": info.elapsed, "aux_loss": getattr(info, "aux_loss", None),
            }
            if self._table is None:
                self._table = LossTable([row], narrow=self.console.width < NARROW)
            else:
                self._table.add(row)
            self._refresh()

    # comparison ----------------------------------------------------------------------------------
    def on_compare_start(self, labels: list[str], steps: int, seeds: int) -> None:
        self._compare = CompareTable(labels, seeds)
        if not self.live:
            return
        # The bar counts every training step of every contender and seed (on_compare_step), so it
        # moves, and Rich can estimate the time left, between evaluations too: moved only at
        # evaluations it showed no ETA (fewer than two samples in Rich's speed window).
        self._progress = Progress(TextColumn("[bold]compare"), BarColumn(bar_width=None), MofNCompleteColumn(),
                                  TextColumn("eta"), TimeRemainingColumn(), console=self.console, expand=True)
        self._task = self._progress.add_task("compare", total=len(labels) * seeds * steps, completed=0)
        self._live = Live(Group(self._compare, self._progress), console=self.console, transient=True,
                          refresh_per_second=4)
        self._live.start()

    def on_compare_step(self, done: int, total: int) -> None:
        if self._progress is not None:
            self._progress.update(self._task, completed=done, total=total)

    def on_compare_eval(self, evaluation) -> None:
        self._compare.add(evaluation)
        if self._live is not None:
            self._live.update(Group(self._compare, self._progress))

    # generation ----------------------------------------------------------------------------------
    def on_gen_start(self, prompt: str, raw: bool = False) -> None:
        self.gen_prompt = prompt  # shown in bold before the first token
        self.gen_raw = raw
        if raw and self.out.is_terminal:
            self.notice("raw=on writes control characters as they are only to a file or a pipe; "
                        "in a terminal they stay escaped")

    def on_token(self, text: str) -> None:
        if not self.stream:
            return
        prompt = self.gen_prompt if not self.streamed else None
        self.streamed = True
        if writes_raw(self.out, getattr(self, "gen_raw", False)):
            write_raw(self.out, (prompt or "") + text)
            return
        if self._words is None:
            self._words = WordStream(self.out)
        if prompt:
            self._words.write(terminal_safe(prompt), "bold")  # the vocabulary's control characters escaped
        self._words.write(terminal_safe(text))

    def notice(self, text: str) -> None:
        say(self.console, text, "yellow")

    # end -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the live display and write out a held-back word (also after an error); safe to call twice."""
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._words is not None:
            self._words.flush()

    def finish(self, result) -> None:
        """Render the result, taking into account what was already shown while it ran."""
        self.close()
        if isinstance(result, commands.GenResult) and self.streamed:
            self.out.print()
            gen_notes(self.console, result)
            return
        render(result, self.out)


# --- views: look inside (:attn, :step, :gen show=probs, :lens, :plot, :tok, :report) --------------
# Colour where the console has it; without (NO_COLOR, a pipe, a test console) the same information
# as characters: a shade per weight, a marker for the picked token, a glyph per curve.

def _note(console: Console, text: str) -> None:
    """A dim line wrapped at the console's width (views are read at 80 columns)."""
    say(console, text, "dim")


def plain(console: Console) -> bool:
    """No colour on this console: draw with characters instead."""
    return bool(console.no_color) or console.color_system is None


def _cell(frac: float, width: int, as_text: bool, text: str = "") -> Text:
    if as_text:
        return Text((text or shade(frac)).ljust(width))
    r, g, b = scale_rgb(frac)
    fg = "black" if frac > 0.55 else "white"
    return Text(text.ljust(width) if text else " " * width, style=Style(bgcolor=Color.from_rgb(r, g, b), color=fg))


def _legend(peak: float, as_text: bool, what: str = "weight") -> Text:
    line = Text(f"{what}: 0 ", style="dim")
    if as_text:
        line.append(" ".join(SHADES))
    else:
        for i in range(len(SCALE) * 2):
            line.append_text(_cell(i / (len(SCALE) * 2 - 1), 1, False))
    line.append(f" {peak:.2f}", style="dim")
    return line


def heatmap(tokens: list[str], weights: list[list[float]], peak: float, cell: int, as_text: bool) -> Text:
    """Rows are queries (where position i looks), columns keys; j > i (the future) stays blank."""
    T = len(tokens)
    out = Text("  ")
    for ch in tokens:
        out.append(visible(ch).ljust(cell), style="bold")
    for i in range(T):
        out.append("\n")
        out.append(visible(tokens[i]).ljust(2), style="bold")
        for j in range(T):
            if j > i:
                out.append(" " * cell)
            else:
                out.append_text(_cell(weights[i][j] / peak if peak > 0 else 0.0, cell, as_text))
    return out


def attention_window(n_tokens: int, width: int, cell: int) -> int:
    """How many positions fit the width (2 columns of row labels, `cell` columns per position)."""
    return max(1, min(n_tokens, (width - 2) // cell))


@render.register(commands.AttnResult)
def _(result, console: Console) -> None:
    as_text = plain(console)
    T = len(result.tokens)
    single = len(result.heads) == 1
    cell = 2 if single else 1
    n = attention_window(T, console.width - (0 if single else 2), cell)
    start = T - n
    tokens = result.tokens[start:]
    maps = [[row[start:] for row in m[start:]] for m in result.maps]
    peak = max((w for m in maps for row in m for w in row), default=1.0)
    what = f"head {result.heads[0]}" if single else f"all {count(result.n_heads, 'head')}"
    say(console, f"attention, layer {result.layer}, {what}", "bold")
    _note(console, "row i: where position i looks (keys 0..i); blank: the masked future")
    if start:
        _note(console, f"showing the last {n} of {T} positions (the terminal is {console.width} columns wide)")
    if single:
        console.print(heatmap(tokens, maps[0], peak, cell, as_text), highlight=False, no_wrap=True,
                      overflow="ignore")
    else:
        panels = [Group(Text(f"head {h}", style="cyan"), heatmap(tokens, m, peak, cell, as_text))
                  for h, m in zip(result.heads, maps)]
        console.print(Columns(panels, padding=(1, 2)))
    console.print(_legend(peak, as_text), highlight=False)
    if result.dropped:
        _note(console, f"the first {count(result.dropped, 'character')} of the prompt (beyond max_seq_len) "
                       "went unread")


def _stage_header(result) -> str:
    parts = ["logits z"]
    if result.temperature == 0:
        parts.append("greedy (temperature 0)")
    else:
        parts.append(f"/ temperature {result.temperature:g}")
        if result.top_k is not None:
            parts.append(f"top-k {result.top_k}")
        if result.top_p is not None:
            parts.append(f"top-p {result.top_p:g}")
        parts.append("renormalise")
    return " -> ".join(parts + ["pick"])


@render.register(commands.StepResult)
def _(result, console: Console) -> None:
    as_text = plain(console)
    say(console, f"next token after {result.prompt[-40:]!r}", "bold")
    _note(console, _stage_header(result))
    table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("token", no_wrap=True)
    table.add_column("logit z", justify="right")
    table.add_column(f"/ T={result.temperature:g}" if result.temperature else "greedy", justify="right")
    table.add_column(f"top-k {result.top_k}" if result.top_k is not None else "top-k", justify="center")
    table.add_column(f"top-p {result.top_p:g}" if result.top_p is not None else "top-p", justify="center")
    table.add_column("probability", justify="right")
    table.add_column("", no_wrap=True)  # the bar, left-aligned so that the numbers line up
    for r in result.rows:
        kept_k = "kept" if r.top_k_kept else "cut"
        kept_p = "-" if not r.top_k_kept else ("kept" if r.kept else "cut")
        scaled = "-" if r.scaled is None else ("-inf" if not math.isfinite(r.scaled) else f"{r.scaled:.3f}")
        prob = f"{r.prob:.3f}" if r.prob > 0 else "0"
        bar = Text()
        if r.prob > 0:
            bar.append("█" * max(1, round(r.prob * 10)), style="green" if not as_text else "")
        cells = ["→" if r.picked else "", repr(r.token)[1:-1] if r.token not in VISIBLE else visible(r.token),
                 f"{r.logit:.3f}", scaled, Text(kept_k, style="" if r.top_k_kept else "dim"),
                 Text(kept_p, style="" if r.kept else "dim"), Text(prob), bar]
        _add(table, *cells, style="bold reverse" if r.picked and not as_text else ("dim" if not r.kept else None))
    console.print(table)
    shown = "" if result.picked_rank <= len(result.rows) else " (listed last)"
    say(console, f"picked {visible(result.picked)!r} (id {result.picked_id}): probability "
                 f"{result.picked_prob:.3f}, rank {result.picked_rank} of {result.vocab_size}{shown}", "green")
    _note(console, f"{result.n_kept} of {result.vocab_size} tokens could be picked; seed {result.seed} "
                   f"({cmd('gen', 'PROMPT', n=1, seed=result.seed)} picks the same)")


def gen_probs(result, console: Console) -> None:
    """The generated text, each character coloured (or shaded beneath) by its probability when picked."""
    as_text = plain(console)
    probs = result.probs or []
    chars = list(result.text)
    if len(chars) != len(probs):  # not one character per token: show the text plainly
        say(console, model_text(result.prompt, console, "bold") + model_text(result.text, console))
        return
    if not as_text:
        text = model_text(result.prompt, console, "bold")
        for ch, p in zip(chars, probs):
            if ch == "\n":
                text.append_text(_cell(p, 1, False, "↵"))
                text.append("\n")
            else:
                text.append_text(_cell(p, len(terminal_safe(ch)), False, terminal_safe(ch)))
        say(console, text)
    else:
        # Two rows per line, the shades under their characters. Whitespace shows as a symbol here
        # (␣ ↵ ⇥), so the rows are cut by hand: after the last whitespace that fits, like say().
        width = max(10, console.width)
        text = result.prompt + result.text
        shown = [visible(c) for c in text]
        shades = [" "] * len(result.prompt) + [shade(p) for p in probs]
        at = 0
        while at < len(shown):
            end = min(len(shown), at + width)
            if end < len(shown):
                spaces = [i + 1 for i in range(at, end) if text[i].isspace()]
                end = spaces[-1] if spaces else end
            console.print(Text("".join(shown[at:end])), highlight=False, no_wrap=True, overflow="ignore")
            console.print(Text("".join(shades[at:end]), style="dim"), highlight=False,
                          no_wrap=True, overflow="ignore")
            at = end
    console.print(_legend(1.0, as_text, "probability when picked"), highlight=False)


@render.register(commands.LensResult)
def _(result, console: Console) -> None:
    target = f"; the true next character is {visible(result.target)!r}" if result.target is not None else ""
    say(console, f"logit lens at the last position of {result.prompt[-40:]!r}{target}", "bold")
    _note(console, "each layer's residual stream read as if the model ended there: softmax(lm_head(ln_f(h)))")
    most = max((len(r.guesses) for r in result.rows), default=0)
    with_target = result.target is not None

    def guesses(k: int) -> Table:
        table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("after", no_wrap=True, style="cyan")
        for i in range(k):
            table.add_column(("best guess" if i == 0 else f"#{i + 1}"), no_wrap=True)
        if with_target:
            table.add_column("true: rank (p)", justify="right", no_wrap=True)
        for r in result.rows:
            cells = [r.layer]
            for ch, p in list(zip(r.guesses, r.probs))[:k]:
                hit = with_target and ch == result.target
                cells.append(Text(f"{visible(ch)} {p:.2f}", style="bold green" if hit else ""))
            cells += [""] * (k - min(k, len(r.guesses)))
            if with_target:
                cells.append("-" if r.target_rank is None else f"{r.target_rank} ({r.target_prob:.2f})")
            _add(table, *cells)
        return table

    k = most  # as many guesses as fit the width, whole (the true character's rank column says the rest)
    while k > 1 and not _fits(console, guesses(k)):
        k -= 1
    console.print(guesses(k))
    more = count(most - k, "more guess", "more guesses")
    _note(console, "the last row is the model's own prediction" + (f"; a wider terminal shows {more}"
                                                                    if k < most else ""))


def _chart(series, width: int, height: int = 12, baseline: float | None = None, baseline_label: str = "") -> Group:
    """Curves against the step on a character grid: one glyph per series ('•' train, '×' val)."""
    glyphs = {"train": ("•", "cyan"), "val": ("×", "magenta")}
    points = [(s, v) for one in series for s, v in zip(one.steps, one.values) if math.isfinite(v)]
    if not points:
        return Group(Text("nothing to plot", style="dim"))
    x0, x1 = min(s for s, _ in points), max(s for s, _ in points)
    values = [v for _, v in points]
    y0, y1 = min(values), max(values)
    if baseline is not None and math.isfinite(baseline) and baseline <= y1 + 0.5 * (y1 - y0 + 1e-9):
        y1 = max(y1, baseline)
    else:
        baseline = None
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    labels = [f"{y1:.3g}", f"{(y0 + y1) / 2:.3g}", f"{y0:.3g}"]
    lw = max(len(s) for s in labels) + 1
    plot_w = max(10, width - lw - 2)
    grid: list[list[tuple[str, str]]] = [[(" ", "")] * plot_w for _ in range(height)]

    def row_of(v: float) -> int:
        return min(height - 1, max(0, round((y1 - v) / (y1 - y0) * (height - 1))))

    if baseline is not None:
        r = row_of(baseline)
        grid[r] = [("╌", "dim")] * plot_w
    for one in series:
        glyph, style = glyphs.get(one.name, ("•", "cyan"))
        buckets: dict[int, list[float]] = {}
        for s, v in zip(one.steps, one.values):
            if math.isfinite(v):
                col = 0 if x1 == x0 else round((s - x0) / (x1 - x0) * (plot_w - 1))
                buckets.setdefault(col, []).append(v)
        for col, vs in buckets.items():
            grid[row_of(sum(vs) / len(vs))][col] = (glyph, style)
    out = Text()
    for r in range(height):
        label = labels[0] if r == 0 else labels[2] if r == height - 1 else labels[1] if r == (height - 1) // 2 else ""
        out.append(label.rjust(lw) + (" ┤" if label else " │"), style="dim")
        for ch, style in grid[r]:
            out.append(ch, style=style)
        out.append("\n")
    out.append(" " * lw + " └" + "─" * plot_w + "\n", style="dim")
    left, right = f"step {x0:,}", f"{x1:,}"
    out.append(" " * (lw + 2) + left + " " * max(1, plot_w - len(left) - len(right)) + right, style="dim")
    legend = Text()
    for one in series:
        glyph, style = glyphs.get(one.name, ("•", "cyan"))
        legend.append(f"{glyph} ", style=style)
        legend.append(f"{one.name}   ")
    if baseline is not None:
        legend.append("╌ ", style="dim")
        legend.append(baseline_label)
    return Group(out, legend)


def render_loss_chart(history: list[dict], width: int = 80, height: int = 10, vocab_size: int | None = None) -> Group:
    """A train/val loss chart of a trainer's history (rows of core.train.StepInfo as dicts), `width` columns wide.

    For `:train` to print under its loss table: `console.print(render_loss_chart(history, console.width))`.
    """
    baseline = math.log(vocab_size) if vocab_size and vocab_size > 1 else None
    label = f"ln(V) = {baseline:.2f}, a uniform guess" if baseline is not None else ""
    return _chart(commands.history_series(history, "loss"), width, height, baseline, label)


@render.register(commands.PlotResult)
def _(result, console: Console) -> None:
    title = {"loss": "loss", "lr": "learning rate", "grad_norm": "gradient norm (before clipping)"}[result.what]
    say(console, f"{title} by step", "bold")
    baseline = label = None
    if result.what == "loss" and result.vocab_size and result.vocab_size > 1:
        baseline = math.log(result.vocab_size)
        label = f"ln(V) = {baseline:.2f}, a uniform guess"
    console.print(_chart(result.series, console.width, 12, baseline, label or ""))


@render.register(commands.TokResult)
def _(result, console: Console) -> None:
    width = max(10, console.width)
    top, bottom = Text(), Text()
    for tok, i in zip(result.tokens, result.ids):
        shown = visible(tok)
        w = max(len(shown), len(str(i))) + 1
        if top.cell_len + w > width:
            console.print(top, highlight=False, no_wrap=True)
            console.print(bottom, highlight=False, no_wrap=True)
            console.print()
            top, bottom = Text(), Text()
        top.append(shown.ljust(w), style="bold")
        bottom.append(str(i).ljust(w), style="dim")
    console.print(top, highlight=False, no_wrap=True)
    console.print(bottom, highlight=False, no_wrap=True)
    n = len(result.ids)
    _note(console, f"{count(n, 'token')}, one per {result.kind}; ids index a vocabulary of "
                   f"{result.vocab_size}")


@render.register(commands.ReportResult)
def _(result, console: Console) -> None:
    say(console, Text(f"wrote {result.path}", style="green") +
        Text(f" ({_bytes(result.size_bytes)}: {', '.join(result.sections)}; {result.seconds:.2f} s)"))
    _note(console, "one self-contained file: open it in any browser, no network needed")
# --- speed: precision, compile, quantization --------------------------------------------------------
def _change(before, after, fmt) -> str:
    if before is None or after is None:
        return "-"
    return f"{'+' if after >= before else ''}{fmt(after - before)}"


@render.register(commands.QuantizeResult)
def _(result, console: Console) -> None:
    m = result.measure
    if m is None:
        state = "an int8 copy of the Linear layers" if result.mode == "int8" else "the float32 model"
        verb = "now samples" if result.changed else "samples"
        say(console, f"{cmd('gen')} {verb} from {state}", "green" if result.changed else "")
        if result.mode == "off" and not result.changed:
            _dim(console, f"{cmd('quantize', 'int8')} makes an int8 copy for sampling and measures it")
        return
    table = Table(header_style="bold", box=box.HEAVY_HEAD)
    for header in ("", "float32", "int8", "change"):
        table.add_column(header, justify="right" if header else "left")
    ratio = f"{m.bytes_after / m.bytes_before:.2f}x" if m.bytes_before else "-"
    _add(table, "weights (saved)", _bytes(m.bytes_before), _bytes(m.bytes_after), ratio)
    speed = f"{m.tokens_per_second_after / m.tokens_per_second_before:.2f}x" if m.tokens_per_second_before else "-"
    _add(table, f"tokens/s ({m.n_tokens}, greedy)", _rate(m.tokens_per_second_before),
         _rate(m.tokens_per_second_after), speed)
    _add(table, "val loss", _num(m.val_loss_before), _num(m.val_loss_after),
         _change(m.val_loss_before, m.val_loss_after, lambda d: f"{d:.4f}"))
    if m.accuracy_before is not None:
        _add(table, "accuracy", _pct(m.accuracy_before), _pct(m.accuracy_after),
             _change(m.accuracy_before, m.accuracy_after, lambda d: f"{100 * d:.1f} pts"))
    _add(table, "same greedy tokens", "", f"{m.same_tokens}/{m.n_tokens}", "")
    console.print(table)
    say(console, f"{cmd('gen')} now samples from the int8 copy ({count(m.linear_layers, 'Linear layer')} int8, on "
                 f"the CPU); {cmd('quantize', 'off')} goes back; training or loading drops the copy", "green")
    if result.device is not None and result.device != "cpu":
        _dim(console, f"the float model trains on {result.device}; both were timed on the CPU")


def speed_parts(result) -> list[str]:
    """What train_summary adds for the speed switches: "bfloat16", "compiled in 41.2 s" (nothing at the defaults)."""
    parts = []
    if getattr(result, "dtype", "float32") != "float32":
        parts.append(result.dtype)
    if getattr(result, "compile_seconds", None) is not None:
        parts.append(f"compiled in {result.compile_seconds:.1f} s (not in tokens/s)")
    elif getattr(result, "compiled", False):
        parts.append("compiled")
    return parts
