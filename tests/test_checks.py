"""`:checks` (core.checks): each check passes on a correct model of every kind and fails on a model broken the
way it is meant to catch; the session is left as it was; the command, its stop and its JSON."""

import json
import math

import pytest
import torch

from minitf_repl.core import checks
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import RandomTokens
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer
from minitf_repl.commands import REGISTRY
from minitf_repl.commands.checks import CHECK_NAMES, asked_checks
from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import json_document
from minitf_repl.reporter import Reporter
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of

TEXT = ("The quick brown fox jumps over the lazy dog. A lazy dog sleeps; the fox runs on. " * 40
        + "Pack my box with five dozen liquor jugs. How vexingly quick daft zebras jump! " * 40)
SMALL = dict(n_layers=2, d_model=32, n_heads=2, d_ff=64, max_seq_len=24)  # unequal sizes: a swapped axis fails


def small(**changes) -> ModelConfig:
    return ModelConfig(**{**SMALL, **changes})


def model_and_batch(config: ModelConfig, data, rows: int = 3):
    torch.manual_seed(0)
    model = MiniTransformerLM(config.replace(vocab_size=data.tokenizer.vocab_size))
    x, y = data.get_batch("val", rows, config.max_seq_len, torch.Generator().manual_seed(0))
    return model, x, y


@pytest.fixture
def session(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT)
    s = Session(small(), data_spec=str(path), checkpoint_dir=tmp_path / "ck")
    s.trainer.set_config(s.trainer.config.replace(batch_size=4, eval_batches=2))
    return s


# --- every kind of model passes the checks on itself --------------------------------------------------------
VARIANTS = [
    {},
    {"pos_encoding": "rope"},
    {"pos_encoding": "sinusoidal"},
    {"pos_encoding": "none"},
    {"norm": "rmsnorm", "activation": "swiglu"},
    {"norm_placement": "post"},
    {"n_kv_heads": 1},
    {"n_experts": 3, "experts_per_token": 2},
    {"tie_embeddings": False},
    {"attention": "sdpa"},
]


@pytest.mark.parametrize("changes", VARIANTS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "default")
def test_every_variant_passes_rows_causal_and_gradient(session, changes):
    model, x, y = model_and_batch(small(**changes), session.data)
    rows = checks.rows_check(model, x)
    assert rows.passed and rows.other_largest == 0.0 and rows.own_size > 0
    causal = checks.causal_check(model, x[0])
    T = small().max_seq_len
    assert causal.passed and causal.later_read == 0 and causal.later_pairs == T * (T - 1) // 2
    assert causal.later_largest == 0.0
    assert causal.earlier_unread == 0 and causal.weakest_earlier > 0  # a causal model reads all of its past
    grad = checks.gradient_agreement(model, x[:1], y[:1])
    assert checks.passed(grad) and grad.relative < 1e-5


def test_the_dependency_map_in_chunks_is_the_map_one_position_at_a_time(session):
    """Asking 8 positions per pass (one per copy of the row) gives what one backward pass per position gives."""
    model, x, _ = model_and_batch(small(), session.data)
    chunked = checks.causal_check(model, x[1], chunk=8)
    single = checks.causal_check(model, x[1], chunk=1)
    assert torch.allclose(torch.tensor(chunked.map), torch.tensor(single.map), rtol=1e-5, atol=1e-7)
    assert chunked.weakest_earlier == pytest.approx(single.weakest_earlier, rel=1e-5)
    # and against autograd's Jacobian of position t's logits through the embedding probe, t = 5
    T, t = x.shape[1], 5
    r = checks._direction(model, 0)
    direct = checks._stream_gradient(model, x[1:2], lambda z: z[0, t] @ r)[0].norm(dim=-1)
    row = torch.tensor(single.map[t]) * direct[: checks.MAP].max()
    assert torch.allclose(row, direct[: checks.MAP], rtol=1e-5, atol=1e-8)
    assert (direct[t + 1 :] == 0).all() and T > t + 1


# --- each check fails on the bug it is for -------------------------------------------------------------------
def test_causal_fails_without_the_mask_and_counts_every_later_pair(session):
    model, x, _ = model_and_batch(small(causal=False), session.data)
    causal = checks.causal_check(model, x[0])
    assert not causal.passed and causal.later_read == causal.later_pairs and causal.later_largest > 0


