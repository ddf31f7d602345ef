"""Subword tokenizers (the `tokenizers` library) behind the interface of the character tokenizer.

A character tokenizer has one token per character; a byte-pair encoding (BPE) starts from bytes
and merges the pairs that occur most often into new tokens, so " the" is one token and a text
takes about four times fewer tokens than characters. GPT-2 and Llama read text this way.

`SubwordTokenizer` answers what the rest of the lab asks of a tokenizer (core.data's CharTokenizer):
`encode`, `decode`, `vocab_size`, `itos` (what each id reads as, for the views: a piece such as
" the", never a bare id), `stoi` and `vocab` (the whole tokenizer as JSON: two tokenizers are the
same exactly when their JSON is). It is built from a tokenizer.json (a Hugging Face folder's, or a
checkpoint's, never a pickle), from GPT-2's vocab.json and merges.txt, or trained on a text
(`train_bpe`, `:set tokenizer=bpe:N`).
"""

from __future__ import annotations

import contextlib
import functools
import json
from dataclasses import dataclass
from typing import Callable

from .config import MIN_BPE_TOKENS, parse_tokenizer
from .errors import DataError
from .words import count


def _tokenizers():
    try:
        import tokenizers
    except ImportError:
        raise DataError("subword tokenizers need the tokenizers package; install it "
                        "(pip install tokenizers)") from None
    return tokenizers


def _panic(e: BaseException) -> bool:
    """Whether `e` is a panic of the tokenizers library's Rust code: pyo3 raises it as its PanicException, which
    derives from BaseException alone (not Exception), so that `except Exception` lets it through and it ended the
    session (a regular expression that backtracks without end: "Onig: Regex search error: retry-limit-in-match
    over"). The class cannot be imported (pyo3 makes it at run time), so it is told from what else a BaseException
    is: Ctrl-C, an exit, a generator closed, which keep their way."""
    return not isinstance(e, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))


@contextlib.contextmanager
def _library_call(what: str):
    """A call into the tokenizers library, whose panic (`_panic`) becomes one line (a DataError) and the session
    goes on. The second line of defence: a checkpoint's tokenizer of a shape minitf does not keep is refused at its
    load (kept_tokenizer_problem), but a Hugging Face folder's tokenizer.json is the publisher's, read as it is."""
    try:
        yield
    except BaseException as e:
        if not _panic(e):
            raise
        reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise DataError(f"the tokenizer failed inside the tokenizers library while {what} ({reason}); nothing "
                        "changed: use another text, or a model with another tokenizer") from None


