"""What a user's-eye sweep of watching training (`:train watch=`, the frames, `:report`'s page of them, `:plot` of a
watched run) found: each test failed before its fix.

The report's page of a watch=context run said the frames were "the val loss by position in the window of ''" (a
prompt it never read) instead of the val windows it scored, and its heads frames showed "· 0.14" with no word of what
a dot is (the terminal says it under the frame); after an unwatched :train it showed the last frame under a model
steps further on without saying so. A second run's first frame was titled "before training" for a trained model.
Ctrl-C in a watched run, then the same watch= to go on, lost the frames before the stop; a Ctrl-C before the first
step replaced the last run's frames with one frame of no training. In the REPL the live frame and then the progress
bar were cut off ("...") once the loss table grew past the screen. watch=embed on two-token data failed at its first
frame after the data switch, the new lr and the new run had taken effect, so the next :train ran that run.
"""

import re

import pytest

from test_commands import Recorder, run, tiny_session


def watch_section(path) -> str:
    """The page's watch= section, its SVG left out: the words a reader sees of it."""
    page = path.read_text(encoding="utf-8")
    return re.sub(r"<svg.*?</svg>", "", page[page.index('id="watch"'):], flags=re.S)


# --- :report's page of the frames -----------------------------------------------------------------------------------
def test_the_report_says_a_context_frame_reads_val_windows_not_an_empty_prompt(tmp_path):
    s = tiny_session()
    run(s, ":train watch=context")
    run(s, f":report {tmp_path / 'r.html'}")
    section = watch_section(tmp_path / "r.html")
    assert "<code></code>" not in section
    assert "on the same 128 val windows at every frame" in section


def test_the_report_says_what_a_dot_is_in_a_heads_frame_as_the_terminal_does(tmp_path):
    s = tiny_session()
    result = run(s, ":train watch=heads")
    assert any(h.role is None for h in result.frames[-1].heads)  # a tiny model: no head has a role yet
    run(s, f":report {tmp_path / 'r.html'}")
    section = watch_section(tmp_path / "r.html")
    assert "· 0." in section and "no role stands out; the score shown is the head&#x27;s largest" in section


# --- what a frame's title says -------------------------------------------------------------------------------------
def test_the_first_frame_of_a_later_run_is_not_said_to_be_before_training(tmp_path):
    from minitf_repl.render.watch import frame_title

    s = tiny_session()
    run(s, ":train")
    first = run(s, ":train watch=attn").frames[0]
    assert first.step == 6 and "before training" not in frame_title(first)
    assert "step 6 (before more training)" in frame_title(first)
    run(s, f":report {tmp_path / 'r.html'}")
    assert "step 6 (before more training)" in watch_section(tmp_path / "r.html")
    assert "(before training)" in frame_title(run(tiny_session(), ":train watch=attn").frames[0])  # a new model's


# --- a watched run stopped and continued ----------------------------------------------------------------------------
def test_a_stopped_watched_run_continued_with_watch_keeps_the_frames_before_the_stop(tmp_path):
    s = tiny_session()
    run(s, ":train steps=10 eval_every=3 watch=lens", Recorder(stop_after=5))  # Ctrl-C at step 5: frames 0 and 3
    result = run(s, ":train watch=lens")  # the same run goes on to step 10
    assert [f.step for f in result.frames] == [5, 6, 9, 10]  # this command's frames, as --json gives them
    assert [f.step for f in s.watch_frames] == [0, 3, 5, 6, 9, 10]  # what :report and :plot show: the whole run
    assert run(s, ":plot what=lens_rank").series[0].steps == [0, 3, 5, 6, 9, 10]


def test_a_new_run_or_another_view_still_replaces_the_frames(tmp_path):
    s = tiny_session()
    run(s, ":train steps=10 eval_every=3 watch=lens", Recorder(stop_after=5))
    run(s, ":train watch=attn")  # the same run, another view: its frames alone
    assert [f.step for f in s.watch_frames] == [5, 6, 9, 10] and {f.view for f in s.watch_frames} == {"attn"}
    run(s, ":train steps=3 watch=attn")  # a new run
    assert [f.step for f in s.watch_frames] == [10, 13]


def test_a_run_stopped_at_an_evaluation_and_continued_has_one_frame_of_that_step(tmp_path):
    s = tiny_session()
    run(s, ":train steps=10 eval_every=3 watch=lens", Recorder(stop_after=6))  # stopped at step 6, evaluated there
    run(s, ":train watch=lens")
    assert [f.step for f in s.watch_frames] == [0, 3, 6, 9, 10] and s.watch_frames[2].val_loss is not None


