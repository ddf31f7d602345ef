"""Sweep bq (nanoGPT): its module names found and glossed, its train.py names answered, warmup_iters, d_ff, init."""

import math
from pathlib import Path

import pytest

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.settings import SETTING_TOPICS, TOPIC_GLOSSES
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.model import INIT_STD
from minitf_repl.core.train import lr_at
from test_cli import invoke
from test_commands import Recorder, run, tiny_session
from test_render import plain

REPO = Path(__file__).resolve().parents[1]


def words(text: str) -> str:
    return " ".join(text.split())


# --- 1. nanoGPT's module names find what shows them, with what each means here ---------------------------------
@pytest.mark.parametrize("word, commands, settings", [
    ("c_attn", {"qkv", "attn"}, set()),
    ("c_proj", {"attn", "ffn"}, set()),
    ("c_fc", {"ffn"}, set()),
    ("mlp", {"ffn"}, set()),
    ("lm_head", {"lens", "embed"}, {"tie_embeddings"}),
    ("ln_1", {"ln"}, {"norm", "norm_placement"}),
    ("ln_2", {"ln"}, {"norm", "norm_placement"}),
    ("ln_f", {"ln"}, {"norm", "norm_placement"}),
    ("gelu", {"ffn"}, {"activation"}),
    ("init", {"checks"}, set()),
    ("mfu", {"params"}, set()),
    ("flops", {"params"}, set()),
])  # fmt: skip
def test_help_of_a_nanogpt_name_lists_what_shows_it_and_says_what_it_is_here(word, commands, settings):
    """`help c_attn` was "no command or setting named", `help lm_head` "did you mean set n_head?", `help ln_f` "did
    you mean ln?": each lists what declares it, under one line of what the name means in minitf's words."""
    result = run(tiny_session(), f":help {word}")
    assert result.topic == word and result.detail is None and result.setting is None
    assert commands <= {e.name for e in result.topical}
    assert settings == {h.name for h in result.topic_settings}
    text = words(plain(result, 200))
    assert text.startswith(f"{word}: what shows it") and f"{word}: {words(TOPIC_GLOSSES[word])}" in text
    assert all(f":{name}" in text for name in commands) and "did you mean" not in text


def test_the_glosses_are_of_declared_words_and_say_minitfs_names():
    declared = {t for c in REGISTRY.values() for t in c.topics} | {t for ws in SETTING_TOPICS.values() for t in ws}
    assert set(TOPIC_GLOSSES) <= declared  # a gloss no :help reaches says nothing
    assert "(minitf: token_embedding)" in TOPIC_GLOSSES["wte"]
    assert "q_proj, k_proj and v_proj" in TOPIC_GLOSSES["c_attn"]
    assert "out_proj" in TOPIC_GLOSSES["c_proj"] and "fc_out" in TOPIC_GLOSSES["c_proj"]
    assert f"std {INIT_STD}" in TOPIC_GLOSSES["init"] and "sqrt(2 n_layer)" in TOPIC_GLOSSES["init"]


def test_the_shells_help_of_a_nanogpt_name_glosses_it():
    done = invoke("help", "c_attn")
    assert done.exit_code == 0 and done.stderr == "", done.output
    out = words(done.stdout)
    assert out.startswith("c_attn: what shows it") and "q_proj, k_proj and v_proj" in out
    assert "minitf qkv" in out and "minitf attn" in out


# --- 2. nanoGPT's train.py and sample.py names say what does it here ---------------------------------------------
@pytest.mark.parametrize("pair, said", [
    ("dataset=shakespeare_char", ":data shakespeare"),
    ("out_dir=out", ":set checkpoint_dir=DIR"),
    ("init_from=gpt2", ":load hf:PATH"),
    ("init_from=resume", ":load NAME, then :train"),
    ("num_samples=3", "is :gen three times"),
    ("start=hello", ":gen TEXT"),
    ("always_save_checkpoint=False", "save_every"),
    ("eval_only=True", ":context"),
    ("eval_only=True", ":checks init"),
])  # fmt: skip
def test_nanogpts_names_of_what_is_no_setting_say_where_it_lives(pair, said):
    with pytest.raises(UserError) as refused:
        run(tiny_session(), f":set {pair}")
    message = str(refused.value)
    assert said in message and "did you mean" not in message, message


def test_the_shell_says_where_nanogpts_dataset_lives():
    done = invoke("--set", "dataset=shakespeare_char", "config")
    assert done.exit_code != 0 and "--data shakespeare" in words(done.output), done.output


