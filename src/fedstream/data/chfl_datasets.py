"""The tabular datasets of the CHFL paper (Table I) and where to find them under a data root.

Each dataset lists the files it may be read from, best first; the first that exists is read and
its status says whether it is the paper's data or a part of it::

    data = load_chfl_dataset("covertype", resolve_data_root(None))
    data.table.X, data.table.y, data.path, data.status

``shared/data`` holds the Kaggle covertype (complete), a 2,200-row Sensorless subset and the
jannis val+test rows (partial); helena and aloi, the full UCI covtype.data and the full
Sensorless file are read when a user supplies them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

from fedstream.data._numtext import Table
from fedstream.data.covertype import read_covertype_kaggle, read_covertype_uci
from fedstream.data.openml import read_arff, read_openml_csv, read_rtdl_valtest_npz
from fedstream.data.paths import find_file
from fedstream.data.sensorless import read_sensorless_npz, read_sensorless_txt
from fedstream.errors import ConfigError


@dataclass(frozen=True)
class Candidate:
    """One file a dataset may be read from, relative to the data root."""

    path: str
    reader: Callable[[Path], Table]
    status: str = "complete"


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    n_classes: int
    candidates: tuple[Candidate, ...]
    hint: str


def _gz_pair(path: str, reader: Callable[[Path], Table], status: str = "complete") -> tuple[Candidate, ...]:
    return Candidate(path + ".gz", reader, status), Candidate(path, reader, status)


def _openml(name: str, n_classes: int, openml_id: int, extra: tuple[Candidate, ...] = ()) -> DatasetSpec:
    arff = partial(read_arff, n_classes=n_classes)
    csv = partial(read_openml_csv, n_classes=n_classes)
    return DatasetSpec(
        name, n_classes,
        _gz_pair(f"{name}/{name}.arff", arff) + _gz_pair(f"{name}/{name}.csv", csv) + extra,
        f"Download OpenML dataset {openml_id} ({name}) as ARFF or CSV into <root>/{name}/.",
    )


SPECS: dict[str, DatasetSpec] = {
    "covertype": DatasetSpec(
        "covertype", 7,
        _gz_pair("covertype_kaggle/train.csv", read_covertype_kaggle)
        + _gz_pair("covertype/train.csv", read_covertype_kaggle),
        "Kaggle 'Forest Cover Type Prediction' train.csv (the balanced 15,120-row subset).",
    ),
    "covertype-uci": DatasetSpec(
        "covertype-uci", 7,
        _gz_pair("covertype/covtype.data", read_covertype_uci) + _gz_pair("covtype.data", read_covertype_uci),
        "UCI Covertype covtype.data(.gz), https://archive.ics.uci.edu/dataset/31/covertype.",
    ),
    "sensorless": DatasetSpec(
        "sensorless", 11,
        _gz_pair("sensorless/Sensorless_drive_diagnosis.txt", read_sensorless_txt)
        + _gz_pair("Sensorless_drive_diagnosis.txt", read_sensorless_txt)
        + (Candidate("sensorless_subset/sensorless_kios_2200.npz", read_sensorless_npz,
                     "subset: 2,200 of 58,509 rows (200 per class), for smoke tests only"),),
        "UCI 'Dataset for Sensorless Drive Diagnosis' Sensorless_drive_diagnosis.txt.",
    ),
    "jannis": _openml("jannis", 4, 41168, (Candidate(
        "jannis_partial/jannis_rtdl_valtest.npz",
        partial(read_rtdl_valtest_npz, n_features=54, n_classes=4, name="jannis"),
        "partial: 30,145 of 83,733 rows (rtdl val+test splits; train split missing)"),)),
    "helena": _openml("helena", 100, 41169),
    "aloi": _openml("aloi", 1000, 42396),
}
DATASETS = tuple(SPECS)


class LoadedDataset(NamedTuple):
    table: Table
    path: Path
    status: str  # "complete", or what part of the paper's data this is


_CACHE: dict[tuple[str, str], LoadedDataset] = {}


def load_chfl_dataset(name: str, root: str | Path) -> LoadedDataset:
    """Read dataset ``name`` from the first of its candidate files under ``root`` (cached).

    Raises ConfigError for an unknown name and DataError (every path tried, where to get the
    file) when no candidate exists.
    """
    spec = SPECS.get(name)
    if spec is None:
        raise ConfigError(f"dataset {name!r}: expected one of {', '.join(DATASETS)}")
    path = find_file(Path(root), [c.path for c in spec.candidates], dataset=name, hint=spec.hint)
    key = (name, str(path.resolve()))
    if key not in _CACHE:
        cand = next(c for c in spec.candidates if Path(root) / c.path == path)
        _CACHE[key] = LoadedDataset(cand.reader(path), path, cand.status)
    return _CACHE[key]
