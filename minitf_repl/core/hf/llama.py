"""Llama (model_type "llama") <-> MiniTransformerLM: the lab's modern switches, all on at once.

Llama is the seed model with RoPE instead of a position table, RMSNorm instead of LayerNorm,
SwiGLU instead of GELU, no biases, grouped-query attention (n_kv_heads < n_heads) and an untied
head. One difference of layout remains, in RoPE:

- Hugging Face's Llama rotates feature i of a head with feature i + head_dim/2 (the "half-split"
  layout); the lab's RotaryEmbedding rotates neighbours 2i and 2i + 1 (the RoFormer paper's).
  Both turn pair i by the same angle pos * base^(-2i/head_dim), so the two are the same model once
  the rows of W_q and W_k inside each head are reordered: the lab's row 2i is HF's row i and its
  row 2i + 1 is HF's row i + head_dim/2. q.k is a sum over the features, which no reordering of
  both q and k changes, and V is not rotated, so nothing else moves.

    Hugging Face                                   MiniTransformerLM
    model.embed_tokens                             token_embedding
    model.layers.i.input_layernorm                 blocks.i.ln_1 (RMSNorm)
    model.layers.i.self_attn.q_proj, k_proj        blocks.i.attn.q_proj, k_proj (rows reordered per head)
    model.layers.i.self_attn.v_proj, o_proj        blocks.i.attn.v_proj, out_proj
    model.layers.i.post_attention_layernorm        blocks.i.ln_2
    model.layers.i.mlp.gate_proj, up_proj, down_proj   blocks.i.ffn.gate_proj, up_proj, down_proj
    model.norm, lm_head                            ln_f, lm_head
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from ..config import ModelConfig, ffn_hidden
from .common import HFUnsupported, get

MODEL_TYPE = "llama"
KEEPS_DROPOUT = False  # its attention_dropout drops attention weights alone, no sublayer's output as the lab's does
SIZES = "hidden_size, num_attention_heads, num_key_value_heads, num_hidden_layers, intermediate_size, vocab_size"
# RoPE needs no table of positions, so a model's context can be cut to what a lab session can hold:
# every layer keeps a (T, T) causal mask, 4 MB at 2,048 positions.
MAX_CONTEXT = 2048


def lab_config(hf: dict) -> ModelConfig:
    """The lab's settings for a Llama config.json (refusing what the lab's model cannot compute)."""
    d, heads = get(hf, "hidden_size", int), get(hf, "num_attention_heads", int)
    if get(hf, "hidden_act", str, "silu") != "silu":
        raise HFUnsupported(f"hidden_act={hf['hidden_act']}", "SwiGLU with silu")
    if get(hf, "attention_bias", bool, False) or get(hf, "mlp_bias", bool, False):
        raise HFUnsupported("biases in attention or the MLP", "Llama without biases")
    if heads <= 0 or get(hf, "head_dim", int, d // heads) != d // heads:
        raise HFUnsupported(f"head_dim={hf.get('head_dim')} with hidden_size={d} and {heads} heads",
                            "head_dim = hidden_size / num_attention_heads")
    # transformers 5 writes rope_parameters; an older config's rope_scaling is read as them, and a rope_type of
    # "default" in either is plain RoPE
    rope = hf.get("rope_parameters") if isinstance(hf.get("rope_parameters"), dict) else {}
    scaling = hf.get("rope_scaling") or rope
    kind = (scaling.get("rope_type", scaling.get("type", "default" if scaling is rope else "?"))
            if isinstance(scaling, dict) else scaling)
    if kind != "default":
        raise HFUnsupported(f"RoPE scaling ({kind})", "plain RoPE (no rope_scaling)")
    scaled = scaling if isinstance(scaling, dict) else {}
    theta = rope.get("rope_theta", scaled.get("rope_theta", hf.get("rope_theta", 10000.0)))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)):
        raise HFUnsupported(f"rope_theta={theta!r}", "a number")
    intermediate = get(hf, "intermediate_size", int)
    config = ModelConfig(
        vocab_size=get(hf, "vocab_size", int),
        max_seq_len=min(get(hf, "max_position_embeddings", int, MAX_CONTEXT), MAX_CONTEXT),
        d_model=d, n_heads=heads, n_kv_heads=get(hf, "num_key_value_heads", int, heads),
        n_layers=get(hf, "num_hidden_layers", int),
        # The lab's SwiGLU has int(2 d_ff / 3) hidden units; this d_ff gives exactly `intermediate`.
        d_ff=math.ceil(3 * intermediate / 2), dropout=0.0, activation="swiglu", pos_encoding="rope",
        rope_base=float(theta), norm="rmsnorm", norm_eps=get(hf, "rms_norm_eps", float, 1e-6), bias=False,
        tie_embeddings=get(hf, "tie_word_embeddings", bool, False),
    )
    assert ffn_hidden(config) == intermediate  # ceil(3 I / 2) * 2 / 3 rounds down to I for every I
    return config


def hf_config(config: ModelConfig) -> dict:
    """config.json for a lab model with Llama's settings (core.hf.export checks that it has them)."""
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": MODEL_TYPE, "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_seq_len, "hidden_size": config.d_model,
        "num_attention_heads": config.n_heads, "num_key_value_heads": config.kv_heads,
        "num_hidden_layers": config.n_layers, "intermediate_size": ffn_hidden(config), "head_dim": config.head_dim,
        "hidden_act": "silu", "rms_norm_eps": config.norm_eps, "rope_theta": config.rope_base,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_base},
        "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
        "tie_word_embeddings": config.tie_embeddings, "torch_dtype": "float32",
        "bos_token_id": None, "eos_token_id": None,  # a folder's tokenizer's: core.hf.save_folder
    }


