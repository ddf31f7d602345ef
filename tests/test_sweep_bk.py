"""Findings of the fifty-third session's sweep (AMD EPYC Zen 4), each test failing before its fix."""

from __future__ import annotations

import json
import zlib

import pytest


@pytest.mark.parametrize("spec, held, total", [("sort:1", 1, 10), ("sort:2", 12, 100), ("add:1", None, 100),
                                               ("reverse:4", None, 10_000)])
def test_data_counts_a_small_tasks_held_out_questions(spec, held, total):
    """:data said "about 10% of the questions are held out" where sort:2 holds out 12 of its 100."""
    from test_cli import invoke

    name, size = spec.split(":")
    n_digits = 2 * int(size) if name == "add" else int(size)
    questions = [f"{n:0{n_digits}d}" for n in range(10**n_digits)]
    if name == "add":
        questions = [f"{q[:int(size)]}+{q[int(size):]}" for q in questions]
    counted = sum(zlib.crc32(f"{q}=".encode()) % 10 == 0 for q in questions)  # the task's own rule, counted here
    assert held is None or counted == held
    doc = json.loads(invoke("data", spec, "--json").stdout)
    assert (doc["info"]["val_questions"], doc["info"]["questions"]) == (counted, total)
    text = invoke("data", spec).stdout
    share = round(100 * counted / total)
    assert f"{counted:,} of the {total:,} possible questions ({share}%)" in " ".join(text.split())


def test_data_says_about_a_tenth_of_a_large_tasks_questions():
    from test_cli import invoke

    doc = json.loads(invoke("data", "sort:6", "--json").stdout)
    assert doc["info"]["questions"] is None and doc["info"]["val_questions"] is None
    assert "about 10% of the questions are held out" in " ".join(invoke("data", "sort:6").stdout.split())


def test_step_json_at_temperature_0_gives_no_seed():
    """Greedy, the argmax is the pick and nothing is drawn: the JSON gave a drawn seed as if it mattered."""
    from test_commands import run, tiny_session

    session = tiny_session()
    greedy = run(session, ":step 3141= temperature=0")
    assert greedy.seed is None and greedy.n_kept == 1
    drawn = run(session, ":step 3141= temperature=1 seed=7")
    assert drawn.seed == 7


def test_tok_on_a_task_shows_a_whole_example():
    """:tok without text on a task showed the question alone ("654081="), not what training reads."""
    from test_commands import run, tiny_session

    result = run(tiny_session("sort:6"), ":tok")
    question, answer = result.text.split("=")
    assert len(question) == 6 and answer == "".join(sorted(question)), result.text


def test_set_a_folder_cut_at_a_space_is_told_to_quote_it(tmp_path):
    """`:set checkpoint_dir=/tmp/my runs` was told `:set runs shows, :set checkpoint_dir=/tmp/my changes`."""
    from minitf_repl.core.errors import UserError
    from test_cli import assert_one_error_line, invoke
    from test_commands import run, tiny_session

    session = tiny_session()
    with pytest.raises(UserError) as e:
        run(session, f":set checkpoint_dir={tmp_path}/my runs")
    fix = str(e.value).rpartition(": ")[2]
    assert fix == f':set checkpoint_dir="{tmp_path}/my runs"', str(e.value)
    run(session, fix)  # the fix runs as pasted
    assert session.shell_config.checkpoint_dir == f"{tmp_path}/my runs"
    result = invoke("set", f"checkpoint_dir={tmp_path}/my", "runs")
    assert_one_error_line(result)
    assert f"minitf --checkpoint-dir '{tmp_path}/my runs' ls" in result.stderr, result.stderr


def test_set_still_refuses_names_beside_pairs():
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError, match="not both"):
        run(tiny_session(), ":set lr=0.01 warmup_steps")


def test_tok_says_it_read_a_typed_letter_in_the_datas_unicode_form(tmp_path):
    """`:tok café` on a text written in NFD showed 5 tokens "one per character" for 4 typed, without a word."""
    import unicodedata

    from test_cli import invoke

    path = tmp_path / "nfd.txt"
    path.write_text(unicodedata.normalize("NFD", "café résumé naïve " * 200), encoding="utf-8")
    doc = json.loads(invoke("--data", str(path), "tok", "café", "--json").stdout)
    assert doc["read_as"] == "cafe\u0301" and len(doc["ids"]) == 5
    text = " ".join(invoke("--data", str(path), "tok", "café").stdout.split())
    assert "5 characters where 4 were typed" in text, text
    assert json.loads(invoke("--data", str(path), "tok", "cafe\u0301", "--json").stdout)["read_as"] is None


# --- the interpretability views (a helper checked their numbers against its own torch) -----------------------------
def test_lens_ranks_a_typed_task_questions_answer_and_a_named_target():
    """`:lens 654081=` gave no rank column where `:lens` alone did; `:attrib` and `:patch` take a task's answer."""
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session("sort:6")
    typed = run(session, ":lens 654081=")
    assert typed.target == "0" and all(r.target_rank is not None for r in typed.rows)
    named = run(session, ":lens 654081= target=5")
    assert named.target == "5" and named.chosen and "'5': rank (p)" in plain(named)
    assert "the target is '5'" in plain(named) and "true next" not in plain(named)
    with pytest.raises(UserError, match=r"target must be one token, got 'x' \(not in the vocabulary\); give one "
                                        r"character of the vocabulary, e\.g\. target=4"):
        run(session, ":lens 654081= target=x")


