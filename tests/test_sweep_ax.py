"""How long each command makes a learner wait (sweep ax): each test failed before its fix, and pins the cause (a
count of forward passes, calls or reads), not the wall time.

`:context` on the default model took 7 to 9 s and `:report` 3 to 6 s: the loss at each position (core.context) scored
its 1,024 windows through the readable forward, which spells out every head's T x T scores, in one pass of 65,536
positions that no CPU cache holds. It now scores through the fast path, as evaluation does (the same function; the
readable forward where an ablation's hooks listen or `fast_path=off`), in passes of 4,096 positions on a CPU.

`:context windows=16` on a text file of 20 MiB took 5 to 7 s every time, and `:ngram` and `:score TEXT counter=5`
as long: each counted the training text's n-grams afresh (8 million tokens, to order 5 or 6), a text that does not
change. The last corpus's counter is kept (core.ngram.train_counter) and served to every command that asks for an
order it holds, until the data or tokenizer is switched: the second `:context` took 0.3 s.

After a long run (20,000 rows of loss history, the most a checkpoint keeps), `:save` took 1.6 to 2.1 s, each
`:train`'s autosave 1.5 s and `:load` 0.9 s: a checkpoint's manifest is checked by encoding it again with
indentation (pure Python) and reading every row, and a save checked the same manifests again and again (the
autosave and the last checkpoint it may share files with, each autosave a rotation moves twice, itself after
writing), a load its own again. Bytes checked once (or written here) are known by their SHA-256 and not checked
again (core.checkpoint.manifest): `:save` 1.0 s (the one encoding it writes), the autosave 0.8 s, `:load` 0.2 s.

A session's first `:grad` took 1.0 s on the default model, and every `minitf grad` as long: the gradient through each
sublayer's branch was asked of torch with grad_outputs, whose first use imports sympy (0.7 s) to compare shapes. It
is now the gradient of sum(branch output * g), the same numbers, with no import: 0.35 s.
"""

import collections
import gc

import pytest
import torch

from minitf_repl.core import context, ngram
from minitf_repl.core.checkpoint import manifest, store
from minitf_repl.core.fastpath import FastPath
from minitf_repl.core.model import MiniTransformerLM

from test_commands import TEXT, run, tiny_session


@pytest.fixture
def text_session(tmp_path):
    """A tiny model on a text: its windows are max_seq_len long (a task's are its question and answer)."""
    path = tmp_path / "fox.txt"
    path.write_text(TEXT, encoding="utf-8")
    return tiny_session(str(path))


@pytest.fixture
def forwards(monkeypatch):
    """Counts the forward passes of each path, and the positions each scored: {"readable": [...], "fast": [...]}."""
    seen = collections.defaultdict(list)
    for cls, key in ((MiniTransformerLM, "readable"), (FastPath, "fast")):
        def counted(self, idx, *args, original=cls.forward, key=key, **kwargs):
            seen[key].append(idx.numel())
            return original(self, idx, *args, **kwargs)
        monkeypatch.setattr(cls, "forward", counted)
    return seen


def test_context_scores_through_the_fast_path_in_passes_a_cpu_cache_holds(forwards, text_session, monkeypatch):
    s = text_session
    s.model  # built before counting
    T = s.model_config.max_seq_len
    # three passes of fewer windows than the text's validation split holds, which :context would score each once
    monkeypatch.setattr(context, "CPU_POSITIONS_PER_PASS", 16 * T)
    windows = 3 * context.CPU_POSITIONS_PER_PASS // T
    before = run(s, f":context windows={windows} counter=0").curve
    assert forwards["readable"] == []
    assert forwards["fast"] == [context.CPU_POSITIONS_PER_PASS] * 3
    forwards.clear()
    run(s, ":set fast_path=off")  # the setting's readable forward is still what it asks for
    after = run(s, f":context windows={windows} counter=0").curve
    assert forwards["fast"] == [] and len(forwards["readable"]) == 3
    assert after.losses == pytest.approx(before.losses, abs=1e-5)


