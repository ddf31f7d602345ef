"""The checks to run before trusting a training run, on this model and this data.

A network with a bug in it usually still trains: the loss falls, just not as far as it should, and
nothing says why. So before reading anything into a loss curve, check the few properties every
correct language model has. These are the checks of Karpathy's "A Recipe for Training Neural
Networks" (2019) that apply to a decoder-only Transformer, each one measured, not assumed:

    batch     the targets are the inputs shifted by one   y[t] = x[t + 1] wherever the loss counts y[t]: the
                                                          batch, decoded, is what the model reads and predicts
    init      a fresh model scores about ln V             its logits start small: no token favoured
    rows      the rows of a batch never mix               dz_(row i) / dh_(row j) = 0 for j != i, exactly
    causal    position t reads no position s > t          dz_t / dh_s = 0 for every s > t, exactly
    gradient  backprop's gradient is the loss's slope     g.u against (L(θ + εu) - L(θ - εu)) / 2ε, float64
    blind     the model learns from its input             trained on inputs all 0, it learns only how often
                                                          each token comes (about the unigram's loss);
                                                          trained on the real inputs, far more
    overfit   it can learn anything at all                one batch of two rows, seen over and over,
                                                          is learned by heart: loss towards 0 (under
                                                          5% of ln V), or every row's answer written again

The dependency checks (rows, causal) differentiate the logits with respect to h, the stream the
blocks start from (token plus position embedding, read at the probe `hook_embed`): a product of
zeros is exactly zero in floating point, so a position the mask hides gets exactly 0, and anything
else is a leak. They and the gradient check run on the session's model as it is now (eval mode,
no weight or .grad touched). init, blind and overfit build fresh models with the session's
settings and seed and leave the session's model, optimizer and batches alone; init scores the session's
model too where it has not trained (step 0) and is not that fresh model (loaded, or its weights changed).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .backprop import CHECK_LIMIT, GradientCheck, TrainingPrecision, gradient_check, training_precision
from .device import in_float64
from .errors import TrainingDiverged
from .model import MiniTransformerLM
from .precision import training_dtype
from .probe import listening
from .train import fork_random
from .words import count

CHECKS = ("batch", "init", "rows", "causal", "gradient", "blind", "overfit")

# init: how far from ln V a fresh model may start. The default model starts within 0.3% of it; the tied post-norm
# model 8.5% under it (it favours the token it reads), initial weights of std 1 more than a nat over it.
INIT_TOLERANCE = 0.05
# init, on a text: the fewest next tokens of the validation split that it is judged on. Fewer say little: one token's
# -ln p under a fresh model's logits (std 0.14) lies 6% from ln 20 as often as not; a mean of 8 stays within the 5%
# all but about once in a hundred (8 on a tiny text: 0.5% off).
INIT_FEWEST = 8
# gradient: backprop runs in float32, the measurement in float64; they agree to 1e-5 or better on every variant.
# A wrong backward (a missing term, a wrong sign) is off by order 1.
GRADIENT_TOLERANCE = 1e-3
# blind: how far below the blind model's val loss the model trained on its inputs must end, in nats per token.
BLIND_MARGIN = 0.1
# blind: runs that got less than this share of the way from where they began (ln V) to the unigram counter have not
# moved: at lr=1e-6 both ended 0.04 of the 1.40 nats down (4.600 and 4.639 against 3.238), "train longer" offered;
# the default rate gets past the counter in 100 steps. Such runs fail: at lr=1e-9 a fresh model's two losses already
# differ by about 0.1, so the margin alone passed or failed a model that learned nothing by its seed
BLIND_STILL = 0.1
# blind: a real run that ended above ln V, where it began, by more than the larger of this and BLIND_STILL of the room
# to the counter did not fail to move: it rose. At lr=30 (grad_clip=0) its val loss ended at 32,422 nats, the blind
# run's at 15,941, and "still" (ln V - min(real, blind) < a tenth of the room) called that "did not move" and the rate
# too low; a fresh model's loss sits within 0.05 of ln V at lr=1e-9, so a rise of 0.1 nats is none of its noise
BLIND_ROSE = 0.1
# overfit: the loss on the one batch that counts as learned by heart, as a share of ln V
OVERFIT_TARGET = 0.05
OVERFIT_ROWS = 2  # "as few as two examples": learned by heart well within 100 steps (pydoc: by step 13)
ROWS = 4  # rows of the batch the rows check reads
MAP = 16  # positions of the causal check's dependency map that a view draws (the count covers all)
CHUNK = 16  # queries of the causal check per backward pass (one row each)
# The causal check reads the first this many positions of the window: every position runs the same code, and
# a window of 1,024 (GPT-2's) would take 64 passes of 16 copies of it.
CAUSAL_WINDOW = 128
SHOWN = 48  # positions of the batch's first row the batch check keeps to show
TRAINING_LIMIT = 30_000_000  # parameters above which init, blind and overfit (fresh models) are not built


@dataclass
class BatchCheck:
    rows: int  # rows read: the first ROWS (4) of a training batch from seed 0, all of a smaller one
    positions: int  # T: the window
    counted: int  # targets the loss counts (y >= 0; a task counts its answers only)
    mismatched: int  # counted targets, the last position's aside, that are not the next input: y[t] != x[t + 1]
    x: list[str]  # the first row's inputs (its first SHOWN tokens), each token as the views show it
    y: list[str | None]  # its targets (None: not counted)
    passed: bool  # at least one target is counted, and every counted one (the last position's aside) is the next input
    batch_size: int = 0  # the rows of a training batch: these `rows` are a sample of one (the first few, from seed 0)


@dataclass
class InitCheck:
    loss: float  # a fresh model's val loss
    uniform: float  # ln V: a uniform guess's loss
    logit_std: float  # the spread of the fresh model's logits (0 would be exactly uniform)
    # |loss - expected| <= INIT_TOLERANCE x ln V (5%), and where the session's model is scored (model_passed), its loss
    # is at most that far above its own reference
    passed: bool
    # what a fresh model favours, if anything: the share of positions whose likeliest next token is the token
    # read there, and that token's mean probability (1/V when nothing is favoured)
    reads_own: float = 0.0
    # the fresh model's probability that the next token is the token read, averaged over a val batch's positions
    own_p: float = 0.0
    # the loss a fresh model of this kind should start at: ln V, less what a tied head's favour for the token read
    # earns where the text repeats it (the check's reference; equal to uniform for an untied head)
    expected: float = 0.0
    fresh_weight_std: float = 0.0  # the std of the fresh model's weight matrices (its parameters of 2-D or more)
    # the session's model, scored too where it has not trained (step 0) and is not the fresh model (loaded, or its
    # weights changed; a loaded model of std-1 weights scored 28 nats while the fresh one passed): its val loss. None
    # where not scored, or where it scores far under its reference (weights that learned elsewhere, an hf: folder)
    model_loss: float | None = None
    model_logit_std: float = 0.0  # its logits' std
    model_expected: float = 0.0  # its reference, as `expected` is the fresh model's
    model_weight_std: float = 0.0  # the std of its weight matrices
    model_passed: bool | None = None  # within the tolerance the fresh model is held to (None: not scored)


@dataclass
class CausalCheck:
    positions: int  # T: the positions read (the first CAUSAL_WINDOW of the window at most)
    window: int  # max_seq_len: the model's window
    later_pairs: int  # pairs (t, s > t): T (T - 1) / 2
    later_read: int  # of them, pairs with a nonzero gradient: position t reading a later one
    later_largest: float  # the largest |dz_t / dh_s| over s > t (0.0 exactly when causal)
    # the largest |dz_t / dh_s| / max_s' |dz_t / dh_s'| over s > t: how much a later position weighs in its row, on
    # the map's scale (later_largest alone has no scale: a map of dots can sit beside "largest 0.4")
    later_share: float
    earlier_unread: int  # pairs (t, s <= t) with an exactly zero gradient (0 in a model that reads its past)
    weakest_earlier: float  # the smallest |dz_t / dh_s| over s <= t
    map: list[list[float]]  # |dz_t / dh_s| for t, s < MAP, each row divided by its largest
    # every |dz_t / dh_s| with s > t is exactly 0, and at least one gradient is not (a model that reads nothing fails)
    passed: bool
    tokens: list[str] = field(default_factory=list)  # the row's first MAP tokens, decoded (the map's labels)
    # how far back the logits read: the fewest nearest positions (itself included) that hold half, and nine
    # tenths, of sum_s |dz_t / dh_s|, averaged over the window's second half (positions with a long past)
    reach_half: float = 0.0
    # the same for nine tenths; NaN (null) where no row of the window's second half reads any position
    reach_most: float = 0.0

    @property
    def reads_nothing(self) -> bool:
        """No position's logits read any position, itself included: every |dz_t / dh_s| is exactly 0 (a zeroed final
        norm, d_model=1). A mask no gradient passes through shows nothing either way: "0 of the 2,016 pairs" passed."""
        return not self.later_read and self.earlier_unread == self.positions * (self.positions + 1) // 2


@dataclass
class RowsCheck:
    rows: int  # rows of the val batch read (ROWS, 4, from seed 0)
    other_largest: float  # the largest |dz_(row 0) / dh| over the other rows (0.0 exactly when independent)
    own_size: float  # |dz_(row 0) / dh_(row 0)|: row 0 does read itself
    passed: bool  # other_largest is exactly 0.0: no row reads another


@dataclass
class BlindCheck:
    steps: int  # training steps of each of the two runs
    real_loss: float  # val loss after `steps` steps on the real inputs
    blind_loss: float  # the same model, settings and batches, every input token replaced by id 0
    unigram_loss: float  # the counter of how often each token comes (core.ngram, n = 1) on val
    first_loss: float  # the real run's first training loss (both start there, about ln V)
    zero_token: str  # what id 0 is
    learnable: bool  # False: the data has nothing an input could tell (random tokens)
    passed: bool | None  # None: nothing to learn from the input here
    # a fresh model's logits read its input: False where every gradient of them on the stream is exactly 0
    # (d_model=1: a norm of one feature is its bias alone), and no run could learn from it
    reads_input: bool = True
    # the unigram counter counted only the targets the loss scores (a task's answers), not whole rows as :ngram
    # does: on sort its question digits and '=' put the counter at 2.383 where the answers' digits are ln 10
    unigram_scored: bool = False
    # neither run moved from ln V a tenth of the way to the unigram counter (BLIND_STILL), nor rose: failed, whatever
    # the gap
    still: bool = False
    # the real run ended above ln V, where it began, by more than BLIND_ROSE (or a tenth of the way to the counter):
    # training made the model worse, a rate too high for it; failed, whatever the gap (both can blow up, the blind
    # run further)
    rose: bool = False


@dataclass
class OverfitCheck:
    steps: int  # training steps on the one batch
    rows: int  # rows of the one batch (OVERFIT_ROWS, 2): a training batch from seed 0
    tokens: int  # the predictions the batch counts
    first_loss: float  # the training loss at the first step (nats per token; about ln V)
    final_loss: float  # on the batch, eval mode (dropout off, no experts' balancing term)
    target: float  # OVERFIT_TARGET x ln V
    curve: list[float]  # the training loss at each step
    # final_loss <= target, or every row written again: each row's recitable tokens (one or more) recited as they stand
    passed: bool
    # learned by heart, literally: given the first row up to its first counted target (text: its first token; a
    # task: its question), greedy decoding writes the rest of the row again, and the token after it (its last target)
    given: int = 0  # tokens given
    recited: int = 0  # tokens then written as they stand in the row, up to the first that is not
    recitable: int = 0  # the tokens after those given that the loss counts, up to the first it does not


@dataclass
class Skipped:
    name: str  # the check: batch, init, rows, causal, gradient, blind or overfit
    why: str  # why it did not run here, in words (a model too large for it, too short a validation text)


@dataclass
class Diverged:
    """A training check (blind, overfit) whose run diverged: its loss or gradient stopped being finite. A failure:
    the checks that need no training are unaffected, and the rate is the usual cause."""

    name: str
    why: str


@dataclass
class Checks:
    results: dict = field(default_factory=dict)  # name -> its check, or Skipped
    seconds: dict = field(default_factory=dict)  # name -> seconds it took
    stopped: str | None = None  # the check a stop request ended (the ones after it did not run)
    # the gradient check's text under :train's autocast, where :train runs its products in bfloat16 (None: float32)
    gradient_training: TrainingPrecision | None = None


# --- what the model reads --------------------------------------------------------------------------------
def batch_check(data, rows: int, max_seq_len: int, batch_size: int = 0) -> BatchCheck:
    """`rows` rows of a training batch (from seed 0; of `batch_size` rows) as the model gets it: every counted target
    must be the next input."""
    x, y = data.get_batch("train", rows, max_seq_len, torch.Generator().manual_seed(0))
    counted = y >= 0
    inner = counted[:, :-1]  # the last target is the token after the window: no input to compare it with
    mismatched = int((y[:, :-1][inner] != x[:, 1:][inner]).sum())
    from .bpe import shown_piece

    def name(t) -> str:  # each token as the views name it: a piece with its space, a byte of a character as \xe4
        return shown_piece(data.tokenizer, int(t))

    return BatchCheck(rows, x.shape[1], int(counted.sum()), mismatched,
                      [name(t) for t in x[0, :SHOWN]],
                      [name(t) if t >= 0 else None for t in y[0, :SHOWN]],
                      mismatched == 0 and bool(counted.any()), batch_size)


# --- what the session's model does now ----------------------------------------------------------
def _stream_gradient(model, idx: torch.Tensor, select: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """d select(logits) / dh for the stream h the blocks start from: (B, T, d), in eval mode, nothing written.

    A forward hook swaps the embedding probe's output for a leaf that asks for its gradient; autograd is
    asked for that gradient alone, so no parameter's .grad changes."""
    leaf: list[torch.Tensor] = []

    def as_leaf(module, args, output):
        leaf.append(output.detach().requires_grad_(True))
        return leaf[0]

    with listening(model, [(model.hook_embed, as_leaf)], gradients=True):
        logits, _ = model(idx)
        (grad,) = torch.autograd.grad(select(logits.float()), leaf[0])
    return grad


