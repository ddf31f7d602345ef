"""What a user's-eye sweep of the REPL as typed into a terminal (Tab, history, typos, narrow terminals, start-up
options) found: each test failed before its fix.

Tab after a checkpoint's name (`:load run1 <TAB>`), a data name or a command's name after `:help` offered a second
one, which made a line the command then refused ("'run1 run1' is not a valid checkpoint name"). Tab after `:load `
offered every folder of the checkpoint directory: one renamed by hand ("my model") completed to a line :load refused,
and a folder that holds no checkpoint to one it cannot load.

`:gen -n` said "--n needs a value, e.g. --n 10", an option the user never typed. `:set lr =0.1` said to type
`:set lr==0.1`, which is refused too, and `:set lr= 0.1` "lr must be a number, got ''". `:set temperature=0,5` (a
decimal comma) and `:train steps=1,000` said only "must be a number". `:set lr=1e-400` said "lr must be positive,
got 0.0" and `temperature=1e309` "got inf": not what was typed.

At 40 columns the colour scale under `:gen show=probs` (and :attn, :patch, :checks) wrapped at one of its cells,
which are spaces: half the scale on one line, the rest and its "1.00" on the next. `:params` cut its words
("Embeddi…", "LayerNo…") and squeezed the notes of its costs to a word a line ("matmul…", "traina…"). The worked
tables (:qkv, :grad, :mistakes, :ffn, :resid, :score, :step and more) cut their numbers to "0.…" where even their
narrowest form did not fit: each row is now a record, a line per column. `:help` laid each summary in a column 16
wide beside the names, two words a line (338 lines). The toolbar ran a long data file's name off the screen's edge
("…/a_rather_long_data_"), its end (the part that tells files apart) unseen.

`minitf --load NAME` opened the REPL without a word of what it loaded (which run, step, data; a stopped run's steps
left): the greeting alone, "Try :train", as for a fresh model. `minitf --data notes.txt` with no such file opened
the REPL without a word: the first :train, after the settings had been typed, said it. A checkpoint folder that
could not be used said "choose another checkpoint directory" with no word of how: the REPL has no setting for it,
only minitf's start has. With no checkpoint folder chosen, messages said "no checkpoints in checkpoints yet": which
folder (it depends on where minitf was started) went unsaid. `:ls` in a folder below a file said ":save NAME writes
one", and the save then failed.

A script pasted into the prompt ran its `#` comment lines as prompts ("11 characters not in the vocabulary"), where
the same lines piped in are comments. Ctrl-C pressed with the Enter of `:train steps=2000` (read in the same chunk
while torch loaded) did not stop it: it was kept as a key for the next prompt, and cleared that instead. Ctrl-C while
"loading torch..." was echoed: "^Cerror: interrupted".
"""

import io
import re

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from minitf_repl import dispatch, repl
from minitf_repl.session import Session
from test_repl import consoles
from test_commands import run, tiny_session


def complete(text: str, session=None) -> list[str]:
    completer = repl.CommandCompleter(session=session)
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


# --- Tab after a one-word text ----------------------------------------------------------------------------------
def test_tab_after_a_checkpoint_name_offers_no_second_name(tmp_path):
    for name in ("run1", "run2"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "checkpoint.json").write_text("{}")
    session = Session(checkpoint_dir=tmp_path)
    assert complete(":load ", session) == ["run1", "run2"]
    assert complete(":load run1 ", session) == [] and complete(":load run1 r", session) == []
    assert complete(":save run1 ", session) == []
    assert complete(":data sort ") == [] and complete(":quantize int8 ") == []
    assert "train" not in complete(":help set ") and "lr=" in complete(":help set ")  # set's keys, which :help explains
    assert complete(":device cpu ") == []


def test_tab_after_one_of_several_words_offers_the_others():
    assert complete(":checks batch i") == ["init"]
    after = complete(":checks batch ")
    assert "batch" not in after and "init" in after and "steps=" in after
    assert complete(":checks steps=5 b") == ["batch", "blind"]  # an option is no word of the text
    assert "mask" not in complete(":ablate mask ") and "positions" in complete(":ablate mask ")


# --- typos and near misses ------------------------------------------------------------------------------------
def test_a_short_option_without_its_value_is_named_as_typed():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.core.errors import UserError
    from minitf_repl.parsing import parse_line

    for line, said in ((":gen -n", "-n needs a value, e.g. -n 10"), (":gen --n", "--n needs a value, e.g. --n 10")):
        try:
            parse_line(line, REGISTRY)
        except UserError as e:
            assert str(e) == said
        else:
            raise AssertionError(f"{line} parsed")


