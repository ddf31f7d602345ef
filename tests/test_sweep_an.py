"""Upgrading: work saved by older versions of minitf, opened with this one. Each test failed before its fix.

Checkpoints were written by seven commits spread over the history (7bf9770, the first :save; 914d31e, the
variants; a50d779, Muon the default; 2c909c9, BPE and hf: exports; f1be03c, residual= and causal=; d0380ab and
e2d7b7c, later) and loaded here: the weights of every one gave the same logits as the version that wrote it. The tests
build those checkpoints the way the old code wrote them (a save of today's, with the manifest rewritten to the old
fields), so that CI needs no old version.

A checkpoint written before the `dtype` setting existed (every run was float32 then) continued its run under today's
default, dtype=auto: bfloat16 autocast on a CPU with AMX or AVX512-BF16 ("trained 2 steps ... bfloat16"), another
arithmetic than the one it was saved from, with no word of it. It now loads as float32, as it trained, and :load names
the change of setting as it names the optimizer's.

`minitf ls --json` gave each row's `model_config` as the manifest held it: a checkpoint of before norm_eps, residual
and causal (914d31e's) had none of them, so a script reading `row["model_config"]["causal"]` across a folder failed
with a KeyError on the old ones, where `load --json` gave every setting. A row now holds every setting, as a load
builds the model.

Before 0926e7f a checkpoint kept its data file's path as typed (`:data notes.txt`: "notes.txt"), relative to the
folder minitf ran in. Loaded from another folder (a $MINITF_CHECKPOINT_DIR set once for all), the file was looked for
there, and the learner was told "the data ... (notes.txt) is not available; put the file back to train" of a file
that never moved. :load and :train now say that an older minitf saved a relative path, which folder was searched, and
to start minitf in the folder it trained in or to switch the data to the file by its full path (the model is kept).

A Hugging Face model kept with :save NAME before 7421795 (`:load hf:gpt2`, `:save gpt2`, to skip reading the folder
again) has trained weights at step 0 and a manifest that does not say where they came from: loaded now, :gen said
"this model has not trained yet, so its text is random: :train first". A step-0 checkpoint without `weights_from`
whose weights are not those its seed builds now loads as weights trained elsewhere; an untrained model saved at
step 0 still reads as untrained, and a manifest of today (it has trained_window) is taken at its word.

A character model's Hugging Face folder holds its characters as a word-level tokenizer.json; before 61d564d
:load hf: read it as a subword tokenizer, and a :save of that model (2c909c9's) stored it in the checkpoint as one.
Loaded now, that tokenizer read every character it lacks as its unknown token, "\n", without a word (pydoc's 465,048
characters became 418,543 tokens, the rest newlines), and a task of its very characters was refused as "not read by
it". The checkpoint now loads as the character model it is, as the folder itself does.

A checkpoint of a byte-level BPE trained (2c909c9, before line endings were read as "\n") on a file with Windows line
endings: its tokenizer learned "\r\n" as a merge, and the model trained on the text with its "\r". Today's reading
of the file drops them; a character vocabulary said so by its "\r" and was read as then (b1bba63), but a BPE reads
any text, so :train went on with another text than the run's (84 fewer characters in 4,084) without a word. A BPE
whose merges hold a carriage return, in a manifest of before trained_window, now reads its file as it did then, and
continues exactly where it stopped (a tokenizer of today may hold such merges from elsewhere: GPT-2's does).

`minitf --load old --data "$PWD/notes.txt" train`, from the folder the old checkpoint trained in (its data kept as
"notes.txt"), was refused: "checkpoint old was trained on 'notes.txt', not '/.../notes.txt'; drop --data", of the
very file. The two names of one file now agree, as `--data notes.txt` does with a checkpoint of today.

A checkpoint of pydoc whose characters the pydoc here no longer has (pydoc is this Python's documentation; and what
2c909c9 saved as a Hugging Face model's data was the session's corpus) said "cannot be used (its vocabulary changed
since the checkpoint was saved); put the original file back to train": there is no file to put back. It now says the
data is built in and its text here has other characters, and to train a new model on it or choose other data.
"""

