"""What every command family shares: the registry and its decorator, the completers, the default prompts.

A command is registered with `@command(name, summary, params=[...], **flags)` into `REGISTRY`,
with everything the front ends need to know about it declared there (registry.Command). A
completer is a function of the session that lists what Tab offers for an option's value.

The prompts a command uses when the user gives none are decided here, once each:
`default_prompt` is where `:gen` (and what samples like it: `:quantize`, `:report`) starts, and
`sample_prompt` the short typical input the views read (`:shapes`, `:attn`, `:lens`, `:ablate`).
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import shutil
import sys
from pathlib import Path

from rich.console import Console

from ..core.catalog import CORPORA, TASKS
from ..core.errors import UserError
from ..core.words import count
from ..parsing import CLEAR
from ..registry import Param, Registry, clip
from ..render.words import note
from ..syntax import PromptText, cmd

REGISTRY = Registry()
command = REGISTRY.command


# --- what completes an option's value (declared on the Param, called by the REPL's completer) -------
DATA_NAMES = CORPORA + TASKS  # core.catalog: known without importing core.data (torch)


def complete_data(session) -> list[str]:
    return list(DATA_NAMES)


def complete_device(session) -> list[str]:
    """What Tab offers for a device: auto, cpu and the GPUs this machine has (cuda and mps everywhere sent a user to
    a device that then said it is not here). Where torch is loaded (the REPL) it is asked; the shell's Tab runs
    without torch, which takes seconds to load, and offers a GPU whose driver it sees."""
    if "torch" in sys.modules:
        from ..core.device import available_device_names

        here = available_device_names()
        cuda = [name for name in here if name.startswith("cuda")]
        return ["auto", "cpu", *(["cuda"] if cuda else []), *(cuda if len(cuda) > 1 else []),
                *(["mps"] if "mps" in here else [])]
    return ["auto", "cpu", *gpus_seen_without_torch()]


def gpus_seen_without_torch() -> list[str]:
    """The GPU kinds this machine shows without asking torch: NVIDIA's driver (its /proc folder, or nvidia-smi, which
    it installs on Windows too), and Apple silicon, whose GPU every arm64 Mac has."""
    kinds = []
    if os.path.isdir("/proc/driver/nvidia") or shutil.which("nvidia-smi"):
        kinds.append("cuda")
    if sys.platform == "darwin" and platform.machine() == "arm64":
        kinds.append("mps")
    return kinds


def complete_command(session) -> list[str]:
    return sorted(REGISTRY)


# core.checkpoint.layout.NAME, which Tab cannot import (torch comes with it); tests/test_sweep_x.py keeps them equal.
CHECKPOINT_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}$")
MANIFEST = "checkpoint.json"  # core.checkpoint.layout.MANIFEST


def complete_checkpoint(session) -> list[str]:
    """The checkpoints Tab offers: folders with a manifest under a name :load takes. A folder renamed by hand
    ("my model") completed to a line :load refused, and any other folder there (an export, a copy's leftovers) to
    one that is no checkpoint."""
    try:
        folder = Path(session.checkpoint_dir)
        return sorted(p.name for p in folder.iterdir()
                      if CHECKPOINT_NAME.match(p.name) and p.is_dir() and (p / MANIFEST).exists())
    except (OSError, AttributeError, TypeError):
        return []


def complete_layer(session) -> list[str]:
    try:
        return [str(i) for i in range(session.model_config.n_layers)]
    except AttributeError:
        return []


def complete_head_number(session) -> list[str]:
    try:
        return [str(i) for i in range(session.model_config.n_heads)]
    except AttributeError:
        return []


def complete_head(session) -> list[str]:
    return ["all"] + complete_head_number(session)


# --- settings given to one command -------------------------------------------------------------------
def with_given(config, args: dict):
    """`config` with the options of `args` that name its settings and were given (`none` clears one)."""
    names = {spec.name for spec in config.specs()}
    given = {k: (None if v is CLEAR else v) for k, v in args.items() if k in names and v is not None}
    return config.replace(**given) if given else config


def greedy_ignores(sampling, given) -> str | None:
    """The notice for top_k or top_p that greedy sampling leaves unread (temperature=0 takes the likeliest token, which
    a filter of the likeliest ones keeps), where `given` (the names a command set) touches one of the three."""
    cut = [k for k in ("top_k", "top_p") if getattr(sampling, k) is not None]
    if sampling.temperature != 0 or not cut or not {"temperature", "top_k", "top_p"} & set(given):
        return None
    return (f"temperature=0 is greedy, the likeliest token every time: {' and '.join(cut)} "
            f"{'does' if len(cut) == 1 else 'do'} nothing until temperature > 0")


def top_k_keeps_all(sampling, given, vocab_size: int) -> str | None:
    """The notice for a top_k the vocabulary is not larger than (it keeps every token: no filter at all), where
    `given` (the names a command set) holds top_k."""
    if "top_k" not in given or sampling.top_k is None or sampling.top_k < vocab_size:
        return None
    return (f"top_k={sampling.top_k:,} keeps every token: the vocabulary has {vocab_size:,}, so nothing is cut "
            f"(as top_k=none); top_k below {vocab_size:,} filters")


def sampling_notes(sampling, given, vocab_size: int | None, reporter) -> None:
    """Says what of a command's sampling settings does nothing (greedy_ignores, top_k_keeps_all): :gen, :step and
    :set alike (`:step temperature=0 top_k=5` dropped top_k from its pipeline without a word, where :gen said it)."""
    if (greedy := greedy_ignores(sampling, given)) is not None:
        reporter.notice(greedy)  # `:gen temperature=0 top_k=5`
    elif vocab_size is not None and (keeps_all := top_k_keeps_all(sampling, given, vocab_size)) is not None:
        reporter.notice(keeps_all)  # `:gen top_k=100` on sort's 12 characters


# --- default prompts ---------------------------------------------------------------------------------
def default_prompt(tokenizer, otherwise: str | None = None) -> str:
    """Where text starts when no prompt is given: a newline where the vocabulary has one (a fresh line
    of the text), else `otherwise`, else the vocabulary's first character."""
    if "\n" in tokenizer.stoi:
        return "\n"
    return otherwise if otherwise is not None else tokenizer.itos[0]


VIEW_DEFAULT = "(default: a short sample of the data)"  # how a view's help names its default prompt

# The options the views on one text share: the text, the position read, the block, the query head.
VIEW_TEXT = Param("prompt", str, help=f"text to read {VIEW_DEFAULT}", positional=True)
LAST_POSITION = Param("at", int, help="the position (default -1: the last, the one that predicts the next token)",
                      meta="N")
BLOCK = Param("layer", int, help="the block (default 0)", complete=complete_layer)
QUERY_HEAD = Param("head", int, help="the query head (default 0)", complete=complete_head_number)

SAMPLE_CHARS = 16  # the length of a corpus's default prompt for the views
SAMPLE_SCAN = 20_000  # characters of validation text searched for it
NEXT_SCAN = 256  # characters after it encoded with it, to find the token that follows it (a piece is shorter)


def sample_window(data) -> tuple[int, str]:
    """Where in a corpus's validation text the default prompt starts, and its text.

    The first SAMPLE_CHARS characters of the split were often mostly whitespace (pydoc's start
    with ` Counter()` and an indent), which shows a view nothing. The prompt is the first window
    that reads like a sentence: a capital letter after whitespace, or a letter of a script without
    capitals (Chinese, Japanese, Arabic, Hebrew) after whitespace or a sentence's end, then words:
    no line break, no run of spaces, at least three quarters letters. Text with no such window
    (code, numbers) gives its first characters from the first that starts one (`starts_a_character`).
    """
    text = data.tokenizer.decode(data.splits["val"][:SAMPLE_SCAN].tolist())
    for start in range(1, max(1, len(text) - SAMPLE_CHARS)):
        window = text[start : start + SAMPLE_CHARS]
        if (starts_a_sentence(text, start) and "\n" not in window and "  " not in window
                and sum(ch.isalpha() for ch in window) >= 0.75 * SAMPLE_CHARS):
            return start, _at_a_token_end(data.tokenizer, text, start, window)
    first = next((i for i, ch in enumerate(text[:SAMPLE_CHARS]) if starts_a_character(ch)), 0)
    return first, _at_a_token_end(data.tokenizer, text, first, text[first : first + SAMPLE_CHARS])


def _at_a_token_end(tokenizer, text: str, start: int, window: str) -> str:
    """`window` (text from `start`), shortened where a subword token of the text straddles its end: a BPE read
    "The example above" as ...' ab' 'o' 've', and a window ending "abov" gave the views a next token 'e' that the
    text never has there. Kept as it is where its tokens begin the text's after it, as a character's always do."""
    if getattr(tokenizer, "kind", "char") == "char":
        return window
    for end in range(len(window), len(window) // 2, -1):
        ids = tokenizer.encode(window[:end])
        if tokenizer.encode(text[start : start + end + NEXT_SCAN])[: len(ids)] == ids:
            return window[:end]
    return window


SENTENCE_ENDS = ".!?。！？"


def starts_a_sentence(text: str, start: int) -> bool:
    """Whether a sentence can start at `start`: a capital after whitespace, or a letter without case (你, ش, ש) after
    whitespace or a sentence's end. Capitals alone found none in a text in Chinese, whose views then quoted its first
    characters, cut anywhere: from the middle of an emoji (a lone joiner, U+200D) or of a character's bytes."""
    ch, before = text[start], text[start - 1]
    caseless = ch.isalpha() and ch.lower() == ch.upper()
    return (ch.isupper() and before.isspace()) or (caseless and (before.isspace() or before in SENTENCE_ENDS))


def starts_a_character(ch: str) -> bool:
    """Whether a text cut before `ch` starts with a whole character: not with a mark or joiner that belongs to the
    one before it (an accent, U+200D, a variation selector, a skin tone), nor with a byte of a split one (U+FFFD)."""
    import unicodedata

    return ch != "\ufffd" and unicodedata.category(ch) not in ("Mn", "Me", "Mc", "Cf", "Sk")


def samples_the_data(data) -> bool:
    """Whether sample_prompt draws from the data itself (a corpus, a task, random tokens), not from what a stand-in's
    vocabulary reads (a checkpoint's data that is gone, a loaded tokenizer on a task): sample_prompt's branches, in
    its order, but for the last (kept beside it: a branch added there is one here too)."""
    return (getattr(data, "splits", None) is not None or hasattr(data, "sample_questions")
            or getattr(data, "nothing_to_learn", False))


def sample_prompt(data) -> str:
    """A short, typical input: a sentence's start from the validation text, or one held-out task question."""
    if getattr(data, "splits", None) is not None:  # a corpus (tasks and random tokens have no fixed text)
        return PromptText(sample_window(data)[1])  # an example line quotes it where its words would not say it
    if hasattr(data, "sample_questions"):  # a task
        import torch

        return data.sample_questions("val", 1, torch.Generator().manual_seed(0))[0]
    if getattr(data, "nothing_to_learn", False):  # random: any row of its symbols is as typical as another (the
        import torch  # pangram's words, joined by a space its symbols lack, failed every view given no text)

        row, _ = data.get_batch("val", 1, SAMPLE_CHARS, torch.Generator().manual_seed(0))
        return data.tokenizer.decode(row[0].tolist())
    return words_it_reads(data.tokenizer)


# English words with every letter between them: a text for a tokenizer whose data is gone (a checkpoint's vocabulary,
# a loaded tokenizer on a task). Its vocabulary in order ("\n !.Pabcdefghijk") read as no text, and a subword
# tokenizer's `vocab` is its JSON ('{"version":"1.0"')
PANGRAM = "The quick brown fox jumps over the lazy dog"


def words_it_reads(tokenizer) -> str:
    """The words of PANGRAM that `tokenizer` reads back as written, up to SAMPLE_CHARS characters; where it reads
    none of them, the first characters of its vocabulary that are neither space nor control."""
    from ..core.errors import UserError

    def reads(text: str) -> bool:
        try:
            return tokenizer.decode(tokenizer.encode(text)) == text
        except UserError:  # a character the vocabulary lacks
            return False

    spaced = reads(" ")  # words after the first only where the space between them reads too (random's symbols)
    kept: list[str] = []
    for word in PANGRAM.split():
        if reads(word) and len(" ".join([*kept, word])) <= SAMPLE_CHARS and (spaced or not kept):
            kept.append(word)
    if kept:
        return " ".join(kept)
    return "".join(ch for ch in tokenizer.itos if ch.isprintable() and not ch.isspace())[:SAMPLE_CHARS]


def true_next(data, prompt: str) -> str | None:
    """The token that truly follows `prompt`, where the data knows it: a corpus's default prompt (the token after it
    in the validation text), a question of the task (its answer's first character); else None."""
    splits = getattr(data, "splits", None)  # a corpus: the default prompt was cut from its validation text
    if splits is not None:
        start, window = sample_window(data)
        if prompt != window:
            return None
        # start is a character offset in the decoded text: under a subword tokenizer it is no token's index, so
        # the text after the window is read from the decoded text (a character tokenizer's next token is its next
        # character)
        text = data.tokenizer.decode(splits["val"][:SAMPLE_SCAN].tolist())
        follows = text[start + len(window) : start + len(window) + NEXT_SCAN]
        return next_token(data.tokenizer, window, follows) if follows else None
    known_next = getattr(data, "known_next", None)  # repeat's sample: the repeat's next (:plot lens_rank found none)
    if known_next is not None:
        return known_next(prompt)
    question_of = getattr(data, "question_of", None)
    if question_of is not None and question_of(prompt) == prompt:
        # a question of this task and size alone: answer() works on whatever ends in '=' (sort's "answer" to 31+4=
        # began with '+'), and a question of another size is one the model was never asked (:gen grades neither)
        return data.answer(prompt)[:1] or None
    return None


def next_token(tokenizer, window: str, follows: str) -> str:
    """The token the text `window + follows` has right after `window`'s own tokens: under a subword tokenizer a
    piece (" five" after "Pack my box with", where the space alone is a token the text never has there), where
    the window's tokens begin the longer text's; else, where a token of the text straddles the window's end
    ("abov|e"), the next character."""
    ids = tokenizer.encode(window)
    longer = tokenizer.encode(window + follows)
    if len(longer) > len(ids) and longer[: len(ids)] == ids:
        piece = tokenizer.itos[longer[len(ids)]]
        if tokenizer.encode(piece) == [longer[len(ids)]]:  # the piece reads back as that token (the views look it up)
            return piece
    return follows[:1]


def known_text(data) -> str:
    """The views' sample of the data with what truly follows it: a corpus's window and its next character, a
    task's question and its whole answer; else the sample alone."""
    text = sample_prompt(data)
    if hasattr(data, "answer"):
        with contextlib.suppress(ValueError):
            return text + data.answer(text)
    if hasattr(data, "known_next"):  # repeat's sample holds its repeat already: the shape its loss is counted on
        return text
    return text + (true_next(data, text) or "")


def view_prompt(session, prompt: str | None, reporter, data=None, scored: bool = False,
                given: bool | None = None, *, noted: bool = False) -> tuple[str, list[int], int]:
    """The prompt's text and ids (its last max_seq_len tokens), and how many tokens were cut.

    `data`: the data whose tokenizer reads it (default: the session's). `scored`: a text whose every
    next token is scored (`:score`), which may be one token longer: the model reads max_seq_len and
    predicts the one after. `given`: whether the user gave `prompt` (default: whether it is not empty), False for a
    view's own sample passed in (`:score`'s known_text), which is cut to the window without a word. `noted`: the
    caller's result says the cut itself, on its own output (unread_note), so no notice says it first: `:kv` opened
    with "the prompt is longer than max_seq_len=4; reading its last 4 characters" and ended with "the first 3
    characters of the prompt (beyond max_seq_len) went unread", the same cut twice."""
    data = session.data if data is None else data
    text = prompt or sample_prompt(data)
    ids = data.tokenizer.encode(text)
    window = session.model_config.max_seq_len + scored
    dropped = max(0, len(ids) - window)
    if dropped and not (bool(prompt) if given is None else given):
        # the view's own sample, cut to the window: no prompt of the user's went unread (a model of max_seq_len=9 was
        # told "the prompt is longer ...", where none was given)
        ids = ids[-window:]
        return data.tokenizer.decode(ids), ids, 0
    if dropped:
        ids = ids[-window:]
        text = data.tokenizer.decode(ids)
        if noted:
            return text, ids, dropped
        limit = f"max_seq_len + 1 = {window}" if scored else f"max_seq_len={window}"
        reporter.notice(f"the {'text' if scored else 'prompt'} is longer than {limit}; "
                        f"{'scoring' if scored else 'reading'} its last {count(window, data.tokenizer.unit)}")
    return text, ids, dropped


def unread_note(console: Console, result) -> None:
    """What a view of one prompt says of the start it cut (`result.dropped` tokens beyond max_seq_len, in
    `result.unit`s): on its own output, where view_prompt's notice on stderr alone went unseen in a log of stdout."""
    if result.dropped:
        note(console, f"the first {count(result.dropped, result.unit)} of the prompt (beyond max_seq_len) went unread")


def typeable_prompt(prompt: str) -> PromptText | None:
    """The prompt as a line of one line carries it, or None: a default prompt of the data written out beats a PROMPT
    placeholder, and so does a short one with a newline or a tab, written as escapes (`:gen "The\n"`, the shell's
    $'The\n'; a long one would fill the line). As PromptText, so that cmd quotes it for the front end speaking (the
    shell's `a|b>c` piped :step's own pick into a command `c`, and `def f(x):` was a PROMPT placeholder)."""
    escaped = len(prompt) <= 80 and all(ch.isprintable() or ch in "\n\t" for ch in prompt)
    return PromptText(prompt) if prompt and (prompt.isprintable() or escaped) else None


def long_prompt_notice(reporter, ids: list[int], window: int, unit: str) -> None:
    """What :gen and :step say of a prompt longer than the window: they take it whole, and the model reads its end."""
    if len(ids) > window:
        reporter.notice(f"the prompt is {count(len(ids), unit)}, longer than max_seq_len={window}: "
                        f"the model sees only its last {window}")


def check_layer(session, layer: int | None, default: int = 0) -> int:
    """A block index of the session's model, checked (None: `default`; -1 there: the last block)."""
    n_layers = session.model_config.n_layers
    layer = (default % n_layers) if layer is None else layer
    if not 0 <= layer < n_layers:
        raise UserError(f"layer must be in 0..{n_layers - 1} (the model has {count(n_layers, 'layer')}, one per "
                        f"block), got {clip(str(layer))}")
    return layer


def check_head(session, head: int | None) -> int:
    """A head index of the session's model's attention, checked (None: head 0)."""
    n_heads = session.model_config.n_heads
    head = 0 if head is None else head
    if not 0 <= head < n_heads:
        raise UserError(f"head must be in 0..{n_heads - 1} (the model has {count(n_heads, 'head')}), "
                        f"got {clip(str(head))}")
    return head


def data_named(session) -> str:
    """The session's data as a result names it: a task with its size (sort:4; `sort` alone was said of sort:4, and
    is sort:6), random tokens by their spec (random:20), else the data's name."""
    data = session.data
    if isinstance(getattr(data, "size", None), int):
        return f"{data.name}:{data.size}"
    return session.data_spec if session.data_spec.partition(":")[0] in TASKS else data.name


def switched_off(session) -> list[str]:
    """The parts `:ablate` has switched off now, as a view's result records them."""
    return [str(a) for a in session.ablations]


def ablation_note(console: Console, ablations: list[str],
                  reading: str = "the model's own numbers here are the ablated model's") -> None:
    """What a view must say while :ablate has parts switched off: by default, that its numbers are the ablated
    model's; `reading`: what else the view's reader must know of it."""
    if ablations:
        note(console, f"switched off now: {', '.join(ablations)} ({cmd('ablate', 'off')} puts the model back); "
                      f"{reading}")


def training_length(session) -> int | None:
    """The tokens a training row of the session's data holds: the window (max_seq_len) for a text, fewer for a
    task (sort:4 trains on its 8: the question and its answer). None where no batch can be drawn (the data is
    gone): the ledger then counts the window."""
    from ..core.data import row_length

    return row_length(session.data, session.model_config.max_seq_len)
