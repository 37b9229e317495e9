"""``fedstream bench ovfl|huffman|selection|network|device``: speed benchmarks, as ratios against a
plain reference in the same process (``device``: the torch parties on the CPU and the GPU)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from fedstream.bench.huffman import bench_huffman, format_huffman_bench
from fedstream.bench.network import (
    bench_network,
    bench_network_grpc,
    format_network_bench,
    format_network_grpc,
)
from fedstream.bench.selection import bench_selection, format_selection_bench
from fedstream.errors import FedstreamError
from fedstream.runs.task import entry_point

# the online bench times the PyTorch reference: PyTorch (1.5-2 s) is imported when it runs, not by
# every command
bench_ovfl = entry_point("fedstream.bench.ovfl:bench_ovfl")
write_json = entry_point("fedstream.bench.ovfl:write_json")
bench_device = entry_point("fedstream.bench.device:bench_device")
bench_vfl = entry_point("fedstream.bench.vfl_epoch:bench_vfl")
format_vfl_bench = entry_point("fedstream.bench.vfl_epoch:format_vfl_bench")
format_device_bench = entry_point("fedstream.bench.device:format_device_bench")


def add_parsers(sub) -> None:
    bench = sub.add_parser(
        "bench", help="speed benchmarks, as ratios against a plain reference in the same process"
    )
    bench.add_argument("what", choices=["ovfl", "huffman", "selection", "network", "device", "vfl"],
                       help="ovfl: fast online VFL engine vs the PyTorch reference; "
                            "huffman: our Huffman coder vs the pure-Python dahuffman package; "
                            "selection: VF-PS scoring vs the per-sample reference; "
                            "network: online VFL deployed on loopback (gRPC or Flower) for B = 1, 16, 256; "
                            "device: batch VFL (MLP, ResNet-18) and CHFL epochs on the CPU and the GPU; "
                            "vfl: a batch VFL epoch vs a plain PyTorch split-NN")
    bench.add_argument("--rounds", type=int, default=20000, help="rounds timed for the fast engine")
    bench.add_argument("--ref-rounds", type=int, default=1000, help="rounds timed for the reference")
    bench.add_argument(
        "--sweep-rounds", type=int, default=16384, help="rounds of each run in the K-run sweeps"
    )
    bench.add_argument(
        "--workers", type=int, default=None, help="processes for the sweeps (default: one per core)"
    )
    bench.add_argument("--quick", action="store_true",
                       help="ovfl: only the table (fused, messages, reference, floor) and the time per round")
    bench.add_argument("--forms", action="store_true",
                       help="ovfl: only the per-layer cost of DLR's update forms (running sum, deferred) "
                            "against OGD's step, with the floors of any exact form")
    bench.add_argument("--data-root", default=None, help="data folder (default: as for `run`)")
    bench.add_argument(
        "--json", type=Path, default=None, help="where to write the figures (default: bench-WHAT.json)"
    )
    net = bench.add_argument_group("network")
    net.add_argument("--runtime", choices=["grpc", "flower"], default="grpc", help="the deployment runtime")
    net.add_argument("--events", type=int, default=4096,
                     help="gRPC: at least this many events for each batch size (and 64 requests)")
    net.add_argument(
        "--requests", type=int, default=6, help="requests per node for each batch size (B x requests events)"
    )
    net.add_argument("--batches", default="1,16,256", help="comma-separated network.batch values")
    net.add_argument("--config", default="ovfl-imnist", help="preset or config file")
    net.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="config override"
    )
    net.add_argument("--workdir", type=Path, default=Path("runs/bench-network"),
                     help="apps, logs and run outputs (default: runs/bench-network)")
    dev = bench.add_argument_group("device")
    dev.add_argument("--devices", default=None,
                     help="comma-separated devices to time (default: cpu, and cuda when present)")
    dev.add_argument("--tiny", action="store_true", help="every case shrunk to seconds (a smoke run)")
    sel = bench.add_argument_group("selection")
    sel.add_argument("--samples", type=int, default=60000, help="MNIST training samples scored")
    sel.add_argument("--ref-samples", type=int, default=2000, help="subsample for the reference comparison")
    sel.add_argument("--k", type=int, default=10, help="neighbours K")
    sel.add_argument("--groups", type=int, default=10, help="random groups of the group testing")
    sel.add_argument("--seed", type=int, default=100, help="seed of the groups")
    sel.add_argument("--scale-clients", type=int, default=16, help="clients of the synthetic scale run")
    sel.add_argument(
        "--scale-samples", type=int, default=100000, help="samples of the scale run (0: skip it)"
    )
    sel.add_argument("--scale-queries", type=int, default=0, help="query samples of the scale run (0: all)")
    sel.add_argument("--no-paillier", action="store_true", help="skip the Paillier cost measurement")
    sel.add_argument("--key-bits", type=int, default=2048, help="Paillier key size")
    sel.add_argument("--reselection-reps", type=int, default=2,
                     help="rounds of the old-vs-new engine comparison (0: skip it)")
    vfl = bench.add_argument_group("vfl")
    vfl.add_argument("--reps", type=int, default=5, help="interleaved rounds of plain and fedstream epochs")


def cmd_bench(args) -> int:
    if args.what == "selection":
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
        Console().print(format_selection_bench(results), highlight=False)
        write_json(results, args.json or Path("bench-selection.json"))
        return 0
    if args.what == "network":
        try:
            batches = tuple(int(b) for b in args.batches.split(","))
        except ValueError:
            raise FedstreamError(
                f"--batches {args.batches!r}: expected comma-separated integers, e.g. 1,16,256"
            ) from None
        log = lambda line: Console().print(line, highlight=False)  # noqa: E731
        if args.runtime == "grpc":
            results = bench_network_grpc(batches=batches, events=args.events, config=args.config,
                                         sets=args.sets, workdir=args.workdir, log=log)
            Console().print(format_network_grpc(results), highlight=False)
        else:
            results = bench_network(batches=batches, requests=args.requests, config=args.config,
                                    sets=args.sets, workdir=args.workdir, log=log)
            Console().print(format_network_bench(results), highlight=False)
        write_json(results, args.json or Path("bench-network.json"))
        return 0
    if args.what == "device":
        devices = tuple(d.strip() for d in args.devices.split(",") if d.strip()) if args.devices else None
        results = bench_device(args.data_root, devices=devices, tiny=args.tiny)
        print(format_device_bench(results))
        write_json(results, args.json or Path("bench-device.json"))
        return 0
    if args.what == "vfl":
        if args.reps < 1:
            raise FedstreamError("--reps must be >= 1")
        results = bench_vfl(args.data_root, reps=args.reps)
        print(format_vfl_bench(results))
        write_json(results, args.json or Path("bench-vfl.json"))
        return 0
    if args.what == "huffman":
        results = bench_huffman()
        Console().print(format_huffman_bench(results), highlight=False)
        write_json(results, args.json or Path("bench-huffman.json"))
        return 0

    if min(args.rounds, args.ref_rounds, args.sweep_rounds) < 1 or (args.workers or 1) < 1:
        raise FedstreamError("--rounds, --ref-rounds, --sweep-rounds and --workers must be >= 1")
    results = bench_ovfl(fast_rounds=args.rounds, ref_rounds=args.ref_rounds, data_root=args.data_root,
                         sweep_rounds=args.sweep_rounds, workers=args.workers, quick=args.quick,
                         forms=args.forms,
                         log=lambda line: Console().print(line, highlight=False))
    path = args.json or Path("bench-ovfl-forms.json" if args.forms else "bench-ovfl.json")
    write_json(results, path)
    Console().print(f"figures written to {path}")
    return 0


COMMANDS = {"bench": cmd_bench}
