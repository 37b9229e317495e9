"""Atomic file writes: the new content goes to a temporary file beside the target, is flushed to
disk and renamed over it (``os.replace``), so a crash leaves the previous file or the new one.

A write that fails (a read-only folder, a full disk, a path that is a file) deletes its temporary
file and raises :class:`OutputError` naming the path; a temporary file left by a process that was
killed mid-write (``NAME.XXXXXXXX.tmp``) is removed by :func:`remove_stale_temporaries` when the
next run takes the folder's lock.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from fedstream.errors import FedstreamError

TMP_SUFFIX = ".tmp"


class OutputError(FedstreamError):
    """An output file or folder that cannot be written (read-only, full disk, not a folder)."""


def output_error(path: str | os.PathLike[str], exc: OSError) -> OutputError:
    """The one-line error of a failed write to ``path``."""
    return OutputError(f"{path}: cannot write ({exc.strerror or exc}); check --out and the free disk space")


@contextmanager
def atomic_open(path: str | os.PathLike[str], mode: str = "w", **kwargs) -> Iterator[IO]:
    """A file handle on a temporary file that replaces ``path`` when the block ends without error
    (and is deleted when it raises). ``mode`` is "w" or "wb"; ``kwargs`` go to :func:`open`."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as for open()
    except OSError as exc:
        raise output_error(path, exc) from None
    try:
        with open(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise output_error(path, exc) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def remove_stale_temporaries(folder: str | os.PathLike[str]) -> list[Path]:
    """Delete the temporary files :func:`atomic_open` left in ``folder`` when its process was
    killed mid-write; call it only while holding the folder's lock. Returns what was removed."""
    removed = []
    for tmp in Path(folder).glob(f"*.????????{TMP_SUFFIX}"):
        stem = tmp.name[: -len(TMP_SUFFIX)]
        if len(stem) > 9 and stem[-9] == "." and all(c in "0123456789abcdef" for c in stem[-8:]):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def atomic_write(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """Write ``data`` (text or bytes) to ``path`` atomically; return the path."""
    path = Path(path)
    with atomic_open(path, "wb" if isinstance(data, bytes) else "w") as fh:
        fh.write(data)
    return path
