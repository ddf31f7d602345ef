"""The shape trace: every step in execution order, with the right shapes, and no hooks left behind."""

import pytest
import torch

from minitf_repl.core.errors import DataError
from minitf_repl.core.model import MiniTransformerLM, ModelConfig
from minitf_repl.core.trace import TraceRecord, trace

B, T = 3, 7
SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48)
H, D_K = 2, 16

BLOCK_STEPS = [
    "ln_1",
    "attn.q_proj", "attn.hook_q",
    "attn.k_proj", "attn.hook_k",
    "attn.v_proj", "attn.hook_v",
    "attn.hook_scores", "attn.hook_masked_scores", "attn.hook_weights", "attn.attn_dropout",
    "attn.hook_weighted", "attn.hook_merged", "attn.out_proj", "attn.resid_dropout",
    "hook_resid_mid",
    "ln_2", "ffn.fc_in", "ffn.act", "ffn.fc_out", "ffn.dropout",
    "hook_resid_post",
]  # fmt: skip
PROBES = [
    "hook_q", "hook_k", "hook_v", "hook_scores", "hook_masked_scores", "hook_weights",
    "hook_weighted", "hook_merged", "hook_resid_mid", "hook_resid_post",
]  # fmt: skip
SCORE_PROBES = ("hook_scores", "hook_masked_scores", "hook_weights")


def make_model(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**SIZES, **changes}))


def idx(b: int = B, t: int = T) -> torch.Tensor:
    return torch.randint(0, 11, (b, t), generator=torch.Generator().manual_seed(1))


def by_path(records: list[TraceRecord]) -> dict[str, TraceRecord]:
    return {r.path: r for r in records}


def no_hooks_left(model) -> bool:
    return all(not m._forward_hooks for m in model.modules())


def test_records_in_execution_order():
    records = trace(make_model(), idx())
    expected = ["token_embedding", "position_embedding", "hook_embed", "embed_dropout"]
    for layer in range(2):
        expected += [f"blocks.{layer}.{step}" for step in BLOCK_STEPS]
    expected += ["ln_f", "lm_head"]
    assert [r.path for r in records] == expected


def test_probe_order_per_block():
    records = trace(make_model(), idx())
    for layer in range(2):
        probes = [r.path.rsplit(".", 1)[-1] for r in records if r.layer == layer and ".hook_" in r.path]
        assert probes == PROBES


def test_shapes():
    r = by_path(trace(make_model(), idx()))
    assert r["token_embedding"].input_shapes == [(B, T)]
    assert r["token_embedding"].output_shape == (B, T, 32)
    assert r["position_embedding"].input_shapes == [(T,)]
    assert r["position_embedding"].output_shape == (T, 32)
    assert r["hook_embed"].output_shape == (B, T, 32)
    for layer in range(2):
        p = f"blocks.{layer}."
        assert r[p + "attn.q_proj"].output_shape == (B, T, 32)
        for name in ("hook_q", "hook_k", "hook_v", "hook_weighted"):
            assert r[p + "attn." + name].output_shape == (B, H, T, D_K), name
        for name in SCORE_PROBES + ("attn_dropout",):
            assert r[p + "attn." + name].output_shape == (B, H, T, T), name
        assert r[p + "attn.hook_merged"].input_shapes == [(B, T, 32)]
        assert r[p + "attn.hook_merged"].output_shape == (B, T, 32)
        assert r[p + "ffn.fc_in"].output_shape == (B, T, 48)
        assert r[p + "ffn.fc_out"].input_shapes == [(B, T, 48)]
        assert r[p + "hook_resid_post"].output_shape == (B, T, 32)
    assert r["lm_head"].output_shape == (B, T, 11)
    assert r["lm_head"].dtype == "float32"


