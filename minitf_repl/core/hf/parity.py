"""The lab's model against `transformers` reading the same folder: logits and the residual stream, layer by layer.

Both models read the same token ids. After the embedding and after every block, the residual
stream of each is taken (forward hooks, removed afterwards) and the largest absolute difference
is recorded, and the largest relative one: each |difference| over max(1, |value|) of transformers'
stream, feature by feature. The tolerance is on the relative one, since float32 rounds a value of
1250 to steps of 1.2e-4 (GPT-2's few "massive activations" reach thousands) where it rounds a value
of 1 to steps of 1e-7; feature by feature, so that those few do not loosen it for the others. The
first layer above it is where the two models part.
`transformers` is optional: without it, one line says
to install it. The folder is checked the lab's way first (core.hf.folder: no pickle, no device
files, shapes matching the config), then read by transformers from local safetensors files only.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import CheckpointError, ConfigError
from .folder import read_folder

DEFAULT_TOLERANCE = 1e-4


@dataclass
class Parity:
    model_type: str
    max_logit_diff: float
    # ("embed", d, r), ("blocks.0", d, r), ...: max |lab - transformers| of the residual stream, and max relative
    # difference (relative), which the tolerance is on
    layers: list[tuple[str, float, float]]
    first_diverging: str | None  # the first layer above the tolerance, None if none is
    max_logit_rel_diff: float = 0.0  # the logits' relative difference


def relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """max |ours - theirs| / max(1, |theirs|), element by element: a difference as a share of the value it is in,
    or absolute below 1. An absolute tolerance called one rounding step of a residual stream of 1250 (1.2e-4) a
    divergence, between layers that agreed; NaN stays NaN, which no tolerance takes."""
    return ((ours - theirs).abs() / theirs.abs().clamp(min=1.0)).max().item()



class NotTheFoldersModel(CheckpointError):
    """The session's model is not the folder's: a comparison would mean nothing. `problem` is the message's first
    half, for a front end to add its own way of loading the folder."""

    def __init__(self, problem: str):
        super().__init__(f"{problem}; load the folder first with hf:PATH")
        self.problem = problem


SHAPES = ("vocab_size", "d_model", "n_heads", "kv_heads", "n_layers")  # what must agree for a comparison to mean anything


def reference_model(path: Path, config):
    """transformers' own model of the folder (float32, eval, local safetensors only), after the lab's checks
    (no pickle, no device files, shapes matching the config) and a check that `config` is the folder's model."""
    from ..variants import position_kind
    from . import architecture, lab_config

    folder = read_folder(path)
    arch = architecture(folder)
    theirs = lab_config(folder)
    # the positions too: a window past a GPT-2 folder's table of positions (or RoPE against that table) would give
    # transformers positions it has no row for
    learned = position_kind(theirs).learned  # a table with a row per position: its length must match
    # a table the lab adds but does not learn (sines), or none, is what :save hf: writes as a learned table holding
    # those values (or zeros): the same function, which the comparison of the outputs then confirms or not
    ours = position_kind(config)
    as_table = learned and not ours.learned and not ours.rotary
    keys = SHAPES + ((() if as_table else ("pos_encoding",)) + (("max_seq_len",) if learned else ()))
    differ = [f"{k} {getattr(config, k)} here, {getattr(theirs, k)} there" for k in keys
              if getattr(config, k) != getattr(theirs, k)]
    if differ:
        raise NotTheFoldersModel(f"the session's model is not the model in {path} ({', '.join(differ[:2])})")
    try:
        import transformers
    except ImportError:
        raise ConfigError("the reference for :parity is transformers, which is not installed; install it "
                          "(pip install transformers, or the minitf-repl[parity] extra) to compare with it") from None
    try:
        with _quiet(transformers):
            model = transformers.AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, use_safetensors=True, dtype=torch.float32)
    except Exception as e:  # transformers' own errors, worded its way
        raise CheckpointError(f"transformers could not load {path} ({str(e).splitlines()[0][:100] if str(e) else e}); "
                              "check the folder with the transformers version installed") from None
    return arch.MODEL_TYPE, model.eval()


@contextlib.contextmanager
def _quiet(transformers):
    """transformers without its own output (config warnings, a progress bar of the weights it loads):
    the core never prints, and the comparison is :parity's answer. Its settings are put back after."""
    logging = transformers.utils.logging
    verbosity, bar = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(verbosity)
        if bar:
            logging.enable_progress_bar()


def _blocks(reference) -> list[torch.nn.Module]:
    base = getattr(reference, "transformer", None) or getattr(reference, "model", None)
    return list(getattr(base, "h", None) or getattr(base, "layers"))


def compare(model, path: Path, ids: list[int], tolerance: float = DEFAULT_TOLERANCE) -> Parity:
    """Max |difference| of the logits and of the residual stream after the embedding and each block, absolute and
    relative (the tolerance is on the relative one)."""
    config = model.config
    model_type, reference = reference_model(Path(path), config)
    ours: dict[str, torch.Tensor] = {}
    theirs: dict[str, torch.Tensor] = {}

    def keep(store: dict, name: str):
        def hook(module, args, output):
            store[name] = (output[0] if isinstance(output, tuple) else output).detach().float().cpu()
        return hook

    names = ["embed"] + [f"blocks.{i}" for i in range(config.n_layers)]
    handles = [model.hook_embed.register_forward_hook(keep(ours, "embed"))]
    handles += [b.register_forward_hook(keep(ours, n)) for b, n in zip(model.blocks, names[1:])]
    handles += [b.register_forward_hook(keep(theirs, n)) for b, n in zip(_blocks(reference), names[1:])]
    was_training = model.training
    device = next(model.parameters()).device
    idx = torch.tensor([ids])
    try:
        model.eval()
        with torch.no_grad():
            logits = model(idx.to(device))[0].float().cpu()
            out = reference(idx, output_hidden_states=True)
        theirs["embed"] = out.hidden_states[0].float()
        ref_logits = out.logits.float()
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    layers = [(n, (ours[n] - theirs[n]).abs().max().item(), relative(ours[n], theirs[n])) for n in names]
    first = next((n for n, _, rel in layers if not rel <= tolerance), None)  # NaN counts as diverging
    return Parity(model_type, (logits - ref_logits).abs().max().item(), layers, first, relative(logits, ref_logits))
