"""What a user's-eye sweep of one number shown in many places (the val loss, the step, the parameter count, the
learning rate, the time and speed) found: each test failed before its fix.

A run stopped between two evaluations was saved at its last step with the val loss of an earlier one: `:train`'s
end line said "val loss 2.3842 at step 3", while `:ls` (and its --json), `:load` and the status bar put the same
2.3842 beside step 5, as if measured there. After `:data` switched to a text of the same characters (the model
kept), the status bar, `:ls` and `:load` gave the val loss measured on the text before as the new data's. A long
run's saved history, thinned, could drop its last evaluation, so `:ls` gave an earlier val loss than `:train`. The
report gave no val loss, train loss or parameter count at all.

Time and speed: a continued run's end line gave this command's 0.1 s under a table whose elapsed column counts from
the run's start (0.41s); a new run's said "0.4 s" under the table's "0.42s"; the last row's tokens/s and the end
line's differed with nothing to say they time different steps; `:compare`'s first contender paid a fresh process's
one-off costs alone (20-30% fewer tokens/s than a rival of the very same model). Under an ablation, the report's
new line of numbers said nothing of being training's while the banner above called every loss the ablated model's.

Rounding: the end line wrote "3.726 bits per character" under the table's 3.7263; `:context` wrote position 0's
loss as 2.661 and, a sentence later, 2.66; differences were taken of unrounded numbers and disagreed with the two
numbers written beside them (`:ablate` "2.5828 -> 2.5828 (-0.0001)", `:quantize`'s change column, `:context`'s
"model - it", `:ngram`'s "under the best"); `:ngram`'s "model below it" column said below where its verdict said
"not yet below"; `:heads` and the report wrote "-0.00".
"""

import json

from minitf_repl import repl
from minitf_repl.commands.train import spaced_seconds
from minitf_repl.core import checkpoint as ckpt
from minitf_repl.render import fmt
from test_cli import invoke
from test_commands import Recorder, run, tiny_session
from test_render import plain, text_of


def stopped_between_evaluations(steps=10, every=3, stop_after=5):
    """A session whose run stopped at step 5, last evaluated at step 3 (and autosaved there)."""
    s = tiny_session(steps=steps, eval_every=every)
    result = run(s, ":train", Recorder(stop_after=stop_after))
    assert result.stopped and result.total_steps == 5 and result.evals[-1]["step"] == 3
    return s, result


# --- the val loss of a stopped run says the step it was measured at ----------------------------------------------
def test_ls_and_load_say_the_step_of_a_stopped_runs_last_val_loss(checkpoint_dir):
    s, result = stopped_between_evaluations()
    loss = f"{result.val_loss:.4f}"
    assert f"val loss {loss} at step 3" in plain(result)  # :train's end line, as it was
    listed = plain(run(s, ":ls"))
    assert f"{loss} (step 3)" in listed
    loaded = run(s, ":load autosave")
    assert loaded.val_step == 3
    assert f"step 5, data sort:4, 10,016 parameters, val loss {loss} at step 3" in plain(loaded)
    assert s.status().val_step == 3
    assert f"step 5 | train loss {result.train_loss:.4f} | val loss {loss} (step 3)" in repl.toolbar_text(s, 100)


def test_ls_json_gives_the_step_of_the_val_loss(checkpoint_dir):
    stopped_between_evaluations()
    doc = json.loads(invoke("ls", "--json").stdout)
    row = doc["rows"][0]
    assert (row["step"], row["val_step"]) == (5, 3)
    assert ckpt.list_checkpoints(checkpoint_dir)[0].val_step == 3


def test_a_run_evaluated_at_its_last_step_shows_no_step_beside_its_val_loss(checkpoint_dir):
    s = tiny_session()
    result = run(s, ":train")
    listed = plain(run(s, ":ls"))
    assert f"{result.val_loss:.4f} " in listed and "(step" not in listed
    assert "at step" not in plain(run(s, ":load autosave")).split("\n")[0].split("model:")[0]


