""":train watch=attn|lens|samples|grad|heads|embed|context: the frames are the views' own numbers, watching changes
no step of training, the frames stay in the session for :report and :plot what=lens_rank, and each is drawn
under the live loss table and after the run at 80 columns without colour."""

import io
import json

import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from minitf_repl import cli
from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.core.inside import attention_maps, logit_lens
from minitf_repl.dispatch import FrontDoor, run_command, to_json
from minitf_repl.render import render
from minitf_repl.render.live import RichReporter
from minitf_repl.render.watch import watch_view
from minitf_repl.session import Session

TINY = {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "batch_size": 4,
        "autosave": False}


def session():
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    return s


def text_of(result, width=80) -> str:
    c = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, c)
    return c.file.getvalue()


def losses(s):
    return [(h["train_loss"], h["val_loss"], h["accuracy"]) for h in s.trainer.history]


@pytest.mark.parametrize("view", ["attn", "lens", "samples", "grad", "heads", "embed", "context"])
def test_watching_changes_no_step_of_training(view):
    plain, watched = session(), session()
    run_command(plain, "train", {"steps": 8, "eval_every": 3})
    r = run_command(watched, "train", {"steps": 8, "eval_every": 3, "watch": view})
    assert losses(watched) == losses(plain)  # the same numbers, bit for bit
    assert all(torch.equal(a, b) for a, b in zip(plain.model.state_dict().values(), watched.model.state_dict().values()))
    assert [f.step for f in r.frames] == [0, 3, 6, 8]  # before the first step, then at every evaluation
    assert [f.val_loss for f in r.frames] == [None] + [h["val_loss"] for h in watched.trainer.history if h["val_loss"]]
    assert watched.watch_frames == r.frames and plain.watch_frames == []
    json.dumps(to_json(r), allow_nan=False)


def test_the_frames_are_the_views_numbers():
    s = session()
    r = run_command(s, "train", {"steps": 6, "eval_every": 3, "watch": "attn", "prompt": "314159=", "layer": 0})
    last = r.frames[-1]
    assert last.layer == 0 and last.tokens == list("314159=") and len(last.maps) == 2
    ref = attention_maps(s.model, s.data.tokenizer.encode("314159="), layer=0).maps[0]
    assert torch.allclose(torch.tensor(last.maps), ref)
    lens = run_command(s, "train", {"steps": 3, "eval_every": 3, "watch": "lens", "prompt": "314159="})
    frame = lens.frames[-1]
    assert frame.target == "1"  # sort's answer to 314159= (113459) starts with 1
    enc = s.data.tokenizer.encode
    ref = logit_lens(s.model, enc("314159="), top=1, targets=[-1] * 6 + enc("1"))
    assert [g.layer for g in frame.lens] == ["embed", "blocks.0", "blocks.1"]
    assert [g.target_rank for g in frame.lens] == [layer.target_ranks[-1] for layer in ref.layers]
    assert [g.guess for g in frame.lens] == [s.data.tokenizer.itos[layer.top_ids[-1][0]] for layer in ref.layers]
    samples = run_command(s, "train", {"steps": 3, "eval_every": 3, "watch": "samples", "prompt": "314159="})
    greedy = run_command(s, "gen", {"prompt": "314159=", "temperature": 0, "n": 40})
    assert samples.frames[-1].sample == greedy.text and len(greedy.text) == s.data.answer_len  # the answer ends it


