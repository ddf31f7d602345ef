"""Errors a user can cause and fix.

Every error the core raises on purpose derives from `UserError` (itself a `ValueError`, so
plain Python callers can catch the usual type). The UI layers catch `UserError` and print its
message as one line; anything else is a bug and may show a traceback under `--debug`.
Messages name the problem and the fix in one sentence, in neutral words: the same error reaches a
REPL user, a shell user and a Python caller. Where a setting would fix it, the error also carries
that setting and a value known to work (`fix={"lr": 3e-4}`); each front end phrases it in its own
syntax (`:set lr=0.0003` in the REPL, `--set lr=0.0003` from the shell).
"""


class UserError(ValueError):
    """A problem with the user's input, with a message that says how to fix it."""

    def __init__(self, message: str, *, fix: dict | None = None):
        super().__init__(message)
        self.fix = dict(fix or {})  # {setting: value that would work}


class Interrupted(UserError):
    """A Ctrl-C that stopped a command, said in the command's own words (what it kept, what did not change): a stop, not
    a failure, so piped input ends there and the shell exits 130, as after any Ctrl-C (`:load` and `:save` said theirs
    as a plain error: the next piped line ran, and the status was 1)."""


class UsageError(UserError):
    """A command line that names what does not exist (an unknown option or key): from the shell it ends with status 2,
    as a command line Click itself refuses does (`--stepz 5` gave 2 and `stepz=5` gave 1, for the same mistake)."""


class ConfigError(UserError):
    """An invalid model or training setting. Where two settings do not fit together, `fitting` holds a change of each
    that would fit (the nearest values): `:set` offers the one that keeps what the user typed (`:set n_heads=5` on
    d_model=128 is offered d_model=130, not n_heads=4), with the rest of the line as typed."""

    def __init__(self, message: str, *, fix: dict | None = None, fitting: list[dict] | None = None):
        super().__init__(message, fix=fix)
        self.fitting = [dict(change) for change in fitting or [] if change]


class DataError(UserError):
    """A corpus, task or prompt that cannot be used."""


class DeviceError(UserError):
    """A device that is absent or cannot be used."""


class DeviceUnavailable(DeviceError):
    """A well-formed device name this machine has no such device for (cuda without a GPU): the CPU is the way on."""


class CheckpointError(UserError):
    """A checkpoint that is missing, unsafe, corrupted or does not match."""


class TorchTooOld(UserError):
    """The installed torch lacks what minitf needs (pyproject.toml's floor): installing a newer one fixes it."""


class TrainingDiverged(UserError):
    """The loss or gradient became non-finite; the update that would apply it was not made."""

    def __init__(self, message: str, step: int = 0, what: str = "loss", value: float = float("nan"),
                 fix: dict | None = None, broken: str | None = None):
        super().__init__(message, fix=fix)
        self.step = step  # the step whose loss or gradient was non-finite
        self.what = what
        self.value = value
        # why the weights were unusable before any update of this run, or None: then no rate is the fix, and a
        # front end that words the error itself (the shell's :train) must say what is
        self.broken = broken


class PeerLost(UserError):
    """Under torchrun another process of the launch died (or its connection broke) during a step.

    The step that was under way is undone on this rank, so the trainer holds the weights of `step`,
    the last step every rank completed alike.
    """

    def __init__(self, message: str, step: int = 0):
        super().__init__(message)
        self.step = step


def is_out_of_memory(exc: BaseException) -> bool:
    """True for Python's MemoryError and torch's out-of-memory errors (CUDA, MPS, CPU allocator).

    The CPU allocator's says no "out of memory": "DefaultCPUAllocator: can't allocate memory: you tried to allocate
    N bytes. Error code 12 (Cannot allocate memory)", and a model or batch the machine could not hold (under a
    container's limit, `ulimit -v`) was an internal error, a :train's too. On Windows it says "DefaultCPUAllocator: not
    enough memory: you tried to allocate N bytes." (its _aligned_malloc branch), where nothing refuses a model before
    it is built (core.memory reads what is free from /proc), so a laptop's first :train too big for it met that one."""
    if isinstance(exc, MemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and (
        type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text or "can't allocate memory" in text
        or "defaultcpuallocator: not enough memory" in text
    )
