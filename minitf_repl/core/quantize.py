"""Int8 weights for sampling: dynamic quantization of the Linear layers, and what it costs and saves.

Dynamic quantization stores each `nn.Linear` weight as int8 with one float scale per matrix
(w ~ scale * q, q in [-128, 127]); at run time each input is quantized on the fly, the product is
computed in integers and the result scaled back to float. Embeddings and LayerNorms stay float32.
It is for inference only (no gradients through int8), so the quantized model is a *copy* on the
CPU, made for sampling, and the trained float model stays as it was.

`quantize_for_sampling(model)` makes the copy; `measure(model, qmodel, trainer, prompt_ids)`
compares the two on what a person cares about: bytes of the saved weights, tokens per second when
generating, and the validation loss on the same batches (`Trainer.evaluate`, float32 evaluation).

torch 2.13 still ships `torch.ao.quantization.quantize_dynamic`, marked deprecated in favour of
torchao; torchao is a heavy dependency for a one-call feature, so this keeps the built-in path and
hides its deprecation warning. Where it is gone or no quantized engine exists, a UserError says so.
"""

from __future__ import annotations

import copy
import io
import statistics
import time
import warnings
from dataclasses import dataclass

import torch
import torch.nn as nn

from .errors import UserError
from .generate import generate


@dataclass
class QuantizeMeasure:
    """The float model and its int8 copy, side by side (both on the CPU)."""

    bytes_before: int  # the saved state dict of the float model (the tied embedding/head matrix once)
    bytes_after: int  # the same for the int8 copy
    linear_layers: int  # Linear layers now int8
    n_tokens: int  # tokens generated for each timing (greedy, from the same prompt)
    tokens_per_second_before: float  # median of the repeats
    tokens_per_second_after: float
    same_tokens: int  # of n_tokens, how many the int8 copy picked exactly as the float model did
    val_loss_before: float | None  # on the same validation batches (None: no validation data)
    val_loss_after: float | None
    accuracy_before: float | None = None  # exact-match accuracy (tasks only)
    accuracy_after: float | None = None
    device: str = "cpu"
    repeats: int = 3


def quantize_for_sampling(model: nn.Module) -> nn.Module:
    """An int8 copy of `model` for sampling: its Linear layers dynamically quantized, on the CPU, in eval mode."""
    engines = torch.backends.quantized.supported_engines
    if not any(e != "none" for e in engines):
        raise UserError("this PyTorch build has no quantized engine, so int8 sampling is not available here")
    try:
        from torch.ao.quantization import quantize_dynamic
    except ImportError:
        raise UserError("this PyTorch has no torch.ao.quantization.quantize_dynamic; int8 sampling needs it") from None
    float_copy = copy.deepcopy(model).cpu().eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the deprecation of torch.ao.quantization (see the module docstring)
        return quantize_dynamic(float_copy, {nn.Linear}, dtype=torch.qint8)


def state_dict_bytes(model: nn.Module) -> int:
    """Bytes of `torch.save(model.state_dict())`: what a checkpoint of these weights would take."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(model.state_dict(), buffer)
    return buffer.tell()


def count_quantized(model: nn.Module) -> int:
    """Linear layers of `model` whose weights are int8 (dynamically quantized)."""
    return sum(1 for m in model.modules() if type(m).__name__ == "Linear" and "quantized" in type(m).__module__)


def _greedy(model: nn.Module, prompt_ids: list[int], n_tokens: int) -> tuple[list[int], float]:
    start = time.perf_counter()
    ids = list(generate(model, prompt_ids, n_tokens, temperature=0.0))
    return ids, time.perf_counter() - start


def measure(model: nn.Module, qmodel: nn.Module, trainer, prompt_ids: list[int], n_tokens: int = 64,
            repeats: int = 3) -> QuantizeMeasure:
    """Size, greedy-decoding speed and validation loss of `model` and its int8 copy `qmodel`.

    Both run on the CPU (a model elsewhere is copied there), alternately, `repeats` times after a
    warm-up; the speeds are medians. The validation loss uses the trainer's own batches.
    """
    reference = model if next(model.parameters()).device.type == "cpu" else copy.deepcopy(model).cpu()
    times: dict[str, list[float]] = {"float": [], "int8": []}
    tokens: dict[str, list[int]] = {}
    for name, m in (("float", reference), ("int8", qmodel)):
        _greedy(m, prompt_ids, min(4, n_tokens))  # warm-up: first-call allocations and kernel choice
    for _ in range(repeats):
        for name, m in (("float", reference), ("int8", qmodel)):
            ids, seconds = _greedy(m, prompt_ids, n_tokens)
            times[name].append(seconds)
            tokens[name] = ids
    same = sum(a == b for a, b in zip(tokens["float"], tokens["int8"]))
    val_before, acc_before = _evaluate(trainer, reference)
    val_after, acc_after = _evaluate(trainer, qmodel)
    return QuantizeMeasure(
        bytes_before=state_dict_bytes(reference), bytes_after=state_dict_bytes(qmodel),
        linear_layers=count_quantized(qmodel), n_tokens=n_tokens,
        tokens_per_second_before=n_tokens / max(statistics.median(times["float"]), 1e-9),
        tokens_per_second_after=n_tokens / max(statistics.median(times["int8"]), 1e-9),
        same_tokens=same, val_loss_before=val_before, val_loss_after=val_after,
        accuracy_before=acc_before, accuracy_after=acc_after, repeats=repeats,
    )


def _evaluate(trainer, model) -> tuple[float | None, float | None]:
    try:
        return trainer.evaluate(model)
    except UserError:  # e.g. a checkpoint whose data is gone: its vocabulary generates, nothing evaluates
        return None, None
