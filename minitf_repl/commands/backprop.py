"""`:grad`: backpropagation on one text. Teacher forcing's loss on the text, then the chain rule run
backwards: the logits' gradient (softmax minus one-hot, checked against autograd's), the gradient on
its way down the residual stream sublayer by sublayer (what the skip path hands down untouched, what
goes back through each sublayer), what each part's weights receive, and backprop's answer checked
against the loss's slope measured by nudging every weight.

`:muon`: what the default optimizer then does with one matrix's gradient: the momentum, Newton-Schulz
step by step as a polynomial on the singular values, and the update's size.

The numbers come from core.backprop.backprop, which asks autograd and never writes a parameter's
.grad, and core.muon_step.muon_step, which writes nothing either; these commands pick the text (as
`:score` does) or the matrix, check the options and render the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from ..core.bpe import shown_pieces
from ..core.errors import UserError
from ..core.variants import norm_kind
from ..core.words import count, quoted_end
from ..registry import Param
from ..render import fmt
from ..render.chart import spark
from ..render.renderers import render
from ..render.tables import fitting_table
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import cmd, look_again, named, restore
from .base import BLOCK, ablation_note, check_layer, command, known_text, switched_off, view_prompt
from .worked import eps_share, position_table, rounding, spark_scale, stream_update

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.backprop import GradientCheck, ParamGradient, StreamGradient, TrainingPrecision
    from ..core.muon_step import MuonStep

FAMILY = "learning: backprop and the optimizer"  # the heading :help lists this module's commands under


# How each optimizer turns a gradient into a step: why the step column does not follow |dL/dW|.
OPTIMIZER_STEPS = {
    "adamw": "AdamW divides each weight's gradient by its running size, so a step's size follows the rate, not "
             "the gradient's size",
    # Muon divides by nothing: its step's size is the orthogonalised matrix's and its shape's scale (said "each
    # dividing by the gradient's running size" of both, true of AdamW alone)
    "muon": "Muon orthogonalises each hidden matrix's momentum (all its singular values near 1) and scales it by "
            "0.2 sqrt(max(A, B)) for an A x B matrix, and AdamW steps the rest, dividing each weight's "
            "gradient by its running size: either way a step's size follows the rate, not the gradient's",
}


# |dL/dh_L| at most this share of |dL/dz| is none: the rounding of a backward that passes nothing back
NOTHING_REACHES = 1e-5


@dataclass
class GradResult:
    text: str  # the text scored (its last max_seq_len + 1 tokens)
    tokens: list[str]  # each of its tokens as the model reads it
    counted: list[bool]  # which next-token predictions the loss counts (a task's answer's only)
    loss: float  # L: teacher forcing's cross-entropy on the text
    placement: str  # "pre" (h + f(LN(h))) or "post" (LN(h + f(h)))
    norm_label: str  # "LN" or "RMSNorm"
    norm_scale: str  # what the norms divide by: "std" (LN), "rms" (RMSNorm)
    residual: bool  # the residual connections are there (off: each sublayer's output replaces the stream)
    logits: float  # |dL/dz| over the whole text
    softmax_diff: float  # max |autograd's dL/dz - (softmax(z) - onehot(y)) / N|
    top: float  # |dL/dh_L|: the gradient reaching the last block's output
    stream: list[StreamGradient]  # each sublayer from the last block's FFN down: arrives, skip, through, leaves
    embed: float  # |dL/dh_0|: the gradient reaching the input h_0
    position_table: str | None  # what h_0 adds to x: "W_P" (learned), "PE" (sinusoids); None: h_0 = x (rope, none)
    positions: list[float]  # |dL/dh_0[t]| at each input position t
    parts: list[ParamGradient]  # per part of the model: |W| and |dL/dW|
    tensors: list[ParamGradient]  # per parameter tensor
    tied: bool  # the output head is the token embedding W_E
    head: float  # |dL/dW_U| from the head's use (tied: W_E's share as the head)
    embedding: float  # |dL/dW_E| from the input's use (the rows of the tokens read)
    check: GradientCheck | None  # backprop against the measured slope (None: check_skipped says why)
    # why the gradient check did not run (more parameters than core.backprop.CHECK_LIMIT); None: it ran
    check_skipped: str | None = None
    optimizer: str | None = None  # whose one step on this gradient the parts' step is ("adamw", "muon"); None: none
    step_lr: float | None = None  # the rate of that step (the peak lr)
    clip_scale: float = 1.0  # what clipping to grad_clip scaled the gradient by before the step, as :train clips
    # mixture of experts: moe_aux_weight x the load-balancing loss :train adds, whose gradient the step adds to the
    # cross-entropy's (the other columns are the cross-entropy's alone); None: no experts, a weight of 0, no step
    step_aux: float | None = None
    show_all: bool = False  # all=on: every parameter tensor instead of the parts
    dropped: int = 0  # tokens cut from the front of a text longer than max_seq_len + 1
    unit: str = "character"  # what one token is: character, or token (a subword tokenizer)
    untrained: bool = False  # no training here nor weights from elsewhere: the gradients are random weights'
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate while this ran
    # the norms' eps outweighs the stream's spread (as :resid measures it): s is about sqrt(eps) at every position
    eps_rules: bool = field(default=False, metadata={"view_only": True})
    # the norm normalises, as its kind declares (core.variants.NormKind.normalises); norm=none: the identity, so a
    # sublayer's part comes back through f alone and no norm's Jacobian rescales anything
    normalised: bool = field(default=True, metadata={"view_only": True})
    causal: bool = True  # the causal mask is on; off (causal=off, :ablate mask), every position reads the whole text
    dropout: float = 0.0  # the model's dropout, which the gradient here is taken without (eval mode)
    # where :train runs its products in bfloat16 (the dtype setting on this device), that backward pass on the same
    # text against the check's slope; None: training runs in float32, or the check did not run
    training: TrainingPrecision | None = None


def float32_part(check) -> str:
    """A gradient check's float32 g.u beside the float64 one, in words: how far float32's rounding takes it."""
    if not math.isfinite(check.backprop):  # overflowed (lr=1e5's weights): no rounding makes "+nan, nan off"
        return (f"; in float32, the weights' own dtype, g.u is not finite ({check.backprop:g}): the float32 gradient "
                "overflowed, which no rounding does, so these weights cannot train in float32")
    return (f"; in float32, the weights' own dtype, g.u = {check.backprop:+.6g}, {check.relative_float32:.0e} off "
            "(relative; float32 rounds, the more the nearer the loss and its slope are to 0)")


def not_finite(result: GradResult) -> str | None:
    """Where the float32 gradient stops being finite, from the loss down (None: finite everywhere): weights a huge rate
    blew up (lr=1e5) overflow on the way down, and every figure below that point is nan or inf. Found from the
    figures the view already holds, in backprop's order; a part's |dL/dW| last, as a gradient can overflow in a
    weight's own product while the stream's stays finite."""
    finite = math.isfinite
    if not finite(result.loss):
        return "the loss"
    if not finite(result.logits):
        return "the logits"
    if not finite(result.top):
        return f"the output head{' and the final norm' if result.placement == 'pre' and result.normalised else ''}"
    for s in result.stream:
        if not all(map(finite, (s.arrives, s.skip, s.through, s.leaves))):
            return f"blocks.{s.block}.{s.part}"  # the model's own name of the sublayer, as the table's f column
    if not all(map(finite, [result.embed, result.head, result.embedding] + result.positions)):
        return "the input"
    return next((p.name for p in result.parts if not finite(p.grad)), None)


def training_part(t, lead: str = "that checks float32's backprop") -> str:
    """Where :train runs its products in bfloat16, the gradient check's float32 backprop beside the backward :train
    runs (core.backprop.TrainingPrecision), in words (:grad and :checks). `lead`: what the words open with, said of
    the line before them: :grad's follows the float32 figures, :checks's another line of its own."""
    train = named("train")  # :train in the REPL, minitf train from the shell
    return (f"{lead}: on this device {train} runs its products in {t.dtype} (the dtype "
            f"setting), and its backward on this text, under autocast as {train}'s, gives g.u = {t.backprop:+.6g}, "
            f"{t.relative:.0e} off the measured slope and its whole gradient {t.gradient:.0e} from float32's (both "
            "relative): "
            f"{t.dtype} rounds to about 3 digits")


@command("grad", "Backpropagation on one text: the loss's gradient down the residual stream, what each part's "
                 "weights receive, checked against a measured slope.", params=[
    Param("text", str, help="the text whose loss is backpropagated (default: a sample of the data with what truly "
                            "follows it)", positional=True),
    Param("all", bool, default=False, help="list every parameter tensor instead of the parts"),
], aliases=("backprop",), interruptible=True, json_version=6,
         guide="inside-views.md#backpropagation-on-one-text-grad")  # fmt: skip
def cmd_grad(session: Session, args: dict, reporter: Reporter) -> GradResult:
    data = session.data
    text, ids, dropped = view_prompt(session, args["text"] or known_text(data), reporter, scored=True,
                                     given=bool(args["text"]), noted=True)  # its note says the cut (render_grad)
    if len(ids) < 2:
        raise UserError(f"backprop needs a loss, so at least two {data.tokenizer.unit}s: one to read and the one "
                        f"after it to predict; e.g. {cmd('grad', known_text(data))}")
    from ..core.backprop import backprop

    counted = getattr(data, "counted", None)  # a task counts its answer only, as :train does
    with session.weights_put_back():  # its trial step of the optimizer is undone: a :quantize copy stays current
        done = backprop(session.model, ids, counted(ids) if counted and not dropped else None,
                        trainer=session.trainer, dtype=session.train_config.dtype)
    eps_rules, normalised = False, norm_kind(session.model_config).normalises
    # what :resid reads at the last position: does eps set s there? (norm=none: no norm, so no eps to set anything)
    if normalised and done.residual and done.placement == "pre":
        from ..core.inside import residual_stream

        stream = residual_stream(session.model, ids[:-1], at=len(ids) - 2)
        reads = [w.norm for w in stream.writes] + ([stream.final] if stream.final is not None else [])
        eps_rules = eps_share(reads, session.model_config.d_model, stream.norm_scale == "std") is not None
    return GradResult(
        text=text, tokens=shown_pieces(data.tokenizer, ids), counted=done.counted, loss=done.loss,
        placement=done.placement, norm_label=done.norm_label, norm_scale=done.norm_scale, residual=done.residual,
        logits=done.logits,
        softmax_diff=done.softmax_diff,
        top=done.top, stream=done.stream, embed=done.embed, position_table=position_table(session.model_config),
        positions=done.positions, parts=done.parts,
        tensors=done.tensors, tied=done.tied, head=done.head, embedding=done.embedding, check=done.check,
        check_skipped=done.check_skipped, optimizer=done.optimizer, step_lr=done.step_lr, clip_scale=done.clip_scale,
        step_aux=done.step_aux, show_all=bool(args["all"]), dropped=dropped, unit=data.tokenizer.unit,
        untrained=session.untrained, ablations=switched_off(session), causal=session.model.causal,
        dropout=session.model_config.dropout, eps_rules=eps_rules, normalised=normalised, training=done.training)


def _cos(value: float) -> Text:
    return Text(f"{value:+.2f}", style="green" if value > 0.3 else "red" if value < -0.3 else "")


@render.register(GradResult)
def render_grad(result: GradResult, console: Console) -> None:
    n = sum(result.counted)
    T = len(result.tokens) - 1
    norm, pre = result.norm_label, result.placement == "pre"
    say(console, f"backprop on {quoted_end(result.text, 60)}: loss {result.loss:.4f}, the mean -ln p of "
                 f"{count(n, 'next ' + result.unit)}", "bold")
    note(console, "the chain rule from the loss down, one step per part, in the reverse of the forward's order; "
                  "every |.| below is over the whole text")
    where = "at each position" if n == T else f"at each counted position (0 at the other {T - n})"
    agrees = (f"agrees to {result.softmax_diff:.0e} ({rounding(result.softmax_diff, [])})"
              if math.isfinite(result.softmax_diff) else "is not finite (see below)")  # not "nan (more than rounding)"
    say(console, f"dL/dz_t = (softmax(z_t) - onehot(y_t)) / N {where} (N = {n}): |dL/dz| = "
                 f"{result.logits:.4f}; autograd's dL/dz {agrees}")
    # norm=none: the formula names no norm (f(Id(h)) spoke of one the model has not got), as its kind declares
    update = (stream_update(norm, pre, result.residual) if result.normalised else
              "h + f(h)" if result.residual else "f(h)")
    if not result.residual:
        note(console, f"residual=off, h' = {update}: no add, so no skip path: dL/dh = J^T g' alone, and every gradient "
                      "must pass through every sublayer on its way down")
    elif pre:
        placed = "pre-norm" if result.normalised else "no norm (norm=none)"
        note(console, f"{placed}, h' = {update}: so dL/dh = g' + J^T g'. The add hands g' = dL/dh' down "
                      "the skip path untouched, and J^T g' comes back through the sublayer and adds to it")
    elif not result.normalised:  # norm=none: the identity after the add, whose Jacobian is the identity too
        note(console, f"post-norm with no norm (norm=none), h' = {update}: so g_s = g' goes down the skip "
                      "path untouched, and dL/dh = g_s + J_f^T g_s")
    else:
        note(console, f"post-norm, h' = {update}: so g_s = J_{norm}^T g' first (the norm is on the skip path "
                      "too, and rescales it), then dL/dh = g_s + J_f^T g_s")
    head_path = f"the output head and {norm}_f" if pre and result.normalised else "the output head"
    g, top, embed = fmt.gradient, fmt.gradient(result.top), fmt.gradient(result.embed)
    rows = [[Text("top", style="cyan"), "", "", "", "", "", top]]
    labelled = None
    for s in result.stream:
        block = str(s.block) if s.block != labelled else ""
        labelled = s.block
        if s.skipped:  # :ablate block=L
            skip, back, cos = g(s.skip), Text("skipped", style="dim"), ""
        elif not result.residual:  # no add: no skip path, and nothing for the sublayer's part to point along
            skip, back, cos = Text("none", style="dim"), g(s.through), ""
        else:
            skip, back, cos = g(s.skip), g(s.through), _cos(s.cos)
        rows.append([block, s.part, g(s.arrives), skip, back, cos, g(s.leaves)])
    rows.append([Text("h_0", style="cyan"), "", "", "", "", "", embed])
    # post-norm's part comes back through f from g_s, the norm's output, as the line above writes it: J_f^T g_s
    back_title = "|J^T g'| back" if pre or not result.residual else "|J_f^T g_s| back"
    names = ["block", "f", "|g'| arrives", "|skip|", back_title, "cos", "|dL/dh| leaves"]
    console.print(fitting_table(console, names, rows, left=("block", "f"), optional=("cos", "|g'| arrives")))
    h_0 = "x" if result.position_table is None else "x + p"
    note(console, f"top: |dL/dh_L|, what reaches the last block's output through {head_path}; h_0: what reaches the "
                  f"input {h_0}" + (" (cos: of the sublayer's part with the skip's)" if result.residual else ""))
    gain = result.embed / result.top if result.top > 0 else math.nan
    broken = not_finite(result)
    if broken is not None:
        # one line that says so: the sentences below read nan as a figure ("nan at h_0 (xnan), so even the first block
        # learns from the loss directly"), and what to do is the same wherever the overflow starts
        where = (f"the float32 loss is not finite ({result.loss:g}): the forward pass overflowed, so no gradient is"
                 if not math.isfinite(result.loss) else
                 f"the float32 gradient is not finite from {broken} down (it overflowed: the table's nan and inf)")
        say(console, f"{where}: these weights cannot train, as a step would write nan into every weight it reaches; "
                     f"{restore('NAME')} brings back a checkpoint from before the rate blew them up ({cmd('ls')} "
                     "lists them), or train anew at a lower lr", "yellow")
    elif result.top <= NOTHING_REACHES * result.logits:
        # d_model=1: LN_f of one feature is its bias alone, so the loss reads nothing of the stream. Its backward's
        # rounding is not always 0: an AMD Zen 3's kernels passed back 3.4e-07 of a |dL/dz| of 0.5 (0 elsewhere),
        # which the sentence below read as "so even the first block learns from the loss directly"
        residue = "" if result.top == 0 else f" ({top} here: float32 rounding, under {NOTHING_REACHES:g} of |dL/dz|)"
        say(console, f"no gradient reaches the stream: |dL/dh_L| is 0 at the top{residue}, so every block gets 0 and "
                     "learns nothing from this loss: what the output head reads does not depend on the stream (as "
                     "at d_model=1, where LayerNorm's x - mean(x) is 0 and it outputs its bias alone)")
    elif not result.residual:
        # where it is smallest on the way down: a 4-block model's reached h_0 x1.5 larger, past 0.0013 in the middle
        # blocks, and the summary said only "grew"
        low = min(result.stream, key=lambda s: s.leaves) if result.stream else None
        dip = (f", and {g(low.leaves)} at its lowest, below block {low.block}'s {low.part}"
               if low is not None and low.leaves < 0.5 * min(result.top, result.embed) else "")
        say(console, f"without the skip path the gradient reaching h_0 is what survives every sublayer's Jacobian: "
                     f"{top} at the top, {embed} at h_0 (x{gain:.2g}){dip}; with no add to carry it past them, it "
                     "can fade or swell by much from one sublayer to the next")
        note(console, "the lower blocks learn only from what gets through to them; residual=on hands every block the "
                      "gradient from the top untouched")
    elif pre or not result.normalised:  # norm=none post-norm: no norm on the skip path, as in pre-norm
        # of the blocks left on (:ablate block=L skips one): one skipped learns nothing, and all skipped, no block does
        live = sorted({s.block for s in result.stream if not s.skipped})
        learns = ("so even the first block learns from the loss directly" if live and live[0] == 0 else
                  f"so even block {live[0]}, the first left on, learns from the loss directly" if live else
                  "and every block is switched off, so none learns from it")
        say(console, f"the skip path carries every gradient down unchanged and each sublayer adds its part: "
                     f"{top} at the top, {embed} at h_0 (x{gain:.2f}), {learns}")
        if not result.normalised:  # norm=none: h' = h + f(h), no norm between the stream and f, nor on the skip
            note(console, "with no norm (norm=none) a sublayer reads the stream as it is, so its part comes back "
                          "through f alone, J_f^T g': no norm's Jacobian divides it by the stream's size")
        elif result.eps_rules:  # s = sqrt(spread^2 + eps) is about sqrt(eps) whatever the stream's length
            note(console, f"a sublayer's part comes back through its norm, whose Jacobian divides by "
                          f"sqrt({result.norm_scale}^2 + eps): here eps outweighs the stream's spread "
                          f"({cmd('resid')} shows it), so it divides by about sqrt(eps) whatever the stream's length")
        else:
            note(console, f"a sublayer's part comes back through its norm, whose Jacobian divides by the "
                          f"{result.norm_scale} of the stream it read ({cmd('resid')} shows it): where the stream is "
                          "short, the part is large")
    else:
        say(console, f"every add's gradient passes a norm's Jacobian on the way down ({top} at the top, {embed} at "
                     "h_0): each norm rescales the whole gradient, skip path included, which is why deep post-norm "
                     "stacks need a warm-up to train")
    if len(result.positions) > 1 and all(map(math.isfinite, result.positions)):  # bars of nan draw nothing true
        width = max(8, min(len(result.positions), console.width - 34))
        read = ("read by every prediction from t on" if result.causal else
                "read by every prediction: without the causal mask every prediction reads it")
        note(console, f"|dL/dh_0[t]| for t = 0..{T - 1}: {spark(result.positions, width)} "
                      f"({spark_scale(result.positions, width, fmt.gradient)}; position t's vector is {read})")
    _parameters(result, console)
    check = result.check
    if check is not None:
        say(console, f"checked: nudging all {fmt.whole(check.params)} weights by ±{check.epsilon:g} along a random "
                     f"unit direction u moves the float64 loss at a slope of {check.measured:+.6g}; backprop's "
                     f"g.u, run in float64, = {check.backprop_float64:+.6g}: they agree to {check.relative:.0e} "
                     f"(relative){float32_part(check)}")
        if result.training is not None:  # the check is float32's: said, where :train's own products are bfloat16's
            note(console, training_part(result.training))
    elif result.check_skipped:
        note(console, f"not checked against a measured slope: {result.check_skipped}")
    note(console, f"a step of {named('train')} moves each weight against its gradient (the optimizer decides how far); "
                  f"{cmd('score')} shows the loss this gradient came from, position by position")
    if result.dropout > 0:  # core.backprop runs in eval mode: a :train step's gradient has dropout's noise in it
        note(console, f"the gradient here is taken without dropout (eval mode): a {cmd('train')} step, with "
                      f"dropout={result.dropout:g}, zeroes a random share of the activations and differs from it")
    if result.dropped:
        note(console, f"the first {count(result.dropped, result.unit)} of the text (beyond max_seq_len + 1) went "
                      "unread")
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: the loss is near ln(V) and the gradient is the first step's; "
                      f"{look_again('grad', AUTOSAVE_NAME)}")


def _parameters(result: GradResult, console: Console) -> None:
    """What each part's weights receive: |W|, |dL/dW| and their ratio; all=on lists every tensor."""
    shown = result.tensors if result.show_all else result.parts
    def ratio(value: float | None, weight: float) -> str:
        return "-" if value is None or weight <= 0 else f"{value / weight:.1e}"

    rows = [[p.name, fmt.whole(p.count), f"{p.weight:.3f}", fmt.gradient(p.grad), ratio(p.grad, p.weight),
             ratio(p.step, p.weight)] for p in shown]
    names = ["tensor" if result.show_all else "part", "parameters", "|W|", "|dL/dW|", "|dL/dW|/|W|", "step |ΔW|/|W|"]
    if result.optimizer is None:
        names, rows = names[:-1], [row[:-1] for row in rows]
    # 40-odd columns: the parts' names wrap ("W_E (token embedding," over "tied head)"); a tensor's name has no space
    # to wrap at, so there the step's column goes too
    optional = ("parameters", "|W|", "|dL/dW|/|W|") + (("step |ΔW|/|W|",) if result.show_all else ())
    console.print(fitting_table(console, names, rows, left=(names[0],), optional=optional, wrap=("part",)))
    if result.optimizer is not None:
        clipped = (f", the gradient first scaled by {result.clip_scale:.2g} to grad_clip as {named('train')} clips"
                   if result.clip_scale < 1 else "")
        note(console, f"step: how far one {result.optimizer} step on this gradient moves each part, at the peak "
                      f"rate lr = {result.step_lr:g}{clipped}, from the optimizer's state as it is now (then "
                      "undone). " + OPTIMIZER_STEPS.get(result.optimizer, ""))
        if result.step_aux is not None:  # the other columns are the cross-entropy's: said, or the step reads as its
            note(console, f"the step's gradient adds the experts' load-balancing term to the loss's, as "
                          f"{named('train')}'s does (moe_aux_weight x aux loss = {result.step_aux:.4g}); |dL/dW| and "
                          "the rest are of the cross-entropy alone")
        if result.optimizer == "muon":
            note(console, f"{cmd('muon')} works one matrix's Muon step out: the momentum, "
                          "Newton-Schulz step by step, the update")
    if result.show_all:
        keys = [p.grad for p in shown if p.name.endswith("k_proj.bias")]
        values = [p.grad for p in shown if p.name.endswith("v_proj.bias")]
        if keys and values and max(keys) < 1e-5 * max(values):  # measured, not assumed: RoPE or qk_norm break it
            steps = [p.step / p.weight for p in shown if p.name.endswith("k_proj.bias") and p.step and p.weight > 0]
            # its step column read 2.4e-02 beside this note, with nothing to say why: Adam's m/sqrt(v)
            moved = ("; yet the step column still moves it: AdamW (Muon's runs take the biases with it) divides each "
                     "gradient by its own running size, so a gradient of rounding size still takes a step of the "
                     "rate's size (a bias starts at 0: |b_K| is what such steps added up to, and it changes no output)"
                     if steps and max(steps) > 1e-3 and result.optimizer in ("adamw", "muon") else "")
            note(console, "k_proj.bias receives (almost) nothing: adding b_K to every key adds the same q.b_K to all "
                          f"of a query's scores, and softmax ignores a shift{moved}")
    head, read = fmt.gradient(result.head), fmt.gradient(result.embedding)
    # x_f said once: what the head reads, the final norm's output in pre-norm, the last block's in post-norm (no LN_f)
    # and under norm=none (no norm)
    x_f = f"x_f = {result.norm_label}_f(h_L)" if result.placement == "pre" and result.normalised else "x_f = h_L"
    if not (math.isfinite(result.head) and math.isfinite(result.embedding)):  # "(|.| = nan)": said once, above
        return
    if result.tied:
        note(console, f"W_E is tied: as the output head it receives dz^T x_f ({x_f}, what the head reads; |.| = "
                      f"{head}), at the input each read token's row receives dL/dx where it was read (|.| = {read}); "
                      "its gradient is their sum")
    else:
        note(console, f"W_U (the head) receives dz^T x_f ({x_f}, what the head reads; |.| = {head}); W_E only the "
                      f"rows of the tokens read (|.| = {read})")


