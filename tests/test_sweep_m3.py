"""What this session's own sweep of the known, unfixed items found: each test failed before its fix.

`:load` after a `:train` whose autosave failed (a full disk) replaced the trained model without a word: the steps
trained were in no checkpoint and were gone. The model is now kept first, as before a rebuild (kept-<time>), and
the load says so; where that save fails too, the load refuses and nothing changes.
`help train` or `train steps=3` typed without the ':' was read as text to continue and refused for its characters
outside the vocabulary, with no word of the command the user plainly meant; the error now says how to run it.
`:lens mid`, `:gen probs`, `:ln ln_2` read the word as the text without a word of the option it is a choice of;
`:set gpt2` and `:set rope` were "unknown option" with a near spelling (rope_base) but not the key they are a value of.
A mixture of experts' train loss held moe_aux_weight x its load-balancing loss, so it read above a dense model's and
above its own val loss (plain cross-entropy) by that share; it is now the cross-entropy, aux its own column.
A first run stopped and continued to its end never said "now type some text for the model to continue": the hint
asked whether this command did every step the model has, which a continued run never does.
A rebuild of a model that is a checkpoint the user named (`minitf --load run1 set n_heads=1` in a script) wrote a
kept-<time> copy of it each time; that checkpoint keeps it (an autosave, which later runs rotate away, is copied).
`minitf --help` said of gen "a line without ':' is a prompt too", true of the REPL alone.
:heads called a repeat 0.1 nats under the first copy "copying from context has begun" however few tokens gave it:
the gap is now taken token by token (the same tokens, read twice) and called copying only past two standard errors.
A Llama loaded with a longer window than the lab holds (4,096 positions, cut to 2,048) was written back by `:save
hf:` as a model of 2,048 positions; the folder's own window is now written back (RoPE: the same weights).
`:plot what=lens_rank` of a lens whose true token stayed rank 1 labelled its axis 0.95, 1 and 1.05; a flat whole
number now gets a band of 1 each side.
A :data switch that rebuilt the model dropped :quantize's int8 copy without a word (a :set rebuild says so).
Tab after an option given twice (`minitf train --steps 3 --steps 4 --ev<Tab>`) printed "given twice" and a
traceback into the shell: completion parses what is typed so far, and the refusal now waits for the command itself.
Once :heads read its copying test within a task's rows, `:train watch=heads` still read it over the whole window,
so its frames were no longer the view's numbers; and a task whose rows hold no two copies (sort:1) was told to raise
max_seq_len, which changes nothing there.
`minitf he<Tab>` offered heads alone: `help`, which the shell runs as `minitf --help`, is no Typer command.
"""

import pytest

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.errors import UserError

from test_commands import Recorder, run, tiny_session
from test_render import plain
from test_repl import TINY as TINY_REPL, drive
from test_sweep_n import autosaves_fail


# --- :load over a model its autosave could not keep ------------------------------------------------------------
def test_load_keeps_a_model_whose_autosave_failed_before_replacing_it(checkpoint_dir, monkeypatch):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save first")
    autosaves_fail(monkeypatch)
    run(s, ":train steps=4")  # to step 7, its autosave fails: the model is in no checkpoint
    assert s.unsaved_step == 7
    result = run(s, ":load first")
    assert s.trainer.step == 3 and result.kept and result.kept.startswith("kept-")
    kept = {row.name: row.step for row in ckpt.list_checkpoints(checkpoint_dir)}
    assert kept[result.kept] == 7
    text = " ".join(plain(result).split())
    assert f"the model trained to step 7 was in no checkpoint: kept as {result.kept} (:load {result.kept} brings " \
           "it back)" in text, text


def test_load_refuses_when_the_unsaved_model_cannot_be_kept_either(checkpoint_dir, monkeypatch):
    import errno

    from minitf_repl.core.checkpoint import store

    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save first")
    write = store.write_file

    def full(path, data):  # every new checkpoint fails now, as on a full disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store, "write_file", full)
    run(s, ":train steps=2")
    with pytest.raises(UserError) as e:
        run(s, ":load first")
    message = str(e.value)
    assert s.trainer.step == 5, "the unsaved model stays"
    assert "step 5" in message and "nothing changed" in message and "autosave=off" in message, message
    monkeypatch.setattr(store, "write_file", write)


