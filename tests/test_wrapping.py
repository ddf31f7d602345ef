"""One wrapping rule for every message: no word, number or name is ever split across lines.

Every command's output (each result type a renderer is registered for, from real commands on a tiny model and
from hand-made results with long names and numbers), errors, notices and the live reporter's final
output are rendered at 60, 80 and 100 columns and read as a terminal of that width shows them: a
line longer than the width continues on the next row, cut at the last column, wherever that falls.
A whitespace-separated token seen there that the same output at 2000 columns does not contain, and
that is the start or the end of a token it does contain (`eve` of `every`, `kept-202612` of
`kept-20261201-033731`), is a broken word; so is a token cut short with `…`. Only a token wider than
the terminal itself may be broken: nothing can keep it whole, and it is printed whole for the
terminal to wrap (its characters stay one line for copy and paste).
"""

import io
import re

import pytest
from rich.cells import cell_len, chop_cells
from rich.console import Console

from minitf_repl import commands as C
from minitf_repl.commands import shared, speed
from minitf_repl import render as R
from minitf_repl.core.checkpoint import CheckpointInfo
from minitf_repl.core.compare import Evaluation, Outcome
from minitf_repl.core.data import DataInfo
from minitf_repl.dispatch import FrontDoor, FrontEnd, run_command
from minitf_repl.session import Session

WIDTHS = (60, 80, 100)
WIDE = 2000
KEPT = "kept-20261201-033731"  # what keep_trained_model names a checkpoint
LONG_DIR = "/home/someone/projects/minitf/checkpoints"


def rendered(draw, width: int) -> str:
    c = Console(file=io.StringIO(), width=width, color_system=None)
    draw(c)
    return c.file.getvalue()


def terminal_rows(text: str, width: int) -> list[str]:
    """The rows a terminal `width` columns wide shows: a longer line goes on, cut at the column."""
    rows = []
    for line in text.splitlines():
        rows.extend(chop_cells(line, width) if cell_len(line) > width else [line])
    return rows


def broken_tokens(draw, width: int) -> set[str]:
    """The pieces of words, numbers and names that `draw` leaves split at this width.

    A token on one row that the unbounded output lacks, which with a token of the next row makes
    (the start of) one of its tokens, is a broken word: `eve` + `ry` = `every`, whether the terminal
    cut the line or Rich folded a table cell. A token cut short with `…` is broken too. A word only
    a narrow layout uses (the loss table's `acc`) has no such other half, and a token wider than the
    terminal is exempt (see the module's docstring).
    """
    whole = set(rendered(draw, WIDE).split())
    fitting = [w for w in whole if len(w) <= width]
    lines = terminal_rows(rendered(draw, width), width)
    rows = [line.split() for line in lines]
    broken = {t for row in rows for t in row if "…" in t and t not in whole}
    for row, below in zip(rows, rows[1:]):
        for head in row:
            if head in whole or not any(ch.isalnum() for ch in head):
                continue
            for tail in below:
                if any(w.startswith(head + tail) for w in fitting):
                    broken |= {head, tail}
    for line, row in zip(lines, rows):  # cut off at the edge (Rich crops a line that does not wrap)
        if row and cell_len(line.rstrip()) >= width and row[-1] not in whole and any(ch.isalnum() for ch in row[-1]):
            if any(w.startswith(row[-1]) for w in fitting):
                broken.add(row[-1])
    return broken


# --- the check itself can fail -----------------------------------------------------------------------
def test_the_check_sees_a_terminal_break_a_long_line_mid_word():
    from rich.console import Group
    from rich.text import Text

    line = "the trained model was kept as checkpoint " + KEPT + ": :load " + KEPT + " brings it back"

    def soft(console):  # Rich leaves the line long; the terminal breaks it where the column ends
        console.print(Text(line), soft_wrap=True)

    def folded(console):  # Rich folds the name itself (as in a table column too narrow for it)
        console.print(Text(line, overflow="fold"), width=12 if console.width < WIDE else None)

    def cropped(console):  # a line that does not wrap, cut at the edge (Text in a Group keeps its overflow)
        console.print(Group(Text(line, overflow="ignore")))

    assert broken_tokens(soft, 60)
    assert broken_tokens(folded, 60)
    assert broken_tokens(cropped, 60)
    assert not broken_tokens(lambda console: R.say(console, line), 60)


# --- results from real commands on a tiny model ---------------------------------------------------
TINY = {"n_layers": 2, "d_model": 16, "n_heads": 4, "n_kv_heads": 2, "d_ff": 32, "max_seq_len": 16,
        "batch_size": 4, "optimizer": "adamw"}


