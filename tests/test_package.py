"""The package surface: the seed's names are importable from the top level, torch loads lazily."""

import subprocess
import sys


def test_seed_names_exported_from_the_top_level():
    import minitf_repl
    from minitf_repl import FeedForward, MiniTransformerLM, ModelConfig, MultiHeadSelfAttention, TransformerBlock

    model = MiniTransformerLM(ModelConfig(vocab_size=7, max_seq_len=8, d_model=16, n_heads=2, n_layers=1, d_ff=24))
    assert isinstance(model.blocks[0], TransformerBlock)
    assert isinstance(model.blocks[0].attn, MultiHeadSelfAttention)
    assert isinstance(model.blocks[0].ffn, FeedForward)
    assert set(minitf_repl.__all__) <= set(dir(minitf_repl))


def test_importing_the_package_and_config_does_not_import_torch():
    code = "import sys, minitf_repl, minitf_repl.core.config; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
