"""The help system's sweep (bn): :help of preset, the shell's help of set and train, Tab's spellings, :quantize, :data."""

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from minitf_repl import repl
from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session
from test_render import plain


def test_help_preset_shows_what_set_preset_shows():
    # was: "error: preset is an option of :set, not a setting", where `:set preset` showed it
    s = tiny_session()
    assert plain(run(s, ":help preset"), width=200) == plain(run(s, ":set preset"), width=200)
    assert "seed|gpt2|llama|modern; default seed" in plain(run(s, ":help preset"), width=200)
    # the shell's `help preset` is `set preset`, as `help lr` is `set lr` (it was refused, exit 2)
    assert invoke("help", "preset").stdout == invoke("set", "preset").stdout
    assert "preset  model setting" in invoke("set", "preset").stdout


def test_the_shells_help_of_set_says_a_setting_lasts_one_command():
    out = " ".join(invoke("set", "--help").stdout.replace("│", " ").split())
    assert "From the shell a change lasts one command: give it to that command, as minitf --set KEY=VALUE " \
           "COMMAND." in out, out


def test_train_help_is_true_in_both_syntaxes():
    shell = " ".join(invoke("train", "--help").stdout.replace("│", " ").split())
    repl_ = plain(run(tiny_session(), ":help train"), width=2000)
    for text, set_threads in ((shell, "minitf --set threads=N fixes it"), (repl_, ":set threads=N fixes it")):
        assert "changes it for the run going on" not in text  # a one-shot command has no run going on
        assert "lr= if given" not in text and "unless lr= is given" not in text  # the shell's flag is --lr
        assert "the lr option's if given" in text and "unless the lr option is given" in text
        assert set_threads in text  # was "threads=N", which :train refuses (threads is a setting)
    seed = plain(run(tiny_session(), ":help seed"), width=400)
    assert "the shell's threads=N" not in seed and "the threads setting at a number, not auto, fixes it" in seed


def complete(text: str) -> list[tuple[str, str]]:
    completer = repl.CommandCompleter()
    return [(c.text, c.display_text)
            for c in completer.get_completions(Document(text), CompleteEvent(completion_requested=True))]


def test_tab_offers_own_names_before_other_spellings_and_each_option_once():
    # was: `:set n_` Tab took d_model= (n_embd's) first; an option whose own name matches is not offered again under
    # another spelling (`:set n_la` listed n_layers= twice)
    for typed in (":set n_", ":set n"):
        offered = complete(typed)
        own = [text for text, display in offered if "->" not in display]
        assert offered[: len(own)] == [(text, text) for text in own], offered  # no other spelling among them
        assert own[0] == "n_heads=" and {"n_layers=", "n_kv_heads="} <= set(own)
        assert "n_embd= -> d_model=" in {display for _, display in offered[len(own):]}
        assert len({text for text, _ in offered}) == len(offered), offered  # each option once
    assert complete(":set block") == [("max_seq_len=", "block_size= -> max_seq_len=")]
    assert complete(":set n_la") == [("n_layers=", "n_layers=")]


def test_quantize_names_every_command_that_decodes_with_the_copy():
    said = plain(run(tiny_session(), ":quantize int8"), width=400)
    assert ":gen, :step and :kv now decode with the int8 copy" in said, said


def test_data_view_shows_random_and_repeat_with_their_size():
    s = tiny_session()
    for spec in ("random:10", "repeat:16"):
        shown = plain(run(s, f":data {spec}"), width=200)
        assert any(line.split()[:2] == ["name", spec] for line in shown.splitlines()), shown
