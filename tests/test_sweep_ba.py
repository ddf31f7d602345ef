"""The 44th session's own look: each test failed before its fix.

Tab offered values that the command then refused in the same state: `:set tokenizer=<Tab>` on a task offered
bpe:512, bpe:1024 and bpe:4096, each refused ("choose text data first"). What Tab offers for a setting now depends on
the data where the data decides (commands/settings._tokenizer_values), and every value it offers for any setting is
taken by :set, on a task and on text. The BPEs trained on a text were kept for the session without a bound (every
bpe:N tried stayed in memory); the KEPT_BPES used last are kept now.
"""

import pytest

from test_commands import TEXT, run, tiny_session
from test_sweep_aw import completions

from minitf_repl.commands.base import REGISTRY
from minitf_repl.core.errors import UserError


@pytest.mark.parametrize("data", ["sort:4", "text"])
def test_every_value_tab_offers_for_a_setting_is_one_set_takes(data, tmp_path, checkpoint_dir):
    if data == "text":
        path = tmp_path / "fox.txt"
        path.write_text(TEXT * 4, encoding="utf-8")
        data = str(path)
    offered = {param.name: completions(f":set {param.name}=", tiny_session(data)) for param in REGISTRY["set"].options}
    assert offered["tokenizer"] == (["char"] if data.startswith("sort") else ["char", "bpe:512", "bpe:1024", "bpe:4096"])
    refused = []
    for key, values in offered.items():
        for value in values:
            if key == "tokenizer" and value.startswith("bpe:") and value != "bpe:512":
                continue  # the same path as bpe:512, a BPE trained each time: one is enough
            try:
                run(tiny_session(data), f":set {key}={value}")
            except UserError as e:
                refused.append(f"{key}={value}: {e}")
    assert refused == []


def test_bash_completion_reads_the_data_on_the_line_for_the_tokenizer():
    from test_completion import complete_bash

    # the shell's stand-in session had no data at all, and the REPL's question of it was an AttributeError
    assert complete_bash("minitf --data sort:4 set tokenizer=") == ["tokenizer=char"]
    assert "tokenizer=bpe:512" in complete_bash("minitf set tokenizer=")


def test_the_bpes_kept_for_a_text_are_the_ones_used_last(monkeypatch):
    from minitf_repl.core import bpe

    trained = []
    monkeypatch.setattr(bpe, "train_bpe", lambda text, n, progress=None: trained.append(n) or f"bpe {n}")
    kept = {}
    for n in range(300, 300 + bpe.KEPT_BPES):
        bpe.tokenizer_for(f"bpe:{n}", "text", kept=kept)
    assert bpe.tokenizer_for("bpe:300", "text", kept=kept) == "bpe 300" and trained.count(300) == 1  # kept, used again
    bpe.tokenizer_for("bpe:999", "text", kept=kept)  # one more: the one used longest ago goes (was: every one kept)
    assert len(kept) == bpe.KEPT_BPES and 301 not in kept and 300 in kept and 999 in kept


# --- a second look, at the views (a helper's report) ---------------------------------------------------------------
def test_a_command_whose_text_is_fixed_values_is_not_told_to_quote_an_option_as_text():
    s = tiny_session()
    for line in (":quantize int8 steps=3", ":checks windows=16"):
        with pytest.raises(UserError) as refused:
            run(s, line)
        assert "quote it" not in str(refused.value), str(refused.value)  # `:quantize "steps=3"` was then refused
    with pytest.raises(UserError, match="to read the whole line as text: :gen -- n2=3"):
        run(s, ":gen n2=3")  # free text: a hint (the whole line after --, test_sweep_bf)


def test_the_seed_lrfind_suggests_next_is_one_the_option_takes():
    from minitf_repl.commands.rates import SEED_LIMIT, _next_seed

    assert _next_seed(7) == 8 and _next_seed(SEED_LIMIT) == 0  # was SEED_LIMIT + 1: "too large"


@pytest.mark.parametrize("task", ["sort:6", "reverse:6", "add:3", "sort:2"])
def test_patchs_example_pair_changes_the_first_answer_token(task):
    from minitf_repl.commands.why import split_prompts
    from minitf_repl.core.data import load_data

    data = load_data(task)
    with pytest.raises(UserError) as refused:
        split_prompts("", data)
    clean, corrupt = str(refused.value).split("e.g. :patch ")[1].split(" (")[0].split()
    assert data.answer(clean)[0] != data.answer(corrupt)[0]  # sort's 314159= 914159= both answered 1...
    assert len(clean) == len(corrupt) and sum(a != b for a, b in zip(clean, corrupt)) == 1


def test_back_to_the_data_before_with_nothing_trained_between_its_history_is_the_datas_again():
    s = tiny_session("sort:4", steps=6)
    run(s, ":train")
    run(s, ":data reverse:4")  # the same vocabulary: the model stays; its history was not of reverse
    assert s.data_since_step == 6 and s.history_on_data == []
    run(s, ":data sort:4")  # back, no step trained on reverse: was "the data in use came in after step 6"
    assert s.data_since_step == 0 and len(s.history_on_data) == 6
    run(s, ":data reverse:4")
    run(s, ":train steps=2")
    run(s, ":data sort:4")  # steps trained on reverse between: its history is not all sort's
    assert s.data_since_step == 8 and s.history_on_data == []


