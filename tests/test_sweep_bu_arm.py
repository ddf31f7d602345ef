"""Sweep bu: ARM CPUs and builds without MKL, simulated on this machine by patching what minitf asks (the machine's
type, torch's cpuinfo readings, its build settings, /proc/cpuinfo). On a Graviton or an Apple M2 minitf said that
bfloat16 "is emulated" because the CPU "has neither AMX nor AVX512-BF16" (x86's units); it credited every float32
product to MKL, which a Mac's and an ARM Linux torch do not have; and it named an ARM Linux CPU "aarch64". Each test
failed before its fix."""

from __future__ import annotations

import builtins
import io
import platform

import pytest
import torch

from minitf_repl.core import device, fastpath
from minitf_repl.core.precision import newton_schulz_dtype, precision_note, training_dtype
from minitf_repl.dispatch import to_json

from test_commands import run, tiny_session
from test_render import plain

# What an ARM CPU has none of, and what no line may claim there
X86_WORDS = ("emulated", "AMX", "AVX512")


@pytest.fixture
def arm(monkeypatch):
    """An ARM Linux machine as minitf sees it; arm(bf16=True) gives its CPU the BF16 instructions (a Graviton 3)."""

    def make(bf16: bool):
        monkeypatch.setattr(platform, "machine", lambda: "aarch64")
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"architecture": "arm64", "cpu_name": "",
                                                                     "bf16": bf16, "sve_bf16": bf16})
        monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: bf16)
        for name in device.ISA_CAPS:
            monkeypatch.delenv(name, raising=False)
        device._native_bf16.cache_clear()  # conftest clears it after the test too

    return make


# --- 1. bfloat16 on ARM --------------------------------------------------------------------------------------------
def test_an_arm_cpu_with_bf16_is_told_so_and_auto_keeps_float32(arm):
    arm(bf16=True)
    assert device.cpu_bf16_instructions() == "ARM BF16"
    # the decision (core.device.native_bf16): not measured on ARM, so auto and Newton-Schulz stay float32
    assert training_dtype("auto", "cpu") == "float32" and newton_schulz_dtype("auto", "cpu") == "float32"
    line = precision_note("bfloat16", "cpu")
    assert "ARM BF16" in line and "not measured" in line and not any(w in line for w in X86_WORDS), line
    s = tiny_session()
    result = run(s, ":device")
    assert result.cpu_bf16_instructions == "ARM BF16" and to_json(result)["cpu_bf16_instructions"] == "ARM BF16"
    assert not result.devices[0].bf16  # the column is what dtype=auto goes by, and a line says why it says no
    assert "this CPU has ARM BF16 instructions; bf16 says no as dtype=auto keeps float32 on ARM" in plain(result, 200)
    run(s, ":set dtype=bfloat16")
    shown = plain(run(s, ":device"), 300)
    assert "dtype=bfloat16: bfloat16 autocast on a CPU with ARM BF16 instructions" in shown
    assert not any(w in shown for w in X86_WORDS), shown


def test_an_arm_cpu_without_bf16_is_not_told_of_x86_units(arm):
    arm(bf16=False)
    assert device.cpu_bf16_instructions() is None
    line = precision_note("bfloat16", "cpu")
    assert "no bfloat16 instructions (ARM BF16)" in line and not any(w in line for w in X86_WORDS), line
    assert run(tiny_session(), ":device").cpu_bf16_instructions is None


def test_x86_keeps_its_measured_line_and_never_asks_the_arm_probe(monkeypatch):
    """On x86 oneDNN's bfloat16 check means AVX512 that converts bfloat16: it must not read as ARM BF16."""
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", lambda: True)
    monkeypatch.setattr(device, "cpu_has_bf16_units", lambda: False)
    monkeypatch.setattr(device, "capped_bf16_units", lambda: None)
    device._native_bf16.cache_clear()
    assert device.cpu_bf16_instructions() is None
    assert "this CPU has neither AMX nor AVX512-BF16: it is emulated" in precision_note("bfloat16", "cpu")


def test_mps_is_not_told_a_hardware_claim_nothing_checks():
    line = precision_note("bfloat16", "mps")  # auto never picks bfloat16 on mps (native_bf16)
    assert "no native bfloat16 matrix units" not in line and "emulated" not in line, line
    assert "autocast to bfloat16 still lacks kernels" in line and "dtype=auto picks float32" in line


# --- 2. the library of torch's own float32 products ----------------------------------------------------------------
@pytest.fixture
def build(monkeypatch):
    """A torch build: with MKL or without, and the BLAS_INFO its build settings give (None: none said)."""

    def make(mkl: bool, blas: str | None):
        monkeypatch.setattr(torch.backends.mkl, "is_available", lambda: mkl)
        settings = "  - Build settings: BUILD_TYPE=Release, " + (f"BLAS_INFO={blas}, " if blas else "") + "USE_MKL=OFF"
        monkeypatch.setattr(torch.__config__, "show", lambda: settings)

    return make


