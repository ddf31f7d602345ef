"""`:report PATH.html`: one self-contained HTML page of a session (a UI module, beside render/).

The page needs nothing but itself: no scripts, no fonts, no network. The loss chart and the
attention maps are inline SVG, the colours a fixed sequential scale (the one the terminal heatmaps
use), every piece of text escaped. The command (commands/inside.py, cmd_report) gathers the numbers
into a `ReportData`; `build_report` only formats them, and `write_report` writes the page: checked
first (`check_report_path`, before any work), then replaced whole or not at all.
"""

from __future__ import annotations

import html
import itertools
import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .core.errors import UserError
from .core.paths import cut_middle, expand, gone_folder
from .core.words import count
from .palette import SCALE, heads_tell_apart, quoted, scale_hex, terminal_safe
from .palette import on_page as visible  # the page is UTF-8: no escapes for an ASCII terminal's sake
from .registry import clip
from .render import fmt
from .render.chart import axis_labels, uniform_label, uniform_loss
from .render.heatmap import reads_future
from .render.scatter import asked_ids
from .render.watch import NO_ROLE, copying, ffn_gradient, frame_input, frame_subject, frame_when, has_ffn, head_cell
from .syntax import cmd


@dataclass
class ReportData:
    title: str
    config: dict  # {"model": {...}, "train": {...}, "gen": {...}, "data": "...", "tokenizer": "char|bpe:N"}
    series: list  # commands.PlotSeries: train and val loss (empty before training)
    vocab_size: int | None
    prompt: str  # the text the attention maps read
    layers: list[int]
    maps: list  # [layer][head][query][key]
    samples: list[str] = field(default_factory=list)
    sample_grades: list = field(default_factory=list)  # a task's: each sample's answer, right or wrong (as :gen says)
    samples_about: str = ""  # how the samples were made: their start, seeds, length and sampling settings
    left_out: list = field(default_factory=list)  # (section, why) of each section this model cannot have
    frames: list = field(default_factory=list)  # core.watch.WatchFrame: what `:train watch=` saw, in order
    scored: object = None  # commands.ScoreResult: the sample text under teacher forcing (`:score`)
    context: object = None  # core.context.PositionLosses: the val loss at each position of the window (`:context`)
    context_series: list = field(default_factory=list)  # commands.PlotSeries: its curves on :context's log scale
    heads: object = None  # commands.HeadsResult: every head's roles on repeated random tokens (`:heads`)
    tokens: list[str] = field(default_factory=list)  # the prompt as the maps read it, a token each (none: characters)
    vocab: list[str] = field(default_factory=list)  # every token by id, for the embedding map
    embedding: object = None  # core.inside.EmbeddingMap: W_E's rows on their two main directions (`:embed map=on`)
    counters: list = field(default_factory=list)  # commands.PlotLevel: the counters the loss chart draws (`:ngram`)
    ablations: list[str] = field(default_factory=list)  # what `:ablate` switched off: every view below is that model's
    quantized: bool = False  # `:quantize int8` is on: :gen samples its int8 copy, the page the float model
    causal: bool = True  # the model masks the future now; False (causal=off, :ablate mask): each position reads it
    # the step after which the data in use came in, where the loss chart has steps before it (a switch to data of
    # the same vocabulary kept the model): the curves before it are of the data before, as :plot says
    data_from: int | None = None
    weights_from: str | None = None  # "hf:PATH": weights trained elsewhere, with no history here (not untrained)
    step: int | None = None  # the model's step: frames that end before it are of an earlier state, and say so
    # the numbers the status bar, :ls and :load give, which the chart alone did not: the last val loss on this data
    # (and the step it was measured at), the last step's train loss, and the parameters (a tied matrix once)
    val_loss: float | None = None
    val_step: int | None = None
    val_bpc: float | None = None  # that val loss in bits per character (text data): what compares across tokenizers
    accuracy: float | None = None  # a task's share of held-out questions answered right, at that evaluation
    train_loss: float | None = None
    n_params: int | None = None
    # where its numbers were made: the dtype the latest training step ran in (dtype=auto is bfloat16 on a machine with
    # bfloat16 units, float32 elsewhere) and the machine, so that a page compared with another's says why they differ
    machine: str = ""
    text_given: bool = False  # `:report text=`: the maps read a text given, not a sample of the data
    # no text given and the data not here (VocabOnly): the maps read a stand-in made of the vocabulary's characters
    stand_in: bool = False
    dropped: int = 0  # the tokens cut from the front of that text, beyond the window the maps read
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    window: int | None = None  # max_seq_len: the most tokens the maps read


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
table.config td { padding: 0 1em 0 0; font-family: monospace; }
pre.sample { background: #f4f4f4; padding: .6em; white-space: pre-wrap; }
.maps { display: grid; gap: 1em; }
figure { margin: 0; } figcaption { font-size: .85em; text-align: center; }
svg { width: 100%; height: auto; display: block; }
svg.embed { max-width: 840px; margin: 0 auto; }
div.tf { font-family: monospace; line-height: 1.1; }
span.tfcell { display: inline-block; text-align: center; margin: 0 1px .5em 0; vertical-align: top; }
span.tf { display: block; font-size: 1.2em; padding: 0 1px; }
span.tfp { display: block; font-size: .8em; color: #333; } span.tfp.given { color: #888; }
"""
# The figures' labels, in the picture's own units: every figure is drawn as wide as the page or its column (the CSS's
# svg rule; its width and height attributes are the size it falls back to), so that on a projector its text grows with
# it; at 10 and 11 units, in a figure of a fixed 640 pixels, a chart's text could not be read across a classroom
CHART_TEXT = 13  # the axes' numbers and names
CHART_NOTE = 12  # the uniform guess's line and a counter's, written on the chart
CHART_LEGEND = 14  # the curves' names, above the frame


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _text(text: str) -> str:
    """Sampled text for the page: escaped, and its control and format characters written as their escapes
    (palette.terminal_safe), as the terminal shows them. Raw, a sampled ESC, BEL or form feed is a character HTML
    does not allow (the browser drew nothing, so the sample lost it) and a bidirectional override reordered the
    rest of the sample."""
    return _esc(terminal_safe(text))


def _text_width(text: str, size: float) -> float:
    """About how wide a line of text draws in a sans-serif font of `size` px: 0.6 em a character (a digit is about
    0.55 em), what the chart's labels are laid out by, so that none passes the picture's edge or lies over another."""
    return 0.6 * size * len(text)


def _clear(box: tuple, taken: list[tuple]) -> bool:
    return all(box[2] <= b[0] or b[2] <= box[0] or box[3] <= b[1] or b[3] <= box[1] for b in taken)


def loss_chart_svg(series, vocab_size: int | None = None, width: int = 640, height: int = 280,
                   counters: list = (), x_label: str = "step", x_ends: tuple[str, str] | None = None,
                   svg_id: str = "loss-chart") -> str:
    """Train (solid) and validation (dashed) loss against the step, as an inline SVG; with `counters`
    (commands.PlotLevel, after `:ngram`), each counter's val loss as a dotted line. `x_label` and `x_ends`
    (what the axis's two ends say; default the first and last step) for another x axis: the position."""
    points = [(s, v) for one in series for s, v in zip(one.steps, one.values) if math.isfinite(v)]
    if not points:
        return '<p>No training yet.</p>'
    right, top, bottom = 16, 28, 40  # the legend's row above the frame: inside it, it lay over where a curve starts
    x0, x1 = min(s for s, _ in points), max(s for s, _ in points)
    values = [v for _, v in points] + [c.val_loss for c in counters if math.isfinite(c.val_loss)]
    y0, y1 = min(values), max(values)
    baseline = uniform_loss(vocab_size)
    if baseline is not None:  # below every loss too (a run blown up past a uniform guess): inside the frame
        y0, y1 = min(y0, baseline), max(y1, baseline)
    first, last = x0, x1
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y1 = y0 + 1
    # the terminal charts' labels: 3 significant digits, more where 3 would write two alike (0.171, 0.171, 0.172);
    # the frame starts right of the longest (a flat loss read to 7 digits, 0.0001235, began left of the picture)
    y_labels = axis_labels(y0, y1)
    # and clear of the axis's own name, turned upright at x = 13 (it reaches x = 16)
    left = max(60, math.ceil(max(_text_width(said, CHART_TEXT) for said in y_labels)) + 26)

    def x(s):
        return left + (s - x0) / (x1 - x0) * (width - left - right)

    def y(v):
        return top + (y1 - v) / (y1 - y0) * (height - top - bottom)

    def box(sx, sy, wide):  # a note's text at (sx, sy): from its ascent to its descent
        return sx, sy - 0.8 * CHART_NOTE, sx + wide, sy + 0.2 * CHART_NOTE

    parts = [f'<svg id="{svg_id}" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="loss chart">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
             'fill="#fafafa" stroke="#999"/>']
    for v, said in zip((y1, (y0 + y1) / 2, y0), y_labels):
        parts.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" font-size="{CHART_TEXT}" text-anchor="end">'
                     f'{said}</text>')
    ends = list(zip((x0, x1), x_ends or (first, last)))
    for s, said in ends if first != last else ends[:1]:  # one step: one label, not a step after it that never ran
        # centred under its end of the axis, or ending at the picture's edge where that would pass it (step 1000000)
        at, anchor = (f"{x(s):.1f}", "middle") if x(s) + _text_width(str(said), CHART_TEXT) / 2 <= width - 2 \
            else (f"{width - 2}", "end")
        parts.append(f'<text x="{at}" y="{height - 20}" font-size="{CHART_TEXT}" text-anchor="{anchor}">'
                     f'{_esc(said)}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 4}" font-size="{CHART_TEXT}" '
                 f'text-anchor="middle">{_esc(x_label)}</text>')
    parts.append(f'<text x="13" y="{(top + height - bottom) / 2:.1f}" font-size="{CHART_TEXT}" text-anchor="middle" '
                 f'transform="rotate(-90 13 {(top + height - bottom) / 2:.1f})">loss (nats)</text>')  # as :plot says
    if baseline is not None:
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(baseline):.1f}" y2="{y(baseline):.1f}" '
                     f'stroke="#bbb" stroke-dasharray="2 3"/><text x="{width - right - 4}" y="{y(baseline) - 4:.1f}" '
                     f'font-size="{CHART_NOTE}" text-anchor="end">{_esc(uniform_label(vocab_size))}</text>')
    styles = {"train": ('#1f77b4', ''), "val": ('#d62728', ' stroke-dasharray="6 3"'), "model": ('#1f77b4', ''),
              "counter": ('#d08c00', ' stroke-dasharray="1 3"')}
    taken = []  # the boxes of the legend's and the counters' labels (x0, y0, x1, y1), which no other may cover
    if baseline is not None:
        said = uniform_label(vocab_size)
        taken.append((width - right - 4 - _text_width(said, CHART_NOTE), y(baseline) - 4 - 0.8 * CHART_NOTE,
                      width - right - 4, y(baseline) - 4 + 0.2 * CHART_NOTE))
    at = left + 10
    for one in series:
        # "bigram counter", "counter (bigram to 6-gram)": a counter's style
        words = one.name.split()
        colour, dash = styles.get("counter" if "counter" in words else words[-1] if words else "", ('#555', ''))
        drawn = [(x(s), y(v)) for s, v in zip(one.steps, one.values) if math.isfinite(v)]
        pts = " ".join(f"{px:.1f},{py:.1f}" for px, py in drawn)
        parts.append(f'<polyline class="series" points="{pts}" fill="none" stroke="{colour}" stroke-width="1.6"'
                     f'{dash}/>')
        if len(drawn) == 1:  # a line of one point draws nothing (a run of one step, one evaluation): a dot
            parts.append(f'<circle cx="{drawn[0][0]:.1f}" cy="{drawn[0][1]:.1f}" r="2.5" fill="{colour}" '
                         f'stroke="{colour}"/>')
        # a short stroke of the line's own style before its name: "val" drawn dashed said so nowhere
        parts.append(f'<line x1="{at}" x2="{at + 18}" y1="{top - 14}" y2="{top - 14}" stroke="{colour}" '
                     f'stroke-width="1.6"{dash}/>')
        parts.append(f'<text x="{at + 22}" y="{top - 10}" font-size="{CHART_LEGEND}" fill="{colour}">'
                     f'{_esc(one.name)}</text>')
        taken.append((at, top - 10 - 0.8 * CHART_LEGEND, at + 22 + _text_width(one.name, CHART_LEGEND),
                      top - 10 + 0.2 * CHART_LEGEND))
        at += max(92, _text_width(one.name, CHART_LEGEND) + 36)  # the next name after this one, however long
    for c in counters:
        if math.isfinite(c.val_loss):
            said = f"{c.n}-gram counter {c.val_loss:.2f}"
            wide, level = _text_width(said, CHART_NOTE), y(c.val_loss)
            # at the left, where a loss curve is still high: above its line, else below it, else further right,
            # clear of the legend and of a counter close by (a bigram and a trigram 0.05 apart)
            spots = [(sx, sy) for sx in (left + 4, left + 16 + wide, left + 28 + 2 * wide)
                     for sy in (level - 4, level + 4 + CHART_NOTE)]
            sx, sy = next(((sx, sy) for sx, sy in spots if top + CHART_NOTE <= sy <= height - bottom - 3
                           and _clear(box(sx, sy, wide), taken)), spots[0])
            taken.append(box(sx, sy, wide))
            parts.append(f'<line class="counter" x1="{left}" x2="{width - right}" y1="{level:.1f}" '
                         f'y2="{level:.1f}" stroke="#d08c00" stroke-dasharray="1 3"/>'
                         f'<text x="{sx:.1f}" y="{sy:.1f}" font-size="{CHART_NOTE}" fill="#a06c00" '
                         'stroke="#fafafa" stroke-width="3" paint-order="stroke">'  # on top of the curves
                         f'{said}</text>')
    parts.append("</svg>")
    return "".join(parts)


