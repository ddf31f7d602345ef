"""What a user's-eye sweep of generation and tokens (:gen, :kv, :score, :tok, :ngram, :embed) found: each test
failed before its fix.
"""

import math
import re

import pytest

from minitf_repl.core.errors import UserError

from test_commands import run, tiny_session
from test_render import plain, text_of


# --- :score at a narrow terminal ---------------------------------------------------------------------------
def test_score_at_40_columns_cuts_no_number_and_no_header():
    s = tiny_session()
    run(s, ":train steps=2")
    for line in (":score 1234=1234", ":score 1234=1234 counter=3"):
        result = run(s, line)
        shown = text_of(result, 40)
        assert "…" not in shown, shown  # p read "0.0…", the headers "rea…" and "best gue…"
        for p in result.target_probs:  # p itself, or only -ln p where the p column gave way to fit
            assert f"{p:.3f}" in shown or f"{-math.log(p):.3f}" in shown
        assert max(len(line) for line in shown.splitlines()) <= 40


# --- the example an error gives is one the data can read --------------------------------------------------
def test_the_example_an_error_suggests_runs_on_a_task():
    s = tiny_session()  # sort: digits and '=', no letters
    assert run(s, ":tok").text  # :tok without text reads a question of the data (46th session)
    for line in (":score 1",):
        with pytest.raises(UserError) as caught:
            run(s, line)
        suggested = re.search(r"e\.g\. (:\w+ \S+)", str(caught.value)).group(1)
        run(s, suggested)  # it said ":tok hello", which sort's vocabulary cannot read


# --- :ngram explains only the columns it shows ------------------------------------------------------------
def ngram_result():
    from minitf_repl.commands.counting import NgramResult, NgramRow

    rows = [NgramRow(n, 10 * n, 0.9, 3.0 - n / 2, 3.0 - n / 3, None, None, 100 * n if n < 3 else None)
            for n in range(5)]
    return NgramResult("pydoc", "character", 100, 1000, 1000, 100, 100, False, rows, None, 300, 2.2, None, 64, True)


def test_ngram_says_what_model_below_it_means_only_where_the_column_is_shown():
    wide, narrow = text_of(ngram_result(), 120), text_of(ngram_result(), 40)
    assert "model below it" in wide and "model below it:" in " ".join(wide.split())
    said = " ".join(narrow.split())
    assert "model below it:" not in said  # the column was dropped, its note stayed
    assert "left out at 40 columns:" in said and "model below it (COLUMNS=160 before minitf" in said  # named as gone


# --- :gen show=probs at a narrow terminal -----------------------------------------------------------------
def test_the_probability_scale_is_not_broken_at_40_columns():
    s = tiny_session()
    shown = text_of(run(s, ":gen 1234= show=probs seed=1"), 40)
    scale = next(line for line in shown.splitlines() if line.startswith("0 ") or "picked: 0" in line)
    assert scale.rstrip().endswith("1.00"), shown  # "1.00" had wrapped to a line of its own


# --- :gen on a task where n ends the text inside the answer -----------------------------------------------
def test_gen_says_why_an_answer_cut_short_by_n_is_not_graded():
    s = tiny_session("sort:4")
    asked = run(s, ":gen n=3 seed=1")  # no prompt: one of the task's questions, whose answer has 4 characters
    shown = plain(asked)
    assert asked.answer is None and asked.unfinished
    assert f"asked {asked.prompt}" in shown  # it said "started from '1234='", as of any start character
    assert "n=3 ended the text 3 characters into the answer" in shown and f":gen {asked.prompt} n=4" in shown
    given = run(s, ":gen 1234=5 n=1")
    assert "1 more" not in plain(given) and ":gen 1234=5 n=3" in plain(given)
    assert run(s, ":gen 1234= n=4").unfinished is None  # whole: graded
    assert run(s, ":gen 12 n=2").unfinished is None  # no question: nothing was asked


# --- :kv where the two loops agree exactly -----------------------------------------------------------------
def test_kv_calls_an_exact_agreement_exact_not_rounding():
    s = tiny_session()  # a window of 32: a prompt that fills it fills the cache again every step, the same pass
    shown = plain(run(s, ":kv " + "1234=1234=" * 4 + " n=3"))
    assert "agree to 0e+00 (float32 rounding)" not in shown and "agree exactly" in shown


# --- a BPE's byte tokens, one by one -----------------------------------------------------------------------
def test_tok_and_embed_name_the_bytes_of_a_character_spread_over_tokens(sentence_session):
    s = sentence_session()
    run(s, ":set tokenizer=bpe:300")
    tok = run(s, ":tok ☃ merges=on")
    assert tok.tokens == ["\\xe2", "\\x98", "\\x83"]  # each read "�": three tokens told apart by nothing
    shown = plain(tok)
    assert "\\xe2 \\x98 \\x83" in shown and "\ufffd" not in shown
    embed = run(s, ":embed ☃")
    assert embed.tokens == ["\\xe2", "\\x98", "\\x83"] and "\ufffd" not in plain(embed).split("most alike")[1][:40]
    assert run(s, ":tok héllo").tokens[0] == "h"  # whole characters stay as they are


