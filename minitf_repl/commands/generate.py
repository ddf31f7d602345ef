"""`:gen`: the model continues a prompt (in the REPL, a line without ':' is one too); `:step`: how each token is picked.

Tokens stream through the reporter as they are sampled (core.generate); Ctrl-C stops after the
current token. With show=probs the text is shown once, at the end, each token coloured by the
probability it had when it was picked (core.inside.token_probs).

`:step`: the next-token microscope, the sampler's stages for one token (n=K: K tokens, one after
another), from the same loop :gen runs.
"""

from __future__ import annotations

import math
import os
import secrets
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.config import GenConfig
from ..core.errors import UserError
from ..core.words import count, quoted_end
from ..palette import piece_cell, quoted, shade, terminal_safe, visible
from ..registry import Param, param_from_setting
from ..render import chart
from ..render.heatmap import cell, legend, plain, unscaled
from ..render.renderers import after_stream, render, text_apart
from ..render.tables import NARROW, add_row, fits
from ..render.words import model_text, note, say, write_raw, writes_raw
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import SHELL, cmd, given_before, look_again, named, option, syntax, train_first
from .base import (VIEW_DEFAULT, ablation_note, command, default_prompt, long_prompt_notice, sample_prompt,
                   sampling_notes, switched_off, typeable_prompt, with_given)

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.data import Graded

FAMILY = "generating"  # the heading :help lists this module's commands under
DRAWN_SEEDS = (100_000, 1_000_000)  # a seed drawn for a :gen without gen_seed: six digits, easily typed


# `:help WORD` of these lists :gen, :step and :kv together (Command.topics): `:help gen` names the other two, which
# sat under other headings where a learner of decoding did not look
SAMPLING_TOPICS = ("gen", "generate", "generation", "sampling", "decoding", "autoregressive", "autoregressive_decoding",
                   "nucleus", "nucleus_sampling", "greedy", "kv_cache")


def one_token_left(settings, vocab_size: int) -> str | None:
    """Why the sampling settings leave exactly one token to pick at every step, whatever the logits (the likeliest, as
    greedy takes it), so that no seed decides anything; None where a draw is made. A top_p below 1/V keeps one: the
    likeliest token alone has at least 1/V (1/k after top-k) of the probability."""
    if settings.temperature == 0:
        return "temperature=0 is greedy, the likeliest token every time"
    if settings.top_k == 1:
        return "top_k=1 keeps the likeliest token alone"
    kept = min(settings.top_k or vocab_size, vocab_size)
    if settings.top_p is not None and settings.top_p * kept < 1:
        return (f"top_p={settings.top_p:g} keeps the likeliest token alone (it holds at least 1/{kept:,} of the "
                "probability)")
    return None


def _draws(settings, vocab_size: int) -> bool:
    """Whether the sampling seed decides a token: not at n=0 (--json said seed_drawn for a seed that drew nothing),
    nor where one token is left at each step (one_token_left: `top_p=1e-9` named a drawn seed)."""
    return settings.n > 0 and one_token_left(settings, vocab_size) is None


def seed_ignored(settings, given, vocab_size: int) -> str | None:
    """The notice for a seed given where the settings leave one token at every step (`temperature=0 seed=3` ignored
    it without a word, where `temperature=0 top_p=0.5` was told its top_p does nothing)."""
    why = one_token_left(settings, vocab_size) if "gen_seed" in given and settings.gen_seed is not None else None
    return None if why is None else f"{why}: the seed decides nothing (it does once more than one token can be picked)"


def drawn_seed() -> int:
    """A fresh sampling seed of six digits, as the docs say it is (below 100,000 it had fewer one time in ten)."""
    low, high = DRAWN_SEEDS
    return low + secrets.randbelow(high - low)
UNFINISHED = "\ufffd"  # what a character's first bytes decode as before its last byte has come
# A UTF-8 character has at most 4 bytes, so 4 tokens of one byte each complete it; text still unfinished after
# as many is no character (a model may sample any bytes) and is written as it decodes.
HELD_TOKENS = 4


@dataclass
class GenResult:
    prompt: str  # the prompt used (if none was given: a task's held-out question, else the default start character)
    text: str  # the generated continuation, without the prompt
    n_tokens: int  # tokens generated
    seconds: float  # wall time of the generation, the prompt's prefill included
    tokens_per_second: float | None  # n_tokens / seconds; None: no token was generated (n=0), so no speed to state
    cache: bool  # decoded with the KV cache (cache=on, and a model whose cache is exact: see cache_off)
    stopped: bool  # Ctrl-C ended it early
    default_prompt: bool = False  # no prompt was given: `prompt` is the start character chosen for it
    untrained: bool = False  # the model has not trained a step: its text is random
    first_token_seconds: float | None = None  # time to the first token: the prompt's prefill and one sample
    probs: list[float] | None = None  # show=probs: each token's probability when it was picked
    # show=probs: the text each token ends, one per token: '' for a token that ends inside a character (a byte-level
    # BPE's first bytes of é), whose text the token that completes it carries; joined, they are `text`
    token_texts: list[str] | None = None
    raw: bool = False  # raw=on: control characters written as they are where the output is not a terminal
    answered: bool = False  # a task's answer was complete: generation ended there, before n tokens
    cache_off: str | None = None  # why cache=on decoded without the cache (causal=off: the cache is not exact)
    answer: Graded | None = None  # a task: the answer after the question the text starts with, checked
    off_task: str | None = None  # a task: the prompt is no question of it (or lacks its '='), and what one is
    # a task: n ran out before the answer after the question was whole, so it is not graded: how far it got, the fix
    unfinished: str | None = None
    # (greedy after a given prompt a drawn seed decides nothing: its number changed every run and read as one that
    # mattered, so it is null there)
    seed: int | None = None  # the sampling seed: gen_seed, or one drawn for this call; null where no draw decided
    # gen_seed was none: `seed` was drawn here, and seed=SEED gives the same text again (False where the seed decided
    # nothing: greedy text after a given prompt)
    seed_drawn: bool = False
    int8: bool = False  # sampled from the int8 copy (:quantize int8), not the float model
    ablations: list[str] = field(default_factory=list)  # parts :ablate switched off: the text is that model's
    # the text ends inside a character: n (or a stop) came after some of its bytes (a byte-level BPE writes 🐍 as four
    # tokens), and they show as U+FFFD, which read as a bug where nothing said why
    cut_character: bool = field(default=False, metadata={"view_only": True})
    # a � inside the text: byte tokens the model wrote in an order no UTF-8 character has (the note on a cut
    # character above explained only one at the end)
    bad_bytes: bool = field(default=False, metadata={"view_only": True})
    # a task: where the prompt's question is larger than the task's, the line that says where the text ended (an
    # answer of that size's length, not the trained one); None: a question of the task's size or smaller
    other_size: str | None = field(default=None, metadata={"view_only": True})
    max_seq_len: int = 0  # the model's window: it reads at most the last max_seq_len tokens before each new one
    # steps taken with more text before them than the window holds: the model read only its last max_seq_len tokens
    # there, and cache=on refilled its cache at each such step (positions are absolute), saving nothing
    past_window: int = 0
    dropped: int = 0  # tokens cut from the front of a prompt longer than max_seq_len: the model never read them
    # show=probs: what the probabilities are of (the temperature and filters they were taken under), for the legend
    probs_under: str | None = field(default=None, metadata={"view_only": True})


