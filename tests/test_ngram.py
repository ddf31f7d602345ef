"""Counting models (core.ngram, `:ngram`): checked against a plain-Python Witten-Bell counter, then the command."""

import json
import math
import random
from collections import Counter

import pytest
import torch

from minitf_repl.core.data import RandomTokens, RepeatedTokens, Task, TextCorpus
from minitf_repl.core.errors import UserError
from minitf_repl.core.ngram import NgramModel, count_and_score, longest_order, split_tokens
from minitf_repl.commands import REGISTRY
from minitf_repl.commands.counting import SAMPLE_TOKENS
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of


# --- the reference: counts in dicts, the formula as the module docstring writes it ----------------------------
def reference_counts(rows: list[list[int]], n: int) -> list[Counter]:
    """For k = 1..n, how often each window of k known tokens occurs (windows stay inside a row)."""
    out = []
    for k in range(1, n + 1):
        c = Counter()
        for row in rows:
            for j in range(k - 1, len(row)):
                window = tuple(row[j - k + 1 : j + 1])
                if all(t >= 0 for t in window):
                    c[window] += 1
        out.append(c)
    return out


def reference_p(counts: list[Counter], vocab: int, before: list[int], w: int) -> float:
    """Witten-Bell: P_k(w|h) = (c(h,w) + T(h) P_{k-1}(w|h')) / (c(h) + T(h)), P_0 = 1/V; an unseen h hands on."""
    p = 1.0 / vocab
    for k, c in enumerate(counts, 1):
        if len(before) < k - 1:
            break
        h = tuple(before[len(before) - (k - 1) :]) if k > 1 else ()
        followers = {window[-1]: m for window, m in c.items() if window[:-1] == h}
        c_h, t_h = sum(followers.values()), len(followers)
        if c_h > 0:
            p = (followers.get(w, 0) + t_h * p) / (c_h + t_h)
    return p


def random_rows(rng: random.Random, vocab: int, shape: tuple[int, int], skew: bool = True) -> list[list[int]]:
    """Rows of ids with some structure (each token leans on the one before) so that counts repeat."""
    rows = []
    for _ in range(shape[0]):
        row = [rng.randrange(vocab)]
        for _ in range(shape[1] - 1):
            row.append((row[-1] + rng.choice([1, 1, 2, 0])) % vocab if skew and rng.random() < 0.7
                       else rng.randrange(vocab))
        rows.append(row)
    return rows


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_probabilities_match_the_reference(n):
    rng = random.Random(n)
    vocab = 6
    train = random_rows(rng, vocab, (3, 60))
    train[1][17] = -1  # a token not known: no window holding it is counted
    val = random_rows(rng, vocab, (2, 25))
    model = NgramModel(torch.tensor(train), vocab, n)
    counts = reference_counts(train, n)
    for order in range(1, n + 1):
        got = model.probabilities(torch.tensor(val), order)
        for b, row in enumerate(val):
            for j in range(1, len(row)):
                want = reference_p(counts[:order], vocab, row[:j], row[j])
                assert got[b, j - 1].item() == pytest.approx(want, rel=1e-12), (order, b, j)


def test_counts_match_the_reference():
    rng = random.Random(0)
    train = random_rows(rng, 5, (2, 80))
    model = NgramModel(torch.tensor(train), 5, 3)
    for order, want in zip(model.orders, reference_counts(train, 3)):
        assert int(order.counts.sum()) == sum(want.values())
        assert len(order.keys) == len(want)
        assert len(order.contexts) == len({window[:-1] for window in want})
        assert int(order.followers.sum()) == len(want)  # every distinct window follows exactly one context


@pytest.mark.parametrize("context", [[], [0], [3, 1], [4, 4, 4], [2, 0, 1, 3, 3]])
def test_every_next_distribution_sums_to_one(context):
    rng = random.Random(1)
    model = NgramModel(torch.tensor(random_rows(rng, 5, (1, 200))), 5, 4)
    for order in range(1, 5):
        p = model.next_distribution(context, order)
        assert p.shape == (5,)
        assert float(p.sum()) == pytest.approx(1.0, abs=1e-12)
        assert bool((p > 0).all())  # smoothing down to the uniform guess: no token is impossible


