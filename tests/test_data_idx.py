"""IDX readers: round trip on files written here, every error path, and the real MNIST files."""

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fedstream.data.idx import read_idx_images, read_idx_labels
from fedstream.errors import DataError
from tests.helpers.data import DATA, idx_images_bytes, idx_labels_bytes, write


@pytest.fixture
def small() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (5, 28, 28), dtype=np.uint8), rng.integers(0, 10, 5).astype(np.uint8)


@pytest.mark.parametrize("suffix", [".gz", ""])
def test_round_trip(tmp_path: Path, small, suffix: str) -> None:
    images, labels = small
    pi = write(tmp_path / f"imgs{suffix}", idx_images_bytes(images))
    pl = write(tmp_path / f"labs{suffix}", idx_labels_bytes(labels))
    got = read_idx_images(pi)
    assert got.dtype == np.uint8 and got.shape == (5, 28, 28)
    np.testing.assert_array_equal(got, images)
    np.testing.assert_array_equal(read_idx_labels(pl), labels)


def test_non_square_images(tmp_path: Path) -> None:
    img = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(read_idx_images(write(tmp_path / "a", idx_images_bytes(img))), img)


def test_truncated(tmp_path: Path, small) -> None:
    p = write(tmp_path / "train-images-idx3-ubyte.gz", idx_images_bytes(small[0])[:-100])
    with pytest.raises(DataError, match=r"train-images-idx3-ubyte\.gz: truncated.*5 images of 28x28"):
        read_idx_images(p)


def test_truncated_header(tmp_path: Path) -> None:
    p = write(tmp_path / "l.gz", struct.pack(">I", 2049))
    with pytest.raises(DataError, match="l.gz: truncated"):
        read_idx_labels(p)


def test_trailing_bytes(tmp_path: Path, small) -> None:
    p = write(tmp_path / "labs", idx_labels_bytes(small[1]) + b"\0\0\0")
    with pytest.raises(DataError, match="labs: 3 trailing bytes"):
        read_idx_labels(p)


def test_bad_magic(tmp_path: Path, small) -> None:
    p = write(tmp_path / "labs.gz", idx_labels_bytes(small[1]))
    with pytest.raises(DataError, match=r"labs\.gz: bad magic.*expected 2051.*found 2049"):
        read_idx_images(p)  # a label file given as images


def test_corrupt_gzip(tmp_path: Path, small) -> None:
    good = gzip.compress(idx_images_bytes(small[0]))
    p = tmp_path / "imgs.gz"
    p.write_bytes(good[: len(good) // 2])  # truncated gzip stream
    with pytest.raises(DataError, match=r"imgs\.gz: corrupt or truncated gzip"):
        read_idx_images(p)
    bad = bytearray(good)
    bad[20:40] = b"\xff" * 20  # garbage in the deflate data
    p.write_bytes(bytes(bad))
    with pytest.raises(DataError, match=r"imgs\.gz"):
        read_idx_images(p)


def test_gz_name_without_gzip_content(tmp_path: Path) -> None:
    p = tmp_path / "imgs.gz"
    p.write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(DataError, match=r"imgs\.gz: not a gzip file"):
        read_idx_images(p)


def test_label_out_of_range(tmp_path: Path) -> None:
    p = write(tmp_path / "labs.gz", idx_labels_bytes(np.array([1, 2, 10, 3])))
    with pytest.raises(DataError, match=r"labs\.gz: label out of range.*label #2 is 10"):
        read_idx_labels(p)
    assert read_idx_labels(p, n_classes=11).tolist() == [1, 2, 10, 3]


@pytest.mark.skipif(not (DATA / "mnist").is_dir(), reason=f"real MNIST not found at {DATA / 'mnist'} "
                    "(set FEDSTREAM_DATA to the shared data folder)")
def test_real_mnist() -> None:
    x = read_idx_images(DATA / "mnist" / "train-images-idx3-ubyte.gz")
    y = read_idx_labels(DATA / "mnist" / "train-labels-idx1-ubyte.gz")
    assert x.shape == (60000, 28, 28) and x.dtype == np.uint8 and x.max() == 255
    assert np.bincount(y).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
    assert read_idx_images(DATA / "mnist" / "t10k-images-idx3-ubyte.gz").shape == (10000, 28, 28)
    yt = read_idx_labels(DATA / "mnist" / "t10k-labels-idx1-ubyte.gz")
    assert np.bincount(yt).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.mark.skipif(not (DATA / "fashion_mnist").is_dir(),
                    reason=f"real Fashion-MNIST not found at {DATA / 'fashion_mnist'}")
def test_real_fashion_mnist() -> None:
    y = read_idx_labels(DATA / "fashion_mnist" / "train-labels-idx1-ubyte.gz")
    assert np.bincount(y).tolist() == [6000] * 10
