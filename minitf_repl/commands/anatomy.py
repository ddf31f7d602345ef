"""`:shapes` and `:params`: what the model is made of, step by step, and what it costs.

Both read the parts' own statements (core.model: each part's `steps()`, `symbols()` and
`activation_floats()`): the shape trace's formula and symbols for each step, the ledger's counts.
Nothing here decides by a module's name or kind, so a new variant shows without a change here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.fastpath_memory import FastPathMemory, fast_path_memory
from ..core.words import count, quoted_chars
from ..registry import Param
from ..render import fmt
from ..render.renderers import render
from ..render.tables import NARROW, add_row, fits
from ..render.words import note, say
from ..reporter import Reporter
from ..session import Session
from ..syntax import cmd
from .base import ablation_note, check_layer, command, switched_off, training_length, view_prompt

if TYPE_CHECKING:  # torch-bound; schema.py resolves the name for --json
    from ..core.trace import TraceRecord

FAMILY = "what the model is made of"  # the heading :help lists this module's commands under


# --- :shapes -------------------------------------------------------------------------------------
@dataclass
class ShapesResult:
    prompt: str  # the text traced (after truncation to max_seq_len)
    records: list[TraceRecord]  # one per module and probe, in execution order
    n_layers: int  # blocks in the model
    layer: int | None  # the block shown in full; None when show_all
    show_all: bool  # all=on: every block shown in full (layer is None)
    # What the letters of the formulas stand for: {symbol: (size, meaning)} (MiniTransformerLM.symbols),
    # the legend above the steps; not part of the --json output.
    symbols: dict = field(default_factory=dict, metadata={"view_only": True})
    # A part that ran on nothing (an expert no token was routed to) has no record, so the records' n_params may
    # fall short of these two.
    n_params: int = 0  # every parameter of the model, a tied one once
    block_params: list[int] = field(default_factory=list)  # each block's parameters, whether they ran or not
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran (same shapes)
    # each block has its FFN after attention, as the blocks built say (ffn=off: attention alone)
    ffn: bool = field(default=True, metadata={"view_only": True})
    # parts of a caller's own that hold parameters beside their children (core.trace.held_parameters): no step
    # records those, and they are not an expert that did not run
    held: list = field(default_factory=list, metadata={"view_only": True})
    # "path (Class)" of the parts of a caller's own whose steps state no formula (core.trace.unstated_parts)
    unstated: list = field(default_factory=list, metadata={"view_only": True})


# json_version 4: the records' symbols were renamed (h -> n_h, h_kv -> n_kv, d_h -> d_hid), and a reader keyed on them
@command("shapes", "Trace one forward pass: every step's shape, in the order it runs.", params=[
    Param("prompt", str, help="text to trace (default: a short sample of the data)", positional=True),
    Param("layer", int, help="the block to show in full (default 0)"),
    Param("all", bool, default=False, help="show every block in full"),
], json_version=4, guide="inside-views.md#every-step-and-its-shape-shapes")  # fmt: skip
def cmd_shapes(session: Session, args: dict, reporter: Reporter) -> ShapesResult:
    n_layers = session.model_config.n_layers
    layer = check_layer(session, args["layer"])
    prompt, ids, _ = view_prompt(session, args["prompt"], reporter)
    model = session.model

    import torch

    from ..core.trace import held_parameters, trace, unstated_parts

    records = trace(model, torch.tensor(ids, dtype=torch.long))
    show_all = bool(args["all"])
    return ShapesResult(prompt, records, n_layers, None if show_all else layer, show_all, model.symbols(1, len(ids)),
                        model.num_parameters(), model.block_parameters(), switched_off(session),
                        model.config.ffn, held_parameters(model), unstated_parts(model, records))


def symbolic(names) -> str:
    """`(B, n_h, T, d_k)`; a single axis as `(T,)`."""
    return "(" + ", ".join(names) + ("," if len(names) == 1 else "") + ")"


def _fits(names, shape, dims: dict[str, int]) -> bool:
    """Whether the symbols a part stated match this shape's sizes (an expert's rows, say, do not)."""
    return bool(names) and len(names) == len(shape) and all(dims.get(n) == size for n, size in zip(names, shape))


def shape_cell(record, dims: dict[str, int]) -> str:
    """`(B, T, d) -> (B, T, d_ff) = (1, 5, 64)`: the symbols its part states, then the output's numbers.

    Where the statement does not fit the shapes the step really had, or there is none, the numbers alone.
    """
    step = record.step
    numbers = fmt.shape(record.output_shape)
    if step is None or not _fits(step.shape, record.output_shape, dims):
        inputs = ", ".join(fmt.shape(s) for s in record.input_shapes)
        return f"{inputs} -> {numbers}" if inputs and inputs != numbers else numbers
    out = symbolic(step.shape)
    inp = None
    if record.input_shapes:
        stated = step.input if step.input is not None else step.shape
        first = record.input_shapes[0]
        inp = symbolic(stated) if _fits(stated, first, dims) else fmt.shape(first)
    head = out if inp in (None, out) else f"{inp} -> {out}"
    return f"{head} = {numbers}"


def trace_dims(records) -> dict[str, int]:
    """The size of each symbol, read from the steps whose stated symbols have their output's rank: the
    first step that names a symbol gives its size (every record is then checked against these, _fits)."""
    dims: dict[str, int] = {}
    for r in records:
        if r.step is not None and len(r.step.shape) == len(r.output_shape):
            for name, size in zip(r.step.shape, r.output_shape):
                dims.setdefault(name, size)
    return dims


def _in_block(records: list, layer: int) -> list[tuple]:
    """A block's steps as (path within the block, output shape): two blocks alike compare equal."""
    return [(r.path[len(f"blocks.{layer}") + 1:], tuple(r.output_shape)) for r in records]


