"""What this morning's sweeps found and left, fixed: each test failed before its fix.

Under a byte-level BPE, `:qkv`, `:heads`, `:checks batch` and `:checks causal` (and `:grad`'s tokens) still named
every token that holds part of a character "�", where `:tok`, `:step`, `:attn` and the rest name its bytes (\\xe4):
`:qkv 你好世界` listed keys "�", "�", "�" and quoted the text around the query as '���好������', because it built that
text by joining its tokens' names. They name the bytes now, and `:qkv` decodes the text around the query from its
tokens, so it reads '你好世界' while its keys read \\xe4, \\xbd, \\xa0.
A prompt with a character the vocabulary lacks was refused with Python's repr of it: a typed backslash read '\\\\'
and ESC '\\\\x1b', where the views quote a token '\\' and '\\x1b'. The core's message now quotes as the views
do (core.words.quoted_chars; the core imports no UI).
`:data` to a text of another vocabulary rebuilt the model without asking whether its weights fit in the memory free
(`:set` and the first build ask): with 100 KB free, a 2,000-character text built a table of 256 KB, where the
out-of-memory killer would end the session. It is now refused in one line before anything changes.
A rebuild said "the trained model (step N) was not kept: autosave is off" (and "the weights loaded from X go with the
rebuild") before building: a Ctrl-C during the build keeps the old model, and the line was said of a model still
there. `:set` and `:data` now say it once the new model stands.
`:heads` (and `:train watch=heads`) drew its repeated random tokens from the whole vocabulary: under bpe:280 on a
page of Chinese, most of the 280 are bytes the text never holds (\\x0b, \\x1f), whose input rows never trained, so the
copying test asked whether a model copies tokens it has never read. It draws from the tokens the training text holds.
A token cut for a table's cell was cut at 16 characters: a piece of 16 Chinese characters took 32 columns, and
squeezed the other columns as the cut was there to prevent. It is cut at 16 columns.
`:train watch=embed`'s frames and `:report`'s embedding map of an untied model still drew every row of W_E, where
`:embed map=on` draws the rows that trained (the tokens the training text holds) and says how many it left out: under
a BPE, 275 of 300 rows were the random ones they started as. They draw the same rows now, and say so.
`:embed TEXT map=on` under a byte-level BPE drew the text's own tokens on the map as "�", where the line under the map
names them \\xe4, \\xbd, \\xa0: the map's labels are named by their bytes too.
The views' titles quoted the text they read with repr: on a text with backslashes (code, a Windows path), `:step
C:\\path` read "next token after 'C:\\\\path'", a backslash the text does not hold, where the tokens below are
quoted with it once. `:step`, `:lens`, `:score`, `:qkv`, `:resid`, `:ln`, `:ffn`, `:rope`, `:kv`, `:heads`, `:grad`,
`:shapes`, `:ngram`, `:attrib`, `:patch` and the watch frames quote it as the core's messages now do.
"""

import sys
from pathlib import Path

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.session import Session

sys.path.insert(0, str(Path(__file__).parent))
# the text beyond ASCII that sweep ab tried, its byte-level BPE session on it, and its two helpers
from test_sweep_ab import TINY, WORLD, bytes_bpe, run, shown  # noqa: E402,F401  bytes_bpe: a fixture


# --- 1. byte tokens named by their bytes ---------------------------------------------------------------------------
def test_qkv_names_byte_tokens_by_their_bytes_and_quotes_the_text_around_the_query_as_it_reads(bytes_bpe):
    result = run(bytes_bpe, ":qkv 你好世界")
    assert result.tokens == run(bytes_bpe, ":tok 你好世界").tokens and "\\xe4" in result.tokens
    text = shown(result)
    assert "\ufffd" not in text, text
    assert "of '你好世界'" in text.splitlines()[0], text  # the text decoded, not the names "\\xe4\\xbd\\xa0好..."


