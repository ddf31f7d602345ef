"""The cost ledger against the built model: parameter rows against num_parameters(), FLOPs against
torch's FlopCounterMode, activation memory against the allocations the profiler records.

Memory is measured with `torch.profiler.profile(profile_memory=True)`: the sum of the CPU
allocator's allocations minus frees during the forward pass, in the order they happened. That is
deterministic (no RSS, no timing), so the check is tight even on a busy machine. At batch 3 x 40
the bytes kept after the forward pass measure 0.987 to 1.008 x the estimate (explicit and fused
attention, dropout 0 and 0.1), the forward's peak 1.001 to 1.008 x; the test allows 0.9 to 1.1
(peak < 1.25). A whole first training step peaks at 0.68 to 0.79 x gradients + AdamW moments +
activations (activations are freed while gradients appear); the test allows 0.5 to 1.1.
"""

import gc

import pytest
import torch
import torch.nn as nn
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from minitf_repl.core.errors import UserError
from minitf_repl.core.ledger import cost_ledger
from minitf_repl.core.model import MiniTransformerLM, ModelConfig

V, D, H, L, FF = 11, 32, 2, 2, 48
SIZES = dict(vocab_size=V, max_seq_len=48, d_model=D, n_heads=H, n_layers=L, d_ff=FF)


def make_model(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**SIZES, **changes}))


def batch(b: int, t: int) -> torch.Tensor:
    return torch.randint(0, V, (b, t), generator=torch.Generator().manual_seed(1))


# --- parameters ------------------------------------------------------------------------------


def test_rows_add_up_and_the_tied_head_counts_once():
    model = make_model()
    ledger = cost_ledger(model, 3, 7)
    rows = {r.path: r for r in ledger.rows}
    assert ledger.n_params == sum(r.params for r in ledger.rows) == model.num_parameters()
    assert rows["token_embedding"].params == V * D and rows["token_embedding"].tied_to == "lm_head"
    assert rows["lm_head"].params == 0 and rows["lm_head"].tied_to == "token_embedding"
    assert rows["position_embedding"].params == 48 * D
    for i in range(L):
        assert rows[f"blocks.{i}.attn"].params == 4 * (D * D + D) and rows[f"blocks.{i}.attn"].block == i
        assert rows[f"blocks.{i}.ffn"].params == D * FF + FF + FF * D + D
        assert rows[f"blocks.{i}.ln_1"].params == rows[f"blocks.{i}.ln_2"].params == 2 * D
    assert rows["ln_f"].params == 2 * D
    assert not any("hook" in path or "dropout" in path for path in rows)


def test_an_untied_head_and_fixed_positions():
    model = make_model(pos_encoding="sinusoidal")
    model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
    ledger = cost_ledger(model, 3, 7)
    rows = {r.path: r for r in ledger.rows}
    assert rows["lm_head"].params == V * D and rows["lm_head"].tied_to is None
    assert rows["token_embedding"].tied_to is None
    assert rows["position_embedding"].params == 0 and rows["position_embedding"].kind == "SinusoidalPositions"
    assert ledger.n_params == model.num_parameters()


# --- FLOPs -----------------------------------------------------------------------------------


def counted(model, x, backward: bool = False) -> tuple[int, int]:
    """(all FLOPs, FLOPs of fused-attention ops) that FlopCounterMode sees."""
    with FlopCounterMode(display=False) as counter:
        logits, loss = model(x, x)
        if backward:
            loss.backward()
    fused = sum(n for op, n in counter.get_flop_counts()["Global"].items() if "scaled_dot_product" in str(op))
    return counter.get_total_flops(), fused


@pytest.mark.parametrize("t", [7, 48])  # at 48 attention is over a quarter of the total: leaving it out fails
def test_forward_and_training_flops_match_the_counter_on_the_explicit_path(t):
    model = make_model()
    x = batch(3, t)
    ledger = cost_ledger(model, 3, t)
    forward, _ = counted(model, x)
    assert abs(ledger.forward_flops_per_step - forward) / forward < 0.10
    assert ledger.attention_flops_per_token / ledger.forward_flops_per_token > (0.25 if t == 48 else 0.0)
    training, _ = counted(model, x, backward=True)
    assert abs(ledger.training_flops_per_step - training) / training < 0.10


def test_the_fused_path_costs_the_same_and_the_counter_sees_its_matmuls():
    """torch 2.13's FlopCounterMode has no formula for the CPU fused attention kernel and counts 0
    for it; the ledger counts the same math on both paths (the full T x T, as the explicit path
    does; a causal kernel may skip the masked half)."""
    explicit, fused = make_model(), make_model(attention="sdpa")
    t = 48
    a, b = cost_ledger(explicit, 3, t), cost_ledger(fused, 3, t)
    assert a.forward_flops_per_step == b.forward_flops_per_step
    total, fused_ops = counted(fused, batch(3, t))
    tokens = 3 * t
    if fused_ops == 0:
        assert abs(b.linear_flops_per_token * tokens - total) / total < 0.10
    else:  # a torch that counts the kernel: then the whole figure must agree
        assert abs(b.forward_flops_per_step - total) / total < 0.10


