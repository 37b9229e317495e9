"""The gRPC runtime's frames: an :class:`~fedstream.deploy.records.Envelope` as bytes, and back.

Every message on the runtime's one bidirectional stream is one frame (version 1, little-endian):

========  ====  ====================================================================
offset    size  field
========  ====  ====================================================================
0         3     magic ``b"FSW"``
3         1     version (1)
4         1     type: 1 hello, 2 request, 3 reply, 4 error, 5 bye, 6 echo
5         1     kind: 0 none, 1 setup, 2 round, 3 finish (request and reply only)
6         2     reserved, 0
8         4     sequence number: a reply (or error) carries its request's
12        8     round (>= 0)
20        4     n, the number of parts
24        4     bytes of ``info`` (UTF-8 JSON, an object; 0: empty)
28        4     bytes of ``arrays`` (see below; 0: none)
32        4 n   each part's length
then      ...   info, the parts in order, arrays
========  ====  ====================================================================

The parts are fedstream messages exactly as :func:`fedstream.transport.codec.encode` made them (the
bytes the ledgers count). ``arrays`` (only a node's final report of an audited run: its model) is
a u32 count, then per array: u16 name length, the name (UTF-8), u8 dtype code (:data:`DTYPES`), u8
number of dimensions, u64 per dimension, the values (C order).

:func:`decode` checks a frame before it decodes anything: its length against the limit, the header
(magic, version, type, kind, reserved bytes, round), that the lengths add up to the frame exactly,
that ``info`` is a JSON object of scalars and lists of scalars, the arrays' dtypes and sizes. What
the info means is then checked by the receiver's typed record (:meth:`fedstream.deploy.records.
Record.read`) and the parts by :func:`fedstream.deploy.records.peek`, as on every runtime.
"""

from __future__ import annotations

import json
import struct
from typing import NamedTuple

import numpy as np

from fedstream.deploy.records import KINDS, Envelope
from fedstream.errors import ProtocolError

MAGIC, VERSION = b"FSW", 1
HELLO, REQUEST, REPLY, ERROR, BYE, ECHO = 1, 2, 3, 4, 5, 6
TYPES = {HELLO: "hello", REQUEST: "request", REPLY: "reply", ERROR: "error", BYE: "bye", ECHO: "echo"}
HEAD = struct.Struct("<3sBBBHIqIII")
MAX_PARTS = 1 << 20
DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i4"), 4: np.dtype("<i8"), 5: np.dtype("u1"),
          6: np.dtype("?")}
_CODES = {d: c for c, d in DTYPES.items()}
CLIENT_CN = "fedstream client "  # a client certificate's common name: "fedstream client M"
BASE_LIMIT = 1 << 20  # bytes: the setup request's config, info and headers of any message
VFL_LIMIT = 64 * 2**20  # batch VFL: VF-PS distances and evaluation embeddings (the Flower limit too)


class Frame(NamedTuple):
    """A decoded frame: its type, sequence number and, for a request or reply, the envelope (an
    error frame's reason is ``env.info["reason"]``; a hello's claimed client ``env.info["client"]``)."""

    type: int
    seq: int
    env: Envelope


def message_limit(config: dict, *, audit: bool = False) -> int:
    """The largest frame a party of this run sends or accepts, from the config's shapes.

    Online VFL: a request carries at most B gradients and B queries, a reply B embeddings, each at
    most (window x embedding) float32 values and a header; twice that, plus :data:`BASE_LIMIT`.
    Batch VFL: :data:`VFL_LIMIT` (a VF-PS reply is Q x n distances, ``selection.queries`` is
    checked against it). ``audit``: a node's final report carries its model too (16 MiB more)."""
    if config.get("task") == "ovfl":
        rows = config["optimizer.window"] if config["optimizer.name"] == "slr" else 1
        limit = BASE_LIMIT + 4 * config["network.batch"] * (64 + 4 * rows * config["model.embedding"])
    else:
        limit = VFL_LIMIT
    return limit + (16 * 2**20 if audit else 0)


def _scalar(v) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _info_bytes(info: dict) -> bytes:
    if not info:
        return b""
    for key, value in info.items():
        if not (_scalar(value) or (isinstance(value, list) and all(_scalar(v) for v in value))):
            raise ProtocolError(f"info {key!r}: a {type(value).__name__} cannot travel in a frame")
    return json.dumps(info, separators=(",", ":")).encode()


def _arrays_bytes(arrays: dict[str, np.ndarray]) -> list[bytes]:
    if not arrays:
        return []
    out = [struct.pack("<I", len(arrays))]
    for name, value in arrays.items():
        a = np.ascontiguousarray(value)
        code = _CODES.get(a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype)
        if code is None:
            raise ProtocolError(f"array {name!r}: dtype {a.dtype} cannot travel in a frame")
        a = a.astype(DTYPES[code], copy=False)
        key = name.encode()
        out += [struct.pack("<H", len(key)), key, struct.pack("<BB", code, a.ndim),
                struct.pack(f"<{a.ndim}Q", *a.shape), a.tobytes()]
    return out


