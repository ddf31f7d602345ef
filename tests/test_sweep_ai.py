"""The range the package claims: Python 3.10 to 3.13 and torch 2.9 up to 3, each test failing before its fix.

A model trained on `pydoc` (the default data: Python's own documentation, pydoc_data.topics) and saved under Python 3.11
could not be trained again under 3.10, 3.12 or 3.13, whose documentation has one character more: `:train` said "the
data this model was trained on (pydoc) cannot be used (its vocabulary changed since the checkpoint was saved); put the
original file back to train", and there is no file to put back. It now says that this Python's documentation has
other characters than that of the Python the model was trained under, and to train it under that Python.

Under torch 2.9, `torchrun --nproc_per_node=2 -m minitf_repl train --json` wrote "[Gloo] Rank 0 is connected to 1 peer
ranks. Expected number of connected peer ranks is : 1" on standard output before its one JSON document (gloo's C++
says it as a rank joins the group; rank 1, which says nothing, said it too), so a script reading the JSON failed.
Standard output is silenced while the group forms: rank 0 writes its JSON alone, rank 1 nothing.
"""

import os

import pytest
import torch

from minitf_repl.core import data as core_data
from minitf_repl.core import distributed
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


def test_joining_the_process_group_writes_nothing_on_standard_output(monkeypatch, capfd):
    def init_process_group(backend):  # what torch 2.9's gloo does, from C++: straight to descriptor 1
        os.write(1, b"[Gloo] Rank 0 is connected to 1 peer ranks. Expected number of connected peer ranks is : 1\n")
        joined.append(backend)

    joined = []
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    print("said before", end="")  # Python's buffered output before the group forms still comes out, in order
    distributed.init(torch.device("cpu"))
    os.write(1, b" and after")
    assert joined == ["gloo"]
    assert capfd.readouterr().out == "said before and after"
