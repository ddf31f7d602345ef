"""What a sweep of a new user's first hour found wrong (README's set-up and first session, :help, :set,
:gen, typos of commands and settings): each test failed before its fix.

`:set top_k=off` (the help says "none: off") was refused as "must be a whole number", never naming
`none`, the word that turns it off. `:train --help` (as `minitf train --help` works) said help is a command,
`:help`, not the `:help train` that shows the options.
"""

import pytest

from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from test_commands import run


# --- a setting that takes none ------------------------------------------------------------------------------
@pytest.mark.parametrize("line, words", [(":set top_k=off", "a whole number or none"),
                                         (":set top_p=off", "a number or none"),
                                         (":gen top_k=all", "a whole number or none")])
def test_a_word_for_a_setting_that_takes_none_names_none(line, words):
    with pytest.raises(UserError, match=f"must be {words}, got"):
        run(Session(), line)


def test_a_setting_that_takes_no_none_does_not_offer_it():
    with pytest.raises(UserError, match="^steps must be a whole number, got 'off'$"):
        run(Session(), ":set steps=off")


# --- `--help` after a command ---------------------------------------------------------------------------------
@pytest.mark.parametrize("line, fix", [(":train --help", ":help train"), (":set --help", ":help set"),
                                       (":gen hello --help", ":help gen")])
def test_help_as_an_option_names_the_help_of_that_command(line, fix):
    with pytest.raises(UserError, match=f"^help is not an option of :\\w+ but a command: {fix}$"):
        run(Session(), line)
