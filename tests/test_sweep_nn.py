"""What a user's-eye sweep of scale and long sessions found (large data files, many checkpoints, long runs, settings
at their limits, long sessions): each test failed before its fix.

`:data` of a large file (80 MB) read for 10 s and 1 GB, as a Python list of one int a character before the tensor,
without a word; Ctrl-C while it read only asked for a stop that nothing polled, so the data switched anyway once the
file was read, and so did `:set tokenizer=bpe:N` on a long text. A part of a large file cut with `head -c` was "not
UTF-8" when the cut fell inside a character, and a folder of 5,000 small texts was answered with one of them. A
training larger than the machine's free memory started (for the OOM killer to end the session), while the estimate
counted attention maps the fast path never keeps (max_seq_len=8192 refused as 211 GiB). A long run's live table laid
out every row at each evaluation, its checkpoint could not be saved past some 180,000 steps, and each later :train
deep-copied the whole history. :shapes of a deep model miscounted its folded blocks' steps, :attn of 64 heads drew
64 maps and :ls of 400 checkpoints 800 lines; a history file past 16 MiB was refused at every start; and the line
that moves minitf's options before the command moved only the first --set.
"""

import os
import signal

import pytest
import torch

from minitf_repl.core import data as data_module
from minitf_repl.core.data import CharTokenizer, TextCorpus
from minitf_repl.core.errors import DataError
from test_commands import Recorder, run, tiny_session
from test_repl import drive


# --- a large data file -----------------------------------------------------------------------------------------
def test_ctrl_c_while_a_file_is_read_stops_the_read_and_keeps_the_data(tmp_path, monkeypatch):
    path = tmp_path / "big.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n" * 200, encoding="utf-8")
    read = data_module._read_text

    def ctrl_c_while_reading(*args, **kwargs):  # the user presses Ctrl-C while the file is read
        os.kill(os.getpid(), signal.SIGINT)
        return read(*args, **kwargs)

    monkeypatch.setattr(data_module, "_read_text", ctrl_c_while_reading)
    code, out, err, session = drive(f":data {path}\r:data\r", session=tiny_session("sort:4"))
    assert "interrupted" in err
    assert session.data_spec == "sort:4" and "data is now" not in out
    assert out.count("sort") >= 1  # the session went on: the next :data showed the data it kept


def test_a_large_file_is_announced_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n" * 200, encoding="utf-8")
    monkeypatch.setattr(data_module, "SLOW_FILE_BYTES", 1000)
    recorder = Recorder()
    run(tiny_session("sort:4"), f":data {path}", recorder)
    assert any(n.startswith("reading big.txt") and "Ctrl-C stops it" in n for n in recorder.notices)
    monkeypatch.setattr(data_module, "SLOW_FILE_BYTES", 10**9)
    recorder = Recorder()
    run(tiny_session("sort:4"), f":data {path}", recorder)
    assert not any(n.startswith("reading") for n in recorder.notices)


def test_a_corpus_is_encoded_without_a_list_of_ids(monkeypatch):
    text = "ab\U0001F600 cé\n" * 50 + "zy"
    expected = {ch: i for i, ch in enumerate(sorted(set(text)))}

    def no_list(self, text):
        raise AssertionError("a list of one Python int a character")

    monkeypatch.setattr(CharTokenizer, "encode", no_list)
    corpus = TextCorpus("t", text, "test")
    assert corpus.splits["train"].tolist() == [expected[ch] for ch in corpus.split_text("train")]
    assert corpus.splits["val"].tolist() == [expected[ch] for ch in corpus.split_text("val")]
    assert corpus.splits["train"].dtype == torch.uint8


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int16, torch.int32])
def test_the_fast_encoding_reads_as_encode_does(dtype):
    tokenizer = CharTokenizer.from_vocab("zé a\U0001F600b")  # a checkpoint's order, not sorted
    for text in ("", "a", "ba z\U0001F600é", "e\u0301"):  # the last: é typed as e and an accent (NFD)
        assert tokenizer.encode_tensor(text, dtype).tolist() == tokenizer.encode(text)
        assert tokenizer.encode_tensor(text, dtype).dtype == dtype
    with pytest.raises(DataError, match="not in the vocabulary: 'q'"):
        tokenizer.encode_tensor("abq", dtype)


