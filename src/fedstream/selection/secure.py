"""Optional secure mode: the clients' local distances summed under Paillier encryption (via ``phe``).

In the VF-PS baseline each client sends its local squared distances from a query to every sample
and the server adds them into global distances. With an additively homomorphic scheme (Paillier:
Enc(a)·Enc(b) = Enc(a + b)) the clients send ciphertexts, the server multiplies them without
learning any client's share, and only the key holder (a dedicated key server in VF-PS) decrypts
the sums. Roles in :class:`PaillierAggregator`: :meth:`~PaillierAggregator.encrypt` (client),
:meth:`~PaillierAggregator.add` (server), :meth:`~PaillierAggregator.decrypt` (key holder).

Distances are encoded as non-negative fixed-point integers round(d · ``scale``) (``scale=1`` is
exact for integer features such as MNIST pixels). With ``pack=True`` many values share one
plaintext, each in a slot wide enough for the sum of all clients' values, so the cost per value
falls by the number of slots (about 70 for 2048-bit keys and MNIST distances); sums cannot carry
between slots because every slot's total fits its width.

``phe`` is imported lazily; without it every entry point raises ConfigError naming
``pip install phe`` (``pip install gmpy2`` makes it several times faster).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fedstream.errors import ConfigError, DataError
from fedstream.selection.digamma import psi as digamma
from fedstream.selection.reference import local_sq_distances, m_from_distances
from fedstream.selection.validation import (
    check_blocks,
    check_groups,
    check_k,
    check_labels,
    check_queries,
)


def load_phe():
    """The ``phe`` module, or ConfigError telling how to install it."""
    try:
        import phe
    except ImportError:
        raise ConfigError("secure mode needs the Paillier library phe: pip install phe "
                          "(and pip install gmpy2 for speed)") from None
    return phe


def uses_gmpy2() -> bool:
    """True when phe runs on gmpy2's big integers (several times faster than pure Python)."""
    try:
        from phe import util
    except ImportError:
        return False
    return bool(getattr(util, "HAVE_GMP", False))


