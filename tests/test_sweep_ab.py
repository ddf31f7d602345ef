"""Text beyond ASCII, as learners bring it: each test failed before its fix.

`:attn` on a Chinese or emoji text (and `:checks causal`, and the attention frames of `:train watch=attn`) drew its
map under a line of keys twice as wide as the rows: each key was one character padded to one column, but 你 takes
two, so by the fourth column the shades sat under the wrong key, and the row labels were a column off the keys' line.
Keys and labels are now cut and padded by terminal columns, and a map whose tokens start with a wide character gets
cells two columns wide. `:patch`'s grid had the same fault the other way (keys "今 " of 3 columns over cells of 2).
Every token that prints no glyph of its own showed as "?" in the views' tables and rows (`:tok`, `:embed`,
`:mistakes`, `:attn`'s labels, `:score`): the zero-width joiner inside a family emoji, ESC, a no-break space and the
question mark itself all read "?", so a row "?" of `:embed` could be any of them. A variation selector (the ️ of ❤️)
showed as a blank cell, and an accent alone (the text written in NFD, é as e + U+0301) sat on the space before it.
They now show as their escapes (\\u200d, \\x1b, \\xa0, \\ufe0f), as `:step` already showed them, and a token that
starts with a combining mark shows it on a dotted circle (◌́); in a sentence, quoted without repr's doubled backslash.
Under a byte-level BPE, `:step`, `:mistakes`, `:lens`, `:attn`, `:report`'s maps, `:train watch=`'s frames and the
worked views `:resid`, `:ln`, `:ffn`, `:rope` named every token that holds part of a character "�" (ten rows of
`:step` alike), where `:tok`, `:score` and `:embed` name its bytes (\\xe4): they all name the bytes now.
`:report` wrote the model's samples with their ESC, BEL, form feeds and bidi overrides raw into the page: characters
HTML does not allow, which the browser dropped, or which reordered the rest of the line. They show as escapes.
On a text in Chinese, Japanese, Arabic or Hebrew, the views' default text (`:step`, `:ngram`'s samples, `:tok`'s
example) was the validation text's first characters cut anywhere, e.g. from a lone emoji joiner: a sentence's start
needed a capital letter. A letter of a script without case after whitespace or a sentence's end (。！？) now starts one,
and a text with none is quoted from its first whole character.
`:gen` on a Persian text wrote its words with the non-joiner escaped (می\\u200cخواهم), and an emoji family as three
people and two \\u200d: the joiners and the direction marks (LRM, RLM, ALM) are how those scripts are written and now
print as they are; ESC, the bidi overrides and other controls stay escaped.
`:embed map=on` on a Chinese text drew every token as a dot, the ones asked for too (a label had to be one cell
wide): a character two cells wide is now drawn as itself over two cells.
`:checks batch` on a Chinese text set its characters apart ("从 家 说"), and where a wide character stood over a
narrow one the y row slid off its x row: the pairs are padded by cells.
The REPL's toolbar, with a data file named in Chinese, was fitted to the screen by its length in characters, so it ran
past the edge and prompt-toolkit cut the name there: it is measured in columns, a name too long cut from its start.
`:data` on a UTF-16 file saved without a byte-order mark, or on a UTF-8 text with a stray NUL byte, said "looks binary;
give a UTF-8 text file": the first is named as UTF-16 with the iconv line that converts it, the second as UTF-8 text
with N NUL bytes (the first at its offset) and the tr line that removes them.
Training on a file whose name holds a no-break space (macOS writes U+202F in "10.00.00 AM"), an emoji family's joiner
or a private-use icon wrote a checkpoint, autosave too, that every `:load` and `:ls` refused as "data_spec is not
printable text; this file was not written by minitf": a manifest's paths may hold any character that shows as text;
controls, lone surrogates, line separators and bidi overrides are still refused.
`:patch 你好世界 您好世界` under a byte-level BPE compared the prompts' tokens as "�" against "�" and listed no position
where they differ (你 and 您 are three different bytes each), and quoted a control token as '\\\\x14': the tokens
are named by their bytes, so the differing positions are listed, and `:patch` and `:attrib` quote a token's escape once.
"""

import io

import pytest
from rich.cells import cell_len
from rich.console import Console