ATTENTION_CELL = 14  # a map's cell, in the picture's units
MAP_LEAST = 300  # the narrowest column a map is given (px), where the page is as wide: a short prompt's maps grow


def _attention_labels(tokens: list[str]) -> tuple[list[str], list[str], bool]:
    """A map's row labels, its column heads, and whether those are positions."""
    shown = [visible(token) for token in tokens]
    # rows name each query's whole piece (a BPE's `␣y`, `␣>`: cut to a first character, every one read `␣`), in a
    # margin as wide as the longest; a column, one cell wide, its first character that is not the space mark, or its
    # position where those do not tell the tokens apart (a BPE's byte tokens of Chinese all start with "\x"): each
    # row then starts with its position too
    firsts = [piece.lstrip("␣")[:1] or piece[:1] for piece in shown]
    index = not heads_tell_apart(firsts, tokens)
    if index:
        shown = [f"{i} {piece}" for i, piece in enumerate(shown)]
    return shown, firsts, index


def _attention_left(shown: list[str], cell: int) -> int:
    """The width of a map's margin of row labels."""
    return max(cell + 4, round(max((len(s) for s in shown), default=1) * (cell - 3) * 0.62) + 6)


def maps_html(figures: list[str], tokens: list[str]) -> str:
    """One row of attention maps (their <figure>s), of `tokens`: in columns at least as wide as a map drawn at its
    own size, so that a map grows to fill the page, as many to a row as fit; a fixed 256 pixels, a short prompt's map
    could not be read when projected."""
    shown, _, _ = _attention_labels(tokens)
    natural = _attention_left(shown, ATTENTION_CELL) + len(tokens) * ATTENTION_CELL
    columns = f"repeat(auto-fill, minmax(min(100%, {max(MAP_LEAST, natural)}px), 1fr))"
    return f'<div class="maps" style="grid-template-columns: {columns}">{"".join(figures)}</div>'


