"""Readers for OpenML tables (helena, aloi, jannis): ARFF, CSV, and rtdl's val/test npz.

* ARFF (OpenML's native download): ``%`` comments, ``@relation``, one ``@attribute NAME TYPE`` per
  column (TYPE ``numeric``/``real``/``integer`` or a nominal ``{a,b,...}``), then ``@data`` and
  comma-separated rows. The class is the attribute named ``target`` (OpenML's default target
  ``class``, matched case-insensitively); a nominal class maps its declared values to 0, 1, ...
  in declaration order; every other attribute must be numeric. Sparse ARFF is not supported.
* CSV (OpenML's CSV export): a header line of column names, then rows; the class column must
  hold integers ``label_min``, ``label_min + 1``, ... (returned minus ``label_min``) unless
  ``classes`` lists its spellings.
* rtdl npz (``jannis_rtdl_valtest.npz`` in ``shared/data``): ``X_val, y_val, X_test, y_test``;
  the val and test rows concatenated. This is PARTIAL data (30,145 of jannis' 83,733 rows).

Fields are split at every comma: quoted values holding commas are not supported.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedstream.data._gz import GZIP_ERRORS, gzip_error, open_text, read_first_line
from fedstream.data._npz import read_npz_arrays
from fedstream.data._numtext import Layout, Table, check_table, read_table, unquote
from fedstream.errors import DataError

NUMERIC_TYPES = ("numeric", "real", "integer")


def _split_name(rest: str) -> tuple[str, str]:
    """Split ``NAME TYPE`` (the text after ``@attribute``); NAME may be quoted and hold spaces."""
    rest = rest.strip()
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        return (rest[1:end], rest[end + 1:].strip()) if end > 0 else ("", "")
    parts = rest.split(None, 1)
    return (parts[0], parts[1].strip()) if len(parts) == 2 else ("", "")


def _arff_header(path: Path) -> tuple[list[tuple[str, str, int]], int]:
    """The ``(name, type, line)`` of every attribute and the line number of ``@data``."""
    attrs: list[tuple[str, str, int]] = []
    try:
        with open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                s = line.strip()
                if s == "" or s.startswith("%"):
                    continue
                key = s.split(None, 1)[0].lower()
                if key == "@attribute":
                    name, typ = _split_name(s[len("@attribute"):])
                    if not name or not typ:
                        raise DataError(f"{path}: ARFF: line {lineno}: expected '@attribute NAME "
                                        f"TYPE' but found {s!r}")
                    attrs.append((name, typ, lineno))
                elif key == "@data":
                    return attrs, lineno
                elif key not in ("@relation",):
                    raise DataError(f"{path}: ARFF: line {lineno}: expected @relation, @attribute "
                                    f"or @data in the header but found {s[:60]!r}")
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
    raise DataError(f"{path}: ARFF: no @data line: expected a header ending in @data, then rows")


def _nominal(typ: str) -> tuple[str, ...] | None:
    t = typ.strip()
    if t.startswith("{") and t.endswith("}"):
        return tuple(unquote(v) for v in t[1:-1].split(","))
    return None


def _find_target(path: Path, fmt: str, names: Sequence[str], target: str) -> int:
    hits = [i for i, n in enumerate(names) if n.lower() == target.lower()]
    if not hits:
        shown = ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise DataError(f"{path}: {fmt}: missing class column {target!r}: expected a column of that "
                        f"name (case-insensitive) among the {len(names)} found: {shown}")
    return hits[0]


def read_arff(path: str | os.PathLike[str], *, target: str = "class", label_min: int = 0,
              n_classes: int | None = None) -> Table:
    """Read a dense OpenML ARFF(.gz): X float32 (n, d) of the numeric attributes, y int64 0-based.

    A nominal class maps to its declaration index; a numeric class must be an integer in
    ``label_min .. label_min + n_classes - 1`` (no upper bound when ``n_classes`` is None).
    Raises DataError naming the file, line and attribute for a non-numeric feature attribute, a
    missing class attribute, a missing (``?``) or non-numeric value, or a class out of range.
    """
    path = Path(path)
    attrs, data_line = _arff_header(path)
    names = [a[0] for a in attrs]
    t = _find_target(path, "ARFF", names, target)
    classes = _nominal(attrs[t][1])
    if classes is None and attrs[t][1].lower() not in NUMERIC_TYPES:
        raise DataError(f"{path}: ARFF: line {attrs[t][2]}: class attribute {names[t]!r} has type "
                        f"{attrs[t][1]!r}: expected nominal {{...}} or numeric")
    for i, (name, typ, lineno) in enumerate(attrs):
        if i != t and typ.lower() not in NUMERIC_TYPES:
            raise DataError(f"{path}: ARFF: line {lineno}: attribute {name!r} has type {typ!r}: "
                            f"expected numeric, real or integer (only the class may be nominal)")
    _reject_sparse(path, data_line)
    layout = Layout(
        fmt="ARFF", columns=tuple(names), features=tuple(i for i in range(len(names)) if i != t),
        label=t, classes=classes, label_min=label_min,
        label_max=None if n_classes is None else label_min + n_classes - 1,
        comments="%", quote="'",
    )
    return read_table(path, layout, data_start=data_line,
                      feature_names=tuple(n for i, n in enumerate(names) if i != t))


def _reject_sparse(path: Path, data_line: int) -> None:
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            s = line.strip()
            if lineno <= data_line or s == "" or s.startswith("%"):
                continue
            if s.startswith("{"):
                raise DataError(f"{path}: ARFF: line {lineno}: sparse ARFF rows ({{index value, ...}}) "
                                f"are not supported: expected dense comma-separated rows")
            return


def read_openml_csv(path: str | os.PathLike[str], *, target: str = "class", label_min: int = 0,
                    n_classes: int | None = None, classes: Sequence[str] | None = None,
                    ignore: Sequence[str] = ()) -> Table:
    """Read an OpenML CSV(.gz) export: header of names, then rows; class column ``target``.

    Columns named in ``ignore`` (e.g. a row id) are skipped; every other column is a feature.
    Raises DataError naming the file and column for a missing class column, and the line and
    column for a bad value or a class out of range.
    """
    path = Path(path)
    first = read_first_line(path)
    names = [unquote(h) for h in first.split(",")]
    t = _find_target(path, "OpenML CSV", names, target)
    skip = {n.lower() for n in ignore}
    feats = tuple(i for i, n in enumerate(names) if i != t and n.lower() not in skip)
    layout = Layout(
        fmt="OpenML CSV", columns=tuple(names), features=feats, label=t,
        classes=None if classes is None else tuple(classes), label_min=label_min,
        label_max=None if n_classes is None else label_min + n_classes - 1, quote='"',
    )
    return read_table(path, layout, data_start=1, feature_names=tuple(names[i] for i in feats))


RTDL_KEYS = ("X_val", "y_val", "X_test", "y_test")


def read_rtdl_valtest_npz(path: str | os.PathLike[str], *, n_features: int, n_classes: int,
                          name: str) -> Table:
    """Read an rtdl val+test npz (e.g. jannis): the val rows then the test rows.

    Raises DataError naming the file and array for missing keys, wrong shapes, non-finite
    values or classes outside 0..n_classes-1.
    """
    path = Path(path)
    fmt = f"{name} npz"
    arr = read_npz_arrays(path, RTDL_KEYS, fmt)
    for split in ("val", "test"):
        check_table(path, fmt, arr[f"X_{split}"], arr[f"y_{split}"], n_classes,
                    n_features=n_features, name=f"X_{split}")
    X = np.concatenate([arr["X_val"], arr["X_test"]]).astype(np.float32)
    y = np.concatenate([arr["y_val"], arr["y_test"]]).astype(np.int64)
    return Table(X, y, None)
