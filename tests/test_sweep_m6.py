"""What this session's own look found: each test failed before its fix.

A module-scoped fixture is made before the per-test fixture that points a test's checkpoints, history and caches at a
temporary home, so a session such a fixture trained autosaved into the repository's own checkpoints/
(tests/test_report.py's left ./checkpoints/autosave after every run of the suite): the same dirs are now set once for
the whole run too, before any shared fixture.
A script line with a comment after its command (`:set lr=0.01  # faster`, `:train steps=2 # short`) was an error, for
`:set` a misleading one ("give settings ... or their names alone, not both"), while a line that starts with `#` is a
comment: a `#` word after a command now begins a comment, except where the command reads text (`:gen # a heading`)
and as the first word of a name or a path, which may start with it.
The REPL opened by `minitf` (the shell's entry, which speaks the shell's syntax around it) answered a `# comment` typed
at its prompt with "minitf gen #TEXT continues a text that starts with #": the note now names `:gen #TEXT`.
`:help ln` summed the view up as "centre, divide by the spread, gain and bias; every position comes out the same size",
untrue of an rmsnorm (no centring, no bias) and of a large eps (the view itself says both): the summary names both
norms and the condition.
"""

from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shared_session():
    from minitf_repl.session import Session

    return Session(data_spec="sort:4")


def test_a_session_made_by_a_shared_fixture_saves_outside_the_repository(shared_session):
    where = shared_session.checkpoint_dir.resolve()
    assert not where.is_relative_to(REPOSITORY), where
    assert not where.is_relative_to(Path.cwd().resolve()), where


@pytest.mark.parametrize("line, name, args", [
    (":set lr=0.01  # faster", "set", {"lr": 0.01}),
    (":train steps=2 # short", "train", {"steps": 2}),
    (":ls # every checkpoint", "ls", {}),
    (":help train # its options", "help", {"command": "train"}),
    (":save best # before the lr change", "save", {"name": "best"}),
    (":gen # a heading", "gen", {"prompt": "# a heading"}),  # prose: the # is text to continue
    (":tok #x y", "tok", {"text": "#x y"}),
    (":report #3.html", "report", {"path": "#3.html"}),  # a path may start with #
    (":set lr=0.01 '#x'", "set", {"lr": 0.01, "keys": "#x"}),  # quoted: a word to read, not a comment
])
def test_a_comment_after_a_command(line, name, args):
    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.parsing import parse_line

    cmd, got = parse_line(line, REGISTRY)
    assert (cmd.name, dict(got)) == (name, args)


def test_a_script_with_comments_after_its_commands_runs():
    import io

    from rich.console import Console

    from minitf_repl import repl
    from minitf_repl.session import Session

    out, err = (Console(file=io.StringIO(), width=100, color_system=None, soft_wrap=True) for _ in range(2))
    session = Session(data_spec="sort:4")
    lines = [":set lr=0.02 batch_size=4  # a faster rate", ":config # what is set"]
    assert repl.run_lines(lines, session, out, err) == 0, err.file.getvalue()
    assert session.train_config.lr == 0.02 and session.train_config.batch_size == 4


def test_the_note_on_a_comment_at_the_prompt_names_the_repls_command_when_the_shell_opened_it():
    from minitf_repl.syntax import SHELL, speaking
    from test_repl import drive

    with speaking(SHELL):  # as cli.py's callback holds it around the REPL it opens
        _, _, err, _ = drive("# my first lesson\n")
    assert ":gen #TEXT continues" in err and "minitf gen" not in err, err


def test_the_summary_of_ln_holds_for_both_norms():
    from minitf_repl.commands.base import REGISTRY

    summary = REGISTRY.find("ln").summary
    assert "rmsnorm" in summary and "root mean square" in summary and "eps is small" in summary, summary
