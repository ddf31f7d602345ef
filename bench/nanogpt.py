"""Training steps side by side with karpathy/nanoGPT (../shared/anchors/nanogpt), in one process.

nanoGPT's row is its own training step as its train.py runs it on a CPU: its model, its
configure_optimizers (AdamW, lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices; fused only on
CUDA, so the plain loop here), forward, backward, gradient clipping at 1.0, step, in float32 (its
train.py autocasts only on CUDA). The minitf rows are `Trainer` steps, what `:train` runs (the same
settings: lr 1e-3, betas 0.9/0.99, weight decay 0.1, clipping at 1.0), bookkeeping included (loss
and norm read back, the step's undo record, the history):
    minitf :train           the training step's defaults: core.fastpath, fused AdamW, dtype=auto
                            (bfloat16 autocast where the CPU has AMX or AVX512-BF16, else float32)
    minitf float32          the same in float32 (on a CPU without bfloat16 units that is :train's row,
                            so it is left out, as is nanoGPT under emulated bfloat16)
    minitf float32 autograd FFN   the float32 step with the feed-forward's backward left to autograd
                            (core.fastpath's own one switched off): what that one wins, printed as a
                            ratio paired chunk by chunk (it is taken only for hidden layers of 32 MiB or
                            more and with torch's own products, so at the small size, or on a CPU where
                            oneDNN's products are taken, the two rows compute alike)
    minitf float32 MKL      the float32 step with every product left to torch's own kernels (MKL), where
                            core.fastpath takes oneDNN's (it does only on a CPU where they measured
                            faster): what oneDNN wins, printed as a ratio paired chunk by chunk
    minitf float32 attention   the :train step with the attention kernel kept in float32 under bfloat16
                            autocast (core.fastpath takes bfloat16 at a shape only where this CPU measured
                            it faster): what that choice wins, printed as a ratio paired chunk by chunk,
                            with the measured answer; only on a CPU with bfloat16 units
    minitf readable         fast_path=off, float32: the readable model's forward (explicit attention)
    minitf compile=on       the defaults through torch.compile (first step compiles, timed apart)
    minitf muon             the defaults with Muon instead of AdamW (what the default optimizer costs per step)
    minitf muon no-bf16     Muon in float32 as a CPU without bfloat16 units runs it (bench/cpu_kinds.py: the
                            forward and Newton-Schulz in float32, on this CPU's float32 units); only on a
                            CPU with bfloat16 units, where "minitf muon" runs Newton-Schulz in bfloat16
    nanoGPT bf16 autocast   nanoGPT's step under torch.autocast(bfloat16), as its train.py does on a GPU:
                            how much of minitf's lead is the precision and how much the engineering
Rows alternate chunk by chunk so that a busy machine slows them alike; the table gives medians,
the ratio to nanoGPT, and model FLOPs utilisation against this machine's float32 matmul peak,
measured in the same run (a 1024 x 1024 product; nanoGPT's FLOPs-per-token formula for all rows).
Random tokens: this measures speed, not learning. Where Newton-Schulz runs in float32, the Muon/AdamW
line is followed by an estimate of the least a Muon step costs against an AdamW one on this CPU with
torch's five steps: Newton-Schulz's products (counted, bench/newton_schulz.py's `floor_ms`) at the
float32 peak of the run, added to the AdamW step (`muon_estimate`). An estimate, not a bound: measured
ratios have gone under it, and the line says so when one does.

--rows keeps some rows (nanoGPT's always, the base of every ratio); a name not among ROWS is refused,
and a line names the rows asked for that do not run on this CPU, and why (`rows_here`).

    python bench/nanogpt.py                 # 4 x 4 x 128, block 64, batch 12 (nanoGPT's CPU recipe)
    python bench/nanogpt.py --large         # 6 x 6 x 384, block 256, batch 32
    python bench/nanogpt.py --batch 16 --rows "minitf :train,minitf muon"   # the Muon/AdamW line at :train's own batch
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import time
from pathlib import Path

import torch

from minitf_repl.core import fastpath
from minitf_repl.core import train as train_module
from minitf_repl.core.config import ModelConfig, TrainConfig
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.peak import measure_product_speed
from minitf_repl.core.train import Trainer

from arguments import parser, positive_int
from cpu_kinds import as_without_bf16_units

ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "nanogpt" / "model.py"
SMALL = dict(L=4, H=4, d=128, T=64, B=12, V=65)  # nanoGPT's CPU recipe: layers, heads, width, block, batch, vocab
LARGE = dict(L=6, H=6, d=384, T=256, B=32, V=65)  # --large


class RandomTokens:
    """Just enough of a data source for Trainer: batches of uniformly random token ids."""

    def __init__(self, vocab: int):
        self.vocab = vocab

    def check_fits(self, block: int) -> None:
        pass

    def get_batch(self, split: str, batch: int, block: int, generator: torch.Generator):
        seq = torch.randint(self.vocab, (batch, block + 1), generator=generator)
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def nanogpt_step(size: dict, dtype: torch.dtype | None = None):
    spec = importlib.util.spec_from_file_location("nanogpt_anchor", ANCHOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.GPTConfig(block_size=size["T"], vocab_size=size["V"], n_layer=size["L"], n_head=size["H"],
                              n_embd=size["d"], dropout=0.0, bias=True)
    model = module.GPT(config)
    model.train()
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
    data, g = RandomTokens(size["V"]), torch.Generator().manual_seed(0)

    def steps(n: int) -> None:
        for _ in range(n):  # nanoGPT's train.py, one micro-step per step
            x, y = data.get_batch("train", size["B"], size["T"], g)
            with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
                _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss.item()  # train.py reads the loss back to log it

    return steps, model.get_num_params()


def model_config(size: dict) -> ModelConfig:
    """minitf's model at a benchmark size: nanoGPT's shape (d_ff = 4 d)."""
    return ModelConfig(vocab_size=size["V"], max_seq_len=size["T"], d_model=size["d"], n_heads=size["H"],
                       n_layers=size["L"], d_ff=4 * size["d"])


def minitf_step(size: dict, **train):
    torch.manual_seed(0)
    model = MiniTransformerLM(model_config(size))
    train = {"optimizer": "adamw", **train}  # AdamW like nanoGPT's, unless a row says otherwise
    config = TrainConfig(batch_size=size["B"], lr=1e-3, weight_decay=0.1, grad_clip=1.0, warmup_steps=0,
                         eval_every=10**9, **train)
    trainer = Trainer(model, RandomTokens(size["V"]), config)
    trainer.start_run(10**9)  # never ends here: no end-of-run evaluation

    def steps(n: int) -> None:
        stop_at = trainer.step + n
        trainer.run(should_stop=lambda: trainer.step >= stop_at)

    return steps


def matmul_peak() -> float:
    """float32 GFLOP/s of a 1024 x 1024 product on this machine, now (one warm-up, then the median of 9): the
    measurement :device shows and :train's MFU divides by (core.peak), at the fixed size these tables always used."""
    return measure_product_speed("cpu", "float32", size=1024, warmup=1, rounds=9, budget=None).gflops


