"""`:report` projected in class: figures that grow with the page, teacher forcing's numbers on it, :context's
windows."""

import re
import xml.etree.ElementTree as ET

import pytest

from test_commands import Recorder, run, tiny_session

SVG = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    s = tiny_session("pydoc", steps=4, eval_every=2)
    run(s, ":train")
    path = tmp_path_factory.mktemp("bq") / "class.html"
    run(s, f":report {path}")
    return path.read_text(encoding="utf-8")


def test_report_figures_grow_with_the_page_keeping_their_shape(page):
    """Every figure was a fixed 640 x 280 (the maps 256 x 256): on a projector it stayed that small, its labels 10 and
    11 pixels. Now the page's CSS draws each as wide as the page or its column, its height following its viewBox."""
    css = page[page.index("<style>"):page.index("</style>")]
    rule = re.search(r"(?m)^svg \{([^}]*)\}", css)
    assert rule and "width: 100%" in rule[1] and "height: auto" in rule[1]
    svgs = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(svgs) >= 4  # the loss chart, the maps, the embedding map, the loss by position
    for svg in svgs:
        root = ET.fromstring(svg)
        _, _, w, h = (float(v) for v in root.get("viewBox").split())
        assert (float(root.get("width")), float(root.get("height"))) == (w, h)  # the size it falls back to, in shape
    # the maps, in columns at least as wide as a map drawn at its own size: a row of heads fills the page
    assert re.search(r'<div class="maps" style="grid-template-columns: repeat\(auto-fill, minmax\(min\(100%, \d+px\)',
                     page)
    chart = ET.fromstring(re.search(r'<svg id="loss-chart".*?</svg>', page, flags=re.S)[0])
    assert min(float(t.get("font-size")) for t in chart.iter(f"{SVG}text")) >= 12  # and larger to begin with


def test_report_writes_teacher_forcings_numbers_under_each_token(page):
    """p and -ln p were only in each token's hover title: nothing of them showed when the page was projected or
    printed. Now each token has them written under it, the title kept."""
    section = page[page.index("<h2>Teacher forcing</h2>"):page.index("<h2>What each head does</h2>")]
    cells = re.findall(r'<span class="tfcell"><span class="tf"[^>]*title="([^"]*)">[^<]*</span>'
                       r'<span class="tfp[^"]*">([^<]*)</span><span class="tfp[^"]*">([^<]*)</span></span>', section)
    assert len(cells) == section.count('<span class="tf"') > 2  # every token, the numbers under it
    predicted = [(title, p, loss) for title, p, loss in cells if title.startswith("p = ")]
    assert predicted
    for title, p, loss in predicted:  # the numbers under it are the ones its title gives
        assert title.startswith(f"p = {p}, -ln p = {loss};"), (title, p, loss)
    assert "Under each token: p" in section


def test_reports_loss_by_position_is_contexts_own_mean_and_its_bar_names_its_units(tmp_path):
    """The page read "over 256 val windows ... Mean: 1.617" where :context said 1.634 on its 1,024 windows, and its
    bar "report: 71/264" named no unit (s59)."""
    session = tiny_session(data="pydoc")
    run(session, ":train steps=4")
    context = run(session, ":context")
    recorder = Bar()
    run(session, f":report {tmp_path / 'page.html'}", recorder)
    page = (tmp_path / "page.html").read_text(encoding="utf-8")
    assert f"Mean: {context.curve.mean:.3f} nats" in page and f"over {context.curve.windows} val windows" in page
    whats = {what for what, *_ in recorder.progress}
    assert whats and all("val windows" in what and "sample" in what for what in whats), whats


class Bar(Recorder):
    """A reporter that keeps what each progress callback was told."""

    def __init__(self):
        super().__init__()
        self.progress = []

    def on_progress(self, what, done, total):
        self.progress.append((what, done, total))
