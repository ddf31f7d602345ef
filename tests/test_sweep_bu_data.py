"""Sweep bu, large data files: running out of memory while a file was read was told to lower batch_size or the model
size; a text with one emoji in it took 4 bytes a character and was copied whole twice more while it was read (its
splits' slices, its UTF-8 for the digest); a BPE read a corpus through a Python list of ids (some 30 bytes an id); the
read of a large file was silent where the data loads lazily (`minitf --data big.txt --set ... train`) and at `:load`;
`:data big.txt` again read the same unchanged file again beside the copy held; and a file past the size limit was
announced as read before it was refused. Each test failed before its fix, on small files (the property measured, not
the size)."""

from __future__ import annotations

import hashlib
import sys
import tracemalloc

import pytest
import torch

from minitf_repl.core import data as data_module
from minitf_repl.core.bpe import SubwordTokenizer, train_bpe
from minitf_repl.core.data import TextCorpus, load_data
from minitf_repl.core.errors import UserError

from test_cli import assert_one_error_line, invoke
from test_commands import TEXT, Recorder, run, tiny_session


@pytest.fixture
def big(tmp_path, monkeypatch):
    """A text file that counts as large (past SLOW_FILE_BYTES, lowered to 1,000 bytes for the test)."""
    monkeypatch.setattr(data_module, "SLOW_FILE_BYTES", 1000)
    path = tmp_path / "big.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def _reading(recorder) -> list[str]:
    return [n for n in recorder.notices if n.startswith("reading big.txt")]


# --- 1. out of memory while a file is read ---------------------------------------------------------------------------
def test_out_of_memory_while_a_file_is_read_says_the_file_does_not_fit(big, monkeypatch):
    """Not "lower batch_size, max_seq_len or the model size": no reading depends on them; a part of the file does."""
    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(data_module, "_read_text", no_memory)
    s = tiny_session("sort:4")
    with pytest.raises(UserError) as e:
        run(s, f":data {big}")
    said = str(e.value)
    assert "big.txt (0 MiB) does not fit in the memory left" in said
    assert "head -c 1M" in said and "big-part.txt" in said and "batch_size" not in said
    assert s.data_spec == "sort:4"  # nothing changed


