"""Determinism and resuming: a run's float32 kernel, an evaluation a stop cut short, a stopped run a divergence kept."""

import pytest
import torch

from minitf_repl.core import fastpath
from minitf_repl.core.errors import TrainingDiverged
from minitf_repl.dispatch import to_json

from test_commands import Recorder, run, tiny_session
from test_render import plain


@pytest.fixture
def kernel_named(monkeypatch):
    """Name the float32 products' kernel by $MINITF_PRODUCTS for this test: the process's one-time choice is made
    again under it, and again after it (the next test's choice is its own, measured)."""

    def name(value: str) -> None:
        monkeypatch.setenv(fastpath.PRODUCTS_ENV, value)
        fastpath.onednn_faster.cache_clear()

    yield name
    monkeypatch.undo()
    fastpath.onednn_faster.cache_clear()


# --- 1. the kernel of the float32 products, which each process picks and which moves a run's numbers ----------------
def test_a_float32_runs_result_names_the_kernel_its_products_ran_on(kernel_named):
    kernel_named("torch")
    s = tiny_session(data="pydoc", dtype="float32")
    result = run(s, ":train")
    # was: no word of it, where MINITF_PRODUCTS=torch and =onednn gave other losses from step 3 at threads=1
    assert result.cpu_float32_products == "MKL" and to_json(result)["cpu_float32_products"] == "MKL"
    assert f"float32 on {torch.get_num_threads()} CPU thread" in plain(result, width=300)
    assert "MKL for the fast path's linear products" in plain(result, width=300)
    readable = tiny_session(data="pydoc", dtype="float32", fast_path=False)  # nn.Linear: torch's own, no choice
    assert run(readable, ":train").cpu_float32_products is None
    half = tiny_session(data="pydoc", dtype="bfloat16")  # bfloat16 steps; the evaluations' products are float32
    assert "MKL for the fast path's linear float32 products in its evaluations" in plain(run(half, ":train"),
                                                                                         width=300)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="this torch has no oneDNN")
def test_a_float32_run_on_onednn_names_onednn(kernel_named):
    kernel_named("onednn")
    result = run(tiny_session(data="pydoc", dtype="float32"), ":train")
    assert result.cpu_float32_products == "oneDNN"
    assert "oneDNN for the fast path's linear products" in plain(result, width=300)


def test_the_help_names_the_products_variable_and_says_how_far_thread_counts_part():
    s = tiny_session()
    seed, train = plain(run(s, ":help seed"), width=400), plain(run(s, ":help train"), width=1000)
    for text in (seed, train):
        # was: "threads=N fixes it" alone, and "the last digits", where float32 runs on the other kernel parted at
        # step 3 and a bfloat16 run at 1 and 2 threads read 2.6292 and 2.6279 at step 80
        assert "MINITF_PRODUCTS set to onednn or torch" in text and "third decimal" in text, text
        assert "last digits" not in text


# --- 2. a stop during an evaluation: the continued run measures it first --------------------------------------------
class StopInEvaluation(Recorder):
    """Asks for a stop once an evaluation has scored its first batch."""

    def __init__(self):
        super().__init__()
        self.scored = 0

    def on_evaluate(self, done, total):
        self.scored += 1

    def should_stop(self):
        return self.scored >= 1


def test_a_continued_run_measures_the_evaluation_a_stop_cut_short_as_the_unbroken_run_did():
    unbroken = tiny_session(data="pydoc", eval_batches=4)
    run(unbroken, ":train")
    s = tiny_session(data="pydoc", eval_batches=4)
    stopper = StopInEvaluation()
    run(s, ":train", stopper)
    assert s.trainer.step == 3 and s.trainer.history[-1]["val_loss"] is None
    assert any("continuing the run measures it first" in n for n in stopper.notices), stopper.notices
    then = Recorder()
    again = run(s, ":train", then)
    assert again.resumed and again.steps == 3
    # was: None at step 3 for good, where the unbroken run has its number (the weights bit for bit the same)
    assert [row["val_loss"] for row in s.trainer.history] == [row["val_loss"] for row in unbroken.trainer.history]
    # the run itself is the unbroken one's: the measurement drew no training batch and moved no weight
    assert [row["train_loss"] for row in s.trainer.history] == [row["train_loss"] for row in unbroken.trainer.history]
    for name, weight in unbroken.model.state_dict().items():
        assert torch.equal(weight, s.model.state_dict()[name]), name
    assert s.trainer.history[2]["val_bpc"] == unbroken.trainer.history[2]["val_bpc"] is not None
    measured = unbroken.trainer.history[2]["val_loss"]
    assert f"the evaluation after step 3, which the stop cut short, is measured now: val loss {measured:.4f}" \
        in then.notices


class StopInLastEvaluation(StopInEvaluation):
    """Asks for a stop once the run's last evaluation (the second of a 6-step run evaluated every 3) has scored a
    batch."""

    def should_stop(self):
        return self.scored >= 5  # the first evaluation's 4 batches, then one of the last's


