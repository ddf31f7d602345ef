"""GPT-2 (model_type "gpt2") <-> MiniTransformerLM: the same machine, named and laid out differently.

GPT-2 is the lab's seed model with four switches set: learned positions, the tanh approximation of
GELU, biases everywhere, the head tied to the embedding. Two differences of layout remain:

- GPT-2's linear layers are `Conv1D`: y = x W + b with W stored (in, out), the transpose of
  nn.Linear's (out, in);
- its attention has one fused matrix c_attn = [W_q | W_k | W_v] of (d, 3d), cut here into three.

    Hugging Face                       MiniTransformerLM
    wte, wpe                           token_embedding, position_embedding
    h.i.ln_1, h.i.ln_2                 blocks.i.ln_1, blocks.i.ln_2
    h.i.attn.c_attn (d, 3d)            blocks.i.attn.q_proj, k_proj, v_proj (each d x d, transposed)
    h.i.attn.c_proj                    blocks.i.attn.out_proj (transposed)
    h.i.mlp.c_fc, h.i.mlp.c_proj       blocks.i.ffn.fc_in, fc_out (transposed)
    ln_f                               ln_f
    lm_head (tied to wte)              lm_head (tied to token_embedding)
"""

from __future__ import annotations

from typing import Callable

import torch

from ..config import ModelConfig
from .common import HFUnsupported, get

MODEL_TYPE = "gpt2"
KEEPS_DROPOUT = True  # the lab's dropout is its attn_pdrop and resid_pdrop (hf_config, lab_dropout)
SIZES = "n_embd, n_head, n_layer, n_inner, n_positions, vocab_size"  # the config.json fields that set the shapes
# GPT-2's names for its activation: gelu_new is the tanh approximation GPT-2 was trained with.
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "gelu": "gelu", "relu": "relu"}


def lab_config(hf: dict) -> ModelConfig:
    """The lab's settings for a GPT-2 config.json (refusing what the lab's model cannot compute)."""
    d, heads = get(hf, "n_embd", int), get(hf, "n_head", int)
    act = get(hf, "activation_function", str, "gelu_new")
    if act not in ACTIVATIONS:
        raise HFUnsupported(f"activation_function={act}", "gelu_new, gelu or relu")
    # the lab divides q.k by sqrt(d_k), as GPT-2 does with scale_attn_weights and without dividing by the layer's
    # number too; a refusal names the field set ("scale_attn_weights=true only" was said of either)
    for field, lab in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False)):
        if get(hf, field, bool, lab) != lab:
            raise HFUnsupported(f"{field}={str(not lab).lower()} (a scaling of attention other than 1/sqrt(d_k))",
                                f"{field}={str(lab).lower()} only")
    if get(hf, "add_cross_attention", bool, False):
        raise HFUnsupported("add_cross_attention=true", "a decoder-only GPT-2")
    inner = hf.get("n_inner")
    return ModelConfig(
        vocab_size=get(hf, "vocab_size", int), max_seq_len=get(hf, "n_positions", int), d_model=d, n_heads=heads,
        n_layers=get(hf, "n_layer", int), d_ff=4 * d if inner is None else get(hf, "n_inner", int),
        dropout=lab_dropout(hf),
        activation=ACTIVATIONS[act], pos_encoding="learned", norm="layernorm",
        norm_eps=get(hf, "layer_norm_epsilon", float, 1e-5), bias=True,
        tie_embeddings=get(hf, "tie_word_embeddings", bool, True),
    )


def lab_dropout(hf: dict) -> float:
    """The lab's one dropout rate where the folder's rates are its pattern: attention weights and each sublayer's
    output at one rate (attn_pdrop = resid_pdrop), nothing after the embedding (embd_pdrop 0), as hf_config writes
    them. Any other (GPT-2's own 0.1 everywhere) has no one rate here: 0, the lab's default, as before."""
    attn, resid = get(hf, "attn_pdrop", float, 0.0), get(hf, "resid_pdrop", float, 0.0)
    return float(resid) if attn == resid and get(hf, "embd_pdrop", float, 0.0) == 0 and 0 <= resid < 1 else 0.0


