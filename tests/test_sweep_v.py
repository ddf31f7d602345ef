"""What a user's-eye sweep of the history and comparison views (:plot, :report, :compare, :ls, :lrfind's chart,
:train's loss table, :context, :mistakes) found wrong: each test failed before its fix.

The character chart drew ln V below every curve on its bottom row, labelled as a value it is not, and spanned its
y axis over points it had averaged away (a top label no point was near); the report's line fell under its frame,
its ticks read alike on a narrow range, one step was labelled 'step 1 ... 2', and the history of data switched
away from passed for the data in use. :plot of the default window's seven bands, or of more than six layers, drew
two curves with one glyph; after :ngram it left far counters out without a word (as :compare did); with no model
in the session it told a user who had just trained to train first. :lrfind stopped at low rates drew 2 of its 12
steps. :ls wrapped a checkpoint's details to column 0 at 40 columns, and :mistakes cut its shares and headers to
'…' there. Several lines said what was not so: '(in yellow)' and 'in bold the lowest' where nothing has a style,
'its likeliest token is not the one that came at 52% of them' (of all the predictions, not of the hardest tenth),
'as :train measures it' of other questions, '0 tokens/s' of no step. A stopped :compare timed each contender to
wherever it was when the stop came. :train's live table gave ln(V) only at the end. And the hints of :context,
:lrfind and :mistakes dropped the options the run was made with, so the command they offered measured another
thing ('show=44' of 500 other questions).
"""

import pytest

from minitf_repl.render.chart import Curve, chart
from test_commands import run, tiny_session
from test_render import console, plain, text_of


def drawn(renderable, width=60) -> str:
    c = console(width)
    c.print(renderable)
    return c.file.getvalue()


def grid_rows(shown: str) -> list[str]:
    """The chart's rows (above its x axis), each as drawn."""
    return [line for line in shown.split("└")[0].splitlines() if "┤" in line or "│" in line]


def labels(shown: str) -> list[float]:
    return [float(line.split("┤")[0]) for line in grid_rows(shown) if "┤" in line]


# --- the chart's baseline and its y axis ------------------------------------------------------------------
def test_a_baseline_below_every_curve_is_drawn_at_its_own_value_not_on_the_bottom_row():
    # :plot what=copying of a model worse than a uniform guess on random tokens: losses above ln V = 2.48
    curves = [Curve("first copy", [60, 70, 80], [2.9, 2.85, 2.8]), Curve("repeat", [60, 70, 80], [2.6, 2.7, 2.75])]
    shown = drawn(chart(curves, 60, 12, baseline=2.48, baseline_label="ln(V) = 2.48, a uniform guess"))
    rows = grid_rows(shown)
    line = next(k for k, row in enumerate(rows) if "╌" in row)
    top, bottom = labels(shown)[0], labels(shown)[-1]
    assert bottom <= 2.48 + 1e-9 < top  # the axis reaches down to the line it draws
    value = top - (top - bottom) * line / (len(rows) - 1)  # what the row the line is on stands for
    assert value == pytest.approx(2.48, abs=(top - bottom) / (len(rows) - 1) / 2 + 1e-9)
    far = drawn(chart(curves, 60, 12, baseline=0.1, baseline_label="ln(V) = 0.10"))  # the bottom row read 2.6
    assert "╌" not in far.split("└")[0] and "ln(V)" not in far  # far below the curves: left out, as one far above


def test_the_y_axis_spans_the_points_drawn_not_the_steps_averaged_away_in_a_column():
    # 300 steps of a gradient norm in 30 columns: ten steps a column, averaged; one spike of 18.7 among 1.0s
    values = [1.0] * 300
    values[150] = 18.7
    shown = drawn(chart([Curve("grad_norm", list(range(1, 301)), values)], 40, 12))
    rows = grid_rows(shown)
    assert "•" in rows[0] and "•" in rows[-1]  # the top label is a value a point is drawn at, and so is the bottom
    assert labels(shown)[0] == pytest.approx((9 * 1.0 + 18.7) / 10, abs=0.01)


