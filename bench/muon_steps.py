"""Muon's optimizer step: three Polar Express Newton-Schulz steps (today's) against torch's quintic five times.

One process, the default model's Muon-and-AdamW optimizer (core.optimizers.MuonWithAdamW) over
gradients of the default model's shapes; the two settings of its Muon group alternated round by
round, so a machine slowing down slows both alike. On this CPU's own path (Newton-Schulz in
bfloat16 where the CPU has AMX or AVX512-BF16, else float32) and, on a CPU with those units, also
as a CPU without them runs it (bench/cpu_kinds.py: Newton-Schulz in float32, the Gram form for the
feed-forward matrices). The learning side of the change (validation loss over seeds) is in
docs/speed.md; this measures only its price.

    python bench/muon_steps.py [--rounds 30] [--steps 5]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.device import cpu_kind
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.optimizers import POLAR_EXPRESS, make_optimizer
from minitf_repl.core.precision import fast_dtype, native_bf16
from minitf_repl.core.threads import ThreadPolicy

from cpu_kinds import without_bf16_units

SETTINGS = {  # label: (ns_coefficients, ns_steps) of Muon's group
    "torch's quintic x 5": ((3.4445, -4.7750, 2.0315), 5),
    "Polar Express x 3": (POLAR_EXPRESS, len(POLAR_EXPRESS)),
}


def step_times(rounds: int, steps: int) -> dict[str, float]:
    """{label: median ms of one optimizer step}, the settings alternated every `steps` steps."""
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=96))
    optimizer = make_optimizer(model, TrainConfig(optimizer="muon"))
    for p in model.parameters():
        p.grad = 1e-2 * torch.randn_like(p)
    group = optimizer.param_groups[0]
    times = {label: [] for label in SETTINGS}
    for _ in range(rounds):
        for label, (coefficients, n) in SETTINGS.items():
            group["ns_coefficients"], group["ns_steps"] = coefficients, n
            start = time.perf_counter()
            for _ in range(steps):
                optimizer.step()
            times[label].append((time.perf_counter() - start) / steps)
    return {label: 1e3 * statistics.median(t[2:]) for label, t in times.items()}  # the first rounds warm up


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--steps", type=int, default=5, help="optimizer steps per round and setting")
    args = parser.parse_args()
    threads = ThreadPolicy(0).decide()
    print(f"{cpu_kind()}; torch {torch.__version__}; {threads.describe()} threads; default model (4 x 128, "
          f"d_ff 512), Muon with AdamW; medians of {args.rounds} alternated rounds of {args.steps} steps")
    paths = [("this CPU's own path", contextlib.nullcontext)]
    if native_bf16("cpu"):
        paths.append(("a CPU without bfloat16's path, on this CPU's float32 units", without_bf16_units))
    for name, context in paths:
        with context():
            dtype = fast_dtype("cpu")
            ms = step_times(args.rounds, args.steps)
        old, new = SETTINGS
        print(f"{name} (Newton-Schulz in {dtype}): " + ", ".join(f"{label} {v:.2f} ms" for label, v in ms.items())
              + f"; {ms[new] / ms[old]:.2f}x")

if __name__ == "__main__":
    main()
