""":compare and :ablate (issue "The variant lab"): what a change buys, and what a part does.

Small models and few steps: the point is the machinery (same seed, same batches, the session
untouched, hooks removed exactly), checked against direct computations.
"""

from __future__ import annotations

import io

import pytest
import torch
from rich.console import Console

from minitf_repl.commands import REGISTRY, AblateResult, CompareResult
from minitf_repl.core.ablation import Ablation, Ablations, parse_ablation
from minitf_repl.core.compare import BAND_WINDOWS, Contender, compare
from minitf_repl.core.context import position_bands, position_losses
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import UserError
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer
from minitf_repl.dispatch import FrontDoor, FrontEnd, run_command
from minitf_repl.parsing import parse_line
from minitf_repl.render import render
from minitf_repl.session import Session

TINY = dict(n_layers=2, d_model=16, n_heads=2, d_ff=32, max_seq_len=12)


def tiny_session(**train) -> Session:
    train = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 2, **train}
    return Session(ModelConfig(**TINY), TrainConfig(**train), data_spec="sort:4", device_name="cpu")


def run(session, line):
    command, args = parse_line(line, REGISTRY)
    return run_command(session, command.name, args)


# --- compare ----------------------------------------------------------------------------------------------
def test_compare_equals_training_each_contender_alone():
    """Same seed, same batches: a contender's curve is exactly what training it alone gives."""
    data = load_data("sort:4")
    train = TrainConfig(batch_size=4, eval_every=3, eval_batches=2, seed=7)
    a = ModelConfig(**TINY, vocab_size=data.tokenizer.vocab_size)
    b = a.replace(activation="relu")
    outcomes = compare([Contender("a", a, train), Contender("b", b, train)], data, steps=6, seeds=[7])
    for config, outcome in zip((a, b), outcomes):
        torch.manual_seed(7)
        model = MiniTransformerLM(config)
        trainer = Trainer(model, data, train.replace(steps=6))
        trainer.run()
        alone = [h["val_loss"] for h in trainer.history if h["val_loss"] is not None]
        assert [e.val_loss for e in outcome.curve] == pytest.approx(alone, abs=1e-6)
        assert [e.step for e in outcome.curve] == [3, 6] and outcome.n_params == model.num_parameters()
        # its loss by position at the end, in bands: :context's on the model trained alone
        labels, means = position_bands(position_losses(model, data, "cpu", BAND_WINDOWS).losses, 12 .bit_length())
        assert outcome.bands == labels and outcome.band_losses == pytest.approx(means, abs=1e-6, nan_ok=True)
    assert outcomes[1].changes == {"activation": "relu"}
    other = compare([Contender("a", a, train), Contender("lr", a, train.replace(lr=1e-3, seed=3))], data, steps=3,
                    seeds=[7])
    assert other[1].changes == {"lr": 1e-3}  # a training setting is a difference too; the seed is the comparison's


def test_compare_reads_each_contender_by_position_in_the_same_bands():
    s = Session(ModelConfig(**{**TINY, "max_seq_len": 32}), TrainConfig(batch_size=4, eval_every=3, eval_batches=2),
                data_spec="pydoc", device_name="cpu")
    result = run(s, ":compare current max_seq_len=8 steps=3 seeds=2")
    long, short = result.outcomes
    assert long.bands == ["0", "1", "2-3", "4-7", "8-15", "16-31"] and short.bands == ["0", "1", "2-3", "4-7"]
    assert len(long.band_losses) == 6 and len(short.band_losses) == 4
    out = io.StringIO()
    render(result, Console(file=out, width=100, color_system=None))
    text = out.getvalue()
    assert "the val loss at the end by position in the window, in bands" in " ".join(text.split())
    row = next(line for line in text.splitlines() if "max_seq_len=8" in line and line.rstrip().endswith("-"))
    assert row.split()[-2:] == ["-", "-"]  # no positions 8-15 nor 16-31 in a window of 8


