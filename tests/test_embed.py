"""`:embed` (core.inside.embedding_neighbours): which tokens the model treats alike, and positions by distance.

Checked against the cosine similarity computed pair by pair, and on tables built to have a known answer.
"""

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.commands import REGISTRY
from minitf_repl.commands.base import sample_prompt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.core.inside import embedding_map, embedding_neighbours
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from minitf_repl.render.scatter import DOT, scatter
from test_render import plain, text_of

SMALL = dict(d_model=32, n_heads=4, n_layers=1, d_ff=64, max_seq_len=16)


def model_for(vocab: int = 12, **changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(vocab_size=vocab, **{**SMALL, **changes}))


def test_neighbours_are_the_most_alike_rows_by_cosine_never_the_token_itself():
    model = model_for()
    found = embedding_neighbours(model, [0, 5, 11], k=4)
    W = model.token_embedding.weight.detach()
    for token, ids, sims in zip(found.token_ids, found.neighbour_ids, found.similarities):
        pairwise = {j: F.cosine_similarity(W[token], W[j], dim=0).item() for j in range(12) if j != token}
        expected = sorted(pairwise, key=pairwise.get, reverse=True)[:4]
        assert ids == expected and sims == pytest.approx([pairwise[j] for j in expected], abs=1e-5)
    assert len(embedding_neighbours(model, [3], k=50).neighbour_ids[0]) == 11  # every other token, no more


def test_a_row_made_like_another_is_found_first():
    model = model_for()
    with torch.no_grad():
        model.token_embedding.weight[7] = 3 * model.token_embedding.weight[2] + 1e-3  # the same direction, longer
    found = embedding_neighbours(model, [2, 7], k=1)
    assert found.neighbour_ids == [[7], [2]] and found.similarities[0][0] == pytest.approx(1.0, abs=1e-3)


def test_positions_by_distance_follow_the_table():
    model = model_for(pos_encoding="learned")
    table = F.normalize(model.position_embedding.weight.detach(), dim=-1)
    by_distance = embedding_neighbours(model, [0]).by_distance
    assert len(by_distance) == 15
    for d in (1, 5, 15):
        pairs = [(table[p] @ table[p + d]).item() for p in range(16 - d)]
        assert by_distance[d - 1] == pytest.approx(sum(pairs) / len(pairs), abs=1e-5)
    sinusoids = embedding_neighbours(model_for(pos_encoding="sinusoidal"), [0]).by_distance
    assert sinusoids[0] > sinusoids[7] > 0  # a fixed table whose near positions are alike
    assert embedding_neighbours(model_for(pos_encoding="rope"), [0]).by_distance is None  # no table at the input


def test_what_it_cannot_look_up_is_one_clear_error():
    model = model_for()
    with pytest.raises(UserError, match="k .neighbours per token. must be"):
        embedding_neighbours(model, [1], k=0)
    with pytest.raises(DataError, match="token ids must be in 0..11"):
        embedding_neighbours(model, [12])
    with pytest.raises(DataError):
        embedding_neighbours(model, [])


def embed(session, line):
    return run(session, line)


