"""Ablations: switch one part of a trained model off, without touching a weight, and see what it did.

Each ablation is a set of forward hooks on the model's modules and probes (the mask: a flag of each
attention layer), so it is undone exactly by removing them (`Ablations.clear()`), and the weights, the
optimizer and any checkpoint never see it. What can be switched off:

    head=L.H    zero the output O_h = A_h V_h of head H in block L (before the heads are merged)
    mask        drop the causal mask M: every position sees the whole window, future included (causal=off
                for a while: each attention layer's `causal` flag is switched off, and back by `clear()`)
    positions   drop the position information (the table P, or the rotation of q and k)
    block=L     skip block L: its input passes straight through, h_L = h_{L-1}

Every ablation works on either attention path: the hooks sit on probes both paths call, and the mask
is a flag both read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from .errors import UserError
from .interrupts import held
from .words import count

_HEAD = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class Ablation:
    kind: str  # head | mask | positions | block
    layer: int | None = None
    head: int | None = None

    def __str__(self) -> str:
        if self.kind == "head":
            return f"head {self.layer}.{self.head}"
        if self.kind == "block":
            return f"block {self.layer}"
        return {"mask": "the causal mask", "positions": "the positions"}[self.kind]

    @property
    def typed(self) -> str:
        """As `:ablate` takes it (parse_ablation's own words): head=0.1, block=2, mask, positions."""
        if self.kind == "head":
            return f"head={self.layer}.{self.head}"
        return f"block={self.layer}" if self.kind == "block" else self.kind


def parse_ablation(text: str, n_layers: int, n_heads: int) -> Ablation:
    """`head=L.H`, `mask`, `positions` or `block=L` -> an Ablation checked against the model's size."""
    kind, _, value = text.strip().partition("=")
    kind = kind.strip().lower()
    if kind in ("mask", "positions") and not value:
        return Ablation(kind)
    if kind == "head":
        m = _HEAD.match(value.strip())
        if m is None:
            raise UserError(f"head takes BLOCK.HEAD, e.g. head=0.1; got {value!r}")
        layer, head = int(m.group(1)), int(m.group(2))
        # "block", as block=L says it: "layer must be in 0..3 (the model has 4 blocks)" named one thing two ways
        _check_index("the block of head=L.H", layer, n_layers, f"the model has {count(n_layers, 'block')}")
        _check_index("head", head, n_heads, f"each block has {count(n_heads, 'head')}")
        return Ablation("head", layer, head)
    if kind == "block":
        if not value.strip().isdigit():
            raise UserError(f"block takes a block number, e.g. block=0; got {value!r}")
        layer = int(value)
        _check_index("block", layer, n_layers, f"the model has {count(n_layers, 'block')}")
        return Ablation("block", layer)
    raise UserError(f"cannot ablate {text.strip()[:40]!r}; choose head=L.H, mask, positions or block=L")


def _check_index(what: str, index: int, size: int, has: str) -> None:
    """`has`: what the size counts, said beside the range (head=0.5 was told "the model has 2": 2 of what?)."""
    if not 0 <= index < size:
        raise UserError(f"{what} must be in 0..{size - 1} ({has}), got {index}")


KINDS = ("head", "mask", "positions", "block")  # as `:ablate` lists them: its help's order


def listed(ablations) -> list[Ablation]:
    """Ablations by kind, then block and head (in the order they came, `block=1` then `block=0 block=3` read
    "block 1, block 0, block 3")."""
    return sorted(ablations, key=lambda a: (KINDS.index(a.kind), a.layer if a.layer is not None else -1,
                                            a.head if a.head is not None else -1))


@dataclass
class Ablations:
    """The ablations on one model, with the hooks that make them; `clear()` restores the model exactly."""

    model: nn.Module
    active: list[Ablation] = field(default_factory=list)
    _handles: list = field(default_factory=list)  # hook handles, and _Undo for the mask: each has remove()

    def add(self, ablation: Ablation) -> None:
        if ablation in self.active:
            return
        # Whole or not at all for a Ctrl-C (core.interrupts.held): one that came while a block's hooks went on left
        # hooks that no clear() knew of, and the part stayed switched off for every later :train and view
        with held():
            self._handles.extend(_hooks(self.model, ablation))
            self.active.append(ablation)

    def clear(self) -> None:
        with held():
            for handle in reversed(self._handles):
                handle.remove()
            self._handles, self.active = [], []


def _skip(block: nn.Module) -> list:
    """h_L = h_{L-1}: the block's output is its input, and every part inside it reads as writing nothing.

    The block still runs (its attention pattern can be read), but the views that read its parts see
    the skip: its attention and feed-forward write 0 (heads and merged heads too, so no head of it is
    credited), and its residual probes hold its input, so a lens, an attribution or the residual view
    read the same stream the next block reads. The hook on the block itself comes last and hands on
    the very tensor it was given (core.backprop tells a skipped block by that identity).
    """
    read: dict[str, torch.Tensor] = {}

    def keep_input(module, inputs):
        read["h"] = inputs[0]

    def nothing(module, inputs, output):
        return output * 0  # zeros that stay in the graph: a backward pass through the views (:grad) still runs

    def stream(module, inputs, output):
        return read["h"]

    def skip(module, inputs, output):
        return inputs[0]

    skip.skips_block = True  # what skipped_blocks looks for
    attn = block.attn
    writers = (attn.hook_weighted, attn.hook_merged, attn, block.ffn)  # block.ffn is None with ffn=off: no FFN to zero
    return [block.register_forward_pre_hook(keep_input),
            *(m.register_forward_hook(nothing) for m in writers if m is not None),
            *(probe.register_forward_hook(stream) for probe in (block.hook_resid_mid, block.hook_resid_post)),
            block.register_forward_hook(skip)]


def skipped_blocks(model: nn.Module) -> set[int]:
    """The blocks an active `block=L` ablation skips: what adds nothing to the stream now, biases included."""
    return {i for i, block in enumerate(getattr(model, "blocks", ()))
            if any(getattr(hook, "skips_block", False) for hook in block._forward_hooks.values())}


@dataclass
class _Undo:
    """What puts back an ablation made by a flag rather than a hook, with a hook handle's `remove()`."""

    layers: list

    def remove(self) -> None:
        for attn in self.layers:
            attn.causal = True


def _hooks(model: nn.Module, ablation: Ablation) -> list:
    blocks = model.blocks
    if ablation.kind == "head":
        head = ablation.head

        def zero_head(module, inputs, output):
            output = output.clone()
            output[:, head] = 0.0  # (B, n_heads, T, head_dim): this head's A V contributes nothing
            return output

        return [blocks[ablation.layer].attn.hook_weighted.register_forward_hook(zero_head)]
    if ablation.kind == "block":
        return _skip(blocks[ablation.layer])
    if ablation.kind == "mask":  # M = 0 in every layer that has it, as causal=off builds them
        layers = [block.attn for block in blocks if block.attn.causal]
        for attn in layers:
            attn.causal = False
        return [_Undo(layers)]
    # positions: what the position table adds becomes zero; with RoPE, q and k stay unrotated
    encoding = model.config.pos_encoding
    if encoding in ("learned", "sinusoidal"):
        return [model.position_embedding.register_forward_hook(lambda module, inputs, output: torch.zeros_like(output))]
    if encoding == "rope":  # the rotation hands q and k back as they came in
        return [block.attn.rope.register_forward_hook(_unturned) for block in blocks]
    raise UserError("this model has no position information to drop (pos_encoding=none: it reads none already); "
                    "switch off another part: a head (head=L.H), the mask or a block (block=L)")


def _unturned(module, inputs, output):
    """`:ablate positions` on RoPE: the rotation hands q and k back as they came in."""
    return inputs[0], inputs[1]


_unturned.drops_rotation = True  # what rotation_dropped looks for


def rotation_dropped(attn: nn.Module) -> bool:
    """Whether an active `positions` ablation hands this attention's q and k back unturned (RoPE switched off)."""
    rope = getattr(attn, "rope", None)
    return rope is not None and any(getattr(hook, "drops_rotation", False) for hook in rope._forward_hooks.values())
