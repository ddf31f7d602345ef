"""The fifty-fifth session's findings and known gaps, fixed: each test failed before its fix."""

import torch

from minitf_repl.core.errors import TrainingDiverged
from test_commands import run, tiny_session


# --- the shell's :train on weights broken before it began names the weights, not the rate -------------------------
def test_train_on_weights_broken_before_the_run_names_the_weights_and_a_load_not_a_lower_rate():
    session = tiny_session()
    with torch.no_grad():  # finite weights whose forward overflows, as a folder's of 1e8 would be
        for p in session.model.parameters():
            p.mul_(1e8)
    before = {k: v.clone() for k, v in session.model.state_dict().items()}
    try:
        run(session, ":train steps=3 lr=1e-6")
    except TrainingDiverged as e:
        words, fix = str(e), e.fix
    else:
        raise AssertionError("a run on broken weights trained")
    assert "before any update of this run" in words and "broken already" in words, words
    assert "largest weight is 1e+08" in words and ":load NAME" in words, words
    assert "Lower the learning rate" not in words and not fix  # was: "(1e-06 diverged; 1e-07 is a tenth of it)"
    assert all(torch.equal(v, session.model.state_dict()[k]) for k, v in before.items())  # nothing changed