@dataclass
class PaillierAggregator:
    """Paillier keys plus the fixed-point / packing encoding of distance vectors."""

    key_bits: int = 2048
    scale: float = 1.0
    pack: bool = True
    keygen_seconds: float = field(init=False, default=0.0)

    def __post_init__(self):
        phe = load_phe()
        if self.key_bits < 256 or self.key_bits % 8:
            raise ConfigError(f"key_bits must be a multiple of 8 and >= 256, got {self.key_bits}")
        if not self.scale > 0:
            raise ConfigError(f"scale must be > 0, got {self.scale}")
        t0 = time.perf_counter()
        self.public_key, self.private_key = phe.generate_paillier_keypair(n_length=self.key_bits)
        self.keygen_seconds = time.perf_counter() - t0
        self._phe = phe

    # ------------------------------------------------------------------ encoding
    def encode(self, values: np.ndarray) -> np.ndarray:
        """Non-negative fixed-point integers round(values · scale) (object array of Python ints)."""
        v = np.asarray(values, dtype=np.float64)
        if not np.isfinite(v).all() or (v < 0).any():
            raise DataError("distances to encrypt must be finite and non-negative")
        return np.array([int(x) for x in np.rint(v * self.scale)], dtype=object)

    def slot_bits(self, max_value: int, n_clients: int) -> int:
        """Width of a packed slot: enough for the sum of ``n_clients`` values up to ``max_value``."""
        return max(1, int(n_clients * max_value).bit_length())

    def slots(self, max_value: int, n_clients: int) -> int:
        """Values per ciphertext (1 without packing); the packed plaintext stays below the modulus n."""
        if not self.pack:
            return 1
        room = self.public_key.n.bit_length() - 1
        return max(1, room // self.slot_bits(max_value, n_clients))

    # ------------------------------------------------------------------ the three roles
    def encrypt(self, values: np.ndarray, *, max_value: int, n_clients: int) -> list:
        """Client: its encoded values as ciphertexts (``max_value`` / ``n_clients`` fix the packing)."""
        ints = self.encode(values)
        if ints.size and max(ints) > max_value:
            raise DataError(f"an encoded distance {max(ints)} exceeds max_value={max_value}")
        width, per = self.slot_bits(max_value, n_clients), self.slots(max_value, n_clients)
        if not self.pack and n_clients * max_value >= self.public_key.max_int:
            raise ConfigError(f"sums up to {n_clients * max_value} overflow a {self.key_bits}-bit key")
        out = []
        for s in range(0, ints.size, per):
            plain = 0
            for i, v in enumerate(ints[s:s + per]):
                plain |= v << (width * i)
            out.append(self._phe.EncryptedNumber(self.public_key, self.public_key.raw_encrypt(plain), 0))
        return out

    @staticmethod
    def add(ciphertext_lists: Sequence[list]) -> list:
        """Server: element-wise homomorphic sum of the clients' ciphertext lists."""
        if not ciphertext_lists:
            raise ConfigError("add needs at least one client's ciphertexts")
        total = list(ciphertext_lists[0])
        for other in ciphertext_lists[1:]:
            if len(other) != len(total):
                raise DataError(f"ciphertext lists differ in length: {len(other)} vs {len(total)}")
            total = [a + b for a, b in zip(total, other)]
        return total

    def decrypt(self, ciphertexts: list, count: int, *, max_value: int, n_clients: int) -> np.ndarray:
        """Key holder: the ``count`` summed values, decoded back to distances."""
        width, per = self.slot_bits(max_value, n_clients), self.slots(max_value, n_clients)
        mask = (1 << width) - 1
        out = np.empty(count, dtype=np.float64)
        for c, ct in enumerate(ciphertexts):
            plain = self.private_key.raw_decrypt(ct.ciphertext(be_secure=False))
            for i in range(min(per, count - c * per)):
                out[c * per + i] = (plain >> (width * i)) & mask
        return out / self.scale

    def secure_sum(
        self, local: Sequence[np.ndarray], *, max_value: int | None = None
    ) -> tuple[np.ndarray, dict]:
        """The clients' vectors summed under encryption, with the time of each role and the bytes sent."""
        local = [np.asarray(v, dtype=np.float64) for v in local]
        if not local or any(v.shape != local[0].shape or v.ndim != 1 for v in local):
            raise DataError("secure_sum needs one 1-D distance vector per client, all of the same length")
        m, n = len(local), local[0].size
        if max_value is None:
            max_value = int(math.ceil(max(float(v.max()) for v in local) * self.scale)) if n else 1
        t0 = time.perf_counter()
        cts = [self.encrypt(v, max_value=max_value, n_clients=m) for v in local]
        t1 = time.perf_counter()
        total = self.add(cts)
        t2 = time.perf_counter()
        out = self.decrypt(total, n, max_value=max_value, n_clients=m)
        t3 = time.perf_counter()
        cost = {"encrypt_s": t1 - t0, "add_s": t2 - t1, "decrypt_s": t3 - t2, "values": m * n,
                "ciphertexts": m * len(total), "bytes_up": m * len(total) * 2 * self.key_bits // 8,
                "slots": self.slots(max_value, m)}
        return out, cost


def secure_group_mi(blocks: Sequence[np.ndarray], labels, group, *, k: int = 10, queries=None,
                    aggregator: PaillierAggregator | None = None, psi: str = "approx") -> tuple[float, dict]:
    """Eq. (1) for one group with every global distance vector formed under Paillier; ``(score, cost)``.

    Slow by nature (one encryption per packed slot group, per client, per query): meant for a few
    queries, as in VF-PS (20 test samples), and for measuring the cost of secure mode.
    """
    blocks = check_blocks(blocks)
    y = check_labels(labels, blocks[0].shape[0])
    (group,) = check_groups([group], len(blocks))
    q = check_queries(queries, y.shape[0])
    k = check_k(k, y, q)
    agg = aggregator or PaillierAggregator()
    n, counts = y.shape[0], np.bincount(y)
    terms, cost = (
        [],
        {"encrypt_s": 0.0, "add_s": 0.0, "decrypt_s": 0.0, "values": 0, "ciphertexts": 0, "bytes_up": 0},
    )
    for i in q:
        dist, c = agg.secure_sum([local_sq_distances(blocks[j], int(i)) for j in group])
        for key in cost:
            cost[key] += c[key]
        m_q = m_from_distances(dist, y, int(i), k)
        terms.append(digamma(n, psi) - digamma(counts[y[i]], psi) + digamma(k, psi) - digamma(m_q, psi))
    return math.fsum(terms) / len(terms), cost  # exactly rounded, as the reference