def _trace_rows(result: ShapesResult):
    """([section heading, [(name, kind, shape, formula, params) or a folded-block line]], idle steps left out)."""
    dims = trace_dims(result.records)
    shown = result.layer if result.layer is not None else 0
    by_layer: dict[int, list] = {}  # each block's steps that are shown: dropout's, idle at inference, are a note
    for r in result.records:
        if r.layer is not None and not (r.step is not None and r.step.idle):
            by_layer.setdefault(r.layer, []).append(r)
    sections: list[tuple[Text, list]] = []
    idle = 0
    after_blocks = False
    for r in result.records:
        if r.layer is not None:
            after_blocks = True
            heading_name = f"blocks.{r.layer}"
            if sections and sections[-1][0].plain.startswith(heading_name + " "):
                pass
            elif not result.show_all and r.layer != shown:
                block, steps = by_layer[r.layer], len(by_layer.get(shown, []))
                heading = Text(f"blocks.{r.layer}", style="bold cyan") + Text(" TransformerBlock", style="dim")
                # A block's experts run on the tokens routed to them, so two blocks may run different steps, or the
                # same steps on other numbers of rows: "same" only where every step's shape is the same too
                mine, its = _in_block(block, r.layer), _in_block(by_layer.get(shown, []), shown)
                other = ("some on other experts (all=on shows them)" if [p for p, _ in mine] != [p for p, _ in its]
                         else "some of other shapes (its experts are routed other numbers of tokens; all=on shows "
                              "them)")
                alike = (f"same {count(len(block), 'step')} as blocks.{shown}" if mine == its else
                         f"{count(len(block), 'step')} as blocks.{shown}, {other}"
                         if len(block) == steps else f"{count(len(block), 'step')} (blocks.{shown} ran {steps})")
                params = (result.block_params[r.layer] if r.layer < len(result.block_params)
                          else sum(b.n_params for b in block))
                folded = (alike, _io(block[0], block[-1]), fmt.whole(params))
                sections.append((heading, [folded]))
                # its dropout steps are not shown either: the note counts them, so that every step is counted once
                idle += sum(1 for b in result.records if b.layer == r.layer and b.step is not None and b.step.idle)
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
        if r.step is not None and r.step.idle:  # identity at inference (dropout): folded into one note
            idle += 1
            continue
        sections[-1][1].append((name, r.kind, shape_cell(r, dims), r.formula,
                                fmt.whole(r.n_params) if r.n_params else ""))
    return sections, idle


