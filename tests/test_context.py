"""The loss at each position of the window (core.context, `:context`): each position's loss against the model run on
the window cut after it, the counter against the counting model of the order that reads the same tokens, what is
read off the curve, and that the session is left alone."""

import json
import math

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.context import ContextResult, readings, shown_positions
from minitf_repl.core import context
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.context import far_gain, half_way, position_losses, smooth, stays_below
from minitf_repl.core.ngram import NgramModel, split_tokens
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of


@pytest.fixture
def session(sentence_session):
    return sentence_session(batch_size=8, eval_batches=2, lr=1e-2, warmup_steps=5)


def _windows(session, windows, seed=0):
    T = session.model_config.max_seq_len
    return session.data.get_batch("val", windows, T, torch.Generator().manual_seed(seed))


def test_each_position_scores_as_the_model_reading_the_window_up_to_it(session):
    run(session, ":train steps=30")
    model = session.model
    curve = position_losses(model, session.data, "cpu", windows=32, counter=None)
    assert model.training  # left as it was
    x, y = _windows(session, 32)
    model.eval()
    with torch.no_grad():
        for i in (0, 1, 5, 23):  # the model run on tokens 0..i alone: its last position's loss is L_i
            logits, _ = model(x[:, : i + 1])
            alone = F.cross_entropy(logits[:, -1], y[:, i], reduction="none")
            assert curve.losses[i] == pytest.approx(float(alone.mean()), abs=1e-5)
            assert curve.errors[i] == pytest.approx(float(alone.std() / math.sqrt(32)), abs=1e-5)
        _, loss = model(x, y)  # the training loss of the same windows: the mean over every position
    assert curve.mean == pytest.approx(float(loss), abs=1e-5)
    assert sum(curve.losses) / len(curve.losses) == pytest.approx(float(loss), abs=1e-5)
    assert curve.counted == [32] * 24 and curve.windows == 32 and curve.positions == 24


def test_the_counter_reads_what_the_model_reads_up_to_its_order(session):
    curve = position_losses(session.model, session.data, "cpu", windows=20, counter=4)
    x, y = _windows(session, 20)
    train, _ = split_tokens(session.data, "train", 24)
    V = session.data.tokenizer.vocab_size
    for i in (0, 1, 2, 10, 23):
        order = min(i + 2, 4)  # position i reads i + 1 tokens: at most the counter's n - 1
        start = i + 1 - (order - 1)
        text = torch.cat([x[:, start : i + 1], y[:, i : i + 1]], dim=1)  # the order - 1 tokens and the next
        p = NgramModel(train, V, order).by_order(text, order)[-1][:, -1]
        assert curve.counter[i] == pytest.approx(float(-p.log().mean()), rel=1e-9)
    assert curve.counter_order == 4


def test_passes_of_any_size_give_the_same_losses(session, monkeypatch):
    whole = position_losses(session.model, session.data, "cpu", windows=17, counter=None)
    monkeypatch.setattr(context, "LOGITS_PER_PASS", 1)  # one window a pass, as for a model of GPT-2's size
    seen = []
    one = position_losses(session.model, session.data, "cpu", windows=17, counter=None,
                          on_progress=lambda done, total: seen.append((done, total)))
    assert one.losses == pytest.approx(whole.losses, abs=1e-6)
    assert seen == [(k, 17) for k in range(1, 18)]


def test_smoothing_widens_with_the_position():
    values = [float(i) for i in range(40)]
    s = smooth(values)
    assert s[:8] == values[:8]  # i // 8 = 0: each alone
    assert s[16] == pytest.approx(sum(range(14, 19)) / 5) and s[32] == pytest.approx(32.0)
    assert s[39] == pytest.approx(sum(range(35, 40)) / 5)  # cut at the end
    assert math.isnan(smooth([1.0, math.nan, 3.0])[1])  # a position no window counts stays nan
    holed = values[:15] + [math.nan] + values[16:]
    assert smooth(holed)[16] == pytest.approx((14 + 16 + 17 + 18) / 4)  # its neighbours leave it out
    assert smooth([2.5] * 30) == [2.5] * 30


def test_what_is_read_off_the_curve():
    falling = [4.0, 3.0, 2.4, 2.1] + [2.0] * 12  # the last quarter: 2.0, half way from 4.0: 3.0
    assert half_way(falling, falling, [0.1] * 16) == 1
    assert half_way(falling, falling, [1.1] * 16) is None  # a fall of 2.0 within two standard errors: noise
    assert half_way([2.0] * 16, [2.0] * 16, [0.1] * 16) is None
    assert half_way([math.nan] + [2.0] * 15, [2.0] * 16, [math.nan] * 16) is None
    assert stays_below([3, 1, 3, 1, 1], [2, 2, 2, 2, 2]) == 3
    assert stays_below([1, 1, 1], [2, 2, 2]) == 0 and stays_below([1, 1, 3], [2, 2, 2]) is None
    assert stays_below([3, 1, math.nan], [2, 2, 2]) == 1  # a position not counted breaks nothing
    assert stays_below([1.0], None) is None
    nll = torch.tensor([[0, 0, 5.0, 5.0, 0, 0, 4.0, 4.0], [0, 0, 3.0, 3.0, 0, 0, 1.0, 1.0]], dtype=torch.float64)
    gain, error = far_gain(nll)  # the second quarter (columns 2, 3) minus the last (6, 7), per row: 1 and 2
    assert gain == pytest.approx(1.5) and error == pytest.approx(0.5)
    assert far_gain(nll[:1]) == (None, None)
    nll[0, 6] = math.nan  # a position not counted in one window: the quarters are not like for like
    assert far_gain(nll) == (None, None)