def test_load_with_autosave_off_replaces_the_model_as_the_user_chose(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save first")
    run(s, ":set autosave=off")
    run(s, ":train steps=2")
    recorder = Recorder()
    result = run(s, ":load first", recorder)
    assert s.trainer.step == 3 and result.kept is None
    assert "the trained model (step 5) was not kept: autosave is off, and no checkpoint holds it; :save NAME before " \
           "a load keeps one" in recorder.notices
    assert not [row for row in ckpt.list_checkpoints(checkpoint_dir) if row.name.startswith("kept-")]


# --- a command typed without its ':' --------------------------------------------------------------------------
# `quit now` is told `:quit`: :quit takes no text, and `:quit now` was refused (a fifty-third session)
@pytest.mark.parametrize("line, meant", [("help train", ":help train"), ("train steps=3", ":train steps=3"),
                                         ("  Quit now", ":quit")])
def test_a_command_typed_without_its_colon_that_cannot_be_text_says_how_to_run_it(line, meant):
    code, out, err, session = drive(f"{TINY_REPL}\r:data sort\r{line}\r")
    said = " ".join(err.split())
    assert "not in the vocabulary" in said, said
    assert f"a line without ':' is text for the model to continue; {meant} runs it as a command" in said, said


def test_text_that_starts_with_no_command_word_gets_no_such_hint():
    code, out, err, session = drive(f"{TINY_REPL}\r:data sort\rhello there\r")
    assert "not in the vocabulary" in err and "runs it as a command" not in err


# --- one word that is an option's choice -----------------------------------------------------------------------
@pytest.mark.parametrize("line, said", [
    (":lens mid", "'mid' is read as the prompt; for the option, type :lens at=mid"),
    (":ln ln_2", "'ln_2' is read as the prompt; for the option, type :ln which=ln_2"),
    (":gen probs n=2", "for the option, type :gen show=probs"),
])  # fmt: skip
def test_a_lone_word_that_is_an_options_choice_is_text_and_the_option_is_named(line, said):
    recorder = Recorder()
    try:
        run(tiny_session(), line, recorder)
    except UserError:
        pass  # sort's vocabulary has no letters: the notice comes first all the same
    assert said in " ".join(recorder.notices), recorder.notices


def test_a_word_given_with_its_option_or_in_a_sentence_has_no_notice():
    recorder = Recorder()
    for line in (":lens mid at=both", ":gen 1+2 n=2"):
        try:
            run(tiny_session(), line, recorder)
        except UserError:
            pass
    assert not [n for n in recorder.notices if "is read as the" in n], recorder.notices


@pytest.mark.parametrize("line, meant", [(":set gpt2", "preset=gpt2"), (":set rope", "pos_encoding=rope"),
                                         (":set MUON", "optimizer=muon")])
def test_a_settings_value_typed_without_its_key_names_the_key(line, meant):
    recorder = Recorder()
    with pytest.raises(UserError) as e:
        run(tiny_session(), line, recorder)
    assert f"did you mean {meant}?" in str(e.value), e.value
    assert not recorder.notices, recorder.notices  # the error says it: no notice before it says it again


# --- a mixture of experts' train loss ----------------------------------------------------------------------
def test_a_mixture_of_experts_train_loss_is_the_cross_entropy_that_val_loss_is(checkpoint_dir):
    """The step's loss is cross-entropy + moe_aux_weight x aux; the loss table's train loss is the first part
    alone, so that it compares with val loss and with a dense model's, and aux has its own column."""
    first = {}
    for weight in (0.0, 0.5):
        s = tiny_session()
        run(s, f":set n_experts=4 experts_per_token=2 moe_aux_weight={weight}")
        run(s, ":train steps=1")
        first[weight] = s.trainer.history[0]
    assert first[0.5]["aux_loss"] > 0.5
    # the same weights, the same batch: the same cross-entropy, whatever share of aux the step minimised
    assert abs(first[0.0]["train_loss"] - first[0.5]["train_loss"]) < 1e-5, first


# --- `minitf he<Tab>` ---------------------------------------------------------------------------------------
def test_shell_completion_offers_help_which_the_shell_takes_as_a_command():
    from test_completion import complete_bash

    assert complete_bash("minitf he") == ["heads", "help"]
    assert "help" in complete_bash("minitf ") and complete_bash("minitf tr") == ["train"]
    assert "help" not in complete_bash("minitf -")


# --- the first run, stopped and continued -------------------------------------------------------------------
def test_a_first_run_stopped_and_continued_to_its_end_says_what_to_try_next(checkpoint_dir):
    s = tiny_session()
    stopped = run(s, ":train steps=8", Recorder(stop_after=3))
    assert stopped.stopped and "now type a" not in plain(stopped)
    ended = run(s, ":train")  # the same first run, to its end
    assert ended.resumed and not ended.stopped
    assert "now type a question for the model to answer" in plain(ended)  # sort:4: a task's model answers
    assert "now type a" not in plain(run(s, ":train steps=3"))  # a second run: said once a model


# --- a rebuild of a model that is a named checkpoint -----------------------------------------------------------
def test_a_rebuild_of_a_model_that_is_a_named_checkpoint_writes_no_copy_of_it(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save mine")
    result = run(s, ":set n_heads=1")
    assert result.kept == "mine"
    assert not [row.name for row in ckpt.list_checkpoints(checkpoint_dir) if row.name.startswith("kept-")]
    assert "the trained model was kept as checkpoint mine: :load mine brings it back" in " ".join(plain(result).split())


def test_a_rebuild_of_a_model_only_an_autosave_holds_keeps_a_copy_no_rotation_removes(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")  # autosave: the next four runs' autosaves rotate it away
    assert run(s, ":set n_heads=1").kept.startswith("kept-")


def test_a_one_shot_rebuild_of_a_loaded_checkpoint_writes_no_copy(checkpoint_dir):
    from test_cli import invoke

    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":save mine")
    for _ in range(2):
        result = invoke("--checkpoint-dir", str(checkpoint_dir), "--load", "mine", "set", "n_heads=1")
        assert result.exit_code == 0, result.output
    assert not [row.name for row in ckpt.list_checkpoints(checkpoint_dir) if row.name.startswith("kept-")]


def test_the_shells_help_for_gen_says_where_a_line_is_a_prompt():
    from test_cli import invoke

    out = " ".join(invoke("--help").output.replace("│", " ").split())
    assert "Generate text from a prompt (in the REPL, a line without ':' is one too)." in out, out


# --- :heads calls a gap within the noise no copying ------------------------------------------------------------
def test_the_copy_gain_has_a_standard_error_taken_token_by_token():
    import math

    import torch

    from minitf_repl.core.config import ModelConfig
    from minitf_repl.core.heads import head_roles, repeated_tokens
    from minitf_repl.core.model import MiniTransformerLM

    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=20, max_seq_len=16, d_model=16, n_heads=2, n_layers=1,
                                          d_ff=32)).eval()
    tokens = repeated_tokens(20, 16, sequences=4, seed=0)
    roles = head_roles(model, tokens, repeat=8, sweep=False)
    with torch.no_grad():
        logits, _ = model(tokens[:, :-1])
    each = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    gain = each[:, :7] - each[:, 8:]  # token t of the first copy and the same token in the repeat
    assert roles.copy_gain_se == pytest.approx(float(gain.std()) / math.sqrt(28), rel=1e-4)


