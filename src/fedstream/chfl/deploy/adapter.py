"""CHFL's deployment adapter: what :mod:`fedstream.deploy` needs to know of task ``chfl``.

Streaming mode (``chfl.mode = "stream"``) has its own node (:mod:`~fedstream.chfl.deploy.stream_node`)
and server (:mod:`~fedstream.chfl.deploy.stream_driver`), on the gRPC runtime by default: one
request per FedAvg round of ``chfl.stream_sync_every`` ticks, thousands of them in a stream.

Node side: the node's rows and columns (:class:`~fedstream.chfl.deploy.data.NodePart`) and its party
(:class:`~fedstream.chfl.deploy.host.CHFLHost`). Server side: :func:`serve` runs
:class:`~fedstream.chfl.deploy.driver.NetworkCHFL` (no data at all: the nodes report their sizes)
and writes ``summary.json`` (with ``audit`` the final global common column, ``models.npz``),
``metrics.csv`` and ``checkpoint.pt`` (after every FedAvg round) to ``out``; ``resume`` continues
from that checkpoint, each node from its own state of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from fedstream.chfl.deploy.data import NodePart, load_part
from fedstream.chfl.deploy.driver import NetworkCHFL
from fedstream.chfl.deploy.host import CHFLHost
from fedstream.chfl.deploy.stream_driver import NetworkStream
from fedstream.chfl.deploy.stream_node import StreamHost, StreamPart, load_stream_part
from fedstream.data.chfl_datasets import SPECS
from fedstream.errors import ConfigError


class CHFLAdapter:
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

    def serve(self, config: dict, settings: dict, runtime) -> None:
        if config["chfl.mode"] == "stream":
            return self._serve_stream(config, settings, runtime)
        if settings["resume"] and not settings["out"]:
            raise ConfigError("resume: needs out, the folder holding the CHFL server's checkpoint.pt")
        link = runtime.connect(config["chfl.clients"])

        def progress(p: dict) -> None:
            print(f"fedstream: lr {p['lr']:g}, round {p['round']}/{p['rounds']}: mean best validation "
                  f"accuracy {p['val_acc']:.4f}", flush=True)

        print(f"fedstream: CHFL ({config['chfl.method']}) with {config['chfl.clients']} client nodes",
              flush=True)
        net = NetworkCHFL(config, link, progress=progress)
        checkpoint = Path(settings["out"]) / "checkpoint.pt" if settings["out"] else None
        if settings["resume"] and checkpoint is not None and checkpoint.exists():
            net.load(checkpoint)
            lr_index, rnd = net.position
            where = (f"federation {lr_index} (lr {net.settings.lrs[lr_index]:g}), round {rnd}"
                     if lr_index < len(net.settings.lrs) else "the end of the last federation")
            print(f"fedstream: resuming at {where} from {checkpoint}", flush=True)
        elif settings["resume"]:
            print(f"fedstream: no checkpoint at {checkpoint}: starting afresh", flush=True)
        result = net.run(checkpoint=checkpoint)
        print(
            f"fedstream: done, test accuracy {result['test_acc']:.4f}, {result['bytes']['total']} payload "
            f"bytes, {len(result['faults'])} node fault(s), {len(result['rejoins'])} rejoin(s), "
            f"{runtime.note()}",
            flush=True,
        )
        write_outputs(settings, config, result, runtime, net)

    def _serve_stream(self, config: dict, settings: dict, runtime) -> None:
        if settings["resume"] and not settings["out"]:
            raise ConfigError("resume: needs out, the folder holding the streaming server's checkpoint.pt")
        link = runtime.connect(config["chfl.clients"])
        print(f"fedstream: streaming CHFL ({config['chfl.method']}) with {config['chfl.clients']} client "
              "nodes", flush=True)
        net = NetworkStream(link, config)
        checkpoint = Path(settings["out"]) / "checkpoint.pt" if settings["out"] else None
        if settings["resume"] and checkpoint.exists():
            net.load(checkpoint)
            print(f"fedstream: resuming at tick {net.saved['tick']} from {checkpoint}", flush=True)
        elif settings["resume"]:
            print(f"fedstream: no checkpoint at {checkpoint}: starting afresh", flush=True)
        result = net.run(checkpoint=checkpoint)
        print(f"fedstream: done, {result['ticks']} ticks, prequential accuracy "
              f"{result['prequential_acc']:.4f}, {result['bytes']['total']} payload bytes, "
              f"{len(result['faults'])} node fault(s), {runtime.note()}", flush=True)
        write_outputs(settings, config, result, runtime, net)

    def report(self, s: dict) -> str:
        if s.get("task") == "chfl-stream":
            return (f"streaming CHFL ({s['method']}), {s['ticks']} ticks, prequential accuracy "
                    f"{s['prequential_acc']:.4f}, {s['bytes']['total']} payload bytes, "
                    f"{len(s['faults'])} node fault(s)")
        return (f"CHFL ({s['method']}), test accuracy {s['test_acc']:.4f} (per client "
                f"{', '.join(f'{a:.4f}' for a in s['test_acc_per_client'])}), {s['bytes']['total']} payload "
                f"bytes, {len(s['faults'])} node fault(s)")


ADAPTER = CHFLAdapter()


def write_outputs(
    settings: dict, config: dict, result: dict, runtime, net: NetworkCHFL | NetworkStream
) -> None:
    """With ``out``: ``summary.json`` (the result, the config and what the runtime adds); with
    ``audit`` also the final global common column (``models.npz``). Batch and streaming alike."""
    if not settings["out"]:
        return
    out = Path(settings["out"])
    out.mkdir(parents=True, exist_ok=True)
    summary = result | {"config": config} | runtime.extra()
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
    if settings["audit"]:
        np.savez(out / "models.npz", **{f"global.{k}": v for k, v in net.global_common().items()})
