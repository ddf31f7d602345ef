"""Sweep bq, decoding: :gen past the window, :step's steps and rows and family, sampling's docs, seeds, stdin."""

import json
import os
import re
from pathlib import Path

import pytest
from test_cli import TINY, invoke
from test_commands import Recorder, run, tiny_session
from test_render import plain, text_of

from minitf_repl.commands import REGISTRY
from minitf_repl.dispatch import run_command
from minitf_repl.parsing import parse_line

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.fixture(scope="module")
def session():
    return tiny_session()  # max_seq_len=32, sort:4's 12 characters


def notices_of(session, line: str, recorder=None):
    recorder = recorder or Recorder()
    command, args = parse_line(line, REGISTRY)
    return run_command(session, command.name, args, recorder), recorder


# --- 1. :gen says when the text passed the window, and that the cache saved nothing there ----------------------
def test_gen_says_the_steps_past_the_window_where_the_cache_was_refilled(session):
    result = run(session, ":gen 12345678 n=80 temperature=0")  # 8 + 80 tokens through a window of 32
    assert result.n_tokens == 80 and result.max_seq_len == 32
    assert result.past_window == 55  # steps 25..79 had more than 32 tokens before them
    text = plain(result)
    assert "past max_seq_len=32 the model reads only the last 32 tokens: 55 of 80 steps refilled the KV cache" in text
    assert "cache=off costs the same there" in text
    inside = run(session, ":gen 12345678 n=10 temperature=0")  # 18 tokens: within the window, nothing to say
    assert inside.past_window == 0 and "past max_seq_len" not in plain(inside)


# --- 2. :step: more candidates (rows=), and several steps (n=), in text and --json --------------------------------
def test_step_rows_lists_more_candidates(session):
    result = run(session, ":step 12 seed=1 rows=12")
    assert len(result.rows) == 12  # every token of sort's vocabulary (10 before, with no way to ask for more)


def test_step_n_takes_successive_steps_as_gen_picks_them(session):
    result = run(session, ":step 12 seed=7 n=4 rows=3")
    assert len(result.then) == 3 and all(len(s.rows) in (3, 4) for s in result.then)
    picks = result.picked + "".join(s.picked for s in result.then)
    assert run(session, ":gen 12 n=4 seed=7 cache=off").text == picks  # :gen's own loop, the same seed
    text = plain(result)
    assert "2. after '12" in text and "picks the same tokens" in text and ":gen 12 n=4" in text


# --- 3. sampling documented: docs section, help of temperature, :help gen's links ----------------------------------
def test_sampling_has_a_docs_section_that_gen_and_step_link_to(session):
    page = (DOCS / "inside-views.md").read_text()
    assert "## Sampling the next token: `:step` and `:gen`" in page and "nucleus" in page.lower()
    for name in ("gen", "step"):
        assert REGISTRY[name].guide == "inside-views.md#sampling-the-next-token-step-and-gen"
    text = plain(run(session, ":help gen"))
    assert "docs/inside-views.md#sampling-the-next-token-step-and-gen" in text
    assert re.search(r"also about gen: :step, :kv", text)  # the two views of decoding, from :gen's help
    assert "sampling-the-next-token-step-and-gen" in (DOCS.parent / "README.md").read_text()


def test_temperature_help_says_what_it_does_to_the_logits(session):
    text = plain(run(session, ":help temperature"))
    assert "divided by it" in text and "below 1 sharpens" in text and "above 1 flattens" in text


# --- 4. :step listed under "generating" ----------------------------------------------------------------------
def test_step_is_listed_under_generating(session):
    families = {entry.name: entry.family for entry in run(session, ":help").entries}
    assert families["step"] == "generating" == families["gen"]


# --- 5. :step's pipeline names the softmax; a filter that is off reads off -------------------------------------
def test_step_names_the_softmax_and_shows_filters_off(session):
    text = text_of(run(session, ":step 12 seed=1"))
    assert "logits z -> / temperature 0.8 -> softmax -> pick" in text
    assert "kept" not in text and " off " in text  # top_k and top_p are none: no filter ran
    both = text_of(run(session, ":step 12 seed=1 top_k=5 top_p=0.9"))
    assert "/ temperature 0.8 -> top-k 5 -> softmax -> top-p 0.9 -> renormalise -> pick" in both


