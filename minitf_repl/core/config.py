"""Settings: the model, its training and its sampling, each a plain dataclass importable without torch.

Every field is declared once, with `setting(default, help, ...)`: its type, its help line, its
choices, the range of values that make sense, and a `limit` that keeps a typo (`steps=1e12`) from
exhausting the machine. The shell builds `:set`, `:config`, completion, `--set` and the checks of
typed values from these declarations (`Settings.specs()`), so a new field is one line here.

Two kinds of bounds, on purpose:
- the range (`low`, `high`, ...) is what is *valid*: `validate()` enforces it on every config,
  including those a Python caller builds or a checkpoint brings;
- the `limit` is what is *sane to type here*: the front ends check each typed value against it
  (`SettingSpec.check_limit`, through parsing.check_value), and a checkpoint's configs are held to
  it as a whole (`check_limits()`, core.checkpoint), so a caller with a large GPU can still build
  a larger config in Python.

Keeping this module free of torch lets the shell parse and validate `:set key=value` before the
(slow) torch import has finished.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError, UserError
from .numbers import NumberTooLarge, whole_number
from .variants import (FEED_FORWARDS, NORMS as NORM_KINDS, POSITIONS, Choices, feed_forward_kind, norm_kind,
                       position_kind)

# The seed's choices come first (messages list them in this order). The three that pick a part of the
# model are the kinds core.variants declares, so that a kind declared there is a valid value here.
ACTIVATIONS = Choices(FEED_FORWARDS)
POS_ENCODINGS = Choices(POSITIONS)
NORMS = Choices(NORM_KINDS)
NORM_PLACEMENTS = ("pre", "post")
ATTENTION_IMPLS = ("explicit", "sdpa")
OPTIMIZERS = ("adamw", "muon")
TRAIN_DTYPES = ("auto", "float32", "bfloat16")  # core/precision.py: what each means
# The variable that names the kernel of the float32 products on a CPU (core.fastpath.products_choice), else measured
# once a process: here, without torch, so that the settings' help can name it
PRODUCTS_ENV = "MINITF_PRODUCTS"


# --- what a setting is ---------------------------------------------------------------------------
@dataclass(frozen=True)
class SettingSpec:
    """One declared field: what the shell shows, completes and checks for it."""

    name: str
    type: type  # int | float | str | bool
    default: Any
    help: str
    section: str = ""  # the config it belongs to: "model", "training", "generation", ...
    choices: tuple | None = None
    low: float | None = None  # smallest valid value (inclusive unless low_open)
    low_open: bool = False
    high: float | None = None  # largest valid value (inclusive unless high_open)
    high_open: bool = False
    limit: int | None = None  # largest value a person may type (see the module docstring)
    nullable: bool = False  # None is a valid value ("off", "random"); typed as `none`
    derived_from: str | None = None  # set: not a setting of its own; says where its value comes from
    aliases: tuple = ()  # other accepted spellings of the key, e.g. batch for batch_size
    # words a beginner types for it that set nothing, answered "did you mean" it (`context` is also a command)
    meant_by: tuple = ()
    in_place: bool = False  # changes no weight: a built model takes the new value and keeps its weights
    # in_place, and yet another function of the same weights (causal): the losses measured before are not the model's
    # as it computes now (Session.measured_since_step)
    new_function: bool = False
    suggestions: tuple = ()  # what Tab offers for a value that is not one of fixed choices (tokenizer=bpe:N)
    folder: bool = False  # the value is a folder's path: Tab completes folders, a quoted Windows path is read whole
    shell_option: str | None = None  # set: the one-shot shell gives it as this option of minitf's, never as --set
    # values left out on purpose, each with why, said where one is refused: ((value, why), ...) (dtype=float16, the
    # GPU fallback of nanoGPT's, was refused with the choices alone)
    left_out: tuple = ()

    def range_text(self) -> str:
        """The valid range in words: "> 0", ">= 1", "in [0, 1)", "" when unbounded."""
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            return f"in {'(' if self.low_open else '['}{_g(lo)}, {_g(hi)}{')' if self.high_open else ']'}"
        if lo is not None:
            return f"{'>' if self.low_open else '>='} {_g(lo)}"
        if hi is not None:
            return f"{'<' if self.high_open else '<='} {_g(hi)}"
        return ""

    def check(self, value, typed: str | None = None):
        """The value if valid for this setting, else ConfigError naming the field and what would work; `typed`: the
        value as the user typed it, which a refusal quotes (`lr=0` refused as "got 0", not as the float "got 0.0")."""
        name = self.name
        shown = typed if typed is not None else _show(value)
        value = _plain(value)
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{name} cannot be none; give a value")
        if self.type is bool:
            if not isinstance(value, bool):
                # the shell reads on/off itself: a value here comes from Python (or a file), where 'off' is a string
                raise ConfigError(f"{name} must be on or off (True or False), got {shown}")
            return value
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{name} must be a whole number, got {shown}")
        elif self.type is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{name} must be a number, got {shown}")
            if not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {typed if typed is not None else value}")
        elif not isinstance(value, str):
            raise ConfigError(f"{name} must be text, got {shown}")
        if self.choices is not None and value not in self.choices:
            why = dict(self.left_out).get(value.strip().lower()) if isinstance(value, str) else None
            if why is None and isinstance(self.choices, Choices):  # a module registered for it, no kind declared
                why = self.choices.why_not(value)
            raise ConfigError(f"{name} must be one of {', '.join(map(str, self.choices))}; got {shown}"
                              + (f": {why}" if why else ""))
        if not self._in_range(value):
            # top_k=0 is "off" in other tools (Hugging Face's generate): here none is, and the error says so
            off = self.help.partition("(none: ")[2].partition(")")[0] if self.nullable else ""
            fix = f"; {name}=none is {off}" if off else ""
            raise ConfigError(f"{name} must be {self._range_words()}, got {shown}{fix}")
        return value

    def check_limit(self, value) -> None:
        if self.limit is not None and value is not None and not isinstance(value, bool) and value > self.limit:
            # a whole number in full (grouped); a float, or a whole number too long to read, as 1e+09 is written:
            # `seed=1e30` read as an int is 1000000000000000019884624838656, digits the user never typed
            shown = f"{value:,}" if isinstance(value, int) and len(str(value)) <= 30 else f"{value:.4g}"
            raise ConfigError(f"{self.name}={shown} is too large: at most {self.limit:,}; use a smaller value")

    def _in_range(self, value) -> bool:
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        if self.high is not None and (value > self.high or (self.high_open and value == self.high)):
            return False
        return True

    def _range_words(self) -> str:
        if self.low == 0 and self.low_open and self.high is None:
            return "positive"
        if self.type is int and self.low == 1 and self.high is None:
            return "a positive whole number"
        if self.type is int and self.high is None:
            return f"a whole number {self.range_text()}"
        return self.range_text()


def setting(default, help: str, *, type: type | None = None, **spec) -> Any:
    """A dataclass field with its SettingSpec (minus name and section, filled in by `specs()`)."""
    kind = type if type is not None else default.__class__
    return dataclasses.field(default=default, metadata={"setting": dict(spec, type=kind, help=help)})


def _g(x) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def _plain(value):
    """A number of numpy's or torch's (np.int64(128), np.float32(0.1), torch.tensor(65)) as the Python number it holds,
    anything else as it is: a config is saved as JSON, and a notebook's sizes come from arrays and tensors (they were
    refused as "must be a whole number, got np.int64(128)"). One value only: a scalar, or an array of shape ()."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if isinstance(value, float):  # np.float64 is a float, but is kept as numpy's (and np.float32 is not one)
        return float(value)
    item = getattr(value, "item", None)
    return item() if callable(item) and getattr(value, "shape", None) == () else value


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class Settings:
    """What the config dataclasses share: declared fields, their checks, and a plain-dict round trip."""

    kind = "settings"  # the section name, shown in `:config` and in errors

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def specs(cls) -> list[SettingSpec]:
        out = []
        for f in dataclasses.fields(cls):
            meta = f.metadata.get("setting")
            if meta is not None:
                out.append(SettingSpec(name=f.name, default=f.default, section=cls.kind, **meta))
        return out

    @classmethod
    def spec(cls, name: str) -> SettingSpec:
        return next(s for s in cls.specs() if s.name == name)

    def validate(self) -> None:
        """Every field against its declaration, then the rules that tie fields together."""
        for spec in self.specs():
            given = getattr(self, spec.name)
            value = spec.check(given)
            if spec.type is float and isinstance(value, int):
                value = float(value)  # 1 means 1.0: store the declared type
            if value is not given:  # np.int64(128) stored as 128: what a checkpoint's JSON can hold
                object.__setattr__(self, spec.name, value)
        self.check_together()

    def check_together(self) -> None:
        """Rules between fields (none by default)."""

    def check_limits(self) -> None:
        """The sanity limits on values a person typed (see the module docstring)."""
        for spec in self.specs():
            spec.check_limit(getattr(self, spec.name))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(f"unknown {cls.kind} setting(s): {', '.join(unknown)}")
        return cls(**d)

    def replace(self, **changes):
        """A new, validated config with some fields changed (the original is untouched); a setting's other spellings
        (nanoGPT's block_size, max_iters, ...) name it here as they do in `:set`."""
        return type(self).from_dict({**self.to_dict(), **type(self).spelled(changes)})

    @classmethod
    def spelled(cls, values: dict) -> dict:
        """`values` with each alias of a setting (block_size for max_seq_len, ...) turned into the setting's name."""
        names = {alias: spec.name for spec in cls.specs() for alias in spec.aliases}
        out = {}
        for key, value in values.items():
            name = names.get(key, key)
            if name in out or (name != key and name in values):
                raise ConfigError(f"{key} and {name} are one {cls.kind} setting; give it once, as {name}")
            out[name] = value
        return out

    @classmethod
    def close_setting(cls, word: str, exact: bool = False) -> str | None:
        """The setting a keyword that names none may have meant, as `:set` finds it (registry.close_option): one that
        declares it a beginner's word for it (meant_by: `heads` for n_heads), with `exact` only that or one of its
        spellings; else the one setting it begins, else the closest spelling (`n_embed` -> d_model, through n_embd)."""
        word = word.replace("-", "_").lower()
        specs = cls.specs()
        spelled = {spelling: spec.name for spec in specs for spelling in (spec.name, *spec.aliases)}
        meant = [spec.name for spec in specs if word in spec.meant_by]
        if meant or exact:
            return meant[0] if meant else spelled.get(word)
        begun = {name for spelling, name in spelled.items() if len(word) >= 3 and spelling.startswith(word)}
        if len(begun) == 1:
            return begun.pop()
        close = difflib.get_close_matches(word[:40], list(spelled), n=1, cutoff=0.6)
        return spelled[close[0]] if close else None


