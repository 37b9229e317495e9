"""Checkpoints of a batch VFL run, written at the end of every epoch (``--out DIR``, ``--resume``).

A checkpoint holds everything the next epoch depends on, so that a run resumed from it ends
with the same models, metrics and bytes as one that was never interrupted (timings aside):

* the clients' and the server's model and optimiser state, the server's padding (selection);
* the links' state (:meth:`CompressedTransport.state_dict`): the clients' ranking weights (mean
  |dL/dE_j| of the last gradient, for ``topk-grad``) and error-feedback residuals, the server's
  per-sample embedding caches (training and test rows), the previous round's mu and sigma of
  every client's gradient;
* the byte ledger, the torch RNG state (the epoch order is drawn from ``(seed, epoch)``, so numpy
  needs none), the epochs and steps done, the metrics rows so far and the seconds spent;
* participant selection's state (:meth:`fedstream.vfl.selection.Participation.state_dict`: the
  clients selected, the record of (re)selections, the schedule's and selector's generators, the
  pessimistic bounds), so that a resume does not compute again the VF-PS selections of the epochs
  done (a relaxed 300-epoch run re-selects dozens of times, each a KNN pass over its rows). A
  checkpoint written before this was stored has none: the trainer then replays the plans, which
  depend only on the data and the seed (:func:`fedstream.vfl.trainer.run_batch_vfl`);
* the run's config, so that a resume with other settings is refused (``train.epochs`` may grow).

The file is ``checkpoint.pt`` (``torch.save`` of tensors, strings and numbers only; loaded with
``weights_only=True``), written atomically with the sha256 of its content, checked on load
(:func:`fedstream.runs.checkpoint.save_torch`): a crash while writing leaves the previous
checkpoint intact, and a damaged file is refused naming it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedstream.config.schema import schema
from fedstream.errors import ConfigError
from fedstream.runs.batch import CHECKPOINT
from fedstream.runs.checkpoint import CheckpointError
from fedstream.runs.torch_checkpoint import load_torch, save_torch

NAME = CHECKPOINT
FORMAT = 1
GROWABLE = ("train.epochs",)  # config keys a resume may change


@dataclass
class RunState:
    """What the trainer restores from a checkpoint besides the parties and links it loads in place."""

    epoch: int
    step: int
    rows: list[dict]
    seconds: float


def to_tensors(state: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.array(v)) for k, v in state.items()}


def to_arrays(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in state.items()}


def save(folder: Path, *, config: dict, state: RunState, clients, server, transport, part=None) -> Path:
    """Write ``folder/checkpoint.pt`` atomically; return its path. ``part``: the run's
    :class:`~fedstream.vfl.selection.Participation` (None without selection)."""
    payload = {
        **header(config, state),
        "clients": [c.model.state_dict() for c in clients],
        "client_optimizers": [c.optimizer.state_dict() for c in clients],
        **server_payload(server),
        "links": to_tensors(transport.state_dict()) if hasattr(transport, "state_dict") else {},
        "ledger": to_tensors(transport.ledger.state_dict()),
        **selection_payload(part),
        "torch_rng": torch.get_rng_state(),
    }
    return write(folder / NAME, payload)


def header(config: dict, state: RunState, *, kind: str | None = None) -> dict:
    """A checkpoint's first entries: format, ``kind`` (None: the simulator's, no entry), the run's
    config and where the run is (:class:`RunState`)."""
    return {
        "format": FORMAT,
        **({} if kind is None else {"kind": kind}),
        "config": json.dumps(config, sort_keys=True, default=str),
        "epoch": state.epoch,
        "step": state.step,
        "rows": json.dumps(state.rows),
        "seconds": state.seconds,
    }


def run_state(payload: dict) -> RunState:
    """Where the run of a checkpoint's ``payload`` (:func:`header`) is."""
    return RunState(
        int(payload["epoch"]), int(payload["step"]), json.loads(payload["rows"]), float(payload["seconds"])
    )


def server_payload(server) -> dict:
    """The server party's entries: top model, optimiser and padding (None: none)."""
    pad = server.padding
    return {
        "server": server.model.state_dict(),
        "server_optimizer": server.optimizer.state_dict(),
        "padding": None if pad is None else to_tensors({"value": pad.value, "seen": pad.seen}),
    }


def load_server(payload: dict, server) -> None:
    """Restore what :func:`server_payload` saved into ``server`` in place."""
    server.model.load_state_dict(payload["server"])
    server.optimizer.load_state_dict(payload["server_optimizer"])
    if server.padding is not None and payload["padding"] is not None:
        server.padding.value[...] = payload["padding"]["value"].numpy()
        server.padding.seen[...] = payload["padding"]["seen"].numpy()