# --- the shell's line for options of minitf given after the command ---------------------------------------------
def test_every_option_of_minitf_after_the_command_moves_before_it():
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("train", "--steps", "20", "--set", "n_layers=1", "--set", "d_model=16",
                                        "--checkpoint-dir", "/tmp/x"), code=2)
    assert line.endswith("goes before the command: minitf --set n_layers=1 --set d_model=16 --checkpoint-dir /tmp/x "
                         "train --steps 20")
    line = assert_one_error_line(invoke("gen", "--set", "n=5", "--", "--set"), code=2)  # text after -- stays
    assert line.endswith(": minitf --set n=5 gen -- --set")


# --- a model too large for this machine --------------------------------------------------------------------------
def test_a_training_larger_than_the_free_memory_is_refused_before_it_starts(monkeypatch):
    from minitf_repl.core import sizes
    from minitf_repl.core.errors import UserError

    monkeypatch.setattr(sizes, "available_memory", lambda: 0)  # a machine with no memory free
    s = tiny_session()
    with pytest.raises(UserError, match=r"would need about .* GiB \(a rough upper estimate\), but this machine has "
                                        r"0\.0 GiB free; lower batch_size or max_seq_len"):
        run(s, ":train")
    assert not s.has_model or s.trainer.step == 0
    monkeypatch.setattr(sizes, "available_memory", lambda: None)  # unknown (not Linux): nothing is checked
    assert run(s, ":train").steps == 6
    monkeypatch.setattr(sizes, "available_memory", lambda: 0)  # what the model holds counts as free for it
    monkeypatch.setattr(sizes, "training_bytes",
                        lambda config, batch_size, fused=False: 16 * sizes.parameter_count(config))
    assert run(s, ":train steps=2").steps == 2


def test_a_compare_larger_than_the_free_memory_is_refused_before_it_starts(monkeypatch):
    from minitf_repl.core import sizes
    from minitf_repl.core.errors import UserError

    monkeypatch.setattr(sizes, "available_memory", lambda: 0)
    with pytest.raises(UserError, match="but this machine has 0.0 GiB free"):
        run(tiny_session(), ":compare lr=0.01 vs lr=0.02 steps=2")


# --- :shapes of a deep model --------------------------------------------------------------------------------------
def test_shapes_of_a_deep_model_counts_the_steps_it_shows():
    import re

    from minitf_repl.core.config import ModelConfig
    from minitf_repl.session import Session
    from test_commands import TINY
    from test_render import text_of

    session = Session(ModelConfig(**{**TINY, "n_layers": 5}), data_spec="sort:4", device_name="cpu")
    result = run(session, ":shapes 12")
    text = text_of(result, 160)
    block0 = text.split("blocks.0 TransformerBlock\n")[1].split("blocks.1 ")[0]
    listed = sum(1 for line in block0.splitlines() if re.match(r"  \S", line))  # a step's line, not its formula
    alike = re.findall(r"same (\d+) steps as blocks\.0", text)
    assert alike == [str(listed)] * 4  # blocks.1 to 4 run the steps blocks.0 lists
    idle = int(re.search(r"(\d+) dropout steps? not shown", text).group(1))
    total = int(re.search(r"(\d+) steps of one forward pass, 5 layers", text).group(1))
    shown = sum(1 for line in text.splitlines() if re.match(r"  [a-z_]", line) and "same" not in line
                and not re.match(r"  step +shape", line))  # the columns' names, not a step
    assert shown + 4 * listed + idle == total  # every step counted once: shown, folded or not shown


