"""Serving on the gRPC runtime: the same processes and mutual TLS identities as training.

* :func:`serve_predict_server` (``fedstream serve server RUN_DIR --predict --listen HOST:PORT``):
  the server party of a finished deployed run. It listens on one port for both its client nodes
  (``Node.Session``, as in training) and applications (``Predictor.Predict``, a unary method:
  ``PredictQuery`` in, ``PredictAnswer`` out; ``protocol.proto``), sets every node up from its saved
  model and answers requests until it is stopped. A node that reconnects is set up again.
* :func:`serve_predict_client` (``fedstream serve client FOLDER --predict --index M --connect
  HOST:PORT``): client node M serving from its saved model in FOLDER (its ``--cache-dir`` when it
  trained): a :class:`~fedstream.deploy.runtimes.grpc_node.GrpcNode` whose party is a
  :class:`~fedstream.deploy.serving.ServingHost`.
* :func:`deploy_predict` (``fedstream deploy predict RUN_DIR --ids FILE --out preds.csv``): one
  prediction on this machine's loopback, the client nodes started as processes from their saved
  models (deploy local's launcher and, when the run had ``--secure``, its credentials).
* :func:`request_predictions`, :class:`PredictClient`: an application's call of ``Predict``;
  :func:`request_file` (``fedstream serve request HOST:PORT --ids FILE --out preds.csv``) from the
  command line.

Under mutual TLS (``--tls-dir``) the server's port requires a certificate of the deployment's CA: a
node's (``fedstream client M``, for ``Node.Session``) or the requester's (``fedstream requester``,
for ``Predict``; ``fedstream deploy credentials DIR --requester`` issues ``requester.pem`` /
``requester.key`` with the deployment's ``ca.key``). A node's certificate cannot ask for predictions.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from pathlib import Path

import numpy as np

from fedstream.deploy import protocol_pb2 as pb
from fedstream.deploy.credentials import REQUESTER_CN
from fedstream.deploy.runtimes.grpc import GrpcLink, channel_options
from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment
from fedstream.deploy.runtimes.grpc_node import GrpcNode
from fedstream.deploy.runtimes.grpc_tls import read_tls_file
from fedstream.deploy.serving import ServedRun, ServingHost
from fedstream.errors import ConfigError, DataError, FedstreamError
from fedstream.predict.files import Predictions
from fedstream.predict.ids import read_ids

try:
    import grpc
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("serving needs grpcio: pip install 'fedstream[deploy]'") from exc

SERVICE, METHOD = "fedstream.deploy.Predictor", "Predict"
PATH = f"/{SERVICE}/{METHOD}"
LIMIT = 64 * 2**20  # frames of serving: 4096 embeddings of a few hundred floats, at most
MAX_QUERY = 4096  # ids per Predict call


class Predictor:
    """The ``Predict`` method over a :class:`ServedRun` (set up once its nodes are connected)."""

    def __init__(self, tls: bool):
        self.served: ServedRun | None = None
        self.tls = tls
        self.requests = 0

    def handler(self):
        method = grpc.unary_unary_rpc_method_handler(
            self._predict, request_deserializer=pb.PredictQuery.FromString,
            response_serializer=pb.PredictAnswer.SerializeToString)
        return grpc.method_handlers_generic_handler(SERVICE, {METHOD: method})

    async def _predict(self, query, context):
        if self.tls:
            names = context.auth_context().get("x509_common_name", [])
            if [n.decode(errors="replace") for n in names] != [REQUESTER_CN]:
                await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                    f"Predict takes requests from the certificate '{REQUESTER_CN}' only")
        if self.served is None:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the client nodes are not all set up yet")
        if not 1 <= len(query.ids) <= MAX_QUERY:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"a query takes 1 to {MAX_QUERY} ids, received {len(query.ids)}")
        try:  # the exchange with the nodes blocks: off the event loop
            loop = asyncio.get_running_loop()
            served = await loop.run_in_executor(None, self.served.predict, list(query.ids))
        except (DataError, ConfigError) as exc:  # the query's ids (batch VFL: one a client lacks)
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc)[:500])
        except FedstreamError as exc:  # a node down or misbehaving: try again later
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc)[:500])
        self.requests += 1
        p = served.predictions
        return pb.PredictAnswer(ids=[str(i) for i in p.ids], classes=[str(c) for c in p.classes],
                                labels=[str(x) for x in p.labels], proba=p.proba.ravel().tolist(),
                                absent=[",".join(map(str, a)) for a in served.absent])


def start_server(run_dir: Path, listen: str, *, tls_dir: Path | None = None, reply_timeout: float = 60.0,
                 node_timeout: float = 120.0, on_listen=None) -> tuple[GrpcLink, Predictor]:
    """Listen on ``listen``, wait for every node, set them up: the link and the Predictor."""
    predictor = Predictor(tls_dir is not None)
    probe = ServedRun(run_dir, None)  # the run's files checked before anything listens
    link = GrpcLink(listen, probe.n_clients, limit=LIMIT, tls_dir=tls_dir, timeout=reply_timeout,
                    services=(predictor.handler(),)).start()
    try:
        host = listen.rsplit(":", 1)[0]
        print(f"fedstream: serving predictions of {run_dir} on {host}:{link.port} "
              f"({'mutual TLS' if tls_dir else 'plaintext'}), waiting for {probe.n_clients} client nodes",
              flush=True)
        if on_listen is not None:
            on_listen(link)
        link.wait_for(probe.n_clients, node_timeout)
        probe.link = link
        probe.set_up()
    except BaseException:
        link.close()
        raise
    predictor.served = probe
    return link, predictor


def serve_predict_server(run_dir: Path, listen: str, *, tls_dir: Path | None = None,
                         reply_timeout: float = 60.0, node_timeout: float = 120.0) -> int:
    """Serve until SIGINT or SIGTERM; the number of requests answered."""
    link, predictor = start_server(run_dir, listen, tls_dir=tls_dir, reply_timeout=reply_timeout,
                                   node_timeout=node_timeout)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"fedstream: ready ({PATH}); stop with Ctrl-C", flush=True)
    try:
        stop.wait()
    finally:
        link.close()
    print(f"fedstream: stopped, {predictor.requests} requests answered", flush=True)
    return predictor.requests


class ServingNode(GrpcNode):
    """Client node ``index`` serving from its saved model in ``folder``."""

    def __init__(self, index: int, target: str, folder: Path, *, tls_dir: Path | None = None,
                 retry_for: float = 300.0, server_name: str | None = None):
        super().__init__(index, target, limit=LIMIT, tls_dir=tls_dir, cache_dir=folder, retry_for=retry_for,
                         server_name=server_name)
        self.node = ServingHost(index, folder)


def serve_predict_client(folder: Path, index: int, connect: str, *, tls_dir: Path | None = None,
                         retry_for: float = 300.0, server_name: str | None = None) -> ServingNode:
    node = ServingNode(index, connect, folder, tls_dir=tls_dir, retry_for=retry_for, server_name=server_name)
    print(f"fedstream: client {index} serving its model in {folder}, connecting to {connect}", flush=True)
    node.run()
    print(f"fedstream: client {index} done, {node.node.requests} predict requests answered", flush=True)
    return node


class ServingNodes(GrpcLocalDeployment):
    """deploy local's launcher, each node started as ``fedstream serve client FOLDER --predict``."""

    def __init__(self, folder: Path, n_clients: int, workdir: Path, *, tls_dir: Path | None = None):
        super().__init__(str(Path(folder).resolve()), [], n_clients, workdir, tls_dir=tls_dir)

    log_name = "serve-client{m}.log"

    def node_args(self, m: int) -> list[str]:
        return [sys.executable, "-m", "fedstream", "serve", "client", self.config, "--predict",
                "--index", str(m)]