from minitf_repl.commands.base import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.dispatch import run_command
from minitf_repl.palette import visible
from minitf_repl.parsing import parse_line
from minitf_repl.render import render
from minitf_repl.render.heatmap import heatmap
from minitf_repl.session import Session

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)
# Chinese and Japanese (two columns a character), an emoji family joined by U+200D, a heart with its variation
# selector, an accent written as its own combining character (NFD), a no-break space, Arabic and Hebrew
WORLD = ("你好世界，今天天气很好。こんにちは！ 👨\u200d👩\u200d👧 ❤\ufe0f cafe\u0301 caf\u00e9 a\u00a0b "
         "مرحبا بالعالم שלום עולם? ") * 40


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    path = tmp_path_factory.mktemp("ab") / "world.txt"
    path.write_text(WORLD, encoding="utf-8")
    return Session(ModelConfig(**TINY), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                   data_spec=str(path), device_name="cpu", checkpoint_dir=path.parent / "checkpoints")


def run(session, line: str):
    cmd, args = parse_line(line, REGISTRY)
    return run_command(session, cmd.name, args, None)


def shown(result, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, console)
    return console.file.getvalue()


def column_of(line: str, index: int) -> int:
    """The terminal column at which `line`'s character `index` starts."""
    return cell_len(line[:index])


# --- wide characters in the attention maps ---------------------------------------------------------------------
def grid_lines(text: str, first_key: str) -> tuple[str, list[str]]:
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith(first_key))
    return lines[at], lines[at + 1:]


@pytest.mark.parametrize("head", ["0", "all"])
def test_attn_keeps_each_weight_under_its_key_when_the_keys_are_two_columns_wide(world, head):
    text = shown(run(world, f":attn 你好世界，今天 head={head}"))
    keys, rows = grid_lines(text, "你好" if head == "all" else "你")
    rows = [r for r in rows if r.strip()[:1] in "你好世界，今天"][:7]
    assert len(rows) == 7, text
    starts = [column_of(keys, i) for i, ch in enumerate(keys) if ch in "你好世界，今天"][:7]
    for i, row in enumerate(rows):  # row i's last weight (the diagonal, key i) starts where key i does
        marks = [column_of(row, j) for j, ch in enumerate(row) if j > 0 and ch != " "]
        marks = [m for m in marks if m <= starts[-1] + 1]  # the first map's (all: others stand beside it)
        assert marks and marks[-1] == starts[i], (i, keys, row)


def test_a_heatmap_of_wide_tokens_has_rows_as_wide_as_its_keys():
    tokens = ["你", "👍", "a", "界"]
    weights = [[1.0 if j <= i else 0.0 for j in range(4)] for i in range(4)]
    lines = heatmap(tokens, weights, 1.0, 1, True).plain.splitlines()
    assert len({cell_len(line) for line in lines}) == 1, lines  # the keys' line and every row: the same width
    assert [cell_len(line[:line.rindex("@")]) for line in lines[1:]] == [cell_len(lines[0][:lines[0].index(t)])
                                                                        for t in tokens]


# --- tokens that print no glyph --------------------------------------------------------------------------------
@pytest.mark.parametrize("token, seen", [("\u200d", "\\u200d"), ("\x1b", "\\x1b"), ("\u00a0", "\\xa0"),
                                         ("\ufe0f", "\\ufe0f"), ("\u0301", "\u25cc\u0301"), ("?", "?"),
                                         ("e\u0301", "e\u0301"), (" \x07", "␣\\x07")])
def test_a_token_without_a_glyph_of_its_own_shows_as_its_escape(token, seen):
    assert visible(token) == seen


def test_tok_tells_the_joiner_of_an_emoji_from_a_question_mark(world):
    text = shown(run(world, ":tok 👨\u200d👩? ❤\ufe0f e\u0301"))
    first = text.splitlines()[0]
    assert "\\u200d" in first and "?" in first.replace("\\u200d", "") and "\\ufe0f" in first, first
    assert "\u25cc\u0301" in first  # the accent alone, not on the space before it



# --- a byte-level BPE's tokens that hold part of a character ---------------------------------------------------
@pytest.fixture(scope="module")
def bytes_bpe(tmp_path_factory):
    """A byte-level BPE too small to hold every Chinese character whole: some of its tokens are bytes of one."""
    path = tmp_path_factory.mktemp("ab") / "world.txt"
    path.write_text(WORLD, encoding="utf-8")
    # its own checkpoint folder: a module's session is made before a test's own folder is set (conftest)
    session = Session(ModelConfig(**TINY), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                      data_spec=str(path), device_name="cpu", checkpoint_dir=path.parent / "checkpoints")
    run(session, ":set tokenizer=bpe:280")
    return session


