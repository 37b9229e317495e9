"""Every message a deployed server receives is validated; a bad one is rejected, logged and
recorded, and the run goes on with that node padded for the batch (issue 10).

The tampering happens after the node has handled its request (as a faulty or hostile node, or a
corrupting network would do), so each kind of bad reply leaves the same state behind: the runs
must give the very same models, which differ from an untampered run's.
"""

from __future__ import annotations

import logging
import struct

import numpy as np
import pytest

from fedstream.config import load_config
from fedstream.deploy.host import model_digest
from fedstream.deploy.records import ROUND, Envelope, check_client_index
from fedstream.errors import ConfigError, ProtocolError
from fedstream.ovfl.deploy.driver import NetworkVFL
from fedstream.ovfl.deploy.host import ClientHost
from fedstream.ovfl.deploy.parties import build_client, server_stream
from fedstream.ovfl.deploy.rows import BlockRows, PartyRows
from fedstream.transport import encode
from fedstream.transport.messages import Embedding, Gradient, Query
from tests.helpers.links import spoiling
from tests.helpers.ovfl_deploy import link_for, loopback_run, overrides, party_models

BAD_CLIENT, BAD_BATCH_START = 1, 20  # client 1's reply to the request for rounds 20..29 is spoilt


def nan_bytes(part: bytes) -> bytes:
    return part[:-4] + struct.pack("<f", float("nan"))


def with_part(fn):
    """Spoil the first embedding of the reply."""
    def tamper(env: Envelope) -> Envelope:
        env.parts = [fn(env.parts[0])] + env.parts[1:]
        return env
    return tamper


def rebuilt(**change):
    """Replace the first embedding by one with some fields changed."""
    def fn(part: bytes) -> bytes:
        from fedstream.transport.codec import decode

        msg = decode(part)
        return encode(msg._replace(**change))
    return with_part(fn)


TAMPERING = {
    "non-finite value": with_part(nan_bytes),
    "truncated": with_part(lambda p: p[:-3]),
    "garbage": with_part(lambda p: b"\xff" * len(p)),
    "wrong sender": rebuilt(client=0),
    "wrong round": rebuilt(round=BAD_BATCH_START + 5),
    "wrong shape": rebuilt(values=np.zeros((1, 9), np.float32)),
    "wrong type": with_part(
        lambda p: encode(Gradient(BAD_BATCH_START, BAD_CLIENT, np.zeros((1, 8), np.float32)))
    ),
    "a query for an embedding": with_part(lambda p: encode(Query(BAD_BATCH_START, BAD_CLIENT))),
    "too few embeddings": lambda env: Envelope(env.kind, env.round, env.parts[:-1], env.info),
    "activation flag 2": lambda env: Envelope(
        env.kind, env.round, env.parts, {"active": [2] * len(env.parts)}
    ),
    "activation list too short": lambda env: Envelope(env.kind, env.round, env.parts, {"active": [1]}),
    "no activation list": lambda env: Envelope(env.kind, env.round, env.parts, {}),
    "wrong kind": lambda env: Envelope("finish", env.round, env.parts, env.info),
    "wrong batch round": lambda env: Envelope(env.kind, env.round + 1, env.parts, env.info),
}


def bad_batch(m: int, env) -> bool:
    """``BAD_CLIENT``'s request for the batch at ``BAD_BATCH_START``."""
    return m == BAD_CLIENT and env.kind == ROUND and env.round == BAD_BATCH_START


def tampered_run(config: dict, tamper) -> NetworkVFL:
    link = link_for(config, spoiling(bad_batch, tamper))
    net = NetworkVFL(config, link, stream=server_stream(config))
    net.run()
    net.finish(models=True)
    return net


@pytest.fixture(scope="module")
def config(mnist_root):
    return load_config(None, overrides(mnist_root, 60) | {"network.batch": 10})


@pytest.fixture(scope="module")
def reference(config):
    """The untampered run, and the run where client 1's reply is corrupted to NaN."""
    clean, _ = loopback_run(config, record_sizes=False)
    return clean, tampered_run(config, TAMPERING["non-finite value"])


