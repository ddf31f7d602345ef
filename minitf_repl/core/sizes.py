"""How big a model is, from its config alone: no torch, so the shell can refuse a typo before building.

`parameter_count(config)` is the one place that counts parameters without building the model; a
test builds every combination of settings and checks it equals `num_parameters()` of the model,
so a new variant that forgets to update it fails there instead of making the shell's checks wrong.
"""

from __future__ import annotations

from .config import ModelConfig
from .errors import ConfigError


def parameter_count(config: ModelConfig) -> int:
    """Parameters of `MiniTransformerLM(config)`, each counted once (the tied head adds nothing)."""
    d, f = config.d_model, config.d_ff
    layer_norm = 2 * d  # gain and bias
    attention = 4 * (d * d + d)  # W^Q, W^K, W^V, W^O with their biases
    feed_forward = (d * f + f) + (f * d + d)  # W_1, b_1, W_2, b_2
    block = layer_norm + attention + layer_norm + feed_forward
    positions = config.max_seq_len * d if config.pos_encoding == "learned" else 0  # sinusoids are fixed
    embedding = config.vocab_size * d  # W_E, also the output head (tied)
    return embedding + positions + config.n_layers * block + layer_norm  # ... + ln_f


def training_bytes(config: ModelConfig, batch_size: int) -> int:
    """A rough upper estimate of the memory one training step needs, in bytes (float32).

    Parameters cost 16 bytes each (weight, gradient, AdamW's two moments); the activations kept for
    the backward pass about 12 d_model + 2 d_ff floats per token and layer, plus, on the explicit
    attention path, three (T, T) maps per head (scores, masked scores, softmax).
    """
    d, T, L = config.d_model, config.max_seq_len, config.n_layers
    per_token_layer = 12 * d + 2 * config.d_ff + (3 * config.n_heads * T if config.attention == "explicit" else 0)
    return 16 * parameter_count(config) + 4 * batch_size * T * L * per_token_layer


MAX_PARAMS = 500_000_000  # more than any machine this lab runs on trains in a session
MAX_TRAIN_BYTES = 64 * 2**30


def check_trainable(config: ModelConfig, batch_size: int) -> None:
    """Refuse a model or batch whose training would need more memory than any machine here has."""
    params = parameter_count(config)
    if params > MAX_PARAMS:
        about = f"{params / 1e6:,.0f}M" if params < 1e15 else f"{params:.1e}"  # no 60-digit numbers
        raise ConfigError(
            f"that model would have about {about} parameters, more than this lab's limit of "
            f"{MAX_PARAMS // 1_000_000}M; lower d_model, d_ff or n_layers"
        )
    need = training_bytes(config, batch_size)
    if need > MAX_TRAIN_BYTES:
        raise ConfigError(
            f"training with batch_size={batch_size}, max_seq_len={config.max_seq_len} and this model would need "
            f"about {need / 2**30:,.0f} GiB (the limit is {MAX_TRAIN_BYTES // 2**30} GiB); lower batch_size or max_seq_len"
        )
