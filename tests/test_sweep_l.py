"""What a user's-eye sweep of the views that look inside the model found wrong: each test failed before its fix.

:muon on a block that `:ablate block=L` skips, or on an expert no token of the batch was routed to, fell over with
an autograd traceback. :ffn wrote FFN(x) = sum_n h_n v_n + b for a model whose output matrix has no bias (bias=off,
the llama and modern presets). :patch read a corruption that moves z[answer] - z[foil] the wrong way (the corrupted
prompt favours the answer more) as "only -0.626 ... noise over a tiny difference". :attrib, :patch, :score, :step
and :muon showed the ablated model's numbers without saying that :ablate had parts switched off. :resid sent a
post-norm or residual=off model to :attrib, which refuses it. :attrib said the frozen final norm adds "its bias"
where the norm has none (RMSNorm, bias=off), and :ln spoke of the gain "and bias" weighing the features where there
is no bias. :step at temperature 0 (greedy, where top-k and top-p are not applied) marked every other token "cut" by
top-k, and under :quantize int8 it read the float model while promising that :gen (which samples from the int8 copy)
picks the same; its column headed "/ T" held (z - max z) / T unsaid. :kv said the sliding window refills the cache
because "positions are absolute" on a model with no positions, and wrote "1 layers". Under `:ablate positions` :rope
worked out a rotation the model no longer makes and :qkv said q and k were read "after rope". :ln on an untrained
model with norm_gain=off said "its gains are 1".
"""

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import run
from test_render import plain

TINY = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def session_on(data="pydoc", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2), data_spec=data,
                   device_name="cpu")


# --- :ffn without biases -------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, bias", [({}, True), ({"bias": False}, False),
                                           ({"activation": "swiglu", "bias": False}, False),
                                           ({"activation": "swiglu"}, True)])
def test_ffn_writes_the_output_bias_only_where_the_part_has_one(changes, bias):
    session = session_on(**changes)
    result = run(session, ":ffn abc")
    shown = plain(result)
    assert result.out_bias is bias
    assert ("FFN(x) = sum_n u_n v_n + b," in shown) is bias
    assert ("checked: sum_n u_n v_n + b agrees" in shown) is bias
    if not bias:
        assert "FFN(x) = sum_n u_n v_n, v_n the column n" in shown and "checked: sum_n u_n v_n agrees" in shown


# --- :patch where the corruption moves the difference the wrong way -------------------------------------
def test_patch_reads_a_corruption_that_favours_the_answer_more_as_upside_down_not_as_a_tiny_move():
    from minitf_repl.commands.why import patch_reading

    stream, resid, heads = ["embed", "blocks.0"], [[0.0, 0.2], [0.0, 0.9]], [[0.3, 0.1]]
    wrong_way = patch_reading(heads, stream, resid, gap=-0.626)
    assert "only" not in wrong_way and "tiny" not in wrong_way
    assert wrong_way == ("the corrupted prompt favours the answer more than the clean one (z[answer] - z[foil] moves "
                         "by -0.626, the wrong way), so these fractions read upside down; choose a corrupted prompt "
                         "that changes the answer (or train first)")
    for tiny in (0.023, -0.023):  # a tiny move either way: noise over a tiny difference
        assert f"by only {tiny:+.3f}" in patch_reading(heads, stream, resid, gap=tiny)


# --- :resid names :attrib only where :attrib splits the stream ----------------------------------------
@pytest.mark.parametrize("changes, attrib", [({}, True), ({"norm_placement": "post"}, False),
                                             ({"residual": False}, False)])
def test_resid_sends_to_attrib_only_a_model_attrib_reads(changes, attrib):
    session = session_on(**changes)
    shown = plain(run(session, ":resid abc"))
    assert (":attrib abc shows which of these writes push the next token" in shown) is attrib
    if not attrib:
        with pytest.raises(Exception, match="direct logit attribution splits the residual stream"):
            run(session, ":attrib abc")  # the view it would have named refuses this model


# --- what the frozen final norm adds of its own, by norm ------------------------------------------------
@pytest.mark.parametrize("changes, bias", [({}, True), ({"norm": "rmsnorm"}, False), ({"bias": False}, False)])
def test_attrib_speaks_of_the_final_norms_bias_only_where_it_has_one(changes, bias):
    result = run(session_on(**changes), ":attrib abc")
    shown = plain(result)
    assert result.norm_bias is bias
    assert ("of its own (its bias;" in shown) is bias
    if not bias:
        assert result.offset == 0.0
        assert "the final norm has no bias, so it adds nothing of its own (scale" in shown


