"""A deployed party's batch of events in compiled calls: the fused path's kernels on one party.

The simulator's fused path (:mod:`fedstream.ovfl.fused`) plays rounds of every party in one
compiled loop. A deployed party holds one side only, and a request brings it a batch of B events
(``network.batch``): :class:`PartyArrays` lays out one party's own arrays (its model, optimiser
window and input or label ring, the arrays themselves, no copy) for the kernels of
:mod:`fedstream.ovfl.fused_kernels`:

* a client node: :meth:`PartyArrays.learn` applies the previous batch's gradients and skips in
  round order (:func:`~fedstream.ovfl.fused_kernels.client_learn`), then :meth:`PartyArrays.embed`
  observes the batch's rows and computes every embedding at the batch's starting weights, keeping
  each event's forward state (:func:`~fedstream.ovfl.fused_kernels.client_embed`);
* the server: :meth:`PartyArrays.serve` plays its learning step for each event of the batch
  (:func:`~fedstream.ovfl.fused_kernels.server_events`).

The kernels call the very layer and optimiser kernels the parties' Python methods call, in the
same order, so a batch played here leaves the models the per-event path leaves, bit for bit
(``tests/test_deploy_kernels.py`` compares both for B = 1, 16 and 256).

It applies (:func:`kernels_apply`) to the numba backend's parties (DLR, OGD, SLR) once their
window is full (SLR's first l - 1 rounds take the per-event path); the message bytes of a batch
are packed here too (:func:`pack`, :func:`unpack`): the codec's layout
(:mod:`fedstream.transport.codec`), checked for a whole batch in a few array operations.
"""

from __future__ import annotations

import numpy as np

from fedstream.models import MLP
from fedstream.optim import DLR, OGD
from fedstream.ovfl.fused import array_list, optimiser_arrays
from fedstream.ovfl.fused_kernels import client_embed, client_learn, server_events
from fedstream.transport.codec import HEADER, KINDS, encoded_size
from fedstream.transport.compressed import CompressionSpec

F32 = np.float32
# a batch of fewer events takes the per-event path: the compiled path's set-up per batch (typed
# lists, packing, checks at once) costs more than it saves there (B = 1: 0.4x the per-event path)
MIN_EVENTS = 8
HEADERS = np.dtype([("kind", "u1"), ("round", "<u4"), ("client", "<u2"), ("rows", "<u2"), ("cols", "<u2")])


def batched(events: int) -> bool:
    """Whether a batch of ``events`` events is worth the compiled path (:data:`MIN_EVENTS`)."""
    return events >= MIN_EVENTS


def kernels_apply(config: dict, party) -> bool:
    """Whether ``party`` (a client or the server) plays its batches through the kernels: a numba MLP
    with DLR or OGD (SLR), no compression and ``simulator.path = "auto"``. Each batch also needs the
    party's row window full (:meth:`PartyArrays.ready`)."""
    return (config.get("simulator.path", "auto") == "auto" and CompressionSpec.from_config(config).is_none
            and type(party.model) is MLP and type(party.optimizer) in (DLR, OGD))


def _headers(kind: type, rounds: np.ndarray, client: int, rows: int, cols: int) -> np.ndarray:
    """The codec's headers of messages of rounds ``rounds`` (n, 11) uint8."""
    head = np.empty(len(rounds), HEADERS)
    head["kind"], head["round"], head["client"] = KINDS[kind], rounds, client
    head["rows"], head["cols"] = rows, cols
    return head.view(np.uint8).reshape(len(rounds), HEADER.size)


def pack(kind: type, rounds: np.ndarray, client: int, values: np.ndarray) -> list[bytes]:
    """The encoded messages of rounds ``rounds`` from (or to) ``client``: one per row of
    ``values`` (n, rows, cols) float32, or, for queries, (n, rows, 0): what
    :func:`fedstream.transport.codec.encode` makes of each, in one buffer."""
    n, rows, cols = values.shape
    size = encoded_size(kind, rows, cols)
    buf = np.empty((n, size), np.uint8)
    buf[:, :HEADER.size] = _headers(kind, rounds, client, rows, cols)
    if cols:
        buf[:, HEADER.size:] = np.ascontiguousarray(values, F32).reshape(n, rows * cols).view(np.uint8)
    data = buf.tobytes()
    return [data[i:i + size] for i in range(0, n * size, size)]


def unpack(parts: list[bytes], kind: type, rounds: np.ndarray, client: int, shape: tuple[int, int]
           ) -> np.ndarray | None:
    """The values (n, rows, cols) of ``parts`` when each is the plain encoding of a ``kind`` message
    of round ``rounds[i]`` for (or from) ``client`` with ``shape`` ((rows, 0) for queries) and finite
    values; else None (the caller then decodes them one by one, which names what is wrong). The
    headers are compared with those :func:`pack` writes, whole (one comparison per batch)."""
    rows, cols = shape
    n, size = len(parts), encoded_size(kind, rows, cols)
    if not n:
        return np.empty((0, rows, cols), F32)
    # every part of the size: together n * size bytes, none shorter
    data = b"".join(parts)
    if len(data) != size * n or min(map(len, parts)) != size or (rounds >> 32).any():  # a round past u32
        return None
    raw = np.frombuffer(data, np.uint8).reshape(n, size)
    if not (raw[:, :HEADER.size] == _headers(kind, rounds, client, rows, cols)).all():
        return None
    values = raw[:, HEADER.size:].copy().view(F32).reshape(n, rows, cols)
    return values if np.isfinite(values).all() else None