class SubwordTokenizer:
    """A `tokenizers.Tokenizer`, padded to `vocab_size` ids where a model's embedding has more rows.

    GPT-2's embedding has exactly its tokenizer's 50,257 ids; some models round theirs up. The ids
    past the tokenizer's own read as "<unused N>" and are never produced by `encode`.
    """

    kind = "bpe"
    unit = "token"  # what one token is, in messages

    def __init__(self, tokenizer, vocab_size: int | None = None):
        self.tokenizer = tokenizer
        self.own_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._vocab_size = max(vocab_size or 0, self.own_size)
        self._itos: list[str] | None = None
        self._stoi: dict[str, int] | None = None
        self._json: str | None = None
        self._kind: str | None = None  # describe()'s words
        self._cuts: bool | None = None  # whether encode may read a long text in pieces (cuts_at_lines)

    @classmethod
    def from_json(cls, text: str, vocab_size: int | None = None, where: str = "the tokenizer") -> SubwordTokenizer:
        tokenizers = _tokenizers()
        try:
            return cls(tokenizers.Tokenizer.from_str(text), vocab_size)
        except Exception as e:  # the library's own error type: malformed JSON, an unknown model
            reason = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
            raise DataError(f"{where} is not a tokenizer the tokenizers library reads ({reason}); "
                            "use the tokenizer.json of the same model") from None

    @classmethod
    def from_vocab_merges(cls, vocab: dict, merges: list[tuple[str, str]], vocab_size: int | None = None):
        """GPT-2's older pair of files: byte-level BPE from vocab.json and merges.txt."""
        tokenizers = _tokenizers()
        bpe = tokenizers.models.BPE(vocab=vocab, merges=merges)
        tokenizer = tokenizers.Tokenizer(bpe)
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tokenizers.decoders.ByteLevel()
        return cls(tokenizer, vocab_size)

    # --- the interface every tokenizer answers ------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def vocab(self) -> str:
        """The whole tokenizer as JSON (what a checkpoint stores, and what tells two tokenizers apart)."""
        if self._json is None:
            self._json = self.tokenizer.to_str()
        return self._json

    @property
    def itos(self) -> list[str]:
        """What each id reads as on its own inside a text: " the", "\\n", a byte of a longer character as "�".
        Inside, not at the start: Llama 2's decoder drops the space a whole text starts with, so "▁the" decoded
        alone read "the"; it is decoded after itself, as decode_after does."""
        if self._itos is None:
            ids = range(self.own_size)
            with _library_call("reading its tokens"):
                alone = self.tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
                twice = self.tokenizer.decode_batch([[i, i] for i in ids], skip_special_tokens=False)
            pieces = [_added(head, whole, head) for head, whole in zip(alone, twice)]  # each after itself
            pieces += [f"<unused {i}>" for i in range(self.own_size, self._vocab_size)]
            self._itos = pieces
        return self._itos

    @property
    def stoi(self) -> dict[str, int]:
        """A piece -> the first id that reads as it (pieces of broken characters can repeat)."""
        if self._stoi is None:
            stoi: dict[str, int] = {}
            for i, piece in enumerate(self.itos):
                stoi.setdefault(piece, i)
            self._stoi = stoi
        return self._stoi

    def encode(self, text: str) -> list[int]:
        if len(text) > PIECE_CHARS and self.cuts_at_lines():
            # The library reads one long text about 2.5 times slower than the same text in pieces of a few thousand
            # characters (20 MB: some 19 s against 7); cut only where the pre-tokenizer splits anyway, the ids are
            # the same (text_pieces)
            encode = self.tokenizer.encode
            with _library_call("reading a text"):
                return [i for piece in iter_pieces(text) for i in encode(piece, add_special_tokens=False).ids]
        # Byte-level BPE encodes every text; a tokenizer without byte fallback may meet a character it lacks.
        with _library_call("reading a text"):
            encoding = self.tokenizer.encode(text, add_special_tokens=False)
        ids, unknown = encoding.ids, self.tokenizer.token_to_id("<unk>")
        # "<unk>" written in the text is that token (WikiText's files have thousands): only a character read as it is
        if unknown is not None and unknown in ids and any(i == unknown and text[a:b] != "<unk>"
                                                          for i, (a, b) in zip(ids, encoding.offsets)):
            raise DataError("the text has characters this tokenizer does not know (they read as <unk>); "
                            "remove them")
        return ids

    def encode_tensor(self, text: str, dtype, start: int = 0, end: int | None = None):
        """encode(text[start:end]) as a 1-D tensor of `dtype` (torch.uint8, int16 or int32): the same ids, with no
        Python list of them and no copy of the characters. Each piece's ids go straight into a compact array: a list
        costs some 30 bytes an id where int16 takes 2 (bpe:512 on a text of 100 MB peaked at 2 GB; 10 M characters
        grew the memory by 148 MB for 9 MB of ids). core.data reads a corpus's splits through here, by range. A
        tokenizer that cannot be read in pieces (cuts_at_lines) reads the slice whole, the library's list of ids
        then being what it gives."""
        import array

        import numpy as np
        import torch

        end = len(text) if end is None else end
        kind = torch.empty(0, dtype=dtype).numpy().dtype
        # the array type of the tensor's width and sign (uint8: B, int16: h, int32: i), found by its numpy type:
        # 'i' and 'l' differ in size between platforms
        code = next(c for c in ("B", "h", "i", "l", "q") if np.dtype(c) == kind)
        if end - start > PIECE_CHARS and self.cuts_at_lines():
            ids = array.array(code)
            encode = self.tokenizer.encode
            with _library_call("reading a text"):
                for piece in iter_pieces(text, PIECE_CHARS, start, end):
                    ids.extend(encode(piece, add_special_tokens=False).ids)
        else:
            ids = array.array(code, self.encode(text[start:end]))
        # the tensor shares the array's memory (numpy's view keeps the array alive): no second copy of the ids
        return torch.from_numpy(np.frombuffer(ids, dtype=kind)) if len(ids) else torch.empty(0, dtype=dtype)

    def cuts_at_lines(self) -> bool:
        """Whether a text read in text_pieces' pieces gives the ids of the whole: a byte-level BPE as train_bpe makes
        one or GPT-2's (its pre-tokenizer regex, no prefix space, no normalizer, no unknown token, added tokens that
        cannot meet a cut). Others may not: a Metaspace or a prefix space adds a space to each piece.

        An added token (GPT-2's <|endoftext|>) is found before the pre-tokenizer splits the rest, and a cut comes just
        before a newline after a non-space: one without a newline of its own lies wholly on one side of every cut,
        and the text beside it splits as in the whole. One that takes the whitespace after it (rstrip) would take
        the newline a cut leaves to the next piece, and one holding a newline may cross a cut: with either the text
        is read whole. (A byte-level BPE of 2,048 tokens with GPT-2's <|endoftext|> read tiny Shakespeare 18 times, 19
        MiB, in 16.1 s whole and 11.3 s in pieces, medians of 2 on a Xeon with AMX: whole before, for that token.)"""
        if self._cuts is None:
            spec = json.loads(self.vocab)
            pre, model = spec.get("pre_tokenizer") or {}, spec.get("model") or {}
            added = spec.get("added_tokens") or []
            self._cuts = (spec.get("normalizer") is None
                          and all("\n" not in token.get("content", "\n") and not token.get("rstrip") for token in added)
                          and pre.get("type") == "ByteLevel" and not pre.get("add_prefix_space")
                          and pre.get("use_regex", True) and model.get("type") == "BPE"
                          and model.get("unk_token") is None and not model.get("dropout"))
        return self._cuts

    def decode(self, ids) -> str:
        with _library_call("writing tokens as text"):
            return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def describe(self) -> str:
        """The kind in words, from the tokenizer's JSON: GPT-2's and Llama 3's read bytes ("byte-level BPE"), Llama
        2's reads characters and spells one it lacks as bytes ("BPE with byte fallback")."""
        if self._kind is None:
            spec = json.loads(self.vocab)
            model = spec.get("model") or {}
            byte_level = "ByteLevel" in _types(spec.get("pre_tokenizer")) | _types(spec.get("decoder"))
            kind = model.get("type") or "subword"
            self._kind = (("byte-level BPE" if byte_level else "BPE with byte fallback" if model.get("byte_fallback")
                           else "BPE") if kind == "BPE" else f"{kind} tokenizer")
        return f"{self._kind}, {count(self.vocab_size, 'token')}"

    def merges(self, text: str) -> BpeMerges | None:
        """BPE worked out on `text`, piece by piece: the pre-tokenizer's pieces, each from its bytes, merging at
        every step the adjacent pair learned first (the lowest rank), every place it occurs (GPT-2's rule).

        None where this is not a plain BPE (another model kind, byte fallback, a word-level tokenizer):
        the steps would not be the tokenizer's. The result says whether the steps end on the library's own
        tokens for the whole text (`BpeMerges.agrees`), which the caller checks rather than assumes.
        """
        model = json.loads(self.vocab).get("model", {})
        if model.get("type") != "BPE" or model.get("byte_fallback"):
            return None
        vocab = model["vocab"]
        rank = {tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m): r for r, m in enumerate(model["merges"])}
        normalizer, pre = self.tokenizer.normalizer, self.tokenizer.pre_tokenizer
        with _library_call("splitting a text into pieces"):
            normal = normalizer.normalize_str(text) if normalizer is not None else text
            pieces = pre.pre_tokenize_str(normal) if pre is not None else [(normal, (0, len(normal)))]
        found = []
        for piece, _ in pieces:
            symbols = list(piece)
            if any(sym not in vocab for sym in symbols):
                return None  # a byte the vocabulary lacks: not a byte-level BPE
            steps = []
            whole = bool(model.get("ignore_merges")) and piece in vocab  # Llama 3: a word in the vocabulary is taken
            if whole:
                symbols = [piece]
            while not whole:
                pairs = {(x, y) for x, y in zip(symbols, symbols[1:]) if (x, y) in rank}
                if not pairs:
                    break
                first = min(pairs, key=rank.__getitem__)
                symbols = _merged(symbols, first)
                steps.append(MergeStep(vocab[first[0]], vocab[first[1]], rank[first], [vocab[s] for s in symbols]))
            ids = [vocab[s] for s in symbols]
            found.append(PieceMerges([vocab[s] for s in piece], steps, ids, whole))
        return BpeMerges(found, [i for piece in found for i in piece.ids] == self.encode(text))