def test_patch_refuses_two_identical_prompts():
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError, match=r"the two prompts are the same, '1234=': .* e\.g\. :patch 3141= 0141="):
        run(tiny_session(), ":patch 1234= 1234=")


def test_patch_names_the_ablation_where_the_clean_answer_is_lost():
    from minitf_repl.commands.why import patch_reading

    flat = patch_reading([[0.1]], ["a"], [[0.0]], gap=-2.0, ablated=True)
    assert ":ablate off first if the part switched off is what broke the clean answer" in flat
    assert "train first" in patch_reading([[0.1]], ["a"], [[0.0]], gap=-2.0)


def test_attrib_leaves_out_parts_that_write_exactly_zero():
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session("sort:6")
    run(session, ":train steps=4")
    run(session, ":ablate head=0.1")
    result = run(session, ":attrib 654081=")
    text = " ".join(plain(result).split())
    assert "head 0.1 +0.00" not in text and "head 0.0 " in text  # a row for the head that writes, none for 0.1
    assert "1 part writes exactly 0, not listed (head 0.1); a part :ablate switches off writes nothing" in text


def test_ablate_off_puts_back_one_part():
    """`:ablate off head=0.1` was refused ("off puts back every part on its own"): one part could not come back."""
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session("sort:6")
    run(session, ":ablate head=0.1 mask")
    result = run(session, ":ablate off head=0.1")
    assert result.put_back == ["head 0.1"] and result.active == ["the causal mask"]
    assert [str(a) for a in session.ablations] == ["the causal mask"]
    assert "switched back on: head 0.1" in plain(result) and "switched off: the causal mask" in plain(result)
    with pytest.raises(UserError, match=r"not switched off: head 0\.0 \(off now: the causal mask\); "
                                        r":ablate off mask puts the causal mask back, :ablate off every part"):
        run(session, ":ablate off head=0.0")
    assert run(session, ":ablate off").put_back == ["the causal mask"] and not session.ablations
    with pytest.raises(UserError, match="nothing is off now, so there is nothing to put back"):
        run(session, ":ablate off head=0.1")


# --- sampling and decoding (a helper checked them against its own softmax, top-k and top-p) -------------------------
@pytest.mark.parametrize("line, meant", [(":gen hello --cache of", "--cache off"),
                                         (":gen --cache ture hi", "--cache true"),
                                         (":gen hi --cache offf", "--cache off")])
def test_an_on_off_options_misspelt_value_is_refused_not_read_as_text(line, meant):
    """`:gen hello --cache of` generated from "hello of" with the cache on."""
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError, match=f"did you mean {meant}\\?"):
        run(tiny_session("pydoc"), line)


def test_an_on_off_option_alone_still_takes_text_after_it():
    from test_commands import run, tiny_session

    session = tiny_session("pydoc")
    for line in (":gen --cache now n=2", ":gen --cache maybe n=2", ":gen hi --cache one n=2", ":gen --cache offer n=2",
                 ":gen --cache=on of n=2"):  # the way a refusal gives to begin the text with "of"
        assert run(session, line).cache  # "now" and "one" are a letter from "no" and "on", and text


def test_shell_refuses_a_misspelt_on_off_value_in_one_line():
    from test_cli import invoke

    result = invoke("gen", "hello", "--cache", "of", "--n", "2")
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        "error: --cache of: did you mean --cache off? An on/off option takes on or off (or true/false, yes/no, 1/0); "
        "to begin the text with 'of', give the option its value: --cache on of"], result.stderr


def test_gen_json_gives_no_seed_where_a_drawn_one_decided_nothing():
    """Greedy after a given prompt, gen --json gave a seed that changed every run (step --json gives null)."""
    from test_cli import invoke

    greedy = json.loads(invoke("gen", "hello", "--n", "3", "--temperature", "0", "--json").stdout)
    assert greedy["seed"] is None and greedy["seed_drawn"] is False
    given = json.loads(invoke("gen", "hello", "--n", "3", "--temperature", "0", "--seed", "5", "--json").stdout)
    assert given["seed"] == 5  # given: said back, as typed
    drawn = json.loads(invoke("gen", "hello", "--n", "3", "--json").stdout)
    assert isinstance(drawn["seed"], int) and drawn["seed_drawn"] is True


def test_kv_says_a_refilled_cache_saved_nothing():
    from minitf_repl.commands.worked import KvStep
    from test_commands import run, tiny_session
    from test_render import text_of
    from test_sweep_bh import replace_steps

    result = run(tiny_session(), ":kv 31 n=4")
    steps = [KvStep("e", "e", 64, 64, 64, True, 0.0) for _ in range(3)]
    slow = replace_steps(result, steps)
    slow.cached_seconds, slow.naive_seconds = 0.0114, 0.0059
    text = " ".join(text_of(slow, 100).split())
    assert "192 with the cache, 192 without" in text and "so few positions" not in text, text
    assert "the cache ran as many positions as the loop without it, so it saved no arithmetic" in text


