"""`:report PATH.html`: one self-contained page, checked as text and, where chromium exists, in a real browser."""

import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import run_command
from minitf_repl.render import fmt
from minitf_repl.session import Session

TINY = {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "batch_size": 4, "n": 40}


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    run_command(s, "train", {"steps": 6, "eval_every": 2})
    path = tmp_path_factory.mktemp("report") / "run.html"
    result = run_command(s, "report", {"path": str(path)})
    return s, path, result


def test_report_is_one_self_contained_file(report):
    s, path, result = report
    html = path.read_text(encoding="utf-8")
    assert result.path == str(path) and result.size_bytes == path.stat().st_size
    assert result.sections == ["config", "loss chart", "attention maps", "token embeddings", "loss by position",
                               "teacher forcing", "what each head does", "samples"]
    assert html.startswith("<!DOCTYPE html>") and "</html>" in html
    assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert "https://" not in html and "@import" not in html and "url(" not in html
    assert html.count('id="loss-chart"') == 1 and html.count('class="series"') == 2 + 2  # train, val; by position
    assert html.count('id="context-chart"') == 1 and "<h2>Loss by position</h2>" in html
    assert html.count('class="attn"') == 2 * 2  # 2 layers x 2 heads
    assert html.count('class="sample"') == 3 and "d_model" in html
    assert "<h2>Teacher forcing</h2>" in html  # sort:6's question and answer, the question given (grey)
    assert html.count('<span class="tf"') == 13 and html.count('title="given;') == 6


def test_report_shows_what_each_head_does_as_heads_does(report, tmp_path):
    s, path, _ = report
    html = path.read_text(encoding="utf-8")
    heads = run_command(s, "heads", {})  # the same random tokens (seed 0), the same model
    assert "<h2>What each head does</h2>" in html and f"<td>{heads.heads[0].layer}.{heads.heads[0].head}</td>" in html
    table = html[html.index("<h2>What each head does</h2>"):]
    assert table.count("<tr>") == 1 + len(heads.heads) + 1  # the header, a row a head, the even row
    for row in heads.heads:
        assert f"<td>{fmt.signed(row.carries, 2)}</td>" in table  # as :heads writes it: never -0.00
    assert f"on the repeat {heads.second_copy:.2f}" in table and heads.reading[1:] in table
    s = Session(data_spec="pydoc")
    run_command(s, "set", {**TINY, "max_seq_len": 3})  # too short for two copies: the page goes without
    short = run_command(s, "report", {"path": str(tmp_path / "short.html")})
    assert "what each head does" not in short.sections
    assert "What each head does" not in (tmp_path / "short.html").read_text(encoding="utf-8")


def test_report_checks_the_path_first(tmp_path):
    s = Session(data_spec="sort")
    with pytest.raises(UserError, match="ending in .html"):
        run_command(s, "report", {"path": str(tmp_path / "x.txt")})
    with pytest.raises(UserError, match="does not exist"):
        run_command(s, "report", {"path": str(tmp_path / "missing" / "x.html")})
    (tmp_path / "d.html").mkdir()
    with pytest.raises(UserError, match="is a folder"):
        run_command(s, "report", {"path": str(tmp_path / "d.html")})
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UserError, match="permission denied"):
            run_command(s, "report", {"path": str(locked / "x.html")})


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine")


def _browser(*args, timeout=120):
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", *args],
                          capture_output=True, text=True, timeout=timeout)


@needs_browser
def test_report_renders_in_a_headless_browser(report):
    _, path, _ = report
    run = _browser("--dump-dom", path.as_uri())
    dom = run.stdout
    assert run.returncode == 0, run.stderr[-500:]
    chart = re.search(r'<svg id="loss-chart"[^>]*width="(\d+)" height="(\d+)"', dom)
    assert chart and int(chart.group(1)) > 0 and int(chart.group(2)) > 0
    maps = re.findall(r'<svg class="attn"[^>]*width="(\d+)" height="(\d+)"', dom)
    assert len(maps) == 4 and all(int(w) > 0 and int(h) > 0 for w, h in maps)
    assert dom.count("<polyline") == 2 + 2 and dom.count("<rect") > 4  # train, val; the model, the counter
    context = re.search(r'<svg id="context-chart"[^>]*width="(\d+)" height="(\d+)"', dom)
    assert context and int(context.group(1)) > 0
    heads = dom[dom.index("<h2>What each head does</h2>"):]  # the browser parsed :heads's table whole
    assert heads.count("<tr>") == 1 + 2 * 2 + 1 and heads.index("</table>") < heads.index("Loss on the first copy")


def _png_pixels(data: bytes) -> tuple[int, int, bytes]:
    """Width, height and the raw (still filtered) scanlines of a PNG: enough to see it is not blank."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    chunks, at = [], 8
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        if kind == b"IDAT":
            chunks.append(data[at + 8:at + 8 + length])
        at += 12 + length
    return width, height, zlib.decompress(b"".join(chunks))


@needs_browser
def test_report_screenshot_is_not_blank(report, tmp_path):
    _, path, _ = report
    shot = tmp_path / "shot.png"
    run = _browser(f"--screenshot={shot}", "--window-size=1000,1400", path.as_uri())
    assert shot.exists(), run.stderr[-500:]
    width, height, raw = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 1400)
    assert len(set(raw)) > 50  # many distinct byte values: coloured maps and lines, not a blank page


def test_report_draws_the_embedding_map_as_embed_does(report):
    s, path, _ = report
    html = path.read_text(encoding="utf-8")
    drawn = run_command(s, "embed", {"map": True}).map  # the same model, the same table
    assert "<h2>Token embeddings</h2>" in html
    one, two = (f"{share:.0%}" for share in drawn.explained)
    assert f"{one} and {two} of the rows' variance" in html
    svg = html[html.index('<svg class="embed"'):]
    svg = svg[:svg.index("</svg>")]
    assert svg.count("<text ") == len(drawn.labels)  # every token of the vocabulary, once
    prompt = html.split("Prompt: <code>")[1].split("</code>")[0]
    assert svg.count('font-weight="bold"') == len(set(prompt))  # the attention prompt's tokens, on top


def test_report_draws_the_loss_by_position_as_context_measures_it(report):
    from minitf_repl.commands.context import default_windows
    from minitf_repl.core.context import position_losses

    s, path, _ = report
    html = path.read_text(encoding="utf-8")
    chart = html[html.index('<svg id="context-chart"'):]
    chart = chart[:chart.index("</svg>")]
    curve = position_losses(s.model, s.data, "cpu", default_windows(s.model_config.max_seq_len), counter=6)
    model, counter = chart.split('class="series"')[1:3]
    counted = [v for v in curve.losses if v == v]  # the answer's positions: a task's question is not counted
    assert model.split('points="')[1].split('"')[0].count(",") == len(counted)
    assert "counter (bigram to 6-gram)" in counter
    assert 'stroke="#d08c00"' in counter  # drawn in the counters' own colour
    assert f"Mean: {curve.mean:.3f} nats" in html and "position in the window (log scale)" in chart