# The regular expressions a checkpoint's tokenizer may split text by: those of the tokenizers minitf writes or keeps.
# train_bpe and GPT-2's vocab.json + merges.txt write none (ByteLevel's own regex is GPT-2's, inside the library);
# a Hugging Face folder of GPT-2 may spell GPT-2's out, Llama 3's splits by its own before its ByteLevel, and a
# character model's (characters_as_tokenizer) takes one character at a time. Llama 2's tokenizer replaces plain
# strings, no regex.
GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
CHARACTERS_PATTERN = r"[\s\S]"
KEPT_PATTERNS = (GPT2_PATTERN, LLAMA3_PATTERN, CHARACTERS_PATTERN)


@functools.lru_cache(maxsize=4)  # a save asks of the same text at each autosave (Llama 3's is 9 MB of JSON)
def kept_tokenizer_problem(text: str) -> str | None:
    """Why the tokenizer.json `text` is not one a checkpoint keeps, in words ("splits text by a regular expression
    ..."); None where it is. What a load of a checkpoint refuses and a save does not write (core.checkpoint).

    A checkpoint's tokenizer is one minitf wrote: a BPE train_bpe trained, or a Hugging Face folder's tokenizer that
    came with its model (GPT-2's, Llama 2's, Llama 3's, a character model's). Its parts are the library's own code,
    with one exception: a regular expression (a Split pre-tokenizer's pattern, a Replace normalizer's or decoder's)
    is the file's. A file edited to split by `(a+)+$` made the library panic on 32 a's ("retry-limit-in-match
    over"), which ended the session; so a regex must be one of KEPT_PATTERNS, every one of which reads a million
    spaces or letters in under a second. Nor may BPE drop merges at random (dropout): the same text would read as
    other tokens at each encode, and a checkpoint's data compared with its vocabulary would differ from itself.
    Decision: a Hugging Face folder itself is not held to this (its tokenizer.json is its publisher's, read as
    transformers reads it, and a Llama-like model may split by another regex); a panic of the library while it
    reads a text is caught there (`_library_call`), and a save of such a tokenizer is refused, as its load would be.
    """
    try:
        spec = json.loads(text)
    except (ValueError, RecursionError):
        return None  # not JSON: the library's own reading says what is wrong (SubwordTokenizer.from_json)
    if not isinstance(spec, dict):
        return None
    # the parts that may hold one (the model's vocabulary and merges, megabytes of Llama 3's, hold none)
    for pattern in _regexes([spec.get(part) for part in ("normalizer", "pre_tokenizer", "decoder", "post_processor")]):
        if pattern not in KEPT_PATTERNS:
            shown = pattern if len(pattern) <= 40 else pattern[:37] + "..."
            return (f"splits text by a regular expression minitf never writes ({shown!r}), which can make the "
                    "tokenizers library panic on a text")
    dropout = (spec.get("model") or {}).get("dropout") if isinstance(spec.get("model"), dict) else None
    if dropout not in (None, 0, 0.0):
        return f"drops merges at random (BPE dropout {dropout!r}), so a text would read as other tokens each time"
    return None


