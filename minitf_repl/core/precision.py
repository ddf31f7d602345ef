"""Two switches for the training step: bfloat16 autocast and torch.compile.

Mixed precision (`dtype`): with bfloat16 the forward pass and the loss run under `torch.autocast`,
so matrix products are computed in bfloat16 (8 bits of mantissa instead of 24) while the weights,
the gradients and the optimizer's state stay float32. Evaluation is never autocast, so a
validation loss measured after bfloat16 training compares with one measured after float32
training. The default, `auto`, trains in bfloat16 where the hardware multiplies bfloat16 matrices
natively (core.device.native_bf16: a GPU from the A100 on, a CPU with AMX or AVX512-BF16) and in
float32 elsewhere, the way nanoGPT turns on bfloat16 and TF32 wherever the GPU has them. An ARM CPU's
BF16 instructions are left out until someone measures a bfloat16 step against float32 there
(native_bf16 says why).

Why auto and not float32 (bench/nanogpt.py and bench/recipes.py, 2-core Xeon with AMX, float32
matmul peak about 280 GFLOP/s): a training step of the default model (4 x 4 x 128, batch 12) runs
at 1.33x nanoGPT's float32 step in bfloat16 against 1.02x in float32, 6 x 6 x 384 at 2.81x against
1.06x; the first `:train` on pydoc ends at val 1.327 in 32.5 s instead of 1.305 in 41.1 s, tiny
Shakespeare's recipe reaches 1.867 in 19.6 s instead of 1.861 in 24.1 s. The losses move by about
0.01 to 0.02, the time by a fifth to a half and more. Where float32 matters (comparing two runs to
the last digit, checking a gradient) `:set dtype=float32` says so.

Compilation (`compile=on`): the trainer calls `torch.compile(model)`, a wrapper around the same
module and the same parameters, so the optimizer, checkpoints and evaluation see nothing new. The
first step through it traces and compiles (seconds to minutes); later steps reuse the code, until torch
compiles again where something the code is specialised on changed (a batch size, dropout, the dtype):
each compile is said before it (`run_compiled` asks torch whether it compiles) and timed apart from
the run's speed. Where the platform cannot compile (no C++ compiler, an unsupported Python, an error
inside inductor), the trainer trains eagerly instead and says so in one line: `compile_module` and
`compile_failure_line` give that line, `is_compile_failure` tells such an error from a real one. Ctrl-C
is kept from the C++ compilers a step starts (`compilers_deaf_to_ctrl_c`), which it killed half-way.

Why compile stays off by default, and there is no `compile=auto` (issue 16 asked to weigh one): on a
CPU without bfloat16 units a compiled float32 step of the default model measured 1.02x to 1.03x the
eager fast path (2-core Xeon without AMX, batch 16, one thread; torch 2.13), for a first step of
23.6 s with an empty compile cache and 6.1 s with torch's on-disk cache warm, so no run of sensible
length wins the compile back: inductor fuses the elementwise work around products that already run
near the float32 peak. Where it pays (bfloat16 on a CPU with AMX: 1.51x against 1.33x eager at
nanoGPT's CPU size, an earlier session; a GPU: bench/gpu_gpt2.py, 1.33x) `compile=on` asks for it.
Even there it wins back its compile time only in long runs: on a second Xeon with AMX a compiled
step of the default model at batch 16 ran 1.60x nanoGPT's against the eager 1.38x (23.8 against
27.7 ms) for a first step of 18.5 s, about 4,700 steps to break even, and at 6 x 384 it ran no
faster than eager (2.30x against 2.37x, one run).

Denormal floats are not flushed either: a run that makes them (AdamW at lr 1e-2 on pydoc) took 16.3
s for 300 steps, 11.6 s with torch.set_flush_denormal on, but only when it was set before torch's
worker threads existed (the switch reaches the calling thread alone), so only at process start,
for the whole process; the default Muon run makes none and takes the same time either way.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable

import torch

from .config import TRAIN_DTYPES
from .device import bf16_isa_cap, capped_bf16_units, cpu_bf16_instructions, cpu_is_arm, cpu_is_x86, native_bf16
from .errors import TrainingDiverged, UserError, is_out_of_memory

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}  # config.TRAIN_DTYPES less "auto"
PYTHON = tuple(sys.version_info[:3])  # the Python that runs (a name of its own: the tests stand for another)
COMPILERS = ("c++", "g++", "clang++")  # inductor writes C++ for the CPU (and builds launchers for GPUs)


def cpp_compilers() -> tuple[str, ...]:
    """The compilers inductor would build with here: on Windows MSVC's cl (or $CXX), the one it asks for there, so
    that a Windows laptop with Visual Studio's tools and no g++ was told "needs a C++ compiler ... none was found"."""
    if sys.platform == "win32":
        return (os.environ.get("CXX", "").strip() or "cl",)
    return COMPILERS


