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
import math

from rich import box
from rich.color import Color
from rich.columns import Columns
from rich.console import Console, Group
from rich.live import Live
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.style import Style
from rich.table import Table
from rich.text import Text

from . import commands
from .palette import SCALE, SHADES, VISIBLE, is_active, scale_hex, scale_rgb, shade, terminal_safe, visible
from .reporter import Reporter

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


def error(console: Console, message: str) -> None:
    """One line `error: <message>` (the console is the stderr one). Never wrapped, never markup."""
    line = " ".join(str(message).split("\n"))
    console.print(Text(f"error: {line}", style="bold red"), soft_wrap=True, highlight=False)


def internal_error(console: Console, exc: BaseException) -> None:
    line = " ".join(str(exc).split("\n"))
    text = f"internal error: {type(exc).__name__}: {line} (run with --debug for the traceback)"
    console.print(Text(text, style="bold red"), soft_wrap=True, highlight=False)


def _dim(console: Console, text: str) -> None:
    console.print(Text(text, style="dim"), soft_wrap=True, highlight=False)


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
        console.print(Text(repr(result)), highlight=False)


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
        console.print(Text(names, style="bold"), Text(f"  {entry.summary}"), sep="", highlight=False)
        console.print(Text("usage: ", style="dim") + Text(entry.usage), highlight=False)
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
            parts.append(Text(f"ln(V) = ln({self.vocab_size}) = {math.log(self.vocab_size):.2f}: "
                              "the loss of a uniform guess (a model that knows nothing)", style="dim"))
        parts.append(self.table)
        if self.overfitting:
            parts.append(Text(f"overfitting? the validation loss rose {OVERFIT_RISES} evaluations in a row "
                              "while training continued (more data, dropout, or stop earlier)", style="yellow"))
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
        head = f"stopped at step {result.total_steps} of {end}: :train continues"
        return f"{head} ({result.steps} steps this time; " + ", ".join(parts) + ")"
    word = "step" if result.steps == 1 else "steps"
    head = f"trained {result.steps} {word}"
    if result.total_steps != result.steps:
        head += f" (step {result.total_steps} in total)"
    return head + ": " + ", ".join(parts)


@render.register(commands.TrainResult)
def _(result, console: Console) -> None:
    if result.evals:
        console.print(LossTable(result.evals, narrow=console.width < NARROW,
                                vocab_size=getattr(result, "vocab_size", None)))
    if len(getattr(result, "curve", None) or []) >= 10:  # a small chart of this run under its table
        console.print(render_loss_chart(result.curve, min(console.width, 80), 8, getattr(result, "vocab_size", None)))
    style = "yellow" if result.stopped else "green"
    console.print(Text(train_summary(result), style=style), soft_wrap=True, highlight=False)
    if getattr(result, "schedule", "new") == "continue" and result.constant_lr:
        _dim(console, f"continued at the last run's final rate {result.constant_lr:.2e} (schedule=new starts a "
                      "fresh warm-up + cosine)")
    if getattr(result, "saved", None):
        _dim(console, f"saved checkpoint {result.saved} (:load {result.saved} restores it)")
    if getattr(result, "save_error", None):
        console.print(Text(f"warning: not saved: {result.save_error}", style="yellow"), soft_wrap=True,
                      highlight=False)


def gen_stats(result) -> str:
    rate = f"{result.tokens_per_second:,.0f} tokens/s" if result.tokens_per_second else "- tokens/s"
    text = f"{result.n_tokens} tokens in {result.seconds:.2f} s, {rate}, cache {'on' if result.cache else 'off'}"
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
        counts = ", ".join(f"{result.text.count(ch)} {name}" for ch, name in
                           ((" ", "spaces"), ("\n", "newlines"), ("\t", "tabs")) if ch in result.text)
        console.print(Text(f"only whitespace was generated ({counts}): {visible_text(result.text[:80])}", style="yellow"),
                      soft_wrap=True, highlight=False)
    if getattr(result, "untrained", False):
        _dim(console, "this model has not trained yet, so its text is random: :train first")
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
        console.print(model_text(result.prompt, console, "bold") + model_text(result.text, console), soft_wrap=True,
                      highlight=False)
    gen_notes(console, result)


# The symbols of the formulas (model.py's docstring), read back from the trace's own shapes.
_SYMBOL_NAMES = (("B", "batch"), ("T", "positions"), ("d", "width"), ("h", "heads"), ("d_k", "d/h"),
                 ("d_ff", "FFN"), ("V", "vocab"))
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
        elif name == "fc_in" and "d_ff" not in dims:
            dims["d_ff"] = out[-1]
        elif name == "lm_head":
            dims["V"] = out[-1]
    return dims