# --- a continued run's time: the table's elapsed counts from the run's start --------------------------------------
def test_a_continued_runs_end_line_gives_the_whole_runs_elapsed_time_the_table_shows(checkpoint_dir):
    s, _ = stopped_between_evaluations()
    result = run(s, ":train")
    assert result.resumed and result.evals[-1]["elapsed"] > result.seconds
    text = plain(result)
    table_elapsed = text.split("│")[-2].strip()  # the last row's last cell
    assert table_elapsed == fmt.seconds(result.evals[-1]["elapsed"])
    this_time = result.run_seconds or result.seconds  # what the line gives (train_summary): this command's steps'
    # time, which the call's own wall time rounded apart from now and then (a flake under load)
    whole = spaced_seconds(result.evals[-1]["elapsed"])  # the table's figure
    assert f"{spaced_seconds(this_time)} this time, {whole} for the whole run as the table counts it" in text


def test_a_runs_end_line_in_one_command_adds_no_second_time(checkpoint_dir):
    result = run(tiny_session(), ":train")
    assert "whole run" not in plain(result)


def test_trains_end_line_gives_its_time_as_the_tables_last_elapsed_writes_it(checkpoint_dir):
    result = run(tiny_session(), ":train")
    text = plain(result)
    table_elapsed = text.split("│")[-2].strip()  # 0.42s under the table; the line said 0.4 s
    assert table_elapsed.endswith("s") and f", {table_elapsed[:-1]} s" in text.split("trained 6 steps")[1]


# --- the speed: a row's tokens/s and the end line's are over different steps --------------------------------------
def test_the_loss_tables_legend_says_which_steps_its_tokens_per_second_is_of():
    result = run(tiny_session(steps=9, eval_every=3), ":train")
    rows = [e["tokens_per_second"] for e in result.evals]
    assert f"{result.tokens_per_second:,.0f}" != f"{rows[-1]:,.0f}"  # the two numbers a reader compares
    assert "tokens/s: the steps since the row above (the summary at the end: all of them)" in plain(result)


# --- the same number written alike where two places show it together ----------------------------------------------
def test_trains_end_line_writes_bits_per_character_as_the_table_above_it_does():
    result = run(tiny_session("pydoc", steps=3, eval_every=3), ":train")
    text = plain(result)
    cell = fmt.num(result.evals[-1]["val_bpc"])  # the table's last bits/char cell
    assert f" {cell} │" in text_of(result)
    assert f"val loss {result.val_loss:.4f}, {cell} bits per character" in text


def test_heads_never_writes_minus_zero_for_a_head_whose_absence_changes_the_repeat_by_nothing():
    from types import SimpleNamespace

    from minitf_repl.commands.why import heads_reading

    s = tiny_session("pydoc")
    result = run(s, ":heads")
    for row in result.heads:
        row.carries = -0.001  # switched off, the copying gain rises by a thousandth: 0.00 at two decimals
    assert "-0.00" not in text_of(result) and "+0.00" in text_of(result)
    heads = [SimpleNamespace(layer=0, head=0, role=None, carries=-0.001, scores={"induction": 0.1})]
    roles = SimpleNamespace(heads=heads, best=lambda role: heads[0], uniform={"induction": 0.05})
    reading = heads_reading(roles, first=2.5, second=2.5)
    assert "(the most any moves the gain: head 0.0, +0.00 nats, within the noise of these tokens)" in reading


def test_ablate_and_quantize_give_the_change_of_the_val_losses_as_they_write_them():
    from minitf_repl.commands.lab import AblateResult

    shown = plain(AblateResult(["head 0.0"], 2.58284, 2.58276, "x", "p"))
    assert "val loss 2.5828 -> 2.5828 (+0.0000)" in shown  # was (-0.0001): two equal numbers and a change
    shown = plain(AblateResult(["head 0.0"], 2.58274, 2.58286, "x", "p"))
    assert "val loss 2.5827 -> 2.5829 (+0.0002)" in shown  # was (+0.0001), where 2.5829 - 2.5827 reads 0.0002
    s = tiny_session()
    run(s, ":train steps=3")
    result = run(s, ":quantize int8")
    result.measure.val_loss_before, result.measure.val_loss_after = 2.58274, 2.58286
    result.measure.accuracy_before, result.measure.accuracy_after = 0.18449, 0.18451
    text = plain(result)
    assert "val loss 2.5827 2.5829 +0.0002" in " ".join(text.replace("│", " ").split())
    assert "18.4% 18.5% +0.1 pts" in " ".join(text.replace("│", " ").split())


