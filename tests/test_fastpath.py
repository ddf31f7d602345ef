"""The training fast path computes the readable model's function: same loss, same gradients, every variant."""

from __future__ import annotations

import pytest
import torch
from test_variants import ALL, SIZES, label

from minitf_repl.core.config import GenConfig, ModelConfig
from minitf_repl.core.fastpath import FastPath, listened
from minitf_repl.core.model import MiniTransformerLM

B, T = 3, 16


def model_for(changes: dict, attention: str = "explicit") -> MiniTransformerLM:
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**{**SIZES, **changes, "attention": attention}))
    with torch.no_grad():  # non-zero biases and gains, so a wrongly placed one shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.train()


def loss_and_grads(forward, model, idx, targets):
    model.zero_grad(set_to_none=True)
    logits, loss = forward(idx, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("changes", ALL, ids=[label(c) for c in ALL])
def test_fast_path_equals_the_readable_explicit_path(changes):
    model = model_for(changes)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(SIZES["vocab_size"], (B, T), generator=g)
    targets = torch.randint(SIZES["vocab_size"], (B, T), generator=g)
    targets[0, :3] = -1  # ignored positions are ignored alike
    logits, loss, grads = loss_and_grads(model, model, idx, targets)
    fast_logits, fast_loss, fast_grads = loss_and_grads(FastPath(model), model, idx, targets)
    torch.testing.assert_close(fast_logits, logits, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast_loss, loss, atol=1e-5, rtol=1e-5)
    assert fast_grads.keys() == grads.keys()
    for name in grads:  # q, k and v each get their own slice of the fused product's gradient
        if grads[name] is None:  # an expert no token was routed to
            assert fast_grads[name] is None, name
            continue
        torch.testing.assert_close(fast_grads[name], grads[name], atol=1e-5, rtol=1e-4, msg=name)


def test_fast_path_has_the_models_parameters_and_no_others():
    model = model_for({})
    fast = FastPath(model)
    assert [id(p) for p in fast.parameters()] == [id(p) for p in model.parameters()]
    assert fast.state_dict().keys() == {f"model.{k}" for k in model.state_dict()}


def test_a_hook_anywhere_means_someone_is_listening():
    model = model_for({})
    assert not listened(model)
    handle = model.blocks[1].attn.hook_weights.register_forward_hook(lambda *a: None)
    assert listened(model)
    handle.remove()
    handle = model.blocks[0].register_forward_pre_hook(lambda *a: None)
    assert listened(model)
    handle.remove()
    assert not listened(model)


def test_fast_path_refuses_a_too_long_input_like_the_model():
    model = model_for({})
    from minitf_repl.core.errors import DataError

    with pytest.raises(DataError, match="max_seq_len"):
        FastPath(model)(torch.zeros(1, SIZES["max_seq_len"] + 1, dtype=torch.long))


# --- decoding: generate's cached loop runs the fast path -------------------------------------------
@pytest.mark.parametrize("changes", ALL, ids=[label(c) for c in ALL])
def test_cached_decoding_on_the_fast_path_equals_the_readable_cache(changes):
    """Prefill, then one token at a time: the fast path's logits and cache equal the readable model's."""
    model = model_for(changes).eval()
    g = torch.Generator().manual_seed(2)
    prompt = torch.randint(SIZES["vocab_size"], (2, 5), generator=g)
    steps = torch.randint(SIZES["vocab_size"], (2, 6), generator=g)
    readable_kv, fast_kv, fast = model.new_cache(), model.new_cache(), FastPath(model)
    with torch.inference_mode():
        for idx in (prompt, *steps.split(1, dim=1), prompt[:, :2]):  # last: two new tokens at once
            logits, _ = model(idx, cache=readable_kv)
            fast_logits, _ = fast(idx, cache=fast_kv)
            torch.testing.assert_close(fast_logits, logits, atol=1e-5, rtol=1e-5)
    assert fast_kv.length == readable_kv.length == 5 + 6 + 2
    for a, b in zip(fast_kv.layers, readable_kv.layers):
        torch.testing.assert_close(a.k[:, :, : a.length], b.k[:, :, : b.length], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(a.v[:, :, : a.length], b.v[:, :, : b.length], atol=1e-5, rtol=1e-5)


def test_generate_decodes_through_the_fast_path_unless_someone_listens(monkeypatch):
    from minitf_repl.core import fastpath
    from minitf_repl.core.generate import generate

    model = model_for({}).eval()
    calls = []
    real = fastpath.FastPath.forward
    monkeypatch.setattr(fastpath.FastPath, "forward", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    fast = list(generate(model, [1, 2, 3], GenConfig(n=8, temperature=0.0)))
    assert len(calls) == 8  # the prefill and seven single tokens
    naive = list(generate(model, [1, 2, 3], GenConfig(n=8, temperature=0.0, cache=False)))
    assert fast == naive  # and it decodes what the readable naive loop decodes
    calls.clear()
    handle = model.blocks[0].attn.hook_weights.register_forward_hook(lambda *a: None)  # a view listening
    assert list(generate(model, [1, 2, 3], GenConfig(n=8, temperature=0.0))) == fast and calls == []
    handle.remove()


# --- the trainer takes the fast path by default, and the readable one when told or listened to --------
def trainer_for(**train):
    from minitf_repl.core.config import TrainConfig
    from minitf_repl.core.data import load_data
    from minitf_repl.core.train import Trainer

    data = load_data("reverse:4")
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, max_seq_len=16, d_model=32,
                                          n_heads=4, n_layers=2, d_ff=64))
    # AdamW and float32: Muon's bfloat16 Newton-Schulz, or dtype=auto's bfloat16 autocast on a CPU
    # with AMX, would blur a float32 comparison of the two paths
    train = {"optimizer": "adamw", "dtype": "float32", **train}
    return Trainer(model, data, TrainConfig(steps=6, batch_size=8, eval_every=100, eval_batches=1, **train))


def test_trainer_steps_through_the_fast_path_unless_off_or_listened(monkeypatch):
    calls = []
    original = FastPath.forward
    # True: a training step, False: evaluation (which scores through the fast path too, in eval mode)
    monkeypatch.setattr(FastPath, "forward", lambda self, *a: calls.append(self.model.training) or original(self, *a))
    fast = trainer_for()
    fast.run()
    # one evaluation, at the end: its validation batches and the task's accuracy pass
    assert calls.count(True) == 6 and calls.count(False) == fast.config.eval_batches + 1

    calls.clear()
    trainer_for(fast_path=False).run()
    assert calls == []

    heard = []
    listened_to = trainer_for()
    handle = listened_to.model.blocks[0].attn.hook_weights.register_forward_hook(lambda m, i, o: heard.append(m.training))
    listened_to.run()  # an ablation or a view on the model: it must see every training forward
    handle.remove()
    assert calls == [] and heard.count(True) == 6  # every training step (evaluation runs in eval mode)


def test_fast_and_readable_training_runs_agree():
    fast, readable = trainer_for(), trainer_for(fast_path=False)
    fast.run(), readable.run()
    for a, b in zip(fast.history, readable.history):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    for (name, p), q in zip(fast.model.named_parameters(), readable.model.parameters()):
        if name.endswith("k_proj.bias"):
            # Adding b to every key adds q.b to every score of a row: softmax ignores it, so this
            # gradient is zero up to rounding, and AdamW, which divides by the gradient's own size,
            # turns each path's rounding noise into full steps of lr in random directions.
            continue
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("activation,bias", [("gelu", True), ("gelu", False), ("gelu_tanh", True)])
def test_own_feed_forward_backward_equals_autograds(activation, bias, monkeypatch):
    """fastpath._GELUFeedForward writes dL/dH over H and dL/dA over that: the same gradients as autograd's
    through the module, for every input, with and without biases, exact and tanh GELU, and for an upstream
    gradient that is not a plain buffer (an expanded one, as y.sum() sends)."""
    from minitf_repl.core import fastpath
    from minitf_repl.core.model import FeedForward

    monkeypatch.setattr(fastpath, "OWN_BACKWARD_FROM_BYTES", 0)  # at the test's size too
    monkeypatch.setattr(fastpath, "onednn_faster", lambda: False)  # taken only with torch's own products
    torch.manual_seed(0)
    ffn = FeedForward(ModelConfig(**{**SIZES, "activation": activation, "bias": bias}))
    x = torch.randn(B, T, SIZES["d_model"], requires_grad=True)
    assert fastpath._own_backward_pays(ffn, x)
    params = [x, *ffn.parameters()]
    for upstream in (torch.randn(B, T, SIZES["d_model"]), None):
        mine = fastpath.feed_forward(ffn, x)
        reference = ffn(x)
        torch.testing.assert_close(mine, reference)
        if upstream is None:  # y.sum(): the gradient arrives as an expanded tensor of ones
            got, want = (torch.autograd.grad(y.sum(), params) for y in (mine, reference))
        else:
            got, want = (torch.autograd.grad(y, params, upstream) for y in (mine, reference))
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_own_feed_forward_backward_only_where_measured_and_once(monkeypatch):
    """Taken in a float32 CPU training step whose hidden layer is 32 MB or more; not below, not under
    bfloat16 autocast, without grad, for another activation; and a second backward through the same graph
    says what to do instead of computing garbage."""
    from minitf_repl.core import fastpath
    from minitf_repl.core.model import FeedForward

    monkeypatch.setattr(fastpath, "onednn_faster", lambda: False)
    torch.manual_seed(0)
    ffn = FeedForward(ModelConfig(**SIZES))
    x = torch.randn(B, T, SIZES["d_model"], requires_grad=True)
    assert not fastpath._own_backward_pays(ffn, x)  # 3 x 16 x 48 floats: autograd's
    big = FeedForward(ModelConfig(**{**SIZES, "d_ff": 1024}))
    assert fastpath._own_backward_pays(big, torch.randn(8192, SIZES["d_model"], requires_grad=True))  # 32 MB
    with monkeypatch.context() as m:  # where oneDNN's products are taken, autograd's backward through them is
        m.setattr(fastpath, "onednn_faster", lambda: True)
        assert not fastpath._own_backward_pays(big, torch.randn(8192, SIZES["d_model"], requires_grad=True))
    assert not fastpath._own_backward_pays(big, torch.randn(8191, SIZES["d_model"], requires_grad=True))
    monkeypatch.setattr(fastpath, "OWN_BACKWARD_FROM_BYTES", 0)
    assert fastpath._own_backward_pays(ffn, x)
    with torch.no_grad():
        assert not fastpath._own_backward_pays(ffn, x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fastpath._own_backward_pays(ffn, x)
    assert not fastpath._own_backward_pays(FeedForward(ModelConfig(**{**SIZES, "activation": "relu"})), x)

    taken = []
    real = fastpath._GELUFeedForward.apply
    monkeypatch.setattr(fastpath._GELUFeedForward, "apply", lambda *a: taken.append(1) or real(*a))
    model = model_for({})
    idx = torch.randint(SIZES["vocab_size"], (B, T))
    _, loss = FastPath(model)(idx, idx)
    assert len(taken) == SIZES["n_layers"]
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="fast_path=off"):
        loss.backward()


@pytest.fixture(params=["onednn", "torch"])
def products(request, monkeypatch):
    """The fast path's float32 products both ways, whichever this CPU measured faster: oneDNN's kernels
    (core.fastpath.onednn_faster says yes) and torch's own (it says no)."""
    from minitf_repl.core import fastpath

    if request.param == "onednn":
        try:
            fastpath._onednn_linear(torch.ones(2, 3), torch.ones(4, 3), None)
        except Exception:
            pytest.skip("this torch has no oneDNN linear")
    monkeypatch.setattr(fastpath, "onednn_faster", lambda: request.param == "onednn")
    return request.param


@pytest.mark.parametrize("changes", [{}, {"bias": False}, {"activation": "swiglu", "n_kv_heads": 1}, {"tie_embeddings": False}],
                         ids=["default", "no-bias", "swiglu-gqa", "untied"])
def test_fast_path_equals_the_readable_path_with_either_products(changes, products):
    test_fast_path_equals_the_readable_explicit_path(changes)


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_every_plain_linear_of_a_block_takes_the_chosen_products(activation, monkeypatch):
    """Where oneDNN was chosen, each block's q/k/v (fused), out, and feed-forward products go through it, SwiGLU's
    three as well as the FFN's two (SwiGLU once called its own module, so its products stayed on MKL), and the
    head's; the loss is the readable path's."""
    from minitf_repl.core import fastpath

    try:
        fastpath._onednn_linear(torch.ones(2, 3), torch.ones(4, 3), None)
    except Exception:
        pytest.skip("this torch has no oneDNN linear")
    monkeypatch.setattr(fastpath, "onednn_faster", lambda: True)
    shapes, real = [], fastpath._onednn_linear
    monkeypatch.setattr(fastpath, "_onednn_linear", lambda x, w, b: shapes.append(tuple(w.shape)) or real(x, w, b))
    model = model_for({"activation": activation})
    idx = torch.randint(SIZES["vocab_size"], (B, T), generator=torch.Generator().manual_seed(1))
    _, loss = FastPath(model)(idx, idx)
    d, ff = SIZES["d_model"], model.blocks[0].ffn
    ffn_shapes = ([tuple(ff.gate_proj.weight.shape), tuple(ff.up_proj.weight.shape), tuple(ff.down_proj.weight.shape)]
                  if activation == "swiglu" else [tuple(ff.fc_in.weight.shape), tuple(ff.fc_out.weight.shape)])
    per_block = [(3 * d, d), (d, d), *ffn_shapes]
    assert shapes == per_block * SIZES["n_layers"] + [tuple(model.lm_head.weight.shape)]
    torch.testing.assert_close(loss, model(idx, idx)[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_equals_torchs(bias, products):
    """_OneDNNLinear's forward and backward against F.linear under autograd: a 3-D input, a plain and an
    expanded upstream gradient (y.sum()), and only the gradients asked for."""
    from minitf_repl.core import fastpath

    torch.manual_seed(0)
    x = torch.randn(B, T, 24, requires_grad=True)
    w = torch.randn(40, 24, requires_grad=True)
    b = torch.randn(40, requires_grad=True) if bias else None
    params = [t for t in (x, w, b) if t is not None]
    mine, reference = fastpath.linear(x, w, b), torch.nn.functional.linear(x, w, b)
    torch.testing.assert_close(mine, reference)
    for upstream in (torch.randn(B, T, 40), None):
        if upstream is None:
            got, want = (torch.autograd.grad(y.sum(), params, retain_graph=True) for y in (mine, reference))
        else:
            got, want = (torch.autograd.grad(y, params, upstream, retain_graph=True) for y in (mine, reference))
        for g, want_g in zip(got, want):
            torch.testing.assert_close(g, want_g, rtol=1e-5, atol=1e-5)
    (dw,) = torch.autograd.grad(fastpath.linear(x, w, b).sum(), [w])  # x's gradient not asked for
    torch.testing.assert_close(dw, torch.autograd.grad(torch.nn.functional.linear(x, w, b).sum(), [w])[0])


def test_onednn_products_only_in_float32_on_the_cpu_outside_autocast(monkeypatch):
    from minitf_repl.core import fastpath

    monkeypatch.setattr(fastpath, "onednn_faster", lambda: True)
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    assert fastpath.onednn_pays(x, w)
    assert not fastpath.onednn_pays(x.double(), w.double())
    assert not fastpath.onednn_pays(x.bfloat16(), w.bfloat16())
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast's own bfloat16 products already use oneDNN
        assert not fastpath.onednn_pays(x, w)
    monkeypatch.setattr(fastpath, "onednn_faster", lambda: False)
    assert not fastpath.onednn_pays(x, w)
    taken = []
    monkeypatch.setattr(fastpath, "_onednn_linear", lambda *a: taken.append(1))
    torch.testing.assert_close(fastpath.product(x, w), x @ w.t())
    assert not taken


def test_onednn_faster_measures_and_answers_no_when_oneDNN_is_slower_wrong_or_missing(monkeypatch):
    """The decision is a measurement: oneDNN made slow, wrong or absent is never taken; and measuring
    leaves the global random stream alone (a seeded run must not depend on when the question came)."""
    import time

    from minitf_repl.core import fastpath

    real = fastpath._onednn_linear

    def answer(op) -> bool:
        monkeypatch.setattr(fastpath, "_onednn_linear", op)
        fastpath.onednn_faster.cache_clear()
        try:
            return fastpath.onednn_faster()
        finally:
            fastpath.onednn_faster.cache_clear()

    def slow(*a):
        time.sleep(0.003)
        return real(*a)

    def missing(*a):
        raise RuntimeError("no such op")

    assert answer(slow) is False
    assert answer(lambda x, w, b: torch.zeros(x.shape[0], w.shape[0])) is False
    assert answer(missing) is False
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    answer(real)
    assert torch.equal(torch.rand(3), expected)


def test_onednn_faster_tries_again_when_a_moment_of_interference_spoils_an_attempt(monkeypatch):
    """A oneDNN slowed only during the first attempt (another program on the core for a moment) is
    still taken; here its later calls are instant, so the answer does not depend on this CPU."""
    import time

    from minitf_repl.core import fastpath

    real, calls, first_attempt = fastpath._onednn_linear, [], 3 * (1 + fastpath.ONEDNN_WARM_ROUNDS + fastpath.ONEDNN_ROUNDS)
    answers: dict = {}

    def interfered(x, w, b):
        calls.append(1)
        key = (x.data_ptr(), w.data_ptr(), tuple(x.stride()), tuple(w.stride()))
        if key not in answers:
            answers[key] = real(x, w, b)  # the first call of each product is the real one: the answers are checked
        if len(calls) <= first_attempt:
            time.sleep(0.003)
        return answers[key]

    monkeypatch.setattr(fastpath, "_onednn_linear", interfered)
    fastpath.onednn_faster.cache_clear()
    try:
        assert fastpath.onednn_faster() is True
        # the second and third attempts said yes (two are needed since a fifty-third session)
        assert first_attempt + 3 * fastpath.ONEDNN_ROUNDS < len(calls) <= first_attempt + 6 * fastpath.ONEDNN_ROUNDS
    finally:
        fastpath.onednn_faster.cache_clear()


@pytest.mark.parametrize("changes", [{}, {"n_kv_heads": 1}], ids=["default", "gqa"])
def test_cached_decoding_equals_the_readable_cache_with_either_products(changes, products):
    test_cached_decoding_on_the_fast_path_equals_the_readable_cache(changes)


def test_onednn_gets_only_dense_operands(monkeypatch):
    """oneDNN runs odd strides through a slow reference kernel, so `product` hands it contiguous matrices or
    plain transposes of them, copying anything else, and computes the same numbers."""
    from minitf_repl.core import fastpath

    monkeypatch.setattr(fastpath, "onednn_faster", lambda: True)
    seen = []
    real = fastpath._onednn_linear
    monkeypatch.setattr(fastpath, "_onednn_linear", lambda x, w, b: seen.append((x, w)) or real(x, w, b))
    wide = torch.randn(64, 24)
    rows_apart = wide[:, 8:]  # (64, 16), its rows 24 numbers apart
    dy = torch.randn(64, 10)
    for x, w in ((dy.t(), rows_apart.t()), (rows_apart, torch.randn(10, 16)), (torch.randn(3, 64, 16)[:, ::2], torch.randn(10, 16))):
        want = torch.nn.functional.linear(x, w)
        torch.testing.assert_close(fastpath.product(x, w), want)
        for t in seen[-1]:
            assert t.is_contiguous() or (t.dim() == 2 and t.t().is_contiguous())
    assert seen[0][0] is not None and seen[0][0].data_ptr() == dy.data_ptr()  # a plain transpose is not copied


# --- the attention kernel's dtype under bfloat16 autocast: measured per shape ---------------------------
def test_attention_runs_in_bfloat16_only_in_training_where_measured_faster(monkeypatch):
    """Float32 queries need nothing; bfloat16 ones in a training step take bfloat16 from the measured
    threshold on; without grad (decoding, evaluation) nothing is measured and float32 stays; off the CPU
    autocast's own choice stands."""
    from minitf_repl.core import fastpath

    asked = []
    answer = {"speedup": 2.0}
    monkeypatch.setattr(fastpath, "bf16_attention_speedup", lambda *shape: asked.append(shape) or answer["speedup"])
    q = torch.randn(2, 4, 8, 6, requires_grad=True)
    assert fastpath.attention_in_float32(q, 4) and asked == []
    q16 = q.detach().bfloat16().requires_grad_()
    assert not fastpath.attention_in_float32(q16, 2) and asked == [(2, 4, 2, 8, 6)]
    answer["speedup"] = fastpath.ATTENTION_BF16_FROM_SPEEDUP * 0.99
    assert fastpath.attention_in_float32(q16, 2)
    answer["speedup"] = fastpath.ATTENTION_BF16_FROM_SPEEDUP
    assert not fastpath.attention_in_float32(q16, 2)
    asked.clear()
    with torch.no_grad():
        assert fastpath.attention_in_float32(q16, 2)
    assert fastpath.attention_in_float32(q16.detach(), 2) and asked == []
    assert not fastpath.attention_in_float32(torch.empty(2, 4, 8, 6, device="meta"), 4)


@pytest.mark.parametrize("bf16_kernel", [True, False], ids=["bf16-kernel", "float32-kernel"])
def test_fast_path_under_autocast_takes_the_measured_attention_dtype(bf16_kernel, monkeypatch):
    """Under bfloat16 autocast the fused kernel sees the dtype the measurement chose, and either way the
    step computes the readable model's loss and gradients to bfloat16's precision."""
    from minitf_repl.core import fastpath

    monkeypatch.setattr(fastpath, "bf16_attention_speedup", lambda *shape: 9.0 if bf16_kernel else 0.5)
    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, *a, **k: seen.append(q.dtype) or sdpa(q, *a, **k))
    model = model_for({"n_kv_heads": 2})
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(SIZES["vocab_size"], (B, T), generator=g)
    _, loss, grads = loss_and_grads(model, model, idx, idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, fast_loss, fast_grads = loss_and_grads(FastPath(model), model, idx, idx)
    assert seen == [torch.bfloat16 if bf16_kernel else torch.float32] * SIZES["n_layers"]
    torch.testing.assert_close(fast_loss.float(), loss, atol=0.05, rtol=0.02)
    for name in grads:
        g, want = fast_grads[name], grads[name]
        assert g.dtype is torch.float32 and torch.isfinite(g).all(), name
        assert (g - want).norm() <= 0.1 * want.norm() + 1e-4, name


def test_bf16_attention_speedup_is_a_measurement_that_fails_to_float32(monkeypatch):
    """A positive speed ratio, measured without touching the global random stream, in fewer rounds where
    the kernel is slow; a kernel that fails answers 0 (float32)."""
    from minitf_repl.core import fastpath

    measure = fastpath.bf16_attention_speedup.__wrapped__  # around the per-process cache
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert measure(2, 4, 2, 8, 8) > 0
    assert torch.equal(torch.rand(3), expected)

    calls = []
    kernels = fastpath.flash_kernels()
    monkeypatch.setattr(fastpath, "flash_kernels", lambda: (lambda *a: calls.append(1) or kernels[0](*a), kernels[1]))
    measure(2, 4, 2, 8, 8)
    assert len(calls) == 2 * (fastpath.ATTENTION_WARM_ROUNDS + fastpath.ATTENTION_ROUNDS)
    calls.clear()
    monkeypatch.setattr(fastpath, "ATTENTION_SLOW_ROUND_S", 0.0)  # a kernel slower than the budget: two timed rounds
    measure(2, 4, 2, 8, 8)
    assert len(calls) == 2 * (fastpath.ATTENTION_WARM_ROUNDS + 2)

    def missing(*a, **k):
        raise RuntimeError("no bfloat16 kernel")

    monkeypatch.setattr(fastpath, "flash_kernels", lambda: (missing, missing))
    assert measure(2, 4, 2, 8, 8) == 0.0


def test_bf16_attention_speedup_times_the_kernels_a_cpu_training_step_runs_and_builds_no_graph(monkeypatch):
    """The measurement calls the flash-attention ops that scaled_dot_product_attention dispatches to for a
    CPU training step (forward and backward), and never autograd's backward: a `.backward()` there had kept
    35-40 MB of a first `:train`'s peak memory (core/fastpath.py)."""
    from minitf_repl.core import fastpath

    forward, backward = fastpath.flash_kernels()
    q, k, v = (torch.randn(2, 4, 8, 8, requires_grad=True) for _ in range(3))
    with torch.profiler.profile() as prof:
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
    ran = {event.key for event in prof.key_averages()}
    assert {forward._qualified_op_name, backward._qualified_op_name} <= ran, ran

    def no_autograd(*a, **k):
        raise AssertionError("the measurement ran autograd's backward")

    monkeypatch.setattr(torch.autograd, "backward", no_autograd)
    monkeypatch.setattr(torch.Tensor, "backward", no_autograd)
    assert fastpath.bf16_attention_speedup.__wrapped__(2, 4, 2, 8, 8) > 0
