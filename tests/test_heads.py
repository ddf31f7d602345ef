"""`:heads` (core.heads): every head's attention scored as previous-token, first-token, duplicate and induction head.

Checked against references that do not share its code: the key sets written out by hand for a short
text, attention maps built to be exactly one role (they score 1 on it), the even spread's baseline
against the same score of an even map, the scores of a model against a plain loop over the maps
`:attn` shows (themselves checked against F.scaled_dot_product_attention in test_qkv), and the
per-position losses against the model's own loss. A trained model's induction head is in the slow
suite (test_slow_learning); here, a model whose attention is made by hand to be an induction head.
"""

import math

import pytest
import torch

from minitf_repl.commands import REGISTRY
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.core.heads import (ROLES, head_roles, name_role, repeated_tokens, role_keys, role_scores,
                                    uniform_scores)
from minitf_repl.core.inside import attention_maps
from minitf_repl.dispatch import json_document
from minitf_repl.render import fmt
from minitf_repl.session import Session
from test_commands import Recorder, run
from test_qkv import model_for
from test_render import plain, text_of


def keys_of(tokens, role, i):
    """The keys of query i for `role`, as a sorted list (from role_keys)."""
    mask = role_keys(torch.tensor([tokens]))[role][0, i]
    return torch.nonzero(mask).flatten().tolist()


def test_the_key_sets_written_out_by_hand():
    tokens = [7, 1, 7, 1, 2, 7]  # a b a b c a
    assert all(keys_of(tokens, role, 0) == [] for role in ROLES)  # position 0 sees only itself: not asked
    assert keys_of(tokens, "previous", 3) == [2] and keys_of(tokens, "current", 3) == [3]
    assert keys_of(tokens, "first", 4) == [0]
    assert keys_of(tokens, "duplicate", 2) == [0] and keys_of(tokens, "duplicate", 5) == [0, 2]
    assert keys_of(tokens, "duplicate", 4) == []  # c is new
    assert keys_of(tokens, "induction", 1) == []  # nothing before position 0 to follow
    assert keys_of(tokens, "induction", 2) == [1]  # an 'a' at 0, followed by the 'b' at 1
    assert keys_of(tokens, "induction", 3) == [2]  # the 'b' at 1 was followed by the 'a' at 2
    assert keys_of(tokens, "induction", 5) == [1, 3]  # the 'a's at 0 and 2 were followed by 1 and 3
    assert keys_of([4, 4, 4], "induction", 2) == [1]  # key 2 (itself) is not earlier, key 1 follows the 4 at 0


def exact_map(tokens, choose):
    """(1, 1, T, T): query i puts all its attention on key choose(i) (itself at 0)."""
    T = len(tokens)
    maps = torch.zeros(1, 1, T, T)
    for i in range(T):
        maps[0, 0, i, choose(i) if i else 0] = 1.0
    return maps


def test_a_map_made_to_be_one_role_scores_one_on_it():
    h = 6
    block = [3, 0, 5, 2, 4, 1]
    tokens = block + block
    keys = role_keys(torch.tensor([tokens]))
    previous, _ = role_scores(exact_map(tokens, lambda i: i - 1), keys)
    assert float(previous["previous"]) == 1.0 and float(previous["current"]) == 0.0
    assert float(previous["first"]) == pytest.approx(1 / (2 * h - 1))  # only query 1's previous key is key 0
    current, _ = role_scores(exact_map(tokens, lambda i: i), keys)
    assert float(current["current"]) == 1.0 and float(current["previous"]) == 0.0
    sink, _ = role_scores(exact_map(tokens, lambda i: 0), keys)
    assert float(sink["first"]) == 1.0
    # an induction head: from the repeat, the token after the earlier copy; in the first copy (nothing to
    # follow), the first position
    induction, queries = role_scores(exact_map(tokens, lambda i: i - h + 1 if i >= h else 0), keys)
    assert float(induction["induction"]) == 1.0 and queries["induction"] == h  # queries h..2h-1
    assert float(induction["duplicate"]) == 0.0
    duplicate, _ = role_scores(exact_map(tokens, lambda i: i - h if i >= h else 0), keys)
    assert float(duplicate["duplicate"]) == 1.0 and float(duplicate["induction"]) == 0.0