@pytest.fixture(scope="module")
def real_results(tmp_path_factory):
    """One of each command's results, as the commands return them (a few steps of training each)."""
    folder = tmp_path_factory.mktemp("ck")
    s = Session(data_spec="sort:4", checkpoint_dir=folder)
    tokens, speed.QUANTIZE_TOKENS = speed.QUANTIZE_TOKENS, 8  # :quantize int8 times 8 tokens, not 64
    out = {}
    try:
        out["help"] = run_command(s, "help", {})
        out["help train"] = run_command(s, "help", {"command": "train"})
        out["help lr"] = run_command(s, "help", {"command": "learning_rate"})
        out["config"] = run_command(s, "config", {})
        out["set"] = run_command(s, "set", dict(TINY))
        out["data"] = run_command(s, "data", {})
        out["train"] = run_command(s, "train", {"steps": 10, "eval_every": 5})
        out["data rebuild"] = run_command(s, "data", {"name": "random:20"})  # another vocabulary: kept, rebuilt
        run_command(s, "train", {"steps": 2, "eval_every": 2})
        out["set rebuild"] = run_command(s, "set", {"n_layers": 3})
        out["data back"] = run_command(s, "data", {"name": "reverse:4"})
        run_command(s, "train", {"steps": 2, "eval_every": 2})
        out["gen"] = run_command(s, "gen", {"prompt": "3141=", "n": 30})
        out["gen probs"] = run_command(s, "gen", {"prompt": "3141=", "n": 30, "show": "probs"})
        out["shapes"] = run_command(s, "shapes", {})
        out["shapes all"] = run_command(s, "shapes", {"all": True})
        out["device"] = run_command(s, "device", {})
        out["params"] = run_command(s, "params", {})
        out["params all"] = run_command(s, "params", {"all": True})
        out["save"] = run_command(s, "save", {"name": "a-checkpoint-with-a-rather-long-name"})
        out["load"] = run_command(s, "load", {"name": "a-checkpoint-with-a-rather-long-name"})
        out["ls"] = run_command(s, "ls", {})
        out["attn"] = run_command(s, "attn", {})
        out["attn head"] = run_command(s, "attn", {"head": "1"})
        out["step"] = run_command(s, "step", {})
        out["lens"] = run_command(s, "lens", {})
        out["lens both"] = run_command(s, "lens", {"at": "both"})
        out["score"] = run_command(s, "score", {})  # reverse:4: the question given, the answer counted
        out["score text"] = run_command(s, "score", {"text": "1234=4321" * 3})
        out["score counter"] = run_command(s, "score", {"text": "1234=4321" * 3, "counter": 3})
        out["embed"] = run_command(s, "embed", {"text": "0123456789=", "k": 5})
        out["embed map"] = run_command(s, "embed", {"text": "0123456789=", "map": True})
        out["qkv"] = run_command(s, "qkv", {"layer": 2, "head": 1})
        out["qkv long"] = run_command(s, "qkv", {"prompt": "1234=4321" * 3, "at": -1})  # summed rows, no future
        out["resid"] = run_command(s, "resid", {})
        out["ln"] = run_command(s, "ln", {"layer": 1, "which": "ln_2", "k": 12})
        out["ln final"] = run_command(s, "ln", {"which": "ln_f"})
        out["ffn"] = run_command(s, "ffn", {"layer": 1, "k": 12})
        out["kv"] = run_command(s, "kv", {"n": 30})  # past the window: refilled, and the middle in one line
        out["grad"] = run_command(s, "grad", {})  # reverse:4: the question given, the answer counted
        out["grad all"] = run_command(s, "grad", {"text": "1234=4321", "all": True})
        out["muon"] = run_command(s, "muon", {"layer": 1, "matrix": "ffn.fc_in"})
        out["patch"] = run_command(s, "patch", {"prompts": "1234= 4321="})
        out["attrib"] = run_command(s, "attrib", {})
        for view in ("attn", "samples", "lens"):
            out[f"train watch={view}"] = run_command(s, "train", {"steps": 2, "eval_every": 1, "watch": view})
        out["plot lens_rank"] = run_command(s, "plot", {"what": "lens_rank"})  # the last run's frames: lens
        out["train watch=grad"] = run_command(s, "train", {"steps": 2, "eval_every": 1, "watch": "grad"})
        out["plot block_grad"] = run_command(s, "plot", {"what": "block_grad"})
        out["heads"] = run_command(s, "heads", {})
        out["heads text"] = run_command(s, "heads", {"text": "1234=4321" * 2, "layer": 2})
        out["train watch=heads"] = run_command(s, "train", {"steps": 2, "eval_every": 1, "watch": "heads"})
        out["plot copying"] = run_command(s, "plot", {"what": "copying"})
        out["plot induction"] = run_command(s, "plot", {"what": "induction"})
        out["plot"] = run_command(s, "plot", {})
        out["tok"] = run_command(s, "tok", {"text": "3141592653589793=1123345567899" * 4})
        out["report"] = run_command(s, "report", {"path": str(folder / "report.html")})
        out["ablate"] = run_command(s, "ablate", {"what": "head=0.1"})
        out["ablate off"] = run_command(s, "ablate", {"what": "off"})
        out["quantize"] = run_command(s, "quantize", {})
        out["quantize int8"] = run_command(s, "quantize", {"mode": "int8"})
        out["compare"] = run_command(s, "compare", {"contenders": "current n_layers=1", "steps": 2, "seeds": 2,
                                                    "eval_every": 1})
        run_command(s, "set", {"n_experts": 4, "experts_per_token": 2})
        out["experts"] = run_command(s, "experts", {})
        run_command(s, "set", {"n_experts": 1, "pos_encoding": "rope"})
        out["rope"] = run_command(s, "rope", {"prompt": "1234=4321" * 3, "layer": 1, "head": 3})  # GQA: a shared head
        out["ngram task"] = run_command(s, "ngram", {"n": 3})  # reverse:4, trained: the answers scored
        out["mistakes task"] = run_command(s, "mistakes", {"n": 50})  # a few steps: many wrong answers
        run_command(s, "data", {"name": "pydoc"})
        out["ngram"] = run_command(s, "ngram", {"n": 7})  # a corpus: the samples, and val rising past n = 5
        out["lrfind"] = run_command(s, "lrfind", {"steps": 30})
        out["context"] = run_command(s, "context", {"windows": 64})
        out["mistakes"] = run_command(s, "mistakes", {"n": 16})  # pydoc: the hardest tokens, with their text
        out["checks"] = run_command(s, "checks", {"steps": 3})  # 3 steps: blind and overfit fail, and say why
        run_command(s, "set", {"causal": False})
        out["checks causal off"] = run_command(s, "checks", {"which": "rows causal"})  # the map's future read
    finally:
        speed.QUANTIZE_TOKENS = tokens
    return out


