"""Sweep bp (views): :attn's cut window, heads and layers, and JSON size; :score's rows; what head L.H means."""

import json
import math
import re

import numpy as np

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.inside import AttnResult, ScoreResult
from minitf_repl.core.config import ModelConfig
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import TINY, run, tiny_session
from test_render import plain, text_of

# a BPE's byte tokens: their first two characters ("\x") tell none apart, so the map is headed by positions
BYTE_TOKENS = [f"\\x{i:02x}" for i in range(0x80, 0x80 + 60)]


def _even(T: int) -> list[list[float]]:
    """A causal map whose row i spreads its weight evenly over keys 0..i."""
    return [[1.0 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)]


def _session(**model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), data_spec="sort:4", device_name="cpu")


# --- 1. :attn cut to the last positions labels them as the text's, and says what the rows put before them -----------
def test_attn_cut_to_the_last_positions_labels_rows_and_columns_with_the_texts_positions():
    result = AttnResult("x", BYTE_TOKENS, 0, [0], 1, [_even(60)], unit="token")
    out = text_of(result, 80)
    shown = int(re.search(r"showing the last (\d+) of 60 positions", out).group(1))
    start = 60 - shown
    assert start > 0 and f"positions {start} to 59" in plain(result, 80)
    lines = out.splitlines()
    rows = [line for line in lines if re.match(r"\s*\d+ \\x", line)]
    assert len(rows) == shown
    assert rows[0].split()[0] == str(start) and rows[-1].split()[0] == "59"  # was 0 and shown - 1
    keys = lines[lines.index(rows[0]) - 1].strip()
    assert keys.startswith(str(start % 10)) and keys.endswith("9")  # the columns count from the window's first key


def test_attn_cut_to_the_last_positions_says_how_much_weight_each_row_puts_before_them():
    out = plain(AttnResult("x", BYTE_TOKENS, 0, [0], 1, [_even(60)], unit="token"), 80)
    start = 60 - int(re.search(r"showing the last (\d+) of 60", out).group(1))
    # row i puts start / (i + 1) on keys 0..start-1: most at the window's first row, least at the last
    assert (f"each row also puts weight on keys 0 to {start - 1}, before the window and not drawn: "
            f"{start / 60:.2f} to {start / (start + 1):.2f} of the row") in out, out
    assert "before the window" not in plain(AttnResult("x", BYTE_TOKENS[:20], 0, [0], 1, [_even(20)]), 120)


# --- 2. :attn's heading says which heads and layer it draws; the hints keep the text ---------------------------------
def test_attn_heading_names_the_heads_drawn_and_the_layer_of_how_many():
    T = 120
    result = AttnResult("x", [f"\\x{i:02x}" for i in range(T)], 0, list(range(6)), 6, [_even(T)] * 6, n_layers=6)
    out = plain(result, 80)
    drawn = [h for h in range(6) if re.search(rf"\bhead {h}\b", out.split("weight: 0")[0])]
    assert drawn == [0, 1], drawn  # two maps of 120 rows fill the lines
    assert "attention, layer 0 of 6, heads 0-1 of 6" in out and "all 6 heads" not in out
    n = re.search(r"showing the last (\d+) of 120", out).group(1)
    assert (f"heads 2-5 are not drawn (as many maps of {n} positions as fit 200 lines): :attn TEXT layer=0 head=N "
            "draws head N (0 to 5); :attn TEXT layer=N shows layer N (0 to 5); :heads TEXT layer=0 says what each "
            "head does") in out, out
    assert "the first 2 of 6" not in out and ":attn head=N" not in out  # the hint ran on the data's sample


def test_attn_of_every_head_names_the_other_layers_and_a_real_model_says_how_many():
    s = _session(n_layers=2)
    result = run(s, ":attn 1234 layer=1")
    assert result.n_layers == 2
    out = plain(result, 120)
    assert "attention, layer 1 of 2, all 2 heads" in out
    assert "the model has 2 layers of 2 heads: :attn TEXT layer=N shows layer N (0 to 1)" in out, out
    one = plain(run(s, ":attn 1234 head=1"), 120)
    assert "attention, layer 0 of 2, head 1 of 2" in one and ":attn TEXT layer=0 head=N draws head N (0 to 1)" in one


