"""A learner's laptop, emulated on Linux: macOS (Apple silicon, no /proc, a case-insensitive disk, Finder) and Windows
(no fcntl, no pread, descriptors in text mode, names and paths of its own, Notepad, MSVC). Each test failed before its
fix, except those that pin what a fix must leave alone and the guards at the end (what was checked and found fine).

On Windows the REPL's history came back with a "\\r" at the end of every entry: os.open gives a descriptor in text
mode there unless told O_BINARY, so each "\\n" written went out as "\\r\\n", and prompt-toolkit reads the file as
bytes. The history is opened, appended to and rewritten with O_BINARY now (0 elsewhere, where nothing changes).
A history file past its 16 MiB limit ended the REPL's start on Windows with a traceback (AttributeError: os.pread, which
Windows lacks): its newest entries are read with lseek and read now, as everywhere.
`:device` on a Mac (macOS 14) said "bf16 yes" for mps, beside "training on mps runs in float32 (dtype=auto: bfloat16
where the bf16 column says yes)": the column came from whether a bfloat16 tensor could be made there, dtype=auto from
native_bf16, which says no for Apple's GPUs. The column is native_bf16's answer now, as for the CPU and CUDA.
`:device` named an Apple silicon Mac's CPU "arm" (platform.processor(), there being no /proc/cpuinfo) and a Windows
laptop's "Intel64 Family 6 Model 154 Stepping 3, GenuineIntel": without /proc the name is torch's own reading of the
processor (cpuinfo's brand string, "Apple M2"), then the machine type as before.
`:save CON`, `:save aux.txt` and `:save run1.` (and `:train save=`) made checkpoint folders that Windows cannot hold:
a checkpoints folder copied from a lab's Linux box to a Windows laptop failed to copy, or came out under other names.
A new checkpoint's name may not be a Windows device name (whatever follows its first '.') nor end in '.'; one saved so
before still loads where it was saved.
`:save Run1` beside a checkpoint run1 wrote the new model over run1 on a Mac (one folder there: "replaced checkpoint
Run1"), and on Linux made a pair of folders that could not be copied to a Mac or a Windows laptop whole. A name that
differs from an entry of the folder only in case is refused now, naming the entry.
`:set compile=on` on a Windows laptop with Visual Studio's cl and no g++ said "torch.compile needs a C++ compiler (c++,
g++ or clang++) and none was found": on Windows the compiler looked for is the one inductor uses there ($CXX, else cl).
A Windows path in double quotes, as Explorer's "Copy as path" puts it (`:data "C:\\Users\\me\\new notes.txt"`), was
read with a newline for its \\n and a tab for \\t: "no such file". Given to a command that takes a path (:data, :save,
:load, :report, :parity, data= of :train and :compare), a quoted text that starts as a Windows path (a drive,
\\\\server\\, hf:) keeps its backslashes now; a prompt's escapes stay (`:gen "Q:\\nA:"` has its newline).
On Windows a model or a batch too big for the laptop ended `:train` and `:gen` in "internal error: RuntimeError:
[enforce fail at alloc_cpu.cpp:81] data. DefaultCPUAllocator: not enough memory": Windows' wording of the CPU
allocator's refusal is out of memory now, rolled back and said in one line as Linux's is.
On Windows a text file Notepad saved as ANSI or "Unicode" was answered with an iconv line in POSIX quoting, which
Windows cannot run: there the fix said is Notepad's Save as with Encoding UTF-8 (elsewhere the iconv line, as before).
`:save hf:FOLDER` into a folder made in Finder was refused as "not an empty folder" for the .DS_Store Finder left
there (Explorer's Thumbs.db and desktop.ini likewise): those alone count as empty now, and go with the folder.
On Windows a save lock left by a minitf killed part-way through a save (its window closed during the autosave that
ends `:train`) was never judged stale, there being no boot id to read: every later save waited 120 s and failed. There
a lock of this host whose pid no longer runs is broken now; a live pid (or one another program took) is waited for.
On a Mac, `:compare dropout=...` kept each contender's CPU random stream but not the Apple GPU's, from which dropout
draws its masks there: the contenders drew from one stream in turn. random_state keeps and puts back mps's too.
Likewise `:lr-find`, `:checks` and `:compare` draw in a random state of their own and leave the session's as it was:
on a Mac the Apple GPU's was left out of that fork, so that the session's next `:train` drew other dropout masks.
"""

