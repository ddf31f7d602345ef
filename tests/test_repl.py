"""repl.py: the prompt loop (driven through prompt-toolkit's pipe input), the line mode for piped
stdin, Ctrl-C during a command, history fallbacks, completion and the toolbar."""

import io
import os
import re
import signal

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import FileHistory, InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from minitf_repl import commands, dispatch, repl
from minitf_repl.render import RichReporter
from minitf_repl.session import Session

TINY = ":set n_layers=1 d_model=32 n_heads=2 d_ff=64 max_seq_len=32 batch_size=4 eval_every=5"


def ctrl_c_at_step(monkeypatch, step: int, times: int = 1) -> None:
    """The shell's reporter sends this process SIGINT `times` times (a fast double Ctrl-C) after training step `step`
    of a run: Ctrl-C as a user presses it, mid-command."""

    class CtrlC(RichReporter):
        def on_step(self, info):
            super().on_step(info)
            if info.run_step == step:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(dispatch, "RichReporter", CtrlC)


def consoles():
    out = Console(file=io.StringIO(), width=100, color_system=None)
    err = Console(file=io.StringIO(), width=100, color_system=None)
    return out, err


def drive(text: str, session=None, debug=False):
    """Type `text` into the REPL; returns (exit code, stdout text, stderr text, session)."""
    session = session or Session()
    out, err = consoles()
    with create_pipe_input() as inp:
        inp.send_text(text + "\x04")  # Ctrl-D at the end: the loop ends even if a test's :quit fails
        code = repl.run_repl(session, out, err, debug=debug, input=inp, output=DummyOutput(),
                             history=InMemoryHistory())
    return code, out.file.getvalue(), err.file.getvalue(), session


# --- the interactive loop ------------------------------------------------------------------------
def test_repl_session_help_set_data_train_quit():
    code, out, err, session = drive(f":help\r{TINY}\r:data sort\r:train steps=5\r:quit\r:config\r")
    assert code == 0
    assert ":train" in out and "Leave minitf." in out  # :help
    assert "n_layers: 4 -> 1" in out  # :set
    assert "sort 6 digits" in out  # :data
    assert "trained 5 steps" in out and "val loss" in out  # :train
    assert "d_model" not in out.split("trained 5 steps")[1]  # :quit ended the loop before :config
    assert err == ""
    assert session.status().step == 5


def test_repl_plain_line_is_a_gen_prompt_and_ctrl_d_exits():
    code, out, err, session = drive(f"{TINY}\r:data sort\r:gen n=6 seed=1\r314\r\x04")
    assert code == 0 and err == ""
    assert len(re.findall(r"(?<!\d)6 tokens in", out)) == 1  # not "16 tokens in": the plain line's may end early
    # The plain line: gen with the session's n=200, or until a sort answer ends.
    assert "314" in out and ("200 tokens in" in out or "stopped at the end of the answer" in out)


def test_repl_errors_are_one_line_and_the_session_goes_on():
    code, out, err, _ = drive(":trian\r:train steps=abc\r:gen \"unclosed\r:config\r:q\r")
    assert code == 0
    lines = err.splitlines()
    assert lines == [
        "error: unknown command :trian; did you mean :train? (:help lists commands)",
        "error: steps must be a whole number, got 'abc'",
        lines[2],
    ]
    assert lines[2].startswith("error: unclosed quote")
    assert "Traceback" not in err
    assert "d_model" in out  # :config still ran


def test_internal_error_is_one_line_unless_debug(monkeypatch):
    real = dispatch.run_command

    def broken(session, command, args, reporter):  # the front door passes the Command it parsed
        if command.name == "config":
            raise RuntimeError("boom")
        return real(session, command, args, reporter)

    monkeypatch.setattr(dispatch, "run_command", broken)
    code, out, err, _ = drive(":config\r:q\r")
    assert err == "internal error: RuntimeError: boom (run with --debug for the traceback)\n"
    code, out, err, _ = drive(":config\r:q\r", debug=True)
    assert "Traceback (most recent call last)" in err and "RuntimeError: boom" in err


