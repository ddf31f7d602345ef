"""Autoregressive decoding: one token at a time, each fed back as input for the next.

`generate` yields token ids as they are produced, so a caller can stream text. It samples under a
GenConfig (n, temperature, top_k, top_p, gen_seed, cache), checked when it was made. With
`cache=True` (the default) the keys and values of earlier positions are kept, and each step runs the model on
the one new token, through core.fastpath when nothing listens to the model. With `cache=False` it
is the seed's naive loop, which re-runs the whole prefix every step through the readable model;
both give the same tokens for the same seed, which the tests check.

Sampling happens on the CPU from float64 probabilities with its own generator, so the same seed
gives the same text whatever device the model runs on.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from .config import GenConfig
from .device import in_float64
from .errors import DataError
from .fastpath import FastPath, listened
from .model import require_model
from .probe import evaluating


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, max_new_tokens: int) -> None:
    """Sampling arguments given one by one (not as a GenConfig) against GenConfig's declarations (ConfigError)."""
    GenConfig(n=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)


@dataclass
class SamplingStages:
    """Each step from the logits z_t to the distribution a token is drawn from (all (V,), CPU float64).

    Temperature 0 is greedy: only the argmax survives, and top_k / top_p are not applied.
    """

    logits: torch.Tensor  # z_t as given, in float64
    scaled: torch.Tensor | None  # (z - max z) / temperature: z / temperature shifted so the best is 0
    top_k_kept: torch.Tensor  # bool: not cut by top-k (all True without top_k)
    top_p_kept: torch.Tensor  # bool: also not cut by top-p, the survivors of both filters
    weights: torch.Tensor  # what torch.multinomial draws from: softmax of the kept, top-p cut not renormalised
    probs: torch.Tensor  # weights / weights.sum(): the probability that each token is picked
    greedy: bool


