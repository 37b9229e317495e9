"""Infinite MNIST: an endless, index-addressable stream of deformed MNIST training digits.

In the spirit of Loosli, Canu & Bottou (2007), "Training invariant support vector machines using
selective sampling": every integer index names one image, computed on demand, so a stream of any
length needs no storage and any run can restart at any index.

Index arithmetic (kept from the original generator): for index ``i >= 0``

* base image ``a = i mod n`` (n = number of images given, 60,000 for MNIST train), label ``y[a]``;
* field indices ``k1 = (i * 131071) mod 1521`` and ``k2 = (k1 + 1 + 2 i) mod 1522``, computed as
  ``((i mod 1521) * 131071) mod 1521`` and ``(k1 + 1 + 2 (i mod 1522)) mod 1522`` so that nothing
  overflows int64 for any ``i < 2**63``;
* ``alpha = +1``, flipped to ``-1`` when ``k1 + k2`` is odd. Note: 1522 being even, ``k2`` has
  the parity of ``k1 + 1``, so ``k1 + k2`` is always odd and alpha is always -1 with this
  arithmetic; kept as specified, it costs nothing (the fields are symmetric in distribution);
* first-order elastic deformation ``x = X[a] + alpha (F[k1] Tx[a] - F[k2] Ty[a])``, clipped to
  [0, 255], where Tx, Ty are the horizontal and vertical derivatives of X[a] smoothed by a Gaussian
  (sigma ``TANGENT_SIGMA`` = 1 px; central differences), i.e. the image moved by the displacement
  field ``(alpha F[k1], -alpha F[k2])`` to first order;
* a translation by at most one pixel chosen by ``k1 mod 9`` (see ``SHIFTS``), filling with 0;
* rounding to uint8.

Differences from the original, which ships its field bank and tangent vectors as data files that
are not available: the bank of 1522 fields is generated from ``seed`` (white noise smoothed by a
Gaussian of sigma ``FIELD_SIGMA`` = 4 px, each field scaled to a standard deviation of
``FIELD_STD`` = 0.75 px), and the tangent vectors are computed per batch from the image (not
stored: 2 x 60000 x 784 floats would be 376 MB). Every index is deformed, including i < n (the
original maps i < 70000 to the clean MNIST test and train images).

All per-image arithmetic is elementwise float32 (no BLAS), so an image does not depend on which
other indices share its batch. ``InfiniteMNIST.images`` runs a fused numba kernel
(:func:`_deform_kernel`, one image at a time: blur, derivatives, deformation, clip, rounding and
shift in one pass); :func:`_deform_reference` is the plain numpy implementation of the same
arithmetic, kept to check the kernel against (the tests require identical images).
"""

from __future__ import annotations

import functools
import time

import numpy as np
from numba import njit

N_FIELDS = 1522  # size of the displacement-field bank (k2 ranges over 0..1521)
K1_MOD = 1521  # k1 ranges over 0..1520
HASH_MUL = 131071  # 2**17 - 1, the original's multiplier
FIELD_SIGMA = 4.0  # px: smoothness of the random displacement fields
FIELD_STD = 0.75  # px: standard deviation of each displacement field
TANGENT_SIGMA = 1.0  # px: blur before differentiating the image
SIZE = 28
CHUNK = 512  # images per sub-batch of _deform_reference (cache-friendly; no effect on the result)
# k1 mod 9 -> (dy, dx): content moves dy rows down and dx columns right.
SHIFTS = (
    (0, 0),  # none
    (-1, 0),  # up
    (1, 0),  # down
    (0, -1),  # left
    (0, 1),  # right
    (-1, -1),  # up-left
    (-1, 1),  # up-right
    (1, -1),  # down-left
    (1, 1),  # down-right
)


def gaussian_kernel(sigma: float, radius: int | None = None) -> np.ndarray:
    """Normalised 1-D Gaussian taps, float64, of length 2*radius+1 (radius defaults to 3 sigma)."""
    r = int(np.ceil(3.0 * sigma)) if radius is None else radius
    x = np.arange(-r, r + 1, dtype=np.float64)
    w = np.exp(-0.5 * (x / sigma) ** 2)
    return w / w.sum()


def _smooth_valid(x: np.ndarray, w: np.ndarray, axis: int) -> np.ndarray:
    """'Valid' correlation of x with taps w along axis (output shorter by len(w)-1)."""
    m = x.shape[axis] - len(w) + 1
    out = None
    for k, wk in enumerate(w):
        sl = [slice(None)] * x.ndim
        sl[axis] = slice(k, k + m)
        term = x[tuple(sl)] * wk
        out = term if out is None else out + term
    return out