def test_the_even_baseline_is_the_score_of_an_even_map():
    tokens = torch.tensor([[3, 1, 3, 3, 0, 1, 2, 3], [0, 0, 1, 0, 1, 2, 2, 1]])
    T = tokens.shape[1]
    even = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1).view(T, 1)  # row i: 1 / (i + 1) on keys 0..i
    keys = role_keys(tokens)
    scores, _ = role_scores(even.expand(2, 1, T, T), keys)
    baseline = uniform_scores(keys)
    for role in ROLES:
        assert float(scores[role]) == pytest.approx(baseline[role], rel=1e-6)
    assert baseline["previous"] == pytest.approx(sum(1 / (i + 1) for i in range(1, T)) / (T - 1))


def test_a_head_is_named_only_when_one_pattern_stands_out():
    even = {"previous": 0.2, "current": 0.2, "first": 0.2, "duplicate": 0.1, "induction": 0.1}
    assert name_role({**even, "previous": 0.9}, even) == "previous"
    assert name_role({**even, "previous": 0.39}, even) is None  # below ROLE_AT
    assert name_role({**even, "previous": 0.41}, {**even, "previous": 0.3}) is None  # not twice the even score
    assert name_role({r: float("nan") for r in ROLES}, even) is None


def loop_scores(maps, tokens):
    """The same scores by the definition, position by position, over the maps of `:attn` (layer, head, T, T)."""
    T = len(tokens)
    sets = {
        "previous": lambda i: [i - 1], "current": lambda i: [i], "first": lambda i: [0],
        "duplicate": lambda i: [j for j in range(i) if tokens[j] == tokens[i]],
        "induction": lambda i: [j for j in range(1, i) if tokens[j - 1] == tokens[i]],
    }
    out = {}
    for role, keys in sets.items():
        sums = torch.zeros(maps.shape[:2], dtype=torch.float64)
        n = 0
        for i in range(1, T):
            if keys(i):
                sums += maps[:, :, i, keys(i)].double().sum(-1)
                n += 1
        out[role] = (sums / n, n)
    return out


def test_a_models_scores_are_the_definition_over_its_attention_maps():
    model = model_for()
    tokens = repeated_tokens(model.config.vocab_size, model.config.max_seq_len, sequences=3, seed=2)
    assert tokens.shape == (3, 16) and torch.equal(tokens[:, :8], tokens[:, 8:])
    roles = head_roles(model, tokens, repeat=8)
    sums = {role: 0.0 for role in ROLES}
    counts = {role: 0 for role in ROLES}
    for row in tokens.tolist():  # one sequence at a time, through the :attn view's maps
        maps = attention_maps(model, row).maps
        for role, (scores, n) in loop_scores(maps, row).items():
            sums[role] = sums[role] + scores * n
            counts[role] += n
    for head in roles.heads:
        for role in ROLES:
            assert head.scores[role] == pytest.approx(float(sums[role][head.layer, head.head] / counts[role]), abs=1e-6)
    assert roles.queries == counts
    assert [(h.layer, h.head) for h in roles.heads] == [(l, h) for l in range(2) for h in range(4)]


def test_the_losses_are_the_models_own():
    model = model_for()
    tokens = repeated_tokens(model.config.vocab_size, model.config.max_seq_len, sequences=4, seed=0)
    roles = head_roles(model, tokens, repeat=8)
    with torch.no_grad():
        logits, loss = model(tokens[:, :-1], tokens[:, 1:])
    assert sum(roles.losses) / len(roles.losses) == pytest.approx(float(loss), rel=1e-5)
    each = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    assert roles.first_copy == pytest.approx(float(each[:, :7].mean()), rel=1e-5)  # tokens 1..7
    assert roles.second_copy == pytest.approx(float(each[:, 8:].mean()), rel=1e-5)  # tokens 9..15
    assert roles.chance == pytest.approx(math.log(20))


def test_the_repeated_tokens_fit_the_context_and_are_refused_where_they_cannot():
    assert repeated_tokens(50, 64).shape == (8, 64)
    assert repeated_tokens(50, 1000).shape == (8, 128)  # a block of at most 64
    assert repeated_tokens(50, 5).shape == (8, 4)
    assert torch.equal(repeated_tokens(50, 64, seed=3), repeated_tokens(50, 64, seed=3))
    assert not torch.equal(repeated_tokens(50, 64, seed=3), repeated_tokens(50, 64, seed=4))
    with pytest.raises(UserError, match="max_seq_len=3; give a text to score instead"):
        repeated_tokens(50, 3)


