"""The checkpoint folder as a shell setting: `:set checkpoint_dir=DIR` moves the REPL's session to another folder.

Before it, the folder was fixed when minitf started (--checkpoint-dir, $MINITF_CHECKPOINT_DIR, ./checkpoints): a user
who wanted a checkpoint elsewhere, or whose folder filled up mid-session, had to restart and lose the session's model
(tests/test_sweep_m7.py has the full folder). From the shell the folder stays minitf's own option, which --load reads.
"""

import os

import pytest
import torch

from test_cli import assert_one_error_line, invoke
from test_commands import Recorder, run, tiny_session
from test_sweep_aw import completed

from minitf_repl.core.errors import UserError


def refusal(session, line: str) -> str:
    with pytest.raises(UserError) as e:
        run(session, line)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_set_checkpoint_dir_moves_saves_listing_and_loading_and_keeps_the_model(tmp_path, monkeypatch, checkpoint_dir):
    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=2")
    run(s, ":save first")
    idx = torch.tensor([[1, 2, 3, 4]])
    before, step = s.model.eval()(idx)[0], s.trainer.step
    result = run(s, ":set checkpoint_dir=runs")  # relative: to the folder minitf runs in, kept absolute
    assert result.changed == {"checkpoint_dir": (str(checkpoint_dir), str(tmp_path / "runs"))}
    assert not result.rebuilt and s.checkpoint_dir == tmp_path / "runs"
    assert torch.equal(s.model.eval()(idx)[0], before) and s.trainer.step == step
    assert s.unsaved_step is None  # saved as `first` in the folder before: still in a checkpoint, not lost at :quit
    assert run(s, ":ls").rows == []
    run(s, ":save second")
    assert (tmp_path / "runs" / "second").is_dir() and not (checkpoint_dir / "second").exists()
    assert [row.name for row in run(s, ":ls").rows] == ["second"]
    assert run(s, ":config").checkpoints["dir"] == str(tmp_path / "runs")
    with pytest.raises(UserError, match="no checkpoint named 'first'|'first'"):
        run(s, ":load first")
    run(s, f":set checkpoint_dir={checkpoint_dir}")  # back: the first folder's checkpoints load again
    run(s, ":load first")
    assert s.trainer.step == step


def test_the_notice_says_what_the_new_folder_holds_and_a_new_one_is_made_by_the_first_save(tmp_path):
    s = tiny_session()
    heard = Recorder()
    run(s, f":set checkpoint_dir={tmp_path / 'new'}", heard)
    assert heard.notices == [f"checkpoints now go to {tmp_path / 'new'}, which the first :save NAME or autosave makes"]
    assert not (tmp_path / "new").exists()
    run(s, ":train steps=1")  # its autosave makes it
    assert (tmp_path / "new" / "autosave").is_dir()
    heard = Recorder()
    run(tiny_session(), f":set checkpoint_dir={tmp_path / 'new'}", heard)
    assert heard.notices == [f"checkpoints now go to {tmp_path / 'new'}: it holds 1 checkpoint (:ls lists them)"]
    heard = Recorder()
    run(s, f":set checkpoint_dir={tmp_path}", heard)  # one level too high: the folder of checkpoints in it is named
    assert heard.notices == [f"checkpoints now go to {tmp_path}: it holds no checkpoint yet, but new in it holds "
                             f"some: :set checkpoint_dir={tmp_path / 'new'} reads them; the model is kept"]


def test_a_folder_no_save_could_use_is_refused_and_nothing_changes(tmp_path, checkpoint_dir):
    s = tiny_session()
    (tmp_path / "afile").write_text("x")
    assert refusal(s, f":set checkpoint_dir={tmp_path / 'afile' / 'sub'}") == (
        f"{tmp_path / 'afile'} is a file, not a directory; give checkpoint_dir another folder")
    run(s, ":train steps=1")
    run(s, f":set checkpoint_dir={tmp_path / 'ck'}")
    run(s, ":save m1")
    said = refusal(s, f":set checkpoint_dir={tmp_path / 'ck' / 'm1'}")  # a checkpoint, not a folder of them
    assert said == (f"{tmp_path / 'ck' / 'm1'} is itself a checkpoint, not a folder of checkpoints; "
                    f":set checkpoint_dir={tmp_path / 'ck'} then :load m1 loads it")
    assert "needs a value" in refusal(s, ":set checkpoint_dir=")
    assert s.checkpoint_dir == tmp_path / "ck"


