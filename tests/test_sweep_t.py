"""What a user's-eye sweep of the numbers-and-hardware commands (:lrfind, :muon, :params, :config, :quantize,
:device, :step) found: each test failed before its fix.

`:lrfind low=1e-9 high=1e-8` never read a rate near the session's 0.01, yet told the user their rate was 'past the
lowest point ... where one step of the test already turned the loss back up' and offered to compare it with 5.6e-10; a
curve with no steepest point read 'the smoothed loss lowest at 0.5'. `:muon` on an 8 x 8 matrix (d_model=8) compared
the share of |u|^2, |O|^2 and AdamW's update in their 10 largest directions, which are all 8: 100% each, an orthogonal
matrix's too. `:params` on a mixture of experts gave the 6N rule with N = every expert's parameters, where a token
runs only experts_per_token of them. `:config` showed the shell's autosave setting, never its threads setting.
`:quantize int8`'s "same greedy tokens" counted the positions where two texts that had parted long before happened to
hold the same token. `:params` at 40 columns stood its costs' explanations a word a line and cut its kinds short, and
`:params all=on` folded every tensor's name mid-word. `:step` at 40 columns cut every number to '0.1…' and `:quantize
int8` its row names. `:params` on a task counted each step at the whole window where a row is the question and its
answer; a compiled one-step `:train` on a task counted its tokens at the window too; and under Muon the ledger's
'matrix products' left out Newton-Schulz's. `:ngram` on random tokens said the counted text's loss kept falling where
every counter's read the uniform guess's; `:muon` in an AdamW session worked Muon's step out at AdamW's rate, not the
one `:set optimizer=muon` brings. `:device` on a task measured the attention kernel at the window, not the rows
training runs; `:lrfind` drew a one-point chart of a test that rose from its first steps, and said a rate below the
steepest point sat between it and the lowest.
"""

import pytest

from minitf_repl.commands.rates import LrfindResult, where
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.lrfind import LrRange
from minitf_repl.session import Session
from test_commands import run
from test_render import plain


def curve(lr: float, rates: list[float], smoothed: list[float], steepest=None, blown=None) -> LrfindResult:
    k = smoothed.index(min(smoothed))
    test = LrRange("muon", rates, smoothed, smoothed, steepest, rates[k], smoothed[k], blown, rates[0], rates[-1],
                   len(rates))
    return LrfindResult(test, "text", lr, 1337)


# --- :lrfind: a rate the test never reached --------------------------------------------------------------------
def test_lrfind_says_a_rate_past_the_tests_last_rate_was_never_read():
    rates = [1e-9 * 10 ** (k / 9) for k in range(10)]  # 1e-9 .. 1e-8: far below lr 0.01
    smoothed = [4.61, 4.609, 4.608, 4.6085, 4.609, 4.6088, 4.6089, 4.609, 4.6095, 4.6091]  # noise, lowest at 3rd
    said = where(curve(0.01, rates, smoothed))
    assert "past the lowest point" not in said and "lr=5.6e-10" not in said
    assert "lies past the test's last rate (1e-08)" in said and ":lrfind low=1e-09 high=1" in said


def test_lrfind_without_a_steepest_point_still_says_the_loss_is_lowest():
    rates = [0.5 * 4 ** (k / 9) for k in range(10)]
    smoothed = [4.619, 4.7, 4.9, 5.2, 5.8, 6.5, 7.0, 8.0, 9.0, 12.0]
    text = plain(curve(0.01, rates, smoothed, blown=rates[-1]))
    assert "the smoothed loss is lowest at 0.5 (4.619)" in text


# --- :muon on a small matrix -----------------------------------------------------------------------------------
def test_muon_on_a_small_matrix_compares_shares_that_can_differ():
    """An 8 x 8 matrix's 10 largest directions are all of them: every share read 100%, an orthogonal matrix's
    too, and the comparison Muon's view rests on said nothing."""
    s = Session(ModelConfig(n_layers=1, d_model=8, n_heads=1, d_ff=16, max_seq_len=16), TrainConfig(batch_size=2),
                data_spec="sort:4", device_name="cpu")
    result = run(s, ":muon")
    m = result.step
    assert m.top == 4 and m.orthogonal_share == 0.5
    assert m.u_top_share < 1 and m.o_top_share < 1
    assert "its 4 largest directions carry" in plain(result) and "(an orthogonal matrix: 50%)" in plain(result)


