"""Keep it that way (issue 20, section 3): random bytes and random configs at every boundary.

The config loader, each data reader, the message decoders of every transport and checkpoint
loading get random input: bytes from nothing, and valid files or messages with random damage
(truncated, bytes flipped, random bytes spliced in). The only outcomes allowed are a result or
fedstream's own error (:class:`~fedstream.errors.FedstreamError`), never another exception.

``pytest tests/test_properties.py --hypothesis-show-statistics`` prints the examples each ran.
"""

from __future__ import annotations

import gzip
import io
import os
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedstream.config import check_config, load_config
from fedstream.config.loader import parse_override
from fedstream.config.schema import SCHEMA
from fedstream.data.cifar10 import read_batch
from fedstream.data.covertype import FEATURES, read_covertype_kaggle, read_covertype_uci
from fedstream.data.idx import read_idx_images, read_idx_labels
from fedstream.data.openml import read_arff, read_openml_csv
from fedstream.data.sensorless import read_sensorless_txt
from fedstream.data.tabular import read_uci_csv
from fedstream.deploy.records import Envelope, peek
from fedstream.deploy.runtimes import grpc_wire
from fedstream.errors import FedstreamError
from fedstream.runs.checkpoint import load_checkpoint, save_checkpoint
from fedstream.runs.torch_checkpoint import load_torch, save_torch
from fedstream.transport import CompressionSpec
from fedstream.transport.codec import decode, encode
from fedstream.transport.compressed import ClientEndpoint, ServerEndpoint, down_codec, up_codec
from fedstream.transport.messages import Embedding, Gradient, Query
from fedstream.transport.stacked import decode_frames, encode_frames
from fedstream.transport.tensors import decode_update, encode_update
from fedstream.transport.updates import ModelUpdate
from fedstream.transport.wire import unframe
from tests.helpers.data import idx_images_bytes, idx_labels_bytes

# examples per test: all of them together run in well under 30 s on two cores
FAST = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
TMP = Path(tempfile.mkdtemp(prefix="fedstream-properties-"))


def allowed(fn, *args, **kwargs):
    """Call ``fn``; a FedstreamError is an allowed outcome (returns None), any other exception fails."""
    try:
        return fn(*args, **kwargs)
    except FedstreamError:
        return None


@st.composite
def damaged(draw, valid: bytes) -> bytes:
    """``valid`` with random damage, or random bytes."""
    kind = draw(st.sampled_from(["random", "truncate", "flip", "splice", "valid"]))
    if kind == "random":
        return draw(st.binary(max_size=512))
    if kind == "valid":
        return valid
    data = bytearray(valid)
    if kind == "truncate":
        return bytes(data[: draw(st.integers(0, max(len(data) - 1, 0)))])
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.integers(0, 255))
        return bytes(data)
    i = draw(st.integers(0, len(data)))
    return bytes(data[:i]) + draw(st.binary(min_size=1, max_size=64)) + bytes(data[i:])


def in_file(data: bytes, name: str) -> Path:
    path = TMP / name
    path.write_bytes(data)
    return path


# -- config ------------------------------------------------------------------------------------
VALID_TOML = b'task = "ovfl"\nseed = 3\nrounds = 100\n[optimizer]\nname = "dlr"\nlr = 0.01\n'
VALID_YAML = b"task: ovfl\nseed: 3\nrounds: 100\noptimizer:\n  name: dlr\n  lr: 0.01\n"


@FAST
@given(st.one_of(damaged(VALID_TOML), damaged(VALID_YAML)), st.sampled_from(["c.toml", "c.yaml"]))
def test_config_files_of_random_bytes(data, name):
    allowed(load_config, str(in_file(data, name)))


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.integers(), max_size=3),
                   st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@FAST
@given(st.dictionaries(st.one_of(st.sampled_from(sorted(SCHEMA)), st.text(max_size=16)), VALUES, max_size=6))
def test_random_configs(overrides):
    config = allowed(load_config, None, overrides)
    if config is not None:
        allowed(check_config, config)


@FAST
@given(st.text(max_size=40))
def test_random_set_overrides(item):
    allowed(parse_override, item)


# -- data readers ------------------------------------------------------------------------------
RNG = np.random.default_rng(0)
IDX_IMAGES = idx_images_bytes(RNG.integers(0, 256, (3, 4, 4), dtype=np.uint8))
IDX_LABELS = idx_labels_bytes(np.array([1, 2, 3], dtype=np.uint8))
UCI = b"1,0.5,-1.25,3\n0,1e-3,2,7\n1,0,0,0\n"
ARFF = (b"@RELATION r\n@ATTRIBUTE class {0,1,2}\n@ATTRIBUTE V1 NUMERIC\n@ATTRIBUTE V2 real\n@DATA\n"
        b"2,0.5,-1.25\n0,1e-3,2\n")