def attention_svg(tokens: list[str], weights: list[list[float]], cell: int = ATTENTION_CELL, label: str = "",
                  future: bool = False) -> str:
    """One attention map: row i (a query) over columns 0..i (keys); the masked future left blank, unless
    `future` (a model without the causal mask: every column)."""
    T = len(tokens)
    shown, firsts, index = _attention_labels(tokens)
    top, size = cell + 4, cell - 3  # the labels' size: a monospace character of 0.6 em fits a cell
    left = _attention_left(shown, cell)
    width, height = left + T * cell, top + T * cell
    peak = max((w for row in weights for w in row), default=1.0) or 1.0
    parts = [f'<svg class="attn" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(label)}">']
    for i, (piece, first) in enumerate(zip(shown, firsts)):
        first = str(i) if index else first
        c = _esc(piece) if len(piece) <= 1 else f"<title>{_esc(piece)}</title>{_esc(first)}"
        x_mid, y_mid = left + i * cell + cell / 2, top + i * cell + cell / 2
        # a position of 3 digits is squeezed into its cell, not run into the next column's
        squeeze = f' textLength="{cell - 2}" lengthAdjust="spacingAndGlyphs"' if len(first) > 2 else ""
        parts.append(f'<text x="{x_mid:.1f}" y="{cell - 3}" font-size="{size}" text-anchor="middle" '
                     f'font-family="monospace"{squeeze}>{c}</text>')
        parts.append(f'<text x="{left - 3}" y="{y_mid + cell / 2 - 3:.1f}" font-size="{size}" '
                     f'text-anchor="end" font-family="monospace" xml:space="preserve">{_esc(piece)}</text>')
    for i in range(T):
        for j in range(T if future else i + 1):
            w = weights[i][j]
            parts.append(f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell}" height="{cell}" '
                         f'fill="{scale_hex(w / peak)}"><title>{w:.3f}</title></rect>')
    parts.append("</svg>")
    return "".join(parts)


