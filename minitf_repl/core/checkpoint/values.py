"""A manifest's values checked before anything is read or built: its model and training configs, its vocabulary,
and that the model is one this lab would build from typed settings. All of it is arithmetic on the configs, so
this module imports no torch: :ls checks every checkpoint it lists with `check_manifest_values` and stays quick.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config import ModelConfig, TrainConfig
from ..errors import CheckpointError, ConfigError
from ..sizes import check_trainable
from ..variants import FEED_FORWARDS, NORMS, POSITIONS
from ..words import count
from .layout import damaged, last_own_evaluation


def check_manifest_values(path: Path, manifest: dict) -> ModelConfig:
    """The model config, once it, the vocabulary and the training config are known to be valid.

    Also that the model is one this lab would build from typed settings (their limits, and
    core.sizes.check_trainable's bound on parameters and memory): a checkpoint can ask for no more
    than a person could type. All of it is arithmetic on the config: nothing is built yet.
    """
    undeclared = undeclared_kind(manifest["model_config"])
    if undeclared is not None:
        setting, value, declared_by = undeclared
        raise UndeclaredKind(f"{path}: its model has {setting}={value}, which is not declared in this process; import "
                             f"the module that declares it ({declared_by}) before loading it",
                             needs=f"{setting}={value}")
    try:
        config = ModelConfig.from_dict(manifest["model_config"])
    except (ConfigError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise CheckpointError(f"{path}: its model config is invalid ({_reason(e)}); "
                              "this checkpoint cannot be used") from None
    vocab = manifest["vocab"]
    if "tokenizer" not in manifest and (len(vocab) != config.vocab_size or len(set(vocab)) != len(vocab)):
        raise damaged(f"{path}: its vocabulary has {count(len(vocab), 'character')} ({len(set(vocab))} distinct) "
                      f"but the model has vocab_size={config.vocab_size}, so this checkpoint is inconsistent")
    try:
        train = TrainConfig.from_dict(manifest["trainer"]["train_config"])
    except (ConfigError, TypeError, ValueError, AttributeError, OverflowError) as e:
        raise CheckpointError(f"{path}: its training config is invalid ({_reason(e)}); "
                              "this checkpoint cannot be used") from None
    try:
        check_loadable(config, train)
    except ConfigError as e:
        raise CheckpointError(
            f"{path}: it asks for more than this lab builds ({_reason(e)}); this checkpoint cannot be used"
        ) from None
    return config


class UndeclaredKind(CheckpointError):
    """A checkpoint of a model with a part of a kind its own process declared (core.variants: `norm=dyt`, its kind and
    its module), which this process has not: loadable once the module that declares it is imported. `needs`: the
    setting as `norm=dyt`, which :ls shows in its row in place of "unreadable"."""

    def __init__(self, message: str, needs: str):
        super().__init__(message)
        self.needs = needs


# The settings whose value is a kind a module may declare (core.variants), with how a kind of each is declared
_DECLARED = {"norm": (NORMS, "declare_norm + @norms.builds"),
             "activation": (FEED_FORWARDS, "declare_feed_forward + @feedforward.activation"),
             "pos_encoding": (POSITIONS, "declare_position")}
_KIND_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")  # a name a module could have declared, safe to print


def undeclared_kind(model_config) -> tuple[str, str, str] | None:
    """(setting, value, how a kind is declared) where the saved config names a kind of a setting that no module of
    this process declared (and none registered its module either: ModelConfig's refusal says what that half lacks);
    None otherwise. Such a checkpoint is no broken one: it was saved by a process that declared the kind, and the
    config's own refusal ("norm must be one of layernorm, rmsnorm, none; this checkpoint cannot be used") called it
    invalid, and :ls "unreadable". A value that is no name (a number, text with spaces or escapes) is left to that
    refusal: it is no kind anyone declared."""
    if not isinstance(model_config, dict):
        return None
    for setting, (kinds, declared_by) in _DECLARED.items():
        value = model_config.get(setting)
        left_out = dict(ModelConfig.spec(setting).left_out)  # a kind said to be left out, with why: the config says it
        if (isinstance(value, str) and _KIND_NAME.match(value) and value not in kinds and value not in kinds.modules
                and value.lower() not in left_out):
            return setting, value, declared_by
    return None


def check_loadable(config: ModelConfig, train: TrainConfig) -> None:
    """ConfigError unless a checkpoint of these settings is one `load_checkpoint` takes: their limits and
    core.sizes.check_trainable's bounds, as if a person had typed them. A save checks it first (a model loaded
    from a Hugging Face folder may be larger than the lab trains), so that no checkpoint is written that would
    not load back."""
    config.check_limits()  # a billion eval_batches would make the next evaluation one that no stop request reaches
    train.check_limits()
    check_trainable(config, train.batch_size, fused=train.fast_path)


def _reason(e: Exception) -> str:
    """The cause part of an error's message (before its fix), short enough for one line."""
    text = str(e).split(";")[0]
    return text if len(text) <= 160 else text[:157] + "..."


# A mixture of one expert a token gated by 1 (a softmax over the one chosen logit) until 6128e820, and since by the
# chosen expert's probability (core/experts.py): the same weights compute another function. Saves since 3d008561 say
# so in the manifest ("moe_top1_gate"); one without it is taken as saved with the gate of 1. Not always so: the 15
# commits from 6128e820 up to 3d008561, which added the key (git rev-list 6128e820^..3d008561^), gated by the
# probability and wrote no key. What they saved is read as the gate of 1's: its load says its outputs changed, which
# they did not, and drops its saved val loss until a :train measures one. No field of those manifests tells them
# from an older minitf's, and a needless short :train is the lesser harm than a stale loss taken for the model's.
TOP1_GATE = "probability"

# The attribute build_model sets on a model it loaded gated_by_one: the step its weights were saved at. A save at
# that step, with no training step since, writes no moe_top1_gate (store.gate_of_now): its weights are still the
# gate of 1's, and a save of them as format 2 took the later loads' notice away.
GATE_OF_ONE_STEP = "minitf_gate_of_one_step"


def gated_by_one(manifest: dict, config: ModelConfig | dict) -> bool:
    """Whether the manifest is of a mixture of one expert a token saved when its gate was 1: loaded now, its
    outputs differ from when it was saved, and so do its losses. `config`: the model's settings, or the manifest's
    model_config as read (store._step_and_val: ModelConfig.from_dict refuses a setting of a newer minitf, and an
    autosave of one lost its step and steps left)."""
    if isinstance(config, dict):  # as ModelConfig.is_moe reads them, a setting not saved at its default
        experts = config.get("n_experts", ModelConfig.spec("n_experts").default)
        one = config.get("experts_per_token", ModelConfig.spec("experts_per_token").default) == 1
        mixture = isinstance(experts, int) and experts > 1
    else:
        mixture, one = config.is_moe, config.experts_per_token == 1
    return mixture and one and manifest.get("moe_top1_gate") != TOP1_GATE


def measured_since(manifest: dict, config: ModelConfig | dict) -> int:
    """The step after which the manifest's val losses are of the model as it computes now: its measured_since_step
    (causal=on/off), or, of one gated_by_one, its step, every loss of its history being of the gate before. A load
    takes it as the session's measured_since_step, so a save before a :train writes it (the stale val loss stays
    dropped), and :ls, :load and layout.last_own_evaluation give no loss of that other function."""
    since = manifest.get("measured_since_step") or 0
    return max(since, manifest["trainer"]["step"]) if gated_by_one(manifest, config) else since


def own_evaluation(manifest: dict, config: ModelConfig | dict, history) -> dict | None:
    """layout.last_own_evaluation, after measured_since (a one-expert mixture of the gate of 1 has none)."""
    return last_own_evaluation({**manifest, "measured_since_step": measured_since(manifest, config)}, history)