def _symbols(shape, dims: dict[str, int], scores: bool = False) -> str | None:
    """`(B, h, T, d_k)` for a shape whose sizes match those symbols, else None."""
    candidates = {
        1: [("T",)],
        2: [("B", "T"), ("T", "d")],
        3: [("B", "T", "d"), ("B", "T", "d_ff"), ("B", "T", "V")],
        4: [("B", "h", "T", "d_k"), ("B", "h", "T", "T")],
    }.get(len(shape), [])
    if scores:
        candidates = candidates[::-1]
    for names in candidates:
        if all(dims.get(n) == size for n, size in zip(names, shape)):
            return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"
    return None


def _shape_cell(r, dims: dict[str, int]) -> str:
    """`(B, T, d) -> (B, T, d_ff) = (1, 5, 64)`: the symbols, then the output's numbers."""
    scores = r.path.rsplit(".", 1)[-1] in _SCORE_STEPS
    out = _symbols(r.output_shape, dims, scores)
    numbers = _shape(r.output_shape)
    if out is None:
        inputs = ", ".join(_shape(s) for s in r.input_shapes)
        return f"{inputs} -> {numbers}" if inputs and inputs != numbers else numbers
    inp = _symbols(r.input_shapes[0], dims, scores) if r.input_shapes else None
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
                folded = (f"same {len(block)} steps as blocks.{shown}", _io(block[0], block[-1]),
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
    console.print(Text(f"shape trace of {result.prompt!r}", style="bold"), soft_wrap=False, highlight=False)
    legend = ", ".join(f"{k}={dims[k]} {meaning}" for k, meaning in _SYMBOL_NAMES if k in dims)
    console.print(Text(legend, style="dim"), highlight=False)
    for heading, rows in sections:
        console.print(heading, highlight=False)
        for row in rows:
            if len(row) == 3:  # a folded block
                line = Text("  " + row[0], style="dim")
                if one_line or two_lines:
                    line.append(f"   {row[1]}   {row[2]} params", style="dim")
                console.print(line, highlight=False)
                continue
            name, kind, shape, formula, params = row
            if one_line or two_lines:
                line = Text(f"  {name}".ljust(nw) + "  " + shape.ljust(sw) + "  " + params.rjust(pw))
                line.stylize("dim", nw + 2 + sw + 2)
                if one_line:
                    line.append("  " + formula, style="italic")
                console.print(line, highlight=False, no_wrap=True, overflow="ignore")
                if two_lines and formula:
                    console.print(Padding(Text(formula, style="italic dim"), (0, 0, 0, nw + 2)), highlight=False)
            else:
                line = Text(f"  {name}", style="bold")
                line.append(f" {kind}", style="dim")
                if params:
                    line.append(f"  {params} params", style="dim")
                console.print(line, highlight=False)
                console.print(Text(f"    {shape}"), highlight=False)
                if formula:
                    console.print(Text(f"    {formula}", style="italic dim"), highlight=False)
    total = sum(r.n_params for r in result.records)
    note = f"{len(result.records)} steps, {result.n_layers} layer{'s' if result.n_layers != 1 else ''}, {total:,} parameters"
    if any(len(r) == 3 for _, rows in sections for r in rows):
        shown = result.layer if result.layer is not None else 0
        note += f"; blocks.{shown} in full, the others one line each (all=on shows every block, layer=N picks one)"
    if dropped:
        console.print(Text(f"{dropped} dropout steps not shown: dropout does nothing at inference (eval mode)",
                           style="dim"), highlight=False)
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
        console.print(Text(f"error: {result.problem}", style="bold red"), soft_wrap=True, highlight=False)
    elif result.switched:
        console.print(Text(f"now using {result.current}", style="green"), highlight=False)
    else:
        _dim(console, f"* current device: {result.current}; :device NAME switches")
    if getattr(result, "train_dtype", None) is not None and not getattr(result, "problem", None):
        why = (" (dtype=auto: bfloat16 where the bf16 column says yes)" if result.dtype == "auto"
               else f" (dtype={result.dtype})")
        _dim(console, f"training on {result.current} runs in {result.train_dtype}{why}")
    if getattr(result, "threads", None) is not None:
        _dim(console, f"CPU threads: {result.threads} ({result.threads_why}); :set threads=N fixes the count, "
                      "threads=0 is auto")


def _settings_table(title: str, values: dict) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, pad_edge=False, box=None)
    table.add_column("setting", style="cyan", no_wrap=True)
    table.add_column("value")
    for key, value in values.items():
        _add(table, key, _value(value))
    return table


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
                   "the model settings match no preset") + "; :set key=value or :set preset=NAME changes them")