# --- the charts (a helper read them against the report and its own torch) -------------------------------------------
def test_induction_chart_draws_what_even_attention_scores():
    """`:plot what=induction` spread four heads at 0.032 to 0.034 over the whole height, with no reference."""
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session("pydoc")
    run(session, ":train steps=4 eval_every=2 watch=heads")
    result = run(session, ":plot what=induction")
    frames = [f for f in session.watch_frames if f.heads]
    assert result.even is not None and result.even == frames[-1].even_induction
    text = " ".join(plain(result).split())
    assert f"even attention {result.even:.3f}" in text and "head L.H is block L's head H" in text
    assert "(nats)" in " ".join(plain(run(session, ":plot")).split())  # the loss chart's unit


def test_a_watched_curve_says_which_of_its_points_are_drawn_over():
    """A lens rank of 2 on rank 1's row under ✚ read as the block having the answer; only a wholly hidden curve
    was flagged."""
    from minitf_repl.render.chart import Curve, hidden_under

    curves = [Curve("blocks.0", [0, 1, 2], [2, 2, 3], "▲", "red", joined=True),
              Curve("blocks.3", [0, 1, 2], [1, 1, 1], "✚", "green", joined=True)]
    cells = [[(0, 0), (1, 0), (2, 1)], [(0, 0), (1, 0), (2, 0)]]
    owner = {(0, 0): 1, (1, 0): 1, (2, 1): 0, (2, 0): 1}
    assert hidden_under(0, curves, cells, owner) == " (2 of 3 points hidden under ✚)"
    assert hidden_under(1, curves, cells, owner) == ""
    loss = [Curve("train", [0, 1], [2, 1], "•", "cyan"), curves[1]]  # a loss chart's curve says nothing of a few
    assert hidden_under(0, loss, cells, owner) == ""
    owner[(2, 1)] = 1
    assert hidden_under(0, curves, cells, owner) == " (hidden under ✚)"


# --- evaluation tools (a helper recomputed them with its own counters and decoding) ---------------------------------
def test_score_stars_no_position_where_the_counter_reads_all_the_model_did():
    """`:score 'x the' counter=3` starred t = 0, "the model read further back", where both had read 'x' alone."""
    from minitf_repl.commands.inside import ScoreResult, beats_counter

    result = ScoreResult.__new__(ScoreResult)
    result.counter, result.counted = 3, [True] * 4
    result.target_probs, result.losses, result.counter_losses = [0.4] * 4, [0.9] * 4, [2.3] * 4
    assert [beats_counter(result, t) for t in range(4)] == [False, False, True, True]


def test_context_counts_a_tasks_counter_as_ngram_does(monkeypatch):
    """:context said "the counter is minitf ngram's" and on a task counted other training questions (seed + 1)."""
    import torch

    from minitf_repl.core import context
    from minitf_repl.core.data import Task

    seeds = []
    real = context.train_counter
    monkeypatch.setattr(context, "train_counter",
                        lambda data, n, T, seed=0: seeds.append(seed) or real(data, n, T, seed))
    x = torch.zeros(2, 4, dtype=torch.long)
    context._counter_nll(Task("sort", 2), x, x, 3, seed=5)
    assert seeds == [0]  # :ngram's own


def test_context_on_a_task_says_where_both_read_the_same():
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session("sort:1")
    run(session, ":train steps=30")
    text = " ".join(plain(run(session, ":context counter=3")).split())
    assert "position 0 predicts no counted token" in text and "so position 1 is the one scored" in text, text
    assert "from position 1 to the end the model stays under the trigram counter" in text, text  # (the seed's)
    assert "up to position 1 both read the same characters, so the gap there is not reading further back but what " \
           "the model makes of them where the table has few or no counts (a held-out question: none)" in text, text


@pytest.mark.parametrize("p, shown", [(0.000556, "5.6e-04"), (0.00096, "0.001"), (0.0012, "0.001"), (0.5, "0.500")])
def test_a_probability_under_a_thousandth_is_not_rounded_up_to_it(p, shown):
    from minitf_repl.commands.inside import prob_text

    assert prob_text(p) == shown


def test_load_model_brings_a_shell_trained_model_to_python(tmp_path):
    """From a notebook a model trained in the shell took three names of core.checkpoint.loading."""
    import torch

    from minitf_repl import load_model
    from minitf_repl.core.errors import CheckpointError
    from test_cli import invoke

    assert invoke("--checkpoint-dir", str(tmp_path), "--data", "sort:2", "train", "--steps", "3").exit_code == 0
    model, data = load_model("autosave", tmp_path)
    assert not model.training and data.name == "sort"
    ids = data.tokenizer.encode("31=")
    logits, _ = model(torch.tensor([ids]))
    assert logits.shape == (1, 3, data.tokenizer.vocab_size)
    with pytest.raises(CheckpointError, match="no checkpoint named 'nosuch'"):
        load_model("nosuch", tmp_path)


