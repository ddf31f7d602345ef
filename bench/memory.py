"""Peak resident memory of `minitf train --steps 100` (the default model on the built-in data).

Each run is a fresh process measured by /usr/bin/time -v ("Maximum resident set size"), with a
throw-away checkpoint folder, so the autosave at the end is counted too. Rows, alternated:
    threads=auto      what a user gets (core/threads.py picks the count)
    threads=1         one thread (fewer per-thread buffers)
    nanoGPT           karpathy/nanoGPT's model and configure_optimizers (../shared/anchors), 100 steps
                      of its CPU recipe's size (batch 12, block 64), random tokens: the reference
The target (issue 16) is at most 350 MB for the first row. Medians of --runs runs.

Every figure is MiB (2^20 bytes): time's "kbytes" are KiB (the same number as ru_maxrss and VmHWM),
divided by 1024. Until this said so the script printed them as "MB", and issue 16's own figures
(416-430, nanoGPT 374) were read the same way; the first row's median is therefore also given in
millions of bytes, so that it reads against the target either way: "341 MiB (358 MB)". Without
../shared (a user's clone) nanoGPT's row is skipped, and a line says so.

    python bench/memory.py [--runs 3] [--steps 100]
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from arguments import parser, positive_int

ANCHOR = Path(__file__).resolve().parents[2] / "shared" / "anchors" / "nanogpt" / "model.py"

NANOGPT = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("nanogpt_anchor", sys.argv[1])
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
model = m.GPT(m.GPTConfig(block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False))
opt = model.configure_optimizers(0.1, 1e-3, (0.9, 0.99), "cpu")
for _ in range(int(sys.argv[2])):
    x = torch.randint(65, (12, 65))
    _, loss = model(x[:, :-1].contiguous(), x[:, 1:].contiguous()); loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
"""


def peak_mib(cmd: list[str], env: dict, name: str = "the run") -> float:
    """The peak resident memory of `cmd`, run to its end, in MiB; SystemExit with the child's own error if it fails
    (`name`: the row, for that message: nanoGPT's command line is a whole script)."""
    with tempfile.TemporaryDirectory(prefix="minitf-memory-time-") as folder:
        report = Path(folder) / "time.txt"
        # time's ~25-line report goes to a file (-o), not into the child's stderr: a child that fails then
        # shows its own error line ("error: steps must be ...") and nothing of time's
        done = subprocess.run(["/usr/bin/time", "-v", "-o", str(report), *cmd], env=env, capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed (exit {done.returncode}): "
                             f"{done.stderr.strip()[-2000:] or 'no error message'}")
        kib = re.search(r"Maximum resident set size \(kbytes\): (\d+)", report.read_text())
    return int(kib.group(1)) / 1024  # time's "kbytes" are KiB (1024 bytes): this is MiB


def in_both_units(mib: float) -> str:
    """'341 MiB (358 MB)': a peak in MiB and in millions of bytes, so that it reads against a target either way."""
    return f"{mib:.0f} MiB ({mib * 2**20 / 1e6:.0f} MB)"


def main() -> None:
    line = parser(__doc__)
    line.add_argument("--runs", type=positive_int, default=3)
    line.add_argument("--steps", type=positive_int, default=100)
    args = line.parse_args()
    if not Path("/usr/bin/time").exists():
        print("skipped: needs GNU time at /usr/bin/time (apt-get install time)")
        return
    from minitf_repl.core.device import cpu_kind

    minitf = [sys.executable, "-m", "minitf_repl"]
    rows = {
        "threads=auto": minitf + ["train", "--steps", str(args.steps)],
        "threads=1": minitf + ["--set", "threads=1", "train", "--steps", str(args.steps)],
    }
    if ANCHOR.is_file():
        rows["nanoGPT"] = [sys.executable, "-c", NANOGPT, str(ANCHOR), str(args.steps)]
    else:  # said, as the other scripts say what they skip: a reader would otherwise miss the reference row
        print(f"skipped: nanoGPT's row: its model is not at {ANCHOR} (a user's clone has no ../shared)")
    peaks = {name: [] for name in rows}
    folder = Path(tempfile.mkdtemp(prefix="minitf-memory-"))
    env = {k: v for k, v in os.environ.items() if k != "MINITF_THREADS"}
    env["MINITF_CHECKPOINT_DIR"] = str(folder / "checkpoints")
    try:
        for _ in range(args.runs):
            for name, cmd in rows.items():
                peaks[name].append(peak_mib(cmd, env, name))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"{cpu_kind()}; peak RSS of a {args.steps}-step train, medians of {args.runs} runs "
          f"(MiB, 2^20 bytes: /usr/bin/time -v's kbytes are KiB)")
    for name, values in peaks.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"  {name:14s} {statistics.median(values):6.0f}   ({shown})")
    # the issue wrote "MB" for what it read the same way (MiB); both units, so that the row meets it either way
    auto = statistics.median(peaks["threads=auto"])
    print(f"issue 16's target, at most 350 MB for threads=auto: {in_both_units(auto)} here")


if __name__ == "__main__":
    main()