REAL = ("help", "help train", "config", "set", "data", "train", "data rebuild", "set rebuild", "data back", "gen", "gen probs",
        "shapes", "shapes all", "device", "params", "params all", "save", "load", "ls", "attn", "attn head", "step",
        "lens", "lens both", "patch", "attrib", "train watch=attn", "train watch=samples", "train watch=lens",
        "plot lens_rank", "plot", "tok", "report", "ablate", "ablate off", "quantize", "quantize int8", "compare", "experts",
        "help lr", "score", "score text", "score counter", "embed", "embed map", "qkv", "qkv long", "resid", "ln", "ln final", "ffn", "kv", "grad", "grad all", "muon", "train watch=grad",
        "plot block_grad", "rope", "heads", "heads text", "train watch=heads", "plot copying", "plot induction",
        "ngram task", "ngram", "checks", "checks causal off", "lrfind", "context")


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", REAL)
def test_no_command_output_splits_a_word(real_results, name, width):
    result = real_results[name]
    assert broken_tokens(lambda console: R.render(result, console), width) == set()


# --- hand-made results: long numbers, names and sentences -------------------------------------------
def _row(step, train, val, acc=None):
    return {"step": step, "run_step": step, "run_steps": 3000, "train_loss": train, "lr": 3e-3, "grad_norm": 1.0,
            "tokens_per_second": 123456.0, "elapsed": 1234.5, "val_loss": val, "accuracy": acc, "aux_loss": None}


def _train(**kw):
    values = dict(steps=1000, total_steps=3000, run_remaining=0, stopped=False, resumed=False, train_loss=1.2345,
                  val_loss=1.3456, accuracy=0.875, tokens_per_second=123456.0, seconds=1234.5,
                  evals=[_row(2000, 1.5, 1.6, 0.5), _row(3000, 1.2345, 1.3456, 0.875)], data="sort",
                  saved="autosave", schedule="continue", constant_lr=1.5e-4, vocab_size=12,
                  dtype="bfloat16", compiled=True, compile_seconds=41.2)
    values.update(kw)
    return C.TrainResult(**values)


