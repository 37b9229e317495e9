"""Shared fixtures: where the real data is, and small synthetic streams for fast engine tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data_root() -> Path | None:
    """``$FEDSTREAM_DATA`` or ``<repo>/../shared/data``, if it holds MNIST."""
    root = Path(os.environ.get("FEDSTREAM_DATA", REPO.parent / "shared" / "data"))
    return root if (root / "mnist" / "train-images-idx3-ubyte.gz").exists() else None


@pytest.fixture
def data_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("real data not found: set FEDSTREAM_DATA or put shared/data beside the repository")
    return root


def synthetic_stream(*, n=2000, d=16, classes=3, seed=0, drift="none", name="synthetic"):
    """A small learnable tabular stream (class-dependent means), for fast engine tests."""
    from fedstream.data import Stream, TabularSource

    rng = np.random.default_rng(seed)
    y = rng.integers(0, classes, size=n)
    centers = rng.normal(size=(classes, d)) * 1.5
    X = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    source = TabularSource(X, y.astype(np.int64), name=name, stats_rows=n)
    return Stream(source, drift=drift, drift_every=50, seed=seed)


def small_config(**overrides):
    """A resolved config for synthetic streams: 4 clients, small embedding."""
    from fedstream.config import load_config

    base = {"data.name": "mnist", "vfl.clients": 4, "model.embedding": 8, "rounds": 300,
            "eval.interval": 100, "optimizer.lr": 0.05}
    return load_config(None, base | overrides)
