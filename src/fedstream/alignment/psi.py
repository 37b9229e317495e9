"""The two sides of private set intersection between fedstream's server and one client.

All cryptography is OpenMined's ``openmined-psi`` (``pip install "fedstream[psi]"``): ids are
hashed to P-256 and blinded with secret keys (ECDH, the Diffie-Hellman PSI of Meadows and
Huberman), the client's set travels as a Golomb-compressed set. In that library's terms the
fedstream *server* takes the PSI *client* role, because that role is the one that learns the
intersection, as indices into its own ids:

* :class:`AlignmentServer`: blinds its ids once (one :class:`PsiRequest`, sent to every client);
  from each client's :class:`PsiReply` learns which of its ids that client holds, and sends the
  client those ids (:class:`Intersection`).
* :class:`AlignmentClient`: answers the request with its own set and the server's points blinded
  again (:class:`PsiReply`); accepts an :class:`Intersection` only if every id in it is its own.

Both sides check what they receive against what was announced, so a peer that lies about its set
size, or a payload the library cannot parse, stops the alignment with a ProtocolError naming the
party. The sizes checked are those of the library's Golomb-compressed set of n ids for N
server ids: ``hash_range`` is N max(N, n) / fpr, and with its Golomb parameter ``div`` the set
takes between n (div + 1) bits and that plus ``hash_range >> div``; so an announced size is
pinned to within about 1 / (div + 1) (3 % at the default fpr), not exactly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fedstream.alignment.messages import Intersection, PsiReply, PsiRequest
from fedstream.errors import ConfigError, ProtocolError

DEFAULT_FPR = 1e-9  # the chance that some id of the server is wrongly found in a client's set
POINT_BYTES = 33  # a compressed P-256 point
HASH_RANGE_MAX = 2**62  # the library keeps hash_range = N max(N, n) / fpr in an int64


def effective_fpr(fpr: float, n_server: int, n_client: int) -> float:
    """The false-positive rate a set of ``n_client`` ids is built with against ``n_server`` ids:
    ``fpr``, raised where N max(N, n) / fpr would overflow the library's int64 hash range (from
    about 68,000 x 68,000 ids at 1e-9; 2.2e-7 at 1,000,000 x 1,000,000). Both sides compute it."""
    return max(fpr, n_server * max(n_server, n_client) / HASH_RANGE_MAX)


def library():
    """``private_set_intersection.python``, or a ConfigError saying how to install it."""
    try:
        import private_set_intersection.python as psi
    except ImportError:
        raise ConfigError('private entity alignment needs openmined-psi: pip install "fedstream[psi]"') \
            from None
    return psi


def default_workers() -> int:
    """Threads for the elliptic-curve work: the library releases the GIL, so each core blinds its
    share of the points (the cores this process may use, at most 8)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cores))