# --- :params: the 6N rule of a mixture of experts ---------------------------------------------------------------
def test_params_6n_rule_of_a_mixture_of_experts_counts_the_parameters_a_token_runs_through():
    """With 4 experts of which a token runs 2, the 6N line counted all 4 (14.73 GFLOP against the ledger's 8.55 for
    the default model): the rule's N is the parameters a token's forward pass multiplies by."""
    from minitf_repl.core.ledger import cost_ledger
    from minitf_repl.core.model import MiniTransformerLM

    config = ModelConfig(vocab_size=40, n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=8, n_experts=4,
                         experts_per_token=2)
    model = MiniTransformerLM(config)
    expert = sum(p.numel() for p in model.blocks[0].ffn.experts[0].parameters())
    table = model.position_embedding.weight.numel()  # a lookup: no product multiplies by it, so not in N either
    active = sum(p.numel() for p in model.parameters()) - 2 * (4 - 2) * expert - table  # two layers, two idle each
    ledger = cost_ledger(model, batch_size=2)
    assert ledger.six_n_params == active < ledger.n_params
    assert ledger.six_n_flops_per_step == 6 * active * 2 * 8
    dense = cost_ledger(MiniTransformerLM(config.replace(n_experts=0)), batch_size=2)
    assert dense.six_n_params == dense.n_params - table  # without experts every parameter but the table is run
    s = Session(config, TrainConfig(batch_size=2), data_spec="sort:4", device_name="cpu")
    result = run(s, ":params")
    n = result.ledger["n_params"]
    assert result.ledger["six_n_params"] == n - 2 * (4 - 2) * expert - table
    assert (f"6N rule, N = {n - 4 * expert - table:,}: the {n:,} parameters less the {table:,} a token only looks "
            "up and the experts it is not routed to") in plain(result, 120)
    no_experts = Session(config.replace(n_experts=0), TrainConfig(batch_size=2), data_spec="sort:4", device_name="cpu")
    assert "the experts it is not routed to" not in plain(run(no_experts, ":params"), 120)


# --- :config: every shell setting ---------------------------------------------------------------------------------
def test_config_shows_the_threads_setting_as_it_shows_autosave():
    """`:set threads=3` then `:config`: the shell's other setting (autosave) was on its last line, threads nowhere."""
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), data_spec="sort:4")
    assert "threads 0 (auto)" in plain(run(s, ":config"))
    run(s, ":set threads=3")
    result = run(s, ":config")
    assert result.threads == 3 and "threads 3" in plain(result) and "threads 3 (auto)" not in plain(result)


# --- :quantize: how many greedy tokens the copy shares ------------------------------------------------------------
def test_quantize_counts_the_greedy_tokens_alike_up_to_the_first_that_differs(monkeypatch):
    """Counted position by position, two greedy texts that parted at token 3 still 'shared' every later token that
    happened to fall on the same position, though each continued a different text by then."""
    import copy

    from minitf_repl.core import quantize

    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), TrainConfig(batch_size=2,
                eval_batches=1), data_spec="sort:4", device_name="cpu")
    other = copy.deepcopy(s.model)
    texts = {id(s.model): [5, 6, 7, 1, 2, 3, 4, 8], id(other): [5, 6, 7, 2, 2, 3, 4, 8]}  # parted at the 4th token
    monkeypatch.setattr(quantize, "generate", lambda model, prompt, config: iter(texts[id(model)][: config.n]))
    m = quantize.measure(s.model, other, s.trainer, [1, 2], n_tokens=8, repeats=1)
    assert m.same_tokens == 3
    from minitf_repl.commands.speed import QuantizeResult

    text = plain(QuantizeResult("int8", True, m))
    assert "3/8" in text and "the int8 copy's greedy text parts from the float model's at token 4 of 8" in text


