"""Data: a character tokenizer, text corpora and synthetic tasks, all behind one batch interface.

Every dataset answers `get_batch(split, batch_size, max_seq_len, generator) -> (x, y)`: x holds
token ids (B, T) and y the next token at each position, with -1 where no loss is counted
(teacher forcing: one forward pass scores every position at once).

Corpora (`pydoc`, `shakespeare`, a file path) give random windows of max_seq_len + 1 characters
from a 90/10 train/validation split. Tasks (`sort`, `reverse`, `add`) give "question=answer"
sequences whose loss is counted on the answer only, with an exact-match accuracy. `random` is the
negative control: uniformly random tokens that no model can learn, so its loss stays at ln(vocab).
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import functools
import hashlib
import math
import operator
import os
import re
import shlex
import time
import urllib.error
import urllib.request
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .catalog import (CORPORA, OTHER_DATA, SHAKESPEARE_BYTES, SHAKESPEARE_SHA256, TASK_SIZES, TASKS, bytes_as_read,
                      no_file_named, unkept_path)
from .config import MAX_BPE_TOKENS, MIN_BPE_TOKENS
from .errors import DataError, UserError, is_out_of_memory
from .interrupts import cut_short
from .notices import told
from .numbers import NumberTooLarge, whole_number
from .paths import CACHE_ENV, cache_dir, cut_middle, expand, gone_folder, home_variable, on_windows
from .probe import evaluating
from .words import count, quoted_chars

SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
SHAKESPEARE_CHARS = 1_115_394  # its SHA-256 and size in bytes are in core.catalog (no torch there)
# A download reads at most this much: the file's known size and a margin (a server that adds a
# byte-order mark or a trailing newline still gets its SHA-256 checked, which says what is wrong);
# a URL that sends endless bytes is cut off here instead of filling the memory.
DOWNLOAD_MARGIN = 64 * 2**10
DOWNLOAD_SECONDS = 300.0  # the whole download; each read also has the urlopen timeout

# The digits of pi: the example each task describes itself with (enough for add:30's 60 digits).
PI_DIGITS = "3141592653589793238462643383279502884197169399375105820974944592307816406286"
# What a corpus holds: its text whole, as one Python string, and each split's ids as one tensor (1 or 2 bytes a token,
# TextCorpus). The string stays because the views ask of the characters (:data's held-out characters, a BPE trained
# on the training text, the session's check that a text is the same, a checkpoint's digest). It takes 1 byte a
# character for Latin-1 text, 2 for the rest of the Basic Multilingual Plane and 4 once any character lies past it
# (CPython's str: one emoji makes a text of 100 MB take 400). So a file of 191 MiB of mixed scripts with emoji holds
# 963 MB (the string 763, the ids 200), and peaks at about that while it is read (the file's bytes beside the string
# as it is decoded); an ASCII file of 100 MiB holds 200 MB. No other copy of the text is made whole: the splits are
# read in place by range, the digest comes from the file's bytes (it was 2 GB at peak for that file, 1.2 for one of
# 100 MiB with an emoji, where each split's slice and the text's UTF-8 were made beside the string).
MAX_FILE_BYTES = 200 * 2**20
SLOW_FILE_BYTES = 50 * 2**20  # a file larger than this takes seconds to read: reading_notice says so first


class CharTokenizer:
    """One token per character; the vocabulary is the sorted set of characters seen."""

    kind = "char"
    unit = "character"  # what one token is, in messages
    # where the vocabulary is a generated data's own (a task's digits and signs), that data's name: no data "contains"
    # another character, which the fix for one said to train on; the fix names the characters there are
    closed: str | None = None

    def __init__(self, chars):
        self.itos = sorted(set(chars))
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        return cls(text)

    @classmethod
    def from_vocab(cls, vocab: str) -> "CharTokenizer":
        """The tokenizer whose ids are `vocab`'s characters in the given order (a checkpoint's vocabulary).

        minitf saves sorted vocabularies, so this equals CharTokenizer(vocab) for them; keeping the
        order anyway means the ids match the saved embedding rows whatever wrote the file.
        """
        if len(set(vocab)) != len(vocab):
            raise DataError(f"the vocabulary repeats a character ({count(len(vocab), 'character')}, "
                            f"{len(set(vocab))} distinct)")
        tokenizer = cls("")
        tokenizer.itos = list(vocab)
        tokenizer.stoi = {ch: i for i, ch in enumerate(tokenizer.itos)}
        return tokenizer

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    @property
    def vocab(self) -> str:
        return "".join(self.itos)

    def encode(self, text: str) -> list[int]:
        unknown = sorted({ch for ch in text if ch not in self.stoi})
        if unknown:  # "é" typed (one character, NFC) where the text writes "e" and an accent (NFD), or the reverse
            import unicodedata

            for form in ("NFC", "NFD"):
                same = unicodedata.normalize(form, text)  # the same text, by Unicode's canonical equivalence
                if all(ch in self.stoi for ch in same):
                    return [self.stoi[ch] for ch in same]
        if unknown:
            shown = " ".join(quoted_chars(ch) for ch in unknown[:10]) + (" ..." if len(unknown) > 10 else "")
            them = "it" if len(unknown) == 1 else "them"
            # "The Cat" on a text in lower case: the letters are there, in the other case; said of those letters
            # whatever else is missing ("The Dog!" lost the hint for 'D' and 'T' to its '!')
            cased = [(ch, ch.swapcase()) for ch in unknown
                     if len(ch.swapcase()) == 1 and ch.swapcase() != ch and ch.swapcase() in self.stoi]
            typed = [ch for ch, _ in cased]
            case = ("lower" if all(ch.isupper() for ch in typed) else "upper" if all(ch.islower() for ch in typed)
                    else "the other")
            which = them if len(cased) == len(unknown) else " ".join(quoted_chars(ch) for ch in typed[:10])
            has = (f" (the text has {which} in {case} case: {' '.join(quoted_chars(o) for _, o in cased[:10])})"
                   if cased else "")
            fix = f"remove {them}: {self.closed} has {''.join(self.itos)} only" if self.closed else \
                f"remove {them}, or train on data that contains {them}"
            raise DataError(f"{count(len(unknown), 'character')} not in the vocabulary: {shown}{has}; {fix}")
        return [self.stoi[ch] for ch in text]

    def encode_tensor(self, text: str, dtype: torch.dtype, start: int = 0, end: int | None = None) -> torch.Tensor:
        """encode(text[start:end]) as a tensor of `dtype`, read a block of characters at a time through a table from
        code point to id: a file of 80 MB took 10 s and 1 GB as a Python list of ids, and now takes a second. By
        range, so that a corpus's split is read inside its text, not from a copy of it (90% of a text of 200 MB). A
        character the vocabulary lacks goes through encode(), which reads it another way or says what is wrong."""
        import numpy as np

        end = len(text) if end is None else end
        out = np.empty(max(0, end - start), dtype=torch.empty(0, dtype=dtype).numpy().dtype)
        if end <= start:
            return torch.from_numpy(out)
        # int32, and blocks of 256 K characters: a block's own arrays (its slice, its UTF-32, the codes clipped, the
        # ids) take some 4 MB, where int64 ids of 4 M characters took 80 MB beside the text, for no more speed
        table = np.full(max(map(ord, self.itos), default=0) + 1, -1, dtype=np.int32)
        table[[ord(ch) for ch in self.itos]] = np.arange(len(self.itos))
        block = 1 << 18
        for at in range(start, end, block):
            codes = np.frombuffer(text[at:min(at + block, end)].encode("utf-32-le", "surrogatepass"), dtype="<u4")
            ids = table[np.minimum(codes, len(table) - 1)]
            if (ids < 0).any() or (codes >= len(table)).any():
                return torch.tensor(self.encode(text[start:end]), dtype=dtype)
            out[at - start:at - start + len(codes)] = ids
        return torch.from_numpy(out)

    def decode(self, ids) -> str:
        """The text of `ids`: a list or 1-D tensor of ids, or one id. An id outside 0..vocab_size-1 is a DataError:
        Python's negative indexing read -1 (the targets' "not counted") as the last character, without a word."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() > 1:
                raise DataError(f"decode reads one sequence of ids, got a tensor of shape {tuple(ids.shape)}; "
                                "decode each row: [tokenizer.decode(row) for row in ids]")
            ids = ids.tolist()
        if isinstance(ids, int):
            ids = [ids]
        if isinstance(ids, (str, bytes)):
            raise DataError("decode reads token ids, got text; encode(text) gives the ids of a text")
        size, whole = len(self.itos), []
        for i in ids:
            try:
                whole.append(operator.index(i))
            except TypeError:
                raise DataError(f"decode reads whole token ids, got {i!r}; convert them (ids.long(), or "
                                "logits.argmax(-1) for the likeliest tokens)") from None
        ids = whole
        bad = next((i for i in ids if not 0 <= i < size), None)
        if bad is not None:
            raise DataError(f"decode reads token ids 0..{size - 1}, got {bad}; drop the -1 of targets (positions not "
                            "counted), and decode only ids of this tokenizer's vocabulary")
        return "".join(self.itos[i] for i in ids)

    def describe(self) -> str:
        return f"characters, {count(self.vocab_size, 'token')}"


@dataclass
class DataInfo:
    """What `:data` shows about the current dataset."""

    name: str  # the data's name: a corpus's or a file's, a task's without its size (sort, not sort:4), random, repeat
    kind: str  # corpus | task | vocabulary (a checkpoint's vocabulary alone: its data is not available)
    description: str  # what the data is, in a line
    # characters in the corpus, or per example for a task; None: not known (a vocabulary alone) or none to count
    # (random and repeat tokens have no examples)
    chars: int | None
    vocab_size: int  # V: tokens in its tokenizer's vocabulary
    # tokens in a corpus's train split; None: not a corpus (a task, random or repeat tokens, a vocabulary alone)
    train_tokens: int | None
    val_tokens: int | None  # tokens in a corpus's validation split; None as for train_tokens
    unit: str = "character"  # what one token is: a character, or a subword token of a BPE (the tokenizer's unit)
    tokenizer: str = ""  # the tokenizer that reads it, in words: "characters, 65 tokens", "byte-level BPE, 512 tokens"
    # a task's questions, all that can be asked; None: not a task, or one of more than 10,000 (held_out_count)
    questions: int | None = None
    # of those, the questions held out for validation, never trained on; None as for questions
    val_questions: int | None = None
    # a corpus's characters in its validation split (its end); None: not a corpus. The split is of characters (90/10),
    # which a BPE then reads in different numbers of tokens: the token counts' shares read 91/9
    val_chars: int | None = None
    # the name the view shows: a task's with its size (sort:1, where `name` is sort); "": `name`. For the view alone,
    # beside the command's `spec`, which is the data as typed (`:data sort` leaves the size out)
    shown_name: str = field(default="", metadata={"view_only": True})


def check_split(split: str) -> None:
    """A batch's split is "train" or "val": a task read any other name as its training questions, without a word."""
    if split not in ("train", "val"):
        raise DataError(f"split must be 'train' or 'val', got {split!r}; the data has those two only")


