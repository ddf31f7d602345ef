"""What a sweep of training and the variant lab, tried as a user would, found wrong: each test failed before its fix.

:ngram under :ablate mask told the user to `:set causal=on` (causal is on: the ablation took the mask away), and
:ngram, :report, :checks and :experts showed the ablated model's numbers with no word of the ablation; :lrfind
stopped with Ctrl-C read the last rate it reached as the curve's lowest; :compare's tables and a chart's legend broke
at 60 columns; `:train data=X schedule=continue` was refused though `:train data=X` continues; and smaller ones, each
named in its test.
"""

import re

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.commands import REGISTRY
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_cli import invoke
from test_commands import Recorder, run
from test_render import console, plain, text_of

TINY = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def session_on(data="pydoc", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2, eval_every=1,
                                                                  eval_batches=2),
                   data_spec=data, device_name="cpu")


# --- :ngram under :ablate ------------------------------------------------------------------------------
def test_ngram_under_ablate_mask_names_ablate_off_not_a_setting_already_on():
    session = session_on()
    run(session, ":train steps=2")
    run(session, ":ablate mask")
    result = run(session, ":ngram n=3 sample=off")
    shown = plain(result)
    assert ":set causal=on" not in shown  # causal is on already: the setting would change nothing
    assert "(the mask is switched off by :ablate mask)" in shown and "(:ablate off puts the mask back)" in shown
    assert result.ablations == ["the causal mask"] and "switched off now: the causal mask" in shown
    assert json_document(REGISTRY["ngram"], result)["schema"] == "minitf.ngram/3"
    run(session, ":ablate off")
    run(session, ":ablate head=0.1")
    assert "switched off now: head 0.1" in plain(run(session, ":ngram n=3 sample=off"))  # its model row is ablated
    unmasked = session_on(causal=False)
    assert "(causal=off)" in plain(run(unmasked, ":ngram n=3 sample=off"))  # the setting's own fix stays
    assert "(:set causal=on puts the mask back)" in plain(run(unmasked, ":ngram n=3 sample=off"))


