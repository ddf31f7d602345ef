"""What a user's-eye sweep of the views on a bigger model (12 layers x 768 wide at block_size=512, a BPE vocabulary,
many experts) found: each test failed before its fix.

On a model near GPT-2 small's size, `:mistakes` (64 windows of 512), `:muon` (a whole training batch's gradient) and
`:experts` (a validation batch through 12 blocks of 32 experts) took from half a minute to over a minute, showed
nothing while they worked, and Ctrl-C went unheard: they polled no stop flag and were not interruptible. `:checks`
spent 44 s on its causal check with nothing shown and Ctrl-C unheard; `:ngram` and `:ablate` evaluated for minutes
silently (`:ablate` deaf to Ctrl-C); `:report` and `:train`'s last evaluation stood still on the screen for minutes.
`:muon` took a 7 GiB graph without asking whether it fit. Skipped checks said "it is made up to 30,000,000".
`:kv` gave the cache's filled part as its memory (its buffers hold the whole window) and blamed "a small model".
`:attn` of a long text on 12 heads drew 1,180 lines, `:score` one row a position (520 at block_size=512),
`:experts` a row per expert; `:patch` split 12 heads into 11 and 1 at 100 columns. `:shapes` counted only the
block shown's idle experts as the parameters that did not run; `:muon matrix=fc_in` over 32 experts was an
800-character error. Small shares and probabilities of a large vocabulary showed as "0%" and "0.000". `:set
n_embd=768` left d_ff at 512 unsaid, and `:qkv at=` quoted a tail of the text without the query in it.
"""

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import Recorder, TEXT, run, tiny_session


class Progress(Recorder):
    def __init__(self):
        super().__init__()
        self.progress = []

    def on_progress(self, what, done, total):
        self.progress.append((what, done, total))


def on_text(tmp_path, window: int, d_model: int = 32, n_heads: int = 2, **train) -> Session:
    """A one-layer model on a small text file (TEXT), untrained."""
    path = tmp_path / "fox.txt"
    path.write_text(TEXT, encoding="utf-8")
    config = ModelConfig(n_layers=1, d_model=d_model, n_heads=n_heads, d_ff=64, max_seq_len=window)
    return Session(config, TrainConfig(steps=2, **{"batch_size": 2, **train}), data_spec=str(path), device_name="cpu")


@pytest.fixture
def text_session(tmp_path):
    return on_text(tmp_path, 32, batch_size=4, eval_every=2, eval_batches=1)


# --- long views: Ctrl-C and a word while they work ------------------------------------------------------------
@pytest.mark.parametrize("name", ["mistakes", "muon", "experts"])
def test_a_long_view_on_a_big_model_stops_at_ctrl_c(name):
    assert REGISTRY[name].interruptible  # they poll no stop flag: Ctrl-C must raise inside them


def test_muon_cut_short_by_ctrl_c_leaves_the_model_as_it_was(monkeypatch):
    s = tiny_session()
    model = s.model
    model.train()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def cut(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.autograd, "grad", cut)
    with pytest.raises(KeyboardInterrupt):
        run(s, ":muon")
    assert model.training and all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_mistakes_on_a_text_says_how_far_it_is(text_session):
    hooks = Progress()
    run(text_session, ":mistakes n=40", hooks)
    assert hooks.progress and hooks.progress[-1] == ("mistakes", 40, 40)


def test_mistakes_on_a_task_says_how_far_it_is():
    hooks = Progress()
    run(tiny_session(), ":mistakes n=300", hooks)
    assert hooks.progress and hooks.progress[-1] == ("mistakes", 300, 300)


# --- :checks: the causal check's passes -----------------------------------------------------------------------
class StopAfterProgress(Progress):
    """Asks to stop once `after` progress calls came (Ctrl-C while the causal check works)."""

    def __init__(self, after: int):
        super().__init__()
        self.after = after

    def should_stop(self):
        return len(self.progress) >= self.after