def test_the_reports_ln_v_line_below_every_loss_is_inside_the_chart_not_under_its_frame():
    import re

    from minitf_repl.commands.train import PlotSeries
    from minitf_repl.report import loss_chart_svg

    # a run blown up by a rate too high for it: every loss above ln(12) = 2.48
    svg = loss_chart_svg([PlotSeries("train", [1, 2, 3], [3.0, 5.0, 9.0])], vocab_size=12)
    rect = re.search(r'<rect x="[\d.]+" y="([\d.]+)" width="[\d.]+" height="([\d.]+)"', svg)
    top, bottom = float(rect[1]), float(rect[1]) + float(rect[2])
    line = float(re.search(r'<line x1="[\d.]+" x2="[\d.]+" y1="([\d.]+)"', svg)[1])
    assert top <= line <= bottom
    ticks = [float(t) for t in re.findall(r'text-anchor="end">([\d.]+)</text>', svg)]
    assert min(ticks) <= 2.48  # the axis reads down to it


# --- :lrfind's chart ------------------------------------------------------------------------------------------
def lrfind_result(smoothed, steps=30, steepest=None, blown_at=None):
    from minitf_repl.commands.rates import LrfindResult
    from minitf_repl.core.lrfind import LrRange

    rates = [1e-5 * (1e5 ** (k / (steps - 1))) for k in range(len(smoothed))]
    k_low = smoothed.index(min(smoothed))
    test = LrRange("muon", rates, list(smoothed), list(smoothed), steepest, rates[k_low], smoothed[k_low], blown_at,
                   1e-5, 1.0, steps)
    return LrfindResult(test, "sort", 0.01, 1337)


def test_a_stopped_lrfind_whose_loss_has_not_fallen_yet_draws_every_step_it_ran():
    # Ctrl-C after 12 steps at rates too low to matter: the smoothed loss wobbles by 0.006 around 2.455
    wobble = [2.455, 2.452, 2.457, 2.456, 2.458, 2.454, 2.456, 2.455, 2.457, 2.456, 2.455, 2.456]
    shown = text_of(lrfind_result(wobble), 80)
    grid = shown.split("└")[0]
    assert grid.count("•") + grid.count("■") == 12  # the chart stopped at the second step: 2 points of 12
    axis = shown.split("└")[1].splitlines()[1].split()
    assert axis[1] != axis[2]  # the x axis's two ends read "lr 1e-05" and "1e-05"
    assert "the smoothed loss is lowest at 1.5e-05 (2.452)" in plain(lrfind_result(wobble), 80)


def test_lrfind_still_cuts_the_blow_up_off_its_chart():
    climb = [4.6, 4.5, 4.2, 3.8, 3.6, 3.7, 4.0, 4.7, 6.0, 9.0, 14.0]
    shown = text_of(lrfind_result(climb, steps=11, steepest=1e-3, blown_at=1.0), 80)
    assert max(labels(shown)) < 5  # drawn up to where the loss climbs back past where it started, not to 14
    assert "the smoothed loss falls fastest at 0.001; lowest at" in plain(lrfind_result(climb, 11, 1e-3, 1.0), 80)


# --- :ls --------------------------------------------------------------------------------------------------------
def test_ls_in_a_narrow_terminal_indents_every_line_of_a_checkpoints_details_under_its_name():
    from minitf_repl.commands import LsResult
    from minitf_repl.core.checkpoint import CheckpointInfo

    rows = [CheckpointInfo("autosave", 60, 2.3202, "pydoc", 6_700_000, "2026-12-04T21:23:41.355Z"),
            CheckpointInfo("kept-20261204-212301", 40, 2.3693, "pydoc", 6_700_000, "2026-12-04T21:23:01.831Z")]
    lines = text_of(LsResult(rows, "/ck"), 40).splitlines()
    names = [k for k, line in enumerate(lines) if line.strip() in ("autosave", "kept-20261204-212301")]
    assert len(names) == 2
    details = lines[names[0] + 1 : names[1]] + lines[names[1] + 1 : names[1] + 3]
    assert len(details) == 4 and all(line.startswith("  ") for line in details), details  # '6.4 MiB, saved' at col 0


