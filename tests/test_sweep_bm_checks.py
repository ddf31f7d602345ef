"""`:checks` on models broken on purpose: a loaded std-1 model, logits that read nothing, a rate too low; wording."""

import math

import pytest
import torch

from minitf_repl.core import checks
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from test_commands import run, tiny_session
from test_render import plain

TEXT = ("The quick brown fox jumps over the lazy dog. A lazy dog sleeps; the fox runs on. " * 40
        + "Pack my box with five dozen liquor jugs. How vexingly quick daft zebras jump! " * 40)
SMALL = dict(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=24)


@pytest.fixture
def session(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    s = Session(ModelConfig(**SMALL), data_spec=str(path), checkpoint_dir=tmp_path / "ck", device_name="cpu")
    s.trainer.set_config(s.trainer.config.replace(batch_size=4, eval_batches=2))
    return s


# --- 1. init scores the session's model where it is neither trained nor a fresh one ------------------------------
def test_init_fails_an_untrained_model_whose_weights_are_not_a_fresh_ones(session):
    """A std-1 model (as loaded from elsewhere) passed on the fresh model's 4.6 while its own loss was 28."""
    with torch.no_grad():
        for p in session.model.parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 1.0)
    result = run(session, ":checks init")
    init = result.init
    assert "init" in result.failed and not init.passed and init.model_passed is False
    assert init.model_loss > init.uniform + 1 and init.model_weight_std > 0.5 > 0.05 > init.fresh_weight_std
    text = plain(result, width=200)
    assert "the session's model, not trained and not a fresh one" in text
    assert "an init scale" in text and "std 0.02" not in text  # no claim of weights the model does not hold


def test_init_says_nothing_new_of_a_fresh_or_a_trained_model(session):
    fresh = run(session, ":checks init").init
    assert fresh.passed and fresh.model_loss is None and fresh.model_passed is None  # the fresh model, drawn again
    assert "std 0.02" in plain(run(session, ":checks init"), width=200)  # the fresh model's, measured
    run(session, ":train steps=3")
    trained = run(session, ":checks init").init
    assert trained.passed and trained.model_loss is None


# --- 2. causal fails where the logits read nothing ----------------------------------------------------------------
def test_causal_fails_logits_that_read_nothing_and_leaves_the_mask_caption_out(session):
    with torch.no_grad():  # a final norm of gain and bias 0: the head gets the same 0 whatever comes in
        session.model.ln_f.weight.zero_()
        if session.model.ln_f.bias is not None:
            session.model.ln_f.bias.zero_()
    result = run(session, ":checks rows causal")
    assert result.causal.reads_nothing and "causal" in result.failed
    text = plain(result, width=200)
    assert "blank above the diagonal" not in text and "causal mask at work" not in text
    assert "the output reads nothing" in text and "final one" in text
    assert "they read nothing" in text  # rows' exact 0 on the other rows said to be vacuous


def test_causal_fails_a_width_of_1_and_names_it(session):
    run(session, ":set d_model=1 n_heads=1")
    result = run(session, ":checks causal")
    assert not result.causal.passed and result.causal.reads_nothing
    assert "d_model=2" in plain(result, width=200)


def test_causal_still_passes_a_model_that_reads(session):
    check = run(session, ":checks causal").causal
    assert check.passed and not check.reads_nothing


# --- 3. blind names a known cause --------------------------------------------------------------------------------
def test_blind_names_logits_that_read_no_input(session):
    run(session, ":set d_model=1 n_heads=1")
    result = run(session, ":checks blind steps=2")
    assert not result.blind.reads_input and "blind" in result.failed
    text = plain(result, width=200)
    assert "read no input" in text and "d_model=2" in text and "Train longer" not in text


def blind_failure(real: float, blind: float, still: bool = False) -> str:
    """The blind check's advice on pydoc (V = 103, unigram counter 3.238) for runs that ended at `real`, `blind`."""
    from minitf_repl.commands.checks import ChecksResult, failure

    check = checks.BlindCheck(100, real, blind, 3.238, 4.650, "\n", True, False, still=still)
    return failure("blind", check, ChecksResult("pydoc", "character", 103, 0, ["blind"], blind=check,
                                                blind_margin=checks.BLIND_MARGIN))


