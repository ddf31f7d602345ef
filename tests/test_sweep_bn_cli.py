"""Sweep bn: malformed command lines from the shell (settings as text, --set's pairs, options and commands misspelt)."""

from test_cli import assert_one_error_line, invoke


def test_a_settings_key_in_a_prompt_is_refused_with_set_before_the_command():
    line = assert_one_error_line(invoke("gen", "lr=0.1", "hi"), code=2)
    assert "minitf --set lr=0.1 gen hi" in line and "minitf gen -- lr=0.1 hi" in line, line
    line = assert_one_error_line(invoke("gen", "n=3", "d_model=64"), code=2)
    assert "minitf --set d_model=64 gen n=3" in line, line
    kept = invoke("gen", "--n", "3", "x=1")  # no setting near x: text still
    assert kept.exit_code == 0 and kept.stdout.startswith("x=1"), kept.output


def test_set_pairs_joined_by_a_comma_are_given_back_as_a_whole_line():
    line = assert_one_error_line(invoke("--set", "lr=0.1,steps=5", "config"), code=2)
    assert line.endswith(": minitf --set lr=0.1 --set steps=5 config"), line
    line = assert_one_error_line(invoke("set", "lr=0.1,steps=5"), code=2)
    assert line.endswith(": minitf set lr=0.1 steps=5"), line


def test_a_setting_where_the_command_goes_is_said_to_be_one():
    line = assert_one_error_line(invoke("--set", "lr=0.1", "steps=5", "config"), code=2)
    assert "step'" not in line and line.endswith(": minitf --set lr=0.1 --set steps=5 config"), line
    line = assert_one_error_line(invoke("stepz=5", "config"), code=2)
    assert "did you mean the setting steps?" in line and line.endswith(": minitf --set steps=5 config"), line


def test_set_with_a_value_apart_is_given_back_as_a_whole_line():
    line = assert_one_error_line(invoke("--data", "sort", "set", "lr", "0.01"), code=2)
    assert line.endswith(": minitf --data sort set lr=0.01"), line
    line = assert_one_error_line(invoke("set", "lr=", "0.01"), code=2)
    assert line.endswith(": minitf set lr=0.01"), line


def test_an_option_misspelt_before_the_command_is_named():
    line = assert_one_error_line(invoke("--jsn", "config"), code=2)
    assert "did you mean --json?" in line and line.endswith("minitf config --json"), line
    line = assert_one_error_line(invoke("--JSON", "config"), code=2)
    assert line.endswith("minitf config --json"), line
    for short in ("-v", "-V"):
        assert assert_one_error_line(invoke(short), code=2).endswith("did you mean --version? minitf --version")
    assert assert_one_error_line(invoke("--dbug", "config"), code=2).endswith("minitf --debug config")


def test_version_refuses_words_after_it():
    line = assert_one_error_line(invoke("--version", "extra"), code=2)
    assert "'extra'" in line and line.endswith(": minitf --version"), line
    line = assert_one_error_line(invoke("train", "--version"), code=2)  # the line it gives is not refused in turn
    assert line.endswith(": minitf --version"), line
    assert invoke("--version").exit_code == 0


def test_a_command_in_upper_case_is_named_in_lower_case():
    line = assert_one_error_line(invoke("--data", "sort", "TRAIN", "steps=3"), code=2)
    assert line.endswith("commands are lower case: minitf --data sort train steps=3"), line


def test_a_missing_value_is_a_usage_error():
    assert "lr needs a value" in assert_one_error_line(invoke("set", "lr="), code=2)
    assert "lr needs a value" in assert_one_error_line(invoke("--set", "lr=", "config"), code=2)
    assert "steps needs a value" in assert_one_error_line(invoke("train", "steps="), code=2)
    assert "steps needs a value" in assert_one_error_line(invoke("train", "--steps", ""), code=2)
    assert "must be a whole number" in assert_one_error_line(invoke("train", "--steps", "abc"), code=1)  # a bad value


def test_a_word_near_a_setting_whose_value_that_setting_refuses_stays_text():
    kept = invoke("tok", "model=gpt", "--json")  # d_model takes no 'gpt': no line with --set d_model=gpt given
    assert kept.exit_code == 0 and '"text": "model=gpt"' in kept.stdout, kept.output


def test_a_switch_off_unless_given_shows_no_no_form_and_squeezes_no_name_in_help():
    """train --help into a pipe cut `--eval-every,--eval-interval` short once `--fresh/--no-fresh` added a column."""
    from test_cli import invoke

    shown = invoke("train", "--help").stdout
    assert "--eval-every,--eval-interval" in shown and "--no-fresh" not in shown and "--fresh" in shown
    assert invoke("ls", "--all", "off").exit_code == 0  # its value still reads, `off` leaving the switch out


def test_a_settings_key_with_a_value_it_takes_not_says_so():
    line = assert_one_error_line(invoke("gen", "norm=2", "hi"), code=2)  # was `minitf --set norm=2 gen hi`, refused
    assert "--set norm=2" not in line and "norm must be one of" in line, line


def test_a_near_miss_of_a_setting_the_command_takes_not_is_text():
    kept = invoke("tok", "step=3", "--json")  # tokenized "step=3" before; then refused as a typo of steps
    assert kept.exit_code == 0 and '"text": "step=3"' in kept.stdout, kept.output
    kept = invoke("gen", "--n", "3", "stepz=5")
    assert kept.exit_code == 0 and kept.stdout.startswith("stepz=5"), kept.output


def test_a_setting_misspelt_is_first_the_one_whose_name_ends_with_it():
    line = assert_one_error_line(invoke("heads=2", "config"), code=2)  # was "did you mean threads?"
    assert "did you mean the setting n_heads?" in line and line.endswith(": minitf --set n_heads=2 config"), line