def local_serving(run_dir: Path):
    """The saved models of a ``deploy local`` run: (the nodes' folder, credentials or None)."""
    run_dir = Path(run_dir)
    folder = run_dir / "deployment" / "cache"
    if not folder.is_dir():
        raise FedstreamError(f"{folder} does not exist: {run_dir} is not the --out folder of "
                             "`fedstream deploy local` (the client nodes' saved models are there)")
    tls = run_dir / "credentials"
    return folder, (tls if (tls / "ca.crt").exists() else None)


def deploy_predict(run_dir: Path, ids_file: Path, *, reply_timeout: float = 120.0) -> Predictions:
    """One prediction by the deployed parties of ``run_dir`` on loopback (see the module doc)."""
    served = ServedRun(run_dir, None)  # the run's files checked before any process starts
    ids = read_ids(ids_file, served.config.get("data.id"))
    folder, tls = local_serving(run_dir)
    with ServingNodes(folder, served.n_clients, Path(run_dir) / "deployment", tls_dir=tls) as nodes:
        link, predictor = start_server(run_dir, "127.0.0.1:0", tls_dir=tls, reply_timeout=reply_timeout,
                                       on_listen=lambda link: nodes.start(f"127.0.0.1:{link.port}"))
        try:
            return predictor.served.predict(ids).predictions
        finally:
            link.close()


