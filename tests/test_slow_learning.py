"""Learning checks that take a minute or more each: `./dev test -m slow` runs them."""

from pathlib import Path

import pytest
import torch

from minitf_repl.core.config import GenConfig, ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus, load_data, read_text_file
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer



def _shakespeare() -> Path:
    """tiny Shakespeare: the project's copy beside the clone (../shared/data), else the one `:data shakespeare`
    downloaded and keeps in the cache (a user's clone has no ../shared: the check was skipped there, always).
    Read before the tests point the user folders elsewhere (conftest), so the cache is the user's own."""
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tinyshakespeare.txt"
    if shared.is_file():
        return shared
    import hashlib

    from minitf_repl.core.catalog import SHAKESPEARE_SHA256
    from minitf_repl.core.paths import cache_dir

    kept = cache_dir() / "tinyshakespeare.txt"
    try:
        return kept if hashlib.sha256(kept.read_bytes()).hexdigest() == SHAKESPEARE_SHA256 else shared
    except OSError:
        return shared


SHAKESPEARE = _shakespeare()

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def all_cores(one_thread):
    """Learning runs use every core, as a user's :train does (conftest pins one for tiny models)."""
    import os

    torch.set_num_threads(os.cpu_count() or 1)


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason="needs tiny Shakespeare: `./dev run --data shakespeare data` "
                                                      "downloads it once (or ../shared/data/tinyshakespeare.txt)")
def test_shakespeare_recipe_reaches_val_loss_1_88(cpu_path):
    """`:data shakespeare` then `:train`: the default model under the data's recipe (core/recipes.py),
    on this CPU's precision path and on the float32 path of a CPU without bfloat16 units."""
    from minitf_repl.core.recipes import switch_recipe

    corpus = TextCorpus("shakespeare", read_text_file(SHAKESPEARE), "tiny Shakespeare")
    config, _ = switch_recipe(TrainConfig(), "pydoc", "shakespeare")
    torch.manual_seed(config.seed)
    model = MiniTransformerLM(ModelConfig(vocab_size=corpus.tokenizer.vocab_size))
    summary = Trainer(model, corpus, config).run()
    assert summary.val_loss <= 1.88, summary
    assert cpu_path == "bf16-units" or summary.dtype == "float32"


def test_default_train_on_pydoc_writes_words(cpu_path):
    """The first :train a user runs: default model and settings on the built-in data (both precision paths)."""
    data = load_data("pydoc")
    torch.manual_seed(1337)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size))
    summary = Trainer(model, data, TrainConfig()).run()
    assert summary.val_loss < 1.446, summary  # the previous defaults (AdamW, lr 3e-3, batch 32) ended at 1.446
    assert cpu_path == "bf16-units" or summary.dtype == "float32"
    text = data.tokenizer.decode(generate(model, data.tokenizer.encode("The "), GenConfig(n=400, temperature=0.8, gen_seed=0)))
    words = [w.strip(".,:;()\"'") for w in text.split()]
    known = set(data.text.split())
    assert sum(w in known for w in words) / max(len(words), 1) > 0.5, text
