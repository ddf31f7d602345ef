"""Int8 weights for sampling: every Linear layer's matrix as int8 with one scale per output channel.

Symmetric per-output-channel quantisation of a weight matrix W (d_out x d_in). Row o (output
channel o) gets its own scale, so a row of small weights keeps its precision next to a row of
large ones:

    s_o  = max_i |W_oi| / 127                  one float per output channel
    q_oi = round(W_oi / s_o)  in [-127, 127]   one int8 per weight (a quarter of float32's bytes)
    W_oi ~ s_o q_oi,  |W_oi - s_o q_oi| <= s_o / 2

The scale does not depend on i, so it factors out of the sum in the matrix product:

    y_o = sum_i x_i W_oi + b_o  ~  s_o (sum_i x_i q_oi) + b_o

`Int8Linear` computes exactly that: the product with q (cast to the input's float type), then one
multiplication per output by s_o. The error is bounded per output: |y_o - y~_o| <= ||x||_1 s_o / 2
(tested). "Symmetric": zero maps to zero and no offset is stored. Only the weights are int8; the
input stays float ("weight-only" quantisation), and embeddings, norms and biases stay float32.

It is for inference only (no gradients through int8), so the quantized model is a *copy* on the
CPU, made for sampling, and the trained float model stays as it was. The copy keeps the model's
module names (`blocks.0.attn.q_proj.weight` is now int8, `...q_proj.scale` its scales), so a shape
trace or a state dict reads the same.

Why not torch's own: `torch.ao.quantization.quantize_dynamic` (one scale per matrix, activations
quantized on the fly) is deprecated and due to be removed from torch, and torchao is a heavy
dependency for a teaching feature. This is a few lines of plain torch that any torch 2.x runs.

`quantize_for_sampling(model)` makes the copy; `measure(model, qmodel, trainer, prompt_ids)`
compares the two on what a person cares about: bytes of the saved weights, tokens per second when
generating, and the validation loss on the same batches (`Trainer.evaluate`, float32 evaluation).
"""

from __future__ import annotations

import copy
import io
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import GenConfig
from .errors import UserError
from .generate import generate

QMAX = 127  # int8 holds -128..127; the symmetric range leaves -128 out, so q and -q both fit


