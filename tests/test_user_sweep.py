"""What two sweeps of the lab, tried as a user would, found wrong: each test failed before its fix.

One-symbol data hung the counting models; a skipped block still showed its writes in the views
that read inside it; :quantize's copy kept or missed :ablate's parts; --set after --load threw the
loaded weights away without a word; and a dozen smaller ones, each named in its test.
"""

import json
import math
import os
import re

import pytest
import torch

from minitf_repl.core.ablation import Ablation, Ablations, skipped_blocks
from minitf_repl.core.attribution import direct_logit_attribution
from minitf_repl.core.checkpoint import MANIFEST
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import DataError, load_data, lasting_spec
from minitf_repl.core.errors import UserError
from minitf_repl.core.inside import logit_lens, residual_stream
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.ngram import longest_order
from minitf_repl.core.patching import activation_patching
from minitf_repl.commands.why import clip_pair, heads_reading
from minitf_repl.session import Session
from test_cli import assert_one_error_line, invoke
from test_commands import run
from test_render import plain

TINY = dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)


def session_on(data="pydoc", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=2, batch_size=2), data_spec=data,
                   device_name="cpu")


# --- data of one symbol ---------------------------------------------------------------------------
def test_a_text_of_one_distinct_character_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("a" * 500)
    with pytest.raises(DataError, match="holds one distinct character \\('a'\\), so there is nothing to predict; give"):
        load_data(str(path))
    session = session_on()
    with pytest.raises(UserError, match="one distinct character"):
        run(session, f":data {path}")
    assert session.data_spec == "pydoc"  # nothing changed
    assert longest_order(1) >= 63 and longest_order(2) == 62  # no longer loops for ever on one symbol