# --- :plot after :ngram ---------------------------------------------------------------------------------------
def test_plot_says_when_the_counters_lie_too_far_from_the_curves_to_be_drawn():
    from minitf_repl.commands.train import PlotLevel, PlotResult, PlotSeries

    # :train steps=1 on sort, then :ngram: the losses 2.35-2.46, the bigram counter 1.95, the best (n=5) 1.33
    series = [PlotSeries("train", [1], [2.4577]), PlotSeries("val", [1], [2.3467])]
    result = PlotResult("loss", series, 12, [PlotLevel(2, 1.952), PlotLevel(5, 1.333)])
    shown = text_of(result, 80)
    assert "┄" not in shown  # neither is drawn: far below a chart of 0.11 nats
    said = " ".join(shown.split())
    assert ("the 2-gram and 5-gram counters (val 1.952 and 1.333) lie far below these curves, so the chart leaves "
            "them out") in said
    near = PlotResult("loss", [PlotSeries("train", [1, 2, 3], [2.4, 2.0, 1.5])], 12, [PlotLevel(2, 1.952)])
    assert "leaves" not in plain(near, 80) and "┄2 2-gram counter 1.95" in text_of(near, 80)


# --- :context ----------------------------------------------------------------------------------------------------
def test_context_past_the_window_says_in_yellow_only_where_there_is_colour(sentence_session):
    s = sentence_session(batch_size=4, eval_batches=2)
    run(s, ":set pos_encoding=rope")
    result = run(s, ":context length=48 windows=16 counter=0")
    said = plain(result)  # a console without colour: NO_COLOR, a pipe, a log
    assert "positions 24-47 lie past it" in said and "yellow" not in said
    import io

    from rich.console import Console

    from minitf_repl.render.renderers import render

    coloured = Console(file=io.StringIO(), width=100, color_system="standard", force_terminal=True)
    render(result, coloured)
    assert "(in yellow)" in coloured.file.getvalue()


# --- :plot --json ------------------------------------------------------------------------------------------------
def test_the_plot_schema_names_every_chart_plot_draws():
    import json

    from minitf_repl.commands.train import PLOT_WHAT
    from minitf_repl.schema import schema_path
    from minitf_repl.commands import REGISTRY

    shipped = json.loads(schema_path(REGISTRY["plot"]).read_text())
    what = shipped["properties"]["what"]["description"]
    assert all(kind in what.split(" | ") for kind in PLOT_WHAT), what  # it said "loss | lr | grad_norm"
    assert "positions" in shipped["properties"]["series"]["items"]["properties"]["name"]["description"]


# --- :mistakes ---------------------------------------------------------------------------------------------------
def test_mistakes_says_the_share_of_wrong_guesses_is_of_every_prediction_not_of_the_hardest_tenth():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import HardToken, TextMistakes

    # the pydoc model at step 304: 52% of all 4,096 guesses wrong; of the hardest tenth, every one (100%)
    found = TextMistakes(64, 4096, 1.961, [HardToken("/local/lib", "/", 4e-5, "e", 0.214)], 0.278, 0.5217)
    said = plain(MistakesResult("pydoc", 0, None, found, 304))
    assert "at 52% of them" not in said  # "them" read as the hardest tenth, where the guess is wrong at 100%
    assert ("the hardest tenth of the predictions carry 28% of the loss; of all 4,096, 52% are wrong guesses (the "
            "model's likeliest token is not the one that came)") in said  # "came at 52%" read as a place


# --- :compare ----------------------------------------------------------------------------------------------------
def compare_result(**kw):
    from minitf_repl.commands.lab import CompareResult
    from minitf_repl.core.compare import Evaluation, Outcome

    outcomes = [Outcome(label, 10_016, [Evaluation(label, 20, loss, None)], 6_000.0, 0.7,
                        {} if not k else {"d_ff": 32}, None, 128, ["4", "5", "6-7"], bands)
                for k, (label, loss, bands) in enumerate([("n_layers=1", 1.7528, [1.750, 1.923, 1.809]),
                                                          ("d_ff=32", 1.7805, [1.764, 1.938, 1.801])])]
    return CompareResult(outcomes, 20, 1, "sort:4", False, **kw)


