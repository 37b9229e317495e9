"""CIFAR-10 python-pickle loader on small files in the real format, and the ResNet-18 client path."""

import os
import pickle

import numpy as np
import pytest
import torch

from fedstream.data.cifar10 import TEST_FILE, TRAIN_FILES, load_cifar10, read_batch
from fedstream.data.images import load_image_split, standardise
from fedstream.errors import DataError
from fedstream.transport import CompressionSpec
from fedstream.vfl import BatchVFLSettings, run_batch_vfl
from fedstream.vfl.models import resnet18
from tests.helpers.data import cifar_batch, write_cifar


def test_loads_train_and_test_splits_in_channel_plane_order(tmp_path):
    written = write_cifar(tmp_path, n=6)
    x, y = load_cifar10(tmp_path, "train")
    assert x.shape == (30, 3, 32, 32) and x.dtype == np.uint8 and y.shape == (30,) and y.dtype == np.int64
    first = written["data_batch_1"][b"data"][0]
    np.testing.assert_array_equal(x[0, 0], first[:1024].reshape(32, 32))  # red plane, row-major
    np.testing.assert_array_equal(x[0, 2], first[2048:].reshape(32, 32))  # blue plane
    np.testing.assert_array_equal(y[6:12], written["data_batch_2"][b"labels"])
    xt, yt = load_image_split(tmp_path, "cifar10", "test")
    assert xt.shape == (6, 3, 32, 32) and list(yt) == written[TEST_FILE][b"labels"]


def test_str_keys_and_other_folders_are_accepted(tmp_path):
    rng = np.random.default_rng(1)
    folder = tmp_path / "cifar10"
    folder.mkdir()
    for name in (*TRAIN_FILES, TEST_FILE):
        batch = {k.decode(): v for k, v in cifar_batch(2, rng).items()}
        with open(folder / name, "wb") as fh:
            pickle.dump(batch, fh)
    assert load_cifar10(tmp_path, "test")[0].shape == (2, 3, 32, 32)


def test_standardise_uses_channel_constants():
    images = np.full((1, 3, 2, 2), 255, np.uint8)
    x = standardise(images, "cifar10")
    np.testing.assert_allclose(
        x[0, :, 0, 0], [(1 - 0.4914) / 0.2470, (1 - 0.4822) / 0.2435, (1 - 0.4465) / 0.2616], rtol=1e-6
    )


def test_missing_file_names_every_path_tried(tmp_path):
    with pytest.raises(
        DataError, match="(?s)cifar10: no data file found.*data_batch_1.*cifar-10-python.tar.gz"
    ):
        load_cifar10(tmp_path)
    write_cifar(tmp_path)
    os.remove(tmp_path / "cifar-10-batches-py" / "data_batch_4")
    with pytest.raises(DataError, match="data_batch_4: file not found"):
        load_cifar10(tmp_path, "train")


@pytest.mark.parametrize(
    "batch,match",
    [
        ({b"labels": [0]}, r"missing key 'data' in the CIFAR-10 batch dict \(found keys: labels\)"),
        ({b"data": np.zeros((1, 3072), np.uint8)}, "missing key 'labels'"),
        (
            {b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]},
            r"key 'data': expected a uint8 array of shape \(n, 3072\)",
        ),
        ({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}, "key 'data'.*found float32"),
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0]}, "key 'labels': expected 2 integer labels"),
        (
            {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]},
            r"key 'labels': expected labels in 0..9, found 0..10",
        ),
        ([1, 2, 3], "expected a pickled dict"),
    ],
)
def test_bad_batches_name_the_file_and_key(tmp_path, batch, match):
    path = tmp_path / "data_batch_1"
    with open(path, "wb") as fh:
        pickle.dump(batch, fh, protocol=2)
    with pytest.raises(DataError, match=match) as info:
        read_batch(path)
    assert str(path) in str(info.value)


class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_corrupt_or_foreign_pickles_are_refused(tmp_path):
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({b"data": _Payload()})[:-5])
    with pytest.raises(DataError, match="not a CIFAR-10 python pickle batch"):
        read_batch(path)
    path.write_bytes(pickle.dumps({b"data": _Payload(), b"labels": []}))
    with pytest.raises(DataError, match="global posix.getcwd is not allowed"):
        read_batch(path)


def test_resnet18_shape_and_depth():
    net = resnet18(3, 16, width=4)
    convs = [m for m in net.modules() if isinstance(m, torch.nn.Conv2d) and m.kernel_size == (3, 3)]
    assert len(convs) == 17  # stem + 8 basic blocks x 2: with the head, the 18 weighted layers of ResNet-18
    assert net(torch.zeros(2, 3, 8, 32)).shape == (2, 16)
    assert sum(p.numel() for p in resnet18(3, 16).parameters()) > 11_000_000  # full width: ~11.2M parameters


def test_cifar_run_trains_resnet_clients_and_counts_bytes(tmp_path):
    write_cifar(tmp_path, n=8)
    settings = BatchVFLSettings(dataset="cifar10", epochs=1, batch_size=10, resnet_width=4,
                                compression=CompressionSpec(down="sign-scaled"))
    summary = run_batch_vfl(settings, tmp_path, seed=1)
    row = summary["per_epoch"][0]
    assert (
        summary["config"]["model.embedding"] == 16 and summary["config"]["optimizer.lr"] == 0.001
    )  # paper's CIFAR setting
    assert row["steps"] == 4  # 40 training images, batches of 10
    assert row["bytes_up"] == 4 * 4 * (11 + 4 * 10 * 16)  # 4 steps x 4 clients, float32 embeddings
    assert row["bytes_down"] == 4 * 4 * (12 + 4 + 10 * 16 // 8)  # signSGD: scale + one bit per entry
    assert 0.0 <= row["test_accuracy"] <= 1.0
