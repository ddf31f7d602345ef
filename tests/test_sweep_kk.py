"""What a sweep of the items earlier sweeps found and left found: each test failed before its fix.

:compare's losses by position, its val loss table and :patch's heads marked the best by the unrounded floats, so two
values shown alike had one marked. `minitf --device cuda config` on a machine without CUDA said nothing, and the
REPL opened on it without a word. Under TERM=dumb, :train, :compare, :checks, :lrfind and :context showed nothing
until they ended. Under torchrun, an error every process met alike (a --load checkpoint or a data file not there, a
device not here) was said once per process. A terminal narrowed during :train kept the top of the wide live table
on screen. :report's loss chart put labels outside the picture (a flat loss read to 7 digits, step 1000000), over
each other (two n-gram counters close together, one near the legend), and drew nothing of a curve of one point.
Control characters were escaped through Rich's private Console._render_buffer.
"""

import pytest

from test_render import text_of


# --- :compare by position marks what it shows ------------------------------------------------------------------
def by_position_rows(bands_of: list[tuple[str, list[float]]]) -> dict:
    from minitf_repl.commands.lab import CompareResult
    from minitf_repl.core.compare import Evaluation, Outcome

    outcomes = [Outcome(label, 10_016, [Evaluation(label, 20, 1.75, None)], 6_000.0, 0.7, {} if not k else
                        {"d_ff": 32}, None, 128, ["4", "5", "6-7"], bands)
                for k, (label, bands) in enumerate(bands_of)]
    text = text_of(CompareResult(outcomes, 20, 1, "sort:4", False))
    return {line.split()[1]: line.split()[2:] for line in text.splitlines() if line.strip()[:1] in "●▲"
            and len(line.split()) == 5}


def test_compare_by_position_marks_every_loss_shown_equal_to_the_lowest():
    rows = by_position_rows([("n_layers=1", [1.75049, 1.9231, 1.8099]), ("d_ff=32", [1.75001, 1.9380, 1.8095])])
    # 1.75049 and 1.75001 both read 1.750: both are the lowest shown; 1.8099 and 1.8095 both read 1.810
    assert rows == {"n_layers=1": ["1.750*", "1.923*", "1.810*"], "d_ff=32": ["1.750*", "1.938", "1.810*"]}


# --- minitf --device cuda config on a machine without CUDA ------------------------------------------------------
def test_config_says_a_device_asked_for_that_this_machine_does_not_have(monkeypatch):
    import json

    from minitf_repl.core import device
    from test_cli import invoke

    monkeypatch.setattr(device, "_cuda_count", lambda: 0)
    monkeypatch.setattr(device, "_mps_available", lambda: False)
    for name, said in [("cuda", "no CUDA GPU found"), ("cuda:1", "no CUDA GPU found"), ("mps", "no Apple MPS")]:
        result = invoke("--device", name, "config")
        assert result.exit_code == 0, result.output  # config shows the settings; the device is refused where used
        warned = [line for line in result.stdout.splitlines() if line.startswith("warning:")]
        assert len(warned) == 1 and f"device {name!r} is not available here ({said}" in warned[0], result.stdout
        assert "available: cpu" in warned[0]
        doc = json.loads(invoke("--device", name, "config", "--json").stdout)
        assert len(doc["problems"]) == 1 and said in doc["problems"][0]
    monkeypatch.setattr(device, "_cuda_count", lambda: 1)
    assert json.loads(invoke("--device", "cuda:0", "config", "--json").stdout)["problems"] == []
    assert "only 1 CUDA GPU" in json.loads(invoke("--device", "cuda:1", "config", "--json").stdout)["problems"][0]
    assert json.loads(invoke("--device", "cpu", "config", "--json").stdout)["problems"] == []


# --- TERM=dumb: a line per evaluation as it happens -------------------------------------------------------------
def dumb_console(width: int = 80):
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), force_terminal=True, width=width, _environ={"TERM": "dumb"})


