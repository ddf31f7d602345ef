"""The look-inside views (:attn, :step, :gen show=probs, :lens, :plot, :tok, :params, :shapes, loss table):
the numbers behind each through the commands, and each rendered at a fixed width without colour."""

import io
import json
import math

import pytest
import torch
from rich.console import Console

from minitf_repl import commands as C
from minitf_repl.commands import base, inside
from minitf_repl.core.errors import DataError, UserError
from minitf_repl.dispatch import run_command, to_json
from minitf_repl.commands.train import loss_chart
from minitf_repl.palette import SHADES, visible
from minitf_repl.render import LossTable, render
from minitf_repl.session import Session

TINY = {"n_layers": 2, "d_model": 32, "n_heads": 2, "d_ff": 64, "max_seq_len": 32, "batch_size": 4}


def console(width=80, colour=False):
    if colour:
        return Console(file=io.StringIO(), width=width, color_system="truecolor", force_terminal=True)
    return Console(file=io.StringIO(), width=width, color_system=None)


def text_of(result, width=80, colour=False) -> str:
    c = console(width, colour)
    render(result, c)
    return c.file.getvalue()


@pytest.fixture(scope="module")
def trained():
    """A 2-layer, 2-head model on the sort task, trained a few steps (evaluated every 3)."""
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    run_command(s, "train", {"steps": 9, "eval_every": 3})
    return s


# --- :attn -------------------------------------------------------------------------------------------
def test_attn_maps_are_the_core_maps_causal_rows_summing_to_one(trained):
    from minitf_repl.core.inside import attention_maps

    r = run_command(trained, "attn", {"prompt": "31415=", "layer": 1})
    assert isinstance(r, C.AttnResult) and r.heads == [0, 1] and r.layer == 1 and r.tokens == list("31415=")
    ref = attention_maps(trained.model, trained.data.tokenizer.encode("31415="), layer=1).maps[0]
    assert torch.allclose(torch.tensor(r.maps), ref)
    for m in r.maps:
        for i, row in enumerate(m):
            assert math.isclose(sum(row), 1.0, rel_tol=1e-5) and all(w == 0 for w in row[i + 1:])
    one = run_command(trained, "attn", {"prompt": "31415=", "head": "1", "layer": 1})
    assert one.heads == [1] and one.maps == [r.maps[1]]
    json.dumps(to_json(r), allow_nan=False)


def test_attn_rejects_a_bad_head_or_layer(trained):
    with pytest.raises(UserError, match=r"head must be in 0\.\.1"):
        run_command(trained, "attn", {"head": "2"})
    with pytest.raises(UserError, match="head must be a number"):
        run_command(trained, "attn", {"head": "x"})
    with pytest.raises(UserError, match=r"layer must be in 0\.\.1"):
        run_command(trained, "attn", {"layer": 2})


def test_attn_shades_without_colour_and_leaves_the_future_blank():
    maps = [[[1.0, 0, 0], [0.25, 0.75, 0], [0.5, 0.25, 0.25]]]
    out = text_of(C.AttnResult("a b", list("a b"), 0, [0], 2, maps))
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("  a"))
    assert header.rstrip() == "  a ␣ b"  # the space is made visible
    grid = lines[lines.index(header) + 1: lines.index(header) + 4]
    assert grid[0].rstrip() == "a @"  # the future of position 0 is blank
    assert grid[1].rstrip() == "␣ - #"  # 0.25 and 0.75 of the peak (1.0), by SHADES
    assert grid[2].rstrip() == "b + - -"
    assert "weight: 0" in out and "1.00" in out


def test_attn_in_colour_uses_background_colours(trained):
    out = text_of(run_command(trained, "attn", {"prompt": "3141=", "head": "0"}), colour=True)
    assert "\x1b[" in out and "48;2;" in out  # truecolor backgrounds
    assert "@" not in out  # no shade characters when there is colour


