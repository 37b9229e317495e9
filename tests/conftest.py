"""Fixtures shared by every test module; helpers live in tests/helpers/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.data import shared_data_root


@pytest.fixture
def data_root() -> Path:
    root = shared_data_root()
    if root is None:
        pytest.skip("real data not found: set FEDSTREAM_DATA or put shared/data beside the repository")
    return root
