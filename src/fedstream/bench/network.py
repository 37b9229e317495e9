"""``fedstream bench network``: online VFL deployed on loopback, by event batch size: on Flower
(:func:`bench_network`) or on the gRPC runtime (:func:`bench_network_grpc`, against a bare gRPC
echo round to the same client processes, the floor).

One SuperLink and one SuperNode per client run as subprocesses on 127.0.0.1 (the deployment of
``fedstream deploy local``); the SuperNodes reach the SuperLink through a byte-counting TCP relay
(:class:`fedstream.bench.relay.TcpRelay`). For each ``network.batch`` B the same run is submitted
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

import cProfile
import json
import os
import pstats
import time
from pathlib import Path

from fedstream.bench.relay import RelayProcess, TcpRelay
from fedstream.config import load_config
from fedstream.data import resolve_data_root
from fedstream.deploy.adapters import check_deployable
from fedstream.deploy.runtimes.grpc_wire import message_limit
from fedstream.deploy.runtimes.loopback import LoopbackLink
from fedstream.errors import ConfigError
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.parties import server_stream
from fedstream.ovfl.deploy.rows import KEEP_CHUNKS, BlockRows
from fedstream.ovfl.engine import CHUNK, OnlineVFL

BATCHES = (1, 16, 256)


def bench_config(config: str, sets) -> tuple[dict, list[str]]:
    """The bench's config (a preset or file, with ``--set`` overrides) and the overrides as a list;
    its data folder made absolute, since the parties run from folders of their own."""
    sets = list(sets or [])
    base = load_config(config, sets)
    root = resolve_data_root(base["data.root"])
    if not root.is_dir():
        raise ConfigError(f"data.root: no data folder at {root} (set data.root or $FEDSTREAM_DATA)")
    base["data.root"] = str(root.resolve())
    return base, sets


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
    base, sets = bench_config(config, sets)
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


# -- the gRPC runtime ------------------------------------------------------------------------------
class _TimedLink:
    """A link that times its exchanges (the round trips, client work included)."""

    def __init__(self, link):
        self.link, self.n_clients, self.seconds = link, link.n_clients, 0.0
        self.sends_ahead = getattr(link, "sends_ahead", False)

    def available(self) -> set[int]:
        return self.link.available()

    def rejoined(self) -> set[int]:
        return self.link.rejoined()

    def exchange(self, requests, ahead=None):
        tic = time.perf_counter()
        replies = self.link.exchange(requests) if ahead is None else self.link.exchange(requests, ahead)
        self.seconds += time.perf_counter() - tic
        return replies


def process_cpu_seconds(pid: int) -> float | None:
    """The CPU seconds (user and system, all its threads) process ``pid`` has used so far, from
    ``/proc`` (None where there is none: not Linux); 10 ms resolution."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuClock:
    """The CPU time of this process (the server party and gRPC's threads) and of each client node's
    process, between :meth:`start` and :meth:`per`: what each party spends, whatever else runs on
    the machine (the load stretches wall times, not CPU times, or much less)."""

    def __init__(self, pids):
        self.pids = list(pids)
        self.start()

    def _now(self) -> tuple[float, list[float | None]]:
        return time.process_time(), [process_cpu_seconds(pid) for pid in self.pids]

    def start(self) -> None:
        self.since = self._now()

    def per(self, n: int, unit: str) -> dict:
        """Milliseconds of CPU per ``unit`` (n of them since :meth:`start`): the server's, and the
        mean of the nodes' (None where a node's is unknown)."""
        (s0, nodes0), (s1, nodes1) = self.since, self._now()
        used = [b - a for a, b in zip(nodes0, nodes1) if a is not None and b is not None]
        node = 1e3 * sum(used) / len(used) / n if used and len(used) == len(self.pids) else None
        return {f"server_cpu_ms_per_{unit}": 1e3 * (s1 - s0) / n, f"node_cpu_ms_per_{unit}": node}


