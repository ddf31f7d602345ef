"""Sweep bq (texts): positions and embeddings found by name, why positions, :attrib's embed label, runs across CPUs."""

import math
import re
from pathlib import Path

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.help import no_such_help
from minitf_repl.commands.settings import SETTING_TOPICS
from minitf_repl.core.config import POS_ENCODINGS, ModelConfig, TrainConfig
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.syntax import SHELL, speaking
from test_commands import run, tiny_session
from test_render import plain

REPO = Path(__file__).resolve().parents[1]


def section(doc: str, heading: str) -> str:
    """`heading`'s section of a page of the repository, to the next heading of any level."""
    text = (REPO / doc).read_text(encoding="utf-8")
    start = text.index(heading)
    end = text.find("\n#", start + len(heading))
    return text[start:] if end < 0 else text[start:end]


def words(text: str) -> str:
    return " ".join(text.split())


# --- 1. positions and embeddings found by name, as commands and settings declare them ---------------------------
@pytest.mark.parametrize("word, commands, settings", [
    ("position", {"resid", "rope"}, {"pos_encoding"}),
    ("pos", {"resid", "rope"}, {"pos_encoding"}),
    ("wpe", {"resid"}, {"pos_encoding"}),
    ("embedding", {"resid"}, {"tie_embeddings"}),
    ("embeddings", {"resid"}, {"tie_embeddings"}),
    ("wte", {"resid"}, {"tie_embeddings"}),
    ("token embedding", {"resid"}, {"tie_embeddings"}),
])  # fmt: skip
def test_help_of_a_topic_lists_the_commands_and_settings_that_declare_it(word, commands, settings):
    """`:help position` was "did you mean :positions?" (:context's alias, the loss by position), `:help wte` found
    nothing: each now lists every command and setting that declares the word (no command's name decides it)."""
    result = run(tiny_session(), f":help {word}")
    key = "_".join(word.split())
    assert result.topic == key and result.detail is None and result.setting is None
    assert [e.name for e in result.topical] == [c.name for c in REGISTRY.values() if key in c.topics]
    assert commands <= {e.name for e in result.topical}
    assert settings == {h.name for h in result.topic_settings}
    text = plain(result)
    assert all(f":{name}" in text for name in commands) and all(name in text for name in settings)
    assert "did you mean" not in text


def test_a_topic_of_one_setting_alone_is_that_settings_help():
    assert run(tiny_session(), ":help tied").setting.name == "tie_embeddings"
    assert run(tiny_session(), ":help sinusoidal").setting.name == "pos_encoding"


def test_help_positions_shows_context_and_names_the_views_of_the_positions_themselves():
    """`:positions` is :context's alias: its help stays, and names what shows the position table after it."""
    result = run(tiny_session(), ":help positions")
    assert result.detail.name == "context"
    text = plain(result, width=200)
    also = text[text.index("also about positions:"):]
    assert all(name in also for name in (":rope", ":resid", "the setting pos_encoding"))


def test_the_shells_help_of_a_topic_says_what_shows_it():
    with speaking(SHELL):
        message = str(no_such_help("position"))
    assert "what shows it: " in message and "minitf rope" in message and "minitf resid" in message
    assert "the setting about it: pos_encoding (minitf set pos_encoding)" in message


def test_declared_topics_are_reachable_words():
    """A topic spelt as a setting's key, or with capitals or dashes, is never looked up (one spelt as a command's
    alias is named after that command's help: `:help positions`)."""
    keys = {p.name for p in REGISTRY["set"].params} | {a for p in REGISTRY["set"].params for a in p.aliases}
    topics = [t for c in REGISTRY.values() for t in c.topics] + [t for ws in SETTING_TOPICS.values() for t in ws]
    assert topics and not (set(topics) & keys)
    assert all(t == "_".join(t.lower().replace("-", "_").split()) for t in topics)
    assert set(SETTING_TOPICS) <= keys


# --- 2. why positions at all -------------------------------------------------------------------------------------
def test_pos_encodings_help_and_the_lab_say_why_a_model_needs_positions():
    assert "attention alone reads the tokens before it as an unordered set" in ModelConfig.spec("pos_encoding").help
    why = words(section("docs/variant-lab.md", "### Why positions: `pos_encoding`"))
    assert "reads its window as a bag of tokens" in why and "as an unordered set" in why
    assert all(f"`{kind}`" in why for kind in POS_ENCODINGS)  # each of the four compared


