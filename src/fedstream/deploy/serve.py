"""The server's run of a deployment, written once for every task: the ``--out`` / ``--resume`` rules
(:func:`check_out`, as ``fedstream run`` has them), the run (:func:`serve`, what every runtime
calls on the server's machine) and its outputs (:func:`write_outputs`: ``summary.json`` and, with
``audit``, every party's model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.session import Session, session_of
from fedstream.errors import ConfigError, FedstreamError
from fedstream.tasks import get_task


class DeployedServer(Protocol):
    """What a task's server party brings to :func:`serve`."""

    def load(self, path: Path) -> None:
        """Continue from the checkpoint at ``path`` (the run sets the nodes up with ``resume``)."""

    def where(self) -> str:
        """Where a loaded run goes on, for the log ("at round 1000", "after epoch 2")."""

    def play(self, checkpoint: Path | None, *, audit: bool) -> dict:
        """Play the (remaining) run, checkpointing to ``checkpoint``; finish it and return its summary."""

    def audit(self) -> dict[str, Any]:
        """The audit files of a finished run: name -> named arrays (``.npz``) or a JSON-able value."""


class Runtime(Protocol):
    """What :func:`serve` needs of a runtime: a link to the nodes, and what the runtime adds to the
    summary and to the server's last log line. A runtime moves bytes and nothing else."""

    def connect(self, n_clients: int): ...

    def extra(self) -> dict: ...

    def note(self) -> str: ...


def check_out(out: Path | None, resume: bool, checkpoint_name: str) -> Path | None:
    """The server's checkpoint in ``out`` (None: no ``out``), after ``fedstream run``'s rules (see the
    module doc); ConfigError in one line otherwise."""
    if out is None:
        if resume:
            raise ConfigError(f"--resume needs --out DIR (the folder holding the server's {checkpoint_name})")
        return None
    checkpoint = out / checkpoint_name
    if resume and not checkpoint.exists():
        raise ConfigError(f"{checkpoint} does not exist: nothing to resume")
    if not resume:
        for name in ("summary.json", checkpoint_name):
            if (out / name).exists():
                hint = ("the run there has finished: choose another --out" if name == "summary.json"
                        else "add --resume to continue it, or choose another --out")
                raise ConfigError(f"{out / name} exists: {hint}")
    return checkpoint


def serve(config: dict, settings: dict, runtime: Runtime) -> dict:
    """Run the server party of ``config`` over ``runtime``'s link; return its summary.

    ``settings``: ``out`` (the server's folder, "" or None: none), ``resume``, ``audit`` and
    ``data-root`` (the server's data folder, "" or None: the config's)."""
    adapter = check_deployable(config)
    out = Path(settings["out"]) if settings.get("out") else None
    resume, audit = bool(settings.get("resume")), bool(settings.get("audit"))
    checkpoint = check_out(out, resume, get_task(config["task"]).checkpoint_name)
    server = adapter.server(config, settings, runtime)
    if resume:
        server.load(checkpoint)
        print(f"fedstream: resuming {server.where()} from {checkpoint}", flush=True)
    summary = server.play(checkpoint, audit=audit)
    summary |= outcome(summary, session_of(server), config)
    print(f"fedstream: done, {adapter.report(summary)}, {runtime.note()}", flush=True)
    for warning in summary.get("warnings", []):  # e.g. a run that ended collapsed, as `fedstream run` says
        print(f"fedstream: warning: {warning}", flush=True)
    if out is not None:
        write_outputs(out, summary | {"config": config} | runtime.extra(), server.audit() if audit else {})
    check_outcome(summary, out)
    return summary


def check_outcome(summary: dict, out: Path | None) -> None:
    """A FedstreamError in one line (exit 2) when the run in ``summary`` failed or is disputed
    (:func:`outcome`; its outputs are in ``out``)."""
    if summary.get("status", "succeeded") != "succeeded":
        where = f"outputs in {out}" if out is not None else "no --out: nothing written"
        verdict = "failed" if summary["status"] == "failed" else "is disputed"
        raise FedstreamError(f"the run {verdict}: {summary.get('failure') or summary['dispute']}; {where}")


def outcome(summary: dict, session: Session | None, config: dict) -> dict:
    """How the run ended, for ``summary.json``: its ``restarts`` and ``disputes`` (:class:`~fedstream.
    deploy.session.Session`) and its ``status``: ``failed`` (with ``failure``) when a party missed
    more than ``network.max_missed`` of the events, ``disputed`` (with ``dispute``) when a node's
    finish reply disagrees with the server's counts, else ``succeeded``."""
    got = {} if session is None else {"restarts": session.restarts, "disputes": session.disputes}
    rounds, share = summary.get("rounds"), config.get("network.max_missed")
    over = [(m, n) for m, n in enumerate(summary.get("missed_events", [])) if rounds and n > share * rounds]
    if over:
        missed = ", ".join(f"client {m} missed {n} of {rounds} events" for m, n in over)
        return got | {"status": "failed", "failure": f"{missed} (more than network.max_missed = {share:g} of "
                                                     "them; see faults)"}
    if got.get("disputes"):
        d = got["disputes"][0]
        said = f"client {d['client']}'s finish reply says {d['field']} = {d['node']}"
        return got | {"status": "disputed", "dispute": f"{said}, the server counted {d['server']}"}
    return got | {"status": "succeeded"}


def write_outputs(out: Path, summary: dict, files: dict[str, Any]) -> None:
    """``summary.json`` and each audit file in ``out``: named arrays as ``NAME.npz``, anything else
    as ``NAME.json``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    for name, value in files.items():
        if isinstance(value, dict) and all(isinstance(v, np.ndarray) for v in value.values()):
            np.savez(out / f"{name}.npz", **value)
        else:
            (out / f"{name}.json").write_text(json.dumps(value))