# --- :ln's note on what weighs the features ---------------------------------------------------------------
@pytest.mark.parametrize("changes, weighs", [({}, "the gain and bias weigh"), ({"norm": "rmsnorm"}, "the gain weighs"),
                                             ({"bias": False}, "the gain weighs")])
def test_ln_names_a_bias_among_what_weighs_the_features_only_where_the_norm_has_one(changes, weighs):
    import torch

    session = session_on(**changes)
    with torch.no_grad():  # a gain far from 1, as training leaves it: |y_t| then varies apart from |x̂_t|
        session.model.blocks[0].ln_1.weight.copy_(torch.linspace(0.1, 3.0, 32))
    shown = plain(run(session, ":ln 'The example'"))
    assert f"({weighs} each position's features differently)" in shown


# --- :kv's cache size in words ----------------------------------------------------------------------------
def test_kv_writes_one_layer_and_one_key_value_head_in_the_singular():
    shown = plain(run(session_on(n_layers=1, n_kv_heads=1), ":kv abc n=1"))
    assert "(1 layer x K and V x 1 key/value head x 8 numbers)" in shown
    assert "(2 layers x K and V x 4 key/value heads x 8 numbers)" in plain(run(session_on(), ":kv abc n=1"))


# --- :step when greedy ----------------------------------------------------------------------------------------
def test_step_greedy_shows_top_k_and_top_p_as_not_applied_rather_than_cutting():
    from test_render import text_of

    session = session_on()
    greedy = text_of(run(session, ":step abc temperature=0 top_k=3 top_p=0.5"))
    assert "greedy (temperature 0)" in greedy
    assert " cut " not in greedy and "top-k 3" not in greedy and "top-p 0.5" not in greedy  # neither stage runs
    vocab = session.data.tokenizer.vocab_size  # pydoc's characters: 103 in Python 3.11, 104 in 3.10 and 3.12
    assert f"1 of {vocab} tokens could be picked" in " ".join(greedy.split())
    sampled = text_of(run(session, ":step abc temperature=0.8 top_k=3"))
    assert " cut " in sampled and "top-k 3" in sampled  # a stage that runs still shows what it cut


# --- :muon on a block :ablate skips -------------------------------------------------------------------------
def test_muon_on_a_block_that_ablate_skips_says_it_gets_no_gradient_instead_of_a_traceback():
    from minitf_repl.core.errors import UserError

    session = session_on()
    run(session, ":ablate block=0")
    with pytest.raises(UserError, match=r"block 0 is skipped now \(:ablate block=0\), so its attn.q_proj gets no "
                                        r"gradient; :ablate off puts it back, or choose another layer="):
        run(session, ":muon")
    result = run(session, ":muon layer=1")  # the block that still runs: its gradient is the ablated model's
    assert result.ablations == ["block 0"]
    assert "the model's own numbers here are the ablated model's" in plain(result)


# --- views whose numbers are the ablated model's say so ------------------------------------------------------
@pytest.mark.parametrize("line", [":attrib abc", ":patch abc abd", ":score abcd", ":step abc seed=1"])
def test_the_why_and_next_token_views_say_when_ablate_has_parts_switched_off(line):
    session = session_on()
    note = "switched off now: head 0.0 (:ablate off puts the model back); the model's own numbers here are the ablated"
    before = run(session, line)
    assert before.ablations == [] and "switched off now" not in plain(before)
    run(session, ":ablate head=0.0")
    after = run(session, line)
    assert after.ablations == ["head 0.0"] and note in plain(after)


# --- why :kv fills the cache again once the window slides -------------------------------------------------
@pytest.mark.parametrize("changes, why", [
    ({}, "the window slides: positions are absolute, so every cached key would change"),
    ({"pos_encoding": "rope"}, "the window slides: RoPE reads distances, not where tokens stand, but the token that "
                               "falls out was read by every later one"),  # not "absolute" (test_sweep_bf)
    ({"pos_encoding": "none"}, "the window slides: there are no positions here, but the token that falls out was read "
                               "by every later one, so from the second layer on every cached key and value would "
                               "change"),
    ({"pos_encoding": "none", "n_layers": 1}, "the window slides: with no positions and one layer each cached k and v "
                                              "is made from its own token alone, so only the dropped token's would "
                                              "need to go; the cache is filled again all the same"),
])
def test_kv_gives_the_reason_the_sliding_window_refills_the_cache_that_holds_for_the_model(changes, why):
    session = session_on(max_seq_len=8, **changes)
    shown = plain(run(session, ":kv abcdefg n=3"))
    assert why in shown
    assert ("positions are absolute" in shown) is (changes.get("pos_encoding") not in ("none", "rope"))


