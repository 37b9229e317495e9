"""The simulator's alignment of per-party files: the server's id column against each client's, by
private set intersection (:func:`fedstream.alignment.align`, the very messages a deployment sends).

:func:`align_tables` gives, for each client, its row of each server row (-1 where it lacks the id)
and, for batch VFL (``shared=True``), the server rows that every party holds. An empty
intersection is a DataError naming the file and the party.
"""

from __future__ import annotations

import numpy as np

from fedstream.alignment import Alignment, align
from fedstream.data.table import Table
from fedstream.data.table_ids import party_ids
from fedstream.errors import DataError


def id_position(table: Table, ref: str, party: str) -> int:
    """The position of ``data.id`` (``ref``) in the file of ``party``; DataError naming both."""
    try:
        return table.index(ref)
    except DataError:
        raise DataError(f"{table.path} ({party}): data.id = {ref!r}: no such column; the file's columns "
                        f"are {', '.join(table.names)}") from None


def intersection_check(server_path, client_paths: list, *, shared: bool = False):
    """The check of an alignment before its rows are placed (:func:`fedstream.alignment.session.
    run_alignment`'s ``check``), the same in the simulator and on a deployment's server: a DataError
    naming the file and the party when a client shares no id with the server's file or, with
    ``shared`` (batch VFL), when no id is held by every party."""

    def check(alignment: Alignment) -> None:
        for m, (path, c) in enumerate(zip(client_paths, alignment.clients)):
            if not len(c.rows):
                raise DataError(f"{path} (client {m}): no id in common with the server's file "
                                f"{server_path}: the private set intersection is empty")
        if not shared:
            return
        every = np.ones(alignment.n_server, dtype=bool)
        for m, (path, c) in enumerate(zip(client_paths, alignment.clients)):
            held = np.zeros(alignment.n_server, dtype=bool)
            held[c.rows] = True
            every &= held
            if not every.any():
                raise DataError(f"{path} (client {m}): no id that the server's file {server_path} and "
                                f"{'every client before it' if m else 'this client'} hold: the parties' "
                                "intersection is empty")

    return check


def align_tables(
    server: Table, sid: int, clients: list[tuple[Table, int]], *, shared: bool = False
) -> tuple[Alignment, list[np.ndarray], np.ndarray | None]:
    """PSI between the server's file (id column ``sid``) and each client's (``(file, id column)``):
    the alignment, each client's row of each kept server row (-1: absent) and the kept server rows
    (``shared``: those every client holds, in server order; otherwise None, all of them)."""
    server_ids = party_ids(server, sid, "the server")
    client_ids = [party_ids(t, j, f"client {m}") for m, (t, j) in enumerate(clients)]
    names = [f"client {m} ({t.path.name})" for m, (t, _) in enumerate(clients)]
    check = intersection_check(server.path, [t.path for t, _ in clients], shared=shared)
    alignment = align(server_ids, client_ids, names=names, shared=shared, check=check)
    rows = alignment.server_to_client()
    if not shared:
        return alignment, rows, None
    keep = alignment.kept
    return alignment, [r[keep] for r in rows], keep
