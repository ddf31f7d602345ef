"""Checkpoints handed out to students (unzipped, moved with their text) and saved by an older minitf."""

from __future__ import annotations

import json
import shutil

import pytest
from checkpoint_worker import rewrite_manifest
from test_cli import assert_one_error_line, invoke
from test_commands import TEXT, Recorder, run, tiny_session

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.dispatch import to_json
from minitf_repl.core.errors import DataError, UserError


def _handed_out(checkpoint_dir, tmp_path, name="lesson1"):
    """A checkpoint saved here, then moved out of the checkpoint folder into a folder of its own (a zip unzipped)."""
    run(tiny_session(steps=1), f":train save={name}")
    here = tmp_path / "unz"
    here.mkdir()
    shutil.move(str(checkpoint_dir / name), str(here / name))
    return here


# --- 1: a checkpoint's folder in the current folder, loaded by its bare name ------------------------------------
def test_load_of_a_checkpoint_folder_here_by_its_name_gives_the_line_that_loads_it(checkpoint_dir, tmp_path,
                                                                                    monkeypatch):
    monkeypatch.chdir(_handed_out(checkpoint_dir, tmp_path))
    with pytest.raises(UserError) as e:
        run(tiny_session(), ":load lesson1")
    said = str(e.value)  # was "no checkpoint named 'lesson1' in ...; save one under that name first"
    assert said == (f"./lesson1 is a checkpoint in another folder, and checkpoints load by name from "
                    f"{checkpoint_dir}; :set checkpoint_dir=. then :load lesson1"), said
    line = assert_one_error_line(invoke("--load", "lesson1", "gen", "12"))
    assert line.endswith("start minitf with its folder: minitf --checkpoint-dir . --load lesson1"), line
    # the line runs as pasted
    ran = invoke("--checkpoint-dir", ".", "--load", "lesson1", "gen", "12", "--n", "2")
    assert ran.exit_code == 0, ran.output


# --- 2: a checkpoint trained on a file, moved with it --------------------------------------------------------------
def _moved_course(tmp_path, monkeypatch, digest=True):
    """A checkpoint trained on course/poem.txt, saved into course/checkpoints, the course folder then moved: the
    manifest names a path that is gone, the very file is in the current folder. `digest` False: its manifest as an
    older minitf wrote it, without data_sha256."""
    course = tmp_path / "course"
    course.mkdir()
    (course / "poem.txt").write_text(TEXT, encoding="utf-8")
    monkeypatch.chdir(course)
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "checkpoints")
    run(tiny_session(str(course / "poem.txt"), steps=2), ":train save=fromfile")
    if not digest:
        rewrite_manifest(course / "checkpoints" / "fromfile", lambda m: m.pop("data_sha256"))
    moved = tmp_path / "student" / "course2"
    moved.parent.mkdir()
    shutil.move(str(course), str(moved))
    monkeypatch.chdir(moved)
    return course / "poem.txt", moved


def test_a_moved_checkpoints_data_is_found_beside_it_by_its_digest(tmp_path, monkeypatch):
    was, moved = _moved_course(tmp_path, monkeypatch)
    session, said = tiny_session(), Recorder()
    result = run(session, ":load fromfile", said)
    assert said.notices == [f"fromfile's data, {was}, found here as ./poem.txt (the same text)"], said.notices
    # was: "the data this model was trained on (.../course/poem.txt) is not available; put the file back..."
    assert result.data_missing is None and session.data_spec == result.data_spec == str(moved / "poem.txt")
    assert run(session, ":train steps=1").steps == 1
    # run from another folder: the file beside the checkpoint folder, by its whole path
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(moved / "checkpoints"))
    said = Recorder()
    run(tiny_session(), ":load fromfile", said)
    assert said.notices == [f"fromfile's data, {was}, found as {moved / 'poem.txt'} (the same text)"], said.notices
    # the Python API reads it too
    from minitf_repl import load_model

    _, data = load_model("fromfile", moved / "checkpoints")
    assert data.text == TEXT


def test_a_file_found_under_the_current_folder_is_not_said_found_here(tmp_path, monkeypatch):
    was, moved = _moved_course(tmp_path, monkeypatch)
    monkeypatch.chdir(moved.parent)  # the folder above the course: the file is under it, not in it
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(moved / "checkpoints"))
    said = Recorder()
    run(tiny_session(), ":load fromfile", said)
    # was "found here as ./course2/poem.txt"
    assert said.notices == [f"fromfile's data, {was}, found as ./course2/poem.txt (the same text)"], said.notices


