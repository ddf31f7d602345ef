"""The renderers (render/ and each command family's): each result type, rendered into a plain Console, reads right.

Results are built directly (the dataclasses are the interface), except the shape trace, whose
records come from a real tiny model so the formulas and shapes are the ones users see.
"""

import io

import pytest
from rich.console import Console

from minitf_repl import commands as C
from minitf_repl.dispatch import run_command
from minitf_repl.commands.generate import gen_stats
from minitf_repl.render import LossTable, RichReporter, error, internal_error, render


def console(width=100, **kw):
    return Console(file=io.StringIO(), width=width, color_system=None, **kw)


def text_of(result, width=100) -> str:
    c = console(width)
    render(result, c)
    return c.file.getvalue()


def plain(result, width=100) -> str:
    """What a reader sees of the rendered result, wrapping aside: its words on one line."""
    return " ".join(text_of(result, width).split())


def row(step, train, val, acc=None, lr=3e-3, tps=12345.0, elapsed=1.5):
    return {"step": step, "run_step": step, "run_steps": 20, "train_loss": train, "lr": lr, "grad_norm": 1.0,
            "tokens_per_second": tps, "elapsed": elapsed, "val_loss": val, "accuracy": acc}


def train_result(**kw):
    values = dict(steps=20, total_steps=20, run_remaining=0, stopped=False, resumed=False, train_loss=1.25,
                  val_loss=1.5, accuracy=None, tokens_per_second=23456.0, seconds=2.5,
                  evals=[row(10, 2.0, 2.1), row(20, 1.25, 1.5)], data="pydoc")
    values.update(kw)
    return C.TrainResult(**values)


@pytest.fixture(scope="module")
def tiny_records():
    """A real shape trace of a 2-layer tiny model on the sort task."""
    from minitf_repl.session import Session

    session = Session(data_spec="sort")
    run_command(session, "set", {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32})
    result = run_command(session, "shapes", {"prompt": "3141="})
    return result.records


# --- help ----------------------------------------------------------------------------------------
def test_help_lists_every_command_with_aliases():
    out = text_of(run_command(None, "help", {}))
    for name in C.REGISTRY:
        assert f":{name}" in out
    assert ":quit, :q, :exit" in out
    assert C.REGISTRY["train"].summary in out
    assert "A line without ':' is a prompt" in out


def test_help_detail_shows_usage_and_options():
    out = text_of(run_command(None, "help", {"command": "gen"}))
    assert "usage: :gen [PROMPT]" in out
    assert "temperature=" in out and "cache=" in out and "on|off" in out
    assert ":train" not in out


def test_help_on_a_setting():
    from minitf_repl.session import Session

    out = " ".join(text_of(run_command(Session(), "help", {"command": "n_embd"})).split())
    assert out.startswith("d_model model setting (also n_embd=) width of the residual stream")
    assert "int, >= 1; default 128, now 128" in out and ":set d_model=...; the model is rebuilt" in out
    out = " ".join(text_of(run_command(Session(), "help", {"command": "lr"})).split())
    assert ":set lr=...; :train lr=... sets it too, and it stays" in out


def test_help_detail_names_each_options_other_spellings():
    out = " ".join(text_of(run_command(None, "help", {"command": "set"})).split())  # the table wraps its cells
    assert "(also block_size=)" in out and "(also n_embd=)" in out and "(also batch=)" in out


# --- train ---------------------------------------------------------------------------------------
def test_train_table_and_summary():
    out = text_of(train_result())
    header = next(line for line in out.splitlines() if "train loss" in line)
    for column in ("step", "val loss", "lr", "tokens/s", "elapsed"):
        assert column in header
    assert "accuracy" not in header  # a corpus has no accuracy column
    assert "2.1000" in out and "1.5000" in out and "3.00e-03" in out and "12,345" in out
    # the dtype too, float32 as well: where dtype=auto chose it nothing said which
    assert "trained 20 steps: train loss 1.2500, val loss 1.5000, 23,456 tokens/s, float32, 2.5 s" in out


def test_train_table_has_accuracy_for_a_task():
    out = text_of(train_result(accuracy=0.875, evals=[row(10, 2.0, 2.1, acc=0.5), row(20, 1.2, 1.4, acc=0.875)]))
    assert "accuracy" in out and "50.0%" in out and "87.5%" in out
    assert "accuracy 87.5%" in out


