"""A client node's own feature block of the stream, kept on the node between requests.

:class:`BlockRows` computes a chunk's rows at most once, keeps only this client's columns and saves
them in the node's cache (:class:`~fedstream.deploy.cache.NodeCache`, named by a digest of what
decides the rows); :class:`PartyRows` reads a party's own table file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedstream.data.table_party import ClientTable
from fedstream.data.table_source import TableSpec
from fedstream.deploy.cache import NodeCache
from fedstream.deploy.records import check_client_index
from fedstream.ovfl.deploy.parties import client_rows, party_stream
from fedstream.ovfl.engine import CHUNK, STREAM_KEYS, feature_blocks

# chunks of rows a node keeps in its cache behind the one it reads (each CHUNK rows of its block): a
# run started again from an earlier round (a restarted server, the bench's runs from round 0) reads
# them back rather than computing them again
KEEP_CHUNKS = 8


class BlockRows:
    """Client ``index``'s columns of the rounds of ``config``'s stream, cached per chunk in ``cache_dir``
    (``None``: no cache, the stream is built in this process)."""

    ids: str | None = None  # only a party's own table file has them (PartyRows)
    categorical: list[str] | None = None

    def __init__(
        self, config: dict, index: int, *, data_root: str | None = None, cache_dir: Path | None = None
    ):
        M = config["vfl.clients"]
        check_client_index(index, M, "vfl.clients", name="data.client_index")
        self.config = dict(config, **{"data.root": data_root}) if data_root else dict(config)
        self.index = index
        key = [self.config[k] for k in (*STREAM_KEYS, "vfl.clients")] + [index]
        self.cache = NodeCache(cache_dir, "ovfl", key)
        self._chunk: tuple[int, np.ndarray] | None = None
        meta = self.cache.load("meta")
        if meta is not None:
            self.n_features = int(meta["n_features"])
        else:
            self.n_features = party_stream(self.config).source.n_features
            self.cache.save({"n_features": np.array(self.n_features)}, "meta")
        self.block = feature_blocks(self.n_features, M)[index]

    def holds(self, t0: int, n: int) -> np.ndarray:
        """bool (n,): whether it holds the rows of rounds t0..t0+n-1: always."""
        return np.ones(n, bool)

    def rows(self, t0: int, n: int) -> np.ndarray:
        """float32 (n, block width): this client's features of rounds t0..t0+n-1."""
        out = np.empty((n, self.block.stop - self.block.start), np.float32)
        t = t0
        while t < t0 + n:
            chunk = t // CHUNK
            block = self._load(chunk)
            stop = min(t0 + n, (chunk + 1) * CHUNK)
            out[t - t0:stop - t0] = block[t - chunk * CHUNK:stop - chunk * CHUNK]
            t = stop
        return out

    def _load(self, chunk: int) -> np.ndarray:
        if self._chunk is not None and self._chunk[0] == chunk:
            return self._chunk[1]
        block = self.cache.array(f"chunk{chunk}")
        if block is None:
            block = client_rows(party_stream(self.config), chunk * CHUNK, CHUNK, self.block)
            self.cache.save_array(f"chunk{chunk}", block)
            self.cache.drop_before("chunk", chunk - KEEP_CHUNKS)  # all but the last KEEP_CHUNKS behind
        self._chunk = (chunk, block)
        return block


class PartyRows:
    """Client ``index``'s rows of a table with one file per party, read from its own file and no other
    (:class:`~fedstream.data.table_party.ClientTable`): ``n_features`` is its own width, ``block``
    all of it, ``ids`` the digest of its ids (the server checks them against its own), ``categorical``
    the columns of ``data.categorical`` it holds."""

    def __init__(self, config: dict, index: int, placement: np.ndarray | None = None):
        check_client_index(index, config["vfl.clients"], "vfl.clients", name="data.client_index")
        self.index, self.config = index, config
        self.table = ClientTable(TableSpec.from_config(config), index, placement=placement)
        # placed: whether it holds each server row's id (an absent row's event never activates it)
        self.held = None if placement is None else placement >= 0
        self.n_features = self.table.width
        self.block = slice(0, self.table.width)
        self.ids, self.categorical = self.table.ids, self.table.categorical

    def rows(self, t0: int, n: int) -> np.ndarray:
        """float32 (n, width): this client's features of rounds t0..t0+n-1."""
        return self.table.rows(t0, n)

    def place(self, placement: np.ndarray) -> PartyRows:
        """Its rows in the server's order, as the alignment placed them (:mod:`fedstream.deploy.psi`)."""
        return PartyRows(self.config, self.index, placement)

    def holds(self, t0: int, n: int) -> np.ndarray:
        """bool (n,): whether it holds the ids of rounds t0..t0+n-1 (always, unless placed with
        absent rows; the stream wraps around the file)."""
        if self.held is None:
            return np.ones(n, bool)
        return self.held[np.arange(t0, t0 + n) % len(self.held)]