def induction_model(h: int = 8):
    """A one-block, one-head model whose head is an induction head by construction, on repeats of h tokens.

    Token embeddings are zero and position t's embedding is the one-hot e_t, so after ln_1 position t
    reads c e_t plus a small constant. With W_K the identity and W_Q sending e_i to e_{i-h+1} (to e_0
    in the first copy), q_i . k_j is large exactly at j = i - h + 1: in the repeat, the token after
    the earlier copy of token i, whatever the tokens are."""
    T = 2 * h
    model = model_for(n_layers=1, n_heads=1, max_seq_len=T)
    d = model.config.d_model
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for norm in (model.blocks[0].ln_1, model.blocks[0].ln_2, model.ln_f):
            norm.weight.fill_(1.0)
        model.position_embedding.weight.copy_(torch.eye(T, d))
        attn = model.blocks[0].attn
        attn.k_proj.weight.copy_(torch.eye(d))
        W_q = torch.zeros(d, d)
        for i in range(1, T):
            W_q[i - h + 1 if i >= h else 0, i] = 60.0  # q_i = 60 c e_{target(i)} + small
        attn.q_proj.weight.copy_(W_q)
    return model


def test_a_head_made_into_an_induction_head_is_named_one():
    model = induction_model()
    generator = torch.Generator().manual_seed(1)
    blocks = torch.stack([torch.randperm(20, generator=generator)[:8] for _ in range(2)])  # no token twice in a block
    roles = head_roles(model, torch.cat([blocks, blocks], dim=1), repeat=8)
    (head,) = roles.heads
    assert head.scores["induction"] > 0.99 and head.role == "induction"
    assert roles.best("induction") is head and roles.named("induction") == [head]
    assert head.scores["duplicate"] < 0.01
    assert head.scores["previous"] == pytest.approx(1 / 15, abs=0.01)  # of 15 queries, only query 1's key 0 is previous


def test_heads_in_the_shell():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    result = run(session, ":heads")
    assert result.repeat == 16 and result.sequences == 8 and result.seed == 0 and result.untrained
    assert len(result.heads) == 8 and len(result.tokens) == 32 and result.tokens[:16] == result.tokens[16:]
    out = plain(result)
    assert "what each head does, on 8 sequences of 16 random tokens, each followed by the same 16 again (seed 0)" in out
    assert "previous current first duplicate induction named" in out and "even" in out
    assert "loss by position" in out and "first copy:" in out and "this model has not trained yet" in out
    assert f"(chance ln V = {math.log(session.data.tokenizer.vocab_size):.2f})" in out
    assert "no copying from context yet" in result.reading  # an untrained model has nothing to copy with
    most = max(result.heads, key=lambda r: abs(r.carries))  # untrained: no copying for a head to take (test_sweep_r)
    assert (f"no head has copying to take (the most any moves the gain: head {most.layer}.{most.head}, "
            f"{fmt.signed(most.carries, 2)} nats") in out
    assert ":ablate head=" not in out  # the note on the head the copying needs: only where the model copies
    narrow = text_of(result, 50)
    assert "induction" in narrow and "duplicate" in narrow  # the optional columns go first
    assert json_document(REGISTRY["heads"], result)["schema"] == "minitf.heads/3"

    seeded = run(session, ":heads seed=5 layer=1")
    assert [r.layer for r in seeded.heads] == [1] * 4 and seeded.seed == 5 and seeded.tokens != result.tokens
    text = run(session, ":heads the cat sat on the mat")
    assert text.repeat is None and text.first_copy is None and len(text.losses) == len("the cat sat on the mat") - 1
    assert "the copying test (random tokens, then the same again" in text.reading
    with pytest.raises(UserError, match="seed= picks the random tokens, and a text was given"):
        run(session, ":heads abc seed=1")
    with pytest.raises(UserError, match="the text is one token"):
        run(session, ":heads a")
    with pytest.raises(UserError, match="layer must be in 0..1"):
        run(session, ":heads layer=2")

    # each head switched off alone: the copying gain it takes is what :ablate's model loses of it
    assert all(row.carries is not None for row in result.heads) and "off: copying" in out
    one = next(row for row in result.heads if (row.layer, row.head) == (1, 2))
    run(session, ":ablate head=1.2")
    ablated = run(session, ":heads")
    assert ablated.ablations == ["head 1.2"] and "switched off now: head 1.2" in plain(ablated)
    gain, gain_off = result.first_copy - result.second_copy, ablated.first_copy - ablated.second_copy
    assert one.carries == pytest.approx(gain - gain_off, abs=1e-5)
    assert next(r for r in ablated.heads if (r.layer, r.head) == (1, 2)).carries == pytest.approx(0.0, abs=1e-5)
    run(session, ":ablate off")
    heard = Recorder()
    long = run(session, ":heads " + "x" * 40, heard)
    assert len(long.tokens) == 32 and heard.notices  # the text's last max_seq_len tokens


