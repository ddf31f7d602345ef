"""What a user's-eye sweep of the package used as a library (a script or a notebook, no REPL) found: each test failed
before its fix.

`model(idx, targets)` given what a learner first tries answered with torch's own errors deep inside: one sequence
without its batch dimension was "not enough values to unpack (expected 2, got 1)", float ids "Expected tensor for
argument #1 'indices' to have one of the following scalar types", an id outside the vocabulary "index out of range in
self" (a device-side assert on a GPU), int32 targets "expected target dtype to be Long or Byte", targets of another
shape a reshape error, and idx on another device than the model a device mismatch from the embedding. Worse, targets
of the wrong shape but the same size ((T,) for (1, T), or (3, 2) for (2, 3)) gave a loss without a word, computed
against the wrong positions. A KV cache of another layer count, too short or of another batch size gave an IndexError
or a size mismatch. Each is now one DataError or DeviceError naming the argument and the fix.

The engine's functions given something else than they need failed on an attribute: generate, Trainer, evaluate,
save_checkpoint and seven of the views' functions given a plain nn.Module ("'Plain' object has no attribute
'causal'"), generate given text or a (1, T) tensor, and every generate error waited for the first next(); a Trainer
given a data name, a dict config, data with more tokens than the model's vocabulary, or a device other than the
model's; restore and Trainer given a device name the shell takes ('auto'); save_checkpoint without a trainer, with
another model's trainer (saved silently), or given the tokenizer and the dataset for the vocabulary and the data's
name; load_data given a pathlib.Path; MiniTransformerLM given a dict; FeedForward given a swiglu config (KeyError);
ModelConfig(block_size=64) and TrainConfig().replace(max_iters=3), the nanoGPT spellings `:set` takes.
CharTokenizer.decode read the targets' -1 as the last character without a word, and a task's batches and questions
of a split named 'test' were its training ones. Trainer.run() left a model in train mode that a script had put in eval
mode. A model compiled with torch.compile was saved under the wrapper's names and never loaded back. docs/code.md's
Python example failed as written (idx and targets undefined), help(MiniTransformerLM) showed nn.Module's generic
docstring, help(load_data) printed a carriage return, help(inside.next_token_pipeline) named a generate call
that raises, and help(ModelConfig) called its defaults the model trained on pydoc, whose vocabulary its vocab_size
cannot hold. model.set_length(0) broke the model before refusing the window (and a learned table's refusal was an
assert), and ModelConfig(causal='off') was told that causal "must be on or off".
"""

import inspect
import pickle
import re
from pathlib import Path

import pytest
import torch

import minitf_repl
from minitf_repl import (CharTokenizer, FeedForward, GenConfig, KVCache, MiniTransformerLM, ModelConfig, TrainConfig,
                         Trainer, generate, load_data)
from minitf_repl.core import checkpoint as ckpt, inside
from minitf_repl.core.errors import CheckpointError, ConfigError, DataError, DeviceError
from minitf_repl.core.model import feed_forward

SIZES = dict(vocab_size=11, max_seq_len=8, d_model=16, n_heads=2, n_layers=1, d_ff=32)


def tiny(**changes) -> MiniTransformerLM:
    torch.manual_seed(0)
    return MiniTransformerLM(ModelConfig(**{**SIZES, **changes})).eval()