def test_a_trained_model_gains_from_its_context_and_beats_a_bigram(session):
    fresh = position_losses(session.model, session.data, "cpu", windows=64, counter=3)
    V = session.data.tokenizer.vocab_size
    assert all(abs(v - math.log(V)) < 0.3 for v in fresh.losses)  # untrained: ln V wherever it reads
    run(session, ":train steps=150")
    curve = position_losses(session.model, session.data, "cpu", windows=64, counter=3)
    assert curve.losses[0] > curve.late + 0.5  # one character tells less than many (the text repeats every 46)
    assert curve.half_at is not None and curve.half_at < 8
    assert curve.below_counter_from is not None  # the period is longer than the trigram's 2 characters
    assert curve.mean < fresh.mean - 1.0


def test_a_task_counts_its_answer_only(tmp_path):
    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16), data_spec="sort:4",
                checkpoint_dir=tmp_path / "ck")
    result = run(s, ":context windows=40")
    curve = result.curve
    question = s.data.question_len - 1
    assert all(math.isnan(v) for v in curve.losses[:question]) and curve.counted[:question] == [0] * question
    assert all(not math.isnan(v) for v in curve.losses[question : s.data.seq_len])
    assert curve.half_at is None  # position 0 is the question's: no fall from it to read
    assert curve.first_counted == question and [row.position for row in result.rows] == [4, 5, 6, 7]  # the answer's
    text = text_of(result, 100)
    assert "position 0 reads" not in text and "nan" not in text and "position 4 (log scale)" in text
    assert "positions 0-3 predict no counted token" in " ".join(text.split()) and "positions 4-7 are the ones scored" \
        in " ".join(text.split())


def test_the_command_leaves_the_session_alone_and_renders(session):
    run(session, ":train steps=20")
    before = {k: v.clone() for k, v in session.model.state_dict().items()}
    rng, step = torch.get_rng_state(), session.trainer.step
    result = run(session, ":context windows=32 counter=3")
    assert isinstance(result, ContextResult)
    assert torch.equal(torch.get_rng_state(), rng) and session.trainer.step == step
    assert all(torch.equal(v, session.model.state_dict()[k]) for k, v in before.items())
    assert [row.position for row in result.rows] == [0, 1, 2, 3, 7, 15, 23]
    assert result.rows[0].counter_order == 2 and result.rows[-1].counter_order == 3
    text = plain(result)
    assert "position 0 reads one character, as the bigram counter does" in text
    assert "trigram counter" in text and "mean over every position" in text
    doc = json.loads(json.dumps(json_document(REGISTRY["context"], result)))
    assert doc["schema"] == "minitf.context/3" and len(doc["curve"]["losses"]) == 24


def test_counter_zero_scores_no_counter_and_the_notes_say_why(session):
    result = run(session, ":context windows=16 counter=0")
    assert result.curve.counter is None and result.rows[0].counter_loss is None
    text = plain(result)
    assert "its loss" not in text and "bigram" not in text and "counting" not in text
    assert "has not trained yet" in text
    run(session, ":set causal=off")
    assert "no causal mask" in plain(run(session, ":context windows=16 counter=0"))


def test_the_shell_reads_differences_against_the_cores_noise():
    from minitf_repl.commands import context as shell

    assert shell.NOISE == context.NOISE


def test_shown_positions():
    assert shown_positions(128) == [0, 1, 2, 3, 7, 15, 31, 63, 127]
    assert shown_positions(24) == [0, 1, 2, 3, 7, 15, 23] and shown_positions(17) == [0, 1, 2, 3, 7, 15, 16]
    assert shown_positions(16) == list(range(16))  # a short window (a task's) shows every position
    assert shown_positions(3) == [0, 1, 2] and shown_positions(1) == [0]
    assert shown_positions(72, 24) == [0, 1, 2, 3, 7, 15, 23, 31, 63, 71] and shown_positions(24, 24)[-1] == 23


def test_the_far_context_is_said_flat_within_its_noise(session):
    run(session, ":train steps=5")
    result = run(session, ":context windows=16 counter=0")
    result.curve.far_gain, result.curve.far_error = 0.01, 0.02
    assert any("no gain beyond the noise" in line for line in readings(result))
    result.curve.far_gain = 0.2
    assert any("still gains from reading more than 12 characters back" in line for line in readings(result))


