"""CHFL's deployment adapter: what :mod:`fedstream.deploy` needs to know of task ``chfl``.

Batch mode: node data :func:`~fedstream.chfl.deploy.data.load_part`, party
:class:`~fedstream.chfl.deploy.host.CHFLHost`, server :class:`~fedstream.chfl.deploy.driver.NetworkCHFL`
(on Flower by default). Stream mode (``chfl.mode = "stream"``): :func:`~fedstream.chfl.deploy.data.
load_stream_part`, :class:`~fedstream.chfl.deploy.host.StreamHost`,
:class:`~fedstream.chfl.deploy.driver.NetworkStream` (on gRPC by default).
"""

from __future__ import annotations

from pathlib import Path

from fedstream.chfl.deploy.data import NodePart, StreamPart, load_part, load_stream_part
from fedstream.chfl.deploy.driver import NetworkCHFL, NetworkStream
from fedstream.chfl.deploy.host import CHFLHost, StreamHost
from fedstream.data.chfl_datasets import SPECS
from fedstream.deploy.adapters import Adapter
from fedstream.errors import ConfigError


class CHFLAdapter(Adapter):
    task = "chfl"
    runtime = "flower"  # batch mode: FedAvg rounds of seconds to minutes, Flower's Message API suits them

    def runtime_for(self, config: dict) -> str:
        """Stream mode: gRPC (a FedAvg round every few ticks: a round trip of milliseconds, not
        Flower's seconds per message); batch mode: Flower."""
        return "grpc" if config["chfl.mode"] == "stream" else self.runtime

    def check(self, config: dict) -> None:
        if config["chfl.mode"] not in ("batch", "stream"):
            raise ConfigError(f"chfl.mode = {config['chfl.mode']!r}: expected 'batch' or 'stream'")
        if config["chfl.mode"] == "stream" and config["data.name"] not in SPECS:
            raise ConfigError(f"data.name = {config['data.name']!r}: a streaming CHFL deployment reads one "
                              f"of {sorted(SPECS)} on every node (its own table file does not deploy yet)")

    def n_nodes(self, config: dict) -> int:
        return config["chfl.clients"]

    def node_data(
        self, config: dict, index: int, *, data_root: str | None, cache_dir: Path | None
    ) -> NodePart | StreamPart:
        if config["chfl.mode"] == "stream":
            return load_stream_part(config, index, data_root=data_root)
        return load_part(config, index, data_root=data_root, cache_dir=cache_dir)

    def host(self, config: dict, index: int, *, data: NodePart | StreamPart,
             state: dict | None = None) -> CHFLHost | StreamHost:
        if config["chfl.mode"] == "stream":
            return StreamHost(config, index, rows=data, state=state)
        return CHFLHost(config, index, rows=data, state=state)

    def server(self, config: dict, settings: dict, runtime) -> NetworkCHFL | NetworkStream:
        link = runtime.connect(config["chfl.clients"])
        mode = "streaming CHFL" if config["chfl.mode"] == "stream" else "CHFL"
        print(f"fedstream: {mode} ({config['chfl.method']}) with {config['chfl.clients']} client nodes",
              flush=True)
        if config["chfl.mode"] == "stream":
            return NetworkStream(link, config)

        def progress(p: dict) -> None:
            print(f"fedstream: lr {p['lr']:g}, round {p['round']}/{p['rounds']}: mean best validation "
                  f"accuracy {p['val_acc']:.4f}", flush=True)

        return NetworkCHFL(config, link, progress=progress)

    def report(self, s: dict) -> str:
        if s.get("task") == "chfl-stream":
            return (f"streaming CHFL ({s['method']}), {s['ticks']} ticks, prequential accuracy "
                    f"{s['prequential_acc']:.4f}, {s['bytes']['total']} payload bytes, "
                    f"{len(s['faults'])} node fault(s)")
        return (f"CHFL ({s['method']}), test accuracy {s['test_acc']:.4f} (per client "
                f"{', '.join(f'{a:.4f}' for a in s['test_acc_per_client'])}), {s['bytes']['total']} payload "
                f"bytes, {len(s['faults'])} node fault(s)")


ADAPTER = CHFLAdapter()