def test_ctrl_c_stops_training_and_keeps_the_model(monkeypatch):
    """Two fast SIGINTs during :train: it stops after the current step, no traceback, model kept."""
    ctrl_c_at_step(monkeypatch, 3, times=2)  # a second, fast Ctrl-C
    before = signal.getsignal(signal.SIGINT)
    session = Session()
    out, err = consoles()
    code = repl.run_lines([TINY, ":data sort", ":train steps=100000"], session, out, err)
    text = out.file.getvalue()
    assert code == 130, err.file.getvalue()  # piped input ends at a Ctrl-C (tests/test_sweep_n.py)
    assert err.file.getvalue().count("stopping after this step...") == 1  # a notice: on stderr, out being no terminal
    # piped lines end at the stop: the line that goes on is the shell's (49th session: ":train continues" was said)
    said = " ".join(text.split())
    assert f"stopped at step 3 of 100,000: minitf --checkpoint-dir {session.checkpoint_dir} --load autosave train " \
           "continues" in said, said
    assert session.has_model and session.status().step == 3
    assert signal.getsignal(signal.SIGINT) is before  # the previous handler is back
    # :train continues the same run
    monkeypatch.setattr(dispatch, "RichReporter", RichReporter)
    code = repl.run_lines([":train steps=2"], session, out, err)
    assert code == 0 and session.status().step == 5


def test_ctrl_c_stops_generation_after_the_current_token(monkeypatch):
    class InterruptingHooks(RichReporter):
        def on_token(self, text):
            super().on_token(text)
            if len(self.tokens_seen) == 2:
                os.kill(os.getpid(), signal.SIGINT)
            self.tokens_seen.append(text)

    InterruptingHooks.tokens_seen = []
    monkeypatch.setattr(dispatch, "RichReporter", InterruptingHooks)
    out, err = consoles()
    code = repl.run_lines([TINY, ":data sort", ":gen n=100 seed=0 12"], Session(), out, err)
    assert code == 130, err.file.getvalue()
    assert "3 tokens in" in err.file.getvalue() and "(stopped)" in err.file.getvalue()  # notices: on stderr


def test_train_autosaves_then_ls_save_load(checkpoint_dir):
    out, err = consoles()
    session = Session()
    code = repl.run_lines([TINY, ":data sort", ":train steps=3", ":ls", ":save run1", ":train steps=2",
                           ":load run1", ":ls"], session, out, err)
    text = out.file.getvalue()
    assert code == 0, err.file.getvalue()
    assert "saved checkpoint autosave" in text
    assert "saved checkpoint run1 (step 3" in text
    assert "loaded run1: step 3, data sort" in text
    assert text.count("run1") >= 3 and str(checkpoint_dir) in text
    assert session.status().step == 3  # back to the saved step
    assert (checkpoint_dir / "run1").is_dir()


def test_an_interruptible_command_gets_keyboard_interrupt():
    from minitf_repl.commands import REGISTRY

    hooks = RichReporter(consoles()[0])
    with pytest.raises(KeyboardInterrupt):
        with dispatch.stop_on_sigint(hooks, REGISTRY["save"]):
            os.kill(os.getpid(), signal.SIGINT)
    assert not hooks.should_stop()


def test_stop_on_sigint_sets_the_flag_instead_of_raising():
    # A test process started in the background (`pytest &`) inherits SIGINT ignored; this test is about
    # Python's default handler, so it sets that one, and puts the inherited one back afterwards.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_stop_on_sigint()
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_stop_on_sigint():
    hooks = RichReporter(consoles()[0])
    with dispatch.stop_on_sigint(hooks):
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    assert hooks.should_stop()
    with pytest.raises(KeyboardInterrupt):  # outside a command, Ctrl-C is Python's again
        os.kill(os.getpid(), signal.SIGINT)


# --- line mode (stdin is not a terminal) ----------------------------------------------------------
def test_run_lines_success_and_plain_text_has_no_escape_codes():
    out, err = consoles()
    code = repl.run_lines([TINY + "\n", ":data sort\n", ":train steps=3\n", ":gen n=5\n", "\n", "123\n"],
                          Session(), out, err)
    text = out.file.getvalue()
    assert code == 0, err.file.getvalue()
    assert "trained 3 steps" in text and "5 tokens in" in err.file.getvalue()  # its speed line: a notice
    assert "\x1b[" not in text