# --- forward(idx, targets) at its edges ------------------------------------------------------------------------
@pytest.mark.parametrize("idx, words", [
    (torch.tensor([1, 2, 3]), "idx must have shape (B, T), got (3,); add the batch dimension: idx.unsqueeze(0)"),
    (torch.tensor(3), "idx must have shape (B, T), got ()"),
    (torch.zeros(1, 2, 3, dtype=torch.long), "idx must have shape (B, T), got (1, 2, 3)"),
    (torch.zeros(1, 3), "idx must hold whole token ids, got dtype float32; convert it: idx.long()"),
    (torch.zeros(1, 3, dtype=torch.bool), "got dtype bool"),
    (torch.tensor([[1, 11]]), "idx holds 11, not a token id of this model (vocab_size=11: ids 0..10)"),
    (torch.tensor([[-1, 2]]), "idx holds -1, not a token id of this model"),
    ([[1, 2]], "idx must be a tensor of token ids, got list"),
])
def test_forward_names_what_is_wrong_with_idx_and_the_fix(idx, words):
    kind = TypeError if not isinstance(idx, torch.Tensor) else DataError  # an object of another kind: docs/code.md
    with pytest.raises(kind) as error:
        tiny()(idx)
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_forward_reads_ids_of_any_integer_dtype_as_int64_would(dtype):
    model, idx = tiny(), torch.tensor([[1, 2, 3]])
    expected, loss = model(idx, idx)
    logits, same = model(idx.to(dtype), idx.to(dtype))
    assert torch.equal(logits, expected) and torch.equal(loss, same)


@pytest.mark.parametrize("targets, words", [
    (torch.tensor([[1, 2]]), "targets have shape (1, 2) but idx has (1, 3)"),
    (torch.tensor([1, 2, 3]), "targets must have shape (B, T), got (3,)"),  # same size: used to give a loss
    (torch.tensor([[1., 2., 3.]]), "targets must hold whole token ids, got dtype float32"),
    (torch.tensor([[1, 2, 11]]), "targets holds 11, not a token id of this model (vocab_size=11: ids 0..10, or -1"),
    (torch.tensor([[1, 2, -2]]), "targets holds -2"),
])
def test_forward_names_what_is_wrong_with_targets(targets, words):
    with pytest.raises(DataError) as error:
        tiny()(torch.tensor([[1, 2, 3]]), targets)
    assert words in str(error.value)


def test_targets_transposed_to_the_same_size_are_refused_not_scored_against_the_wrong_positions():
    with pytest.raises(DataError, match=r"targets have shape \(3, 2\) but idx has \(2, 3\)"):
        tiny()(torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 2, dtype=torch.long))


def test_targets_of_minus_one_are_not_counted_as_the_docs_say():
    model, idx = tiny(), torch.tensor([[1, 2, 3]])
    targets = torch.tensor([[-1, 4, -1]])
    logits, loss = model(idx, targets)
    assert torch.allclose(loss, torch.nn.functional.cross_entropy(logits[0, 1:2], torch.tensor([4])))


def test_forward_on_another_device_than_the_model_says_where_to_move_idx():
    model = tiny().to("meta")  # a second device every machine has
    with pytest.raises(DeviceError, match=r"idx is on cpu but the model is on meta; move it: idx.to\('meta'\)"):
        model(torch.tensor([[1, 2]]))


# --- generate from a script ------------------------------------------------------------------------------------
class Plain(torch.nn.Module):
    """What a learner builds first: an embedding and a head, no config, no blocks."""

    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(11, 8), torch.nn.Linear(8, 11)

    def forward(self, idx, targets=None):
        return self.head(self.embed(idx)), None


def test_generate_given_a_plain_module_says_it_needs_a_minitransformerlm_at_the_call():
    with pytest.raises(TypeError, match="generate needs a MiniTransformerLM .* got Plain; build one"):
        generate(Plain(), [1, 2], GenConfig(n=3))  # no list(): the call itself refuses


@pytest.mark.parametrize("prompt, error, words", [
    ("hello", TypeError, "generate continues token ids, not text; encode it first: tokenizer.encode(text)"),
    (torch.tensor([[1, 2]]), DataError, "shape (1, 2); pass one sequence's ids"),
    ([1, 11], DataError, "the prompt holds 11, not a token id of this model (vocab_size=11: ids 0..10)"),
    ([-1], DataError, "the prompt holds -1"),
    ([1.5], DataError, "the prompt must be a list of token ids (whole numbers)"),
    ([], DataError, "the prompt is empty"),
])
def test_generate_names_what_is_wrong_with_the_prompt_at_the_call(prompt, error, words):
    with pytest.raises(error) as raised:
        generate(tiny(), prompt, GenConfig(n=3))
    assert words in str(raised.value)


