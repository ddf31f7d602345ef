"""`:checks`: the checks to run before trusting a training run, on the session's model and data (core.checks).

Each check is one line: pass or FAIL, what it asks, what was measured. Under them, the causal check's
dependency map (which positions each position's logits read, through the whole network), and for a
check that failed, what usually causes it and what to try.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

from ..core.errors import UserError
from ..core.variants import position_kind
from ..core.words import count
from ..palette import visible
from ..registry import Param, clip
from ..render import fmt
from ..render.heatmap import heads_note, heatmap, legend, unscaled
from ..render.renderers import render
from ..render.words import Words, note, say
from ..reporter import Reporter
from ..session import Session
from ..syntax import cmd, named
from .base import ablation_note, command, data_named, sample_window, switched_off
from .shared import say_emulated, width_one_reads_nothing

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.backprop import GradientCheck, TrainingPrecision
    from ..core.checks import BatchCheck, BlindCheck, CausalCheck, InitCheck, OverfitCheck, RowsCheck, Skipped

FAMILY = "training"  # listed under :train's heading: what to check before a loss curve is read

# core.checks.CHECKS, known here without importing torch (for completion and :help); a test keeps them equal
CHECK_NAMES = ("batch", "init", "rows", "causal", "gradient", "blind", "overfit")
STEPS = 100  # the training checks' default length: the default model passes both well before (overfit by step 13)


@dataclass
class ChecksResult:
    # the session's data as results name it: a task with its size (sort:4), random tokens by spec, else its name
    data: str
    unit: str  # what one token is: character, token
    vocab_size: int  # V: tokens in the vocabulary (a uniform guess scores ln V)
    model_step: int  # the session model's training step (causal, rows and gradient read it as it is)
    asked: list[str]  # the checks asked for, in the order they run
    batch: BatchCheck | None = None  # the batch check (None: not asked, or a stop came first)
    init: InitCheck | None = None  # the init check (None: not asked, skipped, or a stop came first)
    causal: CausalCheck | None = None  # the causal check (None: not asked, or a stop came first)
    rows: RowsCheck | None = None  # the rows check (None: not asked, or a stop came first)
    gradient: GradientCheck | None = None  # the gradient check (None: not asked, skipped, or a stop came first)
    # the gradient check's text once more under :train's autocast, where :train runs its products in bfloat16: the check
    # judges float32's backprop, which is not the backward :train runs there (None: float32, or the check did not run)
    gradient_training: TrainingPrecision | None = None
    blind: BlindCheck | None = None  # the blind check (None: not asked, skipped, diverged, or a stop came first)
    overfit: OverfitCheck | None = None  # the overfit check (None: not asked, skipped, diverged, or a stop came first)
    skipped: list[Skipped] = field(default_factory=list)  # checks not run here, and why
    diverged: dict[str, str] = field(default_factory=dict)  # training checks whose run diverged (failed), and how
    passed: list[str] = field(default_factory=list)  # the checks that passed, in the order they ran
    # the checks that failed, the diverged ones included, in the order they ran
    failed: list[str] = field(default_factory=list)
    stopped: str | None = None  # the check a stop request (Ctrl-C) ended; the ones after it did not run
    seconds: dict = field(default_factory=dict)  # each check's wall time
    gradient_tolerance: float = 0.0  # core.checks.GRADIENT_TOLERANCE: the relative difference that passes
    blind_margin: float = 0.0  # core.checks.BLIND_MARGIN: how far under the blind model's loss passes
    causal_setting: bool = True  # the causal setting (on, with the mask off: an :ablate of the mask)
    post_norm: bool = False  # norm_placement=post: each block ends with a norm
    residual: bool = True  # the residual add is there (residual=off: each sublayer's output replaces the stream)
    dropout: float = 0.0  # the dropout setting the fresh models train with (0.99 keeps overfit from learning a batch)
    position_table: bool = True  # positions are added to the input (learned or sinusoidal; not rope or none)
    ablations: list[str] = field(default_factory=list)  # what :ablate switched off: rows, causal, gradient read it so
    # d_model: a width of 1 is why logits read nothing (a norm of one feature is its bias alone), said by causal and
    # blind; the settings' own, which --json states elsewhere (:config)
    d_model: int = field(default=0, metadata={"view_only": True})
    # the dtype the training checks' fresh models trained in (the dtype setting, as :train reads it here: float32 or
    # bfloat16); None: no training check asked. Not the session model's, whose steps may have run in another: blind's
    # "real run" is a fresh model's, and beside a loaded bfloat16 model's val loss it read as that model's
    trained_dtype: str | None = None
    # the dtype the session model's own latest step ran in, where it is not trained_dtype (None: the same, unknown, or
    # no training check), which the heading then names beside it
    model_dtype: str | None = field(default=None, metadata={"view_only": True})
    # the peak rate the training checks' fresh models trained at (the session's lr, which --json states elsewhere:
    # :config): a run whose loss grew names it, as the one that blew it up
    lr: float = field(default=0.0, metadata={"view_only": True})

    @property
    def failure(self) -> str | None:
        """A failed check fails the command, as a failed test fails a test run: `minitf checks && minitf train`
        in a script stops at a FAIL (the one-shot shell and piped input exit 1); the REPL shows it and goes on."""
        return f"{count(len(self.failed), 'check')} failed: {', '.join(self.failed)}" if self.failed else None


def causal_row(data):
    """What the causal check reads on a corpus: the val text from the views' sample prompt on (a sentence's
    start, so that the map's labels read as words); elsewhere None (a val batch's row)."""
    splits = getattr(data, "splits", None)
    if splits is None:
        return None
    start, _ = sample_window(data)
    return splits["val"][start:].long()


def complete_checks(session) -> list[str]:
    return list(CHECK_NAMES)


def asked_checks(text: str | None) -> list[str]:
    """The checks named in `text` (any order, repeats ignored), in the order they run; none named: all."""
    words = (text or "").replace(",", " ").split()
    unknown = [w for w in words if w not in CHECK_NAMES]
    if unknown:
        close = difflib.get_close_matches(unknown[0][:40], CHECK_NAMES, n=1, cutoff=0.6)  # casual: causal
        hint = f"; did you mean {cmd('checks', close[0])}?" if close else ""
        raise UserError(f"no check is called {clip(unknown[0])!r}; the checks are {', '.join(CHECK_NAMES)} "
                        f"(leave them out to run all){hint}")
    return [name for name in CHECK_NAMES if name in words] if words else list(CHECK_NAMES)


@command("checks", "The checks to run before trusting a training run: the batch's targets, the loss at init, "
                   "rows that never mix, causality, backprop against a measured slope, a blind baseline, one batch "
                   "overfit.",
         params=[
    Param("which", str, positional=True, complete=complete_checks, several=True,
          help=f"the checks to run, by name (default all): {' '.join(CHECK_NAMES)}"),
    # no default= here: a steps= typed at 100 with no training check asked is said to be left out, as any other is
    Param("steps", int, low=1, limit=100_000,
          help=f"the training checks' steps: blind trains two fresh models this long, overfit one (default {STEPS})"),
], aliases=("sanity",), json_version=11, guide="inside-views.md#before-trusting-a-run-checks",
   topics=("init",))  # fmt: skip
def cmd_checks(session: Session, args: dict, reporter: Reporter) -> ChecksResult:
    from ..core import checks
    from ..core.ngram import count_and_score

    asked = asked_checks(args["which"])
    steps = STEPS if args["steps"] is None else args["steps"]
    trainer = session.trainer
    data = trainer.data
    data.check_fits(session.model_config.max_seq_len)  # data too short for the window: refused before anything runs
    result = ChecksResult(data_named(session), data.tokenizer.unit, data.tokenizer.vocab_size, trainer.step, asked,
                          gradient_tolerance=checks.GRADIENT_TOLERANCE, blind_margin=checks.BLIND_MARGIN,
                          causal_setting=session.model_config.causal,
                          post_norm=session.model.post_norm,
                          residual=session.model_config.residual, dropout=session.model_config.dropout,
                          position_table=position_kind(session.model_config).table is not None,
                          ablations=switched_off(session), d_model=session.model_config.d_model)
    training = [name for name in asked if name in ("blind", "overfit")]
    if not training and args["steps"] is not None:  # as :ln says of layer= with ln_f: said, not dropped
        reporter.notice(f"steps={steps} is the training checks' length (blind, overfit), and none was asked; it was "
                        "left out")
    if training:
        from ..core.precision import training_dtype

        session.threads.decide()  # a fresh look at the other work on the machine before the training checks
        say_emulated([trainer.config.dtype], trainer.device, reporter)
        result.trained_dtype = training_dtype(trainer.config.dtype, trainer.device)
        result.lr = trainer.config.lr
        if trainer.trained_dtype not in (None, result.trained_dtype):
            result.model_dtype = trainer.trained_dtype
    total = steps * (2 * ("blind" in training) + ("overfit" in training))
    trained = [0]

    def stepped(info) -> None:
        trained[0] += 1
        reporter.on_progress("checks", trained[0], total)

    def unigram() -> float:
        return count_and_score(data, 1, session.model_config.max_seq_len).counters[1].val_loss

    def causal_pass(done_positions: int, positions: int) -> None:
        reporter.on_progress("causal check", done_positions, positions)

    done = checks.run_checks(session.model, trainer, asked, steps=steps, unigram=unigram, on_step=stepped,
                             should_stop=reporter.should_stop, row=causal_row(data), on_pass=causal_pass)
    result.stopped = done.stopped
    result.gradient_training = done.gradient_training
    for name, check in done.results.items():
        if isinstance(check, checks.Skipped):
            result.skipped.append(check)
        elif isinstance(check, checks.Diverged):
            result.diverged[name] = check.why
            result.failed.append(name)
        else:
            setattr(result, name, check)
            verdict = checks.passed(check)  # None: nothing to show here (blind on random tokens)
            if verdict is not None:
                (result.passed if verdict else result.failed).append(name)
    result.seconds = {name: round(s, 3) for name, s in done.seconds.items()}
    return result


# --- what each check says ----------------------------------------------------------------------------
ASKS = {  # the question each check answers, as its line starts
    "batch": "the targets are the inputs shifted by one",
    "init": "a fresh model scores about ln V",
    "rows": "the rows of a batch never mix",
    "causal": "no position reads a later one",
    "gradient": "backprop's gradient is the loss's slope",
    "blind": "the model learns from its input",
    "overfit": "it can learn one batch by heart",
}


def positions_read(check, unit: str) -> str:
    """The positions the causal check read: the whole window, or its first CAUSAL_WINDOW."""
    return (f"over {count(check.positions, unit)}" if check.positions == check.window
            else f"over the first {check.positions:,} of the window's {count(check.window, unit)}")


def measured(name: str, check, result: ChecksResult) -> str:
    """What a check measured, in words."""
    unit = result.unit
    if name == "batch":
        shifted = ("every one is the next input" if not check.mismatched
                   else f"{check.mismatched:,} are not the next input")
        of = "" if check.counted == check.rows * check.positions else f" of {check.rows * check.positions:,}"
        # the rows read are the first few of a batch of batch_size: "a batch of 4 rows" was said at batch_size=16
        rows = (f"a training batch of {count(check.rows, 'row')}" if check.rows >= check.batch_size
                else f"{count(check.rows, 'row')} of a training batch (of {check.batch_size:,})")
        return f"{check.counted:,}{of} targets counted in {rows}: {shifted}"
    if name == "init":
        # a tied head starts under ln V where the text repeats the token read: the reference says by how much, where
        # that is 1% or more; else it is ln V, and the share off is of the numbers shown (4.620 against ln(103) =
        # 4.635 read "0.7% off", measured from a reference the line did not give)
        shown = check.expected if check.expected < check.uniform - 0.01 * check.uniform else check.uniform
        off = abs(check.loss - shown) / check.uniform
        favoured = (f"{check.expected:.3f} (ln({result.vocab_size:,}) = {check.uniform:.3f}, less the tied head's "
                    f"favour for the token read)" if shown == check.expected else
                    f"ln({result.vocab_size:,}) = {check.uniform:.3f}")
        line = f"{check.loss:.3f} against {favoured} ({off:.1%} off); its logits' std {check.logit_std:.2f}"
        if check.model_loss is not None:  # an untrained session model that is not that fresh one: loaded, changed
            line += (f"; the session's model, not trained and not a fresh one: {check.model_loss:.3f} "
                     f"({abs(check.model_loss - check.model_expected) / check.uniform:.1%} off), its logits' std "
                     f"{check.model_logit_std:.2f}, its weights' std {check.model_weight_std:.3g} against the fresh "
                     f"model's {check.fresh_weight_std:.3g}")
        return line
    if name == "rows":
        size = "exactly 0" if check.passed else f"up to {check.other_largest:.3g}"
        own = " (and on its own: they read nothing, see causal)" if check.own_size == 0 else ""
        return f"row 0's logits have a gradient of {size} on the other {count(check.rows - 1, 'row')}{own}"
    if name == "causal" and not check.later_pairs:  # max_seq_len=1: "0 of the 0 pairs", a pass that checked nothing
        return (f"nothing to check here: a window of {count(check.positions, unit)} has no later position to read, so "
                "no leak could show; max_seq_len=2 or more puts the mask to the test")
    if name == "causal" and check.reads_nothing:  # "0 of the 2,016 pairs" passed a model that read nothing at all
        return (f"no position's logits have a gradient on any position: not the {check.later_pairs:,} pairs (t, s > t) "
                f"nor the {check.earlier_unread:,} with s <= t, {positions_read(check, unit)}, so nothing shows "
                "whether the mask works")
    if name == "causal":
        read = f"{check.later_read:,} of the {check.later_pairs:,} pairs (t, s > t) have a gradient"
        if check.passed:
            read += " (each exactly 0)"
        else:
            read += (f" (largest {check.later_largest:.3g}; at most {check.later_share:.2g} of its row's largest, the "
                     "map's scale)")
        earlier = ("every earlier one has" if not check.earlier_unread
                   else f"{check.earlier_unread:,} earlier pairs have none")
        return f"{read}; {earlier}, {positions_read(check, unit)}"
    if name == "gradient":
        from .backprop import float32_part

        return (f"g.u = {check.backprop_float64:+.6g} from backprop run in float64, {check.measured:+.6g} measured in "
                f"float64 by nudging all {check.params:,} weights: they agree to {check.relative:.0e}"
                + float32_part(check))
    if name == "blind":
        zero = check.zero_token.encode("unicode_escape").decode("ascii")  # a newline shows as \n
        counter = "the unigram counter of the scored targets" if check.unigram_scored else "the unigram counter"
        gap = check.blind_loss - check.real_loss
        # the pass mark said in the passing line too: it was named only where the check failed; on random tokens
        # (passed None) there is no mark to say
        mark = ("" if check.passed is None else f", {abs(gap):.3f} {'above' if gap >= 0 else 'under'} the real run "
                f"(the pass mark: {result.blind_margin:g} or more above)")
        return (f"val {check.real_loss:.3f} after {count(check.steps, 'step')}; {check.blind_loss:.3f} with every "
                f"input '{zero}' (id 0){mark}; {counter} {check.unigram_loss:.3f}")
    if name == "overfit":
        under = next((k + 1 for k, loss in enumerate(check.curve) if loss <= check.target), None)
        given = (f"the first row's first {result.unit}" if check.given == 1
                 else f"the first row's first {count(check.given, result.unit)} (what its loss does not count)")
        final, target = fmt.apart(check.final_loss, check.target)  # never "0.05 is above the 0.05"
        # named as the pass mark: "under 0.232 at step 13" said nothing of what 0.232 is where the check passed
        share = f"{check.target / math.log(result.vocab_size):.0%} of ln V"
        by = (f", under the pass mark {target} ({share}) at step {under}" if under else
              f", never under the pass mark {target} ({share})")
        return (f"{count(check.rows, 'row')}, {count(check.tokens, 'prediction')}: {check.first_loss:.3f} → "
                f"{final} in {count(check.steps, 'step')}{by}; given {given}, it writes "
                f"{check.recited} of the {count(check.recitable, result.unit)} after it as they stand" +
                (f"; its loss, {final}, is above the {target} that passes alone, but it writes every row's answer "
                 f"again" if check.passed and check.final_loss > check.target else ""))
    return ""


def no_residual(result: ChecksResult) -> str:
    """What a model without the residual add has to do with a training check that failed."""
    if result.residual:
        return ""
    return (f". Here the residual add is off: the gradient fades on its way down the blocks ({cmd('grad')} shows it), "
            f"and {cmd('set', residual='on')} puts the add back")


def with_dropout(result: ChecksResult) -> str:
    """What dropout has to do with a fresh model that could not learn a batch by heart: it trains with it."""
    if not result.dropout:
        return ""
    return (f". Here the fresh model trains with dropout={result.dropout:g}: each step zeroes {result.dropout:.0%} of "
            f"its activations at random, which works against learning rows by heart; {cmd('set', dropout=0)} checks "
            "without it")


def failure(name: str, check, result: ChecksResult) -> str:
    """What a failed check usually means, and what to try."""
    if name == "batch":
        if not check.counted:
            return "no target of the batch is counted: the loss has nothing to learn from"
        return ("the targets are not the inputs shifted by one: the model is trained to predict something other than "
                "the next token, and a loss that falls means nothing for generating text")
    if name == "init" and check.model_passed is False:
        return (f"the session's model has not trained, yet it starts {check.model_loss - check.uniform:+.2f} nats from "
                f"a uniform guess (ln V = {check.uniform:.3f}): its logits are not small (std "
                f"{check.model_logit_std:.2f}, a fresh model's {check.logit_std:.2f}) and its weights are not (std "
                f"{check.model_weight_std:.3g} against a fresh model's {check.fresh_weight_std:.3g}), so it is "
                f"confidently wrong before it has learned anything. The usual cause is an init scale (weights drawn "
                f"larger than the {check.fresh_weight_std:.2g} a fresh model gets) or weights loaded from elsewhere; "
                f"start from weights drawn at that scale")
    if name == "init":
        if check.loss < check.expected:
            own = (f"the token it reads is its likeliest next one at {check.reads_own:.0%} of positions (p "
                   f"{check.own_p:.3f} against 1/{result.vocab_size:,} = {1 / result.vocab_size:.3f}), and text "
                   f"repeats a character often enough to pay for that. The head is the embedding (tied), and what "
                   f"reaches it is still mostly the input's own embedding" +
                   (": post-norm puts the stream back to full size after every block, where pre-norm adds the "
                    "blocks' outputs on top of the small embedding. An untied head starts at ln V" if result.post_norm
                    else "") if check.reads_own >= 0.5 else "its logits already prefer some tokens")
            return (f"a fresh model starts {check.uniform - check.loss:.2f} nats under a uniform guess, before it "
                    f"has learned anything: {own}")
        return (f"a fresh model starts {check.loss - check.uniform:+.2f} nats from a uniform guess: its logits are "
                f"not small at the start (std {check.logit_std:.2f}), so it is confidently wrong before it has "
                f"learned anything, and its first steps go to undoing that. Smaller initial weights for the output "
                f"head (or a zeroed one) start it at ln V")
    if name == "rows":
        return ("one row's output depends on another row of the batch: something normalises or routes across the "
                "batch. Training still runs, but each row's loss now reads the others, and generating one text at "
                "a time will not behave as training did")
    if name == "causal" and check.reads_nothing:
        return (f"the output reads nothing: every position's logits are the same whatever the input, so the mask has "
                f"nothing to hide and the model nothing to learn from. {reads_nothing_cause(result)}")
    if name == "causal":
        fix = (f"{cmd('set', causal='on')} puts the mask back" if not result.causal_setting
               else f"The mask is switched off by {cmd('ablate', 'mask')}: {cmd('ablate', 'off')} puts it back")
        return (f"a position reads tokens after it: in training it sees the token it must predict, so its loss "
                f"falls for the wrong reason, and generation, which has no future to read, goes wrong. {fix}")
    if name == "gradient":
        return ("backprop's gradient is not the loss's slope: a part's backward pass is wrong (a custom autograd "
                "function, a detached tensor, an in-place change). Training follows a wrong direction")
    if name == "blind":
        gap = check.blind_loss - check.real_loss
        zero = check.zero_token.encode("unicode_escape").decode("ascii")  # token id 0, which may be the digit 0 or not
        ended = (f"the model trained on its inputs ended {abs(gap):.3f} nats {'under' if gap >= 0 else 'above'} one "
                 f"that read every input '{zero}' (id 0) (under {result.blind_margin:g} fails)")
        # where the cause is known, "train longer" is no advice: no run reads an input its logits cannot see, and a
        # run that did not move will not in three times the steps
        if not check.reads_input:
            return (f"{ended}: its logits read no input at all (every gradient of them on the stream is exactly 0), "
                    f"so no run of any length can learn from it. {reads_nothing_cause(result)}")
        # from ln V, where a fresh model starts (core.checks.blind_check): the first training loss is of another
        # batch than the val losses, and differs from them by more than a run at lr=1e-9 moves
        uniform = math.log(result.vocab_size)
        if check.rose:  # lr=30: 32,422 nats, once said "did not move" with the rate "too low"
            blind = (f"the blind run's {check.blind_loss:.4g} too" if check.blind_loss - uniform > result.blind_margin
                     else f"the blind run ended at {check.blind_loss:.4g}")
            return (f"{ended}, and its loss grew: it ended at {check.real_loss:.4g}, above ln V = {uniform:.3f} where "
                    f"a fresh model starts ({blind}), so training made the model worse. {too_high(result)}"
                    f"{no_residual(result)}")
        if check.still:
            return (f"{ended}, and neither run moved: both ended near ln V = {uniform:.3f}, where a fresh model "
                    f"starts, far above the unigram counter's {check.unigram_loss:.3f}, which counting alone reaches. "
                    f"The rate is too low for {count(check.steps, 'step')} to move the weights ({cmd('set', 'lr')} "
                    f"shows it, {cmd('lrfind')} finds one that trains), or the run is too short to move at all "
                    f"({cmd('checks', 'blind', steps=check.steps * 10)}){no_residual(result)}")
        return (f"{ended}: in {count(check.steps, 'step')} it learned little that needs its input. Train longer "
                f"({cmd('checks', 'blind', steps=check.steps * 3)}), or look at the rate ({cmd('set', 'lr')})"
                f"{no_residual(result)}")
    if name == "overfit":
        first = (", and though it writes the first row's answer again, not every row's (each row's, or the loss, "
                 "passes)" if check.recitable and check.recited == check.recitable else "")
        start = check.curve[0] if check.curve else math.nan
        # a loss that grew, not one that stood still: the signed drop of lr=30's run (4.604 → 17,450) was under
        # STILL, and it was told the rate was too low
        if start > 0 and (check.final_loss - start) / start > STILL:
            return (f"the model did not learn {count(check.rows, 'row')} by heart in {count(check.steps, 'step')}: "
                    f"its loss grew ({start:.4g} → {check.final_loss:.4g}), so training made it worse and more steps "
                    f"will not help. {too_high(result)}{no_residual(result)}")
        if start > 0 and (start - check.final_loss) / start < STILL:  # lr=1e-7: three times the steps, forever
            return (f"the model did not learn {count(check.rows, 'row')} by heart in {count(check.steps, 'step')}: "
                    f"its loss hardly moved ({start:.4g} → {check.final_loss:.4g}), so more steps will not help; "
                    f"look at the rate first ({cmd('set', 'lr')} shows it, {cmd('lrfind')} finds one that trains), "
                    f"then at what lies between the data and the loss{no_residual(result)}{with_dropout(result)}")
        return (f"the model did not learn {count(check.rows, 'row')} by heart in {count(check.steps, 'step')} "
                f"(loss {check.final_loss:.3g}, under {check.target:.2f} passes{first}): try more steps "
                f"({cmd('checks', 'overfit', steps=check.steps * 3)}); if it still cannot, the rate or the model's "
                f"size is off, or something between the data and the loss is wrong{no_residual(result)}"
                f"{with_dropout(result)}")
    return ""


# overfit: a loss that fell by less than this share of where it began has not moved: a rate too low (1e-7), not too
# few steps, which "try more steps" offered again and again
STILL = 0.01


def too_high(result: ChecksResult) -> str:
    """What a training check whose loss grew says of the rate: the one it ran at, too high for this model."""
    lower = cmd("set", lr=float(f"{result.lr / 10:.3g}")) if result.lr > 0 else cmd("set", "lr")
    return (f"The rate is too high for this model: the fresh models trained at lr={result.lr:g}; lower it ({lower}), "
            f"or {cmd('lrfind')} finds one that trains")


def reads_nothing_cause(result: ChecksResult) -> str:
    """Why logits read no input, and the fix: a width of 1, else (mostly) a final norm zeroed."""
    if result.d_model == 1:
        return f"The width is 1 (d_model=1): {width_one_reads_nothing()}"
    return ("The usual cause is a norm whose gain (and bias) are 0, the final one above all (weights loaded or changed "
            "by hand), which hands the head the same vector whatever comes in; start from weights that were not "
            "changed")


def batch_rows(check, unit: str, console: Console) -> None:
    """The first row of the batch as the model gets it: x above, y under it, token by token (· not counted)."""
    say(console, "the batch's first row, as the model reads it (x) and is asked to predict (y), its start:", "bold")
    pairs = [(visible(a), visible(b) if b is not None else "·") for a, b in zip(check.x, check.y)]
    gap = "" if unit == "character" else " "  # characters line up one cell each; tokens are set apart
    xs = Text("x ", style="dim")
    ys = Text("y ", style="dim")
    room = console.width - 2
    for k, (a, b) in enumerate(pairs):
        width = max(cell_len(a), cell_len(b))
        room -= width + len(gap)
        if room < 0:  # as many as fit the console: a wrapped line would no longer stand under its pair
            break
        shifted = k + 1 < len(check.x) and check.y[k] is not None and check.y[k] == check.x[k + 1]
        # padded by cells, not characters: "你".ljust(2) is 3 columns, and the "a" under it 2
        xs.append(a + " " * (width - cell_len(a)) + gap)
        ys.append(b + " " * (width - cell_len(b)) + gap,
                  style="" if shifted or check.y[k] is None or k + 1 == len(check.x) else "bold red")
    console.print(xs, crop=False, no_wrap=True, overflow="ignore")
    console.print(ys, crop=False, no_wrap=True, overflow="ignore")
    note(console, "teacher forcing: each position is asked for the token that comes next, all positions of the row "
                  "at once; y is x moved one to the left")


MIN_TEXT = 20  # the fewest columns a check's text is wrapped in beside its status and name


@render.register(ChecksResult)
def render_checks(result: ChecksResult, console: Console) -> None:
    now = [name for name in result.asked if name in ("rows", "causal", "gradient")
           or name == "init" and result.init is not None and result.init.model_loss is not None]  # scored it too
    fresh = [name for name in result.asked if name in ("init", "blind", "overfit")]
    read = ["a training batch (batch)"] if "batch" in result.asked else []
    read += [f"the model at step {result.model_step:,} ({', '.join(now)})"] if now else []
    # the dtype the fresh models trained in, once: the model's own steps may have run in another (a bfloat16
    # checkpoint checked under dtype=float32), and blind's "real run" is theirs
    training = " and ".join(name for name in result.asked if name in ("blind", "overfit"))
    trained = "" if result.trained_dtype is None else f"; {training} trained in {result.trained_dtype}" + (
        f", where the model's own steps ran in {result.model_dtype}" if result.model_dtype else "")
    read += [f"fresh models of its settings ({', '.join(fresh)}{trained})"] if fresh else []
    listed = ", ".join(read[:-1]) + " and " + read[-1] if len(read) > 1 else read[0]
    say(console, f"checks before trusting a training run, on {result.data}: {listed}", "bold")
    skipped = {s.name: s.why for s in result.skipped}
    width = max(len(name) for name in result.asked)
    for name in result.asked:
        check = getattr(result, name)
        if name in skipped:
            status, style, text = "skip", "yellow", f"{ASKS[name]}: not run: {skipped[name]}"
        elif name in result.diverged:
            status, style, text = "FAIL", "bold red", f"{ASKS[name]}: {result.diverged[name]}"
        elif check is None:
            stopped = name == result.stopped
            status, style = ("stop" if stopped else "-"), "yellow"
            text = f"{ASKS[name]}: stopped" if stopped else f"{ASKS[name]}: not run (stopped before)"
        elif name == "blind" and check.passed is None:
            status, style = "n/a", "yellow"
            # not ASKS' claim, which n/a does not make: "the model learns from its input" beside equal losses
            text = (f"nothing here can be learned from the input: {measured(name, check, result)}; these tokens are "
                    f"random, so no input tells the next one, and both should end at ln V")
        else:
            ok = name in result.passed
            status, style = ("pass", "green") if ok else ("FAIL", "bold red")
            text = f"{ASKS[name]}: {measured(name, check, result)}"
        line = Text(f"{status:<4} ", style=style)
        line.append(f"{name:<{width}}", style="bold")
        line.append(f"  {text}")
        # wrapped lines under the text, past the status and the name, where that leaves the text room; at 20 columns
        # it left 5, and each word went on a line of its own past the edge
        hang = 5 + width + 2
        say(console, line, hang=hang if console.width - hang >= MIN_TEXT else 2)
    if result.batch is not None:
        batch_rows(result.batch, result.unit, console)
    if result.causal is not None:
        causal = result.causal
        say(console, f"which positions each position's logits read, through every block: row t, column s is "
                     f"|dz_t/dh_s| against row t's largest, the first {count(len(causal.map), result.unit)} of the "
                     f"held-out window it reads (labelled below"  # (told apart from the batch's rows, where shown)
                     f"{'; not the batch row above' if result.batch is not None else ''})", "bold")
        as_text = unscaled(console)
        console.print(heatmap(causal.tokens, causal.map, 1.0, 1, as_text, future=bool(causal.later_read)))
        if (heads := heads_note(causal.tokens)) is not None:  # position digits over a BPE's pieces, as :attn says
            note(console, heads)
        console.print(legend(1.0, as_text, "share of the row's largest", console.width))
        # a window of 1 has no diagonal to be blank above; a map blank everywhere shows no mask at work
        if causal.later_pairs and not causal.reads_nothing:
            note(console, "blank above the diagonal: the causal mask at work through every block, position t reads "
                          "itself and the positions before it" if causal.passed
                 else "above the diagonal: position t reading a later position s")
        if causal.passed and not math.isnan(causal.reach_half):  # reading the future, or nothing: no "back" to measure
            note(console, f"how far back it reads: half of what position t's logits depend on lies on the "
                          f"{causal.reach_half:.1f} positions nearest it (itself included), nine tenths on the nearest "
                          f"{causal.reach_most:.1f}, averaged over the window's second half")
    for name in result.failed:
        if name not in result.diverged:  # a diverged run's line says what went wrong already
            say(console, f"{name}: {failure(name, getattr(result, name), result)}", "red")
    for line in explanations(result):
        note(console, line)
    if any(name in result.asked for name in ("rows", "causal", "gradient")):  # the fresh models have no ablation
        ablation_note(console, result.ablations)
    run = len(result.passed) + len(result.failed)
    total = sum(result.seconds.values())
    if result.stopped:
        outcome = (f", {len(result.failed)} failed: {', '.join(result.failed)}" if result.failed
                   else ", each passed" if run else "")
        say(console, f"stopped during {result.stopped}: {count(run, 'check')} ran before it{outcome}", "yellow")
    elif result.failed:
        failed = "the check failed" if run == 1 else f"{len(result.failed)} of {run} checks failed"
        say(console, f"{failed}: {', '.join(result.failed)} ({total:.1f} s)",
            "bold red")
    elif run:
        idle = [name for name in result.asked if getattr(result, name) is not None and name not in result.passed]
        aside = f"; {', '.join(idle)} had nothing to show here" if idle else ""
        passed = "the check passed" if run == 1 else f"all {run} checks passed"
        say(console, f"{passed}{aside} ({total:.1f} s)", "bold green")


def explanations(result: ChecksResult) -> list[str]:
    """What the figures of the checks that passed mean (a failed one has its own line)."""
    lines = []
    init, blind = result.init, result.blind
    if init is not None and init.passed:
        # the std measured, not a "0.02" said of a loaded model whose weights were drawn at 1
        lines.append(f"init: a fresh model's initial weights are small (std {init.fresh_weight_std:.2g}), so the "
                     f"logits start near 0 (std {init.logit_std:.2f}) and every token gets about "
                     f"1/{result.vocab_size:,}: the loss of a uniform guess, ln V. A loss that starts far above it "
                     f"is a model sure of wrong answers" +
                     ("; the tied head still favours the token read (the norm's output points along its "
                      "embedding), which starts it under ln V where the text repeats that token"
                      if init.expected < 0.99 * init.uniform else "") +
                     # GPT-2's scaled residual projections, which a reader of nanoGPT looks for and found said nowhere
                     ". Every matrix starts at that one std, where GPT-2 and nanoGPT start the projections that write "
                     "to the stream (their c_proj: out_proj and fc_out here) at 0.02 / sqrt(2 n_layer), 0.0071 at 4 "
                     "layers: measured here, that trained no better (docs/speed.md)")
    if blind is not None and blind.passed:
        where = ("the model still knows each position (its position table), so all it can learn is how often each "
                 "token comes at each position" if result.position_table else
                 "nothing tells one position from another (every value attention averages is the same), so all it "
                 "can learn is how often each token comes")
        if blind.unigram_scored:  # a task: the counter counts its answers alone, as the loss scores them
            yardstick = ("about the unigram counter of the targets the loss scores (a task's answers; "
                         f"{cmd('ngram')} counts whole rows, questions included)" +
                         (", less where the answers sit at fixed places" if result.position_table else ""))
        else:
            # without positions it cannot find the answers' places: a task's blind loss is lower only because the
            # loss counts the answers alone, whose tokens are fewer kinds than the whole text's (sort's digits)
            task = ("less on a task whose answers sit at fixed places" if result.position_table else
                    "less on a task, whose loss counts only the answers' tokens")
            yardstick = f"about the unigram counter's loss ({cmd('ngram')}) on text, {task}"
        lines.append(f"blind: with every input the same, {where}: {yardstick}. The gap to the real run is what it "
                     f"reads from its input")
    if result.gradient is not None and result.gradient.relative <= result.gradient_tolerance:
        lines.append(f"gradient: backprop's code run in float64 against a measurement in float64, where rounding "
                     f"leaves a wrong backward alone to tell; the same check on one text, part by part: {cmd('grad')}")
    if result.gradient is not None and result.gradient_training is not None:
        from .backprop import training_part

        # after the float64 line above, "that checks float32's backprop" read as said of float64's
        lead = f"the check above also ran float32's backprop, which is not {named('train')}'s"
        lines.append(f"gradient: {training_part(result.gradient_training, lead)}")
    return lines
