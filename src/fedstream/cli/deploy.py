"""``fedstream deploy``: run the parties of a run in separate processes (docs/deploy.md).

``local`` runs a whole deployment on this machine's loopback (gRPC: the server here and one
``fedstream serve client`` process per client; Flower: a SuperLink, SuperNodes and ``flwr run``),
``app`` writes the folder to give ``flwr run``, ``credentials`` writes test credentials and
``predict`` has a finished run's parties predict together. Flower and gRPC are imported only when
a subcommand runs."""

from __future__ import annotations

import json
from pathlib import Path

from fedstream.config import load_config
from fedstream.config.loader import parse_override
from fedstream.data import resolve_data_root
from fedstream.deploy.adapters import adapter_for, check_deployable, default_runtime
from fedstream.deploy.local import LocalDeployment, write_app
from fedstream.deploy.serve import check_out, check_outcome
from fedstream.errors import ConfigError
from fedstream.tasks import get_task


def add_parsers(sub) -> None:
    """The ``deploy`` command group and its actions, on the CLI's subparsers ``sub``."""
    deploy = sub.add_parser("deploy", help="run the parties in separate processes (gRPC or Flower)")
    actions = deploy.add_subparsers(dest="action", required=True)
    app = actions.add_parser("app", help="write a Flower app folder for `flwr run`")
    app.add_argument("dir", type=Path, help="folder to write (pyproject.toml and fedstream_app.py)")
    local = actions.add_parser("local", help="the server and one process per client on 127.0.0.1, then run")
    local.add_argument("--runtime", choices=["grpc", "flower"], default=None,
                       help="gRPC (default for ovfl, vfl and chfl's stream mode) or Flower "
                            "(chfl's batch mode)")
    local.add_argument("--timeout", type=float, default=3600, help="seconds before a Flower run is stopped")
    local.add_argument("--reply-timeout", type=float, default=120.0,
                       help="gRPC: seconds before a node that has not answered is down for that request")
    local.add_argument("--setup-timeout", type=float, default=600.0,
                       help="gRPC: seconds a node has to answer a setup request (it loads its data); never "
                            "less than --reply-timeout")
    local.add_argument(
        "--secure", action="store_true", help="mutual TLS (gRPC); TLS and SuperNode authentication (Flower)"
    )
    predict = actions.add_parser("predict", help="the deployed parties of a finished `deploy local` run "
                                 "predict ids together, each from its saved model, on 127.0.0.1")
    predict.add_argument("run", type=Path, help="the --out folder of `fedstream deploy local`")
    predict.add_argument("--ids", type=Path, required=True,
                         help="a file (CSV, ...) with a column named as the run's data.id: the ids to "
                              "predict")
    predict.add_argument("--out", type=Path, required=True, help="CSV to write: id, prediction, p_<class>")
    creds = actions.add_parser("credentials", help="write test TLS certificates and SuperNode keys")
    creds.add_argument("dir", type=Path, help="folder to write ca.crt, server.pem/.key, node-M.key/.pub")
    creds.add_argument("--nodes", type=int, help="client parties (one certificate and key pair each); "
                       "required unless --requester")
    creds.add_argument("--requester", action="store_true",
                       help="write requester.pem/.key, the identity a serving server's Predict answers, "
                            "with the ca.key that DIR holds (with --nodes: after the new credentials)")
    creds.add_argument(
        "--host",
        action="append",
        default=[],
        help="name or IP the SuperNodes use to reach the "
        "SuperLink (repeatable; localhost and 127.0.0.1 are always in)",
    )
    creds.add_argument("--days", type=int, default=30, help="validity of the certificates")
    creds.add_argument("--force", action="store_true", help="replace the credentials DIR holds (a new CA)")
    for p in (app, local):
        p.add_argument(
            "config",
            nargs="?",
            default="ovfl-imnist",
            help="preset name or config file (default ovfl-imnist)",
        )
        p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                       help="override a config key (repeatable)")
        p.add_argument(
            "--audit", action="store_true", help="also write every party's model and each message's size"
        )
        p.add_argument("--resume", action="store_true",
                       help="continue from the server's checkpoint in --out (without --resume, an --out that "
                            "holds a checkpoint or a finished run is refused)")
    app.add_argument("--out", type=Path, help="folder on the server's machine for summary.json")
    local.add_argument(
        "--out", type=Path, required=True, help="folder for summary.json, the app and the logs"
    )


def _flower_sets(sets: list[str]) -> None:
    """Flower's run config carries the ``--set`` list as one string split on spaces."""
    if any(" " in s for s in sets):
        raise ConfigError(
            f"--set {next(s for s in sets if ' ' in s)!r}: values with spaces cannot be passed to Flower"
        )


def _settings(args, config: dict, out: Path | None) -> dict:
    """The Flower app's settings for ``config`` (loaded from ``args.config`` and ``args.sets``; the
    caller checked it deployable: a bad config is rejected here, not on the server's machine)."""
    if args.resume and out is None:  # the folder is the server's: only deploy local can look into it
        check_out(out, args.resume, get_task(config["task"]).checkpoint_name)
    return {"config": _source(args.config), "set": " ".join(_pinned(args.sets, config)),
            "out": str(out.resolve()) if out else "", "audit": args.audit, "resume": args.resume}


