"""The typed messages that VFL parties exchange.

Parties build and consume these objects; only a transport turns them into bytes
(:mod:`fedstream.transport.codec`). ``values`` always has two dimensions (rows, width): one row
for a single event, l rows for SLR's window of embeddings or gradients. Messages are immutable
named tuples: cheap to build, since the simulator makes several per round.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Embedding(NamedTuple):
    """Client -> server: the client's embedding(s) for ``round``."""

    round: int
    client: int
    values: np.ndarray  # (rows, embedding) float32


class Query(NamedTuple):
    """Server -> passive client: "send me your embedding for ``round``" (``rows`` of them)."""

    round: int
    client: int
    rows: int = 1


class Gradient(NamedTuple):
    """Server -> activated client: d loss / d embedding for ``round``."""

    round: int
    client: int
    values: np.ndarray  # (rows, embedding) float32


Message = Embedding | Query | Gradient