# --- 3. :attn --json: each weight the shortest decimal of its float32 ------------------------------------------------
def test_attn_json_writes_each_weight_as_the_shortest_decimal_of_its_float32():
    from minitf_repl.core.inside import attention_maps

    s = tiny_session()
    result = run(s, ":attn 31415926=")
    doc = json_document(REGISTRY["attn"], result)
    assert doc["schema"] == "minitf.attn/5" and doc["n_layers"] == 1
    ref = attention_maps(s.model, s.data.tokenizer.encode("31415926="), layer=0).maps[0].numpy()
    weights = np.array(doc["maps"])
    assert (weights.astype(np.float32) == ref).all()  # the float32s the model computed, every one
    # each is the shortest decimal that reads back as its float32: .tolist() wrote 0.2992049753665924 for 0.29920498
    assert all(float(str(np.float32(w))) == w for w in weights.ravel()), weights.ravel()[:4]
    old = json.dumps([m.tolist() for m in ref])  # as version 4 wrote them
    assert len(json.dumps(doc["maps"])) < 0.8 * len(old)


# --- 4. :score all=on, and the worst row always shown ----------------------------------------------------------------
def _score(losses, **kw):
    n = len(losses)
    return ScoreResult("x" * (n + 1), ["x"] * (n + 1), [math.exp(-v) for v in losses], losses, ["x"] * n, [0.9] * n,
                       [True] * n, sum(losses) / n, 2.48, **kw)


def _rows(text: str) -> list[int]:
    return [int(m.group(1)) for line in text.splitlines() if (m := re.match(r"\s*(\d+)   \S", line))]


def test_score_shows_the_row_it_names_as_the_worst_and_all_on_shows_every_one():
    losses = [1.0] * 250
    losses[104] = 12.2
    out = text_of(_score(losses), 120)
    said = " ".join(out.split())
    assert "12.200 at t = 104 (a full bar)" in said and "(not shown)" not in said
    assert 104 in _rows(out) and 103 not in _rows(out) and 105 not in _rows(out)
    assert ("positions 16 to 103 and 105 to 201 not shown (185 of 250: the first 16, the last 48 and the worst, "
            "t = 104, are; the loss above counts them all); :score TEXT all=on shows every one") in said, said
    every = text_of(_score(losses, show_all=True), 120)
    assert _rows(every) == list(range(250)) and "not shown" not in every


def test_score_declares_all_as_shapes_and_params_do_and_takes_it():
    param = {p.name: p for p in REGISTRY["score"].params}["all"]
    shapes = {p.name: p for p in REGISTRY["shapes"].params}["all"]
    assert (param.type, param.default) == (shapes.type, shapes.default) == (bool, False)
    s = _session(max_seq_len=128)
    text = "0123456789" * 9
    assert len(_rows(text_of(run(s, f":score {text}"), 120))) < 89
    result = run(s, f":score {text} all=on")
    assert result.show_all and _rows(text_of(result, 120)) == list(range(89))
    assert "show_all" not in json_document(REGISTRY["score"], result)  # the view's alone: the JSON lists them all


# --- 5. head L.H said to be layer.head in :heads and :attrib ---------------------------------------------------------
def test_heads_and_attrib_say_what_head_l_dot_h_means():
    s = _session(n_layers=2)
    legend = "head L.H: head H of layer L (1.2: layer 1's head 2), as :ablate names it"
    heads = plain(run(s, ":heads"), 120)
    assert "1.1" in heads and legend in heads, heads
    attrib = plain(run(s, ":attrib 1234"), 200)
    assert re.search(r"head \d\.\d", attrib) and legend in attrib, attrib
