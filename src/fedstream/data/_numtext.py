"""Shared reader for labelled numeric text tables (CSV, whitespace text, ARFF data sections).

The CHFL loaders (covertype, Sensorless, OpenML) differ only in their headers; once a header is
understood, every data line is ``n_cols`` fields, some of them features (numbers), one of them the
class. :func:`read_table` reads such lines with ``np.loadtxt`` on chunks (C parser) and, when
anything is wrong, re-reads the file line by line to name the first bad line, column and value.
Line numbers are 1-based and count every line of the file, header included.
"""

from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from fedstream.data._gz import GZIP_ERRORS, gzip_error, open_text
from fedstream.errors import DataError


def number_problem(text: str, where: str, raw: str | None = None) -> str | None:
    """Why ``text`` is not a finite number (an error message starting with ``where``), or None.
    ``raw`` is the field as it stands in the file, for the message (default: ``text``)."""
    shown = text if raw is None else raw
    try:
        v = float(text)
    except ValueError:
        return f"{where}: expected a number but found {shown!r}"
    if not np.isfinite(v):
        return f"{where}: expected a finite number but found {shown!r}"
    return None

CHUNK_LINES = 100_000


class Table(NamedTuple):
    """A labelled table: X float32 (n, d), y int64 (n,) 0-based, feature names (None if unknown)."""

    X: np.ndarray
    y: np.ndarray
    feature_names: tuple[str, ...] | None


@dataclass(frozen=True)
class Layout:
    """How the data lines of one file are laid out (what :func:`read_table` needs to know).

    ``columns`` names every field of a line (for messages); ``features`` are the indices read as
    features, in output order; ``label`` is the class field. The class is either nominal
    (``classes``: the allowed spellings, mapped to 0, 1, ...) or an integer in
    ``label_min..label_max`` (inclusive), mapped to ``value - label_min``.
    """

    fmt: str  # "covertype CSV", "Sensorless text", ... (used in messages)
    columns: tuple[str, ...]
    features: tuple[int, ...]
    label: int
    label_min: int = 0
    label_max: int | None = None
    classes: tuple[str, ...] | None = None
    delimiter: str | None = ","  # None: runs of whitespace
    comments: str | None = None
    quote: str | None = None

    def expected_label(self) -> str:
        if self.classes is not None:
            shown = ", ".join(self.classes[:12]) + (", ..." if len(self.classes) > 12 else "")
            return f"one of the declared classes {{{shown}}}"
        top = "" if self.label_max is None else f"..{self.label_max}"
        return f"an integer class {self.label_min}{top}"


def unquote(s: str) -> str:
    s = s.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
        return s[1:-1]
    return s


def _label_of(layout: Layout, s: str) -> int | None:
    """The 0-based class of field ``s``, or None when it is not a valid class."""
    s = unquote(s)
    if layout.classes is not None:
        try:
            return layout.classes.index(s)
        except ValueError:
            return None
    try:
        v = float(s)
    except ValueError:
        return None
    if not np.isfinite(v) or v != int(v) or v < layout.label_min:
        return None
    if layout.label_max is not None and v > layout.label_max:
        return None
    return int(v) - layout.label_min


def _split(layout: Layout, line: str) -> list[str]:
    return line.split() if layout.delimiter is None else line.split(layout.delimiter)


def _is_skipped(layout: Layout, line: str) -> bool:
    s = line.strip()
    return s == "" or (layout.comments is not None and s.startswith(layout.comments))


def _check_line(layout: Layout, lineno: int, line: str) -> str | None:
    """Describe what is wrong with one data line (None when it is fine)."""
    fields = _split(layout, line)
    n = len(layout.columns)
    if len(fields) != n:
        return f"line {lineno}: expected {n} columns but found {len(fields)}"
    for j in layout.features:
        s = unquote(fields[j])
        where = f"line {lineno}, column {j + 1} ({layout.columns[j]})"
        if s == "?" or s == "":
            return f"{where}: expected a number but the value is missing ({fields[j]!r})"
        problem = number_problem(s, where, fields[j])
        if problem:
            return problem
    if _label_of(layout, fields[layout.label]) is None:
        j = layout.label
        return (f"line {lineno}, column {j + 1} ({layout.columns[j]}, the class): expected "
                f"{layout.expected_label()} but found {fields[j]!r}")
    return None


