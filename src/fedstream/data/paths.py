"""Where the data files are.

Data files are never part of the repository: they are read from a *data root* given in the
config, or by the environment variable ``FEDSTREAM_DATA``, or found next to the working
directory. :func:`find_file` turns "file not found" into an error that lists every path that was
tried and says how to get the file, so that a user can fix the problem without reading code.
"""

from __future__ import annotations

import os
from pathlib import Path

from fedstream.errors import DataError

ENV_VAR = "FEDSTREAM_DATA"


def resolve_data_root(configured: str | os.PathLike[str] | None) -> Path:
    """Return the data root to search.

    Order: ``configured`` (when not None/empty), else ``$FEDSTREAM_DATA`` (when set and non-empty),
    else ``./data`` if it exists, else ``../shared/data`` (relative to the working directory) if it
    exists, else ``./data``. The returned folder may not exist: :func:`find_file` then reports
    what is missing.
    """
    if configured is not None and str(configured) != "":
        return Path(configured).expanduser()
    env = os.environ.get(ENV_VAR, "")
    if env:
        return Path(env).expanduser()
    local = Path("data")
    if local.is_dir():
        return local
    shared = Path("..") / "shared" / "data"
    if shared.is_dir():
        return shared
    return local


def find_file(root: Path, candidates: list[str], *, dataset: str, hint: str) -> Path:
    """Return the first ``root / candidate`` that is an existing file.

    Raises DataError naming the dataset, every path tried and ``hint`` (how to get the file)
    when none exists.
    """
    root = Path(root)
    tried = [root / c for c in candidates]
    for p in tried:
        if p.is_file():
            return p
    lines = "\n".join(f"  - {p}" for p in tried)
    where = "" if root.is_dir() else (
        f"\nThe data root {root} does not exist; set it in the config or with ${ENV_VAR}."
    )
    raise DataError(
        f"{dataset}: no data file found under {root}; tried:\n{lines}{where}\n{hint}"
    )
