"""What a client node does with one request, whatever runs it: a Flower ClientApp or a loopback link.

The node hosts the party of the run's task (:func:`make_host`): an online VFL client
(:mod:`fedstream.ovfl.deploy.host`), a CHFL client (:mod:`fedstream.chfl.deploy.host`) or a batch VFL
client (:mod:`fedstream.vfl.deploy.host`); the latter two keep their whole state as one
``torch.save`` archive, saved here after every request like any other state.

A node keeps, between requests, the run's config, the run's token and its party's state
(:meth:`ClientHost.state_dict`); on Flower these live in ``context.state``. It also writes that
state to its cache folder (:class:`NodeStore`) so that it survives the node itself:

* ``ckpt-RUN-M.npz``: the latest state, after every request. A SuperNode that crashed and
  restarts has lost ``context.state``; when the server sets it up again with ``rejoin`` it
  resumes from this file (the server drops the gradients it holds for it: the node skips those
  events, see :mod:`fedstream.ovfl.deploy.host`).
* ``ckpt-RUN-M-atT.npz``: the state at boundary T, written when the request says ``keep``
  (:func:`kept_boundary`; the server checkpoints at T too). When the server restarts from its checkpoint at T, it sets
  the nodes up with ``resume = T``: each goes back to its state at T, or at the latest boundary
  before T it has. The last three boundaries are kept (KEEP_BOUNDARIES): a batch VFL epoch that
  re-selects with VF-PS marks two (the selection and the evaluation), and the server's checkpoint
  is at the one before them until it has written the next.

RUN is a token the server draws for each run, so a new run never picks up an old run's state.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.deploy.adapters import Adapter, adapter_for, check_deployable
from fedstream.deploy.records import ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError

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
    """Client ``index``'s checkpoints of run ``run`` in ``folder``."""

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
        self.folder.mkdir(parents=True, exist_ok=True)
        _save(self.latest, state)
        if boundary is not None:
            _save(self.at(boundary), state)
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
        if path is None or not path.exists():
            return None
        with np.load(path) as saved:
            return {k: saved[k] for k in saved.files}


def _save(path: Path, state: dict[str, np.ndarray]) -> None:
    with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".npz") as f:
        np.savez(f, **state)
    os.replace(f.name, path)


def kept_boundary(env: Envelope) -> int | None:
    """The boundary whose state the node keeps after answering ``env`` (None: none).

    A request with ``info["keep"] = true`` asks for it. ``info["boundary"]`` names the boundary (a
    CHFL or batch VFL server numbers its own: rounds or steps done); an online VFL round request
    without it ends at round ``env.round + info["events"]``.
    """
    if env.info.get("keep") is not True:
        return None
    boundary = env.info.get("boundary")
    if boundary is None and env.kind == ROUND:
        boundary = env.round + env.info.get("events", 0)
    if isinstance(boundary, bool) or not isinstance(boundary, int) or boundary < 0:
        raise ProtocolError(f"a request with info 'keep' needs a boundary >= 0, received {boundary!r}")
    return boundary


def handle_on_node(
    env: Envelope,
    index: int,
    memory: NodeMemory | None,
    *,
    data: Callable[[Adapter, dict, int], object],
    store: Path | None,
) -> tuple[Envelope, NodeMemory]:
    """Answer ``env`` as client ``index``'s node; return the reply and what the node keeps.

    ``data(adapter, config, index)`` gives the node's data (usually ``adapter.node_data``: online
    VFL its feature block, CHFL its rows and columns, batch VFL its strips); ``store`` is its cache
    folder for checkpoints (None: none). The party is the one the task's adapter hosts
    (:mod:`fedstream.deploy.adapters`). Raises ProtocolError on a malformed request, leaving
    ``memory`` as it was.
    """
    if env.kind == SETUP:
        text, run = env.info.get("config"), env.info.get("run")
        resume = env.info.get("resume")
        if not isinstance(text, str) or not isinstance(run, str) or not run.isalnum():
            raise ProtocolError(
                f"client {index}: a setup request needs info 'config' (JSON) and 'run' (token)"
            )
        if resume is not None and (isinstance(resume, bool) or not isinstance(resume, int) or resume < 0):
            raise ProtocolError(f"client {index}: setup 'resume' must be a round >= 0, received {resume!r}")
        config = json.loads(text)
        adapter = check_deployable(config)
        state = None
        if env.info.get("rejoin") is True and store is not None:
            kept = NodeStore(store, run, index)
            state = kept.load(resume=resume)
            if resume is not None:
                kept.forget_after(resume)
        memory = NodeMemory(text, run, {})
    else:
        if memory is None:
            raise ProtocolError(f"client {index}: {env.kind!r} request before setup")
        config, state = json.loads(memory.config), memory.state
        adapter = adapter_for(config["task"])
    boundary = kept_boundary(env)  # checked before the request changes anything
    host = adapter.host(config, index, data=data(adapter, config, index), state=state)
    reply = host.handle(env)
    kept = NodeMemory(memory.config, memory.run, host.state_dict())
    if store is not None:
        NodeStore(store, kept.run, index).save(kept.state, boundary)
    return reply, kept