def test_an_unseen_context_hands_on_the_shorter_one():
    model = NgramModel(torch.tensor([[0, 1, 0, 1, 0, 1, 2]]), 4, 3)
    # 3 never occurs, so the context (3,) was never counted: the bigram hands on the unigram
    assert torch.allclose(model.next_distribution([3], 2), model.next_distribution([], 1))
    # after 0 the text always went on with 1: the bigram is sure of it, more than the unigram
    assert model.next_distribution([0], 2)[1] > 0.6 > model.next_distribution([], 1)[1]


def test_a_repeating_text_is_learned_by_the_bigram_not_the_unigram():
    text = torch.tensor([[0, 1, 2] * 200])
    model = NgramModel(text, 3, 2)
    unigram, bigram = model.losses(text)
    assert unigram == pytest.approx(math.log(3), abs=0.01)  # each symbol a third of the text
    assert bigram < 0.01


def test_the_longest_order_fits_an_int64():
    assert longest_order(65) == 10
    assert longest_order(512) == 6  # 512^7 = 2^63 does not fit
    assert longest_order(50257) == 4
    for vocab in (2, 12, 65, 256, 50257):
        n = longest_order(vocab)
        assert vocab**n <= 2**63 - 1 < vocab ** (n + 1)
    with pytest.raises(UserError, match="the longest is 4"):
        NgramModel(torch.tensor([[1, 2, 3]]), 50257, 5)


def test_the_largest_keys_do_not_overflow():
    vocab = 50257
    top = vocab - 1
    train = [[top, top, top, top, 0, top, top - 1, top]]
    model = NgramModel(torch.tensor(train), vocab, 4)
    assert int(model.orders[3].keys.max()) == vocab**4 - 1  # the window of four largest ids: the largest key
    val = [top, top, top, top, top - 1]
    p = model.probabilities(torch.tensor([val]))
    counts = reference_counts(train, 4)
    assert p[0].tolist() == pytest.approx([reference_p(counts, vocab, val[:j], val[j]) for j in range(1, 5)], rel=1e-12)


def test_sampling_follows_the_counts_and_its_seed():
    text = torch.tensor([[0, 1, 2, 3] * 100])
    model = NgramModel(text, 4, 3)
    ids = model.sample([0, 1], 12, torch.Generator().manual_seed(0), order=3)
    assert ids == [2, 3, 0, 1] * 3  # the cycle is all it ever counted
    again = NgramModel(torch.tensor([[0, 1, 2, 3, 2, 1, 0, 2] * 20]), 4, 2)
    a = again.sample([0], 30, torch.Generator().manual_seed(5))
    assert a == again.sample([0], 30, torch.Generator().manual_seed(5))


def corpus(text: str) -> TextCorpus:
    return TextCorpus("text", text, "a test text")


def test_a_corpus_is_counted_whole_and_scored_on_val():
    rng = random.Random(0)
    words = ["the ", "cat ", "sat ", "on ", "a ", "mat ", "and ", "dog "]
    data = corpus("".join(rng.choice(words) for _ in range(3000)))
    train, counted = split_tokens(data, "train", 32)
    assert counted is None and train.shape == (1, len(data.splits["train"]))
    counting = count_and_score(data, 5, 32)
    losses = [c.val_loss for c in counting.counters]
    assert losses[0] == pytest.approx(math.log(data.tokenizer.vocab_size))
    assert losses[0] > losses[1] > losses[2] > losses[3]  # each character before helps, to the word's end
    train_losses = [c.train_loss for c in counting.counters]
    assert all(a > b for a, b in zip(train_losses, train_losses[1:]))  # on what it counted, longer is always lower
    assert counting.train_tokens == len(data.splits["train"])
    assert counting.val_positions == len(data.splits["val"]) - 1
    assert [c.n for c in counting.counters] == [0, 1, 2, 3, 4, 5]


def test_a_task_is_scored_on_the_answer_only():
    task = Task("sort", 4)
    tokens, counted = split_tokens(task, "val", task.seq_len)
    x, y = task.get_batch("val", 3, task.seq_len, torch.Generator().manual_seed(1))
    assert tokens.shape[1] == x.shape[1] + 1 and counted.shape == (tokens.shape[0], x.shape[1])
    assert counted[0].tolist() == (y[0] >= 0).tolist()  # the same positions the model's loss counts
    counting = count_and_score(task, 3, task.seq_len)
    uniform, *counters = [c.val_loss for c in counting.counters]
    assert counting.generated and counting.val_positions == int(counted.sum())
    # a sorted answer never goes down: the digit before already rules out the smaller ones
    assert counters[1] < counters[0] < uniform


