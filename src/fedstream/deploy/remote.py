"""The server's view of its client nodes, whatever the task: a :class:`~fedstream.deploy.session.
Session` with what the server keeps of each node (its setup report, whether it is set up, the bytes
counted, its finish report), the setups and rejoins that keep it, and one loop over the nodes'
replies in which a reply that fails its check is a fault. Each task's server builds on it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from fedstream.deploy.host import FinishReply
from fedstream.deploy.reconcile import counts_report
from fedstream.deploy.records import FINISH, ROUND, Envelope, Failure, Link
from fedstream.deploy.session import Session
from fedstream.errors import FedstreamError, ProtocolError
from fedstream.transport.ledger import ByteLedger

T = TypeVar("T")


def check_reach(link: Link, key: str, clients: int) -> None:
    """The link must reach the run's ``clients`` nodes (``key``: the config key that sets them)."""
    if link.n_clients != clients:
        raise ProtocolError(f"the link reaches {link.n_clients} client nodes, {key} = {clients}")


class RemoteNodes(Session):
    """Client nodes 0..M-1 behind ``link`` as a task's server sees them: ``nodes``, what each node
    reported at setup (the task's server keeps it); ``ready``, the nodes set up (they get requests);
    ``ledger``, the bytes the server counted per node; ``reports``, the nodes' finish reports.
    ``clients``: the config key and value that set M, which the link must reach (:func:`check_reach`)."""

    def __init__(self, link: Link, config: dict | None = None, *, clients: tuple[str, int] | None = None,
                 run_token: str | None = None):
        super().__init__(link, config, run_token=run_token)
        if clients is not None:
            check_reach(link, *clients)
        self.ledger = ByteLedger(link.n_clients)
        self.nodes: dict[int, dict] = {}
        self.ready: set[int] = set()
        self.reports: list[dict] = []

    def set_up(self, clients: Iterable[int], t: int, info: dict, accept: Callable[[int, Envelope], T], *,
               fresh: bool = False, **kwargs) -> dict[int, T]:
        """The session's setup of ``clients`` (:meth:`~fedstream.deploy.session.Session.set_up`), which
        keeps ``ready``: the nodes it accepts are ready, those it refuses not until they are set up
        again (``fresh``: a run started or restarted, in which only the accepted ones are)."""
        targets = set(clients)
        self.ready = set() if fresh else self.ready - targets
        accepted = super().set_up(targets, t, info, accept, **kwargs)
        self.ready |= set(accepted)
        return accepted

    def reconcile(self, m: int, at, node_at, expected, *, rejoin: bool = False, dropped: int | None = None
                  ) -> None:
        """Record in ``rejoins`` client m's node set up again (``rejoin``), or found at ``node_at`` rather
        than ``expected`` with the run at ``at``, or whose held gradients the server ``dropped``."""
        if rejoin or dropped or node_at != expected:
            self.record_rejoin(m, at, node_at, dropped=dropped)

    def sendable(self, clients: Iterable[int], t: int, request: str = ROUND) -> list[int]:
        """The clients of ``clients`` to send request ``t``: reachable and set up (a fault for the others)."""
        reachable = set(self.reachable(clients, t, request))
        for m in sorted(reachable - self.ready):
            self.fault(m, t, request, "not sent: the node is not set up (its rejoin failed)")
        return sorted(reachable & self.ready)

    def answers(self, requests: dict[int, Envelope], t: int, check: Callable[[int, Envelope | Failure], T], *,
                request: str = ROUND, kind: str | None = None, parts: int | None = None,
                payload: str | None = None, ahead: Callable | None = None) -> dict[int, T]:
        """Send ``requests`` all at once (``ahead``: as :meth:`~fedstream.deploy.session.Session.exchange`);
        what ``check(m, reply)`` makes of each reply, which with ``kind`` is first checked to be a
        ``kind`` reply to request ``t`` with ``parts`` parts (``payload``: what the error calls them;
        :meth:`~fedstream.deploy.session.Session.reply`). A reply that fails a check (a
        FedstreamError) is a fault of ``request``, and nothing of it is used."""
        out = {}
        for m, reply in sorted(self.exchange(requests, ahead).items()):
            try:
                out[m] = check(m, reply if kind is None else self.reply(reply, kind, t, parts, payload))
            except FedstreamError as exc:
                self.fault(m, t, request, str(exc))
        return out

    def finish_reports(self, requests: dict[int, Envelope], t: int, needs: tuple[str, ...],
                       report: Callable[[int, Envelope, FinishReply], dict] | None = None, *,
                       parts: int | None = None) -> dict[int, FinishReply]:
        """Send the ``finish`` requests; each reply must be a finish reply (with ``parts`` parts, when
        given) carrying the :class:`~fedstream.deploy.host.FinishReply` fields ``needs``.
        ``report(m, reply, got)`` cross-checks the node's counts and makes its entry in ``reports``
        (raising, it refuses the reply: a fault); by default the node's (up, down, messages) beside
        the ledger's (:func:`~fedstream.deploy.reconcile.counts_report`). Return the accepted replies."""
        self.reports = []

        def check(m: int, reply: Envelope) -> FinishReply:
            got = FinishReply.read(reply.info, "finish reply", needs=needs)
            self.reports.append(counts_report(self, m, t, got) if report is None
                                else report(m, reply, got))
            return got

        return self.answers(requests, t, check, request=FINISH, kind=FINISH, parts=parts)

    def record(self) -> dict:
        """The nodes' part of the run's summary: requests sent (setup and finish included), faults,
        rejoins and each node's finish report."""
        return {"exchanges": self.exchanges, "faults": self.faults, "rejoins": self.rejoins,
                "clients": self.reports}
