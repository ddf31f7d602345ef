"""What a user's-eye sweep of reproducibility and resumed work found: each test failed before its fix.

A learner changes one thing and compares; everything else must stay put. `:lrfind` trained its fresh model with
dropout drawing from the session's random state, so with dropout on, a `:lrfind` between two runs changed what the
next `:train` did, and two `:lrfind`s in a row read different curves.
"""

import torch

from test_commands import run, tiny_session


def weights(session) -> dict:
    return {k: v.detach().clone() for k, v in session.model.state_dict().items()}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- :lrfind leaves the session's random state alone ---------------------------------------------------------
def test_lrfind_with_dropout_leaves_the_random_state_and_reads_the_same_curve_twice():
    s = tiny_session()
    run(s, ":set dropout=0.2")
    run(s, ":train steps=2")
    before = torch.get_rng_state()
    first = run(s, ":lrfind steps=10")
    assert torch.equal(torch.get_rng_state(), before)  # the next :train's dropout masks are what they were
    second = run(s, ":lrfind steps=10")
    assert first.test.losses == second.test.losses


# --- :train seed= draws the weights of a model the command builds --------------------------------------------
def test_train_seed_on_a_fresh_session_draws_the_initial_weights_as_set_seed_does():
    given = tiny_session()
    run(given, ":train seed=3 steps=2")
    set_first = tiny_session()
    run(set_first, ":set seed=3")
    run(set_first, ":train steps=2")
    assert given.train_config.seed == 3
    assert same_weights(weights(given), weights(set_first))  # the weights were drawn from seed 1337 before


def test_train_seed_with_data_of_another_vocabulary_draws_the_rebuilt_models_weights_from_it(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 40)
    given = tiny_session()
    run(given, ":train steps=2")
    run(given, f":train data={text} seed=5 steps=2")
    assert given.trainer.step == 2  # another vocabulary: a new model
    set_first = tiny_session()
    run(set_first, ":train steps=2")
    run(set_first, ":set seed=5")
    run(set_first, f":data {text}")
    run(set_first, ":train steps=2")
    assert same_weights(weights(given), weights(set_first))