def _play(cfg: dict, link, relay: TcpRelay | RelayProcess | None, *, profile: Path | None = None,
          ahead: bool = True) -> dict:
    """One online VFL run over ``link``; its figures (socket bytes from ``relay``, when given).
    ``ahead=False``: no request goes ahead (the plain path, for comparison)."""
    timed = _TimedLink(link)
    frames0, ahead0 = link.bytes_down + link.bytes_up, link.frames_ahead
    if relay is not None:
        relay.reset()
    net = NetworkVFL(cfg, timed, stream=server_stream(cfg), ahead=ahead)
    if profile is not None:
        prof = cProfile.Profile()
        prof.runcall(net.run)
        with open(profile, "w") as f:
            pstats.Stats(prof, stream=f).sort_stats("cumulative").print_stats(40)
    else:
        net.run()
    net.finish()
    s = net.summary()
    events, requests, payload = s["rounds"], s["exchanges"] - 2, s["bytes"]["total"]
    wall = s["wall_seconds"]
    row = {"batch": cfg["network.batch"], "ahead": ahead, "events": events, "requests_per_node": requests,
           "events_per_second": events / wall, "requests_per_second": requests / wall,
           "ms_per_round_trip": 1e3 * timed.seconds / (requests + 2),
           "server_ms_per_request": 1e3 * (wall - timed.seconds) / max(requests, 1),
           "accumulated_error": s["accumulated_error"], "payload_bytes_per_event": payload / events,
           "frame_bytes_per_event": (link.bytes_down + link.bytes_up - frames0) / events,
           "requests_ahead_per_event": (link.frames_ahead - ahead0) / events,
           "faults": len(s["faults"])}
    if relay is not None:
        tcp = relay.reset()
        row |= {"tcp_bytes_per_event": sum(tcp) / events, "tcp_bytes_to_server": tcp[0],
                "tcp_bytes_from_server": tcp[1],
                "overhead_tcp_over_payload": sum(tcp) / payload if payload else float("nan")}
    return row


