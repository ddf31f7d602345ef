"""The cost ledger: what a model costs in parameters, FLOPs and memory, from its built modules.

Parameters are counted per component by walking `named_modules()`; a tensor shared by two modules
(the output head tied to the token embedding) is counted once, at its first owner, so the rows add
up to `num_parameters()`.

FLOPs count multiply-adds as 2 (a multiply and an add), matrix products only, as
`torch.utils.flop_counter.FlopCounterMode` does: every `nn.Linear` costs 2 * in * out per token
(read from the modules, so a wider FFN, a third SwiGLU matrix, fewer KV heads or an untied head
are counted as built), and attention's QK^T and AV cost 2 * T * n_heads * head_dim each per token
and layer (from the config). T is the full sequence: the explicit path computes the whole T x T
score matrix, masked half included. Norms, softmax, activations and embedding lookups are left out
(they are O(d) per token, not O(d^2)). Training is taken as 3 x forward (the backward pass computes
two products per forward product: the input's gradient and the weight's); "6N" (6 x parameters x
tokens) is the usual shorthand, shown for comparison: it leaves out attention's T-dependent products.
Its N is all the parameters, less the tables a token only looks up (the learned position table, an
untied token embedding; a tied one is the head's matrix and counts) and a mixture's experts the token
is not routed to (the part says how many, `idle_parameters()`), as the rule is used for sparse models.
The norms' gains and the biases stay in N, as in the rule's own count, though no product multiplies by
them: N is not "the parameters a token's matrix products use".

A mixture of experts counts the router and, per token, experts_per_token experts' Linears: a token
runs only the experts it is routed to, so the parameters grow with n_experts and the FLOPs do not
(the part says so itself: a module with `linear_flops_per_token()` is asked instead of summed).
Grouped-query attention leaves attention's FLOPs as they are (every query head still scores
every key); only its K and V projections are smaller, as built.

Muon's step adds products of its own, once a step whatever the batch: five Newton-Schulz steps on
each block matrix (`optimizer_flops_per_step`, core.optimizers.newton_schulz_flops, checked against
FlopCounterMode); AdamW's update is elementwise and adds none.

The memory the forward pass keeps for backward is each part's own statement
(`activation_floats`, core.model), so a new variant is counted without a change here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch.nn as nn

from .errors import UserError
from .optimizers import MUON_NS_STEPS, STATE_WORDS, hidden_matrices, newton_schulz_flops
from .precision import DTYPES, newton_schulz_dtype
from .trace import parameter_owners


@dataclass
class ParamRow:
    path: str  # a top-level module or a block's child: "token_embedding", "blocks.0.attn", "ln_f", "lm_head"
    kind: str  # class name: Embedding, MultiHeadSelfAttention, LayerNorm, SinusoidalPositions, ...
    params: int  # counted once: a tied tensor counts at its first owner (the token embedding)
    tied_to: str | None  # the component sharing a weight with this one, e.g. lm_head -> "token_embedding"
    block: int | None  # block index, None outside the blocks


@dataclass
class Ledger:
    # rows per training step (the batch_size setting): what the per-step FLOPs and activation bytes count
    batch_size: int
    seq_len: int  # T
    rows: list[ParamRow]  # one per component (a top-level module, or a block's child), probes and dropouts left out
    n_params: int  # sum of rows = model.num_parameters()
    # FLOPs (2 per multiply-add; matrix products only)
    linear_flops_per_token: int  # every nn.Linear: 2 * in * out
    attention_flops_per_token: int  # QK^T and AV: 2 * 2 * T * n_heads * head_dim per layer; grows with T
    forward_flops_per_token: int  # the two above
    forward_flops_per_step: int  # x batch_size * seq_len tokens
    training_flops_per_step: int  # 3 x forward: forward, then backward for inputs and weights
    six_n_flops_per_step: int  # 6 * six_n_params * tokens, the usual rule of thumb
    # the rule's N: n_params less lookup_params and the experts a token is not sent to (norm gains and biases stay in)
    six_n_params: int
    lookup_params: int  # in tables a token only looks up, no product multiplies by (the position table): not in N
    # Muon's Newton-Schulz on every block matrix, each step, whatever the batch (0 for AdamW: its update is
    # elementwise, no product); on the path the device takes (bfloat16, or float32's Gram matrices for wide ones)
    optimizer_flops_per_step: int
    muon_matrices: int  # the block matrices Muon orthogonalises (0 for AdamW)
    # memory in bytes, at the parameters' dtype
    weight_bytes: int
    grad_bytes: int  # one gradient per trainable parameter
    optimizer_bytes: int  # the optimizer's state: AdamW's two moments per parameter, Muon's one momentum per
    # entry of the matrices it trains (its AdamW part keeps two); step counters are left out
    activation_bytes: int  # what the forward pass keeps for backward at batch_size x seq_len (see below)
    total_bytes: int  # the four above: a training step's memory, give or take transient buffers
    optimizer: str = "adamw"  # whose state optimizer_bytes counts
    optimizer_label: str = "AdamW"  # the optimizer's name as shown: "AdamW" or "Muon"
    optimizer_state: str = STATE_WORDS["adamw"][1]  # what that state is, in words

    def to_dict(self) -> dict:
        return asdict(self)


def _component_rows(model: nn.Module) -> list[ParamRow]:
    """One row per top-level module, with blocks split into their children (norms, attention, FFN)."""
    counts, tied = parameter_owners(model)
    components: list[tuple[str, nn.Module, int | None]] = []
    for name, child in model.named_children():
        if isinstance(child, nn.ModuleList):
            for i, block in enumerate(child):
                components += [(f"{name}.{i}.{sub}", m, i) for sub, m in block.named_children()]
        else:
            components.append((name, child, None))
    # each parameter summed into its component in one pass: a sum over every parameter for every component grew as
    # n_layers squared (2,000 blocks of d_model=2 took 73 s, 20,000 more than 7 minutes)
    lists = {name for name, child in model.named_children() if isinstance(child, nn.ModuleList)}
    owned: dict[str, int] = {}
    for p, n in counts.items():
        parts = p.split(".")
        key = ".".join(parts[:3]) if parts[0] in lists else parts[0]
        owned[key] = owned.get(key, 0) + n
    rows = []
    for path, module, block in components:
        if _is_plumbing(module):
            continue
        params = owned.get(path, 0)
        partner = tied.get(path)
        rows.append(ParamRow(path, type(module).__name__, params, _component_of(partner, components), block))
    return rows


def _is_plumbing(module: nn.Module) -> bool:
    """Probes and dropouts hold no parameters and cost nothing: not worth a row."""
    return isinstance(module, (nn.Identity, nn.Dropout))


def _component_of(path: str | None, components) -> str | None:
    if path is None:
        return None
    for name, _, _ in components:
        if path == name or path.startswith(name + "."):
            return name
    return path


def linear_flops_per_token(model: nn.Module) -> int:
    """2 * in * out for every nn.Linear a token runs through (each once per token in a decoder-only Transformer).

    A part that runs only some of its Linears for a token (a mixture of experts: the router and its
    experts_per_token experts) says how many FLOPs it costs instead (`linear_flops_per_token()`).
    """
    own = getattr(model, "linear_flops_per_token", None)
    if callable(own):
        return own()
    if isinstance(model, nn.Linear):
        return 2 * model.in_features * model.out_features
    return sum(linear_flops_per_token(child) for child in model.children())


def attention_flops_per_token(config, seq_len: int) -> int:
    """QK^T and AV for one query against seq_len keys, in every head of every layer."""
    return config.n_layers * 2 * (2 * seq_len * config.n_heads * config.head_dim)


# Training is 3 x forward: the backward pass computes two products per forward product (the input's gradient and the
# weight's)
TRAINING_PASSES = 3


def training_flops_per_token(model: nn.Module, seq_len: int) -> int:
    """The matrix-product FLOPs of training one token at sequence length `seq_len`, forward and backward, as the
    ledger counts them (training_flops_per_step / tokens): what `:train` turns into a run's achieved FLOP rate (its
    tokens/s times this) and model FLOPs utilisation. Muon's Newton-Schulz (optimizer_flops_per_step) is per step,
    not per token, and not in it."""
    return TRAINING_PASSES * (linear_flops_per_token(model) + attention_flops_per_token(model.config, seq_len))


def active_parameters(model: nn.Module, n_params: int) -> int:
    """The 6N rule's N: `n_params` less the tables a token only looks up (lookup_parameters) and those a part
    says a token does not run (a mixture of experts: the experts it is not routed to). The norms' gains and the
    biases, which no product multiplies by, stay in."""
    idle = [getattr(m, "idle_parameters", None) for m in model.modules()]
    return n_params - lookup_parameters(model) - sum(f() for f in idle if callable(f))


def lookup_parameters(model: nn.Module) -> int:
    """Parameters of embedding tables that no Linear multiplies by: a lookup reads one row and costs no FLOPs, so
    the 6N rule's N leaves them out (the learned position table; the token embedding where it is untied; a tied
    one is the head's matrix, a product every token runs)."""
    multiplied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
    return sum(m.weight.numel() for m in model.modules()
               if isinstance(m, nn.Embedding) and id(m.weight) not in multiplied)


