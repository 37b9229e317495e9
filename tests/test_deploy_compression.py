"""Online VFL with compressed links over the network (issue 10): the simulator's codecs, split.

The node holds the client's end of its link (:class:`~fedstream.transport.compressed.ClientEndpoint`:
encodes embeddings, decodes gradients and shows them to topk-grad's ranking), the server one
:class:`~fedstream.transport.compressed.ServerEndpoint` per client (decodes embeddings into its
embedding cache, encodes gradients with its quantiser table). Against the in-process simulator
(:class:`OnlineVFL` over :class:`~fedstream.transport.compressed.CompressedTransport`):

* B = 1 gives the same models (bitwise) and the same compressed size for every message, for
  top-k + cache up / quantised Huffman down (SLR, so that rows are re-sent and the cache is used),
  topk-grad up, and sign down; and with the server's policy topl;
* B > 1 carries the very same messages and sizes (the codecs' sizes do not depend on the values
  here), the node ranking topk-grad by the last gradient of its previous batch;
* a compressed reply that fails a check leaves the server's cache untouched, a node refuses a
  malformed compressed gradient and changes nothing (its ranking included);
* a crashed node rejoins from its checkpoint (its end of the link included) and the run ends; the
  server resumes exactly from its checkpoint (its ends of the links included);
* (slow) the same over Flower's simulation runtime, B = 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fedstream.compression.topk import unpack_sparse
from fedstream.config import load_config
from fedstream.deploy.host import model_digest
from fedstream.deploy.records import ROUND, SETUP, Envelope
from fedstream.errors import ProtocolError
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.host import ClientHost
from fedstream.ovfl.deploy.parties import server_stream
from fedstream.ovfl.deploy.rows import BlockRows
from fedstream.transport import encode
from fedstream.transport.compressed import (
    ClientEndpoint,
    CompressionSpec,
    ServerEndpoint,
)
from fedstream.transport.messages import Gradient, Query
from fedstream.transport.wire import FRAME_SIZE
from tests.helpers.crashing import crash_then_load, scaled_timeout
from tests.helpers.data import write_learnable_mnist
from tests.helpers.flower import as_set, needs_flower, run_simulation
from tests.helpers.links import spoiling
from tests.helpers.models import assert_same_models
from tests.helpers.ovfl_deploy import (
    CrashAtRound30,
    assert_same_as_simulator,
    link_for,
    load_models,
    loopback_run,
    overrides,
    party_models,
    simulate,
    topl_config,
)

E = 8  # overrides()'s model.embedding

CACHED_QUANT = {"compression.up": "topk", "compression.cache": True, "compression.down": "quant-huffman",
                "optimizer.name": "slr", "optimizer.window": 4}
RANKED = {"compression.up": "topk-grad"}
SIGN = {"compression.down": "sign"}
ALL_STATES = {"compression.up": "topk-grad", "compression.cache": True, "compression.down": "quant-huffman",
              "optimizer.name": "slr", "optimizer.window": 4}  # every codec that keeps state between messages


def config_for(root: Path, rounds: int, compression: dict, **more) -> dict:
    return load_config(None, overrides(root, rounds) | compression | more)


@pytest.mark.parametrize(
    "compression", [CACHED_QUANT, RANKED, SIGN], ids=["topk-cache-quant", "topk-grad", "sign"]
)
def test_compressed_links_over_an_in_process_link_equal_the_simulator(mnist_root, compression):
    """200 rounds, B = 1, every node rebuilt from its saved state for every request."""
    config = config_for(mnist_root, 200, compression)
    engine, sizes, summary = simulate(config)
    net, reports = loopback_run(config)
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes  # message by message, compressed sizes
    got = net.summary()
    for key in ("bytes", "activation_rate", "accumulated_error"):
        assert got[key] == summary[key], key
    assert [(r["up"], r["down"]) for r in reports] == [
        (c["up"], c["down"]) for c in summary["bytes"]["per_client"]
    ]
    plain, _ = loopback_run(
        config_for(
            mnist_root,
            200,
            {"optimizer.name": config["optimizer.name"], "optimizer.window": config["optimizer.window"]},
        ),
        record_sizes=False,
    )
    assert got["bytes"]["total"] < plain.summary()["bytes"]["total"]  # it did compress
    assert model_digest(net.server.model.parameters()) != model_digest(plain.server.model.parameters())
    if compression.get("compression.cache"):  # SLR re-sends each sample in 4 rounds: the cache fills the rest
        np.testing.assert_array_equal(
            net.transport.ends[0].receiver.table.lookup(np.arange(196, 200)),
            engine.transport.inner.server_ends[0].receiver.table.lookup(np.arange(196, 200)),
        )
        uncached, _ = loopback_run(dict(config, **{"compression.cache": False}), record_sizes=False)
        assert model_digest(net.server.model.parameters()) != model_digest(uncached.server.model.parameters())


def test_batches_with_compression_carry_the_same_messages(mnist_root):
    """B = 10, topk-grad up, sign down: every message has the simulator's compressed size (18 bytes
    up: frame + bitmap + one float32; 13 down: frame + one byte of signs; 11 per query), one round
    trip per batch; the node ranks by the last gradient of its previous batch, a sign-decoded one."""
    config = config_for(mnist_root, 200, RANKED | SIGN, **{"network.batch": 10, "optimizer.lr": 0.01})
    engine, sizes, summary = simulate(config)
    net, reports = loopback_run(config)
    got = net.summary()
    assert net.transport.sizes == sizes and got["bytes"] == summary["bytes"]
    assert [(r["up"], r["down"]) for r in reports] == [
        (c["up"], c["down"]) for c in summary["bytes"]["per_client"]
    ]
    assert {s for d, _, s in sizes if d == "up"} == {FRAME_SIZE + 1 + 1 + 4}
    assert {s for d, _, s in sizes if d == "down"} == {FRAME_SIZE + 1, 11}  # gradients, queries
    assert got["exchanges"] == 20 + 2
    assert model_digest(net.server.model.parameters()) != model_digest(engine.server.model.parameters())
    assert got["accumulated_error"] < summary["accumulated_error"] + 0.25
    node = net.transport.link.memory[0].state
    ranking = node["link.sender.weights"]  # mean |dL/dE_j| of the last gradient: +-1 decoded
    assert ranking.shape == (1, E) and set(np.abs(ranking).ravel()) == {1.0}  # what sign decoding gives


def test_with_batches_topk_grad_ranks_a_whole_batch_by_the_last_gradient_of_the_previous_one(mnist_root):
    """B = 3 on a node: the gradients of rounds 0, 1, 2 arrive with the request for 3..5; rounds 0
    and 1 weigh only dimensions {0, 1, 5, 6}, round 2 only {2, 3, 4, 7}. Ranked by w_j * |E_j| with
    round 2's weights, every embedding of rounds 3..5 sends one of {2, 3, 4, 7}."""
    config = config_for(mnist_root, 20, RANKED, **{"activation.name": "full"})
    host = ClientHost(config, 0, rows=BlockRows(config, 0))
    queries = [encode(Query(t, 0)) for t in range(6)]
    host.handle(Envelope(ROUND, 0, queries[:3], {"events": 3}))
    grads = []
    for t, dims in enumerate(([0, 1, 5, 6], [0, 1, 5, 6], [2, 3, 4, 7])):
        g = np.zeros((1, E), np.float32)
        g[0, dims] = 0.5
        grads.append(encode(Gradient(t, 0, g)))
    reply = host.handle(Envelope(ROUND, 3, grads + queries[3:], {"events": 3, "grad_rounds": [0, 1, 2]}))
    assert reply.info["active"] == [1, 1, 1]
    kept = [unpack_sparse(memoryview(part)[FRAME_SIZE:], (1, E)).indices.tolist() for part in reply.parts]
    assert all(len(k) == 1 and k[0] in (2, 3, 4, 7) for k in kept), kept


