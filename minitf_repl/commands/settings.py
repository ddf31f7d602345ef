"""`:config`, `:set`, `:data`: the session's settings and its data.

Every setting is declared once beside its config dataclass (core.config, session.ShellConfig);
`:set`'s keys, their help, choices and checks are made from those declarations. A setting that
changes a weight's shape or meaning rebuilds the model, and a trained model is kept as a
checkpoint first (commands.checkpoints.keep_trained_model), so no command loses it. Data with
another vocabulary rebuilds it too; the training settings follow the new data's recipe
(core.recipes) where they still held the old one's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.bpe import tokenizer_setting
from ..core.catalog import TASKS, spec_forms
from ..core.config import DataConfig, GenConfig, ModelConfig, SettingSpec, TrainConfig
from ..core.errors import ConfigError, Interrupted, UsageError, UserError
from ..core.recipes import follow_optimizer, recipe, recipe_label
from ..core.sizes import check_trainable, check_weights_free
from ..core.threads import oversubscribed
from ..core.words import count
from ..palette import VISIBLE, visible
from ..parsing import CLEAR, convert
from ..registry import Param, clip, param_from_setting
from ..render import fmt
from ..render.renderers import render
from ..render.tables import fields, settings_table
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session, ShellConfig
from ..syntax import (SHELL, cmd, exact_text, given_before, keep_with_load, loaded, own_settings, restore,
                      named, setting_text, spell_settings_with, syntax, without_setting)
from .base import REGISTRY, ablation_note, command, complete_data, sampling_notes, switched_off
from .shared import (ACCUMULATION_ELSEWHERE, WARMUP_ITERS_ELSEWHERE, ablations_gone, all_warm_up, bpe_trained_elsewhere,
                     checkpoint_folder, file_changed, keep_trained_model, load_checked, quantized_gone, read_with,
                     recipe_line, redraw_untrained, seed_kept_line, switch_data, width_one_reads_nothing)

if TYPE_CHECKING:  # torch-bound; schema.py resolves the name for --json
    from ..core.data import DataInfo

FAMILY = "settings and data"  # the heading :help lists this module's commands under


# --- :config -------------------------------------------------------------------------------------
@dataclass
class ConfigResult:
    model: dict  # the model settings by name (:set and docs/variant-lab.md)
    train: dict  # the training settings by name
    gen: dict  # the generation settings by name
    data: str  # the :data spec
    device: str  # the device setting (auto, cpu, cuda:N, mps)
    checkpoints: dict = field(default_factory=dict)  # {"dir": ..., "autosave": bool}
    preset: str | None = None  # the preset the model settings match (sizes aside), if any
    tokenizer: str = "char"  # how text is read: char, or bpe:N (the tokenizer setting)
    from_recipe: list[str] = field(default_factory=list)  # training settings that hold the recipe's value, not the default
    recipe_for: str | None = None  # whose recipe that is (core.recipes), e.g. "muon on shakespeare"
    threads: int = 0  # the threads setting: CPU threads torch computes with, 0 = auto (core/threads.py)
    # what is wrong with the data or device setting, said before either is used (each is refused where it is: a
    # `minitf --data /nonexistent config` showed the setting without a word)
    problems: list[str] = field(default_factory=list)
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate now (the settings are unchanged)
    # {setting: "norm=none"}: the model settings this model reads nothing of now, and the setting that leaves them
    # unread (ModelConfig.unread and the norm's declared kind), marked in the table as :set warns when one is set
    unread: dict = field(default_factory=dict, metadata={"view_only": True})


@command("config", "Show the model, training and generation settings.", needs_torch=False, json_version=6)
def cmd_config(session: Session, args: dict, reporter: Reporter) -> ConfigResult:
    from ..core.catalog import data_problem
    from ..core.config import matching_preset

    problems = [] if session.loaded_data is not None else [p for p in [data_problem(session.data_spec)] if p]
    device = session.status().device
    # A device that is not here is a warning, as a missing data file is, and config exits 0: it showed the settings
    # asked for, and the device is refused, exit 1, where a command uses it (`minitf --device cuda config` said
    # nothing of a machine without CUDA)
    if (problem := device_problem(device)) is not None:
        problems.append(problem)
    model, recipe_keys = session.model_config.to_dict(), from_recipe(session)
    if session.loaded_data is None:
        model["vocab_size"] = None  # set by the data, which is loaded on first use (it needs torch)
    return ConfigResult(
        model=model,
        train=session.train_config.to_dict(),
        gen=session.gen_config.to_dict(),
        data=session.data_spec,
        device=device,
        checkpoints={"dir": str(session.checkpoint_dir), "autosave": session.autosave},
        preset=matching_preset(session.model_config),
        tokenizer=session.tokenizer_setting,
        from_recipe=recipe_keys,
        recipe_for=recipe_label(session.recipe_data, session.train_config.optimizer) if recipe_keys else None,
        threads=session.shell_config.threads,
        problems=problems,
        ablations=switched_off(session),
        unread=unread_settings(session.model_config),
    )


def unread_settings(config: ModelConfig) -> dict[str, str]:
    """{setting: "the=value"} for the model settings `config` reads nothing of now, "the=value" the setting that
    leaves each unread: ModelConfig.unread's, and under a norm whose kind declares it no normalisation (norm=none)
    the norm's own settings, which an identity has none of."""
    from ..core.variants import norm_kind

    because = dict(config.unread())
    if not norm_kind(config).normalises:
        because.update(norm_placement="norm", norm_eps="norm", norm_gain="norm")
    return {name: f"{setting}={setting_text(getattr(config, setting))}" for name, setting in because.items()}


def device_problem(name: str) -> str | None:
    """What is wrong with a device setting, said before a command uses it (:config, the REPL's start): a name that is
    no device, or a device named (cuda, cuda:N, mps) that this machine does not have; None where it resolves. Torch
    is read only for a device named: auto and cpu are always here."""
    from ..core.device_names import ACCEPTED_FORMS, well_formed

    if not well_formed(name):
        return f"unknown device {clip(name)!r}; use one of {ACCEPTED_FORMS}"
    if name.strip().lower().split(":")[0] not in ("cuda", "mps"):
        return None
    from ..core.device import resolve_device
    from ..core.errors import DeviceError

    try:
        resolve_device(name)
    except DeviceError as e:
        return str(e)
    return None


def from_recipe(session: Session) -> list[str]:
    """The training settings whose value now is the data's recipe's (core.recipes) and not the default: what
    `:data shakespeare` or `:set optimizer=adamw` moved and nobody has set by hand since."""
    defaults, now = TrainConfig(), session.train_config
    followed = recipe(session.recipe_data, now.optimizer)
    return [name for name, value in followed.items()  # the optimizer in it is the one asked for: a choice, not the
            if name != "optimizer" and getattr(now, name) == value != getattr(defaults, name)]  # recipe's value


@render.register(ConfigResult)
def render_config(result: ConfigResult, console: Console) -> None:
    model = result.model if result.model.get("vocab_size") is not None else {**result.model, "vocab_size": "-"}
    marks = {name: f"unread: {because}" for name, because in result.unread.items()}
    if model is not result.model:
        marks["vocab_size"] = "data not read yet"
    console.print(settings_table("model", model, marks or None))
    console.print()
    console.print(settings_table("training", result.train, {k: "recipe" for k in result.from_recipe}))
    console.print()
    console.print(settings_table("generation", result.gen))
    console.print()
    where = Text("data ", style="cyan") + Text(result.data) + Text("   tokenizer ", style="cyan") + Text(result.tokenizer)
    where += Text("   device ", style="cyan") + Text(result.device)
    if "dir" in result.checkpoints:
        where += Text("   checkpoints ", style="cyan") + Text(str(result.checkpoints["dir"]))
    if "autosave" in result.checkpoints:
        where += Text("   autosave ", style="cyan") + Text(fmt.value(result.checkpoints["autosave"]))
    where += Text("   threads ", style="cyan") + Text(f"{result.threads}" + (" (auto)" if not result.threads else ""))
    console.print(where)
    for problem in result.problems:  # refused where it is used: said here, before
        say(console, f"warning: {problem}", "yellow")
    if result.from_recipe:
        note(console, f"recipe: the value of the recipe for {result.recipe_for} (core/recipes.py), not the default; "
                      f"{cmd('set', result.from_recipe[0])} says more")
    # a preset is an architecture: sizes (d_model, n_layers, ...) are no part of it, so "the model settings match"
    # read wrong under a table of sizes changed
    note(console, (f"the architecture matches the preset {result.preset} (sizes aside)" if result.preset else
                   "the architecture matches no preset") + f"; {cmd('set', 'key=value')} or "
                                                           f"{cmd('set', 'preset=NAME')} changes the settings")
    # `:ablate mask` left `causal on` above, and no word said the model ran with parts switched off
    ablation_note(console, result.ablations, "the settings above are unchanged, and the model runs without these "
                                             "parts")


# --- :set ----------------------------------------------------------------------------------------
# `:set` takes every declared setting; the section of each says which config it changes.
SETTINGS = (ModelConfig, TrainConfig, GenConfig, ShellConfig, DataConfig)


# --- one setting: `:set KEY`, `:help KEY` -----------------------------------------------------------
@dataclass
class SettingHelp:
    """`:set KEY` and `:help KEY` for a key of `:set`: what the setting means, its values and where it is set."""

    name: str  # the key as :set takes it, e.g. "lr"
    aliases: tuple  # its other spellings (nanoGPT's names)
    section: str  # "model", "training", "generation", "shell" or "data"
    help: str  # what it means, in a line
    kind: str  # "int", "float", "on|off", "gelu|relu|..." (+ "|none" where it can be cleared)
    valid: str  # the valid range in words ("> 0", "in [0, 1)"), "" when any value of its kind is
    default: object  # its value in a new session (before a data's recipe)
    now: object  # the session's value (vocab_size: None until the data is read)
    # a model setting whose change rebuilds the model now (weights reset): not max_seq_len without a learned table
    rebuilds: bool
    commands: list[str]  # other commands that take it as an option of the same name ("train")
    refusal: str | None = None  # a key :set does not take (vocab_size comes from the data)
    recipe: str | None = None  # whose recipe the value now is, where that differs from the default: "muon on shakespeare"