# --- :params at 40 columns ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [":params", ":params all=on"])
@pytest.mark.parametrize("variant", [{}, {"n_experts": 2}])
def test_params_at_40_columns_splits_no_word(line, variant):
    """At 40 columns the ledger's 'how' column stood one word a line ('matmuls:' over '2.65' over 'MFLOP in'), its
    kinds were cut ('Embeddi…', 'MultiHe…') and all=on folded every tensor's name ('token_embe' over
    'dding.weig')."""
    from minitf_repl import render as R
    from test_wrapping import broken_tokens, rendered

    s = Session(ModelConfig(n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=16, **variant),
                TrainConfig(batch_size=2), data_spec="sort:4", device_name="cpu")
    result = run(s, line)
    assert broken_tokens(lambda console: R.render(result, console), 40) == set()
    text = rendered(lambda console: R.render(result, console), 40)
    assert max(len(row) for row in text.splitlines()) <= 40
    words = text.split()
    if result.show_all:  # each module's name over its tensors
        assert "blocks.0.attn.q_proj" in words and "  weight  (16, 16)         256" in text.splitlines()
    else:
        assert "matmuls:" in words
    if not result.show_all:  # every line of the costs, a row each, and a few words a line
        lines = text.splitlines()
        how = [row for row in lines[lines.index("compute and memory") + 1:] if row.strip()]
        assert len(how) < 45  # before: 90, a word or two a line (40 once the fast path's copies were said)


# --- :step and :quantize int8 at 40 columns -----------------------------------------------------------------------
@pytest.mark.parametrize("line", [":step", ":step 12 top_k=3 top_p=0.9", ":step temperature=0", ":quantize int8"])
def test_step_and_quantize_at_40_columns_cut_no_number(line, monkeypatch):
    """At 40 columns :step cut every number to '0.1…' and '-0.…' (the logits, the scaled logits, the probabilities)
    and :quantize int8 cut its row names to 'tokens…' and 'accura…'."""
    from minitf_repl import render as R
    from minitf_repl.commands import speed
    from test_wrapping import broken_tokens, rendered

    monkeypatch.setattr(speed, "QUANTIZE_TOKENS", 8)
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), TrainConfig(batch_size=2,
                eval_batches=1), data_spec="sort:4", device_name="cpu")
    result = run(s, line)
    text = rendered(lambda console: R.render(result, console), 40)
    assert "…" not in text and max(len(row) for row in text.splitlines()) <= 40
    assert broken_tokens(lambda console: R.render(result, console), 40) == set()
    if line.startswith(":step"):
        picked = next(r for r in result.rows if r.picked)
        assert f"{picked.prob:.3f}" in text.split()  # the probabilities, whole


# --- :params on a task: the rows training takes ---------------------------------------------------------------------
def test_params_on_a_task_counts_the_rows_training_takes_not_the_window():
    """sort:4 trains on rows of 8 tokens (the question and its answer) in a window of 32: the ledger counted every
    step's FLOPs and activations at 4 x 32 tokens, four times what a step computes and keeps."""
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=32), TrainConfig(batch_size=4),
                data_spec="sort:4", device_name="cpu")
    x, _ = s.data.get_batch("train", 4, 32, s.trainer.generator)
    T = x.shape[1]
    assert T < 32
    result = run(s, ":params")
    ledger = result.ledger
    assert ledger["seq_len"] == T and ledger["forward_flops_per_step"] == ledger["forward_flops_per_token"] * 4 * T
    text = plain(result, 120)
    assert f"3 x forward x 4x{T} tokens" in text and f"at batch 4 x {T}" in text
    assert f"a training row of sort:4 is {T} tokens, the window 32" in text
    corpus = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=32), TrainConfig(batch_size=4),
                     data_spec="pydoc", device_name="cpu")
    assert run(corpus, ":params").ledger["seq_len"] == 32  # a text's rows fill the window


