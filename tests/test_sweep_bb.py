"""What a user's-eye sweep of watching training (`:train watch=`, the frames, `:report`'s page of them, `:plot` of a
watched run) found: each test failed before its fix.

The report's page of a watch=context run said the frames were "the val loss by position in the window of ''" (a
prompt it never read) instead of the val windows it scored, and its heads frames showed "· 0.14" with no word of what
a dot is (the terminal says it under the frame).
"""

import re

from test_commands import run, tiny_session


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
    assert "(before this run's first step)" in frame_title(first)
    run(s, f":report {tmp_path / 'r.html'}")
    assert "step 6 (before this run&#x27;s first step)" in watch_section(tmp_path / "r.html")
    assert "(before training)" in frame_title(run(tiny_session(), ":train watch=attn").frames[0])  # a new model's
