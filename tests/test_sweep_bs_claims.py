"""A tester's findings on claims the views make: `:params` said the fast path keeps 3.9 MiB less where it kept more
(with dropout, at batch 2), and `:shapes` wrote the final RMSNorm's rule over x, the token embedding, where it
normalises h. Each test failed before its fix."""

from __future__ import annotations

import itertools
import re

import pytest
import torch

from test_commands import TEXT, run
from test_house import declared_scalenorm
from test_render import plain

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.fastpath import FastPath
from minitf_repl.session import Session

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def kept_for_backward(module, idx: torch.Tensor) -> int:
    """Bytes the forward keeps for backward: every tensor autograd saves, each storage once, less the parameters and
    buffers, which exist whether a forward ran or not."""
    storages: dict[int, int] = {}

    def pack(t):
        storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(idx, idx)
    held = {t.untyped_storage().data_ptr() for t in itertools.chain(module.parameters(), module.buffers())}
    return sum(n for ptr, n in storages.items() if ptr not in held)


# the tester's cases (the default model at batch 16 with and without dropout, at batch 2; d=64, 2 layers, T=256,
# batch 2 with dropout), and the variants whose own tensors change the sum: rope's unrotated q and k, GQA's K and V
# that the fused kernel does not repeat, a readable forward that is the fused kernel itself
DEFAULT = dict(d_model=128, n_heads=4, n_layers=4, d_ff=512, max_seq_len=64)
CASES = [
    (DEFAULT, 16), ({**DEFAULT, "dropout": 0.1}, 16), (DEFAULT, 2),
    (dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, max_seq_len=256, dropout=0.1), 2),
    (dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64, pos_encoding="rope"), 4),
    (dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64, n_kv_heads=1), 4),
    (dict(d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64, attention="sdpa"), 4),
]


# The default model at batch 16 takes some 0.3 to 0.5 s a case (a session, :params, two forwards; the first case in a
# process also pays the fast path's one-time choice of product kernels, core.fastpath.onednn_faster).
@pytest.mark.parametrize("model, batch", CASES)
def test_params_says_what_the_fast_path_keeps_as_saved_tensors_measure_it(model, batch, tmp_path):
    """`:params` said "training's fast path keeps no (T, T) maps: 3.9 MiB (7.8%) less at T=64" with dropout, where
    torch's CPU kernel keeps the maps and the fast path kept 0.7 MiB more, and "0.5 MiB less" at batch 2, where its
    copy of [W_q; W_k; W_v] a layer outweighs the maps: the sum said now is the one measured."""
    text = tmp_path / "fox.txt"
    text.write_text(TEXT, encoding="utf-8")
    s = Session(ModelConfig(**model), TrainConfig(batch_size=batch), data_spec=str(text), device_name="cpu")
    said = plain(run(s, ":params"), 400)
    found = re.search(r"fast path keeps [^:]*: ([\d.]+) (B|KiB|MiB|GiB)(?: \([^)]*\))? (less|more)\b",
                      said)
    assert found, said
    claimed = float(found[1]) * UNITS[found[2]] * (1 if found[3] == "less" else -1)
    m = s.model
    m.train()
    T = s.model_config.max_seq_len
    idx = torch.randint(0, m.config.vocab_size, (batch, T), generator=torch.Generator().manual_seed(0))
    readable, fast = kept_for_backward(m, idx), kept_for_backward(FastPath(m), idx)
    # the amount is printed to a tenth of its unit
    assert abs(claimed - (readable - fast)) <= 0.05 * UNITS[found[2]] + 0.005 * readable, (said, readable - fast)
    if model.get("dropout"):  # no saving promised where the kernel keeps the maps
        assert "keeps the (T, T) maps too" in said and "keeps no (T, T) maps" not in said, said


def shapes_formulas(session) -> dict[str, str]:
    return {r.path: r.formula for r in run(session, ":shapes").records}


def test_shapes_writes_each_norms_rule_over_what_it_normalises():
    """`:set norm=rmsnorm` then `:shapes`: the final norm read "RMSNorm(x) = x / rms(x) * g" under a legend that
    names x the token embedding, right above "logits z_t = RMSNorm(h) W_E^T"; ln_2 read "RMSNorm(x'), RMSNorm(x) =
    ..." and q_norm "RMSNorm(q) per head, RMSNorm(x) = ...". Every kind, a caller's own among them."""
    tiny = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32)
    with declared_scalenorm() as scalenorm:
        for norm, final in [("layernorm", "LN(h)"), ("rmsnorm", "RMSNorm(h) = h / rms(h) * g"),
                            ("none", "h, as it is (norm=none: no norm)"),
                            (scalenorm, "ScaleNorm(h) = g * h / ||h||")]:
            normalises = final != "h, as it is (norm=none: no norm)"  # qk_norm=on is refused with norm=none
            s = Session(ModelConfig(**tiny, norm=norm, qk_norm=normalises), TrainConfig(batch_size=2),
                        data_spec="sort:4", device_name="cpu")
            said = shapes_formulas(s)
            assert said["ln_f"] == final, (norm, said["ln_f"])
            qk = [("blocks.0.attn.q_norm", "q"), ("blocks.0.attn.k_norm", "k")]
            steps = [("blocks.0.ln_2", "x'")] + qk * normalises
            for path, of in steps:
                # the rule, where there is one, over what the step normalises, never over x
                assert not re.search(r"(?<![\w'])x(?![\w'])", said[path]), (norm, path, said[path])
                assert f"({of})" in said[path] or said[path].startswith(of), (norm, path, said[path])
    post = Session(ModelConfig(**tiny, norm="rmsnorm", norm_placement="post"), TrainConfig(batch_size=2),
                   data_spec="sort:4", device_name="cpu")
    assert shapes_formulas(post)["blocks.0.ln_1"] == ("RMSNorm(x + Attention(x)) = (x + Attention(x)) / "
                                                      "rms(x + Attention(x)) * g (post-norm)")
