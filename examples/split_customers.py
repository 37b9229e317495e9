"""Write examples/parties/: examples/customers.csv as one file per party (README's "One file per
party, deployed"; deterministic).

* ``server.csv``: ``id`` and the label ``segment`` (the server party's file);
* ``bank.csv``, ``shop.csv``, ``telecom.csv``: ``id`` and each client party's four columns.

Every file lists the customers in the same order, as a deployment needs (each process opens only
its own file, and rows are matched by position; the simulator also realigns files by ``id``).

    python examples/split_customers.py           # rewrites examples/parties/*.csv
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTIES = {
    "server": ["segment"],
    "bank": ["income", "balance", "loans", "card_spend"],
    "shop": ["visits", "basket", "returns", "channel"],
    "telecom": ["minutes", "data_gb", "tenure", "late_payments"],
}


def main() -> None:
    with open(HERE / "customers.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    out = HERE / "parties"
    out.mkdir(exist_ok=True)
    for party, columns in PARTIES.items():
        with open(out / f"{party}.csv", "w", newline="") as f:
            writer = csv.writer(f, lineterminator="\n")
            writer.writerow(["id", *columns])
            writer.writerows([r["id"], *(r[c] for c in columns)] for r in rows)


if __name__ == "__main__":
    main()
