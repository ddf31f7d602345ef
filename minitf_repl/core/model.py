"""A minimal decoder-only Transformer, written to be read top to bottom like the math.

    h_0 = x W_E + P                                  token embedding plus position
    h_l = h_{l-1} + Attention(LN(h_{l-1}))           pre-LN residual blocks ...
    h_l = h_l     + FFN(LN(h_l))
    z_t = LN(h_L) W_E^T                              logits, head tied to the embedding

    Attention(x) = Concat(head_1..head_H) W^O,  head_i = softmax(Q K^T / sqrt(d_k) + M) V

Small pieces come first (probe, position table, attention, feed-forward, block), the whole model
last. `Probe` modules are identities placed at every step of the formula, so a forward hook (the
shape trace, a heatmap) can see q, k, v, the scores, the mask, the softmax and the weighted values
without a print in `forward`.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .errors import DataError


class Probe(nn.Identity):
    """Returns its input unchanged. It exists so that a hook can see the tensor at this point."""


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


class LayerKV:
    """The keys and values one attention layer has already computed (the KV cache of one layer).

    The buffers are allocated once for the whole context window and filled in place, so a step
    costs one write of the new position instead of a copy of everything cached so far.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity  # max_seq_len: positions are absolute, so the cache never holds more
        self.length = 0
        self.k: torch.Tensor | None = None  # (B, n_heads, capacity, head_dim)
        self.v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        B, H, T, D = k.shape
        if self.k is None:
            self.k = k.new_empty(B, H, self.capacity, D)
            self.v = v.new_empty(B, H, self.capacity, D)
        end = self.length + T
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]  # (B, n_heads, T_past + T, head_dim)


class KVCache:
    """Per-layer keys and values, so that decoding one more token costs one position, not the prefix.

    Positions are absolute (learned or sinusoidal, added at the input), so the cache is valid only
    while the text fits in max_seq_len; `core.generate` starts a fresh cache when the window slides.
    """

    def __init__(self, n_layers: int, capacity: int):
        self.layers = [LayerKV(capacity) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.layers[0].length


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.use_sdpa = config.attention == "sdpa"
        self.dropout_p = config.dropout
        self.q_proj = nn.Linear(d, d)
        self.k_proj = nn.Linear(d, d)
        self.v_proj = nn.Linear(d, d)
        self.out_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        # M: position i may look at positions j <= i only.
        mask = torch.tril(torch.ones(config.max_seq_len, config.max_seq_len, dtype=torch.bool))
        self.register_buffer("causal_mask", mask, persistent=False)
        self.hook_q = Probe()
        self.hook_k = Probe()
        self.hook_v = Probe()
        self.hook_scores = Probe()  # S = QK^T / sqrt(d_k)
        self.hook_masked_scores = Probe()  # S + M
        self.hook_weights = Probe()  # A = softmax(S + M), the attention pattern
        self.hook_weighted = Probe()  # O = AV
        self.hook_merged = Probe()  # Concat(heads)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        return x.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)  # (B, n_heads, T, head_dim)

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q = self.hook_q(self.split_heads(self.q_proj(x)))  # (B, n_heads, T, head_dim)
        k = self.hook_k(self.split_heads(self.k_proj(x)))
        v = self.hook_v(self.split_heads(self.v_proj(x)))
        if cache is not None:
            k, v = cache.append(k, v)  # (B, n_heads, T_past + T, head_dim)
        T_k = k.shape[2]
        # With a cache the T new queries sit at absolute positions T_k - T .. T_k - 1.
        mask = self.causal_mask[T_k - T : T_k, :T_k]  # (T, T_k)

        if self.use_sdpa:
            # One fused kernel computing exactly the lines of the else-branch.
            dropout_p = self.dropout_p if self.training else 0.0
            if T == T_k:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        else:
            scores = self.hook_scores(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim))  # (B, n_heads, T, T_k)
            scores = self.hook_masked_scores(scores.masked_fill(~mask, float("-inf")))
            weights = self.hook_weights(F.softmax(scores, dim=-1))  # each row sums to 1
            weights = self.attn_dropout(weights)
            out = weights @ v  # (B, n_heads, T, head_dim)
        out = self.hook_weighted(out)
        merged = self.hook_merged(out.transpose(1, 2).contiguous().view(B, T, C))  # (B, T, d_model)
        return self.resid_dropout(self.out_proj(merged))


class FeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2, applied to each position on its own."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.fc_in = nn.Linear(config.d_model, config.d_ff)
        self.act = nn.GELU() if config.activation == "gelu" else nn.ReLU()
        self.fc_out = nn.Linear(config.d_ff, config.d_model)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc_out(self.act(self.fc_in(x))))  # (B, T, d_model)


class TransformerBlock(nn.Module):
    """Pre-LN: normalise, transform, add back. The residual stream x is never normalised itself."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.ffn = FeedForward(config)
        self.hook_resid_mid = Probe()  # x + Attention(LN(x))
        self.hook_resid_post = Probe()  # x + FFN(LN(x))

    def forward(self, x: torch.Tensor, cache: LayerKV | None = None) -> torch.Tensor:
        x = self.hook_resid_mid(x + self.attn(self.ln_1(x), cache))
        x = self.hook_resid_post(x + self.ffn(self.ln_2(x)))
        return x


class MiniTransformerLM(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        config.validate()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        if config.pos_encoding == "learned":
            self.position_embedding = nn.Embedding(config.max_seq_len, config.d_model)
        else:
            self.position_embedding = SinusoidalPositions(config.max_seq_len, config.d_model)
        self.hook_embed = Probe()  # h = x + p
        self.embed_dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList([TransformerBlock(config) for _ in range(config.n_layers)])
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Weight tying: reading a token in and writing it out share one matrix W_E.
        self.lm_head.weight = self.token_embedding.weight
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(
        self,
        idx: torch.Tensor,
        targets: torch.Tensor | None = None,
        cache: KVCache | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx: (B, T) token ids. targets: (B, T) next-token ids, -1 where no loss is counted."""
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.max_seq_len:
            raise DataError(
                f"input of {start + T} tokens is longer than max_seq_len={self.config.max_seq_len}; "
                "shorten it or raise max_seq_len"
            )
        pos = torch.arange(start, start + T, device=idx.device)  # (T,)
        x = self.hook_embed(self.token_embedding(idx) + self.position_embedding(pos))  # (B, T, d_model)
        x = self.embed_dropout(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache.layers[i] if cache is not None else None)
        x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, vocab_size): z_t for every position t

        loss = None
        if targets is not None:
            # Teacher forcing: every position predicts its next token at once.
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T), ignore_index=-1)
        return logits, loss

    # --- settings that change no weight: the model takes them in place ------------------------------
    def set_attention(self, attention: str) -> None:
        """Switch every attention layer between the explicit formula and the fused kernel (same weights)."""
        self.config = self.config.replace(attention=attention)
        for module in self.modules():
            if isinstance(module, MultiHeadSelfAttention):
                module.use_sdpa = attention == "sdpa"

    def set_dropout(self, p: float) -> None:
        """Change the dropout probability everywhere (the fused kernel reads it as dropout_p)."""
        self.config = self.config.replace(dropout=p)
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
            elif isinstance(module, MultiHeadSelfAttention):
                module.dropout_p = p

    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layers, self.config.max_seq_len)

    def num_parameters(self) -> int:
        """Parameters counted once each (the tied embedding and head are one matrix)."""
        return sum(p.numel() for p in self.parameters())
