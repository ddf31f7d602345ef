"""Past one process: data-parallel training with torch.distributed (DistributedDataParallel).

`torchrun --nproc_per_node=N -m minitf_repl train ...` starts N copies of minitf. Each copy (a
"rank") holds the whole model; each step every rank runs the forward and backward pass on its own
slice of the batch, DDP averages the gradients across ranks during the backward pass, and every
rank applies the same update, so the weights stay identical everywhere.

What this module decides, and why:
- A launch is torchrun's when its environment says so (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR);
  nothing else turns distribution on, and without it every function here answers "one process".
- The backend follows the device: nccl for CUDA, gloo for the CPU.
- `config.batch_size` is the batch of one rank; the global batch is batch_size x world_size.
  Every rank draws the *whole* global batch from the same generator (seeded alike everywhere) and
  keeps its own rows (`rank_slice`). Drawing a few thousand token ids twice over costs nothing
  here, and it buys exactness: N ranks train exactly as one process with batch_size x N would
  (the test checks it to 1e-5), the batch generator advances identically on every rank (so any
  rank's checkpoint continues the same stream), and a single-process checkpoint continues under N.
  Seeding each rank apart (seed * 1000 + rank) would be as random but equal to nothing.
  Exactness needs the global batch's mean loss: a corpus and the tasks count the same number of
  target tokens in every row, but repeat data's examples differ in length, so each rank weighs its
  slice's mean by its share of the global batch's targets (Trainer._train_batch) before DDP averages.
- The trainer keeps `trainer.model` the plain model: evaluation, saving, views and checkpoints
  see the names of MiniTransformerLM, so checkpoints move freely between 1 and N processes. Only
  the training forward/backward goes through the DDP wrapper (`wrap`).
- Rank 0 alone evaluates (the plain model under no_grad: no collective, so the other ranks need not
  join), reports and saves; the others train silently.
- The train loss each rank holds is its slice's; `mean` averages it across ranks, so what rank 0
  logs (and what the divergence check sees, on every rank alike) is the global batch's loss.
- A stop request (Ctrl-C, SIGTERM, SIGHUP) is agreed on (`any_rank`): a rank that stopped alone
  would leave the others waiting in the next step's gradient exchange.
- A rank that dies (killed, out of memory, its machine gone) breaks the others' next collective
  with a backend error ("Connection reset by peer" from gloo). `is_peer_failure` recognises it; the
  trainer then undoes the step under way and raises errors.PeerLost, and :train saves what rank 0
  has (the weights of the last step all ranks completed) and says so in one line, instead of an
  internal error with nothing saved.

The core never prints; the shell (cli.py) calls `init` before a command and `destroy` after it.
"""

from __future__ import annotations

import contextlib
import os
import sys

# torch is imported inside the functions: the shell asks `launched()` on every start, before it
# knows whether the command needs torch at all.

TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR")


def launched() -> bool:
    """Whether torchrun (or anything that sets its environment) started this process."""
    return all(os.environ.get(key) for key in TORCHRUN_ENV)


def first_process() -> bool:
    """Before any process group is up: whether this is torchrun's first process (RANK 0), or no torchrun started it."""
    return not launched() or os.environ.get("RANK", "0").strip() == "0"


def local_rank() -> int:
    """This process's index on its machine (which GPU it takes); 0 outside torchrun."""
    return int(os.environ.get("LOCAL_RANK", 0))


def relaunch(line: str) -> str:
    """A shell line `minitf ...` as this torchrun launch runs it (`torchrun --nproc_per_node=2 -m minitf_repl ...`),
    for a line that must train as this launch does: batch_size is per process, so the same line in one process
    trains on a smaller global batch. Unchanged outside torchrun. Several machines: --nnodes too (their rendezvous
    options are the user's own)."""
    if not launched() or not line.startswith("minitf "):
        return line
    total, here = int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_WORLD_SIZE") or os.environ["WORLD_SIZE"])
    nodes = f"--nnodes={total // here} " if here and total > here else ""
    return f"torchrun {nodes}--nproc_per_node={here or total} -m minitf_repl" + line[len("minitf"):]


def says_command_line_errors() -> bool:
    """Whether this process says a mistake of the command line itself (a misspelt option, a bad value, the shell
    asked for). Every process that torchrun starts on a machine runs the same command line and meets the same
    mistake: the first one there (LOCAL_RANK 0) says it, the others only exit, so the line comes once and not once
    per process. Another machine's launch is a command line of its own: its first process speaks for it.
    """
    return not launched() or local_rank() == 0


# How long a process other than its machine's first waits, its error unsaid, for torchrun to stop it (before_error).
FIRST_SAYS_SECONDS = 10.0


def before_error(wait: float | None = None) -> None:
    """Called before this process says an error it met (and exits). An error of a file or a device (a missing --load
    checkpoint, a data file that is not there, a device that is not here) is met alike by every process of a
    machine, and its line came once per process. The machine's first process (LOCAL_RANK 0) returns at once and
    says it; the others wait, saying nothing, for torchrun, which stops every process of a launch once one of them
    has failed, to end them here. (Exiting at once, unsaid, could have torchrun stop the first before it had written
    its line: the user saw none.) One still running after `wait` seconds met an error the first did not (its own
    GPU, a step of its own) and returns: it says it, and its exit has torchrun stop the others.
    """
    if not launched() or local_rank() == 0:
        return
    import time

    deadline = time.monotonic() + (FIRST_SAYS_SECONDS if wait is None else wait)
    while time.monotonic() < deadline:  # torchrun's SIGTERM ends the process here (its default action)
        time.sleep(0.05)


