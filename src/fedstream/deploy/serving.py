"""Serving: the deployed parties of a finished run predict together, each from its own saved model.

After ``fedstream deploy local`` or ``fedstream serve``, each party's model stays where it trained:

* the server party's top model is in its ``--out`` folder, the run's checkpoint (the task's
  ``checkpoint_name``: ``checkpoint.npz`` for online VFL, ``checkpoint.pt`` for batch VFL), next to
  ``summary.json`` (the run's config, and the digest of each client's model as its finish reply
  gave it);
* client m's bottom model is in its own folder (its ``--cache-dir``; ``deploy local``:
  ``OUT/deployment/cache``): ``ckpt-RUN-m.npz``, the node's state after its finish reply.

To predict, the server sets each node up as for training (``Setup``: the run's config and token);
the node loads its saved state of that run (:class:`ServingHost`), answers with the digest of the
model it loaded (:class:`~fedstream.deploy.serving_records.PredictSetupReply`), and the server
refuses a node whose digest is not the one the run recorded. Then, for each request
(:meth:`ServedRun.predict`): the server sends every node the ids (``PredictRequest``); node m looks
them up in its own file (:func:`fedstream.predict.ids.id_positions`), encodes those rows exactly as
its training encoded them and sends one embedding up (``PredictReply`` says which ids it holds); the
server stacks the embeddings and scores them with its top model. Nothing is learnt: a served model is
frozen (docs/deploy.md, "Serving").

The training's encoding is that of the client's file *placed* by the alignment the node saved in its
folder when it trained (:class:`~fedstream.deploy.psi.PsiNode`): one-hot categories, mean and std
of the training rows it held, in the server's order
(:meth:`~fedstream.data.table_party.ClientTable.own_rows`), not of its file's own first rows.

An id a client does not hold: online VFL pads it (the client embeds its columns at their training
means, as the simulator's training rows of an id it lacks); batch VFL trained only on the ids every
party holds and refuses it (one line naming the client and the id).

Each task's part (:data:`PARTS`: how a node embeds, how the server loads and scores) is looked up by
the run's task, as :mod:`fedstream.deploy.adapters` looks up the adapter.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedstream.deploy.adapters import adapter_for
from fedstream.deploy.host import model_digest
from fedstream.deploy.psi import PsiNode
from fedstream.deploy.records import ROUND, SETUP, Envelope, Failure, Setup
from fedstream.deploy.serving_records import MAX_REQUEST, PredictReply, PredictRequest, PredictSetupReply
from fedstream.deploy.session import NodeStore
from fedstream.errors import ConfigError, DataError, FedstreamError, ProtocolError
from fedstream.predict.files import Predictions, class_names, run_summary
from fedstream.predict.ids import check_ids, id_keys, id_positions, own_table, party_file
from fedstream.tasks import get_task
from fedstream.transport import codec
from fedstream.transport.messages import Embedding

# -- each task's part ------------------------------------------------------------------------------


class OvflParts:
    """Online VFL: the node's :class:`~fedstream.ovfl.client.Client` embeds (numpy model), the
    server's top model scores (:mod:`fedstream.ovfl.inference`). An absent id is padded."""

    refuses_absent = False

    @staticmethod
    def client(config: dict, index: int, host, placement: np.ndarray) -> tuple[object, object, str]:
        """(encode(own file, positions in it) -> its rows as training encoded them, embed(X) ->
        float32, its model's digest). ``host.rows`` holds the client's file placed as the training
        played it (``placement``), so its statistics are the training's."""
        from fedstream.ovfl.inference import client_embedding

        client = host.client
        return (host.rows.table.own_rows, lambda X: client_embedding(client, 0, X).values,
                model_digest(client.model.parameters()))

    @staticmethod
    def server(config: dict, run_dir: Path, n_classes: int):
        """score(embeddings in client order) -> probabilities, from the server's checkpoint."""
        from fedstream.ovfl.inference import server_probabilities
        from fedstream.ovfl.parties import build_server
        from fedstream.runs.checkpoint import load_checkpoint
        from fedstream.runs.state import restore

        state, _ = load_checkpoint(Path(run_dir) / get_task("ovfl").checkpoint_name)
        server = build_server(config, config["vfl.clients"], n_classes)
        restore({"server": server}, state)
        digest = model_digest(server.model.parameters())
        return (lambda embeddings: server_probabilities(
            server, [Embedding(0, m, e) for m, e in enumerate(embeddings)])), digest


