"""``fedstream bench ovfl|huffman|selection|network|device|estimators|vfl|torch|psi``: speed benchmarks, as
ratios against a plain reference in the same process (``device``: the torch parties on the CPU and the
GPU; ``estimators``: the Python estimators' accuracy beside scikit-learn's and River's own; ``vfl``: a
batch VFL epoch against a plain PyTorch split-NN; ``psi``: private entity alignment against a plain set
intersection; ``torch``: online VFL's torch backend beside the compiled engine).

Each bench is a subcommand with only its own options (``fedstream bench network --help``); every
one writes its figures to ``--json`` (default ``bench-NAME.json``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from rich.console import Console

from fedstream.bench.huffman import bench_huffman, format_huffman_bench
from fedstream.bench.selection import bench_selection, format_selection_bench
from fedstream.cli.common import add_sets, check_workers
from fedstream.errors import FedstreamError
from fedstream.runs.task import entry_point

# the online bench times the PyTorch reference: PyTorch (1.5-2 s) is imported when it runs, not by
# every command
bench_ovfl = entry_point("fedstream.bench.ovfl:bench_ovfl")
write_json = entry_point("fedstream.bench.ovfl:write_json")
bench_device = entry_point("fedstream.bench.device:bench_device")
# the network benches need the deploy extra (grpcio, protobuf): imported when they run
bench_network = entry_point("fedstream.bench.network:bench_network")
bench_network_grpc = entry_point("fedstream.bench.network:bench_network_grpc")
bench_network_wan = entry_point("fedstream.bench.network:bench_network_wan")
format_network_bench = entry_point("fedstream.bench.network:format_network_bench")
format_network_grpc = entry_point("fedstream.bench.network:format_network_grpc")
format_network_wan = entry_point("fedstream.bench.network:format_network_wan")
bench_sklearn = entry_point("fedstream.bench.estimators:run")
format_sklearn = entry_point("fedstream.bench.estimators:markdown")
bench_river = entry_point("fedstream.bench.river:run")
format_river = entry_point("fedstream.bench.river:markdown")
format_device_bench = entry_point("fedstream.bench.device:format_device_bench")
bench_vfl = entry_point("fedstream.bench.vfl_epoch:bench_vfl")
format_vfl_bench = entry_point("fedstream.bench.vfl_epoch:format_vfl_bench")


def _print(text: str) -> None:
    Console().print(text, highlight=False)


def _json_option(parser, name: str) -> None:
    parser.add_argument("--json", type=Path, default=None,
                        help=f"where to write the figures (default: bench-{name}.json)")


def _data_root_option(parser) -> None:
    parser.add_argument("--data-root", default=None, help="data folder (default: as for `run`)")


def _workers_option(parser, what: str) -> None:
    parser.add_argument("--workers", type=int, default=None,
                        help=f"processes for {what} (default: one per core)")


# -- ovfl ---------------------------------------------------------------------------------------
def _ovfl_options(p) -> None:
    p.add_argument("--rounds", type=int, default=20000, help="rounds timed for the fast engine")
    p.add_argument("--ref-rounds", type=int, default=1000, help="rounds timed for the PyTorch reference")
    p.add_argument("--sweep-rounds", type=int, default=16384, help="rounds of each run in the K-run sweeps")
    _workers_option(p, "the sweeps")
    p.add_argument("--quick", action="store_true",
                   help="only the table (fused, messages, reference, floor) and the time per round")
    p.add_argument("--forms", action="store_true",
                   help="only the per-layer cost of DLR's update forms (running sum, deferred) against "
                        "OGD's step, with the floors of any exact form")
    _data_root_option(p)
    p.add_argument("--json", type=Path, default=None,
                   help="where to write the figures (default: bench-ovfl.json, with --forms "
                        "bench-ovfl-forms.json)")


def _ovfl(args) -> int:
    if min(args.rounds, args.ref_rounds, args.sweep_rounds) < 1:
        raise FedstreamError("--rounds, --ref-rounds and --sweep-rounds must be >= 1")
    check_workers(args.workers)
    results = bench_ovfl(fast_rounds=args.rounds, ref_rounds=args.ref_rounds, data_root=args.data_root,
                         sweep_rounds=args.sweep_rounds, workers=args.workers, quick=args.quick,
                         forms=args.forms, log=_print)
    path = args.json or Path("bench-ovfl-forms.json" if args.forms else "bench-ovfl.json")
    write_json(results, path)
    Console().print(f"figures written to {path}")
    return 0


# -- huffman ------------------------------------------------------------------------------------
def _huffman_options(p) -> None:
    p.add_argument("--symbols", type=int, default=1_000_000, help="quantiser symbols coded")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (the best is kept)")
    p.add_argument("--seed", type=int, default=0, help="seed of the symbols")
    _json_option(p, "huffman")


def _huffman(args) -> int:
    if min(args.symbols, args.repeats) < 1:
        raise FedstreamError("--symbols and --repeats must be >= 1")
    results = bench_huffman(args.symbols, seed=args.seed, repeats=args.repeats)
    _print(format_huffman_bench(results))
    write_json(results, args.json or Path("bench-huffman.json"))
    return 0


# -- selection ----------------------------------------------------------------------------------
def _selection_options(p) -> None:
    p.add_argument("--samples", type=int, default=60000, help="MNIST training samples scored")
    p.add_argument("--ref-samples", type=int, default=2000, help="subsample for the reference comparison")
    p.add_argument("--k", type=int, default=10, help="neighbours K")
    p.add_argument("--groups", type=int, default=10, help="random groups of the group testing")
    p.add_argument("--seed", type=int, default=100, help="seed of the groups")
    p.add_argument("--scale-clients", type=int, default=16, help="clients of the synthetic scale run")
    p.add_argument("--scale-samples", type=int, default=100000, help="samples of the scale run (0: skip it)")
    p.add_argument("--scale-queries", type=int, default=0, help="query samples of the scale run (0: all)")
    p.add_argument("--no-paillier", action="store_true", help="skip the Paillier cost measurement")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier key size")
    p.add_argument("--reselection-reps", type=int, default=2,
                   help="rounds of the old-vs-new engine comparison of a relaxed re-selection (0: skip it)")
    _workers_option(p, "the scoring")
    _data_root_option(p)
    _json_option(p, "selection")


def _selection(args) -> int:
    check_workers(args.workers)
    results = bench_selection(
        args.data_root,
        samples=args.samples,
        ref_samples=args.ref_samples,
        k=args.k,
        n_groups=args.groups,
        seed=args.seed,
        scale_clients=args.scale_clients,
        scale_samples=args.scale_samples,
        scale_queries=args.scale_queries,
        paillier=not args.no_paillier,
        key_bits=args.key_bits,
        workers=args.workers,
        reselection_reps=args.reselection_reps,
    )
    _print(format_selection_bench(results))
    write_json(results, args.json or Path("bench-selection.json"))
    return 0


# -- vfl ----------------------------------------------------------------------------------------
def _vfl_options(p) -> None:
    p.add_argument("--reps", type=int, default=5, help="interleaved rounds of plain and fedstream epochs")
    _data_root_option(p)
    _json_option(p, "vfl")


def _vfl(args) -> int:
    if args.reps < 1:
        raise FedstreamError("--reps must be >= 1")
    results = bench_vfl(args.data_root, reps=args.reps)
    print(format_vfl_bench(results))
    write_json(results, args.json or Path("bench-vfl.json"))
    return 0


# -- network ------------------------------------------------------------------------------------
def _network_options(p) -> None:
    p.add_argument("--runtime", choices=["grpc", "flower"], default="grpc", help="the deployment runtime")
    p.add_argument("--events", type=int, default=4096,
                   help="gRPC: at least this many events for each batch size (and 64 requests)")
    p.add_argument("--requests", type=int, default=6,
                   help="Flower: requests per node for each batch size (B x requests events)")
    p.add_argument("--batches", default="1,16,256", help="comma-separated network.batch values")
    p.add_argument("--rtt-ms", default=None, metavar="R[,R...]",
                   help="gRPC over a wide-area link played on loopback: a relay holds each direction "
                        "R/2 ms; comma-separated round-trip times give one row per R and B (the WAN "
                        "table), e.g. 0,5,20,50")
    p.add_argument("--mbit", type=float, default=None,
                   help="with --rtt-ms: each direction's bandwidth in Mbit/s (default: unlimited)")
    p.add_argument("--rounds", type=int, default=1000,
                   help="with --rtt-ms: at least this many events for each R and B (and 16 requests)")
    p.add_argument("--error-rounds", type=int, default=None,
                   help="with --rtt-ms: also the accumulated error of this many rounds once per B "
                        "(the deployment's protocol in one process; it does not depend on R), and the "
                        "simulator's")
    p.add_argument("--config", default="ovfl-imnist", help="preset or config file")
    add_sets(p, help="override a config key (repeatable)")
    p.add_argument("--workdir", type=Path, default=Path("runs/bench-network"),
                   help="apps, logs and run outputs (default: runs/bench-network)")
    _json_option(p, "network")


def _wan_options(args) -> tuple[float, ...] | None:
    """--rtt-ms's round-trip times, the WAN options checked; None without --rtt-ms."""
    if args.rtt_ms is None:
        for flag, value in (("--mbit", args.mbit), ("--error-rounds", args.error_rounds)):
            if value is not None:
                raise FedstreamError(f"{flag} {value:g}: only with --rtt-ms (a wide-area link)")
        return None
    if args.runtime != "grpc":
        raise FedstreamError(f"--rtt-ms {args.rtt_ms}: only with --runtime grpc")
    try:
        rtts = tuple(float(r) for r in args.rtt_ms.split(","))
    except ValueError:
        rtts = ()
    if not rtts or not all(0 <= r < 60000 for r in rtts):
        raise FedstreamError(f"--rtt-ms {args.rtt_ms}: expected comma-separated milliseconds >= 0, "
                             "e.g. 20 or 0,5,20,50")
    if args.mbit is not None and not 0 < args.mbit < float("inf"):
        raise FedstreamError(f"--mbit {args.mbit:g}: expected a positive bandwidth in Mbit/s, e.g. 100")
    if args.rounds < 1:
        raise FedstreamError(f"--rounds {args.rounds}: expected at least 1")
    if args.error_rounds is not None and args.error_rounds < 1:
        raise FedstreamError(f"--error-rounds {args.error_rounds}: expected at least 1, e.g. 200000")
    return rtts