def _grpc_pass(base: dict, config: str, sets: list[str], workdir: Path, *, batches, events: int,
               min_requests: int, echo_rounds: int, relay: bool, profile: Path | None, plain: bool,
               log) -> tuple[dict, list]:
    """Client processes (behind a :class:`TcpRelay` in this process with ``relay``), the echo floor,
    then online VFL for each B (B = 1 also without requests ahead with ``plain``); with ``profile``
    an extra B = 1 run profiled there."""
    # gRPC is an optional dependency (the deploy extra)
    from fedstream.deploy.runtimes.grpc import GrpcLink
    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment

    M = base["vfl.clients"]
    rounds = {b: b * max(min_requests, -(-events // b)) for b in batches}  # each B's run: whole requests
    link = GrpcLink("127.0.0.1:0", M, limit=message_limit(dict(base, **{"network.batch": max(batches)})),
                    timeout=120).start()
    counter = TcpRelay(("127.0.0.1", link.port)) if relay else None
    nodes = GrpcLocalDeployment(config, [*sets, f"data.root={base['data.root']}"], M,
                                workdir / ("deployment-relay" if relay else "deployment"))
    rows = []
    try:
        with nodes:
            nodes.start(counter.address if relay else f"127.0.0.1:{link.port}")
            link.wait_for(M, 300)
            # warm-up: per event, the compiled batches, and the rounds of the longest run, whose rows
            # each node computes once (then reads from its cache, as every run does chunk 0's)
            longest = max((n, b) for b, n in rounds.items())
            warm_ups = [{"network.batch": 1, "rounds": 300}, {"network.batch": 16, "rounds": 320}]
            if longest[0] > CHUNK:  # past the first chunk of rows
                warm_ups.append({"network.batch": longest[1], "rounds": longest[0]})
            if longest[0] > KEEP_CHUNKS * CHUNK:
                log(f"note: the longest run ({longest[0]} events) is past the {KEEP_CHUNKS * CHUNK} rows a "
                    "node keeps in its cache: its nodes compute some of their rows inside the timed runs")
            for warm in warm_ups:
                _play(dict(base, **warm), link, None)
            one = dict(base, **{"network.batch": 1, "rounds": 64})
            payload = b"\0" * round(_play(one, link, None)["payload_bytes_per_event"] / M)
            for _ in range(100):
                link.echo(payload)

            clock = CpuClock(p.pid for p in nodes.nodes.values())

            def echo() -> dict:
                if counter is not None:
                    counter.reset()
                clock.start()
                tic = time.perf_counter()
                for _ in range(echo_rounds):
                    link.echo(payload)
                wall = time.perf_counter() - tic
                out = {"rounds_per_second": echo_rounds / wall, "ms_per_round_trip": 1e3 * wall / echo_rounds,
                       **clock.per(echo_rounds, "round")}
                if counter is not None:
                    out["tcp_bytes_per_round"] = sum(counter.reset()) / echo_rounds
                return out

            floors = [echo()]  # the floor before each B and after the last: each row's ratio is to
            runs = [(b, a) for b in batches for a in ((True, False) if b == 1 and plain else (True,))]
            for batch, ahead in runs:  # the mean of the two measured around it (the load drifts)
                cfg = dict(base, **{"network.batch": batch, "rounds": rounds[batch]})
                check_deployable(cfg)
                clock.start()
                rows.append(_play(cfg, link, counter, ahead=ahead))
                rows[-1] |= clock.per(rows[-1]["requests_per_node"] + 2, "request")  # setup and finish too
                if counter is None:  # the pass counting socket bytes needs the floor's bytes once
                    floors.append(echo())
                    rows[-1]["floor_rounds_per_second"] = (floors[-2]["rounds_per_second"]
                                                           + floors[-1]["rounds_per_second"]) / 2
            rates = [f["rounds_per_second"] for f in floors]
            floor = {"rounds": echo_rounds, "rounds_per_second": _mean(rates),
                     **{k: _mean([f[k] for f in floors])
                        for k in ("ms_per_round_trip", "server_cpu_ms_per_round", "node_cpu_ms_per_round")},
                     "measured_rounds_per_second": rates, "payload_bytes_per_node": len(payload)}
            if counter is not None:
                floor["tcp_bytes_per_round"] = floors[0]["tcp_bytes_per_round"]
            if profile is not None:
                _play(dict(base, **{"network.batch": 1, "rounds": 1024}), link, None, profile=profile)
    finally:
        link.close()
        if counter is not None:
            counter.close()
    return floor, rows


def _mean(values: list) -> float | None:
    """The mean of the values that are known (None: none is)."""
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def bench_network_grpc(*, batches: tuple[int, ...] = BATCHES, events: int = 4096, min_requests: int = 64,
                       echo_rounds: int = 2000, config: str = "ovfl-imnist", sets: list[str] | None = None,
                       workdir: Path, profile: bool = True, plain: bool = True, log=print) -> dict:
    """The gRPC runtime on loopback: the server here, one ``fedstream serve client`` process per client.
    The floor is a bare echo round to the same processes on the same streams (one frame of one event's
    payload to every node at once and back, as an event's requests and replies go), measured before each
    B and after the last; each B's ratio is to the mean of the two floors measured around it (other
    jobs' load drifts). Online VFL runs for each B, at least ``events`` events and ``min_requests``
    requests each (after warm-up runs that are not reported: numba loads its kernels in each node, and
    each node computes the rows of the longest run's chunks once, which every run then reads from its
    cache). Timings come from a pass with the clients connected directly; the socket bytes from a second
    pass (new client processes, a quarter of the events) behind a byte-counting :class:`TcpRelay`
    (plaintext), whose Python threads would slow the first. With ``profile`` the server's side of an
    extra B = 1 run is profiled into ``workdir/profile-b1.txt``. With ``plain``, B = 1 runs a second
    time without requests ahead (``ahead = False`` in its row: the plain path, each with the floors
    around it), to show what they change in the same run."""
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    base, sets = bench_config(config, sets)
    load_before = os.getloadavg()
    # the engine warmed up as the deployment is (its runs below are timed after warm-ups): numba's
    # kernels loaded, the data read once; measured cold, its first run was up to nearly half slower
    OnlineVFL(dict(base, rounds=2 * CHUNK)).run()
    tic = time.perf_counter()
    engine = OnlineVFL(dict(base, rounds=20000)).run()
    engine_eps = engine["rounds"] / engine["wall_seconds"]
    log(f"in-process engine: {engine_eps:.0f} events/s ({time.perf_counter() - tic:.1f} s)")
    kw = dict(batches=batches, echo_rounds=echo_rounds, plain=plain, log=log)
    floor, rows = _grpc_pass(base, config, sets, workdir, events=events, min_requests=min_requests,
                             relay=False, profile=workdir / "profile-b1.txt" if profile else None, **kw)
    rates = ", ".join(f"{r:.0f}" for r in floor["measured_rounds_per_second"])
    log(f"echo floor: {floor['rounds_per_second']:.0f} rounds/s, {floor['ms_per_round_trip']:.2f} ms "
        f"(measured {rates}: before each B and after the last)")
    counted_floor, counted = _grpc_pass(base, config, sets, workdir, events=max(1, events // 4),
                                        min_requests=max(1, min_requests // 8), relay=True, profile=None,
                                        **kw)
    floor["tcp_bytes_per_round"] = counted_floor["tcp_bytes_per_round"]
    tic = time.perf_counter()  # the engine again: each B's ratio is to the mean of both (the load drifts)
    after = OnlineVFL(dict(base, rounds=20000)).run()
    engines = [engine_eps, after["rounds"] / after["wall_seconds"]]
    engine_eps = sum(engines) / 2
    log(f"in-process engine, after: {engines[1]:.0f} events/s ({time.perf_counter() - tic:.1f} s)")
    for row, c in zip(rows, counted):
        row |= {"tcp_bytes_per_event": c["tcp_bytes_per_event"],
                "overhead_tcp_over_payload": c["overhead_tcp_over_payload"],
                "ratio_to_floor": row["requests_per_second"] / row["floor_rounds_per_second"],
                "ratio_to_engine": row["events_per_second"] / engine_eps}
        plain_row = "" if row["ahead"] else " (plain: no request ahead)"
        log(f"B = {row['batch']}{plain_row}: {row['events_per_second']:.0f} events/s, "
            f"{row['ms_per_round_trip']:.2f} ms per round trip, "
            f"{row['tcp_bytes_per_event']:.0f} socket B/event for "
            f"{row['payload_bytes_per_event']:.0f} payload")
    return {"bench": "network", "runtime": "grpc", "config": config, "sets": sets,
            "clients": base["vfl.clients"], "cpus": os.cpu_count(), "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg()), "engine_events_per_second": engine_eps,
            "engine_measured_events_per_second": engines,
            "floor": floor, "rows": rows}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_network_grpc(d: dict) -> str:
    """The table of :func:`bench_network_grpc`'s dict."""
    f = d["floor"]
    lines = [f"gRPC on loopback, {d['clients']} client processes, {d['config']} ({d['cpus']} CPUs, load "
             f"{d['load_average_before'][0]:.1f} before, {d['load_average_after'][0]:.1f} after); in-process "
             f"engine {d['engine_events_per_second']:.0f} events/s (the mean of "
             + ", ".join(f"{e:.0f}" for e in d.get("engine_measured_events_per_second", [])) + ", measured "
             "before and after the runs; x engine: events/s over it, targets B = 256 >= 0.6, B = 16 >= 0.3)",
             f"echo floor: {f['rounds_per_second']:.0f} rounds/s, {f['ms_per_round_trip']:.2f} ms per round "
             f"trip, {f['tcp_bytes_per_round']:.0f} socket B per round "
             f"({f['payload_bytes_per_node']} B each way per node); measured before each B and after "
             "the last: " + ", ".join(f"{r:.0f}" for r in f.get("measured_rounds_per_second", []))
             + f"; CPU ms per round: server {_ms(f.get('server_cpu_ms_per_round'))}, each node "
             f"{_ms(f.get('node_cpu_ms_per_round'))}",
             f"{'B':>5} {'events':>7} {'events/s':>9} {'ms/RTT':>7} {'server ms':>9} {'payload B/ev':>12} "
             f"{'frame B/ev':>10} {'socket B/ev':>11} {'socket/payload':>14} {'floor r/s':>9} {'x floor':>7} "
             f"{'x engine':>8} {'CPU ms/req: server':>18} {'node':>5}"]
    for r in d["rows"]:
        mark = " " if r.get("ahead", True) else "*"
        lines.append(f"{r['batch']:>4}{mark} {r['events']:>7} {r['events_per_second']:>9.0f} "
                     f"{r['ms_per_round_trip']:>7.2f} {r['server_ms_per_request']:>9.2f} "
                     f"{r['payload_bytes_per_event']:>12.0f} {r['frame_bytes_per_event']:>10.0f} "
                     f"{r['tcp_bytes_per_event']:>11.0f} {r['overhead_tcp_over_payload']:>14.2f} "
                     f"{r.get('floor_rounds_per_second', f['rounds_per_second']):>9.0f} "
                     f"{r['ratio_to_floor']:>7.2f} {r['ratio_to_engine']:>8.3f} "
                     f"{_ms(r.get('server_cpu_ms_per_request')):>18} "
                     f"{_ms(r.get('node_cpu_ms_per_request')):>5}")
    if not all(r.get("ahead", True) for r in d["rows"]):
        lines.append("*: the plain path, no request sent ahead (the same B = 1 run otherwise)")
    lines.append("CPU ms/req: CPU time per request of the server's process (the server party and gRPC's "
                 "threads) and of each node's process (their mean), setup and finish included")
    return "\n".join(lines)


# -- a wide-area link: the gRPC runtime through a delaying relay ---------------------------------
RTTS_MS = (0.0, 5.0, 20.0, 50.0)


def error_run(config: str, sets: list[str], batch: int, rounds: int) -> dict:
    """The accumulated error of ``rounds`` rounds at ``network.batch = batch``: the deployment's
    server (:class:`NetworkVFL`) and client hosts over an in-process link (nodes kept in memory), the
    protocol of ``fedstream deploy local`` and its clients' staleness without the sockets; it does
    not depend on the link's delay. The simulator (``fedstream run``) has no event batching: it plays
    B = 1, which this equals bit for bit."""
    cfg = load_config(config, [*sets, f"rounds={rounds}", f"network.batch={batch}"])
    cfg["data.root"] = str(resolve_data_root(cfg["data.root"]).resolve())
    check_deployable(cfg)
    rows = [BlockRows(cfg, m) for m in range(cfg["vfl.clients"])]
    link = LoopbackLink(lambda c, m: rows[m], cfg["vfl.clients"], persist=False)
    tic = time.perf_counter()
    net = NetworkVFL(cfg, link, stream=server_stream(cfg))
    net.run()
    net.finish()
    s = net.summary()
    return {"batch": batch, "rounds": s["rounds"], "accumulated_error": s["accumulated_error"],
            "seconds": time.perf_counter() - tic, "load_average_after": os.getloadavg()[0]}


def bench_network_wan(*, rtts_ms: tuple[float, ...] = RTTS_MS, batches: tuple[int, ...] = BATCHES,
                      rounds: int = 1000, min_requests: int = 16, mbit: float | None = None,
                      error_rounds: int | None = None, config: str = "ovfl-imnist",
                      sets: list[str] | None = None, workdir: Path, log=print) -> dict:
    """Online VFL on the gRPC runtime over a wide-area link played on loopback: the server here, one
    ``fedstream serve client`` process per client, each connected through one relay
    (:class:`RelayProcess`, a :class:`TcpRelay` in a process of its own, so that it does not share the
    server's interpreter lock) that holds every byte ``R / 2`` ms in each direction (and limits each
    direction of each node's connection to ``mbit`` Mbit/s: then each row also gets
    ``bandwidth_bound_events_per_second``, the events/s at which a node's share (1 / M) of the
    socket bytes of the busier direction fills its link).
    For each round-trip time R in ``rtts_ms`` and each B in ``batches``, at least ``rounds`` events and
    ``min_requests`` requests; each row gives events/s, the latency bound B / RTT (one round trip per
    batch: the protocol's least) and the fraction of it reached, with the load around it. R = 0 runs
    through the relay too (no delay: the relay's own cost is in every row); with R = 0 in
    ``rtts_ms``, each row also gets ``expected_events_per_second``, B / (RTT + B / v0) with v0 the same
    B's events/s at R = 0: what a link that adds exactly one round trip per batch to the run's own
    time would give (a serialising delay would give less). With ``error_rounds``,
    :func:`error_run` gives the accumulated error of that many rounds once per B (it does not depend
    on R), beside the simulator's (B = 1's reference)."""
    from fedstream.deploy.runtimes.grpc import GrpcLink  # gRPC is an optional dependency (deploy extra)
    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment

    if rounds < 1 or min_requests < 1 or not batches or min(batches) < 1:
        raise ValueError(f"rounds = {rounds}, min_requests = {min_requests}, batches = {batches}: "
                         "expected rounds >= 1, min_requests >= 1 and batch sizes >= 1")
    if not rtts_ms or min(rtts_ms) < 0:
        raise ValueError(f"round-trip times {rtts_ms} ms: expected values >= 0")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    base, sets = bench_config(config, sets)
    M = base["vfl.clients"]
    load_before = os.getloadavg()
    rows = []
    limit = message_limit(dict(base, **{"network.batch": max(batches)}))
    link = GrpcLink("127.0.0.1:0", M, limit=limit, timeout=600).start()
    relay = RelayProcess(("127.0.0.1", link.port), mbit=mbit)
    nodes = GrpcLocalDeployment(config, [*sets, f"data.root={base['data.root']}"], M,
                                workdir / "deployment")
    try:
        with nodes:
            nodes.start(relay.address)
            link.wait_for(M, 300)
            for warm in ({"network.batch": 1, "rounds": 300}, {"network.batch": 16, "rounds": 320}):
                _play(dict(base, **warm), link, None)  # warm-up (numba): per event, and compiled batches
            for rtt in rtts_ms:
                relay.set_link(rtt / 2000, mbit)
                for batch in batches:
                    n = batch * max(min_requests, -(-rounds // batch))
                    cfg = dict(base, **{"network.batch": batch, "rounds": n})
                    check_deployable(cfg)
                    load = os.getloadavg()[0]
                    row = _play(cfg, link, relay)
                    bound = batch / (rtt / 1000) if rtt > 0 else None
                    if mbit is not None:  # each node's link carries its share of the busier direction
                        busier = max(row["tcp_bytes_to_server"], row["tcp_bytes_from_server"]) / M
                        row["bandwidth_bound_events_per_second"] = mbit * 1e6 / 8 * row["events"] / busier
                    row |= {"rtt_ms": rtt, "mbit": mbit, "load_average_before": load,
                            "load_average_after": os.getloadavg()[0],
                            "latency_bound_events_per_second": bound,
                            "fraction_of_bound": row["events_per_second"] / bound if bound else None}
                    rows.append(row)
                    frac = f", {row['fraction_of_bound']:.0%} of B/RTT = {bound:.0f}" if bound else ""
                    log(f"RTT {rtt:g} ms, B = {batch}: {row['events_per_second']:.0f} events/s{frac} "
                        f"({row['events']} events, load {load:.1f})")
    finally:
        link.close()
        relay.close()
    zero = {r["batch"]: r["events_per_second"] for r in rows if r["rtt_ms"] == 0}
    for r in rows:  # the link's round trip added to the batch's own time at R = 0 (same run)
        if r["batch"] in zero:
            own = r["batch"] / zero[r["batch"]]
            r["expected_events_per_second"] = r["batch"] / (r["rtt_ms"] / 1000 + own)
    errors = []
    if error_rounds:
        sim = OnlineVFL(load_config(config, [*sets, f"rounds={error_rounds}",
                                             f"data.root={base['data.root']}"])).run()
        errors.append({"batch": None, "rounds": sim["rounds"], "seconds": sim["wall_seconds"],
                       "accumulated_error": sim["accumulated_error"],
                       "load_average_after": os.getloadavg()[0]})
        log(f"simulator, {error_rounds} rounds: accumulated error {sim['accumulated_error']:.4f}")
        for batch in batches:
            errors.append(error_run(config, [*sets, f"data.root={base['data.root']}"], batch, error_rounds))
            log(f"B = {batch}, {error_rounds} rounds: accumulated error "
                f"{errors[-1]['accumulated_error']:.4f}")
    return {"bench": "network-wan", "runtime": "grpc", "config": config, "sets": sets, "clients": M,
            "cpus": os.cpu_count(), "mbit": mbit, "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg()), "rows": rows, "errors": errors}


def format_network_wan(d: dict) -> str:
    """The WAN table of :func:`bench_network_wan`'s dict: events/s and the latency bound for each RTT
    and B, and each B's accumulated error (when measured) against B = 1's."""
    bw = f"{d['mbit']:g} Mbit/s each way" if d.get("mbit") else "no bandwidth limit"
    lines = [f"gRPC through a delaying relay on loopback ({bw}), {d['clients']} client processes, "
             f"{d['config']} ({d['cpus']} CPUs, load {d['load_average_before'][0]:.1f} before, "
             f"{d['load_average_after'][0]:.1f} after)"]
    errors = {e["batch"]: e for e in d.get("errors", [])}
    one = errors.get(1)
    head = (f"{'RTT ms':>6} {'B':>5} {'events':>7} {'events/s':>9} {'B/RTT':>7} {'of bound':>8} "
            f"{'expected':>8} {'load':>5}")
    if errors:
        head += f" {'error':>7} {'x B=1':>6}"
    lines.append(head)
    for r in d["rows"]:
        bound, frac = r["latency_bound_events_per_second"], r["fraction_of_bound"]
        cells = ("-", "-") if bound is None else (f"{bound:.0f}", f"{frac:.0%}")
        expected = r.get("expected_events_per_second")
        line = (f"{r['rtt_ms']:>6g} {r['batch']:>5} {r['events']:>7} {r['events_per_second']:>9.0f} "
                f"{cells[0]:>7} {cells[1]:>8} {'-' if expected is None else f'{expected:.0f}':>8} "
                f"{r['load_average_before']:>5.1f}")
        e = errors.get(r["batch"])
        if e is not None:
            ratio = f"{e['accumulated_error'] / one['accumulated_error']:.3f}" if one else "-"
            line += f" {e['accumulated_error']:>7.4f} {ratio:>6}"
        if r.get("bandwidth_bound_events_per_second") is not None:
            line += f"  (bandwidth bound {r['bandwidth_bound_events_per_second']:.0f})"
        lines.append(line)
    for e in d.get("errors", []):
        who = "simulator (no batching)" if e["batch"] is None else f"B = {e['batch']}"
        lines.append(f"error: {who}, {e['rounds']} rounds: {e['accumulated_error']:.4f} "
                     f"({e['seconds']:.0f} s, load {e['load_average_after']:.1f} after)")
    lines.append("B/RTT: one round trip per batch, the protocol's least; expected: B / (RTT + B / (R = 0's "
                 "events/s)), the run's own time plus one round trip per batch; R = 0 runs through the "
                 "relay too")
    return "\n".join(lines)
