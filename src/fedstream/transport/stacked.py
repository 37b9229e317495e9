"""The in-process transport of K stacked runs: one message object, K frames, K ledgers.

A stacked message (``msg.runs`` set, values (k, rows, cols)) is encoded as the k frames that the k
runs would each send alone: frame j is byte for byte :func:`fedstream.transport.codec.encode` of
run ``runs[j]``'s message (the 11-byte header, then its float32 values). Frames are written with
array operations (no Python loop over runs), each run's ledger is credited with its own frames'
lengths, and the receiver gets the values decoded back from the frames, validated as the
single-run decoder validates them. Which frame belongs to which run is the simulator's
multiplexing, not part of any run's traffic, so it is not counted.

A frame holding NaN or inf does not raise here: the run it belongs to is recorded in
:attr:`StackTransport.diverged` so that the stack can retire that run and keep the others going.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from fedstream.errors import ProtocolError
from fedstream.transport.codec import F32, HEADER, KINDS, MAX_ROUND, TYPES, all_finite
from fedstream.transport.ledger import ByteLedger
from fedstream.transport.messages import Embedding, Gradient, Message, Query


@njit(cache=True)
def _write_frames(frames, header, payload):  # pragma: no cover (jit)
    """frames[j] = header ++ payload[j] for every frame j (uint8 arrays)."""
    h = header.shape[0]
    for j in range(frames.shape[0]):
        frames[j, :h] = header
        frames[j, h:] = payload[j]


@njit(cache=True)
def _read_frames(frames, h, payload, bad):  # pragma: no cover (jit)
    """Check that every frame's first h bytes equal frame 0's; copy the payloads into ``payload``
    (uint8 view of float32 values) and flag in ``bad`` the frames holding NaN or inf.
    Returns False if a header differs."""
    k = frames.shape[0]
    for j in range(k):
        for i in range(h):
            if frames[j, i] != frames[0, i]:
                return False
        payload[j] = frames[j, h:]
    values = payload.view(np.float32)
    for j in range(k):
        bad[j] = not all_finite(values[j])
    return True


@njit(cache=True)
def _count(counters, messages, runs, client, n_bytes):  # pragma: no cover (jit)
    """counters[k, client] += n_bytes and messages[k, client] += 1 for each run k in ``runs``."""
    for k in runs:
        counters[k, client] += n_bytes
        messages[k, client] += 1


@njit(cache=True)
def _carry_frames(
    header, payload, frames, runs, client, counters, messages, received, bad
):  # pragma: no cover
    """The transport's whole job for one stacked message, in one call: encode (frames[j] = header ++
    payload[j]), count (frame length for each run's ledger), decode (the receiver's copy of the
    payloads from the frames, checked). Returns False if the decoded headers disagree."""
    _write_frames(frames, header, payload)
    _count(counters, messages, runs, client, frames.shape[1])
    return _read_frames(frames, header.shape[0], received, bad)


def _payload(msg: Message) -> tuple[int, int, np.ndarray]:
    """(rows, cols, payload bytes (k, 4 * rows * cols)) of a stacked message, validated."""
    k = len(msg.runs)
    if isinstance(msg, Query):
        return msg.rows, 0, np.empty((k, 0), np.uint8)
    values = msg.values
    if values.ndim != 3 or values.shape[0] != k:
        raise ProtocolError(f"stacked {type(msg).__name__} for {k} runs has values of shape {values.shape}")
    if values.dtype != F32 or not values.flags.c_contiguous:
        values = np.ascontiguousarray(values, dtype=F32)
    _, rows, cols = values.shape
    return rows, cols, values.reshape(k, rows * cols).view(np.uint8)


def _header(msg: Message, rows: int, cols: int) -> np.ndarray:
    kind = KINDS.get(type(msg))
    if kind is None or msg.runs is None:
        raise ProtocolError(
            f"a stacked transport carries stacked Embedding, Query or Gradient messages, got {msg!r:.80}"
        )
    if not 0 <= msg.round <= MAX_ROUND:
        raise ProtocolError(f"round {msg.round} does not fit the u32 round field")
    return np.frombuffer(HEADER.pack(kind, msg.round, msg.client, rows, cols), np.uint8)


def encode_frames(msg: Message) -> np.ndarray:
    """The k frames of stacked ``msg`` as one (k, frame) uint8 array: row j = encode(run j's message)."""
    if getattr(msg, "runs", None) is None:
        raise ProtocolError(
            f"encode_frames takes a stacked Embedding, Query or Gradient, got {type(msg).__name__}"
        )
    rows, cols, payload = _payload(msg)
    header = _header(msg, rows, cols)
    frames = np.empty((len(msg.runs), HEADER.size + 4 * rows * cols), np.uint8)
    _write_frames(frames, header, payload)
    return frames


def decode_frames(frames: np.ndarray, runs: np.ndarray) -> tuple[Message, np.ndarray]:
    """Parse frames made by :func:`encode_frames`; returns the stacked message and a (k,) bool array
    of frames holding NaN or inf. Headers must be valid and identical (one message of k runs)."""
    k = len(runs)
    if frames.ndim != 2 or frames.shape[0] != k or frames.shape[1] < HEADER.size:
        raise ProtocolError(
            f"{frames.shape} frame array for {k} runs: each frame needs a {HEADER.size}-byte header"
        )
    kind, rnd, client, rows, cols = HEADER.unpack(frames[0, :HEADER.size].tobytes())
    cls = TYPES.get(kind)
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind}; expected one of {sorted(TYPES)}")
    expected = HEADER.size + 4 * rows * cols
    if frames.shape[1] != expected:
        raise ProtocolError(f"{cls.__name__} for round {rnd}: header says {rows}x{cols} float32 "
                            f"({expected} bytes per frame) but frames hold {frames.shape[1]}")
    payload = np.empty((k, 4 * rows * cols), np.uint8)
    bad = np.zeros(k, dtype=bool)
    if not _read_frames(frames, HEADER.size, payload, bad):
        raise ProtocolError("the frames of one stacked message have different headers")
    if cls is Query:
        return Query(rnd, client, rows, runs), bad
    return cls(rnd, client, payload.view(F32).reshape(k, rows, cols), runs), bad


