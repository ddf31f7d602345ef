"""Whole numbers as people in this field write them: `1000`, `1e3`, `10_000`, `10k`, `2.5M` (k = thousand,
M = million, B = billion), as long as the value is whole.

One reader for every whole number a user types: the options' values (parsing.convert), and the sizes inside a
value that the core reads itself (`:data sort:1e1`, `tokenizer=bpe:10k`), which otherwise took only plain digits.
Torch-free and UI-free: the core and the UI both import it.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from .errors import UserError

class NumberTooLarge(UserError):
    """A whole number past what a float or Python's int parser reads (`1e400`, 5,000 digits): a reader with a
    range of its own (`:data random:1e400`) says the range, not that the text is no number."""


SCALE = {"k": 10**3, "m": 10**6, "b": 10**9}
WRITTEN_WHOLE = re.compile(r"([+-]?(?:\d[\d_]*)?(?:\.\d*)?(?:[eE][+-]?\d+)?)([kKmMbB]?)")


def shown(text: str, width: int = 40) -> str:
    """A user's text quoted and shortened for a one-line message."""
    return repr(text if len(text) <= width else text[: width - 3] + "...")


def whole_number(name: str, text: str, or_none: bool = False) -> int:
    """`1000`, `1e3`, `10_000`, `10k`, `2.5M` -> an int; anything else, or a fraction, is a UserError
    (which names `none` too where the setting takes it: `or_none`)."""
    t = text.strip()
    kind = "a whole number or none" if or_none else "a whole number"
    if re.fullmatch(r"[+-]?\d+", t):
        try:
            return int(t)
        except ValueError:  # Python refuses to parse more than 4,300 digits
            raise NumberTooLarge(f"{name} has {len(t):,} digits, far too many; use a smaller value") from None
    m = WRITTEN_WHOLE.fullmatch(t)
    if m and re.search(r"\d", m.group(1)) and "__" not in t and not t.endswith("_"):
        number, suffix = m.group(1).replace("_", ""), m.group(2).lower()
        try:
            value = float(number)
        except ValueError:
            value = None
        if value is not None and math.isfinite(value):
            # exact, in decimal: through the float, `at=1e30` was 1000000000000000019884624838656 in every message
            exact = Decimal(number) * SCALE.get(suffix, 1)
            if exact == exact.to_integral_value():
                return int(exact)
            value *= SCALE.get(suffix, 1)
            worked = f" (= {value:g})" if suffix or "e" in number.lower() else ""
            raise UserError(f"{name} must be {kind}, got {shown(text)}{worked}")
        if value is not None:
            raise NumberTooLarge(f"{name} is far too large ({shown(text)}); use a smaller value")
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+", t):  # `1,000` as prose writes it
        plain = t.replace(",", "")
        forms = f"{plain}, {t.replace(',', '_')} or {plain[:-3]}k" if plain.endswith("000") else plain
        raise UserError(f"{name} must be {kind}, got {shown(text)}; write it without commas: {forms}")
    raise UserError(f"{name} must be {kind}, got {shown(text)}")