def setting_keys() -> list[str]:
    """What `:help <Tab>` offers after the commands: the keys `:help KEY` explains, by the seed's names."""
    return sorted(p.name for p in SET.params if not p.positional and p.setting is not None)


def setting_spellings() -> dict[str, str]:
    """The settings' other spellings, each -> the key `:help KEY` explains (nanoGPT's block_size -> max_seq_len)."""
    return {alias: p.name for p in SET.params if not p.positional and p.setting is not None and p.refusal is None
            for alias in p.aliases}


# Words a learner looks for that name what a setting changes, no spelling of it: `:help WORD` lists the settings that
# declare WORD beside the commands that do (registry.Command.topics). nanoGPT's module names among them (wte, wpe): its
# settings' names work as aliases, and its modules' names were found nowhere.
SETTING_TOPICS = {
    "pos_encoding": ("position", "positions", "pos", "positional", "positional_encoding", "position_embedding",
                     "wpe", "sinusoidal", "sinusoids"),
    "tie_embeddings": ("tied", "tie", "tying", "weight_tying", "embedding", "embeddings", "token_embedding", "wte",
                       "lm_head"),
    "norm": ("ln_1", "ln_2", "ln_f"),
    "norm_placement": ("ln_1", "ln_2", "ln_f"),
    "activation": ("gelu",),
}

# What a topic that is GPT-2's and nanoGPT's name (their model.py's modules) means in minitf's words: `:help c_attn`
# listed :qkv and :attn and left the reader to guess that one matrix there is three here. One line each, shown above
# what declares the word.
# (word, gloss) pairs, not a table keyed by module names: lm_head, ln_1 are words a reader types here, no decision
TOPIC_GLOSSES = dict((
    ("wte", "GPT-2's and nanoGPT's name for the token embedding table W_E (minitf: token_embedding)"),
    ("wpe", "GPT-2's and nanoGPT's name for the learned table of positions (minitf: position_embedding, built with "
           "pos_encoding=learned)"),
    ("c_attn", "GPT-2's and nanoGPT's one matrix that makes q, k and v at once, d_model to 3 x d_model (minitf: "
              "q_proj, k_proj and v_proj, its three thirds; the training fast path multiplies them as one)"),
    ("c_proj", "GPT-2's and nanoGPT's name for two matrices that write to the residual stream: attention's output "
              "projection (minitf: out_proj) and the feed-forward's second matrix (minitf: fc_out)"),
    ("c_fc", "GPT-2's and nanoGPT's first feed-forward matrix, d_model to 4 x d_model (minitf: fc_in, to d_ff)"),
    ("mlp", "GPT-2's and nanoGPT's name for each block's feed-forward network (minitf: ffn)"),
    ("lm_head", "the output head W_U, d_model to a logit for every token of the vocabulary (minitf: lm_head too); "
               "nanoGPT ties it to wte, as tie_embeddings=on does"),
    ("ln_1", "the norm before each block's attention, in GPT-2, nanoGPT and minitf alike (a layernorm in GPT-2)"),
    ("ln_2", "the norm before each block's feed-forward, in GPT-2, nanoGPT and minitf alike"),
    ("ln_f", "the final norm, after the last block and before the head, in GPT-2, nanoGPT and minitf alike (none "
            "with norm_placement=post, whose norms follow each add)"),
    ("gelu", "nanoGPT's nn.GELU(), the exact form x Phi(x) with the erf: minitf's activation=gelu, the default "
            "(GPT-2's tanh approximation is activation=gelu_tanh)"),
    ("init", "a fresh model's weights: every matrix and embedding drawn from a normal of std 0.02 (core/model.py's "
            "INIT_STD), biases 0, as nanoGPT draws them, which also starts each c_proj (out_proj, fc_out) at 0.02 / "
            "sqrt(2 n_layer); minitf keeps one std, measured not to pay (docs/speed.md)"),
    ("mfu", "nanoGPT's model FLOPs utilization (estimate_mfu): the FLOPs a second a run achieves over an A100's "
           "bfloat16 peak, 312 TFLOPS; minitf reports no such ratio, but counts the FLOPs it starts from (below)"),
    ("flops", "floating-point operations: a forward pass's per token and a training step's in all (3 x the forward, "
             "as nanoGPT's estimate_mfu counts 6N + 12 L H Q T per token), counted by what is below"),
))


def setting_help(session: Session, key: str) -> SettingHelp | None:
    """What `:help KEY` and `:set KEY` say of the :set key `key` (its name or another spelling), or None if it is
    none."""
    param = SET.param_named(key.strip().lstrip(":"))
    if param is None or param.setting is None:  # preset= is an action, and its own :help set line says it
        return None
    spec = param.setting
    kind = "|".join(map(str, spec.choices)) if spec.choices else ("on|off" if spec.type is bool else spec.type.__name__)
    others = [c.name for c in REGISTRY.values() if c is not SET and any(_overrides(p, spec) for p in c.params)]
    # Where the value is the data's recipe's (core.recipes) and not the default: why `:data shakespeare` made lr 0.02.
    source = recipe_label(session.recipe_data, session.train_config.optimizer) if spec.name in from_recipe(session) \
        else None
    valid = spec.range_text()
    if spec.limit is not None and spec.high is None:  # the most :set takes, which its refusal would say
        valid = ", ".join(filter(None, [valid, f"at most {spec.limit:,}"]))
    return SettingHelp(spec.name, spec.aliases, spec.section, spec.help, kind + ("|none" if spec.nullable else ""),
                       valid, spec.default, setting_value(session, spec),
                       spec.section == "model" and not spec.in_place and spec.derived_from is None
                       and session.model_config.builds_from(spec.name), others,
                       param.refusal, source)


def shown_setting(session: Session, key: str) -> SettingHelp | None:
    """What `:set KEY` and `:help KEY` show of the :set key `key`: a setting as setting_help has it, and preset=, an
    action that takes a value, as a setting too (`:help preset` was refused where `:set preset` showed it)."""
    if (h := setting_help(session, key)) is not None:
        return h
    param = SET.param_named(key.strip().lstrip(":"))
    if param is None or param.positional or param.refusal is not None or param.setting is not None:
        return None
    return _preset_shown(session, param)


def _overrides(param: Param, spec) -> bool:
    """Whether a command's option sets this setting for that command alone: made from it, or falling back on it.
    A name alone says nothing: `:ngram n=` is the counter's order, `:context seed=` its windows', not `n` or `seed`."""
    if param.refusal is not None or param.name != spec.name:
        return False
    return spec.name in (param.setting.name if param.setting is not None else None, param.default_from)


def also(aliases: tuple) -> str:
    """" (also block_size=)": an option's other spellings, as both help views name them."""
    return f" (also {', '.join(f'{alias}=' for alias in aliases)})" if aliases else ""


def render_setting_help(h: SettingHelp, console: Console) -> None:
    """`:help lr`: the setting's line of `:help set`, with its default, its value now and where it is set."""
    say(console, Text(h.name, style="bold") + Text(f"  {h.section} setting{also(h.aliases)}"))
    say(console, h.help)
    valid = f", {h.valid}" if h.valid else ""
    default = "" if h.refusal else f"default {fmt.value(h.default)}, "  # a derived value's default means nothing
    source = f", the recipe for {h.recipe} (core/recipes.py)" if h.recipe else ""
    now = f"unknown: the data is read on first use ({cmd('data')} reads it)" if h.refusal and h.now is None \
        else fmt.value(h.now)
    say(console, f"{h.kind}{valid}; {default}now {now}{source}")
    if h.refusal:
        note(console, h.refusal)
        return
    option = next((spec.shell_option for cls in SETTINGS for spec in cls.specs() if spec.name == h.name), None)
    where = f"{option} DIR, before the command" if option and syntax() == SHELL else cmd("set", **{h.name: "..."})
    keeps = [c for c in h.commands if REGISTRY[c].param_named(h.name).kept]  # `:train lr=` stays, as :set lr does
    if once := [c for c in h.commands if c not in keeps]:
        where += ", or for one command as its option: " + ", ".join(f"{cmd(c, **{h.name: '...'})}" for c in once)
    if keeps:
        stays = ", and it stays" if syntax() != SHELL else " for that command"  # a one-shot process keeps nothing
        where += "; " + ", ".join(f"{cmd(c, **{h.name: '...'})}" for c in keeps) + f" sets it too{stays}"
    # the :set summary says a model setting resets the weights: say so of those that do, and that the rest do not
    kept = "; the model keeps its weights" if h.section == ModelConfig.kind else ""
    note(console, f"{where}{'; the model is rebuilt, weights reset (step 0)' if h.rebuilds else kept}")


@dataclass
class SetResult:
    # key -> [old, new], only the values that changed; a one-shot `minitf set` (every --json one) checks them and ends
    # with them: give `--set KEY=VALUE` to the command that should run with them
    changed: dict[str, tuple]
    rebuilt: bool  # the model was rebuilt: weights reset
    kept: str | None = None  # the checkpoint the trained model was saved as before the rebuild
    preset: str | None = None  # the preset the model settings now match, if any
    tokenizer: str | None = None  # tokenizer=: the new tokenizer in words, how it reads the text
    vocab_size: int | None = None  # tokenizer=: the vocabulary the model was rebuilt for
    recipe: dict[str, tuple] = field(default_factory=dict)  # optimizer=: {setting: [before, after]} that followed it
    recipe_for: str | None = None  # whose recipe they followed (core.recipes), e.g. "adamw on pydoc"
    shown: list[SettingHelp] = field(default_factory=list)  # `:set KEY ...`: the settings asked about (nothing changed)
    # what was typed, in order ({"preset": "llama"}): the shell's line that keeps a change names it
    given: dict = field(default_factory=dict, metadata={"view_only": True})
    # a model was built before this :set: only then are there weights for "the weights kept" to speak of
    had_model: bool = field(default=True, metadata={"view_only": True})
    # the session's data: where a change rebuilds a model loaded by --load, the shell's line starts a new one on it
    data: str | None = field(default=None, metadata={"view_only": True})
    # that new model's settings where they are not the defaults, as this :set left them (`--load v_llama set
    # n_layers=3` suggested `--data pydoc --set n_layers=3 train`, the seed's architecture with three layers)
    model_after: dict = field(default_factory=dict, metadata={"view_only": True})
    # the settings changed in place that the model reads (new_function, as built; the mask has its own words): the
    # same weights compute another function (a rope_base without rope changes nothing, and said nothing)
    read_anew: list = field(default_factory=list, metadata={"view_only": True})
    # the settings changed in place that leave the function as it was (in_place, not new_function, as built: dropout,
    # read by the training steps alone): "dropout: 0 -> 0.1" alone left it open whether the weights went
    kept_in_place: list = field(default_factory=list, metadata={"view_only": True})


