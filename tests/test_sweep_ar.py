"""Every command's arguments, fuzzed: a seeded harness types edge values, wrong kinds, typos, quotes, unicode, control
characters, `#` and 100k-character arguments into every command, in the REPL and the one-shot shell; each test below
it pins one thing it found, and failed before its fix.

`:set d_model=1e308` (or n_layers=1e308, d_ff=1e308: `1e308` is a whole number as typed) ended in "internal error:
OverflowError: int too large to convert to float": the refusal of a model past the parameter limit formatted its count
through a float. It is now the refusal it was meant to be, "that model would have about 4.0e+616 parameters, more than
this lab's limit of 500M; lower d_model, d_ff or n_layers", and nothing changed.
`:set weight_decay=1e19` then `:train` diverged, and the message said "Lower the learning rate (0.01 diverged; 0.001 is
a tenth of it)": at lr 0.001 it diverged again, as at any rate a learner could try, since each step multiplies the
matrices by 1 - lr * weight_decay. Where that product is 1 or more the message now names weight_decay, what it does
to the matrices, and its default as the fix.
`:set lr=1e308` then `:grad` ended in "internal error: RuntimeError: value cannot be converted to type float without
overflow": the optimizer step whose size :grad shows could not hold -lr as a float32 (:train already said so as a
divergence). It is one error line now, "the step at lr=1e+308 cannot be taken: ...; lower the learning rate", with the
weights and the optimizer's state as they were.
A whole number typed in e-notation went through a float: `:qkv 12 at=1e30` said "got 1000000000000000019884624838656"
and `:gen top_k=1e30` said "top_k=1,000,000,000,000,000,019,884,624,838,656 keeps every token", numbers the user never
typed. parsing.whole_number reads the digits exactly now (Decimal): 1e30 is 10**30, 1e308 is 10**308.
`:train steps=2 lr=5e-324` trained, but its cosine ended at a rate of 0.0 (the floor underflows), and from then on every
`:train` was refused with "a constant learning rate must be a positive number, got 0.0" (it went on at the last run's
final rate), `:set lr=1e-3` said ":train goes on at a constant 0". A final rate of 0 is no rate to go on at now:
`:train` starts a new run, and `schedule=continue` alone says why it cannot and that `schedule=new` starts one.
`:set norm_eps=5e-324` was taken (its range was (0, 1]), but float32 weights hold it as 0: with dropout near 1 a
stream of zeros made every norm 0 / sqrt(0 + 0), the loss nan at step 1, and the message said "Lower the learning
rate". norm_eps is at least 1e-38 now (about float32's smallest normal number); below it is refused as out of range.
"""

import io
import random
import time

import pytest
import torch
from rich.console import Console

from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import ConfigError, TrainingDiverged, UserError
from minitf_repl.dispatch import FAILED, OK, FrontDoor, FrontEnd
from minitf_repl.parsing import whole_number

from test_cli import TINY as TINY_SHELL, invoke
from test_commands import run, tiny_session

# --- the harness ------------------------------------------------------------------------------------------------
NUMBERS = ["0", "1", "-1", "2", "1" + "0" * 30, "1e-45", "5e-324", "1e308", "nan", "inf", "-inf", "-0.0", "0x10",
           "1_000", "3.5", "1e400", "+5", "\u0663"]
WORDS = ["abc", "", "none", "on", "off", "\u00e9", "\u202eabc", "a\u0301", "\U0001f600", "\u200b", "\x00",
         "\x1b[31mred", "a\rb", '"abc', "a'b", "a\\b", "\\", "#x", "x # c", "-", "--", "=", "==", "a=b=c", "ALL", "1,2",
         " "]
LONG = "a" * 100_000
# Commands whose valid values run for long (a whole training, every check, a report) or write files: the harness
# gives them a few lines of its own in test_fuzz_the_slow_commands_with_tiny_values.
SLOW = {"quit", "train", "compare", "lrfind", "checks", "report", "ngram", "context", "mistakes", "save", "quantize"}
SECONDS = 10  # one line of the fast commands, a 100k-character argument included


def fuzz_lines(command, rng: random.Random, count: int) -> list[str]:
    """`count` argument lines for `command`: its own options and text with edge values, wrong kinds, typos of its
    keys, empty keys and values, flags, unicode, control characters, quotes and comments, mixed at random."""
    params = [p for p in command.params if p.refusal is None]
    lines = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(0, 3)):
            if params and rng.random() < 0.6:
                p = rng.choice(params)
                value = rng.choice(NUMBERS + WORDS + [str(c) for c in p.choices or ()])
                if p.positional:
                    parts.append(value)
                    continue
                key = rng.choice([p.name, p.name, p.name[:-1] + "x", "", p.name.upper()])
                form = rng.random()
                parts.append(f"--{key} {value}" if form < 0.2 else f"--{key}" if form < 0.3 else f"{key}={value}")
            else:
                parts.append(rng.choice(NUMBERS + WORDS))
        lines.append(f":{command.name} " + " ".join(parts))
    return lines


