"""Feed-forward variants beyond the seed's act(x W_1 + b_1) W_2 + b_2 (which stays in model.py).

    relu2    ReLU(x)^2: a plain FFN with a squared ReLU (So et al., Primer, 2021; modded-nanoGPT)
    swiglu   SwiGLU(x) = (SiLU(x W_g) * x W_u) W_d (Shazeer, 2020; Llama): a gate decides, per hidden
             unit, how much of x W_u passes. Three matrices of width ffn_hidden(config) = int(2 d_ff / 3),
             so it has about the parameters of the two-matrix FFN of width d_ff.

`make_activation(name)` builds the activation of the two-matrix FFN; `config.activation` is read
in one place, `model.feed_forward`.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .config import ModelConfig, ffn_hidden

__all__ = ["ReLUSquared", "SwiGLU", "ffn_hidden", "make_activation"]


class ReLUSquared(nn.Module):
    """ReLU(x)^2: zero for x < 0, x^2 above: sparse like ReLU, smooth at the kink's right side."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).square()


def make_activation(name: str) -> nn.Module:
    """The activation module of the two-matrix FFN for `activation=name` (not swiglu: that is a whole FFN)."""
    return {
        "gelu": lambda: nn.GELU(),
        "gelu_tanh": lambda: nn.GELU(approximate="tanh"),  # GPT-2's approximation
        "relu": lambda: nn.ReLU(),
        "relu2": lambda: ReLUSquared(),
    }[name]()


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
