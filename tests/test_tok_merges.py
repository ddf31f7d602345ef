"""`:tok TEXT merges=on` (core.bpe.SubwordTokenizer.merges): byte-level BPE worked out, piece by piece.

Checked against the tokenizers library's own encoding on many texts, against merges written out by hand
for a GPT-2-style tokenizer of three merges, and for what the rule promises: each piece takes its merges
in the order they were learned. A tokenizer whose merges cannot be replayed says so instead.
"""

import pytest
import tokenizers

from minitf_repl.commands import REGISTRY
from minitf_repl.core.bpe import SubwordTokenizer, characters_as_tokenizer, train_bpe
from minitf_repl.dispatch import json_document
from test_commands import run
from test_render import plain
from test_tokenizer_setting import TEXT, session_on, text_file  # noqa: F401  (text_file: a fixture)

TEXTS = ["the quick brown fox", "Pack my box!!  with\nfive dozen", "jump; jumps, jumped", "über naïve café 12345",
         "   spaces   ", "x", "the the the"]


@pytest.fixture(scope="module")
def trained():
    return train_bpe(TEXT, 300)


@pytest.mark.parametrize("text", TEXTS)
def test_the_merges_end_on_the_libraries_own_tokens(trained, text):
    worked = trained.merges(text)
    assert worked.agrees
    assert [i for piece in worked.pieces for i in piece.ids] == trained.encode(text)
    for piece in worked.pieces:
        tokens = piece.start
        for step in piece.steps:  # every step merges the pair somewhere, and the tokens it leaves read as before
            assert len(step.ids) < len(tokens)
            assert "".join(trained.itos[i] for i in step.ids) == "".join(trained.itos[i] for i in tokens)
            tokens = step.ids
        assert tokens == piece.ids
        ranks = [step.rank for step in piece.steps]
        assert ranks == sorted(set(ranks))  # learned order: a merge needs the tokens earlier merges made


def test_a_gpt2_style_tokenizer_by_hand():
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tokenizer = SubwordTokenizer.from_vocab_merges(vocab, merges)
    worked = tokenizer.merges("the the")
    assert worked.agrees and len(worked.pieces) == 2
    first, second = worked.pieces
    assert [(tokenizer.itos[s.left], tokenizer.itos[s.right], s.rank) for s in first.steps] == [("h", "e", 1)]
    assert [tokenizer.itos[i] for i in first.ids] == ["t", "he"]  # no leading space: "Ġt" never forms
    assert [(tokenizer.itos[s.left], tokenizer.itos[s.right], s.rank) for s in second.steps] == [
        (" ", "t", 0), ("h", "e", 1), (" t", "he", 2)]
    assert [tokenizer.itos[i] for i in second.ids] == [" the"] and second.ids == [vocab["Ġthe"]]


def test_every_occurrence_of_the_pair_merges_in_one_step():
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab["ab"] = len(vocab)
    tokenizer = SubwordTokenizer.from_vocab_merges(vocab, [("a", "b")])
    (piece,) = tokenizer.merges("abxab").pieces
    assert len(piece.steps) == 1 and [tokenizer.itos[i] for i in piece.ids] == ["ab", "x", "ab"]


def test_a_tokenizer_that_is_not_plain_bpe_is_not_replayed():
    assert SubwordTokenizer(characters_as_tokenizer(list("abc "))).merges("ab c") is None  # word-level
    fallback = tokenizers.Tokenizer(tokenizers.models.BPE(vocab={"<0x61>": 0, "a": 1}, merges=[],
                                                          byte_fallback=True))
    assert SubwordTokenizer(fallback).merges("a") is None


def test_a_whole_word_in_the_vocabulary_is_taken_where_merges_are_ignored():
    alphabet = sorted(tokenizers.pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab["abc"] = len(vocab)  # in the vocabulary, but no merge makes it
    model = tokenizers.models.BPE(vocab=vocab, merges=[], ignore_merges=True)
    library = tokenizers.Tokenizer(model)
    library.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer = SubwordTokenizer(library)
    worked = tokenizer.merges("abc abd")
    assert worked.agrees and [p.ids for p in worked.pieces][0] == [vocab["abc"]]
    assert [p.whole for p in worked.pieces] == [True, False]


def test_tok_merges_in_the_shell(text_file):  # noqa: F811
    session = session_on(text_file)
    out = plain(run(session, ":tok the fox merges=on"))
    assert "a character tokenizer merges nothing: each character is a token; :set tokenizer=bpe:512" in out
    run(session, ":set tokenizer=bpe:300")
    result = run(session, ":tok the quick fox merges=on")
    assert result.merges_agree and [p.start for p in result.pieces][1] == [" ", "q", "u", "i", "c", "k"]
    out = plain(result)
    assert "BPE, piece by piece: each piece starts as its bytes" in out and "(rank " in out
    assert "they end on the tokenizer's own tokens (checked); in every piece the ranks rise" in out
    assert json_document(REGISTRY["tok"], result)["schema"] == "minitf.tok/7"
    assert run(session, ":tok the quick fox").pieces is None  # only when asked
