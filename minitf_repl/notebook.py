"""The lab from Python: `Lab`, one session that runs the REPL's lines and gives back their results, for a notebook
(Jupyter, IPython) or a script.

`lab(":attn layer=1")` goes through the REPL's own front door (dispatch.FrontDoor): the same parsing, checks and
one-line errors, Ctrl-C (a kernel's interrupt) stopping a :train after its step. What the command shows is recorded,
never drawn as it runs, by two Rich consoles, one without colour for the text (as a pipe shows it) and one in colour
for the HTML: a notebook then shows the view once, where a console of its own displayed each print of a streamed
:gen or :shapes as an output of its own (33 outputs for 33 tokens). Progress (a :train's line per evaluation) and errors go to standard error as
they come, so that a long run is seen to run and a failed line is seen in a script that shows nothing else.
"""

from __future__ import annotations

import io
import os

from rich.jupyter import JUPYTER_HTML_FORMAT

from .commands import REGISTRY
from .core.errors import UserError
from .dispatch import FAILED, FrontDoor, FrontEnd, json_document
from .parsing import parse_line
from .render.renderers import render, text_apart
from .render.words import console_for, error
from .session import Session

MIN_WIDTH = 20  # the narrowest a view is laid out in: Rich wraps every word on a line of its own below it
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
        """The one recorded view as text and HTML; nothing where the line showed nothing (its error went to standard
        error as it failed)."""
        if not self.text.strip():
            return {}
        return {"text/plain": self.text.rstrip("\n"), "text/html": self.html}

    def _ipython_display_(self) -> None:
        """IPython's and Jupyter's display, asked before any other: the view once, and nothing at all where the line
        showed nothing (a failed line, said on standard error as it failed; an empty one; :quit). An empty bundle
        alone did not do it: IPython then showed __repr__'s text, a second `<failed: error: ...>` under the error."""
        bundle = self._repr_mimebundle_()
        if bundle:
            from IPython.display import display

            display(bundle, raw=True)