def fast_dtype(device) -> str:
    """The cheapest dtype for products that need only about 3 significant digits, on `device`.

    bfloat16 where the device multiplies it natively, float32 elsewhere: emulated bfloat16 is
    float32 arithmetic plus conversions, several times slower than float32 itself (five Newton-Schulz
    steps on eight 128 x 512 matrices, one thread: 55 ms against 14 ms on a Xeon without AMX or
    AVX512-BF16, 0.9-1.3 s against 75-100 ms on an AMD EPYC with AVX2). Every choice of a lower
    precision asks here (`dtype=auto`'s training forward, Muon's Newton-Schulz), so none of them is
    fast on one kind of CPU and slow on the other.
    """
    return "bfloat16" if native_bf16(device) else "float32"


def newton_schulz_dtype(dtype: str, device) -> str:
    """What Muon's Newton-Schulz runs in for a run whose dtype setting is `dtype`: float32 where the run asked for
    float32, else the cheapest dtype here (fast_dtype). `dtype=float32` is the setting for comparing runs to the last
    digit, across machines too: its orthogonalisation ran in bfloat16 on a CPU with bfloat16 units and in float32 on
    one without, so two float32 runs of one lesson differed by the machine alone."""
    return "float32" if dtype == "float32" else fast_dtype(device)


def training_dtype(dtype: str, device) -> str:
    """The dtype a training step runs in: `dtype` itself, or for "auto" what this device does natively."""
    if dtype == "auto":
        return fast_dtype(device)
    if dtype not in DTYPES:
        raise ValueError(f"unknown training dtype {dtype!r}; one of {', '.join(TRAIN_DTYPES)}")
    return dtype


def autocast(dtype: str, device) -> contextlib.AbstractContextManager:
    """The context a training forward pass runs in: nothing for float32, autocast for bfloat16."""
    dtype = training_dtype(dtype, device)
    if dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=torch.device(device).type, dtype=DTYPES[dtype])


def global_modes() -> tuple:
    """What torch keeps globally that its own context managers set and put back in Python: the gradient mode, and
    autocast's nesting level (torch has no getter: one level in and out again tells), switches and dtypes. A
    KeyboardInterrupt that lands inside one of their __exit__ leaves them as the block had them (put_back_modes)."""
    level = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    casts = tuple((device, torch.is_autocast_enabled(device), torch.get_autocast_dtype(device))
                  for device in ("cpu", "cuda"))
    return torch.is_grad_enabled(), level, casts, torch.is_autocast_cache_enabled()


def put_back_modes(modes: tuple) -> None:
    """Put back what global_modes() gave. An autocast nesting left a level too deep kept its cache of bfloat16 copies
    of the weights past every later block's end, so each later training step computed with the weights of the first."""
    grad, level, casts, cache = modes
    torch.set_grad_enabled(grad)
    now = torch.autocast_increment_nesting() - 1
    torch.autocast_decrement_nesting()
    for _ in range(now - level):
        if torch.autocast_decrement_nesting() == 0:  # what autocast's own __exit__ does at the outermost block
            torch.clear_autocast_cache()
    for device, enabled, dtype in casts:
        torch.set_autocast_enabled(device, enabled)
        torch.set_autocast_dtype(device, dtype)
    torch.set_autocast_cache_enabled(cache)