def _set_params() -> list[Param]:
    from ..core.config import PRESETS

    preset = Param("preset", str, choices=tuple(PRESETS),
                   help="model: the architecture of a known model (sizes kept): " + ", ".join(PRESETS))
    # `:set lr` (a name alone) shows the setting, as vim's `:set tabstop?` does: a person who types a
    # setting's name without a value wants to know what it holds.
    # Tab offers each key once, as `lr=` (the option), not again as a name to show.
    keys = Param("keys", str, positional=True, meta="KEY", help="settings to show (value, meaning, range), e.g. lr")
    made = {"tokenizer": {"complete": _tokenizer_values},  # what Tab offers depends on the data
            # ...and on the model: the head counts its d_model takes (Tab offered nothing, where :set n_heads=3 then
            # listed them)
            "n_heads": {"complete": _head_values},
            "n_kv_heads": {"complete": _kv_head_values}}
    return [preset] + [param_from_setting(spec, help=f"{spec.section}: {spec.help}",
                                          **made.get(spec.name, {}))
                       for cls in SETTINGS for spec in cls.specs()] + [keys]


def _head_values(session: Session | None) -> list[str]:
    """What Tab offers for `n_heads=`: the counts the model's d_model (and n_kv_heads, and rope) take."""
    config = getattr(session, "model_config", None) or ModelConfig()  # the shell's Tab: no session, the defaults
    return [str(k) for k in config.fitting_heads()]


def _kv_head_values(session: Session | None) -> list[str]:
    """What Tab offers for `n_kv_heads=`: the divisors of n_heads (and none, every head its own keys and values, which
    Tab offers for any setting that takes none)."""
    config = getattr(session, "model_config", None) or ModelConfig()  # the shell's Tab: no session, the defaults
    return [str(k) for k in config.fitting_kv_heads()]


def _tokenizer_values(session: Session | None) -> list[str]:
    """What Tab offers for `tokenizer=`: char, and bpe:N where the data is text (a task's or random tokens' data, or a
    Hugging Face folder's tokenizer alone, refuse any bpe:N: Tab offered three values that :set then refused). Never
    loads the data: a task is known by its name."""
    offered = list(DataConfig.spec("tokenizer").suggestions)
    if session is None:
        return offered
    data = session.loaded_data
    if data is not None:
        from ..core.data import TextCorpus

        text = isinstance(data, TextCorpus)
    else:
        text = session.data_spec.strip().lower().partition(":")[0] not in TASKS
    return offered if text else [value for value in offered if not value.startswith("bpe:")]


def _text_first() -> str:
    """How to give text, said in the syntax of the front end speaking now."""
    return f"choose text data first, e.g. {cmd('data', 'pydoc')}"  # on disk: no download


def _schedule_elsewhere(session: Session | None = None) -> str:
    return (f"the schedule is {named('train')}'s own option: {cmd('train', schedule='new')} warms up, then follows a "
            f"cosine from lr down to lr x min_lr_ratio, {cmd('train', schedule='continue')} holds one rate (the "
            f"default for a trained model); its shape: {cmd('set', 'warmup_steps', 'min_lr_ratio')}")


def _fixed_elsewhere(session: Session | None = None) -> str:
    from ..core.optimizers import ADAMW_BETAS, MUON_MOMENTUM

    return (f"fixed in minitf, no setting: Muon's momentum {MUON_MOMENTUM:g} (Nesterov), AdamW's betas "
            f"{ADAMW_BETAS} (core/optimizers.py writes both out); the optimizer's settings are optimizer, lr, "
            "weight_decay and grad_clip")


def _decay_length_elsewhere(session: Session | None = None) -> str:
    # core.train.lr_at reaches the floor at step `steps`, one past the last: the last step's rate is a little above
    # it (1.0006e-3 of lr 1e-2 at min_lr_ratio 0.1), which "ends at lr x min_lr_ratio" said otherwise
    return ("the cosine decays over the whole run: nanoGPT's lr_decay_iters is steps here (as its max_iters is), and "
            "the cosine reaches lr x min_lr_ratio one step past the run's last, so the last step's rate is a little "
            f"above it; {cmd('set', 'steps')} shows the run's length")


# the head size of the video and of many papers, the width of one head (head_size=16 was "did you mean batch_size?")
HEAD_SIZE = 16


def _head_size_elsewhere(session: Session | None = None) -> str:
    """The head size, which is no setting: the rule, and with a session the settings that make a head of 16 now."""
    config = session.model_config if session is not None else None
    rule = (f"the head size is d_k = d_model / n_heads (as {named('shapes')} and {named('qkv')} call it), made by "
            "those two: a head size of K is n_heads=d_model/K where K divides d_model, or d_model=K x n_heads")
    if config is None:  # parsed before any session is at hand: the rule, and where it is worked out for the model
        return f"{rule}; {cmd('help', 'head_size')} works it out for the model's settings"
    d_model, n_heads = config.d_model, config.n_heads
    # the example is another size than the model's own (at d_model 64, n_heads 4 it offered the settings in force)
    size = HEAD_SIZE if d_model // n_heads != HEAD_SIZE else 2 * HEAD_SIZE
    now = f"now {d_model // n_heads} (d_model {d_model} / n_heads {n_heads})"
    heads = d_model // size if d_model % size == 0 and d_model // size in config.fitting_heads() else None
    by_heads = (f"{cmd('set', n_heads=heads)} at d_model {d_model}" if heads is not None else
                f"given by no head count at d_model {d_model}")
    return (f"{rule}; {now}: a head size of {size} is {by_heads}, or {cmd('set', d_model=size * n_heads)} at "
            f"n_heads {n_heads}")


def _floor_elsewhere(session: Session | None = None) -> str:
    # nanoGPT's min_lr is a rate; min_lr_ratio, which a prefix match offered without a word, is a share of the peak
    return ("the cosine's floor is a share of the peak rate here, not a rate: min_lr_ratio is min_lr / lr (nanoGPT's "
            f"min_lr=6e-5 at learning_rate=6e-4 is min_lr_ratio=0.1; {cmd('set', 'lr')} shows the peak rate)")


def _dataset_elsewhere(session: Session | None = None) -> str:
    return (f"the data is no setting: {cmd('data', 'NAME')} switches it, and nanoGPT's dataset=shakespeare_char is "
            f"{cmd('data', 'shakespeare')} here (read a character at a time, as its _char data is); "
            f"{cmd('data')} lists the built-in data, and a text file's path works too")


def _out_dir_elsewhere(session: Session | None = None) -> str:
    option = ShellConfig.spec("checkpoint_dir").shell_option
    where = f"{option} DIR, before the command" if syntax() == SHELL else cmd("set", checkpoint_dir="DIR")
    return f"nanoGPT's out_dir is the checkpoint_dir setting here, the folder checkpoints go to: {where}"


def _init_from_elsewhere(session: Session | None = None) -> str:
    # from the shell a one-shot train starts from the checkpoint itself (`minitf --load NAME train`)
    resume = cmd("train", load="NAME") if syntax() == SHELL else f"{restore('NAME')}, then {cmd('train')}"
    return (f"a model starts where it is loaded from: nanoGPT's init_from=resume is {resume} (NAME a checkpoint "
            f"{cmd('ls')} lists); init_from=gpt2 is {restore('hf:PATH')}, a Hugging Face GPT-2 folder; "
            f"init_from=scratch is a new model, {cmd('train', fresh=True)}")


def _num_samples_elsewhere(session: Session | None = None) -> str:
    return (f"each {named('gen')} writes one sample, a fresh one each time (gen_seed none): nanoGPT's num_samples=3 "
            f"is {cmd('gen')} three times; its max_new_tokens, the sample's length, is n= ({cmd('gen', n=100)})")


def _start_elsewhere(session: Session | None = None) -> str:
    return (f"the prompt is {named('gen')}'s text: nanoGPT's start=TEXT is {cmd('gen', 'TEXT')}"
            + (", or TEXT typed alone as a line" if syntax() != SHELL else ""))


def _always_save_elsewhere(session: Session | None = None) -> str:
    return (f"the autosave setting saves: on (the default), every {named('train')} writes the checkpoint "
            f"{AUTOSAVE_NAME!r} at its end and every save_every seconds during it, whatever its val loss "
            "(nanoGPT's always_save_checkpoint=True); a save only at a better val loss has no setting here: "
            f"{cmd('set', 'autosave', 'save_every')} shows both")


def _eval_only_elsewhere(session: Session | None = None) -> str:
    return (f"{named('train')} evaluates every eval_every steps and at its end; an evaluation alone, no step taken "
            f"(nanoGPT's eval_only=True), is {cmd('context')} (the val loss, by position and its mean), "
            f"{cmd('score', 'TEXT')} (one text's) or {cmd('checks', 'init')} (a fresh model's loss against ln V)")


