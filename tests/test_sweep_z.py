"""What a user's-eye sweep of saving and loading (`:save`, `:load`, `:ls`, `hf:PATH`, `:parity`, `--load`) found: each
test failed before its fix.

`:parity hf:PATH` with a lab model of a longer window than the folder's GPT-2 position table (or a RoPE model against
a GPT-2 folder) fed transformers positions it has no row for: an IndexError traceback instead of one line.
"""

import pytest

from minitf_repl.core.errors import UserError
from test_commands import TEXT, run, tiny_session


@pytest.fixture
def fox(tmp_path):
    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    return str(path)


# --- :parity against a folder whose positions the lab's model does not share --------------------------------------
@pytest.mark.parametrize("change", ["max_seq_len=64", "pos_encoding=rope max_seq_len=64"])
def test_parity_with_a_window_past_the_folders_positions_is_one_line(fox, tmp_path, change):
    pytest.importorskip("transformers")
    s = tiny_session(fox)
    run(s, ":train steps=1")
    run(s, f":save hf:{tmp_path / 'hf'}")  # a GPT-2 folder of 32 positions
    run(s, f":set autosave=off {change}")  # the same shapes otherwise, a window of 64
    with pytest.raises(UserError, match="not the model in .*max_seq_len 64 here, 32 there|pos_encoding rope here"):
        run(s, f":parity hf:{tmp_path / 'hf'} prompt='{'the quick brown fox jumps over the lazy dog ' * 2}'")
