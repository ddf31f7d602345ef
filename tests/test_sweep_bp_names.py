"""nanoGPT's and the video's names (grad accumulation, head_size), the vocabulary, ids decoded, :help's switches."""

import re
import shlex

import pytest

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import DataError, UsageError, UserError
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session

from test_cli import assert_one_error_line, invoke
from test_commands import TEXT, TINY, run, tiny_session
from test_render import plain


def text_session(tmp_path, **model) -> Session:
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(), data_spec=str(path), device_name="cpu")


# --- 1. gradient accumulation: minitf has no micro-batches ---------------------------------------------------------
@pytest.mark.parametrize("key", ["gradient_accumulation_steps", "grad_accum", "accumulation_steps"])
def test_nanogpts_gradient_accumulation_is_said_to_be_batch_size_here(key):
    with pytest.raises(UsageError) as e:  # was a bare "unknown option 'gradient_accumulation_steps' for :set"
        run(tiny_session(), f":set {key}=4")
    said = str(e.value)
    assert "minitf has no micro-batches" in said and "batch_size x gradient_accumulation_steps is batch_size" in said
    assert ":set batch_size=480" in said, said
    line = assert_one_error_line(invoke("--set", f"{key}=4", "config"), code=2)
    assert "no micro-batches" in line and "--set batch_size=480" in line, line
    with pytest.raises(UsageError) as e:  # :train, whose batch_size= it is too: was a bare "unknown option"
        run(tiny_session(), f":train steps=5 {key}=4")
    assert "minitf has no micro-batches" in str(e.value), str(e.value)


# --- 2. head_size: d_k = d_model / n_heads ---------------------------------------------------------------------------
def test_head_size_is_said_to_be_d_model_over_n_heads_with_the_settings_that_make_it():
    session = tiny_session()
    d_model, n_heads = session.model_config.d_model, session.model_config.n_heads
    with pytest.raises(UsageError) as e:  # was "unknown option 'head_size' for :set; did you mean batch_size?"
        run(session, ":set head_size=16")
    assert "batch_size" not in str(e.value) and "d_k = d_model / n_heads" in str(e.value), str(e.value)
    assert ":help head_size works it out" in str(e.value)  # the line parsed has no session to work it out with
    for line in (":help head_size", ":set head_size"):  # :help was "did you mean :heads?"
        with pytest.raises(UserError) as e:
            run(session, line)
        said = str(e.value)
        assert "d_k = d_model / n_heads" in said and ":heads" not in said, said
        assert f"now {d_model // n_heads} (d_model {d_model} / n_heads {n_heads})" in said, said
        size = 16 if d_model // n_heads != 16 else 32  # an example size other than the model's own (16 here)
        assert f"a head size of {size} is :set n_heads={d_model // size} at d_model {d_model}" in said, said
        assert f":set d_model={size * n_heads} at n_heads {n_heads}" in said, said


def test_head_size_at_a_d_model_sixteen_does_not_divide_offers_the_d_model():
    session = tiny_session()
    run(session, ":set d_model=72")
    with pytest.raises(UserError) as e:
        run(session, ":help head_size")
    assert "no head count at d_model 72" in str(e.value) and ":set d_model=32 at n_heads 2" in str(e.value)


# --- 3. every bare KEY=VALUE after a --set gets its own --set --------------------------------------------------------
def test_the_set_line_suggested_for_many_bare_pairs_sets_each_and_runs(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT * 30, encoding="utf-8")  # a window of block_size=256 fits its validation text
    typed = ["--data", str(path), "--set", "n_embd=384", "n_head=6", "n_layer=6", "block_size=256",
             "learning_rate=3e-4", "dropout=0.2", "config"]
    line = assert_one_error_line(invoke(*typed), code=2)
    fixed = shlex.split(line.partition("goes with --set: ")[2])
    # was `--set n_embd=384 --set n_head=6 n_layer=6 ...`, which failed again on n_layer=6, five times over
    assert fixed == ["minitf", "--data", str(path), "--set", "n_embd=384", "--set", "n_head=6", "--set", "n_layer=6",
                     "--set", "block_size=256", "--set", "learning_rate=3e-4", "--set", "dropout=0.2", "config"], fixed
    ran = invoke(*fixed[1:])
    assert ran.exit_code == 0, ran.output


def test_a_later_pair_the_setting_cannot_take_is_said_not_suggested():
    line = assert_one_error_line(invoke("--set", "lr=0.1", "steps=5", "dropout=2", "config"), code=2)
    assert "(--set dropout=X), and dropout must be in [0, 1), got 2" in line, line


