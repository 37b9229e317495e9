"""Small configurations for fast runs: an online VFL config and CHFL settings."""

from __future__ import annotations

import itertools

from fedstream.chfl.settings import CHFLSettings
from fedstream.config import load_config


def small_config(**overrides) -> dict:
    """A resolved online VFL config for synthetic streams: 4 clients, small embedding."""
    base = {"data.name": "mnist", "vfl.clients": 4, "model.embedding": 8, "rounds": 300,
            "eval.interval": 100, "optimizer.lr": 0.05}
    return load_config(None, base | overrides)


def tiny_settings(**overrides) -> CHFLSettings:
    """Fast CHFL settings: 2 clients, one small hidden layer, 3 rounds of 2 epochs."""
    base = dict(clients=2, hidden=(16,), rounds=3, local_epochs=2, batch_size=32, lrs=(1e-2,),
                mus=(0.0, 1.0))
    return CHFLSettings(**(base | overrides))


def grid_points(exp) -> list[dict]:
    """Every point of an experiment definition's grid, in grid order, as {key: value} (the union of
    the products of its [[grid]] blocks, if it has blocks)."""
    if exp.blocks:
        return exp.points()
    keys = list(exp.grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(exp.grid[k] for k in keys))]