def test_topl_with_compression_equals_the_simulator(few_classes_root, small_chunks):
    """The server's policy and compressed links together, B = 1 (estimate updates at 127 and 191)."""
    config = topl_config(few_classes_root, 200,
                         **{"compression.up": "topk", "compression.down": "sign-scaled"})
    engine, sizes, summary = simulate(config)
    net, reports = loopback_run(config)
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes
    got = net.summary()
    for key in ("bytes", "activation_rate", "accumulated_error", "selection_updates"):
        assert got[key] == summary[key], key
    assert got["selection_updates"] >= 1
    np.testing.assert_array_equal(net.activation.estimate.scores, engine.activation.estimate.scores)


def spoil_codec(part: bytes) -> bytes:
    """The codec byte of a compressed frame set to the sign codec's."""
    return part[:FRAME_SIZE - 1] + bytes([2]) + part[FRAME_SIZE:]


def plain_instead(part: bytes) -> bytes:
    """The embedding sent uncompressed (as a node configured without compression would)."""
    return encode(ServerEndpoint(1, CompressionSpec(up="topk")).receive(part))


def forged_shape(part: bytes) -> bytes:
    """The frame's header claims 60000 rows."""
    return part[:7] + (60000).to_bytes(2, "little") + part[9:]


TAMPERING = {"codec byte": spoil_codec, "plain": plain_instead, "shape": forged_shape,
             "truncated": lambda p: p[:-3], "NaN": lambda p: p[:-4] + np.float32("nan").tobytes()}