def test_a_path_given_as_a_name_is_told_how_to_save_or_load_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=1")
    said = refusal(s, ":save runs/m1")
    assert "(to save into runs: :set checkpoint_dir=runs, then :save m1)" in said, said
    run(s, ":set checkpoint_dir=runs")
    run(s, ":save m1")  # the line said works
    run(s, ":set checkpoint_dir=checkpoints")
    said = refusal(s, ":load runs/m1")
    assert said.endswith("; :set checkpoint_dir=runs then :load m1"), said
    assert ":set checkpoint_dir=DIR for another folder" in refusal(s, ":save ./x")  # no folder of its own to name


def test_the_shell_gives_the_folder_as_its_own_option_which_load_reads(tmp_path):
    # --set applies after --load, which reads the folder: refused first, the line as typed with the option in its place
    line = assert_one_error_line(invoke("--data", "sort", "--set", "lr=0.02 checkpoint_dir=runs", "--load", "m", "gen"))
    assert line == ("error: --set: from the shell checkpoint_dir is minitf's own option, read before --load: "
                    "minitf --checkpoint-dir runs --data sort --set lr=0.02 --load m gen"), line
    line = assert_one_error_line(invoke('--set=checkpoint_dir="my runs"', "train", "--steps", "5"))
    assert line.endswith("read before --load: minitf --checkpoint-dir 'my runs' train --steps 5"), line
    line = assert_one_error_line(invoke("--data", "sort", "set", "checkpoint_dir=runs"))
    assert line.endswith("read before --load (which then loads from that folder), e.g. minitf --data sort "
                         "--checkpoint-dir runs ls"), line
    shown = invoke("set", "checkpoint_dir")  # its usage from the shell is the option, not --set
    assert shown.exit_code == 0 and "--checkpoint-dir DIR, before the command" in shown.output
    assert "--set checkpoint_dir" not in shown.output
    assert "checkpoint_dir" not in invoke("set", "--help").output  # its keys: those --set takes


