"""Private entity alignment's speed: the PSI of N server ids with one client's N ids (85 % shared),
through the encoded messages of :func:`fedstream.alignment.align`, against a plain set
intersection of the same ids in the same process (the reference, which reveals every id).

    fedstream bench psi --ids 100000          # or scripts/bench_psi.sh

It reports the seconds of each side (the server blinding its ids once, then the client's reply and
the server's conclusion), the bytes each way, ids per second, and whether the PSI found exactly the
plain intersection. The target of issue 30 is 100,000 x 100,000 ids in at most 20 s on 2 cores.
"""

from __future__ import annotations

import os
import platform
import time

TARGET_SECONDS = {100_000: 20.0}


def make_ids(n: int, overlap: float = 0.85, seed: int = 0) -> tuple[list[str], list[str]]:
    """N server ids and N client ids of which ``overlap`` are the server's, both shuffled."""
    import random

    rng = random.Random(seed)
    shared = int(overlap * n)
    server = [f"cust-{i:09d}" for i in range(n)]
    client = server[:shared] + [f"other-{i:09d}" for i in range(n - shared)]
    rng.shuffle(server)
    rng.shuffle(client)
    return server, client


def bench_psi(n: int, *, overlap: float = 0.85) -> dict:
    """One alignment of n x n ids; the plain intersection's time for the ratio."""
    from fedstream.alignment import align

    server, client = make_ids(n, overlap)
    tic = time.perf_counter()
    plain = sorted(set(server) & set(client))
    plain_seconds = time.perf_counter() - tic
    tic, cpu = time.perf_counter(), time.process_time()
    out = align(server, [client])
    seconds, cpu = time.perf_counter() - tic, time.process_time() - cpu
    got = out.clients[0]
    return {
        "ids": n, "overlap": overlap, "shared": int(len(got.rows)),
        "exact": [server[i] for i in got.rows.tolist()] == plain,
        "seconds": seconds, "cpu_seconds": cpu, "request_seconds": out.request_seconds,
        "client_seconds": got.seconds,
        "bytes_down": got.bytes_down, "bytes_up": got.bytes_up, "ids_per_second": 2 * n / seconds,
        "plain_seconds": plain_seconds, "ratio_to_plain": seconds / plain_seconds if plain_seconds else None,
        "target_seconds": TARGET_SECONDS.get(n), "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
        "machine": platform.processor() or platform.machine(),
    }


def format_psi(row: dict) -> str:
    target = row["target_seconds"]
    verdict = f"  target <= {target:g} s: {'met' if row['seconds'] <= target else 'missed'}" if target else ""
    return (f"PSI {row['ids']:,} x {row['ids']:,} ids ({row['shared']:,} shared, exact: {row['exact']}): "
            f"{row['seconds']:.1f} s wall, {row['cpu_seconds']:.1f} s CPU (server request "
            f"{row['request_seconds']:.1f} s, client + conclusion {row['client_seconds']:.1f} s), "
            f"{row['bytes_down'] / 1e6:.1f} MB down, "
            f"{row['bytes_up'] / 1e6:.1f} MB up, {row['ids_per_second']:,.0f} ids/s; plain intersection "
            f"{row['plain_seconds']:.3f} s (x{row['ratio_to_plain']:.0f}); load {row['load_average']:.1f} "
            f"on {row['cpus']} cpus.{verdict}")
