"""Online VFL's deployment adapter: what :mod:`fedstream.deploy` needs to know of task ``ovfl``
(a node's feature block and party; the server, which :func:`fedstream.deploy.serve.serve` runs)."""

from __future__ import annotations

from pathlib import Path

from fedstream.data.table_party import per_party
from fedstream.deploy.adapters import Adapter
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.host import ClientHost
from fedstream.ovfl.deploy.parties import check_deployable, server_stream
from fedstream.ovfl.deploy.rows import BlockRows, PartyRows


class OnlineVFLAdapter(Adapter):
    task = "ovfl"
    runtime = "grpc"  # one message per event: long-lived parties on gRPC

    def check(self, config: dict) -> None:
        check_deployable(config)

    def n_nodes(self, config: dict) -> int:
        return config["vfl.clients"]

    def node_data(
        self, config: dict, index: int, *, data_root: str | None, cache_dir: Path | None
    ) -> BlockRows | PartyRows:
        if per_party(config):  # its own table file, and no other
            return PartyRows(config, index)
        return BlockRows(config, index, data_root=data_root, cache_dir=cache_dir)

    def host(
        self, config: dict, index: int, *, data: BlockRows | PartyRows, state: dict | None = None
    ) -> ClientHost:
        return ClientHost(config, index, rows=data, state=state)

    def server(self, config: dict, settings: dict, runtime) -> NetworkVFL:
        stream = server_stream(config, settings.get("data-root") or None)  # labels only
        link = runtime.connect(config["vfl.clients"])
        net = NetworkVFL(config, link, stream=stream, record_sizes=bool(settings.get("audit")))
        print(f"fedstream: {config['rounds']} rounds with {config['vfl.clients']} client nodes", flush=True)
        return net

    def frame_limit(self, config: dict) -> int:
        """The bytes past the runtime's base a frame may carry: a request holds at most B gradients
        and B queries, a reply B embeddings, each at most (window x embedding) float32 values and a
        header; twice that."""
        rows = config["optimizer.window"] if config["optimizer.name"] == "slr" else 1
        return 4 * config["network.batch"] * (64 + 4 * rows * config["model.embedding"])

    def report(self, s: dict) -> str:
        return (
            f"{s['rounds']} rounds, accumulated error {s['accumulated_error']:.4f}, {s['bytes']['total']} "
            f"payload bytes, {s['rounds_per_second']:.3f} events/s, {len(s['faults'])} node fault(s)"
        )


ADAPTER = OnlineVFLAdapter()
