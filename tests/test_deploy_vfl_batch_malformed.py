"""A deployed batch VFL run (see ``test_deploy_vfl_batch.py``) facing malformed messages, on MNIST with
the tiny settings of ``tests/helpers/vfl_deploy.py``:

* malformed replies (shape, NaN, step, sender) are rejected and recorded, never used; the node is
  padded for that step and the run completes;
* malformed requests are refused by the node, which then changes nothing;
* a tiny forged frame claiming a huge shape is refused by either side before anything is allocated.
"""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest

from fedstream.compression.quantize import _QHEAD
from fedstream.compression.varint import encode_varint, read_varint
from fedstream.deploy.records import FINISH, ROUND, SETUP, Envelope, Failure
from fedstream.errors import ProtocolError
from fedstream.transport.codec import HEADER, decode, encode
from fedstream.transport.compressed import ServerEndpoint, down_codec, up_codec
from fedstream.transport.messages import Embedding, Gradient
from fedstream.transport.wire import COMPRESSED_KINDS
from fedstream.vfl.deploy.data import batch_settings, load_block
from fedstream.vfl.deploy.host import BatchVFLHost
from tests.helpers.links import spoiling
from tests.helpers.vfl_deploy import COMPRESSED, deploy_vfl, simulate_vfl, vfl_tiny_config


@pytest.fixture(scope="module")
def simulated(data_root):
    config = vfl_tiny_config(data_root)
    return config, *simulate_vfl(config)


# -- malformed messages -----------------------------------------------------------------------------
def spoil_step(spoil, step: int = 1, victim: int = 1):
    """A link whose node ``victim`` answers its training step ``step`` with ``spoil(reply)``."""
    return spoiling(lambda m, env: m == victim and env.kind == ROUND and env.round == step
                    and env.info.get("split") == "train", spoil)


def _respoil(reply: Envelope, change) -> Envelope:
    msg = decode(reply.parts[0])
    return Envelope(reply.kind, reply.round, [encode(change(msg))], dict(reply.info))


def _nan(msg: Embedding) -> Embedding:
    bad = np.array(msg.values)
    bad[0, 0] = np.nan
    return Embedding(msg.round, msg.client, bad)


SPOILS = {
    "shape": (
        lambda r: _respoil(r, lambda e: Embedding(e.round, e.client, np.array(e.values[:-1]))),
        r"expected client 1's embedding of step 1 of shape \(50, 16\), received a Embedding of step 1, "
        r"shape \(49, 16\)",
    ),
    "nan": (lambda r: _respoil(r, _nan), r"client 1's embedding of step 1 holds NaN or inf|holds NaN or inf"),
    "step": (
        lambda r: _respoil(r, lambda e: Embedding(0, e.client, e.values)),
        r"expected client 1's embedding of step 1 .* received a Embedding of step 0",
    ),
    "sender": (
        lambda r: _respoil(r, lambda e: Embedding(e.round, 2, e.values)),
        r"for client 2 arrived on client 1's link",
    ),
    "reply step": (
        lambda r: Envelope(ROUND, 0, r.parts, r.info),
        r"expected a 'round' reply for step 1, received",
    ),
    "garbage": (
        lambda r: Envelope(r.kind, r.round, [b"\x01" + bytes(20)], r.info),
        r"Embedding for round 0: header says 0x0 float32 \(11 bytes\) but the message holds 21 bytes",
    ),
    "parts": (
        lambda r: Envelope(r.kind, r.round, r.parts * 2, r.info),
        r"expected 1 embedding\(s\), received 2",
    ),
}


@pytest.mark.parametrize("kind", list(SPOILS))
def test_a_malformed_reply_is_rejected_recorded_and_padded(data_root, simulated, tmp_path, kind, caplog):
    """Client 1's reply to step 1 is spoilt: the server logs and records the fault with a clear reason,
    pads client 1 for that step (no gradient goes back), and the run completes."""
    config, want, _ = simulated
    spoil, reason = SPOILS[kind]
    link_cls = spoil_step(spoil)
    with caplog.at_level("WARNING", logger="fedstream.deploy"):
        _, got, _ = deploy_vfl(config, data_root, tmp_path, link_cls)
    assert re.search("client 1, train request for step 1: .*" + reason, caplog.text), caplog.text
    assert [(f["client"], f["round"], f["request"]) for f in got["faults"]] == [(1, 1, "train")], got[
        "faults"
    ]
    assert re.search(reason, got["faults"][0]["reason"]), got["faults"][0]["reason"]
    msg = 11 + 4 * 50 * 16
    assert (
        got["bytes"]["per_client"][0] == want["bytes"]["per_client"][0]
    )  # the others' messages are unchanged
    assert got["bytes"]["per_client"][1] == {
        "up": 3 * msg,
        "down": 3 * msg,
    }  # the spoilt one is neither counted nor answered
    assert 0 <= got["final_accuracy"] <= 1


