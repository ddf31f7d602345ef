"""How the views see inside the model without a print in it: probes, the steps a part states, one listening pass.

`Probe` is the identity module a forward hook reads a tensor through. `Step` is what a part of the
model says about one of its steps (a child module or a probe) for the shape trace: the formula, the
symbols of its shapes. `listening` runs the one kind of pass every view makes: eval mode (dropout
off), no gradients, forward hooks on the modules it is given, and everything (hooks, each module's
training flag, the attention path) restored afterwards, even when the forward raises.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator

import torch
import torch.nn as nn


class Probe(nn.Identity):
    """Returns its input unchanged. It exists so that a hook can see the tensor at this point."""


@dataclass(frozen=True)
class Step:
    """What a part says about one of its steps, for `:shapes`.

    `shape` names the output's axes with the model's symbols (`("B", "h", "T", "d_k")`, see the
    model's `symbols()`); `input` names the input's where they differ (a projection, a split); empty:
    the step's shapes are shown as numbers. `idle`: the step does nothing at inference (dropout).
    """

    formula: str
    shape: tuple[str, ...] = ()
    input: tuple[str, ...] | None = None
    idle: bool = False


@contextlib.contextmanager
def listening(model: nn.Module, hooks: Iterable[tuple[nn.Module, Callable]] = (),
              explicit_attention: bool = False, gradients: bool = False) -> Iterator[None]:
    """One pass that only listens: `model` in eval mode under no_grad, with `hooks` [(module, hook)] registered.

    With explicit_attention the model computes the explicit formula for the pass
    (MiniTransformerLM.explicit_attention), so that the score and weight probes fire; the weights
    are the same. With gradients the pass keeps its graph (still eval mode: dropout off), for a
    view that asks autograd about the loss (`core.backprop`). The hooks are removed and every
    module's training flag is restored on the way out.
    """
    modes = {module: module.training for module in model.modules()}
    handles = []
    path = model.explicit_attention() if explicit_attention else contextlib.nullcontext()
    try:
        for module, hook in hooks:
            handles.append(module.register_forward_hook(hook))
        model.eval()
        with path, torch.enable_grad() if gradients else torch.no_grad():
            yield
    finally:
        for handle in handles:
            handle.remove()
        for module, was_training in modes.items():
            module.training = was_training
