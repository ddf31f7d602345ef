"""The folder lock: every save and rotation in DIR holds it, so concurrent saves take turns.

`flock` on DIR/.minitf.lock where the file system has it (the kernel releases it when its holder
dies, however it dies), else an exclusive-create file DIR/.minitf.lock.held whose owner (a random
token, the host, the pid, the PID namespace and the boot) is written into it, so that a lock left
by a dead process is recognised on the host and in the PID namespace it came from and nowhere else
(on Windows, which has neither a boot id nor PID namespaces, on the host whose pid it names is gone).
A save waits for the holder up to LOCK_WAIT seconds, but not for a holder of this machine that is stopped (Ctrl-Z):
that one goes on only when resumed, and the error says how (folder_lock._give_up_on_a_stopped_holder).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import stat
import time
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: the exclusive-create lock only
    fcntl = None

from ..errors import CheckpointError
from ..interrupts import may_cut_short
from ..paths import cut_middle, on_windows
from .layout import ANOTHER_DIR
from .reads import open_regular, read_open


LOCK_FILE = ".minitf.lock"  # flock()ed by every save into the folder (see the module docstring)
HELD_FILE = ".minitf.lock.held"  # the exclusive-create lock, where the file system has no flock
LOCK_WAIT = 120.0  # seconds a save waits for another save into the same folder before it gives up
WAIT_NOTICE = 1.0  # seconds of waiting after which `on_wait` hears who it waits for (a large save takes a while)
PROCESS_TOKEN = secrets.token_hex(8)  # this process, wherever its pid came from
BRIEF_WAIT = 0.1  # seconds of a wait too short to be another save's: a shared look at the lock (held_now)
# A holder stopped halfway through its save (Ctrl-Z in its terminal) goes on only when someone resumes it: a save that
# waited for it waited the whole LOCK_WAIT, then said "try again when that save is done", which failed the same way
# until someone typed `fg`. It is given up on once seen stopped this long (a moment's stop that goes on is waited for).
STOPPED_GRACE = 0.5
STOPPED_LOOK = 0.1  # seconds between two looks at whether the holder is stopped (two small reads in /proc)


def unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# flock() errors that mean "this file system cannot lock", not "someone holds the lock".
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP), errno.ENOSYS, errno.EINVAL}


def flock(fd: int) -> bool:
    """Try to take the flock on `fd` without waiting: True taken, False held by another; OSError else."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