def test_dtype_float16_says_why_it_is_left_out():
    with pytest.raises(UserError) as refused:
        run(tiny_session(), ":set dtype=float16")
    message = str(refused.value)
    assert message.startswith("dtype must be one of auto, float32, bfloat16; got 'float16': float16 is left out")
    assert "GradScaler" in message and "bfloat16 keeps float32's range" in message and "\n" not in message
    assert run(tiny_session(), ":set dtype=bf16").changed["dtype"][1] == "bfloat16"  # the rest as before


# --- 3. warmup_iters is no alias: it peaks a step later ------------------------------------------------------------
def nanogpt_lr(it: int, lr: float, warmup_iters: int, lr_decay_iters: int, min_lr: float) -> float:
    """nanoGPT's train.py get_lr, written out from its formula."""
    if it < warmup_iters:
        return lr * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def test_warmup_iters_is_no_alias_and_says_the_warmup_steps_that_match_it():
    assert "warmup_iters" not in TrainConfig.spec("warmup_steps").aliases
    with pytest.raises(UserError) as refused:
        run(tiny_session(), ":set warmup_iters=100")
    message = str(refused.value)
    assert "warmup_iters=W is warmup_steps=W+1" in message and ":set warmup_steps=101" in message
    # what it says: nanoGPT's ramp over W is warmup_steps=W+1's, step for step, up to its peak at step W
    W = 10
    config = TrainConfig(lr=1e-2, warmup_steps=W + 1, min_lr_ratio=0.1)
    for step in range(W + 1):
        assert lr_at(step, 200, config) == pytest.approx(nanogpt_lr(step, 1e-2, W, 200, 1e-3))
    assert lr_at(W - 1, 200, TrainConfig(lr=1e-2, warmup_steps=W)) == pytest.approx(1e-2)  # W itself: a step early
    assert nanogpt_lr(W - 1, 1e-2, W, 200, 1e-3) < 1e-2


# --- 4. d_ff's note and gelu's help --------------------------------------------------------------------------------
def test_d_ffs_note_names_gpt2s_rule_not_a_gpt2_of_that_width():
    recorder = Recorder()
    run(tiny_session(), ":set n_embd=64", recorder)
    said = " ".join(recorder.notices)
    assert "d_ff stays 64, 1 x d_model, where it is usually 4 x d_model = 256, as GPT-2 sizes it" in said, said
    assert "GPT-2's 256" not in said


def test_the_activations_help_says_gelu_is_the_exact_form():
    help_ = ModelConfig.spec("activation").help
    assert "gelu (the exact form, with the erf: nanoGPT's nn.GELU())" in help_
    assert "gelu_tanh (GPT-2's tanh approximation)" in help_


# --- 5. GPT-2's scaled residual projections, said where init is explained -------------------------------------------
def test_checks_init_says_gpt2_scales_its_residual_projections_and_why_minitf_does_not():
    said = words(plain(run(tiny_session(), ":checks init"), 200))
    assert "Every matrix starts at that one std, where GPT-2 and nanoGPT start the projections that write to the " \
           "stream (their c_proj: out_proj and fc_out here) at 0.02 / sqrt(2 n_layer)" in said, said
    assert "that trained no better (docs/speed.md)" in said
    assert f"{0.02 / math.sqrt(2 * 4):.2g}" == "0.0071"  # the figure said, at 4 layers


def test_the_lab_says_it_keeps_one_init_std_and_the_speed_page_measured_it():
    lab = words((REPO / "docs" / "variant-lab.md").read_text(encoding="utf-8"))
    assert "this lab keeps one std because that scaling measured no better" in lab
    speed = words((REPO / "docs" / "speed.md").read_text(encoding="utf-8"))
    assert "| the same started at GPT-2's 0.02 / sqrt(2 n_layers) | 1.857: the same as 0.02 everywhere |" in speed


def test_train_given_warmup_iters_says_the_warmup_steps_that_match_it():
    """`:train warmup_iters=4` answered "did you mean steps?" once warmup_iters stopped being an alias (s59)."""
    from minitf_repl.core.errors import UsageError
    from minitf_repl.dispatch import parse_line

    with pytest.raises(UsageError) as refused:
        parse_line(":train warmup_iters=4", REGISTRY)
    assert "warmup_iters=W is warmup_steps=W+1 here" in str(refused.value), str(refused.value)