def test_context_with_a_head_switched_off_scores_through_the_readable_forward(forwards, text_session):
    s = text_session
    run(s, ":ablate head=0.0")  # its hooks sit on modules the fast path does not call
    forwards.clear()
    run(s, ":context windows=16 counter=0")
    assert forwards["fast"] == [] and forwards["readable"] == [16 * s.model_config.max_seq_len]


def test_a_corpus_is_counted_once_for_every_command_that_sets_a_counter_beside_the_model(text_session, monkeypatch):
    s = text_session
    counted = []
    original = ngram.NgramModel.__init__

    def counting(self, tokens, vocab_size, n):
        counted.append(n)
        original(self, tokens, vocab_size, n)

    monkeypatch.setattr(ngram.NgramModel, "__init__", counting)
    first = run(s, ":context windows=16 counter=4").curve.counter
    assert counted == [4]
    assert run(s, ":context windows=16 counter=4").curve.counter == first
    run(s, ":context windows=16 counter=3")  # an order the kept counter holds
    run(s, ":score the quick brown fox counter=4")
    assert counted == [4]
    rows = run(s, ":ngram n=5 sample=off").rows  # a longer one is counted, and kept in its place
    assert counted == [4, 5]
    assert run(s, ":context windows=16 counter=4").curve.counter == pytest.approx(first, rel=1e-12)
    assert [row.val_loss for row in run(s, ":ngram n=3 sample=off").rows] == [row.val_loss for row in rows[:4]]
    assert counted == [4, 5]
    run(s, ":data sort:4")  # other data: its own counters
    run(s, ":ngram n=2 sample=off")
    assert counted == [4, 5, 2]
    gc.collect()  # the text's data is gone with the switch: so is its counter
    assert ngram._kept == (None, None)


def test_a_save_encodes_its_manifest_once_and_a_load_of_it_not_again(tmp_path, monkeypatch):
    s = tiny_session()
    s.checkpoint_dir = tmp_path
    run(s, ":train steps=3")  # the autosave: rotated and shared from below
    encoded, checked = [], []
    encode, check = manifest.encode_manifest, manifest._check_manifest_fields
    for module in (manifest, store):  # the writer's, and the reader's comparison
        monkeypatch.setattr(module, "encode_manifest", lambda m: encoded.append(1) or encode(m))
    monkeypatch.setattr(manifest, "_check_manifest_fields",
                        lambda m, where: checked.append((where, m["meta_sha256"])) or check(m, where))
    lines = (":save a", ":save a", ":train steps=2", ":train steps=2", ":load a", ":ls")
    seen = []
    for line in lines:
        encoded.clear()
        checked.clear()
        run(s, line)
        writes = 0 if line in (":load a", ":ls") else 1
        assert len(encoded) == writes, line  # the one it writes; never one to compare with
        # at most one manifest's bytes checked, and never bytes checked before. A save no longer reads itself back
        # to report its size (test_sweep_ay): its bytes are checked by their first reader (the next save that shares
        # from them, a rotation, :load, :ls)
        assert len(checked) <= 1, line
        seen += checked
    # each manifest written (the setup's autosave, then one a line) checked once at most: none twice
    assert len(seen) == len(set(seen)) <= 1 + sum(line.startswith((":save", ":train")) for line in lines)
    (tmp_path / "a" / "checkpoint.json").write_bytes((tmp_path / "a" / "checkpoint.json").read_bytes() + b" ")
    with pytest.raises(Exception, match="does not match its checksum"):
        run(s, ":load a")  # other bytes: checked afresh


def test_grad_asks_torch_for_no_gradient_with_grad_outputs(monkeypatch):
    s = tiny_session()
    s.model
    given = []
    original = torch.autograd.grad

    def recording(outputs, inputs, grad_outputs=None, **kwargs):
        given.append(grad_outputs is not None)
        return original(outputs, inputs, grad_outputs=grad_outputs, **kwargs)

    monkeypatch.setattr(torch.autograd, "grad", recording)
    result = run(s, ":grad")
    assert given and not any(given)  # the first such call in a process imports sympy
    assert any(row.through > 0 for row in result.stream)  # the branches' gradients are there
