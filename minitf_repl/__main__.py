"""`python -m minitf_repl`, and the console script `minitf` (pyproject.toml): the shell of cli.py, with Ctrl-C
while it loads ending it with status 130 and no traceback, as Ctrl-C in a command does (startup.py)."""

import sys

from . import startup


def main() -> None:
    startup.watch()
    try:
        from .cli import main as shell
    except KeyboardInterrupt:  # nothing has run yet: nothing to say
        sys.exit(startup.STATUS)
    shell()


if __name__ == "__main__":
    main()
