"""Where the model is wrong (`:mistakes`): on a task, the held-out questions it answers wrongly; on a text, the
next tokens it finds hardest.

A task's answer is written one character at a time, each read back as the input of the next (autoregressive
decoding), while training shows the model the true answer so far at every position (teacher forcing). The two
are compared position by position: `forced` is how often the model's likeliest character is wrong given the
true answer before it, `written` how often the answer it writes itself is wrong there. Where `written` runs
above `forced`, one wrong character led to more: the answer so far is the model's own, which training never
showed it. Greedy decoding gets a whole answer right exactly when every forced prediction is right (the first
wrong one is also the first wrong written one), so both count the same wrong answers.

On a text there is no answer to be right or wrong: the hardest next tokens of `windows` validation windows are
those of the highest -ln p, each with what came before it and the model's own likeliest guess. How much of the
loss they carry says whether the loss is spread evenly or made of a few surprises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .bpe import shown_piece, shown_text
from .probe import evaluating

CONTEXT_TOKENS = 24  # tokens of text shown before each hard prediction
QUESTIONS_PER_PASS = 1024  # a task's questions a pass (10,000 of sort's: 4,096 a pass peaked at 1.0 GB, 1,024 at 0.56)
LOGITS_PER_PASS = 2**25  # logits one pass may hold (128 MB of float32): windows go through a few at a time
TOKENS_PER_PASS = 2**14  # and tokens (the activations: 5,090 windows of 64 at once peaked at 2.5 GB)


@dataclass
class WrongAnswer:
    question: str  # "314159=": the question, up to and with its '='
    written: str  # the answer the model writes to it, greedily, each character read back
    expected: str  # the true answer
    first_wrong: int  # where in the answer the first wrong character is (0: the first)


@dataclass
class TaskMistakes:
    questions: int  # held-out questions asked
    wrong: int  # answered wrongly
    distinct: int  # different questions among them (the questions are drawn at random: one may come twice)
    asked: int  # different questions among all those asked (sort:1 holds one held-out question: 500 draws of it)
    answers: list[WrongAnswer]  # the first wrong ones, in the order asked, each question once
    forced: list[float] | None  # per answer position: share wrong given the true answer before it (None: no mask)
    written: list[float]  # per answer position: share of the written answers wrong there
    first_wrong: list[int]  # per answer position: wrong answers whose first mistake is there


@dataclass
class HardToken:
    before: str  # the text before it, its last CONTEXT_TOKENS tokens
    actual: str  # the token that came
    p: float  # the model's probability of it
    guess: str  # the model's likeliest token there
    guess_p: float  # its probability
    # -ln p, from the log-softmax: finite where p itself underflows to 0 (a blown-up model's -ln p of 40,000 was "inf")
    nll: float = math.nan


@dataclass
class TextMistakes:
    windows: int  # validation windows scored
    predictions: int  # next tokens scored
    mean: float  # their mean -ln p: the val loss on these windows
    hardest: list[HardToken]  # the highest -ln p first
    top_share: float  # the share of the summed -ln p carried by the hardest tenth of the predictions
    wrong_guess: float  # share of predictions whose likeliest token is not the one that came


def task_mistakes(model, task, device, n: int = 500, seed: int = 0, show: int = 10,
                  on_progress: Callable[[int, int], None] | None = None) -> TaskMistakes:
    """n held-out questions (drawn from generator seed `seed`, as Task.accuracy draws them), each answered greedily.
    `on_progress(done, n)` after each pass of questions."""
    questions = task.sample_questions("val", n, torch.Generator().manual_seed(seed))
    x, y = task.encode_examples(questions)  # (n, L - 1): question and answer, targets on the answer only
    start = task.question_len - 1  # the position that predicts the answer's first character
    causal = getattr(model, "causal", True)  # without the mask a teacher-forced pass reads the answer itself
    guesses, written = [], []
    with evaluating(model):
        with torch.no_grad():
            for k in range(0, n, QUESTIONS_PER_PASS):
                part = x[k : k + QUESTIONS_PER_PASS].to(device)
                if causal:
                    logits, _ = model(part)
                    guesses.append(logits[:, start:].argmax(dim=-1).cpu())  # (questions, answer_len)
                text = part[:, : task.question_len]  # each question, up to its '='
                for _ in range(task.answer_len):  # greedy decoding: each character read back for the next
                    logits, _ = model(text)
                    text = torch.cat([text, logits[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
                written.append(text[:, task.question_len :].cpu())
                if on_progress is not None:
                    on_progress(min(k + QUESTIONS_PER_PASS, n), n)
    forced = (torch.cat(guesses) != y[:, start:]).float().mean(dim=0).tolist() if causal else None
    written_ids = torch.cat(written)
    wrong_at = written_ids != y[:, start:]  # (n, answer_len)
    decode = task.tokenizer.decode
    answers, first_wrong = [], [0] * task.answer_len
    wrong = torch.nonzero(wrong_at.any(dim=1)).flatten().tolist()
    for i in wrong:
        first = int(wrong_at[i].nonzero()[0])
        first_wrong[first] += 1
        if len(answers) < show and questions[i] not in {a.question for a in answers}:  # drawn twice: listed once
            answers.append(WrongAnswer(questions[i], decode(written_ids[i].tolist()), task.answer(questions[i]), first))
    return TaskMistakes(n, len(wrong), len({questions[i] for i in wrong}), len(set(questions)), answers, forced,
                        wrong_at.float().mean(dim=0).tolist(), first_wrong)


def _distinct(x, y, order: list[int], T: int, show: int, causal: bool) -> list[int]:
    """The first `show` of `order` (indices w * T + t, the hardest first) that are distinct predictions: windows are
    drawn at random, so a short validation text gives the same window, or with a causal mask the same text before a
    token, again and again; each would be listed once more (the same " k" after the same text, eight times)."""
    seen, chosen = set(), []
    for k in order:
        if len(chosen) == show:
            break
        w, t = divmod(k, T)
        key = (tuple(x[w, : t + 1].tolist()) if causal else (tuple(x[w].tolist()), t), int(y[w, t]))
        if key not in seen:
            seen.add(key)
            chosen.append(k)
    return chosen


def text_mistakes(model, data, device, windows: int = 64, seed: int = 0, show: int = 10,
                  on_progress: Callable[[int, int], None] | None = None) -> TextMistakes:
    """The hardest next tokens of `windows` validation windows (drawn from generator seed `seed`).
    `on_progress(done, windows)` after each forward pass (a large model takes a minute over the default 64)."""
    x, y = data.get_batch("val", windows, model.config.max_seq_len, torch.Generator().manual_seed(seed))
    W, T = x.shape
    chunk = max(1, min(LOGITS_PER_PASS // (T * model.config.vocab_size), TOKENS_PER_PASS // T))
    nll, best, best_logp = torch.empty(W, T), torch.empty(W, T, dtype=torch.long), torch.empty(W, T)
    with evaluating(model):
        with torch.no_grad():
            for k in range(0, W, chunk):
                logits, _ = model(x[k : k + chunk].to(device))
                logp = torch.log_softmax(logits.float(), dim=-1)  # (chunk, T, V)
                target = y[k : k + chunk].clamp(min=0).to(device)  # -1: not counted (repeat's first copy)
                nll[k : k + chunk] = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).cpu()
                top_logp, top = logp.max(dim=-1)
                best[k : k + chunk], best_logp[k : k + chunk] = top.cpu(), top_logp.cpu()
                if on_progress is not None:
                    on_progress(min(k + chunk, W), W)
    counted = (y >= 0).flatten()
    flat = nll.flatten()[counted]
    where = torch.nonzero(counted).flatten()  # flat's index -> the window's (w * T + t)
    tokenizer = data.tokenizer

    def name(i: int) -> str:  # a token as the views show it (core.bpe: with its space, a byte as its escape)
        return shown_piece(tokenizer, i)

    hardest = []
    for k in _distinct(x, y, where[torch.argsort(flat, descending=True, stable=True)].tolist(), T, show,
                       causal=model.config.causal):
        w, t = divmod(k, T)
        start = max(0, t + 1 - CONTEXT_TOKENS)
        before = shown_text(tokenizer, x[w, max(0, start - 1) : start].tolist(), x[w, start : t + 1].tolist())
        hardest.append(HardToken(before, name(int(y[w, t])), math.exp(-float(nll[w, t])),
                                 name(int(best[w, t])), math.exp(float(best_logp[w, t])), float(nll[w, t])))
    tenth = min(flat.numel(), max(1, flat.numel() // 10))
    total = float(flat.sum())
    return TextMistakes(windows, flat.numel(), float(flat.mean()) if flat.numel() else math.nan, hardest,
                        float(torch.topk(flat, tenth).values.sum()) / total if total > 0 else 0.0,
                        float((best.flatten()[counted] != y.flatten()[counted]).float().mean()))