@pytest.mark.parametrize("mkl, blas, named", [
    (True, "mkl", "MKL"), (False, "accelerate", "Accelerate"), (False, "open", "OpenBLAS"),
    (False, None, "torch's own"), (False, "mkl", "torch's own"), (False, "something", "torch's own"),
])
def test_torch_products_name_the_library_torch_has(build, mkl, blas, named):
    build(mkl, blas)
    assert fastpath.torch_products() == named


@pytest.mark.parametrize("faster", [False, True], ids=["torch-kept", "onednn-faster"])
def test_device_credits_the_float32_products_to_the_library_torch_has(build, monkeypatch, faster):
    build(False, "accelerate")  # a Mac's torch
    monkeypatch.setattr(fastpath, "onednn_faster", lambda: faster)
    result = run(tiny_session(), ":device")
    shown = plain(result, 300)
    assert result.cpu_float32_products == ("oneDNN" if faster else "Accelerate") and "MKL" not in shown
    assert ("than torch's own (Accelerate's)" if faster else "torch's own (Accelerate's), oneDNN's") in shown
    build(False, None)
    shown = plain(run(tiny_session(), ":device"), 300)
    assert ("than torch's own;" if faster else "CPU: torch's own, oneDNN's measured no faster") in shown


def test_a_float32_runs_summary_names_openblas_on_arm_linux(build, monkeypatch):
    build(False, "open")
    monkeypatch.setattr(fastpath, "onednn_faster", lambda: False)
    result = run(tiny_session(dtype="float32", steps=1, eval_every=1, eval_batches=1), ":train")
    assert result.cpu_float32_products == "OpenBLAS" and to_json(result)["cpu_float32_products"] == "OpenBLAS"
    assert "OpenBLAS for the fast path's linear products" in plain(result, 300)


# --- 3. the name of an ARM Linux CPU --------------------------------------------------------------------------------
GRAVITON3 = ("processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 svebf16\nCPU implementer\t: 0x41\n"
             "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n\n")
PI4 = ("processor\t: 0\nBogoMIPS\t: 108.00\nFeatures\t: fp asimd evtstrm crc32 cpuid\nCPU implementer\t: 0x41\n"
       "CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd08\nCPU revision\t: 3\n\n"
       "processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd08\n\n"
       "Hardware\t: BCM2835\nRevision\t: c03114\nSerial\t\t: 100000001\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n")
PI4_32BIT = PI4.replace("processor\t: 0\n", "processor\t: 0\nmodel name\t: ARMv7 Processor rev 3 (v7l)\n")


@pytest.mark.parametrize("text, torch_name, named", [
    (GRAVITON3, "", "ARM Neoverse V1"),  # torch's cpuinfo names no chip on an ARM server
    (GRAVITON3.replace("0xd40", "0xd4f"), "", "ARM Neoverse V2"),
    (GRAVITON3.replace("0xd40", "0xd0c"), "", "ARM Neoverse N1"),
    (PI4, "", "Raspberry Pi 4 Model B Rev 1.4 (ARM Cortex-A72)"),  # the board's line after every processor's block
    (PI4, "Broadcom BCM2835", "Raspberry Pi 4 Model B Rev 1.4 (ARM Cortex-A72)"),
    (PI4_32BIT, "", "Raspberry Pi 4 Model B Rev 1.4 (ARM Cortex-A72)"),  # not "ARMv7 Processor rev 3 (v7l)"
    (PI4.split("Hardware")[0], "Broadcom BCM2711", "Broadcom BCM2711 (ARM Cortex-A72)"),  # no board line: torch's
])
def test_an_arm_linux_cpu_is_named_from_its_cpuinfo(monkeypatch, text, torch_name, named):
    real_open = builtins.open

    def fake_open(path, *a, **k):
        return io.StringIO(text) if path == "/proc/cpuinfo" else real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(device, "torch_cpu_name", lambda: torch_name)
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(platform, "processor", lambda: "")
    assert device.cpu_name() == named


def test_an_unknown_arm_part_names_no_core_rather_than_a_wrong_one():
    assert device.read_cpuinfo(GRAVITON3) == ("", "ARM Neoverse V1")
    assert device.read_cpuinfo(GRAVITON3.replace("0xd40", "0xfff")) == ("", None)
    assert device.read_cpuinfo(GRAVITON3.replace("0xd40", "")) == ("", None)  # a part cpuinfo left empty
