"""The items earlier sweeps left on training and the views, and more of their kind: each test failed before its fix.

A Ctrl-C during one of :train's evaluations waited for all of its batches (on a bigger model with many eval batches,
many seconds) before the run stopped: the evaluation now stops at its next batch, the step stays trained, and a line
says that its val loss was not measured (a stop asked during the step itself skips its evaluation, said so).
Watched frames (`:train watch=attn`, `watch=embed`) held their numbers as Python lists of floats, a list per row:
32 bytes a number, so `eval_every=1` on a long run held many times what the maps are (8 MB a frame for a 256-token
window's four heads). They are held as one array of float32s a frame now (a Grid), read as the same nested lists by
the view, :report and :plot, and written as the same numbers in the JSON; the embed frames share one vocabulary.
`:grad` on a mixture of experts: its step column was one optimizer step on the cross-entropy's gradient alone, while
:train's step adds the gradient of the experts' load-balancing term (moe_aux_weight x aux loss), so the router's step
was not the one training takes. The step now adds it, and a line says so (with the term's size); the other columns
stay the cross-entropy's.
`:compare`: a contender's evaluation inside a segment moved nothing on screen (the bar counts training steps), a long
silent wait on a bigger model, and a Ctrl-C then waited for all of its batches; so did the loss by position read at
the end (256 windows a contender and seed), at 100% of the bar. The bar's label now says "A val 3/20" or
"A by position 64/256" through them, and a stop ends them at their next pass (the loss by position is then left out).
Building a very large model (`:set n_layers=24 d_model=1024`, 300M parameters: many seconds on a CPU) said nothing
until it was done, and a Ctrl-C waited for all of it; where it did stop (an error), the settings already said 24 blocks
while the model was the old one. A build of 50M parameters or more is said first, Ctrl-C cuts any build short
("interrupted"), and the model, its data and the settings stay as they were.
`:plot what=grad_norm` after a blow-up (one norm of 5e4 among norms near 1.5) drew a linear axis on which every other
step lay on the bottom row; so did the lens's ranks 40, 5, 2 and 1 under a rank of 30,000 on a large vocabulary. Where
the values of such a chart (grad_norm, lr, block_grad, lens_rank) span 3 orders of magnitude or more, the axis is on a
log scale, said in the legend and in a line under the chart.
`:load` of a checkpoint of a large model built it (many seconds) without a word, and a Ctrl-C waited for the whole
reading and build before it said "interrupted; nothing changed". A build of 50M parameters or more is said first, and
a Ctrl-C cuts the reading and the build short at once, the session as it was.
Where no bar is drawn (a dumb terminal, `minitf train > run.log 2>&1`), a long evaluation (a minute on a 12 x 768
model) printed nothing between a step's line and its own: its quarters are said as lines now ("val batches: 4/8"),
as other long work's are, each evaluation timed from its own first batch.
`:checks init` and `:checks blind` evaluate fresh models (up to 30M parameters: seconds) and asked for no stop while
they did: a Ctrl-C then waited for every batch. They stop at the next batch now, the checks ending there as a stop
in their training does. So did the evaluation at the end of a whole `:lrfind` run.
"""

import json
import sys

import pytest

from minitf_repl.commands import TrainResult
from minitf_repl.core.inside import attention_maps
from minitf_repl.dispatch import to_json

from test_commands import TINY, Recorder, run, tiny_session
from test_render import plain, text_of


class StopInEvaluation(Recorder):
    """Asks for a stop once the first evaluation has scored `after` batches; counts the batches scored."""

    def __init__(self, after: int = 1):
        super().__init__()
        self.after, self.scored = after, 0

    def on_evaluate(self, done, total):
        self.scored += 1

    def should_stop(self):
        return self.scored >= self.after


