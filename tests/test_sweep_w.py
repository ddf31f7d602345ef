"""What a user's-eye sweep of the teaching commands (:help, :qkv, :rope, :resid, :ln, :ffn, :grad, :muon, :checks,
:attn, :step, :heads, :shapes) found, checked for truth against the model as configured: each test failed before its
fix.

`:grad` without the causal mask said each position's vector "is read by every prediction from t on", said nothing of
taking its gradient without the model's dropout, and on a task wrote dL/dz "at each position" where the loss counts
the answer's alone. `:qkv at=0` without the mask said position 0 reads only itself, beside a row of seven weights, and
on an untrained qk_norm model called weights of 0.51 and 0.12 near uniform. `:shapes` of a model with no positions and
no mask said the causal mask orders its tokens, named every norm "LN" in an RMSNorm model's sublayer lines, wrote an
untied head as h W_U against the other views' h W_U^T, and on the fused kernel wrote "O = AV" of an A it never shows.
`:attn head=1` pointed at `:qkv` without the head, and under `:ablate` drew the ablated model without a word.
`:help vocab_size` said one token per character under a BPE; `:help checks which` said :checks had no option which
(`:help checks` lists WHICH), and `:help qkv at=` was refused. The worked views' tables cut their numbers ("0.0…") and
ran past a 40-column terminal. Examples in errors (`:grad hello`) did not run on a task's vocabulary; `:rope` on
another position kind offered "set pos_encoding=rope", no line the shell takes, and without the mask left out the keys
after the query. `:resid` of a post-norm model without the residual add said its norm reads h + f(h), and with
norm_gain=off spoke of a gain. `:checks` said "only zeros" of a blind model that read '+', started a fix sentence in
lower case, and dropped steps= without a word. `:heads` on a text that repeats said it had no repeats. `:muon` on a
matrix of eight directions compared "its 8 largest" (100% of any matrix), and `:muon matrix=fc_in` of a mixture of
experts said the block has no such matrix (it has one per expert). `:step` offered a `:gen ... seed=S` that
gen_seed refused half the time. `:ln` with an eps that outweighs the spread said eps matters only near a zero spread
and that the reader never sees the stream's scale.
"""

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import TINY, run, tiny_session
from test_render import plain, text_of


def session_with(data: str = "sort:4", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                   data_spec=data, device_name="cpu")


# --- :grad -----------------------------------------------------------------------------------------------------
def test_grad_without_the_mask_does_not_say_a_position_is_read_only_by_the_predictions_after_it():
    words = plain(run(session_with(causal=False), ":grad"))
    assert "read by every prediction from t on" not in words
    assert "every prediction reads it" in words  # no mask: every position reads the whole text
    assert "read by every prediction from t on" in plain(run(session_with(), ":grad"))


def test_grad_with_dropout_says_the_gradient_is_taken_without_it():
    s = session_with(dropout=0.3)
    words = plain(run(s, ":grad"))
    assert "dropout=0.3" in words and "without dropout" in words
    assert "without dropout" not in plain(run(session_with(), ":grad"))


# --- :qkv ------------------------------------------------------------------------------------------------------
def test_qkv_at_position_0_without_the_mask_does_not_say_it_reads_only_itself():
    s = session_with(causal=False)
    result = run(s, ":qkv at=0")
    assert sum(w > 0 for w in result.weights) == len(result.tokens) > 1  # it reads every key
    words = plain(result)
    assert "reads only itself" not in words
    assert "without the 1/sqrt(d_k) scale the largest weight would be" in words
    assert "position 0 reads only itself" in plain(run(session_with(), ":qkv at=0"))  # under the mask it does


# --- :shapes ---------------------------------------------------------------------------------------------------
def formulas(session) -> dict[str, str]:
    return {r.path: r.formula for r in run(session, ":shapes").records}


def test_shapes_of_a_model_with_no_positions_and_no_mask_does_not_say_the_mask_orders_its_tokens():
    unmasked = formulas(session_with(pos_encoding="none", causal=False))["hook_embed"]
    assert "causal mask orders" not in unmasked and "no causal mask" in unmasked
    assert "only the causal mask orders tokens" in formulas(session_with(pos_encoding="none"))["hook_embed"]


