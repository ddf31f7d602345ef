"""Malformed REPL lines: chained commands, unclosed quotes, `?` and -h, curly quotes, keys given twice, pastes."""

import io

import pytest
from rich.console import Console

from minitf_repl import repl
from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import FAILED, FrontDoor
from minitf_repl.parsing import parse_line
from test_commands import run, tiny_session


def door_says(line: str) -> str:
    """The error a typed line gets at the REPL, its words on one line."""
    out = io.StringIO()
    console = Console(file=out, width=300)
    assert FrontDoor(tiny_session(), console, console).run_line(line) == FAILED
    return " ".join(out.getvalue().split())


def refusal(line: str) -> str:
    with pytest.raises(UserError) as caught:
        parse_line(line, REGISTRY)
    return str(caught.value)


# --- 1: one command a line ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("line, first", [
    (":set lr=0.02 ; :set n_layers=2", ":set lr=0.02"),  # was "... not both: :set ; :set shows"
    (":set lr=0.02 | :gen", ":set lr=0.02"),
    (":set lr=0.02; n_layers=2", ":set lr=0.02"),  # was "lr must be a number, got '0.02;'"
    (":train steps=5; :gen", ":train steps=5"),  # was "got '5;'"
    (":ls; :config", ":ls"),  # was "unknown command :ls;; did you mean :ls?"
    (":train steps=5 && :gen", ":train steps=5"),  # was ":train takes no text; got '&& :gen'"
])
def test_chained_commands_are_refused_with_the_first_as_typed(line, first):
    message = refusal(line)
    assert message.startswith("one command a line:") and message.endswith(f"first {first}"), message
    parse_line(first, REGISTRY)  # the line it gives runs as pasted


def test_a_continuation_backslash_and_a_last_semicolon():
    assert refusal(":set d_model=64 \\") == ("one command a line: a \\ at its end continues none; type the command "
                                             "on one line: :set d_model=64")  # was ":set \\ shows"
    assert refusal(":set lr=0.02;") == "one command a line, and ; ends none: :set lr=0.02"


def test_a_chain_in_a_text_stays_text_and_in_an_option_of_it_is_said():
    assert parse_line(":gen a; b", REGISTRY)[1]["prompt"] == "a; b"
    assert parse_line(":tok x | y", REGISTRY)[1]["text"] == "x | y"
    assert refusal(":gen n=5; :train").startswith("n=5; ends with ;: one command a line")  # was "got '5;'"


def test_set_with_a_word_that_shows_nothing_says_that_word():
    # it said ":set bogus shows, :set lr=0.02 changes": the first line refused as pasted
    with pytest.raises(UserError) as caught:
        run(tiny_session(), ":set lr=0.02 lrr n_layers")
    assert str(caught.value).endswith("not both: :set n_layers shows, :set lr=0.02 changes ('lrr' names no "
                                      "setting; did you mean lr?)"), caught.value


# --- 3: an unclosed quote in a text ----------------------------------------------------------------------------------


@pytest.mark.parametrize("line, kept, text", [
    (':gen say "hi', ':gen -- say "hi', 'say "hi'),
    (':tok he said "hi', ':tok -- he said "hi', 'he said "hi'),
    (":gen 'tis n=5", ":gen n=5 -- 'tis", "'tis"),
])
def test_an_unclosed_quote_is_text_after_dashes_and_the_error_says_so(line, kept, text):
    message = refusal(line)
    assert message.endswith(f"keep it as text after --: {kept}"), message
    command, args = parse_line(kept, REGISTRY)  # was "unclosed quote" again
    assert args[command.positional.name] == text


# --- 4: a generation setting given to :train -----------------------------------------------------------------------


def test_a_generation_setting_given_to_train_is_gens_and_steps_is_near():
    # it said ":set n=5, then :train", which changed nothing of the run
    assert refusal(":train n=5") == ("n is a generation setting, :gen's (:gen n=5), not one of :train; did you mean "
                                     ":train steps=5? (steps: length of a new run)")
    message = refusal(":train temperature=0.5 lr=0.1")
    assert message.endswith("whose steps= is the length of a new run: e.g. :train steps=10 lr=0.1"), message
    assert refusal(":train n_layers=2").startswith("n_layers is a setting, not an option of :train: :set n_layers=2")