def tampering(tamper):
    """A link on which client 1's reply to the batch at round 20 has its last embedding spoilt by
    ``tamper``."""
    return spoiling(
        lambda m, env: m == 1 and env.kind == ROUND and env.round == 20,
        lambda r: Envelope(r.kind, r.round, r.parts[:-1] + [tamper(r.parts[-1])], r.info, r.arrays),
    )


def cache_after_round_29(config: dict, link) -> tuple[NetworkVFL, np.ndarray]:
    """Run; return the server and its cache of client 1's rows of rounds 16..29 right after round 29."""
    net = NetworkVFL(config, link, stream=server_stream(config))
    cached = []

    def look(t, y, prediction):
        if t == 29:  # the batch is played; the next request brings windows that reach back into it
            cached.append(net.transport.ends[1].receiver.table.lookup(np.arange(16, 30)))

    net.run(on_round=look)
    net.finish()
    return net, cached[0]


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_a_bad_compressed_reply_is_rejected_and_leaves_the_cache_untouched(mnist_root, name):
    """The batch 20..29 of client 1 is rejected as a whole (its first 9 embeddings were valid): the
    server's cache holds nothing of client 1 for those rounds, and the run goes on."""
    config = config_for(mnist_root, 60, ALL_STATES, **{"network.batch": 10})
    net, cached = cache_after_round_29(config, link_for(config, tampering(TAMPERING[name])))
    s = net.summary()
    assert [(f["round"], f["client"]) for f in s["faults"]] == [(20, 1)] and s["missed_events"] == [0, 10]
    assert not cached[4:].any() and cached[:4].any()  # rounds 20..29 never reached it; 16..19 did
    _, clean = cache_after_round_29(config, link_for(config))
    assert (clean[4:] != 0).any(axis=1).all()  # untampered, every one of them did
    assert s["rounds"] == 60 and net.reports[1]["round"] == 59


def test_a_node_refuses_a_malformed_compressed_gradient_and_changes_nothing(mnist_root):
    config = config_for(mnist_root, 20, ALL_STATES, **{"activation.name": "full"})
    host = ClientHost(config, 0, rows=BlockRows(config, 0))
    host.handle(Envelope(ROUND, 0, [encode(Query(0, 0, 1))], {"events": 1}))
    server = ServerEndpoint(0, CompressionSpec.from_config(config))
    grad = Gradient(0, 0, np.linspace(-1, 1, E, dtype=np.float32).reshape(1, E))
    good = server.send(grad)
    before = host.state_dict()
    assert "link.sender.weights" not in before  # nothing received yet
    bad = {"plain": encode(grad), "codec byte": spoil_codec(good), "shape": forged_shape(good),
           "truncated": good[:-2], "for client 1": good[:5] + (1).to_bytes(2, "little") + good[7:]}
    for name, data in bad.items():
        with pytest.raises(ProtocolError):
            host.handle(Envelope(ROUND, 1, [data, encode(Query(1, 0, 2))], {"events": 1, "grad_rounds": [0]}))
        after = host.state_dict()
        assert set(after) == set(before) and all(np.array_equal(after[k], before[k]) for k in before), name
    host.handle(Envelope(ROUND, 1, [good, encode(Query(1, 0, 2))], {"events": 1, "grad_rounds": [0]}))
    ranking = host.state_dict()["link.sender.weights"]  # |gradient| as the node decoded it (one row)
    np.testing.assert_array_equal(
        ranking, np.abs(ClientEndpoint(0, CompressionSpec.from_config(config)).receive(good).values)
    )
    assert 0 < np.abs(ranking - np.abs(grad.values)).max() < 0.2  # quantised: close, not equal


