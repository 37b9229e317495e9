"""Fixtures shared by several test modules; helpers live in tests/helpers/."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedstream.ovfl import engine
from fedstream.ovfl.deploy import driver
from tests.helpers.data import require, shared_data_root, write_learnable_mnist
from tests.helpers.ovfl_deploy import SMALL_CHUNK

COVERTYPE = "covertype_kaggle/train.csv.gz"


@pytest.fixture(scope="session")
def data_root() -> Path:
    """The real data folder (MNIST at least); the test is skipped without it."""
    root = shared_data_root()
    if root is None:
        pytest.skip("real data not found: set FEDSTREAM_DATA or put shared/data beside the repository")
    return root


@pytest.fixture(scope="session")
def covertype_root(data_root) -> Path:
    """The real data folder, holding covertype (the CHFL deployment tests)."""
    return require(data_root, COVERTYPE)


@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory) -> Path:
    """A small learnable MNIST (400 training images of 10 classes) written for the module."""
    return write_learnable_mnist(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def few_classes_root(tmp_path_factory) -> Path:
    """A small MNIST whose labels take only 3 values, for topl's estimate (group testing needs classes
    with more than k = 10 rows in its window of 40 rows)."""
    return write_learnable_mnist(tmp_path_factory.mktemp("data"), classes=3, noise=60)


@pytest.fixture
def small_chunks(monkeypatch):
    """The online VFL simulator and server use chunks of SMALL_CHUNK rounds (the policy learns at each
    chunk's end)."""
    monkeypatch.setattr(engine, "CHUNK", SMALL_CHUNK)
    monkeypatch.setattr(driver, "CHUNK", SMALL_CHUNK)
