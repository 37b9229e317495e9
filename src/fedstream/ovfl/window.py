"""A fixed-length ring of the last l rows, read back oldest first (SLR's sample window)."""

from __future__ import annotations

import numpy as np


class RowWindow:
    """Keeps the last ``length`` rows pushed; :meth:`rows` returns them oldest -> newest."""

    def __init__(self, length: int, width: int, dtype=np.float32):
        self.buf = np.zeros((length, width), dtype=dtype)
        self.length = length
        self.count = 0  # rows pushed so far

    def push(self, row: np.ndarray) -> None:
        self.buf[self.count % self.length] = row
        self.count += 1

    def rows(self) -> np.ndarray:
        count, length = self.count, self.length
        if count >= length == 1:  # the common one-sample case: no slicing
            return self.buf
        if count <= length:
            return self.buf[:count]
        start = count % length
        return np.concatenate([self.buf[start:], self.buf[:start]])

    def state_dict(self) -> dict[str, np.ndarray]:
        return {"buf": self.buf.copy(), "count": np.array(self.count)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        self.buf[...] = state["buf"]
        self.count = int(state["count"])