def test_ngram_says_its_train_loss_is_read_on_part_of_a_long_text(tmp_path):
    """pydoc's unigram read 3.248 "on the 418,543 characters" where counts alone over all of them give 3.253."""
    from minitf_repl.core import ngram
    from test_commands import run
    from test_render import plain
    from minitf_repl.session import Session
    from minitf_repl.core.config import ModelConfig, TrainConfig

    path = tmp_path / "text.txt"
    path.write_text("the cat sat on the mat. " * 2000, encoding="utf-8")
    session = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), TrainConfig(),
                      data_spec=str(path), device_name="cpu")
    result = run(session, ":ngram n=2 sample=off")
    assert result.train_scored == result.train_tokens - 1  # all of it: nothing said
    assert "train loss: on the first" not in plain(result)
    old = ngram.TRAIN_SCORED
    try:
        ngram.TRAIN_SCORED = 1000
        ngram._kept = (None, None)
        result = run(session, ":ngram n=2 sample=off")
    finally:
        ngram.TRAIN_SCORED = old
    assert result.train_scored == 1000
    assert f"train loss: on the first 1,000 positions of the {result.train_tokens:,} counted" in plain(result)


# --- devices and precision (a helper ran :device ten times on a busy Zen 4) ------------------------------------------
def fake_clock(ratios: list[float]):
    """perf_counter for onednn_faster's timed rounds: in attempt k, torch's products take ratios[k], oneDNN's 1."""
    from minitf_repl.core import fastpath

    durations = [d for r in ratios for _ in range(fastpath.ONEDNN_ROUNDS) for d in (r, 1.0)]
    state = {"now": 0.0, "calls": 0}

    def clock():
        k, state["calls"] = state["calls"], state["calls"] + 1
        if k % 2:  # an end: the start plus this run's duration
            state["now"] += durations[k // 2] if k // 2 < len(durations) else 1.0
        return state["now"]

    return clock, state


@pytest.mark.parametrize("ratios, faster, attempts", [([2.0, 1.0, 1.0], False, 3), ([2.0, 2.0, 1.0], True, 2),
                                                      ([1.0, 1.0, 2.0], False, 2), ([1.0, 2.0, 2.0], True, 3)])
def test_onednn_is_taken_on_two_attempts_that_show_it_not_one(monkeypatch, ratios, faster, attempts):
    """One attempt of three at 1.15x sufficed: on a busy Zen 4 :device named oneDNN in 6 of 8 fresh processes."""
    from minitf_repl.core import fastpath

    monkeypatch.delenv(fastpath.PRODUCTS_ENV, raising=False)
    clock, state = fake_clock(ratios)
    monkeypatch.setattr(fastpath.time, "perf_counter", clock)
    assert fastpath.onednn_faster.__wrapped__() is faster
    assert state["calls"] == 4 * fastpath.ONEDNN_ROUNDS * attempts  # two runs a round, a start and an end each


@pytest.mark.parametrize("value, faster", [("onednn", True), ("torch", False), ("MKL", False)])
def test_minitf_products_decides_without_measuring(monkeypatch, value, faster):
    import torch

    from minitf_repl.core import fastpath

    monkeypatch.setenv(fastpath.PRODUCTS_ENV, value)
    monkeypatch.setattr(fastpath.time, "perf_counter", lambda: pytest.fail("measured"))
    assert fastpath.onednn_faster.__wrapped__() is (faster and torch.backends.mkldnn.is_available())
    assert fastpath.products_fixed()


def test_device_says_the_products_choice_was_measured_and_how_to_fix_it(monkeypatch):
    from minitf_repl.core import fastpath
    from test_cli import invoke

    monkeypatch.setattr(fastpath, "onednn_faster", lambda: False)
    monkeypatch.delenv(fastpath.PRODUCTS_ENV, raising=False)
    text = " ".join(invoke("device").stdout.split())
    assert "measured at this process's first float32 product, which a busy machine can tip either way " \
           "($MINITF_PRODUCTS=onednn or =torch fixes it)" in text, text
    monkeypatch.setenv(fastpath.PRODUCTS_ENV, "torch")
    doc = json.loads(invoke("device", "--json").stdout)
    assert doc["cpu_float32_products"] == "MKL" and doc["cpu_float32_products_by"] == "MINITF_PRODUCTS"


@pytest.mark.parametrize("typed, dtype", [("bf16", "bfloat16"), ("FP32", "float32"), ("bfloat16", "bfloat16")])
def test_dtype_takes_the_short_names_device_writes(typed, dtype):
    """:device's column is "bf16", and `:set dtype=bf16` was refused."""
    from test_commands import run, tiny_session

    session = tiny_session()
    run(session, f":set dtype={typed}")
    assert session.train_config.dtype == dtype


def test_an_unavailable_device_names_the_way_out_at_every_command(monkeypatch):
    from minitf_repl.core import device
    from minitf_repl.core.errors import DeviceError
    from test_commands import run, tiny_session

    monkeypatch.setattr(device, "_cuda_count", lambda: 0)
    session = tiny_session()
    session.device_name, session._device = "cuda", None
    with pytest.raises(DeviceError, match=r"no CUDA GPU found\); available: .*; :device cpu uses the CPU instead"):
        run(session, ":params")


def test_quantize_says_an_untrained_model_is_random_and_why_int8_is_no_faster():
    import dataclasses

    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session()
    result = run(session, ":quantize int8")
    assert result.untrained
    assert "this model has not trained yet: the val loss and tokens compared are random weights'; :train first" \
        in " ".join(plain(result).split())
    slower = dataclasses.replace(result, measure=dataclasses.replace(result.measure, tokens_per_second_before=100.0,
                                                                     tokens_per_second_after=80.0))
    assert "int8 here saves memory, not time" in " ".join(plain(slower).split())
    faster = dataclasses.replace(result, measure=dataclasses.replace(result.measure, tokens_per_second_before=80.0,
                                                                     tokens_per_second_after=100.0))
    assert "saves memory, not time" not in " ".join(plain(faster).split())
    run(session, ":train steps=2")
    assert not run(session, ":quantize int8").untrained


# --- :compare (a helper recomputed its verdicts and curves) -----------------------------------------------------------
def compared(outcomes, chance=4.63):
    from minitf_repl.commands.lab import CompareResult

    return CompareResult(outcomes, 30, 2, "pydoc", False, None, chance=chance)


def outcome(label, losses, diverged=None):
    from minitf_repl.core.compare import Evaluation, Outcome

    return Outcome(label, 43_072, [Evaluation(label, 10 * (k + 1), v, 0.01) for k, v in enumerate(losses)],
                   1000.0, 1.0, diverged=diverged)


def test_compare_leaves_out_a_contender_that_blew_up_without_overflowing():
    """lr=100 read 14,335 to 200,033 nats, finite, so it was drawn: lr=0.01's whole curve became one flat row."""
    from test_render import plain

    result = compared([outcome("lr=0.01", [4.3, 3.4, 2.8]), outcome("lr=100", [9793.3, 34083.5, 200033.0])])
    text = " ".join(plain(result).split())
    assert "lr=100 blew up: its val loss reached 2e+05 nats, far above a uniform guess's 4.63 (ln V)" in text, text
    assert "▲ lr=100" not in text.split("└")[-1]  # not in the chart's legend
    calm = compared([outcome("lr=0.01", [4.3, 3.4, 2.8]), outcome("lr=0.1", [5.9, 4.1, 3.0])])
    assert "blew up" not in " ".join(plain(calm).split())  # above ln V early on is no blow-up


def test_compare_says_a_contender_that_diverged_before_any_evaluation_has_no_losses():
    from test_render import plain

    result = compared([outcome("lr=0.01", [4.3, 3.4]), outcome("lr=1e5", [], diverged="step 2: loss inf")])
    text = " ".join(plain(result).split())
    assert "lr=1e5 diverged at step 2: loss inf: it stopped there (no evaluation came before it, so it has no " \
           "losses, the chart leaves it out)" in text, text


def test_compare_on_other_data_follows_that_datas_optimizer_recipe():
    """`compare current optimizer=adamw data=sort` followed AdamW's recipe for pydoc (6e-3), not sort's (3e-3)."""
    from test_commands import Recorder, run, tiny_session

    session = tiny_session("pydoc")
    reporter = Recorder()
    run(session, ":compare current optimizer=adamw data=sort:2 steps=2", reporter)
    assert any("the recipe for adamw on sort" in n and "lr 0.01 -> 0.003" in n for n in reporter.notices), \
        reporter.notices


# --- :lrfind -----------------------------------------------------------------------------------------------------
def test_lrfind_at_its_last_rate_with_the_loss_still_falling_says_the_lowest_is_unread():
    """`:lrfind high=0.01` at lr 0.01: "lowest so far at 0.01", then "your lr sits between where the loss falls
    fastest and where it is lowest: where a run's peak rate belongs"."""
    from minitf_repl.commands.rates import LrfindResult, where
    from minitf_repl.core.lrfind import LrRange

    rates = [1e-4 * 100 ** (k / 29) for k in range(30)]
    smoothed = [4.6 - 0.01 * k for k in range(30)]
    test = LrRange(optimizer="muon", rates=rates, losses=smoothed, smoothed=smoothed, steepest=rates[20],
                   lowest=rates[-1], lowest_loss=smoothed[-1], blown_at=None, low=1e-4, high=0.01, steps=30)
    said = where(LrfindResult(test, "pydoc", rates[-1], 1337))
    assert "is the test's last rate (0.01), the loss still falling there, so where the loss is lowest lies past " \
           "it, unread" in said, said


def test_lrfind_data_from_the_shell_says_where_data_goes():
    from test_cli import invoke

    result = invoke("lrfind", "data=sort")
    assert "the test runs on the session's data: minitf --data NAME lrfind runs it on another" in result.stderr


# --- torchrun (a helper launched two processes on gloo) ------------------------------------------------------------
def test_a_data_file_missing_for_a_later_process_alone_is_said_by_it(monkeypatch):
    """A --data file missing for process 1 only: it exited unsaid, and process 0 only said a peer was gone."""
    from typer.testing import CliRunner

    from minitf_repl import cli
    from minitf_repl.core import distributed

    waited = []
    monkeypatch.setattr(distributed, "FIRST_SAYS_SECONDS", 0.01)
    real = distributed.before_error
    monkeypatch.setattr(distributed, "before_error", lambda wait=None: waited.append(1) or real(wait))
    monkeypatch.setattr(cli, "join_ranks", lambda ctx, device: device)  # the rendezvous, done: every process is in
    later = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    result = CliRunner().invoke(cli.app, ["--data", "no-such-file.txt", "train", "--steps", "2"], env=later)
    assert result.exit_code == 1 and waited
    assert "--data: " in result.stderr and "no-such-file.txt" in result.stderr, result.stderr


# --- the REPL's and the shell's conveniences (a helper tried them in tmux) --------------------------------------------
@pytest.mark.parametrize("words, starts", [(["--show-completion", "zsh"], "#compdef minitf"),
                                           (["--show-completion=fish"], "complete --command minitf"),
                                           (["--show-completion", "bash"], "_minitf_completion()")])
def test_show_completion_prints_the_named_shells_script(words, starts):
    """`minitf --show-completion zsh` printed bash's script: the name was dropped for the shell found."""
    from test_cli import invoke

    result = invoke(*words)
    assert result.exit_code == 0 and result.stdout.lstrip().startswith(starts), result.stdout[:80]


def test_install_completion_installs_the_named_shells_script(tmp_path, monkeypatch):
    from test_cli import invoke

    monkeypatch.setenv("HOME", str(tmp_path))
    result = invoke("--install-completion", "zsh")
    assert result.exit_code == 0 and "zsh completion installed in" in result.stdout, result.output
    assert (tmp_path / ".zfunc" / "_minitf").is_file() and not (tmp_path / ".bashrc").exists()


def test_completion_options_refuse_a_word_that_names_no_shell():
    from test_cli import assert_one_error_line, invoke

    result = invoke("--show-completion", "tcsh")
    assert_one_error_line(result, code=2)
    assert "--show-completion takes a shell's name, one of bash, zsh, fish, powershell" in result.stderr


def test_a_contenders_comma_completes_settings_not_compares_own_options():
    """`:compare norm=rmsnorm,<Tab>` offered steps= data= seeds= eval_every=, each then refused in the contender."""
    from test_repl import complete

    offered = complete(":compare norm=rmsnorm,")
    assert offered and not {"steps=", "data=", "seeds=", "eval_every="} & set(offered), offered
    assert "lr=" in offered
    assert {"steps=", "data="} <= set(complete(":compare norm=rmsnorm "))  # a word of its own: they are offered


def test_compares_own_option_inside_a_contender_is_said_to_go_apart():
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError, match=r"'data' in contender 'norm=rmsnorm,data=sort' is no setting; data= is "
                                        r":compare's own, for every contender: give data=sort to the comparison, "
                                        r"after the contenders"):
        run(tiny_session("pydoc"), ":compare norm=rmsnorm,data=sort norm=layernorm steps=1")


