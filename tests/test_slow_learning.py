"""Learning checks that take a minute or more each: `./dev test -m slow` runs them."""

from pathlib import Path

import pytest
import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus, load_data, read_text_file
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer

SHAKESPEARE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare.txt"

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def all_cores(one_thread):
    """Learning runs use every core, as a user's :train does (conftest pins one for tiny models)."""
    import os

    torch.set_num_threads(os.cpu_count() or 1)


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="needs ../shared/data/tinyshakespeare.txt")
def test_shakespeare_4x4x128_reaches_val_loss_1_89():
    corpus = TextCorpus("shakespeare", read_text_file(SHAKESPEARE), "tiny Shakespeare")
    torch.manual_seed(1337)
    model = MiniTransformerLM(ModelConfig(vocab_size=corpus.tokenizer.vocab_size, max_seq_len=64, d_model=128,
                                          n_heads=4, n_layers=4, d_ff=512))
    trainer = Trainer(model, corpus, TrainConfig(steps=1000, eval_every=100))
    evals = []
    trainer.run(on_step=lambda i: i.val_loss is not None and evals.append(i.val_loss))
    assert min(evals) <= 1.89, evals


def test_default_train_on_pydoc_writes_words():
    """The first :train a user runs: default model and settings on the built-in data."""
    data = load_data("pydoc")
    torch.manual_seed(1337)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size))
    summary = Trainer(model, data, TrainConfig()).run()
    assert summary.val_loss < 1.6, summary
    text = data.tokenizer.decode(generate(model, data.tokenizer.encode("The "), 400, temperature=0.8, seed=0))
    words = [w.strip(".,:;()\"'") for w in text.split()]
    known = set(data.text.split())
    assert sum(w in known for w in words) / max(len(words), 1) > 0.5, text
