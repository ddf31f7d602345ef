"""A sweep's findings: completion install errors, running out of memory, no cache folder in the REPL, :patch, :help."""

from __future__ import annotations

import errno
import pathlib
import sys
from types import SimpleNamespace

import pytest

from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session
from test_hostile import drive
from test_render import plain, text_of

from minitf_repl import dispatch
from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import run_command


# --- --install-completion: a home folder that cannot be written, or none ------------------------------------------
def read_only(monkeypatch):
    """Every folder made and file written fails as on a read-only file system (root writes a chmod-ed one anyway)."""
    def refuse(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    monkeypatch.setattr(pathlib.Path, "write_text", refuse)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_install_completion_on_a_read_only_home_is_one_line_with_the_script_by_hand(tmp_path, monkeypatch, shell):
    monkeypatch.setenv("HOME", str(tmp_path))
    read_only(monkeypatch)
    line = assert_one_error_line(invoke("--install-completion", shell))  # was OSError's traceback
    assert f"cannot write {tmp_path}" in line and "(Read-only file system)" in line
    assert line.endswith(f"minitf --show-completion {shell} prints the script to install by hand")


def test_install_completion_of_the_shell_it_runs_in_fails_in_one_line_too(tmp_path, monkeypatch):
    import typer._completion_shared as shared

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(shared, "_get_shell_name", lambda: "fish")  # the shell found (shellingham) is fish
    read_only(monkeypatch)
    line = assert_one_error_line(invoke("--install-completion"))  # Typer's own option: a traceback
    assert f"cannot write {tmp_path}" in line and "minitf --show-completion prints the script" in line


def test_install_completion_without_a_home_folder_says_so_in_one_line(monkeypatch):
    def nowhere(cls):
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pathlib.Path, "home", classmethod(nowhere))
    line = assert_one_error_line(invoke("--install-completion", "zsh"))  # was "RuntimeError: Could not determine..."
    assert "no home folder to install completion in" in line and "minitf --show-completion zsh" in line


def test_install_completion_twice_leaves_bashrc_as_the_first_left_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".bashrc").write_text("alias ll='ls -l'\n")
    assert invoke("--install-completion", "bash").exit_code == 0
    once = (tmp_path / ".bashrc").read_text()
    assert "minitf.sh" in once
    for _ in range(2):
        assert invoke("--install-completion", "bash").exit_code == 0
    assert (tmp_path / ".bashrc").read_text() == once  # Typer added a blank line each time


@pytest.mark.parametrize("bashrc", [None, "alias ll='ls -l'\n"])
def test_install_completion_that_cannot_write_its_script_leaves_bashrc_as_it_was(tmp_path, monkeypatch, bashrc):
    """Typer writes .bashrc before the script: a file where the script's folder goes left a `source` line of a script
    that was never written, and every new bash said "No such file"."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".bash_completions").write_text("")  # only the script's folder is blocked
    if bashrc is not None:
        (tmp_path / ".bashrc").write_text(bashrc)
    line = assert_one_error_line(invoke("--install-completion", "bash"))
    assert line == (f"error: cannot write the completion script: a file is in the way: {tmp_path}/.bash_completions; "
                    "minitf --show-completion bash prints the script to install by hand")  # was "(File exists)"
    if bashrc is None:
        assert not (tmp_path / ".bashrc").exists()
    else:
        assert (tmp_path / ".bashrc").read_text() == bashrc


# --- out of memory -----------------------------------------------------------------------------------------------
def test_wording_an_error_imports_nothing(monkeypatch):
    """Under `ulimit -v` the out-of-memory error became a traceback: phrase() imported, and that import failed."""
    import builtins

    def no_memory(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    error = UserError(dispatch.OUT_OF_MEMORY)
    with monkeypatch.context() as m:
        m.setattr(builtins, "__import__", no_memory)
        said = dispatch.phrase(error, "shell", "train", "--steps 10")
    assert said.startswith("out of memory; lower batch_size")


def a_module_that_runs_out_of_memory(tmp_path, monkeypatch):
    """A function that imports a module whose import meets a MemoryError, as torch's met it under `ulimit -v`."""
    import importlib

    (tmp_path / "sweep_bo_heavy.py").write_text("raise MemoryError\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sweep_bo_heavy", raising=False)
    return lambda *args, **kwargs: importlib.import_module("sweep_bo_heavy")


