"""The compiled loop of the fused path: a segment of online VFL rounds in one numba call.

:func:`play_segment` plays rounds ``j0 .. j1-1`` of a stream chunk the way
:func:`fedstream.ovfl.protocol.play_round` does over the plain in-process transport, with no
message, party or transport object in between. It calls the very kernels the parties call
(:mod:`fedstream.models.kernels`, :mod:`fedstream.optim.dlr`, :mod:`fedstream.optim.ogd`), on
arrays of the same shapes, layouts and dtypes, in the same order, so the results are bit for bit
those of the message path (``tests/test_ovfl_fused.py`` checks every optimiser and policy).

Layout of the arguments: the layers of all parties are numbered in one sequence (client 0's
layers, client 1's, ..., the server's); ``first[p] .. first[p + 1] - 1`` are party p's (p = M is
the server). Per layer: weight ``W``, bias ``B``, ``relu``; the forward and backward work
buffers ``OUT``, ``DEL``, ``GIN`` (R rows, R the message rows: SLR's window, else 1); DLR's state
``SB``, ``U``, ``V`` and either ``SW`` (running sum) or ``AS`` (deferred shares, ``deferred[k]``);
``ZD``, ``ZX`` the zero factors of a passive round. Typed lists of arrays, so that one compiled
loop serves every number of clients and layers.

numba's on-disk cache (``cache=True``) is keyed on this file only: after editing a kernel this
module calls, touch this file too, or the fused path keeps the old machine code (the bit-exact
tests of ``tests/test_ovfl_fused.py`` would then fail where the arithmetic changed).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.typed import List

from fedstream.models.kernels import (
    argmax,
    deferred_input_grad,
    dense_backward,
    dense_forward,
    dense_forward_deferred,
    softmax_cross_entropy_into,
)
from fedstream.optim.dlr import dlr_deferred_update, dlr_layer_update
from fedstream.optim.ogd import low_rank_descent
from fedstream.transport.codec import all_finite


@intrinsic
def cycles(typingctx):
    """The CPU's cycle counter (``llvm.readcyclecounter``; 0 where the target has none)."""
    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(64), []),
                                            "llvm.readcyclecounter")
        return builder.call(fn, [])
    return types.int64(), codegen


@njit(cache=True)
def typed_list(arrays):  # pragma: no cover (jit)
    """A typed list of the arrays of a homogeneous tuple, the arrays themselves (no copy). Built
    here, compiled once per (array type, number of arrays) and cached on disk, because a
    ``numba.typed.List`` filled from Python compiles its methods again in every process (about
    0.15 s per item type): a sweep's start-up."""
    out = List()
    for a in arrays:
        out.append(a)
    return out


@njit(cache=True)
def cycle_count():  # pragma: no cover (jit)
    """:func:`cycles` from Python (to calibrate cycles against seconds)."""
    return cycles()


@njit(cache=True)
def _forward(lo, hi, x, W, B, relu, deferred, U, V, AS, OUT):  # pragma: no cover (jit)
    """MLP.forward of the party whose layers are lo .. hi-1, on input ``x``; returns the output."""
    inp = x
    for k in range(lo, hi):
        if deferred[k]:
            dense_forward_deferred(inp, W[k], B[k], relu[k], OUT[k], U[k], V[k], AS[k])
        else:
            dense_forward(inp, W[k], B[k], relu[k], OUT[k])
        inp = OUT[k]
    return inp


@njit(cache=True)
def _backward(lo, hi, g, W, relu, deferred, U, V, AS, OUT, DEL, GIN, need_input_grad):  # pragma: no cover
    """MLP.backward: the deltas of layers lo .. hi-1 from d loss / d output ``g``; returns the
    input gradient of layer lo's input (GIN[lo]; meaningful when ``need_input_grad``)."""
    for k in range(hi - 1, lo - 1, -1):
        need = k > lo or need_input_grad
        dense_backward(g, OUT[k], W[k], relu[k], DEL[k], GIN[k], need)
        if need and deferred[k]:
            deferred_input_grad(DEL[k], U[k], V[k], AS[k], GIN[k])
        g = GIN[k]
    return GIN[lo]