# --- 4. lr_decay_iters: the last step's rate is a little above the floor ----------------------------------------------
def test_lr_decay_iters_says_the_last_rate_is_a_little_above_the_floor_as_lr_at_computes_it():
    from minitf_repl.core.train import lr_at

    with pytest.raises(UsageError) as e:
        run(tiny_session(), ":set lr_decay_iters=300")
    said = str(e.value)
    assert "the rate ends at lr x min_lr_ratio" not in said and "a little above it" in said, said
    config = TrainConfig(lr=1e-2, min_lr_ratio=0.1, steps=600)
    floor = config.lr * config.min_lr_ratio
    assert lr_at(config.steps - 1, config.steps, config) > floor  # 1.0006e-3: the rule as said
    assert lr_at(config.steps, config.steps, config) == pytest.approx(floor)  # one step past the last


# --- 5. the vocabulary shown, and ids decoded ------------------------------------------------------------------------
def test_data_shows_a_character_vocabulary_in_id_order_and_its_json_lists_it(tmp_path):
    session = text_session(tmp_path)
    result = run(session, ":data")
    chars = sorted(set(TEXT))
    assert result.symbols == chars  # was no symbols: "vocabulary 30 symbols" alone
    text = plain(result, 200)
    assert "symbols by id from 0: ↵ ␣ ! . P a b c" in text and "(↵ newline, ␣ space)" in text, text
    doc = json_document(REGISTRY["data"], result)
    assert doc["schema"] == "minitf.data/8" and "".join(doc["symbols"]) == "".join(chars)


def test_data_on_a_task_lists_its_symbols():
    result = run(tiny_session("sort:4"), ":data")
    assert "symbols by id from 0: + 0 1 2 3 4 5 6 7 8 9 =" in plain(result), plain(result)


def test_tok_decodes_ids_given_as_ids_and_keeps_digits_as_text(tmp_path):
    session = text_session(tmp_path)
    chars = sorted(set(TEXT))
    ids = [chars.index(ch) for ch in "the dog"]
    typed = ",".join(map(str, ids))
    result = run(session, f":tok ids={typed}")
    assert result.from_ids and result.text == "the dog" and result.ids == ids
    assert "ids decoded: 'the dog'" in plain(result)
    assert json_document(REGISTRY["tok"], result)["from_ids"] is True
    assert run(session, f":tok ids={ids[0]}, {ids[1]}").ids == ids[:2]  # a space after the comma: the ids go on
    with pytest.raises(DataError) as e:  # plain text stays text: its digits are no symbols of this data
        run(session, f":tok {' '.join(map(str, ids[:3]))}")
    assert f"to decode ids instead: :tok ids={','.join(map(str, ids[:3]))}" in str(e.value), str(e.value)
    with pytest.raises(UserError) as e:
        run(session, f":tok ids={len(chars)}")
    assert f"ids are 0 to {len(chars) - 1}" in str(e.value)
    with pytest.raises(UserError) as e:
        run(session, ":tok ids=1,x")
    assert "ids= takes token ids" in str(e.value) and "'x'" in str(e.value)
    shell = invoke("--data", str(tmp_path / "text.txt"), "tok", "--ids", typed)
    assert shell.exit_code == 0 and "ids decoded: 'the dog'" in shell.stdout, shell.output


# --- 6. :ngram speaks of the data in use -----------------------------------------------------------------------------
def test_ngrams_sampled_train_loss_note_names_no_other_data(tmp_path):
    from minitf_repl.core import ngram

    session = text_session(tmp_path)
    old = ngram.TRAIN_SCORED
    try:
        ngram.TRAIN_SCORED = 100
        ngram._kept = (None, None)
        result = run(session, ":ngram n=2 sample=off")
    finally:
        ngram.TRAIN_SCORED = old
        ngram._kept = (None, None)
    text = plain(result, 200)
    assert "train loss: on the first 100 positions" in text, text
    assert "pydoc" not in text and "3.248" not in text, text  # was pydoc's numbers under any data's table


# --- 7. :help shows a switch in its table as its usage line does ----------------------------------------------------
def test_help_shows_every_switch_in_its_table_as_in_its_usage_line():
    session = tiny_session()
    text = plain(run(session, ":help shapes"), 200)
    assert "usage: :shapes [PROMPT] [layer=N] [--all]" in text and "--all on|off off show every block" in text, text
    assert "all= " not in text  # was `all= on|off` under a usage line of `[--all]`
    for command in REGISTRY.values():  # declared, so every command's switch alike
        switches = re.findall(r"\[--(\w+)\]", command.usage())
        if switches:
            shown = plain(run(session, f":help {command.name}"), 200)
            for name in switches:
                assert f" --{name} on|off" in shown and f" {name}= " not in shown, (command.name, shown)
