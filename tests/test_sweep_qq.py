"""What a user's-eye sweep of numbers at the extremes (learning rates that blow training up, sampling settings at their
edges, the smallest models) found: each test failed before its fix.

Training at the edges. An update whose loss and gradient were finite could still turn the weights to inf or nan
(lr=1e39, or 1e37 where the activations overflow): `:train steps=1` then reported "val loss nan", autosaved a checkpoint
that `:load` refuses, and `:gen` on it ended in an internal error; now the run fails as a divergence and is rolled back.
Weights that stay finite but overflow in the forward (a run at lr=1e30 stopped after a step) still made `:gen` an
internal error, and `:gen temperature=0` printed the argmax of nan logits as text: the sampler now refuses non-finite
logits in one line, and a run stopped between evaluations checks that its last batch's loss is still finite after the
update. A run whose result said its rate was too high ("the val loss 130 is far above ln(V)": lr=10) was then offered
after a divergence as the rate that "trained here without diverging". A run at lr=1e-9 that learned nothing sent the
learner to `:checks overfit`, which trains at the same rate, never naming the rate. `:lrfind low=100 high=1000`, blown
up after 2 steps, labelled its chart's ends "lr 1e+02" and "1e+02".

Sampling at the edges. `:gen top_k=100` on a vocabulary of 12 cut nothing without a word: a notice says so. `:step
temperature=1e-300` said "103 of 103 tokens could be picked" where one had a probability above 0. top_k kept every token
tied with the k-th logit, so top_k=1 on two equal best logits drew between them where temperature 0 (and the help's "the
k likeliest tokens only") takes one; a tiny top_p on tied logits kept whichever tied token an unstable sort put first
(id 138 of 400), not the one greedy takes. `:gen n=0 --json` said seed_drawn: true, a seed that drew nothing, where the
text showed none (and a task's question drawn at n=0 was shown without the seed that asks it again); `:gen top_k=1`
named a "drawn seed" that decides nothing, as greedy's is not named.

The smallest models. `:checks causal` on a model whose logits read no position (d_model=1) said half of what position t
reads "lies on the 3.0 positions nearest it" in a window of 2: a row with no dependence is left out, and a model that
reads nothing is told so. `:checks causal` at max_seq_len=1 passed with "0 of the 0 pairs" and "the causal mask at
work", a claim nothing had tested: it says there was nothing to check. On d_model=1, where LayerNorm's x - mean(x) is 0
and it outputs its bias alone, `:ln` ended in an internal error (0 divided by 0) and `:grad` said "0.0000 at h_0 (xnan),
so even the first block learns from the loss directly"; `:set d_model=1` built such a model without a word. `:checks
overfit` under dropout=0.99 failed with advice to try more steps or another rate, never naming the dropout the fresh
model trained with. `:ffn` on a vocabulary of 4 listed a token the unit lowers ("d -0.00") under "raises the logit of",
and raised ones under "lowers". `:context` at max_seq_len=1 said "reading more characters gains this model nothing",
where it cannot read more.

Views of a model trained at lr=30 (finite, but logits thousands apart). `:mistakes` showed -ln p "inf" on every row
under "mean -ln p 2229.856": it took -ln of a probability that had underflowed to 0. `:gen show=probs` said "these
sampling settings (temperature 0, top_k=1 or a tiny top_p) leave one token" under the default settings.

Values in other spellings. `:set temperature=-0` (and weight_decay, grad_clip) stored -0.0 and said "0.8 -> -0".
"""

import math

import pytest
import torch

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import TrainingDiverged, UserError
from minitf_repl.session import Session
from test_commands import Recorder, run, tiny_session
from test_render import plain


def blowing_up(**train) -> Session:
    return tiny_session(optimizer="adamw", warmup_steps=0, lr=1e39, **train)


def weights_finite(session) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in session.model.parameters())


# --- an update that ruins the weights with a finite loss and gradient ------------------------------------------
@pytest.mark.parametrize("line, stop_after", [(":train steps=1", None), (":train steps=5", 1)])
def test_a_step_that_leaves_the_weights_non_finite_is_a_divergence_and_is_rolled_back(checkpoint_dir, line,
                                                                                      stop_after):
    s = blowing_up(eval_every=100)
    with pytest.raises(TrainingDiverged) as e:
        run(s, line, Recorder(stop_after=stop_after))
    assert "became" in str(e.value) and "\n" not in str(e.value)
    assert weights_finite(s) and s.trainer.step == 0
    assert ckpt.list_checkpoints(checkpoint_dir) == []  # no autosave of a model :load would refuse