def test_stopped_train_says_how_to_continue():
    out = text_of(train_result(steps=7, total_steps=7, run_remaining=13, stopped=True, evals=[], val_loss=None))
    assert "stopped at step 7 of 20: :train continues" in out
    assert "train loss" in out  # the summary still reports the last loss
    assert "┏" not in out  # no evaluation yet: no table


def test_summary_wraps_at_spaces_when_narrow():
    # It used to be one long line that the terminal broke mid-number ("34" / "1.0 s"); now Rich wraps
    # it at spaces, every line within the width.
    c = console(40)
    render(train_result(), c)
    summary = c.file.getvalue().split("trained 20 steps:")[1].split("now type")[0]  # the next-step hint follows
    lines = ("trained 20 steps:" + summary).splitlines()
    assert len(lines) == 3 and all(len(line) <= 40 for line in lines)
    assert " ".join(line.strip() for line in lines) == (
        "trained 20 steps: train loss 1.2500, val loss 1.5000, 23,456 tokens/s, float32, 2.5 s")


# --- gen -----------------------------------------------------------------------------------------
def test_gen_shows_prompt_text_and_speed():
    result = C.GenResult(prompt="To be", text=", or not", n_tokens=8, seconds=0.5, tokens_per_second=16.0,
                         cache=True, stopped=False)
    out = text_of(result)
    assert "To be, or not" in out
    assert "8 tokens in 0.50 s, 16 tokens/s, cache on" in out
    stopped = C.GenResult("a", "b", 1, 0.1, 10.0, False, True)
    assert "cache off (stopped)" in gen_stats(stopped)


# --- shapes --------------------------------------------------------------------------------------
def test_shapes_one_layer_in_full_the_others_summarized(tiny_records):
    out = text_of(C.ShapesResult("3141=", tiny_records, n_layers=2, layer=0, show_all=False), width=140)
    assert "shape trace of '3141='" in out
    assert "blocks.0 TransformerBlock" in out and "  attn.q_proj " in out and "  ffn.fc_in " in out
    assert out.count("attn.q_proj") == 1  # blocks.1 is one line
    assert "blocks.1 TransformerBlock" in out and "same 19 steps as blocks.0" in out
    # formulas are literal text, not Rich markup: "[idx]" must survive
    assert "x = W_E[idx]" in out and "S = QK^T / sqrt(d_k)" in out
    assert "(B, T) -> (B, T, d) = (1, 5, 32)" in out  # token ids in, embeddings out
    assert "(B, n_h, T, d_k) = (1, 2, 5, 16)" in out  # per-head q
    assert "lm_head" in out and "(B, T, d) -> (B, T, V) = (1, 5, 12)" in out
    assert "1,056" in out  # q_proj: 32*32 + 32 parameters


def test_shapes_all_and_other_layer(tiny_records):
    out = text_of(C.ShapesResult("3141=", tiny_records, n_layers=2, layer=None, show_all=True), width=140)
    assert out.count("attn.q_proj") == 2 and "blocks.1 TransformerBlock" in out
    assert "same 19 steps" not in out
    out = text_of(C.ShapesResult("3141=", tiny_records, n_layers=2, layer=1, show_all=False), width=140)
    assert out.count("attn.q_proj") == 1
    assert out.index("same 19 steps as blocks.1") < out.index("blocks.1 TransformerBlock") < out.index("attn.q_proj")


def test_shapes_fit_a_narrow_terminal(tiny_records):
    c = console(40)
    render(C.ShapesResult("3141=", tiny_records, n_layers=2, layer=0, show_all=False), c)
    lines = c.file.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines)  # the notes too: they wrap at spaces
    assert any("attn.q_proj" in line for line in lines)


