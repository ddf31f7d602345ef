"""Activation patching: which activations carry the answer from one prompt to another.

Two prompts of the same length in tokens: a clean one, whose next token is the answer, and a
corrupted one that changes the answer (a different digit, a different name). Both are run once. Then
the corrupted prompt is run again with one activation taken from the clean run, and we ask how much
of the clean answer comes back. The measure is the logit difference at the last position,

    diff = z[answer] - z[foil]          answer: the clean run's next token; foil: the corrupted run's
    restored = (diff_patched - diff_corrupt) / (diff_clean - diff_corrupt)

0: the patch changed nothing; 1: the clean answer is fully back. Two kinds of activation are patched:

    the residual stream after the embedding and after each block, at one position (layer x position)
    the output O_h = A_h V_h of one head, at every position (layer x head)

Patching the whole stream after the last block gives back the clean logits exactly: everything after
it is the final norm and the head. Each patch is a forward hook on the model's own probes (hook_embed,
hook_resid_post, hook_weighted) that writes the clean values into the rows it owns, so the sweep is a
few batched runs of the corrupted prompt, one row per patch, not one run per patch. The sweep
(`activation_patching`) runs each row only from the block its patch is in: everything before it is
the corrupted run's, computed once (`patched_runs`, the plain form that runs every row from the
start, is its reference in tests/test_inside_deeper.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn

from .errors import DataError, UserError
from .inside import block_probes, listening, one_sequence
from .probe import listening as listening_pass
from .words import count

ROWS_PER_RUN = 256  # patched copies of the corrupted prompt per batched run (bounds the memory)
# The least change of the logit difference, clean against corrupted, whose fractions mean something: below it
# every fraction is noise over a tiny denominator (a gap of 0.01 turns a change of 0.02 into "2.0"), and a
# negative gap (the corrupted prompt favours the answer more) turns them upside down. An untrained model's
# gaps are all that small; the sweep still runs (the view shows its shape), and the reading says so.
MIN_GAP = 0.1


@dataclass(frozen=True)
class Patch:
    """One activation taken from the clean run.

    site "embed": h_0 (layer is None); "resid": the stream after block `layer`; at `position`, or at
    every position when position is None. site "head": head `head`'s output O_h in block `layer`, at
    every position (or one).
    """

    site: str  # embed | resid | head
    layer: int | None = None
    position: int | None = None
    head: int | None = None


def patch_sites(model: nn.Module) -> dict[tuple[str, int | None], nn.Module]:
    """(site, layer) -> the probe whose output that patch replaces."""
    sites: dict[tuple[str, int | None], nn.Module] = {("embed", None): model.hook_embed}
    for layer, probe in block_probes(model, "hook_resid_post").items():
        sites[("resid", layer)] = probe
    for layer, probe in block_probes(model, "hook_weighted").items():
        sites[("head", layer)] = probe
    return sites


def record_sites(model: nn.Module, idx: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """One clean run: its logits (1, T, V) and every patchable activation, keyed like patch_sites."""
    sites = patch_sites(model)
    names = {f"{site}.{layer}": (site, layer) for site, layer in sites}
    with listening(model, {name: sites[key] for name, key in names.items()}) as seen:
        logits, _ = model(idx)
    return logits, {key: seen[name] for name, key in names.items()}


def patched_runs(model: nn.Module, corrupt: torch.Tensor, clean: dict, rows: list[list[Patch]]) -> torch.Tensor:
    """The logits (len(rows), T, V) of the corrupted prompt, row r run with the patches rows[r] applied together.

    `clean` is record_sites' activations of the clean prompt. Each site's hook writes the clean values
    into the rows that patch it, and leaves the other rows as the corrupted run made them.
    """
    sites = patch_sites(model)
    for patches in rows:
        for patch in patches:
            if (patch.site, patch.layer) not in sites:
                raise UserError(f"there is no {patch.site} activation at layer {patch.layer} to patch")
    out = []
    for start in range(0, len(rows), ROWS_PER_RUN):
        chunk = rows[start : start + ROWS_PER_RUN]
        hooks = [(module, _writer(clean[key], [(r, p) for r, patches in enumerate(chunk) for p in patches
                                              if (p.site, p.layer) == key]))
                 for key, module in sites.items()]
        with listening_pass(model, hooks):
            logits, _ = model(corrupt.expand(len(chunk), -1))  # (rows, T, V)
        out.append(logits)
    return torch.cat(out)


def _writer(clean: torch.Tensor, owned: list[tuple[int, Patch]]):
    """The forward hook of one site: rows that own a patch there get the clean activation."""

    def hook(module, inputs, output):
        if not owned:
            return None
        output = output.clone()
        for row, patch in owned:
            where = slice(None) if patch.position is None else patch.position
            if patch.site == "head":  # (B, n_heads, T, d_k)
                output[row, patch.head, where] = clean[0, patch.head, where]
            else:  # (B, T, d)
                output[row, where] = clean[0, where]
        return output

    return hook


@dataclass
class Patching:
    clean_ids: list[int]
    corrupt_ids: list[int]
    answer: int  # the clean run's next token (or the one asked for)
    foil: int  # the corrupted run's next token, or the clean run's second choice when the two agree
    same_answer: bool  # the corrupted run's likeliest token is the answer too (so the foil is the runner-up)
    clean_diff: float  # z[answer] - z[foil] on the clean prompt
    corrupt_diff: float  # the same on the corrupted prompt
    stream: list[str]  # the rows of `resid`: "embed", "blocks.0", ...
    resid: torch.Tensor  # (len(stream), T): restored when the stream there, at that position, is the clean one
    heads: torch.Tensor  # (n_layers, n_heads): restored when that head's output is the clean one

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("clean_ids", "corrupt_ids", "answer", "foil", "same_answer", "clean_diff",
                                           "corrupt_diff", "stream")}
        return {**d, "resid": self.resid.tolist(), "heads": self.heads.tolist()}


def activation_patching(model: nn.Module, clean_idx, corrupt_idx, answer: int | None = None) -> Patching:
    """Patch every stream position and every head from the clean run into the corrupted one (see the module doc)."""
    clean_idx = one_sequence(model, clean_idx, "patching")
    corrupt_idx = one_sequence(model, corrupt_idx, "patching")
    T, T_corrupt = clean_idx.shape[1], corrupt_idx.shape[1]
    if T != T_corrupt:
        raise DataError(f"the two prompts must be the same length in tokens, got {count(T, 'token')} and "
                        f"{T_corrupt}; change one so that position i means the same in both")
    V = model.lm_head.weight.shape[0]
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < V):
        raise UserError(f"the answer must be a token id in 0..{V - 1}, got {answer!r}")
    clean_logits, clean = record_sites(model, clean_idx)
    corrupt_logits, corrupt_acts = record_sites(model, corrupt_idx)
    z_clean, z_corrupt = clean_logits[0, -1], corrupt_logits[0, -1]  # (V,)
    answer = int(z_clean.argmax()) if answer is None else answer
    foil = int(z_corrupt.argmax())
    same_answer = foil == answer
    if same_answer:  # the corruption did not change the likeliest token: compare with the clean runner-up
        others = z_clean.clone()
        others[answer] = float("-inf")
        foil = int(others.argmax())

    def diff(z: torch.Tensor) -> torch.Tensor:
        return z[..., answer] - z[..., foil]

    clean_diff, corrupt_diff = float(diff(z_clean)), float(diff(z_corrupt))
    gap = clean_diff - corrupt_diff
    if abs(gap) < 1e-6:
        raise UserError("the two prompts give the same logit difference between the answer and the foil, so "
                        "nothing can be restored; choose a corrupted prompt that changes the answer")
    n_layers = len(model.blocks)
    n_heads = model.blocks[0].attn.n_heads
    stream = ["embed"] + [f"blocks.{i}" for i in range(n_layers)]
    # The corrupted stream where each block starts: the embedding, then each block's output.
    starts = [corrupt_acts[("embed", None)]] + [corrupt_acts[("resid", i)] for i in range(n_layers)]
    resid = torch.stack([diff(_stream_patched(model, starts, clean, layer, T)) for layer in range(-1, n_layers)])
    heads = torch.stack([diff(_head_patched(model, starts, clean, layer, n_heads)) for layer in range(n_layers)])
    restored = ((torch.cat([resid.flatten(), heads.flatten()]).float() - corrupt_diff) / gap).cpu()
    n_stream = len(stream) * T
    return Patching(
        clean_ids=clean_idx[0].tolist(), corrupt_ids=corrupt_idx[0].tolist(), answer=answer, foil=foil,
        same_answer=same_answer,
        clean_diff=clean_diff, corrupt_diff=corrupt_diff, stream=stream,
        resid=restored[:n_stream].view(len(stream), T), heads=restored[n_stream:].view(n_layers, n_heads),
    )


def run_from(model: nn.Module, x: torch.Tensor, start: int) -> torch.Tensor:
    """The model's forward from block `start` on, given the stream x (B, T, d) there: the last position's logits (B, V)."""
    for block in model.blocks[start:]:
        x = block(x)
    return model.lm_head(model.ln_f(x[:, -1]))  # (B, V): only the last position is read


def _stream_patched(model: nn.Module, starts: list, clean: dict, layer: int, T: int) -> torch.Tensor:
    """(T, V): the last position's logits with the stream after block `layer` (-1: the embedding) clean at one position each."""
    key = ("embed", None) if layer < 0 else ("resid", layer)
    out = []
    with listening(model, {}), model.fused_attention():
        for first in range(0, T, ROWS_PER_RUN):
            rows = range(first, min(T, first + ROWS_PER_RUN))
            x = starts[layer + 1].expand(len(rows), -1, -1).clone()  # (rows, T, d): the corrupted stream
            for r, position in enumerate(rows):
                x[r, position] = clean[key][0, position]
            out.append(run_from(model, x, layer + 1))
    return torch.cat(out)


def _head_patched(model: nn.Module, starts: list, clean: dict, layer: int, n_heads: int) -> torch.Tensor:
    """(n_heads, V): the last position's logits with head h of block `layer` clean in row h (at every position)."""
    x = starts[layer].expand(n_heads, -1, -1)  # (n_heads, T, d): the corrupted stream entering the block
    writer = _writer(clean[("head", layer)], [(h, Patch("head", layer, head=h)) for h in range(n_heads)])
    with listening_pass(model, [(model.blocks[layer].attn.hook_weighted, writer)]), model.fused_attention():
        return run_from(model, x, layer)
