"""Each party of a deployed online VFL run, built on its own machine from the shared config, with
the simulator's initial weights (client m replays the draws of clients 0..m-1, the server all of
them) and only its own data: who reads what is in docs/deploy-protocol.md."""

from __future__ import annotations

import numpy as np

from fedstream.data import Stream
from fedstream.data.labels import IMAGE_DIRS, image_labels
from fedstream.data.table_party import ServerTable, per_party
from fedstream.data.table_source import TableSpec
from fedstream.deploy.records import check_client_index
from fedstream.errors import ConfigError
from fedstream.ovfl.activation import Activation
from fedstream.ovfl.client import Client
from fedstream.ovfl.engine import CHUNK, STREAM_KEYS, feature_blocks, make_stream
from fedstream.ovfl.parties import build_client as build_own_client
from fedstream.ovfl.parties import build_parties
from fedstream.ovfl.parties import build_server as build_own_server
from fedstream.ovfl.server import Server
from fedstream.transport import CompressionSpec

# policies a client can evaluate alone: ``fixed`` is a coordinator's draw, but from the shared seed only
CLIENT_SIDE_ACTIVATIONS = ("full", "random", "event", "fixed")
# policies only the server can evaluate: ``topl`` ranks the clients by the embeddings the server received;
# the server tells each node its activation in the batch request (see fedstream.deploy.records)
SERVER_SIDE_ACTIVATIONS = ("topl",)


def check_deployable(config: dict) -> None:
    """Reject what the network backend does not carry yet for online VFL, naming the key."""
    if config["data.name"] == "table" and not per_party(config):
        raise ConfigError('data.name = "table" deploys with one file per party (data.path = '
                          '"server.csv;client0.csv;...", each process opens only its own); one file '
                          "holding every party's columns runs with fedstream run (the simulator)")
    if per_party(config) and config["stream.drift"] != "none":
        raise ConfigError(f"stream.drift = {config['stream.drift']!r}: a deployed table's stream is its "
                          "rows in file order (the client parties hold no label to draw from); "
                          "expected 'none'")
    if config["activation.name"] not in CLIENT_SIDE_ACTIVATIONS + SERVER_SIDE_ACTIVATIONS:
        raise ConfigError(
            f"activation.name = {config['activation.name']!r}: over Flower a client decides its own "
            f"activation ({', '.join(CLIENT_SIDE_ACTIVATIONS)}) or the server decides it for every "
            f"client ({', '.join(SERVER_SIDE_ACTIVATIONS)}); expected one of these"
        )
    # compression runs over the network too; refuse a bad spec before setup
    CompressionSpec.from_config(config)


def build_client(config: dict, index: int, n_features: int) -> Client:
    """Client ``index`` with the initial weights the simulator gives it (``n_features``: the data
    set's; with one file per party, the client's own width)."""
    check_client_index(index, config["vfl.clients"], "vfl.clients", name="client index")
    if per_party(config):
        return build_own_client(config, index, n_features)
    blocks = feature_blocks(n_features, config["vfl.clients"])
    clients, _ = build_parties(config, [block.stop - block.start for block in blocks[: index + 1]])
    return clients[index]  # the draws of the clients before this one, then its own


def build_server(config: dict, n_features: int, n_classes: int) -> Server:
    """The server with the initial weights the simulator gives it."""
    if per_party(config):
        return build_own_server(config, config["vfl.clients"], n_classes)
    blocks = feature_blocks(n_features, config["vfl.clients"])  # every client's draw comes first
    return build_parties(config, [block.stop - block.start for block in blocks], n_classes)[1]


def server_decides(config: dict) -> bool:
    """Whether the run's activation policy is the server's (``topl``): it decides every node's."""
    return config["activation.name"] in SERVER_SIDE_ACTIVATIONS


_STREAMS: dict[tuple, Stream] = {}


def party_stream(config: dict, data_root: str | None = None) -> Stream:
    """The run's stream, from ``data_root`` if this machine keeps the data elsewhere (cached per process)."""
    if data_root:
        config = dict(config, **{"data.root": data_root})
    key = tuple(config[k] for k in STREAM_KEYS)
    stream = _STREAMS.get(key)
    if stream is None:
        if len(_STREAMS) > 4:
            _STREAMS.clear()
        stream = _STREAMS[key] = make_stream(config)
    return stream


def server_stream(config: dict, data_root: str | None = None) -> Stream:
    """The stream as the server party sees it: labels only for the image data sets (see the module doc)."""
    if data_root:
        config = dict(config, **{"data.root": data_root})
    if per_party(config):  # its own file only: ids and labels
        return Stream(ServerTable(TableSpec.from_config(config)), seed=config["seed"])
    if config["data.name"] not in IMAGE_DIRS:
        return party_stream(config)
    return Stream(
        image_labels(config["data.name"], config["data.root"]),
        drift=config["stream.drift"],
        drift_every=config["stream.drift_every"],
        seed=config["seed"],
    )


def client_rows(stream: Stream, t0: int, n: int, block: slice) -> np.ndarray:
    """float32 (n, block width): the feature block of rounds t0..t0+n-1, C-contiguous as in the simulator."""
    X = np.asarray(stream.source.features(stream.indices(t0, n)), dtype=np.float32)
    return np.ascontiguousarray(X[:, block])


def server_labels(stream: Stream, t0: int, n: int) -> np.ndarray:
    """int64 (n,): the labels of rounds t0..t0+n-1 (no features computed)."""
    return np.asarray(stream.source.labels(stream.indices(t0, n)), dtype=np.int64)


def own_activations(activation: Activation, index: int, n_clients: int, t0: int,
                    rows: np.ndarray) -> np.ndarray:
    """Whether each of rounds t0, t0 + 1, ... (``rows``: client ``index``'s blocks of them) activates the
    client, decided as the simulator's policy decides it from the round's chunk; the other clients'
    block means are zeros, which no client-side policy reads for this client's column."""
    out = np.empty(rows.shape[0], bool)
    i = 0
    while i < rows.shape[0]:
        chunk, j = divmod(t0 + i, CHUNK)
        k = min(rows.shape[0] - i, CHUNK - j)  # the rounds of this chunk
        means = np.zeros((CHUNK, n_clients), np.float32)  # float32 like the simulator's: same comparisons
        means[j:j + k, index] = rows[i:i + k].mean(axis=1)
        out[i:i + k] = activation.mask(chunk, means)[j:j + k, index]
        i += k
    return out
