"""./dev, the set-up script: it says what each step does, shows pip's lines, and says how long a quiet
step has taken, so that a first install (minutes: torch is a large download and a long unpack) never
looks like a hang; pip's errors stay visible.

Running ./dev for real needs a fresh virtualenv and a torch download: minutes and the network, too
slow and too fragile for the suite (./dev test itself exercises the installed case every day). Here
the real script runs against a stand-in `python` in a throwaway "virtualenv" that plays pip: it
prints pip-like lines, is quiet for a while the way a real unpack is, and succeeds or fails on
demand. What is tested is the script itself: its steps, messages, heartbeat, filtering, exit
status, the $MINITF_TORCH choice and the install stamp.
"""

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FAKE_PYTHON = r"""#!/usr/bin/env bash
# A stand-in for a virtualenv's python: just enough of python and pip for ./dev.
state="$FAKE_STATE"
case "$1 $2" in
  "-c import sys; print(sys.prefix)") echo "$FAKE_PREFIX"; exit 0 ;;
  "-c import torch; torch.optim.Muon") [ -f "$state/torch" ]; exit ;;
  "-c import minitf_repl, typer, pexpect, xdist")
    [ -f "$state/minitf" ] && exit 0
    echo "ModuleNotFoundError: No module named 'minitf_repl'" >&2; exit 1 ;;
  "-m pip")
    shift 2; shift  # install
    echo "$*" >>"$state/pip-calls"
    target="${@: -1}"
    echo "Collecting $target"
    echo "  Downloading $target.whl (190.0 MB)"
    echo "WARNING: Location '/nowhere' is ignored: it is neither a file nor a directory" >&2
    echo "Requirement already satisfied: numpy in /fake"
    sleep "${FAKE_PIP_SECONDS:-0}"
    if [ -n "${FAKE_PIP_FAIL:-}" ] && [[ "$target" == *"$FAKE_PIP_FAIL"* ]]; then
      echo "ERROR: Could not find a version that satisfies the requirement $target" >&2
      exit 1
    fi
    case "$target" in torch*) touch "$state/torch" ;; *) touch "$state/minitf" ;; esac
    echo "Successfully installed $target"
    exit 0 ;;
  "-m pytest") shift 2; echo "pytest $*"; exit 0 ;;
  "-m minitf_repl") shift 2; echo "minitf $*"; exit 0 ;;
esac
echo "fake python: unexpected arguments: $*" >&2
exit 99
"""


@pytest.fixture
def project(tmp_path):
    """A copy of ./dev and pyproject.toml, and a stand-in virtualenv (VIRTUAL_ENV) with no torch."""
    if shutil.which("bash") is None:
        pytest.skip("./dev is a bash script")
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(ROOT / "dev", folder / "dev")
    shutil.copy(ROOT / "pyproject.toml", folder / "pyproject.toml")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "state"
    state.mkdir()
    return folder, venv, state


def dev(project, *args, **env):
    folder, venv, state = project
    environment = {k: v for k, v in os.environ.items() if k not in ("MINITF_TORCH", "PYTHON")}
    environment.update(VIRTUAL_ENV=str(venv), FAKE_PREFIX=str(venv), FAKE_STATE=str(state),
                       MINITF_DEV_HEARTBEAT="1", **env)
    return subprocess.run(["bash", str(folder / "dev"), *args], env=environment, capture_output=True, text=True,
                          timeout=60)


def test_a_first_install_says_each_step_shows_pip_and_the_time_of_a_quiet_step(project):
    run = dev(project, "test", "-q", FAKE_PIP_SECONDS="2.5")
    assert run.returncode == 0, run.stderr
    assert run.stdout == "pytest -n auto -q\n"  # then the tests run, in a worker per core
    err = run.stderr
    for line in ("dev: no torch >= 2.9 in", "dev: installing torch==2.13.0...", "  Collecting torch==2.13.0",
                 "  Downloading torch==2.13.0.whl (190.0 MB)", "dev:   ... still installing torch==2.13.0 (",
                 "dev: done: installing torch==2.13.0 (", "dev: installing minitf and its test tools into",
                 "  Successfully installed .[test]", "dev: ready ("):
        assert line in err, (line, err)
    assert err.index("installing torch") < err.index("installing minitf")
    assert "Requirement already satisfied" not in err and "is ignored" not in err  # noise for a new user
    folder, venv, state = project
    want = subprocess.run(["cksum"], input=(folder / "pyproject.toml").read_bytes(), capture_output=True).stdout
    assert (venv / ".minitf-installed").read_text().strip() == want.decode().strip()  # the stamp: pyproject's sum


def test_an_installed_project_starts_at_once_and_says_nothing(project):
    assert dev(project, "test").returncode == 0
    run = dev(project, "run", "--version")
    assert run.returncode == 0 and run.stdout == "minitf --version\n" and run.stderr == ""
    folder, venv, state = project
    assert len((state / "pip-calls").read_text().splitlines()) == 2  # torch, then the project: once each


def test_a_changed_pyproject_reinstalls_the_project_only(project):
    assert dev(project, "test").returncode == 0
    folder, venv, state = project
    (folder / "pyproject.toml").write_text((folder / "pyproject.toml").read_text() + "\n# changed\n")
    run = dev(project, "test")
    assert run.returncode == 0 and "installing minitf" in run.stderr and "torch" not in run.stderr


def test_a_failed_torch_install_shows_pips_error_and_stops(project):
    run = dev(project, "test", FAKE_PIP_FAIL="torch")
    assert run.returncode == 1
    assert "ERROR: Could not find a version that satisfies the requirement torch==2.13.0" in run.stderr
    assert "dev: failed: installing torch==2.13.0 (pip exited with 1" in run.stderr
    assert "installing minitf" not in run.stderr and run.stdout == ""


def test_a_failed_project_install_says_so(project):
    run = dev(project, "test", FAKE_PIP_FAIL=".[test]")
    assert run.returncode == 1 and "ERROR: Could not find" in run.stderr and "dev: install failed" in run.stderr
    assert run.stdout == ""


def test_minitf_torch_chooses_the_torch_to_install(project):
    run = dev(project, "test", MINITF_TORCH="torch==2.9.1")
    assert run.returncode == 0 and "  Collecting torch==2.9.1" in run.stderr and "2.13.0" not in run.stderr


@pytest.mark.parametrize("given, ran", [
    (["-q"], "pytest -n auto -q"),  # a worker per core (tests/conftest.py)
    (["-n", "0", "-q"], "pytest -n 0 -q"),  # one process, as asked
    (["-n3"], "pytest -n3"),
    (["--numprocesses=2"], "pytest --numprocesses=2"),
    (["-p", "no:xdist", "-x"], "pytest -p no:xdist -x"),  # without the plugin -n would be refused
])  # fmt: skip
def test_the_tests_run_in_workers_unless_the_command_line_says_otherwise(project, given, ran):
    dev(project, "test")  # installed once
    run = dev(project, "test", *given)
    assert run.returncode == 0, run.stderr
    assert run.stdout == ran + "\n"


def test_auto_workers_are_the_cpus_this_process_may_use_at_most_four(monkeypatch):
    import conftest

    for cpus, workers in [(1, 0), (2, 2), (3, 3), (16, 4)]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=cpus: set(range(n)), raising=False)
        assert conftest.pytest_xdist_auto_num_workers(None) == workers