@pytest.mark.parametrize("name", sorted(TAMPERING))
def test_a_bad_reply_is_rejected_logged_and_padded_and_the_run_goes_on(config, reference, name, caplog):
    clean, nan_run = reference
    with caplog.at_level(logging.WARNING, logger="fedstream.deploy"):
        net = tampered_run(config, TAMPERING[name])
    s = net.summary()
    assert s["rounds"] == 60 and len(net.reports) == 2  # finished, both nodes reported at the end
    assert [(f["round"], f["client"], f["request"]) for f in s["faults"]] == [
        (BAD_BATCH_START, BAD_CLIENT, "round")
    ]
    assert s["missed_events"] == [0, 10]  # client 1 padded for the 10 events of that batch only
    assert any(f"client {BAD_CLIENT}, round request for round {BAD_BATCH_START}" in r.getMessage()
               for r in caplog.records)
    assert s["activation_rate"][BAD_CLIENT] < clean.summary()["activation_rate"][BAD_CLIENT]
    # every kind of bad reply leaves the same state: the same models as the NaN run, not the clean run's
    for party, params in party_models(net, net.reports).items():
        want = party_models(nan_run, nan_run.reports)[party]
        for got, exp in zip(params, want, strict=True):
            np.testing.assert_array_equal(got, exp, err_msg=f"{name}: {party}")
    assert model_digest(net.server.model.parameters()) != model_digest(clean.server.model.parameters())


def test_a_lost_request_is_padded_and_its_gradients_count_as_skips(config, reference):
    """The node did not play the batch; the gradients of its previous batch were lost with the
    request, so at the next one it skips those events and goes on."""
    clean, nan_run = reference
    # the request never reaches the node (a lost message, or a ClientApp that failed before it changed
    # anything: Flower's error reply)
    losing = spoiling(bad_batch, lost="the ClientApp failed: boom")
    net = NetworkVFL(config, link_for(config, losing), stream=server_stream(config))
    net.run()
    net.finish(models=True)
    s = net.summary()
    assert s["faults"][0]["reason"] == "the ClientApp failed: boom" and s["missed_events"] == [0, 10]
    assert net.reports[BAD_CLIENT]["round"] == 59  # it came back at the next batch and played to the end
    digests = {model_digest(r.reports[BAD_CLIENT]["params"]) for r in (net, clean, nan_run)}
    assert len(digests) == 3  # neither the clean run nor one where the node played the batch


def test_the_padding_is_the_configured_one(config):
    """network.padding = mean: a down node's embedding is the mean of what it sent before."""
    net = tampered_run(dict(config, **{"network.padding": "mean"}), TAMPERING["garbage"])
    zero = tampered_run(config, TAMPERING["garbage"])
    assert model_digest(net.server.model.parameters()) != model_digest(zero.server.model.parameters())
    assert net.server.stand_in.padding.seen[BAD_CLIENT] > 0


def test_a_node_refuses_malformed_requests(config):
    host = ClientHost(config, 0, rows=BlockRows(config, 0))
    q = [encode(Query(t, 0)) for t in range(3)]
    bad = {
        "events": Envelope(ROUND, 0, q, {"events": 0}),
        "events 2": Envelope(ROUND, 0, q, {"events": "3"}),
        "queries": Envelope(ROUND, 0, q[:2], {"events": 3}),
        "grad_rounds": Envelope(ROUND, 0, q, {"events": 3, "grad_rounds": [5]}),
        "client": Envelope(ROUND, 0, [encode(Query(0, 1))], {"events": 1}),
        "round": Envelope(ROUND, 0, [encode(Query(1, 0))], {"events": 1}),
        "type": Envelope(ROUND, 0, [encode(Embedding(0, 0, np.zeros((1, 8), np.float32)))], {"events": 1}),
        "kind": Envelope("launch", 0, q, {"events": 3}),
    }
    for name, env in bad.items():
        with pytest.raises(ProtocolError):
            host.handle(env)
        assert host.round == -1, name  # nothing was played