def test_random_tokens_leave_nothing_to_count():
    counting = count_and_score(RandomTokens(20), 3, 64)
    for c in counting.counters:
        assert c.val_loss == pytest.approx(math.log(20), abs=0.05)
    assert counting.counters[3].contexts == 20 * 20  # every context of two tokens was drawn...
    assert counting.counters[3].train_loss < counting.counters[3].val_loss - 0.02  # ...and its noise memorised


def test_a_repeat_defeats_every_counter():
    data = RepeatedTokens(20)
    tokens, counted = split_tokens(data, "val", 64)
    assert int((tokens[:, -1] == -1).sum()) == int((~counted[:, -1]).sum())  # a masked last token is not known
    counting = count_and_score(data, 3, 64)
    assert min(c.val_loss for c in counting.counters) > 0.9 * math.log(20)  # only copying from context helps


# --- the command ---------------------------------------------------------------------------------------------
SMALL = ":set n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=8 autosave=off"


@pytest.fixture
def session(tmp_path):
    s = Session(data_spec="pydoc", checkpoint_dir=tmp_path)
    run(s, SMALL)
    return s


def test_ngram_result_before_and_after_training(session):
    got = run(session, ":ngram n=3")
    assert [row.n for row in got.rows] == [0, 1, 2, 3]
    assert got.rows[0].val_loss == pytest.approx(math.log(got.vocab_size))
    assert got.rows[3].val_loss < got.rows[2].val_loss < got.rows[1].val_loss < got.rows[0].val_loss
    assert got.rows[3].bits_per_char == pytest.approx(got.rows[3].val_loss / math.log(2))
    assert got.model_step == 0 and got.model_val == pytest.approx(math.log(got.vocab_size), abs=0.3)
    assert got.prompt and all(len(row.sample) == SAMPLE_TOKENS for row in got.rows[1:])  # characters: a token each
    text = plain(got)
    assert "counting models on pydoc" in text and "the model has not trained" in text
    for label in ("nothing (uniform)", "nothing (counts)", "2 characters", "up to 32 characters"):
        assert label in text
    run(session, ":train steps=40 eval_every=40")
    got = run(session, ":ngram n=2 sample=off")
    assert got.model_step == 40 and got.model_val < got.rows[0].val_loss and got.prompt is None
    text = plain(got)
    assert "at step 40 the model" in text and "what each counter writes" not in text
    doc = json_document(REGISTRY["ngram"], got)
    assert doc["schema"] == "minitf.ngram/3" and [row["n"] for row in doc["rows"]] == [0, 1, 2]


def test_ngram_on_a_task_scores_the_answers(session):
    run(session, ":data sort")
    got = run(session, ":ngram n=2")
    assert got.generated and got.prompt is None and got.rows[1].bits_per_char is None
    assert f"scored on the {got.val_positions:,} positions of val batches the model's loss counts" in plain(got)


def test_ngram_refuses_what_cannot_be_counted(session):
    with pytest.raises(UserError, match="at most 6 here"):
        NGRAM(session, 7, vocab=512)


def test_ngram_by_default_counts_as_long_as_the_vocabulary_allows(session):
    from minitf_repl.core.data import CharTokenizer

    session.data.tokenizer = CharTokenizer([chr(0x100 + i) for i in range(50257)])  # GPT-2's size: n <= 4
    session.data.splits = {split: torch.randint(50257, (300,), generator=torch.Generator().manual_seed(0))
                           for split in ("train", "val")}
    got = run(session, ":ngram sample=off")
    assert [row.n for row in got.rows] == [0, 1, 2, 3, 4]


def NGRAM(session, n, vocab):
    """:ngram's check on n for a vocabulary of `vocab` (a BPE of 512 would take seconds to train here)."""
    from minitf_repl.core.data import CharTokenizer

    session.data.tokenizer = CharTokenizer([chr(0x100 + i) for i in range(vocab)])
    return run(session, f":ngram n={n}")


