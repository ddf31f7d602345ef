"""A machine that says no: what a user saw where the environment refused, and what happens now.

In a container with a memory limit (`docker run -m 2g` on a bigger host), /proc/meminfo is the host's: the check that
refuses a training that cannot fit before anything is allocated read 60 GiB free where the container had 2, let a
training that needed 5 start, and the kernel then ended the whole session (its unsaved work with it) at the limit.
The memory free is now the least of MemAvailable and what the cgroup's limit leaves (v2 and v1), so :train refuses
it in one line that says how much is free and what to lower.
The project folder deleted under a running shell (`rm -rf` in another terminal): `:save hf:exported` ended in
"internal error: FileNotFoundError" (its own message asked for the current folder's path), and `:data notes.txt`,
`:report r.html` and `:load hf:x` said "No such file or directory; check the path" (the report after its work) of a
path that no check could mend. A relative path there is now refused first, in one line: the folder minitf runs in no
longer exists, give an absolute path; an absolute one still works.
Where torch refuses a thread count (a build without OpenMP, a host program that fixed its pool), every command that
needed torch (:train, :device, :gen) ended in "internal error: RuntimeError", the session unusable; one that kept its
count without a word was shown as taking the one asked. torch computes with the count it has now, and :device says
the count asked was not taken and why.
`:save hf:PATH` on a full disk (or under a file-size limit) ended in "internal error: SafetensorError: Error while
serializing: I/O error": safetensors' and tokenizers' own writers raise their own exceptions, not OSError. The folder's
files are now written by Python: one line says the folder could not be written, and nothing is left behind.
With $HOME unset and a uid with no passwd entry (`docker run -u 1234`), a path starting with ~ names nothing and
pathlib raises RuntimeError: $MINITF_CHECKPOINT_DIR=~/runs (an image's ENV line) or `--checkpoint-dir ~/ck` was a
traceback as the shell started, and `:data ~/notes.txt`, `:report ~/r.html`, `:save hf:~/x` internal errors. Each is
now one line naming the path (or the variable that gave it): there is no home folder; give the path in full or set
$HOME. $MINITF_CACHE_DIR and $MINITF_HISTORY so too (the history then stays in memory, as it does for any other
history file it cannot use).
`:lrfind` trains a fresh model beside the session's on :train's batch, and asked nothing of the memory free: where
:train was refused in one line (the batch cannot fit), :lrfind went ahead and the out-of-memory killer ended the whole
session. It is now refused first, as :train and :compare's contenders are.
With COLUMNS=0 (a CI runner or a container with no terminal size exports it), Rich took a width of 0 and printed
every line as nothing: `minitf ls`, `minitf config`, the REPL and the errors too (`minitf bogus` said nothing and
exited 2). A size of 0 is now taken as no size given: the terminal's, or 80 columns off one.
A checkpoint loaded while its data file was gone trains on nothing, and :train said "the data this model was trained
on is not available; put the file back to train". Put back, the file was still "not available" until the checkpoint
was loaded a second time. :train now reads it again where it has the model's vocabulary, says so, and trains.
Where the machine could not give a model or batch its memory (a container's limit, `ulimit -v`), torch's CPU
allocator says "DefaultCPUAllocator: can't allocate memory ... (Cannot allocate memory)", with no "out of memory" in
it: :gen of a model too large was "internal error: RuntimeError: [enforce fail at alloc_cpu.cpp:127]", and a :train
step the same after its rollback. Both are now the out-of-memory line with its fix (the train's says the model, run
and settings are back where it began).
A kept copy of tiny Shakespeare that this user may not read (a $MINITF_CACHE_DIR shared with another user, whose
file is mode 600) made `:data shakespeare` "internal error: PermissionError". It is now one line naming the file,
with the fix: remove it, or set MINITF_CACHE_DIR to a folder of one's own.
A model within the lab's bounds (up to 500M parameters, 2 GiB of weights) but past what a small machine or container
has free was built without a question by the first command that needed it (`:set d_model=2048 n_layers=8`, then
:gen), and the out-of-memory killer ended the session; only :train asked. Its weights are now checked against the
memory free before they are allocated: the first build, and a :set that rebuilds (refused before anything changes).
A history path under a file ($XDG_STATE_HOME or $MINITF_HISTORY's folder a file) warned "cannot use history file
.../state/minitf/history (Not a directory)" (or "(File exists)"), naming no file in the way: it names that file now.
On a file system that cannot sync a directory (POSIX allows EINVAL: a VirtualBox shared folder, some FUSE and network
mounts), every save failed, "could not save checkpoint 'run1': Invalid argument", and so did every :train's autosave:
no checkpoint could ever be written there. A directory that cannot be synced is now taken as such (its files still
are); any other failure to sync still fails the save, leaving nothing.
"""