def test_attn_long_prompt_shows_the_last_window_and_says_so():
    T = 60
    m = [[1.0 / (i + 1) if j <= i else 0.0 for j in range(T)] for i in range(T)]
    out = text_of(C.AttnResult("x" * T, ["x"] * T, 0, [0], 1, [m]))
    assert "showing the last 39 of 60 positions" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_attn_all_heads_side_by_side_fit_80_columns(trained):
    out = text_of(run_command(trained, "attn", {"prompt": "314159=", "head": "all"}))
    assert "head 0" in out and "head 1" in out
    assert any("head 0" in line and "head 1" in line for line in out.splitlines())  # side by side
    assert all(len(line) <= 80 for line in out.splitlines())


def test_visible_whitespace():
    assert [visible(c) for c in " \n\ta"] == ["␣", "↵", "⇥", "a"]


# --- :step and :gen show=probs -------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2, 3, 11])
def test_step_picks_what_gen_picks_with_the_same_seed(trained, seed):
    opts = {"temperature": 1.3, "top_k": 6, "top_p": 0.95}
    step = run_command(trained, "step", {"prompt": "3141=", "seed": seed, **opts})
    gen = run_command(trained, "gen", {"prompt": "3141=", "n": 1, "seed": seed, **opts})
    assert step.picked == gen.text and step.seed == seed


def test_step_stages_are_consistent(trained):
    r = run_command(trained, "step", {"prompt": "3141=", "seed": 5, "temperature": 0.7, "top_k": 3})
    assert isinstance(r, C.StepResult) and sum(row.picked for row in r.rows) == 1
    assert [row.logit for row in r.rows] == sorted((row.logit for row in r.rows), reverse=True)
    assert r.rows[0].scaled == 0.0 and all(row.scaled <= 0 for row in r.rows)
    best = r.rows[0].logit
    for row in r.rows:
        assert math.isclose(row.scaled, (row.logit - best) / 0.7, abs_tol=1e-6)
    kept = [row for row in r.rows if row.kept]
    assert len(kept) == r.n_kept == 3 and math.isclose(sum(row.prob for row in kept), 1.0, rel_tol=1e-9)
    assert all(row.prob == 0 for row in r.rows if not row.kept)
    json.dumps(to_json(r), allow_nan=False)
    out = text_of(r)
    assert "→" in out and "top-k 3" in out and "picked" in out and f"seed {r.seed}" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    greedy = run_command(trained, "step", {"prompt": "3141=", "temperature": 0})
    assert greedy.picked_rank == 1 and greedy.picked_prob == 1.0 and "greedy" in text_of(greedy)


def test_gen_show_probs_are_the_step_probabilities(trained):
    opts = {"temperature": 1.0, "top_k": None, "top_p": None}
    g = run_command(trained, "gen", {"prompt": "3141=", "n": 6, "seed": 4, "show": "probs", **opts})
    assert len(g.probs) == 6 and all(0 < p <= 1 for p in g.probs)
    first = run_command(trained, "step", {"prompt": "3141=", "seed": 4, **opts})
    assert math.isclose(g.probs[0], first.picked_prob, rel_tol=1e-5)
    second = run_command(trained, "step", {"prompt": "3141=" + g.text[0], "temperature": 1.0})
    chosen = next(row for row in second.rows if row.token == g.text[1])
    assert math.isclose(g.probs[1], chosen.prob, rel_tol=1e-5)
    assert run_command(trained, "gen", {"prompt": "3141=", "n": 2}).probs is None
    out = text_of(g)
    lines = out.splitlines()
    assert lines[0] == "3141=" + g.text and set(lines[1].strip()) <= set(SHADES)
    assert "probability when picked" in out
    assert "48;2;" in text_of(g, colour=True)


def test_gen_show_probs_past_the_window(trained):
    # A 40-digit question (no '=' yet) is past max_seq_len=32 from the first token; the text ends
    # where the task's answer ends (or at n), one probability per token either way.
    g = run_command(trained, "gen", {"prompt": "3141592653589793238462643383279502884197", "n": 40, "seed": 1,
                                     "show": "probs"})
    assert g.n_tokens >= 1 and len(g.probs) == g.n_tokens and all(0 < p <= 1 for p in g.probs)