def test_blind_says_the_rate_is_too_low_where_neither_run_moved():
    """lr=1e-6 on pydoc: 4.600 and 4.639 against the counter's 3.238, and "train longer" was the advice. (End to end,
    a fresh model's real and blind losses lie 0.1 apart as often as not: whether it fails at all is the seed's.)"""
    text = blind_failure(4.600, 4.639, still=True)
    assert "neither run moved" in text and "rate is too low" in text and "Train longer" not in text
    assert ":lrfind" in text
    moved = blind_failure(2.95, 3.0)  # both got most of the way to the counter: more steps may tell them apart
    assert "Train longer" in moved and "neither run moved" not in moved


# --- 4. the batch check's rows are a sample of a batch of batch_size ---------------------------------------------
@pytest.mark.parametrize("batch_size, said", [(16, "4 rows of a training batch (of 16)"),
                                              (1, "in a training batch of 1 row:")])
def test_the_batch_check_says_how_its_rows_stand_to_the_batch(session, batch_size, said):
    run(session, f":set batch_size={batch_size}")
    result = run(session, ":checks batch")
    assert result.batch.rows == min(4, batch_size) and result.batch.batch_size == batch_size
    assert said in plain(result, width=200)


# --- 5. wording -------------------------------------------------------------------------------------------------
def test_an_unknown_check_gets_a_did_you_mean():
    from minitf_repl.commands.checks import asked_checks

    with pytest.raises(UserError, match="did you mean :checks causal"):
        asked_checks("casual")


def test_ablate_names_the_block_of_a_head_as_a_block():
    session = tiny_session("sort:4")
    with pytest.raises(UserError) as error:
        run(session, ":ablate head=9.9")
    message = str(error.value)
    assert "block of head=L.H must be in 0..0 (the model has 1 block), got 9" in message and "layer" not in message


def test_a_layer_out_of_range_is_said_in_layers():
    from minitf_repl.commands.base import check_layer

    with pytest.raises(UserError, match=r"layer must be in 0\.\.0 \(the model has 1 layer, one per block\), got 5"):
        check_layer(tiny_session("sort:4"), 5)


def test_ablations_are_listed_by_kind_and_index():
    session = tiny_session("sort:4")
    session.set_model_config(session.model_config.replace(n_layers=4))
    run(session, ":ablate block=1")
    result = run(session, ":ablate block=0 block=3 head=2.1 head=0.1")
    assert result.active == ["head 0.1", "head 2.1", "block 0", "block 1", "block 3"]


# --- 6. on a task, the blind check's yardstick counts what the loss scores ---------------------------------------
def test_the_blind_yardstick_on_a_task_counts_the_answers_alone():
    """sort's answer digits are uniform: ln 10 = 2.303, where :ngram's counter of whole rows read 2.383."""
    session = tiny_session("sort:4")
    unigram = checks.scored_unigram(session.data, session.model_config.max_seq_len)
    assert unigram == pytest.approx(math.log(10), abs=0.01)
    result = run(session, ":checks blind steps=2")
    assert result.blind.unigram_scored and result.blind.unigram_loss == pytest.approx(unigram)
    assert "the unigram counter of the scored targets" in plain(result, width=200)


def test_the_blind_yardstick_on_a_text_is_ngrams(session):
    assert checks.scored_unigram(session.data, SMALL["max_seq_len"]) is None


def test_blind_fails_runs_that_did_not_move_whatever_their_gap():
    """At lr=1e-9 a fresh model's real and blind losses differ by about 0.1 already: the margin alone passed or failed
    a model that learned nothing by its seed. Neither run moving a tenth of the way to the counter fails."""
    s = tiny_session("sort:4")
    run(s, ":set lr=1e-9")
    result = run(s, ":checks blind steps=10")
    assert result.blind.still and result.blind.passed is False
