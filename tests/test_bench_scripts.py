"""The scripts in bench/ are run by hand, never by the suite (they time things), so a broken import
or a helper renamed under them would wait for the next person to measure. Here each is imported, as
`python bench/NAME.py` imports it (bench/ first on the path), in one child process, without running
main(); and the one helper that changes what minitf does, bench/cpu_kinds.py, is checked to change
it and to put it back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def test_every_bench_script_imports():
    names = sorted(p.stem for p in BENCH.glob("*.py"))
    assert {"nanogpt", "shakespeare", "first_train", "cpu_kinds", "memory"} <= set(names)
    code = ("import importlib, sys; sys.path.insert(0, sys.argv[1])\n"
            "for name in sys.argv[2:]:\n"
            "    importlib.import_module(name)\n"
            "print('imported', len(sys.argv) - 2)")
    done = subprocess.run([sys.executable, "-c", code, str(BENCH), *names], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"imported {len(names)}" in done.stdout


def test_without_bf16_units_answers_no_and_puts_the_answer_back(monkeypatch):
    """Inside it a CPU with bfloat16 units takes the float32 path (dtype=auto and Newton-Schulz)."""
    from minitf_repl.core import precision

    monkeypatch.syspath_prepend(str(BENCH))
    from cpu_kinds import as_without_bf16_units, without_bf16_units

    monkeypatch.setattr(precision, "native_bf16", lambda device: True)  # as on a CPU with AMX or AVX512-BF16
    assert precision.training_dtype("auto", "cpu") == "bfloat16"
    with without_bf16_units():
        assert precision.training_dtype("auto", "cpu") == "float32"
        assert precision.fast_dtype("cpu") == "float32"  # what Muon's Newton-Schulz runs in
    assert precision.fast_dtype("cpu") == "bfloat16"
    seen = as_without_bf16_units(lambda: precision.fast_dtype("cpu"))()
    assert seen == "float32" and precision.fast_dtype("cpu") == "bfloat16"


def test_free_attention_and_gelu_change_the_fast_path_and_are_put_back(monkeypatch):
    """bench/float32_bound.py's upper bounds: inside free(), the fast path's attention hands back v and
    GELU is the identity; after it, even after an error inside, the model computes what it did before."""
    import torch
    import torch.nn as nn

    from minitf_repl.core.config import ModelConfig
    from minitf_repl.core.fastpath import FastPath
    from minitf_repl.core.model import MiniTransformerLM

    monkeypatch.syspath_prepend(str(BENCH))
    from float32_bound import free

    torch.manual_seed(0)
    fast = FastPath(MiniTransformerLM(ModelConfig(vocab_size=11, max_seq_len=8, d_model=16, n_heads=2, n_layers=1)))
    idx = torch.randint(11, (2, 8))
    before = fast(idx)[0]
    with free(attention=True):
        no_attention = fast(idx)[0]
        assert nn.GELU()(torch.tensor([-1.0])).item() < 0  # GELU untouched
    with free(attention=True, gelu=True):
        neither = fast(idx)[0]
        assert nn.GELU()(torch.tensor([-1.0])).item() == -1.0  # the identity
    with pytest.raises(RuntimeError), free(attention=True, gelu=True):
        raise RuntimeError("inside")
    assert not torch.allclose(before, no_attention) and not torch.allclose(no_attention, neither)
    assert torch.equal(fast(idx)[0], before)


def test_heap_kept_stops_a_runs_hand_back_and_puts_it_back(monkeypatch):
    """bench/nanogpt.py keeps the heap between its chunks: inside heap_kept() a Trainer run ends without
    handing freed memory back (core.memory.release_freed); after it, even after an error, runs hand back again."""

    from minitf_repl.core import train
    from minitf_repl.core.config import ModelConfig, TrainConfig
    from minitf_repl.core.model import MiniTransformerLM

    monkeypatch.syspath_prepend(str(BENCH))
    from nanogpt import RandomTokens, heap_kept

    calls = []
    monkeypatch.setattr(train, "release_freed", lambda: calls.append("handed back"))
    trainer = train.Trainer(MiniTransformerLM(ModelConfig(vocab_size=11, max_seq_len=8, d_model=16, n_heads=2,
                                                          n_layers=1)),
                            RandomTokens(11), TrainConfig(batch_size=2, steps=1, eval_every=10**9, dtype="float32"))
    with heap_kept():
        trainer.run()
    assert calls == [] and trainer.step == 1
    with pytest.raises(RuntimeError), heap_kept():
        raise RuntimeError("inside")
    trainer.start_run()
    trainer.run()
    assert calls == ["handed back"] and trainer.step == 2


def test_both_weight_layouts_compute_the_same_products(monkeypatch):
    """bench/float32_bound.py's "fastest layouts" row stores some weights transposed: the forward, the
    input's gradient and the weight's gradient (in the weight's own layout) must be the same numbers."""
    import torch

    monkeypatch.syspath_prepend(str(BENCH))
    from float32_bound import LAYOUTS, fastest_layouts, linear_products

    torch.manual_seed(0)
    x, weight, bias, grad = torch.randn(24, 8), torch.randn(12, 8), torch.randn(12), torch.randn(24, 12)
    y, dx, dw = linear_products(x, weight, bias, grad, LAYOUTS[0])
    y_t, dx_t, dw_t = linear_products(x, weight.t().contiguous(), bias, grad, LAYOUTS[1])
    torch.testing.assert_close(y, x @ weight.t() + bias)
    torch.testing.assert_close(dx, grad @ weight)
    torch.testing.assert_close(dw, grad.t() @ x)
    torch.testing.assert_close((y_t, dx_t, dw_t.t()), (y, dx, dw))
    chosen = fastest_layouts(dict(L=1, H=2, d=8, T=4, B=2, V=5), rounds=1, calls=1)
    assert set(chosen) == {(8, 24), (8, 8), (8, 32), (32, 8), (8, 5)} and set(chosen.values()) <= set(LAYOUTS)


def test_autograd_ffn_switches_the_own_backward_off_and_puts_it_back(monkeypatch):
    """bench/nanogpt.py's "minitf float32 autograd FFN" row: inside autograd_ffn() the fast path leaves the
    feed-forward's backward to autograd; after it, even after an error, core.fastpath decides as before."""

    from minitf_repl.core import fastpath

    monkeypatch.syspath_prepend(str(BENCH))
    from nanogpt import autograd_ffn, under

    monkeypatch.setattr(fastpath, "_own_backward_pays", lambda ffn, x: True)
    seen = []
    under(autograd_ffn, lambda n: seen.append(fastpath._own_backward_pays(None, None)))(1)
    assert seen == [False] and fastpath._own_backward_pays(None, None)

    def fails(n):
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError):
        under(autograd_ffn, fails)(1)
    assert fastpath._own_backward_pays(None, None)


