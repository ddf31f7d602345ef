"""minitf: a terminal lab for building, training and looking inside a decoder-only Transformer.

The model classes are exported here, but loaded lazily: importing torch takes seconds, and the
shell (`python -m minitf_repl`, `minitf`) must show its prompt before that import finishes.
"""

from importlib import import_module

from .core import __version__

_EXPORTS = {
    "ModelConfig": "minitf_repl.core.config",
    "TrainConfig": "minitf_repl.core.config",
    "GenConfig": "minitf_repl.core.config",
    "MultiHeadSelfAttention": "minitf_repl.core.model",
    "FeedForward": "minitf_repl.core.model",
    "TransformerBlock": "minitf_repl.core.model",
    "MiniTransformerLM": "minitf_repl.core.model",
    "KVCache": "minitf_repl.core.model",
    "CharTokenizer": "minitf_repl.core.data",
    "load_data": "minitf_repl.core.data",
    "load_model": "minitf_repl.core.checkpoint.loading",
    "Trainer": "minitf_repl.core.train",
    "generate": "minitf_repl.core.generate",
    "trace": "minitf_repl.core.trace",
    "UserError": "minitf_repl.core.errors",
    "TrainingDiverged": "minitf_repl.core.errors",  # what Trainer.run raises, so a script can catch it by name
    "Lab": "minitf_repl.notebook",  # the REPL's lines from a notebook or a script (it imports rich: loaded lazily too)
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'minitf_repl' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