@contextlib.contextmanager
def heap_kept():
    """Inside: a `:train` run keeps what it freed instead of handing it back when it ends (core.memory).

    A real `:train` hands freed memory back once, when its run ends; here each chunk is a run of a few
    steps, and a hand-back after every chunk made the next chunk, of whatever row, fault its pages in
    again. Which row paid depended on the order: with only nanoGPT and `minitf float32`, nanoGPT's chunk
    always followed the hand-back and minitf read 1.03x to 1.05x nanoGPT's float32 step, against 0.85x
    to 0.93x in the full table in the same hours; handing back before every chunk instead cost the
    bfloat16 `:train` row about 10 per cent. With nothing handed back, every row steps on a heap that
    already holds what it needs, as in a long run."""
    saved = train_module.release_freed
    train_module.release_freed = lambda: None
    try:
        yield
    finally:
        train_module.release_freed = saved


@contextlib.contextmanager
def autograd_ffn():
    """Inside: core.fastpath leaves the feed-forward's backward to autograd (its own one switched off). Put back after."""
    own = fastpath._own_backward_pays
    fastpath._own_backward_pays = lambda ffn, x: False
    try:
        yield
    finally:
        fastpath._own_backward_pays = own


@contextlib.contextmanager
def float32_attention():
    """Inside: core.fastpath keeps every CPU attention kernel in float32, whatever the measurement said. Put back after."""
    asked = fastpath.attention_in_float32
    fastpath.attention_in_float32 = lambda q, kv_heads: q.device.type == "cpu"
    try:
        yield
    finally:
        fastpath.attention_in_float32 = asked


@contextlib.contextmanager
def torch_products():
    """Inside: core.fastpath leaves every float32 product to torch's own kernels (MKL), not oneDNN's. Put back after."""
    faster = fastpath.onednn_faster
    fastpath.onednn_faster = lambda: False
    try:
        yield
    finally:
        fastpath.onednn_faster = faster


