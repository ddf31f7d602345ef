"""Which device the model runs on: parse a user's name for it, list what this machine has, move there.

Everything that asks torch about GPUs is guarded: on a machine without CUDA or MPS (or with a
broken driver) these functions still answer, and a device the user asks for but cannot have is a
`DeviceError` that lists what is available, never a RuntimeError from deep inside torch.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from dataclasses import dataclass

import torch

from .errors import DeviceError, DeviceUnavailable
from .words import count

from .device_names import ACCEPTED_FORMS, DEVICE_NAME as _DEVICE_NAME  # noqa: F401  (names read from here too)


def has_float64(device: torch.device | str) -> bool:
    """Whether tensors on `device` can be float64: Apple's GPU (MPS) has no float64, and `.double()` there raises."""
    return torch.device(device).type != "mps"


def in_float64(t: torch.Tensor) -> torch.Tensor:
    """`t`, detached, in float64: on its own device where that has float64, else on the CPU. The views that work a
    sum out in float64 read it through this, so that they run on a Mac's GPU too."""
    return t.detach().to(t.device if has_float64(t.device) else "cpu", torch.float64)


def _cuda_count() -> int:
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # a broken driver reads as "no GPU", not as a crash
        return 0


def _mps_available() -> bool:
    try:
        mps = getattr(torch.backends, "mps", None)
        return bool(mps is not None and mps.is_available())
    except Exception:
        return False


def mps_here() -> bool:
    """Whether this machine has an Apple GPU (MPS), whose random stream draws a Mac run's dropout masks."""
    return _mps_available()


def available_device_names() -> list[str]:
    """Names `resolve_device` accepts on this machine, besides "auto": e.g. ["cpu", "cuda:0"]."""
    names = ["cpu"] + [f"cuda:{i}" for i in range(_cuda_count())]
    if _mps_available():
        names.append("mps")
    return names