# --- :muon ---------------------------------------------------------------------------------------
@dataclass
class MuonResult:
    data: str  # the data the batch came from
    step: MuonStep  # the gradient, the momentum, Newton-Schulz step by step, the update
    untrained: bool = False  # no training here nor weights from elsewhere: the gradient is a fresh model's
    ablations: list[str] = field(default_factory=list)  # parts switched off by :ablate: the gradient is that model's
    # the session's own lr where it trains with another optimizer: the step is at the lr Muon would train at
    session_lr: float | None = field(default=None, metadata={"view_only": True})


def _complete_matrix(session: Session) -> list[str]:
    """The matrices of block 0 that Muon trains, once the model exists (completion never builds one)."""
    if not session.has_model:
        return []
    from ..core.muon_step import matrix_names

    return matrix_names(session.model, 0)


# interruptible: the gradient of a whole training batch polls no stop flag (a 12 x 768 model at block_size=512 took
# over a minute with Ctrl-C unheard); it writes nothing (core.muon_step puts the model's mode back on the way out)
@command("muon", "Muon's step on one matrix worked out: the gradient, the momentum, Newton-Schulz step by step "
                 "(every singular value pushed towards 1), the update.", params=[
    BLOCK,
    Param("matrix", str, help="the matrix in the block (default attn.q_proj; the default model's others: "
                              "attn.k_proj, attn.v_proj, attn.out_proj, ffn.fc_in, ffn.fc_out, or just fc_in; Tab "
                              "lists the model's)", complete=_complete_matrix, meta="NAME"),
    Param("seed", int, help="the training batch the gradient is taken on (default 0)", low=0, limit=2**63 - 1),
], interruptible=True, json_version=4, guide="inside-views.md#what-muon-does-with-a-gradient-muon")  # fmt: skip
def cmd_muon(session: Session, args: dict, reporter: Reporter) -> MuonResult:
    layer = check_layer(session, args["layer"])
    from ..core.muon_step import muon_step

    train = session.train_config
    session_lr = None if train.optimizer == "muon" else train.lr
    if train.optimizer != "muon":  # the rate :set optimizer=muon would train at: Muon's recipe's, unless set by hand
        from ..core.recipes import follow_optimizer

        train = follow_optimizer(train, train.replace(optimizer="muon"), session.recipe_data)[0]
    if session.device.type == "cpu":  # a whole training batch's graph: 7 GiB for 12 x 768 at block_size=512
        check_batch_fits(session, train.batch_size)
    step = muon_step(session.model, session.data, layer=layer, matrix=args["matrix"] or "attn.q_proj",
                     batch_size=train.batch_size, seed=args["seed"] or 0, optimizer=session.trainer.optimizer,
                     lr=train.lr, grad_clip=train.grad_clip, dtype=train.dtype)
    return MuonResult(data=session.data_spec, step=step, untrained=session.untrained, ablations=switched_off(session),
                      session_lr=session_lr)