def _id_dtype(vocab_size: int) -> torch.dtype:
    return torch.uint8 if vocab_size <= 256 else torch.int16 if vocab_size <= 32768 else torch.int32


class TextCorpus:
    """A text split 90/10 into train and validation; batches are random windows."""


    def __init__(self, name: str, text: str, description: str, tokenizer=None, readings: Readings | None = None,
                 stamp: tuple[int, int, int] | None = None, recipe_key: str | None = None, digest: str | None = None,
                 line_endings: bool = False):
        if not text:
            raise DataError(f"{name} is empty; choose a file that contains text")
        self.name = name
        # whose recipe it trains with (core.recipes): a built-in's name, a file's path (none: a file's name is no
        # built-in's, though a file named shakespeare read as one)
        self.recipe_key = recipe_key if recipe_key is not None else name
        self.description = description
        self.text = text
        # The characters of the text, or a subword tokenizer (core.bpe: a loaded model's, or :set tokenizer=bpe:N)
        self.tokenizer = tokenizer if tokenizer is not None else CharTokenizer.from_text(text)
        if self.tokenizer.vocab_size < 2:  # nothing to predict: every loss is 0 and ln V is 0
            raise DataError(f"{name} holds one distinct character ({quoted_chars(text[0])}), so there is nothing "
                            "to predict; give a text with at least two different characters")
        # The split is made on the characters, so that every tokenizer trains and validates on the
        # same text (and a BPE is trained on the training text alone). Each split is held in the
        # narrowest integer type the vocabulary fits (1 or 2 bytes a token instead of int64's 8: tiny
        # Shakespeare takes 1 MB, not 9); a batch is widened to int64 when cut.
        self.cut = int(0.9 * len(text))
        # the file's state when its text was read (file_stamp; None: not read from a file): a checkpoint loaded later
        # takes the file as it is then, not this copy, when they differ (commands.checkpoints._checkpoint_data)
        self.stamp = stamp
        # the file's "\r" kept as read (load_data's line_endings): a read of the same file otherwise is another text
        self.line_endings = line_endings
        if digest is not None:  # known already (load_data's, from the file's bytes): the cached property's value
            self.__dict__["digest"] = digest
        dtype = _id_dtype(self.tokenizer.vocab_size)
        self.readings = readings if readings is not None else Readings()
        # each split read inside the text by its range: split_text's slices were copies, 90% of the text for train
        self.splits = self.readings.splits_of(self.tokenizer, dtype, lambda: {
            split: _encoded(self.tokenizer, self.text, *self._range(split), dtype) for split in ("train", "val")})

    @functools.cached_property
    def digest(self) -> str:
        """The SHA-256 of the text: a checkpoint keeps it, and a load tells a file rewritten since it was trained on
        (the same characters, so the vocabulary alone says nothing), whose validation split may then hold text the
        model trained on. Of the text's UTF-8 (load_data's from the file's bytes where they are that)."""
        return text_digest(self.text)

    def _range(self, split: str) -> tuple[int, int]:
        """Where the characters of the train or the val split lie in the text: (start, end)."""
        return (0, self.cut) if split == "train" else (self.cut, len(self.text))

    def _chars(self, split: str) -> set[str]:
        """The distinct characters of a split, read a block at a time: set(split_text(split)) without its copy."""
        start, end = self._range(split)
        seen: set[str] = set()
        for at in range(start, end, TEXT_BLOCK):
            seen.update(self.text[at:min(at + TEXT_BLOCK, end)])
        return seen

    def split_text(self, split: str) -> str:
        """The characters of the train or the val split."""
        return self.text[: self.cut] if split == "train" else self.text[self.cut :]

    def tokens_per_char(self, split: str = "val") -> float:
        """How many tokens the tokenizer reads a character of this split as: 1 for characters, about 0.5
        for a BPE of 512 tokens on English (what turns a loss per token into bits per character)."""
        chars = len(self.text) - self.cut if split == "val" else self.cut
        return len(self.splits[split]) / chars if chars else 1.0

    def held_out_only(self, most: int = 8, share: float = 0.01) -> str:
        """The characters the validation split holds and the training split never does (at most `most` of them, in
        order), where they are at least `share` of it; else "": no model predicts those, so its val loss stays high
        whatever it learns (a file whose last tenth is in another script). A rare one (an emoji among 100,000
        characters) moves the loss too little to say. As Task.held_out_only says it of a task's digits."""
        held = self.held_out_counts(share)
        return "".join(held[0][:most]) if held is not None else ""

    def held_out_counts(self, share: float = 0.01) -> tuple[str, int, int] | None:
        """What held_out_only lists, counted: (every such character, in order; how many of the validation split's
        characters are one of them; the split's characters), or None where held_out_only says "". Its list is cut
        at 8, and "'丆', '万', ..." read as eight, where 814 distinct characters, 972 of 1,020, were never trained on."""
        start, end = self._range("val")
        only = self._chars("val") - self._chars("train")
        counts: collections.Counter = collections.Counter()
        for at in range(start, end, TEXT_BLOCK) if only else ():
            counts.update(self.text[at:min(at + TEXT_BLOCK, end)])
        held = sum(counts[ch] for ch in only)
        if not only or held < share * (end - start):
            return None
        return "".join(sorted(only)), held, end - start

    def more_tokens_than_characters(self) -> str | None:
        """Where a subword tokenizer reads the validation text in more tokens than it has characters (bpe:300 on
        Chinese: 0.64 characters a token, below the character tokenizer's 1, as each character is three bytes and 44
        merges join few of them): why, and about the N of bpe:N that makes each character one token; else None."""
        if self.tokenizer.kind == "char" or (per := self.tokens_per_char("val")) <= 1:
            return None
        val = self.split_text("val")
        each = len(val.encode("utf-8", errors="surrogatepass")) / len(val)
        chars = set(self.split_text("train"))
        # a character of k bytes is one token after k - 1 merges, each of a longer start of it; characters that share
        # a start (the lead bytes of a CJK block) share its merges
        encoded = (ch.encode("utf-8", errors="surrogatepass") for ch in chars)
        starts = {b[:k] for b in encoded for k in range(2, len(b) + 1)}
        merges = max(0, getattr(self.tokenizer, "own_size", self.tokenizer.vocab_size) - 256)
        said = (f"it reads this text in more tokens than characters ({per:.2f} tokens a character): a character is "
                f"{each:.1f} bytes on average, and {count(merges, 'merge')} join too few of them into whole "
                "characters; ")
        whole = f"the {len(starts):,} merges that would make each of the training text's {len(chars):,} distinct " \
                "characters one token"
        n = max(MIN_BPE_TOKENS, 256 + len(starts))
        if n > MAX_BPE_TOKENS:  # bpe:N past the largest :set takes was a fix that fails: the largest, and char
            return (f"{said}bpe:{MAX_BPE_TOKENS} (the largest N) joins the most, short of {whole}, and tokenizer=char "
                    "reads a character a token")
        return f"{said}bpe:{n} (the 256 bytes, and {whole}) is about what reads a character a token"

    def info(self) -> DataInfo:
        return DataInfo(
            self.name, "corpus", self.description, len(self.text), self.tokenizer.vocab_size,
            len(self.splits["train"]), len(self.splits["val"]), self.tokenizer.unit, self.tokenizer.describe(),
            val_chars=len(self.text) - self.cut,
        )

    def retokenized(self, tokenizer) -> "TextCorpus":
        """The same text read by another tokenizer (None: its characters)."""
        return TextCorpus(self.name, self.text, self.description, tokenizer, self.readings, self.stamp, self.recipe_key,
                          self.__dict__.get("digest"), self.line_endings)

    def check_fits(self, max_seq_len: int, *, current: int | None = None) -> None:
        """Refused where a split is shorter than one window of max_seq_len + 1 tokens. `current`: the window the model
        has now, which the fix never repeats (`:set block_size=10` at 3 was told `:set max_seq_len=3`)."""
        split = min(("val", "train"), key=lambda name: len(self.splits[name]))
        shortest = len(self.splits[split])
        if shortest < max_seq_len + 1:
            # the text's end and its start: "(the last 10%)" above a table of 1 / 1 tokens (50/50), where a tiny text's
            # cut rounds (the cut is at 90% of its characters, at least one each side)
            which = "validation split (the text's end)" if split == "val" else "training split (the text's start)"
            # the fixes that work: a window of shortest - 1 tokens where one of 1 or more fits, and the characters a
            # text needs for this window (a character a token; a subword tokenizer's count is the text's to say)
            # A BPE's tokens of a repetitive text may be few however long it is ('ab' x 500: one token): it is read in
            # more by one of fewer merges, or a character a token
            longer = (f"a text of at least {count(_chars_for(max_seq_len + 1), 'character')}"
                      if self.tokenizer.kind == "char" else
                      "a longer text, or read it in more tokens (tokenizer=bpe:N with a smaller N, or tokenizer=char)")
            fits = shortest - 1 if shortest >= 2 else None  # the window that fits, as the fix to paste
            # the window the model has is that one (`:set block_size=10` at 3): `:set max_seq_len=3` changed nothing
            kept = fits is not None and fits == current
            way = (f", or keep max_seq_len={fits}, the largest window it fits" if kept else
                   f", or max_seq_len={fits} or less" if fits else "")
            raise DataError(
                f"{self.name} is too short: its {which} has {count(shortest, self.tokenizer.unit)}, and one window "
                f"needs max_seq_len + 1 = {max_seq_len + 1}; use {longer}{way}",
                fix={"max_seq_len": fits} if fits and not kept else None,
            )

    def get_batch(self, split: str, batch_size: int, max_seq_len: int, generator: torch.Generator):
        check_split(split)
        self.check_fits(max_seq_len)
        data = self.splits[split]
        starts = torch.randint(len(data) - max_seq_len, (batch_size,), generator=generator)
        return self._windows(data, starts, max_seq_len)

    def window_count(self, split: str, max_seq_len: int) -> int:
        """How many different windows get_batch draws from: one per start, len(split) - max_seq_len."""
        check_split(split)
        self.check_fits(max_seq_len)
        return len(self.splits[split]) - max_seq_len

    def every_window(self, split: str, max_seq_len: int):
        """get_batch's windows, each once, in order: (x, y) of window_count rows."""
        return self._windows(self.splits[split], torch.arange(self.window_count(split, max_seq_len)), max_seq_len)

    @staticmethod
    def _windows(data: torch.Tensor, starts: torch.Tensor, max_seq_len: int):
        windows = data[starts[:, None] + torch.arange(max_seq_len + 1)].long()  # (B, T + 1): one window a row
        return windows[:, :-1], windows[:, 1:]  # x, and y = x shifted by one: the next token at each position