def activation_floats_per_token(model: nn.Module, seq_len: int) -> int:
    """Floats the forward pass keeps for backward, per token, in training mode: the model's own count
    (MiniTransformerLM.activation_floats, which asks each part), measured in tests/test_ledger.py for the
    seed and in tests/test_variants.py for every variant."""
    return model.activation_floats(seq_len)


def cost_ledger(model: nn.Module, batch_size: int, seq_len: int | None = None, optimizer: str = "adamw",
                dtype: str = "auto") -> Ledger:
    """The parameters, FLOPs and memory of training `model` on batches of batch_size x seq_len tokens.

    seq_len defaults to the context window (max_seq_len), the length a text's training batches have (a task's
    rows are shorter: `:params` passes the length its data's batches have);
    `optimizer` (TrainConfig.optimizer) decides how much state the optimizer keeps per parameter; `dtype`
    (TrainConfig.dtype) which dtype Muon's Newton-Schulz runs in (core.precision.newton_schulz_dtype).
    """
    config = model.config
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise UserError(f"batch size must be a whole number >= 1, got {batch_size!r}")
    if seq_len is None:
        seq_len = config.max_seq_len
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or not 1 <= seq_len <= config.max_seq_len:
        raise UserError(
            f"sequence length must be a whole number in 1..{config.max_seq_len} (max_seq_len), got {seq_len!r}"
        )
    rows = _component_rows(model)
    n_params = sum(r.params for r in rows)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    first = next(model.parameters())
    nbytes = first.element_size()
    tokens = batch_size * seq_len
    linear = linear_flops_per_token(model)
    attention = attention_flops_per_token(config, seq_len)
    forward = linear + attention
    active = active_parameters(model, n_params)
    weight_bytes = n_params * nbytes
    grad_bytes = trainable * nbytes
    muon = hidden_matrices(model) if optimizer == "muon" else []
    muon_entries = sum(p.numel() for _, p in muon)
    ns_dtype = DTYPES[newton_schulz_dtype(dtype, first.device)]  # what BatchedMuon.step runs Newton-Schulz in here
    optimizer_flops = sum(newton_schulz_flops(tuple(p.shape), MUON_NS_STEPS, ns_dtype) for _, p in muon)
    optimizer_bytes = (2 * trainable - muon_entries) * nbytes  # Muon: one buffer where AdamW keeps two
    activation_bytes = tokens * activation_floats_per_token(model, seq_len) * nbytes
    return Ledger(
        batch_size=batch_size,
        seq_len=seq_len,
        rows=rows,
        n_params=n_params,
        linear_flops_per_token=linear,
        attention_flops_per_token=attention,
        forward_flops_per_token=forward,
        forward_flops_per_step=forward * tokens,
        training_flops_per_step=TRAINING_PASSES * forward * tokens,
        six_n_flops_per_step=6 * active * tokens,
        six_n_params=active,
        lookup_params=lookup_parameters(model),
        optimizer_flops_per_step=optimizer_flops,
        muon_matrices=len(muon),
        weight_bytes=weight_bytes,
        grad_bytes=grad_bytes,
        optimizer_bytes=optimizer_bytes,
        optimizer=optimizer,
        optimizer_label=STATE_WORDS[optimizer][0],
        optimizer_state=_state_words(model, optimizer, muon),
        activation_bytes=activation_bytes,
        total_bytes=weight_bytes + grad_bytes + optimizer_bytes + activation_bytes,
    )


def _state_words(model: nn.Module, optimizer: str, muon: list) -> str:
    """What the optimizer's state is, in words. Muon's "the blocks' matrices" named a mixture of experts' routers
    too, which are matrices in the blocks that AdamW trains (core.optimizers.hidden_matrices says why): said so."""
    words = STATE_WORDS[optimizer][1]
    trained = {id(p) for _, p in muon}
    routers = [p for p in model.blocks.parameters() if p.requires_grad and p.dim() == 2 and id(p) not in trained]
    if not muon or not routers:
        return words
    return words.replace("of the blocks' matrices", "of the blocks' matrices but the experts' routers") + \
        " (the routers too)"
