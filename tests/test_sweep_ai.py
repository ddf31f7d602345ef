"""The range the package claims: Python 3.10 to 3.13 and torch 2.9 up to 3, each test failing before its fix.

A model trained on `pydoc` (the default data: Python's own documentation, pydoc_data.topics) and saved under Python 3.11
could not be trained again under 3.10, 3.12 or 3.13, whose documentation has one character more: `:train` said "the
data this model was trained on (pydoc) cannot be used (its vocabulary changed since the checkpoint was saved); put the
original file back to train", and there is no file to put back. It now says that this Python's documentation has
other characters than that of the Python the model was trained under, and to train it under that Python.
"""

import pytest

from minitf_repl.core import data as core_data
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session

from test_commands import TINY, run


def test_a_pydoc_model_saved_under_another_python_says_so_and_not_put_the_file_back(monkeypatch):
    s = Session(data_spec="pydoc", device_name="cpu")
    run(s, ":set " + " ".join(f"{k}={v}" for k, v in TINY.items()) + " batch_size=2 eval_batches=1")
    run(s, ":train steps=1")
    run(s, ":save other_python")
    # 3.10's, 3.12's and 3.13's documentation has a character 3.11's has not (and each release another text)
    this_python = core_data.pydoc_text()
    monkeypatch.setattr(core_data, "pydoc_text", lambda: this_python + "\u00a7")
    again = Session(device_name="cpu")
    run(again, ":load other_python")
    with pytest.raises(UserError) as e:
        run(again, ":train steps=1")
    message = str(e.value)
    assert "(pydoc)" in message and "put the original file back" not in message, message
    assert "the documentation of this Python" in message and "train it under that Python" in message, message
