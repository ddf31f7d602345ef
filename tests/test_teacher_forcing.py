"""Teacher forcing (`:score`, core.inside.teacher_forcing): one forward pass scores every next token of a text.

Shown against references: the forward's own cross-entropy, the naive loop that reads each prefix on
its own (what decoding does, one token at a time), and a task's masked batches.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import teacher_forcing
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import Recorder, run
from test_render import text_of

SMALL = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=16)


def model_for(vocab: int, **changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(vocab_size=vocab, **{**SMALL, **changes})).eval()


def test_one_pass_equals_the_forwards_loss_and_the_prefix_by_prefix_loop():
    model = model_for(20)
    ids = torch.randint(20, (17,), generator=torch.Generator().manual_seed(1))  # max_seq_len + 1 tokens
    scored = teacher_forcing(model, ids)
    with torch.no_grad():
        _, loss = model(ids[None, :-1], ids[None, 1:])  # the training forward's own cross-entropy
        naive = [F.softmax(model(ids[None, : t + 1])[0][0, -1], dim=-1)[ids[t + 1]].item() for t in range(16)]
    assert scored.loss == pytest.approx(loss.item(), abs=1e-5)
    assert scored.target_probs == pytest.approx(naive, abs=1e-5)  # position t sees tokens 0..t only
    assert scored.losses == pytest.approx([-math.log(p) for p in naive], abs=1e-4)
    assert scored.counted == [True] * 16 and scored.token_ids == ids.tolist()
    with torch.no_grad():
        best = [model(ids[None, : t + 1])[0][0, -1].argmax().item() for t in range(16)]
    assert scored.guess_ids == best and all(g >= p - 1e-6 for g, p in zip(scored.guess_probs, scored.target_probs))


def test_a_later_token_changes_no_earlier_score():
    model = model_for(20)
    ids = torch.arange(12) % 20
    other = ids.clone()
    other[-1] = (other[-1] + 5) % 20
    a, b = teacher_forcing(model, ids), teacher_forcing(model, other)
    assert a.target_probs[:-1] == b.target_probs[:-1] and a.target_probs[-1] != b.target_probs[-1]


def test_a_task_counts_its_answer_only_as_its_batches_do():
    data = load_data("sort:4")
    model = model_for(data.tokenizer.vocab_size)
    question = data.sample_questions("val", 1, torch.Generator().manual_seed(0))[0]
    ids = data.tokenizer.encode(question + data.answer(question))
    counted = data.counted(ids)
    assert counted == [t >= data.question_len - 1 for t in range(len(ids) - 1)] and not all(counted)
    x, y = data.encode_examples([question])  # the training batch: targets -1 over the question
    with torch.no_grad():
        _, loss = model(x, y)
    assert teacher_forcing(model, ids, counted).loss == pytest.approx(loss.item(), abs=1e-5)
    assert data.counted(ids[1:]) is None  # not a question=answer sequence: every prediction counts
    assert data.counted(ids[:-1]) == counted[:-1]  # an answer cut short: the part of it there is counted


def test_what_teacher_forcing_cannot_read_is_one_clear_error():
    model = model_for(20)
    with pytest.raises(UserError, match="at least two tokens"):
        teacher_forcing(model, [3])
    with pytest.raises(UserError, match="at most max_seq_len . 1 = 17 tokens"):
        teacher_forcing(model, list(range(18)))
    with pytest.raises(UserError, match="counted must flag the 3 predictions"):
        teacher_forcing(model, [1, 2, 3, 4], counted=[True])


def score(session, line, reporter=None):
    return run(session, line, reporter)


def test_score_on_a_text_and_on_the_datas_own_sample(tmp_path):
    session = Session(ModelConfig(**SMALL), TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    result = score(session, ":score hello there")
    assert result.text == "hello there" and result.tokens == list("hello there") and len(result.losses) == 10
    vocab = session.data.tokenizer.vocab_size  # pydoc's characters: 103 in Python 3.11, 104 in 3.10 and 3.12
    assert result.loss == pytest.approx(sum(result.losses) / 10) and result.uniform == pytest.approx(math.log(vocab))
    doc = json_document(REGISTRY["score"], result)
    assert doc["schema"] == "minitf.score/8" and doc["counted"] == [True] * 10
    out = text_of(result)
    assert "teacher forcing on 'hello there'" in out and "the mean of the 10 -ln p" in out
    default = score(session, ":tf")  # the alias; no text: the views' sample and the character after it
    assert len(default.tokens) == 17 and default.dropped == 0
    notices = Recorder()
    long = score(session, ":score " + "abcdefghij" * 3, notices)
    assert long.dropped == 13 and len(long.tokens) == 17 and "scoring its last 17 characters" in notices.notices[0]
    with pytest.raises(UserError, match="at least two characters"):
        score(session, ":score a")
    assert result.untrained and "has not trained yet" in out
    score(session, ":train steps=1")
    trained = score(session, ":score hello there")
    assert not trained.untrained and "has not trained yet" not in text_of(trained)


def test_score_on_a_task_dims_the_given_question():
    session = Session(ModelConfig(**SMALL), TrainConfig(steps=2, batch_size=2), data_spec="sort:4", device_name="cpu")
    result = score(session, ":score")
    question = result.text.split("=")[0] + "="
    assert result.counted == [t >= len(question) - 1 for t in range(len(result.tokens) - 1)]
    out = " ".join(text_of(result).split())
    assert "given" in out and f"the other {len(question) - 1} are given, not predicted" in out