def _outcome(label, base):
    curve = [Evaluation(label, s, base - s / 1000, 0.012) for s in (100, 200, 300)]
    return Outcome(label, 123456, curve, 23456.0, 12.5, {"norm": "rmsnorm", "bias": False})


HAND = {
    "train, a long summary": _train(),
    "train, stopped": _train(stopped=True, run_remaining=1234, steps=766, evals=[]),
    "train, not saved": _train(saved=None, save_error=f"cannot write {LONG_DIR}/autosave: permission denied"),
    "gen, only whitespace": C.GenResult("\n", " \n\n  \t" * 10, 40, 0.1234, 324.1, True, False, default_prompt=True,
                                        untrained=True, first_token_seconds=0.012),
    "gen, a long text": C.GenResult("To be", ", or not to be, that is the question: whether 'tis nobler in the mind "
                                    "to suffer the slings and arrows of outrageous fortune, or to take arms against "
                                    "a sea of troubles", 123, 1.5, 82.0, True, False),
    "set, kept": C.SetResult({"n_layers": (4, 2), "d_model": (128, 256)}, rebuilt=True, kept=KEPT, preset="modern"),
    "data, kept": C.DataResult(DataInfo("shakespeare", "corpus", "tiny Shakespeare (local file "
                                        f"{LONG_DIR}/../data/tinyshakespeare.txt)", 1_115_394, 65, 1_003_854, 111_540),
                               changed=True, rebuilt=True, kept=KEPT,
                               recipe={"lr": (0.003, 0.01), "steps": (1000, 2000), "batch_size": (16, 64)}),
    "save": C.SaveResult(KEPT, f"{LONG_DIR}/{KEPT}", 123_456, 123_456_789, 12.34, replaced=True),
    "load": C.LoadResult(KEPT, f"{LONG_DIR}/{KEPT}", 123_456, "shakespeare", 1.2345,
                         {"n_layers": 12, "d_model": 768, "n_heads": 12, "d_ff": 3072, "max_seq_len": 1024},
                         12_345, 123_456_789, "2026-12-01T03:37:31Z",
                         data_missing="the vocabulary of /a/very/long/path/to/some/file.txt only (the data is not "
                                      "available): generation works, training does not"),
    "ls, many": C.LsResult([CheckpointInfo(KEPT, 123_456, 1.2345, "/a/long/path/to/input.txt", 123_456_789,
                                           "2026-12-01T03:37:31Z"),
                            CheckpointInfo("autosave-3", 12, None, "sort:12", 1234, "2026-12-01T03:37:31Z"),
                            CheckpointInfo("broken", None, None, None, 10, None,
                                           error="manifest.json is not valid JSON (line 1, column 2); delete the "
                                                 "folder or restore it from a backup")], LONG_DIR),
    "ls, empty": C.LsResult([], LONG_DIR),
    "compare, verdict": C.CompareResult([_outcome("preset=seed", 2.0), _outcome("norm=rmsnorm,bias=off", 1.9),
                                         _outcome("n_layers=2", 1.95)], 300, 3, "shakespeare", False,
                                        "norm=rmsnorm,bias=off has the lowest val loss; it beats preset=seed on the "
                                        "same 3 seeds, beyond the noise of the gap (paired t-test, 95%); against "
                                        "n_layers=2 the gap is within the noise of 3 seeds"),
    "compare, one seed": C.CompareResult([_outcome("current", 2.0), _outcome("n_layers=2", 1.9)], 300, 1,
                                         "shakespeare", True),
    "experts": C.ExpertsResult([0, 1], [[0.5, 0.25, 0.125, 0.125], [0.97, 0.01, 0.01, 0.01]],
                               [[64, 32, 16, 16], [124, 2, 1, 1]], 1.234, 2),
    "report": C.ReportResult(f"{LONG_DIR}/../reports/a-long-report-name.html", 1_234_567,
                             ["config", "loss chart", "attention maps", "loss by position", "teacher forcing",
                              "samples"], 1.23),
    "save, hf": C.SaveResult(f"hf:{LONG_DIR}/gpt2-finetuned", f"{LONG_DIR}/gpt2-finetuned", 123_456, 497_759_123,
                             3.21, replaced=False, architecture="gpt2"),
    "load, hf": C.LoadResult(f"hf:{LONG_DIR}/llama", f"{LONG_DIR}/llama", 0, "shakespeare", None,
                             {"n_layers": 16, "d_model": 2048, "n_heads": 32, "d_ff": 12288, "max_seq_len": 2048},
                             0, 1_235_814_400, None, architecture="llama",
                             tokenizer="byte-level BPE, 128,256 tokens", context=131_072),
    "parity, diverging": C.ParityResult(f"{LONG_DIR}/gpt2", "gpt2", "First Citizen", 12, 0.0123, 1e-4,
                                        [C.ParityLayer("embed", 0.0), C.ParityLayer("blocks.0", 8.9e-8),
                                         C.ParityLayer("blocks.1", 0.0102), C.ParityLayer("blocks.11", 0.0101)],
                                        "blocks.1"),
}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(HAND))
def test_no_long_result_splits_a_word(name, width):
    result = HAND[name]
    assert broken_tokens(lambda console: R.render(result, console), width) == set()


