"""Follow-ups on :grad, :muon, :train watch=attn and docs/inside-views.md after norm=none, the cut maps and bfloat16."""

from pathlib import Path

from minitf_repl.core import precision
from minitf_repl.core.watch import WatchFrame
from minitf_repl.dispatch import to_json
from minitf_repl.render.watch import watch_view
from test_commands import run, tiny_session
from test_render import console, plain

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_grad_without_a_norm_says_no_norm_divides_the_part():
    """norm=none has no norm, so no eps to outweigh anything: :grad said its Jacobian divides by sqrt(1^2 + eps)."""
    s = tiny_session()
    run(s, ":set norm=none")
    r = run(s, ":grad")
    out = plain(r, 140)
    assert not r.eps_rules and "outweighs" not in out and "sqrt(1^2" not in out
    assert "comes back through f alone, J_f^T g'" in out
    run(s, ":set norm_placement=post")  # the identity after the add rescales nothing either
    out = plain(run(s, ":grad"), 140)
    assert "rescales" not in out and "g_s = g' goes down the skip path untouched" in out


def test_watch_attn_cut_map_labels_rows_with_the_texts_positions():
    """A map cut to the last positions heads its rows with the text's positions, which its window note names."""
    tokens = ["the", "then", "they"] * 12  # first two characters that tell no token apart: rows carry positions
    T = len(tokens)
    maps = [[[1.0 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)]]
    frame = WatchFrame(step=0, val_loss=None, view="attn", prompt="".join(tokens), tokens=tokens, layer=0, maps=maps)
    c = console(width=30)
    c.print(watch_view(frame, 30, True))
    out = c.file.getvalue()
    flat = " ".join(out.split())
    first = int(flat.split("): positions ")[1].split(" to ")[0])
    assert first > 0 and f"positions {first} to {T - 1}" in flat
    lines = out.splitlines()
    words = (["the"], ["then"], ["they"])
    at = [i for i, line in enumerate(lines) if line[:1].isdigit() and line.split()[1:2] in words]
    assert [lines[i].split()[0] for i in (at[0], at[-1])] == [str(first), str(T - 1)]  # not 0 and n - 1
    assert lines[at[0] - 1].strip().startswith(str(first % 10))  # the columns' digits start at the text's position


def test_grad_step_takes_newton_schulz_in_the_precision_the_dtype_setting_asks_now():
    """:grad's step, like :train's, sets the optimizer's Newton-Schulz precision from the dtype setting first."""
    s = tiny_session()
    run(s, ":set dtype=float32")
    optimizer = s.trainer.optimizer
    optimizer.muon.precision = "bfloat16"  # as a run under dtype=auto left it
    seen, step = [], optimizer.step

    def spy(*args, **kwargs):
        seen.append(optimizer.muon.precision)
        return step(*args, **kwargs)

    optimizer.step = spy
    run(s, ":grad")
    assert seen == ["float32"]


def test_grad_says_the_check_is_float32s_and_how_far_bfloat16s_gradient_is():
    """Where :train runs in bfloat16, :grad measures that backward along the check's u and says so."""
    s = tiny_session()
    run(s, ":set dtype=bfloat16")
    r = run(s, ":grad")
    t = r.training
    assert t is not None and t.dtype == "bfloat16"
    assert 0 < t.gradient < 0.1 and t.relative >= 0
    assert abs(t.backprop - r.check.measured) <= t.relative * abs(r.check.measured) * 1.001 + 1e-12
    out = plain(r, 140)
    assert "that checks float32's backprop" in out and "under autocast" in out
    assert to_json(r)["training"]["dtype"] == "bfloat16"
    run(s, ":set dtype=float32")
    r = run(s, ":grad")
    assert r.training is None and "that checks float32's backprop" not in plain(r, 140)


def test_muon_check_line_scales_the_difference_by_os_entries(monkeypatch):
    """2e-2 means nothing without O's size: the line gives it as a share of O's RMS entry, and bfloat16's why."""
    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    s = tiny_session()
    r = run(s, ":muon")
    out = plain(r, 140)
    m = r.step
    rms = m.step_rms / m.step_scale
    assert f"O's entries have RMS {rms:.2g}" in out and f"{100 * m.optimizer_diff / rms:.2g}% of a typical one" in out
    assert "its O can be off by as much as a typical entry" in out


def test_inside_views_says_the_views_compute_in_float32_and_scales_muons_difference():
    """The guide says once that no view runs in bfloat16, and gives bfloat16 Newton-Schulz's difference a scale."""
    doc = " ".join((DOCS / "inside-views.md").read_text(encoding="utf-8").split())
    assert "Every view, and `:gen`, computes in float32 whatever `dtype` is" in doc
    assert "differs from float64 by 6e-3." not in doc and "16% of a typical entry" in doc
