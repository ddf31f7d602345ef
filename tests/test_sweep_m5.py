"""What this session's own look at the items its sweeps left found: each test failed before its fix.

`:ls all` said "all needs a value: :ls all=on|off" where `--all` alone is on: an on/off option named alone is now on,
in the REPL (`:ls all`, `:params all`, `:ngram sample`) and in the shell (`minitf ls all`), for the commands that
take no text (a text command still reads the word as its text: `:shapes all` traces "all").
`:set lr=0` said "lr must be positive, got 0.0": the refusal now quotes the number as it was typed.
A script piped in (`minitf < lesson.txt`) that failed said "error: unknown command :bogus" without saying where:
each error now names the script's line, counted as an editor counts them (comments and blank lines too).
"""

import pytest

from minitf_repl.commands.base import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.parsing import parse_line

from test_cli import assert_one_error_line, invoke


@pytest.mark.parametrize("line, name, key", [(":ls all", "ls", "all"), (":params ALL", "params", "all"),
                                             (":ngram sample", "ngram", "sample")])
def test_an_on_off_option_named_alone_is_on(line, name, key):
    cmd, args = parse_line(line, REGISTRY)
    assert cmd.name == name and args[key] is True


def test_an_on_off_option_named_alone_twice_or_beside_its_value_is_refused_once():
    for line in (":ls all all", ":ls all=on all"):
        with pytest.raises(UserError, match="all is given twice; give it once"):
            parse_line(line, REGISTRY)
    with pytest.raises(UserError, match=r":ls takes no text; got 'junk'"):
        parse_line(":ls all junk", REGISTRY)  # the switch is read, the rest is still refused as text
    cmd, args = parse_line(":shapes all", REGISTRY)  # a command with a text reads the word as its text
    assert cmd.name == "shapes" and "all" not in {k for k, v in args.items() if v is True}


def test_the_shell_reads_an_on_off_option_named_alone_as_on(tmp_path):
    result = invoke("--checkpoint-dir", str(tmp_path), "ls", "all")
    assert result.exit_code == 0, result.output
    assert "no checkpoints" in result.output
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "ls", "all", "--all"))
    assert "all is given twice (--all and all); give it once" in line


@pytest.mark.parametrize("typed", ["0", "-1e-3", "-.5", "0.0"])
def test_a_refused_number_is_quoted_as_typed(typed):
    with pytest.raises(UserError) as e:
        parse_line(f":set lr={typed}", REGISTRY)
    assert str(e.value).endswith(f"lr must be positive, got {typed}"), str(e.value)


def test_a_piped_scripts_error_names_its_line():
    import io

    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.session import Session

    out, err = (Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True) for _ in range(2))
    lines = ["# a lesson", "", ":set lr=0", ":config", ":bogus"]
    assert repl.run_lines(lines, Session(), out, err) == 1
    assert err.file.getvalue().splitlines() == ["error: line 3: lr must be positive, got 0",
                                                "error: line 5: unknown command :bogus (:help lists commands)"]
    assert "lr" in out.file.getvalue()  # :config ran between them
