"""The typed messages that VFL parties exchange.

Parties build and consume these objects; only a transport turns them into bytes
(:mod:`fedstream.transport.codec`). ``values`` always has two dimensions (rows, width): one row
for a single event, l rows for SLR's window of embeddings or gradients.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Embedding:
    """Client -> server: the client's embedding(s) for ``round``."""

    round: int
    client: int
    values: np.ndarray  # (rows, embedding) float32


@dataclass(frozen=True)
class Query:
    """Server -> passive client: "send me your embedding for ``round``" (``rows`` of them)."""

    round: int
    client: int
    rows: int = 1


@dataclass(frozen=True)
class Gradient:
    """Server -> activated client: d loss / d embedding for ``round``."""

    round: int
    client: int
    values: np.ndarray  # (rows, embedding) float32


Message = Embedding | Query | Gradient
