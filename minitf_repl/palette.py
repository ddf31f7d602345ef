"""Colours and symbols shared by the terminal views (render/) and the HTML report (report.py).

A sequential colour scale for weights and probabilities, a shade character per weight for consoles
without colour, and visible stand-ins for whitespace. No Rich, no commands: both renderers import it.
"""

from __future__ import annotations

import functools
import math
import sys

from .core.words import visible_char  # the core quotes characters in its messages as the views do

VISIBLE = {" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"}
SHADES = ".:-=+*#%@"  # low to high weight; the masked future is left blank
# A sequential, perceptually even scale (viridis), dark for little weight, bright for much.
SCALE = ((68, 1, 84), (72, 40, 120), (62, 74, 137), (49, 104, 142), (38, 130, 142), (31, 158, 137),
         (53, 183, 121), (109, 205, 89), (180, 222, 44), (253, 231, 37))


def visible(token: str, encodings: tuple[str, ...] | None = None) -> str:
    """A token as it can be seen in a grid: whitespace as a symbol, character by character, so that a subword piece
    keeps its own (" the" shows as "␣the", not as an indented "the"); any other character that shows no glyph of its
    own as its escape (`visible_char`), and a token that starts with a combining mark with that mark on a dotted
    circle (◌́): alone, an accent sat on the space before it in a row of tokens, and a cell of a table was blank.
    Where the output cannot encode what a character shows as (ASCII, Latin-1), the character's escape (`\\x20`,
    `\\u2026`): the token is text, and no stand-in of the output's own characters tells it apart (see STAND_INS).
    `encodings` names the output's encodings where it is not the terminal's: () for a UTF-8 page (`:report`)."""
    narrow = narrow_outputs() if encodings is None else tuple(e for e in encodings if _narrow(e))
    shown = "".join(_shown(ch, narrow) for ch in token)
    return "\u25cc" + shown if shown[:1] == token[:1] and combining(token[:1]) else shown


def _shown(ch: str, narrow: tuple[str, ...]) -> str:
    """One character of a token as `visible` shows it on outputs of the encodings `narrow`."""
    shown = VISIBLE.get(ch) or visible_char(ch)
    return shown if not narrow or encodes(shown, narrow) else escaped(ch)


def quoted(token: str, encodings: tuple[str, ...] | None = None) -> str:
    """A token in quotes inside a sentence, as `visible` shows it: '\\x1b', not repr's '\\\\x1b' (repr would
    escape the backslash of the escape); in double quotes where it holds a single one, as repr does."""
    shown = visible(token, encodings)
    return f'"{shown}"' if "'" in shown and '"' not in shown else f"'{shown}'"


def combining(ch: str) -> bool:
    """Whether `ch` is a mark drawn on the character before it: an accent (U+0301), or a vowel sign of an Indic script
    (the ि of नि, which takes a column of its own but is written on its consonant: bare, it read as a letter)."""
    import unicodedata

    return len(ch) == 1 and unicodedata.category(ch) in ("Mn", "Me", "Mc")


PIECE_CELL = 16  # the most columns of a token a table's cell shows (GPT-2 has tokens of 64 dashes)


def piece_cell(shown: str, width: int = PIECE_CELL) -> str:
    """A token's visible text (`visible`) for a table's cell: cut to `width` terminal columns, its end as "…", so
    that a long piece from the vocabulary leaves the other columns readable (it squeezed them to "blocks…" and "0…").
    Columns, not characters: a piece of 16 Chinese characters takes 32, and cut at 16 characters it still did."""
    if columns(shown) <= width:
        return shown
    kept, used = [], 0
    for ch in shown:
        used += columns(ch)
        if used > width - 1:  # a column left for the "…"
            break
        kept.append(ch)
    return "".join(kept) + "…"


def columns(text: str) -> int:
    """The terminal columns `text` takes: two for a wide character (你, an emoji), none for a mark drawn on the one
    before it (an accent, a variation selector) or a format character, one for any other; without Rich (a cell's
    text has passed through `visible`, which writes the joiner and the selectors as escapes)."""
    import unicodedata

    return sum(0 if unicodedata.category(ch) in ("Mn", "Me", "Cf") else 2 if unicodedata.east_asian_width(ch) in "WF"
               else 1 for ch in text)


# Rich's cell_len is not used to lay out tokens: it counts a skin-tone modifier alone (🏽, U+1F3FB..1F3FF, which the
# character tokenizer always splits from its 👋) and a spacing vowel sign (ि) as no column, where terminals (glibc's
# wcwidth) give them 2 and 1, so every cell after one sat two columns left of its head. `columns` agrees with them.


