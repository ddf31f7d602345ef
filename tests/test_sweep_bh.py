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
