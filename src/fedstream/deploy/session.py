"""The deployment session layer, written once for every task: a node's side and the server's.

A :class:`Node` (every runtime's client side) hosts the party its task's adapter builds and keeps
its state in its cache folder (:class:`NodeStore`): ``ckpt-RUN-M.npz``, the latest state, from
which a node started again rejoins; ``ckpt-RUN-M-atT.npz``, its state at each boundary T a request
said to keep (:func:`kept_boundary`), from which it resumes when the server restarts from its
checkpoint at T. RUN is a token the server draws for each run, so a new run never picks up an old
run's state. The server's :class:`Session` holds the token, sets the nodes up, exchanges requests,
keeps the fault log and the rejoins and makes the end-of-run byte cross-check; each task's server
(``fedstream.<task>.deploy``) is a Session with the task's protocol on top.
"""

from __future__ import annotations

import json
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.deploy.adapters import Adapter, adapter_for, check_deployable
from fedstream.deploy.cache import load_arrays, save_arrays
from fedstream.deploy.psi import PsiNode
from fedstream.deploy.records import FINISH, PSI, ROUND, SETUP, Envelope, Failure, Keep, Link, Setup
from fedstream.errors import FedstreamError, ProtocolError

log = logging.getLogger("fedstream.deploy")
KEEP_BOUNDARIES = 3


def default_cache_dir() -> Path:
    """Where a node keeps its data cache and its checkpoints unless told otherwise."""
    return Path(tempfile.gettempdir()) / "fedstream-node"


@dataclass
class NodeMemory:
    """What a node keeps between requests."""

    config: str  # the run's config, JSON
    run: str  # the run's token
    state: dict[str, np.ndarray]  # the party's state


class NodeStore:
    """Client ``index``'s checkpoints of run ``run`` in ``folder``: the latest state and the last
    KEEP_BOUNDARIES kept boundaries (a batch VFL epoch that re-selects marks two, and the server's
    checkpoint is at the one before them until it has written the next)."""

    def __init__(self, folder: Path, run: str, index: int):
        if not run.isalnum():
            raise ProtocolError(f"client {index}: run token {run!r} must be alphanumeric")
        self.folder, self.run, self.index = Path(folder), run, index

    @property
    def latest(self) -> Path:
        return self.folder / f"ckpt-{self.run}-{self.index}.npz"

    def at(self, t: int) -> Path:
        return self.folder / f"ckpt-{self.run}-{self.index}-at{t}.npz"

    def boundaries(self) -> list[int]:
        prefix = f"ckpt-{self.run}-{self.index}-at"
        return sorted(int(p.name[len(prefix):-4]) for p in self.folder.glob(f"{prefix}*.npz")
                      if p.name[len(prefix):-4].isdigit())

    def save(self, state: dict[str, np.ndarray], boundary: int | None = None) -> None:
        save_arrays(self.latest, state)
        if boundary is not None:
            save_arrays(self.at(boundary), state)
            for old in self.boundaries()[:-KEEP_BOUNDARIES]:
                self.at(old).unlink(missing_ok=True)

    def forget_after(self, t: int) -> None:
        """Delete the kept boundaries after ``t``: a server resuming at ``t`` abandoned the session
        that wrote them, and a later resume must not pick one up."""
        for old in self.boundaries():
            if old > t:
                self.at(old).unlink(missing_ok=True)

    def load(self, *, resume: int | None) -> dict[str, np.ndarray] | None:
        """The latest state, or with ``resume`` the state at the latest boundary <= resume (None: none)."""
        if resume is None:
            path = self.latest
        else:
            kept = [t for t in self.boundaries() if t <= resume]
            path = self.at(kept[-1]) if kept else None
        return load_arrays(path)


def kept_boundary(env: Envelope) -> int | None:
    """The boundary whose state the node keeps after answering ``env`` (None: none): one rule for
    every task, the number its server gives to the points where it checkpoints (:class:`~fedstream.
    deploy.records.Keep`); a resumed server sets the nodes up with ``resume`` = that number."""
    return Keep.read(env.info, "a request with info 'keep'").kept()


def machine_data(data_root: str | None, store: Path | None) -> Callable[[Adapter, dict, int], object]:
    """A deployed node's ``data`` for :class:`Node`: its task's own rows, read from this machine's
    data root (None: the config's) with the node's cache folder ``store``."""
    return lambda adapter, config, m: adapter.node_data(config, m, data_root=data_root, cache_dir=store)


