"""Findings of the fifty-fourth session's sweep of the inside views' presentation: each test failed before its fix."""

import re
from pathlib import Path

from test_commands import run, tiny_session
from test_render import plain, text_of

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session

DOCS = Path(__file__).resolve().parents[1] / "docs" / "inside-views.md"


def session_of(**model) -> Session:
    """A small pydoc model (its tokens are characters), two blocks, with `model`'s settings."""
    config = {**dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32), **model}
    return Session(ModelConfig(**config), TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")


def table_header(text: str, first: str) -> str:
    return next(line for line in text.splitlines() if line.strip().startswith(first))


# --- 1. :ffn names every column the width leaves out, and says what share is ---------------------------------
def test_ffn_names_every_column_the_width_leaves_out_and_says_what_share_is():
    result = run(session_of(), ":ffn")
    wide = plain(result, 200)
    assert "share: the unit's |u_n v_n| as a part of sum_n |u_n v_n| over all 64 units" in wide
    assert "left out at" not in wide
    narrowed = 0
    for width in range(70, 130, 4):
        text = text_of(result, width)
        header = table_header(text, "unit n")
        gone = [name for name in ("share", "xW_1+b_1", "lowers", "raises the logit of") if name not in header]
        if not gone:
            continue
        narrowed += 1
        said = " ".join(text.split())
        # was: share and the pre-activation went without a word; only the tokens' columns were said
        assert f"left out at {width} columns: {', '.join(gone)}" in said, (width, said)
    assert narrowed >= 2  # the widths above did leave some out


# --- 2. :grad in post-norm: the column says what the line above it says ------------------------------------------
def test_post_norm_grad_heads_the_sublayers_part_as_its_formula_writes_it():
    post = plain(run(session_of(norm_placement="post"), ":grad"), 160)
    assert "dL/dh = g_s + J_f^T g_s" in post and "|J_f^T g_s| back" in post and "|J^T g'| back" not in post
    pre = plain(run(session_of(), ":grad"), 160)
    assert "|J^T g'| back" in pre and "J_f^T" not in pre


def test_the_docs_say_where_a_fresh_post_norm_models_gradient_grows():
    text = " ".join(DOCS.read_text().split())
    assert "it stays there all the way down" not in text  # it does not: block 0's first norm scales it 35-fold
    assert "scales the gradient up about 35-fold" in text and "`|J_f^T g_s| back`" in text
    # what the docs now say, on a fresh small post-norm model: flat down to block 0's attention, then a jump there
    stream = run(session_of(norm_placement="post"), ":grad").stream
    assert stream[-1].block == 0 and stream[-1].part == "attn"
    assert all(0.5 < s.leaves / stream[0].arrives < 2 for s in stream[:-1])
    assert stream[-1].skip > 5 * stream[-1].arrives


# --- 3. each view's symbols said before they are used, none meaning two things -------------------------------
def test_muons_momentum_is_not_newton_schulzs_b():
    out = plain(run(tiny_session(), ":muon"), 200)
    assert "M <- 0.9 M + 0.1 G, the momentum (none yet, so M starts at 0)" in out
    assert "u = 0.1 G + 0.9 M (Nesterov" in out and "(a, b, c) = (3.4445" in out
    assert "b <-" not in out and "b starts" not in out


def test_grad_says_what_x_f_is():
    pre = plain(run(session_of(), ":grad"), 200)
    assert "receives dz^T x_f (x_f = LN_f(h_L), what the head reads;" in pre
    untied = plain(run(session_of(norm_placement="post", tie_embeddings=False), ":grad"), 200)
    assert "W_U (the head) receives dz^T x_f (x_f = h_L, what the head reads;" in untied


def test_ffn_says_what_its_output_bias_b_is():
    out = plain(run(session_of(), ":ffn"), 200)
    assert "FFN(x) = sum_n u_n v_n + b, v_n the column n of the output matrix and b its bias:" in out
    assert "and b its bias" not in plain(run(session_of(bias=False), ":ffn"), 200)


def test_shapes_says_what_x_h_and_h_are_before_the_steps_use_them():
    text = text_of(run(session_of(), ":shapes"), 100)
    said = " ".join(text.split())
    assert ("x = W_E[idx] is the token embedding and h the residual stream; in a block's steps x is the stream the "
            "block reads, x' the stream after attention (hook_resid_mid), which the FFN's half reads, H what "
            "attention's projections read, and inside FFN(x) x is what the FFN reads") in said
    assert said.index("H what attention's projections read") < said.index("Q = HW^Q")


# --- 4. :shapes: its columns named, its probes explained, its guide ------------------------------------------
def test_shapes_names_its_columns_explains_its_probes_and_has_a_guide():
    from test_docs import _anchors

    from minitf_repl.commands import REGISTRY

    result = run(session_of(), ":shapes")
    text = text_of(result, 100)
    header = table_header(text, "step")
    assert re.fullmatch(r"  step +shape +params", header.rstrip()), header  # the counts were under no heading
    assert re.search(r"  step +shape +params +formula", table_header(text_of(result, 160), "step"))
    said = " ".join(text.split())
    assert "a hook_ step is a probe, an identity that computes nothing and has no parameters" in said
    guide = REGISTRY["shapes"].guide
    assert guide == "inside-views.md#every-step-and-its-shape-shapes" and guide.partition("#")[2] in _anchors(DOCS)
    help_text = " ".join(text_of(run(tiny_session(), ":help shapes"), 200).split())
    assert f"worked through, with what each term means: docs/{guide}" in help_text
    section = DOCS.read_text().split("## Every step and its shape: `:shapes`", 1)[1].split("\n## ", 1)[0]
    assert "minitf> :shapes" in section and "  step                     shape" in section


# --- 5. :ln's steps wrap under their formulas ------------------------------------------------------------------
def test_ln_steps_wrap_under_their_formula_not_under_the_labels():
    text = text_of(run(session_of(), ":ln"), 80)
    lines = text.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("  x  "))
    steps = lines[start:next(k for k, line in enumerate(lines) if "feature j" in line) - 1]
    assert any(line.startswith(" " * 10) and "std" in line for line in steps), steps  # the x̂ line, wrapped
    for line in steps:  # a label two cells in, or a continuation at the formulas' column (was: two cells in)
        assert re.match(r"  (x |centre|scale|gain|y = )| {10}\S", line), (line, steps)


