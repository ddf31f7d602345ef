"""A part of a caller's own class runs its own code: the fast path never trains or samples another model.

FastPath computes the model's, the blocks' and attention's forwards again in its own way, so a subclass of any of
them (a gate on attention, a scaled embedding) was skipped: the gate never trained, the run's loss was another
function's, cached decoding drew other tokens than the naive loop (a tester's finding).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from minitf_repl.core.config import GenConfig, ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.fastpath import FastPath, own_part
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM, MultiHeadSelfAttention, TransformerBlock
from minitf_repl.core.train import Trainer


class GatedAttention(MultiHeadSelfAttention):
    def __init__(self, config):
        super().__init__(config)
        self.gate = nn.Parameter(torch.zeros(1))

    def forward(self, x, cache=None):
        return torch.sigmoid(self.gate) * super().forward(x, cache)


class OwnForward(MiniTransformerLM):
    def forward(self, idx, targets=None, cache=None):
        return super().forward(idx, targets, cache)


def small(data) -> tuple[MiniTransformerLM, ModelConfig]:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=data.tokenizer.vocab_size, max_seq_len=16, d_model=32, n_heads=2, n_layers=2,
                         d_ff=64)
    return MiniTransformerLM(config), config


def test_the_trainer_runs_a_gated_attention_and_trains_its_gate():
    data = load_data("sort:4")
    model, config = small(data)
    model.blocks[0].attn = GatedAttention(config)
    assert own_part(model) == "blocks.0.attn (GatedAttention)"
    assert not FastPath.supports(model) and not FastPath.supports(model, cached=True)
    trainer = Trainer(model, data, TrainConfig(steps=5, batch_size=8, eval_every=100, eval_batches=1,
                                               dtype="float32"))
    trainer.run()
    assert model.blocks[0].attn.gate.item() != 0.0  # its gradient reached it: its forward ran


def test_the_trainers_loss_is_the_models_own_function():
    data = load_data("sort:4")
    model, config = small(data)
    attn = GatedAttention(config)
    with torch.no_grad():
        attn.gate.fill_(-2.0)  # sigmoid(-2) = 0.12 scales attention's output down
    model.blocks[1].attn = attn
    trainer = Trainer(model, data, TrainConfig(steps=1, batch_size=8, eval_every=100, eval_batches=1,
                                               dtype="float32"))
    x, y = data.get_batch("train", 8, config.max_seq_len, torch.Generator().manual_seed(3))
    with torch.no_grad():
        _, own = model(x, y)
        _, trained = trainer._plain_forward()(x, y)
    assert trained.item() == own.item()


def test_cached_decoding_of_a_gated_attention_equals_the_naive_loop():
    data = load_data("sort:4")
    model, config = small(data)
    attn = GatedAttention(config)
    with torch.no_grad():
        attn.gate.fill_(-3.0)
    model.blocks[0].attn = attn
    settings = GenConfig(n=12, temperature=0)
    cached = list(generate(model, [1, 2, 3], settings.replace(cache=True)))
    naive = list(generate(model, [1, 2, 3], settings.replace(cache=False)))
    assert cached == naive


def test_a_subclass_of_the_model_or_a_block_is_its_own_part_and_the_plain_classes_are_not():
    data = load_data("sort:4")
    model, config = small(data)
    assert own_part(model) is None and FastPath.supports(model)
    scaled = OwnForward(config)
    assert own_part(scaled) == "the model (OwnForward)" and not FastPath.supports(scaled)

    class Block(TransformerBlock):
        pass

    model.blocks[1] = Block(config)
    assert own_part(model) == "blocks.1 (Block)"
