r"""A shell's `\ ` (backslash-space) in an option's value: one word, and a path's value read unescaped."""

import os
from types import SimpleNamespace

import pytest

from minitf_repl import parsing
from minitf_repl.commands import REGISTRY
from minitf_repl.core.errors import UserError
from minitf_repl.parsing import parse_line, prepare_args


@pytest.fixture
def spaced_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my file.txt").write_text("hello world\n" * 50)
    return "my\\ file.txt"  # as a shell's Tab completion writes it


@pytest.mark.parametrize("line", [":compare data={}", ":train data={} steps=3", ":train --data {} steps=3"])
def test_a_path_options_escaped_space_is_one_word_read_unescaped(line, spaced_file):
    """Was {'data': 'my\\'} and the word `file.txt` refused as text, or taken as another option's."""
    _, args = parse_line(line.format(spaced_file), REGISTRY)
    assert args["data"] == "my file.txt"
    assert args.get("steps", 3) == 3


def test_the_shells_and_the_apis_path_value_is_read_unescaped_too(spaced_file):
    assert prepare_args(REGISTRY.get("compare"), {"data": spaced_file})["data"] == "my file.txt"
    assert prepare_args(REGISTRY.get("compare"), {"data": "no\\ such.txt"})["data"] == "no\\ such.txt"  # as typed


def test_a_setting_given_to_set_names_the_command_with_the_whole_path(spaced_file):
    """`:set data=my\\ file.txt` offered `:data my\\`, a line that names another file."""
    with pytest.raises(UserError) as caught:
        parse_line(f":set data={spaced_file}", REGISTRY)
    assert str(caught.value).endswith(f":data {spaced_file}")


def test_a_prompts_backslash_space_stays_as_typed():
    _, args = parse_line(":gen a\\ b", REGISTRY)
    assert args["prompt"] == "a\\ b"


@pytest.mark.parametrize("line, expected", [
    (":compare data=C:\\d\\ steps=3", {"data": "C:\\d\\", "steps": 3}),  # was data='C:\\d\\ steps=3'
    (":gen C:\\dir\\ temperature=0.5", {"prompt": "C:\\dir\\", "temperature": 0.5}),  # the temperature was prompt
    (":tok a\\ ", {"text": "a\\"}),  # was 'a\\ ', its trailing space kept
])
def test_a_backslash_space_joins_no_word_where_the_joined_word_names_nothing(line, expected, tmp_path, monkeypatch):
    """A word that ends in a backslash before the next was two words before the join, and stays two."""
    monkeypatch.chdir(tmp_path)
    assert dict(parse_line(line, REGISTRY)[1]) == expected


def test_on_windows_a_backslash_space_joins_nothing(spaced_file, monkeypatch):
    """Windows' backslashes are the path's (shell_unescaped changes nothing there): `C:\\d\\ steps=3` is two words."""
    monkeypatch.setattr(parsing, "os", SimpleNamespace(name="nt", path=os.path))  # parsing's alone: pytest's too broke
    _, args = parse_line(":compare data=C:\\d\\ steps=3", REGISTRY)
    assert args["data"] == "C:\\d\\" and args["steps"] == 3
    _, args = parse_line(f":compare data={spaced_file} steps=3", REGISTRY)
    assert args["data"] == "my\\" and args["steps"] == 3  # as typed, as before the join


@pytest.mark.parametrize("line, said", [
    (":train --threads 1 --steps 3",
     "threads is a setting, not an option of :train: :set threads=1, then :train --steps 3"),
    (":gen --d-model 64 hi", "d_model is a setting, not an option of :gen: :set d_model=64, then :gen hi"),
])
def test_a_setting_given_as_a_long_option_with_its_value_apart_gets_its_set_line(line, said):
    """`:train --threads 1` was "unknown option 'threads'", where `threads=1`, `--threads=1` and the shell's
    `minitf train --threads 1` were each given the line that sets it."""
    with pytest.raises(UserError) as caught:
        parse_line(line, REGISTRY)
    assert str(caught.value) == said