# --- a skipped block in the views that read inside it ------------------------------------------------
def small_model(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    config = ModelConfig(**{**dict(vocab_size=20, d_model=32, n_heads=4, n_layers=3, d_ff=64, max_seq_len=16),
                            **changes})
    return MiniTransformerLM(config).eval()


IDS = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.mark.parametrize("skip", [1, 2])  # a middle block, and the last (whose output the lens's last row reads)
def test_the_lens_attribution_and_stream_of_a_skipped_block_add_nothing(skip):
    model = small_model()
    ablations = Ablations(model)
    ablations.add(Ablation("block", skip))
    assert skipped_blocks(model) == {skip}
    with torch.no_grad():
        logits, _ = model(torch.tensor([IDS]))
    lens = logit_lens(model, IDS)
    torch.testing.assert_close(lens.logits[-1], logits[0], atol=1e-5, rtol=1e-5)  # its last row is the prediction
    at = [layer.name for layer in lens.layers].index(f"blocks.{skip}")
    torch.testing.assert_close(lens.logits[at], lens.logits[at - 1])  # the skipped block changed nothing
    # the parts sum to the logit: a skipped block's heads, MLP and bias are not in it
    split = direct_logit_attribution(model, IDS)
    assert split.total == pytest.approx(split.logit, abs=1e-4)
    assert all(p.logit == 0 for p in split.parts if p.layer == skip and p.kind in ("head", "ffn"))
    stream = residual_stream(model, IDS)
    skipped = [w for w in stream.writes if w.block == skip]
    assert len(skipped) == 2 and all(w.write == 0 and w.after == pytest.approx(w.before) for w in skipped)
    ablations.clear()
    assert skipped_blocks(model) == set() and all(not m._forward_hooks and not m._forward_pre_hooks
                                                  for m in model.modules())
    unskipped = direct_logit_attribution(model, IDS)  # every block's bias again
    assert unskipped.total == pytest.approx(unskipped.logit, abs=1e-4)


def test_a_skipped_block_still_equals_a_model_without_it_post_norm_too():
    for changes in ({}, {"norm_placement": "post"}, {"residual": False}):
        model, shorter = small_model(**changes), small_model(**changes)
        shorter.blocks = torch.nn.ModuleList([shorter.blocks[0], shorter.blocks[2]])
        Ablations(model).add(Ablation("block", 1))
        with torch.no_grad():
            torch.testing.assert_close(model(torch.tensor([IDS]))[0], shorter(torch.tensor([IDS]))[0])


# --- :quantize's copy and :ablate --------------------------------------------------------------------
def hooks(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_the_int8_copy_switches_off_what_ablate_switches_off_and_back():
    session = session_on()
    run(session, ":train steps=2")
    run(session, ":ablate head=0.1")
    made = run(session, ":quantize int8")
    assert made.ablations == ["head 0.1"] and "both measured with head 0.1 switched off" in plain(made)
    copy = session.sampling_model
    assert copy is not session.model and hooks(copy) == hooks(session.model) == 1
    run(session, ":ablate off")
    assert hooks(copy) == 0 and session.sampling_model is copy  # :gen samples the whole model again
    run(session, ":ablate block=1")
    assert hooks(copy) == hooks(session.model) > 0
    run(session, ":ablate off")
    assert hooks(copy) == 0 and hooks(session.model) == 0


# --- threads after a load ----------------------------------------------------------------------------
def test_a_loaded_model_gets_the_thread_policy_as_a_built_one_does(tmp_path):
    first = session_on()
    first.checkpoint_dir = tmp_path
    run(first, ":train steps=1")
    run(first, ":save base")
    second = session_on()
    second.checkpoint_dir = tmp_path
    assert second.threads.choice is None
    run(second, ":load base")
    assert second.threads.choice is not None and torch.get_num_threads() == second.threads.choice.threads


# --- the command line: --set after --load, an option before its command ---------------------------
CLI_TINY = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64", "--set", "max_seq_len=32",
            "--set", "batch_size=4", "--data", "sort"]


def test_set_after_load_that_would_rebuild_is_refused_and_keeps_nothing(tmp_path):
    folder = str(tmp_path / "ck")
    result = invoke(*CLI_TINY, "--checkpoint-dir", folder, "train", "--steps", "2", "--save", "base")
    assert result.exit_code == 0, result.output
    line = assert_one_error_line(invoke("--checkpoint-dir", folder, "--load", "base", "--set", "n_layers=2", "gen"))
    assert line == ("error: --set: n_layers would rebuild the model loaded from base and reset its weights; "
                    "leave it out to use its weights, or leave out --load to start a new model")
    assert sorted(os.listdir(folder)) == ["base"]  # no kept-* checkpoint written
    ok = invoke("--checkpoint-dir", folder, "--load", "base", "--set", "temperature=0.5", "--set", "dropout=0.1",
                "gen", "--n", "5")
    assert ok.exit_code == 0, ok.output  # settings that keep the weights still apply


def test_an_option_of_a_command_typed_before_it_says_where_it_goes():
    line = assert_one_error_line(invoke("--json", "config"), code=2)
    assert line == "error: --json is an option of config, so it goes after the command: minitf config --json"
    line = assert_one_error_line(invoke("--data", "sort", "--steps", "3", "train"), code=2)
    assert line.endswith(": minitf --data sort train --steps 3")
    line = assert_one_error_line(invoke("--bogus", "config"), code=2)
    assert "No such option: --bogus" in line


def test_ls_in_an_empty_folder_names_a_way_to_write_one_from_the_shell(tmp_path):
    result = invoke("--checkpoint-dir", str(tmp_path), "ls")
    assert result.exit_code == 0
    assert f"minitf --checkpoint-dir {tmp_path} train --save NAME trains a model and writes one" in result.stdout
    session = session_on()
    session.checkpoint_dir = tmp_path
    assert ":save NAME writes one" in plain(run(session, ":ls"))


# --- training ----------------------------------------------------------------------------------------
def test_schedule_continue_with_lr_holds_that_rate():
    session = session_on()
    run(session, ":train steps=3")
    result = run(session, ":train steps=2 schedule=continue lr=0.005")
    assert session.trainer.run_constant_lr == 0.005 and session.train_config.lr == 0.005
    assert result.schedule == "continue"
    run(session, ":train steps=2 schedule=continue")  # without lr=: the last run's rate, as before
    assert session.trainer.run_constant_lr == 0.005


def test_a_task_drops_the_subword_tokenizer_so_the_setting_says_what_reads_the_next_text():
    session = session_on()
    run(session, ":set tokenizer=bpe:300")
    assert session.tokenizer_setting.startswith("bpe")
    run(session, ":data sort")
    assert session.tokenizer_setting == "char" and session.tokenizer is None
    run(session, ":data pydoc")
    assert session.data.tokenizer.kind == "char"  # read as the setting said, not by the old BPE


# --- :patch --------------------------------------------------------------------------------------------
def test_patching_reads_a_corruption_that_hardly_moves_the_difference_as_noise():
    from minitf_repl.commands.why import patch_reading

    model = small_model()
    clean, corrupt = IDS, IDS[:-1] + [7]
    done = activation_patching(model, clean, corrupt)
    with torch.no_grad():
        corrupt_answer = int(model(torch.tensor([corrupt]))[0][0, -1].argmax())
    assert done.same_answer == (corrupt_answer == done.answer)
    heads, resid = done.heads.tolist(), done.resid.tolist()
    noise = patch_reading(heads, done.stream, resid, gap=0.023)
    assert noise == ("the corruption moves z[answer] - z[foil] by only +0.023, so these fractions are noise over a "
                     "tiny difference; choose a corrupted prompt that changes the answer (or train first)")
    assert patch_reading(heads, done.stream, resid, gap=-0.5).startswith("the corrupted prompt favours the answer "
                                                                         "more than the clean one")
    assert "noise" not in patch_reading(heads, done.stream, resid, gap=2.0)
    session = session_on("sort:4")
    result = run(session, ":patch 1234= 1243=")  # untrained: the difference hardly moves
    assert result.reading.startswith("the corruption moves z[answer] - z[foil] by only")


def test_long_prompts_that_differ_early_show_where_they_differ():
    a, b = "x" * 5 + "A" + "y" * 60, "x" * 5 + "B" + "y" * 60
    shown = clip_pair(a, b)
    assert shown[0] != shown[1] and "A" in shown[0] and "B" in shown[1] and shown[0].endswith("…")
    assert clip_pair("abc", "abd") == ("abc", "abd")
    late = clip_pair("y" * 60 + "A", "y" * 60 + "B")
    assert late[0].startswith("…") and late[0].endswith("A") and len(late[0]) == 31


# --- :heads ----------------------------------------------------------------------------------------------
def test_heads_on_a_text_without_repeats_says_why_there_is_no_induction_score():
    session = session_on()
    result = run(session, ":heads abcdefg")
    assert "nan" not in plain(result)
    assert "no token of the text comes twice" in result.reading


def test_heads_reads_copying_begun_before_it_halves_the_loss():
    from minitf_repl.core.heads import ROLES, HeadRoles, HeadScores

    def roles(induction_role):
        scores = {"previous": 0.1, "current": 0.1, "first": 0.1, "duplicate": 0.1, "induction": 0.8}
        heads = [HeadScores(1, 1, scores, induction_role, carries=2.5)]
        return HeadRoles([[0, 1, 0, 1]], 2, heads, dict.fromkeys(ROLES, 0.05), {}, [], 4.0, 0.5, 3.0)

    assert heads_reading(roles("induction"), 4.0, 3.2).startswith("copying from context has begun")
    assert heads_reading(roles("induction"), 4.0, 3.95).startswith("no copying from context yet")
    assert heads_reading(roles("induction"), 4.0, 1.5).startswith("the model copies from context")


def test_experts_says_the_n_experts_the_model_has():
    session = session_on(n_experts=1)
    with pytest.raises(UserError, match=r"no experts \(n_experts is 1: one dense feed-forward per block\)"):
        run(session, ":experts")


# --- :report, :compare, :data -----------------------------------------------------------------------------
def test_a_report_path_through_a_file_says_it_is_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    session = session_on()
    with pytest.raises(UserError, match="afile is a file, not a folder; choose another path"):
        run(session, f":report {tmp_path / 'afile' / 'r.html'}")
    with pytest.raises(UserError, match="does not exist"):
        run(session, f":report {tmp_path / 'nofolder' / 'r.html'}")


def test_compare_says_what_is_wrong_in_one_contender_first():
    session = session_on()
    with pytest.raises(UserError, match="'0.02' in 'lr=0.01,0.02' is not a setting: a comma joins the settings of one "
                                        "contender; give each value its own contender, e.g. :compare lr=0.01 lr=0.02"):
        run(session, ":compare lr=0.01,0.02")
    with pytest.raises(UserError, match="'n_layers=2,n_layers=3' sets n_layers twice"):
        run(session, ":compare current n_layers=2,n_layers=3")
    with pytest.raises(UserError, match="sets lr twice"):
        run(session, ":compare lr=0.01,learning_rate=0.02 current")  # an alias is its setting


def test_a_checkpoint_keeps_its_data_file_by_a_path_any_folder_finds(tmp_path, monkeypatch):
    (tmp_path / "work").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "work" / "notes.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    monkeypatch.chdir(tmp_path / "work")
    assert lasting_spec("notes.txt") == str(tmp_path / "work" / "notes.txt")
    assert lasting_spec("sort:4") == "sort:4" and lasting_spec("missing.txt") == "missing.txt"
    session = session_on("notes.txt")
    session.checkpoint_dir = tmp_path / "ck"
    run(session, ":train steps=1")
    run(session, ":save mine")
    manifest = json.loads((tmp_path / "ck" / "mine" / MANIFEST).read_text())
    assert manifest["data_spec"] == str(tmp_path / "work" / "notes.txt")
    monkeypatch.chdir(tmp_path / "elsewhere")
    other = session_on()
    other.checkpoint_dir = tmp_path / "ck"
    run(other, ":load mine")
    assert other.data.info().kind == "corpus" and other.data.name == "notes.txt"  # the file was found


def test_data_of_a_checkpoint_whose_file_is_gone_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gone.txt").write_text("the quick brown fox jumps over the lazy dog. " * 200)
    session = session_on("gone.txt")
    session.checkpoint_dir = tmp_path / "ck"
    run(session, ":train steps=1")
    run(session, ":save mine")
    (tmp_path / "gone.txt").unlink()
    other = session_on()
    other.checkpoint_dir = tmp_path / "ck"
    run(other, ":load mine")
    out = plain(run(other, ":data"))
    assert "the vocabulary alone, to generate with" in out and "fresh random tokens" not in out


# --- target= and :score on a task ---------------------------------------------------------------------------
def test_a_space_is_a_target_typed_as_a_space_or_as_its_symbol():
    session = session_on()
    for line in (':attrib "the cat" target=␣', ':attrib "the cat" target=" "'):
        assert run(session, line).target == " "
    with pytest.raises(UserError, match="must be one token, got 'ab' \\(2 tokens\\); give one character, e.g. "
                                        "target=4 \\(target=␣ for a space\\)"):
        run(session, ":attrib hello target=ab")


def test_score_on_a_task_counts_the_answer_of_a_question_also_cut_short():
    session = session_on("sort:4")
    whole = run(session, ":score 3142=1234")
    assert whole.counted == [False] * 4 + [True] * 4 and whole.counting is None
    short = run(session, ":score 3142=12")
    assert short.counted == [False] * 4 + [True] * 2  # the question is given, as training gives it
    past = run(session, ":score 3142=123499")
    assert past.counted == [False] * 4 + [True] * 4 + [False] * 2
    assert "an answer of sort has 4 characters: what follows it was never trained" in plain(past)
    other = run(session, ":score 12345")
    assert all(other.counted) and "not a question of sort" in plain(other)
    assert math.isfinite(other.loss)


# --- smaller ones ----------------------------------------------------------------------------------------------
def test_ablate_alone_shows_what_is_switched_off_now():
    session = session_on()
    run(session, ":train steps=1")
    nothing = run(session, ":ablate")
    assert nothing.active == [] and ":ablate head=L.H switches a head off" in plain(nothing)
    run(session, ":ablate head=0.1")
    again = run(session, ":ablate")
    assert again.active == ["head 0.1"] and session.ablations == [Ablation("head", 0, 1)]
    assert again.val_loss_after != again.val_loss_before


def test_a_new_checkpoint_name_may_not_start_with_a_dash(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=1")
    with pytest.raises(UserError, match="'-x' is not a valid name for a new checkpoint: a name starting with '-' "
                                        "reads as an option on the command line; choose another, e.g. x"):
        run(session, ":save -x")
    with pytest.raises(UserError, match="up to 100 ASCII letters"):
        run(session, ":save héllo")


def test_train_where_the_autosave_cannot_be_written_says_how_to_train_without_it(tmp_path):
    (tmp_path / "afile").write_text("x")
    session = session_on()
    session.checkpoint_dir = tmp_path / "afile" / "ck"
    with pytest.raises(UserError, match="is a file, not a directory; .*; or train without saving: :set autosave=off"):
        run(session, ":train steps=1")
    run(session, ":set autosave=off")
    run(session, ":train steps=1")
    assert session.trainer.step == 1


def test_mistakes_says_when_the_questions_drawn_repeat():
    session = session_on("sort:1", max_seq_len=8)
    run(session, ":train steps=1")
    out = plain(run(session, ":mistakes n=20"))
    assert "to 20 held-out questions (" in out and "distinct: drawn at random, they repeat)" in out


def test_the_lens_of_a_post_norm_model_reads_without_ln_f():
    session = session_on(norm_placement="post")
    result = run(session, ":lens hello")
    assert result.post_norm and "softmax(lm_head(h)) (post-norm" in plain(result) and "ln_f(h)" not in plain(result)
    assert "softmax(lm_head(ln_f(h)))" in plain(run(session_on(), ":lens hello"))


# --- a third sweep: training and the lab tools -----------------------------------------------------------------
def test_lr_after_a_stopped_run_starts_a_fresh_run_at_that_peak():
    session = session_on()
    run(session, ":train steps=40")
    session.trainer.start_run(400)  # a long run, stopped after 5 steps as Ctrl-C stops it
    session.trainer.run(should_stop=lambda: session.trainer.step >= 45)
    assert session.trainer.run_remaining > 0
    result = run(session, ":train steps=3 lr=0.05")
    assert not result.resumed and result.schedule == "new" and session.trainer.run_constant_lr is None
    run(session, ":train schedule=continue lr=0.002 steps=2")
    out = plain(run(session, ":train schedule=continue lr=0.002 steps=2"))
    assert "a constant rate of 2.00e-03 (schedule=continue: lr= if given" in out
    with pytest.raises(UserError, match="schedule=continue goes on at the last run's rate, and sort:2 has another "
                                        "vocabulary: the switch rebuilds the model, which then has no run to go on "
                                        "from; :train schedule=new starts one"):
        run(session, ":train data=sort:2 schedule=continue")


def test_compare_shows_the_contenders_that_trained_beside_one_that_diverged():
    session = session_on(n_layers=1, d_model=32, n_heads=2)
    result = run(session, ":compare lr=0.01 lr=1e6 steps=6")
    kept, blew = result.outcomes
    assert kept.diverged is None and kept.final.step == 6 and math.isfinite(kept.final.val_loss)
    assert blew.diverged is not None and blew.diverged.startswith("step ")
    assert not result.stopped and session.train_config.lr == 0.01
    out = plain(result)
    assert "lr=1e6 diverged at step" in out and "the others went on" in out
    both = run(session, ":compare lr=1e5 lr=1e6 steps=6")
    assert all(o.diverged for o in both.outcomes) and "every contender diverged" in plain(both)


def test_checks_fail_a_training_check_that_diverges_and_run_the_rest():
    session = session_on(n_layers=1, d_model=32, n_heads=2)
    run(session, ":set lr=1e6")
    result = run(session, ":checks steps=5")
    assert {"blind", "overfit"} <= set(result.failed) and "batch" in result.passed and "gradient" in result.passed
    assert result.diverged["overfit"].startswith("its training diverged at step")
    assert "FAIL overfit" in plain(result) and "lower lr" in plain(result)


def test_a_loss_blown_far_above_ln_v_says_the_rate_is_the_likely_cause():
    session = session_on(n_layers=1, d_model=32, n_heads=2)
    run(session, ":set lr=50 autosave=off")
    out = plain(run(session, ":train steps=5"))
    uniform = math.log(session.data.tokenizer.vocab_size)  # pydoc's characters: 103 in Python 3.11, 104 in 3.10
    assert f"is far above ln(V) = {uniform:.2f}, a uniform guess: training made the model worse" in out
    assert "far above" not in plain(run(session_on(n_layers=1, d_model=32, n_heads=2), ":train steps=5"))
    run(session, ":set lr=0.01")  # a continued run goes on at a rate no higher than the setting
    assert run(session, ":train steps=2").constant_lr == 0.01


def test_gen_does_not_grade_an_answer_the_prompt_wrote_itself():
    session = session_on("sort:2", n_layers=1, d_model=32, n_heads=2)
    run(session, ":train steps=5")
    result = run(session, ":gen 31=134")
    assert result.answer is None
    assert "holds more than a whole answer (sort's answers have 2 characters)" in plain(result)
    assert run(session, ":gen 31=").answer is not None
    assert run(session, ":gen 31=13").answer.right  # a whole answer typed in is graded, as before


def test_layer_is_refused_where_the_watched_view_reads_every_block():
    session = session_on()
    with pytest.raises(UserError, match="layer= picks the block watch=attn shows; watch=lens reads every block"):
        run(session, ":train steps=2 watch=lens layer=0")
    with pytest.raises(UserError, match="layer= says what watch= looks at; add watch=attn$"):  # the one that takes it
        run(session, ":train steps=2 layer=0")
    assert run(session, ":train steps=2 watch=attn layer=0").frames


def test_step_names_every_choice_that_gen_needs_to_pick_the_same():
    session = session_on()
    out = plain(run(session, ":step ab temperature=3 seed=11"))
    assert ":gen ab n=1 temperature=3 top_k=none top_p=none seed=11 picks the same" in out


def test_a_run_that_diverges_after_a_data_switch_says_the_switch_stays(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path
    run(session, ":train steps=2")
    with pytest.raises(UserError, match=r"where this training began \(the switch to sort:2 stays; the model before it "
                                        r"was kept as checkpoint kept-"):
        run(session, ":train data=sort:2 lr=1e6 steps=5")
    assert session.data_spec == "sort:2"


def test_one_shot_hints_name_what_works_from_the_shell(tmp_path):
    result = invoke(*CLI_TINY, "--checkpoint-dir", str(tmp_path), "train", "--steps", "2", "--watch", "attn")
    said = " ".join(result.stdout.split())
    assert result.exit_code == 0 and "the frames end with this command: in the REPL (minitf " in said
    assert f"--checkpoint-dir {tmp_path}" in said and "), :report and :plot show them" in said
    from minitf_repl.syntax import SHELL, cmd, speaking

    with speaking(SHELL):
        assert cmd("data", "shakespeare") == "--data shakespeare"
    line = assert_one_error_line(invoke("--data", "sort", "--set", "tokenizer=bpe:300", "config"))
    assert line.endswith("choose text data first, e.g. --data pydoc")


def test_the_report_writes_settings_as_config_does_and_a_flat_chart_sits_around_its_value(tmp_path):
    from rich.console import Console

    from minitf_repl.render.chart import Curve, chart

    session = session_on()
    run(session, ":train steps=2")
    run(session, f":report {tmp_path / 'r.html'}")
    page = (tmp_path / "r.html").read_text()
    assert "<td>causal</td><td>on</td>" in page and ">True<" not in page and ">None<" not in page
    console = Console(width=60, record=True)
    console.print(chart([Curve("lr", [1, 2, 3], [0.001] * 3)], 60, 6))
    text = console.export_text()
    assert "0.00105" in text and "0.00095" in text and "-0.49" not in text


def test_lrfind_does_not_suggest_a_lower_rate_after_saying_yours_is_too_low():
    session = session_on(n_layers=1, d_model=32, n_heads=2)
    run(session, ":set lr=1e-05")
    result = run(session, ":lrfind steps=30")
    out = plain(result)
    assert "well below where the loss falls fastest" in out
    assert "lr=3.3e-06" not in out and out.count(":compare lr=") == 1
    assert ":compare trains whole runs side by side" in out


def test_piped_lines_starting_with_a_hash_are_comments():
    from rich.console import Console

    from minitf_repl import repl

    session = session_on()
    out, err = Console(record=True, width=100), Console(record=True, width=100)
    code = repl.run_lines(["# train a little first\n", "  # and an indented comment\n", ":config\n"], session, out,
                          err)
    assert code == 0 and err.export_text() == ""
    assert not session.has_model  # no comment was taken for a prompt (which would have built and sampled a model)


def test_a_failed_check_fails_the_command_for_a_script():
    ok = invoke(*CLI_TINY, "checks", "batch", "init")
    assert ok.exit_code == 0, ok.output
    failed = invoke(*CLI_TINY, "--set", "causal=off", "checks", "causal")
    assert failed.exit_code == 1 and "FAIL causal" in failed.stdout
    doc = invoke(*CLI_TINY, "--set", "causal=off", "checks", "causal", "--json")
    assert doc.exit_code == 1 and json.loads(doc.stdout)["failed"] == ["causal"]
    assert doc.stderr.strip() == "error: 1 check failed: causal"


# --- a fourth sweep: what the last ones left ------------------------------------------------------------------
def test_train_save_over_an_existing_checkpoint_says_replaced(tmp_path):
    session = session_on()
    session.checkpoint_dir = tmp_path
    first = run(session, ":train steps=1 save=mine")
    assert first.saved == "mine" and not first.replaced and "saved checkpoint mine" in plain(first)
    again = run(session, ":train steps=1 save=mine")
    assert again.saved == "mine" and again.replaced and "replaced checkpoint mine" in plain(again)
    auto = run(session, ":train steps=1")  # an autosave moves the last one down the rotation: nothing replaced
    assert auto.saved == "autosave" and not auto.replaced and "saved checkpoint autosave" in plain(auto)


def test_an_evaluated_row_gives_the_speed_of_its_stretch_as_the_summary_does():
    session = session_on()
    result = run(session, ":train steps=6 batch_size=1 eval_every=100")  # one evaluation: the last step
    assert len(result.evals) == 1
    assert result.evals[0]["tokens_per_second"] == result.tokens_per_second  # the same sums, not one step's
    run(session, ":train steps=6 batch_size=1 eval_every=3")
    rows = session.trainer.history[-6:]
    assert [row["val_loss"] is not None for row in rows] == [False, False, True] * 2
    assert all(row["tokens_per_second"] > 0 for row in rows)


def test_compare_bolds_the_best_of_the_contenders_still_running_after_one_diverged():
    session = session_on(n_layers=1, d_model=32, n_heads=2)
    result = run(session, ":compare lr=0.01 lr=1e6 steps=6 eval_every=2")
    kept, blew = result.outcomes
    assert blew.diverged and len(kept.curve) == 3 and len(blew.curve) < 3
    from minitf_repl.render.live import CompareTable

    table = CompareTable([kept.label, blew.label], 1)
    for outcome in result.outcomes:
        for evaluation in outcome.curve:
            table.add(evaluation)
    table.stop(blew.label)
    drawn = table.table()
    kept_cells, blew_cells = drawn.columns[1]._cells, drawn.columns[2]._cells
    after = len(blew.curve)  # the rows after its last evaluation
    assert [c.style for c in kept_cells[after:]] == ["bold"] * (3 - after)
    assert [str(c) for c in blew_cells[after:]] == ["diverged"] + [""] * (2 - after)
    assert "diverged" in plain(result)
    # no step timed: no speed, null in --json (040a529), "-" in the table, not "0" (nor its GFLOP/s and MFU)
    assert blew.tokens_per_second is None and re.search(r"▲ lr=1e6\s+[\d,]+(\s+-)+\s+[\d.]+s", plain(result))


def test_the_lens_marks_the_rows_of_a_skipped_block_and_says_what_is_switched_off():
    session = session_on(n_layers=3)
    run(session, ":train steps=1")
    run(session, ":ablate block=1")
    lens = run(session, ":lens at=both")
    marked = {row.layer for row in lens.rows if row.skipped}
    assert marked == {"blocks.1.mid", "blocks.1"}
    assert lens.ablations == ["block 1"]
    out = plain(lens)
    assert "blocks.1 (skipped)" in out and "switched off now: block 1" in out
    run(session, ":ablate off")
    assert not any(row.skipped for row in run(session, ":lens").rows)


def test_compare_names_the_contender_whose_settings_are_refused():
    session = session_on(d_model=32)
    with pytest.raises(UserError, match=r"^contender n_heads=3: d_model \(32\) must be divisible by n_heads \(3\)"):
        run(session, ":compare n_heads=2 n_heads=3 steps=2")
    with pytest.raises(UserError, match="^contender max_seq_len=2: task sort:6 needs max_seq_len >= 12"):
        run(session, ":compare current max_seq_len=2 data=sort steps=2")
    with pytest.raises(UserError, match="^contender lr=-1: lr must be positive"):
        run(session, ":compare current lr=-1 steps=2")


def test_set_says_a_preset_matches_only_where_a_preset_field_changed():
    session = session_on()
    run(session, ":train steps=1")
    assert run(session, ":set n_layers=1").preset is None  # a size: the preset it matched is the same
    run(session, ":train steps=1")
    assert run(session, ":set n_experts=2").preset is None
    run(session, ":train steps=1")
    moved = run(session, ":set activation=gelu_tanh")  # GPT-2's one change from the seed
    assert moved.rebuilt and moved.preset == "gpt2" and "now matches the preset gpt2" in plain(moved)


def test_schedule_continue_refused_from_the_shell_names_the_shells_option():
    line = assert_one_error_line(invoke("train", "--steps", "1", "--schedule", "continue"))
    assert line.endswith("this one has not: minitf train --schedule new starts a run")