def test_checks_says_how_far_the_causal_check_is_and_stops_there_at_ctrl_c():
    hooks = Progress()
    run(tiny_session(), ":checks causal", hooks)
    assert hooks.progress and hooks.progress[-1][0] == "causal check"  # 44 s on a 12 x 768 model, nothing shown
    assert hooks.progress[-1][1] == hooks.progress[-1][2]
    stopped = run(tiny_session(), ":checks rows causal overfit", StopAfterProgress(1))
    assert stopped.stopped == "causal" and stopped.causal is None  # it went on to its end, Ctrl-C unheard
    assert "overfit" not in stopped.passed + stopped.failed


def test_checks_asked_to_stop_before_a_check_runs_none_after_it():
    hooks = StopAfterProgress(0)  # a stop already asked: the next check does not start
    result = run(tiny_session(), ":checks rows causal", hooks)
    assert result.stopped == "rows" and not result.passed


def test_a_second_kind_of_progress_relabels_the_bar(monkeypatch):
    from minitf_repl.render.live import RichReporter
    from test_repl import consoles

    reporter = RichReporter(consoles()[0], live=True)
    try:
        reporter.on_progress("causal check", 128, 128)
        reporter.on_progress("checks", 1, 300)  # the training checks after it: the bar said "causal check" 1/300
        task = reporter._progress.tasks[0]
        assert (task.description, task.completed, task.total) == ("checks", 1, 300)
        assert "checks" in str(reporter._progress.columns[0].text_format)
    finally:
        reporter.close()


# --- :ngram and :ablate: the model's evaluation -----------------------------------------------------------------
def test_ngram_says_how_far_the_models_evaluation_is(text_session):
    hooks = Progress()
    run(text_session, ":ngram n=2 sample=off", hooks)  # a minute on a 12 x 768 model, nothing shown
    assert ("ngram", 1, 1) in hooks.progress


def test_ablate_says_how_far_its_two_evaluations_are_and_ctrl_c_keeps_the_parts_off_before_it(monkeypatch):
    s = tiny_session(eval_batches=2)
    hooks = Progress()
    run(s, ":ablate head=0.0", hooks)
    assert [p[1:] for p in hooks.progress] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert REGISTRY["ablate"].interruptible  # it polls no stop flag: two minutes of Ctrl-C unheard on a big model
    from minitf_repl.core import generate

    def cut(*args, **kwargs):
        raise KeyboardInterrupt
        yield

    monkeypatch.setattr(generate, "generate", cut)  # Ctrl-C after both evaluations, during the sample
    with pytest.raises(KeyboardInterrupt):
        run(s, ":ablate head=0.1")
    assert [str(a) for a in s.ablations] == ["head 0.0"]  # head=0.1 was left switched off


# --- what a big model skips, in words ---------------------------------------------------------------------------
def test_a_check_a_big_model_skips_says_the_limit_in_plain_words(monkeypatch):
    from minitf_repl.core import backprop, checks
    from test_render import plain

    monkeypatch.setattr(checks, "TRAINING_LIMIT", 10)
    monkeypatch.setattr(checks, "CHECK_LIMIT", 10)
    monkeypatch.setattr(backprop, "CHECK_LIMIT", 10)
    s = tiny_session()
    shown = plain(run(s, ":checks init gradient"), 100) + plain(run(s, ":grad"), 100)
    # was "they are built up to 10" and "it is made up to 10": up to 10 what?
    assert "built up to" not in shown and "made up to" not in shown
    assert shown.count("only for a model of up to 10") == 3


# --- :kv: the memory the cache takes ------------------------------------------------------------------------------
def test_kv_says_what_the_caches_buffers_take_as_measured_and_as_params_counts():
    from dataclasses import replace

    from minitf_repl.render import fmt
    from test_render import plain

    s = tiny_session()
    run(s, ":set n_kv_heads=1")
    cache = s.model.new_cache()
    with torch.no_grad():
        s.model(torch.zeros(1, 3, dtype=torch.long), cache=cache)
    measured = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)  # allocated for the whole window
    result = run(s, ":kv 12 n=2")
    assert result.cache_bytes_per_token * result.max_seq_len == measured
    shown = plain(replace(result, cached_seconds=1.0, naive_seconds=1.0), 200)  # no faster: the note says why
    # it said the cache holds 4 positions' worth, where its buffers took the whole window's 32
    assert f"its buffers take {fmt.size(measured)}" in shown and "whole window of 32 positions" in shown
    assert "small model" not in shown and "costs mostly what does not grow with them" in shown


