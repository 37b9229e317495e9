"""VF-PS participant selection over the deployment of batch VFL: the paper's protocol, distances only.

* the distance-based entry point of the selection package (what the server runs on the nodes'
  local distances) gives the block-based path's groups, counts and scores, and its vectorised
  count agrees with the plain per-query reference;
* a loopback deployment with ``selection.method = vfps`` equals the simulator: selected clients,
  scores, per-epoch rows, final models, training bytes; the VF-PS messages are 16 + 4 Q n bytes up
  and 16 + 4 Q down per client and selection, counted apart from the training bytes;
* malformed distance replies (shape, NaN, negative, sender, epoch, garbage) are rejected with a
  clear message, recorded, and end the selection with a ProtocolError, never anything else;
* a node answers a VF-PS request with one distance message and nothing else (no feature).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.deploy.records import ROUND, SETUP, Envelope, Failure
from fedstream.errors import ConfigError, DataError, ProtocolError
from fedstream.selection.group_testing import (
    group_test,
    group_test_from_distances,
    plan_tests,
)
from fedstream.selection.knn_mi import (
    counts_from_distances,
    knn_counts,
    knn_mi_from_distances,
)
from fedstream.selection.methods import VFPSSelector
from fedstream.selection.reference import local_sq_distances, m_from_distances
from fedstream.vfl.data import load_vertical
from fedstream.vfl.deploy.data import batch_settings, load_block, load_labels
from fedstream.vfl.deploy.host import BatchVFLHost
from fedstream.vfl.deploy.vfps import (
    DISTANCES,
    HEADER,
    QUERIES,
    SELECT,
    decode,
    encode,
    local_distances,
)
from tests.helpers.links import RecordingLink, spoiling
from tests.helpers.models import assert_same_models
from tests.helpers.vfl_deploy import (
    ATOL,
    VFL_TINY,
    VFPS,
    assert_same_run,
    deploy_vfl,
    deployed_models,
    simulate_vfl,
)

TINY = VFL_TINY | {"train.epochs": 2} | VFPS  # the keys in the order of VFL_TINY, then VF-PS's
Q, N, M = 50, 200, 3
UP, DOWN = HEADER.size + 4 * Q * N, HEADER.size + 4 * Q  # one selection's messages per client


# -- the selection package's distance-based entry point ----------------------------------------------
def _data(seed=0, n=120, widths=(3, 12, 5)):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    blocks = [rng.integers(0, 6, (n, d)) + (y[:, None] if j == 1 else 0) for j, d in enumerate(widths)]
    return blocks, y


def _local(blocks, queries):
    return np.stack([np.stack([local_sq_distances(b, int(i)) for i in queries]) for b in blocks])


@pytest.mark.parametrize("queries", [None, 40])
def test_distances_give_the_blocks_scores(queries):
    blocks, y = _data()
    groups, q = plan_tests(3, len(y), n_groups=5, queries=queries, seed=7)
    want = group_test(
        blocks, y, n_groups=5, queries=queries, seed=7, k=4
    )  # the simulator's path, its own draws
    assert want.groups == groups
    qs = np.arange(len(y)) if q is None else q
    got = group_test_from_distances(_local(blocks, qs), y, groups, queries=q, k=4)
    np.testing.assert_array_equal(got.group_scores, want.group_scores)
    np.testing.assert_array_equal(got.client_scores, want.client_scores)
    np.testing.assert_array_equal(got.queries, want.queries)
    # the selector: select(blocks) and select_distances(...) with plan()'s draws agree, call after call
    a, b = (
        VFPSSelector(2, k=4, n_groups=5, queries=queries, seed=3),
        VFPSSelector(2, k=4, n_groups=5, queries=queries, seed=3),
    )
    for _ in range(2):
        sel = a.select(blocks, y)
        groups, qs = b.plan(3, len(y))
        other = b.select_distances(_local(blocks, qs), y, groups, qs)
        assert other.clients == sel.clients and other.details == sel.details
        np.testing.assert_array_equal(other.scores, sel.scores)


def test_vectorised_counts_equal_the_plain_reference():
    blocks, y = _data(seed=1, n=90)
    q = np.array([0, 3, 10, 44, 89])
    dist = _local(blocks, q)[[0, 2]].sum(axis=0)
    dist[:, 5] = dist[:, 6]  # ties
    want = [m_from_distances(dist[r], y, int(i), 4) for r, i in enumerate(q)]
    assert counts_from_distances(dist, y, q, 4).tolist() == want
    res = knn_mi_from_distances(_local(blocks, q), y, [(0, 2), (1,)], k=4, queries=q)
    assert res.m_counts.tolist() == knn_counts(blocks, y, [(0, 2), (1,)], k=4, queries=q)[0].tolist()
    with pytest.raises(DataError, match="finite and non-negative"):
        knn_mi_from_distances(-_local(blocks, q), y, [(0,)], k=4, queries=q)
    with pytest.raises(DataError, match="5 query rows, expected one per query"):
        knn_mi_from_distances(_local(blocks, q), y, [(0,)], k=4, queries=q[:4])


# -- the deployment -------------------------------------------------------------------------------
@pytest.fixture
def tiny(data_root):
    """``vfl-mnist`` with :data:`TINY` on the real MNIST."""
    return load_config("vfl-mnist", TINY | {"data.root": str(data_root)})


def test_loopback_vfps_equals_the_simulator(tiny, data_root, tmp_path):
    want, want_models = simulate_vfl(tiny)
    net, got, link = deploy_vfl(tiny, data_root, tmp_path, RecordingLink)
    seen = [(m, [len(p) for p in r.parts], r.info, sorted(r.arrays)) for m, env, r in link.seen
            if env.info.get("split") == SELECT]  # what the nodes answer to VF-PS requests
    assert seen == [
        (m, [UP], {}, []) for _ in range(2) for m in range(M)
    ]  # the distances, nothing else
    assert got["faults"] == []
    assert_same_run(got, want)  # per-epoch rows, accuracy, training bytes per client and direction
    assert_same_models(deployed_models(net), want_models, atol=ATOL)
    events = [(e["epoch"], e["clients"], e["scores"]) for e in got["selection"]["events"]]
    assert events == [(e["epoch"], e["clients"], e["scores"]) for e in want["selection"]["events"]]
    assert len(events) == 2 and all(len(c) == 2 for _, c, _ in events)  # selection.every = 1: epochs 1 and 2
    assert got["selection_bytes"]["per_client"] == [{"up": 2 * UP, "down": 2 * DOWN}] * M
    assert got["selection_bytes"]["total"] == M * 2 * (UP + DOWN)
    assert [(c["select_up"], c["select_down"]) for c in got["clients"]] == [
        (2 * UP, 2 * DOWN)
    ] * M  # nodes agree
    # every node: setup, 2 selections, finish; the 2 selected ones: 8 training steps and 2 evaluations
    assert link.requests == M * (1 + 2 + 1) + 2 * (2 * 4 + 2)


def _respoil(reply: Envelope, change) -> Envelope:
    values = decode(reply.parts[0], kind=DISTANCES, round=reply.round, client=1, shape=(Q, N))
    kind, rnd, client, values = change(reply.round, np.array(values))
    return Envelope(reply.kind, reply.round, [encode(kind, rnd, client, values)], dict(reply.info))


def _nan(_, v):
    v[0, 0] = np.nan
    return v


SPOILS = {
    "shape": (
        lambda r: _respoil(r, lambda t, v: (DISTANCES, t, 1, v[:, :-1])),
        r"expected shape \(50, 200\), received \(50, 199\)",
    ),
    "nan": (lambda r: _respoil(r, lambda t, v: (DISTANCES, t, 1, _nan(t, v))), "NaN, inf or negative"),
    "negative": (lambda r: _respoil(r, lambda t, v: (DISTANCES, t, 1, -1 - v)), "NaN, inf or negative"),
    "sender": (
        lambda r: _respoil(r, lambda t, v: (DISTANCES, t, 2, v)),
        "expected kind 7, round 1, client 1; received kind 7, round 1, client 2",
    ),
    "epoch": (
        lambda r: _respoil(r, lambda t, v: (DISTANCES, t + 1, 1, v)),
        "expected kind 7, round 1, client 1; received kind 7, round 2",
    ),
    "kind": (lambda r: _respoil(r, lambda t, v: (QUERIES, t, 1, v)), "received kind 6"),
    "garbage": (
        lambda r: Envelope(r.kind, r.round, [r.parts[0][:-3]], r.info),
        r"but the message holds 40013 bytes",
    ),
    "short": (lambda r: Envelope(r.kind, r.round, [b"\x07"], r.info), "shorter than the 16-byte header"),
    "parts": (
        lambda r: Envelope(r.kind, r.round, r.parts * 2, r.info),
        r"expected 1 distance message\(s\), received 2 part\(s\)",
    ),
    "failure": (lambda r: Failure("the client failed: boom"), "boom"),
}


@pytest.mark.parametrize("kind", list(SPOILS))
def test_a_malformed_distance_reply_is_rejected_with_a_clear_message(tiny, data_root, tmp_path, kind, caplog):
    spoil, reason = SPOILS[kind]

    link_cls = spoiling(lambda m, env: m == 1 and env.info.get("split") == SELECT, spoil)

    with (
        caplog.at_level("WARNING", logger="fedstream.deploy"),
        pytest.raises(
            ProtocolError, match=r"epoch 1: VF-PS needs every client's local distances; clients \[1\]"
        ),
    ):
        deploy_vfl(tiny, data_root, tmp_path, link_cls)
    assert re.search("client 1, select request for step 1: .*" + reason, caplog.text), caplog.text


def test_a_node_answers_vfps_with_its_distances_only(tiny, data_root, tmp_path):
    host = BatchVFLHost(tiny, 0, rows=load_block(tiny, 0, cache_dir=tmp_path))
    host.handle(Envelope(SETUP, 0))
    q = np.array([0, 7, 30, 199], dtype="<u4")
    env = Envelope(ROUND, 1, [encode(QUERIES, 1, 0, q[None])], {"split": SELECT, "queries": 4})
    reply = host.handle(env)
    assert reply.info == {} and reply.arrays == {} and len(reply.parts) == 1  # one message, nothing else
    assert len(reply.parts[0]) == HEADER.size + 4 * 4 * N
    got = decode(reply.parts[0], kind=DISTANCES, round=1, client=0, shape=(4, N))
    data = load_vertical(batch_settings(tiny), data_root)
    strip = data.client_features(data.train_x)[0]  # what the simulator's VF-PS reads of client 0
    np.testing.assert_array_equal(got, np.stack([local_sq_distances(strip, int(i)) for i in q]))
    assert got.dtype == np.float32 and np.array_equal(local_distances(strip, q), got)
    assert not any(strip.tobytes() in p for p in reply.parts)
    assert host.state_dict()["vfl"] is not None and host.select_up == len(reply.parts[0])
    bad = {
        "queries": (
            Envelope(ROUND, 1, env.parts, {"split": SELECT, "queries": 5}),
            r"expected shape \(1, 5\)",
        ),
        "count": (
            Envelope(ROUND, 1, env.parts, {"split": SELECT, "queries": 0}),
            "info 'queries' must count",
        ),
        "recipient": (
            Envelope(ROUND, 1, [encode(QUERIES, 1, 1, q[None])], {"split": SELECT, "queries": 4}),
            "client 0; received kind 6, round 1, client 1",
        ),
        "range": (
            Envelope(
                ROUND,
                1,
                [encode(QUERIES, 1, 0, np.array([[0, 200]], "<u4"))],
                {"split": SELECT, "queries": 2},
            ),
            "increasing rows in 0..199",
        ),
        "none": (Envelope(ROUND, 1, [], {"split": SELECT, "queries": 4}), "expected one query message"),
    }
    for e, reason in bad.values():
        with pytest.raises(ProtocolError, match=reason):
            host.handle(e)
    # the labels are all the server holds; its VF-PS never reads a pixel
    held = set(vars(load_labels(tiny, str(data_root))))
    assert held == {"dataset", "train_y", "test_y", "classes", "n_classes", "ids", "alignment"}  # no features


def test_a_distance_message_too_big_for_flower_is_refused_naming_the_key(tiny, data_root, tmp_path):
    from fedstream.vfl.deploy.vfps import check_size
    from fedstream.vfl.selection import SelectionSpec

    check_size(SelectionSpec(method="vfps", queries=279), 60_000)  # 279 x 60,000 float32: 66,960,016 bytes
    with pytest.raises(ConfigError, match=r"selection.queries = None: .* set selection.queries <= 279"):
        check_size(SelectionSpec(method="vfps"), 60_000)


def test_vfps_messages_cross_flowers_records_unchanged():
    """The VF-PS request and reply through the RecordDicts the Flower link uses (no Flower process)."""
    pytest.importorskip("flwr", reason="Flower is the optional extra: pip install 'fedstream[flower]'")
    from fedstream.deploy.runtimes.flower_grid import from_record, to_record

    q = np.array([[1, 5, 9]], "<u4")
    dist = np.arange(3 * N, dtype=np.float32).reshape(3, N)
    for env in (Envelope(ROUND, 2, [encode(QUERIES, 2, 1, q)], {"split": SELECT, "queries": 3}),
                Envelope(ROUND, 2, [encode(DISTANCES, 2, 1, dist)], {})):
        back = from_record(to_record(env), "test")
        assert (back.kind, back.round, back.parts, dict(back.info)) == (
            env.kind,
            env.round,
            env.parts,
            env.info,
        )
    np.testing.assert_array_equal(
        decode(back.parts[0], kind=DISTANCES, round=2, client=1, shape=(3, N)), dist
    )