def test_watch_options_are_checked_before_anything_changes():
    s = session()
    run_command(s, "train", {"steps": 2, "eval_every": 1})
    step = s.trainer.step
    with pytest.raises(UserError, match="watch=grad needs a loss"):
        run_command(s, "train", {"steps": 2, "watch": "grad", "prompt": "3"})
    with pytest.raises(UserError, match="add watch=attn"):
        run_command(s, "train", {"steps": 2, "prompt": "31415="})
    with pytest.raises(UserError, match=r"layer must be in 0\.\.1"):
        run_command(s, "train", {"steps": 2, "watch": "attn", "layer": 2})
    with pytest.raises(DataError):
        run_command(s, "train", {"steps": 2, "watch": "attn", "prompt": "abc"})
    with pytest.raises(UserError, match="watch must be one of"):
        run_command(s, "train", {"steps": 2, "watch": "loss"})
    assert s.trainer.step == step and s.watch_frames == []
    # with data=, the prompt is read as the new data reads it, and a refusal leaves the old data in place
    with pytest.raises(UserError, match=r"layer must be in 0\.\.1"):
        run_command(s, "train", {"steps": 2, "data": "reverse", "watch": "attn", "layer": 2})
    with pytest.raises(DataError):
        run_command(s, "train", {"steps": 2, "data": "add", "watch": "attn", "prompt": "xyz"})
    assert s.data_spec == "sort" and s.trainer.step == step


def test_plot_lens_rank_charts_the_frames():
    s = session()
    with pytest.raises(UserError, match="train with :train watch=lens first"):
        run_command(s, "plot", {"what": "lens_rank"})
    run_command(s, "train", {"steps": 6, "eval_every": 2, "watch": "lens"})
    r = run_command(s, "plot", {"what": "lens_rank"})
    assert [series.name for series in r.series] == ["embed", "blocks.0", "blocks.1"]
    for k, series in enumerate(r.series):
        assert series.steps == [0, 2, 4, 6]
        assert series.values == [float(f.lens[k].target_rank) for f in s.watch_frames]
    out = text_of(r)
    assert all(len(line) <= 80 for line in out.splitlines()) and "rank of the true next token" in out
    assert "● embed" in out and "▲ blocks.0" in out
    run_command(s, "train", {"steps": 2, "eval_every": 2, "watch": "lens", "prompt": "31415"})  # no '=': unknown
    with pytest.raises(UserError, match="next token is unknown"):
        run_command(s, "plot", {"what": "lens_rank"})


def test_report_shows_the_frames_in_order(tmp_path):
    s = session()
    run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "attn"})
    r = run_command(s, "report", {"path": str(tmp_path / "r.html")})
    page = (tmp_path / "r.html").read_text()
    assert "3 frames of watch=attn" in r.sections
    assert 'id="watch"' in page and page.count('<h3 class="frame">') == 3
    assert page.index("step 0 (before training)") < page.index("step 2, val loss") < page.index("step 4, val loss")
    assert page.count("<figcaption>head ") == 3 * 2 + 0  # two heads per frame (the main maps say "layer L, head H")


@pytest.mark.parametrize("view", ["attn", "lens", "samples", "grad", "heads", "embed", "context"])
def test_each_view_is_drawn_after_the_run_at_80_columns(view):
    s = session()
    r = run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": view})
    out = text_of(r)
    assert all(len(line) <= 80 for line in out.splitlines())
    assert "step 4, val loss" in out and "watched 3 frames" in out
    assert {"attn": "head 1", "lens": "rank of", "samples": r.frames[-1].prompt + (r.frames[-1].sample or ""),
            "grad": "attention |dL/dW|", "heads": "loss on the repeat", "embed": "x: direction 1",
            "context": "positions 6 "}[view] in out  # sort:6 scores its answer only: the bands start at 6


def test_the_live_display_draws_the_frame_under_the_loss_table():
    s = session()
    c = Console(file=io.StringIO(), width=80, color_system=None)
    reporter = RichReporter(c, live=True)
    try:
        run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "lens"}, reporter)
        view = Console(file=io.StringIO(), width=80, color_system=None)
        view.print(reporter.training_view())
    finally:
        reporter.close()
    out = view.file.getvalue()
    assert out.index("val loss") < out.index("step 4, val loss") < out.index("rank of")  # the table, then the frame
    assert all(len(line) <= 80 for line in out.splitlines())