# --- :train watch= -----------------------------------------------------------------------------------------
def test_train_watch_grad_names_the_chart_of_its_frames(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path
    result = run(session, ":train steps=2 watch=grad")
    assert "; :plot what=block_grad charts each block's gradient by step" in plain(result)
    run(session, ":plot what=block_grad")  # the chart it names draws them


# --- :compare at 60 columns -------------------------------------------------------------------------------
@pytest.mark.parametrize("window", [32, 256])  # six bands; nine
def test_compare_by_position_fits_60_columns_whatever_the_labels(window):
    session = session_on(max_seq_len=window, n_layers=1)
    result = run(session, ":compare current pos_encoding=rope,norm=rmsnorm,activation=swiglu steps=2")
    shown = text_of(result, 60)
    assert "…" not in shown  # the last bands' numbers were cut at the edge
    for outcome in result.outcomes:
        assert all(f"{loss:.3f}" in shown for loss in outcome.band_losses)
    assert "● current" in text_of(result, 120)  # where the labels fit they stay


# --- :report under :ablate -----------------------------------------------------------------------------------
def test_the_report_says_what_ablate_switched_off(tmp_path):
    session = session_on()
    run(session, ":ablate head=0.1")
    result = run(session, f":report {tmp_path / 'off.html'}")
    page = (tmp_path / "off.html").read_text()
    assert result.ablations == ["head 0.1"] and "made with head 0.1 switched off" in plain(result)
    assert "Switched off by <code>:ablate</code>: head 0.1.</b>" in page
    assert json_document(REGISTRY["report"], result)["schema"] == "minitf.report/5"
    run(session, ":ablate off")
    run(session, ":ablate mask")
    run(session, f":report {tmp_path / 'mask.html'}")
    page = (tmp_path / "mask.html").read_text()
    assert "(:ablate mask), so it reads the future too" in page and "causal off" not in page  # causal is on
    run(session, ":ablate off")
    result = run(session, f":report {tmp_path / 'whole.html'}")
    assert result.ablations == [] and "Switched off" not in (tmp_path / "whole.html").read_text()


# --- :lrfind stopped with Ctrl-C ---------------------------------------------------------------------------------
class StopAfter(Recorder):
    """Ctrl-C after `n` steps of a command that reports progress (:lrfind)."""

    def __init__(self, n: int):
        super().__init__()
        self.n, self.progress = n, 0

    def on_progress(self, what, done, total):
        self.progress = done

    def should_stop(self):
        return self.progress >= self.n


def test_lrfind_stopped_early_says_so_and_does_not_read_its_last_rate_as_the_lowest():
    session = session_on()  # lr 0.01: past where a test stopped at step 55 of 100 (about 5e-3) reached
    result = run(session, ":lrfind steps=100", StopAfter(55))
    test = result.test
    assert len(test.rates) < test.steps and test.blown_at is None and test.rates[-1] < result.lr
    shown = plain(result)
    assert f"stopped after {len(test.rates)} of 100 steps, at {test.rates[-1]:.2g}" in shown
    assert test.lowest == test.rates[-1]  # at such low rates the loss is still falling where it stopped
    assert "lowest so far at" in shown and "is past the lowest point" not in shown
    assert f"your lr 0.01 lies past where the test was stopped ({test.rates[-1]:.2g})" in shown
    whole = plain(run(session, ":lrfind steps=10"))
    assert "stopped after" not in whole and "so far" not in whole


# --- :train data= and schedule=continue -------------------------------------------------------------------------
def test_train_data_takes_schedule_continue_where_it_goes_on_by_default(tmp_path):
    session = session_on("sort")
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=3")
    by_default = run(session, ":train steps=2 data=reverse")  # the same 12 symbols: the model and its run go on
    assert by_default.schedule == "continue" and by_default.total_steps == 5
    asked = run(session, ":train steps=2 data=sort schedule=continue")  # was refused: 'data= starts a run'
    assert asked.schedule == "continue" and asked.total_steps == 7 and session.data_spec == "sort"
    with pytest.raises(UserError, match="pydoc has another vocabulary: the switch rebuilds the model, which then has "
                                        "no run to go on from; :train schedule=new starts one$"):
        run(session, ":train steps=2 data=pydoc schedule=continue")  # was told to ':data pydoc' first: refused too
    assert session.data_spec == "sort" and session.trainer.step == 7


# --- :set causal= beside a setting that rebuilds ------------------------------------------------------------------
def test_set_causal_with_a_rebuild_does_not_say_the_weights_were_kept():
    session = session_on(causal=False)
    session.model  # built: a change of n_layers rebuilds it
    shown = plain(run(session, ":set causal=on n_layers=1"))
    assert "the model was rebuilt, weights reset (step 0)" in shown
    assert "the weights kept" not in shown and "the mask is back: position i reads positions j <= i only" in shown
    shown = plain(run(session, ":set causal=off"))  # in place: the weights are kept
    assert "no causal mask, the weights kept: every position reads the whole window" in shown


# --- :ablate out of range ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("what, said", [
    ("head=0.5", "head must be in 0..3 (each block has 4 heads), got 5"),  # was "(the model has 4)": 4 of what?
    ("head=2.0", "the block of head=L.H must be in 0..1 (the model has 2 blocks), got 2"),  # was "layer ... blocks"
    ("block=7", "block must be in 0..1 (the model has 2 blocks), got 7"),
])
def test_ablate_out_of_range_says_what_the_model_has(what, said):
    with pytest.raises(UserError, match=f"^{re.escape(said)}$"):
        run(session_on(), f":ablate {what}")


# --- :mistakes with a question drawn twice -------------------------------------------------------------------------
def test_mistakes_says_the_list_counts_distinct_questions():
    from minitf_repl.commands.mistakes import MistakesResult
    from minitf_repl.core.mistakes import TaskMistakes, WrongAnswer

    answers = [WrongAnswer(f"{k:03d}+001=", "0000", f"{k + 1:04d}", 0) for k in range(10)]
    found = TaskMistakes(500, 500, 499, 499, answers, [0.5] * 4, [0.5] * 4, [500, 0, 0, 0])
    shown = plain(MistakesResult("add", 0, found, None, 30))
    assert "500 wrong answers to 500 held-out questions of add" in shown
    assert "the first 10 of the 499 distinct questions answered wrongly; :mistakes show=499 lists them all" in shown
    found.wrong = found.questions = 499  # no repeat: no word of distinct
    assert "the first 10 of the 499 questions answered wrongly;" in plain(MistakesResult("add", 0, found, None, 30))


# --- one-shot :quantize and :ablate ---------------------------------------------------------------------------------
CLI_TINY = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32",
            "--set", "batch_size=4", "--data", "sort"]


