"""What a user's-eye sweep of the built-in tasks found wrong: each test failed before its fix.

:attrib and :patch on a task split the logit of the "answer" of any prompt that ended in '=': `:attrib 31+4=` on sort
explained '+' (sort's answer() sorts whatever it is given), and a question of another size got an answer the model
was never asked for; :mistakes said the held-out questions "repeat" by counting only those answered wrongly ("0 wrong
answers to 500 held-out questions (0 distinct: drawn at random, they repeat)" for a model right on all of them);
:compare on a task measured each contender's accuracy and never showed it; and smaller ones, each named in its test.
"""

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import UserError
from minitf_repl.commands.base import true_next
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of

TINY = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def session_on(data="sort", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2), data_spec=data,
                   device_name="cpu")


# --- the true answer the views split or patch --------------------------------------------------------------
@pytest.mark.parametrize("spec, prompt, answer", [
    ("sort", "314159=", "1"), ("sort", "31+4=", None), ("sort", "3141=", None), ("sort", "31=41=", None),
    ("reverse:4", "1234=", "4"), ("reverse:4", "12=34=", None), ("add:2", "12+34=", "0"), ("add:2", "12+3=", None),
])
def test_only_a_question_of_the_task_and_its_size_has_a_true_next_character(spec, prompt, answer):
    assert true_next(load_data(spec), prompt) == answer


def test_attrib_and_patch_on_a_prompt_that_is_no_question_split_the_likeliest_token_not_a_made_up_answer():
    session = session_on()
    run(session, ":train steps=2")
    attrib = run(session, ":attrib 31+4=")
    assert attrib.rank == 1  # the likeliest, as on any text that is not a question; it was '+', rank 5 of 12
    patch = run(session, ":patch 31+4= 31+5=")
    assert patch.answer != "+"
    assert run(session, ":attrib 314159=").target == "1"  # a question of the task: its answer, as before


# --- :mistakes's count of distinct questions -----------------------------------------------------------------
def test_mistakes_says_the_questions_repeat_by_those_asked_not_by_those_answered_wrongly():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import TaskMistakes, WrongAnswer

    # a model right on all but 3 of 500 different questions: the 3 wrong ones are no sign that the draws repeat
    wrong = [WrongAnswer(f"{k}14159=", "000000", "".join(sorted(f"{k}14159")), 0) for k in range(3)]
    found = TaskMistakes(500, 3, 3, 500, wrong, [0.01] * 6, [0.01] * 6, [3, 0, 0, 0, 0, 0])
    shown = plain(MistakesResult("sort", 0, found, None, 600))
    assert "3 wrong answers to 500 held-out questions of sort" in shown and "distinct" not in shown
    found = TaskMistakes(500, 0, 0, 500, [], [0.0] * 6, [0.0] * 6, [0] * 6)  # it said "(0 distinct: ...)"
    assert "0 wrong answers to 500 held-out questions of sort" in plain(MistakesResult("sort", 0, found, None, 600))


def test_mistakes_counts_the_distinct_questions_among_all_those_asked():
    from minitf_repl.core.mistakes import task_mistakes

    session = session_on("sort:1", max_seq_len=8)
    found = task_mistakes(session.model, session.data, "cpu", n=20)
    assert found.asked == 1 and found.distinct <= 1  # sort:1 holds one held-out question, drawn 20 times
    session = session_on("add:2")
    found = task_mistakes(session.model, session.data, "cpu", n=50)
    assert found.asked == len(set(session.data.sample_questions("val", 50, torch.Generator().manual_seed(0))))
    assert "distinct" not in plain(run(session, ":mistakes n=50"))


# --- :compare on a task ------------------------------------------------------------------------------------
def test_compare_on_a_task_shows_each_contenders_accuracy_as_train_does():
    session = session_on("sort:2")
    result = run(session, ":compare current norm=rmsnorm steps=2")
    finals = [o.final.accuracy for o in result.outcomes]
    assert None not in finals  # measured all along (and in --json); the terminal never showed it
    shown = plain(result)
    assert "accuracy" in shown and all(f"{100 * a:.1f}%" in shown for a in finals)
    narrow = " ".join(text_of(result, 60).split())  # the facts one contender a line, where the table does not fit
    assert all(f"accuracy {100 * a:.1f}%" in narrow for a in finals), narrow
    text = run(session_on("pydoc"), ":compare current norm=rmsnorm steps=2")
    assert "accuracy" not in plain(text)  # a text has none


# --- left by the sweep, fixed after it -------------------------------------------------------------------------
def test_the_examples_and_words_about_a_task_name_its_size():
    session = Session(ModelConfig(**TINY), TrainConfig(steps=2, batch_size=2), data_spec="sort:3", device_name="cpu")
    with pytest.raises(UserError, match=r"e\.g\. :patch 314= 014= \("):  # three digits, as sort:3 asks
        run(session, ":patch")
    text = Session(ModelConfig(**TINY), data_spec="pydoc", device_name="cpu")
    with pytest.raises(UserError, match="e.g. :patch the cat sat vs the dog sat"):
        run(text, ":patch")
    assert "data is now sort:2" in plain(run(session, ":data sort:2"))
    run(session, ":data reverse:5")
    graded = run(session, ":gen 123= n=2")  # reverse:3's question: a model may well have trained on it
    assert "is no question of reverse:5" in plain(graded) and "never saw" not in plain(graded)