def test_gen_quotes_a_long_prompts_end_not_all_of_it():
    """A 2,000-digit prompt on sort was quoted whole in "... has no '='": twenty lines of one message."""
    from test_commands import run, tiny_session

    result = run(tiny_session("sort:4"), ":gen " + "3" * 2000 + " n=2")
    assert result.off_task is not None and len(result.off_task) < 400, len(result.off_task)
    assert result.off_task.startswith("'…" + "3" * 40 + "' has no '='"), result.off_task[:80]


def test_a_commands_name_typed_as_text_gets_a_line_that_runs():
    """`quit now` was told `:quit now runs it as a command`, which :quit refuses ("takes no text")."""
    from minitf_repl.commands import REGISTRY
    from minitf_repl.dispatch import FrontDoor

    door = FrontDoor.__new__(FrontDoor)  # its registry alone: the line is judged, nothing runs
    door.registry = REGISTRY
    command = REGISTRY["gen"]
    assert door._meant_as_command("quit now", command).endswith("; :quit runs it as a command")
    assert door._meant_as_command("train steps=2", command).endswith("; :train steps=2 runs it as a command")
    # a line wrong as the command is kept whole, for its own error to correct (`:train` alone would run 600 steps)
    assert door._meant_as_command("train stpes=5", command).endswith("; :train stpes=5 runs it as a command")


