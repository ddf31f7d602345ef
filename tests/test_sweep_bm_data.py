"""Unusual text files: widths of emoji modifiers and vowel signs, BPE maps, packed and wide files, held-out counts."""

import gzip
import math

import pytest

from test_commands import REGISTRY, run, text_file, tiny_session  # noqa: F401 (text_file: a fixture)
from test_render import plain

from minitf_repl.commands.counting import NgramResult, NgramRow, verdict
from minitf_repl.core.data import TextCorpus, load_data
from minitf_repl.core.errors import DataError
from minitf_repl.palette import columns, visible
from minitf_repl.parsing import parse_line
from minitf_repl.render.heatmap import column_width, heatmap, label_width
from minitf_repl.report import attention_svg


def _causal(T):
    return [[1.0 if j <= i else 0.0 for j in range(T)] for i in range(T)]


def _starts(line: str, mark: str) -> list[int]:
    """The terminal columns (palette.columns) at which each `mark` of `line` starts."""
    return [columns(line[:i]) for i, ch in enumerate(line) if ch == mark]


# --- 1, 7: one width function, the terminals' --------------------------------------------------------------------
@pytest.mark.parametrize("tokens", [["👋", "\U0001F3FD", "a", "b"], ["न", "\u093f", "य", "\u093e"]])
def test_a_skin_tone_modifier_or_a_vowel_sign_keeps_a_heatmap_in_line(tokens):
    lines = heatmap(tokens, _causal(4), 1.0, 1, True).plain.splitlines()
    assert len({columns(line) for line in lines}) == 1, lines  # Rich's cell_len gave 🏽 and ि no column
    width = column_width(tokens, 1)
    keys = [label_width(tokens) + j * width for j in range(4)]
    assert [_starts(row, "@")[-1] for row in lines[1:]] == keys, lines  # each row's diagonal under its key


def test_a_spacing_vowel_sign_is_shown_on_a_dotted_circle_as_an_accent_is():
    assert visible("\u093f") == "\u25cc\u093f" and visible("\u0301") == "\u25cc\u0301"
    assert visible("\u0928\u093f") == "\u0928\u093f"  # on its consonant it needs none
    assert columns("\U0001F3FD") == 2 and columns("\u25cc\u093f") == 2


# --- 2: byte tokens' columns and long labels ---------------------------------------------------------------------
BYTES = ["\\xe6\\x88", "\\x91", "我们", "\\xac\\xe4\\xbb\\xac\\xe4", "\\xbb"]


def test_byte_tokens_head_their_columns_by_position_and_a_cut_label_ends_in_an_ellipsis():
    lines = heatmap(BYTES, _causal(5), 1.0, 1, True).plain.splitlines()
    label = label_width(BYTES)
    assert lines[0][label:].rstrip() == "01234", lines  # every head was "\"
    assert [line[:2] for line in lines[1:]] == ["0 ", "1 ", "2 ", "3 ", "4 "], lines  # the rows keyed to them
    assert lines[4].startswith("3 \\xac\\xe… "), lines  # cut to 8 columns: it was, with no mark that it was
    assert [_starts(row, "@")[-1] for row in lines[1:]] == [label + j for j in range(5)]


def test_characters_keep_their_own_heads():
    lines = heatmap(list("abc"), _causal(3), 1.0, 1, True).plain.splitlines()
    assert lines[0] == "  abc" and lines[1].startswith("a ")


def test_the_report_heads_byte_tokens_by_position():
    svg = attention_svg(BYTES, _causal(5))
    heads = [svg.split("</title>")[k + 1].split("</text>")[0] for k in range(5)]  # each column's head after its title
    assert heads == ["0", "1", "2", "3", "4"], heads


# --- 3: files that are not UTF-8 text as they are ----------------------------------------------------------------
def test_a_gzip_file_is_said_to_be_one_with_the_line_that_unpacks_it(tmp_path):
    path = tmp_path / "text.txt.gz"
    path.write_bytes(gzip.compress(b"hello world\n" * 100))
    with pytest.raises(DataError, match=r"is gzip-compressed; .*gzip -dc .*text\.txt\.gz > .*text\.txt$"):
        load_data(str(path))


def test_utf16_japanese_without_a_byte_order_mark_gets_the_iconv_line(tmp_path):
    path = tmp_path / "ja.txt"
    path.write_bytes("吾輩は猫である。名前はまだ無い。\n".encode("utf-16-le") * 50)  # NULs: its newlines' only
    with pytest.raises(DataError, match=r"UTF-16-LE text \(without a byte-order mark\).*iconv -f UTF-16LE -t UTF-8"):
        load_data(str(path))