import os

import pytest


WINDOWS_O_BINARY = 0x8000  # Windows' value; on Linux the same bit is O_LARGEFILE, which changes nothing here


def opened_flags(monkeypatch) -> list[int]:
    """os.O_BINARY set as on Windows, and the flags of every os.open from here on."""
    monkeypatch.setattr(os, "O_BINARY", WINDOWS_O_BINARY, raising=False)
    flags, real_open = [], os.open

    def recording_open(path, how, *args, **kwargs):
        flags.append(how)
        return real_open(path, how, *args, **kwargs)

    monkeypatch.setattr(os, "open", recording_open)
    return flags


# --- the history file on Windows ----------------------------------------------------------------------------------
def test_the_history_is_opened_in_binary_mode_where_the_system_has_a_text_mode(tmp_path, monkeypatch):
    from minitf_repl import repl

    monkeypatch.setattr(repl, "MAX_HISTORY_BYTES", 4000)
    path = tmp_path / "history"
    path.write_text("".join(f"\n# 2026-01-01 00:00:{k % 60:02}.000000\n+:gen line {k}\n" for k in range(200)))
    flags = opened_flags(monkeypatch)
    history = repl.make_history(path, lambda msg: None)  # reads it, and rewrites it with its newest entries
    history.store_string(":train steps=5")
    assert len(flags) == 3, flags  # the check at start, the rewrite, the append
    assert all(f & WINDOWS_O_BINARY for f in flags), [hex(f) for f in flags]
    assert list(history.load_history_strings())[0] == ":train steps=5"


def test_a_history_past_its_limit_is_cut_where_there_is_no_pread(tmp_path, monkeypatch):
    from minitf_repl import repl

    monkeypatch.setattr(repl, "MAX_HISTORY_BYTES", 4000)
    monkeypatch.delattr(os, "pread")  # Windows has none
    path = tmp_path / "history"
    path.write_text("".join(f"\n# 2026-01-01 00:00:{k % 60:02}.000000\n+:gen line {k}\n" for k in range(200)))
    warnings = []
    history = repl.make_history(path, warnings.append)
    assert type(history).__name__ == "SafeFileHistory" and "its oldest entries were dropped" in warnings[0]
    lines = list(history.load_history_strings())
    assert lines[0] == ":gen line 199" and ":gen line 0" not in lines and len(lines) > 20


# --- :device on an Apple silicon Mac ------------------------------------------------------------------------------
def apple_gpu(monkeypatch):
    """MPS available, on macOS 14, where a bfloat16 tensor can be made on it (this torch has no MPS: emulated)."""
    import torch

    from minitf_repl.core import device

    monkeypatch.setattr(device, "_mps_available", lambda: True)
    real_ones = torch.ones

    def ones(*size, **kwargs):
        if str(kwargs.get("device")) == "mps":
            kwargs["device"] = "cpu"
        return real_ones(*size, **kwargs)

    monkeypatch.setattr(torch, "ones", ones)


def test_the_bf16_column_of_an_apple_gpu_is_what_dtype_auto_goes_by(monkeypatch):
    from minitf_repl.core.device import describe_devices
    from minitf_repl.core.precision import training_dtype

    apple_gpu(monkeypatch)
    mps = next(d for d in describe_devices() if d.name == "mps")
    auto = training_dtype("auto", "mps")
    assert auto == "float32"  # Apple's GPUs: autocast to bfloat16 lacks kernels there (core.device.native_bf16)
    assert mps.bf16 is (auto == "bfloat16"), "the table said bf16 yes, and auto trained in float32 beside it"


# --- the processor's name without /proc -------------------------------------------------------------------------
def without_proc(monkeypatch):
    """No /proc/cpuinfo (macOS, Windows): opening it fails as it does there."""
    import builtins

    real_open = builtins.open

    def open_(path, *args, **kwargs):
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_)