def embedding_svg(vocab: list[str], coords: list[list[float]], asked: list[int], label: str = "",
                  width: int = 560, height: int = 320) -> str:
    """Every token at its place on W_E's two main directions (x right, y up), each as its own text; the
    asked tokens last, in bold, so they stay readable where points crowd."""
    xs, ys = [c[0] for c in coords], [c[1] for c in coords]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    margin = 12

    def place(i: int) -> tuple[float, float]:
        x = margin + (xs[i] - x0) / ((x1 - x0) or 1.0) * (width - 2 * margin)
        y = margin + (y1 - ys[i]) / ((y1 - y0) or 1.0) * (height - 2 * margin)
        return x, y

    parts = [f'<svg class="embed" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" role="img" aria-label="{_esc(label)}">',
             f'<rect x="0" y="0" width="{width}" height="{height}" fill="none" stroke="#ccc"/>']
    wanted = set(asked)
    for i in [i for i in range(len(vocab)) if i not in wanted] + list(asked):
        x, y = place(i)
        bold = i in wanted
        parts.append(f'<text x="{x:.1f}" y="{y:.1f}" font-size="{13 if bold else 11}" text-anchor="middle" '
                     f'dominant-baseline="middle" font-family="monospace"'
                     + (' font-weight="bold" fill="#0a6"' if bold else ' fill="#555"')
                     + f'>{_esc(visible(vocab[i]))}</text>')
    parts.append("</svg>")
    return "".join(parts)


# The most frames a page shows: a run watched at every step (eval_every=1) made a frame a step, and 201 frames of
# watch=attn on a 64-token prompt wrote a page of 155 MB that a browser chokes on. :plot charts every frame.
REPORT_FRAMES = 40


def shown_frames(frames: list) -> list:
    """At most REPORT_FRAMES of `frames`, evenly spread, the first and the last among them."""
    if len(frames) <= REPORT_FRAMES:
        return list(frames)
    picks = sorted({round(k * (len(frames) - 1) / (REPORT_FRAMES - 1)) for k in range(REPORT_FRAMES)})
    return [frames[i] for i in picks]


def frames_html(frames: list, step: int | None = None) -> list[str]:
    """The frames of a `:train watch=` run as a sequence: one figure, table or sample per evaluation (at most
    REPORT_FRAMES of them, evenly spread); `step`, the model's, where it has trained on since the last frame (an
    unwatched :train after the watched one)."""
    first = frames[0]
    # what it read: the repeated random tokens or the val windows as the terminal says them, else the whole prompt
    read = (_esc(frame_input(first)) if (first.heads and first.repeat is not None) or first.bands
            else f"of <code>{_esc(visible(first.prompt))}</code>")
    out = [f'<h2 id="watch">While it trained (watch={_esc(first.view)})</h2>',
           f"<p>{_esc(frame_subject(first))} {read}, before the first step and at every evaluation.</p>"]
    if step is not None and frames[-1].step < step:  # the views above are of the model now, not of the last frame
        out.append(f"<p>These frames are of the last run watched: the last frame is of step {frames[-1].step:,}; "
                   f"the model on this page has trained to step {step:,} since.</p>")
    shown = shown_frames(frames)
    if len(shown) < len(frames):
        out.append(f"<p>This page shows {len(shown)} of the {len(frames):,} frames, evenly spread, the first and the "
                   "last among them: <code>:plot</code> charts every frame of the views it draws.</p>")
    for frame in shown:
        out.append(f'<h3 class="frame">{_esc(frame_when(frame))}</h3>')
        if frame.maps:
            future = reads_future(frame.maps)
            svgs = [attention_svg(frame.tokens, m, label=f"step {frame.step} head {h}", future=future)
                    for h, m in enumerate(frame.maps)]
            out.append(maps_html([f"<figure>{svg}<figcaption>head {h}</figcaption></figure>"
                                  for h, svg in enumerate(svgs)], frame.tokens))
        elif frame.lens:
            rank = frame.target is not None
            head = "<tr><th>after</th><th>best guess</th>" + (f"<th>rank of {_esc(visible(frame.target))}</th>"
                                                              if rank else "") + "</tr>"
            rows = "".join(f"<tr><td>{_esc(g.layer)}</td><td>{_esc(visible(g.guess))} {g.prob:.2f}</td>"
                           + (f"<td>{'-' if g.target_rank is None else g.target_rank}</td>" if rank else "")
                           + "</tr>" for g in frame.lens)
            out.append(f'<table class="config">{head}{rows}</table>')
        elif frame.grads:
            ffn = has_ffn(frame.grads)  # ffn=off: no FFN column, as under the terminal's frame
            head = ("<tr><th>block</th><th>attention |dL/dW|</th>" + ("<th>FFN |dL/dW|</th>" if ffn else "")
                    + "<th>|dL/dh| below</th></tr>")
            rows = (f"<tr><td>top</td><td></td>{'<td></td>' if ffn else ''}<td>{fmt.gradient(frame.top)}</td></tr>"
                    + "".join(f"<tr><td>{g.block}</td><td>{fmt.gradient(g.attention)}</td>"
                              + (f"<td>{ffn_gradient(g)}</td>" if ffn else "")
                              + f"<td>{fmt.gradient(g.below)}</td></tr>" for g in frame.grads))
            out.append(f'<table class="config">{head}{rows}</table>')
        elif frame.heads:
            n_heads = max(h.head for h in frame.heads) + 1
            head = "<tr><th>block</th>" + "".join(f"<th>head {h}</th>" for h in range(n_heads)) + "</tr>"
            rows = "".join(f"<tr><td>{layer}</td>" + "".join(f"<td>{_esc(head_cell(h).plain)}</td>" for h in frame.heads
                                                             if h.layer == layer) + "</tr>"
                           for layer in sorted({h.layer for h in frame.heads}))
            out.append(f'<table class="config">{head}{rows}</table>')
            if any(h.role is None for h in frame.heads):  # as under the terminal's frame: "· 0.14" says nothing alone
                out.append(f"<p>{_esc(NO_ROLE)}</p>")
            if frame.repeat is not None:
                out.append(f"<p>{_esc(copying(frame))}</p>")
        elif frame.coords:
            asked = asked_ids(frame.vocab, frame.tokens)
            one, two = (fmt.share(share) for share in frame.explained)
            out.append(f"<figure>{embedding_svg(frame.vocab, frame.coords, asked, f'step {frame.step} embeddings')}"
                       f"<figcaption>x: direction 1, {one} of the variance; y: direction 2, {two}"
                       + (f"; not drawn: the {count(frame.left_out, 'token')} the training text never holds"
                          if frame.left_out else "") + "</figcaption>"
                       "</figure>")
        elif frame.bands:
            head = "<tr><th>positions</th>" + "".join(f"<th>{_esc(band)}</th>" for band in frame.bands) + "</tr>"
            cells = "".join(f"<td>{'-' if math.isnan(loss) else f'{loss:.3f}'}</td>" for loss in frame.band_losses)
            out.append(f"<table>{head}<tr><td>val loss</td>{cells}</tr></table>")
        else:
            # (a newline right after <pre> is dropped by every parser: one is given for it to drop)
            out.append(f'<pre class="sample">\n<b>{_text(frame.prompt)}</b>{_text(frame.sample or "")}</pre>')
    return out


