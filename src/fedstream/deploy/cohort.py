"""What every server-side stand-in for remote client nodes shares: the fault log and the exchange.

The CHFL and batch VFL cohorts (:mod:`fedstream.chfl.deploy.proxy`, :mod:`fedstream.vfl.deploy.proxy`)
send one request per node over a link and never let a node's failure raise past them: each failed
request is logged (logger ``fedstream.deploy``) and recorded for ``summary.json``. Both check a
reply's kind and number the same way (:meth:`RemoteNodes._reply`) and excuse the same clients when
a node's own byte counts differ from the server's at the finish (:meth:`RemoteNodes.troubled`: a
fault or a rejoin, ``rejoins`` being each cohort's records of nodes set up again). A node's state,
which Flower does not keep between the fresh processes it runs each message in, travels as one
``torch.save`` archive (:func:`pack_state`, :func:`unpack_state`).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable

import numpy as np
import torch

from fedstream.deploy.records import Envelope, Failure, Link
from fedstream.errors import ProtocolError

log = logging.getLogger("fedstream.deploy")


class RemoteNodes:
    """Client nodes behind ``link``: one exchange of requests at a time, and the faults seen.

    ``unit`` names what a request's number counts in the log and in errors ("round" for CHFL, "step"
    for batch VFL); ``payload`` what a reply's parts are called when their count is wrong.
    """

    unit = "round"
    payload = "part(s)"

    def __init__(self, link: Link):
        self.link = link
        self.faults: list[dict] = []  # {"round", "client", "request", "reason"} per node and failed request
        self.rejoins: list[dict] = []  # one per node set up again ("client" and where it was; per cohort)
        self.exchanges = 0  # requests sent to the link (each one round trip, nodes in parallel)

    def fault(self, m: int, t: int, request: str, reason: str) -> None:
        """Record and log that client m's node failed a request."""
        log.warning("client %d, %s request for %s %d: %s", m, request, self.unit, t, reason)
        self.faults.append({"round": t, "client": m, "request": request, "reason": reason[:500]})

    def troubled(self, m: int) -> bool:
        """Whether client m had a fault or a rejoin in this run. Its node's own byte counts may then
        differ from the server's by the messages lost on the way (sent but never received, or
        received by a node that then went back to an older state): the final comparison of the two
        counts excuses it, and only it."""
        return any(r["client"] == m for r in self.faults) or any(r["client"] == m for r in self.rejoins)

    def _reply(self, reply: Envelope | Failure, kind: str, t: int, parts: int | None = None) -> Envelope:
        """``reply`` if it is a ``kind`` reply for request number ``t`` (with ``parts`` parts, when
        given); ProtocolError saying what was expected otherwise (a :class:`Failure`: its reason)."""
        if isinstance(reply, Failure):
            raise ProtocolError(reply.reason)
        if reply.kind != kind or reply.round != t:
            raise ProtocolError(
                f"expected a {kind!r} reply for {self.unit} {t}, received a {reply.kind!r} reply for "
                f"{self.unit} {reply.round}"
            )
        if parts is not None and len(reply.parts) != parts:
            raise ProtocolError(f"expected {parts} {self.payload}, received {len(reply.parts)} part(s)")
        return reply

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