# --- a long run's live table -------------------------------------------------------------------------------------
def test_a_long_runs_live_table_lays_out_the_rows_the_screen_shows(monkeypatch):
    import io

    from rich.console import Console

    from minitf_repl.render import live

    console = Console(file=io.StringIO(), width=100, height=30, force_terminal=True)
    reporter = live.RichReporter(console, live=True)
    reporter.on_train_start(200_000, 0, False)
    try:
        rows = [{"step": 100 * (k + 1), "train_loss": 2.0 - k / 1e4, "val_loss": 2.1 - k / 1e4, "lr": 1e-3,
                 "tokens_per_second": 1e5, "elapsed": k / 10} for k in range(2000)]
        reporter._table = live.LossTable(rows, vocab_size=65)
        laid_out = []
        monkeypatch.setattr(live, "add_row", lambda table, *cells: (laid_out.append(cells), table.add_row(*cells)))
        view = reporter.training_view()
        lines = console.render_lines(view, pad=False)
        assert len(laid_out) < 4 * 30  # a few layouts of a screen's rows, not 2,000 rows three times
        assert len(lines) <= 29 and "earlier evaluations above" in "".join(s.text for line in lines for s in line)
        assert "200,000" in "".join(s.text for line in lines for s in line)  # the last evaluation is on screen
    finally:
        reporter.close()


# --- a tokenizer trained on a large text --------------------------------------------------------------------------
@pytest.mark.parametrize("at", ["train_bpe", "retokenized"])
def test_ctrl_c_while_a_tokenizer_trains_or_reads_the_text_keeps_the_one_in_use(tmp_path, monkeypatch, at):
    from minitf_repl.core import bpe

    path = tmp_path / "text.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n" * 300, encoding="utf-8")
    owner, name = (bpe, "train_bpe") if at == "train_bpe" else (TextCorpus, "retokenized")
    original = getattr(owner, name)

    def ctrl_c_then(*args, **kwargs):  # the user presses Ctrl-C while it runs
        os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, ctrl_c_then)
    code, out, err, session = drive(f":data {path}\r:set tokenizer=bpe:300\r", session=tiny_session("sort:4"))
    assert "interrupted" in err
    assert session.tokenizer_setting == "char" and session.tokenizer is None
    assert "tokenizer: char -> bpe" not in out


def test_the_memory_a_training_needs_counts_no_attention_maps_the_fast_path_does_not_keep(monkeypatch):
    from minitf_repl.core import sizes
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.core.errors import UserError

    config = ModelConfig(max_seq_len=4096)
    maps = 4 * 16 * 4096 * config.n_layers * 3 * config.n_heads * 4096  # three (T, T) maps a head, float32
    assert sizes.training_bytes(config, 16) - sizes.training_bytes(config, 16, fused=True) == maps
    s = tiny_session("pydoc")
    run(s, ":set batch_size=64 max_seq_len=8192")  # fast_path=on (default): about 1 GiB, not 100
    assert s.model_config.max_seq_len == 8192
    with pytest.raises(UserError, match=r"would need about \d+ GiB \(the limit is 64 GiB\)"):
        run(s, ":set fast_path=off")  # the readable path keeps them: refused as before
    monkeypatch.setattr(sizes, "available_memory", lambda: 2 * 2**30)  # a machine with 2 GiB free trains it
    sizes.check_memory_free(s.model_config, 64, fused=True)
    with pytest.raises(UserError, match="but this machine has 2.0 GiB free"):
        sizes.check_memory_free(s.model_config, 64)


# --- :attn of a model with many heads -----------------------------------------------------------------------------
def test_attn_of_many_heads_draws_the_first_sixteen_and_says_so():
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.session import Session
    from test_commands import TINY
    from test_render import plain

    session = Session(ModelConfig(**{**TINY, "d_model": 64, "n_heads": 32}), data_spec="sort:4", device_name="cpu")
    result = run(session, ":attn 1234")
    assert len(result.maps) == 32  # --json keeps every head's map
    text = plain(result, 40)
    assert "head 15 " in text and "head 16 " not in text and "head 31 " not in text
    assert ("heads 16-31 are not drawn (at most 16 maps): :attn TEXT layer=0 head=N draws head N (0 to 31); "
            ":heads TEXT layer=0 says what each head does") in " ".join(text.split())
    few = run(Session(ModelConfig(**TINY), data_spec="sort:4", device_name="cpu"), ":attn 1234")
    assert "not shown" not in plain(few, 40)


