"""Readers for Covertype: Kaggle's balanced ``train.csv`` and the full UCI ``covtype.data``.

Both hold 54 cartographic features (10 quantitative, 4 one-hot ``Wilderness_Area``, 40 one-hot
``Soil_Type``) and the cover type 1..7, returned 0-based.

* Kaggle "Forest Cover Type Prediction" ``train.csv`` (the CHFL paper's covertype, Table I):
  header ``Id,Elevation,...,Cover_Type``, 15,120 rows, CRLF line endings. Columns are found by
  name, so extra columns (``Id``) are ignored and a missing one is reported by name.
* UCI ``covtype.data`` (581,012 rows): no header, 55 comma-separated integers, class last.

Plain or gzip-compressed files (see :mod:`fedstream.data._gz`).
"""

from __future__ import annotations

import os
from pathlib import Path

from fedstream.data._gz import read_first_line
from fedstream.data._numtext import Layout, Table, read_table
from fedstream.errors import DataError

QUANTITATIVE = (
    "Elevation", "Aspect", "Slope", "Horizontal_Distance_To_Hydrology",
    "Vertical_Distance_To_Hydrology", "Horizontal_Distance_To_Roadways", "Hillshade_9am",
    "Hillshade_Noon", "Hillshade_3pm", "Horizontal_Distance_To_Fire_Points",
)
FEATURES: tuple[str, ...] = (QUANTITATIVE + tuple(f"Wilderness_Area{i}" for i in range(1, 5))
                             + tuple(f"Soil_Type{i}" for i in range(1, 41)))
LABEL = "Cover_Type"
N_CLASSES = 7


def read_covertype_kaggle(path: str | os.PathLike[str]) -> Table:
    """Read Kaggle's ``train.csv(.gz)``: X float32 (n, 54), y int64 in 0..6, the 54 names.

    Raises DataError naming the file and the missing columns when the header lacks a feature or
    ``Cover_Type`` (Kaggle's ``test.csv`` has no labels), and the line and column of any
    non-numeric value or class outside 1..7.
    """
    path = Path(path)
    first = read_first_line(path)
    header = [h.strip().strip('"') for h in first.split(",")]
    missing = [c for c in FEATURES + (LABEL,) if c not in header]
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
        raise DataError(
            f"{path}: covertype CSV: line 1 (header): missing column(s) {shown}; expected a header "
            f"naming the 54 features and {LABEL} (Kaggle train.csv: Id,Elevation,...,{LABEL})"
        )
    layout = Layout(
        fmt="covertype CSV", columns=tuple(header), features=tuple(header.index(c) for c in FEATURES),
        label=header.index(LABEL), label_min=1, label_max=N_CLASSES, quote='"',
    )
    return read_table(path, layout, data_start=1, feature_names=FEATURES)


def read_covertype_uci(path: str | os.PathLike[str]) -> Table:
    """Read UCI ``covtype.data(.gz)``: X float32 (n, 54), y int64 in 0..6, the 54 names.

    Raises DataError naming the line and column of a row without 55 fields, a non-numeric value
    or a class outside 1..7.
    """
    layout = Layout(
        fmt="covertype covtype.data", columns=FEATURES + (LABEL,), features=tuple(range(54)),
        label=54, label_min=1, label_max=N_CLASSES,
    )
    return read_table(Path(path), layout, data_start=0, feature_names=FEATURES)