def test_causal_catches_a_leak_of_one_position(session):
    """A bug that lets each position see the next one (a shift the wrong way) is T - 1 pairs, exactly."""
    model, x, _ = model_and_batch(small(), session.data)
    T = x.shape[1]

    def leak(module, args, output):  # after the last block: position t gets position t + 1's stream added
        return torch.cat([output[:, :-1] + output[:, 1:], output[:, -1:]], dim=1)

    handle = model.blocks[-1].register_forward_hook(leak)
    try:
        causal = checks.causal_check(model, x[0])
    finally:
        handle.remove()
    assert not causal.passed and causal.later_read == T - 1
    assert all(causal.map[t][t + 1] > 0 for t in range(checks.MAP - 1))


def test_rows_fail_when_the_batch_mixes_and_causal_then_asks_one_position_a_pass(session):
    """A batch-wide mean (what a batch norm does) mixes rows; the copies the causal check makes would mix too,
    so after a failed rows check it asks one position per pass, and still finds the model causal."""
    model, x, _ = model_and_batch(small(), session.data)

    def batch_mean(module, args, output):
        return output + output.mean(dim=0, keepdim=True)

    handle = model.blocks[0].register_forward_hook(batch_mean)
    try:
        rows = checks.rows_check(model, x)
        assert not rows.passed and rows.other_largest > 0
        mixed = checks.causal_check(model, x[0], chunk=8)  # copies mix: later positions seem to be read
        assert not mixed.passed
        trainer = Trainer(model, session.data, TrainConfig(batch_size=4, eval_batches=1))
        done = checks.run_checks(model, trainer, ("rows", "causal"))
        assert not done.results["rows"].passed and done.results["causal"].passed
    finally:
        handle.remove()


class WrongBackward(torch.autograd.Function):
    """The identity, with a backward that scales the gradient by `factor`: the kind of bug a hand-written backward
    has (tests/test_grad.py takes it 1% too large)."""

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return ctx.factor * grad, None


def test_gradient_fails_on_a_wrong_backward(session):
    model, x, y = model_and_batch(small(), session.data)
    handle = model.ln_f.register_forward_hook(lambda m, a, out: WrongBackward.apply(out, 2.0))
    try:
        grad = checks.gradient_agreement(model, x[:1], y[:1])
    finally:
        handle.remove()
    assert not checks.passed(grad) and grad.relative > 0.1


def test_init_passes_at_small_weights_and_fails_at_large_ones(session, monkeypatch):
    good = checks.init_check(session.model_config, session.trainer)
    assert good.passed and abs(good.loss - math.log(session.data.tokenizer.vocab_size)) < 0.05
    assert good.logit_std == pytest.approx(0.02 * math.sqrt(SMALL["d_model"]), rel=0.25)  # LN output x W_E, tied

    def too_large(module):
        if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
            torch.nn.init.normal_(module.weight, std=1.0)

    monkeypatch.setattr(MiniTransformerLM, "_init_weights", staticmethod(too_large))
    bad = checks.init_check(session.model_config, session.trainer)
    assert not bad.passed and bad.loss > good.loss + 1 and bad.logit_std > 1


def test_blind_passes_with_a_working_rate_and_fails_with_none(session):
    config, trainer = session.model_config, session.trainer
    ok = checks.blind_check(config, trainer.config, session.data, 60, trainer.device, unigram=3.0)
    assert ok.passed and ok.blind_loss - ok.real_loss >= checks.BLIND_MARGIN
    assert ok.first_loss == pytest.approx(math.log(session.data.tokenizer.vocab_size), abs=0.2)
    frozen = checks.blind_check(config, trainer.config.replace(lr=1e-9), session.data, 20, trainer.device, 3.0)
    assert frozen.passed is False and frozen.blind_loss - frozen.real_loss < checks.BLIND_MARGIN


def test_blind_has_nothing_to_show_on_random_tokens(session):
    data = RandomTokens(7)
    config = small(vocab_size=7)
    check = checks.blind_check(config, session.trainer.config, data, 10, "cpu", unigram=math.log(7))
    assert check.learnable is False and check.passed is None
    assert checks.passed(check) is None


def test_blind_reads_only_zeros_and_the_real_run_reads_the_text(session):
    blind = checks._ZeroInputs(session.data)
    x, y = blind.get_batch("train", 2, 24, torch.Generator().manual_seed(3))
    x0, y0 = session.data.get_batch("train", 2, 24, torch.Generator().manual_seed(3))
    assert (x == 0).all() and torch.equal(y, y0) and not (x0 == 0).all()
    assert blind.accuracy is None  # a task's accuracy would read the real questions
    assert blind.tokenizer is session.data.tokenizer