def resolve_device(name: str = "auto") -> torch.device:
    """Turn a user's device name into a torch.device that exists here.

    "auto" picks the fastest available: CUDA, then MPS, then CPU. Names are case-insensitive and
    may carry surrounding spaces, since they come from a command line.
    """
    text = name.strip().lower() if isinstance(name, str) else None
    match = _DEVICE_NAME.match(text) if text else None
    if match is None or (match.group(2) is not None and match.group(1) != "cuda"):
        raise DeviceError(f"unknown device {name!r}; use one of {ACCEPTED_FORMS}")
    kind, index = match.group(1), match.group(2)
    available = ", ".join(available_device_names())

    if kind == "auto":
        if _cuda_count() > 0:
            return resolve_device("cuda")
        return torch.device("mps") if _mps_available() else torch.device("cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if kind == "mps":
        if not _mps_available():
            raise DeviceUnavailable(f"device {text!r} is not available here (no Apple MPS backend); available: "
                                    f"{available}")
        return torch.device("mps")

    n_gpus = _cuda_count()
    if n_gpus == 0:
        raise DeviceUnavailable(f"device {text!r} is not available here (no CUDA GPU found); available: {available}")
    if index is None:
        # Plain "cuda" means the current GPU; spelling out its index makes `param.device == device` hold.
        try:
            return torch.device("cuda", torch.cuda.current_device())
        except Exception:
            return torch.device("cuda", 0)
    if int(index) >= n_gpus:
        raise DeviceUnavailable(f"device {text!r} is not available here (only {count(n_gpus, 'CUDA GPU')}); "
                          f"available: {available}")
    return torch.device("cuda", int(index))


@dataclass
class DeviceInfo:
    name: str  # what `resolve_device` accepts: "cpu", "cuda:0", "mps"
    kind: str  # cpu | cuda | mps
    # the device in words: a CPU's model and cores, a GPU's name; "unusable: ..." where it cannot be used
    description: str
    memory_bytes: int | None  # total memory, None where it cannot be read
    # dtype=auto trains in bfloat16 here: units that multiply bfloat16 natively and were measured to pay (AMX or
    # AVX512-BF16, a GPU from the A100 on); an ARM CPU's BF16 instructions are not counted (core.device.native_bf16)
    bf16: bool
    available: bool  # it can be used here (False: a GPU the driver lists that fails to open; description says why)


def cpu_has_bf16_units() -> bool:
    """Whether this CPU multiplies bfloat16 matrices in hardware, on units dtype=auto trains in bfloat16 on: an x86
    CPU's AMX tiles or AVX512-BF16 instructions. An ARM CPU's BF16 instructions are not counted (native_bf16 says
    why; cpu_bf16_instructions names them).

    Without them bfloat16 is emulated in float32 arithmetic plus conversions, several times slower than
    float32 (a training step 7x to 9x on an AVX2-only Zen 3: core.precision.precision_note).
    Units that ONEDNN_MAX_CPU_ISA keeps oneDNN from using count as absent: torch's bfloat16 products
    run in oneDNN, and capped below AVX512_CORE_BF16 they took 46x a float32 product's time on a
    Zen 5 (768 x 128 by 128 x 512: 5.8 ms against 0.13 ms uncapped).
    """
    return cpu_bf16_units() is not None and bf16_isa_cap() is None


# oneDNN's instruction sets below AVX512_CORE_BF16 (its cpu_isa_t, oldest first; the MIC ones are
# Xeon Phi's). AVX2_VNNI_2 converts bfloat16 but has no bfloat16 dot product. A name not listed here,
# a newer set or ALL, leaves the bfloat16 units in use.
_BELOW_BF16_ISAS = ("SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_MIC", "AVX512_MIC_4OPS",
                    "AVX512_CORE", "AVX512_CORE_VNNI")
# What caps the instruction sets torch's kernels use, read once at start: oneDNN's (DNNL_ is its old
# spelling), ATen's own vectorised kernels, and MKL's products.
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


def bf16_isa_cap() -> str | None:
    """"ONEDNN_MAX_CPU_ISA=AVX2" where the environment keeps oneDNN below bfloat16 instructions, else None."""
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        # as oneDNN reads it, not stripped: it ignores " AVX2 " and runs AMX, where a stripped reading said bf16 no
        # and dtype=auto gave native bfloat16 up for float32
        value = os.environ.get(name, "")
        if value:  # oneDNN reads the first of the two that is set
            return f"{name}={value}" if value.upper() in _BELOW_BF16_ISAS else None
    return None


def capped_bf16_units() -> str | None:
    """The bfloat16 units ("AMX", "AVX512-BF16") this CPU has and an ISA cap keeps oneDNN off, else None."""
    return cpu_bf16_units() if bf16_isa_cap() else None


def isa_caps() -> list[str]:
    """The ISA_CAPS set in this environment, as NAME=value: a benchmark line says what its kernels could use."""
    return [f"{name}={os.environ[name].strip()}" for name in ISA_CAPS if os.environ.get(name, "").strip()]


def native_bf16(device: torch.device | str) -> bool:
    """Whether bfloat16 matrix products run natively on `device` (what `dtype=auto` asks, core.precision).

    A CUDA GPU with bfloat16 units (compute capability 8.0 or newer), a CPU with AMX or AVX512-BF16.
    Apple's GPUs answer no: autocast to bfloat16 there still lacks kernels, so auto keeps float32.

    An ARM CPU with BF16 instructions (Graviton 3 and 4, Apple M2 and later: cpu_bf16_instructions) answers no as
    well, a decision rather than a measurement: nobody here has timed a bfloat16 training step against float32 on
    one. torch does hand its bfloat16 products to oneDNN there, but a step is more than its products (autocast's
    conversions, attention, whose bfloat16 backward ran 5x slower than float32's on an x86 CPU: core.fastpath), and
    on an x86 CPU without the units bfloat16 cost 7x to 9x a step (core.precision.precision_note). So dtype=auto and
    Muon's Newton-Schulz stay float32 on ARM until a benchmark there says otherwise; dtype=bfloat16 runs it, and
    :device and precision_note say so without calling it emulated.
    """
    device = torch.device(device)
    return _native_bf16(device.type, device.index)


@functools.lru_cache(maxsize=None)
def _native_bf16(kind: str, index: int | None) -> bool:  # asked at every training step: the hardware stays put
    if kind == "cpu":
        return cpu_has_bf16_units()
    if kind == "cuda":
        return _cuda_info(0 if index is None else index).bf16
    return False


def cpu_name() -> str:
    """The processor's model name and, where cpuinfo's numbers tell, its generation: "AMD EPYC (Zen 5)".

    Cloud machines often report a bare "AMD EPYC" or "Intel(R) Xeon(R) Processor", and generations of
    one name differ in what decides this lab's speed (a Zen 3 has AVX2 alone and no bfloat16 units, a
    Zen 4 runs AVX-512 at half width, a Zen 5 at full width), so a benchmark line must say which. Off Linux
    (no /proc) the name comes from torch's own reading of the processor (cpuinfo's, on every system), then from
    the machine type.
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            name, generation = read_cpuinfo(f.read())
    except OSError:
        name, generation = "", None
    if not name:
        # platform.processor() says "arm" on an Apple silicon Mac and "Intel64 Family 6 Model 154 Stepping 3,
        # GenuineIntel" on Windows: :device named the first "arm, 8 cores"; torch's reading says "Apple M2". On ARM
        # Linux torch names the chip only where /proc/cpuinfo's "Hardware" line names one it knows (its cpuinfo
        # library: a phone's or a Raspberry Pi's, "" on an ARM server), so the core from cpuinfo comes next.
        name = torch_cpu_name() or generation or ""
    if not name:
        try:
            name = platform.processor() or platform.machine() or "CPU"
        except Exception:
            name = "CPU"
    return f"{name} ({generation})" if generation and generation not in name else name


def torch_cpu_name() -> str:
    """The processor's name as torch reads it (its cpuinfo library: the brand string on Windows and macOS), "" where
    this torch cannot say (get_capabilities is newer than the oldest torch minitf runs on)."""
    try:
        name = torch.cpu.get_capabilities().get("cpu_name", "")
    except Exception:
        return ""
    return " ".join(name.split()) if isinstance(name, str) else ""


# x86 generations by vendor, family and model ranges, as Linux's arch/x86/kernel/cpu tables sort them.
# Only the ones a lab user is likely to meet; an unknown pair names no generation rather than a wrong one.
_GENERATIONS = {
    ("AuthenticAMD", 0x17): ((0x00, 0x2F, "Zen"), (0x30, 0xAF, "Zen 2")),
    ("AuthenticAMD", 0x19): ((0x00, 0x0F, "Zen 3"), (0x10, 0x1F, "Zen 4"), (0x20, 0x5F, "Zen 3"),
                             (0x60, 0xAF, "Zen 4")),
    ("AuthenticAMD", 0x1A): ((0x00, 0x2F, "Zen 5"), (0x40, 0x4F, "Zen 5"), (0x60, 0x7F, "Zen 5")),
    ("GenuineIntel", 6): ((0x55, 0x55, "Skylake or Cascade Lake"), (0x6A, 0x6C, "Ice Lake"),
                          (0x8F, 0x8F, "Sapphire Rapids"), (0xAD, 0xAE, "Granite Rapids"),
                          (0xCF, 0xCF, "Emerald Rapids")),
}


# ARM cores by implementer and part, as /proc/cpuinfo gives them in hex ("CPU implementer : 0x41", "CPU part : 0xd40";
# Linux's arch/arm64/include/asm/cputype.h lists them): an ARM Linux /proc/cpuinfo has no "model name", so these are
# all it says of the processor (:device said "aarch64"). The common ones only; an unknown part names none.
ARM_CORES = {
    (0x41, 0xD03): "ARM Cortex-A53", (0x41, 0xD05): "ARM Cortex-A55", (0x41, 0xD07): "ARM Cortex-A57",
    (0x41, 0xD08): "ARM Cortex-A72", (0x41, 0xD0B): "ARM Cortex-A76", (0x41, 0xD0C): "ARM Neoverse N1",
    (0x41, 0xD40): "ARM Neoverse V1", (0x41, 0xD41): "ARM Cortex-A78", (0x41, 0xD49): "ARM Neoverse N2",
    (0x41, 0xD4F): "ARM Neoverse V2", (0x41, 0xD84): "ARM Neoverse V3",
}
# A 32-bit ARM kernel's "model name" ("ARMv7 Processor rev 3 (v7l)"): the instruction set, not the processor
_ARM_ISA_NAME = re.compile(r"ARMv\d+ Processor\b")
# A Raspberry Pi's board ("Model : Raspberry Pi 4 Model B Rev 1.4"), in a block of its own after all the processors'
_BOARD = re.compile(r"^Model\s*:[ \t]*(\S.*?)\s*$", re.MULTILINE)


def read_cpuinfo(text: str) -> tuple[str, str | None]:
    """The first processor's model name in /proc/cpuinfo's text, and its generation if known (_GENERATIONS); on ARM,
    the board's name where the text gives one (a Raspberry Pi's), and the core as the generation (ARM_CORES)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough: all cores of a machine are one kind
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "")
    if "CPU implementer" in fields:  # ARM: x86's blocks have no such key
        return _read_arm_cpuinfo(text, fields, name)
    try:
        family, model = int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        return name, None
    for low, high, generation in _GENERATIONS.get((fields.get("vendor_id", ""), family), ()):
        if low <= model <= high:
            return name, generation
    return name, None


