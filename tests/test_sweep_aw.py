"""What a learner's fingers met at the prompt (Tab, history, pasting, keys): each test failed before its fix.

A file's path completed to nothing: `:data ./my<Tab>`, `:data ~/<Tab>`, `:train data=./<Tab>` and `:load hf:<Tab>`
offered no file and no folder, so a corpus's path was typed out letter by letter. An option or text that takes a path
(Param.browse) now completes from the disk, at Tab (not at each key typed): files and the folders on the way to them
for data, folders for :report, folders after `hf:` for :load, :save and :parity; `~` and `..` go on to `~/` and `../`;
a name with a space comes in double quotes, as the line reads it.

`:help :tr<Tab>` completed to nothing, though `:help :train` shows the help of :train: a command named after :help
with its colon completes as without it. `:help set block<Tab>` completed to nothing, though `:set block<Tab>` completes
nanoGPT's spelling to max_seq_len=: after `:help CMD` too, and `:help block<Tab>` (a setting, which :help reads by
either spelling) to `:help max_seq_len`.

Tab inside a comment offered options: `:train steps=5  # st<Tab>` gave `steps=`, which the parser then dropped with the
comment (the run took none of it). Where the parser reads a comment (parsing.in_comment), Tab offers nothing; where a
`#` is text (`:gen #`, a name's first word) it completes as before.

`:compare n_la<Tab>`, `:compare current norm=<Tab>` and `:compare preset=<Tab>` offered nothing: a contender's
settings, which :compare reads as :set does, complete as :set's (keys, aliases, values; after a comma too), less
those the comparison sets for every contender (seed, steps, eval_every) and those no contender may change (sampling);
`:compare cur<Tab>` completes to `current`, the session's own settings as a contender.

Pasting several commands at once (`:set n_layers=1` and `:config`, with bracketed paste) put them in the line together,
and the menu popped up with :set's options under the paste; Tab on a second line (`:tr`) completed nothing. Tab reads
the line the cursor is on.

`:set --optimizer=<Tab>` and `:train --data=<Tab>` offered nothing, though the line takes `--key=value` as it takes
`key=value`: the value completes after either spelling.

Tab on the empty prompt did nothing: a learner who presses it to see what there is to type now gets the commands.

`:checks blind,<Tab>` offered nothing, and `:checks blind,init <Tab>` offered blind and init again, though :checks (and
:ablate) read words joined by commas: the next word completes after a comma, and the words given so are not offered.

`:ablate mask <Tab>` offered `off`, which :ablate then refused ("off puts back every part on its own"): a word that
takes no other (Param.alone) is offered as the first word only.

Tab offered an option given already where it was given after the cursor (`:train | steps=5`) or in capitals
(`:train STEPS=5 st<Tab>`), and the line was then refused with the option given twice: the whole line counts.

`MINITF_HISTORY=/dev/null`, the way a shell's history is kept off the disk (HISTFILE=/dev/null), said "warning: cannot
use history file /dev/null (it is a character device, ...)" at every start, and there was no other way to keep what is
typed (paths, prompts) out of a file: the null device, or a link to it, is history kept in memory without a word.

Pasting a command and then a text to continue (`:set temperature=0.5`, then a story's first lines) gave the story to
:set, which refused it ("not both: :set Once upon a time shows"); typed line by line, the two ran. The commands that
come first, where none reads text, now run one by one, and the lines after them are one prompt, newlines kept; a
paste that starts with a command reading text (`:gen def f(x):` and the function's body) stays one prompt, as before.

`:set optimizer= <Tab>` (a space typed after '=') offered the other options, and each line it made was refused ("an
option and its value go as one word, with no space after '='"): Tab now offers the option's values in the space's
place (`:set optimizer=muon`), and nothing where the option has no values to offer.

Ctrl-Z at the prompt typed a ^Z into the line (`:set n=3^Z` then ran with it), where a shell's program, and minitf
itself while a command runs, goes to the background: the prompt suspends too (`fg` brings it back).

A guard, with no bug of its own: every line Tab makes from `:NAME ` for every command (an option with each value it
offers, a text, a second word) is read by the line parser.
"""

import os

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.history import InMemoryHistory

