"""The built-in data by name, without torch: what `core.data.load_data` accepts besides a file path.

The shell completes these names, and its help and messages list them, before torch has loaded
(core.data imports it), so they are written here once and core.data reads them from here too.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from pathlib import Path

from .paths import cut_middle

CORPORA = ("pydoc", "shakespeare")  # text: a 90/10 train/validation split of one document
# Synthetic tasks, each with the letter its spec's size argument goes by: `sort:8`, `random:20`.
TASK_ARGUMENTS = {"sort": "N", "reverse": "N", "add": "N", "random": "V", "repeat": "V"}
TASKS = tuple(TASK_ARGUMENTS)


# Each task's size: (its default, the smallest, the largest); random's and repeat's are vocabularies, at most the 62
# symbols of core.data.RANDOM_SYMBOLS
TASK_SIZES = {"sort": (6, 1, 30), "reverse": (6, 1, 30), "add": (3, 1, 30), "random": (50, 2, 62),
              "repeat": (50, 2, 62)}
# What each is, in a line (`:data` lists them: a name alone told a learner nothing of sort:N or repeat:V); a task's
# example is its default size's (tests/test_sweep_bj.py checks each against core.data's own)
ABOUT = {
    "pydoc": "Python's reference documentation (pydoc_data.topics), the default: built in, nothing to download",
    "shakespeare": "tiny Shakespeare (karpathy/char-rnn), 1.1 M characters: downloaded once, then kept",
    "sort": "N digits, then the same digits sorted: 314159=113459",
    "reverse": "N digits, then the same digits reversed: 314159=951413",
    "add": "two N-digit numbers, then their sum in N + 1 digits: 314+159=0473",
    "random": "uniformly random tokens from V symbols: nothing to learn, the loss stays at ln(V)",
    "repeat": "random tokens from V symbols, then the same again: learned by copying from the context",
}


# The core's way on from data it cannot use (core.data.VocabularyOnly); the front end says how in its syntax
# (dispatch.phrase): "choose other data" alone left a user to guess, and `--data` of the same changed file was
# refused alike
OTHER_DATA = "choose other data"


def spec_forms() -> tuple[str, ...]:
    """How each built-in data spec is written: pydoc, shakespeare, sort[:N], ..., random[:V]."""
    return CORPORA + tuple(f"{task}[:{letter}]" for task, letter in TASK_ARGUMENTS.items())


def built_in_lines() -> list[str]:
    """Each built-in data spec with what it is: `sort[:N]  N digits, then ... (N from 1 to 30, default 6)`."""
    lines = []
    for form in spec_forms():
        name = form.partition("[")[0]
        sizes = ""
        if name in TASK_SIZES:
            default, low, high = TASK_SIZES[name]
            sizes = f" ({TASK_ARGUMENTS[name]} from {low} to {high}, default {default})"
        lines.append(f"{form}  {ABOUT[name]}{sizes}")
    return lines

# Tiny Shakespeare as karpathy/char-rnn serves it: a local copy given by path is the same data, recipe included.
SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
SHAKESPEARE_BYTES = 1_115_394  # ASCII: one byte a character
SHAKESPEARE_LINES = 40_000  # its "\n"s: a copy with "\r\n" line endings is as many bytes longer


def bytes_as_read(raw: bytes) -> bytes:
    """A text file's bytes as core.data reads its text: a leading UTF-8 byte-order mark dropped, "\r\n" and a lone
    "\r" read as "\n" (a copy of tiny Shakespeare saved on Windows is tiny Shakespeare, by path or downloaded)."""
    return raw.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def known_as(spec: str) -> str:
    """The name a data spec trains under before it is loaded: a file that is a copy of tiny Shakespeare is
    `shakespeare` (its recipe, core.recipes), as core.data names it once read; any other spec is itself.

    `minitf --data PATH config` shows the settings a run would take without loading the data (that needs
    torch). Only a file of about tiny Shakespeare's size is read and hashed, so a large file costs a stat: as
    core.data reads a file, its "\r\n" or lone "\r" line endings as "\n" and a leading byte-order mark dropped (a
    copy saved on Windows: `config` showed the defaults, and `train` ran on the recipe)."""
    try:
        path = Path(spec.strip()).expanduser()
        if path.is_file() and SHAKESPEARE_BYTES <= path.stat().st_size <= SHAKESPEARE_BYTES + SHAKESPEARE_LINES + 3:
            if hashlib.sha256(bytes_as_read(path.read_bytes())).hexdigest() == SHAKESPEARE_SHA256:
                return "shakespeare"
    except (OSError, RuntimeError, ValueError):  # unreadable, a name too long, a NUL in it, ~ with no home folder:
        # core.data says what is wrong
        pass
    return spec


def no_file_named(spec: str) -> str | None:
    """What a spec that is no built-in data and names no file is instead, in a message with its fix, or None (a file
    of that name exists, or the spec is a mistyped path: "no such file" says that). Path would read https://x as
    https:/x, and two paths or a corpus with a size were each "no such file" of the whole spec."""
    spec = spec.strip()
    name, _, arg = spec.partition(":")
    try:
        if os.path.lexists(Path(spec).expanduser()):
            return None
        if "://" in spec:
            return (f"{cut_middle(spec)} is a URL, and minitf reads data from a file on disk; download it yourself and "
                    "give its path (tiny Shakespeare is the data shakespeare: minitf downloads it)")
        if name in CORPORA and arg:
            return f"{name} takes no size (:{cut_middle(arg, 20)}): it is one text; give {name} alone"
        if name not in CORPORA + TASKS and name.lower() in CORPORA + TASKS:  # the names are lower case
            return f"no such file: {cut_middle(spec)}; did you mean {name.lower()}{':' + arg if arg else ''}?"
        # a name misspelled (shakespear): said as a name, where it has no part of a path (a file's name is anything)
        close = difflib.get_close_matches(name.lower(), CORPORA + TASKS, n=1, cutoff=0.8)
        if close and name not in CORPORA + TASKS and "/" not in spec and "\\" not in spec and "." not in name:
            return f"no such file: {cut_middle(spec)}; did you mean {close[0]}{':' + arg if arg else ''}?"
        parts = spec.split()
        if len(parts) > 1 and all(os.path.isfile(Path(part).expanduser()) for part in parts):
            return (f"the data is one file, and {cut_middle(spec)} names {len(parts)}; give one, or join them into one "
                    "text file first")
    except (OSError, RuntimeError, ValueError):  # a name too long, a NUL in it, ~ with no home: core.data says so
        pass
    return None


# Characters no path a manifest names may hold: controls (ESC drives a terminal), lone surrogates (no text encodes
# them), line and paragraph separators, and the bidirectional embeddings, overrides and isolates that reorder a line.
_NOT_TEXT = {"Cc", "Cs", "Zl", "Zp"}
_BIDI_CONTROLS = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def shows_as_text(text: str) -> bool:
    """Whether `text` (a data file's path, a folder's) holds only characters that show as text. Not str.isprintable:
    a path with a no-break space (U+00A0, or macOS's U+202F in "10.00.00\u202fAM"), an emoji family's joiner
    (U+200D) or a private-use icon is a path a user trains on; its checkpoint, autosave too, was written and then
    refused at every load as "not written by minitf"."""
    import unicodedata

    return all(unicodedata.category(ch) not in _NOT_TEXT and ch not in _BIDI_CONTROLS for ch in text)


def unkept_path(spec: str) -> str | None:
    """What is wrong with a data path that a checkpoint could not keep, in a message with its fix, or None. A
    checkpoint's manifest holds only paths that show as text (a listing prints them), so a file whose name holds a
    tab or a newline was trained on and saved, and its checkpoint was then refused at every load: it is refused
    here, before any training, as :data, --data and load_data read it."""
    if shows_as_text(spec):
        return None
    odd = next(ch for ch in spec if not shows_as_text(ch))
    what = {"\t": "a tab", "\n": "a newline", "\r": "a carriage return"}.get(odd, f"the character U+{ord(odd):04X}")
    escaped = "".join(ch if shows_as_text(ch) else ascii(ch)[1:-1] for ch in spec)  # the tab as \t, as typed
    return (f"the path {cut_middle(escaped)} holds {what}, which a checkpoint cannot keep; rename the file (or link it "
            "under a name without one) and give that path")


def data_problem(spec: str) -> str | None:
    """What is wrong with a data spec, said without reading it (no torch): a file that is not there, or what
    no_file_named says of a spec that names none; None where the spec may well load (core.data says the rest)."""
    spec = spec.strip()
    name, _, _ = spec.partition(":")
    if not spec or name in CORPORA + TASKS:
        return None
    if (unkept := unkept_path(spec)) is not None:
        return unkept
    problem = no_file_named(spec)
    try:
        path = Path(spec).expanduser()
        if problem is None and not _there(path):
            where = "" if path.is_absolute() else f" (in {cut_middle(os.getcwd())})"  # as core.data says it
            return (f"no such file: {cut_middle(str(path))}{where}; give the path of a UTF-8 text file, or one of "
                    f"{', '.join(CORPORA + TASKS)}")
    except (OSError, RuntimeError, ValueError):  # RuntimeError: ~ with no home folder (core.paths.expand)
        return None
    return problem


def _there(path: Path) -> bool:
    """Whether anything is at `path`: False only where nothing is (a name too long, or a folder on the way that
    cannot be read, is there as far as this can tell: core.data says what is wrong with it)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        return True
    return True
