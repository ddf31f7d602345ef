"""What a user's-eye sweep of scripts and machine-readable output (`minitf CMD --json`, exit statuses, pipes,
`--help`) found: each test failed before its fix.

`minitf ngram --help` gave a flag's default as Python's "(default True)", where every other place (:help,
:config) says on/off, and `minitf params --help` explained its KEY=VALUE words with nothing: "Options as the REPL
writes them." (its only option is on/off, which the example skipped). `minitf train --help` called the value of
--save TEXT beside "save the checkpoint NAME", and --data TEXT, where the REPL's usage says save=NAME data=NAME; and
:parity's usage line said prompt=NAME of a text (docs/commands.md: prompt=TEXT).

A speed where nothing ran was 0 in the JSON and "-" (or left out) in the table: `minitf gen --n 0 --json` and a
`minitf train --json` stopped before its first step said tokens_per_second 0.0, a :compare contender that diverged
before a step was timed too; the docs say a value that does not apply is null.

`:config --json` at the REPL's prompt (docs/json.md's `minitf CMD --json`, typed there) said ":config takes no
options; got 'json'", and `:train --json` listed train's options: neither said where --json belongs.

A script's `minitf --load "$NAME" gen` with NAME unset was told "e.g. minitf --load '' load x", and `--set ""`
"e.g. minitf --set '' set lr": lines with the empty value in them again, which fail the same way.

`minitf --set n_experts=2 ffn` of a mixture-of-experts model said ":experts shows where they go", the REPL's
command in a shell user's error (the core's message, phrased where no front end speaks).

`minitf --device cuda device --json` on a machine without CUDA said "current": "cuda", documented as "the device the
model is on now", while the table marks no device current; the schema now says what current is then.

`minitf gen --n 5 --n 6` generated 6 tokens without a word (Click keeps an option's last value), where
`:gen --n 5 --n 6` and `minitf gen n=5 --n 6` say "n is given twice"; so did `--cache --no-cache` and
`train --steps 5 --max-iters 6`; and minitf's own `--data sort --data add` (or --load, --device, --checkpoint-dir
twice) went with the last, where `--set lr=0.1 --set lr=0.2` says "lr is given twice".

`minitf report out/` (a folder) was told "give a name ending in .html, e.g. out.html": a page beside the folder, not
in it; and a folder named `pages.html` "give a file name ending in .html", which it had.

`minitf CMD --help` spoke the REPL's syntax: "kept, like :set lr", "from :train watch=lens", "(:ls lists them)",
"(:load hf:PATH loads it here first)", and `minitf gen --help` "(a line without ':' is a prompt too)", which is true
of the REPL only; the shell's help now names commands as the shell types them.

`minitf score --counter 3 > out.txt` said "at 2 positions (in bold) the model gave ..." in a file, where nothing is
bold (and `minitf embed --map` "in bold: 1, 2" likewise); and score, grad and muon explained themselves with
":train" ("what :train minimises") to a shell user.

At 40 columns `minitf gen --help` cut its words in Typer's panels ("--n,--…", "--temp…", "genera…",
"shakespe…"): below 60 columns --help is now Click's plain text, each option's help under its name, every word
whole; and the root help's --set said "as :set does".

`minitf ls /tmp/x` (or `minitf config x`) said Click's "Got unexpected extra argument(s) (/tmp/x); minitf ls --help
lists the options", of a command with no options to list.

`minitf gen 12 --n 0` on a task said "the model went on with the question" (and --json's off_task too): with n=0
it wrote nothing.
"""

import json

import pytest

from minitf_repl import dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.parsing import parse_line
from test_cli import assert_one_error_line, invoke
from test_commands import Recorder, run, tiny_session


def help_text(*args, columns: int = 250) -> str:
    """A command's --help on one wide line per option (Rich wraps at the terminal's width otherwise)."""
    import os

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(columns)
    try:
        result = invoke(*args, "--help")
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    assert result.exit_code == 0, result.output
    return result.stdout


# --- --help ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, said", [("ngram", "(default on)"), ("gen", "(default off)"),
                                           ("shapes", "(default off)"), ("embed", "(default off)")])
def test_a_flags_default_is_on_or_off_in_shell_help(command, said):
    text = help_text(command)
    assert said in text and "(default True)" not in text and "(default False)" not in text


def test_a_float_default_is_written_as_settings_are():
    assert "(default 1)" in help_text("lrfind") and "(default 1.0)" not in help_text("lrfind")


@pytest.mark.parametrize("command, option, meta", [("train", "--save", "NAME"), ("train", "--data", "NAME"),
                                                   ("compare", "--data", "NAME"), ("parity", "--prompt", "TEXT"),
                                                   ("train", "--prompt", "TEXT"), ("train", "--schedule", "TEXT")])
