"""Errors a user can cause and fix.

Every error the core raises on purpose derives from `UserError` (itself a `ValueError`, so
plain Python callers can catch the usual type). The UI layers catch `UserError` and print its
message as one line; anything else is a bug and may show a traceback under `--debug`.
Messages name the problem and the fix in one sentence.
"""


class UserError(ValueError):
    """A problem with the user's input, with a message that says how to fix it."""


class ConfigError(UserError):
    """An invalid model or training setting."""


class DataError(UserError):
    """A corpus, task or prompt that cannot be used."""


class DeviceError(UserError):
    """A device that is absent or cannot be used."""


class CheckpointError(UserError):
    """A checkpoint that is missing, unsafe, corrupted or does not match."""


class TrainingDiverged(UserError):
    """The loss or gradient became non-finite; the update that would apply it was not made."""

    def __init__(self, message: str, step: int = 0, what: str = "loss", value: float = float("nan")):
        super().__init__(message)
        self.step = step  # the step whose loss or gradient was non-finite
        self.what = what
        self.value = value
