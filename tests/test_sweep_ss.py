"""What a sweep of the one-shot shell's start-up time found: each test failed before its fix.

`minitf --help` and `minitf config` start in about 0.3 s without importing torch, but `minitf ls` took about 1.4 s
(and `minitf ls --json`, `minitf ls all=on` as long): listing reads the checkpoints' JSON manifests only, yet
core/checkpoint/__init__.py imported every module of the package, and those imported torch (and the model) at
module level. The package's names now load on first use (PEP 562), and listing, its manifest checks and the
folder's layout import no torch. The one-line errors of `minitf load` (no name, a name not saved, `hf:` alone),
`minitf save` with no model, `minitf compare` with one contender and `minitf parity` without a folder or a model
took 1.6-1.7 s each for the same reason (core.hf, the loader, the comparison engine, torch.distributed asked for
the rank); they now say it in 0.3 s. Each test runs the command in a subprocess and asserts torch was not imported
(no wall-clock assertion: the machine's load would make one flaky).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest


def _one_shot(tmp_path, *args, code_env=None):
    """Run `minitf ARGS` in a fresh interpreter; return (returncode, stdout, stderr, whether torch was imported)."""
    probe = ("import sys, runpy\nsys.argv = ['minitf'] + sys.argv[1:]\n"
             "try:\n    runpy.run_module('minitf_repl', run_name='__main__')\n"
             "finally:\n    sys.stderr.write('\\nTORCH=%s\\n' % ('torch' in sys.modules))\n")
    root = str(Path(__file__).resolve().parents[1])  # this tree's package, not the one the venv installed
    env = dict(os.environ, COLUMNS="100", PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
               **(code_env or {}))
    done = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, stdin=subprocess.DEVNULL, timeout=60)
    torch = done.stderr.rstrip().splitlines()[-1] == "TORCH=True"
    return done.returncode, done.stdout, done.stderr, torch


@pytest.fixture
def saved(checkpoint_dir):
    """checkpoint_dir holding one small real checkpoint, 'first' (saved in this process)."""
    from test_commands import run, tiny_session
    session = tiny_session(steps=1)
    run(session, ":train")
    run(session, ":save first")
    return checkpoint_dir


@pytest.mark.parametrize("args", [("ls",), ("ls", "--json"), ("ls", "all=on")])
def test_ls_does_not_import_torch(tmp_path, saved, args):
    rc, out, err, torch = _one_shot(tmp_path, "--checkpoint-dir", str(saved), *args)
    assert rc == 0, err
    assert "first" in out
    assert not torch, "minitf " + " ".join(args) + " imported torch"


def test_the_checkpoint_package_keeps_its_names_and_modules_and_lists_without_torch():
    """Every public name still imports from the package (and its modules by name: ckpt.store), in a fresh interpreter;
    the listing's names come without torch, loading's bring it."""
    root = str(Path(__file__).resolve().parents[1])
    code = ("import sys\nfrom minitf_repl.core import checkpoint as c\n"
            "from minitf_repl.core.checkpoint import list_checkpoints, check_name, folder_lock, manifest_bytes\n"
            "assert 'torch' not in sys.modules, 'torch imported by listing names'\n"
            "assert all(hasattr(c, n) for n in c.__all__) and set(c.__all__) <= set(dir(c))\n"
            "assert c.store.save_checkpoint is c.save_checkpoint and c.loading.check_manifest_values\n"
            "assert 'torch' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=root))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("args, says", [
    (("load",), "which checkpoint? give its name"),
    (("load", "nosuch"), "no checkpoint named 'nosuch'"),
    (("load", "firts"), "did you mean first?"),
    (("load", "hf:"), "hf: needs a folder after it"),
    (("save",), "there is no model to save yet"),
    (("save", "x"), "there is no model to save yet"),
])
def test_load_and_save_errors_of_the_command_line_do_not_import_torch(tmp_path, saved, args, says):
    """`minitf load` with no name or a name not saved, `minitf save` with no model: one line in 0.3 s, not 1.7 s
    (each imported the Hugging Face package, and load the loader, with torch, before saying what was wrong)."""
    rc, out, err, torch = _one_shot(tmp_path, "--checkpoint-dir", str(saved), *args)
    assert rc == (2 if args == ("load",) else 1) and says in err, err  # `load` alone: the line lacks its name, 2
    assert not torch, "minitf " + " ".join(args) + " imported torch"


@pytest.mark.parametrize("args, says", [
    (("compare",), "compare needs at least two contenders"),
    (("compare", "n_layers=3"), "compare needs at least two contenders"),
])
def test_compare_with_too_few_contenders_does_not_import_torch(tmp_path, args, says):
    """`minitf compare` with fewer than two contenders: its one-line error took 1.6 s, importing the comparison's
    engine and loading the data (torch) before counting the contenders."""
    rc, out, err, torch = _one_shot(tmp_path, "--data", "sort:4", *args)
    assert rc == 1 and says in err, err
    assert not torch, "minitf " + " ".join(args) + " imported torch"


@pytest.mark.parametrize("args, says", [
    (("parity",), "give the folder to compare with as hf:PATH"),
    (("parity", "hf:"), "hf: needs a folder after it"),
    (("parity", "hf:/nowhere"), "there is no folder /nowhere"),
    (("parity", "hf:/nowhere", "--tolerance", "2"), "tolerance must be a number in (0, 1]"),
])
def test_parity_errors_of_the_command_line_do_not_import_torch(tmp_path, args, says):
    """`minitf parity` with no folder, `hf:` alone, no model or a tolerance out of range: 1.7 s for one line, importing
    the Hugging Face package and its parity check (torch) first."""
    rc, out, err, torch = _one_shot(tmp_path, *args)
    assert rc == 1 and says in err, err
    assert not torch, "minitf " + " ".join(args) + " imported torch"
