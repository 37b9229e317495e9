"""Private entity alignment over a deployment's channel: the server runs PSI with each client node
before setting it up, in ``psi`` requests on the same link (on gRPC: the same mutual-TLS stream) as
the training.

With one file per party (``data.path = "server.csv;bank.csv;..."``) no party may show another its
ids. The server plays :func:`fedstream.alignment.session.run_alignment`, the simulator's walk, with
a :class:`NodeLink` per client: each alignment message (:mod:`fedstream.alignment.messages`) travels
in the parts of ``psi`` requests, cut in pieces of at most :data:`PIECE` bytes so that a frame stays
under the run's message limit; the first piece of the first message carries the run's config (the
node learns from it which file is its own and which column holds the ids). The node answers with
:class:`PsiNode`: the client's side of the exchange (:class:`~fedstream.alignment.session.
ClientEndpoint`) on its own file's ids. After the exchange:

* the server knows which of its rows each client holds (:class:`~fedstream.alignment.session.
  Alignment`: ``ranks()``; batch VFL also ``kept``, the rows every party holds);
* each node holds its ``placement``: its own row of each row the training plays (-1: absent), from
  which it builds its data at setup as the simulator builds that client's block
  (:meth:`PsiNode.place`).

Every way the exchange can fail is one error naming the party: a node that fails or times out, a
reply that does not decode, a client that lies about its set size
(:meth:`~fedstream.alignment.psi.AlignmentServer.conclude`), a file with repeated ids (the node's
:class:`~fedstream.errors.DataError`, sent back as its error reply), an empty intersection (the
simulator's message). The server then stops before any setup and says bye to every node.

What each party learns: docs/alignment.md.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.alignment.psi import AlignmentClient, AlignmentServer
from fedstream.alignment.session import Alignment, ClientEndpoint, run_alignment
from fedstream.deploy.records import PSI, Envelope, Failure, Link, Record
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.runs.files import atomic_open

PIECE = 256 * 1024  # bytes of an alignment message per frame
MAX_PIECES = 1 << 16  # 16 GiB: a message announcing more pieces is refused


@dataclass(kw_only=True)
class PsiStep(Record):
    """A ``psi`` request: piece ``piece`` of ``pieces`` of an alignment message (its bytes: the
    request's one part), the run's config (JSON) on the first piece of the first message;
    ``pieces = 0``: fetch the next piece of the node's answer (no part)."""

    config: str | None = None
    piece: int = 0
    pieces: int = 0

    def check(self, where: str, **context) -> None:
        if not 0 <= self.pieces <= MAX_PIECES or not 0 <= self.piece < max(self.pieces, 1):
            raise ProtocolError(f"{where}: piece {self.piece} of {self.pieces}: expected 0 <= piece < pieces "
                                f"<= {MAX_PIECES}")


@dataclass(kw_only=True)
class PsiAck(Record):
    """A node's reply to a ``psi`` request: ``pieces`` of its answer (0: none), ``piece`` of them in
    the reply's one part."""

    pieces: int = 0
    piece: int = 0

    def check(self, where: str, **context) -> None:
        if not 0 <= self.pieces <= MAX_PIECES or not 0 <= self.piece < max(self.pieces, 1):
            raise ProtocolError(f"{where}: answer piece {self.piece} of {self.pieces}")


def _pieces(data: bytes) -> list[bytes]:
    return [data[i:i + PIECE] for i in range(0, len(data), PIECE)] or [b""]


# -- the server's side ---------------------------------------------------------------------------
class NodeLink:
    """An :class:`~fedstream.alignment.session.Link` to client ``m``'s node (called ``name``) over a
    deployment ``link``; counts the alignment bytes each way (``down``, ``up``) as the simulator's
    in-process link does. ``config``: the run's config, JSON, sent with the first piece."""

    def __init__(self, link: Link, m: int, name: str, config: str):
        self.link, self.m, self.name, self._config = link, m, name, config
        self.down = self.up = 0

    def ask(self, data: bytes) -> bytes:
        self.down += len(data)
        reply, ack = self._send(data)
        if ack.pieces == 0 or len(reply.parts) != 1 or ack.piece != 0:
            raise ProtocolError(f"{self.name}: expected an answer to the PSI request, received "
                                f"{len(reply.parts)} part(s) of {ack.pieces} piece(s)")
        answer = [reply.parts[0]]
        for i in range(1, ack.pieces):
            more, got = self._one(Envelope(PSI, 0, [], PsiStep(pieces=0).info()))
            if got.piece != i or got.pieces != ack.pieces or len(more.parts) != 1:
                raise ProtocolError(f"{self.name}: expected piece {i} of {ack.pieces} of its PSI answer, "
                                    f"received piece {got.piece} of {got.pieces}")
            answer.append(more.parts[0])
        out = b"".join(answer)
        self.up += len(out)
        return out

    def tell(self, data: bytes) -> None:
        self.down += len(data)
        reply, ack = self._send(data)
        if ack.pieces or reply.parts:
            raise ProtocolError(f"{self.name}: answered an alignment message that takes no answer")

    def _send(self, data: bytes) -> tuple[Envelope, PsiAck]:
        """Send ``data`` in pieces; the reply to the last one and its record (the others' must be empty)."""
        pieces = _pieces(data)
        for i, piece in enumerate(pieces):
            step = PsiStep(config=self._config, piece=i, pieces=len(pieces))
            self._config = None  # once
            reply, ack = self._one(Envelope(PSI, 0, [piece], step.info()))
            if i + 1 < len(pieces) and (ack.pieces or reply.parts):
                raise ProtocolError(f"{self.name}: answered piece {i} of {len(pieces)} of an alignment "
                                    "message")
        return reply, ack

    def _one(self, env: Envelope) -> tuple[Envelope, PsiAck]:
        reply = self.link.exchange({self.m: env}).get(self.m, Failure("no reply"))
        if isinstance(reply, Failure):
            raise ProtocolError(f"{self.name}: private entity alignment failed: {reply.reason}"[:600])
        if reply.kind != PSI:
            raise ProtocolError(f"{self.name}: expected a 'psi' reply, received a {reply.kind!r} reply")
        return reply, PsiAck.read(reply.info, f"{self.name}, PSI reply")


def party_names(config: dict) -> list[str]:
    """How the alignment names the clients, as the simulator does: ``client M (FILE)``."""
    from fedstream.data.table_source import table_paths

    return [f"client {m} ({Path(p).name})" for m, p in enumerate(table_paths(config["data.path"])[1:])]


def align_nodes(config: dict, link: Link, server_ids: list[str], *, shared: bool = False) -> Alignment:
    """Align the server's ids (``server_ids``, its file's ``data.id`` column in file order) with each
    client node's over ``link``, client by client, and place the rows the training plays
    (``shared``: those every party holds, batch VFL). The alignment, with the bytes of each client's
    messages; DataError or ProtocolError naming the party when it cannot be made."""
    from fedstream.data.table_align import intersection_check
    from fedstream.data.table_source import table_paths

    paths = table_paths(config["data.path"])
    names = party_names(config)
    text = json.dumps(config)
    links = [NodeLink(link, m, name, text) for m, name in enumerate(names)]
    check = intersection_check(Path(paths[0]), [Path(p) for p in paths[1:]], shared=shared)
    out = run_alignment(AlignmentServer(server_ids), links, names, shared=shared, check=check)
    for c, node in zip(out.clients, links):
        c.bytes_down, c.bytes_up = node.down, node.up
    shared = ", ".join(f"{len(c.rows)} of {c.n_ids}" for c in out.clients)
    kept = "" if out.kept is None else f"; {out.kept.size} held by every party"
    print(f"fedstream: ids aligned by PSI with {len(links)} client nodes: {len(server_ids)} server ids, "
          f"shared {shared}{kept}; {out.summary()['bytes']} bytes in {out.seconds:.2f} s", flush=True)
    return out


# -- the node's side -----------------------------------------------------------------------------
class PsiNode:
    """Client ``index``'s side of the alignment on its node: the pieces of each message, the
    client's :class:`~fedstream.alignment.session.ClientEndpoint` on its own file's ids (built when
    the first message brings the run's config; a new config starts a new alignment) and the pieces
    of its answer still to fetch. ``placement`` once the exchange is complete."""

    def __init__(self, index: int, store: Path | None = None):
        self.index, self.store = index, store
        self.endpoint: ClientEndpoint | None = None
        self._saved: np.ndarray | None = None  # a placement read back from ``store``
        self._in: list[bytes] = []
        self._out: list[bytes] = []
        self._total = 0  # pieces of the last answer
        self._config: dict = {}  # the run's config, from the first message

    @property
    def placement(self) -> np.ndarray | None:
        """The client's row of each row the training plays (-1: absent); None before step 4."""
        return self._saved if self.endpoint is None else self.endpoint.placement

    def _path(self, config: dict) -> Path | None:
        """Where the node keeps its placement for ``config``'s files, so that a node process started
        again during the run (it rejoins) finds it; the server's digest check at setup refuses a
        stale one."""
        if self.store is None:
            return None
        key = hashlib.sha256(f"{config['data.path']}\n{config['data.id']}".encode()).hexdigest()[:16]
        return Path(self.store) / f"psi-{key}-{self.index}.npy"

    def handle(self, env: Envelope) -> Envelope:
        """Answer one ``psi`` request; ProtocolError (with the reason of a DataError about the node's
        own file) when it cannot be answered."""
        try:
            return self._handle(env)
        except ProtocolError:
            raise
        except FedstreamError as exc:  # its own file: duplicates, no id column, ...
            raise ProtocolError(str(exc)) from None

    def _handle(self, env: Envelope) -> Envelope:
        where = f"client {self.index}, PSI request"
        step = PsiStep.read(env.info, where)
        if step.pieces == 0:  # fetch
            if env.parts or not self._out:
                raise ProtocolError(f"{where}: a fetch with {len(env.parts)} part(s), {len(self._out)} "
                                    "piece(s) of the answer left")
            total, done = self._total, self._total - len(self._out)
            return self._ack([self._out.pop(0)], pieces=total, piece=done)
        if len(env.parts) != 1 or step.piece != len(self._in):
            self._in = []
            raise ProtocolError(f"{where}: piece {step.piece} with {len(env.parts)} part(s), expected piece "
                                f"{len(self._in)} in one part")
        if step.config is not None:
            self._config = json.loads(step.config)
            self.endpoint = ClientEndpoint(AlignmentClient(own_ids(self._config, self.index)))
        if self.endpoint is None:
            raise ProtocolError(f"{where}: an alignment message before the run's config")
        self._in.append(bytes(env.parts[0]))
        if step.piece + 1 < step.pieces:
            return self._ack([])
        data, self._in = b"".join(self._in), []
        answer = self.endpoint.handle(data)
        if answer is None:
            path = self._path(self._config)
            if self.endpoint.placement is not None and path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_open(path, "wb") as f:
                    np.save(f, self.endpoint.placement)
            return self._ack([])
        pieces = _pieces(answer)
        self._total, self._out = len(pieces), pieces[1:]
        return self._ack(pieces[:1], pieces=len(pieces))

    @staticmethod
    def _ack(parts: list[bytes], *, pieces: int = 0, piece: int = 0) -> Envelope:
        return Envelope(PSI, 0, parts, PsiAck(pieces=pieces, piece=piece).info())

    def place(self, data, config: dict | None = None):
        """The node's data for setup: a party's own table file placed as the alignment says
        (``data.place(placement)``; a node started again reads its placement for ``config`` back
        from its store); other data as it is. ProtocolError for a table file that was not aligned."""
        place = getattr(data, "place", None)
        if place is None:
            return data
        path = None if config is None else self._path(config)
        if self.placement is None and path is not None and path.exists():
            self._saved = np.load(path)
        if self.placement is None:
            raise ProtocolError(f"client {self.index}: a setup request before private entity alignment: with "
                                "one file per party the server aligns the ids first (fedstream.deploy.psi)")
        return place(self.placement)


def own_ids(config: dict, index: int) -> list[str]:
    """Client ``index``'s ids, from its own file of ``config``'s ``data.path`` (``data.id``), checked
    as the simulator checks them."""
    from fedstream.data.table_party import party_id_list
    from fedstream.data.table_source import TableSpec

    spec = TableSpec(config["data.path"], config.get("data.label"), config["data.id"],
                     n_clients=config["vfl.clients"])
    return party_id_list(spec, index + 1)

