"""Feed-forward variants beyond the seed's act(x W_1 + b_1) W_2 + b_2 (which stays in model.py).

    relu2    ReLU(x)^2: a plain FFN with a squared ReLU (So et al., Primer, 2021; modded-nanoGPT)
    swiglu   SwiGLU(x) = (SiLU(x W_g) * x W_u) W_d (Shazeer, 2020; Llama): a gate decides, per hidden
             unit, how much of x W_u passes. Three matrices of width ffn_hidden(config) = int(2 d_ff / 3),
             so it has about the parameters of the two-matrix FFN of width d_ff.

`make_activation(name)` builds the activation of the two-matrix FFN and `activation_formula(name)`
says how a formula writes it; which network `config.activation` builds is its kind's (core.variants),
read in one place, `model.feed_forward`.

A new activation of the two-matrix FFN is an extension point, as a norm is: its module registered here
with `@activation(name, formula, below_zero)` and its kind, `declare_feed_forward(FeedForwardKind(name))`,
in core.variants (which says whether its backward keeps its own output instead of its input). A whole new
network (gated, as SwiGLU) is not: model.feed_forward builds the two it knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from .config import ModelConfig, ffn_hidden
from .errors import ConfigError
from .probe import Step
from .variants import FEED_FORWARDS, kept_hidden_layers  # noqa: F401 (kept_hidden_layers: the FFN's own count)

__all__ = ["ACTIVATION_MODULES", "Activation", "Neurons", "ReLUSquared", "SwiGLU", "activation", "activation_formula",
           "below_zero", "ffn_hidden", "kept_hidden_layers", "make_activation"]


@dataclass(frozen=True)
class Neurons:
    """What a feed-forward part tells the neuron view (`:ffn`) about itself: FFN(x) = u W_out^T + b_out.

    `pre` is the module whose output is each hidden unit's pre-activation (SwiGLU: its gate's); `out`
    the output projection, whose input is the hidden layer u (not h: h is the residual stream) and whose
    column n, v_n, is what unit n writes into the residual stream per unit of u_n, so
    FFN(x) = sum_n u_n v_n + b_out; `hidden` the formula of u.
    """

    pre: nn.Module
    out: nn.Linear
    hidden: str
    pre_name: str  # how a formula writes the pre-activation: "xW_1 + b_1", "xW_g"
    below_zero: str  # what a negative u_n means for this activation


@dataclass(frozen=True)
class Activation:
    """An activation of the two-matrix FFN: how to build it and what the views say of it."""

    make: Callable[[], nn.Module]  # a fresh module: its class, or a function of no arguments
    formula: str  # how the shape trace writes it, "." its input: "GELU(.)"
    below_zero: str  # what an output below 0 means, for the :ffn view


# activation name (a value of the `activation` setting) -> what `make_activation` builds for it. The kinds' own table
# of modules (core.variants.Kinds.modules), the same dict: `activation=name` with a module here and no kind declared
# is refused with the declaration it lacks, not with the list of choices alone
ACTIVATION_MODULES: dict[str, Activation] = FEED_FORWARDS.modules


def activation(name: str, formula: str, below_zero: str):
    """Decorator on a module class (or a function of no arguments that returns the module): `activation=name`
    builds it between the FFN's two matrices. As public as norms.builds, so that a new activation is its module
    and its kind (core.variants) and no edit of a private table: one missing said KeyError: 'silu'."""

    def register(make: Callable[[], nn.Module]):
        ACTIVATION_MODULES[name] = Activation(make, formula, below_zero)
        return make

    return register


activation("gelu", "GELU(.)", "GELU lets small negatives through, down to -0.17")(nn.GELU)
activation("gelu_tanh", "GELU(.) (tanh approx.)",  # GPT-2's approximation
           "GELU lets small negatives through, down to -0.17")(lambda: nn.GELU(approximate="tanh"))
activation("relu", "ReLU(.)", "ReLU is exactly 0 below its kink")(nn.ReLU)


@activation("relu2", "ReLU(.)^2", "ReLU^2 is exactly 0 below its kink")
class ReLUSquared(nn.Module):
    """ReLU(x)^2: zero for x < 0, x^2 above: sparse like ReLU, smooth at the kink's right side."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


def _registered(name: str) -> Activation:
    found = ACTIVATION_MODULES.get(name)
    if found is None:
        raise ConfigError(f"activation={name} has no module; register its class with "
                          f"@feedforward.activation({name!r}, formula, below_zero)")
    return found


def make_activation(name: str) -> nn.Module:
    """The activation module of the two-matrix FFN for `activation=name` (not swiglu: that is a whole FFN)."""
    return _registered(name).make()


def activation_formula(name: str) -> str:
    return _registered(name).formula


def below_zero(name: str) -> str:
    """What an output below 0 of activation `name` means, for the :ffn view."""
    return _registered(name).below_zero


class SwiGLU(nn.Module):
    """SwiGLU(x) = (SiLU(x W_g) * x W_u) W_d, applied to each position on its own."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        d, hidden = config.d_model, ffn_hidden(config)
        self.gate_proj = nn.Linear(d, hidden, bias=config.bias)  # W_g
        self.up_proj = nn.Linear(d, hidden, bias=config.bias)  # W_u
        self.act = nn.SiLU()  # SiLU(z) = z * sigmoid(z), "Swish"
        self.down_proj = nn.Linear(hidden, d, bias=config.bias)  # W_d
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.act(self.gate_proj(x))  # (..., hidden)
        return self.dropout(self.down_proj(gate * self.up_proj(x)))  # (..., d_model)

    # --- what the views need to know ------------------------------------------------------------------
    def _terms(self) -> tuple[str, str, str]:
        """How a formula writes the gate's and the up's pre-activations and the output's bias: with bias=on
        each of the three matrices adds one (a bias=on SwiGLU showed "SiLU(xW_g) ⊙ xW_u", no b at all)."""
        if self.gate_proj.bias is None:
            return "xW_g", "xW_u", ""
        return "xW_g + b_g", "(xW_u + b_u)", " + b_d"

    def neurons(self) -> Neurons:
        gate, up, _ = self._terms()
        return Neurons(pre=self.gate_proj, out=self.down_proj, hidden=f"SiLU({gate}) ⊙ {up}", pre_name=gate,
                       below_zero=f"the gate's SiLU times {up}: either sign, as {up.strip('()')} has")

    def symbols(self) -> dict[str, tuple[int, str | None]]:
        # d_hid, not d_h: most texts write d_h for a head's width, d_k here
        return {"d_hid": (self.gate_proj.out_features, "SwiGLU hidden, max(1, int(2 * d_ff / 3))")}

    def steps(self) -> dict[str, Step]:
        hidden, model = ("B", "T", "d_hid"), ("B", "T", "d")
        gate, up, out = self._terms()
        width = f"(hidden {self.down_proj.in_features} = max(1, int(2 * d_ff / 3)))"
        return {
            "gate_proj": Step(gate, hidden, model),
            "up_proj": Step(up.strip("()"), hidden, model),
            "act": Step("SiLU(.) = . * sigmoid(.)", hidden),
            "down_proj": Step(f"SwiGLU: (SiLU({gate}) ⊙ {up}) W_d{out} {width}", model, hidden),
            "dropout": Step("dropout", model, idle=True),
        }

    def activation_floats(self, dropout: bool = False) -> int:
        """Floats one position keeps for the backward pass: gate, SiLU(gate), up and their product."""
        return 4 * self.gate_proj.out_features