def fit_columns(text: str, width: int) -> str:
    """`text` cut or padded with spaces to exactly `width` terminal columns (`columns`); a wide character that would
    straddle the edge is left out for a space, and a mark after the last character kept stays on it."""
    kept, used = [], 0
    for ch in text:
        w = columns(ch)
        if used + w > width:
            break
        kept.append(ch)
        used += w
    return "".join(kept) + " " * (width - used)


def joining(ch: str) -> str | None:
    """What `ch` is where it is a code point that shows only with its neighbours (an emoji's joiner, a variation
    selector, a skin-tone modifier, an accent or vowel sign, a format character), else None: a "character" of :tok's
    counts is a code point, and 👨‍👩‍👧 is five."""
    import unicodedata

    point = ord(ch)
    if ch in "\u200c\u200d":
        return "zero-width joiner" if ch == "\u200d" else "zero-width non-joiner"
    if 0xFE00 <= point <= 0xFE0F or 0xE0100 <= point <= 0xE01EF:
        return "variation selector"
    if 0x1F3FB <= point <= 0x1F3FF:
        return "skin-tone modifier"
    if 0x1F1E6 <= point <= 0x1F1FF:
        return "regional indicator"
    if 0xE0020 <= point <= 0xE007F:
        return "tag"
    category = unicodedata.category(ch)
    return "combining mark" if combining(ch) else "format character" if category == "Cf" else None


AFTER_JOINER = "code point after a joiner"  # why the 👩 of 👨‍👩 shows with the 👨: the zero-width joiner before it
SECOND_INDICATOR = "second regional indicator of a flag"  # 🇫🇷 is two, one flag
# the plurals of `folded`'s reasons that do not just add an "s" (words.count's `plural`)
FOLDED_PLURALS = {AFTER_JOINER: "code points after a joiner", SECOND_INDICATOR: "second regional indicators of flags"}


def _joins(before: str, ch: str) -> str | None:
    """Why `ch` shows as part of the cluster `before` it (a `joining` kind, AFTER_JOINER, SECOND_INDICATOR), or None
    where it starts a cluster of its own."""
    kind = joining(ch)
    if not before:
        return None
    if kind == "regional indicator":  # two make one flag; a third starts the next
        if before.endswith("\u200d"):
            return AFTER_JOINER
        return SECOND_INDICATOR if len(before) == 1 and joining(before) == kind else None
    return kind or (AFTER_JOINER if before.endswith("\u200d") else None)


def clusters(text: str) -> list[str]:
    """`text` cut where a character shows (a rough cut of Unicode's grapheme clusters, which the standard library does
    not make): a code point `joining` names stays on the one before, as does one after a zero-width joiner, and two
    regional indicators make one flag. The one rule for :tok's count of what a text shows and a grid's heads (one
    rule each, the heads attached no spacing vowel sign and followed no joiner)."""
    shown: list[str] = []
    for ch in text:
        if shown and _joins(shown[-1], ch) is not None:
            shown[-1] += ch
        else:
            shown.append(ch)
    return shown


def folded(text: str) -> dict[str, int]:
    """{why: how many} of `text`'s code points show only as part of the one before them (`_joins`), in text order:
    len(text) less their sum is len(clusters(text))."""
    why: dict[str, int] = {}
    before = ""
    for ch in text:
        if (reason := _joins(before, ch)) is not None:
            why[reason] = why.get(reason, 0) + 1
            before += ch
        else:
            before = ch
    return why


def heads_tell_apart(heads: list[str], tokens: list[str]) -> bool:
    """Whether the heads of a grid's columns (`heads[j]` for `tokens[j]`) name each distinct token by a head of its
    own: under a BPE on Chinese every byte token starts with "\\x", and every column was headed "\\"."""
    named: dict[str, str] = {}
    return all(named.setdefault(head, token) == token for head, token in zip(heads, tokens))


# Characters that would act on a terminal instead of showing: C0 and C1 controls (ESC starts the
# sequences that move the cursor, recolour, retitle the window or write to the clipboard; U+009B is
# a one-character CSI), format characters (the bidirectional overrides that reorder a line, zero
# widths) and the line and paragraph separators. Newline and tab are text. Spaces of other kinds,
# private-use and unassigned characters print as a glyph or a box and stay as they are.
_ACTIVE = {"Cc", "Cf", "Zl", "Zp", "Cs"}
# Format characters that are part of how a script is written, and stay: the zero-width joiner that makes 👨‍👩‍👧 one
# family and the non-joiner of Persian's می‌خواهم (Hindi uses both), and the marks that say which way a neutral
# character runs in Arabic and Hebrew (LRM, RLM, ALM). Escaped, a generated Persian text read "می\u200cخواهم" and an
# emoji family as its three people and two escapes. None of them moves or recolours anything, or reorders a line as
# the overrides and isolates do.
IN_WRITING = "\u200c\u200d\u200e\u200f\u061c"