def test_compare_with_seeds_gives_mean_and_spread():
    data = load_data("sort:4")
    train = TrainConfig(batch_size=4, eval_every=2, eval_batches=2)
    a = ModelConfig(**TINY, vocab_size=data.tokenizer.vocab_size)
    (outcome,) = compare([Contender("a", a, train)], data, steps=2, seeds=[1, 2, 3])
    alone = []
    for seed in (1, 2, 3):
        torch.manual_seed(seed)
        trainer = Trainer(MiniTransformerLM(a), data, train.replace(seed=seed, steps=2))
        trainer.run()
        alone.append(trainer.history[-1]["val_loss"])
    e = outcome.final
    assert e.val_loss == pytest.approx(sum(alone) / 3, abs=1e-6)
    assert e.spread == pytest.approx(torch.tensor(alone).std().item(), abs=1e-6)


def test_compare_reports_every_training_step_and_its_bar_shows_an_eta():
    """The bar moved only at evaluations: Rich had too few samples for a speed, so no ETA."""
    from rich.progress import TimeRemainingColumn

    from minitf_repl.render import RichReporter

    data = load_data("sort:4")
    train = TrainConfig(batch_size=4, eval_every=3, eval_batches=1)
    a = ModelConfig(**TINY, vocab_size=data.tokenizer.vocab_size)
    steps = []
    compare([Contender("a", a, train), Contender("b", a.replace(n_layers=1), train)], data, steps=3, seeds=[1, 2],
            on_step=lambda done, total: steps.append((done, total)))
    assert steps == [(i, 12) for i in range(1, 13)]  # 2 contenders x 2 seeds x 3 steps

    now = [0.0]
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None, get_time=lambda: now[0])
    reporter = RichReporter(console, live=True)
    reporter.on_compare_start(["a", "b"], 300, 1)
    for done in range(1, 11):  # ten steps, a second each, before the first evaluation
        now[0] += 1.0
        reporter.on_compare_step(done, 600)
    task = reporter._progress.tasks[0]
    assert task.completed == 10 and task.total == 600
    assert str(TimeRemainingColumn().render(task)) == "0:09:50"  # 590 steps left at 1 step/s
    reporter.close()


def test_compare_command_leaves_the_session_alone():
    s = tiny_session()
    run(s, ":train steps=3")
    weights = {k: v.clone() for k, v in s.model.state_dict().items()}
    step, rng = s.trainer.step, torch.get_rng_state()
    result = run(s, ":compare current n_layers=1 steps=4 eval_every=2")
    assert isinstance(result, CompareResult) and [o.label for o in result.outcomes] == ["current", "n_layers=1"]
    assert [e.step for e in result.outcomes[0].curve] == [2, 4] and not result.stopped
    assert s.trainer.step == step and torch.equal(torch.get_rng_state(), rng)
    assert all(torch.equal(v, weights[k]) for k, v in s.model.state_dict().items())


def test_compare_contender_forms_and_errors():
    s = tiny_session()
    result = run(s, ":compare n_layers=1,d_ff=16 vs current vs activation=relu steps=2")
    assert [o.label for o in result.outcomes] == ["n_layers=1,d_ff=16", "current", "activation=relu"]
    assert result.outcomes[1].changes == {"n_layers": 2, "d_ff": 32}  # differences from the first contender
    for line, message in [
        (":compare current", "at least two contenders"),
        (":compare current n_layers=abc", "n_layers must be a whole number"),
        (":compare current wibble=3", "'wibble' in contender 'wibble=3' is no setting"),
        (":compare current temperature=0.5", "temperature is a generation setting"),
        (":compare current vocab_size=3", "vocab_size comes from"),
        (":compare current preset=nonesuch", "preset must be one of seed, gpt2, llama, modern"),
        (":compare current d_model=30,n_heads=4", "divisible"),
        (":compare " + " ".join(f"n_layers={i}" for i in range(1, 9)), "at most 6"),
    ]:
        with pytest.raises(UserError, match=message):
            run(s, line)


def test_compare_renders_a_table_a_chart_and_a_verdict():
    s = tiny_session()
    out = Console(file=io.StringIO(), width=100, color_system=None)
    door = FrontDoor(s, out, front=FrontEnd(live=False))
    assert door.run_line(":compare current activation=relu steps=2 eval_every=1 seeds=2") == "ok"
    text = out.file.getvalue()
    assert "mean ± std over 2 seeds" in text and "● current" in text and "▲ activation=relu" in text
    assert "└" in text and "step 1" in text  # the chart's axis (the one chart of render.chart: "step 1 ... 2")
    assert "has the lowest val loss" in text