class folder_lock:
    """`with folder_lock(DIR):` holds DIR's save lock (waiting up to `wait` seconds for it).

    Raises CheckpointError (one line naming the holder) when another save keeps it longer, and
    OSError when the lock file cannot be made at all (the caller words it). Not re-entrant: a
    second `folder_lock` of the same folder in the same process waits for the first, as another
    process would, so code that already holds it calls the `_locked` helpers.
    """

    def __init__(self, directory, wait: float | None = None, on_wait=None):
        self.directory = Path(directory)
        self.wait = LOCK_WAIT if wait is None else wait
        # called once, with one line, when the lock is still held by another after WAIT_NOTICE seconds: a save
        # that waited silently (up to LOCK_WAIT) for another session's looked as if minitf had hung
        self.on_wait = on_wait
        self._fd: int | None = None
        self._held: Path | None = None
        self._told = False
        self._stopped_since: float | None = None  # when the holder was first seen stopped (None: not now)
        self._next_look = 0.0
        # the seconds this lock was waited for before it was taken, and whose save it waited for (None: it was free),
        # for a save to say apart from its own time: "10.52 s" was mostly another session's save
        self.waited = 0.0
        self.waited_for: str | None = None

    def __enter__(self):
        deadline = time.monotonic() + self.wait
        self._since = time.monotonic()
        if fcntl is None or not self._enter_flock(deadline):
            self._enter_exclusive(deadline)
        if self.waited_for is not None:
            self.waited = time.monotonic() - self._since
            if self.waited < BRIEF_WAIT:  # an :ls's look at the lock (held_now): no one's save was waited for, and
                self.waited, self.waited_for = 0.0, None  # the lock file's last writer named was not who held it
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            # Removed while still held, so the folder keeps no lock file between saves; a waiter that
            # then gets the lock on the removed file sees that and opens the name again (_enter_flock).
            unlink(self.directory / LOCK_FILE)
            os.close(self._fd)  # releases the flock
            self._fd = None
        if self._held is not None:
            unlink(self._held)
            self._held = None

    def _enter_flock(self, deadline: float) -> bool:
        """Take the flock; False when this file system has none (the caller falls back)."""
        path = self.directory / LOCK_FILE
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
            | getattr(os, "O_CLOEXEC", 0)
        while True:
            fd, writable = _open_lock_file(path, flags)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    # the path whole, never clipped: it is one to act on
                    raise CheckpointError(f"{path} is not a regular file; remove it, then save again")
                while not flock(fd):
                    self._wait_or_give_up(deadline, path, fd=fd)
                if _same_file(fd, path):
                    if writable:
                        os.ftruncate(fd, 0)
                        os.pwrite(fd, _owner_bytes(), 0)  # for the message of whoever waits
                    self._fd = fd
                    return True
            except OSError as e:
                os.close(fd)
                if e.errno in _NO_LOCKS:
                    return False
                raise
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)  # the holder before us removed that file: lock the name anew

    def _enter_exclusive(self, deadline: float) -> None:
        path = self.directory / HELD_FILE
        while True:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
            except FileExistsError:
                judged = _identity(path)
                if judged is not None and _is_stale(path):
                    _break(path, judged)  # its owner died on this host, in this PID namespace, in this boot
                    continue
                self._wait_or_give_up(deadline, path, remove_hint=True)
                continue
            try:
                os.write(fd, _owner_bytes())
            finally:
                os.close(fd)
            self._held = path
            return

    def _wait_or_give_up(self, deadline: float, path: Path, remove_hint: bool = False, fd: int | None = None) -> None:
        flocked = not remove_hint  # the flock's file (HELD_FILE's waits say how to remove it)
        if self.waited_for is None:
            self.waited_for = _who(path, flocked)
        self._give_up_on_a_stopped_holder(path, fd)
        if self.on_wait is not None and not self._told and time.monotonic() - self._since >= WAIT_NOTICE:
            self._told = True
            # Ctrl-C stops the wait only where it raises at once (core.interrupts.cut_short): :train's autosave and
            # the model kept before a rebuild are saved whatever comes (a Ctrl-C there asks a stop that has come
            # already), and "Ctrl-C stops this save" was said there too, over a Ctrl-C that then did nothing
            stop = "; Ctrl-C stops this save" if may_cut_short() else ""
            self.on_wait(f"waiting for {_who(path, flocked)} to finish saving into {cut_middle(str(self.directory))} "
                         f"(up to {self.wait:.0f} s{stop})")
        if time.monotonic() >= deadline:
            who = _who(path, flocked)
            # whole, never clipped: it is a path to type (remove /tmp/a...b/.minitf.lock.held removes nothing)
            hint = f" (if no minitf is saving there, remove {path})" if remove_hint else ""
            raise CheckpointError(
                f"the checkpoint folder {cut_middle(str(self.directory))} is busy: {who} has been saving there for "
                f"more than {self.wait:.0f} s; try again when that save is done{hint}"
            )
        time.sleep(0.02)

    def _give_up_on_a_stopped_holder(self, path: Path, fd: int | None) -> None:
        """Raise CheckpointError where the lock's holder, a process of this machine, has been stopped (state T) for
        STOPPED_GRACE seconds: it holds the folder until someone resumes it, which the error says how to do."""
        now = time.monotonic()
        if now < self._next_look:
            return
        self._next_look = now + STOPPED_LOOK
        pid = _flock_holder(fd) if fd is not None else _owner_pid(path)
        if pid is None or _process_state(pid) != "T":
            self._stopped_since = None
            return
        if self._stopped_since is None:
            self._stopped_since = now
        if now - self._stopped_since < STOPPED_GRACE:
            return
        owner = _read_owner(path)
        who = (f"minitf on {owner.get('host', '?')} (pid {pid})" if owner and owner.get("pid") == pid
               else f"another minitf (pid {pid})")
        raise CheckpointError(
            f"the checkpoint folder {cut_middle(str(self.directory))} is busy: {who} is stopped (Ctrl-Z) halfway "
            f"through a save there, and holds it until it goes on; resume it (fg in its terminal, or kill -CONT "
            f"{pid}), or {ANOTHER_DIR}"
        )


def _flock_holder(fd: int) -> int | None:
    """The pid that holds the flock on the open file `fd`, as /proc/locks lists it (Linux, the pid as this process
    sees it; 0 there: of a PID namespace this one cannot see); None where that is not told. The owner written in the
    file may be an earlier holder's (_open_lock_file), never one to tell to resume."""
    try:
        st = os.fstat(fd)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    lock = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 16569 fe:00:2302496 0 EOF" ("1: -> FLOCK ...": a waiter)
        if len(fields) >= 6 and fields[1:2] == ["FLOCK"] and fields[3] == "WRITE" and fields[5] == lock:
            return int(fields[4]) if fields[4].isdigit() and int(fields[4]) > 0 else None
    return None


