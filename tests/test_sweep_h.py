"""What a user's-eye sweep of the subword (BPE) tokenizer found wrong: each test failed before its fix.

:gen decoded each sampled token alone, so a character a byte-level BPE spreads over several tokens (é, ☃, the
pydoc text's curly quotes) came out as one U+FFFD per byte, in the stream and in the result. :step wrote a
piece's whitespace raw (" the" as an indented "the", a piece of spaces as an empty cell) where every other view
shows it as ␣. :tok merges=on named a piece by its bytes one by one ('h��llo' for 'héllo').
A switch to a task (:data, :train data=) set the tokenizer back to char without a word. :set tokenizer=bpe:N
again, where the text gives the same fewer tokens, said "nothing changed" and then that the text is now read anew.
"""

import pytest

import minitf_repl.core.generate as core_generate
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.palette import visible
from minitf_repl.session import Session

from test_commands import Recorder, run
from test_render import plain, text_of

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16)
TEXT = ("the quick brown fox jumps over the lazy dog.\nPack my box with five dozen liquor jugs!\n"
        "How vexingly quick daft zebras jump; the five boxing wizards jump quickly.\n") * 8


@pytest.fixture
def bpe(tmp_path) -> Session:
    """A session on an English text read by a byte-level BPE of 270 tokens: é and ☃ are bytes in it."""
    path = tmp_path / "fox.txt"
    path.write_text(TEXT, encoding="utf-8")
    session = Session(ModelConfig(**TINY), TrainConfig(steps=2, batch_size=2), data_spec=str(path),
                      device_name="cpu")
    run(session, ":set tokenizer=bpe:270")
    return session


# --- :gen --------------------------------------------------------------------------------------------
def test_gen_writes_a_character_spread_over_several_tokens_whole(bpe, monkeypatch):
    text = "café ☃!"
    ids = bpe.data.tokenizer.encode(text)
    assert len(ids) > len(text)  # é and ☃ take a token a byte
    monkeypatch.setattr(core_generate, "generate", lambda model, prompt, settings, done=None: (i for i in ids))
    heard = Recorder()
    result = run(bpe, f":gen n={len(ids)} x", heard)
    assert result.text == text and "".join(heard.tokens) == text
    assert result.n_tokens == len(ids)  # tokens sampled, not pieces written


# --- :step -------------------------------------------------------------------------------------------
def test_step_shows_the_whitespace_of_a_subword_piece_as_the_other_views_do(bpe):
    result = run(bpe, ":step the quick temperature=0")
    spaced = [piece for piece in bpe.data.tokenizer.itos if piece.startswith(" ") and piece.strip()]
    result.rows[0].token = spaced[0]  # " the", say: a leading space read as an indent before
    result.rows[1].token = "  "  # two spaces read as an empty cell
    rows = text_of(result).splitlines()[3:]
    assert any(f" {visible(spaced[0])} " in line for line in rows)
    assert any(" ␣␣ " in line for line in rows)


# --- :tok merges=on ----------------------------------------------------------------------------------
def test_tok_merges_names_a_piece_as_typed_when_its_characters_are_several_bytes(bpe):
    result = run(bpe, ":tok héllo ☃ merges=on")
    assert [piece.text for piece in result.pieces] == ["héllo", " ☃"]
    shown = text_of(result)
    assert "'héllo': h" in shown and "'␣☃': ␣" in shown and "\ufffd\ufffd" not in shown.split(":")[0]


# --- :data to a task ---------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [":data add", ":train data=add steps=1"])
def test_a_switch_to_a_task_says_it_drops_the_subword_tokenizer(bpe, line):
    heard = Recorder()
    run(bpe, line, heard)
    assert bpe.tokenizer_setting == "char"
    assert any(n.startswith("tokenizer: bpe:270 -> char: a task is questions and answers of characters")
               for n in heard.notices), heard.notices


# --- :set tokenizer= again -----------------------------------------------------------------------------
def test_asking_again_for_more_tokens_than_the_text_gives_says_nothing_changed_and_no_more(bpe):
    run(bpe, ":set tokenizer=bpe:5000")
    most = bpe.tokenizer_setting  # as many tokens as the text has pairs for
    run(bpe, ":train")
    heard = Recorder()
    result = run(bpe, ":set tokenizer=bpe:5000", heard)
    assert bpe.tokenizer_setting == most and not result.changed and not result.rebuilt
    assert bpe.trainer.step == 2  # the model stays
    assert any(f"pairs enough for {most[4:]} tokens only" in n for n in heard.notices)
    shown = plain(result)
    assert shown == "nothing changed", shown  # not also "the text is now read as ..."


def test_data_under_a_subword_tokenizer_counts_its_vocabulary_in_tokens_not_symbols(bpe):
    from minitf_repl.commands import REGISTRY
    from minitf_repl.core.data import pydoc_text
    from minitf_repl.dispatch import json_document

    shown = run(bpe, ":data")
    assert shown.info.unit == "token" and "vocabulary 270 tokens" in " ".join(plain(shown).split())
    assert json_document(REGISTRY["data"], shown)["info"]["unit"] == "token"
    chars = run(Session(ModelConfig(**TINY), data_spec="pydoc", device_name="cpu"), ":data")
    symbols = len(set(pydoc_text()))  # 103 in Python 3.11's documentation, 104 in 3.10's and 3.12's
    assert chars.info.unit == "character" and f"vocabulary {symbols} symbols" in " ".join(plain(chars).split())