# The settings a lab model needs for Llama to compute the same function (core.hf.export names the first that differs).
# norm_gain=off is none of them: an RMSNorm without a gain is Llama's with gains of one (hf_weights writes those).
REQUIRED = {"pos_encoding": "rope", "norm": "rmsnorm", "norm_placement": "pre",
            "residual": True, "ffn": True, "causal": True, "bias": False,
            "qk_norm": False, "n_experts": (0, 1), "activation": "swiglu"}


def ignored(name: str) -> bool:
    """Tensors a Llama file may hold that are not weights: the rotary frequencies of older saves."""
    return name.endswith("rotary_emb.inv_freq")


def hf_shapes(config: ModelConfig, names) -> dict[str, tuple[int, ...]]:
    d, hidden, kv = config.d_model, ffn_hidden(config), config.kv_heads * config.head_dim
    shapes = {"model.embed_tokens.weight": (config.vocab_size, d), "model.norm.weight": (d,)}
    for i in range(config.n_layers):
        h = f"model.layers.{i}."
        shapes.update({
            h + "input_layernorm.weight": (d,), h + "post_attention_layernorm.weight": (d,),
            h + "self_attn.q_proj.weight": (d, d), h + "self_attn.k_proj.weight": (kv, d),
            h + "self_attn.v_proj.weight": (kv, d), h + "self_attn.o_proj.weight": (d, d),
            h + "mlp.gate_proj.weight": (hidden, d), h + "mlp.up_proj.weight": (hidden, d),
            h + "mlp.down_proj.weight": (d, hidden),
        })
    if not config.tie_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, d)
    return shapes


def rope_order(head_dim: int) -> torch.Tensor:
    """For each of the lab's features of a head, the HF feature it is: [0, D/2, 1, D/2 + 1, ...]."""
    half = torch.arange(head_dim // 2)
    return torch.stack((half, half + head_dim // 2), dim=1).flatten()  # (head_dim,)


def to_lab_rope(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """W_q or W_k (heads * head_dim, d) from HF's half-split layout to the lab's interleaved pairs."""
    out, d = w.shape
    return w.view(out // head_dim, head_dim, d)[:, rope_order(head_dim)].reshape(out, d)


def to_hf_rope(w: torch.Tensor, head_dim: int) -> torch.Tensor:
    """The inverse of to_lab_rope."""
    out, d = w.shape
    return w.view(out // head_dim, head_dim, d)[:, torch.argsort(rope_order(head_dim))].reshape(out, d)


def lab_weights(config: ModelConfig, names, read: Callable[[str], torch.Tensor]):
    """Yield (the lab's parameter name, its tensor) from Llama's, one at a time (`read(name)` loads one)."""
    D = config.head_dim
    yield "token_embedding.weight", read("model.embed_tokens.weight")
    for i in range(config.n_layers):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        yield b + "ln_1.weight", read(h + "input_layernorm.weight")
        yield b + "ln_2.weight", read(h + "post_attention_layernorm.weight")
        yield b + "attn.q_proj.weight", to_lab_rope(read(h + "self_attn.q_proj.weight"), D)
        yield b + "attn.k_proj.weight", to_lab_rope(read(h + "self_attn.k_proj.weight"), D)
        yield b + "attn.v_proj.weight", read(h + "self_attn.v_proj.weight")
        yield b + "attn.out_proj.weight", read(h + "self_attn.o_proj.weight")
        for name in ("gate_proj", "up_proj", "down_proj"):
            yield b + f"ffn.{name}.weight", read(h + f"mlp.{name}.weight")
    yield "ln_f.weight", read("model.norm.weight")
    if not config.tie_embeddings:
        yield "lm_head.weight", read("lm_head.weight")


def hf_weights(model) -> dict[str, torch.Tensor]:
    """Llama's tensors (as save_pretrained names them) from a lab model with Llama's settings."""
    s = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    D, L = model.config.head_dim, model.config.n_layers
    # norm_gain=off: the lab's RMSNorms learn no gain, which is Llama's with g = 1
    for norm in ["ln_f", *(f"blocks.{i}.{n}" for i in range(L) for n in ("ln_1", "ln_2"))]:
        s.setdefault(f"{norm}.weight", torch.ones(model.config.d_model))
    out = {"model.embed_tokens.weight": s["token_embedding.weight"], "model.norm.weight": s["ln_f.weight"]}
    for i in range(L):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        out[h + "input_layernorm.weight"] = s[b + "ln_1.weight"]
        out[h + "post_attention_layernorm.weight"] = s[b + "ln_2.weight"]
        out[h + "self_attn.q_proj.weight"] = to_hf_rope(s[b + "attn.q_proj.weight"], D)
        out[h + "self_attn.k_proj.weight"] = to_hf_rope(s[b + "attn.k_proj.weight"], D)
        out[h + "self_attn.v_proj.weight"] = s[b + "attn.v_proj.weight"]
        out[h + "self_attn.o_proj.weight"] = s[b + "attn.out_proj.weight"]
        for name in ("gate_proj", "up_proj", "down_proj"):
            out[h + f"mlp.{name}.weight"] = s[b + f"ffn.{name}.weight"]
    if not model.config.tie_embeddings:
        out["lm_head.weight"] = s["lm_head.weight"]
    return {k: v.contiguous() for k, v in out.items()}
