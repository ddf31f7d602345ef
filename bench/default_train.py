"""The default `minitf train` (600 steps on the built-in pydoc data) as a user runs it, on each device asked for.

Each run is a process of its own, `python -m minitf_repl --device D [--set compile=on] train --json`, so a row's
wall time holds what a user waits for: the start, the data, the compile where asked, the 600 steps and their
evaluations. Rows alternate over --repeats rounds; each gives the median wall time, the run's own seconds (the
steps and evaluations), its tokens/s, the dtype it trained in and the final val loss. Checkpoints go to a
temporary folder.

    python bench/default_train.py                      # cpu
    python bench/default_train.py --devices cuda,cpu --compile --repeats 2   # on a machine with a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def one_run(device: str, compile_: bool, folder: str) -> dict:
    command = [sys.executable, "-m", "minitf_repl", "--device", device,
               "--set", f"compile={'on' if compile_ else 'off'}", "train", "--json"]
    env = {**os.environ, "MINITF_CHECKPOINT_DIR": folder}
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    return dict(wall=wall, seconds=doc["seconds"], tokens=doc["tokens_per_second"], val=doc["val_loss"],
                dtype=doc["dtype"], compile_seconds=doc.get("compile_seconds"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="cpu", help="comma-separated, e.g. cuda,cpu")
    parser.add_argument("--compile", action="store_true", help="each device also with compile=on")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    rows = [(device, compile_) for device in args.devices.split(",") for compile_ in ((False, True) if args.compile
                                                                                     else (False,))]
    runs: dict[tuple, list[dict]] = {row: [] for row in rows}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for row in rows:
                runs[row].append(one_run(*row, folder))
    import torch

    from minitf_repl.core.device import cpu_kind

    gpu = f"; {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    print(f"{cpu_kind()}{gpu}; torch {torch.__version__}; "
          f"the default `minitf train`, medians of {args.repeats} alternated run(s), each a process of its own")
    first = None
    for (device, compile_), done in runs.items():
        wall = statistics.median(r["wall"] for r in done)
        first = first or wall
        seconds = statistics.median(r["seconds"] for r in done)
        tokens = statistics.median(r["tokens"] for r in done)
        compiled = done[-1]["compile_seconds"]
        print(f"  {device:<6} compile={'on ' if compile_ else 'off'}  wall {wall:6.1f} s "
              f"({first / wall:4.2f}x the first row's speed)  run {seconds:6.1f} s  {tokens:9,.0f} tokens/s  {done[-1]['dtype']:<8}  val "
              f"{statistics.median(r['val'] for r in done):.4f}"
              + (f"  compile {compiled:.1f} s" if compiled else ""))


if __name__ == "__main__":
    main()
