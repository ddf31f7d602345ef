"""What a user's-eye sweep of saving and loading (`:save`, `:load`, `:ls`, `hf:PATH`, `:parity`, `--load`) found: each
test failed before its fix.

`:parity hf:PATH` with a lab model of a longer window than the folder's GPT-2 position table (or a RoPE model against
a GPT-2 folder) fed transformers positions it has no row for: an IndexError traceback instead of one line.
`minitf --load NAME --data OTHER` of a checkpoint whose text file is gone was refused with "drop --data (the checkpoint
brings its data)", which it could not: the data OTHER now takes its place when it has the model's vocabulary.
`:save hf:PATH` of a multi-head model spelled n_kv_heads=n_heads (a GQA lesson set back) was refused: "n_kv_heads=2 has
no equivalent in GPT-2 (n_kv_heads=None would be)", which is the same attention; the heads built count now, and the
value :set takes is spelled none.
A Llama folder (a window of 2,048) loaded where the text was too short said so, and `:set max_seq_len=64`, which keeps
RoPE's weights, did not help: `:train` still said "one window needs max_seq_len + 1 = 2049". The text read by the
folder's tokenizer is kept; a window it fits takes it up, a window still too long is named with its own numbers, and
the load's line says `:set max_seq_len=N` is the way.
`:load hf:DIR/NAME` of a lab checkpoint said "has no config.json; give a Hugging Face model folder": it now says the
checkpoint loads by its name (or, in another folder, with --checkpoint-dir), as `:load DIR/NAME` already did.
`:load` said when a checkpoint was saved in UTC ISO 8601 ("saved 2026-12-04T16:22:47.124Z") where `:ls` beside it
shows the local minute ("2026-12-04 17:22" in Berlin): one clock now.
`:load hf:B` after `:load hf:A` on a task (A's tokenizer alone, no text) looked for a file named "hf:A": "training needs
text it reads (hf:A: no such file: hf:A)"; it now says training needs text data.
`:set dropout=0.2` (or attention=sdpa, causal=off) before a `:load` was silently undone: the loaded model brings its
own, and only the training settings were said. The model settings that change no weight are said too (load/4:
model_changed).
`:train save=hf:PATH` and `:train save=DIR/x` were each "not a valid checkpoint name; use up to 100 ASCII letters ...",
where `:save DIR/x` said where checkpoints go: the one says a folder is written after the run, the other as :save does.
`:save` while `:ablate` had a head switched off said nothing of it, and the model loaded back had the head on again: the
save now says the parts switched off are not saved (hooks, not weights) (save/3: ablations).
`minitf save -x` said "a text that starts with - goes after --: minitf save -- -x", which then failed: a new
checkpoint's name cannot start with '-'. It says so at once.
"""

import pytest

from minitf_repl.core.errors import UserError
from test_cli import invoke
from test_commands import TEXT, run, tiny_session