def paired(per_step: dict, slower: str, faster: str) -> str:
    """How much faster row `faster` ran than row `slower`: the median of their chunks' time ratios."""
    ratios = [a / b for a, b in zip(per_step[slower], per_step[faster])]
    return (f"{statistics.median(ratios):.3f}x (median of the {len(ratios)} chunks' ratios, "
            f"{sum(r > 1 for r in ratios)} faster)")


def under(context, steps):
    """steps(n), run inside `context()` each time."""

    def run(n: int) -> None:
        with context():
            steps(n)

    return run


def sized_parser(doc: str) -> argparse.ArgumentParser:
    """The options every side-by-side script here takes: --large, --chunks, --steps (at least 1: a median of no
    chunks, or a chunk of no steps, used to end the run in a traceback)."""
    line = parser(doc)
    line.add_argument("--large", action="store_true")
    line.add_argument("--chunks", type=positive_int, default=8)
    line.add_argument("--steps", type=positive_int, default=5, help="steps per chunk")
    return line


# Every row main() can run, in the table's order (the docstring says what each measures).
ROWS = ("nanoGPT", "minitf :train", "minitf float32", "minitf float32 autograd FFN", "minitf float32 MKL",
        "minitf float32 attention", "minitf readable", "minitf compile=on", "minitf muon", "minitf muon no-bf16",
        "nanoGPT bf16 autocast")
# The rows that run only on a CPU with bfloat16 units: why not on another, and the row that runs in their place
# there (None: none does). On such a CPU dtype=auto is float32, so two of them are another row's very step.
BF16_ONLY = {
    "minitf float32": ("dtype=auto trains in float32 here", "minitf :train"),
    "minitf muon no-bf16": ("Muon's Newton-Schulz runs in float32 here already", "minitf muon"),
    "minitf float32 attention": ("no bfloat16 autocast here, so the attention kernel is float32 in every row", None),
    "nanoGPT bf16 autocast": ("bfloat16 is only emulated here, so it measures nothing useful", None),
}