class VflParts:
    """Batch VFL: the node's :class:`~fedstream.vfl.parties.BatchClient` embeds in inference mode,
    the server's top model scores (softmax as :func:`fedstream.vfl.estimator.parties_proba`). Every
    party must hold every id."""

    refuses_absent = True

    @staticmethod
    def client(config: dict, index: int, host, placement: np.ndarray) -> tuple[object, object, str]:
        import torch

        from fedstream.data.table_party import ClientTable
        from fedstream.runs.threads import one_torch_thread
        from fedstream.vfl.deploy.data import batch_settings
        from fedstream.vfl.deploy.table import table_spec

        holdout = dict(batch_settings(config).table)["data.test_fraction"]
        # placed as the training placed it (load_table_block): the training rows' statistics
        own = ClientTable(table_spec(config), index, holdout=holdout, placement=placement)
        client = host.client

        def embed(X: np.ndarray) -> np.ndarray:
            with one_torch_thread():
                return client.infer(0, torch.from_numpy(np.array(X, dtype=np.float32))).values

        state = client.model.state_dict()
        return own.own_rows, embed, model_digest({k: v.detach().numpy() for k, v in state.items()})

    @staticmethod
    def server(config: dict, run_dir: Path, n_classes: int):
        import torch

        from fedstream.vfl import checkpoint
        from fedstream.vfl.deploy.data import batch_settings
        from fedstream.vfl.deploy.driver import KIND
        from fedstream.vfl.deploy.table import table_layout
        from fedstream.vfl.trainer import build_parties

        s = batch_settings(config)
        path = Path(run_dir) / get_task("vfl").checkpoint_name
        payload = checkpoint.read(path, config=s.to_config() | {"seed": config["seed"]}, kind=KIND)
        server = build_parties(s, table_layout(s.clients, n_classes, {}), config["seed"])[1]
        server.model.load_state_dict(payload["server"])
        digest = model_digest({k: v.detach().numpy() for k, v in server.model.state_dict().items()})

        def score(embeddings: list[np.ndarray]) -> np.ndarray:
            rows = len(embeddings[0])
            logits = server.logits(0, [Embedding(0, m, e) for m, e in enumerate(embeddings)], rows)
            return torch.softmax(logits, dim=1).double().numpy()

        return score, digest


PARTS = {"ovfl": OvflParts, "vfl": VflParts}


def parts_for(config: dict, where: str):
    """The serving part of the run's task; ConfigError in one line for a task that has none."""
    parts = PARTS.get(config.get("task"))
    if parts is None:
        raise ConfigError(f"{where}: task = {config.get('task')!r}: serving is for online VFL (ovfl) "
                          "and batch VFL (vfl); a CHFL client predicts alone: fedstream predict RUN_DIR "
                          "--client K")
    party_file(config, 0)  # a table with one file per party (the parties' rows are found by id)
    compression = [k for k in ("compression.up", "compression.down") if config.get(k, "none") != "none"]
    if compression:
        key = compression[0]
        raise ConfigError(f"{where}: {key} = {config[key]!r}: serving sends plain float32 embeddings; a "
                          "compressed run predicts in the simulator (fedstream predict)")
    return parts


# -- a client node ---------------------------------------------------------------------------------


class ServingHost:
    """Client ``index``'s party when serving: its model loaded from ``folder`` (where it trained),
    its own file read by id. Answers ``setup`` (loads the saved state of the run the server names)
    and ``round`` requests carrying a :class:`PredictRequest`; refuses anything else."""

    def __init__(self, index: int, folder: Path):
        self.index, self.folder = index, Path(folder)
        self.encode = None  # (own file, positions in it) -> its rows, encoded as the training encoded them
        self.embed = None
        self.keys: np.ndarray | None = None  # own file's ids, as keys
        self.table = None
        self.config: dict | None = None
        self.requests = 0

    def handle(self, env: Envelope) -> Envelope:
        where = f"client {self.index}"
        if env.kind == SETUP:
            return self._setup(env, where)
        if env.kind != ROUND or self.embed is None:
            raise ProtocolError(f"{where}: serving answers a setup, then predict requests; received "
                                f"a {env.kind} request{'' if self.embed else ' before the setup'}")
        request = PredictRequest.read(env.info, where)
        ids = id_keys(request.ids)
        positions = id_positions(self.table, self.config["data.id"], ids)
        held = positions >= 0
        values = np.asarray(self.embed(self.encode(self.table, positions)), dtype=np.float32)
        self.requests += 1
        data = codec.encode(Embedding(env.round, self.index, values))
        return Envelope(ROUND, env.round, [data], info=PredictReply(held=held.astype(int).tolist()).info())

    def _setup(self, env: Envelope, where: str) -> Envelope:
        setup = Setup.read(env.info, where)
        try:
            config = json.loads(setup.config)
        except ValueError as exc:
            raise ProtocolError(f"{where}: setup 'config' is not JSON ({exc})") from None
        parts = parts_for(config, where)
        store = NodeStore(self.folder, setup.run, self.index)
        state = store.load(resume=None)
        if state is None:
            raise ProtocolError(f"{where}: no saved model of run {setup.run} in {self.folder} (expected "
                                f"{store.latest.name}: the node's --cache-dir when it trained)")
        adapter = adapter_for(config["task"])
        data = adapter.node_data(config, self.index, data_root=None, cache_dir=self.folder)
        psi = PsiNode(self.index, self.folder)  # the alignment it trained with, saved in its folder
        try:
            data = psi.place(data, config)
        except ProtocolError:
            raise ProtocolError(f"{where}: no saved alignment of the run's files in {self.folder} (the "
                                "node writes it there when the server aligns the ids before training)"
                                ) from None
        host = adapter.host(config, self.index, data=data, state=state)
        self.encode, self.embed, digest = parts.client(config, self.index, host, psi.placement)
        self.table, self.config = own_table(config, self.index), config
        width = int(np.asarray(self.embed(self.encode(self.table, np.full(1, -1)))).shape[1])
        reply = PredictSetupReply(client=self.index, digest=digest, width=width, saved=str(store.latest))
        return Envelope(SETUP, env.round, info=reply.info())