def _io(record_in, record_out) -> str:
    inputs = ", ".join(fmt.shape(s) for s in record_in.input_shapes) or "-"
    return f"{inputs} -> {fmt.shape(record_out.output_shape)}"


@render.register(ShapesResult)
def render_shapes(result: ShapesResult, console: Console) -> None:
    """Every step of one forward pass in order, grouped by block; one block in full, the others one line each.

    Laid out by hand rather than as a Table, so that a shape is never broken mid-tuple: the formula
    gets its own column when the terminal is wide, its own line under the shape when not, and on a
    very narrow terminal each step takes three short lines.
    """
    sections, idle = _trace_rows(result)
    width = console.width
    steps = [s for _, rows in sections for s in rows if len(s) == 5]
    nw = max([2 + len(s[0]) for s in steps] + [10])
    sw = max([len(s[2]) for s in steps] + [5])
    pw = max([len(s[4]) for s in steps] + [6])
    fw = max([len(s[3]) for s in steps] + [7])
    one_line = nw + 2 + sw + 2 + pw + 2 + fw <= width
    two_lines = not one_line and nw + 2 + sw + 2 + pw <= width
    say(console, f"shape trace of {quoted_chars(result.prompt)}", "bold")
    legend = ", ".join(f"{symbol}={size} {meaning}" for symbol, (size, meaning) in result.symbols.items() if meaning)
    if legend:
        note(console, legend)
    # the letters of the stream, which the parts' formulas use without saying: x is the token embedding at the input
    # and the stream inside a block, x' the stream the block's second half reads (without it "x + FFN(LN(x))" read
    # as the block's input plus its FFN, attention left out), and H (Q = HW^Q) was nowhere said
    if result.ffn:
        note(console, "x = W_E[idx] is the token embedding and h the residual stream; in a block's steps x is the "
                      "stream the block reads, x' the stream after attention (hook_resid_mid), which the FFN's half "
                      "reads, H what attention's projections read, and inside FFN(x) x is what the FFN reads")
    else:  # ffn=off: no second half, and no FFN(x) to read inside
        note(console, "x = W_E[idx] is the token embedding and h the residual stream; in a block's steps x is the "
                      "stream the block reads, x' the stream after attention (hook_resid_mid), the block's output, "
                      f"and H what attention's projections read; ffn=off: no FFN in any block "
                      f"({cmd('set', ffn='on')} builds one after attention, a new model)")
    if one_line or two_lines:  # the columns' names: the counts on the right read as nothing but numbers
        header = "  step".ljust(nw) + "  " + "shape".ljust(sw) + "  " + "params".rjust(pw)
        console.print(Text(header + ("  formula" if one_line else ""), style="bold"), highlight=False, no_wrap=True,
                      overflow="ignore")
    for heading, rows in sections:
        console.print(heading, highlight=False)
        for row in rows:
            if len(row) == 3:  # a folded block
                line = Text(row[0], style="dim")
                if one_line or two_lines:
                    line.append(f"   {row[1]}   {row[2]} params", style="dim")
                say(console, line, indent=2, hang=2)
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
                line = Text(name, style="bold")
                line.append(f" {kind}", style="dim")
                if params:
                    line.append(f"  {params} params", style="dim")
                # a step's line that wraps goes on under its name, not at the margin of the section headings
                say(console, line, indent=2, hang=2)
                say(console, shape, indent=4)
                if formula:
                    say(console, formula, "italic dim", indent=4)
    total = result.n_params or sum(r.n_params for r in result.records)
    # "50 steps" beside a status bar's training step read as 50 training steps: these are the forward pass's
    summary = (f"{count(len(result.records), 'step')} of one forward pass, {count(result.n_layers, 'layer')}, "
               f"{count(total, 'parameter')}")
    unrun = _unrun_params(result)
    if unrun:  # an expert no token was routed to runs on nothing: without this its parameters vanish unsaid
        # every block's, the folded ones' too: "100,608 did not run (100,608 in blocks.0)" left out eleven blocks'
        full = {i: n for i, n in unrun.items() if result.show_all or i == (result.layer or 0)}
        where = [f"{fmt.whole(n)} in blocks.{i}" for i, n in full.items()]
        folded = {i: n for i, n in unrun.items() if i not in full}
        if len(folded) == 1:
            where += [f"{fmt.whole(n)} in blocks.{i}" for i, n in folded.items()]
        elif folded:
            where.append(f"{fmt.whole(sum(folded.values()))} in the {len(folded)} other blocks")
        note(console, f"{count(sum(unrun.values()), 'parameter')} did not run ({', '.join(where)}): experts no token "
                      "was routed to, so the trace has no step of theirs (the total counts them)")
    if result.held:  # a part's own parameter (a gate): it was called "experts no token was routed to", with no experts
        where = "; ".join(f"{h.path or 'the model'} ({h.kind}) holds {count(h.n_params, 'parameter')}"
                          for h in result.held[:3]) + (f"; {len(result.held) - 3} more parts too"
                                                       if len(result.held) > 3 else "")
        note(console, f"{where} of its own, beside its steps: the trace records steps, so no row shows them, whether "
                      "the forward reads them or not (the total counts them)")
    if result.unstated:  # a module of a caller's own: its class and shapes are shown, its formulas it does not say
        note(console, f"no formula for the steps of {', '.join(result.unstated)}: a part of a caller's own that "
                      "states no steps() (core.model's parts do), so its rows show the shapes the pass had")
    if any(len(r) == 3 for _, rows in sections for r in rows):
        shown = result.layer if result.layer is not None else 0
        summary += f"; blocks.{shown} in full, the others one line each (all=on shows every block, layer=N picks one)"
    if idle:
        note(console, f"{count(idle, 'dropout step')} not shown: dropout does nothing at inference (eval mode)")
    # the probes' names are the model's own, unexplained beside its parts' (attn.hook_q, hook_resid_mid)
    note(console, "a step is named by its module's path in the model; a hook_ step is a probe, an identity that "
                  "computes nothing and has no parameters, there so that the inside views can read the tensor at that "
                  "point: its formula says what that tensor is (hook_resid_mid: the stream after attention's add)")
    note(console, summary)
    ablation_note(console, result.ablations, "every step above still runs, with the same shapes: a switched-off "
                                             "part's output is replaced, not its shape")