# The config classes a Python caller builds by keyword (taking_aliases): where a keyword one refuses may belong.
_BUILT_BY_KEYWORD: list[type] = []


def _unknown_keyword(cls, key: str, value) -> TypeError:
    """Python's own TypeError for a keyword `cls` takes no setting by, with the help `:set` gives for it: the setting
    meant (ModelConfig(heads=4): n_heads), or the other config that has it (ModelConfig(lr=1e-3): TrainConfig's)."""
    shown = _show(_plain(value))
    own = cls.close_setting(key, exact=True)
    other = next(((kind, name) for kind in _BUILT_BY_KEYWORD if kind is not cls
                  for name in [kind.close_setting(key, exact=True)] if name is not None), None)
    # a near name of its own only where it holds the key (seed in gen_seed): another config's very name beats a
    # spelling alike (ModelConfig(batch_size=8) was asked "did you mean max_seq_len?")
    near = cls.close_setting(key)
    own = own or (near if other is None or (near is not None and key in near) else None)
    if own is not None and other is not None:
        hint = f"; did you mean {own}? ({key} is a setting of {other[0].__name__})"
    elif own is not None:
        hint = f"; did you mean {own}? {cls.__name__}({own}={shown})"
    elif other is not None:
        kind, name = other
        hint = (f"; {key} is a setting of {kind.__name__}:" if name == key else
                f"; did you mean {kind.__name__}'s {name}?") + f" {kind.__name__}({name}={shown})"
    else:
        hint = f"; its settings: {', '.join(spec.name for spec in cls.specs())}"
    return TypeError(f"{cls.__name__}.__init__() got an unexpected keyword argument {key!r}{hint}")