class StackTransport:
    """Carries stacked messages for K runs; ``ledgers[k]`` is run k's own :class:`ByteLedger`.

    Counters live in (K, M) integer arrays while the stack plays; :meth:`write_back` copies them
    into the runs' ledgers (done before checkpoints and summaries)."""

    def __init__(self, ledgers: list[ByteLedger]):
        self.ledgers = ledgers
        self.up_bytes = np.array([l.up for l in ledgers], dtype=np.int64)
        self.down_bytes = np.array([l.down for l in ledgers], dtype=np.int64)
        self.messages = np.array([l.messages for l in ledgers], dtype=np.int64)
        self.diverged: set[int] = set()  # runs that sent or received NaN/inf

    def up(self, msg: Embedding) -> Embedding:
        """Client ``msg.client`` -> server, for the runs ``msg.runs``."""
        return self._carry(msg, self.up_bytes)

    def down(self, msg: Query | Gradient) -> Query | Gradient:
        """Server -> client ``msg.client``, for the runs ``msg.runs``."""
        return self._carry(msg, self.down_bytes)

    def _carry(self, msg: Message, counters: np.ndarray) -> Message:
        """Encode, count and decode in one kernel call (what :func:`encode_frames` and
        :func:`decode_frames` do, which the tests check frame by frame)."""
        if getattr(msg, "runs", None) is None:
            raise ProtocolError(
                f"a stacked transport carries stacked messages, got {type(msg).__name__} without runs"
            )
        rows, cols, payload = _payload(msg)
        header = _header(msg, rows, cols)
        k = len(msg.runs)
        frames = np.empty((k, HEADER.size + 4 * rows * cols), np.uint8)
        received = np.empty_like(payload)
        bad = np.empty(k, dtype=bool)
        if not _carry_frames(
            header, payload, frames, msg.runs, msg.client, counters, self.messages, received, bad
        ):
            raise ProtocolError("the frames of one stacked message have different headers")
        if bad.any():
            self.diverged.update(int(r) for r in msg.runs[bad])
        if cols == 0:
            return msg  # a query has no payload: the header is all, checked above
        return msg._replace(values=received.view(F32).reshape(k, rows, cols))

    def write_back(self) -> None:
        """Copy the byte and message counts into each run's ledger."""
        for k, ledger in enumerate(self.ledgers):
            ledger.up = [int(v) for v in self.up_bytes[k]]
            ledger.down = [int(v) for v in self.down_bytes[k]]
            ledger.messages = [int(v) for v in self.messages[k]]