import pytest

from minitf_repl.core import memory
from minitf_repl.core.errors import UserError

from test_cli import assert_one_error_line, invoke
from test_commands import run, tiny_session

GiB = 2**30


def cgroup_v2(root, limit, current, inactive=0):
    root.mkdir(parents=True, exist_ok=True)
    (root / "memory.max").write_text(f"{limit}\n")
    (root / "memory.current").write_text(f"{current}\n")
    (root / "memory.stat").write_text(f"anon {current}\nfile 0\ninactive_file {inactive}\nactive_file 0\n")
    return root


def meminfo(tmp_path, available):
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       99999999 kB\nMemFree:        1 kB\nMemAvailable:   {available // 1024} kB\n")
    return path


# --- a container's memory limit --------------------------------------------------------------------------------
def test_the_memory_free_is_what_a_containers_limit_leaves(tmp_path):
    host = meminfo(tmp_path, 60 * GiB)
    v2 = cgroup_v2(tmp_path / "v2", 2 * GiB, GiB + GiB // 2, inactive=GiB // 4)  # the file cache it reclaims: free
    assert memory.available_memory(host, v2) == GiB // 2 + GiB // 4
    assert memory.available_memory(host, cgroup_v2(tmp_path / "free", "max", GiB)) == 60 * GiB  # no limit
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{4 * GiB}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{GiB}\n")
    assert memory.available_memory(host, v1.parent) == 3 * GiB
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert memory.available_memory(host, v1.parent) == 60 * GiB
    assert memory.available_memory(host, tmp_path / "none") == 60 * GiB  # no cgroup files: the host's word
    assert memory.available_memory(tmp_path / "no-meminfo", v2) == GiB // 2 + GiB // 4  # no /proc: the limit's
    assert memory.available_memory(host, cgroup_v2(tmp_path / "small", GiB, 2 * GiB)) == 0  # over it already


def test_the_limit_of_this_process_own_cgroup_below_the_root_counts(tmp_path):
    own = tmp_path / "self-cgroup"  # /proc/self/cgroup: a systemd slice, a container without a cgroup namespace
    own.write_text("0::/user.slice/session-3.scope\n")
    root = tmp_path / "cgroup"
    cgroup_v2(root / "user.slice", 4 * GiB, GiB)  # the slice's MemoryMax: 3 GiB left
    cgroup_v2(root / "user.slice" / "session-3.scope", "max", GiB)
    assert memory.cgroup_memory_left(root, own) == 3 * GiB
    (root / "user.slice" / "session-3.scope" / "memory.max").write_text(f"{GiB + GiB // 2}\n")  # less below it
    assert memory.cgroup_memory_left(root, own) == GiB // 2
    own.write_text("12:cpu,cpuacct:/x\n4:memory:/docker/abc\n")  # v1: the memory controller's line
    v1 = root / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2 * GiB}\n")
    (v1 / "memory.usage_in_bytes").write_text(f"{GiB // 2}\n")
    (v1 / "memory.stat").write_text(f"cache 5\ntotal_inactive_file {GiB // 4}\n")
    assert memory.cgroup_memory_left(root, own) == GiB + GiB // 2 + GiB // 4


def test_train_in_a_full_container_is_refused_in_one_line_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "CGROUP", cgroup_v2(tmp_path / "cg", 512 * 2**20, 512 * 2**20))  # all of it used
    session = tiny_session()
    with pytest.raises(UserError, match=r"this machine has 0\.0 GiB free; lower batch_size or max_seq_len") as e:
        run(session, ":train")
    assert "\n" not in str(e.value)
    assert not session.has_model


