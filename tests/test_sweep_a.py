"""What a user's-eye sweep of checkpoints, data and the shell front door found wrong: each test failed before its fix.

`--load NAME --data FILE` refused the very file (or task) the checkpoint was trained on; a GPT-2 kept with
`:save NAME` loaded back as an untrained model; a Hugging Face folder was called "a task of characters", "not a
complete checkpoint ... remove that directory" and, with --data, "trained on hf:PATH"; `:load` replaced the
session's training settings without a word; `:load PATH` and `:save PATH` said to rename; `:ls` showed UTC as
local time; choosing the data in use again lost what :ngram measured on it; and shell hints in REPL syntax or
naming a one-shot command that ends with itself, each named in its test.
"""

import json

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from minitf_repl.syntax import SHELL, speaking
from test_cli import assert_one_error_line, invoke
from test_commands import run
from test_render import plain

TINY = dict(d_model=32, n_heads=2, n_layers=1, d_ff=64, max_seq_len=32)
CLI_TINY = ["--set", "n_layers=1", "--set", "d_model=32", "--set", "n_heads=2", "--set", "d_ff=64",
            "--set", "max_seq_len=32", "--set", "batch_size=4"]
TEXT = "the quick brown fox jumps over the lazy dog. " * 200


def session_on(data="pydoc", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2), data_spec=data,
                   device_name="cpu")


