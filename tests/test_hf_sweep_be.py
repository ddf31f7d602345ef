"""Hugging Face folders (core/hf), a tester's sweep: a folder's special tokens kept through `:save hf:`, a character
tokenizer that refuses in transformers what minitf refuses, refusals that name the field set, norm_gain=off written
as gains of one, a missing lm_head.weight named with tie_word_embeddings, and the BOS difference said in the docs."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from minitf_repl.core.errors import UserError
from minitf_repl.dispatch import run_command
from minitf_repl.session import Session

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n") * 20
PROMPT = "First Citizen:\nYou are all"


def _bpe(specials: list[str], llama: bool):
    """A tiny tokenizer with `specials` at ids 0, 1, ...: GPT-2's kind (byte-level, <|endoftext|>) or Llama 2's
    (characters with byte fallback, <unk> <s> </s>, and <s> put before every text)."""
    tk = tokenizers
    if llama:
        tokenizer = tk.Tokenizer(tk.models.BPE(unk_token="<unk>", byte_fallback=True))
        tokenizer.pre_tokenizer = tk.pre_tokenizers.Metaspace()
        tokenizer.decoder = tk.decoders.Metaspace()
        alphabet = []
    else:
        tokenizer = tk.Tokenizer(tk.models.BPE())
        tokenizer.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tk.decoders.ByteLevel()
        alphabet = tk.pre_tokenizers.ByteLevel.alphabet()
    trainer = tk.trainers.BpeTrainer(vocab_size=300, special_tokens=specials, initial_alphabet=alphabet,
                                     show_progress=False)
    tokenizer.train_from_iterator([TEXT], trainer=trainer)
    if llama:
        tokenizer.post_processor = tk.processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tokenizer


def _folder(path: Path, llama: bool, **special) -> Path:
    """A tiny GPT-2 or Llama folder as transformers saves one: weights, config.json with the special ids, and the
    tokenizer through PreTrainedTokenizerFast.save_pretrained (tokenizer_config.json names its special tokens)."""
    specials = ["<unk>", "<s>", "</s>"] if llama else ["<|endoftext|>"]
    tokenizer = _bpe(specials, llama)
    vocab = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    if llama:
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=40,
                                          tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0)
        model = transformers.LlamaForCausalLM(config)
        tokens = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<unk>"}
    else:
        config = transformers.GPT2Config(vocab_size=vocab, n_positions=40, n_embd=32, n_layer=2, n_head=2,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
        tokens = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    model.save_pretrained(path)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, **{**tokens, **special}).save_pretrained(path)
    (path / "generation_config.json").unlink(missing_ok=True)  # what generate stops at is config.json's to say
    return path


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory) -> Path:
    return _folder(tmp_path_factory.mktemp("hf") / "gpt2", llama=False)


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> Path:
    return _folder(tmp_path_factory.mktemp("hf") / "llama", llama=True)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def shell(*args):
    from typer.testing import CliRunner

    from minitf_repl import cli

    return CliRunner().invoke(cli.app, [str(a) for a in args])


# --- 1. the special tokens of a folder's tokenizer, kept through :save hf: -----------------------------------
def _specials_of(path: Path):
    tok = transformers.AutoTokenizer.from_pretrained(path)
    config = transformers.AutoConfig.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    return ((tok.bos_token, tok.eos_token, tok.unk_token, tok.pad_token),
            (config.bos_token_id, config.eos_token_id, config.pad_token_id),
            model.generation_config.eos_token_id)


def test_save_hf_of_a_gpt2_folder_keeps_its_special_tokens(gpt2, tmp_path):
    """`minitf --load hf:SRC save hf:DST` wrote a tokenizer without bos/eos and a config without their ids: generate
    in transformers never stopped at <|endoftext|>."""
    result = shell("--load", f"hf:{gpt2}", "save", f"hf:{tmp_path / 'out'}")
    assert result.exit_code == 0, result.output
    assert _specials_of(tmp_path / "out") == _specials_of(gpt2) == (
        ("<|endoftext|>", "<|endoftext|>", "<|endoftext|>", None), (0, 0, None), 0)


def test_save_hf_of_a_llama_folder_keeps_its_special_tokens_and_its_bos(llama, tmp_path):
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{llama}"})
    run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    assert _specials_of(tmp_path / "out") == _specials_of(llama) == (("<s>", "</s>", "<unk>", "<unk>"), (1, 2, 0), 2)
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert tok(PROMPT)["input_ids"][0] == 1  # <s> before the text, as the folder's own tokenizer puts it


def test_older_folders_name_their_special_tokens_as_added_tokens_or_in_special_tokens_map(llama, tmp_path):
    """Llama 2's own tokenizer_config.json spells a token {"__type": "AddedToken", "content": "<s>", ...}; older
    folders keep them in special_tokens_map.json alone."""
    src = _copy(llama, tmp_path / "older")
    config = json.loads((src / "tokenizer_config.json").read_text())
    for name in ("bos_token", "eos_token", "unk_token", "pad_token"):
        config.pop(name)
    config["bos_token"] = {"__type": "AddedToken", "content": "<s>", "lstrip": False, "normalized": False,
                           "rstrip": False, "single_word": False}
    (src / "tokenizer_config.json").write_text(json.dumps(config))
    (src / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "</s>"}, "unk_token": "<unk>"}))
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{src}"})
    run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    assert _specials_of(tmp_path / "out")[0] == ("<s>", "</s>", "<unk>", None)


def test_special_tokens_and_ids_the_tokenizer_lacks_are_not_written(gpt2, tmp_path):
    """A config.json id past the embedding, or a token the tokenizer does not have (transformers would add it as a
    new token, past the model's rows), is not carried into the saved folder; the folder still loads."""
    src = _copy(gpt2, tmp_path / "odd")
    config = json.loads((src / "config.json").read_text())
    config["eos_token_id"] = config["vocab_size"] + 7
    (src / "config.json").write_text(json.dumps(config))
    tok_config = json.loads((src / "tokenizer_config.json").read_text())
    tok_config["pad_token"] = "<pad>"
    (src / "tokenizer_config.json").write_text(json.dumps(tok_config))
    s = Session(data_spec="pydoc")
    run_command(s, "load", {"name": f"hf:{src}"})
    run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["bos_token_id"] == 0 and written.get("eos_token_id") is None
    assert "pad_token" not in json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())


