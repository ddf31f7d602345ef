"""How big a model is, from its config alone: no torch, so the shell can refuse a typo before building.

`parameter_count(config)` is the one place that counts parameters without building the model; a
test builds every combination of settings and checks it equals `num_parameters()` of the model,
so a new variant whose kind miscounts fails there instead of making the shell's checks wrong. The
parts that come in kinds (the norm, the feed-forward network, the positions) are asked: their kinds
(core.variants) say what they learn, so a new kind is counted without a change here.
"""

from __future__ import annotations

from decimal import Decimal

from .config import ModelConfig
from .errors import ConfigError
from .memory import available_memory
from .variants import feed_forward_kind, norm_kind, position_kind


def norm_parameters(config: ModelConfig, dim: int) -> int:
    """Parameters of one norm over `dim` features: its kind says (core.variants)."""
    return norm_kind(config).parameters(dim, config)


def ffn_parameters(config: ModelConfig) -> int:
    """Parameters of one feed-forward network (one expert, with experts): its kind says (core.variants)."""
    return feed_forward_kind(config).parameters(config)


def parameter_count(config: ModelConfig) -> int:
    """Parameters of `MiniTransformerLM(config)`, each counted once (a tied head adds nothing)."""
    d, b = config.d_model, int(config.bias)
    kv = config.kv_heads * config.head_dim  # width of K and V: d_model unless heads share them
    attention = 2 * (d * d + b * d) + 2 * (d * kv + b * kv)  # W^Q, W^O; W^K, W^V (with their biases)
    if config.qk_norm:
        attention += 2 * norm_parameters(config, config.head_dim)
    feed_forward = ffn_parameters(config)
    if config.is_moe:
        feed_forward = config.n_experts * feed_forward + d * config.n_experts  # the experts and the router W_r
    if config.ffn:
        feed_forward += norm_parameters(config, d)  # ln_2, the norm before it (after it, post-norm)
    else:
        feed_forward = 0  # ffn=off: no FFN and no ln_2
    block = norm_parameters(config, d) + attention + feed_forward
    positions = position_kind(config).parameters(config)  # a learned table; sinusoids and RoPE are fixed
    embedding = config.vocab_size * d  # W_E, also the output head when tied
    head = 0 if config.tie_embeddings else config.vocab_size * d
    final_norm = norm_parameters(config, d) if config.norm_placement == "pre" else 0  # post-LN has no ln_f
    return embedding + positions + config.n_layers * block + final_norm + head


def muon_parameters(config: ModelConfig) -> int:
    """Parameters of the matrices Muon trains (core.optimizers.hidden_matrices): the blocks' 2-D weights, attention's
    four projections and the feed-forward networks' matrices, without their biases, norms or a router."""
    d, kv = config.d_model, config.kv_heads * config.head_dim
    attention = 2 * d * d + 2 * d * kv
    # the networks' matrices alone: their kind counts them for a model without biases
    feed_forward = ffn_parameters(config.replace(bias=False)) if config.ffn else 0
    if config.is_moe:
        feed_forward *= config.n_experts
    return config.n_layers * (attention + feed_forward)


def checkpoint_bytes(config: ModelConfig, optimizer: str) -> int:
    """Bytes of a checkpoint's weights and optimizer state, float32 both: 4 per parameter, and the optimizer's
    moments, 2 floats per parameter it trains for AdamW, 1 for each of Muon's matrices (its momentum, the rest
    being AdamW's). Their files' headers, the random states and the manifest are the caller's to add."""
    weights = parameter_count(config)
    muon = muon_parameters(config) if optimizer == "muon" else 0
    return 4 * weights + 4 * (muon + 2 * (weights - muon))


def kv_cache_bytes_per_token(config: ModelConfig, bytes_per_value: int = 4) -> int:
    """Bytes the KV cache holds per token of context and sequence: K and V of the n_kv_heads heads in every layer.

    Grouped-query attention divides it by n_heads / n_kv_heads (MQA: by n_heads).
    """
    return 2 * config.n_layers * config.kv_heads * config.head_dim * bytes_per_value