@pytest.mark.parametrize("placement", ["pre", "post"])
def test_shapes_names_the_norm_a_sublayer_reads_by_its_kind(placement):
    steps = formulas(session_with(norm="rmsnorm", norm_placement=placement))
    for name in ("blocks.0.hook_resid_mid", "blocks.0.hook_resid_post"):
        assert "RMSNorm(" in steps[name] and "LN(" not in steps[name], steps[name]
    assert "LN(" in formulas(session_with(norm_placement=placement))["blocks.0.hook_resid_mid"]


# --- :attn -----------------------------------------------------------------------------------------------------
def test_attn_of_one_head_points_at_qkv_of_that_head():
    s = session_with(n_layers=2)
    words = plain(run(s, ":attn head=1 layer=1"))
    assert ":qkv TEXT at=i layer=1 head=1" in words
    assert ":qkv TEXT at=i layer=1" in plain(run(s, ":attn layer=1"))  # all heads: no one head to name


# --- :help -----------------------------------------------------------------------------------------------------
def test_help_vocab_size_says_where_it_comes_from_under_a_bpe_too(tmp_path):
    from test_commands import TEXT

    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 4, encoding="utf-8")
    s = session_with(data=str(path))
    run(s, ":set tokenizer=bpe:260")
    result = run(s, ":help vocab_size")
    words = plain(result)
    assert result.setting.now == s.model_config.vocab_size > 256
    assert "one token per character" not in words and "tokenizer" in words


# --- 40 columns ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [":qkv", ":qkv at=-1", ":resid", ":ffn", ":grad"])
@pytest.mark.parametrize("model", [{}, dict(norm="rmsnorm", pos_encoding="rope")])
def test_the_worked_views_fit_40_columns_with_every_number_whole(line, model):
    s = session_with(**model)
    run(s, ":train steps=2")
    text = text_of(run(s, line), width=40)
    assert "…" not in text
    assert max(len(row.rstrip()) for row in text.splitlines()) <= 40


# --- examples in errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, view", [(":grad 1", "grad"), (":score 1", "score"), (":heads 1", "heads")])
def test_the_example_a_too_short_text_is_given_runs_on_the_data(line, view):
    from minitf_repl.core.errors import UserError

    s = session_with()  # sort: digits, '=' and '+'; no letters
    with pytest.raises(UserError) as refused:
        run(s, line)
    example = str(refused.value).split("e.g. ")[1]
    assert example.startswith(f":{view} ")
    run(s, example)  # the line the error suggests runs as written


# --- :rope -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pos, where", [("learned", "a learned table added at the input"),
                                        ("sinusoidal", "sinusoids added at the input"), ("none", "no positions")])
def test_rope_on_another_position_kind_names_it_and_gives_the_line_that_builds_one(pos, where):
    from minitf_repl.core.errors import UserError

    with pytest.raises(UserError) as refused:
        run(session_with(pos_encoding=pos), ":rope")
    text = str(refused.value)
    assert f"pos_encoding={pos}" in text and where in text
    assert ":set pos_encoding=rope" in text and "weights reset" in text


# --- :resid ----------------------------------------------------------------------------------------------------
def test_resid_post_norm_without_the_residual_add_says_the_norm_reads_f_of_h_alone():
    words = plain(run(session_with(norm_placement="post", residual=False), ":resid"))
    assert "h <- LN(f(h))" in words
    assert "of the h + f(h) that LN reads" not in words and "of the f(h) that LN reads" in words
    assert "of the h + f(h) that LN reads" in plain(run(session_with(norm_placement="post"), ":resid"))


def test_shapes_writes_an_untied_head_as_the_other_views_do():
    untied = formulas(session_with(tie_embeddings=False))["lm_head"]
    assert "W_U^T" in untied  # :resid, :ln: logits = LN_f(h) W_U^T, W_U the head's (V, d) matrix as W_E is
    assert "W_E^T" in formulas(session_with())["lm_head"]


# --- :checks ---------------------------------------------------------------------------------------------------
def test_checks_blind_that_fails_names_the_input_the_blind_model_read():
    from minitf_repl.commands.checks import failure
    from minitf_repl.core.checks import BlindCheck

    s = session_with()
    result = run(s, ":checks blind steps=1")
    check = result.blind
    assert check.zero_token == "+"  # sort: id 0 is '+', not the digit 0
    words = failure("blind", check, result)
    assert "only zeros" not in words and "every input '+' (id 0)" in words


