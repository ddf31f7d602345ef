"""Installing minitf: the torch build ./dev takes, a Python too old, no torch, the dependency floors, the sdist."""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A virtualenv's python for ./dev that plays pip: a dry run (`--report FILE`) reports torch as the index it was given
# would have it, `$FAKE_INDEX_TORCH` (pip's own index: "2.13.0 nvidia-cublas" is Linux's CUDA build) or
# `$FAKE_CPU_TORCH` (--index-url https://download.pytorch.org/whl/cpu; empty: that index cannot be reached); a real
# install is written down and succeeds. Any other `-c` runs in the real Python, as this script (sys.executable: the
# dry runs come back here).
FAKE_PIP = r"""#!/usr/bin/env bash
case "$1 $2" in
  "-c import sys; print(sys.prefix)") echo "$FAKE_PREFIX"; exit 0 ;;
  "-c import torch; torch.optim.Muon") exit 1 ;;
  "-c import minitf_repl, typer, pexpect, xdist") exit 0 ;;
  "-m minitf_repl") exit 0 ;;
  "-m pip")
    if [[ " $* " != *" --dry-run "* ]]; then echo "$*" >>"$FAKE_STATE/installs"; exit 0; fi
    echo "$*" >>"$FAKE_STATE/dry-runs"
    args=" $* "
    if [[ "$args" == *" --no-index "* ]]; then exit 1; fi  # no wheel of torch on this disk
    if [[ "$args" == *" --index-url https://download.pytorch.org/whl/cpu "* ]]; then have="$FAKE_CPU_TORCH"
    else have="$FAKE_INDEX_TORCH"; fi
    [ -n "$have" ] || exit 1
    report="${args#* --report }"; report="${report%% *}"
    set -- $have
    items="{\"metadata\": {\"name\": \"torch\", \"version\": \"$1\"}}"
    shift
    for name in "$@"; do items="$items, {\"metadata\": {\"name\": \"$name\", \"version\": \"1\"}}"; done
    echo "{\"install\": [$items]}" >"$report"
    exit 0 ;;
esac
exec -a "$0" "$REAL_PYTHON" "$@"
"""


def _dev(tmp_path, **env):
    if shutil.which("bash") is None:
        pytest.skip("./dev is a bash script")
    folder, venv, state = tmp_path / "project", tmp_path / "venv", tmp_path / "state"
    for made in (folder, venv / "bin", state):
        made.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "dev", folder / "dev")
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    python = venv / "bin" / "python"
    python.write_text(FAKE_PIP)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    environment = {k: v for k, v in os.environ.items() if k not in ("MINITF_TORCH", "MINITF_TORCH_INDEX", "PYTHON")}
    environment.update(VIRTUAL_ENV=str(venv), FAKE_PREFIX=str(venv), FAKE_STATE=str(state), REAL_PYTHON=sys.executable,
                       **env)
    run = subprocess.run(["bash", str(folder / "dev"), "run", "--version"], env=environment, capture_output=True,
                         text=True, timeout=120)
    installs = (state / "installs").read_text().splitlines() if (state / "installs").exists() else []
    return run, installs


CPU = "https://download.pytorch.org/whl/cpu"


def test_dev_installs_the_cpu_build_where_pip_would_take_a_cuda_one(tmp_path):
    run, installs = _dev(tmp_path, FAKE_INDEX_TORCH="2.13.0 nvidia-cublas-cu12", FAKE_CPU_TORCH="2.13.0+cpu")
    assert run.returncode == 0, run.stderr
    assert f"installing its CPU build from {CPU} instead" in run.stderr
    assert installs[0].endswith(f"install --progress-bar off --index-url {CPU} torch==2.13.0"), installs


def test_dev_says_so_where_the_cpu_index_cannot_be_reached(tmp_path):
    run, installs = _dev(tmp_path, FAKE_INDEX_TORCH="2.13.0+cu128", FAKE_CPU_TORCH="")
    assert run.returncode == 0, run.stderr
    assert f"dev: PyTorch's CPU index ({CPU}) cannot be reached: installing torch==2.13.0 as pip takes it, a CUDA" in \
        run.stderr
    assert installs[0].endswith("install --progress-bar off torch==2.13.0"), installs