# --- the live display while a watched run trains ------------------------------------------------------------------
@pytest.mark.parametrize("width", [pytest.param(100, marks=pytest.mark.slow), 40])  # the narrow one by default
def test_the_live_frame_and_bar_stay_on_screen_as_the_loss_table_grows(width):
    import io

    from rich.console import Console

    from minitf_repl.render.live import RichReporter

    c = Console(file=io.StringIO(), width=width, height=30, force_terminal=True, color_system=None)
    hooks = RichReporter(c)
    s = tiny_session()
    run(s, ":train steps=60 eval_every=2 watch=attn", hooks)  # 30 evaluations: the table alone is 36 lines
    lines = ["".join(seg.text for seg in line) for line in c.render_lines(hooks.training_view(), pad=False)]
    hooks.close()
    text = "\n".join(lines)
    assert len(lines) < 30  # Rich's Live cut what did not fit with "...": the frame, then the bar, went first
    assert "step 60, val" in text and "head 1" in text and "60/60" in text  # the frame and the bar
    assert "earlier evaluations above" in text and "has them all)" in text  # the rows left out are said, in full


def test_a_watched_run_stopped_before_its_first_step_keeps_the_last_runs_frames(tmp_path):
    s = tiny_session()
    run(s, ":train watch=lens")  # frames at 0, 3, 6
    result = run(s, ":train steps=5 watch=attn", Recorder(stop_after=0))  # Ctrl-C at once: no step, one frame
    assert result.steps == 0 and len(result.frames) == 1
    assert [f.step for f in s.watch_frames] == [0, 3, 6] and s.watch_frames[0].view == "lens"
    assert run(s, ":plot what=lens_rank").series  # what :plot and :report show is still the run that trained
    from test_render import plain

    assert "and no step: :report and :plot show the frames they showed before" in plain(result)


# --- a watch= that cannot be drawn is refused before anything changes -------------------------------------------
def test_watch_embed_on_two_tokens_is_refused_before_the_data_lr_or_run_change(tmp_path):
    import pytest

    from minitf_repl.core.errors import UserError

    two = tmp_path / "ab.txt"
    two.write_text("abbaabab" * 300, encoding="utf-8")
    s = tiny_session()
    run(s, ":train steps=4")
    lr, step = s.train_config.lr, s.trainer.step
    with pytest.raises(UserError, match="two directions"):
        run(s, f":train steps=50 lr=0.001 watch=embed data={two}")
    # the first frame failed after the switch, the new lr and the new run: the next :train ran 50 steps at 0.001
    assert s.data_spec == "sort:4" and s.train_config.lr == lr
    assert s.trainer.step == step and s.trainer.run_remaining == 0


def test_a_first_frame_that_fails_rolls_the_run_and_its_settings_back(monkeypatch):
    import pytest

    from minitf_repl.core import watch
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    run(s, ":train steps=4")

    def fails(self, model, step, val_loss):
        raise UserError("this view cannot be drawn; fix")

    monkeypatch.setattr(watch.Watcher, "frame", fails)
    with pytest.raises(UserError, match="cannot be drawn"):
        run(s, ":train steps=50 lr=0.001 watch=attn")
    assert s.train_config.lr != 0.001 and s.trainer.run_remaining == 0 and s.trainer.step == 4


def test_the_report_says_its_frames_end_before_the_model_it_shows(tmp_path):
    s = tiny_session()
    run(s, ":train watch=attn")  # frames at 0, 3, 6
    run(s, ":train steps=4")  # trained on, unwatched: the page's maps are of step 10, its last frame of step 6
    run(s, f":report {tmp_path / 'r.html'}")
    section = watch_section(tmp_path / "r.html")
    assert "the last frame is of step 6; the model on this page has trained to step 10 since" in section
    run(s, ":train steps=2 watch=attn")
    run(s, f":report {tmp_path / 'r.html'}")
    assert "the model on this page" not in watch_section(tmp_path / "r.html")  # frames up to the model's step


def test_a_continued_watched_run_says_the_frames_before_the_stop_are_kept(tmp_path):
    s = tiny_session()
    run(s, ":train steps=10 eval_every=3 watch=lens", Recorder(stop_after=5))
    hooks = Recorder()
    run(s, ":train watch=lens", hooks)  # "watched 4 frames" alone, and :report showed 6
    assert any("the 2 frames watched before the stop are kept: :report and :plot show all 6" in n
               for n in hooks.notices)
