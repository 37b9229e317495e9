"""``fedstream serve server|client``: one party of a gRPC deployment, one command per machine.

    fedstream serve server [CONFIG] --listen HOST:PORT --out DIR [--tls-dir DIR] [--set ...] [--resume]
    fedstream serve client [CONFIG] --index M --connect HOST:PORT [--tls-dir DIR] [--set ...]
    fedstream serve server RUN_DIR --predict --listen HOST:PORT [--tls-dir DIR]
    fedstream serve client FOLDER --predict --index M --connect HOST:PORT [--tls-dir DIR]
    fedstream serve request HOST:PORT --ids FILE --out preds.csv [--tls-dir DIR]

The server party (labels, top model) listens; client party M connects, reads only its own block
of the data and answers the server's requests until the run is over
(:mod:`fedstream.deploy.runtimes.grpc_local`). With ``--tls-dir`` (``fedstream deploy credentials``)
both ends use mutual TLS: the server needs ``ca.crt``, ``server.pem``, ``server.key``, client M
``ca.crt``, ``client-M.pem``, ``client-M.key``. With ``--predict`` the parties of a finished run serve
predictions from their saved models (:mod:`fedstream.deploy.serving_grpc`). gRPC is imported only
when a party starts.
"""

from __future__ import annotations

from pathlib import Path

from fedstream.config import load_config


def add_parsers(sub) -> None:
    serve = sub.add_parser("serve", help="run one party of a gRPC deployment (server or client M)")
    actions = serve.add_subparsers(dest="action", required=True)
    server = actions.add_parser("server", help="the server party: listen, run, write summary.json")
    server.add_argument("--listen", required=True, metavar="HOST:PORT", help="address to listen on")
    server.add_argument("--out", type=Path, help="folder for summary.json and the server's checkpoint")
    server.add_argument("--audit", action="store_true", help="also write every party's model")
    server.add_argument("--resume", action="store_true",
                        help="continue from the checkpoint in --out (without --resume, an --out that holds "
                             "a checkpoint or a finished run is refused)")
    server.add_argument("--reply-timeout", type=float, default=120.0,
                        help="seconds before a node that has not answered is down for that request")
    server.add_argument("--setup-timeout", type=float, default=600.0,
                        help="seconds a node has to answer a setup request (it loads its data); never "
                             "less than --reply-timeout")
    server.add_argument("--node-timeout", type=float, default=120.0,
                        help="seconds to wait for every client node at the start")
    client = actions.add_parser("client", help="client party M: connect and answer until the run ends")
    client.add_argument("--index", type=int, required=True, help="the client index M (its feature block)")
    client.add_argument("--connect", required=True, metavar="HOST:PORT", help="the server's address")
    client.add_argument("--cache-dir", type=Path, help="the node's data cache and checkpoints")
    client.add_argument("--retry-for", type=float, default=300.0,
                        help="seconds to keep reconnecting after the server was last heard")
    client.add_argument("--server-name", help="the name in the server's certificate, when --connect "
                                               "uses another one")
    request = actions.add_parser("request", help="ask a serving server party (serve server --predict) for "
                                 "predictions of ids")
    request.add_argument("target", metavar="HOST:PORT", help="the serving server's address")
    request.add_argument("--ids", type=Path, required=True, help="a file (CSV, ...) with the ids to predict")
    request.add_argument("--id-column", default="id", help="the ids' column in --ids (default: id)")
    request.add_argument("--out", type=Path, required=True, help="CSV to write: id, prediction, p_<class>")
    request.add_argument("--tls-dir", type=Path,
                         help="mutual TLS as 'fedstream requester': ca.crt, requester.pem, requester.key")
    request.add_argument("--server-name", help="the name in the server's certificate, when HOST is another")
    for p in (server, client):
        p.add_argument("config", nargs="?", default="ovfl-imnist",
                       help="preset name or config file; with --predict: the server's --out folder of a "
                            "finished run (server), the node's --cache-dir where it trained (client)")
        p.add_argument("--predict", action="store_true",
                       help="serve predictions of a finished deployed run from each party's saved model "
                            "(docs/deploy.md, \"Serving\")")
        p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key (repeatable)")
        p.add_argument("--tls-dir", type=Path, help="mutual TLS with the credentials in this folder")
        p.add_argument("--data-root", help="this party's data folder (default: the config's)")


def cmd_serve(args) -> int:
    # gRPC (grpcio) is an optional dependency (the deploy extra): imported when a party starts
    from fedstream.deploy.runtimes.grpc_local import serve_client, serve_server

    if args.action == "request" or args.predict:
        return _serve_predictions(args)
    config = load_config(args.config, args.sets)
    if args.action == "server":
        serve_server(config, listen=args.listen, out=args.out, tls_dir=args.tls_dir, audit=args.audit,
                     resume=args.resume, data_root=args.data_root, reply_timeout=args.reply_timeout,
                     node_timeout=args.node_timeout, setup_timeout=args.setup_timeout)
    else:
        serve_client(config, args.index, args.connect, tls_dir=args.tls_dir, data_root=args.data_root,
                     cache_dir=args.cache_dir, retry_for=args.retry_for, server_name=args.server_name)
    return 0


def _serve_predictions(args) -> int:
    from fedstream.deploy.serving_grpc import request_file, serve_predict_client, serve_predict_server

    if args.action == "request":
        path = request_file(args.target, args.ids, args.id_column, args.out, tls_dir=args.tls_dir,
                            server_name=args.server_name)
        print(f"wrote {path}")
    elif args.action == "server":
        serve_predict_server(Path(args.config), args.listen, tls_dir=args.tls_dir,
                             reply_timeout=args.reply_timeout, node_timeout=args.node_timeout)
    else:
        serve_predict_client(args.cache_dir or Path(args.config), args.index, args.connect,
                             tls_dir=args.tls_dir, retry_for=args.retry_for, server_name=args.server_name)
    return 0


COMMANDS = {"serve": cmd_serve}
