"""Events per second of online VFL with B = 1, from one process to a real Flower deployment.

One event is one round (one sample arrives). Backends, in order of what they add:

* ``inprocess``: the simulator, :class:`fedstream.vfl.engine.OnlineVFL`;
* ``loopback``: the deployment's code (:class:`NetworkVFL`, client hosts rebuilt from their saved
  state for every request) with an in-process link: the cost of the protocol's structure;
* ``simulation``: the Flower ServerApp/ClientApp on Flower's simulation runtime (Ray);
* ``deployment``: SuperLink + one SuperNode per client as subprocesses on loopback, ``flwr run``.

The Flower backends also report where a request's time goes (``flower`` in the result, see
:func:`fedstream.deploy.flower_app.timing_summary`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from fedstream.deploy.driver import NetworkVFL
from fedstream.deploy.host import ClientHost
from fedstream.deploy.link import LoopbackLink
from fedstream.deploy.parties import party_stream
from fedstream.vfl.engine import OnlineVFL

BACKENDS = ("inprocess", "loopback", "simulation", "deployment")


def _sets(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items() if v is not None)


def _result(backend: str, summary: dict) -> dict:
    rounds, wall = summary["rounds"], summary["wall_seconds"]
    out = {"backend": backend, "rounds": rounds, "clients": summary["config"]["vfl.clients"],
           "events_per_second": rounds / wall if wall else float("nan"),
           "payload_bytes_per_event": summary["bytes"]["total"] / max(rounds, 1)}
    if "exchanges" in summary:  # setup and finish are one request each
        out["requests_per_event"] = (summary["exchanges"] - 2) / max(rounds, 1)
    if "flower" in summary:
        out["flower"] = summary["flower"]
    return out


def measure(config: dict, backend: str, *, workdir: Path | None = None, timeout: float = 600) -> dict:
    """Run ``config`` (a resolved ovfl config) on ``backend``; events/s and bytes/event of the rounds."""
    if backend == "inprocess":
        return _result(backend, OnlineVFL(config).run())
    if backend == "loopback":
        stream = party_stream(config)
        link = LoopbackLink(lambda m, state: ClientHost(config, m, stream=stream, state=state), config["vfl.clients"])
        net = NetworkVFL(config, link, stream=stream)
        net.run()
        net.finish()
        return _result(backend, net.summary())
    if backend not in BACKENDS:
        raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(workdir or tmp)
        out = work / "out"
        settings = {"config": "", "set": _sets(config), "out": str(out)}
        if backend == "simulation":
            script = textwrap.dedent(f"""
                from flwr.simulation import run_simulation
                from fedstream.deploy.flower_app import make_client_app, make_server_app
                run_simulation(server_app=make_server_app(**{settings!r}), client_app=make_client_app(),
                               num_supernodes={config['vfl.clients']},
                               backend_config={{"client_resources": {{"num_cpus": 1}},
                                                "init_args": {{"include_dashboard": False}}}})
            """)
            env = os.environ | {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1"}
            proc = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                proc.wait(timeout=timeout)
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        else:
            from fedstream.deploy.local import LocalDeployment, write_app

            app = write_app(work / "app", settings)
            with LocalDeployment(config["vfl.clients"], work / "deployment") as deployment:
                deployment.run(app, timeout=timeout)
        summary_path = out / "summary.json"
        if not summary_path.exists():
            raise RuntimeError(f"the {backend} run wrote no summary (logs in {work})")
        return _result(backend, json.loads(summary_path.read_text()))