# --- the folder minitf runs in, deleted under it ---------------------------------------------------------------
@pytest.fixture
def deleted_cwd(tmp_path, monkeypatch):
    """The shell's folder removed under it (`rm -rf` of the project in another terminal), as it runs."""
    here = tmp_path / "project"
    here.mkdir()
    monkeypatch.chdir(here)
    here.rmdir()
    return tmp_path


GONE = "the folder minitf runs in no longer exists (deleted or moved), and a relative path is read from it; give an " \
       "absolute path"


@pytest.mark.parametrize("line, says", [(":save hf:exported", "cannot write exported: "),
                                        (":load hf:exported", "cannot read exported: "),
                                        (":data notes.txt", "cannot read notes.txt: "),
                                        (":report r.html", "cannot write r.html: ")])
def test_a_relative_path_in_a_deleted_folder_is_said_so_in_one_line(deleted_cwd, line, says):
    session = tiny_session()
    run(session, ":train steps=1")
    with pytest.raises(UserError) as e:
        run(session, line)
    assert str(e.value).endswith(says + GONE), str(e.value)
    assert session.trainer.step == 1 and session.data_spec == "sort:4"  # the session goes on as it was


def test_an_absolute_path_still_works_where_the_folder_was_deleted(deleted_cwd):
    session = tiny_session()
    run(session, ":train steps=1")
    run(session, f":save hf:{deleted_cwd / 'exported'}")
    assert (deleted_cwd / "exported" / "config.json").is_file()
    notes = deleted_cwd / "notes.txt"
    notes.write_text("some text to read, and more of it. " * 20)
    run(session, f":data {notes}")
    assert session.data_spec == str(notes)


# --- torch.set_num_threads refused ----------------------------------------------------------------------------
# (each patch is undone inside the test: conftest's one_thread sets torch's count back after it)
def test_a_thread_count_torch_refuses_leaves_the_session_working_and_says_so(monkeypatch):
    import torch

    def refuse(n):
        raise RuntimeError("set_num_threads: the thread pool is fixed by the host program")

    have = torch.get_num_threads()
    with monkeypatch.context() as m:
        m.setattr(torch, "set_num_threads", refuse)
        session = tiny_session()
        run(session, f":set threads={have + 1}")
        run(session, ":train steps=2")  # it was an internal error, in every command that needed torch
        device = run(session, ":device")
    assert session.trainer.step == 2
    assert device.threads == have
    assert device.threads_why == (f"threads={have + 1} not taken by torch: set_num_threads: the thread pool is fixed "
                                  f"by the host program; it computes with the {have} it has")


def test_a_thread_count_torch_keeps_without_a_word_is_not_shown_as_taken(monkeypatch):
    import torch

    have = torch.get_num_threads()
    with monkeypatch.context() as m:
        m.setattr(torch, "set_num_threads", lambda n: None)  # a build without OpenMP: the call does nothing
        session = tiny_session()
        run(session, f":set threads={have + 1}")
        device = run(session, ":device")
    assert device.threads == have
    assert device.threads_why == f"threads={have + 1} not taken by torch; it computes with the {have} it has"


