"""Data: tokenizer, corpora (pydoc, shakespeare over a local server, files) and synthetic tasks."""

import hashlib
import http.server
import socket
import threading
import zlib
from pathlib import Path

import pytest
import torch

from minitf_repl.core import data as D
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.errors import DataError
from minitf_repl.core.model import MiniTransformerLM

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare.txt"


def test_tokenizer_round_trip_and_unknown_characters_named():
    tok = D.CharTokenizer.from_text("hello world")
    assert tok.vocab == " dehlorw"
    assert tok.decode(tok.encode("hello")) == "hello"
    with pytest.raises(DataError, match=r"'Z'.*'q'|2 character"):
        tok.encode("hq Z")


def test_pydoc_is_builtin_and_split_90_10():
    corpus = D.load_data("pydoc")
    info = corpus.info()
    assert info.kind == "corpus" and info.chars > 400_000 and 80 < info.vocab_size < 130
    assert info.train_tokens == int(0.9 * info.chars)
    assert info.train_tokens + info.val_tokens == info.chars


def test_corpus_batches_are_windows_shifted_by_one():
    corpus = D.load_data("pydoc")
    g = torch.Generator().manual_seed(0)
    x, y = corpus.get_batch("train", 3, 7, g)
    assert x.shape == y.shape == (3, 7) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])
    text = corpus.tokenizer.decode(torch.cat([x[0], y[0, -1:]]))
    assert text in corpus.text


def _write(tmp_path, name, content: bytes):
    p = tmp_path / name
    p.write_bytes(content)
    return str(p)


@pytest.mark.parametrize(
    "content, message",
    [(b"", "empty"), (b"   \n", "only whitespace"), (b"ab\x00cd" * 10, "UTF-8 text with 10 NUL bytes"),
     (bytes(range(256)) * 4, "binary"), (b"\xff\xfe\xfa text", "not UTF-8")],
)
def test_bad_local_files(tmp_path, content, message):
    with pytest.raises(DataError, match=message):
        D.load_data(_write(tmp_path, "f.txt", content))


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DataError, match="no such file"):
        D.load_data(str(tmp_path / "nope.txt"))
    with pytest.raises(DataError, match="directory"):
        D.load_data(str(tmp_path))


def test_text_too_short_for_one_window(tmp_path):
    corpus = D.load_data(_write(tmp_path, "short.txt", b"a tiny text of forty characters or so..."))
    with pytest.raises(DataError, match="too short"):
        corpus.get_batch("train", 2, 64, torch.Generator())
    corpus.get_batch("train", 2, 2, torch.Generator())  # a small window fits


def test_local_utf8_file(tmp_path):
    corpus = D.load_data(_write(tmp_path, "poem.txt", "naïve café — ünïcode\n".encode() * 20))
    assert "é" in corpus.tokenizer.vocab and corpus.info().name == "poem.txt"


# --- shakespeare, against a local server -----------------------------------------------------
class _Server:
    def __init__(self, payload: bytes, announced: int | None = None):
        """`announced`: the Content-Length said, where it is not the payload's (a transfer cut short)."""
        payload_ = payload

        class Handler(http.server.BaseHTTPRequestHandler):
            hits = 0

            def do_GET(self):
                Handler.hits += 1
                self.send_response(200)
                self.send_header("Content-Length", str(len(payload_) if announced is None else announced))
                self.end_headers()
                self.wfile.write(payload_)

            def log_message(self, *args):
                pass

        self.handler = Handler
        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/input.txt"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.skipif(not SHARED.is_file(), reason="needs ../shared/data/tinyshakespeare.txt")
def test_shakespeare_download_checked_and_cached(tmp_path, monkeypatch):
    payload = SHARED.read_bytes()
    assert hashlib.sha256(payload).hexdigest() == D.SHAKESPEARE_SHA256
    server = _Server(payload)
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MINITF_SHAKESPEARE_URL", server.url)
    try:
        corpus = D.load_data("shakespeare")
        assert corpus.info().chars == D.SHAKESPEARE_CHARS and corpus.tokenizer.vocab_size == 65
        assert server.handler.hits == 1
    finally:
        server.close()
    # Cached: the server is gone, loading still works and nothing is fetched.
    assert D.load_data("shakespeare").info().chars == D.SHAKESPEARE_CHARS
    assert not list(tmp_path.glob("*.tmp*"))