# names a user looks for in :set that live elsewhere (`:set schedule=cosine` was only "unknown option"), nanoGPT's
# among them (the README promises its names: `lr_decay_iters=300` was asked "did you mean eval_batches?"). Each takes
# the session where one is at hand (`:help KEY` has it; a line is parsed before) to work its words out for the model.
SET_ELSEWHERE = {**dict.fromkeys(("schedule", "lr_schedule", "scheduler", "decay_lr", "lr_decay"), _schedule_elsewhere),
                 **dict.fromkeys(("momentum", "beta1", "beta2", "betas", "adam_betas", "nesterov"), _fixed_elsewhere),
                 **ACCUMULATION_ELSEWHERE, **WARMUP_ITERS_ELSEWHERE,
                 **dict.fromkeys(("head_size", "head_dim", "d_head", "d_k"), _head_size_elsewhere),
                 "lr_decay_iters": _decay_length_elsewhere, "min_lr": _floor_elsewhere,
                 # nanoGPT's train.py and sample.py names of what no setting here is (`dataset=shakespeare_char` was a
                 # bare "unknown key", `eval_only` "did you mean eval_every?")
                 "dataset": _dataset_elsewhere, "out_dir": _out_dir_elsewhere,
                 "init_from": _init_from_elsewhere, "num_samples": _num_samples_elsewhere, "start": _start_elsewhere,
                 "always_save_checkpoint": _always_save_elsewhere, "eval_only": _eval_only_elsewhere}


# from the shell a change is checked and gone when that one process ends (render_set): its --help says so first
@command("set", "Change settings: model architecture (most reset the weights), training, generation or the shell; "
         "a name alone shows that setting. From the shell a change lasts one command: give it to that command, as "
         "minitf --set KEY=VALUE COMMAND.",
         params=_set_params(), needs_torch=False, pairs=True, json_version=4, elsewhere=SET_ELSEWHERE)  # fmt: skip
