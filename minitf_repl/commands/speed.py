"""`:device` and `:quantize`: where the model computes, in what precision, with how many threads.

The speed switches that are settings (dtype, compile, fast_path, threads) are set with `:set`;
these two commands show the machine and act on the model: `:device` moves it, `:quantize int8`
makes an int8 copy for sampling and measures what it costs and saves (core.quantize).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..core.errors import DeviceError
from ..core.words import count
from ..registry import Param, clip
from ..render import fmt
from ..render.renderers import render
from ..render.tables import NARROW, add_row, fitted
from ..render.words import note, say
from ..reporter import Reporter
from ..session import AUTOSAVE_NAME, Session
from ..syntax import REPL, cmd, interactive, named, syntax
from .base import command, complete_device, default_prompt, training_length

if TYPE_CHECKING:  # torch-bound; schema.py resolves the names for --json
    from ..core.device import DeviceInfo
    from ..core.quantize import QuantizeMeasure

FAMILY = "devices and speed"  # the heading :help lists this module's commands under


# --- :device -------------------------------------------------------------------------------------
@dataclass
class DeviceResult:
    devices: list[DeviceInfo]  # every device minitf can see, usable or not
    current: str  # the device the model is on now; with a problem, the one asked for, which the model is not on
    switched: bool  # this command moved the model
    problem: str | None = None  # the device asked for (e.g. --device cuda) cannot be used here
    dtype: str = "auto"  # the dtype setting: auto, float32 or bfloat16
    # what a training step runs in on the current device under that setting: float32 or bfloat16
    train_dtype: str | None = None
    threads: int | None = None  # the CPU threads torch computes with (core/threads.py)
    threads_why: str | None = None  # how that count was chosen, e.g. "auto: 2 cores, 0.0 busy with other work"
    # the fast path's float32 CPU products (core/fastpath.py): "oneDNN", or torch's own library: "MKL" where torch has
    # it (the x86 builds), else the BLAS torch was built with ("OpenBLAS", "Accelerate", ...), else "torch's own"
    cpu_float32_products: str | None = None
    # how that was chosen: "measured" at this process's first float32 product, or "MINITF_PRODUCTS" (set to onednn
    # or torch); None where no CPU products are named
    cpu_float32_products_by: str | None = None
    # a $MINITF_PRODUCTS set to no value it takes, said as ignored with those it takes (it was ignored without a word)
    cpu_float32_products_ignored: str | None = None
    cpu_isa_caps: list[str] = field(default_factory=list)  # e.g. "ONEDNN_MAX_CPU_ISA=AVX2" (core.device.ISA_CAPS)
    cpu_bf16_units_unused: str | None = None  # bfloat16 units such a cap keeps oneDNN off ("AVX512-BF16"), or null
    # "ARM BF16": an ARM CPU's bfloat16 instructions, as torch finds them, which the bf16 column leaves out: dtype=auto
    # keeps float32 on ARM, bfloat16 training not having been measured there (core.device.native_bf16); else null
    cpu_bf16_instructions: str | None = None
    # Each null where training is float32, off the CPU or off the fast path (core.fastpath.attention_in_float32):
    cpu_attention_dtype: str | None = None  # a bfloat16 CPU training step's attention kernel: "bfloat16" or "float32"
    cpu_attention_shape: list[int] | None = None  # the shape it was measured at: batch, heads, kv heads, block, head width
    # bfloat16's measured speed there against float32's (bfloat16 taken at 1.05 or more); None under compile=on, whose
    # compiled step runs attention in float32 whatever was measured (core.fastpath.attention_in_float32)
    cpu_attention_speedup: float | None = None
    # what Muon's Newton-Schulz runs in on the current device under the dtype setting (float32 for dtype=float32,
    # else bfloat16 where the device has bfloat16 units); null with optimizer=adamw, which has none
    newton_schulz_dtype: str | None = None
    # the current device's speed at a square matrix product in train_dtype, measured by this command with torch's own
    # kernels (core.peak: two warm-up products, then the median of up to five timed), in GFLOP/s: the peak :train's
    # MFU is a run's share of; null where nothing could be measured (a problem with the device, a failed product)
    peak_gflops: float | None = None
    peak_size: int | None = None  # n of that n x n product, chosen so that one takes a few ms; null with peak_gflops
    # the front door says the problem on standard error itself, the table going elsewhere (a file, a pipe): the table
    # leaves its error line out (dispatch.FAILURE_SAID)
    failure_said: bool = field(default=False, metadata={"view_only": True})

    @property
    def failure(self) -> str | None:
        return self.problem


@command("device", "Show the devices, or move the model to one (cpu, cuda, cuda:N, mps).", params=[
    Param("name", str, help="auto, cpu, cuda, cuda:N or mps", positional=True, complete=complete_device),
], reports_device=True, json_version=9)  # fmt: skip
def cmd_device(session: Session, args: dict, reporter: Reporter) -> DeviceResult:
    from ..core.device import ACCEPTED_FORMS, describe_devices, resolve_device

    problem = None
    try:
        current = session.device
    except DeviceError as e:
        current, problem = None, str(e)  # e.g. --device cuda on a machine without one: listing still works
    name = args["name"]
    if name is None or not name.strip():
        return DeviceResult(describe_devices(), str(current) if current is not None else session.device_name, False,
                            problem, **_train_dtype(session, current))
    if len(name.strip()) > 16:  # no device name is this long; keep the message one line
        raise DeviceError(f"unknown device {clip(name)!r}; use one of {ACCEPTED_FORMS}")
    target = resolve_device(name)
    try:
        session.move_to(target)
    except RuntimeError as e:
        if current is not None and session.has_model:
            session.move_to(current)  # never leave the model half moved
        raise DeviceError(f"could not move the model to {target}: {clip(str(e), 120)}; stay on {current}") from None
    return DeviceResult(describe_devices(), str(target), current != target, **_train_dtype(session, target))


def _train_dtype(session: Session, device) -> dict:
    """The dtype setting and what it means on `device` (dtype=auto depends on the device's bfloat16 units),
    and torch's CPU threads (chosen now if nothing has chosen them yet)."""
    from ..core.device import bf16_isa_cap, cpu_bf16_instructions, cpu_bf16_units, isa_caps
    from ..core.fastpath import PRODUCTS_ENV, products_fixed, products_kernel
    from ..core.precision import newton_schulz_dtype, training_dtype

    setting = session.train_config.dtype
    choice = session.threads.choice or session.threads.decide()
    train_dtype = None if device is None else training_dtype(setting, device)
    muon = device is not None and session.train_config.optimizer == "muon"
    return {"dtype": setting, "train_dtype": train_dtype,
            "newton_schulz_dtype": newton_schulz_dtype(setting, device) if muon else None,
            "threads": choice.threads, "threads_why": choice.why(),
            "cpu_float32_products": products_kernel(),
            "cpu_float32_products_by": PRODUCTS_ENV if products_fixed() else "measured",
            "cpu_float32_products_ignored": _products_ignored(),
            "cpu_isa_caps": isa_caps(), "cpu_bf16_units_unused": cpu_bf16_units() if bf16_isa_cap() else None,
            "cpu_bf16_instructions": cpu_bf16_instructions(),
            **_cpu_attention(session, device, train_dtype), **_peak(device, train_dtype)}


def _peak(device, train_dtype: str | None) -> dict:
    """The device's product speed in the training dtype, measured now (about 0.1 s on a 2-core CPU, 0.25 s at most,
    core.peak): after the threads are chosen (above), at the count a run trains with. Kept by core.peak, where the
    next :train at this device, dtype and thread count reads it for its MFU rather than measuring again."""
    from ..core.peak import product_speed_or_none

    if device is None or train_dtype is None:
        return {}
    speed = product_speed_or_none(device, train_dtype)
    return {} if speed is None else {"peak_gflops": speed.gflops, "peak_size": speed.size}


PRODUCTS_VALUES = ("onednn", "torch", "mkldnn", "mkl")  # what $MINITF_PRODUCTS takes (core.fastpath.products_choice)


def _products_ignored() -> str | None:
    """$MINITF_PRODUCTS set to no value it takes (`onedn`): why it is ignored, the values it takes and the nearest,
    as an ignored $MINITF_THREADS is said; None where it is unset or taken."""
    import difflib
    import os

    from ..core.fastpath import PRODUCTS_ENV, products_choice

    text = os.environ.get(PRODUCTS_ENV, "").strip()
    if not text or products_choice() is not None:
        return None
    near = difflib.get_close_matches(text.lower(), PRODUCTS_VALUES, n=1, cutoff=0.6)
    return (f"${PRODUCTS_ENV}={clip(text)!r} ignored: it takes onednn (or mkldnn) or torch (or mkl)"
            + (f"; did you mean {near[0]}?" if near else ""))


def _cpu_attention(session: Session, device, train_dtype: str | None) -> dict:
    """What a bfloat16 CPU training step's attention kernel runs in at this model's shape, measured as the
    step measures it (core.fastpath); nothing where training is float32, off the CPU or off the fast path."""
    import torch

    from ..core.fastpath import attention_dtype_at

    if (device is None or torch.device(device).type != "cpu" or train_dtype != "bfloat16"
            or not session.train_config.fast_path):
        return {}
    m = session.model_config
    # at the length a training row of the data has (a task's: the question and its answer), as a step decides it
    shape = [session.train_config.batch_size, m.n_heads, m.kv_heads, training_length(session) or m.max_seq_len,
             m.head_dim]
    if session.train_config.compile:  # it said bfloat16, measured, beside a compiled step that never asks
        return {"cpu_attention_dtype": "float32", "cpu_attention_shape": shape, "cpu_attention_speedup": None}
    dtype, speedup = attention_dtype_at(*shape)
    return {"cpu_attention_dtype": dtype, "cpu_attention_shape": shape, "cpu_attention_speedup": round(speedup, 2)}


@render.register(DeviceResult)
def render_device(result: DeviceResult, console: Console) -> None:
    narrow = console.width < NARROW
    table = Table(header_style="bold", box=None if narrow else box.HEAVY_HEAD, show_header=not narrow,
                  pad_edge=not narrow)
    table.add_column("", no_wrap=True)
    if narrow:  # name, memory and bf16 on one line, the description under them
        table.add_column("device")
    else:
        for header in ("name", "kind", "description", "memory", "bf16"):
            table.add_column(header, justify="right" if header == "memory" else "left")
    for d in result.devices:
        current = d.name == result.current
        name = Text(d.name, style="bold green" if current else "")
        description = Text(d.description, style="" if d.available else "red")
        bf16 = "yes" if d.bf16 else "no"
        style = None if d.available else "dim"
        if narrow:
            add_row(table, "*" if current else "", name + Text(f"  {fmt.size(d.memory_bytes)}  bf16 {bf16}\n")
                    + description, style=style)
        else:
            add_row(table, "*" if current else "", name, d.kind, description, fmt.size(d.memory_bytes), bf16,
                    style=style)
    console.print(table)
    if result.problem:
        if not result.failure_said:  # the error line on standard error is the front door's (one message)
            say(console, f"error: {result.problem}", "bold red")
    elif result.switched:
        say(console, f"now using {result.current}", "green")
    else:
        note(console, f"* current device: {result.current}; {cmd('device', 'NAME')} switches")
    if result.train_dtype is not None and not result.problem:
        why = (" (dtype=auto: bfloat16 where the bf16 column says yes)" if result.dtype == "auto"
               else f" (dtype={result.dtype})")
        note(console, f"training on {result.current} runs in {result.train_dtype}{why}")
        if result.newton_schulz_dtype is not None:
            note(console, f"Muon's Newton-Schulz runs in {result.newton_schulz_dtype} there (float32 in a run of "
                          "dtype=float32, else bfloat16 where the bf16 column says yes)")
        if result.train_dtype == "bfloat16":  # dtype=bfloat16 pinned (a lesson's checkpoint brought it)
            from ..core.precision import precision_note

            if (slow := precision_note("bfloat16", result.current)) is not None:  # where it is emulated: :train's line
                say(console, f"dtype=bfloat16: {slow}; {cmd('set', dtype='auto')} trains in float32", "yellow")
    if result.threads is not None:
        note(console, f"CPU threads: {result.threads} ({result.threads_why}); {cmd('set', threads='N')} fixes the "
                      f"count, {cmd('set', threads=0)} is auto")
    if result.peak_gflops is not None and not result.problem:
        from ..core.peak import flop_rate_words

        on = f" on {count(result.threads, 'CPU thread')}" if result.current == "cpu" and result.threads else ""
        n = result.peak_size
        # a one-shot's measurement ends with its process: `minitf train` measures its own, which a busy machine can
        # put 30% apart from this one
        share = (f"{named('train')}'s MFU is a run's share of it" if syntax() == REPL else
                 f"{named('train')} measures its own at the end of a run for its MFU")
        note(console, f"{result.train_dtype} products: {flop_rate_words(result.peak_gflops)} (a {n} x {n} product"
                      f"{on}, measured now; {share})")
    # measured once a process, on a machine whose other programs may tip it (:device named one kernel, then the
    # other, on a busy Zen 4): said so, with the variable that fixes it
    from ..core.fastpath import PRODUCTS_ENV, TORCH_OWN, torch_products  # torch is in: the products were chosen

    fixed = result.cpu_float32_products_by not in (None, "measured")
    how = (f"set by ${result.cpu_float32_products_by}" if fixed else
           f"measured at this process's first float32 product, which a busy machine can tip either way "
           f"(${PRODUCTS_ENV}=onednn or =torch fixes it)")
    how += f"; {result.cpu_float32_products_ignored}" if result.cpu_float32_products_ignored else ""
    # torch's own products are named by the library they run on where torch names one: "(MKL's)" on a Mac, which has
    # none, and on ARM Linux, whose torch runs OpenBLAS, named a library that was not there
    def own(library: str) -> str:  # "torch's own (MKL's)", or "torch's own" where the build names no library
        return TORCH_OWN if library == TORCH_OWN else f"{TORCH_OWN} ({library}'s)"

    if result.cpu_float32_products == "oneDNN":
        said = "oneDNN's kernels" + ("" if fixed else f", measured faster here than {own(torch_products())}")
        note(console, f"float32 products on the CPU: {said}; {how}")
    elif result.cpu_float32_products is not None:
        said = own(result.cpu_float32_products) + ("" if fixed else ", oneDNN's measured no faster here")
        note(console, f"float32 products on the CPU: {said}; {how}")
    if result.cpu_attention_dtype is not None:
        batch, heads, kv_heads, block, width = result.cpu_attention_shape
        kv = f" ({kv_heads} kv)" if kv_heads != heads else ""
        why = ("compile=on: the compiled step runs it in float32" if result.cpu_attention_speedup is None else
               f"bfloat16 measured {result.cpu_attention_speedup:.2f}x float32's speed")
        note(console, f"attention in a bfloat16 training step: {result.cpu_attention_dtype} here, at batch {batch} x "
                      f"{heads} heads{kv} x {block} positions x {width} wide ({why})")
    if result.cpu_bf16_instructions and not result.problem:
        # the bf16 column says no beside them: dtype=auto's choice, not the hardware's (core.device.native_bf16)
        note(console, f"this CPU has {result.cpu_bf16_instructions} instructions; bf16 says no as dtype=auto keeps "
                      "float32 on ARM, where bfloat16 training has not been measured against float32 "
                      f"({cmd('set', dtype='bfloat16')} tries it; compare the tokens/s)")
    if result.cpu_isa_caps:
        unused = (f"; this CPU's {result.cpu_bf16_units_unused} units are left unused, so bf16 says no"
                  if result.cpu_bf16_units_unused else "")
        note(console, f"instruction sets capped by the environment: {' '.join(result.cpu_isa_caps)}{unused}")


# --- :quantize -----------------------------------------------------------------------------------
QUANTIZE_MODES = ("int8", "off")
QUANTIZE_TOKENS = 64  # tokens generated (greedy) for each timing of :quantize int8


@dataclass
class QuantizeResult:
    mode: str  # "int8": :gen samples from the int8 copy; "off": from the float model
    # this command switched int8 sampling on or off (false: only shown, or already so); a one-shot `minitf quantize
    # int8` (every --json one) measures the copy and ends with it
    changed: bool
    measure: QuantizeMeasure | None = None  # for :quantize int8
    device: str | None = None  # the device the float model trains on (the int8 copy runs on the CPU)
    ablations: list[str] = field(default_factory=list)  # parts :ablate switched off in both while measuring
    # the model has not trained: a one-shot `minitf quantize int8` without --load measured random weights, unsaid
    untrained: bool = field(default=False, metadata={"view_only": True})


@command("quantize", "Sample with an int8 copy of the Linear layers (per-channel weights), or off again.", params=[
    Param("mode", str, positional=True, choices=QUANTIZE_MODES,
          help="int8: quantize a copy that :gen, :step and :kv decode with, and measure size, speed and val loss; "
               "off: the float model (default: show which is on)"),
], interruptible=True, json_version=5)  # fmt: skip
def cmd_quantize(session: Session, args: dict, reporter: Reporter) -> QuantizeResult:
    mode = (args["mode"] or "").strip()
    on = session.has_model and session.sampling_copy
    if not mode:
        return QuantizeResult("int8" if on else "off", changed=False)
    if mode == "off":
        session.set_sampling_model(None)
        return QuantizeResult("off", changed=on)
    from ..core.quantize import measure, quantize_for_sampling

    tokenizer = session.data.tokenizer
    model, trainer = session.model, session.trainer
    # The copy is made of the model as it is, without :ablate's hooks; the session then switches the
    # same parts off in both, and keeps them in step as :ablate changes (Session.set_ablations).
    active = session.ablations
    previous = session.sampling_model if on else None
    try:  # interruptible: Ctrl-C switches nothing (the copy that was on stays on), as no measure was shown
        session.set_ablations([])
        qmodel = quantize_for_sampling(model)
        session.set_sampling_model(qmodel)
        session.set_ablations(active)
        prompt = default_prompt(tokenizer)  # where :gen starts without a prompt
        result = measure(model, qmodel, trainer, tokenizer.encode(prompt), n_tokens=QUANTIZE_TOKENS,
                         cache=session.gen_config.cache)  # timed as :gen decodes: with the cache, or without it
    except KeyboardInterrupt:
        session.set_sampling_model(previous)
        session.set_ablations(active)  # in the copy that was on as well
        raise
    return QuantizeResult("int8", changed=not on, measure=result, device=str(session.device),
                          ablations=[str(a) for a in active], untrained=session.untrained)


def _quantize_table(m: QuantizeMeasure, narrow: bool) -> Table:
    """The float model and its int8 copy side by side; `narrow` (40 columns): no box, the row names wrapped at
    spaces and the numbers kept whole."""
    table = Table(header_style="bold", box=None if narrow else box.HEAVY_HEAD, pad_edge=not narrow,
                  collapse_padding=narrow)
    for header in ("", "float32", "int8", "change"):
        table.add_column(header, justify="right" if header else "left", no_wrap=bool(header))
    ratio = f"{m.bytes_after / m.bytes_before:.2f}x" if m.bytes_before else "-"
    # the bytes of torch.save(state_dict), which an int8 copy can be written as: "saved" read as the size of the lab's
    # own checkpoint (safetensors, float32 alone), a third number beside :ls's and :params'
    add_row(table, "weights (torch.save)", fmt.size(m.bytes_before), fmt.size(m.bytes_after), ratio)
    speed = f"{m.tokens_per_second_after / m.tokens_per_second_before:.2f}x" if m.tokens_per_second_before else "-"
    add_row(table, f"tokens/s ({m.n_tokens}, greedy{'' if m.cache else ', cache off'})",
            fmt.rate(m.tokens_per_second_before),
            fmt.rate(m.tokens_per_second_after), speed)
    add_row(table, "val loss", fmt.num(m.val_loss_before), fmt.num(m.val_loss_after),
            fmt.change(m.val_loss_before, m.val_loss_after, lambda d: f"{d:.4f}", digits=4))
    if m.accuracy_before is not None:
        add_row(table, "accuracy", fmt.pct(m.accuracy_before), fmt.pct(m.accuracy_after),
                fmt.change(m.accuracy_before, m.accuracy_after, lambda d: f"{100 * d:.1f} pts", digits=3))
    add_row(table, "same greedy tokens", "", f"{m.same_tokens}/{m.n_tokens}", "")
    return table


@render.register(QuantizeResult)
def render_quantize(result: QuantizeResult, console: Console) -> None:
    m = result.measure
    if m is None:
        state = "an int8 copy of the Linear layers" if result.mode == "int8" else "the float32 model"
        verb = "now samples" if result.changed else "samples"
        say(console, f"{cmd('gen')} {verb} from {state}", "green" if result.changed else "")
        if result.mode == "off" and not result.changed:
            note(console, f"{cmd('quantize', 'int8')} makes an int8 copy for sampling and measures it")
        return
    # below 40 columns a record a row: the narrow table cut its names to "we…" and "lo…" at 30
    console.print(fitted(console, _quantize_table(m, narrow=False), _quantize_table(m, narrow=True)))
    if m.val_missing:
        note(console, f"val loss not measured: {m.val_missing}")
    if m.same_tokens < m.n_tokens:
        note(console, f"the int8 copy's greedy text parts from the float model's at token {m.same_tokens + 1} of "
                      f"{m.n_tokens}: from there on each continues a text of its own")
    if m.tokens_per_second_before and m.tokens_per_second_after < m.tokens_per_second_before:
        # a learner expects int8 to be faster; docs/variant-lab.md said why it is not, the table did not
        note(console, "int8 here saves memory, not time: a weight-only int8 product still multiplies in float, and "
                      "a model this small spends its time on calls, not on reading weights")
    if result.untrained:
        # from the shell the train first: `--load autosave` alone failed where no run had saved one yet
        fix = (f"{cmd('train')} first" if syntax() == REPL else
               f"{cmd('train')} first (it autosaves), then {cmd('quantize', 'int8', load=AUTOSAVE_NAME)}")
        note(console, f"this model has not trained yet: the val loss and tokens compared are random weights'; {fix}")
    made = f"{count(m.linear_layers, 'Linear layer')} int8, on the CPU"
    if syntax() == REPL:
        # all three that decode with it, as its help names them (this named :gen alone)
        say(console, f"{cmd('gen')}, {cmd('step')} and {cmd('kv')} now decode with the int8 copy ({made}); "
                     f"{cmd('quantize', 'off')} goes back; "
                     "training, loading or a rebuild (:set, :data) drops the copy", "green")
    else:  # the copy lives in the session, which a one-shot command ends: the next `minitf gen` samples the float model
        say(console, f"the int8 copy ({made}) ends with this command: in the REPL ({interactive()}), :gen samples "
                     "from it after :quantize int8", "green")
    if result.ablations:
        note(console, f"both measured with {', '.join(result.ablations)} switched off ({cmd('ablate')}), as "
                      f"{cmd('gen')} samples now; {cmd('ablate', 'off')} puts them back in both")
    if result.device is not None and result.device != "cpu":
        note(console, f"the float model trains on {result.device}; both were timed on the CPU")