def test_shakespeare_wrong_bytes_rejected(tmp_path, monkeypatch):
    server = _Server(b"not shakespeare at all\n" * 100)
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MINITF_SHAKESPEARE_URL", server.url)
    try:
        with pytest.raises(DataError, match="SHA-256 mismatch"):
            D.load_data("shakespeare")
    finally:
        server.close()
    assert not (tmp_path / "tinyshakespeare.txt").exists()


def test_shakespeare_offline_is_a_clear_error(tmp_path, monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/input.txt"
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MINITF_SHAKESPEARE_URL", url)
    with pytest.raises(DataError) as e:
        D.load_data("shakespeare")
    assert url in str(e.value) and "give its path as the data" in str(e.value)


# --- tasks ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec, question, answer",
    [("sort:4", "3141=", "1134"), ("reverse:4", "3141=", "1413"), ("add:2", "12+34=", "046"), ("add:2", "99+99=", "198")],
)
def test_task_answers(spec, question, answer):
    assert D.load_data(spec).answer(question) == answer


@pytest.mark.parametrize("spec", ["sort", "reverse", "add"])
def test_task_batches_mask_the_question(spec):
    task = D.load_data(spec)
    x, y = task.get_batch("train", 5, 64, torch.Generator().manual_seed(1))
    assert x.shape == y.shape == (5, task.seq_len)
    assert (y[:, : task.question_len - 1] == -1).all()
    assert (y[:, task.question_len - 1 :] >= 0).all()
    for row_x, row_y in zip(x, y):
        seq = task.tokenizer.decode(row_x) + task.tokenizer.decode(row_y[-1:])
        q, a = seq[: task.question_len], seq[task.question_len :]
        assert task.answer(q) == a


def test_task_validation_questions_are_held_out():
    task = D.load_data("sort")
    g = torch.Generator().manual_seed(0)
    train = set(task.sample_questions("train", 2000, g))
    val = set(task.sample_questions("val", 500, g))
    assert train and val and not (train & val)
    assert all(D.Task.is_val(q) for q in val)


def _batch_one_question_at_a_time(task, split, n, generator):
    """A task's batch as the strings define it (the tensor path's reference): draw n rows of digits at a time,
    keep each question of the split (its CRC32, zlib's), answer it, encode the text."""
    kept = []
    while len(kept) < n:
        digits = torch.randint(10, (n, task.n_digits), generator=generator).tolist()
        kept += [q for q in map(task.question, digits) if (zlib.crc32(q.encode()) % 10 == 0) == (split == "val")]
    seqs = torch.tensor([task.tokenizer.encode(q + task.answer(q)) for q in kept[:n]])
    y = seqs[:, 1:].clone()
    y[:, : task.question_len - 1] = -1
    return seqs[:, :-1], y


@pytest.mark.parametrize("name", ["sort", "reverse", "add"])
def test_a_tasks_batch_is_the_one_its_questions_as_strings_make(name):
    # batches are made a tensor at a time (:ngram on a task took 2.4 s making them one string at a time): the same
    # rows, the same held-out split and the generator left in the same state as the strings' way
    for size in (1, 2, 5, 17, 30):
        task = D.Task(name, size)
        for split, n in (("train", 1), ("train", 300), ("val", 1), ("val", 64)):
            ours, theirs = torch.Generator().manual_seed(size * n), torch.Generator().manual_seed(size * n)
            x, y = task.get_batch(split, n, 200, ours)
            ref_x, ref_y = _batch_one_question_at_a_time(task, split, n, theirs)
            assert torch.equal(x, ref_x) and torch.equal(y, ref_y), (name, size, split, n)
            assert torch.equal(ours.get_state(), theirs.get_state())
            assert task.sample_questions(split, n, torch.Generator().manual_seed(size * n)) == [
                task.tokenizer.decode(row[: task.question_len]) for row in x]
    if name == "add":
        carried = D.Task("add", 3).answer_digits(torch.tensor([[9, 9, 9, 0, 0, 1], [1, 2, 3, 8, 7, 7]]))
        assert carried.tolist() == [[1, 0, 0, 0], [1, 0, 0, 0]]  # 999+001, 123+877: every place carries


