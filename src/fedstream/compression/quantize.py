"""Downlink gradient codecs: the paper's 3-sigma quantiser (section 3.2), signSGD and no compression.

:class:`ThreeSigmaQuantizer` follows section 3.2 of the paper. Before sending client i its
gradient dL/dE, the server takes the mean mu and standard deviation sigma of the *previous
round's unquantised* gradient of the same client (its "gradient distribution table"), keeps the
threshold interval [mu - 3 sigma, mu + 3 sigma] (the 3-sigma rule), sets every entry outside it
to 0, splits the interval into P equal parts and rounds every other entry to the nearest of the
P + 1 end points::

    lo = mu - 3 sigma,  step = 6 sigma / P,  k = rint((g - lo) / step) in 0..P,  g~ = lo + k step

Symbols 0..P name the end points and P + 1 names "zero (outlier)"; the P + 2 symbols are
Huffman-coded with a table built from this message's own symbol counts. After sending, the
server records the raw gradient's mu, sigma for the next round ("the server re-records the
distribution of each client's original, uncompressed gradient after every iteration").

Choices the paper leaves open, made here:

* **First round.** There is no previous gradient, so mu and sigma come from the current one.
* **sigma** is the population standard deviation (ddof = 0). The paper writes "均值μ和方差σ"
  (mean mu and *variance* sigma), but the interval uses the 3-sigma rule, which is stated in
  standard deviations.
* **The message carries mu and sigma** (2 float32). The receiving client never sees the raw
  gradient, so it cannot compute them itself; carrying them also makes decoding stateless and
  robust to a lost round. The per-client state therefore lives with the sender only
  (:class:`QuantizerState`, one per client on the server).
* The sender quantises with the float32-rounded mu and sigma it transmits, so both sides compute
  the same end points bit for bit.
* **Outliers** (``outliers``): ``"zero"`` is the paper's rule (symbol P + 1, decoded 0).
  ``"clip"`` (an option beyond the paper, off by default) sends an entry below mu - 3 sigma as the
  end point ``lo`` and one above mu + 3 sigma as ``hi`` (symbols 0 and P): a heavy-tailed
  mini-batch gradient keeps its largest entries' sign and most of their size instead of losing
  them. Only the encoder differs; the message format and the decoder are the same (a clipped
  message simply never uses symbol P + 1).
* **Rounding** (``rounding``): ``"nearest"`` is the paper's (``rint``). ``"stochastic"`` (an
  option beyond the paper, off by default) rounds up with probability equal to the fractional
  part, ``k = floor((g - lo) / step + u)`` with u uniform in [0, 1): an entry inside the interval is
  then sent unbiased, E[g~] = g, where nearest rounding sends every entry smaller than step / 2 =
  sigma / 8 (at P = 24) as mu, i.e. drops most of a heavy-tailed gradient's small entries. The
  sender draws u; the format and the decoder are the same.
* **Interval width** (``width``): the paper's interval is mu +- 3 sigma. ``width = w`` (an option
  beyond the paper, default 3) quantises on mu +- w sigma instead: a heavy-tailed gradient keeps
  more of its largest entries (with ``outliers = "clip"``, fewer are cut to the ends), at a
  coarser step 2 w sigma / P unless P grows with it. The message carries s = w sigma / 3 in its
  sigma field (the interval's half width over 3), so the format and the decoder are unchanged:
  the decoder's mu +- 3 s is the sender's mu +- w sigma.
* sigma = 0 (a constant previous gradient) collapses the interval to the point mu: entries equal
  to mu get symbol 0 (value mu), all others are outliers (0).

Message layout (little-endian)::

    levels P: u8 | mu: f32 | sigma: f32 | entry count: varint | Huffman block

The Huffman block (:mod:`fedstream.compression.huffman_block`) holds a mode/padding byte, the
code table and the bit string; the mode says whether single symbols or pairs of symbols were
coded, whichever made the message smaller (pairs win only for very long gradients).

:class:`SignCodec` (signSGD, ref. [18]; plain +-1 or scaled by mean |g|) and :class:`Float32Codec` are
the paper's baselines.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from fedstream.compression.base import F32, as_bytes, as_float32, check_shape
from fedstream.compression.huffman_block import decode_block, encode_block
from fedstream.compression.varint import encode_varint, read_varint
from fedstream.errors import ProtocolError

_QHEAD = struct.Struct("<Bff")


@dataclass
class QuantizerState:
    """What the sender remembers about one client's gradients: the previous round's raw mu, sigma.

    ``None`` until the first gradient is observed. Keep one per client (the paper's 梯度分布表).
    """

    mu: float | None = None
    sigma: float | None = None
    rounds: int = 0

    def observe(self, grad: np.ndarray) -> None:
        """Record an unquantised gradient's statistics for the next round."""
        self.mu, self.sigma = gradient_stats(grad)
        self.rounds += 1


def gradient_stats(grad: np.ndarray) -> tuple[float, float]:
    """Mean and standard deviation (ddof=0) of a gradient, accumulated in float64, rounded to float32."""
    g = grad.astype(np.float64, copy=False)
    mu, sigma = (np.float32(g.mean()), np.float32(g.std())) if g.size else (np.float32(0), np.float32(0))
    if not (np.isfinite(mu) and np.isfinite(sigma)):
        raise ProtocolError(f"gradient statistics mu={mu}, sigma={sigma} do not fit float32")
    return float(mu), float(sigma)


OUTLIERS = ("zero", "clip")
ROUNDINGS = ("nearest", "stochastic")


class ThreeSigmaQuantizer:
    """The paper's downlink codec: 3-sigma interval, P-level uniform quantisation, Huffman coding.

    ``outliers``: ``"zero"`` (the paper) sends entries outside the interval as 0, ``"clip"`` as the
    nearer end point. ``rounding``: ``"nearest"`` (the paper) or ``"stochastic"`` (unbiased; the
    uniform draws come from the ``rng`` given to :meth:`encode`). ``width``: the interval's half width
    in standard deviations (the paper: 3)."""

    def __init__(
        self, levels: int = 24, outliers: str = "zero", rounding: str = "nearest", width: float = 3.0
    ):
        if isinstance(levels, bool) or not isinstance(levels, (int, np.integer)) or not 1 <= levels <= 254:
            raise ProtocolError(
                f"levels P must be an integer in 1..254 (P + 2 symbols fit a byte), got {levels!r}"
            )
        if outliers not in OUTLIERS:
            raise ProtocolError(f"3-sigma quantiser: outliers = {outliers!r}, expected one of {OUTLIERS}")
        if rounding not in ROUNDINGS:
            raise ProtocolError(f"3-sigma quantiser: rounding = {rounding!r}, expected one of {ROUNDINGS}")
        if isinstance(width, bool) or not isinstance(width, (int, float)) or not 0 < width <= 64:
            raise ProtocolError(f"3-sigma quantiser: width = {width!r}, expected a number in (0, 64]")
        self.levels = int(levels)
        self.outliers = outliers
        self.rounding = rounding
        self.width = float(width)
        self.outlier = self.levels + 1  # the symbol of "outside the interval, sent as 0"

    def symbols(self, grad: np.ndarray, mu: float, sigma: float, u: np.ndarray | None = None) -> np.ndarray:
        """Quantise: symbol k in 0..P for the nearest end point ``lo + k step`` (or, given uniform
        draws ``u`` of the gradient's size, ``floor((g - lo) / step + u)``: stochastic rounding);
        outside the interval P + 1 (``outliers = "zero"``) or the nearer end, 0 or P (``"clip"``)."""
        g = grad.astype(np.float64, copy=False).ravel()
        lo, hi, step = self._grid(mu, sigma)
        inside = (g >= lo) & (g <= hi)
        if step > 0:
            x = (g - lo) / step
            x = np.rint(x) if u is None else np.floor(x + u)
            k = np.clip(x, 0, self.levels).astype(np.int64)
        else:
            k = np.zeros(g.size, dtype=np.int64)
        if self.outliers == "clip":
            return k  # rint of a point beyond the interval, clipped to 0..P: the nearer end point
        return np.where(inside, k, self.outlier)

    def values(self, mu: float, sigma: float) -> np.ndarray:
        """The float32 value of each of the P + 2 symbols (the end points, then 0 for outliers)."""
        lo, _, step = self._grid(mu, sigma)
        out = np.zeros(self.levels + 2, dtype=np.float64)
        out[: self.levels + 1] = lo + step * np.arange(self.levels + 1)
        return out.astype(F32)

    def _grid(self, mu: float, sigma: float) -> tuple[float, float, float]:
        mu, sigma = float(np.float32(mu)), float(np.float32(sigma))
        return mu - 3.0 * sigma, mu + 3.0 * sigma, 6.0 * sigma / self.levels

    def encode(
        self, grad: np.ndarray, state: QuantizerState, rng: np.random.Generator | None = None
    ) -> bytes:
        """Quantise and code ``grad`` with the previous round's stats in ``state``, then record this
        round's. ``rng``: the source of the uniform draws of ``rounding = "stochastic"`` (required
        then, ignored otherwise)."""
        if not isinstance(state, QuantizerState):
            raise ProtocolError(f"state must be a QuantizerState, got {type(state).__name__}")
        g = as_float32(grad, "3-sigma quantiser")
        current = gradient_stats(g)
        # first round: current
        mu, sigma = map(np.float32, current if state.mu is None else (state.mu, state.sigma))
        if self.width != 3.0:  # the sigma field carries the half width over 3 (see the module notes)
            sigma = np.float32(float(sigma) * self.width / 3.0)
        u = None
        if self.rounding == "stochastic":
            if rng is None:
                raise ProtocolError("3-sigma quantiser: rounding = 'stochastic' needs an rng to encode")
            u = rng.random(g.size)
        sym = self.symbols(g, mu, sigma, u)
        block = encode_block(sym, self.levels + 2)
        state.mu, state.sigma = current
        state.rounds += 1
        return _QHEAD.pack(self.levels, mu, sigma) + encode_varint(g.size) + block

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray:
        """The dequantised float32 gradient of ``shape`` from a message made by :meth:`encode`."""
        data, shape = as_bytes(data, "3-sigma quantiser"), check_shape(shape, "3-sigma quantiser")
        if len(data) < _QHEAD.size:
            raise ProtocolError(
                f"quantised gradient of {len(data)} bytes is shorter than its {_QHEAD.size}-byte header"
            )
        levels, mu, sigma = _QHEAD.unpack_from(data)
        if levels != self.levels:
            raise ProtocolError(
                f"quantised gradient uses P={levels} levels, this codec expects P={self.levels}"
            )
        if not (np.isfinite(mu) and np.isfinite(sigma) and sigma >= 0):
            raise ProtocolError(
                f"quantised gradient: mu={mu}, sigma={sigma}; expected finite values and sigma >= 0"
            )
        n, offset = read_varint(data, _QHEAD.size, what="quantised gradient entry count")
        expected = int(np.prod(shape, dtype=np.int64))
        if n != expected:
            raise ProtocolError(
                f"quantised gradient holds {n} entries, expected {expected} for shape {shape}"
            )
        sym = decode_block(data, offset, n, self.levels + 2)
        return self.values(mu, sigma)[sym].reshape(shape)


class SignCodec:
    """signSGD (ref. [18]): one bit per entry (its sign), optionally with one float32 scale.

    ``scaled=False`` is signSGD as Bernstein et al. state it: the receiver gets sign(g) = +-1
    and the learning rate alone sets the step (layout ``np.packbits(g >= 0)``, ceil(n/8) bytes).
    The paper's observation that signSGD makes VFL training oscillate and fail to converge
    (section 4.2) is about this form: a +-1 entry is orders of magnitude larger than dL/dE.
    ``scaled=True`` also sends ``scale = mean |g|`` and decodes to +-scale, keeping the L1 norm
    of the original (layout ``scale: f32 | packbits``, 4 + ceil(n/8) bytes), a common variant.
    An exact 0 counts as positive (1 bit cannot say "zero"); padding bits are zero.
    """

    def __init__(self, scaled: bool = True):
        if not isinstance(scaled, bool):
            raise ProtocolError(f"sign codec: scaled must be true or false, got {scaled!r}")
        self.scaled = scaled
        self._head = 4 if scaled else 0

    def encode(self, values: np.ndarray) -> bytes:
        g = as_float32(values, "sign codec")
        bits = np.packbits(g.ravel() >= 0).tobytes()
        if not self.scaled:
            return bits
        scale = np.float32(np.abs(g, dtype=np.float64).mean()) if g.size else np.float32(0)
        return struct.pack("<f", scale) + bits

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray:
        data, shape = as_bytes(data, "sign codec"), check_shape(shape, "sign codec")
        n = int(np.prod(shape, dtype=np.int64))
        expected = self._head + (n + 7) // 8
        if len(data) != expected:
            form = "scaled (4-byte scale + 1 bit per entry)" if self.scaled else "plain (1 bit per entry)"
            raise ProtocolError(
                f"{form} sign-coded gradient for shape {shape}: expected {expected} bytes, got {len(data)}"
            )
        s = np.float32(1)
        if self.scaled:
            (scale,) = struct.unpack_from("<f", data)
            if not (np.isfinite(scale) and scale >= 0):
                raise ProtocolError(f"sign-coded gradient: scale {scale}, expected a finite value >= 0")
            s = np.float32(scale)
        bits = np.unpackbits(np.frombuffer(data, np.uint8, offset=self._head))
        if bits[n:].any():
            raise ProtocolError("sign-coded gradient: non-zero padding bits after the last entry")
        return np.where(bits[:n].astype(bool), s, -s).astype(F32).reshape(shape)


class Float32Codec:
    """No compression: the raw little-endian float32 values, 4 bytes per entry (the baseline)."""

    def encode(self, values: np.ndarray) -> bytes:
        return as_float32(values, "float32 codec").tobytes()

    def decode(self, data: bytes, shape: tuple[int, ...]) -> np.ndarray:
        data, shape = as_bytes(data, "float32 codec"), check_shape(shape, "float32 codec")
        n = int(np.prod(shape, dtype=np.int64))
        if len(data) != 4 * n:
            raise ProtocolError(f"float32 payload for shape {shape}: expected {4 * n} bytes, got {len(data)}")
        out = np.frombuffer(data, F32).reshape(shape).copy()
        if not np.isfinite(out).all():
            raise ProtocolError("float32 payload holds NaN or inf")
        return out