# --- a part of a large file, cut with head -c ---------------------------------------------------------------------
def test_a_file_cut_inside_its_last_character_is_read_without_it(tmp_path, monkeypatch):
    from minitf_repl.core.data import load_data

    whole = "héllo wörld, a text\n" * 50
    raw = whole.encode("utf-8")
    cut = raw[: raw.rindex("ö".encode()) + 1]  # `head -c N` ends one byte into the last "ö"
    path = tmp_path / "part.txt"
    path.write_bytes(cut)
    corpus = load_data(str(path))
    assert corpus.text == cut[:-1].decode("utf-8")
    assert corpus.description.endswith("its last character dropped (the file ends 1 byte into it)")
    path.write_bytes(raw[:10] + b"\xff" + raw[10:])  # a bad byte inside is still not UTF-8
    with pytest.raises(DataError, match="is not UTF-8 text"):
        load_data(str(path))
    monkeypatch.setattr(data_module, "MAX_FILE_BYTES", 100)  # too large: the line says how to cut a part
    path.write_bytes(raw)
    with pytest.raises(DataError, match=r"up to 0 MiB \(the text is held in memory whole\): use a part of it, e\.g\. "
                                        r"head -c 0M .*part\.txt > .*part-part\.txt$"):
        load_data(str(path))


