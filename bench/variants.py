"""The speed switches side by side: what each one costs and buys on the machine at hand.

Training (the same seed, weights and batches for every variant):
    float32 eager | bfloat16 eager | float32 compiled
    tokens/s of a training step (median over chunks; the variants alternate chunk by chunk, so
    machine noise hits them alike), the first compiled step's time apart, and the validation loss
    after --steps steps (evaluated in float32 for every variant, so the losses compare).
Sampling: the float32-trained model and its int8 copy (core.quantize): weights' size, greedy
    decoding tokens/s (median of alternated repeats), validation loss on the same batches.
With --presets: float32 vs bfloat16 for each model preset in minitf_repl.core.config.PRESETS
    (skipped, with a line, where that does not exist).

Data: tiny Shakespeare from ../shared/data/tinyshakespeare.txt, or pydoc if that file is absent.

    python bench/variants.py                      # 100 steps, chunks of 10 (a few minutes on 2 cores)
    python bench/variants.py --steps 40 --chunk 5 --no-compile --presets
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from minitf_repl.core import config as config_module
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.data import TextCorpus, load_data, read_text_file
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.quantize import measure, quantize_for_sampling
from minitf_repl.core.train import Trainer

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "shared" / "data" / "tinyshakespeare.txt"


def load(path: str):
    if Path(path).is_file():
        return TextCorpus("shakespeare", read_text_file(path), "tiny Shakespeare"), "tiny Shakespeare"
    print(f"({path} not found: using pydoc)")
    return load_data("pydoc"), "pydoc"


def make_trainer(data, model_config: ModelConfig, args, **train) -> Trainer:
    torch.manual_seed(1337)  # the same initial weights for every variant
    model = MiniTransformerLM(model_config.replace(vocab_size=data.tokenizer.vocab_size))
    config = TrainConfig(steps=args.steps, batch_size=args.batch, eval_every=args.steps,
                         eval_batches=args.eval_batches, **train)
    trainer = Trainer(model, data, config)
    trainer.start_run()
    return trainer


def train_side_by_side(trainers: dict[str, Trainer], chunk: int) -> dict[str, dict]:
    """Train every trainer to the end of its run, `chunk` steps at a time, the variants alternating."""
    out = {name: {"tps": [], "compile_seconds": None, "val_loss": None, "notes": []} for name in trainers}
    while any(t.run_remaining > 0 for t in trainers.values()):
        for name, t in trainers.items():
            if t.run_remaining <= 0:
                continue
            done = []
            summary = t.run(on_step=done.append, should_stop=lambda: len(done) >= chunk,
                            on_notice=out[name]["notes"].append)
            row = out[name]
            if summary.compile_seconds is not None:
                row["compile_seconds"] = summary.compile_seconds
                if summary.steps > 1:  # the compiling step is left out of this chunk's tokens/s
                    row["tps"].append(summary.tokens_per_second)
            elif summary.tokens_per_second is not None:  # None: no step ran in this chunk (nothing to time)
                row["tps"].append(summary.tokens_per_second)
            if summary.val_loss is not None:
                row["val_loss"] = summary.val_loss
            row["compiled"] = summary.compiled
    return out


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--file", default=str(DEFAULT_FILE))
    p.add_argument("--steps", type=int, default=100, help="training steps per variant (val loss after these)")
    p.add_argument("--chunk", type=int, default=10, help="steps per alternation")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64, help="tokens generated per sampling timing")
    p.add_argument("--repeats", type=int, default=5, help="alternated sampling repeats")
    p.add_argument("--no-compile", action="store_true", help="leave out the compiled variant (compiling takes a while)")
    p.add_argument("--presets", action="store_true", help="also float32 vs bfloat16 for each model preset")
    args = p.parse_args()

    data, name = load(args.file)
    base = ModelConfig()
    print(f"{name}; model {base.n_layers} layers x {base.n_heads} heads x {base.d_model} wide, block "
          f"{base.max_seq_len}, batch {args.batch}; {args.steps} steps per variant in chunks of {args.chunk}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")

    variants = {"float32": {"dtype": "float32"}, "bfloat16": {"dtype": "bfloat16"}}
    if not args.no_compile:
        variants["float32 compiled"] = {"compile": True, "dtype": "float32"}
    trainers = {v: make_trainer(data, base, args, **kw) for v, kw in variants.items()}
    start = time.perf_counter()
    results = train_side_by_side(trainers, args.chunk)
    ref = statistics.median(results["float32"]["tps"])
    rows = []
    for v, r in results.items():
        tps = statistics.median(r["tps"]) if r["tps"] else float("nan")
        compile_s = f"{r['compile_seconds']:.1f} s" if r["compile_seconds"] is not None else "-"
        rows.append([v, f"{tps:,.0f}", f"{tps / ref:.2f}x", compile_s, f"{r['val_loss']:.4f}"])
    print(f"\ntraining ({time.perf_counter() - start:.0f} s)")
    print(table(rows, ["variant", "tokens/s", "vs float32", "first step (compile)", f"val loss @{args.steps}"]))
    for v, r in results.items():
        for note in r["notes"]:
            print(f"  {v}: {note}")

    model = trainers["float32"].model
    q = quantize_for_sampling(model)
    m = measure(model, q, trainers["float32"], data.tokenizer.encode("\n"), n_tokens=args.tokens,
                repeats=args.repeats)
    print(f"\nsampling ({m.n_tokens} tokens greedy, median of {m.repeats} alternated repeats, CPU)")
    print(table([
        ["float32", f"{m.bytes_before / 2**10:,.0f} KiB", f"{m.tokens_per_second_before:,.0f}", "1.00x",
         f"{m.val_loss_before:.4f}", "-"],
        ["int8 (per-channel, Linear)", f"{m.bytes_after / 2**10:,.0f} KiB", f"{m.tokens_per_second_after:,.0f}",
         f"{m.tokens_per_second_after / m.tokens_per_second_before:.2f}x", f"{m.val_loss_after:.4f}",
         f"{m.same_tokens}/{m.n_tokens}"],
    ], ["weights", "size", "tokens/s", "vs float32", "val loss", "same greedy tokens"]))

    if args.presets:
        presets = getattr(config_module, "PRESETS", None)
        if not isinstance(presets, dict) or not presets:
            print("\n(--presets: minitf_repl.core.config has no PRESETS yet; skipped)")
            return
        rows = []
        for preset, value in presets.items():
            try:
                cfg = value if isinstance(value, ModelConfig) else ModelConfig(**{**base.to_dict(), **dict(value)})
            except Exception as e:  # a preset shape this script does not know
                print(f"  preset {preset}: skipped ({type(e).__name__}: {e})")
                continue
            pair = {d: make_trainer(data, cfg, args, dtype=d) for d in ("float32", "bfloat16")}
            res = train_side_by_side(pair, args.chunk)
            f32 = statistics.median(res["float32"]["tps"])
            b16 = statistics.median(res["bfloat16"]["tps"])
            rows.append([preset, f"{f32:,.0f}", f"{b16:,.0f}", f"{b16 / f32:.2f}x",
                         f"{res['float32']['val_loss']:.4f}", f"{res['bfloat16']['val_loss']:.4f}"])
        print(f"\npresets: float32 vs bfloat16, {args.steps} steps each")
        print(table(rows, ["preset", "fp32 tok/s", "bf16 tok/s", "bf16/fp32", "fp32 val", "bf16 val"]))


if __name__ == "__main__":
    main()