def test_a_number_past_what_a_float_holds_is_refused_as_typed():
    from minitf_repl.commands import REGISTRY
    from minitf_repl.core.errors import UserError
    from minitf_repl.parsing import parse_line

    def said(line: str) -> str:
        try:
            parse_line(line, REGISTRY)
        except UserError as e:
            return str(e)
        raise AssertionError(f"{line} parsed")

    assert said(":set lr=1e-400") == "lr is too small to tell from 0 ('1e-400'); use a larger value"  # was "got 0.0"
    assert said(":gen temperature=1e309") == "temperature is far too large ('1e309'); use a smaller value"  # "got inf"
    assert said(":set lr=0") == "lr must be positive, got 0" and "finite" in said(":set temperature=inf")


# --- a narrow terminal ------------------------------------------------------------------------------------------
def colour_console(width: int):
    from rich.console import Console

    return Console(file=io.StringIO(), width=width, color_system="truecolor", force_terminal=True, record=True)


def test_the_colour_scale_of_gen_show_probs_stays_whole_at_40_columns():
    from minitf_repl.render import render

    session = tiny_session("pydoc")
    result = run(session, ":gen the n=20 gen_seed=1 show=probs")
    for width in (100, 40):
        console = colour_console(width)
        render(result, console)
        lines = console.export_text().splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("probability when picked"))
        # 0, twenty coloured cells, 1.00: on one line, nothing broken off (its label, which names the temperature
        # since s59, on the same line where it fits, else on lines of its own before it)
        scale = next(line for line in lines[at:at + 4] if "1.00" in line)
        assert re.fullmatch(r"(probability when picked \(at temperature 0\.8\): )?0 {22}1\.00", scale), lines[at:at + 4]
        assert width == 40 or scale is lines[at]


def test_params_at_40_columns_cuts_no_word():
    from rich.console import Console

    from minitf_repl.render import render

    result = run(tiny_session("pydoc"), ":params")
    console = Console(file=io.StringIO(), width=40, color_system=None)
    render(result, console)
    text = console.file.getvalue()
    assert "…" not in text and max(map(len, text.splitlines())) <= 40  # was "Embeddi…", "matmul…", "traina…"
    assert "lm_head (tied)" in text and "one per trainable parameter" in text and "6N rule" in text
    wide = Console(file=io.StringIO(), width=120, color_system=None)
    render(result, wide)
    assert "Embedding" in wide.file.getvalue() and "(tied to token_embedding)" in wide.file.getvalue()


@pytest.mark.parametrize("line", [":qkv 1234= at=3", ":grad 1234=1234", ":mistakes n=20", ":ffn 1234= k=3", ":step 12",
                                  ":score 1234=1234", ":quantize int8"])
def test_worked_tables_at_40_columns_cut_no_number(line):
    from rich.console import Console

    from minitf_repl.render import render

    session = tiny_session()
    run(session, ":train")
    result = run(session, line)
    narrow = Console(file=io.StringIO(), width=40, color_system=None)
    render(result, narrow)
    text = narrow.file.getvalue()
    assert not re.search(r"\d\.…|\w…", text), text  # the numbers were cut to "0.…", the headers to "s_…"
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 40


def test_the_toolbar_at_40_columns_shows_a_long_data_names_end_marked_as_cut():
    session = Session(data_spec="/tmp/notes/a_rather_long_data_file_name_for_testing.txt")
    text = repl.toolbar_text(session, 40)
    assert len(text) <= 40 and text.endswith("…ame_for_testing.txt ")  # was "…/a_rather_long_data_", edge-cut
    assert repl.toolbar_text(session, 100).endswith("| data …/a_rather_long_data_file_name_for_testing.txt ")


# --- start-up options ---------------------------------------------------------------------------------------------
def test_the_repl_opened_with_load_says_what_it_loaded(checkpoint_dir):
    from minitf_repl import cli

    s = tiny_session()
    run(s, ":train steps=10")
    run(s, ":save")  # the run stopped at step 10 of its 10: saved as "autosave" and as the last name
    fresh = Session(data_spec="pydoc", device_name="cpu")
    loaded = cli.load_checkpoint(fresh, "autosave", None)
    out, err = consoles()
    with create_pipe_input() as inp:
        inp.send_text(":q\r")
        code = repl.run_repl(fresh, out, err, input=inp, output=DummyOutput(), history=InMemoryHistory(),
                             loaded=loaded)
    text = out.file.getvalue()
    assert code == 0 and "loaded autosave: step 10, data sort:4" in text  # nothing said which run the prompt had
    assert text.index("loaded autosave") > text.index("minitf ")  # under the greeting