class SwiGLU(nn.Module):
    """A feed-forward variant with three matrices, to show that Linear layers are read as built."""

    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def test_linear_layers_are_read_from_the_modules_not_the_config():
    model = make_model()
    for block in model.blocks:
        block.ffn = SwiGLU(D, 96)  # 3 x 32 x 96 weights against the config's 2 x 32 x 48
    model.lm_head = nn.Linear(D, V, bias=False)  # untied, too
    ledger = cost_ledger(model, 3, 7)
    forward, _ = counted(model, batch(3, 7))
    assert abs(ledger.forward_flops_per_step - forward) / forward < 0.10
    assert ledger.n_params == model.num_parameters()


def test_six_n_and_training_are_in_the_same_range():
    ledger = cost_ledger(make_model(), 3, 48)
    assert ledger.training_flops_per_step == 3 * ledger.forward_flops_per_step
    # N leaves out the position table, a lookup (tests/test_sweep_bm_views.py)
    assert ledger.six_n_flops_per_step == 6 * (ledger.n_params - ledger.lookup_params) * 3 * 48
    assert 0.2 < ledger.training_flops_per_step / ledger.six_n_flops_per_step < 5


# --- memory ----------------------------------------------------------------------------------


def allocation_stream(prof) -> tuple[int, int]:
    """(bytes still allocated at the end, peak) from the profiler's allocation events, in time order."""
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    events.sort(key=lambda e: e.start_ns())
    current = peak = 0
    for e in events:
        current += e.nbytes()
        peak = max(peak, current)
    return current, peak


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("attention", ["explicit", "sdpa"])
def test_activation_memory_matches_what_the_forward_keeps(attention, dropout):
    model = make_model(attention=attention, dropout=dropout)
    model.train()
    b, t = 3, 40
    x = batch(b, t)
    ledger = cost_ledger(model, b, t)
    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = model(x, x)  # kept alive: what stays allocated is what backward needs, plus the outputs
    kept, peak = allocation_stream(prof)
    assert 0.9 < kept / ledger.activation_bytes < 1.1, (kept, ledger.activation_bytes)
    assert peak / ledger.activation_bytes < 1.25  # transient buffers on top are small

    # A whole first training step (backward, then AdamW creating its moments) stays within the
    # ledger's gradients + moments + activations: activations are freed as gradients appear.
    optimizer = torch.optim.AdamW(model.parameters())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out[1].backward()
        optimizer.step()
    _, step_peak = allocation_stream(prof)
    budget = ledger.grad_bytes + ledger.optimizer_bytes + ledger.activation_bytes
    assert 0.5 < (kept + step_peak) / budget < 1.1, (kept + step_peak, budget)


def test_memory_parts_follow_the_parameter_count():
    model = make_model()
    ledger = cost_ledger(model, 3, 7)
    n = model.num_parameters()
    assert ledger.weight_bytes == ledger.grad_bytes == 4 * n and ledger.optimizer_bytes == 8 * n
    assert ledger.total_bytes == ledger.weight_bytes + ledger.grad_bytes + ledger.optimizer_bytes + ledger.activation_bytes
    longer = cost_ledger(model, 3, 14)
    assert longer.activation_bytes > 2 * ledger.activation_bytes  # the T x T pattern grows faster than T


def test_defaults_and_bad_sizes():
    model = make_model()
    assert cost_ledger(model, 2).seq_len == 48
    bad = (dict(batch_size=0), dict(batch_size=True), dict(batch_size=2, seq_len=49), dict(batch_size=2, seq_len=0))
    for kwargs in bad:
        with pytest.raises(UserError):
            cost_ledger(model, **kwargs)
    import json

    json.dumps(cost_ledger(model, 2).to_dict())


def test_muon_keeps_one_buffer_per_hidden_matrix_entry():
    """The optimizer row counts what the optimizer really holds after a step, for either kind."""
    import torch

    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.core.ledger import cost_ledger
    from minitf_repl.core.model import MiniTransformerLM
    from minitf_repl.core.optimizers import make_optimizer

    model = MiniTransformerLM(ModelConfig(vocab_size=11, max_seq_len=8, d_model=16, n_heads=2, n_layers=2, d_ff=24))
    for kind in ("adamw", "muon"):
        optimizer = make_optimizer(model, TrainConfig(optimizer=kind))
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        optimizer.step()
        held = sum(v.numel() * v.element_size() for state in optimizer.state.values()
                   for v in state.values() if torch.is_tensor(v) and v.dim() > 0)
        assert cost_ledger(model, batch_size=2, optimizer=kind).optimizer_bytes == held, kind
