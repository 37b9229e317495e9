"""Worker processes that end with the process that started them.

A worker of a sweep, an experiment or the CHFL table runs in a pool of ``spawn`` processes. When
its parent is killed (``kill -9``: no chance to stop the pool), an orphaned worker would keep
running and writing to the run folders; :func:`exit_with_parent` (the pool's ``initializer``, or
called from it) ends it within ``poll_seconds``.
"""

from __future__ import annotations

import os
import threading
import time


def exit_with_parent(poll_seconds: float = 2.0) -> None:
    """End this process (``os._exit(1)``) as soon as the process that started it is gone."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()