# --- --load with --data ---------------------------------------------------------------------------------
def test_load_with_data_naming_the_checkpoints_own_file_by_a_relative_path_is_no_contradiction(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(TEXT)
    folder = str(tmp_path / "ck")
    made = invoke(*CLI_TINY, "--data", "notes.txt", "--checkpoint-dir", folder, "train", "--steps", "2",
                  "--save", "mine")
    assert made.exit_code == 0, made.output
    for given in ("notes.txt", "./notes.txt", str(tmp_path / "notes.txt")):
        ok = invoke("--checkpoint-dir", folder, "--load", "mine", "--data", given, "gen", "--n", "3")
        assert ok.exit_code == 0, ok.output
    (tmp_path / "other.txt").write_text(TEXT)
    line = assert_one_error_line(invoke("--checkpoint-dir", folder, "--load", "mine", "--data", "other.txt", "gen"))
    assert "was trained on" in line and "not 'other.txt'; drop --data" in line


# --- a one-shot `minitf data X` ---------------------------------------------------------------------------
def test_a_one_shot_data_switch_says_it_ends_with_the_command_and_where_data_goes():
    result = invoke("data", "sort:3")
    assert result.exit_code == 0, result.output
    out = " ".join(result.stdout.split())
    assert "data is now sort" in out
    assert "gone when this command ends: data lasts one command from the shell, so give it with the command that " \
           "reads it, e.g. minitf --data sort:3 train" in out
    doc = invoke("data", "sort:3", "--json")
    assert doc.exit_code == 0 and json.loads(doc.stdout)["spec"] == "sort:3"  # the name alone says "sort"
    shown = invoke("data", "--json")
    assert json.loads(shown.stdout)["spec"] == "pydoc" and "gone when" not in invoke("data").stdout
    session = session_on()
    assert "gone when" not in plain(run(session, ":data sort:3"))  # the REPL's session goes on with it


def loaded_from_a_folder(tmp_path) -> Session:
    """A session whose model was loaded from a Hugging Face folder that another session trained and wrote."""
    first = session_on()
    first.checkpoint_dir = tmp_path / "ck"
    run(first, ":train steps=2")
    run(first, f":save hf:{tmp_path / 'hf'}")
    second = session_on()
    second.checkpoint_dir = tmp_path / "ck"
    run(second, f":load hf:{tmp_path / 'hf'}")
    return second


# --- a Hugging Face model kept as a lab checkpoint ---------------------------------------------------------
def test_a_hugging_face_model_saved_as_a_checkpoint_loads_as_trained_weights_not_random_ones(tmp_path):
    second = loaded_from_a_folder(tmp_path)
    assert second.trainer.step == 0 and not second.untrained
    run(second, ":save gpt")  # README: ":save NAME keeps it as a lab checkpoint"
    third = session_on()
    third.checkpoint_dir = tmp_path / "ck"
    run(third, ":load gpt")
    assert third.trainer.step == 0 and not third.untrained  # was: "not trained yet, so its text is random"
    assert "has not trained yet" not in plain(run(third, ":gen hello n=3"))
    fresh = session_on()  # a model saved before any training is still called untrained when loaded
    fresh.checkpoint_dir = tmp_path / "ck"
    run(fresh, ":gen n=1")
    run(fresh, ":save blank")
    run(third, ":load blank")
    assert third.untrained and "has not trained yet" in plain(run(third, ":gen hello n=3"))


# --- a Hugging Face folder with the session's data ----------------------------------------------------------
def test_data_a_hugging_face_folder_cannot_read_is_said_as_such_and_no_contradiction_from_the_shell(tmp_path,
                                                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = session_on()
    run(first, ":train steps=1")
    run(first, f":save hf:{tmp_path / 'hf'}")  # a character tokenizer of pydoc's 103 symbols
    (tmp_path / "uni.txt").write_text("héllo wörld ☃ " * 300)
    session = session_on("uni.txt")
    loaded = run(session, f":load hf:{tmp_path / 'hf'}")
    assert "3 characters not in the vocabulary: 'é' 'ö' '☃'" in loaded.data_missing
    assert "training needs text it reads (uni.txt: " in plain(loaded)
    with pytest.raises(UserError, match="the data was not read by it \\(uni.txt: 3 characters not in the vocabulary"):
        run(session, ":train steps=1")  # was: "the data is a task of characters", of a text file
    task = session_on("sort")
    run(task, f":load hf:{tmp_path / 'hf'}")
    with pytest.raises(UserError, match="the data is a task of characters; choose text data"):
        run(task, ":train steps=1")
    # From the shell --data is the session's data, which the folder reads or not: no "was trained on 'hf:...'"
    shell = invoke("--data", "sort", "--load", f"hf:{tmp_path / 'hf'}", "gen", "--n", "2", "ab")
    assert shell.exit_code == 0, shell.output
    assert "--load: data: hf:" in shell.stderr and "training needs text data" in shell.stderr
    assert "was trained on" not in shell.stderr
    # a seed that writes a character: a drawn one wrote only whitespace one time in many, whose notice is a line more
    ok = invoke("--data", "pydoc", "--load", f"hf:{tmp_path / 'hf'}", "gen", "--n", "2", "--seed", "1", "ab")
    assert ok.exit_code == 0 and ok.stderr.count("\n") == 1, ok.output  # read: only gen's own summary line


# --- :load PATH ------------------------------------------------------------------------------------------------
def test_load_given_a_path_says_how_to_load_what_is_there_not_to_rename_it(tmp_path):
    first = session_on()
    first.checkpoint_dir = tmp_path / "elsewhere"
    run(first, ":train steps=1")
    run(first, ":save mine")
    run(first, f":save hf:{tmp_path / 'hf'}")
    session = session_on()
    session.checkpoint_dir = tmp_path / "ck"
    with pytest.raises(UserError, match=f"is a checkpoint in another folder, and checkpoints load by name from "
                                        f"{tmp_path / 'ck'}; :set checkpoint_dir={tmp_path / 'elsewhere'} then "
                                        f":load mine$"):
        run(session, f":load {tmp_path / 'elsewhere' / 'mine'}")  # was: "not a valid checkpoint name; use ... run1"
    with speaking(SHELL), pytest.raises(UserError, match=f"is a checkpoint in another folder, and checkpoints load "
                                                         f"by name from {tmp_path / 'ck'}; start minitf with its "
                                                         f"folder: minitf --checkpoint-dir {tmp_path / 'elsewhere'} "
                                                         f"--load mine$"):
        run(session, f":load {tmp_path / 'elsewhere' / 'mine'}")  # a one-shot session's folder is its option
    with pytest.raises(UserError, match=f"is a Hugging Face folder; :load hf:{tmp_path / 'hf'} loads it$"):
        run(session, f":load {tmp_path / 'hf'}")
    with pytest.raises(UserError, match="is not a valid checkpoint name but a path; give a name from .* "
                                        "\\(:ls lists them\\)"):
        run(session, ":load ../nothing")
    session.checkpoint_dir = tmp_path / "elsewhere"
    with pytest.raises(UserError, match="is a path, and a checkpoint loads by its name: :load mine$"):
        run(session, f":load {tmp_path / 'elsewhere' / 'mine'}")
    assert not session.has_model  # nothing was loaded by any of them
    line = assert_one_error_line(invoke("--load", str(tmp_path / "hf"), "gen"))
    assert line.startswith("error: --load: ")
    assert line.endswith(f"is a Hugging Face folder; minitf --load hf:{tmp_path / 'hf'} loads it")


# --- a Hugging Face folder inside the checkpoint folder -----------------------------------------------------
def test_a_hugging_face_folder_among_the_checkpoints_is_never_called_incomplete_or_to_be_removed(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path / "ck"
    run(session, ":train steps=1")
    run(session, f":save hf:{tmp_path / 'ck' / 'gpt'}")  # where a user keeps models: beside the checkpoints
    listed = run(session, ":ls")
    row = next(r for r in listed.rows if r.name == "gpt")
    assert row.error == f"{tmp_path / 'ck' / 'gpt'} is a Hugging Face folder, not a lab checkpoint; load it as " \
                        f"hf:{tmp_path / 'ck' / 'gpt'}"  # was: "not a complete checkpoint; ... remove that directory"
    assert "remove that directory" not in plain(listed)
    with pytest.raises(UserError, match="is a Hugging Face folder, not a lab checkpoint; load it as hf:"):
        run(session, ":load gpt")
    run(session, f":load hf:{tmp_path / 'ck' / 'gpt'}")  # as the message says
    (tmp_path / "ck" / "empty").mkdir()
    assert "remove that directory" in next(r.error for r in run(session, ":ls").rows if r.name == "empty")


# --- a trained model that cannot be kept before a rebuild -----------------------------------------------------
def test_a_rebuild_that_cannot_keep_the_trained_model_names_the_setting_that_skips_keeping(tmp_path, monkeypatch):
    from minitf_repl.commands import shared

    session = session_on()
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=1")

    def read_only(*args, **kwargs):
        raise UserError(f"cannot write in {tmp_path} (permission denied)")

    monkeypatch.setattr(shared, "save_session", read_only)
    with pytest.raises(UserError, match="turn autosave off to rebuild without keeping it: :set autosave=off$"):
        run(session, ":set n_layers=2")  # was: no way named to turn it off
    assert session.model_config.n_layers == 1 and session.trainer.step == 1  # nothing changed
    run(session, ":set autosave=off")
    run(session, ":set n_layers=2")  # as the message says
    assert session.model_config.n_layers == 2


# --- :ls's times --------------------------------------------------------------------------------------------
@pytest.fixture
def berlin(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_ls_shows_when_a_checkpoint_was_saved_in_local_time_not_utc_read_as_local(berlin):
    from minitf_repl.commands.checkpoints import LsResult, local_minute
    from minitf_repl.core.checkpoint import CheckpointInfo

    row = CheckpointInfo("run1", 5, 1.5, "pydoc", 1024, "2026-12-04T16:22:47.124Z")
    assert "2026-12-04 17:22" in plain(LsResult([row], "ck"))  # was 16:22: UTC, with nothing to say so
    assert local_minute("2026-07-01T23:59:00.000Z") == "2026-07-02 01:59"  # summer time, and the date moves
    assert local_minute("not a time") == "not a time" and local_minute(None) == ""


# --- :load and the session's training settings -------------------------------------------------------------
def test_load_says_which_training_settings_the_checkpoints_run_brought_in_place_of_the_sessions(tmp_path):
    first = session_on()
    first.checkpoint_dir = tmp_path
    run(first, ":train steps=1")
    run(first, ":save base")
    session = session_on()
    session.checkpoint_dir = tmp_path
    run(session, ":set batch_size=4 lr=0.003")
    loaded = run(session, ":load base")
    assert session.train_config.batch_size == 2 and session.train_config.lr == 0.01  # the run's, as before
    assert loaded.train_changed == {"batch_size": (4, 2), "lr": (0.003, 0.01)}  # was: changed without a word
    assert "training settings of the checkpoint's run: batch_size 4 -> 2, lr 0.003 -> 0.01; :set KEY=VALUE changes " \
           "them" in plain(loaded)
    again = run(session, ":load base")
    assert again.train_changed == {} and "training settings" not in plain(again)


# --- the recipe line of :set optimizer= -----------------------------------------------------------------------
def test_the_recipe_line_of_set_names_a_setting_in_the_syntax_of_where_it_was_typed():
    shell = invoke("set", "optimizer=adamw")
    assert shell.exit_code == 0, shell.output
    out = " ".join(shell.stdout.split())
    assert "lr 0.01 -> 0.006, warmup_steps 10 -> 150; --set lr=0.01 sets one back" in out
    assert ":set" not in out  # was: "; :set them to keep your own", REPL syntax from the shell
    assert "; :set lr=0.01 sets one back" in plain(run(session_on(), ":set optimizer=adamw"))


# --- :parity without a model, from the shell ------------------------------------------------------------------
def test_parity_without_a_model_names_the_global_load_from_the_shell(tmp_path):
    line = assert_one_error_line(invoke("parity", f"hf:{tmp_path}"))
    # a folder that is no model says so first (50th session): the load it was offered failed on that; a model's folder
    # is offered the one line that loads and compares (test_hf_sweep_be)
    assert line.startswith(f"error: {tmp_path} has no config.json"), line
    with pytest.raises(UserError, match="has no config.json"):
        run(session_on(), f":parity hf:{tmp_path}")


def test_save_given_a_path_says_where_checkpoints_go_and_how_to_write_a_folder_there(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path / "ck"
    run(session, ":train steps=1")
    with pytest.raises(UserError, match=f"is not a valid checkpoint name but a path: a checkpoint is saved by its name "
                                        f"in {tmp_path / 'ck'} \\(to save into {tmp_path}: :set checkpoint_dir="
                                        f"{tmp_path}, then :save mine\\); to write a Hugging Face folder at that path, "
                                        f"give hf:{tmp_path / 'mine'}$"):
        run(session, f":save {tmp_path / 'mine'}")  # was: "use up to 100 ASCII letters ... (for example run1)"
    with speaking(SHELL), pytest.raises(UserError, match="\\(start minitf with --checkpoint-dir DIR for another "
                                                         "folder\\); to write a Hugging Face folder"):
        run(session, f":save {tmp_path / 'mine'}")
    assert not (tmp_path / "mine").exists() and sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["autosave"]
    run(session, f":save hf:{tmp_path / 'mine'}")  # as it says
    assert (tmp_path / "mine" / "config.json").is_file()


# --- the same data chosen again ----------------------------------------------------------------------------------
def test_choosing_the_data_in_use_again_keeps_what_was_measured_on_it():
    session = session_on("sort:2")
    run(session, ":train steps=12 eval_every=4")
    before = run(session, ":ngram n=2")
    assert before.rows[0].model_below_at is not None and session.counters
    run(session, ":data sort:2")
    after = run(session, ":ngram n=2")  # was: "not yet" in every row, under "the model is below every counter"
    assert [r.model_below_at for r in after.rows] == [r.model_below_at for r in before.rows]
    run(session, ":ngram n=2")
    assert len(session.history_on_data) == 12
    run(session, ":data reverse:2")  # other data of the same vocabulary: the model stays, its history was not of it
    assert session.history_on_data == [] and session.counters == []


def test_load_with_data_naming_the_checkpoints_task_by_another_spelling_is_no_contradiction(tmp_path):
    folder = str(tmp_path / "ck")
    made = invoke(*CLI_TINY, "--data", "sort", "--checkpoint-dir", folder, "train", "--steps", "1", "--save", "s")
    assert made.exit_code == 0, made.output
    ok = invoke("--checkpoint-dir", folder, "--load", "s", "--data", "sort:6", "gen", "--n", "2", "123456=")
    assert ok.exit_code == 0, ok.output  # was: "trained on 'sort', not 'sort:6'", the same task
    for other in ("sort:5", "reverse", "sort:x"):
        line = assert_one_error_line(invoke("--checkpoint-dir", folder, "--load", "s", "--data", other, "gen"))
        assert f"was trained on 'sort', not '{other}'; drop --data" in line


# --- left by the sweep, fixed after it -------------------------------------------------------------------------
def test_a_rebuild_of_loaded_hugging_face_weights_says_how_to_load_them_back(tmp_path):
    from test_commands import Recorder

    second = loaded_from_a_folder(tmp_path)
    heard = Recorder()
    result = run(second, ":set n_layers=3", heard)
    assert result.rebuilt and result.kept is None  # step 0: nothing of the lab's to keep, the folder holds them
    assert heard.notices == [f"the weights loaded from hf:{tmp_path / 'hf'} go with the rebuild; "
                             f":load hf:{tmp_path / 'hf'} brings them back"]
    run(second, f":load hf:{tmp_path / 'hf'}")
    run(second, ":save gpt")
    heard = Recorder()
    run(second, ":data sort", heard)  # another vocabulary: a rebuild too, and the checkpoint holds the weights
    assert heard.notices[0].endswith("go with the rebuild; :load gpt brings them back")
    heard = Recorder()
    run(second, ":set n_layers=1", heard)  # fresh weights now: nothing loaded goes
    assert not any("go with the rebuild" in line for line in heard.notices)


def test_set_names_the_command_for_device_and_data_and_one_word_for_a_spaced_pair_from_the_shell():
    for key in ("device", "data"):  # any command's name given as an option: the command, in the front end's syntax
        with pytest.raises(UserError, match=f"^{key} is not an option of :set but a command: :{key} cpu$"):
            run(session_on(), f":set {key}=cpu")
        line = assert_one_error_line(invoke("--set", f"{key}=x", "config"))
        assert line.endswith(f"{key} is not an option of --set but a command: --{key} x")
    with pytest.raises(UserError, match="^checks is not an option of :train but a command: :checks$"):
        run(session_on(), ":train --checks")
    for spaced in ("lr = 0.02", "lr =0.02"):
        line = assert_one_error_line(invoke("--set", spaced, "config"))
        assert line == "error: --set: a setting and its value go as one word: --set lr=0.02"
    assert "needs a value, got 'lr' alone" in assert_one_error_line(invoke("--set", "lr =", "config"), code=2)