def test_a_step_without_any_valid_embedding_ends_the_run_with_a_clear_error(data_root, simulated, tmp_path):
    config, _, _ = simulated

    all_spoilt = spoiling(lambda m, env: env.kind == ROUND, lambda r: Failure("the ClientApp failed: boom"))

    with pytest.raises(ProtocolError, match=r"step 0: no client node answered validly .*boom"):
        deploy_vfl(config, data_root, tmp_path, all_spoilt)


def test_a_node_refuses_a_malformed_request_and_changes_nothing(data_root, tmp_path):
    config = vfl_tiny_config(data_root)
    host = BatchVFLHost(config, 0, rows=load_block(config, 0, cache_dir=tmp_path))
    assert host.handle(Envelope(SETUP, 0)).info == {
        "client": 0,
        "shape": [1, 10, 28],
        "n_train": 200,
        "n_test": 100,
        "step": -1,
        "pending": -1,
    }
    rows = list(range(50))
    host.handle(Envelope(ROUND, 0, [], {"split": "train", "rows": rows}))
    grad = lambda step=0, client=0, n=50, value=0.01: encode(
        Gradient(step, client, np.full((n, 16), value, np.float32))
    )
    nan = bytearray(grad())
    nan[11:15] = np.array([np.nan], "<f4").tobytes()
    good = {"split": "train", "rows": list(range(50, 100))}
    bad_requests = {
        "shape": (
            Envelope(ROUND, 1, [grad(n=49)], good),
            r"expected the gradient of step 0 of shape \(50, 16\)",
        ),
        "nan": (Envelope(ROUND, 1, [bytes(nan)], good), "NaN"),
        "step": (Envelope(ROUND, 1, [grad(step=3)], good), "expected the gradient of step 0 .* of step 3"),
        "recipient": (Envelope(ROUND, 1, [grad(client=1)], good), "for client 1 arrived on client 0's link"),
        "garbage": (Envelope(ROUND, 1, [b"\x03" + bytes(30)], good), "Gradient for round 0: header says 0x0"),
        "bad codec": (Envelope(ROUND, 1, [b"\x05" + bytes(30)], good), "unknown codec id 0"),
        "two gradients": (Envelope(ROUND, 1, [grad(), grad()], good), "at most one gradient"),
        "rows": (Envelope(ROUND, 1, [grad()], {"split": "train", "rows": [0, 200]}), r"train rows in 0..199"),
        "split": (Envelope(ROUND, 1, [grad()], {"split": "valid", "rows": rows}), "info 'split'"),
        "old step": (Envelope(ROUND, 0, [grad()], good), "training step 0 after step 0"),
        "eval sizes": (
            Envelope(ROUND, 0, [grad()], {"split": "test", "rows": rows, "sizes": [20], "steps": [0]}),
            "info 'sizes'",
        ),
    }
    before = host.state_dict()["vfl"].tobytes()
    for name, (env, reason) in bad_requests.items():
        with pytest.raises(ProtocolError, match=reason):
            host.handle(env)
        assert host.state_dict()["vfl"].tobytes() == before, name
    reply = host.handle(Envelope(ROUND, 1, [grad()], good))
    assert decode(reply.parts[0]).values.shape == (50, 16) and host.down == len(grad())
    with pytest.raises(ProtocolError, match="expected the gradient of step 1"):
        host.handle(Envelope(FINISH, 2, [grad(step=0)], {}))
    assert host.handle(Envelope(FINISH, 2, [grad(step=1)], {})).info["down"] == 2 * len(grad())
    with pytest.raises(ProtocolError, match="no embedding of this node is waiting"):
        host.handle(Envelope(FINISH, 2, [grad(step=1)], {}))


HUGE = (65535, 65535)  # 16 GiB of float32: what a forged header may claim


def forged(kind: type, codec: int, step: int, client: int) -> bytes:
    """A 14-byte compressed frame of ``kind`` whose header claims a HUGE array and whose payload is
    2 bytes."""
    data = HEADER.pack(COMPRESSED_KINDS[kind], step, client, *HUGE) + bytes([codec]) + b"\0\0"
    assert len(data) == 14
    return data


