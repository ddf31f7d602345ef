"""How fast does `minitf` show its prompt, compared with `python -c "import torch"`?

The shell imports torch in a background thread after the prompt is on screen, so the prompt should
appear in a fraction of torch's import time. This measures both, interleaved in the same run so
that a busy machine slows both alike: the time from launching `minitf` in a pseudo-terminal
(pexpect) to the first `minitf> ` on its screen, and the time of a fresh `python -c "import torch"`.
Each `minitf` run gets a fresh, empty HOME (no history file, no cache), as a first start would.
Also, as scripts run it: a one-shot `minitf --load NAME gen 12 -n 2` from start to exit (a checkpoint
of the default model saved once beforehand), whose load checks the files against a reference model.

    python bench/startup.py            # 5 runs each, medians and their ratio
    python bench/startup.py --runs 9
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import pexpect

PROMPT = "minitf>"  # prompt-toolkit draws the trailing space as a cursor move, not a character


def minitf_command() -> list[str]:
    """The installed `minitf` script next to this Python, else `python -m minitf_repl`."""
    script = shutil.which("minitf", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "minitf_repl"]


def fresh_env(home: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "MINITF_"))}
    env.update(HOME=home, TERM="xterm-256color", PYTHONDONTWRITEBYTECODE="1")
    return env


def time_to_prompt(command: list[str], timeout: float = 60.0) -> float:
    with tempfile.TemporaryDirectory(prefix="minitf-bench-") as home:
        start = time.perf_counter()
        child = pexpect.spawn(command[0], command[1:], env=fresh_env(home), encoding="utf-8",
                              timeout=timeout, dimensions=(40, 120))
        try:
            child.expect_exact(PROMPT)
            elapsed = time.perf_counter() - start
            child.sendcontrol("d")  # Ctrl-D: leave
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        if not os.path.isfile(os.path.join(home, ".local", "share", "minitf", "history")):
            print("note: no history file was created in the fresh HOME", file=sys.stderr)
    return elapsed


def time_import_torch() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True)
    return time.perf_counter() - start


def time_load_and_gen(command: list[str], folder: str) -> float:
    env = {**os.environ, "MINITF_CHECKPOINT_DIR": folder}
    start = time.perf_counter()
    subprocess.run(command + ["--load", "b", "gen", "12", "-n", "2"], check=True, env=env, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each measurement (median reported)")
    args = parser.parse_args()
    command = minitf_command()
    time_to_prompt(command)  # warm the file cache once, for both: neither is measured cold from disk
    time_import_torch()
    folder = tempfile.mkdtemp(prefix="minitf-bench-ck-")
    subprocess.run(command + ["train", "--steps", "1", "--save", "b"], check=True, capture_output=True,
                   env={**os.environ, "MINITF_CHECKPOINT_DIR": folder})
    prompt_times, torch_times, load_times = [], [], []
    for i in range(args.runs):
        prompt_times.append(time_to_prompt(command))
        torch_times.append(time_import_torch())
        load_times.append(time_load_and_gen(command, folder))
        print(f"run {i + 1}: prompt {prompt_times[-1]:.3f} s, import torch {torch_times[-1]:.3f} s, "
              f"--load b gen {load_times[-1]:.3f} s", file=sys.stderr)
    shutil.rmtree(folder, ignore_errors=True)
    prompt, torch = statistics.median(prompt_times), statistics.median(torch_times)
    print(f"command:                 {' '.join(command)}")
    print(f"first prompt (median):   {prompt:.3f} s over {args.runs} runs")
    print(f"import torch (median):   {torch:.3f} s over {args.runs} runs")
    print(f"prompt / import torch:   {prompt / torch:.2f}")
    print(f"--load b gen 12 -n 2:    {statistics.median(load_times):.3f} s, start to exit (median), "
          f"{statistics.median(load_times) / torch:.2f}x import torch")


if __name__ == "__main__":
    main()
