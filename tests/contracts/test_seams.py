"""Every seam of :mod:`fedstream.seams` is runtime-checkable, states its contract, and is checked
by at least one contract module of this folder (a seam nobody checks fails here)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Protocol

import pytest

from fedstream import seams

SEAMS = [obj for _, obj in inspect.getmembers(seams, inspect.isclass)
         if issubclass(obj, Protocol) and obj is not Protocol and obj.__module__ == seams.__name__]
HERE = Path(__file__)
SUITE = "".join(p.read_text() for p in HERE.parent.glob("test_*.py") if p.name != HERE.name)


@pytest.mark.parametrize("seam", SEAMS, ids=[s.__name__ for s in SEAMS])
def test_seam_is_runtime_checkable_and_states_its_contract(seam):
    assert getattr(seam, "_is_runtime_protocol", False)
    doc = inspect.getdoc(seam) or ""
    assert "Contract" in doc, f"{seam.__name__}: the docstring must state the contract"
    assert not isinstance(object(), seam)


@pytest.mark.parametrize("seam", SEAMS, ids=[s.__name__ for s in SEAMS])
def test_seam_is_checked_by_the_suite(seam):
    assert f", {seam.__name__})" in SUITE or f"isinstance(policy, {seam.__name__})" in SUITE, (
        f"no contract module checks isinstance(..., {seam.__name__})")
