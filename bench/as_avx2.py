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
torch.compile's rows build their kernels into a cache directory of their own: inductor's cache key
leaves ATEN_CPU_CAPABILITY out, and kernels built without the cap, loaded under it, gave a NaN loss
at the first step or crashed the process (torch 2.13, a Zen 5; each way round works from an empty
cache).
It is the same silicon, clock and caches as this machine: a real Zen 3 differs in those, so the
figures stand for the instruction sets, and their ratios are what carry over.

    python bench/as_avx2.py bench/nanogpt.py --batch 16
"""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
from pathlib import Path

AVX2_ONLY = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def capped_environment(environ: dict) -> dict:
    """`environ` with the three caps set (whatever they were), DNNL_MAX_CPU_ISA, which would take
    precedence in an older oneDNN, removed, and inductor's cache moved beside its usual place."""
    env = {name: value for name, value in environ.items() if name != "DNNL_MAX_CPU_ISA"}
    usual = env.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}")
    return {**env, **AVX2_ONLY, "TORCHINDUCTOR_CACHE_DIR": f"{usual}_avx2"}


def main(argv: list[str]) -> None:
    if not argv or not Path(argv[0]).is_file():
        sys.exit(f"as_avx2: {argv[0] if argv else 'no script'} is not a file; "
                 "give a benchmark and its arguments, e.g. python bench/as_avx2.py bench/nanogpt.py")
    os.execve(sys.executable, [sys.executable, *argv], capped_environment(dict(os.environ)))


if __name__ == "__main__":
    main(sys.argv[1:])
