"""Pin torch to one thread for a block of work, and put the caller's setting back afterwards.

Runs are parallelised across processes (the experiment runner, a deployment's parties), so a run
uses one thread: more only add overhead on the small matrices of these models, and a single thread
keeps float sums in one order, so a deployed party computes exactly what the simulator computes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """``torch.set_num_threads(1)`` inside the block; the previous number after it, even on error."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def one_torch_thread_here() -> None:
    """Give the calling (worker) thread's products one thread. ``torch.set_num_threads`` sets
    OpenMP's thread count for the calling thread only, and oneDNN's int8 GEMM asks OpenMP, so a
    fresh worker thread, e.g. of the VF-PS engine, ran each product on a team of two: measured on
    the relaxed re-selection, 0.4 CPU s of helper threads and 4 runnable threads on 2 cores. Give it
    to a ``ThreadPoolExecutor`` as its ``initializer``."""
    torch.set_num_threads(1)
