"""The `threads` setting: auto (the default) against 1 thread and one per core, idle and loaded.

Training steps of the default model on the built-in data (the first `:train`'s recipe), in one
process, with torch at 1 thread, at N threads (one per usable core) and under `threads=0` (auto,
core/threads.py, which measures the other work and picks), alternated chunk by chunk. Twice: as the
machine is, and with `--load K` programs spinning on K cores beside it (default 1: what a second
user, a compile or a browser does to a 2-core laptop). Medians of the chunks; the ratio to auto.

    python bench/threads.py [--chunks 5] [--steps 10] [--load 1]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.device import cpu_kind
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.threads import ThreadPolicy, usable_cores
from minitf_repl.core.train import Trainer


def stepper(data):
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size))
    trainer = Trainer(model, data, TrainConfig(eval_every=10**9))
    trainer.start_run(10**9)

    def steps(n: int) -> float:
        start, stop_at = time.perf_counter(), trainer.step + n
        trainer.run(should_stop=lambda: trainer.step >= stop_at)
        return (time.perf_counter() - start) / n

    return steps


def measure(data, chunks: int, steps: int, cores: int) -> dict:
    rows = {"1 thread": ThreadPolicy(1), f"{cores} threads": ThreadPolicy(cores), "auto": ThreadPolicy(0)}
    run = stepper(data)
    picked = []
    times = {name: [] for name in rows}
    for name, policy in rows.items():  # warm-up
        policy.decide()
        run(1)
    for _ in range(chunks):
        for name, policy in rows.items():
            choice = policy.decide()
            if name == "auto":
                picked.append(choice)
            times[name].append(run(steps))
    return {"times": {n: statistics.median(t) for n, t in times.items()}, "picked": picked}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="training steps per chunk")
    parser.add_argument("--load", type=int, default=1, help="cores to keep busy in the loaded half")
    args = parser.parse_args()
    data = load_data("pydoc")
    cores = usable_cores()
    print(f"{cpu_kind()}; torch {torch.__version__}; {cores} usable cores; default model, batch "
          f"{TrainConfig().batch_size}; medians of {args.chunks} alternated chunks of {args.steps} steps")
    for label, load in (("as the machine is", 0), (f"with {args.load} spinning program(s)", args.load)):
        spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
        try:
            time.sleep(0.5 if load else 0)
            result = measure(data, args.chunks, args.steps, cores)
        finally:
            for p in spinners:
                p.kill()
                p.wait()
        auto = result["times"]["auto"]
        chose = ", ".join(sorted({c.describe() for c in result["picked"]}))
        print(f"\n{label}: auto chose {chose}")
        for name, seconds in result["times"].items():
            print(f"  {name:12s} {seconds * 1000:8.1f} ms a step   {seconds / auto:6.2f}x auto's time")


if __name__ == "__main__":
    main()
