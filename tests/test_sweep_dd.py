"""What a user's-eye sweep of the settings (`:set`, `:config`, `--set`) found: each test failed before its fix.

`:set max_seq_len` and `:help max_seq_len` said "the model is rebuilt, weights reset" for a model whose positions
learn no table (rope), whose weights a new window keeps; so did `:set rope_base` without rope and `:set
experts_per_token` without experts. `:set seed=3 n_layers=2` rebuilt the model from the old seed's weights (the
training settings were taken after the rebuild), and `:set seed=3` alone, with a model built, said nothing of what the
help promises ("seed of the initial weights"): the weights stay those the old seed drew. `:set grad_clip=off` (the
help says "0: off") was refused as "must be a number", never naming 0, where top_k=off names none. `:set
tokenizer=Char` on a task was refused as another tokenizer. A one-shot `minitf set temperature=0.5` said to give it as
`minitf --set temperature=0.5 train`, where sampling settings do nothing. `minitf set vocab_size` said "now 50"
(ModelConfig's default) of pydoc's and sort's vocabularies alike, before the data was read, and `:config` showed
`vocab_size none` then. After a stopped run, `:set steps=50` then `:train` went on with the stopped run's last steps
without a word. `minitf --set preset config` pointed to `minitf set preset`, which refuses (so it did for any word).
With autosave off, a rebuild dropped a trained, unsaved model saying only "weights reset". `:set lr` called `:train
lr=` an option "for one command", though :train keeps the value. `:set dropout` said nothing of the weights where
`:set`'s summary says model settings reset them. `:set tokenizer=` asked for "tokenizer=...". `:set temperature=0
top_k=5`, `:set rope_base=500` without rope and `:set experts_per_token=1` without experts took values nothing reads,
silently. After a finished run, `:set lr=0.05` then `:train` trained at the last run's final rate without a word.
threads=0's help left out $MINITF_THREADS, which auto reads first; norm_gain's gave RMSNorm a bias. A rebuild dropped
`:quantize`'s int8 copy without a word.
"""

import pytest
import torch

from minitf_repl.commands.settings import setting_help
from minitf_repl.core.errors import UserError
from test_commands import Recorder, run, tiny_session
from test_render import plain


# --- `:set KEY` says "the model is rebuilt" only where a change of KEY rebuilds this model -------------------------
def test_set_key_says_the_weights_reset_only_where_a_change_of_it_rebuilds_this_model():
    s = tiny_session()
    run(s, ":train steps=1")
    assert setting_help(s, "max_seq_len").rebuilds  # a learned table has a row per position
    assert not setting_help(s, "rope_base").rebuilds  # nothing rotates without rope
    assert not setting_help(s, "experts_per_token").rebuilds  # nothing is routed without experts
    run(s, ":set pos_encoding=rope")
    run(s, ":train steps=1")
    shown = run(s, ":set max_seq_len")
    assert not shown.shown[0].rebuilds and "weights reset" not in plain(shown)
    assert not setting_help(s, "rope_base").rebuilds  # read by the forward pass: changed in place (49th session)
    model = s.model
    run(s, ":set max_seq_len=16")
    assert s.model is model  # what the help says: the weights were kept


def test_set_key_still_says_a_real_rebuild():
    s = tiny_session()
    for key in ("d_model", "n_heads", "n_experts", "n_kv_heads", "pos_encoding"):
        assert setting_help(s, key).rebuilds, key
    for key in ("dropout", "causal", "attention", "moe_aux_weight", "lr", "vocab_size"):
        assert not setting_help(s, key).rebuilds, key


# --- seed: a rebuild in the same :set draws the new seed's weights; a kept model says it is kept ------------------
def test_a_rebuild_in_the_same_set_draws_the_weights_of_the_new_seed():
    s = tiny_session()
    run(s, ":train steps=1")
    run(s, ":set seed=3 n_layers=2")
    fresh = tiny_session(seed=3)
    run(fresh, ":set n_layers=2")
    fresh.build()
    assert torch.equal(s.model.token_embedding.weight, fresh.model.token_embedding.weight)