def test_a_crashed_node_with_compression_rejoins_and_the_run_completes(mnist_root, tmp_path):
    """Client 1's node crashes at the request for round 30 and comes back at 40 from its checkpoint
    (after the batch 20..29, its topk-grad ranking included); the gradients of 20..29 were lost
    with the request: its ranking stays the one it had, the server's cache has nothing of 30..39."""
    class Watched(CrashAtRound30):
        """Also keeps client 1's state just before the crash and just after its rejoin's setup."""

        before = after = None

        def exchange(self, requests):
            env = requests.get(1)
            if env is not None and env.kind == ROUND and env.round == 30 and self.before is None:
                self.before = dict(self.memory[1].state)  # after its reply for 20..29: its latest checkpoint
            replies = super().exchange(requests)
            if env is not None and env.kind == SETUP and self.crashed:
                self.after = dict(self.memory[1].state)
            return replies

    config = config_for(mnist_root, 60, ALL_STATES, **{"network.batch": 10, "checkpoint.every": 20})
    link = link_for(config, Watched, store=tmp_path / "node")
    net = NetworkVFL(config, link, stream=server_stream(config))
    net.run()
    reports = net.finish(models=True)
    s = net.summary()
    assert [(f["round"], f["client"]) for f in s["faults"]] == [(30, 1)] and s["missed_events"] == [0, 10]
    assert s["rejoins"] == [{"round": 40, "client": 1, "node_round": 29, "dropped_gradients": 0}]
    assert [r["round"] for r in reports] == [59, 59]
    ends = sorted(k for k in link.before if k.startswith("link."))  # its end of the link came back with it
    assert (
        "link.sender.weights" in ends and sorted(k for k in link.after if k.startswith("link.")) == ends
    )
    for k in ends:
        np.testing.assert_array_equal(link.after[k], link.before[k], err_msg=k)
    assert all(np.isfinite(p).all() for p in party_models(net, reports)["client1"])
    assert not net.transport.ends[1].receiver.table.lookup(np.arange(30, 37)).any()  # down: nothing accepted


def test_the_server_resumes_exactly_with_compression(mnist_root, tmp_path):
    """The server dies in round 45 (checkpoint at 40, the nodes at 49); a new server loads its
    checkpoint (its ends of the links: caches, quantiser tables), the nodes go back to their state
    at 40 (their ends: the rankings): the result is the uninterrupted run's, bit for bit."""
    config = config_for(mnist_root, 60, ALL_STATES, **{"network.batch": 10, "checkpoint.every": 20})
    whole, whole_reports = loopback_run(config, record_sizes=False)
    link = link_for(config, store=tmp_path / "node")
    second = crash_then_load(lambda: NetworkVFL(config, link, stream=server_stream(config)), at=45,
                             checkpoint=tmp_path / "server.npz")
    with np.load(tmp_path / "server.npz") as z:
        assert any(k.startswith("codecs.1.receiver.cache.") for k in z.files)
        assert any(k.startswith("codecs.1.sender.stats") for k in z.files)
    assert second.t == 40
    second.run(checkpoint=tmp_path / "server.npz")
    reports = second.finish(models=True)
    assert_same_models(party_models(second, reports), party_models(whole, whole_reports))
    got, want = second.summary(), whole.summary()
    assert got["accumulated_error"] == want["accumulated_error"] and got["bytes"] == want["bytes"]
    assert got["rejoins"] == [] and got["faults"] == []


@pytest.mark.slow
@needs_flower
def test_flower_simulation_runtime_with_compression_equals_the_simulator(tmp_path):
    """100 rounds through Flower's simulation runtime (compressed frames as bytes in the records,
    each node's end of its link in context.state): the simulator's models and compressed sizes."""
    pytest.importorskip("ray", reason="Flower's simulation runtime runs ClientApps on Ray")
    root, out = write_learnable_mnist(tmp_path / "data"), tmp_path / "out"
    values = overrides(root, 100) | ALL_STATES
    result = run_simulation("", as_set(values), out, 2, timeout=scaled_timeout(600), cwd=tmp_path)
    assert (out / "summary.json").exists(), result.stdout[-3000:]
    engine, sizes, summary = simulate(load_config(None, values))
    got = json.loads((out / "summary.json").read_text())
    assert_same_as_simulator(engine, load_models(out / "models.npz"))
    assert [tuple(s) for s in json.loads((out / "message_sizes.json").read_text())] == sizes
    assert got["bytes"] == summary["bytes"] and got["faults"] == []
