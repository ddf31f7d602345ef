"""A mixture of experts: n_experts feed-forward networks per block, each token running only k of them.

    r = x W_r                                  router logits, one per expert          (N, E)
    p = softmax(r)                             router probabilities                   (N, E)
    S = top-k(r)                               the k experts this token is sent to
    g = softmax(r_S)                           gates, k > 1: softmax over the k chosen logits only,
                                               so a token's gates sum to 1 (Mixtral's convention)
    g = p_S                                    gate, k = 1: the chosen expert's probability
                                               (the Switch Transformer's)
    y = sum_{e in S} g_e FFN_e(x)

With one expert a token, a softmax over the one chosen logit is 1 whatever the router says, so the
loss would send the router no gradient: it would learn only from the balancing loss below, never
which expert suits a token. Gating by p_e itself, as Switch does, keeps that gradient.

The load-balancing loss (Switch Transformer, Fedus et al. 2021) keeps the router from sending
everything to a few experts:

    aux = E * sum_e f_e * P_e,   f_e = share of the N*k routing choices that went to expert e,
                                 P_e = mean router probability of expert e over the N tokens

It is 1 when routing is uniform and grows as it concentrates. f_e is a count (no gradient); P_e
carries the gradient that evens the router out. MiniTransformerLM adds moe_aux_weight times the
mean over layers to the training loss. `validation_routing` routes one validation batch (nothing
learned) and reads how the experts shared it, for `:experts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from .config import ModelConfig
from .probe import Probe, Step, listening


class MixtureOfExperts(nn.Module):
    """Routes each token to its top-k experts and sums their outputs, weighted by the gates."""

    def __init__(self, config: ModelConfig, make_expert: Callable[[], nn.Module]):
        super().__init__()
        self.n_experts = config.n_experts
        self.k = config.experts_per_token
        self.router = nn.Linear(config.d_model, config.n_experts, bias=False)  # W_r
        self.hook_router = Probe()  # p = softmax(r): (B*T, n_experts)
        self.experts = nn.ModuleList([make_expert() for _ in range(config.n_experts)])
        # Written by every forward, read by MiniTransformerLM (the loss) and moe_stats() (a view).
        self.aux_loss: torch.Tensor | None = None
        self.tokens_per_expert: torch.Tensor | None = None  # (n_experts,) routing choices in the last forward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        flat = x.reshape(B * T, C)  # (N, d_model): routing treats every token on its own
        logits = self.router(flat)  # (N, n_experts)
        probs = self.hook_router(F.softmax(logits, dim=-1))  # (N, n_experts)
        top_logits, chosen = torch.topk(logits, self.k, dim=-1)  # (N, k) each
        # (N, k): the chosen experts' weights, summing to 1; one expert: its probability (module docstring)
        gates = F.softmax(top_logits, dim=-1) if self.k > 1 else probs.gather(-1, chosen)

        out = torch.zeros_like(flat)  # (N, d_model)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)  # the tokens sent to expert e, and which of their k picks it was
            if token.numel() == 0:
                continue
            y = expert(flat[token])  # (n_e, d_model): this expert runs on its tokens only
            # .to: under autocast y comes out in bfloat16, and index_add_ wants out's dtype
            out.index_add_(0, token, (gates[token, slot].unsqueeze(-1) * y).to(out.dtype))

        counts = torch.bincount(chosen.flatten(), minlength=self.n_experts)  # (n_experts,)
        f = counts.to(probs.dtype) / chosen.numel()  # share of the N*k choices
        P = probs.mean(dim=0)  # (n_experts,)
        self.aux_loss = self.n_experts * (f * P).sum()
        self.tokens_per_expert = counts.detach()
        return out.view(B, T, C)  # (B, T, d_model)

    # --- what the views need to know ------------------------------------------------------------------
    def symbols(self) -> dict[str, tuple[int, str | None]]:
        return self.experts[0].symbols()  # every expert is built alike

    def steps(self) -> dict[str, Step]:
        # Routing works on the flattened tokens (N, ...) and each expert on the tokens sent to it, so
        # these shapes have no symbols of their own: the trace shows their numbers.
        return {
            "router": Step("router logits r = xW_r"),
            "hook_router": Step("p = softmax(r); each token to its top-k experts, gates = softmax of their r"
                                + (" (one expert: its p)" if self.k == 1 else "")),
        }

    def linear_flops_per_token(self) -> int:
        """A token runs the router and its k experts, not all of them: the FLOPs do not grow with n_experts."""
        def linear(module: nn.Module) -> int:
            return sum(2 * m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))

        return linear(self.router) + self.k * max(linear(e) for e in self.experts)

    def idle_parameters(self) -> int:
        """Parameters a token does not run: the n_experts - k experts it is not routed to (the 6N rule's N leaves
        them out, core.ledger)."""
        return (self.n_experts - self.k) * max(sum(p.numel() for p in e.parameters()) for e in self.experts)

    def activation_floats(self, dropout: bool) -> int:
        """Floats one token keeps for the backward pass: per chosen expert its input, its hidden layers, its
        output and the gated output (and a dropout's noise); the router's probabilities (softmax keeps its output;
        topk keeps only its indices, not the logits); and per choice its gate twice (the k gates' softmax, and the
        column gathered for the expert's tokens) and three int64 indices, two floats each: the choice (topk's),
        the token's row and its slot (where's, kept by the gather and index_add_). Those indices and gates were
        left out, and :params memory on a mixture came out 1-1.7% under what the forward keeps (measured in
        tests/test_variants.py)."""
        d = self.router.in_features
        per_choice = self.experts[0].activation_floats(dropout) + 3 * d + (d if dropout else 0)
        # with dropout the block counts one FFN's noise (d, TransformerBlock.activation_floats); a mixture's noise is
        # its experts', per choice, counted above: the block's d is one of those
        return self.k * (per_choice + 2 + 3 * 2) + self.n_experts - (d if dropout else 0)


@dataclass
class MoEStats:
    """What the last forward pass did with its experts (MiniTransformerLM.moe_stats())."""

    aux_loss: float | None  # mean over layers of E * sum_e f_e P_e (1.0 = perfectly balanced); None before a forward
    aux_weight: float  # moe_aux_weight: the training loss adds aux_weight * aux_loss
    load: list[list[float]]  # per MoE layer, per expert: share of routing choices (each row sums to 1)
    tokens: list[list[int]]  # per MoE layer, per expert: routing choices (tokens x experts_per_token in all)
    layers: list[int]  # the block index of each row


def validation_routing(model: nn.Module, data, batch_size: int, seed: int) -> MoEStats | None:
    """How `model` routes one validation batch of `data` (drawn with `seed`): nothing is learned, the
    model's mode is restored (core.probe.listening). None for a model without experts."""
    x, _ = data.get_batch("val", batch_size, model.config.max_seq_len, torch.Generator().manual_seed(seed))
    with listening(model):
        model(x.to(next(model.parameters()).device))
        return model.moe_stats()  # read inside: the pass's stats are dropped as it ends (core.probe.evaluating)
