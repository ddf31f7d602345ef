"""What the sweep of the items earlier sessions left (letter at) found: each test failed before its fix.

`:data random:1e400` (and `minitf --data random:1e400 ...`) said "the size after ':' must be a whole number", as if
1e400 were no number: a size past a float is refused as far too large, with the range the task takes and an example,
as `:data random:1e40` says its range. `:set tokenizer=bpe:1e400` said "N must be a whole number of tokens" (and
bpe: with 5,000 digits wrote them all): it is too large, at most bpe:65536, as bpe:1e40 is.
`:mistakes` on a text under a byte-level BPE (`:set tokenizer=bpe:300`) quoted the text before a hard token as
"� über ☃☃ straße" where the quote began inside a character: the bytes of a character cut at either end of the quote
are named as `:tok` names them ("\\x94 über ☃☃ straße"; core.bpe.shown_text).
`:params memory` on a mixture of experts said 1-1.7% less activation memory than the forward keeps: the count left
out the int64 indices routing keeps per choice (topk's choice, the token's row and slot, two floats each) and the
gate gathered per choice, and counted the router's logits, which topk does not keep; with dropout it counted the
FFN's noise twice (the block's and the experts'). It now matches what a dense model's count matches, to a float.
`:train watch=attn` in a terminal narrowed after the last evaluation: Live's stop drew the view laid out for the old
width (a map of 32 positions, its heads now stacked) whole, taller than the screen, and its top scrolled out of reach
of the erase, left above the result. The view is laid out for the size at the end before the display stops.
Trainer.history held a dict per step, about 660 bytes: a `minitf train --steps 200000` run kept some 130 MB of
history, and every :train's snapshot a copy as large. It is now a History, one array per field (about 117 bytes a
step), read as the same dicts by :report, :plot, the JSON and the checkpoints, which still save a list of dicts;
the toolbar reads its last rows, not every row, at each redraw.
"""

import copy
import gc
import io
import re
import types

import pytest
import torch

from minitf_repl.core.bpe import shown_text, train_bpe
from minitf_repl.core.config import ModelConfig, TrainConfig, parse_tokenizer
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import ConfigError, DataError
from minitf_repl.core.ledger import cost_ledger
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.watch import WatchFrame
from minitf_repl.render.live import RichReporter
from minitf_repl.session import Session

from test_cli import assert_one_error_line, invoke
from test_commands import TINY, run

SNOW = "the snow ☃ falls, café é naïve — über ☃☃ straße 東京 déjà vu\n" * 40


# --- a task's size past a float: too large, with the range ---------------------------------------------------------
def test_a_task_size_past_a_float_is_far_too_large_with_the_range():
    with pytest.raises(DataError, match=r"^random:1e400 is far too large; random takes a vocabulary size from 2 to "
                                        r"62, e\.g\. random:50$"):
        load_data("random:1e400")
    with pytest.raises(DataError, match=r"^sort:-1e400 is far too small; sort takes a size from 1 to 30"):
        load_data("sort:-1e400")
    with pytest.raises(DataError, match=r"^add:9{18}\.\.\.9{19} is far too large; add takes a size from 1 to 30"):
        load_data("add:" + "9" * 5000)  # more digits than Python's int reads
    with pytest.raises(DataError, match="must be a whole number"):
        load_data("random:abc")  # no number at all still says so
    line = assert_one_error_line(invoke("--data", "random:1e400", "data"))
    assert line == "error: random:1e400 is far too large; random takes a vocabulary size from 2 to 62, e.g. random:50"


def test_a_bpe_size_past_a_float_is_too_large_with_the_limit():
    with pytest.raises(ConfigError, match=r"^tokenizer=bpe:1e400 is too large: at most bpe:65536; use a smaller N$"):
        parse_tokenizer("bpe:1e400")
    with pytest.raises(ConfigError, match=r"^tokenizer=bpe:9{33}\.\.\. is too large: at most bpe:65536"):
        parse_tokenizer("bpe:" + "9" * 5000)
    with pytest.raises(ConfigError, match="bpe:-1e400: a byte-level BPE has at least 257 tokens"):
        parse_tokenizer("bpe:-1e400")
    with pytest.raises(ConfigError, match="N must be a whole number of tokens"):
        parse_tokenizer("bpe:abc")


# --- :mistakes under a byte-level BPE: the quote's cut characters as :tok names their bytes ---------------------------
def test_mistakes_quotes_a_character_cut_at_either_end_as_its_bytes(tmp_path):
    path = tmp_path / "snow.txt"
    path.write_text(SNOW, encoding="utf-8")
    session = Session(ModelConfig(**TINY), TrainConfig(steps=6, batch_size=4, eval_every=3, eval_batches=2),
                      data_spec=str(path), device_name="cpu")
    run(session, ":set tokenizer=bpe:300")
    hardest = run(session, ":mistakes").text.hardest
    assert hardest and all("\ufffd" not in h.before + h.actual + h.guess for h in hardest), hardest

    tokenizer = train_bpe(SNOW, 300)
    ids = tokenizer.encode("— über ☃")  # the dash's three bytes, cut after the first token
    cut = next(k for k in range(1, len(ids)) if tokenizer.decode(ids[k:]).startswith("\ufffd"))
    head = shown_text(tokenizer, ids[:cut], ids[cut:])
    assert head.startswith("\\x") and head.endswith(" über ☃") and "\ufffd" not in head
    end = next(k for k in range(1, len(ids)) if tokenizer.decode(ids[:k]).endswith("\ufffd"))
    tail = shown_text(tokenizer, [], ids[:end])  # the dash's first bytes, its last not yet come
    assert tail.startswith("\\xe2") and "\ufffd" not in tail
    assert shown_text(tokenizer, [], ids) == "— über ☃"  # a whole text reads as decoded


