"""Loopback links with faults, one of each kind, shared by the deployment tests.

* :class:`SpoilingLink`: the replies to the requests ``hit`` picks are replaced by ``spoil(reply)``
  (or, with ``lost``, the requests never reach their node); make one with :func:`spoiling`.
* :class:`RecordingLink`: keeps every exchange it carried (``log``; ``seen``: by request).
* :class:`ServerCrashingLink`: the server's process dies (:class:`ServerCrash`) once the nodes have
  answered the first request ``crash_at`` picks.
* :class:`~tests.helpers.crashing.CrashOnce`: one node crashes once and comes back.
"""

from __future__ import annotations

from collections.abc import Callable

from fedstream.deploy.records import Envelope, Failure
from fedstream.deploy.runtimes.loopback import LoopbackLink


class ServerCrash(Exception):
    """Raised inside a server's loop to stand for the server's process dying there."""


class SpoilingLink(LoopbackLink):
    """Client m's reply to ``request`` is ``spoil(reply)`` when ``hit(m, request)``; a failed reply is
    left as it is. With ``lost`` the request never reaches the node: the reply is a Failure."""

    lost: str | None = None

    @staticmethod
    def hit(m: int, request: Envelope) -> bool:
        return False

    @staticmethod
    def spoil(reply: Envelope) -> Envelope | Failure:
        return reply

    def exchange(self, requests):
        hits = {m for m, env in requests.items() if type(self).hit(m, env)}
        if self.lost is not None:
            replies = super().exchange({m: env for m, env in requests.items() if m not in hits})
            return replies | {m: Failure(self.lost) for m in hits}
        replies = super().exchange(requests)
        return {m: type(self).spoil(r) if m in hits and not isinstance(r, Failure) else r
                for m, r in replies.items()}


def spoiling(hit: Callable[[int, Envelope], bool], spoil: Callable | None = None, *,
             lost: str | None = None) -> type[SpoilingLink]:
    """A :class:`SpoilingLink` class that spoils (or loses) what ``hit`` picks."""
    body = {"hit": staticmethod(hit), "lost": lost}
    if spoil is not None:
        body["spoil"] = staticmethod(spoil)
    return type("Spoiling", (SpoilingLink,), body)


class RecordingLink(LoopbackLink):
    """Keeps every exchange it carried, in order, in ``log``: (requests, replies) by client."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.log: list[tuple[dict[int, Envelope], dict[int, Envelope | Failure]]] = []

    @property
    def seen(self) -> list[tuple[int, Envelope, Envelope | Failure]]:
        """(client, request, reply) of every request, in order (by client within an exchange)."""
        return [(m, requests[m], replies[m]) for requests, replies in self.log for m in sorted(requests)]

    def exchange(self, requests):
        replies = super().exchange(requests)
        self.log.append((dict(requests), replies))
        return replies


class ServerCrashingLink(LoopbackLink):
    """The server's process dies (raises :class:`ServerCrash`) once the nodes have answered the first
    exchange whose request ``crash_at`` picks: the nodes are then ahead of the server's checkpoint."""

    armed = True

    @staticmethod
    def crash_at(request: Envelope) -> bool:
        return False

    def exchange(self, requests):
        replies = super().exchange(requests)
        if self.armed and type(self).crash_at(next(iter(requests.values()))):
            self.armed = False
            raise ServerCrash
        return replies


def crashing_at(crash_at: Callable[[Envelope], bool]) -> type[ServerCrashingLink]:
    """A :class:`ServerCrashingLink` class whose server dies after the request ``crash_at`` picks."""
    return type("Crash", (ServerCrashingLink,), {"crash_at": staticmethod(crash_at)})