def test_a_run_under_torchrun_says_how_one_process_continues_its_checkpoint(tmp_path):
    """The lines after a torchrun save are one process's: pasted, a continued run trained on half the global batch."""
    import dataclasses

    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session()
    session.checkpoint_dir = tmp_path
    result = run(session, ":train steps=2")
    assert result.launch is None and "processes" not in plain(result)
    launched = dataclasses.replace(result, launch=(2, 4))
    assert "trained by 2 processes at batch_size 4 each, a global batch of 8: one process continues it alike with " \
           "--set batch_size=8" in " ".join(plain(launched).split())


def test_one_gpu_for_every_process_on_a_machine_without_one_says_cpu(monkeypatch):
    """`--device cuda:0` under torchrun was told "give --device cuda", then refused: no CUDA GPU here."""
    from typer.testing import CliRunner

    from minitf_repl import cli
    from minitf_repl.core import device

    monkeypatch.setattr(device, "_cuda_count", lambda: 0)
    env = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1"}
    result = CliRunner().invoke(cli.app, ["--device", "cuda:0", "train", "--steps", "2"], env=env)
    assert result.exit_code == 1
    assert "and this machine has no CUDA GPU: give --device cpu (gloo), or leave --device out" in result.stderr, \
        result.stderr


def test_load_without_a_name_is_a_command_line_missing_its_value(tmp_path):
    """`minitf load` exited 1, where docs/checkpoints-and-safety.md gives a missing value 2 (as `--steps` alone)."""
    from test_cli import assert_one_error_line, invoke

    assert invoke("--checkpoint-dir", str(tmp_path), "--set", "n_layers=1", "train", "--steps", "1").exit_code == 0
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "load"), code=2)
    assert "which checkpoint? give its name, e.g. minitf --checkpoint-dir" in line


