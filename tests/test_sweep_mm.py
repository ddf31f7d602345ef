"""What a user's-eye sweep of the error messages and their fixes found: each test failed before its fix.

A fix a message suggests must work when typed as written. `target=` that was not one token was told "e.g. target=4
(target=␣ for a space)" on every data: on a text without a '4' that line failed again, and a task's digits have no
space. `:parity PATH` typed without hf: was shown hf:~/models/gpt2, not the user's own folder written as hf:PATH.
`:train prompt=12` without watch= was told to add any of the views, watch=context among them, which refuses prompt=;
and `:train layer=0` all of them, though only watch=attn takes layer=. `:context length=8` on a task was told the
length must pass max_seq_len, when no length works on a task at all. `:set lr bogus` was offered `:set lr=bogus`, and
`tokenizer=bpe:1000000` "at most bpe:65,536", both refused again when typed; `:patch` alone offered "the cat sat vs
the dog sat" on data without those letters; `:compare` with one contender offered `current n_layers=2` on a model of
2 layers; out of memory at batch_size=1 offered batch_size=1; a diverged AdamW run was offered Muon's rate;
`:set n_heads=3` offered head counts n_kv_heads or rope then refuse; `tokenizer=bpe:50` on a task was told N's range,
and the bpe:512 offered is refused there (no text); `:load Foxy` listed every name and guessed none.

A message must name the real problem, the same from the REPL and the shell. A checkpoint file that grew was called
truncated by :ls (and worded otherwise by :load); `:set max_seq_len=4` on a task said "the model has 4" of a model
that kept its window; `:heads` on a model whose text is gone refused for want of training text it does not read;
`:set tokenizer=` on a Hugging Face folder's tokenizer said the folder "is not available". From the shell, `-steps 3`
was Click's "No such option: -s" and `--set lr 0.1 train` "No such command '0.1'", where the REPL says what is wrong.
`:ablate positions` without positions and `:report` into a missing folder said the problem and no fix; and
`:gen temperature=0 top_k=3` said nothing of the top_k greedy sampling leaves unread, where `:set` does. A value over
its limit was shown as read (high=1,000,000,000.0; seed=1e30 as digits never typed), not as written.
"""

import re

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session

TINY = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=16)


def session_on(data="sort:4", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=1, batch_size=2, eval_batches=1),
                   data_spec=data, device_name="cpu")


def refusal(session, line: str) -> str:
    with pytest.raises(UserError) as e:
        run(session, line)
    return str(e.value)


# --- target=: the example is a token of this vocabulary ------------------------------------------------------
def test_a_target_of_two_tokens_is_shown_an_example_that_is_one_on_a_text_without_digits(tmp_path):
    path = tmp_path / "letters.txt"
    path.write_text("the cat sat on the mat and the dog ran. " * 40)
    session = session_on(str(path))
    message = refusal(session, ":attrib the target=ca")
    examples = re.findall(r"target=(\S+)", message.split("; ", 1)[1])
    assert examples and "target=4" not in message
    for example in examples:  # typed as the message writes it, each works
        assert run(session, f":attrib the target={example.rstrip(')')}").target is not None


def test_a_target_on_a_task_is_not_told_of_a_space_it_has_none_of():
    session = session_on("sort:4")
    message = refusal(session, ":attrib 12 target=12")
    assert "␣" not in message and "target=4" in message
    assert run(session, ":attrib 12 target=4").target == "4"


# --- :parity PATH without hf: --------------------------------------------------------------------------------
def test_parity_given_a_path_without_hf_shows_that_path_as_hf_path(tmp_path):
    session = tiny_session()
    message = refusal(session, f":parity {tmp_path}/gpt2")
    assert f":parity hf:{tmp_path}/gpt2" in message and "~/models" not in message


# --- :train prompt= or layer= without watch= -----------------------------------------------------------------
def test_train_with_prompt_but_no_watch_suggests_only_views_that_take_a_prompt():
    session = tiny_session()
    message = refusal(session, ":train steps=1 prompt=12")
    views = re.findall(r"watch=(\w+)", message.split("; ", 1)[1])
    assert views and "context" not in views
    for view in ("context",):  # the one left out refuses a prompt
        with pytest.raises(UserError, match="leave prompt= out"):
            run(session, f":train steps=1 prompt=12 watch={view}")


