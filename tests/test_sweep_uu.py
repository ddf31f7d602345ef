"""What a sweep of the defaults the tool states against the ones it uses found: each test failed before its fix.

`:context counter=8` on a vocabulary whose int64 keys hold no counter that long (5,000 characters: 5 at most) silently
scored a 5-gram counter, where `:ngram n=8` refuses and says the longest; and `:ngram`'s and `:context`'s help said
"default 6" where such a vocabulary uses 5. `:checks init steps=100` said nothing of the steps= it dropped (99 was
said): a typed default passed for none given. --checkpoint-dir's help named ./checkpoints before the variable that
wins over it. A "six-digit" drawn seed had fewer digits one time in ten. `:set n_kv_heads=0` was taken but not named
in the help, and `:quantize int8`'s help named :gen alone of the three commands that decode with the copy. The warm-up
note missed warmup_steps = steps - 1, the same never-decaying schedule as warmup_steps = steps. The helps' "(default
N)" and "(default: the SETTING setting)" are read mechanically and run both ways, so a later drift fails here.
"""

import math
import re

import pytest

from minitf_repl.commands.base import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.core.ngram import longest_order
from test_commands import Recorder, run, tiny_session


def stated_default(command: str, option: str) -> str:
    """The default an option's help states: "(default 6...", "default: the n setting"."""
    param = next(p for p in REGISTRY[command].params if p.name == option)
    found = re.search(r"default:? ([^);]+)", param.help)
    assert found, f"{command} {option}: no default stated in {param.help!r}"
    return found.group(1)


@pytest.fixture
def wide_session(tmp_path):
    """A text of 5,000 distinct characters (a character tokenizer's vocabulary of 5,000 and more): int64 keys hold a
    window of 5 of them at most."""
    path = tmp_path / "wide.txt"
    path.write_text("".join(chr(0x4E00 + (i * 7) % 5000) for i in range(30_000)), encoding="utf-8")
    session = tiny_session(str(path))
    assert longest_order(session.data.tokenizer.vocab_size) == 5
    return session


def test_context_refuses_a_counter_longer_than_the_vocabulary_allows_as_ngram_does(wide_session):
    session = wide_session
    with pytest.raises(UserError, match="at most 5 here"):
        run(session, ":ngram n=8 sample=off")
    with pytest.raises(UserError, match="at most 5 here"):
        run(session, ":context windows=16 counter=8")


@pytest.mark.parametrize("command, option", [("ngram", "n"), ("context", "counter")])
def test_the_counters_default_said_is_the_one_used_on_a_large_vocabulary(command, option, wide_session):
    said = stated_default(command, option)
    assert said.startswith("6") and "vocabulary" in said  # 6, or fewer where the keys would not fit
    session = wide_session
    if command == "ngram":
        assert run(session, ":ngram sample=off").rows[-1].n == 5
    else:
        assert run(session, ":context windows=16").curve.counter_order == 5


def test_checks_says_steps_was_left_out_when_it_is_typed_at_its_default_value_too():
    said = int(stated_default("checks", "steps"))
    for steps in (said, 99):  # the default typed out was taken for not given: no word of it being dropped
        hooks = Recorder()
        run(tiny_session(), f":checks init steps={steps}", hooks)
        assert any(f"steps={steps}" in n and "left out" in n for n in hooks.notices), (steps, hooks.notices)
    assert run(tiny_session(), ":checks blind steps=3").blind.steps == 3
    assert run(tiny_session(), ":checks blind").blind.steps == said


def test_the_checkpoint_folder_default_is_said_in_the_order_it_is_used(tmp_path, monkeypatch):
    """$MINITF_CHECKPOINT_DIR, where set, wins over ./checkpoints: "default ./checkpoints or $MINITF_CHECKPOINT_DIR"
    read as ./checkpoints first."""
    import inspect
    import json

    from minitf_repl import cli
    from test_cli import assert_one_error_line, invoke

    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "mine"))
    monkeypatch.chdir(tmp_path)
    assert json.loads(invoke("ls", "--json").stdout)["directory"] == str(tmp_path / "mine")
    helps = [inspect.signature(cli.root).parameters["checkpoint_dir"].default.help,
             assert_one_error_line(invoke("--checkpoint-dir", " ", "ls"), code=2)]  # empty: exit 2 (s59)
    for text in helps:
        assert text.index("$MINITF_CHECKPOINT_DIR") < text.index("./checkpoints"), text
        assert "if set" in text, text


@pytest.mark.parametrize("line, seed_of", [(":gen n=2", lambda r: r.seed), (":step", lambda r: r.seed)])
def test_a_drawn_seed_has_the_six_digits_the_docs_promise(monkeypatch, line, seed_of):
    """docs/commands.md: "without gen_seed each text draws a six-digit seed"; randbelow(10**6) drew 42 one time in
    a million and a five-digit one one time in ten."""
    import secrets

    monkeypatch.setattr(secrets, "randbelow", lambda n: 0)  # the lowest draw
    assert len(str(seed_of(run(tiny_session(), line)))) == 6
    monkeypatch.setattr(secrets, "randbelow", lambda n: n - 1)  # the highest
    assert len(str(seed_of(run(tiny_session(), line)))) == 6