def test_overfit_learns_two_rows_and_fails_without_a_rate(session):
    config, trainer = session.model_config, session.trainer
    ok = checks.overfit_check(config, trainer.config, session.data, 120, trainer.device)
    assert ok.passed and ok.final_loss <= ok.target and ok.rows == 2 and ok.tokens == 2 * SMALL["max_seq_len"]
    assert len(ok.curve) == 120 and ok.curve[0] > ok.curve[-1]
    assert ok.given == 1 and ok.recited == ok.recitable == SMALL["max_seq_len"]  # the row again, and the next token
    stuck = checks.overfit_check(config, trainer.config.replace(lr=1e-9), session.data, 10, trainer.device)
    assert not stuck.passed and stuck.final_loss > stuck.target and stuck.recited < stuck.recitable


# --- the session is left as it was ---------------------------------------------------------------------------
def test_checks_change_nothing_of_the_session(session):
    run(session, ":train steps=5")
    trainer = session.trainer
    weights = {k: v.clone() for k, v in session.model.state_dict().items()}
    moments = [s["momentum_buffer"].clone() if "momentum_buffer" in s else None
               for s in trainer.optimizer.state.values()]
    batches = trainer.generator.get_state().clone()
    torch.rand(7)  # a state no seed gives: reseeding it would show
    rng = torch.get_rng_state().clone()
    history = [dict(row) for row in trainer.history]
    grads = [p.grad for p in session.model.parameters()]
    result = run(session, ":checks steps=5")
    assert result.stopped is None and len(result.passed + result.failed) == 7  # 5 steps: blind, overfit may fail
    assert trainer.step == 5 and trainer.history == history
    assert all(torch.equal(v, session.model.state_dict()[k]) for k, v in weights.items())
    assert torch.equal(trainer.generator.get_state(), batches) and torch.equal(torch.get_rng_state(), rng)
    after = [s["momentum_buffer"] if "momentum_buffer" in s else None for s in trainer.optimizer.state.values()]
    assert all(a is None and b is None or torch.equal(a, b) for a, b in zip(moments, after))
    assert all(a is b for a, b in zip(grads, [p.grad for p in session.model.parameters()]))
    assert session.model.training  # a listening pass puts the flag back


# --- the command ---------------------------------------------------------------------------------------------
def test_asked_checks_reads_names_in_any_order():
    assert CHECK_NAMES == checks.CHECKS  # the command's torch-free copy of the names
    assert asked_checks(None) == list(CHECK_NAMES)
    assert asked_checks("overfit causal") == ["causal", "overfit"]
    assert asked_checks("rows,init rows") == ["init", "rows"]
    with pytest.raises(UserError, match="no check is called 'caussal'; the checks are batch, init, rows"):
        asked_checks("caussal")


def test_the_command_runs_all_and_renders_every_line(session):
    result = run(session, ":checks steps=60")
    assert result.asked == list(CHECK_NAMES) and set(result.passed) == set(CHECK_NAMES) and not result.failed
    assert set(result.seconds) == set(CHECK_NAMES)
    text = text_of(result, width=120)
    for name in CHECK_NAMES:
        assert f"pass {name}" in plain(result, 120)
    assert "all 7 checks passed" in plain(result, 120)
    assert (f"half of what position t's logits depend on lies on the {result.causal.reach_half:.1f} positions nearest"
            in plain(result, 120))
    lines = text.splitlines()
    end = next(k for k, line in enumerate(lines) if line.startswith("share of the row's largest"))  # the legend
    rows = lines[end - checks.MAP : end]
    label = "".join(result.causal.tokens).replace(" ", "␣")
    assert lines[end - checks.MAP - 1].strip() == label and label[0].isupper()  # the sample prompt's sentence
    for t, row in enumerate(rows):  # the label, then t + 1 shaded cells; the masked future blank
        cells = row[2:]
        assert row[0] == result.causal.tokens[t].replace(" ", "␣") and len(cells.rstrip()) == t + 1, (t, row)
        assert " " not in cells[: t + 1] and cells[t] == "@"  # each position reads itself most (the skip path)
    first = next(k for k, line in enumerate(lines) if line.startswith("the batch's first row"))
    x, y = lines[first + 1 : first + 3]
    assert x.startswith("x ") and y.startswith("y ") and y[2:].startswith(x[3:3 + 40])  # y is x moved one left


def test_a_failed_check_says_what_to_do(session):
    run(session, ":set causal=off")
    result = run(session, ":checks rows causal")
    assert result.failed == ["causal"] and result.passed == ["rows"] and result.asked == ["rows", "causal"]
    text = plain(result, 100)
    assert "FAIL causal" in text and ":set causal=on puts the mask back" in text
    lines = text_of(result, 100).splitlines()
    end = next(k for k, line in enumerate(lines) if line.startswith("share of the row's largest"))
    assert len(lines[end - checks.MAP][2:].rstrip()) == checks.MAP  # position 0 reads every later one: drawn
    assert "above the diagonal: position t reading a later position s" in text
    assert "1 of 2 checks failed: causal" in text
    run(session, ":set causal=on")
    run(session, ":ablate mask")
    result = run(session, ":checks causal")
    text = plain(result, 100)
    assert result.failed == ["causal"] and ":ablate off puts it back" in text


