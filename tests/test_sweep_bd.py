"""The 46th session's own look: each test failed before its fix.

A session's :load of a checkpoint trained on a file took the session's copy of that file's text whenever the path and
the characters matched, even after the file had been rewritten: the REPL trained on text the disk no longer held, while
`minitf load` of the same checkpoint read the file as it is.
"""

import os

import pytest

from minitf_repl.core.data import file_stamp, load_data
from minitf_repl.core.errors import UserError

from test_checkpoint_commands import TEXT, run, tiny_session


@pytest.fixture
def fox(tmp_path, checkpoint_dir):
    """A session that trained on fox.txt and saved the model as `fox`; the file's path."""
    corpus = tmp_path / "fox.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    s = tiny_session(data=str(corpus))
    run(s, ":train steps=2 save=fox")
    return s, corpus


def test_a_file_grown_since_it_was_read_is_read_again_at_the_load(fox):
    s, corpus = fox
    longer = TEXT * 3  # the same characters: the saved vocabulary still fits
    corpus.write_text(longer, encoding="utf-8")
    loaded = run(s, ":load fox")
    assert loaded.data_missing is None
    assert s.loaded_data.text == longer  # was TEXT: the session's old copy
    run(s, ":train steps=1")


def test_a_file_of_other_characters_since_is_said_at_the_load_and_not_trained_on(fox):
    s, corpus = fox
    corpus.write_text("XYZ QRS TUV 0123456789 " * 40, encoding="utf-8")
    loaded = run(s, ":load fox")
    assert "vocabulary changed" in loaded.data_missing  # was None: the old text, silently
    with pytest.raises(UserError, match=r"the data this model was trained on"):
        run(s, ":train steps=1")


def test_a_file_gone_at_one_load_and_another_put_there_is_told_as_it_is_at_the_next(fox):
    s, corpus = fox
    corpus.unlink()
    assert "not available" in run(s, ":load fox").data_missing
    corpus.write_text("XYZ QRS TUV 0123456789 " * 40, encoding="utf-8")
    assert "vocabulary changed" in run(s, ":load fox").data_missing  # was "not available": the stand-in, kept


def test_an_unchanged_file_keeps_the_sessions_copy(fox):
    s, corpus = fox
    before = s.loaded_data
    run(s, ":load fox")
    assert s.loaded_data is before  # nothing read again


