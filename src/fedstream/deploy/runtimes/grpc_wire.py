"""The gRPC runtime's frames: an :class:`~fedstream.deploy.records.Envelope` as bytes, and back.

Every message on the runtime's one bidirectional stream is one frame (version 2). Integers are
unsigned LEB128 varints unless said otherwise:

* 1 byte mark and version, ``0xF2`` (high 4 bits ``0xF``: a fedstream frame; low 4 bits: the
  version); 1 byte: whether ``info`` follows (bit 7), type (bits 4-6: 1 hello, 2 request, 3 reply,
  4 error, 5 bye, 6 echo), whether ``arrays`` follow (bit 3) and kind (bits 0-2: 0 none, 1 setup,
  2 round, 3 finish; request and reply only);
* varints: the sequence number (per stream; a reply or error carries its request's), the round as
  a zigzag varint of round - sequence number (one byte while the two move together), n (the
  number of parts), the bytes of ``info`` (only with bit 7), the bytes of ``arrays`` (only with
  bit 3); then each part's length;
* ``info``, the parts in order, ``arrays``.

Version 1 (the first, 2 bytes magic ``b"FS"``, a version byte, the round and the info's length
always written, integer lists only as plain values) cost 1.31x the payload in socket bytes at B = 1
of online VFL; version 2 saves 2-6 bytes per frame (18 bytes per event there, 1.30x). A frame of
another version is refused.

The parts are fedstream messages exactly as :func:`fedstream.transport.codec.encode` made them (the
bytes the ledgers count). ``info`` (the typed records' keys, :mod:`fedstream.deploy.records`) is a
sequence of entries: a key, one byte, its index + 1 in :data:`KEYS` (the keys the tasks' records
use), or 0 and the name (a varint length, UTF-8); then a value, one tag byte: 0 None, 1 false,
2 true, 3 an integer (zigzag varint), 4 a number (IEEE 754 double, little-endian), 5 a string
(varint length, UTF-8), 6 a list of integers (varint count, zigzag varints), 7 a list of other
scalars (varint count, each tagged), 8 a list of integers as differences (varint count, zigzag
varints: the first item minus the frame's round, each next item minus the one before; the encoder
takes it for a short list when it is shorter than 6: ``grad_rounds = [t - 1]`` costs one byte).
``arrays`` (only a node's final report of an audited run: its model) is a u32 count, then per
array: u16 name length, the name (UTF-8), u8 dtype code (:data:`DTYPES`), u8 number of
dimensions, u64 per dimension, the values (C order, little-endian).

:func:`decode` checks a frame before it decodes anything: its length against the limit, the header
(mark and version, type, kind, round), that the lengths add up to the frame exactly, every key and
tag of ``info`` (known, within the frame, no key twice, lists of scalars only), the arrays' dtypes
and sizes. What the info means is then checked by the receiver's typed record
(:meth:`fedstream.deploy.records.Record.read`) and the parts by :func:`fedstream.deploy.records.peek`,
as on every runtime.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from fedstream.deploy.records import KINDS, Envelope
from fedstream.errors import ProtocolError

VERSION = 2
MARK = 0xF0 | VERSION  # a frame's first byte
HELLO, REQUEST, REPLY, ERROR, BYE, ECHO = 1, 2, 3, 4, 5, 6
TYPES = {HELLO: "hello", REQUEST: "request", REPLY: "reply", ERROR: "error", BYE: "bye", ECHO: "echo"}
MAX_PARTS = 1 << 20
DTYPES = {1: np.dtype("<f4"), 2: np.dtype("<f8"), 3: np.dtype("<i4"), 4: np.dtype("<i8"), 5: np.dtype("u1"),
          6: np.dtype("?")}
_CODES = {d: c for c, d in DTYPES.items()}
KEYS = (  # the key codes (index + 1; the same since version 1): never reorder, only append
    "events", "grad_rounds", "active", "keep", "boundary", "models", "config", "run", "rejoin", "resume",
    "client", "reason", "round", "up", "down", "messages", "digest", "block_start", "block_stop",
    "n_features", "rows", "split", "step", "steps", "sizes", "pending", "queries", "n_train", "n_test",
    "eval_up", "select_up", "select_down", "shape", "lr_index", "epochs", "validate", "choices", "common",
    "unique", "val", "n_classes", "n_common", "n_rows", "n_unique", "n_val",
)
_KEY_CODE = {k: i + 1 for i, k in enumerate(KEYS)}
_DOUBLE = struct.Struct("<d")
DELTA_ITEMS = 16  # int lists up to this long are also tried as differences (tag 8)
CLIENT_CN = "fedstream client "  # a client certificate's common name: "fedstream client M"
BASE_LIMIT = 1 << 20  # bytes: the setup request's config, info and headers of any message
VFL_LIMIT = 64 * 2**20  # batch VFL, CHFL: VF-PS distances, evaluation embeddings, models (Flower's limit)


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


def _varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(n: int, out: bytearray) -> None:
    _varint(n * 2 if n >= 0 else -n * 2 - 1, out)


def _zigzags(values, out: bytearray) -> None:
    """Zigzag varints of ``values``, appended to ``out`` (:func:`_zigzag` inlined: a batch VFL request
    carries a hundred row numbers, encoded once per node and step)."""
    append = out.append
    for v in values:
        n = v * 2 if v >= 0 else -v * 2 - 1
        while n > 0x7F:
            append((n & 0x7F) | 0x80)
            n >>= 7
        append(n)


def _ints(value: list[int], base: int, out: bytearray) -> None:
    """An int list as tag 6 (plain) or, when shorter, tag 8 (differences from ``base``, the round)."""
    plain = bytearray((6,))
    _varint(len(value), plain)
    _zigzags(value, plain)
    if len(value) <= DELTA_ITEMS:
        delta = bytearray((8,))
        _varint(len(value), delta)
        for v in value:
            _zigzag(v - base, delta)
            base = v
        if len(delta) < len(plain):
            plain = delta
    out += plain


def _value(value, out: bytearray, key: str, base: int, inner: bool = False) -> None:
    if value is None or isinstance(value, bool):
        out.append(0 if value is None else 2 if value else 1)
    elif isinstance(value, int):
        out.append(3)
        _zigzag(value, out)
    elif isinstance(value, float):
        out.append(4)
        out += _DOUBLE.pack(value)
    elif isinstance(value, str):
        data = value.encode()
        out.append(5)
        _varint(len(data), out)
        out += data
    elif isinstance(value, list) and not inner:
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            _ints(value, base, out)
            return
        out.append(7)
        _varint(len(value), out)
        for v in value:
            _value(v, out, key, base, inner=True)
    else:
        raise ProtocolError(f"info {key!r}: a {type(value).__name__} cannot travel in a frame")


def _info_bytes(info: dict, base: int) -> bytes:
    out = bytearray()
    for key, value in info.items():
        code = _KEY_CODE.get(key)
        if code is None:
            name = str(key).encode()
            out.append(0)
            _varint(len(name), out)
            out += name
        else:
            out.append(code)
        _value(value, out, key, base)
    return bytes(out)


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
    rnd = int(env.round)
    info = _info_bytes(env.info, rnd) if env.info else b""
    arrays = _arrays_bytes(env.arrays)
    parts = env.parts
    head = bytearray((MARK, (0x80 if info else 0) | ftype << 4 | (8 if arrays else 0) | kind))
    _varint(seq, head)
    _zigzag(rnd - seq, head)
    sizes = ((len(info),) if info else ()) + ((sum(map(len, arrays)),) if arrays else ())
    for n in (len(parts), *sizes, *map(len, parts)):
        _varint(n, head)
    frame = b"".join([head, info, *parts, *arrays])
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


class _Reader:
    """Reads varints and bytes from a received frame, never past its end."""

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None):
        self.data, self.pos, self.end = data, pos, len(data) if end is None else end

    def byte(self) -> int:
        if self.pos >= self.end:
            raise _fail("it ends in the middle of a field")
        self.pos += 1
        return self.data[self.pos - 1]

    def varint(self) -> int:
        n = shift = 0
        while True:
            b = self.byte()
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7
            if shift > 63:
                raise _fail("a varint longer than 64 bits")

    def zigzag(self) -> int:
        n = self.varint()
        return n >> 1 if not n & 1 else -(n >> 1) - 1

    def zigzags(self, count: int) -> list[int]:
        """``count`` zigzag varints (:meth:`zigzag` inlined, same checks: a batch VFL request's rows)."""
        data, pos, end, out = self.data, self.pos, self.end, []
        for _ in range(count):
            n = shift = 0
            while True:
                if pos >= end:
                    raise _fail("it ends in the middle of a field")
                b = data[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                if b < 0x80:
                    break
                shift += 7
                if shift > 63:
                    raise _fail("a varint longer than 64 bits")
            out.append(n >> 1 if not n & 1 else -(n >> 1) - 1)
        self.pos = pos
        return out

    def take(self, n: int) -> bytes:
        if n > self.end - self.pos:
            raise _fail(f"a field of {n} bytes past the end")
        self.pos += n
        return self.data[self.pos - n:self.pos]

    def text(self) -> str:
        try:
            return self.take(self.varint()).decode()
        except UnicodeDecodeError:
            raise _fail("a string that is not UTF-8") from None


def _read_value(r: _Reader, base: int, inner: bool = False):
    tag = r.byte()
    if tag <= 2:
        return (None, False, True)[tag]
    if tag == 3:
        return r.zigzag()
    if tag == 4:
        return _DOUBLE.unpack(r.take(8))[0]
    if tag == 5:
        return r.text()
    if tag in (6, 7, 8) and not inner:
        count = r.varint()
        if count > r.end - r.pos:
            raise _fail(f"a list of {count} items past the end")
        if tag == 8:
            items = []
            for _ in range(count):
                base += r.zigzag()
                items.append(base)
            return items
        if tag == 6:
            return r.zigzags(count)
        return [_read_value(r, base, inner=True) for _ in range(count)]
    raise _fail(f"value tag {tag}" + (" inside a list" if inner and tag in (6, 7, 8) else ""))


def _read_info(data: bytes, start: int, end: int, base: int) -> dict:
    r, info = _Reader(data, start, end), {}
    while r.pos < end:
        code = r.byte()
        if code > len(KEYS):
            raise _fail(f"info key code {code}")
        key = KEYS[code - 1] if code else r.text()
        if key in info:
            raise _fail(f"info {key!r} twice")
        info[key] = _read_value(r, base)
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


def sequence(frame: bytes) -> int:
    """The sequence number of a frame whose header is readable (0 otherwise): what a node's error
    reply to a malformed request carries."""
    try:
        return _Reader(frame, 2).varint()
    except ProtocolError:
        return 0


def decode(frame: bytes, *, limit: int) -> Frame:
    """Check and decode one received frame; ProtocolError naming what is wrong (see the module doc)."""
    if len(frame) > limit:
        raise _fail(f"{len(frame)} bytes, over the message limit of {limit}")
    if len(frame) < 2 or frame[0] != MARK:
        first = f"0x{frame[0]:02X}" if frame else "none"
        raise _fail(f"first byte (mark and version) {first}, expected 0x{MARK:02X} (a fedstream frame, "
                    f"version {VERSION}; both ends must run the same fedstream frame version)")
    flags = frame[1]
    has_info, ftype, has_arrays, kind = flags & 0x80, flags >> 4 & 7, flags & 8, flags & 7
    if ftype not in TYPES:
        raise _fail(f"type {ftype}")
    if (kind != 0) != (ftype in (REQUEST, REPLY)) or kind > len(KINDS):
        raise _fail(f"kind {kind} in a {TYPES[ftype]} frame")
    r = _Reader(frame, 2)
    seq = r.varint()
    rnd = seq + r.zigzag()
    if rnd < 0:
        raise _fail(f"round {rnd}")
    n = r.varint()
    n_info = r.varint() if has_info else 0
    n_arrays = r.varint() if has_arrays else 0
    if n > MAX_PARTS or n > len(frame) - r.pos:
        raise _fail(f"{n} parts")
    lengths = [r.varint() for _ in range(n)]
    if r.pos + n_info + sum(lengths) + n_arrays != len(frame):
        raise _fail(f"the lengths add up to {r.pos + n_info + sum(lengths) + n_arrays} bytes, the frame has "
                    f"{len(frame)}")
    pos = r.pos
    info = _read_info(frame, pos, pos + n_info, rnd)
    pos += n_info
    parts = []
    for length in lengths:
        parts.append(frame[pos:pos + length])
        pos += length
    arrays = _decode_arrays(memoryview(frame)[pos:]) if has_arrays else {}
    return Frame(ftype, seq, Envelope(KINDS[kind - 1] if kind else "", rnd, parts, info, arrays))
