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
    assert dataclasses.asdict(s.train_config) == recipes.recipe("shakespeare")  # known before the data is loaded
    assert s.loaded_data is None and run(s, ":config").recipe_for == "muon on shakespeare"
    s.data
    assert dataclasses.asdict(s.train_config) == recipes.recipe("shakespeare")
    other = Session(ModelConfig(**TINY), device_name="cpu")
    result = run(other, f":data {SHAKESPEARE}")
    assert result.recipe and dataclasses.asdict(other.train_config) == recipes.recipe("shakespeare")


def test_a_copy_of_shakespeare_is_known_by_its_hash_before_it_is_loaded(tmp_path, monkeypatch):
    """`minitf --data PATH config` shows the recipe a run on a local copy of tiny Shakespeare takes, without
    loading the data (it showed the defaults, and `train` then used other values). Stood in for by a file whose
    size and hash the catalog is told, so that this runs without ../shared."""
    import hashlib

    from minitf_repl.core import catalog

    copy, other = tmp_path / "input.txt", tmp_path / "mine.txt"
    copy.write_text("First Citizen:\n" * 40, encoding="utf-8")
    other.write_text("Second Citizen\n" * 40, encoding="utf-8")  # the same size, another text
    monkeypatch.setattr(catalog, "SHAKESPEARE_BYTES", copy.stat().st_size)
    monkeypatch.setattr(catalog, "SHAKESPEARE_SHA256", hashlib.sha256(copy.read_bytes()).hexdigest())
    assert catalog.known_as(str(copy)) == "shakespeare" and catalog.known_as(str(other)) == str(other)
    for spec in ("pydoc", "sort:4", str(tmp_path), str(tmp_path / "missing.txt"), "a\x00b"):
        assert catalog.known_as(spec) == spec  # names, a directory, no file, a path open() refuses
    s = Session(ModelConfig(**TINY), data_spec=str(copy), device_name="cpu")
    result = run(s, ":config")
    assert s.loaded_data is None and result.recipe_for == "muon on shakespeare"
    assert set(result.from_recipe) == {"lr", "steps", "grad_clip"}
    assert dataclasses.asdict(s.train_config) == recipes.recipe("shakespeare")
    mine = Session(ModelConfig(**TINY), data_spec=str(other), device_name="cpu")
    assert mine.train_config == TrainConfig() and run(mine, ":config").from_recipe == []