class Int8Linear(nn.Module):
    """y = s * (x q^T) + b: a Linear layer whose weight is int8 q with one float scale s per output channel."""

    def __init__(self, weight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        self.out_features, self.in_features = weight.shape
        # Buffers, not parameters: nothing trains an int8 copy, and state_dict() still saves them.
        self.register_buffer("weight", weight)  # (d_out, d_in) int8
        self.register_buffer("scale", scale)  # (d_out,) float32
        self.register_buffer("bias", bias)  # (d_out,) float32, or None

    @classmethod
    @torch.no_grad()
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        w = linear.weight.detach().float()  # (d_out, d_in)
        absmax = w.abs().amax(dim=1)  # (d_out,): the largest weight of each output channel
        scale = absmax.clamp(min=torch.finfo(torch.float32).tiny) / QMAX  # an all-zero row keeps q = 0
        q = torch.round(w / scale[:, None]).clamp(-QMAX, QMAX).to(torch.int8)  # (d_out, d_in)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        return cls(q, scale, bias)

    def dequantized(self) -> torch.Tensor:
        """s_o q_oi: the float matrix this layer multiplies by, within s_o / 2 of the original."""
        return self.weight.float() * self.scale[:, None]  # (d_out, d_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (..., d_in). The product runs on q as floats (exact: |q| <= 127), the scale after it.
        y = F.linear(x, self.weight.to(x.dtype)) * self.scale.to(x.dtype)  # (..., d_out)
        return y if self.bias is None else y + self.bias.to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


@dataclass
class QuantizeMeasure:
    """The float model and its int8 copy, side by side (both on the CPU)."""

    bytes_before: int  # torch.save of the float model's state dict (the tied embedding/head matrix once)
    bytes_after: int  # the same for the int8 copy
    linear_layers: int  # Linear layers now int8
    n_tokens: int  # tokens generated for each timing (greedy, from the same prompt)
    tokens_per_second_before: float  # median of the repeats
    tokens_per_second_after: float  # the int8 copy's, likewise
    # of n_tokens, how many the int8 copy picked exactly as the float model did before the first it picked otherwise
    # (after it the two continue different texts, and a later token alike at the same place is chance)
    same_tokens: int
    val_loss_before: float | None  # on the same validation batches (None: no validation data)
    val_loss_after: float | None  # the int8 copy's (None likewise)
    accuracy_before: float | None = None  # exact-match accuracy (tasks only)
    accuracy_after: float | None = None  # the int8 copy's (tasks only)
    device: str = "cpu"  # where both were timed and scored: always "cpu"
    repeats: int = 3  # timings of each model, alternating, after one warm-up; the speeds are their median
    cache: bool = True  # timed with the KV cache (off: every token recomputes the prefix), as :gen samples
    # why the val loss is None (the data gives no batch), and what to do: a table's "-" alone did not say it
    val_missing: str | None = None


@torch.no_grad()
def quantize_for_sampling(model: nn.Module) -> nn.Module:
    """An int8 copy of `model` for sampling: every Linear layer an Int8Linear, on the CPU, in eval mode.

    The output head, tied to the token embedding in the float model, becomes an int8 matrix of its
    own; the embedding lookup stays float32 (a lookup has no product to save).
    """
    qmodel = copy.deepcopy(model).cpu().eval()
    linears = [(name, m) for name, m in qmodel.named_modules() if type(m) is nn.Linear]  # listed before any change
    for name, linear in linears:
        parent_name, _, child = name.rpartition(".")
        setattr(qmodel.get_submodule(parent_name), child, Int8Linear.from_linear(linear))
    return qmodel


def state_dict_bytes(model: nn.Module) -> int:
    """Bytes of `torch.save(model.state_dict())`: what these weights take written so (an int8 copy too; the lab's own
    checkpoints hold float32 weights in safetensors, a few hundred bytes apart)."""
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell()


def count_quantized(model: nn.Module) -> int:
    """Linear layers of `model` whose weights are int8."""
    return sum(1 for m in model.modules() if isinstance(m, Int8Linear))


def _greedy(model: nn.Module, prompt_ids: list[int], n_tokens: int, cache: bool = True) -> tuple[list[int], float]:
    start = time.perf_counter()
    ids = list(generate(model, prompt_ids, GenConfig(n=n_tokens, temperature=0.0, cache=cache)))
    return ids, time.perf_counter() - start


def measure(model: nn.Module, qmodel: nn.Module, trainer, prompt_ids: list[int], n_tokens: int = 64,
            repeats: int = 3, cache: bool = True) -> QuantizeMeasure:
    """Size, greedy-decoding speed and validation loss of `model` and its int8 copy `qmodel`.

    Both run on the CPU (a model elsewhere is copied there), alternately, `repeats` times after a
    warm-up; the speeds are medians, decoding with the KV cache or without it (`cache`: as :gen
    samples). The validation loss uses the trainer's own batches.
    """
    reference = model if next(model.parameters()).device.type == "cpu" else copy.deepcopy(model).cpu()
    times: dict[str, list[float]] = {"float": [], "int8": []}
    tokens: dict[str, list[int]] = {}
    for name, m in (("float", reference), ("int8", qmodel)):
        _greedy(m, prompt_ids, min(4, n_tokens), cache)  # warm-up: first-call allocations and kernel choice
    for _ in range(repeats):
        for name, m in (("float", reference), ("int8", qmodel)):
            ids, seconds = _greedy(m, prompt_ids, n_tokens, cache)
            times[name].append(seconds)
            tokens[name] = ids
    pairs = list(zip(tokens["float"], tokens["int8"]))
    same = next((k for k, (a, b) in enumerate(pairs) if a != b), len(pairs))  # alike up to the first difference
    val_before, acc_before, missing = _evaluate(trainer, reference)
    val_after, acc_after, _ = _evaluate(trainer, qmodel)
    return QuantizeMeasure(
        bytes_before=state_dict_bytes(reference), bytes_after=state_dict_bytes(qmodel),
        linear_layers=count_quantized(qmodel), n_tokens=n_tokens,
        tokens_per_second_before=n_tokens / max(statistics.median(times["float"]), 1e-9),
        tokens_per_second_after=n_tokens / max(statistics.median(times["int8"]), 1e-9),
        same_tokens=same, val_loss_before=val_before, val_loss_after=val_after,
        accuracy_before=acc_before, accuracy_after=acc_after, repeats=repeats, cache=cache, val_missing=missing,
    )


def _evaluate(trainer, model) -> tuple[float | None, float | None, str | None]:
    """Validation loss and accuracy, and why there are none where the data gives no batch."""
    try:
        return *trainer.evaluate(model), None
    except UserError as e:  # e.g. a checkpoint whose data is gone: its vocabulary generates, nothing evaluates
        return None, None, str(e)
