"""`:mistakes`: where the model is wrong. On a task, the held-out questions it answers wrongly, and where in the
answer it goes wrong with the true answer before it (teacher forcing) and with its own (autoregressive decoding);
on a text, the next tokens it finds hardest, each with what came before it and its own likeliest guess
(core/mistakes.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ..core.words import count
from ..palette import columns, visible
from ..registry import Param
from ..render.heatmap import plain
from ..render.renderers import render
from ..render.tables import fits, fitting_table
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again, named
from .base import ablation_note, command, data_named, switched_off

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.mistakes import TaskMistakes, TextMistakes

FAMILY = "training"  # listed under :train's heading, beside :context: what a val loss is made of

QUESTIONS, WINDOWS = 500, 64  # the defaults of n: a task's held-out questions (as :train's accuracy), a text's windows
BEFORE_SHOWN = (40, 32, 24, 16, 12, 8)  # the characters of context a hard token's row shows, the most that fit
MOST = 10_000  # n at most: 10,000 of sort's questions or pydoc's windows take 10-20 s on 2 cores (100,000: 103 s)


@dataclass
class MistakesResult:
    # the session's data as results name it: a task with its size (sort:4), random tokens by spec, else its name
    data: str
    seed: int  # the questions' or windows' seed
    task: TaskMistakes | None  # on a task
    text: TextMistakes | None  # on a text (or random tokens)
    model_step: int  # the model's training step
    untrained: bool = False  # no training here nor weights from elsewhere: every answer is a guess
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    # random tokens: every token is as likely as any other, so no model guesses better than 1 in V
    vocab_size: int | None = field(default=None, metadata={"view_only": True})


# interruptible: it polls no stop flag, and a model near GPT-2 small's size scores the 64 windows for a minute with
# Ctrl-C unheard; it only reads the model (its mode is put back on the way out)
@command("mistakes", "Where the model is wrong: a task's held-out questions it answers wrongly, or a text's hardest "
                     "next tokens.",
         params=[
    Param("n", int, low=1, limit=MOST,
          help=f"held-out questions asked (a task, default {QUESTIONS}: :train's accuracy) or validation windows "
               f"scored (a text, default {WINDOWS})"),
    Param("show", int, default=10, low=1, limit=1000, help="wrong answers or hard tokens listed"),
    Param("seed", int, default=0, low=0, limit=2**63 - 1, help="the questions' or windows' seed"),
], aliases=("errors",), interruptible=True, json_version=3,
         guide="inside-views.md#where-it-is-wrong-mistakes")  # fmt: skip
def cmd_mistakes(session: Session, args: dict, reporter: Reporter) -> MistakesResult:
    from ..core.mistakes import task_mistakes, text_mistakes

    data, model, device = session.data, session.model, session.trainer.device
    data.check_fits(session.model_config.max_seq_len)
    task = text = None

    def progress(done: int, total: int) -> None:
        reporter.on_progress("mistakes", done, total)

    if hasattr(data, "grade"):  # a task: questions with answers (repeat's copies are scored as a text)
        task = task_mistakes(model, data, device, args["n"] or QUESTIONS, args["seed"], args["show"], progress)
    else:
        text = text_mistakes(model, data, device, args["n"] or WINDOWS, args["seed"], args["show"], progress)
    return MistakesResult(data_named(session), args["seed"], task, text, session.trainer.step, untrained=session.untrained,
                          ablations=switched_off(session),
                          vocab_size=data.tokenizer.vocab_size if getattr(data, "nothing_to_learn", False) else None)


@render.register(MistakesResult)
def render_mistakes(result: MistakesResult, console: Console) -> None:
    if result.task is not None:
        _render_task(result, result.task, console)
    else:
        _render_text(result, result.text, console)
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: every answer is a guess; "
                      f"{look_again('mistakes', AUTOSAVE_NAME)}")


def _render_task(result: MistakesResult, found: TaskMistakes, console: Console) -> None:
    share = found.wrong / found.questions
    # said where the draws repeat much (sort:1 holds one held-out question); a few repeats in 500 are the usual.
    # Counted over all the questions asked: those answered wrongly are fewer wherever the model is mostly right
    repeats = (f" ({found.asked} distinct: drawn at random, they repeat)" if 2 * found.asked <= found.questions
               else "")
    # :train's accuracy asks QUESTIONS questions of seed 0: other n= or seed= ask others, measured alike
    same = found.questions == QUESTIONS and result.seed == 0
    measured = (f", as {named('train')} measures it" if same else
                f" ({named('train')}'s accuracy asks {QUESTIONS:,} questions, seed 0)")
    say(console, f"{count(found.wrong, 'wrong answer')} to {count(found.questions, 'held-out question')}{repeats} of "
                 f"{result.data} (seed {result.seed}): accuracy {1 - share:.1%}{measured}", "bold")
    if not found.wrong:
        note(console, f"no question answered wrongly; {cmd('mistakes', **asked(result, n=10 * found.questions))} asks "
                      "more")
        return
    carets = plain(console)  # no colour (a pipe, NO_COLOR): bold red alone showed nothing of which are wrong
    rows = [[q.question, _marked(q.written, q.expected, carets), q.expected, _nth(q.first_wrong + 1)]
            for q in found.answers]
    console.print(fitting_table(console, ["question", "it wrote", "answer", "first wrong"], rows,
                                left=("question", "it wrote", "answer")))
    if carets:
        note(console, "^ marks each character it wrote that is not the answer's character there")
    if found.distinct < found.wrong and found.distinct == len(found.answers):  # all listed: fewer rows than wrong
        note(console, f"the {count(found.wrong, 'wrong answer')} are to {count(found.distinct, 'distinct question')}, "
                      "each listed once (drawn at random, a question may come more than once)")
    if found.distinct > len(found.answers):
        # the list holds each question once: beside "500 wrong answers", "of 499 questions" read as a miscount
        distinct = " distinct" if found.distinct < found.wrong else ""
        note(console, f"the first {len(found.answers)} of the {found.distinct}{distinct} questions answered wrongly; "
                      f"{cmd('mistakes', **asked(result, show=found.distinct))} lists them all")
    names = ["answer's character", *(str(k + 1) for k in range(len(found.written)))]
    table = []
    if found.forced is not None:
        table.append(["wrong, the true answer before it", *(f"{v:.1%}" for v in found.forced)])
    table.append(["wrong in its own answer", *(f"{v:.1%}" for v in found.written)])
    table.append(["its first mistake", *(f"{n:,}" for n in found.first_wrong)])
    shares, line = fitting_table(console, names, table, left=(names[0],), records=False), "row"
    if not fits(console, shares):  # a narrow terminal: the long row names cut every share to '…'; a row a character
        shares, line = fitting_table(console, [names[0], *(row[0] for row in table)],
                                     [[names[k], *(row[k] for row in table)] for k in range(1, len(names))]), "column"
    console.print(shares)
    if found.forced is not None:
        note(console, f"the first {line} is how training sees it (teacher forcing: the true answer so far is the "
                      "input), the second how it answers (each character it writes is read back): where the second "
                      "runs above the first, a wrong character led to more, from an answer so far that training "
                      "never showed it")
    else:
        note(console, "this model has no causal mask, so the true answer before a position would show it the "
                      "answer itself: only its own answers are read")
    first = found.answers[0]  # greedily, as here: `:gen Q` samples (temperature 0.8) and may write it right
    wrong_at = first.question + first.written[:first.first_wrong]  # :attrib's target: the first wrong character
    note(console, f"{cmd('gen', first.question, temperature=0)} writes the first as this list does (greedily), with "
                  f"its grade; {cmd('attrib', wrong_at)} asks which parts decide its first wrong character")


def _last_shown(text: str, width: int) -> str:
    """The end of `text` as shown (visible: a zero-width joiner as \\u200d), whole characters only, at most `width`
    long: cut after showing, an escape lost its start and read as the text "200d"."""
    kept = used = 0
    for ch in reversed(text):
        used += len(visible(ch))  # its length as shown: an escape's several characters
        if kept and used > width:
            break
        kept += 1
    return visible(text[len(text) - kept:])  # shown whole, as before: an accent mid-text on its letter


def _render_text(result: MistakesResult, found: TextMistakes, console: Console) -> None:
    say(console, f"the {count(len(found.hardest), 'hardest next token')} of {count(found.windows, 'val window')} "
                 f"(seed {result.seed}, {count(found.predictions, 'prediction')}; mean -ln p {found.mean:.3f})",
        "bold")
    # what came before each token, its last characters (those nearest it) as many as the width leaves room for: at
    # 40 columns 40 of them cut the headers ('ca…') and the guesses to fit
    for shown in BEFORE_SHOWN:
        rows = [[Text(_last_shown(h.before, shown)), Text(visible(h.actual), style="bold"), _p(h.p),
                 f"{h.nll if math.isfinite(h.nll) else -math.log(h.p) if h.p > 0 else math.inf:.2f}", visible(h.guess),
                 _p(h.guess_p)]
                for h in found.hardest]
        table = fitting_table(console, ["before it", "came", "p", "-ln p", "its guess", "its p"], rows,
                              left=("before it", "came", "its guess"), optional=("its p", "p"),
                              records=shown == BEFORE_SHOWN[-1])  # records only where no fewer characters fit
        if fits(console, table):
            break
    console.print(table)
    # the share of wrong guesses is of every prediction: "of them" after the hardest tenth read as of those, where
    # the likeliest token is all but always wrong
    note(console, f"the hardest tenth of the predictions carry {found.top_share:.0%} of the loss; of all "
                  f"{found.predictions:,}, {found.wrong_guess:.0%} are wrong guesses (the model's likeliest token is "
                  f"not the one that came); {cmd('score', 'TEXT')} scores a text of yours token by token")
    if result.vocab_size:  # read as the model's failing, 98% wrong is what random tokens give any model
        note(console, f"these tokens are random: any model's likeliest token is the one that came 1 time in "
                      f"{result.vocab_size:,} ({1 - 1 / result.vocab_size:.0%} wrong), and the hardest are the "
                      f"ones it happens to rate lowest; no training makes them easier")


def asked(result: MistakesResult, **changes) -> dict:
    """This run's questions (n=, seed= where not the defaults) with `changes`: a hint's :mistakes asks the same ones
    (':mistakes show=44' after ':mistakes n=2000 seed=3' listed the wrong answers to 500 other questions)."""
    n = result.task.questions if result.task is not None else result.text.windows
    default = QUESTIONS if result.task is not None else WINDOWS
    options = {"n": n if n != default else None, "show": None, "seed": result.seed or None}
    options.update(changes)
    return {key: value for key, value in options.items() if value is not None}


def _marked(written: str, expected: str, carets: bool = False) -> Text:
    """The written answer, each character that differs from the true one in bold red; `carets`: with a line under
    it, a ^ under each of those, which shows without colour (as many columns as the character is shown in)."""
    out, under = Text(), ""
    for got, want in zip(written, expected):
        shown = visible(got)
        out.append(shown, style="" if got == want else "bold red")
        under += ("^" if got != want else " ").ljust(columns(shown))
    if carets:
        out.append("\n" + under.rstrip())
    return out


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.0e}"


def _nth(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"

