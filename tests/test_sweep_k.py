"""What a user's-eye sweep of real models (Hugging Face GPT-2 and Llama folders) found wrong: each test failed before
its fix.

A Llama with Llama 2's kind of tokenizer (SentencePiece's: a "▁" for each space, a decoder that drops the space a
whole text starts with) wrote `:gen`'s text without the spaces between its words ("dog.the quick"), since each few
tokens were decoded as if they began a text; the views, :checks and :mistakes showed "▁the" as "the" and "▁" as
nothing; and the tokenizer was called "byte-level BPE". A checkpoint of a folder's model saved on a task loaded
with "the data is not available ... put the file back"; a folder `:save hf:` wrote from a task's model loaded back
on that task could not train ("the data is a task of characters; choose text data"). `:parity` said nothing of a
head switched off by `:ablate` and, against another folder, "load the folder first with hf:PATH". A Git LFS
pointer in place of a file was "truncated" with a header of 2,336,927,755,350,992,246 bytes; the Hugging Face
cache's models--NAME folder had "no config.json" with no word of its snapshots/REVISION. A Llama config with
rope_scaling of the "default" type (plain RoPE) was refused as scaling. A long token of the vocabulary (GPT-2 has
64 dashes in one) squeezed :step's, :lens's, :embed's and :score's tables until their numbers were gone. A loaded
model larger than the lab trains (TinyLlama) refused every `:set` ("lower d_model, d_ff or n_layers", even for
temperature), `:train` told to lower its sizes (which would throw its weights away), and `:save NAME` wrote a
checkpoint that `:load` refused. "<unk>" written in a text (WikiText's way) was an unknown character.
"""

import pytest

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.errors import UserError
from minitf_repl.session import Session
from test_cli import assert_one_error_line, invoke
from test_commands import run
from test_render import plain

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

TEXT = ("the quick brown fox jumps over the lazy dog. " * 40 + "First Citizen: Before we proceed any further, hear me "
        "speak. All: Speak, speak. ") * 5


def sentencepiece_tokenizer():
    """A tokenizer.json as Llama 2's: BPE with byte fallback, a normalizer that writes each space (and one before the
    text) as "▁", no pre-tokenizer, and a decoder that turns "▁" back into spaces and strips the first."""
    tk = tokenizers
    t = tk.Tokenizer(tk.models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    t.pre_tokenizer = tk.pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")  # words apart, to train
    specials = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    t.train_from_iterator([TEXT], tk.trainers.BpeTrainer(vocab_size=330, special_tokens=specials, show_progress=False))
    t.normalizer = tk.normalizers.Sequence([tk.normalizers.Prepend("▁"), tk.normalizers.Replace(" ", "▁")])
    t.pre_tokenizer = None
    t.decoder = tk.decoders.Sequence([tk.decoders.Replace("▁", " "), tk.decoders.ByteFallback(), tk.decoders.Fuse(),
                                      tk.decoders.Strip(" ", 1, 0)])
    return t


@pytest.fixture(scope="module")
def llama2(tmp_path_factory):
    import torch

    torch.manual_seed(0)
    tokenizer = sentencepiece_tokenizer()
    config = transformers.LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, intermediate_size=48,
                                      num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                                      max_position_embeddings=32, tie_word_embeddings=False)
    path = tmp_path_factory.mktemp("hf") / "llama2"
    transformers.LlamaForCausalLM(config).eval().save_pretrained(path)
    tokenizer.save(str(path / "tokenizer.json"))
    return path


def loaded(folder) -> Session:
    s = Session(data_spec="pydoc", device_name="cpu")
    run(s, f":load hf:{folder}")
    return s


# --- a decoder that drops a text's first space -------------------------------------------------------------------
def test_gen_keeps_the_spaces_that_llama_2s_decoder_drops_at_a_texts_start(llama2, monkeypatch):
    s = loaded(llama2)
    tokenizer = s.data.tokenizer
    words = tokenizer.encode("the quick brown fox")  # each word's token starts with "▁"
    assert len(words) == 4 and tokenizer.decode(words[1:2]) == "quick"  # alone: the space is dropped

    def generate(model, ids, settings, done=None):
        yield from words

    monkeypatch.setattr("minitf_repl.core.generate.generate", generate)
    result = run(s, ':gen "over the lazy dog." n=4')
    assert result.text == " the quick brown fox"
    assert "over the lazy dog. the quick brown fox" in plain(result)


