"""The first `:train` a user runs (default model, built-in pydoc data), before and after issue #11.

One process, the two runs one after the other (then again with --repeats 2, alternating):
    before   the previous defaults: the readable forward (explicit attention, every probe called),
             AdamW stepping tensor by tensor, lr 3e-3, warm-up 30, 600 steps, batch 32, float32
    now      TrainConfig's defaults (core/recipes.py: pydoc's recipe): the fast path, fused AdamW
             or Muon, whatever the recipe says, dtype=auto (bfloat16 on a CPU with AMX/AVX512-BF16)
    adamw    now with optimizer=adamw, as `:set optimizer=adamw` gives it (its own rate and warm-up,
             core.recipes.follow_optimizer; neither changes what a step costs): what the default
             optimizer costs in wall time (issue 16: Muon's run at most 1.2x this one on a CPU without
             bfloat16), and what AdamW learns in the same steps
For each: the wall time of the run (evaluations included), the final validation loss, and a
400-character sample (temperature 0.8, seed 0) with the share of its words that occur in the data.

    python bench/first_train.py [--repeats 2] [--without-bf16-units]

--without-bf16-units, on a CPU with AMX or AVX512-BF16: every row as a CPU without them runs it
(bench/cpu_kinds.py): float32, and Muon's Newton-Schulz in float32, on this CPU's float32 units.
Where Newton-Schulz runs in float32, a line gives an estimate of the least Muon's run costs: the adamw
run's time plus 600 times Newton-Schulz's products at the float32 peak (bench/newton_schulz.py's
`floor_ms`; `muon_estimate`), and says so when the run measured below it (it is no bound: see
bench/nanogpt.py's `under_estimate`). --repeats is at least 1. The last
line says when the default (Muon) run passes the adamw run's final loss: the first of its evaluations
every 25 steps (a run of its own) at or below it, and that many steps at the timed run's pace.
"""

from __future__ import annotations

import contextlib
import statistics
import time

import torch

from minitf_repl.core import optimizers
from minitf_repl.core.config import GenConfig, ModelConfig, TrainConfig
from minitf_repl.core.data import load_data
from minitf_repl.core.generate import generate
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.precision import fast_dtype, training_dtype
from minitf_repl.core.recipes import follow_optimizer
from minitf_repl.core.train import Trainer

from arguments import parser, positive_int
from cpu_kinds import without_bf16_units
from nanogpt import matmul_peak, under_estimate
from newton_schulz import floor_ms

BEFORE = dict(optimizer="adamw", lr=3e-3, warmup_steps=30, steps=600, batch_size=32, fast_path=False,
              dtype="float32")


def first_train(data, before: bool, **changes) -> dict:
    if before:
        config = TrainConfig().replace(**BEFORE)
    else:  # as `:set` gives it: another optimizer brings its own rate and warm-up
        config, _ = follow_optimizer(TrainConfig(), TrainConfig().replace(**changes), "pydoc", changes)
    optimizers.FUSED_ADAMW = not before  # before: torch's AdamW tensor by tensor
    try:
        torch.manual_seed(config.seed)
        model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size))
        trainer = Trainer(model, data, config)
        start = time.perf_counter()
        summary = trainer.run()
        seconds = time.perf_counter() - start
    finally:
        optimizers.FUSED_ADAMW = True
    text = data.tokenizer.decode(generate(model, data.tokenizer.encode("The "), GenConfig(n=400, temperature=0.8, gen_seed=0)))
    words = [w.strip(".,:;()\"'") for w in text.split()]
    known = set(data.text.split())
    share = sum(w in known for w in words) / max(len(words), 1)
    return dict(seconds=seconds, val=summary.val_loss, text=text, words=share, config=config)


def main() -> None:
    line = parser(__doc__)
    line.add_argument("--repeats", type=positive_int, default=1)
    line.add_argument("--without-bf16-units", action="store_true",
                      help="answer minitf's precision questions as on a CPU without bfloat16 units")
    args = line.parse_args()
    with without_bf16_units() if args.without_bf16_units else contextlib.nullcontext():
        runs(args)


