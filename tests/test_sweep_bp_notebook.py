"""Findings on minitf in IPython and Jupyter (Lab, Rich's notebook display, `!minitf`): each failed before its fix."""

import io
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import rich.console
import rich.jupyter
from rich.console import Console
from rich.table import Table

from minitf_repl import repl
from minitf_repl.render.tables import fits

CODE_MD = (Path(__file__).resolve().parents[1] / "docs" / "code.md").read_text("utf-8")
TINY = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32}


@pytest.fixture
def jupyter(monkeypatch):
    """Rich believing it runs in a notebook (no ipykernel here): what any console that does not opt out displays."""
    shown = []
    monkeypatch.setattr(rich.console, "_is_jupyter", lambda: True)
    monkeypatch.setattr(rich.jupyter, "display", lambda segments, text: shown.append(text))
    return shown


@pytest.fixture
def lab(tmp_path, jupyter):
    from minitf_repl import Lab

    return Lab(data="sort:4", settings=TINY, checkpoint_dir=tmp_path / "ck")


# --- 1. a front door for notebooks and scripts ------------------------------------------------------------------
def test_lab_runs_a_line_with_or_without_its_colon_and_gives_the_result_its_view_and_its_json(lab, jupyter):
    from minitf_repl.commands.inside import AttnResult

    shown = lab("attn layer=0")
    assert isinstance(shown.result, AttnResult) and shown.status == "ok"
    assert shown.layer == 0 == shown.result.layer  # a field, read on what came back
    bundle = shown._repr_mimebundle_()
    assert "attention, layer 0" in bundle["text/plain"] and "<pre" in bundle["text/html"]
    assert repr(shown) == bundle["text/plain"]  # not the dataclass's kilobytes of floats
    assert shown.json()["schema"].startswith("minitf.attn/")
    assert lab(":attn layer=0").text == shown.text
    assert not jupyter  # nothing displayed behind the result's back


def test_a_lab_line_that_fails_says_its_one_line_and_the_lab_goes_on(lab, capsys):
    failed = lab(":attn layer=9")
    assert failed.status == "failed" and failed.result is None
    assert failed.error.startswith("error: layer must be in 0..0")
    assert "Traceback" not in capsys.readouterr().err
    assert lab(":params").ok


def test_a_lab_adopts_a_model_and_data_built_in_python(tmp_path):
    from minitf_repl import Lab, MiniTransformerLM, ModelConfig, load_data

    data = load_data("sort:4")
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, **TINY))
    lab = Lab(model=model, data=data, checkpoint_dir=tmp_path)
    assert lab.model is model and lab.data is data
    assert lab(":params").result.total == sum(p.numel() for p in model.parameters())


def test_lab_is_exported_lazily_and_documented_with_an_example_the_docs_test_runs():
    code = "import sys, minitf_repl; assert 'rich' not in sys.modules; print(minitf_repl.Lab.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "minitf_repl.notebook"
    from test_sweep_pp import python_snippets

    assert any("Lab(model=model, data=data" in code and "lab(" in code for _, code in python_snippets())


# --- 2. fitting a table in a notebook showed it again for each width measured ----------------------------------
def test_fitting_a_table_displays_nothing_in_a_notebook(jupyter):
    table = Table("a", "b")
    table.add_row("one", "two")
    assert fits(Console(file=io.StringIO(), width=80, force_jupyter=False), table)
    assert jupyter == []


# --- 3. streamed output: one recorded view, not an output per token or line -------------------------------------
def test_streamed_views_and_train_come_back_as_one_view_and_display_nothing_as_they_run(lab, jupyter):
    shapes = lab(":shapes")
    assert shapes.text.count("\n") > 20 and "shape trace" in shapes.text
    trained = lab(":train steps=6 eval_every=3")
    assert trained.text.count("┃ step ┃") == 1 and trained.result.steps == 6  # the table, once, at its end
    assert lab(":gen 1234=").ok
    assert jupyter == []


# --- 4. `!minitf` under a kernel, and main() in one --------------------------------------------------------------
def test_the_repl_refuses_to_start_under_a_kernels_bang(monkeypatch, tmp_path):
    from minitf_repl.session import Session

    monkeypatch.setenv("JPY_PARENT_PID", "4155")
    monkeypatch.setattr(repl, "ancestor_command_lines", lambda: ["/venv/bin/python -m ipykernel_launcher -f k.json"])
    err = Console(file=io.StringIO(), width=300)
    assert repl.run_repl(Session(checkpoint_dir=tmp_path), Console(file=io.StringIO()), err) == 1
    said = err.file.getvalue()
    assert said.startswith("error: the REPL needs a terminal") and "!minitf train --steps 50" in said
    assert "Lab" in said and said.count("\n") == 1


def test_a_kernel_is_told_by_its_variable_and_an_ancestor_not_by_the_variable_alone(monkeypatch):
    monkeypatch.setattr(repl, "ancestor_command_lines", lambda: ["bash", "jupyter-lab"])  # a terminal of Jupyter's
    assert not repl.under_a_kernels_bang({"JPY_PARENT_PID": "1"})
    monkeypatch.setattr(repl, "ancestor_command_lines", lambda: None)  # no /proc: the variable alone
    assert repl.under_a_kernels_bang({"JPY_PARENT_PID": "1"}) and not repl.under_a_kernels_bang({})


def test_main_in_a_kernel_says_what_it_read_and_takes_minitfs_words(monkeypatch, capsys):
    from minitf_repl.__main__ import main

    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setattr(sys, "argv", ["ipykernel_launcher.py", "-f", "kernel.json"])
    assert main() == 2
    err = capsys.readouterr().err
    assert "read the Jupyter kernel's own command line" in err and "No such option" not in err
    assert main(["--version"]) == 0
    assert re.match(r"minitf \d", capsys.readouterr().out)
    assert sys.argv == ["ipykernel_launcher.py", "-f", "kernel.json"]  # the kernel's, put back


# --- 5. Trainer.run from Python, as docs/code.md says it --------------------------------------------------------
def test_code_md_documents_the_callbacks_the_dtype_and_an_interrupt():
    for words in ("on_step(info)", "should_stop()", "on_evaluate(done, eval_batches)", 'TrainConfig(dtype="float32")',
                  "summary.dtype", "KeyboardInterrupt"):
        assert words in CODE_MD, words


def test_an_interrupt_leaves_the_trainer_going_on_with_its_run_as_code_md_says():
    from minitf_repl import MiniTransformerLM, ModelConfig, TrainConfig, Trainer, load_data

    data = load_data("sort:4")
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size, **TINY))
    trainer = Trainer(model, data, TrainConfig(steps=6, batch_size=4, eval_every=3, dtype="float32"))

    def interrupt(info):
        if info.step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        trainer.run(on_step=interrupt)
    assert trainer.step == 2 == len(trainer.history)
    summary = trainer.run()
    assert (summary.steps, trainer.step, summary.dtype) == (4, 6, "float32")
