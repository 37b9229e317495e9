"""Contract checks over every padding (the :class:`fedstream.seams.Padding` seam).

Registry: one line per padding. Checks: it satisfies the Protocol; ``update`` client by client and
``update_rows`` per round give the same state; ``assemble`` equals update-then-fill; state saved
and loaded continues bit for bit; bad clients raise ``ConfigError``, bad embeddings ``DataError``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from fedstream.errors import ConfigError, DataError
from fedstream.seams import Padding
from fedstream.selection.padding import PADDINGS, make_padding

M, E = 3, 4

PADDING_FACTORIES: list[tuple[str, Callable[[], Padding]]] = [
    *[(name, lambda name=name: make_padding(name, M, E)) for name in PADDINGS],
    ("ema-0.5", lambda: make_padding("ema", M, E, alpha=0.5)),
]
IDS = [name for name, _ in PADDING_FACTORIES]
FACTORIES = [f for _, f in PADDING_FACTORIES]


def _rounds(rounds: range):
    """(rows (M, E), sent (M,)) per round: which clients really sent, and what."""
    for t in rounds:
        rng = np.random.default_rng(t)
        yield rng.normal(size=(M, E)), np.array([(t + m) % (m + 2) != 0 for m in range(M)])


def _by_rows(p: Padding, rounds: range) -> None:
    for rows, sent in _rounds(rounds):
        p.update_rows(rows, sent)


def _by_client(p: Padding, rounds: range) -> None:
    for rows, sent in _rounds(rounds):
        for m in np.flatnonzero(sent):
            p.update(int(m), rows[m])


def _fills(p: Padding) -> np.ndarray:
    return np.stack([p.fill(m, 2) for m in range(M)])


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_padding_satisfies_the_protocol(make):
    p = make()
    assert isinstance(p, Padding) and p.name in PADDINGS
    assert p.fill(0).shape == (E,) and p.fill(1, 3).shape == (3, E)
    assert not _fills(p).any()  # before a client sent anything: zeros


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_update_rows_equals_update_client_by_client(make):
    a, b = make(), make()
    _by_rows(a, range(9))
    _by_client(b, range(9))
    assert np.array_equal(_fills(a), _fills(b))
    sa, sb = a.state_dict(), b.state_dict()
    assert all(np.array_equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_batch_update_equals_rows_in_order(make):
    a, b = make(), make()
    rows = np.random.default_rng(3).normal(size=(5, E))
    a.update(1, rows)
    for r in rows:
        b.update(1, r)
    assert np.allclose(a.fill(1), b.fill(1), rtol=1e-12, atol=1e-15)  # a batch sums in another order
    assert a.state_dict()["seen"][1] == b.state_dict()["seen"][1] == 5


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_assemble_updates_present_and_fills_absent(make):
    a, b = make(), make()
    _by_rows(a, range(4))
    _by_rows(b, range(4))
    present = np.random.default_rng(5).normal(size=(2, E))
    out = a.assemble([None, present, None], 2)
    b.update(1, present)
    assert np.array_equal(out[1], present)
    assert np.array_equal(out[0], b.fill(0, 2)) and np.array_equal(out[2], b.fill(2, 2))
    assert np.array_equal(_fills(a), _fills(b))  # the present embedding was recorded


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_state_save_load_equals_continuing(make):
    whole = make()
    _by_rows(whole, range(12))
    first = make()
    _by_rows(first, range(7))
    state = first.state_dict()
    _by_rows(first, range(7, 9))  # training on must not change the saved state
    resumed = make()
    resumed.load_state_dict(state)
    _by_rows(resumed, range(7, 12))
    assert np.array_equal(_fills(whole), _fills(resumed))
    sw, sr = whole.state_dict(), resumed.state_dict()
    assert sw.keys() == sr.keys() and all(np.array_equal(sw[k], sr[k]) for k in sw)


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_bad_input_raises_the_modules_errors(make):
    p = make()
    for client in (-1, M):
        with pytest.raises(ConfigError):
            p.update(client, np.zeros(E))
        with pytest.raises(ConfigError):
            p.fill(client)
    with pytest.raises(ConfigError):
        p.fill(0, -1)
    for bad in (np.zeros(E + 1), np.zeros((2, 2, E)), np.full(E, np.nan), np.full(E, np.inf)):
        with pytest.raises(DataError):
            p.update(0, bad)
    with pytest.raises(DataError):
        p.update_rows(np.zeros((M, E + 1)), np.ones(M, bool))
    with pytest.raises(DataError):
        p.update_rows(np.full((M, E), np.nan), np.ones(M, bool))
    with pytest.raises(DataError):
        p.assemble([None] * (M + 1), 1)
    with pytest.raises(DataError):
        p.load_state_dict({"value": np.zeros((M + 1, E)), "seen": np.zeros(M, np.int64)})
    with pytest.raises(DataError):
        p.load_state_dict({})


def test_bad_padding_settings_raise_config_error():
    for bad in (lambda: make_padding("median", M, E), lambda: make_padding("zero", 0, E),
                lambda: make_padding("mean", M, 0), lambda: make_padding("ema", M, E, alpha=0.0),
                lambda: make_padding("ema", M, E, alpha=1.5)):
        with pytest.raises(ConfigError):
            bad()
