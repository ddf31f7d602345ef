"""How long do the look-inside views take on the default model? The target is < 1 s each.

Times `attention_maps`, `next_token_pipeline`, `logit_lens` and `cost_ledger` on `ModelConfig()`
defaults (4 layers x 4 heads x 128 wide, context 64) with a vocabulary of 100 and a 64-token
prompt, and prints the median of several runs after one warm-up call each. Then the same for the
commands end to end (`run_command` on a default Session, pydoc data, default prompt), :plot over a
2,000-step history; rendering is not included.

    python bench/views.py             # 9 runs each
    python bench/views.py --runs 21 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from minitf_repl.core.config import ModelConfig
from minitf_repl.core.inside import attention_maps, logit_lens, next_token_pipeline
from minitf_repl.core.ledger import cost_ledger
from minitf_repl.core.model import MiniTransformerLM

VOCAB, PROMPT = 100, 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=VOCAB))
    idx = torch.randint(0, VOCAB, (PROMPT,), generator=torch.Generator().manual_seed(1))
    targets = idx[1:].tolist() + [-1]
    views = {
        "attention_maps": lambda: attention_maps(model, idx),
        "next_token_pipeline": lambda: next_token_pipeline(model, idx, 0.8, 20, 0.9, seed=0),
        "logit_lens": lambda: logit_lens(model, idx, top=5, targets=targets),
        "cost_ledger": lambda: cost_ledger(model, 32),
    }
    threads = torch.get_num_threads()
    print(f"default model, vocab {VOCAB}, {PROMPT}-token prompt, {threads} torch threads, {args.runs} runs")
    for name, view in views.items():
        report(name, view, args.runs)

    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session

    session = Session()  # the default model and data
    session.trainer.history = [
        {"step": i, "train_loss": 4.6 / (1 + i / 300), "val_loss": 4.7 / (1 + i / 300) if i % 100 == 0 else None,
         "lr": 3e-3, "grad_norm": 1.0} for i in range(1, 2001)
    ]
    commands = {
        ":attn": lambda: run_command(session, "attn", {}),
        ":attn head=all": lambda: run_command(session, "attn", {"head": "all", "layer": 3}),
        ":step": lambda: run_command(session, "step", {"gen_seed": 0}),
        ":lens": lambda: run_command(session, "lens", {}),
        ":plot": lambda: run_command(session, "plot", {}),
    }
    print(f"commands end to end (run_command), default session ({session.data_spec}), {args.runs} runs")
    for name, command in commands.items():
        report(name, command, args.runs)


def report(name: str, view, runs: int) -> None:
    view()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        view()
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(f"{name:<20} median {median * 1000:8.2f} ms   {'ok' if median < 1.0 else 'SLOWER THAN 1 s'}")


if __name__ == "__main__":
    main()
