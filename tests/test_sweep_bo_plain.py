"""Marks that say without colour what a colour says (:score, :mistakes), and the pass marks :checks names."""

import io
import math

from rich.console import Console
from rich.text import Text

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.inside import ScoreResult
from minitf_repl.dispatch import json_document
from minitf_repl.render import render
from test_commands import run, text_file, tiny_session  # noqa: F401 (text_file: a fixture)
from test_render import plain, text_of


def shown(result, no_color: bool, width: int = 120) -> str:
    """`result` rendered on a terminal of full colour, as a reader sees it (escapes gone, wrapping aside); `no_color`:
    NO_COLOR set there, where Rich drops the colours and keeps bold."""
    c = Console(file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor", no_color=no_color)
    render(result, c)
    return " ".join(Text.from_ansi(c.file.getvalue()).plain.split())


def scored() -> ScoreResult:
    """Four positions of a text of V = 12 (ln V 2.48): t = 1 worse than a uniform guess, t = 2 guessed right, and
    with counter=2 the model far ahead of the counter at t = 3 (a fact of the result, not of a model)."""
    losses = [1.0, 3.0, 0.5, 0.1]
    return ScoreResult("abcde", list("abcde"), [math.exp(-v) for v in losses], losses, ["z", "z", "d", "q"],
                       [0.5, 0.3, 0.6, 0.4], [True] * 4, sum(losses) / 4, math.log(12), counter=2,
                       counter_losses=[1.0, 3.1, 0.6, 3.0], counter_loss=1.925)


# --- 1. counter=: the * wherever colour is off, NO_COLOR on a terminal too ----------------------------------------
def test_score_stars_the_counters_cells_under_no_color_on_a_terminal():
    """NO_COLOR in a terminal kept a colour system: the positions were marked by bold alone, "(in bold)"."""
    text = shown(scored(), no_color=True)
    assert "3.000*" in text and "(marked *)" in text and "(in bold)" not in text, text
    coloured = shown(scored(), no_color=False)
    assert "3.000*" not in coloured and "(in bold)" in coloured


# --- 2. :mistakes: a ^ under each wrong character without colour ------------------------------------------------
def _mistakes():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import TaskMistakes, WrongAnswer

    found = TaskMistakes(500, 1, 1, 500, [WrongAnswer("889978=", "888889", "788899", 0)], [0.002] + [0.0] * 5,
                         [0.002] + [0.0] * 5, [1, 0, 0, 0, 0, 0])
    return MistakesResult("sort:6", 0, found, None, 300)


def test_mistakes_marks_the_wrong_characters_with_a_caret_without_colour():
    lines = text_of(_mistakes()).splitlines()
    row = next(k for k, line in enumerate(lines) if "889978=" in line)
    at = lines[row].index("888889")
    assert lines[row + 1][at:at + 6].rstrip() == "^   ^", lines  # 8 for 7 and 8 for 9
    assert "^ marks each character it wrote that is not the answer's character there" in plain(_mistakes())
    assert "^" not in shown(_mistakes(), no_color=False)  # in colour, bold red marks them


def test_mistakes_marks_them_under_no_color_on_a_terminal_too():
    assert "888889 788899 1st ^ ^" in shown(_mistakes(), no_color=True)


# --- 3. :score's colours explained, and said by marks without them ---------------------------------------------
def test_score_marks_a_loss_worse_than_uniform_and_a_right_guess_without_colour():
    text = plain(scored(), 140)
    assert "3.000!" in text and "1.000!" not in text and "d 0.60 =" in text and "z 0.50 =" not in text, text
    assert "! after a -ln p: above ln V = 2.48, worse than a uniform guess; = after a best guess: it is the true " \
           "next character" in text
    assert "3.000!" in shown(scored(), no_color=True)


def test_score_says_what_its_colours_mean():
    text = shown(scored(), no_color=False, width=140)
    assert "3.000!" not in text and "d 0.60 =" not in text
    assert ("a bar in red: -ln p above ln V = 2.48, worse than a uniform guess (yellow: under it); a best guess in "
            "green: it is the true next character") in text, text


# --- 4. :checks names the pass mark where a check passes --------------------------------------------------------
def test_checks_name_the_pass_mark_of_blind_and_overfit_where_they_pass():
    from minitf_repl.commands.checks import ChecksResult, measured
    from minitf_repl.core import checks

    blind = checks.BlindCheck(50, 2.288, 3.231, 3.238, 4.65, "\n", True, True)
    target = checks.OVERFIT_TARGET * math.log(103)
    overfit = checks.OverfitCheck(50, 2, 128, 4.639, 8.05e-5, target, [4.639] * 12 + [0.2] * 38, True, 1, 64, 64)
    result = ChecksResult("pydoc", "character", 103, 0, ["blind", "overfit"], blind=blind, overfit=overfit,
                          blind_margin=checks.BLIND_MARGIN)
    assert "3.231 with every input '\\n' (id 0), 0.943 above the real run (the pass mark: 0.1 or more above)" in \
        measured("blind", blind, result)
    assert "under the pass mark 0.232 (5% of ln V) at step 13" in measured("overfit", overfit, result)


# --- 5. :score --json: the positions its marks flag -------------------------------------------------------------
def test_score_json_lists_the_losses_above_uniform_and_the_positions_ahead_of_the_counter(monkeypatch, text_file):
    """The model's and the counter's losses set by hand: the positions each list flags are known (the test compared
    the lists with the functions that filled them, on an untrained model, which no mistake in them could fail)."""
    import dataclasses

    from minitf_repl.core import inside, ngram

    model = [0.1, 5.0, 0.2, 4.0, 0.3, 0.1, 6.0, 0.05]  # the text's 8 predictions; ln V is 3.43 for its 31 characters
    counting = [3.0] * 8
    scored = inside.teacher_forcing
    monkeypatch.setattr(inside, "teacher_forcing", lambda *a: dataclasses.replace(
        scored(*a), losses=model, target_probs=[math.exp(-v) for v in model]))
    monkeypatch.setattr(ngram, "counter_losses", lambda *a: counting)
    session = tiny_session(text_file)
    doc = json_document(REGISTRY["score"], run(session, ":score thequickb counter=2"))
    assert math.log(session.data.tokenizer.vocab_size) == doc["uniform"] < 4.0
    assert doc["above_uniform"] == [False, True, False, True, False, False, True, False]
    # ahead: from t = 1 (the counter of order 2 reads one token), sure of it (p >= 0.2) and 1.0 or more below 3.0
    assert doc["beats_counter"] == [False, False, True, False, True, True, False, True]
    assert json_document(REGISTRY["score"], run(session, ":score thequickb"))["beats_counter"] is None


def test_compare_stars_each_bands_lowest_under_no_color_on_a_terminal_too():
    """:compare's loss by position marked each band's lowest by bold alone under NO_COLOR on a terminal (Rich keeps a
    colour system there): its * came only in a pipe."""
    result = run(tiny_session(), ":compare n_layers=1 n_layers=2 steps=4")
    assert "* the lowest" in shown(result, no_color=True)
    assert "* the lowest" not in shown(result, no_color=False)  # in colour, bold green says it
