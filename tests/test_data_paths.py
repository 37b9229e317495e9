"""Data root resolution and the file finder's error message."""

from pathlib import Path

import pytest

from fedstream.data.paths import find_file, resolve_data_root
from fedstream.errors import DataError


def test_find_file_returns_first_existing(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.gz").write_bytes(b"1")
    (tmp_path / "x").write_bytes(b"2")
    assert find_file(tmp_path, ["a/x.gz", "b/x.gz", "x"], dataset="d", hint="h") == tmp_path / "b/x.gz"


def test_find_file_error_lists_tried_paths(tmp_path: Path) -> None:
    with pytest.raises(DataError) as e:
        find_file(tmp_path, ["mnist/a.gz", "a.gz"], dataset="mnist", hint="Download it from X.")
    msg = str(e.value)
    assert str(tmp_path / "mnist/a.gz") in msg and str(tmp_path / "a.gz") in msg
    assert "mnist" in msg and "Download it from X." in msg


def test_find_file_missing_root_is_reported(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        find_file(tmp_path / "nope", ["a"], dataset="d", hint="h")


def test_resolve_data_root_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDSTREAM_DATA", raising=False)
    assert resolve_data_root(None) == Path("data")  # nothing exists: ./data
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert resolve_data_root("") == Path("../shared/data")
    (tmp_path / "work" / "data").mkdir()
    assert resolve_data_root(None) == Path("data")
    monkeypatch.setenv("FEDSTREAM_DATA", "/env/root")
    assert resolve_data_root(None) == Path("/env/root")
    assert resolve_data_root("/cfg") == Path("/cfg")
