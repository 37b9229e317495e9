#!/usr/bin/env python
"""The tables of docs/estimators.md, reproduced (issue 32).

    PYTHONPATH=src python scripts/bench_estimators.py sklearn   # estimators' defaults vs MLPClassifier
    PYTHONPATH=src python scripts/bench_estimators.py river     # OnlineVFL vs River's classifiers
    PYTHONPATH=src python scripts/bench_estimators.py all --json bench-estimators.json

Prints each table as markdown (accuracies and wall seconds; the seconds depend on the machine).
The measuring code is fedstream.bench.estimators and fedstream.bench.river.
"""

from __future__ import annotations

import argparse
import json
import sys

from fedstream.bench import estimators, river


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("which", choices=("sklearn", "river", "all"))
    parser.add_argument("--seed", type=int, default=0, help="the models' seed (default 0)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    out = {}
    if args.which in ("sklearn", "all"):
        out["sklearn"] = estimators.run(seed=args.seed)
        print(estimators.markdown(out["sklearn"]), end="\n\n", flush=True)
    if args.which in ("river", "all"):
        out["river"] = river.run(seed=args.seed)
        print(river.markdown(out["river"]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