def _network(args) -> int:
    try:
        batches = tuple(int(b) for b in args.batches.split(","))
    except ValueError:
        batches = ()
    if not batches or min(batches) < 1:
        raise FedstreamError(
            f"--batches {args.batches}: expected comma-separated integers >= 1, e.g. 1,16,256"
        )
    rtts = _wan_options(args)
    if rtts is not None:
        results = bench_network_wan(rtts_ms=rtts, batches=batches, rounds=args.rounds, mbit=args.mbit,
                                    error_rounds=args.error_rounds, config=args.config, sets=args.sets,
                                    workdir=args.workdir, log=_print)
        _print(format_network_wan(results))
    elif args.runtime == "grpc":
        results = bench_network_grpc(batches=batches, events=args.events, config=args.config,
                                     sets=args.sets, workdir=args.workdir, log=_print)
        _print(format_network_grpc(results))
    else:
        results = bench_network(batches=batches, requests=args.requests, config=args.config,
                                sets=args.sets, workdir=args.workdir, log=_print)
        _print(format_network_bench(results))
    write_json(results, args.json or Path("bench-network.json"))
    return 0


# -- device -------------------------------------------------------------------------------------
def _device_options(p) -> None:
    p.add_argument("--devices", default=None,
                   help="comma-separated devices to time (default: cpu, and cuda when present)")
    p.add_argument("--tiny", action="store_true", help="every case shrunk to seconds (a smoke run)")
    _data_root_option(p)
    _json_option(p, "device")