def test_an_options_value_is_named_as_the_repl_names_it(command, option, meta):
    import re

    line = next(line for line in help_text(command).splitlines() if re.search(rf"{option}\b", line))
    assert re.search(rf"{option}\S*\s+{meta}\s", line), line


def test_paritys_usage_line_calls_its_prompt_a_text():
    assert "[prompt=TEXT]" in REGISTRY["parity"].usage()


def test_the_key_value_words_of_a_command_with_only_a_flag_have_an_example():
    assert "Options as the REPL writes them: all=on is --all." in help_text("params")


# --- a speed where nothing ran -----------------------------------------------------------------------------
def test_gen_of_no_tokens_has_no_speed_in_its_json():
    s = tiny_session()
    result = run(s, ":gen 12 n=0")
    assert result.n_tokens == 0 and result.tokens_per_second is None
    assert dispatch.json_document(REGISTRY["gen"], result)["tokens_per_second"] is None
    assert run(s, ":gen 12 n=2").tokens_per_second > 0


def test_a_train_stopped_before_its_first_step_has_no_speed_in_its_json(checkpoint_dir):
    result = run(tiny_session(), ":train steps=5", Recorder(stop_after=0))
    assert result.steps == 0 and result.tokens_per_second is None
    document = json.loads(json.dumps(dispatch.json_document(REGISTRY["train"], result)))
    assert document["tokens_per_second"] is None


def test_a_compare_contender_never_timed_has_no_speed():
    from minitf_repl.core.compare import Outcome, _finish

    timed, never = _finish([Outcome("a", 1), Outcome("b", 1)], [(2.0, 100), (0.0, 0)])
    assert timed.tokens_per_second == 50 and never.tokens_per_second is None


# --- --json typed at the REPL ------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [":config --json", ":train --json", ":tok 12 --json", ":ls json=on"])
def test_json_at_the_repl_says_where_it_belongs(line):
    with pytest.raises(UserError) as e:
        parse_line(line, REGISTRY)
    name = line.split()[0][1:]
    assert str(e.value).startswith("--json belongs to one-shot commands") and f"minitf {name} --json" in str(e.value)


def test_an_unknown_option_at_the_repl_is_still_listed_with_the_valid_ones():
    with pytest.raises(UserError, match=r"unknown option 'jsn' for :train .*valid: steps"):
        parse_line(":train --jsn", REGISTRY)


# --- an empty --load or --set ------------------------------------------------------------------------------
def test_an_empty_load_is_refused_with_an_example_that_works(checkpoint_dir):
    invoke("--data", "sort:4", "--set", "n_layers=1", "--set", "d_model=32", "train", "--steps", "1", "--save", "run1")
    line = assert_one_error_line(invoke("--load", "", "gen"), code=2)  # an empty value, as a missing one (s59)
    assert line == ("error: --load is empty; give a checkpoint's name, e.g. --load run1, or leave the option out to "
                    "start a new model")
    assert "''" not in assert_one_error_line(invoke("--load", " ", "config", "--json"), code=2)


def test_an_empty_load_with_no_checkpoints_names_the_one_a_first_train_saves():
    assert "e.g. --load autosave," in assert_one_error_line(invoke("--load", "", "config"), code=2)


@pytest.mark.parametrize("pairs", [[""], ["lr=0.1", " "]])
def test_an_empty_set_is_refused_with_an_example_that_works(pairs):
    args = [word for pair in pairs for word in ("--set", pair)]
    line = assert_one_error_line(invoke(*args, "config", "--json"), code=2)
    assert line.startswith("error: --set is empty; give KEY=VALUE, e.g. --set lr=1e-3") and "''" not in line


# --- a shell user's error names shell commands ------------------------------------------------------------
def test_ffn_of_an_experts_model_names_the_experts_command_in_the_shells_words():
    tiny = [w for pair in ("n_layers=1", "d_model=32", "n_heads=2", "d_ff=64", "max_seq_len=32", "n_experts=2")
            for w in ("--set", pair)]
    line = assert_one_error_line(invoke("--data", "sort:4", *tiny, "ffn", "12", "--json"))
    assert "a mixture of 2 experts" in line and " experts shows where the tokens go" in line and ":experts" not in line
    assert line.split("; ")[-1].startswith("minitf --data sort:4 --set n_layers=1")


def test_ffn_of_an_experts_model_in_the_repl_still_says_experts():
    s = tiny_session()
    run(s, ":set n_experts=2")
    with pytest.raises(UserError, match=r"to list; :experts shows where the tokens go"):
        run(s, ":ffn 12")