def test_checks_causal_under_ablate_mask_starts_its_fix_as_a_sentence():
    s = session_with()
    run(s, ":ablate mask")
    words = plain(run(s, ":checks causal"))
    assert "goes wrong. The mask is switched off by :ablate mask: :ablate off puts it back" in words


# --- :heads ----------------------------------------------------------------------------------------------------
def test_heads_on_a_text_that_repeats_does_not_say_it_has_no_repeats():
    result = run(session_with(), ":heads 1234512345")
    assert result.first_copy is None  # a given text: no first-copy-against-repeat loss test
    assert "without repeats" not in result.reading
    assert "leave the text out" in result.reading


def test_shapes_on_the_fused_kernel_says_where_the_scores_and_the_pattern_went():
    fused = formulas(session_with(attention="sdpa"))
    assert "blocks.0.attn.hook_weights" not in fused  # the kernel keeps S and A to itself: no step of theirs
    weighted = fused["blocks.0.attn.hook_weighted"]
    assert "softmax(QK^T / sqrt(d_k) + M)V" in weighted and "sdpa" in weighted  # not "O = AV" with A never shown
    assert formulas(session_with())["blocks.0.attn.hook_weighted"] == "O = AV"


@pytest.mark.parametrize("line, shown", [(":help checks which", "which"), (":help heads TEXT", "text"),
                                         (":help qkv prompt", "prompt"), (":help qkv at=", "at"),
                                         (":help ln which=", "which")])
def test_help_command_option_shows_what_help_command_lists(line, shown):
    result = run(tiny_session(), line)  # :help checks lists WHICH and :help qkv at=, so both are asked about
    assert result.detail is not None and [p.name for p in result.params] == [shown]
    assert shown.upper() in plain(result) or f"{shown}=" in plain(result)


def test_help_of_a_setting_typed_with_its_equals_sign_shows_the_setting():
    result = run(tiny_session(), ":help lr=")
    assert result.setting is not None and result.setting.name == "lr"


# --- :muon -----------------------------------------------------------------------------------------------------
def test_muon_on_a_matrix_with_few_directions_compares_fewer_than_all_of_them():
    s = session_with(d_model=32, n_heads=4, n_kv_heads=1)  # k_proj: 8 x 32, eight singular values
    step = run(s, ":muon matrix=attn.k_proj").step
    assert len(step.singular) == 8
    assert step.top < 8 and step.orthogonal_share < 1  # "its 8 largest carry 100% (an orthogonal matrix: 100%)"
    assert step.top == 4 and step.orthogonal_share == 0.5
    assert run(s, ":muon matrix=attn.q_proj").step.top == 10  # 32 directions: the ten largest, as before


def test_qkv_on_an_untrained_model_calls_its_weights_near_uniform_only_where_they_are():
    plain_model = run(session_with(), ":qkv")
    assert "so the weights are near uniform" in plain(plain_model)
    normed = run(session_with(qk_norm=True), ":qkv")  # q and k of length sqrt(d_k): random scores are not small
    read = normed.at + 1
    assert max(normed.weights[:read]) > 1.5 / read  # far from 1/4 each
    words = plain(normed)
    assert "near uniform" not in words and "this model has not trained yet" in words


# --- :step -----------------------------------------------------------------------------------------------------
def test_step_without_a_seed_offers_a_gen_line_that_runs_and_picks_the_same():
    import re

    s = session_with()
    run(s, ":train steps=2")
    for _ in range(20):  # a seed drawn from 64 bits is past gen_seed's limit (2**63 - 1) half the time
        result = run(s, ":step 6540= temperature=2")
        assert 0 <= result.seed <= 2**63 - 1
    line = re.search(r"\((:gen .*?) picks the same\)", plain(result)).group(1).replace("PROMPT", "6540=")
    assert run(s, line).text.endswith(result.picked)


def test_grad_on_a_task_says_the_logits_gradient_is_0_where_the_loss_counts_nothing():
    result = run(session_with(), ":grad")  # sort: the loss counts the answer's positions only
    assert 0 < sum(result.counted) < len(result.counted)
    words = plain(result)
    assert "at each counted position (0 at the other" in words
    assert "/ N at each position (N = " in plain(run(session_with(), ":grad 1212121"))  # no question: all count


def test_attn_under_ablate_says_the_patterns_are_the_ablated_models():
    s = session_with(n_layers=2)
    run(s, ":ablate head=0.1")
    result = run(s, ":attn layer=1")
    assert result.ablations == ["head 0.1"]
    words = plain(result)
    assert "switched off now: head 0.1" in words and "ablated model" in words
    assert "switched off" not in plain(run(session_with(n_layers=2), ":attn layer=1"))


