"""What a sweep of the views' numbers, checked against plain torch from the model's own weights, found: each test
failed before its fix.

`:embed` on a task (sort:4 trains on rows of 8 positions, the window is 32) said how alike the learned position
table's rows are by distance averaged over all 32 rows, 24 of which no training row reaches: they stay the random
rows they started as, so a trained table whose 8 rows read 0.53 at distance 1 was shown as 0.12 (and distance 16
compared untrained rows only). The view now compares the rows a training row reaches, and says the rest are left out.

`:muon` said it worked out the step :train takes on a matrix, from the session's momentum, but fed that momentum the
batch's raw gradient: :train clips the whole gradient to grad_clip first (`:grad` says so and scales by it), so
where the whole gradient's norm was 1.86 the view's b mixed in a G 1.86 times too large and its update direction
(u's orthogonal factor) was 25% off the optimizer's. The momentum (and AdamW's comparison) now read the clipped
gradient, and the view says by how much it was scaled.

Under a BPE tokenizer, the views that know the default prompt's true next token (`:lens`, `:attrib`, `:patch`,
`:train watch=lens`) took the next character instead: after "Pack my box with" the space, a token the text never
has there (its next token is " five"), so `:lens` ranked the "true next character" 139th while the model's best
guess was the true next token. They now take the token the text's own encoding has next (the next character only
where a token straddles the window's end), and :lens says "token".

`:params` listed "KV cache, sampling 16.0 KiB" for a session that samples with no cache at all: with cache=off, or
a model of two blocks without the causal mask, :gen recomputes the window every step and allocates none. The line
now says none is kept, and why, with what it would take.

`:embed` of an untied model under a byte-level BPE listed, as every token's most alike, tokens the text never holds
('Pa' most alike '\\xe4' 0.50): an untied input row learns only where its token is read, so the 275 unused rows of
bpe:300 on a short text stay random, and their chance cosines of 0.4 to 0.5 beat the trained rows'. The neighbours
are now the tokens the training text holds, and the view says how many were left out. `:embed map=on` drew those
275 random rows too and took them into its two main directions; it now maps the rows that trained.
"""

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session
from test_commands import TINY, run, text_file  # noqa: F401 (a fixture)
from test_render import plain


def session_with(data: str = "sort:4", **model) -> Session:
    return Session(ModelConfig(**{**TINY, **model}), TrainConfig(steps=4, batch_size=4, eval_every=2, eval_batches=1),
                   data_spec=data, device_name="cpu")


def mean_cosine_by_distance(table: torch.Tensor) -> list[float]:
    rows = table / table.norm(dim=1, keepdim=True)
    cos = rows @ rows.T
    return [float(cos.diagonal(d).mean()) for d in range(1, len(rows))]


# --- :embed ----------------------------------------------------------------------------------------------------
def test_embed_compares_the_position_rows_a_task_trains_not_the_untrained_rest():
    s = session_with()  # sort:4: rows of 8 positions in a window of 32
    run(s, ":train steps=3")
    result = run(s, ":embed")
    trained = s.model.position_embedding.weight.detach()[:8]
    assert result.by_distance == pytest.approx(mean_cosine_by_distance(trained), abs=1e-6)
    assert result.trained_rows == 8
    words = plain(result)
    assert "its first 8" in words and "never trained" in words


def test_embed_on_a_text_compares_every_row_of_the_window(text_file):
    s = session_with(text_file, max_seq_len=16)
    result = run(s, ":embed")
    table = s.model.position_embedding.weight.detach()
    assert len(result.by_distance) == 15 and result.trained_rows is None
    assert result.by_distance == pytest.approx(mean_cosine_by_distance(table), abs=1e-6)
    assert "never trained" not in plain(result)


# --- :muon -----------------------------------------------------------------------------------------------------
def test_muon_feeds_the_momentum_the_gradient_train_clips():
    s = session_with(n_layers=2)
    run(s, ":train steps=12")
    model = s.model
    weight = model.blocks[0].attn.q_proj.weight
    old = s.trainer.optimizer.state[weight]["momentum_buffer"].double().clone()
    result = run(s, ":muon")
    x, y = s.data.get_batch("train", s.train_config.batch_size, model.config.max_seq_len,
                            torch.Generator().manual_seed(0))
    model.eval()
    params = list(model.parameters())
    grads = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(),
                                                                  ignore_index=-1), params)
    total = float(torch.stack([g.double().norm() for g in grads]).norm())
    scale = min(1.0, s.train_config.grad_clip / (total + 1e-6))
    assert scale < 0.9  # the case at hand: this batch's gradient is clipped
    G = grads[next(i for i, p in enumerate(params) if p is weight)].double() * scale
    b = 0.9 * old + 0.1 * G  # torch's Muon: momentum 0.9, Nesterov
    u = 0.1 * G + 0.9 * b
    step = result.step
    assert step.grad == pytest.approx(float(G.norm() / scale), rel=1e-5)  # |dL/dW| itself
    assert step.buffer == pytest.approx(float(b.norm()), rel=1e-5)
    assert step.update == pytest.approx(float(u.norm()), rel=1e-5)
    assert step.clip_scale == pytest.approx(scale, rel=1e-5) and step.total_grad == pytest.approx(total, rel=1e-5)
    assert step.singular == pytest.approx(torch.linalg.svdvals(u).tolist(), rel=1e-4, abs=1e-9)
    words = " ".join(plain(result).split())
    assert f"every gradient is scaled by {scale:.3g}" in words