def test_a_file_stamp_moves_with_a_rewrite_and_is_none_for_built_in_data_and_gone_files(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("ab" * 50, encoding="utf-8")
    data = load_data(str(path))
    assert data.stamp == file_stamp(str(path)) is not None
    assert data.retokenized(None).stamp == data.stamp
    os.utime(path, ns=(0, 12345))
    assert file_stamp(str(path)) != data.stamp
    assert file_stamp("pydoc") is None and file_stamp("sort:4") is None
    assert file_stamp(str(tmp_path / "nowhere.txt")) is None
    assert load_data("sort:4").__dict__.get("stamp") is None


def test_a_save_under_a_link_to_another_checkpoint_of_the_folder_is_refused(checkpoint_dir):
    s = tiny_session(checkpoint_dir=checkpoint_dir)
    run(s, ":train steps=2 save=good")
    good = checkpoint_dir / "good" / "checkpoint.json"
    before = good.read_bytes()
    (checkpoint_dir / "alias").symlink_to(checkpoint_dir / "good")
    with pytest.raises(UserError, match=r"alias is a symbolic link to good, another checkpoint in this folder.*"
                                        r"save as good, or remove the link: rm "):
        run(s, ":save alias")
    assert good.read_bytes() == before  # was replaced through the link


def test_a_link_to_a_folder_elsewhere_is_saved_through(checkpoint_dir, tmp_path):
    elsewhere = tmp_path / "other-disk" / "run"
    s = tiny_session(checkpoint_dir=checkpoint_dir)
    run(s, ":train steps=2 save=run")
    (checkpoint_dir / "run").rename(elsewhere.parent.mkdir(parents=True) or elsewhere)
    (checkpoint_dir / "run").symlink_to(elsewhere)
    run(s, ":train steps=1")
    run(s, ":save run")
    assert (checkpoint_dir / "run").is_symlink() and '"step": 3' in (elsewhere / "checkpoint.json").read_text()


def test_a_command_between_two_quits_arms_the_unsaved_warning_again(monkeypatch, tmp_path):
    """The failed save's line offers `:set checkpoint_dir=DIR`, which moves the folder and saves nothing: the :quit
    after it left at once, the model in no checkpoint, since the :quit before it had been warned."""
    from test_repl import TINY as TINY_REPL, drive
    from test_sweep_n import autosaves_fail

    autosaves_fail(monkeypatch)
    code, out, err, session = drive(f"{TINY_REPL}\r:data sort\r:train steps=5\r:quit\r"
                                    f":set checkpoint_dir={tmp_path / 'elsewhere'}\r:quit\r:quit\r:config\r")
    assert code == 0 and "checkpoints now go to" in out
    assert " ".join(err.split()).count("the model trained to step 5 is in no checkpoint") == 2, err  # was 1
    assert "d_model" not in out.split("checkpoints now go to")[1]  # the second :quit in a row left


def test_a_quit_right_after_its_warning_still_leaves(monkeypatch):
    from test_repl import TINY as TINY_REPL, drive
    from test_sweep_n import autosaves_fail

    autosaves_fail(monkeypatch)
    code, out, err, _ = drive(f"{TINY_REPL}\r:data sort\r:train steps=5\r:quit\r\r:quit\r:config\r")
    assert code == 0 and err.count("in no checkpoint") == 1  # an empty line is no command: it arms nothing
    assert "d_model" not in out.split("trained 5 steps")[1]


# --- the one-shot shell: its own options, and a command's help and text -----------------------------------------------
def test_a_commands_help_shows_whatever_is_wrong_with_the_options_before_it():
    from test_cli import invoke

    for before in (["--device", "foo"], ["--set", "lr=x"], ["--load", "nope"], ["--data", "nosuch.txt"],
                   ["--checkpoint-dir", ""]):
        for asked in (["--help"], ["-h"], ["hello", "--help"]):
            result = invoke(*before, "gen", *asked)
            assert result.exit_code == 0 and "Usage: minitf gen" in result.stdout, (before, asked, result.output)
    said = invoke("--device", "foo", "gen", "--", "--help")  # text after --: no help asked, the bad device said
    assert said.exit_code == 1 and "unknown device 'foo'" in said.stderr


def test_a_data_file_that_is_not_there_is_refused_by_every_command(tmp_path):
    from test_cli import assert_one_error_line, invoke

    for args in (["ls"], ["config"], ["config", "--json"], ["data"]):  # ls and config exited 0
        line = assert_one_error_line(invoke("--data", str(tmp_path / "nosuch.txt"), *args))
        assert line.startswith("error: --data: no such file: ") and "nosuch.txt" in line, args
    assert invoke("--data", "sort:3", "config").exit_code == 0


def test_a_prompt_after_dashes_is_text_even_where_it_reads_as_an_option(checkpoint_dir):
    from test_cli import invoke

    assert invoke("--data", "sort:3", "train", "--steps", "2", "--save", "s3").exit_code == 0
    result = invoke("--load", "s3", "gen", "--seed", "1", "-n", "3", "--", "n=5")
    # was "n is given twice (n=5 and --n 3)": the text read as the option n
    assert result.exit_code == 1 and "1 character not in the vocabulary: 'n'" in result.stderr, result.output
    taken = invoke("--load", "s3", "gen", "--seed", "1", "n=3", "12=")  # before any --, KEY=VALUE is an option
    assert taken.exit_code == 0 and "3 tokens" in taken.output, taken.output


def test_the_line_that_restores_a_checkpoint_names_the_folder_it_was_saved_in(tmp_path):
    from test_cli import invoke

    folder = str(tmp_path / "runs here")
    saved = invoke("--checkpoint-dir", folder, "--data", "sort:3", "train", "--steps", "2", "--save", "x")
    # was "(--load x restores it)": that looks in the default folder, where there is no x
    assert f"saved checkpoint x (minitf --checkpoint-dir '{folder}' --load x restores it;" in saved.stdout, saved.output
    assert invoke("--checkpoint-dir", folder, "--load", "x", "gen", "12=", "-n", "2").exit_code == 0
    plain = invoke("--data", "sort:3", "train", "--steps", "2", "--save", "y")
    assert "saved checkpoint y (minitf --load y restores it;" in plain.stdout  # a command to paste, not a fragment


def test_an_unknown_set_key_from_the_shell_counts_the_keys_its_help_lists():
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke("set", "foo=1"), code=2)
    listed = invoke("set", "--help").stdout
    count = int(line.split("lists its ")[1].split()[0])
    assert "checkpoint_dir" not in listed and count == 49, line  # 49 with save_every (s59); checkpoint_dir left out