# --- ablate -------------------------------------------------------------------------------------------------
def small_model(**changes):
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**TINY, "vocab_size": 11, **changes})).eval()


def idx():
    return torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_zeroing_a_head_equals_zeroing_its_slice_of_the_output_projection(attention):
    model = small_model(attention=attention)
    reference = small_model(attention=attention)
    with torch.no_grad():  # head 1 of block 0 feeds columns head_dim..2*head_dim of W^O: zero them
        reference.blocks[0].attn.out_proj.weight[:, 8:16] = 0
    ablations = Ablations(model)
    ablations.add(Ablation("head", 0, 1))
    with torch.no_grad():
        torch.testing.assert_close(model(idx())[0], reference(idx())[0], atol=1e-5, rtol=0)
    ablations.clear()
    with torch.no_grad():
        torch.testing.assert_close(model(idx())[0], small_model(attention=attention)(idx())[0])
    assert all(not m._forward_hooks for m in model.modules())


def test_skipping_a_block_equals_a_model_without_it():
    model = small_model()
    shorter = small_model()
    shorter.blocks = torch.nn.ModuleList([shorter.blocks[0]])
    ablations = Ablations(model)
    ablations.add(Ablation("block", 1))
    with torch.no_grad():
        torch.testing.assert_close(model(idx())[0], shorter(idx())[0])


@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_dropping_the_mask_lets_the_past_see_the_future(attention):
    model = small_model(attention=attention)
    changed = idx().clone()
    changed[:, 5] = (changed[:, 5] + 1) % 11
    ablations = Ablations(model)
    ablations.add(Ablation("mask"))
    with torch.no_grad():
        assert not torch.allclose(model(idx())[0][:, :5], model(changed)[0][:, :5])  # position < 5 saw position 5
    ablations.clear()
    with torch.no_grad():
        torch.testing.assert_close(model(idx())[0][:, :5], model(changed)[0][:, :5])  # causal again
    assert all(m.use_sdpa == (attention == "sdpa") for m in model.modules() if hasattr(m, "use_sdpa"))


@pytest.mark.parametrize("pos_encoding", ["learned", "sinusoidal", "rope"])
def test_dropping_positions_makes_the_model_blind_to_order(pos_encoding):
    model = small_model(n_layers=1, pos_encoding=pos_encoding)  # one layer: the last position sees a set of keys
    with torch.no_grad():
        assert not torch.allclose(model(torch.tensor([[1, 2, 3, 4]]))[0][:, -1],
                                  model(torch.tensor([[3, 1, 2, 4]]))[0][:, -1])  # with positions, order matters
    ablations = Ablations(model)
    ablations.add(Ablation("positions"))
    x = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        # Without positions a causal model's last position sees a set, not a sequence: order is lost.
        torch.testing.assert_close(model(x)[0][:, -1], model(torch.tensor([[3, 1, 2, 4]]))[0][:, -1])


def test_parse_ablation():
    assert parse_ablation("head=1.0", 2, 2) == Ablation("head", 1, 0)
    assert parse_ablation("block=1", 2, 2) == Ablation("block", 1)
    assert parse_ablation(" mask ", 2, 2) == Ablation("mask")
    for text, message in [("head=2.0", "block of head=L.H must be in 0..1"), ("head=0.5", "head must be in 0..1"),
                          ("head=x", "BLOCK.HEAD"), ("block=9", "block must be in"), ("ffn", "cannot ablate")]:
        with pytest.raises(UserError, match=message):
            parse_ablation(text, 2, 2)