def _direction(model, seed: int) -> torch.Tensor:
    """A fixed random direction over the vocabulary: z . r mixes every logit, so no token's is left out."""
    r = torch.randn(model.config.vocab_size, generator=torch.Generator().manual_seed(seed))
    return r.to(next(model.parameters()).device)


def rows_check(model, x: torch.Tensor, seed: int = 0) -> RowsCheck:
    """Row 0's logits differentiated with respect to every row's stream: the other rows must get exactly 0."""
    r = _direction(model, seed)
    grad = _stream_gradient(model, x, lambda z: (z[0] @ r).sum())  # (B, T, d)
    other = float(grad[1:].abs().max()) if x.shape[0] > 1 else 0.0
    return RowsCheck(x.shape[0], other, float(grad[0].norm()), other == 0.0)


def causal_check(model, row: torch.Tensor, seed: int = 0, chunk: int = CHUNK,
                 on_pass: Callable[[int, int], None] | None = None) -> CausalCheck:
    """The dependency matrix of one row: D[t, s] = |dz_t / dh_s|, the gradient of position t's logits (along a
    random direction) with respect to the stream at position s. Causal: D[t, s] = 0 for every s > t.

    Each backward pass asks `chunk` positions at once, one per copy of the row (rows do not mix: rows_check;
    chunk=1 where they might). `on_pass(positions done, T)` after each (a 12 x 768 model takes most of a minute
    over the 128 positions; it may raise Stopped)."""
    T = row.shape[-1]
    r = _direction(model, seed)
    depends = torch.zeros(T, T)
    for start in range(0, T, chunk):
        ts = torch.arange(start, min(start + chunk, T))
        copies = row.reshape(1, T).expand(len(ts), T).contiguous()  # (n, T): copy i asks position ts[i]
        grad = _stream_gradient(model, copies, lambda z, ts=ts: (z[torch.arange(len(ts)), ts] @ r).sum())
        depends[ts] = grad.norm(dim=-1).cpu()  # (n, T): row t, every s
        if on_pass is not None:
            on_pass(int(ts[-1]) + 1, T)
    later = torch.ones(T, T, dtype=torch.bool).triu(1)
    half, most = reach(depends)
    shown = depends[:MAP, :MAP]
    scale = shown.max(dim=1, keepdim=True).values.clamp(min=1e-30)
    shares = depends / depends.max(dim=1, keepdim=True).values.clamp(min=1e-30)
    return CausalCheck(
        positions=T, window=model.config.max_seq_len, later_pairs=int(later.sum()),
        later_read=int((depends[later] > 0).sum()), later_largest=float(depends[later].max()) if T > 1 else 0.0,
        later_share=float(shares[later].max()) if T > 1 else 0.0,
        earlier_unread=int((depends[~later] == 0).sum()), weakest_earlier=float(depends[~later].min()),
        map=(shown / scale).tolist(), passed=bool((depends[later] == 0).all() and (depends > 0).any()),
        reach_half=half, reach_most=most,
    )