def _source(config: str) -> str:
    """The config as every party's process finds it: a file by its absolute path, else the preset."""
    return str(Path(config).resolve()) if Path(config).is_file() else config


def _pinned(sets: list[str], config: dict) -> list[str]:
    """The ``--set`` overrides with the data root found from here pinned: the parties' processes
    start in folders of their own (a node whose data sits elsewhere gives its own data root). With
    none to pin (no folder found, none given), the overrides as they are."""
    root = resolve_data_root(config["data.root"])
    if root.is_dir():
        pin = f"data.root={root.resolve()}"
    elif config["data.root"]:
        pin = f"data.root={config['data.root']}"
    else:
        return list(sets)
    return [s for s in sets if not s.startswith("data.root=")] + [pin]


def _as_pinned(config: dict, sets: list[str]) -> dict:
    """``config`` with the data root that :func:`_pinned`'s ``sets`` give the parties, as they read it."""
    return config | dict(parse_override(s) for s in sets if s.startswith("data.root="))


def cmd_deploy(args) -> int:
    if args.action == "credentials":
        from fedstream.deploy.credentials import write_credentials, write_requester  # cryptography

        if args.nodes is None and not args.requester:
            raise ConfigError("deploy credentials: give --nodes M (the client parties), --requester, or both")
        paths = {}
        if args.nodes is not None:
            paths = write_credentials(args.dir, args.nodes, args.host, days=args.days, force=args.force)
        if args.requester:
            paths |= write_requester(args.dir, days=args.days, force=args.force)
        print(f"wrote {len(paths)} files to {args.dir}: " + " ".join(sorted(paths)))
        return 0
    if args.action == "predict":  # serving (grpc): imported when it runs
        from fedstream.deploy.serving_grpc import deploy_predict
        from fedstream.predict import write_predictions

        path = write_predictions(deploy_predict(args.run, args.ids), args.out)
        print(f"wrote {path}")
        return 0
    if args.action == "app":
        _flower_sets(args.sets)
        config = load_config(args.config, args.sets)
        M = check_deployable(config).n_nodes(config)
        folder = write_app(args.dir, _settings(args, config, args.out))
        print(f"wrote {folder}; with a SuperLink and {M} SuperNodes "
              f"(--node-config \"client-index=0\" .. \"client-index={M - 1}\") running:\n"
              f"  flwr run {folder} <connection> --stream")
        return 0
    config = load_config(args.config, args.sets)  # once: the checks here and the server party use it
    check_out(args.out, args.resume, get_task(config["task"]).checkpoint_name)  # before any process starts
    grpc = (args.runtime or default_runtime(config)) == "grpc"
    adapter = check_deployable(config)  # a bad config is rejected here, before any process starts
    if not grpc:
        _flower_sets(args.sets)
        settings = _settings(args, config, args.out)
    credentials = None
    if args.secure:
        from fedstream.deploy.credentials import write_credentials  # cryptography: an optional dependency

        credentials = args.out / "credentials"
        write_credentials(credentials, adapter.n_nodes(config), force=True)  # this run's own
    if grpc:
        _local_grpc(args, config, _pinned(args.sets, config), credentials)
    else:
        app = write_app(args.out / "app", settings)
        folder = args.out / "deployment"
        with LocalDeployment(adapter.n_nodes(config), folder, credentials=credentials) as deployment:
            deployment.run(app, timeout=args.timeout)
    summary = args.out / "summary.json"
    if not summary.exists():
        raise ConfigError(f"the run wrote no summary; see the logs in {args.out / 'deployment'}")
    s = json.loads(summary.read_text())
    print(f"{adapter.report(s)}; summary in {summary}")
    check_outcome(s, args.out)  # a failed or disputed run: exit 2 (the ServerApp's error stays in Flower)
    return 0


def _local_grpc(args, config: dict, sets: list[str], tls: Path | None) -> None:
    """``deploy local`` on the gRPC runtime: the server party here with ``config`` (as loaded from
    ``args.config`` and ``args.sets``), one client process per client (each given the config's source
    and ``sets``, the data root pinned; values with spaces are fine here)."""
    # gRPC is an optional dependency: imported when a deployment runs
    from fedstream.deploy.runtimes.grpc_local import GrpcLocalDeployment, serve_server

    source, config = _source(args.config), _as_pinned(config, sets)  # the server reads the nodes' data root
    M = adapter_for(config["task"]).n_nodes(config)
    with GrpcLocalDeployment(source, sets, M, args.out / "deployment", tls_dir=tls) as nodes:
        serve_server(config, listen="127.0.0.1:0", out=args.out, tls_dir=tls, audit=args.audit,
                     resume=args.resume, reply_timeout=args.reply_timeout,
                     setup_timeout=args.setup_timeout,
                     on_listen=lambda link: nodes.start(f"127.0.0.1:{link.port}"))


COMMANDS = {"deploy": cmd_deploy}