def memory_limit(monkeypatch, limit: int | None):
    """This process's address-space limit (`ulimit -v`) as dispatch reads it: `limit` bytes, None for none."""
    infinity = -1
    monkeypatch.setattr(dispatch, "resource", SimpleNamespace(
        RLIMIT_AS=9, RLIM_INFINITY=infinity, getrlimit=lambda which: (infinity if limit is None else limit, infinity)))


def test_memory_error_in_an_import_around_a_command_is_not_an_internal_error(tmp_path, monkeypatch):
    # :set checks torch's modes as it starts (dispatch._torch_modes), which imported torch under the limit
    monkeypatch.setattr(dispatch, "_torch_modes", a_module_that_runs_out_of_memory(tmp_path, monkeypatch))
    memory_limit(monkeypatch, 2 << 30)
    code, _, err = drive(tiny_session(), ":set lr=0.01")
    assert err.strip() == ("error: line 1: not enough memory to load sweep_bo_heavy (MemoryError); raise the memory "
                           "limit (ulimit -v) or close other programs")  # was "internal error: line 1: MemoryError: "


def test_out_of_memory_without_a_memory_limit_gives_no_ulimit_and_names_what_was_loading(tmp_path, monkeypatch):
    """It said "to load torch" of any import, and "raise the memory limit (ulimit -v)" where none was set."""
    monkeypatch.setattr(dispatch, "_torch_modes", a_module_that_runs_out_of_memory(tmp_path, monkeypatch))
    memory_limit(monkeypatch, None)
    code, _, err = drive(tiny_session(), ":set lr=0.01")
    assert err.strip() == "error: line 1: not enough memory to load sweep_bo_heavy (MemoryError); close other programs"

    def unnamed():  # an ImportError that names no module, raised outside any module's import
        raise ImportError("libfoo.so: failed to map segment from shared object")

    monkeypatch.setattr(dispatch, "_torch_modes", unnamed)
    code, _, err = drive(tiny_session(), ":set lr=0.01")
    assert err.startswith("error: line 1: not enough memory to load a library (libfoo.so: failed to map"), err
    monkeypatch.setattr(dispatch, "resource", None)  # Windows: no ulimit
    assert "ulimit" not in dispatch.short_of_memory(MemoryError())


def test_torchs_library_that_cannot_be_mapped_is_said_as_too_little_memory(monkeypatch):
    def unmapped():  # as the loader raises it: the ImportError names the module it loaded
        raise ImportError("libtorch_cpu.so: failed to map segment from shared object", name="torch._C")

    monkeypatch.setattr(dispatch, "_torch_modes", unmapped)
    memory_limit(monkeypatch, 2 << 30)
    code, _, err = drive(tiny_session(), ":set lr=0.01")
    assert "internal error" not in err
    assert err.startswith("error: line 1: not enough memory to load torch (libtorch_cpu.so: failed to map segment "
                          "from shared object); raise the memory limit")


def test_a_commands_own_import_out_of_memory_is_no_advice_on_batch_size(tmp_path, monkeypatch):
    command = REGISTRY["config"]
    monkeypatch.setattr(command, "func", a_module_that_runs_out_of_memory(tmp_path, monkeypatch))
    with pytest.raises(UserError) as e:
        run_command(tiny_session(), command)
    # was "lower batch_size, ...", then "to load torch" of a library that was not torch
    assert str(e.value).startswith("not enough memory to load sweep_bo_heavy (MemoryError)")


def test_a_shell_option_out_of_memory_is_one_line(monkeypatch):
    from minitf_repl import cli

    def unmapped(*args, **kwargs):
        raise OSError(errno.ENOMEM, "Cannot allocate memory")

    monkeypatch.setattr(cli, "apply_settings", unmapped)
    memory_limit(monkeypatch, 2 << 30)
    line = assert_one_error_line(invoke("--set", "lr=0.01", "config"))  # was "internal error: OSError: ..."
    assert line.startswith("error: --set: not enough memory (Cannot allocate memory); raise the memory limit")