def test_ffn_names_the_byte_tokens_it_raises_and_lowers(sentence_session):
    s = sentence_session()
    run(s, ":set tokenizer=bpe:300")  # untrained: most of the 256 byte tokens are never whole characters
    units = run(s, ":ffn the cat k=8").units
    listed = [t for u in units for t in u.promotes + u.demotes]
    assert "\ufffd" not in "".join(listed) and any(t.startswith("\\x") for t in listed)


# --- :embed names the model's own kind of positions ---------------------------------------------------------
def test_embed_says_which_kind_of_positions_the_model_has_not_both():
    s = tiny_session()
    for kind, says, not_says in (("rope", "RoPE turns each head's q and k", "no positions"),
                                 ("none", "has no positions (pos_encoding=none)", "RoPE")):
        run(s, f":set pos_encoding={kind}")
        shown = plain(run(s, ":embed 123"))
        assert says in shown and not_says not in shown, shown
        assert "rope turns q and k; none: no positions" not in shown
    run(s, ":set pos_encoding=rope")
    run(s, ":ablate positions")
    assert "RoPE is switched off (:ablate positions)" in plain(run(s, ":embed 123"))


# --- wide characters (日本語) keep their ids and shades under them ---------------------------------------------
def wide_session(tmp_path):
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.session import Session

    path = tmp_path / "wide.txt"
    path.write_text("日本語のテキスト abc 123 " * 200, encoding="utf-8")
    return Session(ModelConfig(n_layers=1, d_model=16, n_heads=2, d_ff=32, max_seq_len=16), data_spec=str(path),
                   checkpoint_dir=tmp_path / "ck")


def test_tok_puts_each_id_under_its_wide_character(tmp_path):
    from rich.cells import cell_len

    top, bottom = text_of(run(wide_session(tmp_path), ":tok 日本語 a"), 40).splitlines()[:2]
    # each id starts in the column its token starts in
    starts = [cell_len(top[:i]) for i, ch in enumerate(top) if ch != " " and (i == 0 or top[i - 1] == " ")]
    assert starts == [i for i, ch in enumerate(bottom) if ch != " " and (i == 0 or bottom[i - 1] == " ")]


def test_gen_show_probs_without_colour_keeps_each_shade_under_its_wide_character(tmp_path):
    from rich.cells import cell_len

    shown = text_of(run(wide_session(tmp_path), ":gen 日本 n=12 show=probs seed=1"), 30).splitlines()
    text, shades = shown[0], shown[1]
    assert shades[:cell_len("日本")].strip() == ""  # the prompt's 4 columns, not 2, have no shade
    assert cell_len(text) >= len(shades.rstrip())


# --- :score's best guess under a BPE: right by id, not by a name every byte token shares ----------------------
def test_score_counts_a_guess_right_by_its_id_not_its_name(sentence_session):
    from minitf_repl.commands.inside import ScoreResult

    # two different byte tokens (0x98, 0x83) both read "�" on their own: the guess was counted right
    wrong = ScoreResult("☃", ["\ufffd", "\ufffd"], [0.1], [2.3], ["\ufffd"], [0.4], [True], 2.3, 5.7, unit="token",
                        ids=[246, 225], guess_ids=[158])
    assert not wrong.right(0) and "at 0 of 1 position" in plain(wrong)
    s = sentence_session()
    run(s, ":set tokenizer=bpe:300")
    scored = run(s, ":score ☃☃")
    assert scored.tokens[:3] == ["\\xe2", "\\x98", "\\x83"] and scored.ids[:3] == s.data.tokenizer.encode("☃")
    assert all(scored.right(t) == (scored.guess_ids[t] == scored.ids[t + 1]) for t in range(len(scored.losses)))


def test_kv_names_byte_tokens_so_a_disagreement_between_two_bytes_shows(sentence_session, monkeypatch):
    from minitf_repl.core import inside

    s = sentence_session()
    run(s, ":set tokenizer=bpe:300")
    real = inside.cached_decoding
    snow = s.data.tokenizer.encode("☃")  # three byte tokens, each "�" alone

    def disagreeing(model, ids, n=8, **hooks):  # the two loops pick different bytes (logits tied within rounding)
        found = real(model, ids, n)
        found.steps[0].token, found.steps[0].cached_token = snow[1], snow[2]
        return found

    monkeypatch.setattr(inside, "cached_decoding", disagreeing)
    kv = run(s, ":kv the n=2")
    assert kv.steps[0].token != kv.steps[0].cached_token and "(cached: \\x83)" in plain(kv)