from minitf_repl import repl
from minitf_repl.commands.base import REGISTRY
from minitf_repl.parsing import parse_line
from minitf_repl.repl import CommandCompleter
from minitf_repl.session import Session


def completions(text: str, session=None) -> list[str]:
    completer = CommandCompleter(session=session if session is not None else Session())
    return [c.text for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def completed(text: str, session=None) -> list[str]:
    """The lines Tab makes of `text`, one per completion offered."""
    completer = CommandCompleter(session=session if session is not None else Session())
    return [text[: len(text) + c.start_position] + c.text
            for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


@pytest.fixture
def corpus_here(tmp_path, monkeypatch):
    (tmp_path / "my_corpus.txt").write_text("some text\n" * 50, encoding="utf-8")
    (tmp_path / "my dir").mkdir()
    (tmp_path / "my dir" / "notes ü.txt").write_text("other text\n" * 50, encoding="utf-8")
    (tmp_path / "gpt2").mkdir()
    (tmp_path / ".hidden.txt").write_text("x", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- a path completes from the disk --------------------------------------------------------------------------------
def test_tab_completes_a_data_files_path_from_the_disk(corpus_here):
    assert completed(":data ./my") == [':data "./my dir/', ":data ./my_corpus.txt"]
    assert completed(":data my") == [':data "my dir/', ":data my_corpus.txt"]  # no data's name begins `my`
    assert completed(':data "my dir/') == [':data "my dir/notes ü.txt"']
    assert completed(":train data=./my_") == [":train data=./my_corpus.txt"]
    assert completed(":load hf:g") == [":load hf:gpt2/"] and completed(":parity hf:./g") == [":parity hf:./gpt2/"]
    assert completed(":report ./") == [":report ./gpt2/", ':report "./my dir/']  # folders: the page is a new file
    assert ".hidden.txt" not in " ".join(completions(":data ./")) and completions(":data ./.h") == ["./.hidden.txt"]
    assert completions(":data s") == ["shakespeare", "sort"]  # a data's name first: no file is listed beside it
    assert completions(':gen "a \\" b" temp') == ["temperature="]  # a quote escaped in a quoted text ends no word
    typing = CompleteEvent(text_inserted=True)  # the menu while typing: the disk is read at Tab only
    assert list(CommandCompleter(session=Session()).get_completions(Document(":data ./my"), typing)) == []
    for line in completed(":data ./my") + completed(':data "my dir/') + completed(":load hf:g"):
        parse_line(line if line.count('"') != 1 else line + '"', REGISTRY)  # each reads as the line's path


def test_tab_completes_a_path_under_the_home_folder(tmp_path, monkeypatch):
    (tmp_path / "texts").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert completions(":data ~/te") == ["~/texts/"] and completions(":data ~") == ["~/"]
    assert completions(":data ~/nowhere/") == []  # no such folder: nothing, never an error


# --- :help :name -------------------------------------------------------------------------------------------------
def test_tab_after_help_completes_a_command_typed_with_its_colon():
    assert completed(":help :tr") == [":help train"]
    assert completions(":help :lo") == completions(":help lo") == ["load"]
    assert parse_line(":help train", REGISTRY)[1]["command"] == "train"
    assert completed(":help set block") == [":help set max_seq_len="] == [
        line.replace(":set", ":help set") for line in completed(":set block")]
    assert completions(":help train max_i") == ["steps="]
    # a setting by nanoGPT's spelling, which :help reads (`:help block_size`), completes to its own name
    assert completed(":help block") == [":help max_seq_len"]
    assert completions(":help block_size") == []  # typed out whole: :help reads it as it is
    assert completions(":help max_s").count("max_seq_len") == 1  # by its own name, once
    from test_commands import run  # a typo of that spelling is pointed to it (was: did you mean :help vocab_size?)

    with pytest.raises(Exception, match=r"did you mean :help block_size\?"):
        run(Session(), ":help blok_size")


# --- a comment --------------------------------------------------------------------------------------------------------
def test_tab_inside_a_comment_offers_nothing_the_parser_would_drop():
    assert completions(":train # st") == [] and completions(":set n_layers=2 # n_") == []
    assert completions(":train steps=5 # ") == []
    assert completions(":train st") == ["steps="]  # before the comment, as ever
    assert completions(":gen # te") == ["temperature="]  # :gen reads `#` as text: its options still complete


# --- :compare's contenders --------------------------------------------------------------------------------------------
def test_tab_completes_a_contenders_settings_and_each_is_one_compare_reads():
    from minitf_repl.commands.lab import _check_pairs, _contender_groups
    from minitf_repl.core.errors import UserError

    assert completions(":compare n_la") == ["n_layers="] and completions(":compare block") == ["max_seq_len="]
    assert completions(":compare current norm=") == ["layernorm", "rmsnorm", "none"]
    assert completions(":compare preset=") == completions(":set preset=")
    assert completed(":compare norm=rmsnorm,bi") == [":compare norm=rmsnorm,bias="]
    assert completions(":compare n_layers=1 n_la") == ["n_layers="]  # the next contender sets it again
    assert completions(":compare se") == ["seeds="] and completions(":compare temp") == []  # not seed, temperature
    assert completed(":compare n_layers=1 cur") == [":compare n_layers=1 current"]
    assert completions(":compare current cur") == []  # once
    keys = [key for key in completions(":compare current ") if key.endswith("=")]
    own = {p.name + "=" for p in REGISTRY["compare"].options}
    for key in keys:
        if key in own:
            continue
        value = (completions(f":compare current {key}") or ["1"])[0]
        _, args = parse_line(f":compare current {key}{value}", REGISTRY)
        for label, pairs in _contender_groups(args["contenders"]):
            try:  # no key Tab offers is refused as no setting or as the comparison's own
                _check_pairs(label, pairs)
            except UserError as e:  # the stand-in value 1 may be out of the setting's range (dropout=1): that only
                assert str(e).startswith(f"contender {label}: {key[:-1]} must"), str(e)


# --- a paste of several commands ------------------------------------------------------------------------------------
def test_tab_in_a_paste_of_several_commands_completes_the_line_the_cursor_is_on():
    pasted = Document(":set n_layers=1\n:config\n")  # the menu as the paste arrives: nothing under it
    assert list(CommandCompleter(session=Session()).get_completions(pasted, CompleteEvent(text_inserted=True))) == []
    assert completed(":set n_layers=1\n:tr") == [":set n_layers=1\n:train"]
    assert completions(":set n_layers=1\n:train st") == ["steps="]


# --- --key=value ----------------------------------------------------------------------------------------------------
def test_tab_completes_the_value_of_a_long_option_written_with_its_equals_sign():
    assert completions(":set --optimizer=") == completions(":set optimizer=") == ["adamw", "muon"]
    assert completed(":set --activation=relu") == [":set --activation=relu", ":set --activation=relu2"]
    assert completions(":train --data=so") == ["sort"]
    assert parse_line(":set --optimizer=muon", REGISTRY)[1]["optimizer"] == "muon"


# --- the empty prompt ------------------------------------------------------------------------------------------------
def test_tab_on_the_empty_prompt_lists_the_commands():
    offered = completions("")
    assert ":train" in offered and ":help" in offered and offered == completions(":")
    typing = CompleteEvent(text_inserted=True)
    assert list(CommandCompleter(session=Session()).get_completions(Document(""), typing)) == []
    assert completions("Once upon") == []  # a prompt's text: nothing to complete


# --- words joined by commas --------------------------------------------------------------------------------------------
def test_tab_after_a_comma_completes_the_next_word_of_several():
    assert completed(":checks blind,in") == [":checks blind,init"]
    assert "blind" not in completions(":checks blind,") and "init" in completions(":checks blind,")
    assert not {"blind", "init"} & set(completions(":checks blind,init "))
    assert parse_line(":checks blind,init", REGISTRY)[1]["which"] == "blind,init"


def test_tab_offers_a_word_that_stands_alone_only_as_the_first():
    assert "off" in completions(":ablate ") and "off" not in completions(":ablate mask ")
    assert "off" not in completions(":ablate mask,") and "positions" in completions(":ablate mask,")


# --- an option given after the cursor ---------------------------------------------------------------------------------
def test_tab_does_not_offer_an_option_given_after_the_cursor_or_in_capitals():
    completer = CommandCompleter(session=Session())

    def at(text: str, cursor: int) -> list[str]:
        document = Document(text, cursor_position=cursor)
        return [c.text for c in completer.get_completions(document, CompleteEvent(completion_requested=True))]

    assert at(":train st steps=5", 9) == [] and "steps=" not in at(":train  steps=5", 7)
    assert completions(":train STEPS=5 st") == []
    assert at(":train stxx", 9) == ["steps="]  # the word the cursor is in is no option given
    with pytest.raises(Exception, match="twice"):
        parse_line(":train steps=5 STEPS=6", REGISTRY)


# --- no history on the disk ---------------------------------------------------------------------------------------------
@pytest.mark.skipif(not os.path.exists(os.devnull), reason="needs the null device")
def test_a_history_on_the_null_device_is_kept_in_memory_without_a_warning(tmp_path):
    said = []
    assert isinstance(repl.make_history(os.devnull, said.append), InMemoryHistory) and said == []
    link = tmp_path / "history"
    link.symlink_to(os.devnull)
    assert isinstance(repl.make_history(link, said.append), InMemoryHistory) and said == []
    (tmp_path / "folder").mkdir()  # a history that cannot be used is still said
    assert isinstance(repl.make_history(tmp_path / "folder", said.append), InMemoryHistory) and len(said) == 1


# --- commands, then a text, pasted at once ------------------------------------------------------------------------
PASTE, END = "\x1b[200~", "\x1b[201~"  # a terminal's bracketed paste: the text arrives as one piece


def test_a_paste_of_commands_then_a_text_runs_the_commands_then_continues_the_text(run_lines):
    from test_repl import drive

    seen = run_lines
    code, out, err, session = drive(f"{PASTE}:set temperature=0.5\n# then a story\n:set n=3\n\nOnce upon\na time{END}\r")
    assert seen == [":set temperature=0.5", ":set n=3", "Once upon\na time"]
    assert session.gen_config.temperature == 0.5 and "not both" not in err
    seen.clear()
    drive(f"{PASTE}:gen def f(x):\n    return x{END}\r")
    assert seen == [":gen def f(x):\n    return x"]  # :gen reads text: the lines after it are its prompt


# --- a space after '=' ---------------------------------------------------------------------------------------------
def test_tab_after_a_space_typed_after_the_equals_sign_offers_the_value_in_its_place():
    assert completed(":set optimizer= ") == [":set optimizer=adamw", ":set optimizer=muon"]
    assert completed(":set --optimizer=  mu") == [":set --optimizer=muon"]
    assert completed(":compare norm= rms") == [":compare norm=rmsnorm"]
    assert completions(":set lr= ") == []  # nothing Tab could offer there is read
    for line in completed(":set optimizer= "):
        assert parse_line(line, REGISTRY)[1]["optimizer"] in ("adamw", "muon")


# --- every line Tab makes, every command ------------------------------------------------------------------------------
def lines_tab_makes(name: str, session) -> list[str]:
    """Each line Tab makes from `:NAME `: an option with each value it offers, a text it offers, and one more word."""
    lines = []
    for first in completed(f":{name} ", session):
        if first.endswith("="):
            lines += completed(first, session) or []
        else:
            lines.append(first)
            lines += [line for line in completed(first + " ", session) if not line.endswith("=")]
    return lines


def test_every_line_tab_makes_for_every_command_is_read_by_the_line_parser(corpus_here):
    session = Session(checkpoint_dir=corpus_here)
    for name in sorted({command.name for command in REGISTRY.values()}):
        for line in lines_tab_makes(name, session):
            parse_line(line + '"' * (line.count('"') % 2), REGISTRY)  # a folder's quote is left open for its file


# --- Ctrl-Z ------------------------------------------------------------------------------------------------------------
def test_ctrl_z_at_the_prompt_suspends_instead_of_typing_a_control_character(monkeypatch):
    from prompt_toolkit.application import Application
    from test_repl import drive

    suspended = []
    monkeypatch.setattr(Application, "suspend_to_background", lambda app, *a, **k: suspended.append(True))
    code, out, err, session = drive(":set n=3\x1a\r")
    assert session.gen_config.n == 3 and "\x1a" not in err + out
    assert suspended == [True] or not hasattr(__import__("signal"), "SIGTSTP")  # Windows has no suspending
