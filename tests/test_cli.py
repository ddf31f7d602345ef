"""cli.py: the `minitf` command through Typer's CliRunner (stdout and stderr apart)."""

import json

import pytest

from typer.testing import CliRunner

from minitf_repl import cli, dispatch
from minitf_repl.commands import REGISTRY

TINY = ["--set", "n_layers=1", "--set", "d_model=32 n_heads=2", "--set", "d_ff=64",
        "--set", "max_seq_len=32", "--set", "batch_size=4", "--data", "sort"]

runner = CliRunner()


def invoke(*args, input=None):
    return runner.invoke(cli.app, list(args), input=input)


def assert_one_error_line(result, code=1, prefix="error: "):
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_help_lists_the_subcommands():
    result = invoke("--help")
    assert result.exit_code == 0
    for name in ("train", "gen", "shapes", "device", "config", "data", "params", "set"):
        assert name in result.stdout
    assert "quit" not in result.stdout
    assert "--set" in result.stdout and "--debug" in result.stdout and "--device" in result.stdout


def test_subcommands_are_generated_from_the_registry():
    result = invoke("train", "--help")
    assert result.exit_code == 0
    for p in REGISTRY["train"].params:
        assert "--" + p.name.replace("_", "-") in result.stdout
    assert "--json" in result.stdout
    assert "--cache" in invoke("gen", "--help").stdout and "--all" in invoke("shapes", "--help").stdout


