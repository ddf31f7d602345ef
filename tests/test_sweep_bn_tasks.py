"""The tester's findings on the built-in tasks (sort, reverse, add): verdicts, held-out claims, answers' lengths."""

import dataclasses
import re
from pathlib import Path

from test_commands import Recorder, run, tiny_session
from test_render import plain

from minitf_repl.commands.generate import answer_line
from minitf_repl.core.data import Task

ROOT = Path(__file__).resolve().parent.parent


def test_a_blown_up_loss_after_a_data_switch_names_the_switch_not_the_rate():
    session = tiny_session("reverse:4")
    run(session, ":train steps=6")
    result = run(session, ":train data=reverse:5 steps=1")
    assert result.switched_at == 6  # the run began on reverse:5 with weights trained to step 6 on reverse:4
    # the tester's reverse:8 model on reverse:11: val 10.13 against ln 12 = 2.48, train loss far above it too
    shown = plain(dataclasses.replace(result, val_loss=10.13, train_loss=10.2))
    assert "this run began on reverse:5 with a model trained to step 6 on other data" in shown
    assert "too high" not in shown and "safe start" not in shown


def test_a_blown_up_loss_after_a_switch_in_the_middle_of_a_stopped_run_says_where_the_run_switched():
    session = tiny_session("reverse:4")
    run(session, ":train", Recorder(stop_after=3))  # a run of 6, stopped at step 3
    run(session, ":data reverse:5")  # the same vocabulary: the run goes on
    result = run(session, ":train")
    assert result.resumed and result.switched_at == 3 and result.run_start == 0
    shown = plain(dataclasses.replace(result, val_loss=10.13, train_loss=10.2))
    # was: "this run began on reverse:5 with a model trained to step 3", where it began at step 0 on reverse:4
    assert "this run switched to reverse:5 at step 3, its model trained to there on other data" in shown, shown
    assert "began on" not in shown


def test_a_blown_up_loss_without_a_switch_still_blames_the_rate():
    session = tiny_session("reverse:4")
    result = run(session, ":train steps=2")
    assert result.switched_at is None
    assert "too high" in plain(dataclasses.replace(result, val_loss=10.13, train_loss=10.2))


def _carries(question: str) -> bool:
    a, b = question.rstrip("=").split("+")
    return any(int(x) + int(y) >= 10 for x, y in zip(a, b))  # a column's sum carries: none does, none comes in


def test_the_docs_claim_no_carry_for_every_add_mistake():
    doc = (ROOT / "docs/inside-views.md").read_text(encoding="utf-8")
    listed = re.findall(r"^ (\d{3}\+\d{3}=) ", doc, flags=re.M)
    # the doc's own example holds a mistake with no carry (191+400=), so no sentence may say all are carries
    assert "191+400=" in listed and not _carries("191+400=")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for text in (doc, readme):
        assert "every mistake is a carry" not in text.lower() and "every one a carry" not in text


def _held_out(task: Task, twinned: bool) -> str:
    """A held-out question of `task` whose swapped twin (add) is a training question, or is not."""
    for n in range(10 ** task.n_digits):
        question = task.question([int(d) for d in f"{n:0{task.n_digits}d}"])
        a, b = question.rstrip("=").split("+") if "+" in question else (question, question)
        twin = f"{b}+{a}="
        if task.is_val(question) and (not task.is_val(twin)) == twinned:
            return question
    raise AssertionError("no such question")


def test_a_right_held_out_answer_is_not_called_generalisation_where_its_twin_is_trained_on():
    task = Task("add", 2)
    question = _held_out(task, twinned=True)
    graded = task.grade(question + task.answer(question))
    assert graded.held_out and graded.right
    line = answer_line(graded)
    assert "generalisation" not in line and "swapped" in line
    assert "not memory" not in Task.__doc__  # the docstring claimed it
    # reverse's answers are each one question's: a right held-out answer is still one never seen
    reverse = Task("reverse", 3)
    val = next(q for n in range(1000) if reverse.is_val(q := reverse.question([int(d) for d in f"{n:03d}"])))
    assert "generalisation" in answer_line(reverse.grade(val + reverse.answer(val)))