def runs(args) -> None:
    data = load_data("pydoc")
    from minitf_repl.core.device import cpu_kind
    from minitf_repl.core.threads import ThreadPolicy

    threads = ThreadPolicy(0).decide()  # minitf's choice at the start, held for every row
    path = "; as on a CPU without bfloat16 units (float32, Newton-Schulz in float32)" if args.without_bf16_units else ""
    print(f"{cpu_kind()}; torch {torch.__version__}, {threads.describe()} threads; pydoc, default model{path}")
    rows = {"before": dict(before=True), "now": dict(before=False), "adamw": dict(before=False, optimizer="adamw")}
    seconds = {label: [] for label in rows}
    vals = {}
    for _ in range(args.repeats):
        for label, how in rows.items():
            r = first_train(data, **how)
            c = r["config"]
            seconds[label].append(r["seconds"])
            vals[label] = r["val"]
            print(f"{label:6s} {c.steps} steps, batch {c.batch_size}, {c.optimizer} lr {c.lr:g}, "
                  f"warm-up {c.warmup_steps}, "
                  f"fast_path={'on' if c.fast_path else 'off'}, {training_dtype(c.dtype, 'cpu')}: "
                  f"val {r['val']:.4f} in {r['seconds']:.1f} s; "
                  f"{r['words']:.0%} of the sample's words are in the data", flush=True)
            print("       " + r["text"][:200].replace("\n", " "))
    median = {label: statistics.median(values) for label, values in seconds.items()}
    print(f"medians of {args.repeats}: now {median['now']:.1f} s, the same run with optimizer=adamw "
          f"{median['adamw']:.1f} s: {median['now'] / median['adamw']:.2f}x; before {median['before']:.1f} s")
    if fast_dtype("cpu") == "float32":  # Newton-Schulz in float32: its products at the peak estimate Muon's least price
        peak = statistics.median(matmul_peak() for _ in range(5))
        newton_schulz_ms = floor_ms(ModelConfig(vocab_size=data.tokenizer.vocab_size), peak)
        print(muon_estimate(median["adamw"], median["now"], TrainConfig().steps, newton_schulz_ms, peak))
    step, final = first_step_at(data, vals["adamw"], REACH_EVERY)
    again = f"the default run again, evaluated every {REACH_EVERY} steps (untimed; final val {final:.4f})"
    if step is None:
        print(f"{again}, never read the adamw run's final val {vals['adamw']:.4f} or lower")
    else:
        pace = median["now"] * step / TrainConfig().steps
        print(f"{again}, first read the adamw run's final val {vals['adamw']:.4f} or lower at step {step}: at the "
              f"timed run's pace {pace:.1f} s, {pace / median['adamw']:.2f} of the adamw run's time")


def muon_estimate(adamw_s: float, muon_s: float, steps: int, newton_schulz_ms: float, peak: float) -> str:
    """The line estimating the least Muon's run of `steps` steps costs against the adamw run's `adamw_s` seconds:
    that run plus `steps` x Newton-Schulz's products at the float32 `peak` (`newton_schulz_ms` a step), and whether
    Muon's run (`muon_s`) measured below it. Not a bound: the peak is measured after the runs, and the AdamW update
    Muon saves on the hidden matrices is not subtracted, so runs have gone under it (README: 1.18x, estimate 1.204x)."""
    estimate = adamw_s + steps * newton_schulz_ms / 1e3
    return (f"the least Muon's run should cost here, estimated: the adamw run plus {steps} x Newton-Schulz's products "
            f"at the float32 peak ({peak:.0f} GFLOP/s now) is {estimate:.1f} s, {estimate / adamw_s:.3f}x"
            + under_estimate({"": muon_s / adamw_s}, estimate / adamw_s))


REACH_EVERY = 25  # first_step_at's evaluations: every 25 steps, so the step is known to within 25 of 600


def first_step_at(data, target: float, every: int) -> tuple[int | None, float]:
    """(the first step at which the default run, evaluated every `every` steps, reads val `target` or lower,
    its final val).

    A run of its own with the timed run's seed and settings: evaluations draw their batches from their
    own generator (Trainer.evaluate), so it trains as the timed run did, and its final val shows it.
    """
    config = TrainConfig().replace(eval_every=every)
    torch.manual_seed(config.seed)
    model = MiniTransformerLM(ModelConfig(vocab_size=data.tokenizer.vocab_size))
    reads: list = []
    Trainer(model, data, config).run(on_step=lambda info: reads.append(info) if info.val_loss is not None else None)
    return next((info.step for info in reads if info.val_loss <= target), None), reads[-1].val_loss

if __name__ == "__main__":
    main()
