"""Generation: the KV cache against the naive loop, sampling rules and their errors."""

import pytest
import torch

from minitf_repl.core.config import GenConfig, ModelConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.generate import generate, sample_next
from minitf_repl.core.model import MiniTransformerLM


def make_model(**overrides):
    torch.manual_seed(0)
    cfg = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48)
    cfg.update(overrides)
    model = MiniTransformerLM(ModelConfig(**cfg))
    # Sharpen the untrained model a little so sampling is not uniform noise.
    with torch.no_grad():
        model.token_embedding.weight.mul_(10)
    return model


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal"])
@pytest.mark.parametrize(
    "sampling", [dict(temperature=0), dict(temperature=1.0), dict(temperature=0.7, top_k=3), dict(temperature=1.2, top_p=0.8)]
)
def test_cache_gives_the_naive_loops_tokens_past_the_window(attention, pos_encoding, sampling):
    model = make_model(attention=attention, pos_encoding=pos_encoding)
    prompt = [1, 4, 1, 5, 9 % 11]
    n = 40  # 5 + 40 tokens: well past max_seq_len = 16, so the window slides
    cached = list(generate(model, prompt, GenConfig(n=n, gen_seed=3, cache=True, **sampling)))
    naive = list(generate(model, prompt, GenConfig(n=n, gen_seed=3, cache=False, **sampling)))
    assert len(cached) == n and cached == naive


def test_prompt_longer_than_the_context_keeps_the_last_window():
    model = make_model()
    long_prompt = [i % 11 for i in range(40)]
    a = list(generate(model, long_prompt, GenConfig(n=5, temperature=0, cache=True)))
    b = list(generate(model, long_prompt[-16:], GenConfig(n=5, temperature=0, cache=True)))
    assert a == b


def test_same_seed_same_text_other_seed_other_text():
    model = make_model()
    runs = [list(generate(model, [3], GenConfig(n=30, temperature=1.0, gen_seed=s))) for s in (7, 7, 8)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_generation_restores_training_mode_and_streams():
    model = make_model()
    model.train()
    stream = generate(model, [1, 2], GenConfig(n=3, temperature=0))
    first = next(stream)
    assert isinstance(first, int) and 0 <= first < 11
    list(stream)
    assert model.training


def test_top_k_one_and_tiny_top_p_are_greedy():
    logits = torch.tensor([0.1, 2.0, 1.9, -1.0])
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        assert sample_next(logits, 1.0, top_k=1, generator=g) == 1
        assert sample_next(logits, 1.0, top_p=0.01, generator=g) == 1
    assert sample_next(logits, 0.0) == 1


def test_top_k_keeps_only_k_tokens_and_is_clamped_to_the_vocabulary():
    logits = torch.tensor([0.0, 3.0, 2.9, -5.0, 2.8])
    g = torch.Generator().manual_seed(0)
    seen = {sample_next(logits, 5.0, top_k=2, generator=g) for _ in range(200)}
    assert seen == {1, 2}
    sample_next(logits, 1.0, top_k=1000, generator=g)  # clamped, no error


def test_top_p_keeps_the_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    g = torch.Generator().manual_seed(0)
    seen = {sample_next(probs.log(), 1.0, top_p=0.75, generator=g) for _ in range(300)}
    assert seen == {0, 1}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(temperature=float("inf")), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(top_p=float("nan")), "top_p"),
        (dict(n=-1), "n "),
    ],
)
def test_bad_sampling_values_are_clear_errors(kwargs, message):
    # generate samples under a GenConfig: its values are checked where it is made, once.
    args = dict(n=5)
    args.update(kwargs)
    with pytest.raises(UserError, match=message):
        GenConfig(**args)
    with pytest.raises(TypeError, match="GenConfig"):
        next(generate(make_model(), [1], 5))  # a generator: it checks when it starts


def test_empty_prompt_and_zero_tokens():
    model = make_model()
    with pytest.raises(UserError, match="empty"):
        list(generate(model, [], GenConfig(n=3, temperature=1.0)))
    assert list(generate(model, [1], GenConfig(n=0, temperature=1.0))) == []


def test_tiny_temperature_and_top_p_are_greedy_not_nan():
    logits = torch.tensor([0.1, 2.0, 1.9, -1.0])
    assert sample_next(logits, 1e-300) == 1
    assert sample_next(logits, 1.0, top_p=1e-300) == 1