def heads_html(heads) -> list[str]:
    """`:heads` as a table: each head's scores (the one it is named for in bold), the copying gain switching it off
    loses, the even row; then the losses on the two copies and the reading."""
    roles = list(heads.uniform)  # the roles, in the order core.heads scores them
    swept = any(row.carries is not None for row in heads.heads)
    out = ["<h2>What each head does</h2>",
           f"<p>On {heads.sequences} sequences of {heads.repeat} random tokens, each followed by the same "
           f"{heads.repeat} again: the attention query i puts on the keys j each role names, averaged over the "
           "queries (previous: j = i-1; current: j = i; first: j = 0; duplicate: earlier copies of token i; "
           "induction: the token after an earlier copy of token i)"
           + ("; off: copying: the copying gain (the first copy's loss minus the repeat's, nats a token) lost with "
              "that head switched off alone; a head that hurts every prediction alike loses none of it" if swept
              else "") + ".</p>"]
    head = ("<tr><th>head</th>" + "".join(f"<th>{r}</th>" for r in roles) + "<th>named</th>"
            + ("<th>off: copying</th>" if swept else "") + "</tr>")
    rows = []
    for row in heads.heads:
        cells = "".join(f"<td><b>{getattr(row, r):.2f}</b></td>" if r == row.role
                        else f"<td>{getattr(row, r):.2f}</td>" for r in roles)
        off = f"<td>{fmt.signed(row.carries, 2)}</td>" if swept else ""  # as :heads writes it, never -0.00
        rows.append(f"<tr><td>{row.layer}.{row.head}</td>{cells}<td>{_esc(row.role or '')}</td>{off}</tr>")
    even = "".join(f"<td>{heads.uniform[r]:.2f}</td>" for r in roles)
    rows.append(f"<tr><td>even</td>{even}<td></td>{'<td></td>' if swept else ''}</tr>")
    out.append(f'<table class="config">{head}{"".join(rows)}</table>')
    if heads.more:
        out.append(f"<p>{heads.more} heads with no role are not listed.</p>")
    reading = heads.reading[:1].upper() + heads.reading[1:]  # a sentence of the page: "(...). no copying" read so
    out.append(f"<p>Loss on the first copy {heads.first_copy:.2f} nats a token, on the repeat {heads.second_copy:.2f} "
               f"(a uniform guess: {heads.chance:.2f}). {_esc(reading)}.</p>")
    return out


def context_html(curve, series: list, vocab_size: int | None, causal: bool = True) -> list[str]:
    """`:context` as a chart: the val loss at each position of the window (log scale), the counter beside it, on
    :context's own windows (commands.inside.cmd_report), so its numbers are the ones :context gives.
    `causal` False: the model has no causal mask now, and every position reads the whole window."""
    reads = ("position i reads the i + 1 tokens up to it, so where the curve falls, reading further back helps"
             if causal else "with no causal mask every position reads the whole window, and every one but the "
                            "last the token it predicts too (the last one's lies past the window), so its loss is no "
                            "language model's")
    first = curve.first_counted
    # a task's loss counts its answer only: positions before it predict nothing counted, and the chart starts there
    # (its text spoke of a position 0 the chart of sort:4 did not draw, from 4 on)
    counted = (f" Positions 0 to {first - 1} predict no counted token (a task's loss counts the answer only), so the "
               f"chart starts at {first}." if first > 0 else "")
    return ["<h2>Loss by position</h2>",
            f"<p>The val loss at each position of the window, over {curve.windows} val windows of {curve.positions}: "
            f"{reads}.{counted}"
            + (" Beside it, the counting model that reads the last tokens up to its order"
               + (" (at position 0 the bigram, reading the same one token)." if causal and first == 0 else ".")
               if curve.counter is not None else "")
            + f" Mean: {curve.mean:.3f} nats a token.</p>",
            loss_chart_svg(series, vocab_size, x_label="position in the window (log scale)",
                           x_ends=(f"{curve.first_counted}", f"{curve.positions - 1}"), svg_id="context-chart")]


