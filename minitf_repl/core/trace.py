"""A shape trace: one forward pass, one record per step, in the order the steps ran.

Forward hooks on every leaf module (the Linear layers, norms, dropouts and the `Probe` identities
inside attention) see each step's input and output. The model's forward() is left untouched; the
trace only listens (core.probe.listening). What each step computes, and the symbols of its shapes,
the part it belongs to says (its `steps()`, core.model): the trace asks the parent of each step and
never decides by a module's name or kind. The records are plain data: a UI turns them into a table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from .errors import DataError
from .probe import Probe, Step, listening

_LAYER = re.compile(r"(?:^|\.)blocks\.(\d+)\.")


@dataclass
class TraceRecord:
    path: str  # module path from named_modules(), e.g. "blocks.0.attn.hook_q"
    kind: str  # class name: Linear, LayerNorm, Probe, ...
    formula: str  # what the step computes, as its part states it ("router logits r = xW_r"); "": it states none
    input_shapes: list[tuple[int, ...]]  # the shape of each tensor passed to the module positionally, in order
    output_shape: tuple[int, ...]  # the shape of its output (of a tuple's first item); (): not a tensor
    dtype: str  # of the output, e.g. "float32"
    n_params: int  # parameters this module owns directly; a shared tensor counts at its first owner only
    layer: int | None  # block index, None outside the blocks
    # What its part says about the step (the symbols of its shapes, whether it is idle at inference),
    # for the shape renderer; not part of the --json output (the formula above is).
    step: Step | None = field(default=None, metadata={"view_only": True})


def _steps_of(model: nn.Module) -> dict[str, Step]:
    """Every step's statement by its module path, from each part's `steps()` (keyed by its children's names)."""
    out = {}
    for path, module in model.named_modules():
        steps = getattr(module, "steps", None)
        if callable(steps):
            prefix = f"{path}." if path else ""
            out.update({prefix + name: step for name, step in steps().items()})
    return out


def _shape(value) -> tuple[int, ...] | None:
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def parameter_owners(model: nn.Module) -> tuple[dict[str, int], dict[str, str]]:
    """Per module path: how many parameters it owns, and which module it shares a weight with.

    Walking named_modules() in registration order gives a tied tensor to its first owner (the token
    embedding, registered before lm_head), so the counts add up to `num_parameters()`.
    """
    first_owner: dict[int, str] = {}
    counts: dict[str, int] = {}
    tied: dict[str, str] = {}
    for path, module in model.named_modules():
        counts[path] = 0
        for p in module.parameters(recurse=False):
            if id(p) in first_owner:
                tied[path] = first_owner[id(p)]
                tied.setdefault(first_owner[id(p)], path)
            else:
                first_owner[id(p)] = path
                counts[path] += p.numel()
    return counts, tied


def check_token_ids(model: nn.Module, idx) -> torch.Tensor:
    if not isinstance(idx, torch.Tensor):  # forward's words (a list of ids needs wrapping, not encoding)
        raise DataError(f"idx must be a tensor of token ids, got {type(idx).__name__}; wrap it: torch.tensor([[...]]) "
                        "for a batch of one")
    if idx.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise DataError(f"token ids must be whole numbers, got dtype {idx.dtype}; pass a LongTensor")
    if idx.dim() == 1:
        idx = idx.unsqueeze(0)  # (1, T): a single sequence is a batch of one
    if idx.dim() != 2 or idx.numel() == 0:
        raise DataError(f"token ids must have shape (T,) or (B, T) with T >= 1, got {tuple(idx.shape)}")
    param = next(model.parameters(), None)
    idx = idx.to(device=param.device if param is not None else idx.device, dtype=torch.long)
    own = getattr(model, "check_input", None)  # a model that checks its input: its checks, in forward's words
    if callable(own):
        return own(idx)[0]
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is not None and (idx.min() < 0 or idx.max() >= vocab):
        raise DataError(f"token ids must be in 0..{vocab - 1}, got {idx.min().item()}..{idx.max().item()}")
    return idx


def trace(model: nn.Module, idx: torch.Tensor) -> list[TraceRecord]:
    """Run `model` once on `idx` ((B, T) or (T,) token ids) and record every step in execution order.

    The pass runs in eval mode (dropout off, so shapes and values are those of inference) under
    no_grad; each module's training flag is restored afterwards. Hooks sit on every leaf module,
    `Probe`s included, and are removed even when the forward raises (e.g. an input longer than
    max_seq_len, which raises DataError).

    With `attention="sdpa"` the fused kernel computes scores, mask and softmax internally, so the
    hook_scores, hook_masked_scores and hook_weights probes (and attn_dropout) never fire and have
    no records; hook_q/k/v, hook_weighted and hook_merged still do.
    """
    idx = check_token_ids(model, idx)
    counts, _ = parameter_owners(model)
    steps = _steps_of(model)
    records: list[TraceRecord] = []

    def make_hook(path: str):
        layer_match = _LAYER.search(path)
        layer = int(layer_match.group(1)) if layer_match else None
        step = steps.get(path)

        def hook(mod, inputs, output):
            out = output[0] if isinstance(output, (tuple, list)) else output
            records.append(
                TraceRecord(
                    path=path,
                    kind=type(mod).__name__,
                    formula=step.formula if step is not None else "",
                    input_shapes=[s for s in map(_shape, inputs) if s is not None],
                    output_shape=_shape(out) or (),
                    dtype=str(out.dtype).removeprefix("torch.") if isinstance(out, torch.Tensor) else "",
                    n_params=counts.get(path, 0),
                    layer=layer,
                    step=step,
                )
            )

        return hook

    hooks = [(module, make_hook(path)) for path, module in model.named_modules()
             if module is not model and (isinstance(module, Probe) or next(module.children(), None) is None)]
    with listening(model, hooks):
        model(idx)
    return records


# --- what the trace cannot say of a part of a caller's own -------------------------------------------
@dataclass
class HeldParameters:
    """Parameters a part holds itself, beside its children (a gate on a subclass of attention). The trace listens to
    the leaf modules only, so no record counts them: the view says whose they are, not "they did not run"."""

    path: str  # the part's module path ("" for the model itself)
    kind: str  # its class name
    n_params: int
    layer: int | None  # its block, None outside the blocks


def held_parameters(model: nn.Module) -> list[HeldParameters]:
    """Each part with children that holds parameters of its own (none of core.model's parts does)."""
    counts, _ = parameter_owners(model)
    held = []
    for path, module in model.named_modules():
        if counts.get(path) and next(module.children(), None) is not None:
            layer = _LAYER.search(path + ".")
            held.append(HeldParameters(path, type(module).__name__, counts[path],
                                       int(layer.group(1)) if layer else None))
    return held


def unstated_parts(model: nn.Module, records: list[TraceRecord]) -> list[str]:
    """"path (Class)" of each part whose steps ran with no statement of theirs, in the order they ran.

    Every part of core.model states its steps (`steps()`), so a record without one belongs to a module of a
    caller's own (`block.ffn = MyFFN()`): the part named is the one below the nearest ancestor that states steps,
    the module set by hand, whose own children (MyFFN's Linear) the trace shows in numbers only.
    """
    parts: dict[str, str] = {}
    for r in records:
        if r.step is not None:
            continue
        path = r.path
        while "." in path:
            parent = path.rpartition(".")[0]
            if callable(getattr(model.get_submodule(parent), "steps", None)):
                break
            path = parent
        parts.setdefault(path, f"{path} ({type(model.get_submodule(path)).__name__})")
    return list(parts.values())
