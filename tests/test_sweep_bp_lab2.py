"""Findings on Lab and main(argv) in notebooks, IPython and scripts (second sweep): each failed before its fix."""

import io
import re
import sys
import types
from pathlib import Path

import pytest
from test_sweep_bp_notebook import CODE_MD, TINY, jupyter, lab  # noqa: F401 (the fixtures, shared)

from minitf_repl import repl
from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.render.words import is_a_terminal, say

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def ipython(monkeypatch):
    """IPython's display (no IPython here): what `display(bundle, raw=True)` was given."""
    shown = []
    display = types.ModuleType("IPython.display")
    display.display = lambda obj, raw=False: shown.append((obj, raw))
    package = types.ModuleType("IPython")
    package.display = display
    monkeypatch.setitem(sys.modules, "IPython", package)
    monkeypatch.setitem(sys.modules, "IPython.display", display)
    return shown


# --- 1. the text carries what a pipe shows: shades, not coloured spaces ----------------------------------------
def test_a_labs_text_draws_an_attention_map_in_shades_and_its_html_in_colour(lab):
    shown = lab(":attn layer=0")
    words = " ".join(shown.text.split())
    assert "weight: 0 . : - = + * # % @" in words  # the legend's scale, as a pipe shows it (it read "weight: 0 1.00")
    assert str(shown) == shown.text and repr(shown) == shown.text.rstrip("\n")
    assert "background-color" in shown.html  # the cells keep their colours in the HTML
    again = lab(":attn layer=0")
    assert again.text == shown.text and again.html == shown.html  # each line's recordings start empty


# --- 2. a failed or empty line displays nothing in a notebook --------------------------------------------------
def test_a_failed_or_empty_line_displays_nothing_and_a_view_displays_once(lab, ipython):
    failed, empty = lab(":attn layer=9"), lab("")
    failed._ipython_display_()
    empty._ipython_display_()
    assert ipython == []  # not `<failed: error: ...>` under the error line
    assert failed.status == "failed" and not failed.ok and failed.error.startswith("error: layer must be")
    assert empty.status == "empty"
    lab(":params")._ipython_display_()
    assert len(ipython) == 1 and ipython[0][1] is True and "text/html" in ipython[0][0]


# --- 3. `!minitf COMMAND` under a kernel prints as in a pipe ------------------------------------------------------
class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_one_shot_commands_consoles_under_a_kernels_bang_print_as_in_a_pipe(monkeypatch):
    from minitf_repl import cli

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    monkeypatch.setattr(sys, "stdout", _Terminal())  # the kernel's pseudo-terminal
    assert is_a_terminal(cli._stdout())  # a terminal of its own: live display, colour
    monkeypatch.setenv("JPY_PARENT_PID", "4155")
    monkeypatch.setattr(repl, "ancestor_command_lines", lambda: ["/venv/bin/python -m ipykernel_launcher -f k.json"])
    out = cli._stdout()
    assert not is_a_terminal(out) and out.color_system is None and out.soft_wrap  # no live display, no colour
    monkeypatch.setenv("FORCE_COLOR", "1")  # colour the user forces stays
    assert cli._stdout().color_system is not None


# --- 4. main(argv) in a kernel: plain streams, not display outputs ------------------------------------------------
def test_main_in_a_kernel_writes_its_result_and_errors_as_plain_streams(monkeypatch, capsys, jupyter, tmp_path):
    from minitf_repl.__main__ import main

    monkeypatch.chdir(tmp_path)
    assert main(["--data", "sort:4", "tok", "12"]) == 0
    assert main(["--data", "sort:4", "attn", "--layer", "99"]) == 1
    assert jupyter == []  # no display output of Rich's
    said = capsys.readouterr()
    assert "12" in said.out and "\x1b[" not in said.out
    assert said.err.startswith("error: ") and "layer" in said.err


