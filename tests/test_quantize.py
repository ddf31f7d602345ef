"""core/quantize.py: the int8 per-channel Linear and the int8 copy :quantize samples from.

What quantisation promises, checked as properties at small unequal sizes: each weight within half a
step of its channel's scale, each output within ||x||_1 s_o / 2 of the float Linear's, a quarter of
the bytes, and a copy that decodes what the float model decodes, through the same fast path, for
every model variant. No deprecated torch API is touched (no warning is raised, none is silenced).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn as nn
from test_variants import ALL, SIZES, label

from minitf_repl.core.config import GenConfig, ModelConfig
from minitf_repl.core.fastpath import FastPath
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.quantize import QMAX, Int8Linear, count_quantized, quantize_for_sampling, state_dict_bytes


def linear(d_in=37, d_out=23, bias=True, seed=0) -> nn.Linear:
    torch.manual_seed(seed)
    layer = nn.Linear(d_in, d_out, bias=bias)
    with torch.no_grad():  # rows of very different sizes: what per-channel scales are for
        layer.weight.mul_(torch.logspace(-3, 1, d_out)[:, None])
    return layer


def test_weights_are_int8_within_half_a_step_of_their_channels_scale():
    layer = linear()
    q = Int8Linear.from_linear(layer)
    assert q.weight.dtype == torch.int8 and q.weight.shape == (23, 37) and q.scale.shape == (23,)
    assert int(q.weight.abs().max()) == QMAX  # each row's largest weight uses the whole range
    torch.testing.assert_close(q.scale, layer.weight.abs().amax(dim=1) / QMAX)
    error = (q.dequantized() - layer.weight).abs()
    assert (error <= q.scale[:, None] / 2 * (1 + 1e-5)).all()
    # Per channel: the smallest row (1000x smaller than the largest) keeps its own relative precision.
    assert error[0].max() / layer.weight[0].abs().max() <= 1 / (2 * QMAX) * (1 + 1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_the_output_is_within_the_quantisation_bound_of_the_float_linear(bias):
    layer = linear(bias=bias)
    q = Int8Linear.from_linear(layer)
    x = torch.randn(3, 7, 37, generator=torch.Generator().manual_seed(1))  # (B, T, d_in)
    with torch.no_grad():
        exact, approx = layer(x), q(x)
    assert approx.shape == exact.shape == (3, 7, 23) and approx.dtype == torch.float32
    bound = x.abs().sum(dim=-1, keepdim=True) * q.scale / 2  # ||x||_1 s_o / 2, per output
    assert ((approx - exact).abs() <= bound + 1e-5).all()
    assert not torch.equal(approx, exact)  # it really is an approximation
    # and it is exactly the dequantized matrix's product (the scale factored out of the sum)
    torch.testing.assert_close(approx, nn.functional.linear(x, q.dequantized(), q.bias), atol=1e-5, rtol=1e-5)


def test_an_all_zero_row_stays_zero():
    layer = linear()
    with torch.no_grad():
        layer.weight[4].zero_()
    q = Int8Linear.from_linear(layer)
    assert torch.isfinite(q.scale).all() and (q.weight[4] == 0).all()
    out = q(torch.randn(2, 37))
    assert torch.isfinite(out).all() and torch.allclose(out[:, 4], layer.bias[4].expand(2))


def test_a_quarter_of_the_bytes():
    layer = linear(d_in=256, d_out=384)
    before, after = state_dict_bytes(layer), state_dict_bytes(Int8Linear.from_linear(layer))
    weights = 384 * 256
    assert weights * 4 < before < weights * 4 + 4096  # float32 weights + bias + the format
    assert weights < after < weights + 2 * 384 * 4 + 4096  # int8 weights + scales + bias + the format
    assert after / before < 0.27


def model_for(changes: dict) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**SIZES, **changes})).eval()


@pytest.mark.parametrize("changes", ALL, ids=[label(c) for c in ALL])
def test_the_int8_copy_decodes_through_the_fast_path_like_its_readable_self(changes):
    model = model_for(changes)
    qmodel = quantize_for_sampling(model)
    n_linear = sum(type(m) is nn.Linear for m in model.modules())
    assert count_quantized(qmodel) == n_linear and not any(type(m) is nn.Linear for m in qmodel.modules())
    assert {type(m) for m in model.modules()} >= {nn.Linear}  # the float model is untouched
    assert FastPath.supports(qmodel, cached=True) and not FastPath.supports(qmodel)
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(SIZES["vocab_size"], (2, 5), generator=g)
    readable_kv, fast_kv, fast = qmodel.new_cache(), qmodel.new_cache(), FastPath(qmodel)
    with torch.inference_mode():
        for idx in (prompt, *torch.randint(SIZES["vocab_size"], (2, 4), generator=g).split(1, dim=1)):
            logits, _ = qmodel(idx, cache=readable_kv)
            torch.testing.assert_close(fast(idx, cache=fast_kv)[0], logits, atol=1e-5, rtol=1e-5)
        float_logits, _ = model(prompt)
        int8_logits, _ = qmodel(prompt)
    assert (int8_logits - float_logits).abs().max() < 0.05  # logits of a random model are about +-1


def test_int8_sampling_picks_the_float_models_tokens():
    model = model_for({})
    qmodel = quantize_for_sampling(model)
    float_ids = list(generate(model, [1, 2, 3], GenConfig(n=12, temperature=0.0)))
    assert list(generate(qmodel, [1, 2, 3], GenConfig(n=12, temperature=0.0))) == float_ids
    assert list(generate(qmodel, [1, 2, 3], GenConfig(n=12, temperature=0.0, cache=False))) == float_ids


def test_no_deprecated_api_and_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning, a deprecation above all, fails the test
        qmodel = quantize_for_sampling(model_for({}))
        state_dict_bytes(qmodel)
        list(generate(qmodel, [1, 2], GenConfig(n=4, temperature=0.0)))
    source = Path(__file__).resolve().parents[1] / "minitf_repl" / "core" / "quantize.py"
    tree = ast.parse(source.read_text())
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not any(m.startswith("torch.ao") for m in modules)
    assert not names & {"ao", "quantize_dynamic", "catch_warnings"}  # nothing deprecated, nothing silenced
