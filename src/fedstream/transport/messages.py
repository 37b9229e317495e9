"""The typed messages that VFL parties exchange.

Parties build and consume these objects; only a transport turns them into bytes
(:mod:`fedstream.transport.codec`). ``values`` always has two dimensions (rows, width): one row
for a single event, l rows for SLR's window of embeddings or gradients. Messages are immutable
named tuples: cheap to build, since the simulator makes several per round.

``runs``: when K runs that share a stream are advanced together (:mod:`fedstream.ovfl.stack`), one
message object carries the same message of several runs; ``runs`` lists them and ``values`` gets a
leading run axis (len(runs), rows, width). On the wire each run's message is its own frame, byte for
byte what that run alone would send (:mod:`fedstream.transport.stacked`). ``None``: one run.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Embedding(NamedTuple):
    """Client -> server: the client's embedding(s) for ``round``."""

    round: int
    client: int
    values: np.ndarray  # (rows, embedding) float32
    runs: np.ndarray | None = None


class Query(NamedTuple):
    """Server -> passive client: "send me your embedding for ``round``" (``rows`` of them)."""

    round: int
    client: int
    rows: int = 1
    runs: np.ndarray | None = None


class Gradient(NamedTuple):
    """Server -> activated client: d loss / d embedding for ``round``."""

    round: int
    client: int
    values: np.ndarray  # (rows, embedding) float32
    runs: np.ndarray | None = None


Message = Embedding | Query | Gradient
