"""Where the model is wrong (core.mistakes, `:mistakes`): a task's wrong answers against :train's accuracy and
against the model decoding each question itself, the teacher-forced and the written error by answer position; a
text's hardest tokens against the model's own probabilities; the session left alone."""

import math

import pytest
import torch

from minitf_repl.core.config import GenConfig, ModelConfig
from minitf_repl.core.generate import generate
from minitf_repl.core.mistakes import task_mistakes, text_mistakes
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of

TINY = dict(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=16)


@pytest.fixture(scope="module")
def sorter(tmp_path_factory):
    """A small model that sorts 4 digits about 90% right: some wrong answers to look at."""
    s = Session(ModelConfig(**TINY), data_spec="sort:4", checkpoint_dir=tmp_path_factory.mktemp("ck"))
    s.trainer.set_config(s.trainer.config.replace(batch_size=32, eval_every=60, eval_batches=2))
    run(s, ":train steps=60")
    return s


def test_a_tasks_wrong_answers_are_the_accuracys_and_the_models_own(sorter):
    model, task = sorter.model, sorter.data
    found = task_mistakes(model, task, "cpu", n=300, seed=2, show=1000)
    assert found.questions == 300 and 0 < found.wrong < 300
    assert found.wrong == round((1 - task.accuracy(model, n=300, seed=2)) * 300)  # the same questions, counted alike
    assert sum(found.first_wrong) == found.wrong and len(found.answers) == found.distinct <= found.wrong
    assert len({a.question for a in found.answers}) == len(found.answers)  # a question drawn twice is listed once
    for a in found.answers[:5]:  # what it wrote is what :gen writes at temperature 0, through the KV cache
        ids = task.tokenizer.encode(a.question)
        written = list(generate(model, ids, GenConfig(n=task.answer_len, temperature=0.0)))
        assert task.tokenizer.decode(written) == a.written != a.expected == task.answer(a.question)
        assert a.written[: a.first_wrong] == a.expected[: a.first_wrong] and a.written[a.first_wrong] != a.expected[
            a.first_wrong]
    assert found.forced[0] == found.written[0]  # the first character reads the question alone either way
    assert all(0 <= v <= 1 for v in found.forced + found.written)
    assert found.first_wrong[0] == round(found.written[0] * 300)  # a wrong first character is a first mistake


def test_a_model_without_the_mask_is_read_by_its_own_answers_only(sorter):
    run(sorter, ":ablate mask")
    try:
        assert not sorter.model.causal
        result = run(sorter, ":mistakes n=50")
    finally:
        run(sorter, ":ablate off")
    assert result.task.forced is None and len(result.task.written) == sorter.data.answer_len
    text = plain(result)
    assert "no causal mask" in text and "wrong, the true answer before it" not in text and "switched off now" in text


def test_the_command_leaves_the_session_alone_and_renders(sorter):
    before = {k: v.clone() for k, v in sorter.model.state_dict().items()}
    rng, step = torch.get_rng_state(), sorter.trainer.step
    result = run(sorter, ":mistakes n=200 show=3")
    assert torch.equal(torch.get_rng_state(), rng) and sorter.trainer.step == step and sorter.model.training
    assert all(torch.equal(v, sorter.model.state_dict()[k]) for k, v in before.items())
    assert result.task is not None and result.text is None and len(result.task.answers) <= 3
    text = plain(result)
    assert f"{result.task.wrong} wrong answers to 200 held-out questions of sort" in text
    assert "wrong, the true answer before it" in text and "wrong in its own answer" in text
    assert f":mistakes n=200 show={result.task.distinct} lists them all" in text  # the same 200 questions
    assert all(len(line) <= 80 for line in text_of(result, 80).splitlines())
    assert run(sorter, ":errors n=20").task.questions == 20  # the alias


def test_no_wrong_answer_says_so():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import TaskMistakes

    result = MistakesResult("sort", 0, TaskMistakes(500, 0, 0, 500, [], [0.0] * 4, [0.0] * 4, [0] * 4), None, 600)
    assert "no question answered wrongly; :mistakes n=5000 asks more" in plain(result)


def test_a_texts_hardest_tokens_are_the_models_least_likely(sentence_session):
    s = sentence_session(batch_size=8, eval_batches=2)
    run(s, ":train steps=30")
    found = text_mistakes(s.model, s.data, "cpu", windows=20, seed=1, show=5)
    assert found.windows == 20 and found.predictions == 20 * 24 and len(found.hardest) == 5
    ps = [h.p for h in found.hardest]
    assert ps == sorted(ps) and all(h.guess_p >= h.p for h in found.hardest)
    x, y = s.data.get_batch("val", 20, 24, torch.Generator().manual_seed(1))
    with torch.no_grad():
        logp = torch.log_softmax(s.model(x)[0], dim=-1)
    nll = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    assert math.exp(-nll.max().item()) == pytest.approx(found.hardest[0].p, rel=1e-4)
    assert found.mean == pytest.approx(nll.mean().item(), rel=1e-4)
    assert 0.1 <= found.top_share <= 1 and 0 <= found.wrong_guess <= 1
    text = plain(run(s, ":mistakes n=20 show=4"))
    assert "the 4 hardest next tokens of 20 val windows" in text
    assert "the hardest tenth of the predictions carry" in text


@pytest.mark.parametrize("spec", ["repeat:8", "random:8"])
def test_generated_data_counts_only_what_it_scores(spec, tmp_path):
    s = Session(ModelConfig(**TINY), data_spec=spec, checkpoint_dir=tmp_path)
    result = run(s, ":mistakes n=8")
    counted = int((s.data.get_batch("val", 8, 16, torch.Generator().manual_seed(0))[1] >= 0).sum())
    assert result.text.predictions == counted and "has not trained yet" in plain(result)


def test_questions_go_through_in_passes_of_the_same_answers(sorter, monkeypatch):
    from minitf_repl.core import mistakes

    whole = task_mistakes(sorter.model, sorter.data, "cpu", n=100, seed=3)
    monkeypatch.setattr(mistakes, "QUESTIONS_PER_PASS", 7)
    assert task_mistakes(sorter.model, sorter.data, "cpu", n=100, seed=3) == whole