def asked_rows(text: str) -> list[str]:
    """--rows' type: the comma-separated names, each one of ROWS (one that is not used to be dropped without a word)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in ROWS:
            raise argparse.ArgumentTypeError(f"unknown row {name!r}; rows: {', '.join(ROWS)}")
    return names


def rows_here(asked: list[str], native: bool) -> tuple[list[str], str]:
    """(the rows to run, in ROWS' order, a line naming the rows asked for that do not run on this CPU and why, or "").

    `asked` empty: every row this CPU runs. nanoGPT's row always runs: every ratio is to it. On a CPU without
    bfloat16 units (`native` False) a row of BF16_ONLY asked for is said, and the row that is its step here runs."""
    if native:
        return [name for name in ROWS if not asked or name in asked or name == "nanoGPT"], ""
    wanted = {"nanoGPT", *asked} if asked else set(ROWS)
    said = []
    for name in asked:
        if name in BF16_ONLY:
            why, instead = BF16_ONLY[name]
            said.append(f"{name!r} ({why}" + (f": {instead!r} is that row, and runs)" if instead else ")"))
            if instead:
                wanted.add(instead)
    kept = [name for name in ROWS if name in wanted and name not in BF16_ONLY]
    note = "not run on this CPU, which has no bfloat16 units: " + "; ".join(said) if said else ""
    return kept, note


def under_estimate(measured: dict[str, float], estimate: float) -> str:
    """What a line giving Muon's estimated least cost adds when a measured ratio (`measured`: {where: ratio}) is under
    it: "" if none is.

    The estimate is not a bound, and runs have gone under it (docs/speed.md, a Xeon capped at AVX2: 1.18x against
    an estimate of 1.204x; three chunks of two steps on a busy Zen 3: 0.87x against 1.05x): the peak, measured apart
    from the steps, can read low, and the AdamW update Muon saves on the hidden matrices is not subtracted. So the
    line itself says it, rather than leave a reader two figures that contradict each other. `where` may be ""."""
    below = [f"{ratio:.2f}x {where}".strip() for where, ratio in measured.items() if ratio < estimate]
    if not below:
        return ""
    return (f"; measured below the estimate ({', '.join(below)}): the peak read low, the AdamW update Muon saves "
            f"is not subtracted, or the run's noise")


def muon_estimate(adamw_ms: float, newton_schulz_ms: float, peak: float, measured: dict[str, float]) -> str:
    """The line under a Muon/AdamW pair where Newton-Schulz runs in float32: the least a Muon step should cost
    against an AdamW step of `adamw_ms`, estimated as that step plus Newton-Schulz's products at the float32 `peak`
    (`newton_schulz_ms`, bench/newton_schulz.py's floor_ms), and whether a measured ratio went under it."""
    estimate = (adamw_ms + newton_schulz_ms) / adamw_ms
    return (f"  the least a Muon step should cost here, estimated: an AdamW step of {adamw_ms:.1f} ms plus "
            f"Newton-Schulz's products at the float32 peak ({peak:.0f} GFLOP/s: {newton_schulz_ms:.1f} ms), "
            f"{estimate:.2f}x" + under_estimate(measured, estimate))


def alternated(rows: dict, chunks: int, steps: int, before_each=None) -> dict[str, list[float]]:
    """{row: seconds per step of each chunk}: `chunks` rounds of `steps` steps of every row in turn
    (`before_each()` at the start of every round), so that a machine slowing down slows all rows alike;
    the heap is kept between chunks (heap_kept)."""
    per_step = {name: [] for name in rows}
    with heap_kept():
        for _ in range(chunks):
            if before_each is not None:
                before_each()
            for name, run in rows.items():
                t0 = time.perf_counter()
                run(steps)
                per_step[name].append((time.perf_counter() - t0) / steps)
    return per_step


def main() -> None:
    line = sized_parser(__doc__)
    line.add_argument("--rows", type=asked_rows, default=[], help="comma-separated row names to keep (default: all)")
    line.add_argument("--threads", type=positive_int, default=None,
                      help="torch threads for every row (default: torch's own)")
    line.add_argument("--batch", type=positive_int, default=None, help="another batch size (default: 12, or 32 "
                      "with --large; 16 is :train's own on the built-in data)")
    args = line.parse_args()
    if not ANCHOR.is_file():
        print(f"skipped: nanoGPT's model is not at {ANCHOR} (a user's clone has no ../shared)")
        return
    from minitf_repl.core.device import cpu_kind
    from minitf_repl.core.precision import training_dtype

    if args.threads:
        torch.set_num_threads(args.threads)
    size = dict(LARGE if args.large else SMALL)
    if args.batch:
        size["B"] = args.batch
    native = training_dtype("auto", "cpu") == "bfloat16"
    nanogpt, n_params = nanogpt_step(size)
    rows = {"nanoGPT": nanogpt,
            "minitf :train": minitf_step(size),
            "minitf float32": minitf_step(size, dtype="float32"),
            "minitf float32 autograd FFN": under(autograd_ffn, minitf_step(size, dtype="float32")),
            "minitf float32 MKL": under(torch_products, minitf_step(size, dtype="float32")),
            "minitf float32 attention": under(float32_attention, minitf_step(size)),
            "minitf readable": minitf_step(size, fast_path=False, dtype="float32"),
            "minitf compile=on": minitf_step(size, compile=True),
            "minitf muon": minitf_step(size, optimizer="muon"),
            "minitf muon no-bf16": as_without_bf16_units(minitf_step(size, optimizer="muon", dtype="float32")),
            "nanoGPT bf16 autocast": nanogpt_step(size, torch.bfloat16)[0]}
    assert tuple(rows) == ROWS, "ROWS names every row, in order, for --rows"
    if not native:  # auto is float32 here, so ":train" is the float32 row (BF16_ONLY says why each other goes)
        rows["minitf float32 autograd FFN"] = under(autograd_ffn, minitf_step(size))  # beside :train, float32 here
        rows["minitf float32 MKL"] = under(torch_products, minitf_step(size))
    kept, note = rows_here(args.rows, native)
    if note:
        print(note)
    rows = {name: rows[name] for name in kept}
    first = {}
    for name, steps in rows.items():  # warm-up (and compilation) outside the timing
        t0 = time.perf_counter()
        steps(1)
        first[name] = time.perf_counter() - t0
    peaks = []
    per_step = alternated(rows, args.chunks, args.steps, before_each=lambda: peaks.append(matmul_peak()))
    tokens = size["B"] * size["T"]
    flops_per_token = 6 * n_params + 12 * size["L"] * size["d"] * size["T"]  # nanoGPT's estimate_mfu
    peak = statistics.median(peaks)
    base = tokens / statistics.median(per_step["nanoGPT"])
    products = "oneDNN's (measured faster here)" if fastpath.onednn_faster() else "torch's own (MKL)"
    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads, dtype=auto trains in "
          f"{training_dtype('auto', 'cpu')} here; {size['L']} layers x {size['H']} heads x "
          f"{size['d']}, block {size['T']}, batch {size['B']}; medians of {args.chunks} alternated chunks of "
          f"{args.steps} steps; float32 matmul peak {peak:.0f} GFLOP/s (torch's own kernels); the fast path's "
          f"float32 products: {products}")
    width = max(map(len, rows))
    for name in rows:
        tps = tokens / statistics.median(per_step[name])
        mfu = tps * flops_per_token / (peak * 1e9)
        extra = f"   (first step {first[name]:.1f} s)" if "compile" in name else ""
        print(f"{name:{width}s} {tps:9,.0f} tok/s   {tps / base:5.2f}x nanoGPT   {mfu:6.1%} of peak{extra}")
    own = "minitf float32" if native else "minitf :train"
    if own in rows and "minitf float32 MKL" in rows:
        print(f"oneDNN's float32 products: the float32 step runs at {paired(per_step, 'minitf float32 MKL', own)} "
              f"the speed of the same step with torch's own" + ("" if fastpath.onednn_faster() else
              " (not taken on this CPU: both rows run the same code, so this is the table's noise)"))
    if own in rows and "minitf float32 autograd FFN" in rows:
        ratio = paired(per_step, "minitf float32 autograd FFN", own)
        hidden = size["B"] * size["T"] * 4 * size["d"] * 4  # bytes of the float32 hidden layer
        if fastpath.onednn_faster():
            print(f"the fast path's own feed-forward backward is not taken where float32 products go to oneDNN, as "
                  f"here: both rows run the same code, so their ratio, {ratio}, is this table's noise")
        elif hidden >= fastpath.OWN_BACKWARD_FROM_BYTES:
            print(f"the fast path's own feed-forward backward: the float32 step runs at {ratio} the speed of the "
                  f"same step with autograd's")
        else:
            print(f"the fast path's own feed-forward backward is not taken at this size (hidden layer "
                  f"{hidden / 2**20:.1f} MiB, under {fastpath.OWN_BACKWARD_FROM_BYTES / 2**20:.0f} MiB): both rows run "
                  f"the same code, so their ratio, {ratio}, is this table's noise")
    if "minitf float32 attention" in rows:
        dtype, speedup = fastpath.attention_dtype_at(size["B"], size["H"], size["H"], size["T"], size["d"] // size["H"])
        print(f"the attention kernel under bfloat16 autocast: bfloat16 measured {speedup:.2f}x float32's speed at "
              f"{size['B']} x {size['H']} x {size['T']} x {size['d'] // size['H']} here (taken from "
              f"{fastpath.ATTENTION_BF16_FROM_SPEEDUP}x), so :train runs it in {dtype}; the step runs at "
              f"{paired(per_step, 'minitf float32 attention', 'minitf :train')} the speed of the same step with "
              f"float32 attention" + ("" if dtype == "bfloat16" else
              " (both rows run the same code, so this is the table's noise)"))
    # In the table each chunk follows nanoGPT's chunk and the peak's 1024 x 1024 products, which
    # leave the caches full of their own data; a `:train` runs its steps back to back. The ratio
    # reads differently the two ways (AMD EPYC Zen 4, batch 16, three runs: 1.29 to 1.31 in the
    # table, 1.21 to 1.22 alone), so both are printed: the two rows alternated again on their own.
    pairs = [("minitf :train", "minitf muon", f"same dtype, Newton-Schulz in {'bfloat16' if native else 'float32'}")]
    if native:
        pairs.append(("minitf float32", "minitf muon no-bf16",
                      "float32 and Newton-Schulz in float32, as on a CPU without bfloat16 units, on this one's float32 units"))
    for adamw, muon, how in pairs:
        if adamw in rows and muon in rows:
            ratio = statistics.median(per_step[muon]) / statistics.median(per_step[adamw])
            pair = alternated({name: rows[name] for name in (adamw, muon)}, args.chunks, args.steps)
            alone = statistics.median(pair[muon]) / statistics.median(pair[adamw])
            print(f"a Muon step costs {ratio:.2f}x an AdamW step here in the table's alternation, {alone:.2f}x with "
                  f"the two alternated on their own ({how})")
            if muon == "minitf muon no-bf16" or not native:  # Newton-Schulz in float32: its floor is the float32 peak
                from newton_schulz import floor_ms  # here, not at the top: newton_schulz imports this module

                adamw_ms = statistics.median(pair[adamw]) * 1e3
                print(muon_estimate(adamw_ms, floor_ms(model_config(size), peak), peak,
                                    {"in the table": ratio, "alone": alone}))


if __name__ == "__main__":
    main()
