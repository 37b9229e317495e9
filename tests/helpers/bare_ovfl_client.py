"""An online VFL client party written without fedstream (issue 29): only the code that grpcio-tools
generates from ``fedstream/deploy/protocol.proto`` (``protocol_pb2``, ``protocol_pb2_grpc``),
grpcio and numpy. It must not import fedstream: everything it knows of the protocol is in the
.proto file and the payload layout written there.

The party holds its own table file (an ``id`` column and numeric feature columns, the rows in the
server file's order) and a linear bottom model: the embedding of round t is ``x_t W + b`` with x_t
its row t mod n, standardised by its first ``data.stats_rows`` rows. It activates on every event
(the node's own choice), so every embedding it sends comes back as a gradient, which it applies:
``W -= lr x_t^T g``, ``b -= lr g``. It counts the bytes of the payload it sends and uses, as every
party must, and reports them at finish, where the server checks them against its own counts.

    python bare_ovfl_client.py STUBS TARGET INDEX TABLE [--tls DIR]

``STUBS``: the folder with the generated modules; ``--tls DIR``: mutual TLS with ``ca.crt``,
``client-INDEX.pem`` and ``client-INDEX.key`` (as ``fedstream deploy credentials`` writes them).
At the end it prints one JSON line: what it did.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import queue
import struct
import sys

import grpc
import numpy as np

# a fedstream message (the parts): kind u8, round u32, client u16, rows u16, cols u16, then
# rows x cols float32, all little-endian (a query: the header alone)
HEADER = struct.Struct("<BIHHH")
EMBEDDING, QUERY, GRADIENT = 1, 2, 3


def encode(kind: int, rnd: int, client: int, values: np.ndarray) -> bytes:
    values = np.ascontiguousarray(values, dtype="<f4")
    return HEADER.pack(kind, rnd, client, *values.shape) + values.tobytes()


def decode(data: bytes) -> tuple[int, int, int, np.ndarray]:
    kind, rnd, client, rows, cols = HEADER.unpack_from(data)
    if kind == QUERY:
        return kind, rnd, client, np.zeros((rows, 0), np.float32)
    if len(data) != HEADER.size + 4 * rows * cols:
        raise ValueError(f"a message of {len(data)} bytes for {rows} x {cols} values")
    return kind, rnd, client, np.frombuffer(data, "<f4", rows * cols, HEADER.size).reshape(rows, cols)


def rounds(values, base: int) -> list[int]:
    """A field marked (rounds): differences from the frame's round, then from the one before."""
    out = []
    for d in values:
        base += d
        out.append(base)
    return out