import os

import pytest

from minitf_repl.core import checkpoint as ckpt
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.session import Session

from checkpoint_worker import rewrite_manifest
from minitf_repl.core.bpe import train_bpe
from minitf_repl.core.errors import DataError

from test_cli import invoke
from test_commands import TEXT, TINY, run

# The training settings the first checkpoints (7bf9770) wrote: the rest (optimizer, dtype, compile, fast_path) came
# later, and a manifest of then has none of them.
FIRST_TRAIN_FIELDS = ("steps", "batch_size", "lr", "min_lr_ratio", "warmup_steps", "weight_decay", "grad_clip",
                      "eval_every", "eval_batches", "seed")


def saved_session(tmp_path, data: str = "sort:4", **train) -> Session:
    """A tiny session trained a few steps (AdamW, float32: what every run was before those settings existed)."""
    train = {"steps": 4, "batch_size": 4, "eval_every": 2, "eval_batches": 1, "optimizer": "adamw",
             "dtype": "float32", **train}
    s = Session(ModelConfig(**TINY), TrainConfig(**train), data_spec=data, device_name="cpu",
                checkpoint_dir=tmp_path)
    run(s, ":train")
    return s


def as_first_written(manifest: dict) -> None:
    """Rewrite a manifest to the fields 7bf9770's save wrote (core/checkpoint.py of then)."""
    for key in ("origin", "weights_from"):
        manifest.pop(key, None)
    t = manifest["trainer"]
    for key in ("run_constant_lr", "trained_window"):
        t.pop(key, None)
    t["train_config"] = {k: v for k, v in t["train_config"].items() if k in FIRST_TRAIN_FIELDS}
    for row in t["history"]:
        for key in ("aux_loss", "compile_seconds", "val_bpc"):
            row.pop(key, None)


def fresh_session(tmp_path, **train) -> Session:
    return Session(ModelConfig(**TINY), TrainConfig(**train), data_spec="sort:4", device_name="cpu",
                   checkpoint_dir=tmp_path)


# --- dtype: a checkpoint from before the setting trained in float32 ------------------------------------------------
def test_a_checkpoint_from_before_dtype_continues_in_float32_not_todays_auto(tmp_path):
    s = saved_session(tmp_path)
    run(s, ":save old")
    rewrite_manifest(tmp_path / "old", as_first_written)

    later = fresh_session(tmp_path, dtype="auto")
    result = run(later, ":load old")
    assert later.train_config.dtype == "float32" and later.trainer.config.dtype == "float32"
    assert later.train_config.optimizer == "adamw"
    assert result.train_changed["dtype"] == ("auto", "float32")  # said as the other settings the checkpoint brings are


# --- ls --json: every model setting, also of a checkpoint from before some of them ----------------------------------
# The model settings 914d31e's checkpoints wrote: residual, causal and norm_eps came after.
VARIANTS_MODEL_FIELDS = ("vocab_size", "max_seq_len", "d_model", "n_heads", "n_layers", "d_ff", "dropout", "activation",
                         "pos_encoding", "rope_base", "norm", "norm_placement", "norm_gain", "qk_norm", "n_kv_heads",
                         "tie_embeddings", "bias", "n_experts", "experts_per_token", "moe_aux_weight", "attention")


def test_ls_gives_every_model_setting_of_a_checkpoint_that_predates_some(tmp_path):
    s = saved_session(tmp_path)
    run(s, ":save old")
    rewrite_manifest(tmp_path / "old", lambda m: m.update(
        model_config={k: v for k, v in m["model_config"].items() if k in VARIANTS_MODEL_FIELDS}))
    [row] = [r for r in ckpt.list_checkpoints(tmp_path) if r.name == "old"]
    assert row.error is None
    assert row.model_config == ModelConfig(**TINY, vocab_size=s.model_config.vocab_size).to_dict()
    assert row.model_config["causal"] is True and row.model_config["norm_eps"] == 1e-5


