"""The 50th session's own look: each test failed before its fix."""

from dataclasses import dataclass

from minitf_repl import schema


@dataclass
class _Commented:
    first: float  # a comment that goes on (to the line
    #               under it, lined up with its start)
    # the next field's own comment, above it
    second: int
    third: str  # one line (unbalanced on purpose: "("
    # a comment at the field's own indent, above the next field: no continuation
    fourth: bool


def test_a_fields_comment_continued_on_the_lines_under_it_is_its_whole_description():
    comments = schema.field_comments(_Commented)
    # was: "a comment that goes on (to the line", the shipped schemas cut mid-sentence (train_loss, skip, adamw_first)
    assert comments["first"] == "a comment that goes on (to the line under it, lined up with its start)"
    assert comments["second"] == "the next field's own comment, above it"
    assert comments["third"] == 'one line (unbalanced on purpose: "("'
    assert comments["fourth"] == "a comment at the field's own indent, above the next field: no continuation"
    from minitf_repl.commands import REGISTRY

    described = schema.command_schema(REGISTRY.find("train"))["properties"]["curve"]["items"]["properties"]
    assert described["train_loss"]["description"].endswith("load-balancing share left out: aux_loss)")


def test_scripts_joined_each_with_its_byte_order_mark_run_every_line_as_typed():
    import io

    from minitf_repl import repl

    lines = list(repl.stdin_lines(io.BytesIO(b"\xef\xbb\xbf:config\n\xef\xbb\xbf:tok hi\n")))  # `cat a.txt b.txt |`
    assert lines == [":config\n", ":tok hi\n"]  # was: "\ufeff:tok hi", a prompt the vocabulary could not read


def test_a_setting_given_no_value_from_the_shell_is_a_wrong_command_line():
    from test_cli import TINY, assert_one_error_line, invoke

    # was: status 1, where `train --steps` with no value gives 2, as the exit-status table says of a missing value
    line = assert_one_error_line(invoke(*TINY, "--set", "lr", "config"), code=2)
    assert line.startswith("error: --set: a setting needs a value, got 'lr' alone")
