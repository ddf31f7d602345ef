"""What a user's-eye sweep of terminal environments (an ASCII-only output encoding, TERM=dumb, 16 colours, narrow and
wide terminals, resizes, Ctrl-C, folders and homes that cannot be written) found: each test failed before its fix.

Where standard output could not encode Unicode (PYTHONIOENCODING=ascii, a Latin-1 locale, LC_ALL=C with
PYTHONUTF8=0), every chart, sparkline and arrow ended the command with "internal error: UnicodeEncodeError" (the
training finished, its chart did not), and `minitf data --help` in a traceback. On a TERM=dumb terminal (Emacs' shell)
Rich takes the width as 80 whatever the terminal's, so at 40 columns every message broke inside words. On a terminal of
16 colours the heat maps' ten colours fell to four, every weight from 0 to 0.4 one grey. At 20 columns :compare, the
live loss table, :params, :step and records (:ngram) cut every number to "0.…", :quantize cut its row names to two
letters, :checks wrapped a word a line past the edge and :help put a second name at the margin. A terminal narrowed
during :train squeezed the bar to "train ╸ … eta 0…" (the bars of :compare, :checks, :context and :lrfind cut their
count at 24 columns); one too low for a row of the table lost the bar under the cut, and where the table dropped the
train loss its legend still explained one.
Ctrl-C went unheard by :report, which wrote its page anyway. A report into a read-only file system said "permission
denied"; a deleted working folder was a traceback; without a home folder the shell died at start; a cache folder
that cannot be written was an internal error; and a history file that cannot be used was warned about with no way on.
"""

import contextlib
import fcntl
import io
import os
import struct
import sys
import termios

import pytest

from minitf_repl.render import console_for, render, say
from test_commands import run, tiny_session


# --- an output that cannot encode Unicode ---------------------------------------------------------------------
def ascii_stdout(monkeypatch, encoding="ascii"):
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding=encoding, write_through=True)
    monkeypatch.setattr(sys, "stdout", stream)
    return raw


def test_a_chart_on_an_ascii_only_output_is_drawn_in_ascii_instead_of_failing(monkeypatch):
    s = tiny_session()
    run(s, ":train")
    result = run(s, ":plot")
    raw = ascii_stdout(monkeypatch)
    console = console_for(force_terminal=False, width=60)
    render(result, console)
    say(console, "the loss fell ▁▂▃▄▅▆▇█ … ±0.01 → 2.48 · done")
    text = raw.getvalue().decode("ascii")
    assert "loss by step" in text and "|" in text and "+" in text
    assert "the loss fell" in text and "done" in text


def test_ascii_stand_ins_keep_a_charts_columns_and_a_latin1_output_keeps_what_it_can_show(monkeypatch):
    from minitf_repl.palette import ascii_stand_in

    for glyph in "┤│└─╌┄•×●▲■◆✚✖★▼○□▁▂▃▄▅▆▇█░…·→␣↵⇥␍⊙θΔσεπµ±�":
        assert len(ascii_stand_in(glyph)) == 1 and ascii_stand_in(glyph).isascii(), glyph
    assert ascii_stand_in("日") == "??"  # two cells wide: two stand-ins keep the columns after it
    raw = ascii_stdout(monkeypatch, "latin-1")
    say(console_for(force_terminal=False, width=60), "±0.01 · é █")
    assert raw.getvalue().decode("latin-1").strip() == "±0.01 · é #"


# --- TERM=dumb ------------------------------------------------------------------------------------------------
def resize(tty, columns: int, rows: int = 30) -> None:
    fcntl.ioctl(tty.fileno(), termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))


@contextlib.contextmanager
def dumb_terminal(monkeypatch, columns: int = 40):
    """A pseudo-terminal of `columns` under TERM=dumb (Emacs' shell) without $COLUMNS: its writable side, open."""
    main, side = os.openpty()
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.delenv("COLUMNS", raising=False)
    try:
        with os.fdopen(side, "w", encoding="utf-8") as tty:
            resize(tty, columns)
            yield tty
    finally:
        os.close(main)


