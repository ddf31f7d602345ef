"""The variant lab: `:compare` settings side by side, `:experts` routing, `:ablate` a part switched off.

`:compare` never touches the session's model: every contender is a new model trained from the same
seed on the same batches (core.compare). `:ablate` switches parts of the trained model off with
hooks (core.ablation), never by changing a weight, and `:ablate off` puts them back.
"""

from __future__ import annotations

import math
import re

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.bpe import tokenizer_setting
from ..core.config import DataConfig, GenConfig, ModelConfig, TrainConfig
from ..core.errors import UserError
from ..core.recipes import data_key, follow_optimizer, recipe, recipe_label
from ..core.sizes import check_memory_free, check_trainable
from ..core.words import count
from ..parsing import CLEAR, convert
from ..registry import Param, clip, param_from_setting
from ..render import fmt
from ..render.chart import Curve, chart, mark
from ..render.heatmap import plain
from ..render.live import CompareTable
from ..render.renderers import render
from ..render.tables import add_row, fits, fitting_table
from ..render.words import model_text, note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import REPL, cmd, given_before, interactive, look_again, named, rebuilt_with, syntax
from .base import (REGISTRY, ablation_note, command, complete_data, complete_head_number, complete_layer, sample_prompt,
                   switched_off)
from .generate import answer_line, only_whitespace
from .settings import SET
from .shared import all_warm_up, load_checked, read_with, recipe_line, say_emulated
from .train import PlotLevel, counter_levels, counters_left_out, plot_levels, products_counted

if TYPE_CHECKING:  # torch-bound; schema.py resolves the name for --json
    from ..core.compare import Outcome
    from ..core.data import Graded

FAMILY = "the variant lab"  # the heading :help lists this module's commands under


# --- :compare ------------------------------------------------------------------------------------
@dataclass
class CompareResult:
    outcomes: list[Outcome]  # one per contender: curve (mean, spread per evaluation), speed, size
    steps: int  # training steps per contender and seed
    seeds: int  # seeds per contender
    data: str  # what they trained on
    stopped: bool  # Ctrl-C ended it early: the curves stop where it did
    # with several seeds: whether the best beats the rest by more than the noise; with contenders of
    # different tokenizers (any number of seeds): which reads the val text in the fewest bits per character
    verdict: str | None = None
    # what the contenders are compared by: "val loss", or "bits per character" when their tokenizers
    # differ (losses per token of different tokenizers do not compare)
    by: str = "val loss"
    # contenders with causal=off: every position reads the token it is to predict, so their loss is no language
    # model's (the lab's counter-example), whatever the verdict says
    unmasked: list[str] = field(default_factory=list)
    # after :ngram on the data compared on, all contenders reading it as counted: the bigram counter's and the best
    # counter's val loss, which the chart draws
    counters: list[PlotLevel] = field(default_factory=list)
    # where every contender diverged: two rates to try next, below every one tried (lower_rates)
    lower_rates: list[float] = field(default_factory=list)
    # ln V of the data compared on (None: the contenders' tokenizers differ): a val loss far above it is a run that
    # blew up without overflowing (lr=100: 14,335 to 200,033 nats), which the chart leaves out as a diverged one
    chance: float | None = field(default=None, metadata={"view_only": True})
    # the device they trained on is a CPU (a GPU's otherwise): whose products each MFU is a share of, in its words
    on_cpu: bool = field(default=True, metadata={"view_only": True})


MAX_CONTENDERS = 6
CURRENT = ("current", "base")  # the words that name the session's settings as they are, as a contender


def lower_rates(outcomes: list[Outcome], recipe_lr: float) -> list[float]:
    """Where every contender diverged, two learning rates to compare next: the data's recipe rate (`recipe_lr`,
    the first contender's optimizer's) and a third of it where that is below every rate tried, else a third and a
    tenth of the lowest tried. A fixed "lr=0.01 lr=0.003" was no fix where 0.003 had diverged already."""
    if not outcomes or not all(o.diverged for o in outcomes):
        return []
    lowest = min(o.lr for o in outcomes)
    return [recipe_lr, recipe_lr / 3] if recipe_lr < lowest else [lowest / 3, lowest / 10]


COMPARE_STEPS = 300  # :compare's steps= when none is given (the help states it from here)


def contender_settings() -> list[Param]:
    """:set's options a contender may change (what Tab offers in the contenders): the model's and training's, the
    tokenizer and the preset, less those the comparison sets for every contender (COMPARISONS_OWN)."""
    sections = (ModelConfig.kind, TrainConfig.kind, DataConfig.kind)
    return [p for p in SET.options if (p.setting is None or p.setting.section in sections)
            and p.name not in COMPARISONS_OWN]


