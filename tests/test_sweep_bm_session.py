"""An afternoon's REPL session: what the lab tells the learner of the int8 copy, ablations, schedules and sizes."""

import pytest

from test_commands import Recorder, run, tiny_session
from test_render import plain

from minitf_repl.core.errors import ConfigError


def test_train_says_the_int8_copy_was_of_the_weights_before_the_run():
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":quantize int8")
    heard = Recorder()
    run(s, ":train steps=2", heard)  # the copy went without a word; :quantize then said :gen samples float32
    assert not s.sampling_copy
    said = [n for n in heard.notices if n.startswith("the int8 copy (:quantize) was of the weights before this run")]
    assert said and ":quantize int8 again makes one of the new weights" in said[0], heard.notices


def test_a_run_stopped_before_its_first_step_keeps_the_int8_copy_unsaid():
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":quantize int8")
    heard = Recorder(stop_after=0)  # Ctrl-C before the first step: the weights, and their copy, are as they were
    run(s, ":train steps=2", heard)
    assert s.sampling_copy and not any("int8 copy" in n for n in heard.notices), heard.notices


def notices_of_a_load_after(line: str):
    """A model trained 3 steps and saved as m, then `line` (a switch on the model), then `:load m`: the session, and
    what the load said."""
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save m")
    run(s, line)
    heard = Recorder()
    run(s, ":load m", heard)
    return s, heard.notices


def test_load_says_the_int8_copy_went_and_that_the_loaded_model_can_be_quantized_now(checkpoint_dir):
    s, notices = notices_of_a_load_after(":quantize int8")
    assert not s.sampling_copy
    line = next((n for n in notices if n.startswith("the int8 copy (:quantize) was of the old model")), None)
    assert line is not None, notices
    # the loaded model has trained (step 3): no "once it has trained"
    assert line.endswith(":gen samples the loaded one; :quantize int8 makes a copy of it"), line


def test_load_of_a_trained_model_does_not_say_the_ablations_wait_for_its_training(checkpoint_dir):
    _, notices = notices_of_a_load_after(":ablate head=0.1")
    line = next(n for n in notices if n.startswith("head 0.1 was switched off in the old model"))
    assert "once it has trained" not in line and line.endswith("(:ablate WHAT switches them off in it again)"), line


def test_load_of_an_untrained_checkpoint_keeps_once_it_has_trained(checkpoint_dir):
    s = tiny_session()
    s.model  # built, never trained: saved at step 0
    run(s, ":save init")
    run(s, ":ablate head=0.1")
    heard = Recorder()
    run(s, ":load init", heard)
    assert any("once it has trained" in n for n in heard.notices if n.startswith("head 0.1")), heard.notices


def test_save_with_the_int8_copy_on_says_the_checkpoint_holds_the_float32_weights(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":quantize int8")
    heard = Recorder()
    run(s, ":save q1", heard)  # said "saved checkpoint q1 (...)" alone
    assert ("q1 holds the float32 weights, not the int8 copy (:quantize) that :gen samples: :quantize int8 after "
            ":load q1 makes it again") in heard.notices, heard.notices
    quiet = Recorder()
    run(s, ":quantize off")
    run(s, ":save q2", quiet)
    assert not any("int8" in n for n in quiet.notices), quiet.notices


def test_the_toolbar_shows_the_parts_ablated_and_the_int8_copy():
    from minitf_repl.repl import toolbar_text

    s = tiny_session()
    run(s, ":train steps=3")
    assert "ablated" not in toolbar_text(s, 120) and "int8" not in toolbar_text(s, 120)
    run(s, ":ablate head=0.1 head=0.0")
    wide = toolbar_text(s, 200)
    assert "| step 3 | ablated: head 0.1, head 0.0 |" in wide or "| step 3 | ablated: head 0.0, head 0.1 |" in wide, \
        wide
    run(s, ":quantize int8")
    for width in (200, 80, 60, 50, 40):
        bar = toolbar_text(s, width)
        assert "ablated" in bar and "int8" in bar and len(bar) <= width, (width, bar)
    for width in (36, 34, 30, 20):  # narrower still: cut and marked, never past the edge (it stayed 38 wide)
        bar = toolbar_text(s, width)
        assert len(bar) <= width and bar.endswith("…"), (width, bar)
    assert " | ablated: head 0.1 +1 | int8 | " in toolbar_text(s, 60) or " | ablated: head 0.0 +1 | int8 | " in \
        toolbar_text(s, 60)
    assert toolbar_text(s, 40).startswith(" step 3 | ablated | int8 | val ")  # the data goes before the marks
    run(s, ":ablate off")
    assert "ablated" not in toolbar_text(s, 80) and "| step 3 | int8 |" in toolbar_text(s, 80)