# --- a folder of many small texts ---------------------------------------------------------------------------------
def test_a_folder_of_many_texts_is_answered_with_how_to_join_them(tmp_path):
    from minitf_repl.core.data import load_data

    folder = tmp_path / "poems"
    folder.mkdir()
    for k in range(300):
        (folder / f"p{k:03}.txt").write_text(f"poem {k}\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_data(str(folder))
    assert str(e.value).endswith(f"e.g. {folder}/p000.txt, or join its 300 .txt files into one: cat {folder}/*.txt "
                                 f"> {folder}.txt")
    one = tmp_path / "one"
    one.mkdir()
    (one / "a.txt").write_text("just one\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_data(str(one))
    assert str(e.value).endswith(f"e.g. {one}/a.txt")  # one file: nothing to join


# --- a long run's checkpoint --------------------------------------------------------------------------------------
def test_a_long_runs_checkpoint_keeps_a_thinned_history_and_still_saves(checkpoint_dir, monkeypatch):
    import json

    from minitf_repl.core.checkpoint import layout, store

    # the real bound: HISTORY_SAVED rows (each under 1,000 bytes) fit in a manifest many times over
    assert store.HISTORY_SAVED * 1000 < layout.MAX_MANIFEST_BYTES
    monkeypatch.setattr(store, "HISTORY_SAVED", 20)
    s = tiny_session(eval_every=10, steps=95)
    result = run(s, ":train")
    assert result.saved == "autosave" and result.save_error is None
    manifest = json.loads((checkpoint_dir / "autosave" / "checkpoint.json").read_text())
    rows = manifest["trainer"]["history"]
    assert 10 <= len(rows) <= 22 and rows[0]["step"] == 1 and rows[-1]["step"] == 95
    evaluated = [r["step"] for r in rows if r["val_loss"] is not None]
    assert evaluated == [r["step"] for r in s.trainer.history if r["val_loss"] is not None]  # every evaluation
    full = {r["step"]: r for r in s.trainer.history}
    assert all(full[r["step"]] == r for r in rows)  # rows of the run, unchanged
    run(s, ":load autosave")
    assert s.trainer.history == rows and s.trainer.final_lr() == full[95]["lr"]
    run(s, ":train steps=30", Recorder(stop_after=10))  # a new run, stopped, then continued: it replaces its own
    run(s, ":train")
    assert steps_saved(checkpoint_dir) == {"autosave": 125, "autosave-1": 95}


def steps_saved(folder) -> dict:
    from minitf_repl.core import checkpoint as ckpt

    return {row.name: row.step for row in ckpt.list_checkpoints(folder)}


# --- a long history and each :train's snapshot --------------------------------------------------------------------
def test_a_snapshot_copies_the_history_rows_without_a_deep_copy_of_each(monkeypatch):
    import copy

    from minitf_repl.core import train as train_module

    s = tiny_session()
    run(s, ":train")
    trainer = s.trainer
    before = [dict(row) for row in trainer.history]
    deep = copy.deepcopy

    def no_history(value, *args, **kwargs):  # 200,000 rows took 1.7 s this way, at every :train
        assert not (isinstance(value, dict) and "history" in value), "the history's rows deep-copied one by one"
        return deep(value, *args, **kwargs)

    monkeypatch.setattr(train_module.copy, "deepcopy", no_history)
    snapshot = trainer.snapshot()
    trainer.history[-1]["train_loss"] = 99.0  # even a row changed in place is given back as it was
    trainer.history.append(dict(before[-1], step=7))
    trainer.rollback(snapshot)
    assert trainer.history == before
    snapshot["trainer"]["history"][0]["lr"] = -1.0  # the snapshot's rows are its own, and so are the trainer's
    assert trainer.history == before


# --- a history file that grew for years ---------------------------------------------------------------------------
def test_a_history_file_past_its_limit_keeps_its_newest_entries(tmp_path, monkeypatch):
    from minitf_repl import repl

    monkeypatch.setattr(repl, "MAX_HISTORY_BYTES", 4000)
    path = tmp_path / "history"
    path.write_text("".join(f"\n# 2026-01-01 00:00:{k % 60:02}.000000\n+:gen line {k}\n" for k in range(200)))
    warnings = []
    history = repl.make_history(path, warnings.append)
    assert type(history).__name__ == "SafeFileHistory"  # it goes on being written, not kept in memory only
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: history file {path} had ")
    assert "its oldest entries were dropped" in warnings[0]
    lines = list(history.load_history_strings())  # newest first
    assert lines[0] == ":gen line 199" and ":gen line 0" not in lines and len(lines) > 20
    assert path.stat().st_size <= 2000 and oct(path.stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history"]  # no file left beside it


# --- a folder of hundreds of checkpoints ----------------------------------------------------------------------------
def test_ls_of_hundreds_of_checkpoints_lists_the_newest_and_says_how_to_see_all(checkpoint_dir, monkeypatch):
    import shutil

    from minitf_repl.commands import checkpoints as commands
    from test_render import plain

    monkeypatch.setattr(commands, "LS_SHOWN", 5)
    s = tiny_session()
    run(s, ":train steps=2")
    for k in range(12):
        shutil.copytree(checkpoint_dir / "autosave", checkpoint_dir / f"run{k:02}")
    result = run(s, ":ls")
    assert len(result.rows) == 13  # --json has every one
    for width in (40, 100):
        text = f" {plain(result, width)} "
        names = [row.name for row in result.rows]  # newest first
        assert all(f" {name} " in text for name in names[:5]) and not any(f" {name} " in text for name in names[5:])
        assert "8 older checkpoints not listed (the newest 5 of 13 are): :ls all=on lists every one" in text
    every = run(s, ":ls all=on")
    shown = plain(every)  # drawn once, not once a name
    assert "not listed" not in shown and all(f"run{k:02}" in shown for k in range(12))


def test_reading_a_long_text_with_a_new_tokenizer_is_announced(tmp_path, monkeypatch):
    from minitf_repl.commands import shared

    path = tmp_path / "text.txt"
    path.write_text("the quick brown fox jumps over the lazy dog\n" * 300, encoding="utf-8")
    s = tiny_session("sort:4")
    run(s, f":data {path}")
    recorder = Recorder()
    run(s, ":set tokenizer=bpe:300", recorder)
    assert not any(n.startswith("reading") for n in recorder.notices)
    monkeypatch.setattr(shared, "SLOW_READ_CHARS", 1000)
    recorder = Recorder()
    run(s, ":set tokenizer=bpe:280", recorder)
    said = "reading text.txt's 13,200 characters with it: a while; Ctrl-C stops it and keeps the tokenizer in use"
    assert said in recorder.notices