def test_a_stop_during_an_evaluation_stops_it_at_its_next_batch():
    s = tiny_session(steps=6, eval_every=3, eval_batches=20)
    hooks = StopInEvaluation(after=2)
    result = run(s, ":train", hooks)
    assert isinstance(result, TrainResult)
    assert hooks.scored == 2  # not 20
    assert result.stopped and result.steps == 3 and s.trainer.step == 3  # the step is kept, trained
    assert result.val_loss is None and result.evals == []
    assert any("evaluation after step 3 was stopped after 2 of 20 batches: its val loss was not measured" in n
               for n in hooks.notices), hooks.notices
    assert s.trainer.history[-1]["val_loss"] is None
    again = run(s, ":train", Recorder())  # the stopped run goes on, and evaluates in full
    assert again.resumed and again.steps == 3 and again.val_loss is not None
    fresh = tiny_session(steps=6, eval_every=3, eval_batches=20)

    class DuringTheStep(Recorder):  # asked during step 3, which evaluates: stopped at once, said so
        def should_stop(self):
            return fresh.trainer.step >= 3

    during_the_step = DuringTheStep()
    result = run(fresh, ":train", during_the_step)
    assert result.stopped and result.steps == 3 and result.val_loss is None
    assert any("evaluation after step 3 was skipped (the stop came during the step)" in n
               for n in during_the_step.notices), during_the_step.notices


def held_bytes(obj, seen=None) -> int:
    """The memory an object holds, through lists, tuples, dicts and attributes (each object counted once)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, (list, tuple)):
        size += sum(held_bytes(v, seen) for v in obj)
    elif isinstance(obj, dict):
        size += sum(held_bytes(k, seen) + held_bytes(v, seen) for k, v in obj.items())
    elif hasattr(obj, "__dict__"):
        size += held_bytes(vars(obj), seen)
    return size


def test_watched_attention_frames_are_held_compactly_and_read_as_before():
    s = tiny_session(steps=3, eval_every=1, eval_batches=1)
    result = run(s, ":train watch=attn prompt=" + "3141592653" * 3)
    assert len(result.frames) == 4
    last = result.frames[-1]
    heads, t = len(last.maps), len(last.tokens)
    numbers = heads * t * t
    assert held_bytes(last.maps) < 6 * numbers + 1000, held_bytes(last.maps)  # float32s; was 32 bytes a number
    ref = attention_maps(s.model, s.data.tokenizer.encode("3141592653" * 3), layer=last.layer).maps[0]
    assert last.maps == ref.tolist() and last.maps[1] == ref[1].tolist() and last.maps[-1][2] == ref[-1][2].tolist()
    assert [row[5:] for row in last.maps[0][5:]] == [row[5:] for row in ref[0].tolist()[5:]]
    doc = to_json(result)
    assert doc["frames"][-1]["maps"] == ref.tolist()
    json.dumps(doc, allow_nan=False)


def test_watched_embed_frames_share_one_vocabulary_and_hold_their_coordinates_compactly():
    from minitf_repl.core.inside import embedding_map

    s = tiny_session(steps=2, eval_every=1, eval_batches=1)
    result = run(s, ":train watch=embed")
    first, last = result.frames[0], result.frames[-1]
    assert first.vocab is last.vocab
    assert last.coords == embedding_map(s.model).coords and first.coords != last.coords
    assert held_bytes(last.coords) < 8 * 2 * len(last.vocab) + 1000
    assert to_json(result)["frames"][-1]["coords"] == embedding_map(s.model).coords


def test_grads_step_on_a_mixture_of_experts_is_the_one_train_takes():
    import torch

    from minitf_repl.core.backprop import backprop, optimizer_step
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.core.inside import scored_text
    from minitf_repl.session import Session

    s = Session(ModelConfig(**{**TINY, "n_experts": 4, "moe_aux_weight": 1.0}),
                TrainConfig(steps=2, batch_size=4, eval_every=2, eval_batches=1, optimizer="adamw"),
                data_spec="sort:4", device_name="cpu")
    run(s, ":train")
    ids = s.data.tokenizer.encode("314159=113459")
    model, trainer = s.model, s.trainer
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    inputs, targets, _ = scored_text(model, ids, None, "test")
    model.train()  # what :train's loss is (dropout is 0: the same forward as the view's)
    loss = model.loss(model(inputs)[0], targets)
    model.eval()
    aux = model.moe_aux_loss()
    assert aux is not None
    grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    expected, _ = optimizer_step(trainer, params, grads)
    done = backprop(model, ids, trainer=trainer)
    # a step 2,000 times under the largest is rounding's to judge, not 1e-3 of itself: on an AMD Zen 3 one of 4e-05
    # (a parameter this one text barely reaches, whose AdamW step is its moments' rounding) read 4.8e-05 against 3.9e-05
    assert [t.step for t in done.tensors] == pytest.approx(expected, rel=1e-3, abs=1e-4 * max(expected))
    # the same forward as the view's: its aux loss, read here since a view leaves no routing stats behind (sweep ao)
    assert done.step_aux == pytest.approx(model.config.moe_aux_weight * aux.item(), rel=1e-5)
    words = plain(run(s, ":grad 314159=113459"))
    assert "adds the experts' load-balancing term" in words and "cross-entropy alone" in words
    assert "load-balancing" not in plain(run(tiny_session(), ":grad 314159=113459"))


def test_a_caller_running_steps_in_chunks_keeps_its_evaluations():
    s = tiny_session(steps=6, eval_every=3, eval_batches=2)
    trainer = s.trainer
    trainer.start_run(6)
    summary = trainer.run(should_stop=lambda: trainer.step >= 3)  # true at the step it evaluates after
    assert summary.steps == 3 and summary.val_loss is not None and trainer.history[-1]["val_loss"] is not None


class CompareRecorder(Recorder):
    """Records each contender's evaluation progress; asks for a stop once `stop_after` passes were reported."""

    def __init__(self, stop_after: int | None = None):
        super().__init__()
        self.scored, self.stop_after = [], stop_after

    def on_compare_evaluate(self, label, done, total, what="val"):
        self.scored.append((label, done, total, what))

    def should_stop(self):
        return self.stop_after is not None and len(self.scored) >= self.stop_after


