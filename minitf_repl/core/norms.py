"""Normalisation layers: LayerNorm (the seed's) and RMSNorm, one chosen by `config.norm`.

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * g + b       centre, then scale
    RMSNorm(x)   = x / sqrt(mean(x^2) + eps) * g                    scale only (no mean, no bias)

RMSNorm (Zhang & Sennrich, 2019) drops the centring: it costs less and trains as well, which is why
Llama and most later models use it. With `norm_gain` off a norm learns nothing (no g, no b).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .config import ModelConfig

EPS = 1e-5  # the same as nn.LayerNorm's default, so the two kinds differ only in their formula


class RMSNorm(nn.Module):
    """x / rms(x) * g over the last dimension, rms(x) = sqrt(mean(x^2) + eps)."""

    def __init__(self, dim: int, eps: float = EPS, gain: bool = True):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if gain else None  # g

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        y = x / rms
        return y * self.weight if self.weight is not None else y

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0] if self.weight is not None else 'no gain'}, eps={self.eps}"


def make_norm(config: ModelConfig, dim: int) -> nn.Module:
    """The norm `config.norm` names, over `dim` features, with a gain if norm_gain and a bias if also bias."""
    if config.norm == "rmsnorm":
        return RMSNorm(dim, gain=config.norm_gain)
    if not config.norm_gain:
        return nn.LayerNorm(dim, elementwise_affine=False)
    return nn.LayerNorm(dim, bias=config.bias)

