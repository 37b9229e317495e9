"""The in-process simulator of event-driven online VFL.

:class:`OnlineVFL` builds the parties from a config, feeds them the stream chunk by chunk and
plays :func:`fedstream.ovfl.protocol.play_round` over an :class:`InProcessTransport`. It owns the
run-level bookkeeping: prequential metrics, activation counts, compute clocks and checkpoints.
All randomness is keyed by (seed, absolute round or chunk), so a resumed run continues exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import fedstream
from fedstream.data import Stream, TableSource, TableSpec, load_source, resolve_data_root
from fedstream.errors import ConfigError, DivergedError, NonFiniteError
from fedstream.jit import Stopwatch
from fedstream.metrics import Prequential
from fedstream.ovfl.activation import activation_from_config
from fedstream.ovfl.fused import FusedPath, fused_applies
from fedstream.ovfl.parties import build_parties
from fedstream.ovfl.protocol import ComputeClock, play_round
from fedstream.runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from fedstream.runs.state import collect, restore
from fedstream.seams import SegmentPath
from fedstream.transport import CompressionSpec, make_transport

CHUNK = 4096  # rounds fetched from the stream (and activation draws made) at a time


@dataclass
class Hooks:
    """What a run does besides learning: callbacks and checkpoints.

    ``on_progress(run)`` every ``progress_every`` rounds; ``on_interval(row)`` when an evaluation
    interval closes; ``on_round(t, y, prediction)`` after every round; a checkpoint to
    ``checkpoint_path`` every ``checkpoint_every`` rounds (0: only at the end).
    """

    on_progress: Callable[[OnlineVFL], None] | None = None
    on_interval: Callable[[dict], None] | None = None
    on_round: Callable[[int, int, int], None] | None = None
    checkpoint_path: Path | None = None
    checkpoint_every: int = 0
    progress_every: int = 500


def feature_blocks(n_features: int, n_clients: int) -> list[slice]:
    """Contiguous feature blocks, as equal as possible (the first blocks get the remainder)."""
    if not 1 <= n_clients <= n_features:
        raise ConfigError(f"vfl.clients = {n_clients}: must be between 1 and the {n_features} features")
    parts = np.array_split(np.arange(n_features), n_clients)
    return [slice(int(p[0]), int(p[-1]) + 1) for p in parts]


STREAM_KEYS = ("data.name", "data.root", "data.stats_rows", "seed", "stream.drift", "stream.drift_every",
               "data.path", "data.label", "data.id", "data.categorical", "vfl.partition")
"""The config keys that decide the stream: runs equal in these read the very same rows."""


def make_stream(config: dict) -> Stream:
    """The stream a config asks for, read from the resolved data root (``table``: from data.path)."""
    root = resolve_data_root(config["data.root"])
    table = TableSpec.from_config(config) if config["data.name"] == "table" else None
    source = load_source(config["data.name"], root, seed=config["seed"], stats_rows=config["data.stats_rows"],
                         table=table)
    return Stream(
        source, drift=config["stream.drift"], drift_every=config["stream.drift_every"], seed=config["seed"]
    )


def table_rounds(config: dict, source: TableSource) -> int:
    """The rounds of a run over a table: ``rounds`` (none: rows x passes), at most rows x passes."""
    most = source.n_base * config["stream.passes"]
    rounds = most if config["rounds"] is None else config["rounds"]
    if rounds > most:
        raise ConfigError(f"rounds = {rounds} exceeds the {source.n_base} rows of data.path x "
                          f"stream.passes = {config['stream.passes']} ({most}); "
                          "lower rounds or raise stream.passes")
    return rounds


class OnlineRun:
    """What every online VFL backend shares (the simulator, :class:`OnlineVFL`, and the deployment's
    server, :class:`fedstream.ovfl.deploy.driver.NetworkVFL`): the loop over the stream's chunks and
    their segments (:meth:`play_chunk`), the run-level bookkeeping (round, prequential metrics,
    activation counts, compute clocks, wall time, divergence checks) and the checkpoint's frame
    (:meth:`save`, :meth:`load`). A backend builds its parties and says what a chunk's rounds take
    (:meth:`chunk_inputs`, :meth:`chunk_paths`) and what else its checkpoint holds
    (:meth:`_parts`, :meth:`saved`, :meth:`restored`)."""

    config: dict
    stream: Stream
    server: Any
    clients: list
    transport: Any
    activation: Any

    def _bookkeeping(self, n_clients: int) -> None:
        self.metrics = Prequential(self.config["eval.interval"])
        self.active_counts = np.zeros(n_clients, dtype=np.int64)
        self.clock = ComputeClock()
        self.wall_seconds = 0.0  # the run's time, without compiling kernels (compile_seconds)
        self.compile_seconds = 0.0
        self.interval_rows: list[dict] = []
        self.t = 0  # next round to play

    # -- running -----------------------------------------------------------------------------
    def run(self, rounds: int | None = None, **hooks) -> dict:
        """Play rounds ``self.t .. rounds-1`` (default: ``config["rounds"]``); return the summary.

        ``hooks`` are the fields of :class:`Hooks` (callbacks and checkpointing).
        """
        end = self.config["rounds"] if rounds is None else rounds
        h = Hooks(**hooks)
        self.start(h)
        while self.t < end:
            watch = Stopwatch()
            chunk = self.t // CHUNK
            X, y = self.chunk_rows(chunk)
            self.add_time(watch)
            self.play_chunk(chunk, X, y, end, h)
        self.close(h)
        return self.summary()

    def add_time(self, watch: Stopwatch) -> None:
        """Add a stretch of this run's work to ``wall_seconds``, and the numba compilation in it
        (the first run on a machine) to ``compile_seconds``."""
        self.wall_seconds += watch.seconds()
        self.compile_seconds += watch.compile()

    def start(self, hooks: Hooks) -> None:
        """What comes before the first round played (the deployment: setting the nodes up)."""

    def chunk_rows(self, chunk: int) -> tuple[np.ndarray | None, np.ndarray]:
        """The features (None: the backend's parties read their own) and labels of a stream chunk."""
        X, y, _ = self.stream.batch(chunk * CHUNK, CHUNK)
        return X, y

    def chunk_inputs(self, chunk: int, X: np.ndarray | None) -> tuple[list[np.ndarray], np.ndarray]:
        """Each client's feature block of a chunk (empty where the nodes hold them) and the chunk's
        activation mask (CHUNK, clients)."""
        raise NotImplementedError

    def chunk_paths(self, mask: np.ndarray) -> tuple[SegmentPath | None, np.ndarray | None]:
        """The path that plays a chunk's segments at once (None: each round by :func:`play_round`)
        and which passive clients the server queries in each round (None: all of them)."""
        raise NotImplementedError

    def play_chunk(self, chunk: int, X: np.ndarray | None, y: np.ndarray, end: int, hooks: Hooks) -> None:
        """Play the rounds of stream chunk ``chunk`` (features ``X``, labels ``y``) up to ``end``.

        The stream rows are passed in so that several runs over the same stream can share one
        generated chunk (see :mod:`fedstream.ovfl.sweep`). Time spent here is this run's. Rounds
        are played in segments that end where bookkeeping is due (:meth:`segment_end`): by the
        backend's :class:`~fedstream.seams.SegmentPath` where it is ready (the simulator's fused
        path, a deployed server's compiled batches), else one round at a time by the message path
        (:func:`fedstream.ovfl.protocol.play_round`).
        """
        watch = Stopwatch()
        blocks, mask = self.chunk_inputs(chunk, X)
        path, queried = self.chunk_paths(mask)
        base = chunk * CHUNK
        j, stop = self.t - base, min(CHUNK, end - base)
        counted = j  # rows of ``mask`` already added to active_counts
        while j < stop:
            upto = self.segment_end(j, base, stop, hooks)
            if path is not None and path.ready(upto - j):
                self._play_segment(path, X, y, mask, (base, j, upto, counted), hooks)
            else:
                if path is not None:  # not ready yet (SLR's first rounds fill its rings): one round,
                    upto = j + 1  # then ask again, so the path takes over as soon as it can
                self._play_rounds(blocks, y, mask, queried, (base, j, upto, counted), hooks)
            j = upto
            counted = self._after_segment(j, base, (blocks, y, mask), counted, hooks, watch)
        self.active_counts += mask[counted:stop].sum(axis=0)
        self.add_time(watch)

    def _play_segment(self, path: SegmentPath, X: np.ndarray | None, y: np.ndarray, mask: np.ndarray,
                      rows: tuple[int, int, int, int], h: Hooks) -> None:
        """Rows j..upto-1 of a chunk (``rows``: base, j, upto, counted) at once by ``path``."""
        base, j, upto, counted = rows
        preds, bad = path.play(X, y, mask, j, upto)
        self.metrics.update_many(y[j:j + len(preds)], preds)
        if h.on_round is not None:
            for i, p in enumerate(preds.tolist()):
                h.on_round(base + j + i, int(y[j + i]), p)
        if bad >= 0:
            raise self._diverged_at(base, bad, mask, counted, NonFiniteError("a message holds NaN or inf"))

    def _play_rounds(self, blocks: list[np.ndarray], y: np.ndarray, mask: np.ndarray,
                     queried: np.ndarray | None, rows: tuple[int, int, int, int], h: Hooks) -> None:
        """Rows j..upto-1 of a chunk (``rows``: base, j, upto, counted) one round at a time."""
        base, j0, upto, counted = rows
        for j in range(j0, upto):
            t = base + j
            try:
                result = play_round(t, [b[j] for b in blocks], int(y[j]), mask[j], self.server,
                                    self.clients, self.transport, self.clock,
                                    None if queried is None else queried[j])
            except NonFiniteError as exc:  # both sides are our parties: the numbers blew up
                raise self._diverged_at(base, j, mask, counted, exc) from exc
            self.metrics.update(int(y[j]), result.prediction)
            if h.on_round is not None:
                h.on_round(t, int(y[j]), result.prediction)
            self.t = t + 1

    def _diverged_at(self, base: int, j: int, mask: np.ndarray, counted: int,
                     exc: NonFiniteError) -> DivergedError:
        """The run stops before row j of the chunk at ``base`` (its round diverged): the rounds
        played before it are counted (``mask`` rows from ``counted``); returns the error to raise."""
        self.t = base + j
        self.active_counts += mask[counted:j].sum(axis=0)
        return self.diverged(self.t, exc)

    def segment_end(self, j: int, base: int, stop: int, h: Hooks) -> int:
        """The end (exclusive, in the chunk) of the segment from row j: the next interval end,
        checkpoint or progress report, or the chunk's ``stop`` (with an ``on_round`` hook: j + 1).
        A deployed server also starts its next batch of requests here."""
        t = base + j
        if h.on_round is not None:  # the callback sees the state after its round (it may change it)
            return j + 1
        every = [self.metrics.interval] + [n for n in (h.checkpoint_every,) if n]
        if h.on_progress is not None:
            every.append(h.progress_every)
        upto = min((t // n + 1) * n for n in every) - base
        return min(upto, stop)

    def _after_segment(self, j: int, base: int, chunk: tuple, counted: int, h: Hooks,
                       watch: Stopwatch) -> int:
        """The bookkeeping once the rows of a chunk before row j (``chunk``: blocks, labels, mask)
        have been played: the activation's view of a complete chunk, interval rows, progress,
        checkpoints. Returns the rows of the mask now added to ``active_counts``."""
        blocks, y, mask = chunk
        self.t = base + j
        if j == CHUNK:  # a complete chunk: a policy that learns from the data (topl) sees it
            self.activation.observe(blocks, y)  # once, before a checkpoint at this round saves it
        save = self.checkpoint_due(h)
        if self.t % self.metrics.interval == 0 or save:
            self.active_counts += mask[counted:j].sum(axis=0)
            counted = j
        if self.t % self.metrics.interval == 0:
            self.check_finite()  # a NaN output layer has zero gradients: messages stay finite
            self.record_interval(self.wall_seconds + watch.seconds(), h.on_interval)
        if h.on_progress is not None and self.t % h.progress_every == 0:
            h.on_progress(self)
        if save:
            self.check_finite()
            self.save(h.checkpoint_path, wall=watch.seconds(), compiled=watch.compile())
        return counted

    def checkpoint_due(self, h: Hooks) -> bool:
        """Whether the run checkpoints after round ``self.t - 1``: every ``checkpoint_every`` rounds."""
        return h.checkpoint_path is not None and bool(h.checkpoint_every) and self.t % h.checkpoint_every == 0

    def diverged(self, t: int, exc: NonFiniteError) -> DivergedError:
        """The error to raise when a party produced a NaN/inf message in round t."""
        bad = self.nonfinite_parties()
        where = f"the model of {', '.join(bad)} holds NaN or inf" if bad else str(exc)
        return DivergedError(f"training diverged at round {t}: {where} (optimizer.lr = "
                             f"{self.config['optimizer.lr']}; try a smaller one)", t)

    def check_finite(self) -> None:
        """DivergedError if a party's parameters hold NaN or inf (run at evaluation intervals and
        checkpoints: a server whose output layer is NaN sends exactly-zero gradients, so the
        message checks alone do not see it). One ``isfinite`` pass over the parameters."""
        if self.nonfinite_parties():
            raise self.diverged(self.t, NonFiniteError("a model holds NaN or inf"))

    def chunk_held(self, chunk: int) -> np.ndarray | None:
        """(CHUNK, clients) bool: which clients hold the id of each round of a chunk (per-party
        files whose ids differ, :attr:`~fedstream.data.table_source.TableSource.held`); None: all.
        A client that lacks a round's id is never activated in it; it is queried as a passive
        client is, for the embedding of its zero row (its columns' means)."""
        held = getattr(self.stream.source, "held", None)
        if held is None:
            return None
        return held[self.stream.indices(chunk * CHUNK, CHUNK) % held.shape[0]]

    def record_interval(self, wall: float, on_interval) -> None:
        row = {
            "round": self.t,
            "interval_error": self.metrics.intervals[-1],
            "top_class_share": self.metrics.top_shares[-1],
            "accumulated_error": self.metrics.accumulated_error,
            "bytes_total": self.transport.ledger.total,
            "client_compute_seconds": self.clock.client,
            "client_cpu_seconds": self.clock.cpu()[0],
            "wall_seconds": wall,
        }
        self.interval_rows.append(row)
        if on_interval is not None:
            on_interval(row)

    def close(self, hooks: Hooks) -> None:
        """What comes after the last round (the simulator: a last check and checkpoint)."""

    def summary(self) -> dict:
        """The ``summary.json`` fields every online VFL backend reports."""
        rounds = self.t
        return {
            "task": self.config["task"],
            "config": dict(self.config),
            "rounds": rounds,
            "accumulated_error": self.metrics.accumulated_error,
            "interval_errors": list(self.metrics.intervals),
            "bytes": self.transport.ledger.summary(),
            "activation_rate": (self.active_counts / max(rounds, 1)).tolist(),
            "server_compute_seconds": self.clock.server,  # wall-clock; the CPU time is server_cpu_seconds
            "server_cpu_seconds": self.clock.cpu()[1],
            "wall_seconds": self.wall_seconds,  # without numba's compilation (fedstream.jit)
            "rounds_per_second": rounds / self.wall_seconds if self.wall_seconds else float("nan"),
            **self.metrics.collapse(),  # top_class_share; collapsed and warnings when it ended collapsed
            "compile_seconds": self.compile_seconds,  # once per machine: then cached
            "fedstream_version": fedstream.__version__,
        } | self._selection_summary()

    def _selection_summary(self) -> dict:
        """topl: the time the server spent scoring clients and how often it did (no message: it scores the
        embeddings it already received, so all of topl's traffic is in ``bytes``)."""
        if not hasattr(self.activation, "estimate"):
            return {}
        return {
            "selection_seconds": self.activation.seconds,
            "selection_updates": self.activation.estimate.updates,
        }

    # -- checkpoints -------------------------------------------------------------------------
    def _parts(self) -> dict[str, object]:
        """The objects whose state_dict the checkpoint holds."""
        raise NotImplementedError

    def models(self) -> dict[str, object]:
        """The models this process holds, by party name ("server", "client m")."""
        return {"server": self.server.model}

    def nonfinite_parties(self) -> list[str]:
        """The parties ("server", "client m") whose parameters hold NaN or inf."""
        return [name for name, model in self.models().items()
                if not all(np.isfinite(p).all() for p in model.parameters())]

    def saved(self) -> tuple[dict[str, np.ndarray], dict]:
        """What the backend's checkpoint adds to the frame: (arrays, JSON-able values)."""
        return {}, {}

    def restored(self, state: dict[str, np.ndarray], meta: dict) -> None:
        """Take back :meth:`saved`'s part (KeyError or ValueError: it does not fit)."""

    def save(self, path: Path, *, wall: float = 0.0, compiled: float = 0.0) -> None:
        """Write the full state (models, optimiser windows, metrics, bytes, round) atomically."""
        arrays, values = self.saved()
        state = collect(self._parts()) | {"active_counts": self.active_counts} | arrays
        clock = [self.clock.client, self.clock.server, *self.clock.samples]
        meta = values | {
            "round": self.t, "config": self.config, "clock": clock,
            "wall_seconds": self.wall_seconds + wall, "compile_seconds": self.compile_seconds + compiled,
            "interval_rows": self.interval_rows,
            "fedstream_version": fedstream.__version__,
        }
        save_checkpoint(Path(path), state, meta)

    def load(self, path: Path) -> None:
        """Continue from a checkpoint written by :meth:`save` for the same configuration (``rounds``
        may grow)."""
        state, meta = load_checkpoint(Path(path))
        changed = [
            k
            for k, v in meta["config"].items()
            if k not in ("rounds", "checkpoint.every", "simulator.path") and self.config.get(k) != v
        ]
        if changed:
            details = ", ".join(
                f"{k}: checkpoint {meta['config'][k]!r} vs now {self.config.get(k)!r}" for k in changed
            )
            raise ConfigError(f"{path}: cannot resume with a different configuration ({details})")
        if self.config["rounds"] < meta["round"]:
            raise ConfigError(
                f"{path}: the checkpoint is at round {meta['round']}, beyond rounds = {self.config['rounds']}"
            )
        try:
            restore(self._parts(), state)
            self.active_counts[:] = state["active_counts"]
            self.restored(state, meta)
        except (KeyError, ValueError) as exc:
            raise ConfigError(
                f"{path}: checkpoint is damaged or does not fit this configuration ({exc})"
            ) from None
        bad = self.nonfinite_parties()
        if bad:
            raise CheckpointError(path, f"checkpoint refused: the model of {', '.join(bad)} holds NaN or "
                                  "inf (the run had diverged); start again with a smaller optimizer.lr")
        self.t = int(meta["round"])
        clock = list(meta["clock"])  # [client, server] before the CPU clock, then its samples
        self.clock.client, self.clock.server = clock[:2]
        self.clock.samples = (clock[2:] + [0.0] * 4)[:4]
        self.wall_seconds = float(meta["wall_seconds"])
        self.compile_seconds = float(meta.get("compile_seconds", 0.0))  # older checkpoints: not recorded
        self.interval_rows = list(meta["interval_rows"])


class OnlineVFL(OnlineRun):
    """One online VFL run: M clients and a server over a stream, in one process."""

    def __init__(self, config: dict, *, stream: Stream | None = None):
        self.config = config
        self.stream = stream if stream is not None else make_stream(config)
        source = self.stream.source
        M = config["vfl.clients"]
        if isinstance(source, TableSource):  # each client's columns, as data.path / vfl.partition say
            config["rounds"] = table_rounds(config, source)
            self.blocks = source.blocks
        else:
            self.blocks = feature_blocks(source.n_features, M)
        sizes = [block.stop - block.start for block in self.blocks]
        self.clients, self.server = build_parties(config, sizes, source.n_classes)
        # plain float32 unless compressed
        self.transport = make_transport(M, CompressionSpec.from_config(config))
        self.activation = activation_from_config(config)
        if hasattr(self.activation, "fill"):  # topl: the policy pads the clients the server does not query
            self.server.stand_in = self.activation
        self._bookkeeping(M)
        self._fused: FusedPath | None = None  # built on first use

    # -- running -----------------------------------------------------------------------------
    def close(self, hooks: Hooks) -> None:
        """Check the parameters a last time; write the final checkpoint, if checkpointing."""
        self.check_finite()
        if hooks.checkpoint_path is not None:
            self.save(hooks.checkpoint_path)

    def chunk_paths(self, mask: np.ndarray) -> tuple[SegmentPath | None, np.ndarray | None]:
        """The fused path (where it applies and no client is left unqueried) and whom the policy
        queries."""
        queried = self.activation.queried(mask)
        return (self.fused if queried is None else None), queried

    @property
    def fused(self) -> FusedPath | None:
        """The fused path of this run, or None where it does not apply (checked on each chunk:
        tests and benches may swap the transport or the config's ``simulator.path``)."""
        if not fused_applies(self.config, self.transport, self.server, self.blocks):
            return None
        if self._fused is None or self._fused.ledger is not self.transport.ledger:
            self._fused = FusedPath(self.clients, self.server, self.clock, self.transport.ledger, self.blocks)
        return self._fused

    def models(self) -> dict[str, object]:
        return {"server": self.server.model} | {f"client {m}": c.model for m, c in enumerate(self.clients)}

    def chunk_blocks(self, X: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """Each client's contiguous feature block of a chunk and the blocks' row means (n, M), the
        input of the event activation; the same for every run over this stream and split."""
        blocks = [np.ascontiguousarray(X[:, b]) for b in self.blocks]
        return blocks, np.stack([b.mean(axis=1) for b in blocks], axis=1)

    def chunk_inputs(self, chunk: int, X: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
        """Each client's feature block of a chunk, and the chunk's activation mask (drawn from the
        chunk's own key, so resume-safe)."""
        blocks, means = self.chunk_blocks(X)
        return blocks, self.activation.mask_among(chunk, means, self.chunk_held(chunk))

    # -- results -----------------------------------------------------------------------------
    def summary(self) -> dict:
        return (
            super().summary()
            | {"client_compute_seconds": self.clock.client, "client_cpu_seconds": self.clock.cpu()[0]}
            | self._table_summary()
        )

    def _table_summary(self) -> dict:
        """table: the label value of each class and each client's columns."""
        source = self.stream.source
        if not isinstance(source, TableSource):
            return {}
        out = {"classes": list(source.classes), "client_columns": source.client_columns}
        if source.alignment is not None:  # per-party files: the PSI, apart from the training's bytes
            out["alignment"] = source.alignment.summary()
        return out

    # -- checkpoints -------------------------------------------------------------------------
    def _parts(self) -> dict[str, object]:
        parts: dict[str, object] = {
            "server": self.server,
            "ledger": self.transport.ledger,
            "metrics": self.metrics,
        }
        if hasattr(self.transport, "state_dict"):  # codec state: caches, last gradients, previous sigma
            parts["codecs"] = self.transport
        if hasattr(self.activation, "state_dict"):  # topl: its online estimate
            parts["activation"] = self.activation
        parts |= {f"client{m}": c for m, c in enumerate(self.clients)}
        return parts
