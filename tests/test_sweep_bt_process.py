"""Sweep bt, a tester's findings on what one session or a main([...]) called from Python leaves to the rest of the
process: a Lab's data read from a file named by its name alone, torch's random stream shared by every session and
reset by main(), torch's thread count and Rich's broken-pipe handler left changed, $MINITF_PRODUCTS read once, and
a file's change said to the first of two Labs only. Each test failed before its fix."""

from __future__ import annotations

import contextlib
import io

import torch
from rich.console import Console

from minitf_repl import Lab
from minitf_repl.__main__ import main
from minitf_repl.commands.shared import file_changed, file_changed_once
from minitf_repl.core import fastpath
from minitf_repl.core.data import load_data

# the smallest model the lab builds in a blink, dropout on so that :train draws from torch's global generator
SMALL = {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "max_seq_len": 16, "batch_size": 4,
         "eval_every": 2, "eval_batches": 1, "autosave": False, "threads": 1, "dropout": 0.2}
TINY_ARGS = ["--data", "sort:4", "--set", "d_model=16", "--set", "n_layers=1", "--set", "n_heads=2", "--set",
             "d_ff=32", "--set", "max_seq_len=16", "--set", "autosave=off"]
TEXT = "the quick brown fox jumps over the lazy dog, and the dog sleeps on. " * 4


def quiet_main(argv: list[str]) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main(argv)


def losses(lab: Lab, line: str = ":train steps=2") -> tuple:
    shown = lab(line)
    assert shown.ok, shown.error
    document = shown.json()
    return document["train_loss"], document["val_loss"]


def test_a_lab_of_data_read_from_a_file_names_it_by_its_absolute_path(tmp_path, monkeypatch, capsys):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "text2.txt").write_text(TEXT, encoding="utf-8")
    monkeypatch.chdir(tmp_path / "sub")
    lab = Lab(data=load_data("text2.txt"), settings={"autosave": False})  # relative, read from here
    monkeypatch.chdir(tmp_path)  # a notebook that moved on (the tester's: a name that was never in the folder)
    assert lab.session.data_spec == str(tmp_path / "sub" / "text2.txt")
    assert file_changed(lab.session) is None  # was "text2.txt is no longer on disk (deleted or moved)"
    assert lab(":data").ok
    assert "no longer on disk" not in capsys.readouterr().err


def test_a_lab_of_a_local_copy_of_a_builtin_text_says_no_change_of_a_file(tmp_path, monkeypatch):
    """load_data names a local copy of tiny Shakespeare "shakespeare" (keeping no path): the built-in's text."""
    from minitf_repl.core.data import TextCorpus

    data = TextCorpus("shakespeare", TEXT, "tiny Shakespeare (local file x)", stamp=(1, 2, 3))
    monkeypatch.chdir(tmp_path)
    lab = Lab(data=data, settings={"autosave": False})
    assert lab.session.data_spec == "shakespeare"
    assert file_changed(lab.session) is None