def test_a_repeat_lower_by_less_than_its_noise_is_not_called_copying():
    from minitf_repl.commands.why import heads_reading
    from minitf_repl.core.heads import ROLES, HeadRoles, HeadScores

    scores = {"previous": 0.1, "current": 0.1, "first": 0.1, "duplicate": 0.1, "induction": 0.03}
    roles = HeadRoles([[0, 1, 0, 1]], 2, [HeadScores(0, 0, scores, None, carries=0.09)], dict.fromkeys(ROLES, 0.05),
                      {}, [], 6.19, 6.07, 4.63)
    noisy = heads_reading(roles, 6.19, 6.07, se=0.09)
    assert noisy.startswith("no clear copying from context yet: the repeat costs 6.07 nats a token against 6.19 the "
                            "first time, a gap within the noise of these tokens (two standard errors: 0.18)"), noisy
    assert heads_reading(roles, 6.19, 6.07, se=0.02).startswith("copying from context has begun")
    assert heads_reading(roles, 6.19, 6.15, se=0.01).startswith("no copying from context yet")


# --- a Llama's own window, written back --------------------------------------------------------------------------
def test_a_llama_loaded_with_a_longer_window_than_the_lab_holds_is_saved_with_its_own(tmp_path, monkeypatch,
                                                                                     checkpoint_dir):
    """RoPE serves any length with the same weights, so the lab cuts a long window to what it holds (MAX_CONTEXT);
    a folder written back said the cut length, and transformers then took the model for a shorter one."""
    import json

    transformers = pytest.importorskip("transformers")
    import torch

    from minitf_repl.core.bpe import train_bpe
    from minitf_repl.core.hf import llama

    text = "the cat sat on the mat; the dog sat on the log.\n" * 30
    path = tmp_path / "long"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=270, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0))
    model.save_pretrained(path)
    train_bpe(text, 270).tokenizer.save(str(path / "tokenizer.json"))
    monkeypatch.setattr(llama, "MAX_CONTEXT", 32)  # a lab that holds 32 positions, a folder of 64

    s = tiny_session()
    loaded = run(s, f":load hf:{path}")
    assert loaded.context == 64 and s.model_config.max_seq_len == 32
    run(s, f":save hf:{tmp_path / 'out'}")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["max_position_embeddings"] == 64
    run(s, ":save kept_here")  # through a lab checkpoint and back: it still came from the folder
    run(s, ":load kept_here")
    run(s, f":save hf:{tmp_path / 'again'}")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["max_position_embeddings"] == 64
    run(s, ":set max_seq_len=16")  # RoPE: a shorter window keeps the weights; the folder's is still 64
    run(s, f":save hf:{tmp_path / 'short'}")
    assert json.loads((tmp_path / "short" / "config.json").read_text())["max_position_embeddings"] == 64