def _probability(p: float) -> str:
    """A probability as :score writes it (commands.inside.prob_text): 3 decimals, or, where those would read 0.000,
    2 significant digits."""
    if p <= 0:
        return "0"
    return f"{p:.3f}" if p >= 0.00095 else f"{p:.1e}"


def teacher_forcing_html(scored) -> list[str]:
    """The scored text, each predicted token shaded by its loss -ln p against ln(V), its p and -ln p written under it
    (`:score`'s numbers): a hover title alone showed nothing when the page was projected or printed."""
    sees = ("each from the tokens before it (the causal mask)" if scored.causal else
            "each from the whole text, the true next token included (no causal mask now) but for the last, whose "
            "next token lies past the text read")
    out = ["<h2>Teacher forcing</h2>",
           f"<p>One forward pass predicts every next token of the text at once, {sees}. Each token is shaded by "
           "how surprised the model was by it, -ln p of the true token "
           f"from 0 (dark) to ln(V) = {scored.uniform:.2f} or more (bright, no better than a uniform guess). "
           "Under each token: p, the probability the model gave it, and below that -ln p, its loss; hover for the "
           "best guess. Grey: given, not predicted (the first token, which nothing before it predicts, and a "
           "task's question), its numbers counted in no loss.</p>"]

    def cell(token: str, style: str, title: str, t: int | None, counted: bool = True) -> str:
        """A token, shaded, over its p and -ln p (the first token's two lines blank: nothing predicted it)."""
        kind = "tfp" if counted else "tfp given"
        numbers = ((_probability(scored.target_probs[t]), f"{scored.losses[t]:.3f}") if t is not None
                   else ("&nbsp;", "&nbsp;"))
        return (f'<span class="tfcell"><span class="tf" style="{style}" title="{_esc(title)}">{_esc(visible(token))}'
                f'</span>' + "".join(f'<span class="{kind}">{n}</span>' for n in numbers) + "</span>")

    cells = [cell(scored.tokens[0], "background:#ddd", "given", None)]
    for t, token in enumerate(scored.tokens[1:]):
        guess = f"best guess {quoted(scored.guesses[t], encodings=())} {scored.guess_probs[t]:.2f}"
        if not scored.counted[t]:
            cells.append(cell(token, "background:#ddd", f"given; {guess}", t, counted=False))
            continue
        frac = min(1.0, scored.losses[t] / scored.uniform) if scored.uniform > 0 else 0.0
        ink = "#fff" if frac < 0.5 else "#222"
        title = f"p = {_probability(scored.target_probs[t])}, -ln p = {scored.losses[t]:.3f}; {guess}"
        cells.append(cell(token, f"background:{scale_hex(frac)};color:{ink}", title, t))
    out.append(f'<div class="tf">{"".join(cells)}</div>')
    if scored.dropped:  # as :score cuts a text: the pass reads max_seq_len tokens and predicts the one after them
        read = len(scored.tokens)
        out.append(f"<p>The first {count(scored.dropped, scored.unit)} of the text, beyond max_seq_len + 1 = {read}, "
                   f"went unread: these are its last {count(read, scored.unit)}.</p>")
    counted = sum(scored.counted)
    out.append(f"<p>loss {scored.loss:.4f}: the mean of the {counted} counted -ln p, what training minimises.</p>")
    return out


def _loss_numbers(data: ReportData) -> str | None:
    """"At step 230: val loss 1.9267, ...": the chart's last numbers as :train, :ls and the status bar write them."""
    parts = []
    if data.val_loss is not None:
        at = f" (measured at step {data.val_step:,})" if data.val_step not in (None, data.step) else ""
        per = " a token" if data.config.get("tokenizer", "char") != "char" else ""  # bpe: not per character
        bits = f" ({data.val_bpc:.4f} bits per character)" if data.val_bpc is not None else ""
        parts.append(f"val loss {data.val_loss:.4f}{per}{bits}{at}")
    if data.accuracy is not None:  # a task's measure, beside its loss, as :train reports it
        parts.append(f"accuracy {data.accuracy:.1%} (of the held-out questions, greedily)")
    if data.train_loss is not None:
        parts.append(f"train loss {data.train_loss:.4f} (the last step's one batch)")
    if data.n_params is not None:
        tied = " (a tied embedding and head counted once)" if data.config.get("model", {}).get("tie_embeddings") else ""
        parts.append(f"{data.n_params:,} parameters{tied}")
    if not parts:
        return None
    # the page's other losses are the ablated model's (the banner says so); these two are training's, every part on
    whose = (" (the losses as training measured them, before :ablate switched parts off)"
             if data.ablations and (data.val_loss is not None or data.train_loss is not None) else "")
    return f"<p>At step {data.step or 0:,}: {', '.join(parts)}{_esc(whose)}.</p>"


def _last_run(run) -> str | None:
    """The last run's steps, beside the train table: its `steps` is the setting, the length a new run gets, and read
    alone it said 600 of a run of 200 (`minitf train steps=200` sets no setting)."""
    if not run or not run[1]:
        return None
    start, steps, step = run
    end = start + steps
    stopped = f", stopped at step {step:,}" if step < end else ""
    return (f"The last training run: steps {start:,} to {end:,} ({count(steps, 'step')}{stopped}). The table's "
            "<code>steps</code> is the setting, the length of a new run.")