# --- device, config, set, data, params -------------------------------------------------------------
def test_device_table_marks_the_current_device():
    from minitf_repl.core.device import DeviceInfo

    devices = [DeviceInfo("cpu", "cpu", "x86_64, 4 threads", 16 * 2**30, True, True),
               DeviceInfo("cuda:0", "cuda", "Tiny GPU", 8 * 2**30, False, True)]
    out = text_of(C.DeviceResult(devices, "cuda:0", switched=True))
    header = next(line for line in out.splitlines() if "name" in line)
    for column in ("kind", "description", "memory", "bf16"):
        assert column in header
    cuda = next(line for line in out.splitlines() if "cuda:0" in line)
    assert "*" in cuda and "Tiny GPU" in cuda and "8.0 GiB" in cuda and "no" in cuda
    cpu = next(line for line in out.splitlines() if "x86_64" in line)
    assert "*" not in cpu and "16.0 GiB" in cpu and "yes" in cpu
    assert "now using cuda:0" in out


def test_config_tables():
    from minitf_repl.session import Session

    result = run_command(Session(), "config", {})
    out = text_of(result)
    for title in ("model", "training", "generation"):
        assert title in out
    assert "d_model" in out and "batch_size" in out and "temperature" in out
    assert "data pydoc" in out and "device auto" in out


def test_set_lists_changes_and_rebuild():
    out = text_of(C.SetResult({"n_layers": (4, 1), "lr": (0.003, 0.01), "top_k": (None, 5)}, rebuilt=True))
    assert "n_layers: 4 -> 1" in out and "lr: 0.003 -> 0.01" in out and "top_k: none -> 5" in out
    assert "weights reset" in out
    assert "nothing changed" in text_of(C.SetResult({}, rebuilt=False))


def test_data_corpus_and_task():
    from minitf_repl.core.data import DataInfo

    corpus = DataInfo("pydoc", "corpus", "Python's docs", 1000, 90, 900, 100)
    out = text_of(C.DataResult(corpus, changed=True, rebuilt=True))
    assert "pydoc" in out and "corpus" in out and "1,000" in out and "90 symbols" in out
    assert "900 / 100 tokens (90/10: the first part of the text, then its end)" in out
    assert "vocabulary of 90: weights reset" in out
    task = DataInfo("sort", "task", "sort 6 digits: 3141=1134", 13, 12, None, None)
    out = text_of(C.DataResult(task, changed=False, rebuilt=False))
    assert "13 per example" in out and "12 symbols" in out and "held out" in out


def test_params_table_total_and_tied_note():
    rows = [("token_embedding.weight", (12, 32), 384), ("blocks.0.ln_1.weight", (32,), 32)]
    tied = {"rows": [{"tied_to": None}, {"tied_to": "token_embedding"}]}  # the ledger's rows say what is tied
    out = text_of(C.ParamsResult(rows, total=416, ledger=tied, show_all=True))
    assert "token_embedding.weight" in out and "(12, 32)" in out and "(32,)" in out
    total = next(line for line in out.splitlines() if "total" in line)
    assert "416" in total
    assert "counted once" in out


def test_quit_and_none_render_nothing():
    assert text_of(C.QuitResult()) == ""
    assert text_of(None) == ""


# --- errors --------------------------------------------------------------------------------------
def test_error_is_literal_and_wraps_at_spaces_when_narrow():
    c = console(40)
    message = "steps must be a whole number, got '[bold]abc[/bold]'; see :help train for the options"
    error(c, message)
    lines = c.file.getvalue().splitlines()
    assert all(len(line) <= 40 for line in lines)  # not one line for the terminal to break mid-word
    assert " ".join(line.strip() for line in lines) == f"error: {message}"  # markup stays literal text


def test_internal_error_line():
    c = console()
    internal_error(c, KeyError("x"))
    assert c.file.getvalue() == "internal error: KeyError: 'x' (run with --debug for the traceback)\n"


