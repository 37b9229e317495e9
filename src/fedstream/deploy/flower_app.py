"""Online VFL, batch VFL and CHFL on Flower: a ServerApp for the server party, a ClientApp for each client party.

The apps dispatch on the config's ``task``: ``ovfl`` as below, ``chfl`` (batch mode) to
:func:`serve_chfl` on the server and :class:`fedstream.deploy.chfl_host.CHFLHost` on the nodes,
``vfl`` (batch VFL, the compression paper's split learning) to :func:`serve_vfl_batch` and
:class:`fedstream.deploy.vfl_batch_host.BatchVFLHost` (same message kinds, same records, same node
state handling).

Tested with ``flwr==1.41.0`` (``pip install 'fedstream[flower]'``), Message API:

* :func:`make_server_app` returns a ``ServerApp`` whose main function finds the client nodes, sends
  them the run's config and runs :class:`fedstream.deploy.driver.NetworkVFL` over a
  :class:`~fedstream.deploy.gridlink.GridLink`: every request of the protocol is one Flower
  ``Message`` to one node (``message_type = "train.<kind>"``).
* :func:`make_client_app` returns a ``ClientApp`` that answers ``query.hello`` with its client
  index (``--node-config "client-index=M"``; the simulation runtime's ``partition-id`` also works)
  and ``train.setup|round|finish`` with a :class:`fedstream.deploy.host.ClientHost`. Flower
  runs each message in a fresh ClientApp process, so the host is rebuilt from ``context.state``
  (an ``ArrayRecord``) and saved back after every message, and the node's feature block is read
  from its cache folder (:mod:`fedstream.deploy.rows`) instead of rebuilding the stream. The node
  also keeps checkpoints there (:mod:`fedstream.deploy.node`): a SuperNode that crashed and
  restarts has lost Flower's ``context.state`` and resumes from them.

Records and the server's link: :mod:`fedstream.deploy.gridlink`.

Settings (the app's ``[tool.flwr.app.config]``, overridable with ``flwr run --run-config``):
``config`` (preset name or config file on the server's machine), ``set`` (space-separated
``KEY=VALUE`` overrides), ``out`` (folder on the server's machine for ``summary.json``),
``audit`` (also write every party's model and each message's size), ``data-root``,
``poll-seconds``, ``reply-timeout`` (seconds before a node that has not answered a request is
treated as down for it), ``node-timeout`` (seconds to wait for the nodes at the start),
``resume`` (continue from the server's checkpoint in ``out`` and each node from its own state of
that point: online VFL ``checkpoint.npz``, written every ``checkpoint.every`` rounds and at the end;
CHFL ``checkpoint.pt`` after every FedAvg round; batch VFL ``checkpoint.pt`` at every epoch end). Node settings (``--node-config``):
``client-index`` (or ``data.client_index``), ``data-root``, ``cache-dir`` (the node's feature-block
cache; ``none``: no cache).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedstream.config import load_config
from fedstream.config.loader import parse_override
from fedstream.deploy.driver import NetworkVFL
from fedstream.deploy.host import model_digest
from fedstream.deploy.link import KINDS
from fedstream.deploy.node import NodeMemory, handle_on_node
from fedstream.deploy.parties import check_deployable, server_stream
from fedstream.deploy.rows import BlockRows, default_cache_dir
from fedstream.errors import ConfigError

if TYPE_CHECKING:  # CHFL's and batch VFL's modules import torch: an online VFL node does not need it
    from fedstream.deploy.chfl_data import NodePart
    from fedstream.deploy.vfl_batch_data import ClientBlock

# Flower reports usage to its servers and checks for updates unless told not to; a library that
# imports it should not phone home on its users' behalf. Set these to "1" / "0" to opt back in.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

    from fedstream.deploy.gridlink import TIMING, GridLink, from_record, to_record
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("fedstream.deploy.flower_app needs Flower: pip install 'fedstream[flower]' "
                      "(tested with flwr==1.41.0)") from exc

FLWR_VERSION = "1.41.0"  # the version this module is tested with
READY_AT = time.time()  # when this process had imported Flower and fedstream (for timings)


def process_started_at() -> float:
    """When this process started (epoch seconds; Linux /proc, else NaN): a ClientApp's start-up
    time is READY_AT minus this."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat[stat.rindex(")") + 2:].split()[19])  # field 22, starttime, in clock ticks since boot
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return float("nan")


