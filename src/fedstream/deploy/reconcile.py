"""What a task's server checks of its nodes' reports, whatever the task: the same data set and
settings at every node and every setup, the client each node was asked to be, and at the end its
own byte counts; each failure is one :class:`~fedstream.errors.ProtocolError` in the user's terms."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from fedstream.deploy.host import FinishReply
from fedstream.deploy.session import Session
from fedstream.errors import ProtocolError

if TYPE_CHECKING:  # the nodes' session imports this module
    from fedstream.deploy.remote import RemoteNodes

COUNTS = ("up", "down", "messages")  # a node's byte counts, as its FinishReply has them


def check_client(reported: object, m: int) -> None:
    """The node set up as client ``m`` must report client ``m``."""
    if reported != m:
        raise ProtocolError(f"the node reports client {reported!r}, expected {m}")


def _differ(got: Mapping, first: Mapping, keys: Iterable[str]) -> dict:
    """The values of ``keys`` that ``got`` and ``first`` report differently: key -> (got's, first's)."""
    return {k: (got[k], first[k]) for k in keys if got[k] != first[k]}


def agree(nodes: Mapping[int, Mapping], keys: Iterable[str]) -> Mapping:
    """Every node must report client 0's values of ``keys`` (the same data set and settings); return
    the lowest-numbered node's report."""
    keys = tuple(keys)
    first = nodes[min(nodes)]
    for m, got in sorted(nodes.items()):
        if diff := _differ(got, first, keys):
            raise ProtocolError(f"client {m} reports {diff} (its value, client 0's): the nodes do not hold "
                                "the same data set or settings")
    return first


def unchanged(got: Mapping, first: Mapping, keys: Iterable[str]) -> None:
    """A node set up again must report what it reported at its first setup for ``keys``."""
    if diff := _differ(got, first, keys):
        raise ProtocolError(
            f"the node reports {diff} (now, at the first setup): not the same data or settings"
        )


def recent_faults(session: Session) -> str:
    """The reasons of the session's last three faults, for an error that ends the run."""
    return f"(faults: {[f['reason'] for f in session.faults[-3:]]})"


def counts_report(nodes: RemoteNodes, m: int, t: int, got: FinishReply) -> dict:
    """Client m's finish report: its own byte counts (up, down, messages) beside those of the
    server's ledger, cross-checked (:meth:`~fedstream.deploy.session.Session.cross_check`: a
    difference is a fault)."""
    ledger = nodes.ledger
    counted = [ledger.up[m], ledger.down[m], ledger.messages[m]]
    theirs = [getattr(got, k) for k in COUNTS]
    nodes.cross_check(m, t, theirs, counted, "(up, down, messages) = ")
    return {"client": m, **dict(zip(COUNTS, theirs)), "server_counted": counted}
