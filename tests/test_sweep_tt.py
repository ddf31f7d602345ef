"""What a sweep of every model variant through every view that reads a model found: each test failed before its fix.

A SwiGLU feed-forward with bias=on (the default) learns a bias in each of its three matrices, yet `:shapes` wrote
its steps as "xW_g", "xW_u" and "(SiLU(xW_g) ⊙ xW_u) W_d" and `:ffn` its hidden layer as "SiLU(xW_g) ⊙ xW_u", where
the two-matrix FFN says "xW_1 + b_1". Attention's projections, which learn a bias each too, were traced as "Q =
HW^Q" and "Concat(heads) W^O" on every model, bias=on or off. `:resid` ended on "(W_U is W_E when the head is tied)"
whether or not it was. `:context` (and :report) on a causal=off model said its loss was "near 0 wherever it is"
beside a curve at ln V (a model barely trained), and that every position read the token it predicts: the last one's
lies past the window, and a trained model's loss there stayed at 2.5 nats beside 0.02 at the others (`:score`
said the same of the last position of its text, `:set causal=off` of every position and a loss toward 0). `:embed` on
pos_encoding=none with causal=off said the causal mask was what told the model where a token stands: there was none,
and nothing did. `:load` summed a loaded model up as "model: n_layers=2, d_model=32, n_heads=4, ..." whatever its
variant: a rope/rmsnorm/GQA/causal=off checkpoint read as a default model.
"""

import pytest
import torch

from minitf_repl.core.config import ModelConfig
from minitf_repl.core.inside import feed_forward_neurons
from test_commands import run, tiny_session
from test_qkv import model_for
from test_render import plain


# --- a SwiGLU with biases says so ----------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_formulas_name_the_biases_it_has(bias):
    model = model_for(activation="swiglu", bias=bias)
    ffn = model.blocks[0].ffn
    assert (ffn.gate_proj.bias is not None) == bias
    found = feed_forward_neurons(model, [3, 1, 4, 1, 5], layer=0, at=-1, top=3)
    steps = ffn.steps()
    if bias:
        assert found.pre_name == "xW_g + b_g" and found.hidden == "SiLU(xW_g + b_g) ⊙ (xW_u + b_u)"
        assert steps["gate_proj"].formula == "xW_g + b_g" and steps["up_proj"].formula == "xW_u + b_u"
        assert "W_d + b_d" in steps["down_proj"].formula
    else:
        assert found.pre_name == "xW_g" and found.hidden == "SiLU(xW_g) ⊙ xW_u"
        assert "b_" not in steps["down_proj"].formula + steps["gate_proj"].formula
    # the pre-activation the view lists is the gate's own output, bias included
    x = torch.randn(2, ffn.gate_proj.in_features)
    with torch.no_grad():
        want = ffn.down_proj(torch.nn.functional.silu(x @ ffn.gate_proj.weight.T + (ffn.gate_proj.bias if bias else 0))
                             * (x @ ffn.up_proj.weight.T + (ffn.up_proj.bias if bias else 0)))
        assert torch.allclose(ffn(x), want, atol=1e-6)


def test_swiglu_shapes_view_shows_the_biases():
    session = tiny_session()
    run(session, ":set activation=swiglu")
    text = plain(run(session, ":shapes"), width=160)
    assert "xW_g + b_g" in text and "W_d + b_d" in text


# --- attention's projections name their biases -----------------------------------------------------
@pytest.mark.parametrize("changes", [{}, {"bias": False}, {"n_kv_heads": 1}, {"n_kv_heads": 1, "bias": False}])
def test_attention_steps_name_the_biases_it_has(changes):
    session = tiny_session()
    for key, value in changes.items():
        run(session, f":set {key}={'off' if value is False else value}")
    attn = session.model.blocks[0].attn
    biased = changes.get("bias", True)
    assert (attn.q_proj.bias is not None) == biased
    steps = attn.steps()
    for name in "QKV":
        formula = steps[f"{name.lower()}_proj"].formula
        assert formula.startswith(f"{name} = HW^{name}" + (f" + b^{name}" if biased else ""))
    assert steps["out_proj"].formula == "Concat(heads) W^O" + (" + b^O" if biased else "")
    assert ("HW^Q + b^Q" in plain(run(session, ":shapes"), width=160)) == biased