def _first_problem(path: Path, layout: Layout, data_start: int) -> str | None:
    """Scan the data lines (those after line ``data_start``) for the first bad one."""
    try:
        with open_text(path) as f:
            for lineno, line in enumerate(f, start=1):
                if lineno <= data_start or _is_skipped(layout, line):
                    continue
                msg = _check_line(layout, lineno, line.rstrip("\r\n"))
                if msg is not None:
                    return msg
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
    return None


def _fail(path: Path, layout: Layout, data_start: int, fallback: str) -> DataError:
    msg = _first_problem(path, layout, data_start)
    return DataError(f"{path}: {layout.fmt}: {msg or fallback}")


def _parse_chunk(lines: list[str], layout: Layout) -> np.ndarray:
    """float64 (rows, len(features) + 1): the features then the 0-based class (NaN if invalid)."""
    usecols = list(layout.features) + [layout.label]

    def label(s: str) -> float:
        c = _label_of(layout, s)
        return np.nan if c is None else float(c)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
        return np.loadtxt(lines, delimiter=layout.delimiter, comments=layout.comments,
                          quotechar=layout.quote, dtype=np.float64, ndmin=2, usecols=usecols,
                          converters={layout.label: label})


def read_table(path: Path, layout: Layout, *, data_start: int,
               feature_names: tuple[str, ...] | None) -> Table:
    """Read the data lines after line ``data_start`` of ``path`` as a :class:`Table`.

    Raises DataError naming the file, line, column and expected value on a wrong column count, a
    missing, non-numeric or non-finite feature value or a class out of range; also on an empty
    file or a corrupt gzip stream.
    """
    parts: list[np.ndarray] = []
    try:
        with open_text(path) as f:
            for _ in itertools.islice(f, data_start):
                pass
            while lines := list(itertools.islice(f, CHUNK_LINES)):
                lines = [ln for ln in lines if not _is_skipped(layout, ln)]
                if not lines:
                    continue
                if any(len(_split(layout, ln)) != len(layout.columns) for ln in lines):
                    raise _fail(path, layout, data_start, "wrong number of columns")
                try:
                    block = _parse_chunk(lines, layout)
                except ValueError as e:
                    raise _fail(path, layout, data_start, str(e)) from e
                if not np.isfinite(block).all():  # a non-finite feature or an invalid class
                    raise _fail(path, layout, data_start, "non-finite value or invalid class")
                parts.append(block)
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
    if not parts:
        raise DataError(f"{path}: {layout.fmt}: empty: expected at least one data row, found none")
    data = np.concatenate(parts) if len(parts) > 1 else parts[0]
    X = data[:, :-1].astype(np.float32)
    if not np.isfinite(X).all():
        raise DataError(f"{path}: {layout.fmt}: a feature value overflows float32 (|x| > 3.4e38)")
    return Table(np.ascontiguousarray(X), data[:, -1].astype(np.int64), feature_names)


def check_table(path: Path, fmt: str, X: np.ndarray, y: np.ndarray, n_classes: int,
                *, n_features: int | None = None, name: str = "X") -> None:
    """Validate arrays read from a binary file (npz): shapes, finiteness, class range."""
    if X.ndim != 2 or (n_features is not None and X.shape[1] != n_features):
        want = f"(n, {n_features})" if n_features is not None else "(n, d)"
        raise DataError(f"{path}: {fmt}: {name}: expected shape {want}, found {X.shape}")
    if y.shape != (X.shape[0],):
        raise DataError(f"{path}: {fmt}: labels: expected shape ({X.shape[0]},), found {y.shape}")
    if not np.isfinite(X).all():
        bad = np.argwhere(~np.isfinite(X))[0]
        raise DataError(f"{path}: {fmt}: {name}: expected finite values, found {X[tuple(bad)]} "
                        f"at row {bad[0]}, column {bad[1]}")
    if not np.issubdtype(y.dtype, np.integer) and not np.all(y == np.round(y)):
        raise DataError(f"{path}: {fmt}: labels: expected integer classes, found dtype {y.dtype}")
    out = (y < 0) | (y >= n_classes)
    if out.any():
        i = int(np.argmax(out))
        raise DataError(f"{path}: {fmt}: labels: expected classes 0..{n_classes - 1}, found "
                        f"{y[i]} at row {i}")