@render.register(commands.SetResult)
def _(result, console: Console) -> None:
    if not result.changed:
        _dim(console, "nothing changed")
    for key, (old, new) in result.changed.items():
        console.print(Text(f"{key}: ", style="cyan") + Text(f"{_value(old)} -> {_value(new)}"), highlight=False)
    if result.rebuilt:
        console.print(Text("the architecture changed: the model was rebuilt, weights reset (step 0)", style="yellow"),
                      soft_wrap=True)
        _kept(console, getattr(result, "kept", None))
    if getattr(result, "preset", None):
        _dim(console, f"the model settings now match the preset {result.preset}")


def _kept(console: Console, kept: str | None) -> None:
    if kept:
        console.print(Text(f"the trained model was kept as checkpoint {kept}: :load {kept} brings it back",
                           style="green"), soft_wrap=True, highlight=False)


@render.register(commands.DataResult)
def _(result, console: Console) -> None:
    info = result.info
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("field", style="cyan", no_wrap=True)
    table.add_column("value")
    _add(table, "name", info.name)
    _add(table, "kind", info.kind)
    _add(table, "description", info.description)
    if info.kind == "corpus":
        _add(table, "characters", _int(info.chars))
    elif info.chars:
        _add(table, "characters", f"{info.chars} per example")
    _add(table, "vocabulary", f"{info.vocab_size} symbols")
    if info.train_tokens is not None and info.val_tokens is not None:
        total = info.train_tokens + info.val_tokens
        share = round(100 * info.train_tokens / total) if total else 0
        _add(table, "train/val", f"{info.train_tokens:,} / {info.val_tokens:,} tokens ({share}/{100 - share})")
    elif info.chars:
        _add(table, "train/val", "about 10% of the questions are held out for validation")
    else:
        _add(table, "train/val", "fresh random tokens in every batch")
    console.print(table)
    if result.recipe:
        console.print(Text(commands.recipe_line(info.name, result.recipe), style="cyan"), soft_wrap=True)
    if result.rebuilt:
        message = f"the model was rebuilt for a vocabulary of {info.vocab_size}: weights reset (step 0)"
        console.print(Text(message, style="yellow"), soft_wrap=True)
        _kept(console, getattr(result, "kept", None))
    elif result.changed:
        console.print(Text(f"data is now {info.name}", style="green"), highlight=False)


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
    for path, shape, count in result.rows:
        _add(table, path, _shape(shape), _int(count))
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
    table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, show_footer=True,
                  title=Text("parameters", style="bold"), title_justify="left", pad_edge=False)
    table.add_column("component", footer="total", no_wrap=True)
    table.add_column("kind", style="dim", footer="", overflow="fold")
    table.add_column("parameters", justify="right", footer=_int(ledger["n_params"]), no_wrap=True)
    table.add_column("share", justify="right", footer="100%", no_wrap=True)
    blocks: dict[int, list[dict]] = {}
    for row in ledger["rows"]:
        if row["block"] is not None:
            blocks.setdefault(row["block"], []).append(row)
    folded = False
    for row in ledger["rows"]:
        block = row["block"]
        if block is not None and block > 0:
            if not folded:
                rest = [r for b, rows in blocks.items() if b > 0 for r in rows]
                each = sum(r["params"] for r in blocks[1])
                last = max(blocks)
                name = "blocks.1" if last == 1 else f"blocks.1-{last}"
                _add(table, name, f"same as blocks.0, {_int(each)} each", _int(sum(r["params"] for r in rest)),
                     _pct(sum(r["params"] for r in rest) / total))
                folded = True
            continue
        name = row["path"] if block is None else "  " + row["path"].split(".", 2)[2]
        if block == 0 and row is blocks[0][0]:
            _add(table, Text("blocks.0", style="cyan"), "", _int(sum(r["params"] for r in blocks[0])),
                 _pct(sum(r["params"] for r in blocks[0]) / total))
        kind = row["kind"] + (f" (tied to {row['tied_to']})" if row["tied_to"] and not row["params"] else "")
        _add(table, name, kind, _int(row["params"]), _pct(row["params"] / total))
    console.print(table)
    B, T = ledger["batch_size"], ledger["seq_len"]
    costs = Table(show_header=False, box=None, pad_edge=False, title=Text("compute and memory", style="bold"),
                  title_justify="left")
    costs.add_column("what", style="cyan", no_wrap=True)
    costs.add_column("value", justify="right", no_wrap=True)
    costs.add_column("how", style="dim", overflow="fold")
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
        saving = (f"; {kv['n_heads']} heads would need {_bytes(kv['mha_bytes_per_token'])} "
                  f"({kv['n_heads'] // kv['kv_heads']}x)" if kv["kv_heads"] != kv["n_heads"] else "")
        _add(costs, "KV cache, sampling", _bytes(kv["window_bytes"]),
             f"{_bytes(kv['bytes_per_token'])} a token x {kv['window']}: K and V of {kv['kv_heads']} "
             f"key/value heads per layer{saving}")
    console.print(costs)
    _dim(console, "tied weights are counted once; :params all=on lists every tensor")