# --- a full disk --------------------------------------------------------------------------------------------------
FULL_DISK_SAVE = r"""
import resource, sys
from pathlib import Path
from minitf_repl.core.config import ModelConfig
from minitf_repl.core.data import CharTokenizer
from minitf_repl.core.errors import UserError
from minitf_repl.core.hf import save_folder
from minitf_repl.core.model import MiniTransformerLM

tokenizer = CharTokenizer("0123456789=")
model = MiniTransformerLM(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=64, max_seq_len=32, vocab_size=11))
resource.setrlimit(resource.RLIMIT_FSIZE, (20 * 1024, resource.RLIM_INFINITY))  # the weights are more: a full disk
try:
    save_folder(model, tokenizer, Path(sys.argv[1]))
except UserError as e:
    print("refused:", e)
"""


def test_a_hugging_face_folder_on_a_full_disk_is_refused_in_one_line_and_leaves_nothing(tmp_path):
    import os
    import subprocess
    import sys

    target = tmp_path / "exported"
    done = subprocess.run([sys.executable, "-c", FULL_DISK_SAVE, str(target)], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr[-2000:]  # it was SafetensorError, an internal error
    assert done.stdout == f"refused: could not write {target}: File too large; choose a writable place\n"
    assert list(tmp_path.iterdir()) == []  # no folder, no temporary one beside it


# --- no home folder for ~ ---------------------------------------------------------------------------------------
@pytest.fixture
def no_home(monkeypatch):
    """$HOME unset and a uid with no passwd entry (`docker run -u 1234`): ~ names nothing (pathlib: RuntimeError)."""
    import pwd

    def no_entry(uid):
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.delenv("HOME", raising=False)
    monkeypatch.setattr(pwd, "getpwuid", no_entry)


NO_HOME = ("starts with ~, the home folder, and there is none here ($HOME is not set); give the path in full, or set "
           "$HOME")


def test_a_checkpoint_folder_under_a_missing_home_is_one_line_as_the_shell_starts(no_home, monkeypatch):
    line = assert_one_error_line(invoke("--checkpoint-dir", "~/ck", "ls"))  # it was a traceback
    assert line == f"error: ~/ck {NO_HOME}"
    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", "~/runs")  # an image's ENV line, quoted
    line = assert_one_error_line(invoke("ls"))
    assert line == f"error: $MINITF_CHECKPOINT_DIR=~/runs {NO_HOME}"
    line = assert_one_error_line(invoke("--checkpoint-dir", "/tmp", "--data", "~/notes.txt", "--set", "lr=0.02",
                                        "config"))
    assert line == f"error: --data: ~/notes.txt {NO_HOME}"


@pytest.mark.parametrize("line, named", [(":data ~/notes.txt", "~/notes.txt"), (":report ~/r.html", "~/r.html"),
                                         (":save hf:~/exported", "hf:~/exported"),
                                         (":load hf:~/exported", "hf:~/exported")])
def test_a_path_under_a_missing_home_is_refused_in_one_line_and_the_session_goes_on(no_home, line, named):
    session = tiny_session()
    run(session, ":train steps=1")
    with pytest.raises(UserError) as e:  # it was an internal error: RuntimeError
        run(session, line)
    assert str(e.value) == f"{named} {NO_HOME}"
    assert session.trainer.step == 1 and session.data_spec == "sort:4"


def test_a_cache_or_history_under_a_missing_home_is_named_by_its_variable(no_home, monkeypatch):
    from minitf_repl.core import paths

    monkeypatch.setenv("MINITF_CACHE_DIR", "~/cache")
    monkeypatch.setenv("MINITF_HISTORY", "~/history")
    with pytest.raises(UserError, match=r"^\$MINITF_CACHE_DIR=~/cache starts with ~"):
        paths.cache_dir()
    with pytest.raises(UserError, match=r"^\$MINITF_HISTORY=~/history starts with ~"):
        paths.history_path()


def test_lrfind_with_a_batch_that_cannot_fit_is_refused_before_its_fresh_model_is_built(tmp_path, monkeypatch):
    from minitf_repl.core import sizes

    session = tiny_session()
    run(session, ":train steps=1")
    monkeypatch.setattr(sizes, "available_memory", lambda: 0)  # :train is refused so; the test trained regardless
    with pytest.raises(UserError, match=r"^training with batch_size=4, max_seq_len=32 and this model would need about "
                                        r".* GiB free; lower batch_size or max_seq_len, or choose a smaller model$"):
        run(session, ":lrfind steps=10")
    with pytest.raises(UserError, match="GiB free; lower batch_size"):
        run(session, ":train steps=1")
    assert session.trainer.step == 1


# --- COLUMNS=0 ---------------------------------------------------------------------------------------------------
def test_a_terminal_size_of_0_still_shows_the_output_and_the_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "0")  # a CI runner or a container with no terminal size
    monkeypatch.setenv("LINES", "0")
    result = invoke("--checkpoint-dir", str(tmp_path), "ls")
    assert result.exit_code == 0 and "no checkpoints in" in result.output  # it printed nothing at all
    line = assert_one_error_line(invoke("--checkpoint-dir", str(tmp_path), "bogus"), code=2)
    assert "unknown command 'bogus'" in line


