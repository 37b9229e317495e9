"""Participant selection in batch VFL (issue 8, the Dynamic VF-PS report): who sends, and when to re-select.

:class:`SelectionSpec` holds the ``selection.*`` keys (:mod:`fedstream.vfl.selection_spec`, checked
there); :class:`Participation` is what the trainer asks, once per epoch, for the training rows
available and the clients selected::

    part = Participation(spec, blocks, train_y, seed=0)      # blocks: per-client (n, d_j) features
    for epoch in range(1, epochs + 1):
        plan = part.plan(epoch)      # plan.rows: available rows; plan.clients: who sends
        ...                          # train on plan.rows; the server pads the other clients

Methods: ``all`` (every client), ``vfps`` (group testing with the KNN MI of eq. (1), top l; a
client's score is by default the mean of its marginal contributions alone and to all the others
(``aggregate = marginal``), or the mean of its random groups' MI as the report words it, or their
sum as in the VF-PS reference: :mod:`fedstream.selection.group_testing`),
``random`` (random picking, l of m), ``fixed`` (the clients of ``selection.clients``; an
experiment-level grid over fixed subsets is the brute force of the report's tables).

Dynamic settings (:mod:`fedstream.selection.dynamic`): ``none`` (every row, every epoch),
``discrete`` (the available subset, each row kept with ``keep``, redrawn at each epoch with
probability ``update_prob``), ``relaxed`` (rows live ``lifespan_min..lifespan_max`` epochs and absent
rows arrive with probability ``arrival`` per epoch).

When selection re-runs (VF-PS and random picking; ``all`` and ``fixed`` select once):
at epoch 1; whenever the discrete subset is redrawn; in the relaxed setting, random picking on every
epoch whose data changed and VF-PS once its pessimistic scores say the best clients may have
changed (:class:`~fedstream.selection.dynamic.PessimisticScores`); and, with ``every = N > 0``,
also every N epochs in any setting.

In a deployment (``distances``: :mod:`fedstream.vfl.deploy.vfps`) VF-PS scores the nodes' local
distances instead of the blocks, with the same draws and the same result. In the simulator
VF-PS's own traffic is not sent through the transport: each (re)selection reports
``distance_bytes``, the float32 local distances the baseline method makes every client send
(q queries x (n - 1) samples, or n(n - 1)/2 pairs when every sample is a query), counted
analytically and kept apart from the training bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from fedstream.errors import ConfigError
from fedstream.selection.dynamic import (
    DiscreteSchedule,
    PessimisticScores,
    RelaxedSchedule,
)
from fedstream.selection.methods import RandomSelector, VFPSSelector
from fedstream.vfl.selection_spec import SelectionSpec  # also imported from here by its users

__all__ = ["DISTANCE_BYTES", "EpochPlan", "Participation", "SelectionSpec"]

DISTANCE_BYTES = 4  # one float32 local distance


@dataclass(frozen=True)
class EpochPlan:
    """What an epoch trains on: the available training rows, the selected clients, and the
    (re)selection made at the start of this epoch, if any."""

    epoch: int
    rows: np.ndarray | None  # indices of the available training rows (None: all rows)
    clients: tuple[int, ...]
    event: dict | None


class Participation:
    """Available data and selected clients per epoch, for one run (call :meth:`plan` for 1, 2, ...)."""

    def __init__(self, spec: SelectionSpec, blocks: Sequence[np.ndarray], labels: np.ndarray, *, seed: int,
                 distances: Callable | None = None):
        """``distances(epoch, rows, queries) -> (m, |Q|, n)``, if given, is how VF-PS gets the clients'
        local squared distances (a deployment asks the nodes; ``rows``: the available rows or None,
        ``queries``: indices into them); without it VF-PS reads ``blocks``."""
        self.spec, self.blocks, self.labels = spec, list(blocks), np.asarray(labels)
        self.distances = distances
        self.m, self.n = len(self.blocks), len(self.labels)
        spec.check_clients(self.m)
        self.selector = None
        if spec.method == "vfps":
            self.selector = VFPSSelector(
                spec.l,
                k=spec.k,
                n_groups=spec.groups,
                queries=spec.queries,
                seed=seed,
                aggregate=spec.aggregate,
            )
        elif spec.method == "random":
            self.selector = RandomSelector(spec.l, seed=seed)
        self.schedule = None
        if spec.dynamic == "discrete":
            self.schedule = DiscreteSchedule(self.n, keep=spec.keep, update_prob=spec.update_prob, seed=seed)
        elif spec.dynamic == "relaxed":
            self.schedule = RelaxedSchedule(self.n, keep=spec.keep, arrival=spec.arrival,
                                            lifespan=(spec.lifespan_min, spec.lifespan_max), seed=seed)
        self.pessimistic: PessimisticScores | None = None
        self.weights = np.ones(self.m)  # groups each client's score sums over (aggregate = sum), else 1
        self.clients: tuple[int, ...] = ()
        self.events: list[dict] = []
        self.last_epoch = 0

    def plan(self, epoch: int) -> EpochPlan:
        """The rows and clients of ``epoch`` (1-based; epochs must come in order)."""
        if epoch != self.last_epoch + 1:
            raise ConfigError(f"Participation.plan: expected epoch {self.last_epoch + 1}, got {epoch}")
        self.last_epoch = epoch
        mask, reason = self._data(epoch)
        rows = None if mask is None else np.flatnonzero(mask)
        if self.spec.every and epoch > 1 and (epoch - 1) % self.spec.every == 0 and reason is None:
            reason = f"every {self.spec.every} epochs"
        event = None
        if epoch == 1 or (reason is not None and self.selector is not None):
            event = self._select(epoch, rows, reason or "start")
        return EpochPlan(epoch, rows, self.clients, event)

    def _data(self, epoch: int) -> tuple[np.ndarray | None, str | None]:
        """(available-row mask or None for all rows, why selection must re-run or None)."""
        if self.schedule is None:
            return None, None
        if isinstance(self.schedule, DiscreteSchedule):
            redrawn = epoch > 1 and self.schedule.changed(epoch - 1)
            return self.schedule.mask(epoch - 1), "data redrawn" if redrawn else None
        if epoch == 1:
            return self.schedule.mask.copy(), None
        step = self.schedule.step()
        if not step.changed:
            return step.mask, None
        if self.spec.method == "random":
            return step.mask, "data changed"
        if self.pessimistic is not None:
            self.pessimistic.update(step.changed, self.labels[step.mask])
            if self._bound_crossed():
                return step.mask, "pessimistic bound crossed"
        return step.mask, None

    def _select(self, epoch: int, rows: np.ndarray | None, reason: str) -> dict:
        n = self.n if rows is None else rows.size
        scores, seconds, distance_bytes = None, 0.0, 0
        if self.spec.method == "all":
            self.clients = tuple(range(self.m))
        elif self.spec.method == "fixed":
            self.clients = self.spec.clients
        else:
            blocks = self.blocks if rows is None else [b[rows] for b in self.blocks]
            labels = self.labels if rows is None else self.labels[rows]
            if n < 2:
                raise ConfigError(
                    f"epoch {epoch}: only {n} training rows are available, too few to select clients; "
                    "raise selection.keep or data.train_rows"
                )
            if self.spec.method == "vfps":
                self._check_k(labels, epoch)
            if self.spec.method == "vfps" and self.distances is not None:
                groups, queries = self.selector.plan(self.m, n)
                local = self.distances(epoch, rows, queries)
                sel = self.selector.select_distances(local, labels, groups, queries)
            else:
                sel = self.selector.select(blocks, labels)
            self.clients, seconds = sel.clients, sel.seconds
            if sel.scores is not None:
                scores = [float(s) for s in sel.scores]
            if self.spec.method == "vfps":
                q = n if self.spec.queries is None else min(self.spec.queries, n)
                pairs = n * (n - 1) // 2 if q >= n else q * (n - 1)
                distance_bytes = self.m * pairs * DISTANCE_BYTES
                if self.spec.dynamic == "relaxed":
                    self._track(sel, labels)
        event = {"epoch": epoch, "reason": reason, "clients": list(self.clients), "scores": scores,
                 "seconds": seconds, "available_rows": n, "distance_bytes": distance_bytes}
        self.events.append(event)
        return event

    def _track(self, sel, labels: np.ndarray) -> None:
        """Start the pessimistic bounds from a full selection. Eq. (1)'s per-query bounds hold for a
        group's score, hence for a client's mean over its groups; a summed score (aggregate = sum)
        is compared as c_j x that mean, c_j the number of groups client j was in; a marginal score
        has its own, wider range (``dynamic.score_bounds``)."""
        counts = np.zeros(self.m)
        for g in sel.details["groups"]:
            counts[list(g)] += 1
        self.weights = np.maximum(counts, 1) if self.spec.aggregate == "sum" else np.ones(self.m)
        means = np.nan_to_num(np.asarray(sel.scores, dtype=np.float64) / self.weights)
        if self.pessimistic is None:
            self.pessimistic = PessimisticScores(means, sel.clients, labels, k=self.spec.k,
                                                 aggregate=self.spec.aggregate)
        else:
            self.pessimistic.reset(means, sel.clients, labels)

    def _bound_crossed(self) -> bool:
        """True once an unselected client's optimistic score passes a selected client's pessimistic one."""
        p = self.pessimistic
        if p.selected.all() or not p.selected.any():
            return False
        s = p.current() * self.weights
        return bool(s[~p.selected].max() > s[p.selected].min())

    def _check_k(self, labels: np.ndarray, epoch: int) -> None:
        classes, counts = np.unique(labels, return_counts=True)
        if counts.min() <= self.spec.k:
            c = int(classes[counts.argmin()])
            raise ConfigError(
                f"selection.k = {self.spec.k} must be smaller than every class's size among the "
                f"{labels.size} training rows available at epoch {epoch}: class {c} has "
                f"{int(counts.min())} (a query is not its own neighbour); use selection.k <= "
                f"{int(counts.min()) - 1}, or more rows (data.train_rows, selection.keep)"
            )

    # -- checkpoints ------------------------------------------------------------------------------------
    def state_dict(self) -> tuple[dict, dict[str, np.ndarray]]:
        """What the next :meth:`plan` depends on, as (JSON-able values, named arrays): the epochs
        planned, the clients selected, the record of (re)selections, the selector's draws (VF-PS: calls
        made; random picking: its generator's state) and a relaxed schedule's generator, mask and
        lifespans. A deployment checkpoints this instead of replaying the plans: replaying VF-PS
        would ask the nodes for their distances again."""
        meta: dict = {"last_epoch": self.last_epoch, "clients": list(self.clients), "events": self.events,
                      "weights": [float(w) for w in self.weights]}
        arrays: dict[str, np.ndarray] = {}
        if isinstance(self.selector, VFPSSelector):
            meta["selector.calls"] = self.selector.calls
        elif isinstance(self.selector, RandomSelector):
            meta["selector.rng"] = self.selector.rng.bit_generator.state
        if isinstance(self.schedule, RelaxedSchedule):
            meta["schedule.rng"], meta["schedule.epoch"] = (
                self.schedule.rng.bit_generator.state,
                self.schedule.epoch,
            )
            arrays |= {"schedule.mask": self.schedule.mask.copy(), "schedule.life": self.schedule.life.copy()}
        if self.pessimistic is not None:
            p = self.pessimistic
            meta["pessimistic"] = {"changed": p.changed, "n": p.n, "lo": p.lo, "hi": p.hi}
            arrays |= {"pessimistic.base": p.base.copy(), "pessimistic.selected": p.selected.copy()}
        return meta, arrays

    def load_state_dict(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        """Restore what :meth:`state_dict` saved (the same spec, data size and seed)."""
        self.last_epoch, self.clients = int(meta["last_epoch"]), tuple(int(c) for c in meta["clients"])
        self.events, self.weights = list(meta["events"]), np.asarray(meta["weights"], dtype=np.float64)
        if isinstance(self.selector, VFPSSelector):
            self.selector.calls = int(meta["selector.calls"])
        elif isinstance(self.selector, RandomSelector):
            self.selector.rng.bit_generator.state = meta["selector.rng"]
        if isinstance(self.schedule, RelaxedSchedule):
            self.schedule.rng.bit_generator.state = meta["schedule.rng"]
            self.schedule.epoch = int(meta["schedule.epoch"])
            self.schedule.mask = np.asarray(arrays["schedule.mask"], dtype=bool).copy()
            self.schedule.life = np.asarray(arrays["schedule.life"]).copy()
        self.pessimistic = None
        if "pessimistic" in meta:
            p = PessimisticScores.__new__(PessimisticScores)
            p.k, p.psi, p.aggregate = self.spec.k, "approx", self.spec.aggregate
            p.base = np.asarray(arrays["pessimistic.base"], dtype=np.float64).copy()
            p.selected = np.asarray(arrays["pessimistic.selected"], dtype=bool).copy()
            for key, value in meta["pessimistic"].items():
                setattr(p, key, value)
            self.pessimistic = p

    def summary(self) -> dict:
        """The run's selection record for summary.json."""
        return {
            **{k.removeprefix("selection."): v for k, v in self.spec.to_config().items()},
            "events": self.events,
            "reselections": max(len(self.events) - 1, 0),
            "seconds": sum(e["seconds"] for e in self.events),
            "distance_bytes": sum(e["distance_bytes"] for e in self.events),
        }