def _numeric_defaults() -> list[tuple[str, str, str]]:
    """(command, option, N) for every option whose help states a number as its default ("(default 8)", "(default
    -1: the last"), but those that train (compare, checks), read a Hugging Face folder (parity) or need a rotary
    model (rope)."""
    found = []
    for name, command in REGISTRY.commands.items():
        if name in ("compare", "checks", "parity", "rope"):
            continue
        for p in command.params:
            for number in re.findall(r"default:? (-?\d[\d.e-]*)(?=[,;:) ]|$)", p.help or ""):
                found.append((name, p.name, number))
    return found


def _without_timings(value):
    import dataclasses

    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if "second" not in k and "time" not in k}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return "nan" if isinstance(value, float) and value != value else value  # nan == nan, as the JSON writes both


@pytest.mark.parametrize("command, option, number", _numeric_defaults())
def test_an_option_given_its_stated_default_does_what_leaving_it_out_does(command, option, number):
    """The help's "(default N)" read mechanically: `:CMD` and `:CMD option=N` give the same result, so a default
    changed in the code and not in the help (or back) fails here."""
    session = tiny_session("sort:4")
    if command == "mistakes" and number != "500":  # the text's default: on a text
        session = tiny_session("random:8")
    if command == "step":  # each :step draws a sampling seed of its own, unless gen_seed fixes it (s59: n=, rows=)
        run(session, ":set gen_seed=7")
    left_out = _without_timings(run(session, f":{command}"))
    given = _without_timings(run(session, f":{command} {option}={number}"))
    assert given == left_out, (command, option, number)


def test_the_defaults_of_commands_that_train_are_stated_from_the_constants_they_use():
    """:compare and :checks train for their defaults (too long to run twice here): their helps are written from the
    constants the code uses, and say them."""
    from minitf_repl.commands.checks import STEPS
    from minitf_repl.commands.lab import COMPARE_STEPS
    from minitf_repl.core.hf.parity import DEFAULT_TOLERANCE

    assert stated_default("compare", "steps") == str(COMPARE_STEPS)
    assert stated_default("checks", "steps") == str(STEPS)
    assert float(stated_default("parity", "tolerance")) == DEFAULT_TOLERANCE


def test_n_kv_heads_help_names_every_value_set_takes():
    """`:set n_kv_heads=0` is taken (its range: >= 0) and builds multi-head attention, as none does; the help named
    none, 1 and a divisor only, so 0 read as an error that was not refused."""
    from minitf_repl.core.config import ModelConfig

    spec = ModelConfig.spec("n_kv_heads")
    assert spec.low == 0 and "0" in spec.help.split("(MHA)")[0], spec.help
    session = tiny_session()
    run(session, ":set n_kv_heads=0")
    attention = session.model.blocks[0].attn
    assert attention.k_proj.out_features == attention.q_proj.out_features  # every query head its own keys


@pytest.mark.parametrize("warmup", [20, 150])
def test_the_never_decays_note_is_said_exactly_where_the_last_step_runs_at_the_peak_rate(warmup):
    """core.train.lr_at caps the warm-up at the run's last step, so warmup_steps = steps - 1 gives the very schedule
    warmup_steps = steps does (the rate at its peak on the last step, never decayed); the note said only the second
    (`:set optimizer=adamw`, 150 steps of warm-up, then `:train steps=151` trained without a word)."""
    from minitf_repl.commands.shared import WARM_UP_NOTE_FROM, all_warm_up
    from minitf_repl.core.config import TrainConfig
    from minitf_repl.core.train import lr_at

    config = TrainConfig(warmup_steps=warmup, lr=3e-3)
    for steps in range(max(WARM_UP_NOTE_FROM, warmup - 3), warmup + 4):
        at_peak = math.isclose(lr_at(steps - 1, steps, config), config.lr)
        assert (all_warm_up(steps, config, "this whole run") is not None) == at_peak, steps


def test_quantize_help_names_every_command_that_reads_the_int8_copy():
    """`:quantize int8`'s help said the copy is "for :gen"; :step and :kv read it too (each says so in its result)."""
    param = next(p for p in REGISTRY["quantize"].params if p.name == "mode")
    session = tiny_session()
    run(session, ":quantize int8")
    for line in (":gen n=2", ":step", ":kv n=2"):
        assert run(session, line).int8, line
        assert line.split()[0] in param.help, (line, param.help)


def _setting_defaults() -> list[tuple[str, str, str]]:
    """(command, option, setting) for every option whose help says "(default: the SETTING setting)"."""
    return [(name, p.name, found) for name, command in REGISTRY.commands.items() for p in command.params
            for found in re.findall(r"default: the (\w+) setting", p.help or "")]


@pytest.mark.parametrize("command, option, setting", _setting_defaults())
def test_an_option_said_to_default_to_a_setting_does_what_that_setting_does(command, option, setting):
    from minitf_repl.commands.settings import setting_value

    session = tiny_session()
    run(session, ":set gen_seed=5 top_k=3 top_p=0.9")  # a sampled text repeats; every sampling setting a value
    spec = next(p.spec for p in REGISTRY["set"].params if p.name == setting)
    value = setting_value(session, spec)
    shown = {True: "on", False: "off"}.get(value, value)
    extra = {"gen": "" if option == "n" else " n=4", "lrfind": " steps=10"}.get(command, "")
    left_out = _without_timings(run(session, f":{command}{extra}"))
    given = _without_timings(run(session, f":{command}{extra} {option}={shown}"))
    assert given == left_out, (command, option, setting, value)