# --- device: what current means when the device asked for cannot be used -----------------------------------
def test_device_json_says_what_current_is_when_the_device_asked_for_cannot_be_used():
    import torch

    from minitf_repl import schema

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: --device cuda can be used")
    result = invoke("--device", "cuda", "device", "--json")
    assert result.exit_code == 1
    document = json.loads(result.stdout)
    assert document["problem"] and document["current"] == "cuda"
    meaning = schema.checked_in(REGISTRY["device"])["properties"]["current"]["description"]
    assert "with a problem, the one asked for, which the model is not on" in meaning


# --- an option given twice ----------------------------------------------------------------------------------
@pytest.mark.parametrize("args, said", [
    (["gen", "--n", "5", "--n", "6", "x"], "n is given twice (--n 5 and --n 6); give it once"),
    (["gen", "-n", "5", "--n=6", "x"], "n is given twice (-n 5 and --n=6); give it once"),
    (["gen", "--cache", "--no-cache", "x"], "cache is given twice (--cache and --no-cache); give it once"),
    (["train", "--steps", "5", "--max-iters", "6"], "steps is given twice (--steps 5 and --max-iters 6); give it once"),
])
def test_an_option_given_twice_is_refused_as_the_repl_refuses_it(args, said):
    assert assert_one_error_line(invoke(*args), code=2) == f"error: {said}"


def test_a_flag_said_twice_the_same_way_and_words_after_the_dashes_are_no_options():
    assert json.loads(invoke("--data", "sort:4", "tok", "12", "--json", "--json").stdout)["tokens"] == ["1", "2"]
    result = invoke("--data", "sort:4", "tok", "--json", "--", "1", "--n", "2", "--n")
    assert "n is given twice" not in result.output


@pytest.mark.parametrize("args, said", [
    (["--data", "sort", "--data", "add", "config"], "--data is given twice (--data sort and --data add)"),
    (["--load", "a", "--load=b", "gen"], "--load is given twice (--load a and --load=b)"),
    (["--device", "cpu", "--device", "auto"], "--device is given twice (--device cpu and --device auto)"),
])
def test_minitfs_own_option_given_twice_is_refused(args, said):
    assert assert_one_error_line(invoke(*args), code=2) == f"error: {said}; give it once"