@pytest.mark.parametrize("settings", ["pos_encoding=rope", "pos_encoding=sinusoidal", "pos_encoding=none",
                                      "n_experts=2", "norm_placement=post", "n_kv_heads=1",
                                      "norm=rmsnorm activation=swiglu qk_norm=on", "residual=off", "dropout=0.2"])
def test_every_variant_scores_each_position_as_its_own_forward(session, settings):
    run(session, f":set {settings}")
    run(session, ":train steps=3")
    curve = run(session, ":context windows=16 counter=3").curve
    x, y = _windows(session, 16)
    model = session.model
    model.eval()
    with torch.no_grad():
        _, loss = model(x, y)
    model.train()
    assert curve.mean == pytest.approx(float(loss), abs=1e-4)  # dropout off while scoring, as evaluation has it


@pytest.mark.parametrize("data", ["random:20", "repeat:20", "reverse:3"])
def test_generated_data(tmp_path, data):
    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32), data_spec=data,
                checkpoint_dir=tmp_path / "ck")
    result = run(s, ":context windows=32")
    counted = [n for n in result.curve.counted if n]
    assert counted and result.curve.positions <= 32
    text = plain(result)
    assert "nan" not in text
    if data.startswith("random"):
        assert "random tokens: no position has anything to read" in text


@pytest.mark.parametrize("positions", ["rope", "sinusoidal", "none"])
def test_a_longer_copy_reads_the_trained_positions_as_the_model_does(session, positions):
    from minitf_repl.core.ablation import parse_ablation

    run(session, f":set pos_encoding={positions}")
    run(session, ":train steps=10")
    run(session, ":ablate head=1.0")  # switched off in the copy too
    model = session.model
    longer = context.longer_copy(model, 72, session.ablations)
    assert longer.config.max_seq_len == 72 and not longer.training and model.training
    x = torch.randint(session.data.tokenizer.vocab_size, (3, 72), generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        short, _ = model(x[:, :24])
        long, _ = longer(x)
        plain, _ = context.longer_copy(model, 72)(x)
    model.train()
    assert torch.allclose(long[:, :24], short, atol=1e-5)  # causal: the first 24 positions read the same tokens
    assert not torch.allclose(plain[:, :24], short, atol=1e-3)  # the copy without the ablation differs
    assert parse_ablation("head=1.0", 2, 2) in session.ablations


def test_length_reads_past_the_trained_window(session):
    run(session, ":set pos_encoding=rope")
    run(session, ":train steps=30")
    result = run(session, ":context length=72 windows=32 counter=3")
    curve = result.curve
    assert curve.positions == 72 and curve.trained == 24 and len(curve.losses) == 72
    assert [row.position for row in result.rows] == [0, 1, 2, 3, 7, 15, 23, 31, 63, 71]  # 23: the window's last
    assert curve.past_gain is not None and curve.past_error > 0
    assert curve.mean == pytest.approx(sum(curve.losses[:24]) / 24, abs=1e-9)  # the trained window's val loss
    text = plain(result)
    assert "positions 24-71 lie past it" in text and "past its window: positions 24-71 score" in text
    assert "mean over positions 0-23" in text and ":context windows=128 counter=3 length=72 halves it" in text
    assert session.model.config.max_seq_len == 24  # the session's model is left as it was


def test_length_is_refused_where_it_cannot_be_read(session, tmp_path):
    from minitf_repl.core.errors import UserError

    learned = "a learned position table has rows for the 24 positions it trained on only"
    with pytest.raises(UserError, match=learned) as e:
        run(session, ":context length=48")
    assert e.value.fix == {"pos_encoding": "rope"}
    run(session, ":set pos_encoding=rope")
    with pytest.raises(UserError, match="length is for windows past max_seq_len=24, got 12"):
        run(session, ":context length=12")
    with pytest.raises(UserError, match=r"length=200 is more than 8x max_seq_len=24; use at most 192"):
        run(session, ":context length=200")
    task = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16, pos_encoding="rope"),
                   data_spec="sort:4", checkpoint_dir=tmp_path / "ck2")
    with pytest.raises(UserError, match="length= reads longer windows of a text; sort makes windows of its own length"):
        run(task, ":context length=32")


def test_past_gain():
    nll = torch.tensor([[9.0, 9, 9, 1, 2, 2], [9.0, 9, 9, 3, 3, 5]], dtype=torch.float64)
    gain, error = context.past_gain(nll, 4)  # the last quarter of 4 is position 3; past it, positions 4, 5
    assert gain == pytest.approx(((2 - 1) + (4 - 3)) / 2) and error == pytest.approx(0.0)
    assert context.past_gain(nll[:1], 4) == (None, None)


def test_spans():
    from minitf_repl.commands.context import spans

    assert spans([0, 1, 2, 3, 9]) == "0-3, 9" and spans([4]) == "4" and spans([]) == "" and spans([1, 3, 4]) == "1, 3-4"