def test_a_dumb_terminal_wraps_messages_at_its_own_width_not_at_80(monkeypatch):
    with dumb_terminal(monkeypatch, 40) as tty:
        console = console_for(file=tty)
        assert console.is_terminal and console.width == 40
        resize(tty, 60)
        assert console.width == 60  # resized (Emacs resizes its shell's window): the next message follows
        monkeypatch.setenv("COLUMNS", "50")
        assert console_for(file=tty).width == 50  # $COLUMNS still wins, as Rich has it


# --- narrow terminals -------------------------------------------------------------------------------------------
def narrow_console(width: int):
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system=None)


def test_compare_table_of_one_seed_keeps_each_loss_whole_at_24_columns():
    from types import SimpleNamespace

    from minitf_repl.render.live import CompareTable

    table = CompareTable(["n_layers=1", "n_layers=2"], seeds=1)
    for step, (a, b) in ((2, (2.2046, 2.2011)), (20, (0.4213, 0.3547))):
        table.add(SimpleNamespace(step=step, label="n_layers=1", val_loss=a, spread=None, bpc=None, bpc_spread=None))
        table.add(SimpleNamespace(step=step, label="n_layers=2", val_loss=b, spread=None, bpc=None, bpc_spread=None))
    for width in (24, 20):  # at 20 without the rule under the header
        console = narrow_console(width)
        console.print(table)
        shown = console.file.getvalue()
        assert "…" not in shown and "2.2046" in shown and "0.3547" in shown  # was "2.20…", 2 columns to spare at 24


def test_the_loss_table_at_20_columns_drops_columns_rather_than_cutting_every_number():
    from minitf_repl.render import LossTable

    rows = [{"step": 20, "run_step": 20, "run_steps": 20, "train_loss": 0.5061, "val_loss": 0.4109, "accuracy": 0.64,
             "lr": 1.2e-3, "grad_norm": 1.0, "tokens_per_second": 2915.0, "elapsed": 1.1}]
    table = LossTable(rows, narrow=True, vocab_size=12)
    console = narrow_console(20)
    console.print(table)
    shown = console.file.getvalue()
    assert "…" not in shown and "0.4109" in shown  # was "step  tr…  val   acc" over "20  0.…  0.…  64.…"
    assert "0.5061" in shown  # the train loss still fits beside it; the accuracy went first
    console = narrow_console(40)
    console.print(table)
    assert "64.0%" in console.file.getvalue()  # where it fits, the accuracy stays


def test_params_at_20_columns_keeps_every_count_whole():
    s = tiny_session()
    result = run(s, ":params")
    console = narrow_console(20)
    render(result, console)
    shown = console.file.getvalue()
    total = f"{s.model.num_parameters():,}" if hasattr(s.model, "num_parameters") else None
    table = shown.split("compute and memory")[0]
    assert "," in table and not any(cell.endswith("…") and cell[0].isdigit() for cell in table.split())  # "198,…"
    if total:
        assert total in table


def test_help_at_20_columns_keeps_a_commands_second_name_indented_under_its_first():
    s = tiny_session()
    console = narrow_console(20)
    render(run(s, ":help"), console)
    lines = console.file.getvalue().splitlines()
    at = next(k for k, line in enumerate(lines) if line.strip().startswith(":context"))
    assert lines[at + 1] == "  :positions"  # was ":positions" at the margin, where the family names stand


def test_checks_at_20_columns_wrap_their_text_under_a_small_hang_not_a_word_a_line():
    from rich.cells import cell_len

    s = tiny_session()
    run(s, ":train")
    console = narrow_console(20)
    render(run(s, ":checks batch gradient"), console)
    lines = console.file.getvalue().splitlines()
    over = [line for line in lines if cell_len(line.rstrip()) > 20]
    assert not over  # was "               targets": a column 5 wide, each word past the edge
    assert any(line.startswith("pass batch") for line in lines)


