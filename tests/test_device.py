"""Device names, the device list, and moving a model with its optimizer state.

The CUDA tests carry the `gpu` marker (off by default; `pytest -m gpu` runs them) and skip
without a GPU. The error paths for missing GPUs are tested everywhere by faking what torch reports.
"""

import pytest
import torch

from minitf_repl.core import device as device_mod
from minitf_repl.core.device import DeviceInfo, describe_devices, move_to, read_cpuinfo, resolve_device
from minitf_repl.core.errors import DeviceError, UserError
from minitf_repl.core.model import MiniTransformerLM, ModelConfig

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU")

SIZES = dict(vocab_size=11, max_seq_len=16, d_model=32, n_heads=2, n_layers=2, d_ff=48)


@pytest.mark.parametrize("name", ["cpu", " CPU ", "Cpu\n"])
def test_resolve_cpu(name):
    assert resolve_device(name) == torch.device("cpu")


def test_resolve_auto():
    got = resolve_device("auto")
    assert got == resolve_device()
    expected = "cuda" if HAS_CUDA else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert got.type == expected


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
@pytest.mark.parametrize("name", ["cuda", "CUDA", "cuda:0", "cuda:3"])
def test_cuda_missing_raises(name):
    with pytest.raises(DeviceError, match=r"not available here \(no CUDA GPU found\); available: cpu"):
        resolve_device(name)


@pytest.mark.skipif(torch.backends.mps.is_available(), reason="this machine has MPS")
def test_mps_missing_raises():
    with pytest.raises(DeviceError, match="'mps' is not available here.*available: cpu"):
        resolve_device("mps")


@pytest.mark.parametrize("name", ["tpu", "gpu0", "cuda:x", "", "   ", "cpu:0", "mps:1", "cuda:-1", "cuda:", None, 0])
def test_unknown_names_raise(name):
    with pytest.raises(DeviceError, match="auto, cpu, cuda, cuda:N or mps"):
        resolve_device(name)


def test_device_error_is_a_user_error():
    assert issubclass(DeviceError, UserError)


def fake_gpus(monkeypatch, count: int) -> None:
    monkeypatch.setattr(device_mod, "_cuda_count", lambda: count)


def test_index_past_the_gpu_count_raises(monkeypatch):
    fake_gpus(monkeypatch, 1)
    with pytest.raises(DeviceError, match=r"'cuda:3' is not available here \(only 1 CUDA GPU\); available: cpu, cuda:0"):
        resolve_device("cuda:3")
    assert resolve_device("cuda:0") == torch.device("cuda", 0)


def test_auto_prefers_cuda(monkeypatch):
    fake_gpus(monkeypatch, 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)


@pytest.mark.parametrize("bf16_units", [True, False], ids=["bf16-units", "no-bf16-units"])
def test_describe_devices(monkeypatch, bf16_units):
    """The CPU row says whether bfloat16 is native; both kinds of CPU, whichever this one is."""
    monkeypatch.setattr(device_mod, "cpu_has_bf16_units", lambda: bf16_units)
    devices = describe_devices()
    assert all(isinstance(d, DeviceInfo) for d in devices)
    cpu = devices[0]
    assert (cpu.name, cpu.kind, cpu.available, cpu.bf16) == ("cpu", "cpu", True, bf16_units)
    assert cpu.description
    assert cpu.memory_bytes is None or cpu.memory_bytes > 0
    assert len([d for d in devices if d.kind == "cuda"]) == (torch.cuda.device_count() if HAS_CUDA else 0)
    # Every listed, available device is one resolve_device accepts.
    for d in devices:
        if d.available:
            assert resolve_device(d.name).type == d.kind


def make_trained(device="cpu"):
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**SIZES)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step(model, optimizer)
    return model, optimizer


def step(model, optimizer) -> None:
    device = next(model.parameters()).device
    idx = torch.randint(0, 11, (3, 7), generator=torch.Generator().manual_seed(1)).to(device)
    _, loss = model(idx, targets=idx)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def state_tensors(optimizer):
    return [(key, value) for state in optimizer.state.values() for key, value in state.items() if torch.is_tensor(value)]


