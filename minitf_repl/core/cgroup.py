"""Which cgroup folders hold this process's limits: its own cgroup and every one above it.

A container with its own cgroup namespace sees its cgroup at the top of /sys/fs/cgroup, and its
limits there. Elsewhere the limits sit lower down, in the folder that /proc/self/cgroup names: a
systemd unit or slice (`systemd-run -p CPUQuota=200%`, `MemoryMax=`; JupyterHub's SystemdSpawner),
a container without a cgroup namespace (`docker --cgroupns=host`). A limit holds for everything
under it, so whoever reads one reads every folder on the way down and takes the tightest
(core/memory.py the memory limit, core/threads.py the CPU quota).

Torch-free and UI-free: read before torch is imported.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path("/sys/fs/cgroup")  # where the cgroup file system is mounted
OWN = Path("/proc/self/cgroup")  # this process's cgroup in each hierarchy


def folders(controller: str, root: Path = ROOT, own: Path = OWN) -> list[Path]:
    """The folders of this process's cgroup and of every one above it, top first, that exist under `root`: cgroup v2's
    single hierarchy (at `root`) and cgroup v1's `controller` ("memory", "cpu"; mounted at root/controller).

    A path that does not exist under `root` is left out: a v1 container without a cgroup namespace is named
    "/docker/ID" in /proc/self/cgroup, yet sees its own cgroup at the top of root/cpu, whose limits are then read."""
    named = {"": root, controller: root / controller}  # v2's hierarchy (no controllers named), v1's controller
    paths = {"": "/", controller: "/"}
    try:
        for line in own.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for kind in named:
                # v2's line is "0::/path"; a v1 line names its controllers, e.g. "4:cpu,cpuacct:/path"
                if (controllers == kind) if kind == "" else (kind in controllers.split(",")):
                    paths[kind] = path
    except (OSError, ValueError):
        pass
    found = []
    for kind, base in named.items():
        folder = base
        found.append(folder)
        for part in (p for p in paths[kind].split("/") if p and p not in (".", "..")):
            folder = folder / part
            found.append(folder)
    return [f for f in dict.fromkeys(found) if f.is_dir()]