@njit(cache=True)
def _step(lo, hi, x, W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos, alpha, alpha_l,
          scale):  # pragma: no cover (jit)
    """The optimiser's step on layers lo .. hi-1 (layer lo's input ``x``): DLR's ``_push`` or OGD."""
    inp = x
    for k in range(lo, hi):
        if not dlr:
            low_rank_descent(W[k], B[k], DEL[k], inp, scale)
        elif deferred[k]:
            dlr_deferred_update(W[k], B[k], SB[k], U[k], V[k], AS[k], pos, DEL[k], inp, alpha, alpha_l, scale)
        else:
            dlr_layer_update(W[k], B[k], SW[k], SB[k], U[k], V[k], pos, DEL[k], inp, alpha, alpha_l, scale)
        inp = OUT[k]


@njit(cache=True)
def _skip(lo, hi, W, B, ZD, ZX, deferred, SW, AS, SB, U, V, pos, alpha, alpha_l):  # pragma: no cover
    """DLR's ``skip``: a zero gradient enters the window of layers lo .. hi-1, no step."""
    for k in range(lo, hi):
        if deferred[k]:
            dlr_deferred_update(W[k], B[k], SB[k], U[k], V[k], AS[k], pos, ZD[k], ZX[k], alpha, alpha_l, 0.0)
        else:
            dlr_layer_update(W[k], B[k], SW[k], SB[k], U[k], V[k], pos, ZD[k], ZX[k], alpha, alpha_l, 0.0)


@njit(cache=True)
def _put_row(dst, i, src, lo, hi):  # pragma: no cover (jit)
    """dst[i, :] = src[lo:hi], as a loop. Here and below, copies are element loops rather than
    slice assignments: numba compiles each array-to-array assignment with a shape check whose
    error message (string formatting) took about a third of the fused loop's compile time."""
    for j in range(hi - lo):
        dst[i, j] = src[lo + j]


@njit(cache=True)
def _put_cols(dst, c0, src):  # pragma: no cover (jit)
    """dst[:, c0:c0 + src.shape[1]] = src, as a loop."""
    for r in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[r, c0 + j] = src[r, j]


@njit(cache=True)
def _take_cols(dst, src, c0):  # pragma: no cover (jit)
    """dst[:, :] = src[:, c0:c0 + dst.shape[1]], as a loop."""
    for r in range(dst.shape[0]):
        for j in range(dst.shape[1]):
            dst[r, j] = src[r, c0 + j]


@njit(cache=True)
def _scale(a, s):  # pragma: no cover (jit)
    """a *= s (2-D), as a loop."""
    for r in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[r, j] *= s


@njit(cache=True)
def _divide(a, s):  # pragma: no cover (jit)
    """a /= s (2-D), as a loop."""
    for r in range(a.shape[0]):
        for j in range(a.shape[1]):
            a[r, j] /= s


@njit(cache=True)
def _ordered(buf, count, out):  # pragma: no cover (jit)
    """RowWindow.rows() of a full ring ``buf`` (R rows, ``count`` pushed): oldest first, in ``out``."""
    R = buf.shape[0]
    if R == 1:
        return buf
    start = count % R
    for r in range(R):
        src = (start + r) % R
        for j in range(buf.shape[1]):
            out[r, j] = buf[src, j]
    return out


