"""The fused path of the in-process simulator: segments of rounds in one compiled call.

Over the plain in-process transport a message is encoded, counted and decoded back into the
same float32 values, so what decides a run is the parties' arithmetic and the order of it.
:class:`FusedPath` plays a segment of rounds (up to the next evaluation interval, checkpoint,
progress report or chunk end) in :func:`fedstream.ovfl.fused_kernels.play_segment`, which runs
the parties' own kernels on the parties' own arrays (models, optimiser windows, input and label
rings) with no message in between. What the messages would have carried is accounted for from
the activation mask:

* bytes: each round client m sends one embedding (activated, or queried when passive) and
  receives one gradient (activated) or one query (passive); their sizes are the codec's
  (:func:`fedstream.transport.codec.encoded_size`, tested equal to ``len(encode(msg))``), and the
  ledger gets the same per-client up, down and message counts as the message path's;
* compute time: the compiled loop reads the CPU's cycle counter around the client part and the
  server part of each round (:func:`fedstream.ovfl.fused_kernels.play_segment`); a segment's cycles
  are converted to seconds with the segment's own wall time, and its CPU time (``thread_time``)
  scales them to CPU seconds. ``client_compute_seconds`` is then the time in client arithmetic
  (observation, forward passes, window skips, backward passes and steps), as on the message path
  without the transport; that path's clock also times each party method's Python call. (The
  message path picks the sections that read the CPU clock with its own random generator; the
  fused path draws nothing from it. That generator decides timing samples only, no result.)

It applies where the message path is a pure function of the arithmetic: an
:class:`~fedstream.transport.InProcessTransport` (no compression), every passive client queried
(not ``topl``, whose server stand-in learns from every round in Python), SLR after its first l-1
rounds (while the window fills, the row count changes every round; those rounds take the
message path). ``simulator.path = "messages"`` forces the message path. The message path stays the
reference: ``tests/test_ovfl_fused.py`` checks that both give the same models, errors and bytes.
"""

from __future__ import annotations

import time

import numpy as np
from numba.typed import List

from fedstream.optim.dlr import DLR
from fedstream.ovfl.fused_kernels import cycle_count, floor_segment, play_segment, typed_list
from fedstream.transport import InProcessTransport
from fedstream.transport.codec import encoded_size
from fedstream.transport.messages import Embedding, Gradient, Query

F32 = np.float32


def fused_applies(config: dict, transport, server, blocks: list[slice]) -> bool:
    """Whether a run with this config, transport, server and feature blocks can take the fused path."""
    return (config.get("simulator.path", "auto") == "auto" and config.get("model.backend", "numba") == "numba"
            and type(transport) is InProcessTransport
            and server.stand_in is None and all(b.step in (None, 1) for b in blocks))


def array_list(arrays) -> List:
    """A numba typed list of the arrays themselves (no copy): built by the cached
    :func:`typed_list` where the arrays share one numba type (dtype, dimensions, C order,
    writeable), else filled from Python."""
    arrays = tuple(arrays)
    first = arrays[0] if arrays else None
    if first is not None and all(a.dtype == first.dtype and a.ndim == first.ndim and a.flags.c_contiguous
                                 and a.flags.writeable for a in arrays):
        return typed_list(arrays)
    out = List()
    for a in arrays:
        out.append(a)
    return out


def _rows(X: np.ndarray) -> np.ndarray:
    """A chunk's rows as the compiled loop reads them: C-ordered float32 (no copy if they are)."""
    return np.ascontiguousarray(X, dtype=F32)


