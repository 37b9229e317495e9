"""What every server-side stand-in for remote client nodes shares: the fault log and the exchange.

The CHFL and batch VFL cohorts (:mod:`fedstream.deploy.chfl_proxy`, :mod:`fedstream.deploy.vfl_batch_proxy`)
send one request per node over a link and never let a node's failure raise past them: each failed
request is logged (logger ``fedstream.deploy``) and recorded for ``summary.json``. A node's state,
which Flower does not keep between the fresh processes it runs each message in, travels as one
``torch.save`` archive (:func:`pack_state`, :func:`unpack_state`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable

import numpy as np
import torch

from fedstream.deploy.link import Envelope, Failure, Link
from fedstream.errors import ProtocolError

log = logging.getLogger("fedstream.deploy")


class RemoteNodes:
    """Client nodes behind ``link``: one exchange of requests at a time, and the faults seen.

    ``unit`` names what a request's number counts in the log ("round" for CHFL, "step" for batch VFL).
    """

    unit = "round"

    def __init__(self, link: Link):
        self.link = link
        self.faults: list[dict] = []  # {"round", "client", "request", "reason"} per node and failed request
        self.exchanges = 0  # requests sent to the link (each one round trip, nodes in parallel)

    def fault(self, m: int, t: int, request: str, reason: str) -> None:
        """Record and log that client m's node failed a request."""
        log.warning("client %d, %s request for %s %d: %s", m, request, self.unit, t, reason)
        self.faults.append({"round": t, "client": m, "request": request, "reason": reason[:500]})

    def require_all(self, ready: Iterable[int], n: int, run: str) -> None:
        """Raise ProtocolError naming the clients of 0..n-1 not in ``ready`` (a run needs them all)."""
        missing = sorted(set(range(n)) - set(ready))
        if missing:
            raise ProtocolError(f"clients {missing} did not set up (see faults: "
                                f"{[f['reason'] for f in self.faults][:3]}); {run}")

    def _exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | Failure]:
        """Send every request at once; a node that did not answer gets a :class:`Failure`."""
        if not requests:
            return {}
        self.exchanges += 1
        replies = self.link.exchange(requests)
        return {m: replies.get(m, Failure("no reply")) for m in requests}


def pack_state(key: str, state: dict) -> dict[str, np.ndarray]:
    """``state`` (tensors and plain values) as one ``torch.save`` archive: ``{key: uint8 array}``."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return {key: np.frombuffer(buf.getvalue(), np.uint8).copy()}


def unpack_state(key: str, packed: dict[str, np.ndarray], owner: str) -> dict:
    """The state :func:`pack_state` wrote, loaded with ``weights_only=True``; ``owner`` names the
    node in the error when the archive is not the expected one."""
    if set(packed) != {key}:
        raise ProtocolError(f"{owner}: saved state holds {sorted(packed)}, expected [{key!r}]")
    return torch.load(io.BytesIO(np.ascontiguousarray(packed[key]).tobytes()), weights_only=True)