def test_a_run_stopped_after_a_step_whose_finite_weights_overflow_is_a_divergence(checkpoint_dir):
    s = tiny_session(optimizer="adamw", warmup_steps=0, lr=1e30, eval_every=100)
    with pytest.raises(TrainingDiverged, match="the loss of its batch became nan"):
        run(s, ":train steps=5", Recorder(stop_after=1))  # weights of 1e30, finite, whose forward gives nan
    assert s.trainer.step == 0 and ckpt.list_checkpoints(checkpoint_dir) == []


def overflowing(session) -> None:
    """Weights as a run at lr=1e30 leaves them: finite, each about 1e30, so the forward overflows to nan."""
    with torch.no_grad():
        for p in session.model.parameters():
            p.copy_(torch.sign(p) * 1e30)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_gen_from_weights_that_overflow_says_so_in_one_line(temperature):
    s = tiny_session()
    run(s, ":train")
    overflowing(s)
    assert weights_finite(s)
    with pytest.raises(UserError, match=r"logits for the next token are not finite \(nan") as e:
        run(s, f":gen n=3 temperature={temperature}")  # was: an internal error (torch.multinomial); greedy: '+++'
    assert "\n" not in str(e.value)


# --- the rate suggested after a divergence -----------------------------------------------------------------------
def test_a_divergence_does_not_suggest_a_rate_whose_run_blew_the_loss_up(checkpoint_dir):
    from minitf_repl.commands.train import blown_up

    s = tiny_session(optimizer="adamw", warmup_steps=0, lr=30, steps=10, grad_clip=0)
    result = run(s, ":train")
    assert blown_up(result)  # its result says the rate is too high for the model
    with pytest.raises(TrainingDiverged) as e:
        run(s, ":train lr=1e39")
    assert not str(e.value).endswith(":train lr=30") and "30 trained here" not in str(e.value)


# --- the smallest models ---------------------------------------------------------------------------------------
def smallest(data="random:2", **model) -> Session:
    model = {"n_layers": 1, "d_model": 1, "n_heads": 1, "d_ff": 1, "max_seq_len": 2, **model}
    return Session(ModelConfig(**model), TrainConfig(steps=4, batch_size=1, eval_every=2, eval_batches=1),
                   data_spec=data, device_name="cpu")