def is_active(ch: str) -> bool:
    """Whether `ch` would act on a terminal rather than show (see _ACTIVE, IN_WRITING)."""
    import unicodedata

    return ch not in "\n\t" and ch not in IN_WRITING and unicodedata.category(ch) in _ACTIVE


def terminal_safe(text: str) -> str:
    """`text` with every active character written as its escape (`\\x1b`, `\\r`, `\\u202e`), as :step shows tokens.

    Generated text comes from a vocabulary that a data file or someone else's checkpoint chose: shown
    raw, an ESC in it could drive the user's terminal. Plain text passes unchanged.
    """
    if text.isprintable():
        return text
    return "".join(ascii(ch)[1:-1] if is_active(ch) else ch for ch in text)


def scale_rgb(frac: float) -> tuple[int, int, int]:
    """The colour at `frac` in 0..1 along SCALE (linear between its stops)."""
    frac = min(1.0, max(0.0, float(frac) if math.isfinite(frac) else 0.0))
    pos = frac * (len(SCALE) - 1)
    i = min(int(pos), len(SCALE) - 2)
    t = pos - i
    a, b = SCALE[i], SCALE[i + 1]
    return tuple(round(x + (y - x) * t) for x, y in zip(a, b))


def scale_hex(frac: float) -> str:
    return "#%02x%02x%02x" % scale_rgb(frac)


def shade(frac: float) -> str:
    frac = min(1.0, max(0.0, frac))
    return SHADES[min(len(SHADES) - 1, int(frac * len(SHADES)))]


# --- an output that cannot encode Unicode ------------------------------------------------------------------------
# Where standard output is ASCII or Latin-1 (PYTHONIOENCODING=ascii, a Latin-1 locale, LC_ALL=C with PYTHONUTF8=0), a
# glyph it cannot encode is written as a stand-in of the same width: the charts' and tables' columns were laid out
# in cells, so a box corner stays one character. Rich draws its own tables in ASCII there; these are the views' glyphs.
# The line between those glyphs and text: a stand-in is written only for a character of the views' own, one they draw
# with (box lines, blocks, shades, a chart's marks) or write in their own words (…, ·, →, ±, θ); every other character
# is text, the model's or the user's, and is written as its escape (\u2019, \u4e2d, \U0001f600), since a stand-in
# there is itself a character a text may hold: "_" for a space read as an underscore, "~" for "…" as a tilde, and "?"
# or "??" named every curly quote, Chinese character and emoji alike. The symbols for whitespace (␣ ↵ ⇥ ␍) stand for
# the text's own characters, so they are written as those characters' escapes (\x20 \n \t \r). Text that the views
# know to be text (a token through `visible`, generated text through `text_for_output`) is escaped before it is laid
# out, so that a grid's columns are measured with the escapes; a "…" or "·" there is the text's, escaped, where the
# same character of the views' own words is a stand-in. (`ascii_stand_in` stays the same-width stand-in of any
# character, for what lays itself out in cells.)
STAND_INS = {
    "…": "~", "·": ".", "•": "*", "×": "x", "±": "~", "→": ">", "←": "<", "⊙": "*", "�": "?",
    "●": "o", "▲": "^", "■": "#", "◆": "@", "✚": "+", "✖": "x", "★": "*", "▼": "v", "○": "o", "□": "%",
    "╌": ".", "┄": ".", "░": ".", "▁": ".", "▂": ",", "▃": ":", "▄": "-", "▅": "=", "▆": "+", "▇": "*", "█": "#",
    "▏": ".", "▎": ".", "▍": ":", "▌": ":", "▋": "#", "▊": "#", "▉": "#",  # a bar's last, part-filled cell
    "␣": "_", "↵": "$", "⇥": ">", "␍": "<",
    "θ": "t", "Δ": "D", "σ": "s", "ε": "e", "π": "p", "µ": "u", "\u0302": "^",  # the hat of x̂ comes after its x
}
STANDS_FOR = {shown: ch for ch, shown in VISIBLE.items()}  # ␣ -> " ": the text's character a symbol shows


def ascii_stand_in(ch: str) -> str:
    """The ASCII stand-in for `ch` (see STAND_INS), as many characters as `ch` takes cells; "?" where it has none."""
    if ch in STAND_INS:
        return STAND_INS[ch]
    import unicodedata

    name = unicodedata.name(ch, "")
    if name.startswith("BOX DRAWINGS"):  # a line on its own, else a corner, a tee or a cross
        return "|" if name.endswith("VERTICAL") else "-" if name.endswith("HORIZONTAL") else "+"
    if unicodedata.combining(ch):
        return ""
    return "??" if unicodedata.east_asian_width(ch) in "WF" else "?"