class Readings:
    """A text's splits as each subword tokenizer read them this session, and the BPEs trained on it (by setting):
    shared by every TextCorpus of the same text (retokenized passes it on), so it goes with the last of them.

    Switching back to bpe:512 on a text of 20 MB trained the BPE again and read the whole text again (some 25 s);
    the tokenizer trained and the ids read are the same each time, so they are kept. A tokenizer is known by its
    JSON (two tokenizers are the same exactly when their JSON is); the readings of the last KEPT_READINGS are kept.
    A character tokenizer reads a text in a blink and keeps nothing."""

    def __init__(self):
        self.splits: dict[tuple[str, torch.dtype], dict[str, torch.Tensor]] = {}
        self.trained: dict[int, object] = {}  # N of a setting bpe:N -> the BPE it trained, the last few (core.bpe)

    def splits_of(self, tokenizer, dtype: torch.dtype, read: Callable[[], dict]) -> dict[str, torch.Tensor]:
        if tokenizer.kind == "char":
            return read()
        key = (tokenizer.vocab, dtype)
        splits = self.splits.pop(key, None)
        if splits is None:
            splits = read()
        self.splits[key] = splits  # the latest last
        while len(self.splits) > KEPT_READINGS:
            del self.splits[next(iter(self.splits))]
        return splits


KEPT_READINGS = 3  # a text's readings kept (Readings): 20 MB of text is some 20 MB of ids a reading, at 2 bytes each


def _encoded(tokenizer, text: str, start: int, end: int, dtype: torch.dtype) -> torch.Tensor:
    """The ids of `text[start:end]` as a tensor of `dtype`: read in place into a compact buffer by the character
    tokenizer and core.bpe's (encode_tensor), else through the slice and its list of ids."""
    fast = getattr(tokenizer, "encode_tensor", None)
    return fast(text, dtype, start, end) if fast is not None else torch.tensor(tokenizer.encode(text[start:end]),
                                                                                dtype=dtype)


TEXT_BLOCK = 1 << 22  # characters a text is read a block at a time in, where a whole copy of it is not wanted


