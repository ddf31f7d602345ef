"""A lesson as a script of minitf lines: colon-less commands, --transcript, finding scripts, settings as options."""

import io
import shlex
from pathlib import Path

import pytest
from rich.console import Console

from minitf_repl import repl
from minitf_repl.dispatch import FrontDoor

from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session
from test_hostile import drive
from test_render import plain

ROOT = Path(__file__).resolve().parent.parent


def _piped(session, *lines, transcript=False):
    """run_lines with piped input's consoles (as test_hostile.drive), `transcript` as --transcript gives it."""
    out = Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True)
    err = Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True)
    code = repl.run_lines(list(lines), session, out, err, transcript=transcript)
    return code, out.file.getvalue(), err.file.getvalue()


# --- 1. a script's line that names a command but has no ':' -----------------------------------------------------------
def test_a_script_line_naming_a_command_without_its_colon_is_refused_with_its_line_and_fails():
    session = tiny_session()
    lr = session.train_config.lr
    code, out, err = drive(session, ":tok 12", "train steps=5", "set lr=0.02", "minitf gen 12")
    assert code == 1, err  # was 0: each line generated text, and the exit status said all went well
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, err
    assert errors[0].startswith("error: line 2: ") and errors[0].endswith(
        ":train steps=5 runs it as a command (:gen -- train steps=5 continues it as text)"), errors[0]
    assert errors[1].startswith("error: line 3: ") and ":set lr=0.02 runs it as a command" in errors[1]
    assert errors[2].startswith("error: line 4: ") and ":gen 12 runs it as a command" in errors[2]  # `minitf` cut
    assert session.train_config.lr == lr and session.trainer.step == 0  # none of them ran as anything
    assert "tokens in" not in err  # nor generated text (the :gen speed line)


def test_a_script_line_that_starts_with_a_commands_name_but_is_prose_runs_as_text(monkeypatch, tmp_path):
    """Command names are everyday words: these were refused with a line that failed (`:help me write a poem`: "no
    command or setting named 'me'"; `:train of thought is`: "takes no text"); as before, they are prompts."""
    monkeypatch.setenv("HOME", str(tmp_path))
    lines = ["help me write a poem", "train of thought is", "Exit pursued by a bear", "h e l l o"]
    session = tiny_session(data="pydoc")
    code, out, err = drive(session, *lines)
    assert code == 0, err
    assert "error:" not in err and session.trainer.step == 0
    # the old notice, where its line runs (`:exit`); prose a command refuses is told nothing that fails (s59)
    assert err.count("a line without ':' is text for the model to continue") == 1 and ":exit runs it" in err, err


@pytest.mark.parametrize("line, runs", [
    ("train", ":train"),  # the bare name alone
    ("help train", ":help train"),  # its text one of the command's own words
    ("data sort", ":data sort"),
    ("checks batch init", ":checks batch init"),
    ("compare lr=1e-2 lr=3e-3", ":compare lr=1e-2 lr=3e-3"),
    # one word for a name, a path or a spec, which no list declares: these ran as prompts, nothing saved, exit 0
    ("save mymodel", ":save mymodel"),
    ("report page.html", ":report page.html"),
    ("data sort:8", ":data sort:8"),
    ("compare lr=0.1 vs lr=0.2", ":compare lr=0.1 vs lr=0.2"),  # `vs` parts the contenders
])
def test_a_script_line_made_of_a_commands_own_words_is_refused_with_its_line(line, runs):
    code, _, err = drive(tiny_session(data="pydoc"), line)
    assert code == 1 and f"; {runs} runs it as a command (:gen -- {line} continues it as text)" in err, err


@pytest.mark.parametrize("line", ["  train steps=5", "set lr=0.02 ", "set lr=0.02 eval_every=3 batch_size=4 n=20"])
def test_a_refused_line_the_message_cannot_hold_as_it_is_is_told_to_put_gen_before_it(line):
    """`:gen -- LINE` with the line clipped ("...") or stripped of its outer spaces, pasted, generated from another
    prompt."""
    code, _, err = drive(tiny_session(), line)
    assert code == 1, err
    assert err.rstrip().endswith("(put ':gen -- ' before the line to continue it as text)"), err
    assert "..." not in err