def test_train_with_layer_but_no_watch_suggests_the_view_that_takes_a_layer():
    session = tiny_session()
    message = refusal(session, ":train steps=1 layer=0")
    assert message.startswith("layer= says what watch= looks at")
    assert re.findall(r"watch=(\w+)", message.split("; ", 1)[1]) == ["attn"]
    assert run(session, ":train steps=1 layer=0 watch=attn").steps == 1


# --- :context length= on a task ------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [4, 40, 1000])
def test_context_length_on_a_task_says_a_task_has_no_longer_windows_whatever_the_length(length):
    session = session_on("sort:4")
    assert "sort makes windows of its own length" in refusal(session, f":context length={length}")


# --- a checkpoint's file that grew ---------------------------------------------------------------------------
@pytest.mark.parametrize("change, how", [(lambda b: b + b"xx", "added to or replaced"),
                                          (lambda b: b[:-2], "truncated")])
def test_a_data_file_of_another_size_is_said_the_same_by_ls_and_load_and_grown_is_not_truncated(checkpoint_dir,
                                                                                                change, how):
    session = tiny_session()
    run(session, ":train steps=1")
    run(session, ":save mine")
    model = next((checkpoint_dir / "mine").glob("model-*.safetensors"))
    model.write_bytes(change(model.read_bytes()))
    listed = next(row for row in run(session, ":ls").rows if row.name == "mine").error
    assert f"({how}); save the checkpoint again" in listed
    assert refusal(session, ":load mine") == listed


# --- a window a task does not fit, asked for --------------------------------------------------------------------
@pytest.mark.parametrize("data, line, needs", [("sort:4", ":set max_seq_len=4", "needs max_seq_len >= 8, not 4"),
                                                ("repeat", ":set max_seq_len=4", "not 4; raise max_seq_len")])
def test_a_window_too_short_for_the_task_is_not_said_to_be_the_models_own(data, line, needs):
    session = session_on(data)
    run(session, ":train steps=1")
    message = refusal(session, line)
    assert needs in message and "the model has" not in message
    assert session.model_config.max_seq_len == 16  # nothing changed: the model still has its 16


# --- a long option with one dash, from the shell -------------------------------------------------------------
@pytest.mark.parametrize("args, fixed", [
    (["--data", "sort:4", "train", "-steps=3"], "minitf --data sort:4 train --steps=3"),
    (["--data", "sort:4", "gen", "12", "-temperature", "0.5"], "minitf --data sort:4 gen 12 --temperature 0.5"),
    (["-data", "sort:4", "config"], "minitf --data sort:4 config"),
])
def test_a_long_option_with_one_dash_is_told_so_from_the_shell_as_in_the_repl(args, fixed):
    line = assert_one_error_line(invoke(*args), code=2)
    word = next(a for a in args if a.startswith("-") and not a.startswith("--")).split("=")[0]
    assert line == f"error: {word} has one dash: an option takes two, {fixed}"  # was: "No such option: -s"
    with pytest.raises(UserError, match="has one dash: an option takes two or none"):  # the REPL's own words
        run(session_on(), ":train -steps=3")


# --- :heads on a model whose data is a vocabulary alone ------------------------------------------------------
def test_heads_on_random_tokens_works_for_a_model_whose_text_is_gone(vocab_only):
    with pytest.raises(UserError, match="is not available"):  # training needs the text...
        run(vocab_only, ":train steps=1")
    result = run(vocab_only, ":heads")  # ...the copying test reads random tokens of the vocabulary (was: the same error)
    assert result.heads


def test_a_tokenizer_asked_of_a_folders_tokenizer_alone_is_not_told_the_folder_is_not_available(tmp_path):
    pytest.importorskip("transformers")
    session = session_on("sort:4", activation="gelu_tanh")
    run(session, ":train steps=1")
    run(session, f":save hf:{tmp_path}/hf")
    loaded = session_on("pydoc")
    run(loaded, f":load hf:{tmp_path}/hf")  # pydoc's text has characters sort's vocabulary lacks
    message = refusal(loaded, ":set tokenizer=bpe:300")
    assert "is not available" not in message  # was: "but hf:... is not available", of a folder that was just read
    assert f"the data is hf:{tmp_path}/hf's tokenizer alone, with no text; choose text data first" in message