def test_step_names_each_byte_token_as_tok_does_not_as_a_replacement_character(bytes_bpe):
    result = run(bytes_bpe, ":step 你好世界 temperature=100 seed=1")
    tokens = [r.token for r in result.rows]
    assert not any("\ufffd" in t for t in tokens), tokens
    assert len(set(tokens)) == len(tokens)  # ten rows, ten different names
    assert any(t.startswith("\\x") for t in tokens)  # a byte of a character, as :tok writes it
    text = shown(result)
    assert "\ufffd" not in text and "\\\\x" not in text, text  # its escape, not repr's doubled backslash


def test_mistakes_lens_and_attn_name_byte_tokens_by_their_bytes(bytes_bpe):
    hard = run(bytes_bpe, ":mistakes").text.hardest
    assert not any("\ufffd" in h.actual or "\ufffd" in h.guess for h in hard), hard
    lens = run(bytes_bpe, ":lens 你好世界")
    assert not any("\ufffd" in g for row in lens.rows for g in row.guesses)
    attn = run(bytes_bpe, ":attn 你好世界")
    assert attn.tokens == run(bytes_bpe, ":tok 你好世界").tokens and "\\xe4" in attn.tokens


# --- the HTML report's samples -----------------------------------------------------------------------------------
def test_the_reports_samples_show_control_characters_as_escapes_not_raw():
    from minitf_repl.report import ReportData, build_report

    sample = "a\x1b[2Jb\x07c\x0cd\u202eef\u200dg 你好\n"
    data = ReportData("minitf report: world.txt, step 0", {"model": {}, "train": {}, "gen": {}, "data": "w"}, [],
                      80, "ab", [], [], samples=[sample])
    page = build_report(data)
    shown = page[page.index('<pre class="sample">'):]
    shown = shown[:shown.index("</pre>")]
    for raw in ("\x1b", "\x07", "\x0c", "\u202e"):
        assert raw not in page, repr(raw)  # a character HTML does not allow, or one that reorders the sample
    assert "a\\x1b[2Jb\\x07c\\x0cd\\u202eef\u200dg 你好\n" in shown, shown  # the joiner is text (see below)


# --- the views' default text on a text without capitals ---------------------------------------------------------
class Decoded:
    """A corpus whose validation text decodes to `text` (what sample_window reads)."""

    def __init__(self, text: str):
        import torch

        self.tokenizer = self
        self.text = text
        self.splits = {"val": torch.zeros(len(text), dtype=torch.long)}

    def decode(self, ids) -> str:
        return self.text


@pytest.mark.parametrize("text, starts", [
    ("\u200d👩\u200d👧 ❤\ufe0f 你好世界，今天天气很好。我们去公园散步吧！", "你好世界，"),  # a word after a space
    ("\u0301 12 34 56 مرحبا بالعالم الجميل جدا اليوم", "مرحبا"),  # an Arabic word after a space
    ("\ufe0f👍\U0001f3fd 1234567890123456789", "👍\U0001f3fd 1"),  # no sentence: from the first whole character
])
def test_the_default_prompt_of_a_text_without_capitals_starts_a_sentence_not_mid_emoji(text, starts):
    from minitf_repl.commands.base import sample_window

    start, window = sample_window(Decoded(text))
    assert window.startswith(starts) and text[start:].startswith(window), (start, window)


def test_the_default_prompt_of_an_english_text_is_still_its_first_sentence():
    from minitf_repl.commands.base import sample_window

    text = "  x = 1\n  The quick brown fox jumps over the lazy dog."
    assert sample_window(Decoded(text))[1] == "The quick brown "


def test_the_default_prompt_of_a_chinese_text_starts_after_a_sentences_end():
    from minitf_repl.commands.base import sample_window

    text = "\u200d👧很好。我们去公园散步吧！今天天气很好。我们回家吧。"
    assert sample_window(Decoded(text))[1].startswith("我们去公园散步吧")


