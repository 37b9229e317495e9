"""Online VFL with the server's activation policy ``topl`` over the network (issue 10).

``topl`` (:mod:`fedstream.selection.online`) is decided by the server: it activates the l clients
with the best online KNN-MI estimate, every client every ``activation.explore`` rounds, and pads
the clients it leaves out without querying them. Over the network the server tells each node its
activations in the batch request (``info["active"]``), and a node that is left out sends nothing.

The policy learns only at the end of each chunk of the stream (``CHUNK`` rounds; 64 here instead
of 4096, so that a few hundred rounds see several estimate updates), and a batch never straddles
a chunk's end. Against the in-process simulator:

* B = 1 gives the same models (bitwise), the same messages and bytes, the same estimate;
* any B decides the same activations from the same embeddings: with the clients' learning rate
  at 1e-30, below float32's resolution of their weights (the only thing B > 1 changes is that
  clients embed a batch with its start's weights), B = 48 (batches cut at the chunk ends 64, 128,
  ...) is the simulator bit for bit too;
* with learning clients B > 1 keeps topl's traffic (only activated clients' embeddings and
  gradients, no query) and learns;
* a node refuses a malformed activation list and changes nothing; a reply whose activations differ
  from the server's decision is a fault (logged, the node padded for the batch);
* the server resumes exactly from its checkpoint, the policy's estimate, buffer and padding included;
* (slow) the same over Flower's simulation runtime, B = 1.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.deploy.records import ROUND, Envelope
from fedstream.errors import ConfigError, ProtocolError
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.host import ClientHost
from fedstream.ovfl.deploy.parties import check_deployable, server_stream
from fedstream.ovfl.deploy.rows import BlockRows
from fedstream.transport import encode
from fedstream.transport.codec import HEADER
from fedstream.transport.messages import Gradient, Query
from tests.helpers.crashing import crash_then_load
from tests.helpers.flower import as_set, needs_flower, run_isolated
from tests.helpers.links import RecordingLink, spoiling
from tests.helpers.models import assert_same_models
from tests.helpers.ovfl_deploy import (
    SMALL_CHUNK,
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


def assert_topl_traffic(net: NetworkVFL, rounds: int) -> None:
    """Only activated clients' embeddings (up) and gradients (down); nothing for a client left out.
    (DLR: one row per message; SLR's messages grow to its window, but up and down still match.)"""
    s = net.summary()
    active = np.rint(np.array(s["activation_rate"]) * rounds).astype(int)
    ledger = net.transport.ledger
    assert ledger.messages == [2 * int(n) for n in active]
    assert ledger.up == ledger.down
    if net.config["optimizer.name"] != "slr":
        assert ledger.up == [int(n) * (HEADER.size + 4 * E) for n in active]
    assert s["wire_part_bytes"] == s["bytes"]["total"]  # no unused query rides along
    assert int(active.sum()) < 3 * rounds  # some clients were left out


@pytest.mark.parametrize("optimizer, padding", [("dlr", "mean"), ("slr", "latest")])
def test_topl_over_an_in_process_link_equals_the_simulator(few_classes_root, small_chunks, optimizer,
                                                           padding):
    """B = 1, 300 rounds (4 estimate updates); every node rebuilt from its saved state per request."""
    config = topl_config(few_classes_root, 300, **{"optimizer.name": optimizer, "optimizer.window": 4,
                                       "activation.padding": padding})
    engine, sizes, summary = simulate(config)
    net, reports = loopback_run(config)
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes  # message by message
    got = net.summary()
    for key in ("bytes", "activation_rate", "accumulated_error", "selection_updates"):
        assert got[key] == summary[key], key
    assert (
        summary["selection_updates"] == 3
    )  # buffer full at round 117 (40 exploration rounds): scored at 128, 192, 256
    np.testing.assert_array_equal(net.activation.estimate.scores, engine.activation.estimate.scores)
    assert got["exchanges"] == 300 + 2 and got["faults"] == []
    assert [(r["up"], r["down"]) for r in reports] == [
        (c["up"], c["down"]) for c in summary["bytes"]["per_client"]
    ]
    assert_topl_traffic(net, 300)


def batches(link: RecordingLink) -> list[tuple[int, int, list]]:
    """(first round, events, activations sent) of every batch request (client 0's)."""
    return [(env.round, env.info["events"], env.info.get("active")) for m, env, _ in link.seen
            if env.kind == ROUND and m == 0]


def test_any_batch_size_decides_the_simulators_activations(few_classes_root, small_chunks):
    """B = 48 with clients that do not learn (lr 1e-30, the server at 0.05): what B > 1 changes, stale
    client weights, is gone, and the rest must be the simulator's bit for bit. It is only because the
    batches end at the chunk ends (48 + 16 rounds per chunk), where the policy learns: a batch over
    rounds 96..143 would have to decide rounds 128..143 before the update at 127."""
    # clients' steps of 1e-30 * gradient are below float32's resolution of their weights: they keep them
    config = topl_config(
        few_classes_root, 300, **{"network.batch": 48, "optimizer.lr": 1e-30, "optimizer.server_lr": 0.05}
    )
    engine, sizes, summary = simulate(config)
    net, reports = loopback_run(config, RecordingLink)
    assert_same_as_simulator(engine, party_models(net, reports))
    assert net.transport.sizes == sizes
    got = net.summary()
    for key in ("bytes", "activation_rate", "accumulated_error", "selection_updates"):
        assert got[key] == summary[key], key
    assert got["selection_updates"] == 3
    starts = [(t0, n) for t0, n, _ in batches(net.transport.link)]
    assert starts == [(c * 64 + j, n) for c in range(4) for j, n in ((0, 48), (48, 16))] + [(256, 44)]
    assert got["exchanges"] == 9 + 2
    assert all(len(active) == n for _, n, active in batches(net.transport.link))


def test_batches_with_learning_clients_keep_topls_traffic_and_learn(few_classes_root, small_chunks):
    """B = 48 with learning clients: the embeddings of a batch are computed with its start's weights,
    so the estimate, the padding and the models differ a little from the simulator's; the traffic is
    still topl's and a node rebuilt from its state for every request computes what one kept in memory does."""
    config = topl_config(few_classes_root, 300, **{"network.batch": 48, "optimizer.lr": 0.01})
    _, _, summary = simulate(config)
    net, reports = loopback_run(config)
    got = net.summary()
    assert_topl_traffic(net, 300)
    assert got["exchanges"] == 9 + 2 and got["selection_updates"] == summary["selection_updates"] == 3
    assert got["accumulated_error"] < 0.5  # 3 classes: chance is 0.67
    assert abs(got["accumulated_error"] - summary["accumulated_error"]) < 0.1
    memory, memory_reports = loopback_run(config, persist=False)
    assert_same_models(party_models(net, reports), party_models(memory, memory_reports))


def test_a_node_refuses_a_malformed_activation_list_and_changes_nothing(few_classes_root):
    config = topl_config(few_classes_root, 20)
    host = ClientHost(config, 0, rows=BlockRows(config, 0))
    reply = host.handle(Envelope(ROUND, 0, [], {"events": 3, "active": [1, 0, 1]}))
    assert (
        reply.info["active"] == [1, 0, 1] and len(reply.parts) == 2
    )  # nothing for the event it was left out of
    assert host.awaiting == [0, 2]
    before = host.state_dict()
    grads = [encode(Gradient(t, 0, np.zeros((1, E), np.float32))) for t in (0, 2)]
    bad = {
        "no list": {"events": 2, "grad_rounds": [0, 2]},
        "too short": {"events": 2, "grad_rounds": [0, 2], "active": [1]},
        "too long": {"events": 2, "grad_rounds": [0, 2], "active": [1, 0, 1]},
        "not 0/1": {"events": 2, "grad_rounds": [0, 2], "active": [1, 2]},
        "booleans": {"events": 2, "grad_rounds": [0, 2], "active": [True, False]},
        "a string": {"events": 2, "grad_rounds": [0, 2], "active": "10"},
        "floats": {"events": 2, "grad_rounds": [0, 2], "active": [1.0, 0.0]},
    }
    for name, info in bad.items():
        with pytest.raises(ProtocolError, match="'active'"):
            host.handle(Envelope(ROUND, 3, grads, info))
        assert host.round == 2 and host.awaiting == [0, 2], name
        after = host.state_dict()
        assert set(after) == set(before) and all(np.array_equal(after[k], before[k]) for k in before), name
    with pytest.raises(ProtocolError, match="expected 2 gradient"):  # a query the server's policy never sends
        host.handle(Envelope(ROUND, 3, grads + [encode(Query(3, 0))], {"events": 1, "grad_rounds": [0, 2],
                                                                        "active": [0]}))
    assert host.round == 2 and host.awaiting == [0, 2]
    reply = host.handle(Envelope(ROUND, 3, grads, {"events": 2, "grad_rounds": [0, 2], "active": [0, 1]}))
    assert reply.info["active"] == [0, 1] and host.awaiting == [4]  # the well-formed request still works
    # a node whose own policy decides refuses to be told
    random = load_config(None, overrides(few_classes_root, 20))
    node = ClientHost(random, 0, rows=BlockRows(random, 0))
    with pytest.raises(ProtocolError, match="decided by the node"):
        node.handle(Envelope(ROUND, 0, [encode(Query(0, 0))], {"events": 1, "active": [1]}))
    assert node.round == -1


def disobeying(reply: Envelope) -> Envelope:
    """Client 1's reply to the batch from round 20, as if it had been activated in every event."""
    return Envelope(
        reply.kind, reply.round, reply.parts, reply.info | {"active": [1] * len(reply.info["active"])}
    )


def test_a_reply_that_disobeys_the_servers_activations_is_a_fault(few_classes_root, small_chunks, caplog):
    config = topl_config(few_classes_root, 60, **{"network.batch": 10})
    net, _ = loopback_run(
        config, spoiling(lambda m, env: m == 1 and env.kind == ROUND and env.round == 20, disobeying)
    )
    s = net.summary()
    assert [(f["round"], f["client"]) for f in s["faults"]] == [(20, 1)]
    assert "the server decided" in s["faults"][0]["reason"] and "the server decided" in caplog.text
    assert s["missed_events"] == [0, 10, 0] and s["rounds"] == 60  # padded for that batch, then back



def test_the_server_resumes_exactly_with_its_policy(few_classes_root, small_chunks, tmp_path):
    """The server dies in round 150 (checkpoint at 128, right after the policy's update at the end of
    chunk 1; the nodes are at 159); a new server loads it and the nodes go back to their state at 128:
    the result is the uninterrupted run's, estimate included."""
    config = topl_config(few_classes_root, 200, **{"network.batch": 10, "checkpoint.every": 32})
    whole, whole_reports = loopback_run(config)
    link = link_for(config, store=tmp_path / "node")
    second = crash_then_load(lambda: NetworkVFL(config, link, stream=server_stream(config)), at=150,
                             checkpoint=tmp_path / "server.npz")
    assert second.t == 128 and second.activation.estimate.updates == 1
    second.run(checkpoint=tmp_path / "server.npz")
    reports = second.finish(models=True)
    assert_same_models(party_models(second, reports), party_models(whole, whole_reports))
    got, want = second.summary(), whole.summary()
    for key in ("accumulated_error", "bytes", "activation_rate", "selection_updates"):
        assert got[key] == want[key], key
    np.testing.assert_array_equal(second.activation.estimate.scores, whole.activation.estimate.scores)
    assert got["rejoins"] == [] and got["faults"] == []


def test_topl_is_deployable_with_compression_and_a_bad_compression_setting_is_refused(few_classes_root):
    """Compressed links run over the network too (tests/test_deploy_compression.py, topl included);
    a setting the codecs do not know is refused before any node is set up."""
    config = topl_config(few_classes_root, 20)
    check_deployable(config)
    check_deployable(dict(config, **{"compression.up": "topk", "compression.down": "quant-huffman"}))
    with pytest.raises(ConfigError, match="compression.up"):
        check_deployable(dict(config, **{"compression.up": "gzip"}))


# -- on Flower ---------------------------------------------------------------------------------
@pytest.mark.slow
@needs_flower
def test_flower_simulation_runtime_with_topl_equals_the_simulator(few_classes_root, small_chunks, tmp_path):
    """150 rounds, 2 nodes, l = 1, B = 1 through Flower's simulation runtime (requests and replies as
    RecordDicts, the activation lists in their ConfigRecords): the simulator's models and bytes. The
    ServerApp runs in the script's own process, where CHUNK is set to 64 as here (an estimate
    update at round 127); the ClientApps do not use it. 35 to 50 s here: slow."""
    pytest.importorskip("ray", reason="Flower's simulation runtime runs ClientApps on Ray")
    out = tmp_path / "out"
    values = overrides(few_classes_root, 150) | {"activation.name": "topl", "activation.l": 1,
                                                 "activation.explore": 2, "activation.window": 40}
    script = f"""
import fedstream.ovfl.deploy.driver as driver, fedstream.ovfl.engine as engine
engine.CHUNK = driver.CHUNK = {SMALL_CHUNK}
from flwr.simulation import run_simulation
from fedstream.deploy.runtimes.flower import make_client_app, make_server_app
server = make_server_app(config="", set={as_set(values)!r}, out={str(out)!r}, audit=True)
run_simulation(server_app=server, client_app=make_client_app(), num_supernodes=2,
               backend_config={{"client_resources": {{"num_cpus": 1}},
                                "init_args": {{"num_cpus": 2, "include_dashboard": False}}}})
"""
    result = run_isolated(script, 240, tmp_path)
    assert (out / "summary.json").exists(), result.stdout[-3000:]
    engine, sizes, summary = simulate(load_config(None, values))
    got = json.loads((out / "summary.json").read_text())
    assert summary["selection_updates"] == 1  # at round 127: rounds 128..149 follow the estimate
    assert_same_as_simulator(engine, load_models(out / "models.npz"))
    assert [tuple(s) for s in json.loads((out / "message_sizes.json").read_text())] == sizes
    for key in ("bytes", "activation_rate", "selection_updates"):
        assert got[key] == summary[key], key
    assert got["faults"] == []