@pytest.mark.parametrize("processor, machine, torch_says", [
    ("arm", "arm64", "Apple M2"),  # an Apple silicon Mac
    ("Intel64 Family 6 Model 154 Stepping 3, GenuineIntel", "AMD64", "12th Gen Intel(R) Core(TM) i7-1260P"),  # Windows
])
def test_the_cpu_is_named_by_torch_where_there_is_no_proc(monkeypatch, processor, machine, torch_says):
    import platform

    import torch

    from minitf_repl.core import device

    without_proc(monkeypatch)
    monkeypatch.setattr(platform, "processor", lambda: processor)
    monkeypatch.setattr(platform, "machine", lambda: machine)
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"architecture": machine, "cpu_name": torch_says})
    assert device.cpu_name() == torch_says
    assert device.describe_devices()[0].description.startswith(f"{torch_says}, ")  # :device's CPU row


def test_without_proc_nor_torch_s_reading_the_cpu_is_the_machine_type(monkeypatch):
    import platform

    import torch

    from minitf_repl.core import device

    without_proc(monkeypatch)
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    monkeypatch.delattr(torch.cpu, "get_capabilities")  # an older torch
    assert device.cpu_name() == "arm"


# --- checkpoint names Windows refuses -----------------------------------------------------------------------------
@pytest.mark.parametrize("name, why, instead", [
    ("CON", "Windows keeps CON for a device", "CON_1"), ("aux.txt", "Windows keeps AUX for a device", "aux_1.txt"),
    ("com1", "Windows keeps COM1 for a device", "com1_1"), ("nul.v2.run", "Windows keeps NUL", "nul_1.v2.run"),
    ("run1.", "Windows drops a final '.'", "run1"),
])
def test_a_checkpoint_is_not_saved_under_a_name_windows_refuses(checkpoint_dir, name, why, instead):
    from minitf_repl.core.errors import CheckpointError
    from test_commands import run, tiny_session

    s = tiny_session(steps=2)
    run(s, ":train")
    with pytest.raises(CheckpointError, match=f"not a valid name for a new checkpoint: {why}.*e.g. {instead}$"):
        run(s, f":save {name}")
    with pytest.raises(CheckpointError, match=why):
        run(s, f":train steps=1 save={name}")  # refused before the run, as any bad name is
    assert not (checkpoint_dir / name).exists() and s.trainer.step == 2


def test_names_that_only_look_like_windows_devices_are_saved(checkpoint_dir):
    from minitf_repl.core.checkpoint.layout import check_new_name

    for name in ("console", "com10", "aux_1.txt", "run.1", "lpt", "CONFIG", "nul-run"):
        assert check_new_name(name) == name


# --- compile=on on Windows ----------------------------------------------------------------------------------------
def test_compile_on_windows_looks_for_the_compiler_inductor_uses_there(monkeypatch):
    import types

    import torch

    from minitf_repl.core import precision

    model = torch.nn.Linear(2, 2)
    # Windows as precision.py sees it (sys.platform for all of torch would send torch.compile down Windows' paths)
    monkeypatch.setattr(precision, "sys", types.SimpleNamespace(platform="win32"), raising=False)
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(precision.shutil, "which", lambda name: r"C:\VS\bin\cl.exe" if name == "cl" else None)
    compiled, why = precision.compile_module(model)
    assert why is None and compiled is not None  # was: "needs a C++ compiler (c++, g++ or clang++)", with cl there
    monkeypatch.setattr(precision.shutil, "which", lambda name: "/usr/bin/g++" if name == "g++" else None)
    compiled, why = precision.compile_module(model)  # MinGW's g++ alone: inductor asks for cl on Windows
    assert compiled is None and why.startswith("torch.compile needs a C++ compiler (cl: Visual Studio's cl")
    monkeypatch.setenv("CXX", "clang-cl")
    monkeypatch.setattr(precision.shutil, "which", lambda name: "C:/llvm/clang-cl.exe" if name == "clang-cl" else None)
    assert precision.compile_module(model)[1] is None


def test_a_name_that_differs_from_a_saved_one_only_in_case_is_refused(checkpoint_dir):
    from minitf_repl.core.errors import CheckpointError
    from test_commands import run, tiny_session

    s = tiny_session(steps=2)
    run(s, ":train")
    run(s, ":save run1")
    run(s, ":set d_model=48")  # another model: on a Mac, :save Run1 wrote it over run1
    run(s, ":train")
    with pytest.raises(CheckpointError, match=r"^'run1' is in .* already, and on macOS and Windows 'Run1' is the same "
                                              r"folder; save under run1 to replace it, or choose another name$"):
        run(s, ":save Run1")
    with pytest.raises(CheckpointError, match="'run1' is in"):
        run(s, ":train steps=1 save=RUN1")
    assert sorted(p.name for p in checkpoint_dir.iterdir() if not p.name.startswith(("autosave", "."))) == ["run1"]
    run(s, ":save run1")  # the same name replaces it, as ever