# --- a data file that vanishes, and comes back -------------------------------------------------------------------
def test_a_data_file_put_back_as_the_refusal_says_is_trained_on(tmp_path, monkeypatch):
    from test_commands import Recorder, TEXT

    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "ck"))
    notes = tmp_path / "notes.txt"
    notes.write_text(TEXT)
    first = tiny_session(data=str(notes))
    run(first, ":train steps=2")
    run(first, ":save run1")
    notes.unlink()
    session = tiny_session()
    run(session, ":load run1")
    with pytest.raises(UserError, match="is not available; put the file back to train"):
        run(session, ":train steps=2")
    notes.write_text(TEXT + "Zebra\n")  # another vocabulary (Z): not the original, which :load too would refuse
    with pytest.raises(UserError, match="is not available; put the file back to train"):
        run(session, ":train steps=2")
    assert session.trainer.step == 2
    notes.write_text(TEXT)  # the original, back
    hooks = Recorder()
    run(session, ":train steps=2", hooks)  # it went on saying "not available" until a second :load
    assert session.trainer.step == 4
    assert f"read {notes} again: the file the model was trained on is back" in hooks.notices


# --- memory the machine cannot give ------------------------------------------------------------------------------
def a_real_cpu_allocation_failure():
    """What torch's CPU allocator raises where malloc says no (a container's limit, `ulimit -v`): asked here for more
    bytes than any machine has, so that the error is torch's own, not a message written for the test."""
    import torch

    torch.empty(2**60, dtype=torch.uint8)


def test_the_cpu_allocators_refusal_is_out_of_memory_in_a_train_and_in_any_command(monkeypatch):
    session = tiny_session()
    run(session, ":train steps=2")
    step, history = session.trainer.step, list(session.trainer.history)
    embedding = session.model.token_embedding
    real_forward = embedding.forward
    calls = {"n": 0}

    def forward(idx):
        calls["n"] += 1
        if calls["n"] == 2:  # one step applies, the next cannot have its memory
            a_real_cpu_allocation_failure()
        return real_forward(idx)

    monkeypatch.setattr(embedding, "forward", forward)
    with pytest.raises(UserError, match=r"^out of memory at step 4; the model, optimizer, run and settings are back"):
        run(session, ":train steps=5")  # it was "internal error: RuntimeError: [enforce fail at alloc_cpu.cpp...]"
    assert session.trainer.step == step and session.trainer.history == history
    monkeypatch.setattr(embedding, "forward", lambda idx: a_real_cpu_allocation_failure())
    with pytest.raises(UserError, match=r"^out of memory; lower batch_size, max_seq_len or the model size"):
        run(session, ":gen n=3")