@pytest.fixture
def fox(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    return str(path)


# --- :parity against a folder whose positions the lab's model does not share --------------------------------------
@pytest.mark.parametrize("change", ["max_seq_len=64", "pos_encoding=rope max_seq_len=64"])
def test_parity_with_a_window_past_the_folders_positions_is_one_line(fox, tmp_path, change):
    pytest.importorskip("transformers")
    s = tiny_session(fox)
    run(s, ":train steps=1")
    run(s, f":save hf:{tmp_path / 'hf'}")  # a GPT-2 folder of 32 positions
    run(s, f":set autosave=off {change}")  # the same shapes otherwise, a window of 64
    with pytest.raises(UserError, match="not the model in .*max_seq_len 64 here, 32 there|pos_encoding rope here"):
        run(s, f":parity hf:{tmp_path / 'hf'} prompt='{'the quick brown fox jumps over the lazy dog ' * 2}'")


# --- --load of a checkpoint whose data is gone, with other --data --------------------------------------------------
def test_load_with_other_data_where_the_checkpoints_data_is_gone_trains_on_it(tmp_path, checkpoint_dir):
    gone, other = tmp_path / "gone.txt", tmp_path / "other.txt"
    gone.write_text(TEXT * 3, encoding="utf-8")
    other.write_text(TEXT[::-1] * 3, encoding="utf-8")  # the same characters
    s = tiny_session(str(gone))
    run(s, ":train steps=2")
    run(s, ":save foxy")
    gone.unlink()
    result = invoke("--load", "foxy", "--data", str(other), "train", "steps=1")
    assert result.exit_code == 0, result.output
    assert "drop --data" not in result.stderr and "goes on with" in result.stderr
    assert "(step 3 in total)" in result.stdout  # the loaded model went on, on the other text
    from minitf_repl import cli
    from minitf_repl.session import Session

    loaded = cli.load_checkpoint(Session(data_spec=str(other), checkpoint_dir=str(checkpoint_dir)), "foxy", str(other))
    assert loaded.data_missing is None and loaded.data_spec == str(other)  # what the REPL's greeting shows
    other.write_text("completely different characters: 0123456789 XYZ" * 40, encoding="utf-8")
    bad = invoke("--load", "foxy", "--data", str(other), "train", "steps=1")
    assert bad.exit_code == 1 and "another vocabulary" in bad.stderr and "Traceback" not in bad.stderr


# --- :save hf: of multi-head attention spelled n_kv_heads=n_heads -------------------------------------------------
def test_save_hf_takes_n_kv_heads_equal_to_n_heads_as_gpt2s_attention(tmp_path):
    s = tiny_session()  # n_heads=2
    run(s, ":set n_kv_heads=2")  # a head of keys and values per query head: multi-head attention, as none is
    run(s, ":train steps=1")
    assert run(s, f":save hf:{tmp_path / 'hf'}").architecture == "gpt2"
    run(s, ":set n_kv_heads=1 autosave=off")
    with pytest.raises(UserError, match=r"n_kv_heads=1 has no equivalent in GPT-2.*\(n_kv_heads=none would be\)"):
        run(s, f":save hf:{tmp_path / 'hf2'}")


# --- a Llama folder whose window the session's text is too short for ----------------------------------------------
def test_a_shorter_window_takes_up_the_text_a_llama_folders_window_was_too_long_for(tmp_path):
    from minitf_repl.core.data import TokenizerOnly
    from minitf_repl.core.errors import DataError

    path, long = tmp_path / "short.txt", tmp_path / "long.txt"
    path.write_text(TEXT, encoding="utf-8")  # about 1,000 characters: 104 in the validation split
    long.write_text(TEXT * 25, encoding="utf-8")
    s = tiny_session(str(long))
    run(s, ":set pos_encoding=rope norm=rmsnorm activation=swiglu bias=off max_seq_len=2048 autosave=off")
    s.build()  # untrained: it saves all the same
    run(s, f":save hf:{tmp_path / 'llama'}")  # a window of 2,048
    s2 = tiny_session(str(path))
    loaded = run(s2, f":load hf:{tmp_path / 'llama'}")
    assert "too short" in loaded.data_missing and ":set max_seq_len=N below it reads it" in loaded.data_missing
    run(s2, ":set max_seq_len=2000")  # still too long: said with this window's numbers, not the load's
    with pytest.raises(DataError, match="max_seq_len \\+ 1 = 2001"):
        run(s2, ":train steps=1")
    run(s2, ":set max_seq_len=32")  # RoPE: the weights are kept, and the text fits now
    assert not isinstance(s2.data, TokenizerOnly) and s2.data_spec == str(path)
    assert run(s2, ":train steps=1").steps == 1


# --- hf: given a lab checkpoint's folder ---------------------------------------------------------------------------
def test_load_hf_of_a_lab_checkpoint_says_it_loads_by_name(checkpoint_dir, tmp_path):
    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":save mine")
    with pytest.raises(UserError, match=r"is a path, and a checkpoint loads by its name: :load mine$"):
        run(s, f":load hf:{checkpoint_dir / 'mine'}")
    other = tmp_path / "elsewhere"
    (checkpoint_dir / "mine").rename(other)
    with pytest.raises(UserError, match=r"checkpoint in another folder.*; :set checkpoint_dir=.* then :load elsewhere$"):
        run(s, f":load hf:{other}")