def peak_bytes(call) -> int:
    """The peak bytes Python and numpy allocated while ``call()`` runs (the property that a forged
    size cannot make the receiver allocate; its time is not asserted: machines are noisy)."""
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


def test_a_forged_huge_embedding_is_a_fault_and_the_server_allocates_nothing(data_root, tmp_path, caplog):
    """A node answers step 1 with a 14-byte frame claiming a 65535 x 65535 embedding: the server
    checks the frame's shape before decoding its payload (fedstream.deploy.records.peek), so it records
    a fault naming both shapes, pads the node for that step and finishes the run; checking such a
    frame allocates next to nothing."""
    config = vfl_tiny_config(data_root, **COMPRESSED)
    wire = up_codec(batch_settings(config).compression)[1].wire
    bad = forged(Embedding, wire, 1, 1)
    link_cls = spoil_step(lambda r: Envelope(r.kind, r.round, [bad], r.info))
    with caplog.at_level("WARNING", logger="fedstream.deploy"):
        net, got, _ = deploy_vfl(config, data_root, tmp_path, link_cls)
    reason = r"expected shape \(50, 16\), the frame says \(65535, 65535\)"
    assert [(f["client"], f["round"], f["request"]) for f in got["faults"]] == [(1, 1, "train")], got[
        "faults"
    ]
    assert re.search(reason, got["faults"][0]["reason"]), got["faults"][0]["reason"]
    assert re.search("client 1, train request for step 1: .*" + reason, caplog.text), caplog.text
    assert got["missed_steps"] == [0, 1, 0] and 0 <= got["final_accuracy"] <= 1

    def check():
        with pytest.raises(ProtocolError, match=reason):
            net.cohort.check_embedding(1, bad, 1, 50)

    peak = peak_bytes(check)
    assert peak < 1 << 20, peak


def test_a_node_refuses_a_forged_huge_gradient_changes_nothing_and_allocates_nothing(data_root, tmp_path):
    """The node checks the gradient frame's shape against its due embedding's before decoding the
    payload: a 14-byte frame claiming 65535 x 65535 is refused (naming both shapes) without
    allocating, the node's state is unchanged, and the genuine gradient is then accepted. A plain
    gradient where ``compression.down`` compresses is refused too."""
    config = vfl_tiny_config(data_root, **COMPRESSED)
    spec = batch_settings(config).compression
    host = BatchVFLHost(config, 0, rows=load_block(config, 0, cache_dir=tmp_path))
    host.handle(Envelope(ROUND, 0, [], {"split": "train", "rows": list(range(50))}))
    good = {"split": "train", "rows": list(range(50, 100))}
    before = host.state_dict()["vfl"].tobytes()

    sender, receiver = down_codec(spec)
    # a well-formed quantised payload whose entry count says 65535 x 65535: decoding it would first
    # allocate 16 GiB of symbols, so only a shape check before the payload protects the node
    payload = bytes(sender.payload(np.full((50, 16), 0.01, np.float32)))
    _, offset = read_varint(payload, _QHEAD.size)
    counted = payload[:_QHEAD.size] + encode_varint(HUGE[0] * HUGE[1]) + payload[offset:]
    huge_count = HEADER.pack(COMPRESSED_KINDS[Gradient], 0, 0, *HUGE) + bytes([receiver.wire]) + counted
    for bad in (forged(Gradient, receiver.wire, 0, 0), huge_count):

        def refuse(bad=bad):
            with pytest.raises(
                ProtocolError,
                match=r"client 0, round request for step 1: Gradient for round 0: "
                r"expected shape \(50, 16\), the frame says \(65535, 65535\)",
            ):
                host.handle(Envelope(ROUND, 1, [bad], good))

        peak = peak_bytes(refuse)
        assert peak < 1 << 20, (len(bad), peak)
        assert host.state_dict()["vfl"].tobytes() == before
    plain = encode(Gradient(0, 0, np.full((50, 16), 0.01, np.float32)))
    with pytest.raises(
        ProtocolError, match=r"an uncompressed Gradient for round 0, but compression.down = 'quant-huffman'"
    ):
        host.handle(Envelope(ROUND, 1, [plain], good))
    assert host.state_dict()["vfl"].tobytes() == before
    server_end = ServerEndpoint(0, spec)
    genuine = server_end.send(Gradient(0, 0, np.full((50, 16), 0.01, np.float32)))
    reply = host.handle(Envelope(ROUND, 1, [genuine], good))
    assert reply.round == 1 and host.down == len(genuine) and host.last_step == 1