# --- :resid says whether the head is tied --------------------------------------------------------
@pytest.mark.parametrize("tied", [True, False])
def test_resid_names_the_output_head_the_model_has(tied):
    session = tiny_session()
    if not tied:
        run(session, ":set tie_embeddings=off")
    result = run(session, ":resid")
    assert result.tied == tied
    text = plain(result, width=200)
    assert ("W_U = W_E: the head is tied" in text) == tied
    assert ("the head's own matrix, tie_embeddings=off" in text) == (not tied)
    assert "when the head is tied" not in text  # a remark on a tie the model may not have


# --- :context on causal=off says near 0 only where it is --------------------------------------------
def test_context_without_the_mask_claims_near_zero_only_where_it_is():
    session = tiny_session()
    run(session, ":set causal=off")
    result = run(session, ":context windows=16 counter=0")
    assert result.curve.mean > 1.0  # untrained: about ln V
    text = plain(result, width=200)
    assert "no causal mask" in text and "near 0" not in text
    assert "falls toward 0 as the model learns to copy (" in text


# --- :embed on a model with neither positions nor a mask -----------------------------------------
@pytest.mark.parametrize("causal", [True, False])
def test_embed_without_positions_names_the_mask_only_where_there_is_one(causal):
    session = tiny_session("pydoc")
    run(session, ":set pos_encoding=none")
    if not causal:
        run(session, ":set causal=off")
    result = run(session, ":embed")
    text = plain(result, width=200)
    assert result.causal == causal and "this model has no positions" in text
    assert ("but what the causal mask lets each position read" in text) == causal
    assert ("no causal mask: nothing tells it where a token stands" in text) == (not causal)


def test_embed_with_rope_switched_off_and_no_mask():
    session = tiny_session("pydoc")
    run(session, ":set pos_encoding=rope")
    run(session, ":set causal=off")
    run(session, ":ablate positions")
    text = plain(run(session, ":embed"), width=200)
    assert "RoPE is switched off" in text and "but what the causal mask lets it read" not in text
    assert "(and there is no causal mask)" in text


# --- :load names the variant it loaded ----------------------------------------------------------
def test_load_names_the_architecture_settings_that_are_not_the_defaults(checkpoint_dir):
    session = tiny_session()
    for line in (":set pos_encoding=rope", ":set norm=rmsnorm", ":set n_kv_heads=1", ":set causal=off"):
        run(session, line)
    run(session, ":train steps=1")
    run(session, ":save variant")
    text = plain(run(tiny_session(), ":load variant"), width=300)
    model = text[text.index("model: "):]
    for shown in ("pos_encoding=rope", "norm=rmsnorm", "n_kv_heads=1", "causal=off"):
        assert shown in model
    assert "activation=" not in model and "bias=" not in model  # the defaults stay unsaid


def test_context_without_the_mask_names_the_last_position_apart():
    """A trained causal=off model scores near 0 at every position but the last, whose next token is past the window."""
    session = tiny_session("pydoc", steps=300, batch_size=8, eval_every=300)
    run(session, ":set causal=off")
    run(session, ":set max_seq_len=16")
    run(session, ":train")
    result = run(session, ":context windows=64 counter=0")
    losses = result.curve.losses
    assert max(losses[:-1]) < 0.3 < 1.0 < losses[-1]  # the last position cannot copy its next token
    text = plain(result, width=200)
    assert "every one but the last the character it predicts too (the last one's lies past the window)" in text
    assert "each position but the last reads the token it predicts, so its loss is near 0" in text
    assert f"the last one's next token lies past the window ({losses[-1]:.3f} nats)" in text
    assert "near 0 wherever it is" not in text


def test_score_without_the_mask_sets_the_last_position_apart():
    session = tiny_session("pydoc")
    run(session, ":set causal=off")
    result = run(session, ":score the cat sat")
    text = plain(result, width=300)
    assert "the true next token included (no causal mask now) but at the last position" in text
    assert len(result.losses) == len("the cat sat") - 1  # the last character read predicts nothing scored here


def test_set_causal_off_sets_the_last_position_apart():
    session = tiny_session("pydoc")
    text = plain(run(session, ":set causal=off"), width=300)
    assert "the token it is to predict included but at the last position" in text
    assert "the loss falls toward 0 everywhere else" in text
