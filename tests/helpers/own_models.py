"""Factories of users' own models for the tests (named by dotted paths in configs)."""

from examples.own_models import block_mlp, strip_cnn, top  # noqa: F401  (the README's, named here too)
from torch import nn

CALLS: list[dict] = []  # the keyword arguments each recording factory received


def recording_cnn(**kwargs):
    CALLS.append(dict(kwargs))
    return strip_cnn(**kwargs)


def top_dropout(*, input_size, n_classes, **_):
    """A top model that draws from the torch RNG while training."""
    return nn.Sequential(nn.Linear(input_size, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, n_classes))


def wrong_width(*, input_shape, embedding, **_):
    """A bottom model whose output is one wider than the embedding."""
    return nn.Sequential(nn.Flatten(), nn.Linear(int(nn.Flatten()(__import__("torch").zeros(1, *input_shape))
                                                     .shape[1]), embedding + 1))


def positional_only(a, b):
    return nn.Linear(a, b)


def not_a_module(**_):
    return "a string"


NOT_CALLABLE = 3


def gelu_bottom(*, input_shape, embedding, **_):
    """An ovfl client model over its feature block: two layers, GELU, layer norm."""
    (d,) = input_shape
    return nn.Sequential(nn.Linear(d, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, embedding))
