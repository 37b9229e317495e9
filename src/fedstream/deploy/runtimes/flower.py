"""The Flower runtime (tested with ``flwr==1.41.0``; ``pip install 'fedstream[flower]'``).

:func:`make_server_app` is a ServerApp that runs the task's server (:func:`fedstream.deploy.serve.
serve`) over a :class:`~fedstream.deploy.runtimes.flower_grid.GridLink`, one Flower ``Message``
per request (``train.<kind>``). :func:`make_client_app` is a ClientApp that answers ``query.hello``
with its client index and every request with a :class:`fedstream.deploy.session.Node` rebuilt from
``context.state``: Flower runs each message in a fresh process. The app's settings
(:data:`SETTINGS`) and a node's (``--node-config``): docs/deploy.md, "Flower".
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from fedstream.config import load_config
from fedstream.config.loader import parse_override
from fedstream.deploy.records import KINDS
from fedstream.deploy.serve import serve
from fedstream.deploy.session import Node, NodeMemory, default_cache_dir, machine_data
from fedstream.errors import ConfigError

# Flower reports usage to its servers and checks for updates unless told not to; a library that
# imports it should not phone home on its users' behalf. Set these to "1" / "0" to opt back in.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp

    from fedstream.deploy.runtimes.flower_grid import TIMING, GridLink, from_record, to_record
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("fedstream.deploy.runtimes.flower needs Flower: pip install 'fedstream[flower]' "
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


class FlowerRuntime:
    """What the server's adapter needs of Flower: a link to the nodes and what Flower adds to the
    summary (its version, the timings and bytes of its messages)."""

    def __init__(self, grid: Grid, settings: dict):
        self.grid, self.settings = grid, settings
        self.link: GridLink | None = None

    def connect(self, n_clients: int) -> GridLink:
        s = self.settings
        self.link = GridLink.connect(self.grid, n_clients, poll=float(s["poll-seconds"]),
                                     timeout=float(s["reply-timeout"]), node_timeout=float(s["node-timeout"]))
        return self.link

    def extra(self) -> dict:
        return {"flwr_version": FLWR_VERSION, "flower": timing_summary(self.link)}

    def note(self) -> str:
        return f"{self.link.messages} Flower messages; {json.dumps(timing_summary(self.link))}"


def make_server_app(**defaults) -> ServerApp:
    """The server party as a Flower ServerApp; ``defaults`` are settings (see the module doc)."""
    resolve_settings({}, defaults)  # fail early on a misspelt setting
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = resolve_settings(dict(context.run_config), defaults)
        config = resolve_config(settings)
        serve(config, settings, FlowerRuntime(grid, settings))

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


def node_store(node_config: dict) -> Path | None:
    """The node's cache folder, where it keeps its checkpoints (None: ``cache-dir="none"``)."""
    cache = str(node_config.get("cache-dir", "")) or str(default_cache_dir())
    return None if cache == "none" else Path(cache)


def _handle(msg: Message, context: Context) -> Message:
    start = time.time()
    index = client_index(context.node_config)
    env = from_record(msg.content, f"message to client {index}")
    store = node_store(context.node_config)
    data_root = str(context.node_config.get("data-root", "")) or None
    node = Node(index, store=store, psi=False, data=machine_data(data_root, store))
    if CONFIG in context.state and STATE in context.state:
        head = context.state[CONFIG]
        node.restore(NodeMemory(str(head["json"]), str(head["run"]),
                                {k: np.array(v.numpy()) for k, v in context.state[STATE].items()}))
    reply = node.handle(env)
    memory = node.memory()
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