def test_a_new_seed_with_a_model_trained_says_the_weights_are_kept():
    s = tiny_session()
    hooks = Recorder()
    run(s, ":set seed=3", hooks)  # no model yet: the seed draws its weights, nothing to say
    assert hooks.notices == []
    run(s, ":train steps=1")  # (an untrained model built by a view is drawn again: test_sweep_bi)
    weights = s.model.token_embedding.weight.clone()
    val_before = s.trainer.evaluate()[0]
    hooks = Recorder()
    run(s, ":set seed=4", hooks)
    assert torch.equal(s.model.token_embedding.weight, weights)
    assert s.trainer.evaluate()[0] != val_before  # the same model on other validation batches, as it says
    said = " ".join(hooks.notices)
    assert "weights are kept" in said and "batch order" in said and "the validation batches are others" in said


# --- grad_clip=off: the refusal names the value that is off, as top_k=off's names none ----------------------------
@pytest.mark.parametrize("word", ["off", "none", "OFF"])
def test_grad_clip_off_is_refused_naming_0_which_its_help_calls_off(word):
    with pytest.raises(UserError, match=f"^grad_clip must be a number, got '{word}'; grad_clip=0 is off$"):
        run(tiny_session(), f":set grad_clip={word}")
    with pytest.raises(UserError, match="^lr must be a number, got 'off'$"):  # no off to name
        run(tiny_session(), ":set lr=off")


# --- tokenizer=Char is the char tokenizer, in any case --------------------------------------------------------
def test_the_tokenizer_in_use_typed_in_another_case_changes_nothing():
    s = tiny_session()  # sort:4, a task: it cannot be read by another tokenizer, but char is the one in use
    result = run(s, ":set tokenizer=Char")
    assert result.changed == {} and not result.rebuilt
    assert run(s, ":set tokenizer=CHAR lr=0.002").changed == {"lr": (0.01, 0.002)}


# --- a one-shot `minitf set KEY=V` names the command that reads KEY ------------------------------------------------
def test_a_one_shot_set_of_a_generation_setting_shows_it_given_before_gen_not_train():
    from test_cli import invoke

    result = invoke("--data", "sort:4", "set", "temperature=0.5")
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())
    assert "minitf --data sort:4 --set temperature=0.5 gen" in said and "train" not in said
    said = " ".join(invoke("--data", "sort:4", "set", "lr=0.002").stdout.split())
    assert "minitf --data sort:4 --set lr=0.002 train" in said


# --- vocab_size before the data is read: not ModelConfig's default of 50, nor "none" -------------------------------
def test_vocab_size_before_the_data_is_read_is_not_the_default_50_nor_none():
    from minitf_repl.session import Session

    s = Session(data_spec="sort:4", device_name="cpu")  # the data is read on first use: nothing has read it yet
    shown = run(s, ":set vocab_size")
    assert shown.shown[0].now is None
    text = plain(shown)
    assert "now 50" not in text and "now unknown: the data is read on first use" in text
    config = plain(run(s, ":config"))
    assert "vocab_size none" not in config and "vocab_size - " in config
    s.data  # noqa: B018 - read now
    assert run(s, ":set vocab_size").shown[0].now == 12
    assert "vocab_size 12 " in plain(run(s, ":config"))


# --- steps= while a stopped run waits: :train goes on with that run, and :set says so ----------------------------
def test_a_new_steps_setting_while_a_stopped_run_waits_says_train_goes_on_with_that_run():
    s = tiny_session(steps=10)
    run(s, ":train", Recorder(stop_after=3))
    hooks = Recorder()
    run(s, ":set steps=50", hooks)
    said = " ".join(hooks.notices)
    assert ":train goes on with the stopped run: its last 7 steps of 10" in said and ":train steps=50" in said
    hooks = Recorder()
    run(s, ":train", hooks)
    assert hooks.starts == [(10, 3, True)]  # what it said: the stopped run's last 7
    hooks = Recorder()
    run(s, ":set steps=20", hooks)  # no run waits now
    assert hooks.notices == []