def test_utf8_text_with_a_nul_on_every_line_gets_the_tr_line(tmp_path):
    path = tmp_path / "ctrl.txt"
    path.write_bytes(b"col1\tcol2\fpage\x00nul\x07bell\x1b[31mred\x1b[0m\x08back\n" * 300)  # 300 NULs in 13 kB
    with pytest.raises(DataError, match=r"UTF-8 text with 300 NUL bytes in it .*tr -d"):
        load_data(str(path))


def test_a_binary_of_small_numbers_is_still_binary(tmp_path):
    path = tmp_path / "numbers.bin"
    path.write_bytes(b"".join(i.to_bytes(4, "little") for i in range(1, 2000, 7)))
    with pytest.raises(DataError, match="looks binary"):
        load_data(str(path))


# --- 4: how much the validation text holds that training never does ----------------------------------------------
def test_held_out_characters_are_counted_not_only_listed():
    text = "the quick brown fox jumps over the lazy dog. " * 200
    cjk = "".join(chr(0x4E00 + i) for i in range(1000))
    corpus = TextCorpus("mixed", text[: 9000] + cjk, "test")
    only, held, val = corpus.held_out_counts()
    assert (len(only), held, val) == (1000, 1000, 1000)
    assert len(corpus.held_out_only()) == 8  # the list the message quotes, cut as before


# --- 5: a � inside generated text -------------------------------------------------------------------------------
def _byte_ids(tokenizer, data: bytes) -> list[int]:
    from minitf_repl.core.bpe import _byte_level_alphabet

    char = {b: ch for ch, b in _byte_level_alphabet().items()}
    return [tokenizer.tokenizer.token_to_id(char[b]) for b in data]


@pytest.mark.parametrize("written, bad, cut", [(b"\xe4ab", True, False), (b"ab\xe4", False, True)])
def test_bytes_no_character_is_made_of_are_explained(monkeypatch, text_file, written, bad, cut):
    s = tiny_session(text_file)
    run(s, ":set tokenizer=bpe:300")
    ids = _byte_ids(s.data.tokenizer, written)
    import minitf_repl.core.generate as core_generate

    def generate(model, prompt, settings, done=None):  # the model writes these tokens
        yield from ids

    monkeypatch.setattr(core_generate, "generate", generate)
    result = run(s, f":gen a n={len(ids)} seed=1")
    assert (result.bad_bytes, result.cut_character) == (bad, cut), result.text
    assert ("form no character" in plain(result)) == bad


# --- 6: a path as a shell escapes it -------------------------------------------------------------------------------
def test_a_path_with_shell_escapes_is_read_as_the_shell_would(tmp_path):
    folder = tmp_path / "with space"
    folder.mkdir()
    (folder / "my file.txt").write_text("x")
    _, args = parse_line(f":data '{tmp_path}/with space'/my\\ file.txt", REGISTRY)
    assert args["name"] == str(folder / "my file.txt")
    _, args = parse_line(f":data {tmp_path}/no\\ such.txt", REGISTRY)
    assert args["name"] == f"{tmp_path}/no\\ such.txt"  # nothing there either way: as typed


# --- 8: a model at the uniform guess on text with no pattern -----------------------------------------------------
def _ngram(model_val: float) -> NgramResult:
    rows = [NgramRow(0, 0, math.nan, 2.833, 2.833, None, None), NgramRow(1, 1, 1.0, 2.832, 2.834, None, None),
            NgramRow(6, 90_000, 0.1, 1.2, 3.387, None, None)]
    return NgramResult("bigline.txt", "character", 17, 1_800_000, 1_800_000, 200_000, 200_000, False, rows, None,
                       50, model_val, None, 256, True)


def test_a_model_at_the_uniform_guess_of_a_text_with_no_pattern_is_not_told_to_train_further():
    said = " ".join(verdict(_ngram(2.837)))
    assert "at the uniform guess" in said and "train" not in said, said
    assert "trains further" in " ".join(verdict(_ngram(3.0)))  # far above it: training may still help


# --- 9: a BPE that reads a text in more tokens than characters ---------------------------------------------------
def test_a_bpe_too_small_for_its_characters_says_so_and_which_n_would_do():
    from minitf_repl.core.bpe import train_bpe

    text = "".join(chr(0x4E00 + (i * 7) % 40) for i in range(9000))
    corpus = TextCorpus("zh", text, "test")
    small = corpus.retokenized(train_bpe(corpus.split_text("train"), 260))
    said = small.more_tokens_than_characters()
    assert said is not None and "more tokens than characters" in said and "bpe:" in said, said
    n = int(said.split("bpe:")[1].split(" ")[0])
    assert small.tokens_per_char() > 1.5  # three bytes a character, and 3 merges
    # about: a few of its merges join two whole characters before every character is whole
    assert corpus.retokenized(train_bpe(corpus.split_text("train"), n)).tokens_per_char() < 1.05
    assert corpus.more_tokens_than_characters() is None  # characters: one a token
