"""A client party on its node, whatever the task: :class:`NodeHost`, the base of every task's host
(the request dispatch and the node's own byte counters, which the server cross-checks at the
end), and :class:`FinishReply`, every task's reply to ``finish``."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope, Record
from fedstream.errors import ProtocolError


def model_digest(arrays: Mapping[str, np.ndarray] | Iterable[np.ndarray]) -> str:
    """sha256 over a model's arrays (named: a state dict; or a list of parameters), each one's name,
    dtype, shape and bytes: equal digests, equal models."""
    h = hashlib.sha256()
    for name, a in arrays.items() if isinstance(arrays, Mapping) else (("", a) for a in arrays):
        h.update(f"{name}{a.dtype.str}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


@dataclass(kw_only=True)
class FinishReply(Record):
    """A node's reply to ``finish``: its own byte counts (``up``, ``down``, ``messages``; batch VFL also
    ``eval_up``, ``select_up``, ``select_down``) and what its task reports at the end (``client``,
    ``round``, ``digest`` of its model, CHFL's ``choices`` as JSON). Each server reads the fields its
    task's nodes send: ``FinishReply.read(info, where, needs=(...))``."""

    client: int | None = None
    round: int | None = None
    up: int | None = None
    down: int | None = None
    messages: int | None = None
    eval_up: int | None = None
    select_up: int | None = None
    select_down: int | None = None
    digest: str | None = None
    choices: str | None = None  # CHFL: per variant, the node's choice

    def check(self, where: str, *, needs: Iterable[str] = (), **context) -> None:
        missing = [name for name in needs if getattr(self, name) is None]
        if missing:
            raise ProtocolError(f"{where}: info {', '.join(repr(m) for m in missing)} is missing")


class NodeHost:
    """The base of a task's party on a node: client ``index``'s dispatch and byte counters.

    A task's host implements :meth:`on_setup`, :meth:`on_round` and :meth:`on_finish` (each raises
    ProtocolError, changing nothing, for a malformed request) and saves ``up``, ``down`` and
    ``messages`` with its state. ``single_thread``: answer with torch on one thread, as the simulator
    runs (the same float sums in the same order)."""

    single_thread = False

    def __init__(self, index: int):
        self.index = index
        self.up = self.down = self.messages = 0  # bytes sent and received, messages both ways

    def handle(self, env: Envelope) -> Envelope:
        """Answer one request from the server."""
        if env.kind not in (SETUP, ROUND, FINISH):
            raise ProtocolError(f"client {self.index}: unknown request kind {env.kind!r}")
        if self.single_thread:
            from fedstream.runs.threads import one_torch_thread  # torch: only the tasks that use it
        with one_torch_thread() if self.single_thread else nullcontext():
            if env.kind == SETUP:
                return self.on_setup(env)
            return self.on_round(env) if env.kind == ROUND else self.on_finish(env)

    def on_setup(self, env: Envelope) -> Envelope:
        """The node's sizes and where it stands (a rejoining or resuming node reloaded its state)."""
        raise NotImplementedError

    def on_round(self, env: Envelope) -> Envelope:
        """One step of the task's protocol."""
        raise NotImplementedError

    def on_finish(self, env: Envelope) -> Envelope:
        """The last delivery; a :class:`FinishReply`."""
        raise NotImplementedError

    def received(self, data: bytes) -> None:
        """Count a message the node received and used."""
        self.down += len(data)
        self.messages += 1

    def sent(self, data: bytes) -> bytes:
        """Count a message the node sends; return it."""
        self.up += len(data)
        self.messages += 1
        return data

    def counts(self) -> list[int]:
        return [self.up, self.down, self.messages]

    def load_counts(self, counts) -> None:
        self.up, self.down, self.messages = (int(v) for v in counts)