def test_one_shot_quantize_and_ablate_do_not_name_a_next_command_they_do_not_reach(tmp_path):
    quantized = invoke(*CLI_TINY, "--checkpoint-dir", str(tmp_path), "quantize", "int8")
    assert quantized.exit_code == 0, quantized.output
    said = " ".join(quantized.stdout.split())
    assert "minitf gen now samples from the int8 copy" not in said  # the next minitf gen samples the float model
    # the REPL of this same session: its options (test_sweep_aa), then what it does there
    assert "the int8 copy (7 Linear layers int8, on the CPU) ends with this command: in the REPL (minitf " in said
    assert f"--checkpoint-dir {tmp_path}" in said and ":gen samples from it after :quantize int8" in said
    ablated = invoke(*CLI_TINY, "--checkpoint-dir", str(tmp_path), "ablate", "head=0.1")
    said = " ".join(ablated.stdout.split())
    assert ablated.exit_code == 0 and "minitf ablate off" not in said
    assert "switched off for this command only (the weights never changed)" in said
    session = session_on()
    assert ":gen, :step and :kv now decode with the int8 copy" in plain(run(session, ":quantize int8"))  # the REPL's words stay
    assert ":ablate off puts the model back" in plain(run(session, ":ablate head=0.1"))


# --- :compare's table of two tokenizers over seeds at 60 columns -----------------------------------------------------
def test_compare_table_of_bits_over_seeds_keeps_each_number_whole_at_60_columns():
    from types import SimpleNamespace

    from minitf_repl.render.live import CompareTable

    table = CompareTable(["tokenizer=char", "current"], seeds=2, by_bpc=True)
    for step in (1, 2):
        table.add(SimpleNamespace(step=step, label="tokenizer=char", val_loss=4.4837, spread=0.011, bpc=6.469,
                                  bpc_spread=0.016))
        table.add(SimpleNamespace(step=step, label="current", val_loss=5.6499, spread=0.036, bpc=5.346,
                                  bpc_spread=0.034))
    narrow = console(60)
    narrow.print(table)
    lines = narrow.file.getvalue().splitlines()
    assert not any(line.strip().startswith("±") for line in lines)  # a spread folded under its number
    assert any("6.469 ±0.016" in line and "5.346 ±0.034" in line for line in lines)
    assert "val bits per character" in narrow.file.getvalue()
    wide = console(120)
    wide.print(table)
    assert "4.4837 ±0.011 | 6.469 ±0.016" in wide.file.getvalue()  # where it fits, the loss per token stays


def test_compare_table_of_six_contenders_over_seeds_cuts_no_number_at_60_columns():
    from types import SimpleNamespace

    from minitf_repl.render.live import CompareTable

    labels = [f"lr=0.0{k}" for k in range(1, 7)]
    table = CompareTable(labels, seeds=2)
    for label in labels:
        table.add(SimpleNamespace(step=1, label=label, val_loss=4.4837, spread=0.011, bpc=None, bpc_spread=None))
    narrow = console(60)
    narrow.print(table)
    shown = narrow.file.getvalue()
    assert "…" not in shown and shown.count("4.4837") == 6  # was "4.48… ±0.0…" in two of the columns
    assert "(mean over 2 seeds; a wider terminal shows each spread)" in " ".join(shown.split())
    wide = console(120)
    wide.print(table)
    assert wide.file.getvalue().count("4.4837 ±0.011") == 6


# --- a chart's legend at 60 columns -----------------------------------------------------------------------------------
def test_a_chart_legend_breaks_between_entries_not_inside_one():
    from minitf_repl.render.chart import Curve, chart

    curves = [Curve(name, [1, 2], [4.0 - k, 3.0 - k], *glyph) for k, (name, glyph) in enumerate(
        [("current", ("●", "cyan")), ("pos_encoding=rope,norm=rmsnorm,activation=swiglu", ("▲", "magenta")),
         ("n_layers=2", ("■", "yellow"))])]
    narrow = console(60)
    narrow.print(chart(curves, 60, 6, unit="val loss"))
    lines = [line.rstrip() for line in narrow.file.getvalue().splitlines()]
    lines = lines[[k for k, line in enumerate(lines) if "└" in line][0] + 2:]  # the legend, under the x axis's labels
    assert "▲ pos_encoding=rope,norm=rmsnorm,activation=swiglu" in lines  # was "● current   ▲" above the name
    assert not any(line.endswith(("▲", "●", "■")) for line in lines)
    assert "■ n_layers=2   (val loss)" in lines


# --- :checks under :ablate ------------------------------------------------------------------------------------------
def test_checks_of_the_model_say_what_ablate_switched_off():
    session = session_on()
    run(session, ":ablate block=0")
    result = run(session, ":checks rows causal gradient")
    assert result.ablations == ["block 0"]
    assert "switched off now: block 0 (:ablate off puts the model back)" in plain(result)
    assert json_document(REGISTRY["checks"], result)["schema"] == "minitf.checks/11"
    assert "switched off now" not in plain(run(session, ":checks init"))  # a fresh model: nothing of it is off