def _group_possible() -> bool:
    """False when torch.distributed was never imported: no process group can exist then, and asking (is_main, before
    a save's name is checked) need not import torch, which a one-shot `minitf save` with no model waited 1.3 s for."""
    import sys

    return "torch.distributed" in sys.modules


def active() -> bool:
    """Whether this process is one of several in an initialized process group."""
    if not _group_possible():
        return False
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    if not _group_possible():
        return 0
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    if not _group_possible():
        return 1
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    """Rank 0: the one process that logs, evaluates and saves (True in a single process)."""
    return rank() == 0


def backend_for(device: torch.device) -> str:
    import torch

    return "nccl" if torch.device(device).type == "cuda" else "gloo"


def device_name_for_rank(requested: str) -> str:
    """Under torchrun each rank takes its own GPU: `auto` or `cuda` becomes cuda:LOCAL_RANK."""
    import torch

    if requested in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{local_rank()}"
    return "cpu" if requested == "auto" else requested


def init(device: torch.device) -> None:
    """Join torchrun's process group (env:// rendezvous) with the backend for `device`."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    if not dist.is_available():
        raise RuntimeError("this torch was built without torch.distributed")
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with standard_output_silenced():
        dist.init_process_group(backend=backend_for(device))


@contextlib.contextmanager
def standard_output_silenced():
    """File descriptor 1 on os.devnull for the block: what C++ code writes to standard output goes nowhere.

    torch 2.9's gloo writes "[Gloo] Rank 0 is connected to 1 peer ranks..." there as each rank joins its group,
    so `torchrun ... minitf train --json` wrote that line before the JSON document (and rank 1, which says
    nothing, said it too). Python's own buffered output is flushed first, so nothing of it is lost. Where
    descriptor 1 cannot be copied (closed), the block runs as it is.
    """
    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def destroy() -> None:
    """Leave the process group (safe to call when none was joined, and after a peer died: the
    group may then be broken, and leaving it must not turn a one-line error into a traceback)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the process is ending; the error was reported already
            pass


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The DDP wrapper that a training step calls instead of `model` (which stays the plain model).

    No buffer sync each forward: the model's buffers (causal mask, position tables) are constants
    that every rank builds alike, so re-sending them would be wasted (torch 2.13 names the switch
    forward_sync_buffers and deprecates broadcast_buffers; older releases know only the latter). With experts,
    a step may route no token to some expert; DDP must then be told to look for unused parameters.
    """
    import torch
    from torch.nn.parallel import DistributedDataParallel

    device = torch.device(device)
    device_ids = [device] if device.type == "cuda" else None
    moe = getattr(getattr(model, "config", None), "is_moe", False)
    import inspect

    known = inspect.signature(DistributedDataParallel).parameters
    no_sync = {"forward_sync_buffers": False} if "forward_sync_buffers" in known else {"broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=device_ids, find_unused_parameters=bool(moe), **no_sync)


def rank_slice(x: torch.Tensor) -> torch.Tensor:
    """This rank's rows of a global batch (B * world_size, ...) -> (B, ...)."""
    n = x.shape[0] // world_size()
    return x[rank() * n : (rank() + 1) * n]


def mean(value: torch.Tensor) -> torch.Tensor:
    """The mean of a scalar across ranks (each rank gets it)."""
    import torch.distributed as dist

    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / world_size()


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every rank when any rank says True."""
    import torch
    import torch.distributed as dist

    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())


# What a collective raises when another rank is gone: torch's own types where this torch has them,
# else gloo's and NCCL's messages (gloo raises a plain RuntimeError naming the broken connection).
_PEER_MARKERS = ("Connection reset by peer", "Connection closed by peer", "Broken pipe", "Connection refused",
                 "gloo", "NCCL", "ProcessGroup", "c10d")


def is_peer_failure(exc: BaseException) -> bool:
    """Whether `exc`, raised in a step while ranks train together, means another rank is gone."""
    import torch.distributed as dist

    kinds = tuple(k for k in (getattr(dist, "DistError", None), getattr(dist, "DistBackendError", None),
                              getattr(dist, "DistNetworkError", None)) if isinstance(k, type))
    if kinds and isinstance(exc, kinds):
        return True
    return isinstance(exc, RuntimeError) and any(marker in str(exc) for marker in _PEER_MARKERS)


def peer_failure_reason(exc: BaseException) -> str:
    """A short cause for a message: the broken connection's words, not a C++ source path."""
    text = str(exc)
    for marker in _PEER_MARKERS[:4]:
        if marker in text:
            return marker[0].lower() + marker[1:]
    text = text.strip().splitlines()[-1] if text.strip() else type(exc).__name__
    text = text.split("] ", 1)[-1]  # gloo's "[.../pair.cc:534] " prefix
    return text if len(text) <= 80 else text[:77] + "..."