class _StopAfter(Reporter):
    def __init__(self, steps: int):
        super().__init__()
        self.steps, self.progress = steps, []

    def on_progress(self, what, done, total):
        if what != "checks":  # the causal check's passes (test_sweep_rr): the training steps are counted here
            return
        self.progress.append((what, done, total))
        if done >= self.steps:
            self.request_stop()


def test_a_stop_ends_the_checks_and_keeps_those_done(session):
    reporter = _StopAfter(3)
    result = run(session, ":checks steps=20", reporter)
    assert result.stopped == "blind" and result.blind is None and result.overfit is None
    assert result.passed == ["batch", "init", "rows", "causal", "gradient"]
    assert reporter.progress[:3] == [("checks", 1, 60), ("checks", 2, 60), ("checks", 3, 60)]
    text = plain(result, 100)
    assert "stop blind" in text and "stopped during blind: 5 checks ran before it, each passed" in text


def test_big_models_skip_what_they_cannot_afford(session, monkeypatch):
    monkeypatch.setattr(checks, "TRAINING_LIMIT", 10)
    monkeypatch.setattr(checks, "CHECK_LIMIT", 10)
    result = run(session, ":checks")
    assert [s.name for s in result.skipped] == ["init", "gradient", "blind", "overfit"]
    assert result.passed == ["batch", "rows", "causal"]
    assert "skip init" in plain(result, 100)


def test_the_json_document(session):
    result = run(session, ":checks init rows")
    doc = json.loads(json.dumps(json_document(REGISTRY["checks"], result)))
    assert doc["schema"] == "minitf.checks/11" and doc["passed"] == ["init", "rows"]
    assert doc["rows"]["other_largest"] == 0.0 and doc["causal"] is None and doc["init"]["passed"] is True


def test_checks_on_a_task(tmp_path):
    s = Session(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16), data_spec="sort:4",
                checkpoint_dir=tmp_path)
    s.trainer.set_config(s.trainer.config.replace(batch_size=4, eval_batches=2))
    result = run(s, ":checks init rows causal gradient batch")
    assert result.passed == ["batch", "init", "rows", "causal", "gradient"]
    batch = result.batch
    assert batch.counted == 4 * 4 and batch.mismatched == 0  # sort:4: each row counts its answer's 4 digits
    question = batch.y.index(next(t for t in batch.y if t is not None))
    assert all(t is None for t in batch.y[:question]) and batch.x[question] == "="
    assert "y ····0" in text_of(result, 100)  # the question not counted, the answer's digits
    result = run(s, ":checks overfit steps=150")
    overfit = result.overfit
    assert overfit.passed and overfit.given == 5 and overfit.recited == overfit.recitable == 4  # "4930=" then "0349"
    assert "given the first row's first 5 characters (what its loss does not count), it writes 4 of the 4" in plain(
        result, 200)


class _NotShifted:
    """A data bug: the targets are the inputs themselves, not the next tokens."""

    def __init__(self, data):
        self.data = data

    def __getattr__(self, name):
        return getattr(self.data, name)

    def get_batch(self, split, batch_size, max_seq_len, generator):
        x, _ = self.data.get_batch(split, batch_size, max_seq_len, generator)
        return x, x.clone()


def test_batch_fails_when_the_targets_are_not_shifted(session):
    good = checks.batch_check(session.data, 3, 24)
    assert good.passed and good.counted == 3 * 24 and good.rows == 3
    assert good.y[:-1] == good.x[1:] and len(good.x) == 24
    bad = checks.batch_check(_NotShifted(session.data), 3, 24)
    assert not bad.passed and bad.mismatched > 0.5 * 3 * 23  # a character rarely repeats at once
    session.trainer.data = _NotShifted(session.data)
    result = run(session, ":checks batch")
    assert result.failed == ["batch"]
    assert "the model is trained to predict something other than the next token" in plain(result, 100)


def test_a_long_window_is_checked_over_its_first_positions(session, monkeypatch):
    monkeypatch.setattr(checks, "CAUSAL_WINDOW", 10)
    result = run(session, ":checks causal")
    assert result.causal.positions == 10 and result.causal.window == SMALL["max_seq_len"]
    assert result.causal.later_pairs == 45 and result.passed == ["causal"]
    assert "over the first 10 of the window's 24 characters" in plain(result, 100)