@pytest.mark.parametrize("args", [["data", "sort:3", "pydoc"], ["load", "s3", "ci1"], ["report", "a.html", "b.html"],
                                  ["save", "a", "b"]])
def test_a_name_or_path_given_as_several_words_from_the_shell_is_refused_as_such(args):
    from test_cli import assert_one_error_line, invoke

    line = assert_one_error_line(invoke(*args), code=2)  # the command line itself is wrong (47th session: was 1)
    # was "the size after ':' must be a whole number", "'s3 ci1' is not a valid checkpoint name", ...
    named = "PATH" if args[0] == "report" else "NAME"  # as its usage line names it (47th session: report's was NAME)
    assert line.startswith(f"error: minitf {args[0]} takes one {named}, got 2 words: {args[1]} {args[2]}; give"), line


def test_a_plot_of_watched_frames_says_in_its_help_that_they_are_the_interactive_sessions():
    from test_cli import invoke

    said = " ".join(invoke("plot", "--help").stdout.replace("│", " ").split())
    assert "minitf train watch=lens" not in said  # a one-shot train's frames end with its process
    assert "keeps in the interactive shell's session, not in a checkpoint: lens_rank from watch=lens" in said
    train = " ".join(invoke("train", "--help").stdout.replace("│", " ").split())
    assert "minitf report shows the frames" not in train and "(a checkpoint does not keep them)" in train


def test_a_task_with_nothing_after_its_colon_is_that_task_at_its_default_size():
    from minitf_repl.core.data import lasting_spec
    from test_cli import invoke

    assert lasting_spec("sort:") == "sort" and lasting_spec("add: ") == "add" and lasting_spec("sort:4") == "sort:4"
    said = invoke("data", "sort:").stdout
    assert "data is now sort\n" in said and "--data sort train" in said  # was "data is now sort:"


def test_a_scaled_logit_far_from_one_is_written_in_powers_of_ten():
    from minitf_repl.commands.generate import _number

    assert _number(-795437335968017508590638071808.0) == "-7.95e+29"  # was 31 digits and 3 decimals
    assert _number(-3.3e-32) == "-3.30e-32"  # was "-0.000"
    assert [_number(v) for v in (0.0, -1.5, 12345.678, -0.0006)] == ["0.000", "-1.500", "12345.678", "-0.001"]


# --- the views' words, against their own numbers ------------------------------------------------------------------
def test_context_with_a_unigram_counter_calls_it_so_and_says_it_reads_nothing(sentence_session):
    from test_render import plain

    s = sentence_session(batch_size=8, eval_batches=2, lr=1e-2, warmup_steps=5)
    run(s, ":train steps=20")
    text = " ".join(plain(run(s, ":context windows=16 counter=1")).split())
    assert "as the bigram counter does" not in text  # was said beside a table and a legend of unigrams
    assert "position 0 reads one character, the unigram counter none" in text
    assert "0 characters" not in text and "at most 0" not in text
    assert "it reads none of the window's characters: it scores how often each comes" in text