def _device(args) -> int:
    devices = tuple(d.strip() for d in args.devices.split(",") if d.strip()) if args.devices else None
    results = bench_device(args.data_root, devices=devices, tiny=args.tiny)
    print(format_device_bench(results))
    write_json(results, args.json or Path("bench-device.json"))
    return 0


# -- estimators ---------------------------------------------------------------------------------
def _estimators_options(p) -> None:
    p.add_argument("--which", choices=("sklearn", "river", "all"), default="all",
                   help="sklearn: VFLClassifier() and CHFLClassifier() against MLPClassifier() on "
                        "scikit-learn's small tables; river: OnlineVFL against River's classifiers on "
                        "its bundled streams; all: both (default)")
    p.add_argument("--seed", type=int, default=0, help="the models' seed (default 0)")
    _json_option(p, "estimators")


def _estimators(args) -> int:
    results = {}
    if args.which in ("sklearn", "all"):
        results["sklearn"] = bench_sklearn(seed=args.seed)
        print(format_sklearn(results["sklearn"]), end="\n\n", flush=True)
    if args.which in ("river", "all"):
        results["river"] = bench_river(seed=args.seed)
        print(format_river(results["river"]), flush=True)
    write_json(results, args.json or Path("bench-estimators.json"))
    return 0


# -- torch --------------------------------------------------------------------------------------
def _torch_options(p) -> None:
    p.add_argument("--rounds", type=int, default=2000, help="rounds timed per case (default 2000)")
    p.add_argument("--warmup", type=int, default=200, help="rounds played first, untimed (default 200)")
    _data_root_option(p)
    _json_option(p, "torch")


def _torch(args) -> int:
    from fedstream.bench.torch_backend import bench_torch_backend, format_table

    if args.rounds < 1 or args.warmup < 0:
        raise FedstreamError("--rounds must be >= 1 and --warmup >= 0")
    rows = bench_torch_backend(rounds=args.rounds, warmup=args.warmup, data_root=args.data_root)
    print(format_table(rows))
    write_json(rows, args.json or Path("bench-torch.json"))
    return 0