def test_float32_attention_pins_the_kernel_to_float32_and_puts_the_measured_choice_back(monkeypatch):
    """bench/nanogpt.py's "minitf float32 attention" row: inside float32_attention() a bfloat16 training step's
    attention runs in float32 whatever the measurement said; after it, even after an error, the measurement decides."""
    import torch

    from minitf_repl.core import fastpath

    monkeypatch.syspath_prepend(str(BENCH))
    from nanogpt import float32_attention, under

    monkeypatch.setattr(fastpath, "bf16_attention_speedup", lambda *shape: 9.0)
    q = torch.randn(2, 4, 8, 6).bfloat16().requires_grad_()
    seen = []
    under(float32_attention, lambda n: seen.append(fastpath.attention_in_float32(q, 4)))(1)
    assert seen == [True] and not fastpath.attention_in_float32(q, 4)

    def fails(n):
        raise RuntimeError("inside")

    with pytest.raises(RuntimeError):
        under(float32_attention, fails)(1)
    assert not fastpath.attention_in_float32(q, 4)


def test_spectral_newton_schulz_is_newton_schulz(monkeypatch):
    """bench/newton_schulz.py's eigh form computes the five steps' result, in float64 to rounding, for
    wide, square and rank-deficient stacks; so its row times the same function, not an easier one."""
    import torch

    from minitf_repl.core.optimizers import newton_schulz

    monkeypatch.syspath_prepend(str(BENCH))
    from newton_schulz import COEFFICIENTS, spectral_newton_schulz

    torch.manual_seed(0)
    low_rank = torch.randn(2, 8, 2, dtype=torch.float64) @ torch.randn(2, 2, 24, dtype=torch.float64)
    for X in (torch.randn(3, 8, 24, dtype=torch.float64), torch.randn(2, 16, 16, dtype=torch.float64), low_rank):
        steps = newton_schulz(X, COEFFICIENTS, 5, 1e-7, torch.float64)
        assert torch.allclose(spectral_newton_schulz(X), steps, atol=1e-10)
    # Not the exact polar factor: five steps leave singular values between about 0.7 and 1.2.
    X = torch.randn(1, 8, 24, dtype=torch.float64)
    U, _, Vh = torch.linalg.svd(X, full_matrices=False)
    assert not torch.allclose(spectral_newton_schulz(X), U @ Vh, atol=1e-2)