def _owner_pid(path: Path) -> int | None:
    """The pid of the exclusive-create lock's owner where it is a process of this machine that this process sees (this
    boot, this PID namespace), started before it took the lock (a pid reused since is someone else); None else."""
    owner, me = _read_owner(path), lock_owner()
    if not owner or not me["boot"] or not me["pidns"] or owner.get("token") == PROCESS_TOKEN or any(
            owner.get(key) != me[key] for key in ("host", "boot", "pidns")):
        return None
    pid, since = owner.get("pid"), owner.get("since")
    if not isinstance(pid, int) or pid <= 0 or not isinstance(since, (int, float)):
        return None
    started = _process_start(pid)
    return pid if started is not None and started <= since + 2 else None  # /proc/stat's btime is whole seconds


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (the third field: the name before it may hold spaces); None where
    there is no such process or no /proc."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2:].split() or None


def _process_state(pid: int) -> str | None:
    """A process's state letter (R running, S sleeping, T stopped, ...); None where it is not told."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _process_start(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch (its starttime after the boot's btime); None where not
    told."""
    fields = _stat_fields(pid)
    try:
        with open("/proc/stat", encoding="ascii", errors="replace") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, ValueError, IndexError, TypeError):
        return None


def held_now(directory: Path) -> bool:
    """Whether a save holds DIR's lock at this moment (True too where that cannot be told): while none does, every
    temporary file of a save in the folder is a dead one's (debris.leftovers). Looked at without taking the lock:
    a shared flock, given back at once, which no save waits on longer than its next try (20 ms)."""
    held = directory / HELD_FILE
    if os.path.lexists(held) and not _is_stale(held):
        return True
    if fcntl is None:
        return False
    try:
        fd = os.open(directory / LOCK_FILE, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False  # a save holds the file it locks until it is done
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError as e:
        return e.errno not in _NO_LOCKS  # no flock on this file system: HELD_FILE told
    finally:
        os.close(fd)  # gives the shared lock back
    return False


def _open_lock_file(path: Path, flags: int) -> tuple[int, bool]:
    """The flock file opened, and whether it could be opened for writing.

    The file stays after every save. In a folder that two users share, it belongs to the first user who saved
    there (mode 0644), and the other user's saves were refused ("Permission denied; change the permissions of that
    directory"): the directory was not the problem, and no save of theirs ever worked there. flock takes a file
    opened for reading as well; the owner is then not written (a save that waits meanwhile names the file's last
    writer)."""
    try:
        return os.open(path, flags, 0o644), True
    except PermissionError:
        read_only = flags & ~(os.O_RDWR | os.O_CREAT) | os.O_RDONLY
        try:
            return os.open(path, read_only), False
        except FileNotFoundError:  # no file: the directory itself refused its creation
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path)) from None
        except PermissionError:
            raise CheckpointError(f"{path} belongs to another user and this user cannot read it; ask them to "
                                  "remove it or make it readable (chmod a+r), then save again") from None


def _identity(path: Path) -> tuple[int, dict | None] | None:
    """Which lock file is at `path` now (its inode and its owner), None where there is none."""
    try:
        ino = os.lstat(path).st_ino
    except OSError:
        return None
    return ino, _read_owner(path)


def _break(path: Path, judged: tuple[int, dict | None]) -> None:
    """Remove the stale lock at `path`, the one `judged` (_identity) and no other.

    Two saves that found the dead one's lock at once both judged it stale and both removed "it": the second removed
    the lock the first had just taken in its place, and the two saved into the folder together. The file is moved
    aside first (one rename: one of them moves it), removed if it is the one judged, and else put back: the lock of
    a live save, taken a moment ago.
    """
    aside = path.with_name(f"{path.name}.stale-{secrets.token_hex(6)}")
    try:
        os.rename(path, aside)
    except OSError:
        return  # gone: another save broke it, and holds the lock now or will
    if _identity(aside) != judged:
        try:
            os.link(aside, path)
        except OSError:
            pass
    unlink(aside)