def test_the_repl_line_and_the_shell():
    s = session()
    out = Console(file=io.StringIO(), width=80, color_system=None)
    assert FrontDoor(s, out).run_line(":train steps=4 eval_every=2 watch=samples prompt=31415=") == "ok"
    assert "a greedy sample of '31415='" in out.file.getvalue() and len(s.watch_frames) == 3
    assert REGISTRY["train"].find_param("watch").choices == ("attn", "lens", "samples", "grad", "heads", "embed",
                                                             "context")
    runner = CliRunner()
    args = ["--set", "n_layers=2", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32",
            "--set", "batch_size=4", "--set", "autosave=off", "--data", "sort"]
    doc = json.loads(runner.invoke(cli.app, [*args, "train", "--steps", "4", "--eval-every", "2", "--watch", "attn",
                                             "--json"]).stdout)
    assert doc["schema"] == f"minitf.train/{REGISTRY['train'].json_version}"
    assert [f["step"] for f in doc["frames"]] == [0, 2, 4]
    assert len(doc["frames"][0]["maps"]) == 2 and doc["frames"][0]["layer"] == 1


def test_the_grad_frames_are_backprops_numbers_and_plot_charts_them():
    from minitf_repl.core.backprop import backprop

    s = session()
    with pytest.raises(UserError, match="train with :train watch=grad first"):
        run_command(s, "plot", {"what": "block_grad"})
    r = run_command(s, "train", {"steps": 6, "eval_every": 3, "watch": "grad"})  # a held-out question and answer
    last = r.frames[-1]
    ids = s.data.tokenizer.encode(last.prompt)
    counted = s.data.counted(ids)
    assert not all(counted)  # the question is given, the answer counted, as :train counts it
    done = backprop(s.model, ids, counted, check=False)
    assert last.top == pytest.approx(done.top) and [g.block for g in last.grads] == [1, 0]
    for g in last.grads:
        members = [t for t in done.tensors if t.name.startswith(f"blocks.{g.block}.attn.")]
        assert g.attention == pytest.approx(sum(t.grad**2 for t in members) ** 0.5)
        assert g.below == pytest.approx([row.leaves for row in done.stream if row.block == g.block
                                         and row.part == "attn"][0])
    assert last.grads[0].ffn > 0
    plot = run_command(s, "plot", {"what": "block_grad"})
    assert [series.name for series in plot.series] == ["block 0", "block 1"]
    assert plot.series[1].steps == [0, 3, 6]
    assert plot.series[1].values[-1] == pytest.approx((last.grads[0].attention**2 + last.grads[0].ffn**2) ** 0.5)
    assert "|dL/dW| of each block's weights" in text_of(plot)


def test_report_shows_the_grad_frames(tmp_path):
    s = session()
    run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "grad"})
    run_command(s, "report", {"path": str(tmp_path / "r.html")})
    page = (tmp_path / "r.html").read_text()
    assert "While it trained (watch=grad)" in page and page.count("<th>FFN |dL/dW|</th>") == 3


def test_the_frames_go_with_the_model_they_watched(tmp_path):
    """A rebuild or a :load replaces the model: :plot and :report must not show the old model's frames as its own."""
    s = session()
    run_command(s, "train", {"steps": 2, "eval_every": 1, "watch": "grad"})
    assert s.watch_frames
    run_command(s, "set", {"n_layers": 1})
    assert s.watch_frames == []
    with pytest.raises(UserError, match="train with :train watch=grad first"):
        run_command(s, "plot", {"what": "block_grad"})
    loaded = Session(data_spec="sort", checkpoint_dir=tmp_path)
    run_command(loaded, "set", dict(TINY))
    run_command(loaded, "train", {"steps": 1})
    run_command(loaded, "save", {"name": "plain"})
    run_command(loaded, "train", {"steps": 2, "eval_every": 1, "watch": "attn"})
    run_command(loaded, "load", {"name": "plain"})
    assert loaded.watch_frames == []


