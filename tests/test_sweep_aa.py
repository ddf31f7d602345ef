"""What a user's-eye sweep of minitf used one-shot from the shell, as a script does (`minitf --data sort gen 12=`,
`minitf --load NAME score TEXT --json`), found wrong: each test failed before its fix.

A command line a message suggested left out the session's own global options: `minitf --data sort gen 12=` was told
"minitf train first, then minitf --load autosave gen", whose train ran on pydoc and whose gen looked for the
checkpoint in the default folder, not in --checkpoint-dir; so did the lines of a one-shot set, data and load (spelt
out by hand), and "in the REPL (minitf)". A one-shot rebuild of a loaded model named a line --load refuses; "train,
then look again" looked at a new model again; `minitf save x` with no model named a save under another name.
`minitf quit`, `minitf help trian` and `minitf help help` said "No such command"; `minitf plot lens_rank` missed the
REPL's "did you mean"; Tab after the global --load, --data, --device and --set offered nothing.
"""

from __future__ import annotations

import re
import shlex

import pytest

from test_cli import assert_one_error_line, invoke

TINY = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32",
        "--set", "batch_size=4", "--data", "sort"]


def suggested(text: str, command: str) -> list[list[str]]:
    """The `minitf ... COMMAND ...` lines in `text`, as a shell splits them (up to the end of the clause)."""
    lines = []
    for match in re.finditer(r"minitf (?:(?!minitf )[^,;()])*?\b" + command + r"\b[^,;()]*", text):
        lines.append(shlex.split(match.group(0).replace(" first", "")))
    return lines


def test_a_suggested_line_carries_the_sessions_own_options(tmp_path):
    ck = str(tmp_path / "my ck")
    result = invoke("--checkpoint-dir", ck, *TINY, "gen", "--n", "6", "123456=")  # a question of sort:6
    assert result.exit_code == 0, result.output
    train, = suggested(result.stderr, "train")
    assert train[:3] == ["minitf", "--checkpoint-dir", ck] and ["--data", "sort"] == train[3:5], train
    assert "d_model=32 n_heads=2" in train and train[-1] == "train"
    gen, = suggested(result.stderr, "gen")
    # The gen starts from the checkpoint the train saves: that one brings data and settings; the folder stays.
    assert gen[:6] == ["minitf", "--checkpoint-dir", ck, "--load", "autosave", "gen"], gen


def test_tab_after_the_global_load_data_and_device_offers_their_values(tmp_path):
    # `minitf --load <Tab>` offered nothing, though --load is how a one-shot session loads (`minitf load X` ends
    # with its session) and `minitf load <Tab>` offered the checkpoints.
    from test_completion import complete_bash

    for name in ("run-a", "run-b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "checkpoint.json").write_text("{}")
    assert complete_bash(f"minitf --checkpoint-dir {tmp_path} --load ") == ["run-a", "run-b"]
    assert complete_bash("minitf --data s") == ["shakespeare", "sort"]
    assert "cpu" in complete_bash("minitf --device ")
    # --set, like `minitf set`: the keys, then a key's values
    assert complete_bash("minitf --set n_l") == ["n_layers="]
    assert complete_bash("minitf --set norm=") == ["norm=layernorm", "norm=rmsnorm", "norm=none"]


@pytest.mark.parametrize("args", [["quit"], ["help", "quit"], ["--data", "sort", "quit"]])
def test_a_repl_only_command_says_what_it_is(args):
    # `minitf quit` said "No such command 'quit'", though :quit is one of minitf's commands (of its REPL).
    line = assert_one_error_line(invoke(*args), code=2)
    assert "interactive shell" in line and ":quit" in line and "unknown command" not in line


def test_help_help_lists_the_commands():
    result = invoke("help", "help")  # was "No such command 'help'", though `minitf help` works
    assert result.exit_code == 0 and "Commands" in result.stdout


@pytest.mark.parametrize("args, line", [
    (["--set", "lr=0.3", "--set", "batch_size=4", "set", "lr=0.1"],
     ["minitf", "--checkpoint-dir", "CK", "--set", "batch_size=4", "--set", "lr=0.1", "train"]),
    (["--data", "sort", "data", "reverse"], ["minitf", "--checkpoint-dir", "CK", "--data", "reverse", "train"]),
])  # fmt: skip
def test_a_one_shot_set_or_data_names_the_line_that_keeps_it(tmp_path, args, line):
    # `minitf --checkpoint-dir DIR set lr=0.1` said "e.g. minitf --set lr=0.1 train": without DIR (and the other
    # options this line gave), so the train it suggested saved where the user had not asked.
    result = invoke("--checkpoint-dir", str(tmp_path), *args)
    assert result.exit_code == 0, result.output
    said = result.output.split("e.g. ", 1)[1].strip()
    assert shlex.split(said) == [str(tmp_path) if w == "CK" else w for w in line], said


def test_a_one_shot_load_names_a_line_that_finds_the_checkpoint(tmp_path):
    assert invoke("--checkpoint-dir", str(tmp_path), *TINY, "train", "--steps", "2", "--save", "k").exit_code == 0
    result = invoke("--checkpoint-dir", str(tmp_path), "load", "k")
    assert result.exit_code == 0, result.output
    said = shlex.split(result.output.split("e.g. ", 1)[1].strip())
    # It said `minitf --load k gen`, which looks for k in ./checkpoints.
    assert said == ["minitf", "--checkpoint-dir", str(tmp_path), "--load", "k", "gen"], said
    assert invoke(*said[1:-1], "gen", "--n", "2").exit_code == 0  # and the line does find it


def test_a_word_for_a_commands_main_option_gets_the_repls_guess():
    # `:plot lens_rank` guesses "did you mean :plot what=lens_rank?"; `minitf plot lens_rank` only said "takes no text".
    line = assert_one_error_line(invoke("--data", "sort", "plot", "lens_rank"), code=2)
    assert "did you mean minitf --data sort plot --what lens_rank?" in line, line
    assert "did you mean" not in assert_one_error_line(invoke("plot", "nonsense"), code=2)


def test_the_interactive_shell_a_message_sends_to_is_this_sessions(tmp_path):
    # "in minitf's interactive shell (minitf with no command): :train watch=lens": a shell on pydoc and ./checkpoints.
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "--data", "sort", "plot", "what=lens_rank"))
    assert f"(minitf --checkpoint-dir {tmp_path} --data sort with no command): :train watch=lens" in line, line
    assert "a one-shot minitf plot has none" in line


