"""A sweep under odd locales and terminals: ASCII outputs, FORCE_COLOR into files, $VARS in a path, 40 columns."""

import io
import socket
import sys
import urllib.error
from pathlib import Path

import pytest

from minitf_repl.palette import visible, write_stand_ins
from minitf_repl.render import console_for, render, say
from test_commands import run, tiny_session
from test_render import text_of

DOCS = Path(__file__).resolve().parent.parent / "docs"


def ascii_output(monkeypatch, encoding="ascii"):
    """Standard output and error of `encoding` (PYTHONIOENCODING=ascii, LC_ALL=C with PYTHONUTF8=0), as the front
    ends set them up (write_stand_ins); the bytes written to standard output."""
    raw = io.BytesIO()
    for name in ("stdout", "stderr"):
        stream = io.TextIOWrapper(raw if name == "stdout" else io.BytesIO(), encoding=encoding, write_through=True)
        write_stand_ins(stream)
        monkeypatch.setattr(sys, name, stream)
    return raw


# --- 1. the text shown stays unambiguous where the output cannot encode it -----------------------------------------
def test_a_tokens_characters_an_ascii_output_cannot_show_are_escapes_not_stand_ins_that_a_text_may_hold(monkeypatch):
    assert visible(" _…") == "␣_…"  # a UTF-8 output: the symbols
    ascii_output(monkeypatch)
    # space was "_" like the underscore, "…" was "~" like the tilde, and every Chinese character and emoji "??"
    assert [visible(t) for t in (" ", "_", "…", "~", "中", "文", "😀", "\n", "’")] == [
        "\\x20", "_", "\\u2026", "~", "\\u4e2d", "\\u6587", "\\U0001f600", "\\n", "\\u2019"]
    latin1 = ascii_output(monkeypatch, "latin-1")
    assert visible(" é°") == "\\x20é°"  # what Latin-1 encodes shows as itself
    say(console_for(force_terminal=False), "'中' ’ q·k … █")  # a message: text escaped, the views' glyphs stood in
    assert latin1.getvalue().decode("latin-1").strip() == "'\\u4e2d' \\u2019 q·k ~ #"


