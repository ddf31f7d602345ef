"""How a running command talks to whoever started it: progress out, a stop request in.

Commands never print. They call a `Reporter` (training steps, generated text, notices), and ask it
`should_stop()` between steps and tokens. The base class shows nothing and is what a script or a
test passes; the Rich front end (render.RichReporter) draws progress bars and streams text, the
`--json` one sends notices to stderr only. Ctrl-C becomes `request_stop()`, set by the front door.

("Reporter", not "hooks": in this project a hook is what torch calls on a module, and the model's
`hook_*` probes are the places it calls them.)
"""

from __future__ import annotations


class Reporter:
    """The do-nothing reporter. Subclasses override what they show."""

    def __init__(self):
        self.stop_requested = False
        self.terminate_signal: int | None = None  # SIGTERM or SIGHUP asked the stop: minitf exits after the command

    # --- the stop request (Ctrl-C) -------------------------------------------------------------------
    def request_stop(self) -> None:
        """Ask the running command to stop after its current step or token. Safe in a signal handler."""
        self.stop_requested = True

    def should_stop(self) -> bool:
        """Asked between steps and between tokens; True ends the command early."""
        return self.stop_requested

    # --- progress ------------------------------------------------------------------------------------
    def on_train_start(self, run_steps: int, start_step: int, resumed: bool) -> None:
        """A run of run_steps steps begins (or resumes) with start_step of them already done."""

    def on_train_vocab(self, vocab_size: int) -> None:
        """The run about to start predicts among vocab_size tokens (a live loss table gives ln V, a uniform guess's
        loss, over its rows); said after on_train_start. A hook of its own, so that a reporter overriding
        on_train_start with its three arguments goes on working."""

    def on_train_dtype(self, dtype: str) -> None:
        """The run about to start trains in `dtype` ("float32", "bfloat16": a live loss table's legend says that its
        train loss is computed in bfloat16 and its val loss in float32); said after on_train_start, as on_train_vocab
        is, and a hook of its own for the same reason."""

    def on_step(self, info) -> None:
        """After every optimizer step (a core.train.StepInfo; val_loss is set on eval steps)."""

    def on_evaluate(self, done: int, total: int) -> None:
        """A training run's evaluation scored `done` of its `total` validation batches (a 12 x 768 model takes a
        minute over them, after the step's bar has moved)."""

    def on_watch(self, frame) -> None:
        """`:train watch=` made a frame (a core.watch.WatchFrame): before the first step and at each evaluation."""

    def on_gen_start(self, prompt: str, raw: bool = False) -> None:
        """Generation begins from `prompt` (the text the continuation follows); `raw`: :gen raw=on."""

    def on_token(self, text: str) -> None:
        """Generated text, as it is produced."""

    def on_compare_start(self, labels: list[str], steps: int, seeds: int, by_bpc: bool = False) -> None:
        """A comparison of these contenders begins: `steps` steps each, once per seed; `by_bpc`: their tokenizers
        differ, so they are compared by bits per character."""

    def on_compare_step(self, done: int, total: int) -> None:
        """A comparison made one more training step: `done` of `total` (all contenders and seeds)."""

    def on_compare_evaluate(self, label: str, done: int, total: int, what: str = "val") -> None:
        """Contender `label`'s evaluation scored `done` of its `total` validation batches (`what` "val"), or its loss
        by position at the end `done` of its `total` windows ("by position"): the steps' count stands still through
        them (on a bigger model, many seconds)."""

    def on_compare_eval(self, evaluation) -> None:
        """One contender reached an evaluation (a core.compare.Evaluation: mean and spread over seeds)."""

    def on_compare_diverged(self, label: str) -> None:
        """That contender diverged: it stopped, and has no more evaluations."""

    def on_progress(self, what: str, done: int, total: int) -> None:
        """Work of no other kind moved on: `done` of `total` units (the training steps of `:checks`)."""

    def notice(self, text: str) -> None:
        """One informational line, e.g. that a model was kept as a checkpoint before a rebuild."""
