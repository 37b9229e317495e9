"""Online VFL on Flower: a ServerApp for the server party, a ClientApp for each client party.

Tested with ``flwr==1.41.0`` (``pip install 'fedstream[flower]'``), Message API:

* :func:`make_server_app` returns a ``ServerApp`` whose main function finds the client nodes, sends
  them the run's config and runs :class:`fedstream.deploy.driver.NetworkVFL` over a
  :class:`GridLink`: every request of the protocol is one Flower ``Message`` to one node
  (``message_type = "train.<kind>"``), pushed with ``grid.push_messages`` and collected with
  ``grid.pull_messages`` (polled every ``poll-seconds``; ``grid.send_and_receive`` sleeps 3 s
  between polls).
* :func:`make_client_app` returns a ``ClientApp`` that answers ``query.hello`` with its client
  index (``--node-config "client-index=M"``; the simulation runtime's ``partition-id`` also works)
  and ``train.setup|round|query|finish`` with a :class:`fedstream.deploy.host.ClientHost`. Flower
  runs each message in a fresh ClientApp process, so the host is rebuilt from ``context.state``
  (an ``ArrayRecord``) and saved back after every message.

Payload layout of a ``RecordDict``: ``"fedstream"`` is a ``ConfigRecord`` with ``kind`` (str),
``round`` (int) and ``payload`` (bytes: one message exactly as
:func:`fedstream.transport.codec.encode` made it, or empty); optional ``"info"`` (``ConfigRecord``,
control data) and ``"arrays"`` (``ArrayRecord``, only the final report of an audited run).

Settings (the app's ``[tool.flwr.app.config]``, overridable with ``flwr run --run-config``):
``config`` (preset name or config file on the server's machine), ``set`` (space-separated
``KEY=VALUE`` overrides), ``out`` (folder on the server's machine for ``summary.json``),
``audit`` (also write every party's model and each message's size), ``data-root``,
``poll-seconds``, ``reply-timeout``, ``node-timeout``. Node settings (``--node-config``):
``client-index``, ``data-root``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from fedstream.config import load_config
from fedstream.config.loader import parse_override
from fedstream.deploy.driver import NetworkVFL
from fedstream.deploy.host import ClientHost, model_digest
from fedstream.deploy.link import KINDS, SETUP, Envelope
from fedstream.deploy.parties import check_deployable, party_stream
from fedstream.errors import ConfigError, ProtocolError

# Flower reports usage to its servers and checks for updates unless told not to; a library that
# imports it should not phone home on its users' behalf. Set these to "1" / "0" to opt back in.
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("FLWR_DISABLE_UPDATE_CHECK", "1")

try:
    from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("fedstream.deploy.flower_app needs Flower: pip install 'fedstream[flower]' "
                      "(tested with flwr==1.41.0)") from exc

FLWR_VERSION = "1.41.0"  # the version this module is tested with
READY_AT = time.time()  # when this process had imported Flower and fedstream (for timings)
MAX_PAYLOAD = 64 * 2**20  # bytes; a larger payload is refused before decoding
HELLO = "query.hello"
STATE, CONFIG = "fedstream.state", "fedstream.config"  # keys of a node's context.state
TIMING = "timing."  # info keys of a reply that time the ClientApp (stripped by GridLink)

SETTINGS = {  # run-config key -> default
    "config": "ovfl-imnist", "set": "", "out": "", "audit": False, "data-root": "",
    "poll-seconds": 0.005, "reply-timeout": 600.0, "node-timeout": 120.0,
}


# -- envelopes <-> records ---------------------------------------------------------------------
def to_record(env: Envelope) -> RecordDict:
    records = {"fedstream": ConfigRecord({"kind": env.kind, "round": int(env.round), "payload": bytes(env.payload)})}
    if env.info:
        records["info"] = ConfigRecord(dict(env.info))
    if env.arrays:
        records["arrays"] = ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in env.arrays.items()})
    return RecordDict(records)


def from_record(content: RecordDict, where: str) -> Envelope:
    """Parse and check a received RecordDict (``where`` names the sender for error messages)."""
    head = content.get("fedstream") if content is not None else None
    if not isinstance(head, ConfigRecord):
        raise ProtocolError(f"{where}: expected a RecordDict with a 'fedstream' ConfigRecord, "
                            f"received {type(head).__name__ if head is not None else 'none'}")
    kind, rnd, payload = head.get("kind"), head.get("round"), head.get("payload")
    if kind not in KINDS:
        raise ProtocolError(f"{where}: expected kind in {KINDS}, received {kind!r}")
    if isinstance(rnd, bool) or not isinstance(rnd, int) or rnd < 0:
        raise ProtocolError(f"{where}: expected a round >= 0, received {rnd!r}")
    if not isinstance(payload, bytes):
        raise ProtocolError(f"{where}: expected bytes in 'payload', received {type(payload).__name__}")
    if len(payload) > MAX_PAYLOAD:
        raise ProtocolError(f"{where}: payload of {len(payload)} bytes exceeds the {MAX_PAYLOAD}-byte limit")
    info = dict(content["info"]) if isinstance(content.get("info"), ConfigRecord) else {}
    arrays = ({k: np.array(v.numpy()) for k, v in content["arrays"].items()}
              if isinstance(content.get("arrays"), ArrayRecord) else {})
    return Envelope(kind, rnd, payload, info, arrays)


# -- server side -------------------------------------------------------------------------------
class GridLink:
    """A :class:`~fedstream.deploy.link.Link` over a Flower ``Grid``: client index -> node ID."""

    def __init__(self, grid: Grid, nodes: list[int], *, poll: float = 0.005, timeout: float = 600.0):
        self.grid, self.nodes, self.poll, self.timeout = grid, nodes, poll, timeout
        self.n_clients = len(nodes)
        self.messages = 0
        # per reply: seconds from push to the ClientApp process being ready, to its handler starting,
        # in the handler, and from the handler's end to the reply being pulled here
        self.timings: list[tuple[float, float, float, float]] = []
        self._pulled_at: dict[int, float] = {}

    @classmethod
    def connect(cls, grid: Grid, n_clients: int, *, poll: float = 0.005, timeout: float = 600.0,
                node_timeout: float = 120.0) -> "GridLink":
        """Wait for ``n_clients`` nodes, ask each its client index and map indices to nodes."""
        deadline = time.monotonic() + node_timeout
        while len(nodes := sorted(grid.get_node_ids())) < n_clients:
            if time.monotonic() > deadline:
                raise ProtocolError(f"{len(nodes)} SuperNodes connected within {node_timeout} s, vfl.clients = "
                                    f"{n_clients} needed (start one per client with --node-config \"client-index=M\")")
            time.sleep(0.2)
        link = cls(grid, nodes, poll=poll, timeout=timeout)
        replies = link._send({node: (HELLO, RecordDict()) for node in nodes})
        index_of = {}
        for node, msg in replies.items():
            index = msg.content["fedstream"].get("client") if "fedstream" in msg.content else None
            if not isinstance(index, int) or isinstance(index, bool):
                raise ProtocolError(f"SuperNode {node} did not report a client index; got {index!r}")
            index_of[node] = index
        wanted = list(range(n_clients))
        if sorted(index_of.values()) != wanted:
            raise ProtocolError(f"the SuperNodes report client indices {sorted(index_of.values())}, expected {wanted} "
                                f"(one SuperNode per client, --node-config \"client-index=M\")")
        link.nodes = [node for node, _ in sorted(index_of.items(), key=lambda kv: kv[1])]
        return link

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope]:
        sent = {self.nodes[m]: (f"train.{env.kind}", to_record(env)) for m, env in requests.items()}
        pushed = time.time()
        replies = self._send(sent, group=str(next(iter(requests.values())).round))
        client_of = {node: m for m, node in enumerate(self.nodes)}
        out = {}
        for node, msg in replies.items():
            env = from_record(msg.content, f"client {client_of[node]} (node {node})")
            ready, start, end = (env.info.pop(TIMING + k, None) for k in ("ready", "start", "end"))
            if None not in (ready, start, end):
                self.timings.append((max(ready, pushed) - pushed, start - max(ready, pushed), end - start,
                                     self._pulled_at[node] - end))
            out[client_of[node]] = env
        return out

    def _send(self, requests: dict[int, tuple[str, RecordDict]], group: str = "") -> dict[int, Message]:
        """Push one message per node, poll until every node replied; node ID -> reply."""
        msgs = [Message(content, dst_node_id=node, message_type=mtype, group_id=group)
                for node, (mtype, content) in requests.items()]
        ids = list(self.grid.push_messages(msgs))
        if len(ids) != len(msgs):
            raise ProtocolError(f"the SuperLink accepted {len(ids)} of {len(msgs)} messages")
        self.messages += len(msgs)
        node_of = dict(zip(ids, requests))
        waiting, replies = set(ids), {}
        deadline = time.monotonic() + self.timeout
        while waiting:
            for reply in self.grid.pull_messages(list(waiting)):
                mid = reply.metadata.reply_to_message_id
                if mid not in waiting:
                    continue
                waiting.discard(mid)
                node = node_of[mid]
                if reply.has_error():
                    raise ProtocolError(f"SuperNode {node}: the ClientApp failed: {reply.error.reason}")
                if reply.metadata.src_node_id != node:
                    raise ProtocolError(f"reply to node {node} came from node {reply.metadata.src_node_id}")
                replies[node] = reply
                self._pulled_at[node] = time.time()
            if waiting:
                if time.monotonic() > deadline:
                    late = sorted(node_of[i] for i in waiting)
                    raise ProtocolError(f"no reply within {self.timeout} s from SuperNode(s) {late}")
                time.sleep(self.poll)
        return replies


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


def timing_summary(link: GridLink) -> dict:
    """Mean seconds per reply in each stretch of a Flower round trip (see GridLink.timings)."""
    names = ("push_to_process_ready", "ready_to_handler", "handler", "handler_end_to_pulled")
    t = np.array(link.timings) if link.timings else np.zeros((0, 4))
    return {"flower_messages": link.messages, "replies_timed": len(t)} | {
        f"mean_{n}_seconds": float(t[:, i].mean()) if len(t) else float("nan") for i, n in enumerate(names)}


def write_outputs(out: Path, net: NetworkVFL, link: GridLink, *, audit: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    summary = net.summary() | {"server_digest": model_digest(net.server.model.parameters()), "flwr_version": FLWR_VERSION,
                               "flower": timing_summary(link)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    if audit:
        arrays = {f"server.{i}": p for i, p in enumerate(net.server.model.parameters())}
        for r in net.reports:
            arrays |= {f"client{r['client']}.{i}": p for i, p in enumerate(r["params"])}
        np.savez(out / "models.npz", **arrays)
        (out / "message_sizes.json").write_text(json.dumps(net.transport.sizes))


def make_server_app(**defaults) -> ServerApp:
    """The server party as a Flower ServerApp; ``defaults`` are settings (see the module doc)."""
    resolve_settings({}, defaults)  # fail early on a misspelt setting
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        settings = resolve_settings(dict(context.run_config), defaults)
        config = resolve_config(settings)
        check_deployable(config)
        stream = party_stream(config, settings["data-root"] or None)
        link = GridLink.connect(grid, config["vfl.clients"], poll=float(settings["poll-seconds"]),
                                timeout=float(settings["reply-timeout"]), node_timeout=float(settings["node-timeout"]))
        net = NetworkVFL(config, link, stream=stream, record_sizes=bool(settings["audit"]))
        print(f"fedstream: {config['rounds']} rounds with {config['vfl.clients']} client nodes", flush=True)
        net.run()
        net.finish(models=bool(settings["audit"]))
        s = net.summary()
        print(f"fedstream: done, accumulated error {s['accumulated_error']:.4f}, {s['bytes']['total']} payload "
              f"bytes, {s['rounds_per_second']:.2f} rounds/s, {link.messages} Flower messages; "
              f"{json.dumps(timing_summary(link))}", flush=True)
        if settings["out"]:
            write_outputs(Path(settings["out"]), net, link, audit=bool(settings["audit"]))

    return app


# -- client side -------------------------------------------------------------------------------
def client_index(node_config: dict) -> int:
    for key in ("client-index", "partition-id"):
        if key in node_config:
            value = node_config[key]
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"--node-config {key}={value!r}: expected an integer client index")
            return value
    raise ConfigError("this SuperNode has no client index: start it with --node-config \"client-index=M\"")


def _handle(msg: Message, context: Context) -> Message:
    start = time.time()
    index = client_index(context.node_config)
    env = from_record(msg.content, f"message to client {index}")
    if env.kind == SETUP:
        text = env.info.get("config")
        if not isinstance(text, str):
            raise ProtocolError(f"client {index}: setup carries no config")
        config, state = json.loads(text), None
        check_deployable(config)
        context.state[CONFIG] = ConfigRecord({"json": text})
    else:
        if CONFIG not in context.state or STATE not in context.state:
            raise ProtocolError(f"client {index}: {env.kind!r} request before setup")
        config = json.loads(context.state[CONFIG]["json"])
        state = {k: np.array(v.numpy()) for k, v in context.state[STATE].items()}
    stream = party_stream(config, str(context.node_config.get("data-root", "")) or None)
    host = ClientHost(config, index, stream=stream, state=state)
    reply = host.handle(env)
    context.state[STATE] = ArrayRecord({k: Array(v) for k, v in host.state_dict().items()})
    reply.info |= {TIMING + "ready": READY_AT, TIMING + "start": start, TIMING + "end": time.time()}
    return Message(to_record(reply), reply_to=msg)


def _hello(msg: Message, context: Context) -> Message:
    return Message(RecordDict({"fedstream": ConfigRecord({"client": client_index(context.node_config)})}), reply_to=msg)


def make_client_app() -> ClientApp:
    """A client party as a Flower ClientApp (one per SuperNode)."""
    app = ClientApp()
    app.query("hello")(_hello)
    for kind in KINDS:
        app.train(kind)(_handle)
    return app


__all__ = ["FLWR_VERSION", "GridLink", "from_record", "make_client_app", "make_server_app", "to_record"]