def test_train_in_a_dumb_terminal_prints_a_line_per_evaluation_as_it_happens():
    from minitf_repl.render.live import RichReporter
    from test_commands import run, tiny_session

    console = dumb_console()
    seen = []  # what the terminal held when each evaluation came

    class Watching(RichReporter):
        def on_step(self, info):
            super().on_step(info)
            if info.val_loss is not None:
                seen.append(console.file.getvalue())

    result = run(tiny_session(), ":train", Watching(console))
    rows = result.evals
    assert [r["step"] for r in rows] == [3, 6]
    before = ""
    for shown, row in zip(seen, rows):  # each evaluation's line is there when it happens, and no redraw codes
        said = " ".join(shown[len(before):].split())
        assert said.startswith(f"step {row['step']} (run ") and f"val loss {row['val_loss']:.4f}" in said, shown
        assert f"train loss {row['train_loss']:.4f}" in said and "\x1b[" not in shown and "\r" not in shown
        before = shown
    assert "step 3 (run" not in seen[1][len(seen[0]):]  # a line each, not the table drawn again


# --- torchrun: an error every process meets alike is said once ----------------------------------------------------
@pytest.fixture
def as_local_rank(monkeypatch):
    """This process as torchrun's process `n` of 2 on this machine (no process group is joined)."""

    def become(n: int):
        for key, value in {"RANK": n, "WORLD_SIZE": 2, "LOCAL_RANK": n, "LOCAL_WORLD_SIZE": 2,
                           "MASTER_ADDR": "127.0.0.1"}.items():
            monkeypatch.setenv(key, str(value))

    return become


class Stopped(BaseException):
    """torchrun's SIGTERM, which ends a process that waits (its default action)."""


def front_door_error(session, name: str, args: dict, quiet: bool) -> tuple[str, str]:
    import io

    from rich.console import Console

    from minitf_repl import dispatch
    from minitf_repl.commands import REGISTRY

    out, err = io.StringIO(), io.StringIO()
    door = dispatch.FrontDoor(session, Console(file=out), Console(file=err, width=400),
                              dispatch.FrontEnd(syntax="shell", json=False, quiet=quiet))
    try:
        assert door.run(REGISTRY.find(name), args) == dispatch.FAILED
    finally:
        said = out.getvalue(), err.getvalue()
    return said


def test_under_torchrun_a_data_file_not_there_is_said_by_the_first_process_alone(as_local_rank, monkeypatch):
    import time

    from minitf_repl.session import Session

    def stopped_by_torchrun(seconds):
        raise Stopped

    as_local_rank(1)
    waits = []
    monkeypatch.setattr(time, "sleep", lambda seconds: (waits.append(seconds), stopped_by_torchrun(seconds)))
    err = []
    with pytest.raises(Stopped):  # it waited, unsaid, and torchrun ended it there once the first process failed
        err.append(front_door_error(Session(data_spec="/nonexistent/poems.txt"), "data", {}, quiet=True))
    assert waits and err == []
    as_local_rank(0)  # the first process says it at once
    monkeypatch.setattr(time, "sleep", stopped_by_torchrun)
    out, said = front_door_error(Session(data_spec="/nonexistent/poems.txt"), "data", {}, quiet=True)
    assert said.startswith("error: no such file: /nonexistent/poems.txt") and len(said.splitlines()) == 1


def test_under_torchrun_an_error_the_first_process_did_not_meet_is_said_after_the_wait(as_local_rank, monkeypatch):
    from minitf_repl.core import distributed
    from minitf_repl.session import Session

    as_local_rank(1)
    monkeypatch.setattr(distributed, "FIRST_SAYS_SECONDS", 0.2)  # not stopped: torchrun's first went on
    out, said = front_door_error(Session(data_spec="/nonexistent/poems.txt"), "data", {}, quiet=True)
    assert said.startswith("error: no such file: /nonexistent/poems.txt") and out == ""


def test_under_torchrun_a_load_that_fails_is_said_by_the_first_process_alone(as_local_rank, monkeypatch, capsys):
    import time

    import typer

    from minitf_repl import cli
    from minitf_repl.core.errors import CheckpointError

    def stopped_by_torchrun(seconds):
        raise Stopped

    monkeypatch.setattr(time, "sleep", stopped_by_torchrun)
    as_local_rank(1)
    with pytest.raises(Stopped), cli._one_line("--load", False):
        raise CheckpointError("no checkpoint named 'nosuch'")
    assert capsys.readouterr().err == ""
    as_local_rank(0)
    with pytest.raises(typer.Exit), cli._one_line("--load", False):
        raise CheckpointError("no checkpoint named 'nosuch'")
    assert capsys.readouterr().err.startswith("error: --load: no checkpoint named 'nosuch'")