def test_compare_by_position_marks_the_lowest_where_bold_cannot_show():
    text = text_of(compare_result())  # a console with no styles: a pipe, a file, a log
    assert "in bold the lowest" not in " ".join(text.split())
    rows = {line.split()[1]: line.split()[2:] for line in text.splitlines() if line.strip()[:1] in "●▲"
            and len(line.split()) == 5}
    assert rows == {"n_layers=1": ["1.750*", "1.923*", "1.809"], "d_ff=32": ["1.764", "1.938", "1.801*"]}
    assert "* the lowest" in " ".join(text.split())


# --- :plot with no history -----------------------------------------------------------------------------------
def test_plot_in_a_session_with_no_model_names_the_autosave_of_the_last_run_not_train_first(checkpoint_dir):
    from minitf_repl.core.errors import UserError
    from minitf_repl.session import Session
    from test_cli import assert_one_error_line, invoke

    with pytest.raises(UserError, match=r"^there is no training history yet; :train first, then :plot$"):
        run(Session(), ":plot")  # nothing saved yet: train first
    run(tiny_session(), ":train")  # the autosave, step 6
    with pytest.raises(UserError) as e:
        run(Session(), ":plot what=lr")  # a REPL just started: its session has no model yet
    assert ":load autosave, then :plot what=lr charts the last run saved (step 6)" in str(e.value)
    assert ":train first" not in str(e.value)
    fresh = Session()
    run(fresh, ":gen ab n=2")  # a model of its own, untrained: train it, or chart the last run
    assert str(pytest.raises(UserError, run, fresh, ":plot").value).endswith(
        ":train first, then :plot, or :load autosave, then :plot charts the last run saved (step 6)")
    line = assert_one_error_line(invoke("plot"))  # `minitf train`, then `minitf plot`: a new session each
    assert "minitf --load autosave plot charts the last run saved (step 6)" in line and "minitf train" not in line


def test_contexts_hint_for_a_narrower_error_keeps_the_seed_and_counter_asked_for(sentence_session):
    s = sentence_session(batch_size=4, eval_batches=2)
    said = plain(run(s, ":context windows=16 counter=3 seed=5"))
    assert ":context windows=64 counter=3 seed=5 halves it" in said  # it said ':context windows=64': counter 6, seed 0
    assert ":context windows=64 counter=0 halves it" in plain(run(s, ":context windows=16 counter=0"))
    assert ":context windows=64 halves it" in plain(run(s, ":context windows=16"))


def task_mistakes_result(questions=500, seed=0):
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import TaskMistakes, WrongAnswer

    found = TaskMistakes(questions, 46, 44, 50, [WrongAnswer("4302=", "0133", "0234", 1)], [0.33, 0.568, 0.668, 0.592],
                         [0.33, 0.454, 0.632, 0.638], [165, 153, 118, 36])
    return MistakesResult("sort", seed, found, None, 60)


def test_mistakes_on_a_task_in_a_narrow_terminal_shows_every_share_by_answer_character():
    text = text_of(task_mistakes_result(), 40)
    assert "…" not in text  # 'wrong, the true answer befo…  …  …  …  …': every share cut
    for share in ("33.0%", "56.8%", "66.8%", "59.2%", "45.4%", "63.2%", "63.8%"):
        assert share in text
    assert all(n in text.split() for n in ("165", "153", "118", "36"))
    assert "the first column is how training sees it" in " ".join(text.split())  # the shares are columns here
    assert "33.0%" in text_of(task_mistakes_result(), 100)


def test_mistakes_says_as_train_measures_it_only_of_the_questions_train_asks():
    default = plain(task_mistakes_result(500, 0))
    assert "accuracy 90.8%, as :train measures it" in default
    other = plain(task_mistakes_result(50, 3))
    assert "as :train measures it" not in other  # 50 questions of seed 3: not the 500 of seed 0 :train asks
    assert "accuracy 8.0% (:train's accuracy asks 500 questions, seed 0)" in other


