"""One alignment: the server runs PSI with each client over a link that moves bytes, and counts them.

:func:`run_alignment` is the server's walk, written once for every transport: it sends its
:class:`~fedstream.alignment.messages.PsiRequest` to each client over a :class:`Link`, concludes
from the client's reply, tells the client the shared ids and, once every client is aligned, where
the training plays them. :class:`ClientEndpoint` is a
client's answer to whatever arrives. :func:`align` plays both in one process over
:class:`InProcessLink`, which encodes every message, counts its bytes and decodes it on the other
side: the simulator's alignment is the deployment's, message for message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedstream.alignment.messages import Intersection, Placement, PsiReply, PsiRequest, decode
from fedstream.alignment.psi import DEFAULT_FPR, AlignmentClient, AlignmentServer, effective_fpr
from fedstream.errors import ProtocolError


class Link(Protocol):
    """The server's end of its channel to one client: bytes down, bytes (or nothing) back up."""

    def ask(self, data: bytes) -> bytes:
        """Send ``data`` to the client and return its answer."""
        ...

    def tell(self, data: bytes) -> None:
        """Send ``data`` to the client; no answer."""
        ...


class ClientEndpoint:
    """A client's side of the exchange: answers a PsiRequest, then takes the Intersection and the
    Placement. ``rows``: after step 3, the client's rows of the shared ids in the agreed (sorted)
    order; ``placement``: after step 4, its row of each row the training plays (-1: absent)."""

    def __init__(self, client: AlignmentClient):
        self.client = client
        self.rows: np.ndarray | None = None
        self.placement: np.ndarray | None = None
        self._asked = False

    def handle(self, data: bytes) -> bytes | None:
        msg = decode(data)
        if isinstance(msg, PsiRequest) and not self._asked:
            self._asked = True
            return self.client.reply(msg).encode()
        if isinstance(msg, Intersection) and self._asked and self.rows is None:
            self.rows = self.client.accept(msg)
            return None
        if isinstance(msg, Placement) and self.rows is not None and self.placement is None:
            if msg.ranks.max() >= len(self.rows):
                raise ProtocolError(f"alignment: the Placement names rank {int(msg.ranks.max())} of "
                                    f"{len(self.rows)} shared ids")
            self.placement = np.where(msg.ranks >= 0, self.rows[np.maximum(msg.ranks, 0)], -1)
            return None
        raise ProtocolError(f"alignment: a {type(msg).__name__} out of turn")


class InProcessLink:
    """A :class:`Link` to a :class:`ClientEndpoint` in this process; counts the bytes each way."""

    def __init__(self, endpoint: ClientEndpoint):
        self.endpoint = endpoint
        self.down = 0
        self.up = 0

    def ask(self, data: bytes) -> bytes:
        self.down += len(data)
        answer = self.endpoint.handle(data)
        if answer is None:
            raise ProtocolError("alignment: the client did not answer the PSI request")
        self.up += len(answer)
        return answer

    def tell(self, data: bytes) -> None:
        self.down += len(data)
        self.endpoint.handle(data)


@dataclass
class ClientAlignment:
    """What the server knows after aligning with one client (``rows``: its own rows of the shared
    ids, sorted by id) and what it cost (``seconds``: the client's part, from request to intersection)."""

    name: str
    n_ids: int
    rows: np.ndarray
    seconds: float
    bytes_down: int = 0
    bytes_up: int = 0