# --- :train's speed of a one-step compiled run on a task -------------------------------------------------------------
def test_a_compiled_runs_only_step_counts_the_tokens_it_trained_on(monkeypatch):
    """A `:train steps=1` with compile=on (only the compiling step ran) gave its tokens/s as batch x max_seq_len over
    the step's time: on sort:4 (rows of 8 tokens in a window of 32) four times the tokens it trained on."""
    from minitf_repl.core import train as core_train

    # "compiled": a wrapper of the same module, no compiler run
    monkeypatch.setattr(core_train, "compile_module", lambda module: (lambda *a, **k: module(*a, **k), None))
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=32), TrainConfig(batch_size=4,
                eval_batches=1, compile=True), data_spec="sort:4", device_name="cpu")
    T = s.data.get_batch("train", 1, 32, s.trainer.generator)[0].shape[1]
    result = run(s, ":train steps=1")
    assert result.compile_seconds is not None
    assert result.tokens_per_second == pytest.approx(4 * T / result.compile_seconds)


# --- :params: Muon's own products ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bf16_units", [True, False])  # bfloat16 steps, or float32 (wide ones on Gram matrices)
@pytest.mark.parametrize("variant", [{}, {"d_ff": 128}, {"activation": "swiglu", "n_kv_heads": 1}])
def test_params_counts_muons_newton_schulz_products_as_flop_counter_measures_them(variant, bf16_units, monkeypatch):
    """With optimizer=muon every step orthogonalises each block matrix by five Newton-Schulz steps of matrix
    products, about half as many FLOPs again as the forward and backward of the default model at batch 16, which
    the ledger, counting 'matrix products', left out."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from minitf_repl.core.ledger import cost_ledger
    from minitf_repl.core.model import MiniTransformerLM
    from minitf_repl.core import precision
    from minitf_repl.core.optimizers import make_optimizer

    monkeypatch.setattr(precision, "native_bf16", lambda device: bf16_units)
    config = ModelConfig(**{**dict(vocab_size=20, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_seq_len=8),
                            **variant})
    model = MiniTransformerLM(config)
    optimizer = make_optimizer(model, TrainConfig(optimizer="muon"))
    x = torch.randint(0, 20, (2, 8))
    model(x, x)[1].backward()
    with FlopCounterMode(display=False) as counter:
        optimizer.step()
    ledger = cost_ledger(model, batch_size=2, optimizer="muon")
    assert ledger.optimizer_flops_per_step == counter.get_total_flops() > 0
    assert cost_ledger(model, batch_size=2, optimizer="adamw").optimizer_flops_per_step == 0
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), TrainConfig(batch_size=2),
                data_spec="sort:4", device_name="cpu")
    text = plain(run(s, ":params"), 120)
    assert "Muon, per step" in text
    assert "Newton-Schulz's products on each of the blocks' 6 matrices, whatever the batch" in text


# --- :ngram on data no context predicts ------------------------------------------------------------------------------
def test_ngram_on_random_tokens_does_not_say_the_counted_texts_loss_keeps_falling():
    """On random:5 every counter's train loss read 1.609, as the uniform guess's; :ngram still said 'past n = 0 a
    longer context costs on val (1.610 at n = 3) while the counted text's loss keeps falling (1.609)'."""
    from minitf_repl.commands.counting import NgramResult, NgramRow, explanation

    rows = [NgramRow(0, 0, 1.0, 1.6094, 1.6094, None, None), NgramRow(1, 1, 1.0, 1.6093, 1.6095, None, None),
            NgramRow(2, 5, 1.0, 1.6092, 1.6096, None, None), NgramRow(3, 25, 0.98, 1.6089, 1.6101, None, None)]
    result = NgramResult("random:5", "token", 5, 262_144, 262_144, 4096, 4096, True, rows, None, 0, 1.643, None, 64,
                         True)
    said = " ".join(explanation(result))
    assert "keeps falling" not in said and "past n = 0" not in said
    assert "no counter beats the uniform guess by much" in said


# --- :muon in an AdamW session ------------------------------------------------------------------------------------
def test_muon_in_an_adamw_session_shows_the_step_the_switch_to_muon_would_take():
    """After :set optimizer=adamw (lr 0.006, AdamW's recipe on pydoc) :muon worked the step out at lr 0.006 and said
    ':set optimizer=muon makes Muon take these steps', though that switch brings Muon's recipe back: lr 0.01."""
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), TrainConfig(batch_size=2),
                data_spec="pydoc", device_name="cpu")
    run(s, ":set optimizer=adamw")
    assert s.train_config.lr == 0.006
    result = run(s, ":muon")
    assert result.step.lr == 0.01
    assert ":set optimizer=muon makes Muon take these steps" in plain(result)
    run(s, ":set lr=0.003")  # set by hand: the switch keeps it, and so does the step shown
    assert run(s, ":muon").step.lr == 0.003


