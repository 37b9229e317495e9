"""Contract checks over every activation policy (the :class:`fedstream.seams.ActivationPolicy` seam).

Registry: one line per policy configuration. Checks: it satisfies the Protocol; masks are bool
arrays of the block means' shape, the same for the same chunk whatever the object did before;
``queried`` is None or a bool array of the mask's shape; a policy played for n chunks, saved
(when it learns) and loaded into a fresh one, plays m more chunks exactly as the uninterrupted
one; invalid settings raise ``ConfigError``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

from fedstream.errors import ConfigError, FedstreamError
from fedstream.ovfl.activation import EventActivation, FixedCount, Full, RandomActivation, make_activation
from fedstream.seams import ActivationPolicy, StandIn, Stateful
from fedstream.selection.online import TopLActivation

M, E, ROUNDS = 4, 3, 12  # clients, embedding width (topl's stand-in), rounds per chunk


def _topl(padding: str, **kw) -> Callable[[], ActivationPolicy]:
    return lambda: TopLActivation(M, l=2, embedding=E, window=8, explore=5, padding=padding, k=1,
                                  n_groups=4, seed=3, **kw)


POLICIES: list[tuple[str, Callable[[], ActivationPolicy]]] = [
    ("full", lambda: Full(M, seed=1)),
    ("random", lambda: RandomActivation(M, p=0.4, seed=1)),
    ("event", lambda: EventActivation(M, threshold=0.1, seed=1)),
    ("fixed", lambda: FixedCount(M, k=2, seed=1)),
    ("topl-mean", _topl("mean")),
    ("topl-zero", _topl("zero")),
    ("topl-latest", _topl("latest")),
    ("topl-ema", _topl("ema")),
    ("make-random", lambda: make_activation("random", M, p=0.7, threshold=0.0, k=1, seed=2)),
    ("make-topl", lambda: make_activation("topl", M, p=0.5, threshold=0.0, k=1, seed=2, l=1, window=6,
                                          explore=4, embedding=E)),
]
IDS = [name for name, _ in POLICIES]
FACTORIES = [f for _, f in POLICIES]


def _means(chunk: int) -> np.ndarray:
    return np.random.default_rng([1, chunk]).normal(size=(ROUNDS, M))


def _play(policy, chunks: range) -> list[np.ndarray]:
    """Masks (and a stand-in's fills) of ``chunks``; a learning policy sees each round's server input
    row and label, then each complete chunk, as the engine shows them."""
    out = []
    for c in chunks:
        mask = policy.mask(c, _means(c))
        out.append(mask)
        queried = policy.queried(mask)
        if isinstance(policy, StandIn):
            rng = np.random.default_rng([2, c])
            for r in range(ROUNDS):
                real = mask[r] if queried is None else mask[r] | queried[r]
                out.append(np.stack([policy.fill(m, 1) for m in range(M)]))
                policy.received(int(rng.integers(3)), rng.normal(size=M * E).astype(np.float32), real)
        policy.observe([np.full((ROUNDS, 2), float(c)) for _ in range(M)], np.zeros(ROUNDS, np.int64))
    return out


def _state(policy) -> dict[str, np.ndarray]:
    if not isinstance(policy, Stateful):
        return {}
    return {k: v for k, v in policy.state_dict().items() if k != "seconds"}  # seconds: wall time spent


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_policy_satisfies_the_protocol(make):
    policy = make()
    assert isinstance(policy, ActivationPolicy) and policy.n_clients == M
    mask = policy.mask(0, _means(0))
    assert mask.dtype == bool and mask.shape == (ROUNDS, M)
    queried = policy.queried(mask)
    assert queried is None or (queried.dtype == bool and queried.shape == mask.shape)
    if isinstance(policy, StandIn):
        assert isinstance(policy, Stateful) and policy.fill(0, 2).shape == (2, E)


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_mask_does_not_depend_on_earlier_masks(make):
    """Without observations in between, chunk c's mask is the same from a fresh policy."""
    used = make()
    for c in range(4):
        used.mask(c, _means(c))
    assert np.array_equal(used.mask(4, _means(4)), make().mask(4, _means(4)))


@pytest.mark.parametrize("make", FACTORIES, ids=IDS)
def test_state_save_load_equals_continuing(make):
    n, m = 3, 3
    whole = make()
    out_whole = _play(whole, range(n + m))
    first = make()
    _play(first, range(n))
    resumed = make()
    if isinstance(first, Stateful):
        state = first.state_dict()
        _play(first, range(n, n + 1))  # playing on must not change the saved state
        resumed.load_state_dict(state)
    out_resumed = _play(resumed, range(n, n + m))
    tail = out_whole[len(out_whole) - len(out_resumed):]
    assert all(np.array_equal(a, b) for a, b in zip(tail, out_resumed))
    sw, sr = _state(whole), _state(resumed)
    assert sw.keys() == sr.keys()
    assert all(np.array_equal(sw[k], sr[k], equal_nan=sw[k].dtype.kind == "f") for k in sw)  # NaN: no scores


@pytest.mark.parametrize("bad", [
    lambda: RandomActivation(M, p=1.5),
    lambda: RandomActivation(M, p=-0.1),
    lambda: FixedCount(M, k=M + 1),
    lambda: FixedCount(M, k=-1),
    lambda: make_activation("sometimes", M, p=0.5, threshold=0.0, k=1, seed=0),
    lambda: make_activation("topl", M, p=0.5, threshold=0.0, k=1, seed=0, l=M + 1),
    _topl("median"),
    lambda: TopLActivation(M, l=0, embedding=E),
    lambda: TopLActivation(M, l=2, embedding=E, explore=0),
    lambda: TopLActivation(M, l=2, embedding=E, window=1),
])
def test_bad_settings_raise_config_error(bad):
    with pytest.raises(ConfigError):
        bad()


def test_topl_state_of_another_shape_raises_a_fedstream_error():
    state = _topl("mean")().state_dict()
    with pytest.raises(FedstreamError):
        TopLActivation(M, l=2, embedding=E + 1, window=8).load_state_dict(state)


def _plain_random(chunk: int, shape: tuple) -> np.ndarray:
    return np.random.default_rng([1, 3, chunk]).random(shape) < 0.4


def _plain_fixed(chunk: int, shape: tuple) -> np.ndarray:
    return np.random.default_rng([1, 3, chunk]).random(shape).argsort(axis=1).argsort(axis=1) < 2


@pytest.mark.parametrize("make, plain", [(lambda: RandomActivation(M, p=0.4, seed=1), _plain_random),
                                         (lambda: FixedCount(M, k=2, seed=1), _plain_fixed)])
def test_a_chunk_s_kept_draws_give_the_plain_draws_masks(make, plain):
    """The fast path (a chunk's uniform draws kept while the same chunk is asked again, as a
    deployed client asks once per event) gives the plain draws' mask for every chunk and shape."""
    kept = make()
    for chunk, rounds in [(0, ROUNDS), (0, ROUNDS), (1, ROUNDS), (0, ROUNDS), (0, ROUNDS + 1), (2, 5)]:
        got = kept.mask(chunk, np.zeros((rounds, M), np.float32))
        assert got.dtype == bool and np.array_equal(got, plain(chunk, (rounds, M)))
