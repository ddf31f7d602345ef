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

from .interrupts import held


class Probe(nn.Identity):
    """Returns its input unchanged. It exists so that a hook can see the tensor at this point."""


@dataclass(frozen=True)
class Step:
    """What a part says about one of its steps, for `:shapes`.

    `shape` names the output's axes with the model's symbols (`("B", "n_h", "T", "d_k")`, see the
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
    handles = []
    path = model.explicit_attention() if explicit_attention else contextlib.nullcontext()
    with evaluating(model):
        try:
            with held():  # a Ctrl-C (an interruptible view) while the hooks go on waits for all of them: see below
                for module, hook in hooks:
                    handles.append(module.register_forward_hook(hook))
            with path, torch.enable_grad() if gradients else torch.no_grad():
                yield
        finally:
            # Cut short here, the clean-up left the rest of the hooks on the model for good, and every later
            # :train step ran through them (the readable path, not the fast one)
            with held():
                for handle in handles:
                    handle.remove()


@contextlib.contextmanager
def evaluating(model: nn.Module, keep_last_forward: bool = False) -> Iterator[None]:
    """`model` in eval mode (dropout off) for the block, and every module's training flag put back afterwards.

    A Ctrl-C inside an interruptible view raises KeyboardInterrupt wherever the view is: one that came while the
    flags were being put back left half the model in eval mode (`:heads` stopped at once did). Setting and
    putting back are each done whole (core.interrupts.held); the Ctrl-C is raised once they are.
    """
    modes = {module: module.training for module in model.modules()}
    try:
        with held():
            model.eval()
        yield
    finally:
        with held():
            for module, was_training in modes.items():
                module.training = was_training
            # what the pass left on the model for its loss (a mixture's routing stats, whose aux loss keeps the
            # pass's graph: after :muon one batch's activations) is the view's, read by now: freed here. The
            # trainer's own passes (no graph) keep theirs: moe_stats() after trainer.run() reads its evaluation.
            forget = None if keep_last_forward else getattr(model, "forget_last_forward", None)
            if forget is not None:
                forget()