@render.register(commands.SaveResult)
def _(result, console: Console) -> None:
    what = "replaced checkpoint" if result.replaced else "saved checkpoint"
    text = Text(f"{what} {result.name}", style="green")
    text.append(f" (step {result.step:,}, {_bytes(result.size_bytes)}, {result.seconds:.2f} s)")
    console.print(text, soft_wrap=True, highlight=False)
    _dim(console, f"in {result.path}; :load {result.name} restores it")


@render.register(commands.LoadResult)
def _(result, console: Console) -> None:
    text = Text(f"loaded {result.name}", style="green")
    text.append(f": step {result.step:,}, data {result.data_spec}, {result.n_params:,} parameters")
    if result.val_loss is not None:
        text.append(f", val loss {result.val_loss:.4f}")
    console.print(text, soft_wrap=True, highlight=False)
    shape = ", ".join(f"{k}={_value(result.model_config[k])}" for k in
                      ("n_layers", "d_model", "n_heads", "d_ff", "max_seq_len") if k in result.model_config)
    if shape:
        _dim(console, f"model: {shape}")
    if getattr(result, "data_missing", None):
        console.print(Text(f"data: {result.data_missing}", style="yellow"), soft_wrap=True, highlight=False)
    if result.run_remaining > 0:
        console.print(Text(f"the run was stopped with {result.run_remaining:,} steps left: :train continues it",
                           style="yellow"), soft_wrap=True, highlight=False)
    if result.saved_at:
        _dim(console, f"saved {result.saved_at}, from {result.path}")


@render.register(commands.LsResult)
def _(result, console: Console) -> None:
    """A table when it fits the width, else one checkpoint per line. Names are never broken or cut
    (they are what :load takes); a broken checkpoint's reason goes on its own line below."""
    if not result.rows:
        _dim(console, f"no checkpoints in {result.directory} yet; :save NAME writes one")
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
        console.print(Text(result.directory, style="italic"), soft_wrap=True, highlight=False)
        for row, cells in zip(result.rows, rows):
            console.print(Text(cells[0], style="bold"), soft_wrap=True, highlight=False)
            detail = "unreadable" if row.error is not None else (
                f"step {cells[1]}, val loss {cells[2]}, data {cells[3]}, {cells[4]}, saved {cells[5]}")
            console.print(Text("  " + detail, style="red" if row.error is not None else ""), highlight=False)
    for row in result.rows:
        if row.error is not None:
            console.print(Text(f"{row.name}: ", style="bold red") + Text(row.error), soft_wrap=True, highlight=False)
    _dim(console, ":load NAME restores one; :save NAME writes one")


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

    def __rich__(self) -> Table:
        title = "val loss" + (f" (mean ± std over {self.seeds} seeds)" if self.seeds > 1 else "")
        table = Table(title=Text(title), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD)
        table.add_column("step", justify="right")
        for k, label in enumerate(self.labels):
            table.add_column(Text(f"{_MARKS[k % len(_MARKS)]} {label}", style=_SERIES_STYLES[k % len(_SERIES_STYLES)]),
                             justify="right", overflow="fold")
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
    facts.add_column("")
    for column in ("parameters", "tokens/s", "time", "differs from the first in"):
        facts.add_column(column, justify="left" if column.startswith("differs") else "right")
    for k, o in enumerate(result.outcomes):
        changes = ", ".join(f"{key}={_value(v)}" for key, v in o.changes.items()) or "-"
        _add(facts, Text(f"{_MARKS[k % len(_MARKS)]} {o.label}", style=_SERIES_STYLES[k % len(_SERIES_STYLES)]),
             _int(o.n_params), _rate(o.tokens_per_second), _seconds(o.seconds), changes)
    console.print(facts)
    series = {o.label: [(e.step, e.val_loss) for e in o.curve] for o in result.outcomes}
    console.print(curve_chart(series, width=min(console.width, 100)))
    if result.stopped:
        console.print(Text("stopped early: the curves end where Ctrl-C stopped them", style="yellow"))
    if result.verdict:
        console.print(Text(result.verdict, style="green"), soft_wrap=True, highlight=False)
    elif result.seeds == 1 and not result.stopped:
        _dim(console, f"one seed each on {result.data}: seeds=3 shows whether a gap is more than noise")