def test_ablate_command_reports_and_undoes():
    s = tiny_session()
    run(s, ":train steps=3")
    weights = {k: v.clone() for k, v in s.model.state_dict().items()}
    result = run(s, ":ablate block=0")
    assert isinstance(result, AblateResult) and result.active == ["block 0"]
    assert result.val_loss_after != result.val_loss_before
    assert run(s, ":ablate head=1.1").active == ["head 1.1", "block 0"]  # they stack, listed by kind and index
    with pytest.raises(UserError, match="switched off"):
        run(s, ":train steps=1")
    off = run(s, ":ablate off")
    assert off.active == [] and off.val_loss_after == off.val_loss_before == result.val_loss_before
    assert all(torch.equal(v, weights[k]) for k, v in s.model.state_dict().items())
    assert all(not m._forward_hooks for m in s.model.modules())
    out = Console(file=io.StringIO(), width=80, color_system=None)
    render(result, out)
    assert "switched off: block 0" in out.file.getvalue() and "val loss" in out.file.getvalue()


# --- presets and experts through the shell -------------------------------------------------------------------
def test_set_preset_applies_the_architecture_and_keeps_sizes():
    from minitf_repl.core.config import PRESETS, matching_preset

    s = tiny_session()
    result = run(s, ":set preset=llama")
    assert result.preset == "llama" and matching_preset(s.model_config) == "llama"
    assert s.model_config.n_layers == TINY["n_layers"] and s.model_config.n_kv_heads == 1  # 2 heads / group 2
    assert result.changed["activation"] == ("gelu", "swiglu")
    assert run(s, ":config").preset == "llama"
    assert run(s, ":set preset=modern n_layers=1").preset == "modern" and s.model_config.n_layers == 1
    run(s, ":set qk_norm=off")
    assert run(s, ":config").preset is None
    with pytest.raises(UserError, match="preset must be one of"):
        run(s, ":set preset=gpt5")
    assert set(PRESETS) == {"seed", "gpt2", "llama", "modern"}


def test_experts_show_their_aux_loss_and_load():
    s = tiny_session()
    run(s, ":set n_experts=3 experts_per_token=2")
    result = run(s, ":train steps=3")
    assert all(row["aux_loss"] is not None for row in s.trainer.history)
    out = Console(file=io.StringIO(), width=120, color_system=None)
    render(result, out)
    assert "aux loss" in out.file.getvalue()
    experts = run(s, ":experts")
    assert len(experts.load) == TINY["n_layers"] and all(len(row) == 3 for row in experts.load)
    assert all(abs(sum(row) - 1) < 1e-6 for row in experts.load)
    x, _ = s.data.get_batch("val", 4, TINY["max_seq_len"], torch.Generator().manual_seed(0))
    assert all(sum(row) == x.numel() * 2 for row in experts.tokens)  # every token routed to 2 experts
    with pytest.raises(UserError, match="no experts"):
        run(tiny_session(), ":experts")


def test_params_shows_what_grouped_heads_save_in_the_kv_cache():
    s = tiny_session()
    mha = run(s, ":params").kv_cache
    assert mha["kv_heads"] == 2 and mha["bytes_per_token"] == 2 * TINY["n_layers"] * 2 * 8 * 4  # K,V x L x heads x d_k x fp32
    run(s, ":set n_kv_heads=1")
    mqa = run(s, ":params").kv_cache
    assert mqa["bytes_per_token"] * 2 == mha["bytes_per_token"] == mqa["mha_bytes_per_token"]
    assert mqa["window_bytes"] == mqa["bytes_per_token"] * TINY["max_seq_len"]
    out = Console(file=io.StringIO(), width=100, color_system=None)
    render(run(s, ":params"), out)
    assert "KV cache, sampling" in out.file.getvalue() and "(2x)" in out.file.getvalue()


def test_changing_the_attention_path_under_an_ablation_keeps_both():
    s = tiny_session()
    attention = [m for m in s.model.modules() if hasattr(m, "use_sdpa")]
    run(s, ":set attention=sdpa")
    run(s, ":ablate mask")
    assert all(m.use_sdpa and not m.causal for m in attention)  # the fused kernel runs without its mask as well
    run(s, ":set attention=explicit dropout=0.1")
    assert s.ablations and s.model.config.attention == "explicit"
    assert not any(m.use_sdpa or m.causal for m in attention)  # the new path, still without the mask
    run(s, ":ablate off")
    assert all(m.causal and not m.use_sdpa for m in attention)  # the user's choice, kept