def test_the_reports_config_is_headed_as_config_heads_it(tmp_path):
    """The report's config headings read "train" and "gen" where :config says training and generation."""
    from test_commands import run, tiny_session

    session = tiny_session()
    run(session, ":train steps=2")
    page = (tmp_path / "r.html")
    run(session, f":report {page}")
    html = page.read_text(encoding="utf-8")
    assert "<h3>training</h3>" in html and "<h3>generation</h3>" in html and "<h3>train</h3>" not in html


def test_ngram_n1_says_no_table_over_zero_characters():
    from minitf_repl.commands.counting import NgramResult, NgramRow, verdict

    rows = [NgramRow(0, 0, 1.0, 4.6, 4.6, None, None, 1), NgramRow(1, 1, 1.0, 3.2, 3.2, None, None, 1)]
    result = NgramResult("pydoc", "character", 103, 100, 100, 10, 10, False, rows, None, 600, 1.29, 1.86, 64, True)
    said = " ".join(verdict(result))
    assert "over the 0 characters" not in said and "it has learned more than how often each character comes" in said


def test_heads_on_a_task_says_the_repeat_mixes_with_the_task():
    """On sort, the repeat's lower loss was called copying from context: the answer positions are the sort skill."""
    from test_commands import run, tiny_session
    from test_render import plain

    session = tiny_session("sort:4")
    run(session, ":train steps=3")
    text = " ".join(plain(run(session, ":heads")).split())
    assert "on sort the repeated tokens are the task's digits" in text, text
    assert "on sort the repeated" not in " ".join(plain(run(session, ":heads 1234=1234")).split())


# --- the session's own review --------------------------------------------------------------------------------------
def test_completion_options_after_dashes_or_the_command_are_text(tmp_path, monkeypatch):
    """`minitf tok -- --install-completion=bash` wrote into ~/.bashrc: its words after `--` are text to tokenize."""
    from test_cli import invoke

    monkeypatch.setenv("HOME", str(tmp_path))
    result = invoke("tok", "--", "--install-completion=bash")
    assert result.exit_code == 0 and "tokens" in result.stdout and not (tmp_path / ".bashrc").exists()
    assert "#compdef" not in invoke("tok", "--", "--show-completion", "zsh").stdout


def test_under_torchrun_a_completion_option_with_equals_is_the_first_processs():
    from typer.testing import CliRunner

    from minitf_repl import cli

    later = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    result = CliRunner().invoke(cli.app, ["--show-completion=fish"], env=later)
    assert result.exit_code == 0 and result.stdout == ""  # printed once a process before


def test_load_model_finds_the_shells_folder_from_the_environment(tmp_path, monkeypatch):
    from minitf_repl import load_model
    from test_cli import invoke

    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "ck"))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")  # a notebook's folder, with no ./checkpoints
    assert invoke("--data", "sort:2", "--set", "n_layers=1", "train", "--steps", "2").exit_code == 0
    model, data = load_model("autosave")  # looked in ./checkpoints, and told "save one under that name first"
    assert data.name == "sort"


@pytest.mark.parametrize("line", [":set norm=rmsnorm lrr", ":set tokenizer=bpe:512 vocab"])
def test_set_a_choice_beside_a_stray_word_is_not_told_to_quote_it(line):
    """`:set norm=rmsnorm lrr` was told `:set norm="rmsnorm lrr"`, which :set refuses: only a folder has spaces."""
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError, match="not both"):
        run(tiny_session("pydoc"), line)


def test_compare_does_not_call_a_contender_that_came_back_blown_up():
    from test_render import plain

    result = compared([outcome("lr=0.01", [4.3, 3.4, 2.8]), outcome("lr=0.05", [9.5, 3.0, 2.5])])
    assert "blew up" not in " ".join(plain(result).split())