def test_the_views_show_a_sentencepiece_token_with_its_space(llama2):
    s = loaded(llama2)
    tok = run(s, ':tok "the quick"')
    assert tok.tokens == [" the", " quick"] and "␣the ␣quick" in plain(tok)
    itos = s.data.tokenizer.itos
    assert itos[s.data.tokenizer.tokenizer.token_to_id("▁")] == " "  # was "", a token that showed as nothing
    assert itos[s.data.tokenizer.tokenizer.token_to_id("<0xC3>")] == "\ufffd"  # a byte of a longer character


# --- a checkpoint of a loaded model whose data was the folder's tokenizer ---------------------------------------
def test_a_checkpoint_saved_on_a_task_loads_with_the_folders_tokenizer_not_missing_data(llama2, checkpoint_dir):
    s = Session(data_spec="sort", device_name="cpu")
    run(s, f":load hf:{llama2}")
    run(s, ":save kept")
    t = Session(data_spec="pydoc", device_name="cpu")
    loaded = run(t, ":load kept")
    assert loaded.data_missing == f"hf:{llama2}'s tokenizer only ({t.data.tokenizer.describe()}): generation " \
                                  "works, training needs text data"  # was: "the vocabulary of hf:... only (the data is
    with pytest.raises(UserError, match="; choose text data"):  # not available)", and "put the file back"
        run(t, ":train steps=1")
    run(t, ":data pydoc")  # as it says: the text is read by the model's tokenizer, and the model trains
    assert run(t, ":train steps=1").steps == 1 and t.data.tokenizer.vocab == s.data.tokenizer.vocab


def test_llama_2s_kind_of_tokenizer_is_not_called_byte_level(llama2):
    s = Session(data_spec="pydoc", device_name="cpu")
    loaded = run(s, f":load hf:{llama2}")
    assert loaded.tokenizer == "BPE with byte fallback, 330 tokens"  # was "byte-level BPE", which :tok merges=on
    assert "not a plain byte-level BPE" in plain(run(s, ':tok "the" merges=on'))  # then said it was not


# --- a folder written from a task's model, loaded back on that task ---------------------------------------------
def test_a_tasks_model_saved_as_a_folder_loads_back_on_its_task_and_trains(tmp_path):
    first = Session(ModelConfig(d_model=32, n_heads=2, n_layers=1, d_ff=64, max_seq_len=32),
                    TrainConfig(steps=2, batch_size=4), data_spec="sort", device_name="cpu")
    run(first, ":train")
    run(first, f":save hf:{tmp_path / 'sort'}")
    s = Session(data_spec="sort", device_name="cpu")
    loaded = run(s, f":load hf:{tmp_path / 'sort'}")
    assert loaded.data_missing is None and loaded.data_spec == "sort"  # was: "tokenizer only ... needs text data"
    assert s.data.tokenizer.vocab == first.data.tokenizer.vocab and hasattr(s.data, "grade")
    assert run(s, ":train steps=1").steps == 1  # was: "this model reads characters, 12 tokens and the data is a
    # task of characters; choose text data"
    shell = invoke("--data", "sort", "--load", f"hf:{tmp_path / 'sort'}", "train", "--steps", "1")
    assert shell.exit_code == 0 and "tokenizer only" not in shell.output, shell.output


# --- :parity while :ablate has a part switched off ---------------------------------------------------------------
def test_parity_with_a_head_switched_off_says_so(llama2):
    s = loaded(llama2)
    run(s, ":ablate head=0.1")
    result = run(s, f":parity hf:{llama2}")
    assert result.first_diverging == "blocks.0" and result.ablations == ["head 0.1"]
    assert "switched off now: head 0.1 (:ablate off puts the model back)" in plain(result)  # was: only "the models
    run(s, ":ablate off")  # part at blocks.0", as if a weight differed
    assert run(s, f":parity hf:{llama2}").first_diverging is None


def test_parity_against_another_folder_names_the_load_that_fixes_it(llama2, tmp_path):
    s = Session(data_spec="pydoc", device_name="cpu")
    run(s, f":load hf:{llama2}")
    run(s, ":set n_layers=2")
    run(s, f":save hf:{tmp_path / 'two'}")
    with pytest.raises(UserError, match=f"n_layers 2 here, 1 there\\); :load hf:{llama2} loads it, then :parity "
                                        f"hf:{llama2} compares them$"):  # was: "load the folder first with hf:PATH"
        run(s, f":parity hf:{llama2}")
    line = assert_one_error_line(invoke("--load", f"hf:{tmp_path / 'two'}", "parity", f"hf:{llama2}"))
    assert line.endswith(f"; minitf --load hf:{llama2} parity hf:{llama2} compares the folder's own model"), line


# --- a folder cloned without Git LFS -------------------------------------------------------------------------------
POINTER = "version https://git-lfs.github.com/spec/v1\noid sha256:{}\nsize 548105171\n".format("ab" * 32)