def _read_arm_cpuinfo(text: str, fields: dict[str, str], name: str) -> tuple[str, str | None]:
    """read_cpuinfo's answer for an ARM CPU, whose first block is `fields`: the board (after every processor's
    block, which is why the whole text is searched) or else a model name that names more than the instruction set,
    and the core."""
    try:
        core = ARM_CORES.get((int(fields["CPU implementer"], 16), int(fields.get("CPU part", ""), 16)))
    except ValueError:
        core = None
    board = _BOARD.search(text)
    if board:
        name = board.group(1)
    elif _ARM_ISA_NAME.match(name):
        name = ""  # cpu_name then asks torch and the core
    return name, core


def cpu_bf16_units() -> str | None:
    """Which x86 bfloat16 units this CPU has: "AMX" (with or without AVX512-BF16), "AVX512-BF16", or None (an ARM CPU's
    are cpu_bf16_instructions')."""
    try:
        if torch.cpu._is_amx_tile_supported():
            return "AMX"
        return "AVX512-BF16" if torch.cpu._is_avx512_bf16_supported() else None
    except Exception:  # a torch without these probes, or a CPU it cannot read: assume the plain case
        return None


# platform.machine() of x86 and ARM processors (Linux, macOS and Windows spell them differently)
X86_MACHINES = ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86")
ARM_MACHINES = ("aarch64", "arm64", "aarch64_be", "armv8l", "armv8b", "armv7l", "arm")


