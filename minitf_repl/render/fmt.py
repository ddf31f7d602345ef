"""Small formatters: a number, a size, a duration or a setting's value as a result shows it ("-" for none)."""

from __future__ import annotations


def num(value, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def signed(value: float, digits: int = 3) -> str:
    """A number with its sign, never "-0.000": what rounds to zero is written +0.000."""
    text = f"{value:+.{digits}f}"
    return "+" + text[1:] if text.startswith("-") and not text.strip("-0.") else text


def apart(a: float, b: float, digits: int = 3) -> tuple[str, str]:
    """a and b to `digits` significant digits, or as many more as it takes (up to 9) for two different numbers to
    read differently: "0.0501 is above the 0.05", never "0.05 is above the 0.05"."""
    while digits < 9 and a != b and f"{a:.{digits}g}" == f"{b:.{digits}g}":
        digits += 1
    return f"{a:.{digits}g}", f"{b:.{digits}g}"


def whole(value) -> str:
    return "-" if value is None else f"{value:,}"


def pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def share(value: float) -> str:
    """A share as a percentage, whole from 10% up and with a decimal below, so that a small share is not '0%' (a wide
    embedding's main direction holds 0.2% of a random W_E's variance): '<0.1%' below that. Likewise at the top, a
    share short of the whole is never '100%' (:ngram's val seen of 99.8%, where a counter backed off 100 times)."""
    if 0.995 <= value < 1:
        return f"{value:.1%}" if value < 0.9995 else ">99.9%"
    if value >= 0.0995:
        return f"{value:.0%}"
    if value >= 0.00095 or value <= 0:
        return f"{value:.1%}" if value > 0 else "0%"
    return "<0.1%"


def rate(value) -> str:
    return "-" if value is None else f"{value:,.0f}"


def seconds(value) -> str:
    return "-" if value is None else f"{value:.1f}s" if value >= 1 or value == 0 else f"{value:.2f}s"


def lr(value) -> str:
    return "-" if value is None else f"{value:.2e}"


def shape(dims) -> str:
    return str(tuple(dims))


def size(n) -> str:
    """Bytes in B under 1,000 (a whole number of them), else in KiB, MiB or GiB ("?" when unknown): 128 B read as
    "0.1 KiB" made a line such as "0.1 KiB a token x 32 = 4.0 KiB" fail the reader's multiplication, so 1,000 to
    1,023 B read "1.0 KiB". The next unit from 1,000 of the one below as printed (rounded): "1021.0 KiB" (an int8
    copy of a small model) took four digits to say 1.0 MiB, and 1,023,990 B, under 1,000 KiB, read "1000.0 KiB"."""
    if n is None:
        return "?"
    if round(n / 2**20, 1) >= 1000:
        return f"{n / 2**30:.1f} GiB"
    if round(n / 2**10, 1) >= 1000:
        return f"{n / 2**20:.1f} MiB"
    if round(n) >= 1000:
        return f"{n / 2**10:.1f} KiB"
    return f"{n:,.0f} B"


def flops(n) -> str:
    for unit, scale in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} FLOP"


def value(v) -> str:
    """A setting's value as :set and :config write it: on/off, none, 0.001."""
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):  # 6 digits, unless they read as another value: rope_base=1.0000001 read "1", the
        return f"{v:g}" if float(f"{v:g}") == v else repr(v)  # value :set refuses (repr: the shortest that reads back)
    return str(v)


def change(before, after, fmt, digits: int | None = None) -> str:
    """after - before with its sign, as `fmt` writes a difference ("-" when either is unknown). A difference that
    rounds to nothing is written as no difference is ("+0.0000", not "-0.0000": a loss that fell by 2e-6).

    `digits`: the two numbers are shown beside it to that many decimals, and the difference is of the numbers as
    shown: 2.58284 and 2.58276, both written 2.5828, changed by +0.0000, not -0.0001."""
    if before is None or after is None:
        return "-"
    if digits is not None:
        before, after = (float(f"{v:.{digits}f}") for v in (before, after))
    text = fmt(after - before)
    if not any(c in "123456789" for c in text.split("e")[0]):  # every digit shown is 0
        return f"+{fmt(0.0)}"
    return f"{'+' if after >= before else ''}{text}"


def gradient(size: float) -> str:
    """A gradient's size: four decimals, or two significant digits where it has vanished below 1e-3."""
    return f"{size:.4f}" if size >= 1e-3 or size == 0 else f"{size:.1e}"
