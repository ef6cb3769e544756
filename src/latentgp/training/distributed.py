"""Data-parallel training over ``torch.distributed`` (gloo on CPU, NCCL with CUDA).

Every objective in latentgp is a sum over data points plus a global term,
``L = (N / B) sum_{n in batch} l_n - G``.  With W processes each evaluating its part
``b_r`` of the same global batch at the weight ``N W / B``,

    (1 / W) sum_r [ (N W / B) sum_{n in part r} l_n - G ] = L,

so averaging the processes' objectives and gradients (one all-reduce per step) gives
exactly the single-process step, up to round-off.  ``fit`` does this automatically when a
process group with more than one process is initialised; this module holds the pieces.
"""

from __future__ import annotations

import faulthandler
import os
import socket
import tempfile
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from ..config import get_config


def world() -> tuple[int, int]:
    """``(rank, world_size)``; ``(0, 1)`` when no process group is initialised, or inside
    ``latentgp.config(distributed=False)``."""
    if get_config().distributed and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    """True on rank 0 (and in a single process)."""
    return world()[0] == 0


def init_from_env(backend: str | None = None) -> bool:
    """Initialise the default process group from torchrun-style environment variables
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``).  Returns True if a group
    with more than one process is (now) active."""
    if not dist.is_available():
        return False
    if dist.is_initialized():
        return dist.get_world_size() > 1
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    return dist.get_world_size() > 1


def broadcast_state(module: torch.nn.Module, src: int = 0, group: Any = None) -> None:
    """Make every process start from rank ``src``'s parameters and buffers."""
    with torch.no_grad():
        for t in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(t.data, src=src, group=group)


def all_reduce_mean_(tensors: Sequence[torch.Tensor | None], group: Any = None) -> None:
    """Average tensors across processes in place (flattened into one message)."""
    tensors = [t for t in tensors if t is not None]
    if not tensors:
        return
    W = dist.get_world_size(group)
    flat = torch.cat([t.reshape(-1) for t in tensors])
    dist.all_reduce(flat, group=group)
    flat /= W
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n


def local_part(
    idx: torch.Tensor, rank_world: tuple[int, int] | None = None
) -> tuple[torch.Tensor, float]:
    """This process's part of a global batch of indices and the weight factor
    ``W |part| / B`` that makes its objective's data term count ``N W / B`` per point.

    A process whose part would be empty (a batch with fewer rows than processes, e.g. the
    last batch of an epoch) gets one row at weight 0, so that it still evaluates the
    global term (and every process runs the same collective operations).
    ``rank_world``: ``(rank, world_size)`` of the group (default: the default group)."""
    rank, W = world() if rank_world is None else rank_world
    if W == 1:
        return idx, 1.0
    part = torch.tensor_split(idx, W)[rank]
    if part.numel() == 0:
        return idx[:1], 0.0
    return part, W * part.numel() / idx.numel()


class Reducer:
    """THE reducer of the one fit: sums, maxima and means over the processes of a group.

    ``Reducer()`` uses the default group when one with more than one process is
    initialised, and is the identity otherwise (``world == 1``); ``Reducer(group)`` uses
    an explicit ``torch.distributed`` group.  Step tasks hand it to the model methods that
    combine per-process results (SEP's site sums and log Z terms, QSGP's row gradients), so
    models never talk to ``torch.distributed`` themselves.

    Attributes
    ----------
    world, rank: the group's size and this process's rank in it.
    group: the ``torch.distributed`` group (None: the default one).
    """

    def __init__(self, group: Any = None) -> None:
        self.group = group
        if group is None:
            self.rank, self.world = world()
        else:
            self.world = dist.get_world_size(group)
            self.rank = dist.get_rank(group)

    @property
    def active(self) -> bool:
        """Whether there is more than one process to combine."""
        return self.world > 1

    def _reduce(self, t: torch.Tensor, op) -> torch.Tensor:
        if self.world == 1:
            return t
        t = t.clone()
        dist.all_reduce(t, op=op, group=self.group)
        return t

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        """The sum of ``t`` over the processes (a new tensor; ``t`` itself at world 1)."""
        return self._reduce(t, dist.ReduceOp.SUM) if self.world > 1 else t

    sum = __call__

    def maximum(self, t: torch.Tensor) -> torch.Tensor:
        """The elementwise maximum of ``t`` over the processes."""
        return self._reduce(t, dist.ReduceOp.MAX) if self.world > 1 else t

    def mean_(self, tensors: Sequence[torch.Tensor | None]) -> None:
        """Average ``tensors`` over the processes in place (one message; None skipped)."""
        if self.world > 1:
            all_reduce_mean_(tensors, group=self.group)

    def local_part(self, idx: torch.Tensor) -> tuple[torch.Tensor, float]:
        """This process's part of a global batch and its weight (see :func:`local_part`)."""
        return local_part(idx, (self.rank, self.world))

    def broadcast_module(self, module: torch.nn.Module) -> None:
        """Make every process of the group start from its first rank's parameters and
        buffers."""
        if self.world == 1:
            return
        src = 0 if self.group is None else dist.get_global_rank(self.group, 0)
        broadcast_state(module, src=src, group=self.group)


def free_port() -> int:
    """A free TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn_entry(
    rank: int, fn: Callable, nproc: int, port: int, args: tuple, done_dir: str
) -> None:
    # A worker killed by a fatal signal (SIGSEGV, SIGABRT from C++) prints its Python
    # stack to stderr, so the parent's "process 1 terminated with signal ..." has a where.
    faulthandler.enable(all_threads=True)
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(nproc),
        LOCAL_RANK=str(rank),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // nproc))
    init_from_env()
    try:
        fn(*args)
        if dist.is_initialized():
            dist.barrier()  # nobody tears down while another still communicates
        # Past the barrier every process has returned from ``fn``: the work is complete.
        with open(os.path.join(done_dir, f"rank{rank}"), "w") as f:
            f.write("done\n")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def spawn(fn: Callable[..., Any], nproc: int, *args: Any) -> None:
    """Run ``fn(*args)`` in ``nproc`` processes on this machine, joined in a gloo (CPU) or
    NCCL process group over loopback; each process gets ``cpu_count / nproc`` threads.

    An error or a crash in any process while ``fn`` runs is raised here.  A process that
    dies from a signal *after* every process has returned from ``fn`` (a crash inside the
    C++ teardown of the process group, which gloo does rarely under load) loses no work:
    that is reported as a :class:`RuntimeWarning` and ``spawn`` returns normally."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="latentgp-spawn-") as done_dir:
        try:
            mp.spawn(
                _spawn_entry,
                args=(fn, nproc, free_port(), args, done_dir),
                nprocs=nproc,
                join=True,
            )
        except mp.ProcessExitedException as e:
            if not os.listdir(done_dir):
                raise
            how = (
                f"died from signal {e.signal_name}"
                if e.signal_name
                else f"exited with code {e.exit_code}"
            )
            warnings.warn(
                f"distributed worker {e.error_index} {how} while "
                "tearing down the process group, after every worker had finished its work; "
                "the results are complete",
                RuntimeWarning,
                stacklevel=2,
            )