def precision_note(dtype: str, device) -> str | None:
    """One line for a person who asked for bfloat16 where dtype=auto would not pick it (native_bf16); else None.

    There bfloat16 is emulated: it saves activation memory but costs time, several times float32's on a CPU. The
    line said "likely slower than float32" where a training step of the default model ran 7x to 9x slower (AMD EPYC,
    Zen 3, AVX2 only: 314 against 2,824 tokens/s in a learner's run, 631 against 4,591 in a sixtieth session's; a
    768 x 128 by 128 x 512 product 148 ms against 1.8 ms), and a product 46x slower behind an ISA cap on a Zen 5
    (core.device.cpu_has_bf16_units). `auto` never picks it there.

    The factor it gives is those measurements, not one of this machine: none is at hand when it is said (:set, :load,
    a run's start) short of timing a product at every :set, and the one measured here, attention's bfloat16 speed
    (core.fastpath, `:device`), is of one kernel at one shape, which on CPUs with the units reads below 1x as well.
    It also stays one fixed line, which each command says once across :load, :set and :train (it is compared as
    said). GPUs without bfloat16 units were not measured: "likely slower" stays theirs.

    Off x86 none of that was measured, and AMX and AVX512-BF16 are x86's: an ARM CPU (a Graviton, a Raspberry Pi, an
    Apple M2) was told that it "has neither AMX nor AVX512-BF16" and that bfloat16 "is emulated, several times slower",
    Graviton 3 having BF16 instructions. There the line says what torch finds and that nothing was measured
    (non_x86_note). On mps it said "mps has no native bfloat16 matrix units", a claim about Apple's GPU nothing
    checks: what is known is why auto keeps float32 there (core.device.native_bf16).
    """
    if dtype == "bfloat16" and not native_bf16(device):
        kind = torch.device(device).type
        if kind == "mps":
            return ("bfloat16 autocast on mps, where autocast to bfloat16 still lacks kernels: dtype=auto picks "
                    "float32 here (compare the tokens/s)")
        if kind == "cpu" and not cpu_is_x86():
            return non_x86_note()
        where = ("this CPU has neither AMX nor AVX512-BF16" if kind == "cpu"
                 else f"{kind} has no native bfloat16 matrix units")
        units = capped_bf16_units() if kind == "cpu" else None
        if units:
            cap = bf16_isa_cap()
            # the units are there, and the environment keeps oneDNN off them: "has neither" sent a student with
            # an AMX CPU to look for another machine, where unsetting one variable was the fix
            where = f"{cap} keeps oneDNN off this CPU's {units} units (unset it to use them)"
        if kind != "cpu":
            return (f"bfloat16 autocast, but {where}: it is emulated and likely slower than float32 "
                    "(compare the tokens/s; dtype=auto picks float32 here)")
        measured = ("a 768 x 128 by 128 x 512 product ran 46x slower so capped on a Zen 5" if units else
                    "a training step ran 7x to 9x slower on an AVX2-only AMD EPYC, Zen 3")
        return (f"bfloat16 autocast, but {where}: it is emulated, several times slower than float32 ({measured}; "
                "compare the tokens/s; dtype=auto picks float32 here)")
    return None


def non_x86_note() -> str:
    """precision_note's line on a CPU that is not x86: what torch finds of its bfloat16 instructions, and that its
    bfloat16 speed against float32 was not measured (core.device.native_bf16, which keeps dtype=auto on float32)."""
    if units := cpu_bf16_instructions():
        return (f"bfloat16 autocast on a CPU with {units} instructions, not measured against float32 on ARM (compare "
                "the tokens/s; dtype=auto picks float32 here)")
    if cpu_is_arm():
        return ("bfloat16 autocast, but torch finds no bfloat16 instructions (ARM BF16) on this CPU: likely slower "
                "than float32, not measured on ARM (compare the tokens/s; dtype=auto picks float32 here)")
    return ("bfloat16 autocast on a CPU whose bfloat16 speed against float32 was not measured (compare the tokens/s; "
            "dtype=auto picks float32 here)")


def compile_module(model: torch.nn.Module) -> tuple[torch.nn.Module | None, str | None]:
    """(torch.compile(model), None), or (None, the one line that says why it cannot be compiled here).

    torch.compile is lazy: most failures come at the first call, which the trainer catches
    (`is_compile_failure`). What can be known before, is checked here.
    """
    compilers = cpp_compilers()
    if not any(shutil.which(c) for c in compilers):
        # each line gives its fix, both ways: the compiler to install (or the prompt that has it), or compile=off,
        # which a learner who only tried the switch wants (the line said what was missing and no way on)
        if sys.platform == "win32":  # cl is on the PATH only in the prompt Visual Studio's Build Tools open
            return None, (f"torch.compile needs a C++ compiler ({compilers[0]}: Visual Studio's cl, in its Developer "
                          "Command Prompt) and none was found; start minitf in that prompt, or set compile=off; "
                          "training eagerly")
        return None, (f"torch.compile needs a C++ compiler ({', '.join(compilers[:-1])} or {compilers[-1]}) and none "
                      "was found; install one (e.g. g++), or set compile=off; training eagerly")
    keep_capped_kernels_apart()
    try:
        return torch.compile(model), None
    except Exception as e:  # e.g. "not supported on Python 3.x", a missing backend
        return None, compile_failure_line(e)


