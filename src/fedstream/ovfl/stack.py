"""K online VFL runs that share a stream, advanced together in batched kernels.

A paper table is a grid of runs over one stream (optimisers x activations x learning rates). Run
alone, each round of each run pays Python's cost (party methods, kernel dispatch, message framing)
several times over its arithmetic. A stack plays the K runs' round t in one go: each party role is
a *stacked party* holding the K runs' models as (K, ...) arrays (:mod:`fedstream.ovfl.stacked_parties`:
``ClientStack``, ``ServerStack``), the round is :func:`fedstream.ovfl.protocol.play_stack_round`
(the exchange of :func:`~fedstream.ovfl.protocol.play_round`, per run the same messages in the same
order), messages carry the runs they speak for, and
:class:`~fedstream.transport.stacked.StackTransport` frames and counts each run's message exactly
as that run's own transport would.

Layout only, not behaviour: every stacked kernel calls the single-run kernel on run k's slices, so
each run of a stack computes what it computes alone (models, predictions, bytes; tests compare
them). The runs stay ordinary :class:`~fedstream.ovfl.engine.OnlineVFL` objects: their metrics are
updated in place, and their models, optimiser state and byte ledgers are written back before every
checkpoint and summary (:meth:`RunStack.write_back`), so a stacked run's checkpoint is a plain run's
checkpoint and resumes either way.

What can share a stack (:func:`stack_key`): the same stream, model shapes, optimiser kind, window and
alpha, round and end; learning rates, activation (full, random, event, fixed) and evaluation or
checkpoint intervals may differ. Compressed links and the ``topl`` policy keep per-run state in the
transport or the server and run alone.
"""

from __future__ import annotations

import time

import numpy as np

from fedstream.errors import NonFiniteError, ProtocolError
from fedstream.ovfl.engine import CHUNK, STREAM_KEYS, Hooks, OnlineVFL
from fedstream.ovfl.protocol import ComputeClock, play_stack_round
from fedstream.ovfl.stacked_parties import ClientStack, ServerStack
from fedstream.transport.stacked import StackTransport


class StackDiverged(Exception):
    """Runs ``runs`` (indices into the stack) produced NaN/inf in round ``round``."""

    def __init__(self, runs: list[int], round: int):
        super().__init__(f"runs {runs} diverged at round {round}")
        self.runs, self.round = runs, round


def config_stack_key(c: dict) -> tuple | None:
    """Configs with equal keys can share a stack (from the same round on); ``None``: play alone."""
    if c["task"] != "ovfl" or c["optimizer.name"] not in ("ogd", "slr", "dlr"):
        return None
    if (c["compression.up"], c["compression.down"]) != ("none", "none") or c["activation.name"] == "topl":
        return None
    if c.get("model.backend", "numba") != "numba":  # stacks batch the compiled MLPs' kernels
        return None
    stream = tuple(c[k] for k in STREAM_KEYS)
    return stream + (c["vfl.clients"], c["model.embedding"], c["optimizer.name"], c["optimizer.window"],
                     c["optimizer.alpha"] if c["optimizer.name"] == "dlr" else None, c["rounds"])


def stack_key(run: OnlineVFL) -> tuple | None:
    """Runs with equal keys can share a stack now; ``None``: this run must play alone."""
    key = config_stack_key(run.config)
    return None if key is None else key + (run.t,)


MAX_STACK = 62
"""Most runs in one stack: a client's activation pattern over the runs is coded in an int64."""