def test_compare_says_how_far_each_evaluation_is_and_a_stop_ends_one_at_once():
    s = tiny_session(eval_batches=3)
    hooks = CompareRecorder()
    result = run(s, ":compare lr=0.01 lr=0.02 steps=2 eval_every=2", hooks)
    assert not result.stopped and all(o.band_losses for o in result.outcomes)
    labels = ("lr=0.01", "lr=0.02")
    assert [e for e in hooks.scored if e[3] == "val"] == [(label, done, 3, "val") for label in labels
                                                          for done in (1, 2, 3)], hooks.scored
    by_position = [e for e in hooks.scored if e[3] == "by position"]
    assert {e[0] for e in by_position} == set(labels) and all(e[1] <= e[2] for e in by_position)
    assert [e for e in by_position if e[1] == e[2]] == [(label, 256, 256, "by position") for label in labels]
    stopping = CompareRecorder(stop_after=2)
    result = run(tiny_session(eval_batches=30), ":compare lr=0.01 lr=0.02 steps=2 eval_every=2", stopping)
    assert result.stopped and len(stopping.scored) == 2  # not 30, nor B's too
    late = CompareRecorder(stop_after=7)  # the six val batches, then the first pass of the loss by position
    result = run(tiny_session(eval_batches=3), ":compare lr=0.01 lr=0.02 steps=2 eval_every=2", late)
    assert late.scored[6][3] == "by position" and len(late.scored) == 7
    assert not any(o.band_losses for o in result.outcomes) and result.outcomes[0].final.step == 2
    assert any("loss by position is left out" in n for n in late.notices)


def test_compares_bar_says_the_evaluation_under_way():
    import io

    from rich.console import Console

    from minitf_repl.render import RichReporter

    c = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)
    hooks = RichReporter(c, live=True)
    hooks.on_compare_start(["A", "B"], 4, 1)
    hooks.on_compare_evaluate("A", 3, 20)
    assert "A val 3/20" in hooks._progress.tasks[0].description
    hooks.on_compare_evaluate("A", 20, 20)
    assert hooks._progress.tasks[0].description == "compare"
    hooks.close()