def test_move_to_cpu_keeps_everything_on_cpu_and_still_steps():
    model, optimizer = make_trained()
    move_to(model, optimizer, resolve_device("cpu"))
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert state_tensors(optimizer) and all(v.device.type == "cpu" for _, v in state_tensors(optimizer))
    before = model.blocks[0].ffn.fc_in.weight.detach().clone()
    step(model, optimizer)
    assert not torch.equal(before, model.blocks[0].ffn.fc_in.weight)
    assert all(v.item() == 2 for k, v in state_tensors(optimizer) if k == "step")


def test_move_to_without_optimizer():
    model, _ = make_trained()
    move_to(model, None, "cpu")
    assert all(p.device.type == "cpu" for p in model.parameters())


@pytest.mark.gpu
@needs_cuda
def test_move_to_cuda_and_back():
    model, optimizer = make_trained()
    gpu = resolve_device("cuda")
    move_to(model, optimizer, gpu)
    assert all(p.device == gpu for p in model.parameters())
    for key, value in state_tensors(optimizer):
        # torch keeps AdamW's step counter on the CPU unless the optimizer is fused or capturable.
        assert value.device.type == ("cpu" if key == "step" else "cuda"), key
    step(model, optimizer)  # fails with a device mismatch if any state was left behind
    move_to(model, optimizer, "cpu")
    assert all(v.device.type == "cpu" for _, v in state_tensors(optimizer))
    step(model, optimizer)


@pytest.mark.gpu
@needs_cuda
def test_move_fused_optimizer_keeps_step_with_params():
    torch.manual_seed(0)
    model = MiniTransformerLM(ModelConfig(**SIZES)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
    step(model, optimizer)
    move_to(model, optimizer, "cpu")
    move_to(model, optimizer, "cuda")
    assert all(v.device.type == "cuda" for _, v in state_tensors(optimizer))
    step(model, optimizer)


@pytest.mark.gpu
@needs_cuda
def test_describe_cuda_devices():
    cuda = [d for d in describe_devices() if d.kind == "cuda"]
    assert cuda and cuda[0].name == "cuda:0" and cuda[0].memory_bytes > 0 and cuda[0].description


def cpuinfo(vendor="AuthenticAMD", family=26, model=2, name="AMD EPYC") -> str:
    """Two processors' blocks of /proc/cpuinfo, as Linux writes them (the second one must not matter)."""
    block = (f"processor\t: {{n}}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
             f"model name\t: {name}\nflags\t\t: fpu avx2\n\n")
    return block.format(n=0) + block.format(n=1).replace(f"model\t\t: {model}", "model\t\t: 255")


@pytest.mark.parametrize("vendor, family, model, generation", [
    ("AuthenticAMD", 23, 0x01, "Zen"), ("AuthenticAMD", 23, 0x31, "Zen 2"), ("AuthenticAMD", 25, 0x01, "Zen 3"),
    ("AuthenticAMD", 25, 0x11, "Zen 4"), ("AuthenticAMD", 25, 0x61, "Zen 4"), ("AuthenticAMD", 26, 0x02, "Zen 5"),
    ("AuthenticAMD", 26, 0x44, "Zen 5"), ("GenuineIntel", 6, 0x8F, "Sapphire Rapids"),
    ("GenuineIntel", 6, 0x6A, "Ice Lake"),
    # Unknown pairs name no generation rather than a wrong one: a future family-26 model, another vendor.
    ("AuthenticAMD", 26, 0x90, None), ("AuthenticAMD", 27, 0x02, None), ("HygonGenuine", 24, 0x02, None),
])
def test_read_cpuinfo_names_the_generation(vendor, family, model, generation):
    assert read_cpuinfo(cpuinfo(vendor, family, model, "Some CPU")) == ("Some CPU", generation)


def test_read_cpuinfo_without_x86_numbers():
    arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\n"
    assert read_cpuinfo(arm) == ("", None)
    assert read_cpuinfo("") == ("", None)
    assert read_cpuinfo("model name\t: X\ncpu family\t: ?\nmodel\t: 1\n") == ("X", None)


def test_cpu_name_adds_the_generation_once(monkeypatch):
    import builtins
    import io

    def fake_open(text):
        real_open = builtins.open
        return lambda path, *a, **k: io.StringIO(text) if path == "/proc/cpuinfo" else real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake_open(cpuinfo(name="AMD EPYC")))
    assert device_mod.cpu_name() == "AMD EPYC (Zen 5)"
    monkeypatch.setattr(builtins, "open", fake_open(cpuinfo(name="AMD EPYC 9005 Zen 5 Processor")))
    assert device_mod.cpu_name() == "AMD EPYC 9005 Zen 5 Processor"
    monkeypatch.setattr(builtins, "open", fake_open(cpuinfo(model=0x90, name="AMD EPYC")))
    assert device_mod.cpu_name() == "AMD EPYC"


