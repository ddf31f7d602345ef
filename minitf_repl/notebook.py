"""The lab from Python: `Lab`, one session that runs the REPL's lines and gives back their results, for a notebook
(Jupyter, IPython) or a script.

`lab(":attn layer=1")` goes through the REPL's own front door (dispatch.FrontDoor): the same parsing, checks and
one-line errors, Ctrl-C (a kernel's interrupt) stopping a :train after its step. What the command shows is recorded
by one Rich console, never drawn as it runs: a notebook then shows the view once, as text/plain and text/html of
that one recording, where a console of its own displayed each print of a streamed :gen or :shapes as an output of
its own (33 outputs for 33 tokens). Progress (a :train's line per evaluation) and errors go to standard error as
they come, so that a long run is seen to run and a failed line is seen in a script that shows nothing else.
"""

from __future__ import annotations

import io

from rich.jupyter import JUPYTER_HTML_FORMAT

from .commands import REGISTRY
from .core.errors import UserError
from .dispatch import FAILED, FrontDoor, FrontEnd, json_document
from .parsing import parse_line
from .render.words import console_for, error
from .session import Session

WIDTH = 100  # columns a view is laid out in: a notebook's cell shows about 100 characters of monospace text


class Shown:
    """What `Lab.__call__` gives back: the command's result (`result`, its fields also read on this object), its
    view as recorded (`text`, `html`; a notebook shows it once), `status` ("ok", "failed", "empty", "quit") and, for a
    failed line, its error line (`error`). `json()` is the document `--json` prints."""

    def __init__(self, command, result, status: str, text: str, html: str, error_line: str):
        self.command = command
        self.result = result
        self.status = status
        self.text = text
        self.html = html
        self.error = error_line

    @property
    def ok(self) -> bool:
        return self.status != FAILED

    def json(self) -> dict:
        """{"schema": "minitf.NAME/N", ...}: what `minitf NAME --json` prints for the same result."""
        if self.result is None:
            raise UserError(f"the line ran no command to its end ({self.error or self.status}), so it has no JSON "
                            "document; run it again once it succeeds")
        return json_document(self.command, self.result)

    def __getattr__(self, name: str):
        # the result's fields, as on the result itself (`lab(":qkv").weights`); only for names this object lacks
        result = self.__dict__.get("result")
        if result is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(result, name)

    def __dir__(self):
        return sorted({*super().__dir__(), *(dir(self.result) if self.result is not None else ())})

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        # the view, not the dataclass: a result's repr is kilobytes of raw floats (:qkv's)
        return self.text.rstrip("\n") or (f"<{self.status}: {self.error}>" if self.error else f"<{self.status}>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        """IPython's and Jupyter's display: the one recorded view as text and HTML; nothing where the line showed
        nothing (its error went to standard error as it failed)."""
        if not self.text.strip():
            return {}
        return {"text/plain": self.text.rstrip("\n"), "text/html": self.html}


class _Door(FrontDoor):
    """The front door, keeping the command that ran and its result for `Shown`."""

    def run(self, command, args: dict, meant: str = "") -> str:
        self.command, self.result = command, None
        return super().run(command, args, meant)

    def _reporter(self):
        # the result reaches the front end only through the reporter's finish(result), which renders it
        reporter = super()._reporter()
        finish = reporter.finish

        def keep(result) -> None:
            self.result = result
            finish(result)

        reporter.finish = keep
        return reporter


class Lab:
    """One session of the lab, run from Python: `lab = Lab()`, then `lab(":attn layer=1")` (the ':' may be left out).

    `model` (a MiniTransformerLM) and `data` (a dataset from load_data, or its name as `--data` takes it: "sort:4",
    a path) are adopted as the session's; `trainer` (a Trainer) brings its model, data and history together. With
    none of them the session builds its model from its settings on first use, as the shell does. `checkpoint_dir`
    and `settings` ({"lr": 0.001, "n_layers": 2}) are the shell's --checkpoint-dir and --set; `device` its --device;
    `width` the columns a view is laid out in."""

    def __init__(self, model=None, data=None, trainer=None, checkpoint_dir=None, settings: dict | None = None,
                 device: str = "auto", width: int = WIDTH):
        spec = data if isinstance(data, str) else "pydoc"
        self.session = Session(data_spec=spec, device_name=device, checkpoint_dir=checkpoint_dir)
        # Recorded, never drawn: force_jupyter=False, or Rich displays each print in a notebook as an output of its
        # own (and the StringIO too). A terminal to Rich, so that colours are recorded for the HTML and messages wrap
        # at spaces within `width`; live=False below keeps it from drawing any animation.
        self.out = console_for(file=io.StringIO(), width=width, record=True, force_jupyter=False, force_terminal=True,
                               color_system="truecolor")
        # As they come, on standard error: in a notebook a stream of text appended to the cell's output
        self.err = console_for(stderr=True, force_jupyter=False, record=True)
        progress = console_for(stderr=True, force_jupyter=False)
        # A line per evaluation (progress is not out: RichReporter's `lines`), no bar: a notebook shows no redraw, and
        # a bar's each frame became text of its own; a long :train is seen to run, its table shown once at its end
        self.door = _Door(self.session, self.out, self.err, FrontEnd(live=False), progress=progress)
        if settings:
            self._set(settings)
        if trainer is not None or model is not None or not (data is None or isinstance(data, str)):
            self._adopt(model, None if isinstance(data, str) else data, trainer)

    def __call__(self, line: str) -> Shown:
        """Run one line as typed at the REPL; the result, shown once where the notebook shows it. A user's mistake is
        its one error line (on standard error, and in `error`), and the lab goes on."""
        if not isinstance(line, str):
            raise TypeError(f"Lab runs a line of the REPL's, got {type(line).__name__}; e.g. lab(':attn layer=1')")
        stripped = line.strip()
        # always a command: in Python a text to continue is given to :gen by name (lab(":gen Once upon"))
        typed = stripped if not stripped or stripped.startswith(":") else f":{stripped}"
        self.door.command, self.door.result = None, None
        status = self.door.run_line(typed)
        html = self.out.export_html(inline_styles=True, code_format=JUPYTER_HTML_FORMAT, clear=False)
        text = self.out.export_text(clear=True)
        said = " ".join(self.err.export_text(clear=True).split())
        return Shown(self.door.command, self.door.result, status, text, html, said if status == FAILED else "")

    @property
    def model(self):
        """The session's model (built from its settings on first use)."""
        return self.session.model

    @property
    def data(self):
        """The session's dataset (loaded on first use)."""
        return self.session.data

    @property
    def trainer(self):
        """The session's Trainer: its history is what :plot draws."""
        return self.session.trainer

    def _set(self, settings: dict) -> None:
        """The shell's --set: every pair through :set's own parsing and checks; a bad one raises its UserError."""
        from .dispatch import run_command
        from .render.live import QuietReporter

        def typed(value) -> str:
            if isinstance(value, bool):
                return "on" if value else "off"
            return "none" if value is None else str(value)  # a float's repr: every digit given

        pairs = " ".join(f"{key}={typed(value)}" for key, value in settings.items())
        setter = next(c for c in REGISTRY.values() if c.pairs)  # the command that takes settings as pairs (:set)
        command, args = parse_line(f":{setter.name} {pairs}", REGISTRY)
        run_command(self.session, command, args, QuietReporter(self.err))

    def _adopt(self, model, data, trainer) -> None:
        """A model, data or Trainer built in Python, as the session's (as :load takes a checkpoint's)."""
        from .core.train import Trainer

        if trainer is not None:
            if not isinstance(trainer, Trainer):
                raise TypeError(f"trainer= takes a Trainer, got {type(trainer).__name__}")
            model, data = trainer.model, trainer.data
        if model is None:  # data alone: the model is built for it on first use, as after :data
            self.session.use_data(self._spec(data), data)
            return
        data = data if data is not None else self.session.data
        vocab = data.tokenizer.vocab_size
        if model.config.vocab_size != vocab:
            raise UserError(f"the model reads {model.config.vocab_size} tokens and the data {vocab}; give the data it "
                            "was built for: Lab(model=model, data=data)")
        device = next(model.parameters()).device
        self.session.move_to(device)  # the session computes where the model is
        if trainer is None:
            trainer = Trainer(model, data, self.session.train_config, device)
        self.session.adopt(self._spec(data), data, model, trainer)

    @staticmethod
    def _spec(data) -> str:
        """What the session calls the data (as --data names it: sort:4)."""
        info = data.info()
        return info.shown_name or info.name