# --- preset alone: it shows nothing, so nothing says it does; it says which preset the model matches ------------------
def test_preset_alone_names_the_preset_the_model_matches_and_no_command_that_would_refuse():
    import pytest

    from test_cli import invoke

    s = tiny_session()
    run(s, ":set preset=llama")
    # shown as a setting is (46th session: `minitf set preset` exited 1 where `minitf set lr` showed lr)
    shown = run(s, ":set preset").shown
    assert [(h.name, h.now, h.kind) for h in shown] == [("preset", "llama", "seed|gpt2|llama|modern")]
    run(s, ":set activation=gelu")  # llama's is swiglu: no preset now
    assert run(s, ":set preset").shown[0].now is None and "now none" in plain(run(s, ":set preset"))
    assert invoke("set", "preset").exit_code == 0
    result = invoke("--set", "preset", "config")
    assert result.exit_code == 2 and "minitf set preset shows" not in result.stderr  # a missing value: 2
    assert "--set preset=VALUE (one of: seed, gpt2, llama, modern)" in result.stderr, result.stderr
    assert "minitf set lr shows its value now" in invoke("--set", "lr", "config").stderr  # a setting: it does
    assert "--set: unknown key 'lrr'; did you mean lr?" in invoke("--set", "lrr", "config").stderr


# --- autosave=off: a rebuild that drops an unsaved trained model says so, and the help says it does ---------------
def test_a_rebuild_with_autosave_off_says_the_unsaved_trained_model_is_gone():
    from minitf_repl.session import ShellConfig

    assert "rebuild" in ShellConfig.spec("autosave").help  # off: no kept-... checkpoint either
    s = tiny_session()
    run(s, ":set autosave=off")
    run(s, ":train steps=2")
    hooks = Recorder()
    result = run(s, ":set n_layers=2", hooks)
    assert result.rebuilt and result.kept is None
    said = " ".join(hooks.notices)
    assert "the trained model (step 2) was not kept" in said and "autosave is off" in said
    run(s, ":train steps=1")
    run(s, ":save mine")
    hooks = Recorder()
    run(s, ":set n_layers=1", hooks)  # saved as mine: nothing is lost, nothing to say
    assert hooks.notices == []


# --- :set lr names :train lr= as an option that keeps its value, not as one for that command alone -----------------
def test_set_key_does_not_call_a_train_option_that_keeps_its_value_one_for_that_command_alone():
    s = tiny_session()
    run(s, ":train steps=1 lr=0.002")
    assert s.train_config.lr == 0.002  # :train lr= stays, as :set lr does
    text = plain(run(s, ":set lr"))
    assert "for one command as its option: :train lr" not in text
    assert ":train lr=... sets it too, and it stays" in text
    text = plain(run(s, ":set seed"))  # :lrfind seed= is for that command alone
    assert "for one command as its option: :lrfind seed=..." in text and ":train seed=... sets it too" in text
    text = plain(run(s, ":set temperature"))
    assert "for one command as its option: :gen temperature=..., :step temperature=..." in text


# --- a model setting that rebuilds nothing says the weights are kept -----------------------------------------------
def test_a_model_setting_that_rebuilds_nothing_says_the_weights_are_kept():
    s = tiny_session()
    for key in ("dropout", "causal", "attention", "moe_aux_weight", "rope_base"):  # rope_base: no rope here
        assert plain(run(s, f":set {key}")).endswith(f":set {key}=...; the model keeps its weights"), key
    assert plain(run(s, ":set n_layers")).endswith("the model is rebuilt, weights reset (step 0)")
    assert plain(run(s, ":set lr")).endswith("sets it too, and it stays")  # not a model setting: nothing to say


# --- tokenizer= with no value: an example of a value, not "..." -----------------------------------------------
def test_an_empty_tokenizer_names_a_value_it_takes():
    with pytest.raises(UserError, match="^tokenizer needs a value, e.g. tokenizer=char or tokenizer=bpe:512$"):
        run(tiny_session(), ":set tokenizer=")
    with pytest.raises(UserError, match="^preset needs a value, e.g. preset=seed$"):
        run(tiny_session(), ":set preset=")


# --- top_k/top_p at temperature 0: greedy takes the likeliest token, and :set says they do nothing there -------------
def test_top_k_or_top_p_with_temperature_0_says_they_do_nothing_while_greedy():
    s = tiny_session()
    hooks = Recorder()
    run(s, ":set temperature=0 top_k=5", hooks)
    assert "temperature=0 is greedy" in " ".join(hooks.notices) and "top_k" in " ".join(hooks.notices)
    hooks = Recorder()
    run(s, ":set top_p=0.9", hooks)
    assert "top_k and top_p" in " ".join(hooks.notices)
    for line in (":set temperature=0.5", ":set lr=0.02", ":set top_k=none top_p=none temperature=0"):
        hooks = Recorder()
        run(s, line, hooks)
        assert hooks.notices == [], line


