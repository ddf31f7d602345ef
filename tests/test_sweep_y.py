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