# --- 6. a setting the command does not read is not suggested with --set ---------------------------------------
def test_step_takes_n_and_kv_says_what_seed_is():
    assert parse_line(":step 12 n=3", REGISTRY)[1]["n"] == 3  # was "n is a setting ... --set n=3 step", a no-op
    with pytest.raises(Exception) as refused:
        REGISTRY["kv"].find_param("seed")
    assert "decodes greedily, so no seed decides its tokens" in str(refused.value)


# --- 7. a seed that decides nothing is neither drawn nor ignored silently --------------------------------------
def test_a_tiny_top_p_draws_no_seed(session):
    result, _ = notices_of(session, ":gen 12 n=5 top_p=1e-9")
    assert result.seed is None and not result.seed_drawn and "drawn seed" not in plain(result)


def test_a_seed_at_temperature_0_is_said_to_do_nothing(session):
    _, recorder = notices_of(session, ":gen 12 n=3 temperature=0 seed=3")
    assert any("the seed decides nothing" in n for n in recorder.notices), recorder.notices
    _, quiet = notices_of(session, ":gen 12 n=3 seed=3")
    assert not any("seed decides nothing" in n for n in quiet.notices)


# --- 8. show=probs: the legend names the temperature; a bar while the text is held back --------------------------
class Progress(Recorder):
    def __init__(self):
        super().__init__()
        self.progress = []

    def on_progress(self, what, done, total):
        self.progress.append((done, total))


def test_show_probs_legend_names_the_temperature_and_progress_is_shown(session):
    result, recorder = notices_of(session, ":gen 12 n=6 show=probs seed=1", Progress())
    assert "probability when picked (at temperature 0.8)" in plain(result)
    assert recorder.progress and recorder.progress[-1] == (6, 6)
    own = plain(run(session, ":gen 12 n=3 show=probs seed=1 temperature=1"))
    assert "at temperature 1, no filter: the model's own" in own


# --- 9. names agree: the reference's rows spell the options as :help does; cache's help names the window ----------
def test_commands_rows_spell_options_as_help_does(session):
    rows = (DOCS / "commands.md").read_text()
    assert "[show=text\\|probs] [--raw]` (`:generate`)" in rows and "raw=on]" not in rows
    assert "`:step [PROMPT] [temperature=X] [top_k=N] [top_p=X] [gen_seed=N] [n=N] [rows=N]`" in rows
    assert run(session, ":help step").detail.usage.startswith(
        ":step [PROMPT] [temperature=X] [top_k=N] [top_p=X] [gen_seed=N] [n=N] [rows=N]")
    assert "last max_seq_len tokens" in plain(run(session, ":help cache"))


# --- 10. gen --json counts the prompt's tokens that were cut ---------------------------------------------------
def test_gen_says_how_many_prompt_tokens_were_dropped(session):
    result = run(session, ":gen " + "1234" * 12 + " n=2 temperature=0")  # 48 characters, a window of 32
    assert result.dropped == 16


# --- 11. `minitf gen -` reads standard input; text left waiting there is said ----------------------------------
def test_gen_dash_reads_the_prompt_from_stdin():
    result = invoke(*TINY, "gen", "-", "-n", "2", "--temperature", "0", "--json", input="4321=\n")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["prompt"] == "4321="


def test_waiting_stdin_is_found_without_blocking(monkeypatch):
    from minitf_repl.commands import generate

    read, write = os.pipe()
    try:
        with os.fdopen(os.dup(read), "r") as stdin:
            monkeypatch.setattr("sys.stdin", stdin)
            assert not generate._stdin_waiting()  # an empty pipe never closed: no text, and no hang
            os.write(write, b"def main")
            assert generate._stdin_waiting()
    finally:
        os.close(read)
        os.close(write)


def test_help_gen_gives_the_settings_values_in_its_default_column():
    """`:help gen`'s default column was blank for n, temperature, top_k and top_p ("default: the n setting")."""
    from test_commands import run, tiny_session

    session = tiny_session()
    run(session, ":set temperature=0.6")
    result = run(session, ":help gen")
    assert result.setting_values["n"] == "200" and result.setting_values["temperature"] == "0.6", result.setting_values
    assert result.setting_values["top_k"] == "none"
    assert re.search(r"temperature= +float +0\.6 ", plain(result, width=100))