def test_no_color_is_respected(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    c = Console(file=io.StringIO(), width=80, force_terminal=True)
    error(c, "boom")
    render(train_result(stopped=True, run_remaining=3), c)
    out = c.file.getvalue()
    assert "boom" in out
    assert "\x1b[31" not in out and "\x1b[33" not in out and "38;" not in out  # no colours, bold may stay


# --- hooks ---------------------------------------------------------------------------------------
class _Info:
    def __init__(self, step, val=None):
        self.step, self.run_step, self.run_steps = step, step, 4
        self.train_loss, self.lr, self.grad_norm = 2.0 - step / 10, 1e-3, 1.0
        self.tokens_per_second, self.elapsed = 1000.0, step * 0.1
        self.val_loss, self.accuracy, self.aux_loss = val, None, None
        self.val_bpc = None if val is None else val / 0.6931471805599453


def test_hooks_without_a_terminal_are_quiet_until_stop():
    c = console()
    hooks = RichReporter(c)
    assert not hooks.live  # a StringIO is not a terminal: no animation
    hooks.on_train_start(4, 0, False)
    hooks.on_step(_Info(1))
    assert c.file.getvalue() == ""
    assert hooks.should_stop() is False
    hooks.request_stop()
    hooks.request_stop()  # a second Ctrl-C is harmless
    assert hooks.should_stop() and hooks.should_stop()
    assert c.file.getvalue().count("stopping after this step...") == 1


def test_hooks_stream_generated_text_then_the_stats():
    c = console()
    hooks = RichReporter(c)
    hooks.gen_prompt = "ab"
    for piece in "cde":
        hooks.on_token(piece)
    hooks.finish(C.GenResult("ab", "cde", 3, 0.01, 300.0, True, False))
    out = c.file.getvalue()
    assert out.startswith("abcde\n")
    assert "3 tokens in 0.01 s, 300 tokens/s, cache on" in out
    assert out.count("abcde") == 1  # not printed a second time


def test_live_hooks_on_a_terminal_show_progress_and_the_table():
    c = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    hooks = RichReporter(c)
    assert hooks.live
    hooks.on_train_start(4, 0, False)
    for step in range(1, 5):
        hooks.on_step(_Info(step, val=1.5 if step % 2 == 0 else None))
    hooks.finish(train_result(steps=4, total_steps=4, evals=[row(2, 1.8, 1.5), row(4, 1.6, 1.5)]))
    out = c.file.getvalue()
    assert "4/4" in out  # the progress bar counted the steps
    assert "trained 4 steps" in out
    hooks.close()  # idempotent


def test_notice_is_printed():
    c = console()
    RichReporter(c).notice("the model was rebuilt, weights reset (step 0)")
    assert "weights reset (step 0)" in c.file.getvalue()


def test_a_result_type_without_a_renderer_still_shows_its_fields():
    from dataclasses import dataclass

    @dataclass
    class SaveResult:
        path: str
        n_bytes: int

    out = text_of(SaveResult("/tmp/[x].safetensors", 1234))
    assert "SaveResult" in out and "/tmp/[x].safetensors" in out and "1234" in out


def test_loss_table_on_a_narrow_terminal_keeps_the_losses_readable():
    c = console(40)
    render(train_result(accuracy=0.5, evals=[row(10, 2.0, 2.1, acc=0.25), row(1000, 1.25, 1.5, acc=0.5)]), c)
    out = c.file.getvalue()
    assert "…" not in out
    assert "1,000" in out and "1.2500" in out and "1.5000" in out and "50.0%" in out
    table = c.file.getvalue().split("trained")[0]
    assert all(len(line) <= 40 for line in table.splitlines())
    assert "tok/s" not in table and "lr" not in table  # dropped when narrow; the summary has the speed
    wide = LossTable([row(10, 2.0, 2.1)])
    assert [col.header for col in wide.table.columns] == [
        "step", "train loss", "val loss", "lr", "tokens/s", "elapsed"]


def test_device_list_on_a_narrow_terminal():
    from minitf_repl.core.device import DeviceInfo

    devices = [DeviceInfo("cpu", "cpu", "x86_64, 4 threads", 16 * 2**30, True, True),
               DeviceInfo("cuda:0", "cuda", "unusable: driver too old", None, False, False)]
    c = console(40)
    render(C.DeviceResult(devices, "cpu", switched=False), c)
    lines = c.file.getvalue().splitlines()
    assert any(line.startswith("*") and "cpu  16.0 GiB  bf16 yes" in line for line in lines)
    assert any("unusable: driver too old" in line for line in lines)
    assert "…" not in c.file.getvalue()


def test_checkpoint_results():
    from minitf_repl.core.checkpoint import CheckpointInfo

    out = text_of(C.SaveResult("run1", "/ck/run1", 300, 150_000, 0.05, replaced=False))
    assert "saved checkpoint run1 (step 300, 146.5 KiB, 0.05 s)" in out and ":load run1" in out
    assert "replaced checkpoint run1" in text_of(C.SaveResult("run1", "/ck/run1", 300, 150_000, 0.05, True))
    config = {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "vocab_size": 12}
    out = text_of(C.LoadResult("run1", "/ck/run1", 300, "sort", 0.125, config, 700, 10_016, "2026-01-02T03:04:05Z"))
    assert "loaded run1: step 300, data sort, 10,016 parameters, val loss 0.1250" in out
    assert "n_layers=1, d_model=32" in out and "700 steps left: :train continues" in out
    rows = [CheckpointInfo("run1", 300, 0.125, "sort", 150_000, "2026-01-02T03:04:05Z", config),
            CheckpointInfo("broken", None, None, None, 10, None, None, error="manifest is not JSON")]
    out = text_of(C.LsResult(rows, "/ck"))
    line = next(line for line in out.splitlines() if "run1" in line)
    assert "300" in line and "0.1250" in line and "sort" in line and "146.5 KiB" in line and "2026-01-02 03:04" in line
    assert "broken: manifest is not JSON" in out  # the reason on a line of its own, not squeezed into a cell
    assert "no checkpoints in /ck yet" in text_of(C.LsResult([], "/ck"))


def test_train_result_reports_its_checkpoint():
    assert "saved checkpoint autosave" in text_of(train_result(saved="autosave"))
    assert "warning: not saved: disk full" in text_of(train_result(save_error="disk full"))


# --- counted nouns -------------------------------------------------------------------------------
def test_one_helper_counts_every_noun():
    from minitf_repl.core.words import count

    assert count(1, "token") == "1 token" and count(0, "token") == "0 tokens" and count(1234, "token") == "1,234 tokens"
    assert count(1, "more guess", "more guesses") == "1 more guess" and count(2, "guess", "guesses") == "2 guesses"


def test_no_message_says_one_of_a_plural():
    one = C.GenResult("a", "\n", 1, 0.1, 10.0, True, False, first_token_seconds=0.01)
    out = text_of(one)
    assert "1 token in" in out and "(1 newline)" in out and "1 tokens" not in out and "1 newlines" not in out
    out = text_of(train_result(steps=1, total_steps=1, evals=[]))
    assert "trained 1 step:" in out
    out = text_of(train_result(steps=1, total_steps=1, run_remaining=1, stopped=True, evals=[]))
    assert "(1 step this time;" in out
    from minitf_repl.core.data import DataInfo

    out = text_of(C.DataResult(DataInfo("x", "corpus", "one letter", 1, 1, 1, 1), changed=False, rebuilt=False))
    assert "1 symbol" in out and "1 symbols" not in out


def test_the_cpu_says_1_core(monkeypatch):
    from minitf_repl.core import device, threads

    # the machine's CPUs and those this process may use (threads.available_cpus: its affinity), the same here
    monkeypatch.setattr(threads, "cgroup_quota", lambda: None)
    monkeypatch.setattr(threads, "affinity", lambda: {0})
    monkeypatch.setattr(device.os, "cpu_count", lambda: 1)
    cpu = next(d for d in device.describe_devices() if d.kind == "cpu")
    assert cpu.description.endswith(", 1 core")
    monkeypatch.setattr(threads, "affinity", lambda: {0, 1})
    monkeypatch.setattr(device.os, "cpu_count", lambda: 2)
    assert device.describe_devices()[0].description.endswith(", 2 cores")


def test_a_subword_piece_shows_its_own_whitespace():
    # A BPE piece " the" showed as an indented "the" in the views' tables, "\n\n" as "?" (not printable).
    from minitf_repl.palette import visible

    assert (visible(" the"), visible("\n\n"), visible(" "), visible("a\x1bb")) == ("␣the", "↵↵", "␣", "a\\x1bb")


def test_words_hang_wrapped_lines_under_the_text():
    from minitf_repl.render.words import say

    c = console(30)
    say(c, "pass init  " + "every word of this text stays whole", hang=11)
    lines = c.file.getvalue().splitlines()
    assert lines[0].startswith("pass init  every") and len(lines) > 1
    assert all(line.startswith(" " * 11) and line[11] != " " for line in lines[1:])
    assert " ".join(" ".join(lines).split()) == "pass init every word of this text stays whole"
