"""What a sweep of a new user's first hour found wrong (README's set-up and first session, :help, :set,
:gen, typos of commands and settings): each test failed before its fix.

`:set top_k=off` (the help says "none: off") was refused as "must be a whole number", never naming
`none`, the word that turns it off. `:train --help` (as `minitf train --help` works) said help is a command,
`:help`, not the `:help train` that shows the options. `:set norm=RMSNorm` (optimizer=AdamW, activation=GELU,
as papers write them) was refused while command names and on/off are read in any case. `?` alone, which
ipython and ollama users type for help, was a prompt: 200 random characters from a new model. `:config lr`
pointed to `:help config` for options it does not have. `:train -steps=5` (one dash, as Go's flags) said
:train takes no text, `:set -lr=0.1` named an option '_lr=0.1' no one typed, and `:gen hi -temperature=0.5`
continued the option as text. `/help`, `/train` and `\\q`, as ollama, chat apps and psql write commands,
were prompts: random text from a new model. The first `:train`'s table never said what its losses are read
on, so step 100's train loss above its val loss read as a leak; and it ended without a word of what to do
next. `:help learning rate` (batch size, top k) said there is no setting 'learning'. `:train 100` said
:train takes no text, not that steps=100 is what takes a number. `:gen temperature 0.5` continued the text
"temperature 0.5", where `:set lr 0.1` says a setting and its value go as one word.
"""

import pytest

from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from test_cli import invoke
from test_commands import run
from test_render import plain, text_of, train_result
from test_repl import drive
from test_sweep_e import completions


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


# --- a choice written as papers write it ---------------------------------------------------------------------
def test_a_choice_is_read_in_any_case_as_command_names_and_on_off_are():
    session = Session()
    run(session, ":set norm=RMSNorm activation=GELU optimizer=AdamW")
    assert (session.model_config.norm, session.model_config.activation) == ("rmsnorm", "gelu")
    assert session.train_config.optimizer == "adamw"
    with pytest.raises(UserError, match="^norm must be one of layernorm, rmsnorm, none; got 'RMS'$"):
        run(session, ":set norm=RMS")


def test_a_choice_in_capitals_from_the_shell_too():
    result = invoke("--set", "optimizer=AdamW", "config", "--json")
    assert result.exit_code == 0, result.output
    assert '"optimizer": "adamw"' in result.stdout


# --- `?` alone -----------------------------------------------------------------------------------------------
def test_a_question_mark_alone_lists_the_commands_as_help_alone_does():
    code, out, err, session = drive("?\r")
    assert code == 0 and err == "", err
    assert ":train" in out and "Leave minitf." in out and "tokens in" not in out
    code, out, err, session = drive(":gen ? n=3 gen_seed=1\r")  # as text of :gen it is a prompt still
    assert "3 tokens in" in out


# --- text after a command that takes nothing -----------------------------------------------------------------
@pytest.mark.parametrize("line, alone", [(":config lr", ":config"), (":quit now", ":quit"),
                                         (":experts all", ":experts")])
def test_text_after_a_command_without_options_says_to_type_it_alone(line, alone):
    with pytest.raises(UserError) as caught:
        run(Session(), line)
    setting = "; lr is a setting: :set lr shows it" if line == ":config lr" else ""  # the word names a setting
    assert str(caught.value) == f"{alone} takes no text; got {line.split()[1]!r}{setting}; type {alone} alone"


# --- an option written with one dash -------------------------------------------------------------------------
@pytest.mark.parametrize("line, fix", [
    (":train -steps=5", ":train steps=5"), (":train -steps 5", ":train steps=5"), (":set -lr=0.1", ":set lr=0.1"),
    (":set lr=0.1 -d_model=64", ":set d_model=64"), (":gen hi -temperature=0.5", ":gen temperature=0.5"),
    (":gen -n=5", ":gen n=5")])
def test_an_option_with_one_dash_says_options_take_two_or_none(line, fix):
    with pytest.raises(UserError, match=f"^-\\w+(=[\\d.]+)? has one dash: an option takes two or none, {fix}$"):
        run(Session(), line)


def test_one_dash_stays_text_where_it_names_no_option_and_short_options_still_work():
    session = Session()
    assert run(session, ":gen -n 3 gen_seed=1").n_tokens == 3
    assert run(session, ":gen -x=5 n=2 gen_seed=1").prompt == "-x=5"  # no option x: a prompt


