"""``fedstream predict RUN_DIR --data FILE|--ids FILE --out preds.csv``: predictions of a finished run
(``ovfl``, ``vfl`` and ``chfl``; :mod:`fedstream.predict`)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from fedstream.cli.common import out_dir, table
from fedstream.predict import predict_run, write_predictions


def add_parsers(sub) -> None:
    predict = sub.add_parser("predict", help="predict rows with the final model of a finished run")
    predict.add_argument("run", type=Path, help="the --out folder of a finished `fedstream run`")
    predict.add_argument("--ids", type=Path, default=None,
                         help="a table with one file per party: a file (CSV, ...) whose column named as "
                              "the run's data.id lists the ids to predict; each client reads its own rows "
                              "of them from its own file (instead of --data)")
    predict.add_argument("--data", type=Path, default=None,
                         help="NPZ file: X, the dataset's raw rows (tabular: (n, columns); images: "
                              "0-255, (n, H, W) or flattened), and optionally id (n,) and y (n,), the "
                              "labels as the run's classes (the p_<class> columns: 0..C-1; covertype, "
                              "Sensorless: the file's label minus 1), then the error is printed; a run on "
                              "data.name = table: a table file (CSV, CSV.gz, NPZ, Parquet) with its "
                              "columns by name (and data.id; with the label column the error is printed)")
    predict.add_argument("--client", type=int, default=None,
                         help="chfl: the client whose validation-chosen model predicts the rows, on its "
                              "own columns (default 0)")
    predict.add_argument("--out", type=out_dir, required=True,
                         help="CSV to write: id, prediction, p_<class> for each class")
    predict.add_argument("--quiet", action="store_true", help="no table")


def cmd_predict(args) -> int:
    predictions = predict_run(args.run, args.data, client=args.client, ids=args.ids)
    path = write_predictions(predictions, args.out)
    if not args.quiet:
        rows = [("rows", f"{len(predictions.ids):,}"), *predictions.parties.items(), ("written", str(path))]
        if predictions.score is not None:
            s = predictions.score
            rows.append(("labelled rows", f"{s.rows:,}: error {s.error:.4f}, accuracy {s.accuracy:.4f}"))
        Console().print(table(f"fedstream predict: {args.run}", rows))
    return 0


COMMANDS = {"predict": cmd_predict}