def test_newton_schulz_floor_counts_the_products_as_they_run(monkeypatch):
    """bench/newton_schulz.py's floor: the FLOPs of the products newton_schulz really calls, as counted
    by hand: three products a step for the square stack, the Gram form's two n-wide ends and 17 m x m
    products for the 128 x 512 one (bfloat16 takes the plain steps there), and that count at the peak."""
    import torch

    from minitf_repl.core.config import ModelConfig

    monkeypatch.syspath_prepend(str(BENCH))
    from newton_schulz import floor_ms, muon_stacks, product_flops

    config = ModelConfig(vocab_size=65)
    square, wide = muon_stacks(config)
    assert square.shape == (16, 128, 128) and wide.shape == (8, 128, 512)
    mm = lambda m, k, n: 2 * m * k * n  # noqa: E731  (FLOPs of an m x k by k x n product)
    square_flops = 16 * 5 * 3 * mm(128, 128, 128)
    gram_flops = 8 * (2 * mm(128, 512, 128) + 17 * mm(128, 128, 128))
    plain_flops = 8 * 5 * (mm(128, 512, 128) + mm(128, 128, 128) + mm(128, 128, 512))
    assert product_flops([square]) == square_flops
    assert product_flops([wide]) == gram_flops
    assert product_flops([square, wide]) == square_flops + gram_flops == 1_845_493_760  # the docs' 1.85 GFLOP
    assert product_flops([wide], torch.bfloat16) == plain_flops
    assert floor_ms(config, 184.5) == pytest.approx((square_flops + gram_flops) / 184.5e9 * 1e3)


def test_as_avx2_runs_a_script_down_the_float32_path_with_avx2_kernels(tmp_path):
    """bench/as_avx2.py: the child sees the three caps, ATen's kernels at AVX2 (or below, on a CPU
    without it), no native bfloat16 whatever this CPU has, so auto and Newton-Schulz take float32."""
    sys.path.insert(0, str(BENCH))
    try:
        from as_avx2 import AVX2_ONLY, capped_environment
    finally:
        sys.path.remove(str(BENCH))
    env = capped_environment({"PATH": "/bin", "DNNL_MAX_CPU_ISA": "ALL", "ONEDNN_MAX_CPU_ISA": "ALL"})
    assert env == {"PATH": "/bin", **AVX2_ONLY}

    probe = tmp_path / "probe.py"
    probe.write_text("import torch\n"
                     "from minitf_repl.core import device, precision\n"
                     "print(torch.backends.cpu.get_cpu_capability(), device.native_bf16('cpu'),\n"
                     "      precision.training_dtype('auto', 'cpu'), precision.fast_dtype('cpu'))\n"
                     "print(device.cpu_kind())\n")
    done = subprocess.run([sys.executable, str(BENCH / "as_avx2.py"), str(probe)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    capability, native, auto, newton_schulz = done.stdout.splitlines()[0].split()
    assert capability in ("AVX2", "DEFAULT") and native == "False" and auto == newton_schulz == "float32"
    assert "instruction sets capped: ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2" \
        in done.stdout.splitlines()[1]

    missing = subprocess.run([sys.executable, str(BENCH / "as_avx2.py"), str(tmp_path / "nope.py")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "nope.py is not a file" in missing.stderr
    # a module, as `python -m` runs one (it was "-m is not a file"): the REPL's :device as such a CPU shows it
    done = subprocess.run([sys.executable, str(BENCH / "as_avx2.py"), "-m", "minitf_repl", "device", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["train_dtype"] == "float32"


def test_the_gpu_script_parses_and_names_what_exists():
    """bench/on_gpu.sh runs only where a GPU is lent: here its shell parses and every file it runs exists."""
    import re

    script = BENCH / "on_gpu.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    named = set(re.findall(r"(?:tests|bench)/[\w.]+\.py", script.read_text()))
    assert {"tests/test_gpu.py", "tests/test_device.py", "bench/gpu_gpt2.py"} <= named
    assert all((BENCH.parent / path).is_file() for path in named), named