def compiling_line(dtype: str, device, again: str | None = None) -> str:
    """What a run says as it starts to compile (compile=on), before the seconds the compile takes (core.train asks
    torch whether a step compiles: run_compiled).

    That step ran 20 s to nearly two minutes on a 2-core AMD EPYC (Zen 3) under a bar at "0/60 eta -:--:--" and no
    word, or in a log nothing at all: it reads as a hang. Where the run is float32 on a CPU it says too that compiling
    gains a few per cent at most there (this module's docstring, docs/speed.md), so that a learner who turned it on
    for speed knows the wait buys little. `again`: a compile after an earlier one, and why, in words that follow
    "compiling the model again, " ("as the batch size (4 -> 8) changed since ...": core.train words it)."""
    if again:
        line = f"compiling the model again, {again}: this step takes seconds to minutes"
    else:
        line = ("compiling the model (compile=on): the first step takes seconds to minutes, the steps after it reuse "
                "the compiled code")
    if hasattr(signal, "pthread_sigmask"):  # compilers_deaf_to_ctrl_c: "stopping after this step" waits for the step
        line += "; a Ctrl-C meanwhile stops the run once the compile ends"
    if torch.device(device).type == "cpu" and training_dtype(dtype, device) == "float32":
        line += ("; in float32 on a CPU the compiled steps run a few per cent faster at most, too little to win "
                 "that time back in most runs (compile=off skips the compile)")
    return line


# Why compile=on compiles again after an earlier compile, where core.train knows it before the step (the words after
# "compiling the model again, "); a recompile of torch's own (a guard that failed: a batch size changed) is worded
# where it is heard (core.train), from what the step's input and settings were
PATH_CHANGED = ("as the path a step runs through changed since it was compiled (fast_path, a view's hooks, or "
                "torchrun's wrapper made anew)")
AFTER_STOP = "as the last compile was stopped before it ended"
AFTER_FAILURE = "trying once more after the last compile failed (compile was switched on again)"
# said where a compile failed while a stop (Ctrl-C) was asked: its compilers died of that SIGINT (one sent to their
# process group where compilers_deaf_to_ctrl_c could not hold it back), and the compile failed with "CppCompileError:
# C++ compile error", which blamed the compiler and switched compile off
COMPILE_STOPPED = ("stopped while compiling the model, before the step was done: compile stays on, and the next run "
                   "compiles again (compile=off trains without compiling)")


def forget_compiled() -> None:
    """Drop what torch's compiler front end (dynamo) keeps in this process of its compiles, so that the next compile
    traces afresh (torch.compiler.reset: "as if a fresh process" for dynamo); the on-disk cache is kept.

    Called where a compile failed or was stopped. Inductor's in-memory cache of C++ builds is not reached: it has no
    public way in (torch._inductor's clear_caches is private, and this package imports no private module), and a
    build killed half-way stays there as a failed one, which fails that kernel's every later compile in the process.
    Ctrl-C, the way a person kills one, no longer reaches the compilers (compilers_deaf_to_ctrl_c); another kill of
    them leaves a compile that fails again, with its line, until a new process."""
    try:
        torch.compiler.reset()
    except Exception:  # a clean-up after a failure never raises a second error over it: at worst the next compile
        pass  # fails as this one did, and its own line says so