def check_batch_fits(session: Session, batch_size: int) -> None:
    """Refuse a gradient of one training batch that would not fit in the memory free now, before anything is
    allocated: past it, Linux's out-of-memory killer ends the whole session (core.sizes.check_memory_free says why).
    The readable forward keeps what training keeps (core.sizes.training_bytes); the session's model is held already."""
    from ..core import memory
    from ..core.sizes import parameter_count, training_bytes

    free = memory.available_memory()
    if free is None:
        return
    config = session.model_config
    need = training_bytes(config, batch_size)
    held = 16 * parameter_count(config)  # its weights; the estimate's gradients and moments are mostly not made here
    if need > free + held:
        raise UserError(f"the gradient of one training batch ({batch_size} x {config.max_seq_len} tokens) would need "
                        f"about {(need - held) / 2**30:,.1f} GiB more (a rough upper estimate), but this machine has "
                        f"{free / 2**30:,.1f} GiB free; a smaller batch fits: {cmd('set', batch_size=1)} (the batch is "
                        ":train's)")


@render.register(MuonResult)
def render_muon(result: MuonResult, console: Console) -> None:
    m = result.step
    A, B = m.shape
    wide = f"{B} x {A}" if m.turned else f"{A} x {B}"
    # a tall matrix is the one turned: the optimizer orthogonalises the wide form (it said it "takes a tall matrix")
    turned = f", tall, so taken as its {wide} transpose: the optimizer works on the wide form" if m.turned else ""
    where = m.name.removeprefix("blocks.").removesuffix(".weight").split(".", 1)
    say(console, f"Muon's step on block {where[0]}'s {where[1]} ({A} x {B}{turned})", "bold")
    say(console, f"G = dL/dW on one {named('train')} batch of {result.data} ({fmt.whole(m.tokens)} tokens, seed "
                 f"{m.seed}; loss {m.loss:.4f}): |G| = {m.grad:.4g}")
    if m.clip_scale < 1:  # the optimizer reads the gradient after :train's clipping, whatever this matrix's own size
        note(console, f"as {named('train')} clips: the whole model's gradient has norm {m.total_grad:.4g}, over "
                      f"grad_clip, so every gradient is scaled by {m.clip_scale:.3g} before the optimizer reads it; G "
                      f"below is the clipped one, |G| = {m.grad * m.clip_scale:.4g}")
    # the momentum is M, a matrix like G: "b" was also Newton-Schulz's b below, and "m" is AdamW's first moment
    kept = "kept by the session" if m.had_momentum else "none yet, so M starts at 0"
    ahead = (f"u = {1 - m.momentum:g} G + {m.momentum:g} M (Nesterov: the gradient, looking one step ahead)"
             if m.nesterov else "u = M")
    say(console, f"M <- {m.momentum:g} M + {1 - m.momentum:g} G, the momentum ({kept}): |M| = {m.buffer:.4g};  "
                 f"{ahead}: |u| = {m.update:.4g}")
    S = m.singular
    width = max(8, min(len(S), console.width - 60))
    scale = spark_scale(S, width, lambda v: f"{v:.2g}")
    say(console, f"u = U S V^T: {len(S)} singular values {spark(S, width)} ({scale}); the {m.top} largest carry "
                 f"{m.u_top_share:.0%} of |u|^2")
    a, b, c = m.coefficients
    say(console, f"Newton-Schulz: X_0 = u / |u|, then {len(m.steps) - 1} times X <- aX + (b XX^T + c (XX^T)^2) X, "
                 f"(a, b, c) = ({a:g}, {b:g}, {c:g})")
    worst = max(s.polynomial_diff for s in m.steps)
    note(console, f"each step is U p(S) V^T with p(s) = a s + b s^3 + c s^5: the same polynomial on every singular "
                  f"value at once, U and V untouched, with products only (checked: p on X_0's singular values gives "
                  f"every step's to {worst:.0e})")
    rows = [[str(s.step), f"{s.smallest:.2g}", f"{s.median:.3f}", f"{s.largest:.3f}", f"{s.polar_distance:.3f}"]
            for s in m.steps]
    names = ["step", "smallest σ", "median σ", "largest σ", "|X - UV^T| / |UV^T|"]
    console.print(fitting_table(console, names, rows, optional=("|X - UV^T| / |UV^T|",)))
    say(console, f"O = X_{len(m.steps) - 1}: {m.settled:.0%} of its singular values lie between 0.5 and 1.5; its "
                 f"{m.top} largest directions carry {m.o_top_share:.0%} of |O|^2 (an orthogonal matrix: "
                 f"{m.orthogonal_share:.0%}), against u's {m.u_top_share:.0%} and AdamW's update's "
                 f"{m.adamw_top_share:.0%}")
    adamw = ("its first, m / sqrt(v) = G / |G| entry by entry, sign(G)" if m.adamw_first else
             "its next, from the session's moments")
    note(console, f"AdamW's update m^ / (sqrt(v^) + eps) on this gradient ({adamw}) evens out the entries, not the "
                  "directions; Muon evens out the directions")
    grow = a ** (len(m.steps) - 1)
    note(console, f"near 0, p(s) is about a s, so {len(m.steps) - 1} steps multiply a tiny singular value by "
                  f"a^{len(m.steps) - 1} = {grow:.0f} at most: a direction below about {0.5 / grow:.0e} of |u| ends "
                  "below 0.5, and the gradient's weakest directions stay weak")
    big = max(A, B)
    say(console, f"step: W <- (1 - lr wd) W - lr 0.2 sqrt({big}) O = W - {m.step_scale:.4g} O at the peak lr = "
                 f"{m.lr:g}: each entry moves {m.step_rms:.2g} (RMS; 0.2 lr = {0.2 * m.lr:.2g}), |ΔW| / |W| = "
                 f"{m.relative_step:.1%}")
    if result.session_lr is not None and result.session_lr != m.lr:  # the session's own lr is its optimizer's
        # core.recipes.follow_optimizer moved lr to Muon's recipe: the session's is AdamW's recipe's, not set by hand
        note(console, f"lr = {m.lr:g} is Muon's recipe's rate, the one {cmd('set', optimizer='muon')} would train at; "
                      f"this session's {m.session_optimizer} trains at lr = {result.session_lr:g}, its own recipe's")
    # a difference means little without O's own size: 2e-2 beside entries of RMS 0.07 is 30% of a typical entry
    rms = m.step_rms / m.step_scale if m.step_scale > 0 else 0.0
    diffs = [m.float32_diff] + ([m.optimizer_diff] if m.optimizer_dtype != "float32" else [])
    shares = " and ".join(f"{100 * d / rms:.2g}%" for d in diffs) if rms > 0 else ""
    scale = f"; O's entries have RMS {rms:.2g}, so {shares} of a typical one" if rms > 0 else ""
    ran = ("" if m.optimizer_dtype == "float32" else f" and to {m.optimizer_diff:.0e} in {m.optimizer_dtype}")
    say(console, f"checked: the optimizer's own newton_schulz on the same u gives this O to {m.float32_diff:.0e} in "
                 f"float32{ran}, the dtype it runs in on this device (the largest entry's difference{scale})")
    if m.optimizer_dtype != "float32":  # its O is a rough one on purpose: said, or the difference reads as a bug
        # "an approximation, one Muon tolerates" under a difference of 87% of a typical entry understated it: on
        # gradients whose spectrum falls off quickly bfloat16's O is that far off (a tester's torch measurements)
        note(console, f"{m.optimizer_dtype} keeps about 3 significant digits and Newton-Schulz's steps compound its "
                      "rounding, so its O can be off by as much as a typical entry: how far depends on u's spectrum "
                      "(where it falls off quickly, 0.03 to 0.11 at the largest entry "
                      "against entries of RMS 0.1 to 0.18 were measured). Muon takes that rough O on purpose "
                      "(torch.optim.Muon's choice, after Keller Jordan's): the step uses O's directions, every "
                      f"singular value near 1, not its digits; {cmd('compare', 'dtype=float32 dtype=bfloat16')} "
                      "measures what it costs the loss")
    if m.session_optimizer != "muon":
        note(console, f"this session trains with {m.session_optimizer}; {cmd('set', optimizer='muon')} makes Muon "
                      "take these steps")
    ablation_note(console, result.ablations)
    if result.untrained:
        note(console, f"this model has not trained yet: the gradient is the first step's; "
                      f"{look_again('muon', AUTOSAVE_NAME)}")