def test_a_file_is_its_own_data_with_the_default_recipe(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("some notes of mine, " * 50, encoding="utf-8")
    s = Session(ModelConfig(**TINY), device_name="cpu")
    result = run(s, f":data {path}")
    assert result.recipe == {} and s.train_config == TrainConfig()


# --- an optimizer's own recipe: AdamW's rate and warm-up over a data's (Muon's) recipe -------------------
def test_every_optimizer_recipe_is_valid_and_changes_what_the_data_recipe_set():
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    assert set(recipes.OPTIMIZER_RECIPES) <= {"adamw", "muon"}
    assert recipes.OPTIMIZER_RECIPES["adamw"][recipes.ANY_DATA], "AdamW needs its own rate on any data"
    for optimizer, by_data in recipes.OPTIMIZER_RECIPES.items():
        for name, changes in by_data.items():
            assert set(changes) <= fields - {"optimizer"}, (optimizer, name)
            spec = "pydoc" if name == recipes.ANY_DATA else name
            base = recipes.recipe(spec)  # the data's recipe, Muon's
            TrainConfig().replace(**{**base, **changes})  # validates
            assert all(base[k] != v for k, v in changes.items()), f"{optimizer} on {name}: a no-op entry"


def test_an_optimizers_recipe_is_the_datas_recipe_with_its_own_settings_over_it():
    adamw = recipes.OPTIMIZER_RECIPES["adamw"]
    for spec in ("pydoc", "shakespeare", "sort:5", "./notes.txt"):
        own = adamw.get(recipes.data_name(spec), adamw[recipes.ANY_DATA])
        assert recipes.recipe(spec, "adamw") == {**recipes.recipe(spec), "optimizer": "adamw", **own}
    assert recipes.recipe("pydoc", "muon") == recipes.recipe("pydoc") == dataclasses.asdict(TrainConfig())


def test_following_an_optimizer_moves_only_what_still_held_the_old_ones_recipe():
    adamw = recipes.recipe("pydoc", "adamw")
    moved_keys = set(recipes.OPTIMIZER_RECIPES["adamw"].get("pydoc", recipes.OPTIMIZER_RECIPES["adamw"]["*"]))
    before = TrainConfig()
    after, moved = recipes.follow_optimizer(before, before.replace(optimizer="adamw"), "pydoc")
    assert after.optimizer == "adamw" and set(moved) == moved_keys
    assert all(getattr(after, k) == adamw[k] and moved[k] == (getattr(before, k), adamw[k]) for k in moved_keys)
    # a rate set by hand before, or given with the switch, stays
    mine = before.replace(lr=0.0123)
    after, moved = recipes.follow_optimizer(mine, mine.replace(optimizer="adamw"), "pydoc")
    assert after.lr == 0.0123 and "lr" not in moved
    after, moved = recipes.follow_optimizer(before, before.replace(optimizer="adamw", lr=5e-4), "pydoc", {"lr"})
    assert after.lr == 5e-4 and "lr" not in moved and after.warmup_steps == adamw["warmup_steps"]
    # and back: Muon's recipe again, the same settings exactly
    back, moved_back = recipes.follow_optimizer(adamw_config := TrainConfig().replace(**adamw),
                                                adamw_config.replace(optimizer="muon"), "pydoc")
    assert back == TrainConfig() and set(moved_back) == moved_keys
    # no switch, nothing follows
    assert recipes.follow_optimizer(before, before.replace(lr=0.5), "pydoc") == (before.replace(lr=0.5), {})


def test_set_optimizer_takes_its_recipe_and_says_so():
    s = Session(ModelConfig(**TINY), device_name="cpu")
    result = run(s, ":set optimizer=adamw")
    adamw = recipes.recipe("pydoc", "adamw")
    assert result.changed == {"optimizer": ("muon", "adamw")}
    assert dataclasses.asdict(s.train_config) == adamw
    assert result.recipe_for == "adamw on pydoc" and set(result.recipe) == {"lr", "warmup_steps"}

    from minitf_repl import render
    from rich.console import Console

    console = Console(record=True, width=200)
    render.render(result, console)
    text = console.export_text()
    assert "recipe for adamw on pydoc" in text and "lr 0.01 -> " in text

    result = run(s, ":set optimizer=muon")
    assert s.train_config == TrainConfig() and result.recipe_for == "muon on pydoc"
    result = run(s, ":set optimizer=adamw lr=0.0007")
    assert s.train_config.lr == 0.0007 and "lr" not in result.recipe
    assert s.train_config.warmup_steps == adamw["warmup_steps"]


def test_the_shell_set_of_an_optimizer_follows_its_recipe_too():
    from minitf_repl.cli import apply_settings

    s = Session(ModelConfig(**TINY), data_spec="sort:4", device_name="cpu")
    apply_settings(s, ["optimizer=adamw", "batch_size=4"])
    assert dataclasses.asdict(s.train_config) == {**recipes.recipe("sort:4", "adamw"), "batch_size": 4}


def test_data_switch_under_adamw_follows_adamws_recipes(fake_shakespeare):
    s = Session(ModelConfig(**TINY), device_name="cpu")
    run(s, ":set optimizer=adamw")
    run(s, ":data shakespeare")
    assert dataclasses.asdict(s.train_config) == recipes.recipe("shakespeare", "adamw")
    run(s, ":data pydoc")
    assert dataclasses.asdict(s.train_config) == recipes.recipe("pydoc", "adamw")


class _Seen(Exception):
    """Raised by a stand-in for core.compare.compare once it has seen the contenders: nothing trains."""


def test_a_compare_contender_with_another_optimizer_takes_its_recipe(monkeypatch):
    from minitf_repl.core import compare as compare_module

    seen = []

    def contenders_only(contenders, *args, **kwargs):
        seen.extend(contenders)
        raise _Seen

    monkeypatch.setattr(compare_module, "compare", contenders_only)
    s = Session(ModelConfig(**TINY), data_spec="sort:4", device_name="cpu")
    hooks = Recorder()
    with pytest.raises(_Seen):
        run(s, ":compare current optimizer=adamw optimizer=adamw,lr=0.002 steps=2", hooks)
    current, adamw, mine = (c.train_config for c in seen)
    assert current == s.train_config.replace(eval_every=1)
    assert adamw.lr == recipes.recipe("sort:4", "adamw")["lr"] and adamw.optimizer == "adamw"
    assert mine.lr == 0.002 and mine.warmup_steps == adamw.warmup_steps
    assert sum("recipe for adamw on sort" in line for line in hooks.notices) == 2