# --- a download cache another user keeps -------------------------------------------------------------------------
def test_a_kept_copy_of_tiny_shakespeare_this_user_cannot_read_is_one_line(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    from minitf_repl.core import data as core_data

    kept = tmp_path / "tinyshakespeare.txt"
    kept.write_text("another user's copy")
    monkeypatch.setenv("MINITF_CACHE_DIR", str(tmp_path))
    real_read = Path.read_bytes

    def read_bytes(path):
        if path == kept:  # mode 600, another user's (chmod does not stop root, which runs these tests too)
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_read(path)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    session = tiny_session()
    with pytest.raises(UserError) as e:  # it was "internal error: PermissionError"
        run(session, ":data shakespeare")
    said = str(e.value)  # the path is clipped to 80 characters, as core.data's paths are
    assert said.startswith("cannot read the kept copy of tiny Shakespeare, /") and "\n" not in said
    assert said.endswith("(Permission denied); remove it, or set MINITF_CACHE_DIR to a folder of your own")
    assert session.data_spec == "sort:4"


def test_a_model_whose_weights_cannot_fit_is_refused_before_it_is_built(monkeypatch):
    from minitf_repl.core import sizes

    monkeypatch.setattr(sizes, "available_memory", lambda: 2**20)  # 1 MiB free: the tiny model's 44 KB fit
    session = tiny_session()
    run(session, ":set d_model=256 n_heads=4 d_ff=1024 n_layers=4")  # about 3M parameters: 12 MiB of weights
    weights = r"that model's weights would take about 0\.0 GiB, but this machine has 0\.0 GiB free; lower d_model"
    with pytest.raises(UserError, match=weights):  # it was built: past the memory free, the out-of-memory killer
        run(session, ":gen n=3")
    assert not session.has_model
    run(session, ":set d_model=32 n_heads=2 d_ff=64 n_layers=1")
    run(session, ":train steps=1")
    with pytest.raises(UserError, match=weights):  # a rebuild: refused before anything changes
        run(session, ":set d_model=256 n_heads=4 d_ff=1024 n_layers=4")
    assert session.model_config.d_model == 32 and session.trainer.step == 1


# --- a history file under a file ---------------------------------------------------------------------------------
def test_a_history_path_under_a_file_says_which_file_is_in_the_way(tmp_path, monkeypatch):
    from prompt_toolkit.history import InMemoryHistory

    from minitf_repl.repl import make_history

    monkeypatch.chdir(tmp_path)  # relative paths: the message clips long ones
    (tmp_path / "state").write_text("")  # $XDG_STATE_HOME=state, a file: the history would go in state/minitf
    said = []
    history = make_history("state/minitf/history", said.append)
    assert isinstance(history, InMemoryHistory)
    assert said == ["warning: cannot use history file state/minitf/history (state is a file, not a folder); history "
                    "is kept in memory for this session; $MINITF_HISTORY=FILE keeps it in another file"]
    # it said "(Not a directory)", or "(File exists)" one level down, and named no file


# --- a file system that cannot sync a directory ----------------------------------------------------------------
def test_saves_work_on_a_file_system_that_cannot_sync_a_directory(tmp_path, monkeypatch):
    import errno
    import os
    import stat

    monkeypatch.setenv("MINITF_CHECKPOINT_DIR", str(tmp_path / "ck"))
    real_fsync = os.fsync

    def fsync(fd):  # a VirtualBox shared folder, some FUSE mounts: EINVAL for a directory, files sync
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    session = tiny_session()
    run(session, ":train steps=2")  # its autosave failed: "could not save checkpoint 'autosave': Invalid argument"
    run(session, ":save run1")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["autosave", "run1"]
    again = tiny_session()
    run(again, ":load run1")
    assert again.trainer.step == 2

    def broken(fd):  # a real failure to sync is still one: the save fails and leaves nothing
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(UserError, match="could not save checkpoint 'run2' in .*: Input/output error"):
        run(session, ":save run2")
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["autosave", "run1"]
