"""Checkpoints and metrics rows of CHFL runs, so that an interrupted run resumes where it stopped.

A run folder (``fedstream run ... --out DIR``, or a run of the experiment runner) holds

* ``metrics.csv``: one row per evaluation, appended and flushed as it is produced (batch: the
  clients' mean best validation accuracy after each FedAvg round of each learning rate; stream:
  the prequential accuracy of each ``eval_every`` ticks);
* ``checkpoint.pt``: everything the run needs to continue, written atomically after every FedAvg
  round (batch) or every FedAvg synchronisation (stream): every client's columns and heads, their
  Adam states and random generators, the server's model, the validation records and snapshots of
  the model choice, the byte ledger and the metrics rows so far.

A resumed run gives the same models, choices, accuracies and byte counts as an uninterrupted one
(the tests check it); only timings differ. The checkpoint records what run wrote it (settings,
method, seed, data size) and refuses to resume another. It is deleted once the run's
``summary.json`` is written: a finished run is recognised by its summary, and a checkpoint of the
paper's network is tens of MB, too many to keep for every run of a table.

The file is a ``torch.save`` archive of tensors, numbers, strings, lists and dicts only, read back
with ``torch.load(weights_only=True)``: loading a checkpoint cannot run code. It is written
atomically with the sha256 of its content, checked on load (:mod:`fedstream.runs.checkpoint`).

The simulator and a deployed CHFL server (:mod:`fedstream.chfl.deploy.driver`) write the same format
under the same file name and identity, but their states differ (the simulator's holds every
client; the server's only what it knows of its nodes). The archive says who wrote it (``kind``:
None for the simulator, ``"deployed-server"`` for a deployed server, as batch VFL's checkpoints
do) and each refuses the other's with a :class:`CheckpointError` that says how to resume it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fedstream.chfl.settings import CONFIG_KEYS
from fedstream.runs.batch import CHECKPOINT
from fedstream.runs.checkpoint import CheckpointError
from fedstream.runs.folder import RunFolder as BaseRunFolder
from fedstream.runs.torch_checkpoint import load_torch, save_torch

if TYPE_CHECKING:  # the annotations only: persistence does not depend on FedAvg
    from fedstream.chfl.fedavg import FedAvgServer

FORMAT = 1
METRICS = "metrics.csv"
SIMULATOR: str | None = None  # the kind of the simulator's checkpoints (older ones hold no "kind" at all)
DEPLOYED = "deployed-server"  # the kind of a deployed CHFL server's checkpoints
WRITERS = {  # kind -> who wrote such a checkpoint and how to resume it
    SIMULATOR: "written by the simulator: resume it with `fedstream run` (same config and --out)",
    DEPLOYED: "written by a deployed server: resume it with `fedstream deploy local|app ... --resume` "
              "(same config and --out)",
}


__all__ = ["CheckpointError", "RunFolder", "check_identity", "read_checkpoint"]


class RunFolder(BaseRunFolder):
    """The checkpoint and the metrics rows of one CHFL run in ``folder`` (created if absent).

    ``identity`` says which run this is (settings, method, seed, data size); a checkpoint written
    under another identity is refused by :meth:`resume`. ``columns`` are the metrics.csv columns.
    ``resume=False``: start afresh, ignoring (and later overwriting) any checkpoint there.
    ``name``: the checkpoint's file name (a deployed server's ``--out`` folder holds other files).
    ``kind``: who writes the checkpoint (:data:`SIMULATOR` or :data:`DEPLOYED`); one of the other
    kind is refused by :meth:`resume`.
    """

    def __init__(self, folder: str | os.PathLike[str], identity: Mapping[str, Any], columns: Sequence[str],
                 *, resume: bool = True, name: str = CHECKPOINT, kind: str | None = SIMULATOR):
        super().__init__(folder, checkpoint_name=name, columns=columns)
        self.folder = self.path
        self.name = name
        self.kind = kind
        self.identity = dict(identity)
        self.allow_resume = resume
        self.rows: list[dict] = []
        self.create()

    def resume(self) -> dict | None:
        """The saved state if a checkpoint exists (its rows become metrics.csv again), else None.

        Rows appended after the checkpoint was written are dropped: the resumed run writes them
        again. Raises CheckpointError for an unreadable file, another run's checkpoint or one of
        another kind (nothing is changed then: metrics.csv is rewritten only after the checks).
        """
        if not self.allow_resume or not self.checkpoint.exists():
            self.start_metrics([])
            return None
        saved = read_checkpoint(self.checkpoint, kind=self.kind)
        check_identity(self.checkpoint, saved["identity"], self.identity)
        self.rows = [dict(r) for r in saved.get("rows", [])]
        self.start_metrics(self.rows)
        return saved["state"]

    def append(self, row: Mapping[str, Any]) -> None:
        """Record one metrics row and append it to metrics.csv at once."""
        row = {c: row.get(c) for c in self.columns}
        self.rows.append(row)
        self.append_row(row)

    def save(self, state: Mapping[str, Any]) -> None:
        """Write ``state`` (with the identity and the rows so far) atomically to checkpoint.pt."""
        save_torch(self.checkpoint, {"format": FORMAT, "kind": self.kind, "identity": self.identity,
                                     "rows": self.rows, "state": dict(state)})

    def discard(self) -> None:
        """Delete the checkpoint (once the run's summary is written)."""
        self.checkpoint.unlink(missing_ok=True)


def read_checkpoint(path: str | os.PathLike[str], *, kind: str | None = SIMULATOR) -> dict:
    """The archive :meth:`RunFolder.save` wrote at ``path``: ``{"format", "kind", "identity", "rows",
    "state"}``.

    Raises CheckpointError for a file that cannot be read, is not a CHFL checkpoint, or was written
    by another kind of party than ``kind`` (:data:`SIMULATOR`, :data:`DEPLOYED`): the message says
    which and how to resume it.
    """
    path = Path(path)
    try:
        saved = load_torch(path)
    except (FileNotFoundError, CheckpointError) as exc:  # missing, truncated, damaged, not torch, no hash
        reason = exc.reason if isinstance(exc, CheckpointError) else exc
        raise CheckpointError(path, f"cannot read the checkpoint ({reason}); delete it to start the run "
                              "again") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT or "state" not in saved:
        raise CheckpointError(path, f"not a CHFL checkpoint of format {FORMAT}; delete it "
                              "to start the run again")
    saved.setdefault("identity", {})
    found = saved.setdefault("kind", SIMULATOR)  # a checkpoint of before kinds: the simulator's
    if found != kind:
        writer = WRITERS.get(
            found, f"of kind {found!r}, written by neither the simulator nor a deployed server"
        )
        reader = "a deployed server" if kind == DEPLOYED else "the simulator"
        raise CheckpointError(
            path, f"a CHFL checkpoint {writer}; {reader} cannot resume it. Choose another "
            "--out, or delete it to start again"
        )
    if _nonfinite(saved["state"]):
        raise CheckpointError(path, "checkpoint refused: its state holds NaN or inf (the run had diverged); "
                              "delete it and start again with smaller learning rates")
    return saved


def _nonfinite(obj: Any, depth: int = 0) -> bool:
    """Whether a float tensor in ``obj`` (nested dicts and lists) holds NaN or inf."""
    if isinstance(obj, torch.Tensor):
        return obj.is_floating_point() and not bool(torch.isfinite(obj).all())
    if depth < 8 and isinstance(obj, Mapping):
        return any(_nonfinite(v, depth + 1) for v in obj.values())
    if depth < 8 and isinstance(obj, (list, tuple)):
        return any(_nonfinite(v, depth + 1) for v in obj)
    return False


def check_identity(path: Path, saved: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Refuse a checkpoint of another run, naming the config keys that differ."""
    if saved == current:
        return
    flat_saved, flat_now = _flatten(saved), _flatten(current)
    diffs = [f"{CONFIG_KEYS.get(k, k)} = {flat_saved.get(k)!r} there, {flat_now.get(k)!r} here"
             for k in sorted(set(flat_saved) | set(flat_now)) if flat_saved.get(k) != flat_now.get(k)]
    raise CheckpointError(path, f"belongs to another run ({'; '.join(diffs)}): resuming needs the same "
                          "settings; choose another --out, or delete the checkpoint to start again", sep=" ")


def _flatten(d: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out |= _flatten(v)
        else:
            out[k] = list(v) if isinstance(v, tuple) else v
    return out


def ledger_state(ledger) -> dict[str, list[int]]:
    """A :class:`~fedstream.transport.ledger.ByteLedger`'s counters as plain lists."""
    return {"up": list(ledger.up), "down": list(ledger.down), "messages": list(ledger.messages)}


def load_ledger(ledger, state: Mapping[str, Sequence[int]]) -> None:
    for k in ("up", "down", "messages"):
        setattr(ledger, k, [int(v) for v in state[k]])


def arrays_to_tensors(arrays: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """numpy arrays -> tensors (copies), for a weights-only checkpoint."""
    return {k: torch.tensor(v) for k, v in arrays.items()}


def tensors_to_arrays(tensors: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    return {k: v.numpy().copy() for k, v in tensors.items()}


def server_state(server: FedAvgServer | None) -> dict[str, Any] | None:
    """The FedAvg server's part of a checkpoint: its round and θ (None: a run without one, Local)."""
    return None if server is None else {"round": server.round, "tensors": arrays_to_tensors(server.state)}


def load_server(server: FedAvgServer | None, state: Mapping[str, Any] | None) -> None:
    """Restore :func:`server_state`'s ``state`` into ``server`` (None: a run without one, nothing)."""
    if server is None:
        return
    server.state = tensors_to_arrays(state["tensors"])
    server.round = int(state["round"])