# --- :lens -----------------------------------------------------------------------------------------
def test_lens_default_prompt_knows_the_true_next_character(trained):
    r = run_command(trained, "lens", {})
    assert isinstance(r, C.LensResult) and r.prompt.endswith("=")
    assert r.target == trained.data.answer(r.prompt)[0]
    assert [row.layer for row in r.rows] == ["embed", "blocks.0", "blocks.1"]
    ids = trained.data.tokenizer.encode(r.prompt)
    trained.model.eval()
    with torch.no_grad():
        logits, _ = trained.model(torch.tensor([ids]))
    trained.model.train()
    probs = torch.softmax(logits[0, -1], -1)
    last = r.rows[-1]
    assert math.isclose(last.probs[0], float(probs.max()), rel_tol=1e-5)
    t = trained.data.tokenizer.stoi[r.target]
    assert last.target_rank == int((probs > probs[t]).sum()) + 1
    out = text_of(r)
    assert "true next character is" in out and "blocks.1" in out and "rank" in out
    assert all(len(line) <= 80 for line in out.splitlines())


def test_lens_of_a_typed_prompt_has_no_target(trained):
    r = run_command(trained, "lens", {"prompt": "12="})
    assert r.target is None and all(row.target_rank is None for row in r.rows)
    assert "true" not in text_of(r)


# --- :plot and the loss chart ------------------------------------------------------------------------
def test_plot_needs_a_history():
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    with pytest.raises(UserError, match="no training history yet"):
        run_command(s, "plot", {})


def test_plot_series_come_from_the_history(trained):
    r = run_command(trained, "plot", {})
    history = trained.trainer.history
    train, val = r.series
    assert train.name == "train" and train.steps == [h["step"] for h in history]
    assert val.name == "val" and val.steps == [3, 6, 9] and val.values == [h["val_loss"] for h in history[2::3]]
    lr = run_command(trained, "plot", {"what": "lr"})
    assert [s.name for s in lr.series] == ["lr"] and lr.series[0].values == [h["lr"] for h in history]
    with pytest.raises(UserError, match="what must be one of"):
        run_command(trained, "plot", {"what": "speed"})
    json.dumps(to_json(r), allow_nan=False)


@pytest.mark.parametrize("width", [80, 100])
def test_plot_reads_at_the_width(trained, width):
    out = text_of(run_command(trained, "plot", {}), width)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)
    assert "•" in out and "×" in out and "train" in out and "val" in out and "step 1" in out
    assert "ln(V) = 2.48" in out


def test_render_loss_chart_for_train(trained):
    c = console(80)
    c.print(loss_chart(trained.trainer.history, 80, vocab_size=12))
    out = c.file.getvalue()
    assert "•" in out and all(len(line) <= 80 for line in out.splitlines())


# --- :tok --------------------------------------------------------------------------------------------
def test_tok_ids_are_the_tokenizers(trained):
    r = run_command(trained, "tok", {"text": "314=+"})
    assert r.ids == trained.data.tokenizer.encode("314=+") and r.tokens == list("314=+")
    out = text_of(r)
    assert "5 tokens, one per character" in out and str(r.ids[3]) in out
    with pytest.raises(DataError, match="not in the vocabulary"):
        run_command(trained, "tok", {"text": "3 1"})
    sampled = run_command(trained, "tok", {})  # the data's sample, as the other views read (46th session)
    assert sampled.sampled and sampled.text and "no text given: a sample of the data" in text_of(sampled)


def test_tok_wraps_long_text_and_shows_whitespace():
    r = C.TokResult("a b\n" * 30, list("a b\n" * 30), [1, 0, 2, 3] * 30, 4)
    out = text_of(r, 40)
    assert all(len(line) <= 40 for line in out.splitlines()) and "␣" in out and "↵" in out