# --- 5: `?` and -h ask for a command's help ------------------------------------------------------------------------


@pytest.mark.parametrize("line, about", [
    (":train?", "train"),  # was "unknown command :train?; did you mean :train?"
    (":help train?", "train"),  # was "did you mean :train?", which trains
    (":help lr?", "lr"),
    (":train -h", "train"),  # was ":train takes no text; got '-h'"
    (":gen -h", "gen"),  # generated from "-h"
])
def test_a_question_mark_or_h_shows_the_help(line, about):
    command, args = parse_line(line, REGISTRY)
    assert command.about_commands and args[command.positional.name] == about


def test_h_after_dashes_is_text():
    command, args = parse_line(":gen -- -h", REGISTRY)
    assert command.name == "gen" and args["prompt"] == "-h"


# --- 8: curly quotes ---------------------------------------------------------------------------------------------


def test_curly_quotes_around_a_refused_value_are_said():
    assert door_says(":set lr=“0.06”").endswith('curly quotes (“ ”) are no quotes here: type straight ones, '
                                                 ':set lr="0.06"')
    assert door_says(":save “best”").endswith(':save "best"')
    assert "curly" not in door_says(":gen “hello”")  # a prompt's are its text


# --- 9: keys in any script ---------------------------------------------------------------------------------------


def test_a_key_with_an_accent_is_split_at_its_equals_sign():
    assert "did you mean lr?" in refusal(":set lér=0.1")  # was "unknown option 'lér=0.1'"
    assert "did you mean temperature?" in refusal(":gen températur=0.5 n=3")  # was "'é' not in the vocabulary"


# --- 10: what the user typed, kept ---------------------------------------------------------------------------------


def test_a_wrong_command_keeps_what_was_typed():
    assert refusal(":config --set lr=0.1").endswith("but a command: :set lr=0.1")  # was ": :set"
    assert "lr is a setting: :set lr shows it" in refusal(":config lr")  # was "type :config alone" alone
    assert refusal(":load --name x") == "name is no option of :load: its name goes alone, :load x"
    assert refusal(":train --debug") == "--debug is no option of :train but minitf's own, given as it starts: " \
                                        "minitf --debug"


# --- 11: given twice, both as typed ------------------------------------------------------------------------------


@pytest.mark.parametrize("line, said", [
    (":set lr=0.02 lr=0.03", "lr is given twice (lr=0.02 and lr=0.03); give it once"),
    (":set learning_rate=0.1 lr=0.2", "lr is given twice (learning_rate=0.1 and lr=0.2); give it once"),
    (":train --steps 5 steps=10", "steps is given twice (--steps 5 and steps=10); give it once"),
])
def test_a_key_given_twice_is_named_both_times_as_typed(line, said):
    assert refusal(line) == said


# --- 12: --json at the REPL; a paste's lines ---------------------------------------------------------------------


def test_json_at_the_repl_gives_the_line_that_shows_the_text():
    # it said "here the result is shown as text", of a line that showed nothing
    assert refusal(":config --json").endswith("here results are shown as text: :config")
    parse_line(":config", REGISTRY)


def test_an_error_in_a_paste_names_its_line():
    out = io.StringIO()
    console = Console(file=out, width=300)
    door = FrontDoor(tiny_session(), console, console)
    repl.run_pasted(door, ":set lr=0.02\n# a comment\n:set bogus=1", console, set())
    assert "error: pasted line 3: unknown option 'bogus'" in out.getvalue()
    assert door.where == ""
    repl.run_pasted(door, ":set bogus=1", console, set())  # one line: as typed
    assert "error: unknown option 'bogus'" in out.getvalue()


def test_the_switches_the_repl_names_as_minitfs_own_are_the_front_doors():
    """syntax.OWN_SWITCHES stands in for cli.root's on/off options (parsing may not import cli: a cycle)."""
    import inspect

    from minitf_repl.cli import root
    from minitf_repl.syntax import OWN_SWITCHES

    declared = {decl for param in inspect.signature(root).parameters.values()
                if getattr(param.default, "default", None) is False
                for decl in (getattr(param.default, "param_decls", None) or ()) if decl.startswith("--")}
    assert declared and set(OWN_SWITCHES) == declared, declared