class PredictClient:
    """An application's connection to a serving server party (``target``: ``HOST:PORT``); with
    ``tls_dir``, mutual TLS as ``fedstream requester`` (``fedstream deploy credentials DIR --requester``)."""

    def __init__(self, target: str, *, tls_dir: Path | None = None, server_name: str | None = None):
        options = channel_options(LIMIT)
        if tls_dir is None:
            self.channel = grpc.insecure_channel(target, options=options)
        else:
            if server_name:
                options.append(("grpc.ssl_target_name_override", server_name))
            credentials = grpc.ssl_channel_credentials(read_tls_file(tls_dir, "ca.crt"),
                                                       read_tls_file(tls_dir, "requester.key"),
                                                       read_tls_file(tls_dir, "requester.pem"))
            self.channel = grpc.secure_channel(target, credentials, options=options)
        self.call = self.channel.unary_unary(PATH, request_serializer=pb.PredictQuery.SerializeToString,
                                             response_deserializer=pb.PredictAnswer.FromString)

    def predict(self, ids, timeout: float = 60.0) -> Predictions:
        try:
            answer = self.call(pb.PredictQuery(ids=[str(i) for i in ids]), timeout=timeout)
        except grpc.RpcError as exc:
            raise FedstreamError(f"Predict: {exc.code().name}: {exc.details()}") from None
        classes = list(answer.classes)
        proba = np.asarray(answer.proba, dtype=np.float64).reshape(len(answer.ids), len(classes))
        return Predictions(np.asarray(list(answer.ids)), classes, proba, {})

    def close(self) -> None:
        self.channel.close()


def request_file(target: str, ids_file: Path, id_column: str, out: Path, *, tls_dir: Path | None = None,
                 server_name: str | None = None) -> Path:
    """``fedstream serve request``: the ids of ``ids_file`` (column ``id_column``), MAX_QUERY per call,
    their predictions written to ``out`` (id, prediction, p_<class>)."""
    from fedstream.predict import write_predictions

    ids = read_ids(ids_file, id_column)
    client = PredictClient(target, tls_dir=tls_dir, server_name=server_name)
    try:
        parts = [client.predict(ids[i:i + MAX_QUERY]) for i in range(0, len(ids), MAX_QUERY)]
    finally:
        client.close()
    proba = np.concatenate([p.proba for p in parts])
    return write_predictions(Predictions(ids, parts[0].classes, proba, {}), out)


def request_predictions(target: str, ids, *, tls_dir: Path | None = None) -> Predictions:
    """One ``Predict`` call (see :class:`PredictClient`)."""
    client = PredictClient(target, tls_dir=tls_dir)
    try:
        return client.predict(ids)
    finally:
        client.close()
