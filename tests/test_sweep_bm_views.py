"""Findings of a proofreading of the views' teaching text against float64 torch: each test failed before its fix."""

import itertools
import re
from pathlib import Path

from test_commands import run, tiny_session
from test_render import plain, text_of

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session

DOCS = Path(__file__).resolve().parents[1] / "docs" / "inside-views.md"


def session_of(data: str = "pydoc", train: dict | None = None, **model) -> Session:
    """A small model, two blocks, with `model`'s settings."""
    config = {**dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32), **model}
    return Session(ModelConfig(**config), TrainConfig(**{"steps": 2, "batch_size": 2, **(train or {})}),
                   data_spec=data, device_name="cpu")


def formulas(session: Session) -> dict[str, str]:
    """blocks.0's steps as the trace shows them: {path in the block: formula}."""
    return {name: step.formula for name, step in session.model.blocks[0].steps().items()}


# --- 1. :shapes: the block's second half reads x', the stream after attention -------------------------------------
def test_shapes_second_half_of_a_block_reads_the_stream_after_attention():
    """`hook_resid_post  x + FFN(LN(x))` under "x is the stream the block reads" said the block's output is its input
    plus its FFN, attention left out."""
    pre = formulas(session_of())
    assert pre["hook_resid_mid"] == "x + Attention(LN(x))"
    assert pre["ln_2"] == "LN(x')" and pre["hook_resid_post"] == "x' + FFN(LN(x'))"
    llama = formulas(session_of(norm="rmsnorm"))
    assert llama["hook_resid_post"] == "x' + FFN(RMSNorm(x'))" and llama["ln_2"].startswith("RMSNorm(x') = x' / ")
    post = formulas(session_of(norm_placement="post"))
    assert post["hook_resid_mid"] == "LN(x + Attention(x))" and post["hook_resid_post"] == "LN(x' + FFN(x'))"
    assert post["ln_2"] == "LN(x' + FFN(x')) (post-norm)"
    off = formulas(session_of(residual=False))
    assert off["hook_resid_mid"] == "Attention(LN(x))" and off["hook_resid_post"] == "FFN(LN(x'))"
    said = plain(run(session_of(), ":shapes"), 100)
    assert "x' the stream after attention (hook_resid_mid)" in said and "x + FFN(" not in said


# --- 2. one letter, one meaning: h is the stream; n_h heads, d_hid SwiGLU's width, u the FFN's units ----------------
def test_shapes_names_the_heads_n_h_and_keeps_h_for_the_stream():
    """The legend said `h=4 heads` two lines above "h the residual stream"."""
    text = text_of(run(session_of(), ":shapes"), 80)
    said = " ".join(text.split())
    assert "n_h=4 heads, d_k=8 d/n_h" in said and "h=4" not in said.replace("n_h=4", "")
    assert "(B, n_h, T, d_k)" in said and "(B, n_h, T, T)" in said and "(B, h," not in said
    assert max(len(line) for line in text.splitlines()) <= 80  # the table still fits 80 columns
    from minitf_repl.commands import REGISTRY

    assert REGISTRY["shapes"].json_version == 4  # the JSON's shapes carry the symbols


def test_shapes_names_grouped_heads_n_kv_and_swiglus_width_d_hid():
    """`h_kv=2 key/value heads`, and `d_h=341 SwiGLU hidden`: d_h is the per-head width in most texts."""
    text = text_of(run(session_of(n_kv_heads=2, activation="swiglu", pos_encoding="rope"), ":shapes"), 80)
    said = " ".join(text.split())
    assert "n_kv=2 key/value heads" in said and "d_hid=42 SwiGLU hidden" in said
    assert "(B, n_kv, T, d_k)" in said and "(B, T, d_hid)" in said
    assert not re.search(r"\bh_kv\b|\bd_h\b", said)
    assert max(len(line) for line in text.splitlines()) <= 80


def test_ffn_calls_its_hidden_units_u_not_the_streams_h():
    said = plain(run(session_of(), ":ffn"), 200)
    assert "u = GELU(xW_1 + b_1): 64 hidden units; FFN(x) = sum_n u_n v_n + b" in said
    assert "firing (u_n > 0)" in said and "|u_n v_n|" in said and "h_n" not in said and "h = " not in said


def test_rope_pair_index_is_one_letter_in_shapes_and_rope_and_clashes_with_neither():
    """:rope wrote `θ_m = base^(-2m/d_k)`, :shapes `pair i turned by pos * base^(-2i/d_k)`; i is :rope's query
    position, and m sits beside :shapes' mask M."""
    session = session_of(pos_encoding="rope")
    shapes = plain(run(session, ":shapes"), 200)
    rope = plain(run(session, ":rope"), 200)
    assert "pair c turned by pos * base^(-2c/d_k)" in shapes
    assert "each pair (x_2c, x_2c+1) of q and k is turned by its position times θ_c = 10000^(-2c/8)" in rope
    assert "pair c" in rope and "2π/θ_c" in rope
    for text in (shapes, rope):
        assert "pair i" not in text and "pair m" not in text and "θ_m" not in text
        assert not re.search(r"\bc\b", text.replace("pair c", "").replace("2c", "").replace("θ_c", "").replace(
            "x_2c", ""))  # c means nothing else in either view


