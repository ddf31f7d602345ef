"""A learner's laptop, emulated on Linux: macOS (Apple silicon, no /proc) and Windows (no fork, no fcntl, no pread,
descriptors in text mode, names it forbids). Each test failed before its fix.

On Windows the REPL's history came back with a "\\r" at the end of every entry: os.open gives a descriptor in text
mode there unless told O_BINARY, so each "\\n" written went out as "\\r\\n", and prompt-toolkit reads the file as bytes.
The history is opened, appended to and rewritten with O_BINARY now (0 elsewhere, where nothing changes).
A history file past its 16 MiB limit ended the REPL's start on Windows with a traceback (AttributeError: os.pread, which
Windows lacks): its newest entries are read with lseek and read now, as everywhere.
"""

import os

import pytest


WINDOWS_O_BINARY = 0x8000  # Windows' value; on Linux the same bit is O_LARGEFILE, which changes nothing here


def opened_flags(monkeypatch) -> list[int]:
    """os.O_BINARY set as on Windows, and the flags of every os.open from here on."""
    monkeypatch.setattr(os, "O_BINARY", WINDOWS_O_BINARY, raising=False)
    flags, real_open = [], os.open

    def recording_open(path, how, *args, **kwargs):
        flags.append(how)
        return real_open(path, how, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    return flags


# --- the history file on Windows ----------------------------------------------------------------------------------
def test_the_history_is_opened_in_binary_mode_where_the_system_has_a_text_mode(tmp_path, monkeypatch):
    from minitf_repl import repl

    monkeypatch.setattr(repl, "MAX_HISTORY_BYTES", 4000)
    path = tmp_path / "history"
    path.write_text("".join(f"\n# 2026-01-01 00:00:{k % 60:02}.000000\n+:gen line {k}\n" for k in range(200)))
    flags = opened_flags(monkeypatch)
    history = repl.make_history(path, lambda msg: None)  # reads it, and rewrites it with its newest entries
    history.store_string(":train steps=5")
    assert len(flags) == 3, flags  # the check at start, the rewrite, the append
    assert all(f & WINDOWS_O_BINARY for f in flags), [hex(f) for f in flags]
    assert list(history.load_history_strings())[0] == ":train steps=5"


def test_a_history_past_its_limit_is_cut_where_there_is_no_pread(tmp_path, monkeypatch):
    from minitf_repl import repl

    monkeypatch.setattr(repl, "MAX_HISTORY_BYTES", 4000)
    monkeypatch.delattr(os, "pread")  # Windows has none
    path = tmp_path / "history"
    path.write_text("".join(f"\n# 2026-01-01 00:00:{k % 60:02}.000000\n+:gen line {k}\n" for k in range(200)))
    warnings = []
    history = repl.make_history(path, warnings.append)
    assert type(history).__name__ == "SafeFileHistory" and "its oldest entries were dropped" in warnings[0]
    lines = list(history.load_history_strings())
    assert lines[0] == ":gen line 199" and ":gen line 0" not in lines and len(lines) > 20
