"""Testers' findings on :score's bars, spark lines' scale, :tok's characters, :quit on a full folder, :train's kept."""

import errno
import math
from types import SimpleNamespace

import pytest
from rich.console import Console

from minitf_repl import repl
from minitf_repl.commands.inside import ScoreResult
from minitf_repl.core.checkpoint import store
from minitf_repl.core.errors import UserError
from minitf_repl.syntax import REPL
from test_commands import Recorder, run, tiny_session
from test_render import plain


def test_score_says_what_its_bars_are_against_and_that_a_tiny_largest_loss_is_tiny():
    losses = [13.4, 0.0001, 0.0004, 0.00002]  # a task's question given, then an answer the model knows
    result = ScoreResult("a=bcd", list("a=bcd"), [math.exp(-loss) for loss in losses], losses, list("xbcd"),
                         [0.9] * 4, [False, True, True, True], 0.0002, 2.48)
    said = plain(result, 100)
    assert "████████" in said  # the largest, 0.0004, is a full bar while every -ln p reads 0.000
    # was no word of the scale: full bars over losses of 0.000 read as the model's worst guesses
    assert ("the bars: -ln p against the text's largest counted one, 0.0004 at t = 2 (a full bar), not against a "
            "fixed scale; that is tiny (p 0.9996 there)") in said, said
    losses = [1.4, 0.5, 2.0]
    known = plain(ScoreResult("abcd", list("abcd"), [math.exp(-loss) for loss in losses], losses, list("xbc"),
                              [0.9] * 3, [True] * 3, 1.3, 2.48), 100)
    assert "the bars: -ln p against the text's largest one, 2.000 at t = 2 (a full bar)" in known
    assert "tiny" not in known


def test_a_spark_line_of_a_few_more_values_than_bars_says_each_bar_averages_1_or_2():
    from minitf_repl.commands.worked import spark_scale
    from minitf_repl.render.chart import spark_bins

    values = [10.0 + k / 10 for k in range(52)]  # 52 values in 40 bars: 12 bars average two, 28 hold one
    assert len(spark_bins(values, 40)) == 40
    said = spark_scale(values, 40)
    # was "each the mean of about 1.3 values; they run from 10.00 to 15.10", a range read as the bars'
    assert said == (f"bars from 0 to {max(spark_bins(values, 40)):.2f}, the largest mean: each bar averages 1 or 2 "
                    "neighbouring values, and the values themselves run from 10.00 to 15.10"), said


def test_tok_says_a_character_is_a_code_point_where_the_text_shows_fewer(tmp_path):
    family = "\U0001F468\u200d\U0001F469\u200d\U0001F467"  # three people and two zero-width joiners
    path = tmp_path / "family.txt"
    path.write_text(f"the family {family} came home. " * 200, encoding="utf-8")
    session = tiny_session(data=str(path))
    said = plain(run(session, f":tok a {family}"), 300)
    assert "7 tokens, one per character" in said
    # was "one per character" alone, of five tokens that show as one
    assert ("a character here is a Unicode code point, not what shows as one: these 7 show as 3, since 4 fold into "
            "the one before them: 2 zero-width joiners and 2 code points after a joiner "
            f"('{family}' is 5 code points)") in said, said
    assert "code point" not in plain(run(session, ":tok the home"), 300)


def test_quit_after_saves_a_full_folder_refused_offers_another_folder_first(monkeypatch, checkpoint_dir, tmp_path):
    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "write_file", full)
    session = tiny_session()
    assert run(session, ":train").save_error  # the autosave failed
    with pytest.raises(UserError, match="No space left on device"):
        run(session, ":save mine")
    err = Console(record=True, width=300)
    door = SimpleNamespace(session=session, err=err, front=SimpleNamespace(syntax=REPL))
    assert repl.warn_unsaved(door, None) == 6
    said = " ".join(err.export_text().split())
    # was ":save NAME keeps it", the fix that had just failed
    assert ("the model trained to step 6 is in no checkpoint (its save failed: the checkpoint folder is full or "
            "cannot be written); :set checkpoint_dir=DIR then :save NAME keeps it in another folder") in said, said
    run(session, f":set checkpoint_dir={tmp_path / 'elsewhere'}")  # another folder: a save there may work
    assert repl.warn_unsaved(door, None) == 6
    again = " ".join(err.export_text().split())
    assert "(its save failed); :save NAME keeps it, and" in again, again


def test_train_save_says_a_kept_model_next_to_its_saved_line_not_before_the_table(tmp_path):
    session = tiny_session()
    run(session, f":set checkpoint_dir={tmp_path}")
    run(session, ":train steps=3 save=best")
    run(session, ":load best")
    run(session, ":set n_heads=4")
    heard = Recorder()
    result = run(session, ":train steps=1 save=best", heard)
    # was a notice said during the command: in a log it stood above the table, far from the "saved" line
    assert not [n for n in heard.notices if "trained further" in n], heard.notices
    said = plain(result, 300)
    kept = f"best held a model trained further (step 3) than this one: it is kept as {result.kept_as} ("
    assert result.kept_as.startswith("kept-") and kept in said, said
    assert said.index("replaced checkpoint best") < said.index(kept) and said.index("trained 1 step") < said.index(kept)
