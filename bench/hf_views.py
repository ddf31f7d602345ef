"""Do the views stay fast on a real model? :attn, :lens, :step and one :gen token on GPT-2 124M's shape.

Random weights of GPT-2 small's size (12 layers x 12 heads x 768 wide, context 1,024, 50,257
tokens: 124M parameters) are written as a Hugging Face folder (`core.hf.save_folder`) with a
byte-level BPE padded to 50,257 ids, then read back the way a user does, `:load hf:PATH`. Each
command runs through the front door (`run_command`, as the REPL runs it) and is rendered at 80
columns into a string, on a 64-token prompt; the median of several runs after one warm-up each,
and its ratio to the 2-second target. Load time is printed once.

    python bench/hf_views.py                 # about a minute on 2 cores
    python bench/hf_views.py --runs 9 --tokens 128
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console

TARGET = 2.0  # seconds, each view (issue 20)
GPT2_SMALL = dict(vocab_size=50257, max_seq_len=1024, d_model=768, n_heads=12, n_layers=12, d_ff=3072,
                  activation="gelu_tanh")
TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n") * 50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64, help="prompt length in tokens")
    args = parser.parse_args()

    from minitf_repl.core.bpe import SubwordTokenizer, train_bpe
    from minitf_repl.core.config import ModelConfig
    from minitf_repl.core.device import cpu_kind
    from minitf_repl.core.hf import save_folder
    from minitf_repl.core.model import MiniTransformerLM
    from minitf_repl.dispatch import run_command
    from minitf_repl.render import render
    from minitf_repl.session import Session

    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**GPT2_SMALL)).eval()
    tokenizer = SubwordTokenizer(train_bpe(TEXT, 400).tokenizer, vocab_size=GPT2_SMALL["vocab_size"])
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "gpt2-random"
        save_folder(model, tokenizer, folder)
        del model
        (Path(tmp) / "text.txt").write_text(TEXT)
        session = Session(data_spec=str(Path(tmp) / "text.txt"))
        start = time.perf_counter()
        run_command(session, "load", {"name": f"hf:{folder}"})
        load_seconds = time.perf_counter() - start
    ids = session.data.tokenizer.encode(TEXT)[: args.tokens]
    prompt = session.data.tokenizer.decode(ids)
    n_params = session.model.num_parameters()
    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; random GPT-2 small "
          f"({n_params / 1e6:.0f}M parameters), {len(ids)}-token prompt; :load hf: took {load_seconds:.1f} s")
    print(f"medians of {args.runs} runs after one warm-up, each command run and rendered at 80 columns")
    views = {
        ":attn layer=5": ("attn", {"prompt": prompt, "layer": 5}),
        ":lens": ("lens", {"prompt": prompt}),
        ":step": ("step", {"prompt": prompt, "seed": 0}),
        ":gen n=1": ("gen", {"prompt": prompt, "n": 1, "temperature": 0}),
    }
    for label, (name, options) in views.items():
        def once() -> None:
            console = Console(file=io.StringIO(), width=80, color_system=None)
            render(run_command(session, name, dict(options)), console)

        once()
        times = []
        for _ in range(args.runs):
            t = time.perf_counter()
            once()
            times.append(time.perf_counter() - t)
        median = statistics.median(times)
        print(f"  {label:<14} {median:6.3f} s   {median / TARGET:5.2f} x the {TARGET:g} s target   "
              f"(min {min(times):.3f}, max {max(times):.3f})")


if __name__ == "__main__":
    main()
