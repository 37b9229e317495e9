"""Write examples/parties-psi/: examples/customers.csv as one file per party, as real parties hold
them (README's "Per-party files with private entity alignment"; deterministic):

* every file is in its own, shuffled row order;
* each client holds about 85 % of the server's customers, drawn on its own;
* each client also holds customers the server has never seen (foreign ids, ``F...``), about 10 %
  of its rows, with feature values of a real customer's row.

The parties' ids are matched by private set intersection when a run starts.

    python examples/make_parties_psi.py           # rewrites examples/parties-psi/*.csv
"""

from __future__ import annotations

import csv
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
PARTIES = {
    "bank": ["income", "balance", "loans", "card_spend"],
    "shop": ["visits", "basket", "returns", "channel"],
    "telecom": ["minutes", "data_gb", "tenure", "late_payments"],
}
OVERLAP = 0.85  # the share of the server's customers each client holds
FOREIGN = 0.10  # a client's rows whose id the server does not hold, as a share of its rows


def write(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def main() -> None:
    with open(HERE / "customers.csv", newline="") as f:
        customers = list(csv.DictReader(f))
    rng = random.Random(2026)
    out = HERE / "parties-psi"
    out.mkdir(exist_ok=True)
    server = [[r["id"], r["segment"]] for r in customers]
    rng.shuffle(server)
    write(out / "server.csv", ["id", "segment"], server)
    for m, (party, columns) in enumerate(PARTIES.items()):
        held = rng.sample(customers, round(OVERLAP * len(customers)))
        n_foreign = round(FOREIGN * len(held) / (1 - FOREIGN))
        foreign = [dict(rng.choice(customers), id=f"F{m}{k:04d}") for k in range(n_foreign)]
        rows = [[r["id"], *(r[c] for c in columns)] for r in held + foreign]
        rng.shuffle(rows)
        write(out / f"{party}.csv", ["id", *columns], rows)


if __name__ == "__main__":
    main()
