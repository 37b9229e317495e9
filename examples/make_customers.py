"""Write examples/customers.csv: a small table for README's "Your own data" (deterministic).

600 customers, an ``id`` column, a ``segment`` label of 3 classes (bronze, silver, gold) and 12
features that three parties would hold: a bank (income, balance, loans, card_spend), a shop
(visits, basket, returns, channel: a text column) and a telecom (minutes, data_gb, tenure,
late_payments). The label depends on every party's columns, so each client helps.

    python examples/make_customers.py            # rewrites examples/customers.csv
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

ROWS = 600
CLASSES = ("bronze", "silver", "gold")
COLUMNS = ("id", "segment", "income", "balance", "loans", "card_spend", "visits", "basket", "returns",
           "channel", "minutes", "data_gb", "tenure", "late_payments")


def make(rows: int = ROWS, seed: int = 21) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(rows, 3))  # a latent wealth, loyalty and usage per customer
    income = 30 + 12 * z[:, 0] + rng.normal(0, 4, rows)
    balance = 5 + 4 * z[:, 0] + rng.normal(0, 2, rows)
    loans = rng.poisson(np.exp(0.3 - 0.4 * z[:, 0]))
    card = 1.5 + 0.6 * z[:, 0] + 0.4 * z[:, 1] + rng.normal(0, 0.3, rows)
    visits = rng.poisson(np.exp(1.5 + 0.5 * z[:, 1]))
    basket = 40 + 15 * z[:, 1] + rng.normal(0, 6, rows)
    returns = rng.poisson(np.exp(-0.5 - 0.3 * z[:, 1]))
    channel = np.where(z[:, 1] + rng.normal(0, 0.7, rows) > 0.3, "online", "store")
    minutes = 300 + 90 * z[:, 2] + rng.normal(0, 30, rows)
    data_gb = 8 + 3 * z[:, 2] + rng.normal(0, 1, rows)
    tenure = 1 + 2 * np.abs(z[:, 1] + z[:, 2]) + rng.normal(0, 0.5, rows) ** 2
    late = rng.poisson(np.exp(-0.7 - 0.5 * z[:, 0]))
    score = z.sum(axis=1) + rng.normal(0, 0.4, rows)
    segment = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    out = []
    for i in range(rows):
        out.append([f"C{1000 + i}", CLASSES[segment[i]], f"{income[i]:.2f}", f"{balance[i]:.2f}",
                    str(loans[i]), f"{card[i]:.3f}", str(visits[i]), f"{basket[i]:.2f}", str(returns[i]),
                    channel[i], f"{minutes[i]:.1f}", f"{data_gb[i]:.2f}", f"{tenure[i]:.2f}", str(late[i])])
    return out


def main() -> None:
    path = Path(__file__).with_name("customers.csv")
    with path.open("w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(make())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