def test_context_gives_model_minus_counter_of_the_two_numbers_its_row_writes():
    s = tiny_session("pydoc", steps=3, eval_every=3)
    run(s, ":train")
    result = run(s, ":context windows=64")
    row = result.rows[0]
    row.loss, row.counter_loss = 2.6614, 2.4086  # written 2.661 and 2.409: 0.252 apart, though 0.2528 unrounded
    line = next(line for line in text_of(result).splitlines() if line.split()[:1] == ["0"])
    assert "2.661" in line.split() and line.split()[-2:] == ["2.409", "+0.252"]


def test_ngram_says_how_far_under_the_best_counter_the_model_is_from_the_numbers_it_writes():
    from minitf_repl.commands.counting import verdict

    s = tiny_session("pydoc", steps=3, eval_every=3)
    run(s, ":train")
    result = run(s, ":ngram n=2 sample=off")
    for row, loss in zip(result.rows, (4.6354, 3.2384, 2.4086)):
        row.val_loss = loss
    result.model_val = 1.5744  # written 1.574, the best counter 2.409: 0.835 under it, though 0.8342 unrounded
    (line,) = verdict(result)
    assert "the model (1.574) is below every counter: 0.835 nats a character under the best" in line


# --- a val loss measured on the data before a switch that kept the model ------------------------------------------
def two_texts(tmp_path):
    """Two texts of the same characters: a switch from one to the other keeps the trained model."""
    import random

    rng = random.Random(0)
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("".join(rng.choice("abcdefgh \n") for _ in range(6000)), encoding="utf-8")
    b.write_text("abcdefgh \n" * 600, encoding="utf-8")
    return str(a), str(b)


def test_a_val_loss_of_the_data_before_a_switch_is_not_shown_as_the_new_datas(checkpoint_dir, tmp_path):
    a, b = two_texts(tmp_path)
    s = tiny_session(a)
    trained = run(s, ":train")
    assert "stays" in plain(run(s, f":data {b}"))  # the same vocabulary: the model is kept
    status = s.status()
    assert status.val_loss is None and status.last_loss is None and status.step == 6  # a.txt's losses, not b.txt's
    run(s, ":save onb")
    row = next(r for r in ckpt.list_checkpoints(checkpoint_dir) if r.name == "onb")
    assert row.data_spec.endswith("b.txt") and row.val_loss is None and row.val_step is None
    loaded = run(s, ":load onb")
    assert loaded.val_loss is None and "val loss" not in plain(loaded).split("model:")[0]
    assert s.data_since_step == 6 and s.status().val_loss is None
    again = run(s, ":train steps=3")  # trained on b.txt: its own val loss is b.txt's
    assert again.val_loss != trained.val_loss and s.status().val_loss == again.val_loss
    run(s, ":save onb")
    row = next(r for r in ckpt.list_checkpoints(checkpoint_dir) if r.name == "onb")
    assert (row.val_loss, row.val_step) == (again.val_loss, 9)


def test_a_thinned_history_keeps_the_last_val_loss_ls_and_load_report():
    from minitf_repl.core.checkpoint.store import thinned_history

    # every step evaluated but the last two (a run stopped between evaluations): more evaluations than the
    # thinning keeps, and its stride passed over the last one, so :ls gave an earlier val loss than :train did
    history = [{"step": k + 1, "val_loss": 3.0 - k / 100 if k < 28 else None} for k in range(30)]
    kept = thinned_history(history, most=10)
    assert [row["val_loss"] for row in kept if row["val_loss"] is not None][-1] == history[27]["val_loss"]


