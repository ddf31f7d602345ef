"""Where minitf keeps files, and the environment variables that move them. Torch-free, so the shell can ask early.

- checkpoints (:save, :load, :ls): ./checkpoints, beside the work they belong to; $MINITF_CHECKPOINT_DIR
- downloaded corpora, a cache: platformdirs' user cache dir; $MINITF_CACHE_DIR
- the REPL's history, state: `history` in platformdirs' user state dir; $MINITF_HISTORY

platformdirs gives each system's own place: on Linux `$XDG_CACHE_HOME/minitf` (~/.cache/minitf) and
`$XDG_STATE_HOME/minitf` (~/.local/state/minitf), on macOS ~/Library/Caches/minitf and
~/Library/Application Support/minitf, on Windows %LOCALAPPDATA%\\minitf\\Cache and %LOCALAPPDATA%\\minitf.
History is state (kept between sessions, but nothing a person would back up or lose sleep over),
not data: earlier versions kept it in the data dir, and `adopt_old_history` moves it once.
platformdirs is a path library, not a UI one; it is imported where a path is asked for.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
from pathlib import Path

from .errors import CheckpointError, UserError

APP = "minitf"
CHECKPOINT_ENV = "MINITF_CHECKPOINT_DIR"
CACHE_ENV = "MINITF_CACHE_DIR"
HISTORY_ENV = "MINITF_HISTORY"


def cut_middle(text: str, width: int = 160) -> str:
    """A path (or a user's text) in a one-line message: whole, or its start and its end around "..." where it is
    longer than `width`. The end is the part that names the file: cut at the end, a data file's message read
    ".../test_a_data_path_holding_a_tab0/my\\t... holds a tab", the file's name gone."""
    return text if len(text) <= width else f"{text[: width // 2 - 2]}...{text[-(width // 2 - 1):]}"


def on_windows() -> bool:
    """Whether this is Windows, where a message's fix names no POSIX tool (iconv) and no '...' quoting."""
    return sys.platform == "win32"


def _env(name: str) -> str | None:
    """The variable's value, or None where it is unset or blank: a blank one (`MINITF_CHECKPOINT_DIR=" "`, a script's
    unset variable with a space) made a folder named by spaces in the current one, where "" meant the default."""
    value = os.environ.get(name)
    return value if value and value.strip() else None


def variable(name: str) -> str:
    """An environment variable as this system's shell writes it: $NAME, and %NAME% on Windows (cmd's form)."""
    return f"%{name}%" if sys.platform == "win32" else f"${name}"


def home_variable() -> str:
    """The variable a home folder is read from: $HOME, and on Windows %USERPROFILE% (Python reads no HOME there)."""
    return variable("USERPROFILE" if sys.platform == "win32" else "HOME")


# A Windows path (C:\Users\me\r.html, C:/data, \\server\share\x) given on a system whose paths are not: read as
# one file name in the current folder, `:report C:\Users\me\r.html` wrote ./C:\Users\me\r.html without a word
WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\[^\\/]+[\\/])")


def expand(path: str | Path, named: str | None = None) -> Path:
    """`Path(path).expanduser()`, or a UserError where the path starts with ~ and there is no home folder for it to
    name: $HOME unset, and a uid with no passwd entry (`docker run -u 1234`), where pathlib raises RuntimeError. That
    was a traceback as the shell started ($MINITF_CHECKPOINT_DIR=~/ck set in an image, `--data ~/notes.txt`), or an
    internal error (`:data ~/notes.txt`, `:report ~/r.html`). `named`: how the path was given, e.g. the variable.
    A Windows path on another system is refused (WINDOWS_PATH), with the path WSL gives a drive's files."""
    text = str(path)
    if os.name != "nt" and WINDOWS_PATH.match(text):
        forward = text.replace("\\", "/")  # C:/Users/me/r.html
        drive, _, rest = forward.partition(":/")
        wsl = (f" (under WSL the {drive.upper()}: drive is /mnt/{drive.lower()}: /mnt/{drive.lower()}/{rest})"
               if len(drive) == 1 else "")
        raise UserError(f"{named or text} is a Windows path, and this system's paths are not; give it as this system "
                        f"writes it, e.g. ./{forward.split('/')[-1]}{wsl}")
    try:
        return Path(path).expanduser()
    except RuntimeError:
        text = str(path)
        user = text[1:].replace("\\", "/").split("/")[0] if text.startswith("~") else ""
        if user:  # ~name: the home folder of a user of that name, and there is none ($HOME is not the matter)
            raise UserError(f"{named or path} starts with ~{user}, the home folder of a user {user}, and there is no "
                            f"such user here; give the path in full") from None
        home = home_variable()
        raise UserError(f"{named or path} starts with ~, the home folder, and there is none here ({home} is not set); "
                        f"give the path in full, or set {home}") from None