def _regexes(part) -> list[str]:
    """Every regular expression in a tokenizer.json part (`{"Regex": pattern}`, at any depth)."""
    found, stack = [], [part]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "Regex" in value:
                found.append(value["Regex"] if isinstance(value["Regex"], str) else repr(value["Regex"]))
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


PIECE_CHARS = 1 << 12  # text_pieces' length: pieces of 4 to 64 K characters read about as fast; 256 K slower


def text_pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """iter_pieces' pieces of the whole `text`, as a list."""
    return list(iter_pieces(text, size))


def iter_pieces(text: str, size: int = PIECE_CHARS, start: int = 0, end: int | None = None):
    """`text[start:end]` cut into pieces of about `size` characters or more, each cut just before a newline that
    follows a character other than whitespace: `text[start:end]` is their concatenation.

    GPT-2's pre-tokenizer splits there whatever the text around: none of its patterns (`'s`, ` ?\\p{L}+`,
    ` ?\\p{N}+`, ` ?[^\\s\\p{L}\\p{N}]+`, `\\s+(?!\\S)`, `\\s+`) matches a non-space followed by a newline, and
    the one that looks ahead (`\\s+(?!\\S)`) looks one character past whitespace, never past a non-space. So no
    merge crosses the cut and each piece's ids are the whole's. A cut after the newline would not do: "  \\n" at
    the end of a piece is one word, and "  " and "\\n" where a letter follows. Python's isspace holds every
    character the regex's \\s does, so a character it calls no space is \\S there too.

    One piece at a time, each found inside `text` itself: a list of them, and the slice a corpus's split was taken
    as first, were two more copies of a text of 100 MB (core.data reads its splits through here, by range)."""
    end = len(text) if end is None else end
    while True:
        cut = text.find("\n", start + size, end)
        while cut > 0 and text[cut - 1].isspace():
            cut = text.find("\n", cut + 1, end)
        if cut <= 0:
            yield text[start:end]  # the last piece (an empty text is one empty piece)
            return
        yield text[start:cut]
        start = cut