class Party:
    def __init__(self, pb, index: int, table: str):
        self.pb, self.index = pb, index
        with open(table, newline="") as f:
            rows = list(csv.reader(f))
        head, body = rows[0], rows[1:]
        self.ids = hashlib.sha256("".join(r[0] + "\n" for r in body).encode()).hexdigest()
        self.raw = np.array([[float(v) for v in r[1:]] for r in body], np.float64)
        self.columns = head[1:]
        self.round = -1
        self.up = self.down = self.messages = 0
        self.sent: dict[int, np.ndarray] = {}  # round -> the row its embedding was made from
        self.gradients = 0

    def setup(self, config: dict) -> None:
        head = max(1, min(int(config["data.stats_rows"]), len(self.raw)))
        mean, std = self.raw[:head].mean(axis=0), self.raw[:head].std(axis=0)
        std[std == 0] = 1.0
        self.X = ((self.raw - mean) / std).astype(np.float32)
        width, embedding = self.X.shape[1], int(config["model.embedding"])
        rng = np.random.default_rng(1000 + self.index)
        self.W = (rng.standard_normal((width, embedding)) / np.sqrt(width)).astype(np.float32)
        self.b = np.zeros(embedding, np.float32)
        self.W0 = self.W.copy()
        self.lr = float(config["optimizer.lr"])

    def apply(self, part: bytes, t: int) -> None:
        kind, rnd, client, g = decode(part)
        if (kind, rnd, client) != (GRADIENT, t, self.index) or t not in self.sent:
            raise ValueError(f"expected the gradient of round {t} for client {self.index}")
        x = self.sent.pop(t)
        self.W -= self.lr * np.outer(x, g[0])
        self.b -= self.lr * g[0]
        self.down += len(part)
        self.messages += 1
        self.gradients += 1

    def answer(self, frame):
        """The reply frame to a request frame (None: bye)."""
        pb = self.pb
        rnd = frame.seq + frame.round  # the frame's round travels as round - seq
        if frame.type == pb.BYE:
            return None
        if frame.type == pb.ECHO:
            return pb.Frame(type=pb.ECHO, seq=frame.seq, round=frame.round, parts=frame.parts)
        if frame.type == pb.SETUP:
            self.setup(json.loads(frame.setup.config))
            reply = pb.OvflSetupReply(client=self.index, round=self.round, n_features=self.X.shape[1],
                                      block_start=0, block_stop=self.X.shape[1], ids=self.ids)
            return pb.Frame(type=pb.SETUP, seq=frame.seq, round=rnd - frame.seq, ovfl_setup_reply=reply)
        if frame.type == pb.FINISH:
            request = frame.ovfl_finish_request
            for t, part in zip(rounds(request.grad_rounds, rnd), frame.parts, strict=True):
                self.apply(part, t)
            digest = hashlib.sha256(self.W.tobytes() + self.b.tobytes()).hexdigest()
            reply = pb.FinishReply(client=self.index, round=self.round, up=self.up, down=self.down,
                                   messages=self.messages, digest=digest)
            return pb.Frame(type=pb.FINISH, seq=frame.seq, round=self.round - frame.seq,
                            finish_reply=reply)
        if frame.type != pb.ROUND or frame.WhichOneof("info") != "ovfl_round_request":
            return pb.Frame(type=pb.ERROR, seq=frame.seq, error=pb.Error(reason="not an online VFL request"))
        request = frame.ovfl_round_request
        if len(request.active):
            return pb.Frame(type=pb.ERROR, seq=frame.seq,
                            error=pb.Error(reason="this party decides its own activation"))
        grad_rounds = rounds(request.grad_rounds, rnd)
        for t, part in zip(grad_rounds, frame.parts[:len(grad_rounds)], strict=True):
            self.apply(part, t)
        embeddings = []
        for i in range(request.events):  # every event activates this party: the query goes unused
            t = rnd + i
            x = self.X[t % len(self.X)]
            data = encode(EMBEDDING, t, self.index, (x @ self.W + self.b)[None, :])
            self.up += len(data)
            self.messages += 1
            self.sent[t] = x
            self.round = t
            embeddings.append(data)
        return pb.Frame(seq=frame.seq, round=rnd - frame.seq, parts=embeddings,  # type ROUND: 0, the default
                        ovfl_round_reply=pb.OvflRoundReply(active=[1] * request.events))


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("stubs", "target", "index", "table"):
        parser.add_argument(name)
    parser.add_argument("--tls")
    args = parser.parse_args()
    sys.path.insert(0, args.stubs)
    import protocol_pb2 as pb
    import protocol_pb2_grpc as rpc

    index = int(args.index)
    party = Party(pb, index, args.table)
    if args.tls:
        def read(name):
            with open(f"{args.tls}/{name}", "rb") as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(read("ca.crt"), read(f"client-{index}.key"),
                                             read(f"client-{index}.pem"))
        channel = grpc.secure_channel(args.target, creds)
    else:
        channel = grpc.insecure_channel(args.target)
    outbox: queue.Queue = queue.Queue()
    outbox.put(pb.Frame(type=pb.HELLO, hello=pb.Hello(client=index)))
    requests = 0
    with channel:
        for frame in rpc.NodeStub(channel).Session(iter(outbox.get, None)):
            reply = party.answer(frame)
            if reply is None:
                break
            requests += 1
            outbox.put(reply)
        outbox.put(None)
    assert not any(m == "fedstream" or m.startswith("fedstream.") for m in sys.modules)
    print(json.dumps({"requests": requests, "round": party.round, "gradients": party.gradients,
                      "up": party.up, "down": party.down, "messages": party.messages,
                      "moved": float(np.abs(party.W - party.W0).sum())}))


if __name__ == "__main__":
    main()