def test_task_needs_room_in_the_context():
    with pytest.raises(DataError, match="max_seq_len >= 12"):
        D.load_data("sort").check_fits(8)


def test_random_tokens_are_uniform_and_fresh():
    data = D.load_data("random")
    assert data.tokenizer.vocab_size == 50
    g = torch.Generator().manual_seed(0)
    x1, y1 = data.get_batch("train", 64, 64, g)
    x2, _ = data.get_batch("train", 64, 64, g)
    assert not torch.equal(x1, x2)
    counts = torch.bincount(x1.flatten(), minlength=50).float()
    assert counts.min() > 0 and abs(counts.mean() - x1.numel() / 50) < 1e-6
    assert data.accuracy(None) is None


def test_repeat_is_blocks_each_followed_by_itself_and_counts_the_repeats():
    data = D.load_data("repeat:20")
    assert data.tokenizer.vocab == "abcdefghijklmnopqrst" and data.info().kind == "task"
    seqs, known = data.rows(50, 65, torch.Generator().manual_seed(0))
    blocks = set()
    for row, mask in zip(seqs.tolist(), known.tolist()):
        start = 0
        while any(mask[start:]):  # walk the row: a block of h, then (what fits of) the same h again
            h = mask[start:].index(True) - 1  # the first token that can be predicted is the repeat's second
            end = min(65, start + 2 * h)
            assert row[start + h : end] == row[start : end - h]
            assert not any(mask[start : start + h + 1]) and all(mask[start + h + 1 : end])
            blocks.add(h)
            start = end
    assert min(blocks) == 4 and max(blocks) >= 28  # from REPEAT_SHORTEST to half the window
    x, y = data.get_batch("train", 8, 64, torch.Generator().manual_seed(1))
    again, counted = data.rows(8, 65, torch.Generator().manual_seed(1))
    assert torch.equal(x, again[:, :-1])
    assert torch.equal(y == -1, ~counted[:, 1:]) and torch.equal(y[counted[:, 1:]], again[:, 1:][counted[:, 1:]])
    with pytest.raises(DataError, match="repeat needs max_seq_len >= 7"):
        data.check_fits(6)
    data.check_fits(7)
    (sample,) = data.sample_questions("val", 1, torch.Generator().manual_seed(0))
    assert len(sample) == 13 and sample[8:] == sample[:5]
    # the views count what training would: the predictions of the repeat's tokens after its first
    assert data.counted([0] * 13) == [False] * 8 + [True] * 4 and data.counted([0] * 12) is None


def test_repeat_accuracy_is_the_share_of_repeats_predicted():
    data = D.load_data("repeat:12")
    model = MiniTransformerLM(ModelConfig(vocab_size=12, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=32))

    class Copier(torch.nn.Module):  # predicts every repeat right and everything else wrong: accuracy 1
        config = model.config

        def forward(self, idx):
            seqs, known = data.rows(20, 33, torch.Generator().manual_seed(5))
            assert torch.equal(idx, seqs[:, :-1])
            logits = torch.zeros(*idx.shape, 12)
            logits.scatter_(2, seqs[:, 1:].unsqueeze(-1), 1.0)
            logits[~known[:, 1:]] = 0.0
            logits[..., 0][~known[:, 1:]] = 1.0  # a wrong guess wherever there is nothing to copy
            return logits, None

    assert data.accuracy(Copier(), n=20, seed=5) == 1.0
    assert 0.0 <= data.accuracy(model, n=20) < 0.5  # untrained: about 1 in 12


@pytest.mark.parametrize("spec, message", [("", "no data"), ("sort:x", "whole number"), ("sort:0", "size"), ("random:1", "vocabulary size"), ("repeat:63", "from 2 to 62")])
def test_bad_specs(spec, message):
    with pytest.raises(DataError, match=message):
        D.load_data(spec)


def test_device_files_are_refused_not_read_forever():
    with pytest.raises(DataError, match="not a regular file"):
        D.load_data("/dev/zero")
