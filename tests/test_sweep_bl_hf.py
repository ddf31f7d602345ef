"""Hugging Face folders (core/hf), a tester's sweep: :parity's relative tolerance, verdict, prompt, fixed positions."""

import os
from pathlib import Path

import pytest
import torch

from minitf_repl import commands as C
from minitf_repl.core.errors import CheckpointError
from minitf_repl.dispatch import run_command
from minitf_repl.session import Session

from test_commands import run
from test_render import plain

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n") * 20
PROMPT = "You are all resolved rather to die"
MASSIVE = 2000.0  # added to one feature by every block: the residual stream reaches thousands, as GPT-2's does


@pytest.fixture(scope="module")
def tokenizer():
    from minitf_repl.core.bpe import train_bpe

    return train_bpe(TEXT, 279)


def _gpt2(path: Path, tokenizer, vocab: int, massive: float = 0.0) -> Path:
    """A tiny GPT-2 folder; `massive` added to feature 5 of every block's MLP output bias."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=vocab, n_positions=37, n_embd=48, n_layer=3, n_head=3,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        for block in model.transformer.h:
            block.mlp.c_proj.bias[5] += massive
    model.save_pretrained(path)
    tokenizer.tokenizer.save(str(path / "tokenizer.json"))
    return path


@pytest.fixture(scope="module")
def massive(tmp_path_factory, tokenizer):
    return _gpt2(tmp_path_factory.mktemp("hf") / "massive", tokenizer, 279, MASSIVE)


# --- 1. a rounding step of a large residual stream is no divergence ---------------------------------------------------
def test_parity_takes_one_rounding_step_of_a_large_residual_stream_as_the_same(massive):
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{massive}"})
    with torch.no_grad():  # one float32 step at 2000 (1.2e-4): what a different order of the sums may round to
        bias = s.model.get_parameter("blocks.0.ffn.fc_out.bias")
        bias[5] = torch.nextafter(bias[5], torch.tensor(float("inf")))
    r = run_command(s, "parity", {"path": f"hf:{massive}", "prompt": PROMPT})
    rows = {row.layer: row for row in r.layers}
    assert rows["blocks.0"].max_abs_diff > 1e-4 >= rows["blocks.0"].max_rel_diff  # above the old, absolute one
    assert r.first_diverging is None
    text = plain(r)
    assert "the same model" in text and "DIVERGES" not in text and "each |diff| / max(1, |h|)" in text


def test_parity_still_names_a_real_difference_in_a_large_residual_stream(massive):
    # a tolerance relative to the largest value of the layer (6000) would take this 5e-3 beside values of 1 as equal
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{massive}"})
    with torch.no_grad():
        s.model.get_parameter("blocks.1.ffn.fc_in.weight")[0, 0] += 0.05
    r = run_command(s, "parity", {"path": f"hf:{massive}", "prompt": PROMPT})
    assert r.first_diverging == "blocks.1" and 1e-4 < r.layers[2].max_rel_diff < 1e-1


def test_parity_verdict_agrees_with_rows_that_agree_again_after_the_first_difference():
    result = C.ParityResult("/m/gpt2", "gpt2", "hello", 2, 1e-6, 1e-4,
                            [C.ParityLayer("embed", 0.0, 0.0), C.ParityLayer("blocks.0", 0.5, 0.25),
                             C.ParityLayer("blocks.1", 1e-6, 1e-6), C.ParityLayer("blocks.2", 2e-6, 2e-6)],
                            "blocks.0", max_logit_rel_diff=1e-6)
    text = plain(result)
    assert "inherits" not in text
    assert "the models differ at blocks.0, but 2 of the 2 layers after it agree again" in text
    # the rows are judged by the relative difference: 3e-4 at |h| 5 is 6e-5
    result.layers[2] = C.ParityLayer("blocks.1", 3e-4, 6e-5)
    assert "2 of the 2 layers after it agree again" in plain(result)
    result.layers[2] = C.ParityLayer("blocks.1", 3e-4, 3e-4)
    assert "blocks.2 agrees again" in plain(result)


# --- 2. a model of fixed positions against the folder :save hf: wrote of it -------------------------------------------
@pytest.mark.parametrize("positions", ["sinusoidal", "none"])
def test_parity_compares_a_fixed_position_model_with_its_learned_table_export(positions, tmp_path):
    s = Session(data_spec="pydoc")
    run_command(s, "set", {"activation": "gelu_tanh", "n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 48,
                           "max_seq_len": 24, "batch_size": 4, "pos_encoding": positions})
    run_command(s, "train", {"steps": 2})
    run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    r = run_command(s, "parity", {"path": f"hf:{tmp_path / 'out'}", "prompt": "def f(x):"})
    assert r.first_diverging is None and "the same model" in plain(r)
    run_command(s, "set", {"max_seq_len": 16})  # a window the folder's table does not match is still refused
    with pytest.raises(CheckpointError, match="max_seq_len 16 here, 24 there"):
        run_command(s, "parity", {"path": f"hf:{tmp_path / 'out'}"})


# --- 3. the cache's snapshot is the one refs/main names ---------------------------------------------------------------
def _cache(root: Path, main: str | None) -> Path:
    model = root / "models--me--tiny"
    for revision, age in (("abc123", 1000), ("old999", 0)):  # old999 touched last
        (model / "snapshots" / revision).mkdir(parents=True)
        (model / "snapshots" / revision / "config.json").write_text("{}")
        os.utime(model / "snapshots" / revision, (1e9 - age, 1e9 - age))
    if main is not None:
        (model / "refs").mkdir()
        (model / "refs" / "main").write_text(main)
    return model


@pytest.mark.parametrize("main, named", [("abc123", "abc123"), (None, "old999")])
def test_a_hub_name_and_a_cache_folder_point_at_the_snapshot_refs_main_names(main, named, tmp_path, monkeypatch):
    from minitf_repl.core.hf.folder import read_folder

    model = _cache(tmp_path / "hub", main)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(CheckpointError) as e:
        read_folder(Path("me/tiny"))
    assert f"hf:{model / 'snapshots' / named}" in str(e.value)
    with pytest.raises(CheckpointError) as e:
        read_folder(model / "snapshots")
    assert str(e.value).endswith(f"e.g. hf:{model / 'snapshots' / named}")


# --- 5. the text compared is shown ----------------------------------------------------------------------------------
def test_parity_shows_the_text_it_compared(massive):
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{massive}"})
    r = run(s, f":parity hf:{massive} prompt='{PROMPT}'")
    assert f"on '{PROMPT}' ({r.n_tokens} tokens)" in plain(r)


# --- 6. a tokenizer smaller than the embedding ------------------------------------------------------------------------
def test_load_says_the_embedding_rows_the_tokenizer_leaves_unused(tokenizer, tmp_path):
    s = Session(data_spec="pydoc")
    r = run_command(s, "load", {"name": f"hf:{_gpt2(tmp_path / 'wide', tokenizer, 300)}"})
    assert "279 of the tokenizer's own, and 21 rows of the embedding past them" in plain(r)
    docs = (Path(__file__).parents[1] / "docs" / "real-models.md").read_text()
    assert "`<unused N>`" in docs
