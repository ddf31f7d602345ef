"""What this session's own sweep of the known, unfixed items found: each test failed before its fix.

`:load` after a `:train` whose autosave failed (a full disk) replaced the trained model without a word: the steps
trained were in no checkpoint and were gone. The model is now kept first, as before a rebuild (kept-<time>), and
the load says so; where that save fails too, the load refuses and nothing changes.
"""

import pytest

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.errors import UserError

from test_commands import run, tiny_session
from test_render import plain
from test_sweep_n import autosaves_fail


# --- :load over a model its autosave could not keep ------------------------------------------------------------
def test_load_keeps_a_model_whose_autosave_failed_before_replacing_it(checkpoint_dir, monkeypatch):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save first")
    autosaves_fail(monkeypatch)
    run(s, ":train steps=4")  # to step 7, its autosave fails: the model is in no checkpoint
    assert s.unsaved_step == 7
    result = run(s, ":load first")
    assert s.trainer.step == 3 and result.kept and result.kept.startswith("kept-")
    kept = {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert kept[result.kept] == 7
    text = " ".join(plain(result).split())
    assert f"the model trained to step 7 was in no checkpoint: kept as {result.kept} (:load {result.kept} brings " \
           "it back)" in text, text


def test_load_refuses_when_the_unsaved_model_cannot_be_kept_either(checkpoint_dir, monkeypatch):
    import errno

    from minitf_repl.core.checkpoint import store

    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save first")
    write = store.write_file

    def full(path, data):  # every new checkpoint fails now, as on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "write_file", full)
    run(s, ":train steps=2")
    with pytest.raises(UserError) as e:
        run(s, ":load first")
    message = str(e.value)
    assert s.trainer.step == 5, "the unsaved model stays"
    assert "step 5" in message and "nothing changed" in message and "autosave=off" in message, message
    monkeypatch.setattr(store, "write_file", write)


def test_load_with_autosave_off_replaces_the_model_as_the_user_chose(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save first")
    run(s, ":set autosave=off")
    run(s, ":train steps=2")
    result = run(s, ":load first")
    assert s.trainer.step == 3 and result.kept is None
    assert not [row for row in ckpt.list_checkpoints(checkpoint_dir) if row.name.startswith("kept-")]