# --- where a text ends -------------------------------------------------------------------------------
@pytest.mark.parametrize("cache", [True, False])
def test_generation_stops_where_done_says_the_text_ends(cache):
    model = make_model()
    prompt = [1, 4, 1]
    seen = []

    def done(ids):
        seen.append(list(ids))
        return len(ids) >= 7

    out = list(generate(model, prompt, GenConfig(n=50, temperature=1.0, gen_seed=3, cache=cache), done=done))
    assert len(out) == 4 and seen[-1] == prompt + out  # asked with the prompt and all the tokens so far
    assert out == list(generate(model, prompt, GenConfig(n=4, temperature=1.0, gen_seed=3, cache=cache)))  # the same tokens
    assert list(generate(model, prompt, GenConfig(n=50, temperature=1.0), done=lambda ids: True)) == []  # already complete: nothing


@pytest.mark.parametrize("spec, answer_len", [("sort", 6), ("reverse:4", 4), ("add:3", 4), ("sort:1", 1)])
def test_a_task_declares_where_its_answers_end(spec, answer_len):
    from minitf_repl.core.data import load_data

    task = load_data(spec)
    encode = task.tokenizer.encode
    question, answer = task.example.split("=")
    assert len(answer) == answer_len == task.answer_len
    assert not task.answer_complete(encode(question))  # no '=' yet: the question goes on
    assert not task.answer_complete(encode(question + "=" + answer[:-1]))
    assert task.answer_complete(encode(question + "=" + answer))
    assert task.answer_complete(encode(question + "=" + answer[:-1] + "=" + "1"))  # the first '=' counts


def test_gen_on_a_task_stops_at_the_end_of_the_answer():
    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session

    s = Session(data_spec="sort")
    run_command(s, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "max_seq_len": 16})
    r = run_command(s, "gen", {"prompt": "314159=", "n": 50, "temperature": 1.0, "gen_seed": 1})
    assert r.n_tokens == 6 and len(r.text) == 6 and r.answered  # an untrained model, but the answer slot ends
    r = run_command(s, "gen", {"prompt": "314159=11", "n": 50})
    assert r.n_tokens == 4 and r.answered
    r = run_command(s, "gen", {"prompt": "314159=113459", "n": 50})
    assert r.n_tokens == 0 and r.text == "" and r.answered
    r = run_command(s, "gen", {"prompt": "314159=", "n": 3})
    assert r.n_tokens == 3 and not r.answered  # n is still the limit
    c = Session(data_spec="pydoc")
    run_command(c, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "max_seq_len": 16})
    assert run_command(c, "gen", {"prompt": "The", "n": 30}).n_tokens == 30  # a corpus has no end: n tokens


def test_the_task_example_has_the_size_it_names():
    from minitf_repl.core.data import load_data

    for spec in ("sort", "sort:4", "reverse:9", "add", "add:2", "sort:30"):
        task = load_data(spec)
        example = task.description.split(": ", 1)[1]
        question, answer = example.split("=")
        assert question + "=" == task.question([int(d) for d in question.replace("+", "")])
        assert len(question.replace("+", "")) == task.n_digits and answer == task.answer(question + "=")
        assert f"{task.size}" in task.description.split(":")[0]


@pytest.mark.parametrize("spec, question, size", [("sort", "314159=", 6), ("reverse:4", "3141=", 4),
                                                  ("add:3", "314+159=", 3), ("sort:1", "3=", 1)])
def test_a_task_knows_its_questions_and_grades_an_answer(spec, question, size):
    from minitf_repl.core.data import load_data

    task = load_data(spec)
    answer = task.answer(question)
    assert task.question_of(question + "99") == question and task.size_of(question) == size
    assert task.grade(question) is None and task.grade(question + answer[:-1]) is None  # no whole answer yet
    right = task.grade(question + answer + "777")  # what follows a whole answer means nothing
    assert right.right and right.written == right.expected == answer and right.digits_right == len(answer)
    assert right.held_out == task.is_val(question)
    wrong = "0" if answer[0] != "0" else "1"
    graded = task.grade(question + wrong + answer[1:])
    assert not graded.right and graded.digits_right == len(answer) - 1 and graded.expected == answer
    for not_one in ("=", question[1:], "x" + question[1:], question[:-1], "+" + question, "3\u0661" + question[2:]):
        assert task.question_of(not_one) is None and task.grade(not_one + answer) is None, not_one