def test_checks_causal_never_counts_more_positions_back_than_the_window_holds():
    from minitf_repl.core.checks import reach

    # d_model=1: LayerNorm of one feature is its bias alone, so no logit depends on any position's stream
    result = run(smallest(), ":checks causal")
    assert math.isnan(result.causal.reach_half) and math.isnan(result.causal.reach_most)  # was 3.0 in a window of 2
    text = plain(result)
    # a model that reads nothing fails causal, saying so (test_sweep_bm_checks), where it passed with "nowhere"
    assert "the output reads nothing" in text and "3.0 positions" not in text
    assert reach(torch.tensor([[1.0, 0.0], [0.0, 0.0]])) != reach(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    assert reach(torch.tensor([[1.0, 0.0], [1.0, 1.0]])) == (1.0, 2.0)  # a row that reads both: within the window


# --- sampling settings at their edges ---------------------------------------------------------------------------
def test_gen_says_a_top_k_the_vocabulary_is_not_larger_than_cuts_nothing():
    s = tiny_session()  # sort:4: 12 characters
    rec = Recorder()
    result = run(s, ":gen 12 n=5 top_k=100 gen_seed=3", rec)
    assert any("top_k=100 keeps every token" in n and "12" in n for n in rec.notices)
    assert result.text == run(s, ":gen 12 n=5 top_k=none gen_seed=3").text  # what the notice claims
    rec = Recorder()
    run(s, ":gen 12 n=5 top_k=11 gen_seed=3", rec)
    assert not any("keeps every token" in n for n in rec.notices)


def test_checks_causal_in_a_window_of_one_says_it_had_nothing_to_check():
    result = run(smallest(d_model=2, n_heads=2, d_ff=2, max_seq_len=1), ":checks causal")
    text = plain(result)
    assert "0 of the 0 pairs" not in text and "the causal mask at work" not in text  # a claim nothing tested
    assert "nothing to check here: a window of 1 character has no later position" in text


def test_ln_and_grad_on_a_d_model_of_one_say_the_norm_outputs_its_bias_and_no_gradient_gets_through():
    s = smallest()
    run(s, ":train")
    text = plain(run(s, ":ln"))  # was: an internal error (ZeroDivisionError: |x̂_t| is 0 at every position)
    assert "x - mean(x) is 0 at every position, so y = b whatever x is" in text
    text = plain(run(s, ":grad"))
    assert "xnan" not in text and "so even the first block learns" not in text  # was: "0.0000 at h_0 (xnan), so ..."
    assert "no gradient reaches the stream" in text


def test_set_d_model_1_under_layernorm_warns_that_the_model_cannot_read_its_input():
    s = tiny_session()
    rec = Recorder()
    run(s, ":set d_model=1 n_heads=1", rec)
    assert any("d_model=1 with norm=layernorm" in n and "\n" not in n for n in rec.notices)
    rec = Recorder()
    run(s, ":set norm=rmsnorm", rec)  # x / rms(x) keeps the sign: it reads something
    assert not any("d_model=1" in n for n in rec.notices)


def test_step_at_a_tiny_temperature_counts_only_the_tokens_that_can_still_be_picked():
    s = tiny_session()
    run(s, ":train")
    result = run(s, ":step 12 temperature=1e-300")
    assert result.n_kept == 12 and result.n_possible == 1  # the filters keep all; e^(-gap / 1e-300) is 0 for 11
    text = plain(result)
    assert "1 of 12 tokens could be picked (12 pass the filters, but the others' probability is 0 at T=1e-300" in text
    assert "12 of 12 tokens could be picked" not in text
    result = run(s, ":step 12 temperature=1")  # an independent softmax: every token has some probability
    z = torch.tensor([r.logit for r in result.rows], dtype=torch.float64)  # the 10 highest of 12: their shares
    probs = torch.tensor([r.prob for r in result.rows], dtype=torch.float64)
    assert result.n_possible == 12 and torch.allclose(probs / probs.sum(), torch.softmax(z, 0), atol=1e-9)


def test_checks_overfit_failing_under_a_high_dropout_names_the_dropout():
    s = tiny_session()
    run(s, ":set dropout=0.99")
    result = run(s, ":checks overfit steps=20")
    assert "overfit" in result.failed
    text = plain(result)
    assert "dropout=0.99" in text and ":set dropout=0" in text  # was: only "try more steps; ... the rate or size"
    s = tiny_session()
    assert "dropout" not in plain(run(s, ":checks overfit steps=5"))


def test_lrfind_chart_ends_are_told_apart_when_the_test_stops_after_a_few_steps():
    from minitf_repl.commands.rates import distinct

    assert distinct(100, 129.2) == ("1.0e+02", "1.3e+02")  # was "1e+02" at both ends
    assert distinct(1e-5, 1.0) == ("1e-05", "1e+00")  # as before where they differ
    s = tiny_session()
    result = run(s, ":lrfind steps=10 low=100 high=1000")
    assert result.test.blown_at is not None and "lr 1e+02 1e+02" not in plain(result)


# --- views of a model trained at a rate far too high (finite, but huge logits) -----------------------------------
def test_mistakes_of_a_blown_up_model_show_its_finite_loss_not_inf():
    # 15 steps: 30 reached an infinite gradient at step 22 on Python 3.10's pydoc with torch 2.9 (a divergence, undone)
    s = tiny_session(data="pydoc", lr=30, grad_clip=0, steps=15, eval_every=15)
    run(s, ":set n_layers=2 d_model=16 n_heads=2 d_ff=32 max_seq_len=16")
    run(s, ":train")  # the val loss ends in the thousands, every value finite
    result = run(s, ":mistakes")
    hardest = result.text.hardest
    assert any(h.p == 0.0 for h in hardest)  # e^(-thousands) underflows
    assert all(math.isfinite(h.nll) and h.nll > 0 for h in hardest)
    assert max(h.nll for h in hardest) >= result.text.mean  # the hardest are above the mean, which was finite
    text = plain(result)
    assert " inf " not in text  # was: -ln p "inf" on every row beside "mean -ln p 2229.856"


def test_gen_show_probs_of_a_blown_up_model_does_not_blame_the_default_sampling_settings():
    s = tiny_session(data="pydoc", lr=30, grad_clip=0, steps=15, eval_every=15)
    run(s, ":set n_layers=2 d_model=16 n_heads=2 d_ff=32 max_seq_len=16")
    run(s, ":train")
    result = run(s, ":gen n=5 show=probs gen_seed=1")  # temperature 0.8, no top_k, no top_p: nothing cut
    # the model's own certainty: exactly 1 on some CPUs, 1 - 9e-16 on an AMD Zen 3 (its kernels round otherwise)
    assert all(p > 1 - 1e-9 for p in result.probs)
    text = plain(result)
    assert "these sampling settings" not in text and "or by a model whose logits are thousands apart" in text


def test_top_k_keeps_exactly_k_tokens_on_tied_logits_so_top_k_1_is_greedy():
    from minitf_repl.core.generate import sample_next, sampling_stages

    z = torch.tensor([1.0, 3.0, 3.0, 0.5])  # two best logits, equal
    assert sampling_stages(z, 1.0, top_k=1).top_k_kept.tolist() == [False, True, False, False]  # was: both kept
    assert sampling_stages(z, 1.0, top_k=2).top_k_kept.tolist() == [False, True, True, False]
    assert int(sampling_stages(torch.tensor([3.0, 3.0, 3.0, 0.5]), 1.0, top_k=2).top_k_kept.sum()) == 2
    greedy = sample_next(z, 0.0)
    assert greedy == int(torch.argmax(z)) == 1
    assert {sample_next(z, 1.0, top_k=1, generator=torch.Generator().manual_seed(k)) for k in range(40)} == {greedy}


@pytest.mark.parametrize("V", [4, 40, 400])
def test_a_tiny_top_p_on_tied_logits_keeps_the_token_argmax_takes(V):
    from minitf_repl.core.generate import sampling_stages

    z = torch.zeros(V)
    z[V // 2 :] = -1.0  # the first half tied at the top
    kept = torch.nonzero(sampling_stages(z, 1.0, None, 1e-9).top_p_kept).flatten().tolist()
    assert kept == [int(torch.argmax(z))] == [0]  # was [138] of 400: whichever the unstable sort put first


def test_ffn_lists_a_token_as_raised_only_when_the_unit_raises_it():
    s = Session(ModelConfig(n_layers=1, d_model=4, n_heads=2, d_ff=4, max_seq_len=4),
                TrainConfig(steps=4, batch_size=2, eval_every=2, eval_batches=1), data_spec="random:4",
                device_name="cpu")
    run(s, ":train")
    result = run(s, ":ffn abc")  # 4 tokens: 3 raised and 3 lowered overlapped
    assert result.units and result.units[0].promote_by is not None
    for u in result.units:
        assert all(v > 0 for v in u.promote_by) and all(v < 0 for v in u.demote_by)
        assert not set(u.promotes) & set(u.demotes)


# --- a learning rate at the low extreme -------------------------------------------------------------------------
def test_a_run_that_learned_nothing_at_a_tiny_rate_blames_the_rate():
    s = tiny_session(lr=1e-9, steps=60, eval_every=60)
    text = plain(run(s, ":train"))
    assert "near ln(V)" in text and "at a peak rate of 1e-09" in text and ":lrfind" in text
    assert ":checks overfit says whether it can learn" not in text  # which trains at 1e-9 too, and fails alike


def test_context_in_a_window_of_one_does_not_say_reading_more_gains_nothing():
    s = smallest(data="random:4", d_model=4, n_heads=2, d_ff=4, max_seq_len=1)
    run(s, ":train")
    text = plain(run(s, ":context windows=64"))
    assert "reading more characters gains this model nothing" not in text  # it cannot read more
    assert "a window of one position" in text


def test_gen_n_0_says_a_seed_was_drawn_only_where_it_decided_something():
    from minitf_repl.commands.generate import gen_stats

    s = tiny_session(data="pydoc")
    run(s, ":set n_layers=1 d_model=16 n_heads=2 d_ff=32 max_seq_len=16")
    result = run(s, ":gen hello n=0")
    assert not result.seed_drawn and "seed" not in gen_stats(result)  # --json said seed_drawn: true
    asked = run(tiny_session(), ":gen n=0")  # a task's question, drawn by the seed: the seed gives it again
    assert asked.seed_drawn and f"drawn seed {asked.seed}" in gen_stats(asked)
    assert run(tiny_session(), f":gen n=0 gen_seed={asked.seed}").prompt == asked.prompt


def test_gen_top_k_1_names_no_drawn_seed_as_greedy_does():
    from minitf_repl.commands.generate import gen_stats

    s = tiny_session()
    run(s, ":train")
    picked = run(s, ":gen 12 n=4 top_k=1")
    assert not picked.seed_drawn and "seed" not in gen_stats(picked)  # was: "drawn seed 671390", deciding nothing
    assert picked.text == run(s, ":gen 12 n=4 temperature=0").text


# --- values in other spellings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["temperature", "weight_decay", "grad_clip"])
def test_minus_zero_is_taken_as_zero(key):
    s = tiny_session()
    rec = Recorder()
    run(s, f":set {key}=-0", rec)
    config = s.gen_config if key == "temperature" else s.train_config
    value = getattr(config, key)
    assert value == 0 and math.copysign(1.0, value) == 1.0  # was -0.0, shown as "-> -0"