def test_generate_takes_a_one_dimensional_tensor_prompt_as_its_list():
    model = tiny()
    assert (list(generate(model, torch.tensor([1, 2]), GenConfig(n=4, temperature=0)))
            == list(generate(model, [1, 2], GenConfig(n=4, temperature=0))))


# --- Trainer from a script -------------------------------------------------------------------------------------
def test_trainer_given_a_plain_module_a_name_or_a_dict_says_what_it_needs():
    data, config = load_data("sort"), TrainConfig(steps=1)
    with pytest.raises(TypeError, match="Trainer needs a MiniTransformerLM .* got Plain"):
        Trainer(Plain(), data, config)
    with pytest.raises(TypeError, match=r"Trainer draws its batches from a dataset, got str; load one: "
                                        r"Trainer\(model, load_data\('sort'\), config\)"):
        Trainer(tiny(), "sort", config)
    with pytest.raises(TypeError, match=r"Trainer trains under a TrainConfig, got dict"):
        Trainer(tiny(), data, {"steps": 1})


def test_training_data_with_more_tokens_than_the_model_has_is_refused_before_a_step():
    data = load_data("sort")  # 12 tokens
    trainer = Trainer(tiny(vocab_size=5, max_seq_len=16), data, TrainConfig(steps=1, batch_size=2, eval_batches=1))
    with pytest.raises(DataError, match=r"the data has 12 tokens but the model's vocab_size is 5; build the model "
                                        r"with ModelConfig\(vocab_size=data.tokenizer.vocab_size"):
        trainer.run()
    assert trainer.step == 0 and trainer.history == []


# --- checkpoints from a script ---------------------------------------------------------------------------------
def test_save_checkpoint_without_its_trainer_or_with_another_models_says_what_to_pass(tmp_path):
    data = load_data("sort")
    model = tiny(vocab_size=data.tokenizer.vocab_size, max_seq_len=16)
    vocab = data.tokenizer.vocab
    with pytest.raises(TypeError, match=r"save_checkpoint saves a model with its Trainer .* got NoneType; pass the "
                                        r"one that trains it, or make one: Trainer\(model, data, TrainConfig\(\)\)"):
        ckpt.save_checkpoint(tmp_path, "mine", model, None, vocab, "sort")
    with pytest.raises(TypeError, match="save_checkpoint needs a MiniTransformerLM .* got Plain"):
        ckpt.save_checkpoint(tmp_path, "mine", Plain(), None, vocab, "sort")
    other = Trainer(tiny(vocab_size=data.tokenizer.vocab_size, max_seq_len=16), data, TrainConfig(steps=1))
    with pytest.raises(CheckpointError, match="the trainer trains another model"):
        ckpt.save_checkpoint(tmp_path, "mine", model, other, vocab, "sort")
    assert not (tmp_path / "mine").exists()
    ckpt.save_checkpoint(tmp_path, "mine", model, Trainer(model, data, TrainConfig(steps=1)), vocab, "sort")
    again = ckpt.build_model(ckpt.load_checkpoint(tmp_path, "mine")).eval()
    idx = torch.tensor([[1, 2, 3]])
    assert torch.equal(again(idx)[0], model(idx)[0])


# --- the docs' Python, run as written --------------------------------------------------------------------------
def python_snippets() -> list[tuple[str, str]]:
    root = Path(__file__).resolve().parent.parent
    found = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for i, block in enumerate(re.findall(r"^```python\n(.*?)^```", doc.read_text("utf-8"), re.M | re.S)):
            found.append((f"{doc.name}#{i}", block))
    return found


