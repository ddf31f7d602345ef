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

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from . import commands
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
    ("lr", "lr", "lr", _lr, False),
    ("tokens_per_second", "tokens/s", "tok/s", _rate, False),
    ("elapsed", "elapsed", "time", _seconds, True),
)


class LossTable:
    """The evaluations of a training run, one row each; rows can be added while it is on screen.

    On a narrow terminal it drops the lr and tokens/s columns (the summary line has the speed)
    and its borders, so the losses stay readable instead of being cut to "0.…".
    """

    def __init__(self, rows: list[dict] = (), with_accuracy: bool | None = None, narrow: bool = False):
        if with_accuracy is None:
            with_accuracy = any(r.get("accuracy") is not None for r in rows)
        self.columns = [c for c in _LOSS_COLUMNS if (c[0] != "accuracy" or with_accuracy) and (c[4] or not narrow)]
        self.table = Table(header_style="bold", box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow)
        for _, header, short, _, _ in self.columns:
            self.table.add_column(short if narrow else header, justify="right")
        for r in rows:
            self.add(r)

    def add(self, row: dict) -> None:
        _add(self.table, *(fmt(row.get(key)) for key, _, _, fmt, _ in self.columns))

    def __rich__(self) -> Table:
        return self.table


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
        console.print(LossTable(result.evals, narrow=console.width < NARROW))
    style = "yellow" if result.stopped else "green"
    console.print(Text(train_summary(result), style=style), soft_wrap=True, highlight=False)
    if getattr(result, "saved", None):
        _dim(console, f"saved checkpoint {result.saved} (:load {result.saved} restores it)")
    if getattr(result, "save_error", None):
        console.print(Text(f"warning: not saved: {result.save_error}", style="yellow"), soft_wrap=True,
                      highlight=False)


def gen_stats(result) -> str:
    rate = f"{result.tokens_per_second:,.0f} tokens/s" if result.tokens_per_second else "- tokens/s"
    text = f"{result.n_tokens} tokens in {result.seconds:.2f} s, {rate}, cache {'on' if result.cache else 'off'}"
    return text + (" (stopped)" if result.stopped else "")


VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}


def visible(text: str) -> str:
    """Whitespace as symbols (␣ ↵ ⇥), for text that would otherwise look like nothing."""
    return "".join(VISIBLE.get(ch, ch) for ch in text)


def gen_notes(console: Console, result) -> None:
    """What a reader needs to make sense of generated text: the default prompt, whitespace, no training."""
    if getattr(result, "default_prompt", False):
        _dim(console, f"no prompt given: started from {visible(result.prompt)!r}")
    if result.text and not result.text.strip():
        counts = ", ".join(f"{result.text.count(ch)} {name}" for ch, name in
                           ((" ", "spaces"), ("\n", "newlines"), ("\t", "tabs")) if ch in result.text)
        console.print(Text(f"only whitespace was generated ({counts}): {visible(result.text[:80])}", style="yellow"),
                      soft_wrap=True, highlight=False)
    if getattr(result, "untrained", False):
        _dim(console, "this model has not trained yet, so its text is random: :train first")
    _dim(console, gen_stats(result))


@render.register(commands.GenResult)
def _(result, console: Console) -> None:
    text = Text()
    text.append(result.prompt, style="bold")
    text.append(result.text)
    console.print(text, soft_wrap=True, highlight=False)
    gen_notes(console, result)


def _module_cell(path: str, kind: str, style: str = "") -> Text:
    return Text(path, style=style) + Text(f" {kind}", style="dim")


def _io(record_in, record_out) -> str:
    inputs = ", ".join(_shape(s) for s in record_in.input_shapes) or "-"
    return f"{inputs} -> {_shape(record_out.output_shape)}"


def _stacked(cells) -> Text:
    module, io, formula, params = cells
    text = module.copy()
    text.append("\n  " + io + (f"   {params} params" if params else ""))
    text.append("\n  ")
    text.append(formula if isinstance(formula, Text) else Text(formula, style="italic"))
    return text


@render.register(commands.ShapesResult)
def _(result, console: Console) -> None:
    """Every step of one forward pass in order; one block in full, the others one line each."""
    records = result.records
    shown = result.layer if result.layer is not None else 0
    narrow = console.width < NARROW
    table = Table(title=Text(f"shape trace of {result.prompt!r}"), header_style="bold", title_justify="left")
    if narrow:  # one step per three short lines instead of four squeezed columns
        table = Table(title=table.title, title_justify="left", box=None, show_header=False, pad_edge=False)
        table.add_column("step", overflow="fold")
    table.add_column("module", overflow="fold", ratio=3)
    table.add_column("input -> output", overflow="fold", ratio=3)
    table.add_column("formula", overflow="fold", ratio=4)
    table.add_column("params", justify="right", no_wrap=True)
    by_layer: dict[int, list] = {}
    for r in records:
        if r.layer is not None:
            by_layer.setdefault(r.layer, []).append(r)
    summarized = []
    for r in records:
        if r.layer is not None and not result.show_all and r.layer != shown:
            if r.layer not in summarized:
                summarized.append(r.layer)
                block = by_layer[r.layer]
                cells = (
                    _module_cell(f"blocks.{r.layer}", "TransformerBlock", "cyan"), _io(block[0], block[-1]),
                    Text(f"same {len(block)} steps as blocks.{shown}", style="dim"),
                    _int(sum(b.n_params for b in block)),
                )
                _add(table, _stacked(cells)) if narrow else _add(table, *cells)
            continue
        cells = (_module_cell(r.path, r.kind), _io(r, r), r.formula, _int(r.n_params) if r.n_params else "")
        _add(table, _stacked(cells)) if narrow else _add(table, *cells)
    console.print(table)
    total = sum(r.n_params for r in records)
    note = f"{len(records)} steps, {result.n_layers} layer{'s' if result.n_layers != 1 else ''}, {total:,} parameters"
    if summarized:
        note += f"; blocks.{shown} in full, the others one line each (all=on shows every block, layer=N picks one)"
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
    _dim(console, ":set key=value changes a setting")


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
    if result.rebuilt:
        message = f"the model was rebuilt for a vocabulary of {info.vocab_size}: weights reset (step 0)"
        console.print(Text(message, style="yellow"), soft_wrap=True)
        _kept(console, getattr(result, "kept", None))
    elif result.changed:
        console.print(Text(f"data is now {info.name}", style="green"), highlight=False)


@render.register(commands.ParamsResult)
def _(result, console: Console) -> None:
    table = Table(header_style="bold", show_footer=True)
    table.add_column("module", footer="total", overflow="fold")
    table.add_column("shape", footer="")
    table.add_column("parameters", justify="right", footer=_int(result.total))
    for path, shape, count in result.rows:
        _add(table, path, _shape(shape), _int(count))
    console.print(table)
    _dim(console, "the token embedding and lm_head share one matrix (weight tying); it is counted once")


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
                "elapsed": info.elapsed,
            }
            if self._table is None:
                self._table = LossTable([row], narrow=self.console.width < NARROW)
            else:
                self._table.add(row)
            self._refresh()

    # generation ----------------------------------------------------------------------------------
    def on_gen_start(self, prompt: str) -> None:
        self.gen_prompt = prompt  # shown in bold before the first token

    def on_token(self, text: str) -> None:
        if not self.stream:
            return
        if not self.streamed and self.gen_prompt:
            self.out.print(Text(self.gen_prompt, style="bold"), end="", soft_wrap=True, highlight=False)
        self.streamed = True
        self.out.print(Text(text), end="", soft_wrap=True, highlight=False)

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