# --- :attn: all heads of a long text ----------------------------------------------------------------------------
def test_attn_of_twelve_heads_on_a_long_text_stays_a_few_screens_and_names_the_heads_left_out(tmp_path):
    from test_render import plain

    s = on_text(tmp_path, 128, d_model=48, n_heads=12)
    text = TEXT[:112].replace("\n", " ")
    result = run(s, f":attn '{text}'")
    assert len(result.maps) == 12  # --json keeps every head's pattern
    shown = plain(result, 100)
    lines = shown.splitlines()
    assert len(lines) < 300, len(lines)  # 12 maps of 96 rows, one a row: 1,180 lines
    assert ("heads 2-11 are not drawn (as many maps of 96 positions as fit 200 lines): :attn TEXT layer=0 head=N "
            "draws head N (0 to 11)") in " ".join(" ".join(lines).split())
    short = plain(run(s, ":attn 'the quick brown'"), 100)  # a short text: every head, side by side
    assert "not shown" not in short and "head 11" in short


# --- :report: a bar over its parts ------------------------------------------------------------------------------
def test_report_says_how_far_it_is(tmp_path):
    hooks = Progress()
    run(tiny_session(), f":report {tmp_path / 'r.html'}", hooks)  # minutes on a 12 x 768 model, nothing shown
    done = [p[1] for p in hooks.progress]
    assert done and done == sorted(done) and all(p[0].startswith("report (") for p in hooks.progress)
    assert hooks.progress[-1][1] == hooks.progress[-1][2]


# --- :shapes of many experts: what did not run ----------------------------------------------------------------
def test_shapes_counts_the_idle_experts_of_every_block_not_only_the_one_shown():
    from test_render import plain

    s = tiny_session()
    run(s, ":set n_experts=32 experts_per_token=1 n_layers=3")
    expert = sum(p.numel() for p in s.model.blocks[0].ffn.experts[0].parameters())
    shown = " ".join(plain(run(s, ":shapes 1"), 200).split())  # one token, one expert of 32 a block: 31 idle
    idle = 3 * 31 * expert
    # was "{31 x expert} parameters did not run ({31 x expert} in blocks.0)": blocks 1 and 2 left out
    assert f"{idle:,} parameters did not run ({31 * expert:,} in blocks.0, {2 * 31 * expert:,} in the 2 other " \
           f"blocks)" in shown


# --- :muon on many experts: the error stays a line ----------------------------------------------------------------
def test_muon_naming_one_of_32_experts_matrices_is_a_short_error_with_an_example():
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    run(s, ":set n_experts=32 experts_per_token=2")
    with pytest.raises(UserError) as e:
        run(s, ":muon matrix=fc_in")
    said = str(e.value)
    assert len(said) < 400, len(said)  # all 32 names: 800 characters
    assert "32 matrices" in said and "ffn.experts.31.fc_in" in said and "matrix=ffn.experts.0.fc_in" in said
    with pytest.raises(UserError) as e:
        run(s, ":muon matrix=nothing")
    assert len(str(e.value)) < 400 and "attn.q_proj" in str(e.value)
    run(s, ":muon matrix=ffn.experts.31.fc_in")  # the whole name works


# --- :muon: a whole training batch's graph, checked against the memory free ----------------------------------------
def test_muon_refuses_a_batch_that_would_not_fit_in_the_memory_free_before_running_it(monkeypatch):
    from minitf_repl.core import memory, muon_step
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    monkeypatch.setattr(memory, "available_memory", lambda: 1000)  # 7 GiB asked on a 12 x 768 model, unchecked
    ran = []
    monkeypatch.setattr(muon_step, "muon_step", lambda *a, **k: ran.append(1))
    with pytest.raises(UserError) as e:
        run(s, ":muon")
    assert "GiB" in str(e.value) and ":set batch_size=1" in str(e.value) and not ran
    monkeypatch.setattr(memory, "available_memory", lambda: None)  # unknown: nothing is checked
    monkeypatch.undo()
    run(s, ":muon")