@pytest.mark.parametrize("where, code", python_snippets(), ids=[where for where, _ in python_snippets()])
def test_every_python_example_in_the_docs_runs_as_written(where, code, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # what an example writes (a ckpt.pt, ./checkpoints) goes there, not into the clone
    if "load_model(" in code:  # a model trained in the shell, loaded by name: one saved where a user's would be
        from test_cli import invoke

        monkeypatch.delenv("MINITF_CHECKPOINT_DIR", raising=False)  # ./checkpoints, a user's default
        assert invoke("--set", "n_layers=1", "train", "--steps", "2").exit_code == 0
        capsys.readouterr()
    from minitf_repl.core import variants

    # an example that declares a variant of its own (docs/variant-lab.md's DyT) takes it out again: the kinds and
    # modules are the process's, and the next test's "norm must be one of ..." would list it
    kept = [(kinds, dict(kinds), dict(getattr(kinds, "modules", {})))
            for kinds in (variants.NORMS, variants.FEED_FORWARDS, variants.POSITIONS)]
    try:
        exec(compile(code, where, "exec"), {"__name__": "__docs__"})  # docs/code.md's used idx and targets undefined
    finally:
        for kinds, declared, modules in kept:
            kinds.clear()
            kinds.update(declared)
            if hasattr(kinds, "modules"):
                kinds.modules.clear()
                kinds.modules.update(modules)
    assert capsys.readouterr().out  # it shows what it says it shows


def test_the_docs_show_python_at_all():
    assert python_snippets()


# --- help() on what the package exports ------------------------------------------------------------------------
@pytest.mark.parametrize("name", minitf_repl.__all__)
def test_help_on_every_exported_name_shows_its_own_words_as_printed(name):
    obj = getattr(minitf_repl, name)
    doc = inspect.getdoc(obj)
    assert doc and "Your models should also subclass this class" not in doc  # not nn.Module's own docstring
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", doc)  # load_data's "\r" printed a carriage return


def test_a_model_built_from_a_dict_says_it_wants_a_modelconfig():
    with pytest.raises(TypeError, match=r"MiniTransformerLM is built from a ModelConfig, got dict"):
        MiniTransformerLM({"vocab_size": 11})


def test_what_minitransformerlms_docstring_says_of_its_initial_weights_holds():
    torch.manual_seed(5)
    a = MiniTransformerLM(ModelConfig(vocab_size=65, max_seq_len=64))
    torch.manual_seed(5)
    b = MiniTransformerLM(ModelConfig(vocab_size=65, max_seq_len=64))
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert abs(a.token_embedding.weight.std().item() - 0.02) < 0.002 and a.lm_head.weight is a.token_embedding.weight
    assert not a.blocks[0].attn.q_proj.bias.any()


# --- the views' engine from a script ---------------------------------------------------------------------------
@pytest.mark.parametrize("view, call", [
    ("cached_decoding", lambda m: inside.cached_decoding(m, [1, 2])),
    ("next_token_pipeline", lambda m: inside.next_token_pipeline(m, [1, 2])),
    ("logit_lens", lambda m: inside.logit_lens(m, torch.tensor([1, 2]))),
    ("teacher_forcing", lambda m: inside.teacher_forcing(m, torch.tensor([1, 2]))),
    ("embedding_neighbours", lambda m: inside.embedding_neighbours(m, [1, 2])),
    ("embedding_map", lambda m: inside.embedding_map(m)),
    ("token_probs", lambda m: inside.token_probs(m, [1, 2], [3], GenConfig(n=1))),
])
def test_every_view_given_a_plain_module_says_it_needs_a_minitransformerlm(view, call):
    with pytest.raises(TypeError, match=f"{view} needs a MiniTransformerLM .* got Plain"):
        call(Plain())  # these failed with "'Plain' object has no attribute 'config'" (or 'hook_embed', ...)
    call(tiny())  # and work with the model


def test_a_trainer_asked_for_another_device_than_the_models_says_to_move_the_model_first():
    data, config = load_data("sort"), TrainConfig(steps=1, batch_size=2, eval_batches=1)
    model = tiny(vocab_size=12, max_seq_len=16)
    with pytest.raises(DeviceError, match=r"the model is on cpu but the Trainer was asked to train on meta; move it "
                                          r"first: model.to\('meta'\)"):
        Trainer(model, data, config, device=torch.device("meta"))  # was torch's "Tensor on device cpu is not on ..."
    with pytest.raises(DeviceError, match="unknown device 'gpu'; use one of auto, cpu, cuda"):
        Trainer(model, data, config, device="gpu")  # was torch's list of twenty device types
    assert Trainer(model, data, config, device=" CPU").device == torch.device("cpu")


# --- forward with a KV cache -----------------------------------------------------------------------------------
def test_a_cache_that_does_not_fit_the_model_or_the_input_says_to_start_a_fresh_one():
    model, idx = tiny(n_layers=2), torch.tensor([[1, 2, 3]])
    cases = [
        ({}, "cache must be a KVCache, got dict; start one: model.new_cache()"),  # was "'dict' object has no ..."
        (KVCache(1, 8), "the cache has 1 layer but the model has 2; start a fresh one"),  # was an IndexError
        (KVCache(2, 2), "the cache holds 2 positions and this input would make it 3"),  # was a size mismatch
    ]
    for cache, words in cases:
        with pytest.raises(DataError) as error:
            model(idx, cache=cache)
        assert words in str(error.value)
    cache = model.new_cache()
    model(idx, cache=cache)
    with pytest.raises(DataError, match="the cache holds a batch of 1 but idx has 2; start a fresh one"):
        model(torch.tensor([[4], [5]]), cache=cache)
    assert torch.allclose(model(idx, cache=model.new_cache())[0], model(idx)[0], atol=1e-6)


# --- the tokenizer from a script -------------------------------------------------------------------------------
def test_decode_refuses_ids_outside_the_vocabulary_instead_of_reading_minus_one_as_the_last_character():
    tok = CharTokenizer("abc")
    with pytest.raises(DataError, match=r"decode reads token ids 0..2, got -1; drop the -1 of targets"):
        tok.decode([0, -1])  # was "a" + "c": Python's negative indexing, without a word
    with pytest.raises(DataError, match="decode reads token ids 0..2, got 7"):
        tok.decode([7])  # was "list index out of range"
    with pytest.raises(DataError, match=r"decode reads one sequence of ids, got a tensor of shape \(1, 2\)"):
        tok.decode(torch.tensor([[0, 1]]))
    with pytest.raises(DataError, match="decode reads whole token ids, got 1.0"):
        tok.decode(torch.tensor([1.0]))
    with pytest.raises(DataError, match="decode reads token ids, got text"):
        tok.decode("ab")
    assert tok.decode(torch.tensor([2, 0])) == tok.decode([2, 0]) == "ca" and tok.decode(torch.tensor(1)) == "b"


def test_load_data_takes_a_pathlib_path_and_names_what_it_takes_otherwise(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("the cat sat on the mat\n" * 20, "utf-8")
    assert load_data(text).info().name == "notes.txt"  # was "'PosixPath' object has no attribute 'strip'"
    with pytest.raises(TypeError, match="load_data takes a name or a path, got NoneType; e.g. load_data"):
        load_data(None)


def test_a_run_leaves_the_model_in_the_mode_it_found_it_as_every_view_does():
    data = load_data("sort")
    model = tiny(vocab_size=12, max_seq_len=16, dropout=0.5)  # tiny() is in eval mode
    trainer = Trainer(model, data, TrainConfig(steps=2, batch_size=2, eval_batches=1))
    trained = []
    trainer.run(on_step=lambda info: trained.append(model.training))
    assert trained == [True, True]  # the steps ran with dropout on
    assert not any(m.training for m in model.modules())  # and the script's model.eval() holds after: it was undone
    idx = torch.tensor([[1, 2, 3]])
    assert torch.equal(model(idx)[0], model(idx)[0])
    model.train()
    trainer.start_run(1)
    trainer.run()
    assert model.training


def test_restore_takes_a_device_by_the_names_the_shell_takes(tmp_path):
    data = load_data("sort")
    model = tiny(vocab_size=12, max_seq_len=16)
    ckpt.save_checkpoint(tmp_path, "mine", model, Trainer(model, data, TrainConfig(steps=1)), data.tokenizer.vocab,
                         "sort")
    saved = ckpt.load_checkpoint(tmp_path, "mine")
    _, trainer = ckpt.restore(saved, data, "auto")  # was torch's "Expected one of cpu, cuda, ipu, ... : auto"
    assert trainer.device.type in ("cpu", "cuda", "mps")
    with pytest.raises(DeviceError, match="unknown device 'gpu'"):
        ckpt.restore(saved, data, "gpu")


# --- the configs from a script ---------------------------------------------------------------------------------
def test_the_configs_take_nanogpts_names_from_python_as_set_does():
    assert ModelConfig(block_size=32, n_embd=64, n_head=4, n_layer=2) == ModelConfig(
        max_seq_len=32, d_model=64, n_heads=4, n_layers=2)  # was "unexpected keyword argument 'block_size'"
    assert TrainConfig(max_iters=5, eval_interval=2).eval_every == 2
    assert TrainConfig().replace(max_iters=3).steps == 3  # was "unknown training setting(s): max_iters"
    assert GenConfig(max_new_tokens=7).n == 7
    with pytest.raises(ConfigError, match="block_size and max_seq_len are one model setting; give it once"):
        ModelConfig(block_size=32, max_seq_len=16)
    with pytest.raises(ConfigError, match="unknown training setting"):
        TrainConfig().replace(foo=1)
    assert pickle.loads(pickle.dumps(ModelConfig(block_size=32))) == ModelConfig(max_seq_len=32)


def test_feedforward_built_from_a_swiglu_config_says_which_part_to_build():
    config = ModelConfig(**{**SIZES, "activation": "swiglu"})
    with pytest.raises(ConfigError, match=r"FeedForward is the two-matrix FFN, and activation=swiglu is a gated FFN .* "
                                          r"build it with feed_forward\(config\)"):
        FeedForward(config)  # was KeyError: 'swiglu'
    assert type(feed_forward(config)).__name__ == "SwiGLU"
    assert FeedForward(config.replace(activation="relu"))(torch.zeros(1, 2, 16)).shape == (1, 2, 16)


def test_evaluate_given_a_plain_module_says_it_needs_a_minitransformerlm():
    data = load_data("sort")
    trainer = Trainer(tiny(vocab_size=12, max_seq_len=16), data, TrainConfig(steps=1, batch_size=2, eval_batches=1))
    with pytest.raises(TypeError, match="evaluate needs a MiniTransformerLM .* got Plain"):
        trainer.evaluate(Plain())  # was "'NoneType' object has no attribute 'item'"
    other = tiny(vocab_size=12, max_seq_len=16)
    assert trainer.evaluate(other)[0] == pytest.approx(trainer.evaluate()[0], rel=0.2)  # another model of that shape


def test_save_checkpoint_given_the_tokenizer_or_the_dataset_says_to_pass_their_text(tmp_path):
    data = load_data("sort")
    model = tiny(vocab_size=12, max_seq_len=16)
    trainer = Trainer(model, data, TrainConfig(steps=1))
    with pytest.raises(TypeError, match=r"got CharTokenizer and str; pass data.tokenizer.vocab and the name load_data"):
        ckpt.save_checkpoint(tmp_path, "a", model, trainer, data.tokenizer, "sort")  # was "has no len()"
    with pytest.raises(TypeError, match="got str and Task"):
        ckpt.save_checkpoint(tmp_path, "a", model, trainer, data.tokenizer.vocab, data)  # was "not JSON serializable"
    assert not (tmp_path / "a").exists()


def test_a_compiled_model_saves_a_checkpoint_that_loads_back(tmp_path):
    data = load_data("sort")
    model = tiny(vocab_size=12, max_seq_len=16)
    compiled = torch.compile(model)  # a wrapper: nothing compiles before its first call
    trainer = Trainer(compiled, data, TrainConfig(steps=1))
    assert trainer.model is model
    ckpt.save_checkpoint(tmp_path, "c", compiled, trainer, data.tokenizer.vocab, "sort")
    again = ckpt.build_model(ckpt.load_checkpoint(tmp_path, "c")).eval()  # was "the weights do not fit its model
    idx = torch.tensor([[1, 2, 3]])  # config (missing blocks.0.attn.k_proj.bias, ...; unexpected _orig_mod.blocks..."
    assert torch.equal(again(idx)[0], model(idx)[0])


def test_next_token_pipeline_picks_what_generate_under_its_settings_yields_first_as_its_docstring_says():
    model, prompt = tiny(), [1, 2, 3, 4]
    for temperature, top_k, top_p, seed in [(1.0, None, None, 3), (0.7, 4, None, 5), (1.3, None, 0.9, 11)]:
        piped = inside.next_token_pipeline(model, prompt, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
        settings = GenConfig(n=1, temperature=temperature, top_k=top_k, top_p=top_p, gen_seed=seed)
        assert piped.picked == next(generate(model, prompt, settings))
    doc = inspect.getdoc(inside.next_token_pipeline)
    assert "GenConfig(n=1, temperature=temperature" in doc  # it named generate(model, prompt, n, temperature, ...)


@pytest.mark.parametrize("spec", ["sort", "pydoc", "random", "repeat"])
def test_a_batch_of_a_split_the_data_does_not_have_is_refused_by_every_dataset(spec):
    data = load_data(spec)
    with pytest.raises(DataError, match="split must be 'train' or 'val', got 'test'"):
        data.get_batch("test", 2, 16, torch.Generator().manual_seed(0))  # sort gave training questions, pydoc KeyError
    x, y = data.get_batch("val", 2, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape


def test_a_tasks_questions_of_a_split_it_does_not_have_are_refused():
    with pytest.raises(DataError, match="split must be 'train' or 'val', got 'valid'"):
        load_data("sort").sample_questions("valid", 3, torch.Generator().manual_seed(0))  # were training questions


def test_set_length_refuses_a_bad_window_before_it_changes_the_model():
    model = tiny(pos_encoding="rope")
    idx = torch.tensor([[1, 2, 3]])
    before = model(idx)[0]
    with pytest.raises(ConfigError, match="max_seq_len must be a positive whole number, got 0"):
        model.set_length(0)  # the masks were cut to 0 x 0 first: every later forward failed on a size mismatch
    assert torch.equal(model(idx)[0], before)
    with pytest.raises(ConfigError, match=r"pos_encoding=learned has a table of max_seq_len rows: another window is a "
                                          r"new model; build one with ModelConfig\(max_seq_len=...\)"):
        tiny().set_length(16)  # was an AssertionError (and nothing at all under python -O)


def test_a_switch_given_the_word_off_from_python_is_told_to_be_true_or_false():
    with pytest.raises(ConfigError, match=r"causal must be on or off \(True or False\), got 'off'"):
        ModelConfig(causal="off")  # was "causal must be on or off, got 'off'"
    with pytest.raises(ConfigError, match=r"cache must be on or off \(True or False\), got 'no'"):
        GenConfig(cache="no")


def test_modelconfigs_docstring_says_the_data_sets_vocab_size_which_its_default_is_not():
    assert ModelConfig().vocab_size != load_data("pydoc").tokenizer.vocab_size  # "the model :train on pydoc trains"
    assert "vocab_size=data.tokenizer.vocab_size" in inspect.getdoc(ModelConfig)
