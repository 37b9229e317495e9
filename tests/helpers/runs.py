"""Comparing runs: two runs that should be equal share everything but their clocks."""

from __future__ import annotations

# keys that measure time, in summaries (online VFL, CHFL) and per-epoch rows (batch VFL)
TIMING = frozenset({
    "client_compute_seconds", "server_compute_seconds", "client_cpu_seconds", "server_cpu_seconds",
    "wall_seconds", "rounds_per_second", "epoch_seconds", "compile_seconds",
})


def untimed(record: dict, *also: str) -> dict:
    """``record`` without its timing keys and the keys named in ``also``."""
    drop = TIMING | set(also)
    return {k: v for k, v in record.items() if k not in drop}
