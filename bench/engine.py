"""Engine benchmarks, measured side by side in one run.

1. Training throughput (tokens/s) of the explicit attention path vs the SDPA path, on the same
   weights and the same batches, at two sizes: 4 layers x 4 heads x 128 wide (block 64, batch 12)
   and 6 x 6 x 384 (block 256, batch 32).
2. Decode throughput for 256 new tokens with and without the KV cache (larger size).

The two variants alternate within each repeat, so machine noise hits both alike; we report
medians and the ratio of medians.

    python bench/engine.py            # full run (a few minutes on 2 CPU cores)
    python bench/engine.py --quick    # fewer repeats
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from minitf_repl.core.config import GenConfig, ModelConfig
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM

VOCAB = 65  # tiny Shakespeare's character vocabulary
SIZES = {
    "small": dict(n_layers=4, n_heads=4, d_model=128, d_ff=512, max_seq_len=64, batch=12),
    "large": dict(n_layers=6, n_heads=6, d_model=384, d_ff=1536, max_seq_len=256, batch=32),
}


def build(size: dict, attention: str) -> MiniTransformerLM:
    cfg = {k: v for k, v in size.items() if k != "batch"}
    torch.manual_seed(0)  # same seed: the same weights for both paths
    return MiniTransformerLM(ModelConfig(vocab_size=VOCAB, attention=attention, **cfg))


def train_step_seconds(model, optimizer, x, y) -> float:
    t0 = time.perf_counter()
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return time.perf_counter() - t0


def bench_training(name: str, size: dict, steps: int, repeats: int) -> float:
    g = torch.Generator().manual_seed(1)
    T, B = size["max_seq_len"], size["batch"]
    batches = [torch.randint(VOCAB, (B, T + 1), generator=g) for _ in range(steps)]
    runs = {}
    for attention in ("explicit", "sdpa"):
        model = build(size, attention)
        runs[attention] = (model, torch.optim.AdamW(model.parameters(), lr=1e-4))
        train_step_seconds(*runs[attention], batches[0][:, :-1], batches[0][:, 1:])  # warm-up
    times = {"explicit": [], "sdpa": []}
    for _ in range(repeats):
        for attention in ("explicit", "sdpa"):
            for batch in batches:
                times[attention].append(train_step_seconds(*runs[attention], batch[:, :-1], batch[:, 1:]))
    tps = {a: B * T / statistics.median(ts) for a, ts in times.items()}
    ratio = tps["sdpa"] / tps["explicit"]
    print(
        f"train {name:5s} explicit {tps['explicit']:9.0f} tok/s | sdpa {tps['sdpa']:9.0f} tok/s | "
        f"sdpa/explicit {ratio:.2f}x  (median of {len(times['sdpa'])} steps each)"
    )
    return ratio


def bench_decode(size: dict, new_tokens: int, repeats: int) -> float:
    model = build(size, "explicit")
    prompt = [0]  # 1 + 256 tokens: the last step sees exactly max_seq_len = 256 positions
    times = {True: [], False: []}
    list(generate(model, prompt, GenConfig(n=8, temperature=0, cache=True)))  # warm-up
    for _ in range(repeats):
        for cache in (True, False):
            t0 = time.perf_counter()
            out = list(generate(model, prompt, GenConfig(n=new_tokens, temperature=0, cache=cache)))
            times[cache].append(time.perf_counter() - t0)
            assert len(out) == new_tokens
    tps = {c: new_tokens / statistics.median(ts) for c, ts in times.items()}
    ratio = tps[True] / tps[False]
    print(
        f"decode large, {new_tokens} new tokens: cache {tps[True]:7.1f} tok/s | naive {tps[False]:7.1f} tok/s | "
        f"cache/naive {ratio:.2f}x  (median of {repeats} runs each)"
    )
    # The cached step reads every weight once per token (plus the cache), so memory bandwidth bounds it.
    weight_bytes = sum(p.numel() * p.element_size() for p in set(model.parameters()))
    bandwidth = memory_bandwidth()
    limit = bandwidth / weight_bytes
    print(
        f"  memory bandwidth {bandwidth / 1e9:.1f} GB/s (a {BANDWIDTH_BYTES >> 20} MiB copy, median): reading "
        f"{weight_bytes / 1e6:.1f} MB of weights per token allows {limit:,.0f} tok/s; the cache reaches "
        f"{tps[True] / limit:.0%} of that"
    )
    return ratio


BANDWIDTH_BYTES = 256 * 2**20  # far past the last-level cache, so the copy streams from memory


def memory_bandwidth(repeats: int = 9) -> float:
    """Bytes per second that one tensor copy moves (read + write) on this machine: the decode bound."""
    src = torch.ones(BANDWIDTH_BYTES // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return 2 * BANDWIDTH_BYTES / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, CPU")
    small = bench_training("small", SIZES["small"], steps=10, repeats=2 if args.quick else 5)
    large = bench_training("large", SIZES["large"], steps=3, repeats=2 if args.quick else 3)
    decode = bench_decode(SIZES["large"], 256, repeats=2 if args.quick else 5)
    print(
        f"summary: sdpa/explicit small {small:.2f}x, large {large:.2f}x (target >= 1.2x at large); "
        f"cache/naive {decode:.2f}x (target >= 4x)"
    )


if __name__ == "__main__":
    main()