def optimiser_arrays(opts: list, n_layers: int, dlr: bool) -> tuple:
    """The compiled loops' view of the parties' optimisers ``opts`` (``n_layers`` layers in all):
    (deferred, SW, AS, SB, U, V, alpha, alpha_l, scale), DLR's per-layer state (or placeholders, for
    OGD and SLR), its scalars and each party's step size. The arrays are the optimisers' own."""
    one2, one1 = np.zeros((1, 1), F32), np.zeros(1, F32)
    if not dlr:
        holders, shares = array_list([one2] * n_layers), array_list([one1] * n_layers)
        return (np.zeros(n_layers, bool), holders, shares, shares, holders, holders, 0.0, 0.0,
                np.array([o.lr for o in opts]))
    SW, AS, SB, U, V, deferred = [], [], [], [], [], []
    for o in opts:
        for k in range(len(o.S_b)):
            deferred.append(o.shares[k] is not None)
            SW.append(one2 if o.S_W[k] is None else o.S_W[k])
            AS.append(one1 if o.shares[k] is None else o.shares[k])
            SB.append(o.S_b[k])
            U.append(o.ring_delta[k])
            V.append(o.ring_inp[k])
    SW, AS, SB, U, V = (array_list(a) for a in (SW, AS, SB, U, V))
    return (np.array(deferred), SW, AS, SB, U, V, opts[-1].alpha, opts[-1].alpha_l,
            np.array([o.lr / o.norm for o in opts]))