@command("gen", "Generate text from a prompt (in the REPL, a line without ':' is one too).", params=[
    Param("prompt", str, help="text to continue (default: on a task, one of its held-out questions; else a "
                              "newline, or the vocabulary's first character); a text that reads as an option "
                              "(n=5) goes after --",
          positional=True),
    # The sampling seed is `gen_seed` everywhere; in :gen, where no other seed exists, `seed` works too.
    *(param_from_setting(spec, help=f"{spec.help} (default: the {spec.name} setting)",
                         aliases=("seed",) if spec.name == "gen_seed" else spec.aliases,
                         short="n" if spec.name == "n" else None)
      for spec in GenConfig.specs()),
    Param("show", str, default="text", help="probs: colour each token by its probability when picked, at the "
                                            "temperature and filters it was sampled under",
          choices=("text", "probs")),
    Param("raw", bool, default=False,
          help="write control characters (ESC, ...) as they are, when the output is a file or a pipe; "
               "by default, and always in a terminal, they are shown escaped (\\x1b)"),
], aliases=("generate",), takes_plain_text=True, guide="inside-views.md#sampling-the-next-token-step-and-gen",
   topics=SAMPLING_TOPICS, json_version=9)  # fmt: skip
def cmd_gen(session: Session, args: dict, reporter: Reporter) -> GenResult:
    settings = with_given(session.gen_config, args)  # the session's settings, this command's options over them
    given = [k for k, v in args.items() if v is not None]
    sampling_notes(settings, given, session.sampling_model.config.vocab_size, reporter)
    drawn = unseeded = settings.gen_seed is None
    if drawn:  # a fresh seed, kept, so that a text worth keeping can be had again (and a task's question with it)
        settings = settings.replace(gen_seed=drawn_seed())
    tokenizer = session.data.tokenizer
    vocab_size = session.sampling_model.config.vocab_size
    prompt = args["prompt"] or ""
    if prompt == STDIN and syntax() == SHELL:  # `minitf gen -`: the prompt is standard input (`:gen -` continues "-")
        prompt = _stdin_prompt()
    given_prompt = bool(prompt)
    asked = None
    if not given_prompt:
        if syntax() == SHELL and _stdin_waiting():  # `echo TEXT | minitf gen` dropped TEXT without a word
            reporter.notice(f"standard input holds text, which was not read: {cmd('gen', STDIN)} reads the prompt "
                            "from it")
        asked = task_question(session.data, settings.gen_seed)
        prompt = asked or default_prompt(tokenizer)
        # greedy text does not depend on the seed; a task's question drawn for the call does
        drawn = drawn and (_draws(settings, vocab_size) or asked is not None)
    else:
        drawn = drawn and _draws(settings, vocab_size)
    if asked is None and (ignored := seed_ignored(settings, given, vocab_size)) is not None:
        reporter.notice(ignored)  # (a task's question drawn for the call is the seed's, where no prompt was given)
    ids = tokenizer.encode(prompt)
    model = session.sampling_model  # the int8 copy while :quantize int8 is on, else the model
    window = model.config.max_seq_len
    long_prompt_notice(reporter, ids, window, tokenizer.unit)

    from ..core.bpe import decode_after, shown_pieces
    from ..core.generate import cache_exact, generate, steps_past_window

    exact = cache_exact(model)  # causal=off: the cache would not give what the window gives
    done = getattr(session.data, "answer_complete", None)  # a task's answers end (core.data); a corpus has no end
    stream = generate(model, ids, settings, done=done)
    if settings.cache:  # the cached loop's fast path picks its product kernels once: not a first token's latency
        from ..core.fastpath import choose_products

        choose_products(model)
    reporter.on_gen_start(prompt, raw=args["raw"])
    pieces: list[str] = []
    token_texts: list[str] = []
    new_ids: list[int] = []
    held: list[int] = []  # tokens whose text ends in a character the next tokens complete
    before = ids[-HELD_TOKENS:]  # the last tokens written (the prompt's first): the held ones are decoded after them
    stopped = False
    start = time.perf_counter()
    first_token_seconds = None

    bad_bytes = False

    def write(piece: str, tokens: int) -> None:
        pieces.append(piece)
        token_texts.extend([""] * (tokens - 1) + [piece])
        # With show=probs the text is shown once, coloured, at the end: each token's colour is its probability, which
        # core.inside.token_probs works out after the last token (in batches of windows), and the stream of text
        # carries no colour; meanwhile a bar counts the tokens (n=100000 showed a blank screen for seconds)
        if args["show"] != "probs":
            reporter.on_token(piece)
        else:
            reporter.on_progress("generating (show=probs shows the text when it is done)", len(new_ids), settings.n)

    try:
        for token in stream:
            if first_token_seconds is None:
                first_token_seconds = time.perf_counter() - start
            new_ids.append(token)
            held.append(token)
            # A byte-level BPE spreads a character over several tokens (é two bytes, ☃ three); decoded alone each
            # byte reads as U+FFFD, so the tokens are decoded together until the character is whole. They are
            # decoded after the text before them, whose space Llama 2's decoder would drop at a text's start.
            piece = decode_after(tokenizer, before, held)
            if not piece.endswith(UNFINISHED) or len(held) >= HELD_TOKENS:
                # a � the tokens' own text does not hold (a vocabulary may hold the character itself): bytes that no
                # character is made of, which no later token completes
                bad_bytes = bad_bytes or (UNFINISHED in piece and piece.count(UNFINISHED) > "".join(
                    shown_pieces(tokenizer, held)).count(UNFINISHED))
                write(piece, len(held))
                before, held = (before + held)[-HELD_TOKENS:], []
            if reporter.should_stop() and len(new_ids) < settings.n:
                stopped = True
                break
    finally:
        stream.close()
    if held:  # the text ends inside a character: its bytes as they are
        write(decode_after(tokenizer, before, held), len(held))
    cut_character = bool(held)
    seconds = time.perf_counter() - start
    graded, off_task = _checked_answer(session.data, prompt, "".join(pieces), given_prompt)
    unfinished = None if graded is not None or stopped else _unfinished(session.data, prompt, "".join(pieces),
                                                                          settings.n)
    probs = None
    if args["show"] == "probs":
        from ..core.inside import token_probs

        probs = token_probs(model, ids, new_ids, settings)
    return GenResult(
        prompt=prompt,
        text="".join(pieces),
        n_tokens=len(new_ids),
        seconds=seconds,
        tokens_per_second=len(new_ids) / seconds if new_ids and seconds > 0 else None,
        cache=settings.cache and exact,
        stopped=stopped,
        default_prompt=not given_prompt,
        untrained=session.untrained,
        first_token_seconds=first_token_seconds,
        probs=probs,
        token_texts=token_texts if probs is not None else None,
        raw=args["raw"],
        answered=done is not None and not stopped and done(ids + new_ids),
        answer=graded,
        off_task=off_task,
        unfinished=unfinished,
        seed=None if unseeded and not drawn else settings.gen_seed,  # a drawn seed that decided nothing is none
        cut_character=cut_character,
        bad_bytes=bad_bytes,
        seed_drawn=drawn,
        other_size=_other_size(session.data, prompt),
        cache_off=None if exact or not settings.cache else
        "without the causal mask a position's keys and values change as later tokens come, so every step recomputes "
        "the window",
        int8=model is not session.model, ablations=switched_off(session),
        max_seq_len=window, past_window=steps_past_window(len(ids), len(new_ids), window),
        dropped=max(0, len(ids) - window), probs_under=_probs_under(settings) if probs is not None else None,
    )


