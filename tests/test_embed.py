"""`:embed` (core.inside.embedding_neighbours): which tokens the model treats alike, and positions by distance.

Checked against the cosine similarity computed pair by pair, and on tables built to have a known answer.
"""

import pytest
import torch
import torch.nn.functional as F

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.core.inside import embedding_neighbours
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.dispatch import json_document
from minitf_repl.session import Session
from test_commands import run
from test_render import text_of

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
    default = embed(session, ":embed")  # the distinct characters of the views' sample 'The example abov'
    assert default.tokens == list("The xamp") and default.untrained and default.positions == "learned"
    assert all(len(row) == 5 for row in default.neighbours) and default.tied
    out = " ".join(text_of(default).split())
    assert "the rows of W_E most alike each token's" in out and "learned positions" in out
    assert "this model has not trained yet" in out
    given = embed(session, ":embed aeiou k=2")
    assert given.tokens == list("aeiou") and all(len(row) == 2 for row in given.neighbours)
    assert json_document(REGISTRY["embed"], given)["schema"] == "minitf.embed/1"
    many = embed(session, ":embed " + "".join(chr(c) for c in range(ord("a"), ord("z") + 1)))
    assert len(many.tokens) == 24 and many.cut == 2 and "2 more distinct tokens" in " ".join(text_of(many).split())
    embed(session, ":train steps=1")
    assert not embed(session, ":embed a").untrained