# -- the server party ------------------------------------------------------------------------------


@dataclass
class Served:
    """One request's answer: the predictions and, per id, the clients that did not hold it."""

    predictions: Predictions
    absent: list[list[int]]


class ServedRun:
    """The server party of the finished run in ``run_dir`` (its ``summary.json`` and checkpoint),
    serving over ``link`` (a :class:`~fedstream.deploy.records.Link` to client nodes 0..M-1).
    :meth:`set_up` the nodes, then :meth:`predict`; requests are answered one at a time."""

    def __init__(self, run_dir: Path, link):
        self.run_dir = Path(run_dir)
        summary = run_summary(self.run_dir)
        self.config = config = summary["config"]
        if isinstance(config, str):
            config = self.config = json.loads(config)
        self.parts = parts_for(config, str(self.run_dir))
        self.n_clients = adapter_for(config["task"]).n_nodes(config)
        self.digests = {int(c["client"]): c.get("digest") for c in summary.get("clients") or []
                        if isinstance(c, dict) and "client" in c}
        if not self.digests:
            raise ConfigError(f"{self.run_dir}/summary.json: no client digests: not the server's folder of a "
                              "deployed run (fedstream deploy local / fedstream serve server --out)")
        n_classes = len(summary["classes"]) if isinstance(summary.get("classes"), list) else None
        if n_classes is None:
            raise ConfigError(f"{self.run_dir}/summary.json: no 'classes': not a table run")
        self.score, digest = self.parts.server(config, self.run_dir, n_classes)
        if summary.get("server_digest") not in (None, digest):
            raise ConfigError(f"{self.run_dir}: the server's checkpoint is not the model the run finished "
                              "with (its digest differs from summary.json's server_digest)")
        self.classes = class_names(summary, n_classes)
        self.run_token = self._token()
        self.link = link
        self.lock = threading.Lock()
        self.round = 0
        self.widths: dict[int, int] = {}

    def _token(self) -> str:
        """The run's token, as the server's checkpoint holds it (it names the nodes' saved states)."""
        path = self.run_dir / get_task(self.config["task"]).checkpoint_name
        if path.suffix == ".npz":
            from fedstream.runs.checkpoint import load_checkpoint

            return str(load_checkpoint(path)[1]["run"])
        from fedstream.runs.torch_checkpoint import load_torch

        payload = load_torch(path)
        return str(json.loads(payload["cohort"])["run"])

    def set_up(self, clients=None) -> None:
        """Set nodes ``clients`` (default all) up: each loads its saved model; a node whose model is
        not the run's is refused (FedstreamError)."""
        clients = range(self.n_clients) if clients is None else clients
        info = Setup(config=json.dumps(self.config), run=self.run_token).info()
        replies = self.link.exchange({m: Envelope(SETUP, 0, info=info.copy()) for m in clients})
        for m, reply in sorted(replies.items()):
            if isinstance(reply, Failure):
                raise FedstreamError(f"client {m}: could not load its model: {reply.reason}")
            got = PredictSetupReply.read(reply.info, f"client {m}'s setup reply")
            if got.client != m:
                raise ProtocolError(f"client {m}'s setup reply says it is client {got.client}")
            want = self.digests.get(m)
            if want is not None and got.digest != want:
                raise FedstreamError(f"client {m}: its saved model ({got.saved}) is not the one the run "
                                     f"finished with (digest {got.digest[:12]}, the run's {want[:12]})")
            self.widths[m] = got.width

    def predict(self, ids) -> Served:
        """The predictions for ``ids`` (text keys), the nodes asked MAX_REQUEST ids at a time."""
        ids = id_keys(ids)
        check_ids(ids, "the request")
        with self.lock:
            rejoined = self.link.rejoined()
            if rejoined:
                self.set_up(sorted(rejoined))
            chunks = [self._chunk(ids[i:i + MAX_REQUEST]) for i in range(0, len(ids), MAX_REQUEST)]
        proba = np.concatenate([c[0] for c in chunks])
        absent = [a for c in chunks for a in c[1]]
        parties = {f"client {m}": f"embedded its own rows of the ids ({sum(m not in a for a in absent):,} "
                                  "held)" for m in range(self.n_clients)}
        parties["server"] = "stacked the embeddings, top model, softmax"
        return Served(Predictions(ids, self.classes, proba, parties), absent)

    def _chunk(self, ids: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
        self.round += 1
        info = PredictRequest(ids=[str(i) for i in ids]).info()
        replies = self.link.exchange({m: Envelope(ROUND, self.round, info=info.copy())
                                      for m in range(self.n_clients)})
        embeddings, held = [], []
        for m in range(self.n_clients):
            reply = replies.get(m)
            if not isinstance(reply, Envelope):
                raise FedstreamError(f"client {m} did not answer: {getattr(reply, 'reason', 'no reply')}")
            where = f"client {m}'s predict reply"
            h = PredictReply.read(reply.info, where, rows=len(ids)).held
            if len(reply.parts) != 1:
                raise ProtocolError(f"{where} carries {len(reply.parts)} parts, expected 1")
            msg = codec.decode(reply.parts[0])
            want = (len(ids), self.widths[m])
            if not isinstance(msg, Embedding) or msg.client != m or msg.values.shape != want:
                raise ProtocolError(f"client {m}'s predict reply is not an embedding of shape {want}")
            embeddings.append(msg.values)
            held.append(np.asarray(h, dtype=bool))
        held_all = np.stack(held, axis=1)
        if self.parts.refuses_absent and not held_all.all():
            r, m = (int(v) for v in np.argwhere(~held_all)[0])
            name = party_file(self.config, m).name
            raise DataError(f"id {str(ids[r])!r}: client {m} ({name}) does not hold it; a batch VFL model "
                            "predicts only ids that every party holds, as it trained on those")
        absent = [np.flatnonzero(~row).tolist() for row in held_all]
        return self.score(embeddings), absent


class InProcessLink:
    """Serving's nodes in this process (tests, and the bench's floor): each request and reply goes
    through the gRPC runtime's frames (:mod:`~fedstream.deploy.runtimes.grpc_wire`: protobuf encoded
    and decoded, checked as on the wire) to :class:`ServingHost` ``hosts[m]``; a node that raises
    gives a :class:`~fedstream.deploy.records.Failure`, as an error frame does."""

    def __init__(self, hosts: dict[int, ServingHost], *, limit: int = 64 * 2**20):
        from fedstream.deploy.runtimes import grpc_wire  # protobuf: with the deploy extra

        self.hosts, self.limit, self.wire = hosts, limit, grpc_wire
        self.seq = 0

    def rejoined(self) -> set[int]:
        return set()

    def exchange(self, requests: dict[int, Envelope]) -> dict[int, Envelope | Failure]:
        w, out = self.wire, {}
        for m, env in requests.items():
            self.seq += 1
            request = w.decode(w.encode(w.REQUEST, self.seq, env, limit=self.limit), limit=self.limit,
                               sender=w.SERVER).env
            try:
                reply = self.hosts[m].handle(request)
            except (FedstreamError, ValueError) as exc:
                out[m] = Failure(f"the client failed: {exc}")
                continue
            out[m] = w.decode(w.encode(w.REPLY, self.seq, reply, limit=self.limit), limit=self.limit,
                              sender=w.NODE).env
        return out


def serve_in_process(run_dir: Path, folder: Path) -> ServedRun:
    """The finished deployed run of ``run_dir`` served in this process, its client nodes' saved
    models in ``folder`` (:class:`InProcessLink`), set up."""
    served = ServedRun(run_dir, None)
    served.link = InProcessLink({m: ServingHost(m, folder) for m in range(served.n_clients)})
    served.set_up()
    return served