def test_without_positions_one_block_reads_the_earlier_tokens_as_a_set_and_two_blocks_do_not():
    """What the lab's paragraph says: permuting the tokens before the last leaves one block's last logits alone."""
    torch.manual_seed(0)
    first, second = torch.tensor([[3, 5, 7, 9, 11, 2]]), torch.tensor([[9, 3, 11, 5, 7, 2]])
    gaps = []
    for layers in (1, 2):
        model = MiniTransformerLM(ModelConfig(vocab_size=20, max_seq_len=16, d_model=32, n_heads=4, n_layers=layers,
                                              d_ff=64, pos_encoding="none")).eval()
        with torch.no_grad():
            gaps.append((model(first)[0][0, -1] - model(second)[0][0, -1]).abs().max().item())
    assert gaps[0] < 1e-6 < 1e-3 < gaps[1]


# --- 3. the window's bands: the text and its command agree, sinusoidal among them --------------------------------
def test_the_window_bands_compare_every_position_scheme_named():
    part = section("docs/variant-lab.md", "### Where in the window a variant wins")
    command = words(re.search(r"`:compare ([^`]+)`", part).group(1))
    contenders = [w for w in command.split() if "=" in w and not w.startswith("steps=")]
    rows = re.findall(r"^ [●▲■◆✚] (\S+)", part, flags=re.M)
    assert rows == contenders
    assert {f"pos_encoding={kind}" for kind in POS_ENCODINGS} <= set(contenders)
    assert "Four position\nschemes" not in part and "The four position" in words(part)


def test_the_lab_says_why_the_sine_table_lags_and_its_rows_have_that_norm():
    why = words(section("docs/variant-lab.md", "### Why positions: `pos_encoding`"))
    assert "pos_encoding=sinusoidal pos_encoding=rope pos_encoding=none steps=100" in why
    assert "each of its rows has norm sqrt(d_model / 2), 8 at `d_model` 128" in why
    assert "multiplies the token embedding by sqrt(d_model)" in why
    model = MiniTransformerLM(ModelConfig(vocab_size=20, pos_encoding="sinusoidal"))
    table = next(b for name, b in model.named_buffers() if name.endswith("table"))
    assert table.norm(dim=1) == pytest.approx(torch.full((64,), math.sqrt(128 / 2)))


def test_the_readme_row_of_positions_names_what_shows_them():
    row = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("| positions"))
    assert all(view in row for view in ("`:embed positions=on`", "`:resid`", "`:rope`", "why-positions-pos_encoding"))


# --- 4. :attrib's embedding row says what it holds ---------------------------------------------------------------
def test_attrib_labels_the_embedding_row_token_and_position_where_a_table_is_added():
    session = tiny_session()
    assert "embed (token) " in (text := plain(run(session, ":attrib 12"))) and "embed (position) " in text
    run(session, ":set pos_encoding=rope")  # nothing added at the input: the row is the token's alone
    text = plain(run(session, ":attrib 12"))
    assert "embed (token) " in text and "token + position" not in text


# --- 5. what repeats where -----------------------------------------------------------------------------------------
def test_the_same_run_again_says_which_digits_repeat_on_another_kind_of_cpu():
    part = words(section("docs/commands.md", "**The same run again.**").split("\n\n")[0])
    assert "must print the same numbers on every student's machine" not in part
    assert "numbers that match across machines" not in part
    assert "same kind of CPU and the same torch version" in part and "about 3 to 4 decimals" in part
    assert "what an instructor compares" in part
    dtype, seed = TrainConfig.spec("dtype").help, TrainConfig.spec("seed").help
    assert "compare across machines" not in dtype and "the same kind of CPU and torch version" in dtype
    assert "same kind of CPU and torch version" in seed and "3 to 4 decimals" in seed


# --- 6. the video named where it is first used ---------------------------------------------------------------------
TITLE = "Let's build GPT: from scratch, in code, spelled out"


def test_qkv_names_the_video_before_it_speaks_of_the_videos_rule():
    text = plain(run(tiny_session(), ":qkv 1234="), width=200)
    assert f"Andrej Karpathy's video \"{TITLE}\"" in text
    assert text.index(TITLE) < text.index("the video's d_k var(q) var(k)")


def test_the_lab_names_the_video_where_it_first_speaks_of_it():
    text = words((REPO / "docs" / "variant-lab.md").read_text())
    first = text.index("video")
    assert TITLE in text[first - 20: first + 120] and "Karpathy" in text[first - 40: first]