def test_a_large_build_is_said_first_and_a_ctrl_c_leaves_the_model_and_settings_as_they_were(monkeypatch):
    import io

    from rich.console import Console

    from minitf_repl import session as session_module
    from minitf_repl.core import train as train_module
    from minitf_repl.core.interrupts import may_cut_short
    from minitf_repl.dispatch import FrontDoor

    s = tiny_session()
    old_model, old_config, old_train = s.model, s.model_config, s.train_config
    monkeypatch.setattr(session_module, "BUILD_NOTICE_PARAMETERS", 1)  # a tiny model stands in for a 300M one
    hooks = Recorder()
    run(s, ":set n_layers=2", hooks)
    assert any(n.startswith("building a model of") and "Ctrl-C stops it" in n for n in hooks.notices), hooks.notices
    assert s.model_config.n_layers == 2 and s.model is not old_model
    old_model, old_config = s.model, s.model_config

    cut = []

    def interrupted(*args, **kwargs):  # a Ctrl-C arriving part-way through the build, where the handler raises
        cut.append(may_cut_short())
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "Trainer", interrupted)
    out = Console(file=io.StringIO(), width=100, color_system=None)
    assert FrontDoor(s, out).run_line(":set n_layers=3 seed=7") != "ok"
    assert cut == [True]  # the build runs where a Ctrl-C raises at once
    assert "interrupted" in out.file.getvalue()
    assert s.model is old_model and s.model_config == old_config and s.train_config == old_train
    assert run(s, ":train steps=1").steps == 1  # the session goes on with the old model


def chart_rows(text: str) -> list[str]:
    """The rows of a chart's grid (between the axis and the bottom line)."""
    lines = text.splitlines()
    return [line.split("┤" if "┤" in line else "│", 1)[1] for line in lines if "┤" in line or "│" in line]


def test_a_gradient_norm_chart_after_a_blow_up_is_on_a_log_axis():
    s = tiny_session(steps=30, eval_every=30, eval_batches=1)
    run(s, ":train")
    s.trainer.history[20]["grad_norm"] = 5e4  # one blow-up, which clipping caught
    drawn = text_of(run(s, ":plot what=grad_norm"), width=80)
    words = " ".join(drawn.split())
    rows = chart_rows(drawn)
    spread = [r for r in rows if "•" in r]
    assert len(spread) > 2, words  # on a linear axis: the spike's row and one row for all the rest
    assert "(log scale)" in words and "orders of magnitude" in words and "y axis is on a log scale" in words
    s.trainer.history[20]["grad_norm"] = 2.0  # no blow-up: a linear axis, nothing said
    words = plain(run(s, ":plot what=grad_norm"), width=80)
    assert "log scale" not in words


def test_loading_a_large_checkpoint_is_said_first_and_a_ctrl_c_stops_it_at_once(monkeypatch, tmp_path):
    from minitf_repl import session as session_module
    from minitf_repl.core import checkpoint as ckpt
    from minitf_repl.core.errors import UserError
    from minitf_repl.core.interrupts import may_cut_short

    s = tiny_session(steps=2, eval_every=2, eval_batches=1)
    s.checkpoint_dir = tmp_path
    run(s, ":train")
    run(s, ":save kept")
    run(s, ":train steps=1")
    monkeypatch.setattr(session_module, "BUILD_NOTICE_PARAMETERS", 1)  # a tiny model stands in for a 300M one
    hooks = Recorder()
    assert run(s, ":load kept", hooks).step == 2
    assert any(n.startswith("building kept's model of") and "Ctrl-C stops it" in n for n in hooks.notices)
    run(s, ":train steps=1")
    model, step = s.model, s.trainer.step
    cut = []
    real = ckpt.restore

    def interrupted(*args, **kwargs):  # a Ctrl-C arriving part-way through the build
        real(*args, **kwargs)
        cut.append(may_cut_short())
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt, "restore", interrupted)
    with pytest.raises(UserError, match="load of kept interrupted; nothing changed"):
        run(s, ":load kept")
    assert cut == [True] and s.model is model and s.trainer.step == step