def test_grad_with_every_block_switched_off_does_not_say_the_first_block_learns():
    from test_render import plain

    s = tiny_session()  # one block
    run(s, ":train steps=1")
    run(s, ":ablate block=0")
    words = plain(run(s, ":grad"))
    assert "every block is switched off, so none learns from it" in words
    assert "even the first block learns" not in words  # its own table said 'skipped'


def test_a_load_says_the_parts_switched_off_in_the_old_model_are_on_in_the_loaded_one(checkpoint_dir):
    from test_commands import Recorder

    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":save m")
    run(s, ":ablate head=0.1")
    heard = Recorder()
    run(s, ":load m", heard)  # was silent, where :set and :data say it
    assert s.ablations == []
    assert "head 0.1 was switched off in the old model; the loaded one has every part on" in " ".join(heard.notices)


def test_plot_of_frames_a_later_watched_run_replaced_says_so():
    s = tiny_session()
    run(s, ":train steps=4 watch=lens eval_every=2")
    run(s, ":train steps=2 watch=grad")
    with pytest.raises(UserError) as refused:
        run(s, ":plot what=lens_rank")  # was only "train with :train watch=lens first", which the user had done
    assert "the frames kept are the last watched run's (watch=grad), which replaced any before; train with " \
           ":train watch=lens first" in str(refused.value)


def test_embed_at_a_window_of_one_says_there_is_no_distance_to_show():
    from test_render import plain

    s = tiny_session("pydoc", steps=1)
    run(s, ":set max_seq_len=1")
    run(s, ":train")
    words = plain(run(s, ":embed"))  # was "... by distance: " and nothing after it
    assert "the table has one row (a window of 1 token), so there is no likeness by distance to show" in words


def test_context_at_a_window_of_one_names_the_counter_its_table_reads():
    from test_render import plain

    s = tiny_session("pydoc", steps=1)
    run(s, ":set max_seq_len=1")
    run(s, ":train")
    words = plain(run(s, ":context windows=16"))
    assert "gram counter" in words and "6-gram" not in words and "5-gram" not in words  # the table's rows: bigram
    assert "at most 1 character" in words


def test_a_position_out_of_range_names_every_position_the_view_takes():
    s = tiny_session()
    run(s, ":qkv 12345= at=-6")  # six tokens: -6 is the first, taken
    with pytest.raises(UserError) as refused:
        run(s, ":qkv 12345= at=-7")
    assert "0..5, or -1..-6 from the end (-1 the last); got -7" in str(refused.value)  # was "or -1 for the last"


def test_compare_on_data_too_long_for_one_contender_names_that_contender():
    s = tiny_session()  # a window of 32 (TINY)
    with pytest.raises(UserError) as refused:
        run(s, ":compare current max_seq_len=64 steps=2 data=sort:30")
    assert str(refused.value).startswith("contender current: task sort:30 needs max_seq_len >= 60, not 32")


def test_heads_marks_a_head_switched_off():
    from test_render import plain

    s = tiny_session()
    run(s, ":train steps=2")
    run(s, ":ablate head=0.1")
    result = run(s, ":heads layer=0")
    words = plain(result)
    assert "off: switched off by :ablate: it still attends, so its scores are read, but it writes nothing" in words
    flat = " ".join(words.split())
    assert flat.count(" off off ") == 1  # head 0.1's named and off: copying (was "+0.00"); head 0.0 keeps its number
    assert flat.split(" off off ")[0].rsplit(" 0.1 ", 1)[1].count(" ") == 4  # in head 0.1's row, after its 5 scores


@pytest.mark.parametrize("typed, said", [
    ("a.html b.html", "2 pages' names"),  # was one page named "a.html b.html"
    ("x.html y=3", "words after the page's name"),  # was "give a name ending in .html, e.g. x.html"
])
def test_report_given_more_than_a_pages_name_says_so(typed, said, tmp_path, monkeypatch):
    from minitf_repl.report import check_report_path

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError) as refused:
        check_report_path(typed)
    assert str(refused.value).startswith(f"give one page's name, got {typed!r}: {said}")
    assert check_report_path("my report.html").name == "my report.html"  # one name with a space: taken


def test_lrfinds_chart_says_when_it_leaves_out_the_points_past_the_rise():
    from test_render import plain

    s = tiny_session()
    result = run(s, ":lrfind steps=10")
    test = result.test
    words = plain(result)
    start = test.smoothed[0]
    rose = [k for k in range(len(test.smoothed)) if k > test.smoothed.index(min(test.smoothed))
            and test.smoothed[k] > start * 1.02]
    assert rose  # this tiny model's test (seed 1337) rises at its last step, past lr 0.28
    # the chart stops before that point: said (the axis ended short of the rates the first line names)
    assert "past it the loss climbs back above where it started (1 more step, to 1," in words