@pytest.mark.slow
@pytest.mark.parametrize("args, said", [
    (["--load", "nosuch", "gen", "ab"], "error: --load: no checkpoint named 'nosuch'"),
    # (the shell names its option first: "--data: no such file")
    (["--data", "/nonexistent/poems.txt", "train", "--steps", "2"],
     "error: --data: no such file: /nonexistent/poems.txt"),
])
def test_torchrun_says_an_error_every_process_meets_once_and_fails(tmp_path, args, said):
    import os
    import subprocess
    import sys
    from pathlib import Path

    path = os.pathsep.join(p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "MINITF_CHECKPOINT_DIR": str(tmp_path / "ck"), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": path}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           "-m", "minitf_repl", "--device", "cpu", *args], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode != 0
    lines = (done.stdout + done.stderr).splitlines()
    assert sum(line.startswith(said) for line in lines) == 1, done.stderr[-3000:]


# --- a terminal narrowed during :train keeps no rows of the wide table ------------------------------------------
def test_a_terminal_narrowed_during_train_has_the_live_display_go_back_over_every_row_it_drew(monkeypatch):
    import functools
    import io
    import re

    from rich import live as rich_live
    from rich.cells import cell_len
    from rich.console import Console

    from minitf_repl.core.train import StepInfo
    from minitf_repl.render import live

    monkeypatch.setattr(live, "Live", functools.partial(rich_live.Live, auto_refresh=False))  # draws when told to
    console = Console(file=io.StringIO(), force_terminal=True, width=110, height=40, color_system="standard")
    reporter = live.RichReporter(console)
    reporter.on_train_start(100, 0, False)
    for step in range(10, 60, 10):
        reporter.on_step(StepInfo(step, step, 100, 2.0 - step / 100, 1e-3, 1.0, 12_345.0, step / 10,
                                  val_loss=2.1 - step / 100, accuracy=0.5))
    start = len(console.file.getvalue())
    reporter._live.refresh()
    wide = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\r", "", console.file.getvalue()[start:]).split("\n")
    assert max(map(cell_len, wide)) > 60 and len(wide) > 8  # the bordered table, all its columns
    console.width = 60  # tmux resize-window: each of those lines now wraps onto more rows of the terminal
    start = len(console.file.getvalue())
    reporter._live.refresh()
    redraw = console.file.getvalue()[start:]
    rows = sum(max(1, -(-cell_len(line) // 60)) for line in wide)
    ups = redraw[: redraw.index("step")].count("\x1b[1A")  # before it draws the narrow table
    assert ups == rows - 1, (ups, rows)  # up to the first row of the wide drawing, and not past it
    reporter.close()


# --- :report's loss chart: every label inside the picture, none over another --------------------------------------
def svg_text_boxes(svg: str) -> tuple[float, float, list[tuple[str, float, float, float, float]]]:
    """The picture's width and height, and each text's box (x0, y0, x1, y1), its width read as 0.6 em a character
    (a digit of a sans-serif font is about 0.55 em)."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg)
    boxes = []
    for t in root.iter("{http://www.w3.org/2000/svg}text"):
        size, x, y, text = float(t.get("font-size")), float(t.get("x")), float(t.get("y")), t.text or ""
        wide = 0.6 * size * len(text)
        if (t.get("transform") or "").startswith("rotate(-90"):  # upright, read bottom to top (an axis's name)
            y0 = {"end": y, "middle": y - wide / 2}.get(t.get("text-anchor"), y - wide)
            boxes.append((text, x - 0.8 * size, y0, x + 0.2 * size, y0 + wide))
            continue
        x0 = {"end": x - wide, "middle": x - wide / 2}.get(t.get("text-anchor"), x)
        boxes.append((text, x0, y - 0.8 * size, x0 + wide, y + 0.2 * size))
    return float(root.get("width")), float(root.get("height")), boxes


def label_problems(svg: str) -> list[str]:
    width, height, boxes = svg_text_boxes(svg)
    problems = [f"{t!r} outside" for t, x0, y0, x1, y1 in boxes if x0 < 0 or y0 < 0 or x1 > width or y1 > height]
    for i, a in enumerate(boxes):
        problems += [f"{a[0]!r} over {b[0]!r}" for b in boxes[i + 1:]
                     if a[1] < b[3] and b[1] < a[3] and a[2] < b[4] and b[2] < a[4]]
    return problems


def chart(train: tuple[list, list], val: tuple[list, list], vocab_size=None, counters=()) -> str:
    from minitf_repl.commands.train import PlotSeries
    from minitf_repl.report import loss_chart_svg

    return loss_chart_svg([PlotSeries("train", *train), PlotSeries("val", *val)], vocab_size, counters=counters)


@pytest.mark.parametrize("train, val, vocab_size", [
    (([1, 2, 3], [0.0001234, 0.0001236, 0.0001235]), ([3], [0.0001235]), None),  # a flat loss read to 7 digits
    ((list(range(1, 1_000_001, 10_000)), [2 - k / 200 for k in range(100)]), ([1_000_000], [1.5]), 65),  # long
    (([1, 2, 3], [1.234e6, 3e6, 2.5e6]), ([3], [2e6]), 65),  # a run blown up
    (([1, 2, 3], [2.0, 2.0, 2.0]), ([3], [2.0]), None),  # flat
    (([1], [2.4]), ([1], [2.3]), 12),  # one step
])
def test_report_chart_labels_stay_inside_the_picture_and_apart(train, val, vocab_size):
    assert label_problems(chart(train, val, vocab_size)) == []


def test_report_chart_counter_labels_keep_off_each_other_and_the_legend():
    from minitf_repl.commands.train import PlotLevel

    curves = ([1, 50, 100], [4.2, 2.0, 1.5]), ([50, 100], [2.1, 1.6])
    assert label_problems(chart(*curves, 65, [PlotLevel(2, 2.45), PlotLevel(3, 2.40)])) == []  # close together
    assert label_problems(chart(*curves, 65, [PlotLevel(2, 4.05)])) == []  # up where the legend is


def test_report_chart_draws_a_curve_of_one_point():
    """A run of one step, or one evaluation: a line of one point draws nothing, and the legend named a curve that was
    not there."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(chart(([1, 2, 3], [2.4, 2.3, 2.2]), ([3], [2.25]), 12))
    dots = [c for c in root.iter("{http://www.w3.org/2000/svg}circle")]
    assert len(dots) == 1 and dots[0].get("stroke") == "#d62728"  # the val loss's one point, in its colour


# --- control characters escaped through Rich's public API ----------------------------------------------------------
def test_control_characters_in_any_renderable_are_escaped_without_rich_private_methods():
    import io

    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    from minitf_repl.render import console_for
    from minitf_repl.render.words import _Console

    assert "_render_buffer" not in vars(_Console)  # Rich's private method, which may change under a new Rich
    out = io.StringIO()
    console = console_for(file=out, force_terminal=True, width=100)
    table = Table()
    table.add_column("name")
    table.add_row(Text("a\x1b[31mRED\x1b]0;title\x07"))  # a Text made by hand, not through tables.add_row
    console.print(table)
    with Live(Text("live \x1b[2J"), console=console, auto_refresh=False) as live:
        live.refresh()
    shown = out.getvalue()
    assert "\x07" not in shown and "\x1b]" not in shown and "\x1b[2J" not in shown and "\x1b[31mRED" not in shown
    assert "a\\x1b[31mRED" in shown and "live \\x1b[2J" in shown


def test_compare_table_bolds_every_loss_shown_equal_to_the_best_of_its_row():
    from minitf_repl.core.compare import Evaluation
    from minitf_repl.render.live import CompareTable

    def bold(table) -> list[list[bool]]:  # per contender column, per row: whether the cell is in bold
        return [[cell.style == "bold" for cell in column._cells] for column in table.columns[1:]]

    by_loss = CompareTable(["a", "b", "c"], 1)
    for label, loss in [("a", 1.75281), ("b", 1.75279), ("c", 1.75301)]:  # 1.7528, 1.7528, 1.7530
        by_loss.add(Evaluation(label, 10, loss, None))
    assert bold(by_loss.table()) == [[True], [True], [False]]
    by_bits = CompareTable(["a", "b"], 1, by_bpc=True)
    for label, loss, bits in [("a", 2.1, 1.23449), ("b", 1.9, 1.23351)]:  # both bits read 1.234
        by_bits.add(Evaluation(label, 10, loss, None, bpc=bits))
    assert bold(by_bits.table()) == [[True], [True]]


def test_patch_bolds_every_head_shown_equal_to_the_most_restored():
    import io

    from minitf_repl.render import console_for, render
    from test_commands import run, tiny_session

    s = tiny_session()
    run(s, ":train steps=2")
    result = run(s, ":patch 1234= 1243=")
    n_layers, n_heads = len(result.heads), len(result.heads[0])
    result.heads = [[0.1] * n_heads for _ in range(n_layers)]
    result.heads[0][0], result.heads[-1][-1] = 0.8712, 0.8698  # both read 0.87
    out = io.StringIO()
    render(result, console_for(file=out, force_terminal=True, width=120, color_system="truecolor"))
    import re

    assert len(re.findall(r"\x1b\[1;32m *0\.87", out.getvalue())) == 2, out.getvalue()


def test_checks_lrfind_and_context_in_a_dumb_terminal_say_how_far_they_are(monkeypatch):
    from minitf_repl.render import live
    from minitf_repl.render.live import RichReporter

    monkeypatch.setattr(live, "PROGRESS_LINES_AFTER", 0.0)  # a long work's (a blink's says nothing: test_sweep_m5)
    console = dumb_console()
    reporter = RichReporter(console)
    for done in range(1, 13):
        reporter.on_progress("lrfind", done, 12)
        if done == 3:
            assert console.file.getvalue() == "lrfind: 3/12\n"  # said as it happens, not at the end
    assert console.file.getvalue().splitlines() == ["lrfind: 3/12", "lrfind: 6/12", "lrfind: 9/12", "lrfind: 12/12"]


def test_the_repl_says_at_once_that_the_device_it_was_started_on_is_not_here(monkeypatch):
    from prompt_toolkit.history import InMemoryHistory
    from prompt_toolkit.input import create_pipe_input
    from prompt_toolkit.output import DummyOutput

    from minitf_repl import repl
    from minitf_repl.core import device
    from minitf_repl.session import Session
    from test_repl import consoles

    monkeypatch.setattr(device, "_cuda_count", lambda: 0)

    def start(name: str) -> str:
        out, err = consoles()
        with create_pipe_input() as inp:
            inp.send_text(":q\r")
            repl.run_repl(Session(data_spec="sort:4", device_name=name), out, err, input=inp, output=DummyOutput(),
                          history=InMemoryHistory())
        return " ".join(err.file.getvalue().split())

    said = start("cuda")  # `minitf --device cuda` on a machine without CUDA: said at the first :train, not before
    assert said.startswith("warning: device 'cuda' is not available here (no CUDA GPU found); available: cpu")
    assert said.endswith(":device NAME switches to one that is")
    assert start("bogus").startswith("warning: unknown device 'bogus'; use one of auto, cpu, cuda, cuda:N or mps")
    assert start("cpu") == "" and start("auto") == ""


def test_compare_in_a_dumb_terminal_says_a_contender_that_diverged_when_it_does():
    from minitf_repl.core.compare import Evaluation
    from minitf_repl.render.live import RichReporter

    console = dumb_console()
    reporter = RichReporter(console)
    reporter.on_compare_start(["lr=1", "lr=0.01"], 20, 1)
    reporter.on_compare_eval(Evaluation("lr=0.01", 10, 1.5, None))
    reporter.on_compare_diverged("lr=1")
    assert console.file.getvalue().splitlines() == ["lr=0.01 step 10: val loss 1.5000",
                                                    "lr=1 diverged: it stops here, the others go on"]
    reporter.on_compare_diverged("lr=0.01")
    assert console.file.getvalue().splitlines()[-1] == "lr=0.01 diverged: it stops here"


def test_report_chart_legend_stays_off_the_curves():
    """The legend sat inside the frame at its top left, where a loss curve starts (its highest point): "train" was
    written over the start of the train curve."""
    import xml.etree.ElementTree as ET

    svg = "{http://www.w3.org/2000/svg}"
    root = ET.fromstring(chart(([1, 50, 100], [4.2, 2.0, 1.5]), ([50, 100], [2.1, 1.6]), 65))
    frame_top = float(root.find(f"{svg}rect").get("y"))
    legend = [t for t in root.iter(f"{svg}text") if t.text in ("train", "val")]
    assert len(legend) == 2 and all(float(t.get("y")) + 0.2 * 12 <= frame_top for t in legend)
    assert label_problems(ET.tostring(root, encoding="unicode")) == []


def test_compare_in_a_dumb_terminal_gives_the_spread_over_seeds_as_its_table_does():
    from minitf_repl.core.compare import Evaluation
    from minitf_repl.render.live import RichReporter

    console = dumb_console()
    reporter = RichReporter(console)
    reporter.on_compare_start(["a", "b"], 20, 3)
    reporter.on_compare_eval(Evaluation("a", 10, 1.5, 0.0123, bpc=2.34567, bpc_spread=0.0456))
    assert console.file.getvalue() == "a step 10: val loss 1.5000 ±0.012, bits/char 2.346 ±0.046\n"


def test_a_dumb_terminal_keeps_a_width_given_or_set_without_rich_private_attributes(monkeypatch):
    from minitf_repl.render import console_for
    from test_sweep_gg import dumb_terminal

    with dumb_terminal(monkeypatch, 40) as tty:
        assert console_for(file=tty).width == 40  # the terminal's own
        console = console_for(file=tty, width=33)
        assert console.width == 33
        console.width = 44
        assert console.width == 44
        console.size = (55, 20)
        assert console.width == 55


# --- :ngram's verdict compares the losses as it writes them -------------------------------------------------------
def test_ngram_verdict_never_says_below_of_two_losses_it_writes_alike():
    from types import SimpleNamespace

    from minitf_repl.commands.counting import verdict

    def row(n, loss):
        return SimpleNamespace(n=n, val_loss=loss)

    def said(model: float, rows: list) -> str:
        return verdict(SimpleNamespace(rows=rows, model_val=model, model_causal=True, model_step=100,
                                       nothing_to_learn=False, unit="character", ablations=[]))[0]

    counters = [row(0, 2.485), row(1, 2.3), row(2, 1.9), row(3, 1.5231)]
    line = said(1.5229, counters)  # the model's 1.523 and the trigram's 1.523
    assert "not yet below n = 3 (1.523)" in line and "below the counter of n = 2 (1.900)" in line, line
    line = said(1.5229, counters[:3] + [row(3, 1.5231 + 0.0)])
    assert "below every counter" not in line
    assert "below every counter" in said(1.5, counters) and "0.023 nats" in said(1.5, counters)


def test_plot_says_a_val_loss_written_alike_a_counters_is_at_it_not_below_or_above():
    from minitf_repl.commands.train import PlotLevel, against_counters
    from minitf_repl.syntax import speaking

    levels = [PlotLevel(2, 1.9), PlotLevel(3, 1.5231)]
    with speaking("repl"):
        said = against_counters(1.5229, levels)  # both written 1.523
        assert said.startswith("val 1.523: below the 2-gram counter's 1.900, at the 3-gram counter's 1.523"), said
        assert "below the 3-gram" not in against_counters(1.5232, levels)
        assert against_counters(1.4, levels).startswith("val 1.400: below the 3-gram counter's 1.523")
        assert "above the 2-gram counter's 1.900" in against_counters(2.0, levels)


def test_compare_verdict_by_bits_per_character_calls_bits_written_alike_a_tie():
    from minitf_repl.commands.lab import compare_verdict
    from minitf_repl.core.compare import Evaluation, Outcome

    def outcome(label, bits):
        return Outcome(label, 1000, [Evaluation(label, 20, 2.0, None, bpc=bits)])

    said = compare_verdict([outcome("char", 1.23449), outcome("bpe:300", 1.23351), outcome("bpe:600", 1.4)], 1,
                           "bits per character")  # 1.234 and 1.234: no "better" between them
    assert said.startswith("bpe:300 and char tie by bits per character: 1.234 on the val text, against 1.400 for "
                           "bpe:600"), said
    said = compare_verdict([outcome("char", 1.2), outcome("bpe:300", 1.3)], 1, "bits per character")
    assert said.startswith("char is better by bits per character: 1.200 on the val text, against 1.300 for bpe:300")
