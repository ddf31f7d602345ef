"""Review of ffn=off and norm=none, round two: views that spoke of an FFN or a norm the model has not got."""

from pathlib import Path

import pytest
from test_commands import TINY, run
from test_render import plain, text_of

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session

DOC = Path(__file__).resolve().parents[1] / "docs" / "variant-lab.md"


def session_on(data="sort:4", **model) -> Session:
    return Session(ModelConfig(**{**TINY, "n_layers": 2, **model}),
                   TrainConfig(steps=2, batch_size=2, eval_every=2, eval_batches=2), data_spec=data, device_name="cpu")


# --- 1. watch=grad without an FFN ------------------------------------------------------------------------
def test_watch_grad_without_an_ffn_shows_no_ffn_column_in_the_frame_nor_the_report(tmp_path):
    from minitf_repl.report import frames_html

    session = session_on(ffn=False)
    session.checkpoint_dir = tmp_path
    result = run(session, ":train steps=2 watch=grad")
    grads = result.frames[-1].grads
    assert grads and all(g.ffn is None for g in grads)  # no FFN, not an FFN of |dL/dW| 0
    assert "attention |dL/dW|" in plain(result) and "FFN" not in plain(result)
    page = "".join(frames_html(result.frames))
    assert "attention |dL/dW|" in page and "FFN |dL/dW|" not in page


# --- 2. :ln which=ln_f on a post-norm model without an FFN ----------------------------------------------
def test_ln_f_on_a_post_norm_model_without_an_ffn_names_ln_1_the_norm_it_has():
    session = session_on(ffn=False, norm_placement="post")
    with pytest.raises(UserError) as refused:
        run(session, ":ln which=ln_f")
    assert "each block's ln_1 normalises its output already); choose which=ln_1" in str(refused.value)
    assert "ln_2" not in str(refused.value)  # it has none


# --- 3. norm=none: no text of a norm the model has not got ---------------------------------------------
def test_norm_none_views_speak_of_no_norm():
    session = session_on(norm="none")
    ffn = plain(run(session, ":ffn"))
    assert "read through the output head (no final norm)" in ffn and "final norm frozen" not in ffn
    lens = plain(run(session, ":lens"))
    assert "softmax(lm_head(h)) (norm=none" in lens and "ln_f(h)" not in lens
    grad = plain(run(session, ":grad"))
    assert "no norm (norm=none), h' = h + f(h):" in grad and "Id" not in grad
    resid = run(session, ":resid")
    shown = plain(resid, 160)
    assert "h <- h + f(h)" in shown and "Id" not in shown and "1.000" not in shown  # no column of what Id divides by
    assert "the output head reads h_L itself" in shown


def test_config_marks_the_settings_the_model_does_not_read():
    result = run(session_on(norm="none", ffn=False), ":config")
    lines = {line.split()[0]: line for line in text_of(result).splitlines() if line.strip()}
    for name in ("norm_placement", "norm_eps", "norm_gain"):
        assert "unread: norm=none" in lines[name]
    assert "unread: ffn=off" in lines["d_ff"]
    assert "unread" not in lines["d_model"]


# --- 4. the lab's words on norm=none's parameters -------------------------------------------------------
def test_variant_lab_says_the_identity_has_no_parameters_not_that_the_model_learns_nothing():
    text = " ".join(DOC.read_text().split())
    assert "It learns nothing" not in text and "The identity has no parameters" in text


# --- 5. :score all=on where nothing was hidden -----------------------------------------------------------
def test_score_all_on_a_short_text_says_it_changes_nothing():
    session = session_on()
    asked = plain(run(session, ":score 3055=0355 all=on"))
    assert "all=on changes nothing here: a text of at most 64 positions shows every one anyway" in asked
    assert "all=on changes nothing" not in plain(run(session, ":score 3055=0355"))  # not asked: not said
