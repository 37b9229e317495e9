"""Per-client, per-direction byte and message counters."""

from __future__ import annotations

import numpy as np


class ByteLedger:
    """Counts encoded bytes: ``up`` = client -> server, ``down`` = server -> client.

    Counters are plain Python integers (exact, and cheap to bump once per message).
    """

    def __init__(self, n_clients: int):
        self.up = [0] * n_clients
        self.down = [0] * n_clients
        self.messages = [0] * n_clients

    def add(self, client: int, direction: str, n_bytes: int) -> None:
        (self.up if direction == "up" else self.down)[client] += n_bytes
        self.messages[client] += 1

    @property
    def total(self) -> int:
        return sum(self.up) + sum(self.down)

    def summary(self) -> dict:
        return {
            "total": self.total,
            "up": sum(self.up),
            "down": sum(self.down),
            "messages": sum(self.messages),
            "per_client": [{"up": u, "down": d} for u, d in zip(self.up, self.down)],
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        return {k: np.array(getattr(self, k), dtype=np.int64) for k in ("up", "down", "messages")}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        for k in ("up", "down", "messages"):
            setattr(self, k, [int(v) for v in state[k]])
