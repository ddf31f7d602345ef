"""What a user's-eye sweep of the teaching words (the notes under the views, :help, the docs) found, checked against
the model as configured: each test failed before its fix.

`:context` of a model trained with causal=off said "the loss does not fall from position 0 to the last quarter by
more than the noise: reading more characters gains this model nothing", "the far context: positions 24-31 score 0.022
nats under positions 8-15: the model still gains from reading more than 16 characters back" and offered a longer
window, where every position reads the whole window (its own header says so): the curve says nothing of reading
further back. It now says that, and draws no conclusion about reading more from it.

`:help` and `:help rope` said RoPE makes "every score depending on the distance only", where `:rope` itself says the
score is "a function of content and distance" (q.k of the two tokens, turned by their distance); README's table said it
too. Both now say each score depends on the two tokens and their distance, not on where they stand.

`:help bias` said "biases in every linear layer", and a learner who then looked for the output head's bias in
`:params all=on` found none: the head (and a mixture's router) has no bias with bias=on either. The help now says so.
"""

from pathlib import Path

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import TINY, run
from test_render import plain

FOX = "the quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs!\n" * 40


def session_with(data: str = "sort:4", steps: int = 20, **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}),
                   TrainConfig(steps=steps, batch_size=4, eval_every=steps, eval_batches=1),
                   data_spec=data, device_name="cpu")


@pytest.fixture
def fox(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text(FOX, encoding="utf-8")
    return str(path)


# --- :context ----------------------------------------------------------------------------------------------------
def test_context_without_the_mask_draws_nothing_about_reading_further_back(fox):
    s = session_with(fox, causal=False)
    run(s, ":train")
    words = plain(run(s, ":context windows=64"))
    assert "every position reads the whole window" in words
    for said in ("the far context", "reading more", "half of the fall", "far end still gains", "longer window"):
        assert said not in words, said
    assert "does not show what reading further back gives" in words
    run(s, ":set causal=on")
    assert "the far context" in plain(run(s, ":context windows=64"))


# --- :help rope --------------------------------------------------------------------------------------------------
def test_help_rope_does_not_say_a_score_depends_on_the_distance_alone():
    s = session_with()
    for line in (":help rope", ":help"):
        words = plain(run(s, line))
        assert "distance only" not in words
    assert "the two tokens and their distance" in plain(run(s, ":help rope"))
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    assert "a score depends on the distance only" not in readme  # README's table of ideas said it too
    rope = session_with(pos_encoding="rope")
    assert "a function of content and distance" in plain(run(rope, ":rope 3055="))  # what the view itself says


# --- :help bias --------------------------------------------------------------------------------------------------
def test_help_bias_says_which_linear_layers_have_one():
    s = session_with(n_experts=2, experts_per_token=1)
    words = plain(run(s, ":help bias"))
    assert "every linear layer" not in words
    assert "the output head has none" in words
    assert s.model.lm_head.bias is None and s.model.blocks[0].ffn.router.bias is None  # what the words say
    assert s.model.blocks[0].attn.q_proj.bias is not None


# --- :resid with an eps that outweighs the spread ----------------------------------------------------------------
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_resid_does_not_say_the_norm_takes_the_scale_away_where_eps_outweighs_the_spread(norm):
    s = session_with(norm=norm, norm_eps=0.5)
    words = plain(run(s, ":resid 3055="))
    assert "takes the stream's scale away" not in words
    assert "divides by about sqrt(eps) and leaves the stream's scale in" in words
    assert "here it matters" in plain(run(s, ":ln 3055="))  # what :ln says of the same norm
    assert "takes the stream's scale away" in plain(run(session_with(norm=norm), ":resid 3055="))


# --- :ngram on a task --------------------------------------------------------------------------------------------
def test_ngram_on_a_task_says_the_model_reads_the_tasks_row_not_the_window(fox):
    s = session_with("sort:4")
    result = run(s, ":ngram")
    assert result.model_reads == 8  # '3055=0355' read as 8 inputs, as :context's windows of 8 characters
    words = plain(result)
    assert "up to 8 characters" in words and "up to 32 characters" not in words
    assert "windows of 8 characters" in plain(run(s, ":context windows=16"))
    assert run(session_with(fox), ":ngram").model_reads == 32  # a text: the window


# --- :checks blind without a position table ----------------------------------------------------------------------
def test_checks_blind_without_a_position_table_does_not_credit_the_answers_fixed_places():
    words = plain(run(session_with(pos_encoding="rope"), ":checks blind"))
    assert "nothing tells one position from another" in words
    assert "answers sit at fixed places" not in words
    assert "the unigram counter of the targets the loss scores (a task's answers" in words  # its yardstick counts them
    assert "answers sit at fixed places" in plain(run(session_with(), ":checks blind"))  # a table: it knows them


# --- :score counter= without the mask ----------------------------------------------------------------------------
def test_score_with_a_counter_does_not_say_a_model_without_the_mask_read_further_back():
    s = session_with("sort:4", steps=100, causal=False)
    run(s, ":train")
    words = plain(run(s, ":score 3055=0355 counter=3"))
    assert "the model gave the true next character" in words  # it beat the counter somewhere: the sentence is said
    assert "read further back" not in words
    assert "the model read it where it stands, at t + 1" in words


# --- :train's counter line without the mask ----------------------------------------------------------------------
def test_train_without_the_mask_does_not_rank_its_loss_against_the_counters():
    s = session_with("sort:4", steps=100, causal=False)
    run(s, ":ngram n=3")  # the counters :train's last line reads (up to 3: the default 6 took 2 s more, to no end)
    words = plain(run(s, ":train"))
    assert "counter's" not in words  # "below the 3-gram counter's 1.727"
    assert "no counter is a fair match" in words
    assert "no counter is a fair match" in plain(run(s, ":ngram n=3"))  # what :ngram says of the same model
    masked = session_with("sort:4", steps=20)
    run(masked, ":ngram n=3")
    assert "counter's" in plain(run(masked, ":train"))


# --- :grad with an eps that outweighs the spread -----------------------------------------------------------------
def test_grad_does_not_say_a_short_stream_makes_a_large_part_where_eps_sets_the_divisor():
    words = plain(run(session_with(norm_eps=0.5), ":grad 3055=0355"))
    assert "where the stream is short, the part is large" not in words
    assert "divides by about sqrt(eps) whatever the stream's length" in words
    assert "where the stream is short, the part is large" in plain(run(session_with(), ":grad 3055=0355"))