@pytest.mark.parametrize("units, says", [
    (None, "no native bfloat16"), ("AMX", "native bfloat16 (AMX)"), ("AVX512-BF16", "native bfloat16 (AVX512-BF16)"),
])
def test_cpu_kind_says_which_bf16_units(monkeypatch, units, says):
    """Both kinds of CPU, whichever this one is: the hardware answers are patched."""
    monkeypatch.setattr(device_mod, "cpu_has_bf16_units", lambda: units is not None)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: units == "AMX")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: units == "AVX512-BF16")
    for name in device_mod.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    from minitf_repl.core import threads

    monkeypatch.setattr(threads, "available_cpus", lambda: 4)  # the cores' words as on a 4-core machine
    monkeypatch.setattr(device_mod.os, "cpu_count", lambda: 4)
    assert device_mod.cpu_kind().endswith(f", 4 cores, {says}")


def hardware_units(monkeypatch, units):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: units == "AMX")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: units == "AVX512-BF16")
    for name in device_mod.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("cap, capped", [
    ("AVX2", True), ("avx2", True), ("AVX512_CORE", True), ("AVX512_CORE_VNNI", True), ("AVX2_VNNI_2", True),
    ("AVX512_CORE_BF16", False), ("AVX512_CORE_AMX", False), ("ALL", False), ("DEFAULT", False),
    ("AVX10_2_512", False), ("", False),
])
@pytest.mark.parametrize("units", ["AMX", "AVX512-BF16"])
def test_onednn_capped_below_bf16_means_no_native_bf16(monkeypatch, units, cap, capped):
    """ONEDNN_MAX_CPU_ISA below AVX512_CORE_BF16 keeps oneDNN, which runs torch's bfloat16 products,
    off the units: bfloat16 would be emulated, so dtype=auto and Newton-Schulz must take float32."""
    hardware_units(monkeypatch, units)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    assert device_mod.bf16_isa_cap() == (f"ONEDNN_MAX_CPU_ISA={cap}" if capped else None)
    assert device_mod.cpu_has_bf16_units() is not capped
    assert device_mod._native_bf16.__wrapped__("cpu", None) is not capped
    kind = device_mod.cpu_kind()
    if capped:
        assert f"no native bfloat16 (its {units} units capped off), instruction sets capped: ONEDNN_MAX_CPU_ISA={cap}" in kind
    else:
        assert f"native bfloat16 ({units})" in kind and "no native" not in kind


def test_dnnl_spelling_and_the_other_caps(monkeypatch):
    """oneDNN reads DNNL_MAX_CPU_ISA where ONEDNN_ is unset; ATen's and MKL's caps are named, not judged."""
    hardware_units(monkeypatch, "AVX512-BF16")
    monkeypatch.setenv("DNNL_MAX_CPU_ISA", "AVX512_CORE")
    assert device_mod.bf16_isa_cap() == "DNNL_MAX_CPU_ISA=AVX512_CORE"
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_AMX")  # the newer spelling wins
    assert device_mod.bf16_isa_cap() is None and device_mod.cpu_has_bf16_units()
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.delenv("DNNL_MAX_CPU_ISA")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert device_mod.cpu_has_bf16_units()
    assert device_mod.isa_caps() == ["ATEN_CPU_CAPABILITY=avx2", "MKL_ENABLE_INSTRUCTIONS=AVX2"]
    assert device_mod.cpu_kind().endswith(
        "native bfloat16 (AVX512-BF16), instruction sets capped: ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2")


def test_no_units_no_cap_to_speak_of(monkeypatch):
    hardware_units(monkeypatch, None)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert not device_mod.cpu_has_bf16_units()
    assert "no native bfloat16, instruction sets capped: ONEDNN_MAX_CPU_ISA=AVX2" in device_mod.cpu_kind()
