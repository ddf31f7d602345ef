"""The tester's findings on :embed: chance level, positions that drown the tokens, the position map, the head's rows."""

import io
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from rich.console import Console

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.inside import EMBED_MAX_TOKENS, EmbedResult, position_dwarfs
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.likeness import chance_level
from minitf_repl.dispatch import json_document
from minitf_repl.render import render
from minitf_repl.schema import result_type
from minitf_repl.session import Session
from test_commands import run, tiny_session
from test_render import plain, text_of

SMALL = dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, max_seq_len=16)
DOCS = Path(__file__).resolve().parents[1] / "docs"


def session_for(**changes) -> Session:
    torch.manual_seed(0)
    return Session(ModelConfig(**{**SMALL, **changes}), TrainConfig(steps=2, batch_size=2), data_spec="pydoc",
                   device_name="cpu")


def test_the_chance_level_is_what_random_rows_give():
    # drawn row by row: the k nearest of 102 random directions in d = 64, over many tables
    generator = torch.Generator().manual_seed(1)
    tops = []
    for _ in range(300):
        rows = F.normalize(torch.randn(103, 64, generator=generator), dim=-1)
        cos = rows @ rows.T
        cos.fill_diagonal_(-2)
        tops.append(cos.topk(4, dim=-1).values)
    drawn = torch.cat(tops)
    found = chance_level(102, 64, 4)
    assert found.mean == pytest.approx(drawn.mean(dim=0).tolist(), abs=0.01)  # 0.31 0.27 0.24 0.23, the tester's
    assert found.band == pytest.approx(drawn.quantile(0.99, dim=0).tolist(), abs=0.02)
    assert found.mean[0] > found.mean[3] > 0.2  # well above 0: the nearest of many random rows is not unrelated
    assert chance_level(50_256, 768, 2).mean[0] == pytest.approx(0.15, abs=0.01)  # a GPT-2 vocabulary, at once
    assert chance_level(102, 64, 1).band == found.band[:1]  # the bar for the most alike does not move with k


def test_embed_prints_the_chance_level_and_marks_only_what_is_above_it():
    session = session_for()
    untrained = run(session, ":embed aeiou k=4")
    assert untrained.chance == chance_level(untrained.candidates, 32, 4).mean and untrained.candidates == 102
    out = plain(untrained)
    assert "chance " + " ".join(f"{c:.2f}" for c in untrained.chance) in out  # the row under the columns
    assert "every similarity is near 0" not in out and "alike by chance alone" in out
    stoi = session.data.tokenizer.stoi
    with torch.no_grad():  # 'e' made 'a' pointed the same way: far above chance, marked
        session.model.token_embedding.weight[stoi["e"]] = 2 * session.model.token_embedding.weight[stoi["a"]]
    made = run(session, ":embed aeiou k=4")
    assert made.neighbours[0][0] == "e" and "e 1.00*" in plain(made)
    marked = re.findall(r"\d\.\d\d\*", plain(made))
    above = sum(c > made.chance_band[0] for sims in made.similarities for c in sims)
    assert len(marked) == above >= 2 and f"{above} of 20 here" in plain(made)


def test_bold_in_the_table_has_its_legend():
    result = run(session_for(), ":embed aeiou k=3")
    console = Console(file=io.StringIO(), width=100, color_system="truecolor", force_terminal=True)
    render(result, console)
    out = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", console.file.getvalue()).split())
    assert "in bold: above chance" in out  # colour: bold, and the line says what bold means
    assert "marked *: above chance" in plain(result)  # no colour: a * instead, and the line says so


def test_sinusoidal_positions_say_they_dwarf_the_tokens_and_why():
    result = run(session_for(pos_encoding="sinusoidal"), ":embed ae")
    assert result.position_size == pytest.approx(math.sqrt(32 / 2), rel=1e-4)  # every row of the fixed table
    out = plain(result)
    ratio = result.position_size / result.token_size
    assert f"is {ratio:.1f} times |x|" in out and "sqrt(d_model) = 5.7" in out and "mostly position" in out
    assert "times |x|" not in plain(run(session_for(), ":embed ae"))  # a learned table starts as small as W_E
    # the wording :resid's numbers need (|x| = 1.04, |p| = PE(7) in d = 64, the tester's)
    said = position_dwarfs(1.04, 5.66, 64, learned=False)
    assert "5.4 times" in said and "sqrt(d/2) = 5.66" in said and "97% of its squared length" in said
    assert position_dwarfs(1.85, 1.20, 128, learned=True) is None