# --- :params ---------------------------------------------------------------------------------------
def test_params_ledger(trained):
    r = run_command(trained, "params", {})
    assert r.ledger["n_params"] == trained.model.num_parameters() == r.total
    assert r.ledger["batch_size"] == 4
    out = text_of(r)
    for words in ("token_embedding", "blocks.0", "attn", "blocks.1", "same as blocks.0", "forward, per token",
                  "training, per step", "6N rule", f"{ {'adamw': 'AdamW', 'muon': 'Muon'}[trained.train_config.optimizer]} state",
                  "activations", "tied to token_embedding"):
        assert words in out, words
    assert all(len(line) <= 80 for line in out.splitlines())
    run_command(trained, "set", {"optimizer": "adamw" if trained.train_config.optimizer == "muon" else "muon"})
    assert ("Muon state" in text_of(run_command(trained, "params", {}))) != ("Muon state" in out)
    everything = " ".join(text_of(run_command(trained, "params", {"all": True})).split())  # notes wrap at spaces
    assert "blocks.1.attn.q_proj.weight" in everything and "counted once" in everything
    json.dumps(to_json(r), allow_nan=False)


# --- :shapes at 80 and 100 columns ----------------------------------------------------------------------
@pytest.mark.parametrize("width", [80, 100])
def test_shapes_read_at_80_and_100_columns(trained, width):
    out = text_of(run_command(trained, "shapes", {"prompt": "3141="}), width)
    lines = out.splitlines()
    assert all(len(line) <= width for line in lines)  # notes too: they wrap at spaces
    assert "(B, n_h, T, d_k) = (1, 2, 5, 16)" in out and "(B, n_h, T, T) = (1, 2, 5, 5)" in out
    assert "(B, T, d) -> (B, T, d_ff) = (1, 5, 64)" in out
    assert "blocks.0 TransformerBlock" in lines
    assert any(line.startswith("  attn.q_proj ") for line in lines)
    assert "same 19 steps as blocks.0" in out
    assert "dropout steps not shown" in out and "Dropout" not in out


# --- the loss table --------------------------------------------------------------------------------
def _row(step, val):
    return {"step": step, "train_loss": 1.0, "val_loss": val, "lr": 1e-3, "tokens_per_second": 1.0, "elapsed": 1.0}


def test_loss_table_says_what_is_normal():
    c = console(80)
    c.print(LossTable([_row(1, 2.0), _row(2, 1.9)], vocab_size=12))
    out = c.file.getvalue()
    assert out.splitlines()[0].startswith("ln(V) = ln(12) = 2.48: the loss of a uniform guess")
    assert "overfitting" not in out
    rising = LossTable([_row(1, 2.0), _row(2, 1.5), _row(3, 1.6), _row(4, 1.7), _row(5, 1.8)])
    c = console(80)
    c.print(rising)
    assert "overfitting? the validation loss rose 3 evaluations in a row" in c.file.getvalue()
    assert not LossTable([_row(1, 1.5), _row(2, 1.6), _row(3, 1.7)]).overfitting  # only 2 rises
    assert not LossTable([_row(1, 1.5), _row(2, 1.6), _row(3, 1.55), _row(4, 1.7)]).overfitting


def test_train_result_carries_the_vocabulary():
    # a session of its own: a step more on the module's `trained` left an evaluation at step 10 in the history
    # that test_plot_series_come_from_the_history read when it ran after this test (a shuffled order)
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    r = run_command(s, "train", {"steps": 1, "eval_every": 1})
    assert r.vocab_size == 12 and "ln(V) = ln(12)" in text_of(r)


def test_view_commands_are_declared_with_completion():
    assert C.REGISTRY["attn"].usage() == ":attn [PROMPT] [layer=N] [head=N|all]"
    assert C.REGISTRY["plot"].usage() == ":plot [what=loss|lr|grad_norm|lens_rank|block_grad|copying|induction|context]"
    assert C.REGISTRY["tok"].usage() == ":tok [TEXT] [--merges] [ids=ID,ID,...]"
    assert C.REGISTRY["step"].find_param("seed").name == "gen_seed"
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    assert C.REGISTRY["attn"].find_param("head").complete(s) == ["all", "0", "1"]
    assert C.REGISTRY["attn"].find_param("layer").complete(s) == ["0", "1"]
    assert C.REGISTRY["gen"].find_param("show").choices == ("text", "probs")


