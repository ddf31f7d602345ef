"""`python -m minitf_repl`, and the console script `minitf` (pyproject.toml): the shell of cli.py, with Ctrl-C
while it loads ending it with status 130 and no traceback, as Ctrl-C in a command does (startup.py)."""

import sys

from . import startup

# What main() in a Jupyter kernel read as minitf's words: the kernel's own command line (`-f kernel.json`), refused as
# "No such option: -f", an option the user never typed
IN_A_KERNEL = ("main() read the Jupyter kernel's own command line, not minitf's; give it minitf's words: "
               "main(['train', '--steps', '50']), or run the lab from Python: from minitf_repl import Lab")


def main(argv: list[str] | None = None) -> int | None:
    """The shell on the process's command line (the console script), or, from Python, on `argv`, minitf's words
    after its name (`main(["train", "--steps", "50"])`): the exit status is then returned, the process left running
    (a notebook's kernel, a script's caller)."""
    if argv is None and "ipykernel" in sys.modules:  # called in a kernel: its sys.argv is no command line of minitf's
        from .render import console_for, error

        error(console_for(stderr=True, force_jupyter=False), IN_A_KERNEL)
        return 2
    if argv is not None:
        return _called(list(argv))
    startup.watch()
    try:
        from .cli import main as shell
    except KeyboardInterrupt:  # nothing has run yet: nothing to say
        sys.exit(startup.STATUS)
    try:
        shell()
    except SystemExit:  # the shell's end, its status decided (cli.main): no signal may change it now
        startup.ignore_late_signals()
        raise


def _called(argv: list[str]) -> int:
    """The shell on `argv` within this process. Ctrl-C stays the caller's (startup.watch is the console script's: it
    would keep a Ctrl-C of one call to end every later one with 130), and the shell's exit is the status returned.

    What the shell sets for its process is put back for the caller, whose process it is: torch's thread count
    (`threads=1` left the caller on 1 thread) and Rich's end at a broken pipe (the shell's 141 replaced Rich's own
    for every console, the caller's too), and torch's random state (a session's commands draw from their own,
    Session.own_random, but a `--load` builds outside any command, and a build seeds the process's generators)."""
    from rich.console import Console

    from .cli import main as shell
    from .core.threads import threads_kept
    from .session import random_kept

    # an older Rich (13.7, which pyproject allows) has no on_broken_pipe of its own: then the shell's is taken off again
    kept, pipe = sys.argv, vars(Console).get("on_broken_pipe")
    sys.argv = ["minitf", *argv]
    try:
        with threads_kept(), random_kept():
            shell()
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    finally:
        sys.argv = kept
        if pipe is not None:
            Console.on_broken_pipe = pipe
        elif "on_broken_pipe" in vars(Console):
            del Console.on_broken_pipe
    return 0


if __name__ == "__main__":
    main()