def taking_aliases(cls):
    """A config class whose constructor takes its settings' other spellings too: ModelConfig(block_size=64) is
    ModelConfig(max_seq_len=64), as `:set block_size=64` is (a script written after nanoGPT failed with
    "unexpected keyword argument 'block_size'"). A keyword of no setting is still Python's TypeError, with the
    setting it may have meant, or the config it belongs to (`ModelConfig(lr=1e-3)`: TrainConfig), as `:set` says."""
    init = cls.__init__
    fields = {f.name for f in dataclasses.fields(cls) if f.init}

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        given = cls.spelled(kwargs)
        unknown = next((key for key in given if key not in fields), None)
        if unknown is not None:
            raise _unknown_keyword(cls, unknown, given[unknown])
        try:
            init(self, *args, **given)
        except ConfigError as e:
            # the refusal names settings by their own names: say which of them the caller typed by another
            typed = [f"{key} is {name}" for key, name in zip(kwargs, given) if key != name]
            if typed and hasattr(e, "add_note"):  # BaseException.add_note is Python 3.11's; 3.10 says the names
                e.add_note(f"({', '.join(typed)}: the names {cls.__name__} gives them)")
            raise

    cls.__init__ = __init__
    _BUILT_BY_KEYWORD.append(cls)
    return cls