# --- the default prompt of a corpus ------------------------------------------------------------------------
def test_a_corpus_default_prompt_reads_like_a_sentence():
    from minitf_repl.core.data import TextCorpus, load_data

    val = "   \n        >>> x[1]\n        2\n\n   The model reads this sentence first.\n"
    corpus = TextCorpus("t", "a" * (9 * len(val)) + val, "test text")  # the last tenth is `val`
    assert base.sample_window(corpus) == (val.index("The"), "The model reads ")
    assert base.true_next(corpus, "The model reads ") == "t"
    assert base.true_next(corpus, "something else") is None  # only the default prompt has a known next character
    prompt = base.sample_prompt(load_data("pydoc"))  # its first 16 characters were ' Counter()\n     '
    assert "\n" not in prompt and prompt[0].isupper() and sum(ch.isalpha() for ch in prompt) >= 12
    lens = run_command(Session(data_spec="pydoc"), "lens", {})
    assert lens.prompt == prompt and lens.target is not None


def test_shapes_under_grouped_query_attention_name_the_key_value_heads():
    """(1, 2, 9, 32) next to (B, n_h, T, d_k) was unreadable: K and V's own head count is n_kv."""
    s = Session(data_spec="sort")
    run_command(s, "set", {"n_layers": 1, "d_model": 32, "n_heads": 4, "n_kv_heads": 2, "d_ff": 64,
                           "max_seq_len": 16, "pos_encoding": "rope", "qk_norm": True})
    out = text_of(run_command(s, "shapes", {"prompt": "3141="}), 200)
    assert "n_kv=2 key/value heads" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  attn.")}
    assert "(B, T, d) -> (B, T, n_kv·d_k) = (1, 5, 16)" in rows["attn.k_proj"]
    for name in ("attn.hook_k", "attn.hook_v", "attn.k_norm", "attn.hook_k_rot"):
        assert "(B, n_kv, T, d_k) = (1, 2, 5, 8)" in rows[name], rows[name]
    assert "(B, n_h, T, d_k) = (1, 4, 5, 8)" in rows["attn.hook_k_rep"]
    assert "(B, n_kv, T, d_k) -> (B, n_h, T, d_k)" in out
    assert all("(B," in row for row in rows.values())  # no attention step left as bare numbers
    mha = Session(data_spec="sort")
    run_command(mha, "set", {"n_layers": 1, "d_model": 32, "n_heads": 4, "d_ff": 64, "max_seq_len": 16})
    assert "n_kv" not in text_of(run_command(mha, "shapes", {"prompt": "3141="}), 200)  # one kind of head


@pytest.mark.parametrize("view, untrained", [
    ("qkv", "q and k are random, so the weights are near uniform"), ("resid", "its writes are random"),
    ("ln", "its gains are 1 and its biases 0, so y is x̂"), ("ffn", "its units are random"), ("kv", None),
])
def test_each_worked_view_says_what_it_did_not_read_what_is_switched_off_and_that_the_model_is_untrained(
        view, untrained):
    # the three closing notes every view of commands/worked.py shares (closing_notes)
    s = Session(data_spec="sort")
    run_command(s, "set", dict(TINY))
    run_command(s, "ablate", {"what": "head=0.1"})
    prompt = "0123456789=" * 4  # 44 characters, 12 past the window of 32
    out = " ".join(text_of(run_command(s, view, {"prompt": prompt})).split())
    assert "the first 12 characters of the prompt (beyond max_seq_len) went unread" in out
    assert "switched off now: head 0.1" in out
    assert (f"this model has not trained yet: {untrained}; :train, then look again" in out) == (untrained is not None)
    assert ("then look again" in out) == (untrained is not None)  # :kv says its own: the comparison holds all the same