def cmd_set(session: Session, args: dict, reporter: Reporter) -> SetResult:
    keys = (args.pop("keys", None) or "").split()
    given = {k: (None if v is CLEAR else v) for k, v in args.items() if v is not None}
    if keys:
        if given:
            _quote_spaced_value(keys, given)
            # a word that names no setting is said so, not given as a line that shows it (`:set ; :set shows`, of
            # `:set lr=0.02 ;`, was refused as pasted)
            unknown = [w for w in keys if SET.param_named(w) is None and setting_help(session, w) is None]
            known = [w for w in keys if w not in unknown]
            close = SET.close_option(unknown[0]) if unknown else None
            nothing = (f" ({clip(unknown[0])!r} names no setting" + (f"; did you mean {close}?)" if close else ")")
                       if unknown else "")
            shows = f"{cmd('set', *known)} shows, " if known else ""
            raise UserError(f"give settings to change as key=value, or their names alone to show them, not both: "
                            f"{shows}{cmd('set', **given)} changes{nothing}")
        return SetResult({}, False, shown=_settings_named(session, keys))
    if not given:  # it listed the 48 keys, without their values: the views of them are named instead
        keys = [p.name for p in SET.options  # from the shell, not those it gives as options of its own
                if syntax() != SHELL or p.setting is None or p.setting.shell_option is None]
        raise UserError(f"nothing to set: {cmd('config')} shows every setting's value, {cmd('set', 'lr')} one "
                        f"setting's with what it does, and {cmd('help', 'set')} lists all {len(keys)} keys; to "
                        f"change some, give key=value pairs, e.g. {cmd('set', lr='1e-3', n_layers=2)}")
    current = {cls: _current(session, cls) for cls in SETTINGS}
    asked = str(given.get("tokenizer", "char")).strip().lower()
    if asked.partition(":")[0] == "bpe" and asked != current[DataConfig].tokenizer:
        from ..core.data import TextCorpus

        if not isinstance(session.data, TextCorpus):  # no text to read with any N: said before N's range (bpe:50),
            read_with(session.data, str(given["tokenizer"]).strip(), reporter, fix=_text_first())  # (its fix, bpe:257,
            # would be refused for this then)
    new = _proposed(current, given)
    # a setting the shell gives as an option of its own (checkpoint_dir: --checkpoint-dir, read before --load, after
    # which --set applies): a one-shot `minitf set` is told that option
    own = next((spec for spec in ShellConfig.specs() if spec.shell_option and spec.name in given), None)
    if own is not None and syntax() == SHELL:
        with without_setting(own.name):  # --load would read from the new folder, where the checkpoint is not:
            line = given_before("ls", own.shell_option, str(given[own.name]).strip(), keep_load=False)  # left out
        raise UserError(f"from the shell {own.name} is minitf's own option, read before --load (which then loads from "
                        f"that folder), e.g. {line}")
    if "checkpoint_dir" in given:  # absolute, as the session names its folder; checked before anything changes
        folder = checkpoint_folder(new[ShellConfig].checkpoint_dir)
        new[ShellConfig] = new[ShellConfig].replace(checkpoint_dir=str(folder))
    # Another optimizer brings its own rate and warm-up for this data where they still held the old one's
    # (core.recipes): AdamW at Muon's lr 1e-2 and 10 warm-up steps ends pydoc's 600 steps at val 2.44.
    new[TrainConfig], followed = follow_optimizer(current[TrainConfig], new[TrainConfig], session.recipe_data,
                                                  given)
    recipe = {"recipe": followed, "recipe_for": recipe_label(session.recipe_data, new[TrainConfig].optimizer)
              if followed else None}
    model, train = new[ModelConfig], new[TrainConfig]
    reading = None  # (tokenizer, the data read by it) when the tokenizer changes
    # a BPE kept from other text by a switch of data: bpe:N of its own size trains one on this text all the same
    elsewhere = "tokenizer" in given and bpe_trained_elsewhere(session.tokenizer, session.loaded_data) is not None
    if new[DataConfig].tokenizer != current[DataConfig].tokenizer or elsewhere:
        reading = read_with(session.data, new[DataConfig].tokenizer, reporter, fix=_text_first())
        model = model.replace(vocab_size=reading[1].tokenizer.vocab_size)
        new[DataConfig] = DataConfig(tokenizer=tokenizer_setting(reading[0]))  # bpe:N as built (N may be fewer)
        reading[1].check_fits(model.max_seq_len, current=session.model_config.max_seq_len)
        if new[DataConfig] == current[DataConfig] and not elsewhere:  # bpe:5000 giving 2,540 again: the same one
            reading = None
    elif model.max_seq_len != session.model_config.max_seq_len:
        unread = session.loaded_data is None
        session.data.check_fits(model.max_seq_len, current=session.model_config.max_seq_len)
        if unread:  # reading the data just now set the vocabulary, after `model` was made from the default
            model = model.replace(vocab_size=session.model_config.vocab_size)
    # What would be built or trained anew is held to the lab's bounds; a model that stays as it is (one loaded from a
    # Hugging Face folder may be larger than the lab trains) takes settings that build nothing: temperature, lr, ...
    if (not session.has_model or reading is not None or session.rebuild_needed(config=model)
            or train.batch_size != session.train_config.batch_size):
        check_trainable(model, train.batch_size, fused=train.fast_path)
    if session.has_model and session.rebuild_needed(config=model) and session.device.type == "cpu":
        check_weights_free(model)  # before anything changes: the rebuild allocates the new weights beside the old

    changed = {}
    for cls in SETTINGS:
        for spec in cls.specs():
            old_value, new_value = getattr(current[cls], spec.name), getattr(new[cls], spec.name)
            # a preset sets several, and a preset's head grouping follows its head count (kv_heads_following)
            followed_heads = spec.name == "n_kv_heads" and "n_heads" in given
            if old_value != new_value and (spec.name in given or "preset" in given or followed_heads):
                changed[spec.name] = (old_value, new_value)
    if "n_kv_heads" in changed and "n_kv_heads" not in given and "preset" not in given:  # kv_heads_following's
        from ..core.config import PRESET_KV_GROUP, matching_preset

        preset = matching_preset(current[ModelConfig])
        group = PRESET_KV_GROUP[preset]
        heads, old = model.n_heads, current[ModelConfig].n_kv_heads
        if model.n_kv_heads is None:  # an odd count: the preset's grouping does not pair it up (preset_changes)
            reporter.notice(f"n_kv_heads follows n_heads as the preset {preset} has it: {heads} heads do not go "
                            f"{group} to a key/value head, so this is plain multi-head attention")
        else:  # the way back by hand: the old count where it divides the new one, else a key/value head each
            by_hand = (f"{cmd('set', n_kv_heads=old)} keeps {old}" if old and heads % old == 0 else
                       f"{cmd('set', n_kv_heads=heads)} gives each query head its own")
            reporter.notice(f"n_kv_heads follows n_heads as the preset {preset} groups them ({group} query heads to "
                            f"each key/value head); {by_hand}")
    had_model = session.has_model
    rebuild = session.rebuild_needed(config=model, data=reading[1] if reading else None)
    lost: list[str] = []  # told once the new model stands: a Ctrl-C during the build keeps the old one
    shell_before = session.shell_config
    if "checkpoint_dir" in changed:  # a trained model kept before the rebuild goes where checkpoints go from now on
        session.set_shell_config(shell_before.replace(checkpoint_dir=new[ShellConfig].checkpoint_dir))
    # `minitf --load autosave set n_kv_heads=2`: the rebuilt model goes when this one-shot process ends, and the loaded
    # one stays in its checkpoint as it was, so a copy of it (`kept-*`, a whole checkpoint) kept nothing
    ends_here = syntax() == SHELL and session.unsaved_step is None
    try:
        kept = keep_trained_model(session, new[ShellConfig].autosave, reporter, lost=lost) \
            if rebuild and not ends_here else None
    except BaseException:  # nothing changed, the folder neither
        session.set_shell_config(shell_before)
        raise
    off = [str(a) for a in session.ablations]  # hooks on the model a rebuild replaces: the new one has every part on
    quantized = session.sampling_copy  # :quantize's copy of the model a rebuild replaces
    if rebuild or reading:  # the new model's weights are drawn from the seed given with it (`:set seed=3 n_layers=2`)
        session.set_train_config(train)
    try:
        rebuilt = session.use_tokenizer(*reading) if reading else False
        rebuilt = session.set_model_config(model) or rebuilt
    except KeyboardInterrupt:  # a Ctrl-C cut the build short (Session._new_model): the settings stay as they were
        session.set_train_config(current[TrainConfig])
        session.set_shell_config(shell_before)
        if kept is None:
            raise
        # the model kept before the build stays kept (it loses nothing), and is said: a kept-... appeared in :ls
        # with no line naming it
        raise Interrupted(f"{named('set')} stopped before it finished: the model and settings are as they were; "
                          f"its trained model was kept as {kept} first ({restore(kept)} brings it back)") from None
    for line in lost if rebuilt else []:
        reporter.notice(line)
    if rebuilt and off:
        reporter.notice(ablations_gone(off))
    if rebuilt and quantized:
        reporter.notice(quantized_gone())
    if session.has_model and not rebuilt and train.optimizer != current[TrainConfig].optimizer:
        reporter.notice(f"the optimizer is now {train.optimizer}: the weights are kept, its memory "
                        "(moments, momentum) starts afresh")
    if session.has_model and not rebuilt and "max_seq_len" in changed:
        old, new_length = changed["max_seq_len"]
        trained = session.trainer.trained_window or old  # the window it trained at, maybe not the one it had
        reporter.notice(f"the window is now {new_length} tokens, the weights kept: pos_encoding={model.pos_encoding} "
                        "learns no table of positions, so only the mask (and what positions need) is computed anew"
                        + (f"; {cmd('context')} shows what it makes of the positions past {trained}, the window "
                           "it trained at" if new_length > trained else ""))
    if session.has_model and not rebuilt and "steps" in changed and session.trainer.run_remaining > 0:
        waiting = session.trainer  # a stopped run: `:train` goes on with it (cmd_train's rule), not a run of `steps`
        reporter.notice(f"{cmd('train')} goes on with the stopped run: its last {count(waiting.run_remaining, 'step')} "
                        f"of {waiting.run_steps:,}; {cmd('train', steps=train.steps)} starts a run of "
                        f"{train.steps:,} now")
    # what :set changed of the schedule, by hand or through the optimizer's recipe (:set optimizer=adamw moves lr)
    schedule = [k for k in ("lr", "warmup_steps", "min_lr_ratio") if k in changed or k in followed]
    if schedule and session.has_model and not rebuilt and session.trainer.run_remaining == 0 \
            and (final := session.trainer.rate_to_continue()) is not None:  # cmd_train's rule: a trained model goes on
        rate = (f"{final:.3g}, the last run's final rate" if final <= train.lr * (1 + 1e-6) else
                f"{train.lr:.3g}, the lr setting (the last run ended above it, at {final:.3g})")
        goes_on, anew = cmd("train"), cmd("train", schedule="new")
        if syntax() == SHELL:  # the settings go with the lines: `minitf set lr=0.005` ends, and a bare `train
            # --schedule new` after it ran at the old lr (a bare `train` at a rate the old lr capped)
            pairs = " ".join(f"{k}={exact_text(v)}" for k, v in given.items())  # as typed, not to 3 digits
            goes_on = given_before("train", "--set", pairs)
            anew = f"{goes_on} --schedule new"
        reporter.notice(f"{goes_on} goes on at a constant {rate}; {' and '.join(schedule)} "
                        f"{'shapes' if len(schedule) == 1 else 'shape'} a new run's warm-up and cosine, which "
                        f"{anew} starts")
    if schedule and session.has_model and not rebuilt and session.trainer.run_remaining > 0:
        reporter.notice(_stopped_run_rate(session.trainer, train, schedule))
    # a warm-up that now covers a new run of `steps` (AdamW's recipe warms up over 150 steps, after `:set steps=100`):
    # said where it is set, with :train's fix, not first by the :train it was set up for. Not from the shell, whose
    # settings last the one command they go with, which says it (a `--set` before `train` said it twice).
    if ({"steps", "warmup_steps"} & (set(changed) | set(followed)) and syntax() != SHELL
            and (line := all_warm_up(train.steps, train, "a new run"))):
        reporter.notice(f"{line}; {cmd('set', warmup_steps=max(1, train.steps // 4))} warms up over a quarter of it")
    if session.has_model and not rebuilt and train.seed != current[TrainConfig].seed:
        if not redraw_untrained(session, train.seed, reporter):
            reporter.notice(seed_kept_line(train.seed))
    if model.d_model == 1 and model.norm == "layernorm" and {"d_model", "norm"} & set(changed):
        reporter.notice(f"d_model=1 with norm=layernorm: {width_one_reads_nothing()}")
    # said now, not after a run that diverges at its first steps; of a decay set here (an lr of 1e9 is the rate's own
    # problem, which the divergence names, and the default decay offered for it was the one in force)
    decay = train.lr * train.weight_decay
    if decay >= 1 and "weight_decay" in changed:
        default = TrainConfig.spec("weight_decay").default
        reporter.notice(f"lr x weight_decay = {decay:g}: each step multiplies the matrices by 1 - {decay:g}, which must "
                        f"stay above 0, so training diverges; {cmd('set', weight_decay=default)} (the default) or a "
                        f"lower lr keeps it under 1")
    head_dim = model.d_model // model.n_heads
    if model.qk_norm and head_dim == 1 and model.norm == "layernorm" and \
            {"d_model", "n_heads", "norm", "qk_norm", "preset"} & set(changed):  # as d_model=1 is said, above
        reporter.notice(f"qk_norm=on with heads 1 wide and norm=layernorm: the norm of one feature is its bias alone, so "
                        f"every q and k is the same and every attention pattern is uniform, whatever is trained; "
                        f"{cmd('set', n_heads=max(1, model.d_model // 2))} (heads 2 wide) or "
                        f"{cmd('set', qk_norm='off')} lets attention choose")
    unread = model.unread()  # rope_base without rope: typed, taken, and nothing reads it yet
    for because in dict.fromkeys(unread.values()):
        keys = [k for k in given if unread.get(k) == because]
        if keys:
            # a switch that is off reads them when on (ffn=off: d_ff "applies with ffn" said nothing of its value)
            reads_it = {"pos_encoding": "pos_encoding=rope", "n_experts": "n_experts >= 2"}.get(
                because, f"{because}=on" if getattr(model, because) is False else because)
            reporter.notice(f"{' and '.join(keys)} {'does' if len(keys) == 1 else 'do'} nothing while "
                            f"{because}={setting_text(getattr(model, because))}; "
                            f"{'it applies' if len(keys) == 1 else 'they apply'} with {reads_it}")
    if "n_experts" in changed and model.n_experts == 1:  # is_moe: n_experts >= 2; :experts said it later, :set not
        reporter.notice(f"n_experts=1 builds one dense feed-forward, as n_experts=0 does: no router, no mixture; "
                        f"{cmd('set', n_experts=2)} or more routes each token to experts_per_token of them")
    if ("d_model" in changed and "d_ff" not in given and "preset" not in given
            and model.d_ff != 4 * model.d_model):  # d_ff is a setting of its own: scaling d_model leaves it
        ratio = model.d_ff / model.d_model  # "1.3e+02 x d_model" of 512 at d_model=4: no exponent
        times = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.2g}"
        # GPT-2 has no d_model of 64: its rule is what is meant ("GPT-2's 256 at d_model=64" named a model that is not)
        reporter.notice(f"d_ff stays {model.d_ff:,}, {times} x d_model, where it is usually "
                        f"4 x d_model = {4 * model.d_model:,}, as GPT-2 sizes it; "
                        f"{cmd('set', d_ff=4 * model.d_model)} "  # it said "widens" of 512 -> 256 too
                        f"{'widens' if model.d_ff < 4 * model.d_model else 'narrows'} the FFN to that")
    if "dtype" in changed:
        from ..core.precision import precision_note

        # dtype=bfloat16 on a CPU that emulates it: said where it is set, once, with the fix (as :load and :device
        # say it); it was quiet until the first :train, the choice made and forgotten by then
        if (slow := precision_note(train.dtype, session.device)) is not None:
            reporter.notice(f"dtype={train.dtype}: {slow}; {cmd('set', dtype='auto')} trains in float32")
            session.already_said(slow)
    read = session.loaded_data  # the vocabulary top_k is held to, where the data is read (:set reads none)
    sampling_notes(new[GenConfig], changed, read.tokenizer.vocab_size if read is not None else None, reporter)
    threads = new[ShellConfig].threads
    if threads != current[ShellConfig].threads and (warning := oversubscribed(threads)):
        reporter.notice(warning)
    session.set_train_config(train)
    session.set_gen_config(new[GenConfig])
    session.set_shell_config(new[ShellConfig])
    if "checkpoint_dir" in changed:  # (the REPL's: the shell's own option sets it there, above)
        reporter.notice(_folder_now(session, kept_model=session.has_model and not rebuilt))
    if session.has_model and not rebuilt and "max_seq_len" in changed:  # after the settings: a recipe may follow
        _take_up_short_text(session, changed["max_seq_len"][1], reporter)
    from ..core.config import PRESET_FIELDS, matching_preset

    # Said where a preset's own fields changed: n_layers=2 or n_experts=4 leave the preset it matched as it was
    was, now = current[ModelConfig].as_built(), model.as_built()
    read_anew = [spec.name for spec in ModelConfig.specs()
                 if spec.new_function and spec.name in changed and was[spec.name] != now[spec.name]]
    kept_in_place = [spec.name for spec in ModelConfig.specs() if spec.in_place and not spec.new_function
                     and spec.name in changed and spec.name not in model.unread()]  # unread: said so above
    architecture = rebuilt and not reading and any(key in PRESET_FIELDS for key in changed)
    preset = matching_preset(model) if "preset" in given or architecture else None
    if reading is None:
        return SetResult(changed, rebuilt, kept, preset, given=given, had_model=had_model, data=session.data_spec,
                         model_after=own_settings(model) if rebuilt else {}, read_anew=read_anew,
                         kept_in_place=kept_in_place, **recipe)
    tokenizer, data = reading
    # a BPE too small for the text's characters reads it in more tokens than characters (bpe:300 on Chinese: 0.64
    # characters a token, said with no word that the character tokenizer reads 1): said, with an N that would do
    more = data.more_tokens_than_characters() if tokenizer is not None else None
    words = (f"{data.tokenizer.describe()}: {1 / data.tokens_per_char():.2f} characters a token on the validation "
             f"text{f'; {more}' if more else ''}" if tokenizer is not None else "a token per character")
    return SetResult(changed, rebuilt, kept, preset, had_model=had_model, tokenizer=words,
                     vocab_size=data.tokenizer.vocab_size, given=given, data=session.data_spec,
                     model_after=own_settings(model) if rebuilt else {}, read_anew=read_anew,
                     kept_in_place=kept_in_place, **recipe)