# --- a setting this model does not read says so: rope_base without rope, the experts' settings without experts ------
def test_a_setting_this_model_does_not_read_says_it_waits_for_the_setting_that_reads_it():
    s = tiny_session()
    hooks = Recorder()
    run(s, ":set rope_base=500 experts_per_token=1 moe_aux_weight=0.1", hooks)
    said = " ".join(hooks.notices)
    assert "rope_base does nothing while pos_encoding=learned; it applies with pos_encoding=rope" in said
    assert "experts_per_token and moe_aux_weight do nothing while n_experts=0" in said
    for line in (":set pos_encoding=rope rope_base=400", ":set n_experts=4 experts_per_token=2", ":set lr=0.02"):
        hooks = Recorder()
        run(s, line, hooks)
        assert hooks.notices == [], line



# --- threads=0's help names what auto reads first --------------------------------------------------------------
def test_threads_help_says_auto_reads_minitf_threads_first():
    from minitf_repl.core.threads import ThreadPolicy
    from minitf_repl.session import ShellConfig

    assert ThreadPolicy(0).decide().how == "MINITF_THREADS"  # conftest sets it: what auto takes first
    assert "$MINITF_THREADS" in ShellConfig.spec("threads").help


# --- lr, warm-up and min_lr_ratio after a finished run: :train goes on at the last rate, and :set says so ------------
def test_a_new_peak_or_schedule_after_a_finished_run_says_train_goes_on_at_the_last_rate():
    s = tiny_session(steps=4)
    hooks = Recorder()
    run(s, ":set lr=0.05", hooks)  # no model yet: the next :train is a new run with it
    assert hooks.notices == []
    run(s, ":set lr=0.01")
    run(s, ":train")  # 4 steps, all warm-up: ends at the peak, 0.01
    hooks = Recorder()
    run(s, ":set lr=0.05 warmup_steps=0", hooks)
    said = " ".join(hooks.notices)
    assert ":train goes on at a constant 0.01, the last run's final rate" in said and ":train schedule=new" in said
    assert "lr and warmup_steps shape a new run's" in said
    hooks = Recorder()
    run(s, ":train", hooks)
    assert {round(step.lr, 6) for step in hooks.steps} == {0.01}  # what it said
    hooks = Recorder()
    run(s, ":set lr=0.004", hooks)  # below the last rate: the constant rate is the new lr
    assert ":train goes on at a constant 0.004, the lr setting" in " ".join(hooks.notices)
    assert "lr shapes a new run's" in " ".join(hooks.notices)
    hooks = Recorder()
    run(s, ":set temperature=0.5 steps=5", hooks)  # nothing of the schedule
    assert hooks.notices == []


# --- norm_gain's help: the bias that comes with it is layernorm's; RMSNorm has none whatever bias says ---------------
def test_norm_gain_help_gives_the_bias_to_layernorm_alone():
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.core.model import MiniTransformerLM

    model = MiniTransformerLM(ModelConfig(vocab_size=12, d_model=32, n_heads=2, n_layers=1, d_ff=64, norm="rmsnorm",
                                          bias=True))
    assert not [name for name, _ in model.named_parameters() if "ln" in name and name.endswith("bias")]
    assert "layernorm" in ModelConfig.spec("norm_gain").help.partition("bias")[0].rpartition("(")[2]


# --- a rebuild drops :quantize's int8 copy, and says so, as it says of switched-off parts ------------------------
def test_a_rebuild_says_the_int8_copy_of_the_old_model_is_gone():
    s = tiny_session()
    run(s, ":train steps=2")
    run(s, ":quantize int8")
    hooks = Recorder()
    run(s, ":set dropout=0.1", hooks)  # the same weights: the copy stays
    assert s.sampling_copy and hooks.notices == []
    hooks = Recorder()
    run(s, ":set n_layers=2", hooks)
    assert not s.sampling_copy
    assert "the int8 copy (:quantize) was of the old model" in " ".join(hooks.notices)