def test_the_heads_frames_are_the_heads_views_numbers_and_plot_charts_them(tmp_path):
    s = session()
    for what in ("copying", "induction"):
        with pytest.raises(UserError, match="train with :train watch=heads first"):
            run_command(s, "plot", {"what": what})
    r = run_command(s, "train", {"steps": 6, "eval_every": 3, "watch": "heads"})
    from minitf_repl.core.heads import trained_length

    rows = trained_length(s.data, s.model_config.max_seq_len)  # sort's rows, shorter than the window: as :heads reads
    assert rows < 32 and [f.repeat for f in r.frames] == [rows // 2] * 3  # the same random tokens each time
    assert len({tuple(f.tokens) for f in r.frames}) == 1
    view = run_command(s, "heads", {})  # the same tokens (seed 0), the same model: the same numbers
    last = r.frames[-1]
    assert last.first_copy == pytest.approx(view.first_copy) and last.second_copy == pytest.approx(view.second_copy)
    assert [(h.layer, h.head) for h in last.heads] == [(row.layer, row.head) for row in view.heads]
    for h, row in zip(last.heads, view.heads):
        assert h.induction == pytest.approx(row.induction) and h.role == row.role
        scores = [row.previous, row.current, row.first, row.duplicate, row.induction]
        assert h.score == pytest.approx(getattr(row, row.role) if row.role else max(scores))
    copying = run_command(s, "plot", {"what": "copying"})
    assert [c.name for c in copying.series] == ["first copy", "repeat"] and copying.series[1].steps == [0, 3, 6]
    assert copying.series[1].values == [f.second_copy for f in r.frames]
    assert "the loss on random tokens (first copy)" in text_of(copying)
    induction = run_command(s, "plot", {"what": "induction"})
    best = max(last.heads, key=lambda h: h.induction)
    assert induction.series[0].name == f"head {best.layer}.{best.head}" and len(induction.series) == 4
    assert induction.series[0].values[-1] == pytest.approx(best.induction)
    run_command(s, "report", {"path": str(tmp_path / "r.html")})
    page = (tmp_path / "r.html").read_text()
    assert "While it trained (watch=heads)" in page
    assert f"on random tokens, {rows // 2} then the same {rows // 2} again" in page
    assert page.count("loss on the repeat") == 3

    on_text = run_command(s, "train", {"steps": 3, "eval_every": 3, "watch": "heads", "prompt": "31415="})
    assert on_text.frames[-1].repeat is None and on_text.frames[-1].tokens == list("31415=")
    assert "each head's role of '31415='" in text_of(on_text)
    with pytest.raises(UserError, match="which has no first copy and repeat"):
        run_command(s, "plot", {"what": "copying"})
    with pytest.raises(UserError, match="at least two characters"):
        run_command(s, "train", {"steps": 2, "watch": "heads", "prompt": "3"})
    short = Session(data_spec="pydoc")
    run_command(short, "set", {**TINY, "max_seq_len": 3})
    with pytest.raises(UserError, match="max_seq_len=3; give a text to score instead"):
        run_command(short, "train", {"steps": 2, "watch": "heads"})
    assert short.trainer.step == 0


def test_the_embed_frames_are_the_maps_numbers_and_the_report_draws_them(tmp_path):
    from minitf_repl.core.inside import embedding_map

    s = session()
    r = run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "embed", "prompt": "31415="})
    last = r.frames[-1]
    found = embedding_map(s.model)
    assert last.coords == found.coords and last.explained == found.explained
    assert last.vocab == list(s.data.tokenizer.itos) and last.tokens == list("31415=")
    assert r.frames[0].coords != last.coords  # the first frame is the untrained table's
    assert last.coords == run_command(s, "embed", {"text": "31415=", "map": True}).map.coords
    c = Console(file=io.StringIO(), width=80, color_system=None)
    c.print(watch_view(last, 80, True))
    out = c.file.getvalue()
    grid = out[out.index("\n│"):out.index("└")]
    assert all(ch in grid for ch in "345=")  # the prompt's tokens, on top
    assert ("the token embeddings on W_E's two main directions, the tokens of '31415=' drawn over any they share a "
            "cell with") in " ".join(out.split())  # no colour: no bold to see
    run_command(s, "report", {"path": str(tmp_path / "r.html")})
    page = (tmp_path / "r.html").read_text()
    watched = page[page.index('id="watch"'):]  # the page's own map comes before, with the attention maps
    assert "While it trained (watch=embed)" in page and watched.count('<svg class="embed"') == 3
    svg = page[page.rindex('<svg class="embed"'):]
    svg = svg[:svg.index("</svg>")]
    assert svg.count("<text ") == len(last.vocab) and svg.count('font-weight="bold"') == len(set("31415="))