LONGEST_WORD = 1 << 10  # characters of one piece the BPE trainer reads at most (word_pieces)


def word_pieces(piece: str, size: int = LONGEST_WORD) -> list[str]:
    """`piece` cut into pieces of at most `size` characters for the BPE trainer, each cut just before a space that
    stands between two characters other than whitespace, where GPT-2's pre-tokenizer splits anyway (` ?\\p{L}+`
    takes the space with the word after it); a stretch of `size` characters with no such space (a DNA sequence, a
    minified file, 'ab' a million times) is cut at `size`, its one word then read as two by the trainer alone.

    The library's trainer merges inside one word in time that grows with the square of the word's length: a
    300,000-character line of ACGT took 51 s for bpe:300, a million characters of 'ab' ran for minutes, and Ctrl-C
    went unheard inside it. Text of words shorter than `size` is cut where no merge crosses, and trains the same."""
    pieces, start = [], 0
    while len(piece) - start > size:
        cut = start + size
        space = piece.rfind(" ", start + 1, cut)
        while space > start and (piece[space - 1].isspace() or piece[space + 1].isspace()):
            space = piece.rfind(" ", start + 1, space)
        cut = space if space > start else cut
        pieces.append(piece[start:cut])
        start = cut
    pieces.append(piece[start:])
    return pieces


def _types(part) -> set[str]:
    """The types of a tokenizer.json part (a pre-tokenizer, a decoder), those inside a Sequence too."""
    if not isinstance(part, dict):
        return set()
    inner = part.get("pretokenizers") or part.get("decoders") or []
    return {part.get("type")}.union(*(_types(p) for p in inner))


@functools.cache
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the character a byte-level BPE writes for each byte -> the byte
    (printable Latin-1 bytes stand for themselves, the others for the characters from U+0100 on, in order)."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in kept]
    return {**{chr(b): b for b in kept}, **{chr(256 + n): b for n, b in enumerate(moved)}}


def shown_piece(tokenizer, i: int) -> str:
    """What token `i` reads as for a view that lists tokens one by one (`:tok`, `:embed`): `itos[i]`, except that a
    token holding bytes of a character it does not complete (each reads as U+FFFD, so the three tokens of ☃ were
    "� � �") names those bytes as escapes: "\\xe2", "\\x98", "\\x83"; its whole characters stay as they are."""
    piece = tokenizer.itos[i]
    if "\ufffd" not in piece or not isinstance(tokenizer, SubwordTokenizer) or i >= tokenizer.own_size:
        return piece
    name = tokenizer.tokenizer.id_to_token(i) or ""
    if name.startswith("<0x") and name.endswith(">") and len(name) == 6:  # byte fallback (Llama 2): <0xE2>
        raw = bytes([int(name[3:5], 16)])
    else:
        alphabet = _byte_level_alphabet()
        if not name or any(ch not in alphabet for ch in name):
            return piece  # not a byte-level token: the library's own reading stands
        raw = bytes(alphabet[ch] for ch in name)
    return raw.decode("utf-8", errors="backslashreplace")


def shown_pieces(tokenizer, ids) -> list[str]:
    """`shown_piece` of each of `ids`: a text's tokens as the views list them."""
    return [shown_piece(tokenizer, int(i)) for i in ids]