@contextlib.contextmanager
def compilers_deaf_to_ctrl_c():
    """Around a compiled step: Ctrl-C (SIGINT) blocked in this thread, so that the C++ compilers a compile starts from
    it, or from the worker threads it starts, inherit it blocked (fork and execve keep a signal mask) and finish their
    build. The process still hears it: through another of its threads at once (Python runs the handler in the main
    thread), else as the block ends. The stop comes after the step, as every Ctrl-C of a run does, with the compiled
    code kept.

    Why: the terminal sends Ctrl-C to every process of its foreground group, inductor's g++ and cc1plus too, started
    with no way to put them in a group of their own short of patching subprocess for the whole process. Killed, a
    compile failed as "CppCompileError: C++ compile error", which blamed the compiler and switched compile off; the
    killed build stayed in inductor's memory, a failure of every later compile of the process (forget_compiled); one
    killed as it linked left its .so truncated in the on-disk cache ("file too short"), a failure in the next
    process too. Waiting for a compile costs the seconds it has left; no cut in it is clean. Not on Windows, which
    has no signal masks."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)  # a SIGINT held back is delivered here


def tells_compiles(module) -> bool:
    """Whether `module` is torch.compile's own wrapper (it holds the module as _orig_mod, as core.model reads it), whose
    compiles run_compiled can tell; a stand-in (a test's) is taken to compile at its first step instead."""
    return isinstance(module, torch.nn.Module) and hasattr(module, "_orig_mod")


# the stance run_compiled tries a step under, which torch's error names
RECOMPILE_STANCE = "fail_on_recompile"


def run_compiled(call: Callable[[], object], before_compile: Callable[[], None]) -> tuple[object, bool]:
    """(call(), whether torch compiled in it), for a call through torch.compile's wrapper (tells_compiles).

    The call is tried first under the stance "fail_on_recompile" (torch.compiler.set_stance, public), at which torch
    raises where it would compile, the first time as every time after (a guard that failed: a batch size, dropout or
    the dtype changed since): where it raises, `before_compile()` is called (what says so, before the seconds it
    takes, and puts back what the try drew) and the call made again, compiling. Torch decides when it compiles: a
    batch size it saw twice may be compiled for any size by then (dynamic shapes), and after :load a new wrapper
    reused the code compiled for the old one; a guess from what changed announced a compile that took 0.0 s and
    missed the 56 s one after `:set batch_size`. A try that fails for another reason raises as it is: it had been
    tried again, after a false "compiling the model again" line, so an out-of-memory step ran twice and was timed as
    a compile."""
    try:
        with torch.compiler.set_stance(RECOMPILE_STANCE):
            return call(), False
    except RuntimeError as e:  # torch's "Detected recompile when torch.compile stance is 'fail_on_recompile'. ...",
        if RECOMPILE_STANCE not in str(e):  # told by no type of its own, but always by the stance's name
            raise
    before_compile()
    return call(), True


def compile_advice() -> str | None:
    """Before a compile under Python 3.13.0: the one line that says its compiled steps run slower there, and why;
    else None. torch says it as a RuntimeWarning on standard error ("Guards may run slower on Python 3.13.0"),
    with its file and line, through the progress bar: true advice, said here once, in the lab's words, and
    torch's own warning filtered out (by its words: the switch for it is in a private module of torch's)."""
    if PYTHON != (3, 13, 0):
        return None
    warnings.filterwarnings("ignore", message="Guards may run slower on Python 3.13.0", category=RuntimeWarning)
    return ("compile=on under Python 3.13.0: the compiled steps check their guards the slow way there (a bug of "
            "3.13.0, fixed in 3.13.1), so they gain less; Python 3.13.1 or newer compiles them faster")


def keep_capped_kernels_apart() -> str | None:
    """Where ATEN_CPU_CAPABILITY caps ATen's kernels and no inductor cache is set, give the compiled kernels
    a cache directory of that cap's own; returns the directory it chose, or None.

    Inductor's cache key leaves the cap out (torch 2.13). Kernels built without it and loaded under
    it gave a NaN loss at the first step, and the other way round crashed the process (a Zen 5 with
    ATEN_CPU_CAPABILITY=avx2, the default model at batch 12); each works from an empty cache.
    """
    cap = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if not cap or os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        return None
    try:
        user = getpass.getuser()
    except Exception:  # no user name to be had (a container without one): the uid will do
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    directory = os.path.join(tempfile.gettempdir(), f"torchinductor_{user}_{cap}")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = directory  # inductor reads it at its first compile
    return directory


def compile_failure_line(exc: BaseException) -> str:
    """What a failed compile says: the error's type and first line, and that training goes on eagerly. Where the error
    is a warning that a warning filter made one (`-W error`, PYTHONWARNINGS=error), that filter and its fix: the
    warning's own words alone sent a student to torch's deprecations, where unsetting the filter compiles."""
    warning = raised_warning(exc)
    lines = [line.strip() for line in str(exc if warning is None else warning).splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if len(first) > 160:
        first = first[:157] + "..."
    if warning is not None:  # its own words, not those of an error torch wrapped it in
        where, fix = warning_filter()
        return (f"torch.compile failed here: a warning filter ({where}) turned a {type(warning).__name__} raised while "
                f"compiling into an error ({first}); {fix} to compile; training eagerly")
    if (folder := unwritable_cache(exc)) is not None:
        # "(NotADirectoryError: ... '/tmp/x/afile/sub')" named a path and not the variable that put it there
        return (f"torch.compile failed here ({type(exc).__name__}: {first}): it keeps its compiled kernels in "
                f"TORCHINDUCTOR_CACHE_DIR={folder}, which it cannot make or write; start minitf again with that "
                "variable set to a folder you can write (or unset: torch's own folder in the temporary folder), or "
                "set compile=off; training eagerly")
    return f"torch.compile failed here ({type(exc).__name__}: {first}); training eagerly"


def unwritable_cache(exc: BaseException) -> str | None:
    """The folder of TORCHINDUCTOR_CACHE_DIR where `exc` is, or was raised from, an OSError on a path inside it (a
    file where a folder should be, no permission); None: none such. torch puts its default folder into the variable
    at its first compile (cache_dir_utils.cache_dir), so an unset one is named too, as the variable's folder it is."""
    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR", "").strip()
    if not folder:
        return None
    inside = os.path.abspath(folder)
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        for path in (getattr(exc, "filename", None), getattr(exc, "filename2", None)):
            if isinstance(exc, OSError) and isinstance(path, str) and path:
                path = os.path.abspath(path)
                if path == inside or path.startswith(inside.rstrip(os.sep) + os.sep):
                    return folder
        exc = exc.__cause__ or exc.__context__
    return None


def raised_warning(exc: BaseException) -> Warning | None:
    """The warning `exc` is, or was raised from (torch may wrap it in an error of its own); None: no warning's."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, Warning):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def warning_filter() -> tuple[str, str]:
    """(where, how to lift it) of the warning filter that turns warnings into errors in this process: the
    environment's (PYTHONWARNINGS, which Python copies into sys.warnoptions too), the command line's (-W), else one the
    program set itself (warnings.filterwarnings). Only an entry whose action is `error` is blamed: one that ignores
    warnings (PYTHONWARNINGS=ignore::DeprecationWarning) was told to go where another filter made the error. The fix
    is a start without it: a running minitf cannot unset its own environment."""
    environment = [entry for entry in os.environ.get("PYTHONWARNINGS", "").split(",") if _raises(entry)]
    if environment:
        value = ",".join(entry.strip() for entry in environment)
        return f"PYTHONWARNINGS={value}", f"start minitf again without PYTHONWARNINGS={value}"
    options = list(sys.warnoptions)
    for entry in os.environ.get("PYTHONWARNINGS", "").split(","):  # the environment's, copied there: not -W's
        if entry.strip() in options:
            options.remove(entry.strip())
    if given := [option for option in options if _raises(option)]:
        flags = " ".join(f"-W {option}" for option in given)
        return f"python {flags}", f"start minitf again without {flags}"
    return 'warnings.filterwarnings("error") in this program', "leave compile warnings out of that filter"


def _raises(entry: str) -> bool:
    """Whether a warning filter's entry (`action:message:category:module:lineno`) turns warnings into errors: its
    action is `error`, which Python takes from any start of the word (`e`, `err`)."""
    action = entry.split(":", 1)[0].strip()
    return bool(action) and "error".startswith(action)


def is_compile_failure(exc: BaseException) -> bool:
    """Whether an error raised through the compiled model is the compiler's, not the step's own.

    A divergence, a user's mistake and running out of memory are the step's: eager would raise
    them too, so they pass through. Anything else is retried eagerly, which re-raises a real bug.
    """
    if isinstance(exc, (TrainingDiverged, UserError)) or not isinstance(exc, Exception):
        return False
    return not is_out_of_memory(exc)