# --- the three configs ---------------------------------------------------------------------------
@taking_aliases
@dataclass
class ModelConfig(Settings):
    """The architecture. Defaults: the model the first `:train` on pydoc trains in about a minute, but for
    vocab_size, which the data sets (the shell sets it; from Python: vocab_size=data.tokenizer.vocab_size)."""

    kind = "model"

    vocab_size: int = setting(50, "tokens in the vocabulary", low=1,
                              derived_from="the data and its tokenizer (char: a token per character of the "
                                           "data; bpe:N: N tokens); switch the data or the tokenizer to change it")
    # Aliases here and in TrainConfig and GenConfig are nanoGPT's names for the same settings (its train.py and
    # sample.py): a learner who read them types block_size or max_iters, and `:set block_size=32` should not
    # answer "did you mean batch_size?". Only exact equivalents: nanoGPT's min_lr is a rate, not a ratio, and its
    # warmup_iters=W peaks at step W, where warmup_steps=W peaks at W - 1 (both said where :set refuses them).
    max_seq_len: int = setting(64, "context window T: the longest input", low=1, limit=16_384,
                               aliases=("block_size",), meant_by=("context", "context_length", "window"))
    # No limits on the sizes themselves: core.sizes.check_trainable bounds the parameters and memory they imply.
    d_model: int = setting(128, "width of the residual stream", low=1, aliases=("n_embd",), meant_by=("width",))
    n_heads: int = setting(4, "attention heads (must divide d_model)", low=1, aliases=("n_head",),
                           meant_by=("heads",))
    n_layers: int = setting(4, "Transformer blocks", low=1, high=1024, aliases=("n_layer",), meant_by=("layers",))
    # With swiglu the hidden width is ffn_hidden(config) = int(2 * d_ff / 3): three matrices instead
    # of two, so the parameter count stays about the same as the two-matrix FFN of width d_ff.
    d_ff: int = setting(512, "hidden width of the feed-forward network, usually 4 * d_model "
                        "(swiglu uses max(1, int(2 * d_ff / 3)))", low=1)
    dropout: float = setting(0.0, "dropout probability", low=0.0, high=1.0, high_open=True, in_place=True)
    activation: str = setting("gelu", "feed-forward activation: gelu (the exact form, with the erf: nanoGPT's "
                              "nn.GELU()), relu, gelu_tanh (GPT-2's tanh approximation), relu2 (ReLU squared) or "
                              "swiglu (gated, three matrices)", choices=ACTIVATIONS)
    pos_encoding: str = setting("learned", "positions, since attention alone reads the tokens before it as an "
                                "unordered set (only the causal mask orders them): a learned table or fixed sinusoids "
                                "added at the input, rope (q and k rotated inside attention) or none",
                                choices=POS_ENCODINGS)
    # A base, an eps and a top-k are read by the forward pass, never stored in a weight: a trained model takes a new
    # value in place (how a rope model trained at one base reads another), a new function of the same weights.
    rope_base: float = setting(10000.0, "RoPE base: pair c of a head turns by pos * rope_base^(-2c/head_dim)",
                               low=1.0, low_open=True, limit=1_000_000_000, in_place=True, new_function=True)
    norm: str = setting("layernorm", "normalisation: layernorm (centre and scale), rmsnorm (scale only) or none (the "
                        "identity: no norm)", choices=NORMS)
    # pre: x + f(norm(x)) (GPT-2 and later); post: norm(x + f(x)) (the original Transformer, GPT-1),
    # which then needs no final norm before the head.
    norm_placement: str = setting("pre", "where the norm sits: pre (before each sublayer) or post (after the "
                                  "residual add)", choices=NORM_PLACEMENTS)
    # The residual connection is what lets a deep stack train: the add hands the gradient down
    # untouched. Off, each sublayer's output replaces the stream, for the lab's "why residuals" experiment.
    residual: bool = setting(True, "each sublayer adds its output to the stream, x + f(norm(x)); off: the output "
                                   "replaces the stream, f(norm(x)), and nothing carries x or its gradient past f")
    # The feed-forward half of each block. Off, a block is attention and its add alone: the "Let's build GPT" video's
    # stage before it adds the FFN, for the lab's "why the FFN" experiment (no ln_2, no FFN weights are built).
    ffn: bool = setting(True, "each block has its feed-forward network after attention, x' + FFN(norm(x')); off: "
                              "attention only, no FFN and no norm before it (d_ff and activation then build nothing)")
    # The causal mask M is what makes a language model of the attention: position i reads keys j <= i only, so
    # predicting token i+1 cannot read it. Off, the next token is in the input and attention learns to copy it:
    # the loss falls toward 0 while generation, which has no next token to read, fails (the lab's "why the
    # mask" experiment). No weight depends on it, so a trained model takes either value in place.
    causal: bool = setting(True, "the causal mask: position i attends to positions j <= i only; off: every position "
                                 "sees the whole window, the next token included", in_place=True,
                                 new_function=True)
    # 1e-5 is GPT-2's and torch's LayerNorm default; Llama's RMSNorm uses 1e-6 or 1e-5 (a loaded model brings its own).
    # At least float32's smallest normal number: an eps below it is 0 or all but 0 in the weights' float32, and a
    # stream of zeros (dropout near 1) made 0 / sqrt(0 + 0) = nan, a divergence blamed on the learning rate.
    norm_eps: float = setting(1e-5, "the eps every norm adds under its square root (keeps the division finite)",
                              low=1e-38, high=1.0, in_place=True, new_function=True)
    norm_gain: bool = setting(True, "norms learn a gain g (and, in a layernorm, a bias with bias on); off: no learned "
                                    "norm parameters")
    qk_norm: bool = setting(False, "normalise q and k of each head before their dot product (same norm kind)")
    # None (or 0) means n_heads: every query head has its own keys and values (MHA). 1: multi-query
    # attention (MQA); in between: grouped-query attention (GQA), n_heads / n_kv_heads queries share one.
    n_kv_heads: int | None = setting(None, "key/value heads: none or 0 = n_heads (MHA), 1 (MQA), or a divisor of "
                                     "n_heads (GQA); the KV cache shrinks with them", type=int, low=0, nullable=True)
    tie_embeddings: bool = setting(True, "the output head reuses the token embedding matrix (off: its own matrix)")
    # The output head and the experts' router have no bias either way (as GPT-2's and nanoGPT's head has none).
    bias: bool = setting(True, "biases in the blocks' linear layers (attention and FFN, not a router) and in the "
                               "layernorms; the output head has none either way")
    n_experts: int = setting(0, "mixture of experts: feed-forward experts per block (0 or 1: one dense FFN)", low=0,
                             limit=1024)
    experts_per_token: int = setting(2, "mixture of experts: experts each token is routed to (top-k)", low=1,
                                     limit=1024, in_place=True, new_function=True)
    # A weight of the training loss, read at each step: no weight depends on it, so a trained model keeps its weights.
    moe_aux_weight: float = setting(0.01, "mixture of experts: weight of the load-balancing loss added in training",
                                    low=0.0, limit=100, in_place=True)
    # explicit: the formula written out, with a probe at every step (the learner's path).
    # sdpa: torch.nn.functional.scaled_dot_product_attention, same weights (the fast path).
    attention: str = setting("explicit", "explicit formula (probes) or the fused sdpa kernel, same weights",
                             choices=ATTENTION_IMPLS, in_place=True)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """The number of key/value heads actually built (n_kv_heads, with none or 0 meaning n_heads)."""
        return self.n_kv_heads or self.n_heads

    @property
    def is_moe(self) -> bool:
        # the experts are feed-forward networks: with ffn=off there are none to route among, whatever n_experts says
        return self.n_experts > 1 and self.ffn

    def as_built(self) -> dict:
        """The settings as the built model reads them: two configs equal here build the same weights.

        n_kv_heads none, 0 and n_heads are all one head of keys and values per query head; n_experts 0 and
        1 one dense FFN; experts_per_token routes nothing without experts, rope_base turns nothing
        without rope, and d_ff, activation and n_experts build nothing with ffn=off. max_seq_len sizes a weight only
        where positions are a learned table: rope, sinusoidal and none compute what the window needs (the
        mask, the rotations, the sines), so a model keeps its weights over a new window, which is how a
        learner trains short and then reads or trains longer.
        """
        built = {**self.to_dict(), "n_kv_heads": self.kv_heads, "n_experts": self.n_experts if self.is_moe else 0}
        if not self.is_moe:
            built["experts_per_token"] = None
        if not position_kind(self).rotary:
            built["rope_base"] = None
        if not position_kind(self).learned:
            built["max_seq_len"] = None
        if not self.ffn:  # no feed-forward is built: its width and activation size and pick nothing
            built.update(d_ff=None, activation=None)
        return built

    def unread(self) -> dict[str, str]:
        """{setting: the setting whose value leaves it unread} for the settings this model reads nothing of now, e.g.
        {"rope_base": "pos_encoding"} without rope: their values wait for a model that reads them."""
        out = {} if position_kind(self).rotary else {"rope_base": "pos_encoding"}
        if not self.is_moe:
            out.update(experts_per_token="n_experts", moe_aux_weight="n_experts")
        if not self.ffn:  # the experts are feed-forward networks too
            out.update(d_ff="ffn", activation="ffn", n_experts="ffn", experts_per_token="ffn", moe_aux_weight="ffn")
        return out

    def builds_from(self, name: str) -> bool:
        """Whether the model built from this config reads setting `name`, so that a change of it alone may build other
        weights: not max_seq_len without a learned table, rope_base without rope, experts_per_token without experts
        (as_built leaves those out)."""
        return self.as_built()[name] is not None

    def fitting_heads(self) -> list[int]:
        """The head counts (up to 64) that this model's other settings take: dividing d_model, a multiple of
        n_kv_heads, an even head width under rope. What a refusal of n_heads offers, and what Tab offers for it."""
        return [k for k in range(1, min(self.d_model, 64) + 1) if self.d_model % k == 0
                and (not self.n_kv_heads or k % self.n_kv_heads == 0)
                and not (self.pos_encoding == "rope" and (self.d_model // k) % 2)]

    def fitting_kv_heads(self) -> list[int]:
        """The key/value head counts (up to 64) that divide n_heads."""
        return [k for k in range(1, min(self.n_heads, 64) + 1) if self.n_heads % k == 0]

    def fitting_width(self) -> int:
        """The d_model nearest this one that n_heads divides into even head widths. Even under any position
        encoding: `:set n_heads=3` offered d_model=129, an odd width whose heads of 43 rope cannot take."""
        step = 2 * self.n_heads
        return max(step, round(self.d_model / step) * step)

    def check_together(self) -> None:
        if self.d_model % self.n_heads != 0:
            # the head counts offered must pass the checks below too: a multiple of n_kv_heads, an even width for rope
            fits = self.fitting_heads()
            kept = " and ".join(filter(None, [f"n_kv_heads={self.n_kv_heads}" if self.n_kv_heads else None,
                                              "pos_encoding=rope" if self.pos_encoding == "rope" else None]))
            raise ConfigError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); "
                + (f"n_heads could be one of {', '.join(map(str, fits))}" if fits else
                   f"no n_heads fits it with {kept}: choose another d_model"),
                fitting=[{"n_heads": _nearest(fits, self.n_heads)} if fits else None,
                         {"d_model": self.fitting_width()}  # for the head counts fitting_heads offers
                         if self.n_heads % self.kv_heads == 0 and self.n_heads <= 64 else None],
            )
        if self.n_heads % self.kv_heads != 0:
            fits, heads = self.fitting_kv_heads(), self.fitting_heads()  # heads: multiples of the n_kv_heads typed
            raise ConfigError(
                f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}); "
                f"n_kv_heads could be one of {', '.join(map(str, fits))}",
                fitting=[{"n_kv_heads": _nearest(fits, self.n_kv_heads)},
                         {"n_heads": _nearest(heads, self.n_heads)} if heads else None],
            )
        if self.pos_encoding == "rope" and self.head_dim % 2 != 0:
            fits = self.fitting_heads()  # even widths, and multiples of n_kv_heads: each a fix that passes
            raise ConfigError(
                f"rope rotates pairs of numbers, but each head has an odd width ({self.head_dim} = d_model / n_heads); "
                "choose d_model and n_heads with an even quotient",
                fitting=[{"n_heads": _nearest(fits, self.n_heads)} if fits else None,
                         {"d_model": self.fitting_width()} if self.n_heads <= 64 else None],
            )
        if self.qk_norm and not norm_kind(self).normalises:
            # norm=none builds q and k "norms" that are the identity: qk_norm=on would quietly normalise nothing
            raise ConfigError(f"qk_norm=on normalises q and k with the model's norm, and norm={self.norm} normalises "
                              "nothing; set qk_norm=off, or norm=layernorm or norm=rmsnorm",
                              fitting=[{"qk_norm": False}, {"norm": "rmsnorm"}])
        if self.is_moe and self.experts_per_token > self.n_experts:
            raise ConfigError(
                f"experts_per_token ({self.experts_per_token}) cannot exceed n_experts ({self.n_experts}); "
                f"lower experts_per_token or raise n_experts"
            )