def followed_recipe(result: SetResult) -> str | None:
    """The line that says which training settings followed an optimizer's recipe (`optimizer=adamw` moved lr and
    warmup_steps), and how to set one back; None where none did. The REPL renders it with the result; the shell's
    `--set`, whose result is not rendered, says it on stderr (a shell user trained at lr 0.003 thinking it 0.01)."""
    if not result.recipe:
        return None
    name, (before, _) = next(iter(result.recipe.items()))  # in the syntax of the front end: --set from the shell
    return f"{recipe_line(result.recipe_for, result.recipe)}; {cmd('set', **{name: before})} sets one back"


def _stopped_run_rate(trainer, train: TrainConfig, schedule: list[str]) -> str:
    """What lr, warmup_steps or min_lr_ratio (`schedule`, changed to `train`'s) do to a stopped run, which `:train`
    goes on with: a warm-up + cosine run reads them every step (its rest is drawn anew); a constant-rate run holds its
    rate, never above the lr setting (cmd_train's rule, as for a new constant run)."""
    from ..core.train import lr_at

    keys = " and ".join(schedule)
    rest = f"its last {count(trainer.run_remaining, 'step')} of {trainer.run_steps:,}"
    fresh = f"{cmd('train', schedule='new')} starts a fresh warm-up and cosine"
    rate = trainer.run_constant_lr
    if rate is not None:
        if rate > train.lr * (1 + 1e-6):
            return (f"{cmd('train')} goes on with the stopped run ({rest}) at a constant {train.lr:.3g}, the lr "
                    f"setting (it ran at {rate:.3g}); {fresh}")
        return (f"{cmd('train')} goes on with the stopped run ({rest}) at its constant {rate:.3g}: {keys} "
                f"{'shapes' if len(schedule) == 1 else 'shape'} a new run's warm-up and cosine; {fresh}")
    step = trainer.step - trainer.run_start
    before, after = lr_at(step, trainer.run_steps, trainer.config), lr_at(step, trainer.run_steps, train)
    return (f"{cmd('train')} goes on with the stopped run ({rest}), its warm-up and cosine drawn anew with the new "
            f"{keys}: its next step trains at {after:.3g} (it would have at {before:.3g}); {fresh}")


def _take_up_short_text(session: Session, window: int, reporter) -> None:
    """A model loaded from a folder whose window the session's text was too short for (core.data.TokenizerOnly's
    `short`) trains on that text once the window fits it."""
    from ..core.data import TokenizerOnly

    data = session.loaded_data
    if not isinstance(data, TokenizerOnly) or data.short is None:
        return
    spec, text = data.short
    try:
        text.check_fits(window)
    except UserError:
        return
    _, recipe_changes = session.use_data(spec, text)
    reporter.notice(f"data is now {spec}: it fits a window of {window} tokens, and {cmd('train')} trains on it")
    if recipe_changes:
        reporter.notice(recipe_line(spec, recipe_changes))


SET = REGISTRY["set"]  # its keys are read by :compare's contenders (commands.lab) too
# a line a message suggests gives each setting once, under any of its spellings (syntax._without)
spell_settings_with(lambda key: param.name if (param := SET.param_named(key)) is not None else key)
# what no checkpoint records: the shell's own settings (threads, autosave) and generation's (temperature, ...)
keep_with_load([*(spec.name for spec in ShellConfig.specs() if spec.shell_option is None),
                *(spec.name for spec in GenConfig.specs())])


def _quote_spaced_value(words: list[str], given: dict) -> None:
    """A text value cut at a space (`:set checkpoint_dir=/tmp/my runs`): where no word names an option and one value
    given is text, the words were that value's rest, and the fix quotes it whole. It was told to show `runs`."""
    # a folder only (checkpoint_dir): no other setting's value has a space (norm=rmsnorm lrr, tokenizer=bpe:512 vocab
    # were told to quote it, and the quoted line was refused in turn)
    texts = [key for key, value in given.items() if isinstance(value, str)
             and getattr(SET.param_named(key).setting, "folder", False)]
    if len(texts) != 1 or any(SET.param_named(word) is not None for word in words):
        return
    key = texts[0]
    whole = " ".join([given[key], *words])
    said = f"{key}={given[key]} is followed by {' '.join(words)}: a value with a space in it goes in quotes"
    own = SET.param_named(key).setting.shell_option  # checkpoint_dir's --checkpoint-dir
    if syntax() == SHELL and own is not None:  # there minitf's own option, quoted as the shell quotes (cmd_set below)
        with without_setting(key):
            raise UserError(f"{said}, and from the shell {key} is minitf's own option: "
                            f"{given_before('ls', own, whole, keep_load=False)}")
    raise UserError(f"{said}: {cmd('set', **{**given, key: whole})}")


def _settings_named(session: Session, words: list[str]) -> list[SettingHelp]:
    """What `:set KEY ...` shows: each named setting as `:help KEY` shows it. A word that names no setting is an
    error; right after a setting's name it was meant as that setting's value (`:set lr 0.01`, `:set lr = 0.01`)."""
    shown: list[SettingHelp] = []
    named_at = None  # where the last setting's name stood
    for i, word in enumerate(words):
        if (h := shown_setting(session, word)) is not None:  # preset too: shown as a setting
            shown.append(h)
            named_at = i
            continue
        value = words[i + 1] if word == "=" and i + 1 < len(words) else word
        value = value[1:] if value.startswith("=") and len(value) > 1 else value  # `:set lr =0.1`: not lr==0.1
        if named_at == i - 1 and value != "=":
            named = SET.param_named(shown[-1].name)
            try:  # the line suggested must work as typed: a value the setting cannot take is said with it
                convert(named, value)
            except UserError as e:
                raise UserError(f"a setting and its value go as one word "
                                f"({cmd('set', **{named.name: named.metavar})}), and {e}") from None
            raise UserError(f"a setting and its value go as one word: {cmd('set', **{shown[-1].name: value})}")
        if (key := word.replace("-", "_").lower()) in SET.elsewhere:  # its words worked out for this session's model
            raise UsageError(f"no setting named {clip(word)!r}: {SET.elsewhere[key](session)}")  # (a parse has none)
        param = SET.find_param(word)  # a name of no setting: "unknown option ...; did you mean lr?"
        raise UserError(f"{param.name} takes a value: {cmd('set', **{param.name: param.metavar})}")
    return shown


def _preset_shown(session: Session, param: Param) -> SettingHelp:
    """What `:set preset` shows: the presets, and the one the model settings match now (none: they match none)."""
    from ..core.config import matching_preset

    return SettingHelp("preset", (), ModelConfig.kind, param.help, "|".join(map(str, param.choices)), "",
                       "seed", matching_preset(session.model_config), True, [])


def setting_value(session: Session, spec) -> object:
    """The value a declared setting (a SettingSpec of one of SETTINGS) holds in this session now."""
    if spec.derived_from is not None and session.loaded_data is None:  # vocab_size: the data's, which no one has read
        return None
    cls = next(c for c in SETTINGS if spec in c.specs())
    return getattr(_current(session, cls), spec.name)


def _folder_now(session: Session, kept_model: bool) -> str:
    """What the session's new checkpoint folder holds, said after `:set checkpoint_dir=`; `kept_model`: the session
    has a model and this :set did not rebuild it."""
    from ..core.checkpoint import list_checkpoints
    from ..core.checkpoint.reads import holds_checkpoints

    folder = session.checkpoint_dir
    kept = "; the model is kept" if kept_model else ""
    try:
        if not folder.exists():
            return (f"checkpoints now go to {folder}, which the first {cmd('save', 'NAME')} or autosave makes{kept}"
                    f"{_unwritable(folder, session.autosave)}")
        held = sum(row.error is None for row in list_checkpoints(folder))
        # one level too high (the folder that holds ./checkpoints): the folder of checkpoints below it is named
        below = [] if held else [sub for sub in sorted(folder.iterdir())[:1000]
                                 if sub.is_dir() and holds_checkpoints(sub)]
    except (OSError, UserError):
        held, below = 0, []
    there = f"it holds {count(held, 'checkpoint')} ({cmd('ls')} lists them)" if held else "it holds no checkpoint yet"
    if below:
        there += f", but {below[0].name} in it holds some: {cmd('set', checkpoint_dir=str(below[0]))} reads them"
    return f"checkpoints now go to {folder}: {there}{kept}{_unwritable(folder, session.autosave)}"


def _unwritable(folder, autosave: bool = True) -> str:
    """What the folder's first save would meet, said now ("; but nothing can be saved there: ..."), or "": a folder
    set as the fix of a failed autosave could be as unusable, found out only at the next :train. Not refused: a
    read-only folder of checkpoints still lists and loads."""
    from ..core.checkpoint import check_save_target

    try:
        check_save_target(folder, AUTOSAVE_NAME)
    except UserError as e:
        problem = str(e).partition("; ")[0]
        saves = f"{named('train')}'s autosave and {cmd('save', 'NAME')} would fail" if autosave else \
            f"{cmd('save', 'NAME')} would fail"
        off = f", or {cmd('set', autosave=False)} to train without saving" if autosave else ""
        return f"; but nothing can be saved there, {problem}: {saves}, so choose another folder{off}"
    return ""


def _proposed(current: dict, given: dict) -> dict:
    """Each settings class's config with the given keys applied (a preset first: keys given with it override it).
    Settings that do not fit together are refused with a whole `:set` line that fits: what was typed, and the nearest
    value of a setting not typed where one would do (`:set d_model=130` was told "n_heads could be one of 1, 2, 5",
    and `:set n_heads=5` then refused d_model=128: each alone went round in circles)."""
    try:
        return _applied(current, given)
    except ConfigError as e:
        if not e.fitting:
            raise
        change = next((c for c in e.fitting if not c.keys() & given.keys()), e.fitting[0])
        raise ConfigError(str(e), fix={**given, **change}) from None  # (a `none` typed is written `none`)


