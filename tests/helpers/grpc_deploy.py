"""The gRPC runtime in one process, for tests: the server's link on 127.0.0.1 (an ephemeral port)
and one client node per thread, each a real gRPC client on its own stream."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

from fedstream.deploy.adapters import adapter_for
from fedstream.deploy.runtimes.grpc import GrpcLink
from fedstream.deploy.runtimes.grpc_node import GrpcNode
from fedstream.deploy.runtimes.grpc_wire import message_limit

# Parties in one process share torch's global RNG (a batch VFL party builds its model under
# torch.random.fork_rng and manual_seed): the node threads take turns at handling a request. Real
# nodes are processes of their own.
PARTY_LOCK = threading.Lock()


class NodeThread:
    """Client ``index``'s :class:`GrpcNode` in a thread; ``error`` holds what ended it badly."""

    def __init__(self, index: int, port: int, config: dict, tmp: Path, *, tls_dir: Path | None = None,
                 retry_for: float = 30.0, **kwargs):
        self.node = GrpcNode(index, f"127.0.0.1:{port}", limit=message_limit(config, audit=True),
                             tls_dir=tls_dir, data_root=config["data.root"], cache_dir=Path(tmp) / "nodes",
                             retry_for=retry_for, **kwargs)
        handle = self.node.node.handle

        def one_at_a_time(env):
            with PARTY_LOCK:
                return handle(env)

        self.node.node.handle = one_at_a_time
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True, name=f"node-{index}")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.node.run()
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            self.error = exc


@contextmanager
def grpc_nodes(config: dict, tmp: Path, *, tls_dir: Path | None = None, timeout: float = 30.0,
               setup_timeout: float = 600.0, clients: list[int] | None = None):
    """A started :class:`GrpcLink` for ``config``'s clients (reply time-out ``timeout``, a setup's
    ``setup_timeout``) and a :class:`NodeThread` for each of ``clients`` (default all); closed (bye
    to every node) at the end."""
    M = adapter_for(config["task"]).n_nodes(config)
    link = GrpcLink("127.0.0.1:0", M, limit=message_limit(config, audit=True), tls_dir=tls_dir,
                    timeout=timeout, setup_timeout=setup_timeout).start()
    nodes = [NodeThread(m, link.port, config, tmp, tls_dir=tls_dir) for m in (range(M) if clients is None
                                                                                else clients)]
    try:
        yield link, nodes
    finally:
        link.close()
        for n in nodes:
            n.thread.join(timeout=10)
