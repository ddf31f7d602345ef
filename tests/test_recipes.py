"""Per-data training recipes (core/recipes.py): a data's recipe applies unless a person chose otherwise."""

from __future__ import annotations

import dataclasses

import pytest
from test_commands import Recorder, run

from minitf_repl.core import recipes
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus
from minitf_repl.session import Session

TINY = dict(max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48)


def test_every_recipe_is_a_valid_training_config_that_changes_something_real():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert "pydoc" in recipes.RECIPES and recipes.RECIPES["pydoc"] == {}  # the built-in data's recipe: the defaults
    for name, changes in recipes.RECIPES.items():
        assert set(changes) <= fields, name
        config = TrainConfig().replace(**changes)  # validates
        assert all(getattr(config, k) != getattr(TrainConfig(), k) for k in changes), f"{name}: a no-op entry"


def test_the_shakespeare_recipe_differs_from_the_defaults():
    assert recipes.RECIPES["shakespeare"], "tiny Shakespeare is meant to have its own recipe"
    assert recipes.recipe("shakespeare") != recipes.recipe("pydoc")


def test_data_names_from_specs():
    assert recipes.data_name("shakespeare") == "shakespeare"
    assert recipes.data_name("sort:5") == "sort"
    assert recipes.recipe("./my.txt") == recipes.recipe("pydoc")  # no recipe: the defaults


def test_switching_follows_the_new_recipe_but_keeps_what_a_person_set():
    shakespeare = recipes.RECIPES["shakespeare"]
    key = next(iter(shakespeare))
    config, changes = recipes.switch_recipe(TrainConfig(), "pydoc", "shakespeare")
    assert all(getattr(config, k) == v for k, v in shakespeare.items())
    assert changes == {k: (getattr(TrainConfig(), k), v) for k, v in shakespeare.items()}
    # a setting changed by hand stays through a switch there and back
    mine = TrainConfig().replace(eval_every=7, **{key: TrainConfig.__dataclass_fields__[key].default})
    mine = mine.replace(steps=1234)
    there, _ = recipes.switch_recipe(mine, "pydoc", "shakespeare")
    assert there.steps == 1234 and there.eval_every == 7
    back, back_changes = recipes.switch_recipe(there, "shakespeare", "pydoc")
    assert back.steps == 1234 and "steps" not in back_changes
    assert back == mine


def test_a_session_opened_on_shakespeare_starts_with_its_recipe():
    s = Session(ModelConfig(**TINY), data_spec="shakespeare", device_name="cpu")
    assert dataclasses.asdict(s.train_config) == recipes.recipe("shakespeare")
    assert Session(ModelConfig(**TINY), device_name="cpu").train_config == TrainConfig()


def test_the_shell_set_applies_over_the_recipe(monkeypatch):
    from minitf_repl.cli import apply_settings

    s = Session(ModelConfig(**TINY), data_spec="shakespeare", device_name="cpu")
    apply_settings(s, ["steps=7"])
    assert s.train_config.steps == 7
    assert s.train_config.lr == recipes.recipe("shakespeare")["lr"]


@pytest.fixture
def fake_shakespeare(monkeypatch):
    """`shakespeare` without a download: a small corpus under that name."""
    import minitf_repl.core.data as data

    text = "To be, or not to be, that is the question. " * 200
    real = data.load_data
    monkeypatch.setattr(data, "load_data", lambda spec, tokenizer=None: TextCorpus("shakespeare", text, "fake", tokenizer)
                        if spec == "shakespeare" else real(spec, tokenizer))


def test_data_command_switches_recipes_and_says_so(fake_shakespeare):
    s = Session(ModelConfig(**TINY), device_name="cpu")
    s.set_train_config(s.train_config.replace(eval_every=9))
    result = run(s, ":data shakespeare")
    expected = {k: v for k, v in recipes.RECIPES["shakespeare"].items() if k != "eval_every"}
    assert {k: after for k, (_, after) in result.recipe.items()} == expected
    assert all(getattr(s.train_config, k) == v for k, v in expected.items()) and s.train_config.eval_every == 9

    from minitf_repl import render
    from rich.console import Console

    console = Console(record=True, width=200)
    render.render(result, console)
    assert "recipe for shakespeare" in console.export_text()

    back = run(s, ":data pydoc")
    assert s.train_config == TrainConfig().replace(eval_every=9) and back.recipe


def test_train_with_data_takes_the_recipe_then_its_own_options(fake_shakespeare):
    s = Session(ModelConfig(**TINY), TrainConfig(steps=3, batch_size=4, eval_every=3, eval_batches=1),
                device_name="cpu")
    hooks = Recorder()
    run(s, ":train data=shakespeare steps=2 batch=4", hooks)
    recipe = recipes.recipe("shakespeare")
    assert s.trainer.step == 2 and s.train_config.batch_size == 4
    assert s.train_config.steps == 3  # set by hand (not the old recipe's 600): kept
    for key in ("lr", "optimizer", "warmup_steps"):
        if key in recipes.RECIPES["shakespeare"]:
            assert getattr(s.train_config, key) == recipe[key]
    assert any("recipe for shakespeare" in line for line in hooks.notices)


def test_train_data_options_are_not_reported_as_the_recipes(fake_shakespeare):
    s = Session(ModelConfig(**TINY), TrainConfig(steps=3, batch_size=4, eval_every=3, eval_batches=1),
                device_name="cpu")
    hooks = Recorder()
    run(s, ":train data=shakespeare lr=0.001 steps=1", hooks)
    assert s.train_config.lr == 0.001
    assert not any("lr " in line for line in hooks.notices if "recipe" in line), hooks.notices


SHAKESPEARE = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="needs ../shared/data/tinyshakespeare.txt")
def test_a_local_copy_of_shakespeare_is_shakespeare_and_takes_its_recipe():
    """Offline, a user gives tiny Shakespeare by path: it is recognised by its SHA-256, recipe included."""
    from minitf_repl.core.data import load_data

    assert load_data(str(SHAKESPEARE)).name == "shakespeare"
    s = Session(ModelConfig(**TINY), data_spec=str(SHAKESPEARE), device_name="cpu")
    assert s.train_config == TrainConfig()  # not known before the file is read
    s.data
    assert dataclasses.asdict(s.train_config) == recipes.recipe("shakespeare")
    other = Session(ModelConfig(**TINY), device_name="cpu")
    result = run(other, f":data {SHAKESPEARE}")
    assert result.recipe and dataclasses.asdict(other.train_config) == recipes.recipe("shakespeare")


def test_a_file_is_its_own_data_with_the_default_recipe(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("some notes of mine, " * 50, encoding="utf-8")
    s = Session(ModelConfig(**TINY), device_name="cpu")
    result = run(s, f":data {path}")
    assert result.recipe == {} and s.train_config == TrainConfig()
