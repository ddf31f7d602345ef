"""The one wrapping rule for every message, and text from the model's vocabulary made safe to show.

A message wraps at spaces to the console's width and never inside a word, number or name: a break
inside `kept-20261201-033731` or `1,234` misleads a reader and breaks copy and paste. A single word
wider than the whole console breaks after a `|` or a comma where it has one (a usage's list of values,
a contender's settings: `embe` / `d|context]` read as values that do not exist), else goes on a line of
its own, whole, for the terminal to wrap (which keeps its characters one line for copy and paste). Rich
cannot say this by itself: its wrapping folds such a word ("fold") or cuts it ("crop", "ellipsis"), and
overflow="ignore" turns wrapping off altogether. soft_wrap=True, which messages used before, handed every line
to the terminal,
and a terminal breaks a line at its last column, wherever that falls in a word. So `Words` places
the breaks itself, and every sentence is printed through it: `say()` and the notes inside tables'
groups; text written piece by piece (generated tokens) goes through `WordStream`. Tables and charts
lay themselves out to the width (render.tables: NARROW, fits).

Output to a file or a pipe has no width to wrap at: the front ends make those consoles with
`console_for` (soft_wrap), and a message stays one line there (for grep, a log, a script).
"""

from __future__ import annotations

import os
import re
import shlex
import sys

from rich.cells import cell_len
from rich.console import Console
from rich.measure import Measurement
from rich.segment import Segment
from rich.text import Text

from ..palette import for_output, is_active, terminal_safe, text_for_output, write_stand_ins

# A number and its unit are one word ("1.8 s", "340 MB"), as type-setters join them: a line that ends "1.8" leaves
# the reader a bare number. A unit is a symbol of time or size alone; "60 steps" may part like any two words.
_UNIT = r"(?:s|ms|µs|min|kB|KB|KiB|MB|MiB|GB|GiB|TB)"
# So are a number's label and the number ("16: 0.07", :embed's likeness by distance): "16:" ended a line, "0.07" began
# the next; and a band of positions and its loss (watch=context's "8-15 1.912": "8-15" ended a line).
_WORD = re.compile(rf"\s*(?:\S*\d {_UNIT}[,.;:)!?]*(?=\s|$)|\d+: -?\d[\d.,e+-]*[,.;:)!?]*(?=\s|$)"
                   r"|\d+(?:-\d+)? (?:\d+\.\d+|-)(?=\s|$)|\S+)\s*")
_PIECE = re.compile(r"\s*[^|,\s]*[|,]?\s*")  # a long word's parts, each ending at its | or comma


def word_lines(text: Text, width: int, rest: int | None = None) -> list[Text]:
    """`text` cut into lines of at most `width` cells at spaces (`rest` cells after the first line, if
    given), never inside a word; a word wider than its line breaks after a `|` or a comma, else is a line of
    its own, whole. Line breaks in
    the text stay; trailing spaces go."""
    lines = []
    for paragraph in text.split("\n", allow_blank=True):
        breaks, column = [], 0
        for match in _WORD.finditer(paragraph.plain):
            word = match.group()
            pieces = [(match.start(), word)]
            if cell_len(word.strip()) > min(width, rest or width):  # wider than a line: cut after a | or a comma
                # (`[watch=attn|lens|...|embe` / `d|context]` read as values that do not exist)
                pieces = [(match.start() + m.start(), m.group()) for m in _PIECE.finditer(word) if m.group()]
            for start, piece in pieces:
                room = width if not lines and not breaks or rest is None else rest
                if column and column + cell_len(piece.rstrip()) > room:
                    breaks.append(start + len(piece) - len(piece.lstrip()))  # the new line starts at the piece
                    column = cell_len(piece.lstrip())
                else:
                    column += cell_len(piece)
        for line in paragraph.divide(breaks):
            line.rstrip()
            lines.append(line)
    return lines


class Words:
    """A renderable sentence (or several lines): wrapped by word_lines to the width it is given,
    `indent` cells in on every line, and `hang` cells more on every line after the first (an item's
    text under its label); one line per paragraph where the console does not wrap."""

    def __init__(self, text: Text, indent: int = 0, hang: int = 0):
        self.text = text
        self.indent = indent
        self.hang = hang

    def __rich_console__(self, console: Console, options):
        width = max(1, options.max_width - self.indent)
        lines = (self.text.split("\n", allow_blank=True) if options.no_wrap
                 else word_lines(self.text, width, max(1, width - self.hang) if self.hang else None))
        first = True
        for line in lines:
            margin = self.indent + (0 if first else self.hang)
            if margin:
                yield Segment(" " * margin)
            yield from line.render(console, end="")
            yield Segment.line()
            first = False

    def __rich_measure__(self, console: Console, options) -> Measurement:
        words = self.text.plain.split()
        longest = max((cell_len(w) for w in words), default=0)
        widest = max((cell_len(line) for line in self.text.plain.split("\n")), default=0)
        return Measurement(longest + self.indent, widest + self.indent)