def _nearest(values: list[int], target: int) -> int:
    """The value nearest `target` (the smaller of two as near)."""
    return min(values, key=lambda v: (abs(v - target), v))


def rebuilding_changes(old: ModelConfig, new: ModelConfig) -> list[str]:
    """The model settings whose change from `old` to `new` changes a weight's shape or meaning, so that a built
    model is rebuilt (weights reset): not one declared in_place, nor a value that builds the same weights (as_built)."""
    before, after = old.as_built(), new.as_built()
    return [spec.name for spec in ModelConfig.specs() if not spec.in_place and before[spec.name] != after[spec.name]]


def new_function_of(config: ModelConfig) -> tuple:
    """The values of the settings declared new_function (the causal mask) as the model reads them (as_built: a
    rope_base without rope is none): two configs that differ in them compute two functions of the same weights."""
    built = config.as_built()
    return tuple(built[spec.name] for spec in ModelConfig.specs() if spec.new_function)


def ffn_hidden(config: ModelConfig) -> int:
    """The hidden width of one feed-forward network (one expert, with experts): its kind says (core.variants)."""
    return feed_forward_kind(config).hidden(config)


@taking_aliases
@dataclass
class TrainConfig(Settings):
    """Optimisation settings for one `:train` run."""

    kind = "training"

    steps: int = setting(600, "length of a run", low=1, limit=10_000_000, aliases=("max_iters",))
    # The defaults are the built-in data's recipe (core/recipes.py; tuning runs in bench/recipes.py).
    batch_size: int = setting(16, "sequences per step and per validation batch (per process under torchrun, whose "
                                  "validation batches hold batch_size x processes)", low=1, limit=4096,
                              aliases=("batch",))
    # core/optimizers.py explains both; muon's lr is scaled so that one lr means the same step size for both.
    optimizer: str = setting("muon", "adamw: AdamW for every weight; muon: Muon (orthogonalised momentum) for the "
                             "matrices inside the blocks, AdamW for the rest; a change keeps the weights and "
                             "restarts the optimizer's memory", choices=OPTIMIZERS)
    lr: float = setting(1e-2, "peak learning rate", low=0.0, low_open=True, aliases=("learning_rate",))
    min_lr_ratio: float = setting(0.1, "the cosine decays towards lr * min_lr_ratio, reached where the run ends "
                                         "(its last step's rate a little above it)", low=0.0, high=1.0)
    # no alias warmup_iters: nanoGPT's peaks a step later (commands.settings says warmup_iters=W is warmup_steps=W+1)
    warmup_steps: int = setting(10, "steps of linear warm-up: lr x (s + 1) / warmup_steps at step s, the peak at step "
                                    "warmup_steps - 1", low=0, limit=10_000_000)
    weight_decay: float = setting(0.01, "weight decay on matrices (AdamW's and Muon's alike)", low=0.0)
    grad_clip: float = setting(1.0, "max global gradient norm (0: off)", low=0.0)
    eval_every: int = setting(100, "steps between evaluations", low=1, limit=10_000_000, aliases=("eval_interval",))
    eval_batches: int = setting(8, "validation batches per evaluation (the loss is their mean; the same batches each "
                                   "time, drawn from seed)", low=1, limit=10_000,
                                aliases=("eval_iters",))
    # the validation batches too (Trainer.evaluate): a new seed scores other val text, and the same model's val loss
    # moved with it, which its help did not say
    # the same seed repeats a run's numbers at the same thread count only (threads=auto reads the machine's load), and
    # its float32 products on the same kernel only, which each process times for itself (core.fastpath): two
    # processes at threads=1 gave float32 losses apart from step 3. Neither moves only the last digits: a bfloat16
    # run at 1 and 2 threads read 2.6292 and 2.6279 at step 80. Nor does dtype=auto's choice: the same seed trained
    # in bfloat16 on a CPU with bfloat16 units and in float32 on one without read val losses up to 0.005 apart and
    # train losses up to 0.037 apart over 100 steps (a tester's two machines). Nor does compile with dropout: inductor
    # draws the masks with random numbers of its own, and compile=on and off read train 3.8560 and 3.8598 after 4 steps
    seed: int = setting(1337, "seed of the initial weights, the batch order and the validation batches; on a CPU, "
                        "another thread count sums floats in another order, which moves a run's numbers from about "
                        "the third decimal on, more as it goes (the threads setting at a number, not auto, fixes it; "
                        "in Python, torch.set_num_threads(N)), and so does the other kernel for float32 products, "
                        f"which each process picks by timing both (${PRODUCTS_ENV} set to onednn or torch fixes it), "
                        "and so does dtype=auto, which trains in bfloat16 on a CPU with bfloat16 units and in float32 "
                        "on one without (dtype=float32 fixes it on every machine), and so does compile with dropout "
                        "above 0: compiled steps draw their dropout masks from torch.compile's own random numbers, "
                        "other masks than compile=off's; with all of these fixed a run "
                        "repeats to the last digit on the same kind of CPU and torch version, and elsewhere (AVX2 "
                        "against AVX-512, Apple silicon, another torch) float32 sums in another order: about 3 to 4 "
                        "decimals agree, fewer as the steps go",
                        low=0, limit=2**63 - 1)
    # Speed switches (core/precision.py). Evaluation always runs eagerly in float32, so val losses compare.
    dtype: str = setting("auto", "training forward pass: float32, or bfloat16 autocast (weights, gradients and "
                         "optimizer state stay float32); auto: bfloat16 where the device multiplies it natively (a "
                         "recent GPU, a CPU with AMX or AVX512-BF16), else float32. Muon's Newton-Schulz follows: "
                         "float32 keeps it in float32 too, so every machine runs the same arithmetic: the same digits "
                         "on the same kind of CPU and torch version, about 3 to 4 decimals alike on another kind",
                         choices=TRAIN_DTYPES,
                         left_out=(("float16", "float16 is left out on purpose: its narrow exponent range underflows "
                                    "small gradients unless the loss is scaled (nanoGPT's float16 runs through a "
                                    "GradScaler), where bfloat16 keeps float32's range and needs no scaling; "
                                    "dtype=bfloat16, or float32 where bfloat16 is slow"),))
    compile: bool = setting(False, "train through torch.compile(model); the first step compiles (falls back to eager)")
    # core/fastpath.py: the readable model's function from fewer kernels; views and :shapes keep the readable path.
    fast_path: bool = setting(True, "training steps compute the model with one q/k/v product and fused attention "
                              "(same parameters, same function); off: through the readable forward")


