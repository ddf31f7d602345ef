"""A review of s59's :embed, :report, :checks and help topics: each finding's fix, checked."""

import math
import re
from pathlib import Path

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from test_cli import TINY, invoke
from test_commands import Recorder, run, tiny_session
from test_render import plain

DOCS = Path(__file__).resolve().parents[1] / "docs"
SMALL = dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, max_seq_len=16)


def session_for(data: str = "pydoc", **changes) -> Session:
    torch.manual_seed(0)
    return Session(ModelConfig(**{**SMALL, **changes}), TrainConfig(steps=2, batch_size=2), data_spec=data,
                   device_name="cpu")


# --- 1: a one-shot `minitf report` rerun keeps at most one copy, none of a page it repeats ---------------------------
def test_report_rerun_from_the_shell_keeps_one_copy_at_most_and_none_of_the_same_page(tmp_path, monkeypatch):
    """Each `minitf report` is a session of its own, so the page the last run wrote was always another session's:
    three runs left report.html and two byte-identical report.kept-DATE.html, and a Makefile's would fill the folder."""
    monkeypatch.chdir(tmp_path)
    for _ in range(3):
        done = invoke(*TINY, "report")
        assert done.exit_code == 0, done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # the same page: nothing to keep
    assert "held this very page byte for byte" in " ".join(done.stdout.split())
    pages = []
    for text in ("12=12", "21=12", "31=13"):  # three different pages: one copy kept, the latest replaced
        pages.append((tmp_path / "report.html").read_bytes())
        done = invoke(*TINY, "report", "--text", text)
        assert done.exit_code == 0, done.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.kept.html"]
    assert (tmp_path / "report.kept.html").read_bytes() == pages[-1]  # the page just replaced
    said = " ".join(done.stdout.split())
    assert "kept as report.kept.html beside it, then replaced (over the copy kept before: one copy of a page is kept)" \
        in said, said


# --- 2: the chance bar judges how alike, not which rows are nearest --------------------------------------------------
def test_the_chance_line_and_the_docs_say_chance_judges_how_alike_not_which():
    """The docs read the vowels' cosines, within chance, as "this table does not set them apart", while the example
    showed each vowel's nearest rows were the other vowels (about 0.16 of four by chance among 102 rows)."""
    out = plain(run(session_for(), ":embed aeiou k=4"))
    assert "(chance says how alike, not which rows are nearest)" in out
    page = " ".join((DOCS / "inside-views.md").read_text(encoding="utf-8").split())
    assert "does not set them apart" not in page
    assert "e's four nearest are i, a, o and u" in page and f"about {4 * 4 / 102:.2f} of the four other vowels" in page
    assert "The chance bar judges how alike two rows are, not which rows are nearest" in page


# --- 3: :report's bar counts the windows it scores -------------------------------------------------------------------
def test_reports_bar_names_the_windows_a_short_val_split_holds(tmp_path):
    """The bar said "4,096 val windows" where a short val split was scored whole, every one of its few windows."""
    from minitf_repl.commands.context import default_windows

    text = tmp_path / "short.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    session = tiny_session(data=str(text))
    windows = session.data.window_count("val", session.model_config.max_seq_len)
    assert windows < default_windows(session.model_config.max_seq_len)  # a val split that holds fewer
    recorder = Recorder()
    recorder.progress = []
    recorder.on_progress = lambda what, done, total: recorder.progress.append((what, done, total))
    run(session, f":report {tmp_path / 'page.html'}", recorder)
    assert {what for what, *_ in recorder.progress} == {f"report (3 samples, {windows:,} val windows, 5 other parts)"}
    assert recorder.progress[-1][1] == recorder.progress[-1][2] == 8 + windows  # the bar ends full
    assert f"over {windows} val windows" in (tmp_path / "page.html").read_text(encoding="utf-8")


