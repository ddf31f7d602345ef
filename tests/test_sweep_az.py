"""A byte-level BPE on a large text, fast: each test failed before its fix.

`:set tokenizer=bpe:512` on a text of 20 MiB read the whole training text in one call of the tokenizers library, which
reads one long text about 2.5 times slower than the same text in pieces of a few thousand characters. A byte-level BPE
as :set trains one now reads a long text in pieces (core.bpe.text_pieces), cut only just before a newline that follows
a character other than whitespace, where GPT-2's pre-tokenizer splits whatever the text around, so the ids are exactly
the whole text's (a cut after each newline, line by line, gave other ids where a line starts with whitespace). A
tokenizer loaded from a folder (a prefix space, a Metaspace) still reads the whole text in one call; GPT-2's, whose
one added token (<|endoftext|>) holds no newline, did as well, and reads it in pieces now (sweep ba).
Switching back to a BPE already trained on the same text (`:set tokenizer=bpe:512`, `:set tokenizer=char`, then
bpe:512 again) trained it again and read the whole text again: the BPEs trained on a text and the last readings of it
are now kept with the text (core.data.Readings, shared by its corpora and freed with the last of them).
Training a BPE fed the library the text in pieces of 65,536 characters cut anywhere, inside words too, each counted as
two words: a BPE of 512 tokens on tiny Shakespeare learned 2 of its 256 merges otherwise than on the whole text. It is
fed text_pieces of about as many characters now, and learns the merges of the whole text.
"""

import gc
import json
import random
import weakref

import pytest

from minitf_repl.core import bpe
from minitf_repl.core.bpe import PIECE_CHARS, SubwordTokenizer, text_pieces, train_bpe

from test_commands import TEXT, run
from test_sweep_w import session_with

# texts built to break a naive split: whitespace before and after lines, runs of spaces and newlines, "\r\n", tabs,
# letters and digits of other scripts, emoji (4 bytes each), combining accents, empty lines
TRICKY = [
    "  leading spaces\n  and more\n\tand a tab\n",
    "trailing spaces   \nand newlines\n\n\n\nthen words  \n \n  x\n",
    "windows\r\nline\r\nendings\r\n\r\nand a lone \r return\n",
    "unicode: über naïve café\n日本語の文\n  Ελληνικά\nкириллица\n",
    "emoji 😀🎉\n👍🏽 thumbs\n 🙂\n\n🙃\n",
    "combining e\u0301\u0301\ne\u0301\n\u00a0nbsp\u00a0\n\u2003em space\u2003\n\u3000ideographic\n",
    "digits 123 ٣٤٥ 42\n12\n 3\n",
    "punctuation!!! ...\n---\n  ---\n's 're 've\n's\n",
    "no newline at all, just one long line of words and spaces    and more",
    "   \n\n \t \r\n  \n",
    "\n",
    "x",
    "\n\n\nx\n\n\n",
]


@pytest.fixture(scope="module")
def tokenizer():
    """A BPE that learned merges of whitespace too ("  ", "\\n\\n", " \\n"), so that a wrong cut changes ids."""
    return train_bpe((TEXT + "".join(TRICKY)) * 4, 400)


def whole(tokenizer, text):
    return tokenizer.tokenizer.encode(text, add_special_tokens=False).ids


def in_pieces(tokenizer, text, size):
    return [i for piece in text_pieces(text, size) for i in whole(tokenizer, piece)]


@pytest.mark.parametrize("text", TRICKY)
def test_a_text_read_in_pieces_has_the_ids_of_the_whole_text(tokenizer, text):
    assert "".join(text_pieces(text, 1)) == text
    for size in (1, 2, 5):  # cut at every place the rule allows, and fewer
        assert in_pieces(tokenizer, text, size) == whole(tokenizer, text)


