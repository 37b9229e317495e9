"""Per-client, per-direction byte and message counters."""

from __future__ import annotations

import numpy as np


class ByteLedger:
    """Counts encoded bytes: ``up`` = client -> server, ``down`` = server -> client."""

    def __init__(self, n_clients: int):
        self.up = np.zeros(n_clients, dtype=np.int64)
        self.down = np.zeros(n_clients, dtype=np.int64)
        self.messages = np.zeros(n_clients, dtype=np.int64)

    def add(self, client: int, direction: str, n_bytes: int) -> None:
        (self.up if direction == "up" else self.down)[client] += n_bytes
        self.messages[client] += 1

    @property
    def total(self) -> int:
        return int(self.up.sum() + self.down.sum())

    def summary(self) -> dict:
        return {
            "total": self.total,
            "up": int(self.up.sum()),
            "down": int(self.down.sum()),
            "messages": int(self.messages.sum()),
            "per_client": [{"up": int(u), "down": int(d)} for u, d in zip(self.up, self.down)],
        }

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"up": self.up.copy(), "down": self.down.copy(), "messages": self.messages.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.up[:], self.down[:], self.messages[:] = state["up"], state["down"], state["messages"]
