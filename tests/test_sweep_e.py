"""What a sweep of the REPL's mechanics and its help, tried as a user would, found wrong: each test failed
before its fix.

Lines pasted at the prompt ran as one line, the first command taking the others as its text; Tab after
`--key ` offered option names where the option's value goes; `:help n` (and seed, steps) named as "the
same setting for one command" options that only share its name (`:ngram n=` is the counter's order); and
at 40-odd columns the toolbar lost the data it keeps in view, and `:help` cut words ("int|no…").
"""

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from minitf_repl import repl
from minitf_repl.repl import CommandCompleter
from minitf_repl.session import Session
from test_commands import run
from test_render import plain, text_of
from test_repl import TINY, ctrl_c_at_step, drive

PASTE, END = "\x1b[200~", "\x1b[201~"  # a terminal's bracketed paste: the text arrives as one piece


# --- several lines pasted at once ---------------------------------------------------------------------------
def test_lines_pasted_at_once_run_one_by_one_as_typed():
    code, out, err, session = drive(f"{PASTE}:set n=7\n:data sort\n:config\n{END}\r")
    assert code == 0 and err == "", err
    assert "n: 200 -> 7" in out and session.data_spec == "sort" and "d_model" in out


def test_a_ctrl_c_that_stops_one_pasted_line_drops_the_rest_and_says_so(monkeypatch):
    ctrl_c_at_step(monkeypatch, 2)
    code, out, err, session = drive(f"{PASTE}{TINY}\n:train steps=50\n:set n=7\n\n:data sort\n{END}\r")
    assert code == 0
    assert "stopped at step" in out and "n: 200 -> 7" not in out and session.data_spec != "sort"
    assert err.strip() == "2 more pasted lines not run"


# --- Tab after `--key ` --------------------------------------------------------------------------------------
def completions(text: str) -> list[str]:
    completer = CommandCompleter(session=Session())
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent())]


def test_tab_after_a_long_option_without_its_value_offers_its_values():
    assert completions(":train --schedule ") == ["new", "continue"]
    assert completions(":train --watch a") == ["attn"]
    assert completions(":gen -n ") == []  # a number: nothing to offer, and no option name in its place
    assert completions(":train --steps ") == []
    assert "steps=" not in completions(":train --steps 5 ")  # given already, as steps=5 is
    assert "cache=" not in completions(":gen --cache ") and "n=" in completions(":gen --cache ")  # a flag needs none


# --- :help KEY ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key, commands", [
    # not :ngram n= (the counter's order), :mistakes n= (questions) nor :kv n= (default 8)
    ("n", "or for one command as its option: :gen n=..."),
    # not the windows' or questions' seeds, default 0; :train seed= stays (test_sweep_dd)
    ("seed", "or for one command as its option: :lrfind seed=...; :train seed=... sets it too, and it stays"),
    ("steps", "or for one command as its option: :train steps=..."),  # not :checks' 100, :compare's 300, :lrfind's
    ("lr", ":set lr=...; :train lr=... sets it too, and it stays"),
])
def test_help_of_a_setting_names_only_the_options_that_set_it_for_one_command(key, commands):
    shown = plain(run(Session(), f":help {key}"))
    assert shown.endswith(commands)


# --- the toolbar at 40-60 columns ---------------------------------------------------------------------------
def test_the_toolbar_keeps_the_data_in_view_at_40_columns():
    session = Session(data_spec="sort")
    run(session, TINY)
    run(session, ":train steps=2")
    session.data_spec = "shakespeare"  # the longest of the data names
    text = repl.toolbar_text(session, width=40)
    assert len(text) <= 40 and text.endswith("| shakespeare ") and "step 2" in text
    assert "device cpu" in repl.toolbar_text(session, width=120)  # where it fits, all of it


@pytest.mark.parametrize("name", ["gen", "train", "set", "help"])
def test_help_of_a_command_at_40_columns_cuts_no_word(name):
    result = run(Session(), f":help {name}")
    lines = text_of(result, 40).splitlines()
    assert not any("…" in line for line in lines)  # the table's columns cut them: "int|no…", "likelie…"
    first = result.params[0].name.upper() if result.params[0].positional else f"{result.params[0].name}="
    options = lines[next(k for k, line in enumerate(lines) if line.startswith(first)):]
    assert all(len(line) <= 40 for line in options)  # (the usage line above them has words of 50 characters)
    shown = plain(result, width=40)
    assert all(" ".join(p.help.split()) in shown for p in result.params)
    assert "top_k= int|none" in plain(run(Session(), ":help gen"), width=40)


def test_the_list_of_commands_at_40_columns_cuts_no_word():
    result = run(Session(), ":help")
    narrow = text_of(result, 40)
    assert "…" not in narrow and "mixture-of-experts" in narrow  # was "mixture-of-expe…"
    shown = plain(result, width=40)  # drawn once, not once an entry (4 s of the default run)
    assert all(" ".join(entry.summary.split()) in shown for entry in result.entries)
    assert "  :train                Train the model" in text_of(result, 100)  # a table where it fits


def test_a_prompt_of_several_lines_pasted_at_once_stays_one_prompt_with_its_newlines(run_lines):
    seen = run_lines
    code, out, err, session = drive(f"{TINY}\r{PASTE}def f(x):\n    return x\n{END}\r")
    assert code == 0 and seen[-1] == "def f(x):\n    return x\n"  # not two prompts, 'def f(x):' and 'return x'


def test_help_of_a_command_and_one_of_its_options_shows_that_option():
    session = Session()
    assert run(session, ":help set lr").setting.name == "lr"  # was: the whole of :help set
    assert run(session, ":help gen n").setting.name == "n"  # an option made from a setting: the setting
    counter = run(session, ":help ngram n")  # an option of its own, which only shares the setting's name
    assert counter.setting is None and [p.name for p in counter.params] == ["n"] and counter.detail.name == "ngram"
    assert "the longest counter" in plain(counter)
    assert [p.name for p in run(session, ":help train steps").params] == ["steps"]
    with pytest.raises(Exception, match="^:train has no option 'bogus'; :help train lists its options$"):
        run(session, ":help train bogus")


def test_tab_completes_a_command_name_typed_in_capitals_as_the_command_runs_so():
    assert ":train" in completions(":TR") and ":train" in completions(":Tra")
    assert "steps=" in completions(":TRAIN st")