def views_glyph(ch: str) -> bool:
    """Whether `ch` is a character of the views' own (STAND_INS, a box line), which an output that cannot encode it
    writes as its stand-in; not a symbol for whitespace, which stands for text."""
    import unicodedata

    return ch in STAND_INS and ch not in STANDS_FOR or unicodedata.name(ch, "").startswith("BOX DRAWINGS")


def escaped(ch: str) -> str:
    """`ch` as an escape of ASCII characters: Python's (\\n, \\xe9, \\u2026, \\U0001f600), and \\x20 for a
    space, which Python leaves as it is."""
    return "\\x20" if ch == " " else ascii(ch)[1:-1]


def ascii_written(ch: str) -> str:
    """What an output that cannot encode `ch` writes for it: a views' glyph's stand-in, a whitespace symbol's
    character's escape, any other character's escape (the line is drawn above STAND_INS)."""
    if ch in STANDS_FOR:
        return escaped(STANDS_FOR[ch])
    return ascii_stand_in(ch) if views_glyph(ch) else escaped(ch)


@functools.lru_cache(maxsize=None)
def _narrow(encoding: str) -> bool:
    """Whether `encoding` cannot encode the views' glyphs (an unknown one is left alone: its stream fails anyway)."""
    try:
        "█…".encode(encoding)
    except UnicodeError:
        return True
    except LookupError:
        return False
    return False


def narrow_outputs() -> tuple[str, ...]:
    """The encodings of standard output and error, of the two, that cannot encode Unicode: () on a UTF-8 terminal,
    ("ascii",) under PYTHONIOENCODING=ascii. Read as they are now (a test replaces sys.stdout)."""
    encodings = (getattr(stream, "encoding", None) for stream in (sys.stdout, sys.stderr))
    return tuple(dict.fromkeys(e for e in encodings if isinstance(e, str) and _narrow(e)))


def encodes(text: str, encodings: tuple[str, ...]) -> bool:
    """Whether every one of `encodings` encodes `text`."""
    try:
        for encoding in encodings:
            text.encode(encoding)
    except (UnicodeError, LookupError):
        return False
    return True


def text_for_output(text: str) -> str:
    """Text (generated, or a token's) with each character that the output cannot encode as its escape, before it is
    laid out: on a UTF-8 output, `text` itself. Whitespace stays as it is, as every character it can encode."""
    narrow = narrow_outputs()
    if not narrow or text.isascii() or encodes(text, narrow):
        return text
    return "".join(ch if encodes(ch, narrow) else escaped(ch) for ch in text)


def for_output(text: str) -> str:
    """A message as an output that cannot encode it writes it (`ascii_written`, the views' glyphs left for the
    stream's stand-ins, which take their width): escaped before it is laid out, so that it wraps at its real width."""
    narrow = narrow_outputs()
    if not narrow or text.isascii() or encodes(text, narrow):
        return text
    return "".join(ch if encodes(ch, narrow) or views_glyph(ch) else ascii_written(ch) for ch in text)


def on_page(token: str) -> str:
    """A token as `visible` shows it on a page written in UTF-8 (the report), whatever the terminal's encoding."""
    return visible(token, encodings=())


def _stand_ins(error: UnicodeError):
    if not isinstance(error, UnicodeEncodeError):
        raise error
    return "".join(ascii_written(ch) for ch in error.object[error.start:error.end]), error.end


STAND_IN_ERRORS = "minitf-stand-ins"


def write_stand_ins(stream) -> None:
    """Make `stream` (a text file such as sys.stdout) write stand-ins or escapes for what its encoding cannot encode
    (`ascii_written`), rather than raise UnicodeEncodeError: a chart ended the command with "internal error" after the
    training it showed had run.
    Nothing changes for a stream that encodes Unicode, or one that cannot be reconfigured."""
    import codecs

    encoding = getattr(stream, "encoding", None)
    if not encoding or not hasattr(stream, "reconfigure"):
        return
    try:
        "█…".encode(encoding)
        return
    except (UnicodeError, LookupError):
        pass
    try:
        codecs.lookup_error(STAND_IN_ERRORS)
    except LookupError:
        codecs.register_error(STAND_IN_ERRORS, _stand_ins)
    try:
        stream.reconfigure(errors=STAND_IN_ERRORS)
    except (ValueError, OSError):  # io.UnsupportedOperation is both
        pass