def test_an_unknown_option_is_named_as_typed():
    with pytest.raises(UserError, match="^unknown option 'foo-bar' for :set "):
        run(Session(), ":set foo-bar=1")


# --- a command typed with '/' or '\' --------------------------------------------------------------------------
@pytest.mark.parametrize("line, fix", [("/help", ":help"), ("/train steps=5", ":train steps=5"), ("\\q", ":q"),
                                       ("/?", ":?"), ("/Quit", ":quit")])
def test_a_command_typed_with_a_slash_says_commands_start_with_a_colon(line, fix):
    with pytest.raises(UserError) as caught:
        run(Session(), line)
    assert str(caught.value) == (f"commands start with ':', not '{line[0]}': {fix} (to continue the line as text: "
                                 f":gen {line})")


def test_a_slash_before_no_command_is_a_prompt():
    assert run(Session(), "/usr n").prompt == "/usr n"


def test_tab_completes_a_choice_typed_in_capitals_as_it_is_read():
    assert completions(":set norm=RM") == ["rmsnorm"]
    assert completions(":set optimizer=Ad") == ["adamw"]
    assert completions(":gen show=P") == ["probs"]


# --- the first :train's table --------------------------------------------------------------------------------
def test_the_loss_table_says_what_its_losses_are_read_on():
    # at step 100 of the first run the train loss (2.37) stands above the val loss (2.08): one batch, before
    # that step's update, against the mean of eight after it; the table says which is which
    out = plain(train_result())
    assert "train loss: one batch, before the step's update; val loss: eval_batches held-out batches, after it" in out
    assert max(map(len, text_of(train_result()).splitlines())) <= 100  # the legend on one line at 100 columns
    narrow = plain(train_result(), width=50)  # the narrow table's headers are train, val: the legend keeps the names
    assert "train loss: one batch, before the step's update; val loss: eval_batches held-out batches, after" in narrow


def test_a_models_first_run_ends_saying_what_to_try_next():
    out = text_of(train_result())
    assert "now type some text for the model to continue, or :gen TEXT n=80; :help lists the views inside it" in out
    assert "now type some text" not in plain(train_result(total_steps=40))  # a second run: said once a model
    assert "now type some text" not in plain(train_result(stopped=True, run_remaining=5))


# --- a setting's name written as words -----------------------------------------------------------------------
@pytest.mark.parametrize("words, key", [("learning rate", "lr"), ("batch size", "batch_size"),
                                        ("weight decay", "weight_decay"), ("top k", "top_k")])
def test_help_of_a_settings_name_written_as_words_shows_that_setting(words, key):
    assert run(Session(), f":help {words}").setting.name == key


# --- a value without its option's name -----------------------------------------------------------------------
@pytest.mark.parametrize("line, fix", [(":train 100", ":train steps=100"), (":plot lr", ":plot what=lr"),
                                       (":ngram 5", ":ngram n=5")])
def test_a_value_alone_after_a_command_without_text_names_the_option_it_fits(line, fix):
    with pytest.raises(UserError, match=f"; did you mean {fix}\\? "):
        run(Session(), line)


def test_a_word_that_fits_no_option_gets_no_guess():
    with pytest.raises(UserError) as caught:
        run(Session(), ":train hello")
    assert "did you mean" not in str(caught.value)


# --- an option and its value typed apart, as the whole text ---------------------------------------------------
@pytest.mark.parametrize("line, fix", [(":gen temperature 0.5", ":gen temperature=0.5"),
                                       (":gen n 50 temperature 0", ":gen n=50 temperature=0")])
def test_options_typed_apart_as_the_whole_prompt_say_they_go_as_one_word(line, fix):
    with pytest.raises(UserError) as caught:
        run(Session(), line)
    text = line.split(None, 1)[1]
    assert str(caught.value) == (f"an option and its value go as one word: {fix} (to continue '{text}' as text, quote "
                                 f"it: :gen \"{text}\")")


@pytest.mark.parametrize("line", [':gen "temperature 0.5" n=2', ":gen the n 50 n=2", ":gen temperature hot n=2",
                                  ":gen n=2 -- temperature 0.5"])
def test_a_prompt_that_only_holds_an_options_name_stays_a_prompt(line):
    assert run(Session(), line).n_tokens == 2
