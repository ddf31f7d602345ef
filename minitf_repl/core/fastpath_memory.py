"""What training's fast path (core.fastpath) keeps for backward, against the readable forward the ledger counts.

Core knowledge of the fast path, so it lives beside it rather than in the view that says it (`:params`,
commands/anatomy.py, which imports it from here). Nothing here imports torch at load: the views' modules are
imported at the shell's start, torch only when a command needs it (core.fastpath is imported inside the function).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FastPathMemory:
    """What training's fast path (core.fastpath) keeps for backward against the readable forward the ledger counts."""

    less: int  # bytes fewer than the ledger's activations at its batch and T (negative: more)
    maps_left: bool  # the readable forward keeps (T, T) maps that the fast path's fused kernel does not
    maps_kept: bool  # dropout on a CPU: torch's fused kernel falls back to the explicit formula, (T, T) maps and all
    unrotated: bool  # with rope, the unrotated q and k stay (see fast_path_memory)


def fast_path_memory(model, ledger: dict) -> FastPathMemory | None:
    """What training's fast path keeps for backward beside the readable forward, at the ledger's batch and T, in the
    ledger's dtype; None with dropout off the CPU, not measured there (CUDA's kernels draw the dropout inside and keep
    no map, where the parts' statements count torch's CPU fallback), and for a model with a part of a caller's own
    that the fast path would skip (core.fastpath.own_part), which training runs through its own forward instead.

    "training's fast path keeps no (T, T) maps: 3.9 MiB (7.8%) less" was said with dropout too, where it kept 0.7 MiB
    more, and at batch 2, where it kept 0.2 MiB more (a copy of [W_q; W_k; W_v] a layer outweighs the maps there): so
    the sum is said, from what each path keeps (tests/test_sweep_bs_claims.py measures it with saved_tensors_hooks;
    to the KiB for every variant tried):
    - the parts' own statements with every layer's attention fused (MiniTransformerLM.fused_attention): the maps the
      kernel does not keep (none with dropout on a CPU, where it keeps A as the explicit path does), and under GQA K
      and V not repeated to n_h heads;
    - the readable forward's causal mask: masked_fill keeps ~M, T x T bools a layer (at d=64 and T=256, more than
      the copy below);
    - the fast path's one q/k/v product: its weight [W_q; W_k; W_v] is a new tensor, kept for backward, whatever
      the batch; and q, k and v are views of its one output, so with rope (and no qk_norm, which keeps the unrotated
      q and k on either path) v keeps the unrotated q and k alive beside the rotated ones (not with dropout on a CPU:
      measured, the kernel's fallback keeps no more than the readable forward there).
    """
    from .fastpath import own_part

    config = model.config
    B, T = ledger["batch_size"], ledger["seq_len"]
    first = next(model.parameters())
    size, dropout = first.element_size(), config.dropout > 0
    if (dropout and first.device.type != "cpu") or own_part(model) is not None:
        return None
    with model.fused_attention():
        fused = model.activation_floats(T)
    less = (model.activation_floats(T) - fused) * B * T * size
    maps_left = T > 1 and not dropout and any(not block.attn.use_sdpa for block in model.blocks)
    unrotated = False
    for block in model.blocks:
        attn = block.attn
        q, k, v = attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features
        less -= (q + k + v) * attn.q_proj.in_features * size
        if attn.rope is not None and attn.q_norm is None and not dropout:
            less -= (q + k) * B * T * size
            unrotated = True
        if not attn.use_sdpa and attn.causal:
            less += T * T * attn.causal_mask.element_size()
    return FastPathMemory(less, maps_left, dropout and T > 1, unrotated)