def test_out_of_memory_in_torch_while_a_file_is_read_is_one_line_from_the_shell(big, monkeypatch):
    """torch's allocator's error, while the ids are made, under `--data FILE --set ...` (read where --data's error is
    said): one line with the file's fix, where it was "not enough memory (...); close other programs"."""
    def no_memory(self, *args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1000 bytes.")

    monkeypatch.setattr(data_module.CharTokenizer, "encode_tensor", no_memory)
    monkeypatch.setattr(data_module, "SLOW_FILE_BYTES", 10**6)  # the error alone: no "reading big.txt" before it
    line = assert_one_error_line(invoke("--data", str(big), "--set", "autosave=off", "data"))
    assert line.startswith("error: --data: ") and "big.txt (0 MiB) does not fit in the memory left" in line
    assert "head -c 1M" in line and "batch_size" not in line


# --- 2. what a corpus holds, and what its read makes beside it -------------------------------------------------------
def test_a_text_past_the_basic_plane_is_read_without_whole_copies_beside_it(tmp_path):
    """One emoji makes CPython's string 4 bytes a character: the text is held so (the views ask of its characters),
    but the read made it twice more, as its training split's slice and as its UTF-8 for the digest. What the read
    allocates at its peak, less the string it keeps, is now about the file's bytes and a block's working arrays."""
    path = tmp_path / "emoji.txt"
    line = "the quick brown fox jumps over the lazy dog\n"
    path.write_text(line * 70_000 + "\U0001F600\n", encoding="utf-8")  # 3 MB, a 12 MB string
    tracemalloc.start()
    try:
        corpus = load_data(str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    held = sys.getsizeof(corpus.text)
    size = path.stat().st_size
    assert held > 3.9 * size  # 4 bytes a character, as said in MAX_FILE_BYTES's comment
    # beside the string: the file's bytes while they are decoded, then its ids and a block's arrays (7 MB here);
    # before, the slice (0.9 of the string), the UTF-8 for the digest and blocks of int64 ids (51 MB)
    assert peak - held < 2 * size + 4 * 2**20
    # the digest a checkpoint keeps is the same number: the SHA-256 of the text's UTF-8, here the file's bytes
    assert corpus.digest == hashlib.sha256(path.read_bytes()).hexdigest()
    assert corpus.splits["train"].dtype == torch.uint8
    assert [corpus.splits[s].tolist() for s in ("train", "val")] == [
        [corpus.tokenizer.stoi[ch] for ch in corpus.split_text(s)] for s in ("train", "val")]


def test_a_corpus_reads_its_splits_and_counts_its_characters_without_slicing_its_text(monkeypatch):
    """The splits are read in place and the held-out characters counted a block at a time: no split_text copy."""
    text = "abc de\n" * 300 + "xyz\U0001F600\n" * 40  # x, y, z and the emoji only in the validation split

    def no_copy(self, split):
        raise AssertionError(f"a copy of the {split} split")

    monkeypatch.setattr(TextCorpus, "split_text", no_copy)
    corpus = TextCorpus("t", text, "test")
    assert corpus.held_out_counts() == ("xyz\U0001F600", 160, len(text) - corpus.cut)
    assert corpus.held_out_only() == "xyz\U0001F600"
    assert corpus.digest == hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_a_bpe_reads_a_corpus_into_a_compact_tensor_not_a_list_of_ids(monkeypatch):
    """Each piece's ids go into an int16 array, the tensor on its memory: the list of every id, at some 30 bytes an
    id, is never made, and the ids are the list's."""
    text = "".join(f"line {i} of the quick brown fox, jumping {i % 7} times over the lazy dog\n" for i in range(900))
    tokenizer = train_bpe(text, 300)
    expected = {s: tokenizer.encode(text[a:b]) for s, (a, b) in (("train", (0, int(0.9 * len(text)))),
                                                                 ("val", (int(0.9 * len(text)), len(text))))}

    def no_list(self, text):
        raise AssertionError("a Python list of every id")

    monkeypatch.setattr(SubwordTokenizer, "encode", no_list)
    corpus = TextCorpus("t", text, "test", tokenizer)
    assert corpus.splits["train"].dtype == torch.int16
    assert {s: corpus.splits[s].tolist() for s in ("train", "val")} == expected


# --- 4. the read of a large file is said on every path ---------------------------------------------------------------
def test_a_large_file_loaded_lazily_is_announced(big):
    """`minitf --data big.txt train`: the session loads its data at the command's first use of it, which was silent."""
    recorder = Recorder()
    run(tiny_session(str(big)), ":data", recorder)
    assert len(_reading(recorder)) == 1 and "Ctrl-C stops it" in _reading(recorder)[0]


def test_a_large_file_read_for_a_setting_is_announced_from_the_shell(big):
    """`--data FILE --set ...` reads the data before the settings (where --data's error is said): silent before."""
    result = invoke("--data", str(big), "--set", "autosave=off", "data")
    assert result.exit_code == 0, result.output
    assert "reading big.txt" in result.stderr


def test_load_of_a_checkpoint_whose_large_file_is_read_announces_it(big, checkpoint_dir):
    run(tiny_session(str(big)), ":train steps=1 save=fox")
    recorder = Recorder()
    run(tiny_session("sort:4"), ":load fox", recorder)
    assert len(_reading(recorder)) == 1


# --- 5. `:data FILE` again ------------------------------------------------------------------------------------------
def test_the_same_unchanged_file_given_again_is_not_read_again(big, monkeypatch):
    s = tiny_session(str(big))
    run(s, ":data")
    held = s.data
    reads = []
    real = data_module.load_data
    monkeypatch.setattr(data_module, "load_data", lambda *a, **k: reads.append(a) or real(*a, **k))
    recorder = Recorder()
    run(s, f":data {big}", recorder)
    assert reads == [] and s.data is held and not _reading(recorder)  # no read, no "reading ..." said
    # a changed file is read again, and so is the same file for another tokenizer
    big.write_text(TEXT + "more text\n", encoding="utf-8")
    run(s, f":data {big}")
    assert len(reads) == 1 and s.data is not held and s.data.info().chars == len(TEXT) + 10


# --- 6. a file past the limit -----------------------------------------------------------------------------------------
def test_a_file_past_the_limit_is_refused_without_being_announced_as_read(big, monkeypatch):
    monkeypatch.setattr(data_module, "MAX_FILE_BYTES", big.stat().st_size - 1)
    recorder = Recorder()
    with pytest.raises(UserError, match="minitf reads files up to 0 MiB"):
        run(tiny_session("sort:4"), f":data {big}", recorder)
    assert not _reading(recorder)