# --- 3. :attrib: the bias row is W^O's alone ----------------------------------------------------------------------
def test_attrib_names_its_bias_row_for_the_output_projections_alone():
    """"attention biases" held b^O only; b^V goes through each head's row."""
    session = session_of()
    run(session, ":train")  # untrained, b^O is 0: its row is among the parts that write exactly 0, and no note is said
    result = run(session, ":attrib")
    assert [p.name for p in result.parts if p.kind == "bias"] == ["output biases b^O"]
    said = plain(result, 200)
    assert "attention biases" not in said
    assert "b^V is inside each head's row" in said and "b^Q and b^K move only the pattern" in said
    from minitf_repl.commands import REGISTRY

    assert REGISTRY["attrib"].json_version == 7
    no_bias = plain(run(session_of(bias=False), ":attrib"), 200)
    assert "output biases" not in no_bias  # no b^O, no row, and no line about one


# --- 4. :grad: Muon divides by nothing ----------------------------------------------------------------------------
def test_grad_does_not_say_muon_divides_by_the_gradients_running_size():
    session = session_of(data="random:20", train={"optimizer": "muon"})
    said = plain(run(session, ":grad"), 400)
    assert "each dividing by the gradient's running size" not in said
    assert "Muon orthogonalises each hidden matrix's momentum (all its singular values near 1) and scales it by " \
           "0.2 sqrt(max(A, B))" in said and "AdamW steps the rest, dividing each weight's gradient by its running " \
           "size" in said


# --- 5. :kv: a cache slower than the loop without it is said so ---------------------------------------------------
def _timed(monkeypatch, naive: float, cached: float):
    """core.inside's clock: the naive loop takes `naive` seconds, the cached one `cached`."""
    import minitf_repl.core.inside as inside

    ticks = itertools.chain([0.0, naive, 10.0, 10.0 + cached], itertools.repeat(10.0 + cached))

    class Clock:
        @staticmethod
        def perf_counter():
            return next(ticks)

    monkeypatch.setattr(inside, "time", Clock)


def test_kv_says_plainly_when_the_cache_was_not_faster(monkeypatch):
    """`13.4 ms with the cache, 5.9 ms without, 0.4x: a step over so few positions costs mostly what does not grow
    with them`: the explanation of a speed-up, beside a slow-down."""
    _timed(monkeypatch, naive=0.0059, cached=0.0134)
    result = run(tiny_session(), ":kv 31 n=3")
    said = plain(result, 400)
    assert "13.4 ms with the cache, 5.9 ms without, 0.4x: the cache was not faster in this one short run" in said
    assert "so a larger n= shows the difference" in said and "costs mostly what does not grow" not in said


def test_kv_explains_a_small_speed_up_as_before(monkeypatch):
    _timed(monkeypatch, naive=0.0059, cached=0.0050)
    said = plain(run(tiny_session(), ":kv 31 n=3"), 400)
    assert "1.2x: a step over so few positions costs mostly what does not grow with them" in said
    assert "was not faster" not in said


# --- 6. docs: the overfit check's sentence says what the tool prints ----------------------------------------------
def test_docs_overfit_sentence_matches_the_line_it_explains():
    text = " ".join(DOCS.read_text().split())
    example = re.search(r"it writes (\d+) of the (\d+) characters after it as they stand", text)
    assert example and "writes the other 63" not in text
    assert f"it writes the {example.group(2)} characters after it again" in text


# --- 7. :params: the 6N rule's N leaves out the tables a token only looks up ---------------------------------------
def test_params_6n_rule_leaves_out_the_position_table_and_says_which_n():
    """"6N rule: 5.01 GFLOP" took N as every parameter, the position table's 8,192 too, which multiplies nothing."""
    session = session_of(data="sort:4")
    result = run(session, ":params")
    ledger = result.ledger
    table = session.model.position_embedding.weight.numel()
    assert ledger["lookup_params"] == table and ledger["six_n_params"] == ledger["n_params"] - table
    assert ledger["six_n_flops_per_step"] == 6 * ledger["six_n_params"] * ledger["batch_size"] * ledger["seq_len"]
    n, total = ledger["six_n_params"], ledger["n_params"]
    assert (f"6N rule, N = {n:,}: the {total:,} parameters less the {table:,} a token only looks up"
            in plain(result, 200))
    # untied, the token embedding is a lookup too (tied, it is the head's matrix, counted); rope has no table
    untied = run(session_of(data="sort:4", pos_encoding="rope", tie_embeddings=False), ":params").ledger
    assert untied["lookup_params"] == untied["rows"][0]["params"] > 0
    tied = run(session_of(data="sort:4", pos_encoding="rope"), ":params")
    assert tied.ledger["six_n_params"] == tied.ledger["n_params"]
    assert "6N rule, N = all" in plain(tied, 200)
    from minitf_repl.commands import REGISTRY

    assert REGISTRY["params"].json_version == 6