def _unrun_params(result: ShapesResult) -> dict[int, int]:
    """Per block: its parameters that no step of the trace ran (an expert no token went to)."""
    ran: dict[int, int] = {}
    for r in result.records:
        if r.layer is not None:
            ran[r.layer] = ran.get(r.layer, 0) + r.n_params
    for h in result.held:  # a part's own parameters have no step to run them: said apart, not as unrun
        if h.layer is not None:
            ran[h.layer] = ran.get(h.layer, 0) + h.n_params
    return {i: n - ran.get(i, 0) for i, n in enumerate(result.block_params) if n > ran.get(i, 0)}


# --- :params -------------------------------------------------------------------------------------
class KVCacheSize(TypedDict):
    """What :params says about the KV cache (a dict: the renderer reads it by key)."""

    bytes_per_token: int  # K and V of every layer for one token, float32
    kv_heads: int  # key/value heads kept per layer (fewer than n_heads with grouped or multi-query attention)
    n_heads: int  # query heads per layer: mha_bytes_per_token keeps one key/value head for each
    window_bytes: int  # the cache for a full window of max_seq_len tokens
    window: int  # max_seq_len
    mha_bytes_per_token: int  # what the cache would take with one key/value head per query head
    # why sampling keeps no cache, so that the sizes above are what it would take: "cache=off", "causal=off" (no
    # mask in a model of two or more blocks: :gen recomputes the window every step), or "ablate mask" (the mask
    # switched off by `:ablate mask`, likewise); None: it keeps one
    unused: str | None


