"""The checkpoint folder as a shell setting: `:set checkpoint_dir=DIR` moves the REPL's session to another folder.

Before it, the folder was fixed when minitf started (--checkpoint-dir, $MINITF_CHECKPOINT_DIR, ./checkpoints): a user
who wanted a checkpoint elsewhere, or whose folder filled up mid-session, had to restart and lose the session's model
(tests/test_sweep_m7.py has the full folder). From the shell the folder stays minitf's own option, which --load reads.
"""

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
    assert heard.notices == [f"checkpoints now go to {tmp_path / 'new'}, which the first :save NAME or autosave makes; "
                             "the model is kept"]
    assert not (tmp_path / "new").exists()
    run(s, ":train steps=1")  # its autosave makes it
    assert (tmp_path / "new" / "autosave").is_dir()
    heard = Recorder()
    run(tiny_session(), f":set checkpoint_dir={tmp_path / 'new'}", heard)
    assert heard.notices == [f"checkpoints now go to {tmp_path / 'new'}: it holds 1 checkpoint (:ls lists them); "
                             "the model is kept"]


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
    line = assert_one_error_line(invoke("--data", "sort", "--set", "lr=0.02 checkpoint_dir=runs", "ls"))
    # the line names --checkpoint-dir in place of the pair, and keeps the rest of that --set
    assert line.endswith("read before --load: minitf --data sort --set lr=0.02 --checkpoint-dir runs ls"), line
    line = assert_one_error_line(invoke("--data", "sort", "set", "checkpoint_dir=runs"))
    assert line.endswith("minitf --data sort --checkpoint-dir runs ls"), line


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
