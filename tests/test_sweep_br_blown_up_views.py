"""Sweep br (blown-up views): models a huge learning rate blew up, read by :checks, :grad, :muon, :kv, :ln, :attrib.

A loss that grew was called one that "did not move" with the rate "too low"; :grad built sentences on nan ("nan at
h_0 (xnan)") and :muon ended in an internal error; float32's rounding of logits of 5,000 (1e-6 of their size) was
"more than rounding" against an absolute 1e-4; :attrib drew a full cell for +0.00 beside +11069 (tester T3)."""

import dataclasses
import math

import pytest
import torch

from minitf_repl.commands.worked import rounding
from minitf_repl.core.attribution import Part
from minitf_repl.core.errors import UserError
from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session
from test_render import plain, text_of


# --- 1. :checks blind and overfit: a loss that grew is a rate too high, not one too low ------------------------------
def test_checks_say_a_loss_that_grew_is_a_rate_too_high_and_name_it():
    session = tiny_session(optimizer="adamw", grad_clip=0.0, lr=30.0)
    result = run(session, ":checks blind overfit steps=30")
    blind, overfit = result.blind, result.overfit
    assert blind.real_loss > 100 and overfit.final_loss > 100 * overfit.first_loss, (blind, overfit.final_loss)
    assert blind.rose and not blind.still and not blind.passed and result.failed == ["blind", "overfit"]
    text = plain(result, 200)
    assert "neither run moved" not in text and "too low" not in text and "hardly moved" not in text, text
    assert "its loss grew: it ended at" in text and "its loss grew (2.4" in text, text
    assert text.count("The rate is too high for this model: the fresh models trained at lr=30; lower it "
                      "(:set lr=3), or :lrfind finds one that trains") == 2, text


def test_checks_still_call_a_rate_too_low_one_that_did_not_move():
    session = tiny_session(optimizer="adamw", lr=1e-7)
    result = run(session, ":checks blind overfit steps=20")
    assert result.blind.still and not result.blind.rose, result.blind
    text = plain(result, 200)
    assert "neither run moved" in text and "hardly moved" in text and "too high" not in text, text


# --- 2. :grad and :muon on a gradient that is not finite ---------------------------------------------------------
NAN = math.nan


def nan_below_block_0_attention(result):
    """A real :grad result with its float32 gradient made nan from block 0's attention down, as lr=1e5's weights
    overflow it (the float64 check stays finite: it is float32 that overflows)."""
    ffn, attn = result.stream
    stream = [ffn, dataclasses.replace(attn, through=NAN, cos=NAN, leaves=NAN)]
    parts = [dataclasses.replace(p, grad=NAN, step=NAN) if not p.name.startswith("final") else p for p in result.parts]
    check = dataclasses.replace(result.check, backprop=NAN, relative_float32=NAN)
    return dataclasses.replace(result, stream=stream, embed=NAN, positions=[NAN] * len(result.positions), parts=parts,
                               head=NAN, embedding=NAN, check=check)


def test_grad_says_once_where_the_gradient_stops_being_finite_and_builds_nothing_on_nan():
    session = tiny_session(optimizer="adamw")
    result = nan_below_block_0_attention(run(session, ":grad"))
    text = plain(result, 200)
    assert ("the float32 gradient is not finite from blocks.0.attn down (it overflowed: the table's nan and "
            "inf): these weights cannot train") in text, text
    assert ":load NAME brings back a checkpoint from before the rate blew them up (:ls lists them)" in text
    # the sentences that read nan as a figure
    for said in ("(xnan)", "learns from the loss directly", "bars from 0 to nan", "(|.| = nan)", "nan off",
                 "g.u = +nan", "divides by the std"):
        assert said not in text, (said, text)
    assert "g.u is not finite (nan): the float32 gradient overflowed, which no rounding does" in text


def test_grad_of_a_loss_that_is_not_finite_says_the_forward_overflowed():
    session = tiny_session()
    with torch.no_grad():
        session.model.position_embedding.weight.mul_(1e25)  # the stream's variance overflows float32: the loss is nan
    result = run(session, ":grad")
    assert math.isnan(result.loss)
    text = plain(result, 200)
    assert "the float32 loss is not finite (nan): the forward pass overflowed, so no gradient is: these weights" in text
    assert "agrees to nan" not in text and "(xnan)" not in text and "autograd's dL/dz is not finite" in text, text


def test_muon_on_weights_that_blew_up_is_one_error_line(checkpoint_dir):
    session = tiny_session()
    with torch.no_grad():
        session.model.position_embedding.weight.mul_(1e25)
    with pytest.raises(UserError, match="has no finite gradient on this batch"):  # was linalg.svd's internal error
        run(session, ":muon")
    run(session, ":save blown")
    line = assert_one_error_line(invoke("--load", "blown", "muon"))
    assert "float32 overflowed in weights that have blown up" in line and "; load a checkpoint from before" in line


# --- 3. rounding judged against the values' size --------------------------------------------------------------------
def large_values(session):
    """Norm gains of 1e5: logits and a norm's output of about 1e4 to 1e5, whose float32 rounding is 1e-3 and more."""
    with torch.no_grad():
        session.model.ln_f.weight.mul_(1e5)
        session.model.blocks[0].ln_1.weight.mul_(1e5)
    return session


def test_rounding_is_relative_to_the_values_size():
    assert rounding(4e-3, [], 5000.0, "logit") == "8e-07 of the largest logit, 5e+03: float32 rounding"
    assert rounding(1.0, [], 5000.0, "logit") == "2e-04 of the largest logit, 5e+03: more than rounding"
    assert rounding(2e-4, [], 0.3) == "more than rounding"  # up to a size of 1 it is absolute, as it was


def test_kv_and_ln_call_rounding_of_large_values_rounding_and_say_the_relative_figure():
    session = large_values(tiny_session())
    kv = run(session, ":kv 12+")
    assert max(s.logit_diff for s in kv.steps) > 1e-3 and max(s.logit_size for s in kv.steps) > 1e4
    text = plain(kv, 200)
    assert "more than rounding" not in text and "of the largest logit" in text and ": float32 rounding)" in text, text
    ln = run(session, ":ln 1234")
    assert ln.norm.model_diff > 1e-3
    text = plain(ln, 200)
    assert "more than rounding" not in text and "of the largest y_j" in text and ": float32 rounding)" in text, text


# --- 4. :attrib draws no bar for a part that rounds to nothing ----------------------------------------------------
def test_attrib_draws_no_bar_for_a_part_that_rounds_to_nothing_beside_a_large_one():
    result = run(tiny_session(), ":attrib")
    result.parts = [Part("head 0.0", "head", 0, 0, 11069.0), Part("ffn 0", "ffn", 0, None, 2000.0),
                    Part("embed (token)", "embed", None, None, 0.02),
                    Part("output biases b^O", "bias", None, None, 0.001)]
    rows = {line.split()[0] + line.split()[1]: line for line in text_of(result, 100).splitlines()
            if line.startswith(("head 0.0", "ffn 0", "embed", "output"))}
    assert rows["head0.0"].count("█") == 40 and rows["ffn0"].count("█") == 7, rows  # 2000 / 11069 of 40 cells
    assert "█" not in rows["embed(token)"] and "█" not in rows["outputbiases"], rows  # were a full cell each
