"""Your own PyTorch models for fedstream's parties (README, "Bring your own model").

Each function is a factory: fedstream calls it with keyword arguments (see ``fedstream.own_models``)
and trains the module it returns. Run from the repository root so that ``examples`` imports::

    fedstream run vfl-mnist --set model.client=examples.own_models:strip_cnn \\
        --set model.server=examples.own_models:top --set train.epochs=1
"""

from torch import nn


def strip_cnn(*, input_shape, embedding, client, clients):
    """A client's bottom model: a small CNN over its (C, H, W) strip of each image."""
    c, h, w = input_shape
    features = nn.Sequential(nn.Conv2d(c, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten())
    n = 16 * (h // 2) * (w // 2)
    return nn.Sequential(features, nn.Linear(n, 64), nn.ReLU(), nn.Linear(64, embedding))


def block_mlp(*, input_shape, embedding, **_):
    """A client's bottom model over a block of table columns ((d,) features): two layers, GELU."""
    (d,) = input_shape
    return nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, embedding))


def top(*, input_size, n_classes, **_):
    """The server's top model over the concatenated embeddings."""
    return nn.Sequential(nn.Linear(input_size, 128), nn.GELU(), nn.Linear(128, n_classes))
