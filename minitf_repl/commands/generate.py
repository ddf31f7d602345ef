"""`:gen`: the model continues a prompt (in the REPL, a line without ':' is one too).

Tokens stream through the reporter as they are sampled (core.generate); Ctrl-C stops after the
current token. With show=probs the text is shown once, at the end, each token coloured by the
probability it had when it was picked (core.inside.token_probs).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from ..core.config import GenConfig
from ..core.words import count, quoted_end
from ..palette import quoted, shade, terminal_safe, visible
from ..registry import Param, param_from_setting
from ..render.heatmap import cell, legend, unscaled
from ..render.renderers import after_stream, render, text_apart
from ..render.words import model_text, note, say, write_raw, writes_raw
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import SHELL, cmd, given_before, syntax, train_first
from .base import (ablation_note, command, default_prompt, long_prompt_notice, sampling_notes, switched_off,
                   with_given)

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.data import Graded

FAMILY = "generating"  # the heading :help lists this module's commands under
DRAWN_SEEDS = (100_000, 1_000_000)  # a seed drawn for a :gen without gen_seed: six digits, easily typed


def _draws(settings) -> bool:
    """Whether the sampling seed decides a token: not at n=0 (--json said seed_drawn for a seed that drew nothing),
    temperature 0 or top_k=1 (exactly one token left: the likeliest, as greedy takes it)."""
    return settings.n > 0 and settings.temperature > 0 and settings.top_k != 1


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
    Param("show", str, help="probs: colour each token by its probability when picked (default text)",
          choices=("text", "probs")),
    Param("raw", bool, default=False,
          help="write control characters (ESC, ...) as they are, when the output is a file or a pipe; "
               "by default, and always in a terminal, they are shown escaped (\\x1b)"),
], aliases=("generate",), takes_plain_text=True, json_version=8)  # fmt: skip
def cmd_gen(session: Session, args: dict, reporter: Reporter) -> GenResult:
    settings = with_given(session.gen_config, args)  # the session's settings, this command's options over them
    given = [k for k, v in args.items() if v is not None]
    sampling_notes(settings, given, session.sampling_model.config.vocab_size, reporter)
    drawn = unseeded = settings.gen_seed is None
    if drawn:  # a fresh seed, kept, so that a text worth keeping can be had again (and a task's question with it)
        settings = settings.replace(gen_seed=drawn_seed())
    tokenizer = session.data.tokenizer
    prompt = args["prompt"] or ""
    given_prompt = bool(prompt)
    if not given_prompt:
        asked = task_question(session.data, settings.gen_seed)
        prompt = asked or default_prompt(tokenizer)
        # greedy text does not depend on the seed; a task's question drawn for the call does
        drawn = drawn and (_draws(settings) or asked is not None)
    else:
        drawn = drawn and _draws(settings)
    ids = tokenizer.encode(prompt)
    model = session.sampling_model  # the int8 copy while :quantize int8 is on, else the model
    window = model.config.max_seq_len
    long_prompt_notice(reporter, ids, window, tokenizer.unit)

    from ..core.bpe import decode_after, shown_pieces
    from ..core.generate import cache_exact, generate

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
        if args["show"] != "probs":  # with show=probs the text is shown once, coloured, at the end
            reporter.on_token(piece)

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
    )


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


def gen_notes(result: GenResult, console: Console) -> None:
    """What a reader needs to make sense of generated text: the default prompt, whitespace, no training."""
    asked = result.answer.question == result.prompt if result.answer is not None else result.unfinished is not None
    if result.default_prompt and asked:
        note(console, f"no prompt given: asked {result.prompt}, one of the task's held-out questions (a new one each "
                      f"time unless gen_seed is set; {cmd('gen', 'QUESTION')} asks your own)")
    elif result.default_prompt:
        note(console, f"no prompt given: started from {quoted(result.prompt)}")
    if result.probs and all(p == 1.0 for p in result.probs):  # the colours say nothing of the model here
        # the settings leave one token, or the model does: one trained at lr=30 puts all but e^-1000 on its guess
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
    if result.int8:  # said where :quantize int8 was typed, and easily forgotten since
        note(console, f"sampled from the int8 copy ({cmd('quantize', 'off')} goes back to the float model)")
    ablation_note(console, result.ablations)
    note(console, gen_stats(result))


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
    console.print(legend(1.0, as_text, "probability when picked", console.width), highlight=False)