def test_ngram_from_the_shell():
    from typer.testing import CliRunner

    from minitf_repl import cli

    tiny = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32"]
    result = CliRunner().invoke(cli.app, [*tiny, "ngram", "--n", "2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "minitf.ngram/3" and len(doc["rows"]) == 3
    result = CliRunner().invoke(cli.app, [*tiny, "ngram", "--n", "13"])
    assert result.exit_code != 0 and "Traceback" not in result.output and "n" in result.output


def test_plot_draws_the_bigram_and_the_best_counter_after_ngram(session):
    from minitf_repl.commands.train import plot_levels

    assert [(c.n, c.val_loss) for c in plot_levels([(1, 3.2), (2, 2.3), (3, 1.7), (4, 1.4), (5, 1.5)])] == [
        (2, 2.3), (4, 1.4)]
    assert [c.n for c in plot_levels([(1, 3.2), (2, 2.3)])] == [2]  # the bigram is the best: drawn once
    assert plot_levels([]) == []
    run(session, ":train steps=20 eval_every=10")
    before = run(session, ":plot")
    assert before.counters == [] and ":ngram measures what counting alone reaches" in plain(before)
    got = run(session, ":ngram n=4 sample=off")
    after = run(session, ":plot")
    best = min(got.rows[1:], key=lambda row: row.val_loss)
    assert [(c.n, c.val_loss) for c in after.counters] == [(2, got.rows[2].val_loss), (best.n, best.val_loss)]
    text = text_of(after, 100)
    assert f"┄2 2-gram counter {got.rows[2].val_loss:.2f}" in text
    assert any("│2┄┄" in line or "┤2┄┄" in line for line in text.splitlines())  # the level's row, after its mark
    assert run(session, ":plot what=lr").counters == []  # a loss chart's, no other
    run(session, ":data sort")  # other data: those counts say nothing of it
    run(session, ":train steps=2 eval_every=2")
    assert run(session, ":plot").counters == []


def test_a_level_far_from_the_curves_is_left_out():
    from minitf_repl.render.chart import Curve, Level, chart
    from rich.console import Console
    import io

    def drawn(levels):
        console = Console(file=io.StringIO(), width=60, color_system=None)
        console.print(chart([Curve("val", [0, 10, 20], [2.0, 1.6, 1.4])], 60, 8, levels=levels))
        return console.file.getvalue()

    text = drawn([Level(1.2, "5", "5-gram counter 1.20"), Level(0.1, "9", "9-gram counter 0.10")])
    assert "┄5 5-gram counter 1.20" in text and "9-gram" not in text  # 1.2 is near the curve, 0.1 is not
    assert "┤5┄┄" in text.splitlines()[7]  # the lowest row: the range was stretched down to 1.2


def test_train_after_ngram_draws_the_counters_and_says_where_it_ends(session):
    from minitf_repl.commands.train import PlotLevel, against_counters

    levels = [PlotLevel(2, 2.318), PlotLevel(5, 1.320)]
    assert against_counters(1.296, levels).startswith("val 1.296: below the 5-gram counter's 1.320 (")
    assert against_counters(1.698, levels).startswith(
        "val 1.698: below the 2-gram counter's 2.318, above the 5-gram counter's 1.320 (")
    assert against_counters(3.0, levels).startswith("val 3.000: above the 2-gram counter's 2.318 (")
    assert run(session, ":train steps=10 eval_every=10").counters == []
    got = run(session, ":ngram n=3 sample=off")
    result = run(session, ":train steps=10 eval_every=5")
    assert [c.n for c in result.counters] == [2, 3]
    text = plain(result)
    assert "2-gram counter" in text and f"val {result.val_loss:.3f}: " in text
    doc = json_document(REGISTRY["train"], result)
    assert doc["counters"] == [{"n": 2, "val_loss": got.rows[2].val_loss}, {"n": 3, "val_loss": got.rows[3].val_loss}]


def test_the_report_draws_the_counters_after_ngram(session, tmp_path):
    run(session, ":train steps=10 eval_every=5")
    run(session, f":report {tmp_path}/before.html")
    assert 'class="counter"' not in (tmp_path / "before.html").read_text()
    got = run(session, ":ngram n=3 sample=off")
    run(session, f":report {tmp_path}/after.html")
    page = (tmp_path / "after.html").read_text()
    assert page.count('class="counter"') == 2 and f"3-gram counter {got.rows[3].val_loss:.2f}" in page


def test_a_long_text_is_counted_on_its_first_part(session, monkeypatch):
    import minitf_repl.core.ngram as ngram

    monkeypatch.setattr(ngram, "COUNTED", 5000)
    monkeypatch.setattr(ngram, "VAL_SCORED", 1000)
    got = run(session, ":ngram n=2 sample=off")
    splits = session.data.splits
    assert (got.train_tokens, got.train_total) == (5000, len(splits["train"]))
    assert (got.val_positions, got.val_total) == (1000, len(splits["val"]) - 1)
    text = plain(got)
    assert f"in the first 5,000 characters of the train split's {len(splits['train']):,}" in text
    assert f"scored on the first 1,000 positions of the val split's {len(splits['val']) - 1:,}" in text


def test_score_with_a_counter_scores_the_same_positions(session):
    from minitf_repl.commands.inside import beats_counter
    from minitf_repl.core.ngram import split_tokens

    run(session, ":train steps=30 eval_every=30")
    text = 'The "while" statement is used for the while'
    got = run(session, f":score '{text}' counter=3")
    ids = session.data.tokenizer.encode(text)
    train, _ = split_tokens(session.data, "train", 32)
    want = -NgramModel(train, session.data.tokenizer.vocab_size, 3).probabilities(torch.tensor([ids[-33:]]))[0].log()
    assert got.counter == 3 and got.counter_losses == pytest.approx(want.tolist(), rel=1e-9)
    assert got.counter_loss == pytest.approx(float(want.mean()))
    text_shown = plain(got)
    assert "3-gram -ln p" in text_shown and f"scores {got.counter_loss:.4f} on this text" in text_shown
    marked = [t for t in range(len(got.losses)) if beats_counter(got, t)]
    assert all(got.target_probs[t] >= 0.2 and got.counter_losses[t] - got.losses[t] >= 1 for t in marked)
    assert json_document(REGISTRY["score"], got)["counter_losses"] == got.counter_losses
    plain_score = run(session, f":score '{text}'")
    assert plain_score.counter is None and "-gram" not in plain(plain_score)


def test_score_with_a_counter_on_a_task_averages_the_answer():
    from minitf_repl.core.config import ModelConfig

    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16), data_spec="sort:4")
    got = run(s, ":score 3141=1134 counter=2")
    kept = [loss for loss, counted in zip(got.counter_losses, got.counted) if counted]
    assert len(kept) == 4 and got.counter_loss == pytest.approx(sum(kept) / 4)


