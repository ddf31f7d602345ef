"""What the sweep of the items left for this session (LETTER am) found: each test failed before its fix.

A data file whose path held a tab or a newline was read by `:data` (and `--data`), trained on and saved, and its
checkpoint was then refused at every `:load` as "data_spec is missing or not printable text; this file was not written
by minitf": the work could not be loaded. Such a path is now refused where the data is named (`:data`, `--data`,
core's load_data), in one line that names the character and the fix (rename the file), before any training; and
save_checkpoint refuses to write a manifest that a load would refuse.
"""

import pytest

from minitf_repl.core.errors import CheckpointError, DataError

from test_commands import TEXT, run, tiny_session


# --- a data path that a checkpoint cannot keep ------------------------------------------------------------------
@pytest.mark.parametrize("odd, said", [("\t", "a tab"), ("\n", "a newline")])
def test_a_data_path_holding_a_tab_or_newline_is_refused_where_it_is_named_not_at_load(tmp_path, odd, said):
    path = tmp_path / f"my{odd}notes.txt"
    path.write_text(TEXT, encoding="utf-8")
    session = tiny_session()
    session.checkpoint_dir = tmp_path / "ck"
    escaped = ascii(odd)[1:-1]
    with pytest.raises(DataError) as e:
        run(session, f':data "{tmp_path}/my{escaped}notes.txt"')
    assert f"my{escaped}notes.txt holds {said}" in str(e.value) and "rename the file" in str(e.value)
    assert "\n" not in str(e.value)  # one line: the newline is shown as \n
    assert session.data_spec == "sort:4"  # the session goes on with its data
    run(session, ":train steps=2")
    run(session, ":save mine")
    assert run(session, ":load mine").step == 2


def test_save_checkpoint_refuses_a_data_spec_its_load_would_refuse(tmp_path):
    from minitf_repl.core.checkpoint import save_checkpoint

    session = tiny_session()
    with pytest.raises(CheckpointError, match="holds a tab, which a checkpoint cannot keep"):
        save_checkpoint(tmp_path, "t", session.model, session.trainer, session.data.tokenizer.vocab, "a\tb.txt")
    assert not (tmp_path / "t").exists()


def test_the_shell_refuses_a_data_path_with_a_tab_in_one_line(tmp_path):
    from test_cli import assert_one_error_line, invoke

    path = tmp_path / "a\tb.txt"
    path.write_text(TEXT, encoding="utf-8")
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "--data", str(path), "train", "--steps", "1"))
    assert "a\\tb.txt holds a tab" in line