@dataclass
class ParamsResult:
    rows: list[tuple[str, tuple[int, ...], int]]  # [parameter path, shape, count]; the tied embedding/head matrix once
    total: int  # every parameter of the model, the tied matrix once (the rows' counts summed)
    # core.ledger.Ledger.to_dict(): components, FLOPs, memory; shown unless show_all
    ledger: dict | None = field(default=None, metadata={"json": "Ledger | None"})
    show_all: bool = False  # all=on: the per-tensor list instead of the ledger
    kv_cache: KVCacheSize | None = None  # the KV cache for sampling: bytes per token, heads kept, and the full-window size
    # whose training rows the ledger counts (ledger.seq_len)
    data: str = field(default="", metadata={"view_only": True})
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate now
    # what training's fast path keeps for backward against the ledger's activations (FastPathMemory); None: not said
    fast_path: FastPathMemory | None = field(default=None, metadata={"view_only": True})
    # "path (Class)" of the parts of a caller's own whose memory for backward is taken on trust (its guessed_parts())
    guessed: list = field(default_factory=list, metadata={"view_only": True})


@command("params", "What the model costs: parameters per component, FLOPs and memory (all=on: every tensor).",
         params=[Param("all", bool, default=False, help="list every parameter tensor instead")],
         json_version=6, topics=("flops", "mfu"))  # fmt: skip
def cmd_params(session: Session, args: dict, reporter: Reporter) -> ParamsResult:
    from ..core.generate import cache_exact
    from ..core.ledger import cost_ledger
    from ..core.sizes import kv_cache_bytes_per_token

    model = session.model
    rows = [(name, tuple(p.shape), p.numel()) for name, p in model.named_parameters()]
    ledger = cost_ledger(model, batch_size=session.train_config.batch_size, seq_len=training_length(session),
                         optimizer=session.train_config.optimizer, dtype=session.train_config.dtype).to_dict()
    config = model.config
    per_token = kv_cache_bytes_per_token(config)
    kv_cache = {"bytes_per_token": per_token, "kv_heads": config.kv_heads, "n_heads": config.n_heads,
                "window_bytes": per_token * config.max_seq_len, "window": config.max_seq_len,
                "mha_bytes_per_token": kv_cache_bytes_per_token(config.replace(n_kv_heads=None)),
                "unused": ("cache=off" if not session.gen_config.cache else None if cache_exact(model) else
                           "causal=off" if not config.causal else "ablate mask")}
    return ParamsResult(rows, model.num_parameters(), ledger, bool(args["all"]), kv_cache, data=session.data_spec,
                        ablations=switched_off(session), fast_path=fast_path_memory(model, ledger),
                        guessed=model.guessed_parts())


# A switched-off part still holds its weights and, but for a skipped block, computes (its output zeroed): the
# counts are the whole model's (no word of :ablate was said beside them)
ABLATED_COSTS = "the parameters and costs above are the whole model's: the parts keep their weights"


@render.register(ParamsResult)
def render_params(result: ParamsResult, console: Console) -> None:
    if result.ledger is not None and not result.show_all:
        render_ledger(result.ledger, console, result.kv_cache, result.data, result.fast_path)
        if result.guessed:  # a module set by hand that states nothing: its parameters are counted, its memory is not
            note(console, f"the activations count a guess for {', '.join(result.guessed)}: a part of a caller's own "
                          "that states not what it keeps for backward (a feed-forward part is taken as a two-matrix "
                          "FFN of width d_ff, a norm as its output; activation_floats(), or a norm's NormPart base, "
                          "says it)")
        ablation_note(console, result.ablations, ABLATED_COSTS)
        return
    table = Table(header_style="bold", show_footer=True)
    table.add_column("module", footer="total", no_wrap=True)
    table.add_column("shape", footer="")
    table.add_column("parameters", justify="right", footer=fmt.whole(result.total))
    for path, shape, n in result.rows:
        add_row(table, path, fmt.shape(shape), fmt.whole(n))
    if fits(console, table):
        console.print(table)
    else:  # a name is too long for the line beside its shape and count: each module's name over its tensors
        _tensors_by_module(result, console)
    if _tied(result.ledger):  # tie_embeddings off (llama, modern): lm_head has its own matrix, listed above
        note(console, "the token embedding and lm_head share one matrix (weight tying); it is counted once")
    ablation_note(console, result.ablations, ABLATED_COSTS)


