"""What the bench/ scripts share in reading their command line: a bad argument is one line, never a traceback.

A count of zero or less (--chunks 0, --steps 0, --runs 0, --batch -3) used to run until a median of
nothing, a division by zero or torch refused it, sometimes after minutes of runs; `positive_int` refuses
it while the line is read, and `Parser` says so in one line "problem; fix", exit status 2 as argparse's
own errors have, instead of argparse's usage block above the error.

No torch here: bench/memory.py only launches processes and imports this before anything heavy.
"""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type: a whole number of at least 1 (a count of runs, steps, chunks, threads, a batch size)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give one of at least 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}; give 1 or more")
    return value


class Parser(argparse.ArgumentParser):
    """argparse's parser, whose errors are one line: "prog: error: problem; fix" and exit status 2."""

    def error(self, message: str):
        # argparse's own messages ("unrecognized arguments: --foo") name no fix; --help is the one that always fits
        fix = "" if ";" in message else "; see --help"
        self.exit(2, f"{self.prog}: error: {message}{fix}\n")


def parser(doc: str) -> Parser:
    """A script's parser, described by the first line of its docstring (as `--help` shows it)."""
    return Parser(description=doc.splitlines()[0])