def test_context_past_the_window_says_which_end_the_model_is_above_the_counter_at():
    from minitf_repl.commands.context import ContextResult, readings
    from minitf_repl.core.context import PositionLosses

    flat = [2.0] * 16
    curve = PositionLosses(windows=8, positions=16, losses=flat, errors=[0.01] * 16, counted=[8] * 16, smoothed=flat,
                           late=2.0, mean=2.0, counter_order=3, counter=[1.9] * 8 + [2.5] * 8,
                           counter_smoothed=[1.9] * 8 + [2.5] * 8, half_at=None, trained=8, below_counter_from=None,
                           far_gain=None, far_error=None, past_gain=None, past_error=None)
    result = ContextResult(data="x.txt", unit="character", vocab_size=20, chance=3.0, seed=0, curve=curve, rows=[],
                           model_step=100)
    said = " ".join(readings(result))
    # was "the model ends above ...", over a table whose last rows (past the window) show it under the counter
    assert "the model ends the window it trained on (position 7) above the trigram counter" in said


def test_patch_with_a_target_the_corrupted_run_favours_names_the_foil_without_calling_it_a_second_choice():
    from minitf_repl.commands.why import PatchResult
    from test_render import plain

    result = PatchResult(clean="abc", corrupt="abd", clean_tokens=list("abc"), corrupt_tokens=list("abd"), answer=" ",
                         foil="e", clean_diff=-1.2, corrupt_diff=0.4, stream=["embed", "blocks.0"],
                         resid=[[0.1, 0.2, 0.3], [0.0, 0.5, 1.0]], heads=[[0.2, 0.8]], reading="", same_answer=True)
    text = " ".join(plain(result).split())
    # was "... is ' ' too, so the foil is the clean run's second choice 'e'", where 'e' was the clean run's first
    assert "too, so" not in text and "second choice" not in text
    assert ("the corrupted prompt's likeliest next token is the answer '␣', so the foil is the clean run's "
            "likeliest other token 'e'") in text


def test_checks_init_gives_the_share_off_of_the_numbers_it_shows():
    from minitf_repl.commands.checks import ChecksResult, measured
    from minitf_repl.core.checks import InitCheck

    result = ChecksResult(data="pydoc", unit="character", vocab_size=103, model_step=0, asked=["init"])
    near = InitCheck(loss=4.620, uniform=4.635, logit_std=0.1, passed=True, expected=4.606)
    # was "(0.7% off)": measured from 4.606, a reference within 1% of ln V, which the line does not give
    assert measured("init", near, result).startswith("4.620 against ln(103) = 4.635 (0.3% off)")
    far = InitCheck(loss=4.300, uniform=4.635, logit_std=0.1, passed=True, expected=4.310)
    assert measured("init", far, result).startswith("4.300 against 4.310 (ln(103) = 4.635, less the tied head's "
                                                    "favour for the token read) (0.2% off)")


def test_heads_reading_names_no_head_for_induction_attention_no_higher_than_even():
    from minitf_repl.commands.why import heads_reading
    from minitf_repl.core.heads import ROLES, HeadRoles, HeadScores

    def roles(induction: float) -> HeadRoles:
        scores = {"previous": 0.1, "current": 0.1, "first": 0.1, "duplicate": 0.1, "induction": induction}
        return HeadRoles([[0, 1, 0, 1]], 2, [HeadScores(2, 3, scores, None)], dict.fromkeys(ROLES, 0.03), {}, [],
                         6.36, 6.19, 4.63)

    flat = heads_reading(roles(0.03), 6.36, 6.19, se=0.02)
    # was "head 2.3 puts 0.03 of its attention on the token after an earlier copy", read as an induction head
    assert "head 2.3 puts" not in flat
    assert ("no head looks at the token after an earlier copy of the current one much more than attention spread "
            "evenly would (the most: head 2.3, 0.03; even 0.03)") in flat
    assert "head 2.3 puts 0.30 of its attention" in heads_reading(roles(0.30), 6.36, 6.19, se=0.02)


def test_ablate_says_a_sample_of_whitespace_alone():
    from minitf_repl.commands.lab import AblateResult
    from test_render import plain

    text = plain(AblateResult(["block 0"], 2.1, 2.9, " " * 24, "The exam", False))
    # was "sample: The exam" and nothing after it: the model seemed to have stopped
    assert "only whitespace was generated (24 spaces)" in text
    assert "only whitespace" not in plain(AblateResult(["block 0"], 2.1, 2.9, " the end", "The exam", False))