def test_a_model_with_many_heads_lists_the_named_ones():
    session = Session(ModelConfig(d_model=64, n_heads=16, n_layers=4, d_ff=64, max_seq_len=16),
                      TrainConfig(steps=2, batch_size=2), data_spec="pydoc", device_name="cpu")
    result = run(session, ":heads")
    assert len(result.heads) + result.more == 64 and all(r.role is not None for r in result.heads)
    assert "with no role not listed" in plain(result)
    one = run(session, ":heads layer=3")
    assert len(one.heads) == 16 and one.more == 0
    assert all(r.carries is not None for r in one.heads)  # 64 heads: each is switched off in turn


def test_a_model_with_more_heads_than_the_sweep_is_not_swept():
    model = model_for(n_layers=5, n_heads=16, d_model=64)
    tokens = repeated_tokens(20, 16, sequences=2)
    roles = head_roles(model, tokens, repeat=8)
    assert len(roles.heads) == 80 and all(h.carries is None for h in roles.heads)
    assert all(h.carries is not None for h in head_roles(model_for(), tokens, repeat=8).heads)
    assert all(h.carries is None for h in head_roles(model_for(), tokens, repeat=8, sweep=False).heads)


def test_each_heads_column_is_the_copying_gain_that_ablate_then_loses():
    """carries: (first copy - repeat) with the head on, minus the same with it switched off by :ablate, for every head.
    The column once read the repeat's rise alone, which counts a head's damage to the first copy as copying."""
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=30, batch_size=8, eval_every=30), data_spec="pydoc", device_name="cpu")
    run(session, ":train")
    result = run(session, ":heads")
    gain = result.first_copy - result.second_copy
    firsts = []
    for row in result.heads:
        run(session, f":ablate head={row.layer}.{row.head}")
        off = run(session, ":heads")
        run(session, ":ablate off")
        assert row.carries == pytest.approx(gain - (off.first_copy - off.second_copy), abs=1e-5), row
        firsts.append(abs(off.first_copy - result.first_copy))
    assert max(firsts) > 0.01  # some head moves the first copy's loss: the repeat's rise alone would read otherwise


def worse_by(logits: torch.Tensor, idx: torch.Tensor, d: float) -> torch.Tensor:
    """Logits under which the loss of every next-token prediction (position t predicts idx[t + 1]) is d nats more:
    the target's probability times e^-d, the rest scaled up to fill the difference."""
    logp = torch.log_softmax(logits.double(), -1)
    target = torch.zeros_like(logp, dtype=torch.bool)
    target[:, :-1].scatter_(-1, idx[:, 1:].unsqueeze(-1), True)
    p_y = logp.exp().masked_fill(~target, 0.0).sum(-1, keepdim=True)
    others = torch.log1p(-p_y * math.exp(-d)) - torch.log1p(-p_y)  # log((1 - p_y e^-d) / (1 - p_y))
    return torch.where(target, logp - d, logp + others).to(logits.dtype)


