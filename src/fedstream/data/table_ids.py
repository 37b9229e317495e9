"""A party's id column (``data.id``) as the text that private entity alignment matches.

Ids are text or integers: a CSV's cells as written (``007`` stays ``007``), an NPZ or Parquet
column of strings or of integers (written in decimal, so the integer 7 matches the text ``7`` of
another party's CSV). Floats, booleans, empty cells and a repeated id are refused, with one line
naming the file, the party, the row and the id as written.
"""

from __future__ import annotations

import numpy as np

from fedstream.data.table import Table
from fedstream.errors import DataError, shown


def _row(table: Table, r: int) -> str:
    line = f" (line {r + 2})" if table.path.name.lower().endswith((".csv", ".csv.gz")) else ""
    return f"row {r + 1}{line}"


def party_ids(table: Table, j: int, party: str) -> list[str]:
    """Column ``j`` of ``table`` (the file of ``party``, e.g. "the server", "client 1") as distinct
    text ids; DataError at the first id that is not text or an integer, empty or repeated."""
    col = table.columns[j]
    where = f"{table.path} ({party}): column {table.names[j]!r} (data.id)"
    if col.dtype.kind in "iu":
        ids = [str(v) for v in col.tolist()]
    elif col.dtype.kind == "U":
        ids = col.tolist()
    elif col.dtype.kind == "O":
        ids = col.tolist()
        for r, v in enumerate(ids):
            if isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
                ids[r] = str(int(v))
            elif not isinstance(v, str):
                raise DataError(f"{where}, {_row(table, r)}: expected an id that is text or an integer, "
                                f"found {shown(v)} ({type(v).__name__})")
    else:
        kind = {"f": "numbers with a fraction (floats)", "b": "booleans", "c": "complex numbers"}
        raise DataError(f"{where}: expected ids that are text or integers, found "
                        f"{kind.get(col.dtype.kind, col.dtype.name)}; write them as integers or text")
    seen: dict[str, int] = {}
    for r, v in enumerate(ids):
        if v == "":
            raise DataError(f"{where}, {_row(table, r)}: expected an id, found an empty cell")
        first = seen.setdefault(v, r)
        if first != r:
            raise DataError(f"{where}, {_row(table, r)}: id {v} repeats {_row(table, first)}; "
                            "each id must appear once")
    return ids