@command("compare", "Train settings side by side from the same seed on the same batches: A vs B vs ...", params=[
    Param("contenders", str, positional=True,
          help="contenders: `current`, a preset (`preset=modern`) or settings (`norm=rmsnorm,bias=off`); "
               "separate them with spaces, or with `vs` when one has several settings", pairs=contender_settings,
          complete=lambda session: ["current"], several=True),
    Param("steps", int, help=f"training steps per contender (default {COMPARE_STEPS})", low=1,
          limit=TrainConfig.spec("steps").limit, aliases=TrainConfig.spec("steps").aliases),
    Param("data", str, help="the data to compare on (default: the session's)", complete=complete_data, path=True,
          browse="files"),
    Param("seeds", int, help="train each contender with this many seeds: mean and spread (default 1)", low=1, limit=10),
    param_from_setting(TrainConfig.spec("eval_every"), help="steps between evaluations (default: steps / 10)"),
], pairs_in_text=True, json_version=12)  # fmt: skip
def cmd_compare(session: Session, args: dict, reporter: Reporter) -> CompareResult:
    """Never touches the session's model: every contender is a new model, and the RNG is restored."""
    spec = args["data"].strip() if args["data"] is not None else None
    steps = args["steps"] or COMPARE_STEPS
    seeds = args["seeds"] or 1
    every = args["eval_every"] or max(1, steps // 10)
    groups = _contender_groups(args["contenders"] or "")
    for label, pairs in groups:  # what is wrong in a contender first: `lr=0.01,0.02` is one contender, not two
        _check_pairs(label, pairs)
    # an example line keeps the comparison's own options: `... compare lr=0.01 vs lr=0.01 steps=20` was offered one
    # without steps=20, a comparison of 600 steps
    own = {key: args[key] for key in ("steps", "seeds", "eval_every", "data") if args.get(key) is not None}
    if len(groups) < 2:
        # the one given against the current model; else one layer more than it has (not n_layers=2 where it has 2)
        given = groups[0][0] if groups and groups[0][0] != "current" else None
        one_more = f"n_layers={session.model_config.n_layers + 1}"
        example = (f"current vs {given}" if " " in given else f"current {given}") if given else f"current {one_more}"
        raise UserError(f"compare needs at least two contenders, e.g. {cmd('compare', example, **own)} "
                        f"(or {cmd('compare', 'preset=seed vs preset=modern', **own)})")
    if len(groups) > MAX_CONTENDERS:
        raise UserError(f"compare takes at most {count(MAX_CONTENDERS, 'contender')} at once, got {len(groups)}")
    _refuse_twice_given(groups, session, own)
    # the contenders counted first: too few is one line without the data (and torch) loaded for nothing
    from ..core.compare import compare

    # each contender's own window is checked against the data (_contender): `current max_seq_len=64 data=sort:30`
    # was refused as the session's window alone, naming no contender
    data = load_checked(session, spec, reporter, fits=False) if spec is not None else session.data
    contenders = []
    readings = {}  # tokenizer setting -> (the setting as built, the text read by it): one BPE per setting
    for at, (label, pairs) in enumerate(groups):
        try:
            contenders.append(_contender(session, label, pairs, data, every, readings, reporter))
        except UserError as e:  # say which contender: its settings are not the session's
            kind = type(e) if type(e).__init__ is UserError.__init__ else UserError
            said = str(e).removeprefix(f"{label}: ")  # a setting's error that opens with the label names it once
            joined = (None if "vs" in (args["contenders"] or "").split() else
                      _joined(session, groups, at, data, every, readings, own))
            both = f"; one contender with both: {joined}" if joined else ""
            # the front end puts a fix's line after a colon at the end: after the join's line it read as part of it.
            # A fix of a setting the contender gives itself is no way on: `--set max_seq_len=26 compare
            # max_seq_len=200 ...` was refused again, the contender's 200 over the session's 26
            own_keys = {SET.find_param(p.partition("=")[0].strip()).name for p in pairs if not _is_current([p])}
            fix = None if joined or own_keys & set(e.fix) else e.fix
            raise kind(f"contender {label}: {said}{both}", fix=fix) from None
    _say_warm_up(contenders, steps, reporter)
    say_emulated([c.train_config.dtype for c in contenders], session.device, reporter)
    if any(c.tokenizer is not None for c in contenders):  # the others read as the data does: say how
        for c in contenders:
            c.tokenizer = c.tokenizer or tokenizer_setting(data.tokenizer)
    # after that: tokenizer=char on text read by characters is no change
    _say_same_runs(contenders, reporter, session.device)
    by = "bits per character" if len({c.tokenizer for c in contenders}) > 1 else "val loss"
    base_seed = session.train_config.seed
    session.threads.decide()  # a fresh look at the other work on the machine before a long run
    reporter.on_compare_start([c.label for c in contenders], steps, seeds, by_bpc=by != "val loss")
    outcomes = compare(contenders, data, steps, [base_seed + i for i in range(seeds)], session.device,
                       on_evaluation=reporter.on_compare_eval, should_stop=reporter.should_stop,
                       threads=session.threads, on_step=reporter.on_compare_step,
                       on_diverged=reporter.on_compare_diverged, on_evaluate=reporter.on_compare_evaluate)
    stopped = any((o.final is None or o.final.step < steps) and not o.diverged for o in outcomes)
    if not stopped and reporter.should_stop() and not any(o.band_losses for o in outcomes):
        reporter.notice("stopped while the loss by position was read at the end: the comparison is whole, and the "
                        "loss by position is left out")
    verdict = None if stopped else compare_verdict(outcomes, seeds, by)
    unmasked = [c.label for c in contenders if not c.model_config.causal]
    counted = data is session.data and not any(c.tokenizer for c in contenders)  # the text :ngram counted, as it was
    rates = lower_rates(outcomes, recipe(data_key(data), contenders[0].train_config.optimizer)["lr"])
    return CompareResult(outcomes, steps, seeds, spec or session.data_spec, stopped, verdict, by, unmasked,
                         plot_levels(session.counters) if counted else [], rates,
                         chance=None if by != "val loss" else math.log(data.tokenizer.vocab_size),
                         on_cpu=session.device.type == "cpu")


def compare_verdict(outcomes: list[Outcome], seeds: int, by: str) -> str | None:
    """Which contender did best, by bits per character when the tokenizers differ (any number of seeds), else
    by val loss (with several seeds: a single seed says nothing about noise); with seeds, whether it is noise."""
    from ..core.compare import differs

    finals = [(o.final, o) for o in outcomes if o.final is not None and not o.diverged]
    verdict = None
    bpc = by != "val loss"
    if bpc and finals:
        best, best_outcome = min(finals, key=lambda f: f[0].bpc)
        # bits written alike (3 decimals) are a tie: "better: 1.234 ..., against 1.234 for char" said otherwise
        tied = [o.label for e, o in finals if o is not best_outcome and round(e.bpc, 3) == round(best.bpc, 3)]
        others = ", ".join(f"{e.bpc:.3f} for {o.label}" for e, o in finals
                           if o is not best_outcome and o.label not in tied)
        # over seeds, "better" only where it beats every other by more than the noise: "is better ...; against char
        # the gap is within the noise of 2 seeds" took back in one clause what the first said
        noisy = seeds > 1 and any(not differs(best, e, True) for e, o in finals if o is not best_outcome)
        verdict = (f"{' and '.join([best_outcome.label, *tied])} tie by bits per character" if tied else
                   f"{best_outcome.label} has the fewest bits per character" if noisy else
                   f"{best_outcome.label} is better by bits per character") + f": {best.bpc:.3f} on the val text"
        verdict += (f", against {others}" if others else "") + (" (losses per token of different tokenizers do not "
                                                                 "compare)")
    elif finals and seeds > 1:
        best, best_outcome = min(finals, key=lambda f: f[0].val_loss)
        verdict = f"{best_outcome.label} has the lowest val loss"
    if verdict is not None and seeds > 1:
        beaten = [o.label for e, o in finals if o is not best_outcome and differs(best, e, bpc)]
        close = [o.label for e, o in finals if o is not best_outcome and not differs(best, e, bpc)]
        if beaten:
            verdict += (f"; it beats {', '.join(beaten)} on the same {seeds} seeds, beyond the noise of the gap "
                        "(paired t-test, 95%)")
        # at 2 seeds the paired t-test at 95% asks a gap 12.7 times its standard error (core.compare.T_975[1]; the
        # test is run, where "too few for a test" said it was not): one lower on both seeds is said so, with the way
        # to a test (an obvious 0.10 lower on both read "within the noise" and nothing more)
        mine = (lambda e: e.bits) if bpc else (lambda e: e.losses)
        both = {o.label: gaps for e, o in finals if o.label in close and len(gaps := [y - x for x, y in
                zip(mine(best), mine(e))]) == 2 and min(gaps) > 0}
        for label, gaps in both.items():
            verdict += (f"; it is lower than {label} on both seeds (by {gaps[0]:.3f} and {gaps[1]:.3f}), short of the "
                        "12.7 standard errors the paired t-test asks at 2 seeds: seeds=3 or more tells a gap from "
                        "the noise")
        close = [label for label in close if label not in both]
        if close:
            verdict += f"; against {', '.join(close)} the gap is within the noise of {seeds} seeds"
    return verdict



def _contender(session: Session, label: str, pairs: list[str], data, every: int, readings: dict,
               reporter: Reporter) -> Contender:
    """One contender, its settings checked as :set checks them; a BPE tokenizer setting is built once (`readings`)."""
    from ..core.compare import Contender
    from ..core.data import TextCorpus

    fix = "compare tokenizers on text, e.g. data=pydoc"
    asked = next((p.partition("=")[2].strip() for p in pairs if p.partition("=")[0].strip() == "tokenizer"), "")
    if asked.lower().partition(":")[0] == "bpe" and not isinstance(data, TextCorpus):  # no text for any N: said
        read_with(data, asked, reporter, fix=fix)  # before N's range (bpe:50), whose fix bpe:512 would fail for this
    model, train, tokenizer, followed = _contender_configs(session, pairs, data)
    if followed:  # another optimizer: its rate and warm-up, as :set gives them
        reporter.notice(f"{label}: " + recipe_line(recipe_label(compared_recipe(session, data), train.optimizer),
                                                   followed))
    reading, built = data, None
    if tokenizer is not None:
        key = tokenizer.strip().lower()
        if key not in readings:
            read_by, text = read_with(data, tokenizer, reporter, fix=fix)
            readings[key] = (tokenizer_setting(read_by), text)
        built, reading = readings[key]
        model = model.replace(vocab_size=reading.tokenizer.vocab_size)
        if built and built.lower() != asked.lower() and f"tokenizer={asked}" in label:
            # a text with pairs for 310 tokens builds bpe:310 for bpe:512: the label, the legend and the verdict name
            # what trained, as :set's setting then reads (the verdict said "bpe:512 is better")
            label = label.replace(f"tokenizer={asked}", f"tokenizer={built}")
    train = train.replace(eval_every=every)
    reading.check_fits(model.max_seq_len)
    check_trainable(model, train.batch_size, fused=train.fast_path)
    if session.device.type == "cpu":  # each contender is a new model, trained while the session's stays
        check_memory_free(model, train.batch_size, fused=train.fast_path)
    return Contender(label, model, train, reading if reading is not data else None, built)


def _joined(session: Session, groups: list[tuple[str, list[str]]], at: int, data, every: int, readings: dict,
            own: dict) -> str | None:
    """The line that runs where the refused contender `at` (its index), joined by a comma with another of the line,
    would be taken: `:compare n_heads=3 d_model=18` is two contenders, where one with both was likely meant (the
    refusal of n_heads=3 alone on d_model=16 gave no way on, where :set's gave the pair). The others stay as typed,
    with `current` first where one contender would be left (compare needs two); None where no other makes it valid.
    The joined contender passes every check _contender makes, the text's window and the memory's too (a join that
    only checked the settings offered `max_seq_len=200,lr=0.01`, refused again for the same too-short text); `current`
    is joined to nothing (`current,max_seq_len=200` is the setting alone, and a refused current stays refused)."""
    if _is_current(groups[at][1]):
        return None
    for k in range(len(groups)):
        if k == at or _is_current(groups[k][1]):
            continue
        first, second = sorted((at, k))  # joined in the line's order, as typed
        label = f"{groups[first][0]},{groups[second][0]}"
        together = [*groups[first][1], *groups[second][1]]
        try:
            _check_pairs(groups[at][0], together)  # a key both set is no join
            _contender(session, label, together, data, every, readings, Reporter())  # its notices are not this run's
        except UserError:
            continue
        words = [label if i == first else g for i, (g, _) in enumerate(groups) if i != second]
        return cmd("compare", " ".join(words if len(words) > 1 else ["current", *words]), **own)
    return None


def _is_current(pairs: list[str]) -> bool:
    """Whether a contender is the session's settings as they are (`current`, or `base`, as _check_pairs reads it)."""
    return any(pair.lower() in CURRENT for pair in pairs)


def _refuse_twice_given(groups: list[tuple[str, list[str]]], session: Session, own: dict) -> None:
    """A contender typed twice (`current vs current`) is one run trained twice: the same seed, settings and batches
    give one curve, at twice the wait. Refused before anything trains; a contender typed otherwise that comes to
    the same settings (`current lr=...` at the current rate) is said before its run (_say_same_runs)."""
    seen: dict[tuple, str] = {}
    for label, pairs in groups:
        key = tuple(sorted(_same_setting(p) for p in pairs))
        if key in seen:
            others = [g for g, _ in groups if g != label and g != seen[key]]
            example = " ".join([seen[key], *others]) if others else f"{seen[key]} " \
                f"n_layers={session.model_config.n_layers + 1}"
            twice = f"{label!r} is given twice" if label == seen[key] else f"{label!r} is {seen[key]!r} again"
            raise UserError(f"{twice}: one contender trains the same model on the same batches "
                            f"each time, one curve at twice the wait; give each contender once, e.g. "
                            f"{cmd('compare', example, **own)}")
        seen[key] = label


def _same_setting(pair: str) -> str:
    """A contender's setting as it trains, whatever its spelling: `lr=0.010`, `lr=1e-2` and `learning_rate=0.01` are
    `lr=0.01` (typed apart, they trained the same model twice); as typed where it names no setting or no value it
    takes, which _check_pairs then refuses."""
    if pair.lower() in CURRENT:
        return "current"
    key, eq, raw = pair.partition("=")
    param = SET.param_named(key.strip()) if eq else None
    if param is None:
        return pair
    try:
        return f"{param.name}={convert(param, raw)!r}"
    except UserError:
        return pair


def _contender_groups(text: str) -> list[tuple[str, list[str]]]:
    """`a=1 b=2` -> two contenders; `a=1 b=2 vs c=3` -> two; `a=1,b=2` is one with two settings."""
    tokens = text.split()
    if "vs" in tokens:
        groups, current = [], []
        for token in tokens + ["vs"]:
            if token == "vs":
                if current:
                    groups.append(current)
                current = []
            else:
                current.append(token)
    else:
        groups = [[token] for token in tokens]
    out = []
    for group in groups:
        pairs = [pair for token in group for pair in token.split(",") if pair]
        out.append((" ".join(group), pairs))
    return out


# Training settings the comparison itself sets for every contender, and why (a contender's own was overridden)
COMPARISONS_OWN = {
    "seed": lambda: f"every contender starts from the same seed, the session's ({cmd('set', 'seed=N')} changes it)",
    "steps": lambda: "every contender trains the same steps",
    "eval_every": lambda: "every contender is evaluated at the same steps",
}


def _check_pairs(label: str, pairs: list[str]) -> None:
    """Each of a contender's settings is key=value (or current), and no key comes twice in it."""
    seen: dict[str, str] = {}
    for pair in pairs:
        if pair.lower() in CURRENT:
            continue
        key, eq, _ = pair.partition("=")
        if not eq:
            if "," in label:  # a value after a comma: `lr=0.01,0.02`
                raise UserError(f"{pair!r} in {label!r} is not a setting: a comma joins the settings of one "
                                f"contender; give each value its own contender, e.g. "
                                f"{cmd('compare', 'lr=0.01 lr=0.02')}")
            raise UserError(f"{pair!r} is not a setting; write key=value (e.g. n_layers=2), preset=NAME or current")
        name = _setting(key.strip(), label)
        if name in COMPARISONS_OWN:  # the comparison sets these for all: a contender's own would go unheard
            way = ("seeds=3 trains every contender with 3 seeds, to see the noise" if name == "seed" else
                   f"give {name}={pair.partition('=')[2].strip()} to the comparison, after the contenders")
            raise UserError(f"{label!r} sets {name}, but {COMPARISONS_OWN[name]()}; {way}")
        if name in seen:
            # with a vs anywhere, spaces join the settings between two vs into one contender: `a=1 a=2 vs b=3` was
            # told to separate contenders with spaces, which it had done
            how = ("with vs in the line, the words between two vs are one contender's settings: put vs between "
                   "these too, e.g. " + cmd('compare', f"{seen[name]} vs {pair}") if " " in label else
                   "separate contenders with spaces or vs, e.g. " + cmd('compare', 'n_layers=2 n_layers=3'))
            raise UserError(f"{label!r} sets {name} twice ({seen[name]}, {pair}); a contender takes each setting "
                            f"once: {how}")
        seen[name] = pair
        try:  # a bad value before the count of contenders: `:compare lr=abc` offered `:compare current lr=abc`
            convert(SET.find_param(key.strip()), pair.partition("=")[2])
        except UserError as e:
            raise UserError(f"contender {label}: {e}") from None


def _setting(key: str, label: str) -> str:
    """The setting `key` names in a contender (aliases count as their setting), refused as :set refuses it; a key
    that is no setting is said to be :compare's problem, with its own options and the closest setting."""
    import difflib

    if SET.param_named(key) is not None:
        return SET.find_param(key).name
    options = [p.name for p in REGISTRY["compare"].params if not p.positional]
    # the setting :set would offer for it (a beginner's word, the one it begins, the closest: `heads` is n_heads, where
    # the closest spelling alone said threads, and a compare of thread counts ran as pasted), else one of compare's own
    meant = SET.close_option(key)
    close = [meant] if meant else difflib.get_close_matches(key.replace("-", "_").lower()[:40], options, n=1,
                                                            cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    own = key.replace("-", "_").lower()
    if own in options:  # `norm=rmsnorm,data=sort`: "did you mean data?" of data itself; it goes apart, for all
        value = next((p.partition("=")[2] for p in re.split(r"[,\s]+", label) if p.partition("=")[0] == key), "")
        hint = (f"; {own}= is {cmd('compare')}'s own, for every contender: give {own}={value or 'VALUE'} to the "
                f"comparison, after the contenders")
    raise UserError(f"{clip(key)!r} in contender {clip(label)!r} is no setting{hint} ({cmd('help', 'set')} lists the "
                    f"settings a contender can change; {cmd('compare')}'s own options are {', '.join(options)})")


def _contender_configs(session: Session, pairs: list[str], data):
    """The session's model and training settings with a contender's changes, read as `:set` reads them, the
    tokenizer setting it reads the text with (None: as the data is read), and the training settings that
    followed another optimizer's recipe ({setting: (before, after)}, as :set's `recipe`)."""
    from ..core.config import preset_changes

    changes = {ModelConfig.kind: {}, TrainConfig.kind: {}}
    tokenizer = None
    given = []
    for pair in pairs:
        if pair.lower() in CURRENT:
            continue
        key, _, raw = pair.partition("=")  # key=value: _check_pairs has said so of every pair
        param = SET.find_param(key.strip())  # the same keys, aliases and refusals as :set
        given.append((param, convert(param, raw)))
    # A preset's shared key/value heads are for the contender's n_heads, given before it or after (as :set's are)
    heads = next((value for param, value in given if param.name == "n_heads"), None)
    for param, value in given:
        if param.setting is None:  # the preset: a whole architecture for the sizes so far
            model = session.model_config.replace(**changes[ModelConfig.kind])
            changes[ModelConfig.kind].update(preset_changes(value, model, n_heads=heads))
        elif param.setting.section in changes:
            changes[param.setting.section][param.name] = None if value is CLEAR else value
        elif param.setting.section == DataConfig.kind and value is not CLEAR:
            tokenizer = DataConfig(tokenizer=value).tokenizer  # checked as :set checks it
        else:
            raise UserError(f"{param.name} is a {param.setting.section} setting; a contender differs in model or "
                            "training settings, or in its tokenizer")
    model = session.model_config.replace(**changes[ModelConfig.kind], vocab_size=data.tokenizer.vocab_size)
    # the compared data's recipe (data=sort: AdamW's 3e-3 for a task), not the session's (its 6e-3 for pydoc)
    train, followed = follow_optimizer(session.train_config, session.train_config.replace(**changes[TrainConfig.kind]),
                                       compared_recipe(session, data), changes[TrainConfig.kind])
    return model, train, tokenizer, followed


def compared_recipe(session: Session, data) -> str:
    """Whose recipe a contender that switches optimizer follows: the data it is compared on."""
    from ..core.recipes import data_key

    return session.recipe_data if data is session.data else data_key(data)


@render.register(CompareResult)
def render_compare(result: CompareResult, console: Console) -> None:
    table = CompareTable([o.label for o in result.outcomes], result.seeds, by_bpc=result.by != "val loss")
    for outcome in result.outcomes:
        for evaluation in outcome.curve:
            table.add(evaluation)
        if outcome.diverged:
            table.stop(outcome.label)
    measured = any(o.curve for o in result.outcomes)  # Ctrl-C may come before the first evaluation
    if measured or not result.stopped:
        console.print(table)
    facts = Table(box=None, pad_edge=False, header_style="bold")
    facts.add_column("", no_wrap=True)
    # on a task, each contender's held-out accuracy at its last evaluation (mean over seeds), as :train reports it:
    # val losses of 0.0006 and 0.0009 say little of whether both answer every question
    accuracy = any(o.final is not None and o.final.accuracy is not None for o in result.outcomes)
    # each one's GFLOP/s and MFU beside its tokens/s, as :train's summary gives them: the contenders differ in size,
    # and tokens/s alone reads the bigger one as the less efficient where it may use the CPU better
    flops = any(o.gflops is not None for o in result.outcomes)
    shares = any(o.mfu is not None for o in result.outcomes)
    if flops:  # torch-bound; a rate comes only from a comparison that ran
        from ..core.peak import share_words
    for column in ("parameters", "tokens/s", *(("GFLOP/s",) if flops else ()), *(("MFU",) if shares else ()), "time",
                   *(("accuracy",) if accuracy else ()), "differs from the first in"):
        facts.add_column(column, justify="left" if column.startswith("differs") else "right")
    lines = []  # the same facts, one contender a line, where the table does not fit
    for k, o in enumerate(result.outcomes):
        changes = ", ".join(f"{key}={fmt.value(v)}" for key, v in o.changes.items()) or "-"
        glyph, style = mark(k)
        label = Text(f"{glyph} {o.label}", style=style)
        speed = fmt.rate(o.tokens_per_second) if o.tokens_per_second else "-"  # diverged before a step was timed
        right = [fmt.pct(o.final.accuracy if o.final is not None else None)] if accuracy else []
        # stopped: the time to the last evaluation all reached (core.compare); before the first one, none
        took = fmt.seconds(o.seconds) if measured or not result.stopped else "-"
        rates = []
        if flops:  # under the column's GFLOP/s the number alone, to the digits :train's summary gives it
            rates.append("-" if o.gflops is None else f"{o.gflops:,.0f}" if o.gflops >= 10 else f"{o.gflops:.2g}")
        if shares:
            rates.append("-" if o.mfu is None else share_words(o.mfu))
        add_row(facts, label, fmt.whole(o.n_params), speed, *rates, took, *right, changes)
        used = utilisation(o, result.on_cpu)
        lines.append(label + Text(f": {count(o.n_params, 'parameter')}, {speed} tokens/s, "
                                  + (f"{used}, " if used else "") + f"{took}"
                                  + (f", accuracy {right[0]}" if right else "")
                                  + (f"; differs in {changes}" if k else "")))
    if fits(console, facts):
        console.print(facts)
    else:
        for line in lines:
            say(console, line)
    if flops:
        note(console, flops_note(result))
    by_position(result, console)
    bpc = result.by != "val loss"  # the tokenizers differ: the curves in bits per character, which compare
    blown = blew_up(result)
    # the contenders that trained: a diverged one's losses on the way up (1e11) would flatten every other curve, as
    # a blown one's do, and neither has a gap to judge
    trained = [o for o in result.outcomes if not o.diverged and all(o is not b for b, _ in blown)]
    curves = [Curve(o.label, [e.step for e in o.curve], [e.bpc if bpc else e.val_loss for e in o.curve], *mark(k),
                    joined=True) for k, o in enumerate(result.outcomes) if any(o is t for t in trained)]
    if curves and measured:
        drawn = chart(curves, min(console.width, 100), 12, unit="val bits per character" if bpc else "val loss",
                      levels=counter_levels(result.counters))
        console.print(drawn)
        if line := counters_left_out(result.counters, drawn, [v for c in curves for v in c.values]):
            note(console, line)
    diverged = [o for o in result.outcomes if o.diverged]
    if diverged and len(diverged) == len(result.outcomes):
        rates = " ".join(f"lr={rate:.2g}" for rate in result.lower_rates)
        say(console, f"every contender diverged ({'; '.join(f'{o.label} at {o.diverged}' for o in diverged)}): "
                     f"lower the learning rates, e.g. {cmd('compare', rates)}", "yellow")
    else:
        for o in diverged:
            # diverged before the first evaluation, it has no losses: "the table has its losses" beside "diverged"
            held = "the table has its losses" if o.curve else "no evaluation came before it, so it has no losses"
            say(console, f"{o.label} diverged at {o.diverged}: it stopped there ({held}, the "
                         "chart leaves it out) and the others went on; a lower learning rate (or a longer warm-up) "
                         "trains where this one did not", "yellow")
    for o, worst in blown:
        say(console, f"{o.label} blew up: its val loss reached {worst:,.4g} nats, far above a uniform guess's "
                     f"{result.chance:.2f} (ln V), without overflowing; the chart leaves it out, which would flatten "
                     "the others, and a lower learning rate (or a longer warm-up) trains where this one did not",
            "yellow")
    if result.stopped:
        reached = min((o.final.step for o in result.outcomes if o.final is not None and not o.diverged), default=None)
        times = f"; the times are to step {reached:,}, the last evaluation every contender reached" if reached else ""
        say(console, f"stopped early: the curves end where the stop came{times}" if measured else
                     "stopped before the first evaluation: no losses to compare yet", "yellow")
    if result.verdict:
        say(console, result.verdict, "green")
    if line := more_text(result):
        note(console, line)
    # a gap needs two contenders that trained: after every one (or all but one) diverged there is none to judge
    if result.seeds == 1 and not result.stopped and (bpc or not result.verdict) and len(trained) >= 2:
        note(console, f"one seed each on {result.data}: seeds=3 shows whether a gap is more than noise")
    if result.unmasked:
        # from the shell one line trains such a model and the next generates from its autosave: `--set causal=off,
        # minitf train, then minitf gen` trained a masked model and generated from a new one
        shows = (f"{cmd('set', causal=False)}, {cmd('train')}, then {cmd('gen')} shows it" if syntax() == REPL else
                 f"{given_before('train', '--set', 'causal=off', autosaving=True)} trains one, then "
                 f"{cmd('gen', load=AUTOSAVE_NAME)} shows it")
        say(console, f"{', '.join(result.unmasked)}: no causal mask, so every position but the last read the token it predicts; "
                     f"such a loss is no language model's, and the model cannot generate ({shows})", "yellow")


BLEW_UP = 2.0  # a val loss over this many times ln V: a run that blew up, though its numbers stayed finite


def utilisation(outcome: Outcome, on_cpu: bool) -> str | None:
    """A contender's "55 GFLOP/s, 32% of this CPU's float32 products (MFU)", in :train's words (core.peak); None
    where it has no rate. Of the steps it was timed for (Outcome.timed_steps), which a stop or a divergence leaves
    fewer than the steps asked for: the share's rule decides on those, so do its words for none."""
    if outcome.gflops is None:
        return None
    from ..core.peak import utilisation_words

    return utilisation_words(outcome.gflops, outcome.mfu, on_cpu, outcome.dtype, outcome.timed_steps)


def flops_note(result: CompareResult) -> str:
    """What the GFLOP/s and MFU beside each contender count, as :train's legend says it, and what each MFU is a share
    of: the peak of each dtype the contenders trained in, or why there is none."""
    from ..core.peak import MIN_TIMED_STEPS, flop_rate_words

    shares = [o for o in result.outcomes if o.mfu is not None]
    words = f"GFLOP/s{' (MFU)' if shares else ''}: {products_counted(', times the tokens/s')}"
    peaks = {o.dtype: o.peak_gflops for o in shares}  # one measurement a dtype (core.peak keeps it)
    if peaks:
        of = " and ".join(f"{dtype} products, {flop_rate_words(peak)}" for dtype, peak in peaks.items())
        processor = "CPU" if result.on_cpu else "GPU"
        words += (f"; MFU: each one's share of this {processor}'s {of} at a square product ({named('device')} "
                  f"measures it): a bigger model's fewer tokens/s can be a better use of the {processor}")
    # of the steps each contender was timed for, not those asked for: a stop, or a contender diverged after one step
    rated = [o for o in result.outcomes if o.gflops is not None]
    short = [o.label for o in rated if o.mfu is None and o.timed_steps < MIN_TIMED_STEPS]
    why = "too few to tell a steady rate from one step's set-up and noise"
    if short and len(short) == len(rated):
        words += f"; no MFU of one timed step: {why}"
    elif short:
        words += f"; no MFU of {', '.join(short)}: one timed step, {why}"
    return words


def blew_up(result: CompareResult) -> list[tuple]:
    """(outcome, its highest val loss) of each contender that blew up without diverging: its last val loss above
    BLEW_UP x ln V (where no val loss above a uniform guess's is learning, and an unstable start stays well within
    it). The last, not the worst: a spike it came back from (9.5, then 2.5, the best) is no run that failed."""
    if result.chance is None:
        return []
    return [(o, max(e.val_loss for e in o.curve)) for o in result.outcomes if not o.diverged and o.curve
            and o.curve[-1].val_loss > BLEW_UP * result.chance]


def _say_warm_up(contenders: list, steps: int, reporter: Reporter) -> None:
    """A contender whose warm-up covers the whole comparison is compared before its rate has settled (AdamW's
    recipe warms up over 150 steps): said of each, or once where it is true of every one. The warm-up offered is a
    quarter of the run, the share AdamW's recipe warms up over (150 of 600): a tenth, as offered before, left AdamW at
    its recipe's 0.006 on a plateau near 3.0 over 100 steps on pydoc (val 2.96; a quarter: 2.57; the recipe's
    150, never settled: 2.48)."""
    quarter = max(1, steps // 4)
    covered = [c for c in contenders if all_warm_up(steps, c.train_config, "")]
    if len(covered) == len(contenders):
        reporter.notice(f"warm-up covers every contender's whole run ({count(steps, 'step')}): each rate rises to "
                        f"its peak at the last step and never decays; {cmd('set', warmup_steps=quarter)} warms them "
                        "up over a quarter of it, or compare over more steps")
        return
    for c in covered:
        run = f"{c.label}'s whole run"
        reporter.notice(f"{all_warm_up(steps, c.train_config, run)}, so it is compared before its rate has settled; "
                        f"give it warmup_steps={quarter} among its settings, or compare over more steps")


def _say_same_runs(contenders: list, reporter: Reporter, device) -> None:
    """A contender whose settings differ from an earlier one's only where they build nothing (rope_base without
    rope, n_kv_heads equal to n_heads: ModelConfig.as_built) or run nothing otherwise (dtype=auto beside the dtype
    it means on this device: a lesson's `dtype=auto dtype=float32`, on a CPU without bfloat16 units) trains the very
    same model on the same batches: said before the run, where its curve would pass for a finding."""
    from ..core.precision import training_dtype

    def settings(c) -> dict:
        return {**c.model_config.to_dict(), **c.train_config.to_dict(), "tokenizer": c.tokenizer}

    def reads(c) -> dict:  # what the training reads: the weights as built, the window of its batches, its settings
        return {**settings(c), **c.model_config.as_built(), "max_seq_len": c.model_config.max_seq_len,
                "dtype": training_dtype(c.train_config.dtype, device)}

    for k, c in enumerate(contenders):
        # typed otherwise, the same settings (`current tokenizer=char` on text read by characters): "-" alone said so,
        # at the end; typed alike (`current current`), the user knows
        again = next((e for e in contenders[:k] if settings(e) == settings(c) and e.label != c.label), None)
        if again is not None:
            reporter.notice(f"{c.label} is {again.label} again: the same settings, so the same model on the same "
                            "batches, and one curve")
            continue
        same = next((e for e in contenders[:k] if reads(e) == reads(c) and settings(e) != settings(c)), None)
        if same is not None:
            keys = [key for key, value in settings(c).items() if settings(same)[key] != value]
            auto = (f" (dtype=auto is {reads(c)['dtype']} on {device}, which "
                    f"{'multiplies bfloat16 natively' if reads(c)['dtype'] == 'bfloat16' else 'has no bfloat16 units'})"
                    if "dtype" in keys else "")
            reporter.notice(f"{c.label} builds and trains the very model {same.label} does: {', '.join(keys)} "
                            f"change{'s' if len(keys) == 1 else ''} nothing in it{auto}, so their curves are one")


def more_text(result: CompareResult) -> str | None:
    """Where contenders read different numbers of tokens a step (batch_size, max_seq_len): a comparison at equal
    steps is then also one of how much text each read, which a learner should not read as the setting's merit
    alone. None where they read the same, or their tokenizers differ (a token is then another amount of text)."""
    if result.by != "val loss" or result.stopped:
        return None
    by_tokens = sorted(result.outcomes, key=lambda o: o.tokens_per_step)
    least, most = by_tokens[0], by_tokens[-1]
    if least.tokens_per_step == most.tokens_per_step or least.tokens_per_step == 0:
        return None
    # every contender at the most and at the least: one named alone reads as if the others had read less (or more)
    mosts = [o for o in result.outcomes if o.tokens_per_step == most.tokens_per_step]
    leasts = [o for o in result.outcomes if o.tokens_per_step == least.tokens_per_step]

    def names(outcomes: list) -> str:
        labels = [o.label for o in outcomes]
        return " and ".join(labels) if len(labels) < 3 else ", ".join(labels[:-1]) + f" and {labels[-1]}"

    times = [f"{o.seconds / least.seconds:.1f}x" for o in mosts]
    time = f" and took {' and '.join(times)} the time" if least.seconds > 0 and len(leasts) == 1 else ""
    return (f"{names(mosts)} read {most.tokens_per_step / least.tokens_per_step:.3g}x the tokens of {names(leasts)} "
            f"in the same {count(result.steps, 'step')} ({most.tokens_per_step * result.steps:,} against "
            f"{least.tokens_per_step * result.steps:,}){time}: at equal steps a larger batch or window reads more "
            "text, so part of a lead can be that")


def by_position(result: CompareResult, console: Console) -> None:
    """Each contender's val loss at the end by position in the window, in bands (core.compare): where it wins."""
    outcomes = [o for o in result.outcomes if o.band_losses]
    if not outcomes:
        return
    bands = max((o.bands for o in outcomes), key=len)  # the longest window's; a shorter one's are its first
    # losses per token of different tokenizers do not compare (the summary judges them by bits per character):
    # no band's lowest is marked then
    tokenizers_differ = len({o.tokens_per_char for o in outcomes}) > 1
    # the lowest of what is shown: losses that read alike are all marked, and no mark sits on one that reads higher
    shown = [[round(loss, 3) for loss in o.band_losses] for o in outcomes]
    best = [min((losses[b] for losses in shown if b < len(losses) and not math.isnan(losses[b])), default=math.nan)
            for b in range(len(bands))]
    rows, glyphs = [], []  # each contender's row under its label, and under its glyph alone
    # no colour (a pipe, a file, NO_COLOR on a terminal): no bold to show the lowest, a * beside it instead
    starred = plain(console)
    for k, o in enumerate(result.outcomes):
        if not o.band_losses:
            continue
        glyph, style = mark(k)
        cells = []
        for b in range(len(bands)):
            loss = o.band_losses[b] if b < len(o.band_losses) else math.nan
            lowest = len(outcomes) > 1 and not tokenizers_differ and round(loss, 3) == best[b]
            cells.append(Text("-" if math.isnan(loss) else f"{loss:.3f}" + ("*" if lowest and starred else ""),
                              style="bold green" if lowest else ""))
        rows.append([Text(f"{glyph} {o.label}", style=style), *cells])
        glyphs.append([Text(glyph, style=style), *cells])
    table = fitting_table(console, ["positions", *bands], rows, left=("positions",), records=False)
    if not fits(console, table):  # the labels leave the bands no room (they were cut at the edge): the glyphs,
        # which the lines above and the chart's legend name, and where a long window's bands still do not fit, a
        # band a row (at most MAX_CONTENDERS columns)
        table = fitting_table(console, ["positions", *bands], glyphs, left=("positions",), records=False)
        if not fits(console, table):
            table = fitting_table(console, ["positions", *(row[0].plain for row in glyphs)],
                                  [[band, *(row[b + 1] for row in glyphs)] for b, band in enumerate(bands)],
                                  left=("positions",))
    lowest = ("" if len(outcomes) < 2 or tokenizers_differ else "; * the lowest" if starred else "; in bold the lowest")
    say(console, f"the val loss at the end by position in the window, in bands (as {cmd('context')} reads it"
                 f"{lowest})", "bold")
    console.print(table)
    if tokenizers_differ:
        note(console, "the contenders' tokenizers differ: a position is a token of each one's own, so the bands "
                      "cover different stretches of text, and their losses per token do not compare (none is "
                      "marked the lowest)")


# --- :experts ------------------------------------------------------------------------------------
EXPERT_ROWS = 16  # experts listed at most: the busiest (the rest are summed up in a note)
@dataclass
class ExpertsResult:
    layers: list[int]  # block index of each MoE layer
    load: list[list[float]]  # per layer, per expert: share of the routing choices on a validation batch (rows sum to 1)
    tokens: list[list[int]]  # per layer, per expert: routing choices
    aux_loss: float | None  # the load-balancing loss on that batch (1.0 = perfectly even)
    experts_per_token: int  # k: the experts each token is routed to (the experts_per_token setting)
    ablations: list[str] = field(default_factory=list)  # parts :ablate switched off: the routing is that model's
    skipped: list[int] = field(default_factory=list)  # MoE blocks :ablate skips: their routing changes nothing now
    untrained: bool = False  # the model has not trained a step: the router routes by its initial random weights
    aux_weight: float | None = None  # moe_aux_weight: training adds aux_weight x aux_loss to the loss (0: none of it)


# interruptible: one forward pass over a validation batch, which polls no stop flag (a dozen blocks of 32 experts
# took half a minute with Ctrl-C unheard); it only reads the model (core.probe.listening puts its mode back)
@command("experts", "Show how a mixture-of-experts model routes tokens: each expert's share, per layer.",
         interruptible=True, json_version=5)
def cmd_experts(session: Session, args: dict, reporter: Reporter) -> ExpertsResult:
    """Routes one validation batch (no training) and reads the model's routing counts (core.experts)."""
    config = session.model_config
    if not config.ffn:  # the experts are feed-forward networks, and ffn=off builds none, whatever n_experts says
        raise UserError(f"this model has no experts: ffn=off built its blocks of attention alone, with no "
                        f"feed-forward to make a mixture of; {cmd('set', ffn='on')} builds one into every block "
                        "(a new model), with n_experts >= 2 a mixture")
    if config.n_experts <= 1:
        raise UserError(f"this model has no experts (n_experts is {config.n_experts}: one dense feed-forward per "
                        f"block); "
                        + rebuilt_with("experts", AUTOSAVE_NAME, session.data_spec, config, n_experts=4,
                                       experts_per_token=2))
    from ..core.ablation import skipped_blocks
    from ..core.experts import validation_routing

    train = session.trainer.config
    stats = validation_routing(session.model, session.data, train.batch_size, train.seed + 1)
    return ExpertsResult(stats.layers, stats.load, stats.tokens, stats.aux_loss, config.experts_per_token,
                         switched_off(session), sorted(skipped_blocks(session.model) & set(stats.layers)),
                         session.untrained, config.moe_aux_weight)


@render.register(ExpertsResult)
def render_experts(result: ExpertsResult, console: Console) -> None:
    """One row per expert, one column per MoE block: the share, then a bar in a fixed-width field, so
    the numbers and the bars line up (bars of their natural lengths, right-aligned, were ragged)."""
    n = len(result.load[0]) if result.load else 0
    if not n:
        note(console, "no routing was recorded")
        return
    peak = max(max(row) for row in result.load) or 1.0
    # many experts: the busiest EXPERT_ROWS (by their largest share in any block), in their order; 64 experts over 12
    # blocks were two tables of 64 rows
    busiest = sorted(range(n), key=lambda e: max(row[e] for row in result.load), reverse=True)
    listed = sorted(busiest[:EXPERT_ROWS])

    def shares(bar: int, first: int = 0, last: int | None = None) -> Table:
        """The shares of the blocks first..last - 1 (default: every block)."""
        last = len(result.layers) if last is None else last
        table = Table(header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
        table.add_column("", no_wrap=True)
        for layer in result.layers[first:last]:
            table.add_column(f"block {layer}", no_wrap=True)
        for e in listed:
            cells = []
            for row in result.load[first:last]:
                share = Text(f"{row[e]:6.1%}")
                if bar:
                    share.append(" " + ("█" * round(row[e] / peak * bar)).ljust(bar), style="cyan")
                cells.append(share)
            add_row(table, f"expert {e}", *cells)
        return table

    bar = 12  # the busiest expert's bar; narrower (or none) where the terminal is
    while bar and not fits(console, shares(bar)):
        bar -= 2
    # the positions routed: each makes experts_per_token choices in every block
    positions = sum(result.tokens[0]) // result.experts_per_token if result.tokens else 0
    say(console, f"share of routing choices per expert ({result.experts_per_token} per token) on one validation "
                 f"batch ({positions:,} positions); even would be {f'{1 / n:.1%}'.replace('.0%', '%')} each", "bold")
    if bar or fits(console, shares(0)):
        console.print(shares(bar))
    else:  # too many blocks for the width even without bars: as many blocks a table as fit (every cell was "…")
        per = max(1, next((k for k in range(len(result.layers), 0, -1) if fits(console, shares(0, 0, k))), 1))
        for first in range(0, len(result.layers), per):
            console.print(shares(0, first, first + per))
    if len(listed) < n:
        most = max(max(row[e] for row in result.load) for e in busiest[EXPERT_ROWS:])
        note(console, f"the {len(listed)} experts with the largest share in some block, of {n}: the other "
                      f"{n - len(listed)} take at most {most:.1%} in any block; the shell's minitf experts --json "
                      "lists every one")
    if bar:
        note(console, f"a full bar is the busiest expert's share ({peak:.1%})")
    if result.aux_loss is not None:
        adds = ("training adds it, weighted" if result.aux_weight is None else
                f"training leaves it out: moe_aux_weight=0" if result.aux_weight == 0 else
                f"training adds {result.aux_weight:g} x it to the loss")
        # the training table's aux loss is its last training batch's: two numbers for one step, both right
        note(console, f"load-balancing loss {result.aux_loss:.3f} on this batch (1.0 = perfectly even; {adds}; "
                      f"the training table's aux loss is its own training batch's)")
    if result.experts_per_token >= n:  # f_e = 1/n for every expert: aux = n * sum_e P_e / n = 1, learned or not
        note(console, f"every token goes to all {count(n, 'expert')} (experts_per_token = n_experts): the shares are "
                      "even and the load-balancing loss 1 whatever the router learns; only the gates weigh the experts")
    if result.untrained:  # shares near even would read as a balanced router, a lopsided one as a learned preference
        note(console, f"this model has not trained yet: its router routes by its random initial weights, so these "
                      f"shares say nothing learned; {cmd('train')} first")
    for layer in result.skipped:  # the block still runs, so its router does: what it chose goes nowhere
        # with the block's attention off too (core.ablation._skip), its router reads a stream the whole model never
        # makes: the shares differ from the block's own (22.7/14.3/22.7/40.4% against 21.1/19.0/34.1/25.8%)
        note(console, f"block {layer} is skipped ({cmd('ablate', f'block={layer}')}): its experts write nothing now, "
                      f"and its column is where its router would send a stream without the block's own attention, "
                      f"not its routing in the whole model ({cmd('ablate', 'off')}, then {cmd('experts')}, shows that)")
    ablation_note(console, result.ablations)


# --- :ablate -------------------------------------------------------------------------------------
ABLATE_SAMPLE = 24  # greedy tokens of the sample shown with the ablations on
ABLATE_PROMPT = 8  # characters of a text's sample prompt it starts from


@dataclass
class AblateResult:
    active: list[str]  # what is switched off now (text), empty after `:ablate off`
    val_loss_before: float | None  # validation loss without any ablation
    val_loss_after: float | None  # with the ablations now active
    sample: str  # a short greedy continuation of `prompt` with the ablations on
    # what `sample` continues: a task's held-out question, else the first 8 characters of the data's sample prompt
    prompt: str
    untrained: bool = False  # the model has not trained a step: its parts have learned nothing to switch off
    put_back: list[str] = field(default_factory=list)  # `:ablate off`: the parts it switched back on
    answer: Graded | None = None  # a task: the sample's answer, checked (as :gen checks it)


# interruptible: its two evaluations poll no stop flag (two minutes on a 12 x 768 model at block_size=512, Ctrl-C
# unheard); a Ctrl-C there puts back the parts that were off before it (the except below)
def complete_ablations(session) -> list[str]:
    """What :ablate switches off in the model the session has: each head and block by its number."""
    layers = complete_layer(session)
    heads = [f"head={layer}.{head}" for layer in layers for head in complete_head_number(session)]
    return heads + ["mask", "positions"] + [f"block={layer}" for layer in layers] + ["off"]


def complete_switched_off(session) -> list[str]:
    """What `:ablate off` may put back: the parts switched off now, each as :ablate takes it."""
    return [ablation.typed for ablation in session.ablations]


@command("ablate", "Switch part of the trained model off (a head, the mask, positions, a block) and re-evaluate.",
         params=[Param("what", str, positional=True, several=True, alone=("off",),
                       complete=complete_ablations, after_alone=complete_switched_off,
                       help="head=L.H | mask | positions | block=L, one or several (they stack) | off (undo all) | "
                            "off PART (put that one back); none: what is off now")],
         pairs_in_text=True, interruptible=True, json_version=4)  # fmt: skip
def cmd_ablate(session: Session, args: dict, reporter: Reporter) -> AblateResult:
    """Adds the ablations given (they stack: `head=0.1 head=1.0`, or with commas) and shows val loss with and
    without them; `off` removes them all."""
    from ..core.ablation import listed, parse_ablation

    what = (args["what"] or "").strip()  # none: what is switched off now, measured again
    parts = re.sub(r"\s*=\s*", "=", what.replace(",", " ")).split()  # `head = 0.1` is head=0.1
    off = [part for part in parts if part.lower() == "off"]
    config = session.model_config
    previous = list(session.ablations)
    named = [parse_ablation(part, config.n_layers, config.n_heads) for part in parts if part.lower() != "off"]
    if off and named:  # `off head=0.1`: that part alone back on, the others stay off
        missing = [a for a in named if a not in previous]
        if missing:
            said = f"not switched off: {', '.join(map(str, missing))}"  # ("the positions is not" read wrong)
            if not previous:
                raise UserError(f"{said}: nothing is off now, so there is nothing to put back")
            raise UserError(f"{said} (off now: {', '.join(map(str, previous))}); "
                            f"{cmd('ablate', 'off', previous[0].typed)} puts "
                            f"{previous[0]} back, {cmd('ablate', 'off')} every part")
    ablations = [] if off else named
    if any(ablation.kind == "mask" for ablation in ablations) and not config.causal:
        raise UserError(f"this model has no causal mask to switch off (causal=off); {cmd('set', causal=True)} "
                        "puts it back")
    trainer = session.trainer
    if ablations:
        now = listed(dict.fromkeys([*previous, *ablations]))  # by kind and index, each once, as views list them
    elif off:
        now = [a for a in previous if a not in named] if named else []  # off: none, or all but the parts named
    else:
        now = previous  # nothing asked: the same parts, measured again
    def progress(offset: int):  # one bar over both evaluations
        return lambda done, total: reporter.on_progress("ablate", offset * total + done, 2 * total)

    try:
        session.set_ablations([])
        before = trainer.evaluate(on_batch=progress(0))[0]
        session.set_ablations(now)
        after = trainer.evaluate(on_batch=progress(1))[0] if session.ablations else before
        done = getattr(session.data, "answer_complete", None)  # a task's sample ends with its answer
        # a task's question is asked whole (its answer follows its '='); a text's sample starts from its first
        # characters
        prompt = sample_prompt(session.data) if done is not None else sample_prompt(session.data)[:ABLATE_PROMPT]
        from ..core.bpe import decode_after
        from ..core.generate import generate

        ids = session.data.tokenizer.encode(prompt)
        greedy = GenConfig(n=ABLATE_SAMPLE, temperature=0.0)
        text = decode_after(session.data.tokenizer, ids, list(generate(session.model, ids, greedy, done=done)))
    except BaseException:  # a part that cannot be switched off, Ctrl-C: the parts off before this command stay off
        session.set_ablations(previous)
        raise
    graded = session.data.grade(prompt + text) if done is not None else None
    return AblateResult([str(a) for a in session.ablations], before, after, text, prompt, session.untrained,
                        put_back=[str(a) for a in previous if a not in now] if off else [], answer=graded)


@render.register(AblateResult)
def render_ablate(result: AblateResult, console: Console) -> None:
    if result.put_back:  # `:ablate off` after parts were off: it said "nothing switched off", as if none had been
        say(console, Text("switched back on: ", style="green") + Text(", ".join(result.put_back)))
    if result.put_back and not result.active:
        say(console, f"val loss {fmt.num(result.val_loss_before)}, the whole model's", "bold")
    elif not result.active:
        say(console, f"nothing switched off: val loss {fmt.num(result.val_loss_before)}", "green")
    else:
        # the change of the two numbers as written beside it: 2.5828 -> 2.5828 is +0.0000, whatever their 5th decimals
        delta = fmt.change(result.val_loss_before, result.val_loss_after, lambda d: f"{d:.4f}", digits=4)
        say(console, Text("switched off: ", style="yellow") + Text(", ".join(result.active)))
        say(console, f"val loss {fmt.num(result.val_loss_before)} -> {fmt.num(result.val_loss_after)} "
                     f"({delta})", "bold")
    sample = Text("sample: ", style="dim") + model_text(result.prompt, console, "bold") + model_text(result.sample, console)
    say(console, sample)
    if (blank := only_whitespace(result.sample)) is not None:  # "sample: The exam" and nothing: it seemed to stop
        say(console, blank, "yellow")
    if result.answer is not None:  # a plausible wrong answer went unremarked, where :gen grades the same sample
        say(console, answer_line(result.answer, untrained=result.untrained), "green" if result.answer.right else "red")
    if result.untrained and result.active:  # a change near 0 would read as "this part does nothing"
        fix = (f"{cmd('ablate', 'off')}, {cmd('train')}, then switch them off again" if syntax() == REPL  # :train
               # refuses while parts are off; a one-shot's model ends with it, and its training is the autosave
               else look_again("ablate", AUTOSAVE_NAME, "WHAT"))
        note(console, f"this model has not trained yet: its parts have learned nothing to switch off; {fix}")
    if result.active and syntax() != REPL:  # the hooks live in the session, which a one-shot command ends
        note(console, "switched off for this command only (the weights never changed): in the REPL "
                      f"({interactive()}), the parts stay off for every view until :ablate off")
    elif result.active:
        note(console, f"{cmd('ablate', 'off')} puts the model back (the weights never changed)")
    else:
        note(console, f"{cmd('ablate', 'head=L.H')} switches a head off (or mask, positions, block=L); they stack")