def test_a_head_that_hurts_every_prediction_alike_carries_none_of_the_copying():
    """A model whose head 1.2, switched off, raises the loss of every prediction by 0.5 nats on top of what its
    absence does: the first copy's loss rises by 0.5 as the repeat's does, and the copying is as it was. Its column
    reads what it read without the extra harm; the repeat's rise alone (the old column) read 0.5 more, and named it
    the head the copying needs."""
    model = model_for()
    tokens = repeated_tokens(model.config.vocab_size, model.config.max_seq_len, sequences=4)
    repeat = tokens.shape[1] // 2
    honest = {(h.layer, h.head): h.carries for h in head_roles(model, tokens, repeat=repeat).heads}
    width = model.config.d_model // model.config.n_heads
    seen = {}

    def head_off(module, inputs, merged):  # (B, T, d_model): head 1.2's slice is zero only while it is switched off
        seen["off"] = bool((merged[..., 2 * width:3 * width] == 0).all())

    model.blocks[1].attn.hook_merged.register_forward_hook(head_off)
    forward = model.forward

    def hurt(idx, *args, **kwargs):
        logits, loss = forward(idx, *args, **kwargs)
        return (worse_by(logits, idx, 0.5) if seen["off"] else logits), loss

    model.forward = hurt
    with torch.no_grad():  # the construction does what it says: every prediction's loss 0.5 more
        base, _ = forward(tokens)
        each = torch.nn.functional.cross_entropy
        rise = (each(worse_by(base, tokens, 0.5)[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")
                - each(base[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none"))
        assert float((rise - 0.5).abs().max()) < 1e-4
    roles = head_roles(model, tokens, repeat=repeat)
    for h in roles.heads:
        assert h.carries == pytest.approx(honest[(h.layer, h.head)], abs=1e-4), (h.layer, h.head)
    assert abs(next(h for h in roles.heads if (h.layer, h.head) == (1, 2)).carries) < 0.5 - 0.1


def test_the_reading_says_whether_the_model_copies_and_how():
    from minitf_repl.commands.why import HeadRow, HeadsResult, heads_reading
    from minitf_repl.core.heads import HeadRoles, HeadScores

    def roles(induction_role):
        scores = {"previous": 0.1, "current": 0.1, "first": 0.1, "duplicate": 0.1, "induction": 0.8}
        heads = [HeadScores(0, 0, {**scores, "induction": 0.05, "previous": 0.9}, "previous", carries=0.4),
                 HeadScores(1, 1, scores, induction_role, carries=2.5)]
        return HeadRoles([[0, 1, 0, 1]], 2, heads, dict.fromkeys(ROLES, 0.05), {}, [], 4.0, 0.5, 3.0)

    copying = heads_reading(roles("induction"), 4.0, 0.5)
    assert copying.startswith("the model copies from context: the repeat costs 0.50 nats a token against 4.00")
    assert "head 1.1 puts 0.80 of its attention on the token after an earlier copy of the current one: an induction " \
           "head" in copying
    assert copying.endswith("switched off, head 1.1 takes the most of the copying (+2.50 nats a token off the 3.50 "
                            "the repeat gains)")
    other = heads_reading(roles(None), 4.0, 0.5)
    assert "yet no head does it the textbook way, by looking at the token after an earlier copy (the most: head 1.1, " \
           "0.80)" in other
    assert heads_reading(roles("induction"), 4.0, 3.95).startswith("no copying from context yet")
    assert heads_reading(roles("induction"), 4.0, 2.5).startswith("copying from context has begun, not yet to half")
    rows = [HeadRow(1, 1, 0.1, 0.1, 0.1, 0.1, 0.8, "induction", 2.5)]
    result = HeadsResult(None, list("abab"), 2, 1, 0, None, rows, 0, dict.fromkeys(ROLES, 0.05), [4.0, 0.1, 0.5],
                         4.0, 0.5, 3.0, copying)
    out = plain(result)
    assert "to keep the head the copying needs most switched off for the views that follow: :ablate head=1.1" in out
    assert "+2.50" in out and "the first begins ab..." in out


def test_the_views_on_repeat_count_what_training_counts():
    session = Session(ModelConfig(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32),
                      TrainConfig(steps=2, batch_size=2), data_spec="repeat:12", device_name="cpu")
    scored = run(session, ":score")
    assert len(scored.tokens) == 13 and scored.tokens[8:] == scored.tokens[:5]
    assert scored.counted == [False] * 8 + [True] * 4
    assert "the mean of the 4 counted -ln p (the other 8 are given, not predicted: no loss there)" in plain(scored)
    grad = run(session, ":grad")
    assert grad.counted == [False] * 8 + [True] * 4  # the loss :grad backpropagates is :train's


def test_the_shell_names_the_roles_the_core_scores():
    """commands.why draws the roles without importing torch: its list is core.heads.ROLES, HeadRow's fields."""
    from dataclasses import fields

    from minitf_repl.commands.why import HEAD_ROLES, HeadRow

    assert HEAD_ROLES == ROLES
    assert tuple(f.name for f in fields(HeadRow))[2:7] == ROLES
    assert tuple(uniform_scores(role_keys(torch.tensor([[1, 2, 1]])))) == ROLES  # the report reads this order