def default_checkpoint_dir() -> Path:
    """`$MINITF_CHECKPOINT_DIR` if set, else `./checkpoints` under the current directory, as an absolute path: the
    messages name it ("no checkpoints in checkpoints yet" did not say which folder, nor that it depends on where
    minitf was started). $MINITF_CHECKPOINT_DIR too, as --checkpoint-dir is: a relative one was named as typed
    ("no checkpoints in ck yet"), where the option named the same folder in full."""
    env = _env(CHECKPOINT_ENV)
    if not env:
        return Path("checkpoints").absolute()
    named = f"${CHECKPOINT_ENV}={env}"
    return expand(expand_variables(env, named), named).absolute()


_VARIABLE = re.compile(r"\$(\w+|\{[^}]*\})")  # $NAME or ${NAME}, as os.path.expandvars reads them


def expand_variables(text: str, named: str) -> str:
    """`text` with its $NAME and ${NAME} replaced by their values (os.path.expandvars), or a UserError naming one that
    is not set. A variable set where no shell reads it (a systemd unit's Environment=, an .env file, a Dockerfile's
    ENV in exec form) keeps its $HOME: `MINITF_CHECKPOINT_DIR=$HOME/x` made a folder named "$HOME" in the current one
    ("no checkpoints in /tmp/s/$HOME/x yet"), where ~ was expanded. `named`: how the text was given."""
    expanded = os.path.expandvars(text)
    if os.name != "nt" and (left := _VARIABLE.search(expanded)):
        name = left.group(1).strip("{}")
        raise UserError(f"{named} names {left.group()}, a variable that is not set here; set {variable(name)}, or "
                        f"give the path in full")
    return expanded


def _user_dir(kind: str, what: str, env: str, names: str = "a folder") -> Path:
    """platformdirs' user dir of `kind` ("cache", "state", "data"). Without a home folder ($HOME unset, and a uid
    with no passwd entry, as a container's may be) platformdirs raises RuntimeError: a UserError naming the
    variable that sets the place instead (it was an internal error, or a traceback as the shell started)."""
    import platformdirs

    try:
        return Path(getattr(platformdirs, f"user_{kind}_dir")(APP, appauthor=False))
    except (RuntimeError, KeyError, OSError):
        home = home_variable()
        raise UserError(f"there is no home folder to keep {what} in ({home} is not set); set {variable(env)} to "
                        f"{names}, or set {home}") from None


def cache_dir() -> Path:
    """`$MINITF_CACHE_DIR`, else the user cache dir (platformdirs): downloaded corpora."""
    if _env(CACHE_ENV):
        return expand(_env(CACHE_ENV), f"${CACHE_ENV}={_env(CACHE_ENV)}")
    return _user_dir("cache", "downloaded data", CACHE_ENV)


def history_path() -> Path:
    """`$MINITF_HISTORY`, else `history` in the user state dir (platformdirs); a UserError without a home folder."""
    if _env(HISTORY_ENV):
        return expand(_env(HISTORY_ENV), f"${HISTORY_ENV}={_env(HISTORY_ENV)}")
    return _user_dir("state", "the history", HISTORY_ENV, "a file") / "history"


def old_history_path() -> Path:
    """Where earlier builds kept the history: the user data dir."""
    return _user_dir("data", "the history", HISTORY_ENV, "a file") / "history"