@pytest.mark.parametrize("env", [{"FAKE_INDEX_TORCH": "2.13.0"},  # macOS, Windows: the index's torch is the CPU one
                                 {"MINITF_TORCH": "torch==2.9.1"},  # the user's choice stands
                                 {"MINITF_TORCH_INDEX": "https://download.pytorch.org/whl/cu128"}])
def test_dev_keeps_a_cpu_build_and_the_users_choice(tmp_path, env):
    run, installs = _dev(tmp_path, **{"FAKE_INDEX_TORCH": "2.13.0 nvidia-cublas-cu12", "FAKE_CPU_TORCH": "", **env})
    assert run.returncode == 0 and "dev: pip would take" not in run.stderr and "CPU index" not in run.stderr, run.stderr
    spec = env.get("MINITF_TORCH", "torch==2.13.0")
    index = f" --index-url {env['MINITF_TORCH_INDEX']}" if "MINITF_TORCH_INDEX" in env else ""
    assert installs[0].endswith(f"install --progress-bar off{index} {spec}"), installs


def test_dev_refuses_a_python_older_than_310_before_making_a_venv(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("./dev is a bash script")
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(ROOT / "dev", folder / "dev")
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    old = tmp_path / "python3.9"  # a Python that says it is 3.9
    old.write_text('#!/usr/bin/env bash\n[ "$1" = -c ] && [[ "$2" == *version_info* ]] && { echo 3.9; exit 0; }\n'
                   'echo "this Python ran: $*" >&2; exit 1\n')
    old.chmod(old.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    run = subprocess.run(["bash", str(folder / "dev"), "run", "--version"], env={**env, "PYTHON": str(old)},
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and not (folder / ".venv").exists() and "this Python ran" not in run.stderr
    assert run.stderr == (f"dev: {old} is Python 3.9; minitf needs 3.10 or newer: name a newer one, as in "
                          "PYTHON=/path/to/python3.11 ./dev run\n")


# A folder for the front of PYTHONPATH whose torch cannot be imported, as where it was never installed
NO_TORCH = 'raise ModuleNotFoundError("No module named \'torch\'", name="torch")\n'


def _without_torch(tmp_path, *args, stdin=None):
    hidden = tmp_path / "hidden"
    hidden.mkdir(exist_ok=True)
    (hidden / "torch.py").write_text(NO_TORCH)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hidden), str(ROOT)]), "HOME": str(tmp_path),
           "MINITF_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    return subprocess.run([sys.executable, "-m", "minitf_repl", *args], input=stdin, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)


NO_TORCH_LINE = (f"error: torch is not installed, and minitf needs it (torch>=2.9,<3); install it: {sys.executable} "
                 "-m pip install 'torch>=2.9,<3' --index-url https://download.pytorch.org/whl/cpu (the CPU build; "
                 "for a GPU, your CUDA build's index)")


@pytest.mark.parametrize("args", [("--data", "sort:4", "train", "--steps", "1"), ("tok", "312")])
def test_no_torch_is_one_line_naming_what_to_install(args, tmp_path):
    done = _without_torch(tmp_path, *args)
    assert done.returncode == 1 and done.stdout == "", done.stderr
    assert done.stderr.strip() == NO_TORCH_LINE


def test_no_torch_in_piped_lines_is_the_same_line_for_each_command(tmp_path):
    done = _without_torch(tmp_path, stdin=":tok 312\n:train --steps 1\n")
    assert "internal error" not in done.stderr, done.stderr
    assert done.stderr.count(NO_TORCH_LINE) == 2, done.stderr


