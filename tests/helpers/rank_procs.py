"""Real rank processes for the distributed tests (tests/helpers/resume.py, global_jobs.py,
dp_ranks.py): started together, joined against one deadline, the hung ones killed; each rank
writes its traceback to ``WORKDIR/rankN.error``."""

from __future__ import annotations

import contextlib
import datetime
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import Any


def run_procs(ctx: Any, target: Callable[..., None], args: Sequence[tuple[Any, ...]], workdir: str,
              hang_s: float) -> tuple[list[int], list[str], list[int]]:
    """Run ``target(*args[r])`` as process ``r`` for every rank; returns the exit codes, each
    rank's error text ("" if none) and the ranks still running after ``hang_s`` (killed)."""
    procs = [ctx.Process(target=target, args=rank_args) for rank_args in args]
    for proc in procs:
        proc.start()
    deadline = time.monotonic() + hang_s
    for proc in procs:
        proc.join(max(deadline - time.monotonic(), 0.1))
    hung = [rank for rank, proc in enumerate(procs) if proc.is_alive()]
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join()
    errors = [read_text(f"{workdir}/rank{rank}.error") for rank in range(len(procs))]
    return [int(proc.exitcode or 0) for proc in procs], errors, hung


def read_text(path: str) -> str:
    """The file's text, or "" when there is none."""
    try:
        with open(path) as fh:
            return fh.read()
    except FileNotFoundError:
        return ""


@contextlib.contextmanager
def gloo_rank(workdir: str, rank: int, world_size: int, timeout_s: float) -> Iterator[None]:
    """In rank process ``rank``: the block runs inside one gloo group (FileStore rendezvous in
    ``workdir``), ended by a barrier; a failure's traceback goes to ``WORKDIR/rankN.error``."""
    import torch.distributed as dist

    try:
        dist.init_process_group("gloo", init_method=f"file://{workdir}/store", rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        yield
        dist.barrier()
        dist.destroy_process_group()
    except BaseException:
        with open(f"{workdir}/rank{rank}.error", "w") as fh:
            fh.write(traceback.format_exc())
        raise