def test_qkv_quotes_the_text_around_a_query_late_in_a_long_text(tmp_path):
    """A guard of the rewritten cut (it passed before too): the text still centres on a query late in the text."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    path = tmp_path / "letters.txt"
    path.write_text(letters * 40, encoding="utf-8")
    session = Session(ModelConfig(**{**TINY, "max_seq_len": 64}), TrainConfig(steps=4, batch_size=4),
                      data_spec=str(path), device_name="cpu", checkpoint_dir=tmp_path / "checkpoints")
    first = shown(run(session, f":qkv {letters} at=22")).splitlines()[0]
    assert f"query 22 'w' of '{letters}'" in first, first
    twice = letters * 2  # the query at 40: 40 characters before it and 8 after, cut with "…"
    first = shown(run(session, f":qkv {twice} at=40"), width=120).splitlines()[0]
    assert f"query 40 'o' of '…{twice[1:49]}…'" in first, first


def test_embed_map_draws_the_texts_byte_tokens_by_their_bytes_as_the_line_under_it_names_them(bytes_bpe):
    result = run(bytes_bpe, ":embed 你好 map=on")
    assert result.tokens[:3] == ["\\xe4", "\\xbd", "\\xa0"]
    assert [result.map.labels[k] for k in result.map.asked] == result.tokens
    assert "\ufffd" not in shown(result)  # the asked tokens were drawn "�" on the map


TOKENS = {":heads": lambda r: r.tokens, ":grad 你好世界": lambda r: r.tokens,
          ":checks batch": lambda r: [*r.batch.x, *(t for t in r.batch.y if t is not None)],
          ":checks causal": lambda r: r.causal.tokens}


@pytest.mark.parametrize("line", list(TOKENS))
def test_heads_checks_and_grad_name_byte_tokens_by_their_bytes(bytes_bpe, line):
    result = run(bytes_bpe, line)
    tokens = TOKENS[line](result)
    assert not any("\ufffd" in t for t in tokens), tokens
    assert any(t.startswith("\\x") for t in tokens), tokens  # a byte of a character, as :tok names it
    assert "\ufffd" not in shown(result)


# --- 3. the core's unknown characters quoted as the views quote ----------------------------------------------------
@pytest.mark.parametrize("typed, quoted", [("\\", "'\\'"), ("\x1b", "'\\x1b'"), ("'", "\"'\"")])
def test_a_character_the_vocabulary_lacks_is_quoted_as_the_views_quote_it(typed, quoted):
    from minitf_repl.core.data import CharTokenizer

    with pytest.raises(DataError) as caught:
        CharTokenizer.from_text("hello world").encode("hello" + typed)
    message = str(caught.value)
    assert f"1 character not in the vocabulary: {quoted};" in message, message


# --- 5. :data to another vocabulary checks the new weights against the memory free ---------------------------------
def test_data_of_another_vocabulary_is_refused_before_the_switch_where_its_weights_cannot_fit(tmp_path, monkeypatch):
    from minitf_repl.core import sizes
    from test_commands import tiny_session

    session = tiny_session()
    run(session, ":train steps=1")
    model = session.model
    # 2,000 characters of their own: the embedding table alone is 2,000 x 32 floats, 256 KB, where 100 KB are free
    path = tmp_path / "han.txt"
    path.write_text("".join(chr(0x4E00 + i) for i in range(2000)) * 3, encoding="utf-8")
    monkeypatch.setattr(sizes, "available_memory", lambda: 100_000)  # the sort:4 model's 44 KB fit in it
    with pytest.raises(UserError, match=r"that model's weights would take about .* GiB free; lower d_model"):
        run(session, f":data {path}")
    # nothing changed: the model, its step, the data (the rebuild was not even begun)
    assert session.model is model and session.trainer.step == 1 and session.data_spec == "sort:4"
    assert session.model_config.vocab_size == session.data.tokenizer.vocab_size


# --- 6. what a rebuild loses is said once the new model stands ----------------------------------------------------
@pytest.mark.parametrize("line", [":set n_layers=2 autosave=off", ":data {text}"])
def test_a_ctrl_c_during_a_rebuild_says_nothing_of_a_model_not_kept(tmp_path, monkeypatch, line):
    from minitf_repl.core import train as train_module
    from test_commands import Recorder, tiny_session
    from test_commands import run as run_with

    text = tmp_path / "notes.txt"
    text.write_text("the quick brown fox jumps over the lazy dog.\n" * 20, encoding="utf-8")
    session = tiny_session()
    run(session, ":set autosave=off")
    run(session, ":train steps=1")
    model = session.model

    def interrupted(*args, **kwargs):  # a Ctrl-C arriving part-way through the build
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(train_module, "Trainer", interrupted)
        hooks = Recorder()
        with pytest.raises(KeyboardInterrupt):
            run_with(session, line.format(text=text), hooks)
    assert session.model is model and session.trainer.step == 1  # the old model stands, still unsaved
    assert not any("was not kept" in n for n in hooks.notices), hooks.notices  # it was said before the build
    hooks = Recorder()
    run_with(session, line.format(text=text), hooks)  # not cut short: the model goes, and that is said
    assert session.model is not model
    assert any("the trained model (step 1) was not kept" in n for n in hooks.notices), hooks.notices


# --- 7. :heads draws its random tokens from the text's own ---------------------------------------------------------
def test_heads_draws_its_random_tokens_from_those_the_text_holds(bytes_bpe):
    from minitf_repl.core.bpe import shown_pieces

    data = bytes_bpe.data
    held = set(shown_pieces(data.tokenizer, sorted(set(data.splits["train"].tolist()))))
    assert len(held) < data.tokenizer.vocab_size / 2  # most of the 280 are bytes this text never holds
    result = run(bytes_bpe, ":heads")
    assert set(result.tokens) <= held, set(result.tokens) - held  # it drew 16 of 280: unused bytes, \x0b, \x1f
    run(bytes_bpe, ":train steps=1 watch=heads")
    frames = [f for f in bytes_bpe.watch_frames if f.tokens]
    assert frames and all(set(f.tokens) <= held for f in frames)


# --- 2. a long token cut for a cell by columns ---------------------------------------------------------------------
@pytest.mark.parametrize("piece", ["你好世界" * 4, "ab" + "你好世界" * 4, "-" * 64])
def test_a_long_token_is_cut_for_a_cell_by_terminal_columns(piece):
    from rich.cells import cell_len

    from minitf_repl.palette import PIECE_CELL, piece_cell

    cut = piece_cell(piece)
    assert cut.endswith("…") and PIECE_CELL - 1 <= cell_len(cut) <= PIECE_CELL, (cut, cell_len(cut))
    assert piece.startswith(cut[:-1])
    assert piece_cell("你好世界") == "你好世界" and piece_cell("cafe\u0301" * 3) == "cafe\u0301" * 3  # they fit


# --- 4. :train watch=embed and :report map the rows that train, as :embed does --------------------------------------
def test_watch_embed_and_the_report_map_an_untied_model_only_where_its_rows_trained(tmp_path):
    import torch

    from minitf_repl.core.inside import embedding_map
    from test_commands import TEXT

    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    session = Session(ModelConfig(**{**TINY, "tie_embeddings": False}),
                      TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1), data_spec=str(path),
                      device_name="cpu", checkpoint_dir=tmp_path / "checkpoints")
    run(session, ":set tokenizer=bpe:300")
    held = sorted(set(session.data.splits["train"].tolist()))
    left_out = session.data.tokenizer.vocab_size - len(held)
    assert left_out > 100  # most of the 256 bytes: this English text never holds them
    result = run(session, ":train steps=2 watch=embed")
    frame = session.watch_frames[-1]
    assert frame.vocab == [session.data.tokenizer.itos[i] for i in held] and frame.left_out == left_out
    ours = torch.tensor(embedding_map(session.model, held).coords)
    assert torch.allclose(torch.tensor(frame.coords.tolist()), ours, atol=1e-5)  # those rows, in that order
    assert f"not drawn: the {left_out} tokens the training text never holds" in " ".join(shown(result).split())
    run(session, f":report {tmp_path / 'r.html'}")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert f"Not drawn: the {left_out} tokens the training text never holds" in page
    assert f"not drawn: the {left_out} tokens the training text never holds</figcaption>" in page  # a frame


# --- the views' titles quote the text read as their tokens are quoted -----------------------------------------------
@pytest.fixture(scope="module")
def code(tmp_path_factory):
    """A text with backslashes, as code has them (pydoc, a data file of Python or of Windows paths)."""
    path = tmp_path_factory.mktemp("ag") / "code.txt"
    path.write_text('print("a\\tb\\n")  # C:\\path\\to\n' * 40, encoding="utf-8")
    return Session(ModelConfig(**TINY), TrainConfig(steps=2, batch_size=2), data_spec=str(path), device_name="cpu",
                   checkpoint_dir=path.parent / "checkpoints")


@pytest.mark.parametrize("line, title", [
    (":step C:\\path", "next token after 'C:\\path'"), (":qkv C:\\path", "of 'C:\\path': layer 0"),
    (":heads C:\\path", "on 'C:\\path'"), (":shapes C:\\path", "shape trace of 'C:\\path'"),
    (":resid C:\\path", "of 'C:\\path'"), (":kv C:\\path", "after 'C:\\path', greedily"),
    (":grad C:\\path", "backprop on 'C:\\path'"), (":score C:\\path", "teacher forcing on 'C:\\path'"),
])
def test_a_views_title_quotes_a_typed_backslash_once_as_its_tokens_are_quoted(code, line, title):
    first = shown(run(code, line), 120).splitlines()[0]
    assert title in first, first  # repr wrote 'C:\\\\path', a backslash the text does not hold
