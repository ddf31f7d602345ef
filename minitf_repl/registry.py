"""The command registry: what a command is, the table of them, and how one is run.

Each command is one function registered with `@command(name, summary, aliases, params)`. The REPL
(`:train steps=200`) and the shell (`minitf train --steps 200`) both reach it through
`run_command`, with the same option names; `:help`, tab completion and the shell's subcommands are
generated from REGISTRY, so they cannot drift from the code. This module holds only that machinery,
so it can be read without the commands (commands.py) or the parsing of their options (parsing.py).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Callable

from .core.errors import UserError
from .session import Session


@dataclass
class Param:
    name: str
    type: type  # int | float | str | bool
    default: Any = None  # None: not given (the session's setting applies)
    help: str = ""
    choices: tuple | None = None
    positional: bool = False  # the free text of a command (PROMPT, NAME, COMMAND)
    nullable: bool = False  # accepts "none" to clear the setting (`:set top_k=none`)


@dataclass
class Command:
    name: str
    func: Callable
    summary: str  # one line, ends with a period
    aliases: tuple = ()
    params: list[Param] = field(default_factory=list)
    # Ctrl-C during most commands asks them to stop at the next step or token (Hooks.should_stop).
    # An interruptible command polls nothing: the UI lets Ctrl-C raise KeyboardInterrupt inside it,
    # and the command cleans up and reports (`:save` keeps the previous checkpoint).
    interruptible: bool = False


# Filled by the @command decorators in commands.py: import that module (not only this one) to use it.
REGISTRY: dict[str, Command] = {}


def command(name: str, summary: str, aliases: tuple = (), params: list[Param] | tuple = (),
            interruptible: bool = False):
    """Register `func(session, args, hooks) -> result` as command `name`."""

    def register(func: Callable) -> Callable:
        REGISTRY[name] = Command(name, func, summary, tuple(aliases), list(params), interruptible)
        return func

    return register


def find_command(name: str) -> Command:
    """The command called `name` (or one of its aliases; a leading ':' is ignored)."""
    key = name.strip().lstrip(":").lower()
    for cmd in REGISTRY.values():
        if key == cmd.name or key in cmd.aliases:
            return cmd
    names = [c.name for c in REGISTRY.values()] + [a for c in REGISTRY.values() for a in c.aliases]
    close = difflib.get_close_matches(key[:40], names, n=1, cutoff=0.6)
    hint = f"; did you mean :{find_command(close[0]).name}?" if close else ""
    raise UserError(f"unknown command :{_clip(key)}{hint} (:help lists commands)")


class Hooks:
    """How a running command talks to the UI. The base class does nothing; the UI subclasses it."""

    def on_train_start(self, run_steps: int, start_step: int, resumed: bool) -> None:
        """A run of run_steps steps begins (or resumes) with start_step of them already done."""

    def on_step(self, info) -> None:
        """After every optimizer step (a core.train.StepInfo; val_loss is set on eval steps)."""

    def on_token(self, text: str) -> None:
        """Generated text, as it is produced."""

    def should_stop(self) -> bool:
        """Asked between steps and between tokens; True ends the command early (Ctrl-C)."""
        return False

    def notice(self, text: str) -> None:
        """One informational line, e.g. that the weights were reset."""


def run_command(session: Session, name: str, args: dict | None = None, hooks: Hooks | None = None):
    """Run a command by name with args {option: value}. Values may be typed or strings to parse;
    a None value means "not given". Returns the command's result dataclass."""
    from .parsing import _normalize_args  # here, not at the top: parsing.py imports this module

    cmd = find_command(name)
    values = _normalize_args(cmd, args or {})
    try:
        return cmd.func(session, values, hooks if hooks is not None else Hooks())
    except MemoryError:
        raise UserError(_OUT_OF_MEMORY) from None
    except RuntimeError as e:
        # torch's OutOfMemoryError (CUDA, MPS) is a RuntimeError; anything else is a bug.
        if type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower():
            raise UserError(_OUT_OF_MEMORY) from None
        raise


_OUT_OF_MEMORY = "out of memory; lower batch_size, max_seq_len or the model size (:set), or use another :device"


# Shortens a user's text in one-line error messages (here, in parsing.py and in commands.py).
def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