@render.register(commands.ExpertsResult)
def _(result, console: Console) -> None:
    n = len(result.load[0]) if result.load else 0
    table = Table(title=Text(f"share of routing choices per expert ({result.experts_per_token} per token); "
                             f"even would be {1 / n:.0%} each" if n else ""), title_justify="left",
                  header_style="bold", box=box.SIMPLE_HEAD)
    table.add_column("block", justify="right")
    for e in range(n):
        table.add_column(f"expert {e}", justify="right")
    for layer, row in zip(result.layers, result.load):
        cells = []
        for share in row:
            bar = "█" * round(share * n * 4)  # 4 blocks = an even share
            cells.append(Text(f"{share:5.1%} ") + Text(bar, style="cyan"))
        _add(table, str(layer), *cells)
    console.print(table)
    if result.aux_loss is not None:
        _dim(console, f"load-balancing loss {result.aux_loss:.3f} (1.0 = perfectly even; training adds it, weighted)")


@render.register(commands.AblateResult)
def _(result, console: Console) -> None:
    if not result.active:
        console.print(Text(f"nothing switched off: val loss {_num(result.val_loss_before)}", style="green"))
    else:
        delta = result.val_loss_after - result.val_loss_before
        console.print(Text("switched off: ", style="yellow") + Text(", ".join(result.active)), highlight=False)
        console.print(Text(f"val loss {_num(result.val_loss_before)} -> {_num(result.val_loss_after)} "
                           f"({delta:+.4f})", style="bold"), highlight=False)
    sample = Text("sample: ", style="dim") + model_text(result.prompt, console, "bold") + model_text(result.sample, console)
    console.print(sample, soft_wrap=True, highlight=False)
    if result.active:
        _dim(console, ":ablate off puts the model back (the weights never changed)")


# --- live progress -----------------------------------------------------------------------------
class QuietReporter(Reporter):
    """For --json: nothing on stdout while the command runs; notices go to the error console."""

    def __init__(self, err: Console):
        super().__init__()
        self.err = err

    def notice(self, text: str) -> None:
        self.err.print(text, markup=False, highlight=False, soft_wrap=True)


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

    # Ctrl-C --------------------------------------------------------------------------------------
    def should_stop(self) -> bool:
        if self.stop_requested and self.training and not self._announced:
            self._announced = True
            self.console.print(Text("stopping after this step...", style="yellow"), highlight=False)
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
        self._compare_total = len(labels) * seeds * steps
        self._progress = Progress(TextColumn("[bold]compare"), BarColumn(bar_width=None), MofNCompleteColumn(),
                                  TimeRemainingColumn(), console=self.console, expand=True)
        self._task = self._progress.add_task("compare", total=len(labels) * steps, completed=0)
        self._live = Live(Group(self._compare, self._progress), console=self.console, transient=True,
                          refresh_per_second=4)
        self._live.start()

    def on_compare_eval(self, evaluation) -> None:
        self._compare.add(evaluation)
        if self._live is not None:
            self._progress.update(self._task, completed=min(evaluation.step * len(self._compare.labels),
                                                          self._progress.tasks[0].total))
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
        if prompt:
            self.out.print(model_text(prompt, self.out, "bold"), end="", soft_wrap=True, highlight=False)
        self.out.print(model_text(text, self.out), end="", soft_wrap=True, highlight=False)

    def notice(self, text: str) -> None:
        self.console.print(Text(text, style="yellow"), soft_wrap=True, highlight=False)

    # end -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the live display (also after an error); safe to call twice."""
        if self._live is not None:
            self._live.stop()
            self._live = None

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
    console.print(Text(text, style="dim"), highlight=False)


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
    what = f"head {result.heads[0]}" if single else f"all {result.n_heads} heads"
    console.print(Text(f"attention, layer {result.layer}, {what}", style="bold"), highlight=False)
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
        _note(console, f"the first {result.dropped} characters of the prompt were beyond max_seq_len and not read")


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
    console.print(Text(f"next token after {result.prompt[-40:]!r}", style="bold"), highlight=False)
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
    console.print(Text(f"picked {visible(result.picked)!r} (id {result.picked_id}): probability "
                       f"{result.picked_prob:.3f}, rank {result.picked_rank} of {result.vocab_size}{shown}",
                       style="green"), highlight=False, soft_wrap=True)
    _note(console, f"{result.n_kept} of {result.vocab_size} tokens could be picked; seed {result.seed} "
                   f"(:gen with n=1 seed={result.seed} picks the same)")