def test_reach_counts_the_nearest_positions_holding_half_and_most():
    T = 8
    only_itself = torch.eye(T)
    assert checks.reach(only_itself) == (1.0, 1.0)
    even = torch.ones(T, T).tril()  # every past position alike: rows t = 4..7 have 5..8 positions
    half, most = checks.reach(even)
    assert half == pytest.approx(sum(math.ceil(0.5 * (t + 1)) for t in range(4, 8)) / 4)  # (3 + 3 + 4 + 4) / 4
    assert most == pytest.approx(sum(math.ceil(0.9 * (t + 1)) for t in range(4, 8)) / 4)
    far = torch.zeros(T, T)
    far[:, 0] = 1.0  # every position reads only the first one
    assert checks.reach(far) == pytest.approx((sum(t + 1 for t in range(4, 8)) / 4,) * 2)


def test_without_a_position_table_the_blind_model_cannot_tell_positions_apart(session):
    run(session, ":set pos_encoding=none")
    result = run(session, ":checks blind steps=60")
    assert result.passed == ["blind"] and not result.position_table
    assert "nothing tells one position from another" in plain(result, 100)
    run(session, ":set pos_encoding=learned")
    assert "still knows each position" in plain(run(session, ":checks blind steps=60"), 100)


def test_a_tied_post_norm_model_starts_under_ln_v_by_reading_its_own_token(tmp_path):
    """Found by :checks itself: with the head tied to the embedding and a norm after every block, a fresh model's
    likeliest next token is the one it reads, and on pydoc (a fifth of its next characters repeat the one before)
    that starts it 0.4 nats under ln V. An untied head starts at ln V."""
    s = Session(data_spec="pydoc", checkpoint_dir=tmp_path)
    run(s, ":set norm_placement=post")
    result = run(s, ":checks init")
    init = result.init
    # a correct model: the check expects the start under ln V (test_sweep_ao), so it passes
    assert result.passed == ["init"] and init.loss < init.uniform - 0.2 and init.reads_own > 0.9
    assert init.own_p > 3 / s.data.tokenizer.vocab_size
    text = plain(result, 120)
    assert "less the tied head's favour for the token read" in text
    run(s, ":set tie_embeddings=off")
    assert run(s, ":checks init").passed == ["init"]


def test_without_the_residual_add_a_failed_training_check_says_so(session):
    run(session, ":set residual=off")
    result = run(session, ":checks overfit steps=3")
    assert result.failed == ["overfit"]
    assert "Here the residual add is off" in plain(result, 120) and ":set residual=on puts the add back" in plain(
        result, 120)


def test_the_batch_rows_fit_the_console_and_stand_pair_by_pair(session):
    result = run(session, ":checks batch")
    lines = text_of(result, width=30).splitlines()
    x, y = [line for line in lines if line[:2] in ("x ", "y ")]
    assert len(x) <= 30 and len(y) <= 30 and y[2:-1] == x[3:]
    assert "the check passed" in plain(result, 100)


def test_random_tokens_pass_with_blind_set_aside(tmp_path):
    s = Session(small(), data_spec="random:9", checkpoint_dir=tmp_path)
    s.trainer.set_config(s.trainer.config.replace(batch_size=4, eval_batches=2))
    result = run(s, ":checks blind init steps=20")
    assert result.passed == ["init"] and not result.failed and result.blind.passed is None
    assert "the check passed; blind had nothing to show here" in plain(result, 100)


def test_a_run_that_learns_nothing_points_to_the_checks(session):
    # a rate too small to move the weights is named instead (test_sweep_qq: lr=1e-9); 1e-4 moves them (6e-3 in all
    # over 60 steps) and still learns nothing here: the checks' case
    stuck = run(session, ":train steps=60 lr=1e-4 eval_every=30")
    assert stuck.val_loss > 0.9 * math.log(stuck.vocab_size)
    assert ":checks overfit says whether it can learn at all" in plain(stuck, 200)
    learned = run(session, ":train steps=60 lr=1e-2")
    assert "learned almost nothing" not in plain(learned, 200)
    short = run(session, ":train steps=10 lr=1e-9")  # too short to say
    assert "learned almost nothing" not in plain(short, 200)


def test_random_tokens_are_not_said_to_have_learned_nothing(tmp_path):
    s = Session(small(), data_spec="random:9", checkpoint_dir=tmp_path)
    s.trainer.set_config(s.trainer.config.replace(batch_size=4, eval_batches=2))
    result = run(s, ":train steps=60")
    assert not result.learnable and "learned almost nothing" not in plain(result, 200)
