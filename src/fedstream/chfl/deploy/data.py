"""A CHFL client node's own part of the data set: its rows and its columns, nothing else.

Batch mode (:func:`load_part`): the simulator's splits from the same seeds
(:func:`fedstream.chfl.plan.prepare_client`), client ``index``'s view kept and cached in the node's
cache folder under a digest of what decides it. Stream mode (:func:`load_stream_part`): the
simulator's layout (:func:`fedstream.chfl.stream.stream_layout`) and the node's part of it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from fedstream.chfl.client import ClientData, View
from fedstream.chfl.runner import chfl_settings, stream_settings
from fedstream.chfl.settings import CHFLSettings, named_by_config
from fedstream.chfl.splits import FeatureSplit
from fedstream.chfl.stream import StreamLayout, StreamSettings, stream_layout, stream_rows, stream_view
from fedstream.chfl.trainer import prepare_client
from fedstream.data.chfl_datasets import SPECS, load_chfl_dataset
from fedstream.data.paths import resolve_data_root
from fedstream.deploy.cache import NodeCache
from fedstream.deploy.records import check_client_index
from fedstream.errors import ConfigError

FORMAT = 1


@dataclass
class NodePart:
    """Client ``index``'s view of the run's data (see the module doc)."""

    index: int
    features: FeatureSplit
    data: ClientData
    n_rows: int  # rows of the run (after max_rows), shared by every client
    n_classes: int
    n_features: int

    @property
    def unique_sizes(self) -> list[int]:
        return [len(u) for u in self.features.unique]

    def sizes(self) -> dict[str, int]:
        """What the node tells the server at setup: sizes only, no data."""
        d = self.data
        return {
            "n_rows": self.n_rows,
            "n_classes": self.n_classes,
            "n_features": self.n_features,
            "n_common": len(self.features.common),
            "n_unique": int(d.train.xu.shape[1]),
            "n_train": int(d.train.y.shape[0]),
            "n_val": int(d.val.y.shape[0]),
            "n_test": int(d.test.y.shape[0]),
        }


def chfl_config_settings(config: dict) -> CHFLSettings:
    """The run's CHFL settings; a bad value is reported by its config key (``chfl.*``). Deployed
    parties compute on the CPU (``device`` applies to the simulator)."""
    with named_by_config():
        return replace(chfl_settings(config), device="cpu")


def stream_config_settings(config: dict) -> StreamSettings:
    """The run's streaming settings; a bad value is reported by its config key (``chfl.*``)."""
    with named_by_config():
        return stream_settings(config)


SPLIT_FIELDS = ("dataset", "clients", "common_ratio", "split", "split_index", "max_rows")


def load_part(
    config: dict, index: int, *, data_root: str | None = None, cache_dir: Path | None = None
) -> NodePart:
    """Client ``index``'s part of ``config``'s data set, from the cache if there (see the module doc)."""
    settings = chfl_config_settings(config)
    check_client_index(index, settings.clients, "chfl.clients")
    root = str(resolve_data_root(data_root or config["data.root"]))
    cache = NodeCache(cache_dir, "chfl",
                      [FORMAT, root, config["seed"], index] + [getattr(settings, f) for f in SPLIT_FIELDS])
    saved = cache.load()
    if saved is not None:
        return _read(saved, index)
    part = _build(settings, config["seed"], index, root)
    cache.save(_arrays(part))
    return part


def _build(settings: CHFLSettings, seed: int, index: int, root: str) -> NodePart:
    table = load_chfl_dataset(settings.dataset, root).table
    with named_by_config():
        fs, data, n_rows, n_classes = prepare_client(table.X, table.y, settings, seed=seed, client=index,
                                                     n_classes=SPECS[settings.dataset].n_classes)
    return NodePart(index, fs, data, n_rows, n_classes, int(table.X.shape[1]))


VIEWS = ("train", "val", "test")


def _arrays(part: NodePart) -> dict[str, np.ndarray]:
    arrays = {"common": part.features.common} | {f"unique{k}": u for k, u in enumerate(part.features.unique)}
    for split in VIEWS:
        view = getattr(part.data, split)
        arrays |= {
            f"{split}.xc": view.xc.numpy(),
            f"{split}.xu": view.xu.numpy(),
            f"{split}.y": view.y.numpy(),
        }
    meta = {
        "index": part.index,
        "n_rows": part.n_rows,
        "n_classes": part.n_classes,
        "n_features": part.n_features,
        "clients": part.features.n_clients,
    }
    return arrays | {"meta": np.frombuffer(json.dumps(meta).encode(), np.uint8)}


def _read(z: dict[str, np.ndarray], index: int) -> NodePart:
    meta = json.loads(z["meta"].tobytes())
    fs = FeatureSplit(z["common"], tuple(z[f"unique{k}"] for k in range(meta["clients"])))
    views = [View(*(torch.from_numpy(np.array(z[f"{s}.{n}"])) for n in ("xc", "xu", "y"))) for s in VIEWS]
    if meta["index"] != index:
        raise ValueError(f"the node's cache holds client {meta['index']}'s part, not client {index}'s")
    return NodePart(index, fs, ClientData(*views), meta["n_rows"], meta["n_classes"], meta["n_features"])


@dataclass
class StreamPart:
    """Client ``index``'s rows of a streaming run, and the run's layout (sizes and indices only)."""

    index: int
    view: View
    layout: StreamLayout
    n_rows: int
    n_features: int
    n_classes: int


def load_stream_part(config: dict, index: int, *, data_root: str | None = None) -> StreamPart:
    """Client ``index``'s part of ``config``'s data set in a streaming run (see the module doc)."""
    s = stream_config_settings(config)
    check_client_index(index, s.clients, "chfl.clients")
    table = load_chfl_dataset(s.dataset, resolve_data_root(data_root or config["data.root"])).table
    X, y = stream_rows(table.X, table.y, s, config["seed"])
    layout = stream_layout(len(y), X.shape[1], s, config["seed"])
    if layout.n_ticks < 1:
        raise ConfigError(f"chfl.stream_batch = {s.batch}: expected at most {len(y) // s.clients} (the rows "
                          "per client)")
    fs = layout.features
    view = stream_view(X, y, layout.parts[index], fs.common, fs.unique[index], s.stats_rows)
    return StreamPart(index, view, layout, len(y), int(X.shape[1]), SPECS[s.dataset].n_classes)