def cpu_is_x86() -> bool:
    """Whether this is an x86 CPU, the kind whose bfloat16 units (AMX, AVX512-BF16) and slow emulated bfloat16 minitf
    has measured, and so may name. Where platform cannot say: no, so that nothing claims them."""
    try:
        return platform.machine().lower() in X86_MACHINES
    except Exception:
        return False


def cpu_is_arm() -> bool:
    """Whether this is an ARM CPU (ARM Linux, Apple silicon)."""
    try:
        return platform.machine().lower() in ARM_MACHINES
    except Exception:
        return False


def cpu_bf16_instructions() -> str | None:
    """"ARM BF16" where this is an ARM CPU with the BF16 instructions (BFDOT, BFMMLA: Graviton 3 and 4, Neoverse V1 and
    later, Apple M2 and later), as torch reads them; else None. dtype=auto does not train on them (native_bf16).

    Asked of torch two ways, both its cpuinfo library's reading: oneDNN's bfloat16 check, which on ARM is whether
    the CPU has BF16 (and is what routes torch's bfloat16 products to oneDNN there), and torch.cpu's capabilities,
    whose "bf16" key a torch without oneDNN still has. On x86 the oneDNN check means something else (AVX512 that can
    convert bfloat16), so it is asked on ARM alone."""
    if not cpu_is_arm():
        return None
    try:
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return "ARM BF16"
    except Exception:  # a torch built without oneDNN, or older than the op
        pass
    try:
        capabilities = torch.cpu.get_capabilities()
    except Exception:  # older than torch.cpu.get_capabilities
        return None
    return "ARM BF16" if capabilities.get("bf16") or capabilities.get("sve_bf16") else None