def test_checks_steps_without_a_training_check_says_it_was_left_out():
    from test_commands import Recorder
    from minitf_repl.commands import REGISTRY
    from minitf_repl.dispatch import run_command
    from minitf_repl.parsing import parse_line

    s = session_with()
    said = Recorder()
    command, args = parse_line(":checks rows causal steps=50", REGISTRY)
    run_command(s, command.name, args, said)
    assert any("steps=50" in n and "blind" in n and "left out" in n for n in said.notices), said.notices
    quiet = Recorder()
    command, args = parse_line(":checks rows", REGISTRY)
    run_command(s, command.name, args, quiet)
    assert not quiet.notices


# --- :ln -------------------------------------------------------------------------------------------------------
def test_ln_with_an_eps_that_dominates_does_not_say_it_matters_only_near_a_zero_spread():
    big = run(session_with(norm_eps=0.01), ":ln")  # an untrained stream's var is about 1e-3: eps outweighs it
    n = big.norm
    assert n.var < n.eps
    words = plain(big)
    assert "it matters only where the spread is near 0" not in words
    assert "here it matters" in words
    assert "it matters only where the spread is near 0" in plain(run(session_with(), ":ln"))


def test_ln_with_an_eps_that_dominates_does_not_say_the_reader_never_sees_the_streams_scale():
    result = run(session_with(norm_eps=0.01), ":ln")
    hats = [p.size_normalised for p in result.norm.positions]
    assert max(hats) / min(hats) > 1.05  # eps keeps part of each position's scale
    words = plain(result)
    assert "never sees the stream's scale" not in words and "eps keeps" in words
    assert "never sees the stream's scale" in plain(run(session_with(), ":ln"))


def test_resid_without_learned_gains_does_not_size_the_norms_output_by_a_gain():
    words = plain(run(session_with(norm_gain=False), ":resid"))
    assert "times the gain" not in words and "norm_gain=off" in words
    assert "times the gain" in plain(run(session_with(), ":resid"))


def test_rope_without_the_mask_says_the_query_reads_keys_after_it_that_the_table_leaves_out():
    s = session_with(pos_encoding="rope", causal=False)
    result = run(s, ":rope at=2")
    assert len(result.rope.keys) == 3 < len(result.tokens)  # keys 0..2 listed; the query reads all of them
    words = plain(result)
    assert f"reads the {len(result.tokens) - 3} keys after it too" in words
    assert "keys after it too" not in plain(run(session_with(pos_encoding="rope"), ":rope at=2"))


def test_muon_matrix_that_ends_several_names_says_which_it_could_be():
    from minitf_repl.core.errors import UserError

    s = session_with(n_experts=2)
    with pytest.raises(UserError) as refused:
        run(s, ":muon matrix=fc_in")
    text = str(refused.value)
    assert "has no matrix" not in text  # it has two: ffn.experts.0.fc_in and ffn.experts.1.fc_in
    assert "fc_in names 2 matrices" in text and "ffn.experts.0.fc_in, ffn.experts.1.fc_in" in text


def test_tab_after_help_command_offers_that_commands_options():
    from test_repl import complete

    assert complete(":help qkv a") == ["at="]  # :help qkv at= shows at=; "ablate", "attrib" are no option of :qkv
    assert complete(":help qkv ") == ["prompt", "at=", "layer=", "head="]
    assert complete(":help tr") == ["train"]  # the command itself, as before


def test_grad_all_fits_40_columns_with_every_number_whole():
    s = session_with()
    run(s, ":train steps=2")
    text = text_of(run(s, ":grad all=on"), width=40)
    assert "…" not in text and "blocks.0.attn.out_proj.weight" in text
    assert max(len(row.rstrip()) for row in text.splitlines()) <= 40


@pytest.mark.parametrize("line", [":step 6540= temperature=1", ":step 6540= temperature=0.5 top_k=3 top_p=0.9",
                                  ":step 6540= temperature=0", ":score", ":score counter=2"])
def test_step_and_score_fit_40_columns_with_every_number_whole(line):
    s = session_with()
    run(s, ":train steps=2")
    text = text_of(run(s, line), width=40)
    assert "…" not in text
    assert max(len(row.rstrip()) for row in text.splitlines()) <= 40
