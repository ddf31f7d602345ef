"""The items earlier sweeps left on training and the views, and more of their kind: each test failed before its fix.

A Ctrl-C during one of :train's evaluations waited for all of its batches (on a bigger model with many eval batches,
many seconds) before the run stopped: the evaluation now stops at its next batch, the step stays trained, and a line
says that its val loss was not measured.
"""

from minitf_repl.commands import TrainResult

from test_commands import Recorder, run, tiny_session


class StopInEvaluation(Recorder):
    """Asks for a stop once the first evaluation has scored `after` batches; counts the batches scored."""

    def __init__(self, after: int = 1):
        super().__init__()
        self.after, self.scored = after, 0

    def on_evaluate(self, done, total):
        self.scored += 1

    def should_stop(self):
        return self.scored >= self.after


def test_a_stop_during_an_evaluation_stops_it_at_its_next_batch():
    s = tiny_session(steps=6, eval_every=3, eval_batches=20)
    hooks = StopInEvaluation(after=2)
    result = run(s, ":train", hooks)
    assert isinstance(result, TrainResult)
    assert hooks.scored == 2  # not 20
    assert result.stopped and result.steps == 3 and s.trainer.step == 3  # the step is kept, trained
    assert result.val_loss is None and result.evals == []
    assert any("evaluation after step 3 was stopped after 2 of 20 batches: its val loss was not measured" in n
               for n in hooks.notices), hooks.notices
    assert s.trainer.history[-1]["val_loss"] is None
    again = run(s, ":train", Recorder())  # the stopped run goes on, and evaluates in full
    assert again.resumed and again.steps == 3 and again.val_loss is not None
