"""How long does `:ngram` take, and how much memory does counting a long text hold?

`:ngram` counts every window of up to n tokens of the training text (core.ngram): one torch.unique
over the text's int64 keys an order, then a binary search per scored position and order. This
times the counting and scoring (core.ngram.count_and_score, n = 6, with the six sample lines) on
each text, medians of a few runs after one warm-up, and the whole command end to end once
(run_command on a fresh session: data loading, counting, the model's evaluation; rendering
excluded), each in a child process whose peak RSS it reads (ru_maxrss):

- pydoc (built in, 418,543 training characters);
- tiny Shakespeare (1,003,854), from ../shared/data/tinyshakespeare.txt or --shakespeare PATH,
  skipped where absent;
- a long text, tiny Shakespeare repeated to --long-mb MiB (default 20), whose training split passes
  core.ngram.COUNTED, so that what is timed is the cap: the first 8,388,608 tokens counted and
  1,048,576 val positions scored.

    python bench/ngram.py
    python bench/ngram.py --runs 5 --long-mb 50
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"

CHILD = r"""
import json, resource, statistics, sys, time
import torch
from minitf_repl.commands import REGISTRY  # noqa: F401  (registers the commands)
from minitf_repl.core.ngram import count_and_score
from minitf_repl.dispatch import run_command
from minitf_repl.session import Session

spec, runs, n = sys.argv[1], int(sys.argv[2]), 6
session = Session(data_spec=spec)
t0 = time.perf_counter()
data = session.data
load = time.perf_counter() - t0
prompt = data.tokenizer.encode("The ")
times = []
for k in range(runs + 1):
    t0 = time.perf_counter()
    counting = count_and_score(data, n, 64, prompt=prompt, sample_len=72)
    if k:  # the first is the warm-up
        times.append(time.perf_counter() - t0)
t0 = time.perf_counter()
result = run_command(session, "ngram", {})
whole = time.perf_counter() - t0
best = min(result.rows, key=lambda row: row.val_loss)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux: this is MiB
print(json.dumps({"load": load, "count": statistics.median(times), "command": whole,
                  "counted": counting.train_tokens, "train": counting.train_total, "scored": counting.val_positions,
                  "best_n": best.n, "best_val": best.val_loss, "peak_mib": peak}))
"""


def child(spec: str, runs: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, spec, str(runs)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{spec}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="timed runs of the counting per text (default 3)")
    parser.add_argument("--shakespeare", type=Path, default=SHARED, help="tiny Shakespeare's file")
    parser.add_argument("--long-mb", type=int, default=20, help="the long text's size in MiB (default 20)")
    args = parser.parse_args()

    from minitf_repl.core.device import cpu_kind

    import torch

    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; :ngram with n = 6 "
          f"(counting and scoring: medians of {args.runs} after a warm-up; the command once, end to end)")
    texts = [("pydoc", "pydoc")]
    with tempfile.TemporaryDirectory() as folder:
        if args.shakespeare.is_file():
            texts.append(("tiny Shakespeare", str(args.shakespeare)))
            one = args.shakespeare.read_bytes()
            long = Path(folder) / "long.txt"
            long.write_bytes(one * max(1, args.long_mb * 2**20 // len(one)))
            texts.append((f"{args.long_mb} MiB", str(long)))
        else:
            print(f"(no {args.shakespeare}: tiny Shakespeare and the long text are skipped)")
        for name, spec in texts:
            got = child(spec, args.runs)
            cap = f" (the first {got['counted']:,} of {got['train']:,})" if got["counted"] < got["train"] else ""
            print(f"{name:<17} counted {got['counted']:>10,} tokens{cap}, scored {got['scored']:>9,}: "
                  f"count and score {got['count']:6.2f} s, :ngram {got['command']:6.2f} s (data loaded in "
                  f"{got['load']:.2f} s before), peak RSS {got['peak_mib']:,.0f} MiB; best n = {got['best_n']}, "
                  f"val {got['best_val']:.3f}")


if __name__ == "__main__":
    main()