class Node:
    """Client ``index``'s node on every runtime: answers ``psi``, ``setup``, ``round`` and ``finish``
    requests, keeping the run's config, token and party between them; ProtocolError for a malformed one.

    A setup builds the party of the run's task from ``data(adapter, config, index)`` (placed as the
    ids' alignment said, :class:`~fedstream.deploy.psi.PsiNode`; ``psi=False``: none, as on Flower)
    and, with ``rejoin`` / ``resume``, its checkpoint in ``store``. A node started per message
    (Flower) gets the previous one's :meth:`memory` (:meth:`restore`). With ``store`` the node
    writes its state at every ``keep`` boundary, and its latest state after a setup, a finish, a
    ``keep`` and any request ``save_every`` seconds after the last write (0: after every request)."""

    def __init__(self, index: int, *, data: Callable[[Adapter, dict, int], object], store: Path | None,
                 save_every: float = 0.0, psi: bool = True):
        self.index, self.store, self._data, self.save_every = index, store, data, save_every
        self.host = None
        self.run: str | None = None
        self.config: str | None = None  # the run's config, JSON
        self._state: dict | None = None  # the party's state: restored (no host yet), or last written
        self._saved_at = -float("inf")
        self.psi = PsiNode(index, store) if psi else None  # one file per party: the ids' alignment

    def restore(self, memory: NodeMemory | None) -> None:
        """Forget the party; the next request rebuilds it from ``memory`` (None: not set up)."""
        self.host, self._state = None, None if memory is None else memory.state
        self.config, self.run = (None, None) if memory is None else (memory.config, memory.run)

    def memory(self) -> NodeMemory:
        """What the node keeps after its last request (the party as its state)."""
        state = self._state if self._state is not None else self.host.state_dict()
        return NodeMemory(self.config, self.run, state)

    def handle(self, env: Envelope) -> Envelope:
        """Answer one request from the server."""
        if env.kind == PSI and self.psi is not None:
            return self.psi.handle(env)
        if env.kind == SETUP:
            setup = Setup.read(env.info, f"client {self.index}")
            config = json.loads(setup.config)
            adapter = check_deployable(config)
            state = None
            if setup.rejoin is True and self.store is not None:
                kept = NodeStore(self.store, setup.run, self.index)
                state = kept.load(resume=setup.resume)
                if setup.resume is not None:
                    kept.forget_after(setup.resume)
            boundary = kept_boundary(env)  # checked before the request changes anything
            host = self._host(adapter, config, state)
            reply = host.handle(env)
            self.host, self.run, self.config = host, setup.run, setup.config
        else:
            if self.config is None:
                raise ProtocolError(f"client {self.index}: {env.kind!r} request before setup")
            boundary = kept_boundary(env)
            if self.host is None:  # restored: rebuilt from its state
                config = json.loads(self.config)
                self.host = self._host(adapter_for(config["task"]), config, self._state)
            reply = self.host.handle(env)
        self._state = None
        now = time.monotonic()
        due = env.kind != ROUND or boundary is not None or now - self._saved_at >= self.save_every
        if self.store is not None and due:
            self._state = self.host.state_dict()
            NodeStore(self.store, self.run, self.index).save(self._state, boundary)
            self._saved_at = now
        return reply

    def _host(self, adapter: Adapter, config: dict, state: dict | None):
        data = self._data(adapter, config, self.index)
        if self.psi is not None:
            data = self.psi.place(data, config)
        return adapter.host(config, self.index, data=data, state=state)