def made_result(model_val, step=600, causal=True, losses=(4.6, 3.2, 2.3, 1.7, 1.4, 1.32, 1.34), seen=None):
    from minitf_repl.commands.counting import NgramResult, NgramRow

    seen = seen or [1.0] * len(losses)
    rows = [NgramRow(n, 10 * n, seen[n], loss - 0.1 * n, loss, None, None) for n, loss in enumerate(losses)]
    return NgramResult("pydoc", "character", 103, 1000, 1000, 100, 100, False, rows, None, step, model_val, None, 64,
                       causal)


@pytest.mark.parametrize("model_val, words", [
    (1.296, "at step 600 the model (1.296) is below every counter: 0.024 nats a character under the best, n = 5"),
    (1.698, "is below the counter of n = 3 (1.700), not yet below n = 4 (1.400); the best is n = 5 (1.320)"),
    (1.38, "is below the counter of n = 4 (1.400), not yet below n = 5 (1.320): :train trains further"),
    (4.7, "at step 600 the model (4.700) is not yet below the uniform guess"),
])
def test_the_verdict_places_the_model_among_the_counters(model_val, words):
    from minitf_repl.commands.counting import verdict

    losses = (4.6, 3.2, 2.3, 1.7, 1.4, 1.32, 1.34)
    assert words in " ".join(verdict(made_result(model_val, losses=losses)))


def test_the_verdict_before_training_and_without_the_mask():
    from minitf_repl.commands.counting import verdict

    assert "the model has not trained: it scores 4.610" in verdict(made_result(4.61, step=0))[0]
    assert "causal=off" in verdict(made_result(0.05, causal=False))[0]


def test_the_trend_says_memorising_or_asks_for_longer_contexts():
    from minitf_repl.commands.counting import explanation

    turning = made_result(1.3, seen=[1, 1, 1, 1, 0.98, 0.93, 0.86])
    assert "past n = 5 a longer context costs on val (1.340 at n = 6)" in explanation(turning)[0]
    assert "14% of val's contexts of 5 characters were never counted" in explanation(turning)[0]
    all_seen = made_result(1.3, seen=[1] * 7)
    assert "each long context was counted a few times" in explanation(all_seen)[0]
    falling = made_result(1.3, losses=(4.6, 3.2, 2.3, 1.7))
    assert explanation(falling) == ["the longest counter asked is still the best: :ngram n=5 tries longer contexts"]
    flat = made_result(3.9, losses=(3.91, 3.91, 3.92, 4.05))
    assert any("no counter beats the uniform guess by much" in line for line in explanation(flat))