def encode(ftype: int, seq: int, env: Envelope | None = None, *, limit: int) -> bytes:
    """One frame (``env`` None: a frame without kind, round or content); ProtocolError past ``limit``."""
    env = env or Envelope("", 0)
    kind = KINDS.index(env.kind) + 1 if env.kind else 0
    info = _info_bytes(env.info)
    arrays = _arrays_bytes(env.arrays)
    n_arrays = sum(map(len, arrays))
    parts = env.parts
    head = HEAD.pack(MAGIC, VERSION, ftype, kind, 0, seq, int(env.round), len(parts), len(info), n_arrays)
    frame = b"".join([head, struct.pack(f"<{len(parts)}I", *map(len, parts)), info, *parts, *arrays])
    if len(frame) > limit:
        raise ProtocolError(
            f"a {TYPES.get(ftype, ftype)} frame of {len(frame)} bytes exceeds the message limit of {limit} "
            "bytes set from the config's shapes (network.batch, model.embedding, the SLR window; see "
            "deploy.runtimes.grpc_wire.message_limit)"
        )
    return frame


def error(seq: int, reason: str, *, limit: int) -> bytes:
    """The frame a node answers with when it could not handle request ``seq``."""
    return encode(ERROR, seq, Envelope("", 0, [], {"reason": reason[:2000]}), limit=limit)


def _fail(what: str) -> ProtocolError:
    return ProtocolError(f"malformed frame: {what}"[:300])


def _json_info(data: bytes) -> dict:
    if not data:
        return {}
    try:
        info = json.loads(data.decode())
    except (UnicodeDecodeError, ValueError) as exc:
        raise _fail(f"info is not JSON ({exc})") from None
    if not isinstance(info, dict):
        raise _fail(f"info must be a JSON object, received a {type(info).__name__}")
    for key, value in info.items():
        if not (_scalar(value) or (isinstance(value, list) and all(_scalar(v) for v in value))):
            raise _fail(f"info {key!r} must be a scalar or a list of scalars")
    return info


def _decode_arrays(data: memoryview) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {}
    if not len(data):
        return arrays
    pos = 4
    try:
        (count,) = struct.unpack_from("<I", data, 0)
        for _ in range(count):
            (n,) = struct.unpack_from("<H", data, pos)
            name = bytes(data[pos + 2:pos + 2 + n]).decode()
            pos += 2 + n
            code, ndim = struct.unpack_from("<BB", data, pos)
            shape = struct.unpack_from(f"<{ndim}Q", data, pos + 2)
            pos += 2 + 8 * ndim
            if code not in DTYPES or ndim > 8:
                raise _fail(f"array {name!r}: dtype code {code}, {ndim} dimensions")
            size = DTYPES[code].itemsize * int(np.prod(shape, dtype=np.uint64))
            if pos + size > len(data) or name in arrays:
                raise _fail(f"array {name!r}: {size} bytes past the frame's end, or a second one")
            arrays[name] = np.frombuffer(data[pos:pos + size], DTYPES[code]).reshape(shape).copy()
            pos += size
    except (struct.error, UnicodeDecodeError, ValueError, OverflowError) as exc:
        raise _fail(f"arrays: {exc}") from None
    if pos != len(data):
        raise _fail(f"arrays: {len(data) - pos} bytes left over")
    return arrays


def decode(frame: bytes, *, limit: int) -> Frame:
    """Check and decode one received frame; ProtocolError naming what is wrong (see the module doc)."""
    if len(frame) > limit:
        raise _fail(f"{len(frame)} bytes, over the message limit of {limit}")
    if len(frame) < HEAD.size:
        raise _fail(f"{len(frame)} bytes, shorter than the {HEAD.size}-byte header")
    magic, version, ftype, kind, reserved, seq, rnd, n, n_info, n_arrays = HEAD.unpack_from(frame)
    if magic != MAGIC or version != VERSION:
        raise _fail(f"magic {magic!r} version {version}, expected {MAGIC!r} version {VERSION}")
    if ftype not in TYPES or reserved or rnd < 0:
        raise _fail(f"type {ftype}, reserved {reserved}, round {rnd}")
    if (kind != 0) != (ftype in (REQUEST, REPLY)) or kind > len(KINDS):
        raise _fail(f"kind {kind} in a {TYPES[ftype]} frame")
    if n > MAX_PARTS or HEAD.size + 4 * n > len(frame):
        raise _fail(f"{n} parts")
    lengths = struct.unpack_from(f"<{n}I", frame, HEAD.size)
    pos = HEAD.size + 4 * n
    if pos + n_info + sum(lengths) + n_arrays != len(frame):
        raise _fail(f"the lengths add up to {pos + n_info + sum(lengths) + n_arrays} bytes, the frame has "
                    f"{len(frame)}")
    view = memoryview(frame)
    info = _json_info(bytes(view[pos:pos + n_info]))
    pos += n_info
    parts = []
    for length in lengths:
        parts.append(bytes(view[pos:pos + length]))
        pos += length
    arrays = _decode_arrays(view[pos:])
    return Frame(ftype, seq, Envelope(KINDS[kind - 1] if kind else "", rnd, parts, info, arrays))
