"""How long do :patch, :attrib, :lens at=mid, :grad, :ln, :muon, :rope, :heads and :embed map=on take on the default
model, and what does :train watch= cost?

Targets (issue 21): each view answers in under 1 s on the default model; watch= adds at most 10%
to the wall time of a default :train.

Part 1 times the engine on `ModelConfig()` defaults (4 layers x 4 heads x 128 wide, context 64)
with a vocabulary of 100 and two 64-token prompts (the longest the default model reads):
`activation_patching` (every stream position and every head: 5 x 64 + 16 patched runs, batched),
`direct_logit_attribution`, `logit_lens` at=mid and at=both, `backprop` with and without its float64
slope check; then the commands end to end (`run_command` on a default Session, pydoc data, the
default prompt; :patch on two 16-character prompts; :muon on the largest matrix, a batch of 16 x 64;
:rope on the default model with pos_encoding=rope; :heads on its 8 x 64 repeated random tokens, with and
without the sweep that switches each head off in turn; :embed map=on, the SVD of W_E). Medians of several runs
after one warm-up each; rendering is not included.

Part 2 runs the default :train (pydoc, 600 steps, an evaluation every 100) plain and with each
watch= view, alternated (plain, attn, lens, samples, grad, heads, embed, plain, ...), each from a fresh default
session with the same seed, and prints each kind's median wall time and its ratio to plain's.

    python bench/inside_views.py                     # 9 runs of each view, 3 rounds of :train
    python bench/inside_views.py --rounds 5 --steps 600
    python bench/inside_views.py --skip-train        # part 1 only
    python bench/inside_views.py --skip-train --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from minitf_repl.core.attribution import direct_logit_attribution
from minitf_repl.core.backprop import backprop
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.device import cpu_kind
from minitf_repl.core.inside import logit_lens
from minitf_repl.core.model import MiniTransformerLM
from minitf_repl.core.patching import activation_patching
from minitf_repl.core.watch import WATCH_VIEWS

VOCAB, PROMPT = 100, 64


def median_time(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def line(name: str, seconds: float) -> None:
    print(f"{name:<28} median {seconds * 1000:8.1f} ms   {'ok' if seconds < 1.0 else 'SLOWER THAN 1 s'}")


def views(runs: int) -> None:
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(vocab_size=VOCAB))
    g = torch.Generator().manual_seed(1)
    clean = torch.randint(0, VOCAB, (PROMPT,), generator=g)
    corrupt = clean.clone()
    corrupt[PROMPT // 2] = (corrupt[PROMPT // 2] + 1) % VOCAB  # one token changed
    engine = {
        "activation_patching": lambda: activation_patching(model, clean, corrupt, answer=3),
        "direct_logit_attribution": lambda: direct_logit_attribution(model, clean),
        "logit_lens at=mid": lambda: logit_lens(model, clean, at="mid"),
        "logit_lens at=both": lambda: logit_lens(model, clean, at="both"),
        f"backprop ({PROMPT - 1} predictions)": lambda: backprop(model, clean, check=False),
        "backprop + float64 check": lambda: backprop(model, clean),
    }
    print(f"engine: default model, vocab {VOCAB}, {PROMPT}-token prompts, {torch.get_num_threads()} torch threads, "
          f"{runs} runs")
    for name, fn in engine.items():
        line(name, median_time(fn, runs))

    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session

    session = Session()
    session.build()
    commands = {
        ":patch (16 characters)": lambda: run_command(session, "patch",
                                                      {"prompts": "The model reads. vs The model sends."}),
        ":attrib": lambda: run_command(session, "attrib", {}),
        ":lens at=both": lambda: run_command(session, "lens", {"at": "both"}),
        ":grad": lambda: run_command(session, "grad", {}),
        ":ln which=ln_f": lambda: run_command(session, "ln", {"which": "ln_f"}),
        ":muon matrix=ffn.fc_in": lambda: run_command(session, "muon", {"matrix": "ffn.fc_in"}),
        ":heads (+16 heads off)": lambda: run_command(session, "heads", {}),
        ":heads TEXT": lambda: run_command(session, "heads", {"text": "The model reads. " * 3}),
        ":embed map=on": lambda: run_command(session, "embed", {"map": True}),
    }
    rotary = Session()
    run_command(rotary, "set", {"pos_encoding": "rope", "autosave": False})
    commands[":rope (pos_encoding=rope)"] = lambda: run_command(rotary, "rope", {})
    print(f"commands end to end (run_command), default session ({session.data_spec}), {runs} runs")
    for name, fn in commands.items():
        line(name, median_time(fn, runs))


def training(rounds: int, steps: int) -> None:
    from minitf_repl.dispatch import run_command
    from minitf_repl.session import Session, ShellConfig

    kinds = [None, *WATCH_VIEWS]
    walls: dict[str | None, list[float]] = {k: [] for k in kinds}
    frames: dict[str | None, int] = {}
    for r in range(rounds):
        for kind in kinds:
            session = Session(shell_config=ShellConfig(autosave=False))
            session.build()  # the model and data before the clock starts, as a REPL has them
            args = {"steps": steps} | ({"watch": kind} if kind else {})
            t0 = time.perf_counter()
            result = run_command(session, "train", args)
            walls[kind].append(time.perf_counter() - t0)
            frames[kind] = len(result.frames)
            print(f"  round {r + 1}: {'plain' if kind is None else 'watch=' + kind:<14} {walls[kind][-1]:6.2f} s"
                  f"  (val loss {result.val_loss:.4f}, {torch.get_num_threads()} threads)", flush=True)
    base = statistics.median(walls[None])
    print(f"default :train ({steps} steps, pydoc), {rounds} alternated rounds: median wall time")
    for kind in kinds:
        m = statistics.median(walls[kind])
        name = "plain" if kind is None else f"watch={kind} ({frames[kind]} frames)"
        verdict = "" if kind is None else ("   ok (<= 1.10)" if m / base <= 1.10 else "   OVER 10%")
        print(f"{name:<28} {m:7.2f} s   x{m / base:.3f}{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for part 1 (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"CPU: {cpu_kind()}; torch {torch.__version__}")
    views(args.runs)
    if not args.skip_train:
        training(args.rounds, args.steps)


if __name__ == "__main__":
    main()
