"""Predictions of a finished run (``fedstream predict RUN_DIR --data FILE --out preds.csv``).

:func:`predict_run` reads the run's folder, loads its final model and predicts the rows of a data
file through the parties that trained it (:mod:`fedstream.predict.ovfl`: each client embeds its own
feature block, the server predicts; :mod:`fedstream.predict.vfl`: the same with image strips or a
table's columns; :mod:`fedstream.predict.chfl`: one client's validation-chosen model on its own
columns); :func:`write_predictions` writes them as CSV. Rows that carry their labels (an NPZ
file's ``y``, a table's ``data.label`` column) are scored: ``Predictions.score``. With ``ids`` (a
table with one file per party) each client reads its own rows of those ids
(:mod:`fedstream.predict.ids`). Each task
encodes the rows as it encoded its own data (:meth:`fedstream.data.sources.Source.standardise`:
statistics, one-hot categories).
"""

from fedstream.errors import ConfigError
from fedstream.predict.files import (
    Predictions,
    Rows,
    Score,
    read_features,
    read_rows,
    run_summary,
    score_predictions,
    table_label_column,
    write_predictions,
)
from fedstream.predict.ids import party_file, read_ids
from fedstream.runs.task import entry_point
from fedstream.tasks import get_task

__all__ = ["Predictions", "Rows", "Score", "predict_run", "read_features", "read_rows", "score_predictions",
           "write_predictions"]


def predict_run(run_dir, data=None, *, client: int | None = None, ids=None) -> Predictions:
    """The predictions of the finished run in ``run_dir`` for the rows of file ``data`` (an NPZ file
    holding ``X``, or a table file with the run's columns by name); ``client``: the CHFL client whose
    model predicts them. Where the file has the rows' labels (NPZ: ``y``, the class indices 0..C-1
    the run's data gives its labels; a table: the run's label column), ``score`` holds the error of
    the predictions. ``ids`` instead of ``data``: a file whose column ``data.id`` names the rows of a
    table with one file per party; each client looks them up in its own file
    (:mod:`fedstream.predict.ids`)."""
    config = run_summary(run_dir)["config"]
    task = get_task(config["task"])
    if task.predict is None:  # each task names its predictor (Task.predict), imported when used
        raise ConfigError(f"{run_dir}: fedstream predict does not handle task = {task.name!r}")
    if (data is None) == (ids is None):
        raise ConfigError("give the rows to predict: --data FILE (every column) or --ids FILE (one file "
                          "per party: the ids, each client reads its own rows)")
    if ids is not None:
        party_file(config, 0)  # a run with one file per party, else one line
        rows = Rows(read_ids(ids, config.get("data.id")), None)  # raw None: by id, from the parties' files
        return entry_point(task.predict)(run_dir, rows, client=client)
    table = config.get("data.name") == "table"
    rows = read_rows(data, table=table, id_column=config.get("data.id"),
                     label_column=table_label_column(config) if table else None)
    predictions = entry_point(task.predict)(run_dir, rows, client=client)
    if rows.labels is not None:
        predictions.score = score_predictions(predictions, rows.labels, rows.labels_from)
    return predictions