def test_mistakes_on_a_text_in_a_narrow_terminal_cuts_what_came_before_not_the_headers_and_guesses():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import HardToken, TextMistakes

    hard = [HardToken("effects for equality with other objects =", "=", 8e-4, "_", 0.2),
            HardToken("  (", "V", 8e-4, ")", 0.3)]
    text = text_of(MistakesResult("pydoc", 0, None, TextMistakes(16, 1024, 2.075, hard, 0.26, 0.57), 304), 40)
    assert "…" not in text  # 'ca…', 'gue…' and 'ects␣for␣equality␣with…'
    assert "came" in text and "guess" in text and "␣objects␣=" in text  # the last characters before it stay
    wide = text_of(MistakesResult("pydoc", 0, None, TextMistakes(16, 1024, 2.075, hard, 0.26, 0.57), 304), 100)
    assert "for␣equality␣with␣other␣objects␣=" in wide


# --- :report ------------------------------------------------------------------------------------------------------
def test_the_reports_loss_chart_says_where_the_data_in_use_came_in_as_plot_does(tmp_path):
    s = tiny_session(data="sort:4", steps=4, eval_every=2)
    run(s, ":train")
    run(s, ":data reverse:4")  # the same vocabulary: the model and its history stay
    run(s, ":train steps=4")
    assert "came in after step 4" in plain(run(s, ":plot"))
    run(s, f":report {tmp_path}/r.html")
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    loss = html[html.index("<h2>Loss</h2>"):html.index("<h2>Attention</h2>")]
    assert "reverse:4 came in after step 4" in loss  # the curves before it are sort:4's


# --- :train's summary -------------------------------------------------------------------------------------------
def test_a_train_stopped_before_its_first_step_states_no_speed_of_0_tokens_a_second():
    from test_commands import Recorder

    said = plain(run(tiny_session(), ":train steps=20", Recorder(stop_after=0)))
    assert "stopped at step 0 of 20" in said and "0 tokens/s" not in said  # no step ran: no speed to state
    assert "tokens/s" in plain(run(tiny_session(), ":train steps=20", Recorder(stop_after=2)))


# --- :train's live loss table ----------------------------------------------------------------------------------
def test_the_live_loss_table_gives_ln_v_while_the_run_goes_as_the_final_one_does():
    from minitf_repl.render import RichReporter

    class Watching(RichReporter):
        seen = None

        def on_step(self, info):
            super().on_step(info)
            if info.val_loss is not None and self.seen is None:
                shown = console(100)
                shown.print(self.training_view())
                self.seen = shown.file.getvalue()

    c = console(100)
    reporter = Watching(c, live=True)
    try:
        run(tiny_session(), ":train", reporter)
    finally:
        reporter.close()
    assert reporter.seen is not None and "step" in reporter.seen
    assert "ln(V) = ln(12) = 2.48: the loss of a uniform guess" in " ".join(reporter.seen.split())


def test_the_reports_chart_of_one_step_does_not_label_its_axis_with_a_step_never_run():
    import re

    from minitf_repl.commands.train import PlotSeries
    from minitf_repl.report import loss_chart_svg

    svg = loss_chart_svg([PlotSeries("train", [1], [2.45]), PlotSeries("val", [1], [2.35])], vocab_size=12)
    steps = re.findall(r'text-anchor="middle">(\d+)</text>', svg)
    assert steps and set(steps) == {"1"}  # ':train steps=1', then :report: the axis read 1 and 2


def test_the_reports_y_axis_labels_are_distinct_on_a_narrow_range_as_the_terminal_charts_are():
    import re

    from minitf_repl.commands.train import PlotSeries
    from minitf_repl.report import loss_chart_svg

    svg = loss_chart_svg([PlotSeries("train", [1, 2, 3], [0.17055, 0.17101, 0.17203])])
    ticks = re.findall(r'text-anchor="end">([^<]+)</text>', svg)
    assert len(ticks) == 3 and len(set(ticks)) == 3, ticks  # '0.171', '0.171', '0.172'