def test_a_held_out_answers_twin_line_is_the_questions_own():
    task = Task("add", 3)
    twinned, alone = _held_out(task, twinned=True), _held_out(task, twinned=False)
    a, b = twinned.rstrip("=").split("+")
    assert task.trained_twin(twinned) == f"{b}+{a}=" and task.trained_twin(alone) is None
    # was: "its twin ... may be" for every held-out question of add, whose twin was held out too or itself
    assert f"{b}+{a}=" in answer_line(task.grade(twinned + task.answer(twinned)))
    line = answer_line(task.grade(alone + task.answer(alone)))
    assert "twin" not in line and "so this is generalisation" in line, line
    own = next(q for n in range(1000) if task.is_val(q := f"{n:03d}+{n:03d}="))  # a+a= is its own twin
    assert task.trained_twin(own) is None and "generalisation" in answer_line(task.grade(own + task.answer(own)))
    sort = Task("sort", 4)
    assert sort.trained_twin("1111=") is None  # no other order of its digits
    held = next(q for n in range(10_000) if sort.is_val(q := f"{n:04d}=") and len(set(q)) == 5)
    twin = sort.trained_twin(held)
    assert sorted(twin) == sorted(held) and twin != held and not sort.is_val(twin)


def test_train_fresh_starts_from_new_weights_and_keeps_the_trained_model():
    session = tiny_session("sort:4")
    run(session, ":train steps=6")
    hooks = Recorder()
    result = run(session, ":train fresh=on steps=2", hooks)
    assert result.total_steps == 2 and result.schedule == "new"  # a new model's first run, not step 8
    assert not result.resumed and session.trainer.run_start == 0 and len(session.trainer.history) == 2
    new = tiny_session("sort:4")
    run(new, ":train steps=2")
    # the seed's own draw of weights, as a new session's: its steps are that session's, loss for loss
    assert [row["train_loss"] for row in session.trainer.history] == [row["train_loss"] for row in new.trainer.history]
    kept = [line for line in hooks.notices if line.startswith("fresh=on: new weights")]
    assert kept and "kept as checkpoint kept-" in kept[0]
    assert (session.checkpoint_dir / kept[0].split("checkpoint ")[1].split(" ")[0] / "checkpoint.json").is_file()


def test_the_data_note_and_the_train_help_name_fresh():
    session = tiny_session("sort:4")
    run(session, ":train steps=2")
    assert ":train fresh=on starts from new weights" in plain(run(session, ":data reverse:4"))
    from minitf_repl.commands.base import REGISTRY

    assert "fresh" in {p.name for p in REGISTRY["train"].params}
    docs = (ROOT / "docs/commands.md").read_text(encoding="utf-8")
    assert "[layer=N] [--fresh]` | train" in docs and "`fresh=on` starts from new weights" in docs


def test_gen_on_a_longer_question_writes_its_size_of_answer_and_says_so():
    task = Task("add", 3)
    ids = task.tokenizer.encode("1234+5678=7924")
    assert not task.answer_complete(ids)  # the sum has 5 digits: 4 is no end
    assert task.answer_complete(task.tokenizer.encode("1234+5678=06912"))
    assert task.answer_complete(task.tokenizer.encode("123+567=0690"))  # the task's own size: as before
    assert task.answer_complete(task.tokenizer.encode("12+56=0068"))  # smaller: the trained length, padded
    session = tiny_session("add:3")
    run(session, ":train steps=1")
    result = run(session, ":gen 1234+5678= n=20 temperature=0")
    assert len(result.text) == 5
    shown = plain(result)
    assert "the question is longer than add:3's" in shown and "stopped at the end of the answer" not in shown


def test_heads_on_add_does_not_say_the_answer_is_made_of_the_question_digits():
    session = tiny_session("add:2")
    run(session, ":train steps=1")
    shown = plain(run(session, ":heads"))
    assert "on add the repeated tokens" in shown
    assert "made of a question's digits" not in shown and "the sum of its question's two numbers" in shown
    session = tiny_session("sort:4")
    run(session, ":train steps=1")
    assert "its question's digits, sorted" in plain(run(session, ":heads"))


def test_the_data_view_names_the_size_and_one_question_is_held_out():
    shown = plain(run(tiny_session("sort:4"), ":data sort:1"))
    assert "name sort:1 " in shown
    assert "1 of the 10 possible questions (10%) is held out" in shown


def test_a_sort_questions_trained_twin_is_found_without_walking_every_order():
    """itertools.permutations walked size! orders, most of them the question again where digits repeat: a held-out
    sort:30 question such as 1000...0= never came back."""
    import time

    from minitf_repl.core.data import load_data

    task = load_data("sort:30")
    start = time.perf_counter()
    twin = task.trained_twin("1" + "0" * 29 + "=")
    assert twin is not None and sorted(twin) == sorted("1" + "0" * 29 + "=") and not task.is_val(twin)
    assert task.trained_twin("0" * 30 + "=") is None  # one digit repeated: no other order
    assert time.perf_counter() - start < 1.0