def test_a_file_changed_is_said_to_each_lab_given_the_same_data(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    data = load_data(str(path))
    first, second = Lab(data=data, settings={"autosave": False}), Lab(data=data, settings={"autosave": False})
    path.write_text(TEXT + "more", encoding="utf-8")
    assert "has changed on disk" in (file_changed_once(first.session) or "")
    assert file_changed_once(first.session) is None  # once a change, for each session
    assert "has changed on disk" in (file_changed_once(second.session) or "")  # was None: said to the first only


def test_a_labs_dropout_stream_is_its_own():
    """Another Lab's build (its seed), a main([...]) and the caller's draws between two :train leave a lab's numbers
    as they are alone; and a lab's lines leave the caller's stream as it was."""
    kept = torch.get_rng_state()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            alone = Lab(data="sort:4", settings=SMALL)
            losses(alone)
            expected = losses(alone)

            lab = Lab(data="sort:4", settings=SMALL)
            losses(lab)
            other = Lab(data="sort:4", settings={**SMALL, "seed": 7})
            assert other(":params").ok  # builds its model: torch.manual_seed(7) on the process's generator
            assert quiet_main([*TINY_ARGS, "--set", "dropout=0.2", "params"]) == 0
            torch.rand(100)
            state = torch.get_rng_state()
            assert losses(lab) == expected  # was 1.6883 against 1.6618 (the tester's numbers)
            assert torch.equal(torch.get_rng_state(), state)  # the caller's stream: untouched by the lab's :train
    finally:
        torch.set_rng_state(kept)


def test_a_labs_model_read_before_its_first_line_leaves_its_numbers_as_they_are():
    """`lab.model` before a Lab's first :train builds outside any command, seeding the process's generators; the
    session's own state, kept by its settings' :set, swapped an unseeded stream back in at the :train, whose masks
    then moved with whatever state the process (or the caller) had before (T6's finding: four processes, four
    losses). The caller's seed stands in for a new process's."""
    kept = torch.get_rng_state()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            expected = losses(Lab(data="sort:4", settings=SMALL))
            for caller_seed in (1, 2):
                torch.manual_seed(caller_seed)
                lab = Lab(data="sort:4", settings=SMALL)
                assert sum(p.numel() for p in lab.model.parameters()) > 0  # built outside any command
                assert losses(lab) == expected, caller_seed
    finally:
        torch.set_rng_state(kept)


def test_main_called_from_python_leaves_the_callers_random_state_and_threads(monkeypatch):
    kept = torch.get_rng_state()
    try:
        torch.manual_seed(1)
        state = torch.get_rng_state()
        torch.set_num_threads(2)  # (the autouse one_thread fixture puts back its count after the test)
        assert quiet_main(["--set", "threads=1", *TINY_ARGS, "params"]) == 0
        assert torch.equal(torch.get_rng_state(), state)  # was the model's seed's, whatever the caller's seed
        assert torch.get_num_threads() == 2  # was 1, left so for the caller
    finally:
        torch.set_rng_state(kept)


def test_main_called_from_python_puts_back_richs_broken_pipe_handler(monkeypatch):
    def callers_own(console: Console) -> None:  # the caller's (Rich's own, before any main() in this process)
        raise SystemExit(1)

    monkeypatch.setattr(Console, "on_broken_pipe", callers_own)
    assert quiet_main(["--help"]) == 0
    assert vars(Console)["on_broken_pipe"] is callers_own  # was cli's _reader_left: a caller's console exited 141


def test_minitf_products_is_read_at_each_choice_not_once(monkeypatch):
    monkeypatch.setenv(fastpath.PRODUCTS_ENV, "onednn")
    assert fastpath.onednn_faster() is torch.backends.mkldnn.is_available()
    assert fastpath.products_kernel() == ("oneDNN" if torch.backends.mkldnn.is_available() else "MKL")
    monkeypatch.setenv(fastpath.PRODUCTS_ENV, "torch")
    assert fastpath.onednn_faster() is False  # was the first value's answer, cached: :device named MKL's, ran oneDNN
    assert fastpath.products_kernel() == "MKL"


def test_main_called_from_python_works_with_a_rich_that_has_no_broken_pipe_handler(monkeypatch):
    """pyproject allows Rich 13.7, whose Console has no on_broken_pipe: main([...]) read it with vars()[...] to put
    it back, and every call from Python ended in KeyError (the reviewer's finding). The shell's is taken off again."""
    monkeypatch.delattr(Console, "on_broken_pipe", raising=False)
    assert quiet_main(["--version"]) == 0
    assert "on_broken_pipe" not in vars(Console)


def test_a_command_does_not_wait_for_torch_that_is_still_importing(monkeypatch):
    """The REPL imports torch in the background while the prompt is up; :help, :set and :config need no torch and
    must not wait for it. Reading the generators' state for every command (the session's own stream) did, with
    `import torch` while the import was under way: 1.25 s after the prompt (the reviewer's finding). While torch's
    module is still initialising, no state is read."""
    from minitf_repl import session as session_module
    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session

    def waits(*args, **kwargs):
        raise AssertionError("read the random state of a torch still importing")

    monkeypatch.setattr(torch.__spec__, "_initializing", True, raising=False)  # as importlib marks it meanwhile
    monkeypatch.setattr(torch, "get_rng_state", waits)
    assert session_module.random_states() is None
    s = Session(data_spec="sort:4")
    for line in ("help", "config"):
        run_command(s, line)
    run_command(s, "set", {"lr": "0.01"})