# --- a flat whole-number curve -------------------------------------------------------------------------------------
def test_a_flat_chart_of_whole_numbers_labels_whole_numbers():
    import io

    from rich.console import Console

    from minitf_repl.render.chart import Curve, chart

    def labels(drawn):
        console = Console(file=io.StringIO(), width=40, color_system=None)
        console.print(drawn)
        return [line.split("┤")[0].strip() for line in console.file.getvalue().splitlines() if "┤" in line]

    assert labels(chart([Curve("embed", [0, 10, 20], [1.0, 1.0, 1.0], "●", "")], 40, 5)) == ["2", "1", "0"]
    # a constant rate keeps its band of a tenth
    assert labels(chart([Curve("lr", [0, 10], [1e-3, 1e-3], "●", "")], 40, 5)) == ["0.00105", "0.00100", "0.00095"]


def test_a_data_switch_that_rebuilds_says_the_int8_copy_went_with_the_old_model(checkpoint_dir):
    s = tiny_session()
    run(s, ":train steps=3")
    run(s, ":quantize int8")
    recorder = Recorder()
    run(s, ":data pydoc", recorder)  # another vocabulary: a rebuild
    assert not s.sampling_copy
    gone = "the int8 copy (:quantize) was of the old model and went with it"
    assert any(n.startswith(gone) for n in recorder.notices), recorder.notices


def test_tab_completion_after_an_option_given_twice_offers_and_never_refuses():
    from test_completion import answer, complete_bash

    assert complete_bash("minitf --data sort --data add tr") == ["train"]
    assert "--eval-every" in complete_bash("minitf train --steps 3 --steps 4 --ev")
    words = "minitf train --steps 3 --steps 4 --ev"
    result = answer(_MINITF_COMPLETE="complete_bash", COMP_WORDS=words, COMP_CWORD="6")
    assert "Traceback" not in result.stderr and "given twice" not in result.stderr, result.stderr


# --- watch=heads reads the copying test where :heads does --------------------------------------------------------
def test_the_heads_frames_read_the_repeat_within_a_tasks_rows_as_heads_does(checkpoint_dir):
    s = tiny_session("sort:4")
    frames = run(s, ":train steps=2 watch=heads").frames
    view = run(s, ":heads")
    assert frames[-1].repeat == view.repeat < s.model_config.max_seq_len // 2
    assert frames[-1].first_copy == pytest.approx(view.first_copy)


def test_a_task_whose_rows_hold_no_two_copies_says_so_not_to_raise_max_seq_len(checkpoint_dir):
    s = tiny_session("sort:1")
    for line in (":heads", ":train steps=2 watch=heads"):
        with pytest.raises(UserError) as e:
            run(s, line)
        assert "within the rows the model trains on" in str(e.value) and "max_seq_len" not in str(e.value), e.value