def adopt_old_history() -> str | None:
    """Move the history from where earlier versions kept it to the state dir, once; a note of what happened.

    Only for the default place (with `$MINITF_HISTORY` the person chose the file) and only when the
    state dir has none yet, so nothing is overwritten. Where the two are on other file systems the
    history is copied, private (0600, as make_history makes a new one), then the old file deleted; an
    old file that cannot be deleted (a read-only data dir) is kept, and the note says it was copied.
    A move that fails leaves the old file where it was, no part of a copy in the new place, and the
    history starts afresh there (make_history warns if that fails too); the note says so.
    """
    if _env(HISTORY_ENV):
        return None
    try:
        new, old = history_path(), old_history_path()
    except UserError:  # no home folder: nothing was kept there (make_history's caller says so)
        return None
    if new.exists() or not old.is_file() or new == old:
        return None
    try:
        new.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(old, new)
        except OSError:  # another file system, or a data dir that cannot lose the file: copy it
            _copy_private(old, new)
        else:
            with contextlib.suppress(OSError):  # moved all the same; only its mode stays the old file's
                os.chmod(new, 0o600)  # history is private, whatever mode the old file had
            return f"moved the history from {old} to {new}"
    except OSError as e:
        return (f"could not move the history from {old} to {new} ({e.strerror or e}): it stays where it was, and the "
                f"history starts afresh; copy it to {new} to keep it")
    try:
        old.unlink()
    except OSError as e:  # shutil.move copied, failed here and said nothing, and the history was in two places
        return (f"copied the history from {old} to {new}, but could not delete the old file ({e.strerror or e}): it "
                f"is in both places; delete {old} if you like")
    return f"moved the history from {old} to {new}"


def _copy_private(old: Path, new: Path) -> None:
    """Copy `old` to a new file `new` that only its owner reads (0600), or raise OSError with no `new` left behind.
    shutil.move's copy kept the old file's mode (0644, readable by all), and a copy cut short stayed half there."""
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as out, open(old, "rb") as source:
            shutil.copyfileobj(source, out)
    except BaseException:
        with contextlib.suppress(OSError):
            new.unlink()
        raise


def gone_folder(path: str | Path) -> str | None:
    """`problem; fix` for a relative `path` where the folder minitf runs in was deleted (or moved) under a running
    shell, else None. A relative path then names nothing, and what was said did not say so: `:data notes.txt` "No
    such file or directory; check the path and its permissions", `:report r.html` the same after the report's work,
    `:save hf:x` an internal error (FileNotFoundError from the message's own os.getcwd)."""
    if expand(path).is_absolute():
        return None
    try:
        os.getcwd()
    except FileNotFoundError:
        return ("the folder minitf runs in no longer exists (deleted or moved), and a relative path is read from it; "
                "give an absolute path")
    return None


HF_PREFIX = "hf:"  # `:load hf:PATH`, `:save hf:PATH`, `:parity hf:PATH` (core.hf.PREFIX)


def hf_path(spec: str) -> Path | None:
    """The folder of an `hf:PATH` spec, None for any other spec. Here, torch-free, and not in core.hf (which imports
    torch): `minitf load NAME` and `minitf save NAME` ask it first, and their errors need no torch."""
    if not spec.startswith(HF_PREFIX):
        return None
    rest = spec[len(HF_PREFIX):].strip()
    if not rest:
        raise CheckpointError("hf: needs a folder after it, e.g. hf:~/models/gpt2; give the path of a "
                              "Hugging Face model folder")
    return expand(rest, spec)


def cache_revision(folder: Path) -> Path:
    """The folder to read for `hf:PATH`: a Hugging Face cache's model folder (models--ORG--NAME, where transformers
    downloads to) holds no config.json itself but snapshots/REVISION/ folders, and refs/main names the revision the
    cache calls main, as transformers reads it. Any other folder is itself (its errors are read_folder's)."""
    import re
    import stat

    path = folder.expanduser()
    main = path / "refs" / "main"
    try:
        if (path / "config.json").exists() or not stat.S_ISREG(main.stat().st_mode):  # not a device or a pipe
            return folder
        with open(main, "rb") as f:
            revision = f.read(256).decode("ascii", "replace").strip()
        snapshot = path / "snapshots" / revision
        if re.fullmatch(r"[0-9A-Za-z._-]{1,200}", revision) and revision not in (".", "..") and \
                (snapshot / "config.json").is_file():
            return snapshot
    except (OSError, ValueError):  # no refs/main, a path too long: the folder as given
        pass
    return folder