# --- a diverged run's rate, for the optimizer it trained with --------------------------------------------------
def test_a_diverged_adamw_run_is_offered_adamws_rate_for_the_data_not_muons():
    from minitf_repl.core.errors import TrainingDiverged

    session = session_on("sort:4")
    run(session, ":set optimizer=adamw")  # lr follows AdamW's recipe on sort: 0.003 (Muon's 0.01 does not settle)
    with pytest.raises(TrainingDiverged) as e:
        run(session, ":train steps=4 lr=1e30")
    assert "(1e+30 diverged; 0.003 is the default of adamw on sort)" in str(e.value)  # was: "0.01 is the default"
    assert str(e.value).endswith(": :train lr=0.003")  # :train's own lr= diverged: its own option is the way on


# --- fixes that are lines to type ------------------------------------------------------------------------------
def test_a_setting_and_a_value_it_cannot_take_apart_are_not_offered_as_one_word_that_fails_again():
    session = session_on()
    message = refusal(session, ":set lr bogus")
    assert ":set lr=bogus" not in message  # was: "...go as one word: :set lr=bogus", refused again when typed
    assert message == "a setting and its value go as one word (:set lr=X), and lr must be a number, got 'bogus'"
    assert refusal(session, ":set lr 0.1") == "a setting and its value go as one word: :set lr=0.1"  # a value it takes


def test_the_largest_bpe_is_written_as_it_is_typed():
    session = session_on("pydoc")
    message = refusal(session, ":set tokenizer=bpe:1000000")
    bound = re.search(r"at most (bpe:\S+);", message).group(1)
    assert bound == "bpe:65536"  # was bpe:65,536, which tokenizer= refuses ("N must be a whole number")


@pytest.mark.parametrize("data", ["random:5", "letters"])
def test_patch_without_two_prompts_gives_an_example_the_data_reads(data, tmp_path):
    if data == "letters":
        path = tmp_path / "letters.txt"
        path.write_text("abcabd gfe " * 40)  # no 't', 'h' or 's': "the cat sat vs the dog sat" cannot be read
        data = str(path)
    session = session_on(data)
    message = refusal(session, ":patch")
    example = re.search(r"e\.g\. (:patch .*?) \(a prompt", message).group(1)
    assert "the cat sat" not in example
    assert run(session, example).clean  # the example, typed as written, runs


# --- out of memory with a batch of one ----------------------------------------------------------------------------
@pytest.mark.parametrize("batch, fix", [(4, {"batch_size": 2}), (1, {})])
def test_out_of_memory_offers_a_smaller_batch_only_where_there_is_one(monkeypatch, batch, fix):
    from minitf_repl.core.train import Trainer

    def no_memory(self, *args, **kwargs):
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    session = session_on()
    run(session, f":set batch_size={batch}")
    monkeypatch.setattr(Trainer, "run", no_memory)
    with pytest.raises(UserError) as e:
        run(session, ":train steps=2")
    assert e.value.fix == fix  # was {"batch_size": 1} at a batch of 1: ":set batch_size=1", "nothing changed"
    assert ("Lower batch_size" in str(e.value)) == bool(fix)


def test_ablating_positions_a_model_has_none_of_names_the_parts_that_can_be_and_changes_nothing():
    session = session_on(pos_encoding="none")
    message = refusal(session, ":ablate positions")
    assert message.startswith("this model has no position information to drop") and "; switch off another part" \
        in message  # was the problem alone, no fix
    assert run(session, ":ablate head=0.1").active == ["head 0.1"]  # the refusal switched nothing off


def test_report_into_a_folder_that_does_not_exist_says_how_to_go_on(tmp_path):
    session = tiny_session()
    run(session, ":train steps=1")
    message = refusal(session, f":report {tmp_path}/nowhere/r.html")
    assert message.endswith("does not exist; create it first, or give :report PATH a path in a folder that exists")
    (tmp_path / "nowhere").mkdir()  # the first fix, done: the same line now writes the page
    assert run(session, f":report {tmp_path}/nowhere/r.html")


@pytest.mark.parametrize("line, example", [
    (":compare", ":compare current n_layers=3"),  # was "current n_layers=2", the model itself twice
    (":compare n_layers=4", ":compare current n_layers=4"),  # the one contender given, against the current model
    (":compare n_layers=4 lr=0.02 vs", ":compare current vs n_layers=4 lr=0.02"),
])
def test_compare_with_one_contender_gives_an_example_of_two_that_differ(line, example):
    session = session_on(n_layers=2)
    message = refusal(session, line)
    assert f"e.g. {example} (or" in message
    result = run(session, example + " steps=1 eval_every=1")
    assert len(result.outcomes) == 2


