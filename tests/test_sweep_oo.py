"""What a user's-eye sweep of minitf without a person at the keyboard (piped input, a script file, paste) and of
output sent elsewhere (a file, a pipe, stderr) found: each test failed before its fix.

A script saved with a UTF-8 byte order mark (Notepad, PowerShell) failed on its first line: the mark was read as a
character of the prompt.
"""

import io

from minitf_repl import repl
from minitf_repl.session import Session
from test_repl import consoles


# --- a script file's byte order mark ---------------------------------------------------------------------------
def test_a_scripts_utf8_byte_order_mark_is_not_part_of_its_first_line():
    lines = list(repl.stdin_lines(io.BytesIO(b"\xef\xbb\xbf:config\r\n# \xef\xbb\xbf stays here\n")))
    assert lines == [":config\r\n", "# \ufeff stays here\n"]  # only the file's first bytes are the mark
    out, err = consoles()
    assert repl.run_lines(repl.stdin_lines(io.BytesIO(b"\xef\xbb\xbf:config\n")), Session(), out, err) == 0
    assert err.file.getvalue() == "" and "d_model" in out.file.getvalue()