@pytest.mark.parametrize("name", ["model.safetensors", "tokenizer.json"])
def test_a_git_lfs_pointer_in_place_of_a_file_says_so(name, llama2, tmp_path):
    import shutil

    folder = tmp_path / "cloned"
    shutil.copytree(llama2, folder)
    (folder / name).write_text(POINTER)
    line = assert_one_error_line(invoke("--load", f"hf:{folder}", "gen", "hi"))
    assert line == (f"error: --load: {folder / name} is a Git LFS pointer, not the file itself (the real one has "
                    "548,105,171 bytes): the folder was cloned without Git LFS; run git lfs pull in it, or download "
                    "the files themselves")  # was: "truncated ... its header claims 2,336,927,755,350,992,246 bytes
    # ...; download it again", and "not a tokenizer the tokenizers library reads (expected value at line 1 column 1)"


def test_the_hugging_face_cache_entry_of_a_model_names_its_snapshot_folder(llama2, tmp_path):
    import shutil

    entry = tmp_path / "models--tiny-llama"
    snapshot = entry / "snapshots" / "607a30d783dfa663caf39e06633721c8d4cfcd7e"
    shutil.copytree(llama2, snapshot)
    (entry / "refs").mkdir()
    line = assert_one_error_line(invoke("--load", f"hf:{entry}", "gen", "hi"))
    assert line == (f"error: --load: {entry} has no config.json, but snapshots/{snapshot.name} in it has one; give "
                    f"the model's own folder, e.g. hf:{snapshot}")  # was: "give a Hugging Face model folder"
    s = Session(data_spec="pydoc", device_name="cpu")
    assert run(s, f":load hf:{snapshot}").architecture == "llama"  # as it says


def test_checks_show_the_batch_a_sentencepiece_token_with_its_space(llama2, tmp_path):
    s = Session(data_spec="pydoc", device_name="cpu")
    (tmp_path / "fox.txt").write_text(TEXT)
    run(s, f":data {tmp_path / 'fox.txt'}")
    run(s, f":load hf:{llama2}")
    batch = run(s, ":checks batch").batch
    assert any(piece.startswith(" ") for piece in batch.x)  # was: each token decoded alone, its space dropped
    assert "".join(batch.x) in " " + TEXT * 2


def test_mistakes_show_a_sentencepiece_token_with_its_space(llama2, tmp_path):
    s = Session(data_spec="pydoc", device_name="cpu")
    (tmp_path / "fox.txt").write_text("the quick brown fox jumps over the lazy dog. " * 100)  # a token a word
    run(s, f":data {tmp_path / 'fox.txt'}")
    run(s, f":load hf:{llama2}")
    hardest = run(s, ":mistakes").text.hardest
    from minitf_repl.core.bpe import shown_piece

    # each as the views name it: a byte-fallback token by its byte (\xe2), not "�" (test_sweep_ab)
    named = {shown_piece(s.data.tokenizer, i) for i in range(s.data.tokenizer.vocab_size)}
    assert all(row.actual in named and row.guess in named for row in hardest)
    assert all(row.actual.startswith(" ") for row in hardest)  # was: each decoded alone, its space dropped


# --- RoPE of the "default" type, as an older config writes it -----------------------------------------------------
@pytest.mark.parametrize("scaling", [{"rope_type": "default"}, {"type": "default"}])
def test_a_rope_scaling_of_the_default_type_is_plain_rope(scaling, llama2, tmp_path):
    import json
    import shutil

    folder = tmp_path / "older"
    shutil.copytree(llama2, folder)
    config = json.loads((folder / "config.json").read_text())
    theta = config.pop("rope_parameters")["rope_theta"]
    config.update(rope_theta=theta, rope_scaling=scaling)  # transformers reads it as plain RoPE of base rope_theta
    (folder / "config.json").write_text(json.dumps(config))
    s = Session(data_spec="pydoc", device_name="cpu")
    run(s, f":load hf:{folder}")  # was: "the model uses RoPE scaling (default), which the lab's model does not compute"
    assert s.model_config.rope_base == theta
    assert run(s, f":parity hf:{folder}").first_diverging is None


# --- a long token in a table -----------------------------------------------------------------------------------
LONG = " " + "-" * 64  # GPT-2 has tokens of 64 dashes, of 64 equals signs, ...


