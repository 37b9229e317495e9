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