def test_a_shell_line_with_minitfs_options_in_a_script_is_refused_with_the_lines_that_run_it():
    """`minitf --data sort tok 12`, copied from a shell script, ran as text with exit status 0."""
    session = tiny_session(data="pydoc")
    code, _, err = drive(session, "minitf --data sort tok 12", "minitf --set=lr=0.02 --set seed=3 train steps=1",
                         "minitf --debug tok 1", "minitf is a lab")
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 1 and len(errors) == 3, err  # the last is a prompt: `is` names no command
    assert "these lines run it, each on its own: :data sort, then :tok 12" in errors[0], errors[0]
    assert ":set lr=0.02, then :set seed=3, then :train steps=1" in errors[1], errors[1]
    assert "write it as the REPL's lines, each command with its ':'" in errors[2], errors[2]  # no REPL form of --debug
    assert session.trainer.step == 0 and session.data_spec == "pydoc"
    assert drive(session, ":data sort", ":tok 12")[0] == 0  # the lines given run


def test_transcript_where_no_script_is_read_says_so_on_standard_error(monkeypatch, tmp_path):
    """`minitf --transcript tok 3` ignored the switch in silence (and so did the REPL at a terminal)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    result = invoke("--data", "sort", "--transcript", "tok", "12")
    assert result.exit_code == 0, result.output
    assert "--transcript prints the lines of a script piped in" in result.stderr and "minitf>" not in result.stdout


def test_at_the_prompt_a_shell_line_of_a_command_is_told_how_it_runs_after_its_text():
    out = io.StringIO()
    door = FrontDoor(tiny_session(data="pydoc"), Console(file=out, width=200, color_system=None))
    door.run_line("minitf gen hello")  # still the model's text, as `train` typed so is; no word of it was said
    assert "a line without ':' is text for the model to continue; :gen hello runs it as a command" in out.getvalue()


# --- 2. finding and reading a script ----------------------------------------------------------------------------------
def test_transcript_prints_each_script_line_before_its_output():
    code, out, err = _piped(tiny_session(), "# tokens first", ":tok 12", "", ":tok 3", transcript=True)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "minitf> # tokens first" and lines[1] == "minitf> :tok 12", out
    assert out.index("minitf> :tok 3") > out.index("2 tokens")  # after the first :tok's output, before its own
    assert "minitf> \n" not in out  # a blank line runs nothing: not echoed
    code, plain_out, err = _piped(tiny_session(), ":tok 12")
    assert "minitf>" not in plain_out  # off unless asked


def test_the_transcript_switch_reaches_piped_input_from_the_command_line():
    result = invoke("--data", "sort", "--transcript", input=":tok 12\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("minitf> :tok 12\n"), result.stdout


def test_a_file_given_as_the_command_is_told_to_run_as_a_script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lesson.txt").write_text(":tok 12\n", encoding="utf-8")
    line = assert_one_error_line(invoke("--data", "sort", "lesson.txt"), code=2)
    assert "lesson.txt is a file, not a command; to run its lines as a script: minitf --data sort < lesson.txt" \
        in line, line
    assert "minitf < nosuch.txt" not in assert_one_error_line(invoke("nosuch.txt"), code=2)  # no file: as before
    line = assert_one_error_line(invoke("--transcript", "lesson.txt"), code=2)
    assert line.endswith("minitf --transcript < lesson.txt"), line  # not told of the --transcript it has


def test_a_text_file_given_as_the_command_is_told_to_give_it_with_data(tmp_path, monkeypatch):
    """A training text run as a script made every line a prompt: `minitf "my notes.txt" train` meant --data."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "my notes.txt").write_text("# a play\nTo be or not to be\n:that is the question\n", encoding="utf-8")
    line = assert_one_error_line(invoke("my notes.txt", "train", "--steps", "2"), code=2)
    assert line.endswith("to train on its text, give it with --data: minitf --data 'my notes.txt' train --steps 2"), \
        line
    assert "script" not in line


def test_scripts_are_mentioned_in_help_readme_and_the_commands_page():
    said = " ".join(invoke("--help").stdout.split())
    assert "lines piped in run as a script" in said and "minitf --transcript < lesson.txt" in said, said
    assert "minitf --transcript < lesson.txt" in ROOT.joinpath("README.md").read_text(encoding="utf-8")
    page = " ".join(ROOT.joinpath("docs", "commands.md").read_text(encoding="utf-8").split())
    assert "`--transcript` (a script's lines printed before their output" in page
    assert "minitf --transcript < lesson.txt" in page


