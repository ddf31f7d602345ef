"""What a user's-eye sweep of the variant lab and the interventions (`:compare`, `:ablate`, `:patch`, `:attrib`,
`:experts`) found: each test failed before its fix.

`:compare` on a task said a longer window "read 2x the tokens" (it counted batch x window, though a task's rows are
one question and its answer), named one of several contenders that read the most, let a contender's own seed, steps
or eval_every go unheard (it trained as `current` did), blamed `:set` for a contender's unknown key, and said nothing
of a contender that was an earlier one again (`tokenizer=char` on text read by characters). `:patch` named a head
`:ablate` had switched off as the one that brought the most back, and its heads table, like `:experts`' shares, was
cells of "…" at 40 columns. `:experts` said "even would be 12%" beside shares of 12.5%, and nothing of a router that
had not trained. A refused or interrupted `:ablate` changed which parts were off, `head = 0.1` was not read, and a
rebuild (`:set n_layers=2`) put every part back on without a word.
"""

import pytest
import torch

from minitf_repl.commands.lab import more_text
from test_commands import run, tiny_session
from test_render import plain


# --- :compare ------------------------------------------------------------------------------------------------
def test_compare_on_a_task_counts_the_tokens_its_rows_hold_not_the_window():
    s = tiny_session()  # sort:4: a row is its question and answer, 8 tokens, whatever the window
    result = run(s, ":compare max_seq_len=16 max_seq_len=32 steps=4")
    assert [o.tokens_per_step for o in result.outcomes] == [4 * 8, 4 * 8]
    assert more_text(result) is None  # both read the same text a step: no "read 2x the tokens"
    assert "2x the tokens" not in plain(result, 200)


@pytest.mark.parametrize("contender, fix", [
    ("seed=3", "seeds=3"), ("lr=0.02,steps=50", "steps=50"), ("lr=0.02,eval_every=1", "eval_every=1")])
def test_compare_refuses_a_contender_setting_the_comparison_overrides(contender, fix):
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    with pytest.raises(UserError) as e:  # it trained as `current` did, word for word, and said nothing
        run(s, f":compare current {contender} steps=2")
    message = str(e.value)
    assert "every contender" in message and fix in message and "\n" not in message


# --- :patch --------------------------------------------------------------------------------------------------
def test_patch_never_names_a_switched_off_head_as_the_one_that_brings_the_answer_back():
    from minitf_repl.commands.why import patch_reading

    s = tiny_session(steps=20)
    run(s, ":train")
    run(s, ":ablate head=0.1")  # its output is zeroed in both runs: its cell is a 0 by no merit of its own
    result = run(s, ":patch 3141= 9141=")
    assert result.off_heads == ["0.1"] and "head 0.1" not in result.reading
    text = plain(result)
    assert "off" in text.split("head 1")[1].split()[:5]  # its cell says it is off, not a fraction of 0.00
    # every other head took the answer further away (below 0): the 0 of the head switched off was "the most"
    stream, resid = ["embed", "blocks.0"], [[0.0, 0.0], [0.0, 1.0]]
    assert "the most: head 0.1, -0.30" in patch_reading([[0.0, -0.3]], stream, resid, 1.0, ["0.0"])
    assert patch_reading([[0.0, 0.0]], stream, resid, 1.0, ["0.0", "0.1"]).startswith(
        "every head is switched off (:ablate off puts them back), so no head can bring anything back")


def test_patch_counts_the_heads_of_a_skipped_block_as_off():
    s = tiny_session(steps=20)
    run(s, ":train")
    run(s, ":ablate block=0")  # (the prompts differ at the last position: with no block, nothing else counts)
    result = run(s, ":patch 3141= 31412")
    assert result.off_heads == ["0.0", "0.1"] and "head 0." not in result.reading


# --- :ablate -------------------------------------------------------------------------------------------------
def test_a_rebuild_says_the_parts_ablate_switched_off_are_on_again():
    from test_commands import Recorder

    s = tiny_session()
    run(s, ":train")
    run(s, ":ablate head=0.1 mask")
    hooks = Recorder()
    run(s, ":set n_layers=2", hooks)  # a new model: its parts are all on, and nothing said so
    assert s.ablations == []
    assert any("head 0.1, the causal mask" in line and ":ablate" in line for line in hooks.notices), hooks.notices
    hooks = Recorder()
    run(s, ":set n_layers=1", hooks)  # nothing was off: nothing to say
    assert not any(":ablate" in line for line in hooks.notices)


# --- :experts ------------------------------------------------------------------------------------------------
def experts_result(layers: int = 6, n: int = 8):
    from minitf_repl.commands.lab import ExpertsResult

    load = [[(e + k) % n / sum(range(n)) for e in range(n)] for k in range(layers)]
    tokens = [[round(v * 1000) for v in row] for row in load]
    return ExpertsResult(list(range(layers)), load, tokens, 1.01, 2)