def test_tab_after_load_offers_only_checkpoints_load_takes(tmp_path):
    from minitf_repl.commands import base
    from minitf_repl.core.checkpoint import layout

    for name in ("run1", "my model", "exported", ".staging"):
        (tmp_path / name).mkdir()
    for name in ("run1", "my model", ".staging"):
        (tmp_path / name / "checkpoint.json").write_text("{}")
    assert complete(":load ", Session(checkpoint_dir=tmp_path)) == ["run1"]  # was also "my model" and "exported"
    assert base.CHECKPOINT_NAME.pattern == layout.NAME.pattern and base.MANIFEST == layout.MANIFEST


def test_an_unusable_checkpoint_folder_says_how_to_choose_another(tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("x")
    out, err = consoles()
    repl.run_lines([":ls"], Session(checkpoint_dir=blocker), out, err)
    # "choose another checkpoint directory" alone left the user looking; the REPL now names its setting for it
    said = " ".join(err.file.getvalue().split())
    assert said.endswith("is a file, not a directory; choose another folder: :set checkpoint_dir=DIR")


# --- pasted text ------------------------------------------------------------------------------------------------
def test_a_pasted_scripts_comment_lines_are_comments_as_when_piped():
    session = Session(data_spec="sort")
    out, err = consoles()
    door = dispatch.FrontDoor(session, out, err, dispatch.FrontEnd(live=False))
    repl.run_pasted(door, ":set temperature=0.5\n# then sample greedily\n:set top_k=3\n", err)
    assert err.file.getvalue() == ""  # the comment ran as a prompt: "not in the vocabulary"
    assert session.gen_config.temperature == 0.5 and session.gen_config.top_k == 3
    with create_pipe_input() as inp:  # the same paste, as the terminal brings it (bracketed paste), then Ctrl-D
        inp.send_text("\x1b[200~:set temperature=0.25\r# then\r:set top_k=2\x1b[201~\r\x04")
        out, err = consoles()
        repl.run_repl(session, out, err, input=inp, output=DummyOutput(), history=InMemoryHistory())
    assert err.file.getvalue() == "" and session.gen_config.top_k == 2


def test_a_single_line_starting_with_hash_is_a_comment_too():
    # (it was a prompt; a terminal without bracketed paste brings a pasted script a line at a time: test_sweep_af)
    session = Session(data_spec="sort")
    out, err = consoles()
    door = dispatch.FrontDoor(session, out, err, dispatch.FrontEnd(live=False))
    repl.run_pasted(door, "# x\n", err)
    assert err.file.getvalue() == "" and out.file.getvalue() == ""


def test_the_repl_says_at_once_that_its_data_file_does_not_exist(tmp_path):
    def start(spec: str) -> str:
        out, err = consoles()
        with create_pipe_input() as inp:
            inp.send_text(":q\r")
            repl.run_repl(Session(data_spec=spec), out, err, input=inp, output=DummyOutput(), history=InMemoryHistory())
        return err.file.getvalue()

    said = " ".join(start(str(tmp_path / "notes.txt")).split())  # a typo in --data: said at the first :train
    assert said.startswith("warning: no such file: ") and "notes.txt; :data NAME|PATH picks other data" in said
    (tmp_path / "notes.txt").write_text("some text")
    assert start(str(tmp_path / "notes.txt")) == "" and start("sort:4") == "" and start("shakespeare") == ""


# --- Ctrl-C -------------------------------------------------------------------------------------------------------
def test_ctrl_c_pressed_with_enter_stops_the_command_before_it_starts():
    from test_repl import drive

    # Enter and Ctrl-C read in one chunk (a busy machine, torch loading): the Ctrl-C was a key kept for the next
    # prompt, which it cleared, and the command ran to its end
    code, out, err, session = drive(":set lr=0.5\r\x03:set n=7\r")
    assert code == 0 and err == "error: interrupted: Ctrl-C came with Enter, so the line did not run\n"
    assert session.train_config.lr != 0.5 and session.gen_config.n == 7  # the next line runs as typed
    code, out, err, session = drive(":set lr=0.5\rhel\x03:set n=7\r")  # Ctrl-C while typing the next line: clears it
    assert err == "" and session.train_config.lr == 0.5 and session.gen_config.n == 7


def said_by(line: str) -> str:
    from minitf_repl.core.errors import UserError

    try:
        run(Session(), line)
    except UserError as e:
        return str(e)
    raise AssertionError(f"{line} ran")


def test_a_space_beside_the_equals_sign_is_fixed_to_the_line_that_works():
    assert said_by(":set lr =0.1") == "a setting and its value go as one word: :set lr=0.1"  # was ":set lr==0.1"
    assert said_by(":set lr = 0.1") == "a setting and its value go as one word: :set lr=0.1"
    # was "lr must be a number, got ''"
    assert said_by(":set lr= 0.1") == "an option and its value go as one word, with no space after '=': :set lr=0.1"
    assert said_by(":train steps= 5").endswith(":train steps=5")
    assert said_by(":set lr= abc") == "lr needs a value, e.g. lr=0.01"  # no value it takes after the space: its own


def test_a_comma_in_a_number_is_told_how_to_write_it():
    assert said_by(":set temperature=0,5") == "temperature must be a number, got '0,5'; with a decimal point: 0.5"
    assert said_by(":train steps=1,000") == "steps must be a whole number, got '1,000'; write it without commas: " \
                                            "1000, 1_000 or 1k"
    assert said_by(":set temperature=1,000").endswith("without commas: 1000, or with a decimal point: 1.000")
    assert said_by(":train steps=1,5") == "steps must be a whole number, got '1,5'"


def test_the_default_checkpoint_folder_is_named_in_full(monkeypatch, tmp_path):
    monkeypatch.delenv("MINITF_CHECKPOINT_DIR")
    monkeypatch.chdir(tmp_path)
    said = said_by(":load nope")  # was "no checkpoint named 'nope' in checkpoints (there are none yet)"
    assert said.startswith(f"no checkpoint named 'nope' in {tmp_path / 'checkpoints'} ")


def test_help_at_40_columns_puts_each_summary_under_its_names():
    from rich.console import Console

    from minitf_repl.render import render

    result = run(Session(), ":help")
    narrow = Console(file=io.StringIO(), width=40, color_system=None)
    render(result, narrow)
    text = narrow.file.getvalue()
    # was a summary column 16 wide beside the names: "Train the" / "model:" / "continue a" ..., 338 lines
    assert "  :train\n    Train the model: continue a stopped\n" in text and len(text.splitlines()) < 250
    wide = Console(file=io.StringIO(), width=100, color_system=None)
    render(result, wide)
    assert re.search(r"  :train +Train the model: continue a stopped run, or start a new run of steps\.",
                     wide.file.getvalue())


def test_the_wait_for_torch_echoes_no_ctrl_c(monkeypatch):
    import contextlib

    quiet = []

    @contextlib.contextmanager
    def recording_quiet_tty(stream=None):
        quiet.append(True)
        try:
            yield
        finally:
            quiet.pop()

    waited_quietly = []
    monkeypatch.setattr(dispatch, "quiet_tty", recording_quiet_tty)
    monkeypatch.setattr(dispatch, "wait_for_preload", lambda console: waited_quietly.append(bool(quiet)))
    out, err = consoles()
    dispatch.FrontDoor(tiny_session(), out, err, dispatch.FrontEnd(live=False)).run_line(":gen 12 n=1")
    assert waited_quietly == [True]  # the terminal echoed "^C" there: "^Cerror: interrupted"


def test_ls_in_a_folder_a_file_blocks_says_so_rather_than_that_a_save_writes_one(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    out, err = consoles()
    repl.run_lines([":ls"], Session(checkpoint_dir=tmp_path / "notes.txt" / "ck"), out, err)
    said = " ".join(err.file.getvalue().split())  # was "no checkpoints in .../notes.txt/ck yet; :save NAME writes one"
    blocked = f"{tmp_path / 'notes.txt'} is a file, not a directory"
    assert said == f"error: line 1: {blocked}; choose another folder: :set checkpoint_dir=DIR"
    assert out.file.getvalue() == ""
    out, err = consoles()
    repl.run_lines([":ls"], Session(checkpoint_dir=tmp_path / "new" / "ck"), out, err)
    assert "no checkpoints in" in out.file.getvalue() and err.file.getvalue() == ""  # a save creates it: as before