def test_size_of_reads_the_size_a_question_would_have():
    from minitf_repl.core.data import load_data

    sort, add = load_data("sort"), load_data("add")
    assert sort.size_of("3142=") == 4 and sort.size_of("3142") is None and sort.size_of("31a2=") is None
    assert sort.size_of("3" * 31 + "=") is None and sort.size_of("31+42=") is None
    assert add.size_of("31+42=") == 2 and add.size_of("31+4=") is None and add.size_of("3142=") is None


def test_gen_on_a_task_says_right_or_wrong_and_what_a_question_looks_like(tmp_path):
    from rich.console import Console

    from minitf_repl.commands.generate import render_gen
    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session

    s = Session(data_spec="sort", checkpoint_dir=tmp_path)
    run_command(s, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "max_seq_len": 16})

    def shown(result) -> str:
        console = Console(record=True, width=200, color_system=None)
        render_gen(result, console)
        return console.export_text()

    r = run_command(s, "gen", {"prompt": "314159=113459", "n": 5})  # the prompt holds the right answer
    assert r.answer.right and r.off_task is None
    # an untrained model (47th session: it "may have seen" the question beside "has not trained yet")
    assert "right: 314159=113459 (a training question, though the model has trained on none yet)" in shown(r)
    r = run_command(s, "gen", {"prompt": "314159=", "n": 50, "temperature": 1.0, "gen_seed": 1})  # untrained: random
    assert r.answer.written == r.text and r.answer.expected == "113459"
    if not r.answer.right:
        right = r.answer.digits_right
        assert f"wrong: 314159={r.text}, the answer is 113459 ({right} of 6 characters right" in shown(r)
    held_out = next(q for q in (f"{n:06d}=" for n in range(1000)) if s.data.is_val(q))
    r = run_command(s, "gen", {"prompt": held_out + s.data.answer(held_out)})
    # sort: another question of the same digits is a training one, with the same answer (Task.trained_twin)
    twin = s.data.trained_twin(held_out)
    assert f"a held-out question: never drawn for training; {twin}, the same digits in another order, is a training" \
        in shown(r)
    r = run_command(s, "gen", {"prompt": held_out + "999999"})  # wrong: no generalisation to speak of
    assert f"(0 of 6 characters right; a held-out question: never drawn for training; {twin}, the same digits" \
        in shown(r)
    r = run_command(s, "gen", {"prompt": "3142=", "n": 4})  # a sort:4 question asked of a sort:6 model
    assert r.answer is None and "'3142=' is no question of sort:6, whose questions are 6 digits, then '=' (314159=)" \
        in " ".join(shown(r).split())
    assert ":data sort:4 trains on questions like it" in " ".join(shown(r).split())
    r = run_command(s, "gen", {"prompt": "12+3=", "n": 2})  # add's form: no size of sort looks like it
    assert r.answer is None and "'12+3=' is no question of sort:6" in shown(r) and ":data" not in r.off_task
    r = run_command(s, "gen", {"prompt": "3141", "n": 2})  # no '=' and no answer after it: what asks
    assert r.answer is None and "'3141' has no '=', which ends a question of sort:6 (6 digits, then '=' (314159=))" \
        in r.off_task and "end it with '=' to ask" in shown(r)
    from minitf_repl.commands.generate import _checked_answer

    graded, off_task = _checked_answer(s.data, "314159", "=113459", True)  # the model wrote the '=' and the answer
    assert graded.right and off_task is None
    r = run_command(s, "gen", {"n": 3})  # no prompt given: a held-out question, too few tokens for its answer
    assert r.off_task is None and r.answer is None and s.data.question_of(r.prompt) == r.prompt
    r = run_command(s, "gen", {"n": 10})
    assert r.answer.question == r.prompt and r.answer.held_out
    assert f"no prompt given: asked {r.prompt}, one of the task's held-out questions" in " ".join(shown(r).split())
    c = Session(data_spec="pydoc", checkpoint_dir=tmp_path)
    run_command(c, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "max_seq_len": 16})
    r = run_command(c, "gen", {"prompt": "a=b", "n": 3})
    assert r.answer is None and r.off_task is None  # a corpus has no questions
