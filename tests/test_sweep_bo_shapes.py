"""A tester's findings on :compare's split contenders, a too-short text's window, :params at small T and :kv's cut."""

import pytest

from minitf_repl.commands.base import view_prompt
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import DataError, UserError

from test_commands import TEXT, Recorder, run, tiny_session
from test_render import plain

SMALL = ":set n_embd=16 n_head=2 d_ff=32 n_layer=1 block_size=8"


@pytest.fixture
def text_session(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text(TEXT, encoding="utf-8")
    return tiny_session(str(path))


def test_compare_offers_split_contenders_joined_in_a_line_that_runs():
    # `n_head=3 n_embd=18` is two contenders: n_head=3 alone does not divide d_model=16, joined with n_embd=18 it does
    session = tiny_session()
    run(session, SMALL)
    with pytest.raises(UserError) as refused:
        run(session, ":compare n_head=3 n_embd=18 steps=30")
    said = str(refused.value)
    assert said.startswith("contender n_head=3: d_model (16) must be divisible by n_heads (3)")
    line = said.partition("; one contender with both: ")[2]
    assert line == ":compare current n_head=3,n_embd=18 steps=30"
    result = run(session, line)  # as pasted: two contenders, the joined one of 18 / 3
    assert [o.label for o in result.outcomes] == ["current", "n_head=3,n_embd=18"]
    # no other contender makes it valid: no join offered
    with pytest.raises(UserError) as alone:
        run(session, ":compare n_head=3 n_layer=2 steps=30")
    assert "one contender with both" not in str(alone.value)


def test_compare_offers_no_join_that_the_text_refuses_again(tmp_path):
    """A reviewer's case: on a 270-character text (a val split of 27), `max_seq_len=200 lr=0.01` offered
    `current max_seq_len=200,lr=0.01`, whose window the text refuses as it refused the first; and the fix's line, glued
    after the join's, set the window the contender's own 200 overrides."""
    path = tmp_path / "tiny.txt"
    path.write_text("abcdefgh \n" * 27, encoding="utf-8")
    session = tiny_session(str(path))  # a window of 32: too long for this text
    # a refused current is joined to nothing: the session's window is too long, whatever joins it
    with pytest.raises(UserError) as current:
        run(session, ":compare current lr=0.01 steps=5")
    assert str(current.value).startswith("contender current: ") and "one contender with both" not in str(current.value)
    assert current.value.fix == {"max_seq_len": 26}  # the session's window is current's: its fix stays
    run(session, SMALL)  # a window of 8: the session's own fits
    with pytest.raises(UserError) as refused:
        run(session, ":compare max_seq_len=200 lr=0.01 steps=5")
    said = str(refused.value)
    assert said.startswith("contender max_seq_len=200: ") and "one window needs max_seq_len + 1 = 201" in said
    assert "one contender with both" not in said
    assert refused.value.fix == {}  # `:set max_seq_len=26` leaves this contender at 200
    # nor is a refused contender joined to current (`current,max_seq_len=200,lr=0.01` is the same contender)
    with pytest.raises(UserError) as after_current:
        run(session, ":compare current max_seq_len=200,lr=0.01 steps=5")
    assert "one contender with both" not in str(after_current.value)


def test_too_short_text_keeps_the_window_it_has(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("the quick brown fox jumps over it.", encoding="utf-8")  # 34 characters: a val split of 4
    text = load_data(str(path))
    with pytest.raises(DataError) as kept:
        text.check_fits(10, current=3)
    said = str(kept.value)
    assert said.endswith("or keep max_seq_len=3, the largest window it fits")
    assert kept.value.fix == {}  # `:set max_seq_len=3` at 3 changes nothing
    with pytest.raises(DataError) as smaller:  # a window below the largest that fits: raising it to that is a fix
        text.check_fits(10, current=2)
    assert smaller.value.fix == {"max_seq_len": 3} and "max_seq_len=3 or less" in str(smaller.value)
    task = load_data("sort:4")  # a question and its answer need 8: at 8 already, "raise max_seq_len to 8" is no way
    with pytest.raises(DataError) as short:
        task.check_fits(3, current=8)
    assert "keep max_seq_len=8" in str(short.value) and short.value.fix == {}


def test_set_block_size_on_a_short_text_offers_no_line_that_changes_nothing(tmp_path, text_session):
    """The tester's line: at block_size=3 on a 34-character text, `:set block_size=10` offered `:set max_seq_len=3`."""
    path = tmp_path / "tiny.txt"
    path.write_text("the quick brown fox jumps over it.", encoding="utf-8")
    session = text_session
    run(session, ":set block_size=3")
    run(session, f":data {path}")
    with pytest.raises(UserError) as caught:
        run(session, ":set block_size=10")
    assert "keep max_seq_len=3" in str(caught.value) and ":set max_seq_len=3" not in str(caught.value)


def test_params_says_the_fast_paths_saving_at_the_current_window(text_session):
    run(text_session, ":set n_embd=8 n_head=1 d_ff=32 n_layer=1 block_size=1")
    at_one = plain(run(text_session, ":params"), width=200)
    assert "T=64" not in at_one and "(T, T) maps" not in at_one  # a window of 1: the maps are the log-sum-exps
    run(text_session, ":set block_size=8")
    at_eight = plain(run(text_session, ":params"), width=200)
    # batch 4 x T 8 positions, one head of one layer keeping 8 weights where the fused kernel keeps 1, in float32, and
    # the readable forward's T x T mask, less the fast path's copy of [W_q; W_k; W_v] (tests/test_sweep_bs_claims.py)
    less = 4 * 8 * 1 * 7 * 4 + 8 * 8 - 3 * 8 * 8 * 4
    assert f"(T, T) maps but a copy of [W_q; W_k; W_v] a layer: {less} B (" in at_eight
    assert "T=64" not in at_eight


def test_a_view_whose_result_says_the_cut_gives_no_notice_of_it_too(text_session):
    run(text_session, ":set n_embd=8 n_head=1 n_layer=1 block_size=4")
    hooks = Recorder()
    text, ids, dropped = view_prompt(text_session, "abcdefg", hooks, noted=True)
    assert (text, dropped) == ("defg", 3) and hooks.notices == []
    view_prompt(text_session, "abcdefg", hooks)  # a view that says nothing of it itself: the notice, as before
    assert hooks.notices == ["the prompt is longer than max_seq_len=4; reading its last 4 characters"]


@pytest.mark.parametrize("line", [":grad abcdefghij", ":kv abcdefg n=4", ":attn abcdefgh", ":qkv abcdefgh",
                                  ":ln abcdefgh"])
def test_views_say_a_cut_prompt_once(line, text_session):
    """Each view whose output ends with "... went unread" gives no notice of the same cut before it."""
    run(text_session, ":set n_embd=8 n_head=1 n_layer=1 block_size=4")
    hooks = Recorder()
    result = run(text_session, line, hooks)
    assert not [n for n in hooks.notices if "is longer than" in n]
    assert "went unread" in plain(result, width=200)
