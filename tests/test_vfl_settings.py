"""Batch VFL settings: paper defaults, field-by-field validation, flat config round trip."""

import pytest

from fedstream.errors import ConfigError
from fedstream.transport import CompressionSpec
from fedstream.vfl import CONFIG_KEYS, BatchVFLSettings


def test_paper_defaults_resolve_per_dataset():
    mnist = BatchVFLSettings().resolved()
    assert (mnist.clients, mnist.batch_size, mnist.lr, mnist.embedding) == (4, 100, 0.01, 128)
    cifar = BatchVFLSettings(dataset="cifar10").resolved()
    assert (cifar.lr, cifar.embedding) == (0.001, 16)
    assert BatchVFLSettings(dataset="cifar10", lr=0.05, embedding=8).resolved().lr == 0.05


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"dataset": "svhn"}, "data.name = 'svhn': expected one of mnist, fashion-mnist, cifar10"),
        ({"clients": 0}, r"vfl.clients = 0: expected an integer in 1..32"),
        ({"epochs": 1.5}, "train.epochs = 1.5: expected an integer >= 1"),
        ({"batch_size": 70000}, r"train.batch_size = 70000: expected an integer in 1..65535"),
        ({"lr": 0}, "optimizer.lr = 0: expected a number > 0"),
        ({"lr": "fast"}, "optimizer.lr = 'fast'"),
        ({"embedding": True}, "model.embedding = True: expected an integer in 1..65535 or none"),
        ({"hidden": -1}, "model.hidden = -1"),
        ({"resnet_width": 0}, "model.resnet_width = 0"),
        ({"train_rows": 0}, "data.train_rows = 0: expected an integer >= 1 or none"),
        ({"test_rows": "all"}, "data.test_rows = 'all'"),
        ({"compression": {"up": "topk"}}, "compression: expected a CompressionSpec"),
    ],
)
def test_each_field_is_validated_by_its_config_key(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        BatchVFLSettings(**kwargs)


def test_flat_config_round_trip():
    config = {
        "data.name": "fashion-mnist",
        "vfl.clients": 2,
        "train.epochs": 3,
        "train.batch_size": 50,
        "optimizer.lr": 0.05,
        "model.embedding": None,
        "compression.up": "topk-grad",
        "compression.cache": True,
        "compression.down": "quant-huffman",
        "compression.levels": 16,
        "unrelated.key": 1,
    }
    s = BatchVFLSettings.from_config(config)
    assert s.dataset == "fashion-mnist" and s.clients == 2 and s.embedding is None
    assert s.compression == CompressionSpec(up="topk-grad", down="quant-huffman", cache=True, levels=16)
    back = BatchVFLSettings.from_config(s.to_config())
    assert back == s
    assert set(CONFIG_KEYS.values()) <= set(s.to_config())
    with pytest.raises(ConfigError, match="compression.ratio"):
        BatchVFLSettings.from_config({"compression.up": "topk", "compression.ratio": 2.0})
