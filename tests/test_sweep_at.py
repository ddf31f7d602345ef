"""What the sweep of the items earlier sessions left (letter at) found: each test failed before its fix.

`:data random:1e400` (and `minitf --data random:1e400 ...`) said "the size after ':' must be a whole number", as if
1e400 were no number: a size past a float is refused as far too large, with the range the task takes and an example,
as `:data random:1e40` says its range.
"""

import pytest

from minitf_repl.core.data import load_data
from minitf_repl.core.errors import DataError

from test_cli import assert_one_error_line, invoke


# --- a task's size past a float: too large, with the range ---------------------------------------------------------
def test_a_task_size_past_a_float_is_far_too_large_with_the_range():
    with pytest.raises(DataError, match=r"^random:1e400 is far too large; random takes a vocabulary size from 2 to "
                                        r"62, e\.g\. random:50$"):
        load_data("random:1e400")
    with pytest.raises(DataError, match=r"^sort:-1e400 is far too small; sort takes a size from 1 to 30"):
        load_data("sort:-1e400")
    with pytest.raises(DataError, match=r"^add:9{37}\.\.\. is far too large; add takes a size from 1 to 30"):
        load_data("add:" + "9" * 5000)  # more digits than Python's int reads
    with pytest.raises(DataError, match="must be a whole number"):
        load_data("random:abc")  # no number at all still says so
    line = assert_one_error_line(invoke("--data", "random:1e400", "data"))
    assert line == "error: random:1e400 is far too large; random takes a vocabulary size from 2 to 62, e.g. random:50"