@njit(cache=True)
def play_segment(j0, j1, X, cols, y, mask, first, W, B, relu, deferred, OUT, DEL, GIN, SW, AS, SB, U, V, ZD,
                 ZX, pos, dlr, alpha, alpha_l, scale, INBUF, XR, counts, LBUF, LROWS, H, LOSS, GL, GC,
                 pred, clock):  # pragma: no cover (jit)
    """Rounds j0 .. j1-1 of a chunk (features ``X``, client m's the columns ``cols[m, 0] .. cols[m, 1]-1``;
    labels ``y``; activation ``mask``).

    Writes each round's prediction into ``pred``; advances the input and label rings (``counts``:
    the clients' rows pushed then the server's labels) and DLR's ring positions ``pos`` (per
    party). ``clock`` accumulates cycles in client code [0] and in server code [1]: a client's
    observation, forward passes, skips, backward passes and steps; the server's whole learning
    step. Returns -1, or the first round whose embedding or gradient holds NaN or inf (the
    message path's decoder refuses it there); the state is then partly in that round.
    """
    M = len(INBUF)
    R = LBUF.shape[0]
    e = H.shape[1] // M
    server_in = first[M]
    for j in range(j0, j1):
        c0 = cycles()
        for m in range(M):  # observe
            _put_row(INBUF[m], counts[m] % R, X[j], cols[m, 0], cols[m, 1])
            counts[m] += 1
        for m in range(M):  # activated clients embed, then passive ones answer the query and skip
            if mask[j, m]:
                x = _ordered(INBUF[m], counts[m], XR[m])
                out = _forward(first[m], first[m + 1], x, W, B, relu, deferred, U, V, AS, OUT)
                if not all_finite(out):
                    return j
        for m in range(M):
            if not mask[j, m]:
                x = _ordered(INBUF[m], counts[m], XR[m])
                out = _forward(first[m], first[m + 1], x, W, B, relu, deferred, U, V, AS, OUT)
                if dlr:
                    _skip(first[m], first[m + 1], W, B, ZD, ZX, deferred, SW, AS, SB, U, V, pos[m], alpha,
                          alpha_l)
                    pos[m] = (pos[m] + 1) % U[first[m]].shape[0]
                if not all_finite(out):
                    return j
        for m in range(M):  # the server stacks the embeddings it received (the last layer's outputs)
            _put_cols(H, m * e, OUT[first[m + 1] - 1])
        c1 = cycles()
        LBUF[counts[M] % R, 0] = y[j]
        counts[M] += 1
        labels = _ordered(LBUF, counts[M], LROWS)[:, 0]
        h = H
        logits = _forward(server_in, len(W), h, W, B, relu, deferred, U, V, AS, OUT)
        pred[j] = argmax(logits[R - 1])
        softmax_cross_entropy_into(logits, labels, LOSS, GL)
        g_h = _backward(server_in, len(W), GL, W, relu, deferred, U, V, AS, OUT, DEL, GIN, True)
        if R > 1:
            inv = np.float32(1.0 / R)
            for k in range(server_in, len(W)):
                _scale(DEL[k], inv)
        _step(server_in, len(W), h, W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos[M], alpha, alpha_l,
              scale[M])
        if dlr:
            pos[M] = (pos[M] + 1) % U[server_in].shape[0]
        c2 = cycles()
        for m in range(M):  # the activated clients learn from their gradient
            if mask[j, m]:
                g = GC[m]
                _take_cols(g, g_h, m * e)
                if not all_finite(g):
                    return j
                if R > 1:
                    _divide(g, np.float32(R))
                lo, hi = first[m], first[m + 1]
                x = _ordered(INBUF[m], counts[m], XR[m])  # as embedded: the forward state is still in OUT
                _backward(lo, hi, g, W, relu, deferred, U, V, AS, OUT, DEL, GIN, False)
                _step(lo, hi, x, W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos[m], alpha, alpha_l,
                      scale[m])
                if dlr:
                    pos[m] = (pos[m] + 1) % U[lo].shape[0]
        c3 = cycles()
        clock[0] += (c1 - c0) + (c3 - c2)
        clock[1] += c2 - c1
    return -1


@njit(cache=True)
def floor_segment(j0, j1, X, cols, y, first, W, B, relu, deferred, OUT, DEL, GIN, SW, AS, SB, U, V, pos, dlr,
                  alpha, alpha_l, scale, INBUF, H, LABEL, LOSS, GL, GC, pred):  # pragma: no cover (jit)
    """The kernel-only floor of ``fedstream bench ovfl``: the arithmetic of :func:`play_segment`
    with every client activated and one row per message (OGD, DLR), and nothing else: no
    activation mask, no window skips, no label or input ring beyond the current row, no NaN
    check, no clock. ``LABEL`` is a (1,) int64 buffer. Its models equal the fused path's (tested)."""
    M = len(INBUF)
    e = H.shape[1] // M
    server_in, n = first[M], len(W)
    for j in range(j0, j1):
        for m in range(M):
            _put_row(INBUF[m], 0, X[j], cols[m, 0], cols[m, 1])
            out = _forward(first[m], first[m + 1], INBUF[m], W, B, relu, deferred, U, V, AS, OUT)
            _put_cols(H, m * e, out)
        LABEL[0] = y[j]
        logits = _forward(server_in, n, H, W, B, relu, deferred, U, V, AS, OUT)
        pred[j] = argmax(logits[0])
        softmax_cross_entropy_into(logits, LABEL, LOSS, GL)
        g_h = _backward(server_in, n, GL, W, relu, deferred, U, V, AS, OUT, DEL, GIN, True)
        _step(server_in, n, H, W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos[M], alpha, alpha_l,
              scale[M])
        if dlr:
            pos[M] = (pos[M] + 1) % U[server_in].shape[0]
        for m in range(M):
            lo, hi = first[m], first[m + 1]
            _take_cols(GC[m], g_h, m * e)
            _backward(lo, hi, GC[m], W, relu, deferred, U, V, AS, OUT, DEL, GIN, False)
            _step(lo, hi, INBUF[m], W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos[m], alpha, alpha_l,
                  scale[m])
            if dlr:
                pos[m] = (pos[m] + 1) % U[lo].shape[0]