def build_report(data: ReportData) -> str:
    """The whole page as one string."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', f"<title>{_esc(data.title)}</title>",
           f"<style>{_CSS}</style></head><body>", f"<h1>{_esc(data.title)}</h1>"]
    if data.ablations:  # the views read the model with its hooks on: without this line they pass for the model's own
        out.append(f"<p><b>Switched off by <code>:ablate</code>: {_esc(', '.join(data.ablations))}.</b> The attention "
                   "maps, losses, heads and samples below are the ablated model's (the weights are unchanged; "
                   "<code>:ablate off</code> puts the model back).</p>")
    out.append("<h2>Configuration</h2>")
    # headed as :config heads them (model, training, generation): "train" and "gen" were the config's keys
    headings = {"model": "model", "train": "training", "gen": "generation"}
    for section in ("model", "train", "gen"):
        values = data.config.get(section, {})
        rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(fmt.value(v))}</td></tr>" for k, v in values.items())
        out.append(f"<h3>{headings[section]}</h3><table class=\"config\">{rows}</table>")
        if section == "train" and (run := _last_run(data.config.get("last_run"))):
            out.append(f"<p>{run}</p>")
    read = f"; tokenizer: <code>{_esc(data.config['tokenizer'])}</code>" if "tokenizer" in data.config else ""
    out.append(f"<p>data: <code>{_esc(data.config.get('data', ''))}</code>{read}</p>")
    if data.machine:
        out.append(f"<p>{_esc(data.machine)}</p>")
    out.append("<h2>Loss</h2>")
    if not data.series and data.weights_from:  # "No training yet." read as an untrained model of GPT-2's weights
        out.append(f"<p>No training here: the weights came from <code>{_esc(data.weights_from)}</code>, trained "
                   "elsewhere.</p>")
    else:
        out.append(loss_chart_svg(data.series, data.vocab_size, counters=data.counters))
    if numbers := _loss_numbers(data):
        out.append(numbers)
    if data.data_from is not None:
        out.append(f"<p>{_esc(data.config.get('data', 'The data in use'))} came in after step {data.data_from:,}: "
                   "the curves before it are of the data before (the switch kept the model, whose vocabulary it "
                   "shares).</p>")
    out.append("<h2>Attention</h2>")
    future = any(reads_future(heads) for heads in data.maps)
    unmasked = ":ablate mask" if "the causal mask" in data.ablations else "causal off"  # causal is on under :ablate
    where = (f"a query over every key: the model has no causal mask ({unmasked}), so it reads the future too"
             if future else "a query over the keys 0..i; above the diagonal is the masked future")
    # whose text it is, and what of it went unread: a text given past the window read as the whole of it
    if data.text_given:
        whose = "the text given"
        if data.dropped:
            whose += (f"; its first {count(data.dropped, data.unit)}, beyond max_seq_len={data.window}, went unread: "
                      f"the maps read its last {count(len(data.tokens or data.prompt), data.unit)}")
    elif data.stand_in:  # "a sample of the data" was said of the pangram's words, the data being gone
        whose = (f"a stand-in made of the vocabulary's characters, not a sample of the data, which is not here; "
                 f"{cmd('report', text='TEXT')} reads one of your own")
    else:
        whose = f"a sample of the data; {cmd('report', text='TEXT')} reads another"
    out.append(f"<p>Prompt: <code>{_esc(visible(data.prompt))}</code> ({_esc(whose)}). Row i is where position "
               f"i looks ({where}). Darker: less weight.</p>")
    tokens = data.tokens or list(data.prompt)  # a BPE's pieces: a map has a row a token, not a character
    for layer, heads in zip(data.layers, data.maps):
        figures = [f"<figure>{attention_svg(tokens, m, label=f'layer {layer} head {h}', future=future)}"
                   f"<figcaption>layer {layer}, head {h}</figcaption></figure>" for h, m in enumerate(heads)]
        out.append(maps_html(figures, tokens))
    scale = "".join(f'<span style="background:{c};display:inline-block;width:18px">&nbsp;</span>'
                    for c in (scale_hex(i / (len(SCALE) - 1)) for i in range(len(SCALE))))
    out.append(f"<p>0 {scale} max weight of each map</p>")
    if data.embedding is not None:
        asked = asked_ids(data.vocab, tokens)
        one, two = (fmt.share(share) for share in data.embedding.explained)
        out.append("<h2>Token embeddings</h2>")
        out.append("<p>Every token at its row of W_E, seen along the two directions in which the rows differ most "
                   f"(their first two principal components: {one} and {two} of the rows' variance); the prompt's "
                   "tokens in bold. Near each other: alike in these two directions.</p>")
        out.append(embedding_svg(data.vocab, data.embedding.coords, asked, "token embeddings"))
        if (left_out := data.vocab_size - len(data.vocab)) > 0:  # an untied model: the rows that trained, as :embed
            out.append(f"<p>Not drawn: the {count(left_out, 'token')} the training text never holds; with the head "
                       "untied, an input row learns only where its token is read, so theirs are the random rows they "
                       "started as.</p>")
    if data.context is not None:
        out.extend(context_html(data.context, data.context_series, data.vocab_size, data.causal))
    if data.scored is not None:
        out.extend(teacher_forcing_html(data.scored))
    if data.heads is not None:
        out.extend(heads_html(data.heads))
    if data.left_out:  # a section that cannot be made for this model, and why, as its command says
        out.append("<h2>Not on this page</h2><ul>")
        out.extend(f"<li>{_esc(section)}: {_esc(why)}</li>" for section, why in data.left_out)
        out.append("</ul>")
    out.append("<h2>Samples</h2>")
    if data.quantized:
        out.append("<p>From the float32 model, as everything on this page; <code>:quantize int8</code> is on, so "
                   "<code>:gen</code> samples its int8 copy.</p>")
    if data.samples_about:
        out.append(f"<p>{_esc(data.samples_about)}</p>")
    for sample, grade in itertools.zip_longest(data.samples, data.sample_grades):
        # the sample's first character was a newline (text starts on a fresh line), which <pre> drops: one more
        out.append(f'<pre class="sample">\n{_text(sample)}</pre>')
        if grade:
            out.append(f'<p class="grade">{_esc(grade)}</p>')
    if data.frames:
        out.extend(frames_html(data.frames, data.step))
    out.append("</body></html>")
    return "\n".join(out)


# --- the file ----------------------------------------------------------------------------------------
def check_report_path(text: str) -> Path:
    """The report's path, if a page can be written there; a UserError naming what is wrong otherwise.

    Asked before the report's work starts: an .html name, in a folder that exists and can be written.
    """
    # `:report a.html b.html` wrote one page named "a.html b.html"; `minitf report x.html y=3` was told to give a
    # name ending in .html, e.g. the x.html it had given: a page's name followed by other words is refused as such
    words = text.split()
    pages = [w for w in words if w.lower().endswith((".html", ".htm"))]
    if len(words) > 1 and (len(pages) > 1 or (pages and not words[-1].lower().endswith((".html", ".htm")))):
        what = f"{len(pages)} pages' names" if len(pages) > 1 else "words after the page's name"
        raise UserError(f"give one page's name, got {clip(text, 80)!r}: {what} (a name with spaces goes in quotes, "
                        f"e.g. {clip(pages[0], 80)})")
    path = expand(text)
    shown = cut_middle(str(path))  # its start and its end, the page's name
    if (gone := gone_folder(path)) is not None:  # "." still reads as a writable folder; a file cannot be made in it
        raise UserError(f"cannot write {shown}: {gone}")
    try:
        folder_given = path.is_dir()
    except OSError:  # a name too long to ask about: refused below, in one line
        folder_given = False
    if folder_given:  # `:report out/`: the page goes in that folder, not beside it (the example was `out.html`)
        raise UserError(f"{shown} is a folder; give the page's file in it, e.g. "
                        f"{cut_middle(str(path / 'report.html'))}")
    if not path.name.lower().endswith((".html", ".htm")):  # `.html` alone is a name (hidden), with no suffix
        typed = Path(text)  # the same place, as typed (`~/runs/r.txt`: ~/runs/r.html), with the name ending in .html
        named = typed.stem + ".html" if typed.parent == Path(".") else str(typed.parent / (typed.stem + ".html"))
        raise UserError(f"the report is an HTML file; give a name ending in .html, e.g. {cut_middle(named, 200)}")
    folder = _folder(path)
    try:  # a name longer than the file system allows (ENAMETOOLONG) is refused here, in one line
        if path.is_dir():
            raise UserError(f"{shown} is a folder; give a file name ending in .html")
        if not folder.is_dir():
            # the nearest part of the path that exists says which: a folder missing, or a file where one should be
            blocking = next((p for p in (folder, *folder.parents) if p.exists()), None)
            if blocking is not None and not blocking.is_dir():
                tail = str(blocking) if len(str(blocking)) <= 60 else "…" + str(blocking)[-59:]  # its name shows
                raise UserError(f"cannot write {shown}: {tail} is a file, not a folder; choose another "
                                "path")
            raise UserError(f"cannot write {shown}: the folder {cut_middle(str(folder))} does not exist; "
                            f"create it first, or give {cmd('report', 'PATH')} a path in a folder that exists")
        if path.is_file() and not _a_report(path):
            # `minitf report mine.html` replaced a page of the user's own, said only after it was gone
            raise UserError(f"{shown} is a file that minitf did not write (no report's heading in it); give "
                            f"{cmd('report', 'PATH')} another name, or move that file away first")
        if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
            # a read-only file system refuses whatever the permissions say (it was "permission denied", and no way on)
            why = "the file system is read-only" if _read_only(folder) else "permission denied"
            where = "" if path.is_absolute() else f" (in {cut_middle(str(folder.absolute()), 200)})"  # its folder
            raise UserError(f"cannot write {shown}{where}: {why}; give {cmd('report', 'PATH')} a path "
                            "in a folder you can write")
    except OSError as e:
        raise UserError(f"cannot write {shown}: {e.strerror or e}; choose a shorter or other "
                        "path") from None
    return path


REPORT_HEAD = "<title>minitf report: "  # in every page's head (cmd_report's title)


def _a_report(path: Path) -> bool:
    """Whether the file at `path` is a page minitf wrote (its head, as build_report writes it), or empty: one that is
    neither is the user's own, which a report must not replace. Unreadable: left to the write to say."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return True
    return not head.strip() or REPORT_HEAD.encode() in head


def _read_only(folder: Path) -> bool:
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # Windows has no statvfs
        return False


def _folder(path: Path) -> Path:
    return path.parent if str(path.parent) else Path(".")


def write_report(path: Path, page: str) -> int:
    """Write `page` to `path`, replacing a report there whole or not at all; returns its size in bytes.

    A temporary name of its own (mkstemp: created new, never an existing file or folder) is renamed
    over the report when complete.
    """
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:40]}.", suffix=".tmp", dir=_folder(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make the page private; a page is for sharing
        os.replace(tmp, path)
    except BaseException as e:  # Ctrl-C too (:report is interruptible): no temporary file is left behind
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        if isinstance(e, OSError):
            raise UserError(f"cannot write {cut_middle(str(path))}: {e.strerror or e}; give "
                            f"{cmd('report', 'PATH')} a path in a folder you can write") from None
        raise
    return path.stat().st_size