def hf_config(config: ModelConfig) -> dict:
    """config.json for a lab model with GPT-2's settings (core.hf.export checks that it has them)."""
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": MODEL_TYPE, "vocab_size": config.vocab_size,
        "n_positions": config.max_seq_len, "n_embd": config.d_model, "n_head": config.n_heads,
        "n_layer": config.n_layers, "n_inner": config.d_ff, "activation_function": "gelu_new"
        if config.activation == "gelu_tanh" else config.activation, "layer_norm_epsilon": config.norm_eps,
        "tie_word_embeddings": config.tie_embeddings,
        # the lab's dropout: attention weights and each sublayer's output, nothing after the embedding (lab_dropout)
        "resid_pdrop": config.dropout, "embd_pdrop": 0.0, "attn_pdrop": config.dropout,
        "scale_attn_weights": True, "torch_dtype": "float32",
        "bos_token_id": None, "eos_token_id": None,  # a folder's tokenizer's: core.hf.save_folder
    }


# The settings a lab model needs for GPT-2 to compute the same function (core.hf.export names the first that differs);
# and a head of keys and values per query head (n_kv_heads none, 0 or n_heads: core.hf.unmet checks the heads built).
# norm_gain=off is none of them: a LayerNorm without gain or bias is GPT-2's with gains of one and biases of zero
# (hf_weights writes those). Nor are fixed positions: GPT-2's learned table holding the sines (sinusoidal) or zeros
# (none) adds what the lab's model adds, and reads back as a learned table.
REQUIRED = {"pos_encoding": ("learned", "sinusoidal", "none"), "norm": "layernorm", "norm_placement": "pre",
            "residual": True, "ffn": True, "causal": True,
            "bias": True, "qk_norm": False, "n_experts": (0, 1),
            "activation": ("gelu_tanh", "gelu", "relu")}


def _prefix(names) -> str:
    """"transformer." as save_pretrained writes it; "" in the original openai-community/gpt2 file."""
    return "transformer." if "transformer.wte.weight" in names else ""


def ignored(name: str) -> bool:
    """Tensors a GPT-2 file may hold that are not weights: the causal mask buffers of older saves."""
    return name.endswith((".attn.bias", ".attn.masked_bias"))


def hf_shapes(config: ModelConfig, names) -> dict[str, tuple[int, ...]]:
    """Every tensor the file must hold for this config, with its shape (checked before anything is read)."""
    p, d, ff = _prefix(names), config.d_model, config.d_ff
    shapes = {f"{p}wte.weight": (config.vocab_size, d), f"{p}wpe.weight": (config.max_seq_len, d),
              f"{p}ln_f.weight": (d,), f"{p}ln_f.bias": (d,)}
    for i in range(config.n_layers):
        h = f"{p}h.{i}."
        shapes.update({
            h + "ln_1.weight": (d,), h + "ln_1.bias": (d,), h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
            h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
            h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
            h + "mlp.c_fc.weight": (d, ff), h + "mlp.c_fc.bias": (ff,),
            h + "mlp.c_proj.weight": (ff, d), h + "mlp.c_proj.bias": (d,),
        })
    if not config.tie_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    return shapes