# --- 2. a character tokenizer refuses in transformers what minitf refuses ----------------------------------------
def test_a_saved_character_tokenizer_does_not_read_unknown_characters_as_a_real_one(tmp_path):
    """Its WordLevel unk_token was the first character ("\\n"): transformers read a tab or an é as a newline where
    minitf refuses the text; now encoding such a text fails in transformers too."""
    s = Session(data_spec="pydoc")
    run_command(s, "set", {"n_layers": 1, "d_model": 16, "n_heads": 2, "d_ff": 32, "max_seq_len": 16,
                           "batch_size": 2})
    run_command(s, "train", {"steps": 1})
    assert s.data.tokenizer.kind == "char" and "\t" not in s.data.tokenizer.itos and "é" not in s.data.tokenizer.itos
    with pytest.raises(UserError, match="not in the vocabulary"):
        s.data.tokenizer.encode("a\tb")
    run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    tok = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    text = "class Foo:\n  def b(s)"
    assert tok(text)["input_ids"] == s.data.tokenizer.encode(text)
    for unknown in ("a\tb", "café"):
        try:
            ids = tok(unknown)["input_ids"]
        except Exception:  # the tokenizers library's own error: no token for the character
            continue
        real = set(range(len(s.data.tokenizer.itos)))
        assert len(ids) != len(unknown) or not set(ids) <= real, f"{unknown!r} read as real characters: {ids}"
    t = Session(data_spec="pydoc")
    run_command(t, "load", {"name": f"hf:{tmp_path / 'out'}"})  # still read back as the characters it was
    assert t.data.tokenizer.kind == "char" and t.data.tokenizer.itos == s.data.tokenizer.itos


# --- 3. the refusal of GPT-2's other scalings of attention names the field set ------------------------------------
@pytest.mark.parametrize("field, value, loads", [("scale_attn_by_inverse_layer_idx", True, False),
                                                 ("scale_attn_weights", False, True)])
def test_a_gpt2_scaling_of_attention_is_refused_naming_the_field_set(field, value, loads, gpt2, tmp_path):
    from minitf_repl.core.hf import load_folder

    path = _copy(gpt2, tmp_path / "scaled")
    config = json.loads((path / "config.json").read_text())
    config.update({"scale_attn_weights": True, field: value})
    (path / "config.json").write_text(json.dumps(config))
    spelled = {True: "true", False: "false"}
    with pytest.raises(UserError) as e:
        load_folder(path)
    message = str(e.value)
    assert f"{field}={spelled[value]}" in message and f"{field}={spelled[loads]} only" in message, message
    other = ({"scale_attn_weights", "scale_attn_by_inverse_layer_idx"} - {field}).pop()
    assert other not in message, message