def test_the_texts_do_break_a_split_after_each_newline(tokenizer):
    """The texts above are ones a naive cut (line by line, the newline kept at the end of its line) reads otherwise."""
    broken = [text for text in TRICKY
              if [i for line in text.splitlines(keepends=True) for i in whole(tokenizer, line)]
              != whole(tokenizer, text)]
    assert len(broken) >= 3


def test_a_long_text_is_read_in_pieces_never_whole(tokenizer):
    """The cause of the time: encode on a long text calls the library once a piece, each of a few thousand
    characters, and never once on the whole text; its ids are the whole text's."""
    text = "".join(TRICKY) * (3 * PIECE_CHARS // len("".join(TRICKY)) + 1)  # 3 pieces' worth, and more

    class Counting:
        def __init__(self, inner):
            self.inner, self.lengths = inner, []

        def encode(self, piece, **kw):
            self.lengths.append(len(piece))
            return self.inner.encode(piece, **kw)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    counting = SubwordTokenizer(Counting(tokenizer.tokenizer))
    ids = counting.encode(text)
    assert ids == whole(tokenizer, text)
    assert len(counting.tokenizer.lengths) == len(text_pieces(text)) >= 3
    assert max(counting.tokenizer.lengths) < 2 * PIECE_CHARS < len(text)


def test_a_tokenizer_that_adds_a_prefix_space_reads_the_whole_text(tokenizer):
    """A folder's tokenizer may add a space before each text (add_prefix_space, a Metaspace): each piece would get
    one, so it reads the whole text in one call, as before."""
    tokenizers = pytest.importorskip("tokenizers")
    spaced = SubwordTokenizer.from_json(tokenizer.vocab)
    spaced.tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=True)
    assert tokenizer.cuts_at_lines() and not spaced.cuts_at_lines()
    text = "line one\n  two\n" * (PIECE_CHARS // 8)
    assert spaced.encode(text) == whole(spaced, text) != in_pieces(spaced, text, PIECE_CHARS)


def test_switching_back_to_a_bpe_trains_and_reads_the_text_once(tmp_path, monkeypatch):
    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    s = session_with(str(path))
    trained, reads = [], []
    train, encode = bpe.train_bpe, SubwordTokenizer.encode
    monkeypatch.setattr(bpe, "train_bpe", lambda *a, **k: trained.append(1) or train(*a, **k))
    monkeypatch.setattr(SubwordTokenizer, "encode", lambda self, text: reads.append(len(text)) or encode(self, text))
    run(s, ":set tokenizer=bpe:300")
    first = {split: ids.tolist() for split, ids in s.data.splits.items()}
    assert (len(trained), len(reads)) == (1, 2)  # the train and the val split
    run(s, ":set tokenizer=char")
    run(s, ":set tokenizer=bpe:300")
    assert (len(trained), len(reads)) == (1, 2)  # neither trained nor read again
    assert {split: ids.tolist() for split, ids in s.data.splits.items()} == first
    assert s.data.tokenizer.encode(s.data.split_text("val")) == first["val"]


def test_what_is_kept_of_a_text_goes_with_the_text(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    s = session_with(str(path))
    run(s, ":set tokenizer=bpe:300")
    kept = weakref.ref(s.data.readings)
    run(s, ":data sort:4")
    gc.collect()
    assert kept() is None


def random_text(rng: random.Random, length: int) -> str:
    alphabet = ["a", "b", "Z", "1", "٣", " ", "  ", "\n", "\n\n", "\r\n", "\r", "\t", "é", "e\u0301", "😀", "日",
                "'s", "'", "!", ".", "\u00a0", "\u2003", "\u3000", "\x1c", "\x0b", "\x0c", "\u0085", "\u2028"]
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_a_random_text_read_in_pieces_has_the_ids_of_the_whole_text(tokenizer):
    rng = random.Random(0)
    for _ in range(20):
        text = random_text(rng, rng.randrange(1, 200))
        assert in_pieces(tokenizer, text, rng.randrange(1, 20)) == whole(tokenizer, text), repr(text)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(40))
def test_many_random_texts_read_in_pieces_have_the_ids_of_the_whole_text(tokenizer, seed):
    rng = random.Random(seed)
    for _ in range(50):
        text = random_text(rng, rng.randrange(1, 2000))
        for size in (1, rng.randrange(2, 50), rng.randrange(50, 500)):
            assert in_pieces(tokenizer, text, size) == whole(tokenizer, text), repr(text)


def straddling_text() -> str:
    """Lines "zq" and "ab" ("x" lines pad), "ab" one more time than "zq" in all, three of them across the
    65,536th characters (a cut of every 65,536 characters would count each as "a" and "b")."""
    text, zq = "", 0
    for boundary in (1 << 16, 2 << 16, 3 << 16):
        need = boundary - 1 - len(text) - (1 if text else 0)  # characters of whole lines before the "a"
        lines = 20_000 if need % 2 == 0 else 20_001  # 3 lines + 2 pads: an even rest for "x\n" pads
        text += ("\n" if text else "") + "zq\n" * lines + "x\n" * ((need - 3 * lines) // 2) + "ab"
        zq += lines
        assert text[boundary - 1 : boundary + 1] == "ab"
    return text + "\n" + "ab\n" * (zq + 1 - 3)


def test_a_bpe_learns_its_merges_from_the_words_of_the_whole_text():
    """Training fed the library pieces of 65,536 characters, cutting words in two: on this text the first merge
    was "z"+"q" (60,003 times in the text) rather than "a"+"b" (60,004 times in the text, 60,001 in the pieces)."""
    text = straddling_text()
    assert text.count("ab") == text.count("zq") + 1
    merges = json.loads(train_bpe(text, 258).vocab)["model"]["merges"]
    assert [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges][0] == ("a", "b")


def with_added(tokenizer, *added):
    """`tokenizer` (a SubwordTokenizer) again, with `added` (tokenizers.AddedToken) as special tokens."""
    copy = SubwordTokenizer.from_json(tokenizer.vocab)
    copy.tokenizer.add_special_tokens(list(added))
    return SubwordTokenizer.from_json(copy.tokenizer.to_str())


def test_a_tokenizer_with_gpt2s_end_of_text_token_reads_a_long_text_in_pieces(tokenizer):
    """GPT-2's tokenizer has one added token, <|endoftext|>, and read every long text whole for it (19 MiB: 16.1 s,
    in pieces 11.3 s): an added token without a newline lies wholly on one side of every cut, so the text is read in
    pieces, with the whole's ids, the token's beside newlines and whitespace included. One that takes the whitespace
    after it (rstrip) or holds a newline could meet a cut: the text is read whole, as before."""
    tokenizers = pytest.importorskip("tokenizers")
    gpt2 = with_added(tokenizer, tokenizers.AddedToken("<|endoftext|>", special=True))
    assert json.loads(gpt2.vocab)["added_tokens"] and gpt2.cuts_at_lines()
    marked = [f"<|endoftext|>{text}<|endoftext|>\n<|endoftext|>  \n x<|endoftext|>" for text in TRICKY]
    for text in marked:
        assert whole(gpt2, text).count(gpt2.own_size - 1) == 4  # the token is read as itself
        for size in (1, 2, 5):
            assert in_pieces(gpt2, text, size) == whole(gpt2, text)
    long = "".join(marked) * (3 * PIECE_CHARS // len("".join(marked)) + 1)
    assert gpt2.encode(long) == whole(gpt2, long)
    stripping = with_added(tokenizer, tokenizers.AddedToken("<sep>", rstrip=True, special=True))
    text = "words<sep>\n  more words " * (PIECE_CHARS // 10)  # every cut would come just after a <sep>
    assert not stripping.cuts_at_lines() and in_pieces(stripping, text, PIECE_CHARS) != whole(stripping, text)
    assert stripping.encode(text) == whole(stripping, text)
    assert not with_added(tokenizer, tokenizers.AddedToken("<a\nb>", special=True)).cuts_at_lines()
