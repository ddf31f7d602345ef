"""What a sweep of the docs against the code found (README.md and docs/*.md read as a user reads them, every
example and claim run): each test failed before its fix.

docs/commands.md promises that an error's fix, like every command a message names, is phrased for where you are
(`:set lr=0.005` in the REPL, `--set lr=0.005` from the shell). `minitf --set n_experts=2 ffn` was told that
":experts shows where they go", and `minitf --set residual=off attrib` to "use residual=on", neither of which the
shell takes.

It says every command works once from the shell, and that `minitf help COMMAND` and `minitf help KEY` are the
shell's `:help`: yet a command's other name (`minitf tf`, `minitf q`) was "No such command", `minitf help tf` and
`minitf help :train` suggested the very line they refused, `minitf help lr=` and `minitf help learning rate` found
no setting, `minitf help set` hid the keys' other spellings, and the shell's --help gave a switch's default as
"False". docs/json.md called a nullable list of nullable numbers "array of number or null or null" and quoted
`minitf.train/1` as the schema of a command at version 10. `:compare tokenizer=char tokenizer=bpe:N` marked the
lowest per-token loss of each band after saying such losses do not compare; `:report r.txt` in a folder suggested
a name in the current one; a save over a dangling link of the checkpoint's own name was told to fix the folder.
"""

import pytest

from minitf_repl.core.errors import UserError
from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session

TINY_SHELL = ("--data", "sort:4", "--set", "d_model=32", "--set", "n_heads=2", "--set", "n_layers=2",
              "--set", "d_ff=64", "--set", "max_seq_len=16")


# --- a fix phrased for the shell ---------------------------------------------------------------------------------
def test_ffn_on_a_mixture_of_experts_names_the_experts_view_in_the_shells_syntax():
    line = assert_one_error_line(invoke(*TINY_SHELL, "--set", "n_experts=2", "ffn"))
    assert ":experts" not in line and "minitf" in line and "experts" in line.split(";")[-1], line


def test_ffn_on_a_mixture_of_experts_names_the_experts_view_in_the_repl():
    s = tiny_session()
    run(s, ":set n_experts=2")
    with pytest.raises(UserError, match=r"; :experts shows"):
        run(s, ":ffn")


# the setting named as one that builds a new model: a line to paste reset a trained model, or --load refused it
@pytest.mark.parametrize("setting, fix", [
    ("residual=off", "(residual=on, the default, builds a new one"),
    ("norm_placement=post", "(norm_placement=pre, the default, builds a new one"),
])
def test_attrib_on_a_stream_that_is_no_sum_of_writes_gives_its_fix_in_the_shells_syntax(setting, fix):
    line = assert_one_error_line(invoke(*TINY_SHELL, "--set", setting, "attrib"))
    assert fix in line, line