def gen_probs(result, console: Console) -> None:
    """The generated text, each character coloured (or shaded beneath) by its probability when picked."""
    as_text = plain(console)
    probs = result.probs or []
    chars = list(result.text)
    if len(chars) != len(probs):  # not one character per token: show the text plainly
        console.print(model_text(result.prompt, console, "bold") + model_text(result.text, console), soft_wrap=True,
                      highlight=False)
        return
    if not as_text:
        text = model_text(result.prompt, console, "bold")
        for ch, p in zip(chars, probs):
            if ch == "\n":
                text.append_text(_cell(p, 1, False, "↵"))
                text.append("\n")
            else:
                text.append_text(_cell(p, len(terminal_safe(ch)), False, terminal_safe(ch)))
        console.print(text, soft_wrap=True, highlight=False)
    else:
        width = max(10, console.width)
        shown = [visible(c) for c in result.prompt] + [visible(c) for c in chars]
        shades = [" "] * len(result.prompt) + [shade(p) for p in probs]
        for at in range(0, len(shown), width):
            console.print(Text("".join(shown[at:at + width])), highlight=False, no_wrap=True, overflow="ignore")
            console.print(Text("".join(shades[at:at + width]), style="dim"), highlight=False,
                          no_wrap=True, overflow="ignore")
    console.print(_legend(1.0, as_text, "probability when picked"), highlight=False)


@render.register(commands.LensResult)
def _(result, console: Console) -> None:
    target = f"; the true next character is {visible(result.target)!r}" if result.target is not None else ""
    console.print(Text(f"logit lens at the last position of {result.prompt[-40:]!r}{target}", style="bold"),
                  highlight=False)
    _note(console, "each layer's residual stream read as if the model ended there: softmax(lm_head(ln_f(h)))")
    k = max((len(r.guesses) for r in result.rows), default=0)
    table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("after", no_wrap=True, style="cyan")
    for i in range(k):
        table.add_column(("best guess" if i == 0 else f"#{i + 1}"), no_wrap=True)
    with_target = result.target is not None
    if with_target:
        table.add_column("true: rank (p)", justify="right", no_wrap=True)
    for r in result.rows:
        cells = [r.layer]
        for ch, p in zip(r.guesses, r.probs):
            hit = with_target and ch == result.target
            cells.append(Text(f"{visible(ch)} {p:.2f}", style="bold green" if hit else ""))
        cells += [""] * (k - len(r.guesses))
        if with_target:
            cells.append("-" if r.target_rank is None else f"{r.target_rank} ({r.target_prob:.2f})")
        _add(table, *cells)
    console.print(table)
    _note(console, "the last row is the model's own prediction")


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
    console.print(Text(f"{title} by step", style="bold"), highlight=False)
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
    _note(console, f"{n} token{'s' if n != 1 else ''}, one per {result.kind}; ids index a vocabulary of "
                   f"{result.vocab_size}")


@render.register(commands.ReportResult)
def _(result, console: Console) -> None:
    console.print(Text(f"wrote {result.path}", style="green") +
                  Text(f" ({_bytes(result.size_bytes)}: {', '.join(result.sections)}; {result.seconds:.2f} s)"),
                  soft_wrap=True, highlight=False)
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
        console.print(Text(f":gen {verb} from {state}", style="green" if result.changed else ""),
                      soft_wrap=True, highlight=False)
        if result.mode == "off" and not result.changed:
            _dim(console, ":quantize int8 makes an int8 copy for sampling and measures it")
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
    console.print(Text(f":gen now samples from the int8 copy ({m.linear_layers} Linear layers int8, on the CPU); "
                       ":quantize off goes back; training or loading drops the copy", style="green"),
                  soft_wrap=True, highlight=False)
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