def door(session) -> tuple[FrontDoor, Console, Console]:
    out, err = (Console(file=io.StringIO(), width=100_000, color_system=None) for _ in range(2))  # no wrapping
    return FrontDoor(session, out, err, FrontEnd(live=False)), out, err


def settings(session) -> tuple:
    return session.model_config, session.train_config, session.gen_config, session.data_spec


def weights(session) -> dict:
    return {k: v.detach().clone() for k, v in session.model.state_dict().items()} if session.has_model else {}


def same_weights(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def check_line(session, line: str) -> None:
    """The harness's assertions for one line: no internal error or traceback, one error line for a refusal, nothing
    changed by it, bounded time, and the session still answers."""
    before, held = settings(session), weights(session)
    front, out, err = door(session)
    started = time.perf_counter()
    status = front.run_line(line)
    took = time.perf_counter() - started
    said = err.file.getvalue()
    assert "internal error" not in said and "Traceback" not in said, (line[:200], said)
    assert took < SECONDS, (line[:200], took)
    if status == FAILED:
        assert len(said.strip().splitlines()) == 1 and said.startswith("error: "), (line[:200], said)
        assert settings(session) == before, line[:200]
        assert same_weights(weights(session), held), line[:200]
    else:
        assert status == OK, (line[:200], status, said)
    after, _, err_after = door(session)
    assert after.run_line(":config") == OK, (line[:200], err_after.file.getvalue())


def built_session():
    """The tiny session with its data read and its model built: the vocabulary a first build sets is not a change."""
    session = tiny_session()
    run(session, ":gen 12 n=1")
    return session


def fast_commands():
    return [c for c in REGISTRY.values() if c.name not in SLOW]


@pytest.mark.parametrize("command", fast_commands(), ids=lambda c: c.name)
def test_fuzz_every_fast_command_in_the_repl(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(f"ar:{command.name}")
    session = built_session()
    for line in fuzz_lines(command, rng, 6) + [f":{command.name} {LONG}", f":{command.name} x={LONG}"]:
        check_line(session, line)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("command", fast_commands(), ids=lambda c: c.name)
def test_fuzz_every_fast_command_in_the_repl_at_length(command, seed, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(f"ar:{command.name}:{seed}")
    session = built_session()
    for line in fuzz_lines(command, rng, 40):
        check_line(session, line)


@pytest.mark.parametrize("line", [
    ":train steps=0", ":train steps=1e30", ":train steps=nan", ":train lr=-0.0 steps=1", ":train stepz=1",
    ":train steps=1 watch=attn prompt=\x00", ":train steps=1 # a comment", ":compare steps=1e30 rope",
    ":compare steps=0 rope vs learned", ":lrfind steps=1e30", ":lrfind low=nan", ":lrfind low=1 high=0.1",
    ":checks nonsense", ":checks steps=1e30", ":report \x00", ":ngram n=1e30", ":ngram n=0", ":context windows=1e30",
    ":mistakes n=1e30", ":mistakes show=-1", ":save \x1b[31mred", ":save " + LONG, ":quantize 1e308",
    ":quantize \u202eint8",
])  # fmt: skip
def test_fuzz_the_slow_commands_with_tiny_values(line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_line(built_session(), line)


SHELL_VALUES = ["0", "-1", "1" + "0" * 30, "1e308", "nan", "-0.0", "abc", "", "\x00", "\x1b[31m", "a\rb", '"abc',
                "\\", "#", "\U0001f600", "\u200b", LONG, "=", "x=", "=1", "-"]


def shell_args(command, rng: random.Random) -> list[str]:
    params = [p for p in command.params if p.refusal is None]
    args = []
    for _ in range(rng.randint(1, 3)):
        value, p, form = rng.choice(SHELL_VALUES), rng.choice(params) if params else None, rng.random()
        flag = None if p is None or p.positional else "--" + p.name.replace("_", "-")
        if flag is None or form < 0.3:
            args.append(value)
        elif command.pairs:
            args.append(f"{p.name}={value}")
        else:
            args += [flag, value] if form < 0.6 else [f"{flag}={value}"] if form < 0.8 else [flag[:-1]]
    return args


@pytest.mark.parametrize("command", [c for c in fast_commands() if not c.repl_only], ids=lambda c: c.name)
def test_fuzz_every_fast_command_in_the_shell(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(f"ar-shell:{command.name}")
    for _ in range(3):
        args = shell_args(command, rng)
        started = time.perf_counter()
        result = invoke(*TINY_SHELL, command.name, *args)
        assert time.perf_counter() - started < SECONDS, args
        said = result.stderr
        assert "internal error" not in said and "Traceback" not in said, ([a[:40] for a in args], said)
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        if result.exit_code != 0:
            assert len(said.strip().splitlines()) == 1 and said.startswith("error: "), ([a[:40] for a in args], said)


# --- what it found ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["d_model", "n_layers", "d_ff"])
def test_set_a_size_of_1e308_is_refused_as_too_many_parameters_not_an_internal_error(key):
    session = tiny_session()
    before = settings(session)
    # n_layers has a ceiling of its own now (1,024 blocks), said before any count of parameters
    said = r"n_layers must be in \[1, 1024\]" if key == "n_layers" else \
        r"would have about \S+e\+\d+ parameters, more than this lab's limit"
    with pytest.raises(ConfigError, match=said):
        run(session, f":set {key}=1e308")
    assert settings(session) == before
    check_line(session, f":set {key}=1e308")


def test_shell_set_a_size_of_1e308_is_one_error_line():
    result = invoke(*TINY_SHELL, "set", "d_model=1e308")
    assert result.exit_code == 1 and "internal error" not in result.stderr
    assert "parameters, more than this lab's limit of 500M" in result.stderr


def test_a_divergence_from_a_huge_weight_decay_names_weight_decay_not_the_rate():
    session = tiny_session()
    run(session, ":set weight_decay=1e19")
    with pytest.raises(TrainingDiverged) as caught:
        run(session, ":train steps=1")
    assert "Lower weight_decay" in str(caught.value) and "lr * weight_decay" in str(caught.value)
    assert "Lower the learning rate" not in str(caught.value)
    assert caught.value.fix == {"weight_decay": 0.01}
    run(session, ":set weight_decay=0.01")
    run(session, ":train steps=1")  # the fix it gave trains


def test_a_divergence_from_the_rate_alone_still_names_the_rate():
    session = tiny_session()
    run(session, ":set lr=1e30")
    with pytest.raises(TrainingDiverged, match="Lower the learning rate"):
        run(session, ":train steps=1")


def test_grad_at_a_rate_whose_step_overflows_is_one_error_line_and_changes_nothing():
    session = built_session()
    run(session, ":set lr=1e308")
    weights = {k: v.clone() for k, v in session.model.state_dict().items()}
    before = settings(session)
    with pytest.raises(UserError, match=r"lr=1e\+308 cannot be taken.*lower the learning rate"):
        run(session, ":grad 1234")
    assert settings(session) == before
    assert all(torch.equal(v, weights[k]) for k, v in session.model.state_dict().items())  # the step was undone
    check_line(session, ":grad 1234")
    run(session, ":set lr=0.01")
    run(session, ":grad 1234")  # the lower rate steps


@pytest.mark.parametrize("typed, value", [("1e30", 10**30), ("1e22", 10**22), ("2.5e20", 25 * 10**19), ("1e3k", 10**6),
                                          ("1e308", 10**308)])
def test_a_whole_number_in_e_notation_is_the_number_typed_not_its_float(typed, value):
    assert whole_number("at", typed) == value


def test_an_out_of_range_position_typed_1e30_is_named_as_typed():
    said = " ".join(check_error(built_session(), ":qkv 12 at=1e30").split())
    assert "19884624838656" not in said and "got 1000000000000000000000000000000" in said


def check_error(session, line: str) -> str:
    front, _, err = door(session)
    assert front.run_line(line) == FAILED
    return err.file.getvalue()


def test_a_run_whose_rate_decayed_to_0_does_not_leave_every_train_refused():
    session = built_session()
    run(session, ":train steps=2 lr=5e-324")  # the cosine's floor, lr * min_lr_ratio, is 0.0 in floats
    assert session.trainer.final_lr() == 0.0
    result = run(session, ":train steps=2")  # was: "a constant learning rate must be a positive number, got 0.0"
    assert result.schedule == "new" and session.trainer.step == 4
    run(session, ":train steps=2 lr=5e-324")
    with pytest.raises(UserError, match=r"final rate, and that was 0.*schedule=new starts a run"):
        run(session, ":train schedule=continue")
    assert run(session, ":train schedule=continue lr=0.001 steps=2").constant_lr == 0.001


@pytest.mark.parametrize("eps", ["5e-324", "1e-46", "1e-40"])
def test_a_norm_eps_that_float32_holds_as_0_is_refused(eps):
    session = built_session()
    before = settings(session)
    with pytest.raises(ConfigError, match=r"norm_eps must be in \[1e-38, 1\]"):
        run(session, f":set norm_eps={eps}")
    assert settings(session) == before


def test_a_stream_of_zeros_under_the_smallest_norm_eps_trains():
    session = built_session()
    run(session, ":set norm_eps=1e-38 dropout=0.999999")  # dropout near 1: a stream of zeros, whose var is 0
    run(session, ":train steps=2")  # was nan at step 1 with norm_eps=5e-324, and "Lower the learning rate"