# --- joiners in generated text ------------------------------------------------------------------------------------
def test_gen_writes_an_emoji_family_and_persians_non_joiner_as_they_are(tmp_path):
    from test_repl import drive

    path = tmp_path / "fa.txt"
    path.write_text("من می\u200cخواهم بروم. 👨\u200d👩\u200d👧 خانه \u200fשלום\n" * 60, encoding="utf-8")
    session = Session(ModelConfig(**TINY), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                      data_spec=str(path), device_name="cpu")
    prompt = "می\u200cخواهم 👨\u200d👩\u200d👧"
    code, out, err, _ = drive(f":gen {prompt} n=3 seed=1\r", session)
    assert err == "" and prompt in out, out
    assert "\\u200c" not in out and "\\u200d" not in out
    _, out, err, _ = drive(":gen ab\x1b[2J n=1\r", session)  # ESC stays escaped
    assert "\x1b[2J" not in out + err


# --- :embed map=on on a Chinese text -----------------------------------------------------------------------------
def test_the_embedding_map_draws_chinese_characters_not_dots():
    from minitf_repl.render.scatter import DOT, scatter

    labels = ["你", "好", "世", "a", "界"]
    coords = [[0, 0], [1, 1], [0.5, 0.5], [1, 0], [0.55, 0.5]]
    grid, hidden = scatter(labels, coords, asked=[1], width=10, height=3)
    rows = grid.plain.split("\n")
    assert rows[0] == "│        好" and rows[2] == "│你       a", rows  # the asked one too, moved left to fit
    assert rows[1] == "│     界   ", rows  # 界 covers the right half of 世, which goes, and is counted hidden
    assert {cell_len(r) for r in rows[:3]} == {11} and hidden == 1 and DOT not in grid.plain
    grid, _ = scatter(["e\u0301", "ab", "\ufffd"], [[0, 0], [1, 1], [0.5, 0]], asked=[], width=6, height=2)
    assert grid.plain.split("\n")[:2] == ["│     " + DOT, "│e\u0301 " + DOT + "   "]  # one cell: itself; pieces: dots


def test_patch_keeps_each_cell_under_its_key_when_the_keys_are_two_columns_wide(world):
    text = shown(run(world, ":patch 你好世界 今天天气"), width=100)
    keys, rows = grid_lines(text, "今")
    starts = [column_of(keys, i) for i, ch in enumerate(keys) if ch in "今天气"]
    for row in rows[:2]:  # embed, blocks.0: a cell under each key, each as wide as its key
        name = row.split()[0]
        marks = [column_of(row, j) for j, ch in enumerate(row) if j >= len(name) and ch != " "]
        assert marks == starts, (keys, row)


def test_checks_batch_sets_chinese_characters_side_by_side_each_over_the_one_after_it(tmp_path):
    path = tmp_path / "zh.txt"
    path.write_text("你好世界今天天气很好我们去公园散步吧" * 80, encoding="utf-8")
    session = Session(ModelConfig(**TINY), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                      data_spec=str(path), device_name="cpu")
    text = shown(run(session, ":checks batch"))
    lines = text.splitlines()
    x = next(line for line in lines if line.startswith("x "))
    y = lines[lines.index(x) + 1]
    assert " " not in x[2:].rstrip() and " " not in y[2:].rstrip(), (x, y)  # no space in the text, none shown
    assert y[2:].rstrip()[:-1] == x[3:].rstrip(), (x, y)  # y is x moved one to the left
    assert cell_len(x.rstrip()) == cell_len(y.rstrip())


def test_the_reports_maps_name_byte_tokens_by_their_bytes(bytes_bpe, tmp_path):
    run(bytes_bpe, f":report {tmp_path / 'r.html'}")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    maps = page[page.index("<h2>Attention</h2>"):page.index("<h2>Loss by position</h2>")]  # and the embeddings
    assert "\ufffd" not in maps and "\\x" in maps


# --- the REPL's toolbar -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [100, 60, 48, 40, 30])
def test_the_toolbar_fits_the_screen_when_the_data_file_is_named_in_chinese(tmp_path, width):
    from minitf_repl import repl

    path = tmp_path / "红楼梦第一回至第八十回全文（程甲本）.txt"
    path.write_text("你好世界。" * 200, encoding="utf-8")
    session = Session(data_spec=str(path))
    text = repl.toolbar_text(session, width=width)
    assert cell_len(text) <= width, (cell_len(text), text)
    assert text.rstrip().endswith("）.txt")  # the name's end stays in view