def test_tok_attn_and_gen_on_an_ascii_output_tell_space_from_underscore_and_ellipsis_from_tilde(monkeypatch,
                                                                                                 tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("a_b c_d …~ " * 40, encoding="utf-8")
    s = tiny_session(str(path))
    out = ascii_output(monkeypatch)
    console = console_for(force_terminal=False, width=100)
    render(run(s, ":tok 'a_b c…~'"), console)
    tokens = out.getvalue().decode("ascii").splitlines()[0].split()
    assert tokens == ["a", "_", "b", "\\x20", "c", "\\u2026", "~"]  # was a _ b _ c ~ ~
    out.seek(0), out.truncate()
    render(run(s, ":attn 'a_b c'"), console)
    assert "\\x20" in out.getvalue().decode("ascii")  # the row of the space; it was a second "_"
    from minitf_repl.render.words import model_text

    assert model_text("…~ 中", console).plain == "\\u2026~ \\u4e2d"  # :gen's text; it was "~~ ??" once written


def test_the_emoji_note_and_a_vocabulary_error_on_an_ascii_output_name_the_characters(monkeypatch):
    from minitf_repl.core.data import CharTokenizer

    raw = ascii_output(monkeypatch)
    console = console_for(force_terminal=False, width=200)
    try:
        CharTokenizer("abc _").encode("a’b中😀")
    except Exception as e:  # noqa: BLE001 - the message is what is tested
        say(console, f"error: {e}")
    written = raw.getvalue().decode("ascii")
    assert "'\\u2019' '\\u4e2d' '\\U0001f600'" in written  # was '?' '??' '??'


# --- 3. FORCE_COLOR adds colour, and a file or a pipe stays one -------------------------------------------------
def test_force_color_into_a_file_colours_it_but_draws_no_live_bar_and_wraps_no_message(monkeypatch):
    from minitf_repl.render import RichReporter
    from minitf_repl.render.words import on_a_terminal

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    log = io.StringIO()
    console = console_for(file=log, width=40)
    assert console.is_terminal and console.color_system is not None  # Rich's colour, as asked
    assert not on_a_terminal(console) and console.soft_wrap
    reporter = RichReporter(console, lines=True)
    assert not reporter.live and reporter.lines  # a line per evaluation, no bar redrawn into the log
    say(console, "a message longer than forty columns stays one line in a file or a pipe")
    assert len(log.getvalue().strip().splitlines()) == 1
    assert RichReporter(console_for(file=io.StringIO(), force_terminal=True)).live  # told so by its maker: a terminal


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_tty_compatible_0_on_a_terminal_prints_a_line_per_evaluation_as_rich_draws_no_live_bar(monkeypatch):
    from minitf_repl.render import RichReporter

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.setenv("TTY_COMPATIBLE", "0")
    console = console_for(file=_Terminal(), width=40)
    assert not console.is_terminal  # Rich's own: its Live draws nothing on this console
    reporter = RichReporter(console, lines=True)
    # was: live (the file is a terminal) and no lines, so a :train showed no progress until its end
    assert not reporter.live and reporter.lines


# --- 5. the docs name the ASCII fallback --------------------------------------------------------------------------
def test_the_inside_views_guide_says_what_an_ascii_output_writes_for_the_views_and_for_text():
    guide = (DOCS / "inside-views.md").read_text(encoding="utf-8")
    assert "PYTHONIOENCODING=ascii" in guide and "`\\x20` a space" in guide and "`\\u2026` for `…`" in guide


# --- 7. smaller ---------------------------------------------------------------------------------------------------
def test_a_checkpoint_dir_variable_holding_home_is_expanded_and_an_unset_one_refused(monkeypatch, tmp_path):
    from minitf_repl.core.errors import UserError
    from minitf_repl.core.paths import default_checkpoint_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "$HOME/x")  # a systemd unit's Environment=, an .env file
    assert default_checkpoint_dir() == tmp_path / "x"
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "${HOME}/y")
    assert default_checkpoint_dir() == tmp_path / "y"
    monkeypatch.delenv("MINITF_SWEEP_UNSET", raising=False)
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "$MINITF_SWEEP_UNSET/z")
    with pytest.raises(UserError, match=r"names \$MINITF_SWEEP_UNSET, a variable that is not set here; set "):
        default_checkpoint_dir()


@pytest.mark.parametrize("failure, said", [
    (urllib.error.URLError(socket.gaierror(-2, "Name or service not known")), "(Name or service not known)"),
    (ConnectionRefusedError(111, "Connection refused"), "(Connection refused)"),
    (urllib.error.URLError("no host given"), "(no host given)"),
])
def test_a_failed_download_says_the_reason_without_its_errno(monkeypatch, failure, said):
    from minitf_repl.core import data
    from minitf_repl.core.errors import DataError

    def refuse(*args, **kwargs):
        raise failure

    monkeypatch.setattr(data.urllib.request, "urlopen", refuse)
    with pytest.raises(DataError) as caught:
        data._download("http://example.invalid/input.txt", 1.0)
    assert said in str(caught.value) and "Errno" not in str(caught.value)


def test_shapes_at_40_columns_keeps_a_wrapped_steps_line_under_its_name():
    s = tiny_session()
    lines = text_of(run(s, ":shapes"), width=40).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  token_embedding"))
    assert len(lines[at]) > 0 and lines[at + 1].startswith("    ")  # was "params" at the margin
    steps = [line for line in lines if line.strip().endswith("params")]
    assert steps and all(line.startswith("  ") for line in steps)


def test_the_report_page_shows_a_token_as_on_a_utf8_terminal_whatever_the_terminals_encoding(monkeypatch):
    """The page is written in UTF-8: an ASCII terminal's escapes (\\x20 for a space) are not the page's."""
    import io

    from minitf_repl import palette, report

    monkeypatch.setattr("sys.stdout", io.TextIOWrapper(io.BytesIO(), encoding="ascii"))
    assert palette.visible(" a\u2026") == "\\x20a\\u2026"  # the terminal's, where it cannot encode them
    assert report.visible(" a\u2026") == "\u2423a\u2026" and palette.quoted("\u2026", encodings=()) == "'\u2026'"


