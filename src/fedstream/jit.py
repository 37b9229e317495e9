"""Time spent compiling numba kernels, kept apart from the time of what they compute.

numba compiles a kernel the first time it is called with new argument types and keeps the machine
code in its on-disk cache (``cache=True``), so the first run on a machine pays the compilation
(the fused loop of the online simulator: several seconds) and later runs load it. A figure that
mixed that one-off cost into a run's wall time or rounds per second would mislead, so the runs
subtract what this module measures:

* :func:`compile_seconds` is the process's total wall time inside numba compilations so far
  (numba's ``numba:compile`` event, which fires only when a kernel is compiled, not when it is
  loaded from the cache; nested compilations count once, in the outermost);
* :func:`announce` calls a function when a compilation starts (the command line prints
  "compiling the simulator's kernels (once per machine)" then).

The total is process-wide: a thread timing its own work while another thread compiles (numba
compiles one kernel at a time, under one lock) would subtract that compilation too.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from numba.core import event

MESSAGE = "compiling the simulator's kernels (once per machine)"


class _CompileClock(event.Listener):
    """Listens to ``numba:compile``: the seconds spent in outermost compilations."""

    def __init__(self) -> None:
        self.total = 0.0
        self.depth = 0
        self.since = 0.0
        self.callbacks: list[Callable[[], None]] = []

    def on_start(self, ev) -> None:  # numba's Listener interface
        if self.depth == 0:
            self.since = time.perf_counter()
            for callback in tuple(self.callbacks):
                callback()
        self.depth += 1

    def on_end(self, ev) -> None:
        self.depth -= 1
        if self.depth == 0:
            self.total += time.perf_counter() - self.since

    def seconds(self) -> float:
        """Compile seconds so far, including a compilation still under way."""
        return self.total + (time.perf_counter() - self.since if self.depth else 0.0)


_CLOCK = _CompileClock()
event.register("numba:compile", _CLOCK)


def compile_seconds() -> float:
    """Wall seconds this process has spent compiling numba kernels so far."""
    return _CLOCK.seconds()


@contextlib.contextmanager
def announce(callback: Callable[[], None]) -> Iterator[None]:
    """Call ``callback()`` when a compilation starts (at most once) while the block runs."""
    called = []

    def once() -> None:
        if not called:
            called.append(True)
            callback()

    _CLOCK.callbacks.append(once)
    try:
        yield
    finally:
        _CLOCK.callbacks.remove(once)


class Stopwatch:
    """Wall seconds since it was made, less the numba compilation in them."""

    def __init__(self) -> None:
        self.tic, self.compiled = time.perf_counter(), compile_seconds()

    def compile(self) -> float:
        """Seconds of compilation since it was made."""
        return compile_seconds() - self.compiled

    def seconds(self) -> float:
        """Seconds since it was made, without the compilation."""
        return time.perf_counter() - self.tic - self.compile()