def test_the_context_frames_are_the_context_views_numbers_and_plot_charts_them(tmp_path):
    from minitf_repl.core.context import position_bands, position_losses
    from minitf_repl.core.watch import CONTEXT_WINDOWS

    s = Session(data_spec="pydoc")
    run_command(s, "set", dict(TINY))
    r = run_command(s, "train", {"steps": 20, "eval_every": 10, "watch": "context"})
    last = r.frames[-1]
    labels, means = position_bands(position_losses(s.model, s.data, "cpu", CONTEXT_WINDOWS).losses)
    assert last.bands == labels == ["0", "1", "2-3", "4-7", "8-15", "16-31"] and last.band_losses == means
    assert r.frames[0].band_losses != last.band_losses and max(r.frames[0].band_losses) > 4.0  # ln 103 untrained
    out = " ".join(text_of(r).split())
    assert "the val loss by position in the window on the same 128 val windows at every frame" in out
    assert "positions 0 " in out and "│ 16-31 " in out and ":plot what=context charts each band by step" in out
    plot = run_command(s, "plot", {"what": "context"})
    assert [p.name for p in plot.series] == [f"positions {band}" for band in labels]
    assert plot.series[0].steps == [0, 10, 20] and plot.series[-1].values[-1] == last.band_losses[-1]
    assert "positions 16-31" in " ".join(text_of(plot).split())
    run_command(s, "report", {"path": str(tmp_path / "r.html")})
    page = (tmp_path / "r.html").read_text()
    assert "While it trained (watch=context)" in page and page.count("<th>16-31</th>") == 3
    with pytest.raises(UserError, match="watch=context scores the same val windows"):
        run_command(s, "train", {"steps": 2, "watch": "context", "prompt": "abc"})


def test_plot_context_before_any_context_frames():
    with pytest.raises(UserError, match="there are no context frames; train with :train watch=context first"):
        run_command(session(), "plot", {"what": "context"})


def test_position_bands():
    from minitf_repl.core.context import position_bands

    assert position_bands([1.0] * 64) == (["0", "1", "2-3", "4-7", "8-15", "16-63"], [1.0] * 6)
    assert position_bands([float(i) for i in range(10)])[0] == ["0", "1", "2-3", "4-7", "8-9"]
    assert position_bands([2.0])[0] == ["0"] and position_bands([1.0, 3.0, 5.0])[1] == [1.0, 3.0, 5.0]
    nan = float("nan")
    labels, means = position_bands([nan] * 4 + [1.0, 2.0, 3.0, 4.0])  # a task: the question is not scored
    assert labels == ["4", "5", "6-7"] and means == [1.0, 2.0, 3.5]  # the bands are the answer's
    labels, means = position_bands([1.0, nan, 3.0, nan, nan, nan])
    assert labels == ["0", "1", "2-3", "4-5"] and means[:1] + means[2:3] == [1.0, 3.0] and means[1] != means[1]