def test_every_result_type_is_checked(real_results):
    """A result type given a renderer without a case here fails this test."""
    checked = {type(r) for r in real_results.values()} | {type(r) for r in HAND.values()}
    rendered_types = {t for t in R.render.registry if t not in (object, type(None), C.QuitResult)
                      and t.__module__.startswith("minitf_repl.")}  # not a test's own command (tests/test_house.py)
    assert rendered_types - checked == set()


# --- errors, notices and the live reporter ------------------------------------------------------------
ERRORS = [
    f"cannot write {LONG_DIR}/report.html: the folder {LONG_DIR} does not exist",
    "the loss became nan at step 1234; the model, optimizer, run and settings are back at step 1000, where this "
    "training began. Lower the learning rate (0.03 diverged; 0.003 trained here without diverging)",
    f"the trained model (step 1234) could not be kept before the rebuild ({KEPT} is read-only); nothing changed. "
    "Make the checkpoint folder writable, or turn autosave off to rebuild without keeping it",
]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("message", ERRORS)
def test_no_error_splits_a_word(message, width):
    assert broken_tokens(lambda console: R.error(console, message), width) == set()
    assert broken_tokens(lambda console: R.internal_error(console, RuntimeError(message)), width) == set()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_error_through_the_front_door_splits_a_word(width):
    def draw(console):
        door = FrontDoor(Session(data_spec="sort"), console, front=FrontEnd(live=False))
        door.run_line(":set n_layers=0 d_model=7 n_heads=3")
        door.run_line(":train steps=abc")
        door.run_line(":load a-checkpoint-that-does-not-exist-anywhere")

    assert broken_tokens(draw, width) == set()


@pytest.mark.parametrize("width", WIDTHS)
def test_no_notice_splits_a_word(width):
    notice = shared.rebuilt_line(65, KEPT)

    def draw(console):
        reporter = R.RichReporter(console)
        reporter.notice(notice)
        R.QuietReporter(console).notice(notice)

    assert broken_tokens(draw, width) == set()


@pytest.mark.parametrize("width", WIDTHS)
def test_the_live_reporters_final_output_splits_no_word(width):
    class Info:
        def __init__(self, step):
            self.step, self.run_step, self.run_steps = step, step, 3000
            self.train_loss, self.lr, self.grad_norm = 1.5, 1e-3, 1.0
            self.tokens_per_second, self.elapsed = 123456.0, step * 0.4
            self.val_loss, self.accuracy, self.aux_loss = (1.6 if step % 500 == 0 else None), 0.5, None

    def draw(console):
        progress = Console(file=io.StringIO(), width=console.width, force_terminal=True, color_system=None)
        reporter = R.RichReporter(progress, live=True, out=console)
        reporter.on_train_start(3000, 2000, resumed=True)
        for step in range(2001, 3001, 100):
            reporter.on_step(Info(step))
        reporter.request_stop()
        reporter.should_stop()
        reporter.finish(_train(stopped=True, run_remaining=1234, steps=766))

    assert broken_tokens(draw, width) == set()


@pytest.mark.parametrize("width", WIDTHS)
def test_streamed_text_splits_no_word(width):
    text = ("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer the slings and "
            "arrows of outrageous fortune, or to take arms against a sea of troubles\nand by opposing end them.")

    def draw(console):
        reporter = R.RichReporter(console)
        reporter.on_gen_start("Hamlet: ")
        for ch in text:
            reporter.on_token(ch)
        reporter.finish(C.GenResult("Hamlet: ", text, len(text), 1.0, float(len(text)), True, False))

    assert broken_tokens(draw, width) == set()
    shown = rendered(draw, width)
    assert shown.startswith("Hamlet: To be, or not")
    assert "".join(shown.split()).startswith("".join(("Hamlet: " + text).split()))  # every character, in order