class _Console(Console):
    """Rich's Console, but a TERM=dumb terminal (Emacs' shell) is as wide as the terminal says: Rich takes 80 columns
    there, whatever the terminal's, so at 40 columns every message broke inside its words. A width given, or
    $COLUMNS, still wins; colour and cursor movement stay off there, as Rich has it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.told_terminal = kwargs.get("force_terminal")  # None: the file says (is_a_terminal), not FORCE_COLOR
        # a width given, or $COLUMNS, as Rich reads them (which it then ignores on a dumb terminal without $LINES):
        # kept here, where Rich keeps its own in a private attribute
        columns = (kwargs.get("_environ") or os.environ).get("COLUMNS", "")
        self.asked_width = kwargs.get("width") or (int(columns) if columns.isdigit() else None)

    @property
    def width(self) -> int:
        return Console.width.fget(self)

    @width.setter
    def width(self, width: int) -> None:
        Console.width.fset(self, width)
        self.asked_width = width

    @property
    def size(self):
        size = super().size
        if not self.is_dumb_terminal:
            return size
        width = self.asked_width
        if width is None:
            try:
                width = os.get_terminal_size(self.file.fileno()).columns
            except (AttributeError, ValueError, OSError):  # io.UnsupportedOperation is both
                pass
        return type(size)(width or size.width, size.height)

    @size.setter
    def size(self, new_size):
        Console.size.fset(self, new_size)
        self.asked_width = new_size[0]

    def render(self, renderable, options=None):
        """Rich's rendering (Console.render, the public method Rich documents for extending it, which every print,
        Live and nested renderable goes through), with every character of the content that would act on a terminal
        (ESC, other controls, bidi overrides) written as its escape: a file or checkpoint name typed or renamed with
        ESC [31m in it drove the terminal from :data, :ls, :report or an error line. Rich's own codes are styles and
        control segments, untouched; say and add_row escape such text before it is laid out (its width is then the
        escape's). Escaping is idempotent, so a renderable inside another, rendered twice over, is escaped once.
        (This overrode Rich's private Console._render_buffer before.)"""
        for segment in super().render(renderable, options):
            text, style, control = segment
            yield segment if control or text.isprintable() or text == "\n" else Segment(terminal_safe(text), style)


def console_for(**options) -> Console:
    """A front end's Console: messages wrap at spaces on a terminal, and stay one line each in a file
    or a pipe (soft_wrap: nothing to wrap at there; Rich would otherwise assume 80 columns). An output
    that cannot encode a glyph writes an ASCII stand-in for it (palette.write_stand_ins). Never Jupyter's display: in
    a kernel (`main([...])` from a cell) Rich made each print a display output of its own, ANSI codes and all (a
    `gen --n 20` in 10 pieces, errors among them), where the kernel's streams show plain text as it comes."""
    write_stand_ins(options.get("file") or (sys.stderr if options.get("stderr") else sys.stdout))
    options.setdefault("force_jupyter", False)
    console = _Console(**options)
    console.soft_wrap = not on_a_terminal(console)
    return console


def is_a_terminal(console: Console) -> bool:
    """Whether `console` is to draw as on a terminal (redraw a live bar, hide the cursor): Rich's `is_terminal`, less
    what FORCE_COLOR (or TTY_COMPATIBLE=1) makes of a file or a pipe. Rich takes those for a terminal, and a
    `FORCE_COLOR=1 minitf train > run.log` held the live bar's redraws and none of the lines per evaluation; they ask
    for colour, which Rich still gives. A console told force_terminal by its maker (console_for's, a test's) is what
    it was told. Not the file alone either: TTY_COMPATIBLE=0 (or an empty FORCE_COLOR) on a real terminal makes Rich's
    is_terminal False, and its Live then draws nothing, so a bar chosen by the file alone showed no progress at all."""
    told = getattr(console, "told_terminal", None) if isinstance(console, _Console) else console.is_terminal
    if told is not None:
        return told
    try:
        return console.is_terminal and console.file.isatty()
    except (AttributeError, ValueError, OSError):  # no file, or a closed one
        return False


def on_a_terminal(console: Console) -> bool:
    """Whether what `console` writes lands on a terminal, in front of a person. Not `is_terminal` alone: piped input's
    consoles are told they are no terminal (force_terminal=False: no colour, no animation) and may still write to
    one (`printf ':gen raw=on\n' | minitf`), where a message must wrap at spaces and generated text stay escaped; and
    FORCE_COLOR makes a file or a pipe one for Rich (`is_a_terminal`), where a message stays one line."""
    if is_a_terminal(console):
        return True
    try:
        return console.file.isatty()
    except (AttributeError, ValueError, OSError):  # no file, or a closed one
        return False


def say(console: Console, message, style: str = "", indent: int = 0, hang: int = 0) -> None:
    """Print one message (a str, taken literally, or a Text) under the wrapping rule above, `indent`
    cells in (and `hang` more after the first line). crop=False: a word wider than the console is printed
    whole, for the terminal to wrap."""
    text = message if isinstance(message, Text) else Text(for_output(terminal_safe(str(message))), style=style)
    console.print(Words(text, indent, hang), highlight=False, crop=False)


def note(console: Console, text: str) -> None:
    """A dim line: what a reader needs to make sense of a result, said under the wrapping rule."""
    say(console, text, "dim")


def error(console: Console, message: str) -> None:
    """`error: <message>` (the console is the stderr one): one message, never markup, wrapped at spaces."""
    line = " ".join(str(message).split("\n"))
    say(console, f"error: {line}", "bold red")


# pyproject.toml's torch range, and the index of PyTorch's CPU builds: pip's default on Linux is a CUDA build of several
# GB. core.optimizers.check_torch words a torch too old alike (core does not import the renderer: kept alike by hand).
TORCH_RANGE = "torch>=2.9,<3"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def missing_torch(exc: BaseException) -> str | None:
    """The line for `exc` where it is torch not being there, not a bug, or None. pip leaves torch out where it was told
    to (--no-deps, a torch the user meant to bring); every command imports it, and each said "internal error:
    ModuleNotFoundError: No module named 'torch'", which named neither the problem nor its fix."""
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if name is None or name.partition(".")[0] != "torch":
        return None
    again = "" if name == "torch" else " --force-reinstall"
    install = (f"{shlex.quote(sys.executable)} -m pip install{again} '{TORCH_RANGE}' --index-url {TORCH_CPU_INDEX} (the CPU "
               "build; for a GPU, your CUDA build's index)")
    if name == "torch":
        return f"torch is not installed, and minitf needs it ({TORCH_RANGE}); install it: {install}"
    return f"torch is installed only in part (it has no {name}); install it again: {install}"


def internal_error(console: Console, exc: BaseException, where: str = "") -> None:
    """`internal error: ...` for a bug; where `exc` is no bug but torch not installed, `error:` and what to install
    (both front ends, the shell's and the REPL's, come here with any exception a command did not say itself)."""
    if (missing := missing_torch(exc)) is not None:
        error(console, missing)
        return
    line = " ".join(str(exc).split("\n"))
    say(console, f"internal error: {where}{type(exc).__name__}: {line} (run with --debug for the traceback)",
        "bold red")


class WordStream:
    """Text written piece by piece (generated tokens), wrapped like say(): at spaces, never in a word.

    Whether a word fits on the current line is known only once it ends, so the word being written
    is held back until a space or a newline comes (or `flush`). A word that cannot fit even a line
    of its own goes out whole as it grows, for the terminal to wrap; a space that would end a full
    line becomes the line break, as in Rich's own wrapping.
    """

    def __init__(self, console: Console):
        self.console = console
        self.column = 0  # cells written on the current line
        self.word = Text()  # the word held back

    def write(self, text: str, style: str = "") -> None:
        if self.console.soft_wrap:  # a file or a pipe (console_for): the text exactly as generated
            self._put(Text(text, style=style))
            return
        width = max(1, self.console.width)
        for ch in text:
            if ch == "\n":
                self.flush()
                self._put(Text("\n"))
                self.column = 0
            elif ch.isspace():
                self.flush()
                step = 8 - self.column % 8 if ch == "\t" else 1
                if self.column + step > width:
                    self._put(Text("\n"))
                    self.column = 0
                else:
                    self._put(Text(ch, style=style))
                    self.column += step
            else:
                self.word.append(ch, style=style)
                if self.column and self.column + self.word.cell_len > width:
                    self._put(Text("\n"))  # the word will not fit here: it starts the next line
                    self.column = 0
                if self.word.cell_len >= width:
                    self.flush()  # wider than any line: no reason to wait

    def flush(self) -> None:
        """Write the held-back word."""
        if self.word.plain:
            self._put(self.word)
            self.column += self.word.cell_len
            self.word = Text()

    def _put(self, text: Text) -> None:
        # The lines are cut here already: Rich must print them as they are (soft_wrap).
        self.console.print(text, end="", soft_wrap=True, highlight=False)


# --- text from the model's vocabulary -------------------------------------------------------------
def model_text(text: str, console: Console, style: str = "") -> Text:
    """Text from the model's vocabulary, safe for a terminal: each character that would act on one
    (ESC, other controls, bidi overrides) shown as its escape, dimmed (palette.terminal_safe), and each the output
    cannot encode as its escape (palette.text_for_output: "…" is not the stand-in "~" of the views' own "…")."""
    out = Text(style=style)
    for ch in text:
        out.append(text_for_output(terminal_safe(ch)), style="dim" if is_active(ch) else "")
    return out


def writes_raw(console: Console, raw: bool) -> bool:
    """:gen raw=on, on a console that is not a terminal (a file, a pipe): the exact characters."""
    return raw and not on_a_terminal(console)


def write_raw(console: Console, text: str) -> None:
    """`text` exactly, past Rich (whose Text drops BEL, backspace and carriage return even unstyled)."""
    console.file.write(text)
    console.file.flush()