def test_a_file_of_the_name_with_another_text_is_not_taken(tmp_path, monkeypatch):
    _, moved = _moved_course(tmp_path, monkeypatch)
    (moved / "poem.txt").write_text(TEXT.upper(), encoding="utf-8")
    session = tiny_session()
    result = run(session, ":load fromfile")
    assert "./poem.txt holds another text" in result.data_missing, result.data_missing
    with pytest.raises(DataError, match="cannot be used"):
        run(session, ":train steps=1")


def test_without_a_digest_the_file_of_its_name_is_offered_not_taken(tmp_path, monkeypatch):
    was, moved = _moved_course(tmp_path, monkeypatch, digest=False)
    session, said = tiny_session(), Recorder()
    result = run(session, ":load fromfile", said)
    assert result.data_spec == str(was) and not said.notices  # no guess
    assert result.data_missing.endswith(
        "; :data ./poem.txt reads it in its place (the model is kept where its characters are the same)"), result
    with pytest.raises(DataError, match=r"an older minitf kept no digest.*:data \./poem\.txt reads it"):
        run(session, ":train steps=1")
    kept = session.trainer.step
    run(session, ":data ./poem.txt")  # the line given runs as pasted, and keeps the model
    assert session.trainer.step == kept and run(session, ":train steps=1").total_steps == kept + 1
    # from the shell: the line after --load, and that line runs
    line = assert_one_error_line(invoke("--load", "fromfile", "train", "--steps", "1"))
    # the command typed, again: `minitf --load fromfile --data ./poem.txt`, pasted, opened the REPL
    assert "; minitf --load fromfile --data ./poem.txt train --steps 1 reads it in its place" in line, line
    assert invoke("--load", "fromfile", "--data", "./poem.txt", "train", "--steps", "1").exit_code == 0


def test_the_lookup_says_it_reads_a_large_file_and_builds_no_corpus_of_it(tmp_path, monkeypatch):
    """A 190 MiB poem.txt of another text made `minitf load` take 14 s instead of 4, silently: each candidate was
    read into a whole corpus, and the one found read so twice."""
    from minitf_repl.core import data as core_data

    _, moved = _moved_course(tmp_path, monkeypatch)
    monkeypatch.setattr(core_data, "SLOW_FILE_BYTES", 100)  # TEXT's 1,044 bytes count as a large file
    built, load_data = [], core_data.load_data
    monkeypatch.setattr(core_data, "load_data",
                        lambda spec, *a, **k: built.append(str(spec)) or load_data(spec, *a, **k))
    said = Recorder()
    assert run(tiny_session(), ":load fromfile", said).data_missing is None
    assert said.notices[0].startswith("fromfile's data is not where it was saved; reading poem.txt ("), said.notices
    assert said.notices[1].startswith("fromfile's data, "), said.notices
    assert built.count(str(moved / "poem.txt")) == 1  # read whole once, by the load: the lookup hashes its text
    (moved / "poem.txt").write_text(TEXT.upper(), encoding="utf-8")  # another text: hashed, never built
    built.clear()
    assert "holds another text" in run(tiny_session(), ":load fromfile").data_missing
    assert str(moved / "poem.txt") not in built


def test_a_load_that_found_its_data_beside_it_keeps_the_path_it_was_saved_with(tmp_path, monkeypatch):
    """What the shell's `--load NAME --data OTHER` needs to take the saved data as gone (cli.load_checkpoint)."""
    was, moved = _moved_course(tmp_path, monkeypatch)
    result = run(tiny_session(), ":load fromfile")
    assert result.data_spec == str(moved / "poem.txt") and result.data_saved == str(was)
    assert "data_saved" not in to_json(result)  # the shell's, not the JSON's
    (moved / "poem.txt").unlink()  # not found: read as saved (its vocabulary alone), nothing to say of it
    assert run(tiny_session(), ":load fromfile").data_saved is None


