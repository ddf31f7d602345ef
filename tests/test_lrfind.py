"""The learning-rate range test (core.lrfind, `:lrfind`): its schedule, its moving average, what it reads off the
curve, what it says of the session's rate, and that the session is left alone."""

import json
import math

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.rates import LrfindResult, position, where
from minitf_repl.core.lrfind import BLOWN, LrRange, range_test, smooth
from minitf_repl.dispatch import json_document
from minitf_repl.reporter import Reporter
from test_commands import run
from test_render import plain, text_of


@pytest.fixture
def session(sentence_session):
    return sentence_session(batch_size=4, eval_batches=2)


def test_smooth_is_the_debiased_moving_average():
    losses = [4.0, 2.0, 3.0]
    a1 = 0.1 * 4.0
    a2 = 0.9 * a1 + 0.1 * 2.0
    a3 = 0.9 * a2 + 0.1 * 3.0
    assert smooth(losses) == pytest.approx([a1 / 0.1, a2 / (1 - 0.81), a3 / (1 - 0.729)])
    assert smooth([2.5] * 7) == pytest.approx([2.5] * 7)  # debiased: a constant stays itself from the first step


def test_the_rates_rise_geometrically_and_the_curve_is_read(session):
    trainer = session.trainer
    test = range_test(session.model_config, trainer.config, trainer.data, trainer.device, steps=60, low=1e-4,
                      high=3.0)
    ratios = [b / a for a, b in zip(test.rates, test.rates[1:])]
    assert test.rates[0] == pytest.approx(1e-4) and ratios == pytest.approx([(3.0 / 1e-4) ** (1 / 59)] * len(ratios))
    assert len(test.losses) == len(test.rates) == len(test.smoothed) <= 60
    assert test.losses[0] == pytest.approx(math.log(session.data.tokenizer.vocab_size), abs=0.2)
    assert test.lowest_loss == min(test.smoothed) and test.lowest_loss < test.smoothed[0] - 0.5
    assert test.steepest is not None and test.steepest < test.lowest
    k = test.rates.index(test.steepest)
    assert test.smoothed[k + 1] < test.smoothed[k - 1]  # it does fall there
    if test.blown_at is not None:  # a blow-up ends the test at the rate where the loss passed BLOWN x its lowest
        assert len(test.rates) < 60 and test.blown_at == test.rates[-1]
        assert max(test.losses) > BLOWN * min(test.losses[:-1]) or not math.isfinite(test.losses[-1])


def test_a_rate_far_too_high_blows_up_and_stops_the_test(session):
    trainer = session.trainer
    test = range_test(session.model_config, trainer.config.replace(optimizer="adamw", grad_clip=0.0),
                      trainer.data, trainer.device, steps=40, low=1e-2, high=1e4)
    assert test.blown_at is not None and len(test.rates) < 40


def test_the_session_is_left_as_it_was(session):
    run(session, ":train steps=5")
    trainer = session.trainer
    weights = {k: v.clone() for k, v in session.model.state_dict().items()}
    batches = trainer.generator.get_state().clone()
    torch.rand(7)  # a state no seed gives: reseeding it would show
    rng = torch.get_rng_state().clone()
    history = [dict(row) for row in trainer.history]
    result = run(session, ":lrfind steps=30")
    assert isinstance(result, LrfindResult) and len(result.test.rates) > 10
    assert trainer.step == 5 and trainer.history == history
    assert all(torch.equal(v, session.model.state_dict()[k]) for k, v in weights.items())
    assert torch.equal(trainer.generator.get_state(), batches) and torch.equal(torch.get_rng_state(), rng)


def fake(lr: float, steepest=1e-3, lowest=3e-2, blown=0.5) -> LrfindResult:
    rates = [1e-5 * 10 ** (k / 10) for k in range(51)]
    smoothed = [4.0 - 0.02 * k for k in range(51)]
    return LrfindResult(LrRange("muon", rates, smoothed, smoothed, steepest, lowest, 3.0, blown, 1e-5, 1.0, 51),
                        "text", lr, 1337)


@pytest.mark.parametrize("lr, says", [
    (1e-2, "sits between where the loss falls fastest and where it is lowest"),
    (1e-4, "is well below where the loss falls fastest (0.001): a run at it learns slowly; :compare lr=0.0001 "
           "lr=0.001"),
    (0.1, "is past the lowest point (0.03)"),
    (0.7, "is at or past where the test blew up (0.5): a run at it will likely diverge; try :set lr=0.01"),
])
def test_what_it_says_of_the_session_rate(lr, says):
    assert says in where(fake(lr))


def test_position_places_a_rate_among_the_test_rates():
    rates = [1e-4 * 10 ** (k / 4) for k in range(9)]  # 1e-4 .. 1e-2
    assert position(rates, 1e-3) == pytest.approx(4.0)
    assert position(rates, 1e-5) is None and position(rates, 1.0) is None


def test_the_command_renders_the_curve_and_the_marks(session):
    result = run(session, ":lrfind steps=40 low=1e-4 high=2")
    text = plain(result, 100)
    assert "learning-rate range test on text.txt: a fresh model, muon, no warm-up" in text
    assert "▼ steepest" in text and "■ lowest" in text and "◆ your lr 0.01" in text
    assert "read the points to a factor of about 3" in text and ":lrfind low=0.0001 high=2 steps=40 seed=1338" in text
    drawn = text_of(result, 100)
    assert "lr 1e-04" in drawn  # the x axis is labelled with rates
    with pytest.raises(Exception, match="low must be below high"):
        run(session, ":lrfind low=1 high=0.5")


class _StopAfter(Reporter):
    def on_progress(self, what, done, total):
        if done >= 12:
            self.request_stop()


def test_a_stop_ends_the_test_and_reads_the_curve_so_far(session):
    result = run(session, ":lrfind steps=80", _StopAfter())
    assert 12 <= len(result.test.rates) <= 14 and result.test.blown_at is None


def test_the_json_document(session):
    result = run(session, ":lrfind steps=20")
    doc = json.loads(json.dumps(json_document(REGISTRY["lrfind"], result)))
    assert doc["schema"] == "minitf.lrfind/1" and doc["test"]["optimizer"] == "muon" and doc["lr"] == 0.01
    assert len(doc["test"]["rates"]) == len(doc["test"]["smoothed"])