def _applied(current: dict, given: dict) -> dict:
    new = {}
    for cls, config in current.items():
        changes = {spec.name: given[spec.name] for spec in cls.specs() if spec.name in given}
        if cls is ModelConfig and "preset" in given:
            from ..core.config import preset_changes

            # For the n_heads given with it: `preset=llama n_heads=2` shares one key/value head, as llama does
            changes = {**preset_changes(given["preset"], config, n_heads=changes.get("n_heads")), **changes}
        elif cls is ModelConfig and "n_heads" in changes and "n_kv_heads" not in given:
            changes.update(kv_heads_following(config, changes["n_heads"]))
        new[cls] = config.replace(**changes) if changes else config
    return new


def kv_heads_following(config: ModelConfig, n_heads: int) -> dict:
    """{"n_kv_heads": N} where a model of a preset that groups its keys and values (llama: 2 query heads to each)
    takes another head count: the preset's grouping for the new count, since a preset is an architecture, sizes
    aside. `:set n_heads=4` after preset=llama at 8 heads kept n_kv_heads=4, silently plain multi-head attention.
    Empty where the model matches no such preset (a grouping set by hand stays as it was typed)."""
    from ..core.config import PRESET_KV_GROUP, matching_preset, preset_changes

    preset = matching_preset(config)
    if preset not in PRESET_KV_GROUP:
        return {}
    return {"n_kv_heads": preset_changes(preset, config, n_heads=n_heads)["n_kv_heads"]}


def rebuilding_keys(session: Session, args: dict) -> list[str]:
    """The keys among a :set's parsed `args` that would rebuild the model now (weights reset), in the order given.

    `minitf --load NAME --set ...` asks this first: a rebuild there would throw the loaded weights
    away before the command runs, which no one writes --load for.
    """
    from ..core.config import rebuilding_changes

    given = {k: (None if v is CLEAR else v) for k, v in args.items() if v is not None and k != "keys"}
    if not session.has_model or not given:
        return []
    current = {cls: _current(session, cls) for cls in SETTINGS}
    new = _proposed(current, given)
    changed = set(rebuilding_changes(current[ModelConfig], new[ModelConfig]))
    if new[DataConfig].tokenizer != current[DataConfig].tokenizer:
        changed.add("tokenizer")
    keys = [key for key in given if key in changed]
    return keys + ["preset"] if "preset" in given and changed - set(keys) else keys


def _current(session: Session, cls):
    if cls is DataConfig:
        return DataConfig(tokenizer=session.tokenizer_setting)
    return {ModelConfig: session.model_config, TrainConfig: session.train_config, GenConfig: session.gen_config,
            ShellConfig: session.shell_config}[cls]


@render.register(SetResult)
def render_set(result: SetResult, console: Console) -> None:
    for i, shown in enumerate(result.shown):
        if i:
            console.print()
        render_setting_help(shown, console)
    if result.shown:
        return
    if not result.changed and not result.tokenizer:  # bpe:N again on a new text: the same setting, a new tokenizer
        note(console, "nothing changed")
    for key, (old, new) in result.changed.items():
        say(console, Text(f"{key}: ", style="cyan") + Text(f"{fmt.value(old)} -> {fmt.value(new)}"))
    if result.changed and syntax() == SHELL:  # a one-shot session ends here: the change goes with it
        # every key typed that changed something: a setting that changed, or one that sets others (preset). The line
        # gave the first alone, which `minitf set d_model=30 n_heads=5` then refused (30 heads of 4 do not divide).
        keys = [k for k in result.given if k in result.changed or SET.param_named(k).setting is None] \
            or list(result.changed)
        pairs = " ".join(f"{k}={setting_text(result.changed[k][1] if k in result.changed else result.given[k])}"
                         for k in keys)
        specs = [SET.param_named(k).setting for k in keys]  # the command that reads them: sampling settings alone
        reader = "gen" if all(s is not None and s.section == GenConfig.kind for s in specs) else "train"  # do nothing
        if result.rebuilt and loaded():  # a new model in place of the loaded one: every model setting it has, then
            # what was typed of the others (a preset typed is in the model's settings already: after it, it lost)
            others = [k for k in keys if (spec := SET.param_named(k).setting) is not None
                      and spec.section != ModelConfig.kind]
            pairs = " ".join([*(f"{k}={exact_text(v)}" for k, v in result.model_after.items()),
                              *(f"{k}={setting_text(result.changed[k][1] if k in result.changed else result.given[k])}"
                                for k in others)])
        line = given_before(reader, "--set", pairs, result.data if result.rebuilt else None)  # to a :train
        how = f"so give it before that command, e.g. {line}"
        if keys == ["lr"] and loaded():  # `--load b3 --set lr=0.003 train` went on at the last run's 0.001: a loaded
            # model's train goes on at a constant rate (schedule=continue), which the lr setting only caps
            how = (f"and a loaded model's train goes on at the last run's final rate, which the lr setting only caps; "
                   f"train's own lr starts a new run at that peak, e.g. {cmd('train', lr=result.changed['lr'][1])}")
        note(console, f"checked, and gone when this command ends: a setting lasts one command from the shell, {how}")
    if (line := followed_recipe(result)) is not None:
        say(console, line, "cyan")
    if result.tokenizer:
        say(console, f"the text is now read as {result.tokenizer}", "green")
    if result.rebuilt and result.vocab_size is not None:
        say(console, f"the model was rebuilt for a vocabulary of {result.vocab_size:,}: same settings, weights "
                     "reset (step 0)", "yellow")
        render_kept(console, result.kept)
    elif result.rebuilt:
        say(console, "the architecture changed: the model was rebuilt, weights reset (step 0)", "yellow")
        render_kept(console, result.kept)
    if result.preset:  # "now" only where something changed: `:set preset=llama` twice said "nothing changed" first
        note(console, f"the architecture {'now matches' if result.changed else 'already matches'} the preset "
                      f"{result.preset} (sizes aside)")
    read = [k for k in result.read_anew if k != "causal"]  # the mask's own words follow
    if read and result.had_model and not result.rebuilt:
        score = cmd("score")
        if syntax() == SHELL:  # the setting ends with this command: the line carries it
            score = given_before("score", "--set", " ".join(f"{k}={exact_text(result.changed[k][1])}" for k in read))
        note(console, f"{' and '.join(read)} changed in place, the weights kept: "
                      f"{'a value' if len(read) == 1 else 'values'} the forward pass reads, so the same weights now "
                      f"compute another function ({score} shows what it makes of a text)")
    if result.kept_in_place and result.had_model and not result.rebuilt:  # as norm_eps's line says it, above
        note(console, f"{' and '.join(result.kept_in_place)} changed in place, the weights kept, and the function "
                      f"they compute ({cmd('score')} scores a text as before)")
    if "causal" in result.changed:
        # another setting of the same :set may have rebuilt it; before the first model there are no weights to keep
        kept = ", the weights kept" if result.had_model and not result.rebuilt else ""
        # a trained model's :train goes on at its last run's final rate, where the loss barely moves (1.29 to 1.13 in
        # 150 steps): a new run's warm-up and cosine is what makes it fall, as the line says
        train, attn, gen = cmd("train", schedule="new") if kept else cmd("train"), cmd("attn"), cmd("gen")
        if syntax() == SHELL:  # the setting ends with this one-shot command: the train line carries it, and the
            # looks start from the autosave that train writes (the loaded checkpoint never trained without the mask)
            train = given_before("train", "--set", "causal=off", autosaving=True) + (" --schedule new" if kept else "")
            attn, gen = cmd("attn", load=AUTOSAVE_NAME), cmd("gen", load=AUTOSAVE_NAME)
        note(console, f"the mask is back{kept}: position i reads positions j <= i only"
             if result.changed["causal"][1] else
             f"no causal mask{kept}: every position reads the whole window, the token it is to predict "
             f"included but at the last position (its next token lies past the window). Trained so ({train}), the "
             f"loss falls toward 0 everywhere else; then {attn} shows the heads reading the next token and "
             f"{gen} what is left when there is none")


# --- :data ---------------------------------------------------------------------------------------
@dataclass
class DataResult:
    info: DataInfo  # the data now in use
    # this command switched the data; a one-shot `minitf data X` (every --json one) ends with it: give `--data X` to
    # the command that should read it
    changed: bool
    rebuilt: bool  # the model was rebuilt for another vocabulary: weights reset
    kept: str | None = None  # the checkpoint the trained model was saved as before the rebuild
    recipe: dict[str, tuple] = field(default_factory=dict)  # core.recipes: {setting: [before, after]} that followed the data
    spec: str = ""  # the data as :data and --data take it (sort:3, a file's path): the name alone drops the :3
    model_step: int | None = None  # a switch that kept the trained model (the same vocabulary): the step it is at
    # the kept model's run had ended: the constant rate :train goes on at (its final one, capped by lr), as
    # cmd_train decides it; None where it goes on with a stopped run, or there is no run
    floor_rate: float | None = field(default=None, metadata={"view_only": True})
    # the last run's own final rate where the lr setting caps it below that (floor_rate is then the setting)
    ended_at: float | None = field(default=None, metadata={"view_only": True})
    # a character tokenizer's symbols in id order (symbols[i] is the character id i reads as; joined, the `chars` of
    # "Let's build GPT"); null for a subword tokenizer (BPE), whose ids `tok ids=` decodes
    symbols: list[str] | None = None


def _held_out_only(data, reporter: Reporter) -> None:
    """Said of a task too small to hold out questions fairly (sort:1, reverse:1): a digit only held-out questions
    hold is one no training shows, so its questions cannot be answered, and :mistakes and :ngram read as a model's
    failing."""
    from ..core.data import TextCorpus

    only = data.held_out_only() if hasattr(data, "held_out_only") else ""
    if only and isinstance(data, TextCorpus):  # a text: its last tenth holds characters its first nine never do
        # counted, not only listed: "'丆', '万', ..." cut at 8 read as eight, where 814 were never trained on
        chars, held, total = data.held_out_counts() or (only, 0, 0)
        shown = ", ".join(map(repr, chars[:8])) + (f" and {len(chars) - 8:,} more" if len(chars) > 8 else "")
        share = f": {held:,} of its {total:,} characters ({held / total:.0%})" if total else ""
        reporter.notice(f"{data.name}'s validation text (its last tenth) holds {count(len(chars), 'character')} its "
                        f"training text never holds ({shown}){share}; no model predicts those, so its val loss stays "
                        "high whatever it learns: mix the text, or put that part earlier in the file")
    elif only:
        digits = ", ".join(only)
        reporter.notice(f"{data.name}:{data.size}'s held-out questions hold the digit{'s' if len(only) > 1 else ''} "
                        f"{digits}, which no training question holds: no model can answer them, so its validation "
                        f"accuracy stays 0; "
                        f"{cmd('data', f'{data.name}:{data.size + 1}')} holds every digit in training")