def _split(n: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous (start, stop) ranges covering 0..n (fewer when n is small)."""
    edges = np.linspace(0, n, min(parts, max(n // 256, 1)) + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _in_threads(tasks: list[Callable], workers: int) -> list:
    if len(tasks) == 1 or workers == 1:
        return [task() for task in tasks]
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda task: task(), tasks))


def _points_message(kind, points_lists: list, **fields):
    """One library message (Request or Response) holding the points of several, in order."""
    msg = kind(**fields)
    for points in points_lists:
        msg.encrypted_elements.extend(points)
    return msg


def check_fpr(fpr: float) -> float:
    if not isinstance(fpr, float) or not 0.0 < fpr < 1.0:
        raise ConfigError(f"PSI false-positive rate: expected a number in (0, 1), found {fpr!r}")
    return fpr


def _parse(kind, data: bytes, what: str):
    from google.protobuf.message import DecodeError  # installed with openmined-psi

    msg = kind()
    try:
        msg.ParseFromString(data)
    except DecodeError:
        raise ProtocolError(f"{what}: {len(data)} bytes that are not a PSI {kind.__name__}") from None
    return msg


def _check_points(points, n: int, what: str) -> None:
    if len(points) != n:
        raise ProtocolError(f"{what}: holds {len(points)} points, expected {n}, one per id announced")
    if any(len(p) != POINT_BYTES for p in points):
        raise ProtocolError(f"{what}: a point is not {POINT_BYTES} bytes (a compressed P-256 point)")


class _Side:
    """What both sides hold: their ids (text, distinct), the agreed false-positive rate ``fpr``, the
    threads for the elliptic-curve work and a fresh private key of the library's ``role``
    (``"client"``: the party that learns the intersection, fedstream's server; ``"server"``)."""

    role: str
    party: str

    def __init__(self, ids: Sequence[str], *, fpr: float = DEFAULT_FPR, workers: int | None = None):
        if not ids:
            raise ConfigError(f"the {self.party}'s set of ids is empty")
        self.ids = list(ids)
        self.fpr = check_fpr(fpr)
        self.workers = workers or default_workers()
        self._key = getattr(library(), self.role).CreateWithNewKey(True).GetPrivateKeyBytes()

    def _side(self):
        """A PSI instance of this side's role with its key (one per thread)."""
        return getattr(library(), self.role).CreateFromKey(self._key, True)


class AlignmentServer(_Side):
    """The server's side: its ids (text, distinct) and the agreed false-positive rate ``fpr``; in the
    library's terms the PSI client, which learns the intersection."""

    role, party = "client", "server"

    def __init__(self, ids: Sequence[str], *, fpr: float = DEFAULT_FPR, workers: int | None = None):
        super().__init__(ids, fpr=fpr, workers=workers)
        self._request: PsiRequest | None = None

    def request(self) -> PsiRequest:
        """Step 1: the server's blinded ids; one for all clients (blinded once)."""
        if self._request is None:
            parts = _in_threads([lambda a=a, b=b: self._side().CreateRequest(self.ids[a:b]).encrypted_elements
                                 for a, b in _split(len(self.ids), self.workers)], self.workers)
            payload = _points_message(library().Request, parts, reveal_intersection=True).SerializeToString()
            self._request = PsiRequest(len(self.ids), payload)
        return self._request

    def conclude(self, party: str, reply: PsiReply) -> tuple[np.ndarray, Intersection]:
        """Step 3 for the client called ``party``: the server's rows that it holds (int64, in the
        order of the sorted shared ids) and the :class:`Intersection` to send it."""
        lib = library()
        setup = _parse(lib.ServerSetup, reply.setup, f"{party}'s PSI set")
        response = _parse(lib.Response, reply.response, f"{party}'s PSI response")
        self._check_set(party, setup, reply.n_items)
        _check_points(response.encrypted_elements, len(self.ids), f"{party}'s PSI response")
        ranges = _split(len(self.ids), self.workers)
        chunks = [_points_message(lib.Response, [response.encrypted_elements[a:b]]) for a, b in ranges]
        try:
            found = _in_threads([lambda c=c: self._side().GetIntersection(setup, c) for c in chunks],
                                self.workers)
        except RuntimeError as exc:
            raise ProtocolError(f"{party}'s PSI response: {str(exc).splitlines()[0]}") from None
        rows = np.unique(np.concatenate([np.asarray(f, dtype=np.int64) + a
                                         for f, (a, _) in zip(found, ranges)]))
        shared = [self.ids[i] for i in rows.tolist()]
        order = sorted(range(len(shared)), key=shared.__getitem__)
        return rows[order], Intersection(tuple(shared[i] for i in order))

    def _check_set(self, party: str, setup, n: int) -> None:
        """The client's set must be a Golomb-compressed set of ``n`` ids at this run's fpr."""
        if setup.WhichOneof("data_structure") != "gcs":
            raise ProtocolError(f"{party}'s PSI set: expected a Golomb-compressed set, found "
                                f"{setup.WhichOneof('data_structure')}")
        gcs = setup.gcs
        N = len(self.ids)
        fpr = effective_fpr(self.fpr, N, n)
        want = N * max(N, n) / fpr
        if abs(gcs.hash_range - want) > 1e-6 * want + 2:
            raise ProtocolError(f"{party} announced {n} ids, but its PSI set is not sized for them at "
                                f"fpr {fpr:g} (hash range {gcs.hash_range}, expected {want:.0f})")
        if not 0 < gcs.div < 64:
            raise ProtocolError(f"{party}'s PSI set: Golomb parameter {gcs.div} out of range")
        bits = 8 * len(gcs.bits)
        if not n * (gcs.div + 1) <= bits <= n * (gcs.div + 1) + (gcs.hash_range >> gcs.div) + 8:
            raise ProtocolError(f"{party} announced {n} ids, but its PSI set of {bits} bits holds "
                                f"{'more' if bits > n * (gcs.div + 1) else 'fewer'}")


class AlignmentClient(_Side):
    """A client's side: its ids (text, distinct) and the agreed false-positive rate ``fpr``; in the
    library's terms the PSI server, which answers the request."""

    role, party = "server", "client"

    def __init__(self, ids: Sequence[str], *, fpr: float = DEFAULT_FPR, workers: int | None = None):
        super().__init__(ids, fpr=fpr, workers=workers)
        self._row = {v: i for i, v in enumerate(self.ids)}

    def reply(self, request: PsiRequest) -> PsiReply:
        """Step 2: this client's set, sized for the server's announced set, and its response."""
        lib = library()
        parsed = _parse(lib.Request, request.payload, "the server's PSI request")
        _check_points(parsed.encrypted_elements, request.n_items, "the server's PSI request")
        fpr = effective_fpr(self.fpr, request.n_items, len(self.ids))
        points = parsed.encrypted_elements
        tasks = [lambda: self._side().CreateSetupMessage(fpr, request.n_items, self.ids)]
        tasks += [lambda a=a, b=b: self._side().ProcessRequest(
            _points_message(lib.Request, [points[a:b]], reveal_intersection=True)).encrypted_elements
            for a, b in _split(len(points), self.workers)]
        try:
            setup, *parts = _in_threads(tasks, self.workers)
        except RuntimeError as exc:
            raise ProtocolError(f"the server's PSI request: {str(exc).splitlines()[0]}") from None
        response = _points_message(lib.Response, parts)
        return PsiReply(len(self.ids), setup.SerializeToString(), response.SerializeToString())

    def accept(self, msg: Intersection) -> np.ndarray:
        """This client's rows of the shared ids (int64, in the message's order); ProtocolError if
        the server names an id that is not this client's."""
        rows = np.array([self._row.get(v, -1) for v in msg.ids], dtype=np.int64)
        if (rows < 0).any():
            raise ProtocolError(f"the server's intersection names {int((rows < 0).sum())} ids this client "
                                "does not hold")
        return rows
