"""What a user's-eye sweep of watching a model learn (`:train watch=`, then :plot and :report) found: each test
failed before its fix.

The time the frames took was said nowhere: the loss table's elapsed column, tokens/s and the summary's seconds all
leave it out, and a watch=context frame (128 val windows) took longer than the evaluation it was drawn at, so a run
with eval_every=1 took twice the time its table and summary said, without a word. `:report` after a run watched at
every step wrote every frame into the page: 201 frames of watch=attn on a 64-token prompt made a 155 MB page. A
terminal that cannot redraw (TERM=dumb) and a one-shot `minitf train --watch` logging its progress showed no frame
until the run's end. A heads frame said "the repeat can be read off the first copy" of a repeat that cost more than
the first copy. A wide, short terminal (200x40) fitted an attention map taller than the screen, and an 80x24 one
could not hold the loss table and a heads or embed frame together: the live display then showed the bar alone, the
whole run. A stopped run gone on with another view dropped the frames before the stop without a word. The one-shot
shell's watch errors named the REPL's options (`add watch=attn`). `:plot` of the frames after an unwatched :train
did not say the model had trained on since. A frame quoted the end of a long prompt as the prompt, and an embed
frame without colour said its tokens were in bold.
"""

import io
import re
import time

from rich.console import Console

from minitf_repl.core import watch as core_watch
from minitf_repl.dispatch import run_command, to_json
from minitf_repl.render import render
from minitf_repl.session import Session

TINY = {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "batch_size": 4,
        "autosave": False, "eval_batches": 1}


def session(data: str = "sort") -> Session:
    s = Session(data_spec=data)
    run_command(s, "set", dict(TINY))
    return s


def text_of(result, width: int = 100) -> str:
    c = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, c)
    return c.file.getvalue()


# --- the time the frames take is said ----------------------------------------------------------------------------
def test_the_time_the_frames_took_is_said_and_in_the_json(monkeypatch):
    made = core_watch.Watcher.frame

    def slow(self, model, step, val_loss):
        time.sleep(0.05)
        return made(self, model, step, val_loss)

    monkeypatch.setattr(core_watch.Watcher, "frame", slow)
    s = session()
    r = run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "lens"})
    assert len(r.frames) == 3 and r.watch_seconds >= 0.15
    assert to_json(r)["watch_seconds"] == r.watch_seconds
    text = " ".join(text_of(r).split())
    assert re.search(r"watched 3 frames \(lens: 0\.\d\d s a frame, 0\.\d\d s in all, not counted in the table.s time\)",
                     text), text


# --- :report after a run watched at every step --------------------------------------------------------------------
def test_report_after_a_run_watched_at_every_step_shows_a_bounded_sample_of_its_frames(tmp_path):
    from minitf_repl.report import REPORT_FRAMES

    s = session()
    run_command(s, "train", {"steps": 60, "eval_every": 1, "watch": "attn", "prompt": "1234="})
    assert len(s.watch_frames) == 61
    r = run_command(s, "report", {"path": str(tmp_path / "r.html")})
    page = (tmp_path / "r.html").read_text()
    assert page.count('<h3 class="frame">') == REPORT_FRAMES < 61
    assert "step 0 (before training)" in page and "step 60, val loss" in page  # the first and the last are there
    assert f"{REPORT_FRAMES} of 61 frames of watch=attn" in r.sections
    assert f"shows {REPORT_FRAMES} of the 61 frames, evenly spread" in page


# --- a terminal that cannot redraw (TERM=dumb) or a log: the frames are printed as they come -----------------------
def test_where_progress_comes_as_lines_each_frame_is_printed_under_its_evaluations_line():
    from minitf_repl.render.live import RichReporter

    s = session()
    c = Console(file=io.StringIO(), width=60, color_system=None)
    run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "lens"}, RichReporter(c, live=False, lines=True))
    out = c.file.getvalue()
    assert "step 0 (before training): the logit lens" in out
    assert out.index("step 2 (run 2/4)") < out.index("step 2, val loss") < out.index("step 4 (run 4/4)")
    assert "blocks.1" in out  # the frame itself, not its title alone


# --- a heads frame's copying line says what the two losses say --------------------------------------------------
def test_a_heads_frame_whose_repeat_costs_more_than_the_first_copy_does_not_say_the_repeat_is_read_off_it():
    from minitf_repl.core.watch import WatchFrame
    from minitf_repl.render.watch import copying

    def frame(first, second):
        return WatchFrame(20, 2.5, "heads", "", [], repeat=32, first_copy=first, second_copy=second)

    untrained = copying(frame(4.16, 4.32))  # add:2 after 30 steps, which :heads called "no copying from context yet"
    assert "no copying from context yet" in untrained
    assert "copying from context may have begun" in copying(frame(5.91, 5.80))
    assert "the model copies from context" in copying(frame(5.0, 1.0))


# --- the live display on a wide but short terminal ----------------------------------------------------------------
def test_a_wide_short_terminal_shows_the_loss_table_and_the_attention_frame_while_training():
    from minitf_repl.render.live import LossTable, RichReporter

    s = Session(data_spec="pydoc")
    run_command(s, "set", {**TINY, "n_heads": 4, "max_seq_len": 64})
    prompt = "def main(argv):\n    parser = argparse.ArgumentParser(description=1)"
    r = run_command(s, "train", {"steps": 2, "eval_every": 2, "watch": "attn", "prompt": prompt})
    c = Console(file=io.StringIO(), width=200, height=40, color_system=None)
    reporter = RichReporter(c, live=False)
    reporter._table = LossTable(r.evals, vocab_size=r.vocab_size)
    reporter._frame = r.frames[-1]
    text = "\n".join("".join(seg.text for seg in line) for line in c.render_lines(reporter.training_view(), pad=False))
    assert len(text.splitlines()) <= 39, text
    assert "val loss" in text and "head 3" in text, text  # the table and the frame
    assert "the terminal is 40 lines tall" in text, text  # and why the map is cut