def _tensors_by_module(result: ParamsResult, console: Console) -> None:
    """`:params all=on` where a tensor's full name, shape and count do not fit a line (40 columns, an expert's
    matrices): each module's name on a line of its own, its tensors (weight, bias) under it."""
    modules: dict[str, list[tuple[str, str, str]]] = {}
    for path, shape, n in result.rows:
        module, _, leaf = path.rpartition(".")
        modules.setdefault(module, []).append((leaf, fmt.shape(shape), fmt.whole(n)))
    leaves = [row for rows in modules.values() for row in rows]
    leaf = max(len(row[0]) for row in leaves)
    shape = max(len("shape"), *(len(row[1]) for row in leaves))
    count_width = max(len("parameters"), len(fmt.whole(result.total)), *(len(row[2]) for row in leaves))
    head = max(leaf + 4, len("module") + 2)  # where the shapes start

    def line(a: str, b: str, c: str) -> None:
        console.print(Text(f"  {a:<{head - 2}}{b:<{shape}}  {c:>{count_width}}"), crop=False)

    console.print(Text(f"{'module':<{head}}{'shape':<{shape}}  {'parameters':>{count_width}}", style="bold"),
                  crop=False)
    for module, rows in modules.items():
        say(console, Text(module, style="cyan"))
        for row in rows:
            line(*row)
    console.print(Text(f"{'total':<{head + shape + 2}}{fmt.whole(result.total):>{count_width}}", style="bold"),
                  crop=False)


def _tied(ledger: dict | None) -> bool:
    """Whether the model shares a weight between two components (the output head tied to the token embedding)."""
    return ledger is not None and any(row["tied_to"] for row in ledger["rows"])


def _ledger_rows(ledger: dict) -> list[tuple]:
    """(component, kind, parameters, share) per row: blocks.0's children in full, the later blocks folded."""
    total = ledger["n_params"] or 1
    blocks: dict[int, list[dict]] = {}
    for row in ledger["rows"]:
        if row["block"] is not None:
            blocks.setdefault(row["block"], []).append(row)
    rows = []
    folded = False
    for row in ledger["rows"]:
        block = row["block"]
        if block is not None and block > 0:
            if not folded:
                rest = [r for b, rows_ in blocks.items() if b > 0 for r in rows_]
                each = sum(r["params"] for r in blocks[1])
                last = max(blocks)
                name = "blocks.1" if last == 1 else f"blocks.1-{last}"
                rows.append((name, f"same as blocks.0, {fmt.whole(each)} each", fmt.whole(sum(r["params"] for r in rest)),
                             fmt.pct(sum(r["params"] for r in rest) / total)))
                folded = True
            continue
        name = row["path"] if block is None else "  " + row["path"].split(".", 2)[2]
        if block == 0 and row is blocks[0][0]:
            rows.append((Text("blocks.0", style="cyan"), "", fmt.whole(sum(r["params"] for r in blocks[0])),
                         fmt.pct(sum(r["params"] for r in blocks[0]) / total)))
        kind = row["kind"] + (f" (tied to {row['tied_to']})" if row["tied_to"] and not row["params"] else "")
        rows.append((name, kind, fmt.whole(row["params"]), fmt.pct(row["params"] / total)))
    return rows


def _fast_path_words(fast_path: FastPathMemory | None, ledger: dict) -> str:
    """What training's fast path keeps against the ledger's activations, as said in their "how" ("" for nothing)."""
    if fast_path is None:
        return ""
    less = fast_path.less  # at the batch and T the activations are counted at, said before it
    share = f" ({fmt.share(less / ledger['activation_bytes'])})" if less > 0 and ledger["activation_bytes"] else ""
    amount = f"{fmt.size(abs(less))}{share} {'less' if less > 0 else 'more'}"
    if fast_path.maps_kept:
        return (f"with dropout on a CPU training's fast path keeps the (T, T) maps too, torch's fused kernel falling "
                f"back to the explicit formula: {amount}; ")
    # its own copies are said beside the maps: where they outweigh them (a small batch) the sum reads "more"
    own = "a copy of [W_q; W_k; W_v] a layer" + (" and the unrotated q and k" if fast_path.unrotated else "")
    if fast_path.maps_left:
        # the maps grow with T^2 and the copy does not: a saving grows with T, and "more" turns to less at a longer T
        longer = "far less at long T" if less > 0 else "less at a longer T"
        return f"training's fast path keeps no (T, T) maps but {own}: {amount}, {longer}; "
    return f"training's fast path keeps {own}: {amount}; "  # attention=sdpa (or T=1): no map on either path