def test_flower_records_are_checked_before_use():
    flwr = pytest.importorskip("flwr")  # noqa: F841
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    from fedstream.deploy.runtimes import flower_grid as gridlink
    from fedstream.deploy.runtimes.flower_grid import from_record, to_record

    good = to_record(Envelope(ROUND, 3, [b"abc"], {"active": [1]}))
    assert from_record(good, "x") == Envelope(ROUND, 3, [b"abc"], {"active": [1]})
    head = {"kind": "round", "round": 3, "parts": [b"abc"]}
    bad = [
        RecordDict(),
        RecordDict({"fedstream": ArrayRecord({"a": Array(np.zeros(2))})}),
        RecordDict({"fedstream": ConfigRecord(head | {"kind": "shell"})}),
        RecordDict({"fedstream": ConfigRecord(head | {"round": -1})}),
        RecordDict({"fedstream": ConfigRecord(head | {"round": True})}),
        RecordDict({"fedstream": ConfigRecord(head | {"parts": b"abc"})}),
        RecordDict({"fedstream": ConfigRecord(head | {"parts": ["abc"]})}),
        RecordDict({"fedstream": ConfigRecord(head), "info": ArrayRecord({"a": Array(np.zeros(2))})}),
        RecordDict({"fedstream": ConfigRecord(head), "extra": ConfigRecord({"a": 1})}),
    ]
    for content in bad:
        with pytest.raises(ProtocolError):
            from_record(content, "node 7")
    gridlink.MAX_PAYLOAD, limit = 10, gridlink.MAX_PAYLOAD
    try:
        with pytest.raises(ProtocolError, match="exceeds the 10-byte limit"):
            from_record(to_record(Envelope(ROUND, 3, [b"x" * 6, b"y" * 5])), "node 7")
        with pytest.raises(ProtocolError, match="exceed the 10-byte limit"):
            from_record(to_record(Envelope("finish", 3, [], arrays={"p": np.zeros(4)})), "node 7")
    finally:
        gridlink.MAX_PAYLOAD = limit


def test_a_record_s_prepared_type_checks_agree_with_the_plain_rule():
    """Record.read checks each key with a checker built once per class (the fast path); it must
    accept and refuse exactly what the plain rule :func:`fedstream.fields.fits` does."""
    from fedstream.fields import checker, fits

    kinds = [int, float, bool, str, int | None, float | None, bool | None, str | None, list[int], list[float],
             list[str], list[int] | None, int | str]
    values = [0, -3, 2**40, 1.5, float("nan"), True, False, "x", "", [], [1, 2], [1, True], [1.0, 2], ["a"],
              ["a", 1], (1, 2), {"a": 1}, b"x", [[1]]]
    for kind in kinds:
        ok = checker(kind)
        for v in values:
            assert ok(v) == fits(v, kind), (kind, v)


@pytest.mark.parametrize("index", [3, -1, True, "1"])
def test_each_online_client_party_checks_its_index_alike(index):
    """The client index of a node's rows and of its party is checked by one function
    (:func:`fedstream.deploy.records.check_client_index`): an integer in 0..vfl.clients - 1."""
    config = load_config(None, {"task": "ovfl", "vfl.clients": 3})
    for make, name in [(lambda: BlockRows(config, index), "data.client_index"),
                       (lambda: PartyRows(config, index), "data.client_index"),
                       (lambda: build_client(config, index, 12), "client index")]:
        with pytest.raises(ConfigError, match="expected an integer between 0 and vfl.clients - 1 = 2") as got:
            make()
        with pytest.raises(ConfigError) as want:
            check_client_index(index, 3, "vfl.clients", name=name)
        assert str(got.value) == str(want.value)


def test_a_record_refuses_a_non_finite_number_as_the_config_does():
    """A record's float field is read by the field rules the config loader uses (issue 29): NaN and
    infinities are refused, naming the key; ints pass as numbers, bools do not."""
    from dataclasses import dataclass

    from fedstream.deploy.records import Record

    @dataclass(kw_only=True)
    class Score(Record):
        val: float
        vals: list[float] | None = None

    assert Score.read({"val": 1}, "node 1").val == 1
    for bad, key in [({"val": float("nan")}, "val"), ({"val": float("inf")}, "val"), ({"val": True}, "val"),
                     ({"val": 0.5, "vals": [0.1, float("-inf")]}, "vals")]:
        with pytest.raises(ProtocolError, match=f"node 1: info '{key}' must be a .*finite number"):
            Score.read(bad, "node 1")