# --- 6. spark lines say their bars start at 0 ---------------------------------------------------------------------
def test_spark_lines_say_their_bars_start_at_0():
    ln = run(session_of(), ":ln")
    sizes = [p.size_in for p in ln.norm.positions]
    said = plain(ln, 120)
    assert f"bars from 0 to {max(sizes):.2f}, the least {min(sizes):.2f}" in said
    assert f"{min(sizes):.2f} to {max(sizes):.2f}" not in said  # the range read as the bars' bottom and top
    grad = plain(run(session_of(), ":grad"), 120)
    assert re.search(r"\|dL/dh_0\[t\]\| for t = 0\.\.\d+: \S+ \(bars from 0 to \S+, the least \S+; position t's", grad)
    muon = plain(run(tiny_session(), ":muon"), 200)
    assert re.search(r"singular values \S+ \(bars from 0 to \S+, the least \S+\)", muon)


def test_heads_loss_by_position_says_its_bars_start_at_0():
    result = run(session_of(), ":heads")
    assert result.losses
    said = plain(result, 120)
    low, high = min(result.losses), max(result.losses)
    assert f" bars from 0 to {high:.2f} nats, the least {low:.2f} nats (chance ln V =" in said
    assert f"{low:.2f} to {high:.2f} nats" not in said


# --- 7. :qkv says what its bars are scaled to --------------------------------------------------------------------
def test_qkv_says_its_bars_are_scaled_to_the_rows_largest_weight():
    result = run(session_of(), ":qkv")
    said = plain(result, 120)
    assert f"the bars: a_ij against the row's largest weight, {max(result.weights):.3f} (a full bar), not against 1" \
        in said
    assert "the bars" not in " ".join(text_of(result, 50).split()).split("left out")[0]  # no bars, no legend


# --- 8. :rope writes no negative zero ------------------------------------------------------------------------------
def test_rope_writes_no_negative_zero_and_keeps_a_slow_pairs_sign():
    from minitf_repl.commands.worked import _angle

    assert _angle(-3.16e-4) == "-3.2e-04" and _angle(0.0) == "+0.000" and _angle(-0.0) == "+0.000"
    assert _angle(-0.562) == "-0.562" and _angle(-0.0006) == "-0.001"
    session = session_of(pos_encoding="rope", d_model=64, n_heads=2)  # d_k = 32: the slowest pairs turn 1.8e-04
    for prompt in ("ab", "abc", "aab"):
        result = run(session, f":rope {prompt}")
        text = text_of(result, 120)
        assert "-0.000" not in text and " -3.2e-04 " in text, text  # the slowest pairs' turn at distance 1 and 2


def test_muon_on_an_adamw_session_says_whose_rate_the_step_is_at():
    s = tiny_session()
    run(s, ":set optimizer=adamw")
    adamw_lr = s.train_config.lr
    result = run(s, ":muon")
    out = " ".join(plain(result, 200).split())
    assert result.step.lr != adamw_lr  # the step is at Muon's recipe's rate
    assert (f"lr = {result.step.lr:g} is Muon's recipe's rate, the one :set optimizer=muon would train at; this "
            f"session's adamw trains at lr = {adamw_lr:g}, its own recipe's") in out, out
    assert "its own recipe's" not in " ".join(plain(run(tiny_session(), ":muon"), 200).split())


def test_a_spark_line_that_averages_its_values_labels_the_bars_not_the_values():
    from minitf_repl.commands.worked import spark_scale
    from minitf_repl.render.chart import spark, spark_bins

    values = [1.0] * 60 + [10.0] + [1.0] * 3  # 64 values in 8 bars: the 10 is averaged with its neighbours
    means = spark_bins(values, 8)
    assert len(means) == 8 and max(means) < 10 and spark(values, 8)[-1] == "█"  # the full bar is the largest mean
    said = spark_scale(values, 8)
    # was "bars from 0 to 10.00", 10 never drawn as a full bar
    assert said.startswith(f"bars from 0 to {max(means):.2f}, the largest mean: each bar averages 8 neighbouring "
                           "values, and the values themselves run from 1.00 to 10.00"), said
    assert spark_scale(values[:8], 8) == "bars from 0 to 1.00, the least 1.00"
