"""Model configuration: a plain dataclass, importable without torch.

Keeping the config free of torch lets the shell parse and validate `:set key=value` before the
(slow) torch import has finished. New architecture variants arrive as new fields with a default
that keeps today's model, plus a check in `validate()`; the model reads them in one place each.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .errors import ConfigError

ACTIVATIONS = ("gelu", "relu")
POS_ENCODINGS = ("learned", "sinusoidal")
ATTENTION_IMPLS = ("explicit", "sdpa")


class _Settings:
    """Plain-dict round trips for the config dataclasses (checkpoints store them as JSON)."""

    kind = "settings"  # named in the error for an unknown key

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.kind} setting(s): {', '.join(unknown)}")
        return cls(**d)

    def replace(self, **changes):
        """A new, validated config with some fields changed (the original is untouched)."""
        return type(self).from_dict({**self.to_dict(), **changes})


@dataclass
class ModelConfig(_Settings):
    """The architecture. Defaults: the model the first `:train` on pydoc trains in about a minute."""

    kind = "model"

    vocab_size: int = 50
    max_seq_len: int = 64  # the context window T: longest input the position table covers
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    d_ff: int = 512  # hidden width of the feed-forward network, usually 4 * d_model
    dropout: float = 0.0
    activation: str = "gelu"  # gelu | relu
    pos_encoding: str = "learned"  # learned | sinusoidal
    # explicit: the formula written out, with a probe at every step (the learner's path).
    # sdpa: torch.nn.functional.scaled_dot_product_attention, same weights (the fast path).
    attention: str = "explicit"

    def __post_init__(self) -> None:
        self.validate()

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> None:
        for name in ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be a whole number, got {value!r}")
            if value <= 0:
                raise ConfigError(f"{name} must be positive, got {value}")
        if self.d_model % self.n_heads != 0:
            raise ConfigError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                f"try n_heads in {_divisors(self.d_model)}"
            )
        if not isinstance(self.dropout, (int, float)) or isinstance(self.dropout, bool):
            raise ConfigError(f"dropout must be a number in [0, 1), got {self.dropout!r}")
        if not (0.0 <= float(self.dropout) < 1.0) or math.isnan(self.dropout):
            raise ConfigError(f"dropout must be in [0, 1), got {self.dropout}")
        _check_choice("activation", self.activation, ACTIVATIONS)
        _check_choice("pos_encoding", self.pos_encoding, POS_ENCODINGS)
        _check_choice("attention", self.attention, ATTENTION_IMPLS)


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def _divisors(n: int) -> str:
    return ", ".join(str(k) for k in range(1, min(n, 64) + 1) if n % k == 0)


@dataclass
class TrainConfig(_Settings):
    """Optimisation settings for one `:train` run."""

    kind = "training"

    steps: int = 600
    batch_size: int = 32
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    eval_every: int = 100
    eval_batches: int = 8  # validation loss is the mean over this many batches
    seed: int = 1337

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        for name in ("steps", "batch_size", "eval_every", "eval_batches"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive whole number, got {value!r}")
        if isinstance(self.warmup_steps, bool) or not isinstance(self.warmup_steps, int) or self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be a whole number >= 0, got {self.warmup_steps!r}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a whole number >= 0, got {self.seed!r}")
        for name in ("lr", "weight_decay", "grad_clip", "min_lr_ratio"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
        if self.lr <= 0:
            raise ConfigError(f"lr must be positive, got {self.lr}")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise ConfigError("weight_decay and grad_clip must be >= 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ConfigError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