def test_fields():
    records = trace(make_model(), idx())
    r = by_path(records)
    assert r["token_embedding"].layer is None and r["lm_head"].layer is None
    assert r["blocks.1.attn.hook_q"].layer == 1
    assert r["blocks.0.ffn.fc_in"].kind == "Linear"
    assert r["blocks.0.attn.hook_scores"].kind == "Probe"
    assert r["blocks.0.ffn.act"].formula == "GELU(.)"
    assert r["blocks.0.attn.hook_scores"].formula == "S = QK^T / sqrt(d_k)"
    assert "W_P" in r["position_embedding"].formula
    assert all(rec.formula for rec in records), [rec.path for rec in records if not rec.formula]


def test_parameter_counts_add_up_and_tied_head_counts_once():
    model = make_model()
    r = by_path(trace(model, idx()))
    assert sum(rec.n_params for rec in r.values()) == model.num_parameters()
    assert r["token_embedding"].n_params == 11 * 32
    assert r["lm_head"].n_params == 0
    assert "tied" in r["lm_head"].formula and "W_E^T" in r["lm_head"].formula
    assert "lm_head" in r["token_embedding"].formula
    assert r["blocks.0.attn.q_proj"].n_params == 32 * 32 + 32
    assert r["blocks.0.attn.hook_q"].n_params == 0


def test_variant_formulas():
    r = by_path(trace(make_model(pos_encoding="sinusoidal", activation="relu"), idx()))
    assert "PE(pos)" in r["position_embedding"].formula
    assert r["position_embedding"].n_params == 0
    assert r["blocks.0.ffn.act"].formula == "ReLU(.)"


def test_single_sequence_becomes_batch_of_one():
    r = by_path(trace(make_model(), idx()[0]))
    assert r["token_embedding"].input_shapes == [(1, T)]
    assert r["lm_head"].output_shape == (1, T, 11)


def test_hooks_removed_after_success():
    model = make_model()
    trace(model, idx())
    assert no_hooks_left(model)


def test_hooks_removed_after_error():
    model = make_model()
    with pytest.raises(DataError):
        trace(model, idx(t=17))  # longer than max_seq_len=16
    assert no_hooks_left(model)


@pytest.mark.parametrize("bad", [[1, 2, 3], torch.rand(3, 7), torch.tensor([[1, 11]]), torch.tensor([[-1, 2]]), torch.zeros(0, dtype=torch.long)])
def test_bad_input_raises_data_error(bad):
    model = make_model()
    with pytest.raises(DataError):
        trace(model, bad)
    assert no_hooks_left(model)


def test_training_mode_restored():
    model = make_model(dropout=0.1).train()
    model.blocks[1].ffn.dropout.eval()  # a mixed state comes back exactly as it was
    before = {name: m.training for name, m in model.named_modules()}
    r = by_path(trace(model, idx()))
    assert {name: m.training for name, m in model.named_modules()} == before
    # Dropout was off during the trace: the dropout step returns its input unchanged in shape and is recorded.
    assert r["blocks.0.attn.attn_dropout"].output_shape == (B, H, T, T)

    model.eval()
    trace(model, idx())
    assert not any(m.training for m in model.modules())


def test_trace_is_eval_and_no_grad():
    model = make_model(dropout=0.5).train()
    seen = []
    handle = model.lm_head.register_forward_hook(lambda m, i, o: seen.append(o))
    try:
        trace(model, idx())
        trace(model, idx())
    finally:
        handle.remove()
    assert not seen[0].requires_grad
    torch.testing.assert_close(seen[0], seen[1])  # dropout off: the same input gives the same logits


def test_sdpa_path_traces_without_score_probes():
    model = make_model(attention="sdpa")
    records = trace(model, idx())
    names = {r.path.rsplit(".", 1)[-1] for r in records}
    assert not names & set(SCORE_PROBES)
    assert "attn_dropout" not in names
    assert {"hook_q", "hook_k", "hook_v", "hook_weighted", "hook_merged"} <= names
    r = by_path(records)
    assert r["blocks.1.attn.hook_weighted"].output_shape == (B, H, T, D_K)
    assert r["lm_head"].output_shape == (B, T, 11)
    assert sum(rec.n_params for rec in records) == model.num_parameters()
    assert no_hooks_left(model)