@taking_aliases
@dataclass
class GenConfig(Settings):
    """Defaults for sampling; options given to one `:gen` override them for that call only."""

    kind = "generation"

    n: int = setting(200, "tokens to generate", low=0, limit=100_000, aliases=("max_new_tokens",))
    temperature: float = setting(0.8, "sampling temperature (0: greedy, always the likeliest token); the logits are "
                                 "divided by it before the softmax: below 1 sharpens the distribution toward the "
                                 "likeliest tokens, above 1 flattens it toward uniform", low=0.0)
    top_k: int | None = setting(None, "sample from the k likeliest tokens only, after the temperature (none: off)",
                                type=int, low=1, nullable=True)
    top_p: float | None = setting(None, "nucleus sampling: from the smallest set of likeliest tokens whose "
                                  "probability reaches p, after the temperature and top_k (none: off)", type=float,
                                  low=0.0, low_open=True, high=1.0, nullable=True)
    gen_seed: int | None = setting(None, "sampling seed (none: a fresh random one each time)", type=int, low=0,
                                   nullable=True, limit=2**63 - 1)
    cache: bool = setting(True, "use the KV cache (off: run the last max_seq_len tokens through the model again for "
                                "every token; past max_seq_len the cache is refilled every token, so the two cost the "
                                "same there)")