def split_table(masks: np.ndarray) -> tuple[list[list[int]], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """Per round and client, a code for the pattern of runs in which the client is activated, and
    the table from code to (activated runs, passive runs). ``masks`` (rounds, K, M) bool. A chunk has
    few distinct patterns, so each run list is built once per chunk, not once per round."""
    K = masks.shape[1]
    if K > MAX_STACK:
        raise ProtocolError(f"a stack holds at most {MAX_STACK} runs, got {K}")
    weights = (np.int64(1) << np.arange(K, dtype=np.int64))
    codes = np.einsum("rkm,k->rm", masks.astype(np.int64), weights)
    table = {}
    for code in np.unique(codes).tolist():
        on = (code >> np.arange(K)) & 1 == 1
        table[code] = (np.flatnonzero(on), np.flatnonzero(~on))
    return codes.tolist(), table


class RunStack:
    """K :class:`OnlineVFL` runs with equal :func:`stack_key`, played together chunk by chunk."""

    def __init__(self, runs: list[OnlineVFL]):
        keys = {stack_key(r) for r in runs}
        if None in keys or len(keys) != 1:
            raise ProtocolError(f"these runs cannot share a stack (keys {sorted(map(str, keys))})")
        self.runs, self.t = runs, runs[0].t
        M = len(runs[0].clients)
        self.clients = [ClientStack(m, [r.clients[m] for r in runs]) for m in range(M)]
        self.server = ServerStack([r.server for r in runs])
        self.transport = StackTransport([r.transport.ledger for r in runs])
        self.clock = ComputeClock()
        self._base = [(r.clock.client, r.clock.server, list(r.clock.samples))
                      for r in runs]  # each run's clocks before stacking

    def run(self, end: int, hooks: list[Hooks] | None = None) -> None:
        """Play every run up to round ``end`` from the first run's stream, then write back."""
        hooks = hooks or [Hooks() for _ in self.runs]
        while self.t < end:
            chunk = self.t // CHUNK
            X, y, _ = self.runs[0].stream.batch(chunk * CHUNK, CHUNK)
            self.play_chunk(chunk, X, y, end, hooks)
        self.write_back()

    def play_chunk(self, chunk: int, X: np.ndarray, y: np.ndarray, end: int, hooks: list[Hooks]) -> None:
        """Play rounds ``self.t .. end-1`` of stream chunk ``chunk`` for every run (as
        :meth:`OnlineRun.play_chunk` does for one); raises :class:`StackDiverged` if runs blow up,
        after writing every run's state back (the others can be stacked again and go on)."""
        tic = time.perf_counter()
        xb, means = self.runs[0].chunk_blocks(X)
        held = self.runs[0].chunk_held(chunk)
        masks = np.stack([r.activation.mask_among(chunk, means, held) for r in self.runs],
                         axis=1)  # (CHUNK, K, M)
        codes, table = split_table(masks)
        j, stop = self.t - chunk * CHUNK, min(CHUNK, end - chunk * CHUNK)
        while j < stop:
            seg = min(stop, self._next_boundary(chunk * CHUNK + j, hooks) - chunk * CHUNK)
            preds = np.empty((seg - j, len(self.runs)), dtype=np.int64)
            for i in range(j, seg):
                t = chunk * CHUNK + i
                result = play_stack_round(t, [b[i] for b in xb], int(y[i]), [table[c] for c in codes[i]],
                                          self.server, self.clients, self.transport, self.clock)
                preds[i - j] = result.predictions
                if self.transport.diverged:
                    self._diverged(chunk, j, i, y, preds, masks, hooks, tic)
            if seg == CHUNK:  # a complete chunk, shown once to each run's policy before checkpoints
                for r in self.runs:
                    r.activation.observe(xb, y)
            self._advance(chunk, j, seg, y, preds, masks, hooks, tic, range(len(self.runs)))
            j = seg
        self._share_wall(time.perf_counter() - tic)

    def _next_boundary(self, t: int, hooks: list[Hooks]) -> int:
        """The next round after t at which some run closes an interval, reports or checkpoints."""
        everies = [r.metrics.interval for r in self.runs] + [h.progress_every for h in hooks if h.on_progress]
        everies += [h.checkpoint_every for h in hooks if h.checkpoint_path is not None and h.checkpoint_every]
        return min((t // e + 1) * e for e in everies)

    def _advance(self, chunk, j0, j1, y, preds, masks, hooks, tic, which) -> None:
        """Rounds j0..j1-1 of the chunk are played: update the runs ``which`` and act at boundaries."""
        t1 = chunk * CHUNK + j1
        self.t = t1
        if j1 == j0:  # nothing played (a divergence in the first round of a segment)
            return
        for k in which:
            r, h = self.runs[k], hooks[k]
            r.metrics.update_many(y[j0:j1], preds[:j1 - j0, k])
            if h.on_round is not None:  # after the segment rather than after each round
                for i in range(j0, j1):
                    h.on_round(chunk * CHUNK + i, int(y[i]), int(preds[i - j0, k]))
            r.active_counts += masks[j0:j1, k].sum(axis=0)
            r.t = t1
            if t1 % r.metrics.interval == 0:
                self._sync_bookkeeping()
                r.record_interval(self._wall(r, tic), h.on_interval)
            if h.on_progress is not None and t1 % h.progress_every == 0:
                h.on_progress(r)
            if h.checkpoint_path is not None and h.checkpoint_every and t1 % h.checkpoint_every == 0:
                self.write_back()
                r.save(h.checkpoint_path, wall=self._wall(r, tic) - r.wall_seconds)

    def _diverged(self, chunk, j0, i, y, preds, masks, hooks, tic) -> None:
        """Round i made NaN/inf in some runs: finish it for the others, write everything back, raise."""
        bad = sorted(self.transport.diverged)
        self._advance(chunk, j0, i, y, preds, masks, hooks, tic, bad)
        self._advance(
            chunk, j0, i + 1, y, preds, masks, hooks, tic, [k for k in range(len(self.runs)) if k not in bad]
        )
        self._share_wall(time.perf_counter() - tic)
        self.write_back()
        raise StackDiverged(bad, chunk * CHUNK + i)

    def _wall(self, run: OnlineVFL, tic: float) -> float:
        return run.wall_seconds + (time.perf_counter() - tic) / len(self.runs)

    def _share_wall(self, seconds: float) -> None:
        """Each run is charged an equal share of the stack's time (it shares every kernel call)."""
        for r in self.runs:
            r.wall_seconds += seconds / len(self.runs)

    def _sync_bookkeeping(self) -> None:
        """Bytes and compute clocks into each run (each run's share of the stack's clocks)."""
        self.transport.write_back()
        K = len(self.runs)
        for r, (client, server, samples) in zip(self.runs, self._base):
            r.clock.client = client + self.clock.client / K
            r.clock.server = server + self.clock.server / K
            r.clock.samples = [a + b / K for a, b in zip(samples, self.clock.samples)]

    def write_back(self) -> None:
        """Every run's models, optimiser state, windows, bytes and clocks, from the stack."""
        for m, c in enumerate(self.clients):
            c.write_back([r.clients[m] for r in self.runs])
        self.server.write_back([r.server for r in self.runs])
        self._sync_bookkeeping()

    def diverged_error(self, k: int, t: int):
        """The :class:`~fedstream.errors.DivergedError` of run k at round t. Alone, a run stops at the
        message that carries NaN/inf; a stack finishes the round for every run, so the message may
        name the server's model too, and the diverged run's bytes include the rest of that round."""
        return self.runs[k].diverged(t, NonFiniteError(f"round {t}: NaN or inf in a message"))