STARTED_AT = process_started_at()
STATE, CONFIG = "fedstream.state", "fedstream.config"  # keys of a node's context.state

SETTINGS = {  # run-config key -> default
    "config": "ovfl-imnist", "set": "", "out": "", "audit": False, "data-root": "",
    "poll-seconds": 0.005, "reply-timeout": 120.0, "node-timeout": 120.0, "resume": False,
}


def resolve_settings(run_config: dict, defaults: dict | None = None) -> dict:
    """The app's settings: ``SETTINGS`` < factory ``defaults`` < the run's config; unknown keys rejected."""
    settings = dict(SETTINGS)
    for source, where in ((defaults or {}, "make_server_app"), (run_config, "run config")):
        for key, value in source.items():
            if key not in SETTINGS:
                raise ConfigError(f"{where}: unknown setting {key!r}; expected one of {sorted(SETTINGS)}")
            settings[key] = value
    return settings


def resolve_config(settings: dict) -> dict:
    """The fedstream config the run's settings name (``config`` plus ``set`` overrides)."""
    overrides = [parse_override(item) for item in str(settings["set"]).split()]
    return load_config(settings["config"] or None, dict(overrides))


TIMINGS = ("delivery_and_process_start", "process_imports", "ready_to_handler", "handler", "reply_to_server")


def timing_summary(link: GridLink) -> dict:
    """Mean seconds per reply in each stretch of a Flower round trip (see GridLink.timings), and
    the bytes of Flower's serialised messages."""
    t = np.array(link.timings) if link.timings else np.zeros((0, len(TIMINGS)))
    return {"flower_messages": link.messages, "replies_timed": len(t), "message_bytes_down": link.bytes_down,
            "message_bytes_up": link.bytes_up} | {
        f"mean_{n}_seconds": float(t[:, i].mean()) if len(t) else float("nan") for i, n in enumerate(TIMINGS)}