def test_tab_offers_the_usual_folder_then_the_folders_on_disk(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs_a").mkdir()
    (tmp_path / "runs_b.txt").write_text("x")
    assert completed(":set checkpoint_d") == [":set checkpoint_dir="]
    assert completed(":set checkpoint_dir=") == [":set checkpoint_dir=checkpoints"]
    assert completed(":set checkpoint_dir=ru") == [":set checkpoint_dir=runs_a/"]  # folders, not files


def test_a_session_made_with_a_shell_config_takes_its_folder_unless_given_one(tmp_path, monkeypatch, checkpoint_dir):
    from minitf_repl.session import Session, ShellConfig

    monkeypatch.chdir(tmp_path)
    assert Session().checkpoint_dir == checkpoint_dir  # $MINITF_CHECKPOINT_DIR (conftest), as minitf starts
    assert Session(shell_config=ShellConfig(checkpoint_dir="mine")).checkpoint_dir == tmp_path / "mine"
    assert Session(checkpoint_dir="given", shell_config=ShellConfig(checkpoint_dir="mine")).checkpoint_dir == \
        tmp_path / "given"
    with pytest.raises(UserError, match="checkpoint_dir is empty"):
        ShellConfig(checkpoint_dir="  ")


# --- found by a look at the feature, each failing before its fix ------------------------------------------------------
def test_a_folder_the_system_refuses_or_a_value_that_is_no_folder_is_refused_and_nothing_changes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    before = s.checkpoint_dir
    said = refusal(s, f":set checkpoint_dir={'x' * 300}")  # was an internal error, the folder changed all the same
    assert "a name in that path is too long for the file system; give checkpoint_dir another folder" in said
    assert refusal(s, ":set checkpoint_dir=none").startswith("checkpoint_dir=none would be a folder named none; "
                                                              "give a folder (:set checkpoint_dir=./none")
    assert refusal(s, ":set checkpoint_dir=~nosuchuser7/x") == (  # was: "$HOME is not set", with $HOME set
        "checkpoint_dir=~nosuchuser7/x starts with ~nosuchuser7, the home folder of a user nosuchuser7, and there is "
        "no such user here; give the path in full")
    assert s.checkpoint_dir == before
    run(s, ":set checkpoint_dir=./a/../b")
    assert s.checkpoint_dir == tmp_path / "b"
    assert run(s, ":set checkpoint_dir=b/../b").changed == {}  # the same folder by another spelling


def test_a_rebuild_after_a_move_keeps_the_model_in_the_new_folder_where_load_finds_it(tmp_path):
    s = tiny_session()
    run(s, ":train steps=2")
    run(s, ":save m")  # this model, in the first folder
    heard = Recorder()
    name = run(s, f":set checkpoint_dir={tmp_path / 'B'} n_layers=2", heard).kept  # moved and rebuilt in one line
    assert name.startswith("kept-") and (tmp_path / "B" / name).is_dir()  # was: the old folder, `:load` finding none
    assert heard.notices == [f"checkpoints now go to {tmp_path / 'B'}: it holds 1 checkpoint (:ls lists them)"]
    run(s, f":load {name}")
    assert s.trainer.step == 2 and s.model_config.n_layers == 1


def test_a_rebuild_in_the_new_folder_copies_a_model_saved_in_the_old_one(tmp_path):
    s = tiny_session()
    run(s, f":set checkpoint_dir={tmp_path / 'A'}")
    run(s, ":train steps=2 save=m")
    run(s, f":set checkpoint_dir={tmp_path / 'B'}")
    run(s, ":train steps=1 save=m")  # another model named m, in B
    run(s, ":load m")
    run(s, f":set checkpoint_dir={tmp_path / 'A'}")
    run(s, ":load m")  # A's m, at step 2: kept by its checkpoint in A
    run(s, f":set checkpoint_dir={tmp_path / 'B'}")
    kept = run(s, ":set n_layers=2").kept
    assert kept.startswith("kept-"), kept  # was "m": `:load m` then loaded B's m, another model
    run(s, f":load {kept}")
    assert s.trainer.step == 2


def test_a_suggested_line_quotes_a_folder_with_a_space(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=1")
    said = refusal(s, ':save "my runs/m4"')
    assert '(to save into my runs: :set checkpoint_dir="my runs", then :save m4)' in said
    assert said.endswith('give "hf:my runs/m4"'), said
    run(s, ':set checkpoint_dir="my runs"')  # as suggested
    run(s, ":save m4")
    assert (tmp_path / "my runs" / "m4").is_dir()


def test_a_save_suggests_no_folder_the_setting_would_refuse(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    s = tiny_session()
    run(s, ":train steps=1")
    assert "(:set checkpoint_dir=DIR for another folder)" in refusal(s, ":save afile/m")  # a file: not offered
    run(s, f":set checkpoint_dir={tmp_path / 'b'}")
    run(s, ":save m3")
    run(s, f":set checkpoint_dir={tmp_path}")
    assert "(:set checkpoint_dir=DIR for another folder)" in refusal(s, ":save b/m3/x")  # a checkpoint: not offered


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="a folder no one can make: one under /proc")
def test_a_folder_that_cannot_be_made_is_not_said_to_have_been_removed(tmp_path):
    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":set checkpoint_dir=/proc/no-such-folder")
    said = refusal(s, ":save y")
    assert "the folder /proc/no-such-folder cannot be made here" in said and "removed" not in said, said
    assert said.endswith("choose another folder: :set checkpoint_dir=DIR keeps this model and saves there from now on")


def test_ls_of_a_folder_set_one_level_too_high_names_the_folder_of_checkpoints_and_removes_nothing(tmp_path):
    s = tiny_session()
    run(s, ":train steps=1")
    run(s, f":set checkpoint_dir={tmp_path / 'top' / 'checkpoints'}")
    run(s, ":save m")
    (tmp_path / "top" / "notes").mkdir()
    (tmp_path / "top" / "notes" / "sub").mkdir()
    run(s, f":set checkpoint_dir={tmp_path / 'top'}")
    errors = {row.name: row.error for row in run(s, ":ls").rows}
    assert errors["checkpoints"] == (f"{tmp_path / 'top' / 'checkpoints'} is a folder of checkpoints, not a "
                                     "checkpoint; use it as the checkpoint folder to load them")
    assert "remove" not in errors["notes"] and "it holds folders" in errors["notes"]  # was: "...remove that directory"