# --- a Windows path in double quotes ------------------------------------------------------------------------------
@pytest.mark.parametrize("line, key, path", [
    (r':data "C:\Users\me\new notes.txt"', "name", r"C:\Users\me\new notes.txt"),  # Explorer's "Copy as path"
    (r':train steps=3 data="D:\temp\x.txt"', "data", r"D:\temp\x.txt"),
    (r':save "hf:C:\models\new gpt2"', "name", r"hf:C:\models\new gpt2"),
    (r':report "\\nas\lab\new\report.html"', "path", r"\\nas\lab\new\report.html"),
])
def test_a_quoted_windows_path_keeps_its_backslashes(line, key, path):
    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.parsing import parse_line

    assert parse_line(line, REGISTRY)[1][key] == path  # was read with a newline for \n and a tab for \t


def test_a_quoted_text_still_takes_its_escapes():
    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.parsing import parse_line

    assert parse_line(r':gen "a\nb\t\"q\"\\"', REGISTRY)[1]["prompt"] == 'a\nb\t"q"\\'
    assert parse_line(r':gen "Q:\nA:"', REGISTRY)[1]["prompt"] == "Q:\nA:"  # a prompt, not a path: its newline
    assert parse_line(r':gen "C:\new"', REGISTRY)[1]["prompt"] == "C:\new"  # :gen takes no path: escapes as ever


def test_a_prompt_a_message_quotes_reads_back_as_it_is():
    from minitf_repl.commands.base import REGISTRY
    from minitf_repl.parsing import parse_line
    from minitf_repl.syntax import PromptText, cmd

    texts = (r"C:\Users\me\new notes.txt", "C:\\a\nb", '\\\\srv\\x "q"', "hf:C:\\t\tx", 'say "hi"\n', r"back\slash")
    for text in texts:
        line = cmd("gen", PromptText(text))  # as a message writes the line to type
        assert parse_line(line, REGISTRY)[1]["prompt"] == text, line


# --- out of memory on Windows -------------------------------------------------------------------------------------
def windows_cpu_allocation_failure():
    """What torch's CPU allocator raises on Windows (c10/core/impl/alloc_cpu.cpp's _aligned_malloc branch)."""
    raise RuntimeError(r"[enforce fail at C:\actions-runner\_work\pytorch\c10\core\impl\alloc_cpu.cpp:81] data. "
                       "DefaultCPUAllocator: not enough memory: you tried to allocate 1073741824 bytes.")


def test_the_windows_cpu_allocators_refusal_is_out_of_memory(monkeypatch, checkpoint_dir):
    from minitf_repl.core.errors import UserError
    from test_commands import run, tiny_session

    session = tiny_session()
    run(session, ":train steps=2")
    step = session.trainer.step
    embedding = session.model.token_embedding
    real_forward = embedding.forward
    calls = {"n": 0}

    def forward(idx):
        calls["n"] += 1
        if calls["n"] == 2:
            windows_cpu_allocation_failure()
        return real_forward(idx)

    monkeypatch.setattr(embedding, "forward", forward)
    with pytest.raises(UserError, match=r"^out of memory at step 4; the model, optimizer, run and settings are back"):
        run(session, ":train steps=5")  # was: internal error: RuntimeError: [enforce fail at ...alloc_cpu.cpp:81]
    assert session.trainer.step == step
    monkeypatch.setattr(embedding, "forward", lambda idx: windows_cpu_allocation_failure())
    with pytest.raises(UserError, match=r"^out of memory; lower batch_size, max_seq_len or the model size"):
        run(session, ":gen n=3")


# --- a text file Notepad saved, on Windows ------------------------------------------------------------------------
@pytest.mark.parametrize("encoding, said", [("cp1252", "it reads as Windows-1252 (Latin-1) text; "),
                                            ("utf-16-le", "is UTF-16-LE text (without a byte-order mark); convert it "
                                                          "to UTF-8: ")])