# --- a stopped watched run gone on with another view -------------------------------------------------------------
def test_a_stopped_run_continued_with_another_view_says_the_frames_before_the_stop_are_replaced():
    from test_commands import Recorder, run

    s = session()
    run(s, ":train steps=10 eval_every=2 watch=attn", Recorder(stop_after=5))
    assert [f.view for f in s.watch_frames] == ["attn"] * 3
    hooks = Recorder()
    run(s, ":train watch=lens", hooks)
    assert {f.view for f in s.watch_frames} == {"lens"}  # one view at a time, as before
    said = " ".join(hooks.notices)
    assert "the 3 frames of watch=attn watched before the stop are replaced" in said, hooks.notices


# --- the one-shot shell's watch errors name its own options ---------------------------------------------------------
def test_the_shells_watch_errors_name_the_options_as_the_shell_takes_them(checkpoint_dir):
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("train", "--steps", "1", "--layer", "1"))
    assert "--layer says what --watch looks at; add --watch attn" in line, line
    line = assert_one_error_line(invoke("train", "--steps", "1", "--watch", "lens", "--layer", "1"))
    assert "--layer picks the block --watch attn shows; --watch lens reads every block, so leave --layer out" in line
    line = assert_one_error_line(invoke("train", "--steps", "1", "--watch", "context", "--prompt", "abc"))
    assert "--watch context scores the same val windows" in line and "leave --prompt out" in line, line
    s = session()  # the REPL's words stay its own
    import pytest

    from minitf_repl.core.errors import UserError
    with pytest.raises(UserError, match="layer= picks the block watch=attn shows; watch=lens reads every block"):
        run_command(s, "train", {"steps": 1, "watch": "lens", "layer": 1})


# --- :plot of the frames after an unwatched :train --------------------------------------------------------------------
def test_plot_of_the_frames_says_where_the_model_has_trained_on_since_its_last_frame():
    s = session()
    run_command(s, "train", {"steps": 4, "eval_every": 2, "watch": "lens"})
    assert "trained to step" not in " ".join(text_of(run_command(s, "plot", {"what": "lens_rank"})).split())
    run_command(s, "train", {"steps": 6})  # unwatched: the frames stay those of steps 0 to 4
    plot = run_command(s, "plot", {"what": "lens_rank"})
    assert plot.model_step == 10 and to_json(plot)["model_step"] == 10
    out = " ".join(text_of(plot).split())
    assert "the frames end at step 4; the model has trained to step 10 since, unwatched" in out, out


# --- a frame's title on a long prompt -----------------------------------------------------------------------------
def test_a_frames_title_on_a_long_prompt_says_it_shows_the_prompts_end():
    from minitf_repl.core.watch import WatchFrame
    from minitf_repl.render.watch import frame_title

    prompt = "def main(argv):\n    parser = argparse.ArgumentParser(description=1)"
    title = frame_title(WatchFrame(20, 2.5, "lens", prompt, []))
    assert title.endswith("of the prompt ending 'entParser(description=1)'"), title  # not "of 'entParser(...)'"
    assert frame_title(WatchFrame(20, 2.5, "lens", "The example abov", [])).endswith("of 'The example abov'")


# --- an embed frame without colour ---------------------------------------------------------------------------------
def test_an_embed_frame_without_colour_does_not_say_its_tokens_are_in_bold():
    from minitf_repl.render.watch import watch_view

    s = session()
    r = run_command(s, "train", {"steps": 2, "eval_every": 2, "watch": "embed", "prompt": "123"})
    c = Console(file=io.StringIO(), width=80, color_system=None)  # a log, TERM=dumb: no bold to see
    c.print(watch_view(r.frames[-1], 80, True))
    out = " ".join(c.file.getvalue().split())
    assert "in bold" not in out and "the tokens of '123' drawn over any they share a cell with" in out, out
    colour = Console(file=io.StringIO(), width=80, color_system="truecolor", force_terminal=True)
    colour.print(watch_view(r.frames[-1], 80, False))
    from rich.text import Text

    assert "in bold the tokens of '123'" in " ".join(Text.from_ansi(colour.file.getvalue()).plain.split())


# --- the live display on an 80x24 terminal --------------------------------------------------------------------------
def test_an_80_by_24_terminal_shows_the_heads_frame_while_training():
    from rich.progress import Progress

    from minitf_repl.render.live import LossTable, RichReporter

    s = Session(data_spec="pydoc")
    run_command(s, "set", {**TINY, "n_layers": 4, "n_heads": 4, "max_seq_len": 64})  # the default model's heads
    r = run_command(s, "train", {"steps": 2, "eval_every": 2, "watch": "heads"})
    c = Console(file=io.StringIO(), width=80, height=24, color_system="truecolor", force_terminal=True)
    reporter = RichReporter(c, live=False)
    reporter._table = LossTable(r.evals * 3, vocab_size=r.vocab_size)
    reporter._frame = r.frames[-1]
    reporter._progress = Progress(console=c)
    text = "\n".join("".join(seg.text for seg in line) for line in c.render_lines(reporter.training_view(), pad=False))
    assert "step 2, val loss" in text and "head 3" in text, text  # it showed the bar alone, the whole run
    assert len(text.splitlines()) <= 23
