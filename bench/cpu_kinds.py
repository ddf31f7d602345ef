"""Run minitf, on a CPU with bfloat16 units, down the path a CPU without them takes.

Every precision choice minitf makes asks one question, `native_bf16(device)` in core.precision:
dtype=auto's autocast and Muon's Newton-Schulz (core.precision.fast_dtype). Inside
`without_bf16_units()` the answer is "no", so a run on a CPU with AMX or AVX512-BF16 takes the path
of a CPU without them: the forward in float32 and Newton-Schulz in float32 (the Gram form for the
feed-forward matrices), on this CPU's float32 units. It is the same code, not the same hardware:
a real CPU without bfloat16 has its own float32 speed, so the benchmarks label such rows and print
this CPU's kind beside them. The tests patch the same answer (conftest's `cpu_path`,
tests/test_optimizers.py's `bf16_units`). bench/as_avx2.py goes further: it caps torch's kernels
at AVX2, so the whole run, nanoGPT's rows included, has the instruction sets of a CPU without them.
"""

from __future__ import annotations

import contextlib

from minitf_repl.core import precision


@contextlib.contextmanager
def without_bf16_units():
    """Within: minitf answers every precision question as on a CPU without bfloat16 units."""
    asked = precision.native_bf16
    precision.native_bf16 = lambda device: False
    try:
        yield
    finally:
        precision.native_bf16 = asked


def as_without_bf16_units(run):
    """`run(...)` wrapped so that each call runs inside without_bf16_units() (a row of alternated chunks)."""

    def wrapped(*args, **kwargs):
        with without_bf16_units():
            return run(*args, **kwargs)

    return wrapped
