"""Hugging Face folders (core/hf): GPT-2 and Llama built with `transformers` at tiny, unequal sizes,
saved with save_pretrained (Llama sharded), loaded with `:load hf:`, compared with the reference
model's own logits and greedy tokens; the hostile folders each refused in one line, nothing changed."""

import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from rich.console import Console

from minitf_repl import commands as C
from minitf_repl.core.config import GenConfig
from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import run_command
from minitf_repl.render import render
from minitf_repl.session import Session

transformers = pytest.importorskip("transformers")
pytest.importorskip("tokenizers")

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n") * 20
PROMPT = "First Citizen:\nYou are all"
VOCAB = 283  # the tokenizer's 279 tokens and 4 unused rows (as a model that rounds its embedding up)


def text_of(result, width=80) -> str:
    c = Console(file=io.StringIO(), width=width, color_system=None)
    render(result, c)
    return c.file.getvalue()


@pytest.fixture(scope="module")
def tokenizer():
    from minitf_repl.core.bpe import train_bpe

    return train_bpe(TEXT, 279)


def _save(model, tokenizer, path: Path, **kw) -> Path:
    model.save_pretrained(path, **kw)
    tokenizer.tokenizer.save(str(path / "tokenizer.json"))
    return path


def _randomise(model, scale=0.05):
    """Non-trivial norms and biases (a fresh model has gains of 1 and biases of 0, which would hide a swap)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * scale)
    return model.eval()


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=37, n_embd=48, n_layer=3, n_head=3,
                                     bos_token_id=0, eos_token_id=0)
    model = _randomise(transformers.GPT2LMHeadModel(config))
    return model, _save(model, tokenizer, tmp_path_factory.mktemp("hf") / "gpt2")


@pytest.fixture(scope="module")
def llama(tmp_path_factory, tokenizer):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=90, num_hidden_layers=3,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48,
                                      tie_word_embeddings=False, rms_norm_eps=1e-6, rope_theta=500.0,
                                      bos_token_id=0, eos_token_id=0)
    model = _randomise(transformers.LlamaForCausalLM(config))
    path = _save(model, tokenizer, tmp_path_factory.mktemp("hf") / "llama", max_shard_size="60KB")
    assert (path / "model.safetensors.index.json").exists() and len(list(path.glob("model-*.safetensors"))) > 1
    return model, path


def reference_greedy(model, ids: list[int], n: int) -> list[int]:
    out = list(ids)
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids):]


@pytest.mark.parametrize("which, tolerance", [("gpt2", 1e-5), ("llama", 1e-4)])
def test_loaded_model_gives_the_reference_logits_and_greedy_tokens(which, tolerance, request, tokenizer):
    from minitf_repl.core.generate import generate
    from minitf_repl.core.hf import load_folder

    reference, path = request.getfixturevalue(which)
    loaded = load_folder(path)
    model = loaded.model
    assert loaded.model_type == which and loaded.tokenizer.vocab_size == VOCAB
    ids = loaded.tokenizer.encode(PROMPT)
    assert ids == tokenizer.encode(PROMPT) and len(ids) > 5
    idx = torch.tensor([ids, ids[::-1]])  # batch 2, the second reversed
    with torch.no_grad():
        ours, theirs = model(idx)[0], reference(idx).logits
    assert ours.shape == theirs.shape == (2, len(ids), VOCAB)
    assert (ours - theirs).abs().max().item() <= tolerance
    n = model.config.max_seq_len - len(ids) - 2
    want = reference_greedy(reference, ids, n)
    for cache in (True, False):
        got = list(generate(model, ids, GenConfig(n=n, temperature=0.0, cache=cache)))
        assert got == want, f"cache={cache}"


def test_llama_settings_are_the_lab_switches(llama):
    from minitf_repl.core.config import ffn_hidden
    from minitf_repl.core.hf import load_folder

    config = load_folder(llama[1]).model.config
    assert (config.pos_encoding, config.norm, config.activation, config.bias, config.tie_embeddings) == (
        "rope", "rmsnorm", "swiglu", False, False)
    assert (config.n_kv_heads, config.rope_base, config.norm_eps, ffn_hidden(config)) == (2, 500.0, 1e-6, 90)


def test_load_hf_through_the_front_door_shows_bpe_pieces(gpt2, tokenizer):
    s = Session(data_spec="pydoc")
    r = run_command(s, "load", {"name": f"hf:{gpt2[1]}"})
    assert isinstance(r, C.LoadResult) and r.architecture == "gpt2" and r.step == 0 and r.data_spec == "pydoc"
    assert s.data.tokenizer.kind == "bpe" and s.model_config.vocab_size == VOCAB and s.tokenizer is s.data.tokenizer
    text = text_of(r)
    assert "architecture gpt2" in text and "byte-level BPE" in text
    tok = run_command(s, "tok", {"text": "First Citizen"})
    assert tok.tokens == [tokenizer.itos[i] for i in tokenizer.encode("First Citizen")]
    assert any(len(piece) > 1 for piece in tok.tokens) and "".join(tok.tokens) == "First Citizen"
    assert "for 13 characters (13 bytes)" in text_of(tok)
    attn = run_command(s, "attn", {"prompt": "First Citizen", "layer": 1})
    assert attn.tokens == tok.tokens and len(attn.maps[0]) == len(tok.tokens)
    shown = text_of(attn)
    from minitf_repl.palette import visible

    rows = shown.splitlines()[4:4 + len(tok.tokens)]  # title, note, the heads' names, the keys' row
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert all(row.startswith(visible(piece) + " ") for row, piece in zip(rows, tok.tokens))  # whole pieces
    step = run_command(s, "step", {"prompt": "First Citizen"})
    from minitf_repl.core.bpe import shown_piece

    # as :tok names them: a token holding part of a character by its bytes (\xe2), not "�" (test_sweep_ab)
    # the session's tokenizer: the model's 4 rows past the tokenizer's own read "<unused N>", and a drawn token
    # may be one of them (the fixture's tokenizer has no such rows: an IndexError where :step drew 280)
    assert all(row.token == shown_piece(s.tokenizer, row.id) for row in step.rows)
    lens = run_command(s, "lens", {"prompt": "First Citizen"})
    named = {shown_piece(tokenizer, i) for i in range(tokenizer.vocab_size)}
    assert len(lens.rows) == 4 and all(g in named for row in lens.rows for g in row.guesses)
    text_of(step), text_of(lens)
    gen = run_command(s, "gen", {"prompt": "First", "n": 5, "temperature": 0})
    assert "not trained yet" not in text_of(gen)


def test_a_loaded_model_trains_saves_and_loads_with_its_tokenizer(gpt2, checkpoint_dir):
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{gpt2[1]}"})
    run_command(s, "set", {"batch_size": 2, "max_seq_len": 37})
    run_command(s, "train", {"steps": 2, "eval_every": 2})
    stored = json.loads((checkpoint_dir / "autosave" / "checkpoint.json").read_text())
    assert stored["vocab"] == "" and stored["tokenizer"]["kind"] == "bpe"
    ids = torch.tensor([s.data.tokenizer.encode(PROMPT)])
    before = s.model(ids)[0]
    t = Session(data_spec="pydoc")
    r = run_command(t, "load", {"name": "autosave"})
    assert r.step == 2 and t.data.tokenizer.kind == "bpe" and t.data.tokenizer.vocab == s.data.tokenizer.vocab
    assert torch.equal(t.model(ids)[0], before)


def test_switching_data_keeps_the_loaded_tokenizer(gpt2, tmp_path):
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{gpt2[1]}"})
    model = s.model
    (tmp_path / "t.txt").write_text(TEXT)
    run_command(s, "data", {"name": str(tmp_path / "t.txt")})
    assert s.model is model and s.data.tokenizer is s.tokenizer and s.data.name == "t.txt"


def test_a_task_keeps_the_tokenizer_only(gpt2):
    s = Session(data_spec="sort")
    r = run_command(s, "load", {"name": f"hf:{gpt2[1]}"})
    assert r.data_missing and "tokenizer only" in r.data_missing
    with pytest.raises(UserError, match="choose text data"):
        run_command(s, "train", {"steps": 1})


# --- hostile folders -----------------------------------------------------------------------------
def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _pickle_only(gpt2, tmp):
    path = tmp / "pickle"
    path.mkdir()
    (path / "config.json").write_text((gpt2[1] / "config.json").read_text())
    torch.save(gpt2[0].state_dict(), path / "pytorch_model.bin")
    return path


def _truncated(gpt2, tmp):
    path = _copy(gpt2[1], tmp / "truncated")
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) - 1000])
    return path


def _other_shapes(gpt2, tmp):
    path = _copy(gpt2[1], tmp / "shapes")
    config = json.loads((path / "config.json").read_text())
    config["n_embd"] = 60
    (path / "config.json").write_text(json.dumps(config))
    return path


def _unknown_type(gpt2, tmp):
    path = _copy(gpt2[1], tmp / "bert")
    config = json.loads((path / "config.json").read_text())
    config["model_type"] = "bert"
    (path / "config.json").write_text(json.dumps(config))
    return path


def _no_tokenizer(gpt2, tmp):
    path = _copy(gpt2[1], tmp / "notok")
    (path / "tokenizer.json").unlink()
    return path


def _dev_zero(gpt2, tmp):
    path = _copy(gpt2[1], tmp / "zero")
    (path / "model.safetensors").unlink()
    os.symlink("/dev/zero", path / "model.safetensors")
    return path


def _config_dev_zero(gpt2, tmp):
    path = _copy(gpt2[1], tmp / "zeroconfig")
    (path / "config.json").unlink()
    os.symlink("/dev/zero", path / "config.json")
    return path


def _missing(gpt2, tmp):
    return tmp / "nothing-here"


HOSTILE = [
    (_pickle_only, "pickle"), (_truncated, "truncated"), (_other_shapes, "does not match the weights"),
    (_unknown_type, "'bert'"), (_no_tokenizer, "no tokenizer.json"), (_dev_zero, "character device"),
    (_config_dev_zero, "character device"), (_missing, "does not exist"),
]


@pytest.mark.parametrize("make, words", HOSTILE, ids=[m.__name__.strip("_") for m, _ in HOSTILE])
def test_hostile_folders_are_refused_in_one_line_and_change_nothing(make, words, gpt2, tmp_path):
    if make is _dev_zero or make is _config_dev_zero:
        if not os.path.exists("/dev/zero"):
            pytest.skip("no /dev/zero here")
    s = Session(data_spec="sort")
    run_command(s, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32})
    run_command(s, "train", {"steps": 1})
    model, data, state = s.model, s.data, {k: v.clone() for k, v in s.model.state_dict().items()}
    path = make(gpt2, tmp_path)
    with pytest.raises(UserError) as e:
        run_command(s, "load", {"name": f"hf:{path}"})
    message = str(e.value)
    assert words in message and "\n" not in message and ";" in message, message
    assert s.model is model and s.data is data and s.tokenizer is None
    assert all(torch.equal(v, state[k]) for k, v in s.model.state_dict().items())


def test_refusals_of_what_the_lab_does_not_compute(gpt2, llama, tmp_path):
    from minitf_repl.core.hf import load_folder

    path = _copy(llama[1], tmp_path / "scaled")
    config = json.loads((path / "config.json").read_text())
    config["rope_scaling"] = {"rope_type": "linear", "factor": 2.0}
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UserError, match="RoPE scaling"):
        load_folder(path)
    path = _copy(gpt2[1], tmp_path / "extra")
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(path / "model.safetensors"))
    tensors["transformer.h.3.ln_1.weight"] = torch.ones(48)  # a layer the config does not have
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(UserError, match="does not describe"):
        load_folder(path)


def test_a_folder_too_big_for_memory_is_refused_before_anything_is_built(gpt2):
    from minitf_repl.core.hf.folder import check_memory, read_folder

    folder = read_folder(gpt2[1])
    with pytest.raises(UserError, match="memory is free"):
        check_memory(folder, free=1000)
    check_memory(folder, free=2**30)


# --- :save hf: ------------------------------------------------------------------------------------
GPT2_LIKE = {"activation": "gelu_tanh", "n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 48, "max_seq_len": 24,
             "batch_size": 4}
LLAMA_LIKE = {"pos_encoding": "rope", "norm": "rmsnorm", "activation": "swiglu", "bias": False, "n_kv_heads": 2,
              "tie_embeddings": False, "norm_eps": 1e-6, "rope_base": 700.0, "n_layers": 2, "d_model": 32,
              "n_heads": 4, "d_ff": 54, "max_seq_len": 24, "batch_size": 4}


@pytest.mark.parametrize("settings, cls, tolerance", [(GPT2_LIKE, "GPT2LMHeadModel", 1e-5),
                                                      (LLAMA_LIKE, "LlamaForCausalLM", 1e-4)], ids=["gpt2", "llama"])
def test_save_hf_writes_what_transformers_loads_with_the_same_logits(settings, cls, tolerance, tmp_path):
    s = Session(data_spec="pydoc")
    run_command(s, "set", dict(settings))
    run_command(s, "train", {"steps": 3})
    r = run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    assert r.architecture == {"GPT2LMHeadModel": "gpt2", "LlamaForCausalLM": "llama"}[cls]
    assert "from_pretrained" in text_of(r)
    theirs = getattr(transformers, cls).from_pretrained(tmp_path / "out").eval()
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    text = "class Foo:\n  def b(s)"
    ids = s.data.tokenizer.encode(text)
    assert tok(text)["input_ids"] == ids and tok.decode(ids) == text  # the characters, ids unchanged
    with torch.no_grad():
        ours, want = s.model(torch.tensor([ids]))[0], theirs(torch.tensor([ids])).logits
    assert (ours - want).abs().max().item() <= tolerance


@pytest.mark.parametrize("which, cls, tolerance", [("gpt2", "GPT2LMHeadModel", 1e-5), ("llama", "LlamaForCausalLM", 1e-4)])
def test_hf_to_lab_to_hf_round_trip(which, cls, tolerance, request, tokenizer, tmp_path):
    reference, path = request.getfixturevalue(which)
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{path}"})
    run_command(s, "save", {"name": f"hf:{tmp_path / 'again'}"})
    again = getattr(transformers, cls).from_pretrained(tmp_path / "again").eval()
    ids = torch.tensor([tokenizer.encode(PROMPT)])
    with torch.no_grad():
        assert (again(ids).logits - reference(ids).logits).abs().max().item() <= tolerance
    t = Session(data_spec="pydoc")
    run_command(t, "load", {"name": f"hf:{tmp_path / 'again'}"})  # and back into the lab
    assert torch.equal(t.model(ids)[0], s.model(ids)[0])
    assert t.data.tokenizer.vocab == s.data.tokenizer.vocab


def test_save_hf_refuses_settings_without_an_equivalent_and_existing_folders(tmp_path):
    from minitf_repl.core.errors import ConfigError

    s = Session(data_spec="sort")
    run_command(s, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "norm_placement": "post"})
    run_command(s, "train", {"steps": 1})
    with pytest.raises(ConfigError, match="norm_placement=post") as e:
        run_command(s, "save", {"name": f"hf:{tmp_path / 'post'}"})
    assert e.value.fix == {"norm_placement": "pre"} and not (tmp_path / "post").exists()
    run_command(s, "set", {"norm_placement": "pre", "residual": False})
    with pytest.raises(ConfigError, match="residual=off") as e:
        run_command(s, "save", {"name": f"hf:{tmp_path / 'no-residual'}"})
    assert e.value.fix == {"residual": True}
    run_command(s, "set", {"residual": True, "activation": "relu2"})
    with pytest.raises(ConfigError, match="activation=relu2"):
        run_command(s, "save", {"name": f"hf:{tmp_path / 'relu2'}"})
    run_command(s, "set", {"activation": "gelu"})
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match="nothing is overwritten"):
        run_command(s, "save", {"name": f"hf:{tmp_path / 'full'}"})
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    run_command(s, "save", {"name": f"hf:{tmp_path / 'ok'}"})
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind


# --- :parity --------------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["gpt2", "llama"])
def test_parity_is_below_tolerance_on_a_loaded_folder(which, request):
    path = request.getfixturevalue(which)[1]
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{path}"})
    r = run_command(s, "parity", {"path": f"hf:{path}", "prompt": PROMPT})
    assert isinstance(r, C.ParityResult) and r.architecture == which and r.first_diverging is None
    assert [row.layer for row in r.layers] == ["embed", "blocks.0", "blocks.1", "blocks.2"]
    assert all(row.max_abs_diff <= 1e-4 for row in r.layers) and r.max_logit_diff <= 1e-4
    text = text_of(r)
    assert "the same model" in text and all(len(line) <= 80 for line in text.splitlines())


@pytest.mark.parametrize("which, part", [("gpt2", "ffn.fc_in.weight"), ("llama", "attn.k_proj.weight")])
def test_parity_names_the_layer_of_a_perturbed_weight(which, part, request):
    path = request.getfixturevalue(which)[1]
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{path}"})
    with torch.no_grad():
        s.model.get_parameter(f"blocks.1.{part}")[0, 0] += 0.5
    r = run_command(s, "parity", {"path": f"hf:{path}", "prompt": PROMPT})
    diffs = {row.layer: row.max_abs_diff for row in r.layers}
    assert r.first_diverging == "blocks.1" and diffs["blocks.0"] <= 1e-4 < diffs["blocks.1"]
    assert r.max_logit_diff > 1e-4 and "the models part at blocks.1" in text_of(r)


def test_parity_prints_nothing_of_transformers_own_and_puts_its_settings_back(gpt2, capfd):
    # transformers warns about configs and draws a progress bar of the weights it loads, on stderr:
    # in the REPL that would land between :parity's prompt and its table
    logging = transformers.utils.logging
    logging.set_verbosity_warning()
    logging.enable_progress_bar()
    config = json.loads((gpt2[1] / "config.json").read_text())
    folder = gpt2[1].parent / "gpt2-warns"
    if not folder.exists():
        shutil.copytree(gpt2[1], folder)
        config["bos_token_id"] = config["eos_token_id"] = config["vocab_size"] + 7  # a config transformers warns about
        (folder / "config.json").write_text(json.dumps(config))
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{folder}"})
    capfd.readouterr()
    r = run_command(s, "parity", {"path": f"hf:{folder}", "prompt": PROMPT})
    out, err = capfd.readouterr()
    assert r.first_diverging is None and out == "" and err == ""
    assert logging.get_verbosity() == logging.WARNING and logging.is_progress_bar_enabled()


def test_parity_without_transformers_says_to_install_it(gpt2, monkeypatch):
    import sys

    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{gpt2[1]}"})
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now raises ImportError
    with pytest.raises(UserError, match=r"pip install transformers"):
        run_command(s, "parity", {"path": f"hf:{gpt2[1]}"})


def test_parity_refuses_another_model_and_hostile_folders(gpt2, llama, tmp_path):
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{gpt2[1]}"})
    with pytest.raises(UserError, match="not the model in"):
        run_command(s, "parity", {"path": f"hf:{llama[1]}"})
    with pytest.raises(UserError, match="pickle"):
        run_command(s, "parity", {"path": f"hf:{_pickle_only(gpt2, tmp_path)}"})


def test_the_original_gpt2_layout_without_prefix_and_with_mask_buffers(gpt2, tmp_path):
    """openai-community/gpt2's own file names its tensors without "transformer." and keeps the old
    causal-mask buffers (h.N.attn.bias); its tokenizer comes as vocab.json and merges.txt too."""
    from safetensors.torch import load_file, save_file

    from minitf_repl.core.hf import load_folder

    reference, path = gpt2
    out = _copy(path, tmp_path / "original")
    tensors = {k.removeprefix("transformer."): v for k, v in load_file(str(out / "model.safetensors")).items()}
    for i in range(3):
        tensors[f"h.{i}.attn.bias"] = torch.tril(torch.ones(1, 1, 37, 37))
    save_file(tensors, str(out / "model.safetensors"))
    model = load_folder(out).model
    ids = torch.tensor([load_folder(path).tokenizer.encode(PROMPT)])
    with torch.no_grad():
        assert (model(ids)[0] - reference(ids).logits).abs().max().item() <= 1e-5
    (out / "tokenizer.json").unlink()
    load_folder(path).tokenizer.tokenizer.model.save(str(out))  # vocab.json and merges.txt, GPT-2's older pair
    assert (out / "vocab.json").exists() and (out / "merges.txt").exists()
    assert load_folder(out).tokenizer.encode(PROMPT) == ids[0].tolist()
