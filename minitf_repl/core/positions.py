"""Where a token is: the fixed sinusoid table added at the input, and rotary embeddings (RoPE).

`pos_encoding` picks one scheme in MiniTransformerLM:
    learned      a table W_P of max_seq_len x d_model, added to the token embedding (nn.Embedding)
    sinusoidal   the fixed table below, added the same way
    rope         nothing added at the input; inside attention each head's q and k are rotated by
                 an angle proportional to their position, so q.k depends on the distance i - j only
    none         nothing at all (NoPE): the causal mask alone lets a model infer position
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class SinusoidalPositions(nn.Module):
    """The fixed table of "Attention Is All You Need": PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(...)."""

    def __init__(self, max_seq_len: int, d_model: int):
        super().__init__()
        position = torch.arange(max_seq_len, dtype=torch.float32).unsqueeze(1)  # (T, 1)
        freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        table = torch.zeros(max_seq_len, d_model)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq[: d_model // 2])  # odd d_model: one fewer cosine
        # Not persistent: the table is derived from the config, so checkpoints need not store it.
        self.register_buffer("table", table, persistent=False)

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        return self.table[pos]  # (T, d_model)

    def set_length(self, max_seq_len: int) -> None:
        """The table computed for a window of max_seq_len positions, where the old one lives."""
        self.table = SinusoidalPositions(max_seq_len, self.table.shape[1]).table.to(self.table.device)


class RotaryEmbedding(nn.Module):
    """RoPE (Su et al., RoFormer, 2021): rotate each pair c, (x_{2c}, x_{2c+1}), of a head by pos * theta_c.

        theta_c = base^(-2c / head_dim),  c = 0 .. head_dim/2 - 1
        (x_{2c}, x_{2c+1}) -> (x_{2c} cos a - x_{2c+1} sin a,  x_{2c} sin a + x_{2c+1} cos a),  a = pos * theta_c

    (c for the pair, as the views and `:help rope_base` write it: i and j are positions.) This is the
    paper's interleaved-pairs convention (GPT-NeoX and Hugging Face's Llama pair x_c with
    x_{c + head_dim/2} instead; the two are the same model up to a fixed permutation of q and k's
    features). A rotation keeps lengths, and rotating q by its position i and k by its position j
    leaves q.k depending on i - j only: attention sees relative positions. The same module rotates q and k.
    """

    def __init__(self, head_dim: int, max_seq_len: int, base: float = 10000.0):
        super().__init__()
        self.base = base
        theta = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (head_dim/2,)
        angle = torch.arange(max_seq_len, dtype=torch.float64).unsqueeze(1) * theta  # (T_max, head_dim/2)
        # Not persistent: derived from the config, never stored in a checkpoint.
        self.register_buffer("cos", angle.cos().float(), persistent=False)
        self.register_buffer("sin", angle.sin().float(), persistent=False)

    def rotate(self, x: torch.Tensor, start: int) -> torch.Tensor:
        """x: (B, heads, T, head_dim) at absolute positions start .. start + T - 1."""
        B, H, T, D = x.shape
        cos = self.cos[start : start + T]  # (T, D/2), broadcast over B and heads
        sin = self.sin[start : start + T]
        pairs = x.view(B, H, T, D // 2, 2)  # (B, H, T, D/2, 2): pair c is (x_{2c}, x_{2c+1})
        even, odd = pairs[..., 0], pairs[..., 1]  # (B, H, T, D/2) each
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)  # (B, H, T, D/2, 2)
        return rotated.view(B, H, T, D)  # (B, H, T, head_dim): pairs back in place

    def set_length(self, max_seq_len: int, base: float | None = None) -> None:
        """The angles computed for a window of max_seq_len positions (and `base`, if given), where the old ones live."""
        self.base = self.base if base is None else base
        fresh = RotaryEmbedding(2 * self.cos.shape[1], max_seq_len, self.base)
        self.cos, self.sin = fresh.cos.to(self.cos.device), fresh.sin.to(self.sin.device)

    def forward(self, q: torch.Tensor, k: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """q: (B, n_heads, T, head_dim), k: (B, n_kv_heads, T, head_dim), both rotated by their positions."""
        return self.rotate(q, start), self.rotate(k, start)

    def extra_repr(self) -> str:
        return f"head_dim={2 * self.cos.shape[1]}, base={self.base:g}"
