"""Padding for unselected clients' embeddings (§4.2 of the Dynamic VF-PS report).

When only l of m clients are selected, the server's top model still expects m embeddings; the
missing ones are filled in by a padding strategy. Each strategy is a small class with one
``update(client, embedding)`` (the server saw a real embedding from ``client``) and one
``fill(client, n)`` (the value standing in for it, repeated for n samples):

* :class:`ZeroPadding` — zeros;
* :class:`MeanPadding` — the running mean of everything the client sent;
* :class:`LatestPadding` — the latest embedding the client sent;
* :class:`EMAPadding` — an exponential moving average, v ← (1 − α) v + α x per received row.

``update`` takes one embedding (e,) or a batch (B, e), whose rows count as received in order;
:meth:`Padding.update_rows` records one row for each of several clients at once (the online
server's per-round form, vectorised: same result as ``update`` client by client).
Before a client has sent anything its padding is zeros. :meth:`Padding.assemble` does both steps
for one server step: feeds the present embeddings in, fills in the missing ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedstream.errors import ConfigError, DataError
from fedstream.selection.validation import check_positive_int, check_probability

PADDINGS = ("zero", "mean", "latest", "ema")


class Padding:
    """Base class: per-client state of width ``dim``; subclasses define ``_update`` (and ``_fill``)."""

    name = "base"

    def __init__(self, n_clients: int, dim: int):
        self.n_clients = check_positive_int("n_clients", n_clients)
        self.dim = check_positive_int("dim (embedding width)", dim)
        self.value = np.zeros((self.n_clients, self.dim))
        self.seen = np.zeros(self.n_clients, dtype=np.int64)  # rows received per client

    def _check(self, client: int, embedding) -> np.ndarray:
        if not 0 <= client < self.n_clients:
            raise ConfigError(f"client must be in 0..{self.n_clients - 1}, got {client}")
        x = np.asarray(embedding, dtype=np.float64)
        x = x[None, :] if x.ndim == 1 else x
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise DataError(f"client {client}'s embedding must have shape ({self.dim},) or (B, {self.dim}), "
                            f"got {np.shape(embedding)}")
        if not np.isfinite(x).all():
            raise DataError(f"client {client}'s embedding holds NaN or infinite values")
        return x

    def update(self, client: int, embedding) -> None:
        """Record embedding rows (e,) or (B, e) received from ``client``, in order."""
        x = self._check(client, embedding)
        if x.shape[0]:
            self._update(client, x)
            self.seen[client] += x.shape[0]

    def _update(self, client: int, x: np.ndarray) -> None:
        raise NotImplementedError

    def update_rows(self, rows: np.ndarray, sent: np.ndarray) -> None:
        """Record row ``rows[j]`` (m, e) for every client j with ``sent[j]``: one round's embeddings."""
        rows, sent = np.asarray(rows), np.asarray(sent, dtype=bool)
        if rows.shape != self.value.shape or sent.shape != (self.n_clients,):
            raise DataError(f"update_rows expects rows of shape {self.value.shape} and sent of shape "
                            f"({self.n_clients},), got {rows.shape} and {sent.shape}")
        idx = np.flatnonzero(sent)
        if idx.size:
            x = rows[idx].astype(np.float64)
            bad = idx[~np.isfinite(x).all(axis=1)]
            if bad.size:
                raise DataError(f"the embedding of clients {bad.tolist()} holds NaN or infinite values")
            self._update_rows(idx, x)
            self.seen[idx] += 1

    def _update_rows(self, idx: np.ndarray, x: np.ndarray) -> None:
        """One row ``x[i]`` for client ``idx[i]`` (``seen`` not yet incremented)."""
        raise NotImplementedError

    def fill(self, client: int, n: int | None = None) -> np.ndarray:
        """The padding for ``client``: (e,), or (n, e) repeated for a batch of n samples."""
        if not 0 <= client < self.n_clients:
            raise ConfigError(f"client must be in 0..{self.n_clients - 1}, got {client}")
        v = self.value[client].copy()
        return v if n is None else np.repeat(v[None, :], check_positive_int("n", n, minimum=0), axis=0)

    def assemble(self, embeddings: Sequence[np.ndarray | None], n: int) -> list[np.ndarray]:
        """Update with each present (n, e) embedding and fill the absent (None) ones: m arrays (n, e)."""
        if len(embeddings) != self.n_clients:
            raise DataError(f"expected {self.n_clients} embeddings (None for unselected clients), "
                            f"got {len(embeddings)}")
        out = []
        for j, e in enumerate(embeddings):
            if e is None:
                out.append(self.fill(j, n))
            else:
                self.update(j, e)
                out.append(np.asarray(e, dtype=np.float64).reshape(n, self.dim))
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of the per-client values and row counts (all a padding learns)."""
        return {"value": self.value.copy(), "seen": self.seen.copy()}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_dict`; DataError when its arrays do not fit this padding."""
        value, seen = np.asarray(state.get("value")), np.asarray(state.get("seen"))
        if value.shape != self.value.shape or seen.shape != self.seen.shape:
            raise DataError(f"{self.name} padding state: expected value {self.value.shape} and seen "
                            f"{self.seen.shape}, got {value.shape} and {seen.shape}")
        self.value[...], self.seen[...] = value, seen


