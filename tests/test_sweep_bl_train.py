"""The fifty-fourth sweep's findings on :train's explanations and messages: each test failed before its fix."""

import io
import random
import types

import pytest

from test_commands import Recorder, run, tiny_session
from test_render import plain, train_result
from minitf_repl.core.errors import DataError, UsageError


# --- 1. the thread count a run trained with, which moves the last digits of its numbers ---------------------------
def test_the_summary_names_the_cpu_threads_a_run_trained_with():
    result = run(tiny_session(steps=3, eval_every=3), ":train")
    assert result.cpu is not None and result.threads
    threads = f"{result.threads} CPU thread" + ("" if result.threads == 1 else "s")
    assert f"{result.dtype} on {threads}, " in plain(result)  # it said the dtype alone
    assert "CPU thread" not in plain(train_result())  # a run not on the CPU (cpu None): no threads to name


def test_the_seed_option_says_another_thread_count_moves_the_last_digits():
    from minitf_repl.commands import REGISTRY

    words = REGISTRY["train"].param_named("seed").help
    assert "thread count" in words and "threads=N" in words


# --- 2. a validation split of fewer windows than one evaluation reads ----------------------------------------------
def test_train_says_where_the_val_split_holds_fewer_windows_than_an_evaluation_reads(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text(("the cat sat on a mat. " * 20)[:340], encoding="utf-8")  # 34 val characters: 2 windows of 33
    hooks = Recorder()
    result = run(tiny_session(data=str(path), steps=3, eval_every=3), ":train", hooks)
    said = [n for n in hooks.notices if "distinct window" in n]
    assert said and "holds 2 distinct windows of 33 characters" in said[0] and "reads 8 windows" in said[0], \
        hooks.notices
    # the table's legend gives the number of batches, not the setting's name
    assert "val loss: 2 held-out batches, after it" in plain(result)
    quiet = Recorder()
    run(tiny_session(steps=3, eval_every=3), ":train", quiet)  # a task draws its questions anew: nothing to say
    assert not any("distinct window" in n for n in quiet.notices)


# --- 3. a recipe's warm-up that covers the session's steps, said where it is set ------------------------------------
def test_set_says_where_the_optimizers_recipe_warms_up_over_the_whole_run():
    s = tiny_session()
    run(s, ":set steps=100")
    hooks = Recorder()
    result = run(s, ":set optimizer=adamw", hooks)
    assert result.recipe["warmup_steps"] == (10, 150)
    said = [n for n in hooks.notices if "warm-up (150 steps) covers" in n]
    assert said and ":set warmup_steps=25" in said[0], hooks.notices  # :train's fix, said before :train
    quiet = Recorder()
    run(s, ":set steps=600", quiet)  # 150 of 600 steps: the warm-up ends well before the run does
    assert not any("covers" in n for n in quiet.notices)


# --- 4. nanoGPT's names for the schedule's length and floor --------------------------------------------------------
def test_set_explains_nanogpts_lr_decay_iters_and_min_lr():
    with pytest.raises(UsageError) as e:
        run(tiny_session(), ":set lr_decay_iters=300")
    assert "eval_batches" not in str(e.value) and "steps" in str(e.value) and "whole run" in str(e.value)
    with pytest.raises(UsageError) as e:
        run(tiny_session(), ":set min_lr=0.0001")
    assert "min_lr_ratio is min_lr / lr" in str(e.value) and "share of the peak rate" in str(e.value)


# --- 5. the live bar during the evaluation after the last step ----------------------------------------------------
def test_the_live_bar_counts_the_step_an_evaluation_follows():
    from rich.console import Console

    from minitf_repl.render import RichReporter

    console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)
    hooks = RichReporter(console, live=True)
    hooks.on_train_start(5, 0, False)
    hooks.on_step(types.SimpleNamespace(step=4, run_step=4, run_steps=5, train_loss=1.0, val_loss=None,
                                        tokens_per_second=1000.0))
    hooks.on_evaluate(373, 3000)  # evaluating after step 5, whose on_step comes after the evaluation
    task = hooks._progress.tasks[0]
    assert task.completed == 5 and task.description == "val 373/3000"  # it read 4/5
    hooks.on_evaluate(3000, 3000)
    assert hooks._progress.tasks[0].completed == 5  # not 6: the count is the step's, however many batches
    hooks.close()


# --- 6. a file of bytes in no encoding that can be named -----------------------------------------------------------
def test_a_file_that_is_not_utf8_in_no_named_encoding_gets_iconvs_line(tmp_path):
    from minitf_repl.core.data import read_text_file

    rng = random.Random(1)
    path = tmp_path / "hi8.txt"
    path.write_bytes(bytes(rng.randrange(128, 256) for _ in range(400)))  # some pairs read as UTF-8 letters
    with pytest.raises(DataError) as e:
        read_text_file(path)
    assert "not UTF-8 text" in str(e.value) and "iconv -f ENCODING -t UTF-8 " in str(e.value)
    assert str(path.with_name("hi8-utf8.txt")) in str(e.value)


def test_a_warm_up_over_the_whole_run_is_said_step_by_step_as_lr_at_runs_it():
    from minitf_repl.commands.shared import all_warm_up
    from minitf_repl.core.config import TrainConfig
    from minitf_repl.core.train import lr_at

    config = TrainConfig(warmup_steps=50, lr=0.01)
    line = all_warm_up(30, config, "this whole run")
    # was "rises to lr = 0.01 at its last step": it is there at the 29th and holds it at the 30th
    assert "rises to lr = 0.01 over its first 29 steps, holds it at the last and never decays" in line, line
    assert lr_at(27, 30, config) < lr_at(28, 30, config) == pytest.approx(lr_at(29, 30, config)) == \
        pytest.approx(config.lr)


def test_the_seed_settings_help_says_another_thread_count_moves_the_last_digits():
    from minitf_repl.core.config import TrainConfig

    assert "another thread count sums floats in another order" in TrainConfig.spec("seed").help
