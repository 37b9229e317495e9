"""Readers for the UCI Sensorless Drive Diagnosis data (48 features, 11 classes).

* ``Sensorless_drive_diagnosis.txt`` (UCI, 58,509 rows): no header, 49 space-separated numbers
  per line (``-3.0146e-07 8.2603e-06 ...``), the class 1..11 last; returned 0-based.
* The balanced 2,200-row subset in ``shared/data`` (``sensorless_kios_2200.npz``: ``X`` float64
  (n, 48), ``y`` int64 0..10). Only for smoke tests: see its PROVENANCE.md.

The features have no names upstream (``feature_names`` is None).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from fedstream.data._npz import read_npz_arrays
from fedstream.data._numtext import Layout, Table, check_table, read_table

N_FEATURES = 48
N_CLASSES = 11


def read_sensorless_txt(path: str | os.PathLike[str]) -> Table:
    """Read ``Sensorless_drive_diagnosis.txt(.gz)``: X float32 (n, 48), y int64 in 0..10.

    Raises DataError naming the line and column of a row without 49 fields, a non-numeric or
    non-finite value, or a class outside 1..11.
    """
    columns = tuple(f"feature {j + 1}" for j in range(N_FEATURES)) + ("class",)
    layout = Layout(fmt="Sensorless text", columns=columns, features=tuple(range(N_FEATURES)),
                    label=N_FEATURES, label_min=1, label_max=N_CLASSES, delimiter=None)
    return read_table(Path(path), layout, data_start=0, feature_names=None)


def read_sensorless_npz(path: str | os.PathLike[str]) -> Table:
    """Read the subset npz (keys ``X``, ``y``): X float32 (n, 48), y int64 in 0..10."""
    path = Path(path)
    arr = read_npz_arrays(path, ("X", "y"), "Sensorless npz")
    X, y = arr["X"], arr["y"]
    check_table(path, "Sensorless npz", X, y, N_CLASSES, n_features=N_FEATURES)
    return Table(X.astype(np.float32), y.astype(np.int64), None)