def test_a_record_too_wide_for_20_columns_puts_each_value_under_its_name():
    import re

    s = tiny_session()
    run(s, ":train")
    console = narrow_console(20)
    render(run(s, ":ngram n=2"), console)
    shown = console.file.getvalue()
    assert not re.findall(r"\d…", shown) and "nothing (uniform)" in shown  # were "2.4…" and "not…" beside names
    assert "train loss" in shown and "model below it" in shown


# --- folders that cannot be written -------------------------------------------------------------------------------
def test_report_into_a_read_only_file_system_says_so_and_what_to_do(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from minitf_repl.core.errors import UserError
    from minitf_repl.report import check_report_path

    monkeypatch.setattr(os, "access", lambda path, mode: False)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=os.ST_RDONLY))
    with pytest.raises(UserError) as e:
        check_report_path(str(tmp_path / "r.html"))
    assert "the file system is read-only" in str(e.value) and "permission denied" not in str(e.value)
    assert "; " in str(e.value)  # and the fix: another folder
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_flag=0))
    with pytest.raises(UserError) as e:
        check_report_path(str(tmp_path / "r.html"))
    assert "permission denied; " in str(e.value)  # was "permission denied" alone, no way on


# --- Ctrl-C -------------------------------------------------------------------------------------------------------
def test_ctrl_c_stops_a_report_at_once_and_leaves_no_file_behind(tmp_path, monkeypatch):
    from minitf_repl import report
    from minitf_repl.commands import REGISTRY

    assert REGISTRY["report"].interruptible  # it polls no stop flag: Ctrl-C went unheard and the page was written

    def cut(src, dst):
        raise KeyboardInterrupt

    monkeypatch.setattr(report.os, "replace", cut)
    with pytest.raises(KeyboardInterrupt):
        report.write_report(tmp_path / "r.html", "<html></html>")
    assert list(tmp_path.iterdir()) == []  # its temporary file is gone too


# --- the folder minitf runs in --------------------------------------------------------------------------------------
def test_a_deleted_working_folder_is_one_line_not_a_traceback(monkeypatch):
    from test_cli import assert_one_error_line, invoke

    monkeypatch.delenv("MINITF_CHECKPOINT_DIR", raising=False)  # the default, ./checkpoints, needs the folder

    def gone():
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(os, "getcwd", gone)
    line = assert_one_error_line(invoke("--data", "sort:4", "config"))
    assert "no longer exists" in line and "; " in line


def test_a_commands_help_on_an_ascii_only_output_is_written_not_a_traceback():
    from typer.testing import CliRunner

    from minitf_repl import cli

    result = CliRunner(charset="ascii").invoke(cli.app, ["data", "--help"])
    assert result.exit_code == 0, result.output  # Typer's own console wrote "…" and ended in UnicodeEncodeError
    assert "Usage" in result.stdout