def test_a_text_notepad_saved_is_converted_with_notepad_on_windows(tmp_path, monkeypatch, encoding, said):
    from minitf_repl.core import data
    from minitf_repl.core.errors import DataError

    path = tmp_path / "notes.txt"
    path.write_bytes("un café, déjà vu, naïve.\n".encode(encoding) * 20)
    monkeypatch.setattr(data, "on_windows", lambda: True, raising=False)  # core.paths.on_windows, as data.py has it
    with pytest.raises(DataError) as e:
        data.read_text_file(str(path))
    message = str(e.value)
    assert said in message and message.endswith("open it in Notepad and save it again as UTF-8 (File, Save as, "
                                                "Encoding: UTF-8)")
    assert "iconv" not in message  # Windows has none, and its prompt reads no '...' quoting


# --- :save hf: into a folder a desktop's file browser made --------------------------------------------------------
@pytest.mark.parametrize("litter", [".DS_Store", "Thumbs.db", "desktop.ini"])
def test_save_hf_writes_into_a_folder_that_holds_only_a_file_browsers_settings(tmp_path, checkpoint_dir, litter):
    from minitf_repl.core.errors import CheckpointError
    from test_commands import run, tiny_session

    s = tiny_session(data="sort:4", steps=2)
    run(s, ":set activation=gelu_tanh")
    run(s, ":train")
    folder = tmp_path / "my model"
    folder.mkdir()
    (folder / litter).write_bytes(b"\x00\x00\x00\x01Bud1")  # made in Finder or Explorer, then shown there
    run(s, f":save 'hf:{folder}'")  # was: "exists and is not an empty folder; choose a new path"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                        "tokenizer_config.json"]
    other = tmp_path / "notes"
    other.mkdir()
    (other / litter).write_bytes(b"x")
    (other / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="exists and is not an empty folder"):
        run(s, f":save 'hf:{other}'")  # anything else in it is someone's: nothing is overwritten


def test_a_pair_of_names_saved_before_the_check_still_saves_under_each(checkpoint_dir):
    from test_commands import run, tiny_session

    s = tiny_session(steps=2)
    run(s, ":train")
    run(s, ":save run1")
    import shutil

    shutil.copytree(checkpoint_dir / "run1", checkpoint_dir / "Run1")  # a pair, as Linux let it be made
    run(s, ":save Run1")
    run(s, ":save run1")  # each replaces itself, as before
    assert {"run1", "Run1"} <= {p.name for p in checkpoint_dir.iterdir()}


# --- a save lock left by a minitf killed on Windows ---------------------------------------------------------------
@pytest.mark.parametrize("pid_gone, breaks", [(True, True), (False, False)])
def test_a_lock_left_by_a_dead_minitf_on_windows_is_broken(tmp_path, monkeypatch, pid_gone, breaks):
    import json

    from minitf_repl.core.checkpoint import locks
    from minitf_repl.core.errors import CheckpointError

    monkeypatch.setattr(locks, "fcntl", None)  # Windows: the exclusive-create lock only
    monkeypatch.setattr(locks, "on_windows", lambda: True, raising=False)
    monkeypatch.setattr(locks, "_boot_id", lambda: "")  # no /proc: no boot id, no PID namespace
    monkeypatch.setattr(locks, "_pid_namespace", lambda: "")
    monkeypatch.setattr(locks, "windows_process_gone", lambda pid: pid == 4242 and pid_gone, raising=False)
    record = {**locks.lock_owner(), "token": "0" * 16, "pid": 4242}  # this host, another process
    (tmp_path / locks.HELD_FILE).write_text(json.dumps(record))
    if breaks:
        with locks.folder_lock(tmp_path, wait=0.5):  # was: "is busy: minitf on HOST (pid 4242) ..." after the wait
            assert json.loads((tmp_path / locks.HELD_FILE).read_text())["token"] == locks.PROCESS_TOKEN
        assert not (tmp_path / locks.HELD_FILE).exists()
    else:  # still running (or its pid taken by another program): waited for, never broken
        with pytest.raises(CheckpointError, match=r"is busy: minitf on .* \(pid 4242\)"):
            with locks.folder_lock(tmp_path, wait=0.3):
                pass


