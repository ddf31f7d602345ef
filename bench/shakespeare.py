"""tiny Shakespeare, learned from scratch: minitf's `:data shakespeare` + `:train` against nanoGPT's CPU recipe.

Both in one process, on ../shared/data/tinyshakespeare.txt (or --file), the same 90/10 split:

- nanoGPT's own CPU recipe from its README (config/train_shakespeare_char.py with --device=cpu
  --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4
  --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0): its model
  (../shared/anchors/nanogpt, bias off as train.py defaults), its configure_optimizers, lr 1e-3
  warmed up over 100 iterations and cosine-decayed to 1e-4, gradient clipping at 1.0, and an
  evaluation (20 batches of each split) every 250 iterations, iterations 0 to 2000 as train.py runs them.
- minitf as a user gets it: a session on `shakespeare` (so the data's recipe, core/recipes.py) and
  one `:train`, its evaluations included, with dtype=auto (bfloat16 autocast where the CPU has AMX
  or AVX512-BF16, float32 elsewhere) and, beside it, the same with dtype=float32 (on a CPU without
  bfloat16 units the two are the same setting: then only one row runs).
Both use the thread count minitf's `threads=auto` picks at the start (core/threads.py; nanoGPT's
train.py leaves torch's default, which on a machine with other work oversubscribes the cores), so
the comparison is of the training, not of the thread policy: the first line says the count.

It prints both loss tables, the wall times, when minitf first reached --target (default 1.88) and
what fraction of nanoGPT's wall time that is. The recipe evaluates every 100 steps, so that reading can
come up to 99 steps after the model got there; each row therefore also runs once more, untimed, evaluated
every CROSSING_EVERY steps (evaluating never moves the training batches: the same run), and reads the
timed run's own clock at the first of those steps at or below the target: when the model reached it.
--steps N adds a minitf run of N steps under the same recipe otherwise (the lowest validation loss
after 2000 steps, say); it and --repeats are at least 1, refused at once rather than after the runs.
With --skip-nanogpt only the text is needed, not nanoGPT's model; a missing input is named in one
"skipped:" line. The folder that lets `shakespeare` load the text without a download is removed at the end.

    python bench/shakespeare.py [--target 1.88] [--steps 2000] [--repeats 2] [--skip-nanogpt]
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from arguments import parser, positive_int
from cpu_kinds import without_bf16_units

ROOT = Path(__file__).resolve().parents[2] / "shared"
SHAKESPEARE = ROOT / "data" / "tinyshakespeare.txt"
NANOGPT = ROOT / "anchors" / "nanogpt" / "model.py"


def nanogpt_recipe(text: str, log) -> tuple[float, float]:
    """nanoGPT's CPU recipe, iterations 0..2000: (wall seconds, last validation loss)."""
    spec = importlib.util.spec_from_file_location("nanogpt_anchor", NANOGPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([stoi[c] for c in text], dtype=torch.long)
    n = int(0.9 * len(ids))
    splits = {"train": ids[:n], "val": ids[n:]}
    block, batch, max_iters, warmup, lr, min_lr = 64, 12, 2000, 100, 1e-3, 1e-4
    torch.manual_seed(1337)
    config = module.GPTConfig(block_size=block, vocab_size=len(chars), n_layer=4, n_head=4, n_embd=128,
                              dropout=0.0, bias=False)
    model = module.GPT(config)
    optimizer = model.configure_optimizers(0.1, lr, (0.9, 0.99), "cpu")

    def get_batch(split: str):
        data = splits[split]
        ix = torch.randint(len(data) - block, (batch,))
        return torch.stack([data[i : i + block] for i in ix]), torch.stack([data[i + 1 : i + 1 + block] for i in ix])

    def lr_at(it: int) -> float:  # linear warm-up, then cosine to min_lr at max_iters (the recipe's schedule)
        if it < warmup:
            return lr * (it + 1) / (warmup + 1)
        ratio = (it - warmup) / (max_iters - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)

    @torch.no_grad()
    def estimate(split: str) -> float:
        model.eval()
        losses = [model(*get_batch(split))[1].item() for _ in range(20)]
        model.train()
        return sum(losses) / len(losses)

    start, val = time.perf_counter(), float("nan")
    for it in range(max_iters + 1):
        if it % 250 == 0:
            train_loss, val = estimate("train"), estimate("val")
            log(f"  nanoGPT iter {it:5d}  train {train_loss:.4f}  val {val:.4f}  {time.perf_counter() - start:6.1f} s")
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        x, y = get_batch("train")
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # logged every iteration in the recipe
    return time.perf_counter() - start, val


def minitf_train(target: float, log, steps: int | None = None, dtype: str = "auto") -> dict:
    """`minitf --data shakespeare` then `:train` (steps=N if given): wall time, evaluations, when target was met."""
    from minitf_repl.session import Session, ShellConfig

    session = Session(data_spec="shakespeare", shell_config=ShellConfig(threads=torch.get_num_threads()))
    session.set_train_config(session.train_config.replace(dtype=dtype, **({"steps": steps} if steps else {})))
    trainer, config = session.trainer, session.train_config
    log(f"  minitf: {config.steps} steps, batch {config.batch_size}, lr {config.lr:g}, {config.optimizer}, "
        f"warm-up {config.warmup_steps}, floor {config.min_lr_ratio:g} x lr, eval every {config.eval_every}")
    reached, start, clock = None, time.perf_counter(), {}

    def on_step(info) -> None:
        nonlocal reached
        clock[info.step] = time.perf_counter() - start  # the timed run's clock at every step, for `crossing`
        if info.val_loss is not None:
            seconds = time.perf_counter() - start
            log(f"  minitf step {info.step:5d}  train {info.train_loss:.4f}  val {info.val_loss:.4f}  {seconds:6.1f} s")
            if reached is None and info.val_loss <= target:
                reached = (info.step, seconds)

    summary = trainer.run(on_step=on_step)
    return dict(seconds=time.perf_counter() - start, val=summary.val_loss, reached=reached, clock=clock)


CROSSING_EVERY = 10  # the untimed run's evaluations: the step the model reached the target is known to within 10


def crossing(target: float, dtype: str) -> tuple[int | None, float | None]:
    """The same `:train` again, untimed, evaluated every CROSSING_EVERY steps: (the first step whose validation
    loss is at or below target, that loss), or (None, None)."""
    from minitf_repl.session import Session, ShellConfig

    session = Session(data_spec="shakespeare", shell_config=ShellConfig(threads=torch.get_num_threads()))
    session.set_train_config(session.train_config.replace(dtype=dtype, eval_every=CROSSING_EVERY))
    found: list = []

    def on_step(info) -> None:
        if info.val_loss is not None and not found and info.val_loss <= target:
            found.append((info.step, info.val_loss))

    session.trainer.run(on_step=on_step)
    return found[0] if found else (None, None)


def missing_inputs(text: Path, skip_nanogpt: bool) -> str:
    """The one "skipped:" line naming what the runs need and is missing, or "" when all is there. It names only what
    is missing (it named both, the text too when it was there), and not nanoGPT's model under --skip-nanogpt, which
    never loads it."""
    needed = [text] if skip_nanogpt else [text, NANOGPT]
    missing = [path for path in needed if not path.is_file()]
    if not missing:
        return ""
    where = " (a user's clone has no ../shared)" if any(ROOT in path.parents for path in missing) else ""
    fixes = ["--file PATH reads tiny Shakespeare from PATH"] if text in missing else []
    fixes += ["--skip-nanogpt runs minitf alone"] if NANOGPT in missing else []
    return f"skipped: {' and '.join(map(str, missing))} not found{where}; {', '.join(fixes)}"


def main() -> None:
    line = parser(__doc__)
    line.add_argument("--file", type=Path, default=SHAKESPEARE)
    line.add_argument("--target", type=float, default=1.88)
    line.add_argument("--steps", type=positive_int, default=None, help="also a minitf run of this many steps")
    line.add_argument("--skip-nanogpt", action="store_true")
    line.add_argument("--repeats", type=positive_int, default=1, help="alternated pairs of runs")
    args = line.parse_args()
    skipped = missing_inputs(args.file, args.skip_nanogpt)
    if skipped:
        print(skipped)
        return
    cache = Path(tempfile.mkdtemp(prefix="minitf-bench-"))  # `shakespeare` then loads without a download
    (cache / "tinyshakespeare.txt").symlink_to(args.file.resolve())
    os.environ["MINITF_CACHE_DIR"] = str(cache)
    try:
        compare(args)
    finally:  # the folder holds only a link to the text, but one was left in the temp folder at every run
        shutil.rmtree(cache, ignore_errors=True)


def compare(args) -> None:
    """The rows and nanoGPT's recipe, with MINITF_CACHE_DIR set so that `shakespeare` reads args.file."""

    def log(line: str) -> None:
        print(line, flush=True)

    from minitf_repl.core.device import cpu_kind
    from minitf_repl.core.precision import training_dtype
    from minitf_repl.core.threads import ThreadPolicy

    threads = ThreadPolicy(0).decide()  # minitf's own choice, then held for every row
    auto = training_dtype("auto", "cpu")
    # (label, dtype, as on a CPU without bfloat16 units)
    rows = [("auto", "auto", False)] if auto == "float32" else [
        ("auto", "auto", False), ("float32", "float32", False), ("no-bf16", "float32", True)]
    names = {"auto": f"minitf :train (dtype=auto: {auto})", "float32": "minitf :train (dtype=float32)",
             "no-bf16": "minitf :train (dtype=float32, Newton-Schulz in float32: a CPU without bfloat16's path)"}
    print(f"{cpu_kind()}; torch {torch.__version__}; {threads.describe()} threads for every row; "
          f"dtype=auto trains in {auto} here")
    ratios = {label: [] for label, _, _ in rows}
    crossed = {label: [] for label, _, _ in rows}  # the timed run's clock when the model reached the target
    steps_at = {}
    for label, dtype, no_bf16 in rows:
        with without_bf16_units() if no_bf16 else contextlib.nullcontext():
            steps_at[label], loss = crossing(args.target, dtype)
        if steps_at[label] is not None:
            print(f"{names[label]}, evaluated every {CROSSING_EVERY} steps (untimed): first at or below "
                  f"{args.target} at step {steps_at[label]} (val {loss:.4f})")
    for _ in range(args.repeats):  # alternated, so that a machine slowing down slows all rows alike
        runs = {}
        for label, dtype, no_bf16 in rows:
            with without_bf16_units() if no_bf16 else contextlib.nullcontext():
                ours = runs[label] = minitf_train(args.target, log, dtype=dtype)
            name = names[label]
            if ours["reached"]:
                print(f"{name} reached val {args.target} at step {ours['reached'][0]} after "
                      f"{ours['reached'][1]:.1f} s; the run ended at val {ours['val']:.4f} after {ours['seconds']:.1f} s")
            else:
                print(f"{name} ended at val {ours['val']:.4f} after {ours['seconds']:.1f} s without reaching "
                      f"{args.target}")
        if args.skip_nanogpt:
            continue
        seconds, val = nanogpt_recipe(args.file.read_text("utf-8"), log)
        print(f"nanoGPT's CPU recipe (float32): {seconds:.1f} s, val {val:.4f} at iteration 2000")
        for label, ours in runs.items():
            if ours["reached"]:
                ratios[label].append(ours["reached"][1] / seconds)
                print(f"minitf {label} reached {args.target} in {ratios[label][-1]:.2f} of nanoGPT's wall time "
                      f"(its whole :train: {ours['seconds'] / seconds:.2f})")
            if steps_at[label] is not None and steps_at[label] in ours["clock"]:
                crossed[label].append(ours["clock"][steps_at[label]] / seconds)
                print(f"minitf {label}'s model reached {args.target} at step {steps_at[label]}, "
                      f"{ours['clock'][steps_at[label]]:.1f} s into the timed run: {crossed[label][-1]:.3f} of "
                      "nanoGPT's wall time")
    for label, values in ratios.items():
        if len(values) > 1:
            print(f"{label}: median over {len(values)} alternated rounds: {statistics.median(values):.2f} "
                  f"of nanoGPT's wall time at the first evaluation at or below {args.target}; "
                  f"{statistics.median(crossed[label]):.3f} at the step the model reached it")
    if args.steps is not None:
        longer = minitf_train(args.target, log, steps=args.steps)
        print(f"minitf, {args.steps} steps under the recipe: val {longer['val']:.4f} after {longer['seconds']:.1f} s")


if __name__ == "__main__":
    main()