# --- :params memory on a mixture of experts: what routing keeps is counted ------------------------------------------
def unkept_floats(changes: dict) -> float:
    """Floats per token and layer the forward keeps beyond the ledger's count (the logits and loss, outside it)."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=11, max_seq_len=48, d_model=32, n_heads=4, n_layers=2, d_ff=48, **changes)
    model = MiniTransformerLM(config).train()
    x = torch.randint(0, 11, (3, 40), generator=torch.Generator().manual_seed(1))
    counted = cost_ledger(model, 3, 40).activation_bytes
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(x, x)  # noqa: F841 (kept alive: what stays allocated is what backward needs)
    kept = sum(e.nbytes() for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    return (kept - counted) / (4 * 3 * 40 * 2)


@pytest.mark.parametrize("dropout", [0.0, pytest.param(0.1, marks=pytest.mark.slow)])
def test_params_memory_of_a_mixture_counts_what_routing_keeps(dropout):
    dense = unkept_floats(dict(dropout=dropout))
    for n_experts, k in [(4, 2), (8, 4)]:
        moe = unkept_floats(dict(dropout=dropout, n_experts=n_experts, experts_per_token=k))
        assert abs(moe - dense) < 0.5, (n_experts, k, moe, dense)  # it was 8.1 floats more at 4 experts, 2 chosen


# --- the live training display's last drawing, on a terminal narrowed since the last evaluation ----------------------
def test_the_live_display_ends_laid_out_for_a_terminal_narrowed_during_the_run():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=140, height=60, color_system=None)
    reporter = RichReporter(console, live=True)
    reporter.on_train_start(1000, 0, False)
    T = 32
    maps = [[[1.0 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)] for _ in range(2)]
    frame = WatchFrame(step=0, val_loss=None, view="attn", prompt="x" * T,
                       tokens=list("abcdefghijklmnopqrstuvwxyz012345"), layer=0, maps=maps)
    for step in (100, 200, 300):
        reporter.on_step(types.SimpleNamespace(step=step, run_step=step, run_steps=1000, train_loss=1.0, val_loss=1.0,
                                               val_bpc=None, accuracy=None, lr=1e-3, tokens_per_second=1000.0,
                                               elapsed=step / 100, aux_loss=None))
        reporter.on_watch(frame)  # at 140 columns both heads' 32 positions fit side by side
    console.width = 50  # narrowed after the last evaluation
    before = len(out.getvalue())
    reporter.close()
    last = out.getvalue()[before:]
    # Each drawing since the narrowing, one per run of "erase line, cursor up" codes: Live's refresh thread may draw
    # one of its own before close() draws the last (a loaded machine: two drawings, 71 lines in all).
    drawings = [d for d in re.split(r"(?:\x1b\[2K\x1b\[1A)+\x1b\[2K", last) if d.strip()]
    assert drawings and all(d.count("\n") <= console.height for d in drawings), last  # it was 78 lines: the heads
    assert "showing the last" in drawings[-1]  # stacked, the top scrolled away; the map cut to what 50 columns hold


# --- Trainer.history: compact, read as the dicts it always was ---------------------------------------------------
def test_the_training_history_is_kept_compactly_and_read_as_dicts(checkpoint_dir, monkeypatch):
    import tracemalloc

    session = tiny_session_for_history()
    run(session, ":train")
    history = session.trainer.history
    assert len(history) == 60 and history[-1]["step"] == 60 and history[-1]["val_loss"] is not None
    assert history[0]["val_loss"] is None and history[-1]["compile_seconds"] is None
    assert history[-2:] == [dict(row) for row in list(history)[-2:]] and history == list(history)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = copy.deepcopy(history)  # what the rows hold: a dict per step held some 660 bytes
        per_step = (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_step < 200, per_step
    made = []  # the toolbar, asked at every redraw, reads the last rows, not all of them (each is made as it is read)
    real_row = type(history)._row
    monkeypatch.setattr(type(history), "_row", lambda self, i: made.append(i) or real_row(self, i))
    status = session.status()
    assert status.step == 60 and status.val_step == 60 and status.last_loss == history[-1]["train_loss"]
    assert len(made) <= 6, made  # of 60
    odd = {**history[-1], "from_a_newer_minitf": 1.5}  # a row not of StepInfo's fields reads back as it was given
    history.append(odd)
    assert history[-1] == odd
    history[-1] = history[-2]
    assert history[-1] == history[-2]
    del history[-1]
    history[-1]["grad_norm"] = 5e4  # a row read by its index, changed in place, changes the history, as a list's did
    assert history[-1]["grad_norm"] == 5e4 and list(history)[-1]["grad_norm"] == 5e4
    run(session, ":save h")
    loaded = tiny_session_for_history()
    run(loaded, ":load h")
    assert loaded.trainer.history == history and type(loaded.trainer.history) is type(history)


def tiny_session_for_history() -> Session:
    return Session(ModelConfig(**TINY), TrainConfig(steps=60, batch_size=4, eval_every=30, eval_batches=2),
                   data_spec="sort:4", device_name="cpu")