# --- :embed map=on of a wide, large-vocabulary W_E ----------------------------------------------------------------
def test_embed_map_of_a_wide_embedding_gives_its_directions_small_shares_not_zero():
    from dataclasses import replace

    from minitf_repl.render import fmt
    from test_render import plain

    result = run(tiny_session(), ":embed map=on")
    # 12 x 768 over 8,000 BPE tokens: each of a random W_E's two main directions holds about 0.2% of its variance
    small = replace(result, map=replace(result.map, explained=[0.0022, 0.0021]))
    shown = " ".join(plain(small, 100).split())
    assert "x: direction 1, 0.2% of the rows' variance; y: direction 2, 0.2%" in shown  # was "0%" and "0%"
    assert [fmt.share(v) for v in (0.5, 0.1, 0.0996, 0.012, 0.0022, 0.0004, 0.0)] == \
        ["50%", "10%", "10%", "1.2%", "0.2%", "<0.1%", "0%"]


# --- :step over a large vocabulary ----------------------------------------------------------------------------
def test_step_over_a_large_vocabulary_shows_a_small_probability_as_a_number_not_zero():
    from dataclasses import replace

    from test_render import plain

    result = run(tiny_session(), ":step")
    rows = [replace(r, prob=1.3e-4) for r in result.rows]  # 8,000 tokens near even: each about 1/8,000
    big = replace(result, rows=rows, picked_prob=1.3e-4, picked_rank=1120, vocab_size=8000, n_kept=8000,
                  n_possible=8000)
    shown = " ".join(plain(big, 100).split())
    assert "probability 1.3e-04, rank 1,120 of 8,000" in shown  # was "probability 0.000, rank 1120 of 8000"
    assert "0.000 █" not in shown and "1.3e-04 ▏" in shown and "8,000 of 8,000 tokens could be picked" in shown


# --- :set n_embd=768: the FFN's width stays where it was ------------------------------------------------------
def test_set_d_model_says_d_ff_stays_and_how_to_widen_it():
    s = tiny_session()  # d_model 32, d_ff 64
    hooks = Recorder()
    run(s, ":set n_embd=768 n_head=12", hooks)  # the way to GPT-2 small: 38M parameters, not 85M, and nothing said
    said = " ".join(hooks.notices)
    assert "d_ff stays 64, 0.083 x d_model" in said and ":set d_ff=3072" in said
    quiet = Recorder()
    run(s, ":set d_model=256 d_ff=1024 n_heads=4", quiet)  # given both: nothing to say
    assert not any("d_ff stays" in n for n in quiet.notices)


# --- :train: the evaluation after a step ------------------------------------------------------------------------
class Evaluating(Recorder):
    def __init__(self):
        super().__init__()
        self.evaluating = []

    def on_evaluate(self, done, total):
        self.evaluating.append((done, total, len(self.steps)))


def test_train_says_how_far_its_evaluation_is():
    hooks = Evaluating()
    run(tiny_session(eval_batches=3), ":train steps=2 eval_every=2", hooks)
    # a 12 x 768 model's evaluation took a minute with the bar standing at the step before, nothing said
    assert hooks.evaluating == [(1, 3, 1), (2, 3, 1), (3, 3, 1)]  # during step 2's evaluation, before its on_step


def test_the_training_bar_is_labelled_with_the_evaluation_while_it_runs():
    from types import SimpleNamespace

    from minitf_repl.render.live import RichReporter
    from test_repl import consoles

    reporter = RichReporter(consoles()[0], live=True)
    try:
        reporter.on_train_start(2, 0, False)
        reporter.on_evaluate(3, 20)
        assert reporter._progress.tasks[0].description == "val 3/20"
        info = SimpleNamespace(run_step=2, run_steps=2, train_loss=1.0, tokens_per_second=10.0, val_loss=None)
        reporter.on_step(info)
        assert reporter._progress.tasks[0].description == "train"
    finally:
        reporter.close()


