"""Online VFL beside River's own classifiers on River's bundled streams (issue 32).

Each stream is played once, in its order, through River's ``evaluate.progressive_val_score``
(predict, then learn, one sample at a time), by:

* ``OnlineVFL``: :class:`fedstream.ovfl.OnlineVFL` behind River's ``StandardScaler``, the features
  split between two clients (the first half of the stream's feature names, then the rest), its
  defaults otherwise (DLR, one-layer bottoms, full activation), every label given up front;
* River's ``LogisticRegression`` behind the same ``StandardScaler`` (one-vs-rest for a stream
  with more than two classes);
* River's ``HoeffdingTreeClassifier`` on the raw features (a tree needs no scaling).

Streams: ``Phishing`` (1,250 samples, 9 features, 2 classes), ``Bananas`` (5,300, 2, 2) and
``ImageSegments`` (2,310, 18, 7), all shipped inside River (nothing is downloaded). Reported:
progressive accuracy and wall seconds of each model on each stream.
"""

from __future__ import annotations

import time

STREAMS = ("Phishing", "Bananas", "ImageSegments")
MODELS = ("OnlineVFL", "LogisticRegression", "HoeffdingTreeClassifier")


def _stream(name: str):
    from river import datasets

    data = getattr(datasets, name)()
    rows = list(data)
    return rows, list(rows[0][0]), sorted({y for _, y in rows}, key=str)


def make_model(model: str, features: list[str], classes: list, seed: int = 0):
    """One of :data:`MODELS`, set up for a stream with ``features`` and ``classes``."""
    from river import linear_model, multiclass, preprocessing, tree

    from fedstream.ovfl import OnlineVFL

    if model == "OnlineVFL":
        half = (len(features) + 1) // 2
        partition = {"client0": features[:half], "client1": features[half:]}
        return preprocessing.StandardScaler() | OnlineVFL(partition=partition, classes=classes, seed=seed)
    if model == "LogisticRegression":
        linear = linear_model.LogisticRegression()
        return preprocessing.StandardScaler() | (
            linear if len(classes) == 2 else multiclass.OneVsRestClassifier(linear))
    if model == "HoeffdingTreeClassifier":
        return tree.HoeffdingTreeClassifier()
    raise ValueError(f"model {model!r}: expected one of {', '.join(MODELS)}")


def run(streams=STREAMS, models=MODELS, seed: int = 0) -> list[dict]:
    """A row per (stream, model): ``stream``, ``model``, ``samples``, ``accuracy``, ``seconds``."""
    from river import evaluate, metrics

    rows = []
    for name in streams:
        data, features, classes = _stream(name)
        for model in models:
            tic = time.perf_counter()
            metric = evaluate.progressive_val_score(data, make_model(model, features, classes, seed),
                                                    metrics.Accuracy())
            rows.append({"stream": name, "model": model, "samples": len(data), "accuracy": metric.get(),
                         "seconds": time.perf_counter() - tic})
    return rows


def markdown(rows: list[dict]) -> str:
    """The table: a row per stream, accuracy (seconds) per model."""
    models = list(dict.fromkeys(r["model"] for r in rows))
    out = ["| stream | samples | " + " | ".join(models) + " |", "|---|---:|" + "---:|" * len(models)]
    for stream in dict.fromkeys(r["stream"] for r in rows):
        cells = {r["model"]: r for r in rows if r["stream"] == stream}
        n = next(iter(cells.values()))["samples"]
        out.append(f"| {stream} | {n:,} | " + " | ".join(
            f"{cells[m]['accuracy']:.2%} ({cells[m]['seconds']:.1f} s)" for m in models) + " |")
    return "\n".join(out)
