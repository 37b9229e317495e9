"""Synthetic vertically partitioned data whose informative clients are known (tests and the bench).

Client j holds ``dims`` features x_j = s_j · c_j[y] + ε, with c_j a random (classes, dims) matrix of
class centres, ε ~ N(0, 1) and s_j the client's signal strength: s_j = 0 makes client j pure
noise, and a larger s_j makes its features more informative about the label y, so the clients'
true MI ranking is the order of their strengths.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstream.errors import ConfigError
from fedstream.selection.validation import check_positive_int


def informative_clients(n: int, strengths: Sequence[float], *, dims: int = 2, classes: int = 10,
                        seed: int = 0, quantize: float | None = None) -> tuple[list[np.ndarray], np.ndarray]:
    """``(blocks, y)``: one (n, dims) block per entry of ``strengths``, balanced labels y.

    Blocks are float64, or with ``quantize=q`` the integers round(q · x) as int16 (like pixel
    values: exact in float32, so the fast path runs in float32 and still equals the float64 result).
    """
    n = check_positive_int("n", n, minimum=2)
    dims = check_positive_int("dims", dims)
    classes = check_positive_int("classes", classes, minimum=2)
    s = np.asarray(strengths, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.isfinite(s).all() or (s < 0).any():
        raise ConfigError(f"strengths must be a non-empty list of finite values >= 0, got {strengths!r}")
    rng = np.random.default_rng(seed)
    y = rng.permutation(np.arange(n) % classes)
    blocks = [sj * rng.normal(size=(classes, dims))[y] + rng.normal(size=(n, dims)) for sj in s]
    if quantize is not None:
        if not quantize > 0:
            raise ConfigError(f"quantize must be > 0 (levels per unit), got {quantize!r}")
        blocks = [np.clip(np.rint(quantize * b), -32768, 32767).astype(np.int16) for b in blocks]
    return blocks, y
