"""What a sweep of the known, unfixed items of the last session found: each test failed before its fix.

A text file saved with a UTF-8 byte-order mark (Notepad does) read the mark as a character of the text.
"""

from minitf_repl.core.data import load_data


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