# --- how text is read ---------------------------------------------------------------------------
MIN_BPE_TOKENS = 257  # byte-level BPE starts from the 256 bytes; every merge adds one token
MAX_BPE_TOKENS = 65_536


def parse_tokenizer(value: str) -> int | None:
    """`char` -> None (a token per character); `bpe:N` -> N, the tokens of a byte-level BPE (ConfigError otherwise)."""
    kind, colon, size = value.strip().lower().partition(":")
    if kind == "char" and not colon:
        return None
    if kind != "bpe" or not colon:
        raise ConfigError(f"tokenizer={value} is not a tokenizer; choose char or bpe:N (e.g. bpe:512)")
    try:  # as every whole number reads (core.numbers): bpe:1e3 is bpe:1000, bpe:4k is bpe:4000
        n = whole_number("tokenizer", size)
    except NumberTooLarge:  # bpe:1e400, past a float: past the limit as bpe:1e40 is, not "no whole number"
        n = -math.inf if size.strip().startswith("-") else math.inf
        value = value.strip() if len(value.strip()) <= 40 else value.strip()[:37] + "..."  # not its 5,000 digits
    except UserError:
        raise ConfigError(f"tokenizer={value}: N must be a whole number of tokens; e.g. bpe:512") from None
    if n < MIN_BPE_TOKENS:
        raise ConfigError(f"tokenizer={value}: a byte-level BPE has at least {MIN_BPE_TOKENS} tokens (the 256 bytes "
                          f"and one merge); choose bpe:{MIN_BPE_TOKENS} or more, e.g. bpe:512")
    if n > MAX_BPE_TOKENS:
        raise ConfigError(f"tokenizer={value} is too large: at most bpe:{MAX_BPE_TOKENS}; use a smaller N")
    return n


