#!/usr/bin/env python
"""The tables of docs/estimators.md, reproduced (issue 32): ``fedstream bench estimators`` from a
checkout, without installing.

    PYTHONPATH=src python scripts/bench_estimators.py --which sklearn   # defaults vs MLPClassifier
    PYTHONPATH=src python scripts/bench_estimators.py --which river     # OnlineVFL vs River's classifiers
    PYTHONPATH=src python scripts/bench_estimators.py --json bench-estimators.json   # both

Prints each table as markdown (accuracies and wall seconds; the seconds depend on the machine) and
writes the rows to ``--json`` (default bench-estimators.json). The measuring code is
fedstream.bench.estimators and fedstream.bench.river.
"""

from __future__ import annotations

import sys

from fedstream.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "estimators", *sys.argv[1:]]))
