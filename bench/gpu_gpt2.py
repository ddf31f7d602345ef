"""GPT-2-small on one NVIDIA GPU: tokens/s and model FLOPs utilisation (MFU) through minitf's trainer.

12 layers x 12 heads x 768 wide, block 1024, vocabulary 50,304 (GPT-2's, padded to a multiple of
64), batch 16 x 1024 tokens, AdamW (`--optimizer muon`: the default :train's Muon, its Newton-Schulz
in bfloat16 on a GPU that has it); the `gpt2` preset (GELU-tanh, biases, tied head, learned
positions) on the fused attention path, with bfloat16 autocast and torch.compile. Random tokens:
this measures the machine and the code, not learning. The first (compiling) step is timed apart.

    python bench/gpu_gpt2.py                # about 2 minutes on an H200, most of it compiling
    python bench/gpu_gpt2.py --no-compile   # eager, for the side-by-side ratio
    python bench/gpu_gpt2.py --optimizer muon   # Muon for the matrices, AdamW for the rest

MFU counts 6 N per token for the weights plus 12 L T d for attention (the PaLM appendix's
formula), against the GPU's dense bfloat16 peak given by --peak-tflops (H200/H100 SXM: 989).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from minitf_repl.core.config import ModelConfig, TrainConfig, apply_preset
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.train import Trainer


class RandomBatches:
    """Uniform random token ids of any vocabulary size (the throughput does not depend on the text)."""

    name = "random"

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def check_fits(self, max_seq_len: int) -> None:
        pass

    def get_batch(self, split, batch_size, max_seq_len, generator):
        seqs = torch.randint(self.vocab_size, (batch_size, max_seq_len + 1), generator=generator)
        return seqs[:, :-1], seqs[:, 1:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30, help="timed steps after the first")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    p.add_argument("--optimizer", default="adamw", choices=("adamw", "muon"),
                   help="adamw: nanoGPT's GPT-2 recipe, the figures in docs/speed.md (default); muon: minitf's default")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench/gpu_gpt2.py needs a CUDA GPU (none found)")
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    config = apply_preset(ModelConfig(vocab_size=50304, max_seq_len=1024, d_model=768, n_heads=12, n_layers=12,
                                      d_ff=3072, attention="sdpa"), "gpt2")
    torch.manual_seed(0)
    model = MiniTransformerLM(config).to(device)
    n_params = model.num_parameters()
    train = TrainConfig(steps=args.steps + 1, batch_size=args.batch, eval_every=10**6, eval_batches=1,
                        warmup_steps=0, dtype=args.dtype, compile=not args.no_compile,
                        optimizer=args.optimizer)
    trainer = Trainer(model, RandomBatches(config.vocab_size), train, device)
    times: list[float] = []
    last = [time.perf_counter()]

    def on_step(info) -> None:
        torch.cuda.synchronize()
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    start = time.perf_counter()
    trainer.start_run(args.steps + 1)
    summary = trainer.run(on_step=on_step)
    total = time.perf_counter() - start
    first, steady = times[0], times[1:]
    tokens = args.batch * config.max_seq_len
    step_s = statistics.median(steady)
    tps = tokens / step_s
    L, T, d = config.n_layers, config.max_seq_len, config.d_model
    flops_per_token = 6 * n_params + 12 * L * T * d
    mfu = flops_per_token * tps / (args.peak_tflops * 1e12)
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    print(f"GPT-2 small ({n_params / 1e6:.1f}M parameters), block {T}, batch {args.batch}, {args.dtype}, "
          f"{args.optimizer}, {'compiled' if summary.compiled else 'eager'}; final loss {summary.train_loss:.3f}")
    for note in summary.notes:
        print(f"note: {note}")
    print(f"first step (compile and warm-up): {first:.1f} s")
    print(f"steady step: median {step_s * 1000:.1f} ms over {len(steady)} steps -> {tps:,.0f} tokens/s")
    print(f"model FLOPs utilisation: {mfu:.1%} of {args.peak_tflops:g} TFLOP/s (bf16 dense peak)")
    print(f"peak memory: {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB; wall time {total:.0f} s")


if __name__ == "__main__":
    main()