@dataclass
class DataConfig(Settings):
    """How the data's text is read (the data itself is chosen with `:data`)."""

    kind = "data"

    # The value shown is the tokenizer in use: bpe:N with N its actual size (a small text may give fewer
    # merges than asked for), so a loaded GPT-2 reads as bpe:50257.
    tokenizer: str = setting("char", "how text is read: char (a token per character) or bpe:N (a byte-level BPE of "
                             "N tokens, N from 257 to 65,536, trained on the data's training text; the model is "
                             "rebuilt for its vocabulary)",
                             suggestions=("char", "bpe:512", "bpe:1024", "bpe:4096"))

    def check_together(self) -> None:
        size = parse_tokenizer(self.tokenizer)
        # as parse_tokenizer reads it (`Char`, ` BPE:512`): one tokenizer has one spelling, which compares equal
        self.tokenizer = "char" if size is None else f"bpe:{size}"


# --- presets: whole architectures by name ---------------------------------------------------------
# Each preset is the architecture fields it changes relative to ModelConfig's defaults; sizes
# (vocab, context, widths, heads, layers, dropout) and the mixture-of-experts fields are not part
# of an architecture here: a llama with experts is still a llama (Mixtral), so a preset leaves
# them as they are. One exception is derived from the sizes: llama's grouped-query attention uses
# half as many key/value heads as query heads (PRESET_KV_GROUP = 2 query heads per key/value head),
# or plain MHA when n_heads is odd; `preset_changes` resolves it for a given config.
PRESETS: dict[str, dict[str, Any]] = {
    # The seed / blog model: learned positions, pre-LayerNorm, GELU with biases, MHA, tied head.
    "seed": {},
    # GPT-2: the seed with the tanh approximation of GELU.
    "gpt2": {"activation": "gelu_tanh"},
    # Llama (2/3): RoPE, RMSNorm, SwiGLU, grouped-query attention, no biases, untied head.
    "llama": {"pos_encoding": "rope", "norm": "rmsnorm", "activation": "swiglu", "bias": False,
              "tie_embeddings": False},
    # A 2024-25 small-model recipe (modded-nanoGPT and kin): RoPE, RMSNorm without a gain,
    # ReLU squared, QK-norm, no biases, untied head.
    "modern": {"pos_encoding": "rope", "norm": "rmsnorm", "norm_gain": False, "activation": "relu2",
               "qk_norm": True, "bias": False, "tie_embeddings": False},
}
PRESET_KV_GROUP = {"llama": 2}  # query heads per key/value head, when n_heads allows it

# The fields a preset decides (set to the preset's value or else the default). Not rope_base: like norm_eps, a value
# the same architecture comes with in several (Llama 2's 10,000, Llama 3's 500,000), so a loaded Llama 3 read as
# "architecture llama" and then "matches no preset".
PRESET_FIELDS = ("pos_encoding", "norm", "norm_placement", "residual", "ffn", "causal", "norm_gain", "qk_norm",
                 "activation", "n_kv_heads", "tie_embeddings", "bias")


def preset_changes(name: str, config: ModelConfig | None = None, n_heads: int | None = None) -> dict[str, Any]:
    """Every preset field's value under preset `name` for a model shaped like `config` (default sizes if None),
    with `n_heads` query heads where given (a change of heads that comes with the preset)."""
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    n_heads = n_heads or (config.n_heads if config is not None else ModelConfig.n_heads)
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)}
    changes = {field: PRESETS[name].get(field, defaults[field]) for field in PRESET_FIELDS}
    group = PRESET_KV_GROUP.get(name)
    if group is not None and n_heads % group == 0:
        changes["n_kv_heads"] = n_heads // group
    return changes


def apply_preset(config: ModelConfig, name: str) -> ModelConfig:
    """A new config with `config`'s sizes and preset `name`'s architecture."""
    return config.replace(**preset_changes(name, config))


def matching_preset(config: ModelConfig) -> str | None:
    """The preset whose architecture `config` has (sizes ignored), or None. Values that build the same model agree
    (ModelConfig.as_built): n_kv_heads 0, none and n_heads."""
    def built(model: ModelConfig) -> dict:
        as_built = model.as_built()
        return {field: as_built[field] for field in PRESET_FIELDS}

    mine = built(config)
    for name in PRESETS:
        try:
            theirs = built(config.replace(**preset_changes(name, config)))
        except ConfigError:  # a preset this model's sizes cannot take (rope with an odd head_dim): not its own
            continue
        # where the preset groups its key/value heads, how many there are is a size of the model, not its
        # architecture: Llama 2 7B is MHA, Llama 3 8B has 4 query heads a key/value head, 70B 8, and each "matched
        # no preset" where only PRESET_KV_GROUP's 2 did
        ignored = {"n_kv_heads"} if name in PRESET_KV_GROUP else set()
        if {k: v for k, v in theirs.items() if k not in ignored} == {k: v for k, v in mine.items() if k not in ignored}:
            return name
    return None
