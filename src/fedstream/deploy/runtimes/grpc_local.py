"""The gRPC runtime's two commands (:func:`serve_server`: ``fedstream serve server``;
:func:`serve_client`: ``fedstream serve client``) and :class:`GrpcLocalDeployment`, the client nodes
as processes on 127.0.0.1 (``fedstream deploy local``, ``fedstream bench network``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from fedstream.data import resolve_data_root
from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.local import Processes
from fedstream.deploy.runtimes.grpc import GrpcLink, GrpcRuntime
from fedstream.deploy.runtimes.grpc_node import GrpcNode
from fedstream.deploy.runtimes.grpc_wire import message_limit
from fedstream.deploy.serve import check_out, serve
from fedstream.tasks import get_task


def serve_server(config: dict, *, listen: str, out: Path | None, tls_dir: Path | None = None,
                 audit: bool = False, resume: bool = False, data_root: str | None = None,
                 reply_timeout: float = 120.0, node_timeout: float = 120.0, setup_timeout: float = 600.0,
                 on_listen: Callable[[GrpcLink], None] | None = None) -> GrpcRuntime:
    """Run the server party of ``config`` on ``listen``; ``on_listen(link)`` is called once the server
    listens (its port in ``link.port``). Returns the runtime (its link's counts)."""
    adapter = check_deployable(config)
    check_out(out, resume, get_task(config["task"]).checkpoint_name)  # before any node is waited for
    link = GrpcLink(listen, adapter.n_nodes(config), limit=message_limit(config, audit=audit),
                    tls_dir=tls_dir, timeout=reply_timeout, setup_timeout=setup_timeout).start()
    host, security = listen.rsplit(":", 1)[0], "mutual TLS" if tls_dir else "plaintext"
    print(f"fedstream: serving {config['task']} on {host}:{link.port} ({security}), waiting for "
          f"{link.n_clients} client nodes", flush=True)
    runtime = GrpcRuntime(link, node_timeout=node_timeout)
    try:
        if on_listen is not None:
            on_listen(link)
        settings = {"out": str(out) if out else "", "audit": audit, "data-root": data_root or "",
                    "resume": resume}
        serve(config, settings, runtime)
    except BaseException as exc:  # the nodes end with the reason, not as after a finished run
        link.close(failed="the server was interrupted" if isinstance(exc, KeyboardInterrupt)
                   else str(exc) or type(exc).__name__)
        raise
    link.close()
    return runtime


def serve_client(config: dict, index: int, connect: str, *, tls_dir: Path | None = None,
                 data_root: str | None = None, cache_dir: Path | None = None, retry_for: float = 300.0,
                 server_name: str | None = None) -> GrpcNode:
    """Run client party ``index`` of ``config`` against the server at ``connect`` until the run ends.
    Its data comes from ``data_root``, by default this machine's data folder for ``config``
    (``data.root``, ``$FEDSTREAM_DATA``, ...), not the server's."""
    check_deployable(config)
    if data_root is None:
        root = resolve_data_root(config["data.root"])
        data_root = str(root.resolve()) if root.is_dir() else None
    node = GrpcNode(index, connect, limit=message_limit(config, audit=True), tls_dir=tls_dir,
                    data_root=data_root, cache_dir=cache_dir, retry_for=retry_for, server_name=server_name,
                    own_config=config)
    print(f"fedstream: client {index} connecting to {connect}", flush=True)
    node.run()
    print(f"fedstream: client {index} done, {node.requests} requests answered", flush=True)
    return node


class GrpcLocalDeployment(Processes):
    """One client node per client as subprocesses on 127.0.0.1 (a context manager: every process it
    started is stopped at the end). ``config`` and ``sets`` are what ``fedstream serve client``
    gets (a preset name or a file, and ``KEY=VALUE`` overrides); node m logs to
    ``workdir/client{m}.log`` and keeps its cache and checkpoints in ``workdir/cache``."""

    def __init__(self, config: str, sets: list[str], n_clients: int, workdir: Path, *,
                 tls_dir: Path | None = None, retry_for: float = 60.0):
        super().__init__(workdir, os.environ | {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"})
        self.config, self.sets, self.n_clients = config, list(sets), n_clients
        self.tls_dir = Path(tls_dir).resolve() if tls_dir is not None else None
        self.retry_for = retry_for
        self.target: str | None = None

    def start(self, target: str) -> None:
        """Start every client's node, each connecting to ``target`` (``HOST:PORT``)."""
        self.target = target
        self.workdir.mkdir(parents=True, exist_ok=True)
        for m in range(self.n_clients):
            self.start_node(m)

    log_name = "client{m}.log"  # each node's log in the work folder

    def node_args(self, m: int) -> list[str]:
        """The command line of client m's node (without the connection's own options)."""
        return [sys.executable, "-m", "fedstream", "serve", "client", self.config, "--index", str(m),
                "--cache-dir", str(self.workdir / "cache"), *(x for s in self.sets for x in ("--set", s))]

    def start_node(self, m: int) -> subprocess.Popen:
        """Start (or restart) client m's node; its log (:attr:`log_name`) is appended to."""
        args = [*self.node_args(m), "--connect", self.target, "--retry-for", str(self.retry_for)]
        if self.tls_dir is not None:
            args += ["--tls-dir", str(self.tls_dir)]
        self.nodes[m] = self._start(args, self.log_name.format(m=m))
        return self.nodes[m]

    def __exit__(self, exc_type, *exc) -> None:
        # the nodes end at the server's bye; stopped or failed (SIGTERM, Ctrl-C): no node outlives it
        self.stop(terminate=exc_type is not None)
