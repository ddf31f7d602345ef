"""How fast does the 4-layer, 4-head, 128-wide model (block 64) learn tiny Shakespeare?

Trains from scratch on ../shared/data/tinyshakespeare.txt (or --file PATH) and stops at the first
evaluation whose validation loss is at or below --target (default 1.89), printing the steps and the
wall time it took, with the loss table along the way.

    python bench/shakespeare.py [--target 1.89] [--max-steps 5000] [--batch 32] [--attention explicit]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus, read_text_file
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", default=str(DEFAULT_FILE))
    p.add_argument("--target", type=float, default=1.89)
    p.add_argument("--max-steps", type=int, default=5000)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--attention", default="explicit", choices=["explicit", "sdpa"])
    args = p.parse_args()

    corpus = TextCorpus("shakespeare", read_text_file(args.file), "tiny Shakespeare")
    torch.manual_seed(1337)
    cfg = ModelConfig(vocab_size=corpus.tokenizer.vocab_size, max_seq_len=64, d_model=128, n_heads=4,
                      n_layers=4, d_ff=512, attention=args.attention)
    model = MiniTransformerLM(cfg)
    train = TrainConfig(steps=args.max_steps, batch_size=args.batch, lr=args.lr, eval_every=args.eval_every)
    trainer = Trainer(model, corpus, train)
    print(f"{model.num_parameters():,} parameters, batch {args.batch}, lr {args.lr}, {args.attention} attention, "
          f"{torch.get_num_threads()} threads; cosine schedule over {args.max_steps} steps")
    start = time.perf_counter()
    reached = {}

    def on_step(info):
        if info.val_loss is None:
            return
        print(f"step {info.step:5d}  train {info.train_loss:.3f}  val {info.val_loss:.3f}  "
              f"lr {info.lr:.2e}  {info.tokens_per_second:7.0f} tok/s  {time.perf_counter() - start:6.1f} s", flush=True)
        if info.val_loss <= args.target and not reached:
            reached.update(step=info.step, seconds=time.perf_counter() - start, val=info.val_loss)

    trainer.run(on_step=on_step, should_stop=lambda: bool(reached))
    if reached:
        print(f"reached val loss {reached['val']:.3f} <= {args.target} at step {reached['step']} "
              f"after {reached['seconds']:.1f} s wall time")
    else:
        print(f"did not reach {args.target} in {args.max_steps} steps")


if __name__ == "__main__":
    main()
