"""ffn=on|off (blocks of attention alone), qk_norm with norm=none refused, and the seed's help naming dtype."""

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig, matching_preset, preset_changes, rebuilding_changes
from minitf_repl.core.errors import ConfigError, UserError
from minitf_repl.core.fastpath import FastPath
from minitf_repl.core.hf import export_type
from minitf_repl.core.inside import feed_forward_neurons, norm_worked, residual_stream
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.sizes import parameter_count, training_bytes
from minitf_repl.core.attribution import direct_logit_attribution
from minitf_repl.core.ablation import Ablation, Ablations

from test_commands import run, tiny_session
from test_render import plain

SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=4, n_layers=2, d_ff=48)
IDS = [1, 2, 3, 4, 5, 6]


def model_for(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**SIZES, **changes)).eval()


# --- 1. ffn=off builds blocks of attention alone ------------------------------------------------------------------
@pytest.mark.parametrize("changes", [{}, {"norm_placement": "post"}, {"residual": False}])
def test_ffn_off_blocks_are_attention_alone_on_both_paths(changes):
    model = model_for(ffn=False, **changes)
    assert all(block.ffn is None and block.ln_2 is None for block in model.blocks)
    assert parameter_count(model.config) == model.num_parameters()
    idx = torch.tensor([IDS])
    h = model.hook_embed(model.token_embedding(idx) + model.position_embedding(torch.arange(len(IDS))))
    for block in model.blocks:  # each block is its attention half and nothing after it
        h = block.ln_1(block.add(h, block.attn(h))) if block.post_norm else block.add(h, block.attn(block.ln_1(h)))
    with torch.no_grad():
        logits, _ = model(idx)
        torch.testing.assert_close(logits, model.lm_head(model.ln_f(h)))
        torch.testing.assert_close(FastPath(model)(idx)[0], logits, atol=1e-5, rtol=1e-5)


def test_ffn_off_memory_estimate_counts_no_hidden_layer():
    on, off = ModelConfig(**SIZES), ModelConfig(**SIZES, ffn=False)
    # no FFN's hidden layer, no ln_2: fewer weights and fewer floats kept per token and layer
    saved = 16 * (parameter_count(on) - parameter_count(off)) + 4 * 4 * 16 * 2 * (2 * 32 + 2 * 48)
    assert training_bytes(on, 4) - training_bytes(off, 4) == saved


def test_ffn_off_leaves_d_ff_and_activation_unread_and_matches_no_preset():
    off = ModelConfig(**SIZES, ffn=False)
    assert {"d_ff", "activation", "n_experts"} <= set(off.unread())
    assert rebuilding_changes(off, off.replace(d_ff=96, activation="relu")) == []  # they build nothing to rebuild
    assert not off.replace(n_experts=3).is_moe  # no FFN, no experts
    assert matching_preset(off) is None and preset_changes("seed")["ffn"] is True


def test_ffn_off_views_say_there_is_none():
    model = model_for(ffn=False)
    stream = residual_stream(model, IDS)
    assert not stream.ffn and [w.part for w in stream.writes] == ["attn", "attn"]
    with pytest.raises(UserError, match="no feed-forward network: this model was built with ffn=off"):
        feed_forward_neurons(model, IDS)
    with pytest.raises(UserError, match="has no ln_2: with ffn=off"):
        norm_worked(model, IDS, which="ln_2")
    parts = direct_logit_attribution(model, IDS).parts
    assert parts and not any(p.kind == "ffn" for p in parts)
    Ablations(model).add(Ablation("block", 0))  # hooked no FFN it does not have


def test_ffn_off_commands_say_there_is_none_with_the_fix():
    session = tiny_session()
    run(session, ":set ffn=off")
    with pytest.raises(UserError, match=r"ffn=off built its blocks of attention alone; :set ffn=on builds"):
        run(session, ":ffn 12+34")
    with pytest.raises(UserError, match=r"this model has no experts: ffn=off .*:set ffn=on"):
        run(session, ":experts")
    shapes = plain(run(session, ":shapes 12+34"))
    assert "ffn=off: no FFN in any block (:set ffn=on" in shapes and "which the FFN's half reads" not in shapes
    resid = plain(run(session, ":resid 12+34"))
    assert "for f = attention:" in resid and ":set ffn=on builds blocks with the FFN" in resid
    assert "which=ln_1" in resid and "which=ln_2" not in resid
    assert "ln_2" not in plain(run(session, ":params"))


def test_ffn_off_is_saved_and_an_older_checkpoint_loads_as_on(tmp_path):
    session = tiny_session()
    run(session, f":set ffn=off checkpoint_dir={tmp_path}")
    run(session, ":train steps=2")
    run(session, ":save off")
    again = tiny_session()
    run(again, f":set checkpoint_dir={tmp_path}")
    run(again, ":load off")
    assert again.model_config.ffn is False and again.model.blocks[0].ffn is None
    old = ModelConfig(**SIZES).to_dict()
    del old["ffn"]  # a checkpoint written before the setting
    assert ModelConfig.from_dict(old).ffn is True


def test_ffn_off_is_refused_by_the_hf_export_with_the_fix():
    with pytest.raises(ConfigError, match="ffn=off has no equivalent in GPT-2") as e:
        export_type(ModelConfig(**SIZES, ffn=False))
    assert e.value.fix == {"ffn": True}


# --- 2. norm=none's help, and qk_norm=on with it refused ---------------------------------------------------------
def test_norm_help_names_none_and_qk_norm_without_a_norm_is_refused():
    assert "or none (the identity: no norm)" in ModelConfig.spec("norm").help
    with pytest.raises(ConfigError, match=r"norm=none normalises nothing; set qk_norm=off, or norm=layernorm"):
        ModelConfig(**SIZES, norm="none", qk_norm=True)
    ModelConfig(**SIZES, norm="none")  # either alone is a model


# --- 3. the seed's help names dtype=auto as what moves a run's numbers ---------------------------------------------
def test_seed_help_names_dtype_auto_and_its_fix():
    text = TrainConfig.spec("seed").help
    assert "dtype=auto, which trains in bfloat16 on a CPU with bfloat16 units" in text
    assert "dtype=float32 fixes it on every machine" in text