# --- no home folder ---------------------------------------------------------------------------------------------------
def no_home(monkeypatch):
    """$HOME unset and no passwd entry (a container's arbitrary uid): platformdirs raises RuntimeError."""
    import platformdirs

    def unknown(*args, **kwargs):
        raise RuntimeError("could not determine the home directory for '~/.local/state', set an absolute HOME or "
                           "XDG variable")

    for name in ("user_state_dir", "user_data_dir", "user_cache_dir"):
        monkeypatch.setattr(platformdirs, name, unknown)
    for name in ("HOME", "MINITF_HISTORY", "MINITF_CACHE_DIR", "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


def test_the_shell_starts_without_a_home_folder_and_keeps_its_history_in_memory(monkeypatch):
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from minitf_repl import repl
    from test_repl import consoles

    no_home(monkeypatch)
    out, err = consoles()
    with create_pipe_input() as inp:
        inp.send_text(":config\r\x04")
        code = repl.run_repl(tiny_session(), out, err, input=inp, output=DummyOutput())  # was a RuntimeError
    assert code == 0 and "generation" in out.file.getvalue()
    warning = " ".join(err.file.getvalue().split())
    assert "history is kept in memory" in warning and "MINITF_HISTORY" in warning


def test_the_cache_folder_without_a_home_folder_is_a_user_error_naming_its_variable(monkeypatch):
    from minitf_repl.core.errors import UserError
    from minitf_repl.core.paths import cache_dir

    no_home(monkeypatch)
    with pytest.raises(UserError, match=r"MINITF_CACHE_DIR"):
        cache_dir()  # was platformdirs' RuntimeError: ":data shakespeare" an internal error


def test_quantize_at_30_columns_names_each_row_whole():
    s = tiny_session()
    run(s, ":train")
    result = run(s, ":quantize int8")
    for width in (30, 20):
        console = narrow_console(width)
        render(result, console)
        shown = " ".join(console.file.getvalue().split())
        assert "weights (torch.save)" in shown and "val loss" in shown, shown  # were "we…", "(s…", "lo…" at 30 columns
        assert "…" not in shown


def test_step_at_20_columns_keeps_each_logit_and_probability_whole():
    import re

    s = tiny_session()
    run(s, ":train")
    console = narrow_console(20)
    render(run(s, ":step 12 seed=1"), console)
    shown = console.file.getvalue()
    assert not re.findall(r"\d…", shown) and "prob" in shown  # every cell was "1.1…" and "0.2…"
    assert len(re.findall(r"-?\d\.\d{3} +0\.\d{3}", shown)) >= 10  # a token's logit and probability on its line


# --- a history file that cannot be used -------------------------------------------------------------------------------
def test_a_history_file_that_cannot_be_used_says_how_to_keep_history_elsewhere(tmp_path):
    from minitf_repl import repl

    folder = tmp_path / "history"
    folder.mkdir()
    warnings = []
    repl.make_history(folder, warnings.append)
    assert len(warnings) == 1 and warnings[0].endswith("history is kept in memory for this session; "
                                                       "$MINITF_HISTORY=FILE keeps it in another file")
    history = repl.SafeFileHistory(str(tmp_path / "h"), warnings.append)
    history._fail("write", OSError("disk full"))
    assert warnings[1].endswith("$MINITF_HISTORY=FILE keeps it in another file")  # said nothing of a way out


# --- a terminal of 16 colours ---------------------------------------------------------------------------------------
def test_attention_maps_on_a_16_colour_terminal_are_drawn_in_shades_it_can_tell_apart():
    import re

    from rich.console import Console

    s = tiny_session()
    run(s, ":train")
    console = Console(file=io.StringIO(), width=60, force_terminal=True, color_system="standard")  # TERM=xterm, linux
    render(run(s, ":attn 1234="), console)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", console.file.getvalue())
    # the scale's ten colours fell to four there: weights from 0 to 0.4 were one grey; the characters tell them apart
    assert "weight: 0 . : - = + * # % @ 1.00" in " ".join(shown.split())


SHARED = __import__("pathlib").Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.mark.skipif(not SHARED.is_file(), reason="needs ../shared/data/tinyshakespeare.txt")
def test_a_cache_folder_that_cannot_be_written_is_a_data_error_naming_its_variable(tmp_path, monkeypatch):
    from minitf_repl.core import data as D
    from minitf_repl.core.errors import DataError
    from test_data import _Server

    blocked = tmp_path / "a-file"
    blocked.write_text("")
    server = _Server(SHARED.read_bytes())
    monkeypatch.setenv("MINITF_CACHE_DIR", str(blocked / "cache"))  # a read-only home has the same effect
    monkeypatch.setenv("MINITF_SHAKESPEARE_URL", server.url)
    from minitf_repl.core.notices import telling

    said = []
    try:
        with pytest.raises(DataError, match=r"MINITF_CACHE_DIR"):  # was an internal error: NotADirectoryError
            D.fetch_shakespeare()
        with telling(said.append):  # the download is read for the session (50th session), the problem said
            assert D.load_data("shakespeare").info().chars == D.SHAKESPEARE_CHARS
    finally:
        server.close()
    assert any("MINITF_CACHE_DIR" in s and f"{blocked} is a file" in s for s in said), said


# --- a terminal resized while :train runs ---------------------------------------------------------------------------
def test_the_training_bar_takes_the_narrow_form_when_the_terminal_narrows_during_the_run():
    from types import SimpleNamespace

    from rich.console import Console

    from minitf_repl.render import RichReporter

    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    reporter = RichReporter(console)
    reporter.on_train_start(150, 0, False)
    try:
        reporter.on_step(SimpleNamespace(run_step=57, run_steps=150, train_loss=0.0270, tokens_per_second=1584.0,
                                         val_loss=None))
        console.width = 40  # the terminal narrowed
        shown = Console(file=io.StringIO(), width=40, color_system=None)
        shown.print(reporter.training_view())
        bar = shown.file.getvalue()
        assert "57/150" in bar and "0.0270" in bar and "…" not in bar  # was "train ╸ … eta 0… loss 0.0270"
    finally:
        reporter._live.stop()


def test_a_terminal_too_low_for_one_row_of_the_loss_table_still_shows_the_bar():
    from types import SimpleNamespace

    from rich.console import Console

    from minitf_repl.render import RichReporter

    console = Console(file=io.StringIO(), width=80, height=8, force_terminal=True, color_system=None)
    reporter = RichReporter(console)
    reporter.on_train_start(150, 0, False)
    try:
        reporter.on_train_vocab(12)
        for step in range(1, 21):
            reporter.on_step(SimpleNamespace(step=step, run_step=step, run_steps=150, train_loss=0.5, val_loss=0.4,
                                             val_bpc=None, accuracy=0.9, lr=1e-3, tokens_per_second=1584.0,
                                             elapsed=1.0, aux_loss=None))
        lines = console.render_lines(reporter.training_view(), pad=False)
        shown = "\n".join("".join(segment.text for segment in line) for line in lines)
        assert len(lines) <= 7 and "20/150" in shown  # the bar was below the cut, with the table's one row above it
    finally:
        reporter._live.stop()


def test_the_compare_bar_keeps_its_count_whole_at_24_columns_and_after_a_narrowing():
    from rich.console import Console

    from minitf_repl.render import RichReporter

    for start in (24, 100):
        console = Console(file=io.StringIO(), width=start, force_terminal=True, color_system=None)
        reporter = RichReporter(console)
        reporter.on_compare_start(["n_layers=1", "n_layers=2"], 200, 1)
        try:
            console.width = 24
            reporter.on_compare_step(357, 400)
            shown = Console(file=io.StringIO(), width=24, color_system=None)
            shown.print(reporter._progress.make_tasks_table(reporter._progress.tasks))
            assert "357/400" in shown.file.getvalue()  # was "compare ━━╸ 35… eta -:-…"
        finally:
            reporter._live.stop()


def test_the_bar_of_checks_context_and_lrfind_keeps_its_count_whole_at_24_columns():
    from rich.console import Console

    from minitf_repl.render import RichReporter

    console = Console(file=io.StringIO(), width=24, force_terminal=True, color_system=None)
    reporter = RichReporter(console)
    reporter.on_progress("context", 357, 400)
    try:
        shown = Console(file=io.StringIO(), width=24, color_system=None)
        shown.print(reporter._progress.make_tasks_table(reporter._progress.tasks))
        assert "357/400" in shown.file.getvalue()  # was "context ━━╸ 35… eta -:-…"
    finally:
        reporter._live.stop()


def test_the_loss_tables_legend_explains_only_the_columns_it_shows():
    from minitf_repl.render import LossTable

    rows = [{"step": 1025, "train_loss": 0.5061, "val_loss": 0.4109, "accuracy": 0.64, "lr": 1.2e-3,
             "tokens_per_second": 2915.0, "elapsed": 1.1}]
    console = narrow_console(20)
    console.print(LossTable(rows, narrow=True, vocab_size=12))
    shown = " ".join(console.file.getvalue().split())
    assert "0.4109" in shown and "0.5061" not in shown  # the train loss gave way at this width...
    assert "val loss: eval_batches" in shown and "train loss:" not in shown  # ...and its legend with it