HOW_WIDTH = 30  # the narrowest the ledger's "how" column is drawn: narrower, each row's how goes on a line of its own


def render_ledger(ledger: dict, console: Console, kv: dict | None = None, data: str = "",
                  fast_path: FastPathMemory | None = None) -> None:
    """core.ledger's numbers: parameters per component (later blocks folded), then compute and memory; `fast_path`:
    what training's fast path keeps against the activations counted (core.fastpath_memory)."""
    rows = _ledger_rows(ledger)

    def parameters(with_kind: bool, with_share: bool, cut_names: bool = False) -> Table:
        table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, show_footer=True,
                      title=Text("parameters", style="bold"), title_justify="left", pad_edge=False)
        # cut_names: the narrowest form (20 columns), where the names give way ("token_embe…") so that no count is
        # cut: Rich squeezed both columns, and the total read "803,…"
        table.add_column("component", footer="total", no_wrap=not cut_names, overflow="ellipsis")
        if with_kind:
            table.add_column("kind", style="dim", footer="")
        table.add_column("params" if cut_names else "parameters", justify="right", footer=fmt.whole(ledger["n_params"]),
                         no_wrap=True, min_width=len(fmt.whole(ledger["n_params"])) if cut_names else None)
        if with_share:
            table.add_column("share", justify="right", footer="100%", no_wrap=True)
        for name, kind, count_, share in rows:
            if not with_kind and "(tied to" in str(kind):  # the kind column said it: "lm_head (tied)" says it here
                name = f"{name} (tied)"
            add_row(table, name, *([kind] if with_kind else []), count_, *([share] if with_share else []))
        return table

    # the share goes first (it follows from the counts), then the kind (the class name; a tied head is marked by name)
    for with_kind, with_share in ((True, True), (True, False), (False, True), (False, False)):
        table = parameters(with_kind, with_share)
        if fits(console, table):
            break
    else:
        table = parameters(False, False, cut_names=True)
    console.print(table)
    B, T = ledger["batch_size"], ledger["seq_len"]
    lines: list[tuple[str, str, str]] = []  # what, how much, how it is counted
    add = lines.append
    add(("forward, per token", fmt.flops(ledger["forward_flops_per_token"]),
         f"matmuls: {fmt.flops(ledger['linear_flops_per_token'])} in Linear layers + "
         f"{fmt.flops(ledger['attention_flops_per_token'])} in QK^T and AV at T={T}"))
    # the rule's N said, and what it leaves out: "6N rule: 5.01 GFLOP" took N as every parameter, the position table
    # too, which a token only looks up (a mixture of experts: also the experts a token is not routed to). Said as what
    # is taken away, not as what "a token's matmuls use": N keeps the norms' gains and the biases, which no product
    # multiplies by
    n, total, lookups = ledger["six_n_params"], ledger["n_params"], ledger["lookup_params"]
    left_out = ([f"the {fmt.whole(lookups)} a token only looks up"] if lookups else []) + \
        ([f"the experts {'it' if lookups else 'a token'} is not routed to"] if total - lookups > n else [])
    which = (f", N = {fmt.whole(n)}: the {fmt.whole(total)} parameters less " + " and ".join(left_out)
             if left_out else f", N = all {fmt.whole(n)} parameters: none is only looked up")
    add(("training, per step", fmt.flops(ledger["training_flops_per_step"]),
         f"3 x forward x {B}x{T} tokens (6N rule{which}: {fmt.flops(ledger['six_n_flops_per_step'])})"))
    if ledger["optimizer_flops_per_step"]:  # Muon: Newton-Schulz's products on each block matrix, every step
        matrices = ledger["muon_matrices"]
        add((f"{ledger['optimizer_label'].split()[0]}, per step", fmt.flops(ledger["optimizer_flops_per_step"]),
             f"Newton-Schulz's products on each of the blocks' {matrices} matrices, whatever the batch, as the "
             f"dtype runs them (in float32 a wide matrix's go through its smaller Gram matrix: fewer FLOPs)"))
    add(("weights", fmt.size(ledger["weight_bytes"]), ""))
    add(("gradients", fmt.size(ledger["grad_bytes"]), "one per trainable parameter"))
    add((f"{ledger['optimizer_label']} state", fmt.size(ledger["optimizer_bytes"]), ledger["optimizer_state"]))
    # The ledger counts the readable forward in float32 (tested within 10%); measured for the default
    # model at batch 16: the fast path keeps 34.3 MiB, under bfloat16 autocast 25.8 MiB, against 37.9.
    # the fast path keeps no (T, T) map: "about a tenth less" of a 16,384 window read 16.2 GiB where it kept 1.6, and
    # "a tenth less at T=64" was said of a window of 1 (none less) too; and "3.9 MiB less" with dropout, where it kept
    # 0.7 MiB more, and at batch 2 (0.2 MiB more): the sum of what it keeps and does not, at this batch and T
    add(("activations", fmt.size(ledger["activation_bytes"]),
         f"kept for backward at batch {B} x {T} by the readable forward in float32 "
         f"({_fast_path_words(fast_path, ledger)}bfloat16 a third less)"))
    add(("training total", fmt.size(ledger["total_bytes"]), "the four above"))
    if kv:
        saving = (f"; {count(kv['n_heads'], 'head')} would need {fmt.size(kv['mha_bytes_per_token'])} "
                  f"({kv['n_heads'] // kv['kv_heads']}x)" if kv["kv_heads"] != kv["n_heads"] else "")
        size = (f"{fmt.size(kv['bytes_per_token'])} a token x {kv['window']}: K and V of "
                f"{count(kv['kv_heads'], 'key/value head')} per layer{saving}")
        # sampling without the cache (cache=off; no mask in two or more blocks, where :gen recomputes the window
        # every step) keeps none: the size is what it would take
        why = {"cache=off": f"cache=off: :gen recomputes the window every step ({cmd('set', cache=True)} keeps one)",
               "causal=off": "causal=off: a position's k and v change as later tokens come, so :gen recomputes the "
                             "window every step",
               "ablate mask": f"{cmd('ablate', 'mask')} for now: a position's k and v change as later tokens come, so "
                              ":gen recomputes the window every step"}.get(kv.get("unused"))
        add(("KV cache, sampling", "none" if why else fmt.size(kv["window_bytes"]),
             f"{why}; it would take {fmt.size(kv['window_bytes'])}, {size}" if why else size))
    costs = Table(show_header=False, box=None, pad_edge=False, title=Text("compute and memory", style="bold"),
                  title_justify="left")
    costs.add_column("what", style="cyan", no_wrap=True)
    costs.add_column("value", justify="right", no_wrap=True)
    costs.add_column("how", style="dim")
    for what, value, how in lines:
        add_row(costs, what, value, how)
    what_width = max(len(what) for what, _, _ in lines)
    value_width = max(len(value) for _, value, _ in lines)
    # Where "how" would stand a few words a line (40 columns: one), each line's how goes under it instead.
    if console.width - what_width - value_width - 4 >= HOW_WIDTH:
        console.print(costs)
    else:
        say(console, "compute and memory", "bold")
        for what, value, how in lines:
            say(console, Text(f"{what:<{what_width}}", style="cyan") + Text(f"  {value:>{value_width}}"))
            if how:
                say(console, how, "dim", indent=2)
    if kv and T < kv["window"]:  # a task's rows: the question and its answer, not the window
        note(console, f"a training row of {data or 'this data'} is {T} tokens, the window {kv['window']}: a step's "
                      f"FLOPs and activations are counted at T={T}, the KV cache at the window")
    tied = "tied weights are counted once; " if _tied(ledger) else ""
    note(console, f"{tied}{cmd('params', all=True)} lists every tensor")