def test_train_json_is_one_document_on_stdout():
    result = invoke(*TINY, "train", "--steps", "3", "--eval-every", "3", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # exactly one JSON document, nothing else
    for key in ("steps", "train_loss", "val_loss", "tokens_per_second", "seconds", "accuracy"):
        assert key in doc
    assert doc["steps"] == 3 and doc["val_loss"] is not None and doc["data"] == "sort"
    assert "\x1b[" not in result.stderr


def test_train_text_and_underscore_options():
    result = invoke(*TINY, "train", "--steps=4", "--eval_every", "2")
    assert result.exit_code == 0, result.output
    assert "trained 4 steps" in result.stdout
    assert result.stdout.count("\n│") >= 2  # two evaluation rows in the loss table
    assert "\x1b[" not in result.stdout


def test_gen_text_on_stdout_stats_on_stderr():
    # A question without its '=': any '=' the model writes is followed by a 6-digit answer, so 7 tokens.
    result = invoke(*TINY, "gen", "--n", "7", "--no-cache", "--seed", "3", "3141")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("3141") and len(result.stdout.rstrip("\n")) == len("3141") + 7
    assert "7 tokens in" in result.stderr and "cache off" in result.stderr
    doc = json.loads(invoke(*TINY, "gen", "--n", "4", "--json").stdout)
    assert doc["n_tokens"] == 4 and doc["cache"] is True


def test_shapes_device_config_params_data_set():
    result = invoke(*TINY, "shapes", "--all")
    assert result.exit_code == 0 and "blocks.0 TransformerBlock" in result.stdout and "  attn.q_proj " in result.stdout
    result = invoke("device")
    assert result.exit_code == 0 and "cpu" in result.stdout
    doc = json.loads(invoke(*TINY, "config", "--json").stdout)
    assert doc["model"]["n_layers"] == 1 and doc["model"]["d_model"] == 32 and doc["data"] == "sort"
    result = invoke(*TINY, "params")
    assert result.exit_code == 0 and "total" in result.stdout and "counted once" in result.stdout
    result = invoke("--data", "reverse:4", "data")
    assert result.exit_code == 0 and "reverse 4 digits" in result.stdout
    result = invoke("set", "n_layers=2", "lr=0.02")
    assert result.exit_code == 0 and "n_layers: 4 -> 2" in result.stdout and "lr: 0.01 -> 0.02" in result.stdout
    # a one-shot session ends with the command: said, with where a setting goes to last (before it said nothing)
    assert ("checked, and gone when this command ends: a setting lasts one command from the shell, so give it before "
            "that command, e.g. minitf --set 'n_layers=2 lr=0.02' train") in " ".join(result.stdout.split())
    assert "gone when" not in invoke("set", "lr=0.02", "--json").stdout  # the document alone


def test_what_set_notes_reaches_stderr_from_the_command_line(monkeypatch):
    from minitf_repl.core import threads

    monkeypatch.setattr(threads, "available_cpus", lambda: 2)
    result = invoke(*TINY, "--set", "threads=3", "config", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["data"] == "sort"  # stdout stays one document
    assert "threads=3 is more than the 2 CPUs this process may use" in " ".join(result.stderr.split())
    result = invoke(*TINY, "--set", "threads=1", "config")
    assert result.exit_code == 0 and result.stderr == ""  # a plain --set says nothing of its own


def test_a_quiet_rank_keeps_what_set_notes_to_itself(monkeypatch, capsys):
    from minitf_repl.core import threads
    from minitf_repl.session import Session

    monkeypatch.setattr(threads, "available_cpus", lambda: 1)
    session = Session(data_spec="sort")  # not built: the thread count is only recorded, torch's stays
    cli.apply_settings(session, ["threads=2"], quiet=True)  # a non-zero rank under torchrun: errors only
    assert capsys.readouterr().err == "" and session.shell_config.threads == 2
    cli.apply_settings(session, ["threads=3"])
    assert "threads=3 is more than the 1 CPU" in " ".join(capsys.readouterr().err.split())


def test_user_errors_are_one_line_exit_1():
    line = assert_one_error_line(invoke(*TINY, "train", "--steps", "abc"))
    assert line == "error: steps must be a whole number, got 'abc'"
    line = assert_one_error_line(invoke(*TINY, "gen", "--n", "3", "hello"))
    assert "not in the vocabulary" in line
    line = assert_one_error_line(invoke("--set", "nope=1", "config"), code=2)  # an unknown key: 2
    assert line.startswith("error: --set: unknown key 'nope'")  # shell syntax from the shell
    assert_one_error_line(invoke("--data", "/no/such/file.txt", "data"))
    assert_one_error_line(invoke("set", "bogus=1"), code=2)
    assert_one_error_line(invoke("--device", "tpu", "device", "tpu"))


def test_text_of_several_words_is_read_as_the_repl_reads_it():
    # `minitf tok hello world` is `:tok hello world`: the words after the command are its text,
    # joined by spaces, and a quoted text is one of those words.
    apart, quoted = invoke("tok", "hello", "world"), invoke("tok", "hello world")
    assert apart.exit_code == 0, apart.output
    assert apart.stdout == quoted.stdout and "11 tokens" in apart.stdout
    result = invoke("gen", "--n", "3", "once", "upon", "--no-cache", "a")  # options may sit among the words
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("once upon a") and "3 tokens in" in result.stderr
    result = invoke(*TINY, "gen", "--n", "3")  # no words: the command's default text, as in the REPL
    assert result.exit_code == 0 and "3 tokens in" in result.stderr, result.output
    doc = json.loads(invoke(*TINY, "compare", "lr=1e-2", "lr=3e-3", "--steps", "2", "--json").stdout)
    assert [o["label"] for o in doc["outcomes"]] == ["lr=1e-2", "lr=3e-3"]
    # its own options as the REPL writes them, the contenders' pairs left in the text (before, steps=2 was a third)
    doc = json.loads(invoke(*TINY, "compare", "lr=1e-2", "steps=2", "lr=3e-3", "eval_interval=1", "--json").stdout)
    assert [o["label"] for o in doc["outcomes"]] == ["lr=1e-2", "lr=3e-3"] and doc["steps"] == 2
    assert "<text>" in invoke("gen", "--help").stdout and "list[str]" not in invoke("gen", "--help").stdout


def test_a_word_that_names_an_option_sets_it_as_in_the_repl():
    # `minitf qkv at=3 layer=1` is `:qkv at=3 layer=1`: before, the shell read "at=3 layer=1" as the text.
    doc = json.loads(invoke("qkv", "at=3", "hello", "layer=1", "--json").stdout)
    assert (doc["at"], doc["layer"], doc["tokens"]) == (3, 1, list("hello"))
    result = invoke("gen", "n=3", "cache=off", "once", "upon")  # a short form and an on/off option too
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("once upon") and "3 tokens in" in result.stderr and "cache off" in result.stderr
    kept = invoke("gen", "--n", "3", "x=1")  # not an option of :gen: text, as the shell took the quotes away
    assert kept.exit_code == 0 and kept.stdout.startswith("x=1"), kept.output
    spaced = json.loads(invoke("qkv", "at=1 head=0", "--json").stdout)  # a quoted text with a space: text
    assert spaced["tokens"][:4] == list("at=1") and spaced["head"] == 0
    assert "at is given twice" in assert_one_error_line(invoke("qkv", "at=3", "--at", "4"), code=2)
    assert "n must be a whole number, got 'abc'" in assert_one_error_line(invoke("gen", "n=abc"))


def test_a_command_without_text_takes_its_options_as_the_repl_writes_them():
    # `minitf train steps=2` is `:train steps=2`: before, Typer refused the word as an extra argument
    doc = json.loads(invoke(*TINY, "train", "steps=2", "lr=0.01", "--json").stdout)
    assert doc["steps"] == 2 and max(row["lr"] for row in doc["curve"]) == pytest.approx(0.01)
    doc = json.loads(invoke(*TINY, "ngram", "n=2", "sample=off", "--json").stdout)
    assert [row["n"] for row in doc["rows"]] == [0, 1, 2]
    line = assert_one_error_line(invoke(*TINY, "train", "steps=2", "hello"), code=2)
    assert line == ("error: minitf train takes no text, got 'hello'; its options go as KEY=VALUE or --KEY VALUE "
                    "(minitf train --help lists them)")
    assert "steps is given twice" in assert_one_error_line(invoke(*TINY, "train", "steps=2", "--steps", "3"), code=2)
    assert "steps must be a whole number, got 'x'" in assert_one_error_line(invoke(*TINY, "train", "steps=x"))
    assert "KEY=VALUE" in invoke("train", "--help").stdout


def test_help_as_a_word_is_help():
    # `minitf help` and `minitf help train`, as the REPL's :help and :help train; before: "No such command 'help'"
    whole = invoke("help").stdout
    assert whole == invoke("--help").stdout and "Usage: minitf [OPTIONS] COMMAND" in whole
    assert invoke("help", "context").stdout == invoke("context", "--help").stdout
    assert "--windows" in invoke("help", "context").stdout and "windows=N is --windows N" in " ".join(
        invoke("help", "context").stdout.replace("│", " ").split())
    line = assert_one_error_line(invoke("help", "nosuch"), code=2)
    # help explains settings too, so not "No such command": what `:help nosuch` says (test_sweep_aa)
    assert line == ("error: no command or setting named 'nosuch' (minitf --help lists the commands, minitf config the "
                    "settings)")


def test_a_setting_is_shown_by_set_with_its_name_alone_or_by_help():
    # `minitf help lr` said "No such command 'lr'" (`:help lr` works in the REPL), and `:checks`' advice to a shell
    # user read "minitf lr --help"; now `minitf set lr` and `minitf help lr` show it in the shell's own words
    result = invoke("set", "lr")
    assert result.exit_code == 0, result.output
    assert "peak learning rate" in result.stdout and "now 0.01" in result.stdout
    assert "--set lr=...; minitf train --lr ... sets it too for that command" in result.stdout  # nothing stays
    assert invoke("help", "lr").stdout == result.stdout and invoke("help", "learning_rate").exit_code == 0
    assert "now 0.02" in invoke("--set", "lr=0.02", "set", "lr").stdout  # the session's value, minitf's options applied
    assert "now 0.03" in invoke("--set=lr=0.03", "--debug", "help", "lr").stdout  # help after minitf's own options
    assert invoke("--data", "sort", "help", "train").stdout == invoke("train", "--help").stdout  # was: No such command
    doc = json.loads(invoke("set", "lr", "warmup_steps", "--json").stdout)
    assert [h["name"] for h in doc["shown"]] == ["lr", "warmup_steps"] and doc["changed"] == {}
    line = assert_one_error_line(invoke("set", "lr", "0.01"), code=2)
    assert line == "error: a setting and its value go as one word: minitf set lr=0.01"
    line = assert_one_error_line(invoke("set", "lr", "lr=0.1"))
    assert line.endswith("not both: minitf set lr shows, --set lr=0.1 changes")
    # `--set lr` (no value) changed nothing and went on to train; now it stops before the command
    line = assert_one_error_line(invoke(*TINY, "--set", "lr", "train", "--steps", "1"), code=2)  # a missing value
    assert line == ("error: --set: a setting needs a value, got 'lr' alone: --set lr=VALUE "
                    "(minitf set lr shows its value now)")


def test_an_option_of_minitf_after_the_command_says_where_it_goes():
    line = assert_one_error_line(invoke("train", "--set", "lr=0.02", "--steps", "3"), code=2)
    assert line == ("error: --set is an option of minitf itself, so it goes before the command: "
                    "minitf --set lr=0.02 train --steps 3")
    line = assert_one_error_line(invoke("--data", "sort", "tok", "12", "--set=n_layers=1"), code=2)
    assert line.endswith(": minitf --data sort --set=n_layers=1 tok 12")
    line = assert_one_error_line(invoke("config", "--debug"), code=2)  # a flag takes no value
    assert line.endswith("goes before the command: minitf --debug config")
    line = assert_one_error_line(invoke("gen", "--device", "cpu", "two words"), code=2)
    assert line.endswith(": minitf --device cpu gen 'two words'")  # quoted so that it can be pasted


def test_usage_errors_are_one_line_exit_2():
    line = assert_one_error_line(invoke("train", "--stpes", "3"), code=2)
    assert "--stpes" in line and "minitf train --help" in line
    line = assert_one_error_line(invoke("nosuchcommand"), code=2)
    assert line == "error: unknown command 'nosuchcommand'; minitf --help lists the commands"  # one sentence


def test_internal_error_one_line_or_traceback_with_debug(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(dispatch, "run_command", broken)
    line = assert_one_error_line(invoke("config"), prefix="internal error: ")
    assert line == "internal error: RuntimeError: boom (run with --debug for the traceback)"
    result = invoke("--debug", "config")
    assert result.exit_code == 1 and "Traceback (most recent call last)" in result.stderr


def test_no_subcommand_with_piped_stdin_runs_the_lines():
    result = invoke(*TINY, input=":train steps=3\n:gen n=5\n")
    assert result.exit_code == 0, result.output
    # the run's result on stdout; :gen's speed line, a notice, on stderr, as from the one-shot shell (`minitf gen`)
    assert "trained 3 steps" in result.stdout and "5 tokens in" in result.stderr and "5 tokens in" not in result.stdout
    assert "\x1b[" not in result.output
    result = invoke(input=":config\n:oops\n")
    assert result.exit_code == 1 and "error: line 2: unknown command :oops" in result.stderr


def test_the_ui_layer_does_not_import_torch_at_startup():
    """The prompt must not wait for `import torch` (seconds): no UI module may import it at load time."""
    import subprocess
    import sys

    code = ("import sys; import minitf_repl.cli, minitf_repl.repl, minitf_repl.render, minitf_repl.__main__; "
            "sys.exit('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
    result = subprocess.run([sys.executable, "-m", "minitf_repl", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "train" in result.stdout


def test_checkpoint_dir_option(tmp_path):
    folder = tmp_path / "mine"
    result = invoke(*TINY, "--checkpoint-dir", str(folder), "train", "--steps", "2")
    assert result.exit_code == 0, result.output
    assert "saved checkpoint autosave" in result.stdout
    result = invoke("--checkpoint-dir", str(folder), "ls")
    assert result.exit_code == 0 and "autosave" in result.stdout and "sort" in result.stdout
    doc = json.loads(invoke("--checkpoint-dir", str(folder), "ls", "--json").stdout)
    assert [row["name"] for row in doc["rows"]] == ["autosave"]