def write_outputs(out: Path, net: NetworkVFL, link: GridLink, *, audit: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    summary = net.summary() | {
        "server_digest": model_digest(net.server.model.parameters()),
        "flwr_version": FLWR_VERSION,
        "flower": timing_summary(link),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if audit:
        arrays = {f"server.{i}": p for i, p in enumerate(net.server.model.parameters())}
        for r in net.reports:
            arrays |= {f"client{r['client']}.{i}": p for i, p in enumerate(r["params"])}
        np.savez(out / "models.npz", **arrays)
        (out / "message_sizes.json").write_text(json.dumps(net.transport.sizes))


def serve_chfl(grid: Grid, config: dict, settings: dict) -> None:
    """The server party of a CHFL run (batch mode; :mod:`fedstream.deploy.chfl_driver`): no data at
    all, the nodes report their sizes. Writes ``summary.json`` (and with ``audit`` the final global
    common column, ``models.npz``) to ``out``, with ``metrics.csv`` and ``checkpoint.pt`` (after every
    FedAvg round); ``resume`` continues from that checkpoint, each node from its own state of it."""
    from fedstream.deploy.chfl_driver import NetworkCHFL

    if settings["resume"] and not settings["out"]:
        raise ConfigError("resume: needs out, the folder holding the CHFL server's checkpoint.pt")
    link = GridLink.connect(
        grid,
        config["chfl.clients"],
        poll=float(settings["poll-seconds"]),
        timeout=float(settings["reply-timeout"]),
        node_timeout=float(settings["node-timeout"]),
    )

    def progress(p: dict) -> None:
        print(f"fedstream: lr {p['lr']:g}, round {p['round']}/{p['rounds']}: mean best validation accuracy "
              f"{p['val_acc']:.4f}", flush=True)

    print(f"fedstream: CHFL ({config['chfl.method']}) with {config['chfl.clients']} client nodes", flush=True)
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
        f"fedstream: done, test accuracy {result['test_acc']:.4f}, {result['bytes']['total']} payload bytes, "
        f"{len(result['faults'])} node fault(s), {len(result['rejoins'])} rejoin(s), {link.messages} Flower messages; "
        f"{json.dumps(timing_summary(link))}",
        flush=True,
    )
    if settings["out"]:
        out = Path(settings["out"])
        out.mkdir(parents=True, exist_ok=True)
        summary = result | {"config": config, "flwr_version": FLWR_VERSION, "flower": timing_summary(link)}
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        if settings["audit"]:
            np.savez(out / "models.npz", **{f"global.{k}": v for k, v in net.global_common().items()})


def serve_vfl_batch(grid: Grid, config: dict, settings: dict) -> None:
    """The server party of a batch VFL run (:mod:`fedstream.deploy.vfl_batch_driver`): the labels
    only. Writes ``summary.json``, ``metrics.csv`` and, at every epoch end, ``checkpoint.pt`` (and
    with ``audit`` every party's final model, ``models.npz``) to ``out``; ``resume`` continues from
    ``out/checkpoint.pt`` when it exists (each node from its own state of that epoch), else starts afresh."""
    from fedstream.deploy.vfl_batch_data import load_labels
    from fedstream.deploy.vfl_batch_driver import NetworkBatchVFL
    from fedstream.vfl.checkpoint import NAME

    if settings["resume"] and not settings["out"]:
        raise ConfigError("resume: needs out, the folder holding the server's checkpoint.pt")
    labels = load_labels(config, settings["data-root"] or None)
    link = GridLink.connect(
        grid,
        config["vfl.clients"],
        poll=float(settings["poll-seconds"]),
        timeout=float(settings["reply-timeout"]),
        node_timeout=float(settings["node-timeout"]),
    )

    def progress(p: dict) -> None:
        if p["event"] == "epoch":
            print(f"fedstream: epoch {p['epoch']}: train loss {p['train_loss']:.4f}, test accuracy "
                  f"{p['test_accuracy']:.4f}, {p['bytes_up']} B up, {p['bytes_down']} B down", flush=True)

    out = Path(settings["out"]) if settings["out"] else None
    print(f"fedstream: batch VFL with {config['vfl.clients']} client nodes", flush=True)
    net = NetworkBatchVFL(config, link, labels=labels, out=out, progress=progress)
    if settings["resume"] and (out / NAME).exists():
        net.load(out / NAME)
        print(f"fedstream: resuming after epoch {net.done} from {out / NAME}", flush=True)
    elif settings["resume"]:
        print(f"fedstream: no checkpoint at {out / NAME}: starting afresh", flush=True)
    audit = bool(settings["audit"])
    summary = net.run(models=audit)
    print(
        f"fedstream: done, test accuracy {summary['final_accuracy']:.4f}, {summary['bytes']['total']} payload bytes, "
        f"{len(summary['faults'])} node fault(s), {len(summary['rejoins'])} rejoin(s), {link.messages} Flower messages; "
        f"{json.dumps(timing_summary(link))}",
        flush=True,
    )
    if out is not None:
        summary = summary | {
            "run_config": config,
            "flwr_version": FLWR_VERSION,
            "flower": timing_summary(link),
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        if audit:
            arrays = {f"server.{k}": v.detach().numpy() for k, v in net.server.model.state_dict().items()}
            for m, state in net.cohort.models.items():
                arrays |= {f"client{m}.{k}": v for k, v in state.items()}
            np.savez(out / "models.npz", **arrays)


def make_server_app(**defaults) -> ServerApp:
    """The server party as a Flower ServerApp; ``defaults`` are settings (see the module doc)."""
    resolve_settings({}, defaults)  # fail early on a misspelt setting
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = resolve_settings(dict(context.run_config), defaults)
        config = resolve_config(settings)
        check_deployable(config)
        if config["task"] == "chfl":
            serve_chfl(grid, config, settings)
            return
        if config["task"] == "vfl":
            serve_vfl_batch(grid, config, settings)
            return
        stream = server_stream(config, settings["data-root"] or None)  # labels only
        link = GridLink.connect(
            grid,
            config["vfl.clients"],
            poll=float(settings["poll-seconds"]),
            timeout=float(settings["reply-timeout"]),
            node_timeout=float(settings["node-timeout"]),
        )
        net = NetworkVFL(config, link, stream=stream, record_sizes=bool(settings["audit"]))
        checkpoint = Path(settings["out"]) / "checkpoint.npz" if settings["out"] else None
        if settings["resume"] and checkpoint is not None and checkpoint.exists():
            net.load(checkpoint)
            print(f"fedstream: resuming at round {net.t} from {checkpoint}", flush=True)
        print(f"fedstream: {config['rounds']} rounds with {config['vfl.clients']} client nodes", flush=True)
        net.run(checkpoint=checkpoint)
        net.finish(models=bool(settings["audit"]))
        s = net.summary()
        print(
            f"fedstream: done, accumulated error {s['accumulated_error']:.4f}, {s['bytes']['total']} payload "
            f"bytes, {s['rounds_per_second']:.2f} rounds/s, {link.messages} Flower messages; "
            f"{json.dumps(timing_summary(link))}",
            flush=True,
        )
        if settings["out"]:
            write_outputs(Path(settings["out"]), net, link, audit=bool(settings["audit"]))

    return app


# -- client side -------------------------------------------------------------------------------
INDEX_KEYS = ("client-index", "data.client_index", "partition-id")  # node-config keys naming the client


def client_index(node_config: dict) -> int:
    """The client this SuperNode hosts: ``--node-config "client-index=M"`` (or ``data.client_index=M``,
    the config key's name; the simulation runtime's ``partition-id``). Two keys that disagree are refused."""
    found = {key: node_config[key] for key in INDEX_KEYS if key in node_config}
    for key, value in found.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"--node-config {key}={value!r}: expected an integer client index >= 0")
    named = {k: v for k, v in found.items() if k != "partition-id"}
    if len(set(named.values())) > 1:
        raise ConfigError(f"--node-config names two client indices {named}: give one")
    if found:
        return next(iter(named.values())) if named else found["partition-id"]
    raise ConfigError("this SuperNode has no client index: start it with --node-config \"client-index=M\" "
                      "(or \"data.client_index=M\")")


def node_rows(config: dict, index: int, node_config: dict) -> BlockRows | NodePart | ClientBlock:
    """This node's data, cached in its ``cache-dir``: online VFL its feature block
    (:mod:`fedstream.deploy.rows`), CHFL its rows and columns (:mod:`fedstream.deploy.chfl_data`),
    batch VFL its strip of every image (:mod:`fedstream.deploy.vfl_batch_data`)."""
    cache = str(node_config.get("cache-dir", "")) or str(default_cache_dir())
    if config["task"] == "vfl":
        from fedstream.deploy.vfl_batch_data import load_block

        return load_block(config, index, data_root=str(node_config.get("data-root", "")) or None,
                          cache_dir=None if cache == "none" else Path(cache))
    if config["task"] == "chfl":
        from fedstream.deploy.chfl_data import load_part

        return load_part(config, index, data_root=str(node_config.get("data-root", "")) or None,
                         cache_dir=None if cache == "none" else Path(cache))
    return BlockRows(config, index, data_root=str(node_config.get("data-root", "")) or None,
                     cache_dir=None if cache == "none" else Path(cache))


def node_store(node_config: dict) -> Path | None:
    """The node's cache folder, where it keeps its checkpoints (None: ``cache-dir="none"``)."""
    cache = str(node_config.get("cache-dir", "")) or str(default_cache_dir())
    return None if cache == "none" else Path(cache)


def _handle(msg: Message, context: Context) -> Message:
    start = time.time()
    index = client_index(context.node_config)
    env = from_record(msg.content, f"message to client {index}")
    memory = None
    if CONFIG in context.state and STATE in context.state:
        head = context.state[CONFIG]
        memory = NodeMemory(str(head["json"]), str(head["run"]),
                            {k: np.array(v.numpy()) for k, v in context.state[STATE].items()})
    reply, memory = handle_on_node(env, index, memory, store=node_store(context.node_config),
                                   rows=lambda config, m: node_rows(config, m, context.node_config))
    context.state[CONFIG] = ConfigRecord({"json": memory.config, "run": memory.run})
    context.state[STATE] = ArrayRecord(
        {k: Array(np.require(v, requirements="C")) for k, v in memory.state.items()}
    )
    reply.info |= {TIMING + "born": STARTED_AT, TIMING + "ready": READY_AT, TIMING + "start": start,
                   TIMING + "end": time.time()}
    return Message(to_record(reply), reply_to=msg)


def _hello(msg: Message, context: Context) -> Message:
    return Message(
        RecordDict({"fedstream": ConfigRecord({"client": client_index(context.node_config)})}), reply_to=msg
    )


def make_client_app() -> ClientApp:
    """A client party as a Flower ClientApp (one per SuperNode)."""
    app = ClientApp()
    app.query("hello")(_hello)
    for kind in KINDS:
        app.train(kind)(_handle)
    return app


__all__ = ["FLWR_VERSION", "make_client_app", "make_server_app"]