# --- review of the sweep: lines the refusals above caught that ran before ---------------------------------------------


def test_a_path_or_a_name_holding_a_chains_operator_is_the_name(tmp_path, monkeypatch):
    """`:data Tom & Jerry.txt` was "& does not chain commands; ... first :data Tom", a line loading another file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "Tom & Jerry.txt").write_text("the cat sat on the mat. " * 20, encoding="utf-8")
    (tmp_path / "notes; old.txt").write_text("the cat sat on the mat. " * 20, encoding="utf-8")
    assert parse_line(":data Tom & Jerry.txt", REGISTRY)[1]["name"] == "Tom & Jerry.txt"
    assert parse_line(":data notes; old.txt", REGISTRY)[1]["name"] == "notes; old.txt"
    assert parse_line(":save a & b", REGISTRY)[1]["name"] == "a & b"
    session = tiny_session()
    run(session, ":data Tom & Jerry.txt")
    assert session.data_spec.endswith("Tom & Jerry.txt"), session.data_spec
    assert refusal(":data sort; :gen").endswith("first :data sort")  # a command after it: still a chain


@pytest.mark.parametrize("line, prompts", [(":patch the -h flag vs the -x flag", "the -h flag vs the -x flag"),
                                           (":patch a vs -h", "a vs -h")])
def test_h_inside_a_pair_of_prompts_is_text(line, prompts):
    cmd, args = parse_line(line, REGISTRY)  # it showed :patch's help
    assert cmd.name == "patch" and args["prompts"] == prompts
    assert parse_line(":patch -h", REGISTRY)[0].name == "help"


@pytest.mark.parametrize("line, whole", [
    (":gen the --json option", ":gen -- the --json option"),  # was `:gen the option`
    (":gen pass --prompt text", ":gen -- pass --prompt text"),  # was `:gen text`
    (":tok a --text b", ":tok -- a --text b"),  # was `:tok b`
    (":gen how to use the --version flag", ":gen -- how to use the --version flag"),  # was `minitf --version`
])
def test_a_flag_amid_a_prompt_is_given_back_with_the_whole_text(line, whole):
    message = refusal(line)
    assert message.endswith(f"to read the whole line as text: {whole}"), message
    cmd, args = parse_line(whole, REGISTRY)
    assert args[cmd.positional.name] == line.split(None, 1)[1]  # the text, every word kept


def test_a_generation_setting_beside_other_settings_gives_a_line_that_runs():
    message = refusal(":train n=5 n_layers=2")  # was "did you mean :train steps=5 n_layers=2?", refused in turn
    assert message.endswith(": :set n=5 n_layers=2, then :train"), message
    parse_line(":set n=5 n_layers=2", REGISTRY)


def test_a_chains_operator_after_a_value_amid_a_prompt_gives_the_whole_line():
    message = refusal(":gen n=3; hi")  # was "... the value is n=3", no line to run
    assert message.endswith("the line: :gen n=3 hi"), message
    assert parse_line(":gen n=3 hi", REGISTRY)[1] == {"n": 3, "prompt": "hi"}
    assert refusal(":gen n=5; :train").endswith("the value is n=5")  # a command after it: no such line


@pytest.mark.parametrize("line, runs", [(":gen? hello world", ":gen hello world"),
                                        (":train? steps=5", ":train steps=5"), (":set lr=0.1 -h", ":set lr=0.1")])
def test_help_asked_with_more_words_is_refused_with_both_lines(line, runs):
    message = refusal(line)  # the help was shown, the rest of the line dropped unsaid
    assert message.endswith(f"shows the help, {runs} runs the command"), message
    assert parse_line(runs, REGISTRY)[0].name != "help"
    alone = line.split()[0] if "?" in line else f"{line.split()[0]} -h"
    assert parse_line(alone, REGISTRY)[0].name == "help"  # `:gen?` alone: the help still
