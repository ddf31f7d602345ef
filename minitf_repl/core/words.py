"""Counted nouns in messages: `count(1, "token")` is "1 token", `count(1234, "token")` "1,234 tokens".

One helper for every "N thing(s)" a user reads, in the core's errors and in what the front ends
show, so that none says "1 tokens". Torch-free and UI-free: the core and the UI both import it.
"""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None, grouped: bool = True) -> str:
    """`n` and the noun in the number that agrees with it, `n` with thousands separators unless not `grouped`.

    `plural` is for nouns that do not just add an "s" ("guess" -> "guesses"). A float is shown as
    given; only exactly 1 takes the singular. (Byte counts in the checkpoint checks stay ungrouped:
    they are compared with `ls -l` and the manifest's own numbers.)
    """
    number = f"{n:,}" if isinstance(n, int) and grouped else str(n)
    return f"{number} {noun if n == 1 else (plural or noun + 's')}"