# --- BPE on a task: the way there is one that works -----------------------------------------------------------
def test_tok_merges_on_a_task_points_to_text_data_then_bpe():
    s = tiny_session()  # sort: :set tokenizer=bpe:512 is refused on a task
    shown = plain(run(s, ":tok 12 merges=on"))
    assert ":data pydoc, then :set tokenizer=bpe:512" in shown
    with pytest.raises(UserError) as refused:
        run(s, ":set tokenizer=bpe:512")
    assert ":data pydoc" in str(refused.value)  # not shakespeare, which needs a download


# --- :gen show=probs under greedy sampling ---------------------------------------------------------------------
def test_show_probs_under_greedy_says_why_every_token_is_certain():
    s = tiny_session()
    greedy = run(s, ":gen 1234= show=probs temperature=0")
    assert greedy.probs and all(p == 1.0 for p in greedy.probs)
    assert "every token had probability 1 when picked" in plain(greedy)  # all bright, and nothing said why
    assert "every token had probability 1" not in plain(run(s, ":gen 1234= show=probs temperature=1 seed=1"))


# --- top_k=0, as other tools switch it off -------------------------------------------------------------------
def test_a_sampling_value_out_of_range_says_none_is_off():
    s = tiny_session()
    for line, fix in ((":gen 1234= top_k=0", "top_k=none is off"), (":set top_p=0", "top_p=none is off")):
        with pytest.raises(UserError) as refused:
            run(s, line)
        assert str(refused.value).endswith(fix)  # it said "must be a positive whole number, got 0" and no more


# --- a sample without gen_seed can be had again ---------------------------------------------------------------
def test_gen_without_a_seed_says_the_seed_it_drew_and_that_seed_gives_the_same_text():
    s = tiny_session()
    first = run(s, ":gen n=4")  # gen_seed none: a fresh seed, which nothing showed, so a good text was gone
    assert first.seed_drawn and f"drawn seed {first.seed}" in plain(first)
    again = run(s, f":gen n=4 seed={first.seed}")
    assert (again.prompt, again.text) == (first.prompt, first.text) and not again.seed_drawn
    assert "drawn seed" not in plain(again)


# --- a task's answer begun in the prompt: the model is graded on what it wrote ----------------------------------
def test_gen_grades_the_model_on_the_answer_characters_it_wrote_not_those_typed():
    s = tiny_session("reverse:4")
    result = run(s, ":gen 1234=43 seed=1")  # 43 typed (right): the line said "2 of 4 characters right" of the model
    own = sum(a == b for a, b in zip(result.answer.written[2:], "21"))
    assert f"the prompt gave the first 2 characters, the model wrote the other 2 and got {own} right" in plain(result)
    assert "the prompt gave" not in plain(run(s, ":gen 1234= seed=1"))


# --- :score counter=1 ------------------------------------------------------------------------------------------
def test_score_with_the_unigram_counter_says_it_reads_nothing():
    s = tiny_session()
    shown = plain(run(s, ":score 1234=1234 counter=1"))
    assert "reads the 0 characters" not in shown and "the 1-gram counter, which reads nothing" in shown


def test_greedy_gen_names_no_drawn_seed_the_text_does_not_depend_on():
    s = tiny_session()
    assert not run(s, ":gen 1234= temperature=0").seed_drawn
    assert run(s, ":gen temperature=0").seed_drawn  # the task's question was drawn with it


# --- a prompt that starts with ':' ------------------------------------------------------------------------------
def test_a_line_of_text_starting_with_a_colon_is_told_how_to_continue_it():
    from minitf_repl.parsing import parse_line
    from test_commands import REGISTRY

    with pytest.raises(UserError) as refused:
        parse_line(":param x: the value", REGISTRY)  # a docstring's line, in pydoc's own text
    fix = str(refused.value).split("to continue the line as text: ")[1]
    command, args = parse_line(fix, REGISTRY)
    assert command.name == "gen" and args["prompt"] == ":param x: the value"
    with pytest.raises(UserError) as typo:
        parse_line(":hel", REGISTRY)
    assert "as text" not in str(typo.value)  # a mistyped command is told the command, not :gen


def test_ngram_on_random_tokens_says_any_context_costs_not_past_n_0():
    from minitf_repl.commands.counting import NgramResult, NgramRow

    rows = [NgramRow(n, 50 ** max(0, n - 1), 1.0 - n / 10, 3.9 - n / 2, 3.91 + n / 10, None, None, None)
            for n in range(5)]  # random tokens: the uniform guess is best, every context read costs
    result = NgramResult("repeat", "character", 50, 1000, 1000, 100, 100, True, rows, None, 0, 3.93, None, 16, True)
    shown = plain(result)
    assert "past n = 0" not in shown and "any context read costs on val (4.310 at n = 4)" in shown