def test_model_below_it_is_the_first_evaluation_under_each_counter(session):
    run(session, ":train steps=60 eval_every=20")
    got = run(session, ":ngram n=3 sample=off")
    evals = [(row["step"], row["val_loss"]) for row in session.trainer.history if row.get("val_loss") is not None]
    assert [step for step, _ in evals] == [20, 40, 60]
    for row in got.rows:
        assert row.model_below_at == next((step for step, loss in evals if loss < row.val_loss), None)
    assert got.rows[0].model_below_at == 20  # below the uniform guess at the first evaluation
    assert "model below it: the first evaluation on this data" in plain(got)


def test_model_below_it_reads_only_this_datas_evaluations(tmp_path):
    from minitf_repl.core.config import ModelConfig

    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16), data_spec="sort:4",
                checkpoint_dir=tmp_path)
    run(s, ":set autosave=off")
    run(s, ":train steps=20 eval_every=10")
    run(s, ":data reverse:4")  # the same vocabulary: the model and its history stay
    assert len([r for r in s.trainer.history if r.get("val_loss") is not None]) == 2
    got = run(s, ":ngram n=2")
    assert all(row.model_below_at is None for row in got.rows)  # sort's evaluations say nothing of reverse
    run(s, ":train steps=10 eval_every=10")
    got = run(s, ":ngram n=2")
    assert got.rows[0].model_below_at in (None, 30)
    assert s.history_on_data == [r for r in s.trainer.history if r["step"] > 20]


def test_compare_draws_the_counters_of_the_data_it_compares_on(session):
    got = run(session, ":ngram n=3 sample=off")
    result = run(session, ":compare current n_layers=2 steps=60 eval_every=20")
    assert [(c.n, c.val_loss) for c in result.counters] == [(2, got.rows[2].val_loss), (3, got.rows[3].val_loss)]
    assert json_document(REGISTRY["compare"], result)["schema"] == f"minitf.compare/{REGISTRY['compare'].json_version}"
    from dataclasses import replace

    from minitf_repl.commands.train import PlotLevel

    near = result.outcomes[0].curve[-1].val_loss + 0.05  # a level near the curves is drawn (far ones are left out)
    assert "┄2 2-gram counter" in text_of(replace(result, counters=[PlotLevel(2, near)]), 100)
    other = run(session, ":compare current n_layers=2 steps=4 eval_every=2 data=sort")
    assert other.counters == []  # not the text :ngram counted
    bpe = run(session, ":compare current tokenizer=bpe:260 steps=2 eval_every=2")
    assert bpe.counters == []  # a contender reads it with another tokenizer: losses per token do not compare


def test_rows_shorter_than_a_window_count_nothing_of_that_length():
    model = NgramModel(torch.tensor([[0, 1]]), 3, 4)  # no window of 3 or 4 tokens fits a row of 2
    assert [len(order.keys) for order in model.orders] == [2, 1, 0, 0]
    p = model.next_distribution([0, 1, 2], 4)
    assert float(p.sum()) == pytest.approx(1.0) and torch.allclose(p, model.next_distribution([1, 2], 2))
    assert model.probabilities(torch.tensor([[0, 1]])).shape == (1, 1)


def test_a_text_too_short_to_evaluate_is_one_clear_error(tmp_path):
    short = tmp_path / "short.txt"
    short.write_text("abcdefghij")
    s = Session(data_spec=str(short), checkpoint_dir=tmp_path)
    with pytest.raises(UserError, match="too short"):
        run(s, ":ngram")
    assert s.counters == []  # refused before anything was kept


def test_ctrl_c_stops_a_count_and_keeps_nothing(session, monkeypatch):
    import minitf_repl.core.ngram as ngram

    assert REGISTRY["ngram"].interruptible  # Ctrl-C raises inside it: it polls no stop flag
    run(session, ":ngram n=2 sample=off")
    kept = session.counters

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ngram, "count_and_score", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(session, ":ngram n=3 sample=off")
    assert session.counters == kept  # the earlier count stands, nothing of the stopped one
