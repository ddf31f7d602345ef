"""Normalisation layers: LayerNorm (the seed's) and RMSNorm, one chosen by `config.norm`, or none.

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * g + b       centre, then scale
    RMSNorm(x)   = x / sqrt(mean(x^2) + eps) * g                    scale only (no mean, no bias)
    Id(x)        = x                                                norm=none: the stream as it is

RMSNorm (Zhang & Sennrich, 2019) drops the centring: it costs less and trains as well, which is why
Llama and most later models use it. With `norm_gain` off a norm learns nothing (no g, no b).

A norm is a module that states what the views need to know about it (`NormPart`): how a formula
writes it in `:shapes`, the floats it keeps for the backward pass (core.ledger) and, where `:ln` may
work it out by hand, the numbers of its arithmetic (`by_hand()`). Its kind, declared in core.variants
(not here: the shell checks `norm=` before torch, so before this module, loads), says what it learns,
so that core.sizes counts it without torch. A new norm is a class here that subclasses `NormPart`
(as well as nn.Module), with `@builds(name)` and a `from_config(dim, config)` classmethod, and its
`declare_norm(...)` in core.variants: the model, the shape trace, the ledger and the sizes ask it, and
nothing else changes. `make_norm` checks each piece as it builds one, the kind's parameter count too,
and names the one missing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

from .config import ModelConfig
from .errors import ConfigError, UserError
from .variants import NORMS

EPS = 1e-5  # ModelConfig.norm_eps's default, nn.LayerNorm's own, so the two kinds differ only in their formula

# norm name (a value of the `norm` setting) -> the module class that `make_norm` builds for it. The kinds' own table
# of modules (core.variants.Kinds.modules), the same dict: `norm=name` with a class here and no kind declared is
# refused with the declaration it lacks, not with the list of choices alone
NORM_MODULES: dict[str, type[nn.Module]] = NORMS.modules


def builds(name: str):
    """Class decorator: `norm=name` builds this class (`cls.from_config(dim, config)`)."""

    def register(cls):
        NORM_MODULES[name] = cls
        return cls

    return register


def make_norm(config: ModelConfig, dim: int) -> nn.Module:
    """The norm `config.norm` names, over `dim` features, with a gain if norm_gain and a bias if also bias."""
    cls = NORM_MODULES.get(config.norm)
    if cls is None:
        raise ConfigError(f"norm={config.norm} has no module; decorate its class with @norms.builds({config.norm!r})")
    name = cls.__name__ if isinstance(cls, type) else repr(cls)
    # The views read a norm's label, formula, kept floats and frozen scale (NormPart's defaults say "unknown" for
    # what a norm does not state): a class without them was built and then made :shapes and :params fail with an
    # AttributeError, so the contract is checked here, where the norm is named
    if not (isinstance(cls, type) and issubclass(cls, NormPart)):
        raise ConfigError(f"norm={config.norm}'s class {name} is not a norms.NormPart, which says what the views read "
                          f"of a norm; subclass it: class {name}(norms.NormPart, nn.Module)")
    if not callable(getattr(cls, "from_config", None)):  # was: a bare AttributeError from the line below
        raise ConfigError(f"norm={config.norm}'s class {cls.__name__} cannot be built from a config; give it a "
                          "classmethod from_config(dim, config) that returns the norm over dim features")
    norm = cls.from_config(dim, config)
    if type(norm).kept_floats is NormPart.kept_floats and not isinstance(getattr(norm, "dim", None), int):
        raise ConfigError(f"norm={config.norm}'s {name} has no dim, the features it normalises over, which "
                          "NormPart.kept_floats counts for the memory views; set self.dim = dim in its __init__")
    check_count(config, dim, norm)
    return norm


def check_count(config: ModelConfig, dim: int, norm: nn.Module) -> None:
    """ConfigError where the norm's kind counts other parameters than the module built has.

    core.sizes counts a model from the kinds before anything is built (the shell's size checks, :set's
    memory estimate), so a kind that miscounts made every such number wrong in silence (a tester's said
    9,568 for a model of 9,763). The norm over `dim` features is checked each time one is built: cheap.
    """
    kind = NORMS.get(config.norm)
    if kind is None:  # a config made without its checks: the setting's own refusal is the one to give
        return
    said, has = kind.parameters(dim, config), sum(p.numel() for p in norm.parameters())
    if said != has:
        raise ConfigError(f"norm={config.norm}'s kind counts {said:,} parameters for one norm over {dim} features, "
                          f"but its module {type(norm).__name__} has {has:,}; make NormKind({config.norm!r}, "
                          "parameters=...) count what from_config builds (core.sizes sizes a model by it)")


def stated(norm: nn.Module, dim: int) -> NormPart:
    """What the views read of a norm: the norm itself, or, for a module of a caller's own set on a model by hand
    (`block.ln_1 = MyNorm()`, which make_norm never saw), a NormPart that names it by its class and says it states
    no formula. `dim`: the features it normalises over, its output counted as what it keeps for backward."""
    return norm if isinstance(norm, NormPart) else Unstated(type(norm).__name__, dim)


@dataclass
class FrozenNorm:
    """A norm with its scale fixed at one input's: norm(x) = linear(x) + offset, exactly, for that x.

    Frozen, the norm is affine, so a sum of parts of x goes through it part by part: norm(a + b) =
    linear(a) + linear(b) + offset. Direct logit attribution reads each part of the residual stream
    through it this way (core.attribution); `offset` is what the norm adds on its own (its bias).
    """

    linear: Callable[[torch.Tensor], torch.Tensor]  # (..., d) -> (..., d), linear in its input
    offset: torch.Tensor  # (d,)
    scale: torch.Tensor  # (..., 1): the scale the norm divided x by
    biased: bool = True  # the norm has a bias, its offset (False: none, and the offset is 0 by construction)


@dataclass
class ByHand:
    """What `:ln` (core.inside.norm_worked) needs to work a norm out by hand: the numbers of the one arithmetic
    it knows, y = c / sqrt(mean(c^2) + eps) * g + b with c = x - mean(x) if `centres` else x.

    LayerNorm and RMSNorm are that arithmetic; a norm that is not (ScaleNorm divides by ||x||) gives none,
    so that `:ln` refuses it instead of showing another norm's arithmetic with its numbers.
    """

    centres: bool  # subtracts the mean before it scales (LayerNorm) or scales only (RMSNorm)
    eps: float  # under the square root
    gain: torch.Tensor | None  # g, per feature (None: no gain)
    bias: torch.Tensor | None  # b, per feature (None: no bias)


class NormPart:
    """What every norm tells the views. `label` names it in a formula: LN(x), RMSNorm(x); `divides_by` names
    the scale it divides its input by (the `scale` of `frozen`), in the residual stream view."""

    label = "Norm"
    divides_by = "scale"
    # True: subtracts the mean before it scales (LayerNorm); False: scales only (RMSNorm); None: the norm does not
    # say. `:ln` reads by_hand(), not this: centring alone does not say how a norm scales
    centres: bool | None = None

    def by_hand(self) -> ByHand | None:
        """The numbers `:ln` works this norm out with (see ByHand); None, the default: it cannot be, so it says no."""
        return None

    def frozen(self, x: torch.Tensor) -> FrozenNorm:
        """This norm at `x` with its scale frozen there (see FrozenNorm); a norm that cannot be frozen says so."""
        raise UserError(f"the {self.label} norm does not say how to freeze its scale, so its input cannot be "
                        "split into parts; use norm=layernorm or norm=rmsnorm")

    def rule(self) -> str | None:
        """Its formula over x, shown beside the step (None: the label says enough, as "LN" does); `formula` writes
        it over what the step normalises."""
        return None

    def formula(self, of: str, note: str = "") -> str:
        """The line :shapes shows for this norm applied to `of` ("x", "h", "x'", "q", a post-norm's sum), `note`
        after it: its rule written over `of` ("RMSNorm(h) = h / rms(h) * g"), or its label where it states none.

        The rule is written over x, and x is a name of its own in :shapes (the token embedding; in a block, the
        stream the block reads): the final norm's "RMSNorm(x) = x / rms(x) * g" above "z_t = RMSNorm(h) W_E^T" read
        as the norm of the embedding, and "RMSNorm(x'), RMSNorm(x) = ..." as a second norm of x. A rule with no x
        to write over (a caller's own, written otherwise) is said after the label applied to `of`, as it was.
        """
        rule = self.rule()
        if rule is None:
            return f"{self.label}({of}){note}"
        written = written_over(rule, of)
        return written + note if written != rule or of == "x" else f"{self.label}({of}){note}, {rule}"

    def kept_floats(self) -> int:
        """Floats the norm keeps for the backward pass per vector, beyond its input (its output, by default)."""
        return self.dim


# x standing alone in a rule ("x / rms(x)", "g * x / ||x||"), not inside a name (max, exp) nor x' (another symbol);
# "(x)" is matched whole, so that a sum goes in once: RMSNorm(x + Attention(x)), not RMSNorm((x + Attention(x)))
RULE_X = re.compile(r"\(x\)|(?<![\w'])x(?![\w'])")


def written_over(rule: str, of: str) -> str:
    """A rule written over x, written over `of` instead; a sum in parentheses where the rule divides or scales it."""
    whole = of if re.fullmatch(r"[\w']+", of) else f"({of})"
    return RULE_X.sub(lambda m: f"({of})" if m.group() == "(x)" else whole, rule)


class Unstated(NormPart):
    """A norm module that is not a NormPart (see `stated`), as the views read it: its class name and its width."""

    def __init__(self, label: str, dim: int):
        self.label = label
        self.dim = dim

    def formula(self, of: str, note: str = "") -> str:
        return f"{self.label}({of}){note} (a module of a caller's own, not a norms.NormPart: it states no formula)"


@builds("layernorm")
class LayerNorm(NormPart, nn.LayerNorm):
    """torch's LayerNorm over the last dimension (centre, scale, then g and b), telling the views about itself."""

    label = "LN"
    divides_by = "std"  # sqrt(var(x) + eps), after centring
    centres = True

    @classmethod
    def from_config(cls, dim: int, config: ModelConfig) -> LayerNorm:
        return cls(dim, eps=config.norm_eps, elementwise_affine=config.norm_gain, bias=config.bias)

    @property
    def dim(self) -> int:
        return self.normalized_shape[-1]

    def formula(self, of: str, note: str = "") -> str:
        return super().formula(of, note) + ("" if self.elementwise_affine else " (no gain)")

    def kept_floats(self) -> int:
        return self.dim + 2  # its output, and the mean and 1/std of each vector

    def by_hand(self) -> ByHand:
        return ByHand(centres=True, eps=self.eps, gain=self.weight, bias=self.bias)

    def frozen(self, x: torch.Tensor) -> FrozenNorm:
        scale = torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + self.eps)  # (..., 1): std(x)
        gain = self.weight if self.weight is not None else 1.0

        def linear(part: torch.Tensor) -> torch.Tensor:
            return (part - part.mean(dim=-1, keepdim=True)) / scale * gain  # centring is linear too

        offset = self.bias if self.bias is not None else x.new_zeros(self.dim)
        return FrozenNorm(linear, offset.detach(), scale, biased=self.bias is not None)


@builds("rmsnorm")
class RMSNorm(NormPart, nn.Module):
    """x / rms(x) * g over the last dimension, rms(x) = sqrt(mean(x^2) + eps)."""

    label = "RMSNorm"
    divides_by = "rms"  # sqrt(mean(x^2) + eps), without centring
    centres = False

    def __init__(self, dim: int, eps: float = EPS, gain: bool = True):
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim)) if gain else None  # g

    @classmethod
    def from_config(cls, dim: int, config: ModelConfig) -> RMSNorm:
        return cls(dim, eps=config.norm_eps, gain=config.norm_gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        y = x / rms
        return y * self.weight if self.weight is not None else y

    def rule(self) -> str:
        return "RMSNorm(x) = x / rms(x)" + (" * g" if self.weight is not None else "")

    def frozen(self, x: torch.Tensor) -> FrozenNorm:
        scale = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1): rms(x)
        gain = self.weight if self.weight is not None else 1.0

        def linear(part: torch.Tensor) -> torch.Tensor:
            return part / scale * gain

        return FrozenNorm(linear, x.new_zeros(self.dim), scale, biased=False)  # no bias: nothing of its own

    def by_hand(self) -> ByHand:
        return ByHand(centres=False, eps=self.eps, gain=self.weight, bias=None)

    def kept_floats(self) -> int:
        return self.dim + 1 + (self.dim if self.weight is not None else 0)  # x / rms and rms; the output with a gain

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0] if self.weight is not None else 'no gain'}, eps={self.eps}"


@builds("none")
class NoNorm(NormPart, nn.Module):
    """norm=none: the identity, x handed on as it is, for a block without a norm (the video's stage before it adds
    LayerNorm). It learns nothing and divides by nothing: frozen it is exactly itself (scale 1, offset 0), and it
    has no arithmetic for `:ln` to work out (by_hand() is None)."""

    label = "Id"
    divides_by = "1"  # it divides by nothing: the scale it states is 1
    centres = False

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    @classmethod
    def from_config(cls, dim: int, config: ModelConfig) -> NoNorm:
        return cls(dim)  # no eps, no gain: norm_eps and norm_gain have nothing to act on

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def formula(self, of: str, note: str = "") -> str:
        return f"{of}{note}, as it is (norm=none: no norm)"

    def frozen(self, x: torch.Tensor) -> FrozenNorm:
        return FrozenNorm(lambda part: part, x.new_zeros(self.dim), x.new_ones(*x.shape[:-1], 1), biased=False)

    def kept_floats(self) -> int:
        return 0  # its output is its input: nothing new kept for the backward pass

    def extra_repr(self) -> str:
        return f"{self.dim}, the identity"