def test_patch_tells_its_reading_an_ablation_is_on(monkeypatch):
    from minitf_repl.commands import why
    from test_commands import run, tiny_session

    told = []
    real = why.patch_reading
    monkeypatch.setattr(why, "patch_reading", lambda *a, **k: told.append(a[5] if len(a) > 5 else k.get("ablated"))
                        or real(*a, **k))
    session = tiny_session("sort:4")
    run(session, ":patch 1234= 1235=")
    run(session, ":ablate head=0.1")
    run(session, ":patch 1234= 1235=")
    assert told == [False, True]


def test_step_json_document_gives_a_null_seed_at_temperature_0():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.dispatch import json_document
    from test_commands import run, tiny_session

    doc = json_document(REGISTRY["step"], run(tiny_session(), ":step 3141= temperature=0"))
    assert doc["seed"] is None and doc["schema"] == "minitf.step/6"


def test_score_says_no_position_past_the_counters_reach_beat_it():
    from minitf_repl.commands.inside import ScoreResult, counter_words

    result = ScoreResult.__new__(ScoreResult)
    result.counter, result.counted, result.unit = 3, [True] * 4, "character"
    result.target_probs, result.losses, result.counter_losses = [0.4] * 4, [2.3] * 4, [2.3] * 4
    result.counter_loss, result.loss = 2.3, 2.3
    assert "at no position from t = 2 on (where the model has read more than the counter) did the model" \
        in counter_words(result)


# --- a byte-level BPE end to end (a helper replayed its merges and round trips) -------------------------------------
def bpe_session(tmp_path):
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.session import Session
    from test_commands import run

    path = tmp_path / "text.txt"
    path.write_text("héllo wörld 🐍 the cat sat on the mat. " * 300, encoding="utf-8")
    session = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=32), TrainConfig(),
                      data_spec=str(path), device_name="cpu")
    session.checkpoint_dir = tmp_path / "ck"
    run(session, ":set tokenizer=bpe:270")
    return session


def test_data_gives_a_bpe_corpus_split_as_its_characters_split(tmp_path):
    """`:data` read "91/9" of a text split 90/10 on its characters: the shares were of a BPE's token counts."""
    from test_commands import run
    from test_render import plain

    result = run(bpe_session(tmp_path), ":data")
    chars = len(tmp_path.joinpath("text.txt").read_text(encoding="utf-8"))
    assert result.info.val_chars == chars - int(0.9 * chars)
    assert "(90/10 of its characters:" in " ".join(plain(result).split())


def test_tok_of_a_bpe_counts_tokens_for_characters_and_bytes(tmp_path):
    from test_commands import run
    from test_render import plain

    text = " ".join(plain(run(bpe_session(tmp_path), ":tok 🐍")).split())
    assert "for 1 character (4 bytes)" in text and "subword pieces" not in text, text


def test_gen_says_a_text_that_ends_inside_a_character(tmp_path, monkeypatch):
    from test_commands import run
    from test_render import plain

    from minitf_repl.core import generate

    session = bpe_session(tmp_path)
    first_byte = session.data.tokenizer.encode("🐍")[0]  # one of its byte tokens, alone no character
    monkeypatch.setattr(generate, "generate", lambda *args, **kwargs: (token for token in [first_byte]))
    result = run(session, ":gen the n=1")
    assert result.cut_character and result.text.endswith("\ufffd")
    assert "the text ends inside a character: a byte-level BPE writes one as 1 to 4 byte tokens" \
        in " ".join(plain(result).split())


def test_load_names_a_checkpoints_bpe(tmp_path):
    from test_commands import run
    from test_render import plain

    session = bpe_session(tmp_path)
    run(session, ":train steps=1")
    run(session, ":save b")
    run(session, ":set tokenizer=char")
    loaded = run(session, ":load b")
    assert loaded.tokenizer == "byte-level BPE, 270 tokens" and "tokenizer: byte-level BPE" in plain(loaded)


@pytest.mark.parametrize("line", [":compare lr=0.01 lr=0.010 steps=2", ":compare lr=1e-2 learning_rate=0.01 steps=2"])
def test_compare_refuses_one_contender_spelt_twice(line):
    """`lr=0.01 lr=0.010` trained the same model twice, where `lr=0.01 lr=0.01` was refused."""
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    with pytest.raises(UserError, match="again: one contender trains the same model on the same batches"):
        run(tiny_session("pydoc"), line)


def test_score_gives_bits_per_character_that_compare_across_tokenizers(tmp_path):
    """A learner comparing a char and a BPE model on one text had :score's loss per token alone."""
    import math

    from test_commands import run, tiny_session
    from test_render import plain

    session = bpe_session(tmp_path)
    text = "the cat sat on the mat."
    result = run(session, f":score {text}")
    predicted = len(text) - len(session.data.tokenizer.decode(result.ids[:1]))
    assert math.isclose(result.bits_per_char, sum(result.losses) / math.log(2) / predicted)
    assert f"{result.bits_per_char:.4f} bits per character" in " ".join(plain(result).split())
    char = run(tiny_session("pydoc"), f":score {text}")
    assert math.isclose(char.bits_per_char, char.loss / math.log(2), rel_tol=1e-6)
    assert run(tiny_session("sort:4"), ":score 1234=1234").bits_per_char is None  # a task: answers alone count
