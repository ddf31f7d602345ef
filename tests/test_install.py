"""The package as a packager and a user of `pipx` or `uv tool` get it: a wheel, installed on its own.

`test_the_wheel_installs_into_a_fresh_venv` (default run, ~10 s): the wheel builds with the
setuptools backend and no warning, carries the right metadata, installs into a fresh virtualenv
(as `pipx install` / `uv tool install` make one per application), and its `minitf` runs
`--version` and a command there, from a folder outside the repository. The fresh venv gets the
wheel and nothing else; the dependencies come from the environment running the tests through a
`.pth` file, the way a user brings their own torch build. That keeps the test offline and fast.

`test_the_wheel_installs_with_its_dependencies` (slow): the same wheel into a venv of its own with
every dependency from the package index (by pipx itself where it is on PATH), torch pinned to
`$MINITF_TORCH` (default torch==2.13.0). From the package index that is, on Linux, a CUDA build of
several GB (`./dev` takes PyTorch's CPU index instead; this test does not): set MINITF_TORCH to a
wheel of the CPU build, or run it where pip finds one (this project's machines: --find-links).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "minitf_repl")


def _clean_env(**extra) -> dict:
    """The environment without what would let the repository leak in (PYTHONPATH) or hide a warning."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE", "VIRTUAL_ENV")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> tuple[Path, str]:
    """Build the wheel from a copy of the sources (the backend writes build/ and egg-info beside them)."""
    pytest.importorskip("setuptools", minversion="77", reason="the test extra installs setuptools>=77")
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    out = src / "dist"
    code = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
    # -W always: a deprecation setuptools would show once per process, or never under a filter, shows here.
    build = subprocess.run([sys.executable, "-W", "always", "-c", code, str(out)], cwd=src, env=_clean_env(),
                           capture_output=True, text=True, timeout=300)
    log = build.stdout + build.stderr
    assert build.returncode == 0, log
    return out / build.stdout.strip().splitlines()[-1], log


def test_the_wheel_builds_without_a_warning(wheel):
    _, log = wheel
    warnings = [line for line in log.splitlines() if "warning" in line.lower() or "deprecat" in line.lower()]
    assert not warnings, "\n".join(warnings)


def test_the_wheel_metadata(wheel):
    path, _ = wheel
    assert path.name.startswith("minitf_repl-") and path.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(f"{info}/METADATA").decode())
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert meta["Name"] == "minitf-repl"
    from minitf_repl import __version__

    assert meta["Version"] == __version__
    assert meta["License-Expression"] == "MIT" and f"{info}/licenses/LICENSE" in names
    assert not any(c.startswith("License ::") for c in meta.get_all("Classifier"))  # the SPDX field says it
    assert meta.get_all("Keywords") and meta.get_all("Classifier")
    torch = next(r for r in meta.get_all("Requires-Dist") if r.startswith("torch"))
    assert ">=" in torch and "<" in torch and "==" not in torch, f"torch must stay a range (users bring theirs): {torch}"
    assert "minitf = minitf_repl.__main__:main" in entry_points
    assert "minitf_repl/__main__.py" in names
    from minitf_repl import schema

    shipped = {n.rsplit("/", 1)[-1] for n in names if n.startswith("minitf_repl/schemas/")}
    assert shipped == {f"{c.name}.json" for c in schema.json_commands()}, "scripts read the schemas from the package"


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / ("python.exe" if os.name == "nt" else "python")


def _install(wheel_path: Path, venv: Path, *pip_args: str) -> None:
    """`pip install` into `venv` with the pip running these tests (`--python`: pip 22.3 and later)."""
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(_venv_python(venv)), "install", "-q",
                           *pip_args, str(wheel_path)], env=_clean_env(), capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr


def _check_installed(venv: Path, cwd: Path) -> None:
    """`minitf --version`, `python -m minitf_repl --version` and one command, from the venv alone."""
    from minitf_repl import __version__

    bin_dir = _venv_python(venv).parent
    minitf = bin_dir / "minitf"
    env = _clean_env(MINITF_CHECKPOINT_DIR=str(cwd / "checkpoints"))
    where = subprocess.run([str(_venv_python(venv)), "-c", "import minitf_repl; print(minitf_repl.__file__)"],
                           cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert Path(where.stdout.strip()).is_relative_to(venv), f"minitf_repl came from {where.stdout}{where.stderr}"
    version = subprocess.run([str(minitf), "--version"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.strip() == f"minitf {__version__}", version.stderr
    module = subprocess.run([str(_venv_python(venv)), "-m", "minitf_repl", "--version"], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=60)
    assert module.stdout.strip() == f"minitf {__version__}", module.stderr
    tok = subprocess.run([str(minitf), "--data", "sort", "tok", "312", "--json"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=120)
    assert tok.returncode == 0, tok.stderr
    doc = json.loads(tok.stdout)
    assert doc["schema"] == "minitf.tok/7" and doc["tokens"] == ["3", "1", "2"]
    assert not (cwd / "checkpoints").exists() and not list(cwd.glob("*.egg-info"))


def test_the_wheel_installs_into_a_fresh_venv(wheel, tmp_path):
    path, _ = wheel
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    # Bring our own dependencies, torch among them: the site folders of the environment running the
    # tests go on the fresh venv's path after its own site-packages (a .pth line is a folder to add;
    # .pth files inside the folders it adds are not run, so an editable minitf there stays out).
    purelib = Path(subprocess.run([str(_venv_python(venv)), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                  capture_output=True, text=True, check=True, env=_clean_env()).stdout.strip())
    ours = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    folders = [p for p in sys.path if p in ours or Path(p).name in ("site-packages", "dist-packages")]
    (purelib / "bring-your-own-deps.pth").write_text("\n".join(dict.fromkeys(folders)) + "\n")
    # --force-reinstall: where the environment running the tests has minitf-repl installed (not editable), pip found
    # it through the .pth, called the wheel already satisfied and installed nothing
    _install(path, venv, "--no-deps", "--no-index", "--force-reinstall")
    work = tmp_path / "elsewhere"
    work.mkdir()
    _check_installed(venv, work)


@pytest.mark.slow
def test_the_wheel_installs_with_its_dependencies(wheel, tmp_path):
    """Full isolation, every dependency from the index: with pipx where it is on PATH, as a user runs
    `pipx install --preinstall torch==... minitf_repl-*.whl`; else the same by hand, a venv and pip."""
    path, _ = wheel
    torch = os.environ.get("MINITF_TORCH", "torch==2.13.0")
    pipx = shutil.which("pipx")
    if pipx is not None:
        env = _clean_env(PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(tmp_path / "bin"),
                         PIPX_MAN_DIR=str(tmp_path / "man"))
        done = subprocess.run([pipx, "install", "--preinstall", torch, str(path)], env=env,
                              capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout + done.stderr
        venv = tmp_path / "pipx" / "venvs" / "minitf-repl"
        assert (tmp_path / "bin" / "minitf").exists()  # pipx's link to the venv's script
    else:
        venv = tmp_path / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        _install(path, venv, torch)
    work = tmp_path / "elsewhere"
    work.mkdir()
    _check_installed(venv, work)
