"""``fedstream bench network``: online VFL on a real Flower deployment on loopback, by event batch size.

One SuperLink and one SuperNode per client run as subprocesses on 127.0.0.1 (the deployment of
``fedstream deploy local``); the SuperNodes reach the SuperLink through a byte-counting TCP relay
(:class:`fedstream.deploy.runtimes.relay.TcpRelay`). For each ``network.batch`` B the same run is submitted
with ``flwr run`` for ``requests`` batches (B x requests events), and reported:

* events/s over the rounds (setup and the final report excluded) and seconds per request;
* bytes per event at three levels: fedstream's payload (the encoded messages the algorithm
  sends, as the simulator counts them), the parts carried (payload plus the queries of events
  that activated the node, which ride along unused), Flower's serialised messages (metadata and
  records), and the TCP bytes between SuperNodes and SuperLink (HTTP, polls and heartbeats
  included; setup and finish included too);
* where a request's time goes (:func:`fedstream.deploy.runtimes.flower.timing_summary`);
* the same run over an in-process link (the deployment's code without Flower, a node rebuilt
  from its saved state per request as on a SuperNode): what fedstream itself costs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from fedstream.config import load_config
from fedstream.data import resolve_data_root
from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.deploy.runtimes.relay import TcpRelay
from fedstream.errors import ConfigError
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.parties import server_stream
from fedstream.ovfl.deploy.rows import BlockRows

BATCHES = (1, 16, 256)


def _sets(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items() if v is not None and " " not in str(v))


def _inprocess(config: dict) -> dict:
    rows = [BlockRows(config, m) for m in range(config["vfl.clients"])]
    link = LoopbackLink(lambda cfg, m: rows[m], config["vfl.clients"])
    net = NetworkVFL(config, link, stream=server_stream(config))
    net.run()
    net.finish()
    s = net.summary()
    return {"events_per_second": s["rounds"] / s["wall_seconds"], "accumulated_error": s["accumulated_error"]}


def _row(batch: int, summary: dict, tcp: tuple[int, int], inprocess: dict) -> dict:
    events, wall = summary["rounds"], summary["wall_seconds"]
    flower = summary["flower"]
    payload = summary["bytes"]["total"]
    requests = summary["exchanges"] - 2  # setup and finish
    out = {
        "batch": batch,
        "events": events,
        "requests_per_node": requests,
        "events_per_second": events / wall,
        "seconds_per_request": wall / max(requests, 1),
        "accumulated_error": summary["accumulated_error"],
        "payload_bytes_per_event": payload / events,
        "parts_bytes_per_event": summary["wire_part_bytes"] / events,
        "flower_message_bytes_per_event": (flower["message_bytes_down"] + flower["message_bytes_up"])
        / events,
        "tcp_bytes_per_event": sum(tcp) / events,
        "tcp_bytes_to_superlink": tcp[0],
        "tcp_bytes_from_superlink": tcp[1],
        "overhead_tcp_over_payload": sum(tcp) / payload if payload else float("nan"),
        "overhead_flower_message_over_payload": (flower["message_bytes_down"] + flower["message_bytes_up"])
        / payload
        if payload
        else float("nan"),
        "inprocess_events_per_second": inprocess["events_per_second"],
        "inprocess_accumulated_error": inprocess["accumulated_error"],
        "time_per_reply_seconds": {
            k[len("mean_") : -len("_seconds")]: v for k, v in flower.items() if k.startswith("mean_")
        },
    }
    return out


def bench_network(*, batches: tuple[int, ...] = BATCHES, requests: int = 6, config: str = "ovfl-imnist",
                  sets: list[str] | None = None, workdir: Path, timeout: float = 1800, log=print) -> dict:
    """Run the deployment once per batch size in ``batches``; return the figures (see the module doc)."""
    # deploy.local needs Flower, an optional dependency (pip install "fedstream[flower]")
    from fedstream.deploy.local import LocalDeployment, write_app

    if requests < 1 or not batches or min(batches) < 1:
        raise ValueError(
            f"requests = {requests}, batches = {batches}: expected requests >= 1 and batch sizes >= 1"
        )
    workdir = Path(workdir).resolve()  # the server party writes its summary from a folder of its own
    base = load_config(config, list(sets or []))
    root = resolve_data_root(base["data.root"])
    if not root.is_dir():  # the parties run in Flower's folders: give them an absolute path
        raise ConfigError(f"data.root: no data folder at {root} (set data.root or $FEDSTREAM_DATA)")
    base["data.root"] = str(root.resolve())
    rows = []
    load_before = os.getloadavg()
    dep = LocalDeployment(base["vfl.clients"], workdir / "deployment")
    with TcpRelay(("127.0.0.1", dep.port)) as relay:
        dep.node_superlink = relay.address
        with dep:
            for batch in batches:
                cfg = dict(base, **{"network.batch": batch, "rounds": batch * requests})
                check_deployable(cfg)
                out = workdir / f"out-b{batch}"
                app = write_app(workdir / f"app-b{batch}", {"config": "", "set": _sets(cfg), "out": str(out)})
                relay.reset()
                log(f"B = {batch}: {cfg['rounds']} events over Flower ...")
                tic = time.perf_counter()
                result = dep.run(app, timeout=timeout)
                tcp = relay.reset()
                if result.returncode != 0 or not (out / "summary.json").exists():
                    raise RuntimeError(
                        f"the B = {batch} run failed (exit {result.returncode}); logs in {dep.workdir}"
                    )
                summary = json.loads((out / "summary.json").read_text())
                row = _row(batch, summary, tcp, _inprocess(load_config(None, cfg)))
                row["flwr_run_seconds"] = time.perf_counter() - tic
                rows.append(row)
                log(
                    f"  {row['events_per_second']:.3f} events/s, "
                    f"{row['seconds_per_request']:.2f} s per request, "
                    f"{row['tcp_bytes_per_event']:.0f} TCP bytes/event "
                    f"for {row['payload_bytes_per_event']:.0f} payload"
                )
    from fedstream.deploy.runtimes.flower import FLWR_VERSION  # Flower: optional, as above

    return {
        "bench": "network",
        "config": config,
        "sets": list(sets or []),
        "clients": base["vfl.clients"],
        "requests_per_batch_size": requests,
        "flwr_version": FLWR_VERSION,
        "cpus": os.cpu_count(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "rows": rows,
    }


def format_network_bench(d: dict) -> str:
    """The table of :func:`bench_network`'s dict, and where a request's time goes."""
    head = (
        f"Flower {d['flwr_version']} on loopback, {d['clients']} SuperNodes, {d['config']} "
        f"({d['cpus']} CPUs, load {d['load_average_before'][0]:.1f} before, "
        f"{d['load_average_after'][0]:.1f} after)"
    )
    columns = (
        f"{'B':>5} {'events':>7} {'events/s':>9} {'s/request':>9} "
        f"{'payload B/ev':>12} {'parts B/ev':>10} "
        f"{'Flower msg B/ev':>15} {'TCP B/ev':>9} {'TCP/payload':>11} {'in-process ev/s':>15}"
    )
    lines = [head, columns]
    for r in d["rows"]:
        lines.append(
            f"{r['batch']:>5} {r['events']:>7} {r['events_per_second']:>9.3f} "
            f"{r['seconds_per_request']:>9.2f} "
            f"{r['payload_bytes_per_event']:>12.0f} {r['parts_bytes_per_event']:>10.0f} "
            f"{r['flower_message_bytes_per_event']:>15.0f} {r['tcp_bytes_per_event']:>9.0f} "
            f"{r['overhead_tcp_over_payload']:>11.2f} {r['inprocess_events_per_second']:>15.0f}"
        )
    lines.append("seconds per reply: " + "; ".join(
        f"B={r['batch']}: " + ", ".join(f"{k} {v:.2f}" for k, v in r["time_per_reply_seconds"].items())
        for r in d["rows"]))
    return "\n".join(lines)