# --- :plot of many curves -------------------------------------------------------------------------------------
def legend_glyphs(shown: str) -> list[str]:
    import re

    # not the glyphs a curve, or some of its points, are under
    legend = re.sub(r"\((\d+ of \d+ points )?hidden under [^)]*\)", "", shown.split("└")[1]).splitlines()[2:]
    return [word for line in legend for word in line.split() if len(word) == 1 and not word.isalnum()]


def test_plot_of_the_default_windows_seven_bands_gives_each_band_a_glyph_of_its_own():
    from minitf_repl.commands.train import PlotResult, PlotSeries

    bands = ["0", "1", "2-3", "4-7", "8-15", "16-31", "32-63"]  # :train watch=context at max_seq_len=64
    series = [PlotSeries(f"positions {b}", [0, 100, 200], [3.0 - k * 0.1, 2.5 - k * 0.1, 2.2 - k * 0.1])
              for k, b in enumerate(bands)]
    glyphs = legend_glyphs(text_of(PlotResult("context", series, 103), 100))
    assert len(glyphs) == 7 and len(set(glyphs)) == 7, glyphs  # '● positions 0' and '● positions 32-63'


def test_plot_of_more_layers_than_glyphs_draws_a_spread_of_them_and_says_so():
    from minitf_repl.commands.train import PlotResult, PlotSeries
    from minitf_repl.render.chart import MARKS

    layers = ["embed", *(f"blocks.{k}" for k in range(12))]  # a 12-block model's lens: 13 curves
    series = [PlotSeries(name, [0, 50, 100], [40.0 - k, 20.0 - k, 5.0 + k / 10]) for k, name in enumerate(layers)]
    shown = text_of(PlotResult("lens_rank", series), 100)
    glyphs = legend_glyphs(shown)
    assert len(glyphs) == len(set(glyphs)) <= len(MARKS)  # no two curves under one glyph
    said = " ".join(shown.split())
    assert "embed" in said and "blocks.11" in said  # the first and the last are among them
    assert f"{len(glyphs)} of the 13 curves drawn" in said


