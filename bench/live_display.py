"""What the REPL's live display costs a run: `:train` drawn live on a terminal against the same run with no display.

The benchmarks beside this one time the core's step. A learner meets `:train` in the REPL, where a Rich Live
display redraws the loss table, the watched frame and the bar while the steps run, on a thread that holds
Python's lock as it lays them out: what it takes shows up in the summary's tokens/s, GFLOP/s and MFU. This runs
the same `:train` (same seed, same model, autosave off) through the shell's own command path
(`dispatch.run_command`) with the REPL's reporter drawing to a terminal of 100 x 40 (a Rich console forced to be
one, writing to nothing), and with the reporter of a pipe (no live display), alternated, and prints the median
tokens/s of each and their ratio.

    python bench/live_display.py                       # sort:4, 150 steps, an evaluation every 10 steps (15 rows)
    python bench/live_display.py --watch attn          # a watched frame drawn under the table as well
    python bench/live_display.py --data pydoc --steps 60 --every 10 --threads 2
"""

from __future__ import annotations

import argparse
import io
import statistics
import time

import torch
from rich.console import Console

from minitf_repl.core.device import cpu_name, native_bf16
from minitf_repl.dispatch import run_command
from minitf_repl.render.live import RichReporter
from minitf_repl.session import Session


class Nowhere(io.StringIO):
    """A terminal's file that keeps nothing: a long run's redraws would otherwise pile up in memory."""

    def write(self, text: str) -> int:
        return len(text)


def one_run(args, live: bool) -> tuple[float, float]:
    """(the summary's tokens/s, the command's wall seconds) of one `:train`, drawn live or not."""
    console = Console(file=Nowhere(), force_terminal=live, width=100, height=40, color_system="truecolor" if live
                      else None)
    reporter = RichReporter(console, live=live)
    session = Session(data_spec=args.data)
    settings = {"seed": "1", "autosave": "off", "eval_every": str(args.every), "threads": str(args.threads)}
    settings.update({name: str(value) for name, value in (("d_model", args.d_model), ("n_layers", args.layers))
                     if value is not None})  # else the default model's
    run_command(session, "set", settings)
    start = time.perf_counter()
    try:
        result = run_command(session, "train", {"steps": str(args.steps), "watch": args.watch}, reporter)
    finally:
        reporter.close()
    return result.tokens_per_second, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="sort:4")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--every", type=int, default=10, help="eval_every: the loss table's rows come this often")
    parser.add_argument("--watch", default=None, help="a watch= view drawn under the table (attn, heads, ...)")
    parser.add_argument("--d-model", type=int, default=None, help="default: the default model's")
    parser.add_argument("--layers", type=int, default=None, help="default: the default model's")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=4, help="rounds of the two, alternated")
    args = parser.parse_args()

    print(f"{cpu_name()}, bfloat16 units: {'yes' if native_bf16('cpu') else 'no'}, torch {torch.__version__}, "
          f"{args.threads} thread(s); :train steps={args.steps} on {args.data}, eval_every={args.every}"
          + (f", watch={args.watch}" if args.watch else ""))
    one_run(args, live=False)  # warm-up: the process's one-off costs fall on neither row
    rows: dict[str, list[tuple[float, float]]] = {"live display (a terminal)": [], "no display (a pipe)": []}
    for _ in range(args.repeats):
        for name, live in (("live display (a terminal)", True), ("no display (a pipe)", False)):
            rows[name].append(one_run(args, live))
    medians = {}
    for name, runs in rows.items():
        tps, wall = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        medians[name] = tps
        print(f"  {name:<28} {tps:>9,.0f} tokens/s  {wall:6.2f} s  (runs: "
              + ", ".join(f"{r[0]:,.0f}" for r in runs) + ")")
    live, pipe = medians.values()
    print(f"  the live display's run at {live / pipe:.2f}x the tokens/s of the run with no display")


if __name__ == "__main__":
    main()