def test_a_long_evaluation_says_its_quarters_where_no_bar_is_drawn(monkeypatch):
    import io

    from rich.console import Console

    from minitf_repl.render import live

    clock = [100.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    console = Console(file=io.StringIO(), width=100, color_system=None)
    reporter = live.RichReporter(console, live=False, lines=True)
    for done in range(1, 9):  # a quick evaluation: nothing said
        reporter.on_evaluate(done, 8)
    assert console.file.getvalue() == ""
    for done in range(1, 9):  # a second a batch
        clock[0] += 1.0
        reporter.on_evaluate(done, 8)
    assert console.file.getvalue().splitlines() == ["val batches: 2/8", "val batches: 4/8", "val batches: 6/8",
                                                    "val batches: 8/8"]
    for done in range(1, 9):  # the next evaluation, quick again: its own time, nothing said
        reporter.on_evaluate(done, 8)
    assert len(console.file.getvalue().splitlines()) == 4


def test_the_lens_ranks_on_a_large_vocabulary_are_on_a_log_axis():
    from minitf_repl.commands.train import PlotResult, PlotSeries

    steps = [0, 10, 20, 30, 40]
    result = PlotResult("lens_rank", [PlotSeries("embed", steps, [31000, 25000, 20000, 18000, 17000]),
                                      PlotSeries("blocks.0", steps, [30000, 40, 5, 2, 1])])
    drawn = text_of(result, width=80)
    rows_of_blocks = [r for r in chart_rows(drawn) if "▲" in r]
    assert len(rows_of_blocks) == 5, drawn  # each rank on a row of its own: 40, 5, 2 and 1 were all on the bottom
    assert "(log scale)" in drawn


class StopOnCall(Recorder):
    """should_stop() turns True from its `at`-th call on."""

    def __init__(self, at: int):
        super().__init__()
        self.at, self.calls = at, 0

    def should_stop(self):
        self.calls += 1
        return self.calls >= self.at


def test_a_stop_during_the_init_checks_evaluation_ends_it_at_its_next_batch():
    s = tiny_session(eval_batches=50)
    hooks = StopOnCall(at=3)  # before the check, before its first batch, then during it
    result = run(s, ":checks init", hooks)
    assert result.stopped == "init" and hooks.calls == 3, (result.stopped, hooks.calls)


def test_a_stop_during_the_blind_checks_evaluation_ends_the_checks():
    s = tiny_session(eval_batches=50)
    data = s.data
    real, read = data.get_batch, []

    def get_batch(split, *args, **kwargs):
        read.append(split)
        return real(split, *args, **kwargs)

    data.get_batch = get_batch
    hooks = StopOnCall(at=6)  # before the check, before each of its 3 steps, before the 1st batch, then during it
    result = run(s, ":checks blind steps=3", hooks)
    assert result.stopped == "blind" and hooks.calls == 6, (result.stopped, hooks.calls)
    assert read.count("val") < 10  # the checks' own few and one of the evaluation's, not its 50


def test_a_stop_during_lrfinds_last_evaluation_ends_it_at_its_next_batch():
    s = tiny_session(eval_batches=50)
    data = s.data
    real, read = data.get_batch, []

    def get_batch(split, *args, **kwargs):
        read.append(split)
        return real(split, *args, **kwargs)

    data.get_batch = get_batch

    class StopInEvaluation(Recorder):
        def should_stop(self):
            return read.count("val") >= 1  # once the evaluation has read its first batch

    result = run(s, ":lrfind steps=10", StopInEvaluation())
    assert len(result.test.rates) == 10 and read.count("val") == 1  # the curve whole, the evaluation cut at once