def test_the_repl_a_one_shot_ablate_names_is_this_sessions(tmp_path):
    # "in the REPL (minitf), the parts stay off": `minitf` alone opens a REPL on other data and another folder.
    result = invoke("--checkpoint-dir", str(tmp_path), *TINY, "ablate", "head=0.1")
    said = " ".join(result.stdout.split())
    assert result.exit_code == 0 and f"in the REPL (minitf --checkpoint-dir {tmp_path} --data sort --set" in said


def test_a_one_shot_rebuild_of_a_loaded_model_names_a_line_that_runs(tmp_path):
    # `minitf --load k set n_layers=3` said "e.g. minitf --load k --set n_layers=3 train", which --load refuses
    # ("n_layers would rebuild the model loaded from k"): the line now starts a new model on the checkpoint's data.
    ck = str(tmp_path)
    assert invoke("--checkpoint-dir", ck, *TINY, "train", "--steps", "1", "--save", "k").exit_code == 0
    result = invoke("--checkpoint-dir", ck, "--load", "k", "set", "n_layers=2")
    said = shlex.split(result.output.split("e.g. ", 1)[1].splitlines()[0])
    assert said == ["minitf", "--checkpoint-dir", ck, "--data", "sort", "--set",  # with k's own sizes (49th session)
                    "max_seq_len=32 d_model=32 n_heads=2 n_layers=2 d_ff=64", "train"], said
    kept = invoke("--checkpoint-dir", ck, "--load", "k", "set", "grad_clip=0.5").output.split("e.g. ", 1)[1]
    assert shlex.split(kept.splitlines()[0]) == ["minitf", "--checkpoint-dir", ck, "--load", "k", "--set",
                                                 "grad_clip=0.5", "train"]
    # lr alone: a loaded model's train goes on at the last run's rate, which the setting only caps (47th session)
    rate = invoke("--checkpoint-dir", ck, "--load", "k", "set", "lr=0.1").output.split("e.g. ", 1)[1]
    assert shlex.split(rate.splitlines()[0]) == ["minitf", "--checkpoint-dir", ck, "--load", "k", "train", "--lr",
                                                 "0.1"]


@pytest.mark.parametrize("command", ["grad", "mistakes", "ffn", "muon", "ngram", "score"])
def test_train_then_look_again_from_the_shell_looks_at_the_trained_model(tmp_path, command):
    # "this model has not trained yet ...; minitf train, then look again": a second one-shot `minitf grad` looks at
    # a new untrained model again. The look now starts from the checkpoint the train saves.
    result = invoke("--checkpoint-dir", str(tmp_path), *TINY, command)
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "then look again" not in said, said
    assert f"train first, then minitf --checkpoint-dir {tmp_path} --load autosave {command}" in said


def test_prose_that_names_a_command_names_it_short(tmp_path):
    # Once suggested lines carried the session's options, prose that only names a command read "the counter is
    # minitf --checkpoint-dir DIR --data sort ngram's"; a name in a sentence is `minitf ngram` again.
    result = invoke("--checkpoint-dir", str(tmp_path), *TINY, "mistakes", "--n", "8")
    said = " ".join(result.output.split())
    assert result.exit_code == 0 and "(minitf train's accuracy asks" in said, said


def test_score_again_from_the_shell_scores_the_same_text(tmp_path):
    result = invoke("--checkpoint-dir", str(tmp_path), *TINY, "score", "123=")
    said = " ".join(result.output.split())  # was "minitf train, then score the same text again"
    assert result.exit_code == 0 and said.endswith("--load autosave score 123="), said


def test_save_with_no_model_names_a_line_that_saves_under_that_name(tmp_path):
    # It said "minitf train first, then minitf --load autosave save": a save under the default name 'last', not x.
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "--data", "sort", "save", "x"))
    assert line.endswith(f"minitf --checkpoint-dir {tmp_path} --data sort train --save x trains one and saves it as x")


def test_help_of_a_word_that_is_neither_says_what_the_repls_help_says():
    # `minitf help trian` said "No such command 'trian'", though help explains settings too (`minitf help lr`).
    line = assert_one_error_line(invoke("help", "trian"), code=2)
    assert line.startswith("error: no command or setting named 'trian'; did you mean minitf train?"), line
    assert "minitf config the settings" in line
    line = assert_one_error_line(invoke("help", "n_layrs"), code=2)  # a setting's guess: a line that shows it
    assert "did you mean minitf set n_layers?" in line, line


def test_train_first_then_load_its_autosave_leaves_out_autosave_off(tmp_path):
    # With --set autosave=off the suggested "minitf --set autosave=off train first, then minitf --load autosave gen"
    # saved nothing for the gen to load: the train of such a line now goes without that setting.
    result = invoke("--checkpoint-dir", str(tmp_path), *TINY, "--set", "autosave=off", "gen", "--n", "2", "123456=")
    train, = suggested(result.stderr, "train")
    assert result.exit_code == 0 and "autosave=off" not in train and train[-1] == "train", train
