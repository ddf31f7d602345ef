"""How long do `:checks`, `:lrfind`, `:context` and `:mistakes` take on the default model?

The first two train fresh models (the blind check two of `steps` steps, the overfit check one; the
range test one of up to `steps`), so on a CPU without bfloat16 they take longer than on one with it;
`:context` scores its default windows (forward passes only) and counts the counter's table; `:mistakes`
scores 64 windows of pydoc, and on `sort` answers 500 held-out questions (one pass, then six greedy). This
times each check of core.checks.run_checks, the whole of it, core.lrfind.range_test and
core.context.position_losses, on the default model and the built-in pydoc, medians of --runs runs
after one warm-up, in this process, and says on which kind of CPU. Run it natively and through
bench/as_avx2.py to see both kinds side by side:

    python bench/checks.py
    python bench/as_avx2.py bench/checks.py --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100, help="the training checks' and the range test's steps")
    args = parser.parse_args()

    import torch

    from minitf_repl.core import checks
    from minitf_repl.core.device import cpu_kind
    from minitf_repl.commands.context import default_windows
    from minitf_repl.commands.counting import NGRAM_DEFAULT
    from minitf_repl.core.context import position_losses
    from minitf_repl.core.lrfind import range_test
    from minitf_repl.core.mistakes import task_mistakes, text_mistakes
    from minitf_repl.session import Session

    session = Session(data_spec="pydoc", device_name="cpu")
    trainer, model = session.trainer, session.model
    print(f"{cpu_kind()}; torch {torch.__version__}, {torch.get_num_threads()} threads; pydoc, default model, "
          f"{args.steps} steps; medians of {args.runs} runs after one warm-up")
    per_check: dict[str, list[float]] = {name: [] for name in checks.CHECKS}
    whole, finder, scored, hard, wrong = [], [], [], [], []
    sort = Session(data_spec="sort", device_name="cpu")
    windows = default_windows(model.config.max_seq_len)
    for run in range(args.runs + 1):
        start = time.perf_counter()
        done = checks.run_checks(model, trainer, steps=args.steps, unigram=lambda: 0.0)
        total = time.perf_counter() - start
        start = time.perf_counter()
        range_test(model.config, trainer.config, trainer.data, trainer.device, steps=args.steps)
        found = time.perf_counter() - start
        start = time.perf_counter()
        position_losses(model, trainer.data, trainer.device, windows, counter=NGRAM_DEFAULT)
        context = time.perf_counter() - start
        start = time.perf_counter()
        text_mistakes(model, trainer.data, trainer.device, 64)
        hardest = time.perf_counter() - start
        start = time.perf_counter()
        task_mistakes(sort.model, sort.data, sort.trainer.device, 500)
        answers = time.perf_counter() - start
        if run:  # the first run warms up
            whole.append(total)
            finder.append(found)
            scored.append(context)
            hard.append(hardest)
            wrong.append(answers)
            for name, seconds in done.seconds.items():
                per_check[name].append(seconds)
    for name, seconds in per_check.items():
        print(f"  {name:<9} {statistics.median(seconds):6.2f} s")
    print(f"  :checks   {statistics.median(whole):6.2f} s   ({', '.join(f'{s:.2f}' for s in whole)})")
    print(f"  :lrfind   {statistics.median(finder):6.2f} s   ({', '.join(f'{s:.2f}' for s in finder)})")
    print(f"  :context  {statistics.median(scored):6.2f} s   ({', '.join(f'{s:.2f}' for s in scored)}; "
          f"{windows:,} windows)")
    print(f"  :mistakes {statistics.median(hard):6.2f} s on pydoc (64 windows), {statistics.median(wrong):.2f} s on "
          f"sort (500 questions)")


if __name__ == "__main__":
    main()