def decode_after(tokenizer, before: list[int], ids: list[int]) -> str:
    """The text the tokens `ids` add after the tokens `before` (any tokenizer): the whole decoded, less `before`'s.

    Decoded on their own, the first of `ids` may lose its space: SentencePiece's decoders (Llama 2's `Strip`, a
    `Metaspace` with a prepend scheme) drop the space a text starts with, and after `before` it starts none. So
    `:gen`, which writes its text a few tokens at a time, wrote "dog.the quick" for "dog. the quick"."""
    alone = tokenizer.decode(ids)
    return _added(tokenizer.decode(before), tokenizer.decode([*before, *ids]), alone) if before else alone


def shown_text(tokenizer, before: list[int], ids: list[int]) -> str:
    """The text of the tokens `ids` after `before` (decode_after), as a view that quotes a stretch of text cut out of
    a longer one shows it (`:mistakes`' context): where the stretch starts after the first bytes of a character, or
    ends before its last, those tokens read as U+FFFD; they are named as shown_piece names them ("\\x98\\x83 über"),
    as `:tok` lists them. Whole characters inside are the decoded text's."""
    def decode(part: list[int]) -> str:
        return tokenizer.decode(part) if part else ""

    first = 0  # the leading tokens of a character begun before the stretch
    while first < len(ids) and decode(ids[first:]).startswith("\ufffd"):
        first += 1
    last = len(ids)  # the trailing tokens of a character the stretch does not finish
    while last > first and decode(ids[first:last]).endswith("\ufffd"):
        last -= 1
    if first == 0 and last == len(ids):
        return decode_after(tokenizer, before, ids)
    return ("".join(shown_pieces(tokenizer, ids[:first])) + decode_after(tokenizer, before + ids[:first],
                                                                         ids[first:last])
            + "".join(shown_pieces(tokenizer, ids[last:])))


def _added(head: str, whole: str, alone: str) -> str:
    """What `whole` adds after `head`; `alone` (the tokens decoded on their own) where it does not start with it:
    the bytes of one character were split between the two, and decoded together make another."""
    return whole[len(head):] if whole.startswith(head) else alone


@dataclass
class MergeStep:
    """One merge: the pair (left, right) becomes one token everywhere it is adjacent in the piece."""

    left: int  # the two tokens' ids
    right: int
    rank: int  # when the merge was learned: 0 first; a piece takes its merges in this order
    ids: list[int]  # the piece's tokens after this merge


@dataclass
class PieceMerges:
    """One pre-tokenized piece of a text (a word with its leading space), from its bytes to its tokens."""

    start: list[int]  # its bytes, each one token
    steps: list[MergeStep]
    ids: list[int]  # its tokens after the last merge
    whole: bool = False  # the tokenizer ignores merges for a piece in its vocabulary, and took this one whole


@dataclass
class BpeMerges:
    """A text's pieces, each from its bytes to its tokens, and whether the steps end on the tokenizer's own ids."""

    pieces: list[PieceMerges]
    agrees: bool


def _merged(symbols: list[str], pair: tuple[str, str]) -> list[str]:
    """`symbols` with every adjacent occurrence of `pair`, left to right, made one symbol."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def train_bpe(text: str, vocab_size: int, progress: Callable[[str], None] | None = None) -> SubwordTokenizer:
    """A byte-level BPE of `vocab_size` tokens trained on `text` (GPT-2's scheme: 256 bytes, then merges)."""
    tokenizers = _tokenizers()
    if vocab_size < MIN_BPE_TOKENS:
        raise DataError(f"a byte-level BPE has at least {MIN_BPE_TOKENS} tokens (the 256 bytes and one merge), "
                        f"got {vocab_size}; choose bpe:{MIN_BPE_TOKENS} or more")
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),  # every byte: any text can be encoded
    )
    if progress is not None:
        progress(f"training a byte-level BPE of {count(vocab_size, 'token')} on {count(len(text), 'character')}")
    # The text goes in pieces of 64 K characters or so (the library takes an iterator), cut where the pre-tokenizer
    # splits anyway: cut at every 65,536th character, a word across the cut was counted as two pieces of words, and
    # a BPE of 512 tokens on tiny Shakespeare learned 2 of its 256 merges otherwise than on the whole text. Each is
    # cut again into words of at most LONGEST_WORD characters (word_pieces: a longer one trained for minutes)
    pieces = (word for piece in iter_pieces(text, 1 << 16) for word in word_pieces(piece))
    tokenizer.train_from_iterator(pieces, trainer=trainer, length=len(text))
    return SubwordTokenizer(tokenizer)