def test_load_with_other_data_where_its_own_was_found_beside_it_goes_on_with_the_other(tmp_path, monkeypatch):
    """The reviewer's case: in a moved course folder, `--load fromfile --data poem2.txt` was refused with "checkpoint
    fromfile was trained on '.../course2/poem.txt'", a path it never trained on; with the data gone, --data had taken
    its place."""
    was, moved = _moved_course(tmp_path, monkeypatch)
    (moved / "poem2.txt").write_text(TEXT[::-1], encoding="utf-8")  # the same characters, another text
    ran = invoke("--load", "fromfile", "--data", "poem2.txt", "gen", "the", "--n", "2")
    assert ran.exit_code == 0, ran.output
    # was "... found here as ./poem.txt (the same text)", then "fromfile's data {was} is not where it was saved"
    assert "--load: fromfile's data, found beside it, is set aside for --data: it goes on with poem2.txt" in \
        ran.stderr and "is not where it was saved" not in ran.stderr, ran.stderr
    # the file found itself, named by --data, is no other data: no switch, no refusal
    ran = invoke("--load", "fromfile", "--data", "poem.txt", "gen", "the", "--n", "2")
    assert ran.exit_code == 0 and "goes on with" not in ran.stderr, ran.output


def test_the_report_names_a_files_data_by_its_file_name(tmp_path, monkeypatch):
    was, moved = _moved_course(tmp_path, monkeypatch)
    session = tiny_session()
    run(session, ":load fromfile")
    result = run(session, ":report page.html")
    page = (moved / "page.html").read_text()
    assert "<title>minitf report: poem.txt, step 2</title>" in page
    assert str(moved) not in page and str(was.parent) not in page  # no path of either machine
    assert "loss by position" in result.sections  # its data was found: the section is there


# --- 3: a zip made on macOS ---------------------------------------------------------------------------------------
def test_ls_passes_over_the_folder_a_macos_zip_adds(checkpoint_dir):
    run(tiny_session(steps=1), ":train save=lesson1")
    (checkpoint_dir / "__MACOSX" / "lesson1").mkdir(parents=True)
    (checkpoint_dir / "__MACOSX" / "lesson1" / "._checkpoint.json").write_bytes(b"\0\5\26\7")
    (checkpoint_dir / "__MACOSX" / "._lesson1").write_bytes(b"\0\5\26\7")
    (checkpoint_dir / ".hidden").mkdir()
    assert [row.name for row in ckpt.list_checkpoints(checkpoint_dir)] == ["lesson1"]  # was also __MACOSX, unreadable
    result = invoke("--checkpoint-dir", str(checkpoint_dir), "ls", "--json")
    assert [row["name"] for row in json.loads(result.stdout)["rows"]] == ["lesson1"], result.output


def test_a_checkpoint_saved_under_the_name_macos_gives_its_folder_is_still_listed(checkpoint_dir):
    run(tiny_session(steps=1), ":train save=__MACOSX")
    assert [row.name for row in ckpt.list_checkpoints(checkpoint_dir)] == ["__MACOSX"]


# --- 4: the report of a checkpoint saved before minitf recorded its dtype -----------------------------------------
def test_the_report_of_a_checkpoint_of_before_trained_dtype_does_not_say_no_step_ran(checkpoint_dir, tmp_path):
    run(tiny_session(steps=3), ":train save=old")
    rewrite_manifest(checkpoint_dir / "old", lambda m: m["trainer"].pop("trained_dtype"))
    session = tiny_session()
    run(session, ":load old")
    run(session, f":report {tmp_path / 'page.html'}")
    page = (tmp_path / "page.html").read_text()
    assert "No training step ran here yet" not in page  # of a model at step 3
    assert "Trained 3 steps before minitf recorded the dtype steps ran in; one would run in " in page



def test_a_file_found_is_named_by_its_normal_path(tmp_path, monkeypatch):
    was, moved = _moved_course(tmp_path, monkeypatch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", f"{elsewhere}/../student/course2/checkpoints")
    said = Recorder()
    run(tiny_session(), ":load fromfile", said)
    # was "found as .../elsewhere/../student/course2/poem.txt"
    assert said.notices == [f"fromfile's data, {was}, found as {moved / 'poem.txt'} (the same text)"], said.notices


def test_the_line_that_reads_a_file_of_its_name_in_its_place_runs_the_command_typed(tmp_path, monkeypatch):
    """`minitf --load fromfile train --steps 5` was told `minitf --load fromfile --data ./poem.txt reads it`, which,
    pasted, opened the REPL (cli.load_checkpoint holds the command typed in typed_after)."""
    from minitf_repl.syntax import SHELL, speaking, typed_after

    _moved_course(tmp_path, monkeypatch, digest=False)
    with speaking(SHELL), typed_after("train --steps 5"):
        result = run(tiny_session(), ":load fromfile")
    assert "; minitf --load fromfile --data ./poem.txt train --steps 5 reads it in its place" in result.data_missing, \
        result.data_missing