def test_run_lines_exit_status_1_after_any_failure_and_goes_on():
    out, err = consoles()
    code = repl.run_lines([":nope", ":config", ":quit", ":config"], Session(), out, err)
    assert code == 1
    assert err.file.getvalue().startswith("error: line 1: unknown command :nope")
    assert out.file.getvalue().count("d_model") == 1  # ran after the error, not after :quit


def test_non_utf8_stdin_is_read_as_bytes_then_reported_as_not_utf8():
    lines = list(repl.stdin_lines(io.BytesIO(b":data sort\n\xff\xfe12\n")))
    assert lines == [":data sort\n", "\udcff\udcfe12\n"]  # Python's stand-ins for the bytes, not U+FFFD
    out, err = consoles()
    code = repl.run_lines([TINY] + lines, Session(), out, err)
    assert code == 1
    assert "not UTF-8 (\\xff \\xfe); convert: iconv -f latin1 -t utf-8 FILE > FILE-utf8.txt" in err.file.getvalue()
    assert err.file.getvalue().count("\n") == 1


# --- history -------------------------------------------------------------------------------------
def test_history_path_env_and_default(monkeypatch, tmp_path):
    monkeypatch.setenv("MINITF_HISTORY", str(tmp_path / "h.txt"))
    assert repl.history_path() == tmp_path / "h.txt"
    monkeypatch.delenv("MINITF_HISTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert repl.history_path() == tmp_path / "state" / "minitf" / "history"  # state, not data


def test_history_file_is_created_and_written(tmp_path):
    warnings = []
    path = tmp_path / "new" / "dir" / "history"
    history = repl.make_history(path, warnings.append)
    assert isinstance(history, FileHistory) and warnings == []
    history.append_string(":train steps=5")
    assert "+:train steps=5" in path.read_text()
    assert list(repl.make_history(path, warnings.append).load_history_strings()) == [":train steps=5"]


@pytest.mark.parametrize("kind", ["directory", "under_a_file"])
def test_unusable_history_path_warns_once_and_uses_memory(tmp_path, kind):
    if kind == "directory":
        path = tmp_path
    else:
        regular = tmp_path / "file"
        regular.write_text("x")
        path = regular / "history"  # like /etc/passwd/x: a regular file cannot hold a directory
    warnings = []
    history = repl.make_history(path, warnings.append)
    assert isinstance(history, InMemoryHistory)
    assert len(warnings) == 1 and warnings[0].startswith("warning: cannot use history file")


def test_corrupt_history_file_loads(tmp_path):
    path = tmp_path / "history"
    path.write_bytes(b"\x00\xff\xfe garbage\n+:gen n=5\n\n# date\n+\xff\xfe\n")
    history = repl.make_history(path, pytest.fail)
    assert list(history.load_history_strings()) == ["\ufffd\ufffd", ":gen n=5"]


def test_history_write_failure_later_is_one_warning(tmp_path):
    folder = tmp_path / "gone"
    warnings = []
    history = repl.make_history(folder / "history", warnings.append)
    (folder / "history").unlink()
    folder.rmdir()
    history.append_string(":help")
    history.append_string(":help")
    assert len(warnings) == 1 and "cannot write history" in warnings[0]
    assert history.get_strings() == [":help", ":help"]  # kept in memory


def test_repl_with_a_directory_as_history_still_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("MINITF_HISTORY", str(tmp_path))
    out, err = consoles()
    with create_pipe_input() as inp:
        inp.send_text(":q\r")
        code = repl.run_repl(Session(), out, err, input=inp, output=DummyOutput())
    assert code == 0
    assert err.file.getvalue().count("warning: cannot use history file") == 1


# --- completion and toolbar ------------------------------------------------------------------------
def complete(text: str) -> list[str]:
    completer = repl.CommandCompleter()
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_completes_command_names_with_the_colon():
    assert complete(":tr") == [":train"]
    assert set(complete(":")) >= {":help", ":quit", ":q", ":train", ":gen", ":shapes", ":set", ":params"}
    assert complete("hello") == []  # plain text is a prompt: nothing to complete


def test_completes_option_keys_and_values(monkeypatch):
    from minitf_repl.commands import REGISTRY
    from minitf_repl.core import device

    monkeypatch.setattr(device, "_cuda_count", lambda: 1)  # a machine with one GPU: Tab offers what it has (sweep ao)

    assert complete(":train ") == [f"{p.name}=" for p in REGISTRY["train"].params]
    assert complete(":train ")[:3] == ["steps=", "lr=", "batch_size="]
    assert complete(":train st") == ["steps="]
    assert "steps=" not in complete(":train steps=5 ")  # already given
    assert complete(":gen cache=") == ["on", "off"]
    assert complete(":set activation=r") == ["relu", "relu2"]
    assert "n_layers=" in complete(":set n_") and complete(":set top_") == ["top_k=", "top_p="]
    assert complete(":set top_k=n") == ["none"]
    assert complete(":set tokenizer=bp") == ["bpe:512", "bpe:1024", "bpe:4096"]  # forms of a value with no fixed choices
    assert "sort" in complete(":data s") and complete(":device c") == ["cpu", "cuda"]
    assert complete(":nosuch ") == []


def test_an_options_other_spelling_completes_to_its_name():
    completer = repl.CommandCompleter()
    [block] = completer.get_completions(Document(":set block"), CompleteEvent(completion_requested=True))
    assert block.text == "max_seq_len=" and "block_size= -> max_seq_len=" in block.display_text
    assert complete(":train max_i") == ["steps="] and complete(":gen max_new") == ["n="]
    assert "steps=" not in complete(":train max_iters=5 ")  # given under its other name
    assert "d_model=" in complete(":set n_")  # n_embd
    assert complete(":help tr") == ["train"] and complete(":help l") == ["lens", "ln", "load", "lrfind", "ls", "lr"]  # settings too


def test_completes_checkpoint_names_after_load(tmp_path):
    for name in ("run1", "autosave"):  # a checkpoint is a folder with its manifest
        (tmp_path / name).mkdir()
        (tmp_path / name / "checkpoint.json").write_text("{}")
    (tmp_path / "notes.txt").write_text("x")
    completer = repl.CommandCompleter(session=Session(checkpoint_dir=tmp_path))
    found = [c.text for c in completer.get_completions(Document(":load "), CompleteEvent(completion_requested=True))]
    assert found == ["autosave", "run1"]


def test_toolbar_before_and_after_a_model():
    session = Session(data_spec="sort")
    assert repl.toolbar_text(session) == " device auto | no model yet | step 0 | loss - | data sort "
    out, err = consoles()
    repl.run_lines([TINY, ":train steps=2"], session, out, err)
    text = repl.toolbar_text(session)
    assert "device cpu" in text and " params" in text and "step 2" in text and "loss " in text
    assert "no model yet" not in text


def test_completed_data_names_are_the_cores():
    from minitf_repl.core.data import CORPORA, TASKS

    assert commands.DATA_NAMES == CORPORA + TASKS  # repl.py cannot import core.data (torch) to share them


def test_toolbar_names_each_loss_and_shortens_a_data_path(tmp_path):
    corpus = tmp_path / "some" / "deep" / "folder" / "fox.txt"
    corpus.parent.mkdir(parents=True)
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    session = Session(data_spec=str(corpus))
    out, err = consoles()
    repl.run_lines([TINY, ":train steps=4 eval_every=2"], session, out, err)
    st = session.status()
    val = next(h["val_loss"] for h in reversed(session.trainer.history) if h["val_loss"] is not None)
    assert st.val_loss == val
    text = repl.toolbar_text(session)
    assert f"train loss {st.last_loss:.4f} | val loss {val:.4f}" in text  # like with like: each one named
    assert text.endswith("| data …/fox.txt ") and "deep" not in text
    narrow = repl.toolbar_text(session, width=len(text) - 1)
    assert "train loss" not in narrow and f"val loss {val:.4f}" in narrow and len(narrow) < len(text)
    narrower = repl.toolbar_text(session, width=len(narrow) - 1)
    assert f"val {val:.4f}" in narrower and narrower.endswith("| …/fox.txt ") and len(narrower) < len(narrow)