# --- :lrfind's chart of a test that rose from its first step -------------------------------------------------------
def test_lrfind_draws_a_curve_that_rose_from_its_first_step():
    """`:lrfind low=1 high=1000` blew up at its third step: the chart, cut where the loss first passes where it
    started, drew one point between axis labels that both read 1e+00."""
    from test_render import text_of

    rates = [1.0, 1.87, 3.51]
    text = text_of(curve(0.006, rates, [4.619, 10.05, 15.12], blown=3.51), 100)
    assert "lr 1e+00" in text and "4e+00" in text
    assert text.count("•") >= 2 + 1  # the two points past the lowest (■ marks the first) and the legend's


# --- :device's attention kernel at the shape training runs ---------------------------------------------------------
def test_device_measures_the_attention_kernel_at_the_rows_training_takes(monkeypatch):
    """On sort:4 (rows of 8 tokens) :device said what a bfloat16 step's attention runs in 'at batch 16 x 4 heads x 64
    positions', the window, where every training step's attention is 8 positions long and decided at that shape."""
    from minitf_repl.commands import speed
    from minitf_repl.core import fastpath

    asked = []
    monkeypatch.setattr(fastpath, "attention_dtype_at", lambda *shape: (asked.append(shape), ("float32", 0.5))[1])
    monkeypatch.setattr(speed, "_train_dtype", speed._train_dtype)  # the real one, which asks attention_dtype_at
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=32), TrainConfig(batch_size=4,
                dtype="bfloat16"), data_spec="sort:4", device_name="cpu")
    T = s.data.get_batch("train", 1, 32, s.trainer.generator)[0].shape[1]
    result = run(s, ":device")
    assert result.cpu_attention_shape == [4, 2, 2, T, 8] and asked == [(4, 2, 2, T, 8)]


# --- :lrfind: a rate just below the steepest point -------------------------------------------------------------------
def test_lrfind_does_not_say_a_rate_below_the_steepest_point_sits_between_it_and_the_lowest():
    """lr 0.01 against a steepest fall at 0.015 and a lowest point at 0.12 'sits between where the loss falls
    fastest and where it is lowest', said :lrfind on a mixture of experts, though 0.01 is below both."""
    rates = [1e-5 * 10 ** (k / 2) for k in range(11)]  # 1e-5 .. 1
    smoothed = [4.6, 4.6, 4.59, 4.58, 4.5, 4.4, 4.2, 4.1, 4.3, 5.0, 6.0]
    said = where(curve(0.01, rates, smoothed, steepest=0.015))
    assert "sits between" not in said
    assert "just below where the loss falls fastest (0.015)" in said and "where a run's peak rate belongs" in said
    assert "sits between" in where(curve(0.03, rates, smoothed, steepest=0.015))  # between them, as before


# --- :quantize int8 times decoding as :gen decodes -----------------------------------------------------------------
def test_quantize_times_decoding_with_the_cache_setting_gen_uses(monkeypatch):
    """With :set cache=off (every token recomputes the prefix) :quantize int8 still timed both models with the KV
    cache on, so its tokens/s was not the speed :gen samples at in this session."""
    from minitf_repl.commands import speed
    from minitf_repl.core import quantize

    seen = []
    real = quantize.generate
    monkeypatch.setattr(quantize, "generate", lambda model, prompt, config: (seen.append(config.cache),
                                                                             real(model, prompt, config))[1])
    monkeypatch.setattr(speed, "QUANTIZE_TOKENS", 4)
    s = Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), TrainConfig(batch_size=2,
                eval_batches=1), data_spec="sort:4", device_name="cpu")
    run(s, ":set cache=off")
    result = run(s, ":quantize int8")
    assert seen and not any(seen) and result.measure.cache is False
    assert "tokens/s (4, greedy, cache off)" in plain(result)