# --- a command's other name from the shell -----------------------------------------------------------------------
def test_a_commands_other_name_works_from_the_shell_as_in_the_repl():
    """docs/commands.md lists `:score ...`, `:tf` and says every command works once from the shell too; `minitf tf`
    was "No such command", and `minitf help tf` answered "did you mean minitf tf?", the very line refused."""
    import json

    for alias, name in (("tf", "score"), ("errors", "mistakes"), ("layernorm", "ln"), ("sanity", "checks")):
        shown = invoke("help", alias)
        assert shown.exit_code == 0 and f"minitf {name} [OPTIONS]" in shown.stdout, (alias, shown.output)
    result = invoke(*TINY_SHELL, "tf", "1234=1234", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["schema"].startswith("minitf.score/")
    line = assert_one_error_line(invoke("quit"), code=2)  # a command of the REPL alone is still said to be one
    assert "interactive shell" in line


def test_the_repl_alone_commands_other_names_are_said_to_be_the_repls_from_the_shell():
    """`minitf quit` was said to be a command of the interactive shell, but `minitf q` and `minitf exit` (its other
    names) were "No such command", and `minitf help q` answered "did you mean minitf q?", the line just refused."""
    for word in ("q", "exit"):
        for line in (assert_one_error_line(invoke(word), code=2), assert_one_error_line(invoke("help", word), code=2)):
            assert f"{word} is a command of minitf's interactive shell" in line and f"then :{word})" in line, line
    line = assert_one_error_line(invoke("help", "quitt"), code=2)
    assert "minitf quit" not in line, line  # no shell line suggested that the shell refuses


def test_the_shells_help_of_set_names_each_keys_other_spellings():
    """README: `:help set` lists every key with its other spellings; commands.md: `minitf help COMMAND` is the shell's
    `:help COMMAND`. `minitf help set` listed the keys alone, so a shell user never learnt that block_size= or
    max_iters= is taken."""
    from minitf_repl.commands.base import REGISTRY

    shown = invoke("help", "set")
    assert shown.exit_code == 0, shown.output
    for param in REGISTRY["set"].options:
        for alias in param.aliases:
            assert alias in shown.stdout, alias


def test_the_shells_help_gives_a_switchs_default_as_on_or_off():
    """Every setting and switch reads on|off (`:help gen`: raw ... off), but `minitf gen --help` said "(default
    False)" of --raw, and `minitf params --help` of --all: Python's words, not the lab's."""
    from minitf_repl.commands.base import REGISTRY

    said = []
    for name in REGISTRY:
        if REGISTRY[name].repl_only:
            continue
        shown = invoke(name, "--help")
        assert shown.exit_code == 0, (name, shown.output)
        text = " ".join(shown.stdout.replace("│", " ").split())
        said += [f"{name}: {word}" for word in ("(default False)", "(default True)") if word in text]
    assert not said, said
    text = " ".join(invoke("gen", "--help").stdout.replace("│", " ").split())
    assert "(default off)" in text


def test_json_md_says_which_part_of_a_type_may_be_null():
    """docs/json.md gave `:ffn`'s units[].promote_by, a list of numbers that is null after post-norm, as "array of
    number or null or null": which of the two may be null (the list, or each number in it) was left to guess."""
    from minitf_repl import schema

    assert schema.describe(list[float] | None) is not None
    assert schema._type_text(schema.describe(list[float] | None)) == "array of (number or null) or null"
    assert schema._type_text(schema.describe(list[int])) == "array of integer"
    assert " or null or null" not in schema.docs_page()


def test_json_md_shows_a_schema_name_that_a_script_would_read_today():
    """docs/json.md's opening example of the `schema` field was "minitf.train/1" while train's fields were at
    version 10: a script written from it would refuse every document train prints."""
    from minitf_repl import schema
    from minitf_repl.commands.base import REGISTRY

    intro = schema.docs_page().split("\n## ", 1)[0]
    assert f'`"{schema.schema_id(REGISTRY["train"])}"`' in intro


def test_a_report_name_without_html_is_told_the_same_place_with_html(tmp_path):
    """`:report /tmp/runs/r.txt` was told "give a name ending in .html, e.g. r.html": the folder it asked for was
    dropped, so the line it suggested wrote the page into the current folder instead."""
    s = tiny_session()
    with pytest.raises(UserError, match=f"e.g. {tmp_path / 'r.html'}$"):
        run(s, f":report {tmp_path / 'r.txt'}")
    with pytest.raises(UserError, match=r"e\.g\. notes\.html$"):
        run(s, ":report notes")


def test_a_checkpoint_name_that_is_a_link_to_nowhere_is_told_to_take_another_name(checkpoint_dir):
    """checkpoints-and-safety.md: a symbolic link to nowhere is refused before training. Where the link was the
    checkpoint's own name (`save=old` over `DIR/old -> /gone`), the fix offered was "create that folder or start
    minitf with another checkpoint directory", as if the folder itself were the link: the name is what to change."""
    from minitf_repl.core.checkpoint import check_save_target

    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    (checkpoint_dir / "old").symlink_to(checkpoint_dir.parent / "gone")
    with pytest.raises(UserError, match="which does not exist; remove it or choose another name$"):
        check_save_target(checkpoint_dir, "old")
    linked = checkpoint_dir.parent / "elsewhere"
    linked.symlink_to(checkpoint_dir.parent / "gone-too")  # the folder itself a link to nowhere: as before
    with pytest.raises(UserError, match="create that folder or start minitf with another checkpoint directory"):
        check_save_target(linked, "run1")


def test_compare_marks_no_lowest_band_between_tokenizers_whose_losses_do_not_compare(sentence_session):
    """`:compare tokenizer=char tokenizer=bpe:300` ends by saying the BPE is better by bits per character and that
    losses per token of different tokenizers do not compare, yet its table of the loss by position marked the
    character model's per-token loss "* the lowest" in every band: the very comparison it had just ruled out."""
    from test_render import text_of

    s = sentence_session(batch_size=4, eval_batches=2)
    result = run(s, ":compare tokenizer=char tokenizer=bpe:260 steps=4")
    out = text_of(result, 120)
    heading, table = out.split("by position in the window", 1)[1].split("\n", 1)
    rows = [line for line in table.split("the contenders' tokenizers differ", 1)[0].splitlines()
            if line.lstrip().startswith(("●", "▲"))]
    assert "the lowest" not in heading and len(rows) == 2 and not any("*" in row for row in rows), out
    assert "losses per token of different tokenizers do not compare" in " ".join(out.split())
    same = run(s, ":compare n_layers=1 n_layers=2 steps=4")  # one tokenizer: the lowest of each band is marked
    assert "* the lowest" in text_of(same, 120)


def test_the_shells_help_of_a_setting_reads_it_as_help_does_in_the_repl():
    """commands.md: `minitf help KEY` of a setting is `minitf set KEY`, the shell's `:help KEY`. The REPL's `:help lr=`
    and `:help learning rate` show lr, but from the shell both were "no command or setting named" (and the first
    then asked "did you mean minitf set lr?", the setting it had been given)."""
    for words in (["lr="], ["learning", "rate"], ["learning_rate="]):
        shown = invoke("help", *words)
        assert shown.exit_code == 0 and shown.stdout.startswith("lr  training setting"), (words, shown.output)
    shown = invoke("help", "lr", "n")  # the words after a setting stay: two settings shown
    assert shown.exit_code == 0 and "peak learning rate" in shown.stdout and "tokens to generate" in shown.stdout


def test_the_shells_help_of_a_command_written_as_the_repl_writes_it():
    """`:help :train` shows train's options in the REPL; `minitf help :train` (a name copied from the docs) said "no
    command or setting named 'train'; did you mean minitf train?", denying the very command it then suggested."""
    for words in ([":train"], [":tf"], [":lr"]):
        shown = invoke("help", *words)
        assert shown.exit_code == 0 and "no command" not in shown.output, (words, shown.output)
    assert "minitf train [OPTIONS]" in invoke("help", ":train").stdout


def test_the_shells_help_of_set_and_a_key_shows_that_setting():
    """`:help set lr` shows the setting lr in the REPL; `minitf help set lr` printed set's whole --help instead."""
    shown = invoke("help", "set", "lr")
    assert shown.exit_code == 0 and shown.stdout.startswith("lr  training setting"), shown.output
    assert invoke("help", "set").stdout.lstrip().startswith("Usage: minitf set")  # alone: set's own help, as before