# -- psi ----------------------------------------------------------------------------------------
def _psi_options(p) -> None:
    p.add_argument("--ids", type=int, nargs="+", default=[100_000],
                   help="set sizes N: each case aligns N server ids with N client ids (default 100000)")
    p.add_argument("--overlap", type=float, default=0.85,
                   help="share of the client's ids that the server holds (default 0.85)")
    _json_option(p, "psi")


def _psi(args) -> int:
    from fedstream.bench.psi import bench_psi, format_psi

    if any(n < 1 for n in args.ids) or not 0.0 <= args.overlap <= 1.0:
        print("error: --ids takes positive set sizes and --overlap a share between 0 and 1", file=sys.stderr)
        return 2
    rows = []
    for n in args.ids:
        rows.append(bench_psi(n, overlap=args.overlap))
        print(format_psi(rows[-1]), flush=True)
    write_json(rows, args.json or Path("bench-psi.json"))
    return 0


# -- serving --------------------------------------------------------------------------------------
def _serving_options(p) -> None:
    p.add_argument("config", nargs="?", default="examples/customers-parties-ovfl.toml",
                   help="config of the deployment to train and serve (one file per party; default "
                        "examples/customers-parties-ovfl.toml: run from the repository's root, as its "
                        "data.path is relative to it)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config key of the training (repeatable)")
    p.add_argument("--run", type=Path, default=None,
                   help="serve this finished `fedstream deploy local` run instead of training one")
    p.add_argument("--workdir", type=Path, default=Path("runs/bench-serving"),
                   help="the trained deployment (reused when there; default runs/bench-serving)")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 64], help="ids per request (default 1 64)")
    p.add_argument("--requests", type=int, default=500, help="timed requests per size (default 500)")
    _json_option(p, "serving")


def _serving(args) -> int:
    from fedstream.bench.serving import bench_serving, format_serving, train

    if args.requests < 1 or any(not 1 <= k <= 4096 for k in args.sizes):
        print("error: --requests takes a positive count and --sizes 1 to 4096 ids", file=sys.stderr)
        return 2
    run = args.run or train(args.config, args.workdir, args.sets)
    results = bench_serving(run, sizes=tuple(args.sizes), requests=args.requests)
    print(format_serving(results))
    write_json(results, args.json or Path("bench-serving.json"))
    return 0


BENCHES: dict[str, tuple[str, Callable, Callable[..., int]]] = {
    "ovfl": ("the fast online VFL engine against the PyTorch reference (and K-run sweeps)",
             _ovfl_options, _ovfl),
    "huffman": ("our Huffman coder against the pure-Python dahuffman package", _huffman_options, _huffman),
    "selection": ("VF-PS scoring against the per-sample reference, a scale run and Paillier's cost",
                  _selection_options, _selection),
    "network": ("online VFL deployed on loopback (gRPC or Flower) for B = 1, 16, 256; with --rtt-ms, "
                "gRPC over a wide-area link (delay, bandwidth) played by a relay",
                _network_options, _network),
    "device": ("batch VFL (MLP, ResNet-18) and CHFL epochs on the CPU and the GPU",
               _device_options, _device),
    "estimators": ("the estimators' accuracy and time beside scikit-learn's MLPClassifier and River's "
                   "classifiers (docs/estimators.md)", _estimators_options, _estimators),
    "vfl": ("a batch VFL epoch (vfl-mnist) against a plain single-process PyTorch split-NN",
            _vfl_options, _vfl),
    "torch": ("online VFL's torch backend (model.backend = \"torch\") beside the compiled engine, per "
              "optimiser", _torch_options, _torch),
    "serving": ("the deployed parties' predictions (fedstream serve --predict): latency p50/p99 and "
                "throughput for 1 and 64 ids per request, beside the parties in one process",
                _serving_options, _serving),
    "psi": ("private entity alignment (openmined-psi) of N x N ids against a plain set intersection "
            "(docs/alignment.md)", _psi_options, _psi),
}
"""Each bench: its help line, the function adding its options, the function running it."""


def add_parsers(sub) -> None:
    bench = sub.add_parser(
        "bench", help="speed benchmarks, as ratios against a plain reference in the same process"
    )
    benches = bench.add_subparsers(dest="what", required=True)
    for name, (help, add_options, run) in BENCHES.items():
        p = benches.add_parser(name, help=help, description=help)
        add_options(p)
        p.set_defaults(bench=run)


def cmd_bench(args) -> int:
    return args.bench(args)


COMMANDS = {"bench": cmd_bench}