# -- a deployed party's batch of events (fedstream.ovfl.party_kernels) ------------------------------
@njit(cache=True)
def _copy(dst, src):  # pragma: no cover (jit)
    """dst[:, :] = src (2-D, same shape), as a loop."""
    for r in range(src.shape[0]):
        for j in range(src.shape[1]):
            dst[r, j] = src[r, j]


@njit(cache=True)
def client_embed(X, INBUF, XR, count, W, B, relu, deferred, U, V, AS, OUT, XS, ACTS):  # pragma: no cover
    """A client node's batch of events at the weights of its start: for each row ``X[i]``, observe
    it (the input ring ``INBUF``, ``count`` rows pushed, full) and run the forward pass on the
    window; keep the pass's input in ``XS[i]`` and each layer's output in ``ACTS[k][i]`` (the last:
    the embedding). Returns the rows pushed."""
    R = INBUF.shape[0]
    L = len(W)
    for i in range(X.shape[0]):
        _put_row(INBUF, count % R, X[i], 0, X.shape[1])
        count += 1
        x = _ordered(INBUF, count, XR)
        _forward(0, L, x, W, B, relu, deferred, U, V, AS, OUT)
        _copy(XS[i], x)
        for k in range(L):
            _copy(ACTS[k][i], OUT[k])
    return count


@njit(cache=True)
def client_learn(order, G, XS, ACTS, W, B, relu, deferred, OUT, DEL, GIN, SW, AS, SB, U, V, ZD, ZX, pos, dlr,
                 alpha, alpha_l, scale, GW):  # pragma: no cover (jit)
    """A client node's pending events in round order: ``order[p]`` = -1, a skip (DLR: a zero into the
    window); else the slot of the event's gradient ``G[s]`` and forward state (``XS[s]``, ``ACTS[k][s]``):
    back-propagate (the gradient divided by the window's R rows when R > 1, in ``GW``) and step.
    Returns DLR's ring position."""
    L = len(W)
    R = GW.shape[0]
    for p in range(order.shape[0]):
        s = order[p]
        if s < 0:
            if dlr:
                _skip(0, L, W, B, ZD, ZX, deferred, SW, AS, SB, U, V, pos, alpha, alpha_l)
                pos = (pos + 1) % U[0].shape[0]
            continue
        _copy(GW, G[s])
        if R > 1:
            _divide(GW, np.float32(R))
        for k in range(L):
            _copy(OUT[k], ACTS[k][s])
        _backward(0, L, GW, W, relu, deferred, U, V, AS, OUT, DEL, GIN, False)
        _step(0, L, XS[s], W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos, alpha, alpha_l, scale)
        if dlr:
            pos = (pos + 1) % U[0].shape[0]
    return pos


@njit(cache=True)
def server_events(HS, y, LBUF, LROWS, count, W, B, relu, deferred, OUT, DEL, GIN, SW, AS, SB, U, V, pos, dlr,
                  alpha, alpha_l, scale, LOSS, GL, pred, GH):  # pragma: no cover (jit)
    """The server's learning step of each event j of a batch, as :func:`play_segment`'s server part:
    its stacked embeddings ``HS[j]`` (R rows), label ``y[j]`` into the label ring (``count`` pushed,
    full); the prediction into ``pred[j]``, d loss / d input into ``GH[j]``. Returns (labels pushed,
    DLR's ring position)."""
    R = LBUF.shape[0]
    L = len(W)
    for j in range(HS.shape[0]):
        LBUF[count % R, 0] = y[j]
        count += 1
        labels = _ordered(LBUF, count, LROWS)[:, 0]
        h = HS[j]
        logits = _forward(0, L, h, W, B, relu, deferred, U, V, AS, OUT)
        pred[j] = argmax(logits[R - 1])
        softmax_cross_entropy_into(logits, labels, LOSS, GL)
        g_h = _backward(0, L, GL, W, relu, deferred, U, V, AS, OUT, DEL, GIN, True)
        if R > 1:
            inv = np.float32(1.0 / R)
            for k in range(L):
                _scale(DEL[k], inv)
        _step(0, L, h, W, B, DEL, OUT, dlr, deferred, SW, AS, SB, U, V, pos, alpha, alpha_l, scale)
        if dlr:
            pos = (pos + 1) % U[0].shape[0]
        _copy(GH[j], g_h)
    return count, pos