# --- 4. norm_gain=off written as gains of one ------------------------------------------------------------------
NO_GAIN = {"norm_gain": False, "n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 54, "max_seq_len": 24,
           "batch_size": 4, "norm_eps": 1e-6}


@pytest.mark.parametrize("preset, cls", [("llama", "LlamaForCausalLM"), ("gpt2", "GPT2LMHeadModel")])
def test_save_hf_writes_norm_gain_off_as_gains_of_one(preset, cls, tmp_path):
    s = Session(data_spec="pydoc")
    run_command(s, "set", {"preset": preset})
    run_command(s, "set", dict(NO_GAIN))
    assert s.model_config.norm_gain is False
    run_command(s, "train", {"steps": 2})
    r = run_command(s, "save", {"name": f"hf:{tmp_path / 'out'}"})
    assert r.architecture == {"LlamaForCausalLM": "llama", "GPT2LMHeadModel": "gpt2"}[cls]
    theirs = getattr(transformers, cls).from_pretrained(tmp_path / "out").eval()
    ids = torch.tensor([s.data.tokenizer.encode("class Foo:\n  def b(s)")])
    s.model.eval()
    with torch.no_grad():
        ours, want = s.model(ids)[0], theirs(ids).logits
    assert (ours - want).abs().max().item() <= 1e-5


# --- 5. a missing lm_head.weight is told with tie_word_embeddings -----------------------------------------------
def test_a_missing_lm_head_names_tie_word_embeddings(llama, tmp_path):
    from safetensors.torch import load_file, save_file

    from minitf_repl.core.hf import load_folder

    path = _copy(llama, tmp_path / "headless")
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UserError) as e:
        load_folder(path)
    message = str(e.value)
    assert "lm_head.weight" in message and "tie_word_embeddings" in message and "\n" not in message, message


# --- 6. the BOS token minitf does not put before a text, said in the docs ---------------------------------------
def test_the_docs_say_that_minitf_reads_text_without_a_bos_token():
    page = (Path(__file__).parent.parent / "docs" / "real-models.md").read_text()
    assert "add_special_tokens=False" in page and "BOS" in page


def test_save_hf_through_a_lab_checkpoint_keeps_the_folders_special_tokens(gpt2, tmp_path):
    """`:load hf:` -> `:save mine` -> `:load mine` -> `:save hf:`: a lab checkpoint keeps the tokenizer, not which
    token is which; the folder the weights came from is read again for them (the 47th session)."""
    ck = tmp_path / "ck"
    first = Session(data_spec="pydoc", checkpoint_dir=ck)
    run_command(first, "load", {"name": f"hf:{gpt2}"})
    run_command(first, "save", {"name": "mine"})
    again = Session(data_spec="pydoc", checkpoint_dir=ck)
    run_command(again, "load", {"name": "mine"})
    run_command(again, "save", {"name": f"hf:{tmp_path / 'out'}"})
    assert _specials_of(tmp_path / "out") == _specials_of(gpt2)  # were (None, None, None, None), (None, None, None)


def test_save_hf_of_a_checkpoint_whose_folder_is_gone_says_its_special_tokens_go_unnamed(llama, tmp_path,
                                                                                          checkpoint_dir):
    from minitf_repl.core.notices import telling

    gone = _copy(llama, tmp_path / "gone")
    s = Session(data_spec="pydoc", checkpoint_dir=checkpoint_dir)
    run_command(s, "load", {"name": f"hf:{gone}"})
    run_command(s, "save", {"name": "lab"})
    shutil.rmtree(gone)
    said = []
    again = Session(data_spec="pydoc", checkpoint_dir=checkpoint_dir)
    run_command(again, "load", {"name": "lab"})
    with telling(said.append):
        run_command(again, "save", {"name": f"hf:{tmp_path / 'out'}"})
    # was: "saved hf:...", and a folder whose tokenizer_config.json names no bos or eos, without a word
    assert any("'<s>', '</s>'" in s and "will not stop at an end token" in s for s in said), said


def test_parity_with_no_model_says_a_broken_folders_own_problem_before_offering_to_load_it(gpt2, tmp_path):
    broken = _copy(gpt2, tmp_path / "broken")
    (broken / "model.safetensors").write_bytes(b"garbage\n")
    said = shell("parity", f"hf:{broken}")
    # was "there is no model to compare yet; minitf --load hf:... parity ..." whose load then failed on this
    assert said.exit_code == 1 and "is truncated or not a safetensors file" in said.stderr, said.stderr
    assert "no model to compare yet" in shell("parity", f"hf:{gpt2}").stderr
