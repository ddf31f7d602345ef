"""Peak resident memory of `minitf train --steps 100` (the default model on the built-in data).

Each run is a fresh process measured by /usr/bin/time -v ("Maximum resident set size"), with a
throw-away checkpoint folder, so the autosave at the end is counted too. Rows, alternated:
    threads=auto      what a user gets (core/threads.py picks the count)
    threads=1         one thread (fewer per-thread buffers)
    nanoGPT           karpathy/nanoGPT's model and configure_optimizers (../shared/anchors), 100 steps
                      of its CPU recipe's size (batch 12, block 64), random tokens: the reference
The target (issue 16) is at most 350 MB for the first row. Medians of --runs runs.

    python bench/memory.py [--runs 3] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "nanogpt" / "model.py"

NANOGPT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("nanogpt_anchor", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.GPT(m.GPTConfig(block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False))
opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
for _ in range(int(sys.argv[2])):
    x = torch.randint(65, (12, 65))
    _, loss = model(x[:, :-1].contiguous(), x[:, 1:].contiguous()); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
"""


def peak_mb(cmd: list[str], env: dict) -> float:
    done = subprocess.run(["/usr/bin/time", "-v", *cmd], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    kb = re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    return int(kb.group(1)) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    if not Path("/usr/bin/time").exists():
        print("skipped: needs GNU time at /usr/bin/time (apt-get install time)")
        return
    from minitf_repl.core.device import cpu_kind

    minitf = [sys.executable, "-m", "minitf_repl"]
    rows = {
        "threads=auto": minitf + ["train", "--steps", str(args.steps)],
        "threads=1": minitf + ["--set", "threads=1", "train", "--steps", str(args.steps)],
    }
    if ANCHOR.is_file():
        rows["nanoGPT"] = [sys.executable, "-c", NANOGPT, str(ANCHOR), str(args.steps)]
    peaks = {name: [] for name in rows}
    folder = Path(tempfile.mkdtemp(prefix="minitf-memory-"))
    env = {k: v for k, v in os.environ.items() if k != "MINITF_THREADS"}
    env["MINITF_CHECKPOINT_DIR"] = str(folder / "checkpoints")
    try:
        for _ in range(args.runs):
            for name, cmd in rows.items():
                peaks[name].append(peak_mb(cmd, env))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{cpu_kind()}; peak RSS of a {args.steps}-step train, medians of {args.runs} runs (MB)")
    for name, values in peaks.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"  {name:14s} {statistics.median(values):6.0f}   ({shown})")


if __name__ == "__main__":
    main()