@command("data", f"Show the data, or switch: {', '.join(spec_forms())}, a file.",
         params=[Param("name", str, help=", ".join(spec_forms()) + " or a file path", positional=True,
                       complete=complete_data, path=True, browse="files")], json_version=8)  # fmt: skip
def cmd_data(session: Session, args: dict, reporter: Reporter) -> DataResult:
    name = args["name"]
    if name is None or not name.strip():
        if (changed := file_changed(session)) is not None:
            reporter.notice(changed)
        _held_out_only(session.data, reporter)
        try:  # `minitf --data short.txt data` showed it without a word, where `:data short.txt` refused it
            session.data.check_fits(session.model_config.max_seq_len)
        except UserError as e:
            fix = f" ({cmd('set', **e.fix)})" if e.fix else ""
            reporter.notice(f"warning: {e}{fix}; {cmd('train')} refuses it as it is")
        return DataResult(session.data.info(), changed=False, rebuilt=False, spec=session.data_spec,
                          symbols=symbols_of(session.data.tokenizer))
    spec = name.strip()
    from ..core.interrupts import cut_short

    # Everything before the switch changes nothing, so a signal cuts it short at once, not only during the read: the
    # held-out count took 2.5 s of a 78 MiB file's 10, and there a Ctrl-C was asked to stop "at the next step", which
    # this command has none of, so the data switched anyway while the exit status said stopped
    stopped = f"data {spec} interrupted; nothing changed"  # as :load says its own (the data and model as they were)
    try:
        with cut_short():
            data = load_checked(session, spec, reporter)
            _held_out_only(data, reporter)
    except KeyboardInterrupt:
        raise Interrupted(stopped) from None
    if reporter.should_stop():  # a signal during an import is asked again once it ends: outside cut_short by then
        raise Interrupted(stopped)
    if spec.partition(":")[0] in TASKS:  # its size in digits, as a checkpoint keeps it: sort:1e1 is now sort:10
        from ..core.data import lasting_spec

        spec = lasting_spec(spec)
    rebuilt, kept, recipe_changes = switch_data(session, spec, data, reporter)
    step = session.trainer.step if session.has_model and not rebuilt else 0
    floor = ended = None
    if step and session.trainer.run_remaining == 0 and (final := session.trainer.rate_to_continue()) is not None:
        lr = session.train_config.lr  # never above the lr setting, as cmd_train caps it (with its tolerance)
        floor, ended = (final, None) if final <= lr * (1 + 1e-6) else (lr, final)
    return DataResult(data.info(), changed=True, rebuilt=rebuilt, kept=kept, recipe=recipe_changes, spec=spec,
                      model_step=step or None, floor_rate=floor, ended_at=ended, symbols=symbols_of(data.tokenizer))


def symbols_of(tokenizer) -> list[str] | None:
    """A character tokenizer's symbols in id order (its `itos`); None for a subword tokenizer (BPE, a loaded model's),
    whose tokens are bytes and merges that read as nothing alone: :tok ids= decodes those."""
    return list(tokenizer.itos) if tokenizer.kind == "char" else None


SYMBOLS_SHOWN = 200  # :data lists a character vocabulary up to this many symbols (a Chinese text's runs to thousands)
WHITESPACE_NAMES = {"\n": "newline", " ": "space", "\t": "tab", "\r": "carriage return"}  # palette.VISIBLE's, named


def render_kept(console: Console, kept: str | None) -> None:
    """The line that says where a model rebuilt by :set or :data was kept (and how to get it back)."""
    if kept:
        say(console, f"the trained model was kept as checkpoint {kept}: {restore(kept)} brings it back", "green")


@render.register(DataResult)
def render_data(result: DataResult, console: Console) -> None:
    info = result.info
    rows = [("name", info.shown_name or info.name), ("kind", info.kind), ("description", info.description)]
    if info.kind == "corpus":
        rows.append(("characters", fmt.whole(info.chars)))
    elif info.chars:
        rows.append(("characters", f"{info.chars} per example"))
    if info.tokenizer:
        rows.append(("tokenizer", info.tokenizer))
    # a character tokenizer's vocabulary is the text's distinct symbols; a BPE's, its tokens (bytes and merges)
    rows.append(("vocabulary", count(info.vocab_size, "symbol" if info.unit == "character" else info.unit)))
    if result.symbols is not None:  # in id order, each as :tok shows it (the newline ↵, the space ␣, the tab ⇥)
        listed = result.symbols[:SYMBOLS_SHOWN]
        shown = " ".join(visible(symbol) for symbol in listed)
        more = len(result.symbols) - SYMBOLS_SHOWN
        marks = [f"{VISIBLE[ch]} {name}" for ch, name in WHITESPACE_NAMES.items() if ch in listed]
        rows.append(("symbols", f"by id from 0: {shown}"
                                + (f" ... and {more:,} more (minitf data --json lists them all)" if more > 0 else "")
                                + (f" ({', '.join(marks)})" if marks else "")))
    else:  # a subword vocabulary: its tokens are bytes and merges, no row of symbols to read; the way to see them
        first = max(0, min(256, info.vocab_size - 3))  # a byte-level BPE's first merges, past its 256 bytes
        rows.append(("symbols", f"{count(info.vocab_size, 'token')}, not listed: "
                                f"{cmd('tok', ids=f'{first},{first + 1},{first + 2}')} shows what ids read as"))
    if info.train_tokens is not None and info.val_tokens is not None:
        total = info.train_tokens + info.val_tokens
        # the split's own shares, of characters (a BPE's token counts read 91/9 of a 90/10 split)
        chars = info.chars if info.val_chars is not None and info.chars else None
        share = (round(100 * (chars - info.val_chars) / chars) if chars else
                 round(100 * info.train_tokens / total) if total else 0)
        # which part is which: a user's own file sorted or in chapters validates on its last (the README said 90/10)
        of = " of its characters" if chars and info.unit != "character" else ""  # tokens split otherwise
        rows.append(("train/val", f"{info.train_tokens:,} / {info.val_tokens:,} tokens ({share}/{100 - share}{of}: "
                                  "the first part of the text, then its end)"))
    elif info.val_questions is not None and info.questions:
        # counted: the hash holds out 11 to 16% of a small task's questions, not the 10% it aims at
        share = 100 * info.val_questions / info.questions
        are = "is" if info.val_questions == 1 else "are"  # sort:1 holds out 1 of its 10
        rows.append(("train/val", f"{info.val_questions:,} of the {info.questions:,} possible questions ({share:.0f}%) "
                                  f"{are} held out for validation, never trained on"))
    elif info.chars:
        rows.append(("train/val", "about 10% of the questions are held out for validation, never trained on"))
    elif info.kind == "vocabulary":
        rows.append(("train/val", "none: the vocabulary alone, to generate with"))
    else:
        rows.append(("train/val", "fresh random tokens in every batch"))
    fields(console, rows)
    if result.recipe:
        say(console, recipe_line(info.name, result.recipe), "cyan")
    # a task's size is part of what it is (sort:2); a file's spec is its path, which its name says shorter
    shown = result.spec if info.kind == 'task' and result.spec else info.name
    if result.changed:  # a rebuild said it too: a switch to sort rebuilt the model, and no line named the data
        say(console, f"data is now {shown}", "green")
    if result.rebuilt:
        message = f"the model was rebuilt for a vocabulary of {info.vocab_size}: weights reset (step 0)"
        say(console, message, "yellow")
        render_kept(console, result.kept)
    elif result.changed:
        # the same vocabulary: the weights go on, as :train then does (step N in total); from the shell the session
        # ends with this command, and the line below says how a train takes the data
        if result.model_step and syntax() != SHELL:
            floor = ""
            if result.floor_rate is not None:  # a finished run's final rate, held: 96.6% on sort, 0% on reverse
                # as :set says it: the lr setting where it caps the run's final rate (`:set lr=1e-6` said "its last
                # run's final rate of 1.00e-06", where the run ended at 0.00106)
                rate = (f"its last run's final rate of {result.floor_rate:.3g}" if result.ended_at is None else
                        f"{result.floor_rate:.3g}, the lr setting (the last run ended above it, at "
                        f"{result.ended_at:.3g})")
                floor = (f", at {rate} held constant (that run's schedule has ended); "
                         f"{cmd('train', schedule='new')} starts a fresh warm-up and decay for {shown}")
            note(console, f"the model trained to step {result.model_step:,} stays (the vocabulary is the same): "
                          f"{cmd('train')} goes on training it on {shown}{floor}; "
                          f"{cmd('train', fresh=True)} starts from new weights")
    if result.changed and syntax() == SHELL:  # as with :set, a one-shot session and its data end here
        note(console, f"checked, and gone when this command ends: data lasts one command from the shell, so give it "
                      f"with the command that reads it, e.g. {given_before('train', '--data', result.spec)}")
    if not result.changed:  # :data alone: what else there is, each said (the names alone told nothing of repeat:V)
        from ..core.catalog import built_in_lines

        how = (f"{cmd('data', 'NAME')} switches to one" if syntax() != SHELL else
               "minitf --data NAME COMMAND runs a command on one")
        note(console, f"built in ({how}; a text file's path works too):")
        grid = Table.grid(padding=(0, 2), pad_edge=True)  # the names in a column, each line wrapping in its own
        grid.add_column(no_wrap=True, style="bold")
        grid.add_column(style="dim")
        for line in built_in_lines():
            grid.add_row(*line.split("  ", 1))
        console.print(grid)