@dataclass
class Alignment:
    """The alignment of a server's ids with each client's: ``clients[m]`` as :class:`ClientAlignment`;
    ``client_rows[m]`` client m's own rows of the same shared ids (where the client's side is in
    this process); ``request_seconds``: the server blinding its ids once."""

    n_server: int
    fpr: float
    clients: list[ClientAlignment]
    client_rows: list[np.ndarray | None] = field(default_factory=list)
    request_seconds: float = 0.0
    kept: np.ndarray | None = None  # shared: the server rows every party holds (what step 4 placed)

    def ranks(self) -> list[np.ndarray]:
        """Per client, int64 (n_server,): the rank of each server row among the client's sorted
        shared ids, -1 where it lacks the id (step 4 sends these, at the rows the training plays)."""
        out = []
        for c in self.clients:
            r = np.full(self.n_server, -1, dtype=np.int64)
            r[c.rows] = np.arange(len(c.rows))
            out.append(r)
        return out

    @property
    def seconds(self) -> float:
        return self.request_seconds + sum(c.seconds for c in self.clients)

    def server_to_client(self) -> list[np.ndarray]:
        """Per client, int64 (n_server,): the client's row of each server row, -1 where it lacks the id."""
        out = []
        for c, own in zip(self.clients, self.client_rows):
            rows = np.full(self.n_server, -1, dtype=np.int64)
            rows[c.rows] = own
            out.append(rows)
        return out

    def summary(self) -> dict:
        """``summary.json``'s ``alignment``: sizes, bytes and seconds, apart from the training's."""
        return {
            "protocol": "psi (openmined-psi: ECDH P-256, Golomb-compressed set)",
            "fpr": self.fpr,  # raised for large sets: psi.effective_fpr
            "fpr_used": [effective_fpr(self.fpr, self.n_server, c.n_ids) for c in self.clients],
            "server_ids": self.n_server,
            "clients": [{"party": c.name, "ids": c.n_ids, "shared": int(len(c.rows)),
                         "bytes_down": c.bytes_down, "bytes_up": c.bytes_up, "seconds": c.seconds}
                        for c in self.clients],
            "bytes": sum(c.bytes_down + c.bytes_up for c in self.clients),
            "seconds": self.seconds,
        }


def run_alignment(server: AlignmentServer, links: Sequence[Link], names: Sequence[str], *,
                  shared: bool = False, check: Callable[[Alignment], None] | None = None) -> Alignment:
    """The server's walk over ``links`` (one per client, called ``names[m]``), in client order: steps
    1-3 with each client; then ``check(alignment)`` (raises for an intersection the run cannot use)
    and step 4, the placement of the rows the training plays (``shared``: only those every party
    holds; ``kept`` then names them)."""
    tic = time.perf_counter()
    request = server.request().encode()
    out = Alignment(len(server.ids), server.fpr, [], request_seconds=time.perf_counter() - tic)
    for link, name in zip(links, names):
        tic = time.perf_counter()
        try:
            reply = decode(link.ask(request), PsiReply)
        except ProtocolError as exc:
            raise ProtocolError(str(exc) if str(exc).startswith(name) else f"{name}: {exc}") from None
        rows, shared_ids = server.conclude(name, reply)
        link.tell(shared_ids.encode())
        out.clients.append(ClientAlignment(name, reply.n_items, rows, time.perf_counter() - tic))
    if check is not None:
        check(out)
    ranks = out.ranks()
    if shared:
        out.kept = np.flatnonzero(np.logical_and.reduce([r >= 0 for r in ranks]))
    for link, c, r in zip(links, out.clients, ranks):
        tic = time.perf_counter()
        link.tell(Placement(r if out.kept is None else r[out.kept]).encode())
        c.seconds += time.perf_counter() - tic
    return out


def align(server_ids: Sequence[str], client_ids: Sequence[Sequence[str]], *, fpr: float = DEFAULT_FPR,
          names: Sequence[str] | None = None, workers: int | None = None, shared: bool = False,
          check: Callable[[Alignment], None] | None = None) -> Alignment:
    """Align ``server_ids`` with each client's ids in this process, through encoded messages
    (``workers``: threads for each side's elliptic-curve work; default: the usable cores;
    ``shared`` and ``check``: as :func:`run_alignment`)."""
    names = list(names) if names is not None else [f"client {m}" for m in range(len(client_ids))]
    server = AlignmentServer(server_ids, fpr=fpr, workers=workers)
    endpoints = [ClientEndpoint(AlignmentClient(ids, fpr=fpr, workers=workers)) for ids in client_ids]
    links = [InProcessLink(e) for e in endpoints]
    out = run_alignment(server, links, names, shared=shared, check=check)
    for c, link in zip(out.clients, links):
        c.bytes_down, c.bytes_up = link.down, link.up
    out.client_rows = [e.rows for e in endpoints]
    return out