def test_set_repeats_and_the_commands_own_data_are_no_repeat_of_minitfs():
    result = invoke("--set", "n_layers=1", "--set", "d_model=32", "--data", "sort:4", "tok", "12", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["tokens"] == ["1", "2"]
    result = invoke("--data", "sort:4", "--set", "n_layers=1", "--set", "autosave=off", "train", "--data", "add:2",
                    "--steps", "1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["data"] == "add:2"


# --- report given a folder -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["out", "pages.html"])
def test_report_given_a_folder_suggests_a_page_in_it(tmp_path, name):
    from minitf_repl.report import check_report_path

    folder = tmp_path / name
    folder.mkdir()
    for given in (str(folder), str(folder) + "/"):
        with pytest.raises(UserError) as e:
            check_report_path(given)
        assert str(e.value) == f"{folder} is a folder; give the page's file in it, e.g. {folder / 'report.html'}"
    assert check_report_path(str(folder / "report.html")) == folder / "report.html"


# --- gen of no tokens on a task --------------------------------------------------------------------------------
def test_gen_of_no_tokens_after_a_prompt_without_its_equals_sign_claims_nothing_was_written():
    s = tiny_session()
    none = run(s, ":gen 12 n=0")
    assert none.text == "" and "went on" not in none.off_task
    assert none.off_task.endswith("what the model writes after it goes on with the question; end it with '=' to ask")
    assert run(s, ":gen 12 n=2").off_task.endswith("the model went on with the question; end it with '=' to ask")


# --- --help in the shell's words ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(c.name for c in REGISTRY.values() if not c.repl_only))
def test_a_commands_help_names_no_repl_command(name):
    import re

    text = help_text(name)
    named = [m.group(1) for m in re.finditer(r"(?<![\w`:/]):([a-z]+)\b", text) if m.group(1) in REGISTRY]
    assert named == [], named
    # the REPL's plain lines are named as the REPL's (gen's summary), never as the shell's
    assert "a line without ':'" not in text.replace("in the REPL, a line without ':'", "")


def test_the_shell_help_says_the_repl_commands_as_the_shell_types_them():
    assert "(kept, like minitf --set batch_size)" in help_text("train")  # lr's, since s47: "kept, like minitf --set lr"
    assert "(minitf ls lists them)" in help_text("load") and "minitf train watch=" not in help_text("plot")  # s46
    assert "(minitf ls lists them)" in help_text("load")
    assert "(minitf --load hf:PATH loads it here first)" in help_text("parity")
    said = "Generate text from a prompt (in the REPL, a line without ':' is one too)."
    assert said in " ".join(help_text("gen").split()) and said in " ".join(help_text().replace("│", " ").split())


def test_shell_words_leaves_the_repls_own_parts_and_paths_alone():
    from minitf_repl.cli import shell_words

    assert shell_words(":help lists its commands; see hf:PATH, C:/x, `:train` and :nosuch") == \
        ":help lists its commands; see hf:PATH, C:/x, `:train` and :nosuch"
    assert shell_words("as :train computes it, then :set n=3") == "as minitf train computes it, then minitf --set n=3"


# --- score's marks in a file, and :train named in the shell's words --------------------------------------------
def scored_ahead():
    """A :score result with counter=2 in which the model beat the counter at position 5 (forced: a fact of the
    result, not of this tiny model)."""
    import dataclasses

    result = run(tiny_session(), ":score 1234=1234 counter=2")
    probs, losses, counter = list(result.target_probs), list(result.losses), list(result.counter_losses)
    probs[5], losses[5], counter[5] = 0.9, 0.1, 3.0
    return dataclasses.replace(result, target_probs=probs, losses=losses, counter_losses=counter)


def test_score_marks_what_bold_shows_with_a_star_where_nothing_is_bold():
    from test_render import plain

    text = plain(scored_ahead())  # a console without colour or bold, as a file or a pipe gets
    assert "(marked *)" in text and "(in bold)" not in text and "3.000*" in text


def test_score_says_in_bold_where_it_is():
    import io

    from rich.console import Console

    from minitf_repl.render import render

    c = Console(file=io.StringIO(), width=120, force_terminal=True, color_system="truecolor")
    render(scored_ahead(), c)
    text = c.file.getvalue()
    assert "(in bold)" in text and "3.000*" not in text


def test_score_grad_and_muon_name_train_in_the_shells_words(checkpoint_dir):
    from minitf_repl.syntax import SHELL, speaking
    from test_render import plain

    s = tiny_session()
    run(s, ":train")
    with speaking(SHELL):
        texts = [plain(run(s, line)) for line in (":score 1234=1234", ":grad 1234=1234", ":muon")]
    assert all(":train" not in text for text in texts)
    assert "what minitf train minimises" in texts[0] and "a step of minitf train moves" in texts[1]
    assert "on one minitf train batch" in texts[2]


def test_embed_map_says_in_bold_only_where_bold_shows():
    import io

    from rich.console import Console

    from minitf_repl.render import render
    from test_render import plain

    result = run(tiny_session(), ":embed 12 map=on")
    assert "in bold" not in plain(result) and "the text's tokens, drawn over any they share a cell with: 1, 2" in \
        plain(result)
    c = Console(file=io.StringIO(), width=100, force_terminal=True, color_system="truecolor")
    render(result, c)
    assert "in bold: 1, 2" in c.file.getvalue()


# --- --help at 40 columns --------------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [[], ["gen"], ["train"], ["set"], ["compare"], ["data"]])
def test_help_at_40_columns_cuts_no_options_words(args):
    text = help_text(*args, columns=40)
    lines = text.splitlines()
    assert all(len(line) <= 40 for line in lines), [line for line in lines if len(line) > 40]
    assert "…" not in text
    if args == ["gen"]:
        assert "--temperature X" in text and "sampling temperature (0:" in " ".join(text.split())
    if not args:
        assert "shakespeare," in text and "read as minitf set reads it" in " ".join(text.split())


def test_help_at_a_usual_width_keeps_typers_panels():
    assert "╭─ Options" in help_text("gen", columns=100)


# --- words after a command that takes none ---------------------------------------------------------------------
@pytest.mark.parametrize("args, got", [(["experts", "foo"], "'foo'"),
                                       (["config", "a (b)", "c", "--json"], "'a (b) c'")])
def test_words_after_a_command_that_takes_none_say_so(args, got):
    line = assert_one_error_line(invoke(*args), code=2)
    assert line == (f"error: minitf {args[0]} takes no text and no options (but --json), got {got}; leave the words "
                    "after it out")


def test_a_command_with_options_still_says_where_its_options_go():
    line = assert_one_error_line(invoke("train", "foo"), code=2)
    assert "minitf train takes no text, got 'foo'; its options go as KEY=VALUE" in line
    line = assert_one_error_line(invoke("ls", "/tmp/x"), code=2)  # ls takes all=on since it lists the newest 40 alone
    assert "minitf ls takes no text, got '/tmp/x'; its options go as KEY=VALUE" in line


def test_tab_on_a_line_with_an_option_twice_still_completes():
    from test_completion import complete_bash

    assert complete_bash("minitf gen --n 5 --n 6 --sh") == ["--show"]
    assert "train" in complete_bash("minitf --data sort --data add tr")


def test_help_on_a_line_with_an_option_twice_shows_the_help():
    for args in (["gen", "--n", "5", "--n", "6", "--help"], ["--data", "a", "--data", "b", "-h"]):
        result = invoke(*args)
        assert result.exit_code == 0 and "Usage: minitf" in result.stdout, result.output