def test_experts_under_ablate_says_the_routing_is_the_ablated_models():
    session = session_on(n_experts=4, experts_per_token=1)
    run(session, ":ablate head=0.1")
    result = run(session, ":experts")
    assert result.ablations == ["head 0.1"] and "switched off now: head 0.1" in plain(result)
    assert json_document(REGISTRY["experts"], result)["schema"] == "minitf.experts/5"
    run(session, ":ablate off")
    assert "switched off now" not in plain(run(session, ":experts"))


# --- a stopped :train's val loss ------------------------------------------------------------------------------------
def test_a_stopped_run_says_at_which_step_its_val_loss_was_measured(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path
    result = run(session, ":train steps=40 eval_every=10", Recorder(stop_after=15))  # Ctrl-C after step 15
    assert result.stopped and result.total_steps == 15 and result.evals[-1]["step"] == 10
    assert "train loss" in plain(result) and f"val loss {result.val_loss:.4f} at step 10," in plain(result)
    done = run(session, ":train")  # goes on to step 40, evaluated there: no step to name
    assert done.total_steps == 40 and f"val loss {done.val_loss:.4f}," in plain(done)


# --- left by the sweep, fixed after it -------------------------------------------------------------------------
def test_a_compiled_run_keeps_its_thread_count_so_it_never_recompiles_for_it(monkeypatch):
    from minitf_repl.core import train as core_train

    class Counting:
        def __init__(self):
            self.looks = 0

        def revisit(self):
            self.looks += 1

    monkeypatch.setattr(core_train, "compile_module", lambda module: (module, None))  # "compiled": no compiler run
    for compiled, looks in ((False, 3), (True, 0)):
        session = session_on()
        run(session, f":set compile={'on' if compiled else 'off'}")
        session.trainer.threads = policy = Counting()
        run(session, ":train steps=3")
        assert policy.looks == looks
    monkeypatch.setattr(core_train, "compile_module", lambda module: (None, "no compiler here; training eagerly"))
    session = session_on()
    run(session, ":set compile=on")
    session.trainer.threads = policy = Counting()
    run(session, ":train steps=3")  # compiling failed at the first step: eager steps after it look again
    assert policy.looks == 2


def test_ngram_on_random_tokens_does_not_say_a_context_counted_thousands_of_times_was_counted_a_few():
    result = run(session_on("random"), ":ngram n=2 sample=off")
    shown = " ".join(plain(result).split())
    each = result.train_tokens / result.rows[2].contexts
    assert each > 1000 and "counted a few times" not in shown
    assert f"each context was counted about {each:,.0f} times" in shown


def test_report_under_quantize_says_its_samples_are_the_float_models(tmp_path):
    session = session_on()
    run(session, ":train steps=2")
    run(session, f":report {tmp_path / 'float.html'}")
    assert ":quantize int8</code> is on" not in (tmp_path / "float.html").read_text()
    run(session, ":quantize int8")
    run(session, f":report {tmp_path / 'int8.html'}")
    page = (tmp_path / "int8.html").read_text()
    assert "From the float32 model, as everything on this page; <code>:quantize int8</code> is on, so " in page


def test_plot_after_a_switch_to_data_of_the_same_vocabulary_says_where_the_data_changed():
    session = session_on("sort")
    run(session, ":train steps=3")
    assert run(session, ":plot").data_from is None
    run(session, ":train steps=2 data=reverse")  # the same symbols: the model and its run go on, on other data
    result = run(session, ":plot")
    assert result.data_from == 3 and result.series[0].steps[0] == 1  # the chart still shows steps 1 to 5
    assert "the data in use came in after step 3: the curves before it are of the data before" in plain(result)
    assert json_document(REGISTRY["plot"], result)["data_from"] == 3


def test_lrfind_stopped_past_a_noisy_lowest_still_says_your_rate_was_never_reached():
    from minitf_repl.commands.rates import LrfindResult, where
    from minitf_repl.core.lrfind import LrRange

    rates = [1e-5 * 1.1 ** k for k in range(40)]  # stopped at step 40 of 100, near 4e-4
    smoothed = [4.6 - 0.01 * k for k in range(37)] + [4.25, 4.26, 4.27]  # lowest a few noisy steps before the stop
    test = LrRange("muon", rates, smoothed, smoothed, None, rates[36], smoothed[36], None, 1e-5, 1.0, 100)
    said = where(LrfindResult(test, "pydoc", 0.01, 0))
    assert said.startswith(f"your lr 0.01 lies past where the test was stopped ({rates[-1]:.2g}): ")  # not "past the
    assert "still falling" not in said  # lowest point", which the test never read at 0.01
    below = where(LrfindResult(test, "pydoc", 1e-4, 0))  # a rate the test did read: read as ever
    assert "stopped" not in below