def reach(depends: torch.Tensor) -> tuple[float, float]:
    """How many of the nearest positions (t, t-1, ...) hold half and nine tenths of row t's dependence, averaged
    over t in the second half of the window (a row with a long past to spread over). A row that depends on no
    position (every gradient exactly 0: d_model=1, where LayerNorm of one feature is its bias alone) has no share to
    hold and is left out; none left gives nan (a window of 2 once read "half lies on the 3.0 nearest positions")."""
    T = depends.shape[0]
    found = {0.5: [], 0.9: []}
    for t in range(T // 2, T):
        back = depends[t, : t + 1].flip(0)  # distance 0 (itself), 1, 2, ...
        if not bool(back.sum() > 0):
            continue
        share = back.cumsum(0) / back.sum()
        for level, kept in found.items():
            kept.append(min(int((share < level).sum()) + 1, t + 1))
    return tuple(sum(kept) / len(kept) if kept else math.nan for kept in found.values())


def gradient_agreement(model, x: torch.Tensor, y: torch.Tensor, seed: int = 0) -> GradientCheck:
    """Backprop's gradient along a random direction against the float64 loss's slope (core.backprop)."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    with listening(model, gradients=True):
        logits, _ = model(x)
        loss = model.loss(logits, y)  # eval mode: the plain cross-entropy
        grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    return gradient_check(model, x, y, params, list(grads), seed)


def training_agreement(model, x: torch.Tensor, y: torch.Tensor, dtype: str, measured: float,
                       seed: int = 0) -> TrainingPrecision:
    """gradient_agreement's text and direction once more, under :train's autocast in `dtype` (core.backprop)."""
    params = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    with listening(model, gradients=True):
        logits, _ = model(x)
        grads = torch.autograd.grad(model.loss(logits, y), [p for _, p in params], allow_unused=True)
    return training_precision(model, x, y, params, list(grads), seed, dtype, measured)


# --- fresh models with the session's settings ---------------------------------------------------
class _DataView:
    """The session's data as a fresh model's trainer reads it: everything as it is, but for what a view changes.
    No task accuracy: it would read the real questions, not what this view hands the model."""

    accuracy = None

    def __init__(self, data):
        self.data = data

    def __getattr__(self, name):
        return getattr(self.data, name)


class _ZeroInputs(_DataView):
    """Every input token replaced by id 0 (targets as they were): nothing to read."""

    def get_batch(self, split, batch_size, max_seq_len, generator):
        x, y = self.data.get_batch(split, batch_size, max_seq_len, generator)
        return torch.zeros_like(x), y


class _OneBatch(_DataView):
    """The same batch for every step and every evaluation."""

    def __init__(self, data, x, y):
        super().__init__(data)
        self.x, self.y = x, y

    def get_batch(self, split, batch_size, max_seq_len, generator):
        return self.x.clone(), self.y.clone()


def _fresh(model_config, train_config, device) -> MiniTransformerLM:
    """A new model with the session's settings, from the training seed (as `:train` from scratch builds it)."""
    torch.manual_seed(train_config.seed)
    return MiniTransformerLM(model_config).to(device)


def init_check(model_config, trainer, should_stop: Callable[[], bool] | None = None, model=None) -> InitCheck:
    """A fresh model's val loss, on the batches `:train` evaluates, against ln V. `should_stop()` is asked between
    the batches (Stopped): on a model near TRAINING_LIMIT they take seconds. `model`: the session's, untrained
    (step 0); scored too where its weights are not the fresh model's (model_loss)."""
    from .train import EvaluationStopped

    fresh = _fresh(model_config, trainer.config, trainer.device)
    x, y = trainer.data.get_batch("val", trainer.config.batch_size, model_config.max_seq_len,
                                  torch.Generator().manual_seed(trainer.config.seed + 1))
    x, y = x.to(trainer.device), y.to(trainer.device)

    def scored(scoring) -> tuple[float, torch.Tensor, float]:  # val loss, logits on (x, y), the reference
        try:
            loss, _ = trainer.evaluate(model=scoring, should_stop=should_stop)
        except EvaluationStopped:
            raise Stopped from None
        with listening(scoring):
            logits, _ = scoring(x)
        logits = logits.float()
        return loss, logits, expected_initial_loss(model_config, logits, x, y)

    loss, logits, expected = scored(fresh)
    own = torch.softmax(logits, dim=-1).gather(-1, x[..., None])  # p(next = the token read)
    uniform = math.log(model_config.vocab_size)
    check = InitCheck(loss, uniform, float(logits.std()), abs(loss - expected) <= INIT_TOLERANCE * uniform,
                      float((logits.argmax(dim=-1) == x).float().mean()), float(own.mean()), expected,
                      fresh_weight_std=weight_std(fresh))
    if model is not None and not _same_weights(model, fresh):
        model_loss, model_logits, model_expected = scored(model)
        if model_expected - model_loss <= INIT_TOLERANCE * uniform:  # far under it: it learned, elsewhere
            check.model_loss, check.model_logit_std, check.model_expected = model_loss, float(model_logits.std()), \
                model_expected
            check.model_weight_std = weight_std(model)
            check.model_passed = model_loss - model_expected <= INIT_TOLERANCE * uniform
            check.passed = check.passed and check.model_passed
    return check


def weight_std(model) -> float:
    """The std of a model's weight matrices, pooled: every parameter of 2 or more dimensions (embeddings, linear
    layers), what an initialisation draws at random; not the norms' gains and the biases it sets to 1 and 0."""
    weights = [p.detach().float().flatten() for p in model.parameters() if p.dim() >= 2]
    return float(torch.cat(weights).std()) if weights else math.nan


def _same_weights(model, other) -> bool:
    """Whether two models hold the same parameters, exactly: the session's model is the fresh one, drawn again."""
    ours, theirs = dict(model.named_parameters()), dict(other.named_parameters())
    return ours.keys() == theirs.keys() and all(
        ours[name].shape == theirs[name].shape and torch.equal(ours[name].detach(), theirs[name].detach().to(
            ours[name].device)) for name in ours)


def expected_initial_loss(model_config, logits: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> float:
    """The loss a correct fresh model of this kind starts at, on the batch (x, y) whose logits these are.

    Small weights make every logit about 0 (ln V), but for two things. Each logit is h . w for the head's row w of
    std INIT_STD, and h, the final norm's output, has length sqrt(d): the logits spread with std s = INIT_STD
    sqrt(d), which lifts the mean of ln sum exp by s^2 / 2. And a tied head's row for the token read is that token's
    embedding e, which h still points along (post-norm most: every block ends with a norm that puts it back to full
    size, where pre-norm adds the blocks' outputs on top): that token gets a logit b above the rest, at most
    |h| |e| = INIT_STD d. Each position's loss is then ln((V - 1) e^(s^2 / 2) + e^b), less b where the next token
    is the one read (a repeat). s and b are read from the logits, but never above those bounds: a model started
    with larger weights is held to what the initial std allows, and fails."""
    from .model import INIT_STD

    vocab, width = model_config.vocab_size, model_config.d_model
    counted = (y >= 0).cpu()
    if vocab < 2 or not counted.any():
        return math.log(vocab)
    logits = in_float64(logits).cpu()  # float64 where the sums are made: a GPU may lack it (MPS)
    x, y = x.cpu(), y.cpu()
    read = torch.nn.functional.one_hot(x, vocab).bool()
    own = logits.gather(-1, x[..., None])[..., 0]
    others = logits.masked_fill(read, 0.0)
    mean = others.sum(-1) / (vocab - 1)
    spread = ((others - mean[..., None]).masked_fill(read, 0.0).square().sum(-1) / (vocab - 1)).sqrt()
    spread = spread.clamp(max=INIT_STD * math.sqrt(width))
    favour = (own - mean).clamp(0.0, INIT_STD * width) if model_config.tie_embeddings else torch.zeros_like(own)
    per_position = torch.log((vocab - 1) * (spread.square() / 2).exp() + favour.exp()) - favour * (y == x)
    return float(per_position[counted].mean())


def _train(model_config, train_config, data, steps, device, on_step, should_stop, threads=None):
    """A fresh model trained `steps` steps on `data` with the session's settings (no compile: too short to pay)."""
    from .train import Trainer

    config = train_config.replace(steps=steps, eval_every=steps, compile=False)
    trainer = Trainer(_fresh(model_config, config, device), data, config, device)
    trainer.alone = True  # under torchrun every process runs the checks alike, each on its own (no DDP)
    trainer.threads = threads
    trainer.start_run(steps)
    # a stop during the run's evaluation at its end ends it too (evaluated, its val loss stays None: Stopped)
    trainer.run(on_step=on_step, should_stop=should_stop, stop_evaluation=should_stop)
    return trainer


class Stopped(Exception):
    """A stop request (Ctrl-C) came during a training check: the checks end there."""


def blind_check(model_config, train_config, data, steps, device, unigram, on_step=None, should_stop=None,
                threads=None, unigram_scored: bool = False) -> BlindCheck:
    """The same fresh model trained twice on the same batches: on the real inputs, and on inputs all 0. `unigram`:
    the unigram counter's val loss (`unigram_scored`: of the targets the loss scores alone)."""
    runs = []
    for reading in (data, _ZeroInputs(data)):
        trainer = _train(model_config, train_config, reading, steps, device, on_step, should_stop, threads)
        if trainer.step < steps or trainer.history[-1]["val_loss"] is None:  # stopped, in a step or its evaluation
            raise Stopped
        runs.append(trainer)
    real, blind = runs
    learnable = not getattr(data, "nothing_to_learn", False)
    real_loss, blind_loss = real.history[-1]["val_loss"], blind.history[-1]["val_loss"]
    uniform = math.log(data.tokenizer.vocab_size)  # ln V, where both began
    room = uniform - unigram  # where counting alone gets to
    # a loss that grew is no loss that stayed: the signed drop of a run that blew up is negative, and read as "still"
    rose = real_loss - uniform > max(BLIND_ROSE, BLIND_STILL * room)
    still = room > 0 and uniform - min(real_loss, blind_loss) < BLIND_STILL * room and not rose
    return BlindCheck(steps, real_loss, blind_loss, unigram, real.history[0]["train_loss"],
                      data.tokenizer.itos[0], learnable,
                      blind_loss - real_loss >= BLIND_MARGIN and not still and not rose if learnable else None,
                      reads_input=_reads_input(model_config, train_config, data, device),
                      unigram_scored=unigram_scored, still=still, rose=rose)


def _reads_input(model_config, train_config, data, device) -> bool:
    """Whether a fresh model's logits of a val row read the stream at any position: one backward pass. Not at
    d_model=1, where every norm outputs its bias alone, so that no training, however long, could learn anything
    from the input. The fresh model, not the trained one: there rounding leaves gradients of 1e-6 where the maths
    has none."""
    model = _fresh(model_config, train_config, device)
    x, _ = data.get_batch("val", 1, model_config.max_seq_len, torch.Generator().manual_seed(0))
    r = _direction(model, 0)
    return bool((_stream_gradient(model, x.to(device), lambda z: (z @ r).sum()) != 0).any())


def scored_unigram(data, max_seq_len: int) -> float | None:
    """The unigram counter of the targets the loss scores, on val; None where it scores every token (a text, random
    tokens), whose counter :ngram gives. A task's loss counts the answers alone, while :ngram counts the whole rows,
    questions and '=' included: on sort the answer digits are uniform (ln 10 = 2.303), its unigram 2.383."""
    from .ngram import NgramModel, split_tokens

    if getattr(data, "splits", None) is not None:
        return None
    targets = {}
    for split in ("train", "val"):
        tokens, counted = split_tokens(data, split, max_seq_len)
        if counted is None or bool(counted.all()):
            return None
        targets[split] = tokens[:, 1:][counted][None]  # one row: a unigram reads no context
    counter = NgramModel(targets["train"], data.tokenizer.vocab_size, 1)
    return float(-counter.by_order(targets["val"], 1)[0].log().mean())


def overfit_check(model_config, train_config, data, steps, device, rows=OVERFIT_ROWS, on_step=None,
                  should_stop=None, threads=None) -> OverfitCheck:
    """A fresh model trained on one batch of `rows` rows (a training batch from seed 0) for `steps` steps."""
    x, y = data.get_batch("train", rows, model_config.max_seq_len, torch.Generator().manual_seed(0))
    trainer = _train(model_config, train_config.replace(batch_size=rows), _OneBatch(data, x, y), steps, device,
                     on_step, should_stop, threads)
    if trainer.step < steps:
        raise Stopped
    with listening(trainer.model):
        _, loss = trainer.model(x.to(device), y.to(device))
    target = OVERFIT_TARGET * math.log(model_config.vocab_size)
    curve = [row["train_loss"] for row in trainer.history]
    # every row given its question (text: its first token) and asked to write the answer: the tokens its loss
    # counts, up to the first it does not (a repeat row's random tail after the copy is nobody's to recite)
    # The row's last target is the token after its window: a task's answer ends there (sort:4's "4930=034" then "9")
    whole = [torch.cat([x[k], y[k, -1:]]) if y[k, -1] >= 0 else x[k] for k in range(rows)]
    spans = [_answer(whole[k], y[k]) for k in range(rows)]
    runs = [_recited(trainer.model, whole[k].to(device), given, recitable)
            for k, (given, recitable) in enumerate(spans)]
    given, recitable = spans[0]
    # learned by heart: the loss under the target, or every row's answer written again as it stands (a loss above
    # the target that still writes every answer has learned the batch; it is only not yet sure of it)
    every = all(run == length > 0 for run, (_, length) in zip(runs, spans))
    return OverfitCheck(steps, rows, int((y >= 0).sum()), curve[0], float(loss), target, curve,
                        float(loss) <= target or every, given, runs[0], recitable)


def _answer(x_row: torch.Tensor, y_row: torch.Tensor) -> tuple[int, int]:
    """(given, recitable): the tokens of a row given (up to its first counted target) and those then asked for;
    `x_row` the row with its last target after it, where that is counted."""
    counted = y_row >= 0
    given = int(counted.nonzero()[0]) + 1 if counted.any() else 1  # what its loss never asked for
    asked = int(counted[given - 1:].long().cumprod(0).sum())  # the counted targets from there on, in a run
    return given, min(asked, len(x_row) - given)


def _recited(model, row: torch.Tensor, given: int, recitable: int) -> int:
    """The run of the `recitable` tokens after row[:given] that greedy decoding writes as they stand."""
    written = recite(model, row[:given + recitable], given)
    return int((written[given:] == row[given:given + recitable]).long().cumprod(0).sum())


@torch.no_grad()
def recite(model, row: torch.Tensor, given: int) -> torch.Tensor:
    """Greedy decoding from row[:given] to the row's length: (T,) ids, the first `given` of them the row's."""
    written = row[:given]
    with listening(model):
        for _ in range(len(row) - given):
            logits, _ = model(written[None])
            written = torch.cat([written, logits[0, -1].argmax()[None]])
    return written


def run_checks(model, trainer, which=CHECKS, steps: int = 100, unigram=None,
               on_check: Callable[[str], None] | None = None, on_step=None, should_stop=None,
               row: torch.Tensor | None = None, on_pass: Callable[[int, int], None] | None = None) -> Checks:
    """Run the checks named in `which` (in CHECKS's order) for the session's `model` and its `trainer`.

    `steps`: the blind check's runs and the overfit run. `unigram()`: the unigram counter's val loss (:ngram's),
    asked only for the blind check on data whose loss scores every token. `on_check(name)` hears each check start;
    `on_step(info)` every step of the training checks, `on_pass(done, positions)` every backward pass of the causal
    check; `should_stop()` is asked before each check, between training steps and between the causal check's passes
    (a stop ends the checks there: `stopped` names the one it ended). `row`: a window of val text to read in the
    causal check (default: the first row of a val batch from seed 0). Nothing of the session
    changes: fresh models train on their own trainers, and the torch random state is put back afterwards."""
    done = Checks()
    device = trainer.device
    batch = trainer.data.get_batch("val", ROWS, model.config.max_seq_len, torch.Generator().manual_seed(0))
    x, y = batch[0].to(device), batch[1].to(device)
    if row is not None:  # the text the causal check reads (its map's labels): the caller's, as the batch's first row
        x = torch.cat([row.to(device).reshape(1, -1)[:, : x.shape[1]], x[1:]]) if row.numel() >= x.shape[1] else x
    with fork_random(device):
        for name in (c for c in CHECKS if c in which):
            if on_check is not None:
                on_check(name)
            start = time.perf_counter()
            try:
                if should_stop is not None and should_stop():  # Ctrl-C during a check that polls nothing itself
                    raise Stopped
                done.results[name] = _run_one(name, done, model, trainer, x, y, steps, unigram, on_step, should_stop,
                                              on_pass)
            except Stopped:
                done.stopped = name
                break
            except TrainingDiverged as e:  # the other checks still run: they need no training
                done.results[name] = Diverged(name, f"its training diverged at step {e.step} ({e.what} {e.value:g}) "
                                                    f"at lr={trainer.config.lr:g}; lower lr")
            done.seconds[name] = time.perf_counter() - start
    return done


def _run_one(name, done, model, trainer, x, y, steps, unigram, on_step, should_stop, on_pass=None):
    """One check of run_checks, or Skipped with the reason."""
    data, device = trainer.data, trainer.device
    model_config, train_config = model.config, trainer.config
    n_params = model.num_parameters()
    if name in ("init", "blind", "overfit") and n_params > TRAINING_LIMIT:
        return Skipped(name, f"it builds fresh models of the {n_params:,} parameters, and does so only for a "
                             f"model of up to {TRAINING_LIMIT:,}")
    if name == "gradient" and n_params > CHECK_LIMIT:
        return Skipped(name, f"it needs a float64 copy of the {n_params:,} parameters, and makes one only for a "
                             f"model of up to {CHECK_LIMIT:,}")
    if name == "batch":  # the first few rows of a batch of the session's size (all of them where it is smaller)
        batch_size = train_config.batch_size
        return batch_check(data, min(ROWS, batch_size), model_config.max_seq_len, batch_size)
    if name == "init":
        splits = getattr(data, "splits", None)  # a text: its validation split is all there is to score
        if splits is not None and len(splits["val"]) - 1 < INIT_FEWEST:
            return Skipped(name, f"the validation text holds {count(len(splits['val']) - 1, 'next token')} to score, "
                                 f"too few for their mean to say how near ln V a fresh model starts (it takes "
                                 f"{INIT_FEWEST}); a longer text checks it")
        # an untrained session model is scored too where it is not a fresh one: a loaded std-1 model passed on the
        # fresh model's 4.620 while its own loss was 28.4; one that trained has left its start behind
        return init_check(model_config, trainer, should_stop, model=model if trainer.step == 0 else None)
    if name == "rows":
        return rows_check(model, x)
    if name == "causal":  # where rows were seen to mix, one position per pass (the copies would mix too)
        rows = done.results.get("rows")
        def passed_one(done_positions: int, positions: int) -> None:
            if on_pass is not None:
                on_pass(done_positions, positions)
            if should_stop is not None and should_stop():
                raise Stopped

        check = causal_check(model, x[0, :CAUSAL_WINDOW],
                             chunk=1 if isinstance(rows, RowsCheck) and not rows.passed else CHUNK, on_pass=passed_one)
        from .bpe import shown_pieces

        check.tokens = shown_pieces(data.tokenizer, x[0, : len(check.map)])  # a byte of a character as \xe4
        return check
    if name == "gradient":
        check = gradient_agreement(model, x[:1], y[:1])
        if training_dtype(train_config.dtype, x.device) != "float32":  # the check is float32's, :train's bfloat16's
            done.gradient_training = training_agreement(model, x[:1], y[:1], train_config.dtype, check.measured)
        return check
    if name == "blind":  # the yardstick counts what the loss scores: a task's answers, not :ngram's whole rows
        scored = scored_unigram(data, model_config.max_seq_len)
        counter = scored if scored is not None else unigram() if unigram is not None else float("nan")
        return blind_check(model_config, train_config, data, steps, device, counter, on_step, should_stop,
                           trainer.threads, unigram_scored=scored is not None)
    if name == "overfit":
        return overfit_check(model_config, train_config, data, steps, device, on_step=on_step,
                             should_stop=should_stop, threads=trainer.threads)
    raise ValueError(f"no check is called {name!r}; the checks are {', '.join(CHECKS)}")


def passed(check) -> bool | None:
    """Whether a check passed: True, False, or None (skipped, or nothing to show here)."""
    if isinstance(check, Diverged):
        return False
    if isinstance(check, Skipped):
        return None
    if isinstance(check, GradientCheck):
        return check.relative <= GRADIENT_TOLERANCE
    return check.passed