def test_where_the_system_is_not_windows_no_pid_is_judged_gone():
    from minitf_repl.core.checkpoint.locks import windows_process_gone

    assert windows_process_gone(os.getpid()) is False and windows_process_gone(2**22 - 1) is False


# --- an Apple GPU's random stream ---------------------------------------------------------------------------------
def test_the_random_state_a_run_draws_from_on_an_apple_gpu_is_kept_and_put_back(monkeypatch):
    """:compare keeps each contender's stream with it (core.train.random_state): on mps, dropout's masks come from the
    Apple GPU's generator, which was left out. torch's mps generator is stood in for (this torch has no MPS)."""
    import torch

    from minitf_repl.core.train import random_state, set_random_state

    stream = {"state": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda *a, **k: stream["state"].clone())
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda state, *a, **k: stream.update(state=state.clone()))
    kept = random_state(torch.device("mps"))
    stream["state"] = torch.tensor([9, 9, 9], dtype=torch.uint8)  # a rival drew from it meanwhile
    set_random_state(kept, "mps")
    assert stream["state"].tolist() == [1, 2, 3]  # was: left as the rival had it
    assert random_state("cpu")[1] is None  # the CPU's alone, as before


def test_lr_find_leaves_an_apple_gpus_random_stream_as_it_was(monkeypatch):
    """:lr-find (and :checks, :compare) draw in a random state of their own: on mps the Apple GPU's generator, which
    dropout's masks come from there, was left out of the fork, and the session's next :train drew other masks."""
    import torch

    from minitf_repl.core.train import fork_random

    stream = {"state": torch.tensor([1, 2, 3], dtype=torch.uint8)}
    monkeypatch.setattr(torch.mps, "get_rng_state", lambda *a, **k: stream["state"].clone())
    monkeypatch.setattr(torch.mps, "set_rng_state", lambda state, *a, **k: stream.update(state=state.clone()))
    with fork_random(torch.device("mps")):
        stream["state"] = torch.tensor([7, 7, 7], dtype=torch.uint8)  # the test's own draws
    assert stream["state"].tolist() == [1, 2, 3]


# --- guards: what was checked and found fine ----------------------------------------------------------------------
WITHOUT_POSIX = r'''
import os, signal, sys
for name in ("fcntl", "resource", "termios", "pwd", "grp", "tty", "readline"):
    sys.modules[name] = None  # an import of it raises ImportError, as on Windows
for name in ("SIGWINCH", "SIGHUP", "SIGALRM", "SIGQUIT", "SIGTSTP", "SIGPIPE", "setitimer"):
    if hasattr(signal, name):
        delattr(signal, name)
for name in ("sched_getaffinity", "getuid", "fork", "pread", "pwrite", "getpgrp", "tcgetpgrp", "statvfs"):
    if hasattr(os, name):
        delattr(os, name)
import importlib, pkgutil
import minitf_repl
failed = []
for module in pkgutil.walk_packages(minitf_repl.__path__, "minitf_repl."):
    try:
        importlib.import_module(module.name)
    except Exception as e:
        failed.append(f"{module.name}: {e!r}")
print(failed)
'''


def test_every_module_imports_without_the_posix_modules_windows_lacks():
    """A guard (it passed before this sweep): fcntl, resource, termios, pwd and grp are imported where needed, inside
    a try, and the signals and os functions Windows lacks are asked for by name."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WITHOUT_POSIX], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


@pytest.mark.parametrize("amx, avx512_bf16, native", [(False, False, False), (True, False, True), (False, True, True)])
def test_native_bf16_on_a_laptop_without_proc_is_torchs_answer(monkeypatch, amx, avx512_bf16, native):
    """A guard: dtype=auto's question asks torch's own probes (cpuinfo's, on every system), not /proc/cpuinfo, so a
    Windows laptop's Zen 4 answers yes and an Apple silicon Mac (whose CPU has no AMX tiles nor AVX512-BF16, and
    whose float32 products go to Accelerate) answers no."""
    import torch

    from minitf_repl.core import device
    from minitf_repl.core.precision import training_dtype

    without_proc(monkeypatch)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    device._native_bf16.cache_clear()
    try:
        assert device.native_bf16("cpu") is native
        assert training_dtype("auto", "cpu") == ("bfloat16" if native else "float32")
    finally:
        device._native_bf16.cache_clear()
