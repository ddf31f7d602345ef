"""Decoding side by side: minitf's KV cache against the blog's naive loop (../shared/anchors/seed), one process.

Both models have the same size (6 layers x 6 heads x 384 wide, context 256) and run in eval mode
under no_grad/inference_mode on the CPU; each generates 256 new tokens from one token, so the last
steps see the whole context. The runs alternate (blog, minitf, blog, ...) and the medians are
compared, so a busy machine slows both alike. Also printed: the memory-bandwidth bound (every weight
read once per token) and the share of it minitf's cached loop reaches.

    python bench/decode.py            # about a minute on 2 cores
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

from minitf_repl.core.config import GenConfig, ModelConfig
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM

ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "seed" / "mini_transformer.py"
SIZE = dict(vocab_size=100, max_seq_len=256, d_model=384, n_heads=6, n_layers=6, d_ff=1536)


def load_anchor():
    spec = importlib.util.spec_from_file_location("seed_anchor", ANCHOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if not ANCHOR.is_file():
        print(f"skipped: the blog's model is not at {ANCHOR} (a user's clone has no ../shared)")
        return
    seed = load_anchor()
    torch.manual_seed(0)
    blog = seed.MiniTransformerLM(seed.ModelConfig(**SIZE, dropout=0.0)).eval()
    ours = MiniTransformerLM(ModelConfig(**SIZE)).eval()
    start = torch.zeros(1, 1, dtype=torch.long)

    def run_blog() -> None:
        with torch.no_grad():
            blog.generate(start, args.tokens)

    def run_ours() -> None:
        out = list(generate(ours, [0], GenConfig(n=args.tokens, temperature=1.0, gen_seed=0, cache=True)))
        assert len(out) == args.tokens

    run_blog(), run_ours()  # warm-up
    times = {"blog": [], "minitf": []}
    for _ in range(args.repeats):
        for name, fn in (("blog", run_blog), ("minitf", run_ours)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    tps = {name: args.tokens / statistics.median(ts) for name, ts in times.items()}
    weight_bytes = sum(p.numel() * p.element_size() for p in set(ours.parameters()))
    sys.path.insert(0, str(Path(__file__).parent))
    from engine import memory_bandwidth

    bound = memory_bandwidth() / weight_bytes
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; 6x6x384, context 256, "
          f"{args.tokens} new tokens, medians of {args.repeats} alternated runs")
    print(f"blog's naive loop   {tps['blog']:8.1f} tok/s")
    print(f"minitf, KV cache    {tps['minitf']:8.1f} tok/s   {tps['minitf'] / tps['blog']:.2f}x the blog's loop")
    print(f"memory bound        {bound:8.1f} tok/s   ({weight_bytes / 1e6:.1f} MB of weights a token); "
          f"minitf reaches {tps['minitf'] / bound:.0%}")


if __name__ == "__main__":
    main()