# --- a user's own file with NUL bytes ----------------------------------------------------------------------------
def test_a_utf16_file_without_a_byte_order_mark_is_named_as_utf16_not_binary(tmp_path):
    from minitf_repl.core.data import read_text_file
    from minitf_repl.core.errors import DataError

    path = tmp_path / "notes.txt"
    path.write_bytes("the quick brown fox, café\n".encode("utf-16-le") * 50)
    with pytest.raises(DataError, match=r"is UTF-16-LE text \(without a byte-order mark\); convert it to UTF-8: "
                                        r"iconv -f UTF-16LE -t UTF-8 \S+notes.txt > \S+notes-utf8.txt"):
        read_text_file(str(path))


def test_utf8_text_with_a_stray_nul_says_so_and_how_to_remove_it(tmp_path):
    from minitf_repl.core.data import read_text_file
    from minitf_repl.core.errors import DataError

    path = tmp_path / "export.txt"
    path.write_bytes("你好世界，今天天气很好。\n".encode() * 100 + b"\x00" + "more text\n".encode() * 100)
    with pytest.raises(DataError, match=r"is UTF-8 text with 1 NUL byte in it \(the first at offset 3,700\), which no "
                                        r"text holds; remove it: tr -d '\\000' < \S+export.txt > \S+export-clean.txt"):
        read_text_file(str(path))
    path.write_bytes(bytes(range(256)) * 20)  # a binary file is still one
    with pytest.raises(DataError, match="looks binary"):
        read_text_file(str(path))


# --- checkpoints of a file named with a no-break space or an emoji ------------------------------------------------
@pytest.mark.parametrize("name", ["my\u00a0notes.txt", "Screen text 10.00.00\u202fAM.txt", "👨\u200d👩\u200d👧 stories.txt"])
def test_a_checkpoint_of_a_file_named_with_a_no_break_space_or_an_emoji_family_loads(tmp_path, name):
    path = tmp_path / name
    path.write_text("hello world, some text here. " * 60, encoding="utf-8")
    store = tmp_path / "checkpoints"
    session = Session(ModelConfig(**TINY), TrainConfig(steps=2, batch_size=4, eval_every=2, eval_batches=1),
                      data_spec=str(path), device_name="cpu", checkpoint_dir=store)
    run(session, ":train")
    run(session, ":save run1")
    listing = run(session, ":ls")
    assert sorted(r.name for r in listing.rows) == ["autosave", "run1"], listing
    assert not any(r.error for r in listing.rows), listing  # autosave too: each one readable
    loaded = run(Session(device_name="cpu", checkpoint_dir=store), ":load run1")
    assert loaded.data_spec == str(path) and loaded.step == 2


def test_a_manifest_naming_its_data_with_an_escape_or_a_bidi_override_is_still_refused():
    from minitf_repl.core.checkpoint.manifest import shows_as_text

    assert shows_as_text("/data/my\u00a0notes \u200d\u202f.txt")
    assert not any(shows_as_text(f"/data/a{ch}b.txt") for ch in ("\x1b", "\n", "\u202e", "\u2066", "\u2028", "\ud800"))


def test_train_watch_names_byte_tokens_by_their_bytes_as_attn_does(bytes_bpe):
    run(bytes_bpe, ":train steps=2 eval_every=1 watch=attn prompt=你好世界")
    frame = bytes_bpe.watch_frames[-1]
    assert frame.tokens == run(bytes_bpe, ":attn 你好世界").tokens and "\\xe4" in frame.tokens
    run(bytes_bpe, ":train steps=2 eval_every=1 watch=lens prompt=你好世界")
    assert not any("\ufffd" in g.guess for g in bytes_bpe.watch_frames[-1].lens)


def test_patch_lists_the_positions_where_two_prompts_differ_in_byte_tokens(bytes_bpe):
    result = run(bytes_bpe, ":patch 你好世界 您好世界")
    assert result.clean_tokens[:3] != result.corrupt_tokens[:3] and "\ufffd" not in "".join(result.corrupt_tokens)
    text = shown(result)
    assert "the prompts differ at positions 0, 1 and 2 " in text, text  # 你 and 您: three bytes each, all different
    assert "\\\\x" not in text  # a token quoted with its escape once, not repr's doubled backslash


@pytest.mark.parametrize("line", [":resid 你好 at=1", ":ln 你好 at=1", ":ffn 你好 at=1"])
def test_the_worked_views_name_byte_tokens_by_their_bytes(bytes_bpe, line):
    result = run(bytes_bpe, line)
    assert result.tokens[:3] == ["\\xe4", "\\xbd", "\\xa0"], result.tokens  # 你, a byte at a time
    assert "'\\xbd'" in shown(result)  # the query, quoted with its escape once
