"""The models of the paper's experiments (section 4.1), in plain torch.nn.

* MNIST / Fashion-MNIST: "clients and server both use MLPs", embedding 128. The paper gives no
  layer sizes; we use one hidden layer of ``hidden`` = 256 ReLU units on each side: client
  strip -> 256 -> embedding (linear output, so entries have both signs, the general case for
  top-k), server M * embedding -> 256 -> 10 (``server_hidden`` sets the server's width apart:
  the Dynamic VF-PS report's clients are 196 -> 16 -> 32 and its server 128 -> 64 -> 10).
* CIFAR-10: each client a ResNet-18, embedding 16; the server one linear layer M * 16 -> 10.
  torchvision is not used: :func:`resnet18` is the CIFAR variant (3x3 stem, no max-pool; four
  stages of two basic blocks, strides 1, 2, 2, 2, widths w, 2w, 4w, 8w; global average pooling;
  a linear head to the embedding). ``width`` w = 64 is ResNet-18; smaller w only for tests.

The models are drawn in order from one seeded generator (client 0's, client 1's, ..., the server's),
except with a table of one file per party, where no party knows the others' widths: there each
party draws its own model from its own seed (:func:`build_models_alone`).

``model.client`` / ``model.server`` (:mod:`fedstream.own_models`) replace either side by the user's own
module, drawn in the same order from the same seeds.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from fedstream.own_models import Spec, build, check_output


def client_mlp(n_in: int, hidden: int, embedding: int) -> nn.Sequential:
    """Client bottom model for MNIST-like data: flatten -> hidden ReLU -> embedding."""
    return nn.Sequential(nn.Flatten(), nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, embedding))


def server_mlp(n_in: int, hidden: int, n_classes: int) -> nn.Sequential:
    """Server top model for MNIST-like data: concatenated embeddings -> hidden ReLU -> logits."""
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))


class BasicBlock(nn.Module):
    """Two 3x3 conv-BN layers with a residual connection (1x1 conv-BN when the shape changes)."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
            nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), nn.BatchNorm2d(c_out),
        )
        self.skip = nn.Identity() if stride == 1 and c_in == c_out else nn.Sequential(
            nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.body(x) + self.skip(x))


def resnet18(in_channels: int, embedding: int, width: int = 64) -> nn.Sequential:
    """CIFAR-style ResNet-18 mapping (n, in_channels, h, w) images to (n, embedding)."""
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, width, 3, 1, 1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(),
    ]
    c = width
    for i, stride in enumerate((1, 2, 2, 2)):
        out = width * 2**i
        layers += [BasicBlock(c, out, stride), BasicBlock(out, out, 1)]
        c = out
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, embedding))


def build_client(
    dataset: str, shape: tuple[int, int, int], m: int, clients: int, *, embedding: int, hidden: int,
    resnet_width: int, own: Spec | None = None,
) -> nn.Module:
    """Client ``m``'s bottom model over its strip of ``shape`` (C, H, W): the paper's, or the factory
    ``own`` (``model.client``, :mod:`fedstream.own_models`; a table block's input shape is (width,)),
    its output checked to be (rows, embedding)."""
    if own is None:
        if dataset == "cifar10":
            return resnet18(shape[0], embedding, resnet_width)
        c, h, w = shape
        return client_mlp(c * h * w, hidden, embedding)
    input_shape = (shape[2],) if dataset == "table" else tuple(shape)
    module = build(own, "model.client", f"client {m}", input_shape=input_shape, embedding=embedding, client=m,
                   clients=clients)
    check_output(module, own, "model.client", f"client {m}", input_shape, (embedding,),
                 "(rows, model.embedding)")
    return module


def build_server(
    dataset: str, clients: int, *, embedding: int, hidden: int, n_classes: int,
    server_hidden: int | None = None, own: Spec | None = None,
) -> nn.Module:
    """The server's top model over the ``clients`` concatenated embeddings: the paper's, or the factory
    ``own`` (``model.server``), its output checked to be (rows, n_classes)."""
    n_in = clients * embedding
    if own is None:
        if dataset == "cifar10":
            return nn.Linear(n_in, n_classes)
        return server_mlp(n_in, hidden if server_hidden is None else server_hidden, n_classes)
    module = build(own, "model.server", "server", input_size=n_in, n_classes=n_classes, clients=clients,
                   embedding=embedding)
    check_output(module, own, "model.server", "server", (n_in,), (n_classes,),
                 f"(rows, classes) with {n_classes} classes")
    return module


def build_models(
    dataset: str,
    strip_shapes: list[tuple[int, int, int]],
    *,
    embedding: int,
    hidden: int,
    resnet_width: int,
    n_classes: int,
    server_hidden: int | None = None,
    client_model: Spec | None = None,
    server_model: Spec | None = None,
) -> tuple[list[nn.Module], nn.Module]:
    """(client models, server model) of the paper's setting for ``dataset``, or of the factories
    ``client_model`` / ``server_model``; the MNIST-like server's hidden width is ``server_hidden``
    (default: ``hidden``)."""
    m = len(strip_shapes)
    clients = [build_client(dataset, shape, j, m, embedding=embedding, hidden=hidden,
                            resnet_width=resnet_width, own=client_model)
               for j, shape in enumerate(strip_shapes)]
    return clients, build_server(dataset, m, embedding=embedding, hidden=hidden, n_classes=n_classes,
                                 server_hidden=server_hidden, own=server_model)


def party_seed(seed: int, party: int) -> int:
    """The torch seed of a party drawing its model alone (party 0: the server, 1 + m: client m)."""
    return int(np.random.SeedSequence([seed, party]).generate_state(1)[0])


def build_models_alone(
    dataset: str,
    strip_shapes: list[tuple[int, int, int] | None],
    *,
    seed: int,
    embedding: int,
    hidden: int,
    resnet_width: int,
    n_classes: int,
    server_hidden: int | None = None,
    client_model: Spec | None = None,
    server_model: Spec | None = None,
) -> tuple[list[nn.Module | None], nn.Module]:
    """:func:`build_models`, each party drawing from its own seed (:func:`party_seed`); a client whose
    shape is None (another node's, unknown here) is not built. Restores the global torch RNG."""
    clients: list[nn.Module | None] = []
    m = len(strip_shapes)
    with torch.random.fork_rng(devices=[]):
        for j, shape in enumerate(strip_shapes):
            torch.manual_seed(party_seed(seed, 1 + j))
            clients.append(None if shape is None else build_client(
                dataset, shape, j, m, embedding=embedding, hidden=hidden, resnet_width=resnet_width,
                own=client_model))
        torch.manual_seed(party_seed(seed, 0))
        server = build_server(dataset, m, embedding=embedding, hidden=hidden, n_classes=n_classes,
                              server_hidden=server_hidden, own=server_model)
    return clients, server