# --- a data file's path kept relative by an older minitf ----------------------------------------------------------
def test_a_relative_data_path_of_an_older_checkpoint_read_from_another_folder_says_so_and_what_to_do(
        tmp_path, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir(), elsewhere.mkdir()
    (project / "notes.txt").write_text(TEXT, encoding="utf-8")
    monkeypatch.chdir(project)
    s = saved_session(tmp_path / "ck", data="notes.txt")
    run(s, ":save old")
    rewrite_manifest(tmp_path / "ck" / "old", lambda m: m.update(data_spec="notes.txt"))  # as 7bf9770 kept it

    monkeypatch.chdir(elsewhere)
    later = fresh_session(tmp_path / "ck")
    result = run(later, ":load old")
    assert "older minitf saved it as a path relative to the folder it ran in" in result.data_missing
    assert f"there is no notes.txt in {os.getcwd()}" in result.data_missing
    with pytest.raises(DataError) as e:
        run(later, ":train steps=1")
    assert "put the file back" not in str(e.value)  # it was never moved
    assert "start minitf in the folder it trained in, or switch the data to that file by its full path" in str(e.value)

    run(later, f":data {project / 'notes.txt'}")  # what it says to do: the model stays, and trains
    assert later.trainer.step == 4
    run(later, ":train steps=1")
    assert later.trainer.step == 5

    monkeypatch.chdir(project)  # from the folder it trained in, the old path reads as it did
    again = fresh_session(tmp_path / "ck")
    assert run(again, ":load old").data_missing is None


# --- a Hugging Face model kept as a checkpoint by an older minitf ---------------------------------------------------
def before_weights_from(manifest: dict) -> None:
    """Rewrite a manifest to what a save of before 7421795 wrote: no weights_from, and no trained_window (2a8bcea)."""
    manifest.pop("weights_from", None)
    manifest["trainer"].pop("trained_window", None)


def test_an_older_checkpoint_of_a_hugging_face_model_is_not_called_untrained(tmp_path):
    first = saved_session(tmp_path)
    run(first, f":save hf:{tmp_path / 'hf'}")
    second = fresh_session(tmp_path)
    run(second, f":load hf:{tmp_path / 'hf'}")
    run(second, ":save gpt")
    rewrite_manifest(tmp_path / "gpt", before_weights_from)  # as a save before 7421795 wrote it

    third = fresh_session(tmp_path)
    run(third, ":load gpt")
    assert third.trainer.step == 0 and not third.untrained  # was: "not trained yet, so its text is random"
    assert third.weights_from == "checkpoint gpt"

    untrained = fresh_session(tmp_path)
    run(untrained, ":params")  # builds the model, at step 0
    run(untrained, ":save blank")
    rewrite_manifest(tmp_path / "blank", before_weights_from)
    again = fresh_session(tmp_path)
    run(again, ":load blank")
    assert again.untrained  # a model saved before it trained holds what its seed builds: still called untrained

    run(second, ":save today")  # a manifest of today says where its weights came from, and that is all
    rewrite_manifest(tmp_path / "today", lambda m: m.pop("weights_from"))
    fourth = fresh_session(tmp_path)
    run(fourth, ":load today")
    assert fourth.untrained  # not second-guessed by its weights


# --- a character model's tokenizer that an older minitf stored as a subword one ----------------------------------
def test_a_character_tokenizer_stored_as_a_subword_one_by_an_older_minitf_loads_as_characters(tmp_path):
    first = saved_session(tmp_path)
    run(first, f":save hf:{tmp_path / 'hf'}")
    second = fresh_session(tmp_path)
    run(second, f":load hf:{tmp_path / 'hf'}")
    run(second, ":save kept")
    folder_tokenizer = (tmp_path / "hf" / "tokenizer.json").read_text(encoding="utf-8")
    # as 2c909c9 wrote it: the folder's tokenizer.json as a subword tokenizer, and no characters of its own
    rewrite_manifest(tmp_path / "kept", lambda m: m.update(tokenizer={"kind": "bpe", "json": folder_tokenizer},
                                                            vocab="", data_spec="sort:4"))

    later = fresh_session(tmp_path)
    result = run(later, ":load kept")
    assert later.data.tokenizer.kind == "char" and result.data_missing is None  # the task of its characters trains
    assert later.data.tokenizer.vocab == first.data.tokenizer.vocab
    run(later, ":train steps=1")
    assert later.trainer.step == 1


# --- a BPE trained on a file with Windows line endings, as they were read then --------------------------------------
def test_a_bpe_checkpoint_trained_on_windows_line_endings_reads_its_file_as_it_did_then(tmp_path):
    raw = TEXT.replace("\n", "\r\n\r\n") * 3  # paragraphs: "\r\n\r\n" is one piece, and its pairs merge
    path = tmp_path / "crlf.txt"
    path.write_bytes(raw.encode("utf-8"))
    s = saved_session(tmp_path, data=str(path))
    run(s, ":set tokenizer=bpe:300")  # trained on the text as read today, "\n" alone
    run(s, ":train steps=2")
    run(s, ":save old")
    old_bpe = train_bpe(raw, 300)  # as 2c909c9 trained it: on the text with its "\r\n"
    assert old_bpe.own_size == s.data.tokenizer.own_size  # the model's vocab_size fits it
    rewrite_manifest(tmp_path / "old", lambda m: (m.update(tokenizer={"kind": "bpe", "json": old_bpe.vocab}),
                                                  m["trainer"].pop("trained_window")))

    later = fresh_session(tmp_path)
    run(later, ":load old")
    assert later.data.text == raw  # its "\r" kept, as the run read them (was: without them)
    assert later.data.tokenizer.vocab == old_bpe.vocab
    run(s, ":load old")
    assert s.data.text == raw

    run(s, ":save today")  # a manifest of today: its run read the file as today reads it, whatever its merges
    rewrite_manifest(tmp_path / "today", lambda m: m.update(tokenizer={"kind": "bpe", "json": old_bpe.vocab}))
    fresh = fresh_session(tmp_path)
    run(fresh, ":load today")
    assert fresh.data.text == raw.replace("\r\n", "\n")


# --- --load with --data naming the old relative file by its full path ---------------------------------------------
def test_load_with_data_by_full_path_agrees_with_an_older_checkpoints_relative_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text(TEXT, encoding="utf-8")
    s = saved_session(tmp_path / "ck", data="notes.txt")
    run(s, ":save old")
    rewrite_manifest(tmp_path / "ck" / "old", lambda m: m.update(data_spec="notes.txt"))  # as 7bf9770 kept it

    result = invoke("--checkpoint-dir", str(tmp_path / "ck"), "--load", "old", "--data", str(tmp_path / "notes.txt"),
                    "config")
    assert result.exit_code == 0, result.output  # was: "trained on 'notes.txt', not '/.../notes.txt'; drop --data"
    other = invoke("--checkpoint-dir", str(tmp_path / "ck"), "--load", "old", "--data", "sort:4", "config")
    assert other.exit_code == 1 and "drop --data" in other.stderr  # another data is still a contradiction


# --- a built-in corpus whose characters differ now ---------------------------------------------------------------
def test_a_builtin_corpus_with_other_characters_now_is_not_a_file_to_put_back(tmp_path):
    s = saved_session(tmp_path, data="pydoc")
    run(s, ":save old")
    vocab = s.data.tokenizer.vocab
    other = vocab.replace(vocab[-1], "\u2603")  # one character pydoc has not: as another Python's pydoc would
    rewrite_manifest(tmp_path / "old", lambda m: m.update(vocab=other))

    later = fresh_session(tmp_path)
    result = run(later, ":load old")
    assert "pydoc is built in, and its text here has other characters than the model's" in result.data_missing
    with pytest.raises(DataError) as e:
        run(later, ":train steps=1")
    assert "put the original file back" not in str(e.value)
    assert str(e.value).endswith("train a new model on it, or choose data with the model's characters")