# --- :load's time is :ls's ------------------------------------------------------------------------------------------
def test_load_says_when_the_checkpoint_was_saved_in_local_time_as_ls_does(monkeypatch):
    import time

    from minitf_repl.commands.checkpoints import LoadResult
    from test_render import plain

    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    try:
        result = LoadResult(name="run1", path="ck/run1", step=5, data_spec="pydoc", val_loss=None, model_config={},
                            run_remaining=0, n_params=10, saved_at="2026-12-04T16:22:47.124Z")
        text = plain(result)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert "saved 2026-12-04 17:22, from ck/run1" in text


# --- one folder after another ----------------------------------------------------------------------------------------
def test_a_folder_loaded_after_another_folders_tokenizer_alone_looks_for_no_file_named_hf(tmp_path):
    s = tiny_session()  # sort:4, a task
    run(s, ":set pos_encoding=rope norm=rmsnorm activation=swiglu bias=off autosave=off")
    s.build()
    run(s, f":save hf:{tmp_path / 'a'}")
    s2 = tiny_session("pydoc")  # text whose characters the folder's tokenizer lacks
    first = run(s2, f":load hf:{tmp_path / 'a'}")
    assert first.data_missing is not None and s2.data_spec == f"hf:{tmp_path / 'a'}"
    second = run(s2, f":load hf:{tmp_path / 'a'}")
    assert "no such file" not in second.data_missing and second.data_missing.endswith("training needs text data")


# --- model settings a :load brings ------------------------------------------------------------------------------------
def test_load_says_which_weightless_model_settings_the_loaded_model_brought(checkpoint_dir):
    from test_render import plain

    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":save plain")
    run(s, ":set dropout=0.2 attention=sdpa")
    result = run(s, ":load plain")
    assert s.model_config.dropout == 0.0
    assert result.model_changed == {"dropout": (0.2, 0.0), "attention": ("sdpa", "explicit")}
    text = plain(result)
    assert "model settings of the loaded model: dropout 0.2 -> 0" in text and "attention sdpa -> explicit" in text
    assert run(s, ":load plain").model_changed == {}  # nothing set: nothing said


# --- :train save= given a folder --------------------------------------------------------------------------------------
def test_train_save_given_hf_or_a_path_says_what_save_takes(checkpoint_dir):
    s = tiny_session()
    with pytest.raises(UserError, match=r"a Hugging Face folder is written after it: "
                                        r":train save=run1, then :save hf:x"):
        run(s, ":train steps=1 save=hf:x")
    with pytest.raises(UserError, match=r"'a/b' is not a valid checkpoint name but a path: checkpoints are saved by "
                                        r"name in .*; give a name, e.g. run1$"):
        run(s, ":train steps=1 save=a/b")
    assert s.trainer.step == 0  # refused before any training


# --- :save while :ablate has parts switched off -----------------------------------------------------------------------
def test_save_while_parts_are_switched_off_says_they_are_not_saved(checkpoint_dir, tmp_path):
    from test_render import plain

    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":ablate head=0.1")
    for name in ("ablated", f"hf:{tmp_path / 'hf'}"):
        result = run(s, f":save {name}")
        assert result.ablations == ["head 0.1"]
        assert "switched off now: head 0.1" in plain(result) and "they are not saved" in plain(result)
    run(s, ":ablate off")
    assert run(s, ":save whole").ablations == [] and "switched off" not in plain(run(s, ":save whole"))


# --- minitf save -x --------------------------------------------------------------------------------------------------
def test_save_of_a_dashed_name_from_the_shell_is_not_sent_after_the_double_dash():
    result = invoke("save", "-x")
    assert result.exit_code != 0 and "goes after --" not in result.stderr
    assert "a new checkpoint's name cannot start with '-'" in result.stderr and "e.g. x" in result.stderr