# -- the server's side ---------------------------------------------------------------------------
class Session:
    """The server's side of a deployment session, whatever the task: client nodes 0..M-1 behind
    ``link`` (any runtime's), the run's token, the setups, one exchange at a time, the fault log,
    the rejoins, the end-of-run byte cross-check and the session part of the server's checkpoint.
    A node's failed request never raises past the session: it is logged and recorded in ``faults``.

    ``unit`` names what a request's number counts ("round"; batch VFL: "step"), ``payload`` a
    reply's parts, ``position`` the parts of the run's position a node set up again is reconciled
    with (:meth:`check_behind`, :meth:`record_rejoin`; default: ``unit``; CHFL: federation, round)."""

    unit = "round"
    payload = "part(s)"
    position: tuple[str, ...] = ()  # default (unit,)

    def __init__(self, link: Link, config: dict | None = None, *, run_token: str | None = None):
        self.link, self.config = link, config
        self.run_token = run_token or secrets.token_hex(8)
        self.faults: list[dict] = []  # {"round", "client", "request", "reason"} per node and failed request
        self.rejoins: list[dict] = []  # one per node set up again (record_rejoin)
        self.restarts: list[dict] = []  # one per server restarted from its checkpoint (set_up)
        self.disputes: list[dict] = []  # one per count a node's finish reply disputes (cross_check)
        self._away: set[int] = set()  # clients not reachable at their last request (reachable)
        self.exchanges = 0  # requests sent to the link (each one round trip, nodes in parallel)

    def setup_request(self, *, rejoin: bool | None = None, resume: int | None = None) -> dict:
        """The ``info`` of a setup request (:class:`~fedstream.deploy.records.Setup`)."""
        return Setup(config=json.dumps(self.config), run=self.run_token, rejoin=rejoin, resume=resume).info()

    def set_up(self, clients: Iterable[int], t: int, info: dict, accept: Callable[[int, Envelope], object], *,
               parts: int | None = None, refused: str = "") -> dict[int, object]:
        """Send ``clients`` a setup request (``info``: :meth:`setup_request`) as request number ``t``;
        ``accept(m, reply)`` checks client m's reply (raising a FedstreamError) and says what the
        node reported. A node that fails, or whose reply is refused, is a fault (``refused`` leads
        its reason). Return what each accepted node reported. The run's own setup (not a node's
        ``rejoin`` alone) needs every node: one that fails stops the run with the node's reason. A
        restart (``resume``) is recorded in ``restarts``."""
        rejoin, resume = info.get("rejoin"), info.get("resume")  # (Setup's keys; the nodes check them)
        if resume is not None:
            key = "round" if self.unit == "round" and not self.position else "boundary"
            self.restarts.append({key: resume})
        replies = self.exchange({m: Envelope(SETUP, t, [], info.copy()) for m in sorted(clients)})
        accepted, before = {}, len(self.faults)
        for m, reply in replies.items():
            try:
                accepted[m] = accept(m, self.reply(reply, SETUP, t, parts))
            except FedstreamError as exc:
                self.fault(m, t, SETUP, f"{refused}{exc}")
        if (rejoin is not True or resume is not None) and len(accepted) < len(replies):
            why = "; ".join(f"client {f['client']}: {f['reason']}" for f in self.faults[before:])
            when = f" before {self.unit} {t}" if not self.position else ""
            raise ProtocolError(f"clients {sorted(set(replies) - set(accepted))} did not set up ({why}); "
                                f"the run stops{when}")
        return accepted

    # -- a node set up again, reconciled with the run's position ---------------------------------
    def _at(self, position: int | tuple[int, ...]) -> tuple[int, ...]:
        return tuple(position) if isinstance(position, (tuple, list)) else (position,)

    def where(self, position: int | tuple[int, ...]) -> str:
        """A position in words: "round 3", "lr_index 0, round 3"."""
        return ", ".join(f"{k} {v}" for k, v in zip(self.position or (self.unit,), self._at(position)))

    def check_behind(self, node_at, at, *, expected=None) -> None:
        """A node set up again must be behind the run's position ``at`` (else it would refuse the next
        request); ProtocolError saying where it is, and where it was ``expected`` (default: before ``at``)."""
        if self._at(node_at) >= self._at(at):
            want = self.where(expected) if expected is not None else f"before {self.where(at)}"
            raise ProtocolError(f"the node is at {self.where(node_at)}; expected {want}")

    def record_rejoin(self, m: int, at, node_at, *, dropped: int | None = None) -> None:
        """Record in ``rejoins`` that client m's node was set up again with the run at ``at`` and came
        back at ``node_at`` (the keys: the position's names, ``client``, ``node_`` + the names), with
        ``dropped`` the gradients held for it the server dropped (None: the task holds none)."""
        names = self.position or (self.unit,)
        record = dict(zip(names, self._at(at))) | {"client": m}
        record |= {f"node_{k}": v for k, v in zip(names, self._at(node_at))}
        self.rejoins.append(record if dropped is None else record | {"dropped_gradients": dropped})

    def reachable(self, clients: Iterable[int], t: int, request: str, *, once: bool = False) -> list[int]:
        """The clients of ``clients`` whose node can take a request now; a fault for each other one
        (``once``: only when it had no fault since it was last reachable: one fault per outage)."""
        available = self.link.available()
        for m in sorted(set(clients) - available):
            if not (once and m in self._away):
                self.fault(m, t, request, "not sent: the node left, or is still busy with a request that "
                                          "timed out")
        self._away = (self._away | set(clients)) - available
        return [m for m in sorted(clients) if m in available]

    def fault(self, m: int, t: int, request: str, reason: str) -> None:
        """Record and log that client m's node failed a request."""
        log.warning("client %d, %s request for %s %d: %s", m, request, self.unit, t, reason)
        self.faults.append({"round": t, "client": m, "request": request, "reason": reason[:500]})
        self._away.add(m)  # the same outage is not a new fault at its next request (reachable, once)

    def troubled(self, m: int) -> bool:
        """Whether client m had a fault or a rejoin in this run. Its node's own byte counts may then
        differ from the server's by the messages lost on the way (sent but never received, or
        received by a node that then went back to an older state): the final comparison of the two
        counts excuses it, and only it."""
        return any(r["client"] == m for r in self.faults) or any(r["client"] == m for r in self.rejoins)

    def cross_check(
        self, m: int, t: int, theirs, mine, what: str = "", *, excused: bool | None = None
    ) -> bool:
        """The end-of-run byte cross-check: client m's node's own counts ``theirs`` must equal the
        server's ``mine`` unless it is ``excused`` (default: :meth:`troubled`); a difference is
        recorded as a fault, and each count that differs as a dispute (``disputes``: client, field,
        the node's value and the server's; ``what`` names the counts, "(up, down, messages) = ")."""
        if theirs == mine or (self.troubled(m) if excused is None else excused):
            return True
        self.fault(m, t, FINISH, f"the node counted {what}{theirs}, the server {mine}")
        if isinstance(theirs, (tuple, list)) and isinstance(mine, (tuple, list)) and len(theirs) == len(mine):
            names = what.strip(" =()").split(", ")  # "(up, down, messages) = " names each count
            pairs = zip(names if len(names) == len(mine) else map(str, range(len(mine))), theirs, mine)
        else:
            pairs = [(what.strip(" =") or "bytes", theirs, mine)]
        self.disputes += [{"client": m, "field": f, "node": a, "server": b} for f, a, b in pairs if a != b]
        return False

    def reply(self, reply: Envelope | Failure, kind: str, t: int, parts: int | None = None,
              payload: str | None = None) -> Envelope:
        """``reply`` if it is a ``kind`` reply for request number ``t`` (with ``parts`` parts, when
        given, named ``payload`` in the error, by default the session's); ProtocolError saying what
        was expected otherwise (a :class:`Failure`: its reason)."""
        if isinstance(reply, Failure):
            raise ProtocolError(reply.reason)
        if reply.kind != kind or reply.round != t:
            raise ProtocolError(
                f"expected a {kind!r} reply for {self.unit} {t}, received a {reply.kind!r} reply for "
                f"{self.unit} {reply.round}"
            )
        if parts is not None and len(reply.parts) != parts:
            noun = payload or self.payload
            raise ProtocolError(f"expected {parts} {noun}, received {len(reply.parts)} part(s)")
        return reply

    def require_all(self, ready: Iterable[int], n: int, run: str) -> None:
        """Raise ProtocolError naming the clients of 0..n-1 not in ``ready`` (a run needs them all)."""
        missing = sorted(set(range(n)) - set(ready))
        if missing:
            raise ProtocolError(f"clients {missing} did not set up (see faults: "
                                f"{[f['reason'] for f in self.faults][:3]}); {run}")

    def exchange(self, requests: dict[int, Envelope], ahead: Callable | None = None
                 ) -> dict[int, Envelope | Failure]:
        """Send every request at once; a node that did not answer gets a :class:`Failure`. ``ahead``
        goes to a link that sends requests ahead (``sends_ahead``, the gRPC runtime's ``exchange``)."""
        if not requests:
            return {}
        self.exchanges += 1
        replies = self.link.exchange(requests) if ahead is None else self.link.exchange(requests, ahead)
        return {m: replies.get(m, Failure("no reply")) for m in requests}

    def session_state(self) -> dict:
        """The session part of every server checkpoint: the run's token, faults, rejoins, restarts and
        requests sent (JSON-able; the nodes keep their own state)."""
        return {"run": self.run_token, "faults": [dict(f) for f in self.faults],
                "rejoins": [dict(r) for r in self.rejoins], "restarts": [dict(r) for r in self.restarts],
                "exchanges": self.exchanges}

    def load_session_state(self, saved: dict, *, before: bool = False) -> None:
        """Go back to :meth:`session_state`; ``before``: put the saved history before what
        happened since the restart (the nodes were already set up for the saved run)."""
        if before and saved["run"] != self.run_token:
            raise ProtocolError(f"the checkpoint is of run {saved['run']!r}, the nodes were set up for run "
                                f"{self.run_token!r}")
        self.run_token = saved["run"]
        faults, rejoins = [dict(f) for f in saved["faults"]], [dict(r) for r in saved["rejoins"]]
        self.faults = faults + self.faults if before else faults
        self.rejoins = rejoins + self.rejoins if before else rejoins
        restarts = [dict(r) for r in saved.get("restarts", [])]  # (older checkpoints: none)
        self.restarts = restarts + self.restarts if before else restarts
        self.exchanges = int(saved["exchanges"]) + (self.exchanges if before else 0)


def session_of(server: object) -> Session | None:
    """The :class:`Session` a task's server plays over: the server itself (streaming CHFL) or the one
    it holds (online VFL: its transport; batch VFL, CHFL: its cohort); None: none."""
    if isinstance(server, Session):
        return server
    return next((v for v in vars(server).values() if isinstance(v, Session)), None)