def training_bytes(config: ModelConfig, batch_size: int, fused: bool = False) -> int:
    """A rough upper estimate of the memory one training step needs, in bytes (float32).

    Parameters cost 16 bytes each (weight, gradient, AdamW's two moments); the activations kept for
    the backward pass about 12 d_model floats per token and layer, plus the FFN's hidden layer
    (2 d_ff; 4 * its width for SwiGLU's gate, up, SiLU and product; times experts_per_token with
    experts; with ffn=off 10 d_model and no hidden layer), plus, on the explicit attention path, three
    (T, T) maps per head (scores, masked
    scores, softmax). `fused`: the steps take the fast path (core.fastpath: TrainConfig.fast_path, with no hook on
    the model), whose fused attention keeps no (T, T) map whatever `attention` says: counted, they made
    max_seq_len=4096 need 50 GiB where the steps took 3.
    """
    d, T, L = config.d_model, config.max_seq_len, config.n_layers
    hidden = feed_forward_kind(config).kept_floats(config)
    if config.is_moe:
        hidden = config.experts_per_token * (hidden + d) + 2 * config.n_experts  # + each expert's output, router
    # ffn=off: no hidden layer, and no ln_2 with its input and output (the ledger's d + ln_2: 2 of the 12 d)
    stream = 12 * d if config.ffn else 10 * d
    maps = config.attention == "explicit" and not fused
    per_token_layer = stream + (hidden if config.ffn else 0) + (3 * config.n_heads * T if maps else 0)
    return 16 * parameter_count(config) + 4 * batch_size * T * L * per_token_layer


MAX_PARAMS = 500_000_000  # more than any machine this lab runs on trains in a session
MAX_TRAIN_BYTES = 64 * 2**30


def check_parameter_bound(config: ModelConfig, weights_from: str | None = None) -> None:
    """Refuse a model of more parameters than MAX_PARAMS (check_trainable's first bound, and the one a build for
    sampling or a view is held to: the session's data may be read only then, and bring a larger vocabulary)."""
    params = parameter_count(config)
    if params > MAX_PARAMS:
        # no 60-digit numbers; Decimal, as `:set d_model=1e308` makes a count no float holds (it was an internal error)
        about = f"{params / 1e6:,.0f}M" if params < 1e15 else f"{Decimal(params):.1e}"
        limit = f"more than this lab's limit of {MAX_PARAMS // 1_000_000}M"
        if weights_from is not None:
            raise ConfigError(f"the model from {weights_from} has about {about} parameters, {limit} for training; "
                              "it generates and every view reads it, and a smaller model trains")
        raise ConfigError(f"that model would have about {about} parameters, {limit}; lower d_model, d_ff or n_layers")


def check_trainable(config: ModelConfig, batch_size: int, weights_from: str | None = None, fused: bool = False) -> None:
    """Refuse a model or batch whose training would need more memory than any machine here has.

    `weights_from`: where the model's weights came from (`hf:PATH`): no setting makes those fewer, so a model
    too large is said to be the folder's, which still generates, and a smaller one is what trains."""
    check_parameter_bound(config, weights_from)
    need = training_bytes(config, batch_size, fused)
    if need > MAX_TRAIN_BYTES:
        raise ConfigError(
            f"training with batch_size={batch_size}, max_seq_len={config.max_seq_len} and this model would need "
            f"about {need / 2**30:,.0f} GiB (the limit is {MAX_TRAIN_BYTES // 2**30} GiB); lower batch_size or max_seq_len"
        )


def check_weights_free(config: ModelConfig, free: int | None = None) -> None:
    """Refuse building a model whose float32 weights alone would not fit in the memory free now, before they are
    allocated. A model within the lab's bounds (500M parameters: 2 GiB of weights) may be past a small machine's or a
    container's: `:set d_model=2048 n_layers=8`, then :gen, built it, and the out-of-memory killer ended the session
    (:train's check_memory_free asks first; a model built to generate or to look inside was asked nothing).
    `free`: MemAvailable (or what a container's limit leaves) by default; where unknown, nothing is checked."""
    free = available_memory() if free is None else free
    if free is None:
        return
    need = 4 * parameter_count(config)
    if need > free:
        raise ConfigError(f"that model's weights would take about {need / 2**30:,.1f} GiB, but this machine has "
                          f"{free / 2**30:,.1f} GiB free; lower d_model, d_ff or n_layers")


def check_memory_free(config: ModelConfig, batch_size: int, held: int = 0, free: int | None = None,
                      fused: bool = False) -> None:
    """Refuse a training on the CPU that would not fit in the memory this machine has free now, before anything is
    allocated: the limits above are any machine's, and past what this one has, Linux's out-of-memory killer ends the
    whole session (its unsaved work with it) rather than raise an error that could be reported.

    `held`: bytes the session holds now that the training reuses or frees (the current model's weights, gradients
    and optimizer state). `free`: MemAvailable by default; where unknown, nothing is checked."""
    free = available_memory() if free is None else free
    if free is None:
        return
    need = training_bytes(config, batch_size, fused)
    if need > free + held:
        raise ConfigError(
            f"training with batch_size={batch_size}, max_seq_len={config.max_seq_len} and this model would need "
            f"about {need / 2**30:,.1f} GiB (a rough upper estimate), but this machine has "
            f"{(free + held) / 2**30:,.1f} GiB free; lower batch_size or max_seq_len, or choose a smaller model"
        )