OPENML_CSV = b"V1,V2,class\n0.5,-1.25,1\n1e-3,2,0\n"
COVER_ROW = ",".join(["10"] * 10 + ["1", "0", "0", "0"] + ["1"] + ["0"] * 39)
KAGGLE = (",".join(["Id", *FEATURES, "Cover_Type"]) + "\n" + f"1,{COVER_ROW},3\n2,{COVER_ROW},7\n").encode()
COVTYPE = f"{COVER_ROW},3\n{COVER_ROW},1\n".encode()
SENSORLESS = (" ".join(["0.5"] * 48) + " 3\n" + " ".join(["-1e-3"] * 48) + " 11\n").encode()
CIFAR = pickle.dumps({b"data": RNG.integers(0, 256, (2, 3072), dtype=np.uint8), b"labels": [1, 9]})
READERS = {  # name: (reader, a valid file, file name)
    "idx images": (read_idx_images, IDX_IMAGES, "i-idx3-ubyte"),
    "idx labels": (read_idx_labels, IDX_LABELS, "l-idx1-ubyte"),
    "uci csv": (lambda p: read_uci_csv(p, n_features=3, name="SUSY"), UCI, "SUSY.csv"),
    "higgs csv": (lambda p: read_uci_csv(p, n_features=3, name="HIGGS", max_rows=2), UCI, "HIGGS.csv"),
    "arff": (read_arff, ARFF, "j.arff"),
    "openml csv": (lambda p: read_openml_csv(p, n_classes=2), OPENML_CSV, "h.csv"),
    "covertype kaggle": (read_covertype_kaggle, KAGGLE, "train.csv"),
    "covertype uci": (read_covertype_uci, COVTYPE, "covtype.data"),
    "sensorless": (read_sensorless_txt, SENSORLESS, "Sensorless_drive_diagnosis.txt"),
    "cifar-10 pickle": (read_batch, CIFAR, "data_batch_1"),
}


def test_the_valid_samples_read():
    for name, (reader, valid, fname) in READERS.items():
        assert reader(in_file(valid, fname)) is not None, name


def _reader_test(name: str):
    reader, valid, fname = READERS[name]

    @FAST
    @given(damaged(valid), st.booleans())
    def check(data, gz):
        allowed(reader, in_file(gzip.compress(data) if gz else data, fname + (".gz" if gz else "")))

    check.__name__ = f"test_{name.replace(' ', '_').replace('-', '_')}_reader_with_random_bytes"
    return check


for _name in READERS:
    _test = _reader_test(_name)
    globals()[_test.__name__] = _test


# -- messages ----------------------------------------------------------------------------------
VALUES_2D = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
PLAIN = [encode(Embedding(5, 1, VALUES_2D)), encode(Query(5, 1, 2)), encode(Gradient(5, 1, VALUES_2D))]
SPECS = [CompressionSpec(up="topk", down="sign"), CompressionSpec(up="topk-grad", down="sign-scaled"),
         CompressionSpec(up="topk", down="quant-huffman", cache=True)]


def _compressed(spec: CompressionSpec) -> list[bytes]:
    server, client = ServerEndpoint(1, spec), ClientEndpoint(1, spec)
    grad = np.linspace(-1, 1, 24, dtype=np.float32).reshape(3, 8)
    return [client.send(Embedding(5, 1, grad)), server.send(Gradient(5, 1, grad))]


COMPRESSED = [m for spec in SPECS for m in _compressed(spec)]


@FAST
@given(st.one_of(*(damaged(m) for m in PLAIN)))
def test_plain_codec_decode(data):
    allowed(decode, data)


@FAST
@given(st.one_of(*(damaged(m) for m in COMPRESSED)), st.sampled_from(range(len(SPECS))), st.booleans())
def test_compressed_links_receive(data, spec, at_server):
    allowed(unframe, data)
    end = (ServerEndpoint if at_server else ClientEndpoint)(1, SPECS[spec])
    allowed(end.receive, data, np.arange(3) if at_server else None)


@FAST
@given(st.one_of(*(damaged(m) for m in COMPRESSED + PLAIN)), st.sampled_from(range(len(SPECS))),
       st.booleans())
def test_deploy_peek(data, spec, up):
    codec = (up_codec if up else down_codec)(SPECS[spec])
    allowed(peek, data, codec[1], Embedding if up else Gradient, "a test setting", (3, 8))


UPDATE = encode_update(ModelUpdate(3, 1, {"w": VALUES_2D, "b": np.ones(3, np.float32)}, 10))


@FAST
@given(damaged(UPDATE))
def test_model_update_decode(data):
    allowed(decode_update, data)


FRAMES = encode_frames(Gradient(5, 1, np.stack([VALUES_2D, -VALUES_2D]), np.array([0, 1])))


