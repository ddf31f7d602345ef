"""What a sweep of the known, unfixed items of the last session found: each test failed before its fix.

A text file saved with a UTF-8 byte-order mark (Notepad does) read the mark as a character of the text.
`:gen show=probs` under a subword tokenizer showed the text plain: it coloured one character per token.
A message wrapped between a number and its unit: ":train"'s summary ended one line "1.8" and the next "s".
"""

import pytest
from rich.text import Text

import minitf_repl.core.generate as core_generate
from minitf_repl.commands.generate import char_probs
from minitf_repl.core.data import load_data
from minitf_repl.render.words import word_lines

from test_commands import run
from test_sweep_h import bpe  # noqa: F401 (a fixture: a session on a text read by a byte-level BPE)
from test_views import text_of


def test_a_byte_order_mark_is_no_character_of_the_text(tmp_path):
    text = "to be or not to be, that is the question. " * 20
    plain, marked = tmp_path / "plain.txt", tmp_path / "marked.txt"
    plain.write_text(text, encoding="utf-8")
    marked.write_text(text, encoding="utf-8-sig")
    assert marked.read_bytes().startswith(b"\xef\xbb\xbf")
    with_mark, without = load_data(str(marked)), load_data(str(plain))
    assert with_mark.text == text
    assert with_mark.tokenizer.vocab_size == without.tokenizer.vocab_size
    assert with_mark.info().chars == without.info().chars == len(text)


# --- :gen show=probs under a subword tokenizer -------------------------------------------------------------
def test_gen_show_probs_colours_each_token_of_a_subword_tokenizer(bpe, monkeypatch):
    text = "the café ☃"
    ids = bpe.data.tokenizer.encode(text)
    assert len(bpe.data.tokenizer.decode(ids[:1])) > 1 and len(bpe.data.tokenizer.decode(ids[-3:])) == 1  # the; ☃
    monkeypatch.setattr(core_generate, "generate", lambda model, prompt, settings, done=None: (i for i in ids))
    result = run(bpe, f":gen x n={len(ids)} show=probs")
    assert result.text == text and len(result.probs) == len(ids) == len(result.token_texts)
    assert "".join(result.token_texts) == text and result.token_texts[-3:-1] == ["", ""]
    shown = char_probs(result)
    assert len(shown) == len(text)
    assert shown[-1] == pytest.approx(result.probs[-3] * result.probs[-2] * result.probs[-1])  # ☃: all three
    coloured = text_of(result, colour=True)
    assert coloured.count("48;2;") >= len(text.replace(" ", ""))  # coloured, not the plain text it fell back to
    lines = text_of(result).splitlines()
    assert lines[0] == "x" + text.replace(" ", "␣") and len(lines[1]) == len(lines[0])  # a shade per character


# --- wrapping ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", range(20, 110))
def test_a_number_and_its_unit_stay_on_one_line(width):
    line = ("trained 60 steps: train loss 2.6396, val loss 2.3064, 3.327 bits per character, 41,259 tokens/s, "
            "bfloat16, 1.8 s; peak 340 MB.")
    lines = [part.plain for part in word_lines(Text(line), width)]
    assert " ".join(lines) == line
    assert not any(part.endswith((" 1.8", " 340")) for part in lines)
