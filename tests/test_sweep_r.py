"""What a sweep of the live and chart views across the model's variants found wrong: each test failed before its fix.

The one character chart (:plot, the loss under :train, :compare) labelled its y axis with 3 significant digits even
where two labels then read alike (0.172, 0.171, 0.171 for a score that moved by 0.0015), and drew a curve whose every
point fell on a later curve's under that curve with nothing said: :plot what=context named '● positions 0' in its
legend and drew no ●. From the shell, :plot of a watched view told the user to run `minitf train --watch VIEW`
first, which keeps no frames for a later `minitf plot`, so the advice led back to the same error; and the end of a
watched run pointed at a :plot its frames could not feed (a lens prompt with no known next token). :heads said a
head "costs the repeat the most (-0.00 nats)" when no head's absence cost anything. In a narrow terminal watch=attn
cut the prompt to its last positions without a word, and watch=heads squeezed every head into one table ('· …' in
each cell), whose dot it never explained, and watch=grad cut its headers and row labels ('b…  attention |dL…');
the loss table of a mixture of experts on text, with bits/char and aux loss besides, overflowed 40 columns and cut
its losses to '3.01…', and at 80 columns its bordered headers to 'bits/ch…' and 'tokens…'. :shapes was the one
view that said nothing under :ablate. A table that did not fit 40 columns even without its optional columns (:grad's
stream, :heads) cut its headers and numbers ('0.7…') where stacking the headers' words fits it.
"""

import pytest

from minitf_repl.core.errors import UserError
from minitf_repl.render import fmt
from minitf_repl.render.chart import Curve, chart
from test_cli import assert_one_error_line, invoke
from test_render import console


def drawn(renderable, width=60) -> str:
    c = console(width)
    c.print(renderable)
    return c.file.getvalue()


# --- the chart's y axis and its legend ------------------------------------------------------------------
def test_chart_axis_labels_are_distinct_on_a_narrow_range():
    shown = drawn(chart([Curve("head 0.0", [4, 6, 8], [0.17055, 0.17101, 0.17203], joined=True)], 60, 12))
    labels = [line.split("┤")[0].strip() for line in shown.splitlines() if "┤" in line]
    assert len(labels) == 3 and len(set(labels)) == 3, labels  # top, middle, bottom: three different values
    assert float(labels[0]) > float(labels[1]) > float(labels[2])
    wide = drawn(chart([Curve("loss", [1, 2, 3], [3.05, 3.3, 3.59])], 60, 12))
    labels = [line.split("┤")[0].strip() for line in wide.splitlines() if "┤" in line]
    assert labels == ["3.59", "3.34", "3.05"], labels  # the middle one on row 5 of 0..11, its value (49th session)


def test_a_curve_drawn_over_at_every_point_is_named_in_the_legend_as_under_the_others():
    bands = {"positions 0": [3.6312, 3.3408, 3.1633], "positions 1": [3.7436, 3.5291, 3.4218],  # a :train watch=context
             "positions 2-3": [3.6225, 3.3472, 3.1868], "positions 4-7": [3.6329, 3.3628, 3.2042]}  # run's frames
    curves = [Curve(name, [8, 10, 12], values, glyph) for (name, values), glyph in zip(bands.items(), "●▲■◆")]
    shown = drawn(chart(curves, 70, 12))
    grid = shown.split("└")[0]
    assert "●" not in grid  # every point of band 0 is in a cell a later band's glyph took
    legend = " ".join(shown.split("└")[1].split())
    assert "● positions 0 (hidden under" in legend and "▲ positions 1 (hidden under" not in legend
    assert "positions 2-3 (hidden under" not in legend and "positions 4-7 (hidden under" not in legend


# --- :plot of a watched view from the shell ------------------------------------------------------------
def test_plot_of_a_watched_view_from_the_shell_names_the_interactive_shell_not_a_one_shot_train():
    line = assert_one_error_line(invoke("plot", "--what", "copying"))
    assert "minitf train --watch heads first" not in line  # a one-shot train's frames end with its session
    assert "a checkpoint keeps no watched frames" in line
    assert ":train watch=heads, then :plot what=copying" in line
    for what, view in (("context", "context"), ("block_grad", "grad"), ("lens_rank", "lens")):
        assert f":train watch={view}, then :plot what={what}" in assert_one_error_line(invoke("plot", "--what", what))


def test_plot_of_a_watched_view_in_the_repl_still_says_train_watching_first():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run

    session = Session(ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16), TrainConfig(steps=2),
                      data_spec="sort", device_name="cpu")
    with pytest.raises(UserError, match="there are no heads frames; train with :train watch=heads first$"):
        run(session, ":plot what=induction")


