"""Counted nouns in messages: `count(1, "token")` is "1 token", `count(1234, "token")` "1,234 tokens"; and characters
quoted in messages as the views show them (`quoted_chars`).

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


def visible_char(ch: str) -> str:
    """`ch` as it can be seen: a control, format or unprintable space (ESC, the zero-width joiner of an emoji, a
    no-break space) or a variation selector as its escape (\\x1b, \\u200d, \\xa0, \\ufe0f), as :step shows them.
    They were "?", the joiner, ESC and "?" itself alike, or blank (a variation selector shows nothing alone)."""
    import unicodedata

    if not ch.isprintable() or unicodedata.name(ch, "").startswith("VARIATION SELECTOR"):
        return ascii(ch)[1:-1]
    return ch


def quoted_end(text: str, most: int) -> str:
    """The last `most` characters of `text` as quoted_chars quotes them, after a "…" where the front was cut: a
    headline's '…opqr' beside a table whose row 0 reads 'j' says that the text goes on before it."""
    return quoted_chars(("…" + text[-most:]) if len(text) > most else text)


def quoted_chars(text: str) -> str:
    """`text` in quotes inside a message, each character as `visible_char` shows it, as the views quote a token
    (palette.quoted): a typed backslash reads '\\', where repr doubled it ('\\\\'), and ESC '\\x1b', not
    '\\\\x1b'; in double quotes where it holds a single one, as repr does."""
    shown = "".join(visible_char(ch) for ch in text)
    return f'"{shown}"' if "'" in shown and '"' not in shown else f"'{shown}'"