# --- 5. main([]) in a kernel -----------------------------------------------------------------------------------------
def test_main_with_no_command_in_a_kernel_is_refused_in_one_line(monkeypatch, capsys, tmp_path):
    from minitf_repl.__main__ import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # the kernel's stdin: nothing to read
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: main([]) with no command opens the REPL") and "main(['--help'])" in err
    assert " ".join(err.split()).count("error:") == 1


# --- 6. a line without ':' is text to continue unless its first word is a command ----------------------------------
def test_a_lab_line_without_a_colon_is_text_unless_its_words_are_a_commands_own(lab):
    assert lab("3141=").ok and lab("3141=").command is REGISTRY.plain_text_command  # the question :train says to ask
    text = lab("hello world")  # text, which sort's vocabulary refuses in its own words: no "unknown command :hello"
    assert text.command is REGISTRY.plain_text_command and "vocabulary" in text.error
    assert lab("params").command is REGISTRY.find("params")
    assert lab("help train").command is REGISTRY.find("help")
    # a line that merely starts with a command's name is text, as at the REPL: was ":train takes no text", "not a
    # valid checkpoint name", "no command or setting named 'me'"
    for prose in ("train of thought is", "help me write a poem", "save the day"):
        assert lab(prose).command is REGISTRY.plain_text_command, prose


# --- 7. wrong arguments refused as the Lab is made ------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, kind, words", [
    ({"model": "x"}, TypeError, "MiniTransformerLM"),
    ({"data": 5}, TypeError, "data="),
    ({"checkpoint_dir": 5}, TypeError, "checkpoint_dir="),
    ({"settings": [("lr", 0.1)]}, TypeError, "settings="),
    ({"data": "nosuchdata"}, UserError, "data='nosuchdata'"),
    ({"device": "gpu"}, UserError, "unknown device 'gpu'"),
    ({"device": 0}, TypeError, "device="),
    ({"width": 0}, ValueError, "width=0 leaves no room"),
])
def test_a_lab_refuses_a_wrong_argument_as_it_is_made_in_one_line(kwargs, kind, words, tmp_path, monkeypatch):
    from minitf_repl import Lab

    monkeypatch.chdir(tmp_path)
    with pytest.raises(kind) as raised:
        Lab(**kwargs)
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_a_lab_refuses_a_gpu_this_machine_lacks(tmp_path):
    import torch

    from minitf_repl import Lab

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    with pytest.raises(UserError):
        Lab(device="cuda", checkpoint_dir=tmp_path)


# --- 8, 9. code.md: autosave, the field of :attn, main(argv); README's pointer ---------------------------------------
def test_code_md_says_where_a_labs_train_autosaves_and_names_attns_own_field():
    from minitf_repl.commands.inside import AttnResult
    from minitf_repl.commands.worked import QkvResult

    lab_part = CODE_MD[CODE_MD.index("### From a notebook or a script: Lab"):]
    assert "checkpoints/autosave" in lab_part and "checkpoint_dir=" in lab_part
    assert 'settings={"autosave": False}' in lab_part
    fields = {name: re.search(rf"`r\.(\w+)` of `lab\(\"{name}\"\)`", lab_part).group(1) for name in ("attn", "qkv")}
    assert fields["attn"] in AttnResult.__dataclass_fields__ and fields["qkv"] in QkvResult.__dataclass_fields__
    assert 'main(["train", "--steps",' in " ".join(lab_part.split())


def test_readme_points_to_the_lab_in_code_md():
    readme = (ROOT / "README.md").read_text("utf-8")
    assert "(docs/code.md#from-a-notebook-or-a-script-lab)" in readme and "notebook" in readme.lower()


# --- 10. progress wrapped at spaces, no padding after a line's end ----------------------------------------------------
def test_a_labs_progress_wraps_at_spaces_and_its_text_has_no_trailing_padding(lab, capsys):
    capsys.readouterr()
    say(lab.door.progress, "step 10/30   train 1.234   tokens/s " + "7,621 " * 30)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) > 1 and all(len(line) <= 100 for line in lines)
    helped = lab(":help")
    assert helped.text.strip() and all(line == line.rstrip() for line in helped.text.splitlines())
