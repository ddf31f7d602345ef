"""Two switches for the training step: bfloat16 autocast and torch.compile.

Mixed precision (`dtype=bfloat16`): the forward pass and the loss run under `torch.autocast`, so
matrix products are computed in bfloat16 (8 bits of mantissa instead of 23) while the weights, the
gradients and AdamW's moments stay float32. Evaluation is never autocast, so a validation loss
measured after bfloat16 training compares with one measured after float32 training. On a GPU with
bfloat16 units this is faster and halves the activations' memory; on most CPUs it saves memory but
not time (`bench/variants.py` measures it on the machine at hand).

Compilation (`compile=on`): the trainer calls `torch.compile(model)`, a wrapper around the same
module and the same parameters, so the optimizer, checkpoints and evaluation see nothing new. The
first step through it traces and compiles (seconds to minutes); later steps reuse the code. Where
the platform cannot compile (no C++ compiler, an unsupported Python, an error inside inductor),
the trainer trains eagerly instead and says so in one line: `compile_module` and
`compile_failure_line` give that line, `is_compile_failure` tells such an error from a real one.
"""

from __future__ import annotations

import contextlib
import shutil

import torch

from .errors import TrainingDiverged, UserError, is_out_of_memory

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
COMPILERS = ("c++", "g++", "clang++")  # inductor writes C++ for the CPU (and builds launchers for GPUs)


def autocast(dtype: str, device) -> contextlib.AbstractContextManager:
    """The context a training forward pass runs in: nothing for float32, autocast for bfloat16."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown training dtype {dtype!r}; one of {', '.join(DTYPES)}")
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[dtype])


def precision_note(dtype: str, device) -> str | None:
    """One line for a person who trains in bfloat16 on a CPU, where the gain depends on the chip; else None.

    (bench/variants.py measured 1.3 to 1.6x the float32 tokens/s on this project's 2-core AMD EPYC
    machine, and 0.9x on the same machine under load: the note says what to compare, not a promise.)
    """
    if dtype == "bfloat16" and torch.device(device).type == "cpu":
        return ("bfloat16 autocast on the CPU: weights and optimizer stay float32, validation runs in float32; "
                "whether it is faster depends on the CPU's bfloat16 support: compare the tokens/s with float32")
    return None


def compile_module(model: torch.nn.Module) -> tuple[torch.nn.Module | None, str | None]:
    """(torch.compile(model), None), or (None, the one line that says why it cannot be compiled here).

    torch.compile is lazy: most failures come at the first call, which the trainer catches
    (`is_compile_failure`). What can be known before, is checked here.
    """
    if not any(shutil.which(c) for c in COMPILERS):
        return None, ("torch.compile needs a C++ compiler (c++, g++ or clang++) and none was found; "
                      "training eagerly")
    try:
        return torch.compile(model), None
    except Exception as e:  # e.g. "not supported on Python 3.x", a missing backend
        return None, compile_failure_line(e)


def compile_failure_line(exc: BaseException) -> str:
    """What a failed compile says: the error's type and first line, and that training goes on eagerly."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if len(first) > 160:
        first = first[:157] + "..."
    return f"torch.compile failed here ({type(exc).__name__}: {first}); training eagerly"


def is_compile_failure(exc: BaseException) -> bool:
    """Whether an error raised through the compiled model is the compiler's, not the step's own.

    A divergence, a user's mistake and running out of memory are the step's: eager would raise
    them too, so they pass through. Anything else is retried eagerly, which re-raises a real bug.
    """
    if isinstance(exc, (TrainingDiverged, UserError)) or not isinstance(exc, Exception):
        return False
    return not is_out_of_memory(exc)