def test_a_long_token_leaves_the_views_tables_readable():
    from minitf_repl.commands.generate import StepResult, StepRow
    from minitf_repl.commands.inside import EmbedResult, LensResult, LensRow, ScoreResult

    rows = [LensRow(name, [LONG, " the", ","], [0.31, 0.2, 0.1]) for name in ("embed", "blocks.0", "blocks.11")]
    lens = plain(LensResult("The cat", None, rows), width=80)
    assert "blocks.11 ␣--------------… 0.31" in lens  # was: "blocks… ␣------...--- 0…"
    embed = EmbedResult([" the"], [[LONG, " a", " an", " this", " that"]], [[0.51, 0.4, 0.3, 0.2, 0.1]], True, None,
                        None, 0, False)
    assert "␣the ␣--------------… 0.51 ␣a 0.40" in plain(embed, width=80)  # was: "␣the ␣---...-- ␣a 0… ␣an…"
    assert "a wider terminal shows 2 more neighbours" in plain(embed, width=50)  # rather than cut them
    step = StepResult("The", 0.8, None, None, 1, [StepRow(7, LONG, 3.0, 0.0, True, True, 0.612, True)], 50257, 50257,
                      50257, LONG, 7, 0.612, 1)
    step = plain(step, width=80)
    assert "␣--------------… 3.000 0.000 off off 0.612" in step  # was: the token alone; off: no filter (s59)
    score = ScoreResult(LONG + " x", [LONG, " x"], [0.25], [1.386], [LONG], [0.5], [True], 1.386, 10.8, unit="token")
    assert "0 ␣--------------… ␣x 0.250 1.386 ␣--------------… 0.50" in plain(score, width=80)  # was: "0… 1…"


# --- a loaded model larger than the lab trains -------------------------------------------------------------------
def test_a_loaded_model_too_large_for_a_checkpoint_is_refused_at_save_not_at_load(llama2, checkpoint_dir, tmp_path,
                                                                                   monkeypatch):
    from minitf_repl.core import sizes

    s = loaded(llama2)
    monkeypatch.setattr(sizes, "MAX_PARAMS", s.model.num_parameters() - 1)  # TinyLlama's 1.1B against the 500M
    with pytest.raises(UserError, match=r"^a checkpoint of this model would not load back \(that model would have "
                                        r"about 0M parameters, more than this lab's limit of 0M\); :save hf:PATH "
                                        r"writes its weights as a folder instead$"):
        run(s, ":save big")  # was: saved, and `:load big` said "it asks for more than this lab builds"
    assert not (checkpoint_dir / "big").exists()
    run(s, f":save hf:{tmp_path / 'big'}")  # as it says
    assert run(Session(data_spec="pydoc", device_name="cpu"), f":load hf:{tmp_path / 'big'}").step == 0


def test_settings_that_build_nothing_are_taken_on_a_loaded_model_larger_than_the_lab_trains(llama2, monkeypatch):
    from minitf_repl.core import sizes

    s = loaded(llama2)
    monkeypatch.setattr(sizes, "MAX_PARAMS", s.model.num_parameters() - 1)  # TinyLlama's 1.1B against the 500M
    model = s.model
    run(s, ":set temperature=0.5 top_k=5")  # was: "that model would have about 0M parameters, more than this lab's
    run(s, ":set lr=1e-4 causal=on")  # limit of 0M; lower d_model, d_ff or n_layers", for any setting at all
    assert s.gen_config.temperature == 0.5 and s.train_config.lr == 1e-4 and s.model is model
    with pytest.raises(UserError, match="more than this lab's limit"):
        run(s, ":set n_layers=2 d_model=64")  # a model built anew is held to the limit
    assert s.model is model and s.model_config.n_layers == 1


def test_train_on_a_loaded_model_larger_than_the_lab_trains_says_it_is_the_folders(llama2, monkeypatch):
    from minitf_repl.core import sizes

    s = loaded(llama2)
    monkeypatch.setattr(sizes, "MAX_PARAMS", s.model.num_parameters() - 1)
    with pytest.raises(UserError, match=f"^the model from hf:{llama2} has about 0M parameters, more than this lab's "
                                        "limit of 0M for training; it generates and every view reads it, and a "
                                        "smaller model trains$"):  # was: "...; lower d_model, d_ff or n_layers",
        run(s, ":train steps=1")  # which would have thrown the loaded weights away


def test_unk_written_in_a_text_is_the_token_not_an_unknown_character(llama2, tmp_path):
    s = Session(data_spec="pydoc", device_name="cpu")
    (tmp_path / "wiki.txt").write_text(TEXT.replace("lazy", "<unk>"))  # as WikiText writes a rare word
    run(s, f":data {tmp_path / 'wiki.txt'}")
    loaded = run(s, f":load hf:{llama2}")
    assert loaded.data_missing is None  # was: "training needs text it reads (... characters this tokenizer does not
    assert "<unk>" in run(s, ':tok "the <unk> dog"').tokens  # know (they read as <unk>))"