# --- a filter greedy sampling leaves unread -------------------------------------------------------------------
def test_gen_says_top_k_does_nothing_when_greedy_as_set_does():
    from test_commands import Recorder

    session = session_on()
    recorder = Recorder()
    run(session, ":gen 1234= n=2 temperature=0 top_k=3", recorder)
    assert any("top_k does nothing until temperature > 0" in n for n in recorder.notices)  # was: not a word
    recorder = Recorder()
    run(session, ":gen 1234= n=2 top_k=3", recorder)  # sampled: top_k is read
    assert not any("greedy" in n for n in recorder.notices)
    recorder = Recorder()
    run(session, ":set temperature=0 top_p=0.5", recorder)
    assert any("top_p does nothing until temperature > 0" in n for n in recorder.notices)


def test_a_global_set_and_its_value_apart_are_told_so_not_no_such_command():
    line = assert_one_error_line(invoke("--data", "sort:4", "--set", "lr", "0.1", "config"), code=2)
    assert line == "error: a setting and its value go as one word: minitf --data sort:4 --set lr=0.1 config"  # was:
    # "No such command '0.1'"
    line = assert_one_error_line(invoke("--set", "lr", "bogus", "config"), code=2)
    assert line == "error: a setting and its value go as one word (--set lr=X), and lr must be a number, got 'bogus'"
    assert invoke("--data", "sort:4", "--set", "lr=0.1", "config").exit_code == 0  # the line given, as typed


# --- a value too large, shown as typed ---------------------------------------------------------------------------
@pytest.mark.parametrize("line, shown", [
    (":lrfind high=1e9", "high=1e+09 is too large"),  # was high=1,000,000,000.0
    (":gen 12 n=1 seed=1e30", "=1e+30 is too large"),  # was =10000000000000000198..., digits never typed
    (":train steps=99999999999999999999999", "steps=99,999,999,999,999,999,999,999 is too large"),
])
def test_a_value_over_its_limit_is_shown_as_the_user_wrote_it(line, shown):
    assert shown in refusal(session_on(), line)


# --- the head counts offered pass every check ---------------------------------------------------------------------
def test_the_head_counts_offered_fit_the_key_value_heads_and_rope():
    session = session_on(n_heads=2, n_kv_heads=2, pos_encoding="rope")
    message = refusal(session, ":set n_heads=3")
    offered = re.search(r"n_heads could be one of ([\d, ]+)$", message).group(1).split(", ")
    assert offered == ["2", "4", "8", "16"]  # was 1, 2, 4, 8, 16, 32: 1 is no multiple of n_kv_heads=2, 32 odd for rope
    for n in offered:  # each, typed as offered, is taken
        run(session, f":set n_heads={n}")
    session = session_on(d_model=32, n_heads=16, n_kv_heads=2, pos_encoding="rope")
    assert refusal(session, ":set d_model=30").endswith(
        "no n_heads fits it with n_kv_heads=2 and pos_encoding=rope: choose another d_model")


def test_a_bpe_asked_on_a_task_is_told_the_task_has_no_text_before_the_range_of_n():
    session = session_on("sort:4")
    message = refusal(session, ":set tokenizer=bpe:50")
    assert "reads text, but sort is a task" in message  # was "at least 257 tokens ... e.g. bpe:512", then refused
    assert "reads text, but sort is a task" in refusal(session, ":set tokenizer=bpe:512")  # ...with this
    assert "is not a tokenizer" in refusal(session, ":set tokenizer=bogus")
    assert "at least 257 tokens" in refusal(session_on("pydoc"), ":set tokenizer=bpe:50")  # on text, N's range
    # a :compare contender the same way
    assert "reads text, but sort is a task" in refusal(session, ":compare tokenizer=bpe:50 vs current steps=1")


# --- a checkpoint name one letter off, in a folder of many -----------------------------------------------------
def test_a_missing_checkpoint_name_guesses_the_one_meant_and_lists_a_few(checkpoint_dir):
    session = tiny_session()
    run(session, ":train steps=1")
    for i in range(14):
        run(session, f":save run{i:02d}")
    run(session, ":save foxy")
    message = refusal(session, ":load Foxy")
    assert "; did you mean foxy? (saved ones: " in message  # was the whole list alone
    assert message.endswith(" more)") and message.count(", ") < 14  # a folder of many stays one short line
    assert run(session, ":load foxy").name == "foxy"
    assert "did you mean" not in refusal(session, ":load zzz")
