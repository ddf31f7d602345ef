"""Tuning runs behind core/recipes.py: a grid of training settings on one dataset, the default model.

Each combination trains a fresh default model (4 x 4 x 128, block 64, seed 1337) from the data's
current recipe with the grid's settings over it, through `Trainer` as `:train` does, and prints the
validation loss at every evaluation, the wall time, and when it first reached --target.

    python bench/recipes.py --data shakespeare --grid "optimizer=adamw,muon lr=3e-3,6e-3 steps=300"
    python bench/recipes.py --data pydoc --grid "batch_size=16,32 lr=4e-3,6e-3"

tiny Shakespeare is read from ../shared/data/tinyshakespeare.txt (a user's clone has no ../shared:
then the script says so and stops; pass --file to use another copy).
"""

from __future__ import annotations

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path

import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.recipes import switch_recipe
from minitf_repl.core.train import Trainer

SHAKESPEARE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"


def shakespeare_cache(path: Path) -> None:
    """Point minitf's corpus cache at a local copy, so `shakespeare` loads without a download."""
    cache = Path(tempfile.mkdtemp(prefix="minitf-bench-"))
    (cache / "tinyshakespeare.txt").symlink_to(path.resolve())
    os.environ["MINITF_CACHE_DIR"] = str(cache)


def parse_grid(text: str) -> list[dict]:
    axes = []
    for item in text.split():
        key, values = item.split("=", 1)
        kind = type(getattr(TrainConfig(), key))

        def value(text: str, kind=kind):
            if kind is bool:
                return text.lower() in ("1", "true", "on", "yes")
            return text if kind is str else kind(float(text)) if kind is int else kind(text)

        axes.append([(key, value(v)) for v in values.split(",")])
    return [dict(combo) for combo in itertools.product(*axes)] if axes else [{}]


def train_once(spec: str, changes: dict, target: float, eval_every: int) -> dict:
    data = load_data(spec)
    config, _ = switch_recipe(TrainConfig(), "pydoc", spec)
    config = config.replace(**changes, eval_every=eval_every)
    torch.manual_seed(config.seed)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size))
    trainer = Trainer(model, data, config)
    evals, reached = [], None
    start = time.perf_counter()

    def on_step(info) -> None:
        nonlocal reached
        if info.val_loss is not None:
            seconds = time.perf_counter() - start
            evals.append((info.step, info.val_loss, seconds))
            if reached is None and info.val_loss <= target:
                reached = (info.step, seconds)

    summary = trainer.run(on_step=on_step)
    return dict(evals=evals, reached=reached, seconds=time.perf_counter() - start, final=summary.val_loss,
                config=config)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="shakespeare")
    parser.add_argument("--grid", default="", help='e.g. "optimizer=adamw,muon lr=3e-3,6e-3 steps=300"')
    parser.add_argument("--target", type=float, default=1.88)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--file", type=Path, default=SHAKESPEARE, help="tiny Shakespeare (for --data shakespeare)")
    args = parser.parse_args()
    if args.data == "shakespeare":
        if not args.file.is_file():
            print(f"skipped: tiny Shakespeare is not at {args.file} (pass --file)")
            return
        shakespeare_cache(args.file)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; data {args.data}; target val {args.target}")
    for changes in parse_grid(args.grid):
        r = train_once(args.data, changes, args.target, args.eval_every)
        c = r["config"]
        label = " ".join(f"{k}={v}" for k, v in changes.items()) or "recipe"
        reached = f"reached {args.target} at step {r['reached'][0]} ({r['reached'][1]:.1f} s)" if r["reached"] else "not reached"
        print(f"{label:45s} final val {r['final']:.4f} in {r['seconds']:.1f} s  ({c.steps} steps, batch {c.batch_size}, "
              f"lr {c.lr:g}, {c.optimizer}, warm-up {c.warmup_steps}); {reached}")
        print("    " + "  ".join(f"{step}:{val:.3f}" for step, val, _ in r["evals"]), flush=True)


if __name__ == "__main__":
    main()