def test_positions_on_draws_every_pair_and_the_rows_near_their_neighbours_are_counted():
    session = session_for(pos_encoding="sinusoidal")
    result = run(session, ":embed a positions=on")
    table = F.normalize(session.model.position_embedding(torch.arange(16)), dim=-1)
    torch.testing.assert_close(torch.tensor(result.position_cosines), table @ table.T, atol=1e-5, rtol=0)
    assert result.nearest_next == 16  # sinusoids: each row is most like the next one's
    out = text_of(result)
    assert "cos(p_s, p_t)" in out and "\n15 " in out and "16 of 16 rows have their most alike other row" in plain(
        result)
    learned = run(session_for(), ":embed a")
    assert learned.position_cosines is None and learned.nearest_next is not None
    assert ":embed positions=on draws every pair" in plain(learned)


def test_head_on_reads_the_untied_heads_rows_and_says_when_it_is_the_same_table():
    session = session_for(tie_embeddings=False)
    result = run(session, ":embed aeiou k=3 head=on")
    W = F.normalize(session.model.lm_head.weight.detach(), dim=-1)
    itos, stoi = session.data.tokenizer.itos, session.data.tokenizer.stoi
    for token, row, sims in zip(result.tokens, result.neighbours, result.similarities):
        cos = W @ W[stoi[token]]
        cos[stoi[token]] = -2
        top = cos.topk(3)
        assert row == [itos[i] for i in top.indices] and sims == pytest.approx(top.values.tolist(), abs=1e-5)
    assert result.head and "the rows of W_U" in plain(result) and "its own W_E row" in plain(result)
    assert "head=on lists the rows of W_U" in plain(run(session, ":embed a"))
    tied = run(session_for(), ":embed a head=on")
    assert "W_U is W_E: the same table" in plain(tied)


def test_json_names_the_number_of_tokens_shown_not_a_constant():
    fields = json_document(REGISTRY["embed"], run(session_for(), ":embed a"))
    assert "chance" in fields and "chance_band" in fields and result_type(REGISTRY["embed"]).__name__ == "EmbedResult"
    page = (DOCS / "json.md").read_text(encoding="utf-8")
    line = next(line for line in page.splitlines() if line.startswith("| `cut` | integer | ") and "distinct" in line)
    assert "EMBED_MAX_TOKENS" not in line and str(EMBED_MAX_TOKENS) in line


def test_the_docs_embed_example_is_what_the_tool_prints_for_its_numbers():
    """The example's numbers came from a trained model no test can afford; its text is the renderer's for them: the
    table, its chance row and bar, the positions' lines, each word and break at 100 columns (it only looked for a rule
    line and the word "chance")."""
    page = (DOCS / "inside-views.md").read_text(encoding="utf-8")
    start = page.index("minitf> :embed aeiou0123ABC k=4\n")
    shown = page[start:page.index("```", start)].split("\n", 1)[1]
    rows = re.findall(r"(?m)^ (\S) {2,}((?:\S \d\.\d\d\*?\s+){3}\S \d\.\d\d\*?)$", shown)
    pairs = [re.findall(r"(\S) (\d\.\d\d)\*?", cells) for _, cells in rows]
    assert len(rows) == 12 and all(len(p) == 4 for p in pairs)
    chance = [float(c) for c in re.search(r"(?m)^ chance\s+(.*)$", shown)[1].split()]
    band = float(re.search(r"99 of 100 tables \((\d\.\d\d)\)", shown)[1])
    distances = {int(d): float(c) for d, c in re.findall(r"(\d+):\s+(-?\d\.\d\d)", shown)}
    result = EmbedResult([t for t, _ in rows], [[n for n, _ in p] for p in pairs],
                         [[float(c) for _, c in p] for p in pairs], tied=True, positions="learned",
                         by_distance=[distances.get(d, 0.0) for d in range(1, 64)], chance=chance,
                         chance_band=[band] * 4, candidates=102, d_model=128, token_size=1.0, position_size=1.0,
                         nearest_next=64, learned_table=True)
    printed = "\n".join(line.rstrip() for line in text_of(result, 100).splitlines())
    assert printed.strip() == shown.strip()


def test_resid_says_where_a_sinusoidal_row_dwarfs_the_tokens_and_embed_is_a_topic_of_positions():
    """`:resid` on a sinusoidal model read "|x| = 1.04; p = PE(7): |p| = 5.66" and no more (s59)."""
    session = tiny_session(data="pydoc")
    run(session, ":set pos_encoding=sinusoidal")
    text = " ".join(plain(run(session, ":resid The list")).split())
    assert "times |x| = " in text and "the fixed table's rows are sqrt(d/2) = " in text, text
    assert {"position", "embedding", "wte", "wpe"} <= set(REGISTRY["embed"].topics)
