"""CHFL's deployment adapter (batch mode): what :mod:`fedstream.deploy` needs to know of task ``chfl``.

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
from fedstream.errors import ConfigError


class CHFLAdapter:
    task = "chfl"
    runtime = "flower"  # FedAvg rounds of seconds to minutes: Flower's Message API suits them

    def check(self, config: dict) -> None:
        if config["chfl.mode"] != "batch":
            raise ConfigError(
                f"chfl.mode = {config['chfl.mode']!r}: only CHFL's batch mode runs over Flower so far"
            )

    def n_nodes(self, config: dict) -> int:
        return config["chfl.clients"]

    def node_data(
        self, config: dict, index: int, *, data_root: str | None, cache_dir: Path | None
    ) -> NodePart:
        return load_part(config, index, data_root=data_root, cache_dir=cache_dir)

    def host(self, config: dict, index: int, *, data: NodePart, state: dict | None = None) -> CHFLHost:
        return CHFLHost(config, index, rows=data, state=state)

    def serve(self, config: dict, settings: dict, runtime) -> None:
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
        if settings["out"]:
            out = Path(settings["out"])
            out.mkdir(parents=True, exist_ok=True)
            summary = result | {"config": config} | runtime.extra()
            (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
            if settings["audit"]:
                np.savez(out / "models.npz", **{f"global.{k}": v for k, v in net.global_common().items()})

    def report(self, s: dict) -> str:
        return (f"CHFL ({s['method']}), test accuracy {s['test_acc']:.4f} (per client "
                f"{', '.join(f'{a:.4f}' for a in s['test_acc_per_client'])}), {s['bytes']['total']} payload "
                f"bytes, {len(s['faults'])} node fault(s)")


ADAPTER = CHFLAdapter()