@FAST
@given(damaged(FRAMES.tobytes()), st.integers(1, 3))
def test_stacked_frames_decode(data, k):
    width = max(len(data) // k, 1)
    frames = np.frombuffer(data[: width * k].ljust(width * k, b"\0"), np.uint8).reshape(k, width)
    allowed(decode_frames, frames, np.arange(k))


# -- the gRPC runtime's frames (the party protocol) ----------------------------------------------
def _grpc_frames() -> list[bytes]:
    from fedstream.deploy.host import FinishReply
    from fedstream.ovfl.deploy.records import RoundRequest
    from fedstream.vfl.deploy.records import TestRequest  # not at module level: pytest would collect it

    limit = 1 << 20
    request = RoundRequest(events=2, grad_rounds=[7, 8], keep=True, boundary=9).info()
    test = TestRequest(split="test", rows=[3, 1, 2], sizes=[2, 1], steps=[9, 10]).info()
    report = FinishReply(client=1, round=9, up=10, down=20, messages=3, digest="ab").info()
    return [grpc_wire.encode(grpc_wire.REQUEST, 11, Envelope("round", 9, [b"g" * 30, b"q" * 11], request),
                             limit=limit),
            grpc_wire.encode(grpc_wire.REQUEST, 4, Envelope("round", 9, [], test), limit=limit),
            grpc_wire.encode(grpc_wire.REPLY, 12, Envelope("finish", 9, [], report, {"w": VALUES_2D}),
                             limit=limit),
            grpc_wire.hello(2, limit=limit), grpc_wire.error(5, "why", limit=limit)]


@FAST
@given(st.one_of(*(damaged(f) for f in _grpc_frames())), st.sampled_from([grpc_wire.SERVER, grpc_wire.NODE]))
def test_grpc_frames_decode(data, sender):
    assert isinstance(grpc_wire.sequence(data), int)
    allowed(grpc_wire.decode, data, limit=1 << 16, sender=sender)


# -- checkpoints -------------------------------------------------------------------------------
def _npz_checkpoint() -> bytes:
    path = TMP / "valid.npz"
    save_checkpoint(path, {"w": VALUES_2D, "n": np.arange(3)}, {"round": 4, "config": {"seed": 1}})
    return path.read_bytes()


def _torch_checkpoint() -> bytes:
    path = TMP / "valid.pt"
    save_torch(path, {"format": 1, "rows": [{"a": 1.0}], "w": torch.arange(5, dtype=torch.float32)})
    return path.read_bytes()


@SLOW
@given(damaged(_npz_checkpoint()))
def test_npz_checkpoint_loading(data):
    allowed(load_checkpoint, in_file(data, "checkpoint.npz"))


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")  # damaged bytes claim odd protocols
@SLOW
@given(damaged(_torch_checkpoint()))
def test_torch_checkpoint_loading(data):
    allowed(load_torch, in_file(data, "checkpoint.pt"))


@pytest.mark.parametrize("blob", [b"", b"not a checkpoint\n", io.BytesIO(b"PK\x03\x04").getvalue()])
def test_known_bad_checkpoints(blob):
    for loader, name in ((load_checkpoint, "checkpoint.npz"), (load_torch, "checkpoint.pt")):
        with pytest.raises(FedstreamError, match=name):
            loader(in_file(blob, name))


def test_found_by_the_properties():
    """Inputs the properties found (each raised another exception before its fix)."""
    import struct

    from fedstream.transport.tensors import HEADER, KIND_MODEL_UPDATE, NAME_LEN

    # a forged shape whose int64 product wraps to 0: the length check passed, reshape raised ValueError
    forged = (HEADER.pack(KIND_MODEL_UPDATE, 1, 0, 1, 1) + NAME_LEN.pack(1) + b"w" + bytes([4])
              + struct.pack("<4I", *[2**16] * 4))
    with pytest.raises(FedstreamError, match="shapes say"):
        decode_update(forged)
    # a pickle frame claiming 17 TB: MemoryError; a non-UTF-8 bytes key: UnicodeDecodeError
    for blob in (b"\x80\x04\x95\xab\x18\x00\x00\x00\x01\x00\x00}\x94.", pickle.dumps({b"\x80": 1})):
        with pytest.raises(FedstreamError, match="data_batch_1"):
            read_batch(in_file(blob, "data_batch_1"))
    # a zip entry of an unknown version: NotImplementedError
    data = bytearray(_npz_checkpoint())
    central = data.index(b"PK\x01\x02")  # the first entry of the central directory
    data[central + 6:central + 8] = (64).to_bytes(2, "little")  # its "version needed to extract"
    with pytest.raises(FedstreamError, match="checkpoint.npz"):
        load_checkpoint(in_file(bytes(data), "checkpoint.npz"))


def test_a_forged_numpy_state_in_a_cifar_pickle_does_not_crash_the_process(tmp_path):
    """numpy's dtype.__setstate__ trusted its state: (3, '|', (None, None), -1, -1, 0) was a
    segmentation fault. Run in a child process, so that a crash fails this test, not the session."""
    import subprocess
    import sys

    data = pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1, 9]}, protocol=4)
    forged = data.replace(b"\x8c\x01|\x94NNN", b"\x8c\x01|\x94NN\x86", 1)
    assert forged != data
    path = in_file(forged, "data_batch_1")
    code = ("import sys\nfrom fedstream.data.cifar10 import read_batch\nfrom fedstream.errors import "
            "FedstreamError\ntry:\n    read_batch(sys.argv[1])\nexcept FedstreamError:\n    pass\n")
    src = str(Path(__file__).resolve().parents[1] / "src")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": src})
    assert proc.returncode == 0, proc.stderr[-2000:]