# --- :data shakespeare with no cache folder ----------------------------------------------------------------------
def no_home(monkeypatch):
    """$HOME unset and no passwd entry (a container's arbitrary uid): platformdirs raises RuntimeError."""
    import platformdirs

    def unknown(*args, **kwargs):
        raise RuntimeError("could not determine the home directory")

    monkeypatch.setattr(platformdirs, "user_cache_dir", unknown)
    for name in ("HOME", "MINITF_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.skipif(sys.platform == "win32", reason="the example line is a POSIX shell's")
def test_no_home_folder_for_shakespeare_says_to_start_again_with_the_variable(monkeypatch):
    no_home(monkeypatch)
    code, _, err = drive(tiny_session(), ":data shakespeare")
    said = " ".join(err.split())
    assert "no home folder to keep tiny Shakespeare in" in said
    # "set $MINITF_CACHE_DIR" was said to a running session, which cannot set one
    assert "start minitf again with MINITF_CACHE_DIR set to a folder for it: MINITF_CACHE_DIR=DIR minitf" in said
    assert "give its path as the data" in said


def test_a_download_that_cannot_be_kept_says_to_start_again_with_the_variable(tmp_path, monkeypatch):
    from minitf_repl.core import data
    from minitf_repl.core.errors import DataError

    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path / "afile" / "cache"))
    monkeypatch.setattr(data, "_download", lambda url, timeout: b"the checked text")
    with pytest.raises(DataError) as e:
        data.fetch_shakespeare()
    assert "could not keep it in" in str(e.value) and "start minitf again with MINITF_CACHE_DIR set to" in str(e.value)


# --- :patch ------------------------------------------------------------------------------------------------------
def test_patch_of_two_questions_with_one_answer_gives_no_heads_verdict(monkeypatch):
    """sort's 889978= and 889979= both answer 7...: the trained model's gap of 0.14 (clean -0.76, corrupted -0.90)
    read head 0.0 as "most of it comes back when head 0.0 is patched (7.99)"."""
    import dataclasses

    import torch

    from minitf_repl.core import patching

    real = patching.activation_patching

    def as_trained(*args, **kwargs):  # an untrained model's gap is below MIN_GAP: the trained one's numbers
        done = real(*args, **kwargs)
        return dataclasses.replace(done, clean_diff=-0.76, corrupt_diff=-0.90,
                                   heads=torch.tensor([[7.99, -16.62]] * done.heads.shape[0]))

    monkeypatch.setattr(patching, "activation_patching", as_trained)
    result = run(tiny_session("sort:6"), ":patch 889978= 889979=")
    assert result.reading.startswith("the corrupted prompt does not change the answer: the data's next token after "
                                     "both is '7'")
    assert "head 0." not in result.reading and "7.99" not in result.reading
    assert result.reading.endswith("choose a corrupted prompt whose answer differs, e.g. :patch 889978= 089978=")


def test_patch_shows_no_minus_zero():
    from minitf_repl.commands.why import PatchResult

    result = PatchResult(clean="ab", corrupt="cb", clean_tokens=["a", "b"], corrupt_tokens=["c", "b"], answer="x",
                         foil="y", clean_diff=-0.001, corrupt_diff=-0.6, stream=["embed", "blocks.0"],
                         resid=[[0.0, 0.0], [0.0, 1.0]], heads=[[-0.004, 0.3]], reading="")
    shown = plain(result)
    assert "-0.00" not in shown  # the heads table printed -0.00, the logit difference too
    assert "clean 0.00, corrupted -0.60" in shown and "0 0.00 0.30" in shown


# --- :help ------------------------------------------------------------------------------------------------------
def test_help_says_lines_can_run_as_a_script():
    out = " ".join(text_of(run_command(None, "help", {})).split())
    assert "Lines piped in run as a script" in out and "minitf --transcript < lesson.txt" in out