class _Door(FrontDoor):
    """The front door, keeping the command that ran and its result for `Shown`, and its view drawn a second time, in
    colour, on `colour` (`coloured`: where it was, for the HTML)."""

    def __init__(self, *args, colour=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.colour = colour
        self.coloured = False

    def run(self, command, args: dict, meant: str = "") -> str:
        self.command, self.result, self.coloured = command, None, False
        return super().run(command, args, meant)

    def show(self, reporter, result) -> None:
        self.result = result
        # the view whole from its result: not where its text was streamed as it ran (:gen), nor after anything else
        # the line showed; those keep the HTML of the text recording
        whole = not getattr(reporter, "streamed", False) and not self.out.export_text(clear=False)
        super().show(reporter, result)
        if whole and self.colour is not None:
            # as finish shows a result on out, which is never the progress console here (RichReporter.finish)
            if not text_apart(result, self.colour):
                render(result, self.colour)
            self.coloured = True


def _refuse_a_shape(settings: dict) -> None:
    """Settings that would rebuild a model given to Lab (its shape: n_layers, d_model, ...) are refused: they were
    applied before the model was adopted, which then replaced them without a word (`:config` showed the model's)."""
    from .core.config import ModelConfig

    rebuilding = {name: spec.name for spec in ModelConfig.specs() if not spec.in_place
                  for name in (spec.name, *spec.aliases)}
    named = [str(key) for key in settings if str(key).lower() in rebuilding]
    if named:
        raise UserError(f"settings={{{', '.join(repr(k) for k in named)}: ...}} would build another model than the "
                        "one given, which has its own; build the model with them (ModelConfig(...)), or leave them out "
                        "of settings=")


class Lab:
    """One session of the lab, run from Python: `lab = Lab()`, then `lab(":attn layer=1")` (the ':' may be left out).

    `model` (a MiniTransformerLM) and `data` (a dataset from load_data, or its name as `--data` takes it: "sort:4",
    a path) are adopted as the session's; `trainer` (a Trainer) brings its model, data and history together. With
    none of them the session builds its model from its settings on first use, as the shell does. `checkpoint_dir`
    and `settings` ({"lr": 0.001, "n_layers": 2}) are the shell's --checkpoint-dir and --set; `device` its --device;
    `width` the columns a view is laid out in. A wrong one is refused here, in one line naming the fix (a TypeError
    for an object of another kind), not by every line after."""

    def __init__(self, model=None, data=None, trainer=None, checkpoint_dir=None, settings: dict | None = None,
                 device: str = "auto", width: int = WIDTH):
        _check(model, data, checkpoint_dir, settings, device, width)
        spec = data if isinstance(data, str) else "pydoc"
        self.session = Session(data_spec=spec, device_name=device, checkpoint_dir=checkpoint_dir)
        # Recorded, never drawn: force_jupyter=False, or Rich displays each print in a notebook as an output of its
        # own (and the StringIO too). A terminal to Rich, so that messages wrap at spaces within `width`; live=False
        # below keeps it from drawing any animation. Twice: without colour for the text (str, print, text/plain),
        # which then shows what colour says as a pipe shows it (an attention map's shades; coloured cells were
        # spaces there, every map blank), and in colour for the HTML
        self.out = console_for(file=io.StringIO(), width=width, record=True, force_jupyter=False, force_terminal=True,
                               color_system=None)
        self.colour = console_for(file=io.StringIO(), width=width, record=True, force_jupyter=False,
                                  force_terminal=True, color_system="truecolor")
        # As they come, on standard error: in a notebook a stream of text appended to the cell's output, which breaks
        # a long line at its own width, inside a number ("tokens/s" / "7,621"): wrapped at spaces within `width` here
        self.err = console_for(stderr=True, force_jupyter=False, record=True, width=width)
        progress = console_for(stderr=True, force_jupyter=False, width=width)
        self.err.soft_wrap = progress.soft_wrap = False
        # A line per evaluation (progress is not out: RichReporter's `lines`), no bar: a notebook shows no redraw, and
        # a bar's each frame became text of its own; a long :train is seen to run, its table shown once at its end
        self.door = _Door(self.session, self.out, self.err, FrontEnd(live=False), progress=progress,
                          colour=self.colour)
        if settings and (model is not None or trainer is not None):
            _refuse_a_shape(settings)
        if settings:
            self._set(settings)
        if trainer is not None or model is not None or not (data is None or isinstance(data, str)):
            self._adopt(model, None if isinstance(data, str) else data, trainer)
        # what :set and the adoption said is theirs, said on standard error as it came: not the first failing line's
        # `error` (which read "d_ff stays 512, ... narrows the FFN to that error: layer must be in 0..0")
        self.err.export_text(clear=True)

    def __call__(self, line: str) -> Shown:
        """Run one line as typed at the REPL; the result, shown once where the notebook shows it. A user's mistake is
        its one error line (on standard error, and in `error`), and the lab goes on."""
        if not isinstance(line, str):
            raise TypeError(f"Lab runs a line of the REPL's, got {type(line).__name__}; e.g. lab(':attn layer=1')")
        stripped = line.strip()
        # a line of a command's own words is that command, its ':' left out (`attn layer=0`, `help train`); any other
        # is text to continue, as at the REPL (`3141=`, the question :train says to ask, `train of thought is`: a
        # line that merely starts with a command's name, command names being everyday words)
        typed = f":{stripped}" if stripped and self.door.runs_as_command(stripped) else stripped
        self.door.command, self.door.result = None, None
        status = self.door.run_line(typed)
        recorded = self.colour if self.door.coloured else self.out
        html = recorded.export_html(inline_styles=True, code_format=JUPYTER_HTML_FORMAT, clear=False)
        self.colour.export_text(clear=True)  # (the next line's HTML starts empty)
        # without the padding a table or a panel leaves at the end of its lines (:help's, to `width`)
        text = "\n".join(row.rstrip() for row in self.out.export_text(clear=True).split("\n"))
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
        """What the session calls the data, as --data names it: sort:4, or a file's path, made absolute.

        A text read from a file (it has a stamp) is named by its path (recipe_key: the path load_data was given), as
        `--data PATH` names it: its name alone ("text2.txt") was looked for in the working folder, where :train and
        :data said the untouched file was "no longer on disk", and :save kept a path that never existed. Made
        absolute now, so that a notebook's later chdir still finds it (a relative path given to load_data in
        another folder than the Lab's cannot be told apart: give load_data an absolute one there). A local copy of
        a built-in text (load_data names it "shakespeare", keeping no path) is the built-in."""
        from .core.catalog import CORPORA, TASKS

        info = data.info()
        path = getattr(data, "recipe_key", None)
        if getattr(data, "stamp", None) is not None and isinstance(path, str) and path not in CORPORA + TASKS:
            return os.path.abspath(os.path.expanduser(path))
        return info.shown_name or info.name


def _check(model, data, checkpoint_dir, settings, device, width) -> None:
    """Lab's arguments, each refused in one line naming the fix: a TypeError for an object of another kind, a
    UserError for a value it cannot use (data or a device not here). Accepted, they failed later: an AttributeError
    from deep inside for Lab(model="x"), and every line after for Lab(data="nosuchdata") or Lab(device="gpu")."""
    from .commands.settings import device_problem
    from .core.catalog import data_problem
    from .core.model import require_model

    if model is not None:
        require_model(model, "Lab(model=...)")
    if isinstance(data, str):
        if (problem := data_problem(data)) is not None:
            raise UserError(f"data={data!r}: {problem}")
    elif data is not None and not callable(getattr(data, "get_batch", None)):
        raise TypeError(f"data= takes a dataset or its name as --data takes it, got {type(data).__name__}; e.g. "
                        "Lab(data='sort:4') or Lab(data=load_data('sort:4'))")
    if checkpoint_dir is not None and not isinstance(checkpoint_dir, (str, os.PathLike)):
        raise TypeError(f"checkpoint_dir= takes a folder's path, got {type(checkpoint_dir).__name__}; e.g. "
                        "Lab(checkpoint_dir='checkpoints')")
    if settings is not None and not isinstance(settings, dict):
        raise TypeError(f"settings= takes a dict of settings, got {type(settings).__name__}; e.g. "
                        "Lab(settings={'n_layers': 2, 'lr': 0.001})")
    if not isinstance(device, str):
        raise TypeError(f"device= takes a device's name, got {type(device).__name__}; e.g. Lab(device='cpu')")
    if (problem := device_problem(device)) is not None:
        raise UserError(f"device={device!r}: {problem}")
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"width= takes a whole number of columns, got {type(width).__name__}; e.g. Lab(width=100)")
    if width < MIN_WIDTH:  # width=0 recorded nothing at all, errors included (as COLUMNS=0 did in the shell)
        raise ValueError(f"width={width} leaves no room for a view; give {MIN_WIDTH} columns or more, e.g. "
                         "Lab(width=100)")