class ZeroPadding(Padding):
    """Missing embeddings are zeros."""

    name = "zero"

    def _update(self, client, x):
        pass

    def _update_rows(self, idx, x):
        pass


class MeanPadding(Padding):
    """Missing embeddings are the running mean of all rows the client sent."""

    name = "mean"

    def _update(self, client, x):
        total = self.seen[client] + x.shape[0]
        self.value[client] += (x.sum(axis=0) - x.shape[0] * self.value[client]) / total

    def _update_rows(self, idx, x):
        self.value[idx] += (x - self.value[idx]) / (self.seen[idx] + 1)[:, None]


class LatestPadding(Padding):
    """Missing embeddings are the latest row the client sent."""

    name = "latest"

    def _update(self, client, x):
        self.value[client] = x[-1]

    def _update_rows(self, idx, x):
        self.value[idx] = x


class EMAPadding(Padding):
    """Missing embeddings are the exponential moving average v ← (1 − α) v + α x over received rows.

    The first row received initialises v (no bias towards the zero start).
    """

    name = "ema"

    def __init__(self, n_clients: int, dim: int, *, alpha: float = 0.1):
        super().__init__(n_clients, dim)
        self.alpha = check_probability("alpha", alpha, allow_zero=False)

    def _update(self, client, x):
        v = x[0] if self.seen[client] == 0 else self.value[client]
        rest = x[1:] if self.seen[client] == 0 else x
        if rest.shape[0]:
            decay = (1.0 - self.alpha) ** np.arange(rest.shape[0] - 1, -1, -1)  # newest row weighs most
            v = (1.0 - self.alpha) ** rest.shape[0] * v + self.alpha * (decay[:, None] * rest).sum(axis=0)
        self.value[client] = v

    def _update_rows(self, idx, x):
        first = (self.seen[idx] == 0)[:, None]
        self.value[idx] = np.where(first, x, (1.0 - self.alpha) * self.value[idx] + self.alpha * x)


def make_padding(name: str, n_clients: int, dim: int, **kwargs) -> Padding:
    """Padding by name: ``"zero"``, ``"mean"``, ``"latest"`` or ``"ema"`` (``alpha=``)."""
    classes = {"zero": ZeroPadding, "mean": MeanPadding, "latest": LatestPadding, "ema": EMAPadding}
    if name not in classes:
        raise ConfigError(f"padding must be one of {', '.join(map(repr, PADDINGS))}, got {name!r}")
    return classes[name](n_clients, dim, **kwargs)