# --- :step reads the model :gen samples from ----------------------------------------------------------------
def test_step_under_quantize_reads_the_int8_copy_that_gen_samples_from_as_its_line_promises():
    import torch

    session = session_on()
    run(session, ":train steps=3")
    run(session, ":quantize int8")
    copy = session.sampling_model
    assert copy is not session.model
    ids = torch.tensor([session.data.tokenizer.encode("The example")])
    with torch.no_grad():
        int8, floats = copy(ids)[0][0, -1], session.model(ids)[0][0, -1]
    assert not torch.equal(int8, floats)
    result = run(session, ":step 'The example' seed=1")
    assert [row.logit for row in result.rows] == pytest.approx([float(int8[row.id]) for row in result.rows], abs=1e-6)
    assert result.int8
    assert "the int8 copy :gen samples from (:quantize off goes back to the float model)" in plain(result)
    run(session, ":quantize off")
    back = run(session, ":step 'The example' seed=1")
    assert not back.int8 and "int8" not in plain(back)


# --- RoPE switched off by :ablate positions ---------------------------------------------------------------------
def test_rope_and_qkv_under_ablate_positions_do_not_work_out_a_rotation_the_model_no_longer_makes():
    from minitf_repl.core.errors import UserError

    session = session_on(pos_encoding="rope")
    assert "q and k as the scores read them: after rope" in plain(run(session, ":qkv abcdef"))
    run(session, ":ablate positions")
    with pytest.raises(UserError, match=r"RoPE's rotation is switched off now \(:ablate positions\): the model's q and "
                                        r"k are not turned; :ablate off puts it back"):
        run(session, ":rope abcdef")
    shown = plain(run(session, ":qkv abcdef"))
    assert "after rope" not in shown and "float32 rounding" in shown  # the scores are the unturned q and k's
    both = session_on(pos_encoding="rope", qk_norm=True)
    run(both, ":ablate positions")
    shown = plain(run(both, ":qkv abcdef"))
    assert "q and k as the scores read them: after qk_norm" in shown and "and rope" not in shown


# --- what :step's temperature column holds ---------------------------------------------------------------------
def test_step_says_its_temperature_column_is_shifted_by_the_largest_logit():
    session = session_on()
    result = run(session, ":step abc seed=1 temperature=0.5")
    top = result.rows[0]
    assert top.scaled == 0.0 and top.logit != 0.0  # (z - max z) / T, not z / T
    assert "/ T=0.5: (z - max z) / 0.5, shifted so that the largest is 0 (softmax does not change under a shift)" in (
        plain(result))
    assert "max z" not in plain(run(session, ":step abc temperature=0"))  # greedy: the column is empty


# --- :ln on an untrained norm that has no gain -------------------------------------------------------------------
@pytest.mark.parametrize("changes", [{"norm_gain": False}, {"norm_gain": False, "norm": "rmsnorm"}])
def test_ln_on_an_untrained_model_speaks_of_gains_only_where_the_norm_has_them(changes):
    shown = plain(run(session_on(**changes), ":ln abc"))
    assert "gains are 1" not in shown
    assert "this model has not trained yet: the stream it reads is random (the norm itself learns nothing)" in shown
    assert "its gains are 1 and its biases 0, so y is x̂" in plain(run(session_on(), ":ln abc"))


def test_muon_on_an_expert_no_token_of_the_batch_was_routed_to_says_so_instead_of_a_traceback():
    from minitf_repl.core.errors import UserError
    from minitf_repl.core.muon_step import matrix_names

    session = Session(ModelConfig(**{**TINY, "n_layers": 1, "max_seq_len": 8, "n_experts": 16, "experts_per_token": 1}),
                      TrainConfig(steps=2, batch_size=1), data_spec="pydoc", device_name="cpu")
    idle = 0
    for name in (n for n in matrix_names(session.model, 0) if n.endswith("fc_in")):  # 8 tokens, 16 experts
        try:
            run(session, f":muon matrix={name}")
        except UserError as e:
            assert str(e) == (f"block 0's {name} takes no part in this batch's forward pass, so it gets no gradient; "
                              "choose another matrix= or seed=")
            idle += 1
    assert idle >= 8