# --- :score of a long text ---------------------------------------------------------------------------------------
def test_score_of_a_long_text_shows_its_first_and_last_positions_and_says_what_is_between(tmp_path):
    from test_render import plain

    s = on_text(tmp_path, 256)
    text = TEXT[:201].replace("\n", " ")
    result = run(s, f":score '{text}'")
    assert len(result.losses) == 200  # --json keeps every position
    lines = plain(result, 100).splitlines()
    assert len(lines) < 100, len(lines)  # a row a position: 215 lines, 520 at block_size=512
    shown = " ".join(" ".join(lines).split())
    assert "… 28 positions" in shown and "… 107 positions" in shown  # the worst row, t = 44, shown between
    assert ("positions 16 to 43 and 45 to 151 not shown (135 of 200: the first 16, the last 48 and the worst, t = 44, "
            "are; the loss above counts them all)") in shown
    short = plain(run(s, ":score 'the quick brown fox'"), 100)
    assert "not shown" not in short


def test_score_shows_a_tiny_p_as_a_number_not_zero():
    from dataclasses import replace

    from test_render import plain

    result = run(tiny_session(), ":score 12+34=46")
    tiny = replace(result, target_probs=[2.3e-6] * len(result.target_probs))  # -ln p 13 showed "p 0.000"
    shown = plain(tiny, 100)
    assert "2.3e-06" in shown and " 0.000 " not in shown


# --- :patch of 12 heads at 100 columns ----------------------------------------------------------------------------
def test_patch_keeps_twelve_heads_in_one_table_at_100_columns():
    from test_render import plain

    s = tiny_session()
    run(s, ":set n_heads=12 d_model=48 n_layers=2")
    shown = plain(run(s, ":patch 12+34=46 vs 12+35=47"), 100)
    # was two tables, heads 0 to 10 and then head 11 alone under its own header
    assert shown.count("layer\\head") == 1 and "layer\\head 0 1 2 3 4 5 6 7 8 9 10 11" in " ".join(shown.split())


# --- :qkv at= in a long text --------------------------------------------------------------------------------------
def test_qkv_header_shows_the_text_around_the_query_not_the_prompts_tail(tmp_path):
    from test_render import plain

    s = on_text(tmp_path, 128)
    text = "the quick brown fox jumps over the lazy dog and then the lazy dog jumps over the quick fox again"
    header = plain(run(s, f":qkv '{text}' at=12"), 200).splitlines()[0]
    # was "query 12 'o' of 'lazy dog jumps over the quick fox again'": no 'o' of "brown" in it
    assert "of 'the quick brown fox jumps over the lazy dog and …'" in header, header
    short = plain(run(s, ":qkv 'the quick brown' at=4"), 200).splitlines()[0]
    assert "of 'the quick brown'" in short


# --- :experts of many experts ---------------------------------------------------------------------------------
def test_experts_of_many_experts_lists_the_busiest_and_says_what_the_others_take():
    from test_render import plain

    s = tiny_session()
    run(s, ":set n_experts=40 experts_per_token=2 n_layers=3")
    result = run(s, ":experts")
    assert len(result.load[0]) == 40  # --json keeps every expert's share
    shown = plain(result, 100)
    listed = [e for e in range(40) if f"expert {e} " in shown + " "]
    assert len(listed) == 16, listed  # 40 rows a table before
    largest = sorted(range(40), key=lambda e: max(row[e] for row in result.load), reverse=True)
    assert set(listed) == set(largest[:16])
    rest = max(max(row[e] for row in result.load) for e in largest[16:])
    assert (f"the 16 experts with the largest share in some block, of 40: the other 24 take at most {rest:.1%} in any "
            "block") in " ".join(shown.split())