# --- :heads's reading when no head's absence takes any of the copying --------------------------------
@pytest.mark.parametrize("carries, costs", [((-0.04, -0.001), False), ((0.002, -0.01), False), ((0.31, 0.05), True)])
def test_heads_reading_says_no_head_carries_the_copying_when_none_takes_any(carries, costs):
    """(The 51st session: with no copying from context at all, no head "takes the most of the copying" either,
    whatever its absence moves: the reading says what the most any moves it is, and whether that is noise.)"""
    from types import SimpleNamespace

    from minitf_repl.commands.why import heads_reading

    heads = [SimpleNamespace(layer=0, head=h, role=None, carries=c, scores={"induction": 0.13})
             for h, c in enumerate(carries)]
    roles = SimpleNamespace(heads=heads, best=lambda role: heads[0], uniform={"induction": 0.05})
    reading = heads_reading(roles, first=2.52, second=2.52)
    top = max(carries, key=abs)
    assert "takes the most of the copying" not in reading, reading  # the repeat gains nothing: there is none to take
    within = "" if costs else ", within the noise of these tokens"  # +0.31 is more than noise; -0.04 is not
    assert reading.endswith(f"switched off alone, no head has copying to take (the most any moves the gain: head "
                            f"0.{carries.index(top)}, {fmt.signed(top, 2)} nats{within})"), reading


# --- :train watch=attn in a narrow terminal -------------------------------------------------------------
def test_watch_attn_cut_to_the_last_positions_says_so_as_attn_does():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run
    from test_render import plain

    session = Session(ModelConfig(d_model=16, n_heads=4, n_layers=1, d_ff=32, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2, eval_every=2), data_spec="pydoc", device_name="cpu")
    result = run(session, ":train steps=2 watch=attn prompt='The example abov'")
    assert "showing the last 4 of 16 positions (the terminal is 30 columns wide)" in plain(result, 30)
    assert "showing the last" not in plain(result, 120)  # four heads of 16 positions fit side by side


# --- :shapes under :ablate ------------------------------------------------------------------------------
def test_shapes_under_ablate_says_what_is_switched_off():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run
    from test_render import plain

    session = Session(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=16), TrainConfig(steps=2),
                      data_spec="pydoc", device_name="cpu")
    run(session, ":ablate positions")
    run(session, ":ablate block=1")
    result = run(session, ":shapes")
    shown = plain(result)
    assert "h = x + p" in shown  # the trace is the whole model's: p is zero now, block 1 adds nothing
    assert result.ablations == ["the positions", "block 1"]
    assert "switched off now: the positions, block 1 (:ablate off puts the model back); every step above still runs, " \
           "with the same shapes" in shown
    run(session, ":ablate off")
    assert "switched off now" not in plain(run(session, ":shapes"))


# --- the end of a watched run names only the charts :plot can draw of its frames --------------------------
def test_watched_run_names_a_plot_only_where_the_frames_have_it():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run
    from test_render import plain

    session = Session(ModelConfig(d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16),
                      TrainConfig(steps=2, batch_size=2, eval_every=2), data_spec="add", device_name="cpu")
    unknown = plain(run(session, ":train steps=2 watch=lens prompt=12+34="))  # not the task's form: no known answer
    assert "watched 2 frames (lens: " in unknown and "time); :report shows them in order" in unknown
    assert ":plot what=lens_rank" not in unknown
    with pytest.raises(UserError, match="no lens frames with a known next token"):
        run(session, ":plot what=lens_rank")
    known = plain(run(session, ":train steps=2 watch=lens"))  # the task's own question: its answer is known
    assert ":plot what=lens_rank charts the true token's rank" in known
    assert ":plot what=" not in plain(run(session, ":train steps=2 watch=heads prompt=12+34="))  # no token comes back
    again = plain(run(session, ":train steps=2 watch=heads prompt=12+12="))  # tokens come back: no first copy, though
    assert ":plot what=copying" not in again and ":plot what=induction charts the heads' induction score" in again
    random = plain(run(session, ":train steps=2 watch=heads"))
    assert ":plot what=copying and :plot what=induction chart them" in random


# --- :train watch=heads in a narrow terminal ------------------------------------------------------------
@pytest.mark.parametrize("width", [40, 60, 100])
def test_watch_heads_frame_shows_every_heads_score_at_any_width(width):
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run
    from test_render import text_of

    session = Session(ModelConfig(d_model=16, n_heads=8, n_layers=2, d_ff=32, max_seq_len=16),
                      TrainConfig(steps=2, batch_size=2, eval_every=2), data_spec="sort", device_name="cpu")
    result = run(session, ":train steps=2 watch=heads")
    lines = text_of(result, width).splitlines()
    first = next(k for k, line in enumerate(lines) if "head 0" in line)
    frame = "\n".join(lines[first:next(k for k, line in enumerate(lines) if line.startswith("loss on the repeat"))])
    assert "…" not in frame  # one table squeezed to 40 columns showed '· …' in every cell
    assert all(f"head {h}" in frame for h in range(8))
    scores = [f"{h.score:.2f}" for h in result.frames[-1].heads]
    assert sum(frame.count(s) for s in set(scores)) == len(scores) == 16


