"""What a user's-eye sweep of the variant lab and the interventions (`:compare`, `:ablate`, `:patch`, `:attrib`,
`:experts`) found: each test failed before its fix.
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