def sampling_stages(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> SamplingStages:
    """The stages `sample_next` goes through, kept for a view (the next-token microscope) to show.

    This is the one implementation of the sampling rules; `sample_next` is `pick(sampling_stages(...))`.
    """
    logits = in_float64(logits).cpu()  # float64: temperatures down to 1e-300 stay finite
    if not bool(torch.isfinite(logits).all()):  # nothing to rank or draw from (greedy's argmax of nan is a guess too)
        raise DataError(f"the model's logits for the next token are not finite ({non_finite(logits)}): its weights or "
                        "activations overflowed, which training at a learning rate far too high does; load a "
                        "checkpoint saved before, or train again at a lower lr")
    V = logits.numel()
    if temperature == 0:
        best = torch.zeros(V, dtype=torch.bool)
        best[torch.argmax(logits)] = True  # greedy
        one_hot = best.double()
        return SamplingStages(logits, None, best, best.clone(), one_hot, one_hot.clone(), greedy=True)
    # Subtract the max first: dividing by a tiny temperature then gives 0 for the best token and
    # -inf for the rest (greedy in the limit) instead of overflowing to inf - inf = nan.
    scaled = (logits - logits.max()) / temperature
    masked = scaled
    top_k_kept = torch.ones(V, dtype=torch.bool)
    if top_k is not None and top_k < V:
        # exactly k, ties going to the lower id as argmax's do: a cut at the k-th value kept every token tied with it
        # (top_k=1 on two equal best logits drew between them, where temperature 0 takes the first)
        order = torch.sort(scaled, descending=True, stable=True).indices
        top_k_kept = torch.zeros(V, dtype=torch.bool)
        top_k_kept[order[:top_k]] = True
        cut = ~top_k_kept
        masked = scaled.masked_fill(cut, float("-inf"))
    weights = torch.softmax(masked, dim=-1)
    top_p_kept = top_k_kept.clone()
    if top_p is not None and top_p < 1.0:
        # Nucleus: keep the most likely tokens until their mass reaches top_p (at least one).
        sorted_probs, order = torch.sort(weights, descending=True, stable=True)  # ties: the lower id first, as argmax
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        dropped = mass_before >= top_p
        sorted_probs[dropped] = 0.0
        weights = torch.zeros_like(weights).scatter(0, order, sorted_probs)
        top_p_kept &= torch.zeros_like(top_p_kept).scatter(0, order, ~dropped)
    return SamplingStages(logits, scaled, top_k_kept, top_p_kept, weights, weights / weights.sum(), greedy=False)


def non_finite(values: torch.Tensor) -> str:
    """How many of `values` are nan or inf, in words: "nan at 12 of 103"."""
    bad = ~torch.isfinite(values)
    kinds = "/".join(k for k, m in (("nan", torch.isnan(values)), ("inf", torch.isinf(values))) if bool(m.any()))
    return f"{kinds} at {int(bad.sum())} of {values.numel()}"


def pick(stages: SamplingStages, generator: torch.Generator | None = None) -> int:
    """Draw the next token id from the stages' weights (greedy: the argmax, without using the generator)."""
    if stages.greedy:
        return int(torch.argmax(stages.logits))
    return int(torch.multinomial(stages.weights, 1, generator=generator))


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> int:
    """Pick the next token from the logits z_t of the last position (a 1-D tensor over the vocabulary)."""
    return pick(sampling_stages(logits, temperature, top_k, top_p), generator)


def cache_exact(model) -> bool:
    """Whether the KV cache gives exactly what recomputing the window gives: under the causal mask (causal=on
    and no `:ablate mask`), or with a single layer (its keys and values come from the embeddings alone,
    which later tokens never change)."""
    return model.causal or len(model.blocks) == 1


def _token_ids(prompt_ids, vocab_size: int) -> list[int]:
    """The prompt as a list of ids the model has, or one error saying what to pass instead."""
    if isinstance(prompt_ids, str):
        raise TypeError("generate continues token ids, not text; encode it first: tokenizer.encode(text)")
    if isinstance(prompt_ids, torch.Tensor):
        if prompt_ids.dim() != 1 or prompt_ids.is_floating_point() or prompt_ids.dtype == torch.bool:
            raise DataError(f"the prompt must be a list or 1-D tensor of token ids, got a {prompt_ids.dtype} tensor of "
                            f"shape {tuple(prompt_ids.shape)}; pass one sequence's ids (idx[0].tolist())")
        prompt_ids = prompt_ids.tolist()
    try:
        ids = [operator.index(i) for i in prompt_ids]
    except TypeError:
        raise DataError("the prompt must be a list of token ids (whole numbers); encode text first: "
                        "tokenizer.encode(text)") from None
    if not ids:
        raise DataError("the prompt is empty; give at least one character to continue")
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise DataError(f"the prompt holds {bad}, not a token id of this model (vocab_size={vocab_size}: ids "
                        f"0..{vocab_size - 1}); encode with the tokenizer the model was built for")
    return ids


def generate(
    model,
    prompt_ids: list[int] | torch.Tensor,
    settings: GenConfig,
    done: Callable[[list[int]], bool] | None = None,
    on_pick: Callable[[SamplingStages], None] | None = None,
) -> Iterator[int]:
    """Yield up to settings.n token ids continuing prompt_ids (a non-empty list of ids), sampled under `settings`.

    `settings` is a GenConfig, valid since it was made (e.g. `GenConfig(n=50, temperature=0)`, or a
    session's `gen_config.replace(...)`): nothing is checked again here. `done(ids)` (optional) is
    asked before each new token, with the prompt and every token so far: True ends the text there.
    A task declares where its answers end this way (core.data's Task.answer_complete), so a
    complete answer is not followed by tokens that mean nothing. `on_pick(stages)` (optional) is
    given the stages each token was drawn from, before it is yielded: `:step n=K` shows them.

    The model, the prompt (a list or 1-D tensor of ids the model has) and the settings are checked
    at the call, before anything is sampled: `generate(model, "text", ...)` raises there, not at the
    first token drawn.
    """
    if not isinstance(settings, GenConfig):
        raise TypeError(f"generate samples under a GenConfig, got {type(settings).__name__}; "
                        "e.g. generate(model, ids, GenConfig(n=50, temperature=0.8))")
    require_model(model, "generate")
    return _sampled(model, _token_ids(prompt_ids, model.config.vocab_size), settings, done, on_pick)


def steps_past_window(prompt_tokens: int, steps: int, window: int) -> int:
    """Of `steps` tokens generated after a prompt of `prompt_tokens`, how many were picked with more text before
    them than the window holds: the model read only the last `window` tokens there, and the cached loop refilled
    its cache every such step (positions are absolute), so cache=on saved nothing at those steps."""
    first = max(0, window - prompt_tokens + 1)  # the first step whose text is longer than the window
    return max(0, steps - first)


@torch.inference_mode()
def _sampled(model, prompt_ids: list[int], settings: GenConfig,
             done: Callable[[list[int]], bool] | None,
             on_pick: Callable[[SamplingStages], None] | None = None) -> Iterator[int]:
    max_new_tokens, temperature, top_k, top_p, cache = (settings.n, settings.temperature, settings.top_k,
                                                       settings.top_p, settings.cache)
    # The cache keeps each position's keys and values as they were computed, before later tokens came. Under
    # the causal mask that is what recomputing them would give; without it (causal off) a position's k and v
    # change as later tokens arrive (from the second layer on), so such a model recomputes the window every step.
    cache = cache and cache_exact(model)
    generator = torch.Generator()
    if settings.gen_seed is None:
        generator.seed()
    else:
        generator.manual_seed(settings.gen_seed)
    device = next(model.parameters()).device
    window = model.config.max_seq_len
    tokens = list(prompt_ids)
    kv = None
    # The cached loop runs the training fast path's function (core.fastpath: one q/k/v product, the
    # fused kernel, no probes) unless something listens to the readable model: an ablation's hooks,
    # a trace. The naive loop stays the readable model's, the reference the cache is tested against.
    fast = cache and FastPath.supports(model, cached=True) and not listened(model)
    decode = FastPath(model) if fast else model
    with evaluating(model):
        for _ in range(max_new_tokens):
            if done is not None and done(tokens):
                return
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
                logits, _ = decode(idx, cache=kv)
            else:
                idx = torch.tensor([tokens[-1:]], device=device)  # only the newest token
                logits, _ = decode(idx, cache=kv)
            stages = sampling_stages(logits[0, -1], temperature, top_k, top_p)  # sample_next, its stages kept
            next_id = pick(stages, generator)
            if on_pick is not None:
                on_pick(stages)
            tokens.append(next_id)
            yield next_id