def test_a_torch_too_old_says_the_range_and_the_cpu_build(tmp_path):
    older = ("import sys, torch, torch.optim\ndel torch.optim.Muon\ntorch.__version__ = '2.8.0'\n"
             "sys.argv = ['minitf', *sys.argv[1:]]\nfrom minitf_repl.__main__ import main\nmain()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", older, "--data", "sort:4", "params"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path, env=env)
    assert done.returncode == 1
    assert f"install a newer one: {sys.executable} -m pip install --upgrade 'torch>=2.9,<3' --index-url {CPU} " \
        "(the CPU build; for a GPU, your CUDA build's index)" in done.stderr, done.stderr


def _requirements() -> dict[str, str]:
    text = (ROOT / "pyproject.toml").read_text()  # (tomllib is 3.11's; the package runs on 3.10)
    found = re.findall(r'^\s*"([^"]+)",', text.split("dependencies = [", 1)[1].split("]", 1)[0], re.MULTILINE)
    return {re.split(r"[<>=!~ ;\[]", r, maxsplit=1)[0].lower(): r for r in found}


def test_typer_and_click_have_the_floors_that_run():
    """Typer 0.12 to 0.15 crashed under today's click (--version, --help), 0.16 to 0.25 at Tab completion
    (typer.core.CompletionItem), 0.26 and 0.27 gave usage errors status 1; cli.py imports click itself."""
    found = _requirements()
    assert found["typer"] == "typer>=0.29" and found["click"] == "click>=8.1.7", found


def test_the_docs_tell_the_truth_about_torch_and_the_venv_python():
    readme, install = (ROOT / "README.md").read_text(), (ROOT / "docs" / "install.md").read_text()
    dev_header = (ROOT / "dev").read_text().split("set -euo pipefail")[0]
    assert "a CPU build on this project's machines" not in dev_header and "MINITF_TORCH_INDEX" in dev_header
    for text in (readme, install):
        assert "PYTHON=" in text and "MINITF_TORCH_INDEX" in text, "./dev's variables, each documented"
    assert f"--index-url {CPU}" in install and "--pip-args" in install  # the CPU build by pip and by pipx
    assert "loads and trains under the others" not in install  # pydoc differs between Pythons
    assert "~/.local/state/minitf" in install and "--install-completion" in install  # what uninstalling leaves


def test_the_sdist_holds_what_its_tests_need(tmp_path):
    """A packager builds and tests the sdist: the tests with their support files, the docs README links, ./dev."""
    pytest.importorskip("setuptools", minversion="77", reason="the test extra installs setuptools>=77")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.pyc", "*.egg-info",
                                                             "build", "dist", "checkpoints"))
    shutil.copytree(ROOT / "checkpoints", src / "checkpoints", ignore=lambda folder, names: [
        n for n in names if n != "README.md"])
    code = "import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    built = subprocess.run([sys.executable, "-c", code, str(tmp_path / "dist")], cwd=src, env=env,
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    with tarfile.open(tmp_path / "dist" / built.stdout.strip().splitlines()[-1]) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("tests/conftest.py", "tests/checkpoint_worker.py", "tests/test_install.py", "docs/install.md",
                   "dev", "checkpoints/README.md", "MANIFEST.in", "bench/startup.py"):
        assert needed in names, needed
    assert not any(n.endswith(".pyc") or n.startswith("tests/checkpoints/") for n in names)
    linked = set(re.findall(r"\]\((docs/[\w.-]+\.md)", (ROOT / "README.md").read_text()))
    assert linked and linked <= names, linked - names


def test_no_torch_is_said_once_as_the_repl_opens_before_any_line(monkeypatch, tmp_path):
    """The REPL opened, said "Try :train" and then failed every line alike: the import system is asked first."""
    import importlib.util

    from prompt_toolkit.history import InMemoryHistory
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput
    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.session import Session

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else found(name, *a))
    out = Console(width=400, color_system=None, record=True)
    with create_pipe_input() as inp:
        inp.send_text(":tok 312\r")
        code = repl.run_repl(Session(data_spec="sort:4"), out, out, input=inp, output=DummyOutput(),
                             history=InMemoryHistory())
    said = out.export_text()
    assert code == 1 and "Try :train" not in said and "3 tokens" not in said, said
    assert said.strip() == NO_TORCH_LINE, said