@functools.lru_cache(maxsize=4)
def make_field_bank(seed: int, n: int = N_FIELDS) -> np.ndarray:
    """The bank of ``n`` smooth random 28x28 displacement fields (float32, pixels) for ``seed``.

    White noise on a (28 + 2r)^2 canvas is smoothed by a separable Gaussian (sigma FIELD_SIGMA,
    r = 3 sigma) keeping only the fully-covered 28x28 centre (no boundary effects), then each
    field is scaled to a standard deviation of FIELD_STD pixels. Cached (read-only, 4.8 MB).
    """
    w = gaussian_kernel(FIELD_SIGMA)
    r = len(w) // 2
    rng = np.random.default_rng([int(seed), 0x1A15])
    noise = rng.standard_normal((n, SIZE + 2 * r, SIZE + 2 * r))
    f = _smooth_valid(_smooth_valid(noise, w, 1), w, 2)
    f *= FIELD_STD / f.std(axis=(1, 2), keepdims=True)
    bank = f.astype(np.float32)
    bank.flags.writeable = False
    return bank


def field_indices(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(k1, k2, alpha) for int64 indices >= 0, without int64 overflow for any index."""
    i = np.asarray(indices, dtype=np.int64)
    k1 = ((i % K1_MOD) * HASH_MUL) % K1_MOD
    k2 = (k1 + 1 + 2 * (i % N_FIELDS)) % N_FIELDS
    alpha = np.where((k1 + k2) % 2 == 1, -1, 1).astype(np.int64)
    return k1, k2, alpha


def check_indices(indices: np.ndarray) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu" and idx.size:
        raise ValueError(f"indices: expected integers, found dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False).reshape(-1)
    if idx.size and int(idx.min()) < 0:
        raise ValueError(f"indices: expected indices >= 0, found {int(idx.min())}")
    return idx


def _read_only(a: np.ndarray) -> np.ndarray:
    """A view of ``a`` that cannot be written through."""
    view = a.view()
    view.flags.writeable = False
    return view


class InfiniteMNIST:
    """Endless deformed copies of ``images`` (uint8 (n, 28, 28)) with ``labels`` (n,), see module doc."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, *, seed: int = 0) -> None:
        images = np.asarray(images)
        labels = np.asarray(labels)
        if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (SIZE, SIZE):
            raise ValueError(
                f"images: expected uint8 (n, 28, 28), found {images.dtype} {images.shape}"
            )
        if labels.shape != (images.shape[0],):
            raise ValueError(
                f"labels: expected shape ({images.shape[0]},) to match images, found {labels.shape}"
            )
        if images.shape[0] == 0:
            raise ValueError("images: expected at least one image, found 0")
        self.n_base = images.shape[0]
        self.seed = int(seed)
        self._images = np.ascontiguousarray(images)  # no copy if already contiguous
        self._labels = labels.astype(np.int64)
        self._fields = make_field_bank(self.seed)
        self._blur = gaussian_kernel(TANGENT_SIGMA).astype(np.float32)

    @property
    def base_images(self) -> np.ndarray:
        """The base images X (uint8 (n, 28, 28)), read-only."""
        return _read_only(self._images)

    @property
    def field_bank(self) -> np.ndarray:
        """The displacement fields F of this seed (:func:`make_field_bank`), read-only."""
        return _read_only(self._fields)

    @property
    def blur(self) -> np.ndarray:
        """The float32 Gaussian taps that smooth the tangents (sigma ``TANGENT_SIGMA``), read-only."""
        return _read_only(self._blur)

    def labels(self, indices: np.ndarray) -> np.ndarray:
        """int64 labels of the given indices (the label of base image i mod n)."""
        return self._labels[check_indices(indices) % self.n_base]

    def images(self, indices: np.ndarray) -> np.ndarray:
        """uint8 (len(indices), 28, 28): the deformed image of each index (see module doc).

        ``x = clip(X[a] + alpha (F[k1] Tx[a] - F[k2] Ty[a]), 0, 255)``, rounded half up to uint8
        and shifted by ``SHIFTS[k1 mod 9]`` (fused kernel; same float32 arithmetic as
        :func:`_deform_reference`).
        """
        idx = check_indices(indices)
        out = np.empty((idx.size, SIZE * SIZE), np.uint8)
        if idx.size:
            k1, k2, alpha = field_indices(idx)
            images = self._images.reshape(self.n_base, SIZE * SIZE)
            fields = np.ascontiguousarray(self._fields, dtype=np.float32)
            fields = fields.reshape(fields.shape[0], SIZE * SIZE)
            _deform_kernel(images, fields, self._blur, idx % self.n_base, k1, k2,
                           alpha.astype(np.float32), k1 % 9, _SHIFT_TABLE, out)
        return out.reshape(idx.size, SIZE, SIZE)


_SHIFT_TABLE = np.array(SHIFTS, dtype=np.int64)  # (9, 2): (dy, dx) per k1 mod 9


@njit(cache=True, fastmath=False)
def _deform_kernel(images, fields, w, a, k1, k2, alpha, shift, shifts, out):  # pragma: no cover
    """Fused i-MNIST deformation, one image at a time, into ``out`` (uint8 (m, 28 * 28)).

    ``images`` uint8 (n, 28 * 28) and ``fields`` float32 (N_FIELDS, 28 * 28) are flattened rows.
    Per image j: ``x = X[a] + alpha (F[k1] Tx - F[k2] Ty)``, clipped to [0, 255], ``+ 0.5`` and
    truncated to uint8, then shifted by ``shifts[shift[j]]`` with zero fill. Tx, Ty are half the
    central differences (one-sided at the border, zero outside) of X[a] blurred by the separable
    taps w with zero padding. float32 throughout, each sum taken in the same order as
    :func:`_deform_reference` (no fastmath, so no reassociation or fused multiply-add): the
    result equals the reference and does not depend on the other images of the batch.

    Every pass is one long contiguous loop over the flattened image (vectorisable); scratch
    buffers are reused. Zero padding is a zero margin around the flat buffer, and where a
    horizontal neighbour would wrap to the next row a precomputed column mask substitutes the
    0 the padded image would hold (so each term, and each sum, is the reference's).
    """
    S = SIZE
    n = S * S
    nt = w.shape[0]
    r = nt // 2
    half = np.float32(0.5)
    zero = np.float32(0.0)
    top = np.float32(255.0)
    # inside[k, i]: column of pixel i shifted by k - r is inside the image (horizontal taps).
    inside = np.empty((nt, n), np.bool_)
    for k in range(nt):
        for i in range(n):
            c = i % S + k - r
            inside[k, i] = 0 <= c < S
    # keep[d + 1, i]: column of pixel i minus d is inside the image (shift by d columns).
    keep = np.empty((3, n), np.bool_)
    for d in range(-1, 2):
        for i in range(n):
            c = i % S - d
            keep[d + 1, i] = 0 <= c < S
    xf = np.zeros(n + 2 * r * S, np.float32)  # image, r zero rows above and below
    bv = np.zeros(n + 2 * r, np.float32)  # vertical blur at offset r, zero margins
    b = np.empty(n, np.float32)  # full blur
    tx = np.empty(n, np.float32)
    ty = np.empty(n, np.float32)
    m = S + 1
    y8 = np.zeros(n + 2 * m, np.uint8)  # deformed image at offset m, zero margins (for the shift)
    x0 = r * S
    for j in range(a.shape[0]):
        img = images[a[j]]
        f1 = fields[k1[j]]
        f2 = fields[k2[j]]
        al = alpha[j]
        for i in range(n):
            xf[x0 + i] = np.float32(img[i])
        # Vertical pass: blur[y, x] = sum_k w[k] x[y + k - r, x], summed over k in order.
        wk = w[0]
        for i in range(n):
            bv[r + i] = xf[i] * wk
        for k in range(1, nt):
            wk = w[k]
            o = k * S
            for i in range(n):
                bv[r + i] = bv[r + i] + xf[o + i] * wk
        # Horizontal pass: b[y, x] = sum_k w[k] blur[y, x + k - r] (0 outside the row).
        wk = w[0]
        msk = inside[0]
        for i in range(n):
            b[i] = (bv[i] if msk[i] else zero) * wk
        for k in range(1, nt):
            wk = w[k]
            msk = inside[k]
            for i in range(n):
                b[i] = b[i] + (bv[i + k] if msk[i] else zero) * wk
        # Half central differences, one-sided (zero outside the image) at the border.
        for i in range(1, n - 1):
            tx[i] = (b[i + 1] - b[i - 1]) * half
        for y in range(S):
            tx[y * S] = b[y * S + 1] * half
            tx[y * S + S - 1] = (-b[y * S + S - 2]) * half
        for i in range(S, n - S):
            ty[i] = (b[i + S] - b[i - S]) * half
        for x in range(S):
            ty[x] = b[S + x] * half
            ty[n - S + x] = (-b[n - 2 * S + x]) * half
        # x + alpha (F1 Tx - F2 Ty), clipped to [0, 255], rounded half up to uint8.
        for i in range(n):
            v = xf[x0 + i] + (tx[i] * f1[i] - ty[i] * f2[i]) * al
            v = min(max(v, zero), top) + half
            y8[m + i] = np.uint8(v)
        # Shift: out[y, x] = y8[y - dy, x - dx], 0 outside (zero margins rows, mask columns).
        dy = shifts[shift[j], 0]
        dx = shifts[shift[j], 1]
        src = m - dy * S - dx
        msk = keep[dx + 1]
        oj = out[j]
        for i in range(n):
            oj[i] = y8[src + i] if msk[i] else 0


def _tangents_reference(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Smoothed horizontal and vertical derivatives of float32 images x (m, 28, 28) (numpy)."""
    r = len(w) // 2
    m = x.shape[0]
    # Separable blur with zero padding (MNIST background is 0).
    p = np.zeros((m, SIZE + 2 * r, SIZE), np.float32)
    p[:, r : r + SIZE] = x
    b = _smooth_valid(p, w, 1)
    p = np.zeros((m, SIZE, SIZE + 2 * r), np.float32)
    p[:, :, r : r + SIZE] = b
    b = _smooth_valid(p, w, 2)
    # Central differences, zero outside the image.
    tx = np.zeros_like(b)
    ty = np.zeros_like(b)
    tx[:, :, 1:-1] = b[:, :, 2:] - b[:, :, :-2]
    tx[:, :, 0] = b[:, :, 1]
    tx[:, :, -1] = -b[:, :, -2]
    ty[:, 1:-1] = b[:, 2:] - b[:, :-2]
    ty[:, 0] = b[:, 1]
    ty[:, -1] = -b[:, -2]
    tx *= np.float32(0.5)
    ty *= np.float32(0.5)
    return tx, ty


def _deform_reference(gen: InfiniteMNIST, indices: np.ndarray) -> np.ndarray:
    """Plain numpy implementation of ``gen.images(indices)`` (the reference for the kernel).

    ``x = clip(X[a] + alpha (F[k1] Tx[a] - F[k2] Ty[a]), 0, 255)``, ``+ 0.5`` truncated to uint8,
    shifted by ``SHIFTS[k1 mod 9]`` with zero fill; vectorised over sub-batches of CHUNK images.
    """
    idx = check_indices(indices)
    out = np.zeros((idx.size, SIZE, SIZE), np.uint8)
    for s in range(0, idx.size, CHUNK):
        _deform_reference_chunk(gen, idx[s : s + CHUNK], out[s : s + CHUNK])
    return out


def _deform_reference_chunk(gen: InfiniteMNIST, idx: np.ndarray, out: np.ndarray) -> None:
    """Write the images of idx into out (zeroed uint8 (len(idx), 28, 28))."""
    a = idx % gen.n_base
    k1, k2, alpha = field_indices(idx)
    x = gen.base_images[a].astype(np.float32)
    tx, ty = _tangents_reference(x, gen.blur)
    fields = gen.field_bank
    tx *= fields[k1]
    ty *= fields[k2]
    tx -= ty
    tx *= alpha.astype(np.float32)[:, None, None]
    x += tx
    np.clip(x, 0.0, 255.0, out=x)
    x += np.float32(0.5)  # round half up on truncation to uint8
    y = x.astype(np.uint8)
    shift = k1 % 9
    for s, (dy, dx) in enumerate(SHIFTS):
        sel = np.flatnonzero(shift == s)
        if sel.size == 0:
            continue
        dst_r = slice(max(dy, 0), SIZE + min(dy, 0))
        src_r = slice(max(-dy, 0), SIZE + min(-dy, 0))
        dst_c = slice(max(dx, 0), SIZE + min(dx, 0))
        src_c = slice(max(-dx, 0), SIZE + min(-dx, 0))
        out[sel, dst_r, dst_c] = y[sel, src_r, src_c]


def measure_throughput(gen: InfiniteMNIST, n: int = 20000, batch: int = 2048) -> float:
    """Images per second of ``gen.images`` over ``n`` images in batches of ``batch`` (after a warm-up)."""
    gen.images(np.arange(min(batch, n), dtype=np.int64))
    rng = np.random.default_rng(0)
    start = int(rng.integers(0, 10**9))
    t = time.perf_counter()
    done = 0
    while done < n:
        m = min(batch, n - done)
        gen.images(np.arange(start + done, start + done + m, dtype=np.int64))
        done += m
    return n / (time.perf_counter() - t)