class FusedPath:
    """The arrays of one run's parties, laid out for :func:`play_segment`, and its bookkeeping."""

    def __init__(self, clients: list, server, clock, ledger, blocks: list[slice]):
        self.clients, self.server, self.clock, self.ledger = clients, server, clock, ledger
        self.cols = np.array([[b.start, b.stop] for b in blocks], np.int64)  # client m's columns
        parties = [*clients, server]
        self.rows = server.window  # message rows R: SLR's window, else 1
        self.e = server.embedding
        layers, first = [], [0]
        for party in parties:
            layers += party.model.layers
            first.append(len(layers))
        self.first = np.array(first, np.int64)
        opts = [party.optimizer for party in parties]
        self.dlr = isinstance(opts[-1], DLR)
        R = self.rows
        self.W = array_list(layer.W for layer in layers)
        self.B = array_list(layer.b for layer in layers)
        self.relu = np.array([layer.relu for layer in layers])
        self.OUT = array_list(np.empty((R, layer.W.shape[0]), F32) for layer in layers)
        self.DEL = array_list(np.empty((R, layer.W.shape[0]), F32) for layer in layers)
        self.GIN = array_list(np.empty((R, layer.W.shape[1]), F32) for layer in layers)
        self.ZD = array_list(np.zeros((1, layer.W.shape[0]), F32) for layer in layers)
        self.ZX = array_list(np.zeros((1, layer.W.shape[1]), F32) for layer in layers)
        self._dlr_state(opts)
        self.INBUF = array_list(c.inputs.buf for c in clients)
        self.XR = array_list(np.empty_like(c.inputs.buf) for c in clients)
        self.LROWS = np.empty_like(server.labels.buf)
        n_in = server.model.n_in
        self.H = np.empty((R, n_in), F32)
        self.LOSS = np.empty(R, np.float64)
        self.GL = np.empty((R, server.model.n_out), F32)
        self.GC = array_list(np.empty((R, self.e), F32) for _ in clients)
        self.pred = np.empty(0, np.int64)
        self.cycles = np.zeros(2, np.int64)
        self.sizes = (encoded_size(Embedding, R, self.e), encoded_size(Gradient, R, self.e),
                      encoded_size(Query, R, 0))

    def _dlr_state(self, opts: list) -> None:
        """DLR's per-layer state (or placeholders, for OGD and SLR), its scalars and step sizes."""
        (self.deferred, self.SW, self.AS, self.SB, self.U, self.V, self.alpha, self.alpha_l,
         self.scale) = optimiser_arrays(opts, len(self.W), self.dlr)

    def ready(self, rounds: int = 1) -> bool:
        """True once every ring holds R rows (SLR's first l-1 rounds take the message path)."""
        return self.server.labels.count + 1 >= self.rows

    def play(self, X: np.ndarray, y: np.ndarray, mask: np.ndarray, j0: int,
             j1: int) -> tuple[np.ndarray, int]:
        """Rounds j0 .. j1-1 of a chunk (its rows ``X``, labels ``y``, activation ``mask``): the
        predictions of the rounds played, and -1 or the index of the round in which a NaN or inf
        appeared (the rounds before it were played)."""
        if self.pred.shape[0] < mask.shape[0]:
            self.pred = np.empty(mask.shape[0], np.int64)
        parties = [*self.clients, self.server]
        opts = [p.optimizer for p in parties]
        counts = np.array([c.inputs.count for c in self.clients] + [self.server.labels.count], np.int64)
        pos = np.array([getattr(o, "pos", 0) for o in opts], np.int64)
        self.cycles[:] = 0
        wall, cpu, c0 = time.perf_counter(), time.thread_time(), cycle_count()
        bad = play_segment(j0, j1, _rows(X), self.cols, y, mask, self.first, self.W, self.B, self.relu,
                           self.deferred, self.OUT, self.DEL, self.GIN, self.SW, self.AS, self.SB, self.U,
                           self.V, self.ZD, self.ZX, pos, self.dlr, self.alpha, self.alpha_l, self.scale,
                           self.INBUF, self.XR, counts, self.server.labels.buf, self.LROWS, self.H,
                           self.LOSS, self.GL, self.GC, self.pred, self.cycles)
        c1 = cycle_count()
        cpu = time.thread_time() - cpu  # read inside the wall interval: CPU time nests in wall time
        wall = time.perf_counter() - wall
        for client, count in zip(self.clients, counts[:-1]):
            client.inputs.count = int(count)
        self.server.labels.count = int(counts[-1])
        if self.dlr:
            for o, p in zip(opts, pos):
                o.pos = int(p)
        done = j1 if bad < 0 else bad
        self._count(mask[j0:done])
        per_cycle = wall / (c1 - c0) if c1 > c0 else 0.0
        self.clock.add_segment(float(self.cycles[0]) * per_cycle, float(self.cycles[1]) * per_cycle,
                               cpu / wall if wall > 0 else 1.0)
        return self.pred[j0:done], int(bad)

    def floor(self, X: np.ndarray, y: np.ndarray, j0: int, j1: int) -> None:
        """Rounds j0 .. j1-1 by :func:`floor_segment` (the bench's kernel-only floor; Full
        activation, OGD or DLR). It leaves the rings, the ledger and the metrics behind: a run
        advanced this way is only good for its models."""
        if self.rows != 1:
            raise ValueError("the kernel-only floor plays one-row messages (OGD, DLR), not SLR")
        if self.pred.shape[0] < y.shape[0]:
            self.pred = np.empty(y.shape[0], np.int64)
        opts = [p.optimizer for p in (*self.clients, self.server)]
        pos = np.array([getattr(o, "pos", 0) for o in opts], np.int64)
        floor_segment(j0, j1, _rows(X), self.cols, y, self.first, self.W, self.B, self.relu, self.deferred,
                      self.OUT, self.DEL, self.GIN, self.SW, self.AS, self.SB, self.U, self.V, pos, self.dlr,
                      self.alpha, self.alpha_l, self.scale, self.INBUF, self.H, np.zeros(1, np.int64),
                      self.LOSS, self.GL, self.GC, self.pred)
        if self.dlr:
            for o, p in zip(opts, pos):
                o.pos = int(p)

    def _count(self, mask: np.ndarray) -> None:
        """The ledger entries of the messages of ``mask``'s rounds (see the module docstring)."""
        emb, grad, query = self.sizes
        active = mask.sum(axis=0)
        passive = mask.shape[0] - active
        led = self.ledger
        for m in range(len(self.clients)):
            a, p = int(active[m]), int(passive[m])
            led.up[m] += (a + p) * emb
            led.down[m] += a * grad + p * query
            led.messages[m] += 2 * (a + p)