STDIN = "-"  # `minitf gen -`: the prompt is read from standard input, as `cat -` reads it


def _stdin_prompt() -> str:
    """Standard input, whole, as `minitf gen -`'s prompt (its last newline is the pipe's, not the text's)."""
    if sys.stdin is None or sys.stdin.isatty():
        raise UserError(f"{cmd('gen', STDIN)} reads the prompt from standard input, which is a terminal here: pipe "
                        f"text in (echo TEXT | {cmd('gen', STDIN)}) or give it: {cmd('gen', 'TEXT')}")
    text = sys.stdin.read()
    text = text[:-1] if text.endswith("\n") else text
    if not text:
        raise UserError(f"standard input was empty, so {cmd('gen', STDIN)} had no prompt: pipe text in "
                        f"(echo TEXT | {cmd('gen', STDIN)}) or give it: {cmd('gen', 'TEXT')}")
    return text


def _stdin_waiting() -> bool:
    """Whether standard input is a pipe or a file with text waiting to be read, found without reading it or waiting:
    a terminal, or a pipe inherited from a parent that never writes nor closes it, must not hang `minitf gen`."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return False
        fd = sys.stdin.fileno()
        import stat

        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):  # `minitf gen < notes.txt`: the bytes after where the file is read from
            return os.fstat(fd).st_size > os.lseek(fd, 0, os.SEEK_CUR)
        if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
            return False
        import fcntl
        import termios
        from array import array

        waiting = array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, waiting)  # the bytes a read would return now; it does not block
        return waiting[0] > 0
    except (OSError, ValueError, ImportError, AttributeError):  # no descriptor (a test's stdin), no fcntl (Windows)
        return False


def _probs_under(settings) -> str:
    """What show=probs' colours are the probabilities of: at temperature 1 with no filter the model's own; else those
    the sampler drew from, after the temperature and the filters (a legend at T=0.8 read as the model's own p)."""
    if settings.temperature == 0:
        return "greedy: 1 for the likeliest token, which is always picked"
    filters = [f"{k}={v:g}" for k, v in (("top_k", settings.top_k), ("top_p", settings.top_p)) if v is not None]
    if settings.temperature == 1 and not filters:
        return "at temperature 1, no filter: the model's own"
    return f"at temperature {settings.temperature:g}" + (f", after {' and '.join(filters)}" if filters else "")


def task_question(data, seed: int | None) -> str | None:
    """On a task, where no prompt was given: one of its held-out questions (never drawn for training), a new one
    each time unless gen_seed fixes it; else None (text starts where default_prompt says)."""
    if not hasattr(data, "grade"):  # a task (repeat's random tokens have questions, but no answer to grade)
        return None
    import torch

    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return data.sample_questions("val", 1, generator)[0]


def _checked_answer(data, prompt: str, text: str, given: bool) -> tuple[Graded | None, str | None]:
    """On a task: the answer the prompt and the text hold, checked against the true one; and, for a prompt that
    holds an '=' but no question of the task, what a question looks like (a model never trained on such a text,
    so what it writes there is no answer to anything); for a prompt without '=' after which no whole question
    and answer came, that '=' asks."""
    if not hasattr(data, "grade"):
        return None, None
    graded = data.grade(prompt + text)
    if "=" not in prompt:
        if graded is not None or not given:
            return graded, None
        went = "the model went on with the question" if text else "what the model writes after it goes on with " \
            "the question"  # n=0 wrote nothing to have gone on with
        # its end, where an '=' would be: a 2,000-digit prompt was quoted whole, twenty lines of one message
        return None, (f"{quoted_end(prompt, 40)} has no '=', which ends a question of {data.name}:{data.size} "
                      f"({data.question_form}): {went}; end it with '=' to ask")
    question = data.question_of(prompt)
    if question is not None and len(prompt) - len(question) > data.answer_len:  # more than an answer: not gradable
        return None, (f"{quoted_end(prompt, 40)} holds more than a whole answer ({data.name}'s answers have "
                      f"{count(data.answer_len, 'character')}): nothing is left to grade; give the question alone, "
                      f"e.g. {cmd('gen', question)}")
    if question is not None:
        return graded, None
    asked = prompt.partition("=")[0] + "="
    size = data.size_of(asked)
    # from the shell a switch of data goes with the train that reads it (`--load add2 --data add:3` was refused:
    # the checkpoint brings its data)
    switch = (cmd("data", f"{data.name}:{size}") if syntax() != SHELL
              else given_before("train", "--data", f"{data.name}:{size}"))
    fix = f"; {switch} trains on questions like it" if size not in (None, data.size) else ""
    return None, (f"{quoted(asked)} is no question of {data.name}:{data.size}, whose questions are "
                  f"{data.question_form}: what the model wrote is not graded{fix}")  # not "never saw": it may have,
    # under another size of the task (trained on reverse:3, then :data reverse:5)


def _other_size(data, prompt: str) -> str | None:
    """On a task, where the prompt's question is larger than the task's: what the text's end is (an answer of that
    size's length, which the model never trained to write; Task.answer_complete); None elsewhere (a smaller question
    ends at the trained length, which the model writes its answer in)."""
    if not hasattr(data, "answer_len_at") or "=" not in prompt:
        return None
    size = data.size_of(prompt.partition("=")[0] + "=")
    if size is None or size <= data.size:
        return None
    return (f"the question is longer than {data.name}:{data.size}'s: the text goes on to the "
            f"{count(data.answer_len_at(size), 'character')} an answer of its size ({data.name}:{size}) has, not the "
            f"{data.answer_len} the model was trained to write")


def _unfinished(data, prompt: str, text: str, n: int) -> str | None:
    """On a task, where the text starts with one of its questions and n ran out before a whole answer followed it:
    why nothing is graded, and the n that would let the model finish (None elsewhere)."""
    question = data.question_of(prompt) if hasattr(data, "grade") else None
    if question is None:
        return None
    written = len(prompt) + len(text) - len(question)  # a task reads characters: one token each
    if written >= data.answer_len:
        return None
    need = n + data.answer_len - written
    return (f"n={n} ended the text {count(written, 'character')} into the answer ({data.name}'s answers have "
            f"{count(data.answer_len, 'character')}): nothing to grade; {cmd('gen', prompt, n=need)} lets the "
            "model finish it")


def answer_line(graded: Graded, given: int = 0, untrained: bool = False) -> str:
    """Right or wrong, against the true answer, and whether the model could have seen the question in training.
    `given`: the answer's first characters that the prompt held, typed, not written by the model. `untrained`: no
    step yet, so it saw no question (a training question "the model may have seen", beside "not trained yet")."""
    seen = ("a training question, though the model has trained on none yet" if not graded.held_out and untrained
            else "a training question: the model may have seen it" if not graded.held_out else
            # its twin (b+a= on add, the same digits reordered on sort), where this question's is a training question
            # of the same answer (Task.trained_twin): a right answer may be that one's, remembered
            f"a held-out question: never drawn for training; {graded.twins}" if graded.twins else
            "a held-out question: never drawn for training" + (", so this is generalisation" if graded.right else ""))
    typed = ""
    if 0 < given < len(graded.expected):  # a whole answer typed is said by its own note: the model wrote none of it
        own = sum(a == b for a, b in zip(graded.written[given:], graded.expected[given:]))
        typed = (f"; the prompt gave the first {count(given, 'character')}, the model wrote the other "
                 f"{len(graded.expected) - given} and got {own} right")
    if graded.right:
        return f"right: {graded.question}{graded.expected} ({seen}{typed})"
    return (f"wrong: {graded.question}{visible(graded.written)}, the answer is {graded.expected} "
            f"({graded.digits_right} of {count(len(graded.expected), 'character')} right{typed}; {seen})")


def gen_stats(result: GenResult) -> str:
    """The speed line: tokens, seconds, tokens/s, the cache, the time to the first token, a seed drawn for it."""
    rate = f"{result.tokens_per_second:,.0f} tokens/s" if result.tokens_per_second else "- tokens/s"
    text = f"{count(result.n_tokens, 'token')} in {result.seconds:.2f} s, {rate}, cache {'on' if result.cache else 'off'}"
    if result.first_token_seconds is not None and result.n_tokens > 1:
        text += f", first token after {result.first_token_seconds * 1000:.0f} ms"
    # the same prompt and settings with this seed give the text again (n=0 on a task: the question it drew)
    if result.seed_drawn and (result.n_tokens or result.default_prompt):
        text += f", drawn seed {result.seed}"
    return text + (" (stopped)" if result.stopped else "")


# a pick's probability at least this is 1 but for rounding: an AMD Zen 3's kernels gave 1 - 9e-16 where other CPUs give
# 1 (a logit ~35 above the rest is already 1 - 1e-15; the note below is for logits thousands apart)
CERTAIN = 1 - 1e-12


def gen_notes(result: GenResult, console: Console) -> None:
    """What a reader needs to make sense of generated text: the default prompt, whitespace, no training."""
    asked = result.answer.question == result.prompt if result.answer is not None else result.unfinished is not None
    if result.default_prompt and asked:
        note(console, f"no prompt given: asked {result.prompt}, one of the task's held-out questions (a new one each "
                      f"time unless gen_seed is set; {cmd('gen', 'QUESTION')} asks your own)")
    elif result.default_prompt:
        note(console, f"no prompt given: started from {quoted(result.prompt)}")
    if result.probs and all(p >= CERTAIN for p in result.probs):  # the colours say nothing of the model here
        # the settings leave one token, or the model does: one trained at lr=30 puts all but e^-1000 on its guess (or,
        # on a CPU whose kernels round otherwise, 1 - 9e-16: the same model, and the same one colour)
        note(console, "every token had probability 1 when picked: one token was left to pick at each step, by the "
                      "sampling settings (temperature 0, top_k=1 or a tiny top_p) or by a model whose logits are "
                      "thousands apart; with temperature=1 top_k=none top_p=none the colours are the model's own "
                      "probabilities")
    if (blank := only_whitespace(result.text)) is not None:
        say(console, blank, "yellow")
    if result.bad_bytes:
        note(console, "each � inside the text stands for byte tokens that form no character: a byte-level BPE writes a "
                      "character as 1 to 4 byte tokens, and the model put together bytes no UTF-8 character is made "
                      "of (more training makes that rarer)")
    if result.cut_character:
        note(console, f"the text ends inside a character: a byte-level BPE writes one as 1 to 4 byte tokens, and "
                      f"{'the stop' if result.stopped else 'n'} came after some of its bytes, which show as �; a "
                      "larger n writes it whole")
    if result.answered:  # off the task (`56+4=1234` on add:2) no answer is there: what is, is an answer's length
        whole = ("the prompt already has at least an answer's length after its first '=': nothing to add"
                 if result.off_task else "the prompt already holds a whole answer: nothing to add")
        note(console, whole if not result.n_tokens else result.other_size if result.other_size else
                      "stopped at the end of the answer (a task's answers have a fixed length)")
    if result.answer is not None:
        given = len(result.prompt) - len(result.answer.question)  # answer characters typed in the prompt
        say(console, answer_line(result.answer, given, result.untrained), "green" if result.answer.right else "red")
    if result.off_task:
        say(console, result.off_task, "yellow")
    if result.unfinished:
        say(console, result.unfinished, "yellow")
    if result.untrained:
        note(console, f"this model has not trained yet, so its text is random: {train_first('gen', AUTOSAVE_NAME)}")
    if result.cache_off:
        note(console, f"no KV cache: {result.cache_off}")
    if result.past_window:
        note(console, past_window_line(result))
    if result.int8:  # said where :quantize int8 was typed, and easily forgotten since
        note(console, f"sampled from the int8 copy ({cmd('quantize', 'off')} goes back to the float model)")
    ablation_note(console, result.ablations)
    note(console, gen_stats(result))


def past_window_line(result: GenResult) -> str:
    """What happened once the text outgrew the window, which the speed line's "cache on" said nothing of: the model
    read only the window's end, and the cache, whose keys hold absolute positions, was filled again at each step."""
    W = result.max_seq_len
    steps = ("every step" if result.past_window == result.n_tokens else
             f"{result.past_window} of {count(result.n_tokens, 'step')}")
    line = f"past max_seq_len={W} the model reads only the last {W} tokens: {steps}"
    if not result.cache:
        return line + " read a window that had slid on"
    # :kv of the same prompt, far enough to show the first slides
    from .base import REGISTRY

    steps = min(result.n_tokens, result.n_tokens - result.past_window + 4, REGISTRY["kv"].param_named("n").limit)
    kv = cmd("kv", typeable_prompt(result.prompt), n=steps) if typeable_prompt(result.prompt) else cmd("kv", n=steps)
    return (line + " refilled the KV cache from them (positions are absolute), so cache=off costs the same there "
            f"({kv} shows it step by step)")


def only_whitespace(text: str) -> str | None:
    """The line that says a generated text is whitespace alone, which a terminal shows as nothing (the model seemed
    to have written nothing); None for any other text."""
    if not text or text.strip():
        return None
    counts = ", ".join(count(text.count(ch), name) for ch, name in
                       ((" ", "space"), ("\n", "newline"), ("\t", "tab")) if ch in text)
    # the first 80 drawn, and an ellipsis where more follow (200 spaces drew 80 with nothing said of the rest)
    return f"only whitespace was generated ({counts}): {visible(text[:80])}{'…' if len(text) > 80 else ''}"


@render.register(GenResult)
def render_gen(result: GenResult, console: Console) -> None:
    gen_text(result, console)
    gen_notes(result, console)


@text_apart.register(GenResult)
def gen_text(result: GenResult, console: Console) -> bool:
    """The text alone (each character shaded by its probability with show=probs); gen_notes says the rest."""
    if result.probs:
        render_probs(result, console)
    elif writes_raw(console, result.raw):
        write_raw(console, result.prompt + result.text + "\n")
    else:
        say(console, model_text(result.prompt, console, "bold") + model_text(result.text, console))
    return True


@after_stream.register(GenResult)
def gen_after_stream(result: GenResult, console: Console) -> None:
    """The text was streamed as it was sampled: only the notes are left to show."""
    gen_notes(result, console)


def char_probs(result: GenResult) -> list[float]:
    """Each generated character's probability when picked: its token's. A token of several characters (a BPE's
    "the") gives them all its probability; a character spread over several tokens (a byte-level BPE's é), the
    product of theirs: the chance of picking all of them."""
    texts, probs = result.token_texts or [], result.probs or []
    if len(texts) != len(probs):
        return []
    shown: list[float] = []
    joint = 1.0
    for text, p in zip(texts, probs):
        joint *= p
        if text:
            shown.extend([joint] * len(text))
            joint = 1.0
    return shown


def render_probs(result: GenResult, console: Console) -> None:
    """The generated text, each character coloured (or shaded beneath) by its probability when picked."""
    as_text = unscaled(console)
    probs = char_probs(result)
    chars = list(result.text)
    if len(chars) != len(probs):  # a result cut by hand (its texts lost): show the text plainly
        say(console, model_text(result.prompt, console, "bold") + model_text(result.text, console))
        return
    if not as_text:
        text = model_text(result.prompt, console, "bold")
        for ch, p in zip(chars, probs):
            if ch == "\n":
                text.append_text(cell(p, 1, False, "↵"))
                text.append("\n")
            else:
                text.append_text(cell(p, len(terminal_safe(ch)), False, terminal_safe(ch)))
        say(console, text)
    else:
        # Two rows per line, the shades under their characters. Whitespace shows as a symbol here
        # (␣ ↵ ⇥), so the rows are cut by hand: after the last whitespace that fits, like say().
        width = max(10, console.width)
        text = result.prompt + result.text
        shown = [visible(c) for c in text]
        # each shade as wide as its character (2 columns under 日), so that it stays under it
        shades = [(" " if p is None else shade(p)).ljust(cell_len(c))
                  for c, p in zip(shown, [None] * len(result.prompt) + probs)]
        at = 0
        while at < len(shown):
            end, used = at, 0
            while end < len(shown) and (used + cell_len(shown[end]) <= width or end == at):
                used += cell_len(shown[end])
                end += 1
            if end < len(shown):
                spaces = [i + 1 for i in range(at, end) if text[i].isspace()]
                end = spaces[-1] if spaces else end
            console.print(Text("".join(shown[at:end])), highlight=False, no_wrap=True, overflow="ignore")
            console.print(Text("".join(shades[at:end]), style="dim"), highlight=False,
                          no_wrap=True, overflow="ignore")
            at = end
    under = f" ({result.probs_under})" if result.probs_under else ""
    console.print(legend(1.0, as_text, f"probability when picked{under}", console.width), highlight=False)


# --- :step ---------------------------------------------------------------------------------------
STEP_ROWS = 10  # candidates :step lists at each step unless rows= says otherwise
STEP_LIMIT = 256  # :step n= at most: each step reads the whole window again through the readable model
@dataclass
class StepRow:
    id: int  # the token's id
    token: str  # the token as it reads alone (a byte of a character it does not complete as its escape, \\xe2)
    logit: float  # z: the model's logit for it, before the temperature
    scaled: float | None  # (z - max z) / temperature; None when greedy (temperature 0)
    # not cut by top-k: every token where top_k is off (None) or at least vocab_size; at temperature 0 the argmax alone
    top_k_kept: bool
    kept: bool  # survived top-k and top-p: can be picked
    prob: float  # renormalised: the probability of being picked
    picked: bool  # this is the token picked (one row is)


@dataclass
class StepOn:
    """A later step of `:step n=K`: the tokens picked before it fed back in, one more picked."""

    rows: list[StepRow]  # the highest logits, best first (the pick is added if it ranks lower)
    picked: str  # the token picked, as it reads alone
    picked_id: int  # its id
    picked_prob: float  # its probability of being picked (after the filters, renormalised); 1 at temperature 0
    picked_rank: int  # 1 = the highest logit
    n_kept: int  # survivors of both filters
    n_possible: int  # of those, the ones whose probability is above 0


@dataclass
class StepResult:
    # the text continued, as given (the model reads its last max_seq_len tokens); if none was given: a sample of the
    # data
    prompt: str
    temperature: float  # T, which divides the logits; 0: greedy, the argmax is picked and top_k, top_p are not applied
    top_k: int | None  # k: only the k highest logits may be picked; None: off
    # p: only the fewest likeliest tokens whose summed probability (after top-k) reaches p may be picked (nucleus);
    # None: off
    top_p: float | None
    # (at temperature 0 the argmax is the pick and no draw is made: a seed drawn for nothing read as one that mattered)
    seed: int | None  # the generator's seed (`:gen PROMPT n=1 seed=SEED` picks the same token); null at temperature 0
    rows: list[StepRow]  # the highest logits, best first (the pick is added if it ranks lower)
    vocab_size: int  # V: tokens in the vocabulary, the pick's candidates
    n_top_k_kept: int  # tokens top-k keeps: min(top_k, vocab_size); vocab_size where top_k is off; 1 at temperature 0
    n_kept: int  # survivors of both filters
    picked: str  # the token picked, as it reads alone (a byte of a character it does not complete as its escape, \\xe2)
    picked_id: int  # its id
    picked_prob: float  # its probability of being picked (after the filters, renormalised); 1 at temperature 0
    picked_rank: int  # 1 = the highest logit
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    int8: bool = False  # read from the int8 copy that :gen samples from (:quantize int8)
    # of the n_kept, those whose probability is above 0: fewer where a tiny temperature leaves the others at exactly 0
    # (T=1e-300 kept all 103 of pydoc through the filters, and one could be picked)
    n_possible: int = 0
    untrained: bool = False  # the model has not trained a step: its logits are near equal, every probability near 1/V
    # n=K: the K-1 steps after the first, each after the picks before it, as `:gen PROMPT n=K seed=SEED` takes them
    then: list[StepOn] = field(default_factory=list)
    asked: int = 1  # the steps asked for (n): more than 1 + len(then) where a Ctrl-C stopped it


SAMPLING = ("temperature", "top_k", "top_p", "gen_seed")  # the generation settings :step takes


@command("step", "Pick the next token and show each stage: logits, temperature, top-k/top-p, probabilities "
                 "(n=K: K tokens, one after another).",
         params=[Param("prompt", str, help=f"text to continue {VIEW_DEFAULT}", positional=True),
                 *(param_from_setting(spec, help=f"{spec.help} (default: the {spec.name} setting)",
                                      aliases=("seed",) if spec.name == "gen_seed" else spec.aliases)
                   for spec in GenConfig.specs() if spec.name in SAMPLING),
                 Param("n", int, help="tokens to pick one after another, each fed back in as :gen does (default 1)",
                       low=1, limit=STEP_LIMIT, short="n"),
                 Param("rows", int, help=f"candidates listed at each step, best first (default {STEP_ROWS}; the pick "
                                         "is added where it ranks lower)", low=1, limit=100_000)],
         # no options of :step, each a setting that does nothing to its pick (`minitf step cache=off` was told to
         # give it with --set, which showed the same step)
         elsewhere={"cache": lambda: f"the KV cache changes no pick, only its speed: each {named('step')} reads the "
                                     f"window afresh; {cmd('kv')} shows what the cache does"},
         guide="inside-views.md#sampling-the-next-token-step-and-gen",
         topics=SAMPLING_TOPICS, json_version=6)  # fmt: skip
def cmd_step(session: Session, args: dict, reporter: Reporter) -> StepResult:
    settings = with_given(session.gen_config, args)
    data = session.data
    vocab_size = data.tokenizer.vocab_size
    given = [k for k, v in args.items() if v is not None]
    sampling_notes(settings, given, vocab_size, reporter)
    prompt = args["prompt"] or sample_prompt(data)
    ids = data.tokenizer.encode(prompt)  # the whole prompt: the loop reads its last window, as generate does
    long_prompt_notice(reporter, ids, session.model_config.max_seq_len, data.tokenizer.unit)
    seed = settings.gen_seed if settings.gen_seed is not None else drawn_seed()  # as :gen draws
    if (ignored := seed_ignored(settings, given, vocab_size)) is not None:
        reporter.notice(ignored)
    asked = args["n"] or 1
    top = min(args["rows"] or STEP_ROWS, vocab_size)
    model = session.sampling_model  # what :gen samples from: the int8 copy while :quantize int8 is on

    import torch

    from ..core.bpe import shown_piece
    from ..core.generate import generate

    def name(i: int) -> str:  # a byte of a longer character as its escape (\xe4), as :tok shows it, not "�"
        return shown_piece(data.tokenizer, i)

    stages = []
    # :gen's own loop under the same seed, so `:gen PROMPT n=K seed=SEED` picks the same tokens; cache=off: each step
    # runs the readable model on the window, whose logits the table shows (the cache's agree to rounding: :kv)
    picks = generate(model, ids, settings.replace(n=asked, gen_seed=seed, cache=False), on_pick=stages.append)
    steps = []
    try:
        for picked in picks:
            s = stages[-1]
            order = torch.argsort(s.logits, descending=True, stable=True)  # (V,) best first
            shown = order[:top].tolist()
            shown += [] if picked in shown else [picked]  # a low-ranked pick still gets its row
            rows = [StepRow(i, name(i), float(s.logits[i]), None if s.scaled is None else float(s.scaled[i]),
                            bool(s.top_k_kept[i]), bool(s.top_p_kept[i]), float(s.probs[i]), i == picked)
                    for i in shown]
            steps.append(StepOn(rows, name(picked), picked, float(s.probs[picked]),
                                int((order == picked).nonzero()[0, 0]) + 1, int(s.top_p_kept.sum()),
                                int((s.probs > 0).sum())))
            if reporter.should_stop() and len(steps) < asked:
                break
    finally:
        picks.close()
    first = steps[0]
    return StepResult(
        prompt=prompt, temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p,
        seed=None if settings.temperature == 0 else seed,
        rows=first.rows, vocab_size=vocab_size, n_top_k_kept=int(stages[0].top_k_kept.sum()), n_kept=first.n_kept,
        picked=first.picked, picked_id=first.picked_id, picked_prob=first.picked_prob, picked_rank=first.picked_rank,
        ablations=switched_off(session), int8=model is not session.model, n_possible=first.n_possible,
        untrained=session.untrained, then=steps[1:], asked=asked,
    )


def prob_text(p: float) -> str:
    """A probability to 3 decimals, or, below what they show, to 2 significant digits: over an 8,000-token vocabulary
    the token picked had "probability 0.000". Three decimals from 0.00095 on, where they round to 0.001 or more: a
    p of 0.000556 read "0.001" beside its -ln p of 7.494 (-ln 0.001 is 6.9)."""
    if p <= 0:
        return "0"
    return f"{p:.3f}" if p >= 0.00095 else f"{p:.1e}"


def _step_table(result: StepResult, console: Console, greedy: bool, as_text: bool, dropped: set[str]) -> Table:
    """:step's rows, one a token: its logit, scaled logit, the filters' verdicts, probability and bar; `dropped` names
    the columns left out ("bar", "filters", "scaled") and "stacked" for headers of a line per word."""
    table = Table(header_style="bold", box=None if console.width < NARROW else box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding="tight" in dropped)

    def header(name: str) -> str:
        return "\n".join(name.split()) if "stacked" in dropped else name

    table.add_column("", no_wrap=True)
    table.add_column("token", no_wrap=True)
    table.add_column(header("logit z"), justify="right")
    if "scaled" not in dropped:
        table.add_column(header(f"/ T={result.temperature:g}") if result.temperature else "greedy", justify="right")
    if "filters" not in dropped:
        table.add_column(header(f"top-k {result.top_k}" if result.top_k is not None and not greedy else "top-k"),
                         justify="center")
        table.add_column(header(f"top-p {result.top_p:g}" if result.top_p is not None and not greedy else "top-p"),
                         justify="center")
    table.add_column("prob" if "tight" in dropped else "probability", justify="right")
    if "bar" not in dropped:
        table.add_column("", no_wrap=True)  # the bar, left-aligned so that the numbers line up
    for r in result.rows:
        # a filter that is off keeps every token: "kept" on each row read as a filter that had run
        kept_k = "-" if greedy else "off" if result.top_k is None else "kept" if r.top_k_kept else "cut"
        kept_p = ("-" if greedy or not r.top_k_kept else "off" if result.top_p is None else
                  "kept" if r.kept else "cut")
        scaled = "-" if r.scaled is None else ("-inf" if not math.isfinite(r.scaled) else _number(r.scaled))
        prob = prob_text(r.prob)
        bar = Text()
        if r.prob > 0:
            bar.append(chart.bar(r.prob, 10), style="green" if not as_text else "")
        # Character by character: a subword piece's whitespace shows as a symbol (" the" as "␣the", not an
        # indented "the"), a control character as its escape (visible; repr doubled a byte's "\xe4" to "\\xe4")
        token = piece_cell(visible(r.token))
        cells = ["→" if r.picked else "", token, f"{r.logit:.3f}"]
        cells += [] if "scaled" in dropped else [scaled]
        cells += [] if "filters" in dropped else [Text(kept_k, style="" if r.top_k_kept else "dim"),
                                                  Text(kept_p, style="" if r.kept else "dim")]
        cells += [Text(prob)] + ([] if "bar" in dropped else [bar])
        add_row(table, *cells, style="bold reverse" if r.picked and not as_text else ("dim" if not r.kept else None))
    return table


def _number(value: float) -> str:
    """A logit divided by T, in three decimals where they say it: past 1e5 (T=1e-30 gave 31-digit cells that pushed
    the top-k and top-p columns off the table) or under 5e-4 (T=1e30 showed every token at "-0.000") in powers of 10,
    as the probabilities beside it are."""
    return f"{value:.3f}" if value == 0 or 5e-4 <= abs(value) < 1e5 else f"{value:.2e}"


def _stage_header(result: StepResult) -> str:
    """The stages in the order core.generate.sampling_stages runs them: the softmax named where it is (a step without
    filters had "renormalise" and no softmax, with nothing to renormalise), top-k before it, top-p after it."""
    parts = ["logits z"]
    if result.temperature == 0:
        parts.append("greedy (temperature 0)")
    else:
        parts.append(f"/ temperature {result.temperature:g}")
        if result.top_k is not None:
            parts.append(f"top-k {result.top_k}")
        parts.append("softmax")
        if result.top_p is not None:
            parts += [f"top-p {result.top_p:g}", "renormalise"]
    return " -> ".join(parts + ["pick"])


@render.register(StepResult)
def render_step(result: StepResult, console: Console) -> None:
    as_text = plain(console)
    say(console, f"next token after {quoted_end(result.prompt, 40)}", "bold")
    if result.int8:
        note(console, f"the int8 copy {cmd('gen')} samples from ({cmd('quantize', 'off')} goes back to the float "
                      "model)")
    note(console, _stage_header(result))
    greedy = result.temperature == 0  # the argmax alone: top-k and top-p are not applied (core.generate)
    # 40-odd columns: the bars go first, then the filters' kept/cut (a cut token's probability is 0), then the scaled
    # logits (the note under the table says how they are made), then the headers take a line per word
    dropped: set[str] = set()
    # 20 columns: "prob" over the probabilities, and a single space between the columns ("0.…" in each cell before)
    for drop in (None, "bar", "filters", "scaled", "stacked", "tight"):
        dropped |= {drop} if drop else set()
        table = _step_table(result, console, greedy, as_text, dropped)
        if fits(console, table):
            break
    gone = dropped - {"stacked", "tight"}
    console.print(table)
    if "filters" in gone and not greedy and (result.top_k is not None or result.top_p is not None):
        note(console, "not shown at this width: which tokens top-k and top-p cut (a cut token's probability is 0)")
    if not greedy:
        T = f"{result.temperature:g}"
        note(console, f"/ T={T}: (z - max z) / {T}, shifted so that the largest is 0 (softmax does not change under "
                      "a shift)" + ("; not shown at this width" if "scaled" in gone else ""))
    shown = "" if result.picked_rank <= len(result.rows) else " (listed last)"
    say(console, f"picked {quoted(result.picked)} (id {result.picked_id}): probability "
                 f"{prob_text(result.picked_prob)}, rank {result.picked_rank:,} of {result.vocab_size:,}{shown}",
        "green")
    if result.then:
        render_later_steps(result, console, greedy)
    # every choice that decides the pick, as :step made it; greedy, the pick is the argmax and no seed decides it
    chosen = dict(temperature=0) if greedy else dict(temperature=result.temperature, top_k=result.top_k,
                                                     top_p=result.top_p, seed=result.seed)
    steps = 1 + len(result.then)
    same = cmd("gen", typeable_prompt(result.prompt) or "PROMPT", n=steps, **chosen)
    drawn = "greedy, no seed decides it" if greedy else f"seed {result.seed}"
    underflow = (f" ({result.n_kept:,} pass the filters, but the others' probability is 0 at T={result.temperature:g}: "
                 "e^((z - max z) / T) is too small for a float)" if result.n_possible < result.n_kept else "")
    picks = "picks the same" if steps == 1 else "picks the same tokens"
    first = "" if steps == 1 else "at the first step "
    note(console, f"{first}{result.n_possible:,} of {result.vocab_size:,} tokens could be picked{underflow}; {drawn} "
                  f"({same} {picks})")
    if steps < result.asked:
        say(console, f"stopped after {steps} of the {count(result.asked, 'step')} asked for", "yellow")
    elif steps == 1:  # where to go next: more steps, more candidates, and the cache that makes :gen fast
        note(console, f"{cmd('step', 'TEXT', n=5)} picks 5 tokens one after another, {option('rows', 30)} lists more "
                      f"candidates; {cmd('kv')} shows how {named('gen')}'s KV cache saves recomputing the text")
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: its logits are near equal, every probability near 1/V; "
                      f"{look_again('step', AUTOSAVE_NAME, result.prompt)}")


def render_later_steps(result: StepResult, console: Console, greedy: bool) -> None:
    """`:step n=K`'s steps after the first: a line each for the pick, and one for the candidates it was drawn from."""
    say(console, "then, each pick fed back in, as :gen does (candidates best first, each with its "
                 + ("logit z: greedy picks the largest" if greedy else "probability of being picked") + "):")
    text = result.picked
    for t, s in enumerate(result.then, 2):
        say(console, f"{t}. after {quoted_end(result.prompt + text, 24)}: picked {quoted(s.picked)}, probability "
                     f"{prob_text(s.picked_prob)}, rank {s.picked_rank:,}", indent=2, hang=3)
        candidates = " · ".join(f"{piece_cell(visible(r.token))} {r.logit:.2f}" if greedy else
                                f"{piece_cell(visible(r.token))} {prob_text(r.prob)}" for r in s.rows)
        say(console, candidates, "dim", indent=5)
        text += s.picked