def test_a_stop_during_the_runs_last_evaluation_promises_no_measurement_a_next_train_would_not_make():
    s = tiny_session(data="pydoc", eval_batches=4)
    stopper = StopInLastEvaluation()
    run(s, ":train", stopper)
    assert s.trainer.step == 6 and s.trainer.run_remaining == 0 and s.trainer.history[-1]["val_loss"] is None
    line = next(n for n in stopper.notices if "the evaluation after step 6" in n)
    # was: "continuing the run measures it first", where the next :train starts a new run that measures nothing
    assert "continuing the run" not in line and "stays unmeasured" in line and ":ngram" in line, line
    assert not run(s, ":train").resumed and s.trainer.history[5]["val_loss"] is None


def test_a_continued_run_keeps_one_autosave_slot_after_measuring_the_cut_evaluation(checkpoint_dir):
    s = tiny_session(data="pydoc", eval_batches=4)
    assert run(s, ":train", StopInEvaluation()).saved == "autosave"
    assert run(s, ":train").saved == "autosave"
    # was: the val loss filled in made the stop's autosave another run's, moved to autosave-1 and kept as stale
    assert sorted(p.name for p in checkpoint_dir.iterdir() if p.name.startswith("autosave")) == ["autosave"]


def test_a_run_continued_from_the_checkpoint_of_the_stop_measures_the_missing_evaluation_too():
    unbroken = tiny_session(data="pydoc", eval_batches=4)
    run(unbroken, ":train")
    s = tiny_session(data="pydoc", eval_batches=4)
    assert run(s, ":train", StopInEvaluation()).saved == "autosave"
    loaded = tiny_session(data="pydoc", eval_batches=4)
    run(loaded, ":load autosave")
    run(loaded, ":train")
    assert [row["val_loss"] for row in loaded.trainer.history] == [row["val_loss"] for row in unbroken.trainer.history]


# --- 4b. a continued run whose dtype changed while it was stopped --------------------------------------------------
def test_a_continued_runs_summary_says_the_dtype_its_earlier_steps_ran_in():
    s = tiny_session(data="pydoc", dtype="bfloat16")
    run(s, ":train", Recorder(stop_after=2))
    run(s, ":set dtype=float32")
    result = run(s, ":train")
    assert result.resumed and result.dtype == "float32"
    # was: "float32 on 1 CPU thread" alone, for a run whose first two steps were bfloat16
    assert "bfloat16 at step 2, the step before these" in plain(result, width=400)


# --- 4c. a divergence after a stopped run: the stopped run is back, and the line offered says what it drops ------
def test_a_divergence_after_a_stopped_run_says_it_is_kept_and_what_the_offered_line_drops():
    s = tiny_session(data="pydoc")
    run(s, ":train", Recorder(stop_after=2))
    with pytest.raises(TrainingDiverged) as diverged:
        run(s, ":train steps=4 lr=1e6")
    message = str(diverged.value)
    assert s.trainer.step == 2 and s.trainer.run_remaining == 4  # back, as the message now says
    # was: "... Lower the learning rate (...): :train lr=0.01", which dropped the stopped run again, unsaid
    assert "The stopped run is kept, its last 4 steps of 6 with it: :train alone goes on with it." in message
    assert message.endswith("(a new run again: it drops the stopped run's last 4 steps)"), message


# --- 2b. the evaluation a stop cut short, after a data switch, and under torchrun -----------------------------------
def test_a_continued_run_on_switched_data_leaves_the_cut_evaluation_unmeasured_and_says_why():
    s = tiny_session("reverse:4", eval_batches=4)
    run(s, ":train", StopInEvaluation())
    assert s.trainer.step == 3 and s.trainer.history[-1]["val_loss"] is None
    run(s, ":data reverse:5")  # the same vocabulary: the model and the run go on
    then = Recorder()
    again = run(s, ":train", then)
    assert again.resumed and s.trainer.step == 6
    # was: step 3's row, trained on reverse:4, given a val loss measured on reverse:5
    assert s.trainer.history[2]["val_loss"] is None and s.trainer.history[2]["accuracy"] is None
    assert any("after step 3, which the stop cut short, stays unmeasured: the data" in n for n in then.notices), \
        then.notices


def test_under_torchrun_a_non_finite_missing_evaluation_is_left_to_the_next_steps_loss_check():
    s = tiny_session(data="pydoc", eval_batches=4)
    run(s, ":train", StopInEvaluation())
    trainer = s.trainer
    trainer._ddp = object()  # rank 0 of a launch: the only one that evaluates
    trainer.evaluate = lambda **_: (float("inf"), None)
    # was: TrainingDiverged on rank 0 alone, the other ranks waiting in the next step's collective for good
    assert trainer._measure_missing_evaluation(None, None, None) is False
    assert trainer.history[-1]["val_loss"] == float("inf")


def test_a_watch_views_forwards_do_not_count_as_the_runs_float32_products():
    fastpath.float32_products_chosen(reset=True)
    x = torch.ones(2, 4)
    with fastpath.products_uncounted():  # what :train watch= wraps its frames in
        fastpath.onednn_pays(x, torch.ones(3, 4))
    # was: a frame's float32 forwards named a kernel for a run whose own products were all bfloat16
    assert not fastpath.float32_products_chosen()
    fastpath.onednn_pays(x, torch.ones(3, 4))
    assert fastpath.float32_products_chosen()
