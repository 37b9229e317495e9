"""Data layer: file readers (IDX, UCI CSV, npz), index-addressed sources and the round stream.

Typical use::

    root = resolve_data_root(cfg_data_root)          # config > $FEDSTREAM_DATA > ./data > ../shared/data
    src = load_source("imnist", root, seed=seed)      # or mnist, fashion-mnist, higgs, susy
    stream = Stream(src, drift="class-prior", drift_every=50, seed=seed)
    X, y, idx = stream.batch(t0, n)                   # rounds t0..t0+n-1, stateless
"""

from fedstream.data.idx import read_idx_images, read_idx_labels
from fedstream.data.imnist import InfiniteMNIST, measure_throughput
from fedstream.data.paths import find_file, resolve_data_root
from fedstream.data.sources import (
    SOURCE_NAMES,
    ImageSource,
    Source,
    TabularSource,
    clear_cache,
    load_mnist_like,
    load_source,
)
from fedstream.data.stream import DRIFTS, Stream
from fedstream.data.table import Table, read_table
from fedstream.data.table_source import TableSource, TableSpec, load_table_source
from fedstream.data.tabular import read_higgs_npz, read_uci_csv

__all__ = [
    "DRIFTS",
    "SOURCE_NAMES",
    "ImageSource",
    "InfiniteMNIST",
    "Source",
    "Stream",
    "Table",
    "TableSource",
    "TableSpec",
    "TabularSource",
    "clear_cache",
    "find_file",
    "load_mnist_like",
    "load_source",
    "load_table_source",
    "measure_throughput",
    "read_higgs_npz",
    "read_idx_images",
    "read_idx_labels",
    "read_table",
    "read_uci_csv",
    "resolve_data_root",
]
