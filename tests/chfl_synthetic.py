"""Small learnable tables for the CHFL tests (labels depend on every feature)."""

from __future__ import annotations

import numpy as np

from fedstream.chfl.settings import CHFLSettings


def synthetic_table(
    n: int = 1200, d: int = 12, classes: int = 3, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian features; the class is the argmax of a random linear map of all of them."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)).astype(np.float32)
    y = (X @ rng.standard_normal((d, classes))).argmax(axis=1)
    return X, y.astype(np.int64)


def tiny_settings(**overrides) -> CHFLSettings:
    """Fast settings: 2 clients, one small hidden layer, 3 rounds of 2 epochs."""
    base = dict(clients=2, hidden=(16,), rounds=3, local_epochs=2, batch_size=32, lrs=(1e-2,),
                mus=(0.0, 1.0))
    return CHFLSettings(**(base | overrides))


def require(data_root, relpath: str):
    """Skip the calling test when ``data_root/relpath`` is absent (the data root may be partial)."""
    import pytest

    if not (data_root / relpath).is_file():
        pytest.skip(f"{relpath} not found under {data_root}")
    return data_root
