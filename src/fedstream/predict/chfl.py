"""Predictions of a finished batch CHFL run, by the client whose model predicts.

CHFL is horizontal: every client holds whole rows (the common columns and its own), so one client
predicts a row alone, with its validation-chosen model (:class:`fedstream.chfl.final.FinalModel`:
the run's ``model.pt``, restored into the run's own client). ``--client K`` says which client
(default 0); the rows hold that client's columns (a table run: by name; a data set: its raw rows in
file order, of which the client uses its own columns), standardised by its own training rows.
"""

from __future__ import annotations

from pathlib import Path

from fedstream.chfl.final import FinalModel
from fedstream.errors import ConfigError
from fedstream.predict.files import Predictions, Rows, class_names, run_summary


def predict_chfl(run_dir: Path, rows: Rows, *, client: int | None = None) -> Predictions:
    """Class probabilities for ``rows`` (ids, raw rows) from client ``client``'s chosen model."""
    if rows.raw is None:
        raise ConfigError(f"{run_dir}: --ids: a CHFL client holds whole rows and predicts alone; give "
                          "its rows with --data FILE")
    summary = run_summary(run_dir)
    config = summary["config"]
    if config["chfl.mode"] != "batch":
        raise ConfigError(f"{run_dir}: chfl.mode = {config['chfl.mode']!r}: only a batch CHFL run keeps a "
                          "final model to predict with")
    k = 0 if client is None else client
    final = FinalModel(run_dir, config)
    ch = final.choice(k)
    proba = final.predict_proba(rows.raw, k)
    parties = {f"client {k}": f"its chosen model ({ch.candidate}, lr {ch.lr}, round {ch.round}, validation "
                              f"accuracy {ch.val_acc:.4f}) on its own columns, standardised by its own "
                              "training rows; nothing sent"}
    return Predictions(rows.ids, class_names(summary, proba.shape[1]), proba, parties)
