"""The server's embedding cache is per sample: batch VFL (shuffled batches, test rows apart) and online
windows."""

import numpy as np
import torch

from fedstream.transport import CompressedTransport, CompressionSpec
from fedstream.transport.messages import Embedding
from fedstream.vfl import BatchVFLSettings
from fedstream.vfl.data import VerticalImages, strips
from fedstream.vfl.trainer import build_parties, evaluate, train_epoch

SPEC = CompressionSpec(up="topk-grad", cache=True, ratio=0.25)


def synthetic_images(n_train=120, n_test=40, seed=0) -> VerticalImages:
    """Random 28x28 'digits' whose label shows in the mean brightness (learnable, no data files)."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    y = rng.integers(0, 10, n)
    x = np.clip(rng.normal(20 * y[:, None, None, None], 30, (n, 1, 28, 28)), 0, 255).astype(np.uint8)
    return VerticalImages("mnist", x[:n_train], y[:n_train], x[n_train:], y[n_train:], strips(28, 4))


class Recorder:
    """A transport wrapper that keeps, per uplink message, the client, sample ids and the values
    the server received (what the top model is fed)."""

    def __init__(self, inner):
        self.inner = inner
        self.received: list[tuple[int, np.ndarray, np.ndarray]] = []

    @property
    def ledger(self):
        return self.inner.ledger

    @ledger.setter
    def ledger(self, value):
        self.inner.ledger = value

    def up(self, msg, samples=None):
        out = self.inner.up(msg, samples=samples)
        self.received.append((msg.client, np.asarray(samples).copy(), out.values.copy()))
        return out

    def down(self, msg):
        return self.inner.down(msg)


def true_embeddings(clients, data: VerticalImages, x: np.ndarray) -> list[np.ndarray]:
    with torch.no_grad():
        return [c.model(inp).numpy() for c, inp in zip(clients, data.client_inputs(x))]


def test_shuffled_batches_fill_each_sample_from_its_own_earlier_values():
    """Clients do not learn (lr 0), so a sample's true embedding never changes: every entry the server
    is fed must be that sample's own value (sent now, or cached from an earlier epoch) or 0 (never
    sent). A cache matched by row position fills entries with other samples' values and fails."""
    data = synthetic_images()
    settings = BatchVFLSettings(
        epochs=3, batch_size=20, hidden=16, embedding=8, lr=0.1, compression=SPEC
    ).resolved()
    clients, server = build_parties(settings, data, seed=0)
    for c in clients:
        c.optimizer.param_groups[0]["lr"] = 0.0  # the server still learns, so the gradients (ranking) change
    link = Recorder(CompressedTransport(4, SPEC))
    for epoch in (1, 2, 3):
        train_epoch(epoch, settings, data, clients, server, link, seed=0, progress=None)
    truth = true_embeddings(clients, data, data.train_x)
    k = 2  # ceil(0.25 * 8) entries sent per row
    filled_from_cache = 0
    for m, ids, got in link.received:
        want = truth[m][ids]
        nonzero = got != 0
        np.testing.assert_allclose(got[nonzero], want[nonzero], rtol=1e-6, atol=1e-6)
        filled_from_cache += int(nonzero.sum()) - k * len(ids)
    assert filled_from_cache > 0  # the cache did fill entries (rankings moved between epochs)


def test_evaluation_neither_reads_nor_writes_the_training_rows():
    data = synthetic_images()
    settings = BatchVFLSettings(
        epochs=1, batch_size=20, hidden=16, embedding=8, lr=0.1, compression=SPEC
    ).resolved()
    clients, server = build_parties(settings, data, seed=0)
    link = CompressedTransport(4, SPEC)
    train_epoch(1, settings, data, clients, server, link, seed=0, progress=None)
    n = len(data.train_y)
    cache = link.server_ends[0].receiver.table
    before_rows, before_bytes = cache.lookup(np.arange(n)).copy(), link.ledger.summary()
    eval_bytes = evaluate(settings, data, clients, server, link).eval_bytes
    assert link.ledger.summary() == before_bytes and eval_bytes > 0  # evaluation bytes are counted apart
    np.testing.assert_array_equal(cache.lookup(np.arange(n)), before_rows)  # training rows untouched
    test_rows = cache.lookup(n + np.arange(len(data.test_y)))
    assert np.count_nonzero(test_rows) > 0  # the test samples have their own rows
    # and the test rows start from zero, not from training rows: the first evaluation of a fresh
    # copy fed only what was sent (k = 2 entries per row)
    fresh = CompressedTransport(4, SPEC)
    fresh.load_state_dict(link.state_dict())
    fresh.server_ends[0].receiver.table.load_state_dict(
        {"ids": np.arange(n), "rows": before_rows, "shape": np.array([n, 8])})
    rec = Recorder(fresh)
    evaluate(settings, data, clients, server, rec)
    assert all(np.count_nonzero(got, axis=1).max() <= 2 for m, _, got in rec.received if m == 0)


def test_online_windows_key_rows_by_the_round_of_their_sample():
    """An SLR/DLR window of round t holds the samples of rounds t-R+1..t: sample s moves up one row
    per round, and its unsent entries take the values sent for s the round before."""
    spec = CompressionSpec(up="topk", cache=True, ratio=0.25)
    tr = CompressedTransport(1, spec)
    seen: dict[int, np.ndarray] = {}
    hits = 0
    for t in range(10):
        rows = list(range(max(0, t - 2), t + 1))  # window of 3
        values = np.random.default_rng(t).standard_normal((len(rows), 8)).astype(np.float32)  # new each round
        got = tr.up(Embedding(t, 0, values)).values
        for r, s in enumerate(rows):
            sent = np.zeros(8, bool)
            sent[np.argsort(-np.abs(values[r]))[:2]] = True  # top-k by magnitude
            want = np.where(sent, values[r], seen.get(s, np.zeros(8, np.float32)))
            np.testing.assert_array_equal(got[r], want)
            hits += int(np.count_nonzero(want[~sent]))
            seen[s] = got[r]
    assert hits > 0
