"""Counted nouns in messages: `count(1, "token")` is "1 token", `count(1234, "token")` "1,234 tokens".

One helper for every "N thing(s)" a user reads, in the core's errors and in what the front ends
show, so that none says "1 tokens". Torch-free and UI-free: the core and the UI both import it.
"""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun in the number that agrees with it, `n` with thousands separators.

    `plural` is for nouns that do not just add an "s" ("guess" -> "guesses", "key/value head" ->
    "key/value heads" needs none). A float is shown as given; only exactly 1 takes the singular.
    """
    number = f"{n:,}" if isinstance(n, int) else str(n)
    return f"{number} {noun if n == 1 else (plural or noun + 's')}"
