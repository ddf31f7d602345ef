"""What a user's-eye sweep of the data (a user's own files, the corpus download, `:data` and `--data`) found: each
test failed before its fix.
"""

import pytest

from minitf_repl.core import data as core_data
from minitf_repl.core.data import load_data
from minitf_repl.core.errors import DataError
from test_commands import run, tiny_session
from test_render import plain


# --- line endings: a Windows file's \r is no character of its text ---------------------------------------------
@pytest.mark.parametrize("ending", [b"\r\n", b"\r"])
def test_a_file_with_crlf_or_cr_line_endings_reads_as_newlines(tmp_path, ending):
    path = tmp_path / "windows.txt"
    line = b"the quick brown fox jumps over the lazy dog"
    path.write_bytes((line + ending) * 20)
    data = load_data(str(path))
    assert "\r" not in data.tokenizer.itos  # it was a symbol the model learned to write: :gen showed "\r" on each line
    assert data.text == (line.decode() + "\n") * 20
    assert data.info().chars == 20 * (len(line) + 1) and data.info().vocab_size == len(set(line.decode() + "\n"))
