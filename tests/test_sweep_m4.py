"""What this session's own look at the items its sweeps left found: each test failed before its fix.

`:checks causal` on a model that reads later positions said "(largest 0.412)" beside a map of dots above the
diagonal: the number was |dz_t/dh_s| with no scale, the map each row's share of its largest. The line now also
gives the largest share, on the map's scale.
An overfit check that passed on its recitals with a loss just over its target said "its loss is above the 0.05 that
passes alone" beside "-> 0.05": both numbers are now written with the digits that tell them apart.
`:compare` where every contender diverged always offered `lr=0.01 lr=0.003`, however low the rates that diverged;
it now offers rates below every one tried (the data's recipe rate, or a third and a tenth of the lowest).
`:patch`'s reading named one head as bringing back the most where two or more read the same in its table (0.87).
"""

import dataclasses

import pytest

from minitf_repl.core import checks

from test_checks import model_and_batch, session, small  # noqa: F401 (session: a fixture)
from test_commands import run, tiny_session
from test_render import plain


def test_a_failed_causal_check_gives_the_later_reads_on_the_maps_scale(session):  # noqa: F811
    model, x, _ = model_and_batch(small(causal=False), session.data)
    causal = checks.causal_check(model, x[0])
    shown = max(causal.map[t][s] for t in range(len(causal.map)) for s in range(t + 1, len(causal.map)))
    assert 0 < shown <= causal.later_share <= 1.0  # the map's own later cells are within the share
    run(session, ":ablate mask")
    text = " ".join(plain(run(session, ":checks causal"), 200).split())
    assert "of its row's largest, the map's scale" in text


def test_an_overfit_loss_just_over_its_target_reads_above_it():
    from minitf_repl.render import fmt

    assert fmt.apart(0.05004, 0.05) == ("0.05004", "0.05") and fmt.apart(1.2345, 2.5) == ("1.23", "2.5")
    result = run(tiny_session("sort:4"), ":checks overfit steps=30")
    check = result.overfit
    assert check.passed
    result.overfit = dataclasses.replace(check, final_loss=check.target * 1.0008)  # reads as the target at 3 digits
    text = " ".join(plain(result, 200).split())
    shown, target = fmt.apart(check.target * 1.0008, check.target)
    assert f"its loss, {shown}, is above the {target} that passes alone" in text and shown != target
    assert f"→ {shown} in" in text


def test_patch_reading_names_every_head_that_reads_as_the_most():
    from minitf_repl.commands.why import patch_reading

    stream, resid = ["embed", "blocks.0"], [[0.0, 0.0], [0.0, 1.0]]
    two = patch_reading([[0.871, 0.868], [0.1, 0.2]], stream, resid, 1.0)
    assert two.startswith("most of it comes back when heads 0.0 and 0.1 are each patched (0.87)"), two
    assert patch_reading([[0.3, 0.1], [0.3, 0.3]], stream, resid, 1.0).startswith(
        "heads 0.0, 1.0 and 1.1 bring back the most (0.30 each)")
    assert patch_reading([[0.9, 0.1]], stream, resid, 1.0).startswith("most of it comes back when head 0.0 is patched")
    assert "the most: heads 0.0 and 0.1, 0.10 each" in patch_reading([[0.1, 0.1]], stream, resid, 1.0)


def test_every_contender_diverged_suggests_rates_below_those_tried():
    from minitf_repl.commands.lab import lower_rates
    from minitf_repl.core.compare import Outcome

    def diverged(lr):
        return Outcome(f"lr={lr:g}", 0, diverged="step 2: loss inf", lr=lr)

    assert lower_rates([diverged(0.003), diverged(0.001)], 0.01) == pytest.approx([0.001 / 3, 0.0001])
    assert lower_rates([diverged(1e5), diverged(1e6)], 0.01) == pytest.approx([0.01, 0.01 / 3])
    assert lower_rates([diverged(1e5), Outcome("lr=0.01", 0, lr=0.01)], 0.01) == []
    session = tiny_session()
    result = run(session, ":compare lr=1e5 lr=1e6 steps=4")
    assert result.lower_rates and max(result.lower_rates) < 1e5
    text = " ".join(plain(result, 200).split())
    assert f"e.g. :compare lr={result.lower_rates[0]:.2g} lr={result.lower_rates[1]:.2g}" in text