# --- 3. a setting typed as an option of minitf or of a command --------------------------------------------------------
@pytest.mark.parametrize("typed, fixed", [
    ("--seed 3 tok a", "minitf --set seed=3 tok a"),  # was `--set 3`, which failed again
    ("--threads 1 tok a", "minitf --set threads=1 tok a"),  # was "No such option" alone
    ("train --threads 1", "minitf --set threads=1 train"),  # was "(Possible options: --fresh)"
    ("--lr 0.1 tok a", "minitf --set lr=0.1 tok a"),  # was "(Possible options: --help, --load)"
    ("--dtype float32 tok a", "minitf --set dtype=float32 tok a"),  # was "(Possible options: --data)"
    ("--block-size=32 tok a", "minitf --set max_seq_len=32 tok a"),  # an alias, its value after '='
])
def test_a_setting_typed_as_an_option_is_given_the_set_line_that_runs(typed, fixed):
    line = assert_one_error_line(invoke(*shlex.split(typed)), code=2)
    assert line.endswith(f"is a setting, not an option; a setting goes with --set before the command: {fixed}"), line


def test_the_set_line_suggested_for_a_setting_runs():
    line = assert_one_error_line(invoke("--data", "sort", "--seed", "3", "tok", "12"), code=2)
    fixed = shlex.split(line.rpartition(": ")[2])
    assert fixed[:5] == ["minitf", "--data", "sort", "--set", "seed=3"], fixed
    assert invoke(*fixed[1:]).exit_code == 0


def test_a_setting_that_rebuilds_the_loaded_model_is_given_the_refusal_of_set_not_a_set_line(monkeypatch, tmp_path):
    """`minitf --load autosave --set d_model=64 tok 1`, the line it gave, failed: "would rebuild the model loaded"."""
    monkeypatch.setenv("HOME", str(tmp_path))
    line = assert_one_error_line(invoke("--load", "autosave", "--d-model", "64", "tok", "1"), code=2)
    assert line.endswith("--d-model is a setting, not an option; a setting goes with --set before the command, and "
                         "d_model would rebuild the model loaded from autosave and reset its weights; leave it out to "
                         "use its weights (minitf --load autosave tok 1), or leave out --load to start a new model "
                         "(minitf --set d_model=64 tok 1)"), line
    # a setting that changes no weight still gets its --set line after --load
    line = assert_one_error_line(invoke("--load", "autosave", "--lr", "0.1", "tok", "1"), code=2)
    assert line.endswith("minitf --load autosave --set lr=0.1 tok 1"), line


def test_a_setting_typed_as_an_option_with_a_value_it_cannot_take_says_both():
    line = assert_one_error_line(invoke("--lr", "fast", "tok", "a"), code=2)
    assert "--lr is a setting, not an option; a setting goes with --set before the command (--set lr=X), and lr " \
           "must be a number" in line, line


@pytest.mark.parametrize("line", [":attn 312=", ":step 312=", ":lens 312="])
def test_the_views_of_a_model_that_never_trained_say_so_as_gen_does(line):
    """A one-shot `minitf attn` after `minitf train` reads a new model: :gen said so, these showed random weights in
    silence (a shell script of one-shot commands is where that bites)."""
    session = tiny_session()
    fresh = run(session, line)
    assert fresh.untrained and "this model has not trained yet" in plain(fresh, width=200)
    run(session, ":train steps=1")
    trained = run(session, line)
    assert not trained.untrained and "has not trained yet" not in plain(trained, width=200)


def test_a_lesson_with_a_line_that_lacks_its_colon_is_still_a_script(tmp_path, monkeypatch):
    """One `train steps=5` among a lesson's lines made `minitf lesson.txt` say "to train on its text, give it with
    --data": the file is a script whose one line the script then refuses with its fix."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lesson.txt").write_text("# lesson 1\n:data sort\ntrain steps=5\n:tok 12\n", encoding="utf-8")
    line = assert_one_error_line(invoke("lesson.txt"), code=2)
    assert "to run its lines as a script: minitf < lesson.txt" in line, line


def test_a_shell_line_with_a_setting_as_an_option_in_a_script_gets_its_set_line():
    """`minitf --seed 3 tok a` copied into a script got only "write it as the REPL's lines": the REPL form of minitf's
    own options is read off the registry (a command of the option's name, or a setting), not a table of four."""
    code, _, err = drive(tiny_session(data="pydoc"), "minitf --seed 3 --checkpoint-dir ck tok 1")
    assert code == 1 and "these lines run it, each on its own: :set seed=3, then :set checkpoint_dir=ck, then :tok 1" \
        in err, err
