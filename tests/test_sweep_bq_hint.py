"""A line of prose whose first word names a command gets no hint that would run a failing command (s59)."""
import io

import pytest
from rich.console import Console

from minitf_repl.dispatch import FrontDoor
from test_commands import tiny_session


def said_after(line: str) -> str:
    out = io.StringIO()
    door = FrontDoor(tiny_session(data="pydoc"), Console(file=out, width=200, color_system=None))
    door.run_line(line)
    return " ".join(out.getvalue().split())


@pytest.mark.parametrize("line", ["train of thought is", "help me write a poem", "save the day"])
def test_prose_that_starts_with_a_commands_name_is_not_told_to_run_as_that_command(line):
    # was "...; :train of thought is runs it as a command", a line :train refuses ("takes no text")
    assert "runs it as a command" not in said_after(line)


@pytest.mark.parametrize("line, meant", [("help train", ":help train"), ("train stpes=5", ":train stpes=5"),
                                         ("checks gradiant", ":checks gradiant"), ("ablate attn", ":ablate attn")])
def test_a_line_meant_as_a_command_still_says_how_to_run_it(line, meant):
    # a typo's line too (`checks gradiant`): its own error then says "did you mean :checks gradient?"
    assert f"{meant} runs it as a command" in said_after(line)
