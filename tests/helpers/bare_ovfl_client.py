"""An online VFL client party written without fedstream (issue 29): only the code that grpcio-tools
generates from ``fedstream/deploy/protocol.proto`` (``protocol_pb2``, ``protocol_pb2_grpc``),
grpcio, numpy and openmined-psi. It must not import fedstream: everything it knows of the protocol is in the
.proto file and the payload layout written there.

The party holds its own table file (an ``id`` column and numeric feature columns, in its own
order) and a linear bottom model. Before setup it aligns its ids with the server's by private set
intersection (``PSI`` frames, the layout of ``fedstream.alignment.messages`` as protocol.proto
describes it; the cryptography is openmined-psi's, not fedstream's), which places its rows in the
server's order. Its model: the embedding of round t is ``x_t W + b`` with x_t
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
import zlib

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
        self.id_list = [r[0] for r in body]
        self.raw = np.array([[float(v) for v in r[1:]] for r in body], np.float64)
        self.inbox: list[bytes] = []  # pieces of an alignment message
        self.outbox: list[bytes] = []  # pieces of its answer, to be fetched
        self.shared: list[int] = []  # its rows of the shared ids, sorted by id
        self.placement = None  # its row of each row the server plays (-1: absent)
        self.columns = head[1:]
        self.round = -1
        self.up = self.down = self.messages = 0
        self.sent: dict[int, np.ndarray] = {}  # round -> the row its embedding was made from
        self.gradients = 0

    def psi(self, frame):
        """A PSI request: a piece of an alignment message ("FSA1", a kind byte, big-endian fields)."""
        pb, step = self.pb, frame.psi_step

        def ack(parts, pieces=0, piece=0):
            return pb.Frame(type=pb.PSI, seq=frame.seq, round=-frame.seq, parts=parts,
                            psi_ack=pb.PsiAck(pieces=pieces, piece=piece))

        if step.pieces == 0:  # fetch the next piece of the answer
            total = self.total
            return ack([self.outbox.pop(0)], total, total - len(self.outbox) - 1)
        self.inbox.append(frame.parts[0])
        if step.piece + 1 < step.pieces:
            return ack([])
        data, self.inbox = b"".join(self.inbox), []
        kind = data[4]
        if kind == 1:  # the server's blinded ids: answer with its set and the ids blinded again
            import private_set_intersection.python as lib

            (n_server,) = struct.unpack_from(">Q", data, 5)
            request = lib.Request()
            request.ParseFromString(data[13:])
            side = lib.server.CreateWithNewKey(True)
            n = len(self.id_list)
            fpr = max(1e-9, n_server * max(n_server, n) / 2**62)
            setup = side.CreateSetupMessage(fpr, n_server, self.id_list).SerializeToString()
            response = side.ProcessRequest(request).SerializeToString()
            answer = b"FSA1" + bytes([2]) + struct.pack(">QI", n, len(setup)) + setup + response
            pieces = [answer[i:i + 256 * 1024] for i in range(0, len(answer), 256 * 1024)]
            self.total, self.outbox = len(pieces), pieces[1:]
            return ack(pieces[:1], len(pieces))
        if kind == 3:  # the shared ids, sorted
            count, _ = struct.unpack_from(">QQ", data, 5)
            raw = zlib.decompress(data[21:])
            ends = 4 * count + np.cumsum(np.frombuffer(raw, ">u4", count).astype(np.int64))
            starts = np.concatenate([[4 * count], ends[:-1]]).astype(np.int64)
            row = {v: i for i, v in enumerate(self.id_list)}
            self.shared = [row[raw[a:b].decode()] for a, b in zip(starts.tolist(), ends.tolist())]
        elif kind == 4:  # where the server plays them
            ranks = np.frombuffer(zlib.decompress(data[13:]), ">i8").astype(np.int64)
            self.placement = np.where(ranks >= 0, np.array(self.shared, np.int64)[np.maximum(ranks, 0)], -1)
        return ack([])

    def setup(self, config: dict) -> None:
        held = self.placement >= 0
        raw = self.raw[self.placement[held]]
        head = max(1, min(int(config["data.stats_rows"]), len(raw)))
        mean, std = raw[:head].mean(axis=0), raw[:head].std(axis=0)
        std[std == 0] = 1.0
        self.X = np.zeros((len(self.placement), raw.shape[1]), np.float32)
        self.X[held] = ((raw - mean) / std).astype(np.float32)
        placed = "".join((self.id_list[p] if p >= 0 else "") + "\n" for p in self.placement.tolist())
        self.ids = hashlib.sha256(placed.encode()).hexdigest()
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
        if frame.type == pb.PSI:
            return self.psi(frame)
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
