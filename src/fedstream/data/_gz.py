"""Open plain or gzip-compressed data files, turning decompression failures into DataError.

A file is treated as gzip when it starts with the gzip magic bytes (1f 8b), whatever its name,
so that a ``.gz`` file that was decompressed but not renamed (or the reverse) still reads. A name
ending in ``.gz`` whose content is not gzip is reported, since it is usually a download error page
or a Git LFS pointer.
"""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path
from typing import IO

from fedstream.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark
# What gzip/zlib raise on a corrupt or truncated stream.
GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)


def is_gzip(path: Path) -> bool:
    """True when the file starts with the gzip magic bytes; DataError when it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(2)
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e}") from e
    if head != GZIP_MAGIC and path.name.endswith(".gz"):
        with open(path, "rb") as f:
            start = f.read(40)
        raise DataError(
            f"{path}: not a gzip file: expected the gzip magic bytes 1f 8b but the file starts "
            f"with {start!r} (a failed download or a Git LFS pointer?)"
        )
    return head == GZIP_MAGIC


def gzip_error(path: Path, e: BaseException) -> DataError:
    """The DataError for a corrupt or truncated gzip stream."""
    return DataError(f"{path}: corrupt or truncated gzip stream: {type(e).__name__}: {e}")


def read_all(path: Path) -> bytes:
    """The whole (decompressed) content of ``path``."""
    path = Path(path)
    gz = is_gzip(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e}") from e
    if not gz:
        return raw
    try:
        return gzip.decompress(raw)
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e


def open_text(path: Path) -> IO[str]:
    """A text stream over the (decompressed) content, a leading UTF-8 byte-order mark skipped
    (an editor's "UTF-8 with BOM": without this, the first line of a file without a header would
    not parse as numbers and be taken for a header); read errors surface as GZIP_ERRORS."""
    path = Path(path)
    raw = gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")
    try:
        if raw.read(len(BOM)) != BOM:
            raw.seek(0)
    except BaseException:
        raw.close()
        raise
    return io.TextIOWrapper(raw, encoding="ascii", errors="replace")


def read_first_line(path: Path) -> str:
    """The first line of a plain or gzipped text file (a CSV header), without its line end."""
    try:
        with open_text(path) as f:
            return f.readline().rstrip("\r\n")
    except GZIP_ERRORS as e:
        raise gzip_error(path, e) from e
