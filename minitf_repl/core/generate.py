"""Autoregressive decoding: one token at a time, each fed back as input for the next.

`generate` yields token ids as they are produced, so a caller can stream text. With `cache=True`
(the default) the keys and values of earlier positions are kept, and each step runs the model on
the one new token. With `cache=False` it is the seed's naive loop, which re-runs the whole prefix
every step; both give the same tokens for the same seed, which the tests check.

Sampling happens on the CPU from float64 probabilities with its own generator, so the same seed
gives the same text whatever device the model runs on.
"""

from __future__ import annotations

from typing import Iterator

import torch

from .config import GenConfig
from .errors import DataError


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, max_new_tokens: int) -> None:
    """The sampling arguments against their declarations in GenConfig (ConfigError if one is invalid)."""
    GenConfig(n=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> int:
    """Pick the next token from the logits z_t of the last position (a 1-D tensor over the vocabulary)."""
    logits = logits.detach().double().cpu()  # float64: temperatures down to 1e-300 stay finite
    if temperature == 0:
        return int(torch.argmax(logits))  # greedy
    # Subtract the max first: dividing by a tiny temperature then gives 0 for the best token and
    # -inf for the rest (greedy in the limit) instead of overflowing to inf - inf = nan.
    logits = (logits - logits.max()) / temperature
    if top_k is not None and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p is not None and top_p < 1.0:
        # Nucleus: keep the most likely tokens until their mass reaches top_p (at least one).
        sorted_probs, order = torch.sort(probs, descending=True)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        sorted_probs[mass_before >= top_p] = 0.0
        probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
    return int(torch.multinomial(probs, 1, generator=generator))


@torch.inference_mode()
def generate(
    model,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    cache: bool = True,
) -> Iterator[int]:
    """Yield max_new_tokens token ids continuing prompt_ids (a non-empty list of ids)."""
    check_sampling(temperature, top_k, top_p, max_new_tokens)
    if len(prompt_ids) == 0:
        raise DataError("the prompt is empty; give at least one character to continue")
    generator = torch.Generator()
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    device = next(model.parameters()).device
    window = model.config.max_seq_len
    tokens = list(prompt_ids)
    kv = None
    was_training = model.training
    model.eval()
    try:
        for _ in range(max_new_tokens):
            if not cache:
                # The seed's loop: the last `window` tokens, all recomputed, every step.
                idx = torch.tensor([tokens[-window:]], device=device)
                logits, _ = model(idx)
            elif kv is None or kv.length >= window:
                # Prefill. Also needed when the text outgrows the window: positions are absolute,
                # so sliding the window changes every cached key and value. Past max_seq_len each
                # step therefore recomputes the window, exactly as the naive loop does.
                kv = model.new_cache()
                idx = torch.tensor([tokens[-window:]], device=device)
                logits, _ = model(idx, cache=kv)
            else:
                idx = torch.tensor([tokens[-1:]], device=device)  # only the newest token
                logits, _ = model(idx, cache=kv)
            next_id = sample_next(logits[0, -1], temperature, top_k, top_p, generator)
            tokens.append(next_id)
            yield next_id
    finally:
        model.train(was_training)