def cpu_kind() -> str:
    """One line for benchmark output and notes: the model and generation, the cores, and which bfloat16 units."""
    from .threads import cores_in_words

    cores = cores_in_words()  # as :device's table and the thread count say them (this said "1 cores", "None cores")
    if cpu_has_bf16_units():  # asked first: the tests patch this answer to stand for the other kind
        bf16 = f"native bfloat16 ({cpu_bf16_units() or 'AMX or AVX512-BF16'})"
    elif bf16_isa_cap() and cpu_bf16_units():
        bf16 = f"no native bfloat16 (its {cpu_bf16_units()} units capped off)"
    elif cpu_bf16_instructions():  # as :device says it: the instructions are there, auto does not train on them
        bf16 = f"{cpu_bf16_instructions()} instructions (dtype=auto keeps float32 on them, unmeasured)"
    else:
        bf16 = "no native bfloat16"
    caps = isa_caps()
    return f"{cpu_name()}, {cores}, {bf16}" + (f", instruction sets capped: {' '.join(caps)}" if caps else "")


def _cpu_info() -> DeviceInfo:
    from .threads import cores_in_words

    # the machine's cores and, where fewer, those this process may use (taskset, a cpuset, a CPU quota), as the
    # threads line below the table counts them; torch's threads: :device's own line
    description = f"{cpu_name()}, {cores_in_words()}"
    memory = None
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not on Windows, or not reported
        pass
    return DeviceInfo("cpu", "cpu", description, memory, bf16=cpu_has_bf16_units(), available=True)


def _cuda_info(i: int) -> DeviceInfo:
    name = f"cuda:{i}"
    try:
        description = torch.cuda.get_device_name(i)
        memory = torch.cuda.get_device_properties(i).total_memory
    except Exception as exc:  # listed by the driver but unusable: show why instead of failing
        return DeviceInfo(name, "cuda", f"unusable: {exc}", None, bf16=False, available=False)
    try:
        # is_bf16_supported() asks about the current device, so make device i current for the question.
        with torch.cuda.device(i):
            bf16 = torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # older torch without the including_emulation argument
        bf16 = torch.cuda.get_device_capability(i)[0] >= 8
    except Exception:
        bf16 = False
    return DeviceInfo(name, "cuda", description, memory, bf16=bool(bf16), available=True)


def _mps_info() -> DeviceInfo:
    memory = None
    try:
        memory = int(torch.mps.recommended_max_memory())
    except Exception:
        pass
    # The bf16 column is what dtype=auto goes by (native_bf16), as for the CPU and CUDA. It said yes wherever a bfloat16
    # tensor could be made (macOS 14), under "training on mps runs in float32 (dtype=auto: bfloat16 where the bf16
    # column says yes)".
    return DeviceInfo("mps", "mps", "Apple GPU (Metal Performance Shaders)", memory, bf16=native_bf16("mps"),
                      available=True)


def describe_devices() -> list[DeviceInfo]:
    """Every device this machine offers, CPU first. Never raises, with or without GPUs."""
    devices = [_cpu_info()]
    devices += [_cuda_info(i) for i in range(_cuda_count())]
    if _mps_available():
        devices.append(_mps_info())
    return devices


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Move the optimizer's per-parameter state (e.g. AdamW's exp_avg, exp_avg_sq) to `device`.

    Follows torch's own rule from `Optimizer.load_state_dict`: the `step` counter stays where it
    is (a CPU scalar, so reading it never syncs with the GPU) unless the param group is `fused` or
    `capturable`, in which case it lives on the parameter's device as float32.
    """
    device = torch.device(device)
    group_of = {id(p): group for group in optimizer.param_groups for p in group["params"]}
    for param, state in optimizer.state.items():
        group = group_of.get(id(param), {})
        step_on_device = bool(group.get("fused") or group.get("capturable"))
        for key, value in state.items():
            if not isinstance(value, torch.Tensor):
                continue
            if key == "step":
                if step_on_device:
                    state[key] = value.to(device=device, dtype=torch.float32)
            else:
                state[key] = value.to(device)


def move_to(model: torch.nn.Module, optimizer: torch.optim.Optimizer | None, device: torch.device | str) -> None:
    """Move a model and its optimizer together, so the next step finds params and state in one place."""
    model.to(device)
    if optimizer is not None:
        move_optimizer_state(optimizer, device)