def lab_weights(config: ModelConfig, names, read: Callable[[str], torch.Tensor]):
    """Yield (the lab's parameter name, its tensor) from GPT-2's, one at a time (`read(name)` loads one)."""
    p, d = _prefix(names), config.d_model
    yield "token_embedding.weight", read(f"{p}wte.weight")
    yield "position_embedding.weight", read(f"{p}wpe.weight")
    for i in range(config.n_layers):
        h, b = f"{p}h.{i}.", f"blocks.{i}."
        for norm in ("ln_1", "ln_2"):
            yield b + f"{norm}.weight", read(h + f"{norm}.weight")
            yield b + f"{norm}.bias", read(h + f"{norm}.bias")
        w, bias = read(h + "attn.c_attn.weight"), read(h + "attn.c_attn.bias")  # (d, 3d): [W_q | W_k | W_v]
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            yield b + f"attn.{name}.weight", w[:, j * d : (j + 1) * d].t()  # Conv1D (in, out) -> Linear (out, in)
            yield b + f"attn.{name}.bias", bias[j * d : (j + 1) * d]
        yield b + "attn.out_proj.weight", read(h + "attn.c_proj.weight").t()
        yield b + "attn.out_proj.bias", read(h + "attn.c_proj.bias")
        yield b + "ffn.fc_in.weight", read(h + "mlp.c_fc.weight").t()
        yield b + "ffn.fc_in.bias", read(h + "mlp.c_fc.bias")
        yield b + "ffn.fc_out.weight", read(h + "mlp.c_proj.weight").t()
        yield b + "ffn.fc_out.bias", read(h + "mlp.c_proj.bias")
    yield "ln_f.weight", read(f"{p}ln_f.weight")
    yield "ln_f.bias", read(f"{p}ln_f.bias")
    if not config.tie_embeddings:
        yield "lm_head.weight", read("lm_head.weight")


def _position_table(model) -> torch.Tensor:
    """What the model adds at each position, as GPT-2's table of max_seq_len rows: the learned table, the sines (not
    in the state dict: derived from the config), or zeros where nothing is added (pos_encoding=none)."""
    config, positions = model.config, model.position_embedding
    if positions is None:
        return torch.zeros(config.max_seq_len, config.d_model)
    table = positions.weight if isinstance(positions, torch.nn.Embedding) else positions.table
    return table.detach().float().cpu()[: config.max_seq_len].clone()


def hf_weights(model) -> dict[str, torch.Tensor]:
    """GPT-2's tensors (as save_pretrained names them) from a lab model with GPT-2's settings."""
    s = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    L, d = model.config.n_layers, model.config.d_model
    # norm_gain=off: the lab's norms learn no gain and no bias, which is GPT-2's LayerNorm with g = 1 and b = 0
    for norm in ["ln_f", *(f"blocks.{i}.{n}" for i in range(L) for n in ("ln_1", "ln_2"))]:
        s.setdefault(f"{norm}.weight", torch.ones(d))
        s.setdefault(f"{norm}.bias", torch.zeros(d))
    out = {"transformer.wte.weight": s["token_embedding.weight"], "transformer.wpe.weight": _position_table(model),
           "transformer.ln_f.weight": s["ln_f.weight"], "transformer.ln_f.bias": s["ln_f.bias"]}
    for i in range(L):
        h, b = f"transformer.h.{i}.", f"blocks.{i}."
        for norm in ("ln_1", "ln_2"):
            out[h + f"{norm}.weight"], out[h + f"{norm}.bias"] = s[b + f"{norm}.weight"], s[b + f"{norm}.bias"]
        qkv = ("q_proj", "k_proj", "v_proj")
        out[h + "attn.c_attn.weight"] = torch.cat([s[b + f"attn.{n}.weight"].t() for n in qkv], dim=1)  # (d, 3d)
        out[h + "attn.c_attn.bias"] = torch.cat([s[b + f"attn.{n}.bias"] for n in qkv])
        out[h + "attn.c_proj.weight"], out[h + "attn.c_proj.bias"] = s[b + "attn.out_proj.weight"].t(), s[b + "attn.out_proj.bias"]
        out[h + "mlp.c_fc.weight"], out[h + "mlp.c_fc.bias"] = s[b + "ffn.fc_in.weight"].t(), s[b + "ffn.fc_in.bias"]
        out[h + "mlp.c_proj.weight"], out[h + "mlp.c_proj.bias"] = s[b + "ffn.fc_out.weight"].t(), s[b + "ffn.fc_out.bias"]
    if not model.config.tie_embeddings:
        out["lm_head.weight"] = s["lm_head.weight"]
    return {k: v.contiguous() for k, v in out.items()}