def _who(path: Path, flocked: bool = False) -> str:
    """Who holds the lock at `path`, in words. The flock's file names the last holder that could write it: one whose
    file belongs to another user opens it read-only and leaves the owner before it there (_open_lock_file). A holder
    named that is gone (_is_stale: a process of this host that has ended) is not the one holding a flock, which the
    kernel releases with its holder: it was named all the same ("waiting for minitf on host (pid N)", N long ended)."""
    owner = _read_owner(path)
    if not owner or (flocked and _is_stale(path)):
        return "another minitf"
    return f"minitf on {owner.get('host', '?')} (pid {owner.get('pid', '?')})"


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the open file `fd` (a lock file may be removed by its last holder)."""
    try:
        a, b = os.fstat(fd), os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def lock_owner() -> dict:
    """Who holds a lock: unique across hosts, PID namespaces and reboots (the token alone is unique)."""
    return {"token": PROCESS_TOKEN, "host": socket.gethostname(), "pid": os.getpid(), "pidns": _pid_namespace(),
            "boot": _boot_id(), "since": time.time()}


def _owner_bytes() -> bytes:
    return json.dumps(lock_owner()).encode("utf-8")


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return ""


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def windows_process_gone(pid: int) -> bool:
    """Whether no process `pid` runs on this Windows machine; False wherever that cannot be told. A pid taken since
    by another program reads as running: the lock is then waited for, as before, never broken wrongly."""
    try:
        import ctypes
        from ctypes import wintypes

        kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)
        kernel32.OpenProcess.argtypes = (wintypes.DWORD, wintypes.BOOL, wintypes.DWORD)
        kernel32.OpenProcess.restype = wintypes.HANDLE
        kernel32.GetExitCodeProcess.argtypes = (wintypes.HANDLE, ctypes.POINTER(wintypes.DWORD))
        kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
        handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
        if not handle:
            return ctypes.get_last_error() == 87  # ERROR_INVALID_PARAMETER: no process has that id
        try:
            code = wintypes.DWORD()
            return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value != 259  # STILL_ACTIVE
        finally:
            kernel32.CloseHandle(handle)
    except Exception:  # not Windows, or a kernel32 that answers otherwise: nothing is judged
        return False


def _read_owner(path: Path) -> dict | None:
    try:
        fd, size = open_regular(path)
        data = json.loads(read_open(fd, min(size, 4096)))
    except (OSError, CheckpointError, ValueError):
        return None
    return data if isinstance(data, dict) else None


_STALE_UNREADABLE = 60.0  # seconds after which a lock file without a readable owner is taken as debris


def owner_gone(writer: dict) -> bool:
    """Whether the process `writer` (lock_owner's words: a run's writer in its manifest) is known to be gone, as
    _is_stale judges a lock's: of this host, and of an earlier boot, or of this boot and PID namespace with no process
    of its pid that started before it wrote (a pid taken since is another's); False wherever that cannot be told."""
    gone = _gone_here(writer)
    if gone is not None:
        return gone
    started, since = _process_start(writer["pid"]), writer.get("since")
    return started is not None and isinstance(since, (int, float)) and started > since + 2  # btime: whole seconds


# The largest pid a process can have: a pid_t is a signed 32-bit int on Linux and macOS (Linux gives at most 2**22),
# and Windows' process ids are 32-bit DWORDs; os.kill of a larger one raises OverflowError, not ProcessLookupError
MAX_PID = 2**31 - 1 if os.name != "nt" else 2**32 - 1


def _gone_here(owner: dict) -> bool | None:
    """Whether the process `owner` (lock_owner's words) is gone, as far as this machine can tell: True where its host
    rebooted since or no process has its pid; None where a process of its pid runs here (its own, or one that took
    the pid since); False where it cannot be told (another host, boot id or PID namespace: its pid means nothing)."""
    me = lock_owner()
    pid = owner.get("pid")
    if owner.get("host") != me["host"] or not isinstance(pid, int) or pid <= 0:
        return False
    if pid > MAX_PID:  # no process here ever had it: os.kill raised OverflowError ("internal error" at :load)
        return True
    if on_windows():  # no boot id nor PID namespace to read: its pid is asked
        return True if windows_process_gone(pid) else None
    if not me["boot"]:
        return False
    if owner.get("boot") != me["boot"]:
        return True  # this host rebooted since: nothing of that boot runs
    if owner.get("pidns") != me["pidns"] or not me["pidns"]:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return None


def _is_stale(path: Path) -> bool:
    """Whether an exclusive-create lock was left by a process that is gone.

    Only judged where it can be: a lock of this host, this boot and this PID namespace whose pid no
    longer exists (or of an earlier boot of this host; on Windows, of this host, whose pid no longer
    runs). A lock of another machine or another PID namespace is waited for, never broken: its pid
    means nothing here.
    """
    owner = _read_owner(path)
    if owner is None:
        try:
            return time.time() - os.lstat(path).st_mtime > _STALE_UNREADABLE  # killed between create and write
        except OSError:
            return False
    # Windows has no boot id nor PID namespace to read (nor flock: every save there takes this lock), and no lock was
    # ever judged stale there: one left by a minitf killed part-way through a save (its console window closed during
    # the autosave that ends :train) made every later save wait 120 s and fail. Its pid is asked (_gone_here).
    return owner.get("token") != PROCESS_TOKEN and _gone_here(owner) is True