def test_experts_at_40_columns_shows_every_share_not_a_grid_of_ellipses():
    from test_render import text_of

    result = experts_result()
    text = text_of(result, 40)
    assert "…" not in text and all(len(line) <= 40 for line in text.splitlines())
    for layer in range(6):
        assert f"block {layer}" in text
    assert f"{result.load[5][7]:.1%}" in text


def test_experts_says_an_even_share_to_the_shares_precision():
    text = plain(experts_result(layers=1, n=8))
    assert "even would be 12.5% each" in text  # it said 12%, beside shares of 12.5%
    assert "even would be 25% each" in plain(experts_result(layers=1, n=4))


def test_compare_names_itself_not_set_when_a_contender_key_is_unknown():
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    with pytest.raises(UserError) as e:
        run(s, ":compare current n_layers=2 by=bpc steps=2")
    message = str(e.value)  # it said: unknown option 'by' for :set (:help set lists its 47 keys)
    assert "for :set" not in message and "'by'" in message and ":compare" in message
    assert "steps" in message and ":help set" in message
    with pytest.raises(UserError) as e:
        run(s, ":compare current n_layayers=2 steps=2")
    assert "did you mean n_layers?" in str(e.value)


def test_ablate_reads_spaces_around_the_equals_sign():
    s = tiny_session()
    run(s, ":train")
    result = run(s, ":ablate head = 0.1 block= 0")  # it said: head takes LAYER.HEAD, e.g. head=0.1; got ''
    assert result.active == ["head 0.1", "block 0"]


def test_experts_on_an_untrained_model_says_its_router_has_learned_nothing():
    s = tiny_session()
    run(s, ":set n_experts=4")
    result = run(s, ":experts")
    assert result.untrained and "not trained yet" in plain(result)
    run(s, ":train")
    result = run(s, ":experts")
    assert not result.untrained and "not trained yet" not in plain(result)


def test_compare_names_every_contender_that_read_the_most_tokens():
    s = tiny_session()
    result = run(s, ":compare current batch_size=2 n_layers=2 steps=2")
    line = more_text(result)  # it named n_layers=2 alone, as if current had read less
    assert line.startswith("current and n_layers=2 read 2x the tokens of batch_size=2 in the same 2 steps"), line


def test_a_refused_ablate_switches_nothing_off():
    from minitf_repl.core.errors import UserError

    s = tiny_session()
    run(s, ":set pos_encoding=none")
    run(s, ":train")
    run(s, ":ablate head=0.0")
    with pytest.raises(UserError, match="no position information"):
        run(s, ":ablate head=0.1 positions")
    assert [str(a) for a in s.ablations] == ["head 0.0"]  # head 0.1 stayed off after the error


def test_ctrl_c_while_ablate_measures_keeps_the_parts_that_were_off(monkeypatch):
    s = tiny_session()
    run(s, ":train")
    run(s, ":ablate head=0.0")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(s.trainer, "evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt):  # it had put every part back on to measure the model without them
        run(s, ":ablate head=0.1")
    assert [str(a) for a in s.ablations] == ["head 0.0"]


def test_patch_at_40_columns_shows_every_heads_number_not_ellipses():
    from minitf_repl.commands.why import PatchResult
    from test_render import text_of

    heads = [[round(0.1 * h - 0.2, 2) for h in range(8)] for _ in range(4)]  # 8 heads: 61 columns as it was
    stream = ["embed", "blocks.0", "blocks.1", "blocks.2", "blocks.3"]
    result = PatchResult("3141=", "9141=", list("3141="), list("9141="), "1", "0", 1.0, 0.0, stream,
                         [[0.5] * 5 for _ in range(5)], heads, "reading")
    text = text_of(result, 40)
    assert "…" not in text and all(len(line) <= 40 for line in text.splitlines())
    assert "-0.20" in text and "0.50" in text


def test_compare_says_when_a_contender_is_an_earlier_one_again():
    from test_commands import Recorder

    s = tiny_session(data="pydoc")
    hooks = Recorder()
    run(s, ":compare current tokenizer=char steps=1", hooks)  # the data is read by characters already
    assert ("tokenizer=char is current again: the same settings, so the same model on the same batches, and one "
            "curve") in hooks.notices, hooks.notices
    hooks = Recorder()
    run(s, ":compare current n_layers=2 steps=1", hooks)
    assert not any("again" in line for line in hooks.notices)
    from minitf_repl.core.errors import UserError

    with pytest.raises(UserError, match="given twice"):  # typed alike: refused before it trains (test_sweep_as)
        run(s, ":compare current current steps=1")


def test_experts_says_how_much_of_the_load_balancing_loss_training_adds():
    s = tiny_session()
    run(s, ":set n_experts=4 moe_aux_weight=0")
    text = plain(run(s, ":experts"))
    assert "training adds it" not in text and "moe_aux_weight=0" in text  # it said "training adds it, weighted"
    run(s, ":set moe_aux_weight=0.05")
    assert "training adds 0.05 x it to the loss" in plain(run(s, ":experts"))