# --- the true next token under BPE ------------------------------------------------------------------------------
def test_the_true_next_token_of_the_sample_is_the_texts_own_token_under_bpe(tmp_path):
    from test_commands import TEXT

    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    s = session_with(str(path))
    run(s, ":set tokenizer=bpe:300")
    tokenizer = s.data.tokenizer
    lens = run(s, ":lens")
    window = lens.prompt
    assert window == "Pack my box with"  # the sample ends where " five" begins, a token of its own
    whole = tokenizer.encode(window + " five dozen")
    assert whole[: len(tokenizer.encode(window))] == tokenizer.encode(window)
    truth = whole[len(tokenizer.encode(window))]
    assert tokenizer.itos[truth] == " five" and lens.target == " five"
    logits = s.model(torch.tensor([tokenizer.encode(window)]))[0][0, -1].detach()
    probs = torch.softmax(logits, dim=-1)
    assert lens.rows[-1].target_prob == pytest.approx(float(probs[truth]), rel=1e-5)
    assert lens.rows[-1].target_rank == int((probs > probs[truth]).sum()) + 1
    assert "the true next token is '␣five'" in plain(lens)
    attrib = run(s, ":attrib")
    assert attrib.target == " five" and attrib.logit == pytest.approx(float(logits[truth]), rel=1e-5, abs=1e-6)


# --- :params's KV cache ----------------------------------------------------------------------------------------
def caches_made_by_gen(s) -> list:
    """The KV caches :gen allocates for one short sample, as the model makes them."""
    made, new_cache = [], s.model.new_cache

    def recording():
        made.append(new_cache())
        return made[-1]

    s.model.new_cache = recording
    try:
        run(s, ":gen 3055= n=4 seed=1")
    finally:
        del s.model.new_cache
    return made


@pytest.mark.parametrize("model, setting", [({"n_layers": 2}, None), ({"n_layers": 2, "causal": False}, None),
                                            ({"n_layers": 2}, ":set cache=off")])
def test_params_says_the_kv_cache_sampling_keeps(model, setting):
    s = session_with(**model)
    if setting:
        run(s, setting)
    result = run(s, ":params")
    made = caches_made_by_gen(s)
    kept = sum(t.numel() * t.element_size() for c in made for layer in c.layers for t in (layer.k, layer.v))
    words = " ".join(plain(result).split())
    if made:
        assert result.kv_cache["unused"] is None and kept == result.kv_cache["window_bytes"]
        assert "KV cache, sampling 16.0 KiB" in words
    else:
        assert result.kv_cache["unused"] is not None
        assert "KV cache, sampling none" in words and "it would take 16.0 KiB" in words


# --- :embed of an untied model ---------------------------------------------------------------------------------
def test_embed_of_an_untied_model_lists_only_tokens_the_text_trains(tmp_path):
    from test_commands import TEXT

    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    s = session_with(str(path), tie_embeddings=False)
    run(s, ":set tokenizer=bpe:300")
    run(s, ":train steps=3")
    tokenizer = s.data.tokenizer
    held = sorted(set(s.data.splits["train"].tolist()))
    assert len(held) < tokenizer.vocab_size // 4  # most of the vocabulary never occurs: the case at hand
    result = run(s, ":embed")
    rows = s.model.token_embedding.weight.detach().double()
    rows = rows / rows.norm(dim=1, keepdim=True)
    for token, neighbours, sims in zip(result.tokens, result.neighbours, result.similarities):
        i = tokenizer.encode(token)[0]
        others = [j for j in held if j != i]
        cos = rows[others] @ rows[i]
        top = cos.topk(5)
        assert neighbours == [tokenizer.itos[others[j]] for j in top.indices.tolist()]
        assert sims == pytest.approx(top.values.tolist(), abs=1e-5)
    assert result.untrained_tokens == tokenizer.vocab_size - len(held)
    assert f"the {result.untrained_tokens} tokens the training text never holds" in " ".join(plain(result).split())


def test_embed_map_of_an_untied_model_maps_only_the_rows_that_trained(tmp_path):
    from test_commands import TEXT

    path = tmp_path / "fox.txt"
    path.write_text(TEXT * 3, encoding="utf-8")
    s = session_with(str(path), tie_embeddings=False)
    run(s, ":set tokenizer=bpe:300")
    run(s, ":train steps=3")
    held = sorted(set(s.data.splits["train"].tolist()))
    result = run(s, ":embed map=on")
    drawn = result.map
    assert drawn.labels == [s.data.tokenizer.itos[i] for i in held]
    rows = s.model.token_embedding.weight.detach().double()[held]
    centred = rows - rows.mean(dim=0)
    variance = torch.linalg.svdvals(centred).pow(2)
    assert drawn.explained == pytest.approx((variance[:2] / variance.sum()).tolist(), rel=1e-6)
    _, _, Vh = torch.linalg.svd(centred, full_matrices=False)
    ours = centred @ Vh[:2].T
    coords = torch.tensor(drawn.coords, dtype=torch.float64)
    assert torch.allclose(coords.abs(), ours.abs(), atol=1e-6)  # a direction's sign is the view's choice
    asked = [held.index(s.data.tokenizer.encode(t)[0]) for t in result.tokens]
    assert drawn.asked == asked
    assert "not drawn: the" in " ".join(plain(result).split())
