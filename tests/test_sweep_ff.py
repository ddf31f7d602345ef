"""What a user's-eye sweep of scripts and machine-readable output (`minitf CMD --json`, exit statuses, pipes,
`--help`) found: each test failed before its fix.

`minitf ngram --help` gave a flag's default as Python's "(default True)", where every other place (:help,
:config) says on/off, and `minitf params --help` explained its KEY=VALUE words with nothing: "Options as the REPL
writes them." (its only option is on/off, which the example skipped).
"""

import pytest

from test_cli import invoke


def help_text(*args) -> str:
    """A command's --help on one wide line per option (Rich wraps at the terminal's width otherwise)."""
    import os

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "250"
    try:
        result = invoke(*args, "--help")
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    assert result.exit_code == 0, result.output
    return result.stdout


# --- --help ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command, said", [("ngram", "(default on)"), ("gen", "(default off)"),
                                           ("shapes", "(default off)"), ("embed", "(default off)")])
def test_a_flags_default_is_on_or_off_in_shell_help(command, said):
    text = help_text(command)
    assert said in text and "(default True)" not in text and "(default False)" not in text


def test_a_float_default_is_written_as_settings_are():
    assert "(default 1)" in help_text("lrfind") and "(default 1.0)" not in help_text("lrfind")


def test_the_key_value_words_of_a_command_with_only_a_flag_have_an_example():
    assert "Options as the REPL writes them: all=on is --all." in help_text("params")
