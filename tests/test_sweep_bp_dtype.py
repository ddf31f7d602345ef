"""bfloat16 against float32 on one CPU: what :ls, :checks, :train's notes, --seed's help and the legend say."""

import io
import subprocess
import sys

import pytest
from rich.console import Console

from minitf_repl.commands import REGISTRY
from minitf_repl.dispatch import json_document
from minitf_repl.render import LossTable, RichReporter
from test_commands import Recorder, run, tiny_session
from test_render import plain, row, text_of


@pytest.fixture
def machine(monkeypatch):
    """machine(True): this process stands for a CPU with bfloat16 units (AMX); machine(False): one without, as
    tests/test_sweep_aq.py switches it."""
    from minitf_repl.core import device

    def become(bf16_units: bool) -> None:
        monkeypatch.setattr(device, "cpu_bf16_units", lambda: "AMX" if bf16_units else None)
        monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
        monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
        device._native_bf16.cache_clear()
    yield become
    device._native_bf16.cache_clear()


def notices(session, line: str) -> tuple[list[str], object]:
    recorder = Recorder()
    result = run(session, line, recorder)
    return recorder.notices, result


def saved(name: str, dtype: str) -> None:
    s = tiny_session(dtype=dtype)
    run(s, ":train steps=2")
    run(s, f":save {name}")


# --- 1. :ls tells a bfloat16-trained checkpoint from a float32 one ----------------------------------------------------
def test_ls_says_the_dtype_each_checkpoint_trained_in_where_the_folder_holds_both():
    saved("bf", "bfloat16")
    saved("f32", "float32")
    result = run(tiny_session(), ":ls")
    # was: step, val loss, data, size and date alike for both; only `load --json` had trained_dtype
    dtypes = {row.name: row.trained_dtype for row in result.rows}
    assert {k: dtypes[k] for k in ("bf", "f32")} == {"bf": "bfloat16", "f32": "float32"}
    listed = {row["name"]: row for row in json_document(REGISTRY["ls"], result)["rows"]}
    assert listed["bf"]["trained_dtype"] == "bfloat16"
    lines = {line.split()[1]: line for line in text_of(result, width=120).splitlines() if line.startswith("│")}
    assert "dtype" in text_of(result, width=120) and "bfloat16" in lines["bf"] and "float32" in lines["f32"]
    assert "trained in bfloat16" in plain(result, width=40)  # one checkpoint a line where the table does not fit


def test_ls_of_one_dtype_keeps_its_columns_and_reads_no_torch():
    saved("a", "float32")
    result = run(tiny_session(), ":ls")
    assert result.rows[0].trained_dtype == "float32" and "dtype" not in text_of(result, width=120)
    from minitf_repl.session import Session

    code = ("import sys\n"
            "from minitf_repl.commands import REGISTRY\n"
            "from minitf_repl.dispatch import run_command\n"
            "from minitf_repl.parsing import parse_line\n"
            "from minitf_repl.session import Session\n"
            f"s = Session(); s.checkpoint_dir = {str(Session().checkpoint_dir)!r}\n"
            "cmd, args = parse_line(':ls', REGISTRY)\n"
            "assert run_command(s, cmd.name, args).rows[0].trained_dtype == 'float32'\n"
            "assert 'torch' not in sys.modules, 'torch imported by :ls'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# --- 2. :checks says the dtype its fresh models trained in ---------------------------------------------------------
def test_checks_says_its_fresh_models_train_in_another_dtype_than_the_models_own_steps():
    s = tiny_session(dtype="bfloat16")
    run(s, ":train steps=2")
    run(s, ":set dtype=float32")
    result = run(s, ":checks blind steps=2")
    assert result.trained_dtype == "float32" and result.model_dtype == "bfloat16"
    assert json_document(REGISTRY["checks"], result)["trained_dtype"] == "float32"
    # was: "val ... above the real run", the real run a float32 retrain read beside a bfloat16 model
    assert "blind trained in float32, where the model's own steps ran in bfloat16" in plain(result, width=400)
    same = run(tiny_session(dtype="float32"), ":checks blind steps=2")
    assert same.trained_dtype == "float32" and same.model_dtype is None
    assert "blind trained in float32)" in plain(same, width=400)
    assert run(tiny_session(), ":checks batch").trained_dtype is None  # no check trained


# --- 3. a dtype setting that moves a checkpoint's steps is said, as another machine's dtype=auto is -------------------
def test_a_bfloat16_checkpoint_continued_under_dtype_float32_says_its_steps_ran_in_bfloat16():
    saved("bf", "bfloat16")
    s = tiny_session()
    run(s, ":load bf")
    run(s, ":set dtype=float32")
    said, result = notices(s, ":train steps=2")
    line = next((n for n in said if "steps ran in" in n), "")
    assert "bf's steps ran in bfloat16 and go on here in float32 (dtype=float32 is set)" in line
    assert "(about 0.01)" in line
    assert result.dtype == "float32" and "bfloat16 at step 2, the step before these" in plain(result, width=400)
    said, _ = notices(s, ":train steps=2")  # its steps run in float32 now: nothing moves
    assert not any("steps ran in" in n for n in said)


def test_another_machines_dtype_auto_is_said_at_the_load_and_not_again_at_the_train(machine):
    machine(True)
    saved("lesson", "auto")
    machine(False)
    s = tiny_session()
    said, _ = notices(s, ":load lesson")
    assert sum("steps ran in" in n for n in said) == 1
    said, _ = notices(s, ":train steps=2")
    assert not any("steps ran in" in n for n in said)


# --- 4. --seed's help names the dtype ------------------------------------------------------------------------------
def test_trains_seed_help_says_dtype_auto_differs_by_machine():
    seed = next(p for p in REGISTRY["train"].params if p.name == "seed")
    assert "dtype=auto trains in bfloat16 on a CPU with bfloat16 units and in float32 on one without" in seed.help
    assert ":set dtype=float32 fixes it" in seed.help


# --- 5. the table's legend says what each loss is computed in ------------------------------------------------------
def legend(table: LossTable) -> str:
    c = Console(file=io.StringIO(), width=200, color_system=None)
    c.print(table)
    return " ".join(c.file.getvalue().split())


def test_a_bfloat16_runs_loss_table_says_train_loss_is_bfloat16_and_val_loss_float32():
    rows = [row(5, 2.5, 2.4)]
    said = legend(LossTable(rows, dtype="bfloat16"))
    assert "train loss: one batch, before the step's update, in bfloat16" in said
    assert "val loss: eval_batches held-out batches, after it, in float32" in said
    assert "in bfloat16" not in legend(LossTable(rows, dtype="float32"))
    result = run(tiny_session(dtype="bfloat16"), ":train steps=3")
    assert result.dtype == "bfloat16" and "held-out batches, after it, in float32" in plain(result, width=200)


def test_the_live_tables_legend_says_it_too():
    c = Console(file=io.StringIO(), width=200, force_terminal=True, color_system=None)
    hooks = RichReporter(c)
    run(tiny_session(dtype="bfloat16"), ":train steps=3", hooks)
    assert hooks._table is not None and hooks._table.dtype == "bfloat16"
    assert "before the step's update, in bfloat16" in legend(hooks._table)