def test_watch_heads_frame_says_what_a_dot_is():
    from minitf_repl.core.watch import HeadWatch, WatchFrame
    from minitf_repl.render.watch import watch_view

    frame = WatchFrame(2, 2.3, "heads", "", [])
    frame.heads = [HeadWatch(0, 0, None, 0.14, 0.1), HeadWatch(0, 1, "previous", 0.85, 0.1)]
    shown = drawn(watch_view(frame, 80, True), 80)
    assert "· 0.14" in shown and "previous 0.85" in shown
    assert "·: no role stands out; the score shown is the head's largest" in " ".join(shown.split())
    frame.heads = frame.heads[1:]
    assert "no role stands out" not in drawn(watch_view(frame, 80, True), 80)  # every head named: nothing to explain


# --- :train watch=grad in a narrow terminal -------------------------------------------------------------
@pytest.mark.parametrize("width", [40, 50, 100])
def test_watch_grad_frame_keeps_its_headers_and_labels_whole_in_a_narrow_terminal(width):
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run
    from test_render import plain, text_of

    session = Session(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2, eval_every=2), data_spec="pydoc", device_name="cpu")
    result = run(session, ":train steps=2 watch=grad")
    lines = text_of(result, width).splitlines()
    table = lines[next(k for k, line in enumerate(lines) if "attention" in line):][:6]
    assert not any("…" in line for line in table), table  # 'b…  attention |dL…  FFN |dL…' at 40 columns
    words = " ".join(table).split()
    assert {"block", "attention", "FFN", "below", "top"} <= set(words) and words.count("|dL/dW|") == 2
    assert f"{result.frames[-1].grads[0].below:.4f}" in plain(result, width)


# --- the loss table of a mixture of experts on text in a narrow terminal --------------------------------
def test_loss_table_with_bits_per_char_and_aux_loss_keeps_the_losses_and_headers_whole():
    from test_render import render, row, train_result

    evals = [{**row(10, 2.0, 2.1), "val_bpc": 3.0296, "aux_loss": 1.0234},
             {**row(1000, 1.25, 1.5), "val_bpc": 2.1640, "aux_loss": 1.0078}]
    for width in (40, 50):
        c = console(width)
        render(train_result(evals=evals), c)
        table = c.file.getvalue().split("trained")[0]
        assert "…" not in table, table  # 'step  train  val  bpc  aux  time' overflowed 40 columns: '1.25…'
        assert "1,000" in table and "1.2500" in table and "1.5000" in table
        assert all(len(line) <= width for line in table.splitlines())
    c = console(60)
    render(train_result(evals=evals), c)
    assert "aux" in c.file.getvalue() and "2.1640" in c.file.getvalue()  # room for them all: none dropped
    for width in (80, 87):  # the bordered table of all eight columns needs 88: it cut 'bits/ch…' and 'tokens…'
        c = console(width)
        render(train_result(evals=evals), c)
        table = c.file.getvalue().split("trained")[0]
        assert "…" not in table and "bpc" in table and "aux" in table and "1.0078" in table, table
    c = console(88)
    render(train_result(evals=evals), c)
    assert "┃ train loss ┃ val loss ┃ bits/char ┃ aux loss ┃" in c.file.getvalue()  # it fits: bordered


# --- tables that fit a narrow terminal only with their headers stacked ----------------------------------
def test_grad_and_heads_tables_at_40_columns_stack_their_headers_instead_of_cutting_numbers():
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run
    from test_render import text_of

    session = Session(ModelConfig(d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    grad = run(session, ":grad")
    lines = text_of(grad, 40).splitlines()
    top = next(k for k, line in enumerate(lines) if line.startswith("top"))
    stream = lines[top - 4:top + 6]  # the header's lines, top, each sublayer of the two blocks, h_0
    assert not any("…" in line for line in stream), stream  # 'bl…  f   |sk…' and numbers cut to '0.7…'
    assert f"{grad.stream[0].leaves:.4f}" in "\n".join(stream) and any(line.startswith("h_0") for line in stream)
    heads = text_of(run(session, ":heads"), 40)
    header = next(line for line in heads.splitlines() if "previo" in line)
    assert "…" not in header and "previous" in header, header  # 'he…  previo…  inducti…  nam…  off: repe…'