def test_a_table_narrowed_past_its_bars_names_them_in_what_it_left_out():
    import io

    from rich.console import Console

    from minitf_repl.render.tables import fitting_table

    console = Console(file=io.StringIO(), width=30, color_system=None, force_terminal=True)  # a window's words
    rows = [["1", "a rather long key text", "0.123", "████████", "0.456"]]
    table = fitting_table(console, ["j", "key", "q.k_j", "", "|a_ij v_j|"], rows, left=("key", ""),
                          optional=("|a_ij v_j|", "q.k_j", ""))
    # was "left out at 30 columns: |a_ij v_j|, q.k_j,  (a wider window shows them)"
    assert str(table.caption) == "left out at 30 columns: |a_ij v_j|, q.k_j, the bars (a wider window shows them)"


def test_ffn_lists_every_hidden_unit_where_k_asks_for_more_than_256():
    s = tiny_session(data="sort:4")
    run(s, ":set d_ff=300")
    result = run(s, ":ffn k=1000")  # was "k=1,000 is too large: at most 256", of a layer of 512 units
    assert result.width == 300 and len(result.units) == 300


def test_qkv_lists_a_single_key_left_between_two_listed_ones_as_its_own_row():
    from minitf_repl.commands.worked import QKV_ROWS, _shown_keys

    T = QKV_ROWS + 4
    weights = [0.0] * T
    for j in [j for j in range(T - 1) if j != 5][: QKV_ROWS - 2]:  # every key heavier than key 5, but one at 5
        weights[j] = 1.0
    shown = _shown_keys(weights, T - 1)
    gaps = [b - a - 1 for a, b in zip([-1, *shown], shown)]
    assert 5 in shown and 1 not in gaps  # was a row "… j = 5, 1 key together" in the place of key 5's own


def test_a_continued_run_capped_by_the_lr_setting_says_the_rule_it_followed(checkpoint_dir):
    from test_render import plain

    s = tiny_session(lr=1e-2, warmup_steps=1)
    run(s, ":train steps=4")
    final = s.trainer.rate_to_continue()
    run(s, f":set lr={final / 2}")
    result = run(s, ":train steps=2")
    assert result.schedule == "continue" and result.constant_lr == pytest.approx(final / 2)
    # it said "lr= if given, else the last run's final rate" of a rate that was neither
    assert "else the last run's final rate, or the lr setting where that is lower" in plain(result)


@pytest.mark.parametrize("lr, other", [(3e-3, "lr=0.009"), (2e-2, "lr=0.0067")])
def test_lrfinds_compare_example_goes_the_way_the_test_points(lr, other):
    from minitf_repl.commands.rates import LrfindResult
    from minitf_repl.core.lrfind import LrRange
    from test_render import plain

    rates = [1e-5 * 10 ** (k / 10) for k in range(51)]
    smoothed = [4.0 - 0.02 * k for k in range(51)]
    # steepest at 3.5e-3, lowest at 3.6e-2, blown at 0.5: 3e-3 sits just below the steepest fall
    result = LrfindResult(LrRange("adamw", rates, smoothed, smoothed, 3.5e-3, 3.6e-2, 3.0, 0.5, 1e-5, 1.0, 51),
                          "pydoc", lr, 1337)
    text = plain(result)
    # was ":compare lr=0.003 lr=0.001" where the test said the rate could go higher
    assert f":compare lr={lr:g} {other})" in text, text[-400:]


def test_compare_says_a_bad_value_before_counting_the_contenders():
    s = tiny_session()
    with pytest.raises(UserError) as refused:
        run(s, ":compare lr=abc")
    # was "compare needs at least two contenders, e.g. :compare current lr=abc", an example that fails in turn
    assert str(refused.value).startswith("contender lr=abc: lr must be a number, got 'abc'"), str(refused.value)
    with pytest.raises(UserError, match=r"^compare needs at least two contenders, e.g. :compare current lr=0.02"):
        run(s, ":compare lr=0.02")
