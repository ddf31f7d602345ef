"""`:ngram`: the counting models a loss is measured against.

A loss of 1.3 nats means little alone. Counters give it a scale: the n-gram model of each order
(core.ngram) predicts the next token from the n - 1 before it by how often it followed them in the
training text, is scored on the validation text as the model is, and writes a line of its own. The
model's loss now, measured on the same validation batches `:train` reports, sits among them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from rich.console import Console
from rich.text import Text

from ..core.errors import UserError
from ..core.words import count, quoted_chars
from ..registry import Param
from ..render import fmt
from ..render.renderers import render
from ..render.tables import fitting_table
from ..render.words import model_text, note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again
from .base import ablation_note, command, data_named, sample_prompt, switched_off, training_length

FAMILY = "training"  # listed under :train's heading: what a training loss is measured against

# The longest counter by default: one past the best on pydoc and tiny Shakespeare (n = 5, val 1.320 and 1.669), so
# that the table shows a longer context starting to cost.
NGRAM_DEFAULT = 6
NGRAM_LONGEST = 12  # past this a counter has seen almost no context it meets (and each order costs a pass);
# :score's counter= takes the same limit. n= and counter= are held to it by check_counter, which knows the data's
# vocabulary, whose keys may allow fewer: read alone, "at most 12" sent a user of 103 characters to counter=12,
# refused in turn ("the longest is 9")
SAMPLE_TOKENS = 72  # what each counter writes after the prompt


def default_counter(vocab_size: int) -> int:
    """The counter :ngram and :context use when none is given: NGRAM_DEFAULT, or the longest whose windows' keys fit
    an int64 (a vocabulary of 5,000 tokens: 5; GPT-2's 50,257: 4)."""
    from ..core.ngram import longest_order

    return min(NGRAM_DEFAULT, longest_order(vocab_size))


def check_counter(n: int, vocab_size: int, option: str = "counter") -> None:
    """A counter longer than NGRAM_LONGEST, or than the vocabulary's keys allow, is refused with the longest this data
    takes (:ngram, :context and :score alike); :context's scoring would else shorten it without a word."""
    from ..core.ngram import longest_order

    longest = longest_order(vocab_size)
    if n > min(longest, NGRAM_LONGEST):
        why = (f"a vocabulary of {vocab_size:,} keeps a window's key in an int64 up to {longest} tokens"
               if longest < NGRAM_LONGEST else f"past {NGRAM_LONGEST} a counter has seen almost no context it meets")
        raise UserError(f"{option}={n:,} is too large: at most {min(longest, NGRAM_LONGEST)} here ({why})")


@dataclass
class NgramRow:
    n: int  # 0: the uniform guess; else the next token from the n - 1 before it
    contexts: int  # distinct contexts of n - 1 tokens counted in training (0 for the uniform guess)
    # the share of scored validation positions with a whole context whose context was counted (null: none, and for
    # the uniform guess, which reads no context)
    seen: float
    train_loss: float  # nats per token on the text it counted
    val_loss: float  # nats per token on the validation text
    bits_per_char: float | None  # val_loss in bits per character of the validation text (a corpus only)
    sample: str | None  # what it wrote after the prompt (a corpus only)
    # the first evaluation of this data at which the model's val loss was below this counter's: its step (None: not
    # yet, or no evaluation on this data)
    model_below_at: int | None = None


@dataclass
class NgramResult:
    # the session's data as results name it: a task with its size (sort:4), random tokens by spec, else its name
    data: str
    unit: str  # what one token is: character, token
    vocab_size: int  # V: tokens in the vocabulary (the uniform guess scores ln V)
    train_tokens: int  # tokens counted
    train_total: int  # tokens in the train split: more than counted for a text past core.ngram.COUNTED
    val_positions: int  # next-token positions scored
    val_total: int  # next-token positions in the val split: more than scored for a text past core.ngram.VAL_SCORED
    generated: bool  # the data is made on the fly (a task, random tokens): counted on batches of it, from seed 0
    rows: list[NgramRow]  # one per counter: n = 0 (the uniform guess), then 1 to the n asked
    prompt: str | None  # what the samples follow
    model_step: int  # the model's training step
    model_val: float  # the model's val loss now, on the batches :train evaluates
    # model_val in bits per character of the validation text (a corpus only; None otherwise)
    model_bits_per_char: float | None
    model_reads: int  # how far back the model can read: max_seq_len, or a task's shorter row
    model_causal: bool  # False: the model reads the token it predicts, so its loss is no language model's
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate: model_val is that model's
    # random tokens: no model and no counter gets under the uniform guess, however long it trains
    nothing_to_learn: bool = field(default=False, metadata={"view_only": True})
    # an evaluation on this data is in the history: without one, "model below it" has nothing to read (a run stopped
    # before its first said "not yet" beside counters the model is below now)
    evaluated: bool = field(default=True, metadata={"view_only": True})
    # symbols the validation data holds and the training data never does (sort:1's 1): every counter's val loss
    # measures them, whatever the context
    held_out_only: str = field(default="", metadata={"view_only": True})
    # next-token positions of the counted text the train loss is read on: fewer than it holds past core.ngram's
    # TRAIN_SCORED (pydoc's 418,543 counted, its train loss read on the first 262,144), said under the table
    train_scored: int | None = None


# interruptible: Ctrl-C stops a long count (a large file takes seconds) at once; nothing is kept until it is done
@command("ngram", "Counting models: the next token from the n - 1 before it, by counts in the training text; "
                  "their loss and text beside the model's.",
         params=[
    Param("n", int, help=f"the longest counter: the next token from the n - 1 before it (default {NGRAM_DEFAULT}, or "
                         "the longest the vocabulary allows: GPT-2's 50,257 tokens, 4)",
          low=1),
    Param("sample", bool, default=True, help="each counter writes a line after the views' sample prompt (a corpus "
                                             "only)"),
], interruptible=True, json_version=3, guide="inside-views.md#what-a-loss-is-worth-counting-models-ngram")  # fmt: skip
def cmd_ngram(session: Session, args: dict, reporter: Reporter) -> NgramResult:
    from ..core.bpe import decode_after
    from ..core.data import bits_per_char, val_tokens_per_char
    from ..core.ngram import count_and_score

    data = session.data
    tokenizer = data.tokenizer
    # by default as long as the vocabulary's keys allow (GPT-2's 50,257 tokens: 4); a longer n given is refused
    n = default_counter(tokenizer.vocab_size) if args["n"] is None else args["n"]
    check_counter(n, tokenizer.vocab_size, "n")
    corpus = getattr(data, "splits", None) is not None
    prompt = sample_prompt(data) if corpus and args["sample"] else None
    model = session.model
    # first: data too short to evaluate is refused before anything is kept; a bar, as a large model takes a minute
    model_val, _ = session.trainer.evaluate(on_batch=lambda done, total: reporter.on_progress("ngram", done, total))
    start = tokenizer.encode(prompt) if prompt else None
    counting = count_and_score(data, n, session.model_config.max_seq_len, prompt=start,
                               sample_len=SAMPLE_TOKENS, seed=session.gen_config.gen_seed or 0,
                               on_progress=lambda done, total: reporter.on_progress("counting", done, total))
    per_char = val_tokens_per_char(data)
    # on this data, and of the model as it computes now (not a no-mask loss before causal=on: measured_since_step)
    evals = [(row["step"], row["val_loss"]) for row in session.history_on_data
             if row.get("val_loss") is not None and row["step"] > session.measured_since_step]
    rows = [NgramRow(c.n, c.contexts, c.seen, c.train_loss, c.val_loss, bits_per_char(c.val_loss, per_char),
                     decode_after(tokenizer, start, c.sample) if c.sample is not None else None,
                     # below as both are written (3 decimals), as the verdict reads it: an evaluation 0.00004 under
                     # a counter is not "below" it in one place and "not yet below" in the other
                     next((step for step, loss in evals if round(loss, 3) < round(c.val_loss, 3)), None))
            for c in counting.counters]
    session.keep_counters(data, [(row.n, row.val_loss) for row in rows if row.n >= 1])  # for the loss charts
    return NgramResult(data_named(session), tokenizer.unit, tokenizer.vocab_size, counting.train_tokens, counting.train_total,
                       counting.val_positions, counting.val_total, counting.generated, rows, prompt,
                       session.trainer.step, model_val, bits_per_char(model_val, per_char),
                       # a task's row is shorter than the window (sort:4: 8 tokens), and no prediction reads past it
                       training_length(session) or session.model_config.max_seq_len, getattr(model, "causal", True),
                       switched_off(session),
                       getattr(data, "nothing_to_learn", False), evaluated=bool(evals),
                       held_out_only=data.held_out_only() if hasattr(data, "held_out_only") else "",
                       train_scored=counting.train_scored)


def reads(n: int, unit: str) -> str:
    """What the counter of order n reads, in words."""
    if n == 0:
        return "nothing (uniform)"
    if n == 1:
        return "nothing (counts)"
    return count(n - 1, unit)


@render.register(NgramResult)
def render_ngram(result: NgramResult, console: Console) -> None:
    unit = result.unit
    counted = count(result.train_tokens, unit)
    source = (f"{counted} of generated batches (seed 0)" if result.generated
              else f"the {counted} of the train split" if result.train_tokens == result.train_total
              else f"the first {counted} of the train split's {result.train_total:,}")
    scored = (f"the {count(result.val_positions, 'position')} of val batches the model's loss counts"
              if result.generated else f"the {count(result.val_positions, 'position')} of the val split"
              if result.val_positions == result.val_total
              else f"the first {count(result.val_positions, 'position')} of the val split's {result.val_total:,}")
    say(console, f"counting models on {result.data}: each predicts the next {unit} from the n - 1 before it by how "
                 f"often it followed them in {source}; scored on {scored}", "bold")
    names = ["n", "reads", "contexts", "val seen", "train loss", "val loss", "bits/char", "model below it"]
    rows = []
    for row in result.rows:
        rows.append([str(row.n), reads(row.n, unit), f"{row.contexts:,}" if row.n else "-",
                     fmt.share(row.seen) if row.n and not math.isnan(row.seen) else "-",
                     f"{row.train_loss:.3f}", f"{row.val_loss:.3f}",
                     f"{row.bits_per_char:.2f}" if row.bits_per_char is not None else "-",
                     f"step {row.model_below_at:,}" if row.model_below_at is not None else "not yet"])
    model_bits = f"{result.model_bits_per_char:.2f}" if result.model_bits_per_char is not None else "-"
    rows.append(["model", f"up to {count(result.model_reads, unit)}", "-", "-", "-",
                 f"{result.model_val:.3f}", model_bits, ""])
    dropped = [k for k, empty in ((6, all(row.bits_per_char is None for row in result.rows)),
                                  (7, result.model_step == 0 or not result.evaluated)) if empty]
    names = [name for k, name in enumerate(names) if k not in dropped]
    rows = [[cell for k, cell in enumerate(r) if k not in dropped] for r in rows]
    table = fitting_table(console, names, rows, left=("n", "reads"),
                          optional=("bits/char", "contexts", "val seen", "train loss", "model below it"))
    console.print(table)
    shown = {" ".join(str(column.header).split()) for column in table.columns}
    if "train loss" in shown and result.train_scored is not None and not result.generated \
            and result.train_scored < result.train_tokens - 1:
        # a counter's train loss under its own counts cannot be read as on all it counted (a unigram's 3.248 on
        # pydoc's first 262,144 positions, 3.253 on all 418,543); said of no data by name: pydoc's example was
        # printed under Shakespeare's table too
        note(console, f"train loss: on the first {count(result.train_scored, 'position')} of the "
                      f"{fmt.whole(result.train_tokens)} counted, a sample: over all of them it reads a little "
                      "otherwise, more where the text's later part differs")
    # where the column is shown (a narrow terminal drops it): the note explains it
    if "model below it" in shown and any(row.model_below_at is not None for row in result.rows):
        note(console, "model below it: the first evaluation on this data at which the model's val loss was under the "
                      "counter's (the order it learns in: the next character's frequencies first, longer contexts "
                      "later)" if unit == "character" else "model below it: the first evaluation on this data at "
                      "which the model's val loss was under the counter's")
    for line in verdict(result):
        say(console, line)
    for line in explanation(result):
        note(console, line)
    ablation_note(console, result.ablations)
    samples = [row for row in result.rows if row.sample is not None]
    if samples:
        say(console, f"what each counter writes after {quoted_chars(result.prompt)} (sampled from its counts):", "bold")
        for row in samples:
            line = Text(f"n={row.n}  ", style="dim")
            # a line end as ↵ (dim), as :gen show=probs marks it: as a space, the counters seemed never to write one
            for part, end in zip(row.sample.split("\n"), [True] * row.sample.count("\n") + [False]):
                line.append_text(model_text(part, console))
                if end:
                    line.append("↵", style="dim")
            say(console, line)
        note(console, f"the model's own: {cmd('gen')}")


def best(result: NgramResult) -> NgramRow:
    """The counter with the lowest val loss as the table writes it (3 decimals), the shortest of those that tie: n = 4,
    5 and 6 all at 0.000 named n = 6 the best, and "the longest counter asked is still the best" sent to n = 8."""
    return min(result.rows, key=lambda row: (round(row.val_loss, 3), row.n))


def verdict(result: NgramResult) -> list[str]:
    """Where the model's loss sits among the counters'."""
    top = best(result)
    loss = result.model_val
    if not result.model_causal:
        # causal is on where :ablate mask took the mask away: the setting would change nothing there
        why, back = (("the mask is switched off by " + cmd("ablate", "mask"), cmd("ablate", "off"))
                     if "the causal mask" in result.ablations else ("causal=off", cmd("set", causal="on")))
        return [f"the model reads the token it predicts ({why}): its {loss:.3f} is no language model's loss, "
                f"and no counter is a fair match ({back} puts the mask back)"]
    if result.model_step == 0:
        return [f"the model has not trained: it scores {loss:.3f}, about the uniform guess's "
                f"{result.rows[0].val_loss:.3f}; "
                f"{look_again('ngram', AUTOSAVE_NAME, again=cmd('ngram') + ' again')}"]
    # below a counter as the losses are written (3 decimals): a model at 1.5229 was "below every counter: 0.000 nats
    # under the best" of a counter at 1.5231, both written 1.523
    beaten = [row for row in result.rows if round(loss, 3) < round(row.val_loss, 3)]
    if result.nothing_to_learn:
        # not "train on": the uniform guess is the best any reader of random tokens can do
        return [f"at step {result.model_step:,} the model ({loss:.3f}) is about the uniform guess "
                f"({result.rows[0].val_loss:.3f}), and no training gets it under: random tokens hold nothing to "
                f"learn, so ln V is the best any model or counter scores; a counter above it has counted noise"]
    if top.n == 0 and abs(loss - top.val_loss) <= AT_UNIFORM * top.val_loss:
        # text with no pattern (uniform over 17 symbols) whose floor is ln V: "not yet below n = 0 (2.833): :train
        # trains further" of a model at 2.837 sent the user to train for what no training gives
        return [f"at step {result.model_step:,} the model ({loss:.3f}) is at the uniform guess (n = 0, "
                f"{top.val_loss:.3f}), which no counter beats either: the {result.unit}s before tell nothing of the "
                f"next here, and on text with no pattern to learn the uniform guess is the best any model can do"]
    # the best counter reads no context though longer ones were counted: counts of the context tell nothing here
    if len(beaten) == len(result.rows) and top.n <= 1 and max(row.n for row in result.rows) >= 2:
        # (repeated random tokens: "no table of counts over the 0 characters before" read as a counter found)
        return [f"at step {result.model_step:,} the model ({loss:.3f}) is below every counter: "
                f"{round(top.val_loss, 3) - round(loss, 3):.3f} nats a {result.unit} under the best, which reads no "
                f"context (n = {top.n}): no count of the {result.unit}s before helps on this data, and the model has "
                "learned from them what counting cannot"]
    if len(beaten) == len(result.rows):
        return [f"at step {result.model_step:,} the model ({loss:.3f}) is below every counter: "
                f"{round(top.val_loss, 3) - round(loss, 3):.3f} nats a {result.unit} under the best, n = {top.n}: "
                + (f"it has learned what no table of counts over the {count(top.n - 1, result.unit)} before holds"
                   if top.n >= 2 else  # `:ngram n=1`: "over the 0 characters before"
                   f"it has learned more than how often each {result.unit} comes")]
    if not beaten:
        return [f"at step {result.model_step:,} the model ({loss:.3f}) is not yet below the uniform guess"]
    passed = max(beaten, key=lambda row: row.n)
    ahead = min((row for row in result.rows if round(row.val_loss, 3) <= round(loss, 3)), key=lambda row: row.n)
    best_too = "" if ahead is top else f"; the best is n = {top.n} ({top.val_loss:.3f})"
    return [f"at step {result.model_step:,} the model ({loss:.3f}) is below the counter of n = {passed.n} "
            f"({passed.val_loss:.3f}), not yet below n = {ahead.n} ({ahead.val_loss:.3f}){best_too}: "
            f"{cmd('train')} trains further"]


def explanation(result: NgramResult) -> list[str]:
    """What the table's own trend says: the longer the context, the more a counter memorises."""
    if result.held_out_only:  # sort:1: 21.840 at every n >= 2, and "no counter beats the uniform guess by much" beside
        # a 3-gram whose train loss is 0
        shown = ", ".join(map(repr, result.held_out_only))
        return [f"the validation data holds {shown}, which the training data never holds: a counter gives what it "
                f"never counted almost no probability, so the val loss of every counter that counts (n >= 1) "
                f"measures that, and its trend across n says nothing of the context ({cmd('data')} says more)"]
    lines = []
    counted = [row for row in result.rows if row.n >= 1 and row.contexts]  # a context longer than a task's row: none
    top = best(result)
    longest = counted[-1] if counted else None
    # The memorising a table does: val's loss rising past the best while the counted text's falls, as the table
    # shows them (on random tokens every train loss reads the uniform guess's: nothing falls, nothing is learned).
    falls = longest is not None and f"{longest.train_loss:.3f}" != f"{top.train_loss:.3f}" \
        and longest.train_loss < top.train_loss
    if longest is not None and longest.n > top.n and longest.val_loss > top.val_loss and falls:
        unseen = 1 - longest.seen
        each = result.train_tokens / max(1, longest.contexts)  # times a context was counted, on average
        if unseen >= 0.05:
            why = f"{unseen:.0%} of val's contexts of {count(longest.n - 1, result.unit)} were never counted"
        elif each < WELL_COUNTED:
            why = (f"each long context was counted a few times (about {each:.0f} on average), and its counts follow "
                   "the accidents of the counted text")
        else:  # random tokens: what follows does not depend on the context, which then adds its counts' noise only
            why = (f"each context was counted about {each:,.0f} times, yet its counts still follow the accidents of "
                   "the counted text, and a context that does not change what follows adds nothing else")
        # n = 0 and 1 read no context at all: past them, any context costs (random tokens), not a longer one
        past = f"past n = {top.n} a longer context" if top.n >= 2 else "any context read"
        lines.append(f"{past} costs on val ({longest.val_loss:.3f} at n = {longest.n}) "
                     f"while the counted text's loss keeps falling ({longest.train_loss:.3f}): {why}. A table "
                     f"memorises; a model that shares what it learned across contexts generalises")
    elif longest is not None and longest.n == top.n and longest.n < NGRAM_LONGEST:
        lines.append(f"the longest counter asked is still the best: {cmd('ngram', n=longest.n + 2)} tries longer "
                     f"contexts")
    if math.isfinite(top.val_loss) and top.val_loss > 0.9 * result.rows[0].val_loss:
        # a counter well counted (WELL_COUNTED times a context) that predicts the counted text: what follows is a
        # matter of the tokens before, there (sort:2's 3-gram, 1.54 against 2.49), and val's differ
        # one whose contexts val holds (seen): a longer one's are none of val's, and "the same few tokens" were not
        knows = [row for row in counted if row.n >= 2 and result.train_tokens >= WELL_COUNTED * row.contexts
                 and row.train_loss < 0.8 * result.rows[0].train_loss and row.seen >= SEEN_MOSTLY]
        task = " (a task's held-out questions are none of its training ones)" if result.generated else ""
        lines.append(f"no counter beats the uniform guess by much here, though on the counted text the counter of "
                     f"n = {knows[-1].n} does ({knows[-1].train_loss:.3f}): what follows the same few tokens in the "
                     f"validation text is not what followed them in the counted one{task}" if knows else
                     "no counter beats the uniform guess by much here: what follows is not a matter of the few "
                     "tokens just before it")
    return lines


# How near the uniform guess (n = 0, the best counter) a model's val loss is to be at it: its loss is a mean over
# eval_batches windows, the counters' over the whole split, so the two differ on a text of no pattern (2.837 against
# ln 17 = 2.833 after 50 steps: 0.14%); one that learned what the counters cannot read is further under it than 1%
AT_UNIFORM = 0.01
WELL_COUNTED = 50  # times a context was counted on average, past which its counts are no accident of the text
SEEN_MOSTLY = 0.9  # the share of val's contexts a counter counted, for its counts to speak of val's text