# --- a stopped :compare's time column ----------------------------------------------------------------------------
def test_a_stopped_compare_times_each_contender_to_the_last_evaluation_all_of_them_reached(monkeypatch):
    from minitf_repl.core import train as core_train
    from test_commands import Recorder

    class StopAfter(Recorder):
        def __init__(self, steps):
            super().__init__()
            self.done, self.after = 0, steps

        def on_compare_step(self, done, total):
            self.done = done

        def should_stop(self):
            return self.done >= self.after

    from types import SimpleNamespace

    from minitf_repl.core import compare as core_compare

    step, clock = core_train.Trainer._forward_backward, [0.0]

    def timed(self, *args):  # compare's clock moves a second a training step: its times count steps
        clock[0] += 1.0
        return step(self, *args)

    monkeypatch.setattr(core_train.Trainer, "_forward_backward", timed)
    monkeypatch.setattr(core_compare, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    # 2 contenders, an evaluation every 4 steps: both reach step 4 (8 steps), then the first trains 4 more and the
    # second 1 before the stop: it said 0.2s against 0.1s, as if the first were twice as slow
    result = run(tiny_session(), ":compare lr=0.001 lr=0.01 steps=12 eval_every=4", StopAfter(13))
    assert result.stopped and [len(o.curve) for o in result.outcomes] == [1, 1]
    assert [o.seconds for o in result.outcomes] == [4.0, 4.0]  # 4 steps each, to step 4 (it said 9 and 4)
    said = " ".join(plain(result).split())
    assert "the times are to step 4, the last evaluation every contender reached" in said
    early = run(tiny_session(), ":compare lr=0.001 lr=0.01 steps=12 eval_every=4", StopAfter(2))
    assert all(o.seconds == 0 for o in early.outcomes)
    assert "0.0s" not in plain(early)  # no evaluation reached: no time to state


def test_a_report_of_weights_loaded_from_elsewhere_does_not_say_no_training_yet():
    from minitf_repl.report import ReportData, build_report

    def page(weights_from):
        data = ReportData("minitf report: pydoc, step 0", {"model": {}, "train": {}, "gen": {}, "data": "pydoc"}, [],
                          50257, "ab", [], [], weights_from=weights_from)
        html = build_report(data)
        return html[html.index("<h2>Loss</h2>"):html.index("<h2>Attention</h2>")]

    assert "No training yet" in page(None)
    loaded = page("hf:/models/gpt2")  # GPT-2's weights, trained elsewhere: no history here
    assert "No training yet" not in loaded and "hf:/models/gpt2" in loaded


def test_compare_says_when_the_counters_lie_too_far_from_its_curves_to_be_drawn():
    from minitf_repl.commands.train import PlotLevel

    result = compare_result(counters=[PlotLevel(2, 1.0), PlotLevel(5, 0.2)])  # the curves end near 1.75
    said = " ".join(text_of(result).split())
    assert ("the 2-gram and 5-gram counters (val 1.000 and 0.200) lie far below these curves, so the chart leaves "
            "them out") in said


def test_a_chart_of_one_step_names_that_step_once_on_its_x_axis():
    shown = drawn(chart([Curve("train", [1], [2.45]), Curve("val", [1], [2.35], "×")], 60, 8))
    axis = shown.split("└")[1].splitlines()[1].split()
    assert axis == ["step", "1"]  # 'step 1 ... 1': the one step at both ends
    two = drawn(chart([Curve("train", [1, 2], [2.45, 2.4])], 60, 8)).split("└")[1].splitlines()[1].split()
    assert two == ["step", "1", "2"]


def test_contexts_hint_for_other_windows_keeps_the_windows_and_counter_asked_for(sentence_session):
    import dataclasses

    s = sentence_session(batch_size=4, eval_batches=2)
    run(s, ":train steps=3")
    result = run(s, ":context windows=16 counter=3 seed=5")
    worse = dataclasses.replace(result, curve=dataclasses.replace(result.curve, far_gain=-1.0, far_error=0.01))
    said = plain(worse)
    assert "reading more made this model worse there" in said
    assert "(:context windows=16 counter=3 seed=6 scores other windows)" in said  # it said ':context seed=6'
    # (fewer than the text's 896 windows: by default, 2,730 of them, it scores each of those once)
    assert ":context windows=1024 counter=3 halves it" in plain(run(s, ":context windows=256 counter=3"))


def test_lrfinds_hints_repeat_the_range_and_length_the_test_ran_with():
    # ':lrfind steps=40 low=0.0001 high=2', run out with the loss still falling at its last rate
    falling = [4.6 - 0.05 * k for k in range(40)]
    result = lrfind_result(falling, steps=40, steepest=1e-3)
    result.test.low, result.test.high = 1e-4, 2.0
    result.test.rates = [1e-4 * (2e4 ** (k / 39)) for k in range(40)]
    result.test.lowest = result.test.rates[-1]
    result.lr = 5.0
    said = plain(result, 100)
    assert ":lrfind low=0.0001 high=15 steps=40 reads on past it" in said  # it said ':lrfind high=15'
    assert ":lrfind low=0.0001 high=2 steps=40 seed=1338" in said  # it said ':lrfind seed=1338': 100 steps of 1e-5..1


def test_mistakes_hint_to_list_them_all_asks_the_same_questions():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import TaskMistakes, WrongAnswer

    found = TaskMistakes(2000, 60, 44, 856, [WrongAnswer("4302=", "0133", "0234", 1)] * 10, [0.1] * 4, [0.1] * 4,
                         [20, 20, 10, 10])
    said = plain(MistakesResult("sort", 3, found, None, 60))  # ':mistakes n=2000 seed=3'
    assert ":mistakes n=2000 show=44 seed=3 lists them all" in said  # ':mistakes show=44': 500 other questions
    none = TaskMistakes(50, 0, 0, 50, [], [0.0] * 4, [0.0] * 4, [0, 0, 0, 0])
    assert ":mistakes n=500 seed=3 asks more" in plain(MistakesResult("sort", 3, none, None, 60))
