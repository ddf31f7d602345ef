"""The choices of the settings that pick a part of the model, as the config knows them: no torch.

`norm`, `activation` and `pos_encoding` each take one *kind* declared here. A kind says what can be
known of its part before anything is built: the parameters it learns (core.sizes counts a model
with them, and must answer before torch has loaded, so that `:set` refuses a typo at once) and,
for a feed-forward network, the width of its hidden layer. The setting's choices are the kinds
declared (`Choices`), so a new kind is a valid value everywhere settings are read.

Everything a view reads from a built model (a step's formula in `:shapes`, its symbols, the memory
it keeps for the backward pass) the module itself states: core.norms, core.feedforward,
core.positions, core.experts and core.model. So a new normalisation is a module (with
`@norms.builds(name)` and a `from_config(dim, config)` classmethod) and its kind
(`declare_norm(NormKind(name, ...))`, here: the shell checks a setting before torch loads core.norms),
and nothing else changes; tests/test_house.py adds one from a test module and finds it in `:shapes`,
`:params` and `parameter_count`. A new activation of the two-matrix FFN is the same: its module (with
`@feedforward.activation(name, formula, below_zero)`) and its kind (`declare_feed_forward(FeedForwardKind(name))`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable


class Choices(Sequence):
    """The names of the kinds in a registry, as a setting's `choices`: a kind declared later is one too.

    A tuple would be fixed when ModelConfig is defined; this reads the registry each time, in
    declaration order (the seed's kind first).
    """

    def __init__(self, registry: dict):
        self.registry = registry

    def __getitem__(self, index):
        return tuple(self.registry)[index]

    def __len__(self) -> int:
        return len(self.registry)

    def __contains__(self, value) -> bool:
        return value in self.registry

    def why_not(self, value) -> str | None:
        """Why `value`, not one of these, is refused, where the registry can say more than the list of choices."""
        return self.registry.why_not(value) if isinstance(self.registry, Kinds) else None

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return repr(tuple(self))


class Kinds(dict):
    """The kinds one setting chooses among, by name, in the order they were declared.

    `modules` is the table of the modules built for these names (core.norms.NORM_MODULES and
    core.feedforward.ACTIVATION_MODULES are this very dict, filled when torch loads them): a name with a
    module and no kind is half a variant, and the setting's refusal names the declaration it lacks
    instead of listing the choices alone (a tester's `@norms.builds("x")` alone was told only the list).
    """

    def __init__(self, setting: str, declaration: str = "", registration: str = ""):
        super().__init__()
        self.setting = setting  # the ModelConfig field whose value names the kind
        self.declaration = declaration  # how a kind is declared, "{name}" for its name: the fix a refusal names
        self.registration = registration  # how its module is registered, as a refusal names it
        self.modules: dict = {}  # name -> what builds its module (core.norms, core.feedforward fill it)

    def why_not(self, name) -> str | None:
        """Why `name` is no value of the setting where a module is registered for it but no kind declared, the fix
        named; None where nothing is registered (the list of choices says enough)."""
        if name in self or name not in self.modules:
            return None
        return (f"its module is registered ({self.registration.format(name=name)}) but its kind is not declared; "
                f"declare it too: {self.declaration.format(name=name)}")

    def declare(self, kind):
        """Make `kind` a value of the setting."""
        self[kind.name] = kind
        return kind

    def of(self, config):
        """The kind `config` chooses."""
        return self[getattr(config, self.setting)]


# --- normalisations ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class NormKind:
    """A normalisation (`norm=name`): what it learns over `dim` features. core.norms builds its module."""

    name: str
    parameters: Callable[[int, Any], int]  # (dim, model config) -> parameters of one norm over dim features
    # False: the norm is the identity (norm=none), so a view that works a norm out or reads its scale says there is
    # none, instead of showing 1 as what it divided by
    normalises: bool = True


NORMS = Kinds("norm", "variants.declare_norm(variants.NormKind({name!r}, lambda dim, config: <its parameters over dim "
                      "features>))", "@norms.builds({name!r})")
declare_norm, norm_kind = NORMS.declare, NORMS.of


# LayerNorm learns a gain g and, with biases on, a bias b per feature; RMSNorm a gain only.
declare_norm(NormKind("layernorm", lambda dim, c: (2 * dim if c.bias else dim) if c.norm_gain else 0))
declare_norm(NormKind("rmsnorm", lambda dim, c: dim if c.norm_gain else 0))
# none: the blocks without a norm (the video's stage before it adds LayerNorm), for the lab's "why the norm"; it
# learns nothing, whatever norm_gain says
declare_norm(NormKind("none", lambda dim, c: 0, normalises=False))


# --- feed-forward networks ---------------------------------------------------------------------------
@dataclass(frozen=True)
class FeedForwardKind:
    """A feed-forward network (`activation=name`): the plain two-matrix FFN with that activation, or a
    gated one (SwiGLU: a gate matrix beside the input matrix, three matrices in all)."""

    name: str
    gated: bool = False
    # the activation's backward reads its own output (ReLU), the very tensor W_2's gradient reads, instead of its
    # input: the network keeps one hidden layer for backward, not two. Declared, so a new activation says it too
    backward_reads_output: bool = False

    def hidden(self, config) -> int:
        """The hidden width of one network (one expert, with experts).

        d_ff for the two-matrix FFN. A gated network has three matrices of its width, so it uses
        int(2 * d_ff / 3) (at least 1): 3 * d * int(2 d_ff / 3) is about 2 * d * d_ff, the
        parameters of the plain FFN.
        """
        return max(1, (2 * config.d_ff) // 3) if self.gated else config.d_ff

    def parameters(self, config) -> int:
        """W_1, b_1, W_2, b_2 (gated: W_g, W_u and W_d, with their biases)."""
        d, h, b = config.d_model, self.hidden(config), int(config.bias)
        inputs = 2 if self.gated else 1
        return inputs * (d * h + b * h) + (h * d + b * d)

    def kept_floats(self, config) -> int:
        """A rough count of the floats one position keeps inside the network for the backward pass:
        the hidden layer before and after the activation (gated: gate, SiLU(gate), up, their product), one of
        them where the activation's backward reads its own output, as relu's does (hidden_layers_kept, as the
        ledger)."""
        return 4 * self.hidden(config) if self.gated else self.hidden_layers_kept() * config.d_ff

    def hidden_layers_kept(self) -> int:
        """How many tensors of the hidden layer's size the two-matrix FFN with this activation keeps for backward.

        Two for most: the activation's input (its derivative reads it) and its output (W_2's gradient reads it).
        ReLU's backward reads its own output, the very tensor W_2 reads, so it keeps one (the cost ledger counted
        two, 8% more than a relu model's forward keeps at d=32, d_ff=48)."""
        return 1 if self.backward_reads_output else 2


def kept_hidden_layers(name: str) -> int:
    """FeedForwardKind.hidden_layers_kept of the kind `activation=name` chooses."""
    return FEED_FORWARDS[name].hidden_layers_kept()


FEED_FORWARDS = Kinds("activation", "variants.declare_feed_forward(variants.FeedForwardKind({name!r}))",
                      "@feedforward.activation({name!r}, ...)")
declare_feed_forward, feed_forward_kind = FEED_FORWARDS.declare, FEED_FORWARDS.of


declare_feed_forward(FeedForwardKind("gelu"))
declare_feed_forward(FeedForwardKind("relu", backward_reads_output=True))
for _name in ("gelu_tanh", "relu2"):
    declare_feed_forward(FeedForwardKind(_name))
declare_feed_forward(FeedForwardKind("swiglu", gated=True))


# --- positions ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PositionKind:
    """Where a token is (`pos_encoding=name`): a table added at the input, a rotation inside attention, or nothing."""

    name: str
    table: str | None  # the formula of the table added at the input, or None: nothing is added there
    learned: bool = False  # the table is learned: max_seq_len x d_model parameters
    rotary: bool = False  # q and k are rotated by their position inside attention (core.positions.RotaryEmbedding)
    embedding: str = "h = x + p"  # what the embedding step computes

    def parameters(self, config) -> int:
        return config.max_seq_len * config.d_model if self.learned else 0


POSITIONS = Kinds("pos_encoding")  # no table of modules: core.positions builds what a kind says, by its fields
declare_position, position_kind = POSITIONS.declare, POSITIONS.of


declare_position(PositionKind("learned", "p = W_P[pos] (learned)", learned=True))
declare_position(PositionKind("sinusoidal", "p = PE(pos) (sinusoidal, fixed)"))
declare_position(PositionKind("rope", None, rotary=True, embedding="h = x (no position added: RoPE rotates q, k)"))
declare_position(PositionKind("none", None, embedding="h = x (no positions: only the causal mask orders tokens)"))