def test_a_legend_says_a_curves_points_are_hidden_under_another_not_lower():
    from minitf_repl.render.chart import Curve, hidden_under

    curves = [Curve("lr=1e-2", [0, 1, 2], [2, 2, 3], "●", "red", joined=True),
              Curve("lr=1e-3", [0, 1, 2], [2, 2, 1], "▲", "green", joined=True)]
    cells = [[(0, 0), (1, 0), (2, 1)], [(0, 0), (1, 0), (2, 2)]]
    owner = {(0, 0): 1, (1, 0): 1, (2, 1): 0, (2, 2): 1}
    assert hidden_under(0, curves, cells, owner) == " (2 of 3 points hidden under ▲)"  # "under ▲" read as lower


def test_data_that_keeps_a_model_whose_run_ended_says_train_goes_on_at_the_floor():
    s = tiny_session("sort:4")
    run(s, ":train steps=6")  # the whole run: its schedule has ended
    said = plain(run(s, ":data reverse:4"))  # the same vocabulary: the model stays
    assert "the model trained to step 6 stays" in said, said
    floor = s.trainer.final_lr()
    assert f"at its last run's final rate of {floor:.3g} held constant" in said, said
    assert ":train schedule=new starts a fresh warm-up and decay for reverse" in said, said
    run(s, ":data sort:4")
    run(s, ":set lr=1e-6")  # below the run's final rate: :train goes on at the setting, as :set said
    said = plain(run(s, ":data reverse:4"))
    assert f"at 1e-06, the lr setting (the last run ended above it, at {floor:.3g}) held constant" in said, said


def test_data_that_keeps_a_stopped_run_says_nothing_of_a_floor():
    s = tiny_session("sort:4")
    run(s, ":train steps=6", Recorder(stop_after=2))  # stopped: :train alone goes on with its schedule
    said = plain(run(s, ":data reverse:4"))
    assert "the model trained to step 2 stays" in said and "schedule=new" not in said, said


def test_set_n_heads_offers_a_d_model_of_even_head_widths():
    s = tiny_session()  # d_model=32, learned positions
    with pytest.raises(ConfigError) as refused:
        run(s, ":set n_heads=3")
    assert refused.value.fix == {"n_heads": 3, "d_model": 30}  # was d_model=33: heads of 11, which rope refuses


def test_sizes_move_to_the_next_unit_from_a_thousand():
    from minitf_repl.render import fmt

    assert fmt.size(1021 * 2**10) == "1.0 MiB"  # was "1021.0 KiB"
    assert fmt.size(999 * 2**10) == "999.0 KiB" and fmt.size(1000) == "1.0 KiB" and fmt.size(999) == "999 B"
    assert fmt.size(1000 * 2**20) == "1.0 GiB" and fmt.size(2**31) == "2.0 GiB"


def test_report_over_an_earlier_page_says_it_replaced_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = tiny_session()
    run(s, ":train steps=2")
    first = plain(run(s, ":report"))
    assert "replaced" not in first, first
    again = plain(run(s, ":report"))  # replaced ./report.html without a word
    assert "replaced the earlier report.html (:report NAME.html writes another page beside it)" in again, again


def test_set_dropout_says_the_weights_are_kept():
    s = tiny_session()
    run(s, ":train steps=2")
    said = plain(run(s, ":set dropout=0.1"))  # was "dropout: 0 -> 0.1" alone
    assert "dropout changed in place, the weights kept" in said, said
    before = plain(run(tiny_session(), ":set dropout=0.1"))  # no model yet: no weights to keep
    assert "weights kept" not in before, before