def tokenizer_for(value: str, text: str, progress: Callable[[str], None] | None = None,
                  kept: dict | None = None) -> SubwordTokenizer | None:
    """The tokenizer the setting `value` names, for `text`: None for `char`, a BPE trained on `text` for `bpe:N`.
    `kept`: the BPEs trained on this same text so far, by N (core.data.Readings); one there is not trained again.
    It holds the KEPT_BPES used last (a BPE is some 3 to 6 MB on tiny Shakespeare, 4,096 to 32,000 tokens; a session
    that tried every size kept them all)."""
    n = parse_tokenizer(value)
    if n is None:
        return None
    if kept is not None and n in kept:
        kept[n] = kept.pop(n)  # used last: the last to go
        return kept[n]
    tokenizer = train_bpe(text, n, progress)
    if kept is not None:
        kept[n] = tokenizer
        while len(kept) > KEPT_BPES:
            del kept[next(iter(kept))]
    return tokenizer


KEPT_BPES = 8


def tokenizer_setting(tokenizer) -> str:
    """The `tokenizer` setting that reads as `tokenizer`: char, or bpe:N with N its actual number of tokens."""
    return "char" if tokenizer is None or tokenizer.kind == "char" else f"bpe:{tokenizer.own_size}"


def characters_of(tokenizer: SubwordTokenizer) -> str | None:
    """The characters, in id order, of a tokenizer that reads one character a token, as `characters_as_tokenizer`
    writes one (a word-level vocabulary of single characters, every id used); None for any other tokenizer.

    A folder `:save hf:` wrote from a character model holds such a tokenizer.json; read back as what it is, its
    model trains, compares and changes settings as a character model (a "BPE" of 103 tokens would be none).
    """
    model = json.loads(tokenizer.vocab).get("model", {})
    vocab = model.get("vocab")
    if model.get("type") != "WordLevel" or not isinstance(vocab, dict) or not vocab:
        return None
    if sorted(vocab.values()) != list(range(len(vocab))) or any(len(piece) != 1 for piece in vocab):
        return None
    chars = "".join(sorted(vocab, key=vocab.__getitem__))
    with _library_call("reading its characters"):
        ids = tokenizer.tokenizer.encode(chars, add_special_tokens=False).ids
    if ids != list(range(len(chars))):
        return None  # a word-level tokenizer that does not split every character apart
    return chars


def learned_carriage_returns(tokenizer: SubwordTokenizer) -> bool:
    """Whether the BPE learned a merge holding a carriage return ("\r", or the byte-level character for it): its
    training text had one. A file read since line endings became "\n" (core.data) has none, so such a tokenizer was
    trained on a file whose "\r\n" was read as two characters."""
    model = json.loads(tokenizer.vocab).get("model", {})
    returns = {"\r"} | {ch for ch, byte in _byte_level_alphabet().items() if byte == ord("\r")}
    for merge in model.get("merges") or []:
        pieces = merge.split(" ", 1) if isinstance(merge, str) else merge
        if any(ch in piece for piece in pieces if isinstance(piece, str) for ch in returns):
            return True
    return False


def characters_as_tokenizer(itos: list[str]):
    """A character tokenizer's vocabulary as a `tokenizers` one (a token per character, ids unchanged),
    so that a folder written for transformers carries it (core.hf.save_folder).

    Its unknown token is "<unk>", which no vocabulary of single characters holds: the library then refuses a text with
    a character the vocabulary lacks ("Missing [UNK] token"), as the lab does. The first character was the unknown
    token before, and transformers read a tab or an "é" as "\\n" without a word."""
    tk = _tokenizers()
    tokenizer = tk.Tokenizer(tk.models.WordLevel({ch: i for i, ch in enumerate(itos)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Split(tk.Regex(r"[\s\S]"), behavior="isolated")  # every character
    tokenizer.decoder = tk.decoders.Fuse()  # join the characters back without spaces
    return tokenizer
