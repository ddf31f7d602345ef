"""Run a benchmark as on a CPU with AVX2 and nothing newer: no AVX-512, no bfloat16 units.

That kind (AMD Zen 2 and 3, most laptops, Intel's client cores) is where many learners train, and
it is the kind issue #16's targets are set on. A machine with AVX-512 and bfloat16 units can stand
in for it: torch's three kernel libraries each read a cap from the environment when they start.

    ONEDNN_MAX_CPU_ISA=AVX2        oneDNN: the fast path's float32 products where they pay
                                   (core.fastpath) and every bfloat16 product; with this cap the
                                   bfloat16 units count as absent (core.device.cpu_has_bf16_units),
                                   so dtype=auto trains in float32 and Muon's Newton-Schulz runs in
                                   float32, down the same code a CPU without them takes
    ATEN_CPU_CAPABILITY=avx2       ATen's own vectorised kernels: GELU, softmax, layer norm, AdamW
    MKL_ENABLE_INSTRUCTIONS=AVX2   MKL's products (on an AMD CPU MKL takes its AVX2 kernels anyway)

The script runs in a new process with these set (they are read once, at start), and its first line
(core.device.cpu_kind) names the caps. Every row of the run, nanoGPT's included, is capped alike.
The `compile=on` rows build their kernels into a cache directory of the cap's own, as any minitf
run under ATEN_CPU_CAPABILITY does (core.precision.keep_capped_kernels_apart: inductor's cache key
leaves the cap out, and mixed kernels gave a NaN loss or a crash).
It is the same silicon, clock and caches as this machine: a real Zen 3 differs in those, so the
figures stand for the instruction sets, and their ratios are what carry over.

    python bench/as_avx2.py bench/nanogpt.py --batch 16
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def capped_environment(environ: dict) -> dict:
    """`environ` with the three caps set (whatever they were) and DNNL_MAX_CPU_ISA, oneDNN's older
    spelling of its cap, removed."""
    env = {name: value for name, value in environ.items() if name != "DNNL_MAX_CPU_ISA"}
    return {**env, **AVX2_ONLY}


def main(argv: list[str]) -> None:
    # a script, or a module as Python's own -m runs it (`-m minitf_repl device`: the REPL as a CPU without bfloat16
    # runs it, to see what :device says there)
    module = len(argv) >= 2 and argv[0] == "-m"
    if not argv or not (module or Path(argv[0]).is_file()):
        sys.exit(f"as_avx2: {argv[0] if argv else 'no script'} is not a file; give a benchmark and its arguments, "
                 "e.g. python bench/as_avx2.py bench/nanogpt.py, or a module: python bench/as_avx2.py -m minitf_repl")
    os.execve(sys.executable, [sys.executable, *argv], capped_environment(dict(os.environ)))


if __name__ == "__main__":
    main(sys.argv[1:])
