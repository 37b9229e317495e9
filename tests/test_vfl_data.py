"""The image splits of batch VFL read from the shared MNIST-like IDX files."""

import numpy as np
import pytest

from fedstream.data.images import load_image_split, standardise
from fedstream.errors import DataError
from fedstream.vfl import BatchVFLSettings
from fedstream.vfl.data import load_vertical, vertical_images


@pytest.mark.parametrize("dataset", ["mnist", "fashion-mnist"])
def test_train_and_test_splits(data_root, dataset):
    x, y = load_image_split(data_root, dataset, "train")
    xt, yt = load_image_split(data_root, dataset, "test")
    assert x.shape == (60000, 1, 28, 28) and xt.shape == (10000, 1, 28, 28) and x.dtype == np.uint8
    assert set(np.unique(yt)) == set(range(10)) and yt.dtype == np.int64


def test_vertical_split_matches_contiguous_feature_blocks(data_root):
    data = load_vertical(BatchVFLSettings(train_rows=8, test_rows=4), data_root)
    assert data.strip_shapes() == [(1, 7, 28)] * 4 and len(data.test_y) == 4
    parts = data.client_inputs(data.train_x[:3])
    flat = standardise(data.train_x[:3], "mnist").reshape(3, 784)
    for m, part in enumerate(parts):  # 7 rows of 28 pixels = features 196m .. 196m+195
        np.testing.assert_array_equal(part.numpy().reshape(3, 196), flat[:, 196 * m:196 * (m + 1)])


def test_missing_test_files_are_reported(tmp_path, data_root):
    (tmp_path / "mnist").mkdir()
    for name in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"):
        (tmp_path / "mnist" / name).symlink_to(data_root / "mnist" / name)
    with pytest.raises(DataError, match="t10k-images-idx3-ubyte"):
        load_image_split(tmp_path, "mnist", "test")
    with pytest.raises(ValueError, match="split"):
        load_image_split(tmp_path, "mnist", "valid")


@pytest.mark.parametrize("split", ["rows", "columns"])
def test_split_inputs_equal_the_batch_standardised_on_its_own(split):
    """The trainer's batches (gathered from the split standardised once) hold exactly the values
    of client_inputs on the batch's images; a replaced image array is standardised afresh."""
    rng = np.random.default_rng(0)
    data = vertical_images("mnist", rng.integers(0, 256, (50, 1, 28, 28), dtype=np.uint8), np.arange(50) % 10,
                           rng.integers(0, 256, (20, 1, 28, 28), dtype=np.uint8), np.arange(20) % 10,
                           clients=4, split=split)
    for name, images in (("train", data.train_x), ("test", data.test_x)):
        rows = rng.permutation(len(images))[:13]
        for got, want in zip(data.split_inputs(name, rows), data.client_inputs(images[rows])):
            assert got.dtype == want.dtype and got.shape == want.shape and got.is_contiguous()
            assert bool((got == want).all())
    data.test_x = data.test_x[::-1].copy()
    rows = np.arange(5)
    for got, want in zip(data.split_inputs("test", rows), data.client_inputs(data.test_x[rows])):
        assert bool((got == want).all())