class PartyArrays:
    """One party's arrays (``party``: a :class:`~fedstream.ovfl.client.Client` or the
    :class:`~fedstream.ovfl.server.Server`), laid out for the batch kernels."""

    def __init__(self, party):
        self.party = party
        # the row window: a client's inputs, the server's labels
        self.ring = party.inputs if hasattr(party, "inputs") else party.labels
        layers = party.model.layers
        self.R = party.window
        self.W = array_list(layer.W for layer in layers)
        self.B = array_list(layer.b for layer in layers)
        self.relu = np.array([layer.relu for layer in layers])
        self.OUT = array_list(np.empty((self.R, layer.W.shape[0]), F32) for layer in layers)
        self.DEL = array_list(np.empty((self.R, layer.W.shape[0]), F32) for layer in layers)
        self.GIN = array_list(np.empty((self.R, layer.W.shape[1]), F32) for layer in layers)
        self.ZD = array_list(np.zeros((1, layer.W.shape[0]), F32) for layer in layers)
        self.ZX = array_list(np.zeros((1, layer.W.shape[1]), F32) for layer in layers)
        opt = party.optimizer
        self.dlr = isinstance(opt, DLR)
        (self.deferred, self.SW, self.AS, self.SB, self.U, self.V, self.alpha, self.alpha_l,
         scale) = optimiser_arrays([opt], len(layers), self.dlr)
        self.scale = float(scale[0])

    def ready(self, events: int) -> bool:
        """Whether a batch of ``events`` events plays here: at least :data:`MIN_EVENTS`, and the
        party's row window full from the next event on (SLR's first l - 1 rounds take the per-event
        path)."""
        return batched(events) and self.ring.count + 1 >= self.ring.length

    @property
    def pos(self) -> int:
        return getattr(self.party.optimizer, "pos", 0)

    def _moved(self, pos: int) -> None:
        if self.dlr:
            self.party.optimizer.pos = int(pos)

    # -- a client node ---------------------------------------------------------------------------
    def learn(self, order: np.ndarray, grads: np.ndarray, states: list[np.ndarray]) -> None:
        """The previous batch's events in round order (``order``: -1 a skip, else the slot of the
        event's gradient in ``grads`` (n, R, e) and of its forward state in ``states``: the input
        (n, R, in), then each layer's output)."""
        if not order.size:
            return
        if not states:  # skips only: the kernel still takes the arrays' types
            layers = self.party.model.layers
            widths = [layers[0].W.shape[1]] + [layer.W.shape[0] for layer in layers]
            states = [np.empty((0, self.R, w), F32) for w in widths]
        inputs, acts = states[0], array_list(states[1:])
        GW = np.empty((self.R, grads.shape[2]), F32)
        self._moved(client_learn(order, grads, inputs, acts, self.W, self.B, self.relu, self.deferred,
                                 self.OUT, self.DEL, self.GIN, self.SW, self.AS, self.SB, self.U, self.V,
                                 self.ZD, self.ZX, self.pos, self.dlr, self.alpha, self.alpha_l, self.scale,
                                 GW))

    def embed(self, X: np.ndarray) -> list[np.ndarray]:
        """Observe rows ``X`` (n, in) one event each and compute their embeddings at the current
        weights; return each event's forward state: the input (n, R, in), then each layer's output
        (n, R, width); the last is the embeddings."""
        client, n = self.party, X.shape[0]
        inputs = client.inputs
        states = [np.empty((n, self.R, X.shape[1]), F32)] + [
            np.empty((n, self.R, layer.W.shape[0]), F32) for layer in client.model.layers]
        inputs.count = int(client_embed(np.ascontiguousarray(X, F32), inputs.buf, np.empty_like(inputs.buf),
                                        inputs.count, self.W, self.B, self.relu, self.deferred, self.U,
                                        self.V, self.AS, self.OUT, states[0], array_list(states[1:])))
        return states

    # -- the server ------------------------------------------------------------------------------
    def serve(self, H: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The server's step for each event of a batch (stacked embeddings ``H`` (n, R, M*e), labels
        ``y``): its predictions (n,) and d loss / d input (n, R, M*e)."""
        server, n = self.party, H.shape[0]
        labels = server.labels
        pred, GH = np.empty(n, np.int64), np.empty_like(H)
        count, pos = server_events(H, np.asarray(y, np.int64), labels.buf, np.empty_like(labels.buf),
                                   labels.count, self.W, self.B, self.relu, self.deferred, self.OUT, self.DEL,
                                   self.GIN, self.SW, self.AS, self.SB, self.U, self.V, self.pos, self.dlr,
                                   self.alpha, self.alpha_l, self.scale, np.empty(self.R, np.float64),
                                   np.empty((self.R, server.model.n_out), F32), pred, GH)
        labels.count = int(count)
        self._moved(pos)
        return pred, GH
