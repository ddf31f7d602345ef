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

A torch older than the 2.9 that pyproject.toml asks for (one pip was told to leave: --no-deps, a conda or system build)
made `minitf train`, `:train`, `minitf gen`, `--load NAME` and every other command that builds a model end in
"internal error: AttributeError: module 'torch.optim' has no attribute 'Muon'". They now say, in one line, "torch 2.8.0
is older than the 2.9 minitf needs (it has no torch.optim.Muon); install a newer one: pip install --upgrade
'torch>=2.9'".

`:embed aeiou0123 map=on` on the default data under Python 3.10, 3.12 and 3.13 (104 characters, so other random rows
than 3.11's 103) drew no "1" on the map while the line under it said "the text's tokens, drawn over any they share a
cell with: a, e, i, o, u, 0, 1, 2, 3": "1" and "3" fell in one cell and the later hid the first. An asked point whose
cell another asked point holds now goes to the nearest free place beside it.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minitf_repl.core import data as core_data
from minitf_repl.core import distributed
from minitf_repl.core.errors import UserError
from minitf_repl.render.scatter import scatter
from minitf_repl.session import Session

from test_commands import TINY, run


def train_refused_on_other_pydoc(monkeypatch, name: str, saved_under: str | None = None) -> str:
    """A tiny pydoc model saved as `name` (under Python `saved_under`, default this one), loaded where pydoc's text
    has one more character, and :train's refusal."""
    import platform

    s = Session(data_spec="pydoc", device_name="cpu")
    run(s, ":set " + " ".join(f"{k}={v}" for k, v in TINY.items()) + " batch_size=2 eval_batches=1")
    run(s, ":train steps=1")
    with monkeypatch.context() as saving:
        if saved_under is not None:
            saving.setattr(platform, "python_version", lambda: saved_under)
        run(s, f":save {name}")
    # 3.10's, 3.12's and 3.13's documentation has a character 3.11's has not (and each release another text)
    this_python = core_data.pydoc_text()
    monkeypatch.setattr(core_data, "pydoc_text", lambda: this_python + "\u00a7")
    again = Session(device_name="cpu")
    run(again, f":load {name}")
    with pytest.raises(UserError) as e:
        run(again, ":train steps=1")
    return str(e.value)


def test_a_pydoc_model_saved_under_another_python_says_so_and_not_put_the_file_back(monkeypatch):
    message = train_refused_on_other_pydoc(monkeypatch, "other_python", saved_under="3.12.1")
    assert "(pydoc)" in message and "put the original file back" not in message, message
    # the Python it was saved under, by name since the manifest keeps it (test_sweep_as)
    assert "the documentation of this Python" in message and "train it under Python 3." in message, message


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


# A new process whose torch is an older one: torch.optim.Muon taken away before minitf is imported
OLDER_TORCH = """
import sys, torch, torch.optim
del torch.optim.Muon
torch.__version__ = "2.8.0"
sys.argv = ["minitf", *sys.argv[1:]]
from minitf_repl.__main__ import main
main()
"""


@pytest.mark.parametrize("args", [("train", "--steps", "1"), ("gen", "hi"), ("params",)])
def test_a_torch_older_than_the_floor_is_one_line_naming_what_to_install(args, tmp_path):
    root = Path(__file__).resolve().parents[1]  # this checkout's minitf_repl, not whichever one is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", OLDER_TORCH, "--data", "sort:4", *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 1 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == ("error: torch 2.8.0 is older than the 2.9 minitf needs "
                                   "(it has no torch.optim.Muon); "
                                   f"install a newer one: {sys.executable} -m pip install --upgrade 'torch>=2.9,<3' "
                                   "--index-url https://download.pytorch.org/whl/cpu (the CPU build; for a GPU, your "
                                   "CUDA build's index)")


def test_every_module_is_python_3_10_syntax():
    """pyproject.toml admits Python 3.10: no `except*`, no 3.11+ syntax anywhere in the package (the suite itself runs
    under 3.11, where such a line would pass unnoticed)."""
    import ast

    package = Path(__file__).resolve().parents[1] / "minitf_repl"
    modules = sorted(package.rglob("*.py"))
    assert len(modules) > 50
    for path in modules:
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 10))
    with pytest.raises(SyntaxError):  # the check sees what 3.10 cannot read
        ast.parse("try:\n    pass\nexcept* ValueError:\n    pass\n", feature_version=(3, 10))


def test_two_asked_points_in_one_cell_are_both_drawn():
    labels, coords = ["a", "b", "c", "你"], [[0, 0], [0, 0], [1, 1], [0, 0]]
    grid, hidden = scatter(labels, coords, asked=[0, 1, 3], width=5, height=3)
    drawn = grid.plain
    assert all(label in drawn for label in ("a", "b", "你")) and hidden == 0, drawn
    bottom = drawn.splitlines()[2]
    assert bottom.startswith("│ab你"), drawn  # side by side, the first where it lies, the others nearest it
    grid, _ = scatter(["x", "y", "z"], [[0, 0]] * 3, asked=[0, 1, 2], width=2, height=2)
    assert grid.plain.splitlines()[:2] == ["│z ", "│xy"]  # a full row: the row nearest it