def test_a_scripts_bytes_that_are_not_utf8_are_said_to_be_so_not_blamed_on_the_vocabulary():
    """`printf ':gen h\\xe9llo' | minitf`: the byte was U+FFFD, "not in the vocabulary; train on data that holds it"."""
    import io

    from test_commands import tiny_session

    from minitf_repl import repl

    from test_hostile import drive

    lines = list(repl.stdin_lines(io.BytesIO(b":gen h\xe9llo n=2\n")))
    code, _, said = drive(tiny_session(), *lines)
    assert "not UTF-8 (\\xe9)" in said and "iconv -f latin1 -t utf-8 FILE" in said and "vocabulary" not in said, said


def test_the_iconv_line_for_a_scripts_bytes_runs_as_given(tmp_path):
    """`iconv -t utf-8` without -f reads the locale's encoding and failed: "illegal input sequence"."""
    import io
    import re
    import shutil
    import subprocess

    from test_hostile import drive

    from minitf_repl import repl

    _, _, said = drive(tiny_session(), *repl.stdin_lines(io.BytesIO(b":gen caf\xe9\n")))
    given = re.search(r"iconv .*", said).group(0).strip()
    if shutil.which("iconv") is None:
        pytest.skip("no iconv here")
    (tmp_path / "FILE").write_bytes(b":gen caf\xe9\n")
    subprocess.run(given, shell=True, cwd=tmp_path, check=True, env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"})
    assert (tmp_path / "FILE-utf8.txt").read_text(encoding="utf-8") == ":gen caf\u00e9\n"


def test_a_scripts_comment_after_a_command_may_hold_bytes_that_are_not_utf8():
    """`:set lr=0.01 # caf\xe9 note` in a Latin-1 script ran, the comment ignored, before bytes were said."""
    import io

    from test_hostile import drive

    from minitf_repl import repl

    session = tiny_session()
    code, _, said = drive(session, *repl.stdin_lines(io.BytesIO(b":set lr=0.01 # caf\xe9 note\n")))
    assert code == 0 and "not UTF-8" not in said and session.train_config.lr == 0.01, said
    code, _, said = drive(tiny_session(), *repl.stdin_lines(io.BytesIO(b":gen # caf\xe9\n")))  # a prompt's: said
    assert "not UTF-8 (\\xe9)" in said, said


def test_a_command_line_word_in_utf8_under_a_c_locale_is_said_to_be_the_locales_doing(monkeypatch):
    """`LC_ALL=C minitf tok héllo`: c3 a9 is UTF-8, so "is not UTF-8 text" was false; the locale read it."""
    from minitf_repl import cli

    word = b"h\xc3\xa9llo".decode("ascii", "surrogateescape")  # as Python reads argv under an ASCII locale
    monkeypatch.setattr(cli.os, "fsencode", lambda w: w.encode("ascii", "surrogateescape"))
    said = cli._undecodable([word])
    assert "UTF-8 locale (LC_ALL=C.UTF-8 minitf" in said and "not UTF-8 text" not in said, said
    latin1 = b"h\xe9llo".decode("ascii", "surrogateescape")  # Latin-1 bytes: no locale reads them as UTF-8
    assert "is not UTF-8 text (bytes \\xe9)" in cli._undecodable([latin1])


def test_the_data_note_after_a_train_names_the_task_with_its_size():
    """`:data sort:1` after a train on sort said "data is now sort:1", then "goes on training it on sort"."""
    from test_render import plain

    s = tiny_session("sort")
    run(s, ":train steps=3")
    shown = plain(run(s, ":data sort:1"), width=300)
    assert "data is now sort:1" in shown and "goes on training it on sort:1" in shown, shown
    assert "decay for sort:1" in shown, shown