def text_digest(text: str) -> str:
    """The SHA-256 of `text`'s UTF-8 (a lone surrogate as its three bytes), encoded a block at a time: the whole
    encoded at once was another copy of a text of 200 MB. UTF-8 encodes each character alone, so the blocks' bytes
    are the whole's, and the digest the same number (a checkpoint keeps it)."""
    digest = hashlib.sha256()
    for at in range(0, len(text), TEXT_BLOCK):
        digest.update(text[at:at + TEXT_BLOCK].encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest()


def _chars_for(tokens: int) -> int:
    """The fewest characters whose 90/10 split (TextCorpus.cut) gives both splits `tokens` characters or more."""
    length = 10 * tokens - 10
    while min(int(0.9 * length), length - int(0.9 * length)) < tokens:
        length += 1
    return length


def val_tokens_per_char(data) -> float | None:
    """Tokens per character of a text corpus's validation text; None for data that is not text (a task)."""
    ratio = getattr(data, "tokens_per_char", None)
    return ratio("val") if ratio is not None else None


def row_length(data, max_seq_len: int) -> int | None:
    """The tokens a training row of `data` holds in a window of max_seq_len: the window for a text, fewer for a
    task (sort:4 trains on its 8: the question and its answer, whatever the window). None where no batch can be
    drawn (the data is gone, or holds no text to train on)."""
    try:
        x, _ = data.get_batch("train", 1, max_seq_len, torch.Generator().manual_seed(0))
    except UserError:
        return None
    return int(x.shape[1])


def bits_per_char(loss: float | None, tokens_per_char: float | None) -> float | None:
    """A loss in nats per token as bits per character: loss x tokens / characters / ln 2.

    Losses per token of different tokenizers do not compare (a BPE token carries several characters,
    so it costs more nats); bits per character of the same text do. For characters it is loss / ln 2."""
    if loss is None or tokens_per_char is None:
        return None
    return loss * tokens_per_char / math.log(2)


@dataclass
class Graded:
    """A task's question and the answer a model wrote to it, checked against the true one."""

    question: str  # "314159=": the question, up to and with its '='
    written: str  # the answer_len characters the model wrote after it
    expected: str  # the true answer
    right: bool  # written is expected
    digits_right: int  # positions where written and expected agree
    # a validation question: never drawn for training, though a training question may have its answer (add's b+a=,
    # sort's same digits in another order: Task.trained_twin)
    held_out: bool
    # where held out: the training question of the same answer, as the line says it (Task.twin_line); "" where none is
    twins: str = field(default="", metadata={"view_only": True})


def _crc_table() -> torch.Tensor:
    """CRC-32's table (zlib's polynomial, bits reflected): entry i is the remainder of the byte i."""
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        table.append(c)
    return torch.tensor(table, dtype=torch.long)


_CRC_TABLE = _crc_table()


@functools.lru_cache(maxsize=None)
def _held_out_count(name: str, size: int) -> tuple[int, int]:
    task = Task(name, size)
    total = 10**task.n_digits
    return sum(task.is_val(task.question([int(d) for d in f"{n:0{task.n_digits}d}"])) for n in range(total)), total


class Task:
    """A synthetic task: sequences "question=answer", loss and accuracy on the answer only.

    Held-out examples are real: a question whose CRC32 is divisible by 10 is validation-only and
    never drawn for training. Its answer may be all the same (`trained_twin`): on add:3, 89,983 of the 100,289
    held-out questions have their twin b+a= in training, and on sort:4 every one has a training question
    of the same digits; reverse's answers are each one question's. Accuracy measures answers to questions
    never trained on, not answers never seen. (The split stays: checkpoints and figures rest on it.)
    """

    vocab = "0123456789+="

    def __init__(self, name: str, size: int):
        self.name = name
        self.size = size
        self.tokenizer = CharTokenizer(self.vocab)
        self.tokenizer.closed = name
        self.description = {
            "sort": f"sort {count(size, 'digit')}: {self.example}",
            "reverse": f"reverse {count(size, 'digit')}: {self.example}",
            "add": f"add two {size}-digit numbers: {self.example}",
        }[name]
        # what an answer is made of, as :heads says it (a sort model's answer is its question's digits; add's is not)
        self.answer_made = {
            "sort": "its question's digits, sorted",
            "reverse": "its question's digits, reversed",
            "add": "the sum of its question's two numbers, digits the question need not hold",
        }[name]

    @property
    def example(self) -> str:
        """One whole example of this size, from the digits of pi: 314159=113459 for sort:6."""
        question = self.question([int(d) for d in PI_DIGITS[: self.n_digits]])
        return question + self.answer(question)

    # --- one example -------------------------------------------------------------------------
    def question(self, digits: list[int]) -> str:
        if self.name == "add":
            return f"{''.join(map(str, digits[: self.size]))}+{''.join(map(str, digits[self.size :]))}="
        return "".join(map(str, digits)) + "="

    def held_out_only(self) -> str:
        """The digits that only held-out questions hold, in order; "" where every digit is in some training question,
        or the task is too large to list (10,000 questions or more). sort:1's one held-out question, 1=, is the only
        one with a 1: no training shows the model a 1, and its validation accuracy is 0 whatever it learns."""
        if 10**self.n_digits >= 10_000:
            return ""
        train, val = set(), set()
        for number in range(10**self.n_digits):
            question = self.question([int(d) for d in f"{number:0{self.n_digits}d}"])
            (val if self.is_val(question) else train).update(ch for ch in question if ch.isdigit())
        return "".join(sorted(val - train))

    def held_out_count(self) -> tuple[int, int] | None:
        """(questions held out, all questions) where there are at most 10,000 to count; None for a larger task.

        The hash holds out about one question in ten, not exactly: sort:2 holds out 12 of its 100, sort:1 1 of 10.
        A larger task's share is 10% to within a fraction of a per cent (reverse:5: 9,928 of 100,000), and counting
        it took 0.4 s, for a row of :data."""
        return _held_out_count(self.name, self.size) if 10**self.n_digits <= 10_000 else None

    def answer(self, question: str) -> str:
        body = question.rstrip("=")
        if self.name == "sort":
            return "".join(sorted(body))
        if self.name == "reverse":
            return body[::-1]
        a, b = body.split("+")
        return str(int(a) + int(b)).zfill(self.size + 1)  # fixed width: the answer length is known

    @property
    def n_digits(self) -> int:
        return 2 * self.size if self.name == "add" else self.size

    @property
    def question_len(self) -> int:
        return len(self.question([0] * self.n_digits))

    @property
    def answer_len(self) -> int:
        return self.answer_len_at(self.size)

    def answer_len_at(self, size: int) -> int:
        """The answer length of this task's questions of `size` (add's sum has a digit more than its numbers)."""
        return size + 1 if self.name == "add" else size

    @property
    def seq_len(self) -> int:
        """Tokens the model sees: question + answer minus the last (it is only a target)."""
        return self.question_len + self.answer_len - 1

    def answer_complete(self, ids: list[int]) -> bool:
        """The end of an answer, which generation stops at: a whole answer follows the text's first '='.

        A task's text is one question and its answer, and every answer has answer_len characters
        (add's is zero-padded), so what a model writes after it was never trained and means nothing
        (sort went on `314159=113459999999...`). The first '=' is the one that ends the question.
        A question of this task larger than its size (1234+5678= under add:3) ends where an answer of its size
        does (5 characters, not add:3's 4): cut at the trained length, its 5-digit sum read as 7924. A smaller one
        ends at the trained length, which the model writes its answer in (add:3's 0068 for 12+56=).
        """
        equals = self.tokenizer.stoi["="]
        if equals not in ids:
            return False
        at = ids.index(equals)
        size = self.size_of(self.tokenizer.decode(ids[: at + 1])) or 0
        return len(ids) - at - 1 >= self.answer_len_at(max(size, self.size))

    @property
    def question_form(self) -> str:
        """What a question of this task looks like, in words and by example: "6 digits, then '=' (314159=)"."""
        example = self.example[: self.question_len]
        if self.name == "add":
            return f"two {self.size}-digit numbers joined by '+', then '=' ({example})"
        return f"{count(self.size, 'digit')}, then '=' ({example})"

    def question_of(self, text: str) -> str | None:
        """The question `text` starts with, where it starts with one of this task's (314159= for sort:6), else None."""
        head, equals, _ = text.partition("=")
        return head + "=" if equals and self.size_of(head + "=") == self.size else None

    def size_of(self, question: str) -> int | None:
        """The task size whose questions look like `question` (any size 1-30), or None: 4 for 3142= under sort."""
        head, equals, rest = question.partition("=")
        parts = head.split("+") if self.name == "add" else [head]
        if not equals or rest or len(parts) != (2 if self.name == "add" else 1) or len({len(p) for p in parts}) != 1:
            return None
        if not all(part and all(ch in "0123456789" for ch in part) for part in parts):
            return None
        return len(parts[0]) if 1 <= len(parts[0]) <= 30 else None

    def grade(self, text: str) -> Graded | None:
        """`text`, a question then what a model wrote after it, checked: None where it does not start with a
        question of this task or does not yet hold a whole answer (the characters past the answer mean nothing:
        see answer_complete)."""
        question = self.question_of(text)
        if question is None:
            return None
        written = text[len(question) : len(question) + self.answer_len]
        if len(written) < self.answer_len:
            return None
        expected = self.answer(question)
        return Graded(question, written, expected, written == expected,
                      sum(a == b for a, b in zip(written, expected)), held_out := self.is_val(question),
                      self.twin_line(question) if held_out else "")

    def trained_twin(self, question: str) -> str | None:
        """A training question with `question`'s answer, None where none is: add's b+a= where it is not held out too
        (10,306 of add:3's held-out questions have a held-out twin, and a+a= is its own), sort's same digits in
        another order (only a question of one digit repeated has none); reverse's answers are each one question's.
        Decides per question whether a right held-out answer is generalisation (commands.generate.answer_line)."""
        head = question.rstrip("=")
        if self.name == "add":
            a, _, b = head.partition("+")
            twin = f"{b}+{a}="
            return twin if twin != question and not self.is_val(twin) else None
        if self.name == "sort":
            # its rotations and its sorted orders, at most size + 2 other questions of the same digits: nine in ten
            # questions are training ones, so these nearly always hold one. Not every order: itertools.permutations
            # walks size! of them, most repeats where digits repeat (a held-out 100000000000= took minutes)
            orders = {head[i:] + head[:i] for i in range(len(head))} | {"".join(sorted(head)),
                                                                          "".join(sorted(head, reverse=True))}
            return next((f"{twin}=" for twin in sorted(orders - {head}) if not self.is_val(f"{twin}=")), None)
        return None

    def twin_line(self, question: str) -> str:
        """What the line of a held-out `question` says of its trained twin (trained_twin); "" where it has none."""
        twin = self.trained_twin(question)
        if twin is None:
            return ""
        if self.name == "add":
            return f"its twin with the two numbers swapped, {twin}, is a training question with the same answer"
        return f"{twin}, the same digits in another order, is a training question with the same answer"

    @staticmethod
    def is_val(question: str) -> bool:
        return zlib.crc32(question.encode()) % 10 == 0

    def sample_questions(self, split: str, n: int, generator: torch.Generator) -> list[str]:
        return [self.question(digits) for digits in self.sample_digits(split, n, generator).tolist()]

    # --- many examples at once, as tensors ----------------------------------------------------
    # The same examples as the strings above, a whole batch per tensor operation: :ngram on a task draws
    # 2**18 tokens, and one question at a time (its string, its CRC32, its answer, its ids) took 2.4 s of it.
    def sample_digits(self, split: str, n: int, generator: torch.Generator) -> torch.Tensor:
        """n questions of `split` as their digits (n, n_digits): rows of uniform digits, drawn n at a time, kept
        where the question is of that split (is_val), in the order drawn."""
        check_split(split)
        want_val = split == "val"
        kept, have = [], 0
        while have < n:
            digits = torch.randint(10, (n, self.n_digits), generator=generator)
            rows = digits[self.val_rows(digits) == want_val]
            kept.append(rows)
            have += len(rows)
        return torch.cat(kept)[:n]

    def question_bytes(self, digits: torch.Tensor) -> torch.Tensor:
        """Each row's question (n, question_len) as the bytes of its characters: its digits, add's '+', then '='."""
        ones = torch.ones(len(digits), 1, dtype=torch.long)
        if self.name == "add":
            return torch.cat([digits[:, : self.size] + ord("0"), ones * ord("+"), digits[:, self.size :] + ord("0"),
                              ones * ord("=")], dim=1)
        return torch.cat([digits + ord("0"), ones * ord("=")], dim=1)

    def answer_digits(self, digits: torch.Tensor) -> torch.Tensor:
        """Each row's answer as digits (n, answer_len), as answer() writes it."""
        if self.name == "sort":
            return digits.sort(dim=1).values
        if self.name == "reverse":
            return digits.flip(1)
        a, b = digits[:, : self.size], digits[:, self.size :]
        out, carry = torch.zeros(len(digits), self.size + 1, dtype=torch.long), torch.zeros(len(digits), dtype=torch.long)
        for place in range(self.size - 1, -1, -1):  # the last digit first, carrying as on paper
            column = a[:, place] + b[:, place] + carry
            out[:, place + 1], carry = column % 10, column // 10
        out[:, 0] = carry
        return out

    def val_rows(self, digits: torch.Tensor) -> torch.Tensor:
        """is_val of each row's question (n,): the CRC32 of its bytes, one byte of every row at a time."""
        crc = torch.full((len(digits),), 0xFFFFFFFF, dtype=torch.long)
        for byte in self.question_bytes(digits).T:
            crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        return (crc ^ 0xFFFFFFFF) % 10 == 0

    def digit_examples(self, digits: torch.Tensor):
        """encode_examples of the questions whose digits are the rows of `digits`: (x, y), each (n, seq_len)."""
        chars = torch.cat([self.question_bytes(digits), self.answer_digits(digits) + ord("0")], dim=1)
        id_of = torch.zeros(128, dtype=torch.long)  # a byte of "0123456789+=" -> its token id
        for ch, i in self.tokenizer.stoi.items():
            id_of[ord(ch)] = i
        seqs = id_of[chars]  # (n, L)
        x, y = seqs[:, :-1], seqs[:, 1:].clone()
        y[:, : self.question_len - 1] = -1  # as encode_examples: the question is given, not predicted
        return x, y

    # --- batches -----------------------------------------------------------------------------
    def info(self) -> DataInfo:
        held, total = self.held_out_count() or (None, None)
        return DataInfo(self.name, "task", self.description, self.seq_len + 1, self.tokenizer.vocab_size, None, None,
                        tokenizer=self.tokenizer.describe(), questions=total, val_questions=held,
                        shown_name=f"{self.name}:{self.size}")

    def check_fits(self, max_seq_len: int, *, current: int | None = None) -> None:
        """Refused where a question and its answer do not fit the window (`current`: as TextCorpus's)."""
        if max_seq_len < self.seq_len:
            # both ways on, with numbers: add takes sizes 1 to 30, and at the default window only 1 to 20 fit
            # the smaller size first: a raised window may not fit the data held now (a model on a short text)
            fits = [k for k in range(1, self.size) if Task(self.name, k).seq_len <= max_seq_len]
            smaller = (f"choose {self.name}:{fits[-1]}{' or smaller' if fits[-1] > 1 else ''}, or " if fits else "")
            kept = current == self.seq_len  # the window it has is the smallest that fits: no fix that changes nothing
            way = (f"keep max_seq_len={self.seq_len}, the smallest window it fits" if kept else
                   f"raise max_seq_len to {self.seq_len}")
            raise DataError(
                f"task {self.name}:{self.size} needs max_seq_len >= {self.seq_len}, not {max_seq_len}; "
                f"{smaller}{way}", fix=None if kept else {"max_seq_len": self.seq_len}
            )

    def counted(self, ids: list[int]) -> list[bool] | None:
        """Which of the len(ids) - 1 next-token predictions of a text that starts with a question the loss
        counts: its answer's, as `encode_examples` masks them, also where the answer is cut short. What follows
        a whole answer was never trained (answer_complete) and is not counted either. None for a text that does
        not start with a question of this task (every prediction counts, as on any text)."""
        if self.question_of(self.tokenizer.decode(ids)) is None or len(ids) <= self.question_len:
            return None
        return [self.question_len - 1 <= t < self.seq_len for t in range(len(ids) - 1)]

    def encode_examples(self, questions: list[str]):
        seqs = torch.tensor([self.tokenizer.encode(q + self.answer(q)) for q in questions])  # (B, L)
        x, y = seqs[:, :-1], seqs[:, 1:].clone()  # (B, L-1) each
        y[:, : self.question_len - 1] = -1  # the question is given, not predicted: no loss there
        return x, y

    def get_batch(self, split: str, batch_size: int, max_seq_len: int, generator: torch.Generator):
        check_split(split)
        self.check_fits(max_seq_len)
        return self.digit_examples(self.sample_digits(split, batch_size, generator))

    @torch.no_grad()
    def accuracy(self, model, n: int = 500, device="cpu", seed: int = 0) -> float:
        """Exact match on n held-out questions.

        One teacher-forced pass suffices: greedy decoding gets the whole answer right exactly when
        the argmax at every answer position is right given the correct prefix. That needs the causal
        mask: without it (causal=off, `:ablate mask`) the pass reads the answer itself, so such a model
        is decoded greedily instead, one answer token a pass, as `:gen` would.
        """
        with evaluating(model):
            x, y = self.digit_examples(self.sample_digits("val", n, torch.Generator().manual_seed(seed)))
            if not getattr(model, "causal", True):  # a model that does not say is a causal one
                return self._decoded_accuracy(model, x.to(device), y)
            logits, _ = model(x.to(device))
            pred = logits.argmax(dim=-1).cpu()  # (n, L-1)
            answer = y != -1
            correct = ((pred == y) | ~answer).all(dim=1)
            # the count over n in Python's float, not a float32 mean: 94 right of 500 read 0.18799999356269836 in
            # `train --json`, where a script plotting it wants 0.188, the number the count gives
            return int(correct.sum()) / correct.numel()

    def _decoded_accuracy(self, model, x: torch.Tensor, y: torch.Tensor) -> float:
        """Exact match by greedy decoding: each answer token from the question and the answer written so far."""
        text = x[:, : self.question_len]  # each question, up to its '='
        correct = torch.ones(x.shape[0], dtype=torch.bool)
        for k in range(self.answer_len):
            logits, _ = model(text)
            pred = logits[:, -1].argmax(dim=-1)  # (n,)
            correct &= pred.cpu() == y[:, self.question_len - 1 + k]
            text = torch.cat([text, pred[:, None]], dim=1)
        return int(correct.sum()) / correct.numel()  # exact, as accuracy's: no float32 mean


RANDOM_SYMBOLS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"  # random's and repeat's


class RandomTokens:
    """The negative control: uniformly random tokens, fresh every batch. Nothing can be learned."""

    nothing_to_learn = True  # no input tells the next token (core.checks: the blind check has nothing to show)

    def __init__(self, vocab_size: int = 50):
        self.name = "random"
        self.description = f"uniformly random tokens from {count(vocab_size, 'symbol')} (nothing to learn)"
        self.tokenizer = CharTokenizer(RANDOM_SYMBOLS[:vocab_size])
        self.tokenizer.closed = self.name

    def info(self) -> DataInfo:
        return DataInfo(self.name, "task", self.description, None, self.tokenizer.vocab_size, None, None,
                        # with its size, as a task's (sort:4): `:data random:10` showed "random"
                        tokenizer=self.tokenizer.describe(), shown_name=f"{self.name}:{self.tokenizer.vocab_size}")

    def check_fits(self, max_seq_len: int, *, current: int | None = None) -> None:
        pass

    def get_batch(self, split: str, batch_size: int, max_seq_len: int, generator: torch.Generator):
        check_split(split)
        seqs = torch.randint(self.tokenizer.vocab_size, (batch_size, max_seq_len + 1), generator=generator)
        return seqs[:, :-1], seqs[:, 1:]

    def accuracy(self, model, n: int = 500, device="cpu", seed: int = 0) -> None:
        return None


class RepeatedTokens:
    """In-context copying: random tokens, then the same tokens again.

    Each row of the window is blocks of random tokens, each followed by itself: h fresh tokens, the
    same h again, then another block, with h drawn anew for every block, from REPEAT_SHORTEST to half
    the window. Nothing but a repeat's tokens after its first can be predicted, so the loss counts
    those only: ln V at first, near 0 once the model copies: finds where the current token stood
    before and reads the token that came next. Since h varies, the earlier copy is a different
    distance back in every block: no fixed offset does it, only matching content. The textbook
    circuit for this is an induction head (Olsson et al., 2022); `:heads` scores every head on
    repeated random tokens, and says whether one does it that way.
    """

    # Blocks reach half the window, as long as :heads's test blocks: with blocks of at most 16 (tried), the
    # default model copied them (45% right after 1,200 steps), but on blocks of 32 its repeat still cost 5.6
    # nats a token, above chance (ln 50 = 3.9).
    REPEAT_SHORTEST = 4

    def __init__(self, vocab_size: int = 50):
        self.name = "repeat"
        self.description = (f"random tokens from {count(vocab_size, 'symbol')}, then the same again (the loss: "
                            "the repeat's, learned by copying from context)")
        self.tokenizer = CharTokenizer(RANDOM_SYMBOLS[:vocab_size])
        self.tokenizer.closed = self.name

    def info(self) -> DataInfo:
        return DataInfo(self.name, "task", self.description, None, self.tokenizer.vocab_size, None, None,
                        # with its size, as a task's (sort:4): `:data repeat:16` showed "repeat"
                        tokenizer=self.tokenizer.describe(), shown_name=f"{self.name}:{self.tokenizer.vocab_size}")

    def check_fits(self, max_seq_len: int, *, current: int | None = None) -> None:
        if (max_seq_len + 1) // 2 < self.REPEAT_SHORTEST:
            raise DataError(f"repeat needs max_seq_len >= {2 * self.REPEAT_SHORTEST - 1} for two copies of "
                            f"{self.REPEAT_SHORTEST} tokens, not {max_seq_len}; raise max_seq_len")

    def rows(self, n: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """(n, length) ids, each row blocks of random tokens each followed by itself, and (n, length) bool: the
        positions a model could predict (a repeat's tokens after its first)."""
        seqs = torch.randint(self.tokenizer.vocab_size, (n, length), generator=generator)
        known = torch.zeros(n, length, dtype=torch.bool)
        longest = max(self.REPEAT_SHORTEST, length // 2)
        for row in range(n):
            start = 0
            while start < length:
                block = int(torch.randint(self.REPEAT_SHORTEST, longest + 1, (1,), generator=generator))
                end = min(length, start + 2 * block)
                seqs[row, start + block : end] = seqs[row, start : end - block]
                known[row, start + block + 1 : end] = True
                start = end
        return seqs, known

    def get_batch(self, split: str, batch_size: int, max_seq_len: int, generator: torch.Generator):
        check_split(split)
        self.check_fits(max_seq_len)
        seqs, known = self.rows(batch_size, max_seq_len + 1, generator)
        x, y = seqs[:, :-1], seqs[:, 1:].clone()
        y[~known[:, 1:]] = -1  # only a repeat can be predicted: no loss elsewhere
        return x, y

    @torch.no_grad()
    def accuracy(self, model, n: int = 500, device="cpu", seed: int = 0) -> float:
        """The share of a repeat's predictable tokens the model's argmax gets right, on n fresh rows."""
        with evaluating(model):
            seqs, known = self.rows(n, model.config.max_seq_len + 1, torch.Generator().manual_seed(seed))
            logits, _ = model(seqs[:, :-1].to(device))
            right = logits.argmax(dim=-1).cpu() == seqs[:, 1:]
            counted = right[known[:, 1:]]
            return int(counted.sum()) / counted.numel()  # exact, as Task.accuracy's: no float32 mean

    SAMPLE_BLOCK, SAMPLE_AGAIN = 8, 5  # the views' text: 8 random tokens, then the first 5 of them again

    def sample_questions(self, split: str, n: int, generator: torch.Generator) -> list[str]:
        """Texts for the views: SAMPLE_BLOCK random tokens, then the first SAMPLE_AGAIN of them again (so the
        next token is known: the block's next)."""
        blocks = torch.randint(self.tokenizer.vocab_size, (n, self.SAMPLE_BLOCK), generator=generator).tolist()
        return [self.tokenizer.decode(b + b[: self.SAMPLE_AGAIN]) for b in blocks]

    def known_next(self, text: str) -> str | None:
        """The token after a text shaped like the views' sample (a block, then its first SAMPLE_AGAIN tokens again):
        the block's next, which copying finds; None for other text."""
        try:
            ids = self.tokenizer.encode(text)
        except UserError:
            return None
        if len(ids) != self.SAMPLE_BLOCK + self.SAMPLE_AGAIN or ids[self.SAMPLE_BLOCK:] != ids[: self.SAMPLE_AGAIN]:
            return None
        return self.tokenizer.itos[ids[self.SAMPLE_AGAIN]]

    def counted(self, ids: list[int]) -> list[bool] | None:
        """Which of the len(ids) - 1 next-token predictions of a text shaped like the views' sample the loss
        counts (the repeat's after its first, as training counts them: :score, :grad), or None for text of
        another length."""
        if len(ids) != self.SAMPLE_BLOCK + self.SAMPLE_AGAIN:
            return None
        return [t >= self.SAMPLE_BLOCK for t in range(len(ids) - 1)]


class VocabOnly:
    """A stand-in for data that is gone: its tokenizer (from a checkpoint's vocabulary), no text.

    A checkpoint trained on a local file stores the vocabulary, not the file. With this a caller
    can still restore it to generate, inspect or evaluate nothing else; asking for a batch (to
    train or evaluate) says what is missing. `reason` replaces "is not available" when the data
    exists but cannot be used (e.g. its vocabulary changed), and `fix` is then the way on.
    """


    def __init__(self, name: str, vocab, spec: str, reason: str | None = None, fix: str | None = None,
                 trained_on: bool = True):
        self.name = name
        self.spec = spec
        # False: the checkpoint names this data, but its model never trained on it (an older minitf saved a Hugging
        # Face model with the session's corpus as its data): the messages then do not say "trained on"
        self.trained_on = trained_on
        self.reason = reason
        self.fix = fix  # what to do, where putting the file back is not it
        # a character vocabulary, or a subword tokenizer as it is (core.bpe)
        self.tokenizer = CharTokenizer.from_vocab(vocab) if isinstance(vocab, str) else vocab
        self.description = f"the vocabulary of {spec} only ({reason or 'the data is not available'}): generation works, training does not"

    def info(self) -> DataInfo:
        return DataInfo(self.name, "vocabulary", self.description, None, self.tokenizer.vocab_size, None, None,
                        self.tokenizer.unit, self.tokenizer.describe())

    def check_fits(self, max_seq_len: int, *, current: int | None = None) -> None:
        pass  # any context fits: there are no windows to cut

    def get_batch(self, split: str, batch_size: int, max_seq_len: int, generator: torch.Generator):
        whose = "the data this model was trained on" if self.trained_on else "the data its checkpoint names"
        if self.reason is None:
            raise DataError(f"{whose} ({self.spec}) is not available; put the file back to train or evaluate, "
                            f"or {OTHER_DATA}")
        raise DataError(
            f"{whose} ({self.spec}) cannot be used ({self.reason}); "
            + (self.fix or f"put the original file back to train or evaluate, or {OTHER_DATA}")
        )



# --- corpora ---------------------------------------------------------------------------------
def pydoc_text() -> str:
    """The English text of Python's own reference documentation: in every Python install."""
    from pydoc_data.topics import topics

    return "\n".join(topics[k] for k in sorted(topics))


def fetch_shakespeare(url: str | None = None, directory: Path | None = None, timeout: float = 20.0) -> Path:
    """Download tiny Shakespeare once into the cache directory, checked against its SHA-256."""
    target, payload = _kept_or_downloaded(url, directory, timeout)
    if payload is not None:
        _keep(target, payload)
    return target


def shakespeare_text(url: str | None = None, directory: Path | None = None, timeout: float = 20.0) -> str:
    """Tiny Shakespeare's text: the kept copy, or downloaded and kept (fetch_shakespeare). A download that cannot be
    kept (a cache folder that is a file, a full disk) is said and read for this session: it was thrown away, whole and
    checked, and every try downloaded it again to fail alike."""
    target, payload = _kept_or_downloaded(url, directory, timeout)
    if payload is None:
        return target.read_text("utf-8")
    try:
        _keep(target, payload)
    except DataError as e:
        tell = told()
        if tell is not None:
            tell(f"{e}; this session reads the download it has")
    return payload.decode("utf-8")


def _kept_or_downloaded(url: str | None, directory: Path | None, timeout: float) -> tuple[Path, bytes | None]:
    """(the kept copy's path, None) where it is tiny Shakespeare, else (where to keep it, the checked download)."""
    url = url or os.environ.get("MINITF_SHAKESPEARE_URL", "").strip() or SHAKESPEARE_URL  # blank: unset, as paths'
    try:
        target = (directory or cache_dir()) / "tinyshakespeare.txt"
    except UserError:
        if os.environ.get(CACHE_ENV, "").strip():  # the variable's own value is what is wrong: its message says how
            raise
        # no home folder: "set $MINITF_CACHE_DIR" (paths') was no fix in the REPL, where no variable can be set
        raise DataError(f"there is no home folder to keep tiny Shakespeare in ({home_variable()} is not set); "
                        f"{_keep_elsewhere('a folder for it')}") from None
    damaged = None  # a kept copy that is not tiny Shakespeare (cut short, edited): replaced, and said
    try:
        if target.is_file():
            kept = target.read_bytes()
            if _sha256(kept) == SHAKESPEARE_SHA256:
                return target, None
            damaged = f"the kept copy {cut_middle(str(target))} is not tiny Shakespeare ({count(len(kept), 'byte')})"
    except OSError as e:  # a cache shared with another user, whose copy this one may not read: an internal error
        raise DataError(f"cannot read the kept copy of tiny Shakespeare, {cut_middle(str(target))} "
                        f"({e.strerror or e}); remove it, or set MINITF_CACHE_DIR to a folder of your own") from None
    tell = told()
    if tell is not None:  # the front end says so: a download of a minute said nothing until it ended or failed
        again = f"{damaged}: downloading it again" if damaged else "downloading tiny Shakespeare"
        tell(f"{again} ({SHAKESPEARE_BYTES / 1e6:.1f} MB) from {url}, once: it is kept in "
             f"{cut_middle(str(target.parent))}")
    try:
        return target, _download(url, timeout)
    except DataError as e:
        if damaged is None:
            raise
        raise DataError(f"{e} ({damaged}, which a download replaces)") from None


def _download(url: str, timeout: float) -> bytes:
    """Tiny Shakespeare from `url`, checked against its SHA-256 (read as a file of it is: its line endings as "\n",
    a leading byte-order mark dropped), or a DataError that says what went wrong."""
    try:  # Ctrl-C stops a stalled download at once (nothing is written before the whole file is here)
        with cut_short(), urllib.request.urlopen(url, timeout=timeout) as response:
            payload = _read_capped(response, url, SHAKESPEARE_BYTES + DOWNLOAD_MARGIN)
    except DataError:
        raise
    except urllib.error.HTTPError as e:  # the server answered: the connection is there, the URL is what is wrong
        raise DataError(
            f"could not download tiny Shakespeare from {url}: the server answered {e.code} {e.reason}; check the URL "
            "(MINITF_SHAKESPEARE_URL), or download that file yourself and give its path as the data"
        ) from None
    except ValueError as e:  # urllib's "unknown url type": a MINITF_SHAKESPEARE_URL that is no URL
        raise DataError(
            f"could not download tiny Shakespeare from {url} ({e}); set MINITF_SHAKESPEARE_URL to an http(s) URL, "
            "or download that file yourself and give its path as the data"
        ) from None
    except (urllib.error.URLError, OSError) as e:
        # the reason's words without its "[Errno -2]", as every other message says an OSError (its strerror)
        reason = getattr(e, "reason", e)
        reason = getattr(reason, "strerror", None) or reason
        where = "connect to the internet" if url == SHAKESPEARE_URL else "check the URL (MINITF_SHAKESPEARE_URL)"
        raise DataError(
            f"could not download tiny Shakespeare from {url} ({reason}); {where}, "
            "or download that file yourself and give its path as the data"
        ) from None
    # a copy saved with "\r\n" or a byte-order mark is the same text, as a local file of it is (_read_text)
    text = bytes_as_read(payload)
    if _sha256(text) != SHAKESPEARE_SHA256:
        raise DataError(
            f"the file downloaded from {url} is not tiny Shakespeare (SHA-256 mismatch, {count(len(payload), 'byte')}); "
            "check the URL (MINITF_SHAKESPEARE_URL) or use a local file by path"
        )
    return text


def _keep(target: Path, payload: bytes) -> None:
    """Write the download under `target`, whole or not at all, or a DataError that names what is in the way."""
    tmp = target.with_suffix(f".tmp{os.getpid()}-{os.urandom(4).hex()}")  # two downloads at once: two names
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(payload)
        os.replace(tmp, target)  # never leave a half-written file under the final name
    except OSError as e:  # a cache folder under a file, read-only, full
        with contextlib.suppress(OSError):  # a half-written copy (a full disk) goes
            tmp.unlink(missing_ok=True)
        why = _in_the_way(target) or e.strerror or e
        raise DataError(f"downloaded tiny Shakespeare, but could not keep it in {cut_middle(str(target.parent))} "
                        f"({why}); {_keep_elsewhere('a folder you can write')}") from None


def _keep_elsewhere(folder: str) -> str:
    """The fix where tiny Shakespeare cannot be kept in the cache folder: $MINITF_CACHE_DIR, which minitf reads as it
    starts (in the REPL "set MINITF_CACHE_DIR" named nothing the session could do), or a copy of one's own by path."""
    example = "" if on_windows() else f": {CACHE_ENV}=DIR minitf"  # cmd and PowerShell set a variable otherwise
    return (f"start minitf again with {CACHE_ENV} set to {folder}{example}, or save the file yourself and give its "
            "path as the data")


def _in_the_way(target: Path) -> str | None:
    """What stands where the kept copy goes, in words ("Is a directory" was said of a folder that could be written, a
    folder named tinyshakespeare.txt in it; "File exists" of a cache folder's path that is a file), or None."""
    if target.is_dir():
        return f"{cut_middle(str(target))} is a folder"
    return next((f"{cut_middle(str(p))} is a file" for p in (target.parent, *target.parent.parents)
                 if p.exists() and not p.is_dir()), None)


def _read_capped(response, url: str, cap: int) -> bytes:
    """The response's body, refused (DataError) as soon as it is longer than `cap` bytes or takes too long.

    A Content-Length over the cap is refused before a byte is read; without one, the body is read
    in chunks and the download stops at cap + 1 bytes, so memory never holds more than that.
    """
    length = response.headers.get("Content-Length") if getattr(response, "headers", None) is not None else None
    announced = int(length) if length is not None and length.strip().isdigit() else None
    if announced is not None and announced > cap:
        raise DataError(_too_big(url, f"announces {announced:,} bytes", cap))
    chunks, size = [], 0
    deadline = time.monotonic() + DOWNLOAD_SECONDS
    while True:
        # read1: what has come, up to 64 KiB. read() waited for all 64 KiB, so a server that sent a byte a second
        # was never stopped at the deadline, which is checked between reads
        read = getattr(response, "read1", response.read)
        chunk = read(min(2**16, cap + 1 - size))
        if not chunk:
            if announced is not None and size < announced:  # read1 raises nothing at a body cut short: it was
                # called "not tiny Shakespeare (SHA-256 mismatch)", and the user went to fix a URL that was right
                raise DataError(f"the download from {url} ended after {size:,} of its {announced:,} bytes (the "
                                "connection dropped); try again, or download that file yourself and give its path "
                                "as the data")
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            raise DataError(_too_big(url, f"sent more than {cap:,} bytes", cap))
        if time.monotonic() > deadline:
            raise DataError(f"the download from {url} took more than {DOWNLOAD_SECONDS:.0f} s and was stopped; "
                            "try again, or download that file yourself and give its path as the data")


def _too_big(url: str, what: str, cap: int) -> str:
    return (f"the download from {url} {what}, but tiny Shakespeare is {SHAKESPEARE_BYTES:,} bytes (at most {cap:,} "
            "are read); it was stopped. Check the URL (MINITF_SHAKESPEARE_URL), or use a local file by path")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def to_utf8(p: Path, encoding: str) -> str:
    """What converts the file `p` from `encoding` to UTF-8, in words this system runs: iconv's line, or on Windows,
    which has no iconv (and whose prompt reads no '...' quoting), Notepad's Save as. The iconv line was said there too,
    where a file that Notepad saved as ANSI or "Unicode" is the common case of a text that is not UTF-8."""
    if on_windows():
        return NOTEPAD_TO_UTF8
    converted = shlex.quote(str(p.with_name(p.stem + "-utf8" + p.suffix)))
    # iconv's own name: UTF-16LE, not Python's utf-16-le, which glibc's iconv refused ("failed to start conversion
    # processing"), leaving an empty file that minitf then called empty
    named = re.sub(r"-(LE|BE)$", r"\1", encoding.upper())
    return f"iconv -f {named} -t UTF-8 {shlex.quote(str(p))} > {converted}"


NOTEPAD_TO_UTF8 = "open it in Notepad and save it again as UTF-8 (File, Save as, Encoding: UTF-8)"


def read_text_file(path: str | Path, line_endings: bool = False) -> str:
    r"""The text of a UTF-8 file, its line endings read as "\n" (`line_endings`: kept as they are, for a checkpoint
    whose vocabulary holds the "\r" of a file read before they were), or a DataError that says what is wrong."""
    return _read_text(path, line_endings)[0]


def text_file_digest(path: str | Path, line_endings: bool = False) -> str:
    """TextCorpus.digest of the text read_text_file reads from `path`, without a corpus built: from the file's bytes
    where the text is them, else of the text a block at a time (never a second copy of it, as its whole UTF-8)."""
    text, _, _, _, digest = _read_text(path, line_endings)
    return digest if digest is not None else text_digest(text)


def dangling_link(p: Path) -> str:
    """The refusal of a symbolic link whose target is not there (torch-free callers build it too: core.catalog)."""
    try:
        target = os.readlink(p)
    except OSError:
        target = "?"
    return (f"{cut_middle(str(p))} is a symbolic link to {cut_middle(target)}, which does not exist; give the file "
            "it should point to, or link it to one that is there")


def _beside(folder: Path) -> Path:
    """Where a folder's texts joined into one file go: beside it, named as it (`.` and `..` named by what they are:
    the line said `cat ./*.txt > ..txt`)."""
    real = folder.expanduser().resolve()
    return real.parent / (real.name + ".txt") if real.name else real / "joined.txt"


def _read_text(path: str | Path, line_endings: bool = False) -> tuple[str, int, bool, int, str | None]:
    r"""read_text_file's text, how many Windows or old Mac line endings it read as "\n", whether a leading
    byte-order mark was dropped (the text is then one character shorter than `wc -m` counts the file), the
    bytes of a last character the file ends inside of, dropped (a part of a file cut with `head -c`), and the text's
    SHA-256 (TextCorpus.digest) where the file's bytes, less that mark and that cut, are the text's UTF-8 (None where
    line endings were read as "\n": text_digest of the text then)."""
    p = expand(path)
    shown = cut_middle(str(p))
    if (gone := gone_folder(p)) is not None:
        raise DataError(f"cannot read {shown}: {gone}")
    try:
        if p.is_symlink() and not p.exists():  # `ls` lists it: "no such file" of a name it shows said nothing of why
            raise DataError(dangling_link(p))
        if not p.exists():
            where = "" if p.is_absolute() else f" (in {cut_middle(os.getcwd())})"  # minitf started in another folder?
            raise DataError(f"no such file: {shown}{where}; give the path of a UTF-8 text file, or one of "
                            f"{', '.join(CORPORA + TASKS)}")
        if p.is_dir():
            example = _text_file_in(p)
            # a folder of many texts (a corpus of 5,000 poems, one a file): one of them is not what was meant
            joined = (f", or join its {_same_kind(p, example.suffix)} {example.suffix} files into one: cat "
                      f"{shlex.quote(str(p))}/*{example.suffix} > {shlex.quote(str(_beside(p)))}"
                      if example and example.suffix and _same_kind(p, example.suffix) != "1" else "")
            raise DataError(f"{shown} is a directory; the data is one text file: give its path, e.g. "
                            f"{cut_middle(str(example), 200)}{joined}" if example else
                            f"{shown} is a directory with no text file directly in it; give the path of a UTF-8 "
                            "text file")
        if not p.is_file():
            raise DataError(f"{shown} is not a regular file (a device or a pipe?); give the path of a UTF-8 text file")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise DataError(
                f"{shown} is {size / 2**20:,.0f} MiB; minitf reads files up to {MAX_FILE_BYTES // 2**20} MiB (the "
                f"text is held in memory whole): use a part of it, e.g. {_part_of(p, MAX_FILE_BYTES // 2**20)}"
            )
        raw = p.read_bytes()
    except OSError as e:  # unreadable, a name too long, ...
        raise DataError(f"cannot read {shown}: {e.strerror}; check the path and its permissions") from None
    for mark, encoding in _WIDE_BOMS:  # what Notepad saved as "Unicode": text, two or four bytes a character
        if raw.startswith(mark) and b"\x00" in raw and _decodes(raw, encoding):
            # the conversion itself, as for one without the mark (iconv reads the mark and drops it)
            raise DataError(f"{shown} is {encoding} text (it starts with that byte-order mark); convert it to UTF-8: "
                            f"{to_utf8(p, encoding.lower())}")
    for magic, kind, unpack, suffixes in _PACKED:  # a compressed file read whole: "looks binary" said nothing of it
        if magic.match(raw):
            raise DataError(f"{shown} is {kind}-compressed; unpack it first and give the text inside: {unpack} "
                            f"{shlex.quote(str(p))} > {shlex.quote(str(_unpacked(p, suffixes)))}")
    if b"\x00" in raw:
        nuls = raw.count(b"\x00")
        if (inside := _wide_text_inside(raw)) is not None:  # `cat *.txt > all.txt` over a folder of mixed files
            convert = NOTEPAD_TO_UTF8 if on_windows() else "iconv -f UTF-16 -t UTF-8 FILE > FILE-utf8"
            raise DataError(f"{shown} holds {inside[1]} text from byte {inside[0]:,} on (a byte-order mark there, as "
                            f"where files were joined into one); convert that file to UTF-8 before joining: {convert}")
        head = raw[:256]  # the first characters
        for half, start, encoding in ((raw[1::2], head[1::2], "UTF-16-LE"), (raw[0::2], head[0::2], "UTF-16-BE")):
            # UTF-16 saved without a byte-order mark: for text in a Latin script, every other byte is NUL, from the
            # first character on (a UTF-8 text with a UTF-16 one joined after it is not one, and iconv's
            # "conversion" of it wrote nonsense that :data then took)
            # (and reads as text: a binary of small numbers has as many NULs, and reads as control characters)
            if half.count(0) > 0.4 * len(half) and start.count(0) > 0.4 * len(start) and len(raw) % 2 == 0 \
                    and _decodes(raw, encoding.lower()) and _mostly_text(raw.decode(encoding.lower()), WIDE_TEXT):
                raise DataError(f"{shown} is {encoding} text (without a byte-order mark); convert it to UTF-8: "
                                f"{to_utf8(p, encoding.lower())}")
        rest = raw.replace(b"\x00", b"")
        if _decodes(rest, "utf-8-sig") and _mostly_text(rest.decode("utf-8-sig"), TEXT_WITH_NULS):
            # text with NULs in it (a database's export, a pasted binary, one a line of a log): the text is UTF-8, the
            # NULs are not text, and "give a UTF-8 text file" sent the user to convert a file that already is one.
            # Read as text whatever their number (300 in 13.8 kB got "looks binary"); a binary's other bytes are not
            # text (numbers: control characters and bytes UTF-8 has no place for)
            them = "it" if nuls == 1 else "them"
            raise DataError(f"{shown} is UTF-8 text with {count(nuls, 'NUL byte')} in it (the first at offset "
                            f"{raw.index(0):,}), which no text holds; remove {them}: tr -d '\\000' < "
                            f"{shlex.quote(str(p))} > {shlex.quote(str(p.with_name(p.stem + '-clean' + p.suffix)))}")
        if (wide := _utf16_guess(raw)) is not None:
            # UTF-16 saved without a byte-order mark in a script past Latin (Japanese, Chinese): few of its bytes are
            # NUL, only its ASCII characters' (a newline, a space), so the check above for every other byte missed it
            raise DataError(f"{shown} reads as {wide} text (without a byte-order mark); convert it to UTF-8: "
                            f"{to_utf8(p, wide.lower())}")
        raise DataError(f"{shown} looks binary (it contains NUL bytes); give a UTF-8 text file")
    try:
        # utf-8-sig: a byte-order mark some editors put first (Notepad) is no character of the text, and kept it
        # would be one more symbol in the vocabulary that the model learns to write at the start
        decoder = codecs.getincrementaldecoder("utf-8-sig")()
        # not final: a last character the file ends inside of (a part cut with `head -c`, as the message for a file
        # too large says) stays in the decoder, and is dropped, where it read as a file that is not UTF-8 at all
        text = decoder.decode(raw, final=False)
        cut = len(decoder.getstate()[0])
        bom = raw.startswith(codecs.BOM_UTF8)
    except UnicodeDecodeError as e:
        # most such text files are Windows-1252 (Latin-1 and more): a byte a character, every byte but five defined;
        # one with UTF-8's own letters in it (é as two bytes) is UTF-8 with bad bytes, which no conversion mends
        utf8_letters = any(ord(ch) > 127 and ch != "\ufffd" for ch in raw.decode("utf-8", "replace"))
        # Windows-1252 leaves five bytes undefined (0x81, 0x8D, ...); ISO-8859-1 defines all 256, so a file with one of
        # them is read as that (it got "convert it to UTF-8" and no line that does)
        encoding = "cp1252" if _decodes(raw, "cp1252") else "iso-8859-1"
        if not utf8_letters:
            how = to_utf8(p, encoding)
            how = f"; {how}" if how == NOTEPAD_TO_UTF8 else f", which {how} converts"
            name = "Windows-1252 (Latin-1)" if encoding == "cp1252" else "ISO-8859-1 (Latin-1)"
            guess = f": it reads as {name} text{how}"
        else:  # no encoding to name, but the line that converts from the one it is in: it said "convert it to UTF-8"
            # and nothing of how (random bytes 128-255), where Latin-1's message gives iconv's line
            how = to_utf8(p, "ENCODING")
            guess = (f"; {how}" if how == NOTEPAD_TO_UTF8 else
                     f" from the encoding it is in: {how} (iconv -l lists the names ENCODING takes)")
        raise DataError(f"{shown} is not UTF-8 text (bad byte at offset {e.start}); convert it to UTF-8"
                        + guess) from None
    # A line ends in "\n" whatever wrote the file, as Python's text mode reads it: the "\r" of Windows' "\r\n" (and
    # an old Mac's lone "\r") kept would be a symbol of the vocabulary, which :gen writes as "\r" at each line's end
    converted, digest = 0, None
    if not line_endings and "\r" in text:
        del raw  # gone before the text is copied (twice, by the replaces): not three copies of a large file at once
        converted = text.count("\r")
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    else:
        # The text's UTF-8 is the file's bytes less the mark and the cut (a strict decode, encoded again, gives the
        # same bytes): hashed in place, where text.encode() made another copy of the file
        digest = hashlib.sha256(memoryview(raw)[len(codecs.BOM_UTF8) if bom else 0:len(raw) - cut]).hexdigest()
        del raw
    # isspace, not strip: a text that ends in a newline was copied whole by strip() to be looked at
    if not text or text.isspace():
        what = "is empty" if not text else f"holds only whitespace ({count(len(text), 'character')})"
        raise DataError(f"{shown} {what}; give a file that contains text")
    return text, converted, bom, cut, digest


def _part_of(p: Path, mib: int) -> str:
    """The line that writes the first `mib` MiB of the file `p` beside it, as FILE-part: what a text too large is
    answered with."""
    part = shlex.quote(str(p.with_name(p.stem + "-part" + p.suffix)))
    return f"head -c {mib}M {shlex.quote(str(p))} > {part}"


def _text_file_in(folder: Path, most: int = 1000) -> Path | None:
    """The first file of `folder` (by name, hidden ones and subfolders aside, `most` entries looked at) that reads as
    UTF-8 text at its start, or None: the example a folder given as the data is answered with."""
    import codecs
    import itertools

    try:
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in itertools.islice(entries, most)
                           if not e.name.startswith(".") and e.is_file())
        for name in names:
            with open(folder / name, "rb") as f:
                head = f.read(4096)
            try:  # an incremental decoder: a character cut at the 4,096th byte is no error
                codecs.getincrementaldecoder("utf-8")().decode(head, final=False)
            except UnicodeDecodeError:
                continue
            if head.strip() and b"\x00" not in head:
                return folder / name
    except OSError:
        pass
    return None


def _same_kind(folder: Path, suffix: str, most: int = 100_000) -> str:
    """How many files of `folder` end in `suffix`, in words ("5,000"; "over 100,000" past `most` entries)."""
    import itertools

    try:
        with os.scandir(folder) as entries:
            looked = list(itertools.islice(entries, most + 1))
    except OSError:
        return "1"
    n = sum(1 for e in looked[:most] if e.name.endswith(suffix) and not e.name.startswith("."))
    return f"over {n:,}" if len(looked) > most else f"{n:,}"


def _wide_text_inside(raw: bytes) -> tuple[int, str] | None:
    """(offset, encoding) of UTF-16 text that starts with its byte-order mark past the start of `raw` (a file made by
    joining a UTF-16 one after others), or None. The text after the mark must read as UTF-16 with every other byte
    NUL, as Latin-script text does, so that a mark's two bytes by chance in a binary file are not taken for one."""
    for mark, encoding, nuls in ((b"\xff\xfe", "UTF-16-LE", 1), (b"\xfe\xff", "UTF-16-BE", 0)):
        at, looked = raw.find(mark, 1), 0
        while at > 0 and looked < 64:  # a binary file full of the two bytes is binary: its first places suffice
            looked += 1
            after = raw[at + 2: at + 4098]
            after = after[: len(after) // 2 * 2]
            if after and after[nuls::2].count(0) > 0.4 * (len(after) // 2) and _decodes(after, encoding.lower()):
                return at, encoding
            at = raw.find(mark, at + 1)
    return None


# What a compressed file starts with, the line that writes its text to stdout, and the suffixes it is named with.
# The stdout form runs for any name: `gunzip -k packed.txt` answered "unknown suffix -- ignored" (unxz and unzstd
# refuse so too), and `bunzip2 -k b.txt` wrote b.txt.out; the packed file is left as it is
# (bzip2's whole header, block size and block magic: a text may start with "BZh")
_PACKED = ((re.compile(re.escape(b"\x1f\x8b")), "gzip", "gzip -dc", (".gz",)),
           (re.compile(rb"BZh[1-9]1AY&SY"), "bzip2", "bzip2 -dc", (".bz2",)),
           (re.compile(re.escape(b"\xfd7zXZ\x00")), "xz", "xz -dc", (".xz",)),
           (re.compile(re.escape(b"\x28\xb5\x2f\xfd")), "zstd", "zstd -dc", (".zst",)),
           (re.compile(re.escape(b"PK\x03\x04")), "zip", "unzip -p", (".zip",)))


def _unpacked(p: Path, suffixes: tuple[str, ...]) -> Path:
    """Where the text of the packed file `p` goes: its name less the compression's suffix (text.txt.gz: text.txt),
    ".txt" added to a name left without one; never `p` itself (`gzip -dc packed.txt > packed.txt` empties the file
    before gzip reads it) nor a file already there, which `>` would write over without a word."""
    out = p.with_suffix("") if p.suffix.lower() in suffixes else p
    out = out if out.suffix else out.with_name(out.name + ".txt")
    return out if out != p and not out.exists() else out.with_name(out.stem + "-unpacked" + out.suffix)


TEXT_WITH_NULS = 0.75  # the share of a NUL-holding file's other characters that are printable, for it to be text
WIDE_TEXT = 0.9  # the share of a file read as UTF-16 that is printable, for it to be taken for UTF-16 text


def _mostly_text(text: str, share: float) -> bool:
    """Whether at least `share` of `text`'s characters print or are whitespace (a line's end, a tab)."""
    return bool(text) and sum(ch.isprintable() or ch.isspace() for ch in text) >= share * len(text)


def _utf16_guess(raw: bytes) -> str | None:
    """"UTF-16-LE" or "UTF-16-BE" where `raw` decodes cleanly as that and reads as text (WIDE_TEXT), the one that
    reads better where both do; else None. Random bytes almost never decode cleanly (a lone surrogate), and a binary
    of small numbers reads as control characters."""
    if len(raw) % 2:
        return None
    best, score = None, WIDE_TEXT
    for encoding in ("UTF-16-LE", "UTF-16-BE"):
        try:
            text = raw.decode(encoding.lower())
        except UnicodeDecodeError:
            continue
        share = sum(ch.isprintable() or ch.isspace() for ch in text) / max(1, len(text))
        if share >= score and (best is None or share > score):
            best, score = encoding, share
    return best


def _decodes(raw: bytes, encoding: str) -> bool:
    try:
        raw.decode(encoding)
    except UnicodeDecodeError:
        return False
    return True


# UTF-32's marks first: UTF-32-LE's starts with UTF-16-LE's
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
              (b"\xfe\xff", "UTF-16"))


class TokenizerOnly(VocabOnly):
    """A loaded model's tokenizer where the session's data cannot be read by it: generation works, training does not.
    `tokenizer`: a tokenizer, or a checkpoint's vocabulary (as VocabOnly takes it).

    `why`: why not, in words; by default the data is a task of characters. A text it cannot read (a character
    the tokenizer lacks, too short a text, a file that is gone) says that instead: the data is text there."""

    def __init__(self, tokenizer, spec: str, why: str | None = None, short=None):
        super().__init__(Path(spec).name or spec, tokenizer, spec)
        self.why = why
        # (spec, TextCorpus): the session's text read by the tokenizer, too short for the window the model came with;
        # a window it fits (`:set max_seq_len=N`, RoPE keeps the weights) takes it up again
        self.short = short
        self.description = (f"{spec}'s tokenizer only ({self.tokenizer.describe()}): generation works, training needs "
                            + (f"text it reads ({why})" if why else "text data"))

    def get_batch(self, split: str, batch_size: int, max_seq_len: int, generator: torch.Generator):
        if self.short is not None:  # too short for this window: said with its own numbers, not the load's
            try:
                self.short[1].check_fits(max_seq_len)
            except DataError as e:
                raise DataError(f"this model reads {self.tokenizer.describe()}, and {self.short[0]} read by it is too "
                                f"short ({str(e).split('; ')[0]}); choose a longer text or a smaller max_seq_len")
        if self.why:
            raise DataError(f"this model reads {self.tokenizer.describe()}, and the data was not read by it "
                            f"({self.why}); choose text it reads to train or evaluate it")
        raise DataError(f"this model reads {self.tokenizer.describe()} and the data is a task of characters; "
                        "choose text data (a corpus or a file) to train or evaluate it")


def lasting_spec(spec: str, read_here: bool = False) -> str:
    """`spec` as it reads from any folder: a file's path made absolute, built-in data as it is.

    A checkpoint keeps this, so that `:load` from another folder finds the file a relative path named. A task's
    size is kept in digits: `sort:1e1` is kept as sort:10, which any minitf reads. `read_here`: this process read
    the file from this folder, so a relative path that names nothing now (deleted since) is made absolute too; one
    that came from elsewhere (an older checkpoint's relative path) stays as it came.
    """
    name, colon, arg = spec.strip().partition(":")
    if name in TASKS and colon and not arg.strip():  # `sort:` is sort at its default size: said and kept as `sort`
        return name
    if name in TASKS and arg:
        try:
            return f"{name}:{whole_number(name, arg)}"
        except UserError:
            return spec
    if name in CORPORA + TASKS:
        return spec
    try:
        path = Path(spec).expanduser()
        if read_here and not path.exists():  # deleted since it was read: where it was (kept as typed, a :load in
            return str(path.resolve())  # another folder blamed "an older minitf" and looked in its own folder)
        if not path.is_file():
            return spec
        # a link's target whose name a checkpoint cannot keep (a tab: unkept_path) is named by the link, made absolute
        # as given: the link is the fix :data's refusal of that name gives
        resolved = str(path.resolve())
        return resolved if unkept_path(resolved) is None else str(path.absolute())
    except (OSError, RuntimeError, ValueError):  # a path too long or looping: keep it as given
        return spec


def load_data(spec: str, tokenizer=None, line_endings: bool = False):
    r"""A dataset from its spec: `pydoc`, `shakespeare`, `sort[:N]`, `reverse[:N]`, `add[:N]`, `random[:V]`,
    `repeat[:V]`, or a path.

    `tokenizer` (core.bpe, or None for characters) reads a corpus; tasks are always characters. `line_endings`: a
    file's "\r" kept (read_text_file). A path may be a pathlib.Path."""
    if isinstance(spec, os.PathLike):
        spec = os.fspath(spec)
    if not isinstance(spec, str):
        raise TypeError(f"load_data takes a name or a path, got {type(spec).__name__}; e.g. load_data('sort') or "
                        "load_data('notes.txt')")
    spec = spec.strip()
    if not spec:
        raise DataError(f"no data named; choose one of {', '.join(CORPORA + TASKS)} or a file path")
    name, _, arg = spec.partition(":")
    if name == "pydoc" and not arg:
        return TextCorpus("pydoc", pydoc_text(), "Python's reference documentation (pydoc_data.topics)", tokenizer)
    if name == "shakespeare" and not arg:
        return TextCorpus("shakespeare", shakespeare_text(), "tiny Shakespeare (karpathy/char-rnn)",
                          tokenizer)
    if name in TASKS:
        default, low, high = TASK_SIZES[name]
        vocabulary = name in ("random", "repeat")
        sizes = f"{name} takes a {'vocabulary ' if vocabulary else ''}size from {low} to {high}"
        try:
            size = _parse_size(name, arg, default)
        except NumberTooLarge:  # random:1e400, past a float: out of the range as random:1e40 is, not "no number"
            side = "small" if arg.strip().startswith("-") else "large"
            raise DataError(f"{name}:{cut_middle(arg.strip(), 40)} is far too {side}; {sizes}, e.g. {name}:{default}"
                            ) from None
        got = size if abs(size) < 10**12 else arg.strip()  # sort:1e5000 as typed, not its 5,001 digits
        if not low <= size <= high:
            raise DataError(f"{sizes}, got {got}")
        if vocabulary:
            return RandomTokens(size) if name == "random" else RepeatedTokens(size)
        return Task(name, size)
    if (problem := unkept_path(spec) or no_file_named(spec)) is not None:  # a URL, pydoc:2, two files: no "no such
        raise DataError(problem)  # file"; a tab in the path, which a checkpoint cannot keep
    stamp = file_stamp(spec)  # before the read: a change during it makes the next stamp differ, never the same
    # Out of memory while the file is read or its ids made: said of the file, with the fix for a file too large (a
    # part of it). Left to the front door, it was "lower batch_size, max_seq_len or the model size", which no
    # reading depends on. Raised once the except block is left, so that what the read held (the file's bytes, the
    # text, held by the error's traceback) is freed first
    try:
        return _file_corpus(spec, tokenizer, line_endings, stamp)
    except MemoryError:
        pass
    except RuntimeError as e:  # torch's allocator's: "DefaultCPUAllocator: can't allocate memory"
        if not is_out_of_memory(e):
            raise
    p = expand(spec)
    try:
        mib = p.stat().st_size / 2**20
    except OSError:
        mib = 0.0
    raise DataError(f"{cut_middle(str(p))} ({mib:,.0f} MiB) does not fit in the memory left: minitf holds the text "
                    "whole, as a string and as its token ids; use a part of it, e.g. "
                    f"{_part_of(p, max(1, int(mib // 2)))}, or close other programs")


def _file_corpus(spec: str, tokenizer, line_endings: bool, stamp) -> TextCorpus:
    """load_data's corpus of the file `spec`."""
    text, converted, bom, cut, digest = _read_text(spec, line_endings)
    # the characters :data counts are the text's, which a file's "\r\n" counted twice in (wc -m), and its leading
    # byte-order mark once
    read_as = f", its {count(converted, 'line ending')} \\r\\n or \\r read as \\n" if converted else ""
    read_as += ", its leading byte-order mark (U+FEFF) dropped" if bom else ""
    read_as += f", its last character dropped (the file ends {count(cut, 'byte')} into it)" if cut else ""
    # a local copy is the same data (and recipe); only a text of its length can be (its digest is then worked out
    # here, where the file's "\r\n" were read as "\n", and a larger text's is left for a save to ask)
    if len(text) == SHAKESPEARE_CHARS:
        digest = digest if digest is not None else text_digest(text)
        if digest == SHAKESPEARE_SHA256:
            return TextCorpus("shakespeare", text, f"tiny Shakespeare (local file {Path(spec).expanduser()}{read_as})",
                              tokenizer, stamp=stamp, digest=digest, line_endings=line_endings)
    return TextCorpus(Path(spec).name, text, f"local file {Path(spec).expanduser()}{read_as}", tokenizer, stamp=stamp,
                      recipe_key=spec, digest=digest, line_endings=line_endings)


def file_stamp(spec: str) -> tuple[int, int, int] | None:
    """What changes when a data file is written or replaced: its size, modification time and inode. None for built-in
    data, and for a path that is not there (or cannot be asked)."""
    if spec.strip().partition(":")[0] in CORPORA + TASKS:
        return None
    try:
        st = Path(spec.strip()).expanduser().stat()
    except (OSError, RuntimeError, ValueError):
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def reading_notice(spec: str) -> str | None:
    """What to say before load_data reads `spec`, where it names a file large enough to take seconds; else None."""
    if spec.strip().partition(":")[0] in CORPORA + TASKS:
        return None
    try:
        size = Path(spec.strip()).expanduser().stat().st_size
    except (OSError, RuntimeError, ValueError):
        return None  # read_text_file says why
    # nothing is read of a file past MAX_FILE_BYTES: its refusal comes at once ("reading b300.txt (300 MiB): a few
    # seconds" came first, then the refusal)
    if size <= SLOW_FILE_BYTES or size > MAX_FILE_BYTES:
        return None
    return (f"reading {cut_middle(Path(spec.strip()).name, 60)} ({size / 2**20:,.0f} MiB): a few seconds; "
            "Ctrl-C stops it and keeps the data as it is")


def _parse_size(name: str, arg: str, default: int) -> int:
    if not arg:
        return default
    try:  # as every whole number reads (core.numbers): sort:1e1 is sort:10, random:1k is random:1000
        return whole_number(name, arg)
    except NumberTooLarge:
        raise
    except UserError:
        raise DataError(f"{name}:{arg}: the size after ':' must be a whole number, e.g. {name}:{default}") from None
