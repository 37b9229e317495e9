"""Predictions of a finished run (``fedstream predict RUN_DIR --data FILE --out preds.csv``).

:func:`predict_run` reads the run's folder, loads its final model and predicts the rows of a data
file through the parties that trained it (:mod:`fedstream.predict.ovfl`: each client embeds its own
feature block, the server predicts; :mod:`fedstream.predict.vfl`: the same with image strips);
:func:`write_predictions` writes them as CSV.
"""

from fedstream.errors import ConfigError
from fedstream.predict.files import Predictions, read_features, run_task, write_predictions
from fedstream.runs.task import entry_point
from fedstream.tasks import get_task

__all__ = ["Predictions", "predict_run", "read_features", "write_predictions"]


def predict_run(run_dir, data) -> Predictions:
    """The predictions of the finished run in ``run_dir`` for the rows of NPZ file ``data``."""
    task = get_task(run_task(run_dir))
    if task.predict is None:  # each task names its predictor (Task.predict), imported when used
        raise ConfigError(f"{run_dir}: fedstream predict does not handle task = {task.name!r} yet (a "
                          "finished CHFL run keeps no final model: its checkpoint is removed at the end)")
    return entry_point(task.predict)(run_dir, read_features(data))