# --- the report gives the numbers the other views give ---------------------------------------------------------------
def test_the_report_gives_the_val_loss_train_loss_and_parameters_the_status_bar_shows(checkpoint_dir, tmp_path):
    s, result = stopped_between_evaluations()
    run(s, f":report {tmp_path / 'r.html'}")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    status = s.status()
    accuracy = f"accuracy {status.accuracy:.1%} (of the held-out questions, greedily), "  # sort's: its measure
    assert (f"At step 5: val loss {result.val_loss:.4f} (measured at step 3), {accuracy}train loss "
            f"{status.last_loss:.4f} (the last step's one batch), {status.n_params:,} parameters (a tied embedding and "
            "head counted once).") in page
    assert status.n_params == sum(p.numel() for p in s.model.parameters()) == 10_016


def test_ngrams_model_below_it_column_and_verdict_agree_on_a_loss_that_reads_alike():
    s = tiny_session("pydoc", steps=3, eval_every=3)
    run(s, ":train")
    bigram = next(row for row in run(s, ":ngram n=2 sample=off").rows if row.n == 2)
    s.trainer.history[-1]["val_loss"] = round(bigram.val_loss, 3) - 0.0004  # written alike: the same to 3 decimals
    result = run(s, ":ngram n=2 sample=off")
    assert f"{s.trainer.history[-1]['val_loss']:.3f}" == f"{bigram.val_loss:.3f}"
    row = next(row for row in result.rows if row.n == 2)
    assert row.model_below_at is None  # was "step 3": below it there, "not yet below" it in the verdict's reading


def test_context_writes_position_0s_loss_alike_in_its_two_sentences():
    s = tiny_session("pydoc", steps=3, eval_every=3)
    run(s, ":train")
    result = run(s, ":context windows=64")
    first = f"{result.curve.losses[0]:.3f}"
    text = plain(result)
    assert f"the model scores {first} ±" in text  # the sentence before said 2.661, this one (2.66)
    assert f"from position 0 ({first}) to the last quarter ({result.curve.late:.3f})" in text


def test_the_reports_numbers_under_an_ablation_say_they_are_trainings(checkpoint_dir, tmp_path):
    s, result = stopped_between_evaluations()
    run(s, ":ablate head=0.0")
    run(s, f":report {tmp_path / 'r.html'}")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "are the ablated model's" in page  # the banner: what follows is the ablated model's ...
    assert (f"val loss {result.val_loss:.4f} (measured at step 3)" in page  # ... but not these two
            and "(the losses as training measured them, before :ablate switched parts off)." in page)


# --- :compare's speed: a fresh process's one-off costs fell on the first contender alone --------------------------
def test_compares_first_contender_does_not_pay_the_processes_one_off_costs(monkeypatch):
    from minitf_repl.core.train import Trainer

    step, first = Trainer._forward_backward, [True]

    def once_slow(self, *args, **kwargs):  # what a fresh process's first training step costs, made plain
        if first[0]:
            first[0] = False
            import time

            time.sleep(1.0)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_forward_backward", once_slow)
    s = tiny_session()
    result = run(s, ":compare current lr=0.003 steps=6")
    a, b = result.outcomes  # the same model, lr apart: the same speed give or take noise
    # Each contender's steps take 0.15-0.2 s: charged to the first, the second of warm-up would put it over 1 s and
    # under a fifth of the other's tokens/s. The margins leave room for a stall of about half a second on a loaded
    # 2-core CI machine (0.5 s of warm-up against margins of 0.4 s and 0.5x failed on one stall of 0.15 s)
    assert not first[0] and a.seconds < b.seconds + 0.7 and a.tokens_per_second > 0.3 * b.tokens_per_second
    monkeypatch.setattr(Trainer, "_forward_backward", step)
    again = run(s, ":compare current lr=0.003 steps=6").outcomes[0]
    assert [e.val_loss for e in a.curve] == [e.val_loss for e in again.curve]  # the warm-up changes no number
