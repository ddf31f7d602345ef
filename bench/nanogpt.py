"""Training steps side by side with karpathy/nanoGPT (../shared/anchors/nanogpt), in one process.

Same sizes, same batch, the same AdamW settings (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on
matrices, no fusion), float32 unless a row says otherwise; the rows alternate step chunk by step
chunk so that a busy machine slows them alike, and the table gives medians and the ratio to
nanoGPT. minitf rows: the explicit formula (the default), the fused SDPA path, SDPA + torch.compile,
and SDPA with bfloat16 autocast. Random tokens: this measures speed, not learning.

    python bench/nanogpt.py                 # 4 x 4 x 128, block 64, batch 12 (nanoGPT's CPU recipe)
    python bench/nanogpt.py --large         # 6 x 6 x 384, block 256, batch 32
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from pathlib import Path

import torch

from minitf_repl.core.config import ModelConfig
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.precision import autocast

ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "nanogpt" / "model.py"


def nanogpt_model(size: dict):
    spec = importlib.util.spec_from_file_location("nanogpt_anchor", ANCHOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.GPTConfig(block_size=size["T"], vocab_size=size["V"], n_layer=size["L"], n_head=size["H"],
                              n_embd=size["d"], dropout=0.0, bias=True)
    return module.GPT(config)


def minitf_model(size: dict, attention: str):
    return MiniTransformerLM(ModelConfig(vocab_size=size["V"], max_seq_len=size["T"], d_model=size["d"],
                                         n_heads=size["H"], n_layers=size["L"], d_ff=4 * size["d"],
                                         attention=attention))


def adamw(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                             lr=1e-3, betas=(0.9, 0.99), foreach=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="steps per chunk")
    parser.add_argument("--no-compile", action="store_true")
    args = parser.parse_args()
    if not ANCHOR.is_file():
        print(f"skipped: nanoGPT's model is not at {ANCHOR} (a user's clone has no ../shared)")
        return
    size = (dict(L=6, H=6, d=384, T=256, B=32, V=65) if args.large else dict(L=4, H=4, d=128, T=64, B=12, V=65))
    torch.manual_seed(0)
    rows = {"nanoGPT": (nanogpt_model(size), None, False),
            "minitf explicit": (minitf_model(size, "explicit"), None, False),
            "minitf sdpa": (minitf_model(size, "sdpa"), None, False),
            "minitf sdpa bf16": (minitf_model(size, "sdpa"), "bfloat16", False)}
    if not args.no_compile:
        rows["minitf sdpa compiled"] = (minitf_model(size, "sdpa"), None, True)
    runs = {}
    for name, (model, dtype, compiled) in rows.items():
        model.train()
        runs[name] = (torch.compile(model) if compiled else model, adamw(model), dtype)
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(size["V"], (size["B"], size["T"] + 1), generator=g) for _ in range(4)]

    def step(name: str, i: int) -> None:
        forward, optimizer, dtype = runs[name]
        seq = batches[i % len(batches)]
        with autocast(dtype or "float32", "cpu"):
            _, loss = forward(seq[:, :-1].contiguous(), seq[:, 1:].contiguous())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    first = {}
    for name in runs:  # warm-up (and compilation) outside the timing
        t0 = time.perf_counter()
        step(name, 0)
        first[name] = time.perf_counter() - t0
    per_step = {name: [] for name in runs}
    for chunk in range(args.chunks):
        for name in runs:
            t0 = time.perf_counter()
            for i in range(args.steps):
                step(name, chunk * args.steps + i)
            per_step[name].append((time.perf_counter() - t0) / args.steps)
    tokens = size["B"] * size["T"]
    base = tokens / statistics.median(per_step["nanoGPT"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {size['L']} layers x {size['H']} heads x "
          f"{size['d']}, block {size['T']}, batch {size['B']}; medians of {args.chunks} alternated chunks of "
          f"{args.steps} steps")
    for name in runs:
        tps = tokens / statistics.median(per_step[name])
        extra = f"   (first step {first[name]:.1f} s)" if name.endswith("compiled") else ""
        print(f"{name:22s} {tps:9,.0f} tok/s   {tps / base:5.2f}x nanoGPT{extra}")


if __name__ == "__main__":
    main()