# --- 4: head=on measures |x| over the rows that trained, as head=off does --------------------------------------------
def test_head_on_measures_the_token_rows_that_trained(tmp_path):
    """head=on set the rows compared to every row for W_U, and |x| (and "positions dwarf tokens") was then taken over
    every row of W_E, those that never trained too."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat. " * 60 + "QXZ", encoding="utf-8")  # Q, X, Z: val only
    session = session_for(data=str(text), tie_embeddings=False)
    stoi = session.data.tokenizer.stoi
    with torch.no_grad():  # the rows no training reaches made long: they count only where they should not
        for c in "QXZ":
            session.model.token_embedding.weight[stoi[c]] *= 1000
    inputs, head = run(session, ":embed at"), run(session, ":embed at head=on")
    assert inputs.untrained_tokens == 3 and head.untrained_tokens == 0  # W_U's rows all train: none left out
    assert head.token_size == pytest.approx(inputs.token_size) and head.token_size < 1


# --- 5: map=on with positions=on is refused, not half drawn ---------------------------------------------------------
def test_embed_refuses_two_maps_at_once():
    """`:embed ab map=on positions=on` drew the token map alone, the position map left out without a word."""
    with pytest.raises(UserError, match=r"map=on and positions=on are two maps, one at a time: :embed TEXT map=on "
                                        r"draws the tokens', :embed TEXT positions=on the position table's"):
        run(session_for(), ":embed ab map=on positions=on")


# --- 6: what a smooth table has, said as a number --------------------------------------------------------------------
def test_a_table_that_is_not_smooth_says_what_a_smooth_one_has():
    """"1 of 16 rows have their most alike other row next to them (distance 1), as a smooth table has" read as if 1
    were what a smooth table shows."""
    result = run(session_for(), ":embed a")  # an untrained learned table: random rows
    assert result.nearest_next < 16
    out = plain(result)
    assert f"{result.nearest_next} of 16 rows have their most alike other row next to them (distance 1), where a " \
           "smooth table has all 16" in out and "as a smooth table has" not in out
    assert "16 of 16 rows have their most alike other row next to them (distance 1), as a smooth table has" in plain(
        run(session_for(pos_encoding="sinusoidal"), ":embed a"))


# --- 8: :checks says whose backprop its bfloat16 line sets the check beside -----------------------------------------
def test_checks_bfloat16_line_follows_the_float64_line_in_its_own_words(monkeypatch):
    """"gradient: that checks float32's backprop" came after the float64 line, so "that" read as the float64 check."""
    from minitf_repl.core import precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: True)
    session = tiny_session()
    session.train_config.dtype = "auto"
    checks = " ".join(plain(run(session, ":checks gradient"), 200).split())
    assert "gradient: the check above also ran float32's backprop, which is not :train's: on this device :train " \
           "runs its products in bfloat16" in checks, checks
    assert "that checks float32's backprop" not in checks
    grad = " ".join(plain(run(session, ":grad"), 200).split())
    assert "that checks float32's backprop: on this device :train runs its products in bfloat16" in grad  # as it was


# --- 9: the shell's help of a topic lists it ------------------------------------------------------------------------
@pytest.mark.parametrize("words, header, shown", [
    (["position"], "position: what shows it", ["minitf embed", "minitf rope", "pos_encoding"]),
    (["token", "embedding"], "token embedding: what shows it", ["minitf embed", "tie_embeddings"]),
    (["wte"], "wte: what shows it", ["minitf embed", "tie_embeddings"]),
])  # fmt: skip
def test_the_shells_help_of_a_topic_lists_what_covers_it(words, header, shown):
    """`minitf help position` exited 2 with "error: no command or setting named 'position'" before naming what covers
    it, and `minitf help token embedding` was asked "did you mean minitf tok?"."""
    done = invoke("help", *words)
    assert done.exit_code == 0 and done.stderr == "", done.output
    out = done.stdout
    assert out.startswith(header) and all(name in out for name in shown), out
    assert "minitf set KEY a setting" in " ".join(out.split()) and ":embed" not in out
    assert not re.search(r" +$", out, flags=re.M)  # no table padding in a pipe


def test_the_shells_help_of_a_topic_of_one_setting_shows_that_setting():
    done = invoke("help", "tied")  # as `:help tied` shows tie_embeddings
    assert done.exit_code == 0 and done.stdout.startswith("tie_embeddings"), done.output


# --- 10: the docs' numbers are the tool's ----------------------------------------------------------------------------
def test_the_docs_token_row_length_and_ratio_are_what_embed_says():
    """variant-lab said the token rows are 0.22 long where inside-views and the tool said 0.23, and "36 parts position
    to one part token", a ratio of lengths beside :embed's 99.9% of the squared length."""
    from minitf_repl.core.model import INIT_STD

    result = run(session_for(d_model=128, n_heads=4, pos_encoding="sinusoidal"), ":embed ae")
    said = " ".join(plain(result, 200).split())
    length = f"{INIT_STD * math.sqrt(128):.2f}"
    assert f"start from std {INIT_STD} ({length} long)" in said
    ratio = result.position_size / result.token_size
    lab = " ".join((DOCS / "variant-lab.md").read_text(encoding="utf-8").split())
    views = " ".join((DOCS / "inside-views.md").read_text(encoding="utf-8").split())
    assert f"a norm of about {length}" in lab and f"(about {length} long" in views
    assert f"some {round(ratio)} times longer than the token row" in lab and "parts position" not in lab
    assert f"some {round(ratio)} times shorter" in views


def test_the_chance_bar_of_the_nearest_row_is_the_exact_quantile_not_a_noisy_draw():
    """2,000 draws put the 99% bar of the nearest random row at 0.329 where it is 0.322 (102 rows, d = 128): a 0.325
    went unmarked (s59). Checked against the distribution integrated here: P(max of n < t) = F(t)^n."""
    import torch

    from minitf_repl.core.likeness import chance_level

    for rows, dims in ((102, 128), (64, 64), (1000, 16)):
        t = torch.linspace(-1, 1, 400_001, dtype=torch.float64)[1:-1]
        density = (1 - t * t) ** ((dims - 3) / 2)
        cdf = torch.cumulative_trapezoid(density, t)
        cdf = cdf / cdf[-1]
        exact = float(t[1:][torch.searchsorted(cdf, torch.tensor(0.99 ** (1 / rows), dtype=torch.float64))])
        assert abs(chance_level(rows, dims, 3).band[0] - exact) < 1e-3, (rows, dims, exact)
