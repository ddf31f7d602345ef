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