def test_embed_in_the_shell():
    session = Session(ModelConfig(**SMALL), TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    default = embed(session, ":embed")  # the distinct characters of the views' sample ('The example abov' in 3.11)
    sample = sample_prompt(session.data)  # pydoc's text is each Python's own documentation: 3.10's has another
    assert default.tokens == list(dict.fromkeys(sample))[:8] and default.untrained and default.positions == "learned"
    assert all(len(row) == 5 for row in default.neighbours) and default.tied
    out = " ".join(text_of(default).split())
    assert "the rows of W_E most alike each token's" in out and "learned positions" in out
    assert "this model has not trained yet" in out
    given = embed(session, ":embed aeiou k=2")
    assert given.tokens == list("aeiou") and all(len(row) == 2 for row in given.neighbours)
    assert json_document(REGISTRY["embed"], given)["schema"] == "minitf.embed/10" and given.map is None
    many = embed(session, ":embed " + "".join(chr(c) for c in range(ord("a"), ord("z") + 1)))
    assert len(many.tokens) == 24 and many.cut == 2 and "2 more distinct tokens" in " ".join(text_of(many).split())
    embed(session, ":train steps=1")
    assert not embed(session, ":embed a").untrained


# --- the map: W_E's rows on their first two principal components -------------------------------------------
def test_the_map_recovers_two_axes_built_into_the_table():
    model = model_for(vocab=6)
    a = torch.tensor([-3.0, 1.0, 0.0, -2.0, 4.0, 0.0])  # along feature 5: sum (a - mean)^2 = 30.0, farthest +4
    b = torch.tensor([0.0, 1.0, -1.0, 0.5, 0.0, -0.5])  # along feature 9, smaller: 2.5 (the first farthest +1)
    with torch.no_grad():
        model.token_embedding.weight.zero_()
        model.token_embedding.weight[:, 5] = a
        model.token_embedding.weight[:, 9] = b
    found = embedding_map(model)
    torch.testing.assert_close(torch.tensor(found.coords, dtype=torch.float64)[:, 0], (a - a.mean()).double())
    torch.testing.assert_close(torch.tensor(found.coords, dtype=torch.float64)[:, 1], (b - b.mean()).double())
    assert found.explained == pytest.approx([30.0 / 32.5, 2.5 / 32.5]) and found.dims == 32


def test_the_map_is_the_top_two_eigenvectors_of_the_covariance():
    model = model_for(vocab=40)
    X = model.token_embedding.weight.detach().double()
    X = X - X.mean(dim=0)
    values, vectors = torch.linalg.eigh(X.T @ X)  # ascending
    found = embedding_map(model)
    coords = torch.tensor(found.coords, dtype=torch.float64)
    for k in range(2):
        reference = X @ vectors[:, -1 - k]
        reference = reference * reference[reference.abs().argmax()].sign()  # the map's sign rule
        torch.testing.assert_close(coords[:, k], reference)
        assert found.explained[k] == pytest.approx(float(values[-1 - k] / values.sum()))
    assert coords[:, 0].var() >= coords[:, 1].var()
    assert embedding_map(model).coords == found.coords  # the same table, the same map


def test_the_map_needs_two_directions():
    with pytest.raises(UserError, match="needs two directions"):
        embedding_map(model_for(vocab=2))
    with pytest.raises(UserError, match="d_model >= 2"):
        embedding_map(MiniTransformerLM(ModelConfig(vocab_size=12, d_model=1, n_heads=1, n_layers=1, d_ff=4,
                                                    max_seq_len=8)))


def test_scatter_places_corners_and_counts_what_hides():
    grid, hidden = scatter(["a", "b", "c", "d"], [[0, 0], [1, 1], [0, 1], [0, 0]], asked=[], width=5, height=3)
    rows = grid.plain.split("\n")
    assert rows[0] == "│c   b" and rows[2] == "│d    " and rows[3] == "└─────"  # y up, x right
    assert hidden == 1  # 'a' lies under 'd', drawn after it
    grid, hidden = scatter(["a", "d", "世", " the", "\ufffd"], [[0, 0], [0, 0], [1, 0], [1, 1], [0.4, 0]], asked=[0, 3],
                           width=6, height=2)
    rows = grid.plain.split("\n")
    assert rows[0] == "│  ␣the" and rows[1] == "│a " + DOT + " 世"  # asked on top, whole; a lone byte of a
    # byte-level BPE (U+FFFD) is a dot; a wide character is itself, in two cells, moved left to fit (test_sweep_ab)
    assert hidden == 1  # 'd' lies under the asked 'a'


def test_embed_map_in_the_shell():
    session = Session(ModelConfig(**SMALL), TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    result = embed(session, ":embed aeiou0123 map=on")
    drawn = result.map
    assert drawn.asked == [session.data.tokenizer.stoi[c] for c in "aeiou0123"]
    assert drawn.labels == list(session.data.tokenizer.itos) and len(drawn.coords) == len(drawn.labels)
    assert drawn.coords == embedding_map(session.model).coords
    out = text_of(result)
    grid = out[out.index("│"):out.index("└")]
    assert all(c in grid for c in "aeiou0123")  # asked: always on top
    assert "x: direction 1," in plain(result)
    # a plain console (a pipe, a file) shows no bold: the line says how the text's tokens stand out instead
    assert "the text's tokens, drawn over any they share a cell with: a, e, i, o, u, 0, 1, 2, 3" in plain(result)
    assert "random, so the map is a cloud" in plain(result)
    assert json_document(REGISTRY["embed"], result)["map"]["asked"] == drawn.asked