def write(path: Path, payload: dict) -> Path:
    """Write a checkpoint's ``payload`` to ``path`` atomically, with its sha256 (what :func:`read` checks)."""
    return save_torch(path, payload)


def read(path: Path, *, config: dict, kind: str | None = None) -> dict:
    """The payload of the checkpoint at ``path``, checked: readable, this format and ``kind`` (None:
    the simulator's; ``"deployed-server"``: a deployed run's server,
    :mod:`fedstream.vfl.deploy.driver`), written with ``config`` (only ``train.epochs`` may
    differ, and not be lower than the epochs done).
    ConfigError naming the file (and the keys that differ) otherwise."""
    try:
        payload = load_torch(path)
    except FileNotFoundError:
        raise CheckpointError(path, "no checkpoint to resume from") from None
    except CheckpointError as exc:  # truncated, damaged, foreign or without a hash
        raise CheckpointError(path, f"not a readable batch VFL checkpoint ({exc.reason})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"{path}: not a batch VFL checkpoint of format {FORMAT}")
    if payload.get("kind") != kind:
        what = {None: "the simulator's", "deployed-server": "a deployed run's server"}
        raise ConfigError(
            f"{path}: a checkpoint of {what.get(payload.get('kind'), repr(payload.get('kind')))}, "
            f"expected one of {what.get(kind, repr(kind))}"
        )
    _check_config(
        path, json.loads(payload["config"]), json.loads(json.dumps(config, sort_keys=True, default=str))
    )
    if config["train.epochs"] < payload["epoch"]:
        raise ConfigError(f"{path}: the run already did {payload['epoch']} epochs; train.epochs = "
                          f"{config['train.epochs']} may not be lower on resume")
    return payload


def load(path: Path, *, config: dict, clients, server, transport, part=None) -> RunState:
    """Restore parties, links, ledger, RNG and participant selection (``part``, where the
    checkpoint has its state) from ``path`` in place; the epochs, steps, rows and seconds done.

    ConfigError when the file is not a checkpoint of this format or was made with another config
    (a key other than ``train.epochs`` differs, or fewer epochs are asked than were done).
    """
    payload = read(path, config=config)
    for c, model, opt in zip(clients, payload["clients"], payload["client_optimizers"]):
        c.model.load_state_dict(model)
        c.optimizer.load_state_dict(opt)
    load_server(payload, server)
    if hasattr(transport, "load_state_dict"):
        transport.load_state_dict(to_arrays(payload["links"]))
    transport.ledger.load_state_dict(to_arrays(payload["ledger"]))
    torch.set_rng_state(payload["torch_rng"])
    load_selection(path, payload, part)
    return run_state(payload)


def selection_payload(part) -> dict:
    """The checkpoint entries of participant selection's state (``part``: a
    :class:`~fedstream.vfl.selection.Participation`, or None without selection)."""
    meta, arrays = part.state_dict() if part is not None else (None, {})
    return {"selection": json.dumps(meta), "selection_arrays": to_tensors(arrays)}


def load_selection(path: Path, payload: dict, part, *, stored: bool = False) -> bool:
    """Restore ``part`` from the payload's selection state (:func:`selection_payload`); False where
    the checkpoint has none (it was written before the state was stored) or the run selects no
    clients. ``stored``: the checkpoint must hold a state exactly when the run selects (a deployed
    run's always did). ConfigError naming ``path`` for a damaged or mismatched state."""
    try:
        state = json.loads(payload.get("selection", "null"))
        if stored and (state is None) != (part is None):
            raise ValueError("selection state does not match selection.method / selection.dynamic")
        if part is None or state is None:
            return False
        if state.get("last_epoch") != payload["epoch"]:
            raise ValueError(f"it was saved at epoch {state.get('last_epoch')!r}, the checkpoint at "
                             f"epoch {payload['epoch']}")
        part.load_state_dict(state, to_arrays(payload["selection_arrays"]))
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{path}: the selection state is damaged or does not fit this configuration "
                          f"({type(exc).__name__}: {exc})") from None
    return True


def _check_config(path: Path, old: dict, new: dict) -> None:
    """Refuse a checkpoint written with other settings. A key the writing version did not have yet
    (added to fedstream since) held its default then."""
    fields = schema().fields
    before = {k: old[k] if k in old else fields[k].default_for("vfl") if k in fields else None
              for k in set(old) | set(new)}
    changed = sorted(k for k in before if k not in GROWABLE and before[k] != new.get(k))
    if changed:
        detail = ", ".join(f"{k}: {before[k]!r} -> {new.get(k)!r}" for k in changed[:5])
        raise ConfigError(
            f"{path} was written by a run with other settings ({detail}); "
            "resume with the same config (only train.epochs may change) or choose another --out"
        )
